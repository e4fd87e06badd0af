//! Memory as the transports see it: its kind, a reference by address (the transport may touch
//! it until the operation using it completes), remote keys and a registration cache.

/// Where memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemKind {
    /// Host (CPU) memory of this process.
    Host,
    /// Memory of CUDA device `device`.
    Cuda {
        /// The device ordinal.
        device: u32,
    },
}

/// Memory an operation reads or writes, by address: the caller keeps it valid and otherwise
/// untouched until the transport completes the operation (or [`crate::net::Net::quiesce`]
/// returns), because an asynchronous mover (a DMA engine, RDMA, the simulator) uses it after
/// the call that started the operation has returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemRef {
    /// Start address in this process.
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// Where it lives.
    pub kind: MemKind,
}

impl MemRef {
    /// Host memory at `addr`, `len` bytes.
    pub fn host(addr: u64, len: usize) -> Self {
        Self {
            addr,
            len,
            kind: MemKind::Host,
        }
    }
}

/// Longest packed remote key (a CUDA IPC handle is 64 bytes; with its allocation's id, device UUID, offset and length a device key is about 120).
pub const RKEY_MAX: usize = 128;

/// A packed remote key: what a peer needs to reach registered memory of ours (an address for
/// single copy, an address and a key for RDMA, an IPC handle for a GPU). Opaque to the core,
/// which carries it in RTS and CTS records; inline, so carrying one does not allocate.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RKey {
    len: u8,
    bytes: [u8; RKEY_MAX],
}

impl std::fmt::Debug for RKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RKey({} bytes)", self.len)
    }
}

impl RKey {
    /// A key of these bytes; `None` if longer than [`RKEY_MAX`].
    pub fn new(b: &[u8]) -> Option<Self> {
        if b.len() > RKEY_MAX {
            return None;
        }
        let mut bytes = [0u8; RKEY_MAX];
        bytes[..b.len()].copy_from_slice(b);
        Some(Self {
            len: b.len() as u8,
            bytes,
        })
    }

    /// The packed bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The `i`-th little-endian `u64` of the key.
    pub fn u64_at(&self, i: usize) -> Option<u64> {
        self.as_bytes()
            .get(i * 8..i * 8 + 8)
            .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
    }
}

/// A cache of registrations by (kind, address, length), for transports whose memory must be
/// registered: registering is expensive (pinning, a kernel call), buffers are reused, so a
/// registration is kept and found again. Bounded: past `cap` entries the oldest goes
/// (a transport deregisters what [`insert`](Self::insert) hands back).
#[derive(Debug)]
pub struct RegCache<H> {
    cap: usize,
    /// In insertion order; small (tens of entries), so a linear scan beats hashing.
    entries: std::collections::VecDeque<((MemKind, u64, usize), H)>,
    hits: u64,
    misses: u64,
}

impl<H: Clone> RegCache<H> {
    /// An empty cache of at most `cap` registrations (at least one).
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            entries: Default::default(),
            hits: 0,
            misses: 0,
        }
    }

    /// The registration covering all of `m`, if one is cached.
    pub fn find(&mut self, m: &MemRef) -> Option<H> {
        let hit = self
            .entries
            .iter()
            .find(|((k, a, l), _)| {
                *k == m.kind && *a <= m.addr && m.addr + m.len as u64 <= a + *l as u64
            })
            .map(|(_, h)| h.clone());
        match hit {
            Some(_) => self.hits += 1,
            None => self.misses += 1,
        }
        hit
    }

    /// Caches the registration `h` of `m`; returns the one evicted to make room, if any.
    pub fn insert(&mut self, m: &MemRef, h: H) -> Option<H> {
        let evicted = if self.entries.len() >= self.cap {
            self.entries.pop_front().map(|(_, h)| h)
        } else {
            None
        };
        self.entries.push_back(((m.kind, m.addr, m.len), h));
        evicted
    }

    /// (hits, misses) so far.
    pub fn stats(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_refuse_overlong_bytes() {
        let k = RKey::new(&[1, 0, 0, 0, 0, 0, 0, 0, 7]).unwrap();
        assert_eq!(k.u64_at(0), Some(1));
        assert_eq!(k.u64_at(1), None, "only one whole word");
        assert_eq!(k.as_bytes().len(), 9);
        assert!(RKey::new(&[0; RKEY_MAX + 1]).is_none());
    }

    #[test]
    fn the_cache_finds_covering_registrations_and_evicts_the_oldest() {
        let mut c = RegCache::new(2);
        assert_eq!(c.insert(&MemRef::host(1000, 100), 1), None);
        assert_eq!(
            c.find(&MemRef::host(1010, 50)),
            Some(1),
            "inside a registration"
        );
        assert_eq!(c.find(&MemRef::host(1050, 100)), None, "runs past its end");
        let dev = MemRef {
            kind: MemKind::Cuda { device: 0 },
            ..MemRef::host(1000, 10)
        };
        assert_eq!(c.find(&dev), None, "another kind of memory");
        assert_eq!(c.insert(&MemRef::host(5000, 10), 2), None);
        assert_eq!(c.insert(&MemRef::host(9000, 10), 3), Some(1));
        assert_eq!(c.find(&MemRef::host(1000, 10)), None);
        assert_eq!(c.stats(), (1, 3));
    }
}
