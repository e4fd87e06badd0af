//! A stand-in libnccl: NCCL's C ABI (the calls rcomm uses, as nccl.h of 2.23 declares them)
//! over host memory and Unix sockets, so rcomm's NCCL engine runs, through its own `dlopen`,
//! on a machine without a GPU. It behaves towards its caller as NCCL does: operations on a
//! stream are queued and return at once, a rank that never arrives makes the others wait,
//! a rank whose process dies makes the others' operations fail with `ncclRemoteError`, and
//! `ncclCommAbort` ends any wait. The crate's README.md states the contract.
//!
//! - "Device pointers" are host addresses of the calling process.
//! - A `cudaStream_t` is null (the call runs to completion before it returns) or points at a
//!   [`StreamAbi`] (the call queues one host function on it and returns).
//! - `ncclGetUniqueId` starts a hub thread in the calling process ([`hub`]); every rank
//!   connects to it; collectives are folded there in rank order.
//! - `NCCL_STANDIN_FAULT` injects faults ([`fault`]).
//!
//! Linux only (abstract Unix sockets).

pub mod abi;
mod comm;
mod conn;
pub mod fault;
mod group;
pub mod hub;
mod live;
mod wire;

pub use abi::{Config, STREAM_MAGIC, StreamAbi, UniqueId};

use abi::{Fail, INVALID_ARGUMENT, SUCCESS};
use comm::{Comm, HState, Handle, Task};
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;
use wire::Kind;

/// `ncclComm_t`.
pub type NcclComm = *mut c_void;
/// `cudaStream_t`.
pub type CudaStream = *mut c_void;

/// Runs one entry point: a failure's text becomes the thread's last error; a panic is
/// `ncclInternalError`, never an unwind into C.
fn call(f: impl FnOnce() -> Result<c_int, Fail>) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(c)) => c,
        Ok(Err(fail)) => {
            comm::set_last(&fail.text);
            fail.code
        }
        Err(_) => {
            comm::set_last("internal error: the NCCL stand-in panicked");
            abi::INTERNAL
        }
    }
}

fn non_null<T>(p: *const T, what: &str) -> Result<(), Fail> {
    if p.is_null() {
        Err(Fail::invalid(format!("{what} is null")))
    } else {
        Ok(())
    }
}

/// The handle behind an `ncclComm_t`.
///
/// # Safety
/// `c` is null or was returned by this library and not destroyed.
unsafe fn handle<'a>(c: NcclComm, call: &str) -> Result<&'a Handle, Fail> {
    non_null(c, &format!("{call}: comm"))?;
    // SAFETY: the caller's contract; the magic refuses some foreign pointers.
    let h = unsafe { &*c.cast::<Handle>() };
    if h.magic != comm::HANDLE_MAGIC {
        return Err(Fail::invalid(format!(
            "{call}: comm {c:p} is not a communicator of this library (destroyed already?)"
        )));
    }
    Ok(h)
}

/// The ready communicator behind `c`.
///
/// # Safety
/// As [`handle`].
unsafe fn ready(c: NcclComm, call: &str) -> Result<(&Handle, Arc<Comm>), Fail> {
    // SAFETY: the caller's contract.
    let h = unsafe { handle(c, call) }?;
    match h.poll(false) {
        Ok(Some(comm)) => Ok((h, comm)),
        Ok(None) => Err(Fail::internal(format!(
            "{call}: a handle without a communicator"
        ))),
        Err(f) if f.code == abi::IN_PROGRESS => Err(Fail::usage(format!(
            "{call}: the communicator is still being set up (ncclCommGetAsyncError says \
             ncclInProgress)"
        ))),
        Err(f) => Err(f),
    }
}

/// Writes `v` through `out`.
///
/// # Safety
/// `out` is null or writable.
unsafe fn put<T>(out: *mut T, v: T, what: &str) -> Result<c_int, Fail> {
    non_null(out, what)?;
    // SAFETY: the caller's contract; checked non-null.
    unsafe { out.write(v) };
    Ok(SUCCESS)
}

