//! Allocation kinds on the CUDA driver and their sharing with node peers: legacy `cuMemAlloc`
//! memory by IPC handle (in the parent module), VMM memory (`cuMemCreate` + `cuMemMap`) and
//! memory of a pool made with POSIX file-descriptor handles by descriptor
//! ([`crate::gpu::fdshare`]). A descriptor-based import needs no view of the exporter's GPU:
//! it maps the physical memory for this process's device, so ranks that each see only their
//! own GPU (per-rank `CUDA_VISIBLE_DEVICES`) still copy directly.
//!
//! VMM memory is taken to be mapped one handle per `cuMemMap`, at offset 0 (as PyTorch's
//! expandable segments and cudarc map it): the range `cuMemGetAddressRange` reports is then
//! the handle's, which is what the importer maps. A message across two such mappings fails
//! the range check and is staged.

use super::*;
use crate::gpu::cache::ShareKind;
use crate::gpu::fdshare;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

/// What a device allocation is, found from the driver.
pub(super) enum Class {
    /// `cuMemAlloc`.
    Legacy,
    /// From a memory pool.
    Pool(cu::CUmemoryPool),
    /// VMM: a retained handle, released by whoever takes this.
    Vmm(cu::CUmemGenericAllocationHandle),
}

/// A peer's allocation mapped here (the import cache's value).
#[derive(Debug, Clone, Copy)]
pub(super) enum Mapping {
    /// Opened from a legacy IPC handle.
    Ipc { dev: u32, ptr: u64 },
    /// A VMM handle imported from a descriptor, mapped at `ptr`.
    Vmm {
        dev: u32,
        ptr: u64,
        size: usize,
        handle: u64,
    },
    /// A pool imported from a descriptor (as a `CUmemoryPool` integer) and the allocation's
    /// pointer in it.
    Pool { dev: u32, ptr: u64, pool: usize },
}

impl Mapping {
    pub(super) fn dev(&self) -> u32 {
        match *self {
            Mapping::Ipc { dev, .. } | Mapping::Vmm { dev, .. } | Mapping::Pool { dev, .. } => dev,
        }
    }

    /// Where the exporter's allocation base lies here.
    pub(super) fn ptr(&self) -> u64 {
        match *self {
            Mapping::Ipc { ptr, .. } | Mapping::Vmm { ptr, .. } | Mapping::Pool { ptr, .. } => ptr,
        }
    }
}

const FD_TYPE: cu::CUmemAllocationHandleType =
    cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

fn location(device: u32) -> cu::CUmemLocation {
    // SAFETY: a plain C struct, all-zero is a valid value before the fields are set.
    let mut l: cu::CUmemLocation = unsafe { std::mem::zeroed() };
    l.type_ = cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    l.id = device as c_int;
    l
}

fn access(device: u32) -> cu::CUmemAccessDesc {
    cu::CUmemAccessDesc {
        location: location(device),
        flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    }
}

fn vmm_prop(device: u32, handles: cu::CUmemAllocationHandleType) -> cu::CUmemAllocationProp {
    // SAFETY: a plain C struct, all-zero is a valid value before the fields are set.
    let mut p: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = handles;
    p.location = location(device);
    p
}

impl Driver {
    /// The VMM granularity of `device` for allocations described by `prop`.
    fn granularity(&self, device: u32, prop: &cu::CUmemAllocationProp) -> Result<usize, GpuError> {
        let mut g: usize = 0;
        // SAFETY: writes one size; `prop` is a valid description.
        check(
            unsafe {
                cu::cuMemGetAllocationGranularity(
                    &mut g,
                    prop,
                    cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )
            },
            "cuMemGetAllocationGranularity",
            device as i32,
        )?;
        Ok(g.max(1))
    }

