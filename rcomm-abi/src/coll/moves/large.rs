//! The large-count (`MPI_Count` / `MPI_Aint`) forms of the non-blocking moves: the same
//! paths as the `int` forms, generic over the count type.

use super::*;

/// `MPI_Igather_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Igather_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Igather_c", Some(comm), || {
        nonblocking(request, comm, || {
            gather_even(
                (sendbuf, sendcount, sendtype),
                (recvbuf, recvcount, recvtype),
                root,
                comm,
            )
        })
    })
}

/// `MPI_Igatherv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Igatherv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    displs: *const MPI_Aint,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Igatherv_c", Some(comm), || {
        nonblocking(request, comm, || {
            gather_v(
                (sendbuf, sendcount, sendtype),
                (recvbuf, recvcounts, displs, recvtype),
                root,
                comm,
            )
        })
    })
}

/// `MPI_Iscatter_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iscatter_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Iscatter_c", Some(comm), || {
        nonblocking(request, comm, || {
            scatter_even(
                (sendbuf, sendcount, sendtype),
                (recvbuf, recvcount, recvtype),
                root,
                comm,
            )
        })
    })
}

/// `MPI_Iscatterv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iscatterv_c(
    sendbuf: *const c_void,
    sendcounts: *const MPI_Count,
    displs: *const MPI_Aint,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Iscatterv_c", Some(comm), || {
        nonblocking(request, comm, || {
            scatter_v(
                (sendbuf, sendcounts, displs, sendtype),
                (recvbuf, recvcount, recvtype),
                root,
                comm,
            )
        })
    })
}

/// `MPI_Iallgather_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iallgather_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Iallgather_c", Some(comm), || {
        nonblocking(request, comm, || {
            allgather_even(
                (sendbuf, sendcount, sendtype),
                (recvbuf, recvcount, recvtype),
                comm,
            )
        })
    })
}

/// `MPI_Iallgatherv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iallgatherv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    displs: *const MPI_Aint,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Iallgatherv_c", Some(comm), || {
        nonblocking(request, comm, || {
            allgather_v(
                (sendbuf, sendcount, sendtype),
                (recvbuf, recvcounts, displs, recvtype),
                comm,
            )
        })
    })
}

/// `MPI_Ialltoall_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ialltoall_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ialltoall_c", Some(comm), || {
        nonblocking(request, comm, || {
            alltoall_even(
                (sendbuf, sendcount, sendtype),
                (recvbuf, recvcount, recvtype),
                comm,
            )
        })
    })
}

/// `MPI_Ialltoallv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ialltoallv_c(
    sendbuf: *const c_void,
    sendcounts: *const MPI_Count,
    sdispls: *const MPI_Aint,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    rdispls: *const MPI_Aint,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ialltoallv_c", Some(comm), || {
        nonblocking(request, comm, || {
            alltoall_v(
                sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                comm,
            )
        })
    })
}

/// `MPI_Ialltoallw_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ialltoallw_c(
    sendbuf: *const c_void,
    sendcounts: *const MPI_Count,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ialltoallw_c", Some(comm), || {
        nonblocking(request, comm, || {
            alltoall_w(
                sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                comm,
            )
        })
    })
}
