//! The device key format and the export and import caches, shared by both backends. Pure data:
//! unit-tested without a device.
//!
//! A device key ([`encode_key`]) names one allocation of an exporting process and a range in it:
//!
//! | bytes   | field                                                         |
//! |---------|---------------------------------------------------------------|
//! | 0       | format and version ([`KEY_FORMAT`])                           |
//! | 1..65   | the handle: `CUipcMemHandle`, a pool's `CUmemPoolPtrExportData`, unused for VMM (the stand-in: the base) |
//! | 65..69  | exporter's pid (u32 LE)                                       |
//! | 69..77  | the allocation's buffer id (u64 LE)                           |
//! | 77..85  | the allocation's base address in the exporter (u64 LE)        |
//! | 85..93  | the allocation's size (u64 LE)                                |
//! | 93..101 | offset of the exported range in the allocation (u64 LE)       |
//! | 101..109| length of the exported range (u64 LE)                         |
//! | 109..125| the device's UUID                                             |
//! | 125     | how it is shared ([`ShareKind`])                              |
//!
//! Keys come from peers: [`decode_key`] checks everything and never panics.

use super::GpuError;
use crate::mem::RKey;
use std::collections::HashMap;

/// Format and version byte of a device key.
pub const KEY_FORMAT: u8 = 0xD2;
/// Length of a device key in bytes.
pub const KEY_LEN: usize = 1 + 64 + 4 + 8 + 8 + 8 + 8 + 8 + 16 + 1;

/// How a peer reaches the allocation a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareKind {
    /// A legacy IPC handle in the key (`cuMemAlloc` memory; the stand-in's `alloc`).
    Ipc = 0,
    /// VMM memory: the importer asks the exporter for the allocation's descriptor
    /// ([`super::fdshare`]) and maps it.
    VmmFd = 1,
    /// Pool memory: the importer asks for the pool's descriptor, imports the pool, then the
    /// pointer named by the key's handle.
    PoolFd = 2,
}

impl ShareKind {
    fn of(b: u8) -> Option<Self> {
        [Self::Ipc, Self::VmmFd, Self::PoolFd]
            .into_iter()
            .find(|k| *k as u8 == b)
    }

    /// Whether the allocation travels as a descriptor.
    pub fn by_fd(self) -> bool {
        self != Self::Ipc
    }
}

const _: () = assert!(KEY_LEN <= crate::mem::RKEY_MAX);

/// The fields of a device key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyParts {
    /// IPC handle bytes (the stand-in puts the base address in the first 8).
    pub handle: [u8; 64],
    /// Exporting process.
    pub pid: u32,
    /// The allocation's buffer id in the exporting process.
    pub buffer_id: u64,
    /// The allocation's base address in the exporting process.
    pub base: u64,
    /// The allocation's size.
    pub alloc_size: u64,
    /// Offset of the exported range in the allocation.
    pub offset: u64,
    /// Length of the exported range.
    pub len: u64,
    /// UUID of the exporter's device.
    pub uuid: [u8; 16],
    /// How it is shared.
    pub kind: ShareKind,
}

impl KeyParts {
    /// The parts naming `len` bytes at `ptr`, inside the allocation `i` of process `pid`, on
    /// the device with `uuid`, exported as `handle`.
    pub fn of(
        i: &super::PtrInfo,
        ptr: u64,
        len: usize,
        pid: u32,
        handle: [u8; 64],
        uuid: [u8; 16],
    ) -> Self {
        Self {
            handle,
            pid,
            buffer_id: i.buffer_id,
            base: i.base,
            alloc_size: i.size as u64,
            offset: ptr - i.base,
            len: len as u64,
            uuid,
            kind: ShareKind::Ipc,
        }
    }

    /// The same, shared as `kind`.
    pub fn shared_as(self, kind: ShareKind) -> Self {
        Self { kind, ..self }
    }
}

