//! Hierarchy as a combinator: a hierarchical collective is ONE flat [`Schedule`] made of the
//! per-level builders of this module's parent, each built on its level's ranks and remapped to
//! the communicator's ([`Schedule::remap`]), the levels run one after the other
//! ([`Schedule::then`]). Any executor runs it — the blocking and non-blocking host ones, the
//! device one — so the hierarchy is written once, here.
//!
//! The levels are the ranks of one node and, per local index, the ranks with that index on
//! every node (the *stripe*), as Open MPI's han and `coll::hier`. Every level works in place
//! on the parent's `Data`, at the offsets the parent's layout gives it, so no step copies a
//! byte the level algorithms would not copy themselves.
//!
//! **Inner algorithms** (the rule, fixed so that every rank builds the same schedule): rings
//! for the reducing and gathering levels — what the tuner's cost model of `hier` prices — or
//! [`NodeLevel::Direct`] in the node where the caller's links favour one phase (the device's
//! copy engines); binomial trees for broadcasts and for the reduce to a node's leader.
//! None of them is rank-ordered across nodes: commutative ops only.

use super::{
    Blocks, Buf, Chunk, Phase, Schedule, Step, binomial_bcast, binomial_reduce, concat,
    direct_allgather_v, direct_reduce_scatter_v, ring_allgather_v, ring_allreduce,
    ring_reduce_scatter_v,
};

/// Which ranks share a node: nodes in the order of their lowest rank, each node's ranks in
/// rank order (a rank's position there is its *local index*).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nodes {
    members: Vec<Vec<u32>>,
    node_of: Vec<u32>,
    local: Vec<u32>,
}

impl Nodes {
    /// From a node colour per rank (any values; equal colours share a node).
    pub fn from_colours(colours: &[u32]) -> Nodes {
        let mut seen: Vec<u32> = Vec::new();
        let mut members: Vec<Vec<u32>> = Vec::new();
        let (mut node_of, mut local) = (Vec::with_capacity(colours.len()), Vec::new());
        for (r, c) in colours.iter().enumerate() {
            let i = match seen.iter().position(|s| s == c) {
                Some(i) => i,
                None => {
                    seen.push(*c);
                    members.push(Vec::new());
                    seen.len() - 1
                }
            };
            local.push(members[i].len() as u32);
            members[i].push(r as u32);
            node_of.push(i as u32);
        }
        Nodes {
            members,
            node_of,
            local,
        }
    }

    /// Ranks.
    pub fn ranks(&self) -> usize {
        self.node_of.len()
    }

    /// Nodes.
    pub fn count(&self) -> usize {
        self.members.len()
    }

    /// Every node has the same number of ranks (the striped algorithms need it).
    pub fn regular(&self) -> bool {
        self.members
            .iter()
            .all(|m| m.len() == self.members[0].len())
    }

    /// The ranks of node `i`, in rank order.
    pub fn node(&self, i: usize) -> &[u32] {
        &self.members[i]
    }

    /// The node of `rank`.
    pub fn node_of(&self, rank: u32) -> usize {
        self.node_of[rank as usize] as usize
    }

    /// The local index of `rank`.
    pub fn local(&self, rank: u32) -> usize {
        self.local[rank as usize] as usize
    }

    /// The ranks of local index `j`, one per node that has one, in rank order (the order of
    /// `coll::hier`'s cross-node communicator, so both cut and combine alike).
    pub fn stripe(&self, j: usize) -> Vec<u32> {
        let mut s: Vec<u32> = self
            .members
            .iter()
            .filter_map(|m| m.get(j).copied())
            .collect();
        s.sort_unstable();
        s
    }
}

impl Schedule {
    /// A schedule built for a level of `members.len()` ranks, moved onto the communicator:
    /// level rank i becomes `members[i]`. Chunks stay where they are.
    pub fn remap(mut self, members: &[u32]) -> Schedule {
        for ph in &mut self.phases {
            for st in ph.xfers.iter_mut() {
                if let Step::Send { peer, .. } | Step::Recv { peer, .. } = st {
                    *peer = members[*peer as usize];
                }
            }
        }
        self
    }

    /// This schedule over the part of `Data` that starts at byte `off` (a builder's `Data` at
    /// 0 is the parent's at `off`).
    pub fn at(mut self, off: usize) -> Schedule {
        let shift = |c: &mut Chunk| {
            if c.buf == Buf::Data {
                c.off += off
            }
        };
        for ph in &mut self.phases {
            for st in ph.xfers.iter_mut().chain(ph.local.iter_mut()) {
                match st {
                    Step::Send { src, .. } => shift(src),
                    Step::Recv { dst, .. } => shift(dst),
                    Step::Reduce { dst, src, .. } | Step::Copy { dst, src } => {
                        shift(dst);
                        shift(src)
                    }
                }
            }
        }
        self
    }

