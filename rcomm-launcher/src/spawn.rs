//! What each rank is started with: its command, environment and CPU binding.

use crate::cli::{BindTo, Export};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The variables the launcher sets for each rank. Any inherited value (from an outer job) is
/// removed first, so a rank never mixes two jobs' settings.
pub const LAUNCHER_VARS: [&str; 7] = [
    "RCOMM_RANK",
    "RCOMM_SIZE",
    "RCOMM_LOCAL_RANK",
    "RCOMM_LOCAL_SIZE",
    "RCOMM_KVS_ADDR",
    "RCOMM_JOB_ID",
    "RCOMM_SECRET_FD",
];

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

/// The usable cores: the allowed CPUs grouped by (package, core) as sysfs describes them, in
/// order of each core's first CPU. `key` gives a CPU's (package, core); a CPU without one is a
/// core of its own.
pub fn cores_of(allowed: &[usize], key: impl Fn(usize) -> Option<(u32, u32)>) -> Vec<Vec<usize>> {
    let mut keys: Vec<(Option<(u32, u32)>, usize)> = Vec::new();
    let mut cores: Vec<Vec<usize>> = Vec::new();
    for &cpu in allowed {
        let k = key(cpu);
        match k.and_then(|k| keys.iter().position(|(kk, _)| *kk == Some(k))) {
            Some(i) => cores[keys[i].1].push(cpu),
            None => {
                keys.push((k, cores.len()));
                cores.push(vec![cpu]);
            }
        }
    }
    cores
}

/// (package, core id) of `cpu` from sysfs.
pub fn sysfs_core_key(cpu: usize) -> Option<(u32, u32)> {
    let dir = Path::new("/sys/devices/system/cpu")
        .join(format!("cpu{cpu}"))
        .join("topology");
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .ok()?
            .trim()
            .parse::<u32>()
            .ok()
    };
    Some((read("physical_package_id")?, read("core_id")?))
}

fn sysfs_cpu_u32(cpu: usize, file: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{file}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The NUMA node of `cpu` (the `nodeN` link sysfs puts in the CPU's directory).
fn sysfs_numa_node(cpu: usize) -> Option<u32> {
    std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}"))
        .ok()?
        .flatten()
        .find_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse::<u32>()
                .ok()
        })
}

/// The places ranks are bound to under `bind_to`, from sysfs: cores (also the default),
/// sockets (packages), NUMA nodes (a machine without NUMA information counts its sockets,
/// and one without either is one place). Empty for `none`.
pub fn binding_units(bind_to: Option<BindTo>, allowed: &[usize]) -> Vec<Vec<usize>> {
    match bind_to {
        Some(BindTo::None) => Vec::new(),
        Some(BindTo::Socket) => cores_of(allowed, |c| {
            Some((sysfs_cpu_u32(c, "physical_package_id").unwrap_or(0), 0))
        }),
        Some(BindTo::Numa) => cores_of(allowed, |c| {
            Some((
                sysfs_numa_node(c)
                    .or_else(|| sysfs_cpu_u32(c, "physical_package_id"))
                    .unwrap_or(0),
                0,
            ))
        }),
        Some(BindTo::Core) | None => cores_of(allowed, sysfs_core_key),
    }
}

/// Per rank, the CPUs it is bound to (`None`: unbound), and a warning to print, if any.
/// `units` are the places of [`binding_units`]; `per_unit` ranks share one (`ppr:N:core`).
pub fn plan_binding(
    bind_to: Option<BindTo>,
    ranks: u32,
    cores: &[Vec<usize>],
    per_unit: u32,
) -> (Vec<Option<Vec<usize>>>, Option<String>) {
    let n = ranks as usize;
    let per = per_unit.max(1) as usize;
    let bind = match bind_to {
        Some(BindTo::None) => false,
        Some(_) => true,
        // Open MPI's default: bind when every rank gets a core of its own (or its share of
        // one under ppr:N:core).
        None => !cores.is_empty() && n <= cores.len() * per,
    };
    if !bind {
        return (vec![None; n], None);
    }
    if cores.is_empty() {
        return (
            vec![None; n],
            Some("cannot read this process's CPU affinity; ranks are not bound".into()),
        );
    }
    let what = match bind_to {
        Some(BindTo::Numa) => "NUMA node",
        Some(BindTo::Socket) => "socket",
        _ => "core",
    };
    let warning = (n > cores.len() * per).then(|| {
        format!(
            "{n} ranks on {} usable places: --bind-to {what} puts several ranks on one {what} (rank i on {what} (i/{per}) mod {}); \
             use --bind-to none to let the OS spread them",
            cores.len(),
            cores.len()
        )
    });
    (
        (0..n)
            .map(|i| Some(cores[(i / per) % cores.len()].clone()))
            .collect(),
        warning,
    )
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
                rcomm_transport::config::VARIABLES
                    .iter()
                    .any(|s| s.name == v),
                "{v}"
            );
        }
    }

    #[test]
    fn hyperthreads_of_one_core_stay_together() {
        // 2 cores × 2 threads, numbered like Linux does: 0,1 first threads, 2,3 siblings.
        let key = |c: usize| Some((0, (c % 2) as u32));
        assert_eq!(cores_of(&[0, 1, 2, 3], key), vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(cores_of(&[1, 3], key), vec![vec![1, 3]]);
        assert_eq!(cores_of(&[0, 1], |_| None), vec![vec![0], vec![1]]);
    }

    #[test]
    fn default_binding_follows_open_mpi() {
        let cores = vec![vec![0], vec![1]];
        let (b, w) = plan_binding(None, 2, &cores, 1);
        assert_eq!(b, vec![Some(vec![0]), Some(vec![1])]);
        assert!(w.is_none());
        let (b, w) = plan_binding(None, 8, &cores, 1);
        assert!(b.iter().all(Option::is_none) && w.is_none());
        let (b, w) = plan_binding(Some(BindTo::Core), 3, &cores, 1);
        assert_eq!(b[2], Some(vec![0]));
        assert!(w.unwrap().contains("3 ranks on 2 usable places"));
        let (b, _) = plan_binding(Some(BindTo::None), 1, &cores, 1);
        assert_eq!(b, vec![None]);
        // ppr:2:core: ranks 0,1 on core 0, ranks 2,3 on core 1.
        let (b, w) = plan_binding(None, 4, &cores, 2);
        assert_eq!(
            b,
            vec![Some(vec![0]), Some(vec![0]), Some(vec![1]), Some(vec![1])]
        );
        assert!(w.is_none());
    }

    #[test]
    fn cpu_lists_are_compact() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpu_list(&[5]), "5");
        assert_eq!(cpu_list(&[]), "");
    }
}
