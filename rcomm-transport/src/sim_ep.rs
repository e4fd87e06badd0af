//! `sim` as a transport endpoint: the real protocol engine of every rank runs over one
//! in-process [`SimNet`], on virtual time. A test builds one [`SimFabric`], one `Net` per rank
//! from it ([`crate::net::Net::sim`]), and drives them: progress every engine, and when none
//! has work, [`SimFabric::advance`] moves virtual time to the next event. Nothing depends on the
//! wall clock or on thread scheduling, so a seed replays a run exactly.
//!
//! What it models, each a knob of [`SimFabricConfig`]: latency and bandwidth per directed link
//! (serialised), jitter (messages of a pair, chunks and one-sided completions overtake each
//! other), a bounded window of unconsumed messages per pair (so senders see back-pressure),
//! which bulk operations the lane offers (STREAM, GET, PUT), whether memory must be registered
//! first (then GET and PUT outside a registration fail, as a verbs NIC would), and ranks failing
//! at a virtual time, mid-transfer included.
//!
//! One-sided operations are carried out by the fabric, not by the target's engine, as a NIC
//! would: a GET request reaches the target, the fabric reads the target's memory there and
//! sends the data back; a PUT carries the data to the target, where the fabric writes it and
//! acknowledges. The initiator sees a completion ([`Deliver::completed`]) when the
//! data or the acknowledgement arrives.
//!
//! Memory is reached by address (every rank is in this process); the engine's rule that a
//! buffer stays valid until its operation completes is what makes that sound, and tests keep
//! their buffers alive until the fabric is idle.

use crate::caps::{Caps, Kinds, Ops};
use crate::error::TransportError;
use crate::mem::{MemRef, RKey, RegCache};
use crate::sim::{SimConfig, SimError, SimEvent, SimNet};
use crate::transport::{ConnectCx, Counters, Deliver, Incoming, Transport, Tx};
use rcomm_runtime::wire::Header;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// How the simulated transport behaves, beyond the network's α, β, jitter and seed.
#[derive(Debug, Clone, PartialEq)]
pub struct SimFabricConfig {
    /// The network (ranks, latency, bandwidth, jitter, seed). Loss must be 0: the engine relies
    /// on a reliable transport, as it does on shared memory, TCP and RC queue pairs.
    pub net: SimConfig,
    /// Bulk operations the lane offers (a subset of STREAM | GET | PUT).
    pub bulk: Ops,
    /// Largest eager payload.
    pub eager_limit: usize,
    /// Largest chunk one `send_chunk` takes.
    pub chunk: usize,
    /// Messages and chunks from one rank to another not yet taken by the receiver's progress;
    /// past it `try_send` says "later".
    pub window: usize,
    /// Whether GET/PUT need registered memory (as verbs do).
    pub needs_reg: bool,
    /// Streams per pair (at least 1): messages, chunks and one-sided traffic of a pair go
    /// round-robin over them, each serialised on its own, so later traffic overtakes earlier
    /// traffic on another stream (as over several TCP connections or rails).
    pub streams: usize,
    /// GET is offered but refused when tried ([`TransportError::Unsupported`], as the kernel
    /// refuses single copy under a strict ptrace policy): the protocol layer must fall back.
    pub refuse_get: bool,
    /// Ranks reach each other's device memory directly (the device lane's GET, on the
    /// device stand-in); false makes device messages stage through host memory.
    pub device_ipc: bool,
}

impl Default for SimFabricConfig {
    fn default() -> Self {
        Self {
            net: SimConfig::default(),
            bulk: Ops::STREAM.with(Ops::GET),
            eager_limit: 64,
            chunk: 1024,
            window: 8,
            needs_reg: false,
            streams: 1,
            refuse_get: false,
            device_ipc: true,
        }
    }
}

/// What a fabric counted, for tests to prove which protocol carried the bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Active messages delivered.
    pub msgs: u64,
    /// Stream chunks delivered.
    pub chunks: u64,
    /// GETs completed.
    pub gets: u64,
    /// PUTs completed.
    pub puts: u64,
    /// Registrations made (cache misses).
    pub registrations: u64,
    /// One-sided operations refused (unregistered memory).
    pub refused: u64,
    /// Completions dropped because the initiator quiesced the operation first.
    pub cancelled: u64,
    /// Deliveries that overtook something sent earlier on the same pair (jitter, streams).
    pub overtaken: u64,
}

