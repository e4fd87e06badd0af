//! Point-to-point: every send mode (standard, synchronous, ready, buffered; blocking,
//! non-blocking, persistent), receives, probes and matched probes, send-receive, status
//! queries and the bsend buffer, mapped onto rcomm's communicator calls.
//!
//! Data moves as bytes: a send packs `count` elements of its datatype (any datatype, through
//! its rcomm layout), a receive unpacks what arrived. A contiguous buffer is sent from and
//! received into the caller's memory directly, blocking or not (rcomm's raw requests: MPI's
//! buffer contract is theirs), so the C layer adds no allocation or copy per message; other
//! layouts are packed at the start, and a non-blocking receive of one lands in a buffer the
//! request owns and is unpacked into the caller's memory when it completes. The exported
//! functions (int and `_c` counts) are in `p2p_abi`.

use crate::buffers;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::handles::{Kind, Registry};
use crate::ptr;
use crate::request::{self, Op, Pending, RawOp, Ready, empty_status, status_of};
use crate::typeobj::{self, TypeRef};
use crate::world::{self as comm, CommObj};
use std::ffi::c_void;
use std::sync::Mutex;

/// How a send completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `MPI_Send`.
    Standard,
    /// `MPI_Ssend`: completes when the receive has matched.
    Sync,
    /// `MPI_Rsend`: the receive is posted already.
    Ready,
    /// `MPI_Bsend`: copied into the attached buffer.
    Buffered,
}

fn send_tag(tag: c_int) -> Res<rcomm::Tag> {
    if tag < 0 {
        return Err(err(MPI_ERR_TAG, format!("send tag {tag} is negative")));
    }
    Ok(rcomm::Tag(tag))
}

fn recv_tag(tag: c_int) -> Res<rcomm::Tag> {
    match tag {
        MPI_ANY_TAG => Ok(rcomm::Tag::Any),
        t if t >= 0 => Ok(rcomm::Tag(t)),
        t => Err(err(MPI_ERR_TAG, format!("receive tag {t} is negative"))),
    }
}

/// A destination rank; `None` for `MPI_PROC_NULL`.
fn dest(c: &CommObj, rank: c_int) -> Res<Option<u32>> {
    match rank {
        MPI_PROC_NULL => Ok(None),
        r if r >= 0 && c.inter.is_some() => Ok(Some(c.peer(r as u32)?)),
        r if r >= 0 && (r as u32) < c.comm.size() => Ok(Some(r as u32)),
        r => Err(err(
            MPI_ERR_RANK,
            format!("rank {r} is not in a communicator of {}", c.comm.size()),
        )),
    }
}

/// A source rank; `None` for `MPI_PROC_NULL`.
fn source(c: &CommObj, rank: c_int) -> Res<Option<rcomm::Source>> {
    match rank {
        // On an intercommunicator it would match the local group too (rcomm refuses it).
        MPI_ANY_SOURCE if c.inter.is_some() => Err(err(
            MPI_ERR_RANK,
            "MPI_ANY_SOURCE on an intercommunicator: name the remote rank, or merge first",
        )),
        MPI_ANY_SOURCE => Ok(Some(rcomm::Source::Any)),
        r => Ok(dest(c, r)?.map(rcomm::Source::Rank)),
    }
}

/// The status of an operation with `MPI_PROC_NULL`.
pub fn proc_null_status() -> MPI_Status {
    MPI_Status {
        MPI_SOURCE: MPI_PROC_NULL,
        MPI_TAG: MPI_ANY_TAG,
        ..empty_status()
    }
}

/// A buffer argument: its address, element count and datatype, checked.
pub struct Buf {
    addr: usize,
    count: usize,
    t: TypeRef,
}

impl Buf {
    /// Checks `count` and `datatype`, and that a null address is not asked to hold data
    /// (unless the type's layout starts at an absolute address, `MPI_BOTTOM`).
    pub fn new(addr: *const c_void, count: i64, datatype: MPI_Datatype) -> Res<Buf> {
        let count = ptr::count(count)?;
        let t = typeobj::get_committed_ref(datatype)?;
        if addr.is_null() && count > 0 && t.size() > 0 && t.dt.lb() == 0 {
            return Err(err(MPI_ERR_BUFFER, "the buffer is a null pointer"));
        }
        Ok(Buf {
            addr: addr as usize,
            count,
            t,
        })
    }

