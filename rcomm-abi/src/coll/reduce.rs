//! The reductions: reduce, allreduce, reduce-scatter (block and v), scan and exscan. rcomm
//! moves the contributions; [`Red::fold`] combines them in rank order (see the module above).

use super::{Buf, Coll, block, counts, in_place, intra, nonblocking, root_of};
use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::opobj::{self, OpRef};
use crate::ops;
use crate::typeobj::{self, TypeObj};
use std::ffi::c_void;
use std::sync::Arc;

/// A reduction's op on `count` elements of a datatype.
struct Red {
    op: OpRef,
    dt: MPI_Datatype,
    ty: Arc<TypeObj>,
    count: usize,
}

impl Red {
    fn new(op: MPI_Op, dt: MPI_Datatype, count: usize) -> Res<Red> {
        let ty = typeobj::get_committed(dt)?;
        let op = opobj::get(op)?;
        ops::check(&op, dt)?;
        Ok(Red { op, dt, ty, count })
    }

    /// Bytes of one contribution.
    fn bytes(&self) -> usize {
        self.ty.dt.packed_size(self.count)
    }

    /// `b[0] ⊕ b[1] ⊕ … ⊕ b[k-1]`, folded from the right so a non-commutative op sees its
    /// operands in rank order (`f(in, inout)` makes `inout = in ⊕ inout`).
    fn fold(&self, blocks: &[&[u8]]) -> Res<Vec<u8>> {
        let Some((last, rest)) = blocks.split_last() else {
            return Ok(Vec::new());
        };
        let mut acc = last.to_vec();
        for b in rest.iter().rev() {
            ops::combine(&self.op, self.dt, &self.ty, self.count, b, &mut acc)?;
        }
        Ok(acc)
    }

    /// The `n` contributions of `nb` bytes each in `d`.
    fn split<'a>(&self, d: &'a [u8], n: usize) -> Vec<&'a [u8]> {
        let nb = self.bytes();
        (0..n).map(|i| &d[i * nb..(i + 1) * nb]).collect()
    }
}

/// This rank's contribution: `sendbuf`, or with `MPI_IN_PLACE` what `recvbuf` holds.
fn contribution(sendbuf: *const c_void, recv: &Buf, send_count: usize) -> Res<Vec<u8>> {
    if in_place(sendbuf) {
        recv.pack("recvbuf")
    } else {
        let mut s = recv.clone();
        s.addr = sendbuf as usize;
        s.count = send_count;
        s.pack("sendbuf")
    }
}

#[allow(clippy::too_many_arguments)]
fn reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
) -> Res<Coll> {
    let c = intra(comm)?;
    let root = root_of(&c, root)?;
    let (n, is_root) = (c.comm.size() as usize, c.comm.rank() == root);
    let red = Red::new(op, dt, crate::ptr::count(count)?)?;
    if in_place(sendbuf) && !is_root {
        return Err(err(MPI_ERR_BUFFER, "only the root may pass MPI_IN_PLACE"));
    }
    // Only the root's receive buffer is significant.
    let recv = Buf::new(recvbuf, if is_root { count } else { 0 }, dt)?;
    let mut send = recv.clone();
    send.count = red.count;
    let contrib = contribution(sendbuf, &send, red.count)?;
    let req = c.comm.igather(contrib, root)?;
    Ok(Coll::new(req, move |d| {
        if !is_root || red.bytes() == 0 {
            return Ok(());
        }
        let acc = red.fold(&red.split(&d, n))?;
        recv.unpack(&acc, "recvbuf")
    }))
}

/// Allreduce (`upto` None), scan (`upto` this rank, inclusive) and exscan (exclusive).
#[allow(clippy::too_many_arguments)]
fn allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    prefix: Option<bool>,
) -> Res<Coll> {
    let c = intra(comm)?;
    let (n, me) = (c.comm.size() as usize, c.comm.rank() as usize);
    let red = Red::new(op, dt, crate::ptr::count(count)?)?;
    let recv = Buf::new(recvbuf, count, dt)?;
    let contrib = contribution(sendbuf, &recv, red.count)?;
    let upto = match prefix {
        None => n,
        Some(true) => me + 1,
        Some(false) => me,
    };
    let req = c.comm.iallgather(contrib)?;
    Ok(Coll::new(req, move |d| {
        // Exscan leaves rank 0's buffer as it was (the standard leaves it undefined).
        if upto == 0 || red.bytes() == 0 {
            return Ok(());
        }
        let acc = red.fold(&red.split(&d, n)[..upto])?;
        recv.unpack(&acc, "recvbuf")
    }))
}

