//! Communicators and the point-to-point API.
//!
//! Why one file: the communicator's calls and requests share one borrow-and-wait protocol.

pub(crate) mod coll_part;
mod device_part;
mod raw_part;
mod topo_part;

pub use raw_part::{RawRequest, RawSendMode};

pub(crate) use coll_part::CollPart;
pub use coll_part::Collectives;
pub use device_part::Device;
pub(crate) use device_part::{DevLink, DevicePart, DeviceState, SCRATCH_HELD};
pub(crate) use topo_part::Members;
pub use topo_part::TopoPart;

use crate::p2p::engine::{Direct, Engine, ReqId, Status, Stored};
use crate::p2p::matcher::{Envelope, Source, TagSel};
use crate::p2p::region::Region;
use crate::{CommError, Result};
use bytemuck::Pod;
use rcomm_runtime::algo::{Algo, Coll, Forced};
use rcomm_runtime::bootstrap::kvs::NoticeBoard;
use rcomm_transport::net::NetCounters;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A message tag. User tags are `0..=i32::MAX`; [`Tag::Any`] matches any tag on receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tag(pub i32);

impl Tag {
    /// Matches any tag (receives and probes only).
    #[allow(non_upper_case_globals)]
    pub const Any: Tag = Tag(-1);

    pub(crate) fn sel(self) -> TagSel {
        if self == Tag::Any {
            TagSel::Any
        } else {
            TagSel::Tag(self.0)
        }
    }

    /// Whether a receive may name it (a tag ≥ 0, or any): a send-first fast path checks it
    /// so that a bad receive tag is refused before anything is sent.
    pub(crate) fn receivable(self) -> bool {
        self == Tag::Any || self.0 >= 0
    }
}

impl From<u32> for Source {
    fn from(r: u32) -> Self {
        Source::Rank(r)
    }
}

/// How a waiting thread spends its time: spin while a reply is likely imminent, then yield
/// (other ranks may need this core), then sleep on the transports' descriptors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitPolicy {
    pub spin: u32,
    pub yield_until: u32,
    /// Ranks outnumber the CPUs: shared-memory collectives sleep on their counters.
    pub sleep: bool,
}

impl WaitPolicy {
    /// The policy of a rank among `sharing` ranks on this kernel with `cpus` CPUs between them.
    /// Oversubscribed, a wait that sees nothing move polls only a few times (4 passes), yields
    /// some more, then sleeps on the transports' descriptors (p2p) or on the counter it waits
    /// for (shared-memory collectives): a yielding waiter still takes a time slice from the
    /// rank it waits for whenever the scheduler picks it again. The spin is short because the
    /// rank it waits for is often the one sharing its core: 64 passes (~5 µs) before the first
    /// yield made an 8-byte ring exchange of 4 ranks on 2 cores 3× slower (17.8 against 6.0 µs
    /// per iteration) and an 8-rank 8-byte allreduce 1.6× slower (23.8 against 15.1 µs). With a CPU each, a
    /// wait spins longer (a reply within tens of microseconds is likely), then yields, and
    /// sleeps only after that.
    pub(crate) fn for_sharing(sharing: usize, cpus: usize) -> Self {
        if sharing > cpus.max(1) {
            WaitPolicy {
                spin: 4,
                yield_until: 4 + 92,
                sleep: true,
            }
        } else {
            WaitPolicy {
                spin: 20_000,
                yield_until: 40_000,
                sleep: false,
            }
        }
    }

    /// Spin-budget units one pass over the transports uses when it makes `syscalls` system
    /// calls (TCP reads): with shared cores the budget is "a few microseconds of polling", and
    /// a read that finds nothing costs about as much as 16 looks at a ring. Counted as one
    /// look, 3 ranks on 2 cores over TCP spent ~100 µs per wait polling sockets while the rank
    /// they waited for needed the core (an 8-byte allreduce across 3 fake hosts: 190–270 µs,
    /// 55–80 µs at this cost). With a core each, the budget stays a count of passes.
    pub(crate) fn pass_cost(&self, syscalls: usize) -> u32 {
        if self.sleep {
            1 + 16 * u32::try_from(syscalls).unwrap_or(u32::MAX).min(1 << 20)
        } else {
            1
        }
    }
}

thread_local! {
    /// A scope's emptied list of live requests, kept for this thread's next scope.
    static SPARE_LIVE: std::cell::Cell<std::collections::VecDeque<ReqId>> = const { std::cell::Cell::new(std::collections::VecDeque::new()) };
    static SLEEP_FDS: std::cell::RefCell<rcomm_runtime::os::PollSet> = std::cell::RefCell::new(rcomm_runtime::os::PollSet::default());
}

/// The engine shared by every communicator of a process, with what waiting needs.
pub(crate) struct Shared {
    engine: Mutex<Engine>,
    /// Context ids in use in this process.
    pub(crate) ctx_ids: Arc<crate::ctxid::CtxIds>,
    /// For each world rank, the lowest world rank on its node (a node's colour); every
    /// communicator's topology part shares it.
    pub(crate) node_of: Arc<[u32]>,
    /// `RCOMM_ALGO`, checked equal on every rank at init.
    pub(crate) algo: Vec<Forced>,
    /// The collective cost model's constants: rank 0's, broadcast at init, so every rank's
    /// tuner chooses alike. Set once by `init` after the transports are up.
    pub(crate) tuning: std::sync::OnceLock<crate::coll_state::Tuning>,
    pub(crate) notices: Option<Arc<NoticeBoard>>,
    seen_notices: AtomicU64,
    pub(crate) policy: WaitPolicy,
    /// The engine's completion flags: a test reads them without the lock.
    done: Arc<crate::p2p::done::DoneFlags>,
    /// Collective scratch, schedule cache and the progress thread.
    pub(crate) coll: crate::coll_state::CollShared,
    /// `RCOMM_DETERMINISTIC`: allreduce in the canonical order whatever the size.
    pub(crate) deterministic: bool,
    /// The bootstrap (the launcher's store), for abort and for agreeing on failures.
    pub(crate) boot: std::sync::OnceLock<Arc<Mutex<Box<dyn rcomm_runtime::bootstrap::Bootstrap>>>>,
    /// Shrinks done per communicator context: names each agreement alike on every survivor.
    pub(crate) shrinks: Mutex<std::collections::HashMap<u32, u32>>,
    /// `RCOMM_CHECK`: collectives verify that every rank makes the same call.
    pub(crate) check: bool,
    /// `RCOMM_STRAGGLER`: the blocking collectives' waits, per communicator.
    pub(crate) straggler: Option<crate::straggler::Waits>,
    /// Device scratch, streams and kernels, kept for the process's device collectives.
    device: DeviceState,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    /// A watchdog fired with `err`: asks for the job's hang report (see
    /// [`crate::fr::report_hang`]).
    pub(crate) fn report_hang(&self, err: &CommError) {
        crate::fr::report_hang(self.notices.as_deref(), err);
    }

    pub(crate) fn new(
        engine: Engine,
        notices: Option<Arc<NoticeBoard>>,
        policy: WaitPolicy,
        node_of: Arc<[u32]>,
        algo: Vec<Forced>,
    ) -> Self {
        // The initialising thread is usually the one that waits: size its sleep list now.
        SLEEP_FDS.with_borrow_mut(|f| f.reserve(64));
        Self {
            done: engine.done_flags(),
            engine: Mutex::new(engine),
            ctx_ids: Arc::new(crate::ctxid::CtxIds::new()),
            node_of,
            algo,
            tuning: std::sync::OnceLock::new(),
            notices,
            seen_notices: AtomicU64::new(0),
            policy,
            coll: crate::coll_state::CollShared::new(false),
            deterministic: false,
            boot: std::sync::OnceLock::new(),
            shrinks: Mutex::new(std::collections::HashMap::new()),
            check: false,
            straggler: None,
            device: DeviceState::default(),
        }
    }

    /// The process's device state.
    #[inline]
    pub(crate) fn device(&self) -> &DeviceState {
        &self.device
    }

