//! Process topologies: Cartesian grids, graphs and distributed graphs over rcomm's
//! [`CartComm`] and [`GraphComm`], and the queries on them. The neighbour collectives are in
//! `coll`. A communicator with a topology is an ordinary `MPI_Comm` (module `comm`) whose
//! topology object is kept here, by handle.

use crate::call::guard;
use crate::comm;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::ptr;
use rcomm::{CartComm, GraphComm};
use std::collections::HashMap;
use std::sync::Mutex;

/// A communicator's topology.
#[derive(Clone)]
pub enum Topo {
    /// `MPI_CART`.
    Cart(CartComm),
    /// `MPI_GRAPH` or `MPI_DIST_GRAPH` (`GraphComm::is_graph` tells).
    Graph(GraphComm),
}

static TOPOS: Mutex<Option<HashMap<MPI_Comm, Topo>>> = Mutex::new(None);

fn topos<R>(f: impl FnOnce(&mut HashMap<MPI_Comm, Topo>) -> R) -> R {
    let mut g = TOPOS.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// The topology of a live communicator (`None`: it has none).
pub fn of(h: MPI_Comm) -> Res<Option<Topo>> {
    comm::get(h)?;
    Ok(topos(|t| t.get(&h).cloned()))
}

fn cart(h: MPI_Comm) -> Res<CartComm> {
    match of(h)? {
        Some(Topo::Cart(c)) => Ok(c),
        _ => Err(err(
            MPI_ERR_TOPOLOGY,
            "the communicator has no Cartesian topology",
        )),
    }
}

fn graph(h: MPI_Comm, want_graph: bool) -> Res<GraphComm> {
    match of(h)? {
        Some(Topo::Graph(g)) if g.is_graph() == want_graph => Ok(g),
        _ => Err(err(
            MPI_ERR_TOPOLOGY,
            if want_graph {
                "the communicator has no graph topology"
            } else {
                "the communicator has no distributed graph topology"
            },
        )),
    }
}

/// Registers a communicator with a topology (or writes `MPI_COMM_NULL` for a rank left out).
fn register(
    parent: MPI_Comm,
    made: Option<(rcomm::Communicator, Topo)>,
    out: *mut MPI_Comm,
) -> Res {
    let Some((c, t)) = made else {
        return ptr::write(out, MPI_COMM_NULL, "newcomm");
    };
    let p = comm::get(parent)?;
    let h = comm::insert(c, &p)?;
    topos(|m| m.insert(h, t));
    ptr::write(out, h, "newcomm")
}

fn dims_of(ndims: c_int, dims: *const c_int) -> Res<Vec<u32>> {
    let n = usize::try_from(ndims)
        .map_err(|_| err(MPI_ERR_DIMS, format!("ndims {ndims} is negative")))?;
    ptr::slice(dims, n, "dims")?
        .iter()
        .map(|&d| {
            u32::try_from(d)
                .ok()
                .filter(|&d| d > 0)
                .ok_or_else(|| err(MPI_ERR_DIMS, format!("dimension {d} is not positive")))
        })
        .collect()
}

fn flags(n: usize, p: *const c_int, what: &str) -> Res<Vec<bool>> {
    Ok(ptr::slice(p, n, what)?.iter().map(|&v| v != 0).collect())
}

fn ranks(p: *const c_int, n: usize, size: u32, what: &str) -> Res<Vec<u32>> {
    ptr::slice(p, n, what)?
        .iter()
        .map(|&r| {
            u32::try_from(r)
                .ok()
                .filter(|&r| r < size)
                .ok_or_else(|| err(MPI_ERR_RANK, format!("{what}: {r} is not a rank")))
        })
        .collect()
}

/// `MPI_Cart_create`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Cart_create(
    comm_old: MPI_Comm,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    reorder: c_int,
    comm_cart: *mut MPI_Comm,
) -> c_int {
    guard("MPI_Cart_create", Some(comm_old), || {
        let c = comm::get_intra(comm_old, "a topology")?;
        let d = dims_of(ndims, dims)?;
        let p = flags(d.len(), periods, "periods")?;
        let cells: u64 = d.iter().map(|&x| u64::from(x)).product();
        if cells > u64::from(c.comm.size()) {
            return Err(err(
                MPI_ERR_DIMS,
                format!("a grid of {d:?} needs more than {} ranks", c.comm.size()),
            ));
        }
        let made = c.comm.cart_create(&d, &p, reorder != 0)?;
        register(
            comm_old,
            made.map(|cc| (cc.comm().clone(), Topo::Cart(cc))),
            comm_cart,
        )
    })
}

