//! Collectives. Every algorithm produces a [`schedule::Schedule`] (plain data, cached per
//! shape); one executor runs schedules over point-to-point on the communicator's internal
//! context, so collective traffic never meets user messages. Which algorithm runs is a pure
//! function of inputs every rank shares, so ranks never disagree.
//!
//! Why one file: the public collective calls, one plan each; the machinery is in the children.
//!
//! Blocking calls borrow their buffers; the `i`-calls own theirs and return a
//! [`CollRequest`] that hands the result back from `wait`.

pub(crate) mod check;
mod elem_op;
pub(crate) mod exec;
pub(crate) mod hier;
mod lateness;
mod port;
pub(crate) mod progress;
pub(crate) mod reduce;
mod seq;
pub(crate) mod shm;
#[cfg(test)]
mod simtests;
pub(crate) mod tuner;

/// The schedules, a leaf of the crate (`crate::schedule`), under their old path.
pub use crate::schedule;

pub use elem_op::ElemOp;
pub use exec::CollRequest;
pub(crate) use exec::CollShared;
use exec::{ChoiceKey, Post, SchedKey};
pub use rcomm_kernels::{Dtype, Element, Op};
pub(crate) use reduce::Reducer;
pub use reduce::{Order, ReduceOp, UserOp};
use schedule::{NodeLevel, Schedule};

use crate::comm::Communicator;
use crate::{CommError, Result};
use bytemuck::Pod;
use check::{Call, Kind};
use rcomm_runtime::algo::{Algo, Coll};
use std::sync::Arc;

/// How a blocking collective runs: a schedule over messages, or the node's shared memory.
enum Plan {
    Sched(Arc<Schedule>),
    /// With checked mode's registration of the call (made before the windows' setup).
    Shm(Arc<shm::NodeShm>, Option<(crate::comm::Tag, Call)>),
    /// A composition of collectives on the node and cross-node sub-communicators.
    Hier(Arc<hier::Hier>),
}

/// The block sizes of a gathering collective: one for every rank (the plain call, which needs
/// no list), or each rank's own (the v-variant).
#[derive(Clone, Copy)]
enum Counts<'a> {
    Equal(usize),
    Each(&'a [usize]),
}

impl Counts<'_> {
    fn of(self, rank: usize) -> usize {
        match self {
            Counts::Equal(c) => c,
            Counts::Each(cs) => cs[rank],
        }
    }

    fn before(self, rank: usize) -> usize {
        match self {
            Counts::Equal(c) => c * rank,
            Counts::Each(cs) => cs[..rank].iter().sum(),
        }
    }

    fn total(self, n: usize) -> usize {
        self.before(n)
    }
}

fn elems<T>(n: usize) -> usize {
    n * size_of::<T>()
}

fn check_len(what: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(CommError::InvalidArg(format!(
            "{what}: buffer of {got} elements, expected {want}"
        )));
    }
    Ok(())
}

/// MPI's rule for the buffers of the collectives (MPI-3.1 §5.5 `MPI_Gatherv`, §5.6
/// `MPI_Scatterv`, §5.7 `MPI_Allgatherv`, §5.8 `MPI_Alltoall(v)`, §5.9 `MPI_Reduce`/
/// `MPI_Allreduce`, §5.10.1 `MPI_Reduce_scatter`, §5.11 `MPI_Scan`/`MPI_Exscan`): the counts
/// (and, here, the packed rank order) say which elements are sent and where received ones
/// go; a buffer only has to hold them, so one longer than its counts address is used from
/// its start and the rest is left alone (never sent, never written). Where the core's call
/// takes no count, the send slice's length is the count (the receive side may be longer). A
/// shorter buffer is an error before anything moves.
fn fit<'a, T>(what: &str, buf: &'a [T], want: usize) -> Result<&'a [T]> {
    buf.get(..want).ok_or_else(|| short(what, buf.len(), want))
}

/// [`fit`] for a buffer that receives.
fn fit_mut<'a, T>(what: &str, buf: &'a mut [T], want: usize) -> Result<&'a mut [T]> {
    let got = buf.len();
    buf.get_mut(..want).ok_or_else(|| short(what, got, want))
}

/// [`fit`] for an owned buffer: cut to what the counts address.
fn fit_vec<T>(what: &str, mut buf: Vec<T>, want: usize) -> Result<Vec<T>> {
    if buf.len() < want {
        return Err(short(what, buf.len(), want));
    }
    buf.truncate(want);
    Ok(buf)
}

fn short(what: &str, got: usize, want: usize) -> CommError {
    CommError::InvalidArg(format!(
        "{what}: buffer of {got} elements, fewer than the {want} its counts address"
    ))
}

fn need<'a, B: ?Sized>(b: Option<&'a mut B>, what: &str) -> Result<&'a mut B> {
    b.ok_or_else(|| CommError::InvalidArg(format!("{what}: the root must pass a buffer")))
}

impl Communicator {
    /// A handle to this communicator whose collectives of kind `op` (`allreduce`, `bcast`, …,
    /// as in `RCOMM_ALGO`) use algorithm `algo`. Not collective, but every rank must force the
    /// same algorithm for the same collectives (as with `RCOMM_ALGO`). `auto` removes a force.
    pub fn with_algo(&self, op: &str, algo: &str) -> Result<Communicator> {
        let parsed = rcomm_runtime::config::parse_forced(&format!("{op}:{algo}"))
            .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        Ok(parsed
            .into_iter()
            .fold(self.clone(), |c, (op, algo)| c.with_forced(op, algo)))
    }

    /// A handle whose collectives of kind `op` use `algo` (`None`: the tuner's choice, even
    /// where `RCOMM_ALGO` forces one).
    pub(crate) fn with_forced(&self, op: Coll, algo: Option<Algo>) -> Communicator {
        self.with_coll_part(self.coll_part().with_forced(op, algo))
    }

    /// The algorithm forced for `op` on this handle or by `RCOMM_ALGO`.
    pub(crate) fn forced(&self, op: Coll) -> Option<Algo> {
        match self.coll_part().forced_here(op) {
            Some(a) => a,
            None => self.shared().forced_algo(op),
        }
    }

    /// The algorithm for a collective of kind `op` moving `bytes` (the vector, or one block
    /// for the gathering kinds; see [`tuner::Query`]): forced, or the tuner's cheapest. A pure
    /// function of inputs every rank shares (rank 0's measured tuning, the sizes, the op,
    /// `RCOMM_ALGO`/`RCOMM_DETERMINISTIC`, checked equal at init), so ranks never disagree.
    /// A forced algorithm that cannot run this reduction is an error naming the ones that can.
    /// Every collective chooses once: its flight-recorder record begins here.
    fn choose(&self, kind: Coll, bytes: usize, elem: usize, r: Option<&Reducer>) -> Result<Algo> {
        let commutative = r.is_none_or(|r| r.commutative());
        let algo = match self
            .coll_part()
            .memo()
            .get(kind as usize, bytes, elem, commutative)
            .and_then(|c| Algo::from_code(c as u8))
        {
            Some(a) => a,
            None => {
                let algo = self.choose_algo(kind, bytes, elem, r)?;
                self.coll_part().memo().put(
                    kind as usize,
                    bytes,
                    elem,
                    commutative,
                    usize::from(algo.code()),
                );
                algo
            }
        };
        crate::fr::begin_coll(
            self.ctx(),
            kind.name(),
            Some(algo),
            bytes,
            r.map_or((0, 0), Reducer::codes),
        );
        Ok(algo)
    }

