//! Memory that every rank of a communicator on one node maps: [`Communicator::alloc_shared`]
//! and [`SharedBuf`].

use crate::coll::shm::{NodeShm, ZeroCopy, all_on_node, exchange_segments};
use crate::comm::Communicator;
use crate::{CommError, Result};
use bytemuck::Pod;
use rcomm_kernels::{Element, Op};
use rcomm_transport::local::Segment;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Ids this process gives its shared buffers (0 means "no shared buffer" in the collectives).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A buffer of `T` in shared memory, one per rank of the communicator that allocated it
/// ([`Communicator::alloc_shared`]); every rank maps every other rank's buffer.
///
/// It dereferences to this rank's elements (read and write); [`peer`](Self::peer) reads
/// another rank's. Synchronisation is the user's job: read a peer's elements only after
/// something orders them after the peer's writes (a [`barrier`](Communicator::barrier), a
/// message, a collective), and do not write your own while peers may read them. The memory is
/// a sealed memfd, freed when every rank has dropped its `SharedBuf` (or exited); nothing is
/// ever created in `/dev/shm`.
pub struct SharedBuf<T: Pod> {
    /// By rank of the allocating communicator, ours included, with each one's id and byte count.
    segs: Vec<(Segment, u64, usize)>,
    rank: usize,
    /// World ranks of the allocating communicator.
    world: Vec<u32>,
    _t: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for SharedBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBuf")
            .field("rank", &self.rank)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl<T: Pod> SharedBuf<T> {
    fn elems(&self, j: usize) -> usize {
        self.segs[j].2.checked_div(size_of::<T>()).unwrap_or(0)
    }

    /// Rank `rank`'s elements (of the communicator that allocated the buffer); read-only. See
    /// the type's documentation for when reading them is meaningful.
    pub fn peer(&self, rank: u32) -> Result<&[T]> {
        let j = rank as usize;
        if j >= self.segs.len() {
            return Err(CommError::InvalidRank {
                rank,
                size: self.segs.len() as u32,
            });
        }
        // SAFETY: the mapping is page-aligned (so aligned for any Pod `T` we accept), holds at
        // least `elems(j)` elements and lives as long as `self`; every bit pattern is a valid
        // `T`. Concurrent writes by the owner are excluded by the documented usage rule.
        Ok(unsafe { std::slice::from_raw_parts(self.segs[j].0.as_ptr().cast(), self.elems(j)) })
    }

    /// Number of ranks sharing the buffer.
    pub fn ranks(&self) -> u32 {
        self.segs.len() as u32
    }
}

impl<T: Pod> std::ops::Deref for SharedBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: as in `peer`, for our own segment.
        unsafe {
            std::slice::from_raw_parts(
                self.segs[self.rank].0.as_ptr().cast(),
                self.elems(self.rank),
            )
        }
    }
}

impl<T: Pod> std::ops::DerefMut for SharedBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: our own segment, borrowed exclusively through `&mut self`; peers only read it
        // (they get no write access), and when is the user's rule.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.segs[self.rank].0.as_ptr().cast(),
                self.elems(self.rank),
            )
        }
    }
}

impl Communicator {
    /// Allocates `n` elements of `T` in shared memory on every rank (each rank may ask for its
    /// own `n`) and maps every rank's buffer into every rank. Collective. Every rank of the
    /// communicator must run on this node (split the world with
    /// [`split_type`](Communicator::split_type)`(SplitType::Node)` first); the buffers start
    /// zeroed.
    pub fn alloc_shared<T: Pod>(&self, n: usize) -> Result<SharedBuf<T>> {
        let bytes = n.checked_mul(size_of::<T>()).ok_or_else(|| {
            CommError::InvalidArg(format!(
                "alloc_shared: {n} elements overflow the address space"
            ))
        })?;
        if align_of::<T>() > 4096 {
            return Err(CommError::InvalidArg(
                "alloc_shared: element alignment above a page".into(),
            ));
        }
        let world = all_on_node(self)?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let segs = exchange_segments(self, "rcomm-shared-buf", bytes, id)?.ok_or_else(|| {
            CommError::Exhausted(
                "alloc_shared: a rank could not create or map the shared segments (memory limits? see RCOMM_DEBUG=INFO)".into(),
            )
        })?;
        Ok(SharedBuf {
            segs: segs
                .into_iter()
                .map(|(s, id, b)| (s, id, b as usize))
                .collect(),
            rank: self.rank() as usize,
            world,
            _t: PhantomData,
        })
    }

    /// In-place allreduce over shared buffers: every rank passes its buffer from one
    /// [`alloc_shared`](Self::alloc_shared) on this communicator (or one with the same ranks
    /// in the same order), all of one length. Peers read each input where it lies (no copy
    /// in); the result, the right fold in rank order as for
    /// [`allreduce_shm`](Self::allreduce_shm), replaces every buffer's contents. Collective.
    pub fn allreduce_shared<T: Element>(&self, buf: &mut SharedBuf<T>, op: Op) -> Result<()> {
        op.check(T::DTYPE)
            .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        let members: Vec<u32> = (0..self.size())
            .map(|r| self.world_rank(r))
            .collect::<Result<_>>()?;
        if members != buf.world || buf.rank != self.rank() as usize {
            return Err(CommError::InvalidArg(
                "allreduce_shared: the buffer was allocated on a communicator with other ranks"
                    .into(),
            ));
        }
        self.check_note(
            crate::coll::check::Call::new(crate::coll::check::Kind::Allreduce)
                .elem(size_of::<T>())
                .count(buf.segs[buf.rank].2 / size_of::<T>().max(1))
                .reducer(&crate::coll::Reducer::Builtin(op, T::DTYPE)),
        );
        let chk = self.check_shm_call()?;
        let Some(node) = NodeShm::get_or_setup(self, chk)? else {
            // Agreed on every rank: reduce a private copy by messages instead.
            let mut v = buf.to_vec();
            self.allreduce_in_place(&mut v, op)?;
            buf.copy_from_slice(&v);
            return Ok(());
        };
        let zc = ZeroCopy {
            bases: buf
                .segs
                .iter()
                .map(|(s, _, _)| NonNull::new(s.as_ptr()).expect("mappings are not null"))
                .collect(),
            ids: buf.segs.iter().map(|(_, id, _)| *id).collect(),
        };
        let total = buf.segs[buf.rank].2;
        // rcomm's built-in ops are commutative bit for bit, so any fold order gives one result.
        let r = crate::coll::Reducer::Builtin(op, T::DTYPE);
        // SAFETY: every base maps a rank's buffer; a rank whose buffer is shorter than ours
        // publishes its length, which differs, so every rank stops in the first round before
        // reading any input; with equal lengths every base holds `total` bytes. Ours is
        // borrowed exclusively (`&mut buf`) for the call.
        unsafe { node.allreduce_zc(self, total, size_of::<T>(), r.signature(), &r, &zc, chk)? };
        if op == Op::Avg {
            rcomm_kernels::finalize_avg_typed(&mut buf[..], self.size() as usize)
                .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        }
        Ok(())
    }
}
