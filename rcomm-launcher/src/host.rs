//! Starting one rank on this host — shared by the launcher (its local ranks) and by a daemon
//! (the ranks of its host), so both start ranks the same way: own process group,
//! `PR_SET_PDEATHSIG`, registered with the watchdog before any program runs, secret inherited
//! through its memfd only, output forwarded line by line.

use crate::os::{self, ChildSetup, CpuSet};
use crate::output;
use crate::spawn::{self, JobSpec};
use std::io;
use std::os::fd::RawFd;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::mpsc::Sender;

/// Where a rank's output lines go: `sink(is_stderr, bytes)`.
pub type Sink = Arc<dyn Fn(bool, &[u8]) + Send + Sync>;

/// What every rank started on this host shares.
pub struct HostSetup<'a> {
    /// The job.
    pub spec: &'a JobSpec,
    /// The secret's memfd (close-on-exec here; made inheritable in the child only).
    pub secret_fd: RawFd,
    /// The watchdog's registration socket.
    pub register_fd: RawFd,
    /// Output destination.
    pub sink: Sink,
    /// `--no-prefix`.
    pub raw: bool,
}

/// A started rank: its process and how many output streams are being forwarded.
pub struct StartedRank {
    /// The process (its pid is its process-group id).
    pub child: Child,
    /// Output streams forwarded (each sends on `done` at its end-of-file).
    pub streams: usize,
}

/// Starts `rank` (the `local_rank`-th of `local_size` here), bound to `cpus` if given; rank 0's
/// stdin is piped when `stdin_piped` (the caller forwards it), else every stdin is /dev/null.
pub fn start_rank(
    h: &HostSetup<'_>,
    rank: u32,
    local_rank: u32,
    local_size: u32,
    cpus: Option<&[usize]>,
    stdin_piped: bool,
    done: &Sender<()>,
) -> io::Result<StartedRank> {
    let mut cmd = spawn::rank_command(h.spec, rank, local_rank, local_size);
    cmd.stdin(if stdin_piped {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    os::set_child_setup(
        &mut cmd,
        ChildSetup {
            launcher_pid: std::process::id() as i32,
            cpus: cpus.map(CpuSet::of),
            inherit_fd: h.secret_fd,
            register_fd: h.register_fd,
        },
    );
    let mut child = cmd.spawn()?;
    let mut streams = 0;
    let out = child
        .stdout
        .take()
        .map(|s| (Box::new(s) as Box<dyn io::Read + Send>, false));
    let err = child
        .stderr
        .take()
        .map(|s| (Box::new(s) as Box<dyn io::Read + Send>, true));
    for (src, is_err) in [out, err].into_iter().flatten() {
        let sink = h.sink.clone();
        match output::forward(
            rank,
            src,
            move |b: &[u8]| sink(is_err, b),
            h.raw,
            done.clone(),
        ) {
            Ok(_) => streams += 1,
            Err(e) => crate::output::say(format_args!(
                "warning: cannot forward rank {rank}'s output: {e}"
            )),
        }
    }
    Ok(StartedRank { child, streams })
}
