//! Device buffers through the same communicators: point-to-point on GPU memory.
//!
//! Memory comes in the types GPU code already holds — cudarc's [`CudaSlice`](cudarc::driver::CudaSlice)
//! and its views, an rcomm [`DeviceBuffer`], or a raw device pointer with a length
//! ([`DevRef::from_raw`], for other frameworks) — and goes through [`Communicator::send_device`](crate::Communicator::send_device),
//! [`recv_device`](crate::Communicator::recv_device), [`sendrecv_device`](crate::Communicator::sendrecv_device),
//! and [`Scope::isend_device`](crate::Scope::isend_device) / [`Scope::irecv_device`](crate::Scope::irecv_device); probes see device messages as any
//! other. Two orderings:
//! - **plain calls behave as CUDA-aware MPI**: the buffer must be ready when you call (work
//!   that writes it is finished), and the call returns when the buffer may be reused (a send)
//!   or holds the message (a receive);
//! - **`*_on(stream)` calls are stream-ordered**, as NCCL's: the operation happens after the
//!   work already enqueued on `stream`, and work enqueued on `stream` afterwards sees its
//!   result. Today the call waits on the host for the stream's earlier work (an event, so
//!   later work is not waited for) and returns when the transfer is done; it does not yet
//!   return before the transfer as NCCL does.
//!
//! How device bytes travel is chosen per message: small messages are staged through host
//! memory and sent eagerly; larger ones between ranks of one node are pulled by the receiver
//! straight from the sender's allocation (CUDA IPC, the allocation exported once and imported
//! once per peer, then cached); across nodes, or where `RCOMM_P2P_LEVEL` or the GPUs forbid a
//! direct copy, they stream through host bounce buffers over the host transport.
//! `RCOMM_DEBUG=INFO` logs the choice per peer.
//!
//! Memory as frameworks allocate it is shared too: `cuMemAlloc` memory by a legacy IPC handle;
//! VMM memory (`cuMemCreate` + `cuMemMap`, PyTorch's expandable segments) and memory of a pool
//! made with POSIX file-descriptor handles by a descriptor handed over the node's local
//! channel, which also reaches a rank whose GPU this process does not see. Memory that cannot
//! be shared (the device's default pool, VMM handles without descriptor handles) is staged,
//! with one warning per process saying how to make it shareable. [`register`] exports a
//! buffer ahead of its first transfer; [`deregister`] drops that export.
//!
//! With no CUDA driver (and no `RCOMM_GPU_STANDIN=1`) every device call returns
//! [`CommError::Device`] saying why; nothing panics.
//!
//! Layers, from the bottom: `mem` (device references and buffers, streams, point-to-point),
//! `exec` (the schedule executor on device memory), `nccl_lib` (loading libnccl), `nccl_comm`
//! (NCCL communicators' life: set-up, waits, failures, watchdog) and `nccl` (the NCCL calls),
//! `coll` (the `*_device` collectives, which choose between them).

mod coll;
mod exec;
mod mem;
mod nccl;
mod nccl_comm;
mod nccl_lib;

pub use coll::OnStream;
#[allow(deprecated)]
pub use exec::scratch_bytes;
pub use exec::{cubin_file, ptx_file};
#[cfg(feature = "cuda")]
pub use mem::stream_of;
pub use mem::{
    DevMut, DevRef, DeviceBuffer, DeviceInfo, DeviceMem, DeviceMemMut, GpuError, GpuStats, Stream,
    backend_name, deregister, devices, register, stats, stream_create, stream_destroy,
    stream_synchronize,
};
pub(crate) use mem::{backend, check_range, dev_err, region_of};
pub use nccl_comm::{NcclStats, nccl_stats};

use crate::{CommError, Result};
use mem::launch_rank;

/// Queues the element-wise reduction `out = a ⊕ b` of `T`s on `stream`: the kernel the device
/// collectives run (NVRTC-compiled for the device's architecture on first use; on the
/// stand-in, a host function). `out` may be `a` or `b`; all three have the same length and
/// lie on the stream's device. Returns once queued: wait with [`stream_synchronize`].
pub fn reduce_local<T: crate::Element>(
    out: &mut impl DeviceMemMut,
    a: &impl DeviceMem,
    b: &impl DeviceMem,
    op: crate::Op,
    stream: Stream,
) -> Result<()> {
    let me = launch_rank();
    let (o, a, b) = (out.device_mut(), a.device_ref(), b.device_ref());
    if a.len() != o.len() || b.len() != o.len() || !o.len().is_multiple_of(size_of::<T>()) {
        return Err(CommError::InvalidArg(format!(
            "reduce_local: out, a and b have {}, {} and {} bytes: equal whole numbers of elements",
            o.len(),
            a.len(),
            b.len()
        )));
    }
    for (addr, len) in [
        (o.addr(), o.len()),
        (a.addr(), a.len()),
        (b.addr(), b.len()),
    ] {
        let r = region_of("reduce_local", me, addr, len)?;
        if len > 0
            && r.mem_ref().kind
                != (rcomm_transport::mem::MemKind::Cuda {
                    device: stream.device,
                })
        {
            return Err(CommError::InvalidArg(format!(
                "reduce_local: a buffer is not on the stream's device {}",
                stream.device
            )));
        }
    }
    exec::reduce_local(
        stream.device,
        stream,
        op,
        T::DTYPE,
        (o.addr(), a.addr(), b.addr()),
        o.len(),
        me,
    )
}
