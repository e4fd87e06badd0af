//! The point-to-point protocol engine of one process: requests, eager and rendezvous
//! protocols, matching per communicator, failure handling. It runs under the caller's lock;
//! progress happens inside calls.
//!
//! Protocols, chosen per message by the transport's capabilities:
//! - **Eager** (payload ≤ the transport's eager limit): header and payload in one message; a
//!   receive already posted gets one copy, straight from the transport's buffer.
//! - **Rendezvous** (larger): the sender announces the message (RTS: its token and, when the
//!   peer's bulk lane offers GET, the remote key of its buffer). On match the receiver picks the
//!   protocol from the lane's operations and the size:
//!   - **GET**: it pulls the sender's buffer (single copy today; RDMA read, CUDA IPC later)
//!     and answers FIN when the transport completes the read;
//!   - **PUT**: it registers its buffer and sends a CTS with its key; the sender writes into it
//!     and, once its transport completes the write, sends FIN to the receiver;
//!   - **STREAM**: it sends a CTS with its token, after which the sender streams chunks that
//!     the receiver copies into place.
//!
//!   A transport that refuses GET for a peer (the kernel's ptrace policy) makes the receiver
//!   use the next protocol. A receiver that is not ready holds only the small RTS, never the
//!   payload. Asynchronous movers complete through tokens ([`Deliver::completed`]); a buffer
//!   is the transport's until then.
//! - **Self** messages skip the transports.
//!
//! This module holds the requests and the calls that make them; `proto` the protocols,
//! `failure` lost peers, `registry` the communicators, revocation and checked mode's hook.
//!
//! Why one file: the request table and the calls that move a request through its states; the
//! protocols, lost peers and the registry are already the children named above.

use super::hook::{Hook, Stamp};
use super::matcher::{
    Envelope, Matcher, Posting, RecvId, Route as MRoute, Source, TagSel, Withdraw,
};
use super::region::Region;
use crate::CommError;
use rcomm_runtime::fastmap::FastMap;
use rcomm_runtime::wire::{Header, ProtoKind};
use rcomm_transport::caps::{Features, Ops};
use rcomm_transport::error::TransportError;
use rcomm_transport::mem::{MemKind, MemRef, RKey};
use rcomm_transport::net::{Lane, Net, NetCounters, Route};
use rcomm_transport::transport::{Deliver, Incoming, Tx};
use std::collections::VecDeque;
use std::sync::Arc;

mod direct;
mod failure;
mod proto;
mod registry;

pub(crate) use direct::Direct;

use proto::keyed;

/// What a completed receive reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The sender's rank.
    pub source: u32,
    /// The message's tag.
    pub tag: i32,
    /// Bytes received.
    pub bytes: usize,
}

impl Status {
    /// Number of whole `T` elements received.
    pub fn count<T>(&self) -> usize {
        self.bytes / size_of::<T>().max(1)
    }
}

/// Index of a request in the engine.
pub(crate) type ReqId = usize;

/// A message taken out of matching by `mprobe`, waiting for its receive.
#[derive(Debug)]
pub(crate) enum Stored {
    Eager(Vec<u8>),
    /// A non-blocking synchronous send of this rank to itself: `sender` completes when a
    /// receive matches the data (MPI_Issend's completion means "matched", even to oneself).
    SelfSync {
        data: Vec<u8>,
        sender: ReqId,
    },
    Rts {
        sender_token: u64,
        /// The sender's buffer, when its lane offers GET.
        key: Option<RKey>,
        /// The sender's buffer is device memory (its key, if any, is the device lane's
        /// unless `net`).
        dev: bool,
        /// The key is the network lane's (device memory reached by GPUDirect RDMA).
        net: bool,
    },
}

#[derive(Debug)]
enum ReqState {
    Active,
    /// Boxed error: a request's state stays small, so completing one moves a few words.
    Done(Result<Status, Box<CommError>>),
}

#[derive(Debug)]
struct Req {
    op: &'static str,
    /// Destination of a send; source of a receive once known (or when specific).
    peer: Option<u32>,
    /// Posted receives on a wildcard source fail when any peer is lost.
    wildcard: bool,
    region: Region,
    state: ReqState,
    /// Context of the communicator it belongs to (`u32::MAX`: none).
    ctx: u32,
    /// A posted receive's place in its matcher (`RecvId::seq`; the owner is the request's id,
    /// the matcher that of `ctx`): kept to one word so a request stays small to move.
    posted: Option<u64>,
    /// A send's sequence number (what its cancel names); `None` for a receive.
    seq: Option<u32>,
    /// A buffer the user dropped before completion; freed when the request completes.
    orphan: Option<Orphan>,
}

/// A buffer owned until its request completes, then dropped; never read, so only its owner
/// type is kept.
struct Orphan(#[allow(dead_code)] Box<dyn Send>);

impl std::fmt::Debug for Orphan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Orphan")
    }
}

// Every request moves into and out of the slab whole: up to 128 bytes that is a few register
// moves, beyond it a call to memcpy on every post and every completion.
const _: () = assert!(size_of::<Option<Req>>() <= 128);

/// A send's cancel waiting for the receiver's answer, by its token.
#[derive(Debug)]
struct CancelOut {
    req: ReqId,
    peer: u32,
    ctx: u32,
    seq: u32,
    /// The answer, once in: withdrawn or not.
    answer: Option<bool>,
}

/// What [`Engine::cancel_send`] started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelSend {
    /// Decided here: cancelled (the request is then freed) or not.
    Done(bool),
    /// The receiver was asked; [`Engine::cancel_send_answer`] with this token says.
    Asked(u64),
}

#[derive(Debug, Clone)]
enum OutPayload {
    Small([u8; 32], u8),
    User(Region),
    /// A rendezvous record carrying a remote key (rare: one per large message).
    Keyed(Box<[u8]>),
}

#[derive(Debug)]
struct Out {
    hdr: Header,
    payload: OutPayload,
    /// Send request completed when the message is handed to the transport.
    req: Option<ReqId>,
}

/// Registrations to hand back to the transport: (peer, memory registered).
type ReleaseQ = std::sync::Arc<Releases>;

/// Keys handed back by dropped rendezvous records, for the next progress pass to release.
/// `pending` lets that pass skip the lock when nothing was handed back (nearly always).
#[derive(Default, Debug)]
struct Releases {
    pending: std::sync::atomic::AtomicBool,
    keys: std::sync::Mutex<Vec<(u32, MemRef)>>,
}

