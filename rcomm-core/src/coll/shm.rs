//! Direct shared-memory collectives for communicators whose ranks all run on one node: no
//! messages, every rank reads its peers' windows.
//!
//! **Windows.** Each rank owns one memfd segment (its *window*, [`WINDOW`] bytes) and maps every
//! peer's window, taken by (pid, descriptor number) through `pidfd_getfd` or `/proc`
//! (`rcomm_transport::window`). A window holds a header of monotone round counters and two
//! buffers (`b = round & 1`), each an input *slot* and a *result* area of [`SLOT`] bytes. Every
//! collective is cut into rounds of at most one slot; every rank runs the same rounds in the
//! same order, because the round count follows from the byte count, which is checked equal
//! on every rank in the first round of each call.
//!
//! **Round k** (buffer b = k & 1), on every rank:
//! 1. write the input into slot b (allreduce; bcast root), the descriptor b (total length,
//!    kind, where the input lies), then `arrived = k` (Release). A round of at most
//!    [`FAST_MAX`] slot bytes writes data, length and kind into its fast line b instead and
//!    stores the line's round number last: a peer's one cache miss brings all of it;
//! 2. wait until every rank's part of round k is there (`arrived ≥ k` or fast line b's round
//!    ≥ k, Acquire), compare descriptors (first round of a call; a rank that took the other
//!    way through the round passed another length, or another checked mode or buffer);
//! 3. allreduce, small chunk: every rank folds all n slots in the canonical order into its own
//!    output (the same work everywhere, so the same bits); large chunk: rank r folds part r of
//!    all slots into its result area, `reduced = k` (Release), waits for every `reduced ≥ k`
//!    (Acquire) and copies every part out of its owner's result area. bcast: copy the root's
//!    slot.
//!
//! **Ordering argument.** A reader's Acquire load that sees a rank's part of round k (or
//! `reduced ≥ k`) synchronises with the owner's Release store of that value (or a later one,
//! stored after it by the same thread), so the slot, descriptor and result bytes written
//! before it are visible. Every peer reads our buffer b (or fast line) of round k before it
//! stores its part of a later round, so buffer b may be rewritten in round k + 2 once every
//! peer's part of round k + 1 was seen, and a fast line (k mod [`FAST_LINES`]) in round
//! k + FAST_LINES once every part of round k + 1 was; a round that waits for everyone has
//! seen them already, and `seen` records how far that goes. Counters only grow, so `≥` tests
//! stay right when a peer is ahead.
//!
//! **Pipelined bcast.** A bcast that fits a fast line waits for nobody at the root and only
//! for the root elsewhere, so back-to-back calls overlap: the root may run up to
//! FAST_LINES − 1 rounds ahead before the rule above makes it wait. A non-root whose call
//! differs from the root's gets `Mismatch`; the root does not learn of it (checked mode goes
//! through the slots, where every rank does).
//!
//! **Waiting.** A wait spins briefly, then yields; when ranks outnumber the CPUs it then
//! sleeps on the counter it waits for (a futex on the shared word, at most 1 ms at a time), and
//! every store of a counter is followed by a SeqCst fence and, when the owner's `sleepers`
//! count is non-zero, a wake-up: either the sleeper's last look sees the new value or the
//! storer sees the sleeper.
//!
//! **Failures.** About
//! every millisecond asks the engine whether a member died; a dead peer ends the wait with
//! `PeerLost`, and the windows are marked broken (later calls fail at once instead of hanging
//! on a round that can never complete). A rank that gives up also sets `abort` in its header,
//! so ranks waiting on some other, live but stuck member stop too. A peer counter already
//! reached counts even if its owner has died since: it may have exited normally after doing
//! its part. Ranks that pass different lengths, kinds or roots all
//! see the difference in the same round, finish it, and return `Mismatch`; the windows stay
//! usable.

use super::reduce::{Order, Reducer};
use crate::comm::Communicator;
use crate::{CommError, Result};
use rcomm_kernels::{Element, Op};
use rcomm_runtime::algo::Algo;
use rcomm_runtime::rlog;
use rcomm_transport::local::Segment;
use rcomm_transport::mem::MemKind;
use rcomm_transport::window::WINDOW_BLOB;
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod node;

pub(crate) use node::{NodeShm, all_on_node, exchange_segments};

/// Bytes per input slot and per result area: one round moves at most this much.
pub(crate) const SLOT: usize = 256 << 10;
/// Chunks up to this size are folded whole by every rank (one synchronisation per round);
/// above it the fold is split among ranks (two, but 1/n of the arithmetic each).
const SMALL_MAX: usize = 8 << 10;
/// Rounds whose slot bytes fit in this many go through the [`Fast`] lines instead of the
/// slots (outside checked mode and without shared input buffers).
const FAST_MAX: usize = 40;
/// Fast lines per window: a pipelined bcast's root may run this many rounds minus one ahead
/// (eight made its readers wait on the root's lines; 32 leave room to prefetch).
const FAST_LINES: usize = 32;
/// The header's share of a window (page-aligned data areas after it).
const HEADER: usize = 4096;
/// One window: header, two slots, two result areas.
pub(crate) const WINDOW: usize = HEADER + 4 * SLOT;
/// Busy-wait iterations before a waiter starts yielding its core.
const SPIN: u32 = 2000;
/// Yields without the counter moving before a waiter of [`Proto::with_sleep`] sleeps.
const YIELDS_BEFORE_SLEEP: u32 = 8;
/// Longest sleep on a counter: a peer that does not wake sleepers, and the failure checks,
/// are never waited on for longer.
const SLEEP_MAX: Duration = Duration::from_millis(1);
/// How often a waiter asks whether a peer died.
const CHECK_EVERY: Duration = Duration::from_millis(1);

/// [`Header::abort`] of a rank whose watchdog fired (`RCOMM_TIMEOUT`).
const TIMED_OUT: u64 = u64::MAX - 1;

const KIND_ALLREDUCE: u64 = 1 << 56;
const KIND_BCAST: u64 = 2 << 56;
const KIND_ALLGATHER: u64 = 3 << 56;
const KIND_ALLTOALL: u64 = 4 << 56;
const KIND_REDUCE_SCATTER: u64 = 5 << 56;

#[repr(C, align(64))]
struct Line(AtomicU64);

/// What a rank contributes to one buffer's round; read by peers after `arrived`.
#[repr(C, align(64))]
struct Desc {
    /// Total byte length of the call (`u64::MAX`: this rank's arguments are invalid).
    total: AtomicU64,
    /// Collective kind with its parameters (element size and op, or root).
    kind: AtomicU64,
    /// 0: the input is in the slot; otherwise the id of the shared buffer holding it.
    src: AtomicU64,
    /// Checked mode: the call's signature (0 unchecked) and the call itself.
    check: AtomicU64,
    call: [AtomicU64; 3],
}

/// A small round's whole contribution in one cache line: the peer's one miss on it brings
/// the round number, the descriptor and the data together (a round through the slots costs
/// a miss each on the counter, the descriptor and the slot).
#[repr(C, align(64))]
struct Fast {
    /// The last round this line carried.
    round: AtomicU64,
    total: AtomicU64,
    kind: AtomicU64,
    data: UnsafeCell<[u8; FAST_MAX]>,
}

/// The counters at the start of every window; all-zero (a fresh memfd) is the initial state.
#[repr(C)]
struct Header {
    arrived: Line,
    reduced: Line,
    /// Round k uses line k mod [`FAST_LINES`].
    fast: [Fast; FAST_LINES],
    /// Non-zero once this rank gave up on the windows (1 + the world rank it lost, or
    /// `u64::MAX`): ranks waiting on a live but stuck peer learn of a failure it saw.
    abort: Line,
    /// Peers asleep on one of this rank's counters (ranks outnumber cores): a new value is
    /// followed by a wake-up when it is non-zero.
    sleepers: Line,
    desc: [Desc; 2],
}
const _: () = assert!(size_of::<Header>() <= HEADER);

/// What a waiter waits for on each rank.
#[derive(Clone, Copy)]
enum Flag {
    /// The rank's part of round k, through the slots (`false`: its `arrived`) or its fast
    /// line (`true`); either counts — which one it used is checked after the wait.
    Round(bool),
    /// `reduced`: the rank's part of a split fold is in its result area.
    Reduced,
}