    /// This schedule, then `next` (their scratch shared: they never run at once).
    pub fn then(self, next: Schedule) -> Schedule {
        concat(self, next)
    }

    /// This schedule and `other` side by side: phase k of each runs as one phase, `other`'s
    /// scratch after this one's. Both must post their messages to any one peer in the same
    /// phases on both ends (the same builder over tables of equal block sizes, say), since
    /// messages between two ranks match in posting order.
    pub fn beside(mut self, other: Schedule) -> Schedule {
        let base = self.tmp_len;
        let shift = |c: &mut Chunk| {
            if c.buf == Buf::Tmp {
                c.off += base
            }
        };
        for (k, mut ph) in other.phases.into_iter().enumerate() {
            for st in ph.xfers.iter_mut().chain(ph.local.iter_mut()) {
                match st {
                    Step::Send { src, .. } => shift(src),
                    Step::Recv { dst, .. } => shift(dst),
                    Step::Reduce { dst, src, .. } | Step::Copy { dst, src } => {
                        shift(dst);
                        shift(src)
                    }
                }
            }
            match self.phases.get_mut(k) {
                Some(mine) => {
                    mine.xfers.extend(ph.xfers);
                    mine.local.extend(ph.local);
                }
                None => self.phases.push(Phase {
                    xfers: ph.xfers,
                    local: ph.local,
                }),
            }
        }
        self.tmp_len += other.tmp_len;
        self
    }
}

/// `build(level rank, level size)` for the level `members`, remapped; empty where `rank` is
/// not a member.
fn level(rank: u32, members: &[u32], build: impl FnOnce(u32, u32) -> Schedule) -> Schedule {
    match members.iter().position(|&m| m == rank) {
        Some(i) => build(i as u32, members.len() as u32).remap(members),
        None => Schedule::default(),
    }
}

/// How the ranks of one node reduce-scatter and allgather.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeLevel {
    /// Rings ([`ring_reduce_scatter_v`], [`ring_allgather_v`]): the host's choice.
    Ring,
    /// One phase each ([`direct_reduce_scatter_v`], [`direct_allgather_v`]): where a node's
    /// links serve every pair at once (the device's copy engines).
    Direct,
}

/// The stripes of a hierarchical allreduce of `count` elements over `p` ranks of a node:
/// stripe i is elements `[count·i/p, count·(i+1)/p)` (the cut of `coll::hier`, so the
/// composed and the composing forms combine the same elements together).
pub fn stripes(p: usize, count: usize, elem: usize) -> Blocks {
    (0..p)
        .map(|i| {
            let (a, b) = (count * i / p, count * (i + 1) / p);
            (a * elem, (b - a) * elem)
        })
        .collect()
}

/// Hierarchical allreduce of `count` elements of `elem` bytes in `Data` (in place).
///
/// Regular nodes of p ranks: a reduce-scatter of the [`stripes`] in every node, a ring
/// allreduce of stripe j among the ranks of local index j (one per node), an allgather of the
/// stripes in every node. Nodes of unequal sizes: a binomial reduce to each node's first rank,
/// a ring allreduce among those, a binomial bcast in every node. `Tmp`: the largest level's.
/// **Not rank-ordered** (commutative ops only).
pub fn hier_allreduce(
    rank: u32,
    nodes: &Nodes,
    count: usize,
    elem: usize,
    intra: NodeLevel,
) -> Schedule {
    if nodes.ranks() < 2 || count == 0 {
        return Schedule::default();
    }
    let mine = nodes.node(nodes.node_of(rank));
    if !nodes.regular() {
        let bytes = count * elem;
        let leaders: Vec<u32> = (0..nodes.count()).map(|i| nodes.node(i)[0]).collect();
        return level(rank, mine, |r, n| binomial_reduce(r, n, 0, bytes))
            .then(level(rank, &leaders, |r, n| {
                ring_allreduce(r, n, count, elem)
            }))
            .then(level(rank, mine, |r, n| binomial_bcast(r, n, 0, bytes)));
    }
    let seg = stripes(mine.len(), count, elem);
    let j = nodes.local(rank);
    let (off, len) = seg[j];
    type Builder = fn(u32, &Blocks) -> Schedule;
    let (rs, ag): (Builder, Builder) = match intra {
        NodeLevel::Ring => (ring_reduce_scatter_v, ring_allgather_v),
        NodeLevel::Direct => (direct_reduce_scatter_v, direct_allgather_v),
    };
    level(rank, mine, |r, _| rs(r, &seg))
        .then(level(rank, &nodes.stripe(j), |r, n| {
            ring_allreduce(r, n, len / elem.max(1), elem).at(off)
        }))
        .then(level(rank, mine, |r, _| ag(r, &seg)))
}

