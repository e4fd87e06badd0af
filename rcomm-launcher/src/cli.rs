//! `rcomm-run`'s command line, in Open MPI's words where they exist.

use clap::{Parser, ValueEnum};
use std::ffi::OsString;
use std::time::Duration;

/// Where ranks are bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BindTo {
    /// Rank i runs on core (i mod cores) — all hardware threads of that core.
    Core,
    /// No binding: the OS schedules ranks anywhere the launcher may run.
    None,
    /// Rank runs on all CPUs of one NUMA node (from the topology model).
    Numa,
    /// Rank runs on all CPUs of one socket (package).
    Socket,
}

/// What happens to the other ranks when one fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnFailure {
    /// Tell them, wait `--grace`, SIGTERM, wait `--grace`, SIGKILL.
    Abort,
    /// Tell them and let them run on (for applications that shrink their communicator).
    Continue,
}

/// One `-x` export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// Variable name.
    pub name: String,
    /// `Some` for `-x VAR=VAL`; `None` for `-x VAR` (pass the launcher's value).
    pub value: Option<String>,
}

/// `rcomm-run`: start N ranks of a program on this machine or on several hosts.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "rcomm-run",
    version,
    about = "Start N ranks of an rcomm program on this machine or, over ssh, on several hosts",
    after_help = "Exit status: 0 when every rank exits 0; otherwise that of the first failure: a \
                  rank's exit code, 128+signal for a rank killed by a signal, the code a rank \
                  passed to abort, or 128+signal when rcomm-run itself received SIGINT, SIGTERM, \
                  SIGHUP or SIGQUIT (forwarded to every rank); 127 when PROGRAM is not found."
)]
pub struct Cli {
    /// Number of ranks (mpirun's `-np N` is accepted too) [default with -H/--hostfile: every
    /// slot; required without].
    #[arg(short = 'n', value_name = "N", value_parser = parse_ranks)]
    pub ranks: Option<u32>,

    /// Hosts and their slots, e.g. `-H node1:2,node2:2` (a host without `:N` has one slot;
    /// repeatable). `localhost` and this machine's name run here, others through `--ssh`.
    #[arg(short = 'H', long = "host", value_name = "HOST[:SLOTS],...")]
    pub hosts: Vec<String>,

    /// A file of hosts, one `host slots=N` per line (`#` comments).
    #[arg(long, value_name = "FILE")]
    pub hostfile: Option<std::path::PathBuf>,

    /// Placement of ranks on hosts: slot (fill each host, default), node (round robin),
    /// ppr:N:core|numa|socket|node (N per core, NUMA node, package or host; within a host the
    /// ranks of a NUMA node or package take its cores in order); core|numa|socket map like
    /// slot.
    #[arg(long, value_name = "HOW", default_value = "slot", value_parser = crate::hosts::parse_map_by)]
    pub map_by: crate::hosts::MapBy,

    /// The command that runs `rcomm-run --daemon` on another host, split at spaces
    /// [default: $RCOMM_SSH, else ssh]. It is given the host and the command.
    #[arg(long, value_name = "CMD")]
    pub ssh: Option<String>,

    /// Binding of ranks on each host [default: core when a host's ranks ≤ its usable cores
    /// (times N under ppr:N:core), else none]. Hosts of the job on one kernel (same boot id,
    /// e.g. network-namespace hosts) are planned together, so their ranks take distinct cores.
    #[arg(long, value_enum, value_name = "WHAT")]
    pub bind_to: Option<BindTo>,

    /// Export VAR to every rank: with `=VAL` that value, else the launcher's own value
    /// (ranks inherit the launcher's environment anyway; `-x VAR=VAL` overrides it).
    #[arg(short = 'x', value_name = "VAR[=VAL]", value_parser = parse_export)]
    pub export: Vec<Export>,

    /// Seconds the other ranks get to exit on their own after a failure, and again between
    /// SIGTERM and SIGKILL (fractions allowed).
    #[arg(long, value_name = "SECS", default_value = "1.0", value_parser = parse_grace)]
    pub grace: Duration,

    /// What happens to the other ranks when one fails.
    #[arg(long, value_enum, value_name = "WHAT", default_value_t = OnFailure::Abort)]
    pub on_failure: OnFailure,

    /// After a failed run (a rank failed, or the job aborted), start the whole job again, at
    /// most K times (like torchrun's elastic restarts); each rank sees the attempt number in
    /// RCOMM_RESTART_COUNT (0 first) and can resume from its checkpoint. A stop asked for with
    /// a signal (Ctrl-C) is never restarted.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub max_restarts: u32,

    /// With --max-restarts: a restart leaves out hosts lost in the run before (their ranks
    /// are not started again there) and runs on the slots left, if there are at least M.
    #[arg(long, value_name = "M", value_parser = parse_ranks)]
    pub min_ranks: Option<u32>,

    /// Pass the ranks' output through without the `[rank] ` prefix (still line by line: a line is
    /// written once it is complete, so lines of ranks and the launcher never interleave mid-line).
    #[arg(long)]
    pub no_prefix: bool,

    /// Print each rank's CPU binding to stderr.
    #[arg(long)]
    pub report_bindings: bool,

    /// Instead of starting a job: ask the running rcomm-run with this process id, or of this
    /// job id (RCOMM_JOB_ID), on this machine, for a hang report — the same as sending it
    /// SIGUSR1. That rcomm-run prints the report on its standard error; the job goes on.
    #[arg(long, value_name = "PID|JOB_ID", conflicts_with = "command")]
    pub dump: Option<String>,

    /// The program and its arguments (searched in PATH, then beside rcomm-run).
    #[arg(
        value_name = "PROGRAM",
        required_unless_present = "dump",
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub command: Vec<OsString>,
}

