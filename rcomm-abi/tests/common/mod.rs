//! What the ABI tests share: where the built library, rcomm-cc and rcomm-run are, MPICH's
//! wheel (for its header and library), compiling C and running jobs with a deadline.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// target/<profile>/ of this build.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .to_path_buf()
}

/// The `libmpi_abi.so` of this build: `cargo test` builds it into deps/ and only `cargo build`
/// copies it up beside the binaries, so the newer of the two is this source's. The tests hand
/// it to rcomm-cc and rcomm-run as `RCOMM_ABI_LIB`, never relying on a copy an older build
/// left.
pub fn library() -> PathBuf {
    ["deps/libmpi_abi.so", "libmpi_abi.so"]
        .iter()
        .map(|p| profile_dir().join(p))
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| panic!("libmpi_abi.so not built under {}", profile_dir().display()))
}

/// rcomm-cc of this build.
pub fn rcomm_cc() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rcomm-cc"))
}

/// rcomm-run of this build, or `None` (the test skips, or fails under CI) when it was not
/// built: `cargo test -p rcomm-abi` builds only this package.
pub fn rcomm_run() -> Option<PathBuf> {
    let p = profile_dir().join("rcomm-run");
    if p.is_file() {
        return Some(p);
    }
    rcomm_testkit::skip(&format!(
        "{} is not built: run `cargo build -p rcomm-launcher` first (the workspace suite builds it)",
        p.display()
    ));
    None
}

/// The unpacked mpich wheel's `data` folder (include/, lib/), or `None` after skipping (a
/// failure under CI). `scripts/test.sh` downloads it and sets `MPICH_WHEEL_DIR`.
pub fn mpich() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("MPICH_WHEEL_DIR").map(PathBuf::from),
        Some(profile_dir().join("../mpich/mpich-5.0.2.data/data")),
    ];
    for c in candidates.into_iter().flatten() {
        if c.join("include/mpi_abi.h").is_file() {
            return Some(c);
        }
    }
    rcomm_testkit::skip(
        "MPICH's ABI header is not here: scripts/test.sh downloads the mpich 5.0.2 wheel \
         (pip download mpich==5.0.2 --no-deps) and sets MPICH_WHEEL_DIR to its data folder",
    );
    None
}

/// A scratch folder for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = profile_dir().join("abi-tests").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Runs `cmd`, failing the test with its output when it fails.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Compiles C sources with rcomm-cc into `out`.
pub fn rcomm_cc_build(srcs: &[&Path], out: &Path) {
    run_ok(
        Command::new(rcomm_cc())
            .env("RCOMM_ABI_LIB", library())
            .args(["-std=c11", "-Wall", "-Werror", "-O1"])
            .args(srcs)
            .arg("-o")
            .arg(out),
    );
}

/// Compiles C sources against MPICH's ABI header and links MPICH's libmpi_abi.so.1, as
/// `mpicc_abi` does.
pub fn mpich_build(mpich: &Path, srcs: &[&Path], out: &Path) {
    run_ok(
        Command::new("cc")
            .args(["-std=c11", "-Wall", "-O1", "-DMPI_ABI"])
            .arg(format!("-I{}", mpich.join("include").display()))
            .args(srcs)
            .arg("-o")
            .arg(out)
            .arg(format!("-L{}", mpich.join("lib").display()))
            .arg("-lmpi_abi"),
    );
}

/// A finished job.
pub struct Job {
    /// Exit code (`None`: killed at the deadline).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl std::fmt::Display for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` for at most `deadline`, killing it after.
pub fn run_with_deadline(mut cmd: Command, deadline: Duration) -> Job {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let out_pipe = child.stdout.take().expect("stdout");
    let err_pipe = child.stderr.take().expect("stderr");
    let read = |mut p: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = p.read_to_string(&mut s);
            s
        })
    };
    let o = read(Box::new(out_pipe));
    let e = read(Box::new(err_pipe));
    let start = Instant::now();
    let code = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s.code();
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Job {
        code,
        stdout: o.join().unwrap_or_default(),
        stderr: e.join().unwrap_or_default(),
    }
}

/// `rcomm-run -n <n> <prog> <args>`, with a deadline.
pub fn rcomm_run_job(run: &Path, n: u32, prog: &Path, args: &[&str]) -> Job {
    let mut cmd = Command::new(run);
    cmd.env("RCOMM_ABI_LIB", library());
    cmd.arg("-n").arg(n.to_string()).arg(prog).args(args);
    // The ranks must get rcomm's library from rcomm-run, not from the environment.
    cmd.env_remove("LD_LIBRARY_PATH");
    run_with_deadline(cmd, Duration::from_secs(120))
}