/// An error of the protocol: `Agreed` ones were seen by every rank in the same round (the
/// windows stay in step); `Fatal` ones leave the windows unusable.
#[derive(Debug)]
pub(crate) enum ProtoError {
    Agreed(CommError),
    Fatal(CommError),
    /// Rank `j` of the communicator gave up (`code` as in [`Header::abort`]).
    Aborted {
        j: usize,
        code: u64,
    },
    /// Checked mode: the ranks' calls differ (seen by every rank in the same round).
    Check(Box<super::check::Verdict>),
}

impl ProtoError {
    #[cfg(test)]
    fn into_inner(self) -> CommError {
        match self {
            ProtoError::Agreed(e) | ProtoError::Fatal(e) => e,
            ProtoError::Aborted { j, code } => CommError::Protocol {
                rank: j as u32,
                why: format!("gave up ({code})"),
            },
            ProtoError::Check(v) => v.error(&|r| r.to_string()),
        }
    }
}

type PResult<T> = std::result::Result<T, ProtoError>;

/// A reduction step over byte buffers, in the canonical operand order.
pub(crate) trait Combine {
    /// `acc = left ⊕ acc` element-wise.
    fn acc(&self, acc: &mut [u8], left: &[u8]) -> Result<()>;

    /// `out = left ⊕ right` element-wise. The default copies `right` first; a built-in op
    /// reads both operands in one pass, which saves a pass over `out` per fold.
    fn into(&self, out: &mut [u8], left: &[u8], right: &[u8]) -> Result<()> {
        copy_then_acc(self, out, left, right)
    }
}

/// [`Combine::into`] by a copy and an [`acc`](Combine::acc): what any reduction can do.
fn copy_then_acc<C: Combine + ?Sized>(
    c: &C,
    out: &mut [u8],
    left: &[u8],
    right: &[u8],
) -> Result<()> {
    out.copy_from_slice(right);
    c.acc(out, left)
}

impl<F: Fn(&mut [u8], &[u8]) -> Result<()>> Combine for F {
    fn acc(&self, acc: &mut [u8], left: &[u8]) -> Result<()> {
        self(acc, left)
    }
}

impl Combine for Reducer {
    fn acc(&self, acc: &mut [u8], left: &[u8]) -> Result<()> {
        self.apply(acc, left, Order::SrcFirst)
    }

    fn into(&self, out: &mut [u8], left: &[u8], right: &[u8]) -> Result<()> {
        match self {
            // Built-in ops are commutative bit for bit, so one fused pass gives the same bits.
            Reducer::Builtin(op, d) => rcomm_kernels::reduce3(*op, *d, out, left, right)
                .map_err(|e| CommError::InvalidArg(e.to_string())),
            Reducer::User { .. } => copy_then_acc(self, out, left, right),
        }
    }
}

/// Folds `input(0) ⊕ (input(1) ⊕ … ⊕ input(n − 1))` into `out`, in that canonical order
/// (every rank's fold of a part gives the same bits, whichever rank folds it).
fn fold_into<'s>(
    combine: &dyn Combine,
    out: &mut [u8],
    n: usize,
    input: impl Fn(usize) -> &'s [u8],
) -> Result<()> {
    if n == 1 {
        out.copy_from_slice(input(0));
        return Ok(());
    }
    combine.into(out, input(n - 2), input(n - 1))?;
    for j in (0..n - 2).rev() {
        combine.acc(out, input(j))?;
    }
    Ok(())
}

/// Inputs read in place from every rank's shared buffer (allocated by `alloc_shared`).
pub(crate) struct ZeroCopy {
    /// Each rank's shared buffer, as mapped here (ours included), at least as long as the data.
    pub(crate) bases: Vec<NonNull<u8>>,
    /// Each rank's id for its buffer (what it publishes as the input's source).
    pub(crate) ids: Vec<u64>,
}

/// The protocol over a set of windows, independent of how they were mapped (so threads can
/// play ranks in tests).
pub(crate) struct Proto<'a> {
    me: usize,
    bases: &'a [NonNull<u8>],
    /// Called about every [`CHECK_EVERY`] with the rank waited for and how long this wait for
    /// it has lasted; an error ends the wait. Only that rank matters: a peer that has done its
    /// part may exit normally meanwhile.
    check: &'a mut dyn FnMut(usize, Duration) -> Result<()>,
    spin: u32,
    /// Ranks outnumber the CPUs: a wait that keeps yielding goes to sleep on the counter.
    sleep: bool,
    /// Longest sleep on a counter ([`SLEEP_MAX`]; tests make it long, so that a lost wake-up
    /// shows), and how many sleeps this rank began.
    sleep_max: Duration,
    slept: u32,
    /// Yields without the counter moving before a sleep ([`YIELDS_BEFORE_SLEEP`]; tests that
    /// must see sleeps set 0, since a loaded machine can make a few yields last as long as the
    /// peer they wait for).
    yields_before_sleep: u32,
    /// Checked mode: the call's number and what it is.
    checked: Option<(u32, super::check::Call)>,
    /// This round goes through the fast lines (set by `begin_round`), and which line.
    fast: bool,
    line: usize,
    /// The last round whose part this rank has seen from every rank (kept across calls).
    pub(crate) seen: u64,
}

impl<'a> Proto<'a> {
    /// `bases[j]` is rank j's window mapped here: [`WINDOW`] bytes, zero-filled when created.
    pub(crate) fn new(
        me: usize,
        bases: &'a [NonNull<u8>],
        check: &'a mut dyn FnMut(usize, Duration) -> Result<()>,
    ) -> Self {
        Self {
            me,
            bases,
            check,
            spin: SPIN,
            sleep: false,
            sleep_max: SLEEP_MAX,
            slept: 0,
            yields_before_sleep: YIELDS_BEFORE_SLEEP,
            checked: None,
            fast: false,
            line: 0,
            seen: 0,
        }
    }

    /// Checked mode: every rank compares the signatures of call `seq`'s descriptors.
    pub(crate) fn with_check(mut self, checked: Option<(u32, super::check::Call)>) -> Self {
        self.checked = checked;
        self
    }

    /// Spins before yielding: few when ranks outnumber cores (the rank we wait for may need
    /// this core to get anywhere).
    pub(crate) fn with_spin(mut self, spin: u32) -> Self {
        self.spin = spin;
        self
    }

    /// Waits that keep yielding sleep on the counter they wait for, and every new counter
    /// value wakes sleepers (a fence and a load per store): for ranks that share CPUs, where
    /// a yielding waiter still takes a time slice from the rank it waits for. Every rank of
    /// the windows should agree; one that does not sleeps costs a peer that does at most
    /// [`SLEEP_MAX`] per wait.
    pub(crate) fn with_sleep(mut self, sleep: bool) -> Self {
        self.sleep = sleep;
        self
    }

    /// Stores our counter `f = k` (Release: what we wrote before is visible with it) and wakes
    /// peers asleep on our counters. The SeqCst fence pairs with the sleeper's SeqCst
    /// increment of `sleepers` before its last look at the counter: either it sees `k`, or we
    /// see it asleep (Dekker), so no wake-up is lost.
    fn publish(&self, f: Flag, k: u64) {
        let word = self.flag(self.me, f, k);
        word.store(k, Ordering::Release);
        if self.sleep {
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.hdr(self.me).sleepers.0.load(Ordering::Relaxed) != 0 {
                rcomm_runtime::os::futex_wake(word);
            }
        }
    }

    /// Sleeps on rank j's counter `f` until it reaches `target` or [`SLEEP_MAX`] passes.
    fn sleep_on(&mut self, j: usize, f: Flag, target: u64) {
        self.slept = self.slept.wrapping_add(1);
        let (h, word) = (self.hdr(j), self.flag(j, f, target));
        h.sleepers.0.fetch_add(1, Ordering::SeqCst);
        let seen = word.load(Ordering::SeqCst);
        if seen < target {
            rcomm_runtime::os::futex_wait(word, seen, self.sleep_max);
        }
        h.sleepers.0.fetch_sub(1, Ordering::SeqCst);
    }

    fn n(&self) -> usize {
        self.bases.len()
    }

    fn hdr(&self, j: usize) -> &Header {
        // SAFETY: every base points at a live, page-aligned mapping of WINDOW bytes that starts
        // with a Header (all fields atomics, for which all-zero is valid); shared access from
        // other processes goes through those atomics only.
        unsafe { &*self.bases[j].as_ptr().cast::<Header>() }
    }

