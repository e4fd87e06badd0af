//! Process spawning (`MPI_Comm_spawn`, `MPI_Comm_spawn_multiple`) and the intercommunicator
//! between parents and children.
//!
//! The spawning root starts the children itself, on its own node, and serves two stores for
//! them as `rcomm-run` would: one for the children's own world (their `MPI_COMM_WORLD`), and
//! one for a *joint* world of every parent (ranks `0..P`) and every child (`P..P+C`). The
//! children find both through `RCOMM_*` variables and sealed secret descriptors, exactly as
//! ranks find `rcomm-run`'s store; the parents learn the joint store's address and secret from
//! the root over their communicator. The intercommunicator is the joint world seen from one
//! side: remote rank `r` is a rank of the joint world shifted by the other side's first rank,
//! so point-to-point needs no new machinery and merging is a split of the joint world.
//!
//! Why not through `rcomm-run`: a launcher-side spawn needs a request path from ranks to the
//! launcher and back, PMI and torchrun starts have none, and children on the root's node are
//! what `MPI_Comm_spawn` gives without an info argument. The cost is that children are not
//! watched by `rcomm-run` (no heartbeats, no hang report); the stores treat a child that
//! vanishes without finalizing as failed, so its peers get an error instead of waiting.
//!
//! Finalizing is collective over connected processes, as in MPI: a world's end (the drop of
//! the world `init` returned) first ends every joint world with a barrier, and the root then
//! waits for its children to exit.

use super::World;
use crate::comm::Communicator;
use crate::{CommError, Result};
use rcomm_runtime::auth::{SECRET_LEN, Secret};
use rcomm_runtime::bootstrap::{KvsClient, KvsServer};
use rcomm_runtime::config::{Config, LAUNCHER_VARS, LaunchEnv, ParentEnv};
use rcomm_runtime::rlog;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Besides [`LAUNCHER_VARS`], variables a child must not inherit from its parent (they
/// describe the parent's job or its launcher); every one is set anew or removed.
const PARENT_ONLY: &[&str] = &[
    "RCOMM_PARENT_KVS_ADDR",
    "RCOMM_PARENT_RANK",
    "RCOMM_PARENT_SIZE",
    "RCOMM_PARENT_GROUP",
    "RCOMM_PARENT_JOB_ID",
    "RCOMM_PARENT_SECRET_FD",
    "RCOMM_APPNUM",
    "RCOMM_RESTART_COUNT",
    "PMI_FD",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_PORT",
    "PMI_ID",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
];

/// Most processes one spawn may start.
const MAX_CHILDREN: u32 = 4096;

/// A communicator between two disjoint groups: the parents and the children of one spawn
/// (`MPI_Comm_spawn`'s result, `MPI_Comm_get_parent`). Ranks given to it name processes of
/// the *remote* group; [`rank`](Self::rank) and [`size`](Self::size) are the local group's.
#[derive(Clone)]
pub struct InterComm {
    joint: Arc<World>,
    local_base: u32,
    local_size: u32,
    remote_base: u32,
    remote_size: u32,
}

impl std::fmt::Debug for InterComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterComm")
            .field("rank", &self.rank())
            .field("size", &self.local_size)
            .field("remote_size", &self.remote_size)
            .finish()
    }
}

impl InterComm {
    /// This process's rank in the local group.
    pub fn rank(&self) -> u32 {
        self.joint.rank() - self.local_base
    }

    /// The local group's size.
    pub fn size(&self) -> u32 {
        self.local_size
    }

    /// The remote group's size (`MPI_Comm_remote_size`).
    pub fn remote_size(&self) -> u32 {
        self.remote_size
    }

    /// The rank in [`joint`](Self::joint) of remote rank `r`.
    pub fn remote_to_joint(&self, r: u32) -> Result<u32> {
        if r >= self.remote_size {
            return Err(CommError::InvalidRank {
                rank: r,
                size: self.remote_size,
            });
        }
        Ok(self.remote_base + r)
    }

