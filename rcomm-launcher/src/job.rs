//! Running one job: start the ranks, supervise them, stop them, report.
//!
//! The supervising loop runs in the main thread (which is also the thread that forked the
//! ranks — `PR_SET_PDEATHSIG` fires when *that thread* exits). Each turn it drains the key-value
//! store's events, looks for ranks that ended, advances the stop sequence, and waits up to a
//! few milliseconds for a signal. Events are handled before exits so that a rank that calls
//! abort and then exits is reported as an abort.
//!
//! Ranks on other hosts are run by one `rcomm-run --daemon` per host ([`crate::remote`],
//! [`crate::daemon`]); their starts, endings and failures arrive as events and go through the
//! same policy as local ones. Failure notices to survivors go through the key-value store,
//! which every rank on every host is connected to.
//!
//! Ranks that end are not reaped until the job is over: a zombie keeps its pid, so the
//! launcher can go on signalling that rank's process group (grandchildren may still live in
//! it) without risk of hitting a reused id.

use crate::LaunchError;
use crate::binding;
use crate::cli::{BindTo, Cli, OnFailure};
use crate::ctl::{DaemonJob, FromDaemon, ToDaemon};
use crate::host::{self, HostSetup};
use crate::hosts::{self, HostSpec};
use crate::os::{self, Ending};
use crate::output::{self, Dest, say};
use crate::remote::{Daemon, DaemonEvent};
use crate::signals::{self, Signals};
use crate::spawn::{self, JobSpec};
use crate::watchdog::Watchdog;
use rcomm_runtime::auth::Secret;
use rcomm_runtime::bootstrap::{KvsEvent, KvsServer};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::process::Child;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// Longest wait for a signal per turn: bounds how late a key-value store event is seen.
const TICK: Duration = Duration::from_millis(20);
/// After SIGKILL, how long to wait for ranks to end before giving up on them (a process in
/// uninterruptible sleep cannot die until the kernel lets it).
const KILL_PATIENCE: Duration = Duration::from_secs(5);
/// At the end, how long to wait for the ranks' output pipes to close.
const OUTPUT_PATIENCE: Duration = Duration::from_secs(2);
/// How long the ranks have to send their flight recorders for a hang report (each rank's
/// reader thread answers at once; a stopped process never does).
const DUMP_PATIENCE: Duration = Duration::from_secs(2);
/// After a hang report, watchdogs firing on other ranks within this long add nothing new.
const REPORT_QUIET: Duration = Duration::from_secs(5);
/// How long a remote host has to answer with its daemon's hello (ssh connect included, whose
/// own timeout is shorter), so an unreachable host is named well within 10 s.
const HELLO_DEADLINE: Duration = Duration::from_secs(8);

struct RankProc {
    rank: u32,
    /// Index of its host in the host list.
    host: usize,
    /// Its pid on its host (0 until a remote daemon reports it).
    pid: i32,
    /// The process, for ranks started here.
    child: Option<Child>,
    started: Instant,
    ended: Option<Ending>,
    /// It connected to the key-value store (it runs rcomm) ...
    connected: bool,
    /// ... and said it is finishing normally.
    finalized: bool,
}

/// A hang report being collected: the ranks' flight recorders, until all asked have answered
/// or [`DUMP_PATIENCE`] has passed.
struct Collect {
    id: u64,
    why: String,
    asked: Vec<u32>,
    got: std::collections::BTreeMap<u32, Result<rcomm_runtime::wire::FlightDump, String>>,
    deadline: Instant,
    /// What the launcher knows of ranks that cannot answer (declared hung).
    notes: std::collections::BTreeMap<u32, String>,
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
    /// The job's hosts, and whether messages name them (a job given hosts).
    hosts: Vec<HostSpec>,
    multi: bool,
    /// One daemon per remote host (indexed like `hosts`; `None` for hosts run here).
    daemons: Vec<Option<Daemon>>,
    remote_events: Receiver<(usize, DaemonEvent)>,
    /// The job's exit status, fixed by the first failure, abort or terminating signal.
    outcome: Option<i32>,
    stop: Option<Stop>,
    /// Set once the launcher itself has signalled the ranks: later endings are our doing and
    /// are not reported one by one.
    signalled: bool,
    /// The first terminating signal received, if any.
    received: Option<i32>,
    /// When heartbeats were last sent to the daemons.
    last_beat: Instant,
    /// The ranks' liveness settings (`RCOMM_HEARTBEAT`), `None` when off.
    heartbeat: Option<rcomm_runtime::config::Heartbeat>,
    /// Hosts whose daemon was lost while ranks ran there.
    lost_hosts: Vec<String>,
    /// The hang report being collected, if any.
    collect: Option<Collect>,
    /// Ids of hang-report collections so far.
    reports: u64,
    /// When the last hang report was printed.
    last_report: Option<Instant>,
}

