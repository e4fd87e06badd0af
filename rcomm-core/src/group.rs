//! Making communicators: `dup`, `split`, `split_type`, [`Group`]s and `create`, and the
//! context ids that keep their messages apart; plus the internal exchanges they need
//! (allgather, barrier) written over point-to-point on the parent's internal context.
//!
//! Context ids: every process keeps a bitmask of ids in use. Creating a communicator is
//! collective over its parent: the members combine their free masks (an allgather, then AND)
//! and all take the lowest id free everywhere, so an id never means two live communicators on
//! any process that belongs to both. User messages travel on context `2·id`, the
//! communicator's internal traffic on `2·id + 1`, so a user's tags can never meet rcomm's.

use crate::comm::{Communicator, Tag, TopoPart};
use crate::ctxid::{CtxGuard, MAX_IDS, WORDS};
use crate::p2p::matcher::Source;
use crate::{CommError, Result};
use rcomm_runtime::algo::Algo;
use std::collections::HashMap;
use std::sync::Arc;

const TAG_ALLGATHER: Tag = Tag(1);
const TAG_BARRIER: Tag = Tag(2);

/// Unique per call in this process (and, with the pid, per process): mixed into a new
/// communicator's generation.
fn nonce() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    u64::from(std::process::id()) << 32 ^ n
}

impl Communicator {
    /// The context of this communicator's internal traffic (collectives, agreements).
    pub(crate) fn internal(&self) -> u32 {
        self.ctx() + 1
    }

    /// The generation of this communicator (0 for the world), see [`CtxGuard::epoch`].
    pub(crate) fn check_gen(&self) -> u32 {
        self.ctx_guard().map_or(0, |g| g.epoch)
    }

    /// Gathers `mine` (the same length on every rank) from every rank, in rank order: a ring,
    /// n−1 steps, on the internal context.
    pub(crate) fn allgather_bytes(&self, mine: &[u8]) -> Result<Vec<u8>> {
        self.allgather_bytes_tagged(mine, TAG_ALLGATHER)
    }

    /// [`allgather_bytes`](Self::allgather_bytes) with its own tag.
    fn allgather_bytes_tagged(&self, mine: &[u8], tag: Tag) -> Result<Vec<u8>> {
        let (n, r, len) = (self.size() as usize, self.rank() as usize, mine.len());
        let mut all = vec![0u8; n * len];
        all[r * len..(r + 1) * len].copy_from_slice(mine);
        let right = ((r + 1) % n) as u32;
        let left = ((r + n - 1) % n) as u32;
        for step in 0..n.saturating_sub(1) {
            let send_block = (r + n - step) % n;
            let recv_block = (r + n - step - 1) % n;
            let out = all[send_block * len..(send_block + 1) * len].to_vec();
            let st = self.sendrecv_ctx(
                self.internal(),
                &out,
                right,
                tag,
                &mut all[recv_block * len..(recv_block + 1) * len],
                Source::Rank(left),
                tag,
            )?;
            if st.bytes != len {
                return Err(CommError::Mismatch {
                    what: "allgather block size".into(),
                    rank: left,
                    theirs: st.bytes as u64,
                    ours: len as u64,
                });
            }
        }
        Ok(all)
    }

    /// Waits until every rank of the communicator has called `barrier` (dissemination:
    /// ⌈log₂ n⌉ rounds of one message each way).
    pub fn barrier(&self) -> Result<()> {
        let t0 = self.straggler_start();
        let res = crate::fr::record(self.ctx(), "barrier", Some(Algo::Dissemination), || {
            self.barrier_untimed()
        });
        self.straggler_end(t0);
        res
    }

    fn barrier_untimed(&self) -> Result<()> {
        if self.shared().check {
            // Checked: a collective with its own call number and signature.
            return self.ibarrier()?.wait().map(drop);
        }
        let n = self.size();
        let mut k = 1;
        while k < n {
            let to = (self.rank() + k) % n;
            let from = (self.rank() + n - k) % n;
            self.sendrecv_ctx(
                self.internal(),
                &[],
                to,
                TAG_BARRIER,
                &mut [],
                Source::Rank(from),
                TAG_BARRIER,
            )?;
            k *= 2;
        }
        Ok(())
    }

    /// Agrees with every rank on a context id free on all of them.
    fn alloc_id(&self) -> Result<Arc<CtxGuard>> {
        Ok(self.alloc_id_with(&[])?.0)
    }

    /// [`alloc_id`](Self::alloc_id), gathering `extra` (the same length on every rank) from
    /// every rank in the same exchange; returns the extras in rank order.
    fn alloc_id_with(&self, extra: &[u8]) -> Result<(Arc<CtxGuard>, Vec<u8>)> {
        self.alloc_id_tagged(extra, TAG_ALLGATHER)
    }

