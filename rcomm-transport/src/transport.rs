//! What a transport is: the one contract every transport of this crate keeps, and the types
//! the transports and [`crate::net::Net`] share.
//!
//! A transport is a type implementing [`Transport`]: the per-message operations (send, stream,
//! one-sided GET and PUT, progress), what it offers ([`Caps`], with [`Features`] for everything
//! beyond the operations), and how it is set up in the two steps every rank takes alike —
//! [`listen`](Transport::listen) before the address records are swapped (its
//! [`address`](Transport::address) is published as opaque bytes), then
//! [`connect`](Transport::connect) once every record is known. A transport that lacks an
//! operation keeps the default, which says so; callers ask by capability, never by name.
//!
//! The transports themselves are listed once, in [`crate::table`]: a line per transport makes
//! its [`Descriptor`] and its arm of the static dispatch over all of them.

use crate::caps::{Caps, Features, Kinds, Ops};
use crate::error::TransportError;
use crate::mem::{MemKind, MemRef, RKey};
use rcomm_runtime::auth::Secret;
use rcomm_runtime::config::Config;
use rcomm_runtime::os::PollSet;
use rcomm_runtime::wire::{AddrRecord, EndpointAddr, Header};

/// Something that arrived from a peer.
#[derive(Debug)]
pub enum Incoming<'a> {
    /// A message: header and payload (eager data or a protocol record).
    Msg(&'a Header, &'a [u8]),
    /// A chunk of a rendezvous payload for the receive named by `token`.
    Chunk {
        /// The receiver's token from its CTS.
        token: u64,
        /// Offset of the chunk in the message.
        offset: u64,
        /// The bytes.
        data: &'a [u8],
    },
}

/// Byte counters of one transport, for tests and diagnostics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Messages sent.
    pub msgs_sent: u64,
    /// Payload bytes sent (eager payloads and chunks).
    pub bytes_sent: u64,
    /// Messages received.
    pub msgs_recv: u64,
    /// Payload bytes received.
    pub bytes_recv: u64,
    /// Bytes read from peers by single copy.
    pub bytes_cma: u64,
    /// Of `msgs_recv`, those a receive took straight from the transport
    /// ([`Transport::pop_from`]: a blocking one waiting there, a non-blocking one posted after
    /// its message): shows that the direct path runs.
    pub msgs_direct: u64,
    /// Looks at the peers' connections for one that closed ([`Transport::dead_peer`], a
    /// system call per peer): waits take one per period of waiting, never one per wait.
    pub liveness_polls: u64,
    /// Progress passes that read the connections and found nothing (TCP: a system call per
    /// connection each): with shared cores a wait makes a few before it sleeps, not a spin
    /// budget's worth.
    pub empty_polls: u64,
}

/// How an asynchronous operation went when it was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tx {
    /// Done already: the buffer is free again (a synchronous mover, such as single copy).
    Done,
    /// Under way: [`Deliver::completed`] reports it with its token.
    Pending,
}

/// Where a transport's progress hands what arrives and what completed: the protocol layer.
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

    /// The asynchronous operation `tok` with `peer` ([`Transport::get`], [`Transport::put`])
    /// completed: its buffer is free again.
    fn completed(&mut self, peer: u32, tok: u64, res: Result<(), TransportError>);
}

/// What a transport's [`listen`](Transport::listen) is given: this rank's place in the job.
#[derive(Debug)]
pub struct ListenCx<'a> {
    /// The settings.
    pub cfg: &'a Config,
    /// The job's id (names node-local rendezvous points).
    pub job_id: &'a str,
    /// World rank and size.
    pub rank: u32,
    /// World size.
    pub size: u32,
    /// Rank and size among the ranks of this node.
    pub local_rank: u32,
    /// Ranks on this node.
    pub local_size: u32,
    /// What peers must prove they know.
    pub secret: &'a Secret,
}

/// Why a transport could not listen.
#[derive(Debug)]
pub enum ListenError {
    /// The environment rules it out (no interface, a name taken, a device the settings ask
    /// for missing): before any peer is involved.
    Env(String),
    /// Binding failed.
    Transport(TransportError),
}