/// Packs a device key.
pub fn encode_key(p: &KeyParts) -> RKey {
    let mut b = [0u8; KEY_LEN];
    b[0] = KEY_FORMAT;
    b[1..65].copy_from_slice(&p.handle);
    b[65..69].copy_from_slice(&p.pid.to_le_bytes());
    b[69..77].copy_from_slice(&p.buffer_id.to_le_bytes());
    b[77..85].copy_from_slice(&p.base.to_le_bytes());
    b[85..93].copy_from_slice(&p.alloc_size.to_le_bytes());
    b[93..101].copy_from_slice(&p.offset.to_le_bytes());
    b[101..109].copy_from_slice(&p.len.to_le_bytes());
    b[109..125].copy_from_slice(&p.uuid);
    b[125] = p.kind as u8;
    RKey::new(&b).expect("KEY_LEN <= RKEY_MAX")
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Unpacks a device key from a peer: [`GpuError::Invalid`] if it has the wrong length or
/// version, or its range is not inside its allocation.
pub fn decode_key(b: &[u8]) -> Result<KeyParts, GpuError> {
    if b.len() != KEY_LEN {
        return Err(GpuError::Invalid(format!(
            "device key of {} bytes (a device key has {KEY_LEN}): not a device key of this rcomm version",
            b.len()
        )));
    }
    if b[0] != KEY_FORMAT {
        return Err(GpuError::Invalid(format!(
            "device key of format 0x{:02x} (this rcomm writes 0x{KEY_FORMAT:02x})",
            b[0]
        )));
    }
    let mut handle = [0u8; 64];
    handle.copy_from_slice(&b[1..65]);
    let mut pid = [0u8; 4];
    pid.copy_from_slice(&b[65..69]);
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&b[109..125]);
    let kind = ShareKind::of(b[125]).ok_or_else(|| {
        GpuError::Invalid(format!(
            "device key shared as kind {} (this rcomm knows 0 to 2)",
            b[125]
        ))
    })?;
    let p = KeyParts {
        handle,
        pid: u32::from_le_bytes(pid),
        buffer_id: u64_at(b, 69),
        base: u64_at(b, 77),
        alloc_size: u64_at(b, 85),
        offset: u64_at(b, 93),
        len: u64_at(b, 101),
        uuid,
        kind,
    };
    let in_alloc = p
        .offset
        .checked_add(p.len)
        .is_some_and(|end| end <= p.alloc_size)
        && p.base.checked_add(p.alloc_size).is_some();
    if !in_alloc {
        return Err(GpuError::Invalid(format!(
            "device key names bytes {}..+{} of an allocation of {} bytes",
            p.offset, p.len, p.alloc_size
        )));
    }
    Ok(p)
}

/// The export cache: per allocation base, the buffer id it had when exported and its handle.
/// An allocation freed and made again at the same base has another buffer id: a miss.
/// Registered allocations ([`pin`](ExportCache::pin)) are never dropped to make room.
#[derive(Debug)]
pub struct ExportCache<H> {
    cap: usize,
    seq: u64,
    map: HashMap<u64, (u64, H, u64)>,
    pinned: std::collections::HashSet<u64>,
    /// Buffer ids whose exports were dropped (stale or to make room), for [`take_gone`]
    /// (ExportCache::take_gone).
    gone: Vec<u64>,
}

