//! Every (op, dtype) on every ISA this CPU has, against a scalar reference written here from
//! the documented semantics (independently of the crate's own scalar code), bit for bit.

use std::io::Write;

use half::{bf16, f16};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rcomm_kernels::{
    Dtype, Isa, Op, finalize_avg, reduce_into_typed, reduce_into_with, reduce3_typed, reduce3_with,
};

const QNAN32: u32 = 0x7fc0_0000;
const QNAN64: u64 = 0x7ff8_0000_0000_0000;
const QNAN_BF16: u16 = 0x7fc0;
const QNAN_F16: u16 = 0x7e00;

/// Guard byte around every buffer, to catch out-of-bounds writes.
const GUARD: u8 = 0xa5;
/// Extra bytes before and after each slice: offsets 0..64 move the slice across every
/// alignment a 512-bit vector cares about.
const PAD: usize = 64;

// ---------------------------------------------------------------------------------------------
// Reference.

/// IEEE 754-2019 minimum: NaN if either is NaN, -0 below +0.
fn ref_min<F: Float>(a: F, b: F) -> F {
    if a.nan() || b.nan() {
        F::qnan()
    } else if a.eq(b) {
        if a.neg() { a } else { b }
    } else if a.lt(b) {
        a
    } else {
        b
    }
}

/// IEEE 754-2019 maximum: NaN if either is NaN, +0 above -0.
fn ref_max<F: Float>(a: F, b: F) -> F {
    if a.nan() || b.nan() {
        F::qnan()
    } else if a.eq(b) {
        if a.neg() { b } else { a }
    } else if a.lt(b) {
        b
    } else {
        a
    }
}

trait Float: Copy {
    fn nan(self) -> bool;
    fn neg(self) -> bool;
    fn eq(self, o: Self) -> bool;
    fn lt(self, o: Self) -> bool;
    fn qnan() -> Self;
}

impl Float for f32 {
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn neg(self) -> bool {
        self.is_sign_negative()
    }
    fn eq(self, o: Self) -> bool {
        self == o
    }
    fn lt(self, o: Self) -> bool {
        self < o
    }
    fn qnan() -> Self {
        f32::from_bits(QNAN32)
    }
}

impl Float for f64 {
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn neg(self) -> bool {
        self.is_sign_negative()
    }
    fn eq(self, o: Self) -> bool {
        self == o
    }
    fn lt(self, o: Self) -> bool {
        self < o
    }
    fn qnan() -> Self {
        f64::from_bits(QNAN64)
    }
}

fn f32_op(op: Op, a: f32, b: f32) -> f32 {
    let r = match op {
        Op::Sum | Op::Avg => a + b,
        Op::Prod => a * b,
        Op::Min => ref_min(a, b),
        Op::Max => ref_max(a, b),
        _ => unreachable!("bitwise op on a float"),
    };
    if r.is_nan() {
        f32::from_bits(QNAN32)
    } else {
        r
    }
}

fn f64_op(op: Op, a: f64, b: f64) -> f64 {
    let r = match op {
        Op::Sum | Op::Avg => a + b,
        Op::Prod => a * b,
        Op::Min => ref_min(a, b),
        Op::Max => ref_max(a, b),
        _ => unreachable!("bitwise op on a float"),
    };
    if r.is_nan() {
        f64::from_bits(QNAN64)
    } else {
        r
    }
}

macro_rules! int_op {
    ($t:ty, $op:expr, $x:expr, $y:expr) => {{
        let a = <$t>::from_le_bytes($x.try_into().unwrap());
        let b = <$t>::from_le_bytes($y.try_into().unwrap());
        let r: $t = match $op {
            Op::Sum | Op::Avg => a.wrapping_add(b),
            Op::Prod => a.wrapping_mul(b),
            Op::Min => a.min(b),
            Op::Max => a.max(b),
            Op::BAnd => a & b,
            Op::BOr => a | b,
            Op::BXor => a ^ b,
        };
        r.to_le_bytes().to_vec()
    }};
}

