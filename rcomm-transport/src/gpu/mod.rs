//! Device memory: one interface over the CUDA driver (loaded at run time through cudarc, so a
//! build without CUDA runs everywhere) and a host-memory **stand-in** of a device used by the
//! tests on machines without a GPU (`RCOMM_GPU_STANDIN=1`). The stand-in is not a GPU: its
//! "device memory" is host memory, its IPC import reads another process's memory by
//! `process_vm_readv` (or, for its pool and VMM kinds, maps the exporter's memfd), its streams
//! are queues of host functions; it exists so the protocols that move device memory run under
//! the real engine and transports everywhere.
//!
//! What the protocol layer needs from a device, and nothing more:
//! - what a pointer is (which device, which allocation, its unique buffer id);
//! - synchronous copies between host and device (eager staging, chunk staging);
//! - an asynchronous copy with a completion to poll (the IPC GET);
//! - export of an allocation to a key a peer on this node can import (cached per allocation,
//!   invalidated when the allocation is freed), and import of a peer's key (cached per peer and
//!   allocation); how depends on the allocation's kind ([`AllocKind`]): a legacy IPC handle in
//!   the key, or a file descriptor handed over the local channel ([`fdshare`]);
//! - streams for the stream-ordered calls, and events on them to poll or wait for with a
//!   deadline (the NCCL engine enqueues without waiting and polls);
//! - for the device executor of the collectives: a device-to-device copy and a kernel launch
//!   ordered on a stream (the stand-in runs host functions there instead: see
//!   [`standin_enqueue`]).
//!
//! Every CUDA entry is guarded (`is_culib_present`): with no driver, [`gpu`] is an error naming
//! why, never a panic.

pub mod cache;
mod driver;
pub mod fdshare;
pub mod link;
mod standin;
mod stream;

pub use stream::{HostFn, STREAM_MAGIC, StreamAbi};

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A device failure, naming the call and the device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// No usable CUDA driver (or stand-in) in this process.
    #[error("no CUDA device is usable in this process: {why}")]
    NoDevice {
        /// Why (library missing, cuInit failed, no device).
        why: String,
    },
    /// A driver call failed.
    #[error("{call} failed on device {device}: {code}")]
    Call {
        /// The driver entry, e.g. `cuIpcOpenMemHandle`.
        call: &'static str,
        /// Device ordinal (-1: none).
        device: i32,
        /// The driver's error name and text.
        code: String,
    },
    /// Bad input: a pointer that is not device memory, a key that does not decode, a length
    /// past the allocation.
    #[error("{0}")]
    Invalid(String),
    /// The operation is not possible between these two (another GPU without P2P, a key from
    /// another node, `RCOMM_P2P_LEVEL` forbids it): use another protocol.
    #[error("{0}")]
    Unreachable(String),
}

/// What a device pointer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtrInfo {
    /// Device ordinal in this process.
    pub device: u32,
    /// Start of the allocation holding it.
    pub base: u64,
    /// Size of that allocation in bytes.
    pub size: usize,
    /// The allocation's unique id in this process (never reused: an allocation freed and made
    /// again at the same address has another id).
    pub buffer_id: u64,
}

/// One device, for `rcomm-topo` and the logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Ordinal in this process.
    pub ordinal: u32,
    /// Product name.
    pub name: String,
    /// UUID (the same in every process, whatever `CUDA_VISIBLE_DEVICES` says).
    pub uuid: [u8; 16],
    /// PCI bus id, `0000:3b:00.0`.
    pub pci_bus_id: String,
    /// Memory in bytes.
    pub total_mem: usize,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Compute capability (major, minor).
    pub cc: (u32, u32),
}

/// An asynchronous copy under way (an event on the backend's copy stream).
#[derive(Debug)]
pub struct Pending {
    pub(crate) device: u32,
    /// Backend handle (a `CUevent`; the stand-in's completion id).
    pub(crate) handle: u64,
}

/// A stream of device `device` (a `CUstream`; a stand-in queue), for the stream-ordered calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream {
    /// Device ordinal.
    pub device: u32,
    /// Backend handle (`CUstream` as an integer; 0 is the legacy default stream).
    pub raw: u64,
}

