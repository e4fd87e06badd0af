//! The device-memory bulk lane: GET of a peer's device memory on this node by CUDA IPC (or
//! the stand-in's equivalent), through [`crate::gpu`]. It carries no messages (its table row
//! offers no `AM`): the engine's RTS, CTS and FIN travel on the peer's message lane, beside
//! which this lane serves the peers whose route is node-local. A pair it cannot serve (another
//! GPU without peer access, `RCOMM_P2P_LEVEL`) falls back to staging through host memory over
//! the message lane's STREAM. The device backend is loaded on first use: a process that never
//! touches device memory never loads the CUDA driver.

use crate::caps::{Caps, Features, Kinds, Ops};
use crate::error::TransportError;
use crate::gpu::{Gpu, GpuError, Pending};
use crate::mem::{MemKind, MemRef, RKey};
use crate::transport::{ConnectCx, Counters, Deliver, ListenCx, ListenError, Transport, Tx};
use rcomm_runtime::fastmap::FastMap;
use rcomm_runtime::wire::{AddrRecord, Header};

/// The device lane of one process.
#[derive(Debug)]
pub struct CudaEndpoint {
    /// The device backend, once loaded.
    gpu: Option<&'static Gpu>,
    /// Copies under way, by the engine's token: (peer, bytes, the copy).
    pending: FastMap<u64, (u32, usize, Pending)>,
    counters: Counters,
}

fn refused(peer: u32, op: &'static str, e: GpuError) -> TransportError {
    TransportError::Unsupported {
        peer,
        op,
        why: e.to_string(),
    }
}

impl CudaEndpoint {
    /// The lane over this process's device backend.
    pub fn new(gpu: &'static Gpu) -> Self {
        Self {
            gpu: Some(gpu),
            ..Self::lazy()
        }
    }

    /// The lane, loading the device backend when first used.
    pub fn lazy() -> Self {
        Self {
            gpu: None,
            pending: FastMap::default(),
            counters: Counters::default(),
        }
    }

    fn gpu(&mut self, peer: u32) -> Result<&'static Gpu, TransportError> {
        if let Some(g) = self.gpu {
            return Ok(g);
        }
        let g = crate::gpu::gpu().map_err(|e| refused(peer, "device get", e))?;
        self.gpu = Some(g);
        Ok(g)
    }

    /// What it offers: GET of device memory, into device or host memory.
    pub fn caps(&self) -> Caps {
        Caps {
            latency_s: 1e-5,
            bandwidth_bps: 1e12,
            eager_limit: 0,
            max_frame: 0,
            ops: Ops::GET,
            kinds: Kinds {
                host: false,
                cuda: true,
            },
            needs_reg: true,
            rkey_len: crate::mem::RKEY_MAX,
            features: <Self as Transport>::OFFERS.2,
        }
    }

    /// Bytes moved (as `bytes_recv` and `bytes_cma`: this side pulled them) and copies done.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The key through which a peer on this node pulls `m` (device memory), exported once per
    /// allocation.
    pub fn register(&mut self, peer: u32, m: &MemRef) -> Result<RKey, TransportError> {
        self.gpu(peer)?
            .export(m.addr, m.len)
            .map_err(|e| refused(peer, "export", e))
    }

    /// Starts pulling `dst.len` bytes of `peer`'s memory named by `key` into `dst`;
    /// completion comes through `progress`. Unsupported: this pair cannot copy directly.
    pub fn get(
        &mut self,
        peer: u32,
        dst: MemRef,
        key: &RKey,
        tok: u64,
    ) -> Result<(), TransportError> {
        let p = self
            .gpu(peer)?
            .get(peer, key, dst.addr, dst.len)
            .map_err(|e| refused(peer, "device get", e))?;
        self.pending.insert(tok, (peer, dst.len, p));
        Ok(())
    }

    /// Reports finished copies.
    pub fn progress(&mut self, out: &mut dyn Deliver) -> usize {
        let Some(gpu) = self.gpu.filter(|_| !self.pending.is_empty()) else {
            return 0;
        };
        let mut done = Vec::new();
        for (&tok, (_, _, p)) in self.pending.iter() {
            match gpu.query(p) {
                Ok(false) => {}
                Ok(true) => done.push((tok, Ok(()))),
                Err(e) => done.push((tok, Err(e))),
            }
        }
        let n = done.len();
        for (tok, res) in done {
            let (peer, len, p) = self.pending.remove(&tok).expect("present");
            let res = res
                .and_then(|()| gpu.release(p))
                .map_err(|e| TransportError::Protocol {
                    peer,
                    why: format!("device copy failed: {e}"),
                });
            if res.is_ok() {
                self.counters.msgs_recv += 1;
                self.counters.bytes_recv += len as u64;
                self.counters.bytes_cma += len as u64;
            }
            out.completed(peer, tok, res);
        }
        n
    }

    /// Waits until copy `tok` no longer writes its destination; it is then forgotten.
    pub fn quiesce(&mut self, tok: u64) {
        if let (Some(g), Some((_, _, p))) = (self.gpu, self.pending.remove(&tok)) {
            let _ = g.finish(p);
        }
    }

    /// Whether copies are under way (progress must poll them).
    pub fn busy(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Closes what was imported from `peer`.
    pub fn forget_peer(&mut self, peer: u32) {
        if let Some(g) = self.gpu {
            g.forget_peer(peer);
        }
    }
}

