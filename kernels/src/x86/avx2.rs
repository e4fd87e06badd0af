//! AVX2 (+ F16C) path, 256-bit vectors. **Unsafe module**: see [`super`].

use std::arch::x86_64::*;

use half::{bf16, f16};

use crate::portable::{QNAN32, QNAN64};

// ---- Loads and stores: unaligned, pointer-taking, hence `unsafe`. ----
// SAFETY (all of them): the caller guarantees the vector's bytes at `p` are in bounds;
// `loadu`/`storeu` have no alignment requirement.

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn ld_i<T>(p: *const T) -> __m256i {
    // SAFETY: see above.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn st_i<T>(p: *mut T, v: __m256i) {
    // SAFETY: see above.
    unsafe { _mm256_storeu_si256(p.cast(), v) }
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn ld_ps(p: *const f32) -> __m256 {
    // SAFETY: see above.
    unsafe { _mm256_loadu_ps(p) }
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn st_ps(p: *mut f32, v: __m256) {
    // SAFETY: see above.
    unsafe { _mm256_storeu_ps(p, v) }
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn ld_pd(p: *const f64) -> __m256d {
    // SAFETY: see above.
    unsafe { _mm256_loadu_pd(p) }
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn st_pd(p: *mut f64, v: __m256d) {
    // SAFETY: see above.
    unsafe { _mm256_storeu_pd(p, v) }
}

// Streaming (non-temporal) stores. SAFETY (all of them): as the stores above, and `p` is
// aligned to the vector's size (the kernels only stream from a 64-byte-aligned start); the
// kernel fences them (`sfence`) before returning.

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn nt_i<T>(p: *mut T, v: __m256i) {
    // SAFETY: see above.
    unsafe { _mm256_stream_si256(p.cast(), v) }
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn nt_ps(p: *mut f32, v: __m256) {
    // SAFETY: see above.
    unsafe { _mm256_stream_ps(p, v) }
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn nt_pd(p: *mut f64, v: __m256d) {
    // SAFETY: see above.
    unsafe { _mm256_stream_pd(p, v) }
}

/// bf16 as pairs of f32 vectors (even and odd elements), as in the AVX-512 path: no shuffles.
type Bf16x16 = [__m256; 2];

/// 16 bf16 → (8 even, 8 odd) f32, exact.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn ld_bf16(p: *const bf16) -> Bf16x16 {
    // SAFETY: see above (32 bytes).
    let v = unsafe { _mm256_loadu_si256(p.cast()) };
    [
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v)),
        _mm256_castsi256_ps(_mm256_and_si256(
            v,
            _mm256_set1_epi32(0xffff_0000u32 as i32),
        )),
    ]
}

/// f32 bits + rounding bias: the high half is then the bf16 rounded to nearest even, as
/// [`crate::portable::f32_to_bf16`] (`v` holds no non-canonical NaN).
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn bf16_round(v: __m256) -> __m256i {
    let bits = _mm256_castps_si256(v);
    let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(1));
    _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb)
}

/// (even, odd) canonical-NaN f32 → bf16, each rounded once, in memory order.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn bf16_pack(v: Bf16x16) -> __m256i {
    let even = _mm256_srli_epi32::<16>(bf16_round(v[0]));
    // Odd 16-bit words (the high halves) from the odd results, even words from the even ones.
    _mm256_blend_epi16::<0xaa>(even, bf16_round(v[1]))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn st_bf16(p: *mut bf16, v: Bf16x16) {
    // SAFETY: see above.
    unsafe { _mm256_storeu_si256(p.cast(), bf16_pack(v)) }
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn nt_bf16(p: *mut bf16, v: Bf16x16) {
    // SAFETY: see the streaming stores above.
    unsafe { _mm256_stream_si256(p.cast(), bf16_pack(v)) }
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn add_bf16(a: Bf16x16, b: Bf16x16) -> Bf16x16 {
    [add_ps(a[0], b[0]), add_ps(a[1], b[1])]
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn mul_bf16(a: Bf16x16, b: Bf16x16) -> Bf16x16 {
    [mul_ps(a[0], b[0]), mul_ps(a[1], b[1])]
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn min_bf16(a: Bf16x16, b: Bf16x16) -> Bf16x16 {
    [min_ps(a[0], b[0]), min_ps(a[1], b[1])]
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn max_bf16(a: Bf16x16, b: Bf16x16) -> Bf16x16 {
    [max_ps(a[0], b[0]), max_ps(a[1], b[1])]
}

/// 8 f16 → 8 f32 (F16C, exact).
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn ld_f16(p: *const f16) -> __m256 {
    // SAFETY: see above (16 bytes).
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
}

/// 8 f32 → 8 f16 (F16C), rounding to nearest even from the immediate, not MXCSR.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn st_f16(p: *mut f16, v: __m256) {
    let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
    // SAFETY: see above (16 bytes).
    unsafe { _mm_storeu_si128(p.cast(), h) }
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn nt_f16(p: *mut f16, v: __m256) {
    // SAFETY: see the streaming stores above.
    unsafe { _mm_stream_si128(p.cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v)) }
}

// ---- Float ops: every NaN result becomes the canonical NaN, as in `portable`. ----

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn qnan_ps() -> __m256 {
    _mm256_castsi256_ps(_mm256_set1_epi32(QNAN32 as i32))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn qnan_pd() -> __m256d {
    _mm256_castsi256_pd(_mm256_set1_epi64x(QNAN64 as i64))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn canon_ps(r: __m256) -> __m256 {
    _mm256_blendv_ps(r, qnan_ps(), _mm256_cmp_ps::<_CMP_UNORD_Q>(r, r))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn canon_pd(r: __m256d) -> __m256d {
    _mm256_blendv_pd(r, qnan_pd(), _mm256_cmp_pd::<_CMP_UNORD_Q>(r, r))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn add_ps(a: __m256, b: __m256) -> __m256 {
    canon_ps(_mm256_add_ps(a, b))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn mul_ps(a: __m256, b: __m256) -> __m256 {
    canon_ps(_mm256_mul_ps(a, b))
}

/// IEEE minimum. `vminps` returns its second operand for NaNs and for ±0 pairs; taking it both
/// ways round and OR-ing gives -0 for a ±0 pair (the operands are otherwise equal or the same
/// value both ways), then NaN operands are replaced by the canonical NaN.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn min_ps(a: __m256, b: __m256) -> __m256 {
    let r = _mm256_or_ps(_mm256_min_ps(a, b), _mm256_min_ps(b, a));
    _mm256_blendv_ps(r, qnan_ps(), _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b))
}

/// IEEE maximum: as [`min_ps`], with AND so a ±0 pair gives +0.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn max_ps(a: __m256, b: __m256) -> __m256 {
    let r = _mm256_and_ps(_mm256_max_ps(a, b), _mm256_max_ps(b, a));
    _mm256_blendv_ps(r, qnan_ps(), _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn add_pd(a: __m256d, b: __m256d) -> __m256d {
    canon_pd(_mm256_add_pd(a, b))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn mul_pd(a: __m256d, b: __m256d) -> __m256d {
    canon_pd(_mm256_mul_pd(a, b))
}

/// As [`min_ps`].
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn min_pd(a: __m256d, b: __m256d) -> __m256d {
    let r = _mm256_or_pd(_mm256_min_pd(a, b), _mm256_min_pd(b, a));
    _mm256_blendv_pd(r, qnan_pd(), _mm256_cmp_pd::<_CMP_UNORD_Q>(a, b))
}

/// As [`max_ps`].
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn max_pd(a: __m256d, b: __m256d) -> __m256d {
    let r = _mm256_and_pd(_mm256_max_pd(a, b), _mm256_max_pd(b, a));
    _mm256_blendv_pd(r, qnan_pd(), _mm256_cmp_pd::<_CMP_UNORD_Q>(a, b))
}

// ---- Integer ops AVX2 lacks as one instruction. ----

/// 8-bit wrapping multiply (no `vpmullb`): the low byte of a 16-bit product depends only on
/// the low bytes, so multiply even bytes in place and odd bytes shifted down, then merge.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn mul_8(a: __m256i, b: __m256i) -> __m256i {
    let even = _mm256_mullo_epi16(a, b);
    let odd = _mm256_mullo_epi16(_mm256_srli_epi16::<8>(a), _mm256_srli_epi16::<8>(b));
    _mm256_or_si256(
        _mm256_and_si256(even, _mm256_set1_epi16(0xff)),
        _mm256_slli_epi16::<8>(odd),
    )
}

/// 64-bit wrapping multiply (no `vpmullq`): lo·lo + ((hi·lo + lo·hi) << 32) mod 2⁶⁴.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn mul_64(a: __m256i, b: __m256i) -> __m256i {
    let lo = _mm256_mul_epu32(a, b);
    let c1 = _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), b);
    let c2 = _mm256_mul_epu32(a, _mm256_srli_epi64::<32>(b));
    _mm256_add_epi64(lo, _mm256_slli_epi64::<32>(_mm256_add_epi64(c1, c2)))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn min_i64(a: __m256i, b: __m256i) -> __m256i {
    _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn max_i64(a: __m256i, b: __m256i) -> __m256i {
    _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b))
}

/// Unsigned compare via signed compare of both operands with the sign bit flipped.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn gt_u64(a: __m256i, b: __m256i) -> __m256i {
    let s = _mm256_set1_epi64x(i64::MIN);
    _mm256_cmpgt_epi64(_mm256_xor_si256(a, s), _mm256_xor_si256(b, s))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn min_u64(a: __m256i, b: __m256i) -> __m256i {
    _mm256_blendv_epi8(a, b, gt_u64(a, b))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
fn max_u64(a: __m256i, b: __m256i) -> __m256i {
    _mm256_blendv_epi8(b, a, gt_u64(a, b))
}

// ---- The kernels. ----

int_kernels!(
    "avx2,f16c",
    i8k,
    i8,
    32,
    ld_i,
    st_i,
    nt_i,
    add = _mm256_add_epi8,
    mul = mul_8,
    min = _mm256_min_epi8,
    max = _mm256_max_epi8,
    and = _mm256_and_si256,
    or = _mm256_or_si256,
    xor = _mm256_xor_si256
);
int_kernels!(
    "avx2,f16c",
    u8k,
    u8,
    32,
    ld_i,
    st_i,
    nt_i,
    add = _mm256_add_epi8,
    mul = mul_8,
    min = _mm256_min_epu8,
    max = _mm256_max_epu8,
    and = _mm256_and_si256,
    or = _mm256_or_si256,
    xor = _mm256_xor_si256
);
int_kernels!(
    "avx2,f16c",
    i16k,
    i16,
    16,
    ld_i,
    st_i,
    nt_i,
    add = _mm256_add_epi16,
    mul = _mm256_mullo_epi16,
    min = _mm256_min_epi16,
    max = _mm256_max_epi16,
    and = _mm256_and_si256,
    or = _mm256_or_si256,
    xor = _mm256_xor_si256
);
int_kernels!(
    "avx2,f16c",
    u16k,
    u16,
    16,
    ld_i,
    st_i,
    nt_i,
    add = _mm256_add_epi16,
    mul = _mm256_mullo_epi16,
    min = _mm256_min_epu16,
    max = _mm256_max_epu16,
    and = _mm256_and_si256,
    or = _mm256_or_si256,
    xor = _mm256_xor_si256
);
int_kernels!(
    "avx2,f16c",
    i32k,
    i32,
    8,
    ld_i,
    st_i,
    nt_i,
    add = _mm256_add_epi32,
    mul = _mm256_mullo_epi32,
    min = _mm256_min_epi32,
    max = _mm256_max_epi32,
    and = _mm256_and_si256,
    or = _mm256_or_si256,
    xor = _mm256_xor_si256
);
int_kernels!(
    "avx2,f16c",
    u32k,
    u32,
    8,
    ld_i,
    st_i,
    nt_i,
    add = _mm256_add_epi32,
    mul = _mm256_mullo_epi32,
    min = _mm256_min_epu32,
    max = _mm256_max_epu32,
    and = _mm256_and_si256,
    or = _mm256_or_si256,
    xor = _mm256_xor_si256
);
int_kernels!(
    "avx2,f16c",
    i64k,
    i64,
    4,
    ld_i,
    st_i,
    nt_i,
    add = _mm256_add_epi64,
    mul = mul_64,
    min = min_i64,
    max = max_i64,
    and = _mm256_and_si256,
    or = _mm256_or_si256,
    xor = _mm256_xor_si256
);
int_kernels!(
    "avx2,f16c",
    u64k,
    u64,
    4,
    ld_i,
    st_i,
    nt_i,
    add = _mm256_add_epi64,
    mul = mul_64,
    min = min_u64,
    max = max_u64,
    and = _mm256_and_si256,
    or = _mm256_or_si256,
    xor = _mm256_xor_si256
);

float_kernels!(
    "avx2,f16c",
    f32k,
    f32,
    8,
    ld_ps,
    st_ps,
    nt_ps,
    add = add_ps,
    mul = mul_ps,
    min = min_ps,
    max = max_ps
);
float_kernels!(
    "avx2,f16c",
    f64k,
    f64,
    4,
    ld_pd,
    st_pd,
    nt_pd,
    add = add_pd,
    mul = mul_pd,
    min = min_pd,
    max = max_pd
);
float_kernels!(
    "avx2,f16c",
    bf16k,
    bf16,
    16,
    ld_bf16,
    st_bf16,
    nt_bf16,
    add = add_bf16,
    mul = mul_bf16,
    min = min_bf16,
    max = max_bf16
);
float_kernels!(
    "avx2,f16c",
    f16k,
    f16,
    8,
    ld_f16,
    st_f16,
    nt_f16,
    add = add_ps,
    mul = mul_ps,
    min = min_ps,
    max = max_ps
);

reduce_by_dtype!();
