//! The host-memory stand-in of a device. **It is not a GPU**: its "device memory" is host
//! memory allocated here and recorded in a table (so a plain host pointer is not device memory
//! to it), its IPC import reads another process's memory with `process_vm_readv` (or copies
//! directly when the exporter is this process, as with in-process simulated ranks; or, for the
//! pool and VMM kinds, maps the exporter's memfd, handed over the local channel), and its
//! streams are FIFO queues of host functions, each run eagerly by a worker thread of its own
//! (see `stream`: a C library can queue on them too). It exists
//! so the protocols that move device memory run under the real engine and transports on
//! machines without a GPU (`RCOMM_GPU_STANDIN=1`, CI, in-process tests).
use super::cache::{ExportCache, ImportCache, KeyParts, ShareKind, decode_key, encode_key};
use super::stream::{StreamObj, default_deadline};
use super::*;
use crate::mem::RKey;
use rcomm_runtime::config::P2pLevel;
use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Alignment of stand-in allocations (as `cudaMalloc`'s, at least 256 bytes).
const ALIGN: usize = 256;
/// Nominal memory of the stand-in device.
const TOTAL: usize = 64 << 30;
/// The stand-in device's UUID (the same in every process, as one GPU shared by a node).
const UUID: [u8; 16] = *b"rcomm-standin-00";

/// The UUID `devices` reports: [`UUID`], or with `RCOMM_GPU_STANDIN=distinct` one of this
/// process's own (its pid in the last bytes), so each process looks like it has a GPU of its
/// own (how the tests reach the paths chosen for one GPU per rank). Copies between processes
/// still work as between two GPUs with peer access.
fn reported_uuid() -> [u8; 16] {
    if !rcomm_runtime::config::gpu_standin_distinct() {
        return UUID;
    }
    let mut u = *b"rcomm-distinct\0\0";
    u[12..].copy_from_slice(&std::process::id().to_le_bytes());
    u
}
/// Most imports held per process.
const IMPORT_CAP: usize = 256;

/// Buffer ids, process-wide (several stand-ins in one test process never share one).
static NEXT_BUFFER_ID: AtomicU64 = AtomicU64::new(1);

type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
struct Alloc {
    size: usize,
    buffer_id: u64,
    /// Bytes taken: the heap layout's size, or the memfd mapping's.
    layout_size: usize,
    kind: AllocKind,
    /// Pool and VMM memory that can be shared: a memfd mapped `MAP_SHARED`, as the driver's
    /// shareable allocations are physical memory a descriptor names.
    memfd: Option<OwnedFd>,
}

/// An import of a peer's allocation.
#[derive(Debug, Clone, Copy)]
enum Imp {
    /// Legacy: read from the peer's address space (`process_vm_readv`), or this process's.
    Remote,
    /// The peer's memfd, mapped here read-only.
    Mapped { addr: u64, len: usize },
}

/// Bytes of a memfd mapping of `size` bytes.
fn map_len(size: usize) -> usize {
    size.max(1).next_multiple_of(4096)
}

fn unmap(gone: Vec<Imp>) {
    for i in gone {
        if let Imp::Mapped { addr, len } = i {
            // SAFETY: a mapping made by `map_peer` and just removed from the import cache, so
            // unmapped once; no copy reads it now (copies run under the state lock).
            unsafe { libc::munmap(addr as *mut libc::c_void, len) };
        }
    }
}

#[derive(Default)]
struct State {
    /// base → allocation.
    allocs: BTreeMap<u64, Alloc>,
    allocated: usize,
    exports: Option<ExportCache<()>>,
    imports: Option<ImportCache<Imp>>,
    logged: HashSet<u32>,
    /// Completion id → (its copy stream, whether it was queried once). Ids grow, so on one
    /// stream a smaller id was queued earlier.
    pending: HashMap<u64, (usize, bool)>,
    /// Copy streams (peer slots, see [`super::PEER_STREAMS`]) used so far.
    peer_slots: HashSet<usize>,
    next_pending: u64,
    /// Idle staging buffers.
    pinned: Vec<u64>,
    /// Handle (the object's address; 0: the default stream) → stream.
    streams: HashMap<u64, Arc<StreamObj>>,
    /// Streams made, for the worker threads' names.
    next_stream: u64,
    /// Event handle → (its stream, the ticket it waits for).
    events: HashMap<u64, (Arc<StreamObj>, u64)>,
    next_event: u64,
    stats: GpuStats,
}

/// The host-memory stand-in of one device (see the module docs: not a GPU).
pub struct StandIn {
    /// Boxed: keeps [`Gpu`] small.
    state: Box<Mutex<State>>,
    p2p: Mutex<P2pLevel>,
    pid: u32,
}

impl std::fmt::Debug for StandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandIn")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// A stand-in copy for `peer`, on its copy stream: counted, awaiting its queries.
fn issue(st: &mut State, peer: u32) -> Pending {
    let slot = peer as usize % super::PEER_STREAMS;
    if st.peer_slots.insert(slot) {
        st.stats.peer_streams += 1;
    }
    let id = st.next_pending;
    st.next_pending += 1;
    st.pending.insert(id, (slot, false));
    Pending {
        device: 0,
        handle: id,
    }
}

/// Whether the nominal device memory has room for `bytes` more (`len` asked by the caller).
fn room(st: &State, bytes: usize, len: usize) -> Result<(), GpuError> {
    if st.allocated.saturating_add(bytes) > TOTAL {
        return Err(GpuError::Call {
            call: "alloc",
            device: 0,
            code: format!(
                "out of stand-in memory ({len} bytes asked, {} in use)",
                st.allocated
            ),
        });
    }
    Ok(())
}

fn invalid(s: String) -> GpuError {
    GpuError::Invalid(s)
}

impl StandIn {
    pub(crate) fn new() -> Self {
        let st = State {
            exports: Some(ExportCache::new(4096)),
            imports: Some(ImportCache::new(IMPORT_CAP)),
            next_pending: 1,
            pinned: Vec::new(),
            next_stream: 1,
            next_event: 1,
            ..State::default()
        };
        Self {
            state: Box::new(Mutex::new(st)),
            p2p: Mutex::new(rcomm_runtime::config::p2p_level()),
            pid: std::process::id(),
        }
    }

    /// Sets the P2P level this stand-in obeys (read from the configuration at construction).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn set_p2p_level(&self, l: P2pLevel) {
        *self.p2p.lock().unwrap_or_else(|e| e.into_inner()) = l;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_device(device: u32) -> Result<(), GpuError> {
        if device == 0 {
            Ok(())
        } else {
            Err(invalid(format!(
                "the stand-in has one device (0), not {device}"
            )))
        }
    }

    pub(super) fn devices(&self) -> Result<Vec<DeviceInfo>, GpuError> {
        Ok(vec![DeviceInfo {
            ordinal: 0,
            name: "rcomm stand-in (host memory)".into(),
            uuid: reported_uuid(),
            pci_bus_id: "0000:00:00.0".into(),
            total_mem: TOTAL,
            sm_count: 1,
            cc: (0, 0),
        }])
    }

    pub(super) fn alloc(&self, device: u32, len: usize) -> Result<u64, GpuError> {
        Self::check_device(device)?;
        let layout_size = len.max(1);
        let layout = Layout::from_size_align(layout_size, ALIGN)
            .map_err(|e| invalid(format!("stand-in allocation of {len} bytes: {e}")))?;
        let mut st = self.lock();
        room(&st, layout_size, len)?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(GpuError::Call {
                call: "alloc",
                device: 0,
                code: format!("host allocation of {len} bytes failed"),
            });
        }
        let buffer_id = NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed);
        st.allocs.insert(
            p as u64,
            Alloc {
                size: layout_size,
                buffer_id,
                layout_size,
                kind: AllocKind::Legacy,
                memfd: None,
            },
        );
        st.allocated += layout_size;
        Ok(p as u64)
    }

    /// Pool and VMM kinds: shareable ones are memfds (exported by descriptor); the others are
    /// heap memory that refuses export, as the default pool's does on a GPU.
    pub(super) fn alloc_kind(
        &self,
        device: u32,
        len: usize,
        kind: AllocKind,
    ) -> Result<u64, GpuError> {
        let shareable = match kind {
            AllocKind::Legacy => return self.alloc(device, len),
            AllocKind::Pool { shareable } | AllocKind::Vmm { shareable } => shareable,
        };
        if !shareable {
            let p = self.alloc(device, len)?;
            if let Some(a) = self.lock().allocs.get_mut(&p) {
                a.kind = kind;
            }
            return Ok(p);
        }
        Self::check_device(device)?;
        let ml = map_len(len);
        let fail = |call: &'static str, e: std::io::Error| GpuError::Call {
            call,
            device: 0,
            code: format!("stand-in shareable allocation of {len} bytes: {e}"),
        };
        let name: &std::ffi::CStr = if matches!(kind, AllocKind::Pool { .. }) {
            c"rcomm-standin-pool"
        } else {
            c"rcomm-standin-vmm"
        };
        // SAFETY: a NUL-terminated name; returns a new descriptor or -1.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(fail("memfd_create", std::io::Error::last_os_error()));
        }
        // SAFETY: the kernel just returned this descriptor; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain calls on a descriptor we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), ml as libc::off_t) } != 0 {
            return Err(fail("ftruncate", std::io::Error::last_os_error()));
        }
        let mut st = self.lock();
        room(&st, ml, len)?;
        // SAFETY: maps `ml` bytes of a memfd of that size, shared (what a peer maps is the
        // same memory); the mapping is ours until `free` unmaps it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ml,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(fail("mmap", std::io::Error::last_os_error()));
        }
        let buffer_id = NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed);
        st.allocs.insert(
            p as u64,
            Alloc {
                size: len.max(1),
                buffer_id,
                layout_size: ml,
                kind,
                memfd: Some(fd),
            },
        );
        st.allocated += ml;
        Ok(p as u64)
    }

    pub(super) fn alloc_kind_of(&self, ptr: u64) -> Result<AllocKind, GpuError> {
        let i = self.ptr_info(ptr)?;
        Ok(self
            .lock()
            .allocs
            .get(&i.base)
            .map_or(AllocKind::Legacy, |a| a.kind))
    }

    pub(super) fn free(&self, ptr: u64) -> Result<(), GpuError> {
        let mut st = self.lock();
        let a = st
            .allocs
            .remove(&ptr)
            .ok_or_else(|| invalid(format!("free of 0x{ptr:x}: not a stand-in allocation")))?;
        st.allocated -= a.layout_size;
        drop(st);
        if a.memfd.is_some() {
            // Peers asking for it from now on are told it is freed; what they mapped before
            // stays valid memory (the memfd lives while mapped), as a driver import does.
            super::fdshare::withdraw(a.buffer_id);
            // SAFETY: the mapping made in `alloc_kind`, just removed from the table, so
            // unmapped once.
            unsafe { libc::munmap(ptr as *mut libc::c_void, a.layout_size) };
            return Ok(());
        }
        let layout = Layout::from_size_align(a.layout_size, ALIGN).expect("valid at alloc");
        // SAFETY: `ptr` came from `alloc_zeroed` with this layout and was just removed from the
        // table, so it is freed once.
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        Ok(())
    }

    pub(super) fn mem_info(&self, device: u32) -> Result<(usize, usize), GpuError> {
        Self::check_device(device)?;
        Ok((TOTAL - self.lock().allocated, TOTAL))
    }

    fn find(st: &State, ptr: u64) -> Option<PtrInfo> {
        let (&base, a) = st.allocs.range(..=ptr).next_back()?;
        (ptr < base + a.size as u64).then_some(PtrInfo {
            device: 0,
            base,
            size: a.size,
            buffer_id: a.buffer_id,
        })
    }

    pub(super) fn dmabuf(&self, ptr: u64, len: usize) -> Result<(i32, u64), GpuError> {
        let i = self.ptr_info(ptr)?;
        if ptr + len as u64 > i.base + i.size as u64 {
            return Err(invalid(format!("0x{ptr:x}+{len} runs past its allocation")));
        }
        Ok((-1, 0))
    }

    pub(super) fn ptr_info(&self, ptr: u64) -> Result<PtrInfo, GpuError> {
        Self::find(&self.lock(), ptr).ok_or_else(|| {
            invalid(format!(
                "address 0x{ptr:x} is not device memory of this process"
            ))
        })
    }

    /// Checks that `ptr..ptr+len` lies in one stand-in allocation.
    fn check_range(&self, ptr: u64, len: usize) -> Result<PtrInfo, GpuError> {
        let i = self.ptr_info(ptr)?;
        let end = ptr.checked_add(len as u64);
        if end.is_none_or(|e| e > i.base + i.size as u64) {
            return Err(invalid(format!(
                "0x{ptr:x}+{len} runs past its stand-in allocation (0x{:x}+{})",
                i.base, i.size
            )));
        }
        Ok(i)
    }

    pub(super) fn copy_dtoh(&self, dst: &mut [u8], src: u64) -> Result<(), GpuError> {
        self.check_range(src, dst.len())?;
        // SAFETY: `src..src+len` lies in a live stand-in allocation (checked above); `dst` is a
        // distinct Rust slice of that length.
        unsafe { std::ptr::copy(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        self.lock().stats.staged_bytes += dst.len() as u64;
        Ok(())
    }

    pub(super) fn copy_htod(&self, dst: u64, src: &[u8]) -> Result<(), GpuError> {
        self.check_range(dst, src.len())?;
        // SAFETY: `dst..dst+len` lies in a live stand-in allocation (checked above).
        unsafe { std::ptr::copy(src.as_ptr(), dst as *mut u8, src.len()) };
        self.lock().stats.staged_bytes += src.len() as u64;
        Ok(())
    }

    pub(super) fn copy_dtod(&self, dst: u64, src: u64, len: usize) -> Result<(), GpuError> {
        self.check_range(dst, len)?;
        self.check_range(src, len)?;
        // SAFETY: both ranges lie in live stand-in allocations (checked above); `copy` allows
        // overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        Ok(())
    }

    /// Queues the copy as a host function on `s` (ranges checked now and again when it runs:
    /// the memory may have been freed by then, which on a GPU would be undefined).
    pub(super) fn copy_dtod_on(
        &self,
        s: Stream,
        dst: u64,
        src: u64,
        len: usize,
    ) -> Result<(), GpuError> {
        self.check_range(dst, len)?;
        self.check_range(src, len)?;
        let me: &'static StandIn = match gpu()? {
            Gpu::StandIn(g) => g,
            Gpu::Cuda(_) => return Err(invalid("stand-in copy without the stand-in".into())),
        };
        self.enqueue(
            s,
            Box::new(move || {
                // A range gone when the queue runs is a bug in the caller; report, skip.
                if let Err(e) = me.copy_dtod(dst, src, len) {
                    rcomm_runtime::rlog!(Warn, "NET", "stand-in stream copy skipped: {e}");
                }
            }),
        )
    }

    pub(super) fn export(&self, ptr: u64, len: usize) -> Result<RKey, GpuError> {
        let i = self.check_range(ptr, len)?;
        let mut st = self.lock();
        let kind = st.allocs.get(&i.base).map_or(AllocKind::Legacy, |a| a.kind);
        let share = match kind {
            AllocKind::Legacy => ShareKind::Ipc,
            AllocKind::Pool { shareable: true } => ShareKind::PoolFd,
            AllocKind::Vmm { shareable: true } => ShareKind::VmmFd,
            AllocKind::Pool { shareable: false } | AllocKind::Vmm { shareable: false } => {
                drop(st);
                let why = if matches!(kind, AllocKind::Pool { .. }) {
                    "stand-in memory of a pool without file-descriptor handles, as a device's default pool"
                } else {
                    "stand-in VMM memory whose handle allows no file descriptor"
                };
                super::warn_unshareable(why);
                return Err(GpuError::Unreachable(format!(
                    "0x{ptr:x} is {why}: it cannot be shared"
                )));
            }
        };
        let exports = st.exports.as_mut().expect("set in new");
        if exports.lookup(i.base, i.buffer_id).is_some() {
            st.stats.export_hits += 1;
        } else {
            // Without a job (in-process simulated ranks, one rank) nobody can ask for the
            // descriptor, and ranks of this process need none: they copy directly.
            if share.by_fd() && super::fdshare::job_id().is_some() {
                let fd = st
                    .allocs
                    .get(&i.base)
                    .and_then(|a| a.memfd.as_ref())
                    .ok_or_else(|| {
                        invalid(format!(
                            "0x{ptr:x}: a shareable allocation without its memfd"
                        ))
                    })?
                    .try_clone()
                    .map_err(|e| GpuError::Call {
                        call: "dup",
                        device: 0,
                        code: e.to_string(),
                    })?;
                super::fdshare::offer(i.buffer_id, std::sync::Arc::new(fd))?;
                st.stats.fd_exports += 1;
            }
            st.exports
                .as_mut()
                .expect("set in new")
                .insert(i.base, i.buffer_id, ());
            st.stats.exports += 1;
        }
        super::fdshare::withdraw_all(st.exports.as_mut().expect("set in new").take_gone());
        let mut handle = [0u8; 64];
        handle[..8].copy_from_slice(&i.base.to_le_bytes());
        Ok(encode_key(
            &KeyParts::of(&i, ptr, len, self.pid, handle, UUID).shared_as(share),
        ))
    }

    pub(super) fn pin_export(&self, ptr: u64) -> Result<(), GpuError> {
        let i = self.ptr_info(ptr)?;
        self.lock()
            .exports
            .as_mut()
            .expect("set in new")
            .pin(i.base);
        Ok(())
    }

    /// Whether there was an export to drop.
    pub(super) fn drop_export(&self, ptr: u64) -> Result<bool, GpuError> {
        let i = self.ptr_info(ptr)?;
        let gone = self
            .lock()
            .exports
            .as_mut()
            .expect("set in new")
            .remove(i.base);
        super::fdshare::withdraw(i.buffer_id);
        Ok(gone.is_some())
    }

    /// Maps allocation `k` of `peer` (another process) from its memfd, asked of the exporter.
    fn map_peer(&self, peer: u32, k: &KeyParts) -> Result<Imp, GpuError> {
        let fd = super::fdshare::fetch(peer, k.pid, k.buffer_id)?;
        let len = map_len(k.alloc_size as usize);
        // SAFETY: an all-zero stat is a valid value to be overwritten.
        let mut sb: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a descriptor we own; writes one stat.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut sb) } != 0 || (sb.st_size as u64) < len as u64
        {
            // Mapping past the end of the file would fault on the copy, not fail here.
            return Err(invalid(format!(
                "rank {peer} handed a descriptor of {} bytes for an allocation of {}",
                sb.st_size, k.alloc_size
            )));
        }
        // SAFETY: maps `len` bytes of a file at least that long, read-only and shared.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(GpuError::Call {
                call: "mmap",
                device: 0,
                code: format!(
                    "mapping rank {peer}'s allocation: {}",
                    std::io::Error::last_os_error()
                ),
            });
        }
        Ok(Imp::Mapped {
            addr: p as u64,
            len,
        })
    }

    pub(super) fn get(
        &self,
        peer: u32,
        key: &RKey,
        dst: u64,
        len: usize,
    ) -> Result<Pending, GpuError> {
        let k = decode_key(key.as_bytes())?;
        if len as u64 > k.len {
            return Err(invalid(format!(
                "get of {len} bytes from a key of {}",
                k.len
            )));
        }
        if *self.p2p.lock().unwrap_or_else(|e| e.into_inner()) == P2pLevel::Off {
            return Err(GpuError::Unreachable(
                "RCOMM_P2P_LEVEL=off: no direct device copies".into(),
            ));
        }
        if k.uuid != UUID {
            return Err(GpuError::Unreachable(format!(
                "device memory of rank {peer} is not on the stand-in device"
            )));
        }
        // dst: stand-in memory (then the range must fit) or host memory (the stand-in's device
        // memory is host memory).
        if let Ok(i) = self.ptr_info(dst)
            && (dst + len as u64) > i.base + i.size as u64
        {
            return Err(invalid(format!(
                "get of {len} bytes to 0x{dst:x} runs past its allocation"
            )));
        }
        let src = k.base + k.offset;
        let mut st = self.lock();
        let imp = match st
            .imports
            .as_mut()
            .expect("set in new")
            .lookup(peer, k.pid, k.buffer_id)
        {
            Some(m) => {
                st.stats.import_hits += 1;
                m
            }
            None => {
                let stale = st.imports.as_mut().expect("set in new").take_stale(
                    peer,
                    k.pid,
                    k.buffer_id,
                    k.base,
                    k.alloc_size,
                );
                st.stats.import_evictions += stale.len() as u64;
                unmap(stale);
                let by_fd = k.pid != self.pid && k.kind.by_fd();
                let m = if by_fd {
                    // Asking the exporter takes a round trip: not under the lock.
                    drop(st);
                    let m = self.map_peer(peer, &k)?;
                    st = self.lock();
                    st.stats.fd_imports += 1;
                    m
                } else {
                    Imp::Remote
                };
                let full = st.imports.as_mut().expect("set in new").insert(
                    peer,
                    k.pid,
                    k.buffer_id,
                    k.base,
                    k.alloc_size,
                    m,
                );
                st.stats.import_evictions += full.len() as u64;
                unmap(full);
                st.stats.imports += 1;
                if st.logged.insert(peer) {
                    let how = if by_fd {
                        "file descriptor (memfd) mapped here"
                    } else {
                        "read from its address space"
                    };
                    rcomm_runtime::rlog!(
                        Info,
                        "NET",
                        "device memory from rank {peer}: stand-in IPC (host memory, not a GPU) by {how}, same GPU (GPU 0000:00:00.0)"
                    );
                }
                m
            }
        };
        if k.pid == self.pid {
            // In-process ranks: the exporter's allocation must still be the one named.
            match Self::find(&st, src) {
                Some(i) if i.buffer_id == k.buffer_id && i.base == k.base => {}
                _ => {
                    return Err(invalid(format!(
                        "device key of rank {peer} names a freed stand-in allocation (buffer {})",
                        k.buffer_id
                    )));
                }
            }
            // SAFETY: the source lies in a live allocation of this process (checked above,
            // under the lock; the key's range is inside it by `decode_key`); `dst` is stand-in
            // memory checked above or host memory the caller handed us for `len` bytes.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        } else if let Imp::Mapped { addr, .. } = imp {
            // SAFETY: the peer's allocation mapped here (at least `alloc_size` bytes, checked
            // at mapping; the key's range is inside it by `decode_key`), kept mapped while the
            // lock is held; `dst` as above.
            unsafe { std::ptr::copy((addr + k.offset) as *const u8, dst as *mut u8, len) };
        } else {
            drop(st);
            read_remote(k.pid, src, dst, len)?;
            st = self.lock();
        }
        st.stats.ipc_bytes += len as u64;
        Ok(issue(&mut st, peer))
    }

    /// A staging buffer of [`super::STAGE_BYTES`] bytes (plain host memory here; pinned on
    /// CUDA), from a pool.
    pub(super) fn pinned_take(&self) -> Result<u64, GpuError> {
        let mut st = self.lock();
        if let Some(p) = st.pinned.pop() {
            return Ok(p);
        }
        let layout =
            std::alloc::Layout::from_size_align(super::STAGE_BYTES, 4096).expect("a valid layout");
        // SAFETY: a non-zero size; the buffer lives for the process (pooled, never freed).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(invalid("out of host memory for a staging buffer".into()));
        }
        Ok(p as u64)
    }

    /// Returns a staging buffer to the pool.
    pub(super) fn pinned_give(&self, p: u64) {
        self.lock().pinned.push(p);
    }

    /// Starts copying `len` bytes of device memory at `src` into the staging buffer `dst`
    /// (done at once here; reported complete as the driver's copies would be: see `query`).
    pub(super) fn copy_dtoh_async(
        &self,
        peer: u32,
        dst: u64,
        src: u64,
        len: usize,
    ) -> Result<Pending, GpuError> {
        self.check_range(src, len)?;
        if len > super::STAGE_BYTES {
            return Err(invalid(format!("{len} bytes do not fit a staging buffer")));
        }
        // SAFETY: `src..src+len` lies in a live stand-in allocation (checked); `dst` is a
        // staging buffer of STAGE_BYTES (checked above), distinct from device memory.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        let mut st = self.lock();
        st.stats.staged_bytes += len as u64;
        Ok(issue(&mut st, peer))
    }

    /// Starts copying `len` bytes of the staging buffer `src` to device memory at `dst` (done
    /// at once here; reported complete as the driver's copies would be: see `query`).
    pub(super) fn copy_htod_async(
        &self,
        peer: u32,
        dst: u64,
        src: u64,
        len: usize,
    ) -> Result<Pending, GpuError> {
        self.check_range(dst, len)?;
        if len > super::STAGE_BYTES {
            return Err(invalid(format!("{len} bytes do not fit a staging buffer")));
        }
        // SAFETY: `dst..dst+len` lies in a live stand-in allocation (checked); `src` is a
        // staging buffer of STAGE_BYTES (checked above), distinct from device memory.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        let mut st = self.lock();
        st.stats.staged_bytes += len as u64;
        Ok(issue(&mut st, peer))
    }

    /// A copy is reported done at its second query, never before one queued earlier on its
    /// stream: a query marks it and everything before it on the stream as seen, and what was
    /// seen before is done. So a caller that polls only a message's last chunk sees it done
    /// on the second poll (stream order makes the earlier ones done too), and one that
    /// assumed completion without polling sees it fail.
    pub(super) fn query(&self, p: &Pending) -> Result<bool, GpuError> {
        Self::check_device(p.device)?;
        let mut st = self.lock();
        let &(slot, done) = st
            .pending
            .get(&p.handle)
            .ok_or_else(|| invalid(format!("no stand-in copy {}", p.handle)))?;
        for (_, q) in st
            .pending
            .iter_mut()
            .filter(|(id, q)| q.0 == slot && **id <= p.handle)
        {
            q.1 = true;
        }
        Ok(done)
    }

    pub(super) fn finish(&self, p: Pending) -> Result<(), GpuError> {
        Self::check_device(p.device)?;
        self.lock()
            .pending
            .remove(&p.handle)
            .map(|_| ())
            .ok_or_else(|| invalid(format!("no stand-in copy {}", p.handle)))
    }

    pub(super) fn forget_peer(&self, peer: u32) {
        let mut st = self.lock();
        let gone = st.imports.as_mut().expect("set in new").remove_peer(peer);
        st.logged.remove(&peer);
        unmap(gone);
    }

    pub(super) fn stream_create(&self, device: u32) -> Result<Stream, GpuError> {
        Self::check_device(device)?;
        let mut st = self.lock();
        let ordinal = st.next_stream;
        st.next_stream += 1;
        let obj = StreamObj::new(ordinal)?;
        let raw = obj.raw();
        st.streams.insert(raw, obj);
        Ok(Stream { device, raw })
    }

    pub(super) fn stream_destroy(&self, s: Stream) -> Result<(), GpuError> {
        if s.raw == 0 {
            return Err(invalid("the default stream cannot be destroyed".into()));
        }
        let obj = self.stream(s)?;
        self.lock().streams.remove(&s.raw);
        // Work still queued runs first (as a CUDA stream destroyed with work pending).
        obj.close(default_deadline())
    }

    /// The stream object of `s` (the default stream is made on first use).
    fn stream(&self, s: Stream) -> Result<Arc<StreamObj>, GpuError> {
        Self::check_device(s.device)?;
        let mut st = self.lock();
        if let Some(o) = st.streams.get(&s.raw) {
            return Ok(o.clone());
        }
        if s.raw != 0 {
            return Err(invalid(format!("no stand-in stream 0x{:x}", s.raw)));
        }
        let o = StreamObj::new(0)?;
        st.streams.insert(0, o.clone());
        Ok(o)
    }

    /// Queues `f` on `s`; the stream's worker runs it after what was queued before.
    pub(crate) fn enqueue(&self, s: Stream, f: Job) -> Result<(), GpuError> {
        self.stream(s)?.push(f).map(drop)
    }

    pub(super) fn stream_wait_host(&self, s: Stream) -> Result<(), GpuError> {
        let o = self.stream(s)?;
        if o.wait_for(o.ticket(), default_deadline())? {
            Ok(())
        } else {
            Err(GpuError::Call {
                call: "stream_wait_host",
                device: 0,
                code: "the stream's work did not finish before the deadline (RCOMM_TIMEOUT)".into(),
            })
        }
    }

    pub(super) fn stream_query(&self, s: Stream) -> Result<bool, GpuError> {
        let o = self.stream(s)?;
        Ok(o.reached(o.ticket()))
    }

    pub(super) fn event_record(&self, s: Stream) -> Result<Event, GpuError> {
        let o = self.stream(s)?;
        let t = o.ticket();
        let mut st = self.lock();
        let id = st.next_event;
        st.next_event += 1;
        st.events.insert(id, (o, t));
        Ok(Event {
            device: s.device,
            handle: id,
        })
    }

    fn event(&self, e: &Event) -> Result<(Arc<StreamObj>, u64), GpuError> {
        Self::check_device(e.device)?;
        self.lock()
            .events
            .get(&e.handle)
            .cloned()
            .ok_or_else(|| invalid(format!("no stand-in event {}", e.handle)))
    }

    pub(super) fn event_query(&self, e: &Event) -> Result<bool, GpuError> {
        let (o, t) = self.event(e)?;
        Ok(o.reached(t))
    }

    pub(super) fn event_wait_host(
        &self,
        e: &Event,
        deadline: std::time::Instant,
    ) -> Result<bool, GpuError> {
        let (o, t) = self.event(e)?;
        o.wait_for(t, deadline)
    }

    /// Queues on `s` a wait for `e`: later work on `s` runs after `e`'s. The wait is bounded
    /// as a host wait is (`RCOMM_TIMEOUT`); past it the stream goes on, logged.
    pub(super) fn stream_wait_event(&self, s: Stream, e: &Event) -> Result<(), GpuError> {
        let (o, t) = self.event(e)?;
        if o.reached(t) {
            return Ok(());
        }
        self.stream(s)?
            .push(Box::new(move || {
                if !matches!(o.wait_for(t, default_deadline()), Ok(true)) {
                    rcomm_runtime::rlog!(
                        Warn,
                        "NET",
                        "a stand-in stream gave up waiting for an event of another stream"
                    );
                }
            }))
            .map(drop)
    }

    pub(super) fn event_destroy(&self, e: Event) -> Result<(), GpuError> {
        Self::check_device(e.device)?;
        self.lock()
            .events
            .remove(&e.handle)
            .map(drop)
            .ok_or_else(|| invalid(format!("no stand-in event {}", e.handle)))
    }

    pub(super) fn stats(&self) -> GpuStats {
        self.lock().stats
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let streams: Vec<Arc<StreamObj>> = self.lock().streams.drain().map(|(_, o)| o).collect();
        for o in streams {
            let _ = o.close(default_deadline());
        }
        let bases: Vec<u64> = self.lock().allocs.keys().copied().collect();
        for b in bases {
            let _ = self.free(b);
        }
        let imports = self.lock().imports.as_mut().map(|c| c.drain());
        unmap(imports.unwrap_or_default());
    }
}

/// Reads `len` bytes at `src` of process `pid` into `dst` of this one.
pub(super) fn read_remote(pid: u32, src: u64, dst: u64, len: usize) -> Result<(), GpuError> {
    let mut done = 0usize;
    while done < len {
        let local = libc::iovec {
            iov_base: (dst as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: (src as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: `local` is memory of this process the caller handed us for `len` bytes;
        // `remote` is only read by the kernel, which checks it against the other process.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) => GpuError::Unreachable(format!(
                    "cannot read the memory of process {pid} (process_vm_readv: {e}; ptrace scope?)"
                )),
                Some(libc::EINTR) => continue,
                _ => GpuError::Call {
                    call: "process_vm_readv",
                    device: 0,
                    code: format!("process {pid}: {e}"),
                },
            });
        }
        if n == 0 {
            return Err(GpuError::Call {
                call: "process_vm_readv",
                device: 0,
                code: format!("process {pid}: read nothing at 0x{:x}", src as usize + done),
            });
        }
        done += n as usize;
    }
    Ok(())
}
