//! The key-value store `rcomm-run` serves to its ranks.
//!
//! One thread per connection: connections are few (one per rank) and long-lived, and a thread
//! blocked in a 1 s handshake cannot stall the others. Unauthenticated connections are capped
//! so a flood cannot exhaust threads. Replies and notices are written under a per-connection
//! lock, so a fence completed by one rank's thread can answer every waiting rank.

use crate::auth::{self, Secret};
use crate::rlog;
use crate::wire::{self, FrameIoError, KvsReply, KvsRequest, MAX_FRAME_PAYLOAD};
use std::collections::{BTreeSet, HashMap};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Most connections allowed to be in the handshake at once.
const MAX_PENDING_HANDSHAKES: usize = 64;
/// Most keys one rank may publish (bounds memory against a misbehaving rank).
const MAX_KEYS_PER_RANK: usize = 1024;

/// Something the launcher should act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvsEvent {
    /// A rank authenticated.
    Connected {
        /// The rank.
        rank: u32,
    },
    /// A rank asked to abort the job.
    Abort {
        /// The rank.
        rank: u32,
        /// Requested exit code.
        code: i32,
        /// Its message.
        msg: String,
    },
    /// A rank said it is finishing normally.
    Finalized {
        /// The rank.
        rank: u32,
    },
    /// A rank sent its flight recorder: an answer to [`KvsServer::request_dumps`] (`id`),
    /// or (`id` 0) unasked, with `why` a hang report is wanted (its watchdog fired).
    FlightDump {
        /// The rank.
        rank: u32,
        /// The collection it answers; 0 when unasked.
        id: u64,
        /// Why a hang report is wanted ("" when answering).
        why: String,
        /// The encoded [`crate::wire::FlightDump`].
        dump: Vec<u8>,
    },
    /// A connection was refused (bad secret, garbage, silence, duplicate rank).
    Refused {
        /// Peer address.
        peer: String,
        /// Why.
        why: String,
    },
}

#[derive(Default)]
struct State {
    store: HashMap<(u32, String), Vec<u8>>,
    keys_per_rank: HashMap<u32, usize>,
    conns: HashMap<u32, Arc<Mutex<TcpStream>>>,
    fence_waiting: BTreeSet<u32>,
    failed: HashMap<u32, String>,
    /// The failure notices sent so far, in order: a rank that connects later gets them too,
    /// so it names the first failure as the others do (not a later consequence of it).
    notices: Vec<KvsReply>,
    /// When each rank's heartbeat thread last wrote; ranks that never sent one are not
    /// watched.
    beats: HashMap<u32, std::time::Instant>,
    /// Agreements under way, by key.
    agreements: HashMap<String, Agreement>,
}

/// An agreement among some ranks: complete once every member has asked or failed.
struct Agreement {
    members: BTreeSet<u32>,
    arrived: HashMap<u32, Vec<u8>>,
}

/// Answers every agreement whose members have all asked or failed.
fn complete_agreements(st: &mut State) {
    let done: Vec<String> = st
        .agreements
        .iter()
        .filter(|(_, a)| {
            a.members
                .iter()
                .all(|m| a.arrived.contains_key(m) || st.failed.contains_key(m))
        })
        .map(|(k, _)| k.clone())
        .collect();
    for k in done {
        let a = st.agreements.remove(&k).expect("listed");
        let failed: Vec<u32> = a
            .members
            .iter()
            .copied()
            .filter(|m| st.failed.contains_key(m))
            .collect();
        let mut data: Option<Vec<u8>> = None;
        let mut uneven = false;
        for (r, d) in &a.arrived {
            if failed.contains(r) {
                continue;
            }
            match &mut data {
                None => data = Some(d.clone()),
                Some(acc) if acc.len() == d.len() => {
                    acc.iter_mut().zip(d).for_each(|(a, b)| *a &= b);
                }
                Some(_) => uneven = true,
            }
        }
        let rep = if uneven {
            KvsReply::Error(format!(
                "agreement {k}: the members gave data of different lengths"
            ))
        } else {
            KvsReply::Agreed {
                failed: failed.clone(),
                data: data.unwrap_or_default(),
            }
        };
        for r in a.arrived.keys().filter(|r| !failed.contains(r)) {
            if let Some(c) = st.conns.get(r) {
                let _ = send(c, &rep);
            }
        }
    }
}