/// `MPI_Dims_create`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    guard("MPI_Dims_create", None, || {
        let n = usize::try_from(ndims).map_err(|_| err(MPI_ERR_DIMS, "ndims is negative"))?;
        let nn = u32::try_from(nnodes).map_err(|_| err(MPI_ERR_ARG, "nnodes is negative"))?;
        let out = ptr::slice_mut(dims, n, "dims")?;
        let mut d = out
            .iter()
            .map(|&v| {
                u32::try_from(v)
                    .map_err(|_| err(MPI_ERR_DIMS, format!("dims entry {v} is negative")))
            })
            .collect::<Res<Vec<u32>>>()?;
        rcomm::dims_create(nn, &mut d).map_err(|e| err(MPI_ERR_DIMS, e.to_string()))?;
        for (o, v) in out.iter_mut().zip(d) {
            *o = v as c_int;
        }
        Ok(())
    })
}

/// `MPI_Cartdim_get`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Cartdim_get(comm: MPI_Comm, ndims: *mut c_int) -> c_int {
    guard("MPI_Cartdim_get", Some(comm), || {
        ptr::write(ndims, cart(comm)?.dims().len() as c_int, "ndims")
    })
}

/// `MPI_Cart_get`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Cart_get(
    comm: MPI_Comm,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> c_int {
    guard("MPI_Cart_get", Some(comm), || {
        let c = cart(comm)?;
        let n = c.dims().len();
        if (maxdims as i64) < n as i64 {
            return Err(err(
                MPI_ERR_ARG,
                format!("maxdims {maxdims} < {n} dimensions"),
            ));
        }
        let me = c.coords(c.rank())?;
        let (d, p, k) = (
            ptr::slice_mut(dims, n, "dims")?,
            ptr::slice_mut(periods, n, "periods")?,
            ptr::slice_mut(coords, n, "coords")?,
        );
        for i in 0..n {
            d[i] = c.dims()[i] as c_int;
            p[i] = c.periods()[i] as c_int;
            k[i] = me[i] as c_int;
        }
        Ok(())
    })
}

/// `MPI_Cart_coords`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Cart_coords(
    comm: MPI_Comm,
    rank: c_int,
    maxdims: c_int,
    coords: *mut c_int,
) -> c_int {
    guard("MPI_Cart_coords", Some(comm), || {
        let c = cart(comm)?;
        let n = c.dims().len();
        if (maxdims as i64) < n as i64 {
            return Err(err(
                MPI_ERR_ARG,
                format!("maxdims {maxdims} < {n} dimensions"),
            ));
        }
        let r = u32::try_from(rank)
            .ok()
            .filter(|&r| r < c.size())
            .ok_or_else(|| err(MPI_ERR_RANK, format!("{rank} is not a rank of the grid")))?;
        let me = c.coords(r)?;
        let k = ptr::slice_mut(coords, n, "coords")?;
        for i in 0..n {
            k[i] = me[i] as c_int;
        }
        Ok(())
    })
}

/// `MPI_Cart_rank`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Cart_rank(comm: MPI_Comm, coords: *const c_int, rank: *mut c_int) -> c_int {
    guard("MPI_Cart_rank", Some(comm), || {
        let c = cart(comm)?;
        let k: Vec<i64> = ptr::slice(coords, c.dims().len(), "coords")?
            .iter()
            .map(|&v| v as i64)
            .collect();
        let r = c.rank_of(&k).map_err(|e| err(MPI_ERR_ARG, e.to_string()))?;
        ptr::write(rank, r as c_int, "rank")
    })
}

/// `MPI_Cart_shift`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Cart_shift(
    comm: MPI_Comm,
    direction: c_int,
    disp: c_int,
    rank_source: *mut c_int,
    rank_dest: *mut c_int,
) -> c_int {
    guard("MPI_Cart_shift", Some(comm), || {
        let c = cart(comm)?;
        let d = usize::try_from(direction)
            .ok()
            .filter(|&d| d < c.dims().len())
            .ok_or_else(|| {
                err(
                    MPI_ERR_ARG,
                    format!("direction {direction} is not a dimension"),
                )
            })?;
        let (s, t) = c.shift(d, disp)?;
        let r = |x: Option<u32>| x.map_or(MPI_PROC_NULL, |v| v as c_int);
        ptr::write(rank_source, r(s), "rank_source")?;
        ptr::write(rank_dest, r(t), "rank_dest")
    })
}

