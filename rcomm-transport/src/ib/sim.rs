//! A simulated RDMA fabric with libibverbs' RC semantics, driven by explicit time.
//!
//! Several HCAs (each with ports and a GID table) hang off one [`SimFabric`]; each simulated
//! host sees some of them through a [`SimVerbs`] handle, which implements [`Verbs`]. Nothing
//! moves until the test calls [`SimFabric::step`] (or `advance`/`run`), so tests decide the
//! interleaving. Memory is this process's memory: registered ranges are read and written with
//! real copies, so protocols tested here move real data.
//!
//! The model, per step:
//! * every QP in RTS whose oldest unfinished send is due makes one attempt at it (QPs in
//!   creation order, or shuffled by the seed: reordering happens across QPs, never within one);
//!   an attempt moves up to `packets_per_step` packets of `path_mtu` bytes;
//! * a packet reaches the peer QP when both ports are up on the same subnet, the address
//!   (LID, or GID of the same RoCE type) names the peer's port, the path MTU fits it, the QP
//!   number names a QP in RTR/RTS connected back to the sender, and the PSN is the expected
//!   one; otherwise the sender retries after its ACK timeout, `retry_cnt` times, then fails
//!   with `RetryExcErr`;
//! * RDMA operations check the rkey, the range and both the MR's and the responder QP's
//!   access per packet (so deregistration mid-transfer faults); a violation fails the request
//!   with `RemAccessErr` and puts both QPs in error (the responder gets `QpAccessErr`);
//! * SEND (at its first packet) and WRITE WITH IMM (at its last) consume a posted receive; none
//!   posted is an RNR NAK: retried after the responder's `min_rnr_timer`, `rnr_retry` times (7:
//!   for ever), then `RnrRetryExcErr`;
//! * a successful packet resets both retry counts; a failed request completes with its error
//!   (signaled or not), the QP goes to error, and everything queued or posted later is
//!   flushed (`WrFlushErr`).

use super::verbs::*;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

mod host;

/// One port of a simulated HCA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// IB or Ethernet.
    pub link_layer: LinkLayer,
    /// LID (IB).
    pub lid: u16,
    /// The GID table, index order.
    pub gids: Vec<(Gid, GidType)>,
    /// Ports reach each other only within one subnet (and one link layer).
    pub subnet: u32,
    /// Active MTU.
    pub active_mtu: Mtu,
    /// Lanes.
    pub width: u8,
    /// Lane speed.
    pub speed: LinkSpeed,
}

impl PortSpec {
    /// An HDR InfiniBand port with LID `lid` and the link-local GID derived from `guid`.
    pub fn ib(lid: u16, guid: u64, subnet: u32) -> Self {
        let mut g = [0u8; 16];
        g[..2].copy_from_slice(&[0xfe, 0x80]);
        g[8..].copy_from_slice(&guid.to_be_bytes());
        Self {
            link_layer: LinkLayer::InfiniBand,
            lid,
            gids: vec![(Gid(g), GidType::IbRoceV1)],
            subnet,
            active_mtu: Mtu::M4096,
            width: 4,
            speed: LinkSpeed::Hdr,
        }
    }

    /// A RoCE port with IPv4 address `ip`, its table laid out as mlx5 does: link-local v1 and
    /// v2 at 0 and 1, the IPv4-mapped GID as v1 and v2 at 2 and 3.
    pub fn roce(ip: std::net::Ipv4Addr, guid: u64, subnet: u32) -> Self {
        let mut ll = [0u8; 16];
        ll[..2].copy_from_slice(&[0xfe, 0x80]);
        ll[8..].copy_from_slice(&guid.to_be_bytes());
        let v4 = Gid::from_ipv4(ip);
        Self {
            link_layer: LinkLayer::Ethernet,
            lid: 0,
            gids: vec![
                (Gid(ll), GidType::IbRoceV1),
                (Gid(ll), GidType::RoceV2),
                (v4, GidType::IbRoceV1),
                (v4, GidType::RoceV2),
            ],
            subnet,
            active_mtu: Mtu::M1024,
            width: 4,
            speed: LinkSpeed::Edr,
        }
    }
}