    fn area(&self, j: usize, i: usize) -> *mut u8 {
        // SAFETY: HEADER + i·SLOT + SLOT ≤ WINDOW for i < 4, so the offset stays in the mapping.
        unsafe { self.bases[j].as_ptr().add(HEADER + i * SLOT) }
    }

    /// Rank j's input slot of buffer b in this round: its fast line's data in a fast round.
    fn slot(&self, j: usize, b: usize) -> *mut u8 {
        if self.fast {
            self.hdr(j).fast[self.line].data.get().cast()
        } else {
            self.area(j, b)
        }
    }

    fn result(&self, j: usize, b: usize) -> *mut u8 {
        self.area(j, 2 + b)
    }

    /// The word rank j stores for `f` in round `k` (and a sleeper waits on).
    fn flag(&self, j: usize, f: Flag, k: u64) -> &AtomicU64 {
        let h = self.hdr(j);
        match f {
            Flag::Round(false) => &h.arrived.0,
            Flag::Round(true) => &h.fast[line_of(k)].round,
            Flag::Reduced => &h.reduced.0,
        }
    }

    /// How rank j took part in round k: `Some(true)` through its fast line, `Some(false)`
    /// through the slots, `None` not yet. `arrived` is loaded first: a value ≥ k that comes
    /// from a later round (j is one ahead) was stored after j's fast line of round k, so the
    /// second load then sees that line too.
    fn mode(&self, j: usize, k: u64) -> Option<bool> {
        let h = self.hdr(j);
        let arrived = h.arrived.0.load(Ordering::Acquire);
        if h.fast[line_of(k)].round.load(Ordering::Acquire) >= k {
            Some(true)
        } else {
            (arrived >= k).then_some(false)
        }
    }

    fn reached(&self, j: usize, f: Flag, k: u64) -> bool {
        match f {
            Flag::Round(_) => self.mode(j, k).is_some(),
            Flag::Reduced => self.hdr(j).reduced.0.load(Ordering::Acquire) >= k,
        }
    }

    /// Waits until every rank's `f` counter reaches `target`.
    fn wait_all(&mut self, f: Flag, target: u64) -> PResult<()> {
        self.wait_on(0..self.n(), f, target)
    }

    /// Waits until the `f` counter of every rank in `ranks` reaches `target`.
    fn wait_on(&mut self, ranks: std::ops::Range<usize>, f: Flag, target: u64) -> PResult<()> {
        let mut spins = 0u32;
        let mut yields = 0u32;
        let mut next_check: Option<Instant> = None;
        for j in ranks {
            // When this wait for rank j left the spin phase: the watchdog's clock.
            let mut since: Option<Instant> = None;
            while !self.reached(j, f, target) {
                if spins < self.spin {
                    spins += 1;
                    std::hint::spin_loop();
                    continue;
                }
                if self.sleep && yields >= self.yields_before_sleep {
                    self.sleep_on(j, f, target);
                } else {
                    yields += 1;
                    std::thread::yield_now();
                }
                let now = Instant::now();
                let since_j = *since.get_or_insert(now);
                // The first look comes CHECK_EVERY after the spin phase, not at its end: asking
                // the engine about the peers polls their connections (a system call), and
                // ranks sharing cores pass the spin phase in nearly every wait.
                if now >= *next_check.get_or_insert(now + CHECK_EVERY) {
                    // A member that gave up never moves again; whatever we wait for, this
                    // collective cannot complete everywhere.
                    if let Some((m, code)) = (0..self.n())
                        .map(|m| (m, self.hdr(m).abort.0.load(Ordering::Acquire)))
                        .find(|&(_, c)| c != 0)
                    {
                        return Err(ProtoError::Aborted { j: m, code });
                    }
                    let waited = now.saturating_duration_since(since_j);
                    if let Err(e) = (self.check)(j, waited) {
                        // A peer may publish its last counter and exit normally between our
                        // load and the check: only a counter still short after learning of
                        // the death means we waited on a rank that never did its part.
                        if !self.reached(j, f, target) {
                            return Err(ProtoError::Fatal(e));
                        }
                    }
                    next_check = Some(now + CHECK_EVERY);
                }
            }
        }
        Ok(())
    }

    /// Steps 1–2 of a round: let `fill` write our slot (`bytes` of it), publish the
    /// descriptor and our part of round k. A round of at most [`FAST_MAX`] slot bytes goes
    /// through the fast lines (the same choice on every rank when the calls agree; a rank
    /// that chose otherwise published a different length, which the check reports).
    ///
    /// Buffer b is free once every peer's part of round k − 1 was seen (a peer read our
    /// buffer b of round k − 2 before it stored that part), fast line k mod FAST_LINES once
    /// every part of round k − FAST_LINES + 1 was. After a round that waited for everyone
    /// this holds already; after pipelined bcasts it is waited for here.
    fn begin_round(
        &mut self,
        k: u64,
        total: u64,
        kind: u64,
        zc: Option<&ZeroCopy>,
        bytes: usize,
        fill: impl FnOnce(*mut u8),
    ) -> PResult<()> {
        let (me, b) = (self.me, (k & 1) as usize);
        self.fast = bytes <= FAST_MAX && zc.is_none() && self.checked.is_none();
        self.line = line_of(k);
        // The round whose readers must be done: a slot round reuses buffer b of round k − 2,
        // a fast round line k mod FAST_LINES of round k − FAST_LINES.
        let need = k.saturating_sub(if self.fast { FAST_LINES as u64 - 1 } else { 1 });
        if self.seen < need {
            // Only a pipelined bcast (fast lines) leaves rounds unseen. Every look at a peer's
            // line is a cache miss (and takes the line from its owner, whose next store then
            // misses too): look at the last round first, then halfway back, so that a peer a
            // round or two behind costs a look every few rounds, not two looks every round.
            let half = k.saturating_sub(FAST_LINES as u64 / 2);
            let all_at = |p: &Self, r: u64| (0..p.n()).all(|j| p.reached(j, Flag::Round(true), r));
            if all_at(self, k - 1) {
                self.seen = k - 1;
            } else if half > need && all_at(self, half) {
                self.seen = half;
            } else {
                self.wait_all(Flag::Round(true), need)?;
                self.seen = need;
            }
        }
        fill(self.slot(me, b));
        if self.fast {
            let line = &self.hdr(me).fast[self.line];
            line.total.store(total, Ordering::Relaxed);
            line.kind.store(kind, Ordering::Relaxed);
        } else {
            let d = &self.hdr(me).desc[b];
            d.total.store(total, Ordering::Relaxed);
            d.kind.store(kind, Ordering::Relaxed);
            let src = zc.map_or(0, |z| z.ids[me]);
            d.src.store(src, Ordering::Relaxed);
            if let Some((_, call)) = &self.checked {
                d.check.store(call.sig(), Ordering::Relaxed);
                for (a, w) in d.call.iter().zip(call.words()) {
                    a.store(w, Ordering::Relaxed);
                }
            }
        }
        // Release: the slot and descriptor writes above become visible with the round.
        self.publish(Flag::Round(self.fast), k);
        Ok(())
    }

    /// A whole round's entry: [`begin_round`](Self::begin_round), then wait for every rank's
    /// part and, on the first round of a call, check that every rank describes the same call.
    #[allow(clippy::too_many_arguments)]
    fn enter(
        &mut self,
        k: u64,
        first: bool,
        total: u64,
        kind: u64,
        zc: Option<&ZeroCopy>,
        bytes: usize,
        fill: impl FnOnce(*mut u8),
    ) -> PResult<()> {
        self.begin_round(k, total, kind, zc, bytes, fill)?;
        self.complete(k, first, total, kind, zc)
    }

    /// The rest of [`enter`](Self::enter) once our part is published.
    fn complete(
        &mut self,
        k: u64,
        first: bool,
        total: u64,
        kind: u64,
        zc: Option<&ZeroCopy>,
    ) -> PResult<()> {
        let b = (k & 1) as usize;
        self.wait_all(Flag::Round(self.fast), k)?;
        self.seen = k;
        if !first {
            return Ok(());
        }
        if !self.fast
            && let Some((seq, call)) = self.checked
            && (0..self.n()).all(|j| self.mode(j, k) == Some(false))
            && let Some(v) = self.check_descriptors(b, seq, call)
        {
            return Err(ProtoError::Check(Box::new(v)));
        }
        match (0..self.n()).find_map(|j| self.mismatch(j, k, total, kind, zc)) {
            // Everyone found a difference in this same round; the round is over for all, so
            // the windows stay in step for the next call.
            Some(e) => Err(ProtoError::Agreed(e)),
            None => Ok(()),
        }
    }

