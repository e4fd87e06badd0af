//! Collectives on device buffers, staged through host memory: the device data is copied to
//! the host, the host collective runs (its algorithms, tuner, errors, watchdogs and hang
//! report), and the result is copied back. Correct on every transport and machine, with every
//! dtype and built-in op, bitwise identical on every rank as the host collectives are; this is
//! the fallback and the cross-node leg, not the NCCL-class path (device kernels and direct
//! node algorithms over IPC-mapped buffers, P12). Reductions take a built-in [`Op`] only: a
//! user function cannot run on device memory. `allreduce_device_on` is the stream-ordered
//! form (as the point-to-point `*_on` calls); the others have none yet.

use crate::gpu::{DevRef, DeviceMem, DeviceMemMut, Stream, backend, check_range, dev_err};
use crate::{CommError, Communicator, Element, Op, Result};
use bytemuck::Pod;

impl Communicator {
    /// `b`'s range (address, bytes), checked to lie in one device allocation.
    fn dev_range(&self, op: &'static str, b: DevRef<'_>) -> Result<(u64, usize)> {
        check_range(op, self.world_me(), b.addr(), b.len())?;
        Ok((b.addr(), b.len()))
    }

    /// A host copy of device memory `b`, as `T`s.
    fn stage_in<T: Pod>(&self, op: &'static str, b: DevRef<'_>) -> Result<Vec<T>> {
        let (addr, bytes) = self.dev_range(op, b)?;
        let elem = size_of::<T>().max(1);
        if !bytes.is_multiple_of(elem) {
            return Err(CommError::Size { bytes, elem });
        }
        let mut v = vec![T::zeroed(); bytes / elem];
        if bytes > 0 {
            let me = self.world_me();
            backend(op, me)?
                .copy_dtoh(bytemuck::cast_slice_mut(&mut v), addr)
                .map_err(dev_err(op, me))?;
        }
        Ok(v)
    }

    /// Writes `v` to device memory at `addr`.
    fn stage_out<T: Pod>(&self, op: &'static str, addr: u64, v: &[T]) -> Result<()> {
        if v.is_empty() {
            return Ok(());
        }
        let me = self.world_me();
        backend(op, me)?
            .copy_htod(addr, bytemuck::cast_slice(v))
            .map_err(dev_err(op, me))
    }

    /// `f(send, recv)` on host copies: `send` staged in, `recv`'s result staged out.
    fn staged<T: Pod, U: Pod>(
        &self,
        op: &'static str,
        send: DevRef<'_>,
        recv: DevRef<'_>,
        f: impl FnOnce(&[T], &mut [U]) -> Result<()>,
    ) -> Result<()> {
        let v = self.stage_in::<T>(op, send)?;
        let (raddr, rlen) = self.dev_range(op, recv)?;
        let mut out = vec![U::zeroed(); rlen / size_of::<U>().max(1)];
        f(&v, &mut out)?;
        self.stage_out(op, raddr, &out)
    }

    /// All-reduce of device memory in place, `T` elements combined with `op`. Collective.
    pub fn allreduce_device<T: Element>(&self, buf: &mut impl DeviceMemMut, op: Op) -> Result<()> {
        let b = buf.device_mut();
        let mut v = self.stage_in::<T>("allreduce", b.device_ref())?;
        self.allreduce_in_place(&mut v, op)?;
        self.stage_out("allreduce", b.addr(), &v)
    }

    /// [`allreduce_device`](Self::allreduce_device) ordered on `stream`.
    pub fn allreduce_device_on<T: Element>(
        &self,
        buf: &mut impl DeviceMemMut,
        op: Op,
        stream: Stream,
    ) -> Result<()> {
        let me = self.world_me();
        backend("allreduce", me)?
            .stream_wait_host(stream)
            .map_err(dev_err("allreduce", me))?;
        self.allreduce_device::<T>(buf, op)
    }

    /// Broadcast of device memory from `root`. Collective.
    pub fn bcast_device(&self, buf: &mut impl DeviceMemMut, root: u32) -> Result<()> {
        let b = buf.device_mut();
        let mut v = if self.rank == root {
            self.stage_in::<u8>("bcast", b.device_ref())?
        } else {
            self.dev_range("bcast", b.device_ref())?;
            vec![0u8; b.len()]
        };
        self.bcast(&mut v, root)?;
        if self.rank != root {
            self.stage_out("bcast", b.addr(), &v)?;
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
        if self.rank == root {
            self.staged::<T, T>(
                "reduce",
                send.device_ref(),
                recv.device_mut().device_ref(),
                |s, r| self.reduce(s, Some(r), op, root),
            )
        } else {
            let v = self.stage_in::<T>("reduce", send.device_ref())?;
            self.reduce(&v, None, op, root)
        }
    }

    /// All-gather of device memory: `recv` gets every rank's `send` in rank order. Collective.
    pub fn allgather_device(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
    ) -> Result<()> {
        let r = recv.device_mut();
        self.staged::<u8, u8>("allgather", send.device_ref(), r.device_ref(), |s, r| {
            self.allgather(s, r)
        })
    }

    /// Reduce-scatter of device memory: `send` holds `size` blocks of `recv`'s length; block
    /// `rank` of the reduction lands in `recv`. Collective.
    pub fn reduce_scatter_device<T: Element>(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
        op: Op,
    ) -> Result<()> {
        let r = recv.device_mut();
        self.staged::<T, T>(
            "reduce_scatter",
            send.device_ref(),
            r.device_ref(),
            |s, r| self.reduce_scatter(s, r, op),
        )
    }

    /// All-to-all of device memory: block `j` of `send` goes to rank `j`, whose block `i` of
    /// `recv` it becomes. Collective.
    pub fn alltoall_device(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
    ) -> Result<()> {
        let r = recv.device_mut();
        self.staged::<u8, u8>("alltoall", send.device_ref(), r.device_ref(), |s, r| {
            self.alltoall(s, r)
        })
    }
}
