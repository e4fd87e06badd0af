//! The collectives that move data without combining it: barrier, broadcast, gather, scatter,
//! allgather, all-to-all, with their v/w-variants, non-blocking and large-count forms.

use super::{Buf, Coll, Wide, block, counts, displs, in_place, intra, nonblocking, root_of};
use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::ptr;
use std::ffi::c_void;

fn barrier(comm: MPI_Comm) -> Res<Coll> {
    let c = intra(comm)?;
    Ok(Coll::new(c.comm.ibarrier()?, |_| Ok(())))
}

fn bcast(buf: *mut c_void, count: i64, dt: MPI_Datatype, root: c_int, comm: MPI_Comm) -> Res<Coll> {
    let c = intra(comm)?;
    let root = root_of(&c, root)?;
    let b = Buf::new(buf, count, dt)?;
    let me = c.comm.rank() == root;
    let data = if me {
        b.pack("buffer")?
    } else {
        vec![0u8; b.bytes()]
    };
    let req = c.comm.ibcast(data, root)?;
    Ok(Coll::new(req, move |d| {
        if me { Ok(()) } else { b.unpack(&d, "buffer") }
    }))
}

/// Gather and gatherv: `recv` is the root's (buffer, per-rank counts, displacements).
fn gather(
    send: (*const c_void, i64, MPI_Datatype),
    recv: (*mut c_void, MPI_Datatype),
    rcounts: impl FnOnce(usize) -> Res<(Vec<usize>, Vec<isize>)>,
    root: c_int,
    comm: MPI_Comm,
    v: bool,
) -> Res<Coll> {
    let c = intra(comm)?;
    let root = root_of(&c, root)?;
    let (n, me) = (c.comm.size() as usize, c.comm.rank() as usize);
    let is_root = me == root as usize;
    let mut place = None;
    if is_root {
        let r = Buf::new(recv.0, 0, recv.1)?;
        let (cs, ds) = rcounts(n)?;
        place = Some((r, cs, ds));
    }
    let contrib = match &place {
        Some((r, cs, ds)) if in_place(send.0) => r.at(ds[me], cs[me]).pack("recvbuf")?,
        _ if in_place(send.0) => {
            return Err(err(MPI_ERR_BUFFER, "only the root may pass MPI_IN_PLACE"));
        }
        _ => Buf::new(send.0, send.1, send.2)?.pack("sendbuf")?,
    };
    let req = match &place {
        Some((r, cs, _)) => {
            let bytes: Vec<usize> = cs.iter().map(|&k| k * r.elem()).collect();
            if bytes[me] != contrib.len() {
                return Err(err(
                    MPI_ERR_TRUNCATE,
                    format!(
                        "the root sends {} bytes to itself but expects {}",
                        contrib.len(),
                        bytes[me]
                    ),
                ));
            }
            if v {
                c.comm
                    .with_algo("gather", "linear")?
                    .igatherv(contrib, &bytes, root)?
            } else {
                c.comm.igather(contrib, root)?
            }
        }
        None if v => {
            let mut bytes = vec![0; n];
            bytes[me] = contrib.len();
            c.comm
                .with_algo("gather", "linear")?
                .igatherv(contrib, &bytes, root)?
        }
        None => c.comm.igather(contrib, root)?,
    };
    Ok(Coll::new(req, move |d| {
        let Some((r, cs, ds)) = place else {
            return Ok(());
        };
        let mut off = 0;
        for i in 0..n {
            let len = cs[i] * r.elem();
            r.at(ds[i], cs[i]).unpack(&d[off..off + len], "recvbuf")?;
            off += len;
        }
        Ok(())
    }))
}

