//! Communicators and their operations. An operation is a list of tasks run in two phases:
//! *post* sends this rank's part of each (contributions, point-to-point bytes) without
//! waiting, *complete* waits for each result and writes it. A grouped send and receive
//! between two ranks cannot deadlock, since both post before either waits. On a null stream
//! both phases run on the calling thread; on a stream they run in one host function queued
//! with the stream's `launch_host_func`, so the call returns at once.

use crate::abi::{self, Fail, StreamAbi};
use crate::conn::{Conn, Reply};
use crate::fault::{self, Action};
use crate::live::{self, Count};
use crate::wire::{Kind, Msg, OpHdr};
use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Orders error texts, so `ncclGetLastError` gives the newest of the thread's and the
/// communicator's.
static ERR_SEQ: AtomicU64 = AtomicU64::new(1);

fn cstring(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}

thread_local! {
    static LAST: RefCell<(u64, CString)> = RefCell::new((0, CString::default()));
}

/// Records `text` as this thread's last error.
pub fn set_last(text: &str) {
    let seq = ERR_SEQ.fetch_add(1, Ordering::Relaxed);
    LAST.with(|l| *l.borrow_mut() = (seq, cstring(text)));
}

/// This thread's last error (valid until its next failing call).
pub fn last() -> (u64, *const c_char) {
    LAST.with(|l| {
        let l = l.borrow();
        (l.0, l.1.as_ptr())
    })
}

/// A communicator's first asynchronous error text, kept (never replaced) so the pointer
/// `ncclGetLastError` gave stays valid while the communicator lives.
#[derive(Default)]
pub struct ErrSlot(Mutex<Option<(u64, CString)>>);

impl ErrSlot {
    /// Keeps `text` unless a text is kept already.
    pub fn set(&self, text: &str) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if s.is_none() {
            *s = Some((ERR_SEQ.fetch_add(1, Ordering::Relaxed), cstring(text)));
        }
    }
    /// The kept text.
    pub fn get(&self) -> Option<(u64, *const c_char)> {
        let s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        s.as_ref().map(|(n, t)| (*n, t.as_ptr()))
    }
}

/// A ready communicator. Queued operations hold it, so it (and its connection) outlives
/// `ncclCommDestroy` until they ran.
pub struct Comm {
    pub id: u64,
    pub rank: u32,
    pub nranks: u32,
    pub conn: Arc<Conn>,
    seq: AtomicU64,
    pub err: Arc<ErrSlot>,
    /// The first failure of an operation run on a stream (0: none).
    async_code: AtomicI32,
    left: AtomicBool,
    _count: Count,
}

impl Comm {
    /// Communicator `id` in which this rank is `rank`; `members` are its ranks as ranks of the
    /// first communicator.
    pub fn new(id: u64, rank: u32, members: Vec<u32>, conn: Arc<Conn>, err: Arc<ErrSlot>) -> Comm {
        let nranks = members.len() as u32;
        conn.sh.lock().boxes.entry(id).or_default().members = members;
        Comm {
            id,
            rank,
            nranks,
            conn,
            seq: AtomicU64::new(0),
            err,
            async_code: AtomicI32::new(0),
            left: AtomicBool::new(false),
            _count: Count::new(&live::COMMS),
        }
    }

