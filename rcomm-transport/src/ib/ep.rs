//! The `ib` endpoint: rcomm's RC protocol over any [`Verbs`] — the simulated fabric in
//! tests, libibverbs on a machine with an HCA.
//!
//! * **Connections.** Per peer, `RCOMM_IB_QPS_PER_CONNECTION` RC QPs on each rail (an HCA
//!   port; several rails stripe a rank's traffic over several HCAs, `RCOMM_IB_RAILS`), made at
//!   setup and published with the rank's eager rings in its [`ConnBlob`];
//!   [`IbEndpoint::connect`] brings them to RTS from the peer's blob, with no round trip (rail
//!   i pairs with the peer's rail i, as many as both have). Receives are posted before RTR,
//!   so the first message never meets an empty queue.
//! * **Eager.** Each rank owns a registered ring of `slots` slots per peer, which only that
//!   peer writes. A message is one RDMA WRITE WITH IMMEDIATE of `[len][header][payload]`
//!   from a registered staging slot into the peer's ring; the immediate names the slot and
//!   hands back credits (slots this side has emptied). A sender writes only with a credit, so
//!   nothing is ever overwritten unread; credits also go back alone, in a zero-byte write with
//!   immediate, once half a ring is owed and no message carried them. Messages spread over
//!   the QPs of a peer round-robin and may be delivered out of order across them: the core
//!   restores MPI order from the header's sequence number, as over several TCP streams.
//! * **Rendezvous.** GET is an RDMA READ of the peer's registered buffer (its key travels in
//!   the core's RTS), PUT an RDMA WRITE into it after a CTS. A registration (counted in a
//!   [`Registrations`] cache) lives as long as its operation for host memory — nothing says
//!   when a host buffer is freed — and is kept for device memory, checked by allocation id.
//! * **Failures.** A completion in error, a QP or port gone bad (async events), or a dead
//!   device fail the peer (or every peer of the port) with an error naming the verbs status;
//!   its QPs go to the error state so nothing more touches memory, and the core reports
//!   `PeerLost`.
//!
//! Sans-IO in the sense that matters: everything happens inside verbs calls and the
//! completions they return, so on the simulated fabric a test decides every interleaving.
//!
//! Why one file: one endpoint's state machine over verbs: connections, credits, eager slots and
//! rendezvous share the work-request ids and the per-peer state that a completion updates.

use super::conn::ConnBlob;
use super::regcache::Registrations;
use super::verbs::{
    Access, AhAttr, AsyncEvent, Context, Cq, Gid, GidEntry, Grh, InitAttr, LinkLayer, Mr, Mtu, Pd,
    PortState, Qp, QpCap, QpInitAttr, QpModify, RecvWr, RtrAttr, RtsAttr, SendOp, SendWr, Sge,
    Verbs, VerbsError, WcStatus, WorkCompletion,
};
use crate::caps::{Caps, Kinds, Ops};
use crate::error::TransportError;
use crate::mem::{MemRef, RKey};
use crate::transport::{Counters, Deliver, Incoming, Transport, Tx};
use rcomm_runtime::wire::Header;
use std::collections::{HashMap, VecDeque};

/// Settings of one endpoint (from `RCOMM_IB_*`, or a test).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbParams {
    /// Eager slots per peer.
    pub slots: u16,
    /// Bytes per slot: a frame of `[u32 len][header][payload]`.
    pub slot_bytes: u32,
    /// RC QPs per peer.
    pub qps: u8,
    /// ACK timeout code (4.096 µs·2^t).
    pub timeout: u8,
    /// Retransmissions on timeout.
    pub retry_cnt: u8,
    /// Retransmissions on RNR (7: for ever).
    pub rnr_retry: u8,
    /// Service level.
    pub sl: u8,
    /// Traffic class (RoCE DSCP/ECN).
    pub tc: u8,
    /// Source GID index; `None`: NCCL's rule ([`super::gid_index_auto`]).
    pub gid_index: Option<u8>,
    /// Unused registrations kept.
    pub reg_cache: usize,
    /// GPUDirect RDMA: device memory is registered as a dma-buf and read and written by the
    /// HCA directly (else the core stages it through host memory).
    pub gdr: bool,
    /// Keep host registrations after their operation for reuse. Off by default: nothing
    /// tells this endpoint when a host buffer is freed and its range reused (no memory hooks,
    /// no ODP), and a stale registration would let the HCA read the freed pages; so a host
    /// registration lives as long as its operation (device ones are checked by allocation
    /// id and stay cached).
    pub cache_host: bool,
}

impl Default for IbParams {
    fn default() -> Self {
        Self {
            slots: 32,
            slot_bytes: 8192 + FRAME as u32,
            qps: 1,
            timeout: 20,
            retry_cnt: 7,
            rnr_retry: 7,
            sl: 0,
            tc: 0,
            gid_index: None,
            reg_cache: 256,
            gdr: false,
            cache_host: false,
        }
    }
}

impl IbParams {
    /// From the parsed environment.
    pub fn from_settings(s: &rcomm_runtime::config::IbSettings) -> Self {
        Self {
            qps: s.qps_per_connection.clamp(1, 16) as u8,
            timeout: s.timeout,
            retry_cnt: s.retry_cnt,
            sl: s.sl,
            tc: s.tc,
            gid_index: s.gid_index,
            ..Self::default()
        }
    }
}

/// Frame prefix in a slot: payload length, then the header.
const FRAME: usize = 4 + Header::LEN;
/// A chunk frame (STREAM, host staging of device memory): length word with [`CHUNK_BIT`],
/// the receiver's token, the offset, then the bytes.
const CHUNK_FRAME: usize = 4 + 16;
const CHUNK_BIT: u32 = 1 << 31;
/// Receives kept posted per QP beyond one per slot: room for credit-only messages.
const SPARE_RECVS: u32 = 16;
/// RDMA reads/writes one QP may have outstanding before later ones wait in a backlog.
const RDMA_PER_QP: u32 = 64;
/// Largest piece of one RDMA operation (the verbs limit is 2^31).
const PIECE: usize = 1 << 30;
/// Immediate: credit-only flag, returned credits, slot.
const IMM_CREDIT_ONLY: u32 = 1 << 31;
const IMM_MAX_CREDITS: u32 = 0x7fff;
/// Progress passes between looks at the async events (port down, device fatal, QP fatal).
const EVENT_PASSES: u32 = 64;

/// Work request id: kind in the top byte.
const WR_EAGER: u64 = 1 << 56;
const WR_CREDIT: u64 = 2 << 56;
const WR_RECV: u64 = 3 << 56;
const WR_OP: u64 = 4 << 56;

fn wr_id(kind: u64, peer: u32, qp: u8, slot: u16) -> u64 {
    kind | (u64::from(peer) << 24) | (u64::from(qp) << 16) | u64::from(slot)
}

fn wr_parts(id: u64) -> (u64, u32, u8, u16) {
    (
        id & (0xff << 56),
        ((id >> 24) & 0xffff_ffff) as u32,
        (id >> 16) as u8,
        id as u16,
    )
}