    /// [`alloc_id_with`](Self::alloc_id_with), its exchange under `tag`.
    fn alloc_id_tagged(&self, extra: &[u8], tag: Tag) -> Result<(Arc<CtxGuard>, Vec<u8>)> {
        let ids = self.shared().ctx_ids.clone();
        let mut mine: Vec<u8> = ids
            .free_mask()
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        mine.extend_from_slice(&nonce().to_le_bytes());
        mine.extend_from_slice(extra);
        let all = self.allgather_bytes_tagged(&mine, tag)?;
        let mut common = [u64::MAX; WORDS];
        let mut extras = Vec::with_capacity(extra.len() * self.size() as usize);
        for rank in all.chunks(WORDS * 8 + 8 + extra.len()) {
            let (mask, x) = rank.split_at(WORDS * 8);
            let x = &x[8..];
            for (i, w) in mask.chunks(8).enumerate() {
                common[i] &= u64::from_le_bytes(w.try_into().expect("8 bytes"));
            }
            extras.extend_from_slice(x);
        }
        let id = (0..MAX_IDS)
            .find(|&i| common[i / 64] >> (i % 64) & 1 == 1)
            .ok_or_else(|| CommError::Exhausted(format!("all {MAX_IDS} communicator context ids are in use: free communicators you no longer need")))?;
        if !ids.take(id) {
            return Err(CommError::Exhausted(
                "a context id was taken meanwhile by another thread: create communicators that share ranks from one thread at a time".into(),
            ));
        }
        let epoch = crate::coll::check::generation(&all);
        Ok((Arc::new(CtxGuard { ids, id, epoch }), extras))
    }

