//! User memory held by in-flight requests.
//!
//! The one place in `rcomm-core` with `unsafe`: a request must write into (or read from) a user
//! buffer during progress calls made after the call that posted it returned, so the engine keeps
//! a raw (pointer, length) pair. The invariant every creator upholds: **a `Region` is created
//! only for memory that stays valid and is not otherwise accessed until the request holding it
//! has completed or has been removed from the engine.** The three creators are the blocking
//! calls (which do not return before that), owned requests (which keep the `Vec` alive and, when
//! dropped early, hand it to the engine until completion) and scoped requests (whose scope
//! waits for them).

/// A user buffer, by address and length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Region {
    ptr: *mut u8,
    len: usize,
    /// Device memory is never touched through the pointer: the engine moves it through
    /// `rcomm_transport::gpu` (staging copies, IPC gets).
    kind: MemKind,
}

use rcomm_transport::mem::MemKind;

// SAFETY: a Region is only an address; the engine accesses it under its lock, and the invariant
// above makes the memory exclusively the request's while it is in the engine, whichever thread
// runs progress.
unsafe impl Send for Region {}

impl Region {
    /// A region the request may write (receives).
    pub(crate) fn from_mut(b: &mut [u8]) -> Self {
        Self {
            ptr: b.as_mut_ptr(),
            len: b.len(),
            kind: MemKind::Host,
        }
    }

    /// A region the request only reads (sends). It is never written through.
    pub(crate) fn from_ref(b: &[u8]) -> Self {
        Self {
            ptr: b.as_ptr().cast_mut(),
            len: b.len(),
            kind: MemKind::Host,
        }
    }

    /// A region of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// The module invariant: the memory is valid for `len` bytes and is not otherwise accessed
    /// until the request holding the region completes or is removed from the engine. The
    /// collective executor uses it for disjoint pieces of one buffer within a phase.
    pub(crate) unsafe fn from_raw(ptr: *mut u8, len: usize) -> Self {
        Self {
            // An empty region may come as null (C passes it with a count of 0); a slice may
            // not be made from null even when empty.
            ptr: if len == 0 {
                std::ptr::NonNull::dangling().as_ptr()
            } else {
                ptr
            },
            len,
            kind: MemKind::Host,
        }
    }

    /// A region of device memory: `len` bytes at device address `addr` of `device`, checked by
    /// the caller (`crate::gpu`) to lie in one allocation. The module invariant holds for it as
    /// for host memory; it is only ever read and written by the device layer.
    pub(crate) fn device(addr: u64, len: usize, device: u32) -> Self {
        Self {
            ptr: addr as *mut u8,
            len,
            kind: MemKind::Cuda { device },
        }
    }

    /// Whether it is device memory.
    pub(crate) fn is_device(&self) -> bool {
        self.kind != MemKind::Host
    }

    /// The memory as the transports see it.
    pub(crate) fn mem_ref(&self) -> rcomm_transport::mem::MemRef {
        rcomm_transport::mem::MemRef {
            addr: self.ptr as u64,
            len: self.len,
            kind: self.kind,
        }
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Address, for single copy by a peer.
    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// The bytes (sends). Host memory only.
    pub(crate) fn bytes(&self) -> &[u8] {
        debug_assert!(!self.is_device(), "device memory read as host bytes");
        // SAFETY: by the module invariant the memory is valid for `len` bytes and nobody writes
        // it while the request is in the engine.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, writable (receives).
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn bytes_mut(&self) -> &mut [u8] {
        debug_assert!(!self.is_device(), "device memory written as host bytes");
        // SAFETY: by the module invariant the memory is valid and exclusively the request's;
        // the engine (under its lock) is the only user, and it never holds two of these slices
        // of one region at once.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Copies `data` to `offset` (host or device memory); `Ok(false)` (nothing written) if it
    /// does not fit.
    pub(crate) fn write_checked(
        &self,
        offset: usize,
        data: &[u8],
    ) -> Result<bool, rcomm_transport::gpu::GpuError> {
        match offset.checked_add(data.len()) {
            Some(end) if end <= self.len && self.is_device() => {
                if !data.is_empty() {
                    rcomm_transport::gpu::gpu()?
                        .copy_htod(self.ptr as u64 + offset as u64, data)?;
                }
                Ok(true)
            }
            Some(end) if end <= self.len => {
                // SAFETY: offset..end lies inside the region (checked), which the module
                // invariant makes valid and exclusively the request's; `data` is a distinct
                // buffer (a transport's slot or a stored message).
                unsafe {
                    rcomm_transport::shm::copy_bytes(
                        data.as_ptr(),
                        self.ptr.add(offset),
                        data.len(),
                    )
                };
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Reads `dst.len()` bytes at `offset` (host or device memory) into `dst`.
    pub(crate) fn read_into(
        &self,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), rcomm_transport::gpu::GpuError> {
        debug_assert!(offset + dst.len() <= self.len);
        if dst.is_empty() {
            return Ok(());
        }
        if self.is_device() {
            rcomm_transport::gpu::gpu()?.copy_dtoh(dst, self.ptr as u64 + offset as u64)
        } else {
            dst.copy_from_slice(&self.bytes()[offset..offset + dst.len()]);
            Ok(())
        }
    }
}
