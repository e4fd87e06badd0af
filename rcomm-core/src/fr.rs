//! The flight recorder's hooks ([`rcomm_runtime::flight`] keeps the ring) and the
//! no-progress watchdogs: `RCOMM_TIMEOUT` for collectives, `RCOMM_P2P_TIMEOUT` for receives
//! and probes.
//!
//! **Recording a collective.** Every collective chooses its algorithm once (`choose`), and
//! that is where its record begins (operation, type, size, algorithm) and is pushed on this
//! thread's stack of running collectives; the code that runs it (`run_schedule`, the
//! shared-memory and hierarchical paths) ends it with its result; a non-blocking one is handed
//! to its request (`adopt`), which ends it when it completes. Each public collective opens a
//! [`Scope`]: a record its call began but nothing ran (an argument error after the choice)
//! ends there as failed, so the stack never keeps a stale entry. Collectives that choose
//! nothing (barrier, split, dup) record themselves with [`record`].
//!
//! **Numbers.** A collective's number on its communicator (`#42`) counts the recorded
//! collectives on it; every rank records the same calls (the same choices, the same paths),
//! so the numbers agree across ranks, which is what the hang report compares.
//!
//! **Watchdogs.** A wait that makes no progress for its limit fails with
//! [`CommError::Timeout`] and asks the launcher for a hang report. Which limit: `RCOMM_TIMEOUT`
//! inside a collective (this thread's stack is not empty), `RCOMM_P2P_TIMEOUT` otherwise. The
//! clock is read only where the waits already read it (after spinning, every 20 ms).

use crate::{CommError, Result};
use rcomm_runtime::algo::Algo;
use rcomm_runtime::bootstrap::kvs::NoticeBoard;
use rcomm_runtime::flight::{self, Begin, Handle, NO_PEER, State};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Nesting of running collectives on one thread (a hierarchical collective runs others).
const DEPTH: usize = 4;

thread_local! {
    static STACK: [Cell<Handle>; DEPTH] = const { [const { Cell::new(Handle::NONE) }; DEPTH] };
    static TOP: Cell<usize> = const { Cell::new(0) };
}

/// The innermost collective running on this thread.
pub(crate) fn current() -> Option<Handle> {
    let top = TOP.with(Cell::get);
    (top > 0 && top <= DEPTH).then(|| STACK.with(|s| s[top - 1].get()))
}

fn push(h: Handle) {
    crate::nvtx::push(h.op_name());
    let top = TOP.with(Cell::get);
    if top < DEPTH {
        STACK.with(|s| s[top].set(h));
    }
    // Deeper than the stack: counted, not kept (popped alike).
    TOP.with(|t| t.set(top + 1));
}

fn pop() -> Option<Handle> {
    crate::nvtx::pop();
    let h = current();
    TOP.with(|t| t.set(t.get().saturating_sub(1)));
    h
}

fn state_of(err: Option<&CommError>) -> State {
    match err {
        None => State::Done,
        Some(CommError::Timeout { .. }) => State::TimedOut,
        Some(_) => State::Failed,
    }
}

/// Begins the record of a collective on context `ctx` and makes it this thread's current one;
/// `codes` are the element type's and the reduction's flight-recorder codes (0: none).
pub(crate) fn begin_coll(
    ctx: u32,
    op: &'static str,
    algo: Option<Algo>,
    bytes: usize,
    codes: (u8, u8),
) {
    if !active() {
        return;
    }
    let (dtype, redop) = codes;
    let h = flight::recorder().begin(&Begin {
        ctx,
        op,
        dtype,
        redop,
        algo,
        bytes: bytes as u64,
        peer: NO_PEER,
        state: State::Waiting,
        collective: true,
        slow: false,
    });
    push(h);
}

