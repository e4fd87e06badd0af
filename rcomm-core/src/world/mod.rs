//! `init()` and the world: bootstrap, identity exchange and the settings check. Spawning
//! (`spawn`) is part of a world's life: a spawned process's world holds the intercommunicator
//! to its parents, whose joint world is a `World`, and a primary world's end finalizes them.

pub(crate) mod spawn;

use crate::coll::check::CheckedEngine;
use crate::comm::{Communicator, Shared, WaitPolicy};
use crate::p2p::engine::{Engine, ProtoConfig};
use crate::{CommError, Result};
use rcomm_runtime::auth::Secret;
use rcomm_runtime::bootstrap::kvs::{NoticeBoard, Notices};
use rcomm_runtime::bootstrap::{self, Bootstrap, KvsClient, PmiClient, Singleton, StoreBootstrap};
use rcomm_runtime::config::{self, Config};
use rcomm_runtime::identity::{self, PeerInfo};
use rcomm_runtime::rlog;
use rcomm_runtime::wire::AddrRecord;
use rcomm_transport::setup::{Listening, SetupError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Key under which each rank publishes its address record.
const ADDR_KEY: &str = "addr";
/// Key under which rank 0 publishes the job secret when the launcher gives none (PMI, store).
const SECRET_KEY: &str = "secret";

/// All ranks of the job. Created by [`init`]; finishing it (drop) tells the launcher this rank
/// ends normally.
pub struct World {
    comm: Communicator,
    rank: u32,
    size: u32,
    local_rank: u32,
    local_size: u32,
    job_id: String,
    restart_count: u32,
    peers: Vec<AddrRecord>,
    boot: Arc<Mutex<Box<dyn Bootstrap>>>,
    notices: Option<Arc<NoticeBoard>>,
    /// The world `init` made (not one joining spawned processes): its end ends those too.
    primary: bool,
    /// In a spawned process: the intercommunicator to the parents.
    parent: Option<spawn::InterComm>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("job_id", &self.job_id)
            .finish()
    }
}

/// Starts rcomm in this process: reads the launcher's environment, exchanges identities with
/// every rank and checks that all ranks agree on protocol-relevant settings.
///
/// Without a launcher the world has one rank — unless another launcher's environment is
/// present without a bootstrap rcomm can use, which is an error saying what to do (rather than
/// a silent world of one per process).
pub fn init() -> Result<World> {
    let cfg = config::global()
        .as_ref()
        .map_err(|e| CommError::Config(e.clone()))?;
    init_with(cfg)
}

/// A transport-setup error, about a peer named as every other loss is: the peer's world rank
/// and host (a transport knows only what it was given).
fn setup_error(e: SetupError, rank: u32, infos: &[PeerInfo]) -> CommError {
    use rcomm_transport::error::TransportError as E;
    let e = match e {
        SetupError::Listen(why) => return bootstrap::BootstrapError::Env(why).into(),
        SetupError::NoRoute { to, why } => {
            return CommError::NoRoute {
                from: rank,
                to,
                why,
            };
        }
        SetupError::Transport(e) => e,
    };
    let peer = e.peer().and_then(|p| Some((p, infos.get(p as usize)?)));
    match (&e, peer) {
        (E::Protocol { why, .. }, Some((rank, _))) => CommError::Protocol {
            rank,
            why: format!("setting up shared memory: {why}"),
        },
        (_, Some((rank, info))) => CommError::PeerLost {
            rank,
            host: info.hostname.clone(),
            op: "init",
            why: format!("setting up shared memory: {e}"),
        },
        (_, None) => CommError::Transport(e),
    }
}

