//! Rank program: liveness and failure propagation under rcomm-run (4 ranks).
//!
//! - `rt_live stop`: rank 2 stops itself (SIGSTOP) after a barrier. Ranks 0 and 3 then wait in
//!   an allreduce (which needs rank 2); rank 1 waits for a message from rank 0, a live peer
//!   that never sends it. Every survivor must get an error naming rank 2 once the launcher
//!   declares it hung. Each prints `rank R: <error> after T ms`.
//! - `rt_live busy SECS`: rank 1 computes for SECS seconds without calling rcomm while the
//!   others wait in an allreduce; nobody may be declared hung. Rank 0 prints `sum S`.
use rcomm::{Op, Tag};
use std::time::{Duration, Instant};

fn main() {
    let w = rcomm::init().expect("init");
    let r = w.rank();
    let mode = std::env::args().nth(1).unwrap_or_default();
    match mode.as_str() {
        "stop" => {
            w.barrier().unwrap();
            if r == 2 {
                // SAFETY: raising a signal in our own process.
                unsafe { libc::raise(libc::SIGSTOP) };
                unreachable!("the launcher kills a stopped rank");
            }
            let t0 = Instant::now();
            let err = if r == 1 {
                let mut b = [0u8; 8];
                w.recv(&mut b, 0, Tag(7)).map(drop)
            } else {
                let mut v = vec![1u32; 1000];
                w.allreduce_in_place(&mut v, Op::Sum)
            }
            .expect_err("rank 2 is stopped: nothing can complete");
            println!("rank {r}: {err} after {} ms", t0.elapsed().as_millis());
            // A new operation on the broken world fails at once.
            let again = w.send(&[1u8], (r + 1) % 4, Tag(8));
            println!(
                "rank {r}: then {}",
                again.err().map_or("ok".into(), |e| e.to_string())
            );
        }
        "busy" => {
            let secs: f64 = std::env::args()
                .nth(2)
                .and_then(|s| s.parse().ok())
                .unwrap_or(3.0);
            w.barrier().unwrap();
            if r == 1 {
                let t0 = Instant::now();
                let mut x = 1u64;
                while t0.elapsed() < Duration::from_secs_f64(secs) {
                    for _ in 0..100_000 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                }
                std::hint::black_box(x);
            }
            let mut v = vec![u64::from(r); 10];
            w.allreduce_in_place(&mut v, Op::Sum).unwrap();
            if r == 0 {
                println!("sum {}", v[0]);
            }
        }
        m => panic!("unknown mode {m:?}"),
    }
}