    fn child(&self, guard: Arc<CtxGuard>, world: Vec<u32>, rank: u32) -> Communicator {
        self.shared()
            .lock()
            .register_comm(2 * guard.id as u32, Some(world.as_slice().into()));
        // Shrinks are counted per communicator: a reused context id starts again at 0 on every
        // member alike, so their agreement keys match.
        self.shared()
            .shrinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(2 * guard.id as u32));
        let ctx = 2 * guard.id as u32;
        let topo = TopoPart::new(Some(world), self.shared().node_of.clone());
        let c = Communicator::new(ctx, rank, topo, Some(guard), self.shared().clone());
        c.fr_created("");
        c
    }

    fn members(&self) -> Vec<u32> {
        (0..self.size())
            .map(|r| self.world_rank(r).expect("in range"))
            .collect()
    }

    /// Revokes the communicator on every rank (MPI's `MPI_Comm_revoke`): every pending and
    /// future operation on it — point-to-point and collective, here and on the other members —
    /// fails with [`CommError::Revoked`]. Not collective: one rank calls it, the others learn
    /// it through their next progress (each passes it on, so a revoker that dies right after
    /// still reaches everyone alive). The usual next step is [`shrink`](Self::shrink).
    pub fn revoke(&self) {
        let me = self.world_rank(self.rank()).expect("in range");
        self.shared().lock().revoke(self.ctx(), me);
    }

    /// Whether the communicator was revoked (by any rank, as far as this one has heard).
    pub fn is_revoked(&self) -> bool {
        let mut e = self.shared().lock();
        e.progress();
        e.is_revoked(self.ctx())
    }

    /// A communicator of the members that have not failed (MPI's `MPIX_Comm_shrink`), ranks in
    /// this communicator's order. Collective over the survivors: every member still alive must
    /// call it (on a broken or revoked communicator too — that is what it is for). Who failed
    /// is what the launcher says once every member has either asked or failed, so all
    /// survivors get the same communicator, whatever each had noticed itself; a rank the
    /// launcher declared hung was killed and cannot come back. Needs `rcomm-run` (its store
    /// holds the agreement); under other launchers it is an error.
    pub fn shrink(&self) -> Result<Communicator> {
        let boot = self.shared().boot.get().cloned().ok_or_else(|| {
            CommError::InvalidArg("shrink: this world has no launcher to agree with".into())
        })?;
        let members = self.members();
        let round = {
            let mut m = self
                .shared()
                .shrinks
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let c = m.entry(self.ctx()).or_default();
            *c += 1;
            *c
        };
        let key = format!("shrink/{}/{round}", self.ctx());
        let ids = self.shared().ctx_ids.clone();
        let mask: Vec<u8> = ids
            .free_mask()
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let (failed, common) = boot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .agree(&key, &members, &mask)?;
        let survivors: Vec<u32> = members
            .iter()
            .copied()
            .filter(|m| !failed.contains(m))
            .collect();
        let me = self.world_rank(self.rank())?;
        let rank = survivors.iter().position(|&w| w == me).ok_or_else(|| {
            CommError::InvalidArg(format!(
                "shrink: the launcher counts this rank ({me}) among the failed"
            ))
        })? as u32;
        let id = (0..MAX_IDS)
            .find(|&i| common.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1))
            .ok_or_else(|| {
                CommError::Exhausted(format!(
                    "all {MAX_IDS} communicator context ids are in use on some survivor"
                ))
            })?;
        if !ids.take(id) {
            return Err(CommError::Exhausted(
                "a context id was taken meanwhile by another thread: shrink from one thread at a time".into(),
            ));
        }
        rcomm_runtime::rlog!(
            Info,
            "COMM",
            "shrink of communicator {}: {} of {} members survive (lost: {failed:?})",
            self.ctx(),
            survivors.len(),
            members.len()
        );
        // What every survivor agreed on names the new communicator's generation.
        let mut agreed = key.into_bytes();
        agreed.extend_from_slice(&self.check_gen().to_le_bytes());
        agreed.extend(survivors.iter().flat_map(|w| w.to_le_bytes()));
        agreed.extend_from_slice(&common);
        let epoch = crate::coll::check::generation(&agreed);
        Ok(self.child(Arc::new(CtxGuard { ids, id, epoch }), survivors, rank))
    }

    /// Ends the whole job through the launcher, with exit status `code` and `msg` shown to the
    /// user (MPI's `MPI_Abort`): every rank is stopped, on every host.
    pub fn abort(&self, code: i32, msg: &str) -> ! {
        match self.shared().boot.get() {
            Some(b) => {
                let r = b.lock().unwrap_or_else(|p| p.into_inner()).abort(code, msg);
                match r {
                    // The launcher stops us; don't race it with a normal exit status.
                    Ok(()) => std::thread::sleep(std::time::Duration::from_secs(30)),
                    Err(e) => eprintln!(
                        "rcomm: abort could not reach the launcher ({e}); exiting with code {code}"
                    ),
                }
            }
            None => eprintln!("rcomm: abort({code}): {msg}"),
        }
        std::process::exit(code)
    }

    /// A communicator with the same ranks and a separate message space (collective). Its
    /// attributes are copied as each key's [`AttrCopy`](crate::AttrCopy) says.
    pub fn dup(&self) -> Result<Communicator> {
        let guard = crate::fr::record(self.ctx(), "dup", None, || self.alloc_id())?;
        let mut c = self.child(guard, self.members(), self.rank());
        c.set_attrs(self.attrs().copied());
        self.nccl_split_into(Some(&c))?;
        Ok(c)
    }

    /// Splits into disjoint communicators, one per `color`, ranks ordered by (`key`, rank in
    /// this communicator); `None` opts out (MPI_UNDEFINED) and returns `None`. Collective.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator>> {
        let me = [color.unwrap_or(u32::MAX).to_le_bytes(), key.to_le_bytes()].concat();
        let (guard, all) = crate::fr::record(self.ctx(), "split", None, || {
            Ok((self.alloc_id()?, self.allgather_bytes(&me)?))
        })?;
        // Every rank of this communicator takes part in the split of its NCCL communicator,
        // if it has one (`nccl_split_into`), those outside any part too.
        let Some(c) = color else {
            self.nccl_split_into(None)?;
            return Ok(None);
        };
        if c == u32::MAX {
            self.nccl_split_into(None)?;
            return Err(CommError::InvalidArg(
                "split color u32::MAX is reserved (use None to opt out)".into(),
            ));
        }
        let mut mine: Vec<(i32, u32)> = all
            .chunks(8)
            .enumerate()
            .filter(|(_, e)| u32::from_le_bytes(e[0..4].try_into().expect("4")) == c)
            .map(|(r, e)| (i32::from_le_bytes(e[4..8].try_into().expect("4")), r as u32))
            .collect();
        mine.sort_unstable();
        let rank = mine
            .iter()
            .position(|&(_, r)| r == self.rank())
            .expect("we chose this color") as u32;
        let world = mine
            .iter()
            .map(|&(_, r)| self.world_rank(r).expect("in range"))
            .collect();
        let child = self.child(guard, world, rank);
        self.nccl_split_into(Some(&child))?;
        Ok(Some(child))
    }

    /// Splits by locality, ranks in this communicator's order. Collective. See [`SplitType`]
    /// for what each kind groups.
    pub fn split_type(&self, kind: SplitType) -> Result<Communicator> {
        let me = self.world_rank(self.rank())?;
        let node = self.shared().node_of[me as usize];
        let color = match kind {
            SplitType::Node => node,
            SplitType::Numa => {
                // Equal keys get the lowest rank holding that key as their color: distinct
                // keys can never share a color, whatever their values.
                let key = numa_split_key(node, &numa_places_of_this_process());
                let all = self.allgather_bytes(&key)?;
                all.chunks(key.len())
                    .position(|k| k == key)
                    .expect("our own key is among them") as u32
            }
        };
        Ok(self
            .split(Some(color), self.rank() as i32)?
            .expect("a color was given"))
    }

    /// The communicator's group: its members as world ranks, in communicator rank order
    /// (MPI_Comm_group).
    pub fn group(&self) -> Group {
        Group {
            ranks: self.members(),
        }
    }

    /// A communicator of the ranks of `group`, in the group's order (MPI_Comm_create).
    /// Collective over this communicator. Every rank passes a group; its members get `Some`,
    /// the others `None` (an empty group gives `None`). As in MPI 2.2 the groups may be
    /// disjoint — each rank passing the group it belongs to (or the empty group) makes one
    /// communicator per group in one call — as long as every member of a group passed that
    /// same group: otherwise it is an error on each rank whose group's members disagree. A
    /// group with a world rank outside this communicator is an error on the ranks passing it.
    ///
    /// ```
    /// let world = rcomm::init()?;
    /// let evens = world.group().incl(&(0..world.size()).step_by(2).collect::<Vec<_>>())?;
    /// if let Some(c) = world.create(&evens)? {
    ///     c.barrier()?;
    /// }
    /// # Ok::<(), rcomm::CommError>(())
    /// ```
    pub fn create(&self, group: &Group) -> Result<Option<Communicator>> {
        // FNV-1a of the members: ranks compare their groups in the id agreement's exchange.
        let hash = group
            .ranks
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .chain((group.ranks.len() as u64).to_le_bytes())
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
        let (guard, all) = crate::fr::record(self.ctx(), "create", None, || {
            self.alloc_id_with(&hash.to_le_bytes())
        })?;
        if let Some(&w) = group
            .ranks
            .iter()
            .find(|&&w| self.local_rank_of(w).is_none())
        {
            return Err(CommError::InvalidArg(format!(
                "create: world rank {w} of the group is not a member of the communicator \
                 (it has {} ranks)",
                self.size()
            )));
        }
        // Disjoint groups (MPI 2.2): every member of the group this rank passed must have
        // passed the same group; ranks outside it may pass another (or the empty group).
        for &w in &group.ranks {
            let r = self.local_rank_of(w).expect("checked above") as usize;
            let theirs = u64::from_le_bytes(all[r * 8..r * 8 + 8].try_into().expect("8 bytes"));
            if theirs != hash {
                return Err(CommError::Mismatch {
                    what: "the group passed to create (each member of a group must pass that \
                           group; the values are hashes of it)"
                        .into(),
                    rank: r as u32,
                    theirs,
                    ours: hash,
                });
            }
        }
        let me = self.world_rank(self.rank())?;
        let Some(rank) = group.rank_of(me) else {
            self.nccl_split_into(None)?;
            return Ok(None);
        };
        let child = self.child(guard, group.ranks.clone(), rank);
        self.nccl_split_into(Some(&child))?;
        Ok(Some(child))
    }
}

