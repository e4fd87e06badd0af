//! `rcomm-run` with real processes. Rank programs are mostly `sh -c` snippets; tests that need
//! a real key-value-store client re-run this test executable as the rank program (see
//! [`helper_rank`]). Every wait is bounded, so a launcher bug fails a test instead of hanging
//! the suite.

use rcomm_runtime::auth::Secret;
use rcomm_runtime::bootstrap::{Bootstrap, KvsClient};
use rcomm_runtime::config::Config;
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::thread;
use std::time::{Duration, Instant};

const RUN: &str = env!("CARGO_BIN_EXE_rcomm-run");
/// Selects the helper's role when this test executable runs as a rank.
const ROLE: &str = "LAUNCHER_TEST_ROLE";

struct Outcome {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Outcome {
    fn code(&self) -> i32 {
        self.status.code().unwrap_or_else(|| {
            panic!(
                "launcher killed by a signal: {:?}\nstderr:\n{}",
                self.status, self.stderr
            )
        })
    }
}

fn launcher(args: &[&str]) -> Command {
    let mut c = Command::new(RUN);
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Collects a pipe in a thread; the receiver yields its lines as they come.
fn lines_of(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(l) = line else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

fn slurp(r: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(r).read_to_string(&mut s);
        s
    })
}

/// Waits for `child` up to `limit`; on timeout kills it (its watchdog then cleans up) and panics.
fn wait_bounded(child: &mut Child, limit: Duration) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rcomm-run did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(5));
    }
}

fn run_cmd(mut cmd: Command, stdin: Option<&[u8]>, limit: Duration) -> Outcome {
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let t0 = Instant::now();
    let mut child = cmd.spawn().expect("start rcomm-run");
    if let Some(data) = stdin {
        let mut w = child.stdin.take().unwrap();
        w.write_all(data).unwrap();
    }
    let out = slurp(child.stdout.take().unwrap());
    let err = slurp(child.stderr.take().unwrap());
    let status = wait_bounded(&mut child, limit);
    let elapsed = t0.elapsed();
    Outcome {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        elapsed,
    }
}

fn run(args: &[&str]) -> Outcome {
    run_cmd(launcher(args), None, Duration::from_secs(20))
}

/// Receives lines until `pred` has matched `count` of them (returns all lines seen).
fn await_lines(
    rx: &Receiver<String>,
    count: usize,
    limit: Duration,
    pred: impl Fn(&str) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut seen = Vec::new();
    let mut hits = 0;
    while hits < count {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) => {
                hits += usize::from(pred(&l));
                seen.push(l);
            }
            Err(_) => panic!("waited {limit:?} for {count} matching lines; got {seen:?}"),
        }
    }
    seen
}

fn drain(rx: &Receiver<String>, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut v = Vec::new();
    while let Ok(l) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        v.push(l);
    }
    v
}

/// Pids of live processes whose environment carries `RCOMM_JOB_ID=job`.
fn job_processes(job: &str) -> Vec<u32> {
    let needle = format!("RCOMM_JOB_ID={job}");
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig} {pid}");
}

fn scratch_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rcomm-launcher-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cpus_of_this_process() -> String {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// The rank side for tests that need a real key-value-store client.

/// Not a test of its own: when `LAUNCHER_TEST_ROLE` is set, this test executable is a rank
/// started by `rcomm-run` and plays that role; otherwise it does nothing.
#[test]
fn helper_rank() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let launch = Config::from_env()
        .expect("config")
        .launch
        .expect("started by rcomm-run");
    let secret = Secret::from_fd(launch.secret_fd).expect("secret");
    let rank = launch.rank;
    let mut kvs = KvsClient::connect(launch, &secret).expect("connect to the launcher's KVS");
    // Everyone connected before anyone fails, so every survivor is there to be told.
    kvs.put("hello", b"x").unwrap();
    kvs.fence().unwrap();
    let board = kvs.notices();
    match (role.as_str(), rank) {
        ("notice", 1) => std::process::exit(1),
        ("notice", _) => {
            let t0 = Instant::now();
            let n = board.wait_for(Duration::from_secs(2), |n| {
                n.failed.iter().any(|(r, _)| *r == 1)
            });
            match n.failed.iter().find(|(r, _)| *r == 1) {
                Some((_, how)) => println!(
                    "saw failure of rank 1 ({how}) after {:.2} s",
                    t0.elapsed().as_secs_f64()
                ),
                None => println!("no notice within 2 s"),
            }
            std::process::exit(0)
        }
        ("abort", 1) => {
            kvs.abort(7, "boom").unwrap();
            thread::sleep(Duration::from_secs(30));
            std::process::exit(0)
        }
        ("abort", _) => {
            let n = board.wait_for(Duration::from_secs(5), |n| n.abort.is_some());
            if let Some((from, code, msg)) = n.abort {
                println!("saw abort from rank {from} code {code}: {msg}");
            }
            thread::sleep(Duration::from_secs(30));
            std::process::exit(0)
        }
        _ => panic!("unknown role {role}"),
    }
}