    fn choose_algo(
        &self,
        kind: Coll,
        bytes: usize,
        elem: usize,
        r: Option<&Reducer>,
    ) -> Result<Algo> {
        let op = kind.name();
        let forced = self.forced(kind);
        let commutative = r.is_none_or(|r| r.commutative());
        // The choice is a pure function of the key (the tuning and RCOMM_DETERMINISTIC are
        // fixed for the process): computing the model costs more than a small collective.
        let key = ChoiceKey {
            op: kind,
            n: self.size(),
            bytes,
            elem,
            commutative,
            one_node: self.on_one_node(),
            nodes: self.nodes(),
            forced,
        };
        if let Some(a) = self.shared().coll.cached_choice(&key) {
            return Ok(a);
        }
        let one_node = self.on_one_node();
        let q = tuner::Query {
            kind,
            ranks: self.size(),
            bytes,
            elem,
            commutative,
            deterministic: self.shared().deterministic,
            shm: one_node,
            inter_node: !one_node,
            nodes: self.nodes(),
        };
        let choice = tuner::choose(&self.tuning(), &q, forced).map_err(CommError::InvalidArg)?;
        self.shared().coll.remember_choice(key, choice.algo);
        let logging = rcomm_runtime::config::global()
            .as_ref()
            .is_ok_and(|c| c.logs(rcomm_runtime::config::Level::Info, "COLL"));
        // Once per shape: a training loop repeats the same collectives millions of times.
        if logging
            && self
                .shared()
                .coll
                .first_choice(kind, self.size(), bytes, choice.algo)
        {
            rcomm_runtime::rlog!(
                Info,
                "COLL",
                "{op} of {bytes} B on {} ranks{}: {choice}",
                self.size(),
                r.map(|r| format!(" ({})", r.name())).unwrap_or_default()
            );
        }
        Ok(choice.algo)
    }

    fn key(&self, op: &'static str, algo: Algo, root: u32, count: usize, elem: usize) -> SchedKey {
        SchedKey {
            op,
            algo,
            rank: self.rank(),
            n: self.size(),
            root,
            count,
            elem,
        }
    }

    fn check_root(&self, root: u32) -> Result<()> {
        if root >= self.size() {
            return Err(CommError::InvalidRank {
                rank: root,
                size: self.size(),
            });
        }
        Ok(())
    }

    // ---------------------------------------------------------------- plans

    /// The allreduce schedule, or the shared-memory path when it is chosen and usable (only
    /// for blocking calls: a non-blocking one runs `direct`, which combines in the same
    /// canonical order, so the bits are the same).
    fn allreduce_plan(
        &self,
        count: usize,
        elem: usize,
        r: &Reducer,
        blocking: bool,
    ) -> Result<Plan> {
        self.check_note(
            Call::new(Kind::Allreduce)
                .elem(elem)
                .count(count)
                .reducer(r),
        );
        r.check()?;
        let mut algo = self.choose(Coll::Allreduce, count * elem, elem, Some(r))?;
        if algo == Algo::Shm {
            if blocking {
                // Checked mode registers the call before the windows' setup (collective on
                // first use), so a rank that planned otherwise cannot leave the others in it.
                let chk = self.check_shm_call()?;
                if let Some(node) = shm::NodeShm::get_or_setup(self, chk)? {
                    return Ok(Plan::Shm(node, chk));
                }
            }
            algo = tuner::fallback(Coll::Allreduce, algo);
            crate::fr::ran(self.ctx(), algo);
        }
        if algo == Algo::Hier {
            if blocking {
                self.check_composite(true)?;
                return Ok(Plan::Hier(hier::Hier::get_or_setup(self)?));
            }
            // A composition of blocking collectives cannot be resumed step by step; the same
            // levels as one flat schedule can.
            let nodes = self.node_map()?;
            return Ok(Plan::Sched(uncached(
                "allreduce",
                schedule::hier_allreduce(self.rank(), &nodes, count, elem, NodeLevel::Ring),
            )));
        }
        let key = self.key("allreduce", algo, 0, count, elem);
        Ok(Plan::Sched(
            self.shared()
                .coll
                .schedule(key, || tuner::build(Coll::Allreduce, &key)),
        ))
    }

    fn bcast_plan(&self, bytes: usize, root: u32, blocking: bool) -> Result<Plan> {
        self.check_root(root)?;
        let mut algo = self.choose(Coll::Bcast, bytes, 1, None)?;
        crate::fr::set_root(self.ctx(), root);
        if algo == Algo::Shm {
            if blocking {
                let chk = self.check_shm_call()?;
                if let Some(node) = shm::NodeShm::get_or_setup(self, chk)? {
                    return Ok(Plan::Shm(node, chk));
                }
            }
            algo = tuner::fallback(Coll::Bcast, algo);
            crate::fr::ran(self.ctx(), algo);
        }
        if algo == Algo::Hier {
            if blocking {
                self.check_composite(true)?;
                let h = hier::Hier::get_or_setup(self)?;
                if h.regular() {
                    return Ok(Plan::Hier(h));
                }
            }
            // Non-blocking, or nodes of unequal sizes (the composition needs every node to
            // have a rank of the root's local index; the schedule does not).
            let nodes = self.node_map()?;
            return Ok(Plan::Sched(uncached(
                "bcast",
                schedule::hier_bcast(self.rank(), &nodes, root, bytes),
            )));
        }
        let key = self.key("bcast", algo, root, bytes, 1);
        Ok(Plan::Sched(
            self.shared()
                .coll
                .schedule(key, || tuner::build(Coll::Bcast, &key)),
        ))
    }

    /// Reduce to `root` over a working buffer of `count` elements (the result lands in the
    /// root's working buffer).
    fn reduce_plan(
        &self,
        count: usize,
        elem: usize,
        r: &Reducer,
        root: u32,
    ) -> Result<Arc<Schedule>> {
        self.check_note(
            Call::new(Kind::Reduce)
                .elem(elem)
                .count(count)
                .reducer(r)
                .root(root),
        );
        self.check_root(root)?;
        r.check()?;
        let algo = self.choose(Coll::Reduce, count * elem, elem, Some(r))?;
        crate::fr::set_root(self.ctx(), root);
        // The plain tree combines in rotated order from the root: fine for commutative ops.
        let algo = if algo == Algo::Tree && !r.commutative() {
            Algo::TreeOrdered
        } else {
            algo
        };
        let key = self.key("reduce", algo, root, count, elem);
        Ok(self
            .shared()
            .coll
            .schedule(key, || tuner::build(Coll::Reduce, &key)))
    }