    /// Reserves `size` bytes of address space, maps `handle` there and lets `device` read and
    /// write it; undone on failure.
    fn map_handle(&self, device: u32, handle: u64, size: usize) -> Result<u64, GpuError> {
        let d = device as i32;
        let mut p: cu::CUdeviceptr = 0;
        // SAFETY: writes one address; no fixed address, default alignment.
        check(
            unsafe { cu::cuMemAddressReserve(&mut p, size, 0, 0, 0) },
            "cuMemAddressReserve",
            d,
        )?;
        // SAFETY: `p..p+size` was just reserved; `handle` is a live handle of at least `size`
        // bytes (the caller's).
        let r = check(
            unsafe { cu::cuMemMap(p, size, 0, handle, 0) },
            "cuMemMap",
            d,
        )
        .and_then(|()| {
            let a = access(device);
            // SAFETY: a mapped range and one access descriptor.
            check(
                unsafe { cu::cuMemSetAccess(p, size, &a, 1) },
                "cuMemSetAccess",
                d,
            )
            .inspect_err(|_| {
                // SAFETY: mapped just above.
                unsafe { cu::cuMemUnmap(p, size) };
            })
        });
        if let Err(e) = r {
            // SAFETY: reserved just above, not mapped.
            unsafe { cu::cuMemAddressFree(p, size) };
            return Err(e);
        }
        Ok(p)
    }

    /// `alloc` for every kind; the current context is `device`'s.
    pub(in crate::gpu) fn alloc_kind(
        &self,
        device: u32,
        len: usize,
        kind: AllocKind,
    ) -> Result<u64, GpuError> {
        let d = device as i32;
        match kind {
            AllocKind::Legacy => self.alloc(device, len),
            AllocKind::Pool { shareable } => {
                self.cur(device)?;
                let dv = self.dev(device)?.dev;
                let mut st = self.lock();
                let pool = if shareable {
                    if st.fd_pools[device as usize] == 0 {
                        // SAFETY: a plain C struct, all-zero is valid before the fields are set.
                        let mut props: cu::CUmemPoolProps = unsafe { std::mem::zeroed() };
                        props.allocType = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
                        props.handleTypes = FD_TYPE;
                        props.location = location(device);
                        let mut p: cu::CUmemoryPool = std::ptr::null_mut();
                        // SAFETY: writes one pool handle; kept for the process.
                        check(
                            unsafe { cu::cuMemPoolCreate(&mut p, &props) },
                            "cuMemPoolCreate",
                            d,
                        )?;
                        st.fd_pools[device as usize] = p as usize;
                    }
                    st.fd_pools[device as usize] as cu::CUmemoryPool
                } else {
                    let mut p: cu::CUmemoryPool = std::ptr::null_mut();
                    // SAFETY: writes one pool handle.
                    check(
                        unsafe { cu::cuDeviceGetDefaultMemPool(&mut p, dv) },
                        "cuDeviceGetDefaultMemPool",
                        d,
                    )?;
                    p
                };
                let s = self.sync_stream(&mut st, device)?;
                drop(st);
                let mut p: cu::CUdeviceptr = 0;
                // SAFETY: writes one pointer; `pool` and `s` are live objects of `device`.
                check(
                    unsafe { cu::cuMemAllocFromPoolAsync(&mut p, len.max(1), pool, s as _) },
                    "cuMemAllocFromPoolAsync",
                    d,
                )?;
                self.wait_stream(s, device)?;
                Ok(p)
            }
            AllocKind::Vmm { shareable } => {
                self.cur(device)?;
                let handles = if shareable {
                    FD_TYPE
                } else {
                    cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE
                };
                let prop = vmm_prop(device, handles);
                let size = len
                    .max(1)
                    .next_multiple_of(self.granularity(device, &prop)?);
                let mut h: cu::CUmemGenericAllocationHandle = 0;
                // SAFETY: writes one handle; `prop` describes pinned memory of `device`.
                check(
                    unsafe { cu::cuMemCreate(&mut h, size, &prop, 0) },
                    "cuMemCreate",
                    d,
                )?;
                match self.map_handle(device, h, size) {
                    Ok(p) => {
                        // The mapping holds the memory; `free` unmaps it and frees the range.
                        // SAFETY: a handle made above, released once (the mapping keeps it).
                        unsafe { cu::cuMemRelease(h) };
                        self.lock().vmm.insert(p, size);
                        Ok(p)
                    }
                    Err(e) => {
                        // SAFETY: made above, not mapped.
                        unsafe { cu::cuMemRelease(h) };
                        Err(e)
                    }
                }
            }
        }
    }

