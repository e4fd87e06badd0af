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

use super::matcher::{Envelope, Matcher, Posting, RecvId, Route as MRoute, Source, TagSel};
use super::region::Region;
use crate::CommError;
use crate::coll::check::{Call, Checks, Stamp, Verdict};
use rcomm_transport::caps::Ops;
use rcomm_transport::error::TransportError;
use rcomm_transport::fastmap::FastMap;
use rcomm_transport::mem::{MemKind, MemRef, RKey};
use rcomm_transport::net::Deliver;
use rcomm_transport::net::{Net, NetCounters, Route, Tx};
use rcomm_transport::shmnet::Incoming;
use rcomm_transport::wire::{Header, ProtoKind};
use std::collections::VecDeque;
use std::sync::Arc;

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
    Rts {
        sender_token: u64,
        /// The sender's buffer, when its lane offers GET.
        key: Option<RKey>,
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
    posted: Option<(u32, RecvId)>,
    /// A buffer the user dropped before completion; freed when the request completes.
    orphan: Option<Box<dyn std::any::Any + Send>>,
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

#[derive(Debug)]
struct RndvSend {
    req: ReqId,
    peer: u32,
    region: Region,
    recv_token: Option<u64>,
    offset: usize,
    /// A PUT into the receiver's buffer is under way (the transport holds `region`), to the
    /// key of the receiver's CTS.
    putting: Option<RKey>,
}

#[derive(Debug)]
struct RndvRecv {
    req: ReqId,
    peer: u32,
    env: Envelope,
    received: u64,
    /// The sender writes into the buffer (PUT) rather than streaming chunks.
    put: bool,
}

/// A GET to start (or under way, in `gets`).
#[derive(Debug, Clone, Copy)]
struct Pull {
    req: ReqId,
    peer: u32,
    env: Envelope,
    sender_token: u64,
    key: RKey,
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
    send_seq: FastMap<u32, u32>,
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
    ctx: FastMap<u32, Ctx>,
    reqs: Vec<Option<Req>>,
    free: Vec<ReqId>,
    posted: FastMap<(u32, RecvId), ReqId>,
    out: FastMap<u32, VecDeque<Out>>,
    /// Entries in all of `out`, so an idle progress pass skips the queues in O(1).
    out_len: usize,
    rndv_send: FastMap<u64, RndvSend>,
    rndv_recv: FastMap<u64, RndvRecv>,
    streaming: Vec<u64>,
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
    hosts: Vec<String>,
    error: Option<(u32, String)>,
    /// Buffers of consumed unexpected messages, reused so a steady stream of unexpected small
    /// messages does not allocate.
    pool: Vec<Vec<u8>>,
    /// Revocations that arrived (context, from), taken by the engine after delivery.
    revokes_in: Vec<(u32, u32)>,
    /// Checked collectives (`RCOMM_CHECK=1`), see [`crate::coll::check`].
    check: Option<Box<Checks>>,
}

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
    notices: Option<Arc<rcomm_transport::bootstrap::kvs::NoticeBoard>>,
    /// Revoked communicators (user context) and the rank that revoked each.
    revoked: FastMap<u32, u32>,
}

/// First word of a `Control` message that revokes a communicator; the second holds its
/// context (high half) and the rank that revoked it (low half).
const CTL_REVOKE: u64 = 1;

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

