//! Requests: the object behind an `MPI_Request` and every completion call (`MPI_Wait*`,
//! `MPI_Test*`, `MPI_Request_free`, `MPI_Request_get_status`, `MPI_Start*`, `MPI_Cancel`).
//!
//! A request holds a [`Pending`] operation; point-to-point (`p2p`) and collectives (`coll`)
//! each implement it, so the completion calls work for both without knowing which.

use crate::call::{guard, guard_late};
use crate::consts::*;
use crate::errors::{Res, err};
use crate::handles::{Kind, Registry};
use crate::ptr;
use std::sync::{Arc, Mutex};

/// An operation a request waits for.
pub trait Pending: Send {
    /// Its status when it has completed (and its data has landed), else `None`. Called again
    /// after `None` until it completes.
    fn test(&mut self) -> Res<Option<MPI_Status>>;

    /// Blocks until it completes.
    fn wait(&mut self) -> Res<MPI_Status> {
        loop {
            if let Some(s) = self.test()? {
                return Ok(s);
            }
            std::thread::yield_now();
        }
    }

    /// Tries to cancel it: `true` when it will not happen.
    fn cancel(&mut self) -> Res<bool> {
        Ok(false)
    }
}

/// An operation that has already completed (a receive from `MPI_PROC_NULL`, a send done on
/// the spot).
pub struct Ready(pub MPI_Status);

impl Pending for Ready {
    fn test(&mut self) -> Res<Option<MPI_Status>> {
        Ok(Some(self.0))
    }
}

/// Makes a persistent request's operation at each `MPI_Start`.
pub type Starter = Box<dyn Fn() -> Res<Box<dyn Pending>> + Send + Sync>;

/// A send or receive straight on the caller's contiguous memory, and the intercommunicator
/// it was posted on (whose statuses name remote ranks), if any.
pub struct RawOp(pub Option<rcomm::RawRequest>, pub Option<rcomm::InterComm>);

impl Pending for RawOp {
    fn test(&mut self) -> Res<Option<MPI_Status>> {
        if let Some(r) = &mut self.0
            && !r.test()
        {
            return Ok(None);
        }
        self.wait().map(Some)
    }

    fn wait(&mut self) -> Res<MPI_Status> {
        match self.0.take() {
            Some(r) => {
                let cancelled = r.is_cancelled();
                let st = r.wait()?;
                Ok(if cancelled {
                    empty_status()
                } else {
                    crate::world::remote_status(self.1.as_ref(), status_of(&st))
                })
            }
            None => Ok(empty_status()),
        }
    }

    fn cancel(&mut self) -> Res<bool> {
        match &mut self.0 {
            Some(r) => Ok(r.try_cancel()?),
            None => Ok(false),
        }
    }
}

/// An operation in flight: a send or receive straight on the caller's memory (most requests)
/// held inline, so that starting one allocates only its request; any other boxed.
pub enum Op {
    /// A raw point-to-point operation.
    Raw(RawOp),
    /// Anything else.
    Boxed(Box<dyn Pending>),
}

impl Op {
    /// As a boxed operation (for a pair, or a persistent request's starter).
    pub fn boxed(self) -> Box<dyn Pending> {
        match self {
            Op::Raw(r) => Box::new(r),
            Op::Boxed(b) => b,
        }
    }

    fn test(&mut self) -> Res<Option<MPI_Status>> {
        match self {
            Op::Raw(r) => r.test(),
            Op::Boxed(b) => b.test(),
        }
    }

    /// Blocks until it completes.
    pub fn wait(&mut self) -> Res<MPI_Status> {
        match self {
            Op::Raw(r) => r.wait(),
            Op::Boxed(b) => b.wait(),
        }
    }

    fn cancel(&mut self) -> Res<bool> {
        match self {
            Op::Raw(r) => r.cancel(),
            Op::Boxed(b) => b.cancel(),
        }
    }
}

/// Where a request is in its life.
pub enum State {
    /// Started, not completed.
    Active(Op),
    /// Completed; the result is handed out by the completing call.
    Done(Res<MPI_Status>),
    /// A persistent request between completion and the next start.
    Inactive,
}

