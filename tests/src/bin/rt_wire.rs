//! Rank program for the wire-security tests: `rt_wire STOP_FILE MAX_SECONDS`.
//!
//! After init, every rank runs allreduces (sizes cycling from 1 to 20 000 `i64`, data depending
//! on rank and iteration, every result checked exactly) and a ring exchange, while the test
//! attacks the job's listeners. Rank 0 decides when to stop — once STOP_FILE exists, or after
//! MAX_SECONDS — and tells the others through the same allreduce, so all ranks run the same
//! number of iterations. Prints `ok wire rank R/N iterations K` and exits 0.
use rcomm::{Op, Source, Tag};
use std::path::Path;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let stop_file = args.get(1).expect("usage: rt_wire STOP_FILE MAX_SECONDS");
    let max = Duration::from_secs(args.get(2).and_then(|s| s.parse().ok()).unwrap_or(60));
    let w = rcomm::init().expect("init");
    let (r, n) = (w.rank(), w.size());
    let t0 = Instant::now();
    let sizes = [1usize, 100, 4_000, 20_000];
    let mut k: i64 = 0;
    loop {
        let count = sizes[k as usize % sizes.len()];
        // Element 0 carries rank 0's stop decision (the others add 0).
        let stop = r == 0 && (Path::new(stop_file).exists() || t0.elapsed() > max);
        let mut v: Vec<i64> = (0..count as i64)
            .map(|i| (r as i64 + 1) * (k + 1) + i)
            .collect();
        v[0] = i64::from(stop);
        w.allreduce_in_place(&mut v, Op::Sum).expect("allreduce");
        let ranks = n as i64;
        for (i, x) in v.iter().enumerate().skip(1) {
            let want = (k + 1) * ranks * (ranks + 1) / 2 + ranks * i as i64;
            assert_eq!(*x, want, "iteration {k}, count {count}, index {i}");
        }
        let right = (r + 1) % n;
        let left = (r + n - 1) % n;
        let out = [r as i64, k];
        let mut inp = [0i64; 2];
        w.sendrecv(&out, right, Tag(9), &mut inp, Source::Rank(left), Tag(9))
            .expect("sendrecv");
        assert_eq!(inp, [left as i64, k], "ring exchange at iteration {k}");
        k += 1;
        if v[0] != 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    println!("ok wire rank {r}/{n} iterations {k}");
}
