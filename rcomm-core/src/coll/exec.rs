//! The schedule executor: runs a [`Schedule`] over point-to-point on the communicator's
//! internal context, blocking over borrowed buffers or step by step over owned ones (the
//! non-blocking requests, which the progress thread may advance). The stepping code
//! ([`advance`], [`post`], [`complete`]) is written over a [`Port`]: the communicator's
//! ([`CommPort`]) here, engines on the simulated fabric in the tests (`coll::simtests`).

use super::check::Stamp;
use super::port::{Batch, Pending, Port};
use super::reduce::{Order, Reducer};
use super::schedule::{Buf, Chunk, Phase, Schedule, Step};
pub(crate) use crate::coll_state::{Advance, ChoiceKey, CollShared, SchedKey};
use crate::comm::{Communicator, Tag};
use crate::p2p::engine::{Engine, ReqId};
use crate::p2p::matcher::Source;
use crate::p2p::region::Region;
use crate::{CommError, Result};
use rcomm_runtime::algo::{Algo, Coll};
use std::sync::{Arc, Mutex};

pub(crate) use super::seq::TAG_COLL_BASE;

/// Above this many cached schedules the cache starts over (a job cycles through few shapes).
const CACHE_MAX: usize = 256;
/// Scratch buffers kept for reuse.
const SCRATCH_KEEP: usize = 4;

impl CollShared {
    pub(crate) fn new(async_progress: bool) -> Self {
        Self {
            progress: async_progress.then(|| Arc::new(crate::coll_state::Progress::default())),
            ..Default::default()
        }
    }

    pub(crate) fn cached_choice(&self, key: &ChoiceKey) -> Option<Algo> {
        let c = self.choices.lock().unwrap_or_else(|p| p.into_inner());
        c.get(key).copied()
    }

    pub(crate) fn remember_choice(&self, key: ChoiceKey, algo: Algo) {
        let mut c = self.choices.lock().unwrap_or_else(|p| p.into_inner());
        if c.len() >= CACHE_MAX {
            c.clear();
        }
        c.insert(key, algo);
    }

    /// Whether this choice is logged for the first time (and remembers it).
    pub(crate) fn first_choice(&self, op: Coll, n: u32, bytes: usize, algo: Algo) -> bool {
        let mut l = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        l.len() < 4096 && l.insert((op, n, bytes, algo))
    }

    /// The cached schedule for `key`, built by `make` on a miss.
    pub(crate) fn schedule(&self, key: SchedKey, make: impl FnOnce() -> Schedule) -> Arc<Schedule> {
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = c.get(&key) {
            return s.clone();
        }
        if c.len() >= CACHE_MAX {
            c.clear();
        }
        let mut s = make();
        s.op = key.op;
        let s = Arc::new(s);
        c.insert(key, s.clone());
        s
    }

