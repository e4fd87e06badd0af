//! Rank program for the foreign-launcher tests (mpiexec.mpich, srun --mpi=pmi2, a
//! torchrun-style environment). `rt_boot MODE`:
//! - `check`: init, then an allreduce (several sizes, checked exactly) and a point-to-point ring
//!   exchange; prints `ok rank R/N local LR/LS job J` per rank.
//! - `die`: after init, rank 1 exits with code 9 without finalizing; the others wait in a
//!   barrier (so only the launcher can end them).
//! - `die-init`: rank 1 exits with code 9 before init; the others block in the bootstrap fence,
//!   where only the launcher or `RCOMM_BOOTSTRAP_TIMEOUT` can end them (init error: exit 3).
//! - `abort`: after init, rank 1 calls `World::abort(7, ...)`; the others wait in a barrier.
//! - `init-error`: expects init to fail; prints `init error: ...` and exits 3.
use rcomm::{Op, Source, Tag};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "check".into());
    let t0 = std::time::Instant::now();
    if mode == "die-init" && std::env::var("PMI_RANK").as_deref() == Ok("1") {
        std::process::exit(9);
    }
    let w = match rcomm::init() {
        Ok(w) => w,
        Err(e) if mode == "init-error" || mode == "die-init" => {
            println!("init error after {:.1} s: {e}", t0.elapsed().as_secs_f64());
            std::process::exit(3);
        }
        Err(e) => panic!("init: {e}"),
    };
    assert_ne!(mode, "init-error", "init should have failed");
    let (r, n) = (w.rank(), w.size());
    match mode.as_str() {
        "check" => {
            for count in [1usize, 1000, 100_003] {
                let mut v: Vec<i64> = (0..count)
                    .map(|i| (r as i64 + 1) * (i as i64 + 1))
                    .collect();
                w.allreduce_in_place(&mut v, Op::Sum).unwrap();
                let s = (n as i64) * (n as i64 + 1) / 2;
                for (i, x) in v.iter().enumerate() {
                    assert_eq!(*x, s * (i as i64 + 1), "allreduce count {count} index {i}");
                }
            }
            let right = (r + 1) % n;
            let left = (r + n - 1) % n;
            let out: Vec<u32> = (0..4096).map(|i| r * 100_000 + i).collect();
            let mut inp = vec![0u32; 4096];
            w.sendrecv(&out, right, Tag(5), &mut inp, Source::Rank(left), Tag(5))
                .unwrap();
            assert!(
                inp.iter()
                    .enumerate()
                    .all(|(i, &x)| x == left * 100_000 + i as u32)
            );
            println!(
                "ok rank {r}/{n} local {}/{} job {}",
                w.local_rank(),
                w.local_size(),
                w.job_id()
            );
        }
        "die" | "abort" => {
            if r == 1 {
                if mode == "die" {
                    std::process::exit(9);
                }
                w.abort(7, "rt_boot abort test");
            }
            let mut v = [1i32];
            // Never completes: rank 1 is gone. The launcher must end this rank.
            let res = w.allreduce_in_place(&mut v, Op::Sum);
            println!("rank {r}: allreduce after a peer died returned {res:?}");
            std::process::exit(1);
        }
        m => panic!("unknown mode {m}"),
    }
}