    /// The remote rank of joint rank `j`, if `j` is in the remote group.
    pub fn joint_to_remote(&self, j: u32) -> Option<u32> {
        j.checked_sub(self.remote_base)
            .filter(|&r| r < self.remote_size)
    }

    /// The communicator of both groups, parents first: point-to-point with remote rank `r`
    /// is point-to-point with its rank [`remote_to_joint(r)`](Self::remote_to_joint) here.
    pub fn joint(&self) -> &Communicator {
        &self.joint
    }

    /// Whether this side holds the parents.
    pub fn is_parent_side(&self) -> bool {
        self.local_base == 0
    }

    /// Sends `data` to remote rank `to`.
    pub fn send<T: bytemuck::Pod>(&self, data: &[T], to: u32, tag: crate::Tag) -> Result<()> {
        self.joint.send(data, self.remote_to_joint(to)?, tag)
    }

    /// Receives into `buf` from remote rank `from` (or any remote rank); the status names the
    /// sender by its remote rank.
    pub fn recv<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        from: crate::Source,
        tag: crate::Tag,
    ) -> Result<crate::Status> {
        let src = match from {
            crate::Source::Rank(r) => crate::Source::Rank(self.remote_to_joint(r)?),
            // Any source of the joint world includes the local group; MPI's any source on an
            // intercommunicator means any remote rank. Refused rather than half right.
            crate::Source::Any => {
                return Err(CommError::InvalidArg(
                    "a receive from any source on an intercommunicator: name the remote rank, \
                     or merge the intercommunicator first"
                        .into(),
                ));
            }
        };
        let mut st = self.joint.recv(buf, src, tag)?;
        st.source = self.joint_to_remote(st.source).unwrap_or(st.source);
        Ok(st)
    }

    /// One communicator of both groups (`MPI_Intercomm_merge`), collective over both: the
    /// group that passes `high = false` comes first; when both pass the same, the parents do.
    pub fn merge(&self, high: bool) -> Result<Communicator> {
        let key = i32::from(high) * (1 << 30) + self.rank() as i32;
        let c = self.joint.split(Some(0), key)?;
        c.ok_or_else(|| CommError::InvalidArg("merge gave no communicator".into()))
    }
}

/// One command of a spawn and how many copies of it to start.
#[derive(Debug)]
pub struct SpawnCommand<'a> {
    /// The program, its arguments, environment and directory (`Command`'s getters are read;
    /// the command is not run itself).
    pub command: &'a Command,
    /// How many processes run it.
    pub copies: u32,
}

/// What the spawning root keeps until its world ends: the children and their stores
/// (`[own world's, joint world's]`), watched by a thread until finalize.
struct Spawned {
    children: Mutex<Vec<Child>>,
    stores: Mutex<[KvsServer; 2]>,
    /// The joint store's events: which children have connected to it.
    joined: Mutex<std::sync::mpsc::Receiver<rcomm_runtime::bootstrap::server::KvsEvent>>,
    parents: u32,
    finalizing: std::sync::atomic::AtomicBool,
}

/// Joint worlds of this process and the spawns it rooted, ended at finalize.
type Live = (Vec<Arc<World>>, Vec<Arc<Spawned>>);
static LIVE: Mutex<Live> = Mutex::new((Vec::new(), Vec::new()));

/// How often the root looks at its children.
const WATCH_EVERY: Duration = Duration::from_millis(20);