    /// Remembers a started non-blocking collective (forgetting finished and dropped ones).
    fn register_inflight(&self, item: &Arc<Mutex<dyn Advance>>) {
        let mut l = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        l.retain(|w| {
            w.upgrade()
                .is_some_and(|i| i.try_lock().map(|s| !s.finished()).unwrap_or(true))
        });
        l.push(Arc::downgrade(item));
        self.any_inflight
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Advances the non-blocking collectives in flight, if any, without blocking: called by
    /// every blocking wait (point-to-point, blocking collectives, shared-memory spins), so a
    /// rank inside a blocking call still does its part of the collectives it started — another
    /// rank may wait for one of them before it makes the call this rank is blocked in.
    pub(crate) fn advance_inflight(&self) {
        use std::sync::atomic::Ordering;
        if !self.any_inflight.load(Ordering::Acquire) {
            return;
        }
        if !self.advance_others(&mut Vec::new()) {
            let mut l = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            l.retain(|w| {
                w.upgrade()
                    .is_some_and(|i| i.try_lock().map(|s| !s.finished()).unwrap_or(true))
            });
            if l.is_empty() {
                self.any_inflight.store(false, Ordering::Release);
            }
        }
    }

    /// Advances, without blocking, every registered non-blocking collective that no thread
    /// holds (the caller holds its own, so it is skipped), and pushes the requests each still
    /// waits for onto `groups`, one entry per collective. Returns whether any is unfinished.
    pub(crate) fn advance_others(&self, groups: &mut Vec<Vec<crate::p2p::engine::ReqId>>) -> bool {
        let items: Vec<Arc<Mutex<dyn Advance>>> = {
            let l = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            if l.is_empty() {
                return false;
            }
            l.iter().filter_map(std::sync::Weak::upgrade).collect()
        };
        let mut any = false;
        for it in &items {
            let Ok(mut s) = it.try_lock() else { continue };
            if s.finished() {
                continue;
            }
            // An error is kept in the request for its owner.
            let _ = s.advance(false);
            if !s.finished() {
                let mut g = Vec::new();
                s.pending_reqs(&mut g);
                groups.push(g);
                any = true;
            }
        }
        any
    }

    /// A scratch buffer of at least `len` bytes (contents unspecified).
    pub(crate) fn take_scratch(&self, len: usize) -> Vec<u8> {
        if len == 0 {
            return Vec::new();
        }
        let mut pool = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = pool.iter().position(|b| b.len() >= len) {
            return pool.swap_remove(i);
        }
        drop(pool);
        vec![0; len]
    }

    pub(crate) fn put_scratch(&self, buf: Vec<u8>) {
        if buf.is_empty() {
            return;
        }
        let mut pool = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < SCRATCH_KEEP {
            pool.push(buf);
        } else if let Some(smallest) = pool.iter_mut().min_by_key(|b| b.len())
            && smallest.len() < buf.len()
        {
            *smallest = buf;
        }
    }
}

/// What [`CommPort::wait`] reports for a failed check (not a world rank).
const CHECK_FAILED: u32 = u32::MAX;

thread_local! {
    /// See `run_schedule_untimed`.
    static PHASE_REQS: std::cell::Cell<Vec<Pending<ReqId>>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The operand order of a reduction step.
fn order_of(st: &Step) -> Order {
    match st {
        Step::Reduce { order, .. } => *order,
        _ => Order::SrcFirst,
    }
}

/// Runs one local step (a copy or a reduction between chunks of the three buffers).
fn local_step(
    st: &Step,
    data: &mut [u8],
    input: &[u8],
    tmp: &mut [u8],
    reduce: Option<&Reducer>,
) -> Result<()> {
    let (dst, src) = match st {
        Step::Reduce { dst, src, .. } | Step::Copy { dst, src } => (*dst, *src),
        _ => return Ok(()),
    };
    let is_reduce = matches!(st, Step::Reduce { .. });
    let r = match (is_reduce, reduce) {
        (true, None) => {
            return Err(CommError::InvalidArg("reduction step without an op".into()));
        }
        (_, r) => r,
    };
    let run = |d: &mut [u8], s: &[u8]| -> Result<()> {
        match r {
            Some(r) if is_reduce => r.apply(d, s, order_of(st)),
            _ => {
                d.copy_from_slice(s);
                Ok(())
            }
        }
    };
    let range = |c: &Chunk, len: usize| -> Result<std::ops::Range<usize>> {
        if c.off + c.len > len {
            return Err(CommError::InvalidArg(
                "schedule chunk outside its buffer".into(),
            ));
        }
        Ok(c.off..c.off + c.len)
    };
    if dst.len != src.len {
        return Err(CommError::InvalidArg(
            "schedule step between chunks of different lengths".into(),
        ));
    }
    match (dst.buf, src.buf) {
        (Buf::Input, _) => Err(CommError::InvalidArg(
            "schedule writes the read-only input".into(),
        )),
        (Buf::Data, Buf::Tmp) => {
            let (d, s) = (range(&dst, data.len())?, range(&src, tmp.len())?);
            run(&mut data[d], &tmp[s])
        }
        (Buf::Tmp, Buf::Data) => {
            let (d, s) = (range(&dst, tmp.len())?, range(&src, data.len())?);
            run(&mut tmp[d], &data[s])
        }
        (Buf::Data, Buf::Input) => {
            let (d, s) = (range(&dst, data.len())?, range(&src, input.len())?);
            run(&mut data[d], &input[s])
        }
        (Buf::Tmp, Buf::Input) => {
            let (d, s) = (range(&dst, tmp.len())?, range(&src, input.len())?);
            run(&mut tmp[d], &input[s])
        }
        (Buf::Data, Buf::Data) | (Buf::Tmp, Buf::Tmp) => {
            let b = if dst.buf == Buf::Data { data } else { tmp };
            let (d, s) = (range(&dst, b.len())?, range(&src, b.len())?);
            if is_reduce {
                let s = b[s].to_vec();
                run(&mut b[d], &s)
            } else {
                b.copy_within(s, d.start);
                Ok(())
            }
        }
    }
}

/// Where a run of a schedule stands: the phase it is in and that phase's messages in flight.
#[derive(Debug)]
pub(crate) struct Cursor<R> {
    pub(crate) phase: usize,
    pub(crate) pending: Vec<Pending<R>>,
}

impl<R> Cursor<R> {
    /// At the first phase, with `list` (empty) for the phases' messages.
    pub(crate) fn new(list: Vec<Pending<R>>) -> Self {
        debug_assert!(list.is_empty());
        Self {
            phase: 0,
            pending: list,
        }
    }
}

/// Runs `s` from where `cur` stands over the buffers: posts each phase's messages, completes
/// them, runs its local steps. With `block` it runs to the end; without, it returns `Ok(false)`
/// at the first phase whose messages are still in flight. Ok(true) once every phase ran. After
/// an error nothing is in flight and `cur.pending` is empty.
#[allow(clippy::too_many_arguments)]
pub(crate) fn advance<P: Port>(
    port: &mut P,
    s: &Schedule,
    cur: &mut Cursor<P::Req>,
    data: &mut [u8],
    input: &[u8],
    tmp: &mut [u8],
    reduce: Option<&Reducer>,
    block: bool,
) -> Result<bool> {
    while let Some(ph) = s.phases.get(cur.phase) {
        if cur.pending.is_empty() {
            post_host(port, ph, data, input, tmp, &mut cur.pending)?;
        }
        if !block && !cur.pending.is_empty() && !port.ready(&cur.pending) {
            return Ok(false);
        }
        complete(port, &mut cur.pending)?;
        for st in &ph.local {
            local_step(st, data, input, tmp, reduce)?;
        }
        cur.phase += 1;
    }
    Ok(true)
}

/// [`post`] with chunks of host buffers.
fn post_host<P: Port>(
    port: &mut P,
    ph: &Phase,
    data: &mut [u8],
    input: &[u8],
    tmp: &mut [u8],
    reqs: &mut Vec<Pending<P::Req>>,
) -> Result<()> {
    let region = |c: &Chunk| -> Result<Region> {
        let (base, len) = match c.buf {
            Buf::Data => (data.as_mut_ptr(), data.len()),
            Buf::Tmp => (tmp.as_mut_ptr(), tmp.len()),
            Buf::Input => (input.as_ptr().cast_mut(), input.len()),
        };
        if c.off + c.len > len {
            return Err(CommError::InvalidArg(
                "schedule chunk outside its buffer".into(),
            ));
        }
        // SAFETY: the chunk lies inside its buffer (checked), the chunks of one phase do
        // not overlap where one is written, `Input` chunks are only sent (never written),
        // and every request of the phase completes (or is abandoned) before the buffers are
        // touched again or released (`complete`, and `CollRequest`'s drop).
        Ok(unsafe { Region::from_raw(base.add(c.off), c.len) })
    };
    post(port, ph, region, reqs)
}

/// Posts a phase's receives, then its sends, each chunk at `region(chunk)` (an executor's
/// buffers: host slices, or device memory), into `reqs` (empty). On error, the messages
/// already posted are waited for (so no buffer is used after), `reqs` is emptied and the first
/// error is returned.
pub(crate) fn post<P: Port>(
    port: &mut P,
    ph: &Phase,
    mut region: impl FnMut(&Chunk) -> Result<Region>,
    reqs: &mut Vec<Pending<P::Req>>,
) -> Result<()> {
    debug_assert!(reqs.is_empty());
    reqs.reserve(ph.xfers.len());
    let mut err = None;
    {
        let mut b = port.batch();
        for st in &ph.xfers {
            if let Step::Recv { peer, dst } = st {
                if dst.buf == Buf::Input {
                    err = err.or(Some(CommError::InvalidArg(
                        "schedule receives into the read-only input".into(),
                    )));
                    continue;
                }
                match region(dst).and_then(|r| b.recv(*peer, r)) {
                    Ok(req) => reqs.push(Pending {
                        req,
                        want: Some(dst.len),
                        peer: *peer,
                    }),
                    Err(x) => err = err.or(Some(x)),
                }
            }
        }
        for st in &ph.xfers {
            if let Step::Send { peer, src } = st {
                match region(src).and_then(|r| b.send(*peer, r)) {
                    Ok(req) => reqs.push(Pending {
                        req,
                        want: None,
                        peer: *peer,
                    }),
                    Err(x) => err = err.or(Some(x)),
                }
            }
        }
    }
    if let Some(x) = err {
        port.drain(reqs);
        reqs.clear();
        return Err(x);
    }
    Ok(())
}

/// Waits for every message of a phase and takes their results, leaving `reqs` empty (for
/// the next phase); the local steps are the executor's. A receive that brought another size
/// than its chunk's is a mismatch between the ranks' calls.
pub(crate) fn complete<P: Port>(port: &mut P, reqs: &mut Vec<Pending<P::Req>>) -> Result<()> {
    if let Err(e) = port.wait(reqs) {
        reqs.clear();
        return Err(e);
    }
    // Every request is done: their results, in one batch.
    let mut err = None;
    let mut b = port.batch();
    for p in reqs.drain(..) {
        match b.take(p.req) {
            Ok(bytes) => {
                if let Some(len) = p.want
                    && bytes != len
                {
                    err = err.or(Some(CommError::Mismatch {
                        what: "collective message size (do all ranks pass the same count?)".into(),
                        rank: p.peer,
                        theirs: bytes as u64,
                        ours: len as u64,
                    }));
                }
            }
            Err(x) => err = err.or(Some(x)),
        }
    }
    drop(b);
    if let Some(x) = err {
        return Err(port.failure(x));
    }
    Ok(())
}

/// A communicator as the [`Port`] of one collective (see [`Communicator::port`]).
pub(crate) struct CommPort<'c> {
    comm: &'c Communicator,
    op: &'static str,
    tag: Tag,
    stamp: Stamp,
    chk: Option<Tag>,
}

/// Posts and results under one hold of the engine's lock.
pub(crate) struct CommBatch<'b> {
    comm: &'b Communicator,
    e: std::sync::MutexGuard<'b, Engine>,
    op: &'static str,
    tag: Tag,
    stamp: Stamp,
}

