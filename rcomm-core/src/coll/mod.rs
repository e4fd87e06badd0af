//! Collectives. Every algorithm produces a [`schedule::Schedule`] (plain data); one executor
//! runs schedules over point-to-point on the communicator's internal context, so collective
//! traffic never meets user messages.
//!
//! This is the first slice of the collectives work: allreduce (ring, recursive doubling) and
//! broadcast (binomial tree) with a size-based choice that every rank computes alike. The
//! rest of the MPI set, the cost-model tuner and the shared-memory direct algorithms build on
//! the same schedule type.

pub mod schedule;
pub(crate) mod tuner;

use crate::comm::{Communicator, Tag};
use crate::p2p::matcher::Source;
use crate::p2p::region::Region;
use crate::{CommError, Result};
pub use rcomm_kernels::{Dtype, Element, Op};
use schedule::{Buf, Chunk, Phase, Schedule, Step};

/// Collective tags start here on the internal context (below: barrier, allgather of ids, ...).
const TAG_COLL_BASE: i32 = 16;

/// An allreduce algorithm (forcing one is for tests and benchmarks; `Auto` picks by size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Algo {
    /// Pick by message size and rank count (the same choice on every rank).
    Auto,
    /// Ring: reduce-scatter then allgather.
    Ring,
    /// Recursive doubling.
    RecursiveDoubling,
}

/// Up to this many bytes allreduce uses recursive doubling (latency-bound), above it the ring.
const RD_MAX_BYTES: usize = 64 << 10;

impl Communicator {
    /// Combines `buf` element-wise across all ranks with `op`; every rank gets the result, with
    /// bitwise identical bytes on every rank. Collective; every rank passes the same length.
    pub fn allreduce_in_place<T: Element>(&self, buf: &mut [T], op: Op) -> Result<()> {
        self.allreduce_with(buf, op, Algo::Auto)
    }

    /// Like [`allreduce_in_place`](Self::allreduce_in_place), with a forced algorithm.
    pub fn allreduce_with<T: Element>(&self, buf: &mut [T], op: Op, algo: Algo) -> Result<()> {
        op.check(T::DTYPE)
            .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        let (n, count, elem) = (self.size, buf.len(), size_of::<T>());
        let algo = self.allreduce_algo(algo, count, elem);
        rcomm_transport::rlog!(
            Trace,
            "COLL",
            "allreduce of {count} x {:?} on {n} ranks: {algo:?}",
            T::DTYPE
        );
        let sched = match algo {
            Algo::Ring => schedule::ring_allreduce(self.rank, n, count, elem),
            _ => schedule::recursive_doubling_allreduce(self.rank, n, count, elem),
        };
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        self.run_schedule(&sched, bytes, &[], Some((op, T::DTYPE)))?;
        if op == Op::Avg {
            rcomm_kernels::finalize_avg_typed(buf, n as usize)
                .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        }
        Ok(())
    }

    /// The allreduce algorithm: a pure function of inputs every rank shares (the requested
    /// algorithm, count, element size, rank count and `RCOMM_ALGO`, checked equal at init), so
    /// ranks never disagree, and blocking and non-blocking calls combine in the same order.
    fn allreduce_algo(&self, algo: Algo, count: usize, elem: usize) -> Algo {
        let forced = match self.shared.forced_algo("allreduce") {
            Some("ring") => Algo::Ring,
            Some("rd") => Algo::RecursiveDoubling,
            _ => Algo::Auto,
        };
        match (algo, forced) {
            (Algo::Auto, Algo::Auto)
                if count * elem <= RD_MAX_BYTES || (count as u64) < u64::from(self.size) =>
            {
                Algo::RecursiveDoubling
            }
            (Algo::Auto, Algo::Auto) => Algo::Ring,
            (Algo::Auto, f) => f,
            (a, _) => a,
        }
    }

    /// `recv = send ⊕ …` across all ranks (out of place).
    pub fn allreduce<T: Element>(&self, send: &[T], recv: &mut [T], op: Op) -> Result<()> {
        if send.len() != recv.len() {
            return Err(CommError::InvalidArg(format!(
                "allreduce: send has {} elements but recv {}",
                send.len(),
                recv.len()
            )));
        }
        recv.copy_from_slice(send);
        self.allreduce_in_place(recv, op)
    }

