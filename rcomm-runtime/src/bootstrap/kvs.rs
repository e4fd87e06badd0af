//! The rank side of the launcher's key-value store.
//!
//! A reader thread owns the receiving half of the connection: replies go to the caller waiting
//! in a request, notices (a rank failed, the job is aborting) are recorded at any time, also
//! long after init, so a rank learns of a failure even while it computes.

use super::{Bootstrap, BootstrapError};
use crate::auth::{self, Secret};
use crate::config::LaunchEnv;
use crate::rlog;
use crate::wire::{self, FrameIoError, KvsReply, KvsRequest, MAX_FRAME_PAYLOAD};
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// What the launcher has told this rank, outside any request.
#[derive(Debug, Default, Clone)]
pub struct Notices {
    /// Failed ranks with how they ended, in the order reported.
    pub failed: Vec<(u32, String)>,
    /// Set when the job is being aborted: (from, code, message).
    pub abort: Option<(u32, i32, String)>,
    /// Set when the connection to the launcher is gone.
    pub launcher_lost: bool,
    /// Ranks among `failed` that the launcher declared hung (no heartbeat) and killed.
    pub hung: Vec<u32>,
    /// The hosts of ranks among `failed`, where the launcher named them.
    pub hosts: Vec<(u32, String)>,
}

/// Shared notice state with a condition variable for waiters.
#[derive(Debug, Default)]
pub struct NoticeBoard {
    state: Mutex<Notices>,
    cv: Condvar,
    /// Bumped on every notice, so progress loops can check for news with one load.
    version: std::sync::atomic::AtomicU64,
    /// The way back to the launcher for flight-recorder dumps (rcomm-run's store only).
    link: Mutex<Option<LauncherLink>>,
}

/// The rank's connection to the launcher, for messages sent outside requests.
#[derive(Debug)]
struct LauncherLink {
    rank: u32,
    writer: std::sync::Weak<Mutex<TcpStream>>,
}

impl NoticeBoard {
    /// A copy of the notices so far.
    pub fn snapshot(&self) -> Notices {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until `pred` holds or `timeout` passes; returns the notices then.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&Notices) -> bool) -> Notices {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self
            .cv
            .wait_timeout_while(g, timeout, |n| !pred(n))
            .unwrap_or_else(|p| p.into_inner());
        g.clone()
    }

    /// How many notices have arrived so far (cheap; compare with a previous value).
    pub fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Sends this process's flight recorder to the launcher: answering its request `id`, or
    /// (`id` 0) asking it for a hang report because of `why`. False when there is no launcher
    /// to send it to (not started by rcomm-run, or the connection is gone).
    pub fn send_dump(&self, id: u64, why: &str) -> bool {
        let (rank, writer) = match &*self.link.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(l) => (l.rank, l.writer.clone()),
            None => return false,
        };
        let Some(w) = writer.upgrade() else {
            return false;
        };
        let dump = crate::flight::recorder().dump(rank).encode();
        let frame = KvsRequest::FlightDump {
            id,
            why: crate::wire::cut(why, crate::wire::MAX_TEXT_LEN).to_string(),
            dump,
        }
        .to_frame();
        w.lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_all(&frame)
            .is_ok()
    }

    /// Records the launcher's notice that `rank` (on `host`, empty if not named) failed, and
    /// wakes every waiter. The reader thread calls it for each notice; a rank driven by
    /// another launcher (or a test standing in for one) may too.
    pub fn rank_failed(&self, rank: u32, host: &str, how: String) {
        self.update(|n| {
            n.failed.push((rank, how));
            if !host.is_empty() {
                n.hosts.push((rank, host.to_string()));
            }
        });
    }

    fn update(&self, f: impl FnOnce(&mut Notices)) {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()));
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        self.cv.notify_all();
    }
}

/// A connected, authenticated KVS client.
#[derive(Debug)]
pub struct KvsClient {
    env: LaunchEnv,
    /// Shared with the heartbeat thread and the reader thread (which answers dump requests):
    /// frames must not interleave.
    writer: Arc<Mutex<TcpStream>>,
    /// Tells the heartbeat thread to stop.
    beating: Arc<std::sync::atomic::AtomicBool>,
    replies: Receiver<Result<KvsReply, String>>,
    notices: Arc<NoticeBoard>,
    /// Longest wait for one reply; `None` under rcomm-run, whose launcher reports dead ranks.
    reply_timeout: Option<Duration>,
}

/// How long to keep retrying the first connection (the launcher may still be starting).
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

impl KvsClient {
    /// Connects to the launcher named in `env` and authenticates as `env.rank`.
    pub fn connect(env: LaunchEnv, secret: &Secret) -> Result<Self, BootstrapError> {
        Self::connect_with(env, secret, CONNECT_PATIENCE, None)
    }