enum Arrival {
    Msg {
        from: u32,
        hdr: Header,
        payload: Vec<u8>,
    },
    Chunk {
        from: u32,
        token: u64,
        offset: u64,
        data: Vec<u8>,
    },
    Done {
        peer: u32,
        tok: u64,
        res: Result<(), String>,
    },
    Lost {
        peer: u32,
    },
}

/// Registrations a sim endpoint keeps (the oldest is deregistered past it).
const REG_CACHE: usize = 4096;

const K_MSG: u8 = 0;
const K_CHUNK: u8 = 1;
const K_GET_REQ: u8 = 2;
const K_GET_DATA: u8 = 3;
const K_PUT_DATA: u8 = 4;
const K_ACK: u8 = 5;

struct Fabric {
    cfg: SimFabricConfig,
    net: SimNet,
    inbox: Vec<VecDeque<Arrival>>,
    /// Messages from `a` to `b` not yet taken, at `a * ranks + b`.
    unread: Vec<usize>,
    /// Registered ranges per rank (needs_reg only).
    regs: Vec<Vec<(u64, usize)>>,
    /// (initiator, token) of operations quiesced before they completed.
    cancelled: HashSet<(u32, u64)>,
    stats: FabricStats,
    /// Every delivery, in order: (virtual time, from, to, kind), for replay checks.
    trace: Vec<(u64, u32, u32, u8)>,
    /// Sends so far per pair (`from * ranks + to`), which pick the stream.
    sent: Vec<u64>,
    /// Highest message id delivered per pair, plus one (0: none yet).
    newest: Vec<u64>,
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// Reads `len` bytes at `addr` of this process.
///
/// # Safety
/// `addr..addr + len` is memory a rank's engine exposed for this operation and keeps valid
/// until the operation completes (see the module notes).
unsafe fn read_at(addr: u64, len: usize) -> Vec<u8> {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec()
}

/// Writes `data` at `addr` of this process.
///
/// # Safety
/// As [`read_at`], and nothing else accesses that memory meanwhile (the engine holds it for
/// the operation).
unsafe fn write_at(addr: u64, data: &[u8]) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) }
}

impl Fabric {
    fn registered(&self, rank: u32, addr: u64, len: usize) -> bool {
        !self.cfg.needs_reg
            || self.regs[rank as usize]
                .iter()
                .any(|&(a, l)| a <= addr && addr + len as u64 <= a + l as u64)
    }

    fn send(&mut self, from: u32, to: u32, bytes: Vec<u8>) {
        let k = from as usize * self.cfg.net.ranks + to as usize;
        let stream = (self.sent[k] % self.cfg.streams.max(1) as u64) as usize;
        self.sent[k] += 1;
        // A send to a failed rank vanishes, as on a broken link; its loss is reported by the
        // failure notice.
        let _ = self.net.send_on(from as usize, to as usize, stream, bytes);
    }

    /// Reports operation `tok` of initiator `to` with target `from` complete (`ok`: the
    /// target reached its memory); false, and nothing reported, when the initiator quiesced it
    /// first or the target refused.
    fn complete(&mut self, to: u32, from: u32, tok: u64, ok: bool) -> bool {
        if self.cancelled.remove(&(to, tok)) {
            self.stats.cancelled += 1;
            return false;
        }
        let res = if ok {
            Ok(())
        } else {
            Err("remote memory not registered".to_string())
        };
        self.inbox[to as usize].push_back(Arrival::Done {
            peer: from,
            tok,
            res,
        });
        ok
    }

