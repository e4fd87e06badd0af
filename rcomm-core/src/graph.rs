//! Graph and distributed-graph process topologies (`MPI_Graph_create`,
//! `MPI_Dist_graph_create_adjacent`, `MPI_Dist_graph_create`) and their neighbour collectives
//! (`MPI_Neighbor_allgather(v)`, `MPI_Neighbor_alltoall(v)`, their `MPI_Ineighbor_*` forms;
//! see [`neighbor`](crate::neighbor)).
//!
//! A [`GraphComm`] knows, on each rank, the ranks it receives from (its *sources*, in order)
//! and the ranks it sends to (its *destinations*, in order). Block k of a neighbour
//! collective's receive buffer comes from `sources()[k]`, block k of its send buffer goes to
//! `destinations()[k]`. A rank may appear several times (several edges between one pair):
//! the i-th time rank q lists p among its destinations pairs with the i-th time p lists q among
//! its sources. `reorder` is accepted; ranks keep their order.

use crate::comm::Communicator;
use crate::neighbor::{self, Edges, Layout, NeighborRequest};
use crate::{CommError, Op, Result};
use bytemuck::Pod;
use std::sync::Arc;

/// Internal tags of graph neighbour exchanges: this base plus the edge's occurrence index
/// between its two ranks (above every collective tag, which run over 16 + 2³⁰).
const TAG_GRAPH_BASE: i32 = 0x5000_0000;
const MAX_OCCURRENCE: usize = (i32::MAX - TAG_GRAPH_BASE) as usize;

/// Which kind of graph topology a [`GraphComm`] has.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// `MPI_Graph_create`: the whole graph, as `index` and `edges`.
    Graph { index: Vec<u32>, edges: Vec<u32> },
    /// `MPI_Dist_graph_create(_adjacent)`: only this rank's edges.
    Dist,
}

/// A communicator with a graph or distributed-graph topology (see the module notes).
/// Dereferences to its [`Communicator`].
#[derive(Debug, Clone)]
pub struct GraphComm {
    comm: Communicator,
    kind: Arc<Kind>,
    sources: Vec<u32>,
    source_weights: Option<Vec<i32>>,
    destinations: Vec<u32>,
    destination_weights: Option<Vec<i32>>,
}

impl std::ops::Deref for GraphComm {
    type Target = Communicator;
    fn deref(&self) -> &Communicator {
        &self.comm
    }
}

/// Checks `index`/`edges` of `MPI_Graph_create` for `size` ranks; the number of nodes.
fn check_graph(index: &[u32], edges: &[u32], size: u32) -> Result<u32> {
    let n = index.len();
    if n as u64 > u64::from(size) {
        return Err(CommError::InvalidArg(format!(
            "graph_create: {n} nodes, the communicator has {size} ranks"
        )));
    }
    if index.windows(2).any(|w| w[0] > w[1]) {
        return Err(CommError::InvalidArg(format!(
            "graph_create: index {index:?} decreases (it holds cumulative degrees)"
        )));
    }
    if index.last().map_or(0, |&l| l as usize) != edges.len() {
        return Err(CommError::InvalidArg(format!(
            "graph_create: index ends at {:?}, but there are {} edges",
            index.last(),
            edges.len()
        )));
    }
    if let Some(&e) = edges.iter().find(|&&e| e as usize >= n) {
        return Err(CommError::InvalidArg(format!(
            "graph_create: edge to node {e} of a graph of {n} nodes"
        )));
    }
    Ok(n as u32)
}

fn check_ranks(op: &str, what: &str, ranks: &[u32], size: u32) -> Result<()> {
    match ranks.iter().find(|&&r| r >= size) {
        Some(&r) => Err(CommError::InvalidArg(format!(
            "{op}: {what} rank {r} of a communicator of {size}"
        ))),
        None => Ok(()),
    }
}

fn check_weights(op: &str, what: &str, w: Option<&[i32]>, n: usize) -> Result<()> {
    match w {
        Some(w) if w.len() != n => Err(CommError::InvalidArg(format!(
            "{op}: {} {what} weights for {n} edges",
            w.len()
        ))),
        Some(w) if w.iter().any(|&x| x < 0) => Err(CommError::InvalidArg(format!(
            "{op}: negative {what} weight"
        ))),
        _ => Ok(()),
    }
}

