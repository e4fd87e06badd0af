//! The driver of a build without the `cuda` feature: the same calls as the CUDA backend, and
//! a [`Driver`] that cannot exist, so every caller compiles and loading says why there is none.

use super::*;

/// The CUDA driver (this build has none: the `cuda` feature is off).
#[derive(Debug)]
pub struct Driver {
    _never: std::convert::Infallible,
}

impl Driver {
    pub(in crate::gpu) fn load() -> Result<Self, GpuError> {
        Err(GpuError::NoDevice {
            why: "built without the cuda feature".into(),
        })
    }
    pub(in crate::gpu) fn devices(&self) -> Result<Vec<DeviceInfo>, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn alloc(&self, _device: u32, _len: usize) -> Result<u64, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn alloc_kind(
        &self,
        _device: u32,
        _len: usize,
        _kind: AllocKind,
    ) -> Result<u64, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn alloc_kind_of(&self, _ptr: u64) -> Result<AllocKind, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn pin_export(&self, _ptr: u64) -> Result<(), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn drop_export(&self, _ptr: u64) -> Result<bool, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn free(&self, _ptr: u64) -> Result<(), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn mem_info(&self, _device: u32) -> Result<(usize, usize), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn ptr_info(&self, _ptr: u64) -> Result<PtrInfo, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn copy_dtoh(&self, _dst: &mut [u8], _src: u64) -> Result<(), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn copy_htod(&self, _dst: u64, _src: &[u8]) -> Result<(), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn copy_dtod(
        &self,
        _dst: u64,
        _src: u64,
        _len: usize,
    ) -> Result<(), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn export(&self, _ptr: u64, _len: usize) -> Result<RKey, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn dmabuf(&self, _ptr: u64, _len: usize) -> Result<(i32, u64), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn get(
        &self,
        _peer: u32,
        _key: &RKey,
        _dst: u64,
        _len: usize,
    ) -> Result<Pending, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn pinned_take(&self) -> Result<u64, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn pinned_give(&self, _p: u64) {
        match self._never {}
    }
    pub(in crate::gpu) fn copy_dtoh_async(
        &self,
        _peer: u32,
        _dst: u64,
        _src: u64,
        _len: usize,
    ) -> Result<Pending, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn copy_htod_async(
        &self,
        _peer: u32,
        _dst: u64,
        _src: u64,
        _len: usize,
    ) -> Result<Pending, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn query(&self, _p: &Pending) -> Result<bool, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn finish(&self, _p: Pending) -> Result<(), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn forget_peer(&self, _peer: u32) {
        match self._never {}
    }
    pub(in crate::gpu) fn stream_create(&self, _device: u32) -> Result<Stream, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn stream_destroy(&self, _s: Stream) -> Result<(), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn stream_wait_host(&self, _s: Stream) -> Result<(), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn stats(&self) -> GpuStats {
        match self._never {}
    }
    pub(in crate::gpu) fn stream_query(&self, _s: Stream) -> Result<bool, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn stream_is_capturing(&self, _s: Stream) -> Result<bool, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn event_record(&self, _s: Stream) -> Result<Event, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn event_query(&self, _e: &Event) -> Result<bool, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn event_wait_host(
        &self,
        _e: &Event,
        _deadline: std::time::Instant,
    ) -> Result<bool, GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn stream_wait_event(&self, _s: Stream, _e: &Event) -> Result<(), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn event_destroy(&self, _e: Event) -> Result<(), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn copy_dtod_on(
        &self,
        _s: Stream,
        _dst: u64,
        _src: u64,
        _len: usize,
    ) -> Result<(), GpuError> {
        match self._never {}
    }
    pub(in crate::gpu) fn launch(
        &self,
        _s: Stream,
        _image: &std::sync::Arc<[u8]>,
        _func: &str,
        _grid: u32,
        _block: u32,
        _args: &[u64],
    ) -> Result<(), GpuError> {
        match self._never {}
    }
}
