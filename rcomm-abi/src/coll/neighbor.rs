//! Neighbour collectives on Cartesian, graph and distributed-graph communicators: every form
//! is rcomm's neighbour all-to-all-v over packed bytes (an allgather sends the same block to
//! each out-neighbour), in the neighbour order of the topology.

use super::{Buf, Coll, Wide, block, counts, displs, nonblocking};
use crate::call::guard;
use crate::consts::*;
use crate::errors::Res;
use crate::ptr;
use crate::topo::{self, Topo};
use std::ffi::c_void;

/// Block k of `send` to out-neighbour k, block k of `recv` from in-neighbour k.
fn exchange(comm: MPI_Comm, send: Vec<Buf>, recv: Vec<Buf>) -> Res<Coll> {
    let (t, inn, out) = topo::neighbours(comm)?;
    if send.len() != out.len() || recv.len() != inn.len() {
        return Err(crate::errors::err(
            MPI_ERR_INTERN,
            "neighbour count mismatch",
        ));
    }
    let mut data = Vec::new();
    let (mut sc, mut sd) = (Vec::new(), Vec::new());
    for b in &send {
        sd.push(data.len());
        let p = b.pack("sendbuf")?;
        sc.push(p.len());
        data.extend(p);
    }
    let (mut rc, mut rd, mut total) = (Vec::new(), Vec::new(), 0);
    for b in &recv {
        rd.push(total);
        rc.push(b.bytes());
        total += b.bytes();
    }
    let landing = vec![0u8; total];
    let req = match &t {
        Topo::Cart(c) => c.ineighbor_alltoallv(data, &sc, &sd, landing, &rc, &rd)?,
        Topo::Graph(g) => g.ineighbor_alltoallv(data, &sc, &sd, landing, &rc, &rd)?,
    };
    Ok(Coll::new(req, move |d| {
        for (k, b) in recv.iter().enumerate() {
            // A block from MPI_PROC_NULL is left as it was.
            if inn[k].is_some() {
                b.unpack(&d[rd[k]..rd[k] + rc[k]], "recvbuf")?;
            }
        }
        Ok(())
    }))
}

fn degrees(comm: MPI_Comm) -> Res<(usize, usize)> {
    let (_, i, o) = topo::neighbours(comm)?;
    Ok((i.len(), o.len()))
}

fn allgather(
    s: (*const c_void, i64, MPI_Datatype),
    r: (*mut c_void, i64, MPI_Datatype),
    comm: MPI_Comm,
) -> Res<Coll> {
    let (ni, no) = degrees(comm)?;
    let sb = Buf::new(s.0, s.1, s.2)?;
    let rb = Buf::new(r.0, 0, r.2)?;
    let k = ptr::count(r.1)?;
    exchange(
        comm,
        vec![sb; no],
        (0..ni).map(|i| rb.at((i * k) as isize, k)).collect(),
    )
}

fn allgatherv<C: Wide, D: Wide>(
    s: (*const c_void, i64, MPI_Datatype),
    r: (*mut c_void, *const C, *const D, MPI_Datatype),
    comm: MPI_Comm,
) -> Res<Coll> {
    let (ni, no) = degrees(comm)?;
    let sb = Buf::new(s.0, s.1, s.2)?;
    let rb = Buf::new(r.0, 0, r.3)?;
    let (cs, ds) = (counts(r.1, ni, "recvcounts")?, displs(r.2, ni, "displs")?);
    exchange(
        comm,
        vec![sb; no],
        (0..ni).map(|i| rb.at(ds[i], cs[i])).collect(),
    )
}

fn alltoall(
    s: (*const c_void, i64, MPI_Datatype),
    r: (*mut c_void, i64, MPI_Datatype),
    comm: MPI_Comm,
) -> Res<Coll> {
    let (ni, no) = degrees(comm)?;
    let (sb, rb) = (Buf::new(s.0, 0, s.2)?, Buf::new(r.0, 0, r.2)?);
    let (ks, kr) = (ptr::count(s.1)?, ptr::count(r.1)?);
    exchange(
        comm,
        (0..no).map(|i| sb.at((i * ks) as isize, ks)).collect(),
        (0..ni).map(|i| rb.at((i * kr) as isize, kr)).collect(),
    )
}

