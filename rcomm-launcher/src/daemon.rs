//! `rcomm-run --daemon`: the launcher's agent on a remote host, started over ssh by the head.
//!
//! Its stdin and stdout are the control channel ([`crate::ctl`]); its stderr goes back through
//! ssh's stderr for diagnostics. It says hello, takes one job, starts this host's ranks exactly
//! as the launcher starts local ones (process groups, `PR_SET_PDEATHSIG`, a watchdog of its
//! own), relays their output and how they end, and forwards the head's signals. End-of-file on
//! stdin — the head finished, died, or its ssh connection broke — ends this host's ranks:
//! SIGTERM, `--grace`, SIGKILL. So nothing of the job outlives the head on any host.

use crate::binding;
use crate::ctl::{self, DaemonJob, FromDaemon, ToDaemon};
use crate::host::{self, HostSetup};
use crate::os::{self, Ending};
use crate::signals::{self, Signals};
use crate::spawn::{self, JobSpec};
use crate::watchdog::Watchdog;
use rcomm_runtime::wire::FrameIoError;
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStringExt;
use std::process::Child;
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `rcomm-run --daemon JOB_ID` (the job id is there only so `ps` shows whose daemon it is).
pub const DAEMON_FLAG: &str = "--daemon";

const TICK: Duration = Duration::from_millis(20);
const KILL_PATIENCE: Duration = Duration::from_secs(5);
const OUTPUT_PATIENCE: Duration = Duration::from_secs(2);
/// How long to wait for the job after the hello.
const JOB_PATIENCE: Duration = Duration::from_secs(30);
/// Exit status when the control channel carries bytes that are not the protocol.
const BAD_CHANNEL: i32 = 2;

/// The head's end of the channel, shared by the output threads and the main loop.
type Out = Arc<Mutex<io::Stdout>>;

fn send(out: &Out, m: &FromDaemon) -> io::Result<()> {
    let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
    ctl::write(&mut *o, &m.to_frame())
}

/// The head's address as ssh saw it: the first field of `SSH_CONNECTION` ("client_ip
/// client_port server_ip server_port"). That address is the one this host reaches the head
/// by, whatever interfaces the head has.
fn head_ip() -> String {
    std::env::var("SSH_CONNECTION")
        .ok()
        .and_then(|v| v.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

enum Ctl {
    Msg(ToDaemon),
    /// End-of-file or a broken channel: the head is gone or done.
    Eof,
    /// Bytes that are not the control protocol (garbage, a frame over the limit, another
    /// rcomm version): nothing after them can be trusted, so the channel is over too.
    Bad(String),
}

fn spawn_reader() -> io::Result<Receiver<Ctl>> {
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name("rcomm-daemon-ctl".into())
        .spawn(move || {
            let mut input = io::stdin().lock();
            loop {
                match ctl::read_to_daemon(&mut input) {
                    Ok(m) => {
                        if tx.send(Ctl::Msg(m)).is_err() {
                            return;
                        }
                    }
                    Err(FrameIoError::Wire(e)) => {
                        let _ = tx.send(Ctl::Bad(e.to_string()));
                        return;
                    }
                    Err(FrameIoError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        let _ = tx.send(Ctl::Bad("it ended in the middle of a frame".into()));
                        return;
                    }
                    Err(_) => {
                        let _ = tx.send(Ctl::Eof);
                        return;
                    }
                }
            }
        })?;
    Ok(rx)
}

fn say(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(
        io::stderr().lock(),
        "rcomm-run --daemon on {}: {msg}",
        rcomm_runtime::identity::hostname()
    );
}

/// The daemon's main; returns its exit status: 0 when the head ended the channel, 2 when the
/// channel carried something that is not the protocol before any job (nothing was started),
/// 1 for other failures.
pub fn run() -> i32 {
    // Before any thread: the mask is inherited by every later thread.
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            say(format_args!("cannot set up signal handling: {e}"));
            return 1;
        }
    };
    let out: Out = Arc::new(Mutex::new(io::stdout()));
    let allowed = os::allowed_cpus().unwrap_or_default();
    let places = binding::Places::new(&allowed, &binding::this_machine());
    let hello = FromDaemon::Hello {
        hostname: rcomm_runtime::identity::hostname(),
        head_ip: head_ip(),
        cores: places.cores() as u32,
        numas: places.numas() as u32,
        packages: places.packages() as u32,
        boot_id: binding::boot_id(),
    };
    if send(&out, &hello).is_err() {
        return 1;
    }
    let ctl_rx = match spawn_reader() {
        Ok(r) => r,
        Err(e) => {
            say(format_args!("cannot start the control reader: {e}"));
            return 1;
        }
    };
    // The head sends the job once every host has said hello (bounded by its own deadline);
    // a head that never does is gone.
    // Nothing is started before a whole job frame has decoded; anything that is not the
    // protocol ends the daemon with an error, having started nothing.
    let job = loop {
        match ctl_rx.recv_timeout(JOB_PATIENCE) {
            Ok(Ctl::Msg(ToDaemon::Job(j))) => break j,
            Ok(Ctl::Msg(_)) => continue, // nothing runs yet
            Ok(Ctl::Eof) => return 0,
            Ok(Ctl::Bad(why)) => {
                say(format_args!(
                    "refusing the control channel: {why}; it must carry rcomm-run's control frames (is this daemon started by an rcomm-run of the same version?); nothing was started"
                ));
                return BAD_CHANNEL;
            }
            Err(_) => {
                say(format_args!(
                    "no job from the head within {} s; nothing was started",
                    JOB_PATIENCE.as_secs()
                ));
                return 1;
            }
        }
    };
    let beat = out.clone();
    let _ = std::thread::Builder::new()
        .name("rcomm-daemon-beat".into())
        .spawn(move || {
            while send(&beat, &FromDaemon::Heartbeat).is_ok() {
                std::thread::sleep(ctl::HEARTBEAT);
            }
        });
    match run_job(*job, &out, &ctl_rx, &signals, &allowed, &places) {
        Ok(()) => 0,
        Err((code, msg)) => {
            let _ = send(&out, &FromDaemon::Failed { code, msg });
            0
        }
    }
}