/// What an `MPI_Request` names.
pub struct RequestObj {
    /// Its state.
    pub state: Mutex<State>,
    /// For persistent requests: makes the operation at each start.
    pub starter: Option<Starter>,
    /// The communicator whose error handler reports its errors.
    pub comm: MPI_Comm,
}

/// Live requests.
pub static REQUESTS: Registry<RequestObj> = Registry::new(Kind::Request);

/// Registers an active request for `op`; its handle.
pub fn insert(op: Box<dyn Pending>, comm: MPI_Comm) -> Res<MPI_Request> {
    insert_op(Op::Boxed(op), comm)
}

/// Registers an active request for a raw send or receive; its handle.
pub fn insert_raw(op: RawOp, comm: MPI_Comm) -> Res<MPI_Request> {
    insert_op(Op::Raw(op), comm)
}

/// Registers an active request for `op`; its handle.
pub fn insert_op(op: Op, comm: MPI_Comm) -> Res<MPI_Request> {
    let fresh = RequestObj {
        state: Mutex::new(State::Active(op)),
        starter: None,
        comm,
    };
    let spare = SPARE.lock().unwrap_or_else(|p| p.into_inner()).pop();
    let obj = match spare {
        Some(mut a) => {
            if let Some(slot) = Arc::get_mut(&mut a) {
                *slot = fresh;
                a
            } else {
                Arc::new(fresh)
            }
        }
        None => Arc::new(fresh),
    };
    REQUESTS
        .insert_arc(obj)
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many requests"))
}

/// Request objects kept for reuse, at most [`SPARE_MAX`]: a window of non-blocking calls
/// would otherwise allocate and free one per message, which cost more instructions than the
/// rest of the C layer's `MPI_Isend` + `MPI_Wait`.
static SPARE: Mutex<Vec<Arc<RequestObj>>> = Mutex::new(Vec::new());
const SPARE_MAX: usize = 64;

/// Keeps a freed request's object for the next one, when nothing else holds it.
fn recycle(mut r: Arc<RequestObj>) {
    if let Some(obj) = Arc::get_mut(&mut r) {
        // Nothing of the old request lives on in the spare (a starter could hold buffers).
        *obj.state.get_mut().unwrap_or_else(|p| p.into_inner()) = State::Inactive;
        obj.starter = None;
        let mut spare = SPARE.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < SPARE_MAX {
            spare.push(r);
        }
    }
}

/// Registers an inactive persistent request.
pub fn insert_persistent(starter: Starter, comm: MPI_Comm) -> Res<MPI_Request> {
    REQUESTS
        .insert(RequestObj {
            state: Mutex::new(State::Inactive),
            starter: Some(starter),
            comm,
        })
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many requests"))
}

/// The status of an empty or null request: any source, any tag, no data.
pub fn empty_status() -> MPI_Status {
    MPI_Status {
        MPI_SOURCE: MPI_ANY_SOURCE,
        MPI_TAG: MPI_ANY_TAG,
        MPI_ERROR: MPI_SUCCESS,
        MPI_internal: [0; 5],
    }
}

/// A status from rcomm's.
pub fn status_of(s: &rcomm::Status) -> MPI_Status {
    let mut st = empty_status();
    st.MPI_SOURCE = s.source as c_int;
    st.MPI_TAG = s.tag;
    set_bytes(&mut st, s.bytes as u64);
    st
}

/// Stores a byte count in a status' private words.
pub fn set_bytes(st: &mut MPI_Status, bytes: u64) {
    st.MPI_internal[0] = bytes as u32 as c_int;
    st.MPI_internal[1] = (bytes >> 32) as u32 as c_int;
}

/// The byte count a status carries.
pub fn bytes(st: &MPI_Status) -> u64 {
    (st.MPI_internal[0] as u32 as u64) | ((st.MPI_internal[1] as u32 as u64) << 32)
}

/// Whether a status says its operation was cancelled.
pub fn cancelled(st: &MPI_Status) -> bool {
    st.MPI_internal[2] != 0
}

