//! Halo exchange of strided columns (issue 19's datatype benchmark): `n` ranks in a periodic
//! ring, each holding a `rows x (16 + 2)` row-major block of f64 with a ghost column on each
//! side. One iteration trades the first and last interior columns with both neighbours by
//! `sendrecv_dt` with a vector datatype (`vector` mode), or trades the same bytes from and into
//! contiguous buffers (`contig` mode), or packs the columns by hand into contiguous buffers,
//! exchanges those and copies them back (`manual` mode: what a code without datatypes does),
//! or only copies them as `manual` does, with no message at all (`touch` mode, not run unless
//! asked for: the memory work of the layout alone, which no implementation of the exchange
//! avoids, so `contig + touch` is a floor for `vector`).
//! The same program in C against an MPI is
//! `benches/mpi/halo.c`; `benches/scripts/compare-halo.sh` runs both, interleaved.
//!
//! `halo [--reps R] [--rows LIST] [--modes LIST]` prints one JSON line per (mode, rows) from
//! rank 0: the median over `R` repetitions of the time per iteration (the slowest rank's).
//! Ghost columns are checked against the neighbours' values after every repetition.

use rcomm::datatype::Datatype;
use rcomm::{Communicator, Op, Tag};
use std::time::Instant;

const NX: usize = 16;
const W: usize = NX + 2;

fn val(r: u32, y: usize, x: usize, rep: usize) -> f64 {
    r as f64 * 1e7 + rep as f64 * 1e6 + (y * W + x) as f64
}

fn arg<'a>(args: &'a [String], k: &str, d: &'a str) -> &'a str {
    args.iter().position(|a| a == k).map_or(d, |i| &args[i + 1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = arg(&args, "--reps", "7").parse().expect("--reps");
    let rows: Vec<usize> = arg(&args, "--rows", "64,1024,16384")
        .split(',')
        .map(|s| s.parse().expect("--rows"))
        .collect();
    let modes: Vec<String> = arg(&args, "--modes", "vector,manual,contig")
        .split(',')
        .map(String::from)
        .collect();
    let w = rcomm::init().expect("init");
    let (r, n) = (w.rank(), w.size());
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    for &ny in &rows {
        // Enough iterations for ~20 ms at ~1 GB/s, at least 50.
        let iters = (20_000_000 / (ny * 8 * 4)).clamp(50, 5000);
        let mut times = vec![Vec::new(); modes.len()];
        // The modes take turns within each repetition, so none is measured while the job is
        // still warming up (the first one measured used to pay for it); repetition 0 warms all.
        for rep in 0..reps + 1 {
            for (mode, times) in modes.iter().zip(&mut times) {
                let mut m: Vec<f64> = (0..ny * W).map(|i| val(r, i / W, i % W, rep)).collect();
                w.barrier().unwrap();
                let t0 = Instant::now();
                match mode.as_str() {
                    "vector" => vector(&w, &mut m, ny, iters, left, right),
                    "contig" => contig(&w, &mut m, ny, iters, left, right),
                    "manual" => manual(&w, &mut m, ny, iters, left, right),
                    "touch" => touch(&w, &mut m, ny, iters, left, right),
                    m => panic!("unknown mode {m}"),
                }
                let mut t = [t0.elapsed().as_secs_f64() / iters as f64];
                w.allreduce_in_place(&mut t, Op::Max).unwrap();
                // Ghosts hold the neighbours' boundary columns of this repetition.
                for y in 0..ny {
                    assert_eq!(m[y * W], val(left, y, NX, rep), "west ghost, row {y}");
                    assert_eq!(
                        m[y * W + NX + 1],
                        val(right, y, 1, rep),
                        "east ghost, row {y}"
                    );
                }
                if rep > 0 {
                    times.push(t[0]);
                }
            }
        }
        for (mode, times) in modes.iter().zip(&mut times) {
            times.sort_by(f64::total_cmp);
            if r == 0 {
                println!(
                    "{{\"bench\":\"halo\",\"impl\":\"rcomm\",\"ranks\":{n},\"mode\":\"{mode}\",\"rows\":{ny},\"bytes\":{},\"us\":{:.3},\"iters\":{iters},\"reps\":{reps}}}",
                    ny * 8,
                    times[times.len() / 2] * 1e6
                );
            }
        }
    }
}

fn vector(w: &Communicator, m: &mut [f64], ny: usize, iters: usize, left: u32, right: u32) {
    let col = Datatype::vector(ny, 1, W as isize, &Datatype::of::<f64>()).unwrap();
    for _ in 0..iters {
        // East column to the right, west ghost from the left; then the mirror image.
        w.sendrecv_dt_within(m, (NX, 1, &col), right, Tag(1), (0, 1, &col), left, Tag(1))
            .unwrap();
        w.sendrecv_dt_within(
            m,
            (1, 1, &col),
            left,
            Tag(2),
            (NX + 1, 1, &col),
            right,
            Tag(2),
        )
        .unwrap();
    }
}

fn contig(w: &Communicator, m: &mut [f64], ny: usize, iters: usize, left: u32, right: u32) {
    let mut out = vec![0f64; ny];
    let mut inb = vec![0f64; ny];
    for _ in 0..iters {
        w.sendrecv(&out, right, Tag(1), &mut inb, left, Tag(1))
            .unwrap();
        w.sendrecv(&inb, left, Tag(2), &mut out, right, Tag(2))
            .unwrap();
    }
    // Not timed: the ghosts filled as the vector mode fills them, so one check serves both.
    vector(w, m, ny, 1, left, right);
}

fn manual(w: &Communicator, m: &mut [f64], ny: usize, iters: usize, left: u32, right: u32) {
    copies(m, ny, iters, left, right, |out, inb, dest, src, tag| {
        w.sendrecv(out, dest, Tag(tag), inb, src, Tag(tag)).unwrap();
    });
}

/// `manual`'s copies without its messages: the strided reads and writes one iteration of any
/// implementation must make (what `inb` holds stands in for the received columns).
fn touch(w: &Communicator, m: &mut [f64], ny: usize, iters: usize, left: u32, right: u32) {
    copies(m, ny, iters, left, right, |out, inb, _, _, _| {
        std::hint::black_box((out, inb));
    });
    // Not timed: the ghosts filled as the vector mode fills them, so one check serves all.
    vector(w, m, ny, 1, left, right);
}

/// The columns copied by hand into a contiguous buffer, `exchange(out, inb, dest, src, tag)`,
/// and copied back from `inb`: east column to the right and west ghost from the left, then the
/// mirror image.
fn copies(
    m: &mut [f64],
    ny: usize,
    iters: usize,
    left: u32,
    right: u32,
    mut exchange: impl FnMut(&[f64], &mut [f64], u32, u32, i32),
) {
    let mut out = vec![0f64; ny];
    let mut inb = vec![0f64; ny];
    for _ in 0..iters {
        for (y, o) in out.iter_mut().enumerate() {
            *o = m[y * W + NX];
        }
        exchange(&out, &mut inb, right, left, 1);
        for (y, i) in inb.iter().enumerate() {
            m[y * W] = *i;
        }
        for (y, o) in out.iter_mut().enumerate() {
            *o = m[y * W + 1];
        }
        exchange(&out, &mut inb, left, right, 2);
        for (y, i) in inb.iter().enumerate() {
            m[y * W + NX + 1] = *i;
        }
    }
}
