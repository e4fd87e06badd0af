//! Portable path: plain element loops, and the scalar definition of every op.
//!
//! The scalar functions here are the semantics: the SIMD paths use them for the elements that
//! do not fill a vector (head and tail), and must agree with them bit for bit everywhere else.
//! The loops are written so the compiler can auto-vectorise them for the build target.

use half::{bf16, f16};

use crate::{Dtype, Op};

/// The canonical quiet NaN of `f32` (positive, top mantissa bit only). Spelled as bits because
/// `f32::NAN`'s bit pattern is not guaranteed.
pub(crate) const QNAN32: u32 = 0x7fc0_0000;
/// The canonical quiet NaN of `f64`.
pub(crate) const QNAN64: u64 = 0x7ff8_0000_0000_0000;

/// Element-wise scalar semantics of the ops every dtype has.
pub(crate) trait Scalar: Copy {
    fn sum(a: Self, b: Self) -> Self;
    fn prod(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
    /// `self / count` as [`crate::finalize_avg`] defines it; `count > 0`.
    fn div_count(self, count: usize) -> Self;
}

/// The bitwise ops, integers only.
pub(crate) trait Bits: Scalar {
    fn band(a: Self, b: Self) -> Self;
    fn bor(a: Self, b: Self) -> Self;
    fn bxor(a: Self, b: Self) -> Self;
}

macro_rules! int_scalar {
    ($($t:ty: $signed:tt),* $(,)?) => {$(
        impl Scalar for $t {
            #[inline(always)]
            fn sum(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
            #[inline(always)]
            fn prod(a: Self, b: Self) -> Self {
                a.wrapping_mul(b)
            }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self {
                if b < a { b } else { a }
            }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self {
                if b > a { b } else { a }
            }
            #[inline(always)]
            fn div_count(self, count: usize) -> Self {
                int_scalar!(@div $signed, $t, self, count)
            }
        }
        impl Bits for $t {
            #[inline(always)]
            fn band(a: Self, b: Self) -> Self {
                a & b
            }
            #[inline(always)]
            fn bor(a: Self, b: Self) -> Self {
                a | b
            }
            #[inline(always)]
            fn bxor(a: Self, b: Self) -> Self {
                a ^ b
            }
        }
    )*};
    // Rust's integer `/` truncates toward zero, which is the documented rule. A count too big
    // for the type still has an exact answer (0, or -1 for MIN / |MIN|): compute it in i128,
    // which holds every value and every count; the quotient's magnitude is at most |self|.
    (@div signed, $t:ty, $x:expr, $n:expr) => {
        match <$t>::try_from($n) {
            Ok(d) => $x / d,
            Err(_) => ($x as i128 / $n as i128) as $t,
        }
    };
    (@div unsigned, $t:ty, $x:expr, $n:expr) => {
        match <$t>::try_from($n) {
            Ok(d) => $x / d,
            Err(_) => 0,
        }
    };
}

int_scalar!(
    i8: signed, i16: signed, i32: signed, i64: signed,
    u8: unsigned, u16: unsigned, u32: unsigned, u64: unsigned,
);

/// Any NaN becomes the canonical one (hardware and LLVM pick NaN payloads differently).
#[inline(always)]
pub(crate) fn canon32(x: f32) -> f32 {
    if x.is_nan() {
        f32::from_bits(QNAN32)
    } else {
        x
    }
}

#[inline(always)]
fn canon64(x: f64) -> f64 {
    if x.is_nan() {
        f64::from_bits(QNAN64)
    } else {
        x
    }
}

// IEEE 754-2019 minimum/maximum. For equal operands the bits are equal except for ±0, where
// OR of the bits picks -0 (minimum) and AND picks +0 (maximum); the SIMD paths use the same
// trick, so the formulations match exactly.
macro_rules! ieee_min_max {
    ($min:ident, $max:ident, $t:ty, $qnan:expr) => {
        #[inline(always)]
        pub(crate) fn $min(a: $t, b: $t) -> $t {
            if a.is_nan() || b.is_nan() {
                <$t>::from_bits($qnan)
            } else if a < b {
                a
            } else if b < a {
                b
            } else {
                <$t>::from_bits(a.to_bits() | b.to_bits())
            }
        }
        #[inline(always)]
        pub(crate) fn $max(a: $t, b: $t) -> $t {
            if a.is_nan() || b.is_nan() {
                <$t>::from_bits($qnan)
            } else if a > b {
                a
            } else if b > a {
                b
            } else {
                <$t>::from_bits(a.to_bits() & b.to_bits())
            }
        }
    };
}

ieee_min_max!(min32, max32, f32, QNAN32);
ieee_min_max!(min64, max64, f64, QNAN64);

impl Scalar for f32 {
    #[inline(always)]
    fn sum(a: Self, b: Self) -> Self {
        canon32(a + b)
    }
    #[inline(always)]
    fn prod(a: Self, b: Self) -> Self {
        canon32(a * b)
    }
    #[inline(always)]
    fn min(a: Self, b: Self) -> Self {
        min32(a, b)
    }
    #[inline(always)]
    fn max(a: Self, b: Self) -> Self {
        max32(a, b)
    }
    #[inline(always)]
    fn div_count(self, count: usize) -> Self {
        canon32(self / count as f32)
    }
}

impl Scalar for f64 {
    #[inline(always)]
    fn sum(a: Self, b: Self) -> Self {
        canon64(a + b)
    }
    #[inline(always)]
    fn prod(a: Self, b: Self) -> Self {
        canon64(a * b)
    }
    #[inline(always)]
    fn min(a: Self, b: Self) -> Self {
        min64(a, b)
    }
    #[inline(always)]
    fn max(a: Self, b: Self) -> Self {
        max64(a, b)
    }
    #[inline(always)]
    fn div_count(self, count: usize) -> Self {
        canon64(self / count as f64)
    }
}

/// bf16 → f32 is exact: bf16 is the top half of an f32.
#[inline(always)]
pub(crate) fn bf16_to_f32(x: bf16) -> f32 {
    f32::from_bits(u32::from(x.to_bits()) << 16)
}

/// f32 → bf16, round to nearest, ties to even, on the bits (subnormals kept, overflow to ±inf).
/// `x` must not be a non-canonical NaN (the add could carry a NaN into the sign bit); every
/// caller canonicalises first. The SIMD paths do the same integer steps, not the AVX512-BF16
/// conversion instructions, which flush subnormals to zero.
#[inline(always)]
pub(crate) fn f32_to_bf16(x: f32) -> bf16 {
    let b = x.to_bits();
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1));
    bf16::from_bits((r >> 16) as u16)
}

