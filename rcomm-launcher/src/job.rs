//! Running one job: start the ranks, supervise them, stop them, report.
//!
//! The supervising loop runs in the main thread (which is also the thread that forked the
//! ranks — `PR_SET_PDEATHSIG` fires when *that thread* exits). Each turn it drains the key-value
//! store's events, looks for ranks that ended, advances the stop sequence, and waits up to a
//! few milliseconds for a signal. Events are handled before exits so that a rank that calls
//! abort and then exits is reported as an abort.
//!
//! Ranks that end are not reaped until the job is over: a zombie keeps its pid, so the
//! launcher can go on signalling that rank's process group (grandchildren may still live in
//! it) without risk of hitting a reused id.

use crate::LaunchError;
use crate::cli::{Cli, OnFailure};
use crate::os::{self, ChildSetup, CpuSet, Ending};
use crate::output::{self, Dest};
use crate::signals::{self, Signals};
use crate::spawn::{self, JobSpec};
use crate::watchdog::Watchdog;
use rcomm_transport::auth::Secret;
use rcomm_transport::bootstrap::{KvsEvent, KvsServer};
use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// Longest wait for a signal per turn: bounds how late a key-value store event is seen.
const TICK: Duration = Duration::from_millis(20);
/// After SIGKILL, how long to wait for ranks to end before giving up on them (a process in
/// uninterruptible sleep cannot die until the kernel lets it).
const KILL_PATIENCE: Duration = Duration::from_secs(5);
/// At the end, how long to wait for the ranks' output pipes to close.
const OUTPUT_PATIENCE: Duration = Duration::from_secs(2);

struct RankProc {
    rank: u32,
    pid: i32,
    child: Child,
    started: Instant,
    ended: Option<Ending>,
    /// It connected to the key-value store (it runs rcomm) ...
    connected: bool,
    /// ... and said it is finishing normally.
    finalized: bool,
}

/// The stop sequence: signals still to send, and when to send the next.
struct Stop {
    next_at: Instant,
    steps: VecDeque<i32>,
}

struct Supervisor {
    on_failure: OnFailure,
    grace: Duration,
    kvs: KvsServer,
    events: Receiver<KvsEvent>,
    signals: Signals,
    ranks: Vec<RankProc>,
    /// The job's exit status, fixed by the first failure, abort or terminating signal.
    outcome: Option<i32>,
    stop: Option<Stop>,
    /// Set once the launcher itself has signalled the ranks: later endings are our doing and
    /// are not reported one by one.
    signalled: bool,
    /// The first terminating signal received, if any.
    received: Option<i32>,
}

/// One line of the launcher's own on stderr. Never panics (unlike `eprintln!`): a closed
/// stderr must not bring the launcher down while ranks run.
pub(crate) fn say(msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(io::stderr().lock(), "rcomm-run: {msg}");
}