    /// What the allocation with base `base` on `device` is (the context is current).
    pub(super) fn classify(&self, base: u64) -> Class {
        let mut pool: cu::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: MEMPOOL_HANDLE writes one pool handle (an error or null: not pool memory).
        let r = unsafe {
            cu::cuPointerGetAttribute(
                (&mut pool as *mut cu::CUmemoryPool).cast(),
                cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                base,
            )
        };
        if r == cu::CUresult::CUDA_SUCCESS && !pool.is_null() {
            return Class::Pool(pool);
        }
        let mut h: cu::CUmemGenericAllocationHandle = 0;
        // SAFETY: writes one handle, retained (released by whoever takes the class); an error
        // means the address is not VMM memory.
        let r = unsafe { cu::cuMemRetainAllocationHandle(&mut h, base as usize as *mut c_void) };
        if r == cu::CUresult::CUDA_SUCCESS {
            return Class::Vmm(h);
        }
        Class::Legacy
    }

    pub(in crate::gpu) fn alloc_kind_of(&self, ptr: u64) -> Result<AllocKind, GpuError> {
        let i = self.ptr_info(ptr)?;
        self.cur(i.device)?;
        Ok(match self.classify(i.base) {
            Class::Legacy => AllocKind::Legacy,
            Class::Pool(pool) => {
                let mut fd: c_int = -1;
                // SAFETY: writes one descriptor, closed at once: the probe of the pool's
                // handle types (the driver has no query for them).
                let r = unsafe {
                    cu::cuMemPoolExportToShareableHandle(
                        (&mut fd as *mut c_int).cast(),
                        pool,
                        FD_TYPE,
                        0,
                    )
                };
                let shareable = r == cu::CUresult::CUDA_SUCCESS && fd >= 0;
                if shareable {
                    // SAFETY: the driver just handed us this descriptor.
                    drop(unsafe { OwnedFd::from_raw_fd(fd) });
                }
                AllocKind::Pool { shareable }
            }
            Class::Vmm(h) => {
                let shareable = self.vmm_fd_type(h, i.device).unwrap_or(false);
                // SAFETY: retained by `classify`, released once.
                unsafe { cu::cuMemRelease(h) };
                AllocKind::Vmm { shareable }
            }
        })
    }

    /// Whether VMM handle `h` was made with the POSIX file-descriptor handle type.
    fn vmm_fd_type(&self, h: u64, device: u32) -> Result<bool, GpuError> {
        // SAFETY: all-zero is valid before the driver writes it.
        let mut prop: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        // SAFETY: `h` is a live retained handle; writes one property struct.
        check(
            unsafe { cu::cuMemGetAllocationPropertiesFromHandle(&mut prop, h) },
            "cuMemGetAllocationPropertiesFromHandle",
            device as i32,
        )?;
        Ok(prop.requestedHandleTypes.0 & FD_TYPE.0 != 0)
    }