/// Internal tags of `create_group`'s exchange: this base plus the caller's tag modulo
/// [`CREATE_GROUP_TAGS`] (between the collective tags, 16 + 2³⁰, and the graph exchanges').
const TAG_CREATE_GROUP_BASE: i32 = 0x4000_0100;
const CREATE_GROUP_TAGS: i32 = 0x0FFF_0000;

/// FNV-1a of a group's members: ranks compare their groups in the id agreement's exchange.
fn group_hash(group: &Group) -> u64 {
    group
        .ranks
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .chain((group.ranks.len() as u64).to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
}

impl Communicator {
    /// A communicator of the ranks of `group`, in the group's order, made by the group's
    /// members only (`MPI_Comm_create_group`): the other ranks of this communicator take no
    /// part. `tag` tells apart calls that run at the same time on overlapping groups (from
    /// different threads); calls whose tags are equal modulo 2²⁸ − 2¹⁶ count as the same tag.
    /// A rank that is not in `group`, a negative tag, or a member of `group` outside this
    /// communicator is an error on the rank that sees it; members that passed different
    /// groups get a `Mismatch` error. Collective over the group.
    pub fn create_group(&self, group: &Group, tag: Tag) -> Result<Communicator> {
        if tag.0 < 0 {
            return Err(CommError::InvalidTag { tag: tag.0 });
        }
        let me = self.world_rank(self.rank())?;
        let Some(rank) = group.rank_of(me) else {
            return Err(CommError::InvalidArg(format!(
                "create_group: this rank (world rank {me}) is not in the group; only its \
                 members call create_group"
            )));
        };
        if let Some(&w) = group
            .ranks
            .iter()
            .find(|&&w| self.local_rank_of(w).is_none())
        {
            return Err(CommError::InvalidArg(format!(
                "create_group: world rank {w} of the group is not a member of the \
                 communicator (it has {} ranks)",
                self.size()
            )));
        }
        // The members agree on an id among themselves, over this communicator's internal
        // context, as a communicator of just them would.
        let members = self.regrouped(rank, group.ranks.clone());
        let hash = group_hash(group);
        let t = Tag(TAG_CREATE_GROUP_BASE + tag.0 % CREATE_GROUP_TAGS);
        let (guard, all) = members.alloc_id_tagged(&hash.to_le_bytes(), t)?;
        for (r, theirs) in all.chunks(8).enumerate() {
            let theirs = u64::from_le_bytes(theirs.try_into().expect("8 bytes"));
            if theirs != hash {
                return Err(CommError::Mismatch {
                    what: "the group passed to create_group (the values are hashes of it)".into(),
                    rank: self.local_rank_of(group.ranks[r]).expect("checked above"),
                    theirs,
                    ours: hash,
                });
            }
        }
        Ok(self.child(guard, group.ranks.clone(), rank))
    }

    /// How this communicator compares with `other` (`MPI_Comm_compare`): [`Comparison::Ident`]
    /// for handles of the same communicator (clones), [`Comparison::Congruent`] for the same
    /// members in the same order with another context (a `dup`), [`Comparison::Similar`] for
    /// the same members in another order, [`Comparison::Unequal`] otherwise.
    pub fn compare(&self, other: &Communicator) -> Comparison {
        if Arc::ptr_eq(self.shared(), other.shared()) && self.ctx() == other.ctx() {
            return Comparison::Ident;
        }
        match self.group().compare(&other.group()) {
            Comparison::Ident => Comparison::Congruent,
            c => c,
        }
    }
}

/// How [`Communicator::split_type`] groups ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SplitType {
    /// Ranks that share a node (MPI_COMM_TYPE_SHARED).
    Node,
    /// Ranks of one node that may run on the same NUMA nodes: the key is (node, the set of
    /// NUMA nodes the rank's allowed CPUs (`sched_getaffinity`) touch). Ranks bound to one
    /// NUMA node group per node; unbound ranks, or ranks bound across nodes, group with those
    /// spanning the same set. Every rank is in exactly one group on any machine; where the
    /// topology cannot be read the set is empty and this equals [`SplitType::Node`]. (NUMA
    /// node numbers are folded modulo 128 into the key: on larger machines distinct sets can
    /// merge, never split.)
    Numa,
}

