//! Derived datatypes (MPI's `MPI_Type_*`): a layout of bytes in memory, built from constructors
//! (contiguous, vector, indexed, struct, subarray, resized), that sends and receives read and
//! write without the user packing by hand.
//!
//! A [`Datatype`] is an immutable, shared description: the runs of bytes one element covers, in
//! type-map order (the order MPI packs them in), with its lower bound and extent. Runs are kept
//! folded as strided blocks (`count` runs of `len` bytes, `stride` apart), so a vector of a
//! million doubles is one block, not a million entries, and the pack loop copies fixed-size
//! pieces. Packing is MPI's canonical form: the data bytes concatenated in type-map order, so
//! two type maps with the same signature interoperate (a strided column received into a
//! contiguous row).
//!
//! Safe calls take byte slices and check that every byte the layout touches lies inside the
//! slice (a bad layout is an error, never a stray write); `*_raw` calls take a base pointer for
//! layouts that reach below it (negative displacements), as MPI allows.
//!
//! ```
//! use rcomm::datatype::Datatype;
//! // Column 1 of a 3 x 4 row-major matrix of f64.
//! let col = Datatype::vector(3, 1, 4, &Datatype::of::<f64>())?;
//! let m: Vec<f64> = (0..12).map(f64::from).collect();
//! let mut packed = vec![0u8; col.packed_size(1)];
//! col.pack(bytemuck::cast_slice(&m[1..]), 1, &mut packed)?;
//! let got: &[f64] = bytemuck::cast_slice(&packed);
//! assert_eq!(got, &[1.0, 5.0, 9.0]);
//! # Ok::<(), rcomm::CommError>(())
//! ```

use crate::comm::{Communicator, Request, Tag};
use crate::p2p::engine::Status;
use crate::p2p::matcher::Source;
use crate::{CommError, Result};
use bytemuck::Pod;
use std::sync::Arc;

/// Most strided blocks one datatype may hold: a layout that cannot be folded below this is
/// refused rather than allowed to take unbounded memory.
pub const MAX_BLOCKS: usize = 1 << 22;

/// Storage order of a multi-dimensional array for [`Datatype::subarray`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Row-major (C): the last dimension varies fastest.
    RowMajor,
    /// Column-major (Fortran): the first dimension varies fastest.
    ColumnMajor,
}

/// `count` runs of `len` bytes starting at `off`, `stride` bytes apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    off: isize,
    len: usize,
    stride: isize,
    count: usize,
}

impl Block {
    fn last_off(&self) -> isize {
        self.off + (self.count as isize - 1) * self.stride
    }
}

#[derive(Debug)]
struct Map {
    blocks: Vec<Block>,
    /// Data bytes of one element.
    size: usize,
    lb: isize,
    ub: isize,
    /// Lowest and one past the highest byte the data occupies (0, 0 when empty).
    true_lb: isize,
    true_ub: isize,
    /// Every block's `len` when they all agree (the pack loop then copies fixed-size pieces).
    uniform: Option<usize>,
}

/// A derived datatype: which bytes of memory one element covers, in which order. Cheap to clone
/// (shared); `Send + Sync`.
#[derive(Clone, Debug)]
pub struct Datatype(Arc<Map>);

fn bad(what: impl Into<String>) -> CommError {
    CommError::InvalidArg(what.into())
}

fn to_isize(v: i128, what: &str) -> Result<isize> {
    isize::try_from(v).map_err(|_| bad(format!("{what}: the layout's byte offsets overflow")))
}

/// Most copies of the old type one constructor may place (MPI's counts are `int`s).
const MAX_COPIES: u128 = 1 << 32;

fn check_copies(count: usize, blocklen: usize, what: &str) -> Result<()> {
    if count as u128 * blocklen as u128 > MAX_COPIES {
        return Err(bad(format!(
            "{what}: {count} x {blocklen} copies of the old type is more than rcomm builds ({MAX_COPIES})"
        )));
    }
    Ok(())
}

/// Collects runs in type-map order and folds them into strided blocks.
struct Builder {
    blocks: Vec<Block>,
    size: usize,
    lb: i128,
    ub: i128,
    bounds_set: bool,
    /// Blocks appended so far (a bound on the time building takes).
    work: usize,
}

/// Most blocks one constructor appends while building (about a second of work).
const MAX_WORK: usize = 1 << 27;

impl Builder {
    fn new() -> Builder {
        Builder {
            blocks: Vec::new(),
            size: 0,
            lb: 0,
            ub: 0,
            bounds_set: false,
            work: 0,
        }
    }

    /// Widens the bounds by one placed copy spanning `[lo, hi)`.
    fn bound(&mut self, lo: i128, hi: i128) {
        if self.bounds_set {
            self.lb = self.lb.min(lo);
            self.ub = self.ub.max(hi);
        } else {
            (self.lb, self.ub, self.bounds_set) = (lo, hi, true);
        }
    }