    /// The algorithm `RCOMM_ALGO` forces for `op`, if any (`auto` counts as none).
    pub(crate) fn forced_algo(&self, op: Coll) -> Option<Algo> {
        self.algo
            .iter()
            .find(|(o, _)| *o == op)
            .and_then(|(_, a)| *a)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether request `req` (held by the caller) completed, progressing once if the engine is
    /// free. A completion is read without the lock; while another thread holds it (a wait
    /// spinning, the progress thread) that thread is progressing, so this does not queue.
    pub(crate) fn test_req(&self, req: ReqId) -> bool {
        if self.done.get(req) {
            return true;
        }
        let mut e = match self.engine.try_lock() {
            Ok(e) => e,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return self.done.get(req),
        };
        e.progress();
        e.is_done(req)
    }

    /// Applies launcher notices (failed ranks) to the engine; one atomic load when none is new.
    pub(crate) fn apply_notices(&self, e: &mut Engine) {
        let Some(n) = &self.notices else { return };
        let v = n.version();
        if v == self.seen_notices.load(Ordering::Relaxed) {
            return;
        }
        self.seen_notices.store(v, Ordering::Relaxed);
        e.take_notices();
    }

    /// Waits up to `grace` for a launcher notice about a rank `wanted` accepts, and takes it
    /// in: a peer that went away is often only the consequence of another rank's failure,
    /// which the error should name.
    pub(crate) fn await_notice(&self, wanted: impl Fn(u32) -> bool, grace: Duration) {
        let Some(n) = &self.notices else { return };
        n.wait_for(grace, |s| s.failed.iter().any(|(r, _)| wanted(*r)));
        let mut e = self.lock();
        self.apply_notices(&mut e);
    }

    /// Progresses until `done` yields a value.
    pub(crate) fn block_on<R>(&self, done: impl FnMut(&mut Engine) -> Option<R>) -> R {
        self.block_on_ticked(done, |_, _| None)
    }

    /// [`block_on`](Self::block_on), also calling `tick` with the time on the slow path
    /// (after spinning, about every 20 ms): the watchdogs' hook, which may end the wait.
    pub(crate) fn block_on_ticked<R>(
        &self,
        mut done: impl FnMut(&mut Engine) -> Option<R>,
        mut tick: impl FnMut(&mut Engine, Instant) -> Option<R>,
    ) -> R {
        let mut spins: u32 = 0;
        // The clock is read only once spinning is over: a sub-microsecond wait must not pay
        // for clock_gettime.
        let mut last_check: Option<Instant> = None;
        // While spinning the engine lock stays held between passes (one lock per wait, not
        // per pass), released every 16 passes so other threads get in, and before yielding,
        // sleeping or advancing non-blocking collectives (which lock it themselves).
        let mut held: Option<MutexGuard<'_, Engine>> = None;
        let mut passes: u32 = 0;
        loop {
            // MPI's progress rule: a blocking call also advances the non-blocking collectives
            // this process started (another rank may wait for one of them first).
            if self.coll.any_inflight.load(Ordering::Acquire) {
                held = None;
                self.coll.advance_inflight();
            }
            let mut e = held.take().unwrap_or_else(|| self.lock());
            // Check before progressing: a send that completed at once must not pull the
            // peer's reply in as an unexpected message before its receive is posted.
            if let Some(r) = done(&mut e) {
                return r;
            }
            e.progress();
            if let Some(r) = done(&mut e) {
                return r;
            }
            // What this pass counts against the spin budget: read now, not once per wait, so
            // a TCP connection accepted during the wait (a first message) counts at once.
            let step = if self.policy.sleep {
                self.policy.pass_cost(e.net().progress_syscalls())
            } else {
                1
            };
            // The first look at failures and the watchdog comes one period after the spin
            // phase, not at its end: it polls the peers' connections (a system call), and
            // ranks sharing cores pass the spin phase in nearly every wait.
            if spins >= self.policy.spin
                && last_check.get_or_insert_with(Instant::now).elapsed() > Duration::from_millis(20)
            {
                let now = Instant::now();
                last_check = Some(now);
                self.apply_notices(&mut e);
                e.poll_dead();
                if let Some(r) = done(&mut e) {
                    return r;
                }
                if let Some(r) = tick(&mut e, now) {
                    return r;
                }
            }
            if spins >= self.policy.yield_until && !e.needs_cpu() {
                // Sleep protocol: announce, look once more, then block on the descriptors.
                e.net().begin_sleep();
                e.progress();
                if let Some(r) = done(&mut e) {
                    e.net().end_sleep();
                    return r;
                }
                // A per-thread set: the sleep path of a steady exchange must not allocate.
                SLEEP_FDS.with_borrow_mut(|fds| {
                    fds.clear();
                    e.net().wait_fds(fds);
                    drop(e);
                    let _ = fds.wait(Duration::from_millis(50));
                });
                self.lock().net().end_sleep();
                continue;
            }
            spins = spins.saturating_add(step);
            passes = passes.wrapping_add(1);
            if spins < self.policy.spin {
                if !passes.is_multiple_of(16) {
                    held = Some(e);
                } else {
                    drop(e);
                }
                std::hint::spin_loop();
            } else {
                drop(e);
                std::thread::yield_now();
            }
        }
    }

    /// Progresses once without blocking, takes in launcher notices and transports' reports of
    /// dead peers, and fails with `PeerLost` if one of `ranks` (world ranks) is gone. For waits
    /// that spin outside the engine (shared-memory collectives): without it they would never
    /// learn that the peer they wait for died.
    pub(crate) fn check_alive(&self, ranks: &[u32], op: &'static str) -> Result<()> {
        let mut e = self.lock();
        e.progress();
        self.apply_notices(&mut e);
        e.poll_dead();
        match ranks.iter().find_map(|&r| e.lost_error(r, op)) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// The direct path of a blocking receive from world rank `src` (see
    /// `p2p::engine::direct`): looks at that peer's ring for half the spin budget, holding the
    /// engine lock a few looks at a time; `None` hands the receive to the general path.
    pub(crate) fn recv_direct(
        &self,
        ctx: u32,
        src: u32,
        tag: TagSel,
        buf: &mut [u8],
    ) -> Option<Status> {
        let room = buf.len();
        self.recv_direct_into(ctx, src, tag, room, &mut |p| {
            buf[..p.len()].copy_from_slice(p)
        })
    }

    /// [`recv_direct`](Self::recv_direct) of a message of at most `room` bytes handed to
    /// `put` in the ring (see `Engine::recv_now_into`).
    pub(crate) fn recv_direct_into(
        &self,
        ctx: u32,
        src: u32,
        tag: TagSel,
        room: usize,
        put: &mut impl FnMut(&[u8]),
    ) -> Option<Status> {
        if self.coll.any_inflight.load(Ordering::Acquire) {
            return None;
        }
        let budget = self.policy.spin / 2;
        let mut e = self.lock();
        let mut spins: u32 = 0;
        loop {
            match e.recv_direct(ctx, src, tag, room, put) {
                Direct::Done(st) => return Some(st),
                Direct::General => return None,
                Direct::Empty => {}
            }
            spins += 1;
            if spins >= budget {
                return None;
            }
            if spins.is_multiple_of(16) {
                // A gap in which other threads can take the lock. No progress pass: it would
                // move the awaited message into the unexpected queue (a copy) just as it lands;
                // the others' messages wait the few microseconds until the general path.
                drop(e);
                e = self.lock();
            }
            std::hint::spin_loop();
        }
    }

    /// Waits for a request. A receive that gets no message for the watchdog's limit
    /// (`RCOMM_TIMEOUT` inside a collective, else `RCOMM_P2P_TIMEOUT`) is cancelled and fails
    /// with `Timeout`; sends are not timed out (a peer may still read their buffer).
    pub(crate) fn wait(&self, req: ReqId) -> Result<Status> {
        self.wait_with(req, |_| {})
    }

    /// [`wait`](Self::wait), running `locked` with the engine locked before anything else
    /// (the caller's bookkeeping of the request, in the lock the wait takes anyway).
    pub(crate) fn wait_with(&self, req: ReqId, locked: impl FnOnce(&mut Engine)) -> Result<Status> {
        // Done already (a window's waits after the first, whose progress took every message
        // in): its flag says so without the lock, and one lock takes the result.
        if self.done.get(req) {
            let mut e = self.lock();
            locked(&mut e);
            return e.take(req);
        }
        locked(&mut self.lock());
        let mut w = crate::fr::Watch::new();
        let slot = crate::fr::P2pSlot::new();
        self.block_on_ticked(
            |e| {
                e.is_done(req).then(|| {
                    slot.completed(|| e.succeeded(req));
                    e.take(req)
                })
            },
            |e, now| w.tick_wait(self.notices.as_deref(), e, req, &slot, now),
        )
    }
}

/// A group of ranks with its own message space: messages on one communicator never match
/// receives on another. Ranks given to and reported by a communicator are its own (0..size);
/// errors about lost peers name world ranks.
///
/// Besides its identity a communicator is made of parts, each owning one concern: its
/// [`topology`](Self::topology) (members and nodes), its [`collectives`](Self::collectives)
/// (count, choices, forced algorithms, what the first collectives set up) and its
/// [`device`](Self::device) facts.
#[derive(Debug, Clone)]
pub struct Communicator {
    /// Context id of user messages; `ctx + 1` carries this communicator's internal traffic.
    ctx: u32,
    rank: u32,
    size: u32,
    topo: TopoPart,
    coll: CollPart,
    device: DevicePart,
    /// Frees the context id when the last clone goes (absent for the world).
    ctx_guard: Option<Arc<crate::ctxid::CtxGuard>>,
    /// Attributes (keyvals), shared by the handles of this communicator. Before `shared`:
    /// fields drop in order, and an attribute (an NCCL communicator) may use the process
    /// state's device streams as it goes.
    attrs: Arc<crate::attr::Attrs>,
    shared: Arc<Shared>,
}

/// World rank → communicator rank in a status.
fn localize(group: &Option<Arc<Members>>, mut st: Status) -> Status {
    if let Some(g) = group {
        st.source = g.local.get(&st.source).copied().unwrap_or(u32::MAX);
    }
    st
}

fn bytes_of<T: Pod>(b: &[T]) -> &[u8] {
    bytemuck::cast_slice(b)
}

fn bytes_of_mut<T: Pod>(b: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(b)
}

/// Reinterprets a status' byte count for `T`, erroring on a partial element.
fn check_elems<T>(st: &Status) -> Result<Status> {
    let elem = size_of::<T>();
    if elem > 0 && !st.bytes.is_multiple_of(elem) {
        return Err(CommError::Size {
            bytes: st.bytes,
            elem,
        });
    }
    Ok(*st)
}

/// Making communicators, and their parts for the layers above (plain field reads).
impl Communicator {
    /// A communicator on context `ctx` of the members `topo` places, with fresh collective,
    /// device and attribute state.
    pub(crate) fn new(
        ctx: u32,
        rank: u32,
        topo: TopoPart,
        ctx_guard: Option<Arc<crate::ctxid::CtxGuard>>,
        shared: Arc<Shared>,
    ) -> Self {
        Communicator {
            ctx,
            rank,
            size: topo.size(),
            topo,
            coll: CollPart::default(),
            device: DevicePart::default(),
            ctx_guard,
            shared,
            attrs: Default::default(),
        }
    }

    /// The same communicator seen by `rank` of the members `world` (world ranks): for the
    /// members of a group agreeing on a context over this communicator's internal context.
    /// Fresh collective, device and attribute state.
    pub(crate) fn regrouped(&self, rank: u32, world: Vec<u32>) -> Self {
        let topo = TopoPart::new(Some(world), self.shared.node_of.clone());
        Communicator::new(
            self.ctx,
            rank,
            topo,
            self.ctx_guard.clone(),
            self.shared.clone(),
        )
    }

    /// The context id of user messages.
    #[inline]
    pub(crate) fn ctx(&self) -> u32 {
        self.ctx
    }

    /// The process's engine and settings.
    #[inline]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The attributes of this communicator (shared by its handles).
    #[inline]
    pub(crate) fn attrs(&self) -> &crate::attr::Attrs {
        &self.attrs
    }

    /// Gives this handle attributes of its own (a `dup`'s copies).
    pub(crate) fn set_attrs(&mut self, attrs: crate::attr::Attrs) {
        self.attrs = Arc::new(attrs);
    }

    /// The context id's guard (absent for the world).
    #[inline]
    pub(crate) fn ctx_guard(&self) -> Option<&crate::ctxid::CtxGuard> {
        self.ctx_guard.as_deref()
    }

    /// The collective part.
    #[inline]
    pub(crate) fn coll_part(&self) -> &CollPart {
        &self.coll
    }

    /// The collective part, to widen its failure scope.
    pub(crate) fn coll_part_mut(&mut self) -> &mut CollPart {
        &mut self.coll
    }

    /// This handle with collective part `coll` (a `with_algo` handle).
    pub(crate) fn with_coll_part(&self, coll: CollPart) -> Communicator {
        Communicator {
            coll,
            ..self.clone()
        }
    }

    /// The device part.
    #[inline]
    pub(crate) fn device_part(&self) -> &DevicePart {
        &self.device
    }

    /// Where the ranks are: members and nodes.
    #[inline]
    pub fn topology(&self) -> &TopoPart {
        &self.topo
    }

    /// The collective part: how many collectives ran, what is forced, what the first ones set
    /// up, the last one recorded.
    pub fn collectives(&self) -> Collectives<'_> {
        Collectives {
            part: &self.coll,
            ctx: self.ctx,
            process: &self.shared.algo,
        }
    }

    /// The device part: the link class of the ranks' devices and the process's device scratch.
    pub fn device(&self) -> Device<'_> {
        Device {
            part: &self.device,
            state: &self.shared.device,
        }
    }
}

