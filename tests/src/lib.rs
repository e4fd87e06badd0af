//! Helpers shared by rcomm's multi-process tests: finding `rcomm-run`, running a job with a
//! deadline, and checking that a job left nothing behind (processes, shared-memory files).

pub mod cluster;
pub mod placement;

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `rcomm-run`, built by `cargo test` beside the test programs (target/<profile>/).
pub fn rcomm_run() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test> -> target/<profile>/rcomm-run
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let p = dir.join("rcomm-run");
    assert!(
        p.exists(),
        "{} not found: run the suite with `cargo test --workspace`",
        p.display()
    );
    p
}

/// The outcome of a job.
#[derive(Debug)]
pub struct JobOutput {
    /// Exit status of `rcomm-run` (None if it had to be killed at the deadline).
    pub status: Option<ExitStatus>,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
    /// Wall time.
    pub elapsed: Duration,
}

impl JobOutput {
    /// Exit code, or -1 if killed at the deadline or by a signal.
    pub fn code(&self) -> i32 {
        self.status.and_then(|s| s.code()).unwrap_or(-1)
    }
    /// Stdout lines of one rank (prefix `[r] ` removed).
    pub fn rank_lines(&self, rank: u32) -> Vec<&str> {
        let p = format!("[{rank}] ");
        self.stdout
            .lines()
            .filter_map(|l| l.strip_prefix(p.as_str()))
            .collect()
    }

    /// Asserts every one of the `n` ranks of an `RT_NODES=<nodes>` launch with
    /// `RCOMM_HOSTID=<hostid><rank / 2>` printed its placement line (`ok nodes <nodes> rank <r>
    /// on <host>/<hostid><r / 2>: … tcp <sent> B sent <received> B received …`): on its node,
    /// with TCP bytes both ways.
    pub fn assert_node_lines(&self, n: u32, nodes: u32, hostid: &str) {
        for r in 0..n {
            let prefix = format!("ok nodes {nodes} rank {r} on ");
            let line = self
                .rank_lines(r)
                .into_iter()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("rank {r}: no placement line\n{self}"));
            let node = format!("/{hostid}{}:", r / 2);
            assert!(line.contains(&node), "rank {r} not on {node}: {line}");
            let tcp: Vec<u64> = line
                .split(" B ")
                .filter_map(|p| p.rsplit(' ').next()?.parse().ok())
                .collect();
            assert!(
                tcp.len() >= 2 && tcp[0] > 0 && tcp[1] > 0,
                "rank {r}: TCP bytes {tcp:?} in {line}"
            );
        }
    }
}

impl std::fmt::Display for JobOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status {:?} after {:?}\n--- stdout\n{}--- stderr\n{}",
            self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

fn spawn_reader<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = r.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    })
}

/// Builder for one `rcomm-run` invocation.
pub struct Job {
    cmd: Command,
    deadline: Duration,
    marker: String,
}