/// The NUMA nodes (numbers) this process's allowed CPUs touch; empty when unknown.
fn numa_places_of_this_process() -> Vec<u32> {
    let Ok(topo) = rcomm_runtime::topo::detect() else {
        return Vec::new();
    };
    let cpus = rcomm_runtime::os::allowed_cpus().unwrap_or_default();
    numa_set(&topo, &cpus)
}

/// The numbers of the NUMA nodes of `topo` whose CPUs intersect `cpus`, sorted.
pub(crate) fn numa_set(topo: &rcomm_runtime::topo::Topology, cpus: &[u32]) -> Vec<u32> {
    let mut v: Vec<u32> = topo
        .numa_nodes_touching(cpus)
        .into_iter()
        .filter_map(|n| topo.obj(n).os_index)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// `split_type(Numa)`'s key: the node color, then a 128-bit mask of NUMA node numbers.
pub(crate) fn numa_split_key(node: u32, numas: &[u32]) -> [u8; 20] {
    let mask = numas.iter().fold(0u128, |m, &n| m | 1 << (n % 128));
    let mut k = [0u8; 20];
    k[..4].copy_from_slice(&node.to_le_bytes());
    k[4..].copy_from_slice(&mask.to_le_bytes());
    k
}

/// An ordered set of ranks (MPI_Group), named by their world ranks: a group's rank `i` is its
/// `i`-th member. Made from a communicator ([`Communicator::group`]) or from world ranks
/// ([`Group::new`]), combined with MPI's rules, and turned into a communicator by
/// [`Communicator::create`]. Groups are plain values: making and combining them is local.
///
/// ```
/// use rcomm::{Comparison, Group};
/// let g = Group::new([4, 0, 2, 6])?;              // world ranks; group rank 0 is world rank 4
/// let h = g.incl(&[1, 2])?;                        // ranks 1 and 2 of g: world ranks 0, 2
/// assert_eq!(h.world_ranks(), &[0, 2]);
/// assert_eq!(g.excl(&[0])?.world_ranks(), &[0, 2, 6]);
/// let u = Group::new([1, 2])?.union(&h);           // first's order, then the second's new ones
/// assert_eq!(u.world_ranks(), &[1, 2, 0]);
/// assert_eq!(g.translate_ranks(&[0, 2], &h)?, vec![None, Some(1)]);
/// assert_eq!(Group::new([2, 0])?.compare(&h), Comparison::Similar);
/// # Ok::<(), rcomm::CommError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Group {
    /// World ranks, distinct, in group rank order.
    ranks: Vec<u32>,
}

