//! The persistent moves (`MPI_*_init`, MPI-4): each `MPI_Start` starts the
//! non-blocking collective on the arguments init was given.

use super::*;
use crate::coll::{Held, is_root, keep, persistent, persistent_kept, size_of_comm};

/// `MPI_Barrier_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Barrier_init(
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Barrier_init", Some(comm), || {
        persistent(request, comm, info, (comm,), |(comm,)| barrier(comm))
    })
}

/// `MPI_Bcast_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Bcast_init(
    buffer: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Bcast_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (buffer, count, datatype, root, comm),
            |(buffer, count, datatype, root, comm)| {
                bcast(buffer, count.into(), datatype, root, comm)
            },
        )
    })
}

/// `MPI_Bcast_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Bcast_init_c(
    buffer: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Bcast_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (buffer, count, datatype, root, comm),
            |(buffer, count, datatype, root, comm)| bcast(buffer, count, datatype, root, comm),
        )
    })
}

/// `MPI_Gather_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Gather_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Gather_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)| {
                gather_even(
                    (sendbuf, sendcount.into(), sendtype),
                    (recvbuf, recvcount.into(), recvtype),
                    root,
                    comm,
                )
            },
        )
    })
}

/// `MPI_Gather_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Gather_init_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Gather_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)| {
                gather_even(
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcount, recvtype),
                    root,
                    comm,
                )
            },
        )
    })
}

/// `MPI_Gatherv_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Gatherv_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Gatherv_init", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let at_root = is_root(comm, root)?;
        let recvcounts = if at_root {
            keep(recvcounts, n, "recvcounts", &mut hold)?
        } else {
            recvcounts
        };
        let displs = if at_root {
            keep(displs, n, "displs", &mut hold)?
        } else {
            displs
        };
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm)| {
                gather_v(
                    (sendbuf, sendcount.into(), sendtype),
                    (recvbuf, recvcounts, displs, recvtype),
                    root,
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Gatherv_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Gatherv_init_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    displs: *const MPI_Aint,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Gatherv_init_c", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let at_root = is_root(comm, root)?;
        let recvcounts = if at_root {
            keep(recvcounts, n, "recvcounts", &mut hold)?
        } else {
            recvcounts
        };
        let displs = if at_root {
            keep(displs, n, "displs", &mut hold)?
        } else {
            displs
        };
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm)| {
                gather_v(
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcounts, displs, recvtype),
                    root,
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Scatter_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Scatter_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Scatter_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)| {
                scatter_even(
                    (sendbuf, sendcount.into(), sendtype),
                    (recvbuf, recvcount.into(), recvtype),
                    root,
                    comm,
                )
            },
        )
    })
}

/// `MPI_Scatter_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Scatter_init_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Scatter_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)| {
                scatter_even(
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcount, recvtype),
                    root,
                    comm,
                )
            },
        )
    })
}

/// `MPI_Scatterv_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Scatterv_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Scatterv_init", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let at_root = is_root(comm, root)?;
        let sendcounts = if at_root {
            keep(sendcounts, n, "sendcounts", &mut hold)?
        } else {
            sendcounts
        };
        let displs = if at_root {
            keep(displs, n, "displs", &mut hold)?
        } else {
            displs
        };
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm,
            ),
            |(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm)| {
                scatter_v(
                    (sendbuf, sendcounts, displs, sendtype),
                    (recvbuf, recvcount.into(), recvtype),
                    root,
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Scatterv_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Scatterv_init_c(
    sendbuf: *const c_void,
    sendcounts: *const MPI_Count,
    displs: *const MPI_Aint,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Scatterv_init_c", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let at_root = is_root(comm, root)?;
        let sendcounts = if at_root {
            keep(sendcounts, n, "sendcounts", &mut hold)?
        } else {
            sendcounts
        };
        let displs = if at_root {
            keep(displs, n, "displs", &mut hold)?
        } else {
            displs
        };
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm,
            ),
            |(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm)| {
                scatter_v(
                    (sendbuf, sendcounts, displs, sendtype),
                    (recvbuf, recvcount, recvtype),
                    root,
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Allgather_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allgather_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Allgather_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)| {
                allgather_even(
                    (sendbuf, sendcount.into(), sendtype),
                    (recvbuf, recvcount.into(), recvtype),
                    comm,
                )
            },
        )
    })
}

/// `MPI_Allgather_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allgather_init_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Allgather_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)| {
                allgather_even(
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcount, recvtype),
                    comm,
                )
            },
        )
    })
}

