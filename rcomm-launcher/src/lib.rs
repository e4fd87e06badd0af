//! `rcomm-run`, rcomm's launcher: starts N ranks of a program on this machine and, through one
//! `rcomm-run --daemon` per host started over ssh ([`ctl`] is their protocol), on others; serves them
//! the key-value store they bootstrap from, forwards their output, stdin and signals, and
//! makes sure nothing of the job outlives it — whichever way it ends, `kill -9` of the launcher
//! included.
//!
//! Layout: [`cli`] (the command line), [`program`] (finding PROGRAM), `spawn` (each rank's
//! command, environment and binding), `os` (every `unsafe` call: signals, `waitid`, affinity,
//! the pre-exec set-up), `signals`, `output`, `watchdog` (the process that cleans up after a
//! killed launcher) and `job` (the supervising loop).
//!
//! Behaviour in brief:
//! - Each rank runs in its own process group with `PR_SET_PDEATHSIG=SIGKILL`, default signal
//!   dispositions and an empty signal mask, optionally bound to one core; it gets `RCOMM_RANK`,
//!   `RCOMM_SIZE`, `RCOMM_LOCAL_RANK`, `RCOMM_LOCAL_SIZE`, `RCOMM_KVS_ADDR`, `RCOMM_JOB_ID`
//!   and `RCOMM_SECRET_FD` (a sealed memfd holding the job secret — never a command line).
//! - Output lines are prefixed `[rank] ` and written whole; stdin goes to rank 0 only.
//! - A failing rank (non-zero exit or signal) is announced to the survivors through the
//!   key-value store; then (`--on-failure abort`) they get `--grace` seconds, SIGTERM, another
//!   `--grace`, SIGKILL. An `abort` request from a rank does the same for every rank.
//! - SIGINT, SIGTERM, SIGHUP, SIGQUIT are forwarded to every rank's group, followed by the same
//!   escalation after `--grace` (a second one kills at once); SIGUSR2 is only forwarded.
//! - SIGUSR1 (or `rcomm-run --dump PID|JOB_ID`), and a rank whose collective watchdog fired
//!   (`RCOMM_TIMEOUT`), make it collect every rank's flight recorder and print a hang report
//!   ([`hang`]): which ranks reached which collective on which communicator, and which did not.
//!   The job goes on.
//! - Exit status: fixed by the first of these events — a rank's failure (its code, or
//!   128+signal), an abort (its code; 1 if it would read as success), a terminating signal to
//!   the launcher (128+signal) — else 0. 127/126 when PROGRAM cannot be found or run.
//! - When the job ends, whatever is left in the ranks' process groups is killed.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod abi;
pub mod binding;
pub mod cli;
pub mod ctl;
mod daemon;
mod dump;
pub mod hang;
mod host;
pub mod hosts;
mod job;
mod os;
mod output;
pub mod program;
mod remote;
mod signals;
mod spawn;
pub mod topo_report;
mod watchdog;

use clap::Parser;
use std::io;

/// Why a job could not be started. Messages say what to do.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// PROGRAM cannot be found or run.
    #[error(transparent)]
    Program(#[from] program::ProgramError),
    /// The signal mask could not be set.
    #[error("cannot set up signal handling: {0}")]
    Signals(io::Error),
    /// The job id or secret could not be made.
    #[error("cannot create the job secret: {0}")]
    Secret(String),
    /// The watchdog could not be started.
    #[error(
        "cannot start the watchdog process ({0}); rcomm-run re-executes itself through /proc/self/exe, so /proc must be mounted"
    )]
    Watchdog(io::Error),
    /// The hosts or the mapping are wrong.
    #[error("{0}")]
    Hosts(String),
    /// An `RCOMM_*` setting the launcher uses is invalid.
    #[error("{0}")]
    Config(String),
    /// The key-value store could not listen.
    #[error("cannot start the job's key-value store: {0} (is the loopback interface up?)")]
    Kvs(io::Error),
}

impl LaunchError {
    /// The launcher's exit status for this error (127/126 for PROGRAM, like a shell; else 1).
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::Program(p) => p.exit_code(),
            _ => 1,
        }
    }
}

/// `rcomm-run`'s main: parses the command line, runs the job, returns the exit status.
pub fn main_entry() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == watchdog::INTERNAL_FLAG) {
        return watchdog::run();
    }
    if args.get(1).is_some_and(|a| a == daemon::DAEMON_FLAG) {
        return daemon::run();
    }
    let cli = match cli::Cli::try_parse_from(cli::normalize_args(args)) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    if let Some(target) = &cli.dump {
        return dump::request(target);
    }
    match job::run(cli) {
        Ok(code) => code,
        Err(e) => {
            output::say(format_args!("{e}"));
            e.exit_code()
        }
    }
}
