//! Out-of-place reductions with streaming (non-temporal) stores give the same bytes as the
//! portable path. Its own test binary: it lowers the process-wide streaming threshold.

use rcomm_kernels::{
    DEFAULT_STREAM_THRESHOLD, Dtype, Isa, Op, reduce3_with, set_stream_threshold, stream_threshold,
};

/// xorshift64*: deterministic random bits, no dependency.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

fn check(isa: Isa, op: Op, dtype: Dtype, elems: usize, out_off: usize, seed: u64) {
    let len = elems * dtype.size();
    let a = bytes(seed, len);
    let b = bytes(seed ^ 0x9e37_79b9_7f4a_7c15, len);
    let mut want = vec![0u8; len];
    reduce3_with(Isa::Portable, op, dtype, &mut want, &a, &b).unwrap();
    let mut out = vec![0x5au8; len + 128];
    reduce3_with(isa, op, dtype, &mut out[out_off..out_off + len], &a, &b).unwrap();
    assert!(
        out[out_off..out_off + len] == want[..],
        "{isa} {op} {dtype} n={elems} off={out_off}: streamed result differs"
    );
    assert!(
        out[..out_off].iter().all(|&g| g == 0x5a),
        "{isa} {op} {dtype}: wrote before"
    );
    assert!(
        out[out_off + len..].iter().all(|&g| g == 0x5a),
        "{isa} {op} {dtype}: wrote after"
    );
}

#[test]
fn streamed_out_of_place_results_match_portable() {
    assert_eq!(stream_threshold(), DEFAULT_STREAM_THRESHOLD);
    // Above the default threshold, as a real large reduction would be.
    for isa in Isa::supported() {
        for dtype in [Dtype::F32, Dtype::Bf16] {
            check(isa, Op::Sum, dtype, (9 << 20) / dtype.size() + 5, 16, 1);
        }
    }
    // Everything streams from here on: every op and dtype, tails, heads, offsets that are and
    // are not element-aligned (the latter cannot stream and must fall back).
    set_stream_threshold(0);
    let mut seed = 2;
    for isa in Isa::supported() {
        for dtype in Dtype::ALL {
            for op in Op::ALL.into_iter().filter(|o| o.is_defined_for(dtype)) {
                for elems in [0, 1, 63, 64, 65, 257, 1000, 4099] {
                    for off in [0, 1, dtype.size(), 16, 64 - dtype.size()] {
                        seed += 1;
                        check(isa, op, dtype, elems, off, seed);
                    }
                }
            }
        }
    }
    set_stream_threshold(usize::MAX);
    check(Isa::best(), Op::Max, Dtype::F64, 1000, 0, 7);
    set_stream_threshold(DEFAULT_STREAM_THRESHOLD);
}