    fn push_run(&mut self, off: isize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.size = self
            .size
            .checked_add(len)
            .ok_or_else(|| bad("datatype size overflows"))?;
        if let Some(last) = self.blocks.last_mut() {
            if last.count == 1 && last.off + last.len as isize == off {
                last.len += len;
                return Ok(());
            }
            if last.len == len {
                if last.count == 1 {
                    self.fold_last();
                    let last = self.blocks.last_mut().expect("blocks");
                    if last.count == 1 {
                        last.stride = off - last.off;
                        last.count = 2;
                        return Ok(());
                    }
                }
                let last = self.blocks.last_mut().expect("blocks");
                if last.len == len && last.last_off() + last.stride == off {
                    last.count += 1;
                    return Ok(());
                }
            }
            self.fold_last();
        }
        if self.blocks.len() >= MAX_BLOCKS {
            return Err(bad(format!(
                "datatype too irregular: more than {MAX_BLOCKS} separate blocks"
            )));
        }
        self.blocks.push(Block {
            off,
            len,
            stride: 0,
            count: 1,
        });
        Ok(())
    }

    /// A finished single run that continues the stride of the block before it joins that block
    /// (so `[a][a][a]` grown run by run through contiguous merges still folds).
    fn fold_last(&mut self) {
        let n = self.blocks.len();
        if n < 2 {
            return;
        }
        let (prev, last) = (self.blocks[n - 2], self.blocks[n - 1]);
        if last.count != 1 || prev.len != last.len {
            return;
        }
        if prev.count == 1 {
            self.blocks[n - 2].stride = last.off - prev.off;
            self.blocks[n - 2].count = 2;
            self.blocks.pop();
        } else if prev.last_off() + prev.stride == last.off {
            self.blocks[n - 2].count += 1;
            self.blocks.pop();
        }
    }

    /// Places `n` consecutive copies of `old` at byte displacement `disp`.
    fn place(&mut self, disp: i128, n: usize, old: &Map) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let ext = (old.ub - old.lb) as i128;
        let first = disp;
        let last = disp + (n as i128 - 1) * ext;
        self.bound(
            first.min(last) + old.lb as i128,
            first.max(last) + old.ub as i128,
        );
        for e in 0..n {
            let base = disp + e as i128 * ext;
            for b in &old.blocks {
                let off = to_isize(base + b.off as i128, "datatype")?;
                self.push_block(Block { off, ..*b })?;
            }
        }
        Ok(())
    }

    /// Appends a whole strided block, joining the last one when it continues its pattern.
    fn push_block(&mut self, b: Block) -> Result<()> {
        self.work += 1;
        if self.work > MAX_WORK {
            return Err(bad(format!(
                "datatype too large to build: more than {MAX_WORK} blocks placed"
            )));
        }
        if b.count == 1 {
            return self.push_run(b.off, b.len);
        }
        self.fold_last();
        let bytes = b
            .len
            .checked_mul(b.count)
            .and_then(|n| n.checked_add(self.size))
            .ok_or_else(|| bad("datatype size overflows"))?;
        if let Some(last) = self.blocks.last_mut()
            && last.len == b.len
            && last.count > 1
            && last.stride == b.stride
            && last.last_off() + last.stride == b.off
        {
            last.count += b.count;
            self.size = bytes;
            return Ok(());
        }
        if self.blocks.len() >= MAX_BLOCKS {
            return Err(bad(format!(
                "datatype too irregular: more than {MAX_BLOCKS} separate blocks"
            )));
        }
        self.blocks.push(b);
        self.size = bytes;
        Ok(())
    }

    fn finish(mut self) -> Result<Datatype> {
        self.fold_last();
        let (mut tlb, mut tub) = (i128::MAX, i128::MIN);
        for b in &self.blocks {
            let (a, z) = (b.off as i128, b.last_off() as i128);
            tlb = tlb.min(a.min(z));
            tub = tub.max(a.max(z) + b.len as i128);
        }
        if self.blocks.is_empty() {
            (tlb, tub) = (0, 0);
        }
        let uniform = match self.blocks.first() {
            Some(f) if self.blocks.iter().all(|b| b.len == f.len) => Some(f.len),
            _ => None,
        };
        Ok(Datatype(Arc::new(Map {
            size: self.size,
            lb: to_isize(self.lb, "lower bound")?,
            ub: to_isize(self.ub, "upper bound")?,
            true_lb: to_isize(tlb, "lower bound")?,
            true_ub: to_isize(tub, "upper bound")?,
            blocks: self.blocks,
            uniform,
        })))
    }
}

impl Datatype {
    /// `n` contiguous bytes (extent `n`): the primitive every other type is built from.
    pub fn bytes(n: usize) -> Datatype {
        let mut b = Builder::new();
        b.bound(0, n as i128);
        b.push_run(0, n).expect("one run");
        b.finish().expect("one run")
    }

    /// One `T` (its `size_of` bytes, extent the same).
    pub fn of<T: Pod>() -> Datatype {
        Datatype::bytes(size_of::<T>())
    }

    /// `count` copies of `old` one after another (`MPI_Type_contiguous`).
    pub fn contiguous(count: usize, old: &Datatype) -> Result<Datatype> {
        check_copies(count, 1, "contiguous")?;
        let mut b = Builder::new();
        b.place(0, count, &old.0)?;
        b.finish()
    }

    /// `count` blocks of `blocklen` copies of `old`, block starts `stride` extents of `old`
    /// apart (`MPI_Type_vector`): a column of a row-major matrix.
    pub fn vector(
        count: usize,
        blocklen: usize,
        stride: isize,
        old: &Datatype,
    ) -> Result<Datatype> {
        let bytes = stride
            .checked_mul(old.extent())
            .ok_or_else(|| bad("vector: stride x extent overflows"))?;
        Datatype::hvector(count, blocklen, bytes, old)
    }