/// Scatter and scatterv: `send` is the root's (buffer, per-rank counts, displacements).
fn scatter(
    send: (*const c_void, MPI_Datatype),
    scounts: impl FnOnce(usize) -> Res<(Vec<usize>, Vec<isize>)>,
    recv: (*mut c_void, i64, MPI_Datatype),
    root: c_int,
    comm: MPI_Comm,
    v: bool,
) -> Res<Coll> {
    let c = intra(comm)?;
    let root = root_of(&c, root)?;
    let (n, me) = (c.comm.size() as usize, c.comm.rank() as usize);
    let is_root = me == root as usize;
    let keep = in_place(recv.0);
    if keep && !is_root {
        return Err(err(MPI_ERR_BUFFER, "only the root may pass MPI_IN_PLACE"));
    }
    let out = if keep {
        None
    } else {
        Some(Buf::new(recv.0, recv.1, recv.2)?)
    };
    let (data, bytes) = if is_root {
        let s = Buf::new(send.0, 0, send.1)?;
        let (cs, ds) = scounts(n)?;
        let mut data = Vec::new();
        for i in 0..n {
            data.extend(s.at(ds[i], cs[i]).pack("sendbuf")?);
        }
        let bytes: Vec<usize> = cs.iter().map(|&k| k * s.elem()).collect();
        (Some(data), bytes)
    } else {
        let mut bytes = vec![0; n];
        bytes[me] = out.as_ref().map_or(0, Buf::bytes);
        (None, bytes)
    };
    if let Some(o) = &out
        && o.bytes() != bytes[me]
    {
        return Err(err(
            MPI_ERR_TRUNCATE,
            format!(
                "{} bytes arrive for a {}-byte receive",
                bytes[me],
                o.bytes()
            ),
        ));
    }
    let req = if v {
        c.comm
            .with_algo("scatter", "linear")?
            .iscatterv(data, &bytes, root)?
    } else {
        c.comm.iscatter(data, bytes[me], root)?
    };
    Ok(Coll::new(req, move |d| match out {
        Some(o) => o.unpack(&d, "recvbuf"),
        None => Ok(()),
    }))
}

/// Allgather and allgatherv: every rank's block, placed at `displs[i]` extents.
fn allgather(
    send: (*const c_void, i64, MPI_Datatype),
    recv: (*mut c_void, MPI_Datatype),
    cs: Vec<usize>,
    ds: Vec<isize>,
    comm: MPI_Comm,
) -> Res<Coll> {
    let c = intra(comm)?;
    let (n, me) = (c.comm.size() as usize, c.comm.rank() as usize);
    let r = Buf::new(recv.0, 0, recv.1)?;
    let contrib = if in_place(send.0) {
        r.at(ds[me], cs[me]).pack("recvbuf")?
    } else {
        Buf::new(send.0, send.1, send.2)?.pack("sendbuf")?
    };
    let bytes: Vec<usize> = cs.iter().map(|&k| k * r.elem()).collect();
    if bytes.len() != n || bytes[me] != contrib.len() {
        return Err(err(
            MPI_ERR_TRUNCATE,
            format!(
                "this rank sends {} bytes, its block holds {}",
                contrib.len(),
                bytes[me]
            ),
        ));
    }
    let req = c.comm.iallgatherv(contrib, &bytes)?;
    Ok(Coll::new(req, move |d| {
        let mut off = 0;
        for i in 0..n {
            r.at(ds[i], cs[i])
                .unpack(&d[off..off + bytes[i]], "recvbuf")?;
            off += bytes[i];
        }
        Ok(())
    }))
}

/// One side of an all-to-all: per-peer buffers (address, count, type), any layout.
type Side = Vec<Buf>;

/// Alltoall, alltoallv and alltoallw: block j of `send` to rank j, block i of `recv` from rank i.
fn alltoall(send: Option<Side>, recv: Side, comm: MPI_Comm, v: bool) -> Res<Coll> {
    let c = intra(comm)?;
    // In place: each block goes out from where its answer lands.
    let send = send.unwrap_or_else(|| recv.clone());
    let mut data = Vec::new();
    for b in &send {
        data.extend(b.pack("sendbuf")?);
    }
    let sbytes: Vec<usize> = send.iter().map(Buf::bytes).collect();
    let rbytes: Vec<usize> = recv.iter().map(Buf::bytes).collect();
    let req = if v {
        c.comm
            .with_algo("alltoall", "pairwise")?
            .ialltoallv(data, &sbytes, &rbytes)?
    } else {
        c.comm.ialltoall(data)?
    };
    Ok(Coll::new(req, move |d| {
        let mut off = 0;
        for (b, &len) in recv.iter().zip(&rbytes) {
            b.unpack(&d[off..off + len], "recvbuf")?;
            off += len;
        }
        Ok(())
    }))
}

/// `n` blocks of `count` elements, one after another.
fn even(count: usize, n: usize) -> (Vec<usize>, Vec<isize>) {
    (
        vec![count; n],
        (0..n).map(|i| (i * count) as isize).collect(),
    )
}

/// The blocks of an equal-count all-to-all side.
fn even_side(p: *const c_void, count: i64, dt: MPI_Datatype, n: usize) -> Res<Side> {
    let b = Buf::new(p, 0, dt)?;
    let k = ptr::count(count)?;
    Ok((0..n).map(|i| b.at((i * k) as isize, k)).collect())
}

