//! Rank program for the straggler report (`RCOMM_STRAGGLER=1`): rank `RT_SLOW` (default 1)
//! sleeps 20 ms before each of 15 allreduces and barriers, so it arrives last at every one.
//! Rank 0 prints the report (`Communicator::straggler_report`) and `slowest <rank> <mean ms>
//! <p99 ms>`; at finalize rank 0 prints the world's report to stderr.
use rcomm::Op;
use std::time::Duration;

fn main() {
    let world = rcomm::init().expect("init");
    let (r, n) = (world.rank(), world.size());
    let slow: u32 = std::env::var("RT_SLOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 % n);
    // A fresh communicator: only this loop's calls are in its report.
    let c = world.dup().expect("dup");
    for _ in 0..15 {
        if r == slow {
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut v = [1u64; 16];
        c.allreduce_in_place(&mut v, Op::Sum).expect("allreduce");
        assert_eq!(v[0], u64::from(n));
        if r == slow {
            std::thread::sleep(Duration::from_millis(20));
        }
        world.barrier().expect("barrier");
    }
    let rep = c.straggler_report().expect("report");
    // The world's loop was timed too (barriers), on top of init's collectives.
    let wrep = world.straggler_report().expect("world report");
    if r == 0 {
        print!("{rep}");
        let s = rep.slowest().expect("calls compared");
        println!(
            "slowest {} {:.1} {:.1} calls {}",
            s.rank,
            s.mean.as_secs_f64() * 1e3,
            s.p99.as_secs_f64() * 1e3,
            rep.calls
        );
        let w = wrep.slowest().expect("calls compared");
        println!("world slowest {}", w.rank);
    }
}