impl Communicator {
    /// A communicator with the graph of `index` and `edges` (`MPI_Graph_create`): node i's
    /// neighbours are `edges[index[i-1]..index[i]]` (`index[-1]` = 0), and the first
    /// `index.len()` ranks are the nodes; ranks beyond get `None`. Neighbour collectives send
    /// to and receive from the same list of neighbours, so the graph must list each edge at
    /// both of its ends (MPI's rule; checked, an error on every rank otherwise). Collective.
    pub fn graph_create(
        &self,
        index: &[u32],
        edges: &[u32],
        reorder: bool,
    ) -> Result<Option<GraphComm>> {
        let _ = reorder; // accepted; ranks keep their order
        let n = check_graph(index, edges, self.size())?;
        let nb = |i: u32| -> &[u32] {
            let lo = if i == 0 { 0 } else { index[i as usize - 1] };
            &edges[lo as usize..index[i as usize] as usize]
        };
        // Symmetric adjacency: q lists p as often as p lists q.
        let mut count = std::collections::HashMap::<(u32, u32), i64>::new();
        for p in 0..n {
            for &q in nb(p) {
                *count.entry((p.min(q), p.max(q))).or_default() += if p <= q { 1 } else { -1 };
            }
        }
        if let Some((&(p, q), _)) = count.iter().find(|&(&(p, q), &c)| p != q && c != 0) {
            return Err(CommError::InvalidArg(format!(
                "graph_create: nodes {p} and {q} list each other a different number of times \
                 (neighbour collectives need each edge at both ends)"
            )));
        }
        let inside = self.rank() < n;
        let comm = self.split(inside.then_some(0), self.rank() as i32)?;
        Ok(comm.map(|comm| {
            let mine = nb(comm.rank()).to_vec();
            GraphComm {
                comm,
                kind: Arc::new(Kind::Graph {
                    index: index.to_vec(),
                    edges: edges.to_vec(),
                }),
                sources: mine.clone(),
                source_weights: None,
                destinations: mine,
                destination_weights: None,
            }
        }))
    }

    /// The rank this process would have in [`graph_create`](Self::graph_create) of this
    /// graph (`MPI_Graph_map`): its own rank if it is a node, `None` otherwise.
    pub fn graph_map(&self, index: &[u32], edges: &[u32]) -> Result<Option<u32>> {
        let n = check_graph(index, edges, self.size())?;
        Ok((self.rank() < n).then_some(self.rank()))
    }

    /// A communicator where this rank receives from `sources` and sends to `destinations`, in
    /// those orders (`MPI_Dist_graph_create_adjacent`); weights are `None` for unweighted
    /// (`MPI_UNWEIGHTED`) or one non-negative weight per edge (kept, not used for placement).
    /// Every edge must be listed at both ends — p among q's destinations as often as q among
    /// p's sources — which is checked (an error on every rank otherwise). Collective.
    pub fn dist_graph_create_adjacent(
        &self,
        sources: &[u32],
        source_weights: Option<&[i32]>,
        destinations: &[u32],
        destination_weights: Option<&[i32]>,
        reorder: bool,
    ) -> Result<GraphComm> {
        let _ = reorder; // accepted; ranks keep their order
        const OP: &str = "dist_graph_create_adjacent";
        let n = self.size();
        let local = check_ranks(OP, "source", sources, n)
            .and_then(|_| check_ranks(OP, "destination", destinations, n))
            .and_then(|_| check_weights(OP, "source", source_weights, sources.len()))
            .and_then(|_| check_weights(OP, "destination", destination_weights, destinations.len()))
            .and_then(|_| {
                if sources.len().max(destinations.len()) > MAX_OCCURRENCE {
                    Err(CommError::InvalidArg(format!("{OP}: too many edges")))
                } else {
                    Ok(())
                }
            });
        // Every rank learns whether the graph is consistent, even the ranks whose own lists
        // are well formed: out[p] = how often p is our destination, compared on p with how
        // often we are its source.
        let mut out = vec![0u32; n as usize];
        let mut bad = [u32::from(local.is_err())];
        if local.is_ok() {
            for &d in destinations {
                out[d as usize] += 1;
            }
        }
        let mut inc = vec![0u32; n as usize];
        self.alltoall(&out, &mut inc)?;
        if local.is_ok() {
            let mut want = vec![0u32; n as usize];
            for &s in sources {
                want[s as usize] += 1;
            }
            if want != inc {
                bad[0] = 2;
            }
        }
        self.allreduce_in_place(&mut bad, Op::Max)?;
        local?;
        if bad[0] != 0 {
            return Err(CommError::InvalidArg(format!(
                "{OP}: the ranks' edges disagree (some rank lists p among its destinations a \
                 different number of times than p lists it among its sources){}",
                if bad[0] == 1 {
                    " or a rank passed bad arguments"
                } else {
                    ""
                }
            )));
        }
        Ok(GraphComm {
            comm: self.dup()?,
            kind: Arc::new(Kind::Dist),
            sources: sources.to_vec(),
            source_weights: source_weights.map(<[i32]>::to_vec),
            destinations: destinations.to_vec(),
            destination_weights: destination_weights.map(<[i32]>::to_vec),
        })
    }