impl Communicator {
    /// Whether every rank of the communicator runs on this node (so the shared-memory
    /// collective algorithms can run).
    pub fn on_one_node(&self) -> bool {
        self.topo.one_node()
    }

    /// How many nodes the ranks of the communicator run on.
    pub fn nodes(&self) -> u32 {
        self.topo.nodes()
    }

    /// This process's rank in the communicator.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The world rank of communicator rank `r`.
    pub fn world_rank(&self, r: u32) -> Result<u32> {
        if r >= self.size {
            return Err(CommError::InvalidRank {
                rank: r,
                size: self.size,
            });
        }
        Ok(match self.topo.members() {
            Some(g) => g.world[r as usize],
            None => r,
        })
    }

    /// Whether world rank `w` failing fails this communicator's collectives.
    pub(crate) fn in_failure_scope(&self, w: u32) -> bool {
        match self.coll.failure_scope() {
            Some(s) => s.binary_search(&w).is_ok(),
            None => self.local_rank_of(w).is_some(),
        }
    }

    /// This communicator's rank of world rank `w`, if it is a member.
    pub(crate) fn local_rank_of(&self, w: u32) -> Option<u32> {
        match self.topo.members() {
            Some(g) => g.local.get(&w).copied(),
            None => (w < self.size).then_some(w),
        }
    }

    pub(crate) fn source(&self, s: Source) -> Result<Source> {
        Ok(match s {
            Source::Any => Source::Any,
            Source::Rank(r) => Source::Rank(self.world_rank(r)?),
        })
    }

    fn local(&self, st: Status) -> Status {
        localize(self.topo.members(), st)
    }

    /// Sends a region (host or device memory) and waits; for the device calls.
    pub(crate) fn send_region(
        &self,
        region: Region,
        dest: u32,
        tag: Tag,
        op: &'static str,
    ) -> Result<()> {
        let _nvtx = crate::nvtx::Range::new(op);
        let dest = self.world_rank(dest)?;
        let req = self
            .shared
            .lock()
            .send(self.ctx, dest, tag.0, region, op, true)?;
        match req {
            Some(req) => self.shared.wait(req).map(drop),
            None => Ok(()),
        }
    }

    /// Receives into a region (host or device memory) and waits; for the device calls.
    pub(crate) fn recv_region(
        &self,
        region: Region,
        src: Source,
        tag: Tag,
        op: &'static str,
    ) -> Result<Status> {
        let _nvtx = crate::nvtx::Range::new(op);
        let src = self.source(src)?;
        let req = self
            .shared
            .lock()
            .irecv(self.ctx, src, tag.sel(), region, op)?;
        Ok(self.local(self.shared.wait(req)?))
    }

