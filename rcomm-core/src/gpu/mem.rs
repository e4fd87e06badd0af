//! Device memory (references, buffers, streams) and point-to-point on it.

use crate::p2p::region::Region;
use crate::{CommError, Result};
use crate::{Communicator, Scope, ScopedRequest, Source, Status, Tag};
use rcomm_transport::gpu::{self as dev, Gpu};
use std::marker::PhantomData;

pub use rcomm_transport::gpu::{DeviceInfo, GpuError, GpuStats, Stream};

/// `addr`, `len`, `is_empty` of a device range.
macro_rules! accessors {
    () => {
        /// Device address.
        pub fn addr(&self) -> u64 {
            self.addr
        }

        /// Length in bytes.
        pub fn len(&self) -> usize {
            self.len
        }

        /// Whether it is empty.
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }
    };
}

/// Device memory a call reads: an address in this process and a length in bytes.
#[derive(Debug, Clone, Copy)]
pub struct DevRef<'a> {
    addr: u64,
    len: usize,
    _life: PhantomData<&'a [u8]>,
}

/// Device memory a call writes.
#[derive(Debug)]
pub struct DevMut<'a> {
    addr: u64,
    len: usize,
    _life: PhantomData<&'a mut [u8]>,
}

impl DevRef<'_> {
    /// `bytes` bytes of device memory at `addr`.
    ///
    /// # Safety
    /// `addr..addr + bytes` is device memory of this process that stays allocated, and is not
    /// written by anyone else, while the value (and any call using it) lives. rcomm checks that
    /// the range lies in one device allocation before using it.
    pub unsafe fn from_raw(addr: u64, bytes: usize) -> Self {
        Self {
            addr,
            len: bytes,
            _life: PhantomData,
        }
    }

    accessors!();
}

impl DevMut<'_> {
    /// `bytes` bytes of device memory at `addr`, to be written.
    ///
    /// # Safety
    /// As [`DevRef::from_raw`], and nobody else reads or writes the range meanwhile.
    pub unsafe fn from_raw(addr: u64, bytes: usize) -> Self {
        Self {
            addr,
            len: bytes,
            _life: PhantomData,
        }
    }

    accessors!();
}

/// Device memory that can be sent.
pub trait DeviceMem {
    /// The memory, borrowed.
    fn device_ref(&self) -> DevRef<'_>;
}

/// Device memory that can be received into.
pub trait DeviceMemMut {
    /// The memory, borrowed mutably.
    fn device_mut(&mut self) -> DevMut<'_>;
}

impl DeviceMem for DevRef<'_> {
    fn device_ref(&self) -> DevRef<'_> {
        *self
    }
}

impl DeviceMem for DevMut<'_> {
    fn device_ref(&self) -> DevRef<'_> {
        DevRef {
            addr: self.addr,
            len: self.len,
            _life: PhantomData,
        }
    }
}

impl DeviceMemMut for DevMut<'_> {
    fn device_mut(&mut self) -> DevMut<'_> {
        DevMut {
            addr: self.addr,
            len: self.len,
            _life: PhantomData,
        }
    }
}

#[cfg(feature = "cuda")]
mod cudarc_impls {
    use super::*;
    use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice};

    // The pointer is taken on the slice's own stream; the guard cudarc returns is dropped at
    // once (a plain call expects the buffer ready: its writers are done).
    macro_rules! readable {
        ($($t:ty),*) => {$(
            impl<T> DeviceMem for $t {
                fn device_ref(&self) -> DevRef<'_> {
                    let (p, _g) = self.device_ptr(self.stream());
                    DevRef {
                        addr: p,
                        len: self.num_bytes(),
                        _life: PhantomData,
                    }
                }
            }
        )*};
    }
    macro_rules! writable {
        ($($t:ty),*) => {$(
            impl<T> DeviceMemMut for $t {
                fn device_mut(&mut self) -> DevMut<'_> {
                    let len = self.num_bytes();
                    let s = self.stream().clone();
                    let (p, _g) = self.device_ptr_mut(&s);
                    DevMut {
                        addr: p,
                        len,
                        _life: PhantomData,
                    }
                }
            }
        )*};
    }
    readable!(CudaSlice<T>, CudaView<'_, T>, CudaViewMut<'_, T>);
    writable!(CudaSlice<T>, CudaViewMut<'_, T>);

    /// The rcomm [`Stream`] of a cudarc stream (for the `*_on` calls).
    pub fn stream_of(s: &cudarc::driver::CudaStream) -> Stream {
        Stream {
            device: s.context().ordinal() as u32,
            raw: s.cu_stream() as u64,
        }
    }
}

