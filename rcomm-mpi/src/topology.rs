//! Communicators, processes and groups (rsmpi's `mpi::topology`).

use std::os::raw::c_int;
use std::sync::Arc;

use rcomm::{Comparison, SplitType};

use crate::attribute::{AttrStore, CommAttribute};
use crate::datatype::{Buffer, BufferMut, Datatype, dst_of, src_of};
use crate::{Count, check, fail};

/// A rank in a communicator.
pub type Rank = c_int;
/// The key that orders ranks in `split_by_color_with_key`.
pub type Key = c_int;

enum Inner {
    World(Arc<rcomm::World>),
    Comm(Arc<rcomm::Communicator>),
    Cart(Arc<rcomm::CartComm>),
    Inter(rcomm::InterComm),
}

/// What every communicator object holds: rcomm's communicator and the attributes cached on
/// this object.
#[doc(hidden)]
pub struct CommHandle {
    inner: Inner,
    attrs: AttrStore,
}

// rcomm's communicators are Send + Sync; the attribute store is behind a mutex, but rsmpi's
// attributes need not be `Send`/`Sync` (docs/mpi-coverage.md, "What differs from rsmpi").
unsafe impl Send for CommHandle {}
unsafe impl Sync for CommHandle {}

impl CommHandle {
    pub(crate) fn world(w: Arc<rcomm::World>) -> CommHandle {
        Self::new(Inner::World(w))
    }

    fn new(inner: Inner) -> CommHandle {
        CommHandle {
            inner,
            attrs: AttrStore::default(),
        }
    }

    /// rcomm's communicator.
    pub(crate) fn comm(&self) -> &rcomm::Communicator {
        match &self.inner {
            Inner::World(w) => w,
            Inner::Comm(c) => c,
            Inner::Cart(c) => c.comm(),
            Inner::Inter(c) => c.joint(),
        }
    }

    /// rcomm's communicator for a collective: intercommunicators have none here.
    pub(crate) fn coll_comm(&self) -> &rcomm::Communicator {
        if let Inner::Inter(_) = self.inner {
            fail(&"rcomm-mpi has no collectives on intercommunicators: merge it first");
        }
        self.comm()
    }

    /// (rank, size) of the local group.
    fn local(&self) -> (Rank, Rank) {
        match &self.inner {
            Inner::Inter(c) => (c.rank() as Rank, c.size() as Rank),
            _ => (self.comm().rank() as Rank, self.comm().size() as Rank),
        }
    }

    /// How many ranks `process_at_rank` may name, and the offset from those to rcomm's ranks
    /// (an intercommunicator names the remote group).
    fn peers(&self) -> (Rank, Rank) {
        match &self.inner {
            Inner::Inter(c) => (
                c.remote_size() as Rank,
                c.remote_to_joint(0).map_or(0, |j| j as Rank),
            ),
            _ => (self.comm().size() as Rank, 0),
        }
    }

    fn is_world(&self) -> bool {
        matches!(self.inner, Inner::World(_))
    }
}

/// Access to a communicator object's handle (rsmpi's sealed `AsHandle`).
#[doc(hidden)]
pub trait AsHandle {
    /// The handle.
    fn as_handle(&self) -> &CommHandle;
}

/// Something that is, or refers to, a communicator.
pub trait AsCommunicator {
    /// The communicator's type.
    type Out: Communicator;
    /// The communicator.
    fn as_communicator(&self) -> &Self::Out;
}

/// A plain communicator (`MPI_Comm`).
pub struct SimpleCommunicator(pub(crate) CommHandle);

impl std::fmt::Debug for SimpleCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.0.comm();
        f.debug_struct("SimpleCommunicator")
            .field("rank", &c.rank())
            .field("size", &c.size())
            .finish()
    }
}

impl SimpleCommunicator {
    pub(crate) fn from_handle(h: CommHandle) -> Self {
        SimpleCommunicator(h)
    }

    fn from_comm(c: rcomm::Communicator) -> Self {
        SimpleCommunicator(CommHandle::new(Inner::Comm(Arc::new(c))))
    }