    /// As [`vector`](Self::vector) with the stride in bytes (`MPI_Type_create_hvector`).
    pub fn hvector(
        count: usize,
        blocklen: usize,
        stride_bytes: isize,
        old: &Datatype,
    ) -> Result<Datatype> {
        check_copies(count, blocklen, "hvector")?;
        let mut b = Builder::new();
        for i in 0..count {
            b.place(i as i128 * stride_bytes as i128, blocklen, &old.0)?;
        }
        b.finish()
    }

    /// Blocks of `blocklens[i]` copies of `old` at `displs[i]` extents of `old`
    /// (`MPI_Type_indexed`).
    pub fn indexed(blocklens: &[usize], displs: &[isize], old: &Datatype) -> Result<Datatype> {
        let ext = old.extent() as i128;
        Datatype::indexed_at(blocklens, displs, |d| d as i128 * ext, old, "indexed")
    }

    /// As [`indexed`](Self::indexed) with displacements in bytes (`MPI_Type_create_hindexed`).
    pub fn hindexed(
        blocklens: &[usize],
        byte_displs: &[isize],
        old: &Datatype,
    ) -> Result<Datatype> {
        Datatype::indexed_at(blocklens, byte_displs, |d| d as i128, old, "hindexed")
    }

    /// Blocks of `blocklen` copies of `old` at `displs[i]` extents (`MPI_Type_create_indexed_block`).
    pub fn indexed_block(blocklen: usize, displs: &[isize], old: &Datatype) -> Result<Datatype> {
        Datatype::indexed(&vec![blocklen; displs.len()], displs, old)
    }

    /// Blocks of `blocklen` copies of `old` at `byte_displs[i]` bytes
    /// (`MPI_Type_create_hindexed_block`).
    pub fn hindexed_block(
        blocklen: usize,
        byte_displs: &[isize],
        old: &Datatype,
    ) -> Result<Datatype> {
        Datatype::hindexed(&vec![blocklen; byte_displs.len()], byte_displs, old)
    }

    fn indexed_at(
        blocklens: &[usize],
        displs: &[isize],
        at: impl Fn(isize) -> i128,
        old: &Datatype,
        what: &str,
    ) -> Result<Datatype> {
        if blocklens.len() != displs.len() {
            return Err(bad(format!(
                "{what}: {} block lengths but {} displacements",
                blocklens.len(),
                displs.len()
            )));
        }
        check_copies(blocklens.iter().sum(), 1, what)?;
        let mut b = Builder::new();
        for (&n, &d) in blocklens.iter().zip(displs) {
            b.place(at(d), n, &old.0)?;
        }
        b.finish()
    }

    /// Blocks of `blocklens[i]` copies of `types[i]` at `byte_displs[i]` bytes
    /// (`MPI_Type_create_struct`). The extent spans the blocks exactly (MPI would round it up
    /// to the strictest alignment: use [`resized`](Self::resized) to match a Rust struct's size).
    pub fn structured(
        blocklens: &[usize],
        byte_displs: &[isize],
        types: &[Datatype],
    ) -> Result<Datatype> {
        if blocklens.len() != byte_displs.len() || blocklens.len() != types.len() {
            return Err(bad(format!(
                "structured: {} block lengths, {} displacements and {} types must agree",
                blocklens.len(),
                byte_displs.len(),
                types.len()
            )));
        }
        let mut b = Builder::new();
        for ((&n, &d), t) in blocklens.iter().zip(byte_displs).zip(types) {
            b.place(d as i128, n, &t.0)?;
        }
        b.finish()
    }

