//! The backend on the CUDA driver API (see the parent module for contexts, streams and peers).

use super::super::cache::{ExportCache, ImportCache, KeyParts, ShareKind, decode_key, encode_key};
use super::super::{PEER_STREAMS, STAGE_BYTES};
use super::*;
use crate::gpu::link::uuid_text;
use cudarc::driver::sys as cu;

mod events;
use rcomm_runtime::config::P2pLevel;
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, MutexGuard, OnceLock};

mod copy;
mod home;
mod ipc;
mod share;
use share::Mapping;

/// Every driver entry this backend calls (checked in [`Driver::load`]).
const ENTRIES: &[&str] = &[
    "cuInit",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoD_v2",
    "cuMemcpyAsync",
    "cuMemcpyDtoHAsync_v2",
    "cuMemGetInfo_v2",
    "cuMemGetAddressRange_v2",
    "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle",
    "cuPointerGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
    "cuStreamIsCapturing",
    "cuMemHostAlloc",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuDeviceGetName",
    "cuDeviceGetUuid",
    "cuDeviceGetPCIBusId",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuDeviceCanAccessPeer",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuMemcpyDtoDAsync_v2",
    "cuModuleLoadData",
    "cuDriverGetVersion",
    "cuModuleGetFunction",
    "cuLaunchKernel",
    "cuMemcpyHtoDAsync_v2",
    "cuCtxGetCurrent",
    "cuCtxGetDevice",
    "cuMemRetainAllocationHandle",
    "cuMemGetAllocationPropertiesFromHandle",
    "cuMemExportToShareableHandle",
    "cuMemImportFromShareableHandle",
    "cuMemGetAllocationGranularity",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    "cuMemRelease",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolSetAccess",
    "cuMemPoolExportToShareableHandle",
    "cuMemPoolExportPointer",
    "cuMemPoolImportFromShareableHandle",
    "cuMemPoolImportPointer",
    "cuMemAllocFromPoolAsync",
    "cuMemFreeAsync",
    "cuDeviceGetDefaultMemPool",
];

/// Most imports held per process.
const IMPORT_CAP: usize = 256;

fn err_text(r: cu::CUresult) -> String {
    let mut name: *const c_char = std::ptr::null();
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: both calls write a pointer to a static string (or leave it null on failure).
    let (a, b) = unsafe {
        (
            cu::cuGetErrorName(r, &mut name),
            cu::cuGetErrorString(r, &mut text),
        )
    };
    let s = |ok: cu::CUresult, p: *const c_char| {
        if ok == cu::CUresult::CUDA_SUCCESS && !p.is_null() {
            // SAFETY: the driver returned a NUL-terminated static string.
            Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        } else {
            None
        }
    };
    match (s(a, name), s(b, text)) {
        (Some(n), Some(t)) => format!("{n}: {t}"),
        (Some(n), None) => n,
        _ => format!("{r:?}"),
    }
}

fn check(r: cu::CUresult, call: &'static str, device: i32) -> Result<(), GpuError> {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Call {
            call,
            device,
            code: err_text(r),
        })
    }
}

/// Loads a module into the current context: a CUBIN as is, PTX NUL-terminated (the driver
/// JIT-compiles it). A refusal names the driver, the image and the oldest driver that loads it
/// (`rcomm_kernels::cuda::image::load_error`), since "unsupported PTX version" alone does not
/// say that a newer driver or older kernels would do.
fn load_module(image: &[u8], device: i32) -> Result<usize, GpuError> {
    use rcomm_kernels::cuda::image;
    let ptx;
    let data: *const c_void = if image::is_elf(image) {
        // The driver takes no length: an image whose header tables lie past its end is
        // refused here rather than read out of bounds.
        image::cubin_sm(image)
            .map_err(|why| GpuError::Invalid(format!("not a loadable CUBIN: {why}")))?;
        image.as_ptr().cast()
    } else {
        ptx = std::ffi::CString::new(image.strip_suffix(b"\0").unwrap_or(image))
            .map_err(|_| GpuError::Invalid("PTX text with a NUL byte inside".into()))?;
        ptx.as_ptr().cast()
    };
    let mut m: cu::CUmodule = std::ptr::null_mut();
    // SAFETY: `data` is an ELF image whose header tables lie inside it (checked) or a
    // NUL-terminated PTX text, alive across the call;
    // the driver loads it for the current context's device and writes one module handle.
    let r = unsafe { cu::cuModuleLoadData(&mut m, data) };
    if r == cu::CUresult::CUDA_SUCCESS {
        return Ok(m as usize);
    }
    Err(GpuError::Call {
        call: "cuModuleLoadData",
        device,
        code: image::load_error(driver_version(), image, &err_text(r)),
    })
}