/// bf16 and f16 compute in f32 and round once; a canonical f32 NaN rounds to the canonical
/// narrow NaN (0x7fc0, 0x7e00).
macro_rules! narrow_scalar {
    ($t:ty, $to32:path, $from32:path) => {
        impl Scalar for $t {
            #[inline(always)]
            fn sum(a: Self, b: Self) -> Self {
                $from32(canon32($to32(a) + $to32(b)))
            }
            #[inline(always)]
            fn prod(a: Self, b: Self) -> Self {
                $from32(canon32($to32(a) * $to32(b)))
            }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self {
                $from32(min32($to32(a), $to32(b)))
            }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self {
                $from32(max32($to32(a), $to32(b)))
            }
            #[inline(always)]
            fn div_count(self, count: usize) -> Self {
                $from32(canon32($to32(self) / count as f32))
            }
        }
    };
}

narrow_scalar!(bf16, bf16_to_f32, f32_to_bf16);
narrow_scalar!(f16, f16::to_f32, f16::from_f32);

/// `out[i] = f(a[i], b[i])` for `i < n`, unaligned accesses.
///
/// # Safety
/// `a` and `b` valid for `n` reads of `T`, `out` for `n` writes; `out` may equal `a` or `b`
/// (each element is read before it is written) but must not partially overlap them.
#[inline(always)]
pub(crate) unsafe fn apply<T: Copy>(
    out: *mut T,
    a: *const T,
    b: *const T,
    n: usize,
    f: impl Fn(T, T) -> T,
) {
    // The compiler vectorises these loops only after a run-time check that the buffers do not
    // overlap, which `out == a` (the in-place `reduce_into`) fails; so the in-place case gets
    // its own loop over one destination and one other source.
    // SAFETY (all three calls): forwarded caller contract.
    unsafe {
        if out.cast_const() == a {
            apply_in_place(out, b, n, f)
        } else if out.cast_const() == b {
            apply_in_place(out, a, n, |y, x| f(x, y))
        } else {
            for i in 0..n {
                let x = a.add(i).read_unaligned();
                let y = b.add(i).read_unaligned();
                out.add(i).write_unaligned(f(x, y));
            }
        }
    }
}

