//! One interface over every transport of a process, and each peer's lanes.
//!
//! The route to each peer is chosen in one place, [`select`] (a symmetric function of both
//! peers' records and the shared settings, over the table of [`crate::table`]), so two ranks
//! always agree on how they talk; [`Net`] then fixes each peer's lanes from the chosen
//! transport's capabilities: an ordered message lane, and a bulk lane per memory kind whose
//! operations (STREAM, GET, PUT) the protocol layer in `rcomm-core` chooses its rendezvous by
//! — the route's own for host memory, and for device memory a bulk-only lane beside it (CUDA
//! IPC) where one reaches the peer. Every call goes through the contract of
//! [`crate::transport::Transport`] by static dispatch ([`Endpoint`] is an enum); a peer's
//! lanes name endpoints by index, so a call finds its transport by two array reads, and no
//! caller asks for a transport by name.

use crate::caps::{Caps, Features, Kinds, Ops};
use crate::error::TransportError;
use crate::mem::{MemKind, MemRef, RKey};
use crate::table::{Member, TABLE};
use crate::transport::{Counters, unsupported};
use rcomm_runtime::os::PollSet;
use rcomm_runtime::wire::Header;

pub use crate::table::{Endpoint, Route, select};
pub use crate::transport::{Deliver, Tx};

/// Byte counters of every transport, keyed by the transport's name ([`Route::name`]), so tests
/// and tools can prove which one carried the traffic.
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

/// No endpoint (a lane this peer does not have).
const NO_EP: u8 = u8::MAX;

/// The lanes to one peer, fixed when the table is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lanes {
    /// The transport chosen by [`select`].
    route: Route,
    /// Endpoint of the ordered message lane.
    msg: u8,
    /// Endpoint of the bulk lane for host memory.
    host: u8,
    /// Endpoint of the bulk-only lane for device memory beside the route, if one reaches.
    dev: u8,
    /// What the message lane does beyond its operations (read per message: kept here).
    features: Features,
    /// Largest eager payload on the message lane.
    eager_limit: usize,
}

/// Which of a peer's bulk lanes an operation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The route's own (host memory, and device memory where its NIC reaches it).
    Route,
    /// The bulk-only lane for device memory beside the route (CUDA IPC on this node).
    Device,
}

/// Every transport of one process, and each peer's lanes.
pub struct Net {
    me: u32,
    lanes: Vec<Lanes>,
    eps: Vec<Endpoint>,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net")
            .field("me", &self.me)
            .field("lanes", &self.lanes)
            .finish()
    }
}

