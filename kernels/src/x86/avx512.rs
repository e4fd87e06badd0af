//! AVX-512 (F + BW) path, 512-bit vectors. **Unsafe module**: see [`super`].
//!
//! bf16 does not use the AVX512-BF16 conversions (`vcvtneps2bf16`): they treat subnormal
//! inputs as zero and flush subnormal results, which would break bit-exactness with the other
//! paths; the integer rounding below costs a few instructions on a memory-bound loop. f16 uses
//! the AVX-512F `vcvtph2ps`/`vcvtps2ph` (exact widening, round-to-nearest-even narrowing);
//! AVX512-FP16 arithmetic would round in f16, not f32, so it is not used either.

use std::arch::x86_64::*;

use half::{bf16, f16};

use crate::portable::{QNAN32, QNAN64};

// ---- Loads and stores: unaligned, pointer-taking, hence `unsafe`. ----
// SAFETY (all of them): the caller guarantees the vector's bytes at `p` are in bounds;
// `loadu`/`storeu` have no alignment requirement.

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn ld_i<T>(p: *const T) -> __m512i {
    // SAFETY: see above.
    unsafe { _mm512_loadu_si512(p.cast()) }
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn st_i<T>(p: *mut T, v: __m512i) {
    // SAFETY: see above.
    unsafe { _mm512_storeu_si512(p.cast(), v) }
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn ld_ps(p: *const f32) -> __m512 {
    // SAFETY: see above.
    unsafe { _mm512_loadu_ps(p) }
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn st_ps(p: *mut f32, v: __m512) {
    // SAFETY: see above.
    unsafe { _mm512_storeu_ps(p, v) }
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn ld_pd(p: *const f64) -> __m512d {
    // SAFETY: see above.
    unsafe { _mm512_loadu_pd(p) }
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn st_pd(p: *mut f64, v: __m512d) {
    // SAFETY: see above.
    unsafe { _mm512_storeu_pd(p, v) }
}

// Streaming (non-temporal) stores. SAFETY (all of them): as the stores above, and `p` is
// aligned to the vector's size (the kernels only stream from a 64-byte-aligned start); the
// kernel fences them (`sfence`) before returning.

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn nt_i<T>(p: *mut T, v: __m512i) {
    // SAFETY: see above.
    unsafe { _mm512_stream_si512(p.cast(), v) }
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn nt_ps(p: *mut f32, v: __m512) {
    // SAFETY: see above.
    unsafe { _mm512_stream_ps(p, v) }
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn nt_pd(p: *mut f64, v: __m512d) {
    // SAFETY: see above.
    unsafe { _mm512_stream_pd(p, v) }
}

/// bf16 is handled as pairs of f32 vectors: 32 bf16 loaded as 16 32-bit lanes give the even
/// elements by a left shift and the odd ones by masking off the low half, with no shuffles.
/// Element order does not matter to an element-wise op; [`st_bf16`] puts each result back in
/// its own half of the lane. (Widening with `vpmovzxwd` and narrowing with `vpmovdw` to memory
/// measured about a quarter slower on Zen 4.)
type Bf16x32 = [__m512; 2];

/// 32 bf16 → (16 even, 16 odd) f32, exact.
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn ld_bf16(p: *const bf16) -> Bf16x32 {
    // SAFETY: see above (64 bytes).
    let v = unsafe { _mm512_loadu_si512(p.cast()) };
    [
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v)),
        _mm512_castsi512_ps(_mm512_and_si512(
            v,
            _mm512_set1_epi32(0xffff_0000u32 as i32),
        )),
    ]
}

/// f32 bits + rounding bias: the high half is then the bf16 rounded to nearest even, as
/// [`crate::portable::f32_to_bf16`] (`v` holds no non-canonical NaN).
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn bf16_round(v: __m512) -> __m512i {
    let bits = _mm512_castps_si512(v);
    let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(bits), _mm512_set1_epi32(1));
    _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb)
}

/// (even, odd) canonical-NaN f32 → bf16, each rounded once, in memory order.
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn bf16_pack(v: Bf16x32) -> __m512i {
    let even = _mm512_srli_epi32::<16>(bf16_round(v[0]));
    // Odd 16-bit words (the high halves) from the odd results, even words from the even ones.
    _mm512_mask_blend_epi16(0xaaaa_aaaa, even, bf16_round(v[1]))
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn st_bf16(p: *mut bf16, v: Bf16x32) {
    // SAFETY: see above.
    unsafe { _mm512_storeu_si512(p.cast(), bf16_pack(v)) }
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn nt_bf16(p: *mut bf16, v: Bf16x32) {
    // SAFETY: see the streaming stores above.
    unsafe { _mm512_stream_si512(p.cast(), bf16_pack(v)) }
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn add_bf16(a: Bf16x32, b: Bf16x32) -> Bf16x32 {
    [add_ps(a[0], b[0]), add_ps(a[1], b[1])]
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn mul_bf16(a: Bf16x32, b: Bf16x32) -> Bf16x32 {
    [mul_ps(a[0], b[0]), mul_ps(a[1], b[1])]
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn min_bf16(a: Bf16x32, b: Bf16x32) -> Bf16x32 {
    [min_ps(a[0], b[0]), min_ps(a[1], b[1])]
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn max_bf16(a: Bf16x32, b: Bf16x32) -> Bf16x32 {
    [max_ps(a[0], b[0]), max_ps(a[1], b[1])]
}

/// 16 f16 → 16 f32 (exact).
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn ld_f16(p: *const f16) -> __m512 {
    // SAFETY: see above (32 bytes).
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) })
}

/// 16 f32 → 16 f16, rounding to nearest even from the immediate, not MXCSR.
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn st_f16(p: *mut f16, v: __m512) {
    let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
    // SAFETY: see above (32 bytes).
    unsafe { _mm256_storeu_si256(p.cast(), h) }
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
unsafe fn nt_f16(p: *mut f16, v: __m512) {
    // SAFETY: see the streaming stores above.
    unsafe { _mm256_stream_si256(p.cast(), _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v)) }
}

// ---- Float ops: every NaN result becomes the canonical NaN, as in `portable`. ----

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn qnan_ps() -> __m512 {
    _mm512_castsi512_ps(_mm512_set1_epi32(QNAN32 as i32))
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn qnan_pd() -> __m512d {
    _mm512_castsi512_pd(_mm512_set1_epi64(QNAN64 as i64))
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn canon_ps(r: __m512) -> __m512 {
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(r, r), r, qnan_ps())
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn canon_pd(r: __m512d) -> __m512d {
    _mm512_mask_blend_pd(_mm512_cmp_pd_mask::<_CMP_UNORD_Q>(r, r), r, qnan_pd())
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn add_ps(a: __m512, b: __m512) -> __m512 {
    canon_ps(_mm512_add_ps(a, b))
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn mul_ps(a: __m512, b: __m512) -> __m512 {
    canon_ps(_mm512_mul_ps(a, b))
}

// Float OR/AND on zmm registers is AVX512-DQ; the integer forms (AVX512-F) give the same bits.

/// IEEE minimum: `vminps` both ways round, OR-ed (a ±0 pair gives -0), NaN operands replaced
/// by the canonical NaN. See the AVX2 path for the reasoning.
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn min_ps(a: __m512, b: __m512) -> __m512 {
    let r = _mm512_or_si512(
        _mm512_castps_si512(_mm512_min_ps(a, b)),
        _mm512_castps_si512(_mm512_min_ps(b, a)),
    );
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b);
    _mm512_mask_blend_ps(nan, _mm512_castsi512_ps(r), qnan_ps())
}

/// IEEE maximum: as [`min_ps`], with AND so a ±0 pair gives +0.
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn max_ps(a: __m512, b: __m512) -> __m512 {
    let r = _mm512_and_si512(
        _mm512_castps_si512(_mm512_max_ps(a, b)),
        _mm512_castps_si512(_mm512_max_ps(b, a)),
    );
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b);
    _mm512_mask_blend_ps(nan, _mm512_castsi512_ps(r), qnan_ps())
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn add_pd(a: __m512d, b: __m512d) -> __m512d {
    canon_pd(_mm512_add_pd(a, b))
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn mul_pd(a: __m512d, b: __m512d) -> __m512d {
    canon_pd(_mm512_mul_pd(a, b))
}

/// As [`min_ps`].
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn min_pd(a: __m512d, b: __m512d) -> __m512d {
    let r = _mm512_or_si512(
        _mm512_castpd_si512(_mm512_min_pd(a, b)),
        _mm512_castpd_si512(_mm512_min_pd(b, a)),
    );
    let nan = _mm512_cmp_pd_mask::<_CMP_UNORD_Q>(a, b);
    _mm512_mask_blend_pd(nan, _mm512_castsi512_pd(r), qnan_pd())
}

/// As [`max_ps`].
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn max_pd(a: __m512d, b: __m512d) -> __m512d {
    let r = _mm512_and_si512(
        _mm512_castpd_si512(_mm512_max_pd(a, b)),
        _mm512_castpd_si512(_mm512_max_pd(b, a)),
    );
    let nan = _mm512_cmp_pd_mask::<_CMP_UNORD_Q>(a, b);
    _mm512_mask_blend_pd(nan, _mm512_castsi512_pd(r), qnan_pd())
}

// ---- Integer ops AVX-512 F/BW lack as one instruction. ----

/// 8-bit wrapping multiply (no `vpmullb`): even bytes in place, odd bytes shifted down, merged.
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn mul_8(a: __m512i, b: __m512i) -> __m512i {
    let even = _mm512_mullo_epi16(a, b);
    let odd = _mm512_mullo_epi16(_mm512_srli_epi16::<8>(a), _mm512_srli_epi16::<8>(b));
    _mm512_or_si512(
        _mm512_and_si512(even, _mm512_set1_epi16(0xff)),
        _mm512_slli_epi16::<8>(odd),
    )
}

/// 64-bit wrapping multiply without AVX512-DQ's `vpmullq` (so only F + BW are required):
/// lo·lo + ((hi·lo + lo·hi) << 32) mod 2⁶⁴.
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
#[inline]
fn mul_64(a: __m512i, b: __m512i) -> __m512i {
    let lo = _mm512_mul_epu32(a, b);
    let c1 = _mm512_mul_epu32(_mm512_srli_epi64::<32>(a), b);
    let c2 = _mm512_mul_epu32(a, _mm512_srli_epi64::<32>(b));
    _mm512_add_epi64(lo, _mm512_slli_epi64::<32>(_mm512_add_epi64(c1, c2)))
}

// ---- The kernels. ----

int_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    i8k,
    i8,
    64,
    ld_i,
    st_i,
    nt_i,
    add = _mm512_add_epi8,
    mul = mul_8,
    min = _mm512_min_epi8,
    max = _mm512_max_epi8,
    and = _mm512_and_si512,
    or = _mm512_or_si512,
    xor = _mm512_xor_si512
);
int_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    u8k,
    u8,
    64,
    ld_i,
    st_i,
    nt_i,
    add = _mm512_add_epi8,
    mul = mul_8,
    min = _mm512_min_epu8,
    max = _mm512_max_epu8,
    and = _mm512_and_si512,
    or = _mm512_or_si512,
    xor = _mm512_xor_si512
);
int_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    i16k,
    i16,
    32,
    ld_i,
    st_i,
    nt_i,
    add = _mm512_add_epi16,
    mul = _mm512_mullo_epi16,
    min = _mm512_min_epi16,
    max = _mm512_max_epi16,
    and = _mm512_and_si512,
    or = _mm512_or_si512,
    xor = _mm512_xor_si512
);
int_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    u16k,
    u16,
    32,
    ld_i,
    st_i,
    nt_i,
    add = _mm512_add_epi16,
    mul = _mm512_mullo_epi16,
    min = _mm512_min_epu16,
    max = _mm512_max_epu16,
    and = _mm512_and_si512,
    or = _mm512_or_si512,
    xor = _mm512_xor_si512
);
int_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    i32k,
    i32,
    16,
    ld_i,
    st_i,
    nt_i,
    add = _mm512_add_epi32,
    mul = _mm512_mullo_epi32,
    min = _mm512_min_epi32,
    max = _mm512_max_epi32,
    and = _mm512_and_si512,
    or = _mm512_or_si512,
    xor = _mm512_xor_si512
);
int_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    u32k,
    u32,
    16,
    ld_i,
    st_i,
    nt_i,
    add = _mm512_add_epi32,
    mul = _mm512_mullo_epi32,
    min = _mm512_min_epu32,
    max = _mm512_max_epu32,
    and = _mm512_and_si512,
    or = _mm512_or_si512,
    xor = _mm512_xor_si512
);
int_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    i64k,
    i64,
    8,
    ld_i,
    st_i,
    nt_i,
    add = _mm512_add_epi64,
    mul = mul_64,
    min = _mm512_min_epi64,
    max = _mm512_max_epi64,
    and = _mm512_and_si512,
    or = _mm512_or_si512,
    xor = _mm512_xor_si512
);
int_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    u64k,
    u64,
    8,
    ld_i,
    st_i,
    nt_i,
    add = _mm512_add_epi64,
    mul = mul_64,
    min = _mm512_min_epu64,
    max = _mm512_max_epu64,
    and = _mm512_and_si512,
    or = _mm512_or_si512,
    xor = _mm512_xor_si512
);

float_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    f32k,
    f32,
    16,
    ld_ps,
    st_ps,
    nt_ps,
    add = add_ps,
    mul = mul_ps,
    min = min_ps,
    max = max_ps
);
float_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    f64k,
    f64,
    8,
    ld_pd,
    st_pd,
    nt_pd,
    add = add_pd,
    mul = mul_pd,
    min = min_pd,
    max = max_pd
);
float_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    bf16k,
    bf16,
    32,
    ld_bf16,
    st_bf16,
    nt_bf16,
    add = add_bf16,
    mul = mul_bf16,
    min = min_bf16,
    max = max_bf16
);
float_kernels!(
    "avx512f,avx512bw,avx2,f16c",
    f16k,
    f16,
    16,
    ld_f16,
    st_f16,
    nt_f16,
    add = add_ps,
    mul = mul_ps,
    min = min_ps,
    max = max_ps
);

reduce_by_dtype!();