impl Spawned {
    /// Until finalize: a child that ends before it joined the parents (it crashed, or is not
    /// an rcomm program), or that ends with a failure status, is reported failed in both
    /// stores, so a join or fence waiting for it fails at once instead of at the bootstrap
    /// timeout. (A child that joined and then vanished is caught by the stores themselves.)
    fn watch(self: Arc<Self>) {
        use rcomm_runtime::bootstrap::server::KvsEvent;
        use std::sync::atomic::Ordering;
        let n = self.children.lock().map(|c| c.len()).unwrap_or(0);
        let (mut reported, mut joined) = (vec![false; n], vec![false; n]);
        while !self.finalizing.load(Ordering::Acquire) {
            let mut exited = Vec::new();
            for (i, c) in self
                .children
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter_mut()
                .enumerate()
            {
                if !reported[i]
                    && let Ok(Some(st)) = c.try_wait()
                {
                    reported[i] = true;
                    exited.push((i, st));
                }
            }
            // Read the connections after the exits: a child that joined did so before it
            // exited, so its event is in by now.
            for ev in self
                .joined
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .try_iter()
            {
                if let KvsEvent::Connected { rank } = ev
                    && let Some(j) = rank.checked_sub(self.parents)
                    && let Some(j) = joined.get_mut(j as usize)
                {
                    *j = true;
                }
            }
            for (i, st) in exited {
                if st.success() && joined[i] {
                    continue;
                }
                let how = if joined[i] {
                    format!("exited ({st})")
                } else {
                    format!("exited ({st}) before joining its parents")
                };
                let stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
                stores[0].notify_rank_failed(i as u32, "localhost", &how);
                stores[1].notify_rank_failed(self.parents + i as u32, "localhost", &how);
            }
            if reported.iter().all(|&r| r) {
                return;
            }
            std::thread::sleep(WATCH_EVERY);
        }
    }
}

impl Communicator {
    /// Starts `commands` as new processes (`MPI_Comm_spawn_multiple`; one command is
    /// `MPI_Comm_spawn`) and returns the intercommunicator to them. Collective over this
    /// communicator; only `root`'s `commands` are read. The children run on the root's node,
    /// form a world of their own (ranks in command order) and find this job through
    /// [`World::parent`]. Each child learns its command's index as [`World::appnum`].
    ///
    /// Errors (a program that cannot start, no commands) reach every rank of this communicator.
    pub fn spawn(&self, root: u32, commands: &[SpawnCommand<'_>]) -> Result<InterComm> {
        if root >= self.size() {
            return Err(CommError::InvalidRank {
                rank: root,
                size: self.size(),
            });
        }
        let cfg = rcomm_runtime::config::global()
            .as_ref()
            .map_err(|e| CommError::Config(e.clone()))?;
        // The root's news, as bytes: 0 and a reason, or 1, the children, the joint store's
        // address, its job id and its secret.
        let mut news = Vec::new();
        if self.rank() == root {
            match start_children(self, cfg, commands) {
                Ok((spawned, children, joint)) => {
                    news.push(1);
                    news.extend_from_slice(&children.to_le_bytes());
                    put_str(&mut news, &joint.kvs_addr);
                    put_str(&mut news, &joint.job_id);
                    news.extend_from_slice(joint.secret.as_bytes());
                    lock_live().1.push(spawned);
                }
                Err(why) => {
                    news.push(0);
                    put_str(&mut news, &why);
                }
            }
        }
        let news = self.bcast_vec(news, root)?;
        let (children, addr, job_id, secret) =
            parse_news(&news).map_err(|why| CommError::Spawn(why.to_string()))?;
        let parents = self.size();
        let env = LaunchEnv {
            rank: self.rank(),
            size: parents + children,
            local_rank: self.rank(),
            local_size: parents + children,
            kvs_addr: addr,
            job_id,
            secret_fd: -1,
        };
        let joint = join(cfg, env, &secret)?;
        Ok(InterComm {
            joint,
            local_base: 0,
            local_size: parents,
            remote_base: parents,
            remote_size: children,
        })
    }

    /// Broadcasts a byte vector of any length from `root`.
    fn bcast_vec(&self, mut v: Vec<u8>, root: u32) -> Result<Vec<u8>> {
        let mut len = [v.len() as u64];
        self.bcast(&mut len, root)?;
        v.resize(len[0] as usize, 0);
        self.bcast(&mut v, root)?;
        Ok(v)
    }
}

impl World {
    /// In a spawned process: which command of the spawn it runs (`MPI_APPNUM`); `None` in a
    /// process `rcomm-run` started.
    pub fn appnum(&self) -> Option<u32> {
        let cfg = rcomm_runtime::config::global().as_ref().ok()?;
        cfg.parent.as_ref().map(|p| p.appnum)
    }
}

fn lock_live() -> std::sync::MutexGuard<'static, Live> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

fn put_str(v: &mut Vec<u8>, s: &str) {
    v.extend_from_slice(&(s.len() as u32).to_le_bytes());
    v.extend_from_slice(s.as_bytes());
}

/// Reads what [`Communicator::spawn`]'s root broadcast: (children, address, job id, secret),
/// or the root's reason for failing.
fn parse_news(b: &[u8]) -> std::result::Result<(u32, String, String, Secret), String> {
    struct Reader<'a>(&'a [u8]);
    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
            if self.0.len() < n {
                return Err("the spawning root's answer is malformed".into());
            }
            let (a, b) = self.0.split_at(n);
            self.0 = b;
            Ok(a)
        }
        fn u32(&mut self) -> std::result::Result<u32, String> {
            let b = self.take(4)?;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        fn string(&mut self) -> std::result::Result<String, String> {
            let n = self.u32()? as usize;
            String::from_utf8(self.take(n)?.to_vec())
                .map_err(|_| "the spawning root's answer is malformed".into())
        }
    }
    let mut r = Reader(b);
    if r.take(1)?[0] == 0 {
        return Err(r.string()?);
    }
    let children = r.u32()?;
    let addr = r.string()?;
    let job = r.string()?;
    let mut secret = [0u8; SECRET_LEN];
    secret.copy_from_slice(r.take(SECRET_LEN)?);
    Ok((children, addr, job, Secret::from_bytes(secret)))
}