    /// The block `starts .. starts + subsizes` of an array of `sizes` elements of `old` stored in
    /// `order` (`MPI_Type_create_subarray`); the extent is the whole array's, so consecutive
    /// elements of this type are consecutive arrays.
    pub fn subarray(
        sizes: &[usize],
        subsizes: &[usize],
        starts: &[usize],
        order: Order,
        old: &Datatype,
    ) -> Result<Datatype> {
        let nd = sizes.len();
        if nd == 0 || subsizes.len() != nd || starts.len() != nd {
            return Err(bad(format!(
                "subarray: sizes, subsizes and starts need one entry per dimension (got {}, {}, {})",
                sizes.len(),
                subsizes.len(),
                starts.len()
            )));
        }
        for d in 0..nd {
            if starts[d]
                .checked_add(subsizes[d])
                .is_none_or(|e| e > sizes[d])
            {
                return Err(bad(format!(
                    "subarray: dimension {d}: start {} + subsize {} exceeds size {}",
                    starts[d], subsizes[d], sizes[d]
                )));
            }
        }
        // Dimensions from slowest to fastest varying.
        let dims: Vec<usize> = match order {
            Order::RowMajor => (0..nd).collect(),
            Order::ColumnMajor => (0..nd).rev().collect(),
        };
        let ext = old.extent() as i128;
        // Element stride of each dimension.
        let mut stride = vec![0i128; nd];
        let mut s = 1i128;
        for &d in dims.iter().rev() {
            stride[d] = s;
            s = s
                .checked_mul(sizes[d] as i128)
                .ok_or_else(|| bad("subarray: the array's size overflows"))?;
        }
        let total = s;
        let fast = *dims.last().expect("nd > 0");
        let mut b = Builder::new();
        b.bound(0, total * ext);
        if subsizes.iter().all(|&n| n > 0) {
            let mut idx = vec![0usize; nd];
            'rows: loop {
                let lin: i128 = (0..nd)
                    .map(|d| (starts[d] + idx[d]) as i128 * stride[d])
                    .sum();
                b.place(lin * ext, subsizes[fast], &old.0)?;
                // Next index over every dimension but the fastest.
                for &d in dims.iter().rev().skip(1) {
                    idx[d] += 1;
                    if idx[d] < subsizes[d] {
                        continue 'rows;
                    }
                    idx[d] = 0;
                }
                break;
            }
        }
        // `place` widened the bounds by the placed copies; the array's bounds win.
        (b.lb, b.ub) = (0, total * ext);
        b.finish()
    }

    /// The same layout with lower bound `lb` and extent `extent` (`MPI_Type_create_resized`):
    /// where the next element of a count starts.
    pub fn resized(&self, lb: isize, extent: isize) -> Result<Datatype> {
        let ub = lb
            .checked_add(extent)
            .ok_or_else(|| bad("resized: lb + extent overflows"))?;
        let m = &self.0;
        Ok(Datatype(Arc::new(Map {
            blocks: m.blocks.clone(),
            size: m.size,
            lb,
            ub,
            true_lb: m.true_lb,
            true_ub: m.true_ub,
            uniform: m.uniform,
        })))
    }

    /// A copy (`MPI_Type_dup`); datatypes are immutable, so it shares the layout.
    pub fn dup(&self) -> Datatype {
        self.clone()
    }

    /// Data bytes in one element (`MPI_Type_size`).
    pub fn size(&self) -> usize {
        self.0.size
    }

    /// Distance from one element to the next in a count (`MPI_Type_get_extent`).
    pub fn extent(&self) -> isize {
        self.0.ub - self.0.lb
    }

    /// Lower bound (`MPI_Type_get_extent`).
    pub fn lb(&self) -> isize {
        self.0.lb
    }

    /// Lowest byte the data occupies and the span to one past the highest
    /// (`MPI_Type_get_true_extent`).
    pub fn true_extent(&self) -> (isize, isize) {
        (self.0.true_lb, self.0.true_ub - self.0.true_lb)
    }

    /// Whether a count of elements is one run of bytes starting at the lower bound, so it can
    /// be sent straight from memory.
    pub fn is_contiguous(&self) -> bool {
        let m = &self.0;
        m.size == 0
            || (m.blocks.len() == 1
                && m.blocks[0].count == 1
                && m.blocks[0].off == m.lb
                && m.size as isize == m.ub - m.lb)
    }

    /// Bytes `count` elements take packed (`MPI_Pack_size`; rcomm packs without a header).
    pub fn packed_size(&self, count: usize) -> usize {
        self.0.size.saturating_mul(count)
    }

    /// Whole elements in `bytes` packed bytes (`MPI_Get_count`): `None` when `bytes` is not a
    /// whole number of elements (MPI_UNDEFINED).
    pub fn count_in(&self, bytes: usize) -> Option<usize> {
        match self.0.size {
            0 => (bytes == 0).then_some(0),
            s => bytes.is_multiple_of(s).then_some(bytes / s),
        }
    }

    /// The byte range `[lo, hi)` relative to the buffer start that `count` elements touch.
    pub fn span(&self, count: usize) -> (i128, i128) {
        let m = &self.0;
        if count == 0 || m.size == 0 {
            return (0, 0);
        }
        let last = (count as i128 - 1) * (m.ub - m.lb) as i128;
        (
            m.true_lb as i128 + last.min(0),
            m.true_ub as i128 + last.max(0),
        )
    }

    fn check_span(&self, count: usize, len: usize, what: &str) -> Result<()> {
        let (lo, hi) = self.span(count);
        if lo < 0 || hi > len as i128 {
            return Err(bad(format!(
                "{what}: {count} element(s) of this datatype touch bytes {lo}..{hi}, outside the \
                 {len}-byte buffer"
            )));
        }
        Ok(())
    }

    /// Packs `count` elements laid out from the start of `src` into `out` (MPI's canonical
    /// packed form); returns the bytes written. Errors when the layout reaches outside `src` or
    /// `out` is too small.
    pub fn pack(&self, src: &[u8], count: usize, out: &mut [u8]) -> Result<usize> {
        self.check_span(count, src.len(), "pack")?;
        // SAFETY: every byte the layout reads lies inside `src` (checked above).
        unsafe { self.pack_raw(src.as_ptr(), count, out) }
    }

    /// Packs `count` elements laid out from `base` into `out`.
    ///
    /// # Safety
    /// Every byte in [`span`](Self::span)`(count)` relative to `base` must be readable.
    pub unsafe fn pack_raw(&self, base: *const u8, count: usize, out: &mut [u8]) -> Result<usize> {
        let need = self.packed_size(count);
        if out.len() < need {
            return Err(bad(format!(
                "pack: {need} bytes needed, the output holds {}",
                out.len()
            )));
        }
        let m = &self.0;
        let ext = m.ub - m.lb;
        let dst = out.as_mut_ptr();
        let mut pos = 0usize;
        for i in 0..count {
            let elem = i as isize * ext;
            for b in &m.blocks {
                // SAFETY: the caller vouches for the source span; `pos + len <= need <= out.len()`.
                unsafe {
                    pos = copy_block(*b, m.uniform, base.offset(elem), dst, pos, true);
                }
            }
        }
        Ok(pos)
    }

    /// Unpacks `packed` into elements laid out from the start of `dst`; `packed` may hold fewer
    /// than `count` elements (a shorter message: the rest of `dst` is untouched), not more.
    /// Returns the bytes consumed.
    pub fn unpack(&self, packed: &[u8], dst: &mut [u8], count: usize) -> Result<usize> {
        self.check_span(count, dst.len(), "unpack")?;
        // SAFETY: every byte the layout writes lies inside `dst` (checked above).
        unsafe { self.unpack_raw(packed, dst.as_mut_ptr(), count) }
    }

    /// Unpacks `packed` into elements laid out from `base`.
    ///
    /// # Safety
    /// Every byte in [`span`](Self::span)`(count)` relative to `base` must be writable and not
    /// aliased by `packed`.
    pub unsafe fn unpack_raw(&self, packed: &[u8], base: *mut u8, count: usize) -> Result<usize> {
        let need = self.packed_size(count);
        if packed.len() > need {
            return Err(CommError::Truncated {
                buffer: need,
                message: packed.len(),
            });
        }
        let m = &self.0;
        let ext = m.ub - m.lb;
        let src = packed.as_ptr().cast_mut();
        let avail = packed.len();
        let mut pos = 0usize;
        'elems: for i in 0..count {
            let elem = i as isize * ext;
            for b in &m.blocks {
                let bytes = b.len * b.count;
                if pos + bytes <= avail {
                    // SAFETY: caller vouches for the destination span; `pos + bytes <= avail`.
                    unsafe {
                        pos = copy_block(*b, m.uniform, base.offset(elem), src, pos, false);
                    }
                    continue;
                }
                // A short message ends inside this block: copy what there is, run by run.
                for k in 0..b.count {
                    let n = b.len.min(avail - pos);
                    // SAFETY: as above, `n` bytes of this run, `pos + n <= avail`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            src.add(pos),
                            base.offset(elem + b.off + k as isize * b.stride),
                            n,
                        );
                    }
                    pos += n;
                    if pos == avail {
                        break 'elems;
                    }
                }
            }
        }
        Ok(pos)
    }
}

