//! TCP for real networks, through `rcomm-run`: several streams per peer keep MPI order, and
//! an idle receiver on a silently cut link gets `PeerLost` within `RCOMM_TCP_TIMEOUT`.
//!
//! The network tests use two network namespaces as two hosts, built here as root:
//!
//! ```text
//!   root namespace: bridge rc50br 10.77.50.254/24  ── the launcher's KVS listens here
//!      ├─ veth rc50h0 ══ rc50v0 10.77.50.1  in namespace rc50n0 (rank 0)
//!      └─ veth rc50h1 ══ rc50v1 10.77.50.2  in namespace rc50n1 (rank 1)
//! ```
//!
//! `rcomm-run` stays in the root namespace and starts each rank through
//! `sh -c 'exec ip netns exec rc50n$RCOMM_RANK prog args'` (the launcher sets `RCOMM_RANK`, and
//! the secret's descriptor survives both `exec`s). Its KVS would listen on loopback, which the
//! namespaces cannot reach; with `RCOMM_SOCKET_IFNAME=rc50` it listens on the bridge instead,
//! and every rank binds its TCP listener to its own `rc50v*` address (all names share the
//! prefix). A cut is `ip link set rc50h1 down` on the bridge side: packets to and from rank 1
//! vanish without any error, as on a pulled cable. Without root (or `ip`), these tests say so
//! and pass — except under `CI=true`, where they must run.

use rcomm_tests::{Job, JobOutput, test_program};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The namespaces and bridge are one fixture; tests using them take turns.
static NET: Mutex<()> = Mutex::new(());