    /// The next operation's number (every rank numbers its operations alike).
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst)
    }

    /// Tells the hub this rank is done with the communicator: its connection closing is no
    /// failure of the others any more.
    pub fn leave(&self) {
        if !self.left.swap(true, Ordering::SeqCst) {
            let _ = self.conn.send(&Msg::Leave { comm: self.id });
        }
    }

    /// Ends every wait of this communicator's operations.
    pub fn abort(&self) {
        self.conn
            .sh
            .lock()
            .boxes
            .entry(self.id)
            .or_default()
            .aborted = true;
        self.conn.sh.notify();
    }

    /// Sends `m` to the hub; if that fails, the reason the connection's reader gives once it
    /// sees the close (a named peer or the hub's process), else the write's error.
    pub fn send(&self, m: &Msg) -> Result<(), Fail> {
        let Err(e) = self.conn.send(m) else {
            return Ok(());
        };
        let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let id = self.id;
        let why = self.conn.sh.wait(
            |st| {
                st.broken(id)
                    .or_else(|| (std::time::Instant::now() > end).then(|| e.clone()))
            },
            |_| None,
        );
        Err(why.unwrap_or(e))
    }

    /// Why the communicator cannot go on, if it cannot.
    pub fn broken(&self) -> Option<Fail> {
        self.conn.sh.lock().broken(self.id)
    }

    /// Keeps `f` as this communicator's asynchronous error.
    pub fn note(&self, f: &Fail) {
        self.err.set(&f.text);
        let _ = self
            .async_code
            .compare_exchange(0, f.code, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// `ncclCommGetAsyncError`'s answer.
    pub fn async_error(&self) -> c_int {
        let c = self.async_code.load(Ordering::SeqCst);
        if c != abi::SUCCESS {
            return c;
        }
        match self.broken() {
            Some(f) if f.code == abi::REMOTE => {
                self.note(&f);
                f.code
            }
            _ => abi::SUCCESS,
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        self.leave();
        self.conn.sh.lock().boxes.remove(&self.id);
    }
}

/// One call's work; buffers are addresses in this process.
#[derive(Clone, Copy, Debug)]
pub enum Task {
    /// A collective: `send_bytes` read at `send`, `recv_bytes` written at `recv`.
    Coll {
        hdr: OpHdr,
        send: usize,
        recv: usize,
        send_bytes: usize,
        recv_bytes: usize,
        seq: u64,
    },
    /// `ncclSend`.
    Send { peer: u32, buf: usize, bytes: usize },
    /// `ncclRecv`.
    Recv { peer: u32, buf: usize, bytes: usize },
}

fn bytes_of(count: usize, n: usize, es: usize, call: &str) -> Result<usize, Fail> {
    count
        .checked_mul(n)
        .and_then(|c| c.checked_mul(es))
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Fail::invalid(format!("{call}: count {count} is too large")))
}

fn need(p: usize, bytes: usize, what: &str, call: &str) -> Result<(), Fail> {
    if p == 0 && bytes > 0 {
        return Err(Fail::invalid(format!(
            "{call}: {what} is null but {bytes} bytes are to be {}",
            if what == "sendbuff" {
                "read"
            } else {
                "written"
            }
        )));
    }
    Ok(())
}

impl Task {
    /// A collective's task, its arguments checked.
    #[allow(clippy::too_many_arguments)]
    pub fn coll(
        comm: &Comm,
        kind: Kind,
        send: usize,
        recv: usize,
        count: usize,
        dtype: c_int,
        op: c_int,
        root: c_int,
    ) -> Result<Task, Fail> {
        let call = kind.name();
        let es = abi::dtype(dtype)
            .map_err(|f| Fail::invalid(format!("{call}: {}", f.text)))?
            .size();
        if matches!(kind, Kind::AllReduce | Kind::Reduce | Kind::ReduceScatter) {
            abi::red_op(op).map_err(|f| Fail::invalid(format!("{call}: {}", f.text)))?;
        }
        let n = comm.nranks as usize;
        let rooted = matches!(kind, Kind::Broadcast | Kind::Reduce);
        if rooted && (root < 0 || root as u32 >= comm.nranks) {
            return Err(Fail::invalid(format!(
                "{call}: root {root} of a communicator of {n} ranks"
            )));
        }
        let is_root = rooted && root as u32 == comm.rank;
        let one = bytes_of(count, 1, es, call)?;
        let all = bytes_of(count, n, es, call)?;
        let (send_bytes, recv_bytes) = match kind {
            Kind::AllReduce => (one, one),
            Kind::Broadcast => (if is_root { one } else { 0 }, one),
            Kind::Reduce => (one, if is_root { one } else { 0 }),
            Kind::AllGather => (one, all),
            Kind::ReduceScatter => (all, one),
            Kind::Split => unreachable!("a split is no task"),
        };
        need(send, send_bytes, "sendbuff", call)?;
        need(recv, recv_bytes, "recvbuff", call)?;
        Ok(Task::Coll {
            hdr: OpHdr {
                kind,
                dtype,
                op: if rooted && kind == Kind::Broadcast {
                    0
                } else {
                    op
                },
                root: if rooted { root } else { 0 },
                count: count as u64,
                color: 0,
                key: 0,
            },
            send,
            recv,
            send_bytes,
            recv_bytes,
            seq: 0,
        })
    }

    /// `ncclSend` (`recv` false) or `ncclRecv`'s task, its arguments checked.
    pub fn p2p(
        comm: &Comm,
        recv: bool,
        buf: usize,
        count: usize,
        dtype: c_int,
        peer: c_int,
    ) -> Result<Task, Fail> {
        let call = if recv { "ncclRecv" } else { "ncclSend" };
        let es = abi::dtype(dtype)
            .map_err(|f| Fail::invalid(format!("{call}: {}", f.text)))?
            .size();
        if peer < 0 || peer as u32 >= comm.nranks {
            return Err(Fail::invalid(format!(
                "{call}: peer {peer} of a communicator of {} ranks",
                comm.nranks
            )));
        }
        let bytes = bytes_of(count, 1, es, call)?;
        need(buf, bytes, if recv { "recvbuff" } else { "sendbuff" }, call)?;
        let peer = peer as u32;
        Ok(if recv {
            Task::Recv { peer, buf, bytes }
        } else {
            Task::Send { peer, buf, bytes }
        })
    }
}

/// `bytes` at `p`, copied.
///
/// # Safety
/// `p` is readable for `bytes` (or `bytes` is 0).
unsafe fn read(p: usize, bytes: usize) -> Vec<u8> {
    if bytes == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p as *const u8, bytes) }.to_vec()
}