fn parse_ranks(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err("the number of ranks must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "{s:?} is not a number of ranks (a positive integer)"
        )),
    }
}

fn parse_grace(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("{s:?}: the grace period must be a finite number of seconds ≥ 0"))
}

fn parse_export(s: &str) -> Result<Export, String> {
    let (name, value) = match s.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (s, None),
    };
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "{name:?} is not a variable name (letters, digits and _; use -x VAR or -x VAR=VALUE)"
        ));
    }
    Ok(Export {
        name: name.to_string(),
        value,
    })
}

/// Options that take their value from the next argument; [`normalize_args`] must skip those
/// values. A unit test keeps this list in step with [`Cli`].
const TAKES_VALUE: &[&str] = &[
    "-n",
    "-x",
    "-H",
    "--host",
    "--hostfile",
    "--map-by",
    "--ssh",
    "--bind-to",
    "--grace",
    "--on-failure",
    "--max-restarts",
    "--min-ranks",
    "--dump",
];

/// Rewrites mpirun's single-dash `-np N` (which clap cannot express) to `-n N`, but only among
/// the launcher's own options — never inside PROGRAM's arguments.
pub fn normalize_args(args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    out.extend(it.next());
    let mut value_next = false;
    for a in it.by_ref() {
        if value_next {
            value_next = false;
            out.push(a);
            continue;
        }
        match a.to_str() {
            Some("-np") => {
                out.push("-n".into());
                value_next = true;
            }
            Some(s) if s.starts_with("-np=") => out.push(format!("-n={}", &s[4..]).into()),
            Some("--") => {
                out.push(a);
                break;
            }
            Some(s) if TAKES_VALUE.contains(&s) => {
                value_next = true;
                out.push(a);
            }
            Some(s) if s.starts_with('-') && s.len() > 1 => out.push(a),
            _ => {
                out.push(a); // PROGRAM: everything after it is its own
                break;
            }
        }
    }
    out.extend(it);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(normalize_args(args.iter().map(OsString::from).collect()))
    }

    #[test]
    fn program_arguments_may_look_like_options() {
        let c = parse(&[
            "rcomm-run",
            "-n",
            "2",
            "prog",
            "-n",
            "5",
            "--grace",
            "x",
            "-np",
            "3",
        ])
        .unwrap();
        assert_eq!(c.ranks, Some(2));
        assert_eq!(c.command, ["prog", "-n", "5", "--grace", "x", "-np", "3"]);
    }

    #[test]
    fn mpirun_spelling_np_is_accepted() {
        assert_eq!(
            parse(&["rcomm-run", "-np", "4", "prog"]).unwrap().ranks,
            Some(4)
        );
        assert_eq!(
            parse(&["rcomm-run", "-x", "A=1", "-np=3", "prog"])
                .unwrap()
                .ranks,
            Some(3)
        );
    }

    #[test]
    fn zero_ranks_and_bad_values_are_errors() {
        let e = parse(&["rcomm-run", "-n", "0", "prog"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 1"), "{e}");
        assert!(
            parse(&["rcomm-run", "-n", "2"]).is_err(),
            "PROGRAM is required"
        );
        assert!(parse(&["rcomm-run", "-n", "2", "--grace", "-1", "p"]).is_err());
        assert!(parse(&["rcomm-run", "-n", "2", "--grace", "inf", "p"]).is_err());
        assert!(parse(&["rcomm-run", "-n", "2", "--bind-to", "board", "p"]).is_err());
        assert!(parse(&["rcomm-run", "--map-by", "ppr:x:core", "p"]).is_err());
        assert!(parse(&["rcomm-run", "-n", "2", "-x", "1A=2", "p"]).is_err());
    }

    #[test]
    fn defaults_and_values() {
        let c = parse(&["rcomm-run", "-n", "2", "p"]).unwrap();
        assert_eq!(
            (c.grace, c.on_failure, c.bind_to),
            (Duration::from_secs(1), OnFailure::Abort, None)
        );
        let c = parse(&[
            "rcomm-run",
            "-n",
            "2",
            "--grace",
            "0.25",
            "--on-failure",
            "continue",
            "--bind-to",
            "none",
            "-x",
            "A=b=c",
            "-x",
            "HOME",
            "--no-prefix",
            "--report-bindings",
            "p",
        ])
        .unwrap();
        assert_eq!(c.grace, Duration::from_millis(250));
        assert_eq!(c.on_failure, OnFailure::Continue);
        assert_eq!(c.bind_to, Some(BindTo::None));
        assert_eq!(
            c.export[0],
            Export {
                name: "A".into(),
                value: Some("b=c".into())
            }
        );
        assert_eq!(
            c.export[1],
            Export {
                name: "HOME".into(),
                value: None
            }
        );
        assert!(c.no_prefix && c.report_bindings);
    }

    #[test]
    fn dump_takes_a_target_instead_of_a_program() {
        let c = parse(&["rcomm-run", "--dump", "12345"]).unwrap();
        assert_eq!(c.dump.as_deref(), Some("12345"));
        assert!(c.command.is_empty());
        assert!(parse(&["rcomm-run"]).is_err());
        assert!(parse(&["rcomm-run", "--dump", "1", "-n", "2", "prog"]).is_err());
    }

    #[test]
    fn takes_value_list_matches_the_parser() {
        let cmd = Cli::command();
        for a in cmd.get_arguments().filter(|a| !a.is_positional()) {
            let takes = a.get_action().takes_values();
            let mut names: Vec<String> =
                a.get_short().map(|c| format!("-{c}")).into_iter().collect();
            names.extend(a.get_long().map(|l| format!("--{l}")));
            for n in names {
                assert_eq!(TAKES_VALUE.contains(&n.as_str()), takes, "{n}");
            }
        }
    }
}
