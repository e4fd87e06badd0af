//! The copies that return when done (staging, `Gpu::copy_*`). They run on an internal
//! non-blocking stream per device and wait for that stream only: the legacy default stream
//! (a null `CUstream`) would serialize them with every blocking stream of the context, a
//! framework's compute included, and wait for all of it.

use super::*;

impl Driver {
    pub(in crate::gpu) fn copy_dtoh(&self, dst: &mut [u8], src: u64) -> Result<(), GpuError> {
        let i = self.range(src, dst.len())?;
        self.cur(i.device)?;
        let s = self.sync_stream(&mut self.lock(), i.device)?;
        // SAFETY: the source lies in a device allocation (checked); `dst` is a Rust slice of
        // that length, written by the copy, which is waited for below before it is used.
        check(
            unsafe {
                cu::cuMemcpyDtoHAsync_v2(
                    dst.as_mut_ptr() as *mut c_void,
                    src,
                    dst.len(),
                    s as cu::CUstream,
                )
            },
            "cuMemcpyDtoHAsync_v2",
            i.device as i32,
        )?;
        self.wait_stream(s, i.device)?;
        self.lock().stats.staged_bytes += dst.len() as u64;
        Ok(())
    }

    pub(in crate::gpu) fn copy_htod(&self, dst: u64, src: &[u8]) -> Result<(), GpuError> {
        let i = self.range(dst, src.len())?;
        self.cur(i.device)?;
        let d = i.device as i32;
        if src.len() <= BOUNCE {
            let mut st = self.lock();
            if st.bounce == 0 {
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: allocates BOUNCE bytes of pinned host memory (portable: pinned
                // for every context), kept for the life of the process.
                let r = unsafe { cu::cuMemHostAlloc(&mut p, BOUNCE, cu::CU_MEMHOSTALLOC_PORTABLE) };
                if r == cu::CUresult::CUDA_SUCCESS && !p.is_null() {
                    st.bounce = p as usize;
                }
            }
            if st.bounce != 0 {
                let s = self.sync_stream(&mut st, i.device)?;
                let b = st.bounce as *mut u8;
                // SAFETY: `b` is BOUNCE bytes of pinned memory, used under the state lock
                // only (held until the copy out of it is done); `src` fits it (checked above)
                // and does not overlap it.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), b, src.len()) };
                // SAFETY: the destination lies in a device allocation (checked); the copy is
                // waited for before the lock on the bounce buffer goes.
                check(
                    unsafe {
                        cu::cuMemcpyHtoDAsync_v2(
                            dst,
                            b as *const c_void,
                            src.len(),
                            s as cu::CUstream,
                        )
                    },
                    "cuMemcpyHtoDAsync_v2",
                    d,
                )?;
                self.wait_stream(s, i.device)?;
                st.stats.staged_bytes += src.len() as u64;
                return Ok(());
            }
        }
        let s = self.sync_stream(&mut self.lock(), i.device)?;
        // SAFETY: the destination lies in a device allocation (checked); `src` is a Rust
        // slice of that length, borrowed until the copy is waited for below.
        check(
            unsafe {
                cu::cuMemcpyHtoDAsync_v2(
                    dst,
                    src.as_ptr() as *const c_void,
                    src.len(),
                    s as cu::CUstream,
                )
            },
            "cuMemcpyHtoDAsync_v2",
            d,
        )?;
        // Done on the device, not only staged: a peer's IPC read (another stream, another
        // process) must see the bytes.
        self.wait_stream(s, i.device)?;
        self.lock().stats.staged_bytes += src.len() as u64;
        Ok(())
    }

    pub(in crate::gpu) fn copy_dtod(&self, dst: u64, src: u64, len: usize) -> Result<(), GpuError> {
        let d = self.range(dst, len)?;
        self.range(src, len)?;
        self.cur(d.device)?;
        let s = self.sync_stream(&mut self.lock(), d.device)?;
        // SAFETY: both ranges lie in device allocations of this process (checked).
        check(
            unsafe { cu::cuMemcpyDtoDAsync_v2(dst, src, len, s as cu::CUstream) },
            "cuMemcpyDtoDAsync_v2",
            d.device as i32,
        )?;
        self.wait_stream(s, d.device)
    }

    /// `device`'s stream for the copies that return when done (made on first use; the
    /// device's context is current).
    pub(super) fn sync_stream(&self, st: &mut State, device: u32) -> Result<usize, GpuError> {
        super::lazy_stream(&mut st.sync_streams[device as usize], device)
    }

    /// Waits for the work queued on internal stream `s` of `device` (never the legacy
    /// default stream: that would wait for every blocking stream's work of the context).
    pub(super) fn wait_stream(&self, s: usize, device: u32) -> Result<(), GpuError> {
        debug_assert_ne!(s, 0, "an internal stream, never the legacy one");
        // SAFETY: a live stream made by `sync_stream`.
        check(
            unsafe { cu::cuStreamSynchronize(s as cu::CUstream) },
            "cuStreamSynchronize",
            device as i32,
        )
    }
}
