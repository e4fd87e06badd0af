//! The life of an NCCL communicator under rcomm: made without blocking (polled under
//! `RCOMM_TIMEOUT`), its enqueued work tracked by events, waited for by polling, its failures
//! turned into rcomm's errors, and a process-wide watchdog for the work nobody waits for.
//!
//! **Failures.** Each poll — of a plain call's wait, and of the watchdog while stream-ordered
//! work is not known complete — looks at NCCL's asynchronous error, the launcher's notices (a
//! member lost) and the engine's revocations, and at the deadline. The first reason found
//! aborts the NCCL communicator (`ncclCommAbort`, once) and stays: every later call on it
//! returns the same error. A lost member is named from the notice board — NCCL's own text is
//! never parsed — waiting up to the engine's `NOTICE_GRACE` for the launcher's notice when
//! NCCL noticed first; without a notice the error carries NCCL's text.

use super::nccl_lib::{IN_PROGRESS, Lib, Raw, result_text};
use crate::comm::Shared;
use crate::{CommError, Result};
use rcomm_transport::gpu::{Event, Gpu};
use std::collections::VecDeque;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// Calls into libnccl made by rcomm (the budget tests count them).
pub(super) static NCCL_CALLS: AtomicU64 = AtomicU64::new(0);
/// NCCL communicators alive in this process.
static LIVE: AtomicU64 = AtomicU64::new(0);
/// NCCL communicators made by `ncclCommSplit` from a parent's.
pub(super) static SPLITS: AtomicU64 = AtomicU64::new(0);