/// `ncclGetVersion`: 22304 (2.23.4).
///
/// # Safety
/// `version` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    call(|| unsafe { put(version, abi::VERSION_CODE, "ncclGetVersion: version") })
}

/// `ncclGetErrorString`: a static text for a result code.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGetErrorString(result: c_int) -> *const c_char {
    abi::error_string(result).as_ptr()
}

/// `ncclGetLastError`: the newer of this thread's last failure and `comm`'s asynchronous
/// error, or "".
///
/// # Safety
/// `comm` is null or a live communicator of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetLastError(comm: NcclComm) -> *const c_char {
    let mine = comm::last();
    // SAFETY: the caller's contract.
    let theirs = unsafe { handle(comm, "ncclGetLastError") }
        .ok()
        .and_then(|h| h.err.get());
    match theirs {
        Some(t) if t.0 > mine.0 => t.1,
        _ => mine.1,
    }
}

/// The bytes an id starts with.
const ID_MAGIC: &[u8; 8] = b"rcNCCLsi";

/// `ncclGetUniqueId`: starts a hub in this process and names it in the id.
///
/// # Safety
/// `unique_id` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetUniqueId(unique_id: *mut UniqueId) -> c_int {
    call(|| {
        non_null(unique_id, "ncclGetUniqueId: uniqueId")?;
        let name = hub::start().map_err(|e| Fail::system(format!("cannot start the hub: {e}")))?;
        let mut id = UniqueId { internal: [0; 128] };
        id.internal[..8].copy_from_slice(ID_MAGIC);
        id.internal[8] = name.len() as u8;
        id.internal[9..9 + name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: the caller's contract.
        unsafe { put(unique_id, id, "ncclGetUniqueId: uniqueId") }
    })
}

fn hub_name(id: &UniqueId) -> Result<String, Fail> {
    let b = &id.internal;
    let n = b[8] as usize;
    if &b[..8] != ID_MAGIC || n == 0 || 9 + n > b.len() {
        return Err(Fail::invalid(
            "the unique id was not made by this library's ncclGetUniqueId",
        ));
    }
    String::from_utf8(b[9..9 + n].to_vec())
        .map_err(|_| Fail::invalid("the unique id's hub name is not UTF-8"))
}

/// Starts joining; writes the handle; waits for every rank if `blocking`.
///
/// # Safety
/// `out` is null or writable.
unsafe fn init(
    out: *mut NcclComm,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    blocking: bool,
) -> Result<c_int, Fail> {
    non_null(out, "ncclCommInitRank: comm")?;
    if nranks < 1 {
        return Err(Fail::invalid(format!("ncclCommInitRank: nranks {nranks}")));
    }
    if rank < 0 || rank >= nranks {
        return Err(Fail::invalid(format!(
            "ncclCommInitRank: rank {rank} of {nranks} ranks"
        )));
    }
    fault::fault()?;
    let name = hub_name(&id)?;
    let conn = conn::Conn::connect(&name)?;
    conn.send(&wire::Msg::Join {
        nranks: nranks as u32,
        rank: rank as u32,
        pid: std::process::id(),
    })?;
    let h = Box::new(Handle::new(HState::Joining {
        conn,
        rank: rank as u32,
        nranks: nranks as u32,
    }));
    if !blocking {
        // SAFETY: the caller's contract; checked non-null.
        unsafe { out.write(Box::into_raw(h).cast()) };
        return Ok(abi::IN_PROGRESS);
    }
    h.poll(true)?;
    // SAFETY: as above.
    unsafe { out.write(Box::into_raw(h).cast()) };
    Ok(SUCCESS)
}

/// `ncclCommInitRank`: joins the ranks of `comm_id`; returns when all `nranks` joined.
///
/// # Safety
/// `comm` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut NcclComm,
    nranks: c_int,
    comm_id: UniqueId,
    rank: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    call(|| unsafe { init(comm, nranks, comm_id, rank, true) })
}