/// Copies one block between the layout at `mem` and the packed buffer at `packed + pos`
/// (`to_packed` chooses the direction); returns the new packed position.
///
/// # Safety
/// Every run of `b` relative to `mem` and the `b.len * b.count` packed bytes at `pos` must be
/// valid for the copy's direction.
#[inline]
unsafe fn copy_block(
    b: Block,
    uniform: Option<usize>,
    mem: *const u8,
    packed: *mut u8,
    mut pos: usize,
    to_packed: bool,
) -> usize {
    macro_rules! runs {
        ($n:expr) => {{
            let mut off = b.off;
            for _ in 0..b.count {
                // SAFETY: guaranteed by this function's contract.
                unsafe {
                    let m = mem.offset(off).cast_mut();
                    let p = packed.add(pos);
                    if to_packed {
                        std::ptr::copy_nonoverlapping(m, p, $n);
                    } else {
                        std::ptr::copy_nonoverlapping(p, m, $n);
                    }
                }
                pos += $n;
                off += b.stride;
            }
        }};
    }
    // Fixed sizes let the compiler turn each copy into a load and a store.
    match uniform {
        Some(4) => runs!(4),
        Some(8) => runs!(8),
        Some(16) => runs!(16),
        _ => runs!(b.len),
    }
    pos
}

/// Sends, receives and exchanges of derived datatypes: non-contiguous layouts are packed into a
/// buffer and sent as one message (MPI's canonical packed form, so the receiver may use any
/// type map with the same signature); contiguous ones go straight from memory.
impl Communicator {
    /// Sends `count` elements of `dt` laid out from the start of `buf` (`MPI_Send` with a
    /// derived datatype).
    pub fn send_dt<T: Pod>(
        &self,
        buf: &[T],
        count: usize,
        dt: &Datatype,
        dest: u32,
        tag: Tag,
    ) -> Result<()> {
        let src: &[u8] = bytemuck::cast_slice(buf);
        if let Some(bytes) = direct(dt, src, count)? {
            return self.send(bytes, dest, tag);
        }
        dt.check_span(count, src.len(), "send_dt")?;
        // SAFETY: the layout's span lies inside `src` (checked above).
        unsafe { self.send_dt_raw(src.as_ptr(), count, dt, dest, tag) }
    }

    /// [`send_dt`](Self::send_dt) of `count` elements laid out from `base` (MPI's buffer
    /// address: displacements may reach below it). Gathered straight into the peer's ring
    /// when it can be, else packed.
    ///
    /// # Safety
    /// Every byte in [`Datatype::span`]`(count)` relative to `base` is readable during the
    /// call.
    pub unsafe fn send_dt_raw(
        &self,
        base: *const u8,
        count: usize,
        dt: &Datatype,
        dest: u32,
        tag: Tag,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        if unsafe { self.send_dt_now(base, count, dt, dest, tag) }? {
            return Ok(());
        }
        with_scratch(|s| {
            let out = sized(s, dt.packed_size(count));
            // SAFETY: forwarded from the caller.
            let n = unsafe { dt.pack_raw(base, count, out) }?;
            self.send(&out[..n], dest, tag)
        })
    }