/// `MPI_Cart_sub`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Cart_sub(
    comm: MPI_Comm,
    remain_dims: *const c_int,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard("MPI_Cart_sub", Some(comm), || {
        let c = cart(comm)?;
        let keep = flags(c.dims().len(), remain_dims, "remain_dims")?;
        let sub = c.sub(&keep)?;
        register(comm, Some((sub.comm().clone(), Topo::Cart(sub))), newcomm)
    })
}

/// `MPI_Cart_map`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Cart_map(
    comm: MPI_Comm,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    guard("MPI_Cart_map", Some(comm), || {
        let c = comm::get_intra(comm, "MPI_Cart_map")?;
        let d = dims_of(ndims, dims)?;
        let p = flags(d.len(), periods, "periods")?;
        let r = c
            .comm
            .cart_map(&d, &p)
            .map_err(|e| err(MPI_ERR_DIMS, e.to_string()))?;
        ptr::write(newrank, r.map_or(MPI_UNDEFINED, |v| v as c_int), "newrank")
    })
}

/// `MPI_Topo_test`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Topo_test(comm: MPI_Comm, status: *mut c_int) -> c_int {
    guard("MPI_Topo_test", Some(comm), || {
        let s = match of(comm)? {
            None => MPI_UNDEFINED,
            Some(Topo::Cart(_)) => MPI_CART,
            Some(Topo::Graph(g)) if g.is_graph() => MPI_GRAPH,
            Some(Topo::Graph(_)) => MPI_DIST_GRAPH,
        };
        ptr::write(status, s, "status")
    })
}

fn index_edges(
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    size: u32,
) -> Res<(Vec<u32>, Vec<u32>)> {
    let n = usize::try_from(nnodes).map_err(|_| err(MPI_ERR_ARG, "nnodes is negative"))?;
    if n > size as usize {
        return Err(err(
            MPI_ERR_ARG,
            format!("{n} nodes on a {size}-rank communicator"),
        ));
    }
    let idx = ptr::slice(index, n, "index")?;
    let mut prev = 0;
    let mut ix = Vec::with_capacity(n);
    for &v in idx {
        if v < prev {
            return Err(err(MPI_ERR_ARG, "index must not decrease"));
        }
        prev = v;
        ix.push(v as u32);
    }
    let ne = ix.last().copied().unwrap_or(0) as usize;
    Ok((ix, ranks(edges, ne, size, "edges")?))
}

/// `MPI_Graph_create`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Graph_create(
    comm_old: MPI_Comm,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    reorder: c_int,
    comm_graph: *mut MPI_Comm,
) -> c_int {
    guard("MPI_Graph_create", Some(comm_old), || {
        let c = comm::get_intra(comm_old, "a topology")?;
        let (ix, ed) = index_edges(nnodes, index, edges, c.comm.size())?;
        let made = c.comm.graph_create(&ix, &ed, reorder != 0)?;
        register(
            comm_old,
            made.map(|g| (g.comm().clone(), Topo::Graph(g))),
            comm_graph,
        )
    })
}

/// `MPI_Graph_map`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Graph_map(
    comm: MPI_Comm,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    guard("MPI_Graph_map", Some(comm), || {
        let c = comm::get_intra(comm, "MPI_Graph_map")?;
        let (ix, ed) = index_edges(nnodes, index, edges, c.comm.size())?;
        let r = c.comm.graph_map(&ix, &ed)?;
        ptr::write(newrank, r.map_or(MPI_UNDEFINED, |v| v as c_int), "newrank")
    })
}

/// `MPI_Graphdims_get`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Graphdims_get(
    comm: MPI_Comm,
    nnodes: *mut c_int,
    nedges: *mut c_int,
) -> c_int {
    guard("MPI_Graphdims_get", Some(comm), || {
        let g = graph(comm, true)?;
        let (ix, ed) = g.graph_get()?;
        ptr::write(nnodes, ix.len() as c_int, "nnodes")?;
        ptr::write(nedges, ed.len() as c_int, "nedges")
    })
}

