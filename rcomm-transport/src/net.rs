//! The transport table: which transport reaches each peer, and one interface over all of them.
//!
//! The choice is made in one place, [`select`], a symmetric function of both peers' identities
//! and the shared settings, so two ranks always agree on how they talk. The protocol layer in
//! `rcomm-core` sees only [`Net`]: send a message, send a chunk, read by single copy, progress.

use crate::auth::Secret;
use crate::config::TransportChoice;
use crate::error::{Caps, TransportError};
use crate::fastmap::FastMap;
use crate::identity::PeerInfo;
use crate::os::PollSet;
use crate::shmnet::{Counters, Incoming, ShmNet};
use crate::tcp::{
    CHUNK_PREFIX, TcpAcceptor, TcpConfig, TcpReceiver, TcpSender, TcpSink, decode_chunk_prefix,
};
use crate::wire::{Header, ProtoKind};

/// How one peer is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// This process.
    SelfLoop,
    /// Shared memory on this node.
    Shm,
    /// TCP.
    Tcp,
}

impl Route {
    /// Short name for logs and counters.
    pub fn name(self) -> &'static str {
        match self {
            Route::SelfLoop => "self",
            Route::Shm => "shm",
            Route::Tcp => "tcp",
        }
    }
}

/// Picks the transport between `a` and `b`. Symmetric: `select(a, b) == select(b, a)`.
pub fn select(a: &PeerInfo, b: &PeerInfo, choice: TransportChoice) -> Result<Route, String> {
    if a.same_node(b) && a.pid == b.pid {
        return Ok(Route::SelfLoop);
    }
    match choice {
        TransportChoice::Tcp => Ok(Route::Tcp),
        _ if a.same_node(b) && a.uid == b.uid => Ok(Route::Shm),
        TransportChoice::Shm => Err(format!(
            "RCOMM_TRANSPORT=shm, but pid {} on {} and pid {} on {} cannot share memory (other node or user); use auto or tcp",
            a.pid, a.hostname, b.pid, b.hostname
        )),
        TransportChoice::Auto => Ok(Route::Tcp),
    }
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

/// Every transport of one process.
pub struct Net {
    me: u32,
    routes: Vec<Route>,
    shm: Option<ShmNet>,
    secret: Secret,
    tcp_cfg: TcpConfig,
    tcp_addrs: Vec<Option<String>>,
    tcp_acceptor: Option<TcpAcceptor>,
    tcp_tx: FastMap<u32, TcpSender>,
    tcp_rx: FastMap<u32, TcpReceiver>,
    tcp_counters: Counters,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net")
            .field("me", &self.me)
            .field("routes", &self.routes)
            .finish()
    }
}

/// Where [`Net::progress`] hands what arrives: the protocol layer.
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
}

/// One TCP peer's arrivals, passed on to the protocol layer.
struct TcpIn<'a> {
    peer: u32,
    out: &'a mut dyn Deliver,
    counters: &'a mut Counters,
    bad: Option<TransportError>,
}

impl TcpSink for TcpIn<'_> {
    fn frame(&mut self, hdr: &Header, payload: &[u8]) {
        if hdr.kind != ProtoKind::Data {
            self.counters.msgs_recv += 1;
            self.counters.bytes_recv += payload.len() as u64;
            self.out.incoming(self.peer, Incoming::Msg(hdr, payload));
            return;
        }
        let Some((token, offset)) = decode_chunk_prefix(payload) else {
            self.bad.get_or_insert(TransportError::Protocol {
                peer: self.peer,
                why: "short data frame".into(),
            });
            return;
        };
        let data = &payload[CHUNK_PREFIX..];
        self.counters.bytes_recv += data.len() as u64;
        self.out.incoming(
            self.peer,
            Incoming::Chunk {
                token,
                offset,
                data,
            },
        );
    }

    fn place(&mut self, token: u64, offset: u64, len: usize) -> Option<&mut [u8]> {
        self.out.place(self.peer, token, offset, len)
    }

    fn placed(&mut self, token: u64, offset: u64, len: usize) {
        self.counters.bytes_recv += len as u64;
        self.out.placed(self.peer, token, offset, len);
    }
}