    /// A distributed graph from edges given anywhere (`MPI_Dist_graph_create`): this rank
    /// names, for each `sources[i]`, `degrees[i]` destinations taken in turn from
    /// `destinations` (with `weights`, one per edge, or `None`). Every rank then holds the
    /// edges that start or end at it, ordered by the rank that named them and their position
    /// there. Collective.
    pub fn dist_graph_create(
        &self,
        sources: &[u32],
        degrees: &[u32],
        destinations: &[u32],
        weights: Option<&[i32]>,
        reorder: bool,
    ) -> Result<GraphComm> {
        const OP: &str = "dist_graph_create";
        let n = self.size();
        let total: u64 = degrees.iter().map(|&d| u64::from(d)).sum();
        let local = if sources.len() != degrees.len() {
            Err(CommError::InvalidArg(format!(
                "{OP}: {} sources and {} degrees",
                sources.len(),
                degrees.len()
            )))
        } else if total != destinations.len() as u64 {
            Err(CommError::InvalidArg(format!(
                "{OP}: degrees add up to {total}, but there are {} destinations",
                destinations.len()
            )))
        } else {
            check_ranks(OP, "source", sources, n)
                .and_then(|_| check_ranks(OP, "destination", destinations, n))
                .and_then(|_| check_weights(OP, "edge", weights, destinations.len()))
        };
        // Edges as (source, destination, weight) triples; none from a rank with bad input,
        // which then fails every rank below.
        let mut mine: Vec<u32> = Vec::new();
        if local.is_ok() {
            let mut k = 0;
            for (&s, &d) in sources.iter().zip(degrees) {
                for _ in 0..d {
                    let w = weights.map_or(0, |w| w[k]);
                    mine.extend([s, destinations[k], w as u32]);
                    k += 1;
                }
            }
        }
        let mut counts = vec![0usize; n as usize];
        let mut bad = [u32::from(local.is_err())];
        self.allreduce_in_place(&mut bad, Op::Max)?;
        local?;
        if bad[0] != 0 {
            return Err(CommError::InvalidArg(format!(
                "{OP}: a rank passed bad arguments"
            )));
        }
        self.allgather(&[mine.len()], &mut counts)?;
        let mut all = vec![0u32; counts.iter().sum()];
        self.allgatherv(&mine, &mut all, &counts)?;
        let me = self.rank();
        let weighted = weights.is_some();
        let (mut src, mut sw, mut dst, mut dw) = (vec![], vec![], vec![], vec![]);
        for e in all.chunks(3) {
            if e[1] == me {
                src.push(e[0]);
                sw.push(e[2] as i32);
            }
            if e[0] == me {
                dst.push(e[1]);
                dw.push(e[2] as i32);
            }
        }
        self.dist_graph_create_adjacent(
            &src,
            weighted.then_some(&sw[..]),
            &dst,
            weighted.then_some(&dw[..]),
            reorder,
        )
    }
}

impl GraphComm {
    /// The communicator underneath.
    pub fn comm(&self) -> &Communicator {
        &self.comm
    }

    /// Whether this is an `MPI_Graph_create` topology (else a distributed graph).
    pub fn is_graph(&self) -> bool {
        matches!(*self.kind, Kind::Graph { .. })
    }

