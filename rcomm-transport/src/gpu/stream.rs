//! The stand-in's streams: each one a FIFO of host functions run eagerly, in order, by a
//! worker thread of its own, as a GPU runs a stream's work without anyone waiting for it.
//!
//! A stream object begins with [`StreamAbi`], so a library that only knows the C ABI (the
//! stand-in libnccl of the tests) can queue work on it as on a CUDA stream with
//! `cuLaunchHostFunc`: [`Stream::raw`] is the address of that header. Completion is tracked by
//! tickets: every queued item takes the next ticket, and the stream has completed ticket `t`
//! once `t` items ran, which is all an event needs (record = the current ticket).

use super::GpuError;
use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// `u64::from_le_bytes(*b"rcommstr")`: the first word of every stand-in stream object.
pub const STREAM_MAGIC: u64 = u64::from_le_bytes(*b"rcommstr");

/// A host function as `cuLaunchHostFunc` takes it.
pub type HostFn = unsafe extern "C" fn(*mut c_void);

/// The C header of a stand-in stream: what a `cudaStream_t` handed to a C library points at.
#[repr(C)]
#[derive(Debug)]
pub struct StreamAbi {
    /// [`STREAM_MAGIC`].
    pub magic: u64,
    /// Queues `f(arg)` on `stream` after the work already there; 0 when queued.
    pub launch_host_func: unsafe extern "C" fn(*mut c_void, HostFn, *mut c_void) -> c_int,
}

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Items queued since the stream was made (the last ticket handed out).
    queued: u64,
    /// Items run to completion.
    done: u64,
    closing: bool,
}

/// One stand-in stream. `#[repr(C)]` with the header first, so its address is a valid
/// `StreamAbi*`.
#[repr(C)]
pub(crate) struct StreamObj {
    abi: StreamAbi,
    q: Mutex<Queue>,
    /// Signalled when a job is queued (the worker) and when one completes (the waiters).
    cv: Condvar,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

thread_local! {
    /// The stream whose worker this thread is (0: none), so a job cannot wait for itself.
    static WORKER_OF: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn lock(q: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    q.lock().unwrap_or_else(|e| e.into_inner())
}

/// The C entry of [`StreamAbi`].
unsafe extern "C" fn launch_host_func(stream: *mut c_void, f: HostFn, arg: *mut c_void) -> c_int {
    struct Call(HostFn, *mut c_void);
    // SAFETY: the caller of cuLaunchHostFunc hands `arg` to the stream's thread; that is the
    // contract of the C entry.
    unsafe impl Send for Call {}
    if stream.is_null() {
        return 1;
    }
    // SAFETY: a non-null stream handed to this entry is the header of a live `StreamObj` (it
    // was read from that header, and the stream outlives the work queued on it).
    let s = unsafe { &*(stream as *const StreamObj) };
    if s.abi.magic != STREAM_MAGIC {
        return 1;
    }
    let call = Call(f, arg);
    super::count_launch();
    match s.push(Box::new(move || {
        let c = call;
        // SAFETY: the C caller's function and argument, called once as it asked.
        unsafe { (c.0)(c.1) }
    })) {
        Ok(_) => 0,
        Err(_) => 2,
    }
}

impl StreamObj {
    /// A new stream and its worker thread (named after the stream's ordinal).
    pub(crate) fn new(ordinal: u64) -> Result<Arc<Self>, GpuError> {
        let s = Arc::new(Self {
            abi: StreamAbi {
                magic: STREAM_MAGIC,
                launch_host_func,
            },
            q: Mutex::new(Queue::default()),
            cv: Condvar::new(),
            worker: Mutex::new(None),
        });
        let me = s.clone();
        let h = std::thread::Builder::new()
            .name(format!("rcomm-stream-{ordinal}"))
            .spawn(move || me.run())
            .map_err(|e| GpuError::Call {
                call: "stream worker",
                device: 0,
                code: e.to_string(),
            })?;
        *s.worker.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
        Ok(s)
    }

    /// The address of its C header: the stream's handle.
    pub(crate) fn raw(self: &Arc<Self>) -> u64 {
        Arc::as_ptr(self) as usize as u64
    }

    fn run(&self) {
        WORKER_OF.with(|w| w.set(self as *const Self as usize));
        loop {
            let job = {
                let mut q = lock(&self.q);
                loop {
                    if let Some(j) = q.jobs.pop_front() {
                        break j;
                    }
                    if q.closing {
                        return;
                    }
                    q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            // A panicking job must not stop the stream (later tickets would never complete);
            // on a GPU a faulting kernel does not stop the host either.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                rcomm_runtime::rlog!(Warn, "NET", "a stand-in stream's host function panicked");
            }
            lock(&self.q).done += 1;
            self.cv.notify_all();
        }
    }

    /// Queues `f`; its ticket.
    pub(crate) fn push(&self, f: Job) -> Result<u64, GpuError> {
        let mut q = lock(&self.q);
        if q.closing {
            return Err(GpuError::Invalid("the stand-in stream is destroyed".into()));
        }
        q.jobs.push_back(f);
        q.queued += 1;
        let t = q.queued;
        drop(q);
        self.cv.notify_all();
        Ok(t)
    }

    /// The ticket of the last item queued so far (an event recorded now).
    pub(crate) fn ticket(&self) -> u64 {
        lock(&self.q).queued
    }

    /// Whether ticket `t` ran.
    pub(crate) fn reached(&self, t: u64) -> bool {
        lock(&self.q).done >= t
    }

    /// Waits until ticket `t` ran, or `deadline`: false then.
    pub(crate) fn wait_for(&self, t: u64, deadline: Instant) -> Result<bool, GpuError> {
        if WORKER_OF.with(|w| w.get()) == self as *const Self as usize {
            return Err(GpuError::Invalid(
                "a stand-in stream's host function waited for its own stream".into(),
            ));
        }
        let mut q = lock(&self.q);
        while q.done < t {
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            q = self
                .cv
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(true)
    }

    /// Runs what is queued, then ends the worker and joins it (as a CUDA stream destroyed
    /// with work pending finishes that work). Bounded by `deadline`: a job that never ends
    /// leaves its thread behind, reported.
    pub(crate) fn close(&self, deadline: Instant) -> Result<(), GpuError> {
        let t = {
            let mut q = lock(&self.q);
            q.closing = true;
            q.queued
        };
        self.cv.notify_all();
        if !self.wait_for(t, deadline)? {
            return Err(GpuError::Call {
                call: "stream_destroy",
                device: 0,
                code: "its queued work did not finish before the deadline".into(),
            });
        }
        let h = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = h
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
        Ok(())
    }
}

/// How long a host wait on the stand-in may last when the caller gives no deadline: the
/// collective watchdog's `RCOMM_TIMEOUT`, or ten minutes where that is off.
pub(crate) fn default_deadline() -> Instant {
    let d = rcomm_runtime::config::global()
        .as_ref()
        .ok()
        .and_then(|c| c.coll_timeout)
        .unwrap_or(Duration::from_secs(600));
    Instant::now() + d
}
