//! `--device`: the tensors that are communicated live in device memory while they are.
//!
//! This is a communication example, not a GPU model: the math stays on the host (`model.rs`),
//! and each communicated tensor is copied into an rcomm [`DeviceBuffer`] on this rank's device
//! (`RCOMM_LOCAL_RANK` mod the device count), moved by the device calls
//! (`allreduce_device` for the tensor-parallel sums and the data-parallel gradient buckets,
//! `send_device` / `recv_device` for the pipeline's activations and their gradients), and
//! copied back. On a machine without a GPU, `RCOMM_GPU_STANDIN=1` runs the same calls on the
//! host-memory stand-in of a device.

use rcomm::gpu::{self, DeviceBuffer};
use rcomm::{Communicator, Op, Tag};

/// This rank's device.
#[derive(Debug, Clone, Copy)]
pub struct Device(u32);

impl Device {
    /// Device `RCOMM_LOCAL_RANK` mod the number of devices (rcomm's error when there is none).
    pub fn pick() -> rcomm::Result<Self> {
        let n = gpu::devices()?.len() as u32;
        let local: u32 = std::env::var("RCOMM_LOCAL_RANK")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        Ok(Self(if n == 0 { 0 } else { local % n }))
    }

    /// `v`, copied into a new device buffer.
    fn upload(self, v: &[f64]) -> rcomm::Result<DeviceBuffer> {
        DeviceBuffer::from_host(self.0, bytemuck::cast_slice(v))
    }

    /// Sums `v` over `comm` (all-reduce in place) through device memory.
    pub fn allreduce(self, comm: &Communicator, v: &mut [f64]) -> rcomm::Result<()> {
        let mut b = self.upload(v)?;
        comm.allreduce_device::<f64>(&mut b, Op::Sum)?;
        b.copy_to_host(bytemuck::cast_slice_mut(v))
    }

    /// Sends `v` to `dest` from device memory (returns when the buffer may be freed).
    pub fn send(self, comm: &Communicator, v: &[f64], dest: u32, tag: Tag) -> rcomm::Result<()> {
        comm.send_device(&self.upload(v)?, dest, tag)
    }

    /// Receives `v.len()` values from `src` into device memory, then into `v`.
    pub fn recv(self, comm: &Communicator, v: &mut [f64], src: u32, tag: Tag) -> rcomm::Result<()> {
        let mut b = DeviceBuffer::new(self.0, size_of_val(v))?;
        comm.recv_device(&mut b, src, tag)?;
        b.copy_to_host(bytemuck::cast_slice_mut(v))
    }
}