fn lock(r: &RequestObj) -> std::sync::MutexGuard<'_, State> {
    r.state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Moves an active request to done when it has completed; whether it is done (inactive
/// persistent requests count as done, with an empty status).
fn poll(r: &RequestObj) -> bool {
    let mut s = lock(r);
    match &mut *s {
        State::Active(p) => match p.test() {
            Ok(None) => false,
            Ok(Some(st)) => {
                *s = State::Done(Ok(st));
                true
            }
            Err(e) => {
                *s = State::Done(Err(e));
                true
            }
        },
        _ => true,
    }
}

/// Blocks until the request is done.
fn block(r: &RequestObj) {
    let mut s = lock(r);
    if let State::Active(p) = &mut *s {
        let res = p.wait();
        *s = State::Done(res);
    }
}

/// Hands out a done request's result: frees it (handle set to null) or, persistent, makes
/// it inactive.
fn finish(h: &mut MPI_Request) -> Res<MPI_Status> {
    match REQUESTS.get(*h) {
        Some(r) => {
            let res = finish_with(h, &r);
            if *h == MPI_REQUEST_NULL {
                recycle(r);
            }
            res
        }
        None => Ok(empty_status()),
    }
}

/// [`finish`] for the request `r` that `h` names, already looked up.
fn finish_with(h: &mut MPI_Request, r: &RequestObj) -> Res<MPI_Status> {
    let taken = std::mem::replace(&mut *lock(r), State::Inactive);
    let res = match taken {
        State::Done(res) => res,
        State::Inactive => Ok(empty_status()),
        State::Active(p) => {
            *lock(r) = State::Active(p);
            return Err(err(MPI_ERR_INTERN, "finish on an active request"));
        }
    };
    if r.starter.is_none() {
        REQUESTS.remove(*h);
        *h = MPI_REQUEST_NULL;
    }
    res
}

/// The live request `h` names (null: `None`).
fn lookup(h: MPI_Request) -> Res<Option<Arc<RequestObj>>> {
    if h == MPI_REQUEST_NULL {
        return Ok(None);
    }
    REQUESTS
        .get(h)
        .map(Some)
        .ok_or_else(|| err(MPI_ERR_REQUEST, format!("{h:#x} is not a live request")))
}

fn comm_of(h: MPI_Request) -> Option<MPI_Comm> {
    REQUESTS.get(h).map(|r| r.comm)
}

fn put_status(p: *mut MPI_Status, st: MPI_Status) {
    ptr::write_opt(p, st);
}

/// `MPI_Wait`: one lookup and one lock of the request; `comm` learns whose handler reports
/// an error (the request may be gone by then).
fn wait_one(req: *mut MPI_Request, status: *mut MPI_Status, comm: &mut Option<MPI_Comm>) -> Res {
    let mut h = ptr::read(req, "request")?;
    let Some(r) = lookup(h)? else {
        put_status(status, empty_status());
        return Ok(());
    };
    *comm = Some(r.comm);
    let res = {
        let mut s = lock(&r);
        match std::mem::replace(&mut *s, State::Inactive) {
            State::Active(mut p) => p.wait(),
            State::Done(res) => res,
            State::Inactive => Ok(empty_status()),
        }
    };
    if r.starter.is_none() {
        drop(REQUESTS.remove(h));
        h = MPI_REQUEST_NULL;
        recycle(r);
    }
    ptr::write(req, h, "request")?;
    put_status(status, res?);
    Ok(())
}

/// `MPI_Test`, as [`wait_one`].
fn test_one(
    req: *mut MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
    comm: &mut Option<MPI_Comm>,
) -> Res {
    let mut h = ptr::read(req, "request")?;
    let done = match lookup(h)? {
        Some(r) => {
            *comm = Some(r.comm);
            let done = poll(&r);
            ptr::write(flag, done as c_int, "flag")?;
            if done {
                let st = finish_with(&mut h, &r);
                if h == MPI_REQUEST_NULL {
                    recycle(r);
                }
                ptr::write(req, h, "request")?;
                put_status(status, st?);
            }
            return Ok(());
        }
        None => true,
    };
    ptr::write(flag, done as c_int, "flag")?;
    put_status(status, empty_status());
    Ok(())
}

/// Handles of an array argument, checked.
fn handles(reqs: *mut MPI_Request, n: c_int) -> Res<&'static mut [MPI_Request]> {
    let n = ptr::count(n as i64)?;
    ptr::slice_mut(reqs, n, "array_of_requests")
}

