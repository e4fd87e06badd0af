//! The TCP transport of one process as an endpoint: its listener, a sender per peer it talks
//! to (opened at the first message) and a receiver per peer that connected.

use super::{
    CHUNK_PREFIX, TcpAcceptor, TcpConfig, TcpReceiver, TcpSender, TcpSink, decode_chunk_prefix,
};
use crate::error::TransportError;
use crate::transport::{Counters, Deliver, Incoming};
use rcomm_runtime::auth::Secret;
use rcomm_runtime::fastmap::FastMap;
use rcomm_runtime::os::PollSet;
use rcomm_runtime::wire::{Header, ProtoKind};

/// Every TCP connection of one process.
pub struct TcpNet {
    me: u32,
    secret: Secret,
    cfg: TcpConfig,
    addrs: Vec<Option<String>>,
    acceptor: Option<TcpAcceptor>,
    tx: FastMap<u32, TcpSender>,
    rx: FastMap<u32, TcpReceiver>,
    counters: Counters,
}

impl std::fmt::Debug for TcpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpNet")
            .field("me", &self.me)
            .field("senders", &self.tx.len())
            .field("receivers", &self.rx.len())
            .finish()
    }
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

impl TcpNet {
    /// The TCP endpoint of rank `me`: its listener, if bound, and every rank's published
    /// listener address (`addrs[r]`), connected to lazily.
    pub fn new(
        me: u32,
        acceptor: Option<TcpAcceptor>,
        addrs: Vec<Option<String>>,
        cfg: TcpConfig,
        secret: Secret,
    ) -> Self {
        Self {
            me,
            secret,
            cfg,
            addrs,
            acceptor,
            tx: FastMap::default(),
            rx: FastMap::default(),
            counters: Counters::default(),
        }
    }

    /// What this transport offers.
    pub fn caps(&self) -> crate::caps::Caps {
        self.cfg.caps()
    }

    /// Byte counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    fn sender(&mut self, peer: u32) -> Result<&mut TcpSender, TransportError> {
        if !self.tx.contains_key(&peer) {
            let addr = self
                .addrs
                .get(peer as usize)
                .cloned()
                .flatten()
                .ok_or_else(|| TransportError::Connect {
                    peer,
                    addr: "-".into(),
                    why: "the peer published no TCP address".into(),
                })?;
            let s = TcpSender::connect(&addr, self.me, peer, &self.secret, &self.cfg)?;
            rcomm_runtime::rlog!(Info, "NET", "connected to rank {peer} over TCP at {addr}");
            self.tx.insert(peer, s);
        }
        Ok(self.tx.get_mut(&peer).expect("inserted"))
    }

    /// Sends one message if the connection takes it now; `Ok(false)` means try again later.
    pub fn try_send(
        &mut self,
        peer: u32,
        hdr: &Header,
        payload: &[u8],
    ) -> Result<bool, TransportError> {
        let ok = self.sender(peer)?.try_send(hdr, payload)?;
        if ok {
            self.counters.msgs_sent += 1;
            self.counters.bytes_sent += payload.len() as u64;
        }
        Ok(ok)
    }

    /// Sends a chunk of a rendezvous payload; returns the bytes taken (0 = later).
    pub fn send_chunk(
        &mut self,
        peer: u32,
        token: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, TransportError> {
        let chunk = self.cfg.chunk;
        let n = self.sender(peer)?.send_chunk(token, offset, data, chunk)?;
        self.counters.bytes_sent += n as u64;
        Ok(n)
    }

    /// Writes queued bytes, accepts connections, delivers arrivals. Returns how many arrivals
    /// were delivered.
    pub fn progress(&mut self, out: &mut dyn Deliver) -> Result<usize, TransportError> {
        let mut n = 0;
        if let Some(acc) = &self.acceptor {
            while let Some(inc) = acc.try_accept() {
                let rx = self
                    .rx
                    .entry(inc.peer)
                    .or_insert_with(|| TcpReceiver::new(inc.peer, &self.cfg));
                rx.add_stream(inc.index, inc.stream)?;
            }
        }
        // One peer's failure must not stop traffic with the others: its connections are dropped
        // here and the error is reported once.
        let mut failed: Option<TransportError> = None;
        if self.tx.is_empty() && self.rx.is_empty() {
            // No TCP peer yet (all of them on this node): nothing to flush or read.
            return Ok(0);
        }
        self.tx.retain(|&peer, tx| {
            let idle = tx.queued() == 0;
            match tx.flush() {
                Ok(_) => true,
                // An idle connection whose peer has gone lost nothing: the peer may simply have
                // finished. Whether it failed is for its incoming side (end-of-file after its
                // last message) or the launcher to say; we just drop the connection.
                Err(e) if idle => {
                    rcomm_runtime::rlog!(
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
        for (&peer, rx) in self.rx.iter_mut() {
            let mut sink = TcpIn {
                peer,
                out: &mut *out,
                counters: &mut self.counters,
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
            self.rx.remove(&p);
        }
        if n == 0 && !self.rx.is_empty() {
            self.counters.empty_polls += 1;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// Descriptors a sleeping rank waits on: the listener, every incoming stream, and outgoing
    /// streams with output waiting for room.
    pub fn wait_fds(&self, set: &mut PollSet) {
        if let Some(a) = &self.acceptor {
            set.read(a.raw_fd());
        }
        for rx in self.rx.values() {
            for fd in rx.raw_fds() {
                set.read(fd);
            }
        }
        for tx in self.tx.values().filter(|t| t.wants_write()) {
            for fd in tx.raw_fds() {
                set.write(fd);
            }
        }
    }

    /// System calls a progress pass makes when nothing arrives and nothing waits to go out: a
    /// read per incoming connection (accepting is a thread's, looked at with an atomic load).
    pub fn progress_syscalls(&self) -> usize {
        self.rx.values().map(|r| r.raw_fds().count()).sum()
    }

    /// Whether output is still queued (progress must continue to flush it).
    pub fn has_queued_output(&self) -> bool {
        self.tx.values().any(|t| t.wants_write())
    }
}