    /// How rank j's published part of round k (seen with Acquire) differs from ours, if it
    /// does.
    fn mismatch(
        &self,
        j: usize,
        k: u64,
        total: u64,
        kind: u64,
        zc: Option<&ZeroCopy>,
    ) -> Option<CommError> {
        let b = (k & 1) as usize;
        // Relaxed suffices: the Acquire load that saw j's part ordered these after j's
        // stores, and j cannot rewrite line or descriptor b before it has seen our part of
        // round k + 1.
        let fast = self.mode(j, k) == Some(true);
        let (t, kd, s) = if fast {
            let line = &self.hdr(j).fast[line_of(k)];
            let t = line.total.load(Ordering::Relaxed);
            (t, line.kind.load(Ordering::Relaxed), 0)
        } else {
            let d = &self.hdr(j).desc[b];
            let t = d.total.load(Ordering::Relaxed);
            (
                t,
                d.kind.load(Ordering::Relaxed),
                d.src.load(Ordering::Relaxed),
            )
        };
        let want_src = zc.map_or(0, |z| z.ids[j]);
        let (what, theirs, ours) = if t != total || t == u64::MAX {
            (
                "byte length (do all ranks pass the same count of whole elements?)",
                t,
                total,
            )
        } else if fast != self.fast {
            (
                "checked mode (RCOMM_CHECK) or shared input buffers (1: off/none, 0: on/given)",
                u64::from(fast),
                u64::from(self.fast),
            )
        } else if kd != kind {
            ("collective, element type, op or root", kd, kind)
        } else if s != want_src {
            (
                "shared buffer (every rank must pass its own buffer from one alloc_shared, or none)",
                s,
                want_src,
            )
        } else {
            return None;
        };
        Some(CommError::Mismatch {
            what: format!("shared-memory collective: {what}"),
            rank: j as u32,
            theirs,
            ours,
        })
    }

    /// Checked mode: the verdict if the ranks' calls (descriptor b, already published by
    /// every rank) differ. Every rank reads the same descriptors, so all agree.
    fn check_descriptors(
        &self,
        b: usize,
        seq: u32,
        mine: super::check::Call,
    ) -> Option<super::check::Verdict> {
        let sig = mine.sig();
        // Relaxed: ordered by the Acquire loads of `arrived` (as in `enter`).
        if (0..self.n()).all(|j| self.hdr(j).desc[b].check.load(Ordering::Relaxed) == sig) {
            return None;
        }
        let votes: Vec<super::check::Vote> = (0..self.n())
            .map(|j| {
                // Relaxed: ordered by the Acquire loads of `arrived` (as in `enter`).
                let d = &self.hdr(j).desc[b];
                let words = [0, 1, 2].map(|i| d.call[i].load(Ordering::Relaxed));
                Some((
                    d.check.load(Ordering::Relaxed),
                    super::check::Call::from_words(words),
                ))
            })
            .collect();
        Some(super::check::decide(seq, self.me as u32, &votes))
    }

    /// Marks our window as given up, so peers waiting on us stop too.
    pub(crate) fn poison(&self, code: u64) {
        self.hdr(self.me)
            .abort
            .0
            .store(code.max(1), Ordering::Release);
    }

    /// In-place allreduce of `total` bytes at `data`; `combine(acc, left)` sets
    /// `acc = left ⊕ acc`. `sig` is what else ranks must agree on (op, type). With `zc`, every
    /// rank's input is read in place from its shared buffer, and `data` must be ours.
    ///
    /// # Safety
    /// `data` is valid for reads and writes of `total` bytes, and nothing else in this process
    /// accesses them during the call; `src`, if given, is valid for reads of `total` bytes
    /// (and may not overlap `data`); with `zc`, `data` is `zc.bases[me]` and every base is
    /// valid for reads of `total` bytes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn allreduce(
        &mut self,
        round: &mut u64,
        data: *mut u8,
        total: usize,
        elem: usize,
        sig: u64,
        combine: &dyn Combine,
        src: Option<*const u8>,
        zc: Option<&ZeroCopy>,
    ) -> PResult<()> {
        let (n, me) = (self.n(), self.me);
        // Out of place, the input is copied in from `src` and `data` is only written.
        let src = src.unwrap_or(data.cast_const());
        let valid = elem > 0 && elem <= SLOT && total.is_multiple_of(elem);
        let chunk = if valid { SLOT / elem * elem } else { SLOT };
        let pub_total = if valid { total as u64 } else { u64::MAX };
        let kind = KIND_ALLREDUCE | (sig & 0xffff_ffff) << 16 | (elem as u64 & 0xffff);
        let rounds = total.div_ceil(chunk).max(1);
        for c in 0..rounds {
            let (k, b, lo, hi) = next_round(round, c, chunk, total);
            let len = hi - lo;
            // A large chunk's fold is split: rank r folds part r only, so its own part never
            // needs to leave `src` and only the others' parts go through the slot.
            let split = len > SMALL_MAX && zc.is_none();
            let elems = len / elem.max(1);
            let part = |p: usize| (p * elems / n * elem, (p + 1) * elems / n * elem);
            let (my_a, my_z) = if split && valid { part(me) } else { (0, 0) };
            self.enter(k, c == 0, pub_total, kind, zc, len, |slot| {
                if zc.is_none() {
                    // SAFETY: `src[lo..hi]` is ours (caller's contract); the slot has
                    // SLOT ≥ len bytes and nobody reads it now (every peer's done ≥ k−2).
                    // Bytes `my_a..my_z` of the slot are read by nobody (empty unless split).
                    unsafe {
                        std::ptr::copy_nonoverlapping(src.add(lo), slot, my_a);
                        std::ptr::copy_nonoverlapping(
                            src.add(lo + my_z),
                            slot.add(my_z),
                            len - my_z,
                        );
                    }
                }
            })?;
            // Agreed in `enter`: equal lengths, kinds and input sources everywhere.
            let input = |j: usize, a: usize, z: usize| -> &[u8] {
                let base = match zc {
                    // SAFETY: within the `total` bytes the caller vouches for.
                    Some(zc) => unsafe { zc.bases[j].as_ptr().add(lo) },
                    // Our own part of a split fold stays in `src`.
                    None if split && j == me => unsafe { src.add(lo).cast_mut() },
                    None => self.slot(j, b),
                };
                // SAFETY: the area holds at least `z` bytes from `base` (z ≤ len ≤ SLOT for a
                // slot; lo + z ≤ total for a shared buffer or `src`). Its owner wrote them
                // before `arrived = k` and writes them again only after every `done ≥ k`
                // (slot) or every `reduced ≥ k` (shared buffer = its output), which we publish
                // after our last read; our own shared buffer, or `src` = `data` in place, is
                // written below only after the fold, when no slice from here is alive.
                unsafe { std::slice::from_raw_parts(base.add(a), z - a) }
            };
            if len <= SMALL_MAX && zc.is_none() {
                // SAFETY: our bytes (caller's contract), disjoint from every slot.
                let out = unsafe { std::slice::from_raw_parts_mut(data.add(lo), len) };
                fold_into(combine, out, n, |j| input(j, 0, len)).map_err(ProtoError::Fatal)?;
            } else {
                let (a, z) = part(me);
                // SAFETY: our result area b has SLOT ≥ z bytes; peers read it only after our
                // `reduced = k` below and stop before their `done ≥ k`, which `enter` of
                // round k + 2 awaits before anything here is written again.
                let res =
                    unsafe { std::slice::from_raw_parts_mut(self.result(me, b).add(a), z - a) };
                fold_into(combine, res, n, |j| input(j, a, z)).map_err(ProtoError::Fatal)?;
                self.publish(Flag::Reduced, k);
                self.wait_all(Flag::Reduced, k)?;
                for j in 0..n {
                    let (a, z) = part(j);
                    // SAFETY: rank j's result area b holds its part (published by its
                    // `reduced = k`, seen with Acquire) and stays unchanged until our
                    // `done = k`; `data[lo + a..lo + z]` is ours, and with in-place inputs no
                    // peer reads it any more (everyone's `reduced ≥ k`).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            self.result(j, b).add(a),
                            data.add(lo + a),
                            z - a,
                        )
                    };
                }
            }
            if !valid {
                return Err(ProtoError::Agreed(CommError::Size { bytes: total, elem }));
            }
        }
        Ok(())
    }

    /// Broadcast of `data` from `root`. A bcast that fits a fast line is pipelined: the root
    /// publishes and returns, the others wait for the root only, so back-to-back calls
    /// overlap (the root's next round waits until every peer has taken this one). A rank
    /// whose call differs from the root's gets `Mismatch` then; the root, which reads
    /// nobody, does not (checked mode, which goes through the slots, tells every rank).
    pub(crate) fn bcast(&mut self, round: &mut u64, data: &mut [u8], root: usize) -> PResult<()> {
        let (me, total) = (self.me, data.len());
        let rounds = total.div_ceil(SLOT).max(1);
        let data_ptr = data.as_mut_ptr();
        let kind = KIND_BCAST | root as u64;
        for c in 0..rounds {
            let (k, b, lo, hi) = next_round(round, c, SLOT, total);
            let len = hi - lo;
            self.begin_round(k, total as u64, kind, None, len, |slot| {
                if me == root {
                    // SAFETY: as in allreduce: our data range, a free slot of SLOT ≥ len bytes.
                    unsafe { std::ptr::copy_nonoverlapping(data_ptr.add(lo), slot, len) };
                }
            })?;
            if self.fast {
                if me != root {
                    self.wait_on(root..root + 1, Flag::Round(true), k)?;
                    // The root runs up to FAST_LINES − 1 rounds ahead, so its line a few
                    // rounds on is likely written already: asking for it now overlaps its
                    // transfer with the calls between, where reading each line only when its
                    // round comes costs one whole cross-core miss per call.
                    let h = self.hdr(root);
                    prefetch(std::ptr::from_ref(&h.fast[line_of(k + PREFETCH_AHEAD)]).cast());
                    if let Some(e) = self.mismatch(root, k, total as u64, kind, None) {
                        // Our part is published: the windows stay in step.
                        return Err(ProtoError::Agreed(e));
                    }
                }
            } else {
                self.complete(k, c == 0, total as u64, kind, None)?;
            }
            if me != root {
                // SAFETY: the root's slot b holds `len` bytes written before it published its
                // part of round k (seen with Acquire) and left alone until it has seen ours of
                // round k + 1.
                let src = unsafe { std::slice::from_raw_parts(self.slot(root, b), len) };
                data[lo..hi].copy_from_slice(src);
            }
        }
        Ok(())
    }

    /// Allgather: every rank's `send` block (of `send.len()` bytes, equal everywhere) lands at
    /// block `j` of `recv` (`n × send.len()` bytes). Round by round each rank puts its next
    /// piece of at most [`SLOT`] bytes in its slot, and copies every peer's piece out.
    pub(crate) fn allgather(
        &mut self,
        round: &mut u64,
        send: &[u8],
        recv: &mut [u8],
    ) -> PResult<()> {
        let (me, n, blk) = (self.me, self.n(), send.len());
        // The callers pass n × blk bytes; a wrong length (published as u64::MAX) fails every
        // rank alike in `enter`.
        let total = if recv.len() == n * blk {
            blk as u64
        } else {
            u64::MAX
        };
        let rounds = blk.div_ceil(SLOT).max(1);
        for c in 0..rounds {
            let (k, b, lo, hi) = next_round(round, c, SLOT, blk);
            let len = hi - lo;
            self.enter(k, c == 0, total, KIND_ALLGATHER, None, len, |slot| {
                // SAFETY: `send[lo..hi]` is ours; the slot has SLOT ≥ len bytes and nobody
                // reads it now (every peer's done ≥ k−2).
                unsafe { std::ptr::copy_nonoverlapping(send.as_ptr().add(lo), slot, len) };
            })?;
            for j in 0..n {
                let dst = &mut recv[j * blk + lo..j * blk + hi];
                if j == me {
                    dst.copy_from_slice(&send[lo..hi]);
                } else {
                    // SAFETY: rank j's slot b holds `len` bytes written before its
                    // `arrived = k` (seen with Acquire in `enter`), left alone until every
                    // `done ≥ k`, which we publish after these copies.
                    dst.copy_from_slice(unsafe {
                        std::slice::from_raw_parts(self.slot(j, b), len)
                    });
                }
            }
        }
        Ok(())
    }
}

