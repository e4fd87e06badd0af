//! User reductions on elements whose size is known only at run time: the memory image of a
//! derived datatype's element (a 12-byte struct, a struct with padding), which no `Pod` type
//! of the program names. The collectives here take byte slices holding whole elements of the
//! op's size and run the same plans as the typed calls, with the element size the op gives,
//! so no algorithm splits an element and non-commutative ops combine in rank order.

use super::reduce::Reducer;
use super::{Order, Plan, Post, fit, fit_mut, need};
use crate::comm::Communicator;
use crate::{CollRequest, CommError, Result};
use std::sync::Arc;

/// `f(input, inout)` over whole elements.
type CombineFn = dyn Fn(&[u8], &mut [u8]) + Send + Sync;

/// A user reduction on elements of `elem` bytes: `f(input, inout)` sets
/// `inout[i] = input[i] ⊕ inout[i]` for every element `i` of `elem` bytes (MPI's convention;
/// both slices always hold the same whole number of elements, at any alignment). As for
/// [`UserOp`](crate::UserOp), the function must be associative; declare it commutative only
/// if it is. Cloning is cheap (the closure is shared).
#[derive(Clone)]
pub struct ElemOp {
    f: Arc<CombineFn>,
    elem: usize,
    commutative: bool,
}

impl std::fmt::Debug for ElemOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElemOp")
            .field("elem", &self.elem)
            .field("commutative", &self.commutative)
            .finish_non_exhaustive()
    }
}

impl ElemOp {
    /// Wraps `f(input, inout)` over elements of `elem` bytes (`elem` > 0).
    pub fn new(
        elem: usize,
        commutative: bool,
        f: impl Fn(&[u8], &mut [u8]) + Send + Sync + 'static,
    ) -> Result<Self> {
        if elem == 0 {
            return Err(CommError::InvalidArg(
                "a reduction over elements of 0 bytes".into(),
            ));
        }
        Ok(Self {
            f: Arc::new(f),
            elem,
            commutative,
        })
    }

    /// The element size in bytes.
    pub fn elem(&self) -> usize {
        self.elem
    }

    /// Whether the op was declared commutative.
    pub fn is_commutative(&self) -> bool {
        self.commutative
    }

    /// `inout = input ⊕ inout` on this rank (`MPI_Reduce_local`).
    pub fn reduce_local(&self, input: &[u8], inout: &mut [u8]) -> Result<()> {
        self.count("reduce_local", input.len())?;
        let inout = fit_mut("reduce_local inout", inout, input.len())?;
        self.reducer().apply(inout, input, Order::SrcFirst)
    }

    fn reducer(&self) -> Reducer {
        Reducer::User {
            f: self.f.clone(),
            elem: self.elem,
            commutative: self.commutative,
        }
    }

    /// Elements in `bytes`, refused unless whole.
    fn count(&self, what: &str, bytes: usize) -> Result<usize> {
        if !bytes.is_multiple_of(self.elem) {
            return Err(CommError::InvalidArg(format!(
                "{what}: {bytes} bytes are not whole elements of {} bytes",
                self.elem
            )));
        }
        Ok(bytes / self.elem)
    }
}

impl Communicator {
    /// [`allreduce`](Self::allreduce) of byte slices holding whole elements of `op.elem()`
    /// bytes: every rank gets `send₀ ⊕ send₁ ⊕ … ⊕ sendₙ₋₁`, bitwise identical everywhere.
    pub fn allreduce_elems(&self, send: &[u8], recv: &mut [u8], op: &ElemOp) -> Result<()> {
        op.count("allreduce", send.len())?;
        let recv = fit_mut("allreduce recv", recv, send.len())?;
        self.allreduce_bytes(recv, Some(send), op.elem, op.reducer())
    }