    /// Handles one network event; one-sided operations are carried out here.
    fn on_event(&mut self, ev: SimEvent) {
        let (at, from, to, payload) = match ev {
            SimEvent::Deliver {
                at,
                from,
                to,
                payload,
                id,
            } => {
                let k = from * self.cfg.net.ranks + to;
                if id.0 + 1 < self.newest[k] {
                    self.stats.overtaken += 1;
                }
                self.newest[k] = self.newest[k].max(id.0 + 1);
                (at, from as u32, to as u32, payload)
            }
            SimEvent::PeerFailed {
                observer, failed, ..
            } => {
                self.inbox[observer].push_back(Arrival::Lost {
                    peer: failed as u32,
                });
                return;
            }
            SimEvent::Dropped { .. } => return,
        };
        self.trace.push((at, from, to, payload[0]));
        let b = &payload[1..];
        match payload[0] {
            K_MSG => {
                let Ok(hdr) = Header::decode(&b[..Header::LEN]) else {
                    return;
                };
                self.inbox[to as usize].push_back(Arrival::Msg {
                    from,
                    hdr,
                    payload: b[Header::LEN..].to_vec(),
                });
            }
            K_CHUNK => self.inbox[to as usize].push_back(Arrival::Chunk {
                from,
                token: u64_at(b, 0),
                offset: u64_at(b, 8),
                data: b[16..].to_vec(),
            }),
            K_GET_REQ => {
                // At the target: read its memory, send the data back.
                let (tok, src, len, dst) = (
                    u64_at(b, 0),
                    u64_at(b, 8),
                    u64_at(b, 16) as usize,
                    u64_at(b, 24),
                );
                let mut out = vec![K_GET_DATA];
                out.extend_from_slice(&tok.to_le_bytes());
                out.extend_from_slice(&dst.to_le_bytes());
                if self.registered(to, src, len) {
                    out.push(1);
                    // SAFETY: the target registered (exposed) this range for the GET and its
                    // engine keeps the buffer until the initiator's FIN.
                    out.extend_from_slice(&unsafe { read_at(src, len) });
                } else {
                    self.stats.refused += 1;
                    out.push(0);
                }
                self.send(to, from, out);
            }
            K_GET_DATA => {
                let (tok, dst, ok) = (u64_at(b, 0), u64_at(b, 8), b[16] == 1);
                if self.complete(to, from, tok, ok) {
                    // SAFETY: the initiator's engine holds `dst` for this GET until it
                    // completes, and it was not quiesced (checked by `complete`).
                    unsafe { write_at(dst, &b[17..]) };
                    self.stats.gets += 1;
                }
            }
            K_PUT_DATA => {
                let (tok, dst) = (u64_at(b, 0), u64_at(b, 8));
                let data = &b[16..];
                let ok = self.registered(to, dst, data.len());
                if ok {
                    // SAFETY: the target registered this range for the PUT (its CTS) and
                    // holds the buffer until the sender's FIN.
                    unsafe { write_at(dst, data) };
                } else {
                    self.stats.refused += 1;
                }
                let mut out = vec![K_ACK];
                out.extend_from_slice(&tok.to_le_bytes());
                out.push(ok as u8);
                self.send(to, from, out);
            }
            // `complete` reports the PUT (or its refusal) either way; the arm counts successes.
            K_ACK if self.complete(to, from, u64_at(b, 0), b[8] == 1) => self.stats.puts += 1,
            _ => {}
        }
    }
}

/// One simulated network shared by the endpoints of every rank of a test.
#[derive(Clone)]
pub struct SimFabric(Arc<Mutex<Fabric>>);

impl std::fmt::Debug for SimFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimFabric").finish_non_exhaustive()
    }
}

impl SimFabric {
    /// A fabric for `cfg.net.ranks` ranks; the network's configuration is checked.
    pub fn new(cfg: SimFabricConfig) -> Result<Self, SimError> {
        if cfg.net.loss != 0.0 {
            return Err(SimError::BadLoss {
                value: cfg.net.loss,
            });
        }
        let n = cfg.net.ranks;
        let net = SimNet::new(cfg.net.clone())?;
        Ok(Self(Arc::new(Mutex::new(Fabric {
            net,
            inbox: (0..n).map(|_| VecDeque::new()).collect(),
            unread: vec![0; n * n],
            regs: vec![Vec::new(); n],
            cancelled: HashSet::new(),
            stats: FabricStats::default(),
            trace: Vec::new(),
            sent: vec![0; n * n],
            newest: vec![0; n * n],
            cfg,
        }))))
    }

    fn lock(&self) -> MutexGuard<'_, Fabric> {
        // A panic in one test thread must not hide the fabric from the assertion after it.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves virtual time to the next event and handles it; false when nothing is in flight
    /// (with work still pending somewhere, the protocol is stuck).
    pub fn advance(&self) -> bool {
        let mut f = self.lock();
        match f.net.step() {
            Some(ev) => {
                f.on_event(ev);
                true
            }
            None => false,
        }
    }