impl From<TransportError> for ListenError {
    fn from(e: TransportError) -> Self {
        ListenError::Transport(e)
    }
}

/// What a transport's [`connect`](Transport::connect) is given: every rank's record, and the
/// peers this transport is to serve.
#[derive(Debug)]
pub struct ConnectCx<'a> {
    /// The settings.
    pub cfg: &'a Config,
    /// This rank.
    pub rank: u32,
    /// Every rank's record, by rank.
    pub records: &'a [AddrRecord],
    /// By rank: whether this transport serves the peer (it is the peer's route, or, for a
    /// bulk-only lane, it reaches the peer beside the route).
    pub reach: &'a [bool],
    /// What peers must prove they know.
    pub secret: &'a Secret,
}

impl ConnectCx<'_> {
    /// The peers this transport serves.
    pub fn peers(&self) -> impl Iterator<Item = u32> + '_ {
        self.reach
            .iter()
            .enumerate()
            .filter(|(_, r)| **r)
            .map(|(p, _)| p as u32)
    }
}

/// The bytes a transport published under `kind` in record `r` (see [`Transport::ADDR_KIND`]),
/// if it did.
pub fn published(r: &AddrRecord, kind: u8) -> Option<&[u8]> {
    r.endpoints.iter().find_map(|e| match (e, kind) {
        (EndpointAddr::Tcp(a), ADDR_TCP) => Some(a.as_bytes()),
        (EndpointAddr::Local(n), ADDR_LOCAL) => Some(n.as_bytes()),
        (EndpointAddr::Other { kind: k, data }, _) if *k == kind => Some(&data[..]),
        _ => None,
    })
}

/// The record entry publishing `bytes` under `kind` (the wire's text forms for the kinds it
/// knows as text, so records stay what they were).
pub fn publish(kind: u8, bytes: Vec<u8>) -> EndpointAddr {
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    match kind {
        ADDR_TCP => EndpointAddr::Tcp(text(bytes)),
        ADDR_LOCAL => EndpointAddr::Local(text(bytes)),
        _ => EndpointAddr::Other { kind, data: bytes },
    }
}

/// The record kind of a TCP listener's address (text `ip:port`).
pub const ADDR_TCP: u8 = 1;
/// The record kind of a local channel's name.
pub const ADDR_LOCAL: u8 = 2;
/// No address published.
pub const ADDR_NONE: u8 = 0;

/// Whether two records' peers share a node: hostname, boot id and network namespace.
pub fn same_node(a: &AddrRecord, b: &AddrRecord) -> bool {
    a.info.same_node(&b.info)
}

/// `op` is not offered by this transport.
pub fn unsupported(peer: u32, op: &'static str) -> TransportError {
    TransportError::Unsupported {
        peer,
        op,
        why: "no transport lane offers it to this peer".into(),
    }
}

/// The contract of a transport. The per-message methods are called through the static
/// dispatch of [`crate::table::Endpoint`] (a `match`, no `dyn`); what a transport does not
/// offer keeps its default, and its [`Caps`] say so, so callers never try.
pub trait Transport: Sized {
    /// Its name (logs, counters, `RCOMM_TRANSPORT`).
    const NAME: &'static str;
    /// The record kind its published address travels under ([`ADDR_NONE`]: it publishes none).
    const ADDR_KIND: u8 = ADDR_NONE;
    /// What it offers at most: operations, memory kinds and features. An endpoint's
    /// [`caps`](Self::caps) may offer less (a setting, a device without GPUDirect), never more,
    /// and its features are these.
    const OFFERS: (Ops, Kinds, Features);
    /// The memory kinds of which it makes node-local shared windows
    /// ([`window_create`](Self::window_create)).
    const WINDOWS: Kinds = Kinds::NONE;

    /// What [`listen`](Self::listen) leaves for [`connect`](Self::connect).
    type Listener;

    /// Whether it reaches between the ranks of two records, judged from both alone, so the
    /// judgement is symmetric and the same on both ranks.
    fn can_connect(a: &AddrRecord, b: &AddrRecord) -> bool;