/// A simulated HCA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaSpec {
    /// Device name (`mlx5_0`); unique on the fabric.
    pub name: String,
    /// Node GUID.
    pub node_guid: u64,
    /// Ports 1, 2, …
    pub ports: Vec<PortSpec>,
}

/// How the fabric behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    /// Shuffle the order in which QPs act within a step (seeded, reproducible).
    pub seed: Option<u64>,
    /// Packets one QP moves per step (0: a whole request per step).
    pub packets_per_step: u32,
    /// Virtual nanoseconds one step takes.
    pub step_ns: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            seed: None,
            packets_per_step: 0,
            step_ns: 1_000,
        }
    }
}

/// Limits every simulated device reports.
const MAX_QP_WR: u32 = 16_384;
const MAX_SGE: u32 = 30;
const MAX_CQE: u32 = 1 << 22;
/// Largest message, as IB's 2^31.
const MAX_MSG: u64 = 1 << 31;
const PSN_MASK: u32 = (1 << 24) - 1;

/// The fabric: every HCA, every object, the virtual clock.
#[derive(Clone)]
pub struct SimFabric {
    inner: Arc<Mutex<State>>,
}

/// One simulated host's view: the devices it sees on the fabric.
#[derive(Clone)]
pub struct SimVerbs {
    fabric: SimFabric,
    visible: Vec<usize>,
}

struct Hca {
    spec: HcaSpec,
    alive: bool,
    up: Vec<bool>,
    next_qpn: u32,
    next_key: u32,
}

struct CtxObj {
    hca: usize,
    events: VecDeque<AsyncEvent>,
}

struct PdObj {
    ctx: u32,
}

struct MrObj {
    pd: u32,
    hca: usize,
    addr: u64,
    len: u64,
    access: Access,
}

struct CqObj {
    ctx: u32,
    cap: usize,
    q: VecDeque<WorkCompletion>,
    overrun: bool,
}

struct SendJob {
    wr_id: u64,
    op: SendOp,
    sg: Vec<Sge>,
    signaled: bool,
    len: u64,
    done: u64,
    retries: u32,
    rnr: u32,
    /// When the next attempt may run; `None`: never (infinite ACK timeout).
    due: Option<u64>,
}

struct RecvJob {
    wr_id: u64,
    sg: Vec<Sge>,
}

struct QpObj {
    ctx: u32,
    hca: usize,
    pd: u32,
    qpn: u32,
    send_cq: u32,
    recv_cq: u32,
    cap: QpCap,
    state: QpState,
    init: Option<InitAttr>,
    rtr: Option<RtrAttr>,
    rts: Option<RtsAttr>,
    sq: VecDeque<SendJob>,
    rq: VecDeque<RecvJob>,
    /// The receive an incoming multi-packet SEND is filling.
    inbound: Option<RecvJob>,
    sq_psn: u32,
    rq_psn: u32,
}

struct State {
    cfg: SimConfig,
    now: u64,
    rng: u64,
    next_id: u32,
    hcas: Vec<Hca>,
    ctxs: BTreeMap<u32, CtxObj>,
    pds: BTreeMap<u32, PdObj>,
    mrs: BTreeMap<u32, MrObj>,
    lkeys: BTreeMap<(usize, u32), u32>,
    rkeys: BTreeMap<(usize, u32), u32>,
    cqs: BTreeMap<u32, CqObj>,
    qps: BTreeMap<u32, QpObj>,
}

/// Why a packet did not get through.
enum Fail {
    /// Nobody answered: retry after the ACK timeout.
    Silent,
    /// The responder had no receive.
    Rnr(u8),
    /// The request completes with this status at the requester; the responder QP (if named)
    /// goes to error too, with this async event (if any).
    Fatal(WcStatus, Option<(u32, Option<AsyncEvent>)>),
}