/// Memory the HCA reads and writes behind Rust's back: a raw, page-aligned allocation that
/// no reference spans while the device may access it.
struct Dma {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory owned by the endpoint; the endpoint is used by one thread at a time.
unsafe impl Send for Dma {}

impl Dma {
    fn new(len: usize) -> Result<Self, TransportError> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).map_err(|e| {
            TransportError::Io {
                what: "ib ring layout",
                source: std::io::Error::other(e.to_string()),
            }
        })?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(TransportError::Io {
                what: "allocating ib rings",
                source: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            });
        }
        Ok(Self { ptr, len })
    }

    fn addr(&self) -> u64 {
        self.ptr as u64
    }
}

impl Drop for Dma {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len.max(1), 4096).expect("made");
        // SAFETY: allocated in `new` with this layout; the endpoint deregisters first.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// Connection state of one peer.
#[derive(Debug, Default)]
struct Peer {
    qps: Vec<Qp>,
    ready: bool,
    /// Why the peer is gone (the first error seen).
    lost: Option<String>,
    ring_addr: u64,
    /// The peer's rings' remote key on each shared rail.
    ring_rkeys: Vec<u32>,
    /// QPs in use: `qps` per shared rail (QP `j` is on rail `j / qps`).
    nqp: usize,
    /// Slots of the peer's ring for us that we may write.
    credits: u32,
    /// Next slot to write (modulo slots).
    head: u32,
    /// Local staging slots whose write has not completed.
    busy: Vec<bool>,
    /// Next QP for a message.
    rr: usize,
    /// Slots of our ring for this peer emptied but not yet credited back.
    owed: u32,
    /// Send work requests outstanding per QP.
    outstanding: Vec<u32>,
}

/// One HCA port of the endpoint: its own context, PD, CQ and registrations.
struct Rail {
    dev: String,
    port: u8,
    ctx: Context,
    pd: Pd,
    cq: Cq,
    link_layer: LinkLayer,
    lid: u16,
    gid: Gid,
    gid_index: u8,
    mtu: Mtu,
    rate_mbps: u64,
    ring_mr: Mr,
    stage_mr: Mr,
    regs: Registrations<Mr>,
    /// Bytes this rail was given to move (eager frames and RDMA), for tests and tools.
    bytes: u64,
}

/// A rendezvous operation (GET or PUT) in flight.
#[derive(Debug)]
struct Op {
    peer: u32,
    tok: u64,
    /// The local registration it holds.
    local: Mr,
    /// Pieces not yet completed.
    pieces_left: u32,
    /// Posted (false: waiting in the backlog for send-queue room).
    posted: bool,
    read: bool,
    /// Local start, remote start, length, remote key.
    local_addr: u64,
    remote_addr: u64,
    len: usize,
    rkey: u32,
    qp: u8,
    /// The core gave the buffer up (quiesce): complete silently.
    cancelled: bool,
    /// The local buffer's memory kind.
    kind: crate::mem::MemKind,
}

/// One rank's `ib` endpoint over verbs `V`.
pub struct IbEndpoint<V: Verbs> {
    v: V,
    me: u32,
    p: IbParams,
    rails: Vec<Rail>,
    psn: u32,
    ring: Dma,
    stage: Dma,
    peers: Vec<Peer>,
    /// (rail, QP number) → peer, for async events.
    by_qpn: HashMap<(usize, u32), u32>,
    ops: HashMap<u64, Op>,
    backlog: VecDeque<u64>,
    next_op: u64,
    stash: VecDeque<WorkCompletion>,
    wcs: Vec<WorkCompletion>,
    failed: VecDeque<TransportError>,
    counters: Counters,
    blob: ConnBlob,
    /// Device allocations registered, by base: their buffer id, so an allocation freed and
    /// made again at the same address (a new id) drops the old registrations first.
    dev_allocs: HashMap<u64, u64>,
    /// Registrations behind keys handed out ([`register`](Self::register)), per rail, until
    /// the core says the peer is done ([`release`](Self::release)).
    exposed: HashMap<(u64, usize), Vec<Vec<Mr>>>,
    /// Peers owed half a ring of credits that no message has carried back yet.
    credit_owed: Vec<u32>,
    /// Progress passes, to look at the async events every [`EVENT_PASSES`] (a system call on
    /// libibverbs: not on every pass of a spinning rank).
    passes: u32,
    /// A sleep ended (the async descriptor may have woken it): look at the events now.
    events_due: std::cell::Cell<bool>,
}

impl<V: Verbs> std::fmt::Debug for IbEndpoint<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IbEndpoint")
            .field("me", &self.me)
            .field("rails", &self.rails())
            .finish()
    }
}

fn verr(what: &'static str, e: VerbsError) -> TransportError {
    TransportError::Io {
        what,
        source: std::io::Error::other(e.to_string()),
    }
}

/// What a completion status means, for the error a user reads.
fn status_meaning(s: WcStatus) -> &'static str {
    match s {
        WcStatus::Success => "success",
        WcStatus::LocLenErr => "local length error",
        WcStatus::LocProtErr => "local protection error (memory not registered for this)",
        WcStatus::WrFlushErr => "flushed: the QP was already in error",
        WcStatus::RemInvReqErr => "the peer refused the request as invalid",
        WcStatus::RemAccessErr => {
            "the peer refused access (remote key, range or rights; memory deregistered?)"
        }
        WcStatus::RemOpErr => "the peer could not complete the operation",
        WcStatus::RetryExcErr => {
            "transport retries exhausted: the peer did not answer (dead, or the link is down)"
        }
        WcStatus::RnrRetryExcErr => "receiver-not-ready retries exhausted",
    }
}

impl<V: Verbs> IbEndpoint<V> {
    /// Opens the rails `devs` (device, port) for rank `me` of `ranks`: per rail a PD, a CQ
    /// and the rings' registrations, and the QPs for every peer (in INIT, receives posted).
    /// [`blob`](Self::blob) is then what to publish.
    pub fn open(
        v: V,
        devs: &[(&str, u8)],
        me: u32,
        ranks: u32,
        p: IbParams,
    ) -> Result<Self, TransportError> {
        if devs.is_empty() || devs.len() * usize::from(p.qps) > 255 {
            return Err(TransportError::Io {
                what: "opening ib",
                source: std::io::Error::other(format!(
                    "{} rails of {} QPs (1 to 255 QPs per peer)",
                    devs.len(),
                    p.qps
                )),
            });
        }
        let ring_len = ranks as usize * usize::from(p.slots) * p.slot_bytes as usize;
        let ring = Dma::new(ring_len)?;
        let stage = Dma::new(ring_len)?;
        let mut rails = Vec::with_capacity(devs.len());
        for &(dev, port) in devs {
            match Self::open_rail(&v, dev, port, ranks, p, &ring, &stage) {
                Ok(r) => rails.push(r),
                Err(e) => {
                    for r in rails {
                        Self::close_rail(&v, r);
                    }
                    return Err(e);
                }
            }
        }
        // A PSN that differs per rank and run makes a stale peer's packets fail visibly.
        let psn =
            (std::process::id().wrapping_mul(2_654_435_761) ^ me.wrapping_mul(40_503)) & 0xff_ffff;
        let mut ep = Self {
            v,
            me,
            p,
            rails,
            psn,
            ring,
            stage,
            peers: (0..ranks).map(|_| Peer::default()).collect(),
            by_qpn: HashMap::new(),
            ops: HashMap::new(),
            backlog: VecDeque::new(),
            next_op: 1,
            stash: VecDeque::new(),
            wcs: Vec::new(),
            failed: VecDeque::new(),
            counters: Counters::default(),
            blob: ConnBlob::new(Vec::new(), 0, 0, (2, 64), 1, &[]),
            dev_allocs: HashMap::new(),
            exposed: HashMap::new(),
            credit_owed: Vec::new(),
            passes: 0,
            events_due: std::cell::Cell::new(true),
        };
        let nr = ep.rails.len();
        let mut qpns = Vec::with_capacity(ranks as usize * nr * usize::from(p.qps));
        for peer in 0..ranks {
            for rail in 0..nr {
                for k in 0..p.qps {
                    if peer == me {
                        qpns.push(0);
                        continue;
                    }
                    let qp = ep.make_qp(peer, rail, k)?;
                    qpns.push(qp.qpn);
                }
            }
        }
        let addrs = ep
            .rails
            .iter()
            .map(|r| super::conn::RailAddr {
                link_layer: r.link_layer,
                lid: r.lid,
                gid: r.gid,
                mtu: r.mtu,
                ring_rkey: r.ring_mr.rkey,
            })
            .collect();
        ep.blob = ConnBlob::new(
            addrs,
            psn,
            ep.ring.addr(),
            (p.slots, p.slot_bytes),
            p.qps,
            &qpns,
        );
        Ok(ep)
    }