fn statuses(p: *mut MPI_Status, n: usize) -> Res<Option<&'static mut [MPI_Status]>> {
    if p.is_null() {
        return Ok(None);
    }
    ptr::slice_mut(p, n, "array_of_statuses").map(Some)
}

/// Completes every done-or-null request of `hs` at the indices given, filling statuses;
/// `MPI_ERR_IN_STATUS` when one failed and statuses are wanted.
fn finish_many(
    hs: &mut [MPI_Request],
    idx: &[usize],
    sts: &mut Option<&mut [MPI_Status]>,
    out_pos: bool,
) -> Res {
    let mut failed = None;
    for (k, &i) in idx.iter().enumerate() {
        let res = finish(&mut hs[i]);
        let st = match res {
            Ok(st) => st,
            Err(e) => {
                let mut st = empty_status();
                st.MPI_ERROR = e.code;
                failed.get_or_insert(e);
                st
            }
        };
        if let Some(s) = sts.as_deref_mut() {
            s[if out_pos { k } else { i }] = st;
        }
    }
    match failed {
        None => Ok(()),
        Some(e) if sts.is_some() => Err(err(MPI_ERR_IN_STATUS, e.msg)),
        Some(e) => Err(e),
    }
}

fn active(h: MPI_Request) -> Res<Option<Arc<RequestObj>>> {
    let Some(r) = lookup(h)? else { return Ok(None) };
    if r.starter.is_some() && matches!(*lock(&r), State::Inactive) {
        return Ok(None);
    }
    Ok(Some(r))
}

fn any(
    hs: &mut [MPI_Request],
    index: *mut c_int,
    flag: Option<*mut c_int>,
    status: *mut MPI_Status,
) -> Res {
    loop {
        let mut live = false;
        for (i, h) in hs.iter_mut().enumerate() {
            let Some(r) = active(*h)? else { continue };
            live = true;
            if poll(&r) {
                if let Some(f) = flag {
                    ptr::write(f, 1, "flag")?;
                }
                ptr::write(index, i as c_int, "index")?;
                let st = finish(h)?;
                put_status(status, st);
                return Ok(());
            }
        }
        if !live {
            if let Some(f) = flag {
                ptr::write(f, 1, "flag")?;
            }
            ptr::write(index, MPI_UNDEFINED, "index")?;
            put_status(status, empty_status());
            return Ok(());
        }
        if let Some(f) = flag {
            ptr::write(index, MPI_UNDEFINED, "index")?;
            return ptr::write(f, 0, "flag");
        }
        std::thread::yield_now();
    }
}

fn some(
    hs: &mut [MPI_Request],
    outcount: *mut c_int,
    indices: *mut c_int,
    sts: *mut MPI_Status,
    block: bool,
) -> Res {
    loop {
        let mut live = false;
        let mut done = Vec::new();
        for (i, h) in hs.iter().enumerate() {
            let Some(r) = active(*h)? else { continue };
            live = true;
            if poll(&r) {
                done.push(i);
            }
        }
        if !live {
            return ptr::write(outcount, MPI_UNDEFINED, "outcount");
        }
        if !done.is_empty() || !block {
            ptr::write(outcount, done.len() as c_int, "outcount")?;
            let idx = ptr::slice_mut(indices, done.len(), "array_of_indices")?;
            for (k, &i) in done.iter().enumerate() {
                idx[k] = i as c_int;
            }
            let mut s = statuses(sts, done.len())?;
            return finish_many(hs, &done, &mut s, true);
        }
        std::thread::yield_now();
    }
}

/// `MPI_Wait`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Wait(request: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
    guard_late("MPI_Wait", |c| wait_one(request, status, c))
}

/// `MPI_Test`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Test(
    request: *mut MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    guard_late("MPI_Test", |c| test_one(request, flag, status, c))
}

/// `MPI_Waitall`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Waitall(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    guard("MPI_Waitall", None, || {
        let hs = handles(array_of_requests, count)?;
        for h in hs.iter() {
            if let Some(r) = lookup(*h)? {
                block(&r);
            }
        }
        let idx: Vec<usize> = (0..hs.len()).collect();
        let mut s = statuses(array_of_statuses, hs.len())?;
        finish_many(hs, &idx, &mut s, false)
    })
}