impl Batch for CommBatch<'_> {
    type Req = ReqId;

    fn recv(&mut self, peer: u32, dst: Region) -> Result<ReqId> {
        let w = self.comm.world_rank(peer)?;
        self.e.irecv(
            self.comm.ctx() + 1,
            Source::Rank(w),
            self.tag.sel(),
            dst,
            self.op,
        )
    }

    fn send(&mut self, peer: u32, src: Region) -> Result<ReqId> {
        let w = self.comm.world_rank(peer)?;
        self.e
            .isend_stamped(self.comm.ctx() + 1, w, self.tag.0, src, self.op, self.stamp)
    }

    fn take(&mut self, req: ReqId) -> Result<usize> {
        self.e.take(req).map(|st| st.bytes)
    }
}

impl Port for CommPort<'_> {
    type Req = ReqId;
    type Batch<'b>
        = CommBatch<'b>
    where
        Self: 'b;

    fn batch(&mut self) -> CommBatch<'_> {
        CommBatch {
            comm: self.comm,
            e: self.comm.shared().lock(),
            op: self.op,
            tag: self.tag,
            stamp: self.stamp,
        }
    }

    fn ready(&mut self, reqs: &[Pending<ReqId>]) -> bool {
        let mut e = self.comm.shared().lock();
        e.progress();
        self.chk.is_some_and(|t| self.comm.check_failed(&e, t))
            || reqs.iter().all(|p| e.is_done(p.req))
    }

    fn wait(&mut self, reqs: &[Pending<ReqId>]) -> Result<()> {
        let (comm, chk, op) = (self.comm, self.chk, self.op);
        // Wait for the phase, or for news that a member of the communicator (or of the one it
        // serves, see `failure_scope`) failed: then this collective cannot complete anywhere,
        // and waiting on a live but stuck neighbour would last until the launcher's grace
        // ends. The requests still in flight are abandoned (they go on over private buffers).
        // The watchdog (RCOMM_TIMEOUT): no request of the phase completing for that long.
        let mut watch = crate::fr::Watch::new();
        let mut completed = 0;
        let lost = comm.shared().block_on_ticked(
            |e| {
                if let Some(t) = chk
                    && comm.check_failed(e, t)
                {
                    return Some(Ok(Some(CHECK_FAILED)));
                }
                if reqs.iter().all(|p| e.is_done(p.req)) {
                    return Some(Ok(None));
                }
                comm.failed_member(e).map(|w| Ok(Some(w)))
            },
            |e, now| {
                let n = reqs.iter().filter(|p| e.is_done(p.req)).count();
                if n != completed {
                    completed = n;
                    watch.progress(now);
                }
                watch
                    .expired(now)
                    .map(|waited| Err(watch.error(waited, None)))
            },
        );
        let abandon = || {
            let mut e = comm.shared().lock();
            for p in reqs {
                e.abandon(p.req);
            }
            e
        };
        let lost = match lost {
            Ok(lost) => lost,
            Err(err) => {
                drop(abandon());
                comm.shared().report_hang(&err);
                return Err(err);
            }
        };
        if let (Some(CHECK_FAILED), Some(t)) = (lost, chk) {
            drop(abandon());
            return Err(comm.check_error(t));
        }
        if let Some(w) = lost {
            let e = abandon();
            let err = e.lost_error(w, op).unwrap_or(CommError::PeerLost {
                rank: w,
                host: e.host_of(w).to_string(),
                op,
                why: "failed".into(),
            });
            drop(e);
            return Err(comm.with_other_losses(err));
        }
        Ok(())
    }

    fn drain(&mut self, reqs: &[Pending<ReqId>]) {
        for p in reqs {
            let _ = self.comm.shared().wait(p.req);
        }
    }

    fn failure(&mut self, e: CommError) -> CommError {
        self.comm.with_other_losses(e)
    }
}