impl Job {
    /// `rcomm-run -n N <args...>`.
    pub fn new(n: u32, args: &[&str]) -> Self {
        let mut cmd = Command::new(rcomm_run());
        cmd.arg("-n").arg(n.to_string()).args(args);
        // Tag every process of this job so leftovers can be found even without the job id.
        let marker = format!("{}-{}", std::process::id(), next_id());
        cmd.env("RCOMMTEST_MARKER", &marker);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Self {
            cmd,
            deadline: Duration::from_secs(60),
            marker,
        }
    }
    /// Any launcher (`mpiexec.mpich`, `srun`) or program, with the same marker, deadline and
    /// leftover check as [`Job::new`]. Variables of rcomm-run, PMI, Slurm and torchrun that
    /// the test process itself may carry are removed, so each test says what the ranks see.
    pub fn foreign(program: &str, args: &[&str]) -> Self {
        let mut cmd = Command::new(program);
        cmd.args(args);
        for (k, _) in std::env::vars() {
            if ["RCOMM_", "PMI_", "SLURM_", "OMPI_", "PMIX_"]
                .iter()
                .any(|p| k.starts_with(p))
                || [
                    "RANK",
                    "WORLD_SIZE",
                    "LOCAL_RANK",
                    "LOCAL_WORLD_SIZE",
                    "MASTER_ADDR",
                    "MASTER_PORT",
                ]
                .contains(&k.as_str())
            {
                cmd.env_remove(&k);
            }
        }
        let marker = format!("{}-{}", std::process::id(), next_id());
        cmd.env("RCOMMTEST_MARKER", &marker);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Self {
            cmd,
            deadline: Duration::from_secs(60),
            marker,
        }
    }
    /// `PREFIX... rcomm-run -x RCOMMTEST_MARKER <args...>`: the launcher run through a command
    /// prefix (e.g. one entering a fake host), the marker exported to ranks on every host.
    pub fn with_prefix(prefix: &[String], args: &[&str]) -> Self {
        let mut cmd = Command::new(&prefix[0]);
        cmd.args(&prefix[1..])
            .arg(rcomm_run())
            .args(["-x", "RCOMMTEST_MARKER"])
            .args(args);
        let marker = format!("{}-{}", std::process::id(), next_id());
        cmd.env("RCOMMTEST_MARKER", &marker);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Self {
            cmd,
            deadline: Duration::from_secs(60),
            marker,
        }
    }
    /// Sets an environment variable for the launcher (and so every rank).
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.cmd.env(k, v);
        self
    }
    /// Kills the launcher if it runs longer than this.
    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = d;
        self
    }
    /// The marker variable value carried by every process of the job.
    pub fn marker(&self) -> &str {
        &self.marker
    }
    /// Starts the job without waiting.
    pub fn spawn(mut self) -> Running {
        let mut child = self.cmd.spawn().expect("spawn rcomm-run");
        let out = spawn_reader(child.stdout.take().unwrap());
        let err = spawn_reader(child.stderr.take().unwrap());
        Running {
            child,
            out,
            err,
            start: Instant::now(),
            deadline: self.deadline,
            marker: self.marker,
        }
    }
    /// Runs the job to completion (or the deadline) and checks nothing was left behind.
    pub fn run(self) -> JobOutput {
        self.spawn().wait()
    }
}

/// A job in flight.
pub struct Running {
    /// The launcher process.
    pub child: Child,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
    start: Instant,
    deadline: Duration,
    marker: String,
}

impl Running {
    /// Waits for the launcher, killing it at the deadline; then asserts that no process of the
    /// job survives (within 3 s) and returns the output.
    pub fn wait(mut self) -> JobOutput {
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break Some(s);
            }
            if self.start.elapsed() > self.deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let elapsed = self.start.elapsed();
        let stdout = self.out.join().unwrap_or_default();
        let stderr = self.err.join().unwrap_or_default();
        let out = JobOutput {
            status,
            stdout,
            stderr,
            elapsed,
        };
        let left = wait_no_processes("RCOMMTEST_MARKER", &self.marker, Duration::from_secs(3));
        assert!(left.is_empty(), "processes left behind: {left:?}\n{out}");
        assert!(
            status.is_some(),
            "job exceeded its deadline of {:?}\n{out}",
            self.deadline
        );
        out
    }
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Pids (other than ours) whose environment holds `key=value`.
pub fn processes_with_env(key: &str, value: &str) -> Vec<u32> {
    let needle = format!("{key}={value}");
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()) {
            // A zombie is already dead; only its parent's reaping is missing.
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|t| t.trim_start().starts_with('Z'))
                })
                .unwrap_or(false);
            if !zombie {
                found.push(pid);
            }
        }
    }
    found
}