impl<H: Clone> ExportCache<H> {
    /// An empty cache of at most `cap` (at least 1) allocations; past it the oldest goes.
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            seq: 0,
            map: HashMap::new(),
            pinned: Default::default(),
            gone: Vec::new(),
        }
    }

    /// The handle of the allocation at `base` if it was exported with this `buffer_id`. An
    /// entry of another buffer id at that base (a freed allocation) is dropped, pinned or not.
    pub fn lookup(&mut self, base: u64, buffer_id: u64) -> Option<H> {
        match self.map.get(&base) {
            Some((id, h, _)) if *id == buffer_id => Some(h.clone()),
            Some((old, _, _)) => {
                self.gone.push(*old);
                self.map.remove(&base);
                self.pinned.remove(&base);
                None
            }
            None => None,
        }
    }

    /// Keeps the export of the allocation at `base` until [`remove`](Self::remove)d (a
    /// registered buffer).
    pub fn pin(&mut self, base: u64) {
        if self.map.contains_key(&base) {
            self.pinned.insert(base);
        }
    }

    /// Drops the export of the allocation at `base` (pinned or not); its buffer id and handle.
    pub fn remove(&mut self, base: u64) -> Option<(u64, H)> {
        self.pinned.remove(&base);
        self.map.remove(&base).map(|(id, h, _)| (id, h))
    }

    /// Records an export.
    pub fn insert(&mut self, base: u64, buffer_id: u64, h: H) {
        if !self.map.contains_key(&base)
            && self.map.len() >= self.cap
            && let Some(old) = self
                .map
                .iter()
                .filter(|(k, _)| !self.pinned.contains(k))
                .min_by_key(|(_, v)| v.2)
                .map(|(k, _)| *k)
            && let Some((id, _, _)) = self.map.remove(&old)
        {
            self.gone.push(id);
        }
        self.seq += 1;
        self.map.insert(base, (buffer_id, h, self.seq));
    }

    /// The buffer ids of the exports dropped since the last call (their allocations are gone,
    /// or the cache made room): what was offered to peers for them can be withdrawn.
    pub fn take_gone(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.gone)
    }

    /// Number of cached exports.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// One imported allocation of a peer.
#[derive(Debug, Clone)]
struct Import<H> {
    peer: u32,
    pid: u32,
    buffer_id: u64,
    base: u64,
    size: u64,
    handle: H,
    seq: u64,
}

/// The import cache: per (peer, exporter pid, buffer id), the local mapping of a peer's
/// allocation. Bounded; what it drops is handed back to be closed.
#[derive(Debug)]
pub struct ImportCache<H> {
    cap: usize,
    seq: u64,
    entries: Vec<Import<H>>,
}