fn ip(args: &str) -> bool {
    Command::new("ip")
        .args(args.split_whitespace())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn sh(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", cmd])
        .status()
        .is_ok_and(|s| s.success())
}

/// Two namespaces on a bridge (see the module docs); removed again on drop, also after a
/// failed assertion.
struct Pair;

impl Pair {
    fn up() -> Option<Self> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root || !ip("-V") {
            rcomm_tests::skip("network-namespace tests need root and iproute2");
            return None;
        }
        Self::down();
        // Deleting a namespace frees its veth pair asynchronously: the previous test's rc50h*
        // may still exist for a moment, and adding it again would fail.
        let t0 = std::time::Instant::now();
        while (0..2).any(|i| ip(&format!("link show rc50h{i}"))) || ip("link show rc50br") {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the previous test's rc50 links did not go away"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut ok = ip("link add rc50br type bridge")
            && ip("addr add 10.77.50.254/24 dev rc50br")
            && ip("link set rc50br up");
        for i in 0..2 {
            ok = ok
                && ip(&format!("netns add rc50n{i}"))
                && ip(&format!(
                    "link add rc50h{i} type veth peer name rc50v{i} netns rc50n{i}"
                ))
                && ip(&format!("link set rc50h{i} master rc50br up"))
                && ip(&format!(
                    "-n rc50n{i} addr add 10.77.50.{}/24 dev rc50v{i}",
                    i + 1
                ))
                && ip(&format!("-n rc50n{i} link set rc50v{i} up"))
                && ip(&format!("-n rc50n{i} link set lo up"));
        }
        if !ok {
            // No Pair to drop: leave nothing behind before failing.
            Self::down();
            panic!("setting up network namespaces rc50n0/rc50n1 failed");
        }
        Some(Pair)
    }

    fn down() {
        for i in 0..2 {
            ip(&format!("netns del rc50n{i}"));
        }
        ip("link del rc50br");
    }

    /// A two-rank job, rank r in namespace rc50n<r>.
    fn job(&self, args: &[&str]) -> Job {
        let mut a = vec![
            "sh",
            "-c",
            r#"exec ip netns exec rc50n$RCOMM_RANK "$0" "$@""#,
        ];
        a.extend_from_slice(args);
        Job::new(2, &a).env("RCOMM_SOCKET_IFNAME", "rc50")
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        Self::down();
    }
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    NET.lock().unwrap_or_else(|p| p.into_inner())
}

/// Checks `rt_tcp order` output: both ranks saw every message in order, over TCP.
fn assert_ordered(out: &JobOutput, k: usize, what: &str) {
    assert_eq!(out.code(), 0, "{what}\n{out}");
    for r in 0..2 {
        let l = out.rank_lines(r);
        let line = l
            .iter()
            .find(|l| l.starts_with(&format!("ok order {k} ")))
            .unwrap_or_else(|| panic!("{what}: rank {r} did not finish\n{out}"));
        let f: Vec<&str> = line.split_whitespace().collect();
        assert!(
            f[4].parse::<u64>().unwrap() > (k as u64) << 19,
            "{what}: TCP carried it\n{out}"
        );
        assert_eq!(f[6], "0", "{what}: no shared memory\n{out}");
    }
}

#[test]
fn tcp_streams_keep_mpi_order_of_interleaved_small_and_large_messages() {
    for streams in ["1", "4"] {
        let out = Job::new(2, &[&test_program("rt_tcp"), "order", "60"])
            .env("RCOMM_TRANSPORT", "tcp")
            .env("RCOMM_TCP_STREAMS", streams)
            .deadline(Duration::from_secs(60))
            .run();
        assert_ordered(&out, 60, &format!("loopback, {streams} streams"));
    }
}

#[test]
fn tcp_between_network_namespaces_keeps_order_with_4_streams_also_on_a_shaped_link() {
    let _g = lock();
    let Some(pair) = Pair::up() else { return };
    let prog = test_program("rt_tcp");
    let out = pair
        .job(&[&prog, "order", "60"])
        .env("RCOMM_TCP_STREAMS", "4")
        .deadline(Duration::from_secs(60))
        .run();
    assert_ordered(&out, 60, "namespaces, 4 streams");
    // A token bucket towards rank 1 (400 Mbit/s): its queue reorders nothing, but it makes the
    // streams drain at different moments, so chunks and later small messages interleave.
    assert!(
        sh("tc qdisc add dev rc50h1 root tbf rate 400mbit burst 32kb latency 20ms"),
        "tc tbf"
    );
    let t0 = Instant::now();
    let out = pair
        .job(&[&prog, "order", "30"])
        .env("RCOMM_TCP_STREAMS", "4")
        .deadline(Duration::from_secs(90))
        .run();
    assert_ordered(&out, 30, "namespaces, 4 streams, 400 Mbit/s");
    eprintln!("shaped run took {:?}", t0.elapsed());
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

#[test]
fn an_idle_receiver_on_a_cut_link_gets_peer_lost_within_the_tcp_timeout() {
    let _g = lock();
    let Some(pair) = Pair::up() else { return };
    let dir = std::env::temp_dir().join(format!("rcomm-tcp-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ready = dir.join("ready");
    let ready_s = ready.to_string_lossy().into_owned();
    let timeout_s = 2u128;
    let job = pair
        .job(&[&test_program("rt_tcp"), "cut", &ready_s])
        .env("RCOMM_TCP_TIMEOUT", &timeout_s.to_string())
        .deadline(Duration::from_secs(60))
        .spawn();
    let wait_for = |p: &std::path::Path, secs: u64| {
        let t = Instant::now();
        while !p.exists() && t.elapsed() < Duration::from_secs(secs) {
            std::thread::sleep(Duration::from_millis(20));
        }
        p.exists()
    };
    let started = wait_for(&ready, 30);
    // Both ranks now wait idle in a receive from the other: nothing is in flight.
    std::thread::sleep(Duration::from_millis(300));
    let cut_at = now_ms();
    let cut = ip("link set rc50h1 down");
    let done = [0, 1].map(|r| wait_for(&dir.join(format!("ready.done{r}")), timeout_s as u64 + 10));
    // Heal, so that both ranks' goodbyes reach the launcher and the job ends normally.
    ip("link set rc50h1 up");
    let out = job.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(started && cut, "setup: ready {started}, cut {cut}\n{out}");
    assert!(done.iter().all(|&d| d), "a rank never saw the cut\n{out}");
    assert_eq!(out.code(), 0, "{out}");
    for (r, peer) in [(0u32, 1u32), (1, 0)] {
        let l = out.rank_lines(r);
        let line = l
            .iter()
            .find_map(|l| l.strip_prefix(&format!("lost rank {peer} host ")))
            .unwrap_or_else(|| panic!("rank {r}: no PeerLost naming rank {peer}\n{out}"));
        let at: u128 = line
            .split_once(" at ")
            .and_then(|(_, rest)| rest.split(':').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        let after = at.saturating_sub(cut_at);
        eprintln!("rank {r} got PeerLost(rank {peer}) {after} ms after the cut: {line}");
        assert!(line.contains("RCOMM_TCP_TIMEOUT"), "{line}");
        assert!(
            after <= timeout_s * 1000 + 5000,
            "rank {r}: PeerLost {after} ms after the cut (timeout {timeout_s} s)\n{out}"
        );
    }
}
