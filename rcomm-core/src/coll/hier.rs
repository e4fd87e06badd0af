//! Hierarchical collectives for communicators that span nodes (as Open MPI's han): each is a
//! composition of collectives on two sub-communicators — the ranks of one node (shared memory)
//! and, per local index, one rank of every node (the network) — which the cost model picks
//! when the network is the slow part.
//!
//! The sub-communicators are made on first use (collectively: every rank chooses the same
//! algorithm, so every rank gets here at the same point) and cached per communicator. Their
//! collectives are forced to `auto` for the operations used here, so an `RCOMM_ALGO` that
//! forces `hier` does not recurse into them.

use super::{ReduceOp, Reducer};
use crate::coll::check::CheckedEngine;
use crate::comm::Communicator;
use crate::{CommError, Result};
use std::sync::Arc;

/// The levels' data is the collective part's (`comm::coll_part`): made once per communicator,
/// shared by its clones and `with_algo` handles, dropped with the last of them.
pub(crate) use crate::comm::coll_part::Hier;

/// Forces `auto` for the collectives a hierarchical one runs on its sub-communicators.
fn unforced(c: Communicator) -> Result<Communicator> {
    use rcomm_runtime::algo::Coll;
    Ok([
        Coll::Allreduce,
        Coll::Bcast,
        Coll::Reduce,
        Coll::ReduceScatter,
        Coll::Allgather,
    ]
    .into_iter()
    .fold(c, |c, op| c.with_forced(op, None)))
}

impl Hier {
    /// The levels of `comm`, made on first use. Collective on first use.
    pub(crate) fn get_or_setup(comm: &Communicator) -> Result<Arc<Hier>> {
        let levels = comm.coll_part().levels();
        if let Some(h) = levels.get() {
            return Ok(h.clone());
        }
        let node_of = |r: u32| comm.topology().node_of(r);
        let mine = node_of(comm.rank())?;
        let mut per_node: Vec<(u32, u32)> = Vec::new();
        let mut local_index = Vec::with_capacity(comm.size() as usize);
        for r in 0..comm.size() {
            let c = node_of(r)?;
            match per_node.iter_mut().find(|(n, _)| *n == c) {
                Some(e) => {
                    local_index.push(e.1);
                    e.1 += 1
                }
                None => {
                    local_index.push(0);
                    per_node.push((c, 1))
                }
            }
        }
        let regular = per_node.iter().all(|&(_, k)| k == per_node[0].1);
        let cross_rank = (0..local_index.len())
            .map(|q| {
                local_index[..q]
                    .iter()
                    .filter(|&&i| i == local_index[q])
                    .count() as u32
            })
            .collect();
        let node = comm
            .split(Some(mine), comm.rank() as i32)?
            .ok_or_else(|| CommError::InvalidArg("node split opted out".into()))?;
        let cross = comm
            .split(Some(node.rank()), comm.rank() as i32)?
            .ok_or_else(|| CommError::InvalidArg("cross-node split opted out".into()))?;
        // A failure anywhere in the parent fails the parts: a rank waiting in the node phase
        // for a neighbour stuck in the cross-node phase names the lost rank, not the neighbour.
        let mut scope: Vec<u32> = (0..comm.size())
            .map(|r| comm.world_rank(r))
            .collect::<Result<_>>()?;
        scope.sort_unstable();
        let scope = Arc::new(scope);
        let (mut node, mut cross) = (unforced(node)?, unforced(cross)?);
        let parent = crate::fr::comm_label(comm.ctx());
        node.set_name(&format!("{parent}/node"));
        cross.set_name(&format!("{parent}/cross"));
        if comm.shared().check {
            // A mismatch of the parent's call fails the parts' collectives too.
            let mut e = comm.shared().lock();
            let parent = (comm.ctx() + 1, comm.check_gen());
            e.check_link((node.ctx() + 1, node.check_gen()), parent);
            e.check_link((cross.ctx() + 1, cross.check_gen()), parent);
        }
        node.coll_part_mut().set_failure_scope(scope.clone());
        cross.coll_part_mut().set_failure_scope(scope);
        let h = Arc::new(Hier {
            node,
            cross,
            regular,
            local_index,
            cross_rank,
        });
        // Two threads setting up at once would be two concurrent collectives on one
        // communicator (erroneous); the first one's levels stay.
        Ok(levels.get_or_init(|| h).clone())
    }