    /// The communicator of all ranks, while the universe lives.
    pub fn world() -> SimpleCommunicator {
        match crate::job::world() {
            Some(w) => SimpleCommunicator(CommHandle::world(w)),
            None => fail(&"SimpleCommunicator::world called outside a universe"),
        }
    }

    /// The communicator of this rank alone (`MPI_COMM_SELF`).
    pub fn self_comm() -> SimpleCommunicator {
        let w = Self::world();
        let r = w.rank();
        w.split_by_color(Color::with_value(r))
            .unwrap_or_else(|| fail(&"self_comm"))
    }

    /// rcomm's communicator underneath, for programs that mix rsmpi calls with rcomm's own.
    pub fn rcomm(&self) -> &rcomm::Communicator {
        self.0.comm()
    }

    /// The communicator's topology (`MPI_Topo_test`): a `SimpleCommunicator` has none
    /// (Cartesian ones are [`CartesianCommunicator`]s).
    pub fn topology(&self) -> Topology {
        match self.0.inner {
            Inner::Cart(_) => Topology::Cartesian,
            _ => Topology::Undefined,
        }
    }

    /// This communicator as the type of its topology.
    pub fn into_topology(self) -> IntoTopology {
        match self.topology() {
            Topology::Cartesian => IntoTopology::Cartesian(CartesianCommunicator(self.0)),
            _ => IntoTopology::Undefined(self),
        }
    }
}

/// A communicator's kind of topology.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Topology {
    /// A graph (`MPI_GRAPH`).
    Graph,
    /// A Cartesian grid (`MPI_CART`).
    Cartesian,
    /// A distributed graph (`MPI_DIST_GRAPH`).
    DistributedGraph,
    /// None (`MPI_UNDEFINED`).
    Undefined,
}

/// A communicator as the type of its topology.
pub enum IntoTopology {
    /// A graph (not made by this API, as in rsmpi).
    Graph(GraphCommunicator),
    /// A Cartesian grid.
    Cartesian(CartesianCommunicator),
    /// A distributed graph (not made by this API, as in rsmpi).
    DistributedGraph(DistributedGraphCommunicator),
    /// No topology.
    Undefined(SimpleCommunicator),
}

/// A graph communicator: a placeholder, as in rsmpi (no call makes one; rcomm's graphs are
/// `rcomm::GraphComm`).
#[allow(missing_copy_implementations)]
pub struct GraphCommunicator;

/// A distributed-graph communicator: a placeholder, as in rsmpi.
#[allow(missing_copy_implementations)]
pub struct DistributedGraphCommunicator;

impl AsHandle for SimpleCommunicator {
    fn as_handle(&self) -> &CommHandle {
        &self.0
    }
}
impl Communicator for SimpleCommunicator {}
impl AsCommunicator for SimpleCommunicator {
    type Out = SimpleCommunicator;
    fn as_communicator(&self) -> &Self::Out {
        self
    }
}

/// A color for `split_by_color`: a value, or undefined (the rank joins no new communicator).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Color(Option<u32>);

impl Color {
    /// The undefined color (`MPI_UNDEFINED`).
    pub fn undefined() -> Color {
        Color(None)
    }

    /// A color value; it must not be negative.
    pub fn with_value(value: c_int) -> Color {
        match u32::try_from(value) {
            Ok(v) => Color(Some(v)),
            Err(_) => fail(&format!("color {value} is negative")),
        }
    }
}

/// How two communicators relate.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum CommunicatorRelation {
    /// The same communicator.
    Identical,
    /// Same ranks in the same order, different contexts.
    Congruent,
    /// Same ranks, different order.
    Similar,
    /// Different ranks.
    Unequal,
}

/// How two groups relate.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum GroupRelation {
    /// Same ranks in the same order.
    Identical,
    /// Same ranks, different order.
    Similar,
    /// Different ranks.
    Unequal,
}

