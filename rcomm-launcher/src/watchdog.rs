//! The watchdog: a tiny process that outlives a `kill -9` of `rcomm-run` and kills what the
//! launcher started.
//!
//! `PR_SET_PDEATHSIG` kills a rank when the launcher dies, but not the processes the rank
//! started. So the launcher starts this process first (before any thread exists), connected by
//! a socket pair that is its stdin. Every rank writes its pid — which is its process-group id —
//! to the socket between `fork` and `exec`, before any program runs in that group. If the socket
//! reaches end-of-file without the "clean exit" record, the launcher died: the watchdog sends
//! SIGKILL to every recorded group and exits. On a clean exit the launcher, having killed and
//! reaped everything itself, sends the record and the watchdog exits without touching anything
//! (the groups' ids may be reused by then).
//!
//! The watchdog is `rcomm-run` itself re-executed with [`INTERNAL_FLAG`], in its own process
//! group (a terminal's Ctrl-C or a `kill` of the launcher's group does not reach it), with its
//! stdout and stderr on /dev/null so whoever reads the launcher's output sees end-of-file as soon
//! as the launcher is gone. It carries `RCOMM_JOB_ID` like every process of the job.

use crate::os;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `rcomm-run --internal-watchdog JOB_ID` runs the watchdog (not for users).
pub const INTERNAL_FLAG: &str = "--internal-watchdog";

/// The record that means "clean exit, kill nothing" (0 is never a process id we record).
const CLEAN: i32 = 0;

/// The launcher's handle on its watchdog.
pub struct Watchdog {
    child: Child,
    sock: UnixStream,
}

impl Watchdog {
    /// Starts the watchdog for job `job_id`.
    pub fn spawn(job_id: &str) -> io::Result<Self> {
        let (ours, theirs) = UnixStream::pair()?;
        let child = Command::new("/proc/self/exe")
            .arg0("rcomm-run-watchdog")
            .arg(INTERNAL_FLAG)
            .arg(job_id)
            .env("RCOMM_JOB_ID", job_id)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        Ok(Self { child, sock: ours })
    }

    /// The descriptor ranks write their pid to (close-on-exec in the launcher).
    pub fn register_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Clean exit: tells the watchdog to exit without killing anything, and reaps it.
    pub fn release(self) {
        let _ = os::send_nosignal(self.sock.as_raw_fd(), &CLEAN.to_le_bytes());
        self.abandon();
    }

    /// Unclean exit: closes the socket as a dying launcher would, so the watchdog kills every
    /// recorded group; waits (briefly) for it and reaps it.
    pub fn abandon(mut self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(1) {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }
}

/// The watchdog process's main; returns its exit code.
pub fn run() -> i32 {
    // Only end-of-file on stdin (or SIGKILL) ends the watchdog.
    for sig in [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGPIPE,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ] {
        let _ = os::set_signal_ignored(sig);
    }
    let mut groups: Vec<i32> = Vec::new();
    let mut input = io::stdin().lock();
    let mut buf = [0u8; 4096];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        pending.extend_from_slice(&buf[..n]);
        let whole = pending.len() / 4 * 4;
        for rec in pending[..whole].chunks_exact(4) {
            let pid = i32::from_le_bytes(rec.try_into().expect("chunks of 4"));
            if pid == CLEAN {
                return 0;
            }
            if pid > 1 && !groups.contains(&pid) {
                groups.push(pid);
            }
        }
        pending.drain(..whole);
    }
    // The launcher died without saying goodbye.
    for &g in &groups {
        let _ = os::kill_group(g, libc::SIGKILL);
        let _ = os::kill_process(g, libc::SIGKILL);
    }
    let _ = io::stderr().flush();
    0
}
