//! Collectives on device buffers, staged through host memory: the device data is copied to
//! the host, the host collective runs (its algorithms, tuner, errors, watchdogs and hang
//! report), and the result is copied back. Correct on every transport and machine, with every
//! dtype and built-in op, bitwise identical on every rank as the host collectives are; this is
//! the fallback and the cross-node leg, not the NCCL-class path (device kernels and direct
//! node algorithms over IPC-mapped buffers, P12). Reductions take a built-in [`Op`] only: a
//! user function cannot run on device memory.
//!
//! Every call has a `*_on(stream)` form ordered on a stream as the point-to-point ones are.

use crate::Element;
use crate::gpu::{DeviceMem, DeviceMemMut, Stream};
use crate::{CommError, Communicator, Op, Result};
use bytemuck::Pod;
use rcomm_transport::gpu::{Gpu, gpu};

fn dev(op: &'static str, rank: u32) -> Result<&'static Gpu> {
    gpu().map_err(|e| CommError::Device {
        op,
        rank,
        why: e.to_string(),
    })
}

/// Host copy of `bytes` of device memory at `addr`, as `T`s.
fn fetch<T: Pod>(op: &'static str, rank: u32, addr: u64, bytes: usize) -> Result<Vec<T>> {
    let elem = size_of::<T>().max(1);
    if !bytes.is_multiple_of(elem) {
        return Err(CommError::Size { bytes, elem });
    }
    let mut v = vec![T::zeroed(); bytes / elem];
    if bytes > 0 {
        dev(op, rank)?
            .copy_dtoh(bytemuck::cast_slice_mut(&mut v), addr)
            .map_err(|e| CommError::Device {
                op,
                rank,
                why: e.to_string(),
            })?;
    }
    Ok(v)
}

/// Writes `v` to device memory at `addr`.
fn store<T: Pod>(op: &'static str, rank: u32, addr: u64, v: &[T]) -> Result<()> {
    if v.is_empty() {
        return Ok(());
    }
    dev(op, rank)?
        .copy_htod(addr, bytemuck::cast_slice(v))
        .map_err(|e| CommError::Device {
            op,
            rank,
            why: e.to_string(),
        })
}

impl Communicator {
    fn dev_rank(&self) -> u32 {
        self.world_rank(self.rank).unwrap_or(self.rank)
    }

    /// The range of device memory (address, bytes), checked to lie in one allocation.
    fn checked(&self, op: &'static str, addr: u64, len: usize) -> Result<(u64, usize)> {
        crate::gpu::check_range(op, self.dev_rank(), addr, len)?;
        Ok((addr, len))
    }

    /// Waits on the host for the work already on `stream` (the `*_on` forms).
    fn after_stream(&self, op: &'static str, stream: Stream) -> Result<()> {
        let r = self.dev_rank();
        dev(op, r)?
            .stream_wait_host(stream)
            .map_err(|e| CommError::Device {
                op,
                rank: r,
                why: e.to_string(),
            })
    }

    /// All-reduce of device memory in place, `T` elements combined with `op`. Collective.
    pub fn allreduce_device<T: Element>(&self, buf: &mut impl DeviceMemMut, op: Op) -> Result<()> {
        let (addr, len) = {
            let m = buf.device_mut();
            self.checked("allreduce", m.addr(), m.len())?
        };
        let r = self.dev_rank();
        let mut v = fetch::<T>("allreduce", r, addr, len)?;
        self.allreduce_in_place(&mut v, op)?;
        store("allreduce", r, addr, &v)
    }

    /// [`allreduce_device`](Self::allreduce_device) ordered on `stream`.
    pub fn allreduce_device_on<T: Element>(
        &self,
        buf: &mut impl DeviceMemMut,
        op: Op,
        stream: Stream,
    ) -> Result<()> {
        self.after_stream("allreduce", stream)?;
        self.allreduce_device::<T>(buf, op)
    }

    /// Broadcast of device memory from `root`. Collective.
    pub fn bcast_device(&self, buf: &mut impl DeviceMemMut, root: u32) -> Result<()> {
        let (addr, len) = {
            let m = buf.device_mut();
            self.checked("bcast", m.addr(), m.len())?
        };
        let r = self.dev_rank();
        let mut v = if self.rank == root {
            fetch::<u8>("bcast", r, addr, len)?
        } else {
            vec![0u8; len]
        };
        self.bcast(&mut v, root)?;
        if self.rank != root {
            store("bcast", r, addr, &v)?;
        }
        Ok(())
    }

    /// Reduce of device memory into `recv` on `root` (other ranks' `recv` is not touched;
    /// they may pass an empty buffer). Collective.
    pub fn reduce_device<T: Element>(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
        op: Op,
        root: u32,
    ) -> Result<()> {
        let (saddr, slen) = {
            let m = send.device_ref();
            self.checked("reduce", m.addr(), m.len())?
        };
        let r = self.dev_rank();
        let v = fetch::<T>("reduce", r, saddr, slen)?;
        if self.rank == root {
            let (raddr, rlen) = {
                let m = recv.device_mut();
                self.checked("reduce", m.addr(), m.len())?
            };
            let mut res = vec![T::zeroed(); rlen / size_of::<T>().max(1)];
            self.reduce(&v, Some(&mut res), op, root)?;
            store("reduce", r, raddr, &res)
        } else {
            self.reduce(&v, None, op, root)
        }
    }

    /// All-gather of device memory: `recv` gets every rank's `send` in rank order. Collective.
    pub fn allgather_device(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
    ) -> Result<()> {
        let (saddr, slen) = {
            let m = send.device_ref();
            self.checked("allgather", m.addr(), m.len())?
        };
        let (raddr, rlen) = {
            let m = recv.device_mut();
            self.checked("allgather", m.addr(), m.len())?
        };
        let r = self.dev_rank();
        let v = fetch::<u8>("allgather", r, saddr, slen)?;
        let mut out = vec![0u8; rlen];
        self.allgather(&v, &mut out)?;
        store("allgather", r, raddr, &out)
    }

    /// Reduce-scatter of device memory: `send` holds `size` blocks of `recv`'s length; block
    /// `rank` of the reduction lands in `recv`. Collective.
    pub fn reduce_scatter_device<T: Element>(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
        op: Op,
    ) -> Result<()> {
        let (saddr, slen) = {
            let m = send.device_ref();
            self.checked("reduce_scatter", m.addr(), m.len())?
        };
        let (raddr, rlen) = {
            let m = recv.device_mut();
            self.checked("reduce_scatter", m.addr(), m.len())?
        };
        let r = self.dev_rank();
        let v = fetch::<T>("reduce_scatter", r, saddr, slen)?;
        let mut out = vec![T::zeroed(); rlen / size_of::<T>().max(1)];
        self.reduce_scatter(&v, &mut out, op)?;
        store("reduce_scatter", r, raddr, &out)
    }

    /// All-to-all of device memory: block `j` of `send` goes to rank `j`, whose block `i` of
    /// `recv` it becomes. Collective.
    pub fn alltoall_device(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
    ) -> Result<()> {
        let (saddr, slen) = {
            let m = send.device_ref();
            self.checked("alltoall", m.addr(), m.len())?
        };
        let (raddr, rlen) = {
            let m = recv.device_mut();
            self.checked("alltoall", m.addr(), m.len())?
        };
        let r = self.dev_rank();
        let v = fetch::<u8>("alltoall", r, saddr, slen)?;
        let mut out = vec![0u8; rlen];
        self.alltoall(&v, &mut out)?;
        store("alltoall", r, raddr, &out)
    }
}