    /// [`reduce`](Self::reduce) of whole elements of `op.elem()` bytes to `root` (the other
    /// ranks pass `None`).
    pub fn reduce_elems(
        &self,
        send: &[u8],
        recv: Option<&mut [u8]>,
        op: &ElemOp,
        root: u32,
    ) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let count = op.count("reduce", send.len())?;
        let r = op.reducer();
        let sched = self.reduce_plan(count, op.elem, &r, root)?;
        if self.rank() == root {
            let recv = need(recv, "reduce")?;
            let recv = fit_mut("reduce recv", recv, send.len())?;
            recv.copy_from_slice(send);
            self.run_schedule(&sched, recv, &[], Some(&r))
        } else {
            let mut work = self.shared().coll.take_scratch(send.len());
            let bytes = &mut work[..send.len()];
            bytes.copy_from_slice(send);
            let res = self.run_schedule(&sched, bytes, &[], Some(&r));
            self.shared().coll.put_scratch(work);
            res
        }
    }

    /// [`scan`](Self::scan) of whole elements of `op.elem()` bytes: rank r gets
    /// `send₀ ⊕ … ⊕ send_r`.
    pub fn scan_elems(&self, send: &[u8], recv: &mut [u8], op: &ElemOp) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let count = op.count("scan", send.len())?;
        let recv = fit_mut("scan recv", recv, send.len())?;
        recv.copy_from_slice(send);
        let r = op.reducer();
        let sched = self.scan_plan(count, op.elem, &r, false)?;
        self.run_schedule(&sched, recv, &[], Some(&r))
    }

    /// [`exscan`](Self::exscan) of whole elements of `op.elem()` bytes: rank r gets
    /// `send₀ ⊕ … ⊕ send_{r−1}`; rank 0's `recv` is left unchanged.
    pub fn exscan_elems(&self, send: &[u8], recv: &mut [u8], op: &ElemOp) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let count = op.count("exscan", send.len())?;
        let recv = fit_mut("exscan recv", recv, send.len())?;
        let r = op.reducer();
        let sched = self.scan_plan(count, op.elem, &r, true)?;
        let len = send.len();
        let mut work = self.shared().coll.take_scratch(len);
        work[..len].copy_from_slice(send);
        let res = self.run_schedule(&sched, &mut work[..len], &[], Some(&r));
        if res.is_ok() && self.rank() > 0 {
            recv.copy_from_slice(&work[..len]);
        }
        self.shared().coll.put_scratch(work);
        res
    }

    /// [`reduce_scatter`](Self::reduce_scatter) of whole elements of `op.elem()` bytes:
    /// `send` holds `size` equal blocks of `recv.len()` bytes; block `rank` of the reduction
    /// lands in `recv`.
    pub fn reduce_scatter_elems(&self, send: &[u8], recv: &mut [u8], op: &ElemOp) -> Result<()> {
        let _fr = crate::fr::Scope::enter();
        let (n, me) = (self.size() as usize, self.rank() as usize);
        let block = op.count("reduce_scatter recv", recv.len())?;
        let send = fit("reduce_scatter send", send, n * recv.len())?;
        let r = op.reducer();
        let counts = vec![block; n];
        // The schedules only (the plan's shared-memory and hierarchical forms take typed
        // paths): every rank takes the same one, as the algorithm is chosen alike everywhere.
        let algo = self.reduce_scatter_algo(&counts, op.elem, &r)?;
        let sched = self.reduce_scatter_sched(&counts, op.elem, algo)?;
        let len = send.len();
        let mut work = self.shared().coll.take_scratch(len);
        work[..len].copy_from_slice(send);
        let res = self.run_schedule(&sched, &mut work[..len], &[], Some(&r));
        if res.is_ok() {
            let off = me * recv.len();
            recv.copy_from_slice(&work[off..off + recv.len()]);
        }
        self.shared().coll.put_scratch(work);
        res
    }

    /// Starts an [`allreduce_elems`](Self::allreduce_elems); `wait` hands back the result.
    pub fn iallreduce_elems(&self, buf: Vec<u8>, op: &ElemOp) -> Result<CollRequest<u8>> {
        let _fr = crate::fr::Scope::enter();
        let count = op.count("allreduce", buf.len())?;
        let r = op.reducer();
        let Plan::Sched(sched) = self.allreduce_plan(count, op.elem, &r, false)? else {
            unreachable!("non-blocking plans are schedules")
        };
        CollRequest::start(self, sched, buf, Vec::new(), Some(r), Post::Whole)
    }

    /// Starts a [`reduce_elems`](Self::reduce_elems); `wait` hands back the result on the
    /// root and an empty vector elsewhere.
    pub fn ireduce_elems(&self, send: Vec<u8>, op: &ElemOp, root: u32) -> Result<CollRequest<u8>> {
        let _fr = crate::fr::Scope::enter();
        let count = op.count("reduce", send.len())?;
        let r = op.reducer();
        let sched = self.reduce_plan(count, op.elem, &r, root)?;
        let post = if self.rank() == root {
            Post::Whole
        } else {
            Post::Nothing
        };
        CollRequest::start(self, sched, send, Vec::new(), Some(r), post)
    }

    /// Starts a [`scan_elems`](Self::scan_elems); `wait` hands back this rank's prefix.
    pub fn iscan_elems(&self, send: Vec<u8>, op: &ElemOp) -> Result<CollRequest<u8>> {
        self.iscan_like(send, op, false)
    }

    /// Starts an [`exscan_elems`](Self::exscan_elems); `wait` hands back the prefix of the
    /// ranks before this one (rank 0 gets its own `send` back).
    pub fn iexscan_elems(&self, send: Vec<u8>, op: &ElemOp) -> Result<CollRequest<u8>> {
        self.iscan_like(send, op, true)
    }

    fn iscan_like(&self, send: Vec<u8>, op: &ElemOp, exclusive: bool) -> Result<CollRequest<u8>> {
        let _fr = crate::fr::Scope::enter();
        let count = op.count("scan", send.len())?;
        let r = op.reducer();
        let sched = self.scan_plan(count, op.elem, &r, exclusive)?;
        CollRequest::start(self, sched, send, Vec::new(), Some(r), Post::Whole)
    }

    /// Starts a [`reduce_scatter_elems`](Self::reduce_scatter_elems) of `send` (`size` equal
    /// blocks); `wait` hands back this rank's reduced block.
    pub fn ireduce_scatter_elems(&self, send: Vec<u8>, op: &ElemOp) -> Result<CollRequest<u8>> {
        let _fr = crate::fr::Scope::enter();
        let (n, me) = (self.size() as usize, self.rank() as usize);
        let count = op.count("reduce_scatter", send.len())?;
        if !count.is_multiple_of(n) {
            return Err(CommError::InvalidArg(format!(
                "reduce_scatter: {count} elements are not {n} equal blocks"
            )));
        }
        let r = op.reducer();
        let counts = vec![count / n; n];
        let algo = self.reduce_scatter_algo(&counts, op.elem, &r)?;
        let sched = self.reduce_scatter_sched(&counts, op.elem, algo)?;
        let block = send.len() / n;
        CollRequest::start(
            self,
            sched,
            send,
            Vec::new(),
            Some(r),
            Post::Range(me * block, block),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 12-byte elements: three little-endian u32 (a, b, c); the op keeps the left operand's
    /// `a` and `b` and sums `c` (associative, not commutative).
    fn first_ab_sum_c() -> ElemOp {
        ElemOp::new(12, false, |input, inout| {
            assert_eq!(input.len(), inout.len());
            assert_eq!(input.len() % 12, 0, "whole elements only");
            for (x, y) in input.chunks(12).zip(inout.chunks_mut(12)) {
                let c = u32::from_le_bytes(x[8..12].try_into().unwrap())
                    .wrapping_add(u32::from_le_bytes(y[8..12].try_into().unwrap()));
                y[..8].copy_from_slice(&x[..8]);
                y[8..].copy_from_slice(&c.to_le_bytes());
            }
        })
        .unwrap()
    }

    fn elem(a: u32, b: u32, c: u32) -> Vec<u8> {
        [a, b, c].iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn local_reduction_keeps_the_operand_order_and_refuses_partial_elements() {
        let op = first_ab_sum_c();
        assert_eq!((op.elem(), op.is_commutative()), (12, false));
        let input = [elem(1, 2, 3), elem(4, 5, 6)].concat();
        let mut inout = [elem(7, 8, 9), elem(10, 11, 12)].concat();
        op.reduce_local(&input, &mut inout).unwrap();
        assert_eq!(inout, [elem(1, 2, 12), elem(4, 5, 18)].concat());
        assert!(op.reduce_local(&input[..13], &mut inout[..13]).is_err());
        assert!(op.reduce_local(&input, &mut inout[..12]).is_err());
        assert!(ElemOp::new(0, true, |_, _| {}).is_err());
        // Misaligned slices are fine: the op sees bytes.
        let mut back = [0u8; 25];
        back[1..13].copy_from_slice(&elem(0, 0, 5));
        op.reduce_local(&elem(3, 3, 1), &mut back[1..13]).unwrap();
        assert_eq!(back[1..13], elem(3, 3, 6));
    }
}
