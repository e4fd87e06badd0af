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

mod supervise;

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
    // Held until the job ends: the ranks' loader reads the folder at any time while starting.
    let mut _abi_dir = None;
    if let Some(program) = program {
        let mut env = spawn::explicit_exports(&cli.export);
        // C programs built against the MPI ABI load rcomm's libmpi_abi.so.1 first.
        let inherited = env
            .iter()
            .rev()
            .find(|(k, _)| k == "LD_LIBRARY_PATH")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os("LD_LIBRARY_PATH"));
        _abi_dir = crate::abi::prepare(&job_id, inherited).map(|(dir, path)| {
            env.push(("LD_LIBRARY_PATH".into(), path));
            dir
        });
        let spec = JobSpec {
            program,
            argv0: cli.command[0].clone(),
            args: cli.command[1..].to_vec(),
            size: n,
            cwd: None,
            kvs_addr: local_kvs,
            job_id,
            secret_fd: secret_fd.as_raw_fd(),
            env,
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
