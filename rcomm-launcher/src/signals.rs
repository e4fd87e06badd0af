//! Signal handling without handlers: the launcher blocks the signals it cares about in every
//! thread (the mask is set in `main` before any thread exists, and threads inherit it) and
//! takes them one at a time with `sigtimedwait` in its supervising loop. No handler runs
//! asynchronously, so there is no race between a signal and the loop's state.

use crate::os::{self, SigSet};
use std::io;
use std::time::Duration;

/// Signals that end the job: forwarded to every rank's process group, then the job is stopped.
pub const TERMINATING: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];
/// Signals only forwarded (applications use them for checkpoints and the like).
pub const PASSED_ON: [i32; 1] = [libc::SIGUSR2];
/// The signal that makes `rcomm-run` print a hang report (not forwarded: the job goes on).
pub const REPORT: i32 = libc::SIGUSR1;

/// The blocked set the supervising loop waits on.
#[derive(Clone)]
pub struct Signals {
    set: SigSet,
}

impl Signals {
    /// Blocks SIGCHLD and the forwarded signals in the calling thread; call before any thread
    /// is started. A signal the launcher inherited as ignored (SIGHUP under `nohup`, SIGINT
    /// for a background job of a script) stays ignored and is not forwarded.
    pub fn install() -> io::Result<Self> {
        // An inherited SIG_IGN for SIGCHLD would make the kernel reap ranks by itself, and
        // the launcher could not learn how they ended.
        os::set_signal_default(libc::SIGCHLD)?;
        let mut sigs = vec![libc::SIGCHLD];
        sigs.extend(
            TERMINATING
                .iter()
                .chain(&PASSED_ON)
                .chain(&[REPORT])
                .copied()
                .filter(|&s| !os::signal_is_ignored(s)),
        );
        let set = SigSet::of(&sigs);
        os::block_signals(&set)?;
        Ok(Self { set })
    }

    /// Waits up to `timeout` for one of the signals.
    pub fn wait(&self, timeout: Duration) -> Option<i32> {
        os::wait_signal(&self.set, timeout).ok().flatten()
    }
}