    /// Virtual time, ns.
    pub fn now(&self) -> u64 {
        self.lock().net.now()
    }

    /// Fails `rank` at virtual time `at` (now if `at` is not later).
    pub fn fail_at(&self, rank: u32, at: u64) -> Result<(), SimError> {
        let mut f = self.lock();
        let at = at.max(f.net.now());
        f.net.fail_rank_at(rank as usize, at)
    }

    /// Whether `rank` has failed.
    pub fn is_failed(&self, rank: u32) -> bool {
        self.lock().net.is_failed(rank as usize)
    }

    /// What was counted so far.
    pub fn stats(&self) -> FabricStats {
        self.lock().stats
    }

    /// Every delivery so far: (virtual time, from, to, record kind).
    pub fn trace(&self) -> Vec<(u64, u32, u32, u8)> {
        self.lock().trace.clone()
    }

    /// The endpoint of rank `me`.
    pub fn endpoint(&self, me: u32) -> SimEndpoint {
        SimEndpoint {
            me,
            fabric: self.clone(),
            counters: Counters::default(),
            regs: RegCache::new(REG_CACHE),
        }
    }

    /// The configuration.
    pub fn config(&self) -> SimFabricConfig {
        self.lock().cfg.clone()
    }
}

/// One rank's endpoint on a [`SimFabric`].
#[derive(Debug)]
pub struct SimEndpoint {
    me: u32,
    fabric: SimFabric,
    counters: Counters,
    /// Registrations made (needs_reg), found again for reused buffers.
    regs: RegCache<()>,
}

impl SimEndpoint {
    /// What the simulated transport offers.
    pub fn caps(&self) -> Caps {
        let c = self.fabric.lock().cfg.clone();
        Caps {
            latency_s: c.net.latency_ns as f64 * 1e-9,
            bandwidth_bps: c.net.bandwidth_bytes_per_s,
            eager_limit: c.eager_limit,
            max_frame: c.eager_limit.max(c.chunk),
            ops: Ops::AM.with(c.bulk),
            kinds: Kinds::HOST,
            needs_reg: c.needs_reg,
            rkey_len: 16,
            features: <Self as Transport>::OFFERS.2,
        }
    }

