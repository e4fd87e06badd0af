//! The persistent reductions (`MPI_*_init`, MPI-4): each `MPI_Start` starts the
//! non-blocking collective on the arguments init was given.

use super::*;
use crate::coll::{Held, keep, persistent, persistent_kept, size_of_comm};

/// `MPI_Reduce_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Reduce_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (sendbuf, recvbuf, count, datatype, op, root, comm),
            |(sendbuf, recvbuf, count, datatype, op, root, comm)| {
                reduce(sendbuf, recvbuf, count.into(), datatype, op, root, comm)
            },
        )
    })
}

/// `MPI_Reduce_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce_init_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Reduce_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (sendbuf, recvbuf, count, datatype, op, root, comm),
            |(sendbuf, recvbuf, count, datatype, op, root, comm)| {
                reduce(sendbuf, recvbuf, count, datatype, op, root, comm)
            },
        )
    })
}

/// `MPI_Allreduce_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allreduce_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Allreduce_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (sendbuf, recvbuf, count, datatype, op, comm),
            |(sendbuf, recvbuf, count, datatype, op, comm)| {
                allreduce(sendbuf, recvbuf, count.into(), datatype, op, comm, None)
            },
        )
    })
}

/// `MPI_Allreduce_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allreduce_init_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Allreduce_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (sendbuf, recvbuf, count, datatype, op, comm),
            |(sendbuf, recvbuf, count, datatype, op, comm)| {
                allreduce(sendbuf, recvbuf, count, datatype, op, comm, None)
            },
        )
    })
}

/// `MPI_Scan_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Scan_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Scan_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (sendbuf, recvbuf, count, datatype, op, comm),
            |(sendbuf, recvbuf, count, datatype, op, comm)| {
                allreduce(
                    sendbuf,
                    recvbuf,
                    count.into(),
                    datatype,
                    op,
                    comm,
                    Some(true),
                )
            },
        )
    })
}

/// `MPI_Scan_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Scan_init_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Scan_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (sendbuf, recvbuf, count, datatype, op, comm),
            |(sendbuf, recvbuf, count, datatype, op, comm)| {
                allreduce(sendbuf, recvbuf, count, datatype, op, comm, Some(true))
            },
        )
    })
}

/// `MPI_Exscan_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Exscan_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Exscan_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (sendbuf, recvbuf, count, datatype, op, comm),
            |(sendbuf, recvbuf, count, datatype, op, comm)| {
                allreduce(
                    sendbuf,
                    recvbuf,
                    count.into(),
                    datatype,
                    op,
                    comm,
                    Some(false),
                )
            },
        )
    })
}

/// `MPI_Exscan_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Exscan_init_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Exscan_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (sendbuf, recvbuf, count, datatype, op, comm),
            |(sendbuf, recvbuf, count, datatype, op, comm)| {
                allreduce(sendbuf, recvbuf, count, datatype, op, comm, Some(false))
            },
        )
    })
}

/// `MPI_Reduce_scatter_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce_scatter_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Reduce_scatter_init", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let recvcounts = keep(recvcounts, n, "recvcounts", &mut hold)?;
        persistent_kept(
            request,
            comm,
            info,
            (sendbuf, recvbuf, recvcounts, datatype, op, comm),
            |(sendbuf, recvbuf, recvcounts, datatype, op, comm)| {
                rs_v(sendbuf, recvbuf, recvcounts, datatype, op, comm)
            },
            hold,
        )
    })
}

/// `MPI_Reduce_scatter_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce_scatter_init_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Reduce_scatter_init_c", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let recvcounts = keep(recvcounts, n, "recvcounts", &mut hold)?;
        persistent_kept(
            request,
            comm,
            info,
            (sendbuf, recvbuf, recvcounts, datatype, op, comm),
            |(sendbuf, recvbuf, recvcounts, datatype, op, comm)| {
                rs_v(sendbuf, recvbuf, recvcounts, datatype, op, comm)
            },
            hold,
        )
    })
}

/// `MPI_Reduce_scatter_block_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce_scatter_block_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Reduce_scatter_block_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (sendbuf, recvbuf, recvcount, datatype, op, comm),
            |(sendbuf, recvbuf, recvcount, datatype, op, comm)| {
                rs_block(sendbuf, recvbuf, recvcount.into(), datatype, op, comm)
            },
        )
    })
}

/// `MPI_Reduce_scatter_block_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce_scatter_block_init_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Reduce_scatter_block_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (sendbuf, recvbuf, recvcount, datatype, op, comm),
            |(sendbuf, recvbuf, recvcount, datatype, op, comm)| {
                rs_block(sendbuf, recvbuf, recvcount, datatype, op, comm)
            },
        )
    })
}