/// Writes `data`, which must be `bytes` long, at `p`.
///
/// # Safety
/// `p` is writable for `bytes`.
unsafe fn write(p: usize, data: &[u8], bytes: usize, what: &str) -> Result<(), Fail> {
    if data.len() != bytes {
        return Err(Fail::usage(format!(
            "{what}: {} bytes arrived for a buffer of {bytes}",
            data.len()
        )));
    }
    if bytes > 0 {
        // SAFETY: the caller's contract; `data` is our own buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p as *mut u8, bytes) };
    }
    Ok(())
}

/// Phase one: sends this rank's part of every task.
///
/// # Safety
/// The tasks' buffers are valid as their calls' contracts say.
unsafe fn post(comm: &Comm, tasks: &[Task]) -> Result<(), Fail> {
    for t in tasks {
        if let Some(f) = comm.broken() {
            return Err(f);
        }
        match *t {
            Task::Coll {
                hdr,
                send,
                send_bytes,
                seq,
                ..
            } => {
                match fault::next_collective() {
                    Action::Go => {}
                    // SAFETY: ends the process at once, as the injected fault asks.
                    Action::Exit => unsafe { libc::_exit(137) },
                    Action::Hang => {
                        let id = comm.id;
                        return comm.conn.sh.wait(
                            |_| None::<()>,
                            |st| {
                                st.boxes
                                    .get(&id)
                                    .filter(|b| b.aborted)
                                    .map(|_| Fail::usage(format!("communicator {id} was aborted")))
                            },
                        );
                    }
                }
                // SAFETY: the caller's contract.
                let data = unsafe { read(send, send_bytes) };
                comm.send(&Msg::Op {
                    comm: comm.id,
                    seq,
                    hdr,
                    data,
                })?;
            }
            Task::Send { peer, buf, bytes } => {
                // SAFETY: the caller's contract.
                let data = unsafe { read(buf, bytes) };
                comm.send(&Msg::P2p {
                    comm: comm.id,
                    dst: peer,
                    data,
                })?;
            }
            Task::Recv { .. } => {}
        }
    }
    Ok(())
}

/// Phase two: waits for every task's result and writes it.
///
/// # Safety
/// As [`post`].
unsafe fn complete(comm: &Comm, tasks: &[Task]) -> Result<(), Fail> {
    let id = comm.id;
    let sh = &comm.conn.sh;
    for t in tasks {
        match *t {
            Task::Coll {
                hdr,
                send,
                recv,
                send_bytes,
                recv_bytes,
                seq,
            } => {
                let reply = sh.wait(
                    |st| st.boxes.get_mut(&id)?.results.remove(&seq),
                    |st| st.broken(id),
                )?;
                let Reply::Data(data) = reply else {
                    return Err(Fail::internal(format!(
                        "{} #{seq}: the hub answered with a split",
                        hdr.kind.name()
                    )));
                };
                let what = hdr.kind.name();
                if hdr.kind == Kind::Broadcast && hdr.root as u32 == comm.rank {
                    if send != recv && send_bytes > 0 {
                        // SAFETY: the caller's contract: both hold `send_bytes` (may overlap).
                        unsafe { std::ptr::copy(send as *const u8, recv as *mut u8, send_bytes) };
                    }
                } else if recv_bytes > 0 || !data.is_empty() {
                    // SAFETY: the caller's contract.
                    unsafe { write(recv, &data, recv_bytes, what) }?;
                }
            }
            Task::Recv { peer, buf, bytes } => {
                let data = sh.wait(
                    |st| st.boxes.get_mut(&id)?.p2p.get_mut(&peer)?.pop_front(),
                    |st| st.broken(id),
                )?;
                // SAFETY: the caller's contract.
                unsafe { write(buf, &data, bytes, &format!("ncclRecv from rank {peer}")) }?;
            }
            Task::Send { .. } => {}
        }
    }
    Ok(())
}

