//! A torchrun-style start: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
//! `MASTER_ADDR`, `MASTER_PORT`. Rank 0 serves rcomm's own key-value store (the one `rcomm-run`
//! serves) on `MASTER_ADDR:RCOMM_STORE_PORT` — by default `MASTER_PORT + 1`, because under real
//! torchrun the elastic agent already listens on `MASTER_PORT` — and every rank, rank 0 too,
//! connects to it as a client, retrying until the bootstrap deadline.
//!
//! **Authentication.** The store speaks the job-secret handshake of `rcomm-run`, but nothing
//! hands these processes a secret. `RCOMM_STORE_SECRET` (set it on every rank, e.g. from a
//! file readable only by the job's user) is hashed into the secret. Without it the secret is
//! derived from `MASTER_ADDR`, `MASTER_PORT` and `WORLD_SIZE`: that still keeps ranks of another
//! job (another port or size) from joining this store by mistake, but anyone who can reach the
//! port can compute it, so the store is then unauthenticated in effect; init warns about it.
//! We chose a derived fallback over refusing to start because torchrun users expect the
//! variables torchrun sets to suffice, and the exposure is the same as torch's own TCPStore.

use super::kvs::NoticeBoard;
use super::{Bootstrap, BootstrapError, KvsClient, KvsServer};
use crate::auth::Secret;
use crate::config::{LaunchEnv, TorchEnv};
use crate::rlog;
use sha2::{Digest, Sha256};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

/// A torchrun-style bootstrap: a store client, and on rank 0 the store itself.
#[derive(Debug)]
pub struct StoreBootstrap {
    client: KvsClient,
    // Declared after `client`, so rank 0's own connection closes before its store stops.
    server: Option<KvsServer>,
}

/// The store's secret: `RCOMM_STORE_SECRET` hashed, or the documented derived fallback.
pub fn store_secret(env: &TorchEnv) -> (Secret, bool) {
    let mut h = Sha256::new();
    h.update(b"rcomm-store-secret-v1\0");
    let authenticated = match &env.store_secret {
        Some(s) => {
            h.update(s.as_bytes());
            true
        }
        None => {
            h.update(format!("{}\0{}\0{}", env.master_addr, env.master_port, env.size).as_bytes());
            false
        }
    };
    (Secret::from_bytes(h.finalize().into()), authenticated)
}

/// The job id of a torchrun-style job: torchrun's run id is not always set, so one derived
/// from the store's address, unique among the jobs running on a host at one time.
fn job_id(env: &TorchEnv) -> String {
    let h = Sha256::digest(format!("{}:{}", env.master_addr, env.store_port).as_bytes());
    format!(
        "t{}-{:02x}{:02x}{:02x}{:02x}",
        env.store_port, h[0], h[1], h[2], h[3]
    )
}

impl StoreBootstrap {
    /// Serves the store (rank 0) and connects to it, within `timeout`.
    pub fn start(env: &TorchEnv, timeout: Duration) -> Result<Self, BootstrapError> {
        let (secret, authenticated) = store_secret(env);
        if !authenticated && env.rank == 0 {
            rlog!(
                Warn,
                "INIT",
                "RCOMM_STORE_SECRET is not set: the store on {}:{} authenticates with a secret derived from MASTER_ADDR/MASTER_PORT/WORLD_SIZE, i.e. not at all; set RCOMM_STORE_SECRET on every rank",
                env.master_addr,
                env.store_port
            );
        }
        let addr = format!("{}:{}", env.master_addr, env.store_port);
        let server = if env.rank == 0 {
            let sa: SocketAddr = addr
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| {
                    BootstrapError::Env(format!("MASTER_ADDR {addr} does not resolve"))
                })?;
            // Rank 0 binds the address it was told; on a multi-homed host MASTER_ADDR names
            // the interface the others reach.
            let srv = KvsServer::start(sa, secret.clone(), env.size).map_err(|e| {
                BootstrapError::Env(format!(
                    "rank 0 cannot serve the store on {addr}: {e} (is the port taken? set RCOMM_STORE_PORT)"
                ))
            })?;
            srv.fail_on_disconnect();
            Some(srv)
        } else {
            None
        };
        let launch = LaunchEnv {
            rank: env.rank,
            size: env.size,
            local_rank: env.local_rank,
            local_size: env.local_size,
            kvs_addr: addr,
            job_id: job_id(env),
            secret_fd: -1,
        };
        let client = KvsClient::connect_with(launch, &secret, timeout, Some(timeout)).map_err(
            |e| match e {
                // Not rcomm-run's store: say what serves it here.
                BootstrapError::Connect { addr, err } => BootstrapError::Env(format!(
                    "cannot reach rank 0's store at {addr} within {} s (RCOMM_BOOTSTRAP_TIMEOUT): {err}; is rank 0 running, and MASTER_ADDR/RCOMM_STORE_PORT the same on every rank?",
                    timeout.as_secs()
                )),
                e => e,
            },
        )?;
        Ok(Self { client, server })
    }

    /// Failure notices from the store (a rank whose connection closed before finalize).
    pub fn notices(&self) -> Arc<NoticeBoard> {
        self.client.notices()
    }
}

impl Bootstrap for StoreBootstrap {
    fn rank(&self) -> u32 {
        self.client.rank()
    }
    fn size(&self) -> u32 {
        self.client.size()
    }
    fn local_rank(&self) -> u32 {
        self.client.local_rank()
    }
    fn local_size(&self) -> u32 {
        self.client.local_size()
    }
    fn job_id(&self) -> &str {
        self.client.job_id()
    }
    fn put(&mut self, key: &str, val: &[u8]) -> Result<(), BootstrapError> {
        self.client.put(key, val)
    }
    fn fence(&mut self) -> Result<(), BootstrapError> {
        self.client.fence()
    }
    fn get(&mut self, from: u32, key: &str) -> Result<Vec<u8>, BootstrapError> {
        self.client.get(from, key)
    }
    fn abort(&mut self, code: i32, msg: &str) -> Result<(), BootstrapError> {
        // No launcher stops the others: rank 0 tells every connected rank (they see it as an
        // abort notice), then everyone exits on its own.
        eprintln!(
            "rcomm: rank {} aborts the job with code {code}: {msg}",
            self.rank()
        );
        if let Some(s) = &self.server {
            s.notify_abort(self.rank(), code, msg);
        } else {
            let _ = self.client.abort(code, msg);
        }
        std::process::exit(code)
    }
    fn finalize(&mut self) -> Result<(), BootstrapError> {
        self.client.finalize()?;
        // Rank 0's store must outlive every other rank's use of it: wait (bounded) until all
        // have finalized, so nobody's finalize meets a closed store.
        self.client.fence()
    }
}