/// MPI's constants (`MPI_IDENT` 0, `MPI_CONGRUENT` 1, `MPI_SIMILAR` 2, `MPI_UNEQUAL` 3, as
/// MPICH and Open MPI define them).
impl From<c_int> for CommunicatorRelation {
    fn from(i: c_int) -> CommunicatorRelation {
        match i {
            0 => CommunicatorRelation::Identical,
            1 => CommunicatorRelation::Congruent,
            2 => CommunicatorRelation::Similar,
            3 => CommunicatorRelation::Unequal,
            _ => panic!("Unknown communicator relation: {i}"),
        }
    }
}

/// MPI's constants (`MPI_IDENT` 0, `MPI_SIMILAR` 2, `MPI_UNEQUAL` 3).
impl From<c_int> for GroupRelation {
    fn from(i: c_int) -> GroupRelation {
        match i {
            0 => GroupRelation::Identical,
            2 => GroupRelation::Similar,
            3 => GroupRelation::Unequal,
            _ => panic!("Unknown group relation: {i}"),
        }
    }
}

fn relation(c: Comparison) -> GroupRelation {
    match c {
        Comparison::Ident => GroupRelation::Identical,
        Comparison::Similar => GroupRelation::Similar,
        _ => GroupRelation::Unequal,
    }
}

fn to_u32(r: Rank) -> u32 {
    u32::try_from(r).unwrap_or_else(|_| fail(&format!("rank {r} is negative")))
}

/// A communicator (rsmpi's `Communicator` trait).
pub trait Communicator: AsHandle {
    /// Number of processes a rank can address: the size, or the remote group's size on an
    /// intercommunicator.
    fn target_size(&self) -> Rank {
        self.as_handle().peers().0
    }

    /// Number of ranks.
    fn size(&self) -> Rank {
        self.as_handle().local().1
    }

    /// This process's rank.
    fn rank(&self) -> Rank {
        self.as_handle().local().0
    }