/// Whether collectives are recorded at all: not with `RCOMM_FR_SIZE=0` and both watchdogs off
/// (then nothing is kept and nothing is watched, and a collective pays nothing). With a
/// watchdog on, the per-thread stack tells a collective's waits from point-to-point ones.
fn active() -> bool {
    static ACTIVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ACTIVE.get_or_init(|| {
        rcomm_runtime::config::global().as_ref().map_or(true, |c| {
            c.fr_size > 0 || c.coll_timeout.is_some() || c.p2p_timeout.is_some()
        })
    })
}

/// Records the root of the current collective on context `ctx` (a communicator rank).
pub(crate) fn set_root(ctx: u32, root: u32) {
    if let Some(h) = current().filter(|h| h.ctx() == ctx) {
        flight::recorder().set_peer(h, root);
    }
}

/// Records that the current collective on context `ctx` runs `algo` after all: the chosen
/// algorithm's fallback (a non-blocking or irregular call of one only a blocking regular call
/// can run), so the record — and the hang report — say what really ran.
pub(crate) fn ran(ctx: u32, algo: Algo) {
    if let Some(h) = current().filter(|h| h.ctx() == ctx) {
        flight::recorder().set_algo(h, algo);
    }
}

/// Records that the current collective on context `ctx` was enqueued on `stream` as NCCL's
/// operation `seq` (the record then names NCCL as its algorithm).
pub(crate) fn set_device_op(ctx: u32, stream: u64, seq: u64) {
    if let Some(h) = current().filter(|h| h.ctx() == ctx) {
        flight::recorder().set_device_op(h, stream, seq);
    }
}

/// Ends the current collective if it is on context `ctx` (it ran, with this result).
pub(crate) fn end_coll<T>(ctx: u32, res: &Result<T>) {
    if current().is_some_and(|h| h.ctx() == ctx)
        && let Some(h) = pop()
    {
        flight::recorder().end(h, state_of(res.as_ref().err()));
    }
}

/// Hands the current collective on context `ctx` to a non-blocking request, which ends it
/// ([`end`]); `Handle::NONE` if there is none.
pub(crate) fn adopt(ctx: u32) -> Handle {
    match current() {
        Some(h) if h.ctx() == ctx => {
            pop();
            let r = flight::recorder();
            r.set_state(h, State::Posted);
            // Left running while the caller computes: timed (a non-blocking start is not the
            // few-nanosecond path a blocking one is).
            r.mark_slow(h);
            h
        }
        _ => Handle::NONE,
    }
}

/// Ends an adopted record: done, or failed with `err`.
pub(crate) fn end(h: Handle, err: Option<&CommError>) {
    flight::recorder().end(h, state_of(err));
}

/// Marks an adopted record as waited for.
pub(crate) fn waiting(h: Handle) {
    flight::recorder().set_state(h, State::Waiting);
}

/// Makes `h` this thread's current collective while the returned guard lives (a non-blocking
/// collective being waited for: its waits are watched, and its errors named, as its own).
pub(crate) fn enter(h: Handle) -> Entered {
    if h.is_some() {
        push(h);
    }
    Entered(h.is_some())
}

/// See [`enter`].
#[must_use]
pub(crate) struct Entered(bool);

impl Drop for Entered {
    fn drop(&mut self) {
        if self.0 {
            pop();
        }
    }
}

/// One public collective call: records it began and nothing ran end as failed when it
/// returns (an argument error between the algorithm's choice and the run).
#[must_use]
pub(crate) struct Scope(usize);

impl Scope {
    pub(crate) fn enter() -> Self {
        Scope(TOP.with(Cell::get))
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        while TOP.with(Cell::get) > self.0 {
            if let Some(h) = pop() {
                flight::recorder().end(h, State::Failed);
            }
        }
    }
}

