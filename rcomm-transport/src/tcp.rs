//! The TCP byte transport: between nodes, and on one node when `RCOMM_TRANSPORT=tcp`.
//!
//! # Connection model
//!
//! Connections are **one-directional**. A rank opens its own connection(s) to a peer, lazily at
//! the first send, with [`TcpSender::connect`], and only writes to them; it receives the peer's
//! messages on the connection(s) the peer opened to it, which its [`TcpAcceptor`] accepted and
//! handed over as [`Incoming`] streams, gathered per peer in a [`TcpReceiver`]. So two ranks
//! connecting to each other at the same moment never race, and apart from the handshake every
//! socket is either write-only or read-only.
//!
//! Opening a stream: TCP connect, the job-secret handshake ([`rcomm_runtime::auth`], purpose `"tcp"`,
//! client id = the sender's rank), then one hello frame from the sender ([`Hello`]: the rank it
//! means to reach, the stream's index and count, its frame limit) answered by the acceptor with
//! *accepted* or *refused, because …*. Handshake frames are versioned [`rcomm_runtime::wire`] frames;
//! once accepted, the stream carries only data frames.
//!
//! # Data frames
//!
//! On the wire, one message is [`Header::encode`] (40 bytes) + payload length (`u32`, little
//! endian) + payload ([`FRAME_HEADER_LEN`] = 44 bytes before the payload). `Header::len` is the
//! length of the whole user message as the protocol layer sees it; the frame's own length field
//! says how many payload bytes follow, at most [`Caps::max_frame`]. A frame announcing more, or
//! carrying a header that does not decode, is a [`TransportError::Protocol`] and ends the
//! connection — it is checked as soon as the 44 bytes are in, before any payload is awaited.
//!
//! # Streams and order
//!
//! A sender may open several streams to one peer ([`TcpConfig::streams`]) so that bulk data is
//! not limited by one flow. Messages whose order matters for matching (every kind except
//! [`ProtoKind::Data`](rcomm_runtime::wire::ProtoKind::Data)) always travel on stream 0, so they arrive
//! in send order. Data chunks carry their position in their payload (token, offset), so they
//! go round-robin over all streams and may arrive in any order relative to each other **and
//! to later stream-0 messages**: a rendezvous receive must complete when all its bytes have
//! arrived, not when a later control message (such as `RndvFin`) does. A receiver refuses anything but `Data` on
//! streams other than 0, so a confused sender cannot break matching order silently.
//!
//! # Back-pressure and credits
//!
//! [`TcpSender::try_send`] either takes the whole message — written at once as far as the
//! socket takes it, the rest copied into a bounded per-stream queue that
//! [`TcpSender::flush`] drains — or refuses it without side effects (`Ok(false)`) once that
//! queue holds [`TcpConfig::max_queued`] bytes. TCP's own window stops a sender whose receiver
//! does not read, so the transport needs no credits of its own; bounding *unexpected* eager data
//! at a receiver is the protocol layer's job (it can send
//! [`ProtoKind::Credit`](rcomm_runtime::wire::ProtoKind::Credit) messages like any other, on stream 0,
//! and honour them before calling `try_send`).
//!
//! # Failures
//!
//! Sockets are non-blocking after the handshake, with `TCP_NODELAY`, keepalive with short
//! timers and `TCP_USER_TIMEOUT` ([`TcpConfig::user_timeout_ms`]), so a cut link becomes an
//! error instead of a hang, even on an idle, receive-only connection. Writes use `MSG_NOSIGNAL`:
//! a closed peer is an error, never a `SIGPIPE` that kills the process. End-of-file and
//! connection resets become [`TransportError::PeerClosed`]; other socket errors (timeouts,
//! unreachable hosts) [`TransportError::Link`]. After the first error a sender or receiver
//! keeps returning it; drop it. An idle sender learns of a dead peer too: `flush` looks at its
//! sockets' receive side every 100 ms. A sender dropped with bytes still queued loses them, so
//! flush until it reports an empty queue first; its receiver then gets every message before
//! `PeerClosed`.
//!
//! Why no application heartbeat frame here: keepalive probes (from 1 s of idleness) plus
//! `TCP_USER_TIMEOUT` (`RCOMM_TCP_TIMEOUT`) already make a cut link or a dead host an error on
//! every connection, idle or not, at no cost to the data path (measured: `PeerLost` about 1.5 s
//! after a cut with a 2 s timeout, tests/tests/tcp.rs). A *stopped* peer (`SIGSTOP`) is another
//! matter: its kernel keeps answering, so only the process can prove it is alive, and a frame
//! sent from the progress loop would also accuse a rank that merely computes for a while
//! without calling rcomm. That proof belongs to the per-process heartbeat thread of the fault
//! module (DESIGN: `PeerHung`), not to this transport.
//!
//! # Memory
//!
//! Each received stream owns a buffer of one largest frame ([`Caps::max_frame`] + 44 bytes,
//! about 0.5 MiB by default), allocated once; pages the kernel never fills stay unmapped. Each
//! sent stream queues at most [`TcpConfig::max_queued`] bytes (plus one frame) under
//! back-pressure. Nothing is allocated per message.
//!
//! # Waiting
//!
//! Everything is polled from the caller's progress loop. A rank that wants to sleep adds
//! [`TcpReceiver::raw_fds`] (readable), [`TcpSender::raw_fds`] (writable while
//! [`TcpSender::wants_write`]; hang-up always) and [`TcpAcceptor::raw_fd`] (readable when a new
//! stream is ready) to a level-triggered poll set. `progress` may leave bytes in a socket when
//! its per-call budget is spent, which a level-triggered poll reports again.

