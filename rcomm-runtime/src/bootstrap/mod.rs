//! How a rank finds its peers: rank, size, a key-value store with put / fence / get, abort.
//!
//! Each rank publishes one address record, everyone fences once, then reads the records it
//! needs. Implementations: the KVS served by `rcomm-run` ([`kvs`]), PMI-1/PMI-2 on `PMI_FD`
//! for hydra and Slurm ([`pmi`]), a torchrun-style environment where rank 0 serves the KVS
//! ([`store`]), and a world of one ([`Singleton`]). `rcomm::init` picks the first whose
//! environment is present, in that order.

pub mod kvs;
pub mod pmi;
pub mod server;
pub mod store;

pub use kvs::KvsClient;
pub use pmi::PmiClient;
pub use server::{KvsEvent, KvsServer};
pub use store::StoreBootstrap;

use crate::wire::FrameIoError;
use std::collections::HashMap;

/// A bootstrap failure. Messages say what happened and what to try.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The launcher's store could not be reached or dropped the connection.
    #[error("cannot talk to the launcher's key-value store at {addr}: {err} (did rcomm-run exit?)")]
    Connect {
        /// The address tried.
        addr: String,
        /// The cause.
        err: String,
    },
    /// A foreign launcher's PMI connection broke (closed, reset) mid-bootstrap.
    #[error(
        "lost the connection to {launcher} on PMI_FD during {op}: {err} (the launcher ended the job, or died)"
    )]
    LauncherLost {
        /// Who serves PMI_FD.
        launcher: String,
        /// The PMI operation under way.
        op: String,
        /// The cause.
        err: String,
    },
    /// Authentication with the job secret failed.
    #[error("job-secret handshake with {addr} failed: {source}")]
    Auth {
        /// The address tried.
        addr: String,
        /// The cause.
        #[source]
        source: crate::auth::AuthError,
    },
    /// A frame could not be read or written.
    #[error("bootstrap connection: {0}")]
    Frame(#[from] FrameIoError),
    /// The store answered with an error.
    #[error("key-value store refused {op}: {msg}")]
    Refused {
        /// The operation.
        op: &'static str,
        /// Its reason.
        msg: String,
    },
    /// A key was not published.
    #[error(
        "rank {rank} published no key {key:?} (get before fence, or a rank that never called init?)"
    )]
    NotFound {
        /// Rank asked for.
        rank: u32,
        /// Key asked for.
        key: String,
    },
    /// A rank died while others waited on it.
    #[error("rank {rank}{} failed during bootstrap: {how}", host_text(host))]
    RankFailed {
        /// The rank.
        rank: u32,
        /// Its host, as the launcher names it (empty when unknown).
        host: String,
        /// How it ended.
        how: String,
    },
    /// The job is being aborted.
    #[error("job aborted by {who} with code {code}: {msg}", who = if *.from == u32::MAX { "the launcher".to_string() } else { format!("rank {}", .from) })]
    Aborted {
        /// Who asked.
        from: u32,
        /// Exit code.
        code: i32,
        /// Why.
        msg: String,
    },
    /// Anything else in the environment that prevents bootstrapping.
    #[error("{0}")]
    Env(String),
}

/// " (host NAME)" after a rank, or nothing when the host is unknown.
fn host_text(host: &str) -> String {
    if host.is_empty() {
        String::new()
    } else {
        format!(" (host {host})")
    }
}

/// The bootstrap interface every launcher integration implements.
pub trait Bootstrap: Send {
    /// This process's rank.
    fn rank(&self) -> u32;
    /// Number of ranks.
    fn size(&self) -> u32;
    /// Rank among the ranks on this node, as the launcher placed them.
    fn local_rank(&self) -> u32;
    /// Number of ranks on this node.
    fn local_size(&self) -> u32;
    /// The job id (tags processes and names per-job resources).
    fn job_id(&self) -> &str;
    /// Publishes `val` under `key` for this rank.
    fn put(&mut self, key: &str, val: &[u8]) -> Result<(), BootstrapError>;
    /// Waits until every rank has fenced; puts made before are then visible.
    fn fence(&mut self) -> Result<(), BootstrapError>;
    /// Reads what `from` published under `key` (after a fence).
    fn get(&mut self, from: u32, key: &str) -> Result<Vec<u8>, BootstrapError>;
    /// Asks the launcher to end the whole job.
    fn abort(&mut self, code: i32, msg: &str) -> Result<(), BootstrapError>;
    /// Tells the launcher this rank is finishing normally.
    fn finalize(&mut self) -> Result<(), BootstrapError>;
    /// Agrees with `members` (world ranks, this one among them) under `key`: returns once every
    /// member has called it or failed, with the failed members as the launcher knows them and
    /// the bitwise AND of the survivors' `data`. Only a launcher that watches the ranks can
    /// say who failed, so the default is an error.
    fn agree(
        &mut self,
        key: &str,
        members: &[u32],
        data: &[u8],
    ) -> Result<(Vec<u32>, Vec<u8>), BootstrapError> {
        let _ = (key, members, data);
        Err(BootstrapError::Env(
            "agreeing on failed ranks needs rcomm-run's launcher (the source of truth about failures); this job was started by another".into(),
        ))
    }
}