impl Net {
    /// Assembles the table. `tcp_addrs[r]` is rank r's published TCP listener, if any.
    pub fn new(
        me: u32,
        routes: Vec<Route>,
        shm: Option<ShmNet>,
        tcp_acceptor: Option<TcpAcceptor>,
        tcp_addrs: Vec<Option<String>>,
        tcp_cfg: TcpConfig,
        secret: Secret,
    ) -> Self {
        Self {
            me,
            routes,
            shm,
            secret,
            tcp_cfg,
            tcp_addrs,
            tcp_acceptor,
            tcp_tx: FastMap::default(),
            tcp_rx: FastMap::default(),
            tcp_counters: Counters::default(),
        }
    }

    /// The route to `peer`.
    pub fn route(&self, peer: u32) -> Route {
        self.routes[peer as usize]
    }

    /// What the transport to `peer` offers.
    pub fn caps(&self, peer: u32) -> Caps {
        match self.route(peer) {
            Route::SelfLoop => Caps {
                latency_s: 1e-7,
                bandwidth_bps: 2e10,
                eager_limit: usize::MAX,
                max_frame: usize::MAX,
                single_copy: false,
            },
            Route::Shm => {
                // Borrowed, not cloned: this runs on every send.
                let (eager_limit, cma) = self
                    .shm
                    .as_ref()
                    .map_or((0, false), |s| (s.config().eager_limit, s.config().cma));
                Caps {
                    latency_s: 3e-7,
                    bandwidth_bps: 1.2e10,
                    eager_limit,
                    max_frame: eager_limit,
                    single_copy: cma,
                }
            }
            Route::Tcp => self.tcp_cfg.caps(),
        }
    }

    /// Byte counters.
    pub fn counters(&self) -> NetCounters {
        let mut rows = Vec::with_capacity(2);
        if let Some(s) = &self.shm {
            rows.push((Route::Shm.name(), s.counters()));
        }
        rows.push((Route::Tcp.name(), self.tcp_counters));
        NetCounters { rows }
    }

    fn tcp_sender(&mut self, peer: u32) -> Result<&mut TcpSender, TransportError> {
        if !self.tcp_tx.contains_key(&peer) {
            let addr = self
                .tcp_addrs
                .get(peer as usize)
                .cloned()
                .flatten()
                .ok_or_else(|| TransportError::Connect {
                    peer,
                    addr: "-".into(),
                    why: "the peer published no TCP address".into(),
                })?;
            let s = TcpSender::connect(&addr, self.me, peer, &self.secret, &self.tcp_cfg)?;
            crate::rlog!(Info, "NET", "connected to rank {peer} over TCP at {addr}");
            self.tcp_tx.insert(peer, s);
        }
        Ok(self.tcp_tx.get_mut(&peer).expect("inserted"))
    }

    /// Sends one message if the transport takes it now; `Ok(false)` means try again later.
    pub fn try_send(
        &mut self,
        peer: u32,
        hdr: &Header,
        payload: &[u8],
    ) -> Result<bool, TransportError> {
        match self.route(peer) {
            Route::Shm => self
                .shm
                .as_mut()
                .expect("shm route implies shm")
                .try_send(peer, hdr, payload),
            Route::Tcp => {
                let ok = self.tcp_sender(peer)?.try_send(hdr, payload)?;
                if ok {
                    self.tcp_counters.msgs_sent += 1;
                    self.tcp_counters.bytes_sent += payload.len() as u64;
                }
                Ok(ok)
            }
            Route::SelfLoop => Err(TransportError::Protocol {
                peer,
                why: "self messages never reach the transport".into(),
            }),
        }
    }