    /// Why it cannot reach between `a` and `b`, for the error when the settings insist on it.
    fn refusal(a: &AddrRecord, b: &AddrRecord) -> String {
        format!(
            "RCOMM_TRANSPORT={}, but it does not reach pid {} on {} from pid {} on {}; use auto or tcp",
            Self::NAME,
            b.info.pid,
            b.info.hostname,
            a.info.pid,
            a.info.hostname
        )
    }

    /// Binds what peers connect to, before the records are swapped (only in a world of more
    /// than one rank); `None`: nothing here (no device, not configured).
    fn listen(_cx: &ListenCx<'_>) -> Result<Option<Self::Listener>, ListenError> {
        Ok(None)
    }

    /// The bytes peers need to connect, published in this rank's record under
    /// [`ADDR_KIND`](Self::ADDR_KIND).
    fn address(_l: &Self::Listener) -> Option<Vec<u8>> {
        None
    }

    /// Connects to the peers of `cx.reach` once every record is known; `None`: this process
    /// has no use for the transport.
    fn connect(
        l: Option<Self::Listener>,
        cx: &ConnectCx<'_>,
    ) -> Result<Option<Self>, TransportError>;

    /// Creates a node-local shared window of `len` bytes of memory of `kind`; its descriptor
    /// is opaque, peers on this node map it with [`window_map`](Self::window_map).
    fn window_create(
        _name: &str,
        _len: usize,
        _kind: MemKind,
    ) -> Result<crate::window::Window, TransportError> {
        Err(unsupported(u32::MAX, "window"))
    }

    /// Maps the window a node peer described by `blob`.
    fn window_map(_blob: &[u8], _kind: MemKind) -> Result<crate::local::Segment, TransportError> {
        Err(unsupported(u32::MAX, "window"))
    }

    /// What it offers.
    fn caps(&self) -> Caps;

    /// Byte counters.
    fn counters(&self) -> Counters;

    /// Sends one message if it takes it now; `Ok(false)` means try again later.
    fn try_send(&mut self, peer: u32, hdr: &Header, payload: &[u8])
    -> Result<bool, TransportError>;