    /// Like [`connect`](Self::connect), retrying the connection for `patience` (the server may
    /// start later than this rank) and failing any request not answered within `reply_timeout`.
    pub fn connect_with(
        env: LaunchEnv,
        secret: &Secret,
        patience: Duration,
        reply_timeout: Option<Duration>,
    ) -> Result<Self, BootstrapError> {
        let addr = env.kvs_addr.clone();
        let conn_err = |e: &dyn std::fmt::Display| BootstrapError::Connect {
            addr: addr.clone(),
            err: e.to_string(),
        };
        let sa = addr
            .to_socket_addrs()
            .map_err(|e| conn_err(&e))?
            .next()
            .ok_or_else(|| conn_err(&"address resolves to nothing"))?;
        let start = std::time::Instant::now();
        let mut stream = loop {
            match TcpStream::connect_timeout(&sa, Duration::from_secs(2)) {
                Ok(s) => break s,
                Err(e) if start.elapsed() < patience => {
                    rlog!(
                        Trace,
                        "INIT",
                        "KVS connect to {addr} failed ({e}); retrying"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(conn_err(&e)),
            }
        };
        let _ = stream.set_nodelay(true);
        // The store admits a bounded number of handshakes at a time and leaves the rest in its
        // backlog (where silent clients may hold it for a while): wait longer for its challenge
        // than the handshake's own deadline, then run the handshake.
        let _ = stream.set_read_timeout(Some(
            CONNECT_PATIENCE.min(patience.max(auth::HANDSHAKE_TIMEOUT)),
        ));
        let _ = stream.peek(&mut [0u8; 1]);
        auth::connect(&mut stream, secret, "kvs", env.rank).map_err(|source| {
            BootstrapError::Auth {
                addr: addr.clone(),
                source,
            }
        })?;
        let mut reader = stream.try_clone().map_err(|e| conn_err(&e))?;
        let (tx, replies) = channel();
        let notices = Arc::new(NoticeBoard::default());
        let writer = Arc::new(Mutex::new(stream));
        *notices.link.lock().unwrap_or_else(|p| p.into_inner()) = Some(LauncherLink {
            rank: env.rank,
            writer: Arc::downgrade(&writer),
        });
        let board = notices.clone();
        std::thread::Builder::new()
            .name("rcomm-kvs-reader".into())
            .spawn(move || {
                loop {
                    let rep = wire::read_frame(&mut reader, MAX_FRAME_PAYLOAD)
                        .map_err(|e| match e {
                            FrameIoError::Closed => {
                                "the launcher closed the connection".to_string()
                            }
                            e => e.to_string(),
                        })
                        .and_then(|(k, p)| KvsReply::decode(k, &p).map_err(|e| e.to_string()));
                    match rep {
                        Ok(KvsReply::RankFailed { rank, host, how }) => {
                            rlog!(Warn, "INIT", "rank {rank} failed: {how}");
                            board.rank_failed(rank, &host, how);
                        }
                        Ok(KvsReply::RankHung { rank, silent_ms }) => {
                            let how = format!(
                                "hung: no heartbeat for {:.1} s (stopped, or stuck in the kernel); the launcher killed it",
                                silent_ms as f64 / 1e3
                            );
                            rlog!(Warn, "INIT", "rank {rank} {how}");
                            board.update(|n| {
                                n.failed.push((rank, how));
                                n.hung.push(rank);
                            });
                        }
                        Ok(KvsReply::Abort { from, code, msg }) => {
                            board.update(|n| n.abort = Some((from, code, msg)));
                        }
                        Ok(KvsReply::DumpRequest { id }) => {
                            // Here, not in a thread that may be stuck: a rank answers even
                            // while its application computes or waits.
                            board.send_dump(id, "");
                        }
                        Ok(r) => {
                            if tx.send(Ok(r)).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            board.update(|n| n.launcher_lost = true);
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
            })
            .map_err(|e| conn_err(&e))?;
        Ok(Self {
            env,
            writer,
            beating: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            replies,
            notices,
            reply_timeout,
        })
    }

    /// Starts this process's heartbeat: a thread that tells the launcher every `every` that
    /// the process is alive, whatever its other threads do (a rank computing for minutes is
    /// alive; a stopped one is not, though its sockets stay open). Stops at finalize or drop.
    pub fn start_heartbeat(&self, every: Duration) -> Result<(), BootstrapError> {
        use std::sync::atomic::Ordering;
        if self.beating.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let (writer, beating) = (Arc::downgrade(&self.writer), self.beating.clone());
        let frame = KvsRequest::Heartbeat.to_frame();
        std::thread::Builder::new()
            .name("rcomm-heartbeat".into())
            .spawn(move || {
                while beating.load(Ordering::SeqCst) {
                    let Some(w) = writer.upgrade() else { return };
                    let ok = w
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .write_all(&frame)
                        .is_ok();
                    drop(w);
                    if !ok {
                        return;
                    }
                    std::thread::sleep(every);
                }
            })
            .map(drop)
            .map_err(|e| BootstrapError::Env(format!("starting the heartbeat thread: {e}")))
    }

    /// The notices received so far (shared with the reader thread).
    pub fn notices(&self) -> Arc<NoticeBoard> {
        self.notices.clone()
    }

    fn request(&mut self, op: &'static str, req: KvsRequest) -> Result<KvsReply, BootstrapError> {
        let lost = |err: String| BootstrapError::Connect {
            addr: self.env.kvs_addr.clone(),
            err,
        };
        if matches!(req, KvsRequest::Finalize) {
            self.beating
                .store(false, std::sync::atomic::Ordering::SeqCst);
        }
        let written = self
            .writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_all(&req.to_frame());
        if let Err(e) = written {
            return Err(self.aborted().unwrap_or_else(|| lost(e.to_string())));
        }
        let got = match self.reply_timeout {
            None => self.replies.recv().map_err(|_| None),
            Some(t) => self.replies.recv_timeout(t).map_err(|e| match e {
                std::sync::mpsc::RecvTimeoutError::Timeout => Some(t),
                std::sync::mpsc::RecvTimeoutError::Disconnected => None,
            }),
        };
        match got {
            Ok(Ok(KvsReply::Error(msg))) => Err(self.explain(op, msg)),
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(self.aborted().unwrap_or_else(|| lost(e))),
            Err(Some(t)) => Err(BootstrapError::Env(format!(
                "no answer to {op} from the store at {} within {} s (RCOMM_BOOTSTRAP_TIMEOUT): did every rank start?",
                self.env.kvs_addr,
                t.as_secs()
            ))),
            Err(None) => Err(self
                .aborted()
                .unwrap_or_else(|| lost("the reader thread stopped".into()))),
        }
    }

    /// The abort notice, as an error, if the job is being aborted.
    fn aborted(&self) -> Option<BootstrapError> {
        self.notices
            .snapshot()
            .abort
            .map(|(from, code, msg)| BootstrapError::Aborted { from, code, msg })
    }

    fn explain(&self, op: &'static str, msg: String) -> BootstrapError {
        let n = self.notices.snapshot();
        if let Some((rank, how)) = n.failed.first().cloned()
            && msg.contains("failed")
        {
            let host = n
                .hosts
                .iter()
                .find(|(r, _)| *r == rank)
                .map(|(_, h)| h.clone())
                .unwrap_or_default();
            return BootstrapError::RankFailed { rank, host, how };
        }
        BootstrapError::Refused { op, msg }
    }
}

impl Drop for KvsClient {
    fn drop(&mut self) {
        // The reader thread holds a clone of the socket; shutting it down ends that thread and
        // shows the store this rank is gone, as the end of the process would.
        self.beating
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let _ = self
            .writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .shutdown(std::net::Shutdown::Both);
    }
}

impl Bootstrap for KvsClient {
    fn rank(&self) -> u32 {
        self.env.rank
    }
    fn size(&self) -> u32 {
        self.env.size
    }
    fn local_rank(&self) -> u32 {
        self.env.local_rank
    }
    fn local_size(&self) -> u32 {
        self.env.local_size
    }
    fn job_id(&self) -> &str {
        &self.env.job_id
    }
    fn put(&mut self, key: &str, val: &[u8]) -> Result<(), BootstrapError> {
        self.request(
            "put",
            KvsRequest::Put {
                key: key.to_string(),
                val: val.to_vec(),
            },
        )
        .map(drop)
    }
    fn fence(&mut self) -> Result<(), BootstrapError> {
        match self.request("fence", KvsRequest::Fence)? {
            KvsReply::FenceDone => Ok(()),
            r => Err(BootstrapError::Refused {
                op: "fence",
                msg: format!("unexpected reply {r:?}"),
            }),
        }
    }
    fn get(&mut self, from: u32, key: &str) -> Result<Vec<u8>, BootstrapError> {
        match self.request(
            "get",
            KvsRequest::Get {
                rank: from,
                key: key.to_string(),
            },
        )? {
            KvsReply::Value(v) => Ok(v),
            KvsReply::NotFound => Err(BootstrapError::NotFound {
                rank: from,
                key: key.to_string(),
            }),
            r => Err(BootstrapError::Refused {
                op: "get",
                msg: format!("unexpected reply {r:?}"),
            }),
        }
    }
    fn abort(&mut self, code: i32, msg: &str) -> Result<(), BootstrapError> {
        self.request(
            "abort",
            KvsRequest::Abort {
                code,
                msg: msg.to_string(),
            },
        )
        .map(drop)
    }
    fn finalize(&mut self) -> Result<(), BootstrapError> {
        self.request("finalize", KvsRequest::Finalize).map(drop)
    }
    fn agree(
        &mut self,
        key: &str,
        members: &[u32],
        data: &[u8],
    ) -> Result<(Vec<u32>, Vec<u8>), BootstrapError> {
        match self.request(
            "agree",
            KvsRequest::Agree {
                key: key.to_string(),
                members: members.to_vec(),
                data: data.to_vec(),
            },
        )? {
            KvsReply::Agreed { failed, data } => Ok((failed, data)),
            r => Err(BootstrapError::Refused {
                op: "agree",
                msg: format!("unexpected reply {r:?}"),
            }),
        }
    }
}