/// `MPI_Allgatherv_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allgatherv_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Allgatherv_init", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let recvcounts = keep(recvcounts, n, "recvcounts", &mut hold)?;
        let displs = keep(displs, n, "displs", &mut hold)?;
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)| {
                allgather_v(
                    (sendbuf, sendcount.into(), sendtype),
                    (recvbuf, recvcounts, displs, recvtype),
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Allgatherv_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Allgatherv_init_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    displs: *const MPI_Aint,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Allgatherv_init_c", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let recvcounts = keep(recvcounts, n, "recvcounts", &mut hold)?;
        let displs = keep(displs, n, "displs", &mut hold)?;
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)| {
                allgather_v(
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcounts, displs, recvtype),
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Alltoall_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoall_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Alltoall_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)| {
                alltoall_even(
                    (sendbuf, sendcount.into(), sendtype),
                    (recvbuf, recvcount.into(), recvtype),
                    comm,
                )
            },
        )
    })
}

/// `MPI_Alltoall_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoall_init_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Alltoall_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)| {
                alltoall_even(
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcount, recvtype),
                    comm,
                )
            },
        )
    })
}

/// `MPI_Alltoallv_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoallv_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Alltoallv_init", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let sendcounts = keep(sendcounts, n, "sendcounts", &mut hold)?;
        let sdispls = keep(sdispls, n, "sdispls", &mut hold)?;
        let recvcounts = keep(recvcounts, n, "recvcounts", &mut hold)?;
        let rdispls = keep(rdispls, n, "rdispls", &mut hold)?;
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                comm,
            ),
            |(
                sendbuf,
                sendcounts,
                sdispls,
                sendtype,
                recvbuf,
                recvcounts,
                rdispls,
                recvtype,
                comm,
            )| {
                alltoall_v(
                    sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Alltoallv_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoallv_init_c(
    sendbuf: *const c_void,
    sendcounts: *const MPI_Count,
    sdispls: *const MPI_Aint,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    rdispls: *const MPI_Aint,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Alltoallv_init_c", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let sendcounts = keep(sendcounts, n, "sendcounts", &mut hold)?;
        let sdispls = keep(sdispls, n, "sdispls", &mut hold)?;
        let recvcounts = keep(recvcounts, n, "recvcounts", &mut hold)?;
        let rdispls = keep(rdispls, n, "rdispls", &mut hold)?;
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                comm,
            ),
            |(
                sendbuf,
                sendcounts,
                sdispls,
                sendtype,
                recvbuf,
                recvcounts,
                rdispls,
                recvtype,
                comm,
            )| {
                alltoall_v(
                    sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Alltoallw_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoallw_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Alltoallw_init", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let sendcounts = keep(sendcounts, n, "sendcounts", &mut hold)?;
        let sdispls = keep(sdispls, n, "sdispls", &mut hold)?;
        let sendtypes = keep(sendtypes, n, "sendtypes", &mut hold)?;
        let recvcounts = keep(recvcounts, n, "recvcounts", &mut hold)?;
        let rdispls = keep(rdispls, n, "rdispls", &mut hold)?;
        let recvtypes = keep(recvtypes, n, "recvtypes", &mut hold)?;
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                comm,
            ),
            |(
                sendbuf,
                sendcounts,
                sdispls,
                sendtypes,
                recvbuf,
                recvcounts,
                rdispls,
                recvtypes,
                comm,
            )| {
                alltoall_w(
                    sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls,
                    recvtypes, comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Alltoallw_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alltoallw_init_c(
    sendbuf: *const c_void,
    sendcounts: *const MPI_Count,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Alltoallw_init_c", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n = size_of_comm(comm)?;
        let sendcounts = keep(sendcounts, n, "sendcounts", &mut hold)?;
        let sdispls = keep(sdispls, n, "sdispls", &mut hold)?;
        let sendtypes = keep(sendtypes, n, "sendtypes", &mut hold)?;
        let recvcounts = keep(recvcounts, n, "recvcounts", &mut hold)?;
        let rdispls = keep(rdispls, n, "rdispls", &mut hold)?;
        let recvtypes = keep(recvtypes, n, "recvtypes", &mut hold)?;
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                comm,
            ),
            |(
                sendbuf,
                sendcounts,
                sdispls,
                sendtypes,
                recvbuf,
                recvcounts,
                rdispls,
                recvtypes,
                comm,
            )| {
                alltoall_w(
                    sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls,
                    recvtypes, comm,
                )
            },
            hold,
        )
    })
}