    /// Sends one message whose `len` payload bytes `fill` writes straight into the transport
    /// ([`Features::GATHER`]); `Ok(false)` and `fill` not run: no room now, or no gather.
    fn try_send_with(
        &mut self,
        _peer: u32,
        _hdr: &Header,
        _len: usize,
        _fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, TransportError> {
        Ok(false)
    }

    /// Offers the oldest message from `peer` to `take`, which says whether it took it
    /// ([`Features::DIRECT_POP`]); `None` when nothing is there or it cannot.
    fn pop_from(
        &mut self,
        _peer: u32,
        _take: &mut dyn FnMut(&Header, &[u8]) -> bool,
    ) -> Option<bool> {
        None
    }

    /// Sends a chunk of a rendezvous payload ([`Ops::STREAM`]); returns the bytes taken (0 =
    /// later).
    fn send_chunk(
        &mut self,
        peer: u32,
        _token: u64,
        _offset: u64,
        _data: &[u8],
    ) -> Result<usize, TransportError> {
        Err(unsupported(peer, "stream"))
    }

    /// The bulk operations reaching `peer`'s memory of `kind` now (less than the caps where a
    /// peer refused one, or a setting rules it out).
    fn bulk_ops(&self, _peer: u32, kind: MemKind) -> Ops {
        let c = self.caps();
        if c.kinds.has(kind) {
            c.ops.without(Ops::AM)
        } else {
            Ops::NONE
        }
    }

    /// The key through which `peer` reaches `m` by GET or PUT.
    fn register(&mut self, peer: u32, _m: &MemRef) -> Result<RKey, TransportError> {
        Err(unsupported(peer, "register"))
    }

    /// `peer` is done with the key [`register`](Self::register) gave for `m`
    /// ([`Features::RELEASES_KEYS`]).
    fn release(&mut self, _peer: u32, _m: &MemRef) {}

    /// Reads `dst.len` bytes of `peer`'s memory named by `key` into `dst` ([`Ops::GET`]).
    fn get(
        &mut self,
        peer: u32,
        _dst: MemRef,
        _key: &RKey,
        _tok: u64,
    ) -> Result<Tx, TransportError> {
        Err(unsupported(peer, "get"))
    }

    /// Writes `src` into `peer`'s memory named by `key` ([`Ops::PUT`]).
    fn put(
        &mut self,
        peer: u32,
        _src: MemRef,
        _key: &RKey,
        _tok: u64,
    ) -> Result<Tx, TransportError> {
        Err(unsupported(peer, "put"))
    }

    /// Makes sure operation `tok` with `peer` no longer touches its local buffer; its
    /// completion is then never reported.
    fn quiesce(&mut self, _peer: u32, _tok: u64) {}

    /// Moves data and delivers arrivals and completions (at most about `budget`); returns
    /// how many were delivered.
    fn progress(&mut self, budget: usize, out: &mut dyn Deliver) -> Result<usize, TransportError>;

    /// Whether operations are under way that complete without a descriptor to wait on
    /// (progress must poll them).
    fn busy(&self) -> bool {
        false
    }

    /// Whether output is still queued (progress must continue to flush it).
    fn has_queued_output(&self) -> bool {
        false
    }

    /// System calls a progress pass makes when nothing arrives.
    fn progress_syscalls(&self) -> usize {
        0
    }

    /// Descriptors a sleeping rank waits on.
    fn wait_fds(&self, _set: &mut PollSet) {}

    /// This process is about to sleep: ask peers to wake it, arm completion channels.
    fn begin_sleep(&self) {}

    /// This process is awake again.
    fn end_sleep(&self) {}

    /// A peer seen dead, once.
    fn dead_peer(&mut self) -> Option<u32> {
        None
    }

    /// Closes what was imported from a lost peer.
    fn forget_peer(&mut self, _peer: u32) {}
}

/// One transport as the table lists it: its name, what it offers, and how it is set up. `L`
/// and `E` are the table's listener and endpoint types (one arm per transport).
pub struct Descriptor<L, E> {
    /// [`Transport::NAME`].
    pub name: &'static str,
    /// [`Transport::OFFERS`]'s operations.
    pub ops: Ops,
    /// [`Transport::OFFERS`]'s memory kinds.
    pub kinds: Kinds,
    /// [`Transport::OFFERS`]'s features.
    pub features: Features,
    /// [`Transport::WINDOWS`].
    pub windows: Kinds,
    /// [`Transport::can_connect`].
    pub can_connect: fn(&AddrRecord, &AddrRecord) -> bool,
    /// [`Transport::refusal`].
    pub refusal: fn(&AddrRecord, &AddrRecord) -> String,
    /// [`Transport::listen`].
    pub listen: fn(&ListenCx<'_>) -> Result<Option<L>, ListenError>,
    /// [`Transport::address`] as a record entry.
    pub address: fn(&L) -> Option<EndpointAddr>,
    /// [`Transport::connect`], `None` for the listener when this transport has none here.
    pub connect: fn(Option<L>, &ConnectCx<'_>) -> Result<Option<E>, TransportError>,
    /// [`Transport::window_create`].
    pub window_create: fn(&str, usize, MemKind) -> Result<crate::window::Window, TransportError>,
    /// [`Transport::window_map`].
    pub window_map: fn(&[u8], MemKind) -> Result<crate::local::Segment, TransportError>,
}

impl<L, E> Descriptor<L, E> {
    /// Whether it carries messages (and so may be a peer's route); otherwise it is a bulk lane
    /// beside a route.
    pub const fn carries_messages(&self) -> bool {
        self.ops.contains(Ops::AM)
    }
}

impl<L, E> std::fmt::Debug for Descriptor<L, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descriptor")
            .field("name", &self.name)
            .field("ops", &self.ops)
            .field("kinds", &self.kinds)
            .field("features", &self.features)
            .finish()
    }
}
