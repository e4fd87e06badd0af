//! The transport table: which transport reaches each peer, the lanes it offers, and one
//! interface over all of them.
//!
//! The choice is made in one place, [`select`], a symmetric function of both peers' identities
//! and the shared settings, so two ranks always agree on how they talk; [`Net`] then fixes each
//! peer's lanes from the chosen transport's capabilities: an ordered message lane, and a bulk
//! lane per memory kind whose operations (STREAM, GET, PUT) the protocol layer in `rcomm-core`
//! chooses its rendezvous by. The transports are the arms of [`Endpoint`] (static dispatch, no
//! `dyn`); a peer's lanes name endpoints by index, so a call finds its transport by two array
//! reads.

use crate::caps::{Caps, Kinds, Ops};
use crate::error::TransportError;
use crate::mem::{MemKind, MemRef, RKey};
use crate::os::PollSet;
use crate::shmnet::{Counters, Incoming, ShmNet};
use crate::sim_ep::{SimEndpoint, SimFabric};
use crate::tcp::TcpNet;
use crate::wire::{AddrRecord, Header};

use crate::config::TransportChoice;
use crate::cuda_ep::CudaEndpoint;
use crate::ib::IbNet;

/// How one peer is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// This process.
    SelfLoop,
    /// Shared memory on this node.
    Shm,
    /// TCP.
    Tcp,
    /// The in-process simulated network (tests).
    Sim,
    /// InfiniBand / RoCE verbs (RC queue pairs).
    Ib,
}

impl Route {
    /// Short name for logs and counters.
    pub fn name(self) -> &'static str {
        match self {
            Route::SelfLoop => "self",
            Route::Shm => "shm",
            Route::Tcp => "tcp",
            Route::Sim => "sim",
            Route::Ib => "ib",
        }
    }
}

/// Whether a transport reaches between two ranks, from both address records: identities and
/// the connection blobs each transport published (`EndpointAddr`: a kind byte and bytes; a
/// transport added later publishes `EndpointAddr::Other` with its own kind).
type Reaches = fn(&AddrRecord, &AddrRecord) -> bool;

/// The transport table, in order of preference: each transport and whether it reaches a peer,
/// judged from both records alone (NCCL's `canConnect`), so the judgement is symmetric and
/// the same on both ranks. A transport added later adds its row here.
const TABLE: &[(Route, Reaches)] = &[
    (Route::Shm, crate::shmnet::can_connect),
    (Route::Ib, crate::ib::can_connect),
    (Route::Tcp, crate::tcp::can_connect),
];

/// Picks the transport between the ranks of records `ra` and `rb`: the first of the table
/// that reaches the peer and that `choice` allows. Symmetric: `select(a, b) == select(b, a)`.
pub fn select(ra: &AddrRecord, rb: &AddrRecord, choice: TransportChoice) -> Result<Route, String> {
    let (a, b) = (&ra.info, &rb.info);
    if a.same_node(b) && a.pid == b.pid {
        return Ok(Route::SelfLoop);
    }
    let allowed = |r: Route| match choice {
        TransportChoice::Auto => true,
        TransportChoice::Tcp => r == Route::Tcp,
        TransportChoice::Shm => r == Route::Shm,
        TransportChoice::Ib => r == Route::Ib,
    };
    TABLE
        .iter()
        .find(|(r, reaches)| allowed(*r) && reaches(ra, rb))
        .map(|(r, _)| *r)
        .ok_or_else(|| match choice {
            TransportChoice::Shm => format!(
                "RCOMM_TRANSPORT=shm, but pid {} on {} and pid {} on {} cannot share memory (other node or user); use auto or tcp",
                a.pid, a.hostname, b.pid, b.hostname
            ),
            TransportChoice::Ib => {
                let has = |r: &AddrRecord| crate::ib::blob_of(r).is_some();
                let why = |r: &AddrRecord| {
                    if has(r) {
                        "has an active RDMA port"
                    } else {
                        "has no usable RDMA device (see its log under RCOMM_DEBUG_SUBSYS=NET, or rcomm-topo)"
                    }
                };
                format!(
                    "RCOMM_TRANSPORT=ib, but pid {} on {} {} and pid {} on {} {}{}; use auto or tcp",
                    a.pid,
                    a.hostname,
                    why(ra),
                    b.pid,
                    b.hostname,
                    why(rb),
                    if has(ra) && has(rb) {
                        ", on another fabric (link layer or subnet prefix)"
                    } else {
                        ""
                    }
                )
            }
            _ => format!(
                "no transport reaches pid {} on {} from pid {} on {}",
                b.pid, b.hostname, a.pid, a.hostname
            ),
        })
}