/// `inout[i] = f(inout[i], src[i])` for `i < n`.
///
/// # Safety
/// `inout` valid for `n` reads and writes of `T`, `src` for `n` reads; no partial overlap.
#[inline(always)]
unsafe fn apply_in_place<T: Copy>(inout: *mut T, src: *const T, n: usize, f: impl Fn(T, T) -> T) {
    for i in 0..n {
        // SAFETY: i < n, within the caller's bounds; unaligned access is allowed.
        unsafe {
            let p = inout.add(i);
            p.write_unaligned(f(p.read_unaligned(), src.add(i).read_unaligned()));
        }
    }
}

/// # Safety
/// As [`apply`].
#[inline(always)]
unsafe fn int<T: Bits>(op: Op, out: *mut T, a: *const T, b: *const T, n: usize) {
    // SAFETY: forwarded caller contract.
    unsafe {
        match op {
            Op::Sum | Op::Avg => apply(out, a, b, n, T::sum),
            Op::Prod => apply(out, a, b, n, T::prod),
            Op::Min => apply(out, a, b, n, T::min),
            Op::Max => apply(out, a, b, n, T::max),
            Op::BAnd => apply(out, a, b, n, T::band),
            Op::BOr => apply(out, a, b, n, T::bor),
            Op::BXor => apply(out, a, b, n, T::bxor),
        }
    }
}

/// # Safety
/// As [`apply`].
#[inline(always)]
unsafe fn float<T: Scalar>(op: Op, out: *mut T, a: *const T, b: *const T, n: usize) {
    // SAFETY: forwarded caller contract.
    unsafe {
        match op {
            Op::Sum | Op::Avg => apply(out, a, b, n, T::sum),
            Op::Prod => apply(out, a, b, n, T::prod),
            Op::Min => apply(out, a, b, n, T::min),
            Op::Max => apply(out, a, b, n, T::max),
            // Rejected by `Op::check` before any kernel runs.
            Op::BAnd | Op::BOr | Op::BXor => {}
        }
    }
}