    /// The eager send of a derived layout gathered straight into the peer's ring (see
    /// [`Communicator::send_gather_now`]); `Ok(false)`: nothing sent, pack and send instead.
    ///
    /// # Safety
    /// The span of `count` elements of `dt` from `base` is readable.
    unsafe fn send_dt_now(
        &self,
        base: *const u8,
        count: usize,
        dt: &Datatype,
        dest: u32,
        tag: Tag,
    ) -> Result<bool> {
        self.send_gather_now(dest, tag, dt.packed_size(count), &mut |slot| {
            // SAFETY: forwarded from the caller; `slot` holds exactly the packed size, so the
            // pack cannot fail.
            let r = unsafe { dt.pack_raw(base, count, slot) };
            debug_assert_eq!(r.ok(), Some(slot.len()));
        })
    }

    /// Receives up to `count` elements of `dt` into `buf` (`MPI_Recv` with a derived datatype).
    /// A message longer than `count` elements is consumed and reported as
    /// [`CommError::Truncated`]; a shorter one fills the first elements (see
    /// [`Datatype::count_in`] on the status's bytes).
    pub fn recv_dt<T: Pod>(
        &self,
        buf: &mut [T],
        count: usize,
        dt: &Datatype,
        src: impl Into<Source>,
        tag: Tag,
    ) -> Result<Status> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        if let Some(range) = direct_range(dt, bytes.len(), count)? {
            return self.recv(&mut bytes[range], src, tag);
        }
        // Refused before anything is received: a bad layout must not consume a message.
        dt.check_span(count, bytes.len(), "recv_dt")?;
        // SAFETY: the layout's span lies inside `bytes` (checked above), which this call
        // borrows exclusively.
        unsafe { self.recv_dt_raw(bytes.as_mut_ptr(), count, dt, src, tag) }
    }

    /// [`recv_dt`](Self::recv_dt) into `count` elements laid out from `base` (MPI's buffer
    /// address). A message at the head of the ring is unpacked straight out of it; otherwise
    /// it is received packed and unpacked.
    ///
    /// # Safety
    /// Every byte in [`Datatype::span`]`(count)` relative to `base` is writable during the
    /// call and touched by nothing else meanwhile.
    pub unsafe fn recv_dt_raw(
        &self,
        base: *mut u8,
        count: usize,
        dt: &Datatype,
        src: impl Into<Source>,
        tag: Tag,
    ) -> Result<Status> {
        let src = src.into();
        let room = dt.packed_size(count);
        // SAFETY: forwarded from the caller; the receive hands over at most `room` bytes.
        let mut put = unsafe { scatter_to(dt, base, count) };
        if let Some(st) = self.recv_direct_into(src, tag, room, &mut put)? {
            return Ok(st);
        }
        with_scratch(|s| {
            let st = self.recv(sized(s, room), src, tag)?;
            // SAFETY: forwarded from the caller.
            unsafe { dt.unpack_raw(&s[..st.bytes], base, count) }?;
            Ok(st)
        })
    }

    /// [`sendrecv_dt`](Self::sendrecv_dt) of layouts from base addresses (MPI's buffer
    /// addresses); the send is packed (or gathered into the peer's ring) before anything is
    /// received, so the layouts may even overlap (the received data wins).
    ///
    /// # Safety
    /// As [`send_dt_raw`](Self::send_dt_raw) for the send layout and
    /// [`recv_dt_raw`](Self::recv_dt_raw) for the receive layout.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn sendrecv_dt_raw(
        &self,
        sbase: *const u8,
        scount: usize,
        sdt: &Datatype,
        dest: u32,
        stag: Tag,
        rbase: *mut u8,
        rcount: usize,
        rdt: &Datatype,
        src: impl Into<Source>,
        rtag: Tag,
    ) -> Result<Status> {
        let src = src.into();
        // A bad receive tag or source is refused before anything is sent.
        self.source(src)?;
        // SAFETY: forwarded from the caller.
        if rtag.receivable() && unsafe { self.send_dt_now(sbase, scount, sdt, dest, stag) }? {
            // SAFETY: forwarded from the caller.
            return unsafe { self.recv_dt_raw(rbase, rcount, rdt, src, rtag) };
        }
        with_scratch(|out| {
            let n = sdt.packed_size(scount);
            // SAFETY: forwarded from the caller.
            unsafe { sdt.pack_raw(sbase, scount, sized(out, n)) }?;
            if rdt.is_contiguous() {
                // Straight into memory: the send no longer reads the caller's buffer.
                let (lo, hi) = rdt.span(rcount);
                // SAFETY: forwarded from the caller: the span is writable and ours alone.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(rbase.offset(lo as isize), (hi - lo) as usize)
                };
                return self.sendrecv(&out[..n], dest, stag, dst, src, rtag);
            }
            with_scratch(|inb| {
                let room = sized(inb, rdt.packed_size(rcount));
                let st = self.sendrecv(&out[..n], dest, stag, room, src, rtag)?;
                // SAFETY: forwarded from the caller.
                unsafe { rdt.unpack_raw(&inb[..st.bytes], rbase, rcount) }?;
                Ok(st)
            })
        })
    }

    /// Sends `scount` elements of `sdt` to `dest` and receives up to `rcount` elements of `rdt`
    /// from `src` (`MPI_Sendrecv` with derived datatypes): the halo exchange of a stencil code.
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv_dt<T: Pod, U: Pod>(
        &self,
        sbuf: &[T],
        scount: usize,
        sdt: &Datatype,
        dest: u32,
        stag: Tag,
        rbuf: &mut [U],
        rcount: usize,
        rdt: &Datatype,
        src: impl Into<Source>,
        rtag: Tag,
    ) -> Result<Status> {
        let sbytes: &[u8] = bytemuck::cast_slice(sbuf);
        let rbytes: &mut [u8] = bytemuck::cast_slice_mut(rbuf);
        sdt.check_span(scount, sbytes.len(), "sendrecv_dt (send)")?;
        rdt.check_span(rcount, rbytes.len(), "sendrecv_dt")?;
        if let (Some(s), Some(r)) = (
            direct_range(sdt, sbytes.len(), scount)?,
            direct_range(rdt, rbytes.len(), rcount)?,
        ) {
            return self.sendrecv(&sbytes[s], dest, stag, &mut rbytes[r], src, rtag);
        }
        // SAFETY: each span lies inside its buffer (checked above), two distinct borrows.
        unsafe {
            self.sendrecv_dt_raw(
                sbytes.as_ptr(),
                scount,
                sdt,
                dest,
                stag,
                rbytes.as_mut_ptr(),
                rcount,
                rdt,
                src,
                rtag,
            )
        }
    }

    /// Starts sending `count` elements of `dt` from `buf` (`MPI_Isend` with a derived
    /// datatype): the data is packed now, so `buf` may be reused at once; the request owns the
    /// packed bytes. An eager message to a shared-memory peer whose ring has room is gathered
    /// straight into the ring instead, and the request is complete at once (its `wait` hands
    /// back an empty buffer).
    pub fn isend_dt<T: Pod>(
        &self,
        buf: &[T],
        count: usize,
        dt: &Datatype,
        dest: u32,
        tag: Tag,
    ) -> Result<Request<u8>> {
        let src: &[u8] = bytemuck::cast_slice(buf);
        if !dt.is_contiguous() {
            dt.check_span(count, src.len(), "isend_dt")?;
            // SAFETY: the layout's span lies inside `src` (checked above).
            if unsafe { self.send_dt_now(src.as_ptr(), count, dt, dest, tag) }? {
                return Ok(self.sent_request(tag, dt.packed_size(count)));
            }
        }
        let mut packed = Vec::new();
        pack_into(dt, src, count, &mut packed)?;
        self.isend(packed, dest, tag)
    }

    /// Starts receiving up to `count` elements of `dt` into `buf` (`MPI_Irecv` with a derived
    /// datatype). The message lands in a packed buffer the request owns and is unpacked into
    /// `buf` by [`DtRecv::wait`]; `buf` stays borrowed until then. Dropping the request
    /// cancels an unmatched receive and leaves `buf` untouched.
    pub fn irecv_dt<'a, T: Pod>(
        &self,
        buf: &'a mut [T],
        count: usize,
        dt: &Datatype,
        src: impl Into<Source>,
        tag: Tag,
    ) -> Result<DtRecv<'a>> {
        let dst: &mut [u8] = bytemuck::cast_slice_mut(buf);
        dt.check_span(count, dst.len(), "irecv_dt")?;
        let (src, room) = (src.into(), dt.packed_size(count));
        if !dt.is_contiguous() {
            // A message already at the head of the ring is scattered into `buf` now.
            // SAFETY: as in `recv_dt`: the span lies inside `dst` (checked above),
            // which this call borrows exclusively; at most `room` bytes are handed over.
            let mut put = unsafe { scatter_to(dt, dst.as_mut_ptr(), count) };
            let now = self.recv_now_into(src, tag, room, &mut put)?;
            if let Some(st) = now {
                return Ok(DtRecv {
                    req: Err(st),
                    dst,
                    dt: dt.clone(),
                    count,
                });
            }
        }
        let req = self.irecv(vec![0u8; room], src, tag)?;
        Ok(DtRecv {
            req: Ok(req),
            dst,
            dt: dt.clone(),
            count,
        })
    }

    /// A `sendrecv_dt` whose send and receive layouts lie in one buffer — the halo exchange of
    /// a stencil code, sending a boundary column and receiving the ghost column beside it.
    /// `send` and `recv` are (offset in elements of `T`, count, datatype). The send side is
    /// read before anything is received, so the layouts may even overlap (MPI calls that
    /// erroneous; here the received data wins).
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv_dt_within<T: Pod>(
        &self,
        buf: &mut [T],
        send: (usize, usize, &Datatype),
        dest: u32,
        stag: Tag,
        recv: (usize, usize, &Datatype),
        src: impl Into<Source>,
        rtag: Tag,
    ) -> Result<Status> {
        let elem = size_of::<T>();
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let (soff, scount, sdt) = send;
        let (roff, rcount, rdt) = recv;
        let (soff, roff) = (soff.saturating_mul(elem), roff.saturating_mul(elem));
        if soff > bytes.len() || roff > bytes.len() {
            return Err(bad(format!(
                "sendrecv_dt_within: offset beyond the {}-byte buffer",
                bytes.len()
            )));
        }
        sdt.check_span(scount, bytes.len() - soff, "sendrecv_dt_within (send)")?;
        rdt.check_span(rcount, bytes.len() - roff, "sendrecv_dt_within (recv)")?;
        let (slo, shi) = sdt.span(scount);
        let (rlo, rhi) = rdt.span(rcount);
        let (s0, s1) = (soff as i128 + slo, soff as i128 + shi);
        let (r0, r1) = (roff as i128 + rlo, roff as i128 + rhi);
        if sdt.is_contiguous() && rdt.is_contiguous() && (s1 <= r0 || r1 <= s0) {
            // Two disjoint runs: send and receive straight from memory.
            let (s0, s1, r0, r1) = (s0 as usize, s1 as usize, r0 as usize, r1 as usize);
            let src = src.into();
            return if s1 <= r0 {
                let (a, b) = bytes.split_at_mut(r0);
                self.sendrecv(&a[s0..s1], dest, stag, &mut b[..r1 - r0], src, rtag)
            } else {
                let (a, b) = bytes.split_at_mut(s0);
                self.sendrecv(&b[..s1 - s0], dest, stag, &mut a[r0..r1], src, rtag)
            };
        }
        let base = bytes.as_mut_ptr();
        // SAFETY: both spans lie inside `bytes` from their offsets (checked above), which this
        // call borrows exclusively; the send is packed or gathered before anything is received.
        unsafe {
            self.sendrecv_dt_raw(
                base.add(soff),
                scount,
                sdt,
                dest,
                stag,
                base.add(roff),
                rcount,
                rdt,
                src,
                rtag,
            )
        }
    }

    /// Packs `count` elements of `dt` from `buf` into a new buffer (`MPI_Pack`).
    pub fn pack<T: Pod>(&self, buf: &[T], count: usize, dt: &Datatype) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        pack_into(dt, bytemuck::cast_slice(buf), count, &mut out)?;
        Ok(out)
    }

    /// Unpacks `packed` into up to `count` elements of `dt` in `buf` (`MPI_Unpack`); returns
    /// the bytes consumed.
    pub fn unpack<T: Pod>(
        &self,
        packed: &[u8],
        buf: &mut [T],
        count: usize,
        dt: &Datatype,
    ) -> Result<usize> {
        dt.unpack(packed, bytemuck::cast_slice_mut(buf), count)
    }
}