/// Byte counters of every transport, keyed by the transport's name ([`Route::name`]), so tests
/// and tools can prove which one carried the traffic; a transport added later adds its row.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NetCounters {
    rows: Vec<(&'static str, Counters)>,
}

impl NetCounters {
    /// The counters of transport `name` (`"shm"`, `"tcp"`, …): zero for one this process does
    /// not have.
    pub fn get(&self, name: &str) -> Counters {
        self.rows
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
            .unwrap_or_default()
    }

    /// Every transport's name and counters.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, Counters)> + '_ {
        self.rows.iter().copied()
    }
}

/// One transport of a process. Every arm implements the same operations; [`Net`] dispatches
/// by `match`, so the compiler sees every call.
#[derive(Debug)]
pub enum Endpoint {
    /// Shared memory with the peers on this node.
    Shm(ShmNet),
    /// TCP.
    Tcp(TcpNet),
    /// The simulated network of a test.
    Sim(SimEndpoint),
    /// InfiniBand / RoCE verbs (or the simulated verbs fabric of a test).
    Ib(Box<IbNet>),
}

impl Endpoint {
    /// The transport's name (its counters' key).
    pub fn name(&self) -> &'static str {
        self.route().name()
    }

    fn route(&self) -> Route {
        match self {
            Endpoint::Shm(_) => Route::Shm,
            Endpoint::Tcp(_) => Route::Tcp,
            Endpoint::Sim(_) => Route::Sim,
            Endpoint::Ib(_) => Route::Ib,
        }
    }

    /// What it offers.
    pub fn caps(&self) -> Caps {
        match self {
            Endpoint::Shm(s) => s.caps(),
            Endpoint::Tcp(t) => t.caps(),
            Endpoint::Sim(s) => s.caps(),
            Endpoint::Ib(i) => i.caps(),
        }
    }

    fn counters(&self) -> Counters {
        match self {
            Endpoint::Shm(s) => s.counters(),
            Endpoint::Tcp(t) => t.counters(),
            Endpoint::Sim(s) => s.counters(),
            Endpoint::Ib(i) => i.counters(),
        }
    }

    fn try_send(
        &mut self,
        peer: u32,
        hdr: &Header,
        payload: &[u8],
    ) -> Result<bool, TransportError> {
        match self {
            Endpoint::Shm(s) => s.try_send(peer, hdr, payload),
            Endpoint::Tcp(t) => t.try_send(peer, hdr, payload),
            Endpoint::Sim(s) => s.try_send(peer, hdr, payload),
            Endpoint::Ib(i) => i.try_send(peer, hdr, payload),
        }
    }

    fn send_chunk(
        &mut self,
        peer: u32,
        token: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, TransportError> {
        match self {
            Endpoint::Shm(s) => s.send_chunk(peer, token, offset, data),
            Endpoint::Tcp(t) => t.send_chunk(peer, token, offset, data),
            Endpoint::Sim(s) => s.send_chunk(peer, token, offset, data),
            Endpoint::Ib(i) => i.send_chunk(peer, token, offset, data),
        }
    }

    fn progress(&mut self, budget: usize, out: &mut dyn Deliver) -> Result<usize, TransportError> {
        match self {
            Endpoint::Shm(s) => s.progress(budget, &mut |peer, inc| out.incoming(peer, inc)),
            Endpoint::Tcp(t) => t.progress(out),
            Endpoint::Sim(s) => s.progress(budget, out),
            Endpoint::Ib(i) => i.progress(budget, out),
        }
    }

    fn wait_fds(&self, set: &mut PollSet) {
        match self {
            Endpoint::Shm(s) => s.wait_fds(set),
            Endpoint::Tcp(t) => t.wait_fds(set),
            Endpoint::Ib(i) => i.wait_fds(set),
            Endpoint::Sim(_) => {}
        }
    }
}