mod acceptor;
mod frame;
mod peers;
mod receiver;
mod sender;
mod sys;
#[cfg(test)]
mod tests;

pub use acceptor::{Incoming, TcpAcceptor};
#[cfg(feature = "fuzzing")]
pub(crate) use frame::fuzz_frames;
pub use frame::{CHUNK_PREFIX, decode_chunk_prefix};
pub use peers::TcpNet;
pub use receiver::{READ_BUDGET, TcpReceiver, TcpSink};
pub use sender::TcpSender;

use crate::error::{Caps, TransportError};
use crate::transport::{ConnectCx, Deliver, ListenCx, ListenError, Transport};
use rcomm_runtime::wire::{Dec, Enc, Header, WireError};
use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::Duration;

/// Bytes on the wire before each payload: the encoded [`Header`] and the `u32` payload length.
pub const FRAME_HEADER_LEN: usize = Header::LEN + 4;

/// Most streams one sender may open to one peer. More would only cost descriptors.
pub const MAX_STREAMS: usize = 64;

/// Room in [`Caps::max_frame`] beyond the larger of the eager limit and the chunk size, for the
/// token and offset that prefix a data chunk and for rendezvous control records.
pub const CONTROL_SLACK: usize = 4096;

/// Largest eager limit or chunk size accepted in a [`TcpConfig`]: frames are buffered whole on
/// the receiving side, so this bounds what one peer can make us hold per stream.
pub const MAX_FRAME_LIMIT: usize = 64 << 20;

/// How long the connecting side waits for a listener to start the handshake. Longer than
/// [`rcomm_runtime::auth::HANDSHAKE_TIMEOUT`] on purpose: a listener flooded by silent clients admits
/// connections a bounded number at a time, and may be waiting out their deadlines.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Deadline for the hello exchange that follows authentication.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(1);

/// Binds the handshake to this kind of listener, so a proof made for the KVS is useless here.
const AUTH_PURPOSE: &str = "tcp";

/// Kinds of the wire frames exchanged after authentication, before data flows. Distinct from
/// the handshake's kinds so a stray frame cannot be mistaken for either.
mod hello_kind {
    /// Sender → acceptor: [`Hello`](super::Hello).
    pub const HELLO: u8 = 0xB1;
    /// Acceptor → sender: the stream is accepted (empty payload).
    pub const ACCEPTED: u8 = 0xB2;
    /// Acceptor → sender: refused; the payload says why (UTF-8).
    pub const REFUSED: u8 = 0xB3;
}