impl Communicator {
    /// The tag of the next collective on this communicator.
    pub(crate) fn next_coll_tag(&self) -> Tag {
        let seq = self
            .coll_part()
            .seq()
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Tag(TAG_COLL_BASE + (seq % (1 << 30)) as i32)
    }

    /// Runs a schedule over `data` (and a read-only `input`) to completion.
    pub(crate) fn run_schedule(
        &self,
        s: &Schedule,
        data: &mut [u8],
        input: &[u8],
        reduce: Option<&Reducer>,
    ) -> Result<()> {
        debug_assert!(
            !s.op.is_empty(),
            "an unnamed schedule: its errors would say \"collective\""
        );
        let t0 = self.straggler_start();
        let res = self.run_schedule_untimed(s, data, input, reduce);
        self.straggler_end(t0);
        res
    }

    fn run_schedule_untimed(
        &self,
        s: &Schedule,
        data: &mut [u8],
        input: &[u8],
        reduce: Option<&Reducer>,
    ) -> Result<()> {
        let tag = self.next_coll_tag();
        let (stamp, chk) = self.check_start(tag, s)?;
        if s.phases.is_empty() {
            crate::fr::end_coll(self.ctx(), &Ok::<(), CommError>(()));
            return Ok(());
        }
        let coll = &self.shared().coll;
        let mut tmp = coll.take_scratch(s.tmp_len);
        // The phases' request list, kept per thread so that a steady stream of collectives
        // does not allocate one per phase (a nested collective finds it taken and makes its own).
        let mut cur = Cursor::new(PHASE_REQS.take());
        let mut port = self.port(s.op_name(), tag, stamp, chk);
        let res = advance(&mut port, s, &mut cur, data, input, &mut tmp, reduce, true).map(drop);
        cur.pending.clear();
        PHASE_REQS.set(cur.pending);
        coll.put_scratch(tmp);
        let res = res.map_err(|e| self.in_sequence(e, tag));
        crate::fr::end_coll(self.ctx(), &res);
        res
    }