/// A world of one rank, for programs started without a launcher.
#[derive(Debug, Default)]
pub struct Singleton {
    store: HashMap<String, Vec<u8>>,
}

impl Bootstrap for Singleton {
    fn rank(&self) -> u32 {
        0
    }
    fn size(&self) -> u32 {
        1
    }
    fn local_rank(&self) -> u32 {
        0
    }
    fn local_size(&self) -> u32 {
        1
    }
    fn job_id(&self) -> &str {
        "singleton"
    }
    fn put(&mut self, key: &str, val: &[u8]) -> Result<(), BootstrapError> {
        self.store.insert(key.to_string(), val.to_vec());
        Ok(())
    }
    fn fence(&mut self) -> Result<(), BootstrapError> {
        Ok(())
    }
    fn get(&mut self, from: u32, key: &str) -> Result<Vec<u8>, BootstrapError> {
        match (from, self.store.get(key)) {
            (0, Some(v)) => Ok(v.clone()),
            _ => Err(BootstrapError::NotFound {
                rank: from,
                key: key.to_string(),
            }),
        }
    }
    fn abort(&mut self, code: i32, msg: &str) -> Result<(), BootstrapError> {
        eprintln!("rcomm: abort with code {code}: {msg}");
        std::process::exit(code)
    }
    fn finalize(&mut self) -> Result<(), BootstrapError> {
        Ok(())
    }
}

/// Names the foreign launcher whose environment is present, if any: starting as a world of one
/// under `srun -n 4` or `mpirun -np 4` would silently run 4 separate jobs.
pub fn foreign_launcher(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(n) = env("SLURM_NTASKS")
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&n| n > 1)
        && env("PMI_FD").is_none()
    {
        return Some(format!(
            "Slurm started {n} tasks (SLURM_NTASKS={n}) but no PMI is available: run with `srun --mpi=pmi2`, or use rcomm-run"
        ));
    }
    if env("OMPI_COMM_WORLD_SIZE").is_some() {
        return Some(
            "started by Open MPI's mpirun (OMPI_COMM_WORLD_SIZE is set), which offers only PMIx: rcomm cannot bootstrap from it; use rcomm-run, or mpiexec.mpich / srun --mpi=pmi2".into(),
        );
    }
    if env("PMIX_RANK").is_some() {
        return Some("started under PMIx (PMIX_RANK is set), which rcomm does not speak: use rcomm-run, or a PMI-1/PMI-2 launcher (srun --mpi=pmi2, mpiexec.mpich)".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singleton_stores_its_own_keys() {
        let mut s = Singleton::default();
        s.put("a", b"1").unwrap();
        s.fence().unwrap();
        assert_eq!(s.get(0, "a").unwrap(), b"1");
        assert!(matches!(
            s.get(1, "a"),
            Err(BootstrapError::NotFound { .. })
        ));
    }

    #[test]
    fn foreign_launchers_are_named() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(a, _)| *a == k)
                    .map(|(_, b)| b.to_string())
            }
        };
        assert!(
            foreign_launcher(&env(&[("SLURM_NTASKS", "4")]))
                .unwrap()
                .contains("--mpi=pmi2")
        );
        assert!(foreign_launcher(&env(&[("SLURM_NTASKS", "1")])).is_none());
        assert!(
            foreign_launcher(&env(&[("OMPI_COMM_WORLD_SIZE", "2")]))
                .unwrap()
                .contains("PMIx")
        );
        assert!(foreign_launcher(&env(&[("PMIX_RANK", "0")])).is_some());
        assert!(foreign_launcher(&env(&[])).is_none());
    }
}
