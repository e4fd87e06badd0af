//! Rank program for the runtime tests. `rt_world MODE`:
//! - `basic`: init, check what the launcher and the KVS said against the environment, print
//!   one `ok` line per rank.
//! - `kvs ROUNDS`: several put/fence/get rounds straight on the bootstrap, values depending on
//!   (rank, round, peer) so stale or crossed values fail.
//! - `init-error`: expects init to fail; prints `init error: ...` and exits 3.
//! - `notice`: rank 1 exits with code 1 after init; the others wait for the launcher's notice
//!   and print `saw failure of rank R: HOW` (or `no notice`), then keep running until stopped.
//! - `exit0`: as `notice`, but rank 1 calls exit(0) without finalizing.
//! - `abort`: rank 1 calls abort(7, ...); the others sleep.
use rcomm_runtime::auth::Secret;
use rcomm_runtime::bootstrap::{Bootstrap, KvsClient};
use rcomm_runtime::config::Config;
use std::time::{Duration, Instant};

fn env_u32(k: &str) -> u32 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{k} missing"))
}

fn basic() {
    let w = rcomm::init().expect("init");
    assert_eq!(w.rank(), env_u32("RCOMM_RANK"));
    assert_eq!(w.size(), env_u32("RCOMM_SIZE"));
    assert_eq!(w.job_id(), std::env::var("RCOMM_JOB_ID").unwrap());
    let mut pids = std::collections::BTreeSet::new();
    for r in 0..w.size() {
        let p = w.peer(r).unwrap();
        assert!(w.same_node(r).unwrap(), "rank {r} should be on this node");
        assert!(pids.insert(p.pid), "duplicate pid {}", p.pid);
    }
    assert_eq!(w.peer(w.rank()).unwrap().pid, std::process::id());
    assert!(w.peer(w.size()).is_err());
    println!(
        "ok rank {} size {} peers {}",
        w.rank(),
        w.size(),
        pids.len()
    );
}

fn kvs(rounds: u32) {
    let cfg = Config::from_env().unwrap();
    let env = cfg.launch.expect("started by rcomm-run");
    let secret = Secret::from_fd(env.secret_fd).unwrap();
    let mut c = KvsClient::connect(env, &secret).unwrap();
    let (rank, size) = (c.rank(), c.size());
    let val = |r: u32, round: u32| {
        format!("r{r}-i{round}-{}", (r * 7919 + round * 104729) % 1000003).into_bytes()
    };
    for round in 0..rounds {
        c.put(&format!("k{round}"), &val(rank, round)).unwrap();
        c.fence().unwrap();
        for p in 0..size {
            assert_eq!(
                c.get(p, &format!("k{round}")).unwrap(),
                val(p, round),
                "round {round} from {p}"
            );
        }
    }
    c.finalize().unwrap();
    println!("ok kvs rank {rank} rounds {rounds}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("basic") => basic(),
        Some("kvs") => kvs(args.get(2).and_then(|a| a.parse().ok()).unwrap_or(3)),
        Some("init-error") => match rcomm::init() {
            Ok(w) => {
                println!("unexpected init success at rank {}", w.rank());
                std::process::exit(0)
            }
            Err(e) => {
                println!("init error: {e}");
                std::process::exit(3)
            }
        },
        Some(mode @ ("notice" | "exit0")) => {
            let w = rcomm::init().expect("init");
            if w.rank() == 1 {
                // `exit0`: leaving without finalizing while peers may wait is a failure too.
                std::process::exit(if mode == "notice" { 1 } else { 0 });
            }
            let t0 = Instant::now();
            match w.wait_for_failure(Duration::from_secs(5)).first() {
                Some((r, how)) => println!(
                    "saw failure of rank {r} after {} ms: {how}",
                    t0.elapsed().as_millis()
                ),
                None => println!("no notice"),
            }
            std::thread::sleep(Duration::from_secs(30));
        }
        Some("abort") => {
            let w = rcomm::init().expect("init");
            if w.rank() == 1 {
                w.abort(7, "rank 1 gives up");
            }
            std::thread::sleep(Duration::from_secs(30));
        }
        m => {
            eprintln!("unknown mode {m:?}");
            std::process::exit(2)
        }
    }
}