impl Net {
    /// Assembles the lanes from the route of every peer ([`select`]) and the endpoints set up
    /// for them: a peer's message lane and host-memory bulk lane are its route's endpoint; its
    /// device lane is the endpoint without messages (a bulk-only row of the table) for the
    /// peers of `dev_reach`.
    pub fn new(me: u32, routes: Vec<Route>, mut eps: Vec<Endpoint>, dev_reach: Vec<bool>) -> Self {
        assert!(
            eps.len() < NO_EP as usize,
            "endpoints are indexed by a byte"
        );
        // Bulk-only lanes first: their completions are reported before new arrivals.
        eps.sort_by_key(|e| e.caps().ops.contains(Ops::AM));
        let dev = eps
            .iter()
            .position(|e| !e.caps().ops.contains(Ops::AM))
            .map_or(NO_EP, |i| i as u8);
        let lanes = routes
            .iter()
            .enumerate()
            .map(|(peer, &route)| {
                let ep = eps
                    .iter()
                    .position(|e| e.route() == route)
                    .map_or(NO_EP, |i| i as u8);
                let caps = (ep != NO_EP).then(|| eps[ep as usize].caps());
                let dev = if dev_reach.get(peer).copied().unwrap_or(false) {
                    dev
                } else {
                    NO_EP
                };
                let l = Lanes {
                    route,
                    msg: ep,
                    host: if caps.is_some_and(|c| c.kinds.host) {
                        ep
                    } else {
                        NO_EP
                    },
                    dev,
                    features: caps.map_or(Features::NONE, |c| c.features),
                    eager_limit: match route {
                        Route::SelfLoop => usize::MAX,
                        _ => caps.map_or(0, |c| c.eager_limit),
                    },
                };
                if let Some(c) = caps {
                    rcomm_runtime::rlog!(
                        Info,
                        "NET",
                        "rank {me} -> rank {peer}: messages over {}, host memory by {:?}, device memory by {}",
                        route.name(),
                        c.ops.without(Ops::AM),
                        if dev != NO_EP {
                            format!(
                                "{} where the two GPUs reach each other, else host staging over {}",
                                eps[dev as usize].name(),
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
        Self { me, lanes, eps }
    }

    /// The lanes of the three transports setup once named by hand.
    #[deprecated(note = "setup::Listening builds a Net from the table; use Net::new")]
    pub fn build(
        me: u32,
        routes: Vec<Route>,
        shm: Option<crate::shmnet::ShmNet>,
        ib: Option<crate::ib::IbNet>,
        tcp: crate::tcp::TcpNet,
    ) -> Self {
        let mut eps: Vec<Endpoint> = shm.into_iter().map(Endpoint::Shm).collect();
        eps.extend(ib.map(|i| Endpoint::Ib(Box::new(i))));
        eps.push(Endpoint::Tcp(tcp));
        let dev_reach = routes.iter().map(|r| *r == Route::Shm).collect();
        Self::new(me, routes, eps, dev_reach)
    }

    /// The table of rank `me` on a simulated network: every other rank over `sim`, and a
    /// device lane where the fabric says so (feature `sim`: tests).
    #[cfg(feature = "sim")]
    pub fn sim(me: u32, fabric: &crate::sim_ep::SimFabric) -> Self {
        let n = fabric.config().net.ranks as u32;
        let routes = (0..n)
            .map(|r| if r == me { Route::SelfLoop } else { Route::Sim })
            .collect();
        let ipc = fabric.config().device_ipc;
        let dev_reach = (0..n).map(|r| r != me && ipc).collect();
        let mut eps = vec![Endpoint::Sim(fabric.endpoint(me))];
        if ipc {
            eps.push(Endpoint::Cuda(crate::cuda_ep::CudaEndpoint::lazy()));
        }
        Self::new(me, routes, eps, dev_reach)
    }

    /// The table of rank `me` whose every peer is reached over `ib` (a test on the simulated
    /// verbs fabric: the endpoint is connected to its peers already; feature `sim`).
    #[cfg(feature = "sim")]
    pub fn ib_only(me: u32, ranks: u32, ib: crate::ib::IbNet) -> Self {
        let routes = (0..ranks)
            .map(|r| if r == me { Route::SelfLoop } else { Route::Ib })
            .collect();
        let dev_reach = vec![false; ranks as usize];
        Self::new(me, routes, vec![Endpoint::Ib(Box::new(ib))], dev_reach)
    }

    /// This process's endpoint of transport `T`, if it has one (tests and diagnostics).
    pub fn transport<T: Member>(&self) -> Option<&T> {
        self.eps.iter().find_map(T::of)
    }

    /// This process's endpoint of transport `T`, if it has one (tests and diagnostics).
    pub fn transport_mut<T: Member>(&mut self) -> Option<&mut T> {
        self.eps.iter_mut().find_map(T::of_mut)
    }

    /// The `ib` endpoint's rails (device, port, bytes given to move); empty without one.
    #[deprecated(note = "use transport::<IbNet>() and its rails()")]
    pub fn ib_rails(&self) -> Vec<(String, u8, u64)> {
        self.transport::<crate::ib::IbNet>()
            .map(|i| i.rails())
            .unwrap_or_default()
    }

    /// The `ib` endpoint, if this process has one.
    #[deprecated(note = "use transport_mut::<IbNet>()")]
    pub fn ib_mut(&mut self) -> Option<&mut crate::ib::IbNet> {
        self.transport_mut::<crate::ib::IbNet>()
    }

    fn lane_of(&self, lane: Lane, peer: u32) -> u8 {
        self.lanes.get(peer as usize).map_or(NO_EP, |l| match lane {
            Lane::Route => l.host,
            Lane::Device => l.dev,
        })
    }

    fn lane_ep(
        &mut self,
        lane: Lane,
        peer: u32,
        what: &'static str,
    ) -> Result<&mut Endpoint, TransportError> {
        match self.lane_of(lane, peer) {
            NO_EP => Err(unsupported(peer, what)),
            i => Ok(&mut self.eps[i as usize]),
        }
    }

    /// The route to `peer`.
    pub fn route(&self, peer: u32) -> Route {
        self.lanes[peer as usize].route
    }

    /// What the message lane to `peer` does beyond its operations (none to this process).
    #[inline]
    pub fn features(&self, peer: u32) -> Features {
        self.lanes
            .get(peer as usize)
            .map_or(Features::NONE, |l| l.features)
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
                features: Features::NONE,
            },
            i => self.eps[i as usize].caps(),
        }
    }

    /// The bulk operations on `lane` that reach `peer`'s memory of kind `kind` now (a peer
    /// whose kernel refused single copy has no GET any more; device memory only where the
    /// lane reaches it). Asking the device lane loads the device backend: ask it only for
    /// device memory.
    pub fn lane_ops(&self, lane: Lane, peer: u32, kind: MemKind) -> Ops {
        match self.lane_of(lane, peer) {
            NO_EP => Ops::NONE,
            i => self.eps[i as usize].bulk_ops(peer, kind),
        }
    }

    /// What `lane` to `peer` does beyond its operations (none where there is no such lane).
    pub fn lane_features(&self, lane: Lane, peer: u32) -> Features {
        match self.lane_of(lane, peer) {
            NO_EP => Features::NONE,
            i => self.eps[i as usize].row().features,
        }
    }

    /// The route's bulk operations that reach `peer`'s memory of kind `kind` now
    /// ([`lane_ops`](Self::lane_ops) of [`Lane::Route`]).
    pub fn bulk_ops(&self, peer: u32, kind: MemKind) -> Ops {
        self.lane_ops(Lane::Route, peer, kind)
    }

    /// Byte counters.
    pub fn counters(&self) -> NetCounters {
        NetCounters {
            rows: self.eps.iter().map(|e| (e.name(), e.counters())).collect(),
        }
    }

    #[inline]
    fn msg_ep(&mut self, peer: u32) -> Result<&mut Endpoint, TransportError> {
        match self.lanes.get(peer as usize).map(|l| l.msg) {
            Some(i) if i != NO_EP => Ok(&mut self.eps[i as usize]),
            _ => Err(TransportError::Protocol {
                peer,
                why: "self messages never reach the transport".into(),
            }),
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
    /// (a gather) when `peer`'s message lane has [`Features::GATHER`] and room now:
    /// `Ok(true)`. `Ok(false)` (and `fill` not run) when there is no room or no gather; the
    /// caller then packs and sends as usual.
    #[inline]
    pub fn try_send_with(
        &mut self,
        peer: u32,
        hdr: &Header,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, TransportError> {
        self.msg_ep(peer)?.try_send_with(peer, hdr, len, fill)
    }

    /// Offers the oldest message from `peer` to `take` when its message lane has
    /// [`Features::DIRECT_POP`]; `None` on other lanes and when nothing is there.
    #[inline]
    pub fn pop_from(
        &mut self,
        peer: u32,
        take: &mut dyn FnMut(&Header, &[u8]) -> bool,
    ) -> Option<bool> {
        self.msg_ep(peer).ok()?.pop_from(peer, take)
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
        self.lane_ep(Lane::Route, peer, "stream")?
            .send_chunk(peer, token, offset, data)
    }

    /// The remote key through which `peer` reaches `m` by GET or PUT on `lane`, registering
    /// `m` with the lane's transport where it needs that (a transport caches its
    /// registrations).
    pub fn register_on(
        &mut self,
        lane: Lane,
        peer: u32,
        m: &MemRef,
    ) -> Result<RKey, TransportError> {
        self.lane_ep(lane, peer, "register")?.register(peer, m)
    }

    /// [`register_on`](Self::register_on) the route's lane.
    pub fn register(&mut self, peer: u32, m: &MemRef) -> Result<RKey, TransportError> {
        self.register_on(Lane::Route, peer, m)
    }

    /// Whether keys from [`register`](Self::register) for `peer` must be handed back with
    /// [`release`](Self::release) when the peer is done with them
    /// ([`Features::RELEASES_KEYS`]).
    #[deprecated(note = "ask lane_features(Lane::Route, peer) for Features::RELEASES_KEYS")]
    pub fn releases(&self, peer: u32) -> bool {
        self.lane_features(Lane::Route, peer)
            .contains(Features::RELEASES_KEYS)
    }

    /// `peer` is done with the key [`register`](Self::register) gave for `m`.
    pub fn release(&mut self, peer: u32, m: &MemRef) {
        if let Ok(e) = self.lane_ep(Lane::Route, peer, "release") {
            e.release(peer, m);
        }
    }

    /// Reads `dst.len` bytes of `peer`'s memory named by `key` into `dst` over `lane`.
    /// [`Tx::Done`]: done already; [`Tx::Pending`]: `dst` is the transport's until
    /// [`Deliver::completed`] reports `tok`. [`TransportError::Unsupported`]: nothing moved,
    /// use another protocol.
    pub fn get_on(
        &mut self,
        lane: Lane,
        peer: u32,
        dst: MemRef,
        key: &RKey,
        tok: u64,
    ) -> Result<Tx, TransportError> {
        self.lane_ep(lane, peer, "get")?.get(peer, dst, key, tok)
    }

    /// [`get_on`](Self::get_on) the route's lane.
    pub fn get(
        &mut self,
        peer: u32,
        dst: MemRef,
        key: &RKey,
        tok: u64,
    ) -> Result<Tx, TransportError> {
        self.get_on(Lane::Route, peer, dst, key, tok)
    }

    /// Whether the device lane may pull `peer`'s device memory directly.
    #[deprecated(note = "ask lane_ops(Lane::Device, peer, kind) for Ops::GET")]
    pub fn dev_get(&self, peer: u32) -> bool {
        self.lane_ops(Lane::Device, peer, MemKind::Cuda { device: 0 })
            .contains(Ops::GET)
    }

    /// The key through which `peer` pulls the device memory `m`.
    #[deprecated(note = "use register_on(Lane::Device, ..)")]
    pub fn register_dev(&mut self, peer: u32, m: &MemRef) -> Result<RKey, TransportError> {
        self.register_on(Lane::Device, peer, m)
    }

    /// Starts pulling `peer`'s device memory named by `key` into `dst`.
    #[deprecated(note = "use get_on(Lane::Device, ..)")]
    pub fn get_dev(
        &mut self,
        peer: u32,
        dst: MemRef,
        key: &RKey,
        tok: u64,
    ) -> Result<Tx, TransportError> {
        self.get_on(Lane::Device, peer, dst, key, tok)
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
        self.lane_ep(Lane::Route, peer, "put")?
            .put(peer, src, key, tok)
    }

    /// Makes sure the asynchronous operation `tok` with `peer` no longer touches its local
    /// buffer when this returns; its completion is then never reported. (A synchronous mover
    /// has nothing to do; a DMA or RDMA engine waits for or flushes the operation.)
    pub fn quiesce(&mut self, peer: u32, tok: u64) {
        for lane in [Lane::Device, Lane::Route] {
            if let Ok(e) = self.lane_ep(lane, peer, "quiesce") {
                e.quiesce(peer, tok);
            }
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

    /// Whether operations are under way that complete without a descriptor to wait on (device
    /// copies): progress must poll them even with nothing to read.
    pub fn needs_polling(&self) -> bool {
        self.eps.iter().any(|e| e.busy())
    }

    /// See [`needs_polling`](Self::needs_polling).
    #[deprecated(note = "use needs_polling")]
    pub fn dev_busy(&self) -> bool {
        self.needs_polling()
    }

    /// Closes what every transport imported from a lost peer (device memory).
    pub fn forget_peer(&mut self, peer: u32) {
        for e in &mut self.eps {
            e.forget_peer(peer);
        }
    }

    /// See [`forget_peer`](Self::forget_peer).
    #[deprecated(note = "use forget_peer")]
    pub fn forget_dev_peer(&mut self, peer: u32) {
        self.forget_peer(peer)
    }

    /// Marks this process as about to sleep: peers then wake it, completion channels are
    /// armed. Call [`progress`](Self::progress) once more afterwards and sleep only if it
    /// found nothing.
    pub fn begin_sleep(&self) {
        for e in &self.eps {
            e.begin_sleep();
        }
    }

    /// Clears the sleep mark and drains doorbells.
    pub fn end_sleep(&self) {
        for e in &self.eps {
            e.end_sleep();
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

    /// Whether output to `peer` waits on something a sleeping rank can poll
    /// ([`Features::POLLABLE_OUTPUT`]), rather than on a peer that only spinning notices.
    pub fn output_pollable(&self, peer: u32) -> bool {
        self.features(peer).contains(Features::POLLABLE_OUTPUT)
    }

    /// System calls a progress pass makes when nothing arrives (a read per TCP connection;
    /// the shared-memory rings are memory reads): what a poll of this `Net` costs in time.
    pub fn progress_syscalls(&self) -> usize {
        self.eps.iter().map(|e| e.progress_syscalls()).sum()
    }

    /// Whether output is still queued in a transport (progress must continue to flush it).
    pub fn has_queued_output(&self) -> bool {
        self.eps.iter().any(|e| e.has_queued_output())
    }

    /// Creates a node-local shared window of `len` bytes of memory of `kind`, by the first
    /// transport of the table that makes windows of that kind. Its descriptor is opaque: peers
    /// on this node map it with [`window_map`](Self::window_map).
    pub fn window_create(
        &self,
        name: &str,
        len: usize,
        kind: MemKind,
    ) -> Result<crate::window::Window, TransportError> {
        match TABLE.iter().find(|d| d.windows.has(kind)) {
            Some(d) => (d.window_create)(name, len, kind),
            None => Err(self.no_windows(kind)),
        }
    }

    /// Maps the window a node peer described by `blob` (see
    /// [`window_create`](Self::window_create)).
    pub fn window_map(
        &self,
        blob: &[u8],
        kind: MemKind,
    ) -> Result<crate::local::Segment, TransportError> {
        match TABLE.iter().find(|d| d.windows.has(kind)) {
            Some(d) => (d.window_map)(blob, kind),
            None => Err(self.no_windows(kind)),
        }
    }

    fn no_windows(&self, kind: MemKind) -> TransportError {
        TransportError::Unsupported {
            peer: self.me,
            op: "window",
            why: format!("no transport in this build makes shared windows of {kind:?} memory"),
        }
    }

    /// The first peer a transport saw dead (its connection hung up).
    pub fn dead_peer(&mut self) -> Option<u32> {
        self.eps.iter_mut().find_map(|e| e.dead_peer())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcomm_runtime::config::TransportChoice;
    use rcomm_runtime::identity::PeerInfo;
    use rcomm_runtime::wire::AddrRecord;

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
                rcomm_runtime::wire::EndpointAddr::Local(format!("rcomm.j.{pid}")),
                rcomm_runtime::wire::EndpointAddr::Tcp(format!("127.0.0.1:{pid}")),
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
            .retain(|e| !matches!(e, rcomm_runtime::wire::EndpointAddr::Tcp(_)));
        for (x, y) in [(&ps[0], &silent), (&silent, &ps[0])] {
            let e = select(x, y, TransportChoice::Auto).unwrap_err();
            assert!(e.contains("no transport reaches"), "{e}");
        }
        let mut no_local = ps[1].clone();
        no_local
            .endpoints
            .retain(|e| !matches!(e, rcomm_runtime::wire::EndpointAddr::Local(_)));
        assert_eq!(
            select(&ps[0], &no_local, TransportChoice::Auto),
            Ok(Route::Tcp),
            "a node peer without a local channel is reached over TCP"
        );
    }
}