    /// Says which collective of the communicator a lost peer failed: its sequence number, alike
    /// on every rank, so the survivors' errors can be matched up.
    pub(crate) fn in_sequence(&self, e: CommError, tag: Tag) -> CommError {
        let seq = tag.0 - TAG_COLL_BASE;
        let note = |why: String| {
            format!(
                "{why} (in collective #{seq} of communicator {})",
                self.ctx() / 2
            )
        };
        match e {
            CommError::PeerLost {
                rank,
                host,
                op,
                why,
            } => CommError::PeerLost {
                rank,
                host,
                op,
                why: note(why),
            },
            CommError::PeerHung {
                rank,
                host,
                op,
                why,
            } => CommError::PeerHung {
                rank,
                host,
                op,
                why: note(why),
            },
            e => e,
        }
    }

    /// This communicator as the [`Port`] of one collective: messages on the internal context
    /// with the collective's tag (and checked mode's stamp; `chk`: its call number, whose
    /// failed check ends a wait).
    pub(crate) fn port(
        &self,
        op: &'static str,
        tag: Tag,
        stamp: Stamp,
        chk: Option<Tag>,
    ) -> CommPort<'_> {
        CommPort {
            comm: self,
            op,
            tag,
            stamp,
            chk,
        }
    }

    /// A world rank the launcher reported failed whose failure fails this communicator's
    /// collectives, if any (the first reported). A closed connection alone does not count: a
    /// rank that did its part, finalized and left closes its connections too.
    pub(crate) fn failed_member(&self, e: &crate::p2p::engine::Engine) -> Option<u32> {
        e.reported_failed()
            .iter()
            .copied()
            .find(|&w| self.in_failure_scope(w))
    }

    /// A collective that lost a peer often lost it because another member failed first (the
    /// peer gave up on that one and exited): after taking in the launcher's latest notices,
    /// the error names the first member the launcher reported failed in this communicator as
    /// the cause, and lists every other member known to be lost, so each survivor points at
    /// the same rank whichever of its peers it happened to wait on.
    /// The init-time tuning (a collective of point-to-point messages) names its losses so too.
    pub(crate) fn with_other_losses(&self, err: CommError) -> CommError {
        let CommError::PeerLost { rank, op, .. } = &err else {
            return err;
        };
        let (rank, op) = (*rank, *op);
        let mut e = self.shared().lock();
        self.shared().apply_notices(&mut e);
        let (first, also_peer) = match self
            .failed_member(&e)
            .filter(|&w| w != rank)
            .and_then(|w| e.lost_error(w, op))
        {
            Some(cause) => (cause, Some(err)),
            None => (err, None),
        };
        let CommError::PeerLost {
            rank: first_rank,
            host,
            op,
            why,
        } = first
        else {
            unreachable!("both are PeerLost")
        };
        let mut others: Vec<(u32, String)> = e
            .failed()
            .iter()
            .filter(|(w, _)| **w != first_rank && self.in_failure_scope(**w))
            .map(|(w, why)| (*w, format!("rank {w} on {} ({why})", e.host_of(*w))))
            .collect();
        // The peer this rank waited on, also when no transport recorded it lost.
        if let Some(CommError::PeerLost {
            rank: p,
            host: h,
            why: pw,
            ..
        }) = also_peer
            && !others.iter().any(|(w, _)| *w == p)
        {
            others.push((p, format!("rank {p} on {h} ({pw})")));
        }
        others.sort_unstable();
        let why = if others.is_empty() {
            why
        } else {
            let list: Vec<String> = others.into_iter().map(|(_, s)| s).collect();
            format!("{why}; also lost in this communicator: {}", list.join(", "))
        };
        CommError::PeerLost {
            rank: first_rank,
            host,
            op,
            why,
        }
    }
}