    /// Sends `buf` from `root` to every rank. Collective; every rank passes the same length.
    pub fn bcast<T: bytemuck::Pod>(&self, buf: &mut [T], root: u32) -> Result<()> {
        if root >= self.size {
            return Err(CommError::InvalidRank {
                rank: root,
                size: self.size,
            });
        }
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let sched = schedule::binomial_bcast(self.rank, self.size, root, bytes.len());
        self.run_schedule(&sched, bytes, &[], None)
    }

    fn check_root(&self, root: u32) -> Result<()> {
        if root >= self.size {
            return Err(CommError::InvalidRank {
                rank: root,
                size: self.size,
            });
        }
        Ok(())
    }

    fn check_len(what: &str, got: usize, want: usize) -> Result<()> {
        if got != want {
            return Err(CommError::InvalidArg(format!(
                "{what}: buffer of {got} elements, expected {want}"
            )));
        }
        Ok(())
    }

    /// Combines `send` across all ranks with `op` into `recv` on `root` (other ranks pass
    /// `None`). Collective.
    pub fn reduce<T: Element>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        op: Op,
        root: u32,
    ) -> Result<()> {
        self.check_root(root)?;
        op.check(T::DTYPE)
            .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        let mut work = send.to_vec();
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut work);
        let sched = schedule::binomial_reduce(self.rank, self.size, root, bytes.len());
        self.run_schedule(&sched, bytes, &[], Some((op, T::DTYPE)))?;
        if self.rank == root {
            let recv = recv.ok_or_else(|| {
                CommError::InvalidArg("reduce: the root must pass a receive buffer".into())
            })?;
            Self::check_len("reduce recv", recv.len(), send.len())?;
            recv.copy_from_slice(&work);
            if op == Op::Avg {
                rcomm_kernels::finalize_avg_typed(recv, self.size as usize)
                    .map_err(|e| CommError::InvalidArg(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// Every rank's `send` block, concatenated in rank order, into every rank's `recv`
    /// (`size × send.len()` elements). Collective.
    pub fn allgather<T: bytemuck::Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.allgatherv(send, recv, &vec![send.len(); self.size as usize])
    }

    /// Reduces `send` (`size` blocks of `recv.len()` elements) across ranks and leaves block
    /// `rank` of the result in `recv`. Collective.
    pub fn reduce_scatter<T: Element>(&self, send: &[T], recv: &mut [T], op: Op) -> Result<()> {
        op.check(T::DTYPE)
            .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        let (n, b) = (self.size as usize, recv.len());
        Self::check_len("reduce_scatter send", send.len(), n * b)?;
        let mut work = send.to_vec();
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut work);
        let sched = schedule::ring_reduce_scatter(self.rank, self.size, b * size_of::<T>());
        self.run_schedule(&sched, bytes, &[], Some((op, T::DTYPE)))?;
        let r = self.rank as usize;
        recv.copy_from_slice(&work[r * b..(r + 1) * b]);
        if op == Op::Avg {
            rcomm_kernels::finalize_avg_typed(recv, n)
                .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        }
        Ok(())
    }

    /// Every rank's `send` block, in rank order, into `recv` on `root` (`size × send.len()`
    /// elements; other ranks pass `None`). Collective.
    pub fn gather<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        root: u32,
    ) -> Result<()> {
        self.gatherv(send, recv, &vec![send.len(); self.size as usize], root)
    }

    /// Block `rank` of the root's `send` (`size × recv.len()` elements; other ranks pass
    /// `None`) into every rank's `recv`. Collective.
    pub fn scatter<T: bytemuck::Pod>(
        &self,
        send: Option<&[T]>,
        recv: &mut [T],
        root: u32,
    ) -> Result<()> {
        self.scatterv(send, &vec![recv.len(); self.size as usize], recv, root)
    }

    /// Block `j` of every rank's `send` goes to rank `j`, landing as block `rank of sender`
    /// in `recv` (both `size × block` elements). Collective.
    pub fn alltoall<T: bytemuck::Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let n = self.size as usize;
        Self::check_len("alltoall recv", recv.len(), send.len())?;
        if !send.len().is_multiple_of(n) {
            return Err(CommError::InvalidArg(format!(
                "alltoall: {} elements are not {n} equal blocks",
                send.len()
            )));
        }
        let (b, r) = (send.len() / n, self.rank as usize);
        recv[r * b..(r + 1) * b].copy_from_slice(&send[r * b..(r + 1) * b]);
        let sched = schedule::pairwise_alltoall(self.rank, self.size, b * size_of::<T>());
        self.run_schedule(
            &sched,
            bytemuck::cast_slice_mut(recv),
            bytemuck::cast_slice(send),
            None,
        )
    }

    /// Like [`allgather`](Self::allgather) with `counts[i]` elements from rank i, packed in rank
    /// order in `recv` (every rank passes the same `counts`). Collective.
    pub fn allgatherv<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<()> {
        let (n, r) = (self.size as usize, self.rank as usize);
        Self::check_len("allgatherv counts", counts.len(), n)?;
        Self::check_len("allgatherv send", send.len(), counts[r])?;
        Self::check_len("allgatherv recv", recv.len(), counts.iter().sum())?;
        let off: usize = counts[..r].iter().sum();
        recv[off..off + send.len()].copy_from_slice(send);
        let blocks = schedule::packed_blocks(counts, size_of::<T>());
        self.run_schedule(
            &schedule::ring_allgather_v(self.rank, &blocks),
            bytemuck::cast_slice_mut(recv),
            &[],
            None,
        )
    }

    /// Like [`gather`](Self::gather) with `counts[i]` elements from rank i (the root needs
    /// every count; others only their own). Collective.
    pub fn gatherv<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        counts: &[usize],
        root: u32,
    ) -> Result<()> {
        self.check_root(root)?;
        let (n, r) = (self.size as usize, self.rank as usize);
        Self::check_len("gatherv counts", counts.len(), n)?;
        Self::check_len("gatherv send", send.len(), counts[r])?;
        let blocks = schedule::packed_blocks(counts, size_of::<T>());
        let sched = schedule::linear_gather_v(self.rank, root, &blocks);
        if self.rank == root {
            let recv = recv.ok_or_else(|| {
                CommError::InvalidArg("gatherv: the root must pass a receive buffer".into())
            })?;
            Self::check_len("gatherv recv", recv.len(), counts.iter().sum())?;
            let off: usize = counts[..r].iter().sum();
            recv[off..off + send.len()].copy_from_slice(send);
            self.run_schedule(&sched, bytemuck::cast_slice_mut(recv), &[], None)
        } else {
            self.run_schedule(&sched, &mut [], bytemuck::cast_slice(send), None)
        }
    }

    /// Like [`scatter`](Self::scatter) with `counts[i]` elements to rank i. Collective.
    pub fn scatterv<T: bytemuck::Pod>(
        &self,
        send: Option<&[T]>,
        counts: &[usize],
        recv: &mut [T],
        root: u32,
    ) -> Result<()> {
        self.check_root(root)?;
        let (n, r) = (self.size as usize, self.rank as usize);
        Self::check_len("scatterv counts", counts.len(), n)?;
        Self::check_len("scatterv recv", recv.len(), counts[r])?;
        let blocks = schedule::packed_blocks(counts, size_of::<T>());
        let sched = schedule::linear_scatter_v(self.rank, root, &blocks);
        if self.rank == root {
            let send = send.ok_or_else(|| {
                CommError::InvalidArg("scatterv: the root must pass a send buffer".into())
            })?;
            Self::check_len("scatterv send", send.len(), counts.iter().sum())?;
            let off: usize = counts[..r].iter().sum();
            recv.copy_from_slice(&send[off..off + recv.len()]);
            self.run_schedule(
                &sched,
                bytemuck::cast_slice_mut(recv),
                bytemuck::cast_slice(send),
                None,
            )
        } else {
            self.run_schedule(&sched, bytemuck::cast_slice_mut(recv), &[], None)
        }
    }

    /// All-to-all with `send_counts[j]` elements to rank j and `recv_counts[i]` from rank i,
    /// packed in rank order. What rank i sends to j must be what j expects from i. Collective.
    pub fn alltoallv<T: bytemuck::Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<()> {
        let (n, r) = (self.size as usize, self.rank as usize);
        Self::check_len("alltoallv send_counts", send_counts.len(), n)?;
        Self::check_len("alltoallv recv_counts", recv_counts.len(), n)?;
        Self::check_len("alltoallv send", send.len(), send_counts.iter().sum())?;
        Self::check_len("alltoallv recv", recv.len(), recv_counts.iter().sum())?;
        Self::check_len("alltoallv own block", recv_counts[r], send_counts[r])?;
        let (so, ro): (usize, usize) =
            (send_counts[..r].iter().sum(), recv_counts[..r].iter().sum());
        recv[ro..ro + recv_counts[r]].copy_from_slice(&send[so..so + send_counts[r]]);
        let e = size_of::<T>();
        let sched = schedule::pairwise_alltoall_v(
            self.rank,
            &schedule::packed_blocks(send_counts, e),
            &schedule::packed_blocks(recv_counts, e),
        );
        self.run_schedule(
            &sched,
            bytemuck::cast_slice_mut(recv),
            bytemuck::cast_slice(send),
            None,
        )
    }

    /// Reduces `send` (`counts.iter().sum()` elements) across ranks and leaves the `counts[rank]`
    /// elements of this rank's block in `recv`. Collective.
    pub fn reduce_scatter_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: Op,
    ) -> Result<()> {
        op.check(T::DTYPE)
            .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        let (n, r) = (self.size as usize, self.rank as usize);
        Self::check_len("reduce_scatter_v counts", counts.len(), n)?;
        Self::check_len("reduce_scatter_v send", send.len(), counts.iter().sum())?;
        Self::check_len("reduce_scatter_v recv", recv.len(), counts[r])?;
        let mut work = send.to_vec();
        let sched = schedule::ring_reduce_scatter_v(
            self.rank,
            &schedule::packed_blocks(counts, size_of::<T>()),
        );
        self.run_schedule(
            &sched,
            bytemuck::cast_slice_mut(&mut work),
            &[],
            Some((op, T::DTYPE)),
        )?;
        let off: usize = counts[..r].iter().sum();
        recv.copy_from_slice(&work[off..off + counts[r]]);
        if op == Op::Avg {
            rcomm_kernels::finalize_avg_typed(recv, n)
                .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        }
        Ok(())
    }

    /// Inclusive prefix reduction: rank r gets `send(0) ⊕ … ⊕ send(r)`. Collective.
    pub fn scan<T: Element>(&self, send: &[T], recv: &mut [T], op: Op) -> Result<()> {
        self.scan_impl(send, recv, op, false)
    }

    /// Exclusive prefix reduction: rank r gets `send(0) ⊕ … ⊕ send(r−1)`. Rank 0's `recv` is
    /// left unchanged (MPI leaves it undefined). Collective.
    pub fn exscan<T: Element>(&self, send: &[T], recv: &mut [T], op: Op) -> Result<()> {
        self.scan_impl(send, recv, op, true)
    }

    fn scan_impl<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: Op,
        exclusive: bool,
    ) -> Result<()> {
        if op == Op::Avg {
            return Err(CommError::InvalidArg("scan with Avg is not defined".into()));
        }
        op.check(T::DTYPE)
            .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        Self::check_len("scan recv", recv.len(), send.len())?;
        let mut work = send.to_vec();
        let sched =
            schedule::chain_scan(self.rank, self.size, std::mem::size_of_val(send), exclusive);
        self.run_schedule(
            &sched,
            bytemuck::cast_slice_mut(&mut work),
            &[],
            Some((op, T::DTYPE)),
        )?;
        if !(exclusive && self.rank == 0) {
            recv.copy_from_slice(&work);
        }
        Ok(())
    }

    /// The tag of the next collective on this communicator.
    fn next_coll_tag(&self) -> Tag {
        let seq = self
            .coll_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Tag(TAG_COLL_BASE + (seq % (1 << 30)) as i32)
    }

    /// Runs a schedule over `data` (and a read-only `input`) to completion.
    pub(crate) fn run_schedule(
        &self,
        s: &Schedule,
        data: &mut [u8],
        input: &[u8],
        reduce: Option<(Op, Dtype)>,
    ) -> Result<()> {
        let mut tmp = vec![0u8; s.tmp_len];
        let tag = self.next_coll_tag();
        for ph in &s.phases {
            let reqs = self.post_phase(ph, tag, data, input, &mut tmp)?;
            self.finish_phase(ph, reqs, data, &mut tmp, reduce, true)?;
        }
        Ok(())
    }

    /// Posts a phase's receives, then its sends. On error, requests already posted are waited
    /// for (so no buffer is used after) and the first error is returned.
    fn post_phase(
        &self,
        ph: &Phase,
        tag: Tag,
        data: &mut [u8],
        input: &[u8],
        tmp: &mut [u8],
    ) -> Result<Vec<Pending>> {
        let ctx = self.ctx + 1;
        let region = |c: &Chunk, data: &mut [u8], tmp: &mut [u8]| -> Region {
            let (base, len) = match c.buf {
                Buf::Data => (data.as_mut_ptr(), data.len()),
                Buf::Tmp => (tmp.as_mut_ptr(), tmp.len()),
                Buf::Input => (input.as_ptr().cast_mut(), input.len()),
            };
            assert!(c.off + c.len <= len, "schedule chunk outside its buffer");
            // SAFETY: the chunk lies inside its buffer (asserted), the chunks of one phase do
            // not overlap where one is written, `Input` chunks are only sent (never written),
            // and every request of the phase completes (or is removed) before the buffers are
            // touched again or released (`finish_phase`, and `CollRequest`'s drop).
            unsafe { Region::from_raw(base.add(c.off), c.len) }
        };
        let mut reqs = Vec::with_capacity(ph.xfers.len());
        let mut err = None;
        {
            let mut e = self.shared.lock();
            for st in &ph.xfers {
                if let Step::Recv { peer, dst } = st {
                    let w = self.world_rank(*peer)?;
                    match e.irecv(
                        ctx,
                        Source::Rank(w),
                        tag.sel(),
                        region(dst, data, tmp),
                        "collective",
                    ) {
                        Ok(r) => reqs.push(Pending {
                            req: r,
                            want: Some(dst.len),
                            peer: *peer,
                        }),
                        Err(x) => err = err.or(Some(x)),
                    }
                }
            }
            for st in &ph.xfers {
                if let Step::Send { peer, src } = st {
                    let w = self.world_rank(*peer)?;
                    match e.isend(ctx, w, tag.0, region(src, data, tmp), "collective") {
                        Ok(r) => reqs.push(Pending {
                            req: r,
                            want: None,
                            peer: *peer,
                        }),
                        Err(x) => err = err.or(Some(x)),
                    }
                }
            }
        }
        if let Some(x) = err {
            for p in reqs {
                let _ = self.shared.wait(p.req);
            }
            return Err(x);
        }
        Ok(reqs)
    }

    /// Completes a phase: waits for (or, with `block` false, checks) its requests, then runs
    /// its local steps. Returns the requests still pending when not blocking.
    fn finish_phase(
        &self,
        ph: &Phase,
        reqs: Vec<Pending>,
        data: &mut [u8],
        tmp: &mut [u8],
        reduce: Option<(Op, Dtype)>,
        block: bool,
    ) -> Result<Vec<Pending>> {
        if !block {
            let mut e = self.shared.lock();
            e.progress();
            if !reqs.iter().all(|p| e.is_done(p.req)) {
                return Ok(reqs);
            }
        }
        let mut err = None;
        for p in reqs {
            match self.shared.wait(p.req) {
                Ok(st) => {
                    if let Some(len) = p.want
                        && st.bytes != len
                    {
                        err = err.or(Some(CommError::Mismatch {
                            what: "collective message size (do all ranks pass the same count?)"
                                .into(),
                            rank: p.peer,
                            theirs: st.bytes as u64,
                            ours: len as u64,
                        }));
                    }
                }
                Err(x) => err = err.or(Some(x)),
            }
        }
        if let Some(x) = err {
            return Err(x);
        }
        for st in &ph.local {
            let (dst, src) = match st {
                Step::Reduce { dst, src } | Step::Copy { dst, src } => (dst, src),
                _ => continue,
            };
            if src.buf != Buf::Tmp || dst.buf != Buf::Data {
                return Err(CommError::InvalidArg(
                    "schedule combines other buffers than scratch into data".into(),
                ));
            }
            let srcb = &tmp[src.off..src.off + src.len];
            let dstb = &mut data[dst.off..dst.off + dst.len];
            match (st, reduce) {
                (Step::Reduce { .. }, Some((op, dtype))) => {
                    rcomm_kernels::reduce_into(op, dtype, dstb, srcb)
                        .map_err(|e| CommError::InvalidArg(e.to_string()))?
                }
                (Step::Reduce { .. }, None) => {
                    return Err(CommError::InvalidArg("reduction step without an op".into()));
                }
                _ => dstb.copy_from_slice(srcb),
            }
        }
        Ok(Vec::new())
    }

    /// Starts an allreduce of `buf` (owned until [`CollRequest::wait`] hands it back) and
    /// returns at once; the collective advances in `test`/`wait` (and any other rcomm call of
    /// this rank), so computation can overlap it.
    pub fn iallreduce<T: Element>(&self, buf: Vec<T>, op: Op) -> Result<CollRequest<T>> {
        op.check(T::DTYPE)
            .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        let (n, count, elem) = (self.size, buf.len(), size_of::<T>());
        let sched = match self.allreduce_algo(Algo::Auto, count, elem) {
            Algo::Ring => schedule::ring_allreduce(self.rank, n, count, elem),
            _ => schedule::recursive_doubling_allreduce(self.rank, n, count, elem),
        };
        CollRequest::start(
            self.clone(),
            sched,
            buf,
            Some((op, T::DTYPE)),
            op == Op::Avg,
        )
    }

    /// Starts a broadcast of `buf` from `root` (see [`iallreduce`](Self::iallreduce)).
    pub fn ibcast<T: bytemuck::Pod + Send>(
        &self,
        buf: Vec<T>,
        root: u32,
    ) -> Result<CollRequest<T>> {
        self.check_root(root)?;
        let sched =
            schedule::binomial_bcast(self.rank, self.size, root, std::mem::size_of_val(&buf[..]));
        CollRequest::start(self.clone(), sched, buf, None, false)
    }
}