/// Calls into libnccl made by the watchdog thread (counted apart: they run whenever it polls,
/// not per operation).
static WATCHDOG_CALLS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static ON_WATCHDOG: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// One call into libnccl is about to be made.
pub(super) fn count_call() {
    if ON_WATCHDOG.with(std::cell::Cell::get) {
        WATCHDOG_CALLS.fetch_add(1, Ordering::Relaxed);
    } else {
        NCCL_CALLS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counters of the NCCL engine, for tests and `gpu-check`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NcclStats {
    /// Calls into libnccl made by rcomm's calling threads (set-up, collectives, groups, error
    /// polls of a plain call's wait, aborts, destroys).
    pub calls: u64,
    /// Calls into libnccl made by the watchdog thread (error polls, aborts).
    pub watchdog_calls: u64,
    /// NCCL communicators alive in this process.
    pub live_comms: u64,
    /// NCCL communicators made by `ncclCommSplit` from their parent's.
    pub splits: u64,
}

/// The NCCL engine's counters.
pub fn nccl_stats() -> NcclStats {
    NcclStats {
        calls: NCCL_CALLS.load(Ordering::Relaxed),
        watchdog_calls: WATCHDOG_CALLS.load(Ordering::Relaxed),
        live_comms: LIVE.load(Ordering::Relaxed),
        splits: SPLITS.load(Ordering::Relaxed),
    }
}

/// Why a communicator's NCCL communicator was aborted: what every later call on it returns.
#[derive(Debug, Clone)]
pub(super) enum Failure {
    Lost {
        rank: u32,
        host: String,
        why: String,
    },
    Revoked {
        by: u32,
    },
    Timeout {
        op: &'static str,
        seq: u64,
        comm: String,
        waited: Duration,
    },
    Nccl(String),
}

impl Failure {
    pub(super) fn error(&self, op: &'static str, me: u32) -> CommError {
        match self.clone() {
            Failure::Lost { rank, host, why } => CommError::PeerLost {
                rank,
                host,
                op,
                why,
            },
            Failure::Revoked { by } => CommError::Revoked { op, by },
            Failure::Timeout {
                op,
                seq,
                comm,
                waited,
            } => CommError::Timeout {
                op,
                seq,
                comm,
                peer: None,
                waited,
            },
            Failure::Nccl(why) => CommError::Device { op, rank: me, why },
        }
    }
}

/// Stream-ordered work not known complete.
struct Work {
    event: Event,
    op: &'static str,
    seq: u64,
    since: Instant,
}

/// One NCCL communicator, freed with the rcomm communicator holding it.
pub(super) struct NcclComm {
    raw: AtomicUsize,
    /// Held while enqueueing: NCCL forbids concurrent calls on one communicator.
    pub(super) calls: Mutex<()>,
    pub(super) device: u32,
    pub(super) lib: &'static Lib,
    /// The rcomm communicator's context and members (world ranks), for its failures.
    ctx: u32,
    members: Vec<u32>,
    shared: Weak<Shared>,
    /// NCCL operations enqueued on it so far.
    seq: AtomicU64,
    failure: Mutex<Option<Failure>>,
    aborted: AtomicBool,
    pending: Mutex<VecDeque<Work>>,
}

/// `RCOMM_TIMEOUT` (`None`: off).
fn limit() -> Option<Duration> {
    rcomm_runtime::config::global()
        .as_ref()
        .map_or(Some(Duration::from_secs(600)), |c| c.coll_timeout)
}

/// One round of a poll: spin, then yield, then sleep briefly.
fn back_off(round: u32) {
    match round {
        0..64 => std::hint::spin_loop(),
        64..512 => std::thread::yield_now(),
        _ => std::thread::sleep(Duration::from_micros(100)),
    }
}

/// NCCL's asynchronous state of `raw`: `Ok(true)` ready, `Ok(false)` in progress, or the
/// error's text.
fn async_state(lib: &Lib, raw: Raw) -> std::result::Result<bool, String> {
    let mut r: c_int = 0;
    count_call();
    // SAFETY: a live communicator (or one being made); writes one int.
    let rc = unsafe { (lib.get_async_error)(raw, &mut r) };
    if rc != 0 {
        return Err(format!(
            "ncclCommGetAsyncError failed: {}",
            result_text(lib, raw, rc)
        ));
    }
    match r {
        0 => Ok(true),
        IN_PROGRESS => Ok(false),
        e => Err(format!("NCCL reports {}", result_text(lib, raw, e))),
    }
}

/// Polls a communicator being made (or split) until NCCL says it is ready, under
/// `RCOMM_TIMEOUT`; aborts it on an error or at the deadline.
pub(super) fn await_ready(
    lib: &'static Lib,
    raw: Raw,
    op: &'static str,
    me: u32,
    comm: &str,
) -> Result<()> {
    let start = Instant::now();
    let mut round = 0u32;
    loop {
        let fail = match async_state(lib, raw) {
            Ok(true) => return Ok(()),
            Ok(false) => match limit() {
                Some(l) if start.elapsed() >= l => Some(CommError::Timeout {
                    op,
                    seq: 0,
                    comm: comm.to_string(),
                    peer: None,
                    waited: start.elapsed(),
                }),
                _ => None,
            },
            Err(why) => Some(CommError::Device {
                op,
                rank: me,
                why: format!("setting up NCCL's communicator: {why}"),
            }),
        };
        if let Some(e) = fail {
            count_call();
            // SAFETY: a communicator NCCL handed out, abandoned here and never used again.
            unsafe { (lib.abort)(raw) };
            return Err(e);
        }
        back_off(round);
        round = round.saturating_add(1);
    }
}

impl NcclComm {
    pub(super) fn new(
        raw: Raw,
        device: u32,
        lib: &'static Lib,
        ctx: u32,
        members: Vec<u32>,
        shared: &Arc<Shared>,
    ) -> Arc<Self> {
        LIVE.fetch_add(1, Ordering::Relaxed);
        let c = Arc::new(Self {
            raw: AtomicUsize::new(raw as usize),
            calls: Mutex::new(()),
            device,
            lib,
            ctx,
            members,
            shared: Arc::downgrade(shared),
            seq: AtomicU64::new(0),
            failure: Mutex::new(None),
            aborted: AtomicBool::new(false),
            pending: Mutex::new(VecDeque::new()),
        });
        watchdog_register(&c);
        c
    }

    pub(super) fn raw(&self) -> Raw {
        self.raw.load(Ordering::Relaxed) as Raw
    }

    /// The number of the next NCCL operation on it (1, 2, ...: alike on every member, as
    /// every member enqueues the same operations in the same order).
    pub(super) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The failure it was aborted for, if it was.
    pub(super) fn failed(&self) -> Option<Failure> {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records `f` (the first failure stays) and aborts NCCL's communicator once: what is
    /// enqueued on it ends, and nothing more runs on it.
    pub(super) fn fail(&self, f: Failure) -> Failure {
        let f = self
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(f)
            .clone();
        if !self.aborted.swap(true, Ordering::AcqRel) {
            rcomm_runtime::rlog!(
                Warn,
                "COLL",
                "NCCL communicator of comm {} aborted: {f:?}",
                crate::fr::comm_label(self.ctx)
            );
            count_call();
            // SAFETY: a live communicator; NCCL allows an abort while work is enqueued on it
            // (that work ends). It is never used again (`aborted`).
            unsafe { (self.lib.abort)(self.raw()) };
        }
        f
    }

    /// A member lost or the communicator revoked, as the engine knows it; with `wait_notice`
    /// (NCCL saw an error) the launcher's notice is waited for up to `NOTICE_GRACE`.
    fn engine_failure(&self, shared: &Shared, wait_notice: bool) -> Option<Failure> {
        let look = || {
            let mut e = shared.lock();
            if !ON_WATCHDOG.with(std::cell::Cell::get) {
                // The caller's wait drives the engine, as rcomm's own waits do: a revocation
                // arrives as a message.
                e.progress();
            }
            shared.apply_notices(&mut e);
            if let Some(CommError::Revoked { by, .. }) = e.revoked_error(self.ctx, "nccl") {
                return Some(Failure::Revoked { by });
            }
            let w = (e.reported_failed().iter().copied()).find(|w| self.members.contains(w))?;
            Some(match e.lost_error(w, "nccl") {
                Some(CommError::PeerLost {
                    rank, host, why, ..
                }) => Failure::Lost { rank, host, why },
                _ => Failure::Lost {
                    rank: w,
                    host: e.host_of(w).to_string(),
                    why: "the launcher reports it failed".into(),
                },
            })
        };
        if let Some(f) = look() {
            return Some(f);
        }
        let nb = shared.notices.as_deref().filter(|_| wait_notice)?;
        nb.wait_for(crate::p2p::engine::NOTICE_GRACE, |n| {
            n.failed.iter().any(|(r, _)| self.members.contains(r))
        });
        look()
    }

    /// Looks for a reason to give up (see the module's documentation); aborts on one.
    pub(super) fn health(&self) -> Option<Failure> {
        if let Some(f) = self.failed() {
            return Some(f);
        }
        let nccl = async_state(self.lib, self.raw()).err();
        if let Some(shared) = self.shared.upgrade()
            && let Some(f) = self.engine_failure(&shared, nccl.is_some())
        {
            return Some(self.fail(f));
        }
        nccl.map(|why| self.fail(Failure::Nccl(why)))
    }

    /// Hands stream-ordered work to the watchdog.
    pub(super) fn track(&self, event: Event, op: &'static str, seq: u64) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(Work {
                event,
                op,
                seq,
                since: Instant::now(),
            });
    }

    /// The timeout failure of operation `op` #`seq` after `waited`, with the hang report.
    fn time_out(&self, op: &'static str, seq: u64, waited: Duration) -> Failure {
        let f = self.fail(Failure::Timeout {
            op,
            seq,
            comm: crate::fr::comm_label(self.ctx),
            waited,
        });
        if let Some(shared) = self.shared.upgrade() {
            shared.report_hang(&f.error(op, 0));
        }
        f
    }

    /// Waits for `ev` (the end of NCCL operation `op` #`seq`) by polling, checking the
    /// communicator's health every few rounds, `checked` (checked mode's verdict: a call
    /// other ranks do not make aborts it) and the deadline (`RCOMM_TIMEOUT`).
    pub(super) fn wait(
        &self,
        gpu: &Gpu,
        ev: &Event,
        op: &'static str,
        seq: u64,
        me: u32,
        checked: Option<&dyn Fn() -> Option<CommError>>,
    ) -> Result<()> {
        let verdict = || checked.and_then(|f| f());
        let start = Instant::now();
        let mut round = 0u32;
        loop {
            let done = gpu.event_query(ev).map_err(super::dev_err(op, me))?;
            if done || round.is_multiple_of(16) {
                // An operation can end with an error (a peer lost mid-way): looked at after
                // it ended too.
                // The verdict first: a wrong call also makes NCCL fail, in its own words.
                if let Some(e) = verdict() {
                    self.fail(Failure::Nccl(e.to_string()));
                    return Err(e);
                }
                if let Some(f) = self.health() {
                    if checked.is_some() && matches!(f, Failure::Nccl(_)) {
                        // NCCL may see a wrong call before the signatures have gone round:
                        // they get the engine's grace to say so.
                        let end = Instant::now() + crate::p2p::engine::NOTICE_GRACE;
                        while Instant::now() < end {
                            if let Some(e) = verdict() {
                                return Err(e);
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    return Err(f.error(op, me));
                }
                if done {
                    return Ok(());
                }
                if let Some(l) = limit()
                    && start.elapsed() >= l
                {
                    return Err(self.time_out(op, seq, start.elapsed()).error(op, me));
                }
            }
            back_off(round);
            round = round.saturating_add(1);
        }
    }

    /// One watchdog round: drops what ended; on a failure or past the deadline, aborts.
    /// Whether work is still pending.
    fn watch(&self, gpu: &Gpu) -> bool {
        let oldest = {
            let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            while let Some(w) = p.front() {
                if !matches!(gpu.event_query(&w.event), Ok(true)) {
                    break;
                }
                let w = p.pop_front().expect("looked at");
                let _ = gpu.event_destroy(w.event);
            }
            match p.front() {
                Some(w) => (w.op, w.seq, w.since),
                None => return false,
            }
        };
        let failed = self.health().is_some()
            || match limit() {
                Some(l) if oldest.2.elapsed() >= l => {
                    self.time_out(oldest.0, oldest.1, oldest.2.elapsed());
                    true
                }
                _ => false,
            };
        if failed {
            // Aborted: its work will never be waited for.
            let gone: Vec<Work> = self
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..)
                .collect();
            for w in gone {
                let _ = gpu.event_destroy(w.event);
            }
            return false;
        }
        true
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        let gpu = rcomm_transport::gpu::gpu_if_present();
        // Work still enqueued uses the communicator: it ends before the communicator goes
        // (bounded: past the deadline the communicator is aborted instead).
        let pending: Vec<Work> = self
            .pending
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        let deadline = Instant::now() + limit().unwrap_or(Duration::from_secs(600));
        let mut ended = true;
        for w in pending {
            if let Some(g) = gpu {
                ended &= matches!(g.event_wait_host(&w.event, deadline), Ok(true));
                let _ = g.event_destroy(w.event);
            }
        }
        if self.aborted.load(Ordering::Acquire) {
            return;
        }
        if !ended {
            self.fail(Failure::Nccl("freed with work that did not end".into()));
            return;
        }
        if let Err(why) = async_state(self.lib, self.raw()) {
            // Often the peers went first (their processes ended): nothing to report, but a
            // communicator in error is aborted, not destroyed.
            rcomm_runtime::rlog!(Info, "COLL", "NCCL communicator freed by abort: {why}");
            self.aborted.store(true, Ordering::Release);
            count_call();
            // SAFETY: a live communicator none of whose work is pending, aborted once.
            unsafe { (self.lib.abort)(self.raw()) };
            return;
        }
        if let Some(finalize) = self.lib.finalize {
            count_call();
            // SAFETY: a live communicator none of whose work is pending, finalized once.
            let rc = unsafe { finalize(self.raw()) };
            let ready = match rc {
                0 | IN_PROGRESS => await_ready(self.lib, self.raw(), "free", 0, "").is_ok(),
                _ => {
                    self.fail(Failure::Nccl("ncclCommFinalize failed".into()));
                    false
                }
            };
            if !ready {
                // Aborted (by `await_ready` or above): nothing left to destroy.
                return;
            }
        }
        count_call();
        // SAFETY: a live communicator none of whose work is pending, destroyed once.
        unsafe { (self.lib.destroy)(self.raw()) };
    }
}

/// The NCCL communicators the watchdog looks after, and whether its thread runs.
struct Registry {
    comms: Vec<Weak<NcclComm>>,
    running: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    comms: Vec::new(),
    running: false,
});

fn watchdog_register(c: &Arc<NcclComm>) {
    let mut r = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
    r.comms.push(Arc::downgrade(c));
    if !r.running {
        r.running = std::thread::Builder::new()
            .name("rcomm-nccl-watchdog".into())
            .spawn(watchdog)
            .is_ok();
    }
}

/// The watchdog thread: ends when the last NCCL communicator is gone.
fn watchdog() {
    ON_WATCHDOG.with(|w| w.set(true));
    loop {
        let comms: Vec<Arc<NcclComm>> = {
            let mut r = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
            r.comms.retain(|w| w.strong_count() > 0);
            if r.comms.is_empty() {
                r.running = false;
                return;
            }
            r.comms.iter().filter_map(Weak::upgrade).collect()
        };
        let busy = match rcomm_transport::gpu::gpu_if_present() {
            Some(g) => comms.iter().fold(false, |b, c| c.watch(g) | b),
            None => false,
        };
        drop(comms);
        std::thread::sleep(if busy {
            Duration::from_micros(500)
        } else {
            Duration::from_millis(5)
        });
    }
}
