//! The fault loop: 50 trials of 4 ranks running mixed collectives and point-to-point, one rank
//! killed with SIGKILL from outside at a random moment. Every survivor's operation must fail
//! naming the killed rank within 5 s of the kill, the launcher must exit non-zero, and no
//! process and no shared-memory segment of the job may be left. Bounded: each trial has a
//! 30 s deadline and the loop stops early (saying so) past 240 s.
use rcomm_tests::{Job, dev_shm, processes_with_env, test_program, wait_no_processes};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TRIALS: u64 = 50;
const RANKS: u32 = 4;

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// The pid of rank `rank` of the job carrying `marker`, once it runs the test program.
fn rank_pid(marker: &str, rank: u32) -> Option<u32> {
    processes_with_env("RCOMMTEST_MARKER", marker)
        .into_iter()
        .find(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            comm.trim() == "rt_chaos"
                && env
                    .split(|&b| b == 0)
                    .any(|kv| kv == format!("RCOMM_RANK={rank}").as_bytes())
        })
}

/// A small deterministic generator (xorshift), so a failing trial can be replayed.
fn rng(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move |bound| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % bound
    }
}

#[test]
fn fifty_random_kills_are_named_by_every_survivor_within_5_s_and_leave_nothing_behind() {
    let start = Instant::now();
    let shm0 = dev_shm();
    let mut done = 0;
    for trial in 0..TRIALS {
        if start.elapsed() > Duration::from_secs(240) {
            eprintln!("fault loop: stopped after {done} trials (240 s budget)");
            break;
        }
        let mut rand = rng(trial + 1);
        let victim = rand(u64::from(RANKS)) as u32;
        let delay = Duration::from_millis(20 + rand(400));
        let transport = if trial % 2 == 0 { "auto" } else { "tcp" };
        let job = Job::new(
            RANKS,
            &["--on-failure", "continue", &test_program("rt_chaos"), "20"],
        )
        .env("RCOMM_TRANSPORT", transport)
        .deadline(Duration::from_secs(30));
        let marker = job.marker().to_string();
        let running = job.spawn();
        let t0 = Instant::now();
        let pid = loop {
            // Every rank up (init done) before the clock for the random moment starts.
            let all: Vec<Option<u32>> = (0..RANKS).map(|r| rank_pid(&marker, r)).collect();
            if all.iter().all(Option::is_some) {
                break all[victim as usize].expect("checked");
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "trial {trial}: ranks did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        std::thread::sleep(delay);
        let killed_at = now_ms();
        // SAFETY: kill with a pid we just found carrying this job's marker.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let out = running.wait();
        let ctx = format!("trial {trial} ({transport}, rank {victim} killed after {delay:?})");
        assert_ne!(out.code(), 0, "{ctx}: {out}");
        for r in (0..RANKS).filter(|&r| r != victim) {
            let lines = out.rank_lines(r);
            let err = lines
                .iter()
                .find_map(|l| l.strip_prefix("error at "))
                .unwrap_or_else(|| panic!("{ctx}: rank {r} reported no error\n{out}"));
            let (ms, msg) = err.split_once(": ").expect("error at MS: message");
            let ms: u128 = ms.parse().expect("milliseconds");
            let after = ms.saturating_sub(killed_at);
            assert!(
                after <= 5000,
                "{ctx}: rank {r} erred {after} ms after the kill\n{out}"
            );
            assert!(
                msg.contains(&format!("rank {victim} ")),
                "{ctx}: rank {r} must name rank {victim}: {msg}\n{out}"
            );
            assert!(
                !msg.starts_with("collective:"),
                "{ctx}: rank {r} must name the operation, not just \"collective\": {msg}\n{out}"
            );
        }
        let left = wait_no_processes("RCOMMTEST_MARKER", &marker, Duration::from_secs(5));
        assert!(left.is_empty(), "{ctx}: processes left: {left:?}");
        done += 1;
    }
    let leaked: Vec<String> = dev_shm().difference(&shm0).cloned().collect();
    assert!(leaked.is_empty(), "segments left: {leaked:?}");
    assert!(done >= 10, "only {done} trials ran");
    eprintln!("fault loop: {done} trials in {:?}", start.elapsed());
}
