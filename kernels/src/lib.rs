//! Element-wise reduction kernels for rcomm's collectives: `dst = dst ⊕ src` and
//! `out = a ⊕ b` over buffers of one [`Dtype`], with one [`Op`].
//!
//! - Dtypes: `i8`…`i64`, `u8`…`u64`, `f16`, `bf16`, `f32`, `f64`. `f16` and `bf16` are
//!   computed in `f32` and rounded once per call (round to nearest, ties to even):
//!   `dst[i] = round(f32(dst[i]) ⊕ f32(src[i]))`.
//! - Ops and their exact semantics (wrapping integers, IEEE `minimum`/`maximum`, canonical NaN,
//!   `Avg` = sum then [`finalize_avg`]): see [`Op`].
//! - Instruction-set paths ([`Isa`]): AVX-512, AVX2 and portable, chosen at run time
//!   ([`Isa::best`]) or forced ([`set_isa`], or the `_with` entry points). **All paths give
//!   bitwise identical results** for a fixed (op, dtype): every op is element-wise (no
//!   reassociation across elements), NaN results are canonicalised, and narrow floats round
//!   the same way everywhere.
//! - Device reductions ([`cuda`]): the same ops and dtypes in CUDA C (`kernels/cuda/reduce.cu`),
//!   compiled by NVRTC at run time to a CUBIN for the GPU's own architecture, which loads on
//!   every driver from CUDA 12.0 (R525); PTX, which needs a driver as new as the NVRTC that
//!   wrote it, only for a GPU newer than NVRTC ([`cuda::choose`]). A driver's refusal is worded
//!   by [`cuda::image::load_error`] (driver version, image, the oldest driver it needs, remedy).
//! - Bad input (length mismatch, a length that is not a whole number of elements, an op not
//!   defined for the dtype, an unavailable ISA) is a [`KernelError`], never a panic.
//!
//! ```
//! use rcomm_kernels::{reduce_into_typed, finalize_avg_typed, Op};
//! let mut acc = [1.0f32, -2.0, 3.5];
//! reduce_into_typed(Op::Avg, &mut acc, &[3.0, 2.0, 0.5])?; // contributions of 2 ranks
//! finalize_avg_typed(&mut acc, 2)?;
//! assert_eq!(acc, [2.0, 0.0, 2.0]);
//! # Ok::<(), rcomm_kernels::KernelError>(())
//! ```
//!
//! Unsafe code lives only in the `portable` module's raw loops and the `x86` module (SIMD
//! intrinsics), plus the calls into them below, each with a `SAFETY` comment.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod cuda;
mod dtype;
mod isa;
mod op;
mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use dtype::{Dtype, Element};
pub use isa::{Isa, isa, set_isa};
pub use op::Op;

use std::sync::atomic::{AtomicUsize, Ordering};

/// Why a kernel call was refused. Lengths are in bytes, also for the typed entry points.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// The destination and a source differ in length.
    #[error("buffer lengths differ: destination {dst} bytes, source {src} bytes")]
    LengthMismatch {
        /// Destination length in bytes.
        dst: usize,
        /// Length of the first source that differs, in bytes.
        src: usize,
    },
    /// A buffer is not a whole number of elements.
    #[error(
        "buffer of {len} bytes is not a whole number of {dtype} elements ({} bytes each)",
        dtype.size()
    )]
    NotMultiple {
        /// Buffer length in bytes.
        len: usize,
        /// The dtype asked for.
        dtype: Dtype,
    },
    /// The op is not defined for the dtype (bitwise ops on floats).
    #[error("op {op} is not defined for {dtype} (bitwise ops are for integer dtypes only)")]
    OpNotDefined {
        /// The op asked for.
        op: Op,
        /// The dtype asked for.
        dtype: Dtype,
    },
    /// The CPU (or build target) lacks the instruction set.
    #[error("kernel ISA {isa} is not available on this CPU (it needs {needs})")]
    IsaUnavailable {
        /// The path asked for.
        isa: Isa,
        /// What it needs.
        needs: &'static str,
    },
    /// A name did not parse as an [`Isa`], [`Op`] or [`Dtype`].
    #[error("unknown {what} `{name}` (valid: {valid})")]
    UnknownName {
        /// What was being parsed.
        what: &'static str,
        /// The text given.
        name: String,
        /// The accepted names.
        valid: &'static str,
    },
    /// [`finalize_avg`] with a count of zero.
    #[error("average over zero contributions")]
    ZeroCount,
}