/// Reduce-scatter: block `i` (`rcounts[i]` elements) of the combined vector lands on rank `i`.
fn reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    rcounts: Vec<usize>,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    equal: bool,
) -> Res<Coll> {
    let c = intra(comm)?;
    let (n, me) = (c.comm.size() as usize, c.comm.rank() as usize);
    if rcounts.len() != n {
        return Err(err(MPI_ERR_COUNT, "one receive count per rank"));
    }
    let red = Red::new(op, dt, rcounts[me])?;
    let total: usize = rcounts.iter().sum();
    let inplace = in_place(sendbuf);
    let mut recv = Buf::new(
        recvbuf,
        if inplace { total } else { rcounts[me] } as i64,
        dt,
    )?;
    recv.count = total;
    let contrib = contribution(sendbuf, &recv, total)?;
    recv.count = rcounts[me];
    let size = red.ty.size();
    let sbytes: Vec<usize> = rcounts.iter().map(|&k| k * size).collect();
    let rbytes = vec![red.bytes(); n];
    let req = if equal {
        c.comm.ialltoall(contrib)?
    } else {
        c.comm
            .with_algo("alltoall", "pairwise")?
            .ialltoallv(contrib, &sbytes, &rbytes)?
    };
    Ok(Coll::new(req, move |d| {
        if red.bytes() == 0 {
            return Ok(());
        }
        let acc = red.fold(&red.split(&d, n))?;
        recv.unpack(&acc, "recvbuf")
    }))
}

fn rs_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> Res<Coll> {
    let n = intra(comm)?.comm.size() as usize;
    let k = crate::ptr::count(recvcount)?;
    reduce_scatter(sendbuf, recvbuf, vec![k; n], dt, op, comm, true)
}

fn rs_v<C: super::Wide>(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> Res<Coll> {
    let n = intra(comm)?.comm.size() as usize;
    let cs = counts(recvcounts, n, "recvcounts")?;
    reduce_scatter(sendbuf, recvbuf, cs, dt, op, comm, false)
}

// ------------------------------------------------------------------ exported

/// `MPI_Reduce`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Reduce", Some(comm), || {
        block(reduce(
            sendbuf,
            recvbuf,
            count.into(),
            datatype,
            op,
            root,
            comm,
        ))
    })
}

/// `MPI_Reduce_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Reduce_c", Some(comm), || {
        block(reduce(sendbuf, recvbuf, count, datatype, op, root, comm))
    })
}

/// `MPI_Ireduce`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ireduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ireduce", Some(comm), || {
        nonblocking(request, comm, || {
            reduce(sendbuf, recvbuf, count.into(), datatype, op, root, comm)
        })
    })
}

/// `MPI_Allreduce`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Allreduce", Some(comm), || {
        block(allreduce(
            sendbuf,
            recvbuf,
            count.into(),
            datatype,
            op,
            comm,
            None,
        ))
    })
}

/// `MPI_Allreduce_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allreduce_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Allreduce_c", Some(comm), || {
        block(allreduce(sendbuf, recvbuf, count, datatype, op, comm, None))
    })
}

/// `MPI_Iallreduce`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iallreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Iallreduce", Some(comm), || {
        nonblocking(request, comm, || {
            allreduce(sendbuf, recvbuf, count.into(), datatype, op, comm, None)
        })
    })
}

/// `MPI_Scan`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Scan", Some(comm), || {
        block(allreduce(
            sendbuf,
            recvbuf,
            count.into(),
            datatype,
            op,
            comm,
            Some(true),
        ))
    })
}

/// `MPI_Iscan`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Iscan", Some(comm), || {
        nonblocking(request, comm, || {
            allreduce(
                sendbuf,
                recvbuf,
                count.into(),
                datatype,
                op,
                comm,
                Some(true),
            )
        })
    })
}

/// `MPI_Exscan`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Exscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Exscan", Some(comm), || {
        block(allreduce(
            sendbuf,
            recvbuf,
            count.into(),
            datatype,
            op,
            comm,
            Some(false),
        ))
    })
}

/// `MPI_Iexscan`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iexscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Iexscan", Some(comm), || {
        nonblocking(request, comm, || {
            allreduce(
                sendbuf,
                recvbuf,
                count.into(),
                datatype,
                op,
                comm,
                Some(false),
            )
        })
    })
}

/// `MPI_Reduce_scatter_block`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Reduce_scatter_block", Some(comm), || {
        block(rs_block(
            sendbuf,
            recvbuf,
            recvcount.into(),
            datatype,
            op,
            comm,
        ))
    })
}

/// `MPI_Ireduce_scatter_block`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ireduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ireduce_scatter_block", Some(comm), || {
        nonblocking(request, comm, || {
            rs_block(sendbuf, recvbuf, recvcount.into(), datatype, op, comm)
        })
    })
}

/// `MPI_Reduce_scatter`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Reduce_scatter", Some(comm), || {
        block(rs_v(sendbuf, recvbuf, recvcounts, datatype, op, comm))
    })
}

/// `MPI_Ireduce_scatter`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ireduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ireduce_scatter", Some(comm), || {
        nonblocking(request, comm, || {
            rs_v(sendbuf, recvbuf, recvcounts, datatype, op, comm)
        })
    })
}