/// `MPI_Graph_get`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Graph_get(
    comm: MPI_Comm,
    maxindex: c_int,
    maxedges: c_int,
    index: *mut c_int,
    edges: *mut c_int,
) -> c_int {
    guard("MPI_Graph_get", Some(comm), || {
        let g = graph(comm, true)?;
        let (ix, ed) = g.graph_get()?;
        let ni = ix.len().min(maxindex.max(0) as usize);
        let ne = ed.len().min(maxedges.max(0) as usize);
        for (o, &v) in ptr::slice_mut(index, ni, "index")?.iter_mut().zip(ix) {
            *o = v as c_int;
        }
        for (o, &v) in ptr::slice_mut(edges, ne, "edges")?.iter_mut().zip(ed) {
            *o = v as c_int;
        }
        Ok(())
    })
}

fn rank_in(c: &GraphComm, rank: c_int) -> Res<u32> {
    u32::try_from(rank)
        .ok()
        .filter(|&r| r < c.size())
        .ok_or_else(|| err(MPI_ERR_RANK, format!("{rank} is not a rank of the graph")))
}

/// `MPI_Graph_neighbors_count`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Graph_neighbors_count(
    comm: MPI_Comm,
    rank: c_int,
    nneighbors: *mut c_int,
) -> c_int {
    guard("MPI_Graph_neighbors_count", Some(comm), || {
        let g = graph(comm, true)?;
        let n = g.graph_neighbors_count(rank_in(&g, rank)?)?;
        ptr::write(nneighbors, n as c_int, "nneighbors")
    })
}

/// `MPI_Graph_neighbors`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Graph_neighbors(
    comm: MPI_Comm,
    rank: c_int,
    maxneighbors: c_int,
    neighbors: *mut c_int,
) -> c_int {
    guard("MPI_Graph_neighbors", Some(comm), || {
        let g = graph(comm, true)?;
        let nb = g.graph_neighbors(rank_in(&g, rank)?)?;
        let n = nb.len().min(maxneighbors.max(0) as usize);
        for (o, &v) in ptr::slice_mut(neighbors, n, "neighbors")?
            .iter_mut()
            .zip(&nb)
        {
            *o = v as c_int;
        }
        Ok(())
    })
}

/// `MPI_UNWEIGHTED` / `MPI_WEIGHTS_EMPTY` or a weight array of `n`.
fn weights(p: *const c_int, n: usize) -> Res<Option<Vec<i32>>> {
    match p as usize {
        10 => Ok(None),
        11 if n == 0 => Ok(Some(Vec::new())),
        11 => Err(err(MPI_ERR_ARG, "MPI_WEIGHTS_EMPTY with a non-zero degree")),
        _ => Ok(Some(ptr::slice(p, n, "weights")?.to_vec())),
    }
}

/// `MPI_Dist_graph_create_adjacent`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Dist_graph_create_adjacent(
    comm_old: MPI_Comm,
    indegree: c_int,
    sources: *const c_int,
    sourceweights: *const c_int,
    outdegree: c_int,
    destinations: *const c_int,
    destweights: *const c_int,
    info: MPI_Info,
    reorder: c_int,
    comm_dist_graph: *mut MPI_Comm,
) -> c_int {
    let _ = info;
    guard("MPI_Dist_graph_create_adjacent", Some(comm_old), || {
        let c = comm::get_intra(comm_old, "a topology")?;
        let size = c.comm.size();
        let ni = usize::try_from(indegree).map_err(|_| err(MPI_ERR_ARG, "indegree is negative"))?;
        let no =
            usize::try_from(outdegree).map_err(|_| err(MPI_ERR_ARG, "outdegree is negative"))?;
        let src = ranks(sources, ni, size, "sources")?;
        let dst = ranks(destinations, no, size, "destinations")?;
        let (sw, dw) = (weights(sourceweights, ni)?, weights(destweights, no)?);
        let g = c.comm.dist_graph_create_adjacent(
            &src,
            sw.as_deref(),
            &dst,
            dw.as_deref(),
            reorder != 0,
        )?;
        register(
            comm_old,
            Some((g.comm().clone(), Topo::Graph(g))),
            comm_dist_graph,
        )
    })
}