    /// Bytes of data it holds.
    pub fn bytes(&self) -> usize {
        self.t.dt.packed_size(self.count)
    }

    /// Its memory as one run of bytes, when the layout is that.
    fn contiguous(&self) -> Option<(*mut u8, usize)> {
        (self.t.dt.is_contiguous() && self.t.dt.lb() == 0)
            .then_some((self.addr as *mut u8, self.bytes()))
    }

    /// The data, packed.
    pub fn pack(&self) -> Res<Vec<u8>> {
        let n = self.bytes();
        if n == 0 {
            return Ok(Vec::new());
        }
        if let Some((p, len)) = self.contiguous() {
            return Ok(ptr::slice(p.cast_const(), len, "buf")?.to_vec());
        }
        let mut out = vec![0u8; n];
        // SAFETY: the program passes a buffer holding `count` elements of the datatype.
        unsafe {
            self.t
                .dt
                .pack_raw(self.addr as *const u8, self.count, &mut out)
        }?;
        Ok(out)
    }

    /// Writes received bytes into the buffer; `MPI_ERR_TRUNCATE` when they do not fit.
    pub fn unpack(&self, data: &[u8]) -> Res {
        if data.len() > self.bytes() {
            return Err(err(
                MPI_ERR_TRUNCATE,
                format!(
                    "{} bytes arrived for a {}-byte receive",
                    data.len(),
                    self.bytes()
                ),
            ));
        }
        if data.is_empty() {
            return Ok(());
        }
        if let Some((p, _)) = self.contiguous() {
            ptr::slice_mut(p, data.len(), "buf")?.copy_from_slice(data);
            return Ok(());
        }
        // SAFETY: the program passes a buffer with room for `count` elements.
        unsafe { self.t.dt.unpack_raw(data, self.addr as *mut u8, self.count) }?;
        Ok(())
    }
}

/// A send in flight.
struct SendOp(Option<rcomm::Request<u8>>);

impl Pending for SendOp {
    fn test(&mut self) -> Res<Option<MPI_Status>> {
        if let Some(r) = &mut self.0
            && !r.test()
        {
            return Ok(None);
        }
        self.wait().map(Some)
    }

    fn wait(&mut self) -> Res<MPI_Status> {
        if let Some(r) = self.0.take() {
            r.wait()?;
        }
        Ok(empty_status())
    }

    fn cancel(&mut self) -> Res<bool> {
        match &mut self.0 {
            Some(r) => Ok(r.try_cancel()?),
            None => Ok(false),
        }
    }
}

/// A receive in flight, and where its data goes.
struct RecvOp {
    req: Option<rcomm::Request<u8>>,
    to: Buf,
    /// The intercommunicator it was posted on, whose statuses name remote ranks.
    inter: Option<rcomm::InterComm>,
}

// SAFETY: `Buf` holds the address the program lent until completion; the request is waited
// on by whichever thread completes it, as MPI allows.
unsafe impl Send for RecvOp {}

impl Pending for RecvOp {
    fn test(&mut self) -> Res<Option<MPI_Status>> {
        if let Some(r) = &mut self.req
            && !r.test()
        {
            return Ok(None);
        }
        self.wait().map(Some)
    }

    fn wait(&mut self) -> Res<MPI_Status> {
        let Some(r) = self.req.take() else {
            return Ok(empty_status());
        };
        let (data, st) = r.wait()?;
        self.to.unpack(&data[..st.bytes.min(data.len())])?;
        Ok(comm::remote_status(self.inter.as_ref(), status_of(&st)))
    }

    fn cancel(&mut self) -> Res<bool> {
        match &mut self.req {
            Some(r) => {
                let done = r.try_cancel()?;
                if done {
                    self.req = None;
                }
                Ok(done)
            }
            None => Ok(false),
        }
    }
}

/// A send-receive in flight: both halves complete it.
struct PairOp(Box<dyn Pending>, Box<dyn Pending>);

