//! x86-64 SIMD paths (AVX2, AVX-512). **Unsafe module**: SIMD intrinsics on raw pointers.
//!
//! Every kernel here is an `unsafe fn` with `#[target_feature]`; callers must have checked the
//! CPU ([`crate::Isa::check`]) and the buffer contract of [`crate::portable::apply`]. Kernels
//! use unaligned loads and stores, so byte slices at any offset are fine. Elements that do not
//! fill a vector go through the scalar definitions in [`crate::portable`], which is also the
//! reference the vector bodies must match bit for bit.

/// The vector loops of a kernel: four vectors per iteration (independent work for the
/// out-of-order core), then single vectors. Advances `$i` while a whole vector fits.
macro_rules! vector_loops {
    ($i:ident, $n:ident, $out:ident, $a:ident, $b:ident, $l:ident, $load:path, $store:path,
     $vop:path) => {
        while $n - $i >= 4 * $l {
            // SAFETY: elements i .. i + 4L are within the caller's bounds (n - i >= 4L); all
            // loads of a vector precede its store, so `out == a` or `out == b` is fine. Store
            // alignment: see the caller.
            unsafe {
                let x0 = $load($a.add($i));
                let y0 = $load($b.add($i));
                let x1 = $load($a.add($i + $l));
                let y1 = $load($b.add($i + $l));
                let x2 = $load($a.add($i + 2 * $l));
                let y2 = $load($b.add($i + 2 * $l));
                let x3 = $load($a.add($i + 3 * $l));
                let y3 = $load($b.add($i + 3 * $l));
                $store($out.add($i), $vop(x0, y0));
                $store($out.add($i + $l), $vop(x1, y1));
                $store($out.add($i + 2 * $l), $vop(x2, y2));
                $store($out.add($i + 3 * $l), $vop(x3, y3));
            }
            $i += 4 * $l;
        }
        while $n - $i >= $l {
            // SAFETY: as above, for elements i .. i + L.
            unsafe { $store($out.add($i), $vop($load($a.add($i)), $load($b.add($i)))) };
            $i += $l;
        }
    };
}

/// Defines one kernel `$name(out, a, b, n, stream)`: `out = a ⊕ b`.
///
/// A scalar head first brings `out` to a 64-byte boundary (when it is element-aligned at all),
/// because stores split across cache lines cost bandwidth on large buffers, and streaming
/// stores need aligned addresses. With `stream`, whole vectors are written with non-temporal
/// stores (`$stream`), which skip reading the destination lines into the cache first: a
/// quarter of the memory traffic of an out-of-place reduction too big for the cache. A scalar
/// tail finishes.
macro_rules! kernel {
    ($feat:literal, $name:ident, $t:ty, $lanes:expr, $load:path, $store:path, $stream:path,
     $vop:path, $sop:expr) => {
        /// # Safety
        /// CPU supports the features; buffer contract of `portable::apply` for `n` elements.
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn $name(
            out: *mut $t,
            a: *const $t,
            b: *const $t,
            n: usize,
            stream: bool,
        ) {
            const L: usize = $lanes;
            const SIZE: usize = ::core::mem::size_of::<$t>();
            let mut i = 0usize;
            let mis = out as usize % 64;
            if mis != 0 && mis.is_multiple_of(SIZE) {
                let head = ((64 - mis) / SIZE).min(n);
                // SAFETY: head <= n elements, within the caller's bounds.
                unsafe { crate::portable::apply(out, a, b, head, $sop) };
                i = head;
            }
            // Every vector store is L * SIZE bytes (a divisor of 64), so from a 64-byte
            // boundary each one is aligned to its own size, as the streaming stores require.
            let streaming = stream && (out as usize + i * SIZE).is_multiple_of(64);
            if streaming {
                vector_loops!(i, n, out, a, b, L, $load, $stream, $vop);
            } else {
                vector_loops!(i, n, out, a, b, L, $load, $store, $vop);
            }
            // SAFETY: the n - i elements from i are within the caller's bounds.
            unsafe { crate::portable::apply(out.add(i), a.add(i), b.add(i), n - i, $sop) };
            if streaming {
                // Non-temporal stores are weakly ordered: fence them before returning, so a
                // later release (a flag another rank polls) cannot overtake the data. Rust's
                // memory model also requires this fence before the memory is accessed again.
                // SAFETY: SSE is part of x86_64 and the fence has no other precondition.
                // Rust 1.89 (the declared minimum) still declares the intrinsic unsafe; later
                // releases declare it safe, hence the allow.
                #[allow(unused_unsafe)]
                unsafe {
                    ::core::arch::x86_64::_mm_sfence()
                };
            }
        }
    };
}