/// An event recorded on a stream ([`Gpu::event_record`]): done once the work queued on the
/// stream before it is. Give it back with [`Gpu::event_destroy`].
#[derive(Debug)]
pub struct Event {
    /// Device ordinal.
    pub device: u32,
    /// Backend handle (a `CUevent`; the stand-in's event id).
    pub(crate) handle: u64,
}

/// Process-wide: [`GpuStats::host_waits`], [`GpuStats::launches`], [`GpuStats::driver_calls`].
/// Counted here, above the backends, so both count alike.
static COUNTS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

thread_local! {
    /// [`COUNTS`] of the calling thread only ([`thread_counts`]).
    static MINE: [std::cell::Cell<u64>; 3] = const {
        [std::cell::Cell::new(0), std::cell::Cell::new(0), std::cell::Cell::new(0)]
    };
}

fn count(i: usize) {
    COUNTS[i].fetch_add(1, Ordering::Relaxed);
    MINE.with(|m| m[i].set(m[i].get() + 1));
}

/// The calling thread's share of [`GpuStats::host_waits`], [`GpuStats::launches`] and
/// [`GpuStats::driver_calls`], in that order: what one thread's work cost, whatever other
/// threads of the process do meanwhile (tests of simulated ranks driven by one thread).
pub fn thread_counts() -> [u64; 3] {
    MINE.with(|m| [m[0].get(), m[1].get(), m[2].get()])
}

/// A blocking host wait (stream, event, synchronous copy).
fn count_wait() {
    count(0);
}

/// Work queued on a stream (a kernel, a copy, a host function).
fn count_launch() {
    count(1);
}

/// Counters of the device layer (tests and `gpu-check` assert them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuStats {
    /// Allocations exported (first export of each).
    pub exports: u64,
    /// Exports answered from the export cache.
    pub export_hits: u64,
    /// Peer allocations imported (opened).
    pub imports: u64,
    /// Imports answered from the import cache.
    pub import_hits: u64,
    /// Imports closed because their allocation went away (a new buffer id at the same place)
    /// or the cache was full.
    pub import_evictions: u64,
    /// Bytes moved by asynchronous copies from imported peer memory (the IPC GET).
    pub ipc_bytes: u64,
    /// Bytes copied device to host and host to device (eager and chunk staging).
    pub staged_bytes: u64,
    /// Blocking waits of the host: on a stream, an event, a synchronous copy, an
    /// asynchronous copy's finish (process-wide, both backends).
    pub host_waits: u64,
    /// Work queued on streams: kernels, stream-ordered copies, host functions (also those a C
    /// library queues through [`StreamAbi`]).
    pub launches: u64,
    /// Calls into the device backend of any kind (through [`Gpu`]'s methods).
    pub driver_calls: u64,
    /// Allocations first exported by file descriptor (VMM and pool memory).
    pub fd_exports: u64,
    /// Peer allocations imported by file descriptor (mapped).
    pub fd_imports: u64,
    /// Per-peer copy streams made (at most [`PEER_STREAMS`] per device).
    pub peer_streams: u64,
}

/// How an allocation was made, which decides how a peer on this node reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocKind {
    /// `cuMemAlloc`: shared by a legacy IPC handle in the key.
    Legacy,
    /// From a stream-ordered memory pool (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`).
    /// `shareable`: the pool was made with POSIX file-descriptor handles; the device's default
    /// pool is not, and its memory cannot be shared.
    Pool {
        /// Whether the pool's handle type allows a file descriptor.
        shareable: bool,
    },
    /// Virtual memory management (`cuMemCreate` + `cuMemMap`, PyTorch's expandable segments).
    /// `shareable`: the handle was made with the POSIX file-descriptor handle type.
    Vmm {
        /// Whether the handle type allows a file descriptor.
        shareable: bool,
    },
}

/// The once-per-process warning that device memory cannot be shared with node peers and is
/// staged through host memory instead: the user can fix it, so say how.
pub(crate) fn warn_unshareable(why: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        rcomm_runtime::rlog!(
            Warn,
            "NET",
            "device memory cannot be shared with node peers ({why}): it is staged through host memory, which is slower. To share it, allocate from a memory pool made with POSIX file-descriptor handles (cuMemPoolCreate, handleTypes CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), or VMM memory whose handle allows them (cuMemCreate, requestedHandleTypes), or with cuMemAlloc. (Said once per process.)"
        );
    });
}