/// `ncclCommInitRankConfig`: as `ncclCommInitRank`; with `blocking = 0` it returns
/// `ncclInProgress` at once and `ncclCommGetAsyncError` says when the join is done.
///
/// # Safety
/// `comm` is null or writable; `config` is null or an `ncclConfig_t` of its `size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut NcclComm,
    nranks: c_int,
    comm_id: UniqueId,
    rank: c_int,
    config: *mut Config,
) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let blocking = unsafe { abi::blocking(config) }?;
        // SAFETY: the caller's contract.
        unsafe { init(comm, nranks, comm_id, rank, blocking) }
    })
}

/// `ncclCommSplit`: collective over `comm`; ranks of one `color` form a new communicator,
/// ordered by `key` then by rank in `comm`; `NCCL_SPLIT_NOCOLOR` gets a null one.
///
/// # Safety
/// `comm` is a live communicator of this library; `newcomm` null or writable; `config` as in
/// `ncclCommInitRankConfig`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommSplit(
    comm: NcclComm,
    color: c_int,
    key: c_int,
    newcomm: *mut NcclComm,
    config: *mut Config,
) -> c_int {
    call(|| {
        non_null(newcomm, "ncclCommSplit: newcomm")?;
        // SAFETY: the caller's contract.
        let blocking = unsafe { abi::blocking(config) }?;
        // SAFETY: the caller's contract.
        let (_, parent) = unsafe { ready(comm, "ncclCommSplit") }?;
        if color < abi::SPLIT_NOCOLOR {
            return Err(Fail::invalid(format!(
                "ncclCommSplit: color {color} (a color is >= 0 or NCCL_SPLIT_NOCOLOR)"
            )));
        }
        if let Some(f) = parent.broken() {
            return Err(f);
        }
        let seq = parent.next_seq();
        parent.send(&wire::Msg::Op {
            comm: parent.id,
            seq,
            hdr: wire::OpHdr {
                kind: Kind::Split,
                dtype: 0,
                op: 0,
                root: 0,
                count: 0,
                color,
                key,
            },
            data: Vec::new(),
        })?;
        let h = Box::new(Handle::new(HState::Splitting { parent, seq }));
        if !blocking {
            let out: NcclComm = if color == abi::SPLIT_NOCOLOR {
                std::ptr::null_mut()
            } else {
                Box::into_raw(h).cast()
            };
            // SAFETY: checked non-null above.
            unsafe { newcomm.write(out) };
            return Ok(if out.is_null() {
                SUCCESS
            } else {
                abi::IN_PROGRESS
            });
        }
        let out: NcclComm = match h.poll(true)? {
            Some(_) => Box::into_raw(h).cast(),
            None => std::ptr::null_mut(),
        };
        // SAFETY: checked non-null above.
        unsafe { newcomm.write(out) };
        Ok(SUCCESS)
    })
}

/// `ncclCommGetAsyncError`: `ncclInProgress` while joining or splitting, then the
/// communicator's asynchronous error (`ncclRemoteError` once a peer is lost).
///
/// # Safety
/// `comm` is a live communicator of this library; `async_error` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommGetAsyncError(comm: NcclComm, async_error: *mut c_int) -> c_int {
    call(|| {
        non_null(async_error, "ncclCommGetAsyncError: asyncError")?;
        // SAFETY: the caller's contract.
        let h = unsafe { handle(comm, "ncclCommGetAsyncError") }?;
        let code = match h.poll(false) {
            Ok(Some(c)) => c.async_error(),
            Ok(None) => SUCCESS,
            Err(f) => {
                if f.code != abi::IN_PROGRESS {
                    h.err.set(&f.text);
                }
                f.code
            }
        };
        // SAFETY: the caller's contract.
        unsafe { put(async_error, code, "ncclCommGetAsyncError: asyncError") }
    })
}