/// A receive of a derived datatype in flight ([`Communicator::irecv_dt`]).
pub struct DtRecv<'a> {
    /// The receive of the packed message, or the status of one already unpacked into `dst`.
    req: std::result::Result<Request<u8>, Status>,
    dst: &'a mut [u8],
    dt: Datatype,
    count: usize,
}

impl DtRecv<'_> {
    /// Waits for the message and unpacks it into the receive buffer.
    pub fn wait(self) -> Result<Status> {
        let req = match self.req {
            Ok(req) => req,
            Err(st) => return Ok(st),
        };
        let (packed, st) = req.wait()?;
        self.dt.unpack(&packed[..st.bytes], self.dst, self.count)?;
        Ok(st)
    }

    /// Whether the message has arrived (then [`wait`](Self::wait) returns at once).
    pub fn test(&mut self) -> bool {
        self.req.as_mut().is_ok_and(|r| r.test()) || self.req.is_err()
    }
}

/// The scatter of a packed payload straight from a transport into `count` elements of `dt`
/// laid out from `base` (a partial payload fills the first elements).
///
/// # Safety
/// The span of `count` elements of `dt` from `base` is writable and touched by nothing else
/// while the closure lives, and no payload handed to it exceeds `dt.packed_size(count)`
/// bytes (so the unpack cannot fail).
unsafe fn scatter_to(dt: &Datatype, base: *mut u8, count: usize) -> impl FnMut(&[u8]) + '_ {
    move |packed| {
        // SAFETY: this function's contract.
        let r = unsafe { dt.unpack_raw(packed, base, count) };
        debug_assert_eq!(r.ok(), Some(packed.len()));
    }
}