/// The device backend of this process.
#[derive(Debug)]
pub enum Gpu {
    /// The CUDA driver, loaded at run time.
    Cuda(driver::Driver),
    /// The host-memory stand-in (tests; `RCOMM_GPU_STANDIN=1`).
    StandIn(standin::StandIn),
}

/// Bytes of one host staging buffer ([`Gpu::pinned_take`]): device memory streamed through the
/// host goes in chunks of this size, two buffers per transfer, so the copy out of the device of
/// one chunk overlaps the sending of the one before.
pub const STAGE_BYTES: usize = 1 << 20;

/// Copy streams per device for the copies that move a peer's bytes (IPC reads, staging):
/// peer `p` uses stream `p % PEER_STREAMS`, so copies for different peers run side by side
/// instead of queueing behind one stream, and each peer's chunks stay in order on one. A
/// fixed number, not one per peer: a stream is a driver object, and ranks may have thousands
/// of peers (NCCL likewise bounds its channels).
pub const PEER_STREAMS: usize = 8;

/// A staging buffer of [`STAGE_BYTES`] taken from the pool ([`Gpu::pinned_take`]); back to the
/// pool when dropped. Whoever starts a copy into or out of it ([`Gpu::copy_dtoh_async`],
/// [`Gpu::copy_htod_async`]) finishes that copy before reusing it or dropping it.
#[derive(Debug)]
pub struct StageBuf {
    gpu: &'static Gpu,
    addr: u64,
}

impl StageBuf {
    /// A buffer from `gpu`'s pool.
    pub fn take(gpu: &'static Gpu) -> Result<Self, GpuError> {
        Ok(Self {
            gpu,
            addr: gpu.pinned_take()?,
        })
    }

    /// Its address (the destination of a copy).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Its first `len` bytes (at most [`STAGE_BYTES`]) to fill, while no copy reads it.
    pub fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        assert!(len <= STAGE_BYTES, "{len} bytes of a staging buffer");
        // SAFETY: the buffer is STAGE_BYTES of host memory owned by this value (taken from the
        // pool, not handed out twice); no copy reads or writes it now (the owner's rule above),
        // and `&mut self` keeps other views away.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, len) }
    }

    /// Its first `len` bytes (at most [`STAGE_BYTES`]), once the copy into it finished.
    pub fn bytes(&self, len: usize) -> &[u8] {
        assert!(len <= STAGE_BYTES, "{len} bytes of a staging buffer");
        // SAFETY: the buffer is STAGE_BYTES of host memory owned by this value (taken from the
        // pool, not handed out twice); no copy writes it now (the owner's rule above).
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, len) }
    }
}

impl Drop for StageBuf {
    fn drop(&mut self) {
        self.gpu.pinned_give(self.addr);
    }
}

static GPU: OnceLock<Result<Gpu, GpuError>> = OnceLock::new();