/// Checks a `cudaStream_t`: null, or a [`StreamAbi`] (its address, 0 for null).
///
/// # Safety
/// A non-null `s` points at at least 8 readable bytes.
pub unsafe fn check_stream(s: *mut c_void) -> Result<usize, Fail> {
    if s.is_null() {
        return Ok(0);
    }
    // SAFETY: the caller's contract.
    let magic = unsafe { (s as *const u64).read_unaligned() };
    if magic != abi::STREAM_MAGIC {
        return Err(Fail::invalid(format!(
            "cudaStream_t {s:p} starts with {magic:#018x}; expected the stand-in's stream \
             header (nccl::StreamAbi), whose first word is {:#018x} (\"rcommstr\" as a \
             little-endian u64)",
            abi::STREAM_MAGIC
        )));
    }
    Ok(s as usize)
}

struct Job {
    comm: Arc<Comm>,
    tasks: Vec<Task>,
}

unsafe extern "C" fn host_fn(arg: *mut c_void) {
    // SAFETY: `arg` is the box `launch` leaked, given to exactly one call of this function.
    let job = unsafe { Box::from_raw(arg.cast::<Job>()) };
    // A panic must not unwind into the stream owner's C frames.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the calls' contracts hold until the stream reaches this function.
        unsafe { post(&job.comm, &job.tasks).and_then(|()| complete(&job.comm, &job.tasks)) }
    }));
    let r = r.unwrap_or_else(|_| Err(Fail::internal("a panic in the stand-in's host function")));
    if let Err(f) = r {
        job.comm.note(&f);
    }
}

fn launch(comm: Arc<Comm>, stream: usize, tasks: Vec<Task>) -> Result<(), Fail> {
    let s = stream as *mut c_void;
    // SAFETY: `check_stream` saw the header's magic at `s`.
    let f = unsafe { (*s.cast::<StreamAbi>()).launch_host_func };
    let job = Box::into_raw(Box::new(Job {
        comm: comm.clone(),
        tasks,
    }));
    // SAFETY: the stream's own function, called as its contract says.
    let rc = unsafe { f(s, host_fn, job.cast()) };
    if rc != 0 {
        // SAFETY: not queued, so still ours.
        drop(unsafe { Box::from_raw(job) });
        let f = Fail::new(
            abi::UNHANDLED_CUDA,
            format!("the stream's launch_host_func refused the operation (it returned {rc})"),
        );
        comm.note(&f);
        return Err(f);
    }
    Ok(())
}

/// Queues each `(communicator, stream, tasks)`: numbers the collectives, queues one host
/// function per stream bucket, and runs the null-stream buckets here (all posts first).
///
/// # Safety
/// The tasks' buffers are valid as their calls' contracts say, until the work ran.
pub unsafe fn submit(buckets: Vec<(Arc<Comm>, usize, Vec<Task>)>) -> Result<(), Fail> {
    let mut here = Vec::new();
    let mut first = Ok(());
    for (comm, stream, mut tasks) in buckets {
        for t in &mut tasks {
            if let Task::Coll { seq, .. } = t {
                *seq = comm.next_seq();
            }
        }
        if stream == 0 {
            here.push((comm, tasks));
        } else if let Err(f) = launch(comm, stream, tasks) {
            first = first.and(Err(f));
        }
    }
    let mut posted = Vec::new();
    for (comm, tasks) in &here {
        // SAFETY: the caller's contract.
        let r = unsafe { post(comm, tasks) };
        if let Err(f) = &r {
            comm.note(f);
        }
        posted.push(r);
    }
    for ((comm, tasks), p) in here.iter().zip(posted) {
        // SAFETY: the caller's contract.
        let r = p.and_then(|()| unsafe { complete(comm, tasks) });
        if let Err(f) = r {
            comm.note(&f);
            first = first.and(Err(f));
        }
    }
    first
}