/// One element: `x ⊕ y` as the documentation defines it.
fn ref_elem(op: Op, dtype: Dtype, x: &[u8], y: &[u8]) -> Vec<u8> {
    let u16_of = |s: &[u8]| u16::from_le_bytes(s.try_into().unwrap());
    match dtype {
        Dtype::I8 => int_op!(i8, op, x, y),
        Dtype::I16 => int_op!(i16, op, x, y),
        Dtype::I32 => int_op!(i32, op, x, y),
        Dtype::I64 => int_op!(i64, op, x, y),
        Dtype::U8 => int_op!(u8, op, x, y),
        Dtype::U16 => int_op!(u16, op, x, y),
        Dtype::U32 => int_op!(u32, op, x, y),
        Dtype::U64 => int_op!(u64, op, x, y),
        Dtype::F32 => {
            let a = f32::from_le_bytes(x.try_into().unwrap());
            let b = f32::from_le_bytes(y.try_into().unwrap());
            f32_op(op, a, b).to_le_bytes().to_vec()
        }
        Dtype::F64 => {
            let a = f64::from_le_bytes(x.try_into().unwrap());
            let b = f64::from_le_bytes(y.try_into().unwrap());
            f64_op(op, a, b).to_le_bytes().to_vec()
        }
        Dtype::Bf16 => {
            let a = bf16::from_bits(u16_of(x)).to_f32();
            let b = bf16::from_bits(u16_of(y)).to_f32();
            let r = f32_op(op, a, b);
            let bits = if r.is_nan() {
                QNAN_BF16
            } else {
                bf16::from_f32(r).to_bits()
            };
            bits.to_le_bytes().to_vec()
        }
        Dtype::F16 => {
            let a = f16::from_bits(u16_of(x)).to_f32();
            let b = f16::from_bits(u16_of(y)).to_f32();
            let r = f32_op(op, a, b);
            let bits = if r.is_nan() {
                QNAN_F16
            } else {
                f16::from_f32(r).to_bits()
            };
            bits.to_le_bytes().to_vec()
        }
    }
}

fn reference(op: Op, dtype: Dtype, a: &[u8], b: &[u8]) -> Vec<u8> {
    let s = dtype.size();
    a.chunks_exact(s)
        .zip(b.chunks_exact(s))
        .flat_map(|(x, y)| ref_elem(op, dtype, x, y))
        .collect()
}

macro_rules! int_div {
    ($t:ty, $x:expr, $n:expr) => {{
        let v = <$t>::from_le_bytes($x.try_into().unwrap());
        ((v as i128 / $n as i128) as $t).to_le_bytes().to_vec()
    }};
}