    /// The plan of an allgather into a buffer laid out as `counts`: shared memory or the
    /// composition (`hier`) only for a blocking call with equal blocks, else a schedule (the
    /// ring unless Bruck was chosen for equal blocks; the record says which ran) that expects
    /// the own block already in place.
    fn allgather_plan(&self, counts: Counts<'_>, elem: usize, blocking: bool) -> Result<Plan> {
        let n = self.size() as usize;
        let equal = match counts {
            Counts::Equal(c) => {
                self.check_note(Call::new(Kind::Allgather).elem(elem).count(c));
                Some(c)
            }
            Counts::Each(cs) => {
                self.check_note(Call::new(Kind::Allgather).elem(elem).counts(cs));
                check_len("allgather counts", cs.len(), n)?;
                cs.iter().all(|&c| c == cs[0]).then(|| cs[0])
            }
        };
        let chosen = self.choose(Coll::Allgather, counts.of(0) * elem, elem, None)?;
        if blocking && equal.is_some() {
            if chosen == Algo::Shm {
                let chk = self.check_shm_call()?;
                if let Some(node) = shm::NodeShm::get_or_setup(self, chk)? {
                    return Ok(Plan::Shm(node, chk));
                }
            }
            if chosen == Algo::Hier {
                self.check_composite(true)?;
                let h = hier::Hier::get_or_setup(self)?;
                if h.regular() {
                    return Ok(Plan::Hier(h));
                }
            }
        }
        if chosen == Algo::Hier
            && let Some(count) = equal
            && let Some(s) = schedule::hier_allgather(self.rank(), &self.node_map()?, count * elem)
        {
            return Ok(Plan::Sched(uncached("allgather", s)));
        }
        // shm, and hier on nodes of unequal sizes or with unequal blocks, are the ring.
        let algo = tuner::fallback(Coll::Allgather, chosen);
        // Bruck needs equal blocks; unequal ones run the ring.
        let ran = if equal.is_some() { algo } else { Algo::Ring };
        if ran != chosen {
            crate::fr::ran(self.ctx(), ran);
        }
        if let Some(count) = equal {
            let key = self.key("allgather", algo, 0, count, elem);
            return Ok(Plan::Sched(
                self.shared()
                    .coll
                    .schedule(key, || tuner::build(Coll::Allgather, &key)),
            ));
        }
        let Counts::Each(cs) = counts else {
            unreachable!("equal counts returned above")
        };
        let blocks = schedule::packed_blocks(cs, elem);
        Ok(Plan::Sched(uncached(
            "allgather",
            schedule::ring_allgather_v(self.rank(), &blocks),
        )))
    }

    /// The algorithm of a reduce-scatter over `counts` (the call's checks first).
    fn reduce_scatter_algo(&self, counts: &[usize], elem: usize, r: &Reducer) -> Result<Algo> {
        self.check_note(
            Call::new(Kind::ReduceScatter)
                .elem(elem)
                .counts(counts)
                .reducer(r),
        );
        r.check()?;
        let n = self.size() as usize;
        check_len("reduce_scatter counts", counts.len(), n)?;
        let total: usize = counts.iter().sum();
        self.choose(Coll::ReduceScatter, total * elem, elem, Some(r))
    }

    /// The schedule of a reduce-scatter over a working buffer laid out as `counts` (block
    /// `rank` ends reduced), built only when one runs. `hier` and `shm` are run by the blocking
    /// call itself when it can (and says so); the schedule is their fallback: `direct` for
    /// `shm` (both combine in rank order), else the ring.
    fn reduce_scatter_sched(
        &self,
        counts: &[usize],
        elem: usize,
        algo: Algo,
    ) -> Result<Arc<Schedule>> {
        if algo == Algo::Hier
            && counts.iter().all(|&c| c == counts[0])
            && let Some(s) =
                schedule::hier_reduce_scatter(self.rank(), &self.node_map()?, counts[0] * elem)
        {
            return Ok(uncached("reduce_scatter", s));
        }
        let fallback = tuner::fallback(Coll::ReduceScatter, algo);
        crate::fr::ran(self.ctx(), fallback);
        let blocks = schedule::packed_blocks(counts, elem);
        Ok(uncached(
            "reduce_scatter",
            match fallback {
                Algo::Direct => schedule::direct_reduce_scatter_v(self.rank(), &blocks),
                _ => schedule::ring_reduce_scatter_v(self.rank(), &blocks),
            },
        ))
    }

    /// Which ranks share a node, for the composed hierarchical schedules (built per call:
    /// the schedule cache's key does not carry the node map).
    pub(crate) fn node_map(&self) -> Result<schedule::Nodes> {
        let colours = (0..self.size())
            .map(|r| Ok(self.shared().node_of[self.world_rank(r)? as usize]))
            .collect::<Result<Vec<u32>>>()?;
        Ok(schedule::Nodes::from_colours(&colours))
    }

    /// The plan of an all-to-all: shared memory only for a blocking `alltoall` (`windows`),
    /// else a schedule (and the record says which ran).
    fn alltoall_plan(
        &self,
        send_counts: &[usize],
        recv_counts: &[usize],
        elem: usize,
        windows: bool,
    ) -> Result<Plan> {
        let n = self.size() as usize;
        // Per-pair counts differ between ranks by design: only the element size must agree.
        self.check_note(Call::new(Kind::Alltoall).elem(elem));
        check_len("alltoall send counts", send_counts.len(), n)?;
        check_len("alltoall recv counts", recv_counts.len(), n)?;
        let algo = self.choose(Coll::Alltoall, send_counts[0] * elem, elem, None)?;
        let equal = send_counts
            .iter()
            .chain(recv_counts)
            .all(|&c| c == send_counts[0]);
        if algo == Algo::Shm && windows {
            let chk = self.check_shm_call()?;
            if let Some(node) = shm::NodeShm::get_or_setup(self, chk)? {
                return Ok(Plan::Shm(node, chk));
            }
        }
        if algo == Algo::Bruck && equal {
            let key = self.key("alltoall", algo, 0, send_counts[0], elem);
            return Ok(Plan::Sched(
                self.shared()
                    .coll
                    .schedule(key, || tuner::build(Coll::Alltoall, &key)),
            ));
        }
        crate::fr::ran(self.ctx(), Algo::Pairwise);
        Ok(Plan::Sched(uncached(
            "alltoall",
            schedule::pairwise_alltoall_v(
                self.rank(),
                &schedule::packed_blocks(send_counts, elem),
                &schedule::packed_blocks(recv_counts, elem),
            ),
        )))
    }

    fn scan_plan(
        &self,
        count: usize,
        elem: usize,
        r: &Reducer,
        exclusive: bool,
    ) -> Result<Arc<Schedule>> {
        let kind = if exclusive { Kind::Exscan } else { Kind::Scan };
        self.check_note(Call::new(kind).elem(elem).count(count).reducer(r));
        if r.builtin() == Some(Op::Avg) {
            return Err(CommError::InvalidArg("scan with Avg is not defined".into()));
        }
        r.check()?;
        let algo = self.choose(Coll::Scan, count * elem, elem, Some(r))?;
        let algo = if exclusive { Algo::ExscanChain } else { algo };
        let key = self.key("scan", algo, 0, count, elem);
        Ok(self
            .shared()
            .coll
            .schedule(key, || tuner::build(Coll::Scan, &key)))
    }