/// No endpoint (a lane this peer does not have).
const NO_EP: u8 = u8::MAX;

/// The lanes to one peer, fixed when the table is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lanes {
    /// The transport chosen by [`select`].
    pub route: Route,
    /// Endpoint of the ordered message lane.
    msg: u8,
    /// Endpoint of the bulk lane for host memory.
    host: u8,
    /// Largest eager payload on the message lane.
    pub eager_limit: usize,
}

/// How an asynchronous operation went when it was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tx {
    /// Done already: the buffer is free again (a synchronous mover, such as single copy).
    Done,
    /// Under way: [`Deliver::completed`] reports it with its token.
    Pending,
}

/// Every transport of one process, and each peer's lanes.
pub struct Net {
    me: u32,
    lanes: Vec<Lanes>,
    eps: Vec<Endpoint>,
    /// Peers whose device memory the device lane may reach (on this node; on `sim` when the
    /// fabric says so). Whether a given pair of devices can copy is decided per message.
    dev_reach: Vec<bool>,
    /// The device lane, made on first use: a process that never touches device memory never
    /// loads the CUDA driver.
    dev: Option<CudaEndpoint>,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net")
            .field("me", &self.me)
            .field("lanes", &self.lanes)
            .finish()
    }
}

/// Where [`Net::progress`] hands what arrives and what completed: the protocol layer.
pub trait Deliver {
    /// A message, or a chunk of rendezvous data to copy where it belongs.
    fn incoming(&mut self, peer: u32, inc: Incoming<'_>);

    /// Where `len` bytes of `peer`'s rendezvous data for the receive `token`, at `offset` in the
    /// message, should go: exactly `len` bytes of the receive's buffer, which a transport then
    /// fills in place (TCP reads large chunks straight from the socket there). `None`: the
    /// bytes are dropped — the receive is unknown, or the chunk does not fit it, which the
    /// implementation reports as it would for [`Incoming::Chunk`].
    fn place(&mut self, peer: u32, token: u64, offset: u64, len: usize) -> Option<&mut [u8]>;

    /// `len` bytes were written in place at what [`place`](Self::place) returned.
    fn placed(&mut self, peer: u32, token: u64, offset: u64, len: usize);

    /// The asynchronous operation `tok` with `peer` ([`Net::get`], [`Net::put`]) completed:
    /// its buffer is free again.
    fn completed(&mut self, peer: u32, tok: u64, res: Result<(), TransportError>);
}

fn no_lane(peer: u32, what: &'static str) -> TransportError {
    TransportError::Unsupported {
        peer,
        op: what,
        why: "no transport lane offers it to this peer".into(),
    }
}

impl Net {
    /// Assembles the table from the route of every peer ([`select`]) and the endpoints that
    /// were set up for them: the message lane and the host-memory bulk lane of a peer are its
    /// route's endpoint (a transport added later may give a peer a bulk lane of another
    /// endpoint — RDMA beside TCP messages, CUDA IPC beside shared memory — here).
    pub fn build(
        me: u32,
        routes: Vec<Route>,
        shm: Option<ShmNet>,
        ib: Option<IbNet>,
        tcp: TcpNet,
    ) -> Self {
        let mut eps = Vec::with_capacity(3);
        if let Some(s) = shm {
            eps.push(Endpoint::Shm(s));
        }
        if let Some(i) = ib {
            eps.push(Endpoint::Ib(Box::new(i)));
        }
        eps.push(Endpoint::Tcp(tcp));
        // Device memory of a peer is reachable directly only on this node (CUDA IPC).
        let dev_reach = routes.iter().map(|r| *r == Route::Shm).collect();
        Self::assemble(me, routes, eps, dev_reach)
    }