fn new_job_id() -> io::Result<String> {
    let mut b = [0u8; 8];
    rcomm_transport::os::random_bytes(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Runs the job described by `cli`; returns the launcher's exit status.
pub fn run(cli: Cli) -> Result<i32, LaunchError> {
    let program = crate::program::find_program(
        &cli.command[0],
        std::env::var_os("PATH").as_deref(),
        crate::program::exe_dir().as_deref(),
    )?;
    for e in cli.export.iter().filter(|e| e.value.is_none()) {
        if std::env::var_os(&e.name).is_none() {
            say(format_args!(
                "warning: -x {0}: {0} is not set here, so the ranks do not get it either; use -x {0}=VALUE",
                e.name
            ));
        }
    }
    // No thread exists yet: block the signals now so every later thread inherits the mask.
    let signals = Signals::install().map_err(LaunchError::Signals)?;
    let job_id = new_job_id().map_err(|e| LaunchError::Secret(e.to_string()))?;
    let secret = Secret::random().map_err(|e| LaunchError::Secret(e.to_string()))?;
    let secret_fd = rcomm_transport::os::sealed_memfd("rcomm-job-secret", secret.as_bytes(), false)
        .map_err(|e| LaunchError::Secret(format!("memfd: {e}")))?;
    let watchdog = Watchdog::spawn(&job_id).map_err(LaunchError::Watchdog)?;
    let mut kvs = KvsServer::start(SocketAddr::from((kvs_ip(), 0)), secret, cli.ranks)
        .map_err(LaunchError::Kvs)?;
    let events = kvs
        .take_events()
        .expect("a fresh server has its event stream");

    let allowed = os::allowed_cpus().unwrap_or_default();
    let cores = spawn::cores_of(&allowed, spawn::sysfs_core_key);
    let (binding, warning) = spawn::plan_binding(cli.bind_to, cli.ranks, &cores);
    if let Some(w) = warning {
        say(format_args!("warning: {w}"));
    }
    let spec = JobSpec {
        program,
        argv0: cli.command[0].clone(),
        args: cli.command[1..].to_vec(),
        size: cli.ranks,
        kvs_addr: kvs.addr().to_string(),
        job_id,
        secret_fd: secret_fd.as_raw_fd(),
        exports: cli.export.clone(),
    };

    let mut sup = Supervisor {
        on_failure: cli.on_failure,
        grace: cli.grace,
        kvs,
        events,
        signals,
        ranks: Vec::with_capacity(cli.ranks as usize),
        outcome: None,
        stop: None,
        signalled: false,
        received: None,
    };
    let (done_tx, done_rx) = channel();
    let mut streams = 0;
    let launcher_pid = std::process::id() as i32;
    // Like a shell's background job, a background launcher gives rank 0 no terminal input.
    let stdin_to_rank0 = !os::stdin_is_background_tty();
    for r in 0..cli.ranks {
        let cpus = binding[r as usize].clone();
        let mut cmd = spawn::rank_command(&spec, r);
        cmd.stdin(if r == 0 && stdin_to_rank0 {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        os::set_child_setup(
            &mut cmd,
            ChildSetup {
                launcher_pid,
                cpus: cpus.as_deref().map(CpuSet::of),
                inherit_fd: secret_fd.as_raw_fd(),
                register_fd: watchdog.register_fd(),
            },
        );
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                sup.spawn_failed(r, &spec, e);
                break;
            }
        };
        let pid = child.id() as i32;
        if cli.report_bindings {
            match &cpus {
                Some(c) => say(format_args!(
                    "rank {r} (pid {pid}) bound to cpus {}",
                    spawn::cpu_list(c)
                )),
                None => say(format_args!(
                    "rank {r} (pid {pid}) not bound (may run on cpus {})",
                    spawn::cpu_list(&allowed)
                )),
            }
        }
        if let Some(stdin) = child.stdin.take()
            && output::forward_stdin(stdin).is_err()
        {
            say(format_args!(
                "warning: cannot start the thread forwarding stdin; rank 0's stdin is closed"
            ));
        }
        for (src, dest) in [
            (
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn io::Read + Send>),
                Dest::Stdout,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn io::Read + Send>),
                Dest::Stderr,
            ),
        ] {
            if let Some(src) = src {
                match output::forward(r, src, dest, cli.no_prefix, done_tx.clone()) {
                    Ok(_) => streams += 1,
                    Err(e) => say(format_args!(
                        "warning: cannot forward rank {r}'s output: {e}"
                    )),
                }
            }
        }
        sup.ranks.push(RankProc {
            rank: r,
            pid,
            child,
            started: Instant::now(),
            ended: None,
            connected: false,
            finalized: false,
        });
    }
    drop(done_tx);

    sup.supervise();
    let code = sup.outcome.unwrap_or(0);

    // Whatever a rank left in its process group goes with the job.
    for r in &sup.ranks {
        let _ = os::kill_group(r.pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + OUTPUT_PATIENCE;
    for _ in 0..streams {
        if done_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_err()
        {
            break; // a process that left the group still holds a pipe; do not wait for it
        }
    }
    if sup.running() == 0 {
        // Everything is dead: the watchdog must not kill these (soon reusable) ids any more.
        watchdog.release();
    } else {
        // Ranks we gave up on: the watchdog keeps trying (their zombies, not yet reaped, keep
        // every recorded id valid until it has).
        watchdog.abandon();
    }
    for r in &mut sup.ranks {
        if r.ended.is_some() {
            let _ = r.child.wait();
        }
    }
    drop(sup);
    drop(secret_fd);
    Ok(code)
}

impl Supervisor {
    fn running(&self) -> usize {
        self.ranks.iter().filter(|r| r.ended.is_none()).count()
    }

    fn signal_all(&self, sig: i32) {
        for r in &self.ranks {
            let _ = os::kill_group(r.pid, sig);
        }
    }

    /// Fixes the exit status unless an earlier event did.
    fn set_outcome(&mut self, code: i32) {
        self.outcome.get_or_insert(code);
    }

    /// Starts the stop sequence: wait `grace` for the ranks to end on their own, then send
    /// `steps` one per grace period. A sequence already under way is kept.
    fn begin_stop(&mut self, steps: &[i32]) {
        if self.stop.is_none() {
            self.stop = Some(Stop {
                next_at: Instant::now() + self.grace,
                steps: steps.iter().copied().collect(),
            });
        }
    }

    fn spawn_failed(&mut self, rank: u32, spec: &JobSpec, e: io::Error) {
        let code = match e.kind() {
            io::ErrorKind::NotFound => 127,
            _ => 126,
        };
        say(format_args!(
            "cannot start rank {rank} ({}): {e}; stopping the other ranks",
            spec.program.display()
        ));
        self.kvs
            .notify_rank_failed(rank, &format!("could not be started: {e}"));
        self.set_outcome(code);
        self.begin_stop(&[libc::SIGTERM, libc::SIGKILL]);
    }

    fn supervise(&mut self) {
        loop {
            while let Ok(ev) = self.events.try_recv() {
                self.on_event(ev);
            }
            self.poll_exits();
            if self.running() == 0 {
                break;
            }
            if !self.advance_stop() {
                break;
            }
            let timeout = match &self.stop {
                Some(s) => TICK.min(s.next_at.saturating_duration_since(Instant::now())),
                None => TICK,
            };
            if let Some(sig) = self.signals.wait(timeout) {
                self.on_signal(sig);
            }
        }
        // An abort request may have raced the last exit.
        while let Ok(ev) = self.events.try_recv() {
            self.on_event(ev);
        }
    }

    fn on_event(&mut self, ev: KvsEvent) {
        match ev {
            KvsEvent::Abort { rank, code, msg } => {
                say(format_args!("rank {rank} called abort({code}): {msg}"));
                self.kvs.notify_abort(rank, code, &msg);
                // An exit status is 8 bits; a code that would read as success becomes 1.
                let status = code.rem_euclid(256);
                self.set_outcome(if status == 0 { 1 } else { status });
                if self.running() > 0 {
                    self.begin_stop(&[libc::SIGTERM, libc::SIGKILL]);
                }
            }
            KvsEvent::Refused { peer, why } => {
                say(format_args!(
                    "warning: refused a connection to the job's key-value store from {peer}: {why} (the job goes on)"
                ));
            }
            KvsEvent::Connected { rank } => {
                if let Some(r) = self.ranks.iter_mut().find(|r| r.rank == rank) {
                    r.connected = true;
                }
            }
            KvsEvent::Finalized { rank } => {
                if let Some(r) = self.ranks.iter_mut().find(|r| r.rank == rank) {
                    r.finalized = true;
                }
            }
        }
    }

    fn poll_exits(&mut self) {
        for i in 0..self.ranks.len() {
            if self.ranks[i].ended.is_some() {
                continue;
            }
            let Ok(Some(mut end)) = os::peek_exit(self.ranks[i].pid) else {
                continue;
            };
            if end.is_success() {
                // A rank's Finalize event is queued before its reply, so before it can exit.
                while let Ok(ev) = self.events.try_recv() {
                    self.on_event(ev);
                }
                if self.ranks[i].connected && !self.ranks[i].finalized {
                    end = Ending::Unfinalized;
                }
            }
            self.ranks[i].ended = Some(end);
            if !end.is_success() {
                self.on_failure(i, end);
            }
        }
    }

    fn on_failure(&mut self, i: usize, end: Ending) {
        let (rank, pid, took) = (
            self.ranks[i].rank,
            self.ranks[i].pid,
            self.ranks[i].started.elapsed(),
        );
        let how = end.describe();
        // Survivors learn it at once, also when they keep running.
        self.kvs.notify_rank_failed(rank, &how);
        let first = self.outcome.is_none();
        self.set_outcome(end.exit_code());
        if self.signalled {
            return;
        }
        let others = self.running();
        let then = match (first, others, self.on_failure) {
            (false, _, _) | (_, 0, _) => String::new(),
            (true, _, OnFailure::Abort) => "; stopping the other ranks".to_string(),
            (true, _, OnFailure::Continue) => {
                format!("; the other {others} ranks go on (--on-failure continue)")
            }
        };
        say(format_args!(
            "rank {rank} (pid {pid}) {how} after {:.2} s{then}",
            took.as_secs_f64()
        ));
        if self.on_failure == OnFailure::Abort && others > 0 {
            self.begin_stop(&[libc::SIGTERM, libc::SIGKILL]);
        }
    }

    /// Sends the next signal of the stop sequence when its time has come; false when the
    /// sequence is exhausted and ranks still have not ended (give up on them).
    fn advance_stop(&mut self) -> bool {
        let running = self.running();
        let grace = self.grace;
        let Some(stop) = &mut self.stop else {
            return true;
        };
        if Instant::now() < stop.next_at {
            return true;
        }
        match stop.steps.pop_front() {
            Some(sig) => {
                say(format_args!(
                    "{running} rank{} still running; sending {}",
                    if running == 1 { "" } else { "s" },
                    rcomm_transport::os::signal_name(sig)
                ));
                stop.next_at = Instant::now()
                    + if sig == libc::SIGKILL {
                        KILL_PATIENCE
                    } else {
                        grace
                    };
                self.signalled = true;
                self.signal_all(sig);
                true
            }
            None => {
                let stuck: Vec<String> = self
                    .ranks
                    .iter()
                    .filter(|r| r.ended.is_none())
                    .map(|r| format!("{} (pid {})", r.rank, r.pid))
                    .collect();
                say(format_args!(
                    "ranks {} did not end after SIGKILL; giving up on them",
                    stuck.join(", ")
                ));
                false
            }
        }
    }

    fn on_signal(&mut self, sig: i32) {
        let name = rcomm_transport::os::signal_name(sig);
        if signals::PASSED_ON.contains(&sig) {
            self.signal_all(sig);
            return;
        }
        if !signals::TERMINATING.contains(&sig) {
            return; // SIGCHLD: the next turn looks at the ranks
        }
        if let Some(first) = self.received {
            let again = if first == sig {
                "again".to_string()
            } else {
                format!("after {}", rcomm_transport::os::signal_name(first))
            };
            say(format_args!("received {name} {again}; killing every rank"));
            self.signalled = true;
            self.signal_all(libc::SIGKILL);
            self.stop = Some(Stop {
                next_at: Instant::now() + KILL_PATIENCE,
                steps: VecDeque::new(),
            });
            return;
        }
        self.received = Some(sig);
        self.set_outcome(128 + sig);
        say(format_args!("received {name}; forwarding it to every rank"));
        self.signalled = true;
        self.signal_all(sig);
        // The ranks get a grace period to act on it; then the usual escalation.
        let steps: &[i32] = if sig == libc::SIGTERM {
            &[libc::SIGKILL]
        } else {
            &[libc::SIGTERM, libc::SIGKILL]
        };
        self.stop = Some(Stop {
            next_at: Instant::now() + self.grace,
            steps: steps.iter().copied().collect(),
        });
    }
}

/// Where the KVS listens: loopback (only this host's ranks in this network namespace need it),
/// unless `RCOMM_SOCKET_IFNAME` names the network the job uses — then on that interface, so
/// ranks started in other network namespaces (or reaching it from elsewhere) can connect. A
/// value that matches nothing here is the ranks' error to report (they name the variable and
/// the interfaces); the KVS then stays on loopback.
fn kvs_ip() -> std::net::IpAddr {
    let spec = rcomm_transport::config::global()
        .as_ref()
        .ok()
        .and_then(|c| c.socket_ifname.as_ref());
    match spec.map(|s| rcomm_transport::ifaddr::local_address(Some(s))) {
        Some(Ok((_, ip))) => ip,
        _ => Ipv4Addr::LOCALHOST.into(),
    }
}
