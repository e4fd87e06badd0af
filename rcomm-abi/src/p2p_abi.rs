//! The exported point-to-point functions: each, in its `int` and `_c` (`MPI_Count`) form,
//! checks nothing itself and calls `p2p`, reporting through the communicator's handler.

use crate::call::guard;
use crate::consts::*;
use crate::p2p::{self, Mode};
use crate::ptr;
use std::ffi::c_void;

/// `MPI_Send`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Send(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    p2p::send_entry("MPI_Send", buf, count as i64, datatype, dest, tag, comm)
}
/// `MPI_Isend`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Isend(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Isend", Some(comm), || {
        p2p::isend(
            buf,
            count as i64,
            datatype,
            dest,
            tag,
            comm,
            Mode::Standard,
            request,
        )
    })
}
/// `MPI_Send_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Send_init(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Send_init", Some(comm), || {
        p2p::send_init(
            buf,
            count as i64,
            datatype,
            dest,
            tag,
            comm,
            Mode::Standard,
            request,
        )
    })
}
/// `MPI_Ssend`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ssend(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Ssend", Some(comm), || {
        p2p::send(buf, count as i64, datatype, dest, tag, comm, Mode::Sync)
    })
}
/// `MPI_Issend`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Issend(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Issend", Some(comm), || {
        p2p::isend(
            buf,
            count as i64,
            datatype,
            dest,
            tag,
            comm,
            Mode::Sync,
            request,
        )
    })
}
/// `MPI_Ssend_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ssend_init(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ssend_init", Some(comm), || {
        p2p::send_init(
            buf,
            count as i64,
            datatype,
            dest,
            tag,
            comm,
            Mode::Sync,
            request,
        )
    })
}
/// `MPI_Rsend`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Rsend(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Rsend", Some(comm), || {
        p2p::send(buf, count as i64, datatype, dest, tag, comm, Mode::Ready)
    })
}
/// `MPI_Irsend`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Irsend(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Irsend", Some(comm), || {
        p2p::isend(
            buf,
            count as i64,
            datatype,
            dest,
            tag,
            comm,
            Mode::Ready,
            request,
        )
    })
}
/// `MPI_Rsend_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Rsend_init(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Rsend_init", Some(comm), || {
        p2p::send_init(
            buf,
            count as i64,
            datatype,
            dest,
            tag,
            comm,
            Mode::Ready,
            request,
        )
    })
}
/// `MPI_Bsend`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Bsend(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Bsend", Some(comm), || {
        p2p::send(buf, count as i64, datatype, dest, tag, comm, Mode::Buffered)
    })
}
/// `MPI_Ibsend`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ibsend(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ibsend", Some(comm), || {
        p2p::isend(
            buf,
            count as i64,
            datatype,
            dest,
            tag,
            comm,
            Mode::Buffered,
            request,
        )
    })
}
/// `MPI_Bsend_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Bsend_init(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Bsend_init", Some(comm), || {
        p2p::send_init(
            buf,
            count as i64,
            datatype,
            dest,
            tag,
            comm,
            Mode::Buffered,
            request,
        )
    })
}
/// `MPI_Recv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    p2p::recv_entry(
        "MPI_Recv",
        buf,
        count as i64,
        datatype,
        source,
        tag,
        comm,
        status,
    )
}
/// `MPI_Irecv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Irecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Irecv", Some(comm), || {
        p2p::irecv(buf, count as i64, datatype, source, tag, comm, request)
    })
}
/// `MPI_Recv_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Recv_init(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Recv_init", Some(comm), || {
        p2p::recv_init(buf, count as i64, datatype, source, tag, comm, request)
    })
}
/// `MPI_Sendrecv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Sendrecv", Some(comm), || {
        p2p::sendrecv(
            sendbuf,
            sendcount as i64,
            sendtype,
            dest,
            sendtag,
            recvbuf,
            recvcount as i64,
            recvtype,
            source,
            recvtag,
            comm,
            status,
            None,
        )
    })
}
/// `MPI_Isendrecv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Isendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Isendrecv", Some(comm), || {
        p2p::sendrecv(
            sendbuf,
            sendcount as i64,
            sendtype,
            dest,
            sendtag,
            recvbuf,
            recvcount as i64,
            recvtype,
            source,
            recvtag,
            comm,
            std::ptr::null_mut(),
            Some(request),
        )
    })
}
/// `MPI_Sendrecv_replace`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Sendrecv_replace", Some(comm), || {
        p2p::sendrecv_replace(
            buf,
            count as i64,
            datatype,
            dest,
            sendtag,
            source,
            recvtag,
            comm,
            status,
            None,
        )
    })
}
/// `MPI_Isendrecv_replace`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Isendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Isendrecv_replace", Some(comm), || {
        p2p::sendrecv_replace(
            buf,
            count as i64,
            datatype,
            dest,
            sendtag,
            source,
            recvtag,
            comm,
            std::ptr::null_mut(),
            Some(request),
        )
    })
}
/// `MPI_Mrecv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Mrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Mrecv", None, || {
        let st = p2p::mrecv(buf, count as i64, datatype, message)?;
        ptr::write_opt(status, st);
        Ok(())
    })
}
/// `MPI_Imrecv`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Imrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Imrecv", None, || {
        // The message is matched already: its data is taken now, the request is complete.
        let st = p2p::mrecv(buf, count as i64, datatype, message)?;
        let r = crate::request::insert(Box::new(crate::request::Ready(st)), MPI_COMM_WORLD)?;
        ptr::write(request, r, "request")
    })
}
/// `MPI_Get_count`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Get_count(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut c_int,
) -> c_int {
    guard("MPI_Get_count", None, || {
        let n = p2p::get_count(status, datatype)?;
        ptr::write(count, c_int::try_from(n).unwrap_or(MPI_UNDEFINED), "count")
    })
}
/// `MPI_Get_elements`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Get_elements(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut c_int,
) -> c_int {
    guard("MPI_Get_elements", None, || {
        let n = p2p::get_elements(status, datatype)?;
        ptr::write(count, c_int::try_from(n).unwrap_or(MPI_UNDEFINED), "count")
    })
}
/// `MPI_Status_set_elements`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Status_set_elements(
    status: *mut MPI_Status,
    datatype: MPI_Datatype,
    count: c_int,
) -> c_int {
    guard("MPI_Status_set_elements", None, || {
        p2p::set_elements(status, datatype, count as i64)
    })
}
/// `MPI_Buffer_attach`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    guard("MPI_Buffer_attach", None, || {
        p2p::buffer_attach(buffer, size as i64)
    })
}
/// `MPI_Buffer_detach`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    guard("MPI_Buffer_detach", None, || {
        let n = p2p::buffer_detach(buffer_addr)?;
        ptr::write(size, n as c_int, "size")
    })
}
/// `MPI_Send_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Send_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    p2p::send_entry("MPI_Send_c", buf, count, datatype, dest, tag, comm)
}
/// `MPI_Isend_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Isend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Isend_c", Some(comm), || {
        p2p::isend(
            buf,
            count,
            datatype,
            dest,
            tag,
            comm,
            Mode::Standard,
            request,
        )
    })
}
/// `MPI_Send_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Send_init_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Send_init_c", Some(comm), || {
        p2p::send_init(
            buf,
            count,
            datatype,
            dest,
            tag,
            comm,
            Mode::Standard,
            request,
        )
    })
}
/// `MPI_Ssend_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ssend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Ssend_c", Some(comm), || {
        p2p::send(buf, count, datatype, dest, tag, comm, Mode::Sync)
    })
}
/// `MPI_Issend_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Issend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Issend_c", Some(comm), || {
        p2p::isend(buf, count, datatype, dest, tag, comm, Mode::Sync, request)
    })
}
/// `MPI_Ssend_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ssend_init_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ssend_init_c", Some(comm), || {
        p2p::send_init(buf, count, datatype, dest, tag, comm, Mode::Sync, request)
    })
}
/// `MPI_Rsend_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Rsend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Rsend_c", Some(comm), || {
        p2p::send(buf, count, datatype, dest, tag, comm, Mode::Ready)
    })
}
/// `MPI_Irsend_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Irsend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Irsend_c", Some(comm), || {
        p2p::isend(buf, count, datatype, dest, tag, comm, Mode::Ready, request)
    })
}
/// `MPI_Rsend_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Rsend_init_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Rsend_init_c", Some(comm), || {
        p2p::send_init(buf, count, datatype, dest, tag, comm, Mode::Ready, request)
    })
}
/// `MPI_Bsend_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Bsend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Bsend_c", Some(comm), || {
        p2p::send(buf, count, datatype, dest, tag, comm, Mode::Buffered)
    })
}
/// `MPI_Ibsend_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Ibsend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Ibsend_c", Some(comm), || {
        p2p::isend(
            buf,
            count,
            datatype,
            dest,
            tag,
            comm,
            Mode::Buffered,
            request,
        )
    })
}
/// `MPI_Bsend_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Bsend_init_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Bsend_init_c", Some(comm), || {
        p2p::send_init(
            buf,
            count,
            datatype,
            dest,
            tag,
            comm,
            Mode::Buffered,
            request,
        )
    })
}
/// `MPI_Recv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Recv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    p2p::recv_entry(
        "MPI_Recv_c",
        buf,
        count,
        datatype,
        source,
        tag,
        comm,
        status,
    )
}
/// `MPI_Irecv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Irecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Irecv_c", Some(comm), || {
        p2p::irecv(buf, count, datatype, source, tag, comm, request)
    })
}
/// `MPI_Recv_init_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Recv_init_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Recv_init_c", Some(comm), || {
        p2p::recv_init(buf, count, datatype, source, tag, comm, request)
    })
}
/// `MPI_Sendrecv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Sendrecv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Sendrecv_c", Some(comm), || {
        p2p::sendrecv(
            sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
            recvtag, comm, status, None,
        )
    })
}
/// `MPI_Isendrecv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Isendrecv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Isendrecv_c", Some(comm), || {
        p2p::sendrecv(
            sendbuf,
            sendcount,
            sendtype,
            dest,
            sendtag,
            recvbuf,
            recvcount,
            recvtype,
            source,
            recvtag,
            comm,
            std::ptr::null_mut(),
            Some(request),
        )
    })
}
/// `MPI_Sendrecv_replace_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Sendrecv_replace_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Sendrecv_replace_c", Some(comm), || {
        p2p::sendrecv_replace(
            buf, count, datatype, dest, sendtag, source, recvtag, comm, status, None,
        )
    })
}
/// `MPI_Isendrecv_replace_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Isendrecv_replace_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Isendrecv_replace_c", Some(comm), || {
        p2p::sendrecv_replace(
            buf,
            count,
            datatype,
            dest,
            sendtag,
            source,
            recvtag,
            comm,
            std::ptr::null_mut(),
            Some(request),
        )
    })
}
/// `MPI_Mrecv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Mrecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Mrecv_c", None, || {
        let st = p2p::mrecv(buf, count, datatype, message)?;
        ptr::write_opt(status, st);
        Ok(())
    })
}
/// `MPI_Imrecv_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Imrecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Imrecv_c", None, || {
        // The message is matched already: its data is taken now, the request is complete.
        let st = p2p::mrecv(buf, count, datatype, message)?;
        let r = crate::request::insert(Box::new(crate::request::Ready(st)), MPI_COMM_WORLD)?;
        ptr::write(request, r, "request")
    })
}
/// `MPI_Get_count_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Get_count_c(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut MPI_Count,
) -> c_int {
    guard("MPI_Get_count_c", None, || {
        let n = p2p::get_count(status, datatype)?;
        ptr::write(count, n, "count")
    })
}
/// `MPI_Get_elements_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Get_elements_c(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut MPI_Count,
) -> c_int {
    guard("MPI_Get_elements_c", None, || {
        let n = p2p::get_elements(status, datatype)?;
        ptr::write(count, n, "count")
    })
}
/// `MPI_Status_set_elements_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Status_set_elements_c(
    status: *mut MPI_Status,
    datatype: MPI_Datatype,
    count: MPI_Count,
) -> c_int {
    guard("MPI_Status_set_elements_c", None, || {
        p2p::set_elements(status, datatype, count)
    })
}
/// `MPI_Buffer_attach_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Buffer_attach_c(buffer: *mut c_void, size: MPI_Count) -> c_int {
    guard("MPI_Buffer_attach_c", None, || {
        p2p::buffer_attach(buffer, size)
    })
}
/// `MPI_Buffer_detach_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Buffer_detach_c(buffer_addr: *mut c_void, size: *mut MPI_Count) -> c_int {
    guard("MPI_Buffer_detach_c", None, || {
        let n = p2p::buffer_detach(buffer_addr)?;
        ptr::write(size, n as MPI_Count, "size")
    })
}
/// `MPI_Get_elements_x`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Get_elements_x(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut MPI_Count,
) -> c_int {
    guard("MPI_Get_elements_x", None, || {
        let n = p2p::get_elements(status, datatype)?;
        ptr::write(count, n, "count")
    })
}
/// `MPI_Status_set_elements_x`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Status_set_elements_x(
    status: *mut MPI_Status,
    datatype: MPI_Datatype,
    count: MPI_Count,
) -> c_int {
    guard("MPI_Status_set_elements_x", None, || {
        p2p::set_elements(status, datatype, count)
    })
}
/// `MPI_Probe`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Probe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Probe", Some(comm), || {
        p2p::probe(source, tag, comm, status)
    })
}
/// `MPI_Iprobe`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Iprobe", Some(comm), || {
        p2p::iprobe(source, tag, comm, flag, status)
    })
}
/// `MPI_Mprobe`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Mprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Mprobe", Some(comm), || {
        p2p::mprobe(source, tag, comm, None, message, status)
    })
}
/// `MPI_Improbe`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Improbe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Improbe", Some(comm), || {
        p2p::mprobe(source, tag, comm, Some(flag), message, status)
    })
}
/// `MPI_Status_get_source`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Status_get_source(status: *const MPI_Status, source: *mut c_int) -> c_int {
    guard("MPI_Status_get_source", None, || {
        let st = ptr::read(status, "status")?;
        ptr::write(source, st.MPI_SOURCE, "source")
    })
}
/// `MPI_Status_set_source`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Status_set_source(status: *mut MPI_Status, source: c_int) -> c_int {
    guard("MPI_Status_set_source", None, || {
        let mut st = ptr::read(status.cast_const(), "status")?;
        st.MPI_SOURCE = source;
        ptr::write(status, st, "status")
    })
}
/// `MPI_Status_get_tag`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Status_get_tag(status: *const MPI_Status, tag: *mut c_int) -> c_int {
    guard("MPI_Status_get_tag", None, || {
        let st = ptr::read(status, "status")?;
        ptr::write(tag, st.MPI_TAG, "tag")
    })
}
/// `MPI_Status_set_tag`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Status_set_tag(status: *mut MPI_Status, tag: c_int) -> c_int {
    guard("MPI_Status_set_tag", None, || {
        let mut st = ptr::read(status.cast_const(), "status")?;
        st.MPI_TAG = tag;
        ptr::write(status, st, "status")
    })
}
/// `MPI_Status_get_error`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Status_get_error(status: *const MPI_Status, error: *mut c_int) -> c_int {
    guard("MPI_Status_get_error", None, || {
        let st = ptr::read(status, "status")?;
        ptr::write(error, st.MPI_ERROR, "error")
    })
}
/// `MPI_Status_set_error`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Status_set_error(status: *mut MPI_Status, error: c_int) -> c_int {
    guard("MPI_Status_set_error", None, || {
        let mut st = ptr::read(status.cast_const(), "status")?;
        st.MPI_ERROR = error;
        ptr::write(status, st, "status")
    })
}
/// `MPI_Status_set_cancelled`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Status_set_cancelled(status: *mut MPI_Status, flag: c_int) -> c_int {
    guard("MPI_Status_set_cancelled", None, || {
        let mut st = ptr::read(status.cast_const(), "status")?;
        st.MPI_internal[2] = (flag != 0) as c_int;
        ptr::write(status, st, "status")
    })
}

/// `MPI_Buffer_flush`: waits for every buffered send (the buffer stays attached).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Buffer_flush() -> c_int {
    guard("MPI_Buffer_flush", None, p2p::buffer_flush)
}
/// `MPI_Buffer_iflush`: the process's buffer is rcomm's budget, which flushes by detaching
/// (waiting for its sends) and attaching again, so the request is complete when returned.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Buffer_iflush(request: *mut MPI_Request) -> c_int {
    guard("MPI_Buffer_iflush", None, || {
        p2p::buffer_flush()?;
        let r = crate::request::insert(
            Box::new(crate::request::Ready(crate::request::empty_status())),
            MPI_COMM_WORLD,
        )?;
        ptr::write(request, r, "request")
    })
}