    /// Sends and receives regions at once; for the device calls.
    pub(crate) fn sendrecv_regions(
        &self,
        sreg: Region,
        dest: u32,
        stag: Tag,
        rreg: Region,
        src: Source,
        rtag: Tag,
    ) -> Result<Status> {
        self.sendrecv_ctx_regions(self.ctx, sreg, dest, stag, rreg, src, rtag)
    }

    /// Sends `buf` to `dest` with `tag`; returns when `buf` may be reused.
    pub fn send<T: Pod>(&self, buf: &[T], dest: u32, tag: Tag) -> Result<()> {
        let _nvtx = crate::nvtx::Range::new("send");
        let dest = self.world_rank(dest)?;
        let req = self.shared.lock().send(
            self.ctx,
            dest,
            tag.0,
            Region::from_ref(bytes_of(buf)),
            "send",
            true,
        )?;
        match req {
            Some(req) => self.shared.wait(req).map(drop),
            None => Ok(()),
        }
    }

    /// A blocking send of `len` bytes that `fill` writes straight into the transport (the
    /// gather of a non-contiguous layout): `Ok(true)` when the message went out now;
    /// `Ok(false)` when it cannot go that way at once (nothing done: send it another way).
    pub(crate) fn send_gather_now(
        &self,
        dest: u32,
        tag: Tag,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool> {
        let dest = self.world_rank(dest)?;
        self.shared
            .lock()
            .send_gather_now(self.ctx, dest, tag.0, len, "send", fill)
    }

    /// The direct path of a blocking receive (see [`recv`](Self::recv)) whose payload, at most
    /// `room` bytes, `put` takes straight from the ring (the scatter of a non-contiguous
    /// layout); `Ok(None)` when the general path must take it (nothing received).
    pub(crate) fn recv_direct_into(
        &self,
        src: Source,
        tag: Tag,
        room: usize,
        put: &mut impl FnMut(&[u8]),
    ) -> Result<Option<Status>> {
        if let (Source::Rank(r), TagSel::Tag(0..) | TagSel::Any) = (self.source(src)?, tag.sel())
            && let Some(st) = self
                .shared
                .recv_direct_into(self.ctx, r, tag.sel(), room, put)
        {
            return Ok(Some(self.local(st)));
        }
        Ok(None)
    }

    /// One look for a message from `src` matching `tag` already at the head of the ring, for a
    /// receive being posted (no wait): its payload, at most `room` bytes, handed to `put`.
    /// `Ok(None)` when it is not there or needs the general path (nothing received).
    pub(crate) fn recv_now_into(
        &self,
        src: Source,
        tag: Tag,
        room: usize,
        put: &mut impl FnMut(&[u8]),
    ) -> Result<Option<Status>> {
        let src = self.source(src)?;
        let done = recv_now_into(&mut self.shared.lock(), self.ctx, src, tag, room, put);
        Ok(done.map(|st| self.local(st)))
    }

    /// A send request that completed when it started (it owns nothing).
    pub(crate) fn sent_request<T: Pod + Send>(&self, tag: Tag, bytes: usize) -> Request<T> {
        Request {
            shared: self.shared.clone(),
            group: self.topo.members().clone(),
            req: None,
            buf: Some(Vec::new()),
            recv: false,
            done: Some(self.sent_status(tag, bytes)),
            cancelled: false,
        }
    }

    /// Synchronous send (`MPI_Ssend`): returns once the receiver has matched the message (and
    /// `buf` may be reused), whatever its size — a program that works with `ssend` does not
    /// depend on messages being buffered. To this rank itself it completes at once.
    pub fn ssend<T: Pod>(&self, buf: &[T], dest: u32, tag: Tag) -> Result<()> {
        let dest = self.world_rank(dest)?;
        let req = self.shared.lock().ssend(
            self.ctx,
            dest,
            tag.0,
            Region::from_ref(bytes_of(buf)),
            "ssend",
        )?;
        self.shared.wait(req).map(drop)
    }

    /// Starts a synchronous send (`MPI_Issend`) of `buf`, which the request owns; it completes
    /// once the receiver has matched the message, to this rank itself too (unlike
    /// [`ssend`](Self::ssend), which would wait forever there).
    pub fn issend<T: Pod + Send>(&self, buf: Vec<T>, dest: u32, tag: Tag) -> Result<Request<T>> {
        let wdest = self.world_rank(dest)?;
        let region = Region::from_ref(bytes_of(&buf));
        let req = self
            .shared
            .lock()
            .issend(self.ctx, wdest, tag.0, region, "issend")?;
        Ok(Request {
            shared: self.shared.clone(),
            group: self.topo.members().clone(),
            req: Some(req),
            buf: Some(buf),
            recv: false,
            done: None,
            cancelled: false,
        })
    }

    /// Sends `buf` to `dest` and receives into the same buffer from `src`
    /// (`MPI_Sendrecv_replace`); the message received must fit `buf`.
    pub fn sendrecv_replace<T: Pod>(
        &self,
        buf: &mut [T],
        dest: u32,
        stag: Tag,
        src: impl Into<Source>,
        rtag: Tag,
    ) -> Result<Status> {
        let src = src.into();
        let wsrc = self.source(src)?;
        if rtag.receivable()
            && self.shared.lock().send_now(
                self.ctx,
                self.world_rank(dest)?,
                stag.0,
                bytes_of(buf),
                "sendrecv_replace",
            )?
        {
            // The message left at once, so `buf` is free: receive straight into it, no copy.
            let reg = Region::from_mut(bytes_of_mut(buf));
            return self
                .recv_host_on(self.ctx, wsrc, rtag, reg, "sendrecv_replace")
                .and_then(|st| check_elems::<T>(&st));
        }
        let out = bytes_of(buf).to_vec();
        self.sendrecv_ctx(self.ctx, &out, dest, stag, bytes_of_mut(buf), src, rtag)
            .and_then(|st| check_elems::<T>(&st))
    }

    /// Receives into `buf` from `src` (a rank or [`Source::Any`]) with `tag` (or [`Tag::Any`]).
    /// A message larger than `buf` is consumed and reported as [`CommError::Truncated`].
    pub fn recv<T: Pod>(&self, buf: &mut [T], src: impl Into<Source>, tag: Tag) -> Result<Status> {
        let _nvtx = crate::nvtx::Range::new("recv");
        let src = self.source(src.into())?;
        let reg = Region::from_mut(bytes_of_mut(buf));
        check_elems::<T>(&self.recv_host_on(self.ctx, src, tag, reg, "recv")?)
    }

    /// Sends `sbuf` to `dest` and receives into `rbuf` from `src` at once (no deadlock when two
    /// ranks exchange).
    pub fn sendrecv<T: Pod, U: Pod>(
        &self,
        sbuf: &[T],
        dest: u32,
        stag: Tag,
        rbuf: &mut [U],
        src: impl Into<Source>,
        rtag: Tag,
    ) -> Result<Status> {
        self.sendrecv_ctx(
            self.ctx,
            bytes_of(sbuf),
            dest,
            stag,
            bytes_of_mut(rbuf),
            src.into(),
            rtag,
        )
        .and_then(|st| check_elems::<U>(&st))
    }

    /// `sendrecv` on a given context (internal traffic uses `ctx + 1`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sendrecv_ctx(
        &self,
        ctx: u32,
        sbuf: &[u8],
        dest: u32,
        stag: Tag,
        rbuf: &mut [u8],
        src: Source,
        rtag: Tag,
    ) -> Result<Status> {
        let (sreg, rreg) = (Region::from_ref(sbuf), Region::from_mut(rbuf));
        self.sendrecv_ctx_regions(ctx, sreg, dest, stag, rreg, src, rtag)
    }

