//! Collectives on device buffers.
//!
//! Two ways to run one, chosen per call alike on every rank (`RCOMM_ALGO=<op>_device:<algo>`
//! or [`Communicator::with_algo`] force one):
//! - **the device executor** (`coll::dev_exec`): the same schedules as the host collectives,
//!   their messages moved by the device paths of point-to-point (between ranks of one node the
//!   copy engine reads the peer's buffer in place through CUDA IPC; elsewhere through pinned
//!   host staging) and their reductions run by NVRTC kernels on the device. The algorithms:
//!   one-shot allreduce (every rank reads every input and folds them: small buffers),
//!   two-shot (direct reduce-scatter, then direct allgather: large buffers), ring; direct and
//!   ring allgather and reduce-scatter, tree broadcast, pairwise all-to-all. The tuner picks by
//!   the communicator's device link class (same GPU, NVLink, PCIe, host staging) and its α/β;
//! - **staged** (`staged`): the device data is copied to the host, the host collective runs,
//!   and the result is copied back. The reduction to a root always runs so;
//! - **NCCL** (`RCOMM_GPU_BACKEND=nccl`; under `auto`, the default, where the communicator's
//!   ranks agree it serves: see `nccl`): the regular collectives go to NCCL; the v-variants,
//!   and under `auto` the reductions NCCL lacks, stay rcomm's.
//!
//! Every reduction is the canonical or ring order of the host algorithms, so every rank ends
//! with the same bytes. Reductions take a built-in [`Op`]: a user function cannot run on the
//! device. A plain call behaves as CUDA-aware MPI's (buffers ready on entry, done on return);
//! [`Communicator::on_stream`] gives the stream-ordered forms: on NCCL they enqueue on the
//! caller's stream and return at once (no host wait); on rcomm's own paths they wait on the
//! host for the stream's earlier work and return when done (as the point-to-point `*_on`
//! calls).

use super::exec::{DevSpan, Scratch};
use crate::coll::schedule::{self as sch, Schedule};
use crate::coll::tuner::{self, DevLink};
use crate::gpu::{DevRef, DeviceMem, DeviceMemMut, Stream, backend, check_range, dev_err};
use crate::{CommError, Communicator, Element, Op, Result};
use bytemuck::Pod;
use rcomm_runtime::algo::{Algo, Coll};
use rcomm_runtime::config::P2pLevel;

/// What the executor runs: the schedule, its name for the record, its op.
struct Exec {
    op: &'static str,
    algo: Algo,
    sched: Schedule,
    device: u32,
    data: DevSpan,
    input: DevSpan,
    reduce: Option<crate::coll::reduce::Reducer>,
    codes: (u8, u8),
}

impl Communicator {
    /// `b`'s range (address, bytes), checked to lie in one device allocation.
    fn dev_range(&self, op: &'static str, b: DevRef<'_>) -> Result<(u64, usize)> {
        check_range(op, self.world_me(), b.addr(), b.len())?;
        Ok((b.addr(), b.len()))
    }

    /// `b` as the executor's span, and its device (one pointer lookup checks the range and
    /// finds the device).
    fn dev_span(&self, op: &'static str, b: DevRef<'_>) -> Result<(DevSpan, Option<u32>)> {
        let (addr, len) = (b.addr(), b.len());
        let r = crate::gpu::region_of(op, self.world_me(), addr, len)?;
        let device = match r.mem_ref().kind {
            rcomm_transport::mem::MemKind::Cuda { device } if len > 0 => Some(device),
            _ => None,
        };
        Ok((DevSpan { addr, len }, device))
    }

    /// The device of a collective's buffers (they must share one), or 0 when all are empty.
    fn one_device(&self, op: &'static str, devs: &[Option<u32>]) -> Result<u32> {
        let mut it = devs.iter().flatten();
        let first = it.next().copied();
        if let Some(d) = it.find(|&&d| Some(d) != first) {
            return Err(CommError::InvalidArg(format!(
                "{op}: the buffers are on devices {} and {d}; pass buffers of one device",
                first.unwrap_or(0)
            )));
        }
        Ok(first.unwrap_or(0))
    }

    /// The device link class of this communicator (the worst pair), agreed on first use (see
    /// [`device_agreement`](Self::device_agreement)) and kept per communicator.
    fn dev_link(&self, op: &'static str, device: u32) -> Result<DevLink> {
        if let Some(l) = self.device_part().link() {
            return Ok(l);
        }
        self.device_agreement(op, device).map(|(l, _)| l)
    }

