//! The listening side: accepts, authenticates and hands over incoming streams.

use super::{AUTH_PURPOSE, HELLO_TIMEOUT, Hello, MAX_STREAMS, TcpConfig, hello_kind, sys, tune};
use crate::error::TransportError;
use crate::local::Doorbell;
use rcomm_runtime::auth::{self, Secret};
use rcomm_runtime::wire::{self, MAX_TEXT_LEN};
use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// Most handshakes in flight at once. Each runs in its own short-lived thread and ends within
/// about two seconds (handshake and hello deadlines), so silent clients cannot hold the
/// listener, and a flood of them cannot spawn threads without bound: past this, connections
/// wait in the kernel's backlog (their senders wait up to [`super::CONNECT_TIMEOUT`]).
const MAX_HANDSHAKES: usize = 128;

/// Backlog of the listening socket (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: i32 = 4096;

/// How often the accept thread looks at its stop flag even if nothing wakes it.
const IDLE_POLL: Duration = Duration::from_millis(500);

/// An authenticated stream from a peer, ready to be added to that peer's [`super::TcpReceiver`].
#[derive(Debug)]
pub struct Incoming {
    /// The sender's rank, proven by the handshake.
    pub peer: u32,
    /// This stream's index among the sender's streams to us (0 carries ordered messages).
    pub index: u32,
    /// How many streams the sender opens to us.
    pub count: u32,
    /// The socket: non-blocking, tuned, past the handshake.
    pub stream: TcpStream,
}

/// State shared by the owner, the accept thread and the handshake threads.
#[derive(Debug)]
struct Shared {
    ready: Mutex<VecDeque<Incoming>>,
    /// Length of `ready`, readable without the lock so an idle `try_accept` costs one load.
    pending: AtomicUsize,
    /// Rung whenever `ready` gains an entry; the owner's sleepers poll it.
    bell: Doorbell,
    stop: AtomicBool,
    /// Wakes the accept thread out of `poll` when the acceptor is dropped.
    stop_bell: Doorbell,
    handshakes: AtomicUsize,
}

/// What a handshake needs to judge a client.
#[derive(Debug)]
struct Params {
    secret: Secret,
    my_rank: u32,
    world_size: u32,
    max_frame: usize,
    cfg: TcpConfig,
    addr: SocketAddr,
}