struct Shared {
    secret: Secret,
    size: u32,
    state: Mutex<State>,
    stopping: AtomicBool,
    pending: AtomicUsize,
    events: Mutex<Sender<KvsEvent>>,
    /// Whether a connection that closes before `finalize` counts as a failed rank (when no
    /// launcher watches the processes, as in a torchrun-style start).
    fail_on_disconnect: AtomicBool,
}

/// A running key-value store.
pub struct KvsServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    events: Option<Receiver<KvsEvent>>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for KvsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvsServer")
            .field("addr", &self.addr)
            .field("size", &self.shared.size)
            .finish()
    }
}

fn send(conn: &Mutex<TcpStream>, rep: &KvsReply) -> io::Result<()> {
    use std::io::Write;
    let mut s = conn.lock().unwrap_or_else(|p| p.into_inner());
    s.write_all(&rep.to_frame())
}

impl KvsServer {
    /// Listens on `bind` (port 0 picks one) for a job of `size` ranks.
    pub fn start(bind: SocketAddr, secret: Secret, size: u32) -> io::Result<Self> {
        let listener = TcpListener::bind(bind)?;
        let addr = listener.local_addr()?;
        let (tx, rx) = channel();
        let shared = Arc::new(Shared {
            secret,
            size,
            state: Mutex::new(State::default()),
            stopping: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            events: Mutex::new(tx),
            fail_on_disconnect: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("rcomm-kvs-accept".into())
            .spawn(move || accept_loop(listener, sh))?;
        Ok(Self {
            shared,
            addr,
            events: Some(rx),
            acceptor: Some(acceptor),
        })
    }

    /// The address ranks connect to (`RCOMM_KVS_ADDR`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Takes the event stream (once).
    pub fn take_events(&mut self) -> Option<Receiver<KvsEvent>> {
        self.events.take()
    }

    /// Tells every other connected rank that `rank` failed, and fails a fence it can no longer
    /// complete, so nobody waits for a dead rank.
    pub fn notify_rank_failed(&self, rank: u32, host: &str, how: &str) {
        fail_rank(&self.shared, rank, host, how);
    }

    /// Treats a rank whose connection closes before it finalized as failed (and tells the
    /// others), for jobs no launcher watches: the store is then the only one who notices.
    pub fn fail_on_disconnect(&self) {
        self.shared.fail_on_disconnect.store(true, Ordering::SeqCst);
    }

    /// Tells every other connected rank that `rank` stopped sending heartbeats for `silent`
    /// and was killed, and fails a fence it can no longer complete.
    pub fn notify_rank_hung(&self, rank: u32, silent: std::time::Duration) {
        let how = format!(
            "hung: no heartbeat for {:.1} s (stopped, or stuck in the kernel); the launcher killed it",
            silent.as_secs_f64()
        );
        let notice = KvsReply::RankHung {
            rank,
            silent_ms: silent.as_millis() as u64,
        };
        fail_rank_with(&self.shared, rank, &how, notice);
    }

    /// Connected ranks whose heartbeats stopped more than `limit` ago, with how long they have
    /// been silent. Only ranks that sent at least one heartbeat are watched.
    pub fn silent_ranks(&self, limit: std::time::Duration) -> Vec<(u32, std::time::Duration)> {
        let st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<(u32, std::time::Duration)> = st
            .beats
            .iter()
            .filter(|(r, _)| st.conns.contains_key(r))
            .map(|(&r, t)| (r, t.elapsed()))
            .filter(|&(_, d)| d > limit)
            .collect();
        v.sort_unstable();
        v
    }

    /// Stops watching `rank`'s heartbeats (it finalized, or ended).
    pub fn forget_heartbeats(&self, rank: u32) {
        let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        st.beats.remove(&rank);
    }

    /// Tells every connected rank that the job is being aborted.
    pub fn notify_abort(&self, from: u32, code: i32, msg: &str) {
        let st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let notice = KvsReply::Abort {
            from,
            code,
            msg: msg.to_string(),
        };
        for c in st.conns.values() {
            let _ = send(c, &notice);
        }
    }

    /// Asks every connected rank for its flight recorder (answers arrive as
    /// [`KvsEvent::FlightDump`] with this `id`); returns the ranks asked.
    pub fn request_dumps(&self, id: u64) -> Vec<u32> {
        let st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let notice = KvsReply::DumpRequest { id };
        let mut asked: Vec<u32> = st
            .conns
            .iter()
            .filter(|(_, c)| send(c, &notice).is_ok())
            .map(|(r, _)| *r)
            .collect();
        asked.sort_unstable();
        asked
    }

    /// Ranks currently connected.
    pub fn connected(&self) -> Vec<u32> {
        let st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<u32> = st.conns.keys().copied().collect();
        v.sort_unstable();
        v
    }
}

impl Drop for KvsServer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a connection of our own.
        let _ = TcpStream::connect_timeout(&self.addr, std::time::Duration::from_millis(200));
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        let st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        for c in st.conns.values() {
            let _ = c.lock().map(|s| s.shutdown(std::net::Shutdown::Both));
        }
    }
}