/// Frees a handle: `abort` ends its operations' waits first; the communicator itself goes
/// when the last queued operation holding it has run.
///
/// # Safety
/// As [`handle`]; `comm` is not used again.
unsafe fn release(comm: NcclComm, call: &str, abort: bool) -> Result<c_int, Fail> {
    // SAFETY: the caller's contract.
    unsafe { handle(comm, call) }?;
    // SAFETY: made by Box::into_raw in this library, released once (the caller's contract).
    let mut h = unsafe { Box::from_raw(comm.cast::<Handle>()) };
    h.magic = 0;
    let st = std::mem::replace(
        h.st.get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        HState::Failed(Fail::usage("released")),
    );
    if let HState::Ready(c) = st {
        if abort {
            c.abort();
        }
        c.leave();
    }
    Ok(SUCCESS)
}

/// `ncclCommAbort`: ends every wait of the communicator's operations (they return without
/// writing their output) and frees it; once the last communicator of a connection is gone,
/// the connection closes and its thread is joined.
///
/// # Safety
/// `comm` is a live communicator of this library, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommAbort(comm: NcclComm) -> c_int {
    // SAFETY: the caller's contract.
    call(|| unsafe { release(comm, "ncclCommAbort", true) })
}

/// `ncclCommDestroy`: frees the communicator once its queued operations ran.
///
/// # Safety
/// `comm` is a live communicator of this library, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommDestroy(comm: NcclComm) -> c_int {
    // SAFETY: the caller's contract.
    call(|| unsafe { release(comm, "ncclCommDestroy", false) })
}

/// `ncclCommFinalize`: this rank is done with the communicator (its process ending is no
/// failure of the others any more); `ncclCommDestroy` must still follow.
///
/// # Safety
/// `comm` is a live communicator of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommFinalize(comm: NcclComm) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let (_, c) = unsafe { ready(comm, "ncclCommFinalize") }?;
        c.leave();
        Ok(SUCCESS)
    })
}

/// `ncclCommCount`.
///
/// # Safety
/// `comm` is a live communicator of this library; `count` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCount(comm: NcclComm, count: *mut c_int) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let (_, c) = unsafe { ready(comm, "ncclCommCount") }?;
        // SAFETY: the caller's contract.
        unsafe { put(count, c.nranks as c_int, "ncclCommCount: count") }
    })
}

/// `ncclCommUserRank`.
///
/// # Safety
/// `comm` is a live communicator of this library; `rank` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommUserRank(comm: NcclComm, rank: *mut c_int) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let (_, c) = unsafe { ready(comm, "ncclCommUserRank") }?;
        // SAFETY: the caller's contract.
        unsafe { put(rank, c.rank as c_int, "ncclCommUserRank: rank") }
    })
}

/// `ncclCommCuDevice`: always device 0.
///
/// # Safety
/// `comm` is a live communicator of this library; `device` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCuDevice(comm: NcclComm, device: *mut c_int) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        unsafe { ready(comm, "ncclCommCuDevice") }?;
        // SAFETY: the caller's contract.
        unsafe { put(device, 0, "ncclCommCuDevice: device") }
    })
}

/// Checks and queues (or runs, or keeps for the group) one call's task.
///
/// # Safety
/// The entry points' contract: live `comm`; `stream` null or a [`StreamAbi`]; buffers valid
/// until the work ran.
unsafe fn op(
    comm: NcclComm,
    stream: CudaStream,
    name: &str,
    task: impl FnOnce(&Comm) -> Result<Task, Fail>,
) -> c_int {
    let r = call(|| {
        // SAFETY: the caller's contract.
        let (_, c) = unsafe { ready(comm, name) }?;
        // SAFETY: the caller's contract.
        let s = unsafe { comm::check_stream(stream) }?;
        let t = task(&c)?;
        // SAFETY: the caller's contract.
        unsafe { group::enqueue(&c, s, t) }?;
        Ok(SUCCESS)
    });
    if r != SUCCESS {
        group::failed(&Fail::new(r, last_text()));
    }
    r
}