/// How two groups compare ([`Group::compare`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Comparison {
    /// The same members in the same order (MPI_IDENT); for communicators, the same one.
    Ident,
    /// Communicators with the same members in the same order but different contexts
    /// (MPI_CONGRUENT; [`Communicator::compare`] only).
    Congruent,
    /// The same members in another order (MPI_SIMILAR).
    Similar,
    /// Different members (MPI_UNEQUAL).
    Unequal,
}

impl Group {
    /// The group of these world ranks, in this order. A rank given twice is an error. (Whether
    /// the ranks exist is checked when a communicator is made of the group.)
    pub fn new(world_ranks: impl IntoIterator<Item = u32>) -> Result<Group> {
        let ranks: Vec<u32> = world_ranks.into_iter().collect();
        check_distinct("Group::new", &ranks)?;
        Ok(Group { ranks })
    }

    /// The empty group (MPI_GROUP_EMPTY).
    pub fn empty() -> Group {
        Group::default()
    }

    /// Number of members.
    pub fn size(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// Whether the group has no members.
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }

    /// The members' world ranks, in group rank order.
    pub fn world_ranks(&self) -> &[u32] {
        &self.ranks
    }

    /// The world rank of group rank `r`.
    pub fn world_rank(&self, r: u32) -> Result<u32> {
        self.ranks
            .get(r as usize)
            .copied()
            .ok_or(CommError::InvalidRank {
                rank: r,
                size: self.size(),
            })
    }

    /// The group rank of world rank `w`, `None` if it is not a member (MPI_UNDEFINED); with
    /// `w` = the caller's world rank, MPI_Group_rank.
    pub fn rank_of(&self, w: u32) -> Option<u32> {
        self.ranks.iter().position(|&x| x == w).map(|p| p as u32)
    }

    /// The members at group ranks `ranks`, in that order (MPI_Group_incl). A rank out of range
    /// or given twice is an error.
    pub fn incl(&self, ranks: &[u32]) -> Result<Group> {
        self.check_ranks("incl", ranks)?;
        Ok(Group {
            ranks: ranks.iter().map(|&r| self.ranks[r as usize]).collect(),
        })
    }

    /// The members but those at group ranks `ranks`, in this group's order (MPI_Group_excl).
    /// A rank out of range or given twice is an error.
    pub fn excl(&self, ranks: &[u32]) -> Result<Group> {
        self.check_ranks("excl", ranks)?;
        let mut drop = vec![false; self.ranks.len()];
        for &r in ranks {
            drop[r as usize] = true;
        }
        Ok(Group {
            ranks: self
                .ranks
                .iter()
                .zip(drop)
                .filter(|(_, d)| !d)
                .map(|(&w, _)| w)
                .collect(),
        })
    }

    /// This group's members, then `other`'s that are not in it, each in its group's order
    /// (MPI_Group_union).
    pub fn union(&self, other: &Group) -> Group {
        let mine = self.index();
        let mut ranks = self.ranks.clone();
        ranks.extend(other.ranks.iter().filter(|w| !mine.contains_key(w)));
        Group { ranks }
    }

    /// This group's members that are also in `other`, in this group's order
    /// (MPI_Group_intersection).
    pub fn intersection(&self, other: &Group) -> Group {
        let theirs = other.index();
        Group {
            ranks: self
                .ranks
                .iter()
                .copied()
                .filter(|w| theirs.contains_key(w))
                .collect(),
        }
    }

    /// This group's members that are not in `other`, in this group's order
    /// (MPI_Group_difference).
    pub fn difference(&self, other: &Group) -> Group {
        let theirs = other.index();
        Group {
            ranks: self
                .ranks
                .iter()
                .copied()
                .filter(|w| !theirs.contains_key(w))
                .collect(),
        }
    }