/// `MPI_Testall`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Testall(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    flag: *mut c_int,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    guard("MPI_Testall", None, || {
        let hs = handles(array_of_requests, count)?;
        let mut all = true;
        for h in hs.iter() {
            if let Some(r) = lookup(*h)? {
                all &= poll(&r);
            }
        }
        ptr::write(flag, all as c_int, "flag")?;
        if !all {
            return Ok(());
        }
        let idx: Vec<usize> = (0..hs.len()).collect();
        let mut s = statuses(array_of_statuses, hs.len())?;
        finish_many(hs, &idx, &mut s, false)
    })
}

/// `MPI_Waitany`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Waitany(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Waitany", None, || {
        any(handles(array_of_requests, count)?, index, None, status)
    })
}

/// `MPI_Testany`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Testany(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Testany", None, || {
        any(
            handles(array_of_requests, count)?,
            index,
            Some(flag),
            status,
        )
    })
}

/// `MPI_Waitsome`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Waitsome(
    incount: c_int,
    array_of_requests: *mut MPI_Request,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    guard("MPI_Waitsome", None, || {
        let hs = handles(array_of_requests, incount)?;
        some(hs, outcount, array_of_indices, array_of_statuses, true)
    })
}

/// `MPI_Testsome`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Testsome(
    incount: c_int,
    array_of_requests: *mut MPI_Request,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    guard("MPI_Testsome", None, || {
        let hs = handles(array_of_requests, incount)?;
        some(hs, outcount, array_of_indices, array_of_statuses, false)
    })
}

/// `MPI_Request_free`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Request_free(request: *mut MPI_Request) -> c_int {
    let c = ptr::read(request, "request").ok().and_then(comm_of);
    guard("MPI_Request_free", c, || {
        let h = ptr::read(request, "request")?;
        if lookup(h)?.is_none() {
            return Err(err(MPI_ERR_REQUEST, "MPI_REQUEST_NULL cannot be freed"));
        }
        // The operation goes on: rcomm completes a dropped send before its buffer goes.
        REQUESTS.remove(h);
        ptr::write(request, MPI_REQUEST_NULL, "request")
    })
}

/// `MPI_Request_get_status`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Request_get_status(
    request: MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Request_get_status", comm_of(request), || {
        let Some(r) = lookup(request)? else {
            ptr::write(flag, 1, "flag")?;
            put_status(status, empty_status());
            return Ok(());
        };
        let done = poll(&r);
        ptr::write(flag, done as c_int, "flag")?;
        if done {
            let st = match &*lock(&r) {
                State::Done(Ok(st)) => *st,
                State::Done(Err(e)) => return Err(e.clone()),
                _ => empty_status(),
            };
            put_status(status, st);
        }
        Ok(())
    })
}

fn start(h: MPI_Request) -> Res {
    let r = lookup(h)?.ok_or_else(|| err(MPI_ERR_REQUEST, "MPI_REQUEST_NULL cannot be started"))?;
    let Some(starter) = &r.starter else {
        return Err(err(MPI_ERR_REQUEST, "not a persistent request"));
    };
    let mut s = lock(&r);
    if !matches!(*s, State::Inactive) {
        return Err(err(
            MPI_ERR_REQUEST,
            "the persistent request is already active",
        ));
    }
    *s = State::Active(Op::Boxed(starter()?));
    Ok(())
}

/// `MPI_Start`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Start(request: *mut MPI_Request) -> c_int {
    let c = ptr::read(request, "request").ok().and_then(comm_of);
    guard("MPI_Start", c, || start(ptr::read(request, "request")?))
}

/// `MPI_Startall`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Startall(count: c_int, array_of_requests: *mut MPI_Request) -> c_int {
    guard("MPI_Startall", None, || {
        handles(array_of_requests, count)?
            .iter()
            .try_for_each(|h| start(*h))
    })
}