#[allow(clippy::too_many_arguments)]
fn alltoallv<C: Wide, D: Wide>(
    sbuf: *const c_void,
    scs: *const C,
    sds: *const D,
    st: MPI_Datatype,
    rbuf: *mut c_void,
    rcs: *const C,
    rds: *const D,
    rt: MPI_Datatype,
    comm: MPI_Comm,
) -> Res<Coll> {
    let (ni, no) = degrees(comm)?;
    let (sb, rb) = (Buf::new(sbuf, 0, st)?, Buf::new(rbuf, 0, rt)?);
    let (sc, sd) = (counts(scs, no, "sendcounts")?, displs(sds, no, "sdispls")?);
    let (rc, rd) = (counts(rcs, ni, "recvcounts")?, displs(rds, ni, "rdispls")?);
    exchange(
        comm,
        (0..no).map(|i| sb.at(sd[i], sc[i])).collect(),
        (0..ni).map(|i| rb.at(rd[i], rc[i])).collect(),
    )
}

#[allow(clippy::too_many_arguments)]
fn alltoallw(
    sbuf: *const c_void,
    scs: *const c_int,
    sds: *const MPI_Aint,
    sts: *const MPI_Datatype,
    rbuf: *mut c_void,
    rcs: *const c_int,
    rds: *const MPI_Aint,
    rts: *const MPI_Datatype,
    comm: MPI_Comm,
) -> Res<Coll> {
    let (ni, no) = degrees(comm)?;
    let side = |p: *const c_void, cs, ds, ts, n| -> Res<Vec<Buf>> {
        let (cs, ds) = (counts(cs, n, "counts")?, displs(ds, n, "displs")?);
        let ts = ptr::slice(ts, n, "datatypes")?;
        (0..n)
            .map(|i| Ok(Buf::new(p, 0, ts[i])?.at_bytes(ds[i], cs[i])))
            .collect()
    };
    exchange(
        comm,
        side(sbuf, scs, sds, sts, no)?,
        side(rbuf, rcs, rds, rts, ni)?,
    )
}

/// `MPI_Neighbor_allgather`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Neighbor_allgather", Some(comm), || {
        block(allgather(
            (sendbuf, sendcount.into(), sendtype),
            (recvbuf, recvcount.into(), recvtype),
            comm,
        ))
    })
}

/// `MPI_Ineighbor_allgather`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ineighbor_allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ineighbor_allgather", Some(comm), || {
        nonblocking(request, comm, || {
            allgather(
                (sendbuf, sendcount.into(), sendtype),
                (recvbuf, recvcount.into(), recvtype),
                comm,
            )
        })
    })
}

/// `MPI_Neighbor_allgatherv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs_: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Neighbor_allgatherv", Some(comm), || {
        block(allgatherv(
            (sendbuf, sendcount.into(), sendtype),
            (recvbuf, recvcounts, displs_, recvtype),
            comm,
        ))
    })
}

/// `MPI_Ineighbor_allgatherv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ineighbor_allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs_: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ineighbor_allgatherv", Some(comm), || {
        nonblocking(request, comm, || {
            allgatherv(
                (sendbuf, sendcount.into(), sendtype),
                (recvbuf, recvcounts, displs_, recvtype),
                comm,
            )
        })
    })
}

/// `MPI_Neighbor_alltoall`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Neighbor_alltoall", Some(comm), || {
        block(alltoall(
            (sendbuf, sendcount.into(), sendtype),
            (recvbuf, recvcount.into(), recvtype),
            comm,
        ))
    })
}

/// `MPI_Ineighbor_alltoall`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ineighbor_alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ineighbor_alltoall", Some(comm), || {
        nonblocking(request, comm, || {
            alltoall(
                (sendbuf, sendcount.into(), sendtype),
                (recvbuf, recvcount.into(), recvtype),
                comm,
            )
        })
    })
}

/// `MPI_Neighbor_alltoallv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Neighbor_alltoallv", Some(comm), || {
        block(alltoallv(
            sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
        ))
    })
}

/// `MPI_Ineighbor_alltoallv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ineighbor_alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ineighbor_alltoallv", Some(comm), || {
        nonblocking(request, comm, || {
            alltoallv(
                sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                comm,
            )
        })
    })
}

/// `MPI_Neighbor_alltoallw`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Neighbor_alltoallw", Some(comm), || {
        block(alltoallw(
            sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
        ))
    })
}

/// `MPI_Ineighbor_alltoallw`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ineighbor_alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ineighbor_alltoallw", Some(comm), || {
        nonblocking(request, comm, || {
            alltoallw(
                sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                comm,
            )
        })
    })
}