    /// The table of rank `me` on a simulated network: every other rank over `sim`.
    pub fn sim(me: u32, fabric: &SimFabric) -> Self {
        let n = fabric.config().net.ranks as u32;
        let routes = (0..n)
            .map(|r| if r == me { Route::SelfLoop } else { Route::Sim })
            .collect();
        let dev_reach = (0..n)
            .map(|r| r != me && fabric.config().device_ipc)
            .collect();
        Self::assemble(
            me,
            routes,
            vec![Endpoint::Sim(fabric.endpoint(me))],
            dev_reach,
        )
    }

    /// The table of rank `me` whose every peer is reached over `ib` (a test on the simulated
    /// verbs fabric: the endpoint is connected to its peers already).
    pub fn ib_only(me: u32, ranks: u32, ib: IbNet) -> Self {
        let routes = (0..ranks)
            .map(|r| if r == me { Route::SelfLoop } else { Route::Ib })
            .collect();
        let dev_reach = vec![false; ranks as usize];
        Self::assemble(me, routes, vec![Endpoint::Ib(Box::new(ib))], dev_reach)
    }

    /// The `ib` endpoint's rails (device, port, bytes given to move); empty without one.
    pub fn ib_rails(&self) -> Vec<(String, u8, u64)> {
        self.eps
            .iter()
            .find_map(|e| match e {
                Endpoint::Ib(i) => Some(i.rails()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The `ib` endpoint, if this process has one.
    pub fn ib_mut(&mut self) -> Option<&mut IbNet> {
        self.eps.iter_mut().find_map(|e| match e {
            Endpoint::Ib(i) => Some(&mut **i),
            _ => None,
        })
    }

    fn assemble(me: u32, routes: Vec<Route>, eps: Vec<Endpoint>, dev_reach: Vec<bool>) -> Self {
        let lanes = routes
            .iter()
            .enumerate()
            .map(|(peer, &route)| {
                let ep = eps
                    .iter()
                    .position(|e| e.route() == route)
                    .map_or(NO_EP, |i| i as u8);
                let caps = (ep != NO_EP).then(|| eps[ep as usize].caps());
                let l = Lanes {
                    route,
                    msg: ep,
                    host: if caps.is_some_and(|c| c.kinds.host) {
                        ep
                    } else {
                        NO_EP
                    },
                    eager_limit: match route {
                        Route::SelfLoop => usize::MAX,
                        _ => caps.map_or(0, |c| c.eager_limit),
                    },
                };
                if let Some(c) = caps {
                    crate::rlog!(
                        Info,
                        "NET",
                        "rank {me} -> rank {peer}: messages over {}, host memory by {:?}, device memory by {}",
                        route.name(),
                        c.ops.without(Ops::AM),
                        if dev_reach[peer] {
                            format!(
                                "CUDA IPC where the two GPUs reach each other, else host staging over {}",
                                route.name()
                            )
                        } else {
                            format!("host staging over {}", route.name())
                        }
                    );
                }
                l
            })
            .collect();
        Self {
            me,
            lanes,
            eps,
            dev_reach,
            dev: None,
        }
    }

    /// Whether the device lane may pull `peer`'s device memory directly (CUDA IPC on this
    /// node); the device pair may still refuse, per message.
    pub fn dev_get(&self, peer: u32) -> bool {
        self.dev_reach.get(peer as usize).copied().unwrap_or(false)
            && crate::config::p2p_level() != crate::config::P2pLevel::Off
            && crate::gpu::gpu_if_present().is_some()
    }

    fn dev_ep(&mut self, peer: u32) -> Result<&mut CudaEndpoint, TransportError> {
        if !self.dev_reach.get(peer as usize).copied().unwrap_or(false) {
            return Err(no_lane(peer, "device get"));
        }
        if self.dev.is_none() {
            let g = crate::gpu::gpu().map_err(|e| TransportError::Unsupported {
                peer,
                op: "device get",
                why: e.to_string(),
            })?;
            self.dev = Some(CudaEndpoint::new(g));
        }
        Ok(self.dev.as_mut().expect("made above"))
    }

    /// The key through which `peer` pulls the device memory `m` (exported once per
    /// allocation).
    pub fn register_dev(&mut self, peer: u32, m: &MemRef) -> Result<RKey, TransportError> {
        self.dev_ep(peer)?.register(peer, m)
    }

    /// Starts pulling `peer`'s device memory named by `key` into `dst` (device or host);
    /// [`Deliver::completed`] reports `tok`. Unsupported: stage through the host instead.
    pub fn get_dev(
        &mut self,
        peer: u32,
        dst: MemRef,
        key: &RKey,
        tok: u64,
    ) -> Result<Tx, TransportError> {
        self.dev_ep(peer)?
            .get(peer, dst, key, tok)
            .map(|()| Tx::Pending)
    }

    /// Whether device copies are under way (progress must poll them even with nothing to
    /// read).
    pub fn dev_busy(&self) -> bool {
        self.dev.as_ref().is_some_and(|d| d.busy())
    }

    /// Closes the device memory imported from a lost peer.
    pub fn forget_dev_peer(&mut self, peer: u32) {
        if let Some(d) = &mut self.dev {
            d.forget_peer(peer);
        }
    }

    /// The route to `peer`.
    pub fn route(&self, peer: u32) -> Route {
        self.lanes[peer as usize].route
    }

    /// Largest eager payload to `peer` (fixed when the table was built).
    #[inline]
    pub fn eager_limit(&self, peer: u32) -> usize {
        self.lanes[peer as usize].eager_limit
    }

    /// What the message lane to `peer` offers (self: a nominal memory copy).
    pub fn caps(&self, peer: u32) -> Caps {
        match self.lanes[peer as usize].msg {
            NO_EP => Caps {
                latency_s: 1e-7,
                bandwidth_bps: 2e10,
                eager_limit: usize::MAX,
                max_frame: usize::MAX,
                ops: Ops::AM,
                kinds: Kinds::HOST,
                needs_reg: false,
                rkey_len: 0,
            },
            i => self.eps[i as usize].caps(),
        }
    }

    /// The bulk operations that reach `peer`'s memory of kind `kind` now (a peer whose kernel
    /// refused single copy has no GET any more).
    pub fn bulk_ops(&self, peer: u32, kind: MemKind) -> Ops {
        let i = self.lanes[peer as usize].host;
        if i == NO_EP {
            return Ops::NONE;
        }
        // Device memory only where the lane's NIC reaches it (GPUDirect RDMA); else staged.
        if matches!(kind, MemKind::Cuda { .. }) && !self.eps[i as usize].caps().kinds.cuda {
            return Ops::NONE;
        }
        match &self.eps[i as usize] {
            Endpoint::Shm(s) if !s.get_ok(peer) => s.caps().ops.without(Ops::AM).without(Ops::GET),
            e => e.caps().ops.without(Ops::AM),
        }
    }

    /// Byte counters.
    pub fn counters(&self) -> NetCounters {
        let mut rows: Vec<_> = self.eps.iter().map(|e| (e.name(), e.counters())).collect();
        if let Some(d) = &self.dev {
            rows.push(("cuda", d.counters()));
        }
        NetCounters { rows }
    }

    fn msg_ep(&mut self, peer: u32) -> Result<&mut Endpoint, TransportError> {
        match self.lanes.get(peer as usize).map(|l| l.msg) {
            Some(i) if i != NO_EP => Ok(&mut self.eps[i as usize]),
            _ => Err(TransportError::Protocol {
                peer,
                why: "self messages never reach the transport".into(),
            }),
        }
    }

    fn bulk_ep(&mut self, peer: u32, what: &'static str) -> Result<&mut Endpoint, TransportError> {
        match self.lanes.get(peer as usize).map(|l| l.host) {
            Some(i) if i != NO_EP => Ok(&mut self.eps[i as usize]),
            _ => Err(no_lane(peer, what)),
        }
    }

    /// Sends one message if the transport takes it now; `Ok(false)` means try again later.
    #[inline]
    pub fn try_send(
        &mut self,
        peer: u32,
        hdr: &Header,
        payload: &[u8],
    ) -> Result<bool, TransportError> {
        self.msg_ep(peer)?.try_send(peer, hdr, payload)
    }

    /// Sends one message whose `len` payload bytes `fill` writes straight into the transport
    /// (a gather) when `peer`'s message lane is shared memory and its ring has room now:
    /// `Ok(true)`. `Ok(false)` (and `fill` not run) when the ring is full or the lane cannot
    /// gather; the caller then packs and sends as usual.
    pub fn try_send_with(
        &mut self,
        peer: u32,
        hdr: &Header,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, TransportError> {
        match self.msg_ep(peer)? {
            Endpoint::Shm(s) => s.try_send_with(peer, hdr, len, fill),
            _ => Ok(false),
        }
    }

    /// Offers the oldest message from `peer` to `take` when its message lane is shared memory
    /// (see [`ShmNet::pop_from`]); `None` on other lanes and when nothing is there.
    #[inline]
    pub fn pop_from(
        &mut self,
        peer: u32,
        take: &mut dyn FnMut(&Header, &[u8]) -> bool,
    ) -> Option<bool> {
        match self.msg_ep(peer).ok()? {
            Endpoint::Shm(s) => s.pop_from(peer, take),
            _ => None,
        }
    }

    /// Sends a chunk of a rendezvous payload over the bulk lane (STREAM); returns the bytes
    /// taken (0 = later).
    pub fn send_chunk(
        &mut self,
        peer: u32,
        token: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, TransportError> {
        self.bulk_ep(peer, "stream")?
            .send_chunk(peer, token, offset, data)
    }

    /// The remote key through which `peer` reaches `m` by GET or PUT, registering `m` with the
    /// bulk lane's transport where it needs that (a transport caches its registrations).
    pub fn register(&mut self, peer: u32, m: &MemRef) -> Result<RKey, TransportError> {
        match self.bulk_ep(peer, "register")? {
            Endpoint::Shm(s) => Ok(s.rkey(m)),
            Endpoint::Sim(s) => Ok(s.register(m)),
            Endpoint::Ib(i) => i.register(peer, m),
            Endpoint::Tcp(_) => Err(no_lane(peer, "register")),
        }
    }

    /// Whether keys from [`register`](Self::register) for `peer` must be handed back with
    /// [`release`](Self::release) when the peer is done with them (a transport that pins
    /// memory per registration: `ib`).
    pub fn releases(&self, peer: u32) -> bool {
        match self.lanes.get(peer as usize).map(|l| l.host) {
            Some(i) if i != NO_EP => matches!(self.eps[i as usize], Endpoint::Ib(_)),
            _ => false,
        }
    }

    /// `peer` is done with the key [`register`](Self::register) gave for `m`.
    pub fn release(&mut self, peer: u32, m: &MemRef) {
        if let Ok(Endpoint::Ib(i)) = self.bulk_ep(peer, "release") {
            i.release(m);
        }
    }

    /// Reads `dst.len` bytes of `peer`'s memory named by `key` into `dst`. [`Tx::Done`]: done
    /// already; [`Tx::Pending`]: `dst` is the transport's until [`Deliver::completed`] reports
    /// `tok`. [`TransportError::Unsupported`]: nothing moved, use another protocol.
    pub fn get(
        &mut self,
        peer: u32,
        dst: MemRef,
        key: &RKey,
        tok: u64,
    ) -> Result<Tx, TransportError> {
        match self.bulk_ep(peer, "get")? {
            Endpoint::Shm(s) => s.get(peer, dst, key).map(|()| Tx::Done),
            Endpoint::Sim(s) => s.get(peer, dst, key, tok).map(|()| Tx::Pending),
            Endpoint::Ib(i) => i.get(peer, dst, key, tok),
            Endpoint::Tcp(_) => Err(no_lane(peer, "get")),
        }
    }

    /// Writes `src` into `peer`'s memory named by `key` (after the peer's CTS). As
    /// [`get`](Self::get), `src` is the transport's until the operation completes.
    pub fn put(
        &mut self,
        peer: u32,
        src: MemRef,
        key: &RKey,
        tok: u64,
    ) -> Result<Tx, TransportError> {
        match self.bulk_ep(peer, "put")? {
            Endpoint::Sim(s) => s.put(peer, src, key, tok).map(|()| Tx::Pending),
            Endpoint::Ib(i) => i.put(peer, src, key, tok),
            Endpoint::Shm(_) | Endpoint::Tcp(_) => Err(no_lane(peer, "put")),
        }
    }

    /// Makes sure the asynchronous operation `tok` with `peer` no longer touches its local
    /// buffer when this returns; its completion is then never reported. (A synchronous mover
    /// has nothing to do; a DMA or RDMA engine waits for or flushes the operation.)
    pub fn quiesce(&mut self, peer: u32, tok: u64) {
        if let Some(d) = &mut self.dev {
            d.quiesce(tok);
        }
        match self.bulk_ep(peer, "quiesce") {
            Ok(Endpoint::Sim(s)) => s.quiesce(tok),
            Ok(Endpoint::Ib(i)) => i.quiesce(peer, tok),
            _ => {}
        }
    }

    /// Moves data: writes queued bytes, accepts connections, delivers arrivals and
    /// completions (at most about `budget`). Returns how many were delivered. One endpoint's
    /// error is returned after the others had their turn.
    pub fn progress(
        &mut self,
        budget: usize,
        out: &mut dyn Deliver,
    ) -> Result<usize, TransportError> {
        let mut n = 0;
        let mut failed = None;
        if let Some(d) = &mut self.dev {
            n += d.progress(out);
        }
        for e in self.eps.iter_mut() {
            match e.progress(budget, out) {
                Ok(k) => n += k,
                Err(err) => {
                    failed.get_or_insert(err);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    fn shm(&self) -> Option<&ShmNet> {
        self.eps.iter().find_map(|e| match e {
            Endpoint::Shm(s) => Some(s),
            _ => None,
        })
    }

    /// Marks this process as about to sleep (see [`ShmNet::begin_sleep`]).
    pub fn begin_sleep(&self) {
        if let Some(s) = self.shm() {
            s.begin_sleep();
        }
        for e in &self.eps {
            if let Endpoint::Ib(i) = e {
                i.arm();
            }
        }
    }

    /// Clears the sleep mark and drains doorbells.
    pub fn end_sleep(&self) {
        if let Some(s) = self.shm() {
            s.end_sleep();
            s.drain_bell();
        }
    }

    /// Descriptors a sleeping rank waits on (doorbell, peer connections, TCP sockets, and TCP
    /// sockets with output waiting for room); poll them without holding whatever lock guards
    /// this `Net`.
    pub fn wait_fds(&self, set: &mut PollSet) {
        for e in &self.eps {
            e.wait_fds(set);
        }
    }

    /// Whether output to `peer` waits on something a sleeping rank can poll (a TCP socket with
    /// room to come; on `ib` the credits, which arrive as completions on an armed CQ's
    /// channel), rather than on a peer that only spinning notices.
    pub fn output_pollable(&self, peer: u32) -> bool {
        matches!(self.route(peer), Route::Tcp | Route::Ib)
    }

    /// System calls a progress pass makes when nothing arrives (a read per TCP connection;
    /// the shared-memory rings are memory reads): what a poll of this `Net` costs in time.
    pub fn progress_syscalls(&self) -> usize {
        self.eps
            .iter()
            .map(|e| match e {
                Endpoint::Tcp(t) => t.progress_syscalls(),
                _ => 0,
            })
            .sum()
    }

    /// Whether output is still queued in a transport (progress must continue to flush it).
    pub fn has_queued_output(&self) -> bool {
        self.eps.iter().any(|e| match e {
            Endpoint::Tcp(t) => t.has_queued_output(),
            _ => false,
        })
    }

    /// Creates a node-local shared window of `len` bytes of memory of `kind` (a capability of
    /// the shared-memory transport: host memory as a memfd; device windows come with the CUDA
    /// transport). Its descriptor is opaque: peers on this node map it with
    /// [`window_map`](Self::window_map).
    pub fn window_create(
        &self,
        name: &str,
        len: usize,
        kind: MemKind,
    ) -> Result<crate::window::Window, TransportError> {
        match kind {
            MemKind::Host => {
                crate::window::Window::create(name, len).map_err(|e| TransportError::Io {
                    what: "creating a shared window",
                    source: std::io::Error::other(e.to_string()),
                })
            }
            MemKind::Cuda { .. } => Err(TransportError::Unsupported {
                peer: self.me,
                op: "device window",
                why: "no CUDA transport in this build".into(),
            }),
        }
    }

    /// Maps the window a node peer described by `blob` (see
    /// [`window_create`](Self::window_create)).
    pub fn window_map(
        &self,
        blob: &[u8],
        kind: MemKind,
    ) -> Result<crate::local::Segment, TransportError> {
        match kind {
            MemKind::Host => crate::window::map_window(blob).map_err(|e| TransportError::Io {
                what: "mapping a peer's shared window",
                source: std::io::Error::other(e.to_string()),
            }),
            MemKind::Cuda { .. } => Err(TransportError::Unsupported {
                peer: self.me,
                op: "device window",
                why: "no CUDA transport in this build".into(),
            }),
        }
    }

    /// The first shared-memory peer seen dead (its local-channel connection hung up).
    pub fn dead_peer(&mut self) -> Option<u32> {
        self.eps.iter_mut().find_map(|e| match e {
            Endpoint::Shm(s) => s.dead_peer(),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::PeerInfo;

    fn info(host: &str, netns: u64, pid: u32) -> AddrRecord {
        AddrRecord {
            info: PeerInfo {
                hostname: host.into(),
                boot_id: "b".into(),
                netns,
                uid: 0,
                pid,
                version: "v".into(),
                settings: vec![],
            },
            endpoints: vec![
                crate::wire::EndpointAddr::Local(format!("rcomm.j.{pid}")),
                crate::wire::EndpointAddr::Tcp(format!("127.0.0.1:{pid}")),
            ],
        }
    }

    #[test]
    fn selection_is_symmetric_and_honours_the_choice() {
        let ps = [
            info("a", 1, 10),
            info("a", 1, 11),
            info("a", 2, 12),
            info("b", 1, 13),
        ];
        for choice in [
            TransportChoice::Auto,
            TransportChoice::Tcp,
            TransportChoice::Shm,
        ] {
            for x in &ps {
                for y in &ps {
                    assert_eq!(select(x, y, choice).ok(), select(y, x, choice).ok());
                }
            }
        }
        assert_eq!(
            select(&ps[0], &ps[0], TransportChoice::Tcp),
            Ok(Route::SelfLoop)
        );
        assert_eq!(
            select(&ps[0], &ps[1], TransportChoice::Auto),
            Ok(Route::Shm)
        );
        assert_eq!(select(&ps[0], &ps[1], TransportChoice::Tcp), Ok(Route::Tcp));
        assert_eq!(
            select(&ps[0], &ps[2], TransportChoice::Auto),
            Ok(Route::Tcp),
            "other netns = other node"
        );
        assert!(
            select(&ps[0], &ps[3], TransportChoice::Shm)
                .unwrap_err()
                .contains("RCOMM_TRANSPORT=shm")
        );
        // What a peer did not publish, it cannot be reached by: a peer on another node
        // without a TCP listener is reached by nothing, and says so on both sides.
        let mut silent = ps[3].clone();
        silent
            .endpoints
            .retain(|e| !matches!(e, crate::wire::EndpointAddr::Tcp(_)));
        for (x, y) in [(&ps[0], &silent), (&silent, &ps[0])] {
            let e = select(x, y, TransportChoice::Auto).unwrap_err();
            assert!(e.contains("no transport reaches"), "{e}");
        }
        let mut no_local = ps[1].clone();
        no_local
            .endpoints
            .retain(|e| !matches!(e, crate::wire::EndpointAddr::Local(_)));
        assert_eq!(
            select(&ps[0], &no_local, TransportChoice::Auto),
            Ok(Route::Tcp),
            "a node peer without a local channel is reached over TCP"
        );
    }
}