/// The joint world's store as the parents need it.
struct JointStore {
    kvs_addr: String,
    job_id: String,
    secret: Secret,
}

/// The root's part: both stores, then every child. Returns what to keep, the number of
/// children and the joint store; on failure, the reason (children already started are killed).
fn start_children(
    comm: &Communicator,
    cfg: &Config,
    commands: &[SpawnCommand<'_>],
) -> std::result::Result<(Arc<Spawned>, u32, JointStore), String> {
    let children: u32 = commands
        .iter()
        .try_fold(0u32, |n, c| n.checked_add(c.copies))
        .filter(|&n| (1..=MAX_CHILDREN).contains(&n))
        .ok_or_else(|| format!("spawn between 1 and {MAX_CHILDREN} processes"))?;
    let parents = comm.size();
    let joint_size = parents.checked_add(children).ok_or("too many processes")?;
    // Children run here, so their own store listens on loopback; the joint store must be
    // reachable by every parent, so off one node it listens where this rank's TCP does.
    let joint_ip = if comm.on_one_node() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        rcomm_transport::setup::tcp_address(cfg, 0)?.1
    };
    let secret = |what| Secret::random().map_err(|e| format!("drawing the {what} secret: {e}"));
    let (own_secret, joint_secret) = (secret("children's")?, secret("joint")?);
    let start = |ip, secret: &Secret, size| {
        let s = KvsServer::start(SocketAddr::new(ip, 0), secret.clone(), size)
            .map_err(|e| format!("starting a store for the children: {e}"))?;
        // Nobody else watches the children: a connection lost before finalize is a failure.
        s.fail_on_disconnect();
        Ok::<_, String>(s)
    };
    let own = start(IpAddr::V4(Ipv4Addr::LOCALHOST), &own_secret, children)?;
    let mut joint = start(joint_ip, &joint_secret, joint_size)?;
    let joined = joint
        .take_events()
        .ok_or("the joint store's events are taken")?;
    let memfd = |s: &Secret| {
        rcomm_runtime::os::sealed_memfd("rcomm-spawn-secret", s.as_bytes(), false)
            .map_err(|e| format!("memfd for a child's secret: {e}"))
    };
    let (own_fd, joint_fd) = (memfd(&own_secret)?, memfd(&joint_secret)?);
    let id = next_id();
    let own_job = format!("spawn{}-{id}", std::process::id());
    let joint_job = format!("{own_job}-joint");
    let mut started = Vec::with_capacity(children as usize);
    let mut rank = 0u32;
    for (app, c) in commands.iter().enumerate() {
        for _ in 0..c.copies {
            let mut cmd = rebuild(c.command);
            for v in LAUNCHER_VARS.iter().chain(PARENT_ONLY) {
                cmd.env_remove(v);
            }
            cmd.env("RCOMM_RANK", rank.to_string())
                .env("RCOMM_SIZE", children.to_string())
                .env("RCOMM_LOCAL_RANK", rank.to_string())
                .env("RCOMM_LOCAL_SIZE", children.to_string())
                .env("RCOMM_KVS_ADDR", own.addr().to_string())
                .env("RCOMM_JOB_ID", &own_job)
                .env("RCOMM_SECRET_FD", own_fd.as_raw_fd().to_string())
                .env("RCOMM_PARENT_KVS_ADDR", joint.addr().to_string())
                .env("RCOMM_PARENT_RANK", (parents + rank).to_string())
                .env("RCOMM_PARENT_SIZE", joint_size.to_string())
                .env("RCOMM_PARENT_GROUP", parents.to_string())
                .env("RCOMM_PARENT_JOB_ID", &joint_job)
                .env("RCOMM_PARENT_SECRET_FD", joint_fd.as_raw_fd().to_string())
                .env("RCOMM_APPNUM", app.to_string());
            inherit(&mut cmd, [&own_fd, &joint_fd]);
            match cmd.spawn() {
                Ok(ch) => started.push(ch),
                Err(e) => {
                    kill_all(&mut started);
                    return Err(format!(
                        "cannot start {:?} (command {app}, child {rank}): {e}",
                        c.command.get_program()
                    ));
                }
            }
            rank += 1;
        }
    }
    rlog!(
        Info,
        "INIT",
        "spawned {children} processes (job {own_job}); joint world {joint_job} of {joint_size} at {}",
        joint.addr()
    );
    let store = JointStore {
        kvs_addr: joint.addr().to_string(),
        job_id: joint_job,
        secret: joint_secret,
    };
    let spawned = Arc::new(Spawned {
        children: Mutex::new(started),
        stores: Mutex::new([own, joint]),
        joined: Mutex::new(joined),
        parents,
        finalizing: Default::default(),
    });
    let w = spawned.clone();
    std::thread::Builder::new()
        .name("rcomm-spawn-watch".into())
        .spawn(move || w.watch())
        .map_err(|e| format!("starting the thread watching the children: {e}"))?;
    Ok((spawned, children, store))
}

fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A new `Command` with `c`'s program, arguments, environment changes and directory
/// (`Command` is not `Clone`, and one command may start many processes).
fn rebuild(c: &Command) -> Command {
    let mut n = Command::new(c.get_program());
    n.args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => n.env(k, v),
            None => n.env_remove(k),
        };
    }
    if let Some(d) = c.get_current_dir() {
        n.current_dir(d);
    }
    n
}

/// Lets the child (only) inherit `fds`, which stay close-on-exec in this process so that no
/// other program it starts sees the secrets.
fn inherit(cmd: &mut Command, fds: [&OwnedFd; 2]) {
    let raw = fds.map(|f| f.as_raw_fd());
    // SAFETY: the closure runs between fork and exec and calls only fcntl, which is
    // async-signal-safe; it allocates nothing and touches no lock.
    unsafe {
        cmd.pre_exec(move || {
            for fd in raw {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

fn kill_all(children: &mut [Child]) {
    for c in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Builds the joint world from its store and keeps it until finalize.
fn join(cfg: &Config, env: LaunchEnv, secret: &Secret) -> Result<Arc<World>> {
    let client = KvsClient::connect_with(
        env,
        secret,
        cfg.bootstrap_timeout,
        Some(cfg.bootstrap_timeout),
    )?;
    let notices = client.notices();
    let w = Arc::new(super::build(
        cfg,
        Box::new(client),
        Some(notices),
        Some(secret.clone()),
    )?);
    lock_live().0.push(w.clone());
    Ok(w)
}

/// A spawned process's side, at init: joins the parents' world.
pub(crate) fn join_parents(cfg: &Config, p: &ParentEnv) -> Result<InterComm> {
    let secret = Secret::from_fd(p.join.secret_fd)
        .map_err(|e| CommError::Spawn(format!("reading the parents' secret: {e}")))?;
    let joint = join(cfg, p.join.clone(), &secret)?;
    Ok(InterComm {
        local_base: p.parents,
        local_size: joint.size() - p.parents,
        remote_base: 0,
        remote_size: p.parents,
        joint,
    })
}

/// At the end of the primary world: ends every joint world with a barrier (so no process
/// leaves while a connected one may still talk to it), then waits for the children this
/// process started. Bounded by the collective watchdog, after which children are killed.
pub(crate) fn finalize() {
    let (worlds, spawned) = std::mem::take(&mut *lock_live());
    for w in &worlds {
        if std::thread::panicking() {
            break;
        }
        if let Err(e) = w.barrier() {
            rlog!(Warn, "INIT", "finalize with spawned processes: {e}");
        }
    }
    drop(worlds);
    let limit = rcomm_runtime::config::global()
        .as_ref()
        .ok()
        .and_then(|c| c.coll_timeout)
        .unwrap_or(Duration::from_secs(600));
    let deadline = Instant::now() + limit;
    for s in spawned {
        s.finalizing
            .store(true, std::sync::atomic::Ordering::Release);
        let mut ch = s.children.lock().unwrap_or_else(|p| p.into_inner());
        for c in ch.iter_mut() {
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        rlog!(
                            Warn,
                            "INIT",
                            "spawned process {} still runs {limit:?} after its parents \
                             finalized; killing it",
                            c.id()
                        );
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }
        drop(ch);
        // The other parents finalize their joint world with this store after the barrier:
        // keep it until they have (bounded: a dead parent's connection closes by itself).
        let stores = s.stores.lock().unwrap_or_else(|p| p.into_inner());
        let until = Instant::now() + STORE_LINGER;
        while stores.iter().any(|st| !st.connected().is_empty()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// How long the root keeps the stores for ranks still finalizing with them.
const STORE_LINGER: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roots_news_round_trips_and_refuses_garbage() {
        let s = Secret::from_bytes([7; SECRET_LEN]);
        let mut v = vec![1];
        v.extend_from_slice(&3u32.to_le_bytes());
        put_str(&mut v, "127.0.0.1:5");
        put_str(&mut v, "job");
        v.extend_from_slice(s.as_bytes());
        let (n, a, j, got) = parse_news(&v).unwrap();
        assert_eq!((n, a.as_str(), j.as_str()), (3, "127.0.0.1:5", "job"));
        assert_eq!(got.as_bytes(), s.as_bytes());
        for cut in 0..v.len() {
            assert!(parse_news(&v[..cut]).is_err(), "cut at {cut}");
        }
        let mut e = vec![0];
        put_str(&mut e, "no such program");
        assert_eq!(parse_news(&e).err().as_deref(), Some("no such program"));
    }

    #[test]
    fn a_rebuilt_command_keeps_program_arguments_environment_and_directory() {
        let mut c = Command::new("/bin/echo");
        c.arg("a")
            .arg("b")
            .env("X", "1")
            .env_remove("Y")
            .current_dir("/tmp");
        let n = rebuild(&c);
        assert_eq!(n.get_program(), "/bin/echo");
        assert_eq!(n.get_args().collect::<Vec<_>>(), ["a", "b"]);
        let envs: Vec<_> = n.get_envs().collect();
        assert!(envs.contains(&("X".as_ref(), Some("1".as_ref()))));
        assert!(envs.contains(&("Y".as_ref(), None)));
        assert_eq!(n.get_current_dir(), Some("/tmp".as_ref()));
    }
}