/// The device backend, set up on first use: the stand-in when `RCOMM_GPU_STANDIN=1`, else the
/// CUDA driver if one loads and has a device. The error says why there is none.
pub fn gpu() -> Result<&'static Gpu, GpuError> {
    GPU.get_or_init(|| {
        if rcomm_runtime::config::gpu_standin() {
            Ok(Gpu::StandIn(standin::StandIn::new()))
        } else {
            driver::Driver::load().map(Gpu::Cuda)
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Sets up the host-memory stand-in as this process's backend if none was chosen yet (for
/// in-process simulated tests), and returns the backend: the one chosen before if there was
/// one (check [`Gpu::backend_name`]), or its error.
pub fn use_standin() -> Result<&'static Gpu, GpuError> {
    GPU.get_or_init(|| Ok(Gpu::StandIn(standin::StandIn::new())))
        .as_ref()
        .map_err(Clone::clone)
}

/// Queues the host function `f` on stream `s` of the stand-in: the stream's worker thread runs
/// it after what was queued before it, as a GPU runs a stream's work. Lets tests prove that a
/// stream-ordered call waits (or does not wait) for work queued before it.
/// [`GpuError::Invalid`] when the backend is not the stand-in.
pub fn standin_enqueue(s: Stream, f: Box<dyn FnOnce() + Send>) -> Result<(), GpuError> {
    count(2);
    count_launch();
    match gpu()? {
        Gpu::StandIn(g) => g.enqueue(s, f),
        Gpu::Cuda(_) => Err(GpuError::Invalid(
            "standin_enqueue: the device backend is CUDA, not the stand-in".into(),
        )),
    }
}

/// The backend if one was already set up or can be (no error: `None`).
pub fn gpu_if_present() -> Option<&'static Gpu> {
    gpu().ok()
}

macro_rules! both {
    ($self:ident, $g:ident => $e:expr) => {{
        count(2);
        match $self {
            Gpu::Cuda($g) => $e,
            Gpu::StandIn($g) => $e,
        }
    }};
}

impl Gpu {
    /// `"cuda"` or `"stand-in"`, for logs.
    pub fn backend_name(&self) -> &'static str {
        match self {
            Gpu::Cuda(_) => "cuda",
            Gpu::StandIn(_) => "stand-in",
        }
    }

    /// The devices this process sees.
    pub fn devices(&self) -> Result<Vec<DeviceInfo>, GpuError> {
        both!(self, g => g.devices())
    }

    /// Allocates `len` bytes on `device` (plain `cuMemAlloc`, so it can be exported by IPC).
    pub fn alloc(&self, device: u32, len: usize) -> Result<u64, GpuError> {
        both!(self, g => g.alloc(device, len))
    }

    /// Allocates `len` bytes on `device` as `kind` would (for tests and frameworks that want
    /// pool or VMM memory; [`free`](Self::free) frees it).
    pub fn alloc_kind(&self, device: u32, len: usize, kind: AllocKind) -> Result<u64, GpuError> {
        both!(self, g => g.alloc_kind(device, len, kind))
    }

    /// How the allocation holding `ptr` was made.
    pub fn alloc_kind_of(&self, ptr: u64) -> Result<AllocKind, GpuError> {
        both!(self, g => g.alloc_kind_of(ptr))
    }

    /// Frees what [`alloc`](Self::alloc) returned.
    pub fn free(&self, ptr: u64) -> Result<(), GpuError> {
        both!(self, g => g.free(ptr))
    }

    /// (free, total) bytes of `device`.
    pub fn mem_info(&self, device: u32) -> Result<(usize, usize), GpuError> {
        both!(self, g => g.mem_info(device))
    }

    /// What `ptr` is; [`GpuError::Invalid`] if it is not device memory of this process.
    pub fn ptr_info(&self, ptr: u64) -> Result<PtrInfo, GpuError> {
        both!(self, g => g.ptr_info(ptr))
    }

    /// Copies `dst.len()` bytes of device memory at `src` to the host, waiting for it.
    pub fn copy_dtoh(&self, dst: &mut [u8], src: u64) -> Result<(), GpuError> {
        count_wait();
        both!(self, g => g.copy_dtoh(dst, src))
    }

    /// Copies `src` to device memory at `dst`, waiting for it.
    pub fn copy_htod(&self, dst: u64, src: &[u8]) -> Result<(), GpuError> {
        count_wait();
        both!(self, g => g.copy_htod(dst, src))
    }

    /// Copies `len` bytes between device addresses of this process, waiting for it.
    pub fn copy_dtod(&self, dst: u64, src: u64, len: usize) -> Result<(), GpuError> {
        count_wait();
        both!(self, g => g.copy_dtod(dst, src, len))
    }

    /// The allocation holding `ptr..ptr+len` as a dma-buf, for an RDMA NIC to reach directly
    /// (GPUDirect RDMA, `ibv_reg_dmabuf_mr`): `(fd, offset of ptr in it)`; the caller closes
    /// `fd` once registered. The stand-in has no dma-buf: it answers `(-1, 0)`, which only the
    /// simulated verbs fabric accepts (its device memory is host memory).
    pub fn dmabuf(&self, ptr: u64, len: usize) -> Result<(i32, u64), GpuError> {
        both!(self, g => g.dmabuf(ptr, len))
    }

    /// Exports the allocation holding `ptr..ptr+len` for peers on this node: a key of at most
    /// [`crate::mem::RKEY_MAX`] bytes naming the allocation (IPC handle, buffer id, device
    /// UUID), the offset of `ptr` in it and `len`. Cached per allocation (a freed and remade
    /// allocation is exported anew).
    pub fn export(&self, ptr: u64, len: usize) -> Result<crate::mem::RKey, GpuError> {
        both!(self, g => g.export(ptr, len))
    }

    /// Registers `ptr..ptr+len` (device memory of this process) for sharing with node peers
    /// ahead of its first transfer: exported now, and the export kept in the cache until
    /// [`deregister`](Self::deregister) (never dropped to make room).
    pub fn register(&self, ptr: u64, len: usize) -> Result<(), GpuError> {
        self.export(ptr, len)?;
        both!(self, g => g.pin_export(ptr))
    }

    /// Drops the export of the allocation holding `ptr` (registered or not): peers can no
    /// longer ask for its descriptor, and the next transfer exports it anew. Peers' imports
    /// of it stay until the allocation is freed (a new buffer id at its place evicts them).
    pub fn deregister(&self, ptr: u64) -> Result<bool, GpuError> {
        both!(self, g => g.drop_export(ptr))
    }

    /// Starts copying `len` bytes of `peer`'s memory named by `key` (from its
    /// [`export`](Self::export)) to `dst` (device memory of this process, or host memory),
    /// importing the allocation on first use (cached per peer and allocation). The copy runs
    /// on `peer`'s copy stream (see [`PEER_STREAMS`]); poll it with [`query`](Self::query).
    /// [`GpuError::Unreachable`]: this pair cannot copy directly (use staging).
    pub fn get(
        &self,
        peer: u32,
        key: &crate::mem::RKey,
        dst: u64,
        len: usize,
    ) -> Result<Pending, GpuError> {
        both!(self, g => g.get(peer, key, dst, len))
    }

    /// A host staging buffer of [`STAGE_BYTES`] (pinned on CUDA, so device copies into it are
    /// asynchronous and run at full speed), from a pool; give it back with
    /// [`pinned_give`](Self::pinned_give).
    pub fn pinned_take(&self) -> Result<u64, GpuError> {
        both!(self, g => g.pinned_take())
    }

    /// Returns a staging buffer to the pool (its copies finished).
    pub fn pinned_give(&self, p: u64) {
        both!(self, g => g.pinned_give(p))
    }

    /// Starts copying `len` (at most [`STAGE_BYTES`]) bytes of device memory at `src` into the
    /// staging buffer `dst`, on the copy stream of `peer` (the rank the bytes go to); poll with
    /// [`query`](Self::query), then [`release`](Self::release) or [`finish`](Self::finish).
    pub fn copy_dtoh_async(
        &self,
        peer: u32,
        dst: u64,
        src: u64,
        len: usize,
    ) -> Result<Pending, GpuError> {
        both!(self, g => g.copy_dtoh_async(peer, dst, src, len))
    }

    /// Starts copying `len` (at most [`STAGE_BYTES`]) bytes of the staging buffer `src` to
    /// device memory at `dst`, on the copy stream of `peer` (the rank the bytes came from):
    /// the chunks of one message queue in order behind each other on that stream, each with
    /// its own event, so the host goes on receiving the next chunk while this one lands. Poll
    /// with [`query`](Self::query); the staging buffer stays the caller's until the copy is
    /// done.
    pub fn copy_htod_async(
        &self,
        peer: u32,
        dst: u64,
        src: u64,
        len: usize,
    ) -> Result<Pending, GpuError> {
        both!(self, g => g.copy_htod_async(peer, dst, src, len))
    }

    /// Whether the copy is done (then [`finish`](Self::finish) it).
    pub fn query(&self, p: &Pending) -> Result<bool, GpuError> {
        both!(self, g => g.query(p))
    }

    /// Waits for the copy and releases it.
    pub fn finish(&self, p: Pending) -> Result<(), GpuError> {
        count_wait();
        both!(self, g => g.finish(p))
    }

    /// Releases a copy that [`query`](Self::query) reported done: no host wait (it is not
    /// counted as one), unlike [`finish`](Self::finish) of a copy that may still run.
    pub fn release(&self, p: Pending) -> Result<(), GpuError> {
        both!(self, g => g.finish(p))
    }

    /// Closes every import from `peer` (it was lost or left).
    pub fn forget_peer(&self, peer: u32) {
        both!(self, g => g.forget_peer(peer))
    }

    /// A new stream on `device` (for users without their own, tests, benchmarks).
    pub fn stream_create(&self, device: u32) -> Result<Stream, GpuError> {
        both!(self, g => g.stream_create(device))
    }

    /// Destroys a stream made by [`stream_create`](Self::stream_create).
    pub fn stream_destroy(&self, s: Stream) -> Result<(), GpuError> {
        both!(self, g => g.stream_destroy(s))
    }

    /// Waits on the host until the work enqueued on `s` so far is done (an event recorded on
    /// `s` and waited for, so later work on `s` is not waited for).
    pub fn stream_wait_host(&self, s: Stream) -> Result<(), GpuError> {
        count_wait();
        both!(self, g => g.stream_wait_host(s))
    }

    /// Whether all work queued on `s` so far is done; never blocks.
    pub fn stream_query(&self, s: Stream) -> Result<bool, GpuError> {
        both!(self, g => g.stream_query(s))
    }

    /// Records an event on `s` after the work queued there so far. On CUDA a stream being
    /// captured into a graph takes no event: [`GpuError::Invalid`] says so.
    pub fn event_record(&self, s: Stream) -> Result<Event, GpuError> {
        both!(self, g => g.event_record(s))
    }

    /// Whether `e`'s work is done; never blocks.
    pub fn event_query(&self, e: &Event) -> Result<bool, GpuError> {
        both!(self, g => g.event_query(e))
    }

    /// Waits on the host for `e` until `deadline`: false when the deadline came first.
    pub fn event_wait_host(&self, e: &Event, deadline: Instant) -> Result<bool, GpuError> {
        count_wait();
        both!(self, g => g.event_wait_host(e, deadline))
    }

    /// Makes the work queued on `s` from now on wait for `e` (no host wait).
    pub fn stream_wait_event(&self, s: Stream, e: &Event) -> Result<(), GpuError> {
        both!(self, g => g.stream_wait_event(s, e))
    }

    /// Gives an event back.
    pub fn event_destroy(&self, e: Event) -> Result<(), GpuError> {
        both!(self, g => g.event_destroy(e))
    }

    /// Whether `s` is being captured into a CUDA graph (then nothing may wait for it or record
    /// an event the host polls). Never on the stand-in.
    pub fn stream_is_capturing(&self, s: Stream) -> Result<bool, GpuError> {
        match self {
            Gpu::Cuda(g) => {
                count(2);
                g.stream_is_capturing(s)
            }
            Gpu::StandIn(_) => Ok(false),
        }
    }

    /// Queues a copy of `len` bytes between device addresses of this process on `s` (it runs
    /// after the work queued on `s` before it; wait with [`stream_wait_host`](Self::stream_wait_host)).
    pub fn copy_dtod_on(&self, s: Stream, dst: u64, src: u64, len: usize) -> Result<(), GpuError> {
        count_launch();
        both!(self, g => g.copy_dtod_on(s, dst, src, len))
    }

    /// Queues kernel `func` of the module `image` (a CUBIN, or PTX text) on `s`, `grid` blocks
    /// of `block` threads, its parameters all 8 bytes wide (pointers and 64-bit counts) in
    /// `args`. The module is loaded once per device and image (keyed by its address: pass bytes
    /// that live for the process, as NVRTC's cache hands out); a driver that refuses it gives
    /// an error naming its version, the image and the oldest driver that loads it. The
    /// stand-in cannot run kernels: [`GpuError::Invalid`] there (its executors queue host
    /// functions instead).
    pub fn launch(
        &self,
        s: Stream,
        image: &std::sync::Arc<[u8]>,
        func: &str,
        grid: u32,
        block: u32,
        args: &[u64],
    ) -> Result<(), GpuError> {
        count(2);
        count_launch();
        match self {
            Gpu::Cuda(g) => g.launch(s, image, func, grid, block, args),
            Gpu::StandIn(_) => Err(GpuError::Invalid(format!(
                "the stand-in device cannot run the kernel {func} (it runs host functions)"
            ))),
        }
    }

    /// Counters.
    pub fn stats(&self) -> GpuStats {
        let mut s = match self {
            Gpu::Cuda(g) => g.stats(),
            Gpu::StandIn(g) => g.stats(),
        };
        let c = |i: usize| COUNTS[i].load(Ordering::Relaxed);
        (s.host_waits, s.launches, s.driver_calls) = (c(0), c(1), c(2));
        s
    }
}

#[cfg(test)]
mod driver_fd_tests;
#[cfg(test)]
mod fd_tests;
#[cfg(test)]
mod tests;