#[cfg(feature = "cuda")]
pub use cudarc_impls::stream_of;

/// This process's rank in its world as the launcher gave it (0 when started alone), for
/// errors of calls that have no communicator.
pub(super) fn launch_rank() -> u32 {
    rcomm_runtime::config::global()
        .as_ref()
        .ok()
        .and_then(|c| c.launch.as_ref())
        .map_or(0, |l| l.rank)
}

pub(crate) fn backend(op: &'static str, rank: u32) -> Result<&'static Gpu> {
    dev::gpu().map_err(|e| CommError::Device {
        op,
        rank,
        why: format!("{e} (set RCOMM_GPU_STANDIN=1 only for tests without a GPU)"),
    })
}

pub(crate) fn dev_err(op: &'static str, rank: u32) -> impl Fn(GpuError) -> CommError {
    move |e| CommError::Device {
        op,
        rank,
        why: e.to_string(),
    }
}

/// Checks that `addr..addr+len` is device memory of one allocation; its region.
pub(crate) fn region_of(op: &'static str, rank: u32, addr: u64, len: usize) -> Result<Region> {
    let g = backend(op, rank)?;
    if len == 0 {
        // Nothing is read or written; the address need not be valid (as MPI's count 0).
        return Ok(Region::device(addr, 0, 0));
    }
    let info = g.ptr_info(addr).map_err(dev_err(op, rank))?;
    let end = addr.checked_add(len as u64);
    if end.is_none_or(|e| e > info.base + info.size as u64) {
        return Err(CommError::Device {
            op,
            rank,
            why: format!(
                "{len} bytes at 0x{addr:x} run past the end of their allocation (0x{:x}, {} bytes)",
                info.base, info.size
            ),
        });
    }
    Ok(Region::device(addr, len, info.device))
}

/// Checks that `addr..addr+len` is device memory of one allocation (for the device
/// collectives).
pub(crate) fn check_range(op: &'static str, rank: u32, addr: u64, len: usize) -> Result<()> {
    region_of(op, rank, addr, len).map(drop)
}

/// An allocation of device memory made by rcomm (`cuMemAlloc`, so peers on this node can map
/// it): for tests, benchmarks and code without a GPU framework of its own. Freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    addr: u64,
    len: usize,
    device: u32,
}

impl DeviceBuffer {
    /// `len` bytes on `device`, uninitialised.
    pub fn new(device: u32, len: usize) -> Result<Self> {
        let g = backend("alloc", launch_rank())?;
        let addr = g
            .alloc(device, len)
            .map_err(dev_err("alloc", launch_rank()))?;
        Ok(Self { addr, len, device })
    }

    /// A buffer on `device` holding `data`.
    pub fn from_host(device: u32, data: &[u8]) -> Result<Self> {
        let b = Self::new(device, data.len())?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    accessors!();

    /// Its device.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// Copies `data` (at most `len` bytes) to the start of the buffer.
    pub fn copy_from_host(&self, data: &[u8]) -> Result<()> {
        if data.len() > self.len {
            return Err(CommError::InvalidArg(format!(
                "{} bytes do not fit a device buffer of {}",
                data.len(),
                self.len
            )));
        }
        if data.is_empty() {
            return Ok(());
        }
        let g = backend("copy", launch_rank())?;
        g.copy_htod(self.addr, data)
            .map_err(dev_err("copy", launch_rank()))
    }

    /// Copies the start of the buffer into `out` (at most `len` bytes).
    pub fn copy_to_host(&self, out: &mut [u8]) -> Result<()> {
        if out.len() > self.len {
            return Err(CommError::InvalidArg(format!(
                "{} bytes asked of a device buffer of {}",
                out.len(),
                self.len
            )));
        }
        if out.is_empty() {
            return Ok(());
        }
        let g = backend("copy", launch_rank())?;
        g.copy_dtoh(out, self.addr)
            .map_err(dev_err("copy", launch_rank()))
    }

    /// The whole buffer, copied to the host.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Ok(g) = dev::gpu() {
            let _ = g.free(self.addr);
        }
    }
}