    /// Byte counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    fn window_open(f: &Fabric, from: u32, to: u32) -> bool {
        let n = f.cfg.net.ranks;
        f.unread[from as usize * n + to as usize] < f.cfg.window
    }

    fn push(&mut self, f: &mut Fabric, to: u32, bytes: Vec<u8>) -> Result<(), TransportError> {
        if f.net.is_failed(to as usize) {
            return Err(TransportError::PeerClosed { peer: to });
        }
        let n = f.cfg.net.ranks;
        f.unread[self.me as usize * n + to as usize] += 1;
        f.send(self.me, to, bytes);
        Ok(())
    }

    /// Sends a message if the window to `peer` is open; `Ok(false)` otherwise.
    pub fn try_send(
        &mut self,
        peer: u32,
        hdr: &Header,
        payload: &[u8],
    ) -> Result<bool, TransportError> {
        let fabric = self.fabric.clone();
        let mut f = fabric.lock();
        if payload.len() > f.cfg.eager_limit.max(f.cfg.chunk) {
            return Err(TransportError::Protocol {
                peer,
                why: format!("{} bytes exceed the sim frame limit", payload.len()),
            });
        }
        if !Self::window_open(&f, self.me, peer) {
            return Ok(false);
        }
        let mut b = Vec::with_capacity(1 + Header::LEN + payload.len());
        b.push(K_MSG);
        b.extend_from_slice(&hdr.encode());
        b.extend_from_slice(payload);
        self.push(&mut f, peer, b)?;
        self.counters.msgs_sent += 1;
        self.counters.bytes_sent += payload.len() as u64;
        Ok(true)
    }

    /// Sends up to one chunk of `data`; returns the bytes taken (0: window closed).
    pub fn send_chunk(
        &mut self,
        peer: u32,
        token: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, TransportError> {
        let fabric = self.fabric.clone();
        let mut f = fabric.lock();
        if !f.cfg.bulk.contains(Ops::STREAM) {
            return Err(TransportError::Unsupported {
                peer,
                op: "stream",
                why: "the sim lane offers no stream".into(),
            });
        }
        if !Self::window_open(&f, self.me, peer) {
            return Ok(0);
        }
        let n = data.len().min(f.cfg.chunk);
        let mut b = Vec::with_capacity(17 + n);
        b.push(K_CHUNK);
        b.extend_from_slice(&token.to_le_bytes());
        b.extend_from_slice(&offset.to_le_bytes());
        b.extend_from_slice(&data[..n]);
        self.push(&mut f, peer, b)?;
        self.counters.bytes_sent += n as u64;
        Ok(n)
    }

    /// The remote key of `m`: address and length; registers it first if the fabric needs it.
    pub fn register(&mut self, m: &MemRef) -> RKey {
        let fabric = self.fabric.clone();
        let mut f = fabric.lock();
        if f.cfg.needs_reg && self.regs.find(m).is_none() {
            let me = self.me as usize;
            f.regs[me].push((m.addr, m.len));
            f.stats.registrations += 1;
            if self.regs.insert(m, ()).is_some() {
                // Deregistered: the oldest registration goes with the cache's oldest entry.
                f.regs[me].remove(0);
            }
        }
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&m.addr.to_le_bytes());
        k[8..].copy_from_slice(&(m.len as u64).to_le_bytes());
        RKey::new(&k).expect("16 bytes fit")
    }

    fn key(peer: u32, key: &RKey, len: usize) -> Result<u64, TransportError> {
        match (key.u64_at(0), key.u64_at(1)) {
            (Some(a), Some(l)) if len as u64 <= l => Ok(a),
            _ => Err(TransportError::Protocol {
                peer,
                why: "sim remote key does not cover the transfer".into(),
            }),
        }
    }

    /// Starts a GET of `dst.len` bytes from `peer`'s memory at `key` into `dst`; it completes
    /// through [`Deliver::completed`] with `tok`.
    pub fn get(
        &mut self,
        peer: u32,
        dst: MemRef,
        key: &RKey,
        tok: u64,
    ) -> Result<(), TransportError> {
        let src = Self::key(peer, key, dst.len)?;
        let fabric = self.fabric.clone();
        let mut f = fabric.lock();
        if f.cfg.refuse_get {
            f.stats.refused += 1;
            return Err(TransportError::Unsupported {
                peer,
                op: "get",
                why: "refused by the sim's refuse_get".into(),
            });
        }
        let mut b = vec![K_GET_REQ];
        for w in [tok, src, dst.len as u64, dst.addr] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        if f.net.is_failed(peer as usize) {
            return Err(TransportError::PeerClosed { peer });
        }
        f.send(self.me, peer, b);
        self.counters.bytes_cma += dst.len as u64;
        Ok(())
    }

    /// Starts a PUT of `src` into `peer`'s memory at `key`; completes through
    /// [`Deliver::completed`] with `tok` once the target acknowledged it.
    pub fn put(
        &mut self,
        peer: u32,
        src: MemRef,
        key: &RKey,
        tok: u64,
    ) -> Result<(), TransportError> {
        let dst = Self::key(peer, key, src.len)?;
        let fabric = self.fabric.clone();
        let mut f = fabric.lock();
        if !f.registered(self.me, src.addr, src.len) {
            f.stats.refused += 1;
            return Err(TransportError::Protocol {
                peer,
                why: "PUT from unregistered memory".into(),
            });
        }
        if f.net.is_failed(peer as usize) {
            return Err(TransportError::PeerClosed { peer });
        }
        let mut b = vec![K_PUT_DATA];
        b.extend_from_slice(&tok.to_le_bytes());
        b.extend_from_slice(&dst.to_le_bytes());
        // SAFETY: the engine holds `src` for this PUT until it completes or is quiesced; the
        // bytes are taken now, as a NIC reads them once.
        b.extend_from_slice(&unsafe { read_at(src.addr, src.len) });
        f.send(self.me, peer, b);
        self.counters.bytes_sent += src.len as u64;
        Ok(())
    }

    /// Makes sure operation `tok` no longer touches its local buffer: a completion still in
    /// flight is dropped (the engine restarts or abandons the operation).
    pub fn quiesce(&mut self, tok: u64) {
        self.fabric.lock().cancelled.insert((self.me, tok));
    }

    /// Hands what arrived to `out`, at most `budget` arrivals; a peer's failure is reported as
    /// an error after what arrived before it.
    pub fn progress(
        &mut self,
        budget: usize,
        out: &mut dyn Deliver,
    ) -> Result<usize, TransportError> {
        let mut n = 0;
        while n < budget {
            let a = {
                let mut f = self.fabric.lock();
                let a = f.inbox[self.me as usize].pop_front();
                let from = match &a {
                    Some(Arrival::Msg { from, .. }) | Some(Arrival::Chunk { from, .. }) => {
                        Some(*from)
                    }
                    _ => None,
                };
                if let Some(from) = from {
                    let r = f.cfg.net.ranks;
                    f.unread[from as usize * r + self.me as usize] -= 1;
                    match &a {
                        Some(Arrival::Msg { .. }) => f.stats.msgs += 1,
                        _ => f.stats.chunks += 1,
                    }
                }
                a
            };
            let Some(a) = a else { break };
            n += 1;
            match a {
                Arrival::Msg { from, hdr, payload } => {
                    self.counters.msgs_recv += 1;
                    self.counters.bytes_recv += payload.len() as u64;
                    out.incoming(from, Incoming::Msg(&hdr, &payload));
                }
                Arrival::Chunk {
                    from,
                    token,
                    offset,
                    data,
                } => {
                    self.counters.bytes_recv += data.len() as u64;
                    out.incoming(
                        from,
                        Incoming::Chunk {
                            token,
                            offset,
                            data: &data,
                        },
                    );
                }
                Arrival::Done { peer, tok, res } => {
                    out.completed(
                        peer,
                        tok,
                        res.map_err(|why| TransportError::Protocol { peer, why }),
                    );
                }
                Arrival::Lost { peer } => return Err(TransportError::PeerClosed { peer }),
            }
        }
        Ok(n)
    }
}