    /// What the ranks of this communicator agree on at its first device collective, by one
    /// allgather of each rank's device UUID and whether libnccl can serve it (every rank
    /// reaches its first device collective on a communicator at the same point, so all of
    /// them take part): the device link class (the worst pair) and, under
    /// `RCOMM_GPU_BACKEND=auto`, whether NCCL runs its device collectives — where libnccl is
    /// usable on every rank and no two ranks share a GPU. Both are kept per communicator;
    /// the choice is logged once per process with its reason.
    pub(super) fn device_agreement(
        &self,
        op: &'static str,
        device: u32,
    ) -> Result<(DevLink, bool)> {
        use super::nccl::{choice_key, usable_lib};
        let me = self.world_me();
        let mine_dev = backend(op, me)?
            .devices()
            .map_err(dev_err(op, me))?
            .into_iter()
            .find(|d| d.ordinal == device);
        let uuid = mine_dev.as_ref().map_or([0u8; 16], |d| d.uuid);
        let auto = rcomm_runtime::config::gpu_backend() == rcomm_runtime::config::GpuBackend::Auto;
        let usable = if auto {
            usable_lib(op, me).map(drop)
        } else {
            Ok(())
        };
        // uuid, NCCL usable, PCI bus id (text, NUL-padded).
        const REC: usize = 16 + 1 + PCI_TEXT;
        let mut mine = [0u8; REC];
        mine[..16].copy_from_slice(&uuid);
        mine[16] = u8::from(auto && usable.is_ok());
        if let Some(d) = &mine_dev {
            let b = d.pci_bus_id.as_bytes();
            let n = b.len().min(PCI_TEXT);
            mine[17..17 + n].copy_from_slice(&b[..n]);
        }
        let mut all = vec![0u8; REC * self.size() as usize];
        self.allgather(&mine, &mut all)?;
        let recs: Vec<&[u8]> = all.chunks(REC).collect();
        let pci = |r: &[u8]| {
            let t = &r[17..];
            String::from_utf8_lossy(&t[..t.iter().position(|&c| c == 0).unwrap_or(t.len())])
                .into_owned()
        };
        let level = rcomm_runtime::config::p2p_level();
        let same = recs.iter().all(|u| u[..16] == uuid);
        // The worst pair decides: every rank computes it from the same records and the same
        // node's topology, so all agree.
        let worst = (!same && self.on_one_node()).then(|| {
            let mut w = rcomm_runtime::topo::PathClass::X;
            for (i, a) in recs.iter().enumerate() {
                for b in &recs[i + 1..] {
                    let c = match rcomm_transport::gpu::link::class_between(&pci(a), &pci(b)) {
                        _ if a[..16] == b[..16] => rcomm_runtime::topo::PathClass::X,
                        // Two GPUs at one address: the address is not real (the stand-in's).
                        rcomm_runtime::topo::PathClass::X => rcomm_runtime::topo::PathClass::Sys,
                        c => c,
                    };
                    w = w.max(c);
                }
            }
            w
        });
        let link = link_of(self.on_one_node(), same, worst, level);
        self.device_part().set_link(link);
        rcomm_runtime::rlog!(
            Info,
            "COLL",
            "device collectives on {}: {} ranks, link class {}",
            crate::fr::comm_label(self.ctx()),
            self.size(),
            link.name()
        );
        if !auto {
            return Ok((link, false));
        }
        let mut uuids: Vec<&[u8]> = recs.iter().map(|c| &c[..16]).collect();
        uuids.sort_unstable();
        let (serves, why) = match recs.iter().position(|c| c[16] == 0) {
            Some(r) if r as u32 == self.rank() => (
                false,
                format!(
                    "libnccl cannot serve rank {r}: {}",
                    usable.err().map_or_else(String::new, |e| e.to_string())
                ),
            ),
            Some(r) => (false, format!("libnccl cannot serve rank {r}")),
            None if uuids.windows(2).any(|w| w[0] == w[1]) => {
                (false, "two of its ranks share a GPU".to_string())
            }
            None => (
                true,
                "libnccl loads on every rank and each rank has a GPU of its own".to_string(),
            ),
        };
        self.set_attr(choice_key(), serves);
        static LOGGED: std::sync::Once = std::sync::Once::new();
        LOGGED.call_once(|| {
            rcomm_runtime::rlog!(
                Info,
                "COLL",
                "RCOMM_GPU_BACKEND=auto: device collectives of comm {} run on {}: {why}",
                crate::fr::comm_label(self.ctx()),
                if serves {
                    "NCCL"
                } else {
                    "rcomm's own executor"
                }
            );
        });
        Ok((link, serves))
    }

    /// The algorithm of device collective `kind`: forced, or `auto`'s (on one rank, the
    /// kind's first).
    fn dev_algo(
        &self,
        kind: Coll,
        device: u32,
        auto: impl FnOnce(DevLink) -> Algo,
    ) -> Result<Algo> {
        if let Some(f) = self.forced(kind).filter(|f| kind.accepts(*f)) {
            return Ok(f);
        }
        if self.size() < 2 {
            return Ok(kind.algos()[0]);
        }
        Ok(auto(self.dev_link(kind.name(), device)?))
    }

    /// The stream for an NCCL call when NCCL serves this communicator (the caller's in a
    /// stream-ordered call, else the executor's), else `None`.
    fn nccl(&self, op: &'static str, device: u32) -> Result<Option<Stream>> {
        if !super::nccl::nccl_allowed() || !self.nccl_serves(op, device)? {
            return Ok(None);
        }
        if let Some(s) = super::nccl::caller_stream() {
            return Ok(Some(s));
        }
        let me = self.world_me();
        super::exec::stream(self.shared().device(), backend(op, me)?, device, op, me).map(Some)
    }