/// A peer lost while the transports are set up often left because another rank failed first
/// (it could not reach that rank and gave up): the error names the first rank the launcher
/// reports failed, waiting a moment for its notice, and mentions the peer that left.
fn name_first_failure(
    err: CommError,
    notices: Option<&NoticeBoard>,
    infos: &[PeerInfo],
) -> CommError {
    let (
        CommError::PeerLost {
            rank: peer, why, ..
        },
        Some(nb),
    ) = (&err, notices)
    else {
        return err;
    };
    let n = nb.wait_for(crate::p2p::engine::NOTICE_GRACE, |n| !n.failed.is_empty());
    match n.failed.first() {
        Some((first, how)) if first != peer => {
            let host = n
                .hosts
                .iter()
                .find(|(r, _)| r == first)
                .map(|(_, h)| h.clone())
                .or_else(|| infos.get(*first as usize).map(|i| i.hostname.clone()))
                .unwrap_or_default();
            CommError::PeerLost {
                rank: *first,
                host,
                op: "init",
                why: format!("the launcher reports it {how} (rank {peer} left too: {why})"),
            }
        }
        _ => err,
    }
}

/// How many ranks share this machine's CPUs with rank `me`: every rank on this kernel
/// ([`PeerInfo::same_kernel`]), whatever node identity says — ranks in other namespaces, in
/// containers, or split by RCOMM_HOSTID still take time slices from ours, and spinning while
/// the rank we wait for needs our core costs it a whole time slice per wait.
fn sharing_cpus(infos: &[PeerInfo], me: usize) -> usize {
    let me = &infos[me];
    infos.iter().filter(|p| p.same_kernel(me)).count()
}

/// A world of this process alone, as without a launcher, for unit tests.
#[cfg(test)]
pub(crate) fn init_singleton() -> Result<World> {
    init_with(&Config::from_map(&Default::default()).expect("default settings"))
}

fn init_with(cfg: &Config) -> Result<World> {
    if let Some(isa) = &cfg.kernel_isa {
        let isa: rcomm_kernels::Isa = isa.parse().map_err(|e: rcomm_kernels::KernelError| {
            CommError::InvalidArg(format!("RCOMM_KERNEL_ISA: {e}"))
        })?;
        rcomm_kernels::set_isa(isa)
            .map_err(|e| CommError::InvalidArg(format!("RCOMM_KERNEL_ISA: {e}")))?;
    }
    for name in &cfg.unknown {
        rlog!(
            Warn,
            "INIT",
            "unknown variable {name} ignored (a typo? book/src/reference/environment.md lists every RCOMM_ variable)"
        );
    }
    let (boot, notices, secret) = choose_bootstrap(cfg)?;
    let mut world = build(cfg, boot, notices, secret)?;
    world.primary = true;
    if let Some(p) = &cfg.parent {
        world.parent = Some(spawn::join_parents(cfg, p)?);
    }
    Ok(world)
}

