//! Security of the wire, end to end: while a real job runs, every TCP listener it has — the
//! launcher's key-value store, each rank's TCP transport listener, and in a torchrun-style job
//! the store rank 0 serves — is hit with garbage, truncated frames, an oversized length, a
//! client trickling bytes, silent clients (one, and a flood larger than the handshake cap) and
//! a wrong secret. Each must be closed within a bound, and the job must finish with correct
//! results and exit 0. The daemon's control channel (ssh's stdio, not a listener) is fed the
//! same kinds of bytes directly and must exit with an error, having started nothing.
//!
//! Listeners are found from outside, as an attacker would: the job's processes (by the test
//! marker in their environment), their socket inodes, and the listening sockets in
//! `/proc/<pid>/net/tcp`. Everything binds to loopback (`RCOMM_SOCKET_IFNAME==lo`), and every
//! address attacked is checked to be loopback.

use rcomm_runtime::auth::{self, Secret};
use rcomm_runtime::wire::{self, auth_kind};
use rcomm_tests::{Job, free_port, processes_with_env, rcomm_run, test_program};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How soon a listener must have closed a bad connection. Its handshake deadline is 1 s (a
/// flood beyond the cap waits one more round); the rest is slack for a loaded 2-core machine.
const BOUND: Duration = Duration::from_secs(5);

/// Silent connections opened at once to one listener: more than the KVS admits into its
/// handshake at a time (64), so some wait in the backlog.
const FLOOD: usize = 70;

/// Socket inodes of a process's descriptors.
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let mut out = HashSet::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for e in dir.flatten() {
        if let Ok(t) = std::fs::read_link(e.path()) {
            let t = t.to_string_lossy();
            if let Some(n) = t
                .strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse().ok())
            {
                out.insert(n);
            }
        }
    }
    out
}

/// Listening IPv4 TCP sockets of `pid` (from its network namespace's table).
fn listeners(pid: u32) -> Vec<SocketAddr> {
    let inodes = socket_inodes(pid);
    let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")) else {
        return vec![];
    };
    let mut out = vec![];
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] != "0A" {
            continue; // not LISTEN
        }
        let Ok(inode) = f[9].parse::<u64>() else {
            continue;
        };
        if !inodes.contains(&inode) {
            continue;
        }
        let Some((ip, port)) = f[1].split_once(':') else {
            continue;
        };
        let (Ok(ip), Ok(port)) = (u32::from_str_radix(ip, 16), u16::from_str_radix(port, 16))
        else {
            continue;
        };
        // The kernel prints the address as the in-memory (network order) word in hex.
        out.push(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::from(ip.to_le_bytes())),
            port,
        ));
    }
    out
}