/// A rendezvous record: `vals`, then the key's bytes.
fn keyed(vals: &[u64], key: Option<&RKey>) -> OutPayload {
    let Some(k) = key else {
        return small(vals);
    };
    let mut b = Vec::with_capacity(vals.len() * 8 + k.as_bytes().len());
    for v in vals {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(k.as_bytes());
    OutPayload::Keyed(b.into_boxed_slice())
}

/// The key after `words` leading words of a record, if any bytes follow them.
fn key_after(b: &[u8], words: usize) -> Option<Option<RKey>> {
    match b.get(words * 8..) {
        None => None,
        Some([]) => Some(None),
        Some(k) => RKey::new(k).map(Some),
    }
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
                ctx: FastMap::default(),
                reqs: Vec::new(),
                free: Vec::new(),
                posted: FastMap::default(),
                out: FastMap::default(),
                out_len: 0,
                rndv_send: FastMap::default(),
                rndv_recv: FastMap::default(),
                streaming: Vec::new(),
                pulls: Vec::new(),
                gets: FastMap::default(),
                put_starts: Vec::new(),
                put_cts: Vec::new(),
                released: Vec::new(),
                next_token: 1,
                failed: FastMap::default(),
                hung: Vec::new(),
                bulk: (0..size).map(|p| net.bulk_ops(p, MemKind::Host)).collect(),
                hosts,
                error: None,
                pool: Vec::new(),
                revokes_in: Vec::new(),
                check: None,
            },
            net,
            reported: Vec::new(),
            // The world (context 0) holds every rank.
            comms: std::iter::once((0, None)).collect(),
            notices: None,
            revoked: FastMap::default(),
        }
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
        self.send_stamped(ctx, dest, tag, region, op, blocking, Stamp::default())
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
        self.send_stamped(ctx, dest, tag, region, op, false, stamp)
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
        stamp: Stamp,
    ) -> Result<Option<ReqId>, CommError> {
        if tag < 0 {
            return Err(CommError::InvalidTag { tag });
        }
        // The communicator's loss first: it is why nothing on it can go on.
        self.check_comm(ctx, op)?;
        self.st.check_peer(dest, op)?;
        let c = self.st.ctx.entry(ctx).or_default();
        let seq_ref = c.send_seq.entry(dest).or_insert(0);
        let seq = *seq_ref;
        *seq_ref = seq.wrapping_add(1);
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
        let eager_limit = self.net.eager_limit(dest);
        if blocking
            && dest != me
            && region.len() <= eager_limit
            && self.st.out.get(&dest).is_none_or(|q| q.is_empty())
        {
            // Fast path of a blocking eager send: straight into the transport, no request.
            match self
                .net
                .try_send(dest, &hdr(ProtoKind::Eager), region.bytes())
            {
                Ok(true) => return Ok(None),
                Ok(false) => {}
                Err(e) => {
                    self.transport_failed(Some(dest), e.to_string());
                    return Err(self.st.lost(dest, op, e.to_string()));
                }
            }
        }
        let req = self.st.new_req(op, Some(dest), false, region);
        self.st.req_mut(req).ctx = ctx;
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
        if region.len() <= eager_limit {
            self.st.out_len += 1;
            self.st.out.entry(dest).or_default().push_back(Out {
                hdr: hdr(ProtoKind::Eager),
                payload: OutPayload::User(region),
                req: Some(req),
            });
        } else {
            let token = self.st.token();
            // The key lets the receiver pull; without GET it asks for PUT or STREAM instead.
            let key = if self.st.bulk[dest as usize].contains(Ops::GET) {
                match self
                    .net
                    .register(dest, &MemRef::host(region.addr(), region.len()))
                {
                    Ok(k) => Some(k),
                    Err(e) => {
                        rcomm_transport::rlog!(Info, "P2P", "no GET key for rank {dest}: {e}");
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
                    region,
                    recv_token: None,
                    offset: 0,
                    putting: None,
                },
            );
            self.st.out_len += 1;
            self.st.out.entry(dest).or_default().push_back(Out {
                hdr: hdr(ProtoKind::RndvRts),
                payload: keyed(&[token], key.as_ref()),
                req: None,
            });
        }
        self.flush_peer(dest);
        Ok(Some(req))
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
            Some(r) => self.st.failed.get(&r).map(|why| (r, why.clone())),
            None => self
                .st
                .failed
                .iter()
                .next()
                .map(|(&r, why)| (r, why.clone())),
        };
        if let Some((r, why)) = lost {
            return match self.st.ctx.entry(ctx).or_default().m.take(src, tag) {
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
        match self.st.ctx.entry(ctx).or_default().m.post(src, tag) {
            Posting::Matched(env, stored) => self.st.start_recv(req, env, stored),
            Posting::Posted(rid) => {
                self.st.posted.insert((ctx, rid), req);
                self.st.req_mut(req).posted = Some((ctx, rid));
            }
        }
        self.after_protocol();
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
        if let Stored::Rts { sender_token, .. } = stored {
            self.st
                .send_ctl(env.source, ProtoKind::RndvFin, &[sender_token]);
            self.after_protocol();
        }
    }

    /// The earliest matching message, without receiving it.
    pub(crate) fn probe(
        &mut self,
        ctx: u32,
        src: Source,
        tag: TagSel,
    ) -> Result<Option<Status>, CommError> {
        let found = self
            .st
            .ctx
            .entry(ctx)
            .or_default()
            .m
            .probe(src, tag)
            .map(|e| Status {
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
        let found = self.st.ctx.entry(ctx).or_default().m.take(src, tag);
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
        let (ctx, _) = r.posted?;
        Some((r.op, r.peer, ctx, r.region.len()))
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
        let Some((ctx, rid)) = self.st.reqs[req].as_ref().and_then(|r| r.posted) else {
            return false;
        };
        if self.st.ctx.get_mut(&ctx).is_some_and(|c| c.m.cancel(rid)) {
            self.st.posted.remove(&(ctx, rid));
            self.st.reqs[req] = None;
            self.st.free.push(req);
            return true;
        }
        false
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
        let gets: Vec<u64> = (self.st.gets.iter())
            .filter(|(_, p)| p.req == req)
            .map(|(&t, _)| t)
            .collect();
        for t in gets {
            let p = self.st.gets.remove(&t).expect("listed");
            self.net.quiesce(p.peer, t);
            self.st.pulls.push(p);
        }
        let puts: Vec<(u64, u32, RKey)> = (self.st.rndv_send.iter())
            .filter(|(_, s)| s.req == req)
            .filter_map(|(&t, s)| Some((t, s.peer, s.putting?)))
            .collect();
        for (t, peer, key) in puts {
            self.net.quiesce(peer, t);
            self.st.rndv_send.get_mut(&t).expect("listed").putting = None;
            self.st.put_starts.push(PutStart { send_token: t, key });
        }
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
        st.req_mut(req).orphan = Some(Box::new(spare));
    }

    /// Lets an active request finish in the background, keeping `buf` alive until then.
    pub(crate) fn orphan(&mut self, req: ReqId, buf: Box<dyn std::any::Any + Send>) {
        if self.is_done(req) {
            let _ = self.take(req);
        } else {
            self.st.req_mut(req).orphan = Some(buf);
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
        n + self.after_protocol()
    }

    /// Revokes the communicator of context `ctx` (MPI's `MPI_Comm_revoke`), as rank `by` asked:
    /// every pending and future operation on it fails with `Revoked`. The first time, this
    /// rank passes it on to every other member, so all learn it even if `by` dies meanwhile.
    pub(crate) fn revoke(&mut self, ctx: u32, by: u32) {
        let key = ctx & !1;
        if self.revoked.contains_key(&key) {
            return;
        }
        rcomm_transport::rlog!(Info, "P2P", "communicator {key} revoked by rank {by}");
        self.revoked.insert(key, by);
        let doomed: Vec<ReqId> = self
            .st
            .reqs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.as_ref()
                    .filter(|r| matches!(r.state, ReqState::Active) && r.ctx & !1 == key)
                    .map(|_| i)
            })
            .collect();
        for req in doomed {
            self.drop_req_state(req);
            let op = self.st.req_mut(req).op;
            self.st.complete(req, Err(CommError::Revoked { op, by }));
        }
        let members: Vec<u32> = match self.comms.get(&key) {
            Some(Some(m)) => m.to_vec(),
            _ => (0..self.st.size).collect(),
        };
        for m in members {
            if m != self.st.me && m != by && !self.st.failed.contains_key(&m) {
                self.st.send_ctl(
                    m,
                    ProtoKind::Control,
                    &[CTL_REVOKE, u64::from(key) << 32 | u64::from(by)],
                );
            }
        }
        self.after_protocol();
    }

    /// Whether the communicator of context `ctx` was revoked.
    pub(crate) fn is_revoked(&self, ctx: u32) -> bool {
        self.revoked.contains_key(&(ctx & !1))
    }

    /// The `Revoked` error for an operation on context `ctx`, if it was revoked.
    pub(crate) fn revoked_error(&self, ctx: u32, op: &'static str) -> Option<CommError> {
        self.revoked
            .get(&(ctx & !1))
            .map(|&by| CommError::Revoked { op, by })
    }

    /// Unlinks a request from matching and from the rendezvous tables, before it fails.
    fn drop_req_state(&mut self, req: ReqId) {
        if let Some((ctx, rid)) = self.st.req_mut(req).posted.take() {
            if let Some(c) = self.st.ctx.get_mut(&ctx) {
                c.m.cancel(rid);
            }
            self.st.posted.remove(&(ctx, rid));
        }
        self.quiesce_where(|p, s| p.map_or(s.is_some_and(|s| s.req == req), |p| p.req == req));
        self.st.rndv_send.retain(|_, s| s.req != req);
        self.st.rndv_recv.retain(|_, s| s.req != req);
        self.st
            .streaming
            .retain(|t| self.st.rndv_send.contains_key(t));
        self.st.pulls.retain(|p| p.req != req);
        self.st.put_cts.retain(|p| p.0 != req);
    }

    /// Takes back from the transports the asynchronous operations (GETs under way, PUTs under
    /// way) that `which` selects — before their requests fail and hand the buffers back.
    fn quiesce_where(&mut self, which: impl Fn(Option<&Pull>, Option<&RndvSend>) -> bool) {
        let gets: Vec<(u64, u32)> = (self.st.gets.iter())
            .filter(|(_, p)| which(Some(p), None))
            .map(|(&t, p)| (t, p.peer))
            .collect();
        for (t, peer) in gets {
            self.net.quiesce(peer, t);
            self.st.gets.remove(&t);
        }
        let puts: Vec<(u64, u32)> = (self.st.rndv_send.iter())
            .filter(|(_, s)| s.putting.is_some() && which(None, Some(s)))
            .map(|(&t, s)| (t, s.peer))
            .collect();
        for (t, peer) in puts {
            self.net.quiesce(peer, t);
            self.st.rndv_send.get_mut(&t).expect("listed").putting = None;
        }
    }

    /// Protocol steps that need the transports: single-copy pulls, queued messages, streaming.
    fn after_protocol(&mut self) -> usize {
        let mut work = 0;
        while let Some(p) = self.st.pulls.pop() {
            work += 1;
            let region = self.st.req_region(p.req);
            let tok = self.st.token();
            let dst = MemRef::host(region.addr(), p.env.len as usize);
            match self.net.get(p.peer, dst, &p.key, tok) {
                Ok(Tx::Done) => self.st.got(p),
                Ok(Tx::Pending) => {
                    self.st.gets.insert(tok, p);
                }
                Err(TransportError::Unsupported { why, .. }) => {
                    rcomm_transport::rlog!(
                        Info,
                        "P2P",
                        "GET from rank {} refused ({why}); using the next protocol",
                        p.peer
                    );
                    let b = &mut self.st.bulk[p.peer as usize];
                    *b = b.without(Ops::GET);
                    self.st.start_cts(p.req, p.peer, p.env, p.sender_token);
                }
                Err(e) => {
                    let peer = e.peer();
                    self.transport_failed(peer, e.to_string());
                }
            }
        }
        // Receives answering with a PUT: their buffer's key goes in the CTS.
        while let Some((req, peer, env, sender_token)) = self.st.put_cts.pop() {
            work += 1;
            let region = self.st.req_region(req);
            match self
                .net
                .register(peer, &MemRef::host(region.addr(), env.len as usize))
            {
                Ok(key) => self.st.start_put_cts(req, peer, env, sender_token, key),
                Err(e) => {
                    rcomm_transport::rlog!(Info, "P2P", "no PUT key for rank {peer}: {e}");
                    let b = &mut self.st.bulk[peer as usize];
                    *b = b.without(Ops::PUT);
                    self.st.start_cts(req, peer, env, sender_token);
                }
            }
        }
        while let Some(ps) = self.st.put_starts.pop() {
            work += 1;
            let Some(s) = self.st.rndv_send.get(&ps.send_token) else {
                continue;
            };
            let (peer, region) = (s.peer, s.region);
            let src = MemRef::host(region.addr(), region.len());
            let started = self
                .net
                .register(peer, &src)
                .and_then(|_| self.net.put(peer, src, &ps.key, ps.send_token));
            match started {
                Ok(Tx::Done) => self.st.put_done(ps.send_token),
                Ok(Tx::Pending) => {
                    if let Some(s) = self.st.rndv_send.get_mut(&ps.send_token) {
                        s.putting = Some(ps.key);
                    }
                }
                Err(e) => self.transport_failed(Some(peer), e.to_string()),
            }
        }
        if self.st.out_len > 0 {
            let peers: Vec<u32> = self
                .st
                .out
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(&p, _)| p)
                .collect();
            for p in peers {
                work += self.flush_peer(p);
            }
        }
        let mut i = 0;
        while i < self.st.streaming.len() {
            let token = self.st.streaming[i];
            let Some(s) = self.st.rndv_send.get_mut(&token) else {
                self.st.streaming.swap_remove(i);
                continue;
            };
            let recv_token = s.recv_token.expect("streaming after CTS");
            let mut failed = None;
            while s.offset < s.region.len() {
                match self.net.send_chunk(
                    s.peer,
                    recv_token,
                    s.offset as u64,
                    &s.region.bytes()[s.offset..],
                ) {
                    Ok(0) => break,
                    Ok(n) => {
                        s.offset += n;
                        work += 1;
                    }
                    Err(e) => {
                        failed = Some((s.peer, e.to_string()));
                        break;
                    }
                }
            }
            if let Some((peer, why)) = failed {
                self.transport_failed(Some(peer), why);
                continue;
            }
            if s.offset == s.region.len() {
                let (req, peer, len) = (s.req, s.peer, s.region.len());
                self.st.rndv_send.remove(&token);
                self.st.streaming.swap_remove(i);
                let _ = peer;
                self.st.complete(
                    req,
                    Ok(Status {
                        source: self.st.me,
                        tag: 0,
                        bytes: len,
                    }),
                );
            } else {
                i += 1;
            }
        }
        work
    }

    fn flush_peer(&mut self, peer: u32) -> usize {
        let mut sent = 0;
        loop {
            let Some(q) = self.st.out.get_mut(&peer) else {
                return sent;
            };
            let Some(o) = q.front() else { return sent };
            let bytes = match &o.payload {
                OutPayload::Small(b, n) => &b[..*n as usize],
                OutPayload::User(r) => r.bytes(),
                OutPayload::Keyed(b) => b,
            };
            match self.net.try_send(peer, &o.hdr, bytes) {
                Ok(true) => {
                    let o = q.pop_front().expect("front exists");
                    self.st.out_len -= 1;
                    sent += 1;
                    if let Some(req) = o.req {
                        self.st.complete(
                            req,
                            Ok(Status {
                                source: self.st.me,
                                tag: o.hdr.tag,
                                bytes: o.hdr.len as usize,
                            }),
                        );
                    }
                }
                Ok(false) => return sent,
                Err(e) => {
                    self.transport_failed(Some(peer), e.to_string());
                    return sent;
                }
            }
        }
    }

    /// Whether anything is queued that needs progress even with nothing arriving.
    pub(crate) fn busy(&self) -> bool {
        !self.st.streaming.is_empty()
            || self.st.out_len > 0
            || !self.st.pulls.is_empty()
            || !self.st.put_starts.is_empty()
            || !self.st.put_cts.is_empty()
            || self.net.has_queued_output()
    }

    /// Largest message this rank receives by single copy (0: never).
    pub(crate) fn single_copy_max(&self) -> usize {
        self.st.cfg.get_max
    }

    /// Sets [`single_copy_max`](Self::single_copy_max): the receiver chooses the protocol of
    /// each large message when it matches it, so this takes effect for every message matched
    /// from now on (init's probe turns single copy off where pipelined copy is faster).
    pub(crate) fn set_single_copy_max(&mut self, max: usize) {
        self.st.cfg.get_max = max;
    }

    /// Whether this rank can read `peer`'s memory by single copy (a GET on shared memory).
    pub(crate) fn single_copy_with(&self, peer: u32) -> bool {
        self.net.route(peer) == Route::Shm
            && self
                .st
                .bulk
                .get(peer as usize)
                .is_some_and(|b| b.contains(Ops::GET))
            && self.st.cfg.get_max > 0
    }

    /// Whether queued work needs this thread to keep spinning: output that waits on a peer no
    /// descriptor reports (shared memory). Output that waits only for room in TCP sockets does
    /// not — a sleeping rank polls those sockets for room ([`Net::wait_fds`]).
    pub(crate) fn needs_cpu(&self) -> bool {
        let net = &self.net;
        self.st
            .streaming
            .iter()
            .filter_map(|t| self.st.rndv_send.get(t))
            .any(|s| !net.output_pollable(s.peer))
            || self
                .st
                .out
                .iter()
                .any(|(&p, q)| !q.is_empty() && !net.output_pollable(p))
    }

    fn transport_failed(&mut self, peer: Option<u32>, why: String) {
        match peer {
            Some(p) => self.transport_lost(p, why),
            None => {
                rcomm_transport::rlog!(Warn, "P2P", "transport error: {why}");
                self.st.error = Some((self.st.me, why));
            }
        }
    }

    /// Marks `peer` as lost: every operation waiting on it (and every wildcard receive) fails.
    pub(crate) fn peer_failed(&mut self, peer: u32, why: String) {
        if peer >= self.st.size || self.st.failed.contains_key(&peer) {
            return;
        }
        rcomm_transport::rlog!(Info, "P2P", "rank {peer} lost: {why}");
        self.st.failed.insert(peer, why.clone());
        if let Some(q) = self.st.out.remove(&peer) {
            self.st.out_len -= q.len();
        }
        let lost: Vec<ReqId> = self
            .st
            .reqs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.as_ref()
                    .filter(|r| {
                        matches!(r.state, ReqState::Active) && (r.peer == Some(peer) || r.wildcard)
                    })
                    .map(|_| i)
            })
            .collect();
        for req in lost {
            if let Some((ctx, rid)) = self.st.req_mut(req).posted.take() {
                if let Some(c) = self.st.ctx.get_mut(&ctx) {
                    c.m.cancel(rid);
                }
                self.st.posted.remove(&(ctx, rid));
            }
            let op = self.st.req_mut(req).op;
            let e = self.st.lost(peer, op, why.clone());
            self.st.complete(req, Err(e));
        }
        self.quiesce_where(|p, s| p.map_or(s.is_some_and(|s| s.peer == peer), |p| p.peer == peer));
        self.st.rndv_send.retain(|_, s| s.peer != peer);
        self.st.rndv_recv.retain(|_, s| s.peer != peer);
        self.st.pulls.retain(|p| p.peer != peer);
        self.st.put_cts.retain(|p| p.1 != peer);
        self.st
            .put_starts
            .retain(|p| self.st.rndv_send.contains_key(&p.send_token));
        // Messages that arrived complete before the peer went stay receivable.
    }

    /// The first peer seen dead by a transport, without waiting.
    pub(crate) fn poll_dead(&mut self) {
        if let Some(p) = self.net.dead_peer() {
            self.transport_lost(
                p,
                "its connection closed (the process exited or died)".into(),
            );
        }
    }

    /// A transport saw `peer`'s connection close. When the launcher killed it (a rank declared
    /// hung), or saw it die, its notice says why and is on its way — it is sent before the
    /// kill — so when something waits on that peer, give it a moment to arrive: the error then
    /// names the cause, not the closed socket. A peer that finished normally sends no notice.
    fn transport_lost(&mut self, peer: u32, why: String) {
        if peer >= self.st.size || self.st.failed.contains_key(&peer) {
            return;
        }
        // Notices not yet taken in may already explain it (the peer gave up on a lost rank
        // and left), and fail what waits on it with the real cause.
        self.take_notices();
        if self.st.failed.contains_key(&peer) {
            return;
        }
        let waited_on =
            self.st.reqs.iter().flatten().any(|r| {
                matches!(r.state, ReqState::Active) && (r.peer == Some(peer) || r.wildcard)
            });
        if waited_on && let Some(nb) = self.notices.clone() {
            // The peer itself, or another rank whose failure made the peer give up and leave:
            // either notice explains what waits on the peer better than a closed socket.
            let known = self.reported.clone();
            nb.wait_for(NOTICE_GRACE, |n| {
                n.failed
                    .iter()
                    .any(|(r, _)| *r == peer || !known.contains(r))
            });
            self.take_notices();
            if self.st.failed.contains_key(&peer) {
                return;
            }
        }
        self.peer_failed(peer, why);
    }

    /// Takes in every failure the launcher has reported so far.
    pub(crate) fn take_notices(&mut self) {
        let Some(nb) = self.notices.clone() else {
            return;
        };
        let n = nb.snapshot();
        for &rank in &n.hung {
            self.mark_hung(rank);
        }
        for (rank, how) in n.failed {
            self.launcher_reports_failed(rank, format!("the launcher reports it {how}"));
        }
    }

    /// The launcher's notices, so a transport's loss can wait for the launcher's reason.
    pub(crate) fn set_notices(
        &mut self,
        n: Option<Arc<rcomm_transport::bootstrap::kvs::NoticeBoard>>,
    ) {
        self.notices = n;
    }

    pub(crate) fn failed(&self) -> &FastMap<u32, String> {
        &self.st.failed
    }

    /// A rank the launcher reports failed (died, or exited without finalizing) — unlike a
    /// closed connection, which a rank that finalized and left also gives. Every operation on
    /// a communicator it belongs to fails too, also one between two live ranks: either may
    /// wait for something the lost rank would have caused, and nobody would end that wait.
    pub(crate) fn launcher_reports_failed(&mut self, peer: u32, why: String) {
        if peer >= self.st.size || self.reported.contains(&peer) {
            return;
        }
        self.reported.push(peer);
        self.peer_failed(peer, why.clone());
        // The launcher knows why (a closed connection seen first only says that it closed).
        self.st.failed.insert(peer, why.clone());
        let broken: Vec<ReqId> = self
            .st
            .reqs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.as_ref()
                    .filter(|r| matches!(r.state, ReqState::Active) && self.comm_has(r.ctx, peer))
                    .map(|_| i)
            })
            .collect();
        for req in broken {
            self.drop_req_state(req);
            let op = self.st.req_mut(req).op;
            let e = self.st.lost(peer, op, why.clone());
            self.st.complete(req, Err(e));
        }
    }

    /// Records the members (world ranks; `None`: every rank) of the communicator whose user
    /// context is `ctx` (its internal one is `ctx + 1`), for failure propagation. A freed
    /// context keeps its entry until it is reused: no operation runs on it meanwhile.
    pub(crate) fn register_comm(&mut self, ctx: u32, members: Option<Arc<[u32]>>) {
        self.comms.insert(ctx & !1, members);
        // A new communicator on a reused context id is not the revoked one that had it.
        self.revoked.remove(&(ctx & !1));
    }

    /// Whether world rank `rank` belongs to the communicator of context `ctx` (unknown
    /// contexts: no).
    fn comm_has(&self, ctx: u32, rank: u32) -> bool {
        match self.comms.get(&(ctx & !1)) {
            Some(None) => true,
            Some(Some(m)) => m.contains(&rank),
            None => false,
        }
    }

    /// Fails a new operation on a communicator that lost a member: the others may never do
    /// their part (MPI's revoked communicator; `shrink` makes a working one).
    fn check_comm(&self, ctx: u32, op: &'static str) -> Result<(), CommError> {
        // Both empty in a job without failures: no lookup on the hot path.
        if !self.revoked.is_empty()
            && let Some(&by) = self.revoked.get(&(ctx & !1))
        {
            return Err(CommError::Revoked { op, by });
        }
        if self.reported.is_empty() {
            return Ok(());
        }
        match self.reported.iter().find(|&&r| self.comm_has(ctx, r)) {
            Some(&r) => Err(self.st.lost(
                r,
                op,
                format!(
                    "{}; the communicator lost it (shrink it to go on without)",
                    self.st.failed.get(&r).map_or("failed", String::as_str)
                ),
            )),
            None => Ok(()),
        }
    }

    /// Marks `peer` as declared hung by the launcher: errors about it are `PeerHung`.
    pub(crate) fn mark_hung(&mut self, peer: u32) {
        if !self.st.hung.contains(&peer) {
            self.st.hung.push(peer);
        }
    }

    /// Ranks the launcher reported failed, in the order it did.
    pub(crate) fn reported_failed(&self) -> &[u32] {
        &self.reported
    }

    /// Host of world rank `rank` (empty if unknown).
    pub(crate) fn host_of(&self, rank: u32) -> &str {
        self.st.hosts.get(rank as usize).map_or("", String::as_str)
    }

    /// The `PeerLost` error for world rank `rank` if it is known to have failed.
    pub(crate) fn lost_error(&self, rank: u32, op: &'static str) -> Option<CommError> {
        self.st
            .failed
            .get(&rank)
            .map(|why| self.st.lost(rank, op, why.clone()))
    }
}

