//! Making communicators: `dup`, `split`, `split_type`, and the context ids that keep their
//! messages apart; plus the internal exchanges they need (allgather, barrier) written over
//! point-to-point on the parent's internal context.
//!
//! Context ids: every process keeps a bitmask of ids in use. Creating a communicator is
//! collective over its parent: the members combine their free masks (an allgather, then AND)
//! and all take the lowest id free everywhere, so an id never means two live communicators on
//! any process that belongs to both. User messages travel on context `2·id`, the
//! communicator's internal traffic on `2·id + 1`, so a user's tags can never meet rcomm's.

use crate::comm::{Communicator, Group, Tag};
use crate::p2p::matcher::Source;
use crate::{CommError, Result};
use std::sync::{Arc, Mutex};

/// Context ids per process (a bitmask of this many bits is exchanged when one is allocated).
pub(crate) const MAX_IDS: usize = 2048;
const WORDS: usize = MAX_IDS / 64;

const TAG_ALLGATHER: Tag = Tag(1);
const TAG_BARRIER: Tag = Tag(2);

/// Which context ids this process uses.
#[derive(Debug)]
pub(crate) struct CtxIds {
    used: Mutex<[u64; WORDS]>,
}

impl CtxIds {
    /// With the world's id (0) taken.
    pub(crate) fn new() -> Self {
        let mut used = [0u64; WORDS];
        used[0] = 1;
        Self {
            used: Mutex::new(used),
        }
    }

    fn free_mask(&self) -> [u64; WORDS] {
        let used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        let mut m = [0u64; WORDS];
        for (f, u) in m.iter_mut().zip(used.iter()) {
            *f = !u;
        }
        m
    }

    fn take(&self, id: usize) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        let (w, b) = (id / 64, id % 64);
        let was = used[w] >> b & 1 == 1;
        used[w] |= 1 << b;
        !was
    }

    fn release(&self, id: usize) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        used[id / 64] &= !(1 << (id % 64));
    }
}

/// Returns a communicator's context id to the pool when its last clone is dropped.
#[derive(Debug)]
pub(crate) struct CtxGuard {
    ids: Arc<CtxIds>,
    id: usize,
}

impl Drop for CtxGuard {
    fn drop(&mut self) {
        self.ids.release(self.id);
    }
}

impl Communicator {
    fn internal(&self) -> u32 {
        self.ctx + 1
    }

    /// Gathers `mine` (the same length on every rank) from every rank, in rank order: a ring,
    /// n−1 steps, on the internal context.
    pub(crate) fn allgather_bytes(&self, mine: &[u8]) -> Result<Vec<u8>> {
        let (n, r, len) = (self.size as usize, self.rank as usize, mine.len());
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
                TAG_ALLGATHER,
                &mut all[recv_block * len..(recv_block + 1) * len],
                Source::Rank(left),
                TAG_ALLGATHER,
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
        let n = self.size;
        let mut k = 1;
        while k < n {
            let to = (self.rank + k) % n;
            let from = (self.rank + n - k) % n;
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
        let ids = self.shared.ctx_ids.clone();
        let mine: Vec<u8> = ids
            .free_mask()
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let all = self.allgather_bytes(&mine)?;
        let mut common = [u64::MAX; WORDS];
        for rank in all.chunks(WORDS * 8) {
            for (i, w) in rank.chunks(8).enumerate() {
                common[i] &= u64::from_le_bytes(w.try_into().expect("8 bytes"));
            }
        }
        let id = (0..MAX_IDS)
            .find(|&i| common[i / 64] >> (i % 64) & 1 == 1)
            .ok_or_else(|| CommError::Exhausted(format!("all {MAX_IDS} communicator context ids are in use: free communicators you no longer need")))?;
        if !ids.take(id) {
            return Err(CommError::Exhausted(
                "a context id was taken meanwhile by another thread: create communicators that share ranks from one thread at a time".into(),
            ));
        }
        Ok(Arc::new(CtxGuard { ids, id }))
    }

    fn child(&self, guard: Arc<CtxGuard>, world: Vec<u32>, rank: u32) -> Communicator {
        let node = &self.shared.node_of;
        let one_node = world
            .iter()
            .all(|&w| node[w as usize] == node[world[0] as usize]);
        let mut colours: Vec<u32> = world.iter().map(|&w| node[w as usize]).collect();
        colours.sort_unstable();
        colours.dedup();
        Communicator {
            ctx: 2 * guard.id as u32,
            rank,
            size: world.len() as u32,
            one_node,
            nodes: colours.len() as u32,
            group: Some(Arc::new(Group::new(world))),
            _ctx_guard: Some(guard),
            coll_seq: Default::default(),
            algo_force: None,
            failure_scope: None,
            shared: self.shared.clone(),
        }
    }

    fn members(&self) -> Vec<u32> {
        (0..self.size)
            .map(|r| self.world_rank(r).expect("in range"))
            .collect()
    }

    /// A communicator with the same ranks and a separate message space (collective).
    pub fn dup(&self) -> Result<Communicator> {
        let guard = self.alloc_id()?;
        Ok(self.child(guard, self.members(), self.rank))
    }

    /// Splits into disjoint communicators, one per `color`, ranks ordered by (`key`, rank in
    /// this communicator); `None` opts out (MPI_UNDEFINED) and returns `None`. Collective.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator>> {
        let guard = self.alloc_id()?;
        let me = [color.unwrap_or(u32::MAX).to_le_bytes(), key.to_le_bytes()].concat();
        let all = self.allgather_bytes(&me)?;
        let Some(c) = color else { return Ok(None) };
        if c == u32::MAX {
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
            .position(|&(_, r)| r == self.rank)
            .expect("we chose this color") as u32;
        let world = mine
            .iter()
            .map(|&(_, r)| self.world_rank(r).expect("in range"))
            .collect();
        Ok(Some(self.child(guard, world, rank)))
    }

    /// Splits by shared-memory domain: one communicator per node (same hostname, boot id and
    /// network namespace), ranks in this communicator's order. Collective.
    pub fn split_type(&self, kind: SplitType) -> Result<Communicator> {
        match kind {
            SplitType::Node => {
                let me = self.world_rank(self.rank)?;
                let color = self.shared.node_of[me as usize];
                Ok(self
                    .split(Some(color), self.rank as i32)?
                    .expect("a color was given"))
            }
        }
    }
}

/// How [`Communicator::split_type`] groups ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SplitType {
    /// Ranks that share a node (MPI_COMM_TYPE_SHARED).
    Node,
}