impl<H: Clone> ImportCache<H> {
    /// An empty cache of at most `cap` (at least 1) imports.
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            seq: 0,
            entries: Vec::new(),
        }
    }

    /// The mapping of this allocation if imported.
    pub fn lookup(&mut self, peer: u32, pid: u32, buffer_id: u64) -> Option<H> {
        self.seq += 1;
        let seq = self.seq;
        self.entries
            .iter_mut()
            .find(|e| e.peer == peer && e.pid == pid && e.buffer_id == buffer_id)
            .map(|e| {
                e.seq = seq;
                e.handle.clone()
            })
    }

    /// Removes and hands back the imports of `peer` that a new allocation
    /// (`pid`, `buffer_id`, `base..base+size`) shows to be gone: those overlapping it with
    /// another buffer id, and those of another process of that peer (it restarted).
    pub fn take_stale(
        &mut self,
        peer: u32,
        pid: u32,
        buffer_id: u64,
        base: u64,
        size: u64,
    ) -> Vec<H> {
        let end = base.saturating_add(size.max(1));
        let mut out = Vec::new();
        self.entries.retain(|e| {
            let overlaps = e.base < end && base < e.base.saturating_add(e.size.max(1));
            let stale = e.peer == peer && (e.pid != pid || (overlaps && e.buffer_id != buffer_id));
            if stale {
                out.push(e.handle.clone());
            }
            !stale
        });
        out
    }

    /// Records an import; hands back what went to keep the cache bounded (least recently
    /// used first).
    pub fn insert(
        &mut self,
        peer: u32,
        pid: u32,
        buffer_id: u64,
        base: u64,
        size: u64,
        handle: H,
    ) -> Vec<H> {
        let mut out = Vec::new();
        while self.entries.len() >= self.cap {
            let Some(i) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.seq)
                .map(|(i, _)| i)
            else {
                break;
            };
            out.push(self.entries.swap_remove(i).handle);
        }
        self.seq += 1;
        self.entries.push(Import {
            peer,
            pid,
            buffer_id,
            base,
            size,
            handle,
            seq: self.seq,
        });
        out
    }

    /// Removes and hands back every import of `peer`.
    pub fn remove_peer(&mut self, peer: u32) -> Vec<H> {
        let mut out = Vec::new();
        self.entries.retain(|e| {
            if e.peer == peer {
                out.push(e.handle.clone());
                false
            } else {
                true
            }
        });
        out
    }

    /// Removes and hands back everything.
    pub fn drain(&mut self) -> Vec<H> {
        self.entries.drain(..).map(|e| e.handle).collect()
    }

    /// Number of imports held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is imported.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parts() -> KeyParts {
        KeyParts {
            handle: [7; 64],
            pid: 4242,
            buffer_id: 9,
            base: 0x7f00_0000_0000,
            alloc_size: 1 << 20,
            offset: 256,
            len: 4096,
            uuid: [3; 16],
            kind: ShareKind::PoolFd,
        }
    }

    #[test]
    fn key_round_trip_and_size() {
        let k = encode_key(&parts());
        assert_eq!(k.as_bytes().len(), KEY_LEN);
        assert_eq!(decode_key(k.as_bytes()), Ok(parts()));
    }

    #[test]
    fn bad_keys_are_invalid() {
        let k = encode_key(&parts());
        let b = k.as_bytes();
        assert!(matches!(
            decode_key(&b[..KEY_LEN - 1]),
            Err(GpuError::Invalid(_))
        ));
        assert!(matches!(decode_key(&[]), Err(GpuError::Invalid(_))));
        let mut v = b.to_vec();
        v[0] = 0x01;
        let e = decode_key(&v).unwrap_err();
        assert!(e.to_string().contains("format"), "{e}");
        let mut p = parts();
        p.offset = p.alloc_size;
        assert!(matches!(
            decode_key(encode_key(&p).as_bytes()),
            Err(GpuError::Invalid(_))
        ));
        p.offset = u64::MAX;
        assert!(matches!(
            decode_key(encode_key(&p).as_bytes()),
            Err(GpuError::Invalid(_))
        ));
        let mut v = b.to_vec();
        v[125] = 3;
        let e = decode_key(&v).unwrap_err();
        assert!(e.to_string().contains("shared as kind 3"), "{e}");
    }

    #[test]
    fn export_cache_misses_on_new_buffer_id() {
        let mut c = ExportCache::new(4);
        assert_eq!(c.lookup(0x1000, 1), None);
        c.insert(0x1000, 1, "h1");
        assert_eq!(c.lookup(0x1000, 1), Some("h1"));
        // Freed and made again at the same place: another id.
        assert_eq!(c.lookup(0x1000, 2), None);
        assert!(c.is_empty());
        c.insert(0x1000, 2, "h2");
        assert_eq!(c.lookup(0x1000, 2), Some("h2"));
        for i in 0..10u64 {
            c.insert(0x10_0000 + i, 10 + i, "x");
        }
        assert_eq!(c.len(), 4);
        assert_eq!(c.lookup(0x1000, 2), None, "the oldest went");
        let mut gone = c.take_gone();
        gone.sort();
        // 1: stale (freed and remade); 2, 10 to 14: made room.
        assert_eq!(gone, [1, 2, 10, 11, 12, 13, 14, 15]);
        assert!(c.take_gone().is_empty());
    }

    #[test]
    fn export_cache_keeps_pinned_exports_until_removed() {
        let mut c = ExportCache::new(2);
        c.insert(0x1000, 1, "reg");
        c.pin(0x1000);
        for i in 0..5u64 {
            c.insert(0x10_0000 + i, 10 + i, "x");
        }
        assert_eq!(
            c.lookup(0x1000, 1),
            Some("reg"),
            "a registered export stays"
        );
        assert_eq!(c.remove(0x1000), Some((1, "reg")));
        assert_eq!(c.lookup(0x1000, 1), None);
        // Freed and remade under a pin: the stale entry goes all the same.
        c.insert(0x2000, 3, "a");
        c.pin(0x2000);
        assert_eq!(c.lookup(0x2000, 4), None);
        assert_eq!(c.remove(0x2000), None);
    }

    #[test]
    fn import_cache_hits_evicts_stale_and_bounds() {
        let mut c = ImportCache::new(3);
        assert_eq!(c.lookup(1, 100, 5), None);
        assert!(c.take_stale(1, 100, 5, 0x1000, 0x1000).is_empty());
        assert!(c.insert(1, 100, 5, 0x1000, 0x1000, 'a').is_empty());
        assert_eq!(c.lookup(1, 100, 5), Some('a'));
        // Another peer's allocation at the same addresses is not stale.
        assert!(c.take_stale(2, 200, 6, 0x1000, 0x1000).is_empty());
        assert!(c.insert(2, 200, 6, 0x1000, 0x1000, 'b').is_empty());
        // Peer 1 freed it and made another overlapping one.
        assert_eq!(c.lookup(1, 100, 7), None);
        assert_eq!(c.take_stale(1, 100, 7, 0x1800, 0x1000), vec!['a']);
        assert!(c.insert(1, 100, 7, 0x1800, 0x1000, 'c').is_empty());
        // A disjoint allocation of peer 1 evicts nothing.
        assert!(c.take_stale(1, 100, 8, 0x9000, 0x100).is_empty());
        // Full: the least recently used (b, since c is newer) goes.
        assert_eq!(c.lookup(1, 100, 7), Some('c'));
        assert!(c.insert(1, 100, 8, 0x9000, 0x100, 'd').is_empty());
        assert_eq!(c.insert(1, 100, 9, 0xa000, 0x100, 'e'), vec!['b']);
        assert_eq!(c.len(), 3);
        // Peer 1 restarted: another pid makes all its imports stale.
        let mut st = c.take_stale(1, 101, 1, 0x20_0000, 0x100);
        st.sort();
        assert_eq!(st, vec!['c', 'd', 'e']);
        assert!(c.insert(3, 300, 1, 0, 1, 'f').is_empty());
        assert_eq!(c.remove_peer(3), vec!['f']);
        assert!(c.is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..160)) {
            let _ = decode_key(&b);
        }

        #[test]
        fn random_keys_of_key_length_never_panic(mut b in proptest::collection::vec(any::<u8>(), KEY_LEN), fmt in any::<bool>()) {
            if fmt {
                b[0] = KEY_FORMAT;
                b[KEY_LEN - 1] %= 4;
            }
            if let Ok(p) = decode_key(&b) {
                let k = encode_key(&p);
                prop_assert_eq!(k.as_bytes(), &b[..]);
            }
        }

        #[test]
        fn round_trip(handle in proptest::collection::vec(any::<u8>(), 64), pid in any::<u32>(), buffer_id in any::<u64>(),
                      base in 0u64..(1 << 56), alloc_size in 0u64..(1 << 40), a in any::<u64>(), b in any::<u64>(), uuid in any::<[u8; 16]>(), kind in 0u8..3) {
            let offset = if alloc_size == 0 { 0 } else { a % (alloc_size + 1) };
            let len = b % (alloc_size - offset + 1);
            let p = KeyParts { handle: handle.try_into().unwrap(), pid, buffer_id, base, alloc_size, offset, len, uuid, kind: ShareKind::of(kind).unwrap() };
            prop_assert_eq!(decode_key(encode_key(&p).as_bytes()), Ok(p));
        }
    }
}