/// The magic at the start of every [`Handle`], to refuse pointers that are not ours.
pub const HANDLE_MAGIC: u64 = u64::from_le_bytes(*b"ncclcomm");

/// What an `ncclComm_t` points at.
pub struct Handle {
    pub magic: u64,
    pub st: Mutex<HState>,
    pub err: Arc<ErrSlot>,
}

/// Where a handle's communicator is.
pub enum HState {
    /// Waiting for every rank to join.
    Joining {
        conn: Arc<Conn>,
        rank: u32,
        nranks: u32,
    },
    /// Waiting for split `seq` of `parent`.
    Splitting {
        parent: Arc<Comm>,
        seq: u64,
    },
    Ready(Arc<Comm>),
    Failed(Fail),
}

impl Handle {
    /// A handle in state `st`.
    pub fn new(st: HState) -> Handle {
        Handle {
            magic: HANDLE_MAGIC,
            st: Mutex::new(st),
            err: Arc::new(ErrSlot::default()),
        }
    }

    /// The communicator, waiting for it if `block`; `Ok(None)`: a split gave this rank none;
    /// `ncclInProgress` when not ready and not `block`.
    pub fn poll(&self, block: bool) -> Result<Option<Arc<Comm>>, Fail> {
        let mut st = self.st.lock().unwrap_or_else(PoisonError::into_inner);
        let next = match &*st {
            HState::Ready(c) => return Ok(Some(c.clone())),
            HState::Failed(f) => return Err(f.clone()),
            HState::Joining { conn, rank, nranks } => {
                let joined = if block {
                    conn.sh.wait(|st| st.joined.clone(), |_| None)?
                } else {
                    match conn.sh.lock().joined.clone() {
                        Some(j) => j,
                        None => return Err(in_progress()),
                    }
                };
                match joined {
                    Ok((id, _)) => HState::Ready(Arc::new(Comm::new(
                        id,
                        *rank,
                        (0..*nranks).collect(),
                        conn.clone(),
                        self.err.clone(),
                    ))),
                    Err(text) => {
                        let code = if conn.sh.lock().lost {
                            abi::REMOTE
                        } else {
                            abi::INVALID_ARGUMENT
                        };
                        HState::Failed(Fail::new(code, format!("ncclCommInitRank: {text}")))
                    }
                }
            }
            HState::Splitting { parent, seq } => {
                let (id, seq) = (parent.id, *seq);
                let ready =
                    |st: &mut crate::conn::State| st.boxes.get_mut(&id)?.results.remove(&seq);
                let reply = if block {
                    match parent.conn.sh.wait(ready, |st| st.broken(id)) {
                        Ok(r) => r,
                        Err(f) => {
                            *st = HState::Failed(f.clone());
                            return Err(f);
                        }
                    }
                } else {
                    let mut cs = parent.conn.sh.lock();
                    match ready(&mut cs) {
                        Some(r) => r,
                        None => {
                            if let Some(f) = cs.broken(id) {
                                drop(cs);
                                *st = HState::Failed(f.clone());
                                return Err(f);
                            }
                            return Err(in_progress());
                        }
                    }
                };
                match reply {
                    Reply::Split { child: 0, .. } => return Ok(None),
                    Reply::Split {
                        child,
                        rank,
                        members,
                    } => HState::Ready(Arc::new(Comm::new(
                        child,
                        rank,
                        members,
                        parent.conn.clone(),
                        self.err.clone(),
                    ))),
                    Reply::Data(_) => {
                        HState::Failed(Fail::internal("ncclCommSplit: the hub answered with data"))
                    }
                }
            }
        };
        *st = next;
        match &*st {
            HState::Ready(c) => Ok(Some(c.clone())),
            HState::Failed(f) => Err(f.clone()),
            _ => unreachable!("the state was just set"),
        }
    }
}

fn in_progress() -> Fail {
    Fail::new(abi::IN_PROGRESS, "the communicator is still being set up")
}