fn new_job_id() -> io::Result<String> {
    let mut b = [0u8; 8];
    rcomm_runtime::os::random_bytes(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The hosts of the job: from -H and --hostfile, else this machine with N slots.
fn job_hosts(cli: &Cli) -> Result<(Vec<HostSpec>, bool), LaunchError> {
    let mut hosts = Vec::new();
    for h in &cli.hosts {
        hosts::parse_host_list(h, &mut hosts).map_err(LaunchError::Hosts)?;
    }
    if let Some(f) = &cli.hostfile {
        let text = std::fs::read_to_string(f).map_err(|e| {
            LaunchError::Hosts(format!("cannot read the hostfile {}: {e}", f.display()))
        })?;
        hosts::parse_hostfile(&text, f, &mut hosts).map_err(LaunchError::Hosts)?;
        if hosts.is_empty() {
            return Err(LaunchError::Hosts(format!(
                "the hostfile {} names no host",
                f.display()
            )));
        }
    }
    if !hosts.is_empty() {
        return Ok((hosts, true));
    }
    let n = cli.ranks.ok_or_else(|| {
        LaunchError::Hosts(
            "give the number of ranks with -n N (or hosts with -H / --hostfile)".into(),
        )
    })?;
    Ok((
        vec![HostSpec {
            name: "localhost".into(),
            slots: n,
        }],
        false,
    ))
}

/// The environment a remote host's ranks get: `-x` exports and the launcher's own `RCOMM_*`
/// settings (but not the per-rank launcher variables, nor the launcher's own `RCOMM_SSH`).
fn remote_env(cli: &Cli) -> Vec<(String, Vec<u8>)> {
    let mut env: Vec<(String, Vec<u8>)> = Vec::new();
    let mut set = |k: String, v: Vec<u8>| match env.iter_mut().find(|(n, _)| *n == k) {
        Some(e) => e.1 = v,
        None => env.push((k, v)),
    };
    for (k, v) in std::env::vars_os() {
        if let Some(k) = k.to_str()
            && k.starts_with("RCOMM_")
            && !spawn::LAUNCHER_VARS.contains(&k)
            && k != "RCOMM_SSH"
        {
            set(k.to_string(), v.into_vec());
        }
    }
    for e in &cli.export {
        let v = match &e.value {
            Some(v) => Some(v.clone().into_bytes()),
            None => std::env::var_os(&e.name).map(OsString::into_vec),
        };
        if let Some(v) = v {
            set(e.name.clone(), v);
        }
    }
    env
}

fn bind_code(b: Option<BindTo>) -> u8 {
    match b {
        None => 0,
        Some(BindTo::Core) => 1,
        Some(BindTo::None) => 2,
        Some(BindTo::Numa) => 3,
        Some(BindTo::Socket) => 4,
    }
}

/// Waits for every daemon's hello (or its failure), watching for signals meanwhile. Returns
/// the hosts that failed, each with its reason, or the signal that interrupted the wait.
fn await_hellos(
    daemons: &mut [Option<Daemon>],
    rx: &Receiver<(usize, DaemonEvent)>,
    signals: &Signals,
) -> Result<Vec<String>, i32> {
    let deadline = Instant::now() + HELLO_DEADLINE;
    let mut failed = Vec::new();
    loop {
        let waiting = daemons
            .iter()
            .flatten()
            .filter(|d| d.hello.is_none() && !d.closed)
            .count();
        if waiting == 0 {
            return Ok(failed);
        }
        if Instant::now() >= deadline {
            for d in daemons.iter_mut().flatten() {
                if d.hello.is_none() && !d.closed {
                    d.closed = true;
                    failed.push(format!(
                        "host {}: no answer from rcomm-run --daemon within {} s (host down, or ssh waiting for something?)",
                        d.name,
                        HELLO_DEADLINE.as_secs()
                    ));
                }
            }
            return Ok(failed);
        }
        while let Ok((h, ev)) = rx.try_recv() {
            let Some(d) = daemons.get_mut(h).and_then(Option::as_mut) else {
                continue;
            };
            match ev {
                DaemonEvent::Msg(FromDaemon::Hello {
                    hostname,
                    head_ip,
                    cores,
                    numas,
                    packages,
                    boot_id,
                }) => {
                    let places = hosts::HostPlaces {
                        cores,
                        numas,
                        packages,
                    };
                    d.hello = Some((hostname, head_ip, places, boot_id));
                    d.echo_stderr();
                }
                DaemonEvent::Msg(_) => {}
                DaemonEvent::Closed(err) => {
                    d.closed = true;
                    let why = match err {
                        Some(e) => format!("its answer is not rcomm's control protocol ({e})"),
                        None => d.failure_reason(Duration::from_secs(1)),
                    };
                    failed.push(format!(
                        "host {}: cannot start rcomm-run --daemon there: {why}",
                        d.name
                    ));
                }
            }
        }
        if let Some(sig) = signals.wait(TICK)
            && signals::TERMINATING.contains(&sig)
        {
            return Err(sig);
        }
    }
}

/// Closes every daemon's channel and reaps its ssh.
fn shut_down_daemons(daemons: &mut [Option<Daemon>], within: Duration) {
    for d in daemons.iter_mut().flatten() {
        d.close();
    }
    for d in daemons.iter_mut().flatten() {
        d.reap(within);
    }
}

/// Runs the job described by `cli`; returns the launcher's exit status.
pub fn run(cli: Cli) -> Result<i32, LaunchError> {
    if let Some(m) = cli.min_ranks
        && cli.ranks.is_some_and(|n| m > n)
    {
        return Err(LaunchError::Hosts(format!(
            "--min-ranks {m} is more than the {} ranks asked for",
            cli.ranks.unwrap_or_default()
        )));
    }
    // No thread exists yet: block the signals now so every later thread inherits the mask.
    let signals = Signals::install().map_err(LaunchError::Signals)?;
    let mut lost_hosts: Vec<String> = Vec::new();
    for attempt in 0.. {
        let mut c = cli.clone();
        c.export.retain(|e| e.name != "RCOMM_RESTART_COUNT");
        c.export.push(crate::cli::Export {
            name: "RCOMM_RESTART_COUNT".into(),
            value: Some(attempt.to_string()),
        });
        let a = run_once(&c, &signals, &lost_hosts)?;
        let last = attempt >= cli.max_restarts;
        if a.code == 0 || a.no_restart || last {
            if a.code != 0 && cli.max_restarts > 0 && !a.no_restart {
                say(format_args!(
                    "the job failed after {} restart(s); giving up (--max-restarts {})",
                    attempt, cli.max_restarts
                ));
            }
            return Ok(a.code);
        }
        // Without --min-ranks a restart keeps every host (a lost one may be back).
        if cli.min_ranks.is_some() {
            lost_hosts.extend(a.lost_hosts);
        }
        say(format_args!(
            "the job failed (exit status {}); restarting it ({} of {}), RCOMM_RESTART_COUNT={}{}",
            a.code,
            attempt + 1,
            cli.max_restarts,
            attempt + 1,
            if lost_hosts.is_empty() {
                String::new()
            } else {
                format!(", without the lost hosts {}", lost_hosts.join(", "))
            }
        ));
    }
    unreachable!("the loop returns")
}

/// How one run of the job ended.
struct Attempt {
    code: i32,
    /// A terminating signal stopped it, or it could not start: not restarted.
    no_restart: bool,
    /// Hosts whose daemon was lost with ranks on it.
    lost_hosts: Vec<String>,
}

fn run_once(cli: &Cli, signals: &Signals, lost_hosts: &[String]) -> Result<Attempt, LaunchError> {
    let final_ = |code: i32| Attempt {
        code,
        no_restart: true,
        lost_hosts: Vec::new(),
    };
    let signals = signals.clone();
    let (mut hosts, multi) = job_hosts(cli)?;
    if !lost_hosts.is_empty() {
        hosts.retain(|h| !lost_hosts.contains(&h.name));
        if hosts.is_empty() {
            return Err(LaunchError::Hosts("every host was lost".into()));
        }
    }
    let me = rcomm_runtime::identity::hostname();
    let is_local: Vec<bool> = hosts
        .iter()
        .map(|h| hosts::is_local(&h.name, &me))
        .collect();
    // PROGRAM is looked up here only if ranks may run here; each remote host looks it up
    // itself, so a host that lacks it is named.
    let program = if is_local.iter().any(|&l| l) {
        Some(crate::program::find_program(
            &cli.command[0],
            std::env::var_os("PATH").as_deref(),
            crate::program::exe_dir().as_deref(),
        )?)
    } else {
        None
    };
    for e in cli.export.iter().filter(|e| e.value.is_none()) {
        if std::env::var_os(&e.name).is_none() {
            say(format_args!(
                "warning: -x {0}: {0} is not set here, so the ranks do not get it either; use -x {0}=VALUE",
                e.name
            ));
        }
    }
    // The ranks' liveness settings, as they will see them (-x may set them for the ranks).
    let heartbeat = {
        let mut env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
        for e in cli.export.iter().filter(|e| e.name == "RCOMM_HEARTBEAT") {
            if let Some(v) = &e.value {
                env.insert(e.name.clone(), v.to_string());
            }
        }
        rcomm_runtime::config::Heartbeat::from_env(&env)
            .map_err(|e| LaunchError::Config(e.to_string()))?
    };
    let job_id = new_job_id().map_err(|e| LaunchError::Secret(e.to_string()))?;
    let secret = Secret::random().map_err(|e| LaunchError::Secret(e.to_string()))?;
    let secret_bytes = *secret.as_bytes();
    let secret_fd = rcomm_runtime::os::sealed_memfd("rcomm-job-secret", secret.as_bytes(), false)
        .map_err(|e| LaunchError::Secret(format!("memfd: {e}")))?;
    let watchdog = Watchdog::spawn(&job_id).map_err(LaunchError::Watchdog)?;

    // Remote hosts first: their daemons report their cores (for ppr mapping) and the address
    // they reach this host by (for the key-value store).
    let (rtx, remote_events) = channel();
    let mut daemons: Vec<Option<Daemon>> = (0..hosts.len()).map(|_| None).collect();
    let any_remote = is_local.iter().any(|&l| !l);
    let mut failed = Vec::new();
    if any_remote {
        let ssh = cli
            .ssh
            .clone()
            .or_else(|| {
                rcomm_runtime::config::global()
                    .as_ref()
                    .ok()
                    .and_then(|c| c.ssh.clone())
            })
            .unwrap_or_else(|| "ssh".into());
        let exe = std::env::current_exe().map_err(LaunchError::Watchdog)?;
        for (h, spec) in hosts.iter().enumerate().filter(|(h, _)| !is_local[*h]) {
            let argv = crate::remote::ssh_argv(&ssh, &spec.name, &exe, &job_id);
            match Daemon::start(h, &spec.name, &argv, rtx.clone()) {
                Ok(d) => daemons[h] = Some(d),
                Err(e) => failed.push(format!(
                    "host {}: cannot run the ssh command {:?}: {e}",
                    spec.name, argv[0]
                )),
            }
        }
        match await_hellos(&mut daemons, &remote_events, &signals) {
            Ok(f) => failed.extend(f),
            Err(sig) => {
                say(format_args!(
                    "received {} while connecting to the hosts; stopping",
                    rcomm_runtime::os::signal_name(sig)
                ));
                shut_down_daemons(&mut daemons, Duration::from_secs(2));
                watchdog.release();
                return Ok(final_(128 + sig));
            }
        }
    }
    drop(rtx);
    if !failed.is_empty() {
        for f in &failed {
            say(format_args!("{f}"));
        }
        say(format_args!("no rank was started"));
        shut_down_daemons(&mut daemons, Duration::from_secs(2));
        watchdog.release();
        return Ok(final_(1));
    }

    let allowed = os::allowed_cpus().unwrap_or_default();
    let places = binding::Places::new(&allowed, &binding::this_machine());
    let here = hosts::HostPlaces {
        cores: places.cores() as u32,
        numas: places.numas() as u32,
        packages: places.packages() as u32,
    };
    let my_boot_id = binding::boot_id();
    let unknown = hosts::HostPlaces {
        cores: 1,
        numas: 1,
        packages: 1,
    };
    let host_places: Vec<hosts::HostPlaces> = (0..hosts.len())
        .map(|h| match &daemons[h] {
            Some(d) => d.hello.as_ref().map_or(unknown, |x| x.2),
            None => here,
        })
        .collect();
    let boot_ids: Vec<String> = (0..hosts.len())
        .map(|h| match &daemons[h] {
            Some(d) => d.hello.as_ref().map(|x| x.3.clone()).unwrap_or_default(),
            None => my_boot_id.clone(),
        })
        .collect();
    let capacity: u32 = hosts::capacities(&hosts, cli.map_by, &host_places)
        .iter()
        .sum();
    let mut n = cli.ranks.unwrap_or(capacity);
    if !lost_hosts.is_empty() {
        // A restart without the lost hosts: as many ranks as the hosts left hold.
        n = n.min(capacity);
        if let Some(m) = cli.min_ranks.filter(|&m| n < m) {
            say(format_args!(
                "the hosts left hold {n} ranks, fewer than --min-ranks {m}; not restarting"
            ));
            shut_down_daemons(&mut daemons, Duration::from_secs(2));
            watchdog.release();
            return Ok(final_(1));
        }
    }
    let rank_host = match hosts::map_ranks(&hosts, n, cli.map_by, &host_places) {
        Ok(m) => m,
        Err(e) => {
            shut_down_daemons(&mut daemons, Duration::from_secs(2));
            watchdog.release();
            return Err(LaunchError::Hosts(e));
        }
    };
    let per_host: Vec<Vec<u32>> = (0..hosts.len())
        .map(|h| (0..n).filter(|&r| rank_host[r as usize] == h).collect())
        .collect();

    // With remote hosts the store listens on every interface of this host; each host is told
    // the address it reaches this host by. Only holders of the job secret are answered.
    // Without remote hosts: loopback, or RCOMM_SOCKET_IFNAME's address when it is set (ranks
    // in other network namespaces reach the store there).
    let bind_ip: std::net::IpAddr = if any_remote {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        kvs_ip()
    };
    let mut kvs = match KvsServer::start(SocketAddr::from((bind_ip, 0)), secret, n) {
        Ok(k) => k,
        Err(e) => {
            shut_down_daemons(&mut daemons, Duration::from_secs(2));
            watchdog.release();
            return Err(LaunchError::Kvs(e));
        }
    };
    let port = kvs.addr().port();
    let events = kvs
        .take_events()
        .expect("a fresh server has its event stream");
    // Local ranks must publish addresses the other hosts can reach: use this host's address
    // as the first remote host saw it.
    let here_ip = daemons
        .iter()
        .flatten()
        .filter_map(|d| d.hello.as_ref().map(|x| x.1.clone()))
        .find(|ip| !ip.is_empty())
        .unwrap_or_else(|| kvs.addr().ip().to_string());
    let local_kvs = format!("{here_ip}:{port}");

    let mut sup = Supervisor {
        heartbeat,
        lost_hosts: Vec::new(),
        on_failure: cli.on_failure,
        grace: cli.grace,
        kvs,
        events,
        signals,
        ranks: (0..n)
            .map(|r| RankProc {
                rank: r,
                host: rank_host[r as usize],
                pid: 0,
                child: None,
                started: Instant::now(),
                ended: None,
                connected: false,
                finalized: false,
            })
            .collect(),
        hosts: hosts.clone(),
        multi,
        daemons,
        remote_events,
        outcome: None,
        stop: None,
        signalled: false,
        received: None,
        last_beat: Instant::now(),
        collect: None,
        reports: 0,
        last_report: None,
    };

    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let env = remote_env(cli);
    let host_ranks: Vec<u32> = per_host.iter().map(|m| m.len() as u32).collect();
    for (h, (d, mine)) in sup.daemons.iter_mut().zip(&per_host).enumerate() {
        let Some(d) = d.as_mut() else {
            continue;
        };
        if mine.is_empty() {
            d.close(); // a host the mapping left empty: its daemon just exits
            continue;
        }
        let ip = d
            .hello
            .as_ref()
            .map(|x| x.1.clone())
            .filter(|ip| !ip.is_empty())
            .unwrap_or_else(|| here_ip.clone());
        let job = DaemonJob {
            program: cli.command[0].as_bytes().to_vec(),
            args: cli.command[1..]
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect(),
            cwd: cwd.as_os_str().as_bytes().to_vec(),
            env: env.clone(),
            size: n,
            ranks: mine.clone(),
            kvs_addr: format!("{ip}:{port}"),
            job_id: job_id.clone(),
            secret: secret_bytes,
            bind_to: bind_code(cli.bind_to),
            ppr: cli.map_by.ppr().map_or(1, |p| p.0),
            ppr_unit: cli.map_by.ppr().map_or(0, |p| p.1.code()),
            kernel_offset: binding::share_of(h, &boot_ids, &host_ranks).offset,
            kernel_ranks: binding::share_of(h, &boot_ids, &host_ranks).kernel_ranks,
            report_bindings: cli.report_bindings,
            no_prefix: cli.no_prefix,
            grace_ms: cli.grace.as_millis().min(u32::MAX as u128) as u32,
        };
        // A daemon that cannot take the job is seen as closed by its reader.
        d.last_heard = Instant::now();
        let _ = d.send(&ToDaemon::Job(Box::new(job)));
    }

    let (done_tx, done_rx) = channel();
    let mut streams = 0;
    if let Some(program) = program {
        let spec = JobSpec {
            program,
            argv0: cli.command[0].clone(),
            args: cli.command[1..].to_vec(),
            size: n,
            cwd: None,
            kvs_addr: local_kvs,
            job_id,
            secret_fd: secret_fd.as_raw_fd(),
            env: spawn::explicit_exports(&cli.export),
        };
        let setup = HostSetup {
            spec: &spec,
            secret_fd: secret_fd.as_raw_fd(),
            register_fd: watchdog.register_fd(),
            sink: Arc::new(|is_err, b: &[u8]| {
                output::emit(if is_err { Dest::Stderr } else { Dest::Stdout }, b)
            }),
            raw: cli.no_prefix,
        };
        // Like a shell's background job, a background launcher gives rank 0 no terminal input.
        let stdin_to_rank0 = !os::stdin_is_background_tty();
        'hosts: for h in (0..hosts.len()).filter(|&h| is_local[h]) {
            let mine = &per_host[h];
            let share = binding::share_of(h, &boot_ids, &host_ranks);
            let (binding, warning) = binding::plan(cli.bind_to, cli.map_by.ppr(), share, &places);
            if let Some(w) = warning {
                say(format_args!("warning: {w}"));
            }
            for (i, &r) in mine.iter().enumerate() {
                let cpus = binding[i].clone();
                let mut started = match host::start_rank(
                    &setup,
                    r,
                    i as u32,
                    mine.len() as u32,
                    cpus.as_deref(),
                    r == 0 && stdin_to_rank0,
                    &done_tx,
                ) {
                    Ok(s) => s,
                    Err(e) => {
                        sup.spawn_failed(r, &spec, e);
                        break 'hosts;
                    }
                };
                let pid = started.child.id() as i32;
                streams += started.streams;
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
                if let Some(stdin) = started.child.stdin.take()
                    && output::forward_stdin(stdin).is_err()
                {
                    say(format_args!(
                        "warning: cannot start the thread forwarding stdin; rank 0's stdin is closed"
                    ));
                }
                let rp = &mut sup.ranks[r as usize];
                rp.pid = pid;
                rp.child = Some(started.child);
                rp.started = Instant::now();
            }
        }
    }
    drop(done_tx);

    sup.supervise();
    let code = sup.outcome.unwrap_or(0);

    // Whatever a rank left in its process group goes with the job.
    for r in sup.ranks.iter().filter(|r| r.child.is_some()) {
        let _ = os::kill_group(r.pid, libc::SIGKILL);
    }
    // End-of-file tells each daemon to end what is left on its host and exit; wait for their
    // channels to close, so their ranks' last output lines are written before we exit.
    for d in sup.daemons.iter_mut().flatten() {
        d.close();
    }
    let deadline = Instant::now() + OUTPUT_PATIENCE + sup.grace + KILL_PATIENCE;
    while sup.daemons.iter().flatten().any(|d| !d.closed) && Instant::now() < deadline {
        if let Ok((h, ev)) = sup.remote_events.recv_timeout(TICK)
            && matches!(ev, DaemonEvent::Closed(_))
            && let Some(d) = sup.daemons[h].as_mut()
        {
            d.closed = true;
        }
    }
    shut_down_daemons(&mut sup.daemons, Duration::from_secs(1));
    let deadline = Instant::now() + OUTPUT_PATIENCE;
    for _ in 0..streams {
        if done_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_err()
        {
            break; // a process that left the group still holds a pipe; do not wait for it
        }
    }
    let local_running = sup
        .ranks
        .iter()
        .any(|r| r.child.is_some() && r.ended.is_none());
    if !local_running {
        // Everything is dead: the watchdog must not kill these (soon reusable) ids any more.
        watchdog.release();
    } else {
        // Ranks we gave up on: the watchdog keeps trying (their zombies, not yet reaped, keep
        // every recorded id valid until it has).
        watchdog.abandon();
    }
    for r in &mut sup.ranks {
        if r.ended.is_some()
            && let Some(c) = r.child.as_mut()
        {
            let _ = c.wait();
        }
    }
    let attempt = Attempt {
        code,
        no_restart: sup.received.is_some(),
        lost_hosts: std::mem::take(&mut sup.lost_hosts),
    };
    drop(sup);
    drop(secret_fd);
    Ok(attempt)
}

impl Supervisor {
    fn running(&self) -> usize {
        self.ranks.iter().filter(|r| r.ended.is_none()).count()
    }

    fn signal_all(&mut self, sig: i32) {
        for r in self.ranks.iter().filter(|r| r.child.is_some()) {
            let _ = os::kill_group(r.pid, sig);
        }
        for d in self.daemons.iter_mut().flatten() {
            let _ = d.send(&ToDaemon::Signal(sig));
        }
    }

    /// The host rank `i` runs on, as users know it: the name it was given, or this machine's.
    fn host_name(&self, i: usize) -> String {
        if self.multi {
            self.hosts[self.ranks[i].host].name.clone()
        } else {
            rcomm_runtime::identity::hostname()
        }
    }

    /// " on HOST" in messages of a job that was given hosts.
    fn on_host(&self, i: usize) -> String {
        if self.multi {
            format!(" on {}", self.hosts[self.ranks[i].host].name)
        } else {
            String::new()
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
        let host = self.host_name(rank as usize);
        self.kvs
            .notify_rank_failed(rank, &host, &format!("could not be started: {e}"));
        self.set_outcome(code);
        // Local ranks not started (this one and those after it) will never end by themselves.
        let here: Vec<usize> = self.ranks[rank as usize..]
            .iter()
            .filter(|r| r.child.is_none() && self.daemons[r.host].is_none())
            .map(|r| r.rank as usize)
            .collect();
        for i in here {
            self.ranks[i].ended = Some(Ending::Exited(code));
        }
        self.begin_stop(&[libc::SIGTERM, libc::SIGKILL]);
    }

    /// Takes what the daemons reported since the last turn.
    fn poll_remote(&mut self) {
        if self.last_beat.elapsed() >= crate::ctl::HEARTBEAT {
            self.last_beat = Instant::now();
            for d in self.daemons.iter_mut().flatten().filter(|d| !d.closed) {
                let _ = d.send(&ToDaemon::Heartbeat);
            }
        }
        let mut events: Vec<(usize, DaemonEvent)> = Vec::new();
        while let Ok(e) = self.remote_events.try_recv() {
            if let Some(d) = self.daemons[e.0].as_mut() {
                d.last_heard = Instant::now();
            }
            events.push(e);
        }
        // A daemon silent for too long is gone, whatever ssh thinks (it notices a cut link
        // late): its ranks are lost.
        for (h, d) in self.daemons.iter().enumerate() {
            if let Some(d) = d
                && !d.closed
                && d.last_heard.elapsed() > crate::ctl::SILENCE_LIMIT
            {
                events.push((
                    h,
                    DaemonEvent::Closed(Some(format!(
                        "no word from it for {} s: host down or network cut?",
                        crate::ctl::SILENCE_LIMIT.as_secs()
                    ))),
                ));
            }
        }
        for (h, ev) in events {
            match ev {
                DaemonEvent::Msg(FromDaemon::Started { rank, pid }) => {
                    if let Some(r) = self.ranks.get_mut(rank as usize)
                        && r.host == h
                    {
                        r.pid = pid;
                        r.started = Instant::now();
                    }
                }
                DaemonEvent::Msg(FromDaemon::Exited { rank, ending }) => {
                    if self
                        .ranks
                        .get(rank as usize)
                        .is_some_and(|r| r.host == h && r.ended.is_none())
                    {
                        self.rank_ended(rank as usize, ending);
                    }
                }
                DaemonEvent::Msg(FromDaemon::Failed { code, msg }) => {
                    let name = self.hosts[h].name.clone();
                    say(format_args!("host {name}: {msg}; stopping the other ranks"));
                    self.set_outcome(code);
                    let lost: Vec<usize> = (0..self.ranks.len())
                        .filter(|&i| self.ranks[i].host == h && self.ranks[i].ended.is_none())
                        .collect();
                    for i in lost {
                        self.ranks[i].ended = Some(Ending::Exited(code));
                        self.kvs.notify_rank_failed(
                            i as u32,
                            &name,
                            &format!("could not be started on {name}: {msg}"),
                        );
                    }
                    self.begin_stop(&[libc::SIGTERM, libc::SIGKILL]);
                }
                DaemonEvent::Msg(_) => {}
                DaemonEvent::Closed(err) => {
                    if let Some(d) = self.daemons[h].as_mut() {
                        d.closed = true;
                    }
                    let lost: Vec<usize> = (0..self.ranks.len())
                        .filter(|&i| self.ranks[i].host == h && self.ranks[i].ended.is_none())
                        .collect();
                    if lost.is_empty() {
                        continue;
                    }
                    self.lost_hosts.push(self.hosts[h].name.clone());
                    let why = match err {
                        Some(e) => e,
                        None => self.daemons[h]
                            .as_mut()
                            .map(|d| d.failure_reason(Duration::from_millis(200)))
                            .unwrap_or_default(),
                    };
                    say(format_args!(
                        "host {}: lost the connection to its rcomm-run daemon ({why}); its ranks {} are lost",
                        self.hosts[h].name,
                        rcomm_runtime::identity::rank_list(
                            &lost.iter().map(|&i| i as u32).collect::<Vec<_>>()
                        )
                    ));
                    for i in lost {
                        self.rank_ended(i, Ending::Lost);
                    }
                }
            }
        }
    }

    /// Rank `i` ended (here or on another host): the finalize check, then the failure policy.
    fn rank_ended(&mut self, i: usize, mut end: Ending) {
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

    fn supervise(&mut self) {
        loop {
            while let Ok(ev) = self.events.try_recv() {
                self.on_event(ev);
            }
            self.poll_exits();
            self.poll_remote();
            self.check_heartbeats();
            self.poll_report(false);
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
        // A report under way prints what it has: nobody is left to answer.
        self.poll_report(true);
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
            KvsEvent::FlightDump {
                rank,
                id,
                why,
                dump,
            } => self.on_dump(rank, id, why, dump),
        }
    }

    /// Declares hung the ranks whose heartbeats stopped (a stopped process keeps its sockets
    /// open, so only its silence shows it): kills it, so it cannot come back and act on a
    /// world that has moved on, and tells the others (`PeerHung`).
    fn check_heartbeats(&mut self) {
        let Some(hb) = self.heartbeat else { return };
        for (rank, silent) in self.kvs.silent_ranks(hb.limit()) {
            let i = rank as usize;
            if self
                .ranks
                .get(i)
                .is_none_or(|r| r.ended.is_some() || r.finalized)
            {
                self.kvs.forget_heartbeats(rank);
                continue;
            }
            let (pid, on) = (self.ranks[i].pid, self.on_host(i));
            say(format_args!(
                "rank {rank}{on} (pid {pid}) sent no heartbeat for {:.1} s (RCOMM_HEARTBEAT {} ms × {}): stopped or stuck; killing it",
                silent.as_secs_f64(),
                hb.interval_ms,
                hb.misses
            ));
            // The others' flight recorders say where they wait for it (they answer before they
            // hear of it: the request goes first on their connections).
            self.start_report(format!(
                "rank {rank}{on} sent no heartbeat for {:.1} s",
                silent.as_secs_f64()
            ));
            if let Some(c) = &mut self.collect {
                c.notes.insert(
                    rank,
                    format!(
                        "no heartbeat for {:.1} s: stopped, or stuck in the kernel; killed",
                        silent.as_secs_f64()
                    ),
                );
            }
            self.kvs.notify_rank_hung(rank, silent);
            if self.ranks[i].child.is_some() {
                let _ = os::kill_group(pid, libc::SIGKILL);
            } else if let Some(d) = self.daemons[self.ranks[i].host].as_mut() {
                let _ = d.send(&ToDaemon::SignalRank {
                    rank,
                    sig: libc::SIGKILL,
                });
            }
        }
    }

    fn poll_exits(&mut self) {
        for i in 0..self.ranks.len() {
            if self.ranks[i].ended.is_some() || self.ranks[i].child.is_none() {
                continue;
            }
            let Ok(Some(end)) = os::peek_exit(self.ranks[i].pid) else {
                continue;
            };
            self.rank_ended(i, end);
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
        let host = self.host_name(i);
        self.kvs.notify_rank_failed(rank, &host, &how);
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
        let on = self.on_host(i);
        say(format_args!(
            "rank {rank}{on} (pid {pid}) {how} after {:.2} s{then}",
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
                    rcomm_runtime::os::signal_name(sig)
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
                    .map(|r| {
                        if self.multi {
                            format!("{} on {} (pid {})", r.rank, self.hosts[r.host].name, r.pid)
                        } else {
                            format!("{} (pid {})", r.rank, r.pid)
                        }
                    })
                    .collect();
                say(format_args!(
                    "ranks {} did not end after SIGKILL; giving up on them",
                    stuck.join(", ")
                ));
                false
            }
        }
    }

    /// Asks every rank for its flight recorder; the report prints once all have answered or
    /// [`DUMP_PATIENCE`] has passed ([`Supervisor::poll_report`]).
    fn start_report(&mut self, why: String) {
        if let Some(c) = &mut self.collect {
            c.why = format!("{}; {why}", c.why);
            return;
        }
        self.reports += 1;
        let id = self.reports;
        let asked = self.kvs.request_dumps(id);
        say(format_args!(
            "{why}: collecting the flight recorders of {} rank{} for a hang report",
            asked.len(),
            if asked.len() == 1 { "" } else { "s" }
        ));
        self.collect = Some(Collect {
            id,
            why,
            asked,
            got: Default::default(),
            deadline: Instant::now() + DUMP_PATIENCE,
            notes: Default::default(),
        });
    }

    /// A rank's flight recorder: an answer to the collection `id`, or (`id` 0) sent by a rank
    /// whose watchdog fired, which starts a report unless one was just printed.
    fn on_dump(&mut self, rank: u32, id: u64, why: String, dump: Vec<u8>) {
        let decoded = rcomm_runtime::wire::FlightDump::decode(&dump)
            .map_err(|e| format!("its flight recorder is unreadable: {e}"));
        if id == 0 {
            let recent = self.last_report.is_some_and(|t| t.elapsed() < REPORT_QUIET);
            if self.collect.is_none() && recent {
                return;
            }
            if self.collect.is_none() {
                let on = self.on_host(rank as usize);
                self.start_report(format!("rank {rank}{on}: {why}"));
            }
        }
        if let Some(c) = &mut self.collect
            && (id == 0 || id == c.id)
        {
            c.got.insert(rank, decoded);
        }
    }

    /// Prints the report being collected once every rank asked has answered (or ended), its
    /// time is up, or `now` (the job is over).
    fn poll_report(&mut self, now: bool) {
        let Some(c) = &self.collect else { return };
        let waiting = c.asked.iter().any(|r| {
            !c.got.contains_key(r)
                && self
                    .ranks
                    .get(*r as usize)
                    .is_some_and(|p| p.ended.is_none())
        });
        if waiting && !now && Instant::now() < c.deadline {
            return;
        }
        let Some(mut c) = self.collect.take() else {
            return;
        };
        let views: Vec<crate::hang::RankView> = self
            .ranks
            .iter()
            .map(|p| {
                let host = self.host_name(p.rank as usize);
                let dump = c.got.remove(&p.rank).unwrap_or_else(|| {
                    if let Some(n) = c.notes.get(&p.rank) {
                        return Err(n.clone());
                    }
                    Err(match (&p.ended, c.asked.contains(&p.rank)) {
                        (Some(e), _) => format!("it {}", e.describe()),
                        (None, true) => {
                            format!("stopped? no answer within {} s", DUMP_PATIENCE.as_secs())
                        }
                        (None, false) if p.finalized => "it finalized".into(),
                        (None, false) => "not connected to rcomm-run".into(),
                    })
                });
                crate::hang::RankView {
                    rank: p.rank,
                    host,
                    dump,
                }
            })
            .collect();
        say(format_args!("hang report ({}):", c.why));
        for line in crate::hang::report(&views) {
            say(format_args!("  {line}"));
        }
        self.last_report = Some(Instant::now());
    }

    fn on_signal(&mut self, sig: i32) {
        let name = rcomm_runtime::os::signal_name(sig);
        if sig == signals::REPORT {
            // Not forwarded: a rank's default action for SIGUSR1 is to die.
            self.start_report(format!("{name} to rcomm-run"));
            return;
        }
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
                format!("after {}", rcomm_runtime::os::signal_name(first))
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
    let spec = rcomm_runtime::config::global()
        .as_ref()
        .ok()
        .and_then(|c| c.socket_ifname.as_ref());
    match spec.map(|s| rcomm_runtime::ifaddr::local_address(Some(s))) {
        Some(Ok((_, ip))) => ip,
        _ => Ipv4Addr::LOCALHOST.into(),
    }
}