    /// [`sendrecv_ctx`](Self::sendrecv_ctx) of regions (host or device memory) that the
    /// caller keeps valid until it returns.
    #[allow(clippy::too_many_arguments)]
    fn sendrecv_ctx_regions(
        &self,
        ctx: u32,
        sreg: Region,
        dest: u32,
        stag: Tag,
        rreg: Region,
        src: Source,
        rtag: Tag,
    ) -> Result<Status> {
        let dest = self.world_rank(dest)?;
        let src = self.source(src)?;
        // Device memory, and internal exchanges in checked mode (their waits check the
        // communicator), take the general path.
        let general = sreg.is_device()
            || rreg.is_device()
            || (self.shared.check && ctx != self.ctx)
            || !rtag.receivable();
        if !general
            && self
                .shared
                .lock()
                .send_now(ctx, dest, stag.0, sreg.bytes(), "sendrecv")?
        {
            // The send left at once (eager, taken by the transport), which makes the rest a
            // receive: no requests, and the message may be taken straight from the ring.
            return self.recv_host_on(ctx, src, rtag, rreg, "sendrecv");
        }
        let (s, r) = {
            let mut e = self.shared.lock();
            let r = e.irecv(ctx, src, rtag.sel(), rreg, "sendrecv")?;
            match e.isend(ctx, dest, stag.0, sreg, "sendrecv") {
                Ok(s) => (s, r),
                Err(err) => {
                    if !e.cancel(r) {
                        drop(e);
                        let _ = self.shared.wait(r);
                    }
                    return Err(err);
                }
            }
        };
        if self.shared.check && ctx != self.ctx {
            // Checked mode: an internal exchange fails with the communicator's check.
            let sres = self.check_wait(s);
            if sres.is_err() {
                self.shared.lock().abandon(r);
            }
            sres?;
            return Ok(self.local(self.check_wait(r)?));
        }
        let sres = self.shared.wait(s);
        let rres = self.shared.wait(r);
        sres?;
        Ok(self.local(rres?))
    }

    /// A blocking receive into host memory on `ctx` from `src` (a world rank, or any): the
    /// direct path when it can take the message, else a posted receive and a wait.
    fn recv_host_on(
        &self,
        ctx: u32,
        src: Source,
        tag: Tag,
        reg: Region,
        op: &'static str,
    ) -> Result<Status> {
        if let (Source::Rank(r), TagSel::Tag(0..) | TagSel::Any) = (src, tag.sel())
            && let Some(st) = self.shared.recv_direct(ctx, r, tag.sel(), reg.bytes_mut())
        {
            return Ok(self.local(st));
        }
        let req = self.shared.lock().irecv(ctx, src, tag.sel(), reg, op)?;
        Ok(self.local(self.shared.wait(req)?))
    }

    /// Starts sending `buf`, which the request owns until [`Request::wait`] hands it back.
    pub fn isend<T: Pod + Send>(&self, buf: Vec<T>, dest: u32, tag: Tag) -> Result<Request<T>> {
        let wdest = self.world_rank(dest)?;
        let region = Region::from_ref(bytes_of(&buf));
        // An eager message that fits the transport now is complete on return: no request.
        let req = self
            .shared
            .lock()
            .send(self.ctx, wdest, tag.0, region, "isend", true)?;
        let done = req
            .is_none()
            .then(|| self.sent_status(tag, size_of_val(buf.as_slice())));
        Ok(Request {
            shared: self.shared.clone(),
            group: self.topo.members().clone(),
            req,
            buf: Some(buf),
            recv: false,
            done,
            cancelled: false,
        })
    }

    /// The status of a send of `bytes` that completed when it started.
    fn sent_status(&self, tag: Tag, bytes: usize) -> Status {
        Status {
            source: self.rank,
            tag: tag.0,
            bytes,
        }
    }

    /// Starts receiving into `buf`, which the request owns until [`Request::wait`] hands it back.
    /// Dropping the request before a message matched cancels the receive.
    pub fn irecv<T: Pod + Send>(
        &self,
        mut buf: Vec<T>,
        src: impl Into<Source>,
        tag: Tag,
    ) -> Result<Request<T>> {
        let src = self.source(src.into())?;
        let mut e = self.shared.lock();
        let (req, done) = match recv_now(&mut e, self.ctx, src, tag, bytes_of_mut(&mut buf)) {
            Some(st) => (None, Some(self.local(st))),
            None => {
                let region = Region::from_mut(bytes_of_mut(&mut buf));
                (
                    Some(e.irecv(self.ctx, src, tag.sel(), region, "irecv")?),
                    None,
                )
            }
        };
        drop(e);
        Ok(Request {
            shared: self.shared.clone(),
            group: self.topo.members().clone(),
            req,
            buf: Some(buf),
            recv: true,
            done,
            cancelled: false,
        })
    }

    /// Runs `f` with a scope in which requests may borrow buffers; the scope waits for every
    /// request started in it before returning, so borrowed buffers are never used after.
    pub fn scope<'env, R>(&self, f: impl for<'s> FnOnce(&'s Scope<'s, 'env>) -> R) -> R {
        // The list of live requests is this thread's spare one when there is one: a scope per
        // window of messages must not allocate and grow a new list each time.
        let scope = Scope {
            comm: self,
            live: std::cell::UnsafeCell::new(SPARE_LIVE.take()),
            _env: PhantomData,
        };
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&scope)));
        let mut live = std::mem::take(scope.live(&mut self.shared.lock()));
        for req in live.drain(..) {
            let done_or_cancelled = self.shared.lock().cancel(req);
            if !done_or_cancelled {
                let _ = self.shared.wait(req);
            }
        }
        SPARE_LIVE.set(live);
        match out {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        }
    }

    /// Waits for a message matching (`src`, `tag`) and describes it without receiving it.
    pub fn probe(&self, src: impl Into<Source>, tag: Tag) -> Result<Status> {
        let (src, tag) = (self.source(src.into())?, tag.sel());
        let mut w = crate::fr::Watch::new();
        let what = self.probe_what("probe", src);
        let st = self.shared.block_on_ticked(
            |e| e.probe(self.ctx, src, tag).transpose(),
            |_, now| w.tick_probe(self.shared.notices.as_deref(), &what, now),
        );
        w.probe_done(st.is_ok());
        Ok(self.local(st?))
    }

    /// Describes a matching message if one is there now.
    pub fn iprobe(&self, src: impl Into<Source>, tag: Tag) -> Result<Option<Status>> {
        let src = self.source(src.into())?;
        let mut e = self.shared.lock();
        e.progress();
        Ok(e.probe(self.ctx, src, tag.sel())?.map(|st| self.local(st)))
    }

    /// Waits for a matching message and takes it out of matching: only the returned
    /// [`Message`] can receive it (no other thread's receive can steal it).
    pub fn mprobe(&self, src: impl Into<Source>, tag: Tag) -> Result<Message> {
        let (src, tag) = (self.source(src.into())?, tag.sel());
        let mut w = crate::fr::Watch::new();
        let what = self.probe_what("mprobe", src);
        let res = self.shared.block_on_ticked(
            |e| e.mprobe(self.ctx, src, tag).transpose(),
            |_, now| w.tick_probe(self.shared.notices.as_deref(), &what, now),
        );
        w.probe_done(res.is_ok());
        let (env, stored) = res?;
        Ok(Message {
            shared: self.shared.clone(),
            group: self.topo.members().clone(),
            env,
            stored: Some(stored),
        })
    }

    /// What a probe waits for, for its record and its error.
    fn probe_what(&self, op: &'static str, src: Source) -> crate::fr::P2p {
        crate::fr::P2p {
            op,
            peer: match src {
                Source::Rank(r) => Some(r),
                Source::Any => None,
            },
            ctx: self.ctx,
            bytes: 0,
        }
    }

    /// Takes a matching message if one is there now.
    pub fn improbe(&self, src: impl Into<Source>, tag: Tag) -> Result<Option<Message>> {
        let src = self.source(src.into())?;
        let mut e = self.shared.lock();
        e.progress();
        Ok(e.mprobe(self.ctx, src, tag.sel())?
            .map(|(env, stored)| Message {
                shared: self.shared.clone(),
                group: self.topo.members().clone(),
                env,
                stored: Some(stored),
            }))
    }

    /// Bytes moved so far by each transport (tests use them to prove which transport carried
    /// the traffic).
    pub fn transport_counters(&self) -> NetCounters {
        self.shared.lock().counters()
    }

    /// The transport used to reach communicator rank `rank` ("self", "shm", "tcp").
    pub fn transport_to(&self, rank: u32) -> Result<&'static str> {
        let w = self.world_rank(rank)?;
        Ok(self.shared.lock().route(w).name())
    }

    /// World ranks known to have failed, with what was seen.
    pub fn failed_ranks(&self) -> Vec<(u32, String)> {
        let mut e = self.shared.lock();
        self.shared.apply_notices(&mut e);
        e.poll_dead();
        let mut v: Vec<(u32, String)> = e.failed().iter().map(|(r, w)| (*r, w.clone())).collect();
        v.sort();
        v
    }
}