/// The CUDA version the driver implements (`12040` for 12.4), if it says.
fn driver_version() -> Option<i32> {
    let mut v: c_int = 0;
    // SAFETY: writes one integer.
    let r = unsafe { cu::cuDriverGetVersion(&mut v) };
    (r == cu::CUresult::CUDA_SUCCESS && v > 0).then_some(v)
}

/// One visible device. Raw handles are kept as integers.
#[derive(Debug)]
struct Dev {
    dev: cu::CUdevice,
    uuid: [u8; 16],
    pci: String,
    /// The retained primary context (`CUcontext` as an integer).
    ctx: OnceLock<Result<usize, GpuError>>,
}

#[derive(Debug)]
struct State {
    /// Per exported allocation: the key's handle and how it is shared.
    exports: ExportCache<([u8; 64], ShareKind)>,
    imports: ImportCache<Mapping>,
    /// Per device, the copy streams of peers (`CUstream` as integers; 0: not made yet):
    /// peer `p`'s is `[p % PEER_STREAMS]`.
    copy_streams: Vec<[usize; PEER_STREAMS]>,
    /// Per device, the stream of the copies that return when done (non-blocking, so they
    /// neither wait for nor hold up the legacy default stream's work; 0: not made yet).
    sync_streams: Vec<usize>,
    /// Per device, the pool made with file-descriptor handles (`alloc_kind`; 0: none yet).
    fd_pools: Vec<usize>,
    /// VMM allocations made here: base → mapped size (`free` unmaps them).
    vmm: HashMap<u64, usize>,
    /// The descriptor of each pool whose memory was exported (`CUmemoryPool` as an integer):
    /// one per pool, however many of its allocations are offered.
    pool_fds: HashMap<usize, std::sync::Arc<std::os::fd::OwnedFd>>,
    /// Per device, idle events (`CUevent` as integers).
    events: Vec<Vec<usize>>,
    logged: HashSet<u32>,
    stats: GpuStats,
    /// Idle pinned staging buffers of `STAGE_BYTES`.
    pinned: Vec<usize>,
    /// A pinned host bounce buffer (address, or 0 before first use) for small copies:
    /// from pinned memory a copy to the device is complete on return, so no stream wait.
    bounce: usize,
    /// Loaded modules: (device, address of the image) → `CUmodule` as an integer. The image
    /// (CUBIN or PTX) is NVRTC's cached one, alive for the process, so its address names it.
    modules: HashMap<(u32, usize), usize>,
    /// Kernels: (device, image address, name) → `CUfunction` as an integer.
    functions: HashMap<(u32, usize, String), usize>,
}

/// Bytes of the pinned bounce buffer; larger copies go from pageable memory and wait.
const BOUNCE: usize = 256 << 10;

/// The CUDA driver, loaded at run time.
#[derive(Debug)]
pub struct Driver {
    devs: Vec<Dev>,
    pid: u32,
    /// The driver has `cuMemGetHandleForAddressRange` (CUDA 11.7+): dma-bufs for
    /// GPUDirect RDMA. Optional, so older drivers still load.
    has_dmabuf: bool,
    /// Boxed: keeps [`Gpu`] small.
    state: Box<Mutex<State>>,
    /// The device of this process, decided on first need ([`home`]).
    home: OnceLock<Result<u32, GpuError>>,
    /// The device of the context current on the thread that loaded the driver (the first to
    /// use device memory), if any: a framework's choice, seen before this layer makes its own
    /// contexts current.
    first_ctx: Option<u32>,
}