/// `out = a ⊕ b` over `n` elements of `dtype`.
///
/// # Safety
/// As [`apply`], for `n` elements of `dtype`; `op` is defined for `dtype`.
pub(crate) unsafe fn reduce(
    op: Op,
    dtype: Dtype,
    out: *mut u8,
    a: *const u8,
    b: *const u8,
    n: usize,
) {
    // SAFETY: forwarded caller contract; the casts only reinterpret as the dtype's type.
    unsafe {
        match dtype {
            Dtype::I8 => int::<i8>(op, out.cast(), a.cast(), b.cast(), n),
            Dtype::I16 => int::<i16>(op, out.cast(), a.cast(), b.cast(), n),
            Dtype::I32 => int::<i32>(op, out.cast(), a.cast(), b.cast(), n),
            Dtype::I64 => int::<i64>(op, out.cast(), a.cast(), b.cast(), n),
            Dtype::U8 => int::<u8>(op, out.cast(), a.cast(), b.cast(), n),
            Dtype::U16 => int::<u16>(op, out.cast(), a.cast(), b.cast(), n),
            Dtype::U32 => int::<u32>(op, out.cast(), a.cast(), b.cast(), n),
            Dtype::U64 => int::<u64>(op, out.cast(), a.cast(), b.cast(), n),
            Dtype::F16 => float::<f16>(op, out.cast(), a.cast(), b.cast(), n),
            Dtype::Bf16 => float::<bf16>(op, out.cast(), a.cast(), b.cast(), n),
            Dtype::F32 => float::<f32>(op, out.cast(), a.cast(), b.cast(), n),
            Dtype::F64 => float::<f64>(op, out.cast(), a.cast(), b.cast(), n),
        }
    }
}

/// # Safety
/// `p` valid for `n` unaligned reads and writes of `T`; `count > 0`.
unsafe fn div_all<T: Scalar>(p: *mut T, n: usize, count: usize) {
    for i in 0..n {
        // SAFETY: i < n, within the caller's bounds.
        unsafe {
            let x = p.add(i).read_unaligned();
            p.add(i).write_unaligned(x.div_count(count));
        }
    }
}

/// Divides `n` elements of `dtype` at `p` by `count` (see [`crate::finalize_avg`]). One
/// implementation for every ISA: it runs once per collective, and one implementation cannot
/// disagree with itself.
///
/// # Safety
/// As [`div_all`].
pub(crate) unsafe fn finalize_avg(dtype: Dtype, p: *mut u8, n: usize, count: usize) {
    // SAFETY: forwarded caller contract.
    unsafe {
        match dtype {
            Dtype::I8 => div_all::<i8>(p.cast(), n, count),
            Dtype::I16 => div_all::<i16>(p.cast(), n, count),
            Dtype::I32 => div_all::<i32>(p.cast(), n, count),
            Dtype::I64 => div_all::<i64>(p.cast(), n, count),
            Dtype::U8 => div_all::<u8>(p.cast(), n, count),
            Dtype::U16 => div_all::<u16>(p.cast(), n, count),
            Dtype::U32 => div_all::<u32>(p.cast(), n, count),
            Dtype::U64 => div_all::<u64>(p.cast(), n, count),
            Dtype::F16 => div_all::<f16>(p.cast(), n, count),
            Dtype::Bf16 => div_all::<bf16>(p.cast(), n, count),
            Dtype::F32 => div_all::<f32>(p.cast(), n, count),
            Dtype::F64 => div_all::<f64>(p.cast(), n, count),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_matches_half() {
        // Every bf16 rounding boundary class: exact, below/at/above half, ties to even and odd,
        // subnormals, overflow to infinity.
        for bits in [
            0x3f80_0000u32,
            0x3f80_7fff,
            0x3f80_8000,
            0x3f81_8000,
            0x3f80_8001,
            0x0000_8000,
            0x0001_8000,
            0x007f_ffff,
            0x7f7f_ffff,
            0xff7f_8000,
            0x8000_0001,
            0x7f80_0000,
            QNAN32,
        ] {
            let x = f32::from_bits(bits);
            assert_eq!(
                f32_to_bf16(x).to_bits(),
                bf16::from_f32(x).to_bits(),
                "{bits:#x}"
            );
        }
    }

    #[test]
    fn integer_average_truncates_toward_zero() {
        assert_eq!((-7i32).div_count(2), -3);
        assert_eq!(7i32.div_count(2), 3);
        assert_eq!(i8::MIN.div_count(128), -1);
        assert_eq!(i8::MIN.div_count(129), 0);
        assert_eq!(255u8.div_count(256), 0);
        #[cfg(target_pointer_width = "64")]
        assert_eq!(i64::MIN.div_count(1usize << 63), -1);
    }
}