/// The contract: a bulk lane (GET of device memory) beside a node-local route; no messages.
impl Transport for CudaEndpoint {
    const NAME: &'static str = "cuda";
    const OFFERS: (Ops, Kinds, Features) = (Ops::GET, Kinds::CUDA, Features::NODE_LOCAL);
    type Listener = ();

    /// Device memory is shared by IPC between processes of one node.
    fn can_connect(a: &AddrRecord, b: &AddrRecord) -> bool {
        crate::transport::same_node(a, b)
    }

    /// No listener of its own: the job's id and secret go to the device layer, which hands
    /// node peers the descriptors of shareable (VMM, pool) allocations over the local channel.
    fn listen(cx: &ListenCx<'_>) -> Result<Option<()>, ListenError> {
        crate::gpu::fdshare::set_job(cx.job_id, cx.secret);
        Ok(None)
    }

    fn connect(_: Option<()>, cx: &ConnectCx<'_>) -> Result<Option<Self>, TransportError> {
        Ok(cx.peers().next().map(|_| Self::lazy()))
    }

    fn caps(&self) -> Caps {
        CudaEndpoint::caps(self)
    }

    fn counters(&self) -> Counters {
        self.counters
    }

    fn try_send(&mut self, peer: u32, _: &Header, _: &[u8]) -> Result<bool, TransportError> {
        Err(crate::transport::unsupported(peer, "message"))
    }

    /// GET of device memory, where the settings allow direct device copies and a device
    /// backend loads (which this asks for: only device memory asks).
    fn bulk_ops(&self, _peer: u32, kind: MemKind) -> Ops {
        let on = matches!(kind, MemKind::Cuda { .. })
            && rcomm_runtime::config::p2p_level() != rcomm_runtime::config::P2pLevel::Off
            && crate::gpu::gpu_if_present().is_some();
        if on { Ops::GET } else { Ops::NONE }
    }

    fn register(&mut self, peer: u32, m: &MemRef) -> Result<RKey, TransportError> {
        CudaEndpoint::register(self, peer, m)
    }

    fn get(&mut self, peer: u32, dst: MemRef, key: &RKey, tok: u64) -> Result<Tx, TransportError> {
        CudaEndpoint::get(self, peer, dst, key, tok).map(|()| Tx::Pending)
    }

    fn quiesce(&mut self, _peer: u32, tok: u64) {
        CudaEndpoint::quiesce(self, tok)
    }

    fn progress(&mut self, _budget: usize, out: &mut dyn Deliver) -> Result<usize, TransportError> {
        Ok(CudaEndpoint::progress(self, out))
    }

    fn busy(&self) -> bool {
        CudaEndpoint::busy(self)
    }

    fn forget_peer(&mut self, peer: u32) {
        CudaEndpoint::forget_peer(self, peer)
    }
}