    // ---------------------------------------------------------------- allreduce

    /// Combines `buf` element-wise across all ranks with `op` (a built-in [`Op`] or a
    /// [`UserOp`]); every rank gets the result, with bitwise identical bytes on every rank.
    /// Collective; every rank passes the same length.
    pub fn allreduce_in_place<T: Pod + Send>(
        &self,
        buf: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        self.allreduce_bytes(
            bytemuck::cast_slice_mut(buf),
            None,
            size_of::<T>(),
            op.into().0,
        )
    }

    /// `recv = send ⊕ …` across all ranks (out of place).
    pub fn allreduce<T: Pod + Send>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        let recv = fit_mut("allreduce recv", recv, send.len())?;
        let (recv, send) = (bytemuck::cast_slice_mut(recv), bytemuck::cast_slice(send));
        self.allreduce_bytes(recv, Some(send), size_of::<T>(), op.into().0)
    }

    /// Allreduce into `data` (elements of `elem` bytes), from `input` when given (else in
    /// place).
    pub(crate) fn allreduce_bytes(
        &self,
        data: &mut [u8],
        input: Option<&[u8]>,
        elem: usize,
        r: Reducer,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        match self.allreduce_plan(data.len() / elem.max(1), elem, &r, true)? {
            Plan::Sched(sched) => {
                if let Some(i) = input {
                    data.copy_from_slice(i);
                }
                self.run_schedule(&sched, data, &[], Some(&r))?
            }
            Plan::Shm(node, chk) => {
                node.allreduce_sig(self, data, input, elem, r.signature(), &r, chk)?
            }
            Plan::Hier(h) => {
                if let Some(i) = input {
                    data.copy_from_slice(i);
                }
                let t0 = self.straggler_start();
                let res = h.allreduce(data, elem, &r.sum_form());
                self.straggler_end(t0);
                crate::fr::end_coll(self.ctx(), &res);
                res?
            }
        }
        r.finalize(data, self.size() as usize)
    }

    /// Starts an allreduce of `buf` and returns at once; `wait` hands back the result (see
    /// [`allreduce_in_place`](Self::allreduce_in_place)). Bitwise equal to the blocking call's
    /// result, except where the blocking call would compose sub-communicator collectives
    /// (`hier`): a non-blocking one runs the same levels as one composed schedule
    /// (`schedule::hier_allreduce`, rings in the node and across), whose inner algorithms may
    /// combine floats in another order than the sub-communicators' own choices. Where the blocking call uses shared memory, this one runs `direct`, which
    /// combines in the same canonical order.
    pub fn iallreduce<T: Pod + Send + 'static>(
        &self,
        buf: Vec<T>,
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<T>> {
        let _fr = crate::fr::Scope::enter();
        let r = op.into().0;
        let Plan::Sched(sched) = self.allreduce_plan(buf.len(), size_of::<T>(), &r, false)? else {
            unreachable!("non-blocking plans are schedules")
        };
        CollRequest::start(self, sched, buf, Vec::new(), Some(r), Post::Whole)
    }

    // ---------------------------------------------------------------- bcast

    /// Sends `buf` from `root` to every rank. Collective; every rank passes the same length.
    pub fn bcast<T: Pod>(&self, buf: &mut [T], root: u32) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        self.check_note(bcast_call::<T>(buf.len(), root));
        match self.bcast_plan(size_of_val(buf), root, true)? {
            Plan::Sched(sched) => {
                self.run_schedule(&sched, bytemuck::cast_slice_mut(buf), &[], None)
            }
            Plan::Shm(node, chk) => node.bcast(self, bytemuck::cast_slice_mut(buf), root, chk),
            Plan::Hier(h) => {
                let t0 = self.straggler_start();
                let res = h.bcast(bytemuck::cast_slice_mut(buf), root);
                self.straggler_end(t0);
                crate::fr::end_coll(self.ctx(), &res);
                res
            }
        }
    }

    /// Starts a broadcast of `buf` from `root`; `wait` hands back the root's data.
    pub fn ibcast<T: Pod + Send + 'static>(
        &self,
        buf: Vec<T>,
        root: u32,
    ) -> Result<CollRequest<T>> {
        let _fr = crate::fr::Scope::enter();
        self.check_note(bcast_call::<T>(buf.len(), root));
        let Plan::Sched(sched) = self.bcast_plan(size_of_val(&buf[..]), root, false)? else {
            unreachable!("non-blocking plans are schedules")
        };
        CollRequest::start(self, sched, buf, Vec::new(), None, Post::Whole)
    }

    // ---------------------------------------------------------------- reduce

    /// Combines `send` across all ranks with `op` into `recv` on `root` (other ranks pass
    /// `None`). Collective.
    pub fn reduce<T: Pod + Send>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        op: impl Into<ReduceOp<T>>,
        root: u32,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let r = op.into().0;
        let sched = self.reduce_plan(send.len(), size_of::<T>(), &r, root)?;
        if self.rank() == root {
            let recv = need(recv, "reduce")?;
            let recv = fit_mut("reduce recv", recv, send.len())?;
            recv.copy_from_slice(send);
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(recv);
            self.run_schedule(&sched, bytes, &[], Some(&r))?;
            r.finalize(bytes, self.size() as usize)
        } else {
            let mut work = self.shared().coll.take_scratch(size_of_val(send));
            let bytes = &mut work[..size_of_val(send)];
            bytes.copy_from_slice(bytemuck::cast_slice(send));
            let res = self.run_schedule(&sched, bytes, &[], Some(&r));
            self.shared().coll.put_scratch(work);
            res
        }
    }

    /// In-place reduce: on `root`, `buf` holds its contribution and receives the result; on
    /// the other ranks `buf` is their contribution and is left unchanged. Collective.
    pub fn reduce_in_place<T: Pod + Send>(
        &self,
        buf: &mut [T],
        op: impl Into<ReduceOp<T>>,
        root: u32,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        if self.rank() == root {
            let r = op.into().0;
            let sched = self.reduce_plan(buf.len(), size_of::<T>(), &r, root)?;
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
            self.run_schedule(&sched, bytes, &[], Some(&r))?;
            r.finalize(bytes, self.size() as usize)
        } else {
            self.reduce(buf, None, op, root)
        }
    }

    /// Starts a reduce to `root`; `wait` hands the result back on the root and an empty vector
    /// elsewhere.
    pub fn ireduce<T: Pod + Send + 'static>(
        &self,
        send: Vec<T>,
        op: impl Into<ReduceOp<T>>,
        root: u32,
    ) -> Result<CollRequest<T>> {
        let _fr = crate::fr::Scope::enter();
        let r = op.into().0;
        let sched = self.reduce_plan(send.len(), size_of::<T>(), &r, root)?;
        let post = if self.rank() == root {
            Post::Whole
        } else {
            Post::Nothing
        };
        CollRequest::start(self, sched, send, Vec::new(), Some(r), post)
    }

    // ---------------------------------------------------------------- allgather

    /// Every rank's `send` block, concatenated in rank order, into every rank's `recv`
    /// (`size × send.len()` elements). Collective.
    pub fn allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.allgather_counts(send, recv, Counts::Equal(send.len()))
    }

    /// In-place allgather: `buf` holds `size` blocks and this rank's block is already in place.
    pub fn allgather_in_place<T: Pod>(&self, buf: &mut [T]) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let n = self.size() as usize;
        if !buf.len().is_multiple_of(n) {
            return Err(CommError::InvalidArg(format!(
                "allgather: {} elements are not {n} equal blocks",
                buf.len()
            )));
        }
        let Plan::Sched(sched) =
            self.allgather_plan(Counts::Equal(buf.len() / n), size_of::<T>(), false)?
        else {
            unreachable!("non-blocking plans are schedules")
        };
        self.run_schedule(&sched, bytemuck::cast_slice_mut(buf), &[], None)
    }

    /// Like [`allgather`](Self::allgather) with `counts[i]` elements from rank i, packed in rank
    /// order in `recv` (every rank passes the same `counts`). Collective.
    pub fn allgatherv<T: Pod>(&self, send: &[T], recv: &mut [T], counts: &[usize]) -> Result<()> {
        check_len("allgatherv counts", counts.len(), self.size() as usize)?;
        self.allgather_counts(send, recv, Counts::Each(counts))
    }

    fn allgather_counts<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: Counts<'_>,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let (n, r) = (self.size() as usize, self.rank() as usize);
        let send = fit("allgatherv send", send, counts.of(r))?;
        let recv = fit_mut("allgatherv recv", recv, counts.total(n))?;
        match self.allgather_plan(counts, size_of::<T>(), true)? {
            Plan::Shm(node, chk) => node.allgather(
                self,
                bytemuck::cast_slice(send),
                bytemuck::cast_slice_mut(recv),
                chk,
            ),
            Plan::Hier(h) => {
                let t0 = self.straggler_start();
                let res = h.allgather(bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
                self.straggler_end(t0);
                crate::fr::end_coll(self.ctx(), &res);
                res
            }
            Plan::Sched(sched) => {
                let off = counts.before(r);
                recv[off..off + send.len()].copy_from_slice(send);
                self.run_schedule(&sched, bytemuck::cast_slice_mut(recv), &[], None)
            }
        }
    }

    /// Starts an allgather; `wait` hands back the `size × send.len()` elements.
    pub fn iallgather<T: Pod + Send + 'static>(&self, send: Vec<T>) -> Result<CollRequest<T>> {
        let counts = vec![send.len(); self.size() as usize];
        self.iallgatherv(send, &counts)
    }

    /// Starts an allgatherv (see [`allgatherv`](Self::allgatherv)).
    pub fn iallgatherv<T: Pod + Send + 'static>(
        &self,
        send: Vec<T>,
        counts: &[usize],
    ) -> Result<CollRequest<T>> {
        let _fr = crate::fr::Scope::enter();
        let (n, r) = (self.size() as usize, self.rank() as usize);
        check_len("allgatherv counts", counts.len(), n)?;
        let send = fit_vec("allgatherv send", send, counts[r])?;
        let off: usize = counts[..r].iter().sum();
        let mut data = vec![T::zeroed(); counts.iter().sum()];
        data[off..off + send.len()].copy_from_slice(&send);
        let Plan::Sched(sched) =
            self.allgather_plan(Counts::Each(counts), size_of::<T>(), false)?
        else {
            unreachable!("non-blocking plans are schedules")
        };
        CollRequest::start(self, sched, data, Vec::new(), None, Post::Whole)
    }

    // ---------------------------------------------------------------- reduce_scatter

    /// Reduces `send` (`size` blocks of `recv.len()` elements) across ranks and leaves block
    /// `rank` of the result in `recv`. Collective.
    pub fn reduce_scatter<T: Pod + Send>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        let n = self.size() as usize;
        let send = fit("reduce_scatter send", send, n * recv.len())?;
        self.reduce_scatter_v(send, recv, &vec![recv.len(); n], op)
    }

    /// In-place reduce-scatter: `buf` holds `size` equal blocks; afterwards block `rank` holds
    /// this rank's reduced block (the other blocks are scratch). Collective.
    pub fn reduce_scatter_in_place<T: Pod + Send>(
        &self,
        buf: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let n = self.size() as usize;
        if !buf.len().is_multiple_of(n) {
            return Err(CommError::InvalidArg(format!(
                "reduce_scatter: {} elements are not {n} equal blocks",
                buf.len()
            )));
        }
        let r = op.into().0;
        let b = buf.len() / n;
        let counts = vec![b; n];
        let algo = self.reduce_scatter_algo(&counts, size_of::<T>(), &r)?;
        let sched = self.reduce_scatter_sched(&counts, size_of::<T>(), algo)?;
        self.run_schedule(&sched, bytemuck::cast_slice_mut(buf), &[], Some(&r))?;
        let me = self.rank() as usize;
        r.finalize(bytemuck::cast_slice_mut(&mut buf[me * b..(me + 1) * b]), n)
    }

    /// Reduces `send` (`counts.iter().sum()` elements) across ranks and leaves the `counts[rank]`
    /// elements of this rank's block in `recv`. Collective.
    pub fn reduce_scatter_v<T: Pod + Send>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let r = op.into().0;
        let (n, me) = (self.size() as usize, self.rank() as usize);
        check_len("reduce_scatter_v counts", counts.len(), n)?;
        let send = fit("reduce_scatter_v send", send, counts.iter().sum())?;
        let recv = fit_mut("reduce_scatter_v recv", recv, counts[me])?;
        let algo = self.reduce_scatter_algo(counts, size_of::<T>(), &r)?;
        // The counts are the same on every rank (MPI's contract), so all take the same branch.
        let equal = counts.iter().all(|&c| c == counts[0]);
        if algo == Algo::Shm && equal {
            let chk = self.check_shm_call()?;
            if let Some(node) = shm::NodeShm::get_or_setup(self, chk)? {
                crate::fr::ran(self.ctx(), algo);
                let out: &mut [u8] = bytemuck::cast_slice_mut(recv);
                node.reduce_scatter(
                    self,
                    bytemuck::cast_slice(send),
                    out,
                    size_of::<T>(),
                    r.signature(),
                    &r,
                    chk,
                )?;
                return r.finalize(out, n);
            }
        }
        if algo == Algo::Hier && equal {
            self.check_composite(true)?;
            let h = hier::Hier::get_or_setup(self)?;
            if h.regular() {
                crate::fr::ran(self.ctx(), algo);
                let out: &mut [u8] = bytemuck::cast_slice_mut(recv);
                let t0 = self.straggler_start();
                let res = h.reduce_scatter(bytemuck::cast_slice(send), out, &r.sum_form());
                self.straggler_end(t0);
                crate::fr::end_coll(self.ctx(), &res);
                res?;
                return r.finalize(out, n);
            }
        }
        let sched = self.reduce_scatter_sched(counts, size_of::<T>(), algo)?;
        if tuner::fallback(Coll::ReduceScatter, algo) == Algo::Direct {
            // Straight from the input into the output block: no working copy (the direct
            // schedule, which is also the windows' fallback).
            let off = elems::<T>(counts[..me].iter().sum());
            let oop = out_of_place_block(&sched, off, elems::<T>(counts[me]));
            let out: &mut [u8] = bytemuck::cast_slice_mut(recv);
            self.run_schedule(&oop, out, bytemuck::cast_slice(send), Some(&r))?;
            return r.finalize(out, n);
        }
        let len = size_of_val(send);
        let mut work = self.shared().coll.take_scratch(len);
        work[..len].copy_from_slice(bytemuck::cast_slice(send));
        let res = self.run_schedule(&sched, &mut work[..len], &[], Some(&r));
        if res.is_ok() {
            let off = elems::<T>(counts[..me].iter().sum());
            let out: &mut [u8] = bytemuck::cast_slice_mut(recv);
            out.copy_from_slice(&work[off..off + out.len()]);
        }
        self.shared().coll.put_scratch(work);
        res?;
        r.finalize(bytemuck::cast_slice_mut(recv), n)
    }

    /// Starts a reduce-scatter of `send` (`size` equal blocks); `wait` hands back this rank's
    /// reduced block.
    pub fn ireduce_scatter<T: Pod + Send + 'static>(
        &self,
        send: Vec<T>,
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<T>> {
        let n = self.size() as usize;
        if !send.len().is_multiple_of(n) {
            return Err(CommError::InvalidArg(format!(
                "reduce_scatter: {} elements are not {n} equal blocks",
                send.len()
            )));
        }
        let counts = vec![send.len() / n; n];
        self.ireduce_scatter_v(send, &counts, op)
    }

    /// Starts a reduce-scatter with `counts[i]` elements in rank i's block.
    pub fn ireduce_scatter_v<T: Pod + Send + 'static>(
        &self,
        send: Vec<T>,
        counts: &[usize],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<T>> {
        let _fr = crate::fr::Scope::enter();
        let r = op.into().0;
        let (n, me) = (self.size() as usize, self.rank() as usize);
        check_len("reduce_scatter_v counts", counts.len(), n)?;
        let send = fit_vec("reduce_scatter_v send", send, counts.iter().sum())?;
        let algo = self.reduce_scatter_algo(counts, size_of::<T>(), &r)?;
        let sched = self.reduce_scatter_sched(counts, size_of::<T>(), algo)?;
        let off = counts[..me].iter().sum();
        CollRequest::start(
            self,
            sched,
            send,
            Vec::new(),
            Some(r),
            Post::Range(off, counts[me]),
        )
    }

    // ---------------------------------------------------------------- gather / scatter

    /// Every rank's `send` block, in rank order, into `recv` on `root` (`size × send.len()`
    /// elements; other ranks pass `None`). Collective.
    pub fn gather<T: Pod>(&self, send: &[T], recv: Option<&mut [T]>, root: u32) -> Result<()> {
        self.gatherv(send, recv, &vec![send.len(); self.size() as usize], root)
    }

    fn gather_plan(&self, counts: &[usize], elem: usize, root: u32) -> Result<Arc<Schedule>> {
        self.rooted_plan("gather", counts, elem, root)
    }

    fn scatter_plan(&self, counts: &[usize], elem: usize, root: u32) -> Result<Arc<Schedule>> {
        self.rooted_plan("scatter", counts, elem, root)
    }

    /// Gather (`op` = "gather") or scatter: the binomial tree for equal blocks when chosen,
    /// else linear (also the v-variants').
    fn rooted_plan(
        &self,
        op: &'static str,
        counts: &[usize],
        elem: usize,
        root: u32,
    ) -> Result<Arc<Schedule>> {
        // Only the root needs every count (gatherv, scatterv): counts are not compared.
        let kind = if op == "gather" {
            Kind::Gather
        } else {
            Kind::Scatter
        };
        self.check_note(Call::new(kind).elem(elem).root(root));
        self.check_root(root)?;
        check_len(op, counts.len(), self.size() as usize)?;
        let tk = if op == "gather" {
            Coll::Gather
        } else {
            Coll::Scatter
        };
        let algo = self.choose(tk, counts[0] * elem, elem, None)?;
        crate::fr::set_root(self.ctx(), root);
        let gather = op == "gather";
        if algo == Algo::Tree && counts.iter().all(|&c| c == counts[0]) {
            let key = self.key(op, algo, root, counts[0], elem);
            return Ok(self.shared().coll.schedule(key, || tuner::build(tk, &key)));
        }
        let blocks = schedule::packed_blocks(counts, elem);
        crate::fr::ran(self.ctx(), Algo::Linear);
        Ok(uncached(
            op,
            if gather {
                schedule::linear_gather_v(self.rank(), root, &blocks)
            } else {
                schedule::linear_scatter_v(self.rank(), root, &blocks)
            },
        ))
    }

    /// Like [`gather`](Self::gather) with `counts[i]` elements from rank i (the root needs
    /// every count; others only their own). Collective.
    pub fn gatherv<T: Pod>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        counts: &[usize],
        root: u32,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let sched = self.gather_plan(counts, size_of::<T>(), root)?;
        let r = self.rank() as usize;
        let send = fit("gatherv send", send, counts[r])?;
        if self.rank() == root {
            let recv = need(recv, "gatherv")?;
            let recv = fit_mut("gatherv recv", recv, counts.iter().sum())?;
            let off: usize = counts[..r].iter().sum();
            recv[off..off + send.len()].copy_from_slice(send);
            // The root's own block is also the input (tree gathers copy it themselves).
            self.run_schedule(
                &sched,
                bytemuck::cast_slice_mut(recv),
                bytemuck::cast_slice(send),
                None,
            )
        } else {
            self.run_schedule(&sched, &mut [], bytemuck::cast_slice(send), None)
        }
    }

    /// Starts a gather; `wait` hands back the `size × send.len()` elements on the root and an
    /// empty vector elsewhere.
    pub fn igather<T: Pod + Send + 'static>(
        &self,
        send: Vec<T>,
        root: u32,
    ) -> Result<CollRequest<T>> {
        let counts = vec![send.len(); self.size() as usize];
        self.igatherv(send, &counts, root)
    }

    /// Starts a gatherv (see [`gatherv`](Self::gatherv)).
    pub fn igatherv<T: Pod + Send + 'static>(
        &self,
        send: Vec<T>,
        counts: &[usize],
        root: u32,
    ) -> Result<CollRequest<T>> {
        let _fr = crate::fr::Scope::enter();
        let sched = self.gather_plan(counts, size_of::<T>(), root)?;
        let r = self.rank() as usize;
        let send = fit_vec("gatherv send", send, counts[r])?;
        if self.rank() == root {
            let off: usize = counts[..r].iter().sum();
            let mut data = vec![T::zeroed(); counts.iter().sum()];
            data[off..off + send.len()].copy_from_slice(&send);
            CollRequest::start(self, sched, data, send, None, Post::Whole)
        } else {
            CollRequest::start(self, sched, Vec::new(), send, None, Post::Nothing)
        }
    }

    /// Block `rank` of the root's `send` (`size × recv.len()` elements; other ranks pass
    /// `None`) into every rank's `recv`. Collective.
    pub fn scatter<T: Pod>(&self, send: Option<&[T]>, recv: &mut [T], root: u32) -> Result<()> {
        self.scatterv(send, &vec![recv.len(); self.size() as usize], recv, root)
    }

    /// Like [`scatter`](Self::scatter) with `counts[i]` elements to rank i. Collective.
    pub fn scatterv<T: Pod>(
        &self,
        send: Option<&[T]>,
        counts: &[usize],
        recv: &mut [T],
        root: u32,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let sched = self.scatter_plan(counts, size_of::<T>(), root)?;
        let r = self.rank() as usize;
        let recv = fit_mut("scatterv recv", recv, counts[r])?;
        if self.rank() == root {
            let send = send.ok_or_else(|| {
                CommError::InvalidArg("scatterv: the root must pass a send buffer".into())
            })?;
            let send = fit("scatterv send", send, counts.iter().sum())?;
            let off: usize = counts[..r].iter().sum();
            recv.copy_from_slice(&send[off..off + recv.len()]);
            self.run_schedule(
                &sched,
                bytemuck::cast_slice_mut(recv),
                bytemuck::cast_slice(send),
                None,
            )
        } else {
            self.run_schedule(&sched, bytemuck::cast_slice_mut(recv), &[], None)
        }
    }

    /// Starts a scatter of `count` elements per rank; the root passes `Some(send)`
    /// (`size × count` elements). `wait` hands back this rank's block.
    pub fn iscatter<T: Pod + Send + 'static>(
        &self,
        send: Option<Vec<T>>,
        count: usize,
        root: u32,
    ) -> Result<CollRequest<T>> {
        let counts = vec![count; self.size() as usize];
        self.iscatterv(send, &counts, root)
    }

    /// Starts a scatterv (see [`scatterv`](Self::scatterv)).
    pub fn iscatterv<T: Pod + Send + 'static>(
        &self,
        send: Option<Vec<T>>,
        counts: &[usize],
        root: u32,
    ) -> Result<CollRequest<T>> {
        let _fr = crate::fr::Scope::enter();
        let sched = self.scatter_plan(counts, size_of::<T>(), root)?;
        let r = self.rank() as usize;
        let mut data = vec![T::zeroed(); counts[r]];
        if self.rank() == root {
            let send = send.ok_or_else(|| {
                CommError::InvalidArg("scatterv: the root must pass a send buffer".into())
            })?;
            let send = fit_vec("scatterv send", send, counts.iter().sum())?;
            let off: usize = counts[..r].iter().sum();
            data.copy_from_slice(&send[off..off + counts[r]]);
            CollRequest::start(self, sched, data, send, None, Post::Whole)
        } else {
            CollRequest::start(self, sched, data, Vec::new(), None, Post::Whole)
        }
    }

    // ---------------------------------------------------------------- alltoall

    /// Block `j` of every rank's `send` goes to rank `j`, landing as block `rank of sender`
    /// in `recv` (both `size × block` elements). Collective.
    pub fn alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let n = self.size() as usize;
        let recv = fit_mut("alltoall recv", recv, send.len())?;
        if !send.len().is_multiple_of(n) {
            return Err(CommError::InvalidArg(format!(
                "alltoall: {} elements are not {n} equal blocks",
                send.len()
            )));
        }
        let counts = vec![send.len() / n; n];
        self.alltoall_counts(send, &counts, recv, &counts, true)
    }

    /// In-place all-to-all over `buf` (`size` equal blocks).
    pub fn alltoall_in_place<T: Pod>(&self, buf: &mut [T]) -> Result<()> {
        let send = buf.to_vec();
        self.alltoall(&send, buf)
    }

    /// All-to-all with `send_counts[j]` elements to rank j and `recv_counts[i]` from rank i,
    /// packed in rank order. What rank i sends to j must be what j expects from i. Collective.
    pub fn alltoallv<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<()> {
        self.alltoall_counts(send, send_counts, recv, recv_counts, false)
    }

    /// `alltoallv`; `equal_call`: every rank called `alltoall` (equal blocks everywhere by
    /// contract, which the windows check). Only such calls may take the windows: in an
    /// alltoallv one rank's counts may all be equal while another's are not, and ranks would
    /// then run different algorithms.
    fn alltoall_counts<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        equal_call: bool,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let plan = self.alltoall_plan(send_counts, recv_counts, size_of::<T>(), equal_call)?;
        let r = self.rank() as usize;
        let send = fit("alltoallv send", send, send_counts.iter().sum())?;
        let recv = fit_mut("alltoallv recv", recv, recv_counts.iter().sum())?;
        check_len("alltoallv own block", recv_counts[r], send_counts[r])?;
        let sched = match plan {
            Plan::Shm(node, chk) => {
                return node.alltoall(
                    self,
                    bytemuck::cast_slice(send),
                    bytemuck::cast_slice_mut(recv),
                    chk,
                );
            }
            Plan::Sched(s) => s,
            Plan::Hier(_) => unreachable!("alltoall has no composition"),
        };
        let (so, ro): (usize, usize) =
            (send_counts[..r].iter().sum(), recv_counts[..r].iter().sum());
        recv[ro..ro + recv_counts[r]].copy_from_slice(&send[so..so + send_counts[r]]);
        self.run_schedule(
            &sched,
            bytemuck::cast_slice_mut(recv),
            bytemuck::cast_slice(send),
            None,
        )
    }

    /// Starts an all-to-all of `send` (`size` equal blocks); `wait` hands back the received
    /// blocks.
    pub fn ialltoall<T: Pod + Send + 'static>(&self, send: Vec<T>) -> Result<CollRequest<T>> {
        let n = self.size() as usize;
        if !send.len().is_multiple_of(n) {
            return Err(CommError::InvalidArg(format!(
                "alltoall: {} elements are not {n} equal blocks",
                send.len()
            )));
        }
        let counts = vec![send.len() / n; n];
        self.ialltoallv(send, &counts, &counts)
    }

    /// Starts an alltoallv (see [`alltoallv`](Self::alltoallv)).
    pub fn ialltoallv<T: Pod + Send + 'static>(
        &self,
        send: Vec<T>,
        send_counts: &[usize],
        recv_counts: &[usize],
    ) -> Result<CollRequest<T>> {
        let _fr = crate::fr::Scope::enter();
        let Plan::Sched(sched) =
            self.alltoall_plan(send_counts, recv_counts, size_of::<T>(), false)?
        else {
            unreachable!("non-blocking plans are schedules")
        };
        let r = self.rank() as usize;
        let send = fit_vec("alltoallv send", send, send_counts.iter().sum())?;
        check_len("alltoallv own block", recv_counts[r], send_counts[r])?;
        let (so, ro): (usize, usize) =
            (send_counts[..r].iter().sum(), recv_counts[..r].iter().sum());
        let mut data = vec![T::zeroed(); recv_counts.iter().sum()];
        data[ro..ro + recv_counts[r]].copy_from_slice(&send[so..so + send_counts[r]]);
        CollRequest::start(self, sched, data, send, None, Post::Whole)
    }

    // ---------------------------------------------------------------- scans

    /// Inclusive prefix reduction: rank r gets `send(0) ⊕ … ⊕ send(r)`. Collective.
    pub fn scan<T: Pod + Send>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        let recv = fit_mut("scan recv", recv, send.len())?;
        recv.copy_from_slice(send);
        self.scan_in_place(recv, op)
    }

    /// In-place inclusive scan.
    pub fn scan_in_place<T: Pod + Send>(
        &self,
        buf: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let r = op.into().0;
        let sched = self.scan_plan(buf.len(), size_of::<T>(), &r, false)?;
        self.run_schedule(&sched, bytemuck::cast_slice_mut(buf), &[], Some(&r))
    }

    /// Exclusive prefix reduction: rank r gets `send(0) ⊕ … ⊕ send(r−1)`. Rank 0's `recv` is
    /// left unchanged (MPI leaves it undefined). Collective.
    pub fn exscan<T: Pod + Send>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let recv = fit_mut("exscan recv", recv, send.len())?;
        let r = op.into().0;
        let sched = self.scan_plan(send.len(), size_of::<T>(), &r, true)?;
        let len = size_of_val(send);
        let mut work = self.shared().coll.take_scratch(len);
        work[..len].copy_from_slice(bytemuck::cast_slice(send));
        let res = self.run_schedule(&sched, &mut work[..len], &[], Some(&r));
        if res.is_ok() && self.rank() > 0 {
            bytemuck::cast_slice_mut::<T, u8>(recv).copy_from_slice(&work[..len]);
        }
        self.shared().coll.put_scratch(work);
        res
    }

    /// In-place exclusive scan: `buf` holds this rank's contribution and receives the prefix
    /// of the ranks before it (rank 0's `buf` is left unchanged).
    pub fn exscan_in_place<T: Pod + Send>(
        &self,
        buf: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        let send = buf.to_vec();
        self.exscan(&send, buf, op)
    }

    /// Starts an inclusive scan; `wait` hands back this rank's prefix.
    pub fn iscan<T: Pod + Send + 'static>(
        &self,
        send: Vec<T>,
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<T>> {
        let _fr = crate::fr::Scope::enter();
        let r = op.into().0;
        let sched = self.scan_plan(send.len(), size_of::<T>(), &r, false)?;
        CollRequest::start(self, sched, send, Vec::new(), Some(r), Post::Whole)
    }

    /// Starts an exclusive scan; `wait` hands back the prefix of the ranks before this one
    /// (rank 0 gets its own `send` back).
    pub fn iexscan<T: Pod + Send + 'static>(
        &self,
        send: Vec<T>,
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<T>> {
        let _fr = crate::fr::Scope::enter();
        let r = op.into().0;
        let sched = self.scan_plan(send.len(), size_of::<T>(), &r, true)?;
        CollRequest::start(self, sched, send, Vec::new(), Some(r), Post::Whole)
    }

    // ---------------------------------------------------------------- barrier

    /// Starts a barrier; `wait` returns once every rank has started it.
    pub fn ibarrier(&self) -> Result<CollRequest<u8>> {
        let _fr = crate::fr::Scope::enter();
        crate::fr::begin_coll(self.ctx(), "barrier", Some(Algo::Dissemination), 0, (0, 0));
        self.check_note(Call::new(Kind::Barrier));
        let (rank, n) = (self.rank(), self.size());
        let sched = self
            .shared()
            .coll
            .schedule(self.key("barrier", Algo::Dissemination, 0, 0, 0), || {
                dissemination_barrier(rank, n)
            });
        CollRequest::start(self, sched, Vec::new(), Vec::new(), None, Post::Nothing)
    }
}