/// A world over `boot`: listeners, address records, settings check, transports, engine. Also
/// how spawned processes and their parents build the world that joins them.
pub(crate) fn build(
    cfg: &Config,
    mut boot: Box<dyn Bootstrap>,
    notices: Option<Arc<NoticeBoard>>,
    secret: Option<Secret>,
) -> Result<World> {
    let secret = match secret {
        Some(s) => s,
        None => exchange_secret(boot.as_mut())?,
    };
    let (rank, size) = (boot.rank(), boot.size());
    // Listeners first, so the one record each rank publishes says how to reach it.
    let listening = Listening::bind(
        cfg,
        boot.job_id(),
        (rank, size),
        (boot.local_rank(), boot.local_size()),
        &secret,
    )
    .map_err(|e| setup_error(e, rank, &[]))?;
    let endpoints = listening.endpoints();
    let mut info = PeerInfo::local(cfg.protocol_settings());
    if let Some(id) = &cfg.host_id {
        // Node identity is (hostname, boot id, netns): the override joins the boot id, so
        // ranks that differ in it are different nodes to every check that uses identity.
        info.boot_id = format!("{}/{id}", info.boot_id);
    }
    let me = AddrRecord { info, endpoints };
    boot.put(ADDR_KEY, &me.encode())?;
    boot.fence()?;
    let mut peers = Vec::with_capacity(size as usize);
    for r in 0..size {
        let raw = boot.get(r, ADDR_KEY)?;
        peers.push(AddrRecord::decode(&raw).map_err(|err| CommError::BadRecord { rank: r, err })?);
    }
    let infos: Vec<PeerInfo> = peers.iter().map(|p| p.info.clone()).collect();
    identity::check_settings(&infos)?;
    if let Some((r, p)) = infos
        .iter()
        .enumerate()
        .find(|(_, p)| p.version != infos[0].version)
    {
        return Err(CommError::Version {
            rank: r as u32,
            theirs: p.version.clone(),
            ours: infos[0].version.clone(),
        });
    }
    let on_node = infos
        .iter()
        .filter(|p| p.same_node(&infos[rank as usize]))
        .count();
    let net = listening.connect(cfg, &peers).map_err(|e| {
        name_first_failure(setup_error(e, rank, &infos), notices.as_deref(), &infos)
    })?;
    let hosts = infos.iter().map(|p| p.hostname.clone()).collect();
    let proto = ProtoConfig {
        get_max: if cfg.shm_cma { cfg.shm_cma_max } else { 0 },
    };
    let mut engine = Engine::new(rank, size, net, hosts, proto);
    engine.set_notices(notices.clone());
    if cfg.check {
        engine.check_enable();
    }
    let sharing = sharing_cpus(&infos, rank as usize);
    let policy = WaitPolicy::for_sharing(sharing, rcomm_runtime::os::job_cpus());
    let node_of: Arc<[u32]> = infos
        .iter()
        .map(|p| infos.iter().position(|q| q.same_node(p)).unwrap_or(0) as u32)
        .collect();
    let mut shared = Shared::new(engine, notices.clone(), policy, node_of, cfg.forced_algos());
    shared.deterministic = cfg.deterministic;
    shared.check = cfg.check;
    shared.straggler = cfg.straggler.then(Default::default);
    shared.coll = crate::coll::CollShared::new(cfg.async_progress);
    let shared = Arc::new(shared);
    let topo = crate::comm::TopoPart::new(None, shared.node_of.clone());
    let comm = Communicator::new(0, rank, topo, None, shared);
    comm.fr_created("world");
    // Collective: every rank takes part (rank 0 measures, all receive its values), so the
    // tuner's choices agree everywhere.
    let tuning = crate::coll::tuner::measure(&comm, cfg.tune, cfg.shm_cma_probe)?;
    let _ = comm.shared().tuning.set(tuning);
    rlog!(
        Info,
        "INIT",
        "rank {rank}/{size} job {} up: {on_node} ranks on this node, settings hash {:016x}",
        boot.job_id(),
        infos[rank as usize].settings_hash()
    );
    let (local_rank, local_size, job_id) = (
        boot.local_rank(),
        boot.local_size(),
        boot.job_id().to_string(),
    );
    let boot = Arc::new(Mutex::new(boot));
    let _ = comm.shared().boot.set(boot.clone());
    Ok(World {
        comm,
        rank,
        size,
        local_rank,
        local_size,
        job_id,
        restart_count: cfg.restart_count,
        peers,
        boot,
        notices,
        primary: false,
        parent: None,
    })
}

/// What [`choose_bootstrap`] found: the bootstrap, launcher notices, and the job secret if the
/// launcher handed one over. (Where TCP listens is `RCOMM_SOCKET_IFNAME`'s business, not the
/// bootstrap's.)
type Chosen = (Box<dyn Bootstrap>, Option<Arc<NoticeBoard>>, Option<Secret>);