/// Runs `f` as a recorded collective `op` on context `ctx` (for collectives that choose no
/// algorithm); inside another recorded collective on the same communicator (a hierarchical
/// collective's set-up split), `f` just runs.
pub(crate) fn record<R>(
    ctx: u32,
    op: &'static str,
    algo: Option<Algo>,
    f: impl FnOnce() -> Result<R>,
) -> Result<R> {
    if current().is_some_and(|h| h.ctx() == ctx) {
        return f();
    }
    let _scope = Scope::enter();
    begin_coll(ctx, op, algo, 0, (0, 0));
    let r = f();
    end_coll(ctx, &r);
    r
}

/// The name a communicator goes by in messages: its name, or its context id.
pub(crate) fn comm_label(ctx: u32) -> String {
    let name = flight::recorder().name(ctx & !1);
    if name.is_empty() {
        format!("#{}", ctx / 2)
    } else {
        name
    }
}

/// What a point-to-point wait is waiting for, for its record and its error.
#[derive(Debug, Clone, Copy)]
pub(crate) struct P2p {
    pub op: &'static str,
    pub peer: Option<u32>,
    pub ctx: u32,
    pub bytes: usize,
}

/// The record of a slow wait for a request: made by its watch, ended where the wait takes the
/// result (so a fast wait runs no code after it, and its result is returned in place).
#[derive(Debug)]
pub(crate) struct P2pSlot(Cell<Handle>);

impl P2pSlot {
    pub(crate) fn new() -> Self {
        Self(Cell::new(Handle::NONE))
    }

    /// The wait's request completed (`ok`, asked only if there is a record: a fast wait
    /// does one load here).
    #[inline]
    pub(crate) fn completed(&self, ok: impl FnOnce() -> bool) {
        if self.0.get().id != 0 {
            self.end(if ok() { State::Done } else { State::Failed });
        }
    }

    #[cold]
    fn end(&self, st: State) {
        let h = self.0.replace(Handle::NONE);
        if h.id != 0 {
            flight::recorder().end(h, st);
        }
    }
}

/// The watchdog of one wait: a few words on the stack, touched only on the wait's slow path
/// (after spinning; never allocating, like the rest of that path). Which collective it waits
/// in, and so which limit applies, is this thread's current one when it looks.
#[derive(Debug)]
pub(crate) struct Watch {
    /// Since when nothing moved (set at the first slow-path look).
    since: Option<Instant>,
    /// The record of a slow probe (a request's wait uses a [`P2pSlot`]).
    p2p: Handle,
}

impl Watch {
    pub(crate) fn new() -> Self {
        Self {
            since: None,
            p2p: Handle::NONE,
        }
    }

    /// The collective waited in (this thread's current one), if any.
    fn coll(&self) -> Option<Handle> {
        current()
    }

    /// The limit of this wait (`None`: no watchdog): `RCOMM_TIMEOUT` in a collective, else
    /// `RCOMM_P2P_TIMEOUT`.
    pub(crate) fn limit(&self) -> Option<Duration> {
        let cfg = rcomm_runtime::config::global().as_ref().ok();
        match self.coll() {
            Some(_) => cfg.map_or(Some(Duration::from_secs(600)), |c| c.coll_timeout),
            None => cfg.and_then(|c| c.p2p_timeout),
        }
    }

    /// The first slow-path look: the collective waited in is past spinning, so its end will
    /// be timed.
    fn first_look(&mut self, now: Instant) {
        if self.since.is_none() {
            self.since = Some(now);
            if let Some(h) = self.coll() {
                flight::recorder().mark_slow(h);
            }
        }
    }

    /// Something moved: the no-progress clock starts over.
    pub(crate) fn progress(&mut self, now: Instant) {
        self.first_look(now);
        self.since = Some(now);
    }

    /// Called on a wait's slow path: how long it has waited without progress, once that is
    /// past its limit. The clock starts at the first call (spinning is short).
    pub(crate) fn expired(&mut self, now: Instant) -> Option<Duration> {
        self.first_look(now);
        let waited = now.saturating_duration_since(self.since?);
        self.limit().filter(|&l| waited >= l).map(|_| waited)
    }