/// Settings of the TCP transport. Protocol-relevant ones ([`eager_limit`](Self::eager_limit),
/// [`chunk`](Self::chunk)) must agree on every rank; a sender whose frames could exceed its
/// receiver's limit is refused at connection time with a message saying so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    /// Connections per peer (clamped to `1..=`[`MAX_STREAMS`]). More than one lets bulk data
    /// use several flows; ordered messages always use the first.
    pub streams: usize,
    /// `TCP_USER_TIMEOUT` in milliseconds: how long sent data may stay unacknowledged (or
    /// keepalive probes unanswered) before the connection fails. 0 leaves the system default,
    /// which can be many minutes.
    pub user_timeout_ms: u32,
    /// Most bytes a sender queues per stream beyond what the socket took; past it `try_send`
    /// refuses. A message is always accepted onto an empty queue, whatever its size.
    pub max_queued: usize,
    /// Largest eager message (header and whole payload in one frame).
    pub eager_limit: usize,
    /// Size of the data chunks a rendezvous transfer is cut into.
    pub chunk: usize,
    /// `SO_SNDBUF`/`SO_RCVBUF` to request, in bytes; 0 keeps the kernel's autotuning. Applied
    /// only where the system allows that much (`net.core.wmem_max`/`rmem_max`): a request the
    /// kernel caps would switch autotuning off and leave a *smaller* buffer than without it.
    pub socket_buffer: usize,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            streams: 1,
            user_timeout_ms: 10_000,
            max_queued: 8 << 20,
            eager_limit: 64 << 10,
            chunk: 512 << 10,
            socket_buffer: 4 << 20,
        }
    }
}

impl TcpConfig {
    /// Largest payload of one frame: the larger of the eager limit and the chunk size, plus
    /// [`CONTROL_SLACK`].
    pub fn max_frame(&self) -> usize {
        self.eager_limit.max(self.chunk).min(MAX_FRAME_LIMIT) + CONTROL_SLACK
    }

    /// The stream count in force.
    pub fn stream_count(&self) -> usize {
        self.streams.clamp(1, MAX_STREAMS)
    }

    /// What this transport offers the protocol layer. Latency and bandwidth are nominal values
    /// for the cost model (a fast datacentre link), not measurements.
    pub fn caps(&self) -> Caps {
        Caps {
            latency_s: 3e-6,
            bandwidth_bps: 4e9,
            eager_limit: self.eager_limit.min(MAX_FRAME_LIMIT),
            max_frame: self.max_frame(),
            ops: crate::caps::Ops::AM.with(crate::caps::Ops::STREAM),
            kinds: crate::caps::Kinds::HOST,
            needs_reg: false,
            rkey_len: 0,
            features: <TcpNet as Transport>::OFFERS.2,
        }
    }
}

/// Whether TCP reaches between the ranks of records `a` and `b`: both published a listener
/// (connections are one-directional, each side opens its own). Whether the address can be
/// reached from here only a connection tells; one that fails names the address.
pub fn can_connect(
    a: &rcomm_runtime::wire::AddrRecord,
    b: &rcomm_runtime::wire::AddrRecord,
) -> bool {
    let tcp = |r: &rcomm_runtime::wire::AddrRecord| {
        r.endpoints
            .iter()
            .any(|e| matches!(e, rcomm_runtime::wire::EndpointAddr::Tcp(_)))
    };
    tcp(a) && tcp(b)
}

/// The sender's hello, sent once per stream right after authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The rank the sender means to reach; a listener of another rank refuses (stale or mixed-up
    /// address records would otherwise deliver messages to the wrong rank).
    pub dest: u32,
    /// This stream's index among the sender's streams to this peer.
    pub index: u32,
    /// How many streams the sender opens to this peer.
    pub count: u32,
    /// The largest frame payload the sender may send; must not exceed the receiver's.
    pub max_frame: u32,
}

impl Hello {
    /// Encodes the payload of the hello frame.
    pub fn encode(&self) -> Vec<u8> {
        Enc::new()
            .u32(self.dest)
            .u32(self.index)
            .u32(self.count)
            .u32(self.max_frame)
            .finish()
    }

    /// Decodes it; any other length is an error.
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut d = Dec::new(b);
        let h = Self {
            dest: d.u32("hello dest")?,
            index: d.u32("hello index")?,
            count: d.u32("hello count")?,
            max_frame: d.u32("hello max_frame")?,
        };
        d.end()?;
        Ok(h)
    }
}

/// Maps a socket error on a connection to `peer` to the transport's error: the peer going away
/// (reset, broken pipe) is [`TransportError::PeerClosed`], anything else a failed link.
fn io_error(peer: u32, e: io::Error) -> TransportError {
    match e.raw_os_error() {
        Some(libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED) => {
            TransportError::PeerClosed { peer }
        }
        // Say which setting decided, so the user knows what to raise on a slow network.
        Some(libc::ETIMEDOUT) => TransportError::Link {
            peer,
            source: io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer within RCOMM_TCP_TIMEOUT (a cut link or a dead host; os error 110)",
            ),
        },
        _ => TransportError::Link { peer, source: e },
    }
}