/// Picks the bootstrap from the environment, first match wins:
/// 1. `rcomm-run`'s variables (`RCOMM_RANK`, ...): its KVS, authenticated with the job secret;
/// 2. `PMI_FD` + `PMI_RANK` + `PMI_SIZE` (`mpiexec.mpich`, `srun --mpi=pmi2`): PMI-2 when
///    `RCOMM_PMI=2` or Slurm says `SLURM_MPI_TYPE=pmi2`, else PMI-1;
/// 3. torchrun's `RANK` + `WORLD_SIZE` + `MASTER_ADDR` + `MASTER_PORT`: rank 0 serves the store;
/// 4. another launcher's variables without any of the above: an error saying what to use;
/// 5. nothing: a world of one.
fn choose_bootstrap(cfg: &Config) -> Result<Chosen> {
    if let Some(env) = &cfg.launch {
        let secret = Secret::from_fd(env.secret_fd).map_err(|e| {
            bootstrap::BootstrapError::Env(format!("{e}; start ranks with rcomm-run"))
        })?;
        let client = KvsClient::connect(env.clone(), &secret)?;
        if let Some(hb) = cfg.heartbeat {
            client.start_heartbeat(std::time::Duration::from_millis(u64::from(hb.interval_ms)))?;
        }
        let n = client.notices();
        return Ok((Box::new(client), Some(n), Some(secret)));
    }
    if let Some(env) = &cfg.pmi {
        let client = PmiClient::connect(env, cfg.bootstrap_timeout)?;
        return Ok((Box::new(client), None, None));
    }
    if let Some(env) = &cfg.torch {
        let b = StoreBootstrap::start(env, cfg.bootstrap_timeout)?;
        let n = b.notices();
        return Ok((Box::new(b), Some(n), None));
    }
    if let Some(why) = bootstrap::foreign_launcher(&|k| std::env::var(k).ok()) {
        return Err(CommError::ForeignLauncher(why));
    }
    let secret = Secret::random().map_err(|e| bootstrap::BootstrapError::Env(e.to_string()))?;
    Ok((Box::new(Singleton::default()), None, Some(secret)))
}

/// A job secret for launchers that hand none over: rank 0 draws one and publishes it through
/// the bootstrap's store (costing one extra fence). It is then exactly as private as that
/// store: PMI's is reachable only over the launcher's own sockets; rcomm's store under a
/// torchrun-style start is as private as `RCOMM_STORE_SECRET`.
fn exchange_secret(boot: &mut dyn Bootstrap) -> Result<Secret> {
    if boot.size() == 1 {
        return Ok(Secret::random().map_err(|e| bootstrap::BootstrapError::Env(e.to_string()))?);
    }
    if boot.rank() == 0 {
        let s = Secret::random().map_err(|e| bootstrap::BootstrapError::Env(e.to_string()))?;
        boot.put(SECRET_KEY, s.as_bytes())?;
    }
    boot.fence()?;
    let raw = boot.get(0, SECRET_KEY)?;
    let bytes: [u8; rcomm_runtime::auth::SECRET_LEN] = raw.as_slice().try_into().map_err(|_| {
        bootstrap::BootstrapError::Env(format!("rank 0 published a {}-byte job secret", raw.len()))
    })?;
    Ok(Secret::from_bytes(bytes))
}

impl World {
    /// Rank among the ranks the launcher placed on this node.
    pub fn local_rank(&self) -> u32 {
        self.local_rank
    }

    /// Number of ranks the launcher placed on this node.
    pub fn local_size(&self) -> u32 {
        self.local_size
    }

    /// The job id (`RCOMM_JOB_ID`), `singleton` without a launcher.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// This node's name.
    pub fn hostname(&self) -> &str {
        &self.peers[self.rank as usize].info.hostname
    }

    /// What `rank` published about itself at init.
    pub fn peer(&self, rank: u32) -> Result<&PeerInfo> {
        self.peers
            .get(rank as usize)
            .map(|p| &p.info)
            .ok_or(CommError::InvalidRank {
                rank,
                size: self.size,
            })
    }