fn last_text() -> String {
    let (_, p) = comm::last();
    // SAFETY: a NUL-terminated string this thread owns.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// `ncclAllReduce`.
///
/// # Safety
/// As NCCL's: `sendbuff`/`recvbuff` hold `count` elements each (host memory here), valid
/// until the operation ran; `comm` live; `stream` null or a [`StreamAbi`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op_: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        op(comm, stream, "ncclAllReduce", |c| {
            Task::coll(
                c,
                Kind::AllReduce,
                sendbuff as usize,
                recvbuff as usize,
                count,
                datatype,
                op_,
                0,
            )
        })
    }
}

/// `ncclBroadcast`: `sendbuff` is read on `root` only.
///
/// # Safety
/// As [`ncclAllReduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        op(comm, stream, "ncclBroadcast", |c| {
            Task::coll(
                c,
                Kind::Broadcast,
                sendbuff as usize,
                recvbuff as usize,
                count,
                datatype,
                0,
                root,
            )
        })
    }
}

/// `ncclReduce`: `recvbuff` is written on `root` only.
///
/// # Safety
/// As [`ncclAllReduce`].
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op_: c_int,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        op(comm, stream, "ncclReduce", |c| {
            Task::coll(
                c,
                Kind::Reduce,
                sendbuff as usize,
                recvbuff as usize,
                count,
                datatype,
                op_,
                root,
            )
        })
    }
}

/// `ncclAllGather`: `recvbuff` holds `nranks × sendcount` elements.
///
/// # Safety
/// As [`ncclAllReduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        op(comm, stream, "ncclAllGather", |c| {
            Task::coll(
                c,
                Kind::AllGather,
                sendbuff as usize,
                recvbuff as usize,
                sendcount,
                datatype,
                0,
                0,
            )
        })
    }
}

/// `ncclReduceScatter`: `sendbuff` holds `nranks × recvcount` elements.
///
/// # Safety
/// As [`ncclAllReduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op_: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        op(comm, stream, "ncclReduceScatter", |c| {
            Task::coll(
                c,
                Kind::ReduceScatter,
                sendbuff as usize,
                recvbuff as usize,
                recvcount,
                datatype,
                op_,
                0,
            )
        })
    }
}

/// `ncclSend`: does not wait for the matching receive.
///
/// # Safety
/// As [`ncclAllReduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        op(comm, stream, "ncclSend", |c| {
            Task::p2p(c, false, sendbuff as usize, count, datatype, peer)
        })
    }
}

/// `ncclRecv`: takes `peer`'s sends on this communicator in order.
///
/// # Safety
/// As [`ncclAllReduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        op(comm, stream, "ncclRecv", |c| {
            Task::p2p(c, true, recvbuff as usize, count, datatype, peer)
        })
    }
}

/// `ncclGroupStart`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> c_int {
    call(|| {
        group::start();
        Ok(SUCCESS)
    })
}

/// `ncclGroupEnd`: queues the group's calls, or reports the first that failed.
///
/// # Safety
/// The grouped calls' buffers stay valid until their work ran.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupEnd() -> c_int {
    // SAFETY: the caller's contract.
    call(|| unsafe { group::end() }.map(|()| SUCCESS))
}

/// What is alive in this process: `out[0..4]` = communicators, connections, hub threads,
/// other threads.
///
/// # Safety
/// `out` is null or writable for 4 `u64`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcommNcclStandInLive(out: *mut u64) -> c_int {
    call(|| {
        non_null(out, "rcommNcclStandInLive: out")?;
        // SAFETY: the caller's contract.
        unsafe { out.cast::<[u64; 4]>().write_unaligned(live::snapshot()) };
        Ok(SUCCESS)
    })
}

/// Whether `code` is [`INVALID_ARGUMENT`] (for the tests' readability).
#[doc(hidden)]
pub fn is_invalid(code: c_int) -> bool {
    code == INVALID_ARGUMENT
}