/// Every listener of the processes carrying `marker`, with its owner's pid; waits until at
/// least `want` are up.
fn job_listeners(marker: &str, want: usize) -> Vec<(u32, SocketAddr)> {
    let t0 = Instant::now();
    loop {
        let mut all = vec![];
        for pid in processes_with_env("RCOMMTEST_MARKER", marker) {
            for a in listeners(pid) {
                all.push((pid, a));
            }
        }
        if all.len() >= want {
            return all;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "only {} of {want} listeners came up: {all:?}",
            all.len()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// Reads until the listener closes the connection; how long that took, or why not.
fn closed_within(s: &mut TcpStream, since: Instant, bound: Duration) -> Result<Duration, String> {
    let mut buf = [0u8; 512];
    loop {
        let left = bound.saturating_sub(since.elapsed());
        if left.is_zero() {
            return Err(format!("still open after {bound:?}"));
        }
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match s.read(&mut buf) {
            Ok(0) => return Ok(since.elapsed()),
            Ok(_) => {} // the challenge, or a refusal
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Ok(since.elapsed());
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!("still open after {bound:?}"));
            }
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    assert!(
        addr.ip().is_loopback(),
        "only loopback may be attacked: {addr}"
    );
    TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"))
}

/// One bad client: sends `bytes` (a byte every `pace` if given) and must be dropped in time.
fn bad_client(addr: SocketAddr, what: &str, bytes: &[u8], pace: Option<Duration>) -> String {
    let mut s = connect(addr);
    let t0 = Instant::now();
    match pace {
        None => {
            let _ = s.write_all(bytes);
        }
        Some(p) => {
            for b in bytes {
                if s.write_all(&[*b]).is_err() || t0.elapsed() > BOUND {
                    break;
                }
                thread::sleep(p);
            }
        }
    }
    match closed_within(&mut s, t0, BOUND) {
        Ok(t) => format!("ok {what} closed after {t:?}"),
        Err(e) => format!("FAIL {addr} {what}: {e}"),
    }
}

/// Every attack on one listener, at once; one line per attack.
fn attack(addr: SocketAddr, purpose: &'static str) -> Vec<String> {
    let response = wire::encode_frame(auth_kind::RESPONSE, &[0x11; 68]);
    let mut oversized = wire::encode_frame(auth_kind::RESPONSE, b"");
    oversized[4..8].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let mut wrong_version = response.clone();
    wrong_version[2] = 0xee;
    let cases: Vec<(&str, Vec<u8>, Option<Duration>)> = vec![
        (
            "garbage",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            None,
        ),
        ("truncated header", response[..5].to_vec(), None),
        ("truncated payload", response[..20].to_vec(), None),
        ("oversized length", oversized, None),
        ("wrong version", wrong_version, None),
        ("silent", vec![], None),
        ("trickle", response, Some(Duration::from_millis(250))),
    ];
    let mut threads: Vec<thread::JoinHandle<Vec<String>>> = cases
        .into_iter()
        .map(|(what, bytes, pace)| {
            thread::spawn(move || vec![bad_client(addr, what, &bytes, pace)])
        })
        .collect();
    // A wrong secret, claiming rank 0 (which is connected for real meanwhile).
    threads.push(thread::spawn(move || {
        let mut s = connect(addr);
        let t0 = Instant::now();
        let r = auth::connect(&mut s, &Secret::random().unwrap(), purpose, 0);
        vec![match (r, closed_within(&mut s, t0, BOUND)) {
            (Err(_), Ok(t)) => format!("ok wrong secret closed after {t:?}"),
            (Ok(()), _) => format!("FAIL {addr} wrong secret: the handshake passed"),
            (Err(_), Err(e)) => format!("FAIL {addr} wrong secret: {e}"),
        }]
    }));
    // A flood of silent clients, more than the handshake cap.
    threads.push(thread::spawn(move || {
        let t0 = Instant::now();
        let mut socks: Vec<TcpStream> = (0..FLOOD).map(|_| connect(addr)).collect();
        let mut out = vec![];
        for s in &mut socks {
            if let Err(e) = closed_within(s, t0, 2 * BOUND) {
                out.push(format!("FAIL {addr} flood of {FLOOD} silent clients: {e}"));
                break;
            }
        }
        if out.is_empty() {
            out.push(format!(
                "ok flood of {FLOOD} silent clients closed after {:?}",
                t0.elapsed()
            ));
        }
        out
    }));
    threads
        .into_iter()
        .flat_map(|t| t.join().expect("attack thread"))
        .map(|l| format!("{addr} ({purpose}): {l}"))
        .collect()
}

fn assert_all_rejected(report: &[String]) {
    let failed: Vec<&String> = report.iter().filter(|l| l.contains("FAIL")).collect();
    assert!(
        failed.is_empty(),
        "listeners that kept a bad client:\n{}\nfull report:\n{}",
        failed
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        report.join("\n")
    );
}

fn stop_file(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!(
        "rcomm-wire-{tag}-{}-{}",
        std::process::id(),
        free_port()
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// Checks that every rank ran the same, positive number of checked iterations.
fn assert_ranks_ok(stdout: &str, n: u32) {
    let mut iters = HashSet::new();
    for r in 0..n {
        let line = stdout
            .lines()
            .find_map(|l| {
                let l = l.strip_prefix(&format!("[{r}] ")).unwrap_or(l);
                l.strip_prefix(&format!("ok wire rank {r}/{n} iterations "))
            })
            .unwrap_or_else(|| panic!("rank {r} did not finish\n{stdout}"));
        iters.insert(line.trim().parse::<u64>().expect("iterations"));
    }
    assert_eq!(iters.len(), 1, "ranks disagree on iterations\n{stdout}");
    assert!(!iters.contains(&0), "{stdout}");
}

#[test]
fn bad_clients_on_every_listener_of_a_running_job_are_rejected_and_the_job_is_unaffected() {
    let stop = stop_file("job");
    let job = Job::new(4, &[&test_program("rt_wire"), stop.to_str().unwrap(), "90"])
        .env("RCOMM_TRANSPORT", "tcp")
        .env("RCOMM_SOCKET_IFNAME", "=lo")
        .deadline(Duration::from_secs(120));
    let marker = job.marker().to_string();
    let running = job.spawn();
    let launcher = running.child.id();
    // The launcher's KVS and one TCP listener per rank.
    let found = job_listeners(&marker, 5);
    assert!(
        found.iter().any(|(pid, _)| *pid == launcher),
        "no KVS listener found: {found:?}"
    );
    let t0 = Instant::now();
    let attacks: Vec<_> = found
        .iter()
        .map(|&(pid, addr)| {
            let purpose = if pid == launcher { "kvs" } else { "tcp" };
            thread::spawn(move || attack(addr, purpose))
        })
        .collect();
    let report: Vec<String> = attacks
        .into_iter()
        .flat_map(|t| t.join().expect("attacker"))
        .collect();
    let attack_time = t0.elapsed();
    std::fs::write(&stop, b"stop").unwrap();
    let out = running.wait();
    let _ = std::fs::remove_file(&stop);
    eprintln!(
        "attacked {} listeners in {attack_time:?}:\n{}",
        found.len(),
        report.join("\n")
    );
    assert_all_rejected(&report);
    assert_eq!(out.code(), 0, "{out}");
    assert_ranks_ok(&out.stdout, 4);
    // Refusals are visible at the default log level, and say the job went on.
    assert!(
        out.stderr
            .contains("refused a connection to the job's key-value store"),
        "{out}"
    );
    assert!(out.stderr.contains("refused a connection from"), "{out}");
    assert!(out.elapsed < Duration::from_secs(100), "{out}");
}

#[test]
fn bad_clients_on_a_torchrun_style_store_are_rejected_and_the_job_is_unaffected() {
    // The store listens on MASTER_PORT + 1 (see launchers.rs).
    let master = free_port() - 1;
    let store: SocketAddr = format!("127.0.0.1:{}", master + 1).parse().unwrap();
    let stop = stop_file("store");
    let jobs: Vec<_> = (0..2u32)
        .map(|r| {
            Job::foreign(&test_program("rt_wire"), &[stop.to_str().unwrap(), "90"])
                .env("RANK", &r.to_string())
                .env("WORLD_SIZE", "2")
                .env("LOCAL_RANK", &r.to_string())
                .env("LOCAL_WORLD_SIZE", "2")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &master.to_string())
                .env("RCOMM_STORE_SECRET", "wire-security-test")
                .env("RCOMM_TRANSPORT", "tcp")
                .env("RCOMM_SOCKET_IFNAME", "=lo")
                .deadline(Duration::from_secs(120))
        })
        .collect();
    let markers: Vec<String> = jobs.iter().map(|j| j.marker().to_string()).collect();
    let running: Vec<_> = jobs.into_iter().map(|j| j.spawn()).collect();
    // Rank 0 serves the store and a TCP listener; rank 1 a TCP listener.
    let mut found = job_listeners(&markers[0], 2);
    found.extend(job_listeners(&markers[1], 1));
    assert!(
        found.iter().any(|(_, a)| *a == store),
        "the store {store} is not among {found:?}"
    );
    let attacks: Vec<_> = found
        .iter()
        .map(|&(_, addr)| {
            let purpose = if addr == store { "kvs" } else { "tcp" };
            thread::spawn(move || attack(addr, purpose))
        })
        .collect();
    let report: Vec<String> = attacks
        .into_iter()
        .flat_map(|t| t.join().expect("attacker"))
        .collect();
    std::fs::write(&stop, b"stop").unwrap();
    let outs: Vec<_> = running.into_iter().map(|r| r.wait()).collect();
    let _ = std::fs::remove_file(&stop);
    eprintln!("{}", report.join("\n"));
    assert_all_rejected(&report);
    for (r, out) in outs.iter().enumerate() {
        assert_eq!(out.code(), 0, "rank {r}: {out}");
    }
    let stdout: String = outs.iter().map(|o| o.stdout.as_str()).collect();
    assert_ranks_ok(&stdout, 2);
}

/// Runs `rcomm-run --daemon` with `input` on its stdin, then end-of-file.
fn daemon_with(input: &[u8]) -> (Option<i32>, Vec<u8>, String, Duration) {
    let mut c = Command::new(rcomm_run())
        .args(["--daemon", "wire-security"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the daemon");
    let t0 = Instant::now();
    let mut stdin = c.stdin.take().unwrap();
    let _ = stdin.write_all(input);
    drop(stdin);
    let mut out = c.stdout.take().unwrap();
    let mut err = c.stderr.take().unwrap();
    let (o, e) = (
        thread::spawn(move || {
            let mut v = vec![];
            let _ = out.read_to_end(&mut v);
            v
        }),
        thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        }),
    );
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s.code();
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = c.kill();
            let _ = c.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(10));
    };
    (status, o.join().unwrap(), e.join().unwrap(), t0.elapsed())
}

#[test]
fn garbage_on_the_daemon_control_channel_is_an_error_and_starts_nothing() {
    // What the head would send first: a job frame (kind 0x41).
    let job_kind = 0x41;
    let mut oversized = wire::encode_frame(job_kind, b"");
    oversized[4..8].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let mut version = wire::encode_frame(job_kind, &[0; 16]);
    version[2] = 0xee;
    let truncated = wire::encode_frame(job_kind, &[0; 64])[..30].to_vec();
    // A whole frame whose job does not decode: an argument count of 2^32 - 1.
    let mut lying = vec![0u8; 4];
    lying.extend_from_slice(&u32::MAX.to_le_bytes());
    let lying = wire::encode_frame(job_kind, &lying);
    for (what, input, why) in [
        ("garbage", b"GET / HTTP/1.1\r\n\r\n".to_vec(), "bad magic"),
        ("oversized length", oversized, "exceeds the limit"),
        ("wrong version", version, "wire version"),
        ("truncated frame", truncated, "middle of a frame"),
        ("undecodable job", lying, "too many items"),
    ] {
        let (code, stdout, stderr, took) = daemon_with(&input);
        assert_eq!(code, Some(2), "{what}: {stderr}");
        assert!(took < Duration::from_secs(10), "{what}: {took:?}");
        assert!(
            stderr.contains(why) && stderr.contains("nothing was started"),
            "{what}: {stderr}"
        );
        // Its only message is its hello: no rank was started.
        let (h, _, used) = wire::decode_frame(&stdout, 1 << 20)
            .expect("a frame")
            .expect("the hello");
        assert_eq!(h.kind, 0x40, "{what}: hello first");
        assert_eq!(
            used,
            stdout.len(),
            "{what}: the daemon said more than hello"
        );
    }
    // End-of-file before any job: the head is gone; a quiet exit 0.
    let (code, _, stderr, _) = daemon_with(b"");
    assert_eq!(code, Some(0), "{stderr}");
}