/// A copy of an error, so a sender or receiver that failed once reports the same failure on
/// every later call (`io::Error` is not `Clone`).
fn replay(e: &TransportError) -> TransportError {
    let copy_io = |s: &io::Error| match s.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(s.kind(), s.to_string()),
    };
    match e {
        TransportError::PeerClosed { peer } => TransportError::PeerClosed { peer: *peer },
        TransportError::Link { peer, source } => TransportError::Link {
            peer: *peer,
            source: copy_io(source),
        },
        TransportError::Protocol { peer, why } => TransportError::Protocol {
            peer: *peer,
            why: why.clone(),
        },
        TransportError::Connect { peer, addr, why } => TransportError::Connect {
            peer: *peer,
            addr: addr.clone(),
            why: why.clone(),
        },
        TransportError::Unsupported { peer, op, why } => TransportError::Unsupported {
            peer: *peer,
            op,
            why: why.clone(),
        },
        TransportError::Io { what, source } => TransportError::Io {
            what,
            source: copy_io(source),
        },
    }
}

/// Idle seconds before the first keepalive probe, and seconds between probes. Short, so that a
/// receive-only connection over a cut link notices within about [`TcpConfig::user_timeout_ms`]
/// (which bounds how long probes may go unanswered: with `TCP_USER_TIMEOUT` set, Linux aborts
/// a connection whose probes went unanswered for that long, whatever `TCP_KEEPCNT` says)
/// instead of after the system's two hours. A probe is an empty segment, once a second per
/// idle connection: nothing next to the data.
const KEEPALIVE_IDLE_S: i32 = 1;
const KEEPALIVE_INTERVAL_S: i32 = 1;

