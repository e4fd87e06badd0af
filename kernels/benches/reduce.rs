//! Reduction kernels vs memcpy on 16 MiB buffers (issue P3 target: f32 and bf16 sum move bytes
//! at >= 80 % of memcpy's byte rate).
//!
//! Throughput counts bytes moved: a reduction reads two buffers and writes one (3 × 16 MiB per
//! call), memcpy reads one and writes one (2 × 16 MiB). Run briefly with
//! `cargo bench -p rcomm-kernels --bench reduce -- --warm-up-time 1 --measurement-time 2`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use half::bf16;
use rcomm_kernels::{Dtype, Isa, Op, reduce_into_with, reduce3_with};

const BYTES: usize = 16 << 20;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("16MiB");

    let src = vec![0x3cu8; BYTES];
    let mut dst = vec![0u8; BYTES];
    g.throughput(Throughput::Bytes(2 * BYTES as u64));
    g.bench_function("memcpy", |b| {
        b.iter(|| black_box(&mut dst[..]).copy_from_slice(black_box(&src[..])))
    });

    // Values whose running sums stay finite and normal: no NaN or subnormal slow paths, so
    // the loop measures memory, not exceptions.
    let f32_src: Vec<u8> = bytemuck::cast_slice(&vec![1.0f32; BYTES / 4]).to_vec();
    let bf16_src: Vec<u8> = bytemuck::cast_slice(&vec![bf16::ONE; BYTES / 2]).to_vec();
    let mut out = vec![0u8; BYTES];
    g.throughput(Throughput::Bytes(3 * BYTES as u64));
    for isa in Isa::supported() {
        for (name, dtype, s) in [
            ("f32_sum", Dtype::F32, &f32_src),
            ("bf16_sum", Dtype::Bf16, &bf16_src),
        ] {
            let mut acc = s.clone();
            g.bench_function(BenchmarkId::new(name, isa), |b| {
                b.iter(|| reduce_into_with(isa, Op::Sum, dtype, black_box(&mut acc), s).unwrap())
            });
            let a = s.clone();
            g.bench_function(BenchmarkId::new(format!("{name}_out_of_place"), isa), |b| {
                b.iter(|| reduce3_with(isa, Op::Sum, dtype, black_box(&mut out), &a, s).unwrap())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
