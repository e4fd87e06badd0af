//! `rcomm-run --dump PID|JOB_ID`: asks a running `rcomm-run` on this machine for a hang report
//! by sending it SIGUSR1 (the simplest interface that works whatever state the job is in: the
//! launcher's supervising loop takes signals every few milliseconds). The report appears on
//! that launcher's standard error, where the job's output goes.
//!
//! A job id is resolved through the job's watchdog process (`rcomm-run-watchdog
//! --internal-watchdog JOB_ID`, a child of the launcher): its parent is the launcher.

use crate::output::say;
use crate::watchdog::INTERNAL_FLAG;

/// The launcher's exit status for `--dump TARGET`.
pub fn request(target: &str) -> i32 {
    let pid = match target.trim().parse::<i32>() {
        Ok(pid) => {
            if !is_launcher(pid) {
                say(format_args!(
                    "--dump {target}: process {pid} is not an rcomm-run on this machine"
                ));
                return 1;
            }
            pid
        }
        Err(_) => match launcher_of_job(target.trim()) {
            Some(pid) => pid,
            None => {
                say(format_args!(
                    "--dump {target}: no running job with that id on this machine (give the job's RCOMM_JOB_ID, or the process id of its rcomm-run)"
                ));
                return 1;
            }
        },
    };
    match crate::os::kill_process(pid, crate::signals::REPORT) {
        Ok(()) => {
            say(format_args!(
                "asked rcomm-run (pid {pid}) for a hang report: it prints it on its standard error within a few seconds; the job goes on"
            ));
            0
        }
        Err(e) => {
            say(format_args!(
                "--dump {target}: cannot signal pid {pid}: {e}"
            ));
            1
        }
    }
}

fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `pid` runs rcomm-run as a launcher (not as a daemon or a watchdog).
fn is_launcher(pid: i32) -> bool {
    let args = cmdline(pid);
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let named = |s: &str| {
        s.rsplit('/')
            .next()
            .is_some_and(|b| b.starts_with("rcomm-run"))
    };
    let is_run = args.first().is_some_and(|a| named(a))
        || exe
            .as_ref()
            .and_then(|p| p.file_name())
            .is_some_and(|n| named(&n.to_string_lossy()));
    is_run
        && !args
            .iter()
            .any(|a| a == INTERNAL_FLAG || a == crate::daemon::DAEMON_FLAG || a == "--dump")
}

/// The launcher of job `job_id`: the parent of its watchdog.
fn launcher_of_job(job_id: &str) -> Option<i32> {
    let dir = std::fs::read_dir("/proc").ok()?;
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let args = cmdline(pid);
        if args.len() >= 3 && args[1] == INTERNAL_FLAG && args[2] == job_id {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let ppid = status
                .lines()
                .find_map(|l| l.strip_prefix("PPid:"))
                .and_then(|v| v.trim().parse::<i32>().ok())?;
            return is_launcher(ppid).then_some(ppid);
        }
    }
    None
}