/// The blocks of a v-variant side.
fn v_side<C: Wide, D: Wide>(
    p: *const c_void,
    cs: *const C,
    ds: *const D,
    dt: MPI_Datatype,
    n: usize,
) -> Res<Side> {
    let b = Buf::new(p, 0, dt)?;
    let (cs, ds) = (counts(cs, n, "counts")?, displs(ds, n, "displs")?);
    Ok((0..n).map(|i| b.at(ds[i], cs[i])).collect())
}

/// The blocks of a w-variant side (byte displacements, a type per block).
fn w_side<C: Wide, D: Wide>(
    p: *const c_void,
    cs: *const C,
    ds: *const D,
    ts: *const MPI_Datatype,
    n: usize,
) -> Res<Side> {
    let (cs, ds) = (counts(cs, n, "counts")?, displs(ds, n, "displs")?);
    let ts = ptr::slice(ts, n, "datatypes")?;
    (0..n)
        .map(|i| Ok(Buf::new(p, 0, ts[i])?.at_bytes(ds[i], cs[i])))
        .collect()
}

fn size_of(comm: MPI_Comm) -> Res<usize> {
    Ok(intra(comm)?.comm.size() as usize)
}

fn alltoall_even(
    s: (*const c_void, i64, MPI_Datatype),
    r: (*mut c_void, i64, MPI_Datatype),
    comm: MPI_Comm,
) -> Res<Coll> {
    let n = size_of(comm)?;
    let send = if in_place(s.0) {
        None
    } else {
        Some(even_side(s.0, s.1, s.2, n)?)
    };
    alltoall(send, even_side(r.0, r.1, r.2, n)?, comm, false)
}

#[allow(clippy::too_many_arguments)]
fn alltoall_v<C: Wide, D: Wide>(
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
    let n = size_of(comm)?;
    let send = if in_place(sbuf) {
        None
    } else {
        Some(v_side(sbuf, scs, sds, st, n)?)
    };
    alltoall(send, v_side(rbuf, rcs, rds, rt, n)?, comm, true)
}

#[allow(clippy::too_many_arguments)]
fn alltoall_w<C: Wide, D: Wide>(
    sbuf: *const c_void,
    scs: *const C,
    sds: *const D,
    sts: *const MPI_Datatype,
    rbuf: *mut c_void,
    rcs: *const C,
    rds: *const D,
    rts: *const MPI_Datatype,
    comm: MPI_Comm,
) -> Res<Coll> {
    let n = size_of(comm)?;
    let send = if in_place(sbuf) {
        None
    } else {
        Some(w_side(sbuf, scs, sds, sts, n)?)
    };
    alltoall(send, w_side(rbuf, rcs, rds, rts, n)?, comm, true)
}

fn gather_even(
    s: (*const c_void, i64, MPI_Datatype),
    r: (*mut c_void, i64, MPI_Datatype),
    root: c_int,
    comm: MPI_Comm,
) -> Res<Coll> {
    gather(
        s,
        (r.0, r.2),
        |n| Ok(even(ptr::count(r.1)?, n)),
        root,
        comm,
        false,
    )
}

fn gather_v<C: Wide, D: Wide>(
    s: (*const c_void, i64, MPI_Datatype),
    r: (*mut c_void, *const C, *const D, MPI_Datatype),
    root: c_int,
    comm: MPI_Comm,
) -> Res<Coll> {
    gather(
        s,
        (r.0, r.3),
        |n| Ok((counts(r.1, n, "recvcounts")?, displs(r.2, n, "displs")?)),
        root,
        comm,
        true,
    )
}

fn scatter_even(
    s: (*const c_void, i64, MPI_Datatype),
    r: (*mut c_void, i64, MPI_Datatype),
    root: c_int,
    comm: MPI_Comm,
) -> Res<Coll> {
    scatter(
        (s.0, s.2),
        |n| Ok(even(ptr::count(s.1)?, n)),
        r,
        root,
        comm,
        false,
    )
}

fn scatter_v<C: Wide, D: Wide>(
    s: (*const c_void, *const C, *const D, MPI_Datatype),
    r: (*mut c_void, i64, MPI_Datatype),
    root: c_int,
    comm: MPI_Comm,
) -> Res<Coll> {
    scatter(
        (s.0, s.3),
        |n| Ok((counts(s.1, n, "sendcounts")?, displs(s.2, n, "displs")?)),
        r,
        root,
        comm,
        true,
    )
}