struct Rank {
    rank: u32,
    pid: i32,
    child: Child,
    ended: Option<Ending>,
}

fn run_job(
    job: DaemonJob,
    out: &Out,
    ctl_rx: &Receiver<Ctl>,
    signals: &Signals,
    allowed: &[usize],
    places: &binding::Places,
) -> Result<(), (i32, String)> {
    let argv0 = OsString::from_vec(job.program.clone());
    let program = crate::program::find_program(
        &argv0,
        std::env::var_os("PATH").as_deref(),
        crate::program::exe_dir().as_deref(),
    )
    .map_err(|e| (e.exit_code(), e.to_string()))?;
    let cwd = std::path::PathBuf::from(OsString::from_vec(job.cwd.clone()));
    if !cwd.is_dir() {
        return Err((
            1,
            format!(
                "the working directory {} does not exist here",
                cwd.display()
            ),
        ));
    }
    let secret_fd = rcomm_runtime::os::sealed_memfd("rcomm-job-secret", &job.secret, false)
        .map_err(|e| (1, format!("cannot create the job secret's memfd: {e}")))?;
    let watchdog =
        Watchdog::spawn(&job.job_id).map_err(|e| (1, format!("cannot start the watchdog: {e}")))?;
    let bind_to = match job.bind_to {
        1 => Some(crate::cli::BindTo::Core),
        2 => Some(crate::cli::BindTo::None),
        3 => Some(crate::cli::BindTo::Numa),
        4 => Some(crate::cli::BindTo::Socket),
        _ => None,
    };
    let local_size = job.ranks.len() as u32;
    let share = binding::Share {
        offset: job.kernel_offset,
        ranks: local_size,
        kernel_ranks: job.kernel_ranks,
    };
    let ppr = crate::hosts::PprUnit::from_code(job.ppr_unit).map(|u| (job.ppr, u));
    let (binding, warning) = binding::plan(bind_to, ppr, share, places);
    if let Some(w) = warning {
        let _ = send(
            out,
            &FromDaemon::Say {
                msg: format!("warning: {w}"),
            },
        );
    }
    let spec = JobSpec {
        program,
        argv0,
        args: job
            .args
            .iter()
            .map(|a| OsString::from_vec(a.clone()))
            .collect(),
        size: job.size,
        cwd: Some(cwd),
        kvs_addr: job.kvs_addr.clone(),
        job_id: job.job_id.clone(),
        secret_fd: secret_fd.as_raw_fd(),
        env: job
            .env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from_vec(v.clone())))
            .collect(),
    };
    let sink_out = out.clone();
    let setup = HostSetup {
        spec: &spec,
        secret_fd: secret_fd.as_raw_fd(),
        register_fd: watchdog.register_fd(),
        sink: Arc::new(move |is_err, b: &[u8]| {
            // Frames stay below the channel's limit however long a rank's line is.
            for chunk in b.chunks(ctl::CTL_LIMIT / 2) {
                let _ = send(
                    &sink_out,
                    &FromDaemon::Output {
                        stderr: is_err,
                        bytes: chunk.to_vec(),
                    },
                );
            }
        }),
        raw: job.no_prefix,
    };
    let (done_tx, done_rx) = channel();
    let mut streams = 0;
    let mut ranks: Vec<Rank> = Vec::new();
    let mut failed_start = None;
    for (i, &r) in job.ranks.iter().enumerate() {
        let cpus = binding[i].clone();
        match host::start_rank(
            &setup,
            r,
            i as u32,
            local_size,
            cpus.as_deref(),
            false,
            &done_tx,
        ) {
            Ok(s) => {
                let pid = s.child.id() as i32;
                streams += s.streams;
                if job.report_bindings {
                    let msg = match &cpus {
                        Some(c) => {
                            format!("rank {r} (pid {pid}) bound to cpus {}", spawn::cpu_list(c))
                        }
                        None => format!(
                            "rank {r} (pid {pid}) not bound (may run on cpus {})",
                            spawn::cpu_list(allowed)
                        ),
                    };
                    let _ = send(out, &FromDaemon::Say { msg });
                }
                let _ = send(out, &FromDaemon::Started { rank: r, pid });
                ranks.push(Rank {
                    rank: r,
                    pid,
                    child: s.child,
                    ended: None,
                });
            }
            Err(e) => {
                failed_start = Some((
                    if e.kind() == io::ErrorKind::NotFound {
                        127
                    } else {
                        126
                    },
                    format!("cannot start rank {r} ({}): {e}", spec.program.display()),
                ));
                break;
            }
        }
    }
    drop(done_tx);
    let grace = Duration::from_millis(job.grace_ms as u64);
    // The stop sequence: signals still to send and when.
    let mut stop: Option<(Instant, Vec<i32>)> = None;
    if let Some((code, msg)) = &failed_start {
        let _ = send(
            out,
            &FromDaemon::Failed {
                code: *code,
                msg: msg.clone(),
            },
        );
        for r in &ranks {
            let _ = os::kill_group(r.pid, libc::SIGKILL);
        }
        stop = Some((Instant::now(), vec![]));
    }
    let mut head_gone = false;
    let mut last_heard = Instant::now();
    loop {
        for r in ranks.iter_mut().filter(|r| r.ended.is_none()) {
            if let Ok(Some(end)) = os::peek_exit(r.pid) {
                r.ended = Some(end);
                if send(
                    out,
                    &FromDaemon::Exited {
                        rank: r.rank,
                        ending: end,
                    },
                )
                .is_err()
                {
                    head_gone = true;
                }
            }
        }
        let running = ranks.iter().filter(|r| r.ended.is_none()).count();
        if running == 0 {
            break;
        }
        while let Ok(m) = ctl_rx.try_recv() {
            last_heard = Instant::now();
            match m {
                Ctl::Msg(ToDaemon::Signal(sig)) => {
                    for r in ranks.iter().filter(|r| r.ended.is_none()) {
                        let _ = os::kill_group(r.pid, sig);
                    }
                }
                Ctl::Msg(ToDaemon::SignalRank { rank, sig }) => {
                    for r in ranks.iter().filter(|r| r.rank == rank && r.ended.is_none()) {
                        let _ = os::kill_group(r.pid, sig);
                    }
                }
                Ctl::Msg(ToDaemon::Job(_) | ToDaemon::Heartbeat) => {}
                Ctl::Eof => head_gone = true,
                Ctl::Bad(why) => {
                    say(format_args!(
                        "the control channel carried something that is not rcomm-run's protocol ({why}); ending this host's ranks"
                    ));
                    head_gone = true;
                }
            }
        }
        if !head_gone && last_heard.elapsed() > ctl::SILENCE_LIMIT {
            say(format_args!(
                "no word from the head for {} s (network cut?); ending this host's ranks",
                ctl::SILENCE_LIMIT.as_secs()
            ));
            head_gone = true;
        }
        if head_gone && stop.is_none() {
            // The head is gone: SIGTERM now, SIGKILL after the grace period.
            for r in ranks.iter().filter(|r| r.ended.is_none()) {
                let _ = os::kill_group(r.pid, libc::SIGTERM);
            }
            stop = Some((Instant::now() + grace, vec![libc::SIGKILL]));
        }
        if let Some((at, steps)) = &mut stop
            && Instant::now() >= *at
        {
            match steps.pop() {
                Some(sig) => {
                    for r in ranks.iter().filter(|r| r.ended.is_none()) {
                        let _ = os::kill_group(r.pid, sig);
                    }
                    *at = Instant::now() + KILL_PATIENCE;
                }
                None => break, // give up on ranks that outlive SIGKILL; the watchdog keeps trying
            }
        }
        if let Some(sig) = signals.wait(TICK)
            && signals::TERMINATING.contains(&sig)
        {
            // Someone on this host stops the daemon: treat it as the head going away.
            head_gone = true;
        }
    }
    for r in &ranks {
        let _ = os::kill_group(r.pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + OUTPUT_PATIENCE;
    for _ in 0..streams {
        if done_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_err()
        {
            break;
        }
    }
    if ranks.iter().all(|r| r.ended.is_some()) {
        watchdog.release();
    } else {
        watchdog.abandon();
    }
    for r in &mut ranks {
        if r.ended.is_some() {
            let _ = r.child.wait();
        }
    }
    drop(secret_fd);
    Ok(())
}
