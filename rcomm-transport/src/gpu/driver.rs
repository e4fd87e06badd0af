//! The CUDA driver backend (stub until written).
use super::*;
use crate::mem::RKey;

/// The CUDA driver, loaded at run time.
#[derive(Debug)]
pub struct Driver;

impl Driver {
    pub(super) fn load() -> Result<Self, GpuError> {
        Err(GpuError::NoDevice { why: "not built yet".into() })
    }
    pub(super) fn devices(&self) -> Result<Vec<DeviceInfo>, GpuError> { todo!() }
    pub(super) fn alloc(&self, _device: u32, _len: usize) -> Result<u64, GpuError> { todo!() }
    pub(super) fn free(&self, _ptr: u64) -> Result<(), GpuError> { todo!() }
    pub(super) fn mem_info(&self, _device: u32) -> Result<(usize, usize), GpuError> { todo!() }
    pub(super) fn ptr_info(&self, _ptr: u64) -> Result<PtrInfo, GpuError> { todo!() }
    pub(super) fn copy_dtoh(&self, _dst: &mut [u8], _src: u64) -> Result<(), GpuError> { todo!() }
    pub(super) fn copy_htod(&self, _dst: u64, _src: &[u8]) -> Result<(), GpuError> { todo!() }
    pub(super) fn copy_dtod(&self, _dst: u64, _src: u64, _len: usize) -> Result<(), GpuError> { todo!() }
    pub(super) fn export(&self, _ptr: u64, _len: usize) -> Result<RKey, GpuError> { todo!() }
    pub(super) fn get(&self, _peer: u32, _key: &RKey, _dst: u64, _len: usize) -> Result<Pending, GpuError> { todo!() }
    pub(super) fn query(&self, _p: &Pending) -> Result<bool, GpuError> { todo!() }
    pub(super) fn finish(&self, _p: Pending) -> Result<(), GpuError> { todo!() }
    pub(super) fn forget_peer(&self, _peer: u32) { todo!() }
    pub(super) fn stream_create(&self, _device: u32) -> Result<Stream, GpuError> { todo!() }
    pub(super) fn stream_destroy(&self, _s: Stream) -> Result<(), GpuError> { todo!() }
    pub(super) fn stream_wait_host(&self, _s: Stream) -> Result<(), GpuError> { todo!() }
    pub(super) fn stats(&self) -> GpuStats { todo!() }
}