    /// The export of a pool or VMM allocation `i` (the context is current): the descriptor
    /// offered to peers, and the key's kind and handle. `Ok(None)`: legacy memory (the caller
    /// makes an IPC handle).
    pub(super) fn export_fd(
        &self,
        st: &mut State,
        i: &PtrInfo,
    ) -> Result<Option<(ShareKind, [u8; 64])>, GpuError> {
        let d = i.device as i32;
        let unshareable = |why: &str| {
            crate::gpu::warn_unshareable(why);
            GpuError::Unreachable(format!(
                "device memory at 0x{:x} cannot be shared with node peers: {why}",
                i.base
            ))
        };
        let (kind, handle, fd) = match self.classify(i.base) {
            Class::Legacy => return Ok(None),
            Class::Vmm(h) => {
                let fd_ok = self.vmm_fd_type(h, i.device);
                let r = match fd_ok {
                    Ok(true) => {
                        let mut fd: c_int = -1;
                        // SAFETY: a live retained handle; writes one descriptor.
                        check(
                            unsafe {
                                cu::cuMemExportToShareableHandle(
                                    (&mut fd as *mut c_int).cast(),
                                    h,
                                    FD_TYPE,
                                    0,
                                )
                            },
                            "cuMemExportToShareableHandle",
                            d,
                        )
                        .map(|()| fd)
                    }
                    Ok(false) => Err(unshareable(
                        "VMM memory whose handle was made without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR",
                    )),
                    Err(e) => Err(e),
                };
                // SAFETY: retained by `classify`, released once.
                unsafe { cu::cuMemRelease(h) };
                // SAFETY: the driver just handed us this descriptor.
                (
                    ShareKind::VmmFd,
                    [0u8; 64],
                    Arc::new(unsafe { OwnedFd::from_raw_fd(r?) }),
                )
            }
            Class::Pool(pool) => {
                let owned = match st.pool_fds.get(&(pool as usize)) {
                    Some(fd) => fd.clone(),
                    None => {
                        let fd = self.export_pool(pool, &unshareable)?;
                        st.pool_fds.insert(pool as usize, fd.clone());
                        fd
                    }
                };
                let mut data = cu::CUmemPoolPtrExportData { reserved: [0; 64] };
                // SAFETY: writes 64 bytes; `i.base` is a live allocation of `pool`.
                check(
                    unsafe { cu::cuMemPoolExportPointer(&mut data, i.base) },
                    "cuMemPoolExportPointer",
                    d,
                )?;
                (ShareKind::PoolFd, data.reserved, owned)
            }
        };
        fdshare::offer(i.buffer_id, fd)?;
        Ok(Some((kind, handle)))
    }