/// A non-blocking operation that owns its buffer.
#[derive(Debug)]
#[must_use = "a request does nothing useful unless waited for"]
pub struct Request<T: Pod + Send> {
    shared: Arc<Shared>,
    group: Option<Arc<Members>>,
    req: Option<ReqId>,
    buf: Option<Vec<T>>,
    recv: bool,
    /// An operation that completed when it started (an eager send that went straight in, a
    /// receive whose message was already there): its status, and no request behind it.
    done: Option<Status>,
    /// Cancelled by [`Request::cancel`] (then `done` holds an empty status).
    cancelled: bool,
}

impl<T: Pod + Send> Request<T> {
    /// Waits for completion; returns the buffer and the status.
    pub fn wait(mut self) -> Result<(Vec<T>, Status)> {
        if let Some(st) = self.done.take() {
            let st = if self.recv {
                check_elems::<T>(&st)?
            } else {
                st
            };
            return Ok((self.buf.take().expect("buffer held"), st));
        }
        let req = self.req.take().expect("request pending");
        let st = self.shared.wait(req);
        let buf = self.buf.take().expect("buffer held");
        let st = localize(&self.group, st?);
        Ok((
            buf,
            if self.recv {
                check_elems::<T>(&st)?
            } else {
                st
            },
        ))
    }

    /// Whether the operation has completed (progressing once).
    pub fn test(&mut self) -> bool {
        if self.done.is_some() {
            return true;
        }
        self.req.is_some_and(|r| self.shared.test_req(r))
    }

    /// Tries to cancel the operation (`MPI_Cancel`); true if it was cancelled, and then
    /// [`wait`](Self::wait) returns at once with the buffer and an empty status (`bytes` 0,
    /// `source` `u32::MAX`), and [`is_cancelled`](Self::is_cancelled) says so
    /// (`MPI_Test_cancelled`).
    ///
    /// A receive not yet matched is taken back: no message will ever land in it, its buffer
    /// comes back untouched. A send is cancelled if no receive matched its message yet: the
    /// receiver is asked to withdraw it (this call waits for the answer), and no receive, probe
    /// or mprobe there will ever see it; later messages of this rank still match in order. A
    /// receive or send already matched reports false and completes as usual, as MPI allows.
    /// So does an eager send that went straight into the transport when it started (it has no
    /// request to name it by). If the receiver is lost before it answers, this reports false
    /// and the send completes as it would have; [`try_cancel`](Self::try_cancel) gives the
    /// error.
    pub fn cancel(&mut self) -> bool {
        self.try_cancel().unwrap_or(false)
    }

    /// [`cancel`](Self::cancel), failing with `PeerLost` when a send's receiver is lost before
    /// it answers (or was already).
    pub fn try_cancel(&mut self) -> Result<bool> {
        if self.cancelled {
            return Ok(true);
        }
        let Some(req) = self.req else {
            return Ok(false);
        };
        if !cancel_req(&self.shared, req, self.recv)? {
            return Ok(false);
        }
        self.req = None;
        self.cancelled = true;
        self.done = Some(CANCELLED);
        Ok(true)
    }

    /// Whether [`cancel`](Self::cancel) cancelled this request (`MPI_Test_cancelled`).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    /// A request that completed when it started, holding `buf` (buffered sends).
    pub(crate) fn completed(comm: &Communicator, buf: Vec<T>, st: Status) -> Self {
        Request {
            shared: comm.shared.clone(),
            group: comm.topo.members().clone(),
            req: None,
            buf: Some(buf),
            recv: false,
            done: Some(st),
            cancelled: false,
        }
    }
}

impl<T: Pod + Send> Drop for Request<T> {
    fn drop(&mut self) {
        let Some(req) = self.req.take() else { return };
        let mut e = self.shared.lock();
        if self.recv && e.cancel(req) {
            return;
        }
        // Started: let it finish in the background with the buffer it owns.
        let buf = self.buf.take().unwrap_or_default();
        e.orphan(req, Box::new(buf));
    }
}

/// The status a cancelled request completes with (`bytes` 0, no source).
pub(crate) const CANCELLED: Status = Status {
    source: u32::MAX,
    tag: -1,
    bytes: 0,
};

/// Cancels request `req` (`MPI_Cancel`): a receive not yet matched is taken back at once; a
/// send is withdrawn at its receiver if no receive matched it yet (waiting for the answer).
/// True when cancelled.
pub(crate) fn cancel_req(shared: &Shared, req: ReqId, recv: bool) -> Result<bool> {
    use crate::p2p::engine::CancelSend;
    if recv {
        return Ok(shared.lock().cancel(req));
    }
    let asked = shared.lock().cancel_send(req)?;
    match asked {
        CancelSend::Done(c) => Ok(c),
        CancelSend::Asked(token) => shared.block_on(|e| e.cancel_send_answer(token)),
    }
}

/// Waits for every request; returns their buffers and statuses in order, or the first error
/// (after all have completed).
pub fn wait_all<T: Pod + Send>(reqs: Vec<Request<T>>) -> Result<Vec<(Vec<T>, Status)>> {
    let results: Vec<Result<(Vec<T>, Status)>> = reqs.into_iter().map(Request::wait).collect();
    results.into_iter().collect()
}

/// Waits until one request completes; removes it from `reqs` and returns its index, buffer and
/// status.
pub fn wait_any<T: Pod + Send>(reqs: &mut Vec<Request<T>>) -> Result<(usize, Vec<T>, Status)> {
    if reqs.is_empty() {
        return Err(CommError::Protocol {
            rank: u32::MAX,
            why: "wait_any on no requests".into(),
        });
    }
    let i = match reqs.iter().position(|r| r.done.is_some()) {
        Some(i) => i,
        None => {
            let shared = reqs[0].shared.clone();
            let ids: Vec<ReqId> = reqs.iter().map(|r| r.req.expect("pending")).collect();
            shared.block_on(|e| ids.iter().position(|&id| e.is_done(id)))
        }
    };
    let r = reqs.remove(i);
    let (buf, st) = r.wait()?;
    Ok((i, buf, st))
}

/// A persistent send or receive (`MPI_Send_init` / `MPI_Recv_init`): its arguments are
/// fixed once and it is started many times, each start followed by a wait (or tests until it
/// completes). Between runs the buffer is the caller's ([`buffer`](Self::buffer),
/// [`buffer_mut`](Self::buffer_mut)).
#[derive(Debug)]
pub struct Persistent<T: Pod + Send> {
    comm: Communicator,
    /// `Some(dest)` for a send; receives take `src`.
    dest: Option<u32>,
    src: Source,
    tag: Tag,
    buf: Option<Vec<T>>,
    run: Option<Request<T>>,
}

impl Communicator {
    /// A persistent send of `buf` to `dest` with `tag` (`MPI_Send_init`); nothing is sent
    /// until [`Persistent::start`].
    pub fn send_init<T: Pod + Send>(
        &self,
        buf: Vec<T>,
        dest: u32,
        tag: Tag,
    ) -> Result<Persistent<T>> {
        self.world_rank(dest)?;
        Ok(Persistent {
            comm: self.clone(),
            dest: Some(dest),
            src: Source::Any,
            tag,
            buf: Some(buf),
            run: None,
        })
    }

    /// A persistent receive into `buf` from `src` with `tag` (`MPI_Recv_init`); nothing is
    /// posted until [`Persistent::start`].
    pub fn recv_init<T: Pod + Send>(
        &self,
        buf: Vec<T>,
        src: impl Into<Source>,
        tag: Tag,
    ) -> Result<Persistent<T>> {
        let src = src.into();
        self.source(src)?;
        Ok(Persistent {
            comm: self.clone(),
            dest: None,
            src,
            tag,
            buf: Some(buf),
            run: None,
        })
    }
}