/// Records `rank` as failed, tells every other connected rank, and fails a fence it can no
/// longer complete.
fn fail_rank(sh: &Shared, rank: u32, host: &str, how: &str) {
    let notice = KvsReply::RankFailed {
        rank,
        host: host.to_string(),
        how: how.to_string(),
    };
    fail_rank_with(sh, rank, how, notice);
}

fn fail_rank_with(sh: &Shared, rank: u32, how: &str, notice: KvsReply) {
    let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
    st.failed.insert(rank, how.to_string());
    st.conns.remove(&rank);
    st.beats.remove(&rank);
    for c in st.conns.values() {
        let _ = send(c, &notice);
    }
    st.notices.push(notice);
    complete_agreements(&mut st);
    if !st.fence_waiting.is_empty() && !st.fence_waiting.contains(&rank) {
        let err = KvsReply::Error(format!("fence cannot complete: rank {rank} failed ({how})"));
        for r in std::mem::take(&mut st.fence_waiting) {
            if let Some(c) = st.conns.get(&r) {
                let _ = send(c, &err);
            }
        }
    }
}

fn event(sh: &Shared, e: KvsEvent) {
    let _ = sh.events.lock().map(|tx| tx.send(e));
}

fn accept_loop(listener: TcpListener, sh: Arc<Shared>) {
    loop {
        // At the cap, leave further clients in the kernel's backlog until a handshake ends
        // (within its deadline) instead of refusing them: a rank arriving while silent
        // clients hold every slot is then delayed, not turned away.
        while sh.pending.load(Ordering::SeqCst) >= MAX_PENDING_HANDSHAKES
            && !sh.stopping.load(Ordering::SeqCst)
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        if sh.stopping.load(Ordering::SeqCst) {
            return;
        }
        let conn = listener.accept();
        if sh.stopping.load(Ordering::SeqCst) {
            return;
        }
        let stream = match conn {
            Ok((s, _)) => s,
            // A client that gave up between connect and accept, or a signal: nothing to say.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) =>
            {
                continue;
            }
            Err(e) => {
                // Out of descriptors or memory: the listener stays readable, so pause rather
                // than spin, and serve again once resources come back.
                rlog!(
                    Warn,
                    "LAUNCH",
                    "KVS: accept failed: {e} (too many open files?)"
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        sh.pending.fetch_add(1, Ordering::SeqCst);
        let sh2 = sh.clone();
        let spawned = std::thread::Builder::new()
            .name("rcomm-kvs-conn".into())
            .spawn(move || serve(stream, peer, sh2));
        if spawned.is_err() {
            sh.pending.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn refuse(sh: &Shared, peer: String, why: String) {
    // The owner of the event stream (the launcher) reports it; logging here too would say it twice.
    rlog!(Info, "LAUNCH", "KVS: refused connection from {peer}: {why}");
    event(sh, KvsEvent::Refused { peer, why });
}

fn serve(mut stream: TcpStream, peer: String, sh: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let auth = auth::accept(&mut stream, &sh.secret, "kvs");
    sh.pending.fetch_sub(1, Ordering::SeqCst);
    let rank = match auth {
        Ok(r) if r < sh.size => r,
        Ok(r) => {
            return refuse(
                &sh,
                peer,
                format!("claims rank {r} but the job has {} ranks", sh.size),
            );
        }
        Err(e) => return refuse(&sh, peer, e.to_string()),
    };
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let conn = Arc::new(Mutex::new(write_half));
    {
        let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.conns.contains_key(&rank) || st.failed.contains_key(&rank) {
            drop(st);
            return refuse(
                &sh,
                peer,
                format!("rank {rank} is already connected or has failed"),
            );
        }
        // Under the lock: the replay comes before any notice sent later.
        for n in &st.notices {
            let _ = send(&conn, n);
        }
        st.conns.insert(rank, conn.clone());
    }
    event(&sh, KvsEvent::Connected { rank });
    let mut finalized = false;
    loop {
        let (kind, payload) = match wire::read_frame(&mut stream, MAX_FRAME_PAYLOAD) {
            Ok(f) => f,
            Err(FrameIoError::Closed) => break,
            // A rank that dies mid-connection: the launcher reports the death itself.
            Err(FrameIoError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => {
                rlog!(
                    Warn,
                    "LAUNCH",
                    "KVS: rank {rank} sent a bad frame ({e}); dropping it"
                );
                break;
            }
        };
        let req = match KvsRequest::decode(kind, &payload) {
            Ok(r) => r,
            Err(e) => {
                let _ = send(&conn, &KvsReply::Error(format!("bad request: {e}")));
                continue;
            }
        };
        finalized |= req == KvsRequest::Finalize;
        if req == KvsRequest::Heartbeat {
            let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
            if !finalized && st.conns.contains_key(&rank) {
                st.beats.insert(rank, std::time::Instant::now());
            }
            continue;
        }
        if finalized {
            sh.state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .beats
                .remove(&rank);
        }
        if let Some(rep) = handle(&sh, rank, req)
            && send(&conn, &rep).is_err()
        {
            break;
        }
    }
    let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
    if st.conns.get(&rank).is_some_and(|c| Arc::ptr_eq(c, &conn)) {
        st.conns.remove(&rank);
        if !finalized && sh.fail_on_disconnect.load(Ordering::SeqCst) {
            drop(st);
            rlog!(
                Warn,
                "INIT",
                "store: rank {rank} disconnected before finalize"
            );
            fail_rank(
                &sh,
                rank,
                "",
                "its connection to the store closed before finalize (the process died?)",
            );
        }
    }
}

/// Handles one request; `None` when the reply is sent later (fence).
fn handle(sh: &Shared, rank: u32, req: KvsRequest) -> Option<KvsReply> {
    let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
    Some(match req {
        KvsRequest::Put { key, val } => {
            let new_key = !st.store.contains_key(&(rank, key.clone()));
            let n = st.keys_per_rank.entry(rank).or_default();
            if new_key && *n >= MAX_KEYS_PER_RANK {
                return Some(KvsReply::Error(format!(
                    "rank {rank} published more than {MAX_KEYS_PER_RANK} keys"
                )));
            }
            if new_key {
                *n += 1;
            }
            st.store.insert((rank, key), val);
            KvsReply::Ok
        }
        KvsRequest::Get { rank: from, key } => {
            if from >= sh.size {
                KvsReply::Error(format!(
                    "rank {from} does not exist (job of {} ranks)",
                    sh.size
                ))
            } else {
                st.store
                    .get(&(from, key))
                    .map_or(KvsReply::NotFound, |v| KvsReply::Value(v.clone()))
            }
        }
        KvsRequest::Fence => {
            if let Some((r, how)) = st.failed.iter().next() {
                return Some(KvsReply::Error(format!(
                    "fence cannot complete: rank {r} failed ({how})"
                )));
            }
            if !st.fence_waiting.insert(rank) {
                return Some(KvsReply::Error(
                    "fence called twice without waiting for the first".into(),
                ));
            }
            if st.fence_waiting.len() as u32 == sh.size {
                for r in std::mem::take(&mut st.fence_waiting) {
                    if let Some(c) = st.conns.get(&r) {
                        let _ = send(c, &KvsReply::FenceDone);
                    }
                }
            }
            return None;
        }
        KvsRequest::Abort { code, msg } => {
            drop(st);
            event(sh, KvsEvent::Abort { rank, code, msg });
            KvsReply::Ok
        }
        KvsRequest::Finalize => {
            drop(st);
            event(sh, KvsEvent::Finalized { rank });
            KvsReply::Ok
        }
        // Never answered: the rank's reader thread sent it, nobody waits for a reply.
        KvsRequest::FlightDump { id, why, dump } => {
            drop(st);
            event(
                sh,
                KvsEvent::FlightDump {
                    rank,
                    id,
                    why,
                    dump,
                },
            );
            return None;
        }
        // Handled by the connection loop, never answered.
        KvsRequest::Heartbeat => return None,
        KvsRequest::Agree { key, members, data } => {
            if !members.contains(&rank) || members.iter().any(|&m| m >= sh.size) {
                return Some(KvsReply::Error(format!(
                    "agreement {key}: rank {rank} is not among its members, or a member is out of range"
                )));
            }
            if st.agreements.len() >= MAX_KEYS_PER_RANK && !st.agreements.contains_key(&key) {
                return Some(KvsReply::Error("too many agreements under way".into()));
            }
            let a = st
                .agreements
                .entry(key.clone())
                .or_insert_with(|| Agreement {
                    members: members.iter().copied().collect(),
                    arrived: HashMap::new(),
                });
            if a.members != members.iter().copied().collect::<BTreeSet<u32>>() {
                return Some(KvsReply::Error(format!(
                    "agreement {key}: rank {rank} names other members than the first to ask"
                )));
            }
            a.arrived.insert(rank, data);
            complete_agreements(&mut st);
            return None;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::{Bootstrap, BootstrapError, KvsClient};
    use crate::config::LaunchEnv;
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    fn server(size: u32) -> (KvsServer, Secret) {
        let secret = Secret::random().unwrap();
        (
            KvsServer::start("127.0.0.1:0".parse().unwrap(), secret.clone(), size).unwrap(),
            secret,
        )
    }

    fn env(srv: &KvsServer, rank: u32, size: u32) -> LaunchEnv {
        LaunchEnv {
            rank,
            size,
            local_rank: rank,
            local_size: size,
            kvs_addr: srv.addr().to_string(),
            job_id: "test".into(),
            secret_fd: -1,
        }
    }

    #[test]
    fn a_rank_that_disconnects_before_finalize_fails_the_fence_when_asked() {
        let (srv, secret) = server(2);
        srv.fail_on_disconnect();
        let patience = Duration::from_secs(5);
        let mut c0 =
            KvsClient::connect_with(env(&srv, 0, 2), &secret, patience, Some(patience)).unwrap();
        let c1 = KvsClient::connect_with(env(&srv, 1, 2), &secret, patience, Some(patience));
        let t = Instant::now();
        let waiter = std::thread::spawn(move || c0.fence());
        std::thread::sleep(Duration::from_millis(100));
        drop(c1); // the process "dies": its connection closes without finalize
        match waiter.join().unwrap() {
            Err(BootstrapError::RankFailed { rank: 1, .. }) => {}
            other => panic!("fence should fail naming rank 1, got {other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(3));
    }

    fn exchange(n: u32) {
        let (srv, secret) = server(n);
        let threads: Vec<_> = (0..n)
            .map(|r| {
                let (e, s) = (env(&srv, r, n), secret.clone());
                std::thread::spawn(move || {
                    let mut c = KvsClient::connect(e, &s).unwrap();
                    c.put("addr", format!("rank-{r}").as_bytes()).unwrap();
                    c.fence().unwrap();
                    for p in 0..n {
                        assert_eq!(c.get(p, "addr").unwrap(), format!("rank-{p}").into_bytes());
                    }
                    // A second round reuses the fence.
                    c.put("round2", &[r as u8]).unwrap();
                    c.fence().unwrap();
                    assert_eq!(
                        c.get((r + 1) % n, "round2").unwrap(),
                        vec![((r + 1) % n) as u8]
                    );
                    assert!(matches!(
                        c.get(r, "nope"),
                        Err(BootstrapError::NotFound { .. })
                    ));
                    assert!(matches!(
                        c.get(n, "addr"),
                        Err(BootstrapError::Refused { .. })
                    ));
                    c.finalize().unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn put_fence_get_at_one_to_eight_ranks() {
        for n in [1, 2, 3, 5, 8] {
            exchange(n);
        }
    }

    fn expect_refused(srv: &mut KvsServer, within: Duration) -> String {
        let ev = srv.take_events().unwrap();
        let t0 = Instant::now();
        loop {
            match ev.recv_timeout(within.saturating_sub(t0.elapsed())) {
                Ok(KvsEvent::Refused { why, .. }) => return why,
                Ok(_) => {}
                Err(e) => panic!("no refusal within {within:?}: {e}"),
            }
        }
    }

    #[test]
    fn bad_clients_are_refused_and_the_job_is_unaffected() {
        // Silent client: refused after the 1 s handshake deadline.
        let (mut srv, _) = server(2);
        let silent = TcpStream::connect(srv.addr()).unwrap();
        let t0 = Instant::now();
        let why = expect_refused(&mut srv, Duration::from_secs(3));
        assert!(t0.elapsed() >= Duration::from_millis(900), "{why}");
        drop(silent);

        // Garbage: refused at once.
        let (mut srv, _) = server(2);
        let mut g = TcpStream::connect(srv.addr()).unwrap();
        g.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let t0 = Instant::now();
        expect_refused(&mut srv, Duration::from_secs(3));
        assert!(t0.elapsed() < Duration::from_millis(500));

        // Oversized frame in place of the handshake response.
        let (mut srv, _) = server(2);
        let mut o = TcpStream::connect(srv.addr()).unwrap();
        let mut ch = [0u8; 64];
        let _ = o.read(&mut ch).unwrap();
        let mut f = wire::encode_frame(crate::wire::auth_kind::RESPONSE, b"");
        f[4..8].copy_from_slice(&(64u32 << 20).to_le_bytes());
        o.write_all(&f).unwrap();
        assert!(expect_refused(&mut srv, Duration::from_secs(3)).contains("exceeds"));

        // Wrong secret, and a rank number outside the job; meanwhile a real job runs.
        let (mut srv, secret) = server(2);
        let bad = KvsClient::connect(env(&srv, 0, 2), &Secret::random().unwrap());
        assert!(matches!(bad, Err(BootstrapError::Auth { .. })));
        let evs = srv.take_events().unwrap();
        // Authenticated but outside the job: dropped before any request is served.
        let mut outside = KvsClient::connect(
            LaunchEnv {
                rank: 5,
                ..env(&srv, 0, 2)
            },
            &secret,
        )
        .unwrap();
        assert!(outside.put("k", b"v").is_err());
        let refusals: Vec<_> = evs
            .try_iter()
            .filter(|e| matches!(e, KvsEvent::Refused { .. }))
            .collect();
        assert!(!refusals.is_empty());
        let t: Vec<_> = (0..2)
            .map(|r| {
                let (e, s) = (env(&srv, r, 2), secret.clone());
                std::thread::spawn(move || {
                    let mut c = KvsClient::connect(e, &s).unwrap();
                    c.put("k", b"v").unwrap();
                    c.fence().unwrap();
                    c.get(1 - r, "k").unwrap()
                })
            })
            .collect();
        for h in t {
            assert_eq!(h.join().unwrap(), b"v");
        }
        // A duplicate connection for a rank already connected is refused. The job's clients
        // are gone, but the store may not have seen their ends yet (under load it saw rank
        // 0's end only after the first new connection was refused, and took the second):
        // wait for both, and for the first new one to be registered.
        let until = |what: &str, f: &dyn Fn(&[u32]) -> bool| {
            let t0 = Instant::now();
            while !f(&srv.connected()) {
                assert!(t0.elapsed() < Duration::from_secs(10), "{what}");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        until("the job's connections did not close", &|c| c.is_empty());
        let _dup0 = KvsClient::connect(env(&srv, 0, 2), &secret).unwrap();
        until("rank 0's new connection was not registered", &|c| c == [0]);
        let mut dup = KvsClient::connect(env(&srv, 0, 2), &secret).unwrap();
        assert!(dup.put("x", b"y").is_err());
    }

    #[test]
    fn ranks_answer_dump_requests_from_their_reader_thread_and_can_ask_for_a_report() {
        let (mut srv, secret) = server(2);
        let events = srv.take_events().unwrap();
        let clients: Vec<KvsClient> = (0..2)
            .map(|r| KvsClient::connect(env(&srv, r, 2), &secret).unwrap())
            .collect();
        while srv.connected().len() < 2 {
            std::thread::sleep(Duration::from_millis(5));
        }
        // No thread of the "rank" does anything: the reader thread answers.
        assert_eq!(srv.request_dumps(7), vec![0, 1]);
        let mut got = Vec::new();
        let t0 = Instant::now();
        while got.len() < 2 && t0.elapsed() < Duration::from_secs(5) {
            if let Ok(KvsEvent::FlightDump {
                rank,
                id,
                why,
                dump,
            }) = events.recv_timeout(Duration::from_millis(100))
            {
                let d = crate::wire::FlightDump::decode(&dump).unwrap();
                assert_eq!((id, why.as_str(), d.rank), (7, "", rank));
                got.push(rank);
            }
        }
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
        // Unasked, with a reason: a watchdog fired.
        assert!(clients[1].notices().send_dump(0, "allreduce #3 timed out"));
        match events.recv_timeout(Duration::from_secs(5)) {
            Ok(KvsEvent::FlightDump { rank, id, why, .. }) => {
                assert_eq!((rank, id, why.as_str()), (1, 0, "allreduce #3 timed out"))
            }
            other => panic!("{other:?}"),
        }
        // Without a launcher connection there is nobody to send it to.
        assert!(!NoticeBoardForTest::default().send_dump(0, "x"));
    }

    type NoticeBoardForTest = crate::bootstrap::kvs::NoticeBoard;

    #[test]
    fn a_rank_gets_in_while_silent_clients_hold_every_handshake_slot() {
        // More silent clients than the server handshakes at once: the rest wait in the
        // backlog, and so does the real rank, which must still get in (it used to be dropped).
        let (srv, secret) = server(1);
        let silent: Vec<TcpStream> = (0..MAX_PENDING_HANDSHAKES + 6)
            .map(|_| TcpStream::connect(srv.addr()).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        let mut c = KvsClient::connect(env(&srv, 0, 1), &secret).unwrap();
        c.put("k", b"v").unwrap();
        c.fence().unwrap();
        assert_eq!(c.get(0, "k").unwrap(), b"v");
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
        drop(silent);
    }

    #[test]
    fn failed_rank_fails_a_pending_fence_and_is_noticed() {
        let (srv, secret) = server(3);
        let mut waiters = Vec::new();
        for r in 0..2 {
            let (e, s) = (env(&srv, r, 3), secret.clone());
            waiters.push(std::thread::spawn(move || {
                let mut c = KvsClient::connect(e, &s).unwrap();
                let board = c.notices();
                let t0 = Instant::now();
                let res = c.fence();
                let n = board.wait_for(Duration::from_secs(2), |n| !n.failed.is_empty());
                (res, n, t0.elapsed())
            }));
        }
        while srv.connected().len() < 2 {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        srv.notify_rank_failed(2, "node2", "killed by signal 9 (SIGKILL)");
        for w in waiters {
            let (res, notices, took) = w.join().unwrap();
            match res {
                Err(e @ BootstrapError::RankFailed { rank: 2, .. }) => {
                    let text = e.to_string();
                    assert!(
                        text.starts_with("rank 2 (host node2) failed during bootstrap")
                            && text.contains("SIGKILL"),
                        "{text}"
                    )
                }
                other => panic!("fence should fail naming rank 2, got {other:?}"),
            }
            assert_eq!(
                notices.failed,
                vec![(2, "killed by signal 9 (SIGKILL)".to_string())]
            );
            assert!(took < Duration::from_secs(2));
        }
    }
}