    /// For each of this group's ranks `ranks`, the rank of the same member in `other`, `None`
    /// where it is not a member there (MPI_Group_translate_ranks; `None` is MPI_UNDEFINED). A
    /// rank out of this group's range is an error.
    pub fn translate_ranks(&self, ranks: &[u32], other: &Group) -> Result<Vec<Option<u32>>> {
        let theirs = other.index();
        ranks
            .iter()
            .map(|&r| Ok(theirs.get(&self.world_rank(r)?).copied()))
            .collect()
    }

    /// Whether `other` has the same members in the same order, in another order, or other
    /// members (MPI_Group_compare).
    pub fn compare(&self, other: &Group) -> Comparison {
        if self.ranks == other.ranks {
            return Comparison::Ident;
        }
        let (mut a, mut b) = (self.ranks.clone(), other.ranks.clone());
        a.sort_unstable();
        b.sort_unstable();
        if a == b {
            Comparison::Similar
        } else {
            Comparison::Unequal
        }
    }

    /// World rank → group rank.
    fn index(&self) -> HashMap<u32, u32> {
        self.ranks
            .iter()
            .enumerate()
            .map(|(i, &w)| (w, i as u32))
            .collect()
    }

    /// Group ranks given to `incl`/`excl`: in range and distinct.
    fn check_ranks(&self, what: &str, ranks: &[u32]) -> Result<()> {
        if let Some(&r) = ranks.iter().find(|&&r| r >= self.size()) {
            return Err(CommError::InvalidArg(format!(
                "{what}: rank {r} is out of range: the group has {} ranks",
                self.size()
            )));
        }
        check_distinct(what, ranks)
    }
}