/// A request of a phase in flight.
#[derive(Debug)]
struct Pending {
    req: crate::p2p::engine::ReqId,
    want: Option<usize>,
    peer: u32,
}

/// A non-blocking collective that owns its buffer. Dropping it before completion waits for it
/// (the other ranks are running the same collective, so it completes).
#[derive(Debug)]
#[must_use = "a collective request does nothing useful unless waited for"]
pub struct CollRequest<T: bytemuck::Pod + Send> {
    comm: Communicator,
    tag: Tag,
    sched: Schedule,
    data: Vec<T>,
    tmp: Vec<u8>,
    phase: usize,
    pending: Vec<Pending>,
    reduce: Option<(Op, Dtype)>,
    avg: bool,
    failed: Option<CommError>,
}

impl<T: bytemuck::Pod + Send> CollRequest<T> {
    fn start(
        comm: Communicator,
        sched: Schedule,
        data: Vec<T>,
        reduce: Option<(Op, Dtype)>,
        avg: bool,
    ) -> Result<Self> {
        let tmp = vec![0u8; sched.tmp_len];
        let tag = comm.next_coll_tag();
        let mut r = Self {
            comm,
            tag,
            sched,
            data,
            tmp,
            phase: 0,
            pending: Vec::new(),
            reduce,
            avg,
            failed: None,
        };
        r.advance(false)?;
        Ok(r)
    }

