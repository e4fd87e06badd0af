//! Rank program for the hang tests (flight recorder, watchdog, hang report). `rt_hang MODE ...`;
//! every mode runs a few allreduces on the world (so collective numbers are past 1), then:
//! - `late SECS`: rank 2 sleeps SECS before the next allreduce; the others call it at once.
//!   Each rank prints `ok allreduce after T s` or `error after T s: ERR (Timeout|other)` (a
//!   `Timeout` under a short `RCOMM_TIMEOUT`) and exits 3 a second after an error.
//! - `catchup SECS FILE`: as `late`, with rank 0 writing the job id to FILE first (so the test
//!   can run `rcomm-run --dump JOB_ID`); expected to complete everywhere.
//! - `stop`: rank 2 stops itself (SIGSTOP) before the next allreduce.
//! - `recv`: rank 1 receives from rank 0, which never sends but stays alive for 8 s
//!   (`RCOMM_P2P_TIMEOUT`); the others finish.
use rcomm::{Op, Tag};
use std::time::{Duration, Instant};

const WARMUP: u64 = 3;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("");
    let w = rcomm::init().expect("init");
    let r = w.rank();
    let mut buf = vec![1u64; 16];
    for _ in 0..WARMUP {
        w.allreduce_in_place(&mut buf, Op::Sum)
            .expect("warm-up allreduce");
    }
    match mode {
        "late" | "catchup" | "stop" => {
            if mode == "catchup" && r == 0 {
                std::fs::write(&args[3], w.job_id()).expect("write the job id");
            }
            if r == 2 {
                if mode == "stop" {
                    // SAFETY: raise has no memory-safety preconditions.
                    unsafe { libc::raise(libc::SIGSTOP) };
                } else {
                    let secs: f64 = args[2].parse().expect("SECS");
                    std::thread::sleep(Duration::from_secs_f64(secs));
                }
            }
            let t0 = Instant::now();
            match w.allreduce_in_place(&mut buf, Op::Sum) {
                Ok(()) => println!("ok allreduce after {:.1} s", t0.elapsed().as_secs_f64()),
                Err(e) => {
                    println!(
                        "error after {:.1} s: {e} ({})",
                        t0.elapsed().as_secs_f64(),
                        if matches!(e, rcomm::CommError::Timeout { .. }) {
                            "Timeout"
                        } else {
                            "other"
                        }
                    );
                    // A rank that exits at once makes the waits of ranks whose watchdog has
                    // not fired yet (a few milliseconds later) end with PeerLost naming it.
                    std::thread::sleep(Duration::from_secs(1));
                    std::process::exit(3);
                }
            }
        }
        "recv" => {
            if r == 1 {
                let mut b = [0u8; 8];
                match w.recv(&mut b, 0, Tag(5)) {
                    Ok(st) => println!("ok recv {st:?}"),
                    Err(e) => {
                        println!("error: {e}");
                        std::process::exit(3);
                    }
                }
            } else {
                if r == 0 {
                    // Alive but silent: a rank that exits would fail the receive at once
                    // (its connection closes), not by the watchdog.
                    std::thread::sleep(Duration::from_secs(8));
                }
                println!("ok");
            }
        }
        m => panic!("unknown mode {m:?}"),
    }
}