    /// The process at rank `r` (of the remote group, on an intercommunicator).
    fn process_at_rank(&self, r: Rank) -> Process<'_> {
        let (n, base) = self.as_handle().peers();
        if r < 0 || r >= n {
            fail(&format!(
                "process_at_rank({r}) outside a communicator of {n}"
            ));
        }
        // On an intercommunicator the process is kept by its rank in the joint world, which
        // is what every point-to-point call underneath names.
        Process {
            comm: AnyProcess(self.as_handle()),
            rank: base + r,
        }
    }

    /// Any process (receives and probes from any source).
    fn any_process(&self) -> AnyProcess<'_> {
        AnyProcess(self.as_handle())
    }

    /// This process.
    fn this_process(&self) -> Process<'_> {
        let r = self.rank();
        self.process_at_rank(r)
    }

    /// How this communicator relates to `other` (`MPI_Comm_compare`).
    fn compare(&self, other: &dyn Communicator) -> CommunicatorRelation {
        let (a, b) = (self.as_handle(), other.as_handle());
        if std::ptr::eq(a.comm(), b.comm()) || (a.is_world() && b.is_world()) {
            return CommunicatorRelation::Identical;
        }
        match a.comm().group().compare(&b.comm().group()) {
            Comparison::Ident => CommunicatorRelation::Congruent,
            Comparison::Similar => CommunicatorRelation::Similar,
            _ => CommunicatorRelation::Unequal,
        }
    }

    /// A new communicator with the same ranks (`MPI_Comm_dup`); attributes whose type says
    /// `CLONE_ON_DUP` are cloned onto it.
    fn duplicate(&self) -> SimpleCommunicator {
        let c = SimpleCommunicator::from_comm(check(self.as_handle().comm().dup()));
        self.as_handle().attrs.dup_into(&c.0.attrs);
        c
    }

    /// Splits by color, ordering by rank (`MPI_Comm_split`).
    fn split_by_color(&self, color: Color) -> Option<SimpleCommunicator> {
        self.split_by_color_with_key(color, self.rank())
    }

    /// Splits by color, ordering by `key` then rank.
    fn split_by_color_with_key(&self, color: Color, key: Key) -> Option<SimpleCommunicator> {
        check(self.as_handle().comm().split(color.0, key)).map(SimpleCommunicator::from_comm)
    }

    /// The ranks that share this node (`MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`),
    /// in rank order (`key` is not used).
    fn split_shared(&self, key: c_int) -> SimpleCommunicator {
        let _ = key;
        SimpleCommunicator::from_comm(check(self.as_handle().comm().split_type(SplitType::Node)))
    }

    /// A communicator of `group`'s ranks; collective over this communicator
    /// (`MPI_Comm_create`). Ranks may pass different, disjoint groups.
    fn split_by_subgroup_collective(&self, group: &dyn Group) -> Option<SimpleCommunicator> {
        check(self.as_handle().comm().create(group.raw())).map(SimpleCommunicator::from_comm)
    }

    /// A communicator of `group`'s ranks (`MPI_Comm_create_group`): only the group's members
    /// take part; `None` at once on the others.
    fn split_by_subgroup(&self, group: &dyn Group) -> Option<SimpleCommunicator> {
        self.split_by_subgroup_with_tag(group, 0)
    }

    /// As [`split_by_subgroup`](Self::split_by_subgroup); `tag` tells apart calls that run at
    /// the same time on overlapping groups.
    fn split_by_subgroup_with_tag(
        &self,
        group: &dyn Group,
        tag: crate::Tag,
    ) -> Option<SimpleCommunicator> {
        group.rank()?;
        let c = check(
            self.as_handle()
                .comm()
                .create_group(group.raw(), rcomm::Tag(tag)),
        );
        Some(SimpleCommunicator::from_comm(c))
    }

    /// The communicator's group.
    fn group(&self) -> UserGroup {
        UserGroup(self.as_handle().comm().group())
    }

    /// Ends the job with `errorcode` (`MPI_Abort`).
    fn abort(&self, errorcode: c_int) -> ! {
        self.as_handle()
            .comm()
            .abort(errorcode, &format!("rcomm-mpi: abort({errorcode}) called"))
    }

    /// Whether this is an intercommunicator; rcomm has none.
    fn test_inter(&self) -> bool {
        false
    }

    /// Names the communicator.
    fn set_name(&self, name: &str) {
        self.as_handle().comm().set_name(name)
    }

    /// The communicator's name (`MPI_COMM_WORLD` for the world unless renamed).
    fn get_name(&self) -> String {
        let h = self.as_handle();
        let n = h.comm().name();
        if h.is_world() && (n.is_empty() || n == "world") {
            "MPI_COMM_WORLD".to_string()
        } else {
            n
        }
    }

    /// A Cartesian communicator over the first `dims` product ranks (`MPI_Cart_create`);
    /// `None` on ranks beyond the grid.
    fn create_cartesian_communicator(
        &self,
        dims: &[Count],
        periods: &[bool],
        reorder: bool,
    ) -> Option<CartesianCommunicator> {
        let d: Vec<u32> = dims.iter().map(|&x| to_u32(x)).collect();
        check(self.as_handle().comm().cart_create(&d, periods, reorder))
            .map(|c| CartesianCommunicator(CommHandle::new(Inner::Cart(Arc::new(c)))))
    }

    /// The rank this process would have in a Cartesian grid (`MPI_Cart_map`): rcomm keeps rank
    /// order, so its own rank when inside the grid.
    fn cartesian_map(&self, dims: &[Count], periods: &[bool]) -> Option<Rank> {
        let _ = periods;
        let n: i64 = dims.iter().map(|&d| d as i64).product();
        if (self.rank() as i64) < n {
            Some(self.rank())
        } else {
            None
        }
    }

    /// Bytes `incount` elements of `datatype` take packed (`MPI_Pack_size`).
    fn pack_size<Dt: Datatype>(&self, incount: Count, datatype: &Dt) -> Count
    where
        Self: Sized,
    {
        datatype.dt().packed(incount.max(0) as usize) as Count
    }

    /// Packs a buffer into bytes (`MPI_Pack`).
    fn pack<Buf: ?Sized + Buffer>(&self, inbuf: &Buf) -> Vec<u8>
    where
        Self: Sized,
    {
        src_of(inbuf).bytes().into_owned()
    }

    /// Packs a buffer into `outbuf` at `position`; returns the position after it.
    fn pack_into<Buf: ?Sized + Buffer>(
        &self,
        inbuf: &Buf,
        outbuf: &mut [u8],
        position: Count,
    ) -> Count
    where
        Self: Sized,
    {
        let b = src_of(inbuf).bytes().into_owned();
        let p = position.max(0) as usize;
        if p + b.len() > outbuf.len() {
            fail(&format!(
                "pack_into: {} bytes at {p} do not fit {} bytes",
                b.len(),
                outbuf.len()
            ));
        }
        outbuf[p..p + b.len()].copy_from_slice(&b);
        (p + b.len()) as Count
    }

    /// Unpacks bytes at `position` into a buffer (`MPI_Unpack`); returns the position after.
    ///
    /// # Safety
    /// The bytes must form valid values of the buffer's type.
    unsafe fn unpack_into<Buf: ?Sized + BufferMut>(
        &self,
        inbuf: &[u8],
        outbuf: &mut Buf,
        position: Count,
    ) -> Count
    where
        Self: Sized,
    {
        let d = dst_of(outbuf);
        let p = position.max(0) as usize;
        let n = d.packed_len();
        if p + n > inbuf.len() {
            fail(&format!(
                "unpack_into: {n} bytes at {p} are beyond {} bytes",
                inbuf.len()
            ));
        }
        d.unpack_at(0, &inbuf[p..p + n]);
        (p + n) as Count
    }

    /// In a spawned process, the intercommunicator to the parents (`MPI_Comm_get_parent`).
    fn parent(&self) -> Option<InterCommunicator> {
        let w = crate::job::world()?;
        let ic = w.parent()?.clone();
        Some(InterCommunicator(CommHandle::new(Inner::Inter(ic))))
    }
}