    /// [`nccl`](Self::nccl) for a reduction of `dtype` with `op`: under `auto` those NCCL
    /// lacks stay rcomm's (forced NCCL refuses them by name).
    fn nccl_reducing(
        &self,
        name: &'static str,
        device: u32,
        dtype: crate::Dtype,
        op: Op,
    ) -> Result<Option<Stream>> {
        if !super::nccl::nccl_enabled() && !super::nccl::nccl_reduces(dtype, op) {
            return Ok(None);
        }
        self.nccl(name, device)
    }

    /// Runs `e` on the device executor as one recorded collective.
    fn exec(&self, e: Exec) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        crate::fr::begin_coll(self.ctx(), e.op, Some(e.algo), e.data.len, e.codes);
        let mut s = e.sched;
        s.op = e.op;
        self.run_schedule_device(&s, e.device, e.data, e.input, e.reduce.as_ref())
    }

    /// A device-to-device copy, waited for.
    fn dev_copy(&self, op: &'static str, dst: u64, src: u64, len: usize) -> Result<()> {
        if len == 0 || dst == src {
            return Ok(());
        }
        let me = self.world_me();
        backend(op, me)?
            .copy_dtod(dst, src, len)
            .map_err(dev_err(op, me))
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

    /// Checks `bytes` is a whole number of `T` and returns the count.
    fn count_of<T>(bytes: usize) -> Result<usize> {
        let elem = size_of::<T>().max(1);
        if bytes.is_multiple_of(elem) {
            Ok(bytes / elem)
        } else {
            Err(CommError::Size { bytes, elem })
        }
    }

    /// All-reduce of device memory in place, `T` elements combined with `op`. Collective.
    pub fn allreduce_device<T: Element>(&self, buf: &mut impl DeviceMemMut, op: Op) -> Result<()> {
        let b = buf.device_mut();
        self.allreduce_dev::<T>(b.device_ref(), b.device_ref(), op)
    }

    /// All-reduce of device memory out of place: `recv` gets the reduction of every rank's
    /// `send` (of `recv`'s length). Collective.
    pub fn allreduce_device_into<T: Element>(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
        op: Op,
    ) -> Result<()> {
        let r = recv.device_mut();
        self.allreduce_dev::<T>(send.device_ref(), r.device_ref(), op)
    }

    fn allreduce_dev<T: Element>(&self, send: DevRef<'_>, recv: DevRef<'_>, op: Op) -> Result<()> {
        const OP: &str = "allreduce";
        op.check(T::DTYPE)
            .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        let (s, sd) = self.dev_span(OP, send)?;
        let (r, rd) = self.dev_span(OP, recv)?;
        if s.len != r.len {
            return Err(CommError::InvalidArg(format!(
                "{OP}: send has {} bytes, recv {}",
                s.len, r.len
            )));
        }
        let count = Self::count_of::<T>(r.len)?;
        let device = self.one_device(OP, &[sd, rd])?;
        if let Some(st) = self.nccl_reducing(OP, device, T::DTYPE, op)? {
            return self.nccl_allreduce(s.addr, r.addr, count, T::DTYPE, op, st);
        }
        let algo = self.dev_algo(Coll::AllreduceDevice, device, |link| {
            if self.nodes() > 1 {
                Algo::Hier
            } else {
                tuner::device_allreduce(self.size(), r.len, link, None)
            }
        })?;
        if algo == Algo::Staged {
            let mut v = self.stage_in::<T>(OP, send)?;
            self.allreduce_in_place(&mut v, op)?;
            return self.stage_out(OP, r.addr, &v);
        }
        self.dev_copy(OP, r.addr, s.addr, r.len)?;
        if algo == Algo::Hier {
            return self.allreduce_dev_hier::<T>(recv, count, op);
        }
        let sched = tuner::build(
            Coll::AllreduceDevice,
            &crate::coll_state::SchedKey {
                op: OP,
                algo,
                rank: self.rank(),
                n: self.size(),
                root: 0,
                count,
                elem: size_of::<T>(),
            },
        );
        let red = crate::coll::reduce::Reducer::Builtin(op, T::DTYPE);
        self.exec(Exec {
            op: OP,
            algo,
            sched,
            device,
            data: r,
            input: DevSpan::EMPTY,
            codes: red.codes(),
            reduce: Some(red),
        })
    }

    /// Allreduce of `buf` (`count` `T`s, in place) across nodes: the composed hierarchical
    /// schedule ([`sch::hier_allreduce`], Open MPI's han as one schedule) on this executor — a
    /// reduce-scatter of the stripes among the ranks of this node (one phase over the copy
    /// engines, or rings where the node's link class is host staging: what the node's own
    /// device reduce-scatter and allgather choose), a ring allreduce of each stripe among the
    /// ranks of its local index on every node (staged through the host per message), an
    /// allgather in the node. Uneven placement (nodes with different rank counts) runs the
    /// ring instead.
    fn allreduce_dev_hier<T: Element>(&self, buf: DevRef<'_>, count: usize, op: Op) -> Result<()> {
        const OP: &str = "allreduce";
        let h = crate::coll::hier::Hier::get_or_setup(self)?;
        if !h.regular() || h.node().size() == 1 {
            return self
                .with_forced(Coll::AllreduceDevice, Some(Algo::Ring))
                .allreduce_dev::<T>(buf, buf, op);
        }
        let (d, dev) = self.dev_span(OP, buf)?;
        let device = self.one_device(OP, &[dev])?;
        let intra = match h.node().dev_link(OP, device)? {
            DevLink::Staged => sch::NodeLevel::Ring,
            _ => sch::NodeLevel::Direct,
        };
        let sched =
            sch::hier_allreduce(self.rank(), &self.node_map()?, count, size_of::<T>(), intra);
        let red = crate::coll::reduce::Reducer::Builtin(op, T::DTYPE);
        self.exec(Exec {
            op: OP,
            algo: Algo::Hier,
            sched,
            device,
            data: d,
            input: DevSpan::EMPTY,
            codes: red.codes(),
            reduce: Some(red),
        })
    }

    /// [`allreduce_device`](Self::allreduce_device) ordered on `stream`.
    pub fn allreduce_device_on<T: Element>(
        &self,
        buf: &mut impl DeviceMemMut,
        op: Op,
        stream: Stream,
    ) -> Result<()> {
        self.on_stream(stream).allreduce_device::<T>(buf, op)
    }

    /// Broadcast of device memory from `root`. Collective.
    pub fn bcast_device(&self, buf: &mut impl DeviceMemMut, root: u32) -> Result<()> {
        const OP: &str = "bcast";
        let b = buf.device_mut();
        if root >= self.size() {
            return Err(CommError::InvalidRank {
                rank: root,
                size: self.size(),
            });
        }
        let (d, dev) = self.dev_span(OP, b.device_ref())?;
        let device = self.one_device(OP, &[dev])?;
        if let Some(st) = self.nccl(OP, device)? {
            return self.nccl_bcast(d.addr, d.len, root, st);
        }
        let algo = self.dev_algo(Coll::BcastDevice, device, |_| Algo::Tree)?;
        if algo == Algo::Staged {
            let mut v = if self.rank() == root {
                self.stage_in::<u8>(OP, b.device_ref())?
            } else {
                vec![0u8; d.len]
            };
            self.bcast(&mut v, root)?;
            if self.rank() != root {
                self.stage_out(OP, d.addr, &v)?;
            }
            return Ok(());
        }
        crate::fr::set_root(self.ctx(), root);
        self.exec(Exec {
            op: OP,
            algo,
            sched: sch::binomial_bcast(self.rank(), self.size(), root, d.len),
            device,
            data: d,
            input: DevSpan::EMPTY,
            reduce: None,
            codes: (0, 0),
        })
    }

    /// Reduce of device memory into `recv` on `root` (other ranks' `recv` is not touched;
    /// they may pass an empty buffer). Collective. Runs staged through the host.
    pub fn reduce_device<T: Element>(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
        op: Op,
        root: u32,
    ) -> Result<()> {
        if super::nccl::nccl_allowed() {
            let (s, sd) = self.dev_span("reduce", send.device_ref())?;
            let (r, rd) = self.dev_span("reduce", recv.device_mut().device_ref())?;
            let device = self.one_device("reduce", &[sd, rd])?;
            // NCCL writes `count` elements at the root: its buffer must hold them.
            if self.rank() == root && r.len != s.len {
                return Err(CommError::InvalidArg(format!(
                    "reduce: send has {} bytes, the root's recv {}",
                    s.len, r.len
                )));
            }
            if let Some(st) = self.nccl_reducing("reduce", device, T::DTYPE, op)? {
                op.check(T::DTYPE)
                    .map_err(|e| CommError::InvalidArg(e.to_string()))?;
                let count = Self::count_of::<T>(s.len)?;
                return self.nccl_reduce(s.addr, r.addr, count, T::DTYPE, op, root, st);
            }
        }
        if self.rank() == root {
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
        let n = self.size() as usize;
        let counts = vec![send.device_ref().len(); n];
        self.allgather_dev(Some(send.device_ref()), r.device_ref(), &counts)
    }

    /// All-gather of device memory in place: `buf` holds this rank's block at
    /// `rank · len / size` and gets every block. Collective.
    pub fn allgather_device_in_place(&self, buf: &mut impl DeviceMemMut) -> Result<()> {
        let b = buf.device_mut();
        let n = self.size() as usize;
        if !b.len().is_multiple_of(n) {
            return Err(CommError::InvalidArg(format!(
                "allgather: {} bytes do not split into {n} blocks",
                b.len()
            )));
        }
        let counts = vec![b.len() / n; n];
        self.allgather_dev(None, b.device_ref(), &counts)
    }

    /// All-gather of device memory with `counts[i]` **bytes** from rank i, packed in rank
    /// order in `recv` (every rank passes the same `counts`). Collective.
    pub fn allgatherv_device(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
        counts: &[usize],
    ) -> Result<()> {
        let r = recv.device_mut();
        self.allgather_dev(Some(send.device_ref()), r.device_ref(), counts)
    }

    /// `send`: `None` in place.
    fn allgather_dev(
        &self,
        send: Option<DevRef<'_>>,
        recv: DevRef<'_>,
        counts: &[usize],
    ) -> Result<()> {
        const OP: &str = "allgather";
        let (n, me) = (self.size() as usize, self.rank() as usize);
        check_counts(OP, counts, n)?;
        let blocks = sch::packed_blocks(counts, 1);
        let (r, rd) = self.dev_span(OP, recv)?;
        let total: usize = counts.iter().sum();
        if r.len != total {
            return Err(CommError::InvalidArg(format!(
                "{OP}: recv has {} bytes, the counts add up to {total}",
                r.len
            )));
        }
        let (s, sd) = match send {
            Some(b) => self.dev_span(OP, b)?,
            None => (DevSpan::EMPTY, None),
        };
        if send.is_some() && s.len != counts[me] {
            return Err(CommError::InvalidArg(format!(
                "{OP}: send has {} bytes, counts[{me}] is {}",
                s.len, counts[me]
            )));
        }
        let device = self.one_device(OP, &[sd, rd])?;
        let equal = counts.iter().all(|&c| c == counts[0]);
        if equal && let Some(st) = self.nccl(OP, device)? {
            // In place, the own block is the input (NCCL allows that aliasing).
            let src = if send.is_some() {
                s.addr
            } else {
                r.addr + blocks[me].0 as u64
            };
            return self.nccl_allgather(src, r.addr, counts[me], st);
        }
        let algo = self.dev_algo(Coll::AllgatherDevice, device, |link| match link {
            DevLink::Staged => Algo::Ring,
            _ => Algo::Direct,
        })?;
        let own = r.addr + blocks[me].0 as u64;
        if algo == Algo::Staged {
            let mine = match send {
                Some(b) => self.stage_in::<u8>(OP, b)?,
                None => {
                    let mut v = vec![0u8; counts[me]];
                    self.stage_out_of(OP, own, &mut v)?;
                    v
                }
            };
            let mut out = vec![0u8; total];
            if equal {
                self.allgather(&mine, &mut out)?;
            } else {
                self.allgatherv(&mine, &mut out, counts)?;
            }
            return self.stage_out(OP, r.addr, &out);
        }
        if send.is_some() {
            self.dev_copy(OP, own, s.addr, s.len)?;
        }
        let sched = match algo {
            Algo::Direct => sch::direct_allgather_v(self.rank(), &blocks),
            _ => sch::ring_allgather_v(self.rank(), &blocks),
        };
        self.exec(Exec {
            op: OP,
            algo,
            sched,
            device,
            data: r,
            input: DevSpan::EMPTY,
            reduce: None,
            codes: (0, 0),
        })
    }

    /// Copies device memory at `addr` into `v`.
    fn stage_out_of(&self, op: &'static str, addr: u64, v: &mut [u8]) -> Result<()> {
        if v.is_empty() {
            return Ok(());
        }
        let me = self.world_me();
        backend(op, me)?.copy_dtoh(v, addr).map_err(dev_err(op, me))
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
        let counts = vec![r.len() / size_of::<T>().max(1); self.size() as usize];
        self.reduce_scatter_dev::<T>(send.device_ref(), r.device_ref(), &counts, op)
    }

    /// Reduce-scatter of device memory with `counts[i]` **elements** for rank i: `send` holds
    /// their sum, packed in rank order; this rank's block of the reduction lands in `recv`.
    /// Collective.
    pub fn reduce_scatter_v_device<T: Element>(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
        counts: &[usize],
        op: Op,
    ) -> Result<()> {
        let r = recv.device_mut();
        self.reduce_scatter_dev::<T>(send.device_ref(), r.device_ref(), counts, op)
    }

    fn reduce_scatter_dev<T: Element>(
        &self,
        send: DevRef<'_>,
        recv: DevRef<'_>,
        counts: &[usize],
        op: Op,
    ) -> Result<()> {
        const OP: &str = "reduce_scatter";
        let (n, me) = (self.size() as usize, self.rank() as usize);
        op.check(T::DTYPE)
            .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        check_counts(OP, counts, n)?;
        let elem = size_of::<T>();
        let (s, sd) = self.dev_span(OP, send)?;
        let (r, rd) = self.dev_span(OP, recv)?;
        let total: usize = counts.iter().sum::<usize>() * elem;
        if s.len != total || r.len != counts[me] * elem {
            return Err(CommError::InvalidArg(format!(
                "{OP}: send has {} bytes and recv {}; the counts ask for {total} and {}",
                s.len,
                r.len,
                counts[me] * elem
            )));
        }
        let device = self.one_device(OP, &[sd, rd])?;
        if counts.iter().all(|&c| c == counts[0])
            && let Some(st) = self.nccl_reducing(OP, device, T::DTYPE, op)?
        {
            return self.nccl_reduce_scatter(s.addr, r.addr, counts[me], T::DTYPE, op, st);
        }
        let algo = self.dev_algo(Coll::ReduceScatterDevice, device, |link| match link {
            DevLink::Staged => Algo::Ring,
            _ => Algo::Direct,
        })?;
        if algo == Algo::Staged {
            return self.staged::<T, T>(OP, send, recv, |s, r| {
                self.reduce_scatter_v(s, r, counts, op)
            });
        }
        // The schedules reduce in place over the whole input: work on a copy of `send`.
        let me_w = self.world_me();
        let gpu = backend(OP, me_w)?;
        let work = Scratch::take(self.shared().device(), gpu, device, s.len, OP, me_w)?;
        let w = DevSpan {
            addr: work.addr(),
            len: s.len,
        };
        self.dev_copy(OP, w.addr, s.addr, s.len)?;
        let blocks = sch::packed_blocks(counts, elem);
        let sched = match algo {
            Algo::Direct => sch::direct_reduce_scatter_v(self.rank(), &blocks),
            _ => sch::ring_reduce_scatter_v(self.rank(), &blocks),
        };
        let red = crate::coll::reduce::Reducer::Builtin(op, T::DTYPE);
        self.exec(Exec {
            op: OP,
            algo,
            sched,
            device,
            data: w,
            input: DevSpan::EMPTY,
            codes: red.codes(),
            reduce: Some(red),
        })?;
        self.dev_copy(OP, r.addr, w.addr + blocks[me].0 as u64, r.len)
    }

    /// All-to-all of device memory: block `j` of `send` goes to rank `j`, whose block `i` of
    /// `recv` it becomes. Collective.
    pub fn alltoall_device(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
    ) -> Result<()> {
        let r = recv.device_mut();
        let n = self.size() as usize;
        let counts = vec![send.device_ref().len() / n.max(1); n];
        self.alltoall_dev(send.device_ref(), &counts, r.device_ref(), &counts)
    }

    /// All-to-all of device memory with `send_counts[j]` **bytes** to rank j and
    /// `recv_counts[i]` from rank i, packed in rank order. Collective.
    pub fn alltoallv_device(
        &self,
        send: &impl DeviceMem,
        send_counts: &[usize],
        recv: &mut impl DeviceMemMut,
        recv_counts: &[usize],
    ) -> Result<()> {
        let r = recv.device_mut();
        self.alltoall_dev(send.device_ref(), send_counts, r.device_ref(), recv_counts)
    }

    fn alltoall_dev(
        &self,
        send: DevRef<'_>,
        send_counts: &[usize],
        recv: DevRef<'_>,
        recv_counts: &[usize],
    ) -> Result<()> {
        const OP: &str = "alltoall";
        let (n, me) = (self.size() as usize, self.rank() as usize);
        check_counts(OP, send_counts, n)?;
        check_counts(OP, recv_counts, n)?;
        let (s, sd) = self.dev_span(OP, send)?;
        let (r, rd) = self.dev_span(OP, recv)?;
        if s.len != send_counts.iter().sum::<usize>() || r.len != recv_counts.iter().sum::<usize>()
        {
            return Err(CommError::InvalidArg(format!(
                "{OP}: send has {} bytes and recv {}, not what the counts add up to",
                s.len, r.len
            )));
        }
        if send_counts[me] != recv_counts[me] {
            return Err(CommError::InvalidArg(format!(
                "{OP}: this rank sends itself {} bytes but expects {}",
                send_counts[me], recv_counts[me]
            )));
        }
        let device = self.one_device(OP, &[sd, rd])?;
        if send_counts
            .iter()
            .chain(recv_counts)
            .all(|&c| c == send_counts[0])
            && let Some(st) = self.nccl(OP, device)?
        {
            return self.nccl_alltoall(s.addr, r.addr, send_counts[0], st);
        }
        let algo = self.dev_algo(Coll::AlltoallDevice, device, |_| Algo::Pairwise)?;
        if algo == Algo::Staged {
            return self.staged::<u8, u8>(OP, send, recv, |s, r| {
                self.alltoallv(s, send_counts, r, recv_counts)
            });
        }
        let (sb, rb) = (
            sch::packed_blocks(send_counts, 1),
            sch::packed_blocks(recv_counts, 1),
        );
        self.dev_copy(
            OP,
            r.addr + rb[me].0 as u64,
            s.addr + sb[me].0 as u64,
            send_counts[me],
        )?;
        self.exec(Exec {
            op: OP,
            algo,
            sched: sch::pairwise_alltoall_v(self.rank(), &sb, &rb),
            device,
            data: r,
            input: s,
            reduce: None,
            codes: (0, 0),
        })
    }

    /// Sets up this communicator's device collectives on `device` ahead of the first one (so
    /// its latency does not land on a timed step). Collective. Where NCCL serves the
    /// communicator (`RCOMM_GPU_BACKEND=nccl`, or `auto` and the ranks agree) it makes the
    /// NCCL communicator, which [`group_device`](Self::group_device) needs; otherwise it
    /// agrees the device link class the tuner uses.
    pub fn device_setup(&self, device: u32) -> Result<()> {
        if super::nccl::nccl_allowed() && self.nccl_serves("setup", device)? {
            return self.nccl_setup(device);
        }
        if self.size() > 1 {
            self.dev_link("setup", device)?;
        }
        Ok(())
    }

    /// A batch of device point-to-point operations started together and complete together, as
    /// `ncclGroupStart`/`ncclGroupEnd` (pipeline stages exchanging activations, experts
    /// exchanging tokens): each `(buffer, rank)` of `sends` goes to that communicator rank,
    /// each of `recvs` is received from it, all with `tag`. Only the ranks named take part.
    /// Under `RCOMM_GPU_BACKEND=nccl` the batch is one NCCL group, which needs the
    /// communicator's NCCL communicator: run [`device_setup`](Self::device_setup) or a device
    /// collective on it first. Under `auto` it is one only once the communicator has its NCCL
    /// communicator (this call of the named ranks cannot agree on making one).
    pub fn group_device(
        &self,
        sends: &[(DevRef<'_>, u32)],
        recvs: &mut [(crate::gpu::DevMut<'_>, u32)],
        tag: crate::Tag,
    ) -> Result<()> {
        const OP: &str = "sendrecv";
        // Under `auto` only a communicator that has its NCCL communicator already: this call
        // (of the named ranks only) cannot agree on or make one.
        if super::nccl::nccl_enabled() || (super::nccl::nccl_allowed() && self.has_nccl_comm()) {
            let mut devs = Vec::new();
            let mut bufs = |b: DevRef<'_>, peer: u32| -> Result<super::nccl::NcclPeerBuf> {
                let (sp, d) = self.dev_span(OP, b)?;
                devs.push(d);
                Ok(super::nccl::NcclPeerBuf {
                    addr: sp.addr,
                    bytes: sp.len,
                    peer,
                })
            };
            let s: Vec<_> = sends
                .iter()
                .map(|(b, p)| bufs(*b, *p))
                .collect::<Result<_>>()?;
            let r: Vec<_> = recvs
                .iter()
                .map(|(b, p)| bufs(b.device_ref(), *p))
                .collect::<Result<_>>()?;
            let device = self.one_device(OP, &devs)?;
            if let Some(st) = self.nccl(OP, device)? {
                return self.nccl_group(&s, &r, st);
            }
        }
        self.scope(|sc| {
            let mut reqs = Vec::with_capacity(sends.len() + recvs.len());
            for (b, p) in recvs.iter_mut() {
                reqs.push(sc.irecv_device(b, crate::Source::Rank(*p), tag)?);
            }
            for (b, p) in sends {
                reqs.push(sc.isend_device(b, *p, tag)?);
            }
            for q in reqs {
                q.wait()?;
            }
            Ok(())
        })
    }

    /// The stream-ordered forms of the device collectives: each runs after the work enqueued
    /// on `stream` so far, and work enqueued on `stream` afterwards sees its result. On NCCL
    /// the call only enqueues (it returns before the operation ran); on rcomm's own paths it
    /// waits on the host for the stream's earlier work, then runs to the end.
    pub fn on_stream(&self, stream: Stream) -> OnStream<'_> {
        OnStream { comm: self, stream }
    }
}

/// Checks a counts table has one entry per rank.
/// Bytes of a PCI bus id in the device agreement's records (`0000:3b:00.0` takes 12).
const PCI_TEXT: usize = 16;

/// The link class of a communicator's device collectives: `Staged` across nodes or where
/// `RCOMM_P2P_LEVEL` forbids the worst pair's direct copies; `SameGpu` when every rank is on
/// one GPU; else by the worst pair's path (`worst`): NVLink, or PCIe for any PCI path.
fn link_of(
    one_node: bool,
    same: bool,
    worst: Option<rcomm_runtime::topo::PathClass>,
    level: P2pLevel,
) -> DevLink {
    use rcomm_runtime::topo::{PathClass, p2p_allows};
    let worst = if same {
        PathClass::X
    } else {
        worst.unwrap_or(PathClass::Sys)
    };
    if !one_node || !p2p_allows(level, worst) {
        return DevLink::Staged;
    }
    match worst {
        PathClass::X => DevLink::SameGpu,
        PathClass::Nv(_) => DevLink::NvLink,
        _ => DevLink::Pcie,
    }
}

fn check_counts(op: &'static str, counts: &[usize], n: usize) -> Result<()> {
    if counts.len() == n {
        Ok(())
    } else {
        Err(CommError::InvalidArg(format!(
            "{op}: {} counts for {n} ranks",
            counts.len()
        )))
    }
}

/// A communicator's device collectives ordered on a stream ([`Communicator::on_stream`]).
#[derive(Debug, Clone, Copy)]
pub struct OnStream<'a> {
    comm: &'a Communicator,
    stream: Stream,
}

impl OnStream<'_> {
    /// Runs `call` ordered after the stream's earlier work: enqueued on the stream by NCCL
    /// when NCCL serves the communicator and has the operation (`nccl_has`), so nothing waits
    /// on the host; otherwise after a host wait for the stream.
    fn run<R>(
        &self,
        op: &'static str,
        nccl_has: bool,
        call: impl FnOnce(&Communicator) -> Result<R>,
    ) -> Result<R> {
        if nccl_has
            && super::nccl::nccl_allowed()
            && self.comm.nccl_serves(op, self.stream.device)?
        {
            let _on = super::nccl::CallerScope::enter(self.stream);
            return call(self.comm);
        }
        let me = self.comm.world_me();
        backend(op, me)?
            .stream_wait_host(self.stream)
            .map_err(dev_err(op, me))?;
        call(self.comm)
    }

    /// Whether NCCL runs a reduction of `T` with `op` (forced NCCL refuses the others).
    fn reduces<T: Element>(op: Op) -> bool {
        super::nccl::nccl_enabled() || super::nccl::nccl_reduces(T::DTYPE, op)
    }

    /// [`Communicator::allreduce_device`] on the stream.
    pub fn allreduce_device<T: Element>(&self, buf: &mut impl DeviceMemMut, op: Op) -> Result<()> {
        self.run("allreduce", Self::reduces::<T>(op), |c| {
            c.allreduce_device::<T>(buf, op)
        })
    }

    /// [`Communicator::allreduce_device_into`] on the stream.
    pub fn allreduce_device_into<T: Element>(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
        op: Op,
    ) -> Result<()> {
        self.run("allreduce", Self::reduces::<T>(op), |c| {
            c.allreduce_device_into::<T>(send, recv, op)
        })
    }

    /// [`Communicator::bcast_device`] on the stream.
    pub fn bcast_device(&self, buf: &mut impl DeviceMemMut, root: u32) -> Result<()> {
        self.run("bcast", true, |c| c.bcast_device(buf, root))
    }

    /// [`Communicator::reduce_device`] on the stream.
    pub fn reduce_device<T: Element>(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
        op: Op,
        root: u32,
    ) -> Result<()> {
        self.run("reduce", Self::reduces::<T>(op), |c| {
            c.reduce_device::<T>(send, recv, op, root)
        })
    }

    /// [`Communicator::allgather_device`] on the stream.
    pub fn allgather_device(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
    ) -> Result<()> {
        self.run("allgather", true, |c| c.allgather_device(send, recv))
    }

    /// [`Communicator::reduce_scatter_device`] on the stream.
    pub fn reduce_scatter_device<T: Element>(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
        op: Op,
    ) -> Result<()> {
        self.run("reduce_scatter", Self::reduces::<T>(op), |c| {
            c.reduce_scatter_device::<T>(send, recv, op)
        })
    }

    /// [`Communicator::alltoall_device`] on the stream.
    pub fn alltoall_device(
        &self,
        send: &impl DeviceMem,
        recv: &mut impl DeviceMemMut,
    ) -> Result<()> {
        self.run("alltoall", true, |c| c.alltoall_device(send, recv))
    }

    /// [`Communicator::barrier`] after the stream's earlier work.
    pub fn barrier(&self) -> Result<()> {
        self.run("barrier", false, |c| c.barrier())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcomm_runtime::topo::PathClass;

    #[test]
    fn link_class_from_the_worst_pair_and_the_p2p_level() {
        use P2pLevel::*;
        let nv = Some(PathClass::Nv(4));
        assert_eq!(link_of(true, true, None, Sys), DevLink::SameGpu);
        assert_eq!(link_of(true, true, None, Loc), DevLink::SameGpu);
        assert_eq!(link_of(true, true, None, Off), DevLink::Staged);
        assert_eq!(link_of(false, true, None, Sys), DevLink::Staged);
        assert_eq!(link_of(true, false, nv, Sys), DevLink::NvLink);
        assert_eq!(link_of(true, false, nv, Nvl), DevLink::NvLink);
        assert_eq!(link_of(true, false, nv, Loc), DevLink::Staged);
        assert_eq!(
            link_of(true, false, Some(PathClass::Pix), Pix),
            DevLink::Pcie
        );
        assert_eq!(
            link_of(true, false, Some(PathClass::Phb), Pxb),
            DevLink::Staged
        );
        assert_eq!(
            link_of(true, false, Some(PathClass::Node), Phb),
            DevLink::Staged
        );
        assert_eq!(
            link_of(true, false, Some(PathClass::Sys), Sys),
            DevLink::Pcie
        );
        // Unknown (no topology): the farthest, direct only under the default level.
        assert_eq!(link_of(true, false, None, Sys), DevLink::Pcie);
        assert_eq!(link_of(true, false, None, Phb), DevLink::Staged);
        assert_eq!(link_of(false, false, nv, Sys), DevLink::Staged);
    }
}