    /// Whether a wait of `waited` without progress is past the limit (for waits that keep
    /// their own clock).
    pub(crate) fn over_limit(&mut self, waited: Duration) -> bool {
        self.first_look(Instant::now());
        self.limit().is_some_and(|l| waited >= l)
    }

    /// A point-to-point wait that is slow: recorded now (fast ones never are).
    fn record_p2p(&self, what: &P2p) -> Handle {
        if self.coll().is_some() {
            return Handle::NONE;
        }
        flight::recorder().begin(&Begin {
            ctx: what.ctx,
            op: what.op,
            dtype: 0,
            redop: 0,
            algo: None,
            bytes: what.bytes as u64,
            peer: what.peer.unwrap_or(NO_PEER),
            state: State::Waiting,
            collective: false,
            slow: true,
        })
    }

    /// A slow-path turn of a probe: recorded once; after its limit, fails with `Timeout`
    /// and asks for a hang report (under the engine's lock: a failure path, one write).
    pub(crate) fn tick_probe<R>(
        &mut self,
        notices: Option<&NoticeBoard>,
        what: &P2p,
        now: Instant,
    ) -> Option<Result<R>> {
        if self.p2p.id == 0 {
            self.p2p = self.record_p2p(what);
        }
        let waited = self.expired(now)?;
        let h = std::mem::replace(&mut self.p2p, Handle::NONE);
        flight::recorder().end(h, State::TimedOut);
        let err = self.error(waited, Some(what));
        report_hang(notices, &err);
        Some(Err(err))
    }

    /// A probe ended (`ok`, or an error other than its timeout): ends its record, if any.
    pub(crate) fn probe_done(&mut self, ok: bool) {
        let h = std::mem::replace(&mut self.p2p, Handle::NONE);
        if h.id != 0 {
            flight::recorder().end(h, if ok { State::Done } else { State::Failed });
        }
    }

    /// A slow-path turn of the wait for request `req`: records a waiting receive in `slot`
    /// once, and after `RCOMM_P2P_TIMEOUT` (or `RCOMM_TIMEOUT` in a collective) without its
    /// message cancels it and fails with `Timeout`, asking for a hang report (under the
    /// engine's lock: a failure path, and the report is one write). Sends never time out.
    pub(crate) fn tick_wait(
        &mut self,
        notices: Option<&NoticeBoard>,
        e: &mut crate::p2p::engine::Engine,
        req: crate::p2p::engine::ReqId,
        slot: &P2pSlot,
        now: Instant,
    ) -> Option<Result<crate::Status>> {
        let what = e.waiting_recv(req).map(|(op, peer, ctx, bytes)| P2p {
            op,
            peer,
            ctx,
            bytes,
        });
        if let Some(p) = &what
            && slot.0.get().id == 0
        {
            slot.0.set(self.record_p2p(p));
        }
        let waited = self.expired(now)?;
        if what.is_none() || !e.cancel(req) {
            return None;
        }
        slot.end(State::TimedOut);
        let err = self.error(waited, what.as_ref());
        report_hang(notices, &err);
        Some(Err(err))
    }

    /// The timeout error of this wait after `waited`.
    pub(crate) fn error(&self, waited: Duration, what: Option<&P2p>) -> CommError {
        match (self.coll(), what) {
            (Some(h), _) => CommError::Timeout {
                op: h.op_name(),
                seq: h.seq(),
                comm: comm_label(h.ctx()),
                peer: None,
                waited,
            },
            (None, w) => CommError::Timeout {
                op: w.map_or("recv", |w| w.op),
                seq: 0,
                comm: w.map_or_else(|| "?".into(), |w| comm_label(w.ctx)),
                peer: w.and_then(|w| w.peer),
                waited,
            },
        }
    }
}