/// Attribute access on any communicator, also through `dyn Communicator`.
pub trait AnyCommunicator: Communicator {
    /// The attribute of type `A`, if set.
    fn get_attr<A: CommAttribute>(&self) -> Option<&A>;
    /// Sets (replaces) the attribute of type `A`.
    fn set_attr<A: CommAttribute>(&mut self, val: A);
}

impl<C: ?Sized + Communicator> AnyCommunicator for C {
    fn get_attr<A: CommAttribute>(&self) -> Option<&A> {
        self.as_handle().attrs.get::<A>()
    }

    /// A replaced value is dropped with the communicator object, not at once (`&C` is a
    /// communicator too, so a reference `get_attr` lent may still be alive).
    fn set_attr<A: CommAttribute>(&mut self, val: A) {
        self.as_handle().attrs.set(val)
    }
}

impl<C: ?Sized + AsHandle> AsHandle for &C {
    fn as_handle(&self) -> &CommHandle {
        (**self).as_handle()
    }
}
impl<C: ?Sized + Communicator> Communicator for &C {}

/// One process of a communicator, as a source, destination or root.
#[derive(Copy, Clone)]
pub struct Process<'a> {
    /// The communicator, as rsmpi keeps it (what `as_communicator` lends).
    pub(crate) comm: AnyProcess<'a>,
    pub(crate) rank: Rank,
}

impl std::fmt::Debug for Process<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process").field("rank", &self.rank).finish()
    }
}

impl Process<'_> {
    /// The process's rank in its communicator (in the remote group, on an intercommunicator).
    pub fn rank(&self) -> Rank {
        self.rank - self.comm.0.peers().1
    }

    /// Whether this is the calling process.
    pub fn is_self(&self) -> bool {
        self.rank == self.comm.0.comm().rank() as Rank
    }
}

impl AsHandle for Process<'_> {
    fn as_handle(&self) -> &CommHandle {
        self.comm.0
    }
}