/// Hierarchical broadcast of `bytes` from `root`: a binomial tree among one rank per node (the
/// root on its node; elsewhere the rank of the root's local index, or the first where the node
/// has fewer ranks), then a binomial tree in every node from that rank. Any placement; for
/// regular nodes this is `coll::hier`'s. Not a reduction.
pub fn hier_bcast(rank: u32, nodes: &Nodes, root: u32, bytes: usize) -> Schedule {
    if nodes.ranks() < 2 || bytes == 0 {
        return Schedule::default();
    }
    let (root_node, k) = (nodes.node_of(root), nodes.local(root));
    let rep = |i: usize| {
        let m = nodes.node(i);
        if i == root_node {
            root
        } else {
            m.get(k).copied().unwrap_or(m[0])
        }
    };
    let reps: Vec<u32> = (0..nodes.count()).map(rep).collect();
    let mine = nodes.node_of(rank);
    let from = nodes.local(reps[mine]) as u32;
    level(rank, &reps, |r, n| {
        binomial_bcast(r, n, root_node as u32, bytes)
    })
    .then(level(rank, nodes.node(mine), |r, n| {
        binomial_bcast(r, n, from, bytes)
    }))
}

/// Hierarchical allgather of `block` bytes per rank into `Data` (rank order, this rank's
/// block in place before), regular nodes only (`None` otherwise): a ring allgather of the own
/// blocks among the ranks of each local index, then, in every node, one ring allgather per
/// stripe position side by side ([`Schedule::beside`]), each block straight to its final
/// place. No `Tmp`. Not a reduction.
pub fn hier_allgather(rank: u32, nodes: &Nodes, block: usize) -> Option<Schedule> {
    let (stripe, node, tables) = striped(nodes, rank, block)?;
    let mut in_node = Schedule::default();
    for t in tables {
        in_node = in_node.beside(level(rank, node, |r, _| ring_allgather_v(r, &t)));
    }
    let own = blocks_of(&stripe, block);
    Some(level(rank, &stripe, |r, _| ring_allgather_v(r, &own)).then(in_node))
}

/// Hierarchical reduce-scatter of equal blocks of `block` bytes over `Data` (every block
/// before; block `rank` reduced after, the others scratch), regular nodes only (`None`
/// otherwise): in every node one ring reduce-scatter per stripe position side by side, which
/// leaves each rank the node's sums of its stripe's blocks, then a ring reduce-scatter of
/// those among the ranks of each local index. `Tmp`: a block per stripe position. **Not
/// rank-ordered** (commutative ops only).
pub fn hier_reduce_scatter(rank: u32, nodes: &Nodes, block: usize) -> Option<Schedule> {
    let (stripe, node, tables) = striped(nodes, rank, block)?;
    let mut in_node = Schedule::default();
    for t in tables {
        in_node = in_node.beside(level(rank, node, |r, _| ring_reduce_scatter_v(r, &t)));
    }
    let own = blocks_of(&stripe, block);
    Some(in_node.then(level(rank, &stripe, |r, _| ring_reduce_scatter_v(r, &own))))
}

/// The blocks of `ranks` (equal blocks of `block` bytes in rank order).
fn blocks_of(ranks: &[u32], block: usize) -> Blocks {
    ranks.iter().map(|&q| (q as usize * block, block)).collect()
}

/// The levels of a striped equal-block collective seen from `rank`: its stripe (the ranks of
/// its local index), its node, and per stripe position i the node-level block table (local
/// index l → the block of the i-th rank of stripe l). `None` for unequal nodes.
fn striped(nodes: &Nodes, rank: u32, block: usize) -> Option<(Vec<u32>, &[u32], Vec<Blocks>)> {
    if !nodes.regular() || nodes.ranks() == 0 {
        return None;
    }
    let node = nodes.node(nodes.node_of(rank));
    let stripes: Vec<Vec<u32>> = (0..node.len()).map(|l| nodes.stripe(l)).collect();
    let tables = (0..nodes.count())
        .map(|i| {
            let ith: Vec<u32> = stripes.iter().map(|s| s[i]).collect();
            blocks_of(&ith, block)
        })
        .collect();
    Some((stripes[nodes.local(rank)].clone(), node, tables))
}