/// The bytes to send straight from memory when `count` elements of `dt` are one run.
fn direct<'a>(dt: &Datatype, buf: &'a [u8], count: usize) -> Result<Option<&'a [u8]>> {
    Ok(direct_range(dt, buf.len(), count)?.map(|r| &buf[r]))
}

fn direct_range(dt: &Datatype, len: usize, count: usize) -> Result<Option<std::ops::Range<usize>>> {
    if !dt.is_contiguous() {
        return Ok(None);
    }
    dt.check_span(count, len, "datatype buffer")?;
    let (lo, hi) = dt.span(count);
    Ok(Some(lo as usize..hi as usize))
}

fn pack_into(dt: &Datatype, src: &[u8], count: usize, out: &mut Vec<u8>) -> Result<()> {
    out.clear();
    out.resize(dt.packed_size(count), 0);
    dt.pack(src, count, out).map(drop)
}

/// The first `n` bytes of a scratch buffer, growing it if needed. Bytes a previous use left
/// there stay: every caller overwrites what it reads (a pack writes all `n`; a receive is read
/// only up to the bytes it got), and zeroing them would be one more pass over the message.
fn sized(v: &mut Vec<u8>, n: usize) -> &mut [u8] {
    if v.len() < n {
        v.resize(n, 0);
    }
    &mut v[..n]
}

thread_local! {
    /// Pack buffers kept between calls, so a halo exchange in a loop allocates once.
    static SCRATCH: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` with a scratch buffer taken from this thread's pool (nested calls get their own).
fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    let mut buf = SCRATCH.with(|s| s.borrow_mut().pop()).unwrap_or_default();
    let r = f(&mut buf);
    // Keep moderate buffers only: one huge exchange should not pin its memory for ever.
    if buf.capacity() <= 64 << 20 {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < 4 {
                s.push(buf);
            }
        });
    }
    r
}

#[cfg(test)]
mod tests;