impl DeviceMem for DeviceBuffer {
    fn device_ref(&self) -> DevRef<'_> {
        DevRef {
            addr: self.addr,
            len: self.len,
            _life: PhantomData,
        }
    }
}

impl DeviceMemMut for DeviceBuffer {
    fn device_mut(&mut self) -> DevMut<'_> {
        DevMut {
            addr: self.addr,
            len: self.len,
            _life: PhantomData,
        }
    }
}

/// The devices this process sees (an error saying why when none is usable).
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let g = backend("devices", launch_rank())?;
    g.devices().map_err(dev_err("devices", launch_rank()))
}

/// The device layer's counters (exports, imports and cache hits, bytes moved by IPC and by
/// staging), or `None` when no device was used.
pub fn stats() -> Option<GpuStats> {
    dev::gpu_if_present().map(Gpu::stats)
}

/// Registers `len` bytes of device memory at `ptr` (memory of this process, from any
/// allocator) for sharing with ranks on this node ahead of its first transfer: its allocation
/// is exported now (a legacy IPC handle, or, for pool and VMM memory, a file descriptor offered
/// to node peers), and the export is kept until [`deregister`]. Unregistered buffers are
/// exported on first use and cached all the same; registering moves that cost out of the
/// first transfer and keeps the export from being dropped to make room. Memory that cannot be
/// shared (the default pool's; VMM memory without file-descriptor handles) is an error here,
/// saying why; sent unregistered, it is staged through host memory.
pub fn register(ptr: u64, len: usize) -> Result<()> {
    let r = launch_rank();
    let g = backend("register", r)?;
    region_of("register", r, ptr, len)?;
    g.register(ptr, len).map_err(dev_err("register", r))
}

/// Drops the export of the allocation holding `ptr` (registered or exported by a transfer):
/// node peers can no longer import it anew; the next transfer exports it again. Their imports
/// made before stay valid while the allocation lives, and are replaced once it is freed (a new
/// allocation at its place has another buffer id). Returns whether there was an export.
pub fn deregister(ptr: u64) -> Result<bool> {
    let r = launch_rank();
    let g = backend("deregister", r)?;
    g.deregister(ptr).map_err(dev_err("deregister", r))
}

/// Which device backend runs: `"cuda"`, `"stand-in"`, or the reason there is none.
pub fn backend_name() -> std::result::Result<&'static str, String> {
    dev::gpu().map(Gpu::backend_name).map_err(|e| e.to_string())
}

/// A new stream on `device` (for code that has none of its own).
pub fn stream_create(device: u32) -> Result<Stream> {
    let g = backend("stream", launch_rank())?;
    g.stream_create(device)
        .map_err(dev_err("stream", launch_rank()))
}

/// Destroys a stream made by [`stream_create`].
pub fn stream_destroy(s: Stream) -> Result<()> {
    let g = backend("stream", launch_rank())?;
    g.stream_destroy(s)
        .map_err(dev_err("stream", launch_rank()))
}

/// Waits on the host until the work enqueued on `s` so far is done.
pub fn stream_synchronize(s: Stream) -> Result<()> {
    let g = backend("stream", launch_rank())?;
    g.stream_wait_host(s)
        .map_err(dev_err("stream", launch_rank()))
}

impl Communicator {
    pub(crate) fn world_me(&self) -> u32 {
        self.world_rank(self.rank()).unwrap_or(self.rank())
    }

    /// Sends device memory `buf` to `dest` with `tag`; returns when `buf` may be reused
    /// (CUDA-aware MPI's `MPI_Send` on a device pointer). Any receive matches it: into device
    /// or host memory.
    pub fn send_device(&self, buf: &impl DeviceMem, dest: u32, tag: Tag) -> Result<()> {
        let b = buf.device_ref();
        let region = region_of("send", self.world_me(), b.addr, b.len)?;
        self.send_region(region, dest, tag, "send")
    }