// As in rsmpi, a process stands for its communicator too: `p.size()`, `p.barrier()`, …
impl Communicator for Process<'_> {}

impl<'a> AsCommunicator for Process<'a> {
    type Out = AnyProcess<'a>;
    fn as_communicator(&self) -> &Self::Out {
        &self.comm
    }
}

/// Any process of a communicator (`MPI_ANY_SOURCE`).
#[derive(Copy, Clone)]
pub struct AnyProcess<'a>(pub(crate) &'a CommHandle);

impl std::fmt::Debug for AnyProcess<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AnyProcess")
    }
}

impl AsHandle for AnyProcess<'_> {
    fn as_handle(&self) -> &CommHandle {
        self.0
    }
}

impl Communicator for AnyProcess<'_> {}

impl AsCommunicator for AnyProcess<'_> {
    type Out = Self;
    fn as_communicator(&self) -> &Self::Out {
        self
    }
}

/// A group of processes (`MPI_Group`).
pub trait Group {
    /// rcomm's group.
    #[doc(hidden)]
    fn raw(&self) -> &rcomm::Group;

    /// Ranks in either group (this one's first).
    fn union<G: ?Sized + Group>(&self, other: &G) -> UserGroup
    where
        Self: Sized,
    {
        UserGroup(self.raw().union(other.raw()))
    }

    /// Ranks in both groups, in this group's order.
    fn intersection<G: ?Sized + Group>(&self, other: &G) -> UserGroup
    where
        Self: Sized,
    {
        UserGroup(self.raw().intersection(other.raw()))
    }

    /// Ranks in this group but not in `other`.
    fn difference<G: ?Sized + Group>(&self, other: &G) -> UserGroup
    where
        Self: Sized,
    {
        UserGroup(self.raw().difference(other.raw()))
    }

    /// The ranks `ranks` of this group, in that order.
    fn include(&self, ranks: &[Rank]) -> UserGroup
    where
        Self: Sized,
    {
        let r: Vec<u32> = ranks.iter().map(|&x| to_u32(x)).collect();
        UserGroup(check(self.raw().incl(&r)))
    }

    /// This group without the ranks `ranks`.
    fn exclude(&self, ranks: &[Rank]) -> UserGroup
    where
        Self: Sized,
    {
        let r: Vec<u32> = ranks.iter().map(|&x| to_u32(x)).collect();
        UserGroup(check(self.raw().excl(&r)))
    }

    /// Number of ranks.
    fn size(&self) -> Rank {
        self.raw().size() as Rank
    }

    /// This process's rank in the group, if it is a member.
    fn rank(&self) -> Option<Rank> {
        self.raw()
            .rank_of(crate::job::world_rank())
            .map(|r| r as Rank)
    }

    /// The rank in `other` of this group's rank `rank`.
    fn translate_rank<G: ?Sized + Group>(&self, rank: Rank, other: &G) -> Option<Rank>
    where
        Self: Sized,
    {
        self.translate_ranks(&[rank], other)[0]
    }

    /// The ranks in `other` of this group's ranks `ranks`.
    fn translate_ranks<G: ?Sized + Group>(&self, ranks: &[Rank], other: &G) -> Vec<Option<Rank>>
    where
        Self: Sized,
    {
        let r: Vec<u32> = ranks.iter().map(|&x| to_u32(x)).collect();
        check(self.raw().translate_ranks(&r, other.raw()))
            .into_iter()
            .map(|x| x.map(|v| v as Rank))
            .collect()
    }

    /// How this group relates to `other`.
    fn compare<G: ?Sized + Group>(&self, other: &G) -> GroupRelation
    where
        Self: Sized,
    {
        relation(self.raw().compare(other.raw()))
    }
}

/// A predefined group (the empty group).
#[derive(Debug, Clone)]
pub struct SystemGroup(rcomm::Group);

impl SystemGroup {
    /// The empty group (`MPI_GROUP_EMPTY`).
    pub fn empty() -> SystemGroup {
        SystemGroup(rcomm::Group::empty())
    }
}