fn allgather_even(
    s: (*const c_void, i64, MPI_Datatype),
    r: (*mut c_void, i64, MPI_Datatype),
    comm: MPI_Comm,
) -> Res<Coll> {
    let (cs, ds) = even(ptr::count(r.1)?, size_of(comm)?);
    allgather(s, (r.0, r.2), cs, ds, comm)
}

fn allgather_v<C: Wide, D: Wide>(
    s: (*const c_void, i64, MPI_Datatype),
    r: (*mut c_void, *const C, *const D, MPI_Datatype),
    comm: MPI_Comm,
) -> Res<Coll> {
    let n = size_of(comm)?;
    let (cs, ds) = (counts(r.1, n, "recvcounts")?, displs(r.2, n, "displs")?);
    allgather(s, (r.0, r.3), cs, ds, comm)
}

// ------------------------------------------------------------------ exported

/// `MPI_Barrier`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Barrier(comm: MPI_Comm) -> c_int {
    guard("MPI_Barrier", Some(comm), || block(barrier(comm)))
}

/// `MPI_Ibarrier`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ibarrier(comm: MPI_Comm, request: *mut MPI_Request) -> c_int {
    guard("MPI_Ibarrier", Some(comm), || {
        nonblocking(request, comm, || barrier(comm))
    })
}

/// `MPI_Bcast`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Bcast(
    buffer: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Bcast", Some(comm), || {
        block(bcast(buffer, count.into(), datatype, root, comm))
    })
}

/// `MPI_Bcast_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Bcast_c(
    buffer: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Bcast_c", Some(comm), || {
        block(bcast(buffer, count, datatype, root, comm))
    })
}

/// `MPI_Ibcast`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ibcast(
    buffer: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ibcast", Some(comm), || {
        nonblocking(request, comm, || {
            bcast(buffer, count.into(), datatype, root, comm)
        })
    })
}

/// `MPI_Ibcast_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ibcast_c(
    buffer: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ibcast_c", Some(comm), || {
        nonblocking(request, comm, || bcast(buffer, count, datatype, root, comm))
    })
}

/// `MPI_Gather`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Gather", Some(comm), || {
        block(gather_even(
            (sendbuf, sendcount.into(), sendtype),
            (recvbuf, recvcount.into(), recvtype),
            root,
            comm,
        ))
    })
}

/// `MPI_Gather_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Gather_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Gather_c", Some(comm), || {
        block(gather_even(
            (sendbuf, sendcount, sendtype),
            (recvbuf, recvcount, recvtype),
            root,
            comm,
        ))
    })
}

/// `MPI_Igather`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Igather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Igather", Some(comm), || {
        nonblocking(request, comm, || {
            gather_even(
                (sendbuf, sendcount.into(), sendtype),
                (recvbuf, recvcount.into(), recvtype),
                root,
                comm,
            )
        })
    })
}

/// `MPI_Gatherv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Gatherv", Some(comm), || {
        block(gather_v(
            (sendbuf, sendcount.into(), sendtype),
            (recvbuf, recvcounts, displs, recvtype),
            root,
            comm,
        ))
    })
}

/// `MPI_Gatherv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Gatherv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    displs: *const MPI_Aint,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Gatherv_c", Some(comm), || {
        block(gather_v(
            (sendbuf, sendcount, sendtype),
            (recvbuf, recvcounts, displs, recvtype),
            root,
            comm,
        ))
    })
}

/// `MPI_Igatherv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Igatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Igatherv", Some(comm), || {
        nonblocking(request, comm, || {
            gather_v(
                (sendbuf, sendcount.into(), sendtype),
                (recvbuf, recvcounts, displs, recvtype),
                root,
                comm,
            )
        })
    })
}

/// `MPI_Scatter`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Scatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Scatter", Some(comm), || {
        block(scatter_even(
            (sendbuf, sendcount.into(), sendtype),
            (recvbuf, recvcount.into(), recvtype),
            root,
            comm,
        ))
    })
}

/// `MPI_Scatter_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Scatter_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Scatter_c", Some(comm), || {
        block(scatter_even(
            (sendbuf, sendcount, sendtype),
            (recvbuf, recvcount, recvtype),
            root,
            comm,
        ))
    })
}

/// `MPI_Iscatter`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iscatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Iscatter", Some(comm), || {
        nonblocking(request, comm, || {
            scatter_even(
                (sendbuf, sendcount.into(), sendtype),
                (recvbuf, recvcount.into(), recvtype),
                root,
                comm,
            )
        })
    })
}

/// `MPI_Scatterv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Scatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Scatterv", Some(comm), || {
        block(scatter_v(
            (sendbuf, sendcounts, displs, sendtype),
            (recvbuf, recvcount.into(), recvtype),
            root,
            comm,
        ))
    })
}