/// What a hang report says triggered it: the timeout in short.
fn why_of(err: &CommError) -> String {
    match err {
        CommError::Timeout {
            op,
            seq,
            comm,
            peer,
            waited,
        } if *seq > 0 || peer.is_some() => {
            let (what, var) = match (seq, peer) {
                (0, Some(p)) => (format!("{op} from rank {p}"), "RCOMM_P2P_TIMEOUT"),
                _ => (format!("{op} #{seq}"), "RCOMM_TIMEOUT"),
            };
            format!(
                "{what} on comm {comm}: no progress for {:.1} s ({var})",
                waited.as_secs_f64()
            )
        }
        e => e.to_string(),
    }
}

/// Most one hang report per this long from one process (several waits time out together).
const REPORT_EVERY: Duration = Duration::from_secs(5);

/// A watchdog fired with `err`: asks the launcher (through its `notices` connection) for the
/// job's hang report, sending this rank's flight recorder with the request, or — with no
/// launcher to ask — logs this rank's recent operations.
pub(crate) fn report_hang(notices: Option<&NoticeBoard>, err: &CommError) {
    report_why(notices, &why_of(err));
}

/// [`report_hang`] with the reason in words.
pub(crate) fn report_why(notices: Option<&NoticeBoard>, why: &str) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = flight::now_us();
    let last = LAST.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < REPORT_EVERY.as_micros() as u64 {
        return;
    }
    LAST.store(now.max(1), Ordering::Relaxed);
    if notices.is_some_and(|n| n.send_dump(0, why)) {
        return;
    }
    let recent: Vec<String> = flight::recorder()
        .snapshot()
        .iter()
        .rev()
        .take(8)
        .map(|r| {
            let seq = if r.seq > 0 {
                format!(" #{}", r.seq)
            } else {
                String::new()
            };
            format!(
                "{}{seq} on comm {} ({})",
                r.op,
                comm_label(r.ctx),
                r.state.name()
            )
        })
        .collect();
    rcomm_runtime::rlog!(
        Warn,
        "COLL",
        "{why}; no launcher to print a hang report; this rank's last operations, newest first: {}",
        recent.join("; ")
    );
}

/// The last collective this process recorded on context `ctx` (see
/// [`crate::Communicator::last_collective`]).
pub(crate) fn last_collective(ctx: u32) -> Option<CollRecord> {
    flight::recorder()
        .snapshot()
        .into_iter()
        .rev()
        // Point-to-point records have no collective number.
        .find(|r| r.ctx == ctx && r.seq > 0)
        .map(|r| CollRecord {
            op: r.op,
            algo: match r.device {
                Some(_) => "nccl",
                None => r.algo.map_or("", Algo::name),
            },
            seq: r.seq,
            bytes: r.bytes,
            ended: r.state.ended(),
        })
}