    /// Whether `rank` runs on this node (same hostname, boot id and network namespace).
    pub fn same_node(&self, rank: u32) -> Result<bool> {
        Ok(self
            .peer(rank)?
            .same_node(&self.peers[self.rank as usize].info))
    }

    /// What the launcher has reported since init: failed ranks and aborts. Notices arrive in the
    /// background, also while this rank computes.
    pub fn notices(&self) -> Notices {
        self.notices
            .as_ref()
            .map(|n| n.snapshot())
            .unwrap_or_default()
    }

    /// Waits up to `timeout` for the launcher to report a failed rank; returns the failures
    /// known then (empty if none).
    pub fn wait_for_failure(&self, timeout: Duration) -> Vec<(u32, String)> {
        match &self.notices {
            Some(n) => n.wait_for(timeout, |n| !n.failed.is_empty()).failed,
            None => {
                std::thread::sleep(timeout);
                Vec::new()
            }
        }
    }

    /// Which run of the job this is under `rcomm-run --max-restarts`: 0 the first time, then 1,
    /// 2, … (`RCOMM_RESTART_COUNT`). A program resumes from its checkpoint when it is not 0.
    pub fn restart_count(&self) -> u32 {
        self.restart_count
    }

    /// In a process started by [`Communicator::spawn`]: the intercommunicator to the parents
    /// (`MPI_Comm_get_parent`); `None` elsewhere.
    pub fn parent(&self) -> Option<&spawn::InterComm> {
        self.parent.as_ref()
    }

    /// Ends the whole job: the launcher stops every rank and exits with `code`.
    pub fn abort(&self, code: i32, msg: &str) -> ! {
        let mut b = self.boot.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = b.abort(code, msg) {
            eprintln!("rcomm: abort could not reach the launcher ({e}); exiting with code {code}");
        } else {
            // The launcher stops us; don't race it with a normal exit status.
            std::thread::sleep(Duration::from_secs(30));
        }
        std::process::exit(code)
    }
}

impl World {
    /// `RCOMM_STRAGGLER=1`: the world's straggler report, printed by rank 0 (collective: every
    /// rank finalizes). Not while panicking: the other ranks may be elsewhere.
    fn straggler_at_finalize(&self) {
        if self.comm.shared().straggler.is_none() || std::thread::panicking() {
            return;
        }
        match self.comm.straggler_report() {
            Ok(r) if self.rank == 0 => eprint!("{r}"),
            Ok(_) => {}
            Err(e) => rlog!(Warn, "COLL", "straggler report at finalize: {e}"),
        }
    }
}

impl std::ops::Deref for World {
    type Target = Communicator;
    fn deref(&self) -> &Communicator {
        &self.comm
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if self.primary {
            // MPI_Finalize is collective over connected processes: parents and children end
            // together, before this world says it has finished.
            self.parent = None;
            spawn::finalize();
        }
        self.straggler_at_finalize();
        if let Some(p) = &self.comm.shared().coll.progress {
            p.stop();
        }
        // Finish sends still queued in the transports (bounded: a dead peer must not hang exit).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        self.comm
            .shared()
            .block_on(|e| (!e.busy() || std::time::Instant::now() > deadline).then_some(()));
        let mut b = self.boot.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = b.finalize() {
            rlog!(Warn, "INIT", "finalize: {e}");
        }
    }
}

/// A world of one for unit tests elsewhere in the crate.
#[cfg(test)]
pub(crate) fn init_for_test(cfg: &Config) -> World {
    init_with(cfg).expect("a world of one")
}