/// A schedule over a whole-vector `Data` that sends its blocks before it writes any and whose
/// result is the block at `off` of `len` bytes (the direct reduce-scatter), rewritten to read
/// the vector from `Input` and to leave the block in a `Data` of just `len` bytes: sends read
/// `Input`, the block starts as a copy of its `Input` bytes, and steps on the block move to
/// offset 0.
/// A schedule built for one call (per-rank counts, not cached), named as the cache names its
/// schedules: its errors say which operation failed.
fn uncached(op: &'static str, mut s: Schedule) -> Arc<Schedule> {
    s.op = op;
    Arc::new(s)
}

fn out_of_place_block(s: &Schedule, off: usize, len: usize) -> Schedule {
    use schedule::{Buf, Chunk, Phase, Step};
    let input = |c: Chunk| Chunk {
        buf: Buf::Input,
        ..c
    };
    let block = |c: Chunk| {
        if c.buf == Buf::Data {
            debug_assert!(c.off >= off && c.off + c.len <= off + len);
            Chunk {
                off: c.off - off,
                ..c
            }
        } else {
            c
        }
    };
    let mut out = Schedule {
        phases: Vec::with_capacity(s.phases.len() + 1),
        tmp_len: s.tmp_len,
        op: s.op,
    };
    if len > 0 {
        out.phases.push(Phase {
            xfers: vec![],
            local: vec![Step::Copy {
                dst: Chunk {
                    buf: Buf::Data,
                    off: 0,
                    len,
                },
                src: Chunk {
                    buf: Buf::Input,
                    off,
                    len,
                },
            }],
        });
    }
    for ph in &s.phases {
        let xfers = ph
            .xfers
            .iter()
            .map(|st| match *st {
                Step::Send { peer, src } if src.buf == Buf::Data => Step::Send {
                    peer,
                    src: input(src),
                },
                other => other,
            })
            .collect();
        let local = ph
            .local
            .iter()
            .map(|st| match *st {
                Step::Reduce { dst, src, order } => Step::Reduce {
                    dst: block(dst),
                    src: block(src),
                    order,
                },
                Step::Copy { dst, src } => Step::Copy {
                    dst: block(dst),
                    src: block(src),
                },
                other => other,
            })
            .collect();
        out.phases.push(Phase { xfers, local });
    }
    out
}