impl Pending for PairOp {
    fn test(&mut self) -> Res<Option<MPI_Status>> {
        let s = self.0.test()?;
        match (s, self.1.test()?) {
            (Some(_), Some(st)) => Ok(Some(st)),
            (_, Some(st)) => {
                self.1 = Box::new(Ready(st));
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    fn wait(&mut self) -> Res<MPI_Status> {
        self.0.wait()?;
        self.1.wait()
    }
}

/// The bytes of an unpacked receive land in the caller's buffer at completion: a standalone
/// receive of `bytes` posted on rcomm.
fn post_recv(c: &CommObj, to: Buf, src: rcomm::Source, tag: rcomm::Tag) -> Res<Op> {
    if let Some((p, len)) = to.contiguous() {
        // SAFETY: MPI's contract: the program keeps the receive buffer valid and untouched
        // until the request completes.
        let r = unsafe { c.comm.irecv_raw(p, len, src, tag)? };
        return Ok(Op::Raw(RawOp(Some(r), c.inter.clone())));
    }
    let r = c.comm.irecv(vec![0u8; to.bytes()], src, tag)?;
    Ok(Op::Boxed(Box::new(RecvOp {
        req: Some(r),
        to,
        inter: c.inter.clone(),
    })))
}

/// rcomm's error as the C layer's, off the hot path.
#[cold]
#[inline(never)]
fn lift(e: rcomm::CommError) -> crate::errors::Error {
    e.into()
}

/// The common case, checked in a few instructions: a predefined communicator and a predefined
/// datatype laid out as one run of bytes. Its communicator, buffer address and byte length;
/// `None` sends the call down the general path, which checks everything and says what is wrong.
#[inline(always)]
fn fast_args(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    h: MPI_Comm,
) -> Option<(&'static CommObj, *const u8, usize)> {
    let c = comm::predefined(h)?;
    let run = typeobj::predefined_run(dt)?;
    // A count fits in 63 bits and a run is under 256 bytes: the product cannot overflow.
    if !(0..1 << 55).contains(&count) || (count != 0 && buf.is_null()) {
        return None;
    }
    Some((c, buf.cast(), count as usize * run))
}

/// `MPI_Send`'s whole body: the common case checked here (no calls, no frame) and sent by
/// [`send_checked`], anything else by the general path under the guard. Both are calls in
/// tail position, so the exported function adds a few compares and a jump.
#[inline(always)]
pub fn send_entry(
    func: &'static str,
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dst: c_int,
    tag: c_int,
    h: MPI_Comm,
) -> c_int {
    // A negative rank is a large u32: one compare refuses it and a rank past the end.
    if let Some((c, p, n)) = fast_args(buf, count, dt, h)
        && (dst as u32) < c.comm.size()
        && tag >= 0
    {
        return send_checked(func, c, p, n, dst as u32, tag, h);
    }
    send_guarded(func, buf, count, dt, dst, tag, h)
}

/// The common case's standard send, its arguments checked.
#[inline(always)]
fn send_checked(
    func: &'static str,
    c: &'static CommObj,
    p: *const u8,
    n: usize,
    d: u32,
    tag: c_int,
    h: MPI_Comm,
) -> c_int {
    crate::call::guard(func, Some(h), || {
        let data: &[u8] = if n == 0 {
            &[]
        } else {
            // SAFETY: non-null; the program passes `count` elements of a type laid out as one
            // run of `n` bytes.
            unsafe { std::slice::from_raw_parts(p, n) }
        };
        c.comm.send(data, d, rcomm::Tag(tag)).map_err(lift)
    })
}

#[inline(never)]
fn send_guarded(
    func: &'static str,
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dst: c_int,
    tag: c_int,
    h: MPI_Comm,
) -> c_int {
    crate::call::guard(func, Some(h), || {
        send(buf, count, dt, dst, tag, h, Mode::Standard)
    })
}

/// `MPI_Recv`'s whole body, as [`send_entry`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn recv_entry(
    func: &'static str,
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    src: c_int,
    tag: c_int,
    h: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    if let Some((c, p, n)) = fast_args(buf, count, dt, h)
        && (src == MPI_ANY_SOURCE || (src as u32) < c.comm.size())
        && (tag == MPI_ANY_TAG || tag >= 0)
    {
        return recv_checked(func, c, p.cast_mut(), n, src, tag, h, status);
    }
    recv_guarded(func, buf, count, dt, src, tag, h, status)
}

/// The common case's receive, its arguments checked (`src` a rank or `MPI_ANY_SOURCE`, `tag`
/// not negative or `MPI_ANY_TAG`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn recv_checked(
    func: &'static str,
    c: &'static CommObj,
    p: *mut u8,
    n: usize,
    src: c_int,
    tag: c_int,
    h: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    crate::call::guard(func, Some(h), || {
        let from = match src {
            MPI_ANY_SOURCE => rcomm::Source::Any,
            r => rcomm::Source::Rank(r as u32),
        };
        let tag = match tag {
            MPI_ANY_TAG => rcomm::Tag::Any,
            t => rcomm::Tag(t),
        };
        let to: &mut [u8] = if n == 0 {
            &mut []
        } else {
            // SAFETY: non-null; the program passes room for `count` elements of a type laid
            // out as one run of `n` bytes, and does not touch it during the call.
            unsafe { std::slice::from_raw_parts_mut(p, n) }
        };
        // A predefined communicator is never an intercommunicator: the status is rcomm's.
        let st = c.comm.recv(to, from, tag).map_err(lift)?;
        ptr::write_opt(status, status_of(&st));
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn recv_guarded(
    func: &'static str,
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    src: c_int,
    tag: c_int,
    h: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    crate::call::guard(func, Some(h), || {
        recv_general(buf, count, dt, src, tag, h, status)
    })
}

/// Blocking send, any arguments and mode (apart from [`send_entry`]'s common case, so that
/// its frame does not weigh on that).
#[inline(never)]
pub fn send(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dst: c_int,
    tag: c_int,
    h: MPI_Comm,
    mode: Mode,
) -> Res {
    let c = comm::get(h)?;
    let b = Buf::new(buf, count, dt)?;
    let tag = send_tag(tag)?;
    let Some(d) = dest(&c, dst)? else {
        return Ok(());
    };
    let owned;
    let data: &[u8] = match b.contiguous() {
        Some((p, len)) => ptr::slice(p.cast_const(), len, "buf")?,
        None => {
            owned = b.pack()?;
            &owned
        }
    };
    match mode {
        Mode::Standard => c.comm.send(data, d, tag)?,
        Mode::Sync => c.comm.ssend(data, d, tag)?,
        Mode::Ready => c.comm.rsend(data, d, tag)?,
        Mode::Buffered => match buffers::owner_for(h, &c) {
            Some(o) => buffers::bsend(o, &c, data.to_vec(), d, tag)?,
            None => c.comm.bsend(data, d, tag)?,
        },
    }
    Ok(())
}

/// Starts a send; the operation a request waits for.
fn start_send(
    h: MPI_Comm,
    c: &CommObj,
    b: &Buf,
    dst: Option<u32>,
    tag: rcomm::Tag,
    mode: Mode,
) -> Res<Op> {
    let Some(d) = dst else {
        return Ok(Op::Boxed(Box::new(SendOp(None))));
    };
    if mode == Mode::Buffered
        && let Some(o) = buffers::owner_for(h, c)
    {
        // Copied into the buffer's account at once: the request is complete.
        buffers::bsend(o, c, b.pack()?, d, tag)?;
        return Ok(Op::Boxed(Box::new(SendOp(None))));
    }
    let raw_mode = match mode {
        Mode::Standard | Mode::Ready => Some(rcomm::RawSendMode::Standard),
        Mode::Sync => Some(rcomm::RawSendMode::Sync),
        // Copied at once into the attached buffer's budget: the owned path.
        Mode::Buffered => None,
    };
    if let (Some(m), Some((p, len))) = (raw_mode, b.contiguous()) {
        // SAFETY: MPI's contract: the program leaves the send buffer alone until the
        // request completes.
        let r = unsafe { c.comm.isend_raw(p.cast_const(), len, d, tag, m)? };
        return Ok(Op::Raw(RawOp(Some(r), c.inter.clone())));
    }
    let data = b.pack()?;
    let r = match mode {
        Mode::Standard => c.comm.isend(data, d, tag)?,
        Mode::Sync => c.comm.issend(data, d, tag)?,
        Mode::Ready => c.comm.irsend(data, d, tag)?,
        Mode::Buffered => c.comm.ibsend(data, d, tag)?,
    };
    Ok(Op::Boxed(Box::new(SendOp(Some(r)))))
}

/// Non-blocking send: the common case (as [`send_entry`], standard or synchronous mode) at
/// once, the rest by [`isend_general`].
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn isend(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dst: c_int,
    tag: c_int,
    h: MPI_Comm,
    mode: Mode,
    req: *mut MPI_Request,
) -> Res {
    let raw_mode = match mode {
        Mode::Standard => Some(rcomm::RawSendMode::Standard),
        Mode::Sync => Some(rcomm::RawSendMode::Sync),
        Mode::Ready | Mode::Buffered => None,
    };
    if let Some(m) = raw_mode
        && !req.is_null()
        && let Some((c, p, n)) = fast_args(buf, count, dt, h)
        && let Some(d) = u32::try_from(dst).ok().filter(|&d| d < c.comm.size())
        && tag >= 0
    {
        // SAFETY: MPI's contract: the program leaves the send buffer alone until the request
        // completes.
        let r = unsafe { c.comm.isend_raw(p, n, d, rcomm::Tag(tag), m) }.map_err(lift)?;
        return ptr::write(
            req,
            request::insert_raw(RawOp(Some(r), None), h)?,
            "request",
        );
    }
    isend_general(buf, count, dt, dst, tag, h, mode, req)
}

/// Non-blocking send, any arguments.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn isend_general(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dst: c_int,
    tag: c_int,
    h: MPI_Comm,
    mode: Mode,
    req: *mut MPI_Request,
) -> Res {
    let c = comm::get(h)?;
    let b = Buf::new(buf, count, dt)?;
    let tag = send_tag(tag)?;
    let d = dest(&c, dst)?;
    if req.is_null() {
        return Err(err(MPI_ERR_ARG, "request is a null pointer"));
    }
    let op = start_send(h, &c, &b, d, tag, mode)?;
    ptr::write(req, request::insert_op(op, h)?, "request")
}

/// Persistent send: the data is read at each start.
#[allow(clippy::too_many_arguments)]
pub fn send_init(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dst: c_int,
    tag: c_int,
    h: MPI_Comm,
    mode: Mode,
    req: *mut MPI_Request,
) -> Res {
    let c = comm::get(h)?;
    Buf::new(buf, count, dt)?;
    let tag = send_tag(tag)?;
    let d = dest(&c, dst)?;
    let addr = buf as usize;
    let starter = move || -> Res<Box<dyn Pending>> {
        let b = Buf::new(addr as *const c_void, count, dt)?;
        start_send(h, &c, &b, d, tag, mode).map(Op::boxed)
    };
    ptr::write(
        req,
        request::insert_persistent(Box::new(starter), h)?,
        "request",
    )
}

/// Blocking receive, any arguments.
#[inline(never)]
fn recv_general(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    src: c_int,
    tag: c_int,
    h: MPI_Comm,
    status: *mut MPI_Status,
) -> Res {
    let c = comm::get(h)?;
    let b = Buf::new(buf, count, dt)?;
    let tag = recv_tag(tag)?;
    let Some(s) = source(&c, src)? else {
        ptr::write_opt(status, proc_null_status());
        return Ok(());
    };
    let st = match b.contiguous() {
        Some((p, len)) => {
            let mut empty = [0u8; 0];
            let dst = if len == 0 {
                &mut empty[..]
            } else {
                ptr::slice_mut(p, len, "buf")?
            };
            c.status(status_of(&c.comm.recv(dst, s, tag)?))
        }
        None => post_recv(&c, b, s, tag)?.wait()?,
    };
    ptr::write_opt(status, st);
    Ok(())
}

fn recv_op(
    c: &CommObj,
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    src: Option<rcomm::Source>,
    tag: rcomm::Tag,
) -> Res<Op> {
    let b = Buf::new(buf, count, dt)?;
    match src {
        None => Ok(Op::Boxed(Box::new(Ready(proc_null_status())))),
        Some(s) => post_recv(c, b, s, tag),
    }
}

/// Non-blocking receive: the common case (as [`recv_entry`]) at once, the rest by
/// [`irecv_general`].
#[inline]
pub fn irecv(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    src: c_int,
    tag: c_int,
    h: MPI_Comm,
    req: *mut MPI_Request,
) -> Res {
    if !req.is_null()
        && let Some((c, p, n)) = fast_args(buf, count, dt, h)
    {
        let from = match src {
            MPI_ANY_SOURCE => Some(rcomm::Source::Any),
            r => u32::try_from(r)
                .ok()
                .filter(|&r| r < c.comm.size())
                .map(rcomm::Source::Rank),
        };
        let tag = match tag {
            MPI_ANY_TAG => Some(rcomm::Tag::Any),
            t if t >= 0 => Some(rcomm::Tag(t)),
            _ => None,
        };
        if let (Some(from), Some(tag)) = (from, tag) {
            // SAFETY: MPI's contract: the program keeps the receive buffer valid and untouched
            // until the request completes.
            let r = unsafe { c.comm.irecv_raw(p.cast_mut(), n, from, tag) }.map_err(lift)?;
            return ptr::write(
                req,
                request::insert_raw(RawOp(Some(r), None), h)?,
                "request",
            );
        }
    }
    irecv_general(buf, count, dt, src, tag, h, req)
}

/// Non-blocking receive, any arguments.
#[inline(never)]
fn irecv_general(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    src: c_int,
    tag: c_int,
    h: MPI_Comm,
    req: *mut MPI_Request,
) -> Res {
    let c = comm::get(h)?;
    let tag = recv_tag(tag)?;
    let s = source(&c, src)?;
    if req.is_null() {
        return Err(err(MPI_ERR_ARG, "request is a null pointer"));
    }
    let op = recv_op(&c, buf, count, dt, s, tag)?;
    ptr::write(req, request::insert_op(op, h)?, "request")
}

/// Persistent receive.
pub fn recv_init(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    src: c_int,
    tag: c_int,
    h: MPI_Comm,
    req: *mut MPI_Request,
) -> Res {
    let c = comm::get(h)?;
    Buf::new(buf, count, dt)?;
    let tag = recv_tag(tag)?;
    let s = source(&c, src)?;
    let addr = buf as usize;
    let starter = move || recv_op(&c, addr as *mut c_void, count, dt, s, tag).map(Op::boxed);
    ptr::write(
        req,
        request::insert_persistent(Box::new(starter), h)?,
        "request",
    )
}

/// Send-receive (blocking, or non-blocking when `req` is given).
#[allow(clippy::too_many_arguments)]
pub fn sendrecv(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    dst: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    src: c_int,
    recvtag: c_int,
    h: MPI_Comm,
    status: *mut MPI_Status,
    req: Option<*mut MPI_Request>,
) -> Res {
    if req.is_none()
        && let Some((c, sp, sn)) = fast_args(sendbuf, sendcount, sendtype, h)
        && let Some((_, rp, rn)) = fast_args(recvbuf, recvcount, recvtype, h)
        && (dst as u32) < c.comm.size()
        && sendtag >= 0
        && (src == MPI_ANY_SOURCE || (src as u32) < c.comm.size())
        && (recvtag == MPI_ANY_TAG || recvtag >= 0)
        // Overlapping buffers are erroneous in MPI; the general path copes without slices.
        && (sn == 0 || rn == 0 || sp as usize + sn <= rp as usize || rp as usize + rn <= sp as usize)
    {
        let from = match src {
            MPI_ANY_SOURCE => rcomm::Source::Any,
            r => rcomm::Source::Rank(r as u32),
        };
        let rtag = match recvtag {
            MPI_ANY_TAG => rcomm::Tag::Any,
            t => rcomm::Tag(t),
        };
        let out: &[u8] = if sn == 0 {
            &[]
        } else {
            // SAFETY: non-null; `sendcount` elements of a one-run type, not overlapping the
            // receive buffer (checked above).
            unsafe { std::slice::from_raw_parts(sp, sn) }
        };
        let into: &mut [u8] = if rn == 0 {
            &mut []
        } else {
            // SAFETY: non-null; room for `recvcount` elements of a one-run type, untouched by
            // the program during the call.
            unsafe { std::slice::from_raw_parts_mut(rp.cast_mut(), rn) }
        };
        let st = c
            .comm
            .sendrecv(out, dst as u32, rcomm::Tag(sendtag), into, from, rtag)
            .map_err(lift)?;
        ptr::write_opt(status, status_of(&st));
        return Ok(());
    }
    let c = comm::get(h)?;
    let sb = Buf::new(sendbuf, sendcount, sendtype)?;
    let stag = send_tag(sendtag)?;
    let d = dest(&c, dst)?;
    let rtag = recv_tag(recvtag)?;
    let s = source(&c, src)?;
    // The receive is posted first, so two ranks exchanging cannot both wait in their sends.
    let r = recv_op(&c, recvbuf, recvcount, recvtype, s, rtag)?;
    let snd = start_send(h, &c, &sb, d, stag, Mode::Standard)?;
    let mut pair = PairOp(snd.boxed(), r.boxed());
    match req {
        Some(out) => ptr::write(out, request::insert(Box::new(pair), h)?, "request"),
        None => {
            ptr::write_opt(status, pair.wait()?);
            Ok(())
        }
    }
}

/// Send-receive in one buffer: the outgoing data is packed before anything arrives.
#[allow(clippy::too_many_arguments)]
pub fn sendrecv_replace(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    dst: c_int,
    sendtag: c_int,
    src: c_int,
    recvtag: c_int,
    h: MPI_Comm,
    status: *mut MPI_Status,
    req: Option<*mut MPI_Request>,
) -> Res {
    let c = comm::get(h)?;
    let b = Buf::new(buf, count, dt)?;
    let stag = send_tag(sendtag)?;
    let d = dest(&c, dst)?;
    let rtag = recv_tag(recvtag)?;
    let s = source(&c, src)?;
    let snd = start_send(h, &c, &b, d, stag, Mode::Standard)?;
    let r = recv_op(&c, buf, count, dt, s, rtag)?;
    let mut pair = PairOp(snd.boxed(), r.boxed());
    match req {
        Some(out) => ptr::write(out, request::insert(Box::new(pair), h)?, "request"),
        None => {
            ptr::write_opt(status, pair.wait()?);
            Ok(())
        }
    }
}

/// Blocking probe.
pub fn probe(src: c_int, tag: c_int, h: MPI_Comm, status: *mut MPI_Status) -> Res {
    let c = comm::get(h)?;
    let tag = recv_tag(tag)?;
    let st = match source(&c, src)? {
        None => proc_null_status(),
        Some(s) => c.status(status_of(&c.comm.probe(s, tag)?)),
    };
    ptr::write_opt(status, st);
    Ok(())
}

/// Non-blocking probe.
pub fn iprobe(
    src: c_int,
    tag: c_int,
    h: MPI_Comm,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> Res {
    let c = comm::get(h)?;
    let tag = recv_tag(tag)?;
    let st = match source(&c, src)? {
        None => Some(proc_null_status()),
        Some(s) => c.comm.iprobe(s, tag)?.map(|s| c.status(status_of(&s))),
    };
    ptr::write(flag, st.is_some() as c_int, "flag")?;
    if let Some(st) = st {
        ptr::write_opt(status, st);
    }
    Ok(())
}

/// A matched message waiting for its receive.
pub type MessageObj = Mutex<Option<rcomm::Message>>;

/// Matched messages.
pub static MESSAGES: Registry<MessageObj> = Registry::new(Kind::Message);

fn keep_message(m: rcomm::Message, out: *mut MPI_Message, status: *mut MPI_Status) -> Res {
    let st = status_of(&m.status());
    let h = MESSAGES
        .insert(Mutex::new(Some(m)))
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many messages"))?;
    ptr::write(out, h, "message")?;
    ptr::write_opt(status, st);
    Ok(())
}

/// Matched probe (blocking, or non-blocking with `flag`).
pub fn mprobe(
    src: c_int,
    tag: c_int,
    h: MPI_Comm,
    flag: Option<*mut c_int>,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> Res {
    let c = comm::get_intra(h, "a matched probe")?;
    let tag = recv_tag(tag)?;
    if message.is_null() {
        return Err(err(MPI_ERR_ARG, "message is a null pointer"));
    }
    let Some(s) = source(&c, src)? else {
        if let Some(f) = flag {
            ptr::write(f, 1, "flag")?;
        }
        ptr::write(message, MPI_MESSAGE_NO_PROC, "message")?;
        ptr::write_opt(status, proc_null_status());
        return Ok(());
    };
    match flag {
        None => keep_message(c.comm.mprobe(s, tag)?, message, status),
        Some(f) => match c.comm.improbe(s, tag)? {
            Some(m) => {
                ptr::write(f, 1, "flag")?;
                keep_message(m, message, status)
            }
            None => ptr::write(f, 0, "flag"),
        },
    }
}

/// Receives a matched message (`MPI_Mrecv`); its status.
pub fn mrecv(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    message: *mut MPI_Message,
) -> Res<MPI_Status> {
    let b = Buf::new(buf, count, dt)?;
    let h = ptr::read(message, "message")?;
    if h == MPI_MESSAGE_NO_PROC {
        ptr::write(message, MPI_MESSAGE_NULL, "message")?;
        return Ok(proc_null_status());
    }
    let m = MESSAGES
        .remove(h)
        .and_then(|m| m.lock().unwrap_or_else(|p| p.into_inner()).take())
        .ok_or_else(|| err(MPI_ERR_REQUEST, format!("{h:#x} is not a matched message")))?;
    ptr::write(message, MPI_MESSAGE_NULL, "message")?;
    if m.status().bytes > b.bytes() {
        // Received and dropped: MPI consumes a truncated message.
        let st = m.status();
        let _ = m.recv_vec::<u8>();
        return Err(err(
            MPI_ERR_TRUNCATE,
            format!(
                "{} bytes arrived for a {}-byte receive",
                st.bytes,
                b.bytes()
            ),
        ));
    }
    let (data, st) = m.recv_vec::<u8>()?;
    b.unpack(&data)?;
    Ok(status_of(&st))
}

/// `MPI_Get_count`: whole elements of `dt` the status' bytes make, else `MPI_UNDEFINED`.
pub fn get_count(status: *const MPI_Status, dt: MPI_Datatype) -> Res<i64> {
    let st = ptr::read(status, "status")?;
    let t = typeobj::get(dt)?;
    let bytes = request::bytes(&st);
    let size = t.size() as u64;
    Ok(match size {
        0 if bytes == 0 => 0,
        0 => MPI_UNDEFINED as i64,
        s if bytes.is_multiple_of(s) => (bytes / s) as i64,
        _ => MPI_UNDEFINED as i64,
    })
}

/// `MPI_Get_elements`: basic elements the status' bytes make.
pub fn get_elements(status: *const MPI_Status, dt: MPI_Datatype) -> Res<i64> {
    let st = ptr::read(status, "status")?;
    let t = typeobj::get(dt)?;
    let bytes = request::bytes(&st);
    match t.basic_size {
        Some(0) => Ok(0),
        Some(b) if bytes.is_multiple_of(b as u64) => Ok((bytes / b as u64) as i64),
        Some(_) => Ok(MPI_UNDEFINED as i64),
        // Mixed types: count whole elements' parts (two per pair type).
        None if t.size() > 0 && bytes.is_multiple_of(t.size() as u64) => {
            Ok((bytes / t.size() as u64 * 2) as i64)
        }
        None => Ok(MPI_UNDEFINED as i64),
    }
}

/// `MPI_Status_set_elements`: sets the byte count `count` elements of `dt` make.
pub fn set_elements(status: *mut MPI_Status, dt: MPI_Datatype, count: i64) -> Res {
    let mut st = ptr::read(status.cast_const(), "status")?;
    let t = typeobj::get(dt)?;
    let n = ptr::count(count)?;
    let per = t.basic_size.unwrap_or(t.size());
    request::set_bytes(&mut st, (n * per) as u64);
    ptr::write(status, st, "status")
}

static ATTACHED: Mutex<Option<(usize, usize)>> = Mutex::new(None);

/// `MPI_Buffer_attach`: rcomm budgets buffered sends by the size (it copies each into memory
/// of its own); the address is kept for detach.
pub fn buffer_attach(buffer: *mut c_void, size: i64) -> Res {
    let n = ptr::count(size)?;
    if buffer.is_null() && n > 0 {
        return Err(err(MPI_ERR_BUFFER, "the buffer is a null pointer"));
    }
    let n = if buffer as usize == 2 {
        usize::MAX / 2
    } else {
        n
    };
    rcomm::buffer_attach(n)?;
    *ATTACHED.lock().unwrap_or_else(|p| p.into_inner()) = Some((buffer as usize, n));
    Ok(())
}

/// `MPI_Buffer_detach`: waits for the buffered sends, then hands back address and size.
pub fn buffer_detach(buffer_addr: *mut c_void) -> Res<i64> {
    let size = rcomm::buffer_detach()?;
    let (addr, _) = ATTACHED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .unwrap_or((0, size));
    ptr::write(buffer_addr.cast::<usize>(), addr, "buffer_addr")?;
    Ok(if addr == 2 { 0 } else { size as i64 })
}

/// `MPI_Buffer_flush`: rcomm delivers the buffered sends when a buffer is detached, so the
/// flush detaches and attaches the same buffer again.
pub fn buffer_flush() -> Res {
    let Some((addr, size)) = *ATTACHED.lock().unwrap_or_else(|p| p.into_inner()) else {
        return Ok(());
    };
    rcomm::buffer_detach()?;
    rcomm::buffer_attach(size)?;
    *ATTACHED.lock().unwrap_or_else(|p| p.into_inner()) = Some((addr, size));
    Ok(())
}