    /// The whole graph of [`graph_create`](Communicator::graph_create) as (index, edges)
    /// (`MPI_Graph_get`); an error on a distributed graph, where no rank knows it all.
    pub fn graph_get(&self) -> Result<(&[u32], &[u32])> {
        match &*self.kind {
            Kind::Graph { index, edges } => Ok((index, edges)),
            Kind::Dist => Err(CommError::InvalidArg(
                "graph_get on a distributed graph (use dist_graph_neighbors)".into(),
            )),
        }
    }

    /// The neighbours of `rank` in a graph topology (`MPI_Graph_neighbors`); an error on a
    /// distributed graph or for a rank that is not a node.
    pub fn graph_neighbors(&self, rank: u32) -> Result<Vec<u32>> {
        let (index, edges) = self.graph_get()?;
        if rank as usize >= index.len() {
            return Err(CommError::InvalidRank {
                rank,
                size: index.len() as u32,
            });
        }
        let lo = if rank == 0 {
            0
        } else {
            index[rank as usize - 1]
        };
        Ok(edges[lo as usize..index[rank as usize] as usize].to_vec())
    }

    /// How many neighbours `rank` has in a graph topology (`MPI_Graph_neighbors_count`).
    pub fn graph_neighbors_count(&self, rank: u32) -> Result<u32> {
        self.graph_neighbors(rank).map(|v| v.len() as u32)
    }

    /// (in-degree, out-degree, weighted) of this rank (`MPI_Dist_graph_neighbors_count`);
    /// on a graph topology both degrees are the number of neighbours.
    pub fn dist_graph_neighbors_count(&self) -> (u32, u32, bool) {
        (
            self.sources.len() as u32,
            self.destinations.len() as u32,
            self.source_weights.is_some() || self.destination_weights.is_some(),
        )
    }

    /// The ranks this rank receives from, in order (`MPI_Dist_graph_neighbors`' sources).
    pub fn sources(&self) -> &[u32] {
        &self.sources
    }

    /// The ranks this rank sends to, in order (`MPI_Dist_graph_neighbors`' destinations).
    pub fn destinations(&self) -> &[u32] {
        &self.destinations
    }

    /// (sources, source weights, destinations, destination weights) of this rank
    /// (`MPI_Dist_graph_neighbors`); weights `None` when unweighted.
    #[allow(clippy::type_complexity)]
    pub fn dist_graph_neighbors(&self) -> (&[u32], Option<&[i32]>, &[u32], Option<&[i32]>) {
        (
            &self.sources,
            self.source_weights.as_deref(),
            &self.destinations,
            self.destination_weights.as_deref(),
        )
    }

    /// (rank, tag) per entry of `ranks`: the tag counts earlier occurrences of the same rank.
    fn tagged(ranks: &[u32]) -> Vec<Option<(u32, i32)>> {
        let mut seen = std::collections::HashMap::<u32, i32>::new();
        ranks
            .iter()
            .map(|&r| {
                let k = seen.entry(r).or_default();
                let t = TAG_GRAPH_BASE + *k;
                *k += 1;
                Some((r, t))
            })
            .collect()
    }

    /// This rank's edges for an exchange: block k to `destinations()[k]`, from
    /// `sources()[k]`; the blocking tags count earlier edges between the same two ranks.
    fn edges(&self) -> Edges {
        Edges {
            out: Self::tagged(&self.destinations),
            inn: Self::tagged(&self.sources),
            recv_order: (0..self.sources.len()).collect(),
        }
    }