/// Checked collectives: the engine keeps what each communicator's ranks called (see
/// [`crate::coll::check`]); these are the collectives' entry points.
impl Engine {
    /// Turns checked mode on (at init, before any collective).
    pub(crate) fn check_enable(&mut self) {
        self.st.check = Some(Box::new(Checks::new(self.st.me)));
    }

    /// Records that this rank starts `call` as call `tag` on internal context `ctx` and sends
    /// its token to `token_to`; true if the communicator already failed a check (see
    /// [`Checks::register`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check_register(
        &mut self,
        ctx: u32,
        epoch: u32,
        tag: i32,
        call: Call,
        me: u32,
        members: &dyn Fn() -> Vec<u32>,
        token_to: Option<u32>,
    ) -> bool {
        let Some(c) = self.st.check.as_deref_mut() else {
            return false;
        };
        let failed = c.register(ctx, epoch, tag, call, me, members, token_to);
        self.st.flush_checks();
        if let Some(p) = token_to {
            self.flush_peer(p);
        }
        failed
    }

    /// Whether call `tag` on `ctx` fails a check.
    pub(crate) fn check_failed(&self, ctx: u32, epoch: u32, tag: i32) -> bool {
        self.st
            .check
            .as_deref()
            .is_some_and(|c| c.failed(ctx, epoch, tag))
    }

    /// The verdict on a failed call once it is decided, with the world ranks of the
    /// communicator it names ranks of.
    pub(crate) fn check_verdict(
        &mut self,
        ctx: u32,
        epoch: u32,
        tag: i32,
    ) -> Option<(Verdict, Vec<u32>)> {
        let c = self.st.check.as_deref_mut()?;
        let v = c.verdict(ctx, epoch, tag)?;
        Some((v, c.members(ctx, epoch, tag)))
    }

    /// The call at which the communicator on `ctx` failed a check, if it did.
    pub(crate) fn check_poisoned(&self, ctx: u32, epoch: u32) -> Option<i32> {
        self.st.check.as_deref()?.poisoned(ctx, epoch)
    }

    /// Collectives on `child` run a call of `parent`'s (hierarchical algorithms); both are
    /// (internal context, generation).
    pub(crate) fn check_link(&mut self, child: (u32, u32), parent: (u32, u32)) {
        if let Some(c) = self.st.check.as_deref_mut() {
            c.link(child.0, child.1, parent.0, parent.1);
        }
    }
}