    /// Moves through as many phases as are ready (all of them when `block`).
    fn advance(&mut self, block: bool) -> Result<bool> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        while self.phase < self.sched.phases.len() {
            let ph = self.sched.phases[self.phase].clone();
            let data: &mut [u8] = bytemuck::cast_slice_mut(&mut self.data);
            if self.pending.is_empty() {
                self.pending = self
                    .comm
                    .post_phase(&ph, self.tag, data, &[], &mut self.tmp)?;
                if self.pending.is_empty() && ph.local.is_empty() {
                    self.phase += 1;
                    continue;
                }
            }
            let reqs = std::mem::take(&mut self.pending);
            match self
                .comm
                .finish_phase(&ph, reqs, data, &mut self.tmp, self.reduce, block)
            {
                Ok(left) if !left.is_empty() => {
                    self.pending = left;
                    return Ok(false);
                }
                Ok(_) => self.phase += 1,
                Err(e) => {
                    self.phase = self.sched.phases.len();
                    return Err(e);
                }
            }
        }
        Ok(true)
    }

    /// Whether the collective has completed (advancing it as far as possible without waiting).
    pub fn test(&mut self) -> Result<bool> {
        self.advance(false)
    }

    /// Waits for completion and hands back the buffer with the result.
    pub fn wait(mut self) -> Result<Vec<T>> {
        self.advance(true)?;
        let mut data = std::mem::take(&mut self.data);
        if self.avg
            && let Some((_, dtype)) = self.reduce
        {
            let n = self.comm.size as usize;
            rcomm_kernels::finalize_avg(dtype, bytemuck::cast_slice_mut(&mut data), n)
                .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        }
        Ok(data)
    }
}

impl<T: bytemuck::Pod + Send> Drop for CollRequest<T> {
    fn drop(&mut self) {
        if self.phase < self.sched.phases.len() {
            // The requests in flight point into our buffers: finish before freeing them.
            if let Err(e) = self.advance(true) {
                rcomm_transport::rlog!(Warn, "COLL", "a dropped collective request failed: {e}");
            }
        }
    }
}