    /// Sends `send` to every destination and receives each source's into its block of `recv`
    /// (`send.len()` elements per source, in [`sources`](Self::sources)' order)
    /// (`MPI_Neighbor_allgather`). Collective.
    pub fn neighbor_allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let (e, op) = (self.edges(), "neighbor_allgather");
        let l = Layout::allgather(&e, send.len(), recv.len())?;
        neighbor::exchange(&self.comm, &e, send, recv, &l, op)
    }

    /// Sends `send` to every destination and receives `recv_counts[k]` elements from source k
    /// at `recv_displs[k]` of `recv` (`MPI_Neighbor_allgatherv`; in elements). Each source
    /// must send exactly what this rank expects from it; receive blocks may not overlap.
    /// Collective.
    pub fn neighbor_allgatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let (e, op) = (self.edges(), "neighbor_allgatherv");
        let l = Layout::allgatherv(&e, send.len(), recv_counts, recv_displs);
        neighbor::exchange(&self.comm, &e, send, recv, &l, op)
    }

    /// Sends block k of `send` to destination k and receives source k's into block k of
    /// `recv`: equal blocks, `send.len() / destinations` elements (`MPI_Neighbor_alltoall`).
    /// Collective.
    pub fn neighbor_alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let (e, op) = (self.edges(), "neighbor_alltoall");
        let l = Layout::alltoall(&e, send.len(), recv.len())?;
        neighbor::exchange(&self.comm, &e, send, recv, &l, op)
    }

    /// Sends `send_counts[k]` elements at `send_displs[k]` of `send` to destination k and
    /// receives `recv_counts[k]` elements from source k at `recv_displs[k]` of `recv`
    /// (`MPI_Neighbor_alltoallv`; counts and displacements in elements). What a source sends
    /// must be exactly what this rank expects from it. Collective.
    pub fn neighbor_alltoallv<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let (e, op) = (self.edges(), "neighbor_alltoallv");
        let l = Layout::alltoallv(send_counts, send_displs, recv_counts, recv_displs);
        neighbor::exchange(&self.comm, &e, send, recv, &l, op)
    }

    /// Starts [`neighbor_allgather`](Self::neighbor_allgather) over owned buffers
    /// (`MPI_Ineighbor_allgather`); `wait` hands back `recv`.
    pub fn ineighbor_allgather<T: Pod + Send>(
        &self,
        send: Vec<T>,
        recv: Vec<T>,
    ) -> Result<NeighborRequest<T>> {
        let e = self.edges();
        let l = Layout::allgather(&e, send.len(), recv.len());
        neighbor::start(&self.comm, &e, send, recv, l, "ineighbor_allgather")
    }

    /// Starts [`neighbor_allgatherv`](Self::neighbor_allgatherv) over owned buffers
    /// (`MPI_Ineighbor_allgatherv`); `wait` hands back `recv`.
    pub fn ineighbor_allgatherv<T: Pod + Send>(
        &self,
        send: Vec<T>,
        recv: Vec<T>,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<NeighborRequest<T>> {
        let e = self.edges();
        let l = Ok(Layout::allgatherv(&e, send.len(), recv_counts, recv_displs));
        neighbor::start(&self.comm, &e, send, recv, l, "ineighbor_allgatherv")
    }

    /// Starts [`neighbor_alltoall`](Self::neighbor_alltoall) over owned buffers
    /// (`MPI_Ineighbor_alltoall`); `wait` hands back `recv`.
    pub fn ineighbor_alltoall<T: Pod + Send>(
        &self,
        send: Vec<T>,
        recv: Vec<T>,
    ) -> Result<NeighborRequest<T>> {
        let e = self.edges();
        let l = Layout::alltoall(&e, send.len(), recv.len());
        neighbor::start(&self.comm, &e, send, recv, l, "ineighbor_alltoall")
    }

    /// Starts [`neighbor_alltoallv`](Self::neighbor_alltoallv) over owned buffers
    /// (`MPI_Ineighbor_alltoallv`); `wait` hands back `recv`.
    pub fn ineighbor_alltoallv<T: Pod + Send>(
        &self,
        send: Vec<T>,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: Vec<T>,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<NeighborRequest<T>> {
        let e = self.edges();
        let l = Ok(Layout::alltoallv(
            send_counts,
            send_displs,
            recv_counts,
            recv_displs,
        ));
        neighbor::start(&self.comm, &e, send, recv, l, "ineighbor_alltoallv")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_arguments_are_checked() {
        assert_eq!(check_graph(&[2, 3, 4], &[1, 2, 0, 0], 3).unwrap(), 3);
        assert!(check_graph(&[2, 1], &[1, 0], 2).is_err(), "index decreases");
        assert!(check_graph(&[1], &[0, 0], 2).is_err(), "edges left over");
        assert!(check_graph(&[1, 2], &[2, 0], 2).is_err(), "edge to no node");
        assert!(
            check_graph(&[0, 0, 0], &[], 2).is_err(),
            "more nodes than ranks"
        );
        assert!(check_weights("t", "source", Some(&[1]), 2).is_err());
        assert!(check_weights("t", "source", Some(&[1, -1]), 2).is_err());
        assert!(check_weights("t", "source", None, 2).is_ok());
        assert!(check_ranks("t", "source", &[0, 3], 3).is_err());
    }
}