/// Number of elements of `dtype` in `len` bytes, or [`KernelError::NotMultiple`].
fn elements(dtype: Dtype, len: usize) -> Result<usize, KernelError> {
    if len.is_multiple_of(dtype.size()) {
        Ok(len / dtype.size())
    } else {
        Err(KernelError::NotMultiple { len, dtype })
    }
}

/// Default of [`stream_threshold`]: 8 MiB.
pub const DEFAULT_STREAM_THRESHOLD: usize = 8 << 20;

static STREAM_THRESHOLD: AtomicUsize = AtomicUsize::new(DEFAULT_STREAM_THRESHOLD);

/// Output size in bytes from which out-of-place reductions ([`reduce3`]) on the SIMD paths
/// write with non-temporal (streaming) stores.
///
/// A normal store first reads the destination line into the cache, so an out-of-place
/// reduction larger than the cache moves four bytes per three it counts; streaming stores skip
/// that read (memcpy does the same at these sizes), but leave the result out of the cache,
/// which only pays when it would not have stayed there anyway. In-place reductions
/// ([`reduce_into`]) have already read the destination and never stream. Results are identical
/// either way. The default suits a last-level cache of tens of MiB shared by a few ranks.
pub fn stream_threshold() -> usize {
    STREAM_THRESHOLD.load(Ordering::Relaxed)
}

/// Sets [`stream_threshold`] for this process (`usize::MAX` turns streaming off), e.g. from the
/// topology's last-level cache size.
pub fn set_stream_threshold(bytes: usize) {
    STREAM_THRESHOLD.store(bytes, Ordering::Relaxed);
}

/// Runs the kernel of `isa`.
///
/// # Safety
/// `isa` is supported; `op` is defined for `dtype`; `a`, `b` valid for `n` elements of
/// `dtype`, `out` for `n` element writes; `out` may equal `a` or `b` but not partially overlap.
unsafe fn raw(isa: Isa, op: Op, dtype: Dtype, out: *mut u8, a: *const u8, b: *const u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    let stream = out.cast_const() != a
        && out.cast_const() != b
        && n.saturating_mul(dtype.size()) >= stream_threshold();
    // SAFETY: forwarded caller contract.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => x86::avx512::reduce(op, dtype, out, a, b, n, stream),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => x86::avx2::reduce(op, dtype, out, a, b, n, stream),
            // Elsewhere the SIMD paths are never supported, so never reach here.
            _ => portable::reduce(op, dtype, out, a, b, n),
        }
    }
}

/// `dst = dst ⊕ src`, element-wise over byte buffers holding `dtype` elements (any alignment),
/// on the process-wide path [`isa()`].
pub fn reduce_into(op: Op, dtype: Dtype, dst: &mut [u8], src: &[u8]) -> Result<(), KernelError> {
    reduce_into_with(isa(), op, dtype, dst, src)
}

/// [`reduce_into`] on an explicit path (errors if the CPU lacks it). For tests and benches,
/// which must not race on the process-wide setting.
pub fn reduce_into_with(
    isa: Isa,
    op: Op,
    dtype: Dtype,
    dst: &mut [u8],
    src: &[u8],
) -> Result<(), KernelError> {
    isa.check()?;
    op.check(dtype)?;
    if dst.len() != src.len() {
        return Err(KernelError::LengthMismatch {
            dst: dst.len(),
            src: src.len(),
        });
    }
    let n = elements(dtype, dst.len())?;
    let out = dst.as_mut_ptr();
    // SAFETY: isa and op checked above; both buffers hold exactly n elements; `out` is used as
    // destination and first operand (allowed: same pointer); `src` is a shared borrow, so it
    // cannot overlap the exclusively borrowed `dst`.
    unsafe { raw(isa, op, dtype, out, out.cast_const(), src.as_ptr(), n) };
    Ok(())
}