/// Waits up to `within` for every process carrying `key=value` to disappear; returns survivors.
pub fn wait_no_processes(key: &str, value: &str, within: Duration) -> Vec<u32> {
    let t0 = Instant::now();
    loop {
        let left = processes_with_env(key, value);
        if left.is_empty() || t0.elapsed() > within {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every entry of /dev/shm. rcomm uses memfds and should make none, under any name: a test
/// compares the whole directory before and after (nothing else in this suite runs an MPI or
/// another program that makes segments meanwhile).
pub fn dev_shm() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a job's stderr says forced ib found no usable RDMA stack (this machine has no HCA,
/// and may lack libibverbs): the error names the setting and the reason.
pub fn says_no_rdma(stderr: &str) -> bool {
    stderr.contains("RCOMM_TRANSPORT=ib: ")
        && (stderr.contains("libibverbs lists no RDMA device")
            || stderr.contains("libibverbs.so.1 not found"))
}

/// A test program built by this crate (`src/bin/NAME.rs`).
pub fn test_program(name: &str) -> String {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let p = dir.join(name);
    assert!(p.exists(), "{} not built", p.display());
    p.to_string_lossy().into_owned()
}

/// The one rule for skipping (rcomm-testkit): says so past libtest's capture and in the
/// run's skip summary, and fails the test under CI.
pub use rcomm_testkit::{skip, skip_hardware, under_ci};

/// Whether `prog` is on the PATH.
pub fn have(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

/// A TCP port free on 127.0.0.1 at the time of the call.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

/// A private one-node Slurm cluster (munge, slurmctld, slurmd) on localhost, run by
/// `tests/scripts/slurm-local.sh` with its state under the system temp dir; stopped, its state
/// removed and its leftover job steps killed on drop, whatever the test's outcome.
pub struct SlurmCluster {
    state: PathBuf,
    script: PathBuf,
}

impl SlurmCluster {
    /// Installs Slurm if needed and starts the daemons. `Err(why)` when that is impossible
    /// here (not root and the packages are missing): the caller skips.
    pub fn start() -> Result<Self, String> {
        let script = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/slurm-local.sh"
        ));
        let st = Command::new("timeout")
            .args(["600"])
            .arg(&script)
            .arg("install")
            .status()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        match st.code() {
            Some(0) => {}
            Some(77) => {
                return Err(
                    "Slurm is not installed and this user cannot install it (not root)".into(),
                );
            }
            _ => panic!("installing Slurm failed: {st}"),
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("the Slurm daemons of the test cluster must run as root".into());
        }
        let state = std::env::temp_dir().join(format!(
            "rcommtest-slurm-{}-{}",
            std::process::id(),
            next_id()
        ));
        let me = Self { state, script };
        let (ctld, slurmd) = (free_port(), free_port());
        let out = Command::new("timeout")
            .args(["60"])
            .arg(&me.script)
            .arg("up")
            .arg(&me.state)
            .arg(ctld.to_string())
            .arg(slurmd.to_string())
            .output()
            .expect("run slurm-local.sh up");
        assert!(
            out.status.success(),
            "starting Slurm failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(me)
    }

    /// `SLURM_CONF` for srun.
    pub fn conf(&self) -> String {
        self.state.join("slurm.conf").to_string_lossy().into_owned()
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        let _ = Command::new("timeout")
            .args(["60"])
            .arg(&self.script)
            .arg("down")
            .arg(&self.state)
            .status();
    }
}

/// The mismatch cases of checked mode, run by `rt_check` and each asserted by
/// `tests/checked.rs`: `<collective>-<what differs on one rank>`.
pub const CHECK_CASES: &[&str] = &[
    "allreduce-count",
    "allreduce-count-big",
    "allreduce-dtype",
    "allreduce-op",
    "allreduce-coll",
    "bcast-count",
    "bcast-dtype",
    "bcast-root",
    "bcast-coll",
    "reduce-count",
    "reduce-dtype",
    "reduce-root",
    "reduce-op",
    "allgather-count",
    "allgather-dtype",
    "allgather-coll",
    "barrier-coll",
    "allreduce-zero-dtype",
    "bcast-zero-root",
];

/// The workspace's root directory (this crate sits one level below it).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Every file under `dir`, at any depth, whose extension is `ext`, sorted; none when `dir`
/// does not exist (a test that needs files there says how many it expects).
pub fn files_under(dir: &Path, ext: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, ext, out);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, ext, &mut out);
    out.sort();
    out
}