/// Applies the data-phase socket options to an established stream (both sides).
fn tune(s: &TcpStream, cfg: &TcpConfig) -> io::Result<()> {
    use libc::{IPPROTO_TCP, SOL_SOCKET};
    s.set_nodelay(true)?;
    let fd = s.as_fd();
    // A timeout of 0 means "the system's": then keepalive keeps its system timers too, or a
    // fixed probe count would impose a short timeout the user switched off.
    if cfg.user_timeout_ms > 0 {
        sys::set_int_opt(fd, SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
        sys::set_int_opt(fd, IPPROTO_TCP, libc::TCP_KEEPIDLE, KEEPALIVE_IDLE_S)?;
        sys::set_int_opt(fd, IPPROTO_TCP, libc::TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)?;
        // Enough probes to span the timeout, so the count never ends the connection first.
        let probes = (cfg.user_timeout_ms / 1000 + 2).clamp(3, 120) as i32;
        sys::set_int_opt(fd, IPPROTO_TCP, libc::TCP_KEEPCNT, probes)?;
        sys::set_int_opt(
            fd,
            IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            cfg.user_timeout_ms.min(i32::MAX as u32) as i32,
        )?;
    }
    if cfg.socket_buffer > 0 {
        // Only where the kernel grants the full request: a capped request would switch
        // autotuning off and leave a smaller buffer than autotuning reaches on its own.
        let want = cfg.socket_buffer.min(i32::MAX as usize / 2);
        let (wmax, rmax) = sys::socket_buffer_limits();
        if want <= wmax {
            sys::set_int_opt(fd, SOL_SOCKET, libc::SO_SNDBUF, want as i32)?;
        }
        if want <= rmax {
            sys::set_int_opt(fd, SOL_SOCKET, libc::SO_RCVBUF, want as i32)?;
        }
    }
    Ok(())
}

/// The TCP listener's interface: `RCOMM_SOCKET_IFNAME`'s when set; else the network interface
/// the topology puts nearest this rank's GPU or NUMA node (rail-aligned, see
/// [`rcomm_runtime::topo::choose`]) when it is up with an IPv4 address here; else the default rule.
/// The topology only ever narrows the default, so a machine it cannot read, or a fake host
/// (network namespace) that lacks the chosen interface, behaves as before.
pub fn tcp_address(
    cfg: &rcomm_runtime::config::Config,
    local_rank: u32,
) -> Result<(String, std::net::IpAddr), String> {
    use rcomm_runtime::ifaddr;
    if cfg.socket_ifname.is_none()
        && let Some((_, choice)) = rcomm_runtime::topo::choose::for_this_process(cfg, local_rank)
        && let Some(net) = choice.net
        && let Some(spec) = ifaddr::IfSpec::parse(&format!("={}", net.name))
        && let Ok(ifs) = ifaddr::interfaces()
        && let Ok(found) = ifaddr::choose(Some(&spec), &ifs)
    {
        return Ok(found);
    }
    ifaddr::local_address(cfg.socket_ifname.as_ref())
}

fn tcp_config(cfg: &rcomm_runtime::config::Config) -> TcpConfig {
    TcpConfig {
        streams: cfg.tcp_streams,
        user_timeout_ms: cfg.tcp_timeout_ms,
        ..TcpConfig::default()
    }
}

/// The contract: ordered messages and streamed chunks of host memory, to any peer that
/// published a listener; output waits on sockets a sleeping rank polls.
impl Transport for TcpNet {
    const NAME: &'static str = "tcp";
    const ADDR_KIND: u8 = crate::transport::ADDR_TCP;
    const OFFERS: (crate::caps::Ops, crate::caps::Kinds, crate::caps::Features) = (
        crate::caps::Ops::AM.with(crate::caps::Ops::STREAM),
        crate::caps::Kinds::HOST,
        crate::caps::Features::POLLABLE_OUTPUT,
    );
    type Listener = TcpAcceptor;

    fn can_connect(
        a: &rcomm_runtime::wire::AddrRecord,
        b: &rcomm_runtime::wire::AddrRecord,
    ) -> bool {
        can_connect(a, b)
    }

    fn refusal(a: &rcomm_runtime::wire::AddrRecord, b: &rcomm_runtime::wire::AddrRecord) -> String {
        format!(
            "no transport reaches pid {} on {} from pid {} on {}",
            b.info.pid, b.info.hostname, a.info.pid, a.info.hostname
        )
    }

    /// On the interface of [`tcp_address`], not the address that reached the launcher: that
    /// is loopback under a single-host launcher, which ranks in other network namespaces or on
    /// other hosts cannot reach.
    fn listen(cx: &ListenCx<'_>) -> Result<Option<TcpAcceptor>, ListenError> {
        let (ifname, ip) = tcp_address(cx.cfg, cx.local_rank).map_err(ListenError::Env)?;
        let a = TcpAcceptor::bind(ip, cx.rank, cx.size, cx.secret, &tcp_config(cx.cfg))?;
        rcomm_runtime::rlog!(Info, "NET", "TCP listener on {} ({ifname})", a.addr());
        Ok(Some(a))
    }

    fn address(l: &TcpAcceptor) -> Option<Vec<u8>> {
        Some(l.addr().to_string().into_bytes())
    }

    /// Always made (in a world of one too): peers are connected to when first used, from
    /// every rank's published address.
    fn connect(l: Option<TcpAcceptor>, cx: &ConnectCx<'_>) -> Result<Option<Self>, TransportError> {
        let addrs = cx
            .records
            .iter()
            .map(|r| {
                crate::transport::published(r, Self::ADDR_KIND)
                    .map(|b| String::from_utf8_lossy(b).into_owned())
            })
            .collect();
        Ok(Some(TcpNet::new(
            cx.rank,
            l,
            addrs,
            tcp_config(cx.cfg),
            cx.secret.clone(),
        )))
    }

    fn caps(&self) -> Caps {
        TcpNet::caps(self)
    }

    fn counters(&self) -> crate::transport::Counters {
        TcpNet::counters(self)
    }

    #[inline]
    fn try_send(
        &mut self,
        peer: u32,
        hdr: &Header,
        payload: &[u8],
    ) -> Result<bool, TransportError> {
        TcpNet::try_send(self, peer, hdr, payload)
    }

    fn send_chunk(
        &mut self,
        peer: u32,
        token: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, TransportError> {
        TcpNet::send_chunk(self, peer, token, offset, data)
    }

    fn progress(&mut self, _budget: usize, out: &mut dyn Deliver) -> Result<usize, TransportError> {
        TcpNet::progress(self, out)
    }

    fn has_queued_output(&self) -> bool {
        TcpNet::has_queued_output(self)
    }

    fn progress_syscalls(&self) -> usize {
        TcpNet::progress_syscalls(self)
    }

    fn wait_fds(&self, set: &mut rcomm_runtime::os::PollSet) {
        TcpNet::wait_fds(self, set)
    }
}
