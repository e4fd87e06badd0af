//! Fake hosts for the multi-host tests: network namespaces on a private bridge, each with its
//! own sshd and host name, made by `tests/cluster.sh` (shell is simpler for `ip`/`sshd` set-up).
//!
//! One cluster at a time per test process (a global lock; the tests share names and
//! addresses). It is torn down on drop, and a stale one left by a crashed run is removed when
//! the next one comes up. The subnet is 10.77.x.0/24 with x chosen so that no address of this
//! machine's namespaces is in it (other test runs may use 10.77.0.0/24 and friends).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Prefix of every name the cluster creates (namespaces, bridge, veths).
pub const PREFIX: &str = "rcT-";
static LOCK: Mutex<()> = Mutex::new(());

/// A running set of fake hosts `host0..hostN-1`.
pub struct Cluster {
    /// Number of hosts.
    pub n: usize,
    /// The first three octets of the hosts' addresses.
    pub subnet: String,
    state: PathBuf,
    sshd_pids: Vec<u32>,
    _guard: MutexGuard<'static, ()>,
}

fn script() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/cluster.sh"))
}

/// Runs `cmd`, killing it after `limit`; returns (success, stderr).
fn run_bounded(cmd: &mut Command, limit: Duration) -> (bool, String) {
    let mut child = match cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) => return (false, e.to_string()),
    };
    let mut err = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let t0 = Instant::now();
    let ok = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s.success(),
            Ok(None) if t0.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break false;
            }
        }
    };
    (ok, reader.join().unwrap_or_default())
}

fn ip_output(args: &[&str]) -> String {
    Command::new("ip")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// A 10.77.x subnet that no namespace of this machine (other than a stale cluster of ours)
/// has an address in.
fn free_subnet() -> Option<String> {
    let mut seen = ip_output(&["-o", "-4", "addr"]);
    for line in ip_output(&["netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if !name.is_empty() && !name.starts_with(PREFIX) {
            seen.push_str(&ip_output(&["-n", name, "-o", "-4", "addr"]));
        }
    }
    (41..=99)
        .map(|x| format!("10.77.{x}"))
        .find(|s| !seen.contains(&format!("{s}.")))
}

/// Why the multi-host tests cannot run here, if they cannot.
fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: network namespaces need root".into());
    }
    for (tool, path) in [
        ("sshd (openssh-server)", "/usr/sbin/sshd"),
        ("ssh", "/usr/bin/ssh"),
        ("nsenter", "/usr/bin/nsenter"),
        ("ip", "/usr/sbin/ip"),
    ] {
        let alt = path
            .replace("/usr/sbin/", "/sbin/")
            .replace("/usr/bin/", "/bin/");
        if !std::path::Path::new(path).exists() && !std::path::Path::new(&alt).exists() {
            return Some(format!("{tool} is missing (scripts/test.sh installs it)"));
        }
    }
    None
}

impl Cluster {
    /// Brings up `n` fake hosts, or returns `None` after printing why it cannot (a skip).
    /// Under CI a skip is a failure: CI must run these tests.
    pub fn up_or_skip(n: usize) -> Option<Cluster> {
        let guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let why = match unavailable() {
            Some(w) => w,
            None => match Self::up(n, guard) {
                Ok(c) => return Some(c),
                Err(e) => panic!("cannot bring up the fake hosts: {e}"),
            },
        };
        rcomm_testkit::skip(&format!("multi-host test: {why}"));
        None
    }

    fn up(n: usize, guard: MutexGuard<'static, ()>) -> Result<Cluster, String> {
        let state = std::env::temp_dir().join(format!("{PREFIX}cluster"));
        let subnet = free_subnet().ok_or("no free 10.77.x.0/24 subnet")?;
        let (ok, err) = run_bounded(
            Command::new(script())
                .arg("up")
                .env("RCT_PREFIX", PREFIX)
                .env("RCT_SUBNET", &subnet)
                .env("RCT_N", n.to_string())
                .env("RCT_STATE", &state),
            Duration::from_secs(60),
        );
        if !ok {
            let _ = run_bounded(
                Command::new(script())
                    .arg("down")
                    .env("RCT_PREFIX", PREFIX)
                    .env("RCT_SUBNET", &subnet)
                    .env("RCT_STATE", &state),
                Duration::from_secs(30),
            );
            return Err(format!("tests/cluster.sh up failed: {err}"));
        }
        let sshd_pids = (0..n)
            .filter_map(|i| {
                std::fs::read_to_string(state.join(format!("sshd{i}.pid")))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            })
            .collect();
        Ok(Cluster {
            n,
            subnet,
            state,
            sshd_pids,
            _guard: guard,
        })
    }

    /// The ssh wrapper (private config: keys, host names, no host-key checks).
    pub fn ssh(&self) -> String {
        self.state.join("bin/ssh").to_string_lossy().into_owned()
    }

    /// Network namespace of host `i`.
    pub fn netns(&self, i: usize) -> String {
        format!("{PREFIX}host{i}")
    }

    /// Command prefix that runs a program "on host `i`": its network namespace and host name.
    pub fn on_host(&self, i: usize) -> Vec<String> {
        [
            "nsenter".to_string(),
            format!("--net=/run/netns/{}", self.netns(i)),
            "unshare".into(),
            "--uts".into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            r#"hostname "$0" && exec "$@""#.into(),
            format!("host{i}"),
        ]
        .into()
    }

    /// Cuts host `i` off the network (its interface down: packets vanish silently).
    pub fn cut(&self, i: usize) {
        let ok = Command::new("ip")
            .args(["-n", &self.netns(i), "link", "set", "dev", "eth0", "down"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot cut host{i}");
    }

    /// Processes running in the cluster's namespaces other than sshd's, as
    /// "hostI pid cmdline".
    pub fn processes(&self) -> Vec<String> {
        use std::os::unix::fs::MetadataExt;
        let inodes: Vec<u64> = (0..self.n)
            .map(|i| {
                std::fs::metadata(format!("/run/netns/{}", self.netns(i)))
                    .map(|m| m.ino())
                    .unwrap_or(0)
            })
            .collect();
        let mut out = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return out;
        };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if self.sshd_pids.contains(&pid) {
                continue;
            }
            let Ok(ino) = std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| m.ino()) else {
                continue;
            };
            let Some(h) = inodes.iter().position(|&x| x == ino && x != 0) else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat
                .rsplit(')')
                .next()
                .is_some_and(|t| t.trim_start().starts_with('Z'))
            {
                continue; // dead already; only its parent's reaping is missing
            }
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            if cmd.starts_with("sshd:") {
                // sshd's own per-connection process: after a cut link it lingers until sshd's
                // keepalive gives up (~20 s here), but it runs nothing of the job (the job's
                // daemon below it is a process of its own, and counted).
                continue;
            }
            out.push(format!("host{h} {pid} {}", cmd.trim()));
        }
        out
    }

    /// Waits up to `within` for every process of the cluster but its sshds to end; returns
    /// the survivors.
    pub fn wait_idle(&self, within: Duration) -> Vec<String> {
        let t0 = Instant::now();
        loop {
            let p = self.processes();
            if p.is_empty() || t0.elapsed() > within {
                return p;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = run_bounded(
            Command::new(script())
                .arg("down")
                .env("RCT_PREFIX", PREFIX)
                .env("RCT_SUBNET", &self.subnet)
                .env("RCT_STATE", &self.state),
            Duration::from_secs(30),
        );
    }
}
