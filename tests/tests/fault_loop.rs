//! The fault loop: 50 trials of 4 ranks running mixed collectives and point-to-point, one rank
//! killed with SIGKILL from outside at a random moment — also while the ranks are still
//! starting (bootstrap, shared-memory setup). Every survivor's operation must fail naming the
//! killed rank and its host, no earlier than the kill and within 5 s of it; the launcher must
//! exit non-zero, and no process and nothing in `/dev/shm` may be left. Bounded: each trial has
//! a 30 s deadline, and the loop fails (saying how far it got) past 420 s.
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
        assert!(
            start.elapsed() < Duration::from_secs(420),
            "fault loop: only {done} of {TRIALS} trials within 420 s"
        );
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
            // Every rank's process exists before the clock for the random moment starts; the
            // kill may still land in start-up (bootstrap, shared-memory setup) or later.
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
            // An error before the kill has another cause: a failure, not an early report.
            assert!(
                ms >= killed_at,
                "{ctx}: rank {r} erred {} ms before the kill: {msg}\n{out}",
                killed_at - ms
            );
            let after = ms - killed_at;
            assert!(
                after <= 5000,
                "{ctx}: rank {r} erred {after} ms after the kill\n{out}"
            );
            // The world rank and its host, also during start-up (not a local rank).
            assert!(
                msg.contains(&format!("rank {victim} (host ")),
                "{ctx}: rank {r} must name rank {victim} and its host: {msg}\n{out}"
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
    assert!(leaked.is_empty(), "left in /dev/shm: {leaked:?}");
    assert_eq!(done, TRIALS, "every trial must run");
    eprintln!("fault loop: {done} trials in {:?}", start.elapsed());
}

/// A kill that lands before the victim's init even began: the survivors wait in the bootstrap
/// for it, and each one's `init` fails naming the victim's world rank and host, at once.
#[test]
fn a_rank_killed_before_its_init_is_named_with_its_host_by_every_survivors_init() {
    let shm0 = dev_shm();
    let prog = format!(
        "if [ \"$RCOMM_RANK\" = 2 ]; then kill -9 $$; fi; exec {}",
        test_program("rt_chaos")
    );
    let out = Job::new(RANKS, &["--on-failure", "continue", "sh", "-c", &prog])
        .deadline(Duration::from_secs(30))
        .run();
    assert_ne!(out.code(), 0, "{out}");
    let host = rcomm_runtime::identity::hostname();
    for r in [0, 1, 3] {
        let msg = out
            .rank_lines(r)
            .into_iter()
            .find_map(|l| l.strip_prefix("error at "))
            .unwrap_or_else(|| panic!("rank {r} reported no error\n{out}"));
        assert!(
            msg.contains(&format!("rank 2 (host {host})")),
            "rank {r} must name rank 2 and its host {host}: {msg}\n{out}"
        );
    }
    assert!(out.elapsed < Duration::from_secs(10), "{out}");
    assert_eq!(dev_shm(), shm0, "nothing may be left in /dev/shm");
}