/// How a finished non-blocking collective turns its working buffer into the result.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Post {
    /// The whole buffer.
    Whole,
    /// `len` elements from element `start`.
    Range(usize, usize),
    /// Nothing (an empty vector): e.g. a non-root's reduce.
    Nothing,
}

/// The state of a non-blocking collective: owned buffers and the position in the schedule.
/// Shared with the progress thread when there is one.
pub(crate) struct NbState<T: bytemuck::Pod + Send> {
    comm: Communicator,
    tag: Tag,
    /// Checked mode's header stamp.
    stamp: Stamp,
    sched: Arc<Schedule>,
    data: Vec<T>,
    input: Vec<T>,
    tmp: Vec<u8>,
    cur: Cursor<ReqId>,
    reduce: Option<Reducer>,
    post: Post,
    failed: Option<CommError>,
    /// The failure was handed to the caller by `test`.
    reported: bool,
    /// Its flight-recorder record, ended when it finishes.
    fr: rcomm_runtime::flight::Handle,
}

impl<T: bytemuck::Pod + Send> NbState<T> {
    fn step(&mut self, block: bool) -> Result<bool> {
        let mut port = self.comm.port(
            self.sched.op_name(),
            self.tag,
            self.stamp,
            self.comm.shared().check.then_some(self.tag),
        );
        advance(
            &mut port,
            &self.sched,
            &mut self.cur,
            bytemuck::cast_slice_mut(&mut self.data),
            bytemuck::cast_slice(&self.input),
            &mut self.tmp,
            self.reduce.as_ref(),
            block,
        )
    }