/// A rank's TCP listener. A background thread accepts connections; each is authenticated with
/// the job secret in its own short-lived thread (so a silent or slow client delays nobody), must
/// come from a rank of this job and be meant for this rank, and is then handed to the owner
/// through [`try_accept`](Self::try_accept). Refused connections are logged under `NET` and
/// dropped. Dropping the acceptor stops the thread and closes the listener.
#[derive(Debug)]
pub struct TcpAcceptor {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> TransportError {
    move |source| TransportError::Io { what, source }
}

fn bell_err(what: &'static str) -> impl FnOnce(crate::local::LocalError) -> TransportError {
    move |e| TransportError::Io {
        what,
        source: io::Error::other(e.to_string()),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere cannot leave the queue half-updated (push and pop are single calls).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TcpAcceptor {
    /// Listens on `ip` at a port the system picks, as rank `my_rank` of `world_size`, admitting
    /// only clients that prove knowledge of `secret`. `cfg` sets the socket options of accepted
    /// streams and the largest frame a sender may announce. Publish [`addr`](Self::addr); bind
    /// to an address peers can reach (not `0.0.0.0`, which is not an address to connect to).
    pub fn bind(
        ip: IpAddr,
        my_rank: u32,
        world_size: u32,
        secret: &Secret,
        cfg: &TcpConfig,
    ) -> Result<Self, TransportError> {
        let listener = TcpListener::bind((ip, 0)).map_err(io_err(
            "binding the TCP listener (is the address one of this host's?)",
        ))?;
        let addr = listener
            .local_addr()
            .map_err(io_err("reading the TCP listener's address"))?;
        // Best effort: the default backlog works, only slower under a connection storm.
        let _ = sys::set_backlog(listener.as_fd(), BACKLOG);
        listener
            .set_nonblocking(true)
            .map_err(io_err("making the TCP listener non-blocking"))?;
        let shared = Arc::new(Shared {
            ready: Mutex::new(VecDeque::new()),
            pending: AtomicUsize::new(0),
            bell: Doorbell::new()
                .map_err(bell_err("creating the TCP listener's wake-up eventfd"))?,
            stop: AtomicBool::new(false),
            stop_bell: Doorbell::new()
                .map_err(bell_err("creating the TCP listener's stop eventfd"))?,
            handshakes: AtomicUsize::new(0),
        });
        let params = Arc::new(Params {
            secret: secret.clone(),
            my_rank,
            world_size,
            max_frame: cfg.max_frame(),
            cfg: cfg.clone(),
            addr,
        });
        let sh = shared.clone();
        let thread = thread::Builder::new()
            .name("rcomm-tcp-accept".into())
            .spawn(move || accept_loop(listener, sh, params))
            .map_err(io_err("starting the TCP accept thread"))?;
        Ok(Self {
            addr,
            shared,
            thread: Some(thread),
        })
    }

    /// The `ip:port` peers connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next authenticated stream, if one is ready. Costs one atomic load when none is, so
    /// progress loops may call it on every pass.
    pub fn try_accept(&self) -> Option<Incoming> {
        let sh = &*self.shared;
        if sh.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let (inc, left) = {
            let mut q = lock(&sh.ready);
            let inc = q.pop_front();
            if inc.is_some() {
                sh.pending.fetch_sub(1, Ordering::AcqRel);
            }
            (inc, q.len())
        };
        if inc.is_some() && left == 0 {
            // Clear the bell so sleepers do not spin, then re-ring if a stream arrived meanwhile:
            // producers count before they ring, so either their ring comes after this clear or
            // their count is visible to the check below.
            let _ = sh.bell.wait(Some(Duration::ZERO));
            if sh.pending.load(Ordering::Acquire) > 0 {
                let _ = sh.bell.ring();
            }
        }
        inc
    }

    /// A descriptor that is readable while a stream waits in [`try_accept`](Self::try_accept),
    /// for a rank that sleeps in `poll`/`epoll` (level-triggered).
    pub fn raw_fd(&self) -> RawFd {
        self.shared.bell.fd().as_raw_fd()
    }
}

impl Drop for TcpAcceptor {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.shared.stop_bell.ring();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Counts a handshake in flight for as long as it lives, even if its thread panics.
struct HandshakeSlot(Arc<Shared>);

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.0.handshakes.fetch_sub(1, Ordering::AcqRel);
    }
}

fn accept_loop(listener: TcpListener, sh: Arc<Shared>, p: Arc<Params>) {
    while !sh.stop.load(Ordering::Acquire) {
        if sh.handshakes.load(Ordering::Acquire) >= MAX_HANDSHAKES {
            // Leave further clients in the backlog until a handshake ends.
            thread::sleep(Duration::from_millis(10));
            continue;
        }
        match listener.accept() {
            Ok((s, from)) => {
                sh.handshakes.fetch_add(1, Ordering::AcqRel);
                let slot = HandshakeSlot(sh.clone());
                let params = p.clone();
                let spawned = thread::Builder::new()
                    .name("rcomm-tcp-handshake".into())
                    .spawn(move || handshake(s, from, &params, slot));
                if let Err(e) = spawned {
                    // The closure (and with it the slot and the stream) was dropped.
                    rcomm_runtime::rlog!(
                        Warn,
                        "NET",
                        "tcp listener {}: cannot start a handshake thread for {from}: {e}",
                        p.addr
                    );
                    thread::sleep(Duration::from_millis(10));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let _ = sys::poll_readable(&[listener.as_fd(), sh.stop_bell.fd()], IDLE_POLL);
            }
            // A client gave up between connect and accept, or a signal came: nothing to report.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) => {}
            Err(e) => {
                // Out of descriptors or memory: the listener stays readable, so pause rather
                // than spin, and keep serving once resources come back.
                rcomm_runtime::rlog!(
                    Warn,
                    "NET",
                    "tcp listener {}: accept failed: {e} (too many open files?)",
                    p.addr
                );
                let _ = sys::poll_readable(&[sh.stop_bell.fd()], Duration::from_millis(100));
            }
        }
    }
}

/// The body of a handshake thread: admits the client and queues its stream, or logs why not.
fn handshake(s: TcpStream, from: SocketAddr, p: &Params, slot: HandshakeSlot) {
    let sh = &slot.0;
    match admit(s, p) {
        Ok(inc) if !sh.stop.load(Ordering::Acquire) => {
            lock(&sh.ready).push_back(inc);
            // Count after queueing and ring after counting: `try_accept` relies on this order.
            sh.pending.fetch_add(1, Ordering::AcqRel);
            let _ = sh.bell.ring();
        }
        Ok(_) => {} // the acceptor is gone; dropping the stream closes it
        Err(why) => rcomm_runtime::rlog!(
            Warn,
            "NET",
            "tcp listener {} (rank {}): refused a connection from {from}: {why}",
            p.addr,
            p.my_rank
        ),
    }
}

/// Runs the listener's side of the handshake on a fresh connection; on success returns it
/// non-blocking and tuned, otherwise the reason (already told to the client where it helps).
fn admit(mut s: TcpStream, p: &Params) -> Result<Incoming, String> {
    s.set_nonblocking(false)
        .map_err(|e| format!("making the socket blocking: {e}"))?;
    let id = auth::accept(&mut s, &p.secret, AUTH_PURPOSE).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(HELLO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(HELLO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    // The deadline holds for the whole hello, however its bytes are paced.
    let hello_by = std::time::Instant::now() + HELLO_TIMEOUT;
    let (kind, payload) = auth::read_frame_until(&mut s, 64, hello_by)
        .map_err(|e| format!("rank {id}: reading its hello: {e}"))?;
    s.set_read_timeout(Some(HELLO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(HELLO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    if kind != hello_kind::HELLO {
        return Err(format!(
            "rank {id}: expected a hello frame, got kind {kind}"
        ));
    }
    let hello = Hello::decode(&payload).map_err(|e| format!("rank {id}: bad hello: {e}"))?;
    let problem = if id >= p.world_size {
        Some(format!(
            "it authenticated as rank {id}, but the job has {} ranks (a process of another size of this job?)",
            p.world_size
        ))
    } else if hello.dest != p.my_rank {
        Some(format!(
            "rank {id} wanted rank {}, but this listener belongs to rank {} (stale or mixed-up address records?)",
            hello.dest, p.my_rank
        ))
    } else if hello.count == 0 || hello.count as usize > MAX_STREAMS || hello.index >= hello.count {
        Some(format!(
            "rank {id}: stream {} of {} is not a valid stream (at most {MAX_STREAMS})",
            hello.index, hello.count
        ))
    } else if hello.max_frame as usize > p.max_frame {
        Some(format!(
            "rank {id} may send frames of {} bytes but rank {} accepts at most {} (eager limit and chunk size must agree on every rank)",
            hello.max_frame, p.my_rank, p.max_frame
        ))
    } else {
        None
    };
    if let Some(why) = problem {
        let _ = wire::write_frame(
            &mut s,
            hello_kind::REFUSED,
            &why.as_bytes()[..why.len().min(MAX_TEXT_LEN)],
        );
        // Close gracefully so the refusal is read rather than lost to a reset: stop writing,
        // then wait (bounded by the read deadline) for the client to close its end.
        let _ = s.shutdown(Shutdown::Write);
        let _ = s.read(&mut [0u8; 64]);
        return Err(why);
    }
    tune(&s, &p.cfg).map_err(|e| format!("setting socket options: {e}"))?;
    wire::write_frame(&mut s, hello_kind::ACCEPTED, &[])
        .map_err(|e| format!("rank {id}: accepting its stream: {e}"))?;
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    s.set_write_timeout(None).map_err(|e| e.to_string())?;
    s.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok(Incoming {
        peer: id,
        index: hello.index,
        count: hello.count,
        stream: s,
    })
}