/// `MPI_Scatterv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Scatterv_c(
    sendbuf: *const c_void,
    sendcounts: *const MPI_Count,
    displs: *const MPI_Aint,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Scatterv_c", Some(comm), || {
        block(scatter_v(
            (sendbuf, sendcounts, displs, sendtype),
            (recvbuf, recvcount, recvtype),
            root,
            comm,
        ))
    })
}

/// `MPI_Iscatterv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iscatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Iscatterv", Some(comm), || {
        nonblocking(request, comm, || {
            scatter_v(
                (sendbuf, sendcounts, displs, sendtype),
                (recvbuf, recvcount.into(), recvtype),
                root,
                comm,
            )
        })
    })
}

/// `MPI_Allgather`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Allgather", Some(comm), || {
        block(allgather_even(
            (sendbuf, sendcount.into(), sendtype),
            (recvbuf, recvcount.into(), recvtype),
            comm,
        ))
    })
}

/// `MPI_Allgather_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allgather_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Allgather_c", Some(comm), || {
        block(allgather_even(
            (sendbuf, sendcount, sendtype),
            (recvbuf, recvcount, recvtype),
            comm,
        ))
    })
}

/// `MPI_Iallgather`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iallgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Iallgather", Some(comm), || {
        nonblocking(request, comm, || {
            allgather_even(
                (sendbuf, sendcount.into(), sendtype),
                (recvbuf, recvcount.into(), recvtype),
                comm,
            )
        })
    })
}

/// `MPI_Allgatherv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Allgatherv", Some(comm), || {
        block(allgather_v(
            (sendbuf, sendcount.into(), sendtype),
            (recvbuf, recvcounts, displs, recvtype),
            comm,
        ))
    })
}

/// `MPI_Allgatherv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allgatherv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    displs: *const MPI_Aint,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Allgatherv_c", Some(comm), || {
        block(allgather_v(
            (sendbuf, sendcount, sendtype),
            (recvbuf, recvcounts, displs, recvtype),
            comm,
        ))
    })
}

/// `MPI_Iallgatherv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iallgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Iallgatherv", Some(comm), || {
        nonblocking(request, comm, || {
            allgather_v(
                (sendbuf, sendcount.into(), sendtype),
                (recvbuf, recvcounts, displs, recvtype),
                comm,
            )
        })
    })
}

/// `MPI_Alltoall`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Alltoall", Some(comm), || {
        block(alltoall_even(
            (sendbuf, sendcount.into(), sendtype),
            (recvbuf, recvcount.into(), recvtype),
            comm,
        ))
    })
}

/// `MPI_Alltoall_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoall_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Alltoall_c", Some(comm), || {
        block(alltoall_even(
            (sendbuf, sendcount, sendtype),
            (recvbuf, recvcount, recvtype),
            comm,
        ))
    })
}

/// `MPI_Ialltoall`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ialltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ialltoall", Some(comm), || {
        nonblocking(request, comm, || {
            alltoall_even(
                (sendbuf, sendcount.into(), sendtype),
                (recvbuf, recvcount.into(), recvtype),
                comm,
            )
        })
    })
}

/// `MPI_Alltoallv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoallv(
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
    guard("MPI_Alltoallv", Some(comm), || {
        block(alltoall_v(
            sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
        ))
    })
}

/// `MPI_Alltoallv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoallv_c(
    sendbuf: *const c_void,
    sendcounts: *const MPI_Count,
    sdispls: *const MPI_Aint,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    rdispls: *const MPI_Aint,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Alltoallv_c", Some(comm), || {
        block(alltoall_v(
            sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
        ))
    })
}

/// `MPI_Ialltoallv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ialltoallv(
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
    guard("MPI_Ialltoallv", Some(comm), || {
        nonblocking(request, comm, || {
            alltoall_v(
                sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                comm,
            )
        })
    })
}

/// `MPI_Alltoallw`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Alltoallw", Some(comm), || {
        block(alltoall_w(
            sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
        ))
    })
}

/// `MPI_Alltoallw_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoallw_c(
    sendbuf: *const c_void,
    sendcounts: *const MPI_Count,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Alltoallw_c", Some(comm), || {
        block(alltoall_w(
            sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
        ))
    })
}

/// `MPI_Ialltoallw`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ialltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ialltoallw", Some(comm), || {
        nonblocking(request, comm, || {
            alltoall_w(
                sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                comm,
            )
        })
    })
}