    /// Advances to completion (or failure). While other non-blocking collectives are in
    /// flight it advances them too, waking whenever one of them (or this one) can take a step:
    /// another rank may be waiting for one of them before it takes part in this one again.
    fn advance_blocking(&mut self) -> Result<bool> {
        let shared = self.comm.shared().clone();
        // Its waits are watched, and its errors named, as this collective's.
        let _current = crate::fr::enter(self.fr);
        let mut groups = Vec::new();
        loop {
            if self.advance(false)? {
                return Ok(true);
            }
            groups.clear();
            if !shared.coll.advance_others(&mut groups) {
                // Nothing else in flight (or all of it in other threads' hands).
                return self.advance(true);
            }
            let mut mine = Vec::new();
            self.pending_reqs(&mut mine);
            groups.push(mine);
            let comm = &self.comm;
            let chk = shared.check.then_some(self.tag);
            let mut watch = crate::fr::Watch::new();
            let lost = shared.block_on_ticked(
                |e| {
                    if chk.is_some_and(|t| comm.check_failed(e, t)) {
                        return Some(Ok(true));
                    }
                    if groups
                        .iter()
                        .any(|g| !g.is_empty() && g.iter().all(|&id| e.is_done(id)))
                    {
                        return Some(Ok(false));
                    }
                    comm.failed_member(e).map(|_| Ok(true))
                },
                |_, now| {
                    watch
                        .expired(now)
                        .map(|waited| Err(watch.error(waited, None)))
                },
            );
            let lost = match lost {
                Ok(lost) => lost,
                Err(err) => {
                    self.time_out(err);
                    return Ok(true);
                }
            };
            if lost {
                // The blocking path reports the failure (and abandons what is in flight).
                return self.advance(true);
            }
        }
    }

    /// The watchdog fired while waiting for this collective: it fails (what is in flight goes
    /// on over private buffers), and the launcher is asked for a hang report.
    fn time_out(&mut self, err: CommError) {
        {
            let mut e = self.comm.shared().lock();
            for p in self.cur.pending.drain(..) {
                e.abandon(p.req);
            }
        }
        self.comm.shared().report_hang(&err);
        self.cur.phase = self.sched.phases.len();
        self.release_scratch();
        crate::fr::end(self.fr, Some(&err));
        self.fr = rcomm_runtime::flight::Handle::NONE;
        self.failed = Some(err);
    }

    fn release_scratch(&mut self) {
        let tmp = std::mem::take(&mut self.tmp);
        self.comm.shared().coll.put_scratch(tmp);
    }
}

impl<T: bytemuck::Pod + Send> Advance for NbState<T> {
    fn advance(&mut self, block: bool) -> Result<bool> {
        if self.failed.is_some() || self.reported {
            return Ok(true);
        }
        match self.step(block) {
            Ok(true) => {
                self.release_scratch();
                crate::fr::end(self.fr, None);
                self.fr = rcomm_runtime::flight::Handle::NONE;
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => {
                // Nothing is in flight after an error (`advance` waits for what it posted).
                self.cur.pending.clear();
                self.cur.phase = self.sched.phases.len();
                self.release_scratch();
                crate::fr::end(self.fr, Some(&e));
                self.fr = rcomm_runtime::flight::Handle::NONE;
                self.failed = Some(e);
                Ok(true)
            }
        }
    }

    fn finished(&self) -> bool {
        self.cur.phase >= self.sched.phases.len() || self.failed.is_some() || self.reported
    }

    fn pending_reqs(&self, out: &mut Vec<crate::p2p::engine::ReqId>) {
        out.extend(self.cur.pending.iter().map(|p| p.req));
    }
}

/// A non-blocking collective that owns its buffers. [`wait`](Self::wait) hands back the
/// result. Dropping it before completion waits for it (the other ranks are running the same
/// collective, so it completes). With `RCOMM_ASYNC_PROGRESS=1` a progress thread advances it
/// while the caller computes; otherwise it advances in `test`, `wait` and other rcomm calls.
#[must_use = "a collective request does nothing useful unless waited for"]
pub struct CollRequest<T: bytemuck::Pod + Send> {
    state: Arc<Mutex<NbState<T>>>,
    done: bool,
}

impl<T: bytemuck::Pod + Send> std::fmt::Debug for CollRequest<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollRequest")
            .field("done", &self.done)
            .finish()
    }
}