impl SimFabric {
    /// An empty fabric.
    pub fn new(cfg: SimConfig) -> Self {
        let state = State {
            cfg,
            now: 0,
            rng: cfg.seed.unwrap_or(0) ^ 0x9e37_79b9_7f4a_7c15,
            next_id: 1,
            hcas: Vec::new(),
            ctxs: BTreeMap::new(),
            pds: BTreeMap::new(),
            mrs: BTreeMap::new(),
            lkeys: BTreeMap::new(),
            rkeys: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
        };
        Self {
            inner: Arc::new(Mutex::new(state)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves a consistent-enough state for a test to report.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Attaches an HCA, its ports up.
    pub fn add_hca(&self, spec: HcaSpec) {
        let mut s = self.lock();
        assert!(
            s.hcas.iter().all(|h| h.spec.name != spec.name),
            "HCA {} twice",
            spec.name
        );
        let n = s.hcas.len() as u32;
        s.hcas.push(Hca {
            up: vec![true; spec.ports.len()],
            spec,
            alive: true,
            // Distinct QP numbers across HCAs make mixed-up connection blobs fail visibly.
            next_qpn: 0x100 + n * 0x1000,
            next_key: 0x10 + n * 0x10_0000,
        });
    }

    /// The view of a host that sees the HCAs named (in that order).
    pub fn host(&self, names: &[&str]) -> SimVerbs {
        let s = self.lock();
        let visible = names
            .iter()
            .map(|n| {
                s.hcas
                    .iter()
                    .position(|h| h.spec.name == *n)
                    .unwrap_or_else(|| panic!("no HCA {n}"))
            })
            .collect();
        SimVerbs {
            fabric: self.clone(),
            visible,
        }
    }

    /// Runs one step (see the module notes); `false` when nothing was due or waiting.
    pub fn step(&self) -> bool {
        self.lock().step()
    }

    /// Steps until nothing is left to do or `max_steps` ran; returns the steps run.
    pub fn run(&self, max_steps: usize) -> usize {
        let mut s = self.lock();
        let mut n = 0;
        while n < max_steps && s.step() {
            n += 1;
        }
        n
    }

    /// Runs every step due within the next `ns` virtual nanoseconds, then sets the clock there.
    pub fn advance(&self, ns: u64) {
        let mut s = self.lock();
        let end = s.now.saturating_add(ns);
        while s.next_due().is_some_and(|t| t <= end) && s.now <= end {
            s.step();
        }
        s.now = s.now.max(end);
    }

    /// The virtual clock.
    pub fn now_ns(&self) -> u64 {
        self.lock().now
    }

    /// Kills an HCA: its ports go down, its QPs to error (flushed), its contexts get
    /// `DeviceFatal`, and peers stop hearing from it.
    pub fn kill_hca(&self, name: &str) {
        let mut s = self.lock();
        let h = s.hca_index(name);
        s.hcas[h].alive = false;
        s.hcas[h].up.iter_mut().for_each(|u| *u = false);
        s.event(h, AsyncEvent::DeviceFatal);
        let qps: Vec<u32> = s
            .qps
            .iter()
            .filter(|(_, q)| q.hca == h)
            .map(|(&i, _)| i)
            .collect();
        for q in qps {
            s.set_err(q);
        }
    }

    /// Takes a port down or brings it up; the HCA's contexts get `PortErr`/`PortActive`.
    pub fn set_port(&self, name: &str, port: u8, up: bool) {
        let mut s = self.lock();
        let h = s.hca_index(name);
        let p = usize::from(port) - 1;
        if s.hcas[h].up[p] != up && s.hcas[h].alive {
            s.hcas[h].up[p] = up;
            let ev = if up {
                AsyncEvent::PortActive { port }
            } else {
                AsyncEvent::PortErr { port }
            };
            s.event(h, ev);
        }
    }
}

impl State {
    fn hca_index(&self, name: &str) -> usize {
        self.hcas
            .iter()
            .position(|h| h.spec.name == name)
            .unwrap_or_else(|| panic!("no HCA {name}"))
    }

    fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    fn event(&mut self, hca: usize, ev: AsyncEvent) {
        for c in self.ctxs.values_mut().filter(|c| c.hca == hca) {
            c.events.push_back(ev);
        }
    }

    fn ctx_event(&mut self, ctx: u32, ev: AsyncEvent) {
        if let Some(c) = self.ctxs.get_mut(&ctx) {
            c.events.push_back(ev);
        }
    }

    fn rand(&mut self) -> u64 {
        // splitmix64: small, seedable, reproducible everywhere.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next_due(&self) -> Option<u64> {
        self.qps
            .values()
            .filter(|q| q.state == QpState::Rts)
            .filter_map(|q| q.sq.front().and_then(|j| j.due))
            .min()
    }

    fn step(&mut self) -> bool {
        let Some(t) = self.next_due() else {
            return false;
        };
        self.now = self.now.max(t);
        let now = self.now;
        let mut ids: Vec<u32> = self
            .qps
            .iter()
            .filter(|(_, q)| q.state == QpState::Rts)
            .filter(|(_, q)| q.sq.front().and_then(|j| j.due).is_some_and(|d| d <= now))
            .map(|(&i, _)| i)
            .collect();
        if self.cfg.seed.is_some() {
            for i in (1..ids.len()).rev() {
                let j = (self.rand() % (i as u64 + 1)) as usize;
                ids.swap(i, j);
            }
        }
        for id in ids {
            self.attempt(id);
        }
        self.now += self.cfg.step_ns;
        true
    }

    /// Appends a completion; an overrun loses it, raises `CqErr` and puts the QP in error.
    fn push_cqe(&mut self, cq: u32, qp: u32, wc: WorkCompletion) {
        let Some(c) = self.cqs.get_mut(&cq) else {
            return;
        };
        if c.overrun {
            return;
        }
        if c.q.len() < c.cap {
            c.q.push_back(wc);
            return;
        }
        c.overrun = true;
        let ctx = c.ctx;
        self.ctx_event(ctx, AsyncEvent::CqErr { cq: Cq(cq) });
        if let Some(q) = self.qps.get(&qp)
            && q.state != QpState::Err
        {
            let (qctx, qpn) = (q.ctx, q.qpn);
            self.ctx_event(qctx, AsyncEvent::QpFatal { qpn });
            self.set_err(qp);
        }
    }

    fn send_wc(&mut self, qp: u32, job: &SendJob, status: WcStatus) {
        let q = &self.qps[&qp];
        let opcode = match job.op {
            SendOp::Send => WcOpcode::Send,
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteImm { .. } => WcOpcode::RdmaWrite,
            SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        };
        let wc = WorkCompletion {
            wr_id: job.wr_id,
            status,
            opcode,
            byte_len: job.len as u32,
            imm_data: None,
            qp_num: q.qpn,
        };
        let cq = q.send_cq;
        self.push_cqe(cq, qp, wc);
    }

    fn recv_wc(&mut self, qp: u32, wr_id: u64, status: WcStatus, len: u64, imm: Option<u32>) {
        let q = &self.qps[&qp];
        let wc = WorkCompletion {
            wr_id,
            status,
            opcode: if imm.is_some() {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            },
            byte_len: len as u32,
            imm_data: imm,
            qp_num: q.qpn,
        };
        let cq = q.recv_cq;
        self.push_cqe(cq, qp, wc);
    }

    /// Puts a QP in error and flushes all its work, sends first.
    fn set_err(&mut self, qp: u32) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        if q.state == QpState::Err {
            return;
        }
        q.state = QpState::Err;
        let sq: Vec<SendJob> = q.sq.drain(..).collect();
        let mut rq: Vec<RecvJob> = q.inbound.take().into_iter().collect();
        rq.extend(q.rq.drain(..));
        for j in &sq {
            self.send_wc(qp, j, WcStatus::WrFlushErr);
        }
        for r in rq {
            self.recv_wc(qp, r.wr_id, WcStatus::WrFlushErr, 0, None);
        }
    }

    /// Fails the QP's oldest send with `status` (a completion whether signaled or not), then
    /// puts the QP in error.
    fn fail_head(&mut self, qp: u32, status: WcStatus) {
        let Some(job) = self.qps.get_mut(&qp).and_then(|q| q.sq.pop_front()) else {
            return;
        };
        self.send_wc(qp, &job, status);
        self.set_err(qp);
    }

    /// Whether `len` bytes at `addr` lie in an MR of `pd` on `hca` keyed `key` with `need`.
    fn covered(
        &self,
        remote: bool,
        hca: usize,
        pd: u32,
        key: u32,
        (addr, len): (u64, u64),
        need: Access,
    ) -> bool {
        let keys = if remote { &self.rkeys } else { &self.lkeys };
        let Some(mr) = keys.get(&(hca, key)).and_then(|id| self.mrs.get(id)) else {
            return false;
        };
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        mr.pd == pd && mr.access.contains(need) && addr >= mr.addr && end <= mr.addr + mr.len
    }

    fn sges_ok(&self, hca: usize, pd: u32, sg: &[Sge], need: Access) -> bool {
        sg.iter()
            .all(|e| self.covered(false, hca, pd, e.lkey, (e.addr, u64::from(e.len)), need))
    }

    /// The QP a packet from `qp` reaches now, if any.
    fn route(&self, qp: u32) -> Option<u32> {
        let q = &self.qps[&qp];
        let (init, rtr) = (q.init?, q.rtr?);
        let h = &self.hcas[q.hca];
        let lp = usize::from(init.port) - 1;
        if !h.alive || !h.up[lp] {
            return None;
        }
        let local = &h.spec.ports[lp];
        let sentry = rtr
            .ah
            .grh
            .and_then(|g| local.gids.get(usize::from(g.sgid_index)));
        let (sgid, sgid_type) = (sentry.map(|e| e.0), sentry.map(|e| e.1));
        let (rh, rp) = self.hcas.iter().enumerate().find_map(|(hi, hca)| {
            if !hca.alive {
                return None;
            }
            hca.spec.ports.iter().enumerate().find_map(|(pi, p)| {
                let same_net =
                    hca.up[pi] && p.subnet == local.subnet && p.link_layer == local.link_layer;
                let named = match (local.link_layer, rtr.ah.grh) {
                    // RoCE: the same GID type, and no mixing of IPv4 and IPv6.
                    (LinkLayer::Ethernet, Some(g)) => {
                        sgid.is_some_and(|s| s.ipv4().is_some() == g.dgid.ipv4().is_some())
                            && p.gids
                                .iter()
                                .any(|&(gid, t)| gid == g.dgid && Some(t) == sgid_type)
                    }
                    (LinkLayer::Ethernet, None) => false,
                    (LinkLayer::InfiniBand, Some(g)) => {
                        p.gids.iter().any(|&(gid, _)| gid == g.dgid)
                    }
                    (LinkLayer::InfiniBand, None) => p.lid == rtr.ah.dlid && p.lid != 0,
                };
                (same_net && named && rtr.path_mtu <= p.active_mtu).then_some((hi, pi as u8 + 1))
            })
        })?;
        let (&rid, r) = self.qps.iter().find(|(_, r)| {
            r.hca == rh
                && r.qpn == rtr.dest_qpn
                && matches!(r.state, QpState::Rtr | QpState::Rts)
                && r.init.is_some_and(|i| i.port == rp)
                && r.rtr.is_some_and(|x| x.dest_qpn == q.qpn)
        })?;
        (r.rq_psn == q.sq_psn).then_some(rid)
    }

    /// One attempt at the oldest send of `qp` (see the module notes).
    fn attempt(&mut self, qp: u32) {
        let now = self.now;
        let Some(q) = self.qps.get(&qp) else { return };
        let due = q.sq.front().and_then(|j| j.due).is_some_and(|d| d <= now);
        if q.state != QpState::Rts || !due {
            return;
        }
        let (hca, pd) = (q.hca, q.pd);
        let head = &q.sq[0];
        let need = match head.op {
            SendOp::RdmaRead { .. } => Access::LOCAL_WRITE,
            _ => Access::NONE,
        };
        if !self.sges_ok(hca, pd, &head.sg, need) {
            return self.fail_head(qp, WcStatus::LocProtErr);
        }
        let budget = match self.cfg.packets_per_step {
            0 => u32::MAX,
            n => n,
        };
        let mut sent = 0u32;
        loop {
            let q = &self.qps[&qp];
            let job = &q.sq[0];
            if sent == budget || (sent > 0 && job.done >= job.len) {
                break;
            }
            let Some(r) = self.route(qp) else {
                return self.retry(qp, Fail::Silent);
            };
            let mtu = u64::from(q.rtr.map_or(256, |a| a.path_mtu.bytes()));
            match self.packet(qp, r, mtu) {
                Ok(()) => sent += 1,
                Err(f) => return self.retry(qp, f),
            }
        }
        let q = self.qps.get_mut(&qp).expect("qp");
        if q.sq[0].done >= q.sq[0].len {
            let job = q.sq.pop_front().expect("head");
            if job.signaled {
                self.send_wc(qp, &job, WcStatus::Success);
            }
        } else {
            q.sq[0].due = Some(now);
        }
    }

    /// After a failed packet: retry later, or fail the request.
    fn retry(&mut self, qp: u32, f: Fail) {
        let now = self.now;
        let q = self.qps.get_mut(&qp).expect("qp");
        let rts = q.rts.expect("rts");
        let job = q.sq.front_mut().expect("head");
        match f {
            Fail::Silent => {
                job.retries += 1;
                if job.retries > u32::from(rts.retry_cnt) {
                    return self.fail_head(qp, WcStatus::RetryExcErr);
                }
                job.due = ack_timeout_ns(rts.timeout).map(|t| now + t);
            }
            Fail::Rnr(timer) => {
                job.rnr += 1;
                if rts.rnr_retry != 7 && job.rnr > u32::from(rts.rnr_retry) {
                    return self.fail_head(qp, WcStatus::RnrRetryExcErr);
                }
                job.due = Some(now + rnr_timer_ns(timer));
            }
            Fail::Fatal(st, responder) => {
                if let Some((r, ev)) = responder {
                    if let Some(ev) = ev {
                        let ctx = self.qps[&r].ctx;
                        self.ctx_event(ctx, ev);
                    }
                    self.set_err(r);
                }
                self.fail_head(qp, st);
            }
        }
    }

    /// Moves the next packet of `qp`'s oldest send to QP `r`.
    fn packet(&mut self, qp: u32, r: u32, mtu: u64) -> std::result::Result<(), Fail> {
        let q = &self.qps[&qp];
        let job = &q.sq[0];
        let (off, len) = (job.done, job.len);
        let n = mtu.min(len - off);
        let last = off + n == len;
        let rq = &self.qps[&r];
        let (rhca, rpd, raccess, rqpn) = (
            rq.hca,
            rq.pd,
            rq.init.map_or(Access::NONE, |i| i.access),
            rq.qpn,
        );
        let rnr_timer = rq.rtr.map_or(0, |a| a.min_rnr_timer);
        let access_fault = Fail::Fatal(
            WcStatus::RemAccessErr,
            Some((r, Some(AsyncEvent::QpAccessErr { qpn: rqpn }))),
        );
        match job.op {
            SendOp::RdmaWrite { remote_addr, rkey }
            | SendOp::RdmaWriteImm {
                remote_addr, rkey, ..
            } => {
                let imm = match job.op {
                    SendOp::RdmaWriteImm { imm, .. } => Some(imm),
                    _ => None,
                };
                let dst = remote_addr.saturating_add(off);
                if !raccess.contains(Access::REMOTE_WRITE)
                    || !self.covered(true, rhca, rpd, rkey, (dst, n), Access::REMOTE_WRITE)
                {
                    return Err(access_fault);
                }
                if imm.is_some() && last && self.qps[&r].rq.is_empty() {
                    return Err(Fail::Rnr(rnr_timer));
                }
                let data = gather(&job.sg, off, n);
                // SAFETY: [dst, dst+n) lies in a live MR registered for remote write (checked
                // above); reg_mr's contract makes it valid for the device to write.
                unsafe { write_at(dst, &data) };
                if let (Some(imm), true) = (imm, last) {
                    let recv = self
                        .qps
                        .get_mut(&r)
                        .expect("qp")
                        .rq
                        .pop_front()
                        .expect("recv");
                    self.recv_wc(r, recv.wr_id, WcStatus::Success, len, Some(imm));
                }
            }
            SendOp::RdmaRead { remote_addr, rkey } => {
                let src = remote_addr.saturating_add(off);
                if !raccess.contains(Access::REMOTE_READ)
                    || !self.covered(true, rhca, rpd, rkey, (src, n), Access::REMOTE_READ)
                {
                    return Err(access_fault);
                }
                // SAFETY: [src, src+n) lies in a live MR registered for remote read.
                let data = unsafe { read_at(src, n) };
                scatter(&job.sg, off, &data);
            }
            SendOp::Send => {
                if off == 0 {
                    let Some(recv) = self.qps.get_mut(&r).expect("qp").rq.pop_front() else {
                        return Err(Fail::Rnr(rnr_timer));
                    };
                    let room: u64 = recv.sg.iter().map(|e| u64::from(e.len)).sum();
                    let (wr_id, bad) = (
                        recv.wr_id,
                        !self.sges_ok(rhca, rpd, &recv.sg, Access::LOCAL_WRITE),
                    );
                    let status = if bad {
                        Some((WcStatus::LocProtErr, WcStatus::RemOpErr))
                    } else if room < len {
                        Some((WcStatus::LocLenErr, WcStatus::RemInvReqErr))
                    } else {
                        self.qps.get_mut(&r).expect("qp").inbound = Some(recv);
                        None
                    };
                    if let Some((theirs, ours)) = status {
                        self.recv_wc(r, wr_id, theirs, len, None);
                        return Err(Fail::Fatal(ours, Some((r, None))));
                    }
                }
                let sg = self.qps[&r]
                    .inbound
                    .as_ref()
                    .map(|i| i.sg.clone())
                    .unwrap_or_default();
                if !self.sges_ok(rhca, rpd, &sg, Access::LOCAL_WRITE) {
                    let recv = self
                        .qps
                        .get_mut(&r)
                        .expect("qp")
                        .inbound
                        .take()
                        .expect("inbound");
                    self.recv_wc(r, recv.wr_id, WcStatus::LocProtErr, len, None);
                    return Err(Fail::Fatal(WcStatus::RemOpErr, Some((r, None))));
                }
                let q = &self.qps[&qp];
                let data = gather(&q.sq[0].sg, off, n);
                scatter(&sg, off, &data);
                if last {
                    let recv = self
                        .qps
                        .get_mut(&r)
                        .expect("qp")
                        .inbound
                        .take()
                        .expect("inbound");
                    self.recv_wc(r, recv.wr_id, WcStatus::Success, len, None);
                }
            }
        }
        let q = self.qps.get_mut(&qp).expect("qp");
        q.sq_psn = (q.sq_psn + 1) & PSN_MASK;
        let job = &mut q.sq[0];
        job.done += n;
        job.retries = 0;
        job.rnr = 0;
        let r = self.qps.get_mut(&r).expect("qp");
        r.rq_psn = (r.rq_psn + 1) & PSN_MASK;
        Ok(())
    }
}

/// Reads `len` bytes at `addr`.
///
/// # Safety
/// The range must be readable (a live MR's range, by reg_mr's contract).
unsafe fn read_at(addr: u64, len: u64) -> Vec<u8> {
    let mut v = vec![0u8; len as usize];
    // SAFETY: the caller vouches for the source; `v` is a fresh buffer of `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(addr as usize as *const u8, v.as_mut_ptr(), v.len()) };
    v
}

/// Writes `data` at `addr`.
///
/// # Safety
/// The range must be writable (a live MR's range with write access, by reg_mr's contract).
unsafe fn write_at(addr: u64, data: &[u8]) {
    // SAFETY: the caller vouches for the destination; the source is a separate buffer.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as usize as *mut u8, data.len()) };
}

/// The `n` bytes at byte offset `off` of the concatenated entries. The entries were checked
/// against their MRs just before (`sges_ok`).
fn gather(sg: &[Sge], mut off: u64, n: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n as usize);
    for e in sg {
        let len = u64::from(e.len);
        if off >= len {
            off -= len;
            continue;
        }
        let take = (len - off).min(n - out.len() as u64);
        // SAFETY: inside an entry whose MR covers it (checked by the caller).
        out.extend_from_slice(&unsafe { read_at(e.addr + off, take) });
        off = 0;
        if out.len() as u64 == n {
            break;
        }
    }
    out
}

/// Writes `data` at byte offset `off` of the concatenated entries (checked for local write by
/// the caller).
fn scatter(sg: &[Sge], mut off: u64, data: &[u8]) {
    let mut rest = data;
    for e in sg {
        let len = u64::from(e.len);
        if off >= len {
            off -= len;
            continue;
        }
        let take = ((len - off) as usize).min(rest.len());
        // SAFETY: inside an entry whose MR covers it with local write (checked by the caller).
        unsafe { write_at(e.addr + off, &rest[..take]) };
        rest = &rest[take..];
        off = 0;
        if rest.is_empty() {
            break;
        }
    }
}