impl Releases {
    fn push(&self, peer: u32, m: MemRef) {
        self.keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((peer, m));
        // Release: the pass that sees the flag sees the key under the lock anyway; the order
        // only makes a set flag imply a pushed key.
        self.pending
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// What was handed back since the last call (nothing, without locking, when nothing was).
    fn take(&self) -> Vec<(u32, MemRef)> {
        if !self
            .pending
            .swap(false, std::sync::atomic::Ordering::Acquire)
        {
            return Vec::new();
        }
        std::mem::take(&mut *self.keys.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A registration made for a peer to reach a buffer (the key of an RTS or of a PUT's CTS),
/// on a transport that pins memory per registration. However the rendezvous ends — done,
/// failed, cancelled, its peer lost — its record is dropped, and this hands the registration
/// back (queued; [`Engine::progress`] passes it to the transport).
#[derive(Debug)]
struct Exposed {
    peer: u32,
    m: MemRef,
    q: ReleaseQ,
}

impl Drop for Exposed {
    fn drop(&mut self) {
        self.q.push(self.peer, self.m);
    }
}

#[derive(Debug)]
struct RndvSend {
    req: ReqId,
    peer: u32,
    /// The message's tag, for the send's status.
    tag: i32,
    region: Region,
    recv_token: Option<u64>,
    offset: usize,
    /// A PUT into the receiver's buffer is under way (the transport holds `region`), to the
    /// key of the receiver's CTS.
    putting: Option<RKey>,
    /// Host staging of a device buffer streamed in chunks: the bytes at `offset..` copied out
    /// of the device and not yet taken by the transport.
    stage: Option<Box<Stage>>,
    /// The registration behind the RTS's key, handed back when this record goes.
    _exposed: Option<Exposed>,
}

/// Host staging of a device buffer streamed in chunks of `STAGE_BYTES`: chunk `k` goes through
/// staging buffer `k % 2` (pinned on CUDA), and its copy out of the device starts as soon as
/// chunk `k - 2` has been sent, so copying one chunk overlaps sending the one before.
#[derive(Debug, Default)]
struct Stage {
    bufs: [Option<StageBuf>; 2],
    /// The copy into each buffer, while under way.
    copies: [Option<Pending>; 2],
    /// Chunks whose copy was started.
    issued: usize,
}

impl Drop for Stage {
    fn drop(&mut self) {
        // A copy still writing a staging buffer ends before the buffer goes back to the pool.
        if let Some(g) = rcomm_transport::gpu::gpu_if_present() {
            for p in self.copies.iter_mut().filter_map(Option::take) {
                let _ = g.finish(p);
            }
        }
    }
}

/// Host staging of a device receive fed in chunks: chunk `k` lands in staging buffer `k % 2`
/// (pinned on CUDA) and goes on to the device by a copy on the sender's copy stream with an
/// event of its own, so the chunks chain on that stream while the host takes in the next one;
/// its bytes count as received once its copy is done. Only when a buffer's previous copy is
/// still running as the chunk after next arrives does the host wait for it.
#[derive(Debug, Default)]
struct StageIn {
    bufs: [Option<StageBuf>; 2],
    /// The copy out of each buffer to the device, while under way, with its length.
    copies: [Option<(Pending, usize)>; 2],
    /// Chunks placed so far.
    placed: usize,
    /// A chunk larger than a staging buffer (a transport's choice): bounced through here and
    /// copied synchronously.
    big: Vec<u8>,
}

impl StageIn {
    /// Whether a copy to the device is under way.
    fn landing(&self) -> bool {
        self.copies.iter().any(Option::is_some)
    }

    /// Makes the buffer of the next chunk of `len` bytes free: waits for its previous copy
    /// if that still runs (the one host wait of this path); the bytes that copy landed.
    fn room(&mut self, len: usize) -> Result<usize, rcomm_transport::gpu::GpuError> {
        if len > STAGE_BYTES {
            return Ok(0);
        }
        let g = rcomm_transport::gpu::gpu()?;
        let b = self.placed % 2;
        let mut landed = 0;
        if let Some((p, n)) = self.copies[b].take() {
            if g.query(&p)? {
                g.release(p)?;
            } else {
                g.finish(p)?;
            }
            landed = n;
        }
        if self.bufs[b].is_none() {
            self.bufs[b] = Some(StageBuf::take(g)?);
        }
        Ok(landed)
    }

    /// Where the next chunk of `len` bytes goes (after [`room`](Self::room)).
    fn slot(&mut self, len: usize) -> &mut [u8] {
        if len > STAGE_BYTES {
            if self.big.len() < len {
                self.big.resize(len, 0);
            }
            return &mut self.big[..len];
        }
        let b = self.placed % 2;
        self.bufs[b].as_mut().expect("taken by room").bytes_mut(len)
    }

    /// The chunk of `len` bytes just placed goes to device address `dst`: `Ok(true)` when its
    /// copy was started on `peer`'s copy stream, `Ok(false)` when it is already there (a
    /// chunk too large for a staging buffer, copied synchronously).
    fn landed(
        &mut self,
        peer: u32,
        dst: u64,
        len: usize,
    ) -> Result<bool, rcomm_transport::gpu::GpuError> {
        let g = rcomm_transport::gpu::gpu()?;
        if len > STAGE_BYTES {
            g.copy_htod(dst, &self.big[..len])?;
            return Ok(false);
        }
        let b = self.placed % 2;
        let src = self.bufs[b].as_ref().expect("taken by room").addr();
        let p = g.copy_htod_async(peer, dst, src, len)?;
        self.copies[b] = Some((p, len));
        self.placed += 1;
        Ok(true)
    }

    /// Releases the copies that are done; the bytes they landed.
    fn poll(&mut self) -> Result<usize, rcomm_transport::gpu::GpuError> {
        let g = rcomm_transport::gpu::gpu()?;
        let mut landed = 0;
        for c in &mut self.copies {
            if let Some((p, n)) = c.take_if(|(p, _)| g.query(p).unwrap_or(true)) {
                g.release(p)?;
                landed += n;
            }
        }
        Ok(landed)
    }
}

impl Drop for StageIn {
    fn drop(&mut self) {
        // A copy still reading a staging buffer ends before the buffer goes back to the pool
        // (and before the receive buffer goes back to its owner). Host receives carry an
        // empty one: they must not wake the device layer.
        if !self.landing() {
            return;
        }
        if let Some(g) = rcomm_transport::gpu::gpu_if_present() {
            for (p, _) in self.copies.iter_mut().filter_map(Option::take) {
                let _ = g.finish(p);
            }
        }
    }
}

use rcomm_transport::gpu::{Pending, STAGE_BYTES, StageBuf};

/// RTS flag: the sender's buffer is device memory.
const RTS_DEV: u8 = 1;
/// RTS flag, with [`RTS_DEV`]: the key is the network lane's (GPUDirect RDMA), not the
/// node-local device lane's.
const RTS_NET: u8 = 2;

#[derive(Debug)]
struct RndvRecv {
    req: ReqId,
    peer: u32,
    env: Envelope,
    received: u64,
    /// The sender writes into the buffer (PUT) rather than streaming chunks.
    put: bool,
    /// Host staging of chunks a transport places before they go to device memory.
    stage: StageIn,
    /// The registration behind a PUT CTS's key, handed back when this record goes.
    exposed: Option<Exposed>,
}

/// A GET to start (or under way, in `gets`).
#[derive(Debug, Clone, Copy)]
struct Pull {
    req: ReqId,
    peer: u32,
    env: Envelope,
    sender_token: u64,
    key: RKey,
    /// The key names device memory: the device lane pulls it.
    dev: bool,
    /// The sender's buffer is device memory (pulled by GPUDirect RDMA when not `dev`).
    src_dev: bool,
}

/// What the sender's CTS handling must start with the transport.
#[derive(Debug, Clone, Copy)]
struct PutStart {
    send_token: u64,
    key: RKey,
}

/// CTS flag word: the receiver asks for a PUT into the key that follows.
const CTS_PUT: u64 = 1;
/// FIN flag: the sender's PUT is complete; the token is the receiver's.
const FIN_PUT: u8 = 1;
/// FIN flag: the sender's PUT failed (the receiver's buffer holds nothing usable).
const FIN_PUT_FAILED: u8 = 2;

#[derive(Debug, Default)]
struct Ctx {
    m: Matcher<Stored>,
    /// Next sequence number per destination (a checked rank), by rank.
    send_seq: rcomm_runtime::dense::DenseMap<u32>,
}

/// Protocol thresholds. GET (single copy on shared memory) is used up to `get_max` (it wins
/// from 64 KiB; pipelined copy takes over above it, measured in docs/performance.md).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProtoConfig {
    pub get_max: usize,
}

/// Protocol state, separate from the transports so transport callbacks can update it.
#[derive(Debug)]
struct State {
    me: u32,
    size: u32,
    cfg: ProtoConfig,
    /// Matching state per context, found by its number (contexts are below [`MAX_CTX`]).
    ctx: rcomm_runtime::dense::DenseMap<Ctx>,
    reqs: Vec<Option<Req>>,
    free: Vec<ReqId>,
    /// Which requests completed, for readers without the lock (`Shared::test_req`).
    done: Arc<super::done::DoneFlags>,
    /// Requests not yet completed (the direct receive path runs only when there are none).
    active: usize,
    /// Messages waiting for room in a transport, per destination rank.
    out: rcomm_runtime::dense::DenseMap<VecDeque<Out>>,
    /// Entries in all of `out`, so an idle progress pass skips the queues in O(1).
    out_len: usize,
    rndv_send: FastMap<u64, RndvSend>,
    rndv_recv: FastMap<u64, RndvRecv>,
    streaming: Vec<u64>,
    /// Device receives (tokens) with staged chunks on their way to the device.
    landing: Vec<u64>,
    /// GETs to start, and GETs under way by their receive token.
    pulls: Vec<Pull>,
    gets: FastMap<u64, Pull>,
    /// PUTs to start (a CTS asked for one), and receives waiting to send a PUT-CTS.
    put_starts: Vec<PutStart>,
    put_cts: Vec<(ReqId, u32, Envelope, u64)>,
    released: Vec<(RecvId, Envelope, Stored)>,
    next_token: u64,
    failed: FastMap<u32, String>,
    /// Failed peers the launcher declared hung (no heartbeat): their errors are `PeerHung`.
    hung: Vec<u32>,
    /// Bulk operations each peer's host-memory lane offers (GET goes when a transport refuses
    /// it for that peer).
    bulk: Vec<Ops>,
    /// Registrations whose rendezvous ended, to hand back to the transport.
    releases: ReleaseQ,
    /// Some peer's transport wants registrations handed back (else `releases` stays empty).
    any_releases: bool,
    /// Per peer: its host-memory lane's NIC reaches this rank's device memory (GPUDirect
    /// RDMA); cleared when a registration of device memory is refused.
    gdr: Vec<bool>,
    hosts: Vec<String>,
    error: Option<(u32, String)>,
    /// Buffers of consumed unexpected messages, reused so a steady stream of unexpected small
    /// messages does not allocate.
    pool: Vec<Vec<u8>>,
    /// Revocations that arrived (context, from), taken by the engine after delivery.
    revokes_in: Vec<(u32, u32)>,
    /// Checked collectives (`RCOMM_CHECK=1`): the hook `coll::check` installs.
    hook: Option<Box<dyn Hook>>,
    /// Cancels of sends asked of their receivers, by token.
    cancels: FastMap<u64, CancelOut>,
}

/// Contexts a communicator can have: two per context id (point-to-point and collective).
pub(crate) const MAX_CTX: u32 = 2 * crate::ctxid::MAX_IDS as u32;

/// Most buffers kept in the pool, and the largest capacity kept.
const POOL_MAX: usize = 64;
const POOL_BUF_MAX: usize = 64 << 10;

/// The engine: protocol state plus the transports.
#[derive(Debug)]
pub(crate) struct Engine {
    st: State,
    net: Net,
    /// Ranks the launcher reported failed.
    reported: Vec<u32>,
    /// Members of each live communicator by user context (even): `None` for every rank.
    comms: FastMap<u32, Option<Arc<[u32]>>>,
    notices: Option<Arc<rcomm_runtime::bootstrap::kvs::NoticeBoard>>,
    /// Revoked communicators (user context) and the rank that revoked each.
    revoked: FastMap<u32, u32>,
}

/// First word of a `Control` message that revokes a communicator; the second holds its
/// context (high half) and the rank that revoked it (low half).
const CTL_REVOKE: u64 = 1;
/// First word of a `Control` message asking the receiver to withdraw a message whose send is
/// being cancelled: then its context (high half) and sequence number (low half), and the
/// sender's token for the answer.
pub(crate) const CTL_CANCEL: u64 = 2;
/// First word of the answer to a `CTL_CANCEL`: then the token and one of `CANCEL_*`.
pub(crate) const CTL_CANCEL_REPLY: u64 = 3;
/// The message was withdrawn: no receive will ever see it.
pub(crate) const CANCEL_WITHDRAWN: u64 = 0;
/// A receive matched it already: the send completes as usual.
const CANCEL_MATCHED: u64 = 1;
/// It has not arrived yet (another lane is still carrying it): ask again.
const CANCEL_NOT_ARRIVED: u64 = 2;

/// How long a transport's loss of a peer waits for the launcher's notice about it (or about
/// the rank whose failure made the peer leave). Only an error path waits this long, and only
/// when the peer left without a notice: the launcher polls its ranks every 20 ms, but on an
/// oversubscribed node its notice was seen to take over 250 ms, and the error then named the
/// peer that gave up instead of the rank that failed.
pub(crate) const NOTICE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

fn small(vals: &[u64]) -> OutPayload {
    let mut b = [0u8; 32];
    for (i, v) in vals.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    OutPayload::Small(b, (vals.len() * 8) as u8)
}

fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    b.get(i * 8..i * 8 + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
}

impl Engine {
    pub(crate) fn new(me: u32, size: u32, net: Net, hosts: Vec<String>, cfg: ProtoConfig) -> Self {
        Self {
            st: State {
                me,
                size,
                cfg,
                ctx: Default::default(),
                reqs: Vec::new(),
                free: Vec::new(),
                done: Default::default(),
                active: 0,
                out: Default::default(),
                out_len: 0,
                rndv_send: FastMap::default(),
                rndv_recv: FastMap::default(),
                streaming: Vec::new(),
                landing: Vec::new(),
                pulls: Vec::new(),
                gets: FastMap::default(),
                put_starts: Vec::new(),
                put_cts: Vec::new(),
                released: Vec::new(),
                next_token: 1,
                failed: FastMap::default(),
                hung: Vec::new(),
                bulk: (0..size).map(|p| net.bulk_ops(p, MemKind::Host)).collect(),
                releases: Default::default(),
                any_releases: (0..size).any(|p| {
                    net.lane_features(Lane::Route, p)
                        .contains(Features::RELEASES_KEYS)
                }),
                gdr: (0..size)
                    .map(|p| {
                        net.bulk_ops(p, MemKind::Cuda { device: 0 })
                            .contains(Ops::GET)
                    })
                    .collect(),
                hosts,
                error: None,
                pool: Vec::new(),
                revokes_in: Vec::new(),
                hook: None,
                cancels: FastMap::default(),
            },
            net,
            reported: Vec::new(),
            // The world (context 0) holds every rank.
            comms: std::iter::once((0, None)).collect(),
            notices: None,
            revoked: FastMap::default(),
        }
    }

    /// This process's world rank.
    pub(crate) fn me(&self) -> u32 {
        self.st.me
    }

    pub(crate) fn counters(&self) -> NetCounters {
        self.net.counters()
    }

    pub(crate) fn route(&self, peer: u32) -> Route {
        self.net.route(peer)
    }

    pub(crate) fn net(&self) -> &Net {
        &self.net
    }

    #[cfg(test)]
    pub(crate) fn net_mut(&mut self) -> &mut Net {
        &mut self.net
    }

    /// Starts a send of `region` to `dest`; the request completes when the buffer may be reused.
    pub(crate) fn isend(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        region: Region,
        op: &'static str,
    ) -> Result<ReqId, CommError> {
        self.send(ctx, dest, tag, region, op, false)
            .map(|r| r.expect("non-blocking sends always make a request"))
    }

    /// Starts a send; a blocking caller (`blocking`) gets `None` when the message went out at
    /// once and there is nothing to wait for.
    pub(crate) fn send(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        region: Region,
        op: &'static str,
        blocking: bool,
    ) -> Result<Option<ReqId>, CommError> {
        self.send_stamped(
            ctx,
            dest,
            tag,
            region,
            op,
            blocking,
            false,
            Stamp::default(),
        )
    }

    /// Starts a synchronous send (`MPI_Ssend`): the request completes only once the receiver
    /// matched the message, so every size goes by rendezvous (its RTS is matched like any
    /// message; the data moves after). To this rank itself the message is delivered and the
    /// request completes at once: a blocking synchronous send to oneself could never be matched.
    pub(crate) fn ssend(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        region: Region,
        op: &'static str,
    ) -> Result<ReqId, CommError> {
        self.send_stamped(ctx, dest, tag, region, op, false, true, Stamp::default())
            .map(|r| r.expect("synchronous sends always make a request"))
    }

    /// [`ssend`](Self::ssend) for `MPI_Issend`: to this rank itself too the request completes
    /// only once a receive matched the message (a caller may test it before receiving, and
    /// cancel it until then).
    pub(crate) fn issend(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        region: Region,
        op: &'static str,
    ) -> Result<ReqId, CommError> {
        if dest == self.st.me && !region.is_device() {
            self.send_checks(ctx, dest, tag, op)?;
            let c = self.st.ctx_mut(ctx);
            let next = c.send_seq.get_or_default(dest);
            let seq = *next;
            *next = seq.wrapping_add(1);
            let req = self.st.new_req(op, Some(dest), false, region);
            let r = self.st.req_mut(req);
            r.ctx = ctx;
            r.seq = Some(seq);
            let hdr = Header {
                context: ctx,
                source: dest,
                seq,
                tag,
                len: region.len() as u64,
                kind: ProtoKind::Eager,
                flags: 0,
                coll_seq: 0,
                signature: 0,
            };
            self.st.deliver_self_sync(&hdr, region.bytes(), req);
            return Ok(req);
        }
        self.ssend(ctx, dest, tag, region, op)
    }

    /// [`isend`](Self::isend) of a collective's message, its header stamped for checked mode.
    pub(crate) fn isend_stamped(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        region: Region,
        op: &'static str,
        stamp: Stamp,
    ) -> Result<ReqId, CommError> {
        self.send_stamped(ctx, dest, tag, region, op, false, false, stamp)
            .map(|r| r.expect("non-blocking sends always make a request"))
    }

    #[allow(clippy::too_many_arguments)]
    fn send_stamped(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        region: Region,
        op: &'static str,
        blocking: bool,
        sync: bool,
        stamp: Stamp,
    ) -> Result<Option<ReqId>, CommError> {
        self.send_checks(ctx, dest, tag, op)?;
        // A synchronous send is never eager: its completion must wait for the match.
        if blocking
            && !sync
            && !region.is_device()
            && self.eager_now(ctx, dest, tag, region.len(), op, |net, hdr| {
                net.try_send(dest, hdr, region.bytes())
            })?
        {
            // Fast path of a blocking eager send: straight into the transport, no request.
            return Ok(None);
        }
        let c = self.st.ctx_mut(ctx);
        let next = c.send_seq.get_or_default(dest);
        let seq = *next;
        *next = seq.wrapping_add(1);
        let me = self.st.me;
        let hdr = |kind| Header {
            context: ctx,
            source: me,
            seq,
            tag,
            len: region.len() as u64,
            kind,
            flags: 0,
            coll_seq: stamp.epoch,
            signature: stamp.sig,
        };
        // A synchronous send is never eager: its completion must wait for the match.
        let eager = !sync && region.len() <= self.net.eager_limit(dest);
        if region.is_device() && (eager || dest == me) {
            // A small device message goes as a host one: one staging copy out of the device
            // costs less than a rendezvous round trip.
            let mut staged = vec![0u8; region.len()];
            region
                .read_into(0, &mut staged)
                .map_err(|e| CommError::Device {
                    op,
                    rank: me,
                    why: e.to_string(),
                })?;
            let req = self.st.new_req(op, Some(dest), false, region);
            let r = self.st.req_mut(req);
            r.ctx = ctx;
            r.seq = Some(seq);
            if dest == me {
                self.st.deliver(me, &hdr(ProtoKind::Eager), &staged);
                self.st.complete(
                    req,
                    Ok(Status {
                        source: me,
                        tag,
                        bytes: region.len(),
                    }),
                );
            } else {
                self.st.out_len += 1;
                self.st.out.get_or_default(dest).push_back(Out {
                    hdr: hdr(ProtoKind::Eager),
                    payload: OutPayload::Keyed(staged.into_boxed_slice()),
                    req: Some(req),
                });
                self.flush_peer(dest);
            }
            return Ok(Some(req));
        }
        let req = self.st.new_req(op, Some(dest), false, region);
        let r = self.st.req_mut(req);
        r.ctx = ctx;
        r.seq = Some(seq);
        if dest == me {
            // Self: deliver directly, always eagerly (the copy is the transfer).
            self.st.deliver(me, &hdr(ProtoKind::Eager), region.bytes());
            self.st.complete(
                req,
                Ok(Status {
                    source: me,
                    tag,
                    bytes: region.len(),
                }),
            );
            return Ok(Some(req));
        }
        if eager {
            self.st.out_len += 1;
            self.st.out.get_or_default(dest).push_back(Out {
                hdr: hdr(ProtoKind::Eager),
                payload: OutPayload::User(region),
                req: Some(req),
            });
        } else {
            let token = self.st.token();
            // The key lets the receiver pull; without GET it asks for PUT or STREAM instead.
            let mut net_key = false;
            let mut registered = None;
            let key = if region.is_device() {
                let kind = region.mem_ref().kind;
                if self
                    .net
                    .lane_ops(Lane::Device, dest, kind)
                    .contains(Ops::GET)
                {
                    match self.net.register_on(Lane::Device, dest, &region.mem_ref()) {
                        Ok(k) => Some(k),
                        Err(e) => {
                            rcomm_runtime::rlog!(
                                Info,
                                "P2P",
                                "no device key for rank {dest} ({e}); staging through host memory"
                            );
                            None
                        }
                    }
                } else if self
                    .net
                    .bulk_ops(dest, region.mem_ref().kind)
                    .contains(Ops::GET)
                {
                    // GPUDirect RDMA: the network lane registers the device memory.
                    match self.net.register(dest, &region.mem_ref()) {
                        Ok(k) => {
                            net_key = true;
                            registered = Some(region.mem_ref());
                            Some(k)
                        }
                        Err(e) => {
                            rcomm_runtime::rlog!(
                                Info,
                                "P2P",
                                "no RDMA key for device memory to rank {dest} ({e}); staging through host memory"
                            );
                            None
                        }
                    }
                } else {
                    None
                }
            } else if self.st.bulk[dest as usize].contains(Ops::GET) {
                let m = MemRef::host(region.addr(), region.len());
                match self.net.register(dest, &m) {
                    Ok(k) => {
                        registered = Some(m);
                        Some(k)
                    }
                    Err(e) => {
                        rcomm_runtime::rlog!(Info, "P2P", "no GET key for rank {dest}: {e}");
                        None
                    }
                }
            } else {
                None
            };
            self.st.rndv_send.insert(
                token,
                RndvSend {
                    req,
                    peer: dest,
                    tag,
                    region,
                    recv_token: None,
                    offset: 0,
                    putting: None,
                    stage: None,
                    _exposed: registered
                        .filter(|_| {
                            self.net
                                .lane_features(Lane::Route, dest)
                                .contains(Features::RELEASES_KEYS)
                        })
                        .map(|m| Exposed {
                            peer: dest,
                            m,
                            q: self.st.releases.clone(),
                        }),
                },
            );
            let mut rts = hdr(ProtoKind::RndvRts);
            if region.is_device() {
                rts.flags |= RTS_DEV;
                if net_key {
                    rts.flags |= RTS_NET;
                }
            }
            self.st.out_len += 1;
            self.st.out.get_or_default(dest).push_back(Out {
                hdr: rts,
                payload: keyed(&[token], key.as_ref()),
                req: None,
            });
        }
        self.flush_peer(dest);
        Ok(Some(req))
    }

    /// A blocking eager send of `len` bytes that `fill` writes straight into the peer's
    /// shared-memory ring (the gather of a non-contiguous layout, no packed copy): `Ok(true)`
    /// when the message went out now and there is nothing to wait for. `Ok(false)`, with
    /// nothing done and `fill` not run, when it cannot go that way at once (not a
    /// shared-memory peer, this rank itself, too large for eager, earlier sends to `dest`
    /// still queued, or the ring full); the caller then packs and sends as usual.
    pub(crate) fn send_gather_now(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        len: usize,
        op: &'static str,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, CommError> {
        self.send_now_by(ctx, dest, tag, len, op, |net, hdr| {
            net.try_send_with(dest, hdr, len, fill)
        })
    }

    /// [`send_gather_now`](Self::send_gather_now) of host bytes, over any lane: `Ok(true)`
    /// when the message went out now (eager, taken by the transport), `Ok(false)` with nothing
    /// done otherwise — never a request, so the caller may choose how to send instead.
    pub(crate) fn send_now(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        bytes: &[u8],
        op: &'static str,
    ) -> Result<bool, CommError> {
        self.send_now_by(ctx, dest, tag, bytes.len(), op, |net, hdr| {
            net.try_send(dest, hdr, bytes)
        })
    }

    fn send_now_by(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        len: usize,
        op: &'static str,
        send: impl FnOnce(&mut Net, &Header) -> Result<bool, TransportError>,
    ) -> Result<bool, CommError> {
        self.send_checks(ctx, dest, tag, op)?;
        self.eager_now(ctx, dest, tag, len, op, send)
    }

    /// What every send checks before anything else.
    fn send_checks(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        op: &'static str,
    ) -> Result<(), CommError> {
        if tag < 0 {
            return Err(CommError::InvalidTag { tag });
        }
        // The communicator's loss first: it is why nothing on it can go on.
        self.check_comm(ctx, op)?;
        if let Err(e) = self.st.check_peer(dest, op) {
            return Err(self.peer_gone(ctx, op, e));
        }
        Ok(())
    }

    /// The blocking eager send of `len` bytes straight into the transport (`send` offers the
    /// header to it), after [`send_checks`](Self::send_checks): `Ok(true)` when the message
    /// left, `Ok(false)` with nothing done when it cannot go that way now (this rank itself,
    /// earlier messages to `dest` queued, too large for eager, the transport full).
    fn eager_now(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        len: usize,
        op: &'static str,
        send: impl FnOnce(&mut Net, &Header) -> Result<bool, TransportError>,
    ) -> Result<bool, CommError> {
        if dest == self.st.me
            || self.st.out.get(&dest).is_some_and(|q| !q.is_empty())
            || len > self.net.eager_limit(dest)
        {
            return Ok(false);
        }
        let next = self.st.ctx_mut(ctx).send_seq.get_or_default(dest);
        let seq = *next;
        let hdr = Header {
            context: ctx,
            source: self.st.me,
            seq,
            tag,
            len: len as u64,
            kind: ProtoKind::Eager,
            flags: 0,
            coll_seq: 0,
            signature: 0,
        };
        let sent = send(&mut self.net, &hdr)
            .map_err(|e| self.send_failed(ctx, dest, op, e.to_string()))?;
        if sent {
            // The sequence number is spent only by a message that left.
            *self.st.ctx_mut(ctx).send_seq.get_or_default(dest) = seq.wrapping_add(1);
        }
        Ok(sent)
    }

    /// Posts a receive into `region`.
    pub(crate) fn irecv(
        &mut self,
        ctx: u32,
        src: Source,
        tag: TagSel,
        region: Region,
        op: &'static str,
    ) -> Result<ReqId, CommError> {
        if let TagSel::Tag(t) = tag
            && t < 0
        {
            return Err(CommError::InvalidTag { tag: t });
        }
        self.check_comm(ctx, op)?;
        let peer = match src {
            Source::Rank(r) if r >= self.st.size => {
                return Err(CommError::InvalidRank {
                    rank: r,
                    size: self.st.size,
                });
            }
            Source::Rank(r) => Some(r),
            Source::Any => None,
        };
        // A lost peer's messages that arrived before it went are still received; only a
        // receive nothing already here can satisfy fails.
        let lost = match peer {
            _ if self.st.failed.is_empty() => None,
            Some(r) => self.st.failed.get(&r).map(|why| (r, why.clone())),
            None => self
                .st
                .failed
                .iter()
                .next()
                .map(|(&r, why)| (r, why.clone())),
        };
        if let Some((r, why)) = lost {
            return match self.st.ctx_mut(ctx).m.take(src, tag) {
                Some((env, stored))
                    if !matches!(stored, Stored::Rts { .. })
                        || !self.st.failed.contains_key(&env.source) =>
                {
                    let req = self.st.new_req(op, Some(env.source), false, region);
                    self.st.start_recv(req, env, stored);
                    self.after_protocol();
                    Ok(req)
                }
                _ => Err(self.st.lost(r, op, why)),
            };
        }
        let req = self.st.new_req(op, peer, peer.is_none(), region);
        self.st.req_mut(req).ctx = ctx;
        match self.st.ctx_mut(ctx).m.post(src, tag, req as u64) {
            Posting::Matched(env, stored) => {
                self.st.start_recv(req, env, stored);
                self.after_protocol();
            }
            // A receive that only waits starts no protocol step: nothing for after_protocol.
            Posting::Posted(rid) => self.st.req_mut(req).posted = Some(rid.seq),
        }
        Ok(req)
    }

    /// Receives a message taken by `mprobe` into `region`.
    pub(crate) fn recv_stored(&mut self, env: Envelope, stored: Stored, region: Region) -> ReqId {
        let req = self.st.new_req("mrecv", Some(env.source), false, region);
        self.st.start_recv(req, env, stored);
        self.after_protocol();
        req
    }

    /// Drops a message taken by `mprobe` without receiving it: the sender is released.
    pub(crate) fn discard_stored(&mut self, env: Envelope, stored: Stored) {
        match stored {
            Stored::Rts { sender_token, .. } => {
                self.st
                    .send_ctl(env.source, ProtoKind::RndvFin, &[sender_token]);
                self.after_protocol();
            }
            Stored::SelfSync { sender, .. } => self.st.complete_self_sync(sender, env),
            Stored::Eager(_) => {}
        }
    }

    /// The earliest matching message, without receiving it.
    pub(crate) fn probe(
        &mut self,
        ctx: u32,
        src: Source,
        tag: TagSel,
    ) -> Result<Option<Status>, CommError> {
        let found = self.st.ctx_mut(ctx).m.probe(src, tag).map(|e| Status {
            source: e.source,
            tag: e.tag,
            bytes: e.len as usize,
        });
        if found.is_none() {
            self.check_probe(src)?;
        }
        Ok(found)
    }

    /// Takes the earliest matching message out of matching.
    pub(crate) fn mprobe(
        &mut self,
        ctx: u32,
        src: Source,
        tag: TagSel,
    ) -> Result<Option<(Envelope, Stored)>, CommError> {
        let found = self.st.ctx_mut(ctx).m.take(src, tag);
        if found.is_none() {
            self.check_probe(src)?;
        }
        Ok(found)
    }

    fn check_probe(&self, src: Source) -> Result<(), CommError> {
        match src {
            Source::Rank(r) => self.st.check_peer(r, "probe"),
            Source::Any => match self.st.failed.iter().next() {
                Some((&r, why)) => Err(self.st.lost(r, "probe", why.clone())),
                None => Ok(()),
            },
        }
    }

    /// The completion flags, which a request's holder may read without the engine lock.
    pub(crate) fn done_flags(&self) -> Arc<super::done::DoneFlags> {
        self.st.done.clone()
    }

    /// Whether the request has completed.
    pub(crate) fn is_done(&self, req: ReqId) -> bool {
        matches!(
            self.st.reqs[req].as_ref().map(|r| &r.state),
            Some(ReqState::Done(_))
        )
    }

    /// A receive still waiting for a message (posted, nothing matched): its operation, its
    /// source unless a wildcard, its context and buffer size — what the flight recorder and
    /// the point-to-point watchdog name. `None` for anything else.
    pub(crate) fn waiting_recv(
        &self,
        req: ReqId,
    ) -> Option<(&'static str, Option<u32>, u32, usize)> {
        let r = self.st.reqs.get(req)?.as_ref()?;
        r.posted?;
        Some((r.op, r.peer, r.ctx, r.region.len()))
    }

    /// Whether a completed request succeeded (before [`take`](Self::take)).
    pub(crate) fn succeeded(&self, req: ReqId) -> bool {
        matches!(
            self.st.reqs[req].as_ref().map(|r| &r.state),
            Some(ReqState::Done(Ok(_)))
        )
    }

    /// Takes a completed request's result and frees it.
    pub(crate) fn take(&mut self, req: ReqId) -> Result<Status, CommError> {
        let r = self.st.reqs[req].take().expect("live request");
        self.st.free.push(req);
        match r.state {
            ReqState::Done(res) => res.map_err(|e| *e),
            ReqState::Active => unreachable!("take() on an active request"),
        }
    }

    /// Cancels a receive not yet matched; true if it was (the request is then freed).
    pub(crate) fn cancel(&mut self, req: ReqId) -> bool {
        let Some((ctx, rid)) = self.st.posted(req) else {
            return false;
        };
        if self.st.ctx.get_mut(&ctx).is_some_and(|c| c.m.cancel(rid)) {
            self.st.reqs[req] = None;
            self.st.free.push(req);
            self.st.active -= 1;
            return true;
        }
        false
    }

    /// Starts cancelling send `req` (`MPI_Cancel` of a send): its message is withdrawn at the
    /// receiver if no receive matched it yet. A send to this rank itself is decided at once;
    /// otherwise the receiver is asked and [`cancel_send_answer`](Self::cancel_send_answer)
    /// gives its answer. A send that already failed, or a receive, is not cancelled.
    pub(crate) fn cancel_send(&mut self, req: ReqId) -> Result<CancelSend, CommError> {
        let Some(r) = self.st.reqs[req].as_ref() else {
            return Ok(CancelSend::Done(false));
        };
        let (Some(seq), Some(peer)) = (r.seq, r.peer) else {
            return Ok(CancelSend::Done(false));
        };
        let (ctx, failed) = (r.ctx, matches!(r.state, ReqState::Done(Err(_))));
        if peer != self.st.me {
            self.st.check_peer(peer, "cancel")?;
        }
        if failed {
            return Ok(CancelSend::Done(false));
        }
        if peer == self.st.me {
            let withdrawn = match self.st.ctx_mut(ctx).m.withdraw(peer, seq) {
                Withdraw::Taken(_, stored) => {
                    self.st.recycle(stored);
                    true
                }
                Withdraw::Matched | Withdraw::NotArrived => false,
            };
            if withdrawn {
                self.st.free_req(req);
            }
            return Ok(CancelSend::Done(withdrawn));
        }
        // A rendezvous send whose receiver answered the RTS was matched.
        if self
            .st
            .rndv_send
            .values()
            .any(|s| s.req == req && s.recv_token.is_some())
        {
            return Ok(CancelSend::Done(false));
        }
        let token = self.st.token();
        self.st.cancels.insert(
            token,
            CancelOut {
                req,
                peer,
                ctx,
                seq,
                answer: None,
            },
        );
        self.st.ask_cancel(token);
        self.flush_peer(peer);
        Ok(CancelSend::Asked(token))
    }

    /// The answer to cancel `token` once it is in: true if the send was cancelled (its request
    /// is then freed), false if its message was matched and the send completes as usual; an
    /// error if the receiver was lost before answering. `None` while waiting.
    pub(crate) fn cancel_send_answer(&mut self, token: u64) -> Option<Result<bool, CommError>> {
        let c = self.st.cancels.get(&token)?;
        let res = match c.answer {
            Some(true) => {
                let req = c.req;
                self.st.free_req(req);
                Ok(true)
            }
            Some(false) => Ok(false),
            None => {
                let why = self.st.failed.get(&c.peer)?.clone();
                Err(self.st.lost(c.peer, "cancel", why))
            }
        };
        self.st.cancels.remove(&token);
        Some(res)
    }

    /// Lets an active request go on without the caller's buffer: it continues over a private
    /// buffer of the same size (kept alive until it completes), so the caller may reuse or free
    /// its own at once. For a collective that failed: what still arrives or leaves is garbage,
    /// and harmless — a peer that reads our old buffer by single copy reads our address space,
    /// not our data, and fails or gets bytes nobody uses.
    pub(crate) fn abandon(&mut self, req: ReqId) {
        if self.is_done(req) {
            let _ = self.take(req);
            return;
        }
        // A peer writing into the buffer by PUT cannot be stopped from here: wait until its
        // FIN (or its loss) says it is done with it.
        while self.st.rndv_recv.values().any(|r| r.req == req && r.put) {
            if self.progress() == 0 {
                std::thread::yield_now();
            }
        }
        if self.is_done(req) {
            let _ = self.take(req);
            return;
        }
        let old = self.st.req_region(req);
        let mut spare = vec![0u8; old.len()].into_boxed_slice();
        let new = Region::from_mut(&mut spare);
        // Asynchronous movers let go of the old buffer first; their operations start again on
        // the new one.
        let (gets, puts) = self.take_back(|p| p.req == req, |s| s.req == req);
        self.st.pulls.extend(gets);
        self.st.put_starts.extend(puts);
        let st = &mut self.st;
        st.req_mut(req).region = new;
        for s in st.rndv_send.values_mut().filter(|s| s.req == req) {
            s.region = new;
        }
        for q in st.out.values_mut() {
            for o in q.iter_mut().filter(|o| o.req == Some(req)) {
                if let OutPayload::User(_) = o.payload {
                    o.payload = OutPayload::User(new);
                }
            }
        }
        st.req_mut(req).orphan = Some(Orphan(Box::new(spare)));
    }

    /// Lets an active request finish in the background, keeping `buf` alive until then.
    pub(crate) fn orphan(&mut self, req: ReqId, buf: Box<dyn Send>) {
        if self.is_done(req) {
            let _ = self.take(req);
        } else {
            self.st.req_mut(req).orphan = Some(Orphan(buf));
        }
    }

    /// Moves data once: transports, protocol steps, queued sends. Returns how much happened.
    pub(crate) fn progress(&mut self) -> usize {
        let n = match self.net.progress(64, &mut self.st) {
            Ok(n) => n,
            Err(e) => {
                let peer = e.peer();
                self.transport_failed(peer, e.to_string());
                1
            }
        };
        if !self.st.revokes_in.is_empty() {
            for (ctx, by) in std::mem::take(&mut self.st.revokes_in) {
                self.revoke(ctx, by);
            }
        }
        let n = n + self.after_protocol();
        if self.st.any_releases {
            for (peer, m) in self.st.releases.take() {
                self.net.release(peer, &m);
            }
        }
        n
    }
}

#[cfg(test)]
impl Engine {
    /// Hands the protocol a message as if `peer` had sent it (what a peer's header may claim).
    pub(crate) fn deliver_raw(&mut self, peer: u32, hdr: &Header, payload: &[u8]) {
        self.st.deliver(peer, hdr, payload);
    }

    /// Slots of the per-context matching table.
    pub(crate) fn ctx_slots(&self) -> usize {
        self.st.ctx.slots()
    }
}

impl State {
    /// The matching state of context `ctx` (a communicator's own: below [`MAX_CTX`]).
    fn ctx_mut(&mut self, ctx: u32) -> &mut Ctx {
        debug_assert!(ctx < MAX_CTX, "context {ctx} out of range");
        self.ctx.get_or_default(ctx)
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    fn new_req(
        &mut self,
        op: &'static str,
        peer: Option<u32>,
        wildcard: bool,
        region: Region,
    ) -> ReqId {
        let r = Req {
            op,
            peer,
            wildcard,
            region,
            state: ReqState::Active,
            ctx: u32::MAX,
            posted: None,
            seq: None,
            orphan: None,
        };
        self.active += 1;
        let id = match self.free.pop() {
            Some(i) => {
                self.reqs[i] = Some(r);
                i
            }
            None => {
                self.reqs.push(Some(r));
                self.reqs.len() - 1
            }
        };
        self.done.set(id, false);
        id
    }

    /// The active requests that `pred` selects.
    fn active_reqs(&self, pred: impl Fn(&Req) -> bool) -> Vec<ReqId> {
        (self.reqs.iter().enumerate())
            .filter_map(|(i, r)| {
                r.as_ref()
                    .filter(|r| matches!(r.state, ReqState::Active) && pred(r))
                    .map(|_| i)
            })
            .collect()
    }

    /// Frees a request nobody will wait for (a cancelled one), complete or not.
    fn free_req(&mut self, req: ReqId) {
        if let Some(r) = self.reqs[req].take() {
            if matches!(r.state, ReqState::Active) {
                self.active -= 1;
            }
            self.free.push(req);
        }
    }

    /// Returns a stored message's buffer to the pool.
    fn recycle(&mut self, stored: Stored) {
        if let Stored::Eager(data) | Stored::SelfSync { data, .. } = stored
            && self.pool.len() < POOL_MAX
            && data.capacity() <= POOL_BUF_MAX
        {
            self.pool.push(data);
        }
    }

    /// Where a posted receive waits: its communicator's context and its id in that matcher.
    fn posted(&self, req: ReqId) -> Option<(u32, RecvId)> {
        let r = self.reqs.get(req)?.as_ref()?;
        let seq = r.posted?;
        Some((
            r.ctx,
            RecvId {
                seq,
                owner: req as u64,
            },
        ))
    }

    /// Unlinks a posted receive from its matcher, if it is still there.
    fn unpost(&mut self, req: ReqId) {
        if let Some((ctx, rid)) = self.posted(req) {
            self.req_mut(req).posted = None;
            if let Some(c) = self.ctx.get_mut(&ctx) {
                c.m.cancel(rid);
            }
        }
    }

    fn req_mut(&mut self, req: ReqId) -> &mut Req {
        self.reqs[req].as_mut().expect("live request")
    }

    fn req_region(&self, req: ReqId) -> Region {
        self.reqs[req].as_ref().expect("live request").region
    }

    fn complete(&mut self, req: ReqId, res: Result<Status, CommError>) {
        let r = self.reqs[req].as_mut().expect("live request");
        if matches!(r.state, ReqState::Active) {
            self.active -= 1;
        }
        r.state = ReqState::Done(res.map_err(Box::new));
        r.posted = None;
        let orphan = r.orphan.is_some();
        self.done.set(req, true);
        if orphan {
            // Nobody waits for it: free the request and the buffer it kept alive.
            self.reqs[req] = None;
            self.free.push(req);
        }
    }
}
