//! The device-memory bulk lane: GET of a peer's device memory on this node by CUDA IPC (or
//! the stand-in's equivalent), through [`crate::gpu`]. It carries no messages: the engine's
//! RTS, CTS and FIN travel on the peer's message lane, and a pair this lane cannot serve (other
//! node, another GPU without peer access, `RCOMM_P2P_LEVEL`) falls back to staging through host
//! memory over the message lane's STREAM.

use crate::caps::{Caps, Kinds, Ops};
use crate::error::TransportError;
use crate::fastmap::FastMap;
use crate::gpu::{Gpu, GpuError, Pending};
use crate::mem::{MemRef, RKey};
use crate::net::Deliver;
use crate::shmnet::Counters;

/// The device lane of one process.
#[derive(Debug)]
pub struct CudaEndpoint {
    gpu: &'static Gpu,
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
            gpu,
            pending: FastMap::default(),
            counters: Counters::default(),
        }
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
        }
    }

    /// Bytes moved (as `bytes_recv` and `bytes_cma`: this side pulled them) and copies done.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The key through which a peer on this node pulls `m` (device memory), exported once per
    /// allocation.
    pub fn register(&mut self, peer: u32, m: &MemRef) -> Result<RKey, TransportError> {
        self.gpu
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
            .gpu
            .get(peer, key, dst.addr, dst.len)
            .map_err(|e| refused(peer, "device get", e))?;
        self.pending.insert(tok, (peer, dst.len, p));
        Ok(())
    }

    /// Reports finished copies.
    pub fn progress(&mut self, out: &mut dyn Deliver) -> usize {
        if self.pending.is_empty() {
            return 0;
        }
        let mut done = Vec::new();
        for (&tok, (_, _, p)) in self.pending.iter() {
            match self.gpu.query(p) {
                Ok(false) => {}
                Ok(true) => done.push((tok, Ok(()))),
                Err(e) => done.push((tok, Err(e))),
            }
        }
        let n = done.len();
        for (tok, res) in done {
            let (peer, len, p) = self.pending.remove(&tok).expect("present");
            let res = res
                .and_then(|()| self.gpu.finish(p))
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
        if let Some((_, _, p)) = self.pending.remove(&tok) {
            let _ = self.gpu.finish(p);
        }
    }

    /// Whether copies are under way (progress must poll them).
    pub fn busy(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Closes what was imported from `peer`.
    pub fn forget_peer(&mut self, peer: u32) {
        self.gpu.forget_peer(peer);
    }
}