impl<T: bytemuck::Pod + Send + 'static> CollRequest<T> {
    /// Starts `sched` over owned `data` (and `input`), posting the first phase at once.
    pub(crate) fn start(
        comm: &Communicator,
        sched: Arc<Schedule>,
        data: Vec<T>,
        input: Vec<T>,
        reduce: Option<Reducer>,
        post: Post,
    ) -> Result<Self> {
        debug_assert!(
            !sched.op.is_empty(),
            "an unnamed schedule: its errors would say \"collective\""
        );
        let tag = comm.next_coll_tag();
        let (stamp, _) = comm.check_start(tag, &sched)?;
        let fr = crate::fr::adopt(comm.ctx());
        let tmp = comm.shared().coll.take_scratch(sched.tmp_len);
        let mut st = NbState {
            comm: comm.clone(),
            tag,
            stamp,
            sched,
            data,
            input,
            tmp,
            cur: Cursor::new(Vec::new()),
            reduce,
            post,
            failed: None,
            reported: false,
            fr,
        };
        st.advance(false)?;
        let finished = st.finished();
        let state = Arc::new(Mutex::new(st));
        if !finished {
            let item: Arc<Mutex<dyn Advance>> = state.clone();
            comm.shared().coll.register_inflight(&item);
            if let Some(p) = &comm.shared().coll.progress {
                p.register(item, comm.shared());
            }
        }
        Ok(Self { state, done: false })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NbState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the collective has completed (advancing it as far as possible without waiting).
    /// An error shows here or in [`wait`](Self::wait).
    pub fn test(&mut self) -> Result<bool> {
        let done = self.poll();
        let mut st = self.lock();
        if let Some(e) = st.failed.take() {
            st.reported = true;
            return Err(e);
        }
        Ok(done)
    }

    /// Whether the collective has completed or failed (advancing it as far as possible without
    /// waiting); unlike [`test`](Self::test) a failure stays for [`wait`](Self::wait) to
    /// return. For request sets, which report indices and leave the results to `wait`.
    pub(crate) fn poll(&mut self) -> bool {
        let mut st = self.lock();
        // `advance` keeps a failure in `failed` (and says finished); its Err is not used.
        let _ = st.advance(false);
        if !st.finished() {
            // Others may wait for this rank's part in another collective.
            st.comm.shared().coll.advance_others(&mut Vec::new());
            let _ = st.advance(false);
        }
        st.finished()
    }

    /// Waits for completion and hands back the result (see the starting call for its shape).
    /// While it waits it also advances this process's other non-blocking collectives, on any
    /// communicator: ranks may start and wait them in different orders (MPI's progress rule).
    pub fn wait(mut self) -> Result<Vec<T>> {
        let mut st = self.lock();
        crate::fr::waiting(st.fr);
        st.advance_blocking()?;
        if st.reported {
            drop(st);
            self.done = true;
            return Err(CommError::InvalidArg(
                "the collective failed (the error was returned by test)".into(),
            ));
        }
        if let Some(e) = st.failed.take() {
            drop(st);
            self.done = true;
            return Err(e);
        }
        let mut data = std::mem::take(&mut st.data);
        if let Some(r) = &st.reduce {
            let n = st.comm.size() as usize;
            let (lo, hi) = match st.post {
                Post::Range(s, l) => (s, s + l),
                _ => (0, data.len()),
            };
            r.finalize(bytemuck::cast_slice_mut(&mut data[lo..hi]), n)?;
        }
        let out = match st.post {
            Post::Whole => data,
            Post::Range(s, l) => {
                data.truncate(s + l);
                data.drain(..s);
                data
            }
            Post::Nothing => Vec::new(),
        };
        drop(st);
        self.done = true;
        Ok(out)
    }
}

impl<T: bytemuck::Pod + Send> Drop for CollRequest<T> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // The requests in flight point into our buffers: finish before freeing them.
        let _ = st.advance_blocking();
        if let Some(e) = &st.failed {
            rcomm_runtime::rlog!(Warn, "COLL", "a dropped collective request failed: {e}");
        }
    }
}