impl Group for SystemGroup {
    fn raw(&self) -> &rcomm::Group {
        &self.0
    }
}

/// A group built by the program.
#[derive(Debug, Clone)]
pub struct UserGroup(rcomm::Group);

impl Group for UserGroup {
    fn raw(&self) -> &rcomm::Group {
        &self.0
    }
}

/// A communicator with a Cartesian topology.
pub struct CartesianCommunicator(CommHandle);

/// Dimensions, periodicity and this process's coordinates in a Cartesian communicator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CartesianLayout {
    /// Extent of each dimension.
    pub dims: Vec<Count>,
    /// Whether each dimension wraps around.
    pub periods: Vec<bool>,
    /// This process's coordinates.
    pub coords: Vec<Count>,
}

impl CartesianCommunicator {
    fn cart(&self) -> &rcomm::CartComm {
        match &self.0.inner {
            Inner::Cart(c) => c,
            _ => unreachable!("a Cartesian communicator holds a CartComm"),
        }
    }

    /// Number of dimensions.
    pub fn num_dimensions(&self) -> Count {
        self.cart().dims().len() as Count
    }

    /// The grid and this process's place in it (`MPI_Cart_get`).
    pub fn get_layout(&self) -> CartesianLayout {
        let c = self.cart();
        CartesianLayout {
            dims: c.dims().iter().map(|&d| d as Count).collect(),
            periods: c.periods().to_vec(),
            coords: self.rank_to_coordinates(c.rank() as Rank),
        }
    }

    /// Writes the grid's dimensions, periodicity and this process's coordinates into slices
    /// of [`num_dimensions`](Self::num_dimensions) entries.
    pub fn get_layout_into(&self, dims: &mut [Count], periods: &mut [bool], coords: &mut [Count]) {
        let l = self.get_layout();
        let n = l.dims.len();
        if dims.len() != n || periods.len() != n || coords.len() != n {
            fail(&format!("get_layout_into: slices must have {n} entries"));
        }
        dims.copy_from_slice(&l.dims);
        periods.copy_from_slice(&l.periods);
        coords.copy_from_slice(&l.coords);
    }

    /// Writes the coordinates of `rank` into `coords`.
    pub fn rank_to_coordinates_into(&self, rank: Rank, coords: &mut [Count]) {
        let c = self.rank_to_coordinates(rank);
        if coords.len() != c.len() {
            fail(&format!(
                "rank_to_coordinates_into: {} entries for {} dimensions",
                coords.len(),
                c.len()
            ));
        }
        coords.copy_from_slice(&c);
    }

    /// The coordinates of `rank` (`MPI_Cart_coords`).
    pub fn rank_to_coordinates(&self, rank: Rank) -> Vec<Count> {
        check(self.cart().coords(to_u32(rank)))
            .into_iter()
            .map(|x| x as Count)
            .collect()
    }

    /// The rank at `coords` (`MPI_Cart_rank`); periodic dimensions wrap.
    pub fn coordinates_to_rank(&self, coords: &[Count]) -> Rank {
        let c: Vec<i64> = coords.iter().map(|&x| x as i64).collect();
        check(self.cart().rank_of(&c)) as Rank
    }

    /// The sources and destinations of a shift by `displacement` along `dimension`
    /// (`MPI_Cart_shift`).
    pub fn shift(&self, dimension: Count, displacement: Count) -> (Option<Rank>, Option<Rank>) {
        let (s, d) = check(self.cart().shift(dimension.max(0) as usize, displacement));
        (s.map(|x| x as Rank), d.map(|x| x as Rank))
    }

    /// The sub-grid keeping the dimensions marked `true` (`MPI_Cart_sub`).
    pub fn subgroup(&self, retain: &[bool]) -> CartesianCommunicator {
        let c = check(self.cart().sub(retain));
        CartesianCommunicator(CommHandle::new(Inner::Cart(Arc::new(c))))
    }