    /// Allreduce of `data` (elements of `elem` bytes) with the sum-form of `r` (an average is
    /// divided once, by the caller). Regular placement: reduce-scatter in the node, allreduce
    /// of each stripe across nodes, allgather in the node. Otherwise: allreduce in the node,
    /// allreduce among the nodes' first ranks, bcast in the node.
    pub(crate) fn allreduce(&self, data: &mut [u8], elem: usize, r: &Reducer) -> Result<()> {
        let op = || ReduceOp::<u8>::erased(r.clone());
        let (p, me) = (self.node.size() as usize, self.node.rank() as usize);
        // Byte-typed calls below move and reduce whole blocks of whole elements, except an
        // allreduce, which cuts its vector into segments: it gets the element size.
        if p == 1 {
            return self.cross.allreduce_bytes(data, None, elem, r.clone());
        }
        if !self.regular {
            // (An allreduce rather than a reduce in the node: it takes the element size.)
            self.node.allreduce_bytes(data, None, elem, r.clone())?;
            if me == 0 {
                self.cross.allreduce_bytes(data, None, elem, r.clone())?;
            }
            return self.node.bcast(data, 0);
        }
        let count = data.len() / elem.max(1);
        let counts: Vec<usize> = (0..p)
            .map(|i| (count * (i + 1) / p - count * i / p) * elem)
            .collect();
        let mut stripe = vec![0u8; counts[me]];
        self.node
            .reduce_scatter_v(data, &mut stripe, &counts, op())?;
        if self.cross.size() > 1 {
            self.cross
                .allreduce_bytes(&mut stripe, None, elem, r.clone())?;
        }
        self.node.allgatherv(&stripe, data, &counts)
    }

    /// Broadcast from `root` (a rank of the parent communicator): across nodes among the
    /// ranks with the root's local index, then in every node from that rank. Needs every node
    /// to have a rank with the root's local index (regular placement); otherwise the caller
    /// runs a flat algorithm.
    pub(crate) fn bcast(&self, data: &mut [u8], root: u32) -> Result<()> {
        let k = self.local_index[root as usize];
        if self.node.rank() == k {
            // The root's rank among the ranks of local index k, which keep the parent's order.
            let cross_root = self.local_index[..root as usize]
                .iter()
                .filter(|&&i| i == k)
                .count() as u32;
            self.cross.bcast(data, cross_root)?;
        }
        self.node.bcast(data, k)
    }

    /// Where parent rank `q`'s block sits when blocks are grouped by local index (all of
    /// local index 0 in cross order, then 1, …): the layout of the node-level phase.
    fn grouped(&self, q: usize) -> usize {
        let m = self.cross.size() as usize;
        self.local_index[q] as usize * m + self.cross_rank[q] as usize
    }

    /// Allgather of equal blocks (`send`, `recv` = size × block bytes), regular placement: an
    /// allgather across nodes among the ranks of this local index, an allgather of those
    /// parts in the node, and a reordering into rank order.
    pub(crate) fn allgather(&self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        let (b, m, p) = (
            send.len(),
            self.cross.size() as usize,
            self.node.size() as usize,
        );
        let mut part = vec![0u8; m * b];
        self.cross.allgather(send, &mut part)?;
        let mut all = vec![0u8; p * m * b];
        self.node.allgather(&part, &mut all)?;
        for q in 0..self.local_index.len() {
            let g = self.grouped(q);
            recv[q * b..(q + 1) * b].copy_from_slice(&all[g * b..(g + 1) * b]);
        }
        Ok(())
    }

    /// Reduce-scatter of equal blocks (`send` = size × `recv.len()` bytes) with the sum form
    /// of `r`, regular placement: blocks regrouped by local index, a reduce-scatter in the node
    /// (local index j keeps the part of the ranks with index j), a reduce-scatter of that part
    /// across nodes.
    pub(crate) fn reduce_scatter(&self, send: &[u8], recv: &mut [u8], r: &Reducer) -> Result<()> {
        let op = || ReduceOp::<u8>::erased(r.clone());
        let (b, m) = (recv.len(), self.cross.size() as usize);
        let mut grouped = vec![0u8; send.len()];
        for q in 0..self.local_index.len() {
            let g = self.grouped(q);
            grouped[g * b..(g + 1) * b].copy_from_slice(&send[q * b..(q + 1) * b]);
        }
        let mut part = vec![0u8; m * b];
        self.node.reduce_scatter(&grouped, &mut part, op())?;
        self.cross.reduce_scatter(&part, recv, op())
    }

    /// The ranks of this node.
    pub(crate) fn node(&self) -> &Communicator {
        &self.node
    }

    pub(crate) fn regular(&self) -> bool {
        self.regular
    }
}