/// An error naming the first rank given twice.
fn check_distinct(what: &str, ranks: &[u32]) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(ranks.len());
    match ranks.iter().find(|&&r| !seen.insert(r)) {
        Some(r) => Err(CommError::InvalidArg(format!(
            "{what}: rank {r} is given twice"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn numa_split_keys_on_the_two_socket_machines() {
        use rcomm_runtime::topo::testkit::{dgx, server2s};
        for t in [server2s(), dgx()] {
            // Bound to one core or one node: that node alone.
            assert_eq!(numa_set(&t, &[3]), [0]);
            assert_eq!(numa_set(&t, &[9, 25]), [1]);
            assert_eq!(numa_set(&t, &(8..16).collect::<Vec<_>>()), [1]);
            // Unbound, or across the sockets: both.
            assert_eq!(numa_set(&t, &(0..32).collect::<Vec<_>>()), [0, 1]);
            assert_eq!(numa_set(&t, &[0, 8]), [0, 1]);
            assert!(numa_set(&t, &[99]).is_empty());
        }
        let k = |node, numas: &[u32]| numa_split_key(node, numas);
        assert_eq!(k(0, &[0]), k(0, &[0]));
        assert_ne!(k(0, &[0]), k(0, &[1]));
        assert_ne!(k(0, &[0]), k(0, &[0, 1]));
        assert_ne!(k(0, &[0]), k(1, &[0]), "other nodes never join");
        assert_eq!(k(0, &[]), k(0, &[]));
    }

    // The reference model: plain vectors and linear searches, MPI's rules written out.

    fn r_valid(len: usize, ranks: &[u32]) -> bool {
        ranks.iter().all(|&r| (r as usize) < len)
            && ranks
                .iter()
                .enumerate()
                .all(|(i, r)| !ranks[..i].contains(r))
    }

    fn r_incl(g: &[u32], ranks: &[u32]) -> Option<Vec<u32>> {
        r_valid(g.len(), ranks).then(|| ranks.iter().map(|&r| g[r as usize]).collect())
    }

    fn r_excl(g: &[u32], ranks: &[u32]) -> Option<Vec<u32>> {
        r_valid(g.len(), ranks).then(|| {
            (0..g.len())
                .filter(|i| !ranks.contains(&(*i as u32)))
                .map(|i| g[i])
                .collect()
        })
    }

    fn r_union(a: &[u32], b: &[u32]) -> Vec<u32> {
        let mut u = a.to_vec();
        for x in b {
            if !a.contains(x) {
                u.push(*x);
            }
        }
        u
    }

    fn r_inter(a: &[u32], b: &[u32]) -> Vec<u32> {
        a.iter().copied().filter(|x| b.contains(x)).collect()
    }

    fn r_diff(a: &[u32], b: &[u32]) -> Vec<u32> {
        a.iter().copied().filter(|x| !b.contains(x)).collect()
    }

    fn r_translate(a: &[u32], ranks: &[u32], b: &[u32]) -> Option<Vec<Option<u32>>> {
        ranks
            .iter()
            .map(|&r| {
                let w = *a.get(r as usize)?;
                Some(b.iter().position(|&x| x == w).map(|p| p as u32))
            })
            .collect()
    }

    fn r_compare(a: &[u32], b: &[u32]) -> Comparison {
        if a == b {
            Comparison::Ident
        } else if a.len() == b.len() && a.iter().all(|x| b.contains(x)) {
            Comparison::Similar
        } else {
            Comparison::Unequal
        }
    }

    /// Distinct world ranks below 12 in random order (often overlapping another such group).
    fn group() -> impl Strategy<Value = Vec<u32>> {
        proptest::sample::subsequence((0..12u32).collect::<Vec<_>>(), 0..=12).prop_shuffle()
    }

    /// Group ranks, sometimes out of range or repeated.
    fn ranks() -> impl Strategy<Value = Vec<u32>> {
        prop_oneof![
            3 => proptest::sample::subsequence((0..12u32).collect::<Vec<_>>(), 0..=6).prop_shuffle(),
            1 => proptest::collection::vec(0..14u32, 0..6),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn group_operations_match_the_reference(a in group(), b in group(), rs in ranks()) {
            let (ga, gb) = (Group::new(a.clone()).unwrap(), Group::new(b.clone()).unwrap());
            prop_assert_eq!(ga.size() as usize, a.len());
            prop_assert_eq!(ga.incl(&rs).ok().map(|g| g.ranks), r_incl(&a, &rs));
            prop_assert_eq!(ga.excl(&rs).ok().map(|g| g.ranks), r_excl(&a, &rs));
            prop_assert_eq!(ga.union(&gb).ranks, r_union(&a, &b));
            prop_assert_eq!(ga.intersection(&gb).ranks, r_inter(&a, &b));
            prop_assert_eq!(ga.difference(&gb).ranks, r_diff(&a, &b));
            prop_assert_eq!(ga.translate_ranks(&rs, &gb).ok(), r_translate(&a, &rs, &b));
            prop_assert_eq!(ga.compare(&gb), r_compare(&a, &b));
            prop_assert_eq!(ga.compare(&ga), Comparison::Ident);
            let mut shuffled = a.clone();
            shuffled.reverse();
            let similar = if a.len() > 1 { Comparison::Similar } else { Comparison::Ident };
            prop_assert_eq!(ga.compare(&Group::new(shuffled).unwrap()), similar);
            for (w, r) in a.iter().zip(0..) {
                prop_assert_eq!(ga.rank_of(*w), Some(r));
                prop_assert_eq!(ga.world_rank(r).unwrap(), *w);
            }
            prop_assert!(ga.world_rank(ga.size()).is_err());
            // Results are groups again: distinct members.
            for g in [ga.union(&gb), ga.intersection(&gb), ga.difference(&gb)] {
                prop_assert!(Group::new(g.ranks).is_ok());
            }
        }

        #[test]
        fn translating_there_and_back_is_the_identity_on_common_members(a in group(), b in group()) {
            let (ga, gb) = (Group::new(a.clone()).unwrap(), Group::new(b).unwrap());
            let all: Vec<u32> = (0..ga.size()).collect();
            let there = ga.translate_ranks(&all, &gb).unwrap();
            for (r, t) in all.iter().zip(&there) {
                if let Some(t) = t {
                    prop_assert_eq!(gb.translate_ranks(&[*t], &ga).unwrap(), vec![Some(*r)]);
                }
            }
            let common = there.iter().filter(|t| t.is_some()).count() as u32;
            prop_assert_eq!(common, ga.intersection(&gb).size());
        }
    }

    #[test]
    fn bad_ranks_are_errors_naming_the_rank() {
        let g = Group::new([3, 1, 2]).unwrap();
        let e = g.incl(&[0, 3]).unwrap_err().to_string();
        assert!(
            e.contains("rank 3 is out of range") && e.contains("3 ranks"),
            "{e}"
        );
        let e = g.excl(&[1, 1]).unwrap_err().to_string();
        assert!(e.contains("rank 1 is given twice"), "{e}");
        let e = Group::new([0, 5, 5]).unwrap_err().to_string();
        assert!(e.contains("rank 5 is given twice"), "{e}");
        assert!(g.translate_ranks(&[7], &g).is_err());
        assert!(Group::empty().is_empty());
        assert_eq!(g.incl(&[]).unwrap(), Group::empty());
    }
}