    /// The descriptor of `pool`; refused (and warned of) for a pool without descriptor handles.
    fn export_pool(
        &self,
        pool: cu::CUmemoryPool,
        unshareable: &dyn Fn(&str) -> GpuError,
    ) -> Result<Arc<OwnedFd>, GpuError> {
        let mut fd: c_int = -1;
        // SAFETY: writes one descriptor; fails for a pool made without descriptor handles
        // (the default pool is one).
        let r = unsafe {
            cu::cuMemPoolExportToShareableHandle((&mut fd as *mut c_int).cast(), pool, FD_TYPE, 0)
        };
        if r != cu::CUresult::CUDA_SUCCESS {
            return Err(unshareable(&format!(
                "memory of a pool made without POSIX file-descriptor handles, as the device's default pool (cudaMallocAsync, PyTorch's cudaMallocAsync allocator): {}",
                err_text(r)
            )));
        }
        // SAFETY: the driver just handed us this descriptor.
        Ok(Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Imports allocation `k` of `peer` by descriptor for `device` (its context is current).
    pub(super) fn import_fd(
        &self,
        peer: u32,
        k: &KeyParts,
        device: u32,
    ) -> Result<Mapping, GpuError> {
        let d = device as i32;
        let fd = fdshare::fetch(peer, k.pid, k.buffer_id)?;
        // The driver takes a POSIX descriptor as a pointer-sized integer.
        let os = fd.as_raw_fd() as usize as *mut c_void;
        match k.kind {
            ShareKind::VmmFd => {
                let mut h: cu::CUmemGenericAllocationHandle = 0;
                // SAFETY: writes one handle; the driver checks the descriptor (ours until
                // dropped below: it dups what it keeps).
                check(
                    unsafe { cu::cuMemImportFromShareableHandle(&mut h, os, FD_TYPE) },
                    "cuMemImportFromShareableHandle",
                    d,
                )?;
                let prop = vmm_prop(device, FD_TYPE);
                let size = self
                    .granularity(device, &prop)
                    .map(|g| (k.alloc_size as usize).max(1).next_multiple_of(g));
                match size.and_then(|size| Ok((self.map_handle(device, h, size)?, size))) {
                    Ok((ptr, size)) => Ok(Mapping::Vmm {
                        dev: device,
                        ptr,
                        size,
                        handle: h,
                    }),
                    Err(e) => {
                        // SAFETY: imported above, not mapped.
                        unsafe { cu::cuMemRelease(h) };
                        Err(e)
                    }
                }
            }
            ShareKind::PoolFd => {
                let mut pool: cu::CUmemoryPool = std::ptr::null_mut();
                // SAFETY: writes one pool handle; the driver checks the descriptor.
                check(
                    unsafe { cu::cuMemPoolImportFromShareableHandle(&mut pool, os, FD_TYPE, 0) },
                    "cuMemPoolImportFromShareableHandle",
                    d,
                )?;
                let a = access(device);
                let mut data = cu::CUmemPoolPtrExportData { reserved: k.handle };
                let mut ptr: cu::CUdeviceptr = 0;
                // SAFETY: an imported pool and one access descriptor; then writes one pointer
                // from 64 bytes of export data the driver validates.
                let r = check(
                    unsafe { cu::cuMemPoolSetAccess(pool, &a, 1) },
                    "cuMemPoolSetAccess",
                    d,
                )
                .and_then(|()| {
                    check(
                        unsafe { cu::cuMemPoolImportPointer(&mut ptr, pool, &mut data) },
                        "cuMemPoolImportPointer",
                        d,
                    )
                });
                if let Err(e) = r {
                    // SAFETY: imported above, nothing taken from it.
                    unsafe { cu::cuMemPoolDestroy(pool) };
                    return Err(e);
                }
                Ok(Mapping::Pool {
                    dev: device,
                    ptr,
                    pool: pool as usize,
                })
            }
            ShareKind::Ipc => Err(GpuError::Invalid("import_fd of a legacy IPC key".into())),
        }
    }

    /// Undoes an import (its device's context is current, its copies drained).
    pub(super) fn unmap(&self, m: Mapping) -> Result<(), GpuError> {
        let d = m.dev() as i32;
        match m {
            // SAFETY: each mapping is closed once: it was just removed from the cache.
            Mapping::Ipc { ptr, .. } => check(
                unsafe { cu::cuIpcCloseMemHandle(ptr) },
                "cuIpcCloseMemHandle",
                d,
            ),
            Mapping::Vmm {
                ptr, size, handle, ..
            } => {
                // SAFETY: as above.
                let a = check(unsafe { cu::cuMemUnmap(ptr, size) }, "cuMemUnmap", d);
                // SAFETY: as above.
                let b = check(
                    unsafe { cu::cuMemAddressFree(ptr, size) },
                    "cuMemAddressFree",
                    d,
                );
                // SAFETY: as above.
                let c = check(unsafe { cu::cuMemRelease(handle) }, "cuMemRelease", d);
                a.and(b).and(c)
            }
            Mapping::Pool { ptr, pool, .. } => {
                // SAFETY: as above; an imported pointer is freed before its pool goes.
                let a = check(unsafe { cu::cuMemFree_v2(ptr) }, "cuMemFree_v2", d);
                // SAFETY: as above.
                let b = check(
                    unsafe { cu::cuMemPoolDestroy(pool as cu::CUmemoryPool) },
                    "cuMemPoolDestroy",
                    d,
                );
                a.and(b)
            }
        }
    }
}