impl State {
    /// Queues the checks' control messages (progress sends them).
    fn flush_checks(&mut self) {
        let State {
            check,
            out,
            out_len,
            failed,
            me,
            ..
        } = self;
        let Some(c) = check.as_deref_mut() else {
            return;
        };
        for m in c.outbox.drain(..) {
            // Tokens go to the next rank and votes to the others: never to this one.
            if failed.contains_key(&m.peer) || m.peer == *me {
                continue;
            }
            let mut b = [0u8; 32];
            b[..24].copy_from_slice(&m.payload);
            *out_len += 1;
            out.entry(m.peer).or_default().push_back(Out {
                hdr: m.hdr,
                payload: OutPayload::Small(b, m.len),
                req: None,
            });
        }
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    fn check_peer(&self, r: u32, op: &'static str) -> Result<(), CommError> {
        if r >= self.size {
            return Err(CommError::InvalidRank {
                rank: r,
                size: self.size,
            });
        }
        match self.failed.get(&r) {
            Some(why) => Err(self.lost(r, op, why.clone())),
            None => Ok(()),
        }
    }

    fn lost(&self, rank: u32, op: &'static str, why: String) -> CommError {
        let host = self.hosts.get(rank as usize).cloned().unwrap_or_default();
        if self.hung.contains(&rank) {
            return CommError::PeerHung {
                rank,
                host,
                op,
                why,
            };
        }
        CommError::PeerLost {
            rank,
            host,
            op,
            why,
        }
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
            orphan: None,
        };
        match self.free.pop() {
            Some(i) => {
                self.reqs[i] = Some(r);
                i
            }
            None => {
                self.reqs.push(Some(r));
                self.reqs.len() - 1
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
        let r = self.req_mut(req);
        r.state = ReqState::Done(res.map_err(Box::new));
        r.posted = None;
        if r.orphan.is_some() {
            // Nobody waits for it: free the request and the buffer it kept alive.
            self.reqs[req] = None;
            self.free.push(req);
        }
    }

    fn send_ctl(&mut self, peer: u32, kind: ProtoKind, vals: &[u64]) {
        self.send_ctl_flagged(peer, kind, 0, vals);
    }

    fn send_ctl_flagged(&mut self, peer: u32, kind: ProtoKind, flags: u8, vals: &[u64]) {
        let hdr = ctl_header(self.me, kind, flags);
        self.out_len += 1;
        self.out.entry(peer).or_default().push_back(Out {
            hdr,
            payload: small(vals),
            req: None,
        });
    }

    /// A message arrived from `peer`.
    fn deliver(&mut self, peer: u32, hdr: &Header, payload: &[u8]) {
        match hdr.kind {
            ProtoKind::Eager | ProtoKind::RndvRts => {
                if hdr.source != peer {
                    rcomm_transport::rlog!(
                        Warn,
                        "P2P",
                        "rank {peer} sent a header claiming source {}; dropped",
                        hdr.source
                    );
                    return;
                }
                if hdr.signature != 0
                    && let Some(c) = self.check.as_deref_mut()
                {
                    c.on_data(peer, hdr);
                    self.flush_checks();
                }
                let pool = &mut self.pool;
                let mut stored = || match hdr.kind {
                    ProtoKind::Eager => {
                        let mut v = pool.pop().unwrap_or_default();
                        v.clear();
                        v.extend_from_slice(payload);
                        Some(Stored::Eager(v))
                    }
                    _ => Some(Stored::Rts {
                        sender_token: u64_at(payload, 0)?,
                        key: key_after(payload, 1)?,
                    }),
                };
                let env = Envelope {
                    source: peer,
                    tag: hdr.tag,
                    len: hdr.len,
                };
                let c = self.ctx.entry(hdr.context).or_default();
                match c.m.arrive(&env, hdr.seq) {
                    MRoute::Deliver(rid) => {
                        let req = self
                            .posted
                            .remove(&(hdr.context, rid))
                            .expect("posted receive has a request");
                        match hdr.kind {
                            ProtoKind::Eager => self.finish_eager(req, env, payload),
                            _ => match stored() {
                                Some(s) => self.start_recv(req, env, s),
                                None => self.complete(
                                    req,
                                    Err(CommError::Protocol {
                                        rank: peer,
                                        why: "malformed RTS".into(),
                                    }),
                                ),
                            },
                        }
                    }
                    MRoute::Keep => match stored() {
                        Some(s) => c.m.keep(env, hdr.seq, s),
                        None => rcomm_transport::rlog!(
                            Warn,
                            "P2P",
                            "malformed RTS from rank {peer}; dropped"
                        ),
                    },
                }
                let mut released = std::mem::take(&mut self.released);
                if let Some(c) = self.ctx.get_mut(&hdr.context) {
                    c.m.release(peer, &mut |rid, env, s| released.push((rid, env, s)));
                }
                for (rid, env, s) in released.drain(..) {
                    let req = self
                        .posted
                        .remove(&(hdr.context, rid))
                        .expect("posted receive has a request");
                    self.start_recv(req, env, s);
                }
                self.released = released;
            }
            ProtoKind::RndvCts => {
                if let (Some(st), Some(rt)) = (u64_at(payload, 0), u64_at(payload, 1))
                    && let Some(s) = self.rndv_send.get_mut(&st)
                    && s.peer == peer
                    && s.recv_token.is_none()
                {
                    s.recv_token = Some(rt);
                    match (u64_at(payload, 2), key_after(payload, 3)) {
                        (None, _) => self.streaming.push(st),
                        (Some(CTS_PUT), Some(Some(key))) => self.put_starts.push(PutStart {
                            send_token: st,
                            key,
                        }),
                        _ => rcomm_transport::rlog!(
                            Warn,
                            "P2P",
                            "malformed CTS from rank {peer}; dropped"
                        ),
                    }
                }
            }
            ProtoKind::RndvFin if hdr.flags == FIN_PUT || hdr.flags == FIN_PUT_FAILED => {
                if let Some(rt) = u64_at(payload, 0)
                    && self
                        .rndv_recv
                        .get(&rt)
                        .is_some_and(|r| r.put && r.peer == peer)
                {
                    let r = self.rndv_recv.remove(&rt).expect("present");
                    let res = if hdr.flags == FIN_PUT {
                        Ok(Status {
                            source: r.env.source,
                            tag: r.env.tag,
                            bytes: r.env.len as usize,
                        })
                    } else {
                        Err(CommError::Protocol {
                            rank: peer,
                            why: "its write into our buffer failed".into(),
                        })
                    };
                    self.complete(r.req, res);
                }
            }
            ProtoKind::RndvFin => {
                if let Some(s) = u64_at(payload, 0).and_then(|t| self.rndv_send.remove(&t)) {
                    let len = s.region.len();
                    self.complete(
                        s.req,
                        Ok(Status {
                            source: self.me,
                            tag: 0,
                            bytes: len,
                        }),
                    );
                }
            }
            // Checked mode's control messages have flags of their own (revocations have none):
            // tested first.
            ProtoKind::Control
                if self
                    .check
                    .as_deref_mut()
                    .is_some_and(|c| c.on_control(peer, hdr, payload)) =>
            {
                self.flush_checks();
            }
            ProtoKind::Control
                if u64_at(payload, 0) == Some(CTL_REVOKE)
                    && let Some(w) = u64_at(payload, 1)
                    && ((w & 0xffff_ffff) as u32) < self.size =>
            {
                self.revokes_in
                    .push(((w >> 32) as u32, (w & 0xffff_ffff) as u32));
            }
            ProtoKind::Data | ProtoKind::Credit | ProtoKind::Control => {
                rcomm_transport::rlog!(Trace, "P2P", "ignored {:?} from rank {peer}", hdr.kind);
            }
        }
    }

    fn finish_eager(&mut self, req: ReqId, env: Envelope, payload: &[u8]) {
        let region = self.req_region(req);
        let res = if (env.len as usize) > region.len() {
            Err(CommError::Truncated {
                buffer: region.len(),
                message: env.len as usize,
            })
        } else {
            region.write(0, payload);
            Ok(Status {
                source: env.source,
                tag: env.tag,
                bytes: payload.len(),
            })
        };
        self.req_mut(req).peer = Some(env.source);
        self.complete(req, res);
    }

    /// A receive matched a message (arriving, or stored earlier).
    fn start_recv(&mut self, req: ReqId, env: Envelope, stored: Stored) {
        self.req_mut(req).peer = Some(env.source);
        match stored {
            Stored::Eager(data) => {
                self.finish_eager(req, env, &data);
                if self.pool.len() < POOL_MAX && data.capacity() <= POOL_BUF_MAX {
                    self.pool.push(data);
                }
            }
            Stored::Rts { sender_token, key } => {
                let cap = self.req_region(req).len();
                if env.len as usize > cap {
                    // Truncation consumes the message (MPI_ERR_TRUNCATE): release the sender.
                    self.send_ctl(env.source, ProtoKind::RndvFin, &[sender_token]);
                    self.complete(
                        req,
                        Err(CommError::Truncated {
                            buffer: cap,
                            message: env.len as usize,
                        }),
                    );
                } else if env.source == self.me {
                    unreachable!("self messages are eager");
                } else if let Some(key) = key
                    && self.bulk[env.source as usize].contains(Ops::GET)
                    && env.len as usize <= self.cfg.get_max
                {
                    self.pulls.push(Pull {
                        req,
                        peer: env.source,
                        env,
                        sender_token,
                        key,
                    });
                } else {
                    self.start_cts(req, env.source, env, sender_token);
                }
            }
        }
    }

    /// A GET completed: release the sender, complete the receive.
    fn got(&mut self, p: Pull) {
        self.send_ctl(p.peer, ProtoKind::RndvFin, &[p.sender_token]);
        self.complete(
            p.req,
            Ok(Status {
                source: p.env.source,
                tag: p.env.tag,
                bytes: p.env.len as usize,
            }),
        );
    }

    /// The PUT of send `token` completed: tell the receiver, complete the send.
    fn put_done(&mut self, token: u64) {
        let Some(s) = self.rndv_send.remove(&token) else {
            return;
        };
        let rt = s.recv_token.expect("a PUT follows a CTS");
        self.send_ctl_flagged(s.peer, ProtoKind::RndvFin, FIN_PUT, &[rt]);
        self.complete(
            s.req,
            Ok(Status {
                source: self.me,
                tag: 0,
                bytes: s.region.len(),
            }),
        );
    }

    /// Answers an RTS that is not pulled: a CTS asking for a PUT where the lane offers it
    /// (its key comes from the transport, so it is made in `after_protocol`), else for STREAM.
    fn start_cts(&mut self, req: ReqId, peer: u32, env: Envelope, sender_token: u64) {
        if self.bulk[peer as usize].contains(Ops::PUT) {
            self.put_cts.push((req, peer, env, sender_token));
            return;
        }
        let token = self.token();
        self.rndv_recv.insert(
            token,
            RndvRecv {
                req,
                peer,
                env,
                received: 0,
                put: false,
            },
        );
        self.send_ctl(peer, ProtoKind::RndvCts, &[sender_token, token]);
    }

    fn start_put_cts(
        &mut self,
        req: ReqId,
        peer: u32,
        env: Envelope,
        sender_token: u64,
        key: RKey,
    ) {
        let token = self.token();
        self.rndv_recv.insert(
            token,
            RndvRecv {
                req,
                peer,
                env,
                received: 0,
                put: true,
            },
        );
        self.out_len += 1;
        self.out.entry(peer).or_default().push_back(Out {
            hdr: ctl_header(self.me, ProtoKind::RndvCts, 0),
            payload: keyed(&[sender_token, token, CTS_PUT], Some(&key)),
            req: None,
        });
    }

    fn chunk(&mut self, peer: u32, token: u64, offset: u64, data: &[u8]) {
        if let Some(dst) = self.chunk_dest(peer, token, offset, data.len()) {
            dst.copy_from_slice(data);
            self.chunk_written(token, data.len());
        }
    }

    /// The bytes of receive `token`'s buffer that `len` bytes at `offset` from `peer` go to;
    /// `None` (after failing the receive if the chunk does not belong there) to drop them.
    fn chunk_dest(&mut self, peer: u32, token: u64, offset: u64, len: usize) -> Option<&mut [u8]> {
        let Some(r) = self.rndv_recv.get(&token) else {
            rcomm_transport::rlog!(
                Trace,
                "P2P",
                "chunk for unknown token {token} from rank {peer}"
            );
            return None;
        };
        let region = self.reqs[r.req].as_ref().expect("live request").region;
        let fits = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= r.env.len && end <= region.len() as u64);
        if r.peer != peer || !fits {
            let req = r.req;
            self.rndv_recv.remove(&token);
            self.complete(
                req,
                Err(CommError::Protocol {
                    rank: peer,
                    why: "data chunk outside the message".into(),
                }),
            );
            return None;
        }
        let o = offset as usize;
        let req = r.req;
        let region = &self.reqs[req].as_ref().expect("live request").region;
        Some(&mut region.bytes_mut()[o..o + len])
    }

    /// `len` more bytes of receive `token` are in; completes it when all are.
    fn chunk_written(&mut self, token: u64, len: usize) {
        let Some(r) = self.rndv_recv.get_mut(&token) else {
            return;
        };
        r.received += len as u64;
        if r.received == r.env.len {
            let r = self.rndv_recv.remove(&token).expect("present");
            self.complete(
                r.req,
                Ok(Status {
                    source: r.env.source,
                    tag: r.env.tag,
                    bytes: r.env.len as usize,
                }),
            );
        }
    }
}

fn ctl_header(me: u32, kind: ProtoKind, flags: u8) -> Header {
    Header {
        context: 0,
        source: me,
        seq: 0,
        tag: 0,
        len: 0,
        kind,
        flags,
        coll_seq: 0,
        signature: 0,
    }
}

impl Deliver for State {
    fn completed(&mut self, peer: u32, tok: u64, res: Result<(), TransportError>) {
        if let Some(p) = self.gets.remove(&tok) {
            match res {
                Ok(()) => self.got(p),
                Err(e) => {
                    // Nothing usable arrived: release the sender, fail the receive.
                    self.send_ctl(p.peer, ProtoKind::RndvFin, &[p.sender_token]);
                    self.complete(
                        p.req,
                        Err(CommError::Protocol {
                            rank: peer,
                            why: format!("reading its buffer failed: {e}"),
                        }),
                    );
                }
            }
        } else if self
            .rndv_send
            .get(&tok)
            .is_some_and(|s| s.putting.is_some() && s.peer == peer)
        {
            match res {
                Ok(()) => self.put_done(tok),
                Err(e) => {
                    let s = self.rndv_send.remove(&tok).expect("present");
                    let rt = s.recv_token.expect("a PUT follows a CTS");
                    self.send_ctl_flagged(s.peer, ProtoKind::RndvFin, FIN_PUT_FAILED, &[rt]);
                    self.complete(
                        s.req,
                        Err(CommError::Protocol {
                            rank: peer,
                            why: format!("writing into its buffer failed: {e}"),
                        }),
                    );
                }
            }
        }
    }

    fn incoming(&mut self, peer: u32, inc: Incoming<'_>) {
        match inc {
            Incoming::Msg(hdr, payload) => self.deliver(peer, hdr, payload),
            Incoming::Chunk {
                token,
                offset,
                data,
            } => self.chunk(peer, token, offset, data),
        }
    }

    fn place(&mut self, peer: u32, token: u64, offset: u64, len: usize) -> Option<&mut [u8]> {
        self.chunk_dest(peer, token, offset, len)
    }

    fn placed(&mut self, _peer: u32, token: u64, _offset: u64, len: usize) {
        self.chunk_written(token, len);
    }
}