    fn open_rail(
        v: &V,
        dev: &str,
        port: u8,
        ranks: u32,
        p: IbParams,
        ring: &Dma,
        stage: &Dma,
    ) -> Result<Rail, TransportError> {
        let ctx = v
            .open(dev)
            .map_err(|e| verr("opening the RDMA device", e))?;
        let fail = |what: &'static str, why: String| {
            let _ = v.close(ctx);
            TransportError::Io {
                what,
                source: std::io::Error::other(why),
            }
        };
        let pa = match v.query_port(ctx, port) {
            Ok(a) => a,
            Err(e) => return Err(fail("querying the RDMA port", e.to_string())),
        };
        if !matches!(pa.state, PortState::Active) {
            let why = format!("{dev} port {port} is {}", pa.state.name());
            return Err(fail("opening the RDMA port", why));
        }
        let table: Vec<GidEntry> = (0..pa.gid_tbl_len)
            .filter_map(|i| v.query_gid(ctx, port, i).ok())
            .collect();
        let gid_index = match p.gid_index {
            Some(i) => i,
            None => super::gid_index_auto(pa.link_layer, &table).unwrap_or(0) as u8,
        };
        let gid = table
            .iter()
            .find(|e| e.index == u16::from(gid_index))
            .map(|e| e.gid)
            .unwrap_or_default();
        if pa.link_layer == LinkLayer::Ethernet && gid.is_zero() {
            let why =
                format!("{dev} port {port} has no GID at index {gid_index} (RCOMM_IB_GID_INDEX)");
            return Err(fail("choosing a RoCE GID", why));
        }
        let pd = match v.alloc_pd(ctx) {
            Ok(pd) => pd,
            Err(e) => return Err(fail("allocating a PD", e.to_string())),
        };
        let depth =
            ranks.max(2) * u32::from(p.qps) * (2 * u32::from(p.slots) + SPARE_RECVS + RDMA_PER_QP);
        let cq = match v.create_cq(ctx, depth.min(1 << 20)) {
            Ok(cq) => cq,
            Err(e) => {
                let _ = v.dealloc_pd(pd);
                return Err(fail("making the CQ", e.to_string()));
            }
        };
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        // SAFETY: both allocations live in the endpoint, which deregisters them (every rail)
        // before freeing them (Drop), and no reference spans them while an HCA may use them.
        let ring_mr = unsafe { v.reg_mr(pd, ring.addr(), ring.len as u64, rw) };
        // SAFETY: as above.
        let stage_mr = unsafe { v.reg_mr(pd, stage.addr(), stage.len as u64, Access::LOCAL_WRITE) };
        match (ring_mr, stage_mr) {
            (Ok(ring_mr), Ok(stage_mr)) => Ok(Rail {
                dev: dev.to_string(),
                port,
                ctx,
                pd,
                cq,
                link_layer: pa.link_layer,
                lid: pa.lid,
                gid,
                gid_index,
                mtu: pa.active_mtu,
                rate_mbps: pa.rate_mbps(),
                ring_mr,
                stage_mr,
                regs: Registrations::new(p.reg_cache),
                bytes: 0,
            }),
            (a, b) => {
                let why = [&a, &b]
                    .iter()
                    .find_map(|r| r.as_ref().err().map(|e| e.to_string()))
                    .unwrap_or_default();
                for mr in [a, b].into_iter().flatten() {
                    let _ = v.dereg_mr(mr);
                }
                let _ = v.destroy_cq(cq);
                let _ = v.dealloc_pd(pd);
                Err(fail("registering the eager rings", why))
            }
        }
    }

    /// Releases a rail's objects (its QPs are gone already).
    fn close_rail(v: &V, mut r: Rail) {
        for mr in r.regs.drain() {
            let _ = v.dereg_mr(mr);
        }
        let _ = v.dereg_mr(r.ring_mr);
        let _ = v.dereg_mr(r.stage_mr);
        let _ = v.destroy_cq(r.cq);
        let _ = v.dealloc_pd(r.pd);
        let _ = v.close(r.ctx);
    }

    fn make_qp(&mut self, peer: u32, rail: usize, k: u8) -> Result<Qp, TransportError> {
        let recvs = u32::from(self.p.slots) + SPARE_RECVS;
        let cap = QpCap {
            max_send_wr: u32::from(self.p.slots) + SPARE_RECVS + RDMA_PER_QP,
            max_recv_wr: recvs,
            max_send_sge: 1,
            max_recv_sge: 1,
        };
        let v = &self.v;
        let r = &self.rails[rail];
        let qp = v
            .create_qp(
                r.pd,
                &QpInitAttr {
                    send_cq: r.cq,
                    recv_cq: r.cq,
                    cap,
                },
            )
            .map_err(|e| verr("creating an RC QP", e))?;
        v.modify_qp(
            qp,
            &QpModify::Init(InitAttr {
                port: r.port,
                pkey_index: 0,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            }),
        )
        .map_err(|e| verr("moving a QP to INIT", e))?;
        // Write-with-immediate ignores the receive's entries: empty receives suffice.
        let j = (rail * usize::from(self.p.qps) + usize::from(k)) as u8;
        let id = wr_id(WR_RECV, peer, j, 0);
        let wrs: Vec<RecvWr<'_>> = (0..recvs).map(|_| RecvWr { wr_id: id, sg: &[] }).collect();
        v.post_recv(qp, &wrs)
            .map_err(|e| verr("posting receives", e.error))?;
        self.by_qpn.insert((rail, qp.qpn), peer);
        let pe = &mut self.peers[peer as usize];
        pe.qps.push(qp);
        pe.outstanding.push(0);
        Ok(qp)
    }

    /// The rail QP `j` of a peer is on.
    fn rail_of(&self, j: usize) -> usize {
        (j / usize::from(self.p.qps)).min(self.rails.len() - 1)
    }

    /// The rails: device, port, and the bytes each was given to move.
    pub fn rails(&self) -> Vec<(String, u8, u64)> {
        self.rails
            .iter()
            .map(|r| (r.dev.clone(), r.port, r.bytes))
            .collect()
    }

    /// What this rank publishes in its address record.
    pub fn blob(&self) -> &ConnBlob {
        &self.blob
    }

    /// Connects to `peer` from its blob: every QP to RTR and RTS.
    pub fn connect(&mut self, peer: u32, b: &ConnBlob) -> Result<(), TransportError> {
        let bad = |why: String| TransportError::Connect {
            peer,
            addr: format!("ib blob of rank {peer}"),
            why,
        };
        if peer == self.me || peer as usize >= self.peers.len() {
            return Err(bad("no such peer".into()));
        }
        if !self.blob.same_fabric(b) {
            let (t, m) = (&b.rails[0], &self.rails[0]);
            return Err(bad(format!(
                "{:?} port with GID {} cannot reach this rank's {:?} port with GID {}",
                t.link_layer, t.gid, m.link_layer, m.gid
            )));
        }
        if (b.qps, b.slots, b.slot_bytes, b.ranks)
            != (
                self.p.qps,
                self.p.slots,
                self.p.slot_bytes,
                self.peers.len() as u32,
            )
        {
            return Err(bad(format!(
                "ring or QP shape differs: {} QPs, {}×{} B, {} ranks there; {} QPs, {}×{} B, {} ranks here",
                b.qps,
                b.slots,
                b.slot_bytes,
                b.ranks,
                self.p.qps,
                self.p.slots,
                self.p.slot_bytes,
                self.peers.len()
            )));
        }
        let shared = self.blob.common_rails(b);
        for rail in 0..shared {
            let (m, t) = (&self.rails[rail], &b.rails[rail]);
            let grh = (m.link_layer == LinkLayer::Ethernet).then_some(Grh {
                dgid: t.gid,
                sgid_index: m.gid_index,
                hop_limit: 64,
                traffic_class: self.p.tc,
                flow_label: 0,
            });
            for k in 0..self.p.qps {
                let j = rail * usize::from(self.p.qps) + usize::from(k);
                let qp = self.peers[peer as usize].qps[j];
                let dest = b.qpn(self.me, rail, k).filter(|&q| q != 0).ok_or_else(|| {
                    bad(format!(
                        "no QP number for rank {} rail {rail} QP {k}",
                        self.me
                    ))
                })?;
                let rtr = RtrAttr {
                    path_mtu: m.mtu.min(t.mtu),
                    dest_qpn: dest,
                    rq_psn: b.psn,
                    max_dest_rd_atomic: 16,
                    // 0.96 ms: an RNR retry waits about as long as a busy peer takes to repost.
                    min_rnr_timer: 14,
                    ah: AhAttr {
                        dlid: t.lid,
                        sl: self.p.sl,
                        port: m.port,
                        grh,
                    },
                };
                let rts = RtsAttr {
                    sq_psn: self.psn,
                    timeout: self.p.timeout,
                    retry_cnt: self.p.retry_cnt,
                    rnr_retry: self.p.rnr_retry,
                    max_rd_atomic: 16,
                };
                self.v
                    .modify_qp(qp, &QpModify::Rtr(rtr))
                    .and_then(|()| self.v.modify_qp(qp, &QpModify::Rts(rts)))
                    .map_err(|e| bad(e.to_string()))?;
            }
        }
        let pe = &mut self.peers[peer as usize];
        pe.ring_addr =
            b.ring_addr + u64::from(self.me) * u64::from(b.slots) * u64::from(b.slot_bytes);
        pe.ring_rkeys = b.rails[..shared].iter().map(|r| r.ring_rkey).collect();
        pe.nqp = shared * usize::from(self.p.qps);
        pe.credits = u32::from(b.slots);
        pe.busy = vec![false; usize::from(b.slots)];
        pe.ready = true;
        Ok(())
    }

    /// What the transport offers.
    pub fn caps(&self) -> Caps {
        Caps {
            latency_s: 2e-6,
            bandwidth_bps: (self.rails.iter().map(|r| r.rate_mbps).sum::<u64>() as f64 * 1e6 / 8.0
                * 0.9)
                .max(1e8),
            eager_limit: self.eager_limit(),
            max_frame: self.eager_limit(),
            // STREAM carries device memory staged through the host (until GPUDirect RDMA).
            ops: Ops::AM.with(Ops::GET).with(Ops::PUT).with(Ops::STREAM),
            kinds: Kinds {
                host: true,
                cuda: self.p.gdr,
            },
            needs_reg: true,
            rkey_len: 16 + 4 * self.rails.len(),
            features: <super::IbNet as Transport>::OFFERS.2,
        }
    }

    /// Largest eager payload.
    pub fn eager_limit(&self) -> usize {
        self.p.slot_bytes as usize - FRAME
    }

    /// Byte counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The QPs to `peer` (for diagnostics and fault-injection tests).
    pub fn qps_of(&self, peer: u32) -> &[Qp] {
        self.peers.get(peer as usize).map_or(&[], |p| &p.qps)
    }

    /// Registrations held (cached and in use).
    pub fn registrations(&self) -> usize {
        self.rails.iter().map(|r| r.regs.len()).sum()
    }

    fn lost_err(peer: u32, why: &str) -> TransportError {
        TransportError::Link {
            peer,
            source: std::io::Error::other(why.to_string()),
        }
    }

    fn peer(&self, peer: u32) -> Result<&Peer, TransportError> {
        let pe = self
            .peers
            .get(peer as usize)
            .filter(|p| p.ready || p.lost.is_some())
            .ok_or_else(|| TransportError::Protocol {
                peer,
                why: "no ib connection to this rank".into(),
            })?;
        match &pe.lost {
            Some(why) => Err(Self::lost_err(peer, why)),
            None => Ok(pe),
        }
    }

    /// Sends one message if a slot of the peer's ring is free; `Ok(false)`: later.
    pub fn try_send(
        &mut self,
        peer: u32,
        hdr: &Header,
        payload: &[u8],
    ) -> Result<bool, TransportError> {
        self.peer(peer)?;
        if payload.len() > self.eager_limit() {
            return Err(TransportError::Protocol {
                peer,
                why: format!(
                    "{} bytes exceed the ib eager limit of {}",
                    payload.len(),
                    self.eager_limit()
                ),
            });
        }
        let mut head = [0u8; FRAME];
        head[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        head[4..].copy_from_slice(&hdr.encode());
        let sent = self.send_frame(peer, &head, payload)?;
        if sent {
            self.counters.msgs_sent += 1;
        }
        Ok(sent)
    }

    /// Sends up to one slot's worth of rendezvous data (STREAM); returns the bytes taken
    /// (0: no credit now).
    pub fn send_chunk(
        &mut self,
        peer: u32,
        token: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, TransportError> {
        self.peer(peer)?;
        let n = data.len().min(self.p.slot_bytes as usize - CHUNK_FRAME);
        let mut head = [0u8; CHUNK_FRAME];
        head[..4].copy_from_slice(&(n as u32 | CHUNK_BIT).to_le_bytes());
        head[4..12].copy_from_slice(&token.to_le_bytes());
        head[12..].copy_from_slice(&offset.to_le_bytes());
        Ok(if self.send_frame(peer, &head, &data[..n])? {
            n
        } else {
            0
        })
    }

    /// Writes `head` + `payload` into the next slot of `peer`'s ring, if a credit, a free
    /// staging slot and send-queue room allow.
    fn send_frame(
        &mut self,
        peer: u32,
        head: &[u8],
        payload: &[u8],
    ) -> Result<bool, TransportError> {
        let slots = u32::from(self.p.slots);
        let max_send = slots + SPARE_RECVS;
        let k = self.peers[peer as usize].rr;
        let rail = self.rail_of(k);
        let pe = &mut self.peers[peer as usize];
        let slot = pe.head % slots;
        if pe.credits == 0 || pe.busy[slot as usize] || pe.outstanding[k] >= max_send {
            return Ok(false);
        }
        let off = (peer as usize * slots as usize + slot as usize) * self.p.slot_bytes as usize;
        // SAFETY: the staging slot is inside `stage` (peer < ranks, slot < slots) and not
        // busy, so the HCA is not reading it; the frame fits (the callers bound it).
        unsafe {
            let at = self.stage.ptr.add(off);
            std::ptr::copy_nonoverlapping(head.as_ptr(), at, head.len());
            std::ptr::copy_nonoverlapping(payload.as_ptr(), at.add(head.len()), payload.len());
        }
        let give = pe.owed.min(IMM_MAX_CREDITS);
        let sg = [Sge {
            addr: self.stage.addr() + off as u64,
            len: (head.len() + payload.len()) as u32,
            lkey: self.rails[rail].stage_mr.lkey,
        }];
        let wr = SendWr {
            wr_id: wr_id(WR_EAGER, peer, k as u8, slot as u16),
            op: SendOp::RdmaWriteImm {
                remote_addr: pe.ring_addr + u64::from(slot) * u64::from(self.p.slot_bytes),
                rkey: pe.ring_rkeys[rail],
                imm: (give << 16) | slot,
            },
            sg: &sg,
            signaled: true,
        };
        if let Err(e) = self.v.post_send(pe.qps[k], &[wr]) {
            let why = format!("posting a send on {}: {}", self.rails[rail].dev, e.error);
            self.fail_peer(peer, why.clone());
            return Err(Self::lost_err(peer, &why));
        }
        let pe = &mut self.peers[peer as usize];
        pe.owed -= give;
        pe.credits -= 1;
        pe.head = pe.head.wrapping_add(1);
        pe.busy[slot as usize] = true;
        pe.outstanding[k] += 1;
        pe.rr = (k + 1) % pe.nqp;
        self.counters.bytes_sent += payload.len() as u64;
        self.rails[rail].bytes += (head.len() + payload.len()) as u64;
        Ok(true)
    }

    /// The remote key of `m` (registered for remote read and write, cached).
    /// On every rail: the peer reads or writes through whichever rail its operation takes.
    pub fn register(&mut self, peer: u32, m: &MemRef) -> Result<RKey, TransportError> {
        let mut k = Vec::with_capacity(16 + 4 * self.rails.len());
        k.extend_from_slice(&m.addr.to_le_bytes());
        k.extend_from_slice(&(m.len as u64).to_le_bytes());
        let mut mrs = Vec::with_capacity(self.rails.len());
        for rail in 0..self.rails.len() {
            match self.acquire(rail, peer, m) {
                Ok(mr) => mrs.push(mr),
                Err(e) => {
                    for (r, mr) in mrs.into_iter().enumerate() {
                        self.release_mr(r, mr, m.kind);
                    }
                    return Err(e);
                }
            }
        }
        for mr in &mrs {
            k.extend_from_slice(&mr.rkey.to_le_bytes());
        }
        self.exposed.entry((m.addr, m.len)).or_default().push(mrs);
        Ok(RKey::new(&k).expect("at most 8 rails fit"))
    }

    /// The peer is done with a key of [`register`](Self::register) for `m` (its rendezvous
    /// ended, however it ended): its registrations are released (host ones deregistered).
    pub fn release(&mut self, m: &MemRef) {
        let Some(list) = self.exposed.get_mut(&(m.addr, m.len)) else {
            return;
        };
        let mrs = list.pop().unwrap_or_default();
        if list.is_empty() {
            self.exposed.remove(&(m.addr, m.len));
        }
        for (rail, mr) in mrs.into_iter().enumerate() {
            self.release_mr(rail, mr, m.kind);
        }
    }

    fn acquire(&mut self, rail: usize, peer: u32, m: &MemRef) -> Result<Mr, TransportError> {
        let unsupported = |why: String| TransportError::Unsupported {
            peer,
            op: "register",
            why,
        };
        let len = m.len.max(1) as u64;
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let dev = match m.kind {
            crate::mem::MemKind::Host => None,
            crate::mem::MemKind::Cuda { .. } => {
                if !self.p.gdr {
                    return Err(unsupported(
                        "GPUDirect RDMA is off for this rank (RCOMM_NET_GDR_LEVEL, or no GPU near its HCA)"
                            .into(),
                    ));
                }
                let g = crate::gpu::gpu().map_err(|e| unsupported(e.to_string()))?;
                let info = g.ptr_info(m.addr).map_err(|e| unsupported(e.to_string()))?;
                if self.dev_allocs.insert(info.base, info.buffer_id) != Some(info.buffer_id) {
                    // New, or freed and made again at this address: nothing cached for the
                    // range may serve it.
                    self.invalidate(info.base, info.size as u64);
                }
                Some(g)
            }
        };
        let r = &mut self.rails[rail];
        let (v, pd) = (&self.v, r.pd);
        let got = r.regs.acquire(m.addr, len, || match dev {
            // SAFETY: the core keeps memory it hands a transport valid until the operation
            // completes (MemRef's contract); a cached registration of host memory since freed
            // is what `invalidate` is for (device allocations are checked above).
            None => unsafe { v.reg_mr(pd, m.addr, len, rw) },
            Some(g) => {
                let (fd, off) = g
                    .dmabuf(m.addr, len as usize)
                    .map_err(|e| VerbsError::Invalid(e.to_string()))?;
                // SAFETY: as above; the dma-buf holds the allocation, the MR holds the dma-buf.
                let res = unsafe { v.reg_dmabuf_mr(pd, off, len, m.addr, fd, rw) };
                if fd >= 0 {
                    // SAFETY: the descriptor the driver just gave us; the MR keeps its own
                    // reference to the dma-buf.
                    unsafe { libc::close(fd) };
                }
                res
            }
        });
        let a = got.map_err(|e| {
            unsupported(format!(
                "registering {} bytes of {} memory on {}: {e}",
                m.len,
                if dev.is_some() { "device" } else { "host" },
                r.dev
            ))
        })?;
        for old in a.evicted {
            let _ = self.v.dereg_mr(old);
        }
        Ok(a.h)
    }

    fn release_mr(&mut self, rail: usize, mr: Mr, kind: crate::mem::MemKind) {
        let regs = &mut self.rails[rail].regs;
        let host = kind == crate::mem::MemKind::Host;
        let gone = if host && !self.p.cache_host {
            regs.release_idle(mr)
        } else {
            regs.release(mr)
        };
        if let Some(old) = gone {
            let _ = self.v.dereg_mr(old);
        }
    }

    /// The range was freed or remapped: no cached registration serves it any more.
    pub fn invalidate(&mut self, addr: u64, len: u64) {
        for r in &mut self.rails {
            for old in r.regs.invalidate(addr, len) {
                let _ = self.v.dereg_mr(old);
            }
        }
    }

    /// The address and the remote key on `rail` of a peer's key (one rkey per rail of its).
    fn key(peer: u32, key: &RKey, len: usize, rail: usize) -> Result<(u64, u32), TransportError> {
        let b = key.as_bytes();
        let at = 16 + 4 * rail;
        match (key.u64_at(0), key.u64_at(1), b.get(at..at + 4)) {
            (Some(a), Some(l), Some(r)) if (b.len() - 16).is_multiple_of(4) && len as u64 <= l => {
                Ok((a, u32::from_le_bytes(r.try_into().expect("4 bytes"))))
            }
            _ => Err(TransportError::Protocol {
                peer,
                why: format!("ib remote key does not cover {len} bytes"),
            }),
        }
    }

    /// Starts an RDMA READ of `dst.len` bytes of `peer`'s memory named by `key` into `dst`.
    pub fn get(
        &mut self,
        peer: u32,
        dst: MemRef,
        key: &RKey,
        tok: u64,
    ) -> Result<Tx, TransportError> {
        self.rdma(peer, dst, key, tok, true)
    }

    /// Starts an RDMA WRITE of `src` into `peer`'s memory named by `key`.
    pub fn put(
        &mut self,
        peer: u32,
        src: MemRef,
        key: &RKey,
        tok: u64,
    ) -> Result<Tx, TransportError> {
        self.rdma(peer, src, key, tok, false)
    }

    fn rdma(
        &mut self,
        peer: u32,
        local: MemRef,
        key: &RKey,
        tok: u64,
        read: bool,
    ) -> Result<Tx, TransportError> {
        self.peer(peer)?;
        let k = self.peers[peer as usize].rr;
        let rail = self.rail_of(k);
        let (remote_addr, rkey) = Self::key(peer, key, local.len, rail)?;
        if local.len == 0 {
            return Ok(Tx::Done);
        }
        let mr = self.acquire(rail, peer, &local)?;
        let pe = &mut self.peers[peer as usize];
        let qp = k as u8;
        pe.rr = (k + 1) % pe.nqp;
        self.rails[rail].bytes += local.len as u64;
        let id = self.next_op;
        self.next_op += 1;
        self.ops.insert(
            id,
            Op {
                peer,
                tok,
                local: mr,
                pieces_left: local.len.div_ceil(PIECE) as u32,
                posted: false,
                read,
                local_addr: local.addr,
                remote_addr,
                len: local.len,
                rkey,
                qp,
                cancelled: false,
                kind: local.kind,
            },
        );
        self.backlog.push_back(id);
        self.post_backlog();
        if read {
            self.counters.bytes_cma += local.len as u64;
        } else {
            self.counters.bytes_sent += local.len as u64;
        }
        Ok(Tx::Pending)
    }

    /// Posts waiting RDMA operations while their QPs have room.
    fn post_backlog(&mut self) {
        let max_send = u32::from(self.p.slots) + SPARE_RECVS + RDMA_PER_QP;
        let mut i = 0;
        while i < self.backlog.len() {
            let id = self.backlog[i];
            let Some(op) = self.ops.get(&id) else {
                self.backlog.remove(i);
                continue;
            };
            let pe = &self.peers[op.peer as usize];
            if pe.lost.is_some() {
                // Completed with an error by `fail_peer`; nothing to post.
                self.backlog.remove(i);
                continue;
            }
            let k = usize::from(op.qp);
            if pe.outstanding[k] + op.pieces_left > max_send {
                i += 1;
                continue;
            }
            let mut wrs_sg = Vec::with_capacity(op.pieces_left as usize);
            let mut off = 0usize;
            while off < op.len {
                let n = PIECE.min(op.len - off);
                wrs_sg.push((
                    off,
                    [Sge {
                        addr: op.local_addr + off as u64,
                        len: n as u32,
                        lkey: op.local.lkey,
                    }],
                ));
                off += n;
            }
            let wrs: Vec<SendWr<'_>> = wrs_sg
                .iter()
                .map(|(off, sg)| {
                    let remote_addr = op.remote_addr + *off as u64;
                    SendWr {
                        wr_id: WR_OP | id,
                        op: if op.read {
                            SendOp::RdmaRead {
                                remote_addr,
                                rkey: op.rkey,
                            }
                        } else {
                            SendOp::RdmaWrite {
                                remote_addr,
                                rkey: op.rkey,
                            }
                        },
                        sg,
                        signaled: true,
                    }
                })
                .collect();
            let (peer, qp, rail) = (op.peer, pe.qps[k], self.rail_of(k));
            let res = self.v.post_send(qp, &wrs);
            drop(wrs);
            self.backlog.remove(i);
            match res {
                Ok(()) => {
                    let n = wrs_sg.len() as u32;
                    self.peers[peer as usize].outstanding[k] += n;
                    if let Some(op) = self.ops.get_mut(&id) {
                        op.posted = true;
                    }
                }
                Err(e) => {
                    let dev = &self.rails[rail].dev;
                    let why = format!("posting an RDMA operation on {dev}: {}", e.error);
                    self.fail_peer(peer, why);
                }
            }
        }
    }

    /// Makes sure operation `tok` with `peer` no longer touches its local buffer: the
    /// peer's QPs go to the error state (an RDMA operation cannot be recalled otherwise —
    /// the core quiesces only when it gives up on the peer) and the flushed completion is
    /// awaited.
    pub fn quiesce(&mut self, peer: u32, tok: u64) {
        let ids: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, o)| o.peer == peer && o.tok == tok)
            .map(|(&i, _)| i)
            .collect();
        if ids.is_empty() {
            return;
        }
        for id in &ids {
            if let Some(o) = self.ops.get_mut(id) {
                o.cancelled = true;
            }
        }
        if self.peers[peer as usize].lost.is_none() {
            self.fail_peer(peer, "the protocol gave up on this rank".into());
        }
        // Completions already polled come first, in the order they were polled.
        while let Some(w) = self.wcs.pop() {
            self.stash.push_back(w);
        }
        let mine = |wc: &WorkCompletion| {
            wr_parts(wc.wr_id).0 == WR_OP && ids.contains(&(wc.wr_id & !(0xff << 56)))
        };
        let (done, rest): (Vec<_>, Vec<_>) = self.stash.drain(..).partition(|w| mine(w));
        self.stash = rest.into();
        for wc in done {
            self.op_piece_done(wc.wr_id & !(0xff << 56), None);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while ids
            .iter()
            .any(|i| self.ops.get(i).is_some_and(|o| o.posted))
        {
            let mut got = Vec::new();
            let polled: Result<usize, VerbsError> = self
                .rails
                .iter()
                .try_fold(0, |n, r| Ok(n + self.v.poll_cq(r.cq, 64, &mut got)?));
            match polled {
                Ok(0) if std::time::Instant::now() > deadline => {
                    rcomm_runtime::rlog!(
                        Warn,
                        "NET",
                        "ib: an RDMA operation with rank {peer} did not flush within 10 s"
                    );
                    break;
                }
                Ok(0) => std::thread::yield_now(),
                Ok(_) => {
                    for wc in got {
                        if mine(&wc) {
                            self.op_piece_done(wc.wr_id & !(0xff << 56), None);
                        } else {
                            self.stash.push_back(wc);
                        }
                    }
                }
                Err(_) => break,
            }
        }
        for id in ids {
            if let Some(op) = self.ops.remove(&id) {
                self.release_mr(self.rail_of(usize::from(op.qp)), op.local, op.kind);
            }
        }
    }

    /// One piece of operation `id` completed (`out`: report the whole operation's end).
    fn op_piece_done(&mut self, id: u64, out: Option<(&mut dyn Deliver, Result<(), String>)>) {
        let Some(op) = self.ops.get_mut(&id) else {
            return;
        };
        op.pieces_left = op.pieces_left.saturating_sub(1);
        let failed = out.as_ref().is_some_and(|(_, r)| r.is_err());
        if op.pieces_left > 0 && !failed {
            return;
        }
        let op = self.ops.remove(&id).expect("present");
        self.release_mr(self.rail_of(usize::from(op.qp)), op.local, op.kind);
        if let Some((d, res)) = out
            && !op.cancelled
        {
            d.completed(
                op.peer,
                op.tok,
                res.map_err(|why| Self::lost_err(op.peer, &why)),
            );
        }
    }

    /// The peer is gone: its QPs to error (no more DMA for it), its error queued once.
    fn fail_peer(&mut self, peer: u32, why: String) {
        let pe = &mut self.peers[peer as usize];
        if pe.lost.is_some() {
            return;
        }
        rcomm_runtime::rlog!(Info, "NET", "ib: rank {peer} lost: {why}");
        pe.lost = Some(why.clone());
        for &qp in &pe.qps {
            let _ = self.v.modify_qp(qp, &QpModify::Err);
        }
        self.failed.push_back(Self::lost_err(peer, &why));
    }

    /// Handles completions and async events: deliveries, credits, finished operations,
    /// failures. Returns how many were delivered; a peer's failure is returned after the
    /// others were handled.
    pub fn progress(
        &mut self,
        budget: usize,
        out: &mut dyn Deliver,
    ) -> Result<usize, TransportError> {
        let mut n = 0;
        self.post_backlog();
        while n < budget.max(1) {
            let wc = match self.stash.pop_front() {
                Some(w) => w,
                None => {
                    if self.wcs.is_empty() {
                        let mut got = std::mem::take(&mut self.wcs);
                        for r in &self.rails {
                            self.v
                                .poll_cq(r.cq, 64, &mut got)
                                .map_err(|e| verr("polling the completion queue", e))?;
                        }
                        got.reverse();
                        self.wcs = got;
                    }
                    match self.wcs.pop() {
                        Some(w) => w,
                        None => break,
                    }
                }
            };
            n += self.completion(wc, out);
        }
        self.passes = self.passes.wrapping_add(1);
        if self.events_due.replace(false) || self.passes.is_multiple_of(EVENT_PASSES) {
            self.async_events()?;
        }
        self.return_credits();
        self.post_backlog();
        match self.failed.pop_front() {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    fn completion(&mut self, wc: WorkCompletion, out: &mut dyn Deliver) -> usize {
        let (kind, peer, k, slot) = wr_parts(wc.wr_id);
        let peer = if kind == WR_OP {
            match self.ops.get(&(wc.wr_id & !(0xff << 56))) {
                Some(o) => o.peer,
                None => return 0,
            }
        } else {
            peer
        };
        let Some(pe) = self.peers.get_mut(peer as usize) else {
            return 0;
        };
        if (kind == WR_EAGER || kind == WR_CREDIT)
            && let Some(o) = pe.outstanding.get_mut(usize::from(k))
        {
            // Op completions name their QP through the op (below); these in the id.
            *o = o.saturating_sub(1);
        }
        if wc.status != WcStatus::Success {
            let j = match kind {
                WR_OP => self
                    .ops
                    .get(&(wc.wr_id & !(0xff << 56)))
                    .map_or(0, |o| usize::from(o.qp)),
                _ => usize::from(k),
            };
            let r = &self.rails[self.rail_of(j)];
            let why = format!(
                "{} on {} port {} (QP {:#x} to rank {peer}): {:?}",
                status_meaning(wc.status),
                r.dev,
                r.port,
                wc.qp_num,
                wc.status
            );
            if kind == WR_OP {
                let id = wc.wr_id & !(0xff << 56);
                // A refused key or buffer is this operation's own failure, reported with it;
                // anything else is the connection's, reported as the peer's loss (below).
                let own = matches!(
                    wc.status,
                    WcStatus::RemAccessErr
                        | WcStatus::LocProtErr
                        | WcStatus::RemInvReqErr
                        | WcStatus::LocLenErr
                );
                if let Some(o) = self.ops.get_mut(&id) {
                    o.cancelled |= !own;
                    let q = usize::from(o.qp);
                    let o2 = &mut self.peers[peer as usize].outstanding[q];
                    *o2 = o2.saturating_sub(1);
                }
                self.op_piece_done(id, Some((out, Err(why.clone()))));
            }
            if wc.status != WcStatus::WrFlushErr || self.peers[peer as usize].lost.is_none() {
                self.fail_peer(peer, why);
            }
            return 1;
        }
        match kind {
            WR_EAGER => {
                if let Some(b) = pe.busy.get_mut(usize::from(slot)) {
                    *b = false;
                }
                0
            }
            WR_CREDIT => 0,
            WR_OP => {
                let id = wc.wr_id & !(0xff << 56);
                if let Some(o) = self.ops.get(&id) {
                    let q = usize::from(o.qp);
                    let o2 = &mut self.peers[peer as usize].outstanding[q];
                    *o2 = o2.saturating_sub(1);
                }
                self.op_piece_done(id, Some((out, Ok(()))));
                1
            }
            WR_RECV => self.arrival(peer, k, wc, out),
            _ => 0,
        }
    }

    fn arrival(&mut self, peer: u32, k: u8, wc: WorkCompletion, out: &mut dyn Deliver) -> usize {
        let qp = self.peers[peer as usize].qps[usize::from(k)];
        let repost = RecvWr {
            wr_id: wr_id(WR_RECV, peer, k, 0),
            sg: &[],
        };
        if let Err(e) = self.v.post_recv(qp, &[repost]) {
            self.fail_peer(peer, format!("reposting a receive: {}", e.error));
            return 0;
        }
        let Some(imm) = wc.imm_data else {
            self.fail_peer(peer, "a SEND arrived; the ib protocol sends none".into());
            return 0;
        };
        let slots = u32::from(self.p.slots);
        let pe = &mut self.peers[peer as usize];
        pe.credits = (pe.credits + ((imm >> 16) & IMM_MAX_CREDITS)).min(slots);
        if imm & IMM_CREDIT_ONLY != 0 {
            return 0;
        }
        let slot = imm & 0xffff;
        if slot >= slots {
            self.fail_peer(peer, format!("immediate names slot {slot} of {slots}"));
            return 0;
        }
        let sb = self.p.slot_bytes as usize;
        let off = (peer as usize * slots as usize + slot as usize) * sb;
        // SAFETY: the slot lies inside `ring`; the peer writes it again only after we hand
        // its credit back (below, after delivery), so the bytes are stable while borrowed.
        let frame = unsafe { std::slice::from_raw_parts(self.ring.ptr.add(off), sb) };
        let word = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes"));
        if word & CHUNK_BIT != 0 {
            let len = (word & !CHUNK_BIT) as usize;
            if len > sb - CHUNK_FRAME || wc.byte_len as usize != CHUNK_FRAME + len {
                let why = format!("chunk of {len} bytes in a {} byte write", wc.byte_len);
                self.fail_peer(peer, why);
                return 0;
            }
            let token = u64::from_le_bytes(frame[4..12].try_into().expect("8 bytes"));
            let offset = u64::from_le_bytes(frame[12..20].try_into().expect("8 bytes"));
            self.counters.bytes_recv += len as u64;
            let data = &frame[CHUNK_FRAME..CHUNK_FRAME + len];
            out.incoming(
                peer,
                Incoming::Chunk {
                    token,
                    offset,
                    data,
                },
            );
            self.slot_emptied(peer);
            return 1;
        }
        let len = word as usize;
        let hdr = match Header::decode(&frame[4..FRAME]) {
            Ok(h) if len <= sb - FRAME && wc.byte_len as usize == FRAME + len => h,
            Ok(_) => {
                self.fail_peer(
                    peer,
                    format!("frame of {len} bytes in a {} byte write", wc.byte_len),
                );
                return 0;
            }
            Err(e) => {
                self.fail_peer(peer, format!("bad header in slot {slot}: {e}"));
                return 0;
            }
        };
        self.counters.msgs_recv += 1;
        self.counters.bytes_recv += len as u64;
        out.incoming(peer, Incoming::Msg(&hdr, &frame[FRAME..FRAME + len]));
        self.slot_emptied(peer);
        1
    }

    /// A slot of `peer`'s ring was taken: one more credit owed; at half a ring the peer is
    /// queued for a credit-only message (a message to it may carry the credits first; the
    /// owed count only ever falls to 0, so reaching half again queues it again).
    fn slot_emptied(&mut self, peer: u32) {
        let pe = &mut self.peers[peer as usize];
        pe.owed += 1;
        if pe.owed == (u32::from(self.p.slots) / 2).max(1) {
            self.credit_owed.push(peer);
        }
    }

    /// Hands credits back alone to the peers owed half a ring (a message would have carried
    /// them otherwise): only those queued in `credit_owed`, so a pass costs nothing per idle
    /// peer.
    fn return_credits(&mut self) {
        if self.credit_owed.is_empty() {
            return;
        }
        let max_send = u32::from(self.p.slots) + SPARE_RECVS + RDMA_PER_QP;
        let mut waiting = Vec::new();
        for peer in std::mem::take(&mut self.credit_owed) {
            let k = self.peers[peer as usize].rr;
            let rail = self.rail_of(k);
            let pe = &mut self.peers[peer as usize];
            if !pe.ready || pe.lost.is_some() || pe.owed == 0 {
                continue;
            }
            if pe.outstanding[k] >= max_send {
                waiting.push(peer);
                continue;
            }
            let give = pe.owed.min(IMM_MAX_CREDITS);
            let wr = SendWr {
                wr_id: wr_id(WR_CREDIT, peer, k as u8, 0),
                op: SendOp::RdmaWriteImm {
                    remote_addr: pe.ring_addr,
                    rkey: pe.ring_rkeys[rail],
                    imm: IMM_CREDIT_ONLY | (give << 16),
                },
                sg: &[],
                signaled: true,
            };
            match self.v.post_send(pe.qps[k], &[wr]) {
                Ok(()) => {
                    let pe = &mut self.peers[peer as usize];
                    pe.owed -= give;
                    pe.outstanding[k] += 1;
                }
                Err(e) => {
                    let dev = &self.rails[rail].dev;
                    let why = format!("posting credits on {dev}: {}", e.error);
                    self.fail_peer(peer, why);
                }
            }
        }
        self.credit_owed = waiting;
    }

    fn async_events(&mut self) -> Result<(), TransportError> {
        for rail in 0..self.rails.len() {
            loop {
                let r = &self.rails[rail];
                let ev = match self.v.get_async_event(r.ctx) {
                    Ok(Some(e)) => e,
                    Ok(None) => break,
                    Err(e) => return Err(verr("reading async events", e)),
                };
                let everyone = |why: String| -> Vec<(u32, String)> {
                    (0..self.peers.len() as u32)
                        .filter(|&p| p != self.me)
                        .map(|p| (p, why.clone()))
                        .collect()
                };
                // Any rail failing fails every peer: messages of a peer spread over all rails,
                // and MPI order cannot be kept by dropping one (NCCL fails the same way).
                let lost: Vec<(u32, String)> = match ev {
                    AsyncEvent::PortActive { .. } => Vec::new(),
                    AsyncEvent::PortErr { port } if port == r.port => {
                        everyone(format!("{} port {port} went down", r.dev))
                    }
                    AsyncEvent::PortErr { .. } => Vec::new(),
                    AsyncEvent::DeviceFatal => everyone(format!("device {} failed", r.dev)),
                    AsyncEvent::CqErr { .. } => everyone(format!(
                        "the completion queue on {} overran: completions were lost",
                        r.dev
                    )),
                    AsyncEvent::QpFatal { qpn } | AsyncEvent::QpAccessErr { qpn } => {
                        match self.by_qpn.get(&(rail, qpn)) {
                            Some(&p) => vec![(
                                p,
                                format!(
                                    "QP {qpn:#x} on {} went to error ({})",
                                    r.dev,
                                    if matches!(ev, AsyncEvent::QpAccessErr { .. }) {
                                        "a request from the peer violated its access"
                                    } else {
                                        "fatal QP event"
                                    }
                                ),
                            )],
                            None => Vec::new(),
                        }
                    }
                };
                for (p, why) in lost {
                    if self.peers[p as usize].ready {
                        self.fail_peer(p, why);
                    }
                }
            }
        }
        Ok(())
    }

    /// Before a rank sleeps: every rail's CQ is armed, so the next completion wakes it (the
    /// caller progresses once more after this, catching what came before).
    pub fn arm(&self) {
        self.events_due.set(true);
        for r in &self.rails {
            if let Err(e) = self.v.arm_cq(r.cq) {
                rcomm_runtime::rlog!(Warn, "NET", "ib: cannot arm the CQ on {}: {e}", r.dev);
            }
        }
    }

    /// The completion channels' and the async events' descriptors, for a sleeping rank.
    pub fn wait_fds(&self, set: &mut rcomm_runtime::os::PollSet) {
        for r in &self.rails {
            for fd in self.v.event_fds(r.ctx, r.cq).into_iter().flatten() {
                set.read(fd);
            }
        }
    }
}

impl<V: Verbs> Drop for IbEndpoint<V> {
    fn drop(&mut self) {
        for pe in &self.peers {
            for &qp in &pe.qps {
                let _ = self.v.modify_qp(qp, &QpModify::Err);
                let _ = self.v.destroy_qp(qp);
            }
        }
        for r in std::mem::take(&mut self.rails) {
            Self::close_rail(&self.v, r);
        }
    }
}