    /// Sends a chunk of a rendezvous payload; returns the bytes taken (0 = later).
    pub fn send_chunk(
        &mut self,
        peer: u32,
        token: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, TransportError> {
        match self.route(peer) {
            Route::Shm => self
                .shm
                .as_mut()
                .expect("shm route implies shm")
                .send_chunk(peer, token, offset, data),
            Route::Tcp => {
                let chunk = self.tcp_cfg.chunk;
                let n = self
                    .tcp_sender(peer)?
                    .send_chunk(token, offset, data, chunk)?;
                self.tcp_counters.bytes_sent += n as u64;
                Ok(n)
            }
            Route::SelfLoop => Err(TransportError::Protocol {
                peer,
                why: "self messages never reach the transport".into(),
            }),
        }
    }

    /// Reads `dst.len()` bytes at `addr` in `peer`'s memory, if single copy reaches it.
    pub fn cma_read(&mut self, peer: u32, addr: u64, dst: &mut [u8]) -> Result<(), TransportError> {
        match (self.route(peer), self.shm.as_mut()) {
            (Route::Shm, Some(s)) => s.cma_read(peer, addr, dst),
            _ => Err(TransportError::Protocol {
                peer,
                why: "single copy needs shared memory".into(),
            }),
        }
    }

    /// Moves data: writes queued TCP bytes, accepts TCP connections, delivers arrivals (at most
    /// about `budget`). Returns how many arrivals were delivered.
    pub fn progress(
        &mut self,
        budget: usize,
        out: &mut dyn Deliver,
    ) -> Result<usize, TransportError> {
        let mut n = 0;
        if let Some(s) = self.shm.as_mut() {
            n += s.progress(budget, &mut |peer, inc| out.incoming(peer, inc))?;
        }
        if let Some(acc) = &self.tcp_acceptor {
            while let Some(inc) = acc.try_accept() {
                let rx = self
                    .tcp_rx
                    .entry(inc.peer)
                    .or_insert_with(|| TcpReceiver::new(inc.peer, &self.tcp_cfg));
                rx.add_stream(inc.index, inc.stream)?;
            }
        }
        // One peer's failure must not stop traffic with the others: its connections are dropped
        // here and the error is reported once.
        let mut failed: Option<TransportError> = None;
        self.tcp_tx.retain(|&peer, tx| {
            let idle = tx.queued() == 0;
            match tx.flush() {
                Ok(_) => true,
                // An idle connection whose peer has gone lost nothing: the peer may simply have
                // finished. Whether it failed is for its incoming side (end-of-file after its
                // last message) or the launcher to say; we just drop the connection.
                Err(e) if idle => {
                    crate::rlog!(
                        Trace,
                        "NET",
                        "idle TCP connection to rank {peer} closed: {e}"
                    );
                    false
                }
                Err(e) => {
                    failed.get_or_insert(e);
                    false
                }
            }
        });
        let mut dead_rx = None;
        for (&peer, rx) in self.tcp_rx.iter_mut() {
            let mut sink = TcpIn {
                peer,
                out: &mut *out,
                counters: &mut self.tcp_counters,
                bad: None,
            };
            let r = rx.progress_into(&mut sink);
            match (r, sink.bad) {
                (Ok(k), None) => n += k,
                (Err(e), _) | (Ok(_), Some(e)) => {
                    dead_rx = Some(peer);
                    failed.get_or_insert(e);
                    break;
                }
            }
        }
        if let Some(p) = dead_rx {
            self.tcp_rx.remove(&p);
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// Marks this process as about to sleep (see [`ShmNet::begin_sleep`]).
    pub fn begin_sleep(&self) {
        if let Some(s) = &self.shm {
            s.begin_sleep();
        }
    }

    /// Clears the sleep mark and drains doorbells.
    pub fn end_sleep(&self) {
        if let Some(s) = &self.shm {
            s.end_sleep();
            s.drain_bell();
        }
    }

    /// Descriptors a sleeping rank waits on (doorbell, peer connections, TCP sockets, and TCP
    /// sockets with output waiting for room); poll them without holding whatever lock guards
    /// this `Net`.
    pub fn wait_fds(&self, set: &mut PollSet) {
        if let Some(s) = &self.shm {
            s.wait_fds(set);
        }
        if let Some(a) = &self.tcp_acceptor {
            set.read(a.raw_fd());
        }
        for rx in self.tcp_rx.values() {
            for fd in rx.raw_fds() {
                set.read(fd);
            }
        }
        for tx in self.tcp_tx.values().filter(|t| t.wants_write()) {
            for fd in tx.raw_fds() {
                set.write(fd);
            }
        }
    }

    /// Whether output to `peer` waits on something a sleeping rank can poll (a TCP socket with
    /// room to come), rather than on a peer that only spinning notices.
    pub fn output_pollable(&self, peer: u32) -> bool {
        self.route(peer) == Route::Tcp
    }

    /// Whether TCP output is still queued (progress must continue to flush it).
    pub fn has_queued_output(&self) -> bool {
        self.tcp_tx.values().any(|t| t.wants_write())
    }

    /// The first shared-memory peer seen dead (its local-channel connection hung up).
    pub fn dead_peer(&mut self) -> Option<u32> {
        self.shm.as_mut().and_then(|s| s.dead_peer())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(host: &str, netns: u64, pid: u32) -> PeerInfo {
        PeerInfo {
            hostname: host.into(),
            boot_id: "b".into(),
            netns,
            uid: 0,
            pid,
            version: "v".into(),
            settings: vec![],
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
    }
}
