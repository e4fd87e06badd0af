//! What each rank is started with: its command and environment (its CPU binding is planned
//! in `binding`).

use crate::cli::Export;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// The variables the launcher sets for each rank. Any inherited value (from an outer job) is
/// removed first, so a rank never mixes two jobs' settings.
pub use rcomm_runtime::config::LAUNCHER_VARS;

/// Everything that is the same for every rank of the job.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Resolved program path.
    pub program: PathBuf,
    /// PROGRAM as the user wrote it (the ranks' `argv[0]`).
    pub argv0: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Number of ranks in the job.
    pub size: u32,
    /// Working directory (`None`: the launcher's).
    pub cwd: Option<PathBuf>,
    /// `RCOMM_KVS_ADDR`.
    pub kvs_addr: String,
    /// `RCOMM_JOB_ID`.
    pub job_id: String,
    /// The descriptor number holding the secret in every rank.
    pub secret_fd: i32,
    /// Variables set in every rank: `-x VAR=VAL` exports locally (plain `-x VAR` needs
    /// nothing: the environment is inherited); on a daemon, everything the head sent.
    pub env: Vec<(OsString, OsString)>,
}

/// The `-x VAR=VAL` exports as (name, value) pairs.
pub fn explicit_exports(exports: &[Export]) -> Vec<(OsString, OsString)> {
    exports
        .iter()
        .filter_map(|e| e.value.as_ref().map(|v| (e.name.clone().into(), v.into())))
        .collect()
}

/// The command for `rank`, the `local_rank`-th of `local_size` ranks on this host
/// (environment set; stdio and pre-exec set-up are the caller's).
pub fn rank_command(spec: &JobSpec, rank: u32, local_rank: u32, local_size: u32) -> Command {
    let mut cmd = Command::new(&spec.program);
    cmd.arg0(&spec.argv0).args(&spec.args);
    if let Some(d) = &spec.cwd {
        cmd.current_dir(d);
    }
    for v in LAUNCHER_VARS {
        cmd.env_remove(v);
    }
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    cmd.env("RCOMM_RANK", rank.to_string())
        .env("RCOMM_SIZE", spec.size.to_string())
        .env("RCOMM_LOCAL_RANK", local_rank.to_string())
        .env("RCOMM_LOCAL_SIZE", local_size.to_string())
        .env("RCOMM_KVS_ADDR", &spec.kvs_addr)
        .env("RCOMM_JOB_ID", &spec.job_id)
        .env("RCOMM_SECRET_FD", spec.secret_fd.to_string());
    cmd
}

/// "0-3,8,10-11".
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_vars_are_documented_in_the_transport_config() {
        for v in LAUNCHER_VARS {
            assert!(
                rcomm_runtime::config::VARIABLES.iter().any(|s| s.name == v),
                "{v}"
            );
        }
    }

    #[test]
    fn cpu_lists_are_compact() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpu_list(&[5]), "5");
        assert_eq!(cpu_list(&[]), "");
    }
}
