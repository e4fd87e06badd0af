//! Rank program of the multi-host tests (tests/tests/multihost.rs), run by `rcomm-run -H …`
//! across fake hosts. Modes:
//! - `transports LAYOUT`: LAYOUT is the host index of each rank, comma-separated (the test's
//!   mapping, e.g. `0,0,1,1,2,2`); checks `transport_to` (tcp across hosts, never tcp within one), then moves data
//!   (a ring exchange and an allreduce, results checked) and checks that the TCP and
//!   shared-memory byte counters moved where they should. Prints `ok transports …` per rank.
//! - `die RANK`: after a barrier, rank RANK aborts (SIGABRT); the others loop on allreduce and
//!   report the first error.
//! - `loop SECS`: allreduce in a loop for up to SECS seconds (rank 0 prints `ready` after the
//!   first round); every rank reports the first error with how long after `ready` it came.
//!
//! With `RT_HOLD` set, a rank that saw an error sleeps instead of exiting.

use rcomm::{Op, Tag};
use std::time::{Duration, Instant};

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn transports(w: &rcomm::World, layout: &[u32]) {
    let (me, n) = (w.rank(), w.size());
    assert_eq!(layout.len(), n as usize, "layout {layout:?} for {n} ranks");
    let host_of = |r: u32| layout[r as usize];
    for r in (0..n).filter(|&r| r != me) {
        let t = w.transport_to(r).expect("transport_to");
        let same = host_of(r) == host_of(me);
        assert!(
            (t == "tcp") != same,
            "rank {me} on {}: transport to rank {r} is {t} (same host: {same})",
            host()
        );
    }
    let before = w.transport_counters();
    // Ring exchange: each rank sends to the next, receives from the previous; with 2 ranks per
    // host half the hops cross hosts.
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let out: Vec<u64> = (0..4096).map(|i| (me as u64) << 32 | i).collect();
    let mut inb = vec![0u64; 4096];
    w.sendrecv(&out, next, Tag(7), &mut inb, prev, Tag(7))
        .expect("sendrecv");
    assert!(
        inb.iter()
            .enumerate()
            .all(|(i, &x)| x == (prev as u64) << 32 | i as u64),
        "ring exchange data"
    );
    let v: Vec<f64> = (0..100_000).map(|i| (me as f64) + i as f64).collect();
    let mut sum = vec![0f64; v.len()];
    w.allreduce(&v, &mut sum, Op::Sum).expect("allreduce");
    let ranks_sum = (n * (n - 1) / 2) as f64;
    assert!(
        sum.iter()
            .enumerate()
            .all(|(i, &x)| x == ranks_sum + n as f64 * i as f64),
        "allreduce result"
    );
    let after = w.transport_counters();
    let tcp = after.get("tcp").bytes_sent + after.get("tcp").bytes_recv
        - before.get("tcp").bytes_sent
        - before.get("tcp").bytes_recv;
    let shm =
        after.get("shm").bytes_sent + after.get("shm").bytes_recv + after.get("shm").bytes_cma
            - before.get("shm").bytes_sent
            - before.get("shm").bytes_recv
            - before.get("shm").bytes_cma;
    // A rank whose ring neighbour is on another host moved at least that message over TCP;
    // one that received from a neighbour on its own host got at least as much through shared
    // memory (counted on the receiving side: large messages move by single copy, read by the
    // receiver).
    if host_of(next) != host_of(me) || host_of(prev) != host_of(me) {
        assert!(tcp >= 4096 * 8, "rank {me}: only {tcp} TCP bytes");
    }
    if host_of(prev) == host_of(me) {
        assert!(shm >= 4096 * 8, "rank {me}: only {shm} shared-memory bytes");
    }
    println!(
        "ok transports rank {me} host {} tcp_bytes {tcp} shm_bytes {shm}",
        host()
    );
}

/// Allreduce until an error or `limit`; prints how it ended.
fn allreduce_loop(w: &rcomm::World, limit: Duration, t_ready: Instant) {
    let v = vec![1f32; 16 * 1024];
    let mut out = vec![0f32; v.len()];
    let t0 = Instant::now();
    let mut rounds = 0u64;
    while t0.elapsed() < limit {
        if let Err(e) = w.allreduce(&v, &mut out, Op::Sum) {
            println!(
                "error rank {} host {} after {} ms: {e}",
                w.rank(),
                host(),
                t_ready.elapsed().as_millis()
            );
            if std::env::var_os("RT_HOLD").is_some() {
                // Leave the ending to the launcher: its report then names the rank that died,
                // not a survivor that noticed first.
                std::thread::sleep(Duration::from_secs(30));
            }
            std::process::exit(3);
        }
        rounds += 1;
    }
    println!("ok loop rank {} rounds {rounds}", w.rank());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let w = rcomm::init().expect("init");
    match args.get(1).map(String::as_str) {
        Some("transports") => {
            let layout: Vec<u32> = args
                .get(2)
                .map(|a| a.split(',').filter_map(|x| x.parse().ok()).collect())
                .unwrap_or_default();
            transports(&w, &layout);
        }
        Some("die") => {
            let victim: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(0);
            w.barrier().expect("barrier");
            if w.rank() == victim {
                println!("rank {victim} on {} aborts", host());
                std::process::abort();
            }
            allreduce_loop(&w, Duration::from_secs(30), Instant::now());
        }
        Some("loop") => {
            let secs: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20);
            let v = vec![1f32; 4];
            let mut out = vec![0f32; 4];
            w.allreduce(&v, &mut out, Op::Sum).expect("first allreduce");
            let t = Instant::now();
            if w.rank() == 0 {
                println!("ready");
            }
            allreduce_loop(&w, Duration::from_secs(secs), t);
        }
        m => {
            eprintln!("unknown mode {m:?}");
            std::process::exit(2)
        }
    }
}