/// One element of `finalize_avg`: floats divide in their compute precision, integers truncate.
fn ref_div(dtype: Dtype, x: &[u8], n: usize) -> Vec<u8> {
    let canon32 = |r: f32| {
        if r.is_nan() {
            f32::from_bits(QNAN32)
        } else {
            r
        }
    };
    let u16_of = |s: &[u8]| u16::from_le_bytes(s.try_into().unwrap());
    match dtype {
        Dtype::I8 => int_div!(i8, x, n),
        Dtype::I16 => int_div!(i16, x, n),
        Dtype::I32 => int_div!(i32, x, n),
        Dtype::I64 => int_div!(i64, x, n),
        Dtype::U8 => int_div!(u8, x, n),
        Dtype::U16 => int_div!(u16, x, n),
        Dtype::U32 => int_div!(u32, x, n),
        Dtype::U64 => int_div!(u64, x, n),
        Dtype::F32 => canon32(f32::from_le_bytes(x.try_into().unwrap()) / n as f32)
            .to_le_bytes()
            .to_vec(),
        Dtype::F64 => {
            let r = f64::from_le_bytes(x.try_into().unwrap()) / n as f64;
            let r = if r.is_nan() {
                f64::from_bits(QNAN64)
            } else {
                r
            };
            r.to_le_bytes().to_vec()
        }
        Dtype::Bf16 => {
            let r = bf16::from_bits(u16_of(x)).to_f32() / n as f32;
            let bits = if r.is_nan() {
                QNAN_BF16
            } else {
                bf16::from_f32(r).to_bits()
            };
            bits.to_le_bytes().to_vec()
        }
        Dtype::F16 => {
            let r = f16::from_bits(u16_of(x)).to_f32() / n as f32;
            let bits = if r.is_nan() {
                QNAN_F16
            } else {
                f16::from_f32(r).to_bits()
            };
            bits.to_le_bytes().to_vec()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Inputs.

/// Bit patterns worth hitting on purpose: zeros of both signs, infinities, NaNs with odd
/// payloads and signs (quiet and signalling), subnormals, extremes, rounding ties; integer
/// MIN/MAX/-1/0/1.
fn specials(dtype: Dtype) -> Vec<u64> {
    match dtype {
        Dtype::F32 => vec![
            0x0000_0000,
            0x8000_0000,
            0x3f80_0000,
            0xbf80_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0000,
            0xffc0_0000,
            0x7f80_0001,
            0xffc0_1234,
            0x7fff_ffff,
            0x0000_0001,
            0x8000_0001,
            0x007f_ffff,
            0x0080_0000,
            0x7f7f_ffff,
            0xff7f_ffff,
            0x3f80_8000,
            0x3f81_8000,
            0x4040_0000,
            0x3f00_0000,
            0x3380_0000,
        ],
        Dtype::F64 => vec![
            0x0,
            0x8000_0000_0000_0000,
            0x3ff0_0000_0000_0000,
            0xbff0_0000_0000_0000,
            0x7ff0_0000_0000_0000,
            0xfff0_0000_0000_0000,
            0x7ff8_0000_0000_0000,
            0xfff8_0000_0000_0000,
            0x7ff0_0000_0000_0001,
            0x7ff8_dead_beef_0001,
            0x1,
            0x8000_0000_0000_0001,
            0x000f_ffff_ffff_ffff,
            0x0010_0000_0000_0000,
            0x7fef_ffff_ffff_ffff,
            0xffef_ffff_ffff_ffff,
            0x3ca0_0000_0000_0000,
        ],
        Dtype::Bf16 => vec![
            0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xffff, 0x0001,
            0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f81, 0x4040, 0x3b80, 0x4380,
        ],
        Dtype::F16 => vec![
            0x0000, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xfe01, 0x0001,
            0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c01, 0x1400, 0x5bff, 0x7800,
        ],
        _ => {
            let bits = 8 * dtype.size() as u32;
            let mask = if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            let sign = 1u64 << (bits - 1);
            vec![
                0,
                1,
                2,
                3,
                mask,
                mask - 1,
                sign,
                sign - 1,
                sign + 1,
                0x5555_5555_5555_5555 & mask,
                0xaaaa_aaaa_aaaa_aaaa & mask,
                0xff,
                0x100 & mask,
            ]
        }
    }
}

fn to_bytes(dtype: Dtype, elems: &[u64]) -> Vec<u8> {
    elems
        .iter()
        .flat_map(|e| e.to_le_bytes()[..dtype.size()].to_vec())
        .collect()
}

/// `len` elements, each either random bits or a special value.
fn elems(dtype: Dtype, len: usize) -> impl Strategy<Value = Vec<u8>> {
    let sp = specials(dtype);
    prop::collection::vec(
        (any::<bool>(), any::<u64>(), any::<prop::sample::Index>()),
        len,
    )
    .prop_map(move |v| {
        let e: Vec<u64> = v
            .into_iter()
            .map(|(special, bits, i)| if special { *i.get(&sp) } else { bits })
            .collect();
        to_bytes(dtype, &e)
    })
}

#[derive(Debug, Clone)]
struct Case {
    a: Vec<u8>,
    b: Vec<u8>,
    /// Byte offsets of dst / a, src / b, and reduce3's out inside their padded buffers.
    offs: (usize, usize, usize),
}

fn case(dtype: Dtype) -> impl Strategy<Value = Case> {
    // Mostly 0..300 (every tail length for every vector width); sometimes longer, so the
    // four-vector main loop of the 8-bit AVX-512 kernels (256 elements) runs after a head.
    prop_oneof![4 => 0usize..300, 1 => 300usize..700].prop_flat_map(move |len| {
        (
            elems(dtype, len),
            elems(dtype, len),
            (0..PAD, 0..PAD, 0..PAD),
        )
            .prop_map(|(a, b, offs)| Case { a, b, offs })
    })
}

// ---------------------------------------------------------------------------------------------
// Checks.

/// A buffer of GUARD bytes with `data` at `off`.
fn padded(data: &[u8], off: usize) -> Vec<u8> {
    let mut v = vec![GUARD; data.len() + 2 * PAD];
    v[off..off + data.len()].copy_from_slice(data);
    v
}

fn guards_intact(v: &[u8], off: usize, len: usize) -> bool {
    v[..off].iter().chain(&v[off + len..]).all(|&g| g == GUARD)
}

/// First differing element, for a readable failure.
fn diff(dtype: Dtype, got: &[u8], want: &[u8], a: &[u8], b: &[u8]) -> Option<String> {
    let s = dtype.size();
    (0..got.len() / s)
        .find(|i| got[i * s..(i + 1) * s] != want[i * s..(i + 1) * s])
        .map(|i| {
            let hex = |v: &[u8]| {
                v[i * s..(i + 1) * s]
                    .iter()
                    .rev()
                    .map(|x| format!("{x:02x}"))
                    .collect::<String>()
            };
            format!(
                "element {i}: a=0x{} b=0x{} got 0x{} want 0x{}",
                hex(a),
                hex(b),
                hex(got),
                hex(want)
            )
        })
}

fn check(isa: Isa, dtype: Dtype, op: Op, c: &Case) -> Result<(), TestCaseError> {
    let n = c.a.len();
    let (od, os, oo) = c.offs;
    let want = reference(op, dtype, &c.a, &c.b);

    let mut dst = padded(&c.a, od);
    let src = padded(&c.b, os);
    reduce_into_with(isa, op, dtype, &mut dst[od..od + n], &src[os..os + n])
        .map_err(|e| TestCaseError::fail(format!("{isa} {op} {dtype}: {e}")))?;
    if let Some(d) = diff(dtype, &dst[od..od + n], &want, &c.a, &c.b) {
        return Err(TestCaseError::fail(format!(
            "{isa} reduce_into {op} {dtype}, {d}"
        )));
    }
    prop_assert!(
        guards_intact(&dst, od, n),
        "{isa} reduce_into {op} {dtype} wrote out of bounds"
    );

    let mut out = padded(&vec![0u8; n], oo);
    let a = padded(&c.a, od);
    reduce3_with(
        isa,
        op,
        dtype,
        &mut out[oo..oo + n],
        &a[od..od + n],
        &src[os..os + n],
    )
    .map_err(|e| TestCaseError::fail(format!("{isa} {op} {dtype}: {e}")))?;
    if let Some(d) = diff(dtype, &out[oo..oo + n], &want, &c.a, &c.b) {
        return Err(TestCaseError::fail(format!(
            "{isa} reduce3 {op} {dtype}, {d}"
        )));
    }
    prop_assert!(
        guards_intact(&out, oo, n),
        "{isa} reduce3 {op} {dtype} wrote out of bounds"
    );
    Ok(())
}

/// Says (past libtest's output capture, and in the run's skip summary) that a test skipped.
fn skip_note(isa: Isa, what: &str) -> bool {
    if isa.is_supported() {
        return false;
    }
    rcomm_testkit::skip_hardware(&format!(
        "{what} on {isa}: this CPU lacks it (needs {})",
        isa.requirements()
    ));
    true
}

fn run_isa_dtype(isa: Isa, dtype: Dtype) {
    if skip_note(isa, &format!("{dtype} reference test")) {
        return;
    }
    // 512 cases: each runs every op twice on up to 300 elements, well under a second in all.
    let mut runner = TestRunner::new(Config::with_cases(512));
    let result = runner.run(&case(dtype), |c| {
        for op in Op::ALL.into_iter().filter(|o| o.is_defined_for(dtype)) {
            check(isa, dtype, op, &c)?;
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{isa} {dtype}: {e}");
    }
}

/// One test per (ISA, dtype), each covering every op defined for the dtype.
macro_rules! isa_tests {
    ($m:ident, $isa:expr) => {
        mod $m {
            use super::*;
            #[test]
            fn i8() {
                run_isa_dtype($isa, Dtype::I8)
            }
            #[test]
            fn i16() {
                run_isa_dtype($isa, Dtype::I16)
            }
            #[test]
            fn i32() {
                run_isa_dtype($isa, Dtype::I32)
            }
            #[test]
            fn i64() {
                run_isa_dtype($isa, Dtype::I64)
            }
            #[test]
            fn u8() {
                run_isa_dtype($isa, Dtype::U8)
            }
            #[test]
            fn u16() {
                run_isa_dtype($isa, Dtype::U16)
            }
            #[test]
            fn u32() {
                run_isa_dtype($isa, Dtype::U32)
            }
            #[test]
            fn u64() {
                run_isa_dtype($isa, Dtype::U64)
            }
            #[test]
            fn f16() {
                run_isa_dtype($isa, Dtype::F16)
            }
            #[test]
            fn bf16() {
                run_isa_dtype($isa, Dtype::Bf16)
            }
            #[test]
            fn f32() {
                run_isa_dtype($isa, Dtype::F32)
            }
            #[test]
            fn f64() {
                run_isa_dtype($isa, Dtype::F64)
            }
        }
    };
}

isa_tests!(portable, Isa::Portable);
isa_tests!(avx2, Isa::Avx2);
isa_tests!(avx512, Isa::Avx512);

#[test]
fn isa_support_report() {
    for isa in Isa::ALL {
        let state = if isa.is_supported() {
            "tested"
        } else {
            "SKIPPED (CPU lacks it)"
        };
        let _ = writeln!(
            std::io::stderr(),
            "kernel ISA {isa}: {state}; needs {}",
            isa.requirements()
        );
    }
    assert!(Isa::Portable.is_supported());
    assert_eq!(Isa::best(), *Isa::supported().last().unwrap());
}

/// Every pair of special values, laid out so most pairs go through the vector body.
#[test]
fn special_value_pairs() {
    for dtype in Dtype::ALL {
        let sp = specials(dtype);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for &x in &sp {
            for &y in &sp {
                a.push(x);
                b.push(y);
            }
        }
        let c = Case {
            a: to_bytes(dtype, &a),
            b: to_bytes(dtype, &b),
            offs: (0, 0, 0),
        };
        for isa in Isa::ALL {
            if skip_note(isa, &format!("{dtype} special values")) {
                continue;
            }
            for op in Op::ALL.into_iter().filter(|o| o.is_defined_for(dtype)) {
                for offs in [(0, 0, 0), (1, 3, 5), (dtype.size(), 0, 2 * dtype.size())] {
                    if let Err(e) = check(isa, dtype, op, &Case { offs, ..c.clone() }) {
                        panic!("{e}");
                    }
                }
            }
        }
    }
}

/// Long random buffers: every path gives the same bytes as the portable one.
#[test]
fn all_isas_agree_bitwise_on_long_buffers() {
    let mut runner = TestRunner::deterministic();
    for dtype in Dtype::ALL {
        let n = 4099 * dtype.size();
        let a = elems(dtype, 4099).new_tree(&mut runner).unwrap().current();
        let b = elems(dtype, 4099).new_tree(&mut runner).unwrap().current();
        for op in Op::ALL.into_iter().filter(|o| o.is_defined_for(dtype)) {
            let mut want = vec![0u8; n];
            reduce3_with(Isa::Portable, op, dtype, &mut want, &a, &b).unwrap();
            assert_eq!(want, reference(op, dtype, &a, &b), "portable {op} {dtype}");
            for isa in Isa::supported() {
                let mut got = a.clone();
                reduce_into_with(isa, op, dtype, &mut got, &b).unwrap();
                assert!(got == want, "{isa} {op} {dtype} differs from portable");
            }
        }
    }
}

/// The typed entry points are the byte ones on the same bytes.
#[test]
fn typed_entry_points_match_reference() {
    let a: Vec<i32> = (0..100).map(|i| i * 7 - 300).collect();
    let b: Vec<i32> = (0..100).map(|i| 1000 - i * i).collect();
    let mut dst = a.clone();
    reduce_into_typed(Op::Max, &mut dst, &b).unwrap();
    let want: Vec<i32> = a.iter().zip(&b).map(|(x, y)| *x.max(y)).collect();
    assert_eq!(dst, want);

    let a: Vec<bf16> = (0..77).map(|i| bf16::from_f32(i as f32 * 0.37)).collect();
    let b: Vec<bf16> = (0..77)
        .map(|i| bf16::from_f32(1.0 / (i as f32 + 1.0)))
        .collect();
    let mut out = vec![bf16::ZERO; 77];
    reduce3_typed(Op::Sum, &mut out, &a, &b).unwrap();
    let want = reference(
        Op::Sum,
        Dtype::Bf16,
        bytemuck::cast_slice(&a),
        bytemuck::cast_slice(&b),
    );
    assert_eq!(bytemuck::cast_slice::<bf16, u8>(&out), &want[..]);
}

proptest! {
    /// `finalize_avg` for every dtype, counts small and huge, unaligned buffers.
    #[test]
    fn finalize_avg_matches_reference(
        (dtype, data) in prop::sample::select(Dtype::ALL.to_vec())
            .prop_flat_map(|d| (Just(d), (0usize..100).prop_flat_map(move |len| elems(d, len)))),
        count in prop_oneof![1usize..300, Just(usize::MAX), Just(usize::MAX / 3), Just(128usize)],
        off in 0usize..16,
    ) {
        let mut buf = padded(&data, off);
        let n = data.len();
        finalize_avg(dtype, &mut buf[off..off + n], count).unwrap();
        let s = dtype.size();
        let want: Vec<u8> = data.chunks_exact(s).flat_map(|x| ref_div(dtype, x, count)).collect();
        prop_assert_eq!(&buf[off..off + n], &want[..], "{} / {}", dtype, count);
        prop_assert!(guards_intact(&buf, off, n));
    }
}

/// Average of N ranks = sum over N, then one division; integers truncate toward zero.
#[test]
fn average_is_sum_then_one_division() {
    let ranks: [[i32; 4]; 3] = [[1, -1, 7, i32::MAX], [2, -2, 0, 0], [2, -2, 0, 1]];
    let mut acc = ranks[0];
    for r in &ranks[1..] {
        reduce_into_typed(Op::Avg, &mut acc, r).unwrap();
    }
    rcomm_kernels::finalize_avg_typed(&mut acc, 3).unwrap();
    // 5/3 = 1, -5/3 = -1 (toward zero), 7/3 = 2, (MAX + 1) wraps to MIN, MIN/3 truncated.
    assert_eq!(acc, [1, -1, 2, i32::MIN / 3]);

    let mut f = [bf16::from_f32(1.0), bf16::from_f32(3.0)];
    reduce_into_typed(
        Op::Avg,
        &mut f,
        &[bf16::from_f32(2.0), bf16::from_f32(-3.0)],
    )
    .unwrap();
    rcomm_kernels::finalize_avg_typed(&mut f, 3).unwrap();
    assert_eq!(f, [bf16::from_f32(1.0), bf16::ZERO]);
}