fn helper_job(role: &str, extra: &[&str]) -> Outcome {
    let me = std::env::current_exe().unwrap();
    let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    args.extend(["-n", "2"].map(String::from));
    args.push(me.to_string_lossy().into_owned());
    args.extend(
        [
            "helper_rank",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ]
        .map(String::from),
    );
    let mut cmd = Command::new(RUN);
    cmd.args(&args)
        .env(ROLE, role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    run_cmd(cmd, None, Duration::from_secs(20))
}

// ---------------------------------------------------------------------------------------------
// Exit status.

#[test]
fn all_ranks_exiting_zero_gives_status_zero() {
    let o = run(&["-n", "3", "true"]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert!(o.stderr.is_empty(), "no messages on success: {}", o.stderr);
}

#[test]
fn a_rank_exit_code_becomes_the_job_status_and_its_line_names_rank_and_code() {
    let o = run(&[
        "-n",
        "3",
        "sh",
        "-c",
        "[ $RCOMM_RANK = 2 ] && exit 3; exit 0",
    ]);
    assert_eq!(o.code(), 3);
    let line = o
        .stderr
        .lines()
        .find(|l| l.starts_with("rcomm-run: rank 2 "))
        .unwrap_or_else(|| panic!("{}", o.stderr));
    assert!(line.contains("exited with code 3 after"), "{line}");
}

#[test]
fn a_rank_killed_by_a_signal_gives_128_plus_the_signal() {
    let o = run(&[
        "-n",
        "2",
        "sh",
        "-c",
        "[ $RCOMM_RANK = 1 ] && kill -9 $$; exit 0",
    ]);
    assert_eq!(o.code(), 137);
    assert!(
        o.stderr.contains("rank 1 (pid ") && o.stderr.contains("killed by signal 9 (SIGKILL)"),
        "{}",
        o.stderr
    );
}

#[test]
fn missing_program_exits_127_and_zero_ranks_is_a_usage_error() {
    let o = run(&["-n", "2", "rcomm-no-such-program-xyz"]);
    assert_eq!(o.code(), 127);
    assert!(
        o.stderr
            .contains("rcomm-no-such-program-xyz: command not found"),
        "{}",
        o.stderr
    );
    let o = run(&["-n", "0", "true"]);
    assert_eq!(o.code(), 2);
    assert!(o.stderr.contains("at least 1"), "{}", o.stderr);
    let o = run(&["-np", "2", "sh", "-c", "echo $RCOMM_SIZE"]);
    assert_eq!(o.code(), 0, "-np is accepted: {}", o.stderr);
    assert!(o.stdout.contains("[1] 2"), "{}", o.stdout);
}

// ---------------------------------------------------------------------------------------------
// Environment and the secret.

#[test]
fn every_rank_gets_its_environment_and_the_secret_only_through_a_descriptor() {
    let script = r#"echo "env $RCOMM_RANK $RCOMM_SIZE $RCOMM_LOCAL_RANK $RCOMM_LOCAL_SIZE $RCOMM_JOB_ID $RCOMM_KVS_ADDR $RCOMM_SECRET_FD $FOO $BAR"
echo "bytes $(wc -c < /proc/self/fd/$RCOMM_SECRET_FD)"
echo "hex $(od -An -tx1 -v /proc/self/fd/$RCOMM_SECRET_FD | tr -d ' \n')"
sleep 1"#;
    let mut cmd = launcher(&["-n", "3", "-x", "FOO=bar", "-x", "BAR", "sh", "-c", script]);
    // An outer job's variables must not leak into this one.
    cmd.env("RCOMM_RANK", "7")
        .env("RCOMM_SIZE", "9")
        .env("RCOMM_JOB_ID", "outer")
        .env("BAR", "baz");
    let mut child = cmd.spawn().unwrap();
    let launcher_pid = child.id();
    let rx = lines_of(child.stdout.take().unwrap());
    let err = slurp(child.stderr.take().unwrap());
    let mut lines = await_lines(&rx, 3, Duration::from_secs(10), |l| l.contains("] hex "));
    // While the ranks sleep: no command line on this machine holds the secret.
    let hex: HashSet<String> = lines
        .iter()
        .filter_map(|l| l.split_once("] hex ").map(|(_, h)| h.to_string()))
        .collect();
    assert_eq!(hex.len(), 1, "one secret per job: {lines:?}");
    let hex = hex.into_iter().next().unwrap();
    assert_eq!(hex.len(), 64, "{hex}");
    let raw: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let job_line = lines
        .iter()
        .find(|l| l.starts_with("[0] env "))
        .unwrap()
        .clone();
    let job_id = job_line.split(' ').nth(6).unwrap().to_string();
    let job_pids = job_processes(&job_id);
    assert!(
        job_pids.len() >= 4,
        "3 ranks and the watchdog carry the job id: {job_pids:?}"
    );
    let mut scanned = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        scanned += 1;
        assert!(
            !cmdline.windows(32).any(|w| w == raw.as_slice()),
            "secret bytes in argv of {:?}",
            e.path()
        );
        let text = String::from_utf8_lossy(&cmdline).to_lowercase();
        assert!(!text.contains(&hex), "secret hex in argv of {:?}", e.path());
    }
    assert!(scanned > 4);
    assert!(std::fs::read(format!("/proc/{launcher_pid}/cmdline")).is_ok());
    let status = wait_bounded(&mut child, Duration::from_secs(10));
    assert!(status.success(), "{}", err.join().unwrap());
    lines.extend(drain(&rx, Duration::from_secs(2)));
    let mut ports = HashSet::new();
    for r in 0..3 {
        let env = lines
            .iter()
            .find(|l| l.starts_with(&format!("[{r}] env ")))
            .unwrap();
        let f: Vec<&str> = env.split(' ').collect();
        assert_eq!(
            &f[2..6],
            [r.to_string(), "3".into(), r.to_string(), "3".into()],
            "{env}"
        );
        assert_eq!(f[6], job_id, "same job id everywhere");
        assert!(
            job_id.len() == 16 && job_id.chars().all(|c| c.is_ascii_hexdigit()),
            "{job_id}"
        );
        assert!(f[7].starts_with("127.0.0.1:"), "{env}");
        ports.insert(f[7].to_string());
        assert!(f[8].parse::<u32>().unwrap() > 2, "{env}");
        assert_eq!(&f[9..], ["bar", "baz"], "-x exports: {env}");
        assert!(lines.contains(&format!("[{r}] bytes 32")), "{lines:?}");
    }
    assert_eq!(ports.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Output and input.

#[test]
fn output_is_prefixed_per_rank_in_whole_lines_and_the_partial_last_line_is_flushed() {
    let script = r#"i=0; while [ $i -lt 200 ]; do echo "line $RCOMM_RANK $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"; i=$((i+1)); done
echo "err $RCOMM_RANK" >&2; printf "tail $RCOMM_RANK""#;
    let o = run(&["-n", "3", "sh", "-c", script]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    let mut counts = [0; 3];
    for l in o.stdout.lines() {
        let (pre, rest) = l
            .split_once("] ")
            .unwrap_or_else(|| panic!("unprefixed line {l:?}"));
        let r: usize = pre.strip_prefix('[').unwrap().parse().unwrap();
        if rest.starts_with("line") {
            let i = rest.split(' ').nth(2).unwrap_or_default();
            assert_eq!(
                rest,
                format!("line {r} {i} {}", "x".repeat(56)),
                "torn line {l:?}"
            );
            counts[r] += 1;
        } else {
            assert_eq!(rest, format!("tail {r}"), "{l:?}");
        }
    }
    assert_eq!(counts, [200; 3]);
    for r in 0..3 {
        assert!(
            o.stdout.contains(&format!("[{r}] tail {r}\n")),
            "partial line flushed with a newline"
        );
        assert!(
            o.stderr.contains(&format!("[{r}] err {r}\n")),
            "{}",
            o.stderr
        );
    }
}

#[test]
fn no_prefix_passes_bytes_through_unchanged() {
    let o = run(&[
        "-n",
        "1",
        "--no-prefix",
        "sh",
        "-c",
        r#"printf 'a\nb'; printf 'c' >&2"#,
    ]);
    assert_eq!(o.code(), 0);
    assert_eq!(o.stdout, "a\nb");
    assert_eq!(o.stderr, "c");
}

/// Unprefixed output still goes out in whole lines: two ranks each writing a line in two
/// pieces, 300 ms apart, give two whole lines, not `a-a-b` and `b`.
#[test]
fn no_prefix_output_of_two_ranks_does_not_interleave_mid_line() {
    let o = run(&[
        "-n",
        "2",
        "--no-prefix",
        "sh",
        "-c",
        r#"printf "$RCOMM_RANK-"; sleep 0.3; echo b; printf "$RCOMM_RANK-" >&2; sleep 0.3; echo e >&2"#,
    ]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    let mut out: Vec<&str> = o.stdout.lines().collect();
    out.sort_unstable();
    assert_eq!(out, ["0-b", "1-b"], "stdout {:?}", o.stdout);
    let mut err: Vec<&str> = o.stderr.lines().collect();
    err.sort_unstable();
    assert_eq!(err, ["0-e", "1-e"], "stderr {:?}", o.stderr);
}

#[test]
fn stdin_reaches_rank_zero_only() {
    let cmd = launcher(&[
        "-n",
        "3",
        "sh",
        "-c",
        r#"if read line; then echo "got $line"; else echo "got EOF"; fi"#,
    ]);
    let o = run_cmd(cmd, Some(b"hello\n"), Duration::from_secs(20));
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert!(o.stdout.contains("[0] got hello"), "{}", o.stdout);
    assert!(
        o.stdout.contains("[1] got EOF") && o.stdout.contains("[2] got EOF"),
        "{}",
        o.stdout
    );
}

// ---------------------------------------------------------------------------------------------
// Failures.

#[test]
fn survivors_of_a_failure_are_stopped_after_the_grace_period() {
    // Default grace (1 s): rank 1 dies at ~0.2 s, the others sit in `sleep 30`.
    let o = run(&[
        "-n",
        "3",
        "sh",
        "-c",
        "if [ $RCOMM_RANK = 1 ]; then sleep 0.2; kill -9 $$; fi; sleep 30",
    ]);
    assert_eq!(o.code(), 137, "{}", o.stderr);
    assert!(
        o.elapsed >= Duration::from_millis(1100),
        "survivors get the grace period: {:?}",
        o.elapsed
    );
    assert!(o.elapsed < Duration::from_secs(5), "{:?}", o.elapsed);
    assert!(
        o.stderr.contains("rank 1 (pid")
            && o.stderr.contains("SIGKILL")
            && o.stderr.contains("stopping the other ranks")
    );
    assert!(
        o.stderr.contains("2 ranks still running; sending SIGTERM"),
        "{}",
        o.stderr
    );
}

#[test]
fn ranks_ignoring_sigterm_get_sigkill_after_a_second_grace_period() {
    let script =
        r#"trap "" TERM; if [ $RCOMM_RANK = 0 ]; then exit 5; fi; while :; do sleep 0.05; done"#;
    let o = run(&["-n", "2", "--grace", "0.3", "sh", "-c", script]);
    assert_eq!(o.code(), 5, "{}", o.stderr);
    assert!(
        o.stderr.contains("sending SIGTERM") && o.stderr.contains("sending SIGKILL"),
        "{}",
        o.stderr
    );
    assert!(
        o.elapsed >= Duration::from_millis(600) && o.elapsed < Duration::from_secs(4),
        "{:?}",
        o.elapsed
    );
}

#[test]
fn on_failure_continue_lets_survivors_finish_their_work() {
    let script = "if [ $RCOMM_RANK = 1 ]; then exit 4; fi; sleep 1; echo finished $RCOMM_RANK";
    let o = run(&[
        "-n",
        "3",
        "--grace",
        "0.1",
        "--on-failure",
        "continue",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(o.code(), 4, "first failure is the status: {}", o.stderr);
    assert!(
        o.stdout.contains("[0] finished 0") && o.stdout.contains("[2] finished 2"),
        "{}",
        o.stdout
    );
    assert!(o.elapsed >= Duration::from_secs(1));
    assert!(
        o.stderr.contains("exited with code 4") && o.stderr.contains("go on"),
        "{}",
        o.stderr
    );
}

#[test]
fn survivors_receive_the_failure_notice_through_the_kvs() {
    let o = helper_job("notice", &[]);
    assert_eq!(o.code(), 1, "rank 1's exit code: {}", o.stderr);
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with("[0] ") && l.contains("failure"))
        .unwrap_or_else(|| panic!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr));
    assert!(
        line.contains("saw failure of rank 1 (exited with code 1)"),
        "{line}"
    );
}

#[test]
fn abort_from_a_rank_stops_the_job_with_its_code() {
    let o = helper_job("abort", &["--grace", "0.3"]);
    assert_eq!(o.code(), 7, "{}", o.stderr);
    assert!(
        o.stderr.contains("rcomm-run: rank 1 called abort(7): boom"),
        "{}",
        o.stderr
    );
    assert!(
        o.stdout.contains("[0] saw abort from rank 1 code 7: boom"),
        "{}",
        o.stdout
    );
    assert!(o.elapsed < Duration::from_secs(5), "{:?}", o.elapsed);
}

#[test]
fn garbage_on_the_kvs_port_is_refused_and_the_job_completes() {
    let mut child = launcher(&["-n", "2", "sh", "-c", "echo addr $RCOMM_KVS_ADDR; sleep 1"])
        .spawn()
        .unwrap();
    let rx = lines_of(child.stdout.take().unwrap());
    let err = slurp(child.stderr.take().unwrap());
    let lines = await_lines(&rx, 1, Duration::from_secs(10), |l| {
        l.starts_with("[0] addr ")
    });
    let addr = lines
        .iter()
        .find_map(|l| l.strip_prefix("[0] addr "))
        .unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n\0\0\0\0\xff\xff\xff\xff garbage");
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink); // the server hangs up
    let status = wait_bounded(&mut child, Duration::from_secs(10));
    let stderr = err.join().unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("refused a connection"), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// Nothing left behind.

#[test]
fn kill_9_of_the_launcher_leaves_no_process_of_the_job() {
    let shm_before: HashSet<_> = std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let mut child = launcher(&[
        "-n",
        "4",
        "sh",
        "-c",
        "sleep 30 & echo ready $RCOMM_JOB_ID; wait",
    ])
    .spawn()
    .unwrap();
    let rx = lines_of(child.stdout.take().unwrap());
    let err = lines_of(child.stderr.take().unwrap());
    let lines = await_lines(&rx, 4, Duration::from_secs(10), |l| l.contains("] ready "));
    let job = lines[0].split(' ').nth(2).unwrap().to_string();
    // One snapshot of /proc can miss a process (one mid-exec has no readable environment
    // for an instant, and the watchdog may still be starting): look again for a while.
    let mut before = job_processes(&job);
    let t = Instant::now();
    while before.len() < 9 && t.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(20));
        before = job_processes(&job);
    }
    assert!(
        before.len() >= 9,
        "4 ranks, 4 grandchildren and the watchdog: {before:?}"
    );
    signal(child.id(), "KILL");
    let _ = child.wait();
    let t0 = Instant::now();
    let mut left = job_processes(&job);
    while !left.is_empty() && t0.elapsed() < Duration::from_secs(3) {
        thread::sleep(Duration::from_millis(20));
        left = job_processes(&job);
    }
    assert!(
        left.is_empty(),
        "still alive 3 s after kill -9 of rcomm-run: {left:?}"
    );
    // Whoever reads the launcher's output sees end-of-file: the watchdog does not hold it.
    drain(&rx, Duration::from_secs(3));
    drain(&err, Duration::from_secs(3));
    assert!(matches!(
        rx.recv_timeout(Duration::from_millis(10)),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
    ));
    let shm_after: HashSet<_> = std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let new: Vec<_> = shm_after
        .difference(&shm_before)
        .filter(|n| n.to_string_lossy().contains(&job))
        .collect();
    assert!(new.is_empty(), "{new:?}");
}

#[test]
fn leftover_grandchildren_are_killed_when_the_job_ends() {
    let mut child = launcher(&[
        "-n",
        "2",
        "sh",
        "-c",
        "sleep 30 & echo started $RCOMM_JOB_ID",
    ])
    .spawn()
    .unwrap();
    let rx = lines_of(child.stdout.take().unwrap());
    let status = wait_bounded(&mut child, Duration::from_secs(10));
    assert!(status.success());
    let lines = drain(&rx, Duration::from_secs(3));
    let job = lines
        .iter()
        .find_map(|l| l.split(' ').nth(2))
        .unwrap()
        .to_string();
    thread::sleep(Duration::from_millis(100));
    assert!(job_processes(&job).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Signals.

/// A launcher command whose SIGINT is not ignored (a background job of a script ignores it, and
/// rcomm-run, like any program, leaves an inherited SIG_IGN alone).
fn launcher_with_sigint(args: &[&str]) -> Command {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let ign = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .unwrap()
        .trim();
    let ignored = u64::from_str_radix(ign, 16).unwrap() & (1 << (2 - 1)) != 0;
    if !ignored {
        return launcher(args);
    }
    let mut c = Command::new("env");
    c.arg("--default-signal=INT")
        .arg(RUN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

#[test]
fn sigterm_to_the_launcher_is_forwarded_and_the_status_is_128_plus_15() {
    let script = r#"trap "echo got TERM; exit 0" TERM; echo ready; while :; do sleep 0.05; done"#;
    let mut child = launcher(&["-n", "2", "--grace", "3", "sh", "-c", script])
        .spawn()
        .unwrap();
    let rx = lines_of(child.stdout.take().unwrap());
    let err = slurp(child.stderr.take().unwrap());
    await_lines(&rx, 2, Duration::from_secs(10), |l| l.ends_with("] ready"));
    let t0 = Instant::now();
    signal(child.id(), "TERM");
    let status = wait_bounded(&mut child, Duration::from_secs(10));
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "ranks exit on their own well before the grace period ends"
    );
    let out = drain(&rx, Duration::from_secs(2));
    assert_eq!(status.code(), Some(143), "{}", err.join().unwrap());
    assert!(
        out.contains(&"[0] got TERM".to_string()) && out.contains(&"[1] got TERM".to_string()),
        "{out:?}"
    );
}

#[test]
fn sigint_is_forwarded_and_a_second_sigint_kills_every_rank() {
    let script = r#"trap "echo got INT" INT; echo ready; while :; do sleep 0.05; done"#;
    let mut child = launcher_with_sigint(&["-n", "2", "--grace", "20", "sh", "-c", script])
        .spawn()
        .unwrap();
    let rx = lines_of(child.stdout.take().unwrap());
    let err = slurp(child.stderr.take().unwrap());
    await_lines(&rx, 2, Duration::from_secs(10), |l| l.ends_with("] ready"));
    signal(child.id(), "INT");
    await_lines(&rx, 2, Duration::from_secs(5), |l| l.ends_with("] got INT"));
    assert!(
        child.try_wait().unwrap().is_none(),
        "ranks that handle SIGINT keep running"
    );
    let t0 = Instant::now();
    signal(child.id(), "INT");
    let status = wait_bounded(&mut child, Duration::from_secs(10));
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let stderr = err.join().unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("received SIGINT again; killing every rank"),
        "{stderr}"
    );
}

#[test]
fn ranks_start_with_default_signal_dispositions_and_an_empty_mask() {
    // The launcher blocks several signals and here inherits ignored ones; ranks must not.
    let o = run_cmd(
        {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("trap '' INT QUIT USR1; exec '{RUN}' -n 1 grep -E '^Sig(Ign|Blk)' /proc/self/status"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c
        },
        None,
        Duration::from_secs(20),
    );
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("[0] SigBlk:\t0000000000000000"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("[0] SigIgn:\t0000000000000000"),
        "{}",
        o.stdout
    );
}

// ---------------------------------------------------------------------------------------------
// Placement and lookup.

#[test]
fn eight_ranks_on_few_cores_all_complete_unbound() {
    let o = run(&[
        "-n",
        "8",
        "--report-bindings",
        "sh",
        "-c",
        "echo done $RCOMM_RANK",
    ]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    for r in 0..8 {
        assert!(
            o.stdout.contains(&format!("[{r}] done {r}")),
            "{}",
            o.stdout
        );
    }
    let ncpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if ncpus < 8 {
        assert!(
            o.stderr.matches("not bound").count() == 8,
            "default is no binding when N > cores: {}",
            o.stderr
        );
    }
    // Just one rank more than CPUs (-n 3 on 2 cores): still unbound, each rank free to run on
    // every CPU the launcher may use.
    let n = (ncpus + 1).to_string();
    let o = run(&[
        "-n",
        &n,
        "--report-bindings",
        "sh",
        "-c",
        "grep Cpus_allowed_list /proc/self/status",
    ]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(
        o.stderr.matches("not bound").count(),
        ncpus + 1,
        "{}",
        o.stderr
    );
    let all = cpus_of_this_process();
    for r in 0..=ncpus {
        let l = format!("[{r}] Cpus_allowed_list:\t{all}");
        assert!(o.stdout.contains(&l), "{l:?} in {}", o.stdout);
    }
}

#[test]
fn bind_to_core_binds_each_rank_and_reports_it() {
    let all = cpus_of_this_process();
    let o = run(&[
        "-n",
        "2",
        "--bind-to",
        "core",
        "--report-bindings",
        "sh",
        "-c",
        "grep Cpus_allowed_list /proc/self/status",
    ]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    let mut lists = Vec::new();
    for r in 0..2 {
        let reported = o
            .stderr
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!("rcomm-run: rank {r} (pid "))
                    .and_then(|l| l.split_once(") bound to cpus "))
                    .map(|x| x.1.to_string())
            })
            .unwrap_or_else(|| panic!("{}", o.stderr));
        let actual = o
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("[{r}] Cpus_allowed_list:")))
            .unwrap()
            .trim()
            .to_string();
        assert_eq!(reported, actual);
        lists.push(actual);
    }
    if all.contains(['-', ',']) && !o.stderr.contains("warning") {
        // No warning: the launcher found two cores (not just two threads of one core).
        assert_ne!(
            lists[0], lists[1],
            "two ranks on two cores get different cores"
        );
        // Each is one core: on a machine without hyperthreads, one CPU.
        let smt = std::fs::read_to_string("/sys/devices/system/cpu/smt/active")
            .is_ok_and(|v| v.trim() == "1");
        if !smt {
            assert!(
                lists.iter().all(|l| l.parse::<usize>().is_ok()),
                "{lists:?}"
            );
        }
    }
    // Explicit core binding with more ranks than cores wraps around, with one warning.
    let o = run(&["-n", "9", "--bind-to", "core", "true"]);
    assert_eq!(o.code(), 0);
    if std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        < 9
    {
        assert_eq!(o.stderr.matches("warning:").count(), 1, "{}", o.stderr);
    }
}

#[test]
fn program_is_found_beside_rcomm_run() {
    let dir = scratch_dir("beside");
    let copy = dir.join("rcomm-run");
    std::fs::copy(RUN, &copy).unwrap();
    let script = dir.join("rcomm-beside-test");
    std::fs::write(&script, "#!/bin/sh\necho beside $RCOMM_RANK\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(&copy);
    cmd.args(["-n", "2", "rcomm-beside-test"])
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let o = run_cmd(cmd, None, Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("[0] beside 0") && o.stdout.contains("[1] beside 1"),
        "{}",
        o.stdout
    );
    assert!(Path::new(RUN).exists());
}