/// What a broadcast of `len` elements of `T` from `root` must agree on.
fn bcast_call<T>(len: usize, root: u32) -> Call {
    Call::new(Kind::Bcast)
        .elem(size_of::<T>())
        .count(len)
        .root(root)
}

/// Segment size of the pipelined broadcast: enough segments to overlap the hops, each large
/// enough that per-message costs stay small.
fn pipeline_segment(bytes: usize) -> usize {
    (bytes / 8).clamp(64 << 10, 1 << 20)
}

/// Dissemination barrier: ⌈log₂ n⌉ rounds; in round k every rank sends an empty message to
/// rank + 2ᵏ and waits for one from rank − 2ᵏ.
fn dissemination_barrier(rank: u32, n: u32) -> Schedule {
    use schedule::{Buf, Chunk, Phase, Step};
    let none = Chunk {
        buf: Buf::Data,
        off: 0,
        len: 0,
    };
    let mut s = Schedule::default();
    let mut k = 1;
    while k < n {
        s.phases.push(Phase {
            xfers: vec![
                Step::Send {
                    peer: (rank + k) % n,
                    src: none,
                },
                Step::Recv {
                    peer: (rank + n - k) % n,
                    dst: none,
                },
            ],
            local: vec![],
        });
        k *= 2;
    }
    s
}