/// The contract, as the smallest transport shows it: messages and whichever bulk operations
/// the fabric's configuration offers, all completing through progress. It is never chosen
/// from address records (`can_connect` is false, setup makes none): a test builds its
/// endpoints from a [`SimFabric`] ([`crate::net::Net::sim`]).
impl Transport for SimEndpoint {
    const NAME: &'static str = "sim";
    const OFFERS: (Ops, Kinds, crate::caps::Features) = (
        Ops::AM.with(Ops::STREAM).with(Ops::GET).with(Ops::PUT),
        Kinds::HOST,
        crate::caps::Features::NONE,
    );
    type Listener = ();

    fn can_connect(
        _: &rcomm_runtime::wire::AddrRecord,
        _: &rcomm_runtime::wire::AddrRecord,
    ) -> bool {
        false
    }

    fn connect(_: Option<()>, _: &ConnectCx<'_>) -> Result<Option<Self>, TransportError> {
        Ok(None)
    }

    fn caps(&self) -> Caps {
        SimEndpoint::caps(self)
    }

    fn counters(&self) -> Counters {
        self.counters
    }

    fn try_send(
        &mut self,
        peer: u32,
        hdr: &Header,
        payload: &[u8],
    ) -> Result<bool, TransportError> {
        SimEndpoint::try_send(self, peer, hdr, payload)
    }

    fn send_chunk(
        &mut self,
        peer: u32,
        token: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, TransportError> {
        SimEndpoint::send_chunk(self, peer, token, offset, data)
    }

    fn register(&mut self, _peer: u32, m: &MemRef) -> Result<RKey, TransportError> {
        Ok(SimEndpoint::register(self, m))
    }

    fn get(&mut self, peer: u32, dst: MemRef, key: &RKey, tok: u64) -> Result<Tx, TransportError> {
        SimEndpoint::get(self, peer, dst, key, tok).map(|()| Tx::Pending)
    }

    fn put(&mut self, peer: u32, src: MemRef, key: &RKey, tok: u64) -> Result<Tx, TransportError> {
        SimEndpoint::put(self, peer, src, key, tok).map(|()| Tx::Pending)
    }

    fn quiesce(&mut self, _peer: u32, tok: u64) {
        SimEndpoint::quiesce(self, tok)
    }

    fn progress(&mut self, budget: usize, out: &mut dyn Deliver) -> Result<usize, TransportError> {
        SimEndpoint::progress(self, budget, out)
    }
}