#[cfg(test)]
mod tests {
    #[test]
    fn ranks_on_one_kernel_share_its_cpus_across_namespaces() {
        use super::{PeerInfo, WaitPolicy, sharing_cpus};
        let a = PeerInfo::local(vec![]);
        // Another network namespace with its own hostname (a fake host), same kernel.
        let fake = PeerInfo {
            netns: a.netns + 1,
            hostname: "fake-host-2".into(),
            ..a.clone()
        };
        let other_kernel = PeerInfo {
            boot_id: "another-boot".into(),
            hostname: "elsewhere".into(),
            ..a.clone()
        };
        // A node split off by RCOMM_HOSTID (init appends it to the boot id): another node to
        // every identity check, the same CPUs.
        let split = PeerInfo {
            boot_id: format!("{}/h2", a.boot_id),
            ..a.clone()
        };
        assert!(!split.same_node(&a));
        let infos = [
            a.clone(),
            fake.clone(),
            fake,
            other_kernel.clone(),
            a,
            split,
        ];
        assert_eq!(sharing_cpus(&infos, 0), 5);
        assert_eq!(sharing_cpus(&infos, 1), 5);
        assert_eq!(sharing_cpus(&infos, 5), 5);
        assert_eq!(sharing_cpus(&infos, 3), 1);
        // 4 ranks on 2 CPUs sleep soon; on 4 CPUs they spin.
        let over = WaitPolicy::for_sharing(4, 2);
        assert!(over.sleep && over.yield_until <= 128 && over.spin <= 64);
        let fits = WaitPolicy::for_sharing(4, 4);
        assert!(!fits.sleep && fits.spin > over.spin);
        assert!(
            WaitPolicy::for_sharing(2, 0).sleep,
            "no CPU count read: one CPU"
        );
        // Shared cores: a pass reading two sockets takes a third of the spin budget or more;
        // a pass of memory reads, or any pass with a core each, takes one unit.
        assert_eq!(over.pass_cost(0), 1);
        assert!(over.pass_cost(2) >= over.spin / 3);
        assert_eq!(fits.pass_cost(2), 1);
        assert!(over.pass_cost(usize::MAX) > over.yield_until);
    }

    use super::*;

    /// Threads share one scope: each starts scoped receives and sends to this rank itself,
    /// waits for some and leaves the rest to the scope's end. The scope's list of live
    /// requests is kept under the engine's lock; every byte must land where it was sent.
    #[test]
    fn threads_sharing_a_scope_start_and_wait_requests_and_the_scope_ends_the_rest() {
        use crate::comm::Tag;
        let cfg = Config::from_map(&Default::default()).unwrap();
        let w = init_with(&cfg).unwrap();
        const T: usize = 4;
        const N: usize = 300;
        let send: Vec<Vec<u32>> = (0..T)
            .map(|t| (0..N).map(|i| (t * 100_000 + i) as u32).collect())
            .collect();
        let mut recv = vec![vec![0u32; N]; T];
        w.scope(|s| {
            std::thread::scope(|ts| {
                for ((t, out), inp) in recv.iter_mut().enumerate().zip(&send) {
                    ts.spawn(move || {
                        let mut pending = Vec::new();
                        for (i, (r, x)) in out.iter_mut().zip(inp).enumerate() {
                            let tag = Tag((t * N + i) as i32);
                            let rq = s.irecv(std::slice::from_mut(r), 0, tag).unwrap();
                            let sq = s.isend(std::slice::from_ref(x), 0, tag).unwrap();
                            sq.wait().unwrap();
                            // Every third receive is left to the scope's end.
                            if i % 3 != 0 {
                                pending.push(rq);
                            }
                        }
                        // Waited out of start order: the list is searched, not popped.
                        for rq in pending.into_iter().rev() {
                            assert_eq!(rq.wait().unwrap().bytes, 4);
                        }
                    });
                }
            });
        });
        assert_eq!(recv, send);
    }

    #[test]
    fn singleton_world_without_launcher() {
        let cfg = Config::from_map(&Default::default()).unwrap();
        let w = init_with(&cfg).unwrap();
        assert_eq!((w.rank(), w.size(), w.job_id()), (0, 1, "singleton"));
        assert!(w.same_node(0).unwrap());
        assert!(matches!(
            w.peer(1),
            Err(CommError::InvalidRank { rank: 1, size: 1 })
        ));
    }
}