/// `out = a ⊕ b`, element-wise over byte buffers holding `dtype` elements (any alignment), on
/// the process-wide path [`isa()`]. `a` and `b` may be the same buffer.
pub fn reduce3(
    op: Op,
    dtype: Dtype,
    out: &mut [u8],
    a: &[u8],
    b: &[u8],
) -> Result<(), KernelError> {
    reduce3_with(isa(), op, dtype, out, a, b)
}

/// [`reduce3`] on an explicit path (errors if the CPU lacks it).
pub fn reduce3_with(
    isa: Isa,
    op: Op,
    dtype: Dtype,
    out: &mut [u8],
    a: &[u8],
    b: &[u8],
) -> Result<(), KernelError> {
    isa.check()?;
    op.check(dtype)?;
    for src in [a, b] {
        if src.len() != out.len() {
            return Err(KernelError::LengthMismatch {
                dst: out.len(),
                src: src.len(),
            });
        }
    }
    let n = elements(dtype, out.len())?;
    // SAFETY: isa and op checked above; all three buffers hold exactly n elements; `out` is an
    // exclusive borrow, so it overlaps neither `a` nor `b` (which may overlap each other: they
    // are only read).
    unsafe { raw(isa, op, dtype, out.as_mut_ptr(), a.as_ptr(), b.as_ptr(), n) };
    Ok(())
}

/// Typed [`reduce_into`]: `dst = dst ⊕ src` for slices of an [`Element`] type.
pub fn reduce_into_typed<T: Element>(op: Op, dst: &mut [T], src: &[T]) -> Result<(), KernelError> {
    reduce_into(
        op,
        T::DTYPE,
        bytemuck::cast_slice_mut(dst),
        bytemuck::cast_slice(src),
    )
}

/// Typed [`reduce3`]: `out = a ⊕ b` for slices of an [`Element`] type.
pub fn reduce3_typed<T: Element>(
    op: Op,
    out: &mut [T],
    a: &[T],
    b: &[T],
) -> Result<(), KernelError> {
    reduce3(
        op,
        T::DTYPE,
        bytemuck::cast_slice_mut(out),
        bytemuck::cast_slice(a),
        bytemuck::cast_slice(b),
    )
}

/// Finishes an [`Op::Avg`] reduction: divides every element by `count`, the number of
/// contributions summed into `buf`.
///
/// - Floats divide (`f32`/`f64` in their own precision; `f16`/`bf16` in `f32`, rounded once).
///   `count` is converted to the float type, exact up to 2²⁴ (`f32`) and 2⁵³ (`f64`).
/// - Integers divide with truncation toward zero (Rust's `/`): `avg(-3, -4) = -7 / 2 = -3`.
///   The sum before it wraps on overflow (see [`Op`]); use a wider dtype if that can happen.
///
/// One implementation for every [`Isa`] (it runs once per collective, not once per hop), so
/// results do not depend on the path. Errors: [`KernelError::ZeroCount`], `NotMultiple`.
pub fn finalize_avg(dtype: Dtype, buf: &mut [u8], count: usize) -> Result<(), KernelError> {
    if count == 0 {
        return Err(KernelError::ZeroCount);
    }
    let n = elements(dtype, buf.len())?;
    // SAFETY: `buf` holds exactly n elements of `dtype`, exclusively borrowed; count > 0.
    unsafe { portable::finalize_avg(dtype, buf.as_mut_ptr(), n, count) };
    Ok(())
}

/// Typed [`finalize_avg`].
pub fn finalize_avg_typed<T: Element>(buf: &mut [T], count: usize) -> Result<(), KernelError> {
    finalize_avg(T::DTYPE, bytemuck::cast_slice_mut(buf), count)
}