impl Proto<'_> {
    /// All-to-all of equal blocks: block j of every rank's `send` (`n` blocks) lands as block
    /// `rank of sender` of rank j's `recv`. Each round carries a piece of at most SLOT / n
    /// bytes of every block: a rank puts its n pieces side by side in its slot and copies
    /// piece `me` out of every peer's slot.
    pub(crate) fn alltoall(
        &mut self,
        round: &mut u64,
        send: &[u8],
        recv: &mut [u8],
    ) -> PResult<()> {
        let (me, n) = (self.me, self.n());
        let blk = send.len() / n;
        // A wrong length (published as u64::MAX) fails every rank alike in `enter`.
        let total = if send.len() == n * blk && recv.len() == send.len() {
            blk as u64
        } else {
            u64::MAX
        };
        let chunk = (SLOT / n).max(1);
        let rounds = blk.div_ceil(chunk).max(1);
        for c in 0..rounds {
            let (k, b, lo, hi) = next_round(round, c, chunk, blk);
            let len = hi - lo;
            self.enter(k, c == 0, total, KIND_ALLTOALL, None, n * len, |slot| {
                // SAFETY: the slot holds n × len ≤ SLOT bytes and nobody reads it now (every
                // done ≥ k−2); `send` holds n blocks of `blk ≥ lo + len` bytes.
                unsafe { put_pieces(slot, send, n, blk, lo, len) }
            })?;
            for j in 0..n {
                let dst = &mut recv[j * blk + lo..j * blk + hi];
                if j == me {
                    dst.copy_from_slice(&send[me * blk + lo..me * blk + hi]);
                } else {
                    // SAFETY: rank j wrote its n pieces of `len` bytes (the same chunking
                    // everywhere: the lengths agreed in `enter`) before its `arrived = k`,
                    // and leaves them until every `done ≥ k`, published after this copy.
                    dst.copy_from_slice(unsafe {
                        std::slice::from_raw_parts(self.slot(j, b).add(me * len), len)
                    });
                }
            }
        }
        Ok(())
    }
}

impl Proto<'_> {
    /// Reduce-scatter of equal blocks: `send` holds n blocks of `recv.len()` bytes (elements
    /// of `elem` bytes); block `me` of the reduction lands in `recv`, folded in the canonical
    /// order of [`allreduce`](Self::allreduce) (`combine` as there). Slots are laid out as in
    /// [`alltoall`](Self::alltoall): each rank's pieces side by side, rank r folds piece r.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reduce_scatter(
        &mut self,
        round: &mut u64,
        send: &[u8],
        recv: &mut [u8],
        elem: usize,
        sig: u64,
        combine: &dyn Combine,
    ) -> PResult<()> {
        let (me, n) = (self.me, self.n());
        let blk = recv.len();
        // Pieces are cut at multiples of 16 elements: a reducer's unit may be wider than the
        // caller's element (bytes reduced as i32), and 16 covers every built-in type.
        let unit = elem * 16;
        let valid =
            elem > 0 && unit <= SLOT / n && blk.is_multiple_of(elem) && send.len() == n * blk;
        let chunk = if valid {
            SLOT / n / unit * unit
        } else {
            (SLOT / n).max(1)
        };
        // Invalid arguments (published as u64::MAX) fail every rank alike in `enter`.
        let total = if valid { blk as u64 } else { u64::MAX };
        let kind = KIND_REDUCE_SCATTER | (sig & 0xffff_ffff) << 16 | (elem as u64 & 0xffff);
        let rounds = blk.div_ceil(chunk).max(1);
        for c in 0..rounds {
            let (k, b, lo, hi) = next_round(round, c, chunk, blk);
            let len = hi - lo;
            self.enter(k, c == 0, total, kind, None, n * len, |slot| {
                if valid {
                    // SAFETY: as in `alltoall` (`valid`: send holds n blocks of `blk` bytes).
                    unsafe { put_pieces(slot, send, n, blk, lo, len) }
                }
            })?;
            // SAFETY: rank j wrote its n pieces of `len` bytes (lengths agreed in `enter`)
            // before its `arrived = k`, and leaves them until every `done ≥ k`, published
            // after the fold.
            let piece = |j: usize| unsafe {
                std::slice::from_raw_parts(self.slot(j, b).add(me * len).cast_const(), len)
            };
            fold_into(combine, &mut recv[lo..hi], n, piece).map_err(ProtoError::Fatal)?;
        }
        Ok(())
    }
}