    /// [`get_layout_into`](Self::get_layout_into); rsmpi skips the length checks here, the
    /// facade keeps them (they cost nothing beside the call).
    ///
    /// # Safety
    /// None needed here; `unsafe` as in rsmpi (the slices must have
    /// [`num_dimensions`](Self::num_dimensions) entries).
    pub unsafe fn get_layout_into_unchecked(
        &self,
        dims: &mut [Count],
        periods: &mut [bool],
        coords: &mut [Count],
    ) {
        self.get_layout_into(dims, periods, coords)
    }

    /// [`coordinates_to_rank`](Self::coordinates_to_rank), checked all the same.
    ///
    /// # Safety
    /// None needed here; `unsafe` as in rsmpi.
    pub unsafe fn coordinates_to_rank_unchecked(&self, coords: &[Count]) -> Rank {
        self.coordinates_to_rank(coords)
    }

    /// [`rank_to_coordinates_into`](Self::rank_to_coordinates_into), checked all the same.
    ///
    /// # Safety
    /// None needed here; `unsafe` as in rsmpi.
    pub unsafe fn rank_to_coordinates_into_unchecked(&self, rank: Rank, coords: &mut [Count]) {
        self.rank_to_coordinates_into(rank, coords)
    }

    /// [`shift`](Self::shift), checked all the same.
    ///
    /// # Safety
    /// None needed here; `unsafe` as in rsmpi.
    pub unsafe fn shift_unchecked(
        &self,
        dimension: Count,
        displacement: Count,
    ) -> (Option<Rank>, Option<Rank>) {
        self.shift(dimension, displacement)
    }

    /// [`subgroup`](Self::subgroup), checked all the same.
    ///
    /// # Safety
    /// None needed here; `unsafe` as in rsmpi.
    pub unsafe fn subgroup_unchecked(&self, retain: &[bool]) -> CartesianCommunicator {
        self.subgroup(retain)
    }
}

impl AsHandle for CartesianCommunicator {
    fn as_handle(&self) -> &CommHandle {
        &self.0
    }
}
impl Communicator for CartesianCommunicator {}
impl AsCommunicator for CartesianCommunicator {
    type Out = CartesianCommunicator;
    fn as_communicator(&self) -> &Self::Out {
        self
    }
}

/// Which group comes first when an intercommunicator is merged.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MergeOrder {
    /// This side's ranks first.
    Low,
    /// This side's ranks last.
    High,
}

/// A communicator between two groups: the parents and the children of a spawn. Ranks given
/// to it (`process_at_rank`) name the remote group; `rank` and `size` are the local group's.
/// Point-to-point works; collectives do not (merge first).
pub struct InterCommunicator(CommHandle);

impl InterCommunicator {
    pub(crate) fn new(c: rcomm::InterComm) -> Self {
        InterCommunicator(CommHandle::new(Inner::Inter(c)))
    }

    fn inter(&self) -> &rcomm::InterComm {
        match &self.0.inner {
            Inner::Inter(c) => c,
            _ => unreachable!("an InterCommunicator holds an intercommunicator"),
        }
    }

    /// The size of the remote group (`MPI_Comm_remote_size`).
    pub fn remote_size(&self) -> Rank {
        self.inter().remote_size() as Rank
    }

    /// The intracommunicator of both groups (`MPI_Intercomm_merge`): the group passing
    /// `Low` first. Collective over both groups.
    pub fn merge(&self, order: MergeOrder) -> SimpleCommunicator {
        SimpleCommunicator::from_comm(check(self.inter().merge(order == MergeOrder::High)))
    }
}

impl AsHandle for InterCommunicator {
    fn as_handle(&self) -> &CommHandle {
        &self.0
    }
}
impl Communicator for InterCommunicator {}
impl AsCommunicator for InterCommunicator {
    type Out = InterCommunicator;
    fn as_communicator(&self) -> &Self::Out {
        self
    }
}

/// Useful traits.
pub mod traits {
    pub use super::{AnyCommunicator, AsCommunicator, Communicator, Group};
}