/// `MPI_Cancel`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Cancel(request: *mut MPI_Request) -> c_int {
    let c = ptr::read(request, "request").ok().and_then(comm_of);
    guard("MPI_Cancel", c, || {
        let h = ptr::read(request, "request")?;
        let r = lookup(h)?
            .ok_or_else(|| err(MPI_ERR_REQUEST, "MPI_REQUEST_NULL cannot be cancelled"))?;
        let mut s = lock(&r);
        if let State::Active(p) = &mut *s
            && p.cancel()?
        {
            let mut st = empty_status();
            st.MPI_internal[2] = 1;
            *s = State::Done(Ok(st));
        }
        Ok(())
    })
}

/// `MPI_Test_cancelled`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Test_cancelled(status: *const MPI_Status, flag: *mut c_int) -> c_int {
    guard("MPI_Test_cancelled", None, || {
        let st = ptr::read(status, "status")?;
        ptr::write(flag, cancelled(&st) as c_int, "flag")
    })
}

/// The status of a done request without freeing it (`MPI_Request_get_status*`); `None`
/// while it runs. Null and inactive requests are done with an empty status.
fn peek(h: MPI_Request) -> Res<Option<MPI_Status>> {
    let Some(r) = lookup(h)? else {
        return Ok(Some(empty_status()));
    };
    if !poll(&r) {
        return Ok(None);
    }
    match &*lock(&r) {
        State::Done(Ok(st)) => Ok(Some(*st)),
        State::Done(Err(e)) => Err(e.clone()),
        _ => Ok(Some(empty_status())),
    }
}

fn const_handles(reqs: *const MPI_Request, n: c_int) -> Res<&'static [MPI_Request]> {
    let n = ptr::count(n as i64)?;
    ptr::slice(reqs, n, "array_of_requests")
}

/// `MPI_Request_get_status_all`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Request_get_status_all(
    count: c_int,
    array_of_requests: *const MPI_Request,
    flag: *mut c_int,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    guard("MPI_Request_get_status_all", None, || {
        let hs = const_handles(array_of_requests, count)?;
        let mut all = Vec::with_capacity(hs.len());
        for h in hs {
            match peek(*h)? {
                Some(st) => all.push(st),
                None => return ptr::write(flag, 0, "flag"),
            }
        }
        ptr::write(flag, 1, "flag")?;
        if let Some(s) = statuses(array_of_statuses, hs.len())? {
            s.copy_from_slice(&all);
        }
        Ok(())
    })
}

/// `MPI_Request_get_status_any`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Request_get_status_any(
    count: c_int,
    array_of_requests: *const MPI_Request,
    indx: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    guard("MPI_Request_get_status_any", None, || {
        let hs = const_handles(array_of_requests, count)?;
        let mut live = false;
        for (i, h) in hs.iter().enumerate() {
            if active(*h)?.is_none() {
                continue;
            }
            live = true;
            if let Some(st) = peek(*h)? {
                ptr::write(indx, i as c_int, "indx")?;
                ptr::write(flag, 1, "flag")?;
                put_status(status, st);
                return Ok(());
            }
        }
        ptr::write(indx, MPI_UNDEFINED, "indx")?;
        ptr::write(flag, (!live) as c_int, "flag")?;
        if !live {
            put_status(status, empty_status());
        }
        Ok(())
    })
}

/// `MPI_Request_get_status_some`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Request_get_status_some(
    incount: c_int,
    array_of_requests: *const MPI_Request,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    guard("MPI_Request_get_status_some", None, || {
        let hs = const_handles(array_of_requests, incount)?;
        let mut live = false;
        let mut done = Vec::new();
        for (i, h) in hs.iter().enumerate() {
            if active(*h)?.is_none() {
                continue;
            }
            live = true;
            if let Some(st) = peek(*h)? {
                done.push((i, st));
            }
        }
        if !live {
            return ptr::write(outcount, MPI_UNDEFINED, "outcount");
        }
        ptr::write(outcount, done.len() as c_int, "outcount")?;
        let idx = ptr::slice_mut(array_of_indices, done.len(), "array_of_indices")?;
        let mut sts = statuses(array_of_statuses, done.len())?;
        for (k, (i, st)) in done.into_iter().enumerate() {
            idx[k] = i as c_int;
            if let Some(s) = sts.as_deref_mut() {
                s[k] = st;
            }
        }
        Ok(())
    })
}