/// A collective as the flight recorder keeps it ([`crate::Communicator::last_collective`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollRecord {
    /// The collective: `allreduce`, `bcast`, `reduce`, `allgather`, `reduce_scatter`,
    /// `alltoall`, `gather`, `scatter`, `scan` (exscan too), `barrier`, or the communicator
    /// makers `split`, `dup`, `create`.
    pub op: &'static str,
    /// The algorithm that ran, as `RCOMM_ALGO` and [`crate::Communicator::with_algo`] name them
    /// (`ring`, `hier`, …); `dissemination` for a barrier, `nccl` for one NCCL ran, "" for the
    /// communicator makers.
    pub algo: &'static str,
    /// Its number on the communicator (1 for the first), as hang reports and timeout errors
    /// number collectives.
    pub seq: u64,
    /// Bytes it moves (the vector, or one block for the gathering kinds).
    pub bytes: u64,
    /// Whether it has ended (a started non-blocking collective has not until it completes).
    pub ended: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::Reducer;

    #[test]
    fn scopes_end_what_their_call_began_and_nothing_else() {
        let h = |ctx| Handle::new(ctx, 1, "barrier");
        assert_eq!(current(), None);
        {
            let _outer = Scope::enter();
            push(h(2));
            {
                let _inner = Scope::enter();
                push(h(4)); // began, never ran: ended by its scope
            }
            assert_eq!(current().map(|h| h.ctx()), Some(2));
            end_coll(2, &Ok::<(), CommError>(()));
            assert_eq!(current(), None);
            push(h(6));
            assert_eq!(adopt(6).ctx(), 6);
            assert_eq!(adopt(6), Handle::NONE);
        }
        assert_eq!(current(), None);
        // Deeper than the stack: balanced all the same.
        {
            let _s = Scope::enter();
            for c in 0..(DEPTH as u32 + 3) {
                push(h(2 * c));
            }
        }
        assert_eq!(current(), None);
    }

    /// The cost of recording one collective (begin and end, with the scope of its call):
    /// `cargo test --release -p rcomm-core --lib -- --ignored --nocapture hook_cost`.
    #[test]
    #[ignore]
    fn hook_cost() {
        let cfg = rcomm_runtime::config::Config::from_map(&Default::default()).unwrap();
        let w = crate::world::init_for_test(&cfg);
        let r = Reducer::Builtin(rcomm_kernels::Op::Sum, rcomm_kernels::Dtype::F32);
        let n = 10_000_000u32;
        // CPU time: on a busy machine wall time counts other processes' slices too.
        let cpu = rcomm_runtime::os::thread_cpu_ns;
        for round in 0..3 {
            let t0 = cpu();
            for _ in 0..n {
                let _s = Scope::enter();
                begin_coll(
                    w.ctx(),
                    "allreduce",
                    Some(Algo::Ring),
                    8,
                    std::hint::black_box(&r).codes(),
                );
                end_coll(w.ctx(), &Ok::<(), CommError>(()));
            }
            let ns = (cpu() - t0) as f64 / f64::from(n);
            println!("round {round}: {ns:.1} ns (CPU) per recorded collective");
        }
    }

    #[test]
    fn the_recorders_type_and_op_codes_follow_the_kernels_enums() {
        for d in rcomm_kernels::Dtype::ALL {
            let (code, _) = Reducer::Builtin(rcomm_kernels::Op::Sum, d).codes();
            assert_eq!(flight::DTYPES[code as usize - 1], d.name());
        }
        for op in rcomm_kernels::Op::ALL {
            let (_, code) = Reducer::Builtin(op, rcomm_kernels::Dtype::I32).codes();
            assert_eq!(flight::REDOPS[code as usize - 1], op.name());
        }
    }

    #[test]
    fn the_watch_fires_after_its_limit_without_progress() {
        // In a collective (this thread's current one): RCOMM_TIMEOUT, 600 s by default.
        let scope = Scope::enter();
        push(Handle::new(8, 42, "allreduce"));
        let mut w = Watch::new();
        let t0 = Instant::now();
        let limit = w.limit().expect("a collective watchdog by default");
        assert_eq!(w.expired(t0), None);
        assert_eq!(w.expired(t0 + limit - Duration::from_millis(1)), None);
        w.progress(t0 + limit - Duration::from_millis(1));
        assert_eq!(w.expired(t0 + limit + Duration::from_millis(50)), None);
        let waited = w.expired(t0 + 2 * limit).unwrap();
        assert_eq!(waited, limit + Duration::from_millis(1));
        let e = w.error(waited, None).to_string();
        assert!(
            e.contains("allreduce #42 on comm #4") && e.contains("RCOMM_TIMEOUT"),
            "{e}"
        );
        assert!(w.over_limit(limit) && !w.over_limit(limit / 2));
        drop(scope);
        // Point-to-point: RCOMM_P2P_TIMEOUT, off by default.
        let mut p = Watch::new();
        assert_eq!(p.limit(), None);
        assert_eq!(p.expired(t0), None);
        assert_eq!(p.expired(t0 + Duration::from_secs(3600)), None);
    }
}