impl<T: Pod + Send> Persistent<T> {
    /// Starts one run (`MPI_Start`); an error if the previous run was not waited for.
    pub fn start(&mut self) -> Result<()> {
        let Some(buf) = self.buf.take() else {
            return Err(CommError::InvalidArg(if self.run.is_some() {
                "start of a persistent request that is still active: wait for it first".into()
            } else {
                "start of a persistent request whose last run failed (its buffer went with it)"
                    .into()
            }));
        };
        let req = match self.dest {
            Some(d) => self.comm.isend(buf, d, self.tag),
            None => self.comm.irecv(buf, self.src, self.tag),
        };
        self.run = Some(req?);
        Ok(())
    }

    /// Waits for the current run; its status. An error if it was not started.
    pub fn wait(&mut self) -> Result<Status> {
        let Some(run) = self.run.take() else {
            return Err(CommError::InvalidArg(
                "wait on a persistent request that was not started".into(),
            ));
        };
        // A failed run takes the buffer with it: the request cannot start again.
        let (buf, st) = run.wait()?;
        self.buf = Some(buf);
        Ok(st)
    }

    /// Whether the current run has completed (progressing once); `true` when none is active.
    pub fn test(&mut self) -> bool {
        self.run.as_mut().is_none_or(Request::test)
    }

    /// Whether a run is under way (started, not yet waited for).
    pub fn is_active(&self) -> bool {
        self.run.is_some()
    }

    /// The buffer between runs; `None` while a run is active (or after a failed one).
    pub fn buffer(&self) -> Option<&[T]> {
        self.buf.as_deref()
    }

    /// The buffer between runs, to fill before the next start of a send.
    pub fn buffer_mut(&mut self) -> Option<&mut [T]> {
        self.buf.as_deref_mut()
    }
}

/// Starts every persistent request in turn (`MPI_Startall`). All are tried; the first error
/// is returned (the requests that started stay active and must still be waited for).
pub fn start_all<T: Pod + Send>(reqs: &mut [Persistent<T>]) -> Result<()> {
    let mut err = None;
    for r in reqs.iter_mut() {
        if let Err(e) = r.start() {
            err.get_or_insert(e);
        }
    }
    err.map_or(Ok(()), Err)
}

/// If any request has completed (progressing once), removes it from `reqs` and returns its
/// index, buffer and status (`MPI_Testany`); `None` when none has.
pub fn test_any<T: Pod + Send>(
    reqs: &mut Vec<Request<T>>,
) -> Result<Option<(usize, Vec<T>, Status)>> {
    let Some(i) = reqs.iter_mut().position(Request::test) else {
        return Ok(None);
    };
    let (buf, st) = reqs.remove(i).wait()?;
    Ok(Some((i, buf, st)))
}

/// Whether every request has completed (progressing once each; `MPI_Testall`). The requests
/// stay; [`wait_all`] then takes their results without waiting.
pub fn test_all<T: Pod + Send>(reqs: &mut [Request<T>]) -> bool {
    // Tests every request (not stopping at the first pending one): each test progresses.
    let mut all = true;
    for r in reqs.iter_mut() {
        all &= r.test();
    }
    all
}

/// Removes every completed request from `reqs` (progressing once each) and returns their
/// indices in `reqs` as it was, buffers and statuses (`MPI_Testsome`); empty when none has
/// completed. The first error met is returned after every completed request was taken.
pub fn test_some<T: Pod + Send>(
    reqs: &mut Vec<Request<T>>,
) -> Result<Vec<(usize, Vec<T>, Status)>> {
    let done: Vec<bool> = reqs.iter_mut().map(Request::test).collect();
    let mut out = Vec::new();
    let mut err = None;
    let mut i = 0;
    for (orig, d) in done.into_iter().enumerate() {
        if !d {
            i += 1;
            continue;
        }
        match reqs.remove(i).wait() {
            Ok((buf, st)) => out.push((orig, buf, st)),
            Err(e) => {
                err.get_or_insert(e);
            }
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Waits until at least one request completes, then does [`test_some`] (`MPI_Waitsome`);
/// errors when `reqs` is empty.
pub fn wait_some<T: Pod + Send>(
    reqs: &mut Vec<Request<T>>,
) -> Result<Vec<(usize, Vec<T>, Status)>> {
    if reqs.is_empty() {
        return Err(CommError::InvalidArg("wait_some on no requests".into()));
    }
    if !reqs.iter().any(|r| r.done.is_some()) {
        let shared = reqs[0].shared.clone();
        let ids: Vec<ReqId> = reqs.iter().filter_map(|r| r.req).collect();
        shared.block_on(|e| ids.iter().any(|&id| e.is_done(id)).then_some(()));
    }
    test_some(reqs)
}

/// Requests borrowing buffers for the duration of [`Communicator::scope`].
#[derive(Debug)]
pub struct Scope<'s, 'env> {
    comm: &'s Communicator,
    /// Requests started in the scope and not yet waited for, in start order. A queue, not a
    /// map: requests are mostly waited for in the order they started, so the one waited for
    /// is found first and leaves from the front (a map was hashed into and grown per scope).
    /// Guarded by the engine's lock, which every start and wait takes anyway (a lock of its
    /// own cost two more atomic operations per request): see [`Scope::live`].
    live: std::cell::UnsafeCell<std::collections::VecDeque<ReqId>>,
    _env: PhantomData<&'env mut &'env ()>,
}

// SAFETY: the one field not otherwise shareable, `live`, is touched only through
// `Scope::live`, whose caller holds the lock of the engine of `comm` (the `&mut Engine` it
// passes can come from nowhere else), so no two threads access it at once.
unsafe impl Sync for Scope<'_, '_> {}

/// A request inside a [`Scope`].
#[derive(Debug)]
#[must_use = "a request does nothing useful unless waited for"]
pub struct ScopedRequest<'s, 'env> {
    scope: &'s Scope<'s, 'env>,
    req: ReqId,
    elem: usize,
    /// An operation that completed when it started (an eager send that went straight in, a
    /// receive whose message was already there): its status, and no request behind it.
    done: Option<Status>,
}

impl<'s, 'env> Scope<'s, 'env> {
    /// The list of live requests. `_held` is the scope's engine, locked: only its holder
    /// reaches the list, for as long as it holds it.
    #[allow(clippy::mut_from_ref)]
    fn live<'g>(&self, _held: &'g mut Engine) -> &'g mut std::collections::VecDeque<ReqId> {
        // SAFETY: every caller passes the engine of `self.comm` borrowed from its lock's guard
        // (an engine is reachable only through its lock), and the list is borrowed no longer
        // than that borrow: accesses never overlap.
        unsafe { &mut *self.live.get() }
    }

    fn track(&'s self, e: &mut Engine, req: ReqId, elem: usize) -> ScopedRequest<'s, 'env> {
        self.live(e).push_back(req);
        ScopedRequest {
            scope: self,
            req,
            elem,
            done: None,
        }
    }

    /// A request that completed when it started, with status `st` (of `elem`-byte elements).
    /// No request id stands behind it.
    fn completed(&'s self, st: Status, elem: usize) -> ScopedRequest<'s, 'env> {
        ScopedRequest {
            scope: self,
            req: ReqId::MAX,
            elem,
            done: Some(st),
        }
    }

    /// The communicator of the scope.
    pub(crate) fn comm(&self) -> &'s Communicator {
        self.comm
    }

    /// Starts sending a region (host or device memory) the scope's borrow keeps valid.
    pub(crate) fn isend_region(
        &'s self,
        region: Region,
        dest: u32,
        tag: Tag,
    ) -> Result<ScopedRequest<'s, 'env>> {
        let wdest = self.comm.world_rank(dest)?;
        let len = region.len();
        let mut e = self.comm.shared.lock();
        match e.send(self.comm.ctx, wdest, tag.0, region, "isend", true)? {
            Some(req) => Ok(self.track(&mut e, req, 1)),
            None => Ok(self.completed(self.comm.sent_status(tag, len), 1)),
        }
    }

    /// Starts receiving into a region the scope's borrow keeps valid.
    pub(crate) fn irecv_region(
        &'s self,
        region: Region,
        src: Source,
        tag: Tag,
    ) -> Result<ScopedRequest<'s, 'env>> {
        let src = self.comm.source(src)?;
        let mut e = self.comm.shared.lock();
        let req = e.irecv(self.comm.ctx, src, tag.sel(), region, "irecv")?;
        Ok(self.track(&mut e, req, 1))
    }

    /// Starts sending a borrowed buffer.
    pub fn isend<T: Pod>(
        &'s self,
        buf: &'env [T],
        dest: u32,
        tag: Tag,
    ) -> Result<ScopedRequest<'s, 'env>> {
        let wdest = self.comm.world_rank(dest)?;
        // An eager message that fits the transport now is complete on return: no request.
        let mut e = self.comm.shared.lock();
        match e.send(
            self.comm.ctx,
            wdest,
            tag.0,
            Region::from_ref(bytes_of(buf)),
            "isend",
            true,
        )? {
            Some(req) => Ok(self.track(&mut e, req, size_of::<T>())),
            None => {
                Ok(self.completed(self.comm.sent_status(tag, size_of_val(buf)), size_of::<T>()))
            }
        }
    }

    /// Starts receiving into a borrowed buffer.
    pub fn irecv<T: Pod>(
        &'s self,
        buf: &'env mut [T],
        src: impl Into<Source>,
        tag: Tag,
    ) -> Result<ScopedRequest<'s, 'env>> {
        let src = self.comm.source(src.into())?;
        let bytes = bytes_of_mut(buf);
        let mut e = self.comm.shared.lock();
        if let Some(st) = recv_now(&mut e, self.comm.ctx, src, tag, bytes) {
            drop(e);
            return Ok(self.completed(self.comm.local(st), size_of::<T>()));
        }
        let req = e.irecv(
            self.comm.ctx,
            src,
            tag.sel(),
            Region::from_mut(bytes),
            "irecv",
        )?;
        Ok(self.track(&mut e, req, size_of::<T>()))
    }
}