    /// Receives into device memory `buf` from `src` with `tag` (a message from host or device
    /// memory); returns when `buf` holds it. A larger message is [`CommError::Truncated`].
    pub fn recv_device(
        &self,
        buf: &mut impl DeviceMemMut,
        src: impl Into<Source>,
        tag: Tag,
    ) -> Result<Status> {
        let b = buf.device_mut();
        let region = region_of("recv", self.world_me(), b.addr, b.len)?;
        self.recv_region(region, src.into(), tag, "recv")
    }

    /// Sends `sbuf` to `dest` and receives into `rbuf` from `src` at once, both device memory.
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv_device(
        &self,
        sbuf: &impl DeviceMem,
        dest: u32,
        stag: Tag,
        rbuf: &mut impl DeviceMemMut,
        src: impl Into<Source>,
        rtag: Tag,
    ) -> Result<Status> {
        let me = self.world_me();
        let s = sbuf.device_ref();
        let r = rbuf.device_mut();
        let sreg = region_of("sendrecv", me, s.addr, s.len)?;
        let rreg = region_of("sendrecv", me, r.addr, r.len)?;
        self.sendrecv_regions(sreg, dest, stag, rreg, src.into(), rtag)
    }

    /// [`send_device`](Self::send_device) ordered on `stream`: it sends what the work enqueued
    /// on `stream` before the call left in `buf`.
    pub fn send_device_on(
        &self,
        buf: &impl DeviceMem,
        dest: u32,
        tag: Tag,
        stream: Stream,
    ) -> Result<()> {
        let me = self.world_me();
        backend("send", me)?
            .stream_wait_host(stream)
            .map_err(dev_err("send", me))?;
        self.send_device(buf, dest, tag)
    }

    /// [`recv_device`](Self::recv_device) ordered on `stream`: it writes `buf` after the work
    /// enqueued on `stream` before the call, and work enqueued after it sees the message.
    pub fn recv_device_on(
        &self,
        buf: &mut impl DeviceMemMut,
        src: impl Into<Source>,
        tag: Tag,
        stream: Stream,
    ) -> Result<Status> {
        let me = self.world_me();
        backend("recv", me)?
            .stream_wait_host(stream)
            .map_err(dev_err("recv", me))?;
        self.recv_device(buf, src, tag)
    }
}

impl<'s, 'env> Scope<'s, 'env> {
    /// Starts sending borrowed device memory; the scope waits for it.
    pub fn isend_device(
        &'s self,
        buf: &'env impl DeviceMem,
        dest: u32,
        tag: Tag,
    ) -> Result<ScopedRequest<'s, 'env>> {
        let b = buf.device_ref();
        let region = region_of("isend", self.comm().world_me(), b.addr, b.len)?;
        self.isend_region(region, dest, tag)
    }

    /// Starts receiving into borrowed device memory; the scope waits for it.
    pub fn irecv_device(
        &'s self,
        buf: &'env mut impl DeviceMemMut,
        src: impl Into<Source>,
        tag: Tag,
    ) -> Result<ScopedRequest<'s, 'env>> {
        let b = buf.device_mut();
        let region = region_of("irecv", self.comm().world_me(), b.addr, b.len)?;
        self.irecv_region(region, src.into(), tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads<D: DeviceMem + ?Sized>() {}
    fn writes<D: DeviceMemMut + ?Sized>() {}

    #[test]
    fn gpu_code_s_own_types_are_device_memory() {
        // The impls a user's call sites resolve to (no GPU needed to check that they exist;
        // running them needs one: scripts/gpu-check.sh). The no-device error is checked in its
        // own process (tests/tests/gpu.rs): here the sim tests may have chosen the stand-in.
        reads::<DeviceBuffer>();
        writes::<DeviceBuffer>();
        reads::<DevRef<'static>>();
        writes::<DevMut<'static>>();
        #[cfg(feature = "cuda")]
        {
            use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
            reads::<CudaSlice<f32>>();
            writes::<CudaSlice<u16>>();
            reads::<CudaView<'static, u8>>();
            reads::<CudaViewMut<'static, i64>>();
            writes::<CudaViewMut<'static, i64>>();
        }
    }
}