/// The non-blocking stream in `slot`, made on first use (the current context is `device`'s)
/// and kept for the process: one per device and purpose, never the legacy stream.
pub(super) fn lazy_stream(slot: &mut usize, device: u32) -> Result<usize, GpuError> {
    if *slot == 0 {
        let mut s: cu::CUstream = std::ptr::null_mut();
        // SAFETY: writes one stream handle.
        check(
            unsafe {
                cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint)
            },
            "cuStreamCreate",
            device as i32,
        )?;
        *slot = s as usize;
    }
    Ok(*slot)
}

impl Driver {
    pub(in crate::gpu) fn load() -> Result<Self, GpuError> {
        std::panic::catch_unwind(Self::load_inner).unwrap_or_else(|p| {
            let why = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(GpuError::NoDevice {
                why: format!("loading the CUDA driver failed: {why}"),
            })
        })
    }

    fn load_inner() -> Result<Self, GpuError> {
        let no = |why: String| GpuError::NoDevice { why };
        // SAFETY: only tries to open the library (no symbol is called).
        if !unsafe { cu::is_culib_present() } {
            return Err(no(
                "the CUDA driver library (libcuda.so) is not found".into()
            ));
        }
        // SAFETY: the library is present (checked above); `get` only looks symbols up.
        let lib = unsafe { cu::culib() };
        for name in ENTRIES {
            // SAFETY: looking a symbol up does not call it.
            if unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err() {
                return Err(no(format!(
                    "the CUDA driver has no {name} (driver too old or too new)"
                )));
            }
        }
        // SAFETY: looking a symbol up does not call it.
        let has_dmabuf =
            unsafe { lib.get::<*const c_void>(b"cuMemGetHandleForAddressRange") }.is_ok();
        // SAFETY: plain driver call.
        let r = unsafe { cu::cuInit(0) };
        if r != cu::CUresult::CUDA_SUCCESS {
            return Err(no(format!("cuInit failed: {}", err_text(r))));
        }
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        check(
            unsafe { cu::cuDeviceGetCount(&mut n) },
            "cuDeviceGetCount",
            -1,
        )
        .map_err(|e| no(e.to_string()))?;
        if n <= 0 {
            return Err(no("the CUDA driver sees no device".into()));
        }
        let mut devs = Vec::new();
        for i in 0..n {
            let mut dev: cu::CUdevice = 0;
            // SAFETY: writes one device handle.
            check(unsafe { cu::cuDeviceGet(&mut dev, i) }, "cuDeviceGet", i)?;
            let mut uuid = cu::CUuuid { bytes: [0; 16] };
            // SAFETY: writes 16 bytes.
            check(
                unsafe { cu::cuDeviceGetUuid(&mut uuid, dev) },
                "cuDeviceGetUuid",
                i,
            )?;
            let mut bus = [0 as c_char; 64];
            // SAFETY: writes at most 64 bytes, NUL-terminated.
            check(
                unsafe { cu::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as c_int, dev) },
                "cuDeviceGetPCIBusId",
                i,
            )?;
            devs.push(Dev {
                dev,
                uuid: uuid.bytes.map(|b| b as u8),
                pci: pci_id(&c_string(&bus)),
                ctx: OnceLock::new(),
            });
        }
        let nd = devs.len();
        let first_ctx = home::current_device(&devs);
        Ok(Self {
            devs,
            pid: std::process::id(),
            has_dmabuf,
            state: Box::new(Mutex::new(State {
                exports: ExportCache::new(4096),
                imports: ImportCache::new(IMPORT_CAP),
                copy_streams: vec![[0; PEER_STREAMS]; nd],
                sync_streams: vec![0; nd],
                fd_pools: vec![0; nd],
                vmm: HashMap::new(),
                pool_fds: HashMap::new(),
                events: vec![Vec::new(); nd],
                logged: HashSet::new(),
                stats: GpuStats::default(),
                bounce: 0,
                modules: HashMap::new(),
                functions: HashMap::new(),
                pinned: Vec::new(),
            })),
            home: OnceLock::new(),
            first_ctx,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dev(&self, device: u32) -> Result<&Dev, GpuError> {
        self.devs.get(device as usize).ok_or_else(|| {
            GpuError::Invalid(format!(
                "no CUDA device {device} (this process sees {})",
                self.devs.len()
            ))
        })
    }

    /// Makes `device`'s primary context current on this thread (retaining it on first use).
    fn cur(&self, device: u32) -> Result<(), GpuError> {
        let d = self.dev(device)?;
        let ctx = d
            .ctx
            .get_or_init(|| {
                let mut c: cu::CUcontext = std::ptr::null_mut();
                // SAFETY: writes one context handle; the retain is kept for the process.
                check(
                    unsafe { cu::cuDevicePrimaryCtxRetain(&mut c, d.dev) },
                    "cuDevicePrimaryCtxRetain",
                    device as i32,
                )?;
                Ok(c as usize)
            })
            .clone()?;
        // SAFETY: a retained primary context, never released.
        check(
            unsafe { cu::cuCtxSetCurrent(ctx as cu::CUcontext) },
            "cuCtxSetCurrent",
            device as i32,
        )
    }

    /// Makes this process's device's context current (for calls that need one but no
    /// particular one).
    fn any_cur(&self) -> Result<(), GpuError> {
        self.cur(self.home()?)
    }

    pub(in crate::gpu) fn devices(&self) -> Result<Vec<DeviceInfo>, GpuError> {
        let mut out = Vec::new();
        for (i, d) in self.devs.iter().enumerate() {
            let o = i as i32;
            let mut name = [0 as c_char; 256];
            // SAFETY: writes at most 256 bytes, NUL-terminated.
            check(
                unsafe { cu::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, d.dev) },
                "cuDeviceGetName",
                o,
            )?;
            let mut mem: usize = 0;
            // SAFETY: writes one size.
            check(
                unsafe { cu::cuDeviceTotalMem_v2(&mut mem, d.dev) },
                "cuDeviceTotalMem_v2",
                o,
            )?;
            let attr = |a: cu::CUdevice_attribute| -> Result<u32, GpuError> {
                let mut v: c_int = 0;
                // SAFETY: writes one int.
                check(
                    unsafe { cu::cuDeviceGetAttribute(&mut v, a, d.dev) },
                    "cuDeviceGetAttribute",
                    o,
                )?;
                Ok(v.max(0) as u32)
            };
            use cu::CUdevice_attribute::*;
            out.push(DeviceInfo {
                ordinal: i as u32,
                name: c_string(&name),
                uuid: d.uuid,
                pci_bus_id: d.pci.clone(),
                total_mem: mem,
                sm_count: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
                cc: (
                    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
                ),
            });
        }
        Ok(out)
    }

    pub(in crate::gpu) fn alloc(&self, device: u32, len: usize) -> Result<u64, GpuError> {
        self.cur(device)?;
        let mut p: cu::CUdeviceptr = 0;
        // SAFETY: writes one device pointer.
        check(
            unsafe { cu::cuMemAlloc_v2(&mut p, len.max(1)) },
            "cuMemAlloc_v2",
            device as i32,
        )?;
        Ok(p)
    }

    pub(in crate::gpu) fn free(&self, ptr: u64) -> Result<(), GpuError> {
        let i = self.ptr_info(ptr)?;
        if i.base != ptr {
            return Err(GpuError::Invalid(format!(
                "free of 0x{ptr:x}: not the start of its allocation (0x{:x})",
                i.base
            )));
        }
        self.cur(i.device)?;
        let d = i.device as i32;
        if let Some(size) = self.lock().vmm.remove(&ptr) {
            crate::gpu::fdshare::withdraw(i.buffer_id);
            // SAFETY: a VMM range mapped by `alloc_kind`, just removed from the table, so
            // unmapped and freed once (the mapping held the memory's last reference).
            let a = check(unsafe { cu::cuMemUnmap(ptr, size) }, "cuMemUnmap", d);
            // SAFETY: as above.
            let b = check(
                unsafe { cu::cuMemAddressFree(ptr, size) },
                "cuMemAddressFree",
                d,
            );
            return a.and(b);
        }
        match self.classify(ptr) {
            share::Class::Pool(_) => {
                crate::gpu::fdshare::withdraw(i.buffer_id);
                let s = self.sync_stream(&mut self.lock(), i.device)?;
                // SAFETY: the base of a live pool allocation of this process, freed once.
                check(
                    unsafe { cu::cuMemFreeAsync(ptr, s as cu::CUstream) },
                    "cuMemFreeAsync",
                    d,
                )?;
                self.wait_stream(s, i.device)
            }
            share::Class::Vmm(h) => {
                // SAFETY: retained by `classify`, released once.
                unsafe { cu::cuMemRelease(h) };
                Err(GpuError::Invalid(format!(
                    "free of 0x{ptr:x}: VMM memory this layer did not map; unmap it where it was mapped"
                )))
            }
            share::Class::Legacy => {
                crate::gpu::fdshare::withdraw(i.buffer_id);
                // SAFETY: `ptr` is the base of a live device allocation of this process.
                check(unsafe { cu::cuMemFree_v2(ptr) }, "cuMemFree_v2", d)
            }
        }
    }

    pub(in crate::gpu) fn mem_info(&self, device: u32) -> Result<(usize, usize), GpuError> {
        self.cur(device)?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two sizes.
        check(
            unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) },
            "cuMemGetInfo_v2",
            device as i32,
        )?;
        Ok((free, total))
    }

    pub(in crate::gpu) fn ptr_info(&self, ptr: u64) -> Result<PtrInfo, GpuError> {
        let not_dev = || {
            GpuError::Invalid(format!(
                "address 0x{ptr:x} is not device memory of this process"
            ))
        };
        if ptr == 0 {
            return Err(not_dev());
        }
        self.any_cur()?;
        let mut mt: c_uint = 0;
        // SAFETY: MEMORY_TYPE writes one `CUmemorytype` (a 32-bit enum, read as u32). The
        // driver checks `ptr` itself (an unknown address is an error, not a fault).
        let r = unsafe {
            cu::cuPointerGetAttribute(
                &mut mt as *mut c_uint as *mut c_void,
                cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                ptr,
            )
        };
        if r != cu::CUresult::CUDA_SUCCESS || mt != cu::CUmemorytype::CU_MEMORYTYPE_DEVICE as c_uint
        {
            return Err(not_dev());
        }
        let mut ord: c_int = -1;
        // SAFETY: DEVICE_ORDINAL writes one int.
        check(
            unsafe {
                cu::cuPointerGetAttribute(
                    &mut ord as *mut c_int as *mut c_void,
                    cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    ptr,
                )
            },
            "cuPointerGetAttribute",
            -1,
        )?;
        let mut id: u64 = 0;
        // SAFETY: BUFFER_ID writes one unsigned long long.
        check(
            unsafe {
                cu::cuPointerGetAttribute(
                    &mut id as *mut u64 as *mut c_void,
                    cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID,
                    ptr,
                )
            },
            "cuPointerGetAttribute",
            ord,
        )?;
        let (mut base, mut size): (cu::CUdeviceptr, usize) = (0, 0);
        // SAFETY: writes a pointer and a size.
        check(
            unsafe { cu::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) },
            "cuMemGetAddressRange_v2",
            ord,
        )?;
        if ord < 0 || ord as usize >= self.devs.len() {
            return Err(GpuError::Invalid(format!(
                "address 0x{ptr:x} is on device {ord}, which this process does not see"
            )));
        }
        Ok(PtrInfo {
            device: ord as u32,
            base,
            size,
            buffer_id: id,
        })
    }

    /// `ptr..ptr+len` within one allocation.
    fn range(&self, ptr: u64, len: usize) -> Result<PtrInfo, GpuError> {
        let i = self.ptr_info(ptr)?;
        if ptr
            .checked_add(len as u64)
            .is_none_or(|e| e > i.base + i.size as u64)
        {
            return Err(GpuError::Invalid(format!(
                "0x{ptr:x}+{len} runs past its allocation (0x{:x}+{})",
                i.base, i.size
            )));
        }
        Ok(i)
    }

    pub(in crate::gpu) fn dmabuf(&self, ptr: u64, len: usize) -> Result<(i32, u64), GpuError> {
        let i = self.ptr_info(ptr)?;
        if !self.has_dmabuf {
            return Err(GpuError::Unreachable(
                "the CUDA driver has no cuMemGetHandleForAddressRange (dma-buf export)".into(),
            ));
        }
        if ptr + len as u64 > i.base + i.size as u64 {
            return Err(GpuError::Invalid(format!(
                "0x{ptr:x}+{len} runs past its allocation"
            )));
        }
        // The whole allocation (cuMemAlloc allocations are page-aligned and sized in
        // pages), so one dma-buf serves every range of it.
        self.cur(i.device)?;
        let mut fd: c_int = -1;
        // SAFETY: `i.base`/`i.size` describe a live allocation of this process; the call
        // writes one int.
        check(
            unsafe {
                cu::cuMemGetHandleForAddressRange(
                    (&mut fd as *mut c_int).cast(),
                    i.base,
                    i.size,
                    cu::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    0,
                )
            },
            "cuMemGetHandleForAddressRange",
            i.device as i32,
        )?;
        Ok((fd, ptr - i.base))
    }

    /// Waits until everything queued on `device`'s copy streams is done (before closing a
    /// mapping a copy may still read).
    fn drain_copies(&self, st: &mut State, device: u32) -> Result<(), GpuError> {
        for s in st.copy_streams[device as usize] {
            if s == 0 {
                continue;
            }
            let e = self.event(st, device)?;
            // SAFETY: a live event and a live copy stream of the current context.
            check(
                unsafe { cu::cuEventRecord(e as cu::CUevent, s as cu::CUstream) },
                "cuEventRecord",
                device as i32,
            )?;
            // SAFETY: a recorded event.
            check(
                unsafe { cu::cuEventSynchronize(e as cu::CUevent) },
                "cuEventSynchronize",
                device as i32,
            )?;
            st.events[device as usize].push(e);
        }
        Ok(())
    }

    /// An idle event of `device` (the device's context is current).
    fn event(&self, st: &mut State, device: u32) -> Result<usize, GpuError> {
        if let Some(e) = st.events[device as usize].pop() {
            return Ok(e);
        }
        let mut e: cu::CUevent = std::ptr::null_mut();
        // SAFETY: writes one event handle.
        check(
            unsafe {
                cu::cuEventCreate(&mut e, cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint)
            },
            "cuEventCreate",
            device as i32,
        )?;
        Ok(e as usize)
    }

    /// The copy stream of `peer`'s bytes on `device` (made on first use).
    fn copy_stream(&self, st: &mut State, device: u32, peer: u32) -> Result<usize, GpuError> {
        let slot = &mut st.copy_streams[device as usize][peer as usize % PEER_STREAMS];
        if *slot == 0 {
            lazy_stream(slot, device)?;
            st.stats.peer_streams += 1;
        }
        Ok(*slot)
    }

    /// A pinned staging buffer of `STAGE_BYTES`, from a pool (allocating pinned memory
    /// costs a kernel call and page pinning: once per buffer per process).
    pub(in crate::gpu) fn pinned_take(&self) -> Result<u64, GpuError> {
        let mut st = self.lock();
        if let Some(p) = st.pinned.pop() {
            return Ok(p as u64);
        }
        self.any_cur()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: allocates STAGE_BYTES of portable pinned host memory, pooled for the
        // life of the process.
        check(
            unsafe { cu::cuMemHostAlloc(&mut p, STAGE_BYTES, cu::CU_MEMHOSTALLOC_PORTABLE) },
            "cuMemHostAlloc",
            -1,
        )?;
        Ok(p as u64)
    }

    /// Returns a staging buffer to the pool.
    pub(in crate::gpu) fn pinned_give(&self, p: u64) {
        self.lock().pinned.push(p as usize);
    }

    /// Starts copying `len` bytes of device memory at `src` into the pinned staging
    /// buffer `dst`, on `peer`'s copy stream; poll it with `query`.
    pub(in crate::gpu) fn copy_dtoh_async(
        &self,
        peer: u32,
        dst: u64,
        src: u64,
        len: usize,
    ) -> Result<Pending, GpuError> {
        self.stage_async(peer, src, len, |s| {
            // SAFETY: the source lies in a device allocation (checked by `stage_async`); `dst`
            // is a pinned staging buffer of STAGE_BYTES owned by the caller until the copy is
            // done.
            let r = unsafe {
                cu::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, len, s as cu::CUstream)
            };
            (r, "cuMemcpyDtoHAsync_v2")
        })
    }

    /// Starts copying `len` bytes of the pinned staging buffer `src` to device memory at
    /// `dst`, on `peer`'s copy stream; poll it with `query`.
    pub(in crate::gpu) fn copy_htod_async(
        &self,
        peer: u32,
        dst: u64,
        src: u64,
        len: usize,
    ) -> Result<Pending, GpuError> {
        self.stage_async(peer, dst, len, |s| {
            // SAFETY: the destination lies in a device allocation (checked by `stage_async`);
            // `src` is a pinned staging buffer of STAGE_BYTES the caller keeps until the copy
            // is done.
            let r = unsafe {
                cu::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, len, s as cu::CUstream)
            };
            (r, "cuMemcpyHtoDAsync_v2")
        })
    }

    /// One staging copy of `len` bytes at device address `dev_ptr`, queued by `copy` on
    /// `peer`'s copy stream and followed by an event of its own: the chunks of a message
    /// chain on the stream, and each can be polled without waiting for the stream.
    fn stage_async(
        &self,
        peer: u32,
        dev_ptr: u64,
        len: usize,
        copy: impl FnOnce(usize) -> (cu::CUresult, &'static str),
    ) -> Result<Pending, GpuError> {
        if len > STAGE_BYTES {
            return Err(GpuError::Invalid(format!(
                "{len} bytes do not fit a staging buffer"
            )));
        }
        let i = self.range(dev_ptr, len)?;
        self.cur(i.device)?;
        let mut st = self.lock();
        let s = self.copy_stream(&mut st, i.device, peer)?;
        let e = self.event(&mut st, i.device)?;
        let (r, call) = copy(s);
        if let Err(err) = check(r, call, i.device as i32) {
            st.events[i.device as usize].push(e);
            return Err(err);
        }
        // SAFETY: a live event and stream of the current context.
        let r = unsafe { cu::cuEventRecord(e as cu::CUevent, s as cu::CUstream) };
        if let Err(err) = check(r, "cuEventRecord", i.device as i32) {
            st.events[i.device as usize].push(e);
            return Err(err);
        }
        st.stats.staged_bytes += len as u64;
        Ok(Pending {
            device: i.device,
            handle: e as u64,
        })
    }

    pub(in crate::gpu) fn query(&self, p: &Pending) -> Result<bool, GpuError> {
        self.cur(p.device)?;
        // SAFETY: an event recorded by `get` and not finished yet.
        let r = unsafe { cu::cuEventQuery(p.handle as usize as cu::CUevent) };
        match r {
            cu::CUresult::CUDA_SUCCESS => Ok(true),
            cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(r, "cuEventQuery", p.device as i32).map(|()| false),
        }
    }

    pub(in crate::gpu) fn finish(&self, p: Pending) -> Result<(), GpuError> {
        self.cur(p.device)?;
        // SAFETY: an event recorded by `get`, finished once (`p` is consumed).
        check(
            unsafe { cu::cuEventSynchronize(p.handle as usize as cu::CUevent) },
            "cuEventSynchronize",
            p.device as i32,
        )?;
        self.lock().events[p.device as usize].push(p.handle as usize);
        Ok(())
    }

    pub(in crate::gpu) fn forget_peer(&self, peer: u32) {
        let mut st = self.lock();
        let gone = st.imports.remove_peer(peer);
        st.logged.remove(&peer);
        self.close(&mut st, gone);
    }

    pub(in crate::gpu) fn copy_dtod_on(
        &self,
        s: Stream,
        dst: u64,
        src: u64,
        len: usize,
    ) -> Result<(), GpuError> {
        let d = self.range(dst, len)?;
        self.range(src, len)?;
        self.cur(d.device)?;
        // SAFETY: both ranges lie in device allocations of this process (checked); the
        // caller keeps them alive until the stream has run the copy.
        check(
            unsafe { cu::cuMemcpyDtoDAsync_v2(dst, src, len, s.raw as usize as cu::CUstream) },
            "cuMemcpyDtoDAsync_v2",
            d.device as i32,
        )
    }

    /// The kernel `func` of module `image` on `device`, loading the module on first use.
    fn function(
        &self,
        device: u32,
        image: &std::sync::Arc<[u8]>,
        func: &str,
    ) -> Result<usize, GpuError> {
        let key = image.as_ptr() as usize;
        let mut st = self.lock();
        if let Some(&f) = st.functions.get(&(device, key, func.to_string())) {
            return Ok(f);
        }
        let d = device as i32;
        let module = match st.modules.get(&(device, key)) {
            Some(&m) => m,
            None => {
                let m = load_module(image, d)?;
                st.modules.insert((device, key), m);
                m
            }
        };
        let name = std::ffi::CString::new(func)
            .map_err(|_| GpuError::Invalid(format!("kernel name {func:?}")))?;
        let mut f: cu::CUfunction = std::ptr::null_mut();
        // SAFETY: a loaded module and a NUL-terminated name; writes one function handle.
        check(
            unsafe { cu::cuModuleGetFunction(&mut f, module as cu::CUmodule, name.as_ptr()) },
            "cuModuleGetFunction",
            d,
        )?;
        st.functions
            .insert((device, key, func.to_string()), f as usize);
        Ok(f as usize)
    }

    pub(in crate::gpu) fn launch(
        &self,
        s: Stream,
        image: &std::sync::Arc<[u8]>,
        func: &str,
        grid: u32,
        block: u32,
        args: &[u64],
    ) -> Result<(), GpuError> {
        self.cur(s.device)?;
        let f = self.function(s.device, image, func)?;
        // The driver reads each parameter through a pointer to its value.
        let mut vals: Vec<u64> = args.to_vec();
        let mut ptrs: Vec<*mut c_void> = vals
            .iter_mut()
            .map(|v| (v as *mut u64).cast::<c_void>())
            .collect();
        // SAFETY: `f` is a kernel of a loaded module whose parameters are all 8 bytes wide
        // (the caller's contract, as the reductions of kernels/cuda are); `ptrs` points at
        // `vals`, both alive across the call (the driver copies the values at launch).
        check(
            unsafe {
                cu::cuLaunchKernel(
                    f as cu::CUfunction,
                    grid.max(1),
                    1,
                    1,
                    block.max(1),
                    1,
                    1,
                    0,
                    s.raw as usize as cu::CUstream,
                    ptrs.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel",
            s.device as i32,
        )
    }

    pub(in crate::gpu) fn stream_create(&self, device: u32) -> Result<Stream, GpuError> {
        self.cur(device)?;
        let mut s: cu::CUstream = std::ptr::null_mut();
        // SAFETY: writes one stream handle.
        check(
            unsafe {
                cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint)
            },
            "cuStreamCreate",
            device as i32,
        )?;
        Ok(Stream {
            device,
            raw: s as usize as u64,
        })
    }

    pub(in crate::gpu) fn stream_destroy(&self, s: Stream) -> Result<(), GpuError> {
        if s.raw == 0 {
            return Err(GpuError::Invalid(
                "the default stream cannot be destroyed".into(),
            ));
        }
        self.cur(s.device)?;
        // SAFETY: a stream made by `stream_create`, destroyed once by the caller's contract.
        check(
            unsafe { cu::cuStreamDestroy_v2(s.raw as usize as cu::CUstream) },
            "cuStreamDestroy_v2",
            s.device as i32,
        )
    }

    pub(in crate::gpu) fn stream_wait_host(&self, s: Stream) -> Result<(), GpuError> {
        self.cur(s.device)?;
        let e = {
            let mut st = self.lock();
            self.event(&mut st, s.device)?
        };
        let d = s.device as i32;
        // SAFETY: a live event; `s.raw` is a stream of this device's context (0: the legacy
        // default stream).
        let r = check(
            unsafe { cu::cuEventRecord(e as cu::CUevent, s.raw as usize as cu::CUstream) },
            "cuEventRecord",
            d,
        )
        // SAFETY: a recorded event.
        .and_then(|()| {
            check(
                unsafe { cu::cuEventSynchronize(e as cu::CUevent) },
                "cuEventSynchronize",
                d,
            )
        });
        self.lock().events[s.device as usize].push(e);
        r
    }

    pub(in crate::gpu) fn stats(&self) -> GpuStats {
        self.lock().stats
    }
}

fn c_string(b: &[c_char]) -> String {
    let bytes: Vec<u8> = b
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `00000000:3B:00.0` or `0000:3b:00.0` → `0000:3b:00.0`.
fn pci_id(s: &str) -> String {
    let s = s.trim().to_ascii_lowercase();
    match s.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn pci_ids_are_normalized() {
        assert_eq!(super::pci_id("00000000:3B:00.0"), "0000:3b:00.0");
        assert_eq!(super::pci_id("0000:3B:00.0"), "0000:3b:00.0");
    }
}