/// A receive being posted takes a message already at the head of a node peer's ring at once
/// when the matcher says it is this receive's (see `p2p::engine::direct`).
fn recv_now(e: &mut Engine, ctx: u32, src: Source, tag: Tag, buf: &mut [u8]) -> Option<Status> {
    let room = buf.len();
    recv_now_into(e, ctx, src, tag, room, &mut |p| {
        buf[..p.len()].copy_from_slice(p)
    })
}

/// [`recv_now`] handing the payload, at most `room` bytes, to `put` (see
/// `Engine::recv_now_into`).
fn recv_now_into(
    e: &mut Engine,
    ctx: u32,
    src: Source,
    tag: Tag,
    room: usize,
    put: &mut impl FnMut(&[u8]),
) -> Option<Status> {
    match (src, tag.sel()) {
        (Source::Rank(r), t @ (TagSel::Tag(0..) | TagSel::Any)) => {
            match e.recv_now_into(ctx, r, t, room, put) {
                Direct::Done(st) => Some(st),
                Direct::Empty | Direct::General => None,
            }
        }
        _ => None,
    }
}

/// `st`, or the error of a message that is not a whole number of `elem`-byte elements.
fn check_size(st: Status, elem: usize) -> Result<Status> {
    if elem > 0 && !st.bytes.is_multiple_of(elem) {
        return Err(CommError::Size {
            bytes: st.bytes,
            elem,
        });
    }
    Ok(st)
}

impl ScopedRequest<'_, '_> {
    /// Waits for completion.
    pub fn wait(self) -> Result<Status> {
        if let Some(st) = self.done {
            return check_size(st, self.elem);
        }
        let (scope, req) = (self.scope, self.req);
        // Under the lock the wait takes anyway: the request leaves the live list.
        let forget = |e: &mut Engine| {
            let live = scope.live(e);
            // In-order waits find theirs at the front: a pop, not a search.
            if live.front() == Some(&req) {
                live.pop_front();
            } else if let Some(i) = live.iter().position(|&r| r == req) {
                live.remove(i);
            }
        };
        let st = scope.comm.local(scope.comm.shared.wait_with(req, forget)?);
        check_size(st, self.elem)
    }

    /// Whether it has completed (progressing once).
    pub fn test(&self) -> bool {
        if self.done.is_some() {
            return true;
        }
        self.scope.comm.shared.test_req(self.req)
    }
}

/// A message taken out of matching by [`Communicator::mprobe`]; receive it with
/// [`recv_into`](Message::recv_into) or [`recv_vec`](Message::recv_vec). Dropping it discards
/// the message.
#[derive(Debug)]
pub struct Message {
    shared: Arc<Shared>,
    group: Option<Arc<Members>>,
    env: Envelope,
    stored: Option<Stored>,
}

impl Message {
    /// Sender, tag and size.
    pub fn status(&self) -> Status {
        localize(
            &self.group,
            Status {
                source: self.env.source,
                tag: self.env.tag,
                bytes: self.env.len as usize,
            },
        )
    }

    /// Receives the message into `buf` (truncation as for [`Communicator::recv`]).
    pub fn recv_into<T: Pod>(mut self, buf: &mut [T]) -> Result<Status> {
        let stored = self.stored.take().expect("message unreceived");
        let req =
            self.shared
                .lock()
                .recv_stored(self.env, stored, Region::from_mut(bytes_of_mut(buf)));
        check_elems::<T>(&localize(&self.group, self.shared.wait(req)?))
    }

    /// Receives the message into a new vector of exactly its size.
    pub fn recv_vec<T: Pod>(self) -> Result<(Vec<T>, Status)> {
        let elem = size_of::<T>().max(1);
        let bytes = self.env.len as usize;
        if !bytes.is_multiple_of(elem) {
            return Err(CommError::Size { bytes, elem });
        }
        let mut v = vec![T::zeroed(); bytes / elem];
        let st = self.recv_into(&mut v)?;
        Ok((v, st))
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if let Some(s) = self.stored.take() {
            self.shared.lock().discard_stored(self.env, s);
        }
    }
}

/// The flight recorder's view of a communicator (`crate::fr` keeps the records).
impl Communicator {
    /// Names the communicator (as `MPI_Comm_set_name`): the name appears in the hang report
    /// and in timeout errors. Local: each rank names its own handle (all clones share it);
    /// the world is `world`, a [`Mesh`](crate::Mesh)'s communicators are named by their
    /// dimension. At most 256 bytes are kept.
    pub fn set_name(&self, name: &str) {
        rcomm_runtime::flight::recorder().set_name(self.ctx, name);
    }

    /// The communicator's name ("" if it has none).
    pub fn name(&self) -> String {
        rcomm_runtime::flight::recorder().name(self.ctx)
    }

    /// The last collective this process recorded on this communicator (its clones, such as
    /// [`with_algo`](Self::with_algo)'s, share it), read from the flight recorder: which
    /// collective, the algorithm chosen for it, and its number. `None` before the first one,
    /// once the recorder has overwritten it (it keeps the last `RCOMM_FR_SIZE` operations of
    /// the process), or with the recorder off (`RCOMM_FR_SIZE=0`).
    ///
    /// The algorithm is the one that runs: the one chosen — forced ([`with_algo`],
    /// `RCOMM_ALGO`) or the tuner's — or, where the call cannot run the choice, its fallback
    /// (a non-blocking or in-place call runs `shm` as `direct` or `tree`; `hier`'s allgather
    /// and reduce-scatter on nodes with different rank counts, `bruck` and `tree` with unequal
    /// counts fall back too). A non-blocking collective's record begins when it is started, so the
    /// algorithm is known before `wait`. Local and diagnostic (tests and logs use it to show
    /// which algorithm ran); it copies the recorder, so it does not belong in a hot loop. A
    /// communicator on a reused context id may see its predecessor's last collective until it
    /// runs its own first one.
    ///
    /// [`with_algo`]: Self::with_algo
    pub fn last_collective(&self) -> Option<crate::fr::CollRecord> {
        crate::fr::last_collective(self.ctx)
    }

    /// Tells the flight recorder a communicator was made on this context id.
    pub(crate) fn fr_created(&self, name: &str) {
        let first = (0..self.size)
            .filter_map(|r| self.world_rank(r).ok())
            .min()
            .unwrap_or(0);
        rcomm_runtime::flight::recorder().comm_created(self.ctx, first, self.size, name);
    }
}