/// `MPI_Dist_graph_create`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Dist_graph_create(
    comm_old: MPI_Comm,
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    weights_: *const c_int,
    info: MPI_Info,
    reorder: c_int,
    comm_dist_graph: *mut MPI_Comm,
) -> c_int {
    let _ = info;
    guard("MPI_Dist_graph_create", Some(comm_old), || {
        let c = comm::get_intra(comm_old, "a topology")?;
        let size = c.comm.size();
        let n = usize::try_from(n).map_err(|_| err(MPI_ERR_ARG, "n is negative"))?;
        let src = ranks(sources, n, size, "sources")?;
        let deg: Vec<u32> = ptr::slice(degrees, n, "degrees")?
            .iter()
            .map(|&d| u32::try_from(d).map_err(|_| err(MPI_ERR_ARG, "a degree is negative")))
            .collect::<Res<_>>()?;
        let total: usize = deg.iter().map(|&d| d as usize).sum();
        let dst = ranks(destinations, total, size, "destinations")?;
        let w = weights(weights_, total)?;
        let g = c
            .comm
            .dist_graph_create(&src, &deg, &dst, w.as_deref(), reorder != 0)?;
        register(
            comm_old,
            Some((g.comm().clone(), Topo::Graph(g))),
            comm_dist_graph,
        )
    })
}

/// `MPI_Dist_graph_neighbors_count`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Dist_graph_neighbors_count(
    comm: MPI_Comm,
    indegree: *mut c_int,
    outdegree: *mut c_int,
    weighted: *mut c_int,
) -> c_int {
    guard("MPI_Dist_graph_neighbors_count", Some(comm), || {
        let g = graph(comm, false)?;
        let (i, o, w) = g.dist_graph_neighbors_count();
        ptr::write(indegree, i as c_int, "indegree")?;
        ptr::write(outdegree, o as c_int, "outdegree")?;
        ptr::write(weighted, w as c_int, "weighted")
    })
}

/// `MPI_Dist_graph_neighbors`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Dist_graph_neighbors(
    comm: MPI_Comm,
    maxindegree: c_int,
    sources: *mut c_int,
    sourceweights: *mut c_int,
    maxoutdegree: c_int,
    destinations: *mut c_int,
    destweights: *mut c_int,
) -> c_int {
    guard("MPI_Dist_graph_neighbors", Some(comm), || {
        let g = graph(comm, false)?;
        let (s, sw, d, dw) = g.dist_graph_neighbors();
        let ni = s.len().min(maxindegree.max(0) as usize);
        let no = d.len().min(maxoutdegree.max(0) as usize);
        for (o, &v) in ptr::slice_mut(sources, ni, "sources")?.iter_mut().zip(s) {
            *o = v as c_int;
        }
        for (o, &v) in ptr::slice_mut(destinations, no, "destinations")?
            .iter_mut()
            .zip(d)
        {
            *o = v as c_int;
        }
        // Weights are written only where the graph has them and the caller gave an array.
        let given = |p: *mut c_int| !p.is_null() && p as usize != 10 && p as usize != 11;
        if let Some(w) = sw
            && given(sourceweights)
        {
            ptr::slice_mut(sourceweights, ni, "sourceweights")?.copy_from_slice(&w[..ni]);
        }
        if let Some(w) = dw
            && given(destweights)
        {
            ptr::slice_mut(destweights, no, "destweights")?.copy_from_slice(&w[..no]);
        }
        Ok(())
    })
}

/// A rank's neighbours in one direction, `None` for `MPI_PROC_NULL`.
pub type Neighbours = Vec<Option<u32>>;

/// This rank's (in-neighbours, out-neighbours) in the order neighbour collectives use;
/// `None` where a Cartesian neighbour is off the grid (`MPI_PROC_NULL`).
pub fn neighbours(h: MPI_Comm) -> Res<(Topo, Neighbours, Neighbours)> {
    let t = of(h)?.ok_or_else(|| err(MPI_ERR_TOPOLOGY, "the communicator has no topology"))?;
    let (i, o) = match &t {
        Topo::Cart(c) => {
            let nb = c.neighbors()?;
            (nb.clone(), nb)
        }
        Topo::Graph(g) => (
            g.sources().iter().map(|&r| Some(r)).collect(),
            g.destinations().iter().map(|&r| Some(r)).collect(),
        ),
    };
    Ok((t, i, o))
}