/// The seven integer kernels of one type, in a module `$m` with a `dispatch` by op.
macro_rules! int_kernels {
    ($feat:literal, $m:ident, $t:ty, $lanes:expr, $load:path, $store:path, $stream:path,
     add = $add:path, mul = $mul:path, min = $min:path, max = $max:path,
     and = $and:path, or = $or:path, xor = $xor:path) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            use crate::Op;
            use crate::portable::{Bits, Scalar};

            kernel!(
                $feat,
                sum,
                $t,
                $lanes,
                $load,
                $store,
                $stream,
                $add,
                <$t as Scalar>::sum
            );
            kernel!(
                $feat,
                prod,
                $t,
                $lanes,
                $load,
                $store,
                $stream,
                $mul,
                <$t as Scalar>::prod
            );
            kernel!(
                $feat,
                min,
                $t,
                $lanes,
                $load,
                $store,
                $stream,
                $min,
                <$t as Scalar>::min
            );
            kernel!(
                $feat,
                max,
                $t,
                $lanes,
                $load,
                $store,
                $stream,
                $max,
                <$t as Scalar>::max
            );
            kernel!(
                $feat,
                band,
                $t,
                $lanes,
                $load,
                $store,
                $stream,
                $and,
                <$t as Bits>::band
            );
            kernel!(
                $feat,
                bor,
                $t,
                $lanes,
                $load,
                $store,
                $stream,
                $or,
                <$t as Bits>::bor
            );
            kernel!(
                $feat,
                bxor,
                $t,
                $lanes,
                $load,
                $store,
                $stream,
                $xor,
                <$t as Bits>::bxor
            );

            /// # Safety
            /// As the kernels, for `n` elements of this type.
            pub(super) unsafe fn dispatch(
                op: Op,
                out: *mut u8,
                a: *const u8,
                b: *const u8,
                n: usize,
                s: bool,
            ) {
                let (out, a, b) = (out.cast::<$t>(), a.cast::<$t>(), b.cast::<$t>());
                // SAFETY: forwarded caller contract.
                unsafe {
                    match op {
                        Op::Sum | Op::Avg => sum(out, a, b, n, s),
                        Op::Prod => prod(out, a, b, n, s),
                        Op::Min => min(out, a, b, n, s),
                        Op::Max => max(out, a, b, n, s),
                        Op::BAnd => band(out, a, b, n, s),
                        Op::BOr => bor(out, a, b, n, s),
                        Op::BXor => bxor(out, a, b, n, s),
                    }
                }
            }
        }
    };
}

/// The four float kernels of one type, in a module `$m` with a `dispatch` by op. For f16 and
/// bf16, `$load` widens to f32 and `$store`/`$stream` round once.
macro_rules! float_kernels {
    ($feat:literal, $m:ident, $t:ty, $lanes:expr, $load:path, $store:path, $stream:path,
     add = $add:path, mul = $mul:path, min = $min:path, max = $max:path) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            use crate::Op;
            use crate::portable::Scalar;

            kernel!(
                $feat,
                sum,
                $t,
                $lanes,
                $load,
                $store,
                $stream,
                $add,
                <$t as Scalar>::sum
            );
            kernel!(
                $feat,
                prod,
                $t,
                $lanes,
                $load,
                $store,
                $stream,
                $mul,
                <$t as Scalar>::prod
            );
            kernel!(
                $feat,
                min,
                $t,
                $lanes,
                $load,
                $store,
                $stream,
                $min,
                <$t as Scalar>::min
            );
            kernel!(
                $feat,
                max,
                $t,
                $lanes,
                $load,
                $store,
                $stream,
                $max,
                <$t as Scalar>::max
            );

            /// # Safety
            /// As the kernels, for `n` elements of this type.
            pub(super) unsafe fn dispatch(
                op: Op,
                out: *mut u8,
                a: *const u8,
                b: *const u8,
                n: usize,
                s: bool,
            ) {
                let (out, a, b) = (out.cast::<$t>(), a.cast::<$t>(), b.cast::<$t>());
                // SAFETY: forwarded caller contract.
                unsafe {
                    match op {
                        Op::Sum | Op::Avg => sum(out, a, b, n, s),
                        Op::Prod => prod(out, a, b, n, s),
                        Op::Min => min(out, a, b, n, s),
                        Op::Max => max(out, a, b, n, s),
                        // Rejected by `Op::check` before any kernel runs.
                        Op::BAnd | Op::BOr | Op::BXor => {}
                    }
                }
            }
        }
    };
}

/// `reduce(op, dtype, out, a, b, n, stream)` over the per-type modules an ISA module defines.
macro_rules! reduce_by_dtype {
    () => {
        /// `out = a ⊕ b` over `n` elements of `dtype`; `stream` asks for non-temporal stores.
        ///
        /// # Safety
        /// The CPU supports this path; buffer contract of `portable::apply`; `op` is defined
        /// for `dtype`.
        pub(crate) unsafe fn reduce(
            op: crate::Op,
            dtype: crate::Dtype,
            out: *mut u8,
            a: *const u8,
            b: *const u8,
            n: usize,
            stream: bool,
        ) {
            use crate::Dtype;
            let s = stream;
            // SAFETY: forwarded caller contract.
            unsafe {
                match dtype {
                    Dtype::I8 => i8k::dispatch(op, out, a, b, n, s),
                    Dtype::I16 => i16k::dispatch(op, out, a, b, n, s),
                    Dtype::I32 => i32k::dispatch(op, out, a, b, n, s),
                    Dtype::I64 => i64k::dispatch(op, out, a, b, n, s),
                    Dtype::U8 => u8k::dispatch(op, out, a, b, n, s),
                    Dtype::U16 => u16k::dispatch(op, out, a, b, n, s),
                    Dtype::U32 => u32k::dispatch(op, out, a, b, n, s),
                    Dtype::U64 => u64k::dispatch(op, out, a, b, n, s),
                    Dtype::F16 => f16k::dispatch(op, out, a, b, n, s),
                    Dtype::Bf16 => bf16k::dispatch(op, out, a, b, n, s),
                    Dtype::F32 => f32k::dispatch(op, out, a, b, n, s),
                    Dtype::F64 => f64k::dispatch(op, out, a, b, n, s),
                }
            }
        }
    };
}

// Declared after the macros so their textual scope covers the ISA modules.
pub(crate) mod avx2;
pub(crate) mod avx512;