/// Copies bytes `lo..lo + len` of each of the `n` blocks of `blk` bytes in `send` side by
/// side into `slot` (the layout of alltoall and reduce_scatter rounds).
///
/// # Safety
/// `slot` is valid for writes of `n × len` bytes that nobody else accesses now, and
/// `lo + len ≤ blk`, `n × blk ≤ send.len()`.
unsafe fn put_pieces(slot: *mut u8, send: &[u8], n: usize, blk: usize, lo: usize, len: usize) {
    for j in 0..n {
        // SAFETY: the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(send.as_ptr().add(j * blk + lo), slot.add(j * len), len)
        };
    }
}

/// How many rounds ahead a pipelined bcast's reader asks for the root's line (2–8 measured
/// alike; fewer leave the transfer exposed, more take lines the root is still writing).
const PREFETCH_AHEAD: u64 = 4;

/// A hint that the line at `p` is read soon; nothing elsewhere.
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address; SSE is part of x86_64. Rust 1.89
    // declares the intrinsic unsafe, later releases safe, hence the allow.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The fast line of round k.
fn line_of(k: u64) -> usize {
    (k % FAST_LINES as u64) as usize
}

/// Starts round `c` of a call cut into `chunk`-byte pieces of `total`: the round's number `k`
/// (the communicator's count, advanced), its buffer `b = k & 1` and its byte range `lo..hi`.
fn next_round(round: &mut u64, c: usize, chunk: usize, total: usize) -> (u64, usize, usize, usize) {
    *round += 1;
    let (lo, hi) = (c * chunk, ((c + 1) * chunk).min(total));
    (*round, (*round & 1) as usize, lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Windows for `n` ranks played by threads of this process.
    struct Node {
        _segs: Vec<Segment>,
        bases: Vec<usize>,
    }

    fn node(n: usize) -> Node {
        let segs: Vec<Segment> = (0..n)
            .map(|_| Segment::create("rcomm-shm-test", WINDOW).unwrap())
            .collect();
        let bases = segs.iter().map(|s| s.as_ptr() as usize).collect();
        Node { _segs: segs, bases }
    }

    fn ptrs(b: &[usize]) -> Vec<NonNull<u8>> {
        b.iter()
            .map(|&p| NonNull::new(p as *mut u8).unwrap())
            .collect()
    }

    /// Neither commutative nor associative, so only the canonical order gives the reference.
    fn f(left: u32, acc: u32) -> u32 {
        left.wrapping_mul(7) ^ acc.rotate_left(3)
    }

    fn combine(acc: &mut [u8], left: &[u8]) -> Result<()> {
        let acc: &mut [u32] = bytemuck::cast_slice_mut(acc);
        let left: &[u32] = bytemuck::cast_slice(left);
        for (a, l) in acc.iter_mut().zip(left) {
            *a = f(*l, *a);
        }
        Ok(())
    }

    fn input(rank: usize, i: usize, it: usize) -> u32 {
        (rank as u32 + 1).wrapping_mul(2_654_435_761) ^ (i as u32).wrapping_mul(40_503) ^ it as u32
    }

    fn reference(n: usize, count: usize, it: usize) -> Vec<u32> {
        (0..count)
            .map(|i| {
                let mut acc = input(n - 1, i, it);
                for j in (0..n - 1).rev() {
                    acc = f(input(j, i, it), acc);
                }
                acc
            })
            .collect()
    }

    /// Runs `body(rank, proto, round)` on `n` threads over fresh windows.
    fn ranks<R: Send>(
        n: usize,
        body: impl Fn(usize, &mut Proto<'_>, &mut u64) -> R + Sync,
    ) -> Vec<R> {
        let nd = node(n);
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|r| {
                    let (bases, body) = (&nd.bases, &body);
                    s.spawn(move || {
                        let b = ptrs(bases);
                        // A protocol bug may show as a hang: every wait is bounded.
                        let mut ok = |j, waited: Duration| match waited > Duration::from_secs(20) {
                            true => Err(CommError::InvalidArg(format!("waited 20 s for rank {j}"))),
                            false => Ok(()),
                        };
                        let mut p = Proto::new(r, &b, &mut ok);
                        let mut round = 0;
                        body(r, &mut p, &mut round)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    fn allreduce(p: &mut Proto<'_>, round: &mut u64, data: &mut [u32]) -> PResult<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(data);
        // SAFETY: `bytes` is borrowed exclusively for the call.
        unsafe {
            p.allreduce(
                round,
                bytes.as_mut_ptr(),
                bytes.len(),
                4,
                0,
                &combine,
                None,
                None,
            )
        }
    }

    #[test]
    fn allreduce_folds_in_canonical_order_for_small_large_and_chunked_sizes() {
        for n in [1usize, 2, 3, 5] {
            let counts = [0usize, 1, 7, 1023, 2048, 4099, 200_003];
            let out = ranks(n, |r, p, round| {
                let mut res = Vec::new();
                for (it, &count) in counts.iter().enumerate() {
                    let mut d: Vec<u32> = (0..count).map(|i| input(r, i, it)).collect();
                    allreduce(p, round, &mut d).unwrap();
                    res.push(d);
                }
                res
            });
            for (it, &count) in counts.iter().enumerate() {
                let want = reference(n, count, it);
                for (r, o) in out.iter().enumerate() {
                    assert!(o[it] == want, "n {n} count {count} rank {r}");
                }
            }
        }
    }

    /// Out of place the input stays where it is and only the output is written; a split fold
    /// reads its own part from the input itself (never from the slot, where that part is not
    /// copied). Both with the test's non-associative fold and with a built-in op, whose fold
    /// reads both operands in one pass.
    #[test]
    fn out_of_place_and_built_in_folds_read_the_own_part_from_the_input() {
        for n in [2usize, 3] {
            let counts = [7usize, 4099, 200_003];
            let out = ranks(n, |r, p, round| {
                let mut res = Vec::new();
                for (it, &count) in counts.iter().enumerate() {
                    let src: Vec<u32> = (0..count).map(|i| input(r, i, it)).collect();
                    let mut user = vec![u32::MAX; count];
                    let mut sum = vec![u32::MAX; count];
                    for (dst, how) in [(&mut user, None), (&mut sum, Some(Op::Sum))] {
                        let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
                        let sum_op = how.map(|op| Reducer::Builtin(op, u32::DTYPE));
                        let comb: &dyn Combine = match &sum_op {
                            Some(r) => r,
                            None => &combine,
                        };
                        // SAFETY: `bytes` is ours for the call; `src` is as long and apart.
                        unsafe {
                            p.allreduce(
                                round,
                                bytes.as_mut_ptr(),
                                bytes.len(),
                                4,
                                0,
                                comb,
                                Some(bytemuck::cast_slice::<u32, u8>(&src).as_ptr()),
                                None,
                            )
                        }
                        .unwrap();
                    }
                    assert!(
                        src.iter().enumerate().all(|(i, &v)| v == input(r, i, it)),
                        "the input changed"
                    );
                    res.push((user, sum));
                }
                res
            });
            for (it, &count) in counts.iter().enumerate() {
                let want = reference(n, count, it);
                let want_sum: Vec<u32> = (0..count)
                    .map(|i| (0..n).fold(0u32, |a, j| a.wrapping_add(input(j, i, it))))
                    .collect();
                for (r, o) in out.iter().enumerate() {
                    assert!(o[it].0 == want, "n {n} count {count} rank {r}: user op");
                    assert!(o[it].1 == want_sum, "n {n} count {count} rank {r}: sum");
                }
            }
        }
    }

    /// Ranks that share CPUs sleep on the counters and are woken by the store that moves them:
    /// with sleeps of up to 10 s, one lost wake-up takes the test past its 8 s bound (the
    /// failure check then ends every wait). Each call, one rank (in turn) is late, so the
    /// others yield and go to sleep; small calls sleep on the fast line, split ones (64 KiB)
    /// on `arrived` and `reduced`.
    #[test]
    fn sleeping_waiters_are_woken_by_the_store_they_wait_for() {
        let n = 4;
        let nd = node(n);
        let t0 = Instant::now();
        let out: Vec<(usize, u32, bool)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|r| {
                    let bases = &nd.bases;
                    s.spawn(move || {
                        let b = ptrs(bases);
                        let mut give_up = |_, _| match t0.elapsed() > Duration::from_secs(8) {
                            true => Err(CommError::InvalidArg("a wake-up was lost".into())),
                            false => Ok(()),
                        };
                        let mut p = Proto::new(r, &b, &mut give_up)
                            .with_spin(0)
                            .with_sleep(true);
                        p.sleep_max = Duration::from_secs(10);
                        p.yields_before_sleep = 0;
                        let (mut round, mut bad) = (0, 0);
                        for it in 0..60 {
                            let count = [2usize, 16 << 10][it % 2];
                            if it % n == r {
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            let mut d: Vec<u32> = (0..count).map(|i| input(r, i, it)).collect();
                            if allreduce(&mut p, &mut round, &mut d).is_err() {
                                return (bad, p.slept, false);
                            }
                            bad += usize::from(d != reference(n, count, it));
                        }
                        (bad, p.slept, true)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let took = t0.elapsed();
        for (r, &(bad, slept, finished)) in out.iter().enumerate() {
            assert!(finished, "rank {r}: a wake-up was lost ({took:?})");
            assert_eq!(bad, 0, "rank {r}: wrong results");
            // Each rank waited for a late peer (10 ms) in 45 of the 60 calls, and a wait here
            // sleeps after its first yield; a third of those waits must have slept (the late
            // peer may have arrived before a wait's first yield on a slow machine).
            assert!(slept >= 15, "rank {r} slept only {slept} times");
        }
    }

    #[test]
    fn reduce_scatter_folds_block_r_on_rank_r_for_small_and_chunked_blocks() {
        for n in [1usize, 2, 3, 5] {
            // u32 elements, wrapping sums: every element's sum is known exactly.
            let sizes = [0usize, 1, 2, 1023, SLOT / n / 4, SLOT / n / 4 + 3];
            let val = |from: usize, i: usize, it: usize| (i * 2654435761 + from * 97 + it) as u32;
            let add = |acc: &mut [u8], left: &[u8]| {
                for (a, l) in acc.chunks_exact_mut(4).zip(left.chunks_exact(4)) {
                    let s = u32::from_le_bytes(a.try_into().unwrap())
                        .wrapping_add(u32::from_le_bytes(l.try_into().unwrap()));
                    a.copy_from_slice(&s.to_le_bytes());
                }
                Ok(())
            };
            let out = ranks(n, |r, p, round| {
                let mut res = Vec::new();
                for (it, &blk) in sizes.iter().enumerate() {
                    let send: Vec<u8> = (0..n * blk)
                        .flat_map(|i| val(r, i, it).to_le_bytes())
                        .collect();
                    let mut recv = vec![0xeeu8; blk * 4];
                    p.reduce_scatter(round, &send, &mut recv, 4, 1, &add)
                        .unwrap();
                    res.push(recv);
                }
                // Blocks that differ between ranks: every rank fails alike, windows in step.
                let blk = 4 + 4 * r.min(1);
                let mut recv = vec![0u8; blk];
                let e = p.reduce_scatter(round, &vec![1u8; n * blk], &mut recv, 4, 1, &add);
                let mismatch = matches!(e, Err(ProtoError::Agreed(CommError::Mismatch { .. })));
                let mut again = vec![0u8; 4];
                p.reduce_scatter(round, &vec![1u8; n * 4], &mut again, 4, 1, &add)
                    .unwrap();
                (res, mismatch, again)
            });
            for (r, (res, mismatch, again)) in out.iter().enumerate() {
                for (it, &blk) in sizes.iter().enumerate() {
                    let want: Vec<u8> = (r * blk..(r + 1) * blk)
                        .flat_map(|i| {
                            (0..n)
                                .fold(0u32, |s, from| s.wrapping_add(val(from, i, it)))
                                .to_le_bytes()
                        })
                        .collect();
                    assert!(res[it] == want, "n {n} block {blk} rank {r}");
                }
                assert_eq!(*mismatch, n > 1, "n {n} rank {r}: unequal blocks");
                assert_eq!(*again, [n as u8; 4], "n {n} rank {r}");
            }
        }
    }

    #[test]
    fn alltoall_sends_block_j_to_rank_j_for_small_and_chunked_blocks() {
        for n in [1usize, 2, 3, 5] {
            let sizes = [0usize, 1, 8, 4099, SLOT / n, SLOT / n + 7];
            let byte = |from: usize, to: usize, i: usize, it: usize| {
                (i * 31 + from * 7 + to * 13 + it) as u8
            };
            let out = ranks(n, |r, p, round| {
                let mut res = Vec::new();
                for (it, &blk) in sizes.iter().enumerate() {
                    let send: Vec<u8> = (0..n)
                        .flat_map(|to| (0..blk).map(move |i| byte(r, to, i, it)))
                        .collect();
                    let mut recv = vec![0xeeu8; n * blk];
                    p.alltoall(round, &send, &mut recv).unwrap();
                    res.push(recv);
                }
                // Blocks that differ between ranks: every rank fails alike, windows in step.
                let send = vec![1u8; n * (4 + r.min(1))];
                let mut recv = vec![0u8; send.len()];
                let e = p.alltoall(round, &send, &mut recv);
                let mismatch = matches!(e, Err(ProtoError::Agreed(CommError::Mismatch { .. })));
                let mut again = vec![0u8; n];
                p.alltoall(round, &vec![r as u8; n], &mut again).unwrap();
                (res, mismatch, again)
            });
            for (r, (res, mismatch, again)) in out.iter().enumerate() {
                for (it, &blk) in sizes.iter().enumerate() {
                    let want: Vec<u8> = (0..n)
                        .flat_map(|from| (0..blk).map(move |i| byte(from, r, i, it)))
                        .collect();
                    assert!(res[it] == want, "n {n} block {blk} rank {r}");
                }
                assert_eq!(*mismatch, n > 1, "n {n} rank {r}: unequal blocks");
                assert_eq!(*again, (0..n as u8).collect::<Vec<_>>(), "n {n} rank {r}");
            }
        }
    }

    #[test]
    fn allgather_puts_every_block_in_rank_order_for_small_and_chunked_blocks() {
        for n in [1usize, 2, 3, 5] {
            let sizes = [0usize, 1, 8, 4099, SLOT, SLOT + 7];
            let out = ranks(n, |r, p, round| {
                let mut res = Vec::new();
                for (it, &blk) in sizes.iter().enumerate() {
                    let send: Vec<u8> = (0..blk).map(|i| (i * 31 + r * 7 + it) as u8).collect();
                    let mut recv = vec![0xeeu8; n * blk];
                    p.allgather(round, &send, &mut recv).unwrap();
                    res.push(recv);
                }
                // Blocks that differ between ranks: every rank fails alike, windows in step.
                let send = vec![1u8; 4 + r.min(1)];
                let mut recv = vec![0u8; n * send.len()];
                let e = p.allgather(round, &send, &mut recv);
                let mismatch = matches!(e, Err(ProtoError::Agreed(CommError::Mismatch { .. })));
                // And the next call works.
                let mut again = vec![0u8; n];
                p.allgather(round, &[r as u8], &mut again).unwrap();
                (res, mismatch, again)
            });
            for (r, (res, mismatch, again)) in out.iter().enumerate() {
                for (it, &blk) in sizes.iter().enumerate() {
                    let want: Vec<u8> = (0..n)
                        .flat_map(|j| (0..blk).map(move |i| (i * 31 + j * 7 + it) as u8))
                        .collect();
                    assert!(res[it] == want, "n {n} block {blk} rank {r}");
                }
                assert_eq!(*mismatch, n > 1, "n {n} rank {r}: unequal blocks");
                assert_eq!(*again, (0..n as u8).collect::<Vec<_>>(), "n {n} rank {r}");
            }
        }
    }

    #[test]
    fn hundreds_of_back_to_back_calls_reuse_slots_without_races() {
        let n = 4;
        let out = ranks(n, |r, p, round| {
            let mut bad = 0;
            for it in 0..600 {
                let count = [3usize, 100, 2100][it % 3];
                let mut d: Vec<u32> = (0..count).map(|i| input(r, i, it)).collect();
                allreduce(p, round, &mut d).unwrap();
                bad += (d != reference(n, count, it)) as usize;
            }
            bad
        });
        assert_eq!(out, vec![0; n]);
    }

    #[test]
    fn in_place_inputs_from_shared_buffers_give_the_same_bits() {
        let n = 3;
        let count = 70_001; // two rounds
        let bufs: Vec<Segment> = (0..n)
            .map(|_| Segment::create("rcomm-shm-test-buf", count * 4).unwrap())
            .collect();
        let addrs: Vec<usize> = bufs.iter().map(|s| s.as_ptr() as usize).collect();
        ranks(n, |r, p, round| {
            let zc = ZeroCopy {
                bases: ptrs(&addrs),
                ids: (10..10 + n as u64).collect(),
            };
            let mine = zc.bases[r].as_ptr();
            for i in 0..count {
                // SAFETY: our own buffer, `count` u32s; nobody reads it before we arrive.
                unsafe { mine.cast::<u32>().add(i).write(input(r, i, 0)) };
            }
            // SAFETY: every base maps `count * 4` bytes; ours is only touched by this call.
            unsafe { p.allreduce(round, mine, count * 4, 4, 0, &combine, None, Some(&zc)) }
                .unwrap();
        });
        let want = reference(n, count, 0);
        for s in &bufs {
            // SAFETY: the threads have finished; the segment holds `count` u32s.
            let got = unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u32>(), count) };
            assert!(got == &want[..]);
        }
    }

    #[test]
    fn different_lengths_are_an_error_on_every_rank_and_the_windows_stay_usable() {
        let n = 3;
        let out = ranks(n, |r, p, round| {
            let mut d = vec![1u32; if r == 1 { 5 } else { 6 }];
            let e = allreduce(p, round, &mut d).unwrap_err();
            let agreed = matches!(e, ProtoError::Agreed(CommError::Mismatch { .. }));
            let mut big = vec![2u32; if r == 0 { 100_000 } else { 100_001 }];
            let big_err = allreduce(p, round, &mut big).is_err();
            // One rank's round fits a fast line, the others' go through the slots.
            let mut mixed = vec![3u32; if r == 2 { 8 } else { 20 }];
            let mixed_err = matches!(
                allreduce(p, round, &mut mixed),
                Err(ProtoError::Agreed(CommError::Mismatch { .. }))
            );
            let mut d: Vec<u32> = (0..9).map(|i| input(r, i, 1)).collect();
            allreduce(p, round, &mut d).unwrap();
            let mut b = vec![r as u32; 20];
            // a bcast through the slots with a different root on one rank
            let bad_root = p
                .bcast(round, bytemuck::cast_slice_mut(&mut b), r.min(1))
                .is_err();
            let msg = e.into_inner().to_string();
            (agreed && big_err && mixed_err && bad_root, d, msg)
        });
        for (errs, d, msg) in out {
            assert!(errs, "{msg}");
            assert_eq!(d, reference(n, 9, 1));
        }
    }

    /// Pipelined (fast-line) bcasts from changing roots, between other rounds: a root that
    /// writes a line before every peer took the last one, or a rank that reuses a buffer
    /// before every peer is past it, gives some rank wrong bytes.
    #[test]
    fn back_to_back_small_bcasts_from_changing_roots_deliver_every_roots_bytes() {
        for n in [2usize, 3, 4] {
            let out = ranks(n, |r, p, round| {
                let mut bad = 0;
                for it in 0..1200 {
                    // Runs of one root (its lead over the others grows to the fast lines'
                    // depth), then roots that change every call or two.
                    let root = match it % 200 < 100 {
                        true => it / 200 % n,
                        false => (it / 3 + it % 2) % n,
                    };
                    let len = match it % 200 < 100 {
                        // 99 fast rounds in a row: the lead reaches every line's reuse.
                        true if it % 100 == 99 => 100,
                        true => [8usize, 40, 1, 8][it % 4],
                        false => [1usize, 8, 40, 41, 3, 100][it % 6],
                    };
                    let val = |i: usize| (it * 31 + i * 7 + root) as u8;
                    let mut d: Vec<u8> = (0..len)
                        .map(|i| if r == root { val(i) } else { 0xee })
                        .collect();
                    p.bcast(round, &mut d, root).unwrap();
                    bad += usize::from(d.iter().enumerate().any(|(i, &x)| x != val(i)));
                    if it % 37 == 0 {
                        let mut a: Vec<u32> = (0..3).map(|i| input(r, i, it)).collect();
                        allreduce(p, round, &mut a).unwrap();
                        bad += usize::from(a != reference(n, 3, it));
                    }
                }
                bad
            });
            assert_eq!(out, vec![0; n], "n {n}");
        }
    }

    /// In a pipelined bcast a rank whose call differs from the root's is told; the root,
    /// which waits for nobody, is not, and the windows stay in step for everyone.
    #[test]
    fn a_small_bcast_that_differs_from_the_roots_fails_on_that_rank_only() {
        let n = 3;
        let out = ranks(n, |r, p, round| {
            let mut d = vec![r as u8; if r == 2 { 7 } else { 8 }];
            let bad_len = p.bcast(round, &mut d, 0);
            let mut d = vec![r as u8; 8];
            let mut a: Vec<u32> = (0..5).map(|i| input(r, i, 9)).collect();
            allreduce(p, round, &mut a).unwrap();
            p.bcast(round, &mut d, 1).unwrap();
            (bad_len.map_err(|e| e.into_inner().to_string()), a, d)
        });
        for (r, (bad_len, a, d)) in out.into_iter().enumerate() {
            match r {
                2 => assert!(
                    bad_len.as_ref().is_err_and(|e| e.contains("byte length")),
                    "{bad_len:?}"
                ),
                _ => assert!(bad_len.is_ok(), "rank {r}: {bad_len:?}"),
            }
            assert_eq!(a, reference(n, 5, 9), "rank {r}");
            assert_eq!(d, vec![1u8; 8], "rank {r}");
        }
    }

    #[test]
    fn bcast_copies_the_roots_bytes_in_chunks() {
        let n = 4;
        let len = 3 * SLOT + 17;
        for root in [0, n - 1] {
            let out = ranks(n, |r, p, round| {
                let mut d: Vec<u8> = (0..len)
                    .map(|i| if r == root { (i % 251) as u8 } else { 0 })
                    .collect();
                p.bcast(round, &mut d, root).unwrap();
                d
            });
            let want: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            assert!(out.iter().all(|d| *d == want));
        }
    }

    #[test]
    fn a_failure_one_rank_sees_reaches_ranks_that_wait_on_others() {
        // Rank 3 never arrives; only rank 0's liveness check notices. Ranks 1 and 2 wait on
        // rank 3 too but their checks see nothing: they must stop because rank 0 gave up.
        let n = 4;
        let nd = node(n);
        let t0 = Instant::now();
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n - 1)
                .map(|r| {
                    let bases = &nd.bases;
                    s.spawn(move || {
                        let b = ptrs(bases);
                        let mut check = |j: usize, _: Duration| {
                            if r == 0 && j == 3 && t0.elapsed() > Duration::from_millis(30) {
                                Err(CommError::Protocol {
                                    rank: 3,
                                    why: "gone".into(),
                                })
                            } else {
                                Ok(())
                            }
                        };
                        let mut p = Proto::new(r, &b, &mut check);
                        let mut round = 0;
                        let mut d = vec![1u32; 10];
                        let e = allreduce(&mut p, &mut round, &mut d).unwrap_err();
                        if r == 0 {
                            p.poison(u64::MAX);
                        }
                        format!("{:?}", e)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(errs[0].contains("gone"), "{errs:?}");
        assert!(
            errs[1..].iter().all(|e| e.contains("Aborted { j: 0")),
            "{errs:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_rank_that_never_arrives_ends_the_others_wait_through_the_liveness_check() {
        let n = 3;
        let nd = node(n);
        let t0 = Instant::now();
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n - 1)
                .map(|r| {
                    let bases = &nd.bases;
                    s.spawn(move || {
                        let b = ptrs(bases);
                        let mut dead_after_50ms = |_, _| {
                            if t0.elapsed() > Duration::from_millis(50) {
                                Err(CommError::Protocol {
                                    rank: 2,
                                    why: "gone".into(),
                                })
                            } else {
                                Ok(())
                            }
                        };
                        let mut p = Proto::new(r, &b, &mut dead_after_50ms);
                        let mut round = 0;
                        let mut d = vec![1u32; 10];
                        match allreduce(&mut p, &mut round, &mut d) {
                            Err(ProtoError::Fatal(e)) => e.to_string(),
                            other => panic!("{other:?}"),
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(errs.iter().all(|e| e.contains("gone")), "{errs:?}");
        assert!(t0.elapsed() < Duration::from_secs(2));
    }
}
