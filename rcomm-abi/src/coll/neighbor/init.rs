//! The persistent neighbour collectives (`MPI_*_init`, MPI-4): each `MPI_Start` starts the
//! non-blocking collective on the arguments init was given.

use super::*;
use crate::coll::{Held, keep, persistent, persistent_kept};

/// `MPI_Neighbor_allgather_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_allgather_init(
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
    guard("MPI_Neighbor_allgather_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)| {
                allgather(
                    (sendbuf, sendcount.into(), sendtype),
                    (recvbuf, recvcount.into(), recvtype),
                    comm,
                )
            },
        )
    })
}

/// `MPI_Neighbor_allgather_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_allgather_init_c(
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
    guard("MPI_Neighbor_allgather_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)| {
                allgather(
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcount, recvtype),
                    comm,
                )
            },
        )
    })
}

/// `MPI_Neighbor_allgatherv_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_allgatherv_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs_: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Neighbor_allgatherv_init", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n_in = crate::topo::neighbours(comm)?.1.len();
        let recvcounts = keep(recvcounts, n_in, "recvcounts", &mut hold)?;
        let displs_ = keep(displs_, n_in, "displs", &mut hold)?;
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs_, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs_, recvtype, comm)| {
                allgatherv(
                    (sendbuf, sendcount.into(), sendtype),
                    (recvbuf, recvcounts, displs_, recvtype),
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Neighbor_allgatherv_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_allgatherv_init_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    displs_: *const MPI_Aint,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Neighbor_allgatherv_init_c", Some(comm), || {
        let mut hold: Held = Vec::new();
        let n_in = crate::topo::neighbours(comm)?.1.len();
        let recvcounts = keep(recvcounts, n_in, "recvcounts", &mut hold)?;
        let displs_ = keep(displs_, n_in, "displs", &mut hold)?;
        persistent_kept(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs_, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs_, recvtype, comm)| {
                allgatherv(
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcounts, displs_, recvtype),
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Neighbor_alltoall_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_alltoall_init(
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
    guard("MPI_Neighbor_alltoall_init", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)| {
                alltoall(
                    (sendbuf, sendcount.into(), sendtype),
                    (recvbuf, recvcount.into(), recvtype),
                    comm,
                )
            },
        )
    })
}

/// `MPI_Neighbor_alltoall_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_alltoall_init_c(
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
    guard("MPI_Neighbor_alltoall_init_c", Some(comm), || {
        persistent(
            request,
            comm,
            info,
            (
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
            ),
            |(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)| {
                alltoall(
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcount, recvtype),
                    comm,
                )
            },
        )
    })
}

/// `MPI_Neighbor_alltoallv_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_alltoallv_init(
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
    guard("MPI_Neighbor_alltoallv_init", Some(comm), || {
        let mut hold: Held = Vec::new();
        let (_, ins, outs) = crate::topo::neighbours(comm)?;
        let (n_in, n_out) = (ins.len(), outs.len());
        let sendcounts = keep(sendcounts, n_out, "sendcounts", &mut hold)?;
        let sdispls = keep(sdispls, n_out, "sdispls", &mut hold)?;
        let recvcounts = keep(recvcounts, n_in, "recvcounts", &mut hold)?;
        let rdispls = keep(rdispls, n_in, "rdispls", &mut hold)?;
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
                alltoallv(
                    sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Neighbor_alltoallv_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_alltoallv_init_c(
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
    guard("MPI_Neighbor_alltoallv_init_c", Some(comm), || {
        let mut hold: Held = Vec::new();
        let (_, ins, outs) = crate::topo::neighbours(comm)?;
        let (n_in, n_out) = (ins.len(), outs.len());
        let sendcounts = keep(sendcounts, n_out, "sendcounts", &mut hold)?;
        let sdispls = keep(sdispls, n_out, "sdispls", &mut hold)?;
        let recvcounts = keep(recvcounts, n_in, "recvcounts", &mut hold)?;
        let rdispls = keep(rdispls, n_in, "rdispls", &mut hold)?;
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
                alltoallv(
                    sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                    comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Neighbor_alltoallw_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_alltoallw_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Neighbor_alltoallw_init", Some(comm), || {
        let mut hold: Held = Vec::new();
        let (_, ins, outs) = crate::topo::neighbours(comm)?;
        let (n_in, n_out) = (ins.len(), outs.len());
        let sendcounts = keep(sendcounts, n_out, "sendcounts", &mut hold)?;
        let sdispls = keep(sdispls, n_out, "sdispls", &mut hold)?;
        let sendtypes = keep(sendtypes, n_out, "sendtypes", &mut hold)?;
        let recvcounts = keep(recvcounts, n_in, "recvcounts", &mut hold)?;
        let rdispls = keep(rdispls, n_in, "rdispls", &mut hold)?;
        let recvtypes = keep(recvtypes, n_in, "recvtypes", &mut hold)?;
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
                alltoallw(
                    sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls,
                    recvtypes, comm,
                )
            },
            hold,
        )
    })
}

/// `MPI_Neighbor_alltoallw_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Neighbor_alltoallw_init_c(
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
    guard("MPI_Neighbor_alltoallw_init_c", Some(comm), || {
        let mut hold: Held = Vec::new();
        let (_, ins, outs) = crate::topo::neighbours(comm)?;
        let (n_in, n_out) = (ins.len(), outs.len());
        let sendcounts = keep(sendcounts, n_out, "sendcounts", &mut hold)?;
        let sdispls = keep(sdispls, n_out, "sdispls", &mut hold)?;
        let sendtypes = keep(sendtypes, n_out, "sendtypes", &mut hold)?;
        let recvcounts = keep(recvcounts, n_in, "recvcounts", &mut hold)?;
        let rdispls = keep(rdispls, n_in, "rdispls", &mut hold)?;
        let recvtypes = keep(recvtypes, n_in, "recvtypes", &mut hold)?;
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
                alltoallw(
                    sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls,
                    recvtypes, comm,
                )
            },
            hold,
        )
    })
}
