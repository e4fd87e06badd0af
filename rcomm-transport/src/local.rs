//! The local channel: how ranks on one node hand each other file descriptors — memfd-backed
//! shared [`Segment`]s and one eventfd [`Doorbell`] per rank — and learn of a peer's death as
//! end-of-file on a Unix stream socket.
//!
//! Listeners live in the *abstract* Unix-socket namespace (`@rcomm.<job_id>.<local_rank>`, see
//! [`socket_name`]) rather than in a directory: the kernel drops the name with the last
//! descriptor, so nothing is left on disk even when the launcher is SIGKILLed. Abstract names
//! have no file mode, so access control is done on accept instead: the peer's uid from
//! `SO_PEERCRED` must be ours, then the job-secret handshake ([`rcomm_runtime::auth`], purpose `"local"`)
//! must succeed; its authenticated id is the connecting rank's local rank. Abstract sockets are
//! per network namespace, which matches rcomm's notion of a node (hostname, boot id, netns).
//!
//! Messages are [`rcomm_runtime::wire`] frames; descriptors travel as `SCM_RIGHTS` attached to the first
//! bytes of their frame. Segments are memfds, so nothing ever appears in `/dev/shm` either.

use rcomm_runtime::auth::{self, Secret};
use rcomm_runtime::wire::{self, FRAME_HEADER_LEN, WireError};
use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Most descriptors one message may carry. A segment, a doorbell and a few GPU handles fit; a
/// peer sending more is broken, and we refuse rather than let it fill our descriptor table.
pub const MAX_FDS: usize = 16;

/// Largest payload of one local-channel message. The channel carries descriptors and small
/// control records (bulk data goes through the segments), so a small limit bounds what a
/// confused peer can make us allocate.
pub const MAX_LOCAL_PAYLOAD: usize = 64 * 1024;

/// How long [`LocalConn::connect`] waits for the listener's first handshake frame. Longer than
/// [`auth::HANDSHAKE_TIMEOUT`] on purpose: the acceptor handles clients one at a time, and may be
/// spending up to that timeout on a silent client queued before us.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest segment [`Segment::from_fd`] maps. A descriptor claiming more is corrupt or hostile;
/// mapping it would only fail later and more confusingly.
pub const MAX_SEGMENT_LEN: usize = 1 << 40;

/// Longest abstract socket name: `sun_path` (108 bytes) minus the leading NUL.
const MAX_ABSTRACT_NAME: usize = 107;

/// Binds the handshake to this kind of listener, so a proof made for the KVS is useless here.
const AUTH_PURPOSE: &str = "local";

/// Enough control-message space for [`MAX_FDS`] descriptors plus slack for anything else the
/// kernel attaches; `u64` elements keep it aligned for `cmsghdr`.
type CmsgBuf = [u64; 32];

/// Why a local-channel operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A system call failed; `what` says which step, and what to try.
    #[error("local channel: {what}: {source}")]
    Io {
        /// The step that failed, with advice.
        what: String,
        /// The system error.
        #[source]
        source: io::Error,
    },
    /// The job-secret handshake failed: the peer is not part of this job, or it timed out.
    #[error("local channel handshake: {0}")]
    Auth(#[from] auth::AuthError),
    /// The peer sent bytes that are not a valid frame; drop the connection.
    #[error("local channel protocol error: {0} (the connection is unusable; drop it)")]
    Wire(#[from] WireError),
    /// The peer closed the connection: it exited, crashed or was killed.
    #[error("local peer {} closed the connection (it exited, crashed or was killed)", rank_text(*.peer))]
    PeerClosed {
        /// The peer's local rank, when known.
        peer: Option<u32>,
    },
    /// A process of another user connected; only our own uid may use the channel.
    #[error(
        "local channel: refused a connection from uid {uid}: only uid {ours} (this job's user) may connect — another user's process is probing the job's socket names"
    )]
    WrongUser {
        /// The peer's uid (from `SO_PEERCRED`).
        uid: u32,
        /// Our uid.
        ours: u32,
    },
    /// A message carried more descriptors than [`MAX_FDS`].
    #[error(
        "local channel message with {count} descriptors; at most {MAX_FDS} may travel in one message — send several"
    )]
    TooManyFds {
        /// How many were offered or received (a lower bound when the kernel truncated them).
        count: usize,
    },
    /// An argument or a received object is unusable; the text says why.
    #[error("local channel: {0}")]
    Invalid(String),
}

impl LocalError {
    /// True when a non-blocking operation found nothing to do; retry after polling
    /// [`LocalConn::raw_fd`] or [`LocalListener::raw_fd`].
    pub fn is_would_block(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == io::ErrorKind::WouldBlock)
    }
}

fn rank_text(r: Option<u32>) -> String {
    r.map_or_else(
        || "(rank unknown)".to_string(),
        |r| format!("(local rank {r})"),
    )
}

fn io_err(what: impl Into<String>, source: io::Error) -> LocalError {
    LocalError::Io {
        what: what.into(),
        source,
    }
}

/// The abstract socket name of `local_rank`'s listener in job `job_id` (without the leading NUL).
pub fn socket_name(job_id: &str, local_rank: u32) -> String {
    format!("rcomm.{job_id}.{local_rank}")
}

/// The local rank a listener name announces (`rcomm.<job_id>.<local_rank>`, see
/// [`socket_name`]).
pub fn local_rank_of(name: &str) -> Option<u32> {
    name.rsplit('.').next().and_then(|r| r.parse().ok())
}

/// A descriptor that becomes readable when process `pid` exits (`pidfd_open`): how a rank
/// waiting for a node peer learns that it died before it connected.
pub fn pidfd(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: pidfd_open takes a pid and flags by value and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// What [`LocalListener::accept_watching`] saw first.
#[derive(Debug)]
pub enum Accepted {
    /// A connection, admitted.
    Conn(LocalConn),
    /// The process behind the watched descriptor with this index exited.
    Exited(usize),
}

fn abstract_addr(name: &str) -> Result<SocketAddr, LocalError> {
    if name.is_empty() || name.len() > MAX_ABSTRACT_NAME || name.contains('\0') {
        return Err(LocalError::Invalid(format!(
            "socket name {name:?} must be 1 to {MAX_ABSTRACT_NAME} bytes without NUL; use a shorter RCOMM_JOB_ID"
        )));
    }
    SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| io_err(format!("making abstract address @{name}"), e))
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The credentials the kernel recorded for the other end of a Unix socket when it connected
/// (or listened); they cannot be forged by the peer.
fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable ucred and `len` holds its exact size, as SO_PEERCRED expects;
    // the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

/// Milliseconds for poll(2), rounded up so a short timeout does not become a busy loop.
fn poll_ms(d: Duration) -> libc::c_int {
    let ms = d.as_nanos().div_ceil(1_000_000);
    ms.min(libc::c_int::MAX as u128) as libc::c_int
}

/// Waits until `fd` reports one of `events` (or an error/hang-up, which the next call will
/// report precisely); `Ok(false)` on timeout. Restarts after signals with the time left.
fn poll_fd(
    fd: BorrowedFd<'_>,
    events: libc::c_short,
    timeout: Option<Duration>,
) -> io::Result<bool> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = deadline.map_or(-1, |d| poll_ms(d.saturating_duration_since(Instant::now())));
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd, count 1.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(rc > 0);
    }
}

/// A listening local-channel socket of one rank.
#[derive(Debug)]
pub struct LocalListener {
    listener: UnixListener,
    name: String,
    local_rank: u32,
    secret: Secret,
    uid: u32,
}

impl LocalListener {
    /// Binds `@rcomm.<job_id>.<local_rank>`. Fails if the name is taken — by a live process
    /// only, since abstract names vanish with their last descriptor.
    pub fn bind(job_id: &str, local_rank: u32, secret: Secret) -> Result<Self, LocalError> {
        let name = socket_name(job_id, local_rank);
        let addr = abstract_addr(&name)?;
        let listener = UnixListener::bind_addr(&addr).map_err(|e| {
            let why = if e.kind() == io::ErrorKind::AddrInUse {
                "a live process already holds this name — is a job with the same RCOMM_JOB_ID still running, or were two ranks given the same local rank?"
            } else {
                "check that the job id is valid"
            };
            io_err(format!("binding @{name}: {why}"), e)
        })?;
        // Always non-blocking: `accept` polls first, so a connection taken meanwhile by another
        // thread cannot leave it stuck in accept(2), and `try_accept` needs no flag flipping.
        listener
            .set_nonblocking(true)
            .map_err(|e| io_err(format!("making @{name} non-blocking"), e))?;
        Ok(Self {
            listener,
            name,
            local_rank,
            secret,
            uid: euid(),
        })
    }

    /// The abstract name (without the leading NUL) that peers pass to [`LocalConn::connect`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The local rank this listener was bound for.
    pub fn local_rank(&self) -> u32 {
        self.local_rank
    }

    /// The listening descriptor, for polling alongside other sources.
    pub fn raw_fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }

    /// Waits for the next connection and admits it (uid check, then handshake, which can take
    /// up to [`auth::HANDSHAKE_TIMEOUT`] for a silent client). A refused connection is logged,
    /// dropped and returned as the error; call again to keep listening.
    pub fn accept(&self) -> Result<LocalConn, LocalError> {
        loop {
            if let Some(c) = self.try_accept()? {
                return Ok(c);
            }
            poll_fd(self.listener.as_fd(), libc::POLLIN, None)
                .map_err(|e| io_err(format!("waiting on @{}", self.name), e))?;
        }
    }

    /// Like [`accept`](Self::accept), but also watches `exits` (descriptors from [`pidfd`] of
    /// the peers still expected): when one of them has exited it returns
    /// [`Accepted::Exited`] with its index, so a rank waiting for a peer that died before it
    /// connected says so instead of waiting forever.
    pub fn accept_watching(&self, exits: &[BorrowedFd<'_>]) -> Result<Accepted, LocalError> {
        let mut fds: Vec<libc::pollfd> = std::iter::once(self.listener.as_raw_fd())
            .chain(exits.iter().map(AsRawFd::as_raw_fd))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        loop {
            // A connection waiting wins over an exit: the peer connected before it died, and
            // the connection's end-of-file will tell the rest.
            if let Some(c) = self.try_accept()? {
                return Ok(Accepted::Conn(c));
            }
            if let Some(i) = fds[1..].iter().position(|p| p.revents != 0) {
                return Ok(Accepted::Exited(i));
            }
            for p in &mut fds {
                p.revents = 0;
            }
            // SAFETY: `fds` is a valid array of pollfds of the given length.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(io_err(format!("waiting on @{}", self.name), e));
                }
            }
        }
    }

    /// Like [`accept`](Self::accept) but returns `Ok(None)` at once when nobody is waiting. The
    /// handshake of a pending client still blocks (bounded by its deadline).
    pub fn try_accept(&self) -> Result<Option<LocalConn>, LocalError> {
        loop {
            match self.listener.accept() {
                Ok((s, _)) => return self.admit(s).map(Some),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                // The client gave up between connect and accept, or a signal arrived: nothing
                // to report, look at the next one.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) => {}
                Err(e) => return Err(io_err(format!("accepting on @{}", self.name), e)),
            }
        }
    }

    fn admit(&self, mut s: UnixStream) -> Result<LocalConn, LocalError> {
        let refuse = |who: &str, e: LocalError| {
            rcomm_runtime::rlog!(
                Warn,
                "NET",
                "local channel @{}: refused a connection from {who}: {e}",
                self.name
            );
            e
        };
        // Linux does not pass O_NONBLOCK on to accepted sockets, but say what we rely on.
        s.set_nonblocking(false)
            .map_err(|e| refuse("a client", io_err("making an accepted socket blocking", e)))?;
        let cred = peer_cred(s.as_fd())
            .map_err(|e| refuse("a client", io_err("reading the peer's credentials", e)))?;
        let who = format!("pid {}", cred.pid);
        if cred.uid != self.uid {
            return Err(refuse(
                &who,
                LocalError::WrongUser {
                    uid: cred.uid,
                    ours: self.uid,
                },
            ));
        }
        let rank =
            auth::accept(&mut s, &self.secret, AUTH_PURPOSE).map_err(|e| refuse(&who, e.into()))?;
        Ok(LocalConn::new(s, Some(rank)))
    }
}

impl AsFd for LocalListener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }
}

/// One message of the local channel.
#[derive(Debug)]
pub struct LocalMsg {
    /// Message kind, chosen by the protocol above this channel.
    pub kind: u8,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// Descriptors that came with the message, already close-on-exec.
    pub fds: Vec<OwnedFd>,
}

/// A frame being received; kept between calls so a non-blocking `recv` can stop anywhere.
#[derive(Debug, Default)]
struct RecvState {
    hdr: [u8; FRAME_HEADER_LEN],
    hdr_got: usize,
    kind: u8,
    payload: Vec<u8>,
    payload_got: usize,
    fds: Vec<OwnedFd>,
    /// More descriptors arrived than allowed (or the kernel had to drop some).
    fds_overflow: bool,
    /// A protocol error desynchronised the stream; nothing after it can be trusted.
    broken: bool,
}

/// An authenticated connection to another rank on this node.
///
/// `send` and `recv` take `&self` and may be called from different threads; each direction is
/// serialised by its own lock so frames never interleave.
#[derive(Debug)]
pub struct LocalConn {
    stream: UnixStream,
    peer: Option<u32>,
    send_lock: Mutex<()>,
    recv_state: Mutex<RecvState>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics between a syscall and the state update it implies, so a poisoned lock
    // still guards consistent state; refusing to use it would only turn one panic into many.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LocalConn {
    fn new(stream: UnixStream, peer: Option<u32>) -> Self {
        Self {
            stream,
            peer,
            send_lock: Mutex::new(()),
            recv_state: Mutex::new(RecvState::default()),
        }
    }

    /// Connects to the listener named `name` as local rank `my_local_rank` and authenticates
    /// both ways with `secret`.
    pub fn connect(name: &str, my_local_rank: u32, secret: &Secret) -> Result<Self, LocalError> {
        let addr = abstract_addr(name)?;
        let mut s = UnixStream::connect_addr(&addr).map_err(|e| {
            let why = if e.kind() == io::ErrorKind::ConnectionRefused {
                "nobody listens there — has that rank started, and is it in this network namespace?"
            } else {
                "connect failed"
            };
            io_err(format!("connecting to @{name}: {why}"), e)
        })?;
        let cred = peer_cred(s.as_fd())
            .map_err(|e| io_err(format!("reading the credentials of @{name}"), e))?;
        let ours = euid();
        if cred.uid != ours {
            return Err(LocalError::WrongUser {
                uid: cred.uid,
                ours,
            });
        }
        let ready = poll_fd(s.as_fd(), libc::POLLIN, Some(CONNECT_TIMEOUT))
            .map_err(|e| io_err(format!("waiting for @{name} to answer"), e))?;
        if !ready {
            return Err(io_err(
                format!(
                    "@{name} accepted nothing within {CONNECT_TIMEOUT:?}: its rank is alive but not serving the local channel (stuck or deadlocked?)"
                ),
                io::ErrorKind::TimedOut.into(),
            ));
        }
        auth::connect(&mut s, secret, AUTH_PURPOSE, my_local_rank)?;
        // The listener proved it holds the job secret; the rank is the one its name announces.
        Ok(Self::new(s, local_rank_of(name)))
    }

    /// The other side's local rank: authenticated by the handshake on the accepting side, taken
    /// from the listener's name on the connecting side; `None` if the name carries none.
    pub fn peer_rank(&self) -> Option<u32> {
        self.peer
    }

    /// The socket, for polling: readable means a message (or end-of-file) is waiting.
    pub fn raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// Switches the socket between blocking and non-blocking. In non-blocking mode `recv`
    /// returns an error for which [`LocalError::is_would_block`] holds when no whole message is
    /// there yet (a partial one is kept); `send` still finishes its frame, polling if it must,
    /// because half a frame on the wire would desynchronise the stream.
    pub fn set_nonblocking(&self, on: bool) -> Result<(), LocalError> {
        self.stream
            .set_nonblocking(on)
            .map_err(|e| io_err("setting the socket's blocking mode", e))
    }

    /// Whether the peer has hung up, without blocking (messages it sent before may still wait).
    pub fn poll_closed(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd, count 1, zero timeout.
        let rc = unsafe { libc::poll(&mut p, 1, 0) };
        rc > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }

    /// Sends one message with `fds` attached. Blocks until the whole frame is queued.
    pub fn send(&self, kind: u8, payload: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), LocalError> {
        if fds.len() > MAX_FDS {
            return Err(LocalError::TooManyFds { count: fds.len() });
        }
        if payload.len() > MAX_LOCAL_PAYLOAD {
            return Err(WireError::TooLong {
                len: payload.len(),
                limit: MAX_LOCAL_PAYLOAD,
            }
            .into());
        }
        let frame = wire::encode_frame(kind, payload);
        let _g = lock(&self.send_lock);
        self.send_raw(&frame, fds)
    }

    /// Receives one message, failing once `deadline` has passed (a peer that says nothing
    /// cannot hold the caller); the connection is blocking again afterwards.
    pub fn recv_until(&self, deadline: Instant) -> Result<LocalMsg, LocalError> {
        self.set_nonblocking(true)?;
        let r = loop {
            match self.recv() {
                Err(e) if e.is_would_block() => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break Err(io_err(
                            format!("waiting for a message from {}", rank_text(self.peer)),
                            io::Error::from(io::ErrorKind::TimedOut),
                        ));
                    }
                    if let Err(e) = poll_fd(self.stream.as_fd(), libc::POLLIN, Some(left)) {
                        break Err(io_err("polling the local channel", e));
                    }
                }
                r => break r,
            }
        };
        self.set_nonblocking(false)?;
        r
    }

    /// Writes `bytes` with `fds` attached to the first chunk. The caller holds the send lock.
    fn send_raw(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), LocalError> {
        let mut off = 0;
        while off < bytes.len() {
            // Descriptors ride with the first byte the kernel accepts: a partial write has
            // already delivered them, so the rest goes without.
            let attach = if off == 0 { fds } else { &[] };
            match sendmsg_fds(self.stream.as_fd(), &bytes[off..], attach) {
                Ok(n) => off += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    poll_fd(self.stream.as_fd(), libc::POLLOUT, None)
                        .map_err(|e| io_err("waiting to send", e))?;
                }
                Err(e) if is_peer_gone(&e) => {
                    return Err(LocalError::PeerClosed { peer: self.peer });
                }
                Err(e) => return Err(io_err(format!("sending to {}", rank_text(self.peer)), e)),
            }
        }
        Ok(())
    }

    /// Receives the next message. End-of-file, also in the middle of a message, is
    /// [`LocalError::PeerClosed`]: that is how a peer's death shows.
    pub fn recv(&self) -> Result<LocalMsg, LocalError> {
        let mut st = lock(&self.recv_state);
        if st.broken {
            return Err(LocalError::Invalid(format!(
                "connection to {} is out of step after an earlier protocol error; drop it",
                rank_text(self.peer)
            )));
        }
        let st = &mut *st;
        loop {
            if st.hdr_got < FRAME_HEADER_LEN {
                let n =
                    self.read_some(&mut st.hdr[st.hdr_got..], &mut st.fds, &mut st.fds_overflow)?;
                st.hdr_got += n;
                if st.hdr_got == FRAME_HEADER_LEN {
                    match wire::decode_frame_header(&st.hdr, MAX_LOCAL_PAYLOAD) {
                        Ok(h) => {
                            st.kind = h.kind;
                            // Bounded by MAX_LOCAL_PAYLOAD, checked just above.
                            st.payload = vec![0; h.len];
                            st.payload_got = 0;
                        }
                        Err(e) => {
                            *st = RecvState {
                                broken: true,
                                ..RecvState::default()
                            };
                            return Err(e.into());
                        }
                    }
                }
                continue;
            }
            if st.payload_got < st.payload.len() {
                let got = st.payload_got;
                let n =
                    self.read_some(&mut st.payload[got..], &mut st.fds, &mut st.fds_overflow)?;
                st.payload_got += n;
                continue;
            }
            let done = mem::take(st);
            if done.fds_overflow || done.fds.len() > MAX_FDS {
                // The frame was read whole, so the stream is still in step; the descriptors we
                // did get are closed as `done` drops.
                return Err(LocalError::TooManyFds {
                    count: done.fds.len().max(MAX_FDS + 1),
                });
            }
            return Ok(LocalMsg {
                kind: done.kind,
                payload: done.payload,
                fds: done.fds,
            });
        }
    }

    /// One recvmsg into `buf` (non-empty), collecting descriptors. End-of-file and resets become
    /// `PeerClosed`; no error disturbs the partial frame the caller keeps.
    fn read_some(
        &self,
        buf: &mut [u8],
        fds: &mut Vec<OwnedFd>,
        overflow: &mut bool,
    ) -> Result<usize, LocalError> {
        loop {
            match recvmsg_fds(self.stream.as_fd(), buf, fds) {
                Ok((0, _)) => return Err(LocalError::PeerClosed { peer: self.peer }),
                Ok((n, truncated)) => {
                    *overflow |= truncated || fds.len() > MAX_FDS;
                    // Keep no more than the limit open while the frame finishes.
                    fds.truncate(MAX_FDS);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_peer_gone(&e) => {
                    return Err(LocalError::PeerClosed { peer: self.peer });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(io_err("no complete message yet (non-blocking)", e));
                }
                Err(e) => {
                    return Err(io_err(
                        format!("receiving from {}", rank_text(self.peer)),
                        e,
                    ));
                }
            }
        }
    }
}

impl AsFd for LocalConn {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

/// EPIPE on send; ECONNRESET on receive when the peer died with our data unread.
fn is_peer_gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET))
}

fn sendmsg_fds(sock: BorrowedFd<'_>, buf: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr().cast_mut().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf: CmsgBuf = [0; 32];
    // SAFETY: msghdr is plain data for which all-zero is a valid "no name, no control" value.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let data_len = (fds.len() * mem::size_of::<RawFd>()) as libc::c_uint;
        // SAFETY: CMSG_SPACE is arithmetic on its argument.
        let space = unsafe { libc::CMSG_SPACE(data_len) } as usize;
        assert!(
            space <= mem::size_of::<CmsgBuf>(),
            "MAX_FDS descriptors fit the control buffer"
        );
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` zeroed, suitably aligned bytes we own, so
        // CMSG_FIRSTHDR returns a header inside them, and CMSG_DATA has room for `data_len`
        // bytes (that is what CMSG_SPACE reserved). Unaligned writes because CMSG_DATA only
        // promises cmsghdr alignment.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(data_len) as _;
            let data = libc::CMSG_DATA(c).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    // SAFETY: `msg` points at one iovec over `buf` (live for the call) and at `cbuf` as built
    // above. MSG_NOSIGNAL turns a dead peer into EPIPE instead of killing us with SIGPIPE.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// One recvmsg; received descriptors are appended to `fds` (owned at once, so they are closed
/// on every error path). Returns the bytes read and whether the kernel truncated the control
/// data (and so closed descriptors that did not fit).
fn recvmsg_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> io::Result<(usize, bool)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf: CmsgBuf = [0; 32];
    // SAFETY: all-zero msghdr is valid; we then point it at our iovec and control buffer.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = mem::size_of::<CmsgBuf>() as _;
    // SAFETY: the iovec covers `buf` and the control buffer is `cbuf`, both writable for their
    // lengths and live for the call. MSG_CMSG_CLOEXEC makes received descriptors close-on-exec
    // atomically, so a concurrent fork+exec elsewhere in the process cannot inherit them.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: after a successful recvmsg the kernel has set msg_controllen to the bytes of
    // well-formed control messages it wrote into `cbuf`; CMSG_FIRSTHDR/NXTHDR walk only within
    // that length, and each SCM_RIGHTS payload holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors
    // that are new in our table and owned by nobody else.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..bytes / mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, msg.msg_flags & libc::MSG_CTRUNC != 0))
}

/// A shared-memory segment: a memfd mapped read-write and shared, passed to peers by descriptor.
///
/// Its size is sealed (no shrink, no grow), so a peer that maps it can never be made to fault
/// by the creator truncating the file under it.
#[derive(Debug)]
pub struct Segment {
    fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Segment owns its mapping and descriptor; it hands out only a raw pointer, so it
// creates no references whose aliasing rules threads could break. Synchronising accesses
// through that pointer is the user's job, as it must be anyway since other processes map the
// same pages. munmap in Drop is valid from any thread.
unsafe impl Send for Segment {}
// SAFETY: as above; every method takes `&self` and only reads immutable fields.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates a zero-filled segment of `len` bytes. `name` shows in `/proc/<pid>/maps` as
    /// `/memfd:<name>` (handy in diagnostics); it creates no file anywhere.
    pub fn create(name: &str, len: usize) -> Result<Self, LocalError> {
        if len == 0 || len > MAX_SEGMENT_LEN {
            return Err(LocalError::Invalid(format!(
                "segment size {len} must be 1 to {MAX_SEGMENT_LEN} bytes"
            )));
        }
        let cname = CString::new(name)
            .map_err(|_| LocalError::Invalid(format!("segment name {name:?} contains NUL")))?;
        // SAFETY: `cname` is a valid NUL-terminated string; the result is checked below.
        let raw = unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(io_err(
                format!("memfd_create({name:?}) (name at most 249 bytes; too many open files?)"),
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: memfd_create returned a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(len)
            .map_err(|_| LocalError::Invalid(format!("segment size {len} too large")))?;
        // SAFETY: ftruncate on a descriptor we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(io_err(
                format!("sizing segment {name:?} to {len} bytes"),
                io::Error::last_os_error(),
            ));
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl with an integer argument on a descriptor we own.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io_err(
                format!("sealing segment {name:?}"),
                io::Error::last_os_error(),
            ));
        }
        Self::map(fd, len)
    }

    /// Maps a segment received from a peer, whole. Refuses descriptors that are not regular
    /// files, have size 0 or above [`MAX_SEGMENT_LEN`], or can still shrink (a shrink would
    /// turn our accesses into SIGBUS).
    pub fn from_fd(fd: OwnedFd) -> Result<Self, LocalError> {
        // SAFETY: all-zero is a valid `stat`; fstat fills it for a descriptor we own.
        let mut st: libc::stat = unsafe { mem::zeroed() };
        // SAFETY: `st` is writable and sized for fstat.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io_err(
                "fstat on a received segment",
                io::Error::last_os_error(),
            ));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(LocalError::Invalid(format!(
                "received descriptor is not a memory segment (file mode {:o}); the peer sent the wrong descriptor",
                st.st_mode
            )));
        }
        let len = usize::try_from(st.st_size).unwrap_or(usize::MAX);
        if len == 0 || len > MAX_SEGMENT_LEN {
            return Err(LocalError::Invalid(format!(
                "received segment has size {}; expected 1 to {MAX_SEGMENT_LEN} bytes",
                st.st_size
            )));
        }
        // SAFETY: fcntl F_GET_SEALS on a descriptor we own; non-memfds give EINVAL.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(LocalError::Invalid(
                "received segment can still shrink (not a sealed memfd from Segment::create); mapping it would risk SIGBUS".into(),
            ));
        }
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<Self, LocalError> {
        // SAFETY: a fresh mapping (no address hint) of `len` bytes of a file at least that
        // long; the kernel picks an address that overlaps nothing of ours.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io_err(
                format!(
                    "mapping a {len}-byte segment (read-only descriptor? address space or RLIMIT_AS exhausted?)"
                ),
                io::Error::last_os_error(),
            ));
        }
        let ptr = NonNull::new(p.cast())
            .ok_or_else(|| LocalError::Invalid("mmap returned null".into()))?;
        Ok(Self { fd, ptr, len })
    }

    /// Start of the mapping (page-aligned). Other processes may read and write these bytes at
    /// any time; synchronise through atomics in the segment, never through `&`/`&mut` slices
    /// held across a peer's writes.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: segments have at least one byte. (Here for clippy's `len_without_is_empty`.)
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd, to send to peers with [`LocalConn::send`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsFd for Segment {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `map`, unmapped only here; no
        // references into it outlive `self` because we only ever handed out raw pointers.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// An eventfd doorbell: peers ring it, its owner sleeps on it (alone or in a poll set with its
/// sockets), so one waiting rank can wait for shared-memory and network traffic at once.
#[derive(Debug)]
pub struct Doorbell {
    fd: OwnedFd,
}

impl Doorbell {
    /// A new, unrung doorbell (close-on-exec, non-blocking).
    pub fn new() -> Result<Self, LocalError> {
        // SAFETY: eventfd with flags; the result is checked.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io_err(
                "creating an eventfd doorbell (too many open files?)",
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self { fd })
    }

    /// Adopts a doorbell received from a peer; refuses anything that is not an eventfd.
    pub fn from_fd(fd: OwnedFd) -> Result<Self, LocalError> {
        let link =
            std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|e| {
                io_err(
                    "inspecting a received doorbell descriptor (is /proc mounted?)",
                    e,
                )
            })?;
        if link.as_os_str() != "anon_inode:[eventfd]" {
            return Err(LocalError::Invalid(format!(
                "received doorbell descriptor is {}, not an eventfd; the peer sent the wrong descriptor",
                link.display()
            )));
        }
        // The flag lives on the open file the sender shares with us; both sides want it set.
        rcomm_runtime::os::set_nonblocking(fd.as_raw_fd())
            .map_err(|e| io_err("making a received doorbell non-blocking", e))?;
        Ok(Self { fd })
    }

    /// Rings it: the next (or current) [`wait`](Self::wait) returns true.
    pub fn ring(&self) -> Result<(), LocalError> {
        let one: u64 = 1;
        loop {
            // SAFETY: writes the 8 bytes of `one`, as eventfd requires.
            let n = unsafe { libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8) };
            if n == 8 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                // The counter is saturated, which means it is rung already.
                io::ErrorKind::WouldBlock => return Ok(()),
                _ => return Err(io_err("ringing a doorbell", e)),
            }
        }
    }

    /// Waits until rung or `timeout` passes (`None`: no limit); true if rung. Resets the bell,
    /// however many times it was rung, so one wake-up covers all of them.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool, LocalError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if self.drain()? {
                return Ok(true);
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Ok(false);
            }
            poll_fd(self.fd.as_fd(), libc::POLLIN, left)
                .map_err(|e| io_err("waiting on a doorbell", e))?;
        }
    }

    /// Reads and clears the counter; false if it was zero.
    fn drain(&self) -> Result<bool, LocalError> {
        let mut v: u64 = 0;
        loop {
            // SAFETY: reads 8 bytes into `v`, as eventfd requires.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), (&raw mut v).cast(), 8) };
            if n == 8 {
                return Ok(true);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => return Ok(false),
                _ => return Err(io_err("reading a doorbell", e)),
            }
        }
    }

    /// The eventfd, to send to peers or to add to a poll set.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsFd for Doorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The fuzzing entry of the local channel's receiver (see [`crate::fuzzing`]): as much of
/// `data` as one socket buffer holds (at least 64 KiB, one largest frame) arrives on a Unix
/// socket, then end-of-file; messages are received until an error, each within the limits.
/// No second thread: a fuzzer must not leave threads behind.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_recv(data: &[u8]) {
    use std::io::Write;
    let Ok((mut tx, rx)) = UnixStream::pair() else {
        return;
    };
    if tx.set_nonblocking(true).is_err() {
        return;
    }
    let mut off = 0;
    while off < data.len() {
        match tx.write(&data[off..]) {
            Ok(0) | Err(_) => break, // full: the rest would wait for a reader
            Ok(n) => off += n,
        }
    }
    drop(tx);
    let conn = LocalConn::new(rx, Some(1));
    let mut broken = false;
    loop {
        match conn.recv() {
            Ok(m) => {
                assert!(!broken, "a message after a protocol error");
                assert!(m.payload.len() <= MAX_LOCAL_PAYLOAD && m.fds.len() <= MAX_FDS);
            }
            Err(LocalError::PeerClosed { .. }) => break,
            Err(LocalError::Wire(_)) => broken = true,
            Err(LocalError::Invalid(_)) if broken => break,
            Err(e) => panic!("unexpected error on a socket carrying bytes: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::Ring;
    use std::collections::BTreeSet;
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::thread;

    fn unique_job() -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        format!(
            "t{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn seg_name(what: &str) -> String {
        format!("rcomm-test-{}-{what}", std::process::id())
    }

    fn dev_shm() -> BTreeSet<String> {
        std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Nothing of ours in /dev/shm, and our segments really are memfds (a shm_open'ed file
    /// would show in /proc/self/maps as /dev/shm/...).
    fn assert_no_dev_shm(before: &BTreeSet<String>) {
        // The whole directory, whatever the names: a segment need not say "rcomm".
        let new: Vec<_> = dev_shm().difference(before).cloned().collect();
        assert!(new.is_empty(), "/dev/shm gained {new:?}");
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(!maps.lines().any(|l| l.contains("/dev/shm/")), "{maps}");
    }

    /// A connected, authenticated pair: (accepted side, connecting side).
    fn pair(client_rank: u32) -> (LocalConn, LocalConn) {
        let s = Secret::random().unwrap();
        let l = LocalListener::bind(&unique_job(), 0, s.clone()).unwrap();
        let name = l.name().to_string();
        let c = thread::spawn(move || LocalConn::connect(&name, client_rank, &s).unwrap());
        let a = l.accept().unwrap();
        (a, c.join().unwrap())
    }

    /// Accepts until one connection is admitted or `limit` passes, returning the refusals seen.
    fn accept_within(l: &LocalListener, limit: Duration) -> (Option<LocalConn>, Vec<LocalError>) {
        let t0 = Instant::now();
        let mut errs = Vec::new();
        while t0.elapsed() < limit {
            match l.try_accept() {
                Ok(Some(c)) => return (Some(c), errs),
                Ok(None) => {
                    poll_fd(l.as_fd(), libc::POLLIN, Some(Duration::from_millis(50))).unwrap();
                }
                Err(e) => errs.push(e),
            }
        }
        (None, errs)
    }

    #[test]
    fn listener_name_is_abstract_exclusive_and_released_on_drop() {
        let job = unique_job();
        let s = Secret::random().unwrap();
        let l = LocalListener::bind(&job, 3, s.clone()).unwrap();
        assert_eq!(l.name(), format!("rcomm.{job}.3"));
        let unix = std::fs::read_to_string("/proc/net/unix").unwrap();
        assert!(
            unix.lines()
                .any(|x| x.ends_with(&format!(" @rcomm.{job}.3"))),
            "{unix}"
        );
        let e = LocalListener::bind(&job, 3, s.clone()).unwrap_err();
        assert!(e.to_string().contains("already holds this name"), "{e}");
        drop(l);
        LocalListener::bind(&job, 3, s).expect("name is free again once the listener is gone");
        let long = "j".repeat(200);
        assert!(matches!(
            LocalListener::bind(&long, 0, Secret::random().unwrap()),
            Err(LocalError::Invalid(_))
        ));
    }

    #[test]
    fn connect_and_accept_report_the_authenticated_ranks() {
        let s = Secret::random().unwrap();
        let l = LocalListener::bind(&unique_job(), 2, s.clone()).unwrap();
        assert!(
            l.try_accept().unwrap().is_none(),
            "nobody is connecting yet"
        );
        let name = l.name().to_string();
        let c = thread::spawn(move || LocalConn::connect(&name, 5, &s).unwrap());
        let a = l.accept().unwrap();
        let c = c.join().unwrap();
        assert_eq!(a.peer_rank(), Some(5));
        assert_eq!(c.peer_rank(), Some(2));
        c.send(9, b"hi", &[]).unwrap();
        let m = a.recv().unwrap();
        assert_eq!((m.kind, &m.payload[..], m.fds.len()), (9, &b"hi"[..], 0));
        a.send(10, b"", &[]).unwrap();
        assert_eq!(c.recv().unwrap().kind, 10);
        assert!(!a.poll_closed() && !c.poll_closed());
    }

    #[test]
    fn connecting_to_nobody_says_so() {
        let e = LocalConn::connect(
            &socket_name(&unique_job(), 0),
            1,
            &Secret::random().unwrap(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("nobody listens there"), "{e}");
    }

    #[test]
    fn segment_and_doorbell_descriptors_cross_the_channel() {
        let before = dev_shm();
        let (a, c) = pair(1);
        let seg = Segment::create(&seg_name("pass"), 8192).unwrap();
        let bell = Doorbell::new().unwrap();
        c.send(1, b"setup", &[seg.fd(), bell.fd()]).unwrap();
        let mut m = a.recv().unwrap();
        assert_eq!((m.kind, &m.payload[..], m.fds.len()), (1, &b"setup"[..], 2));
        for fd in &m.fds {
            // SAFETY: F_GETFD on a descriptor we own.
            let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
            assert!(
                fl & libc::FD_CLOEXEC != 0,
                "received descriptors are close-on-exec"
            );
        }
        let bell2 = Doorbell::from_fd(m.fds.pop().unwrap()).unwrap();
        let seg2 = Segment::from_fd(m.fds.pop().unwrap()).unwrap();
        assert_eq!(seg2.len(), 8192);
        assert_ne!(seg.as_ptr(), seg2.as_ptr(), "a second, independent mapping");
        // SAFETY: both mappings are live, 8192 bytes long, and only this thread touches them.
        unsafe {
            seg.as_ptr()
                .add(5000)
                .cast::<u64>()
                .write_volatile(0x1122_3344_5566_7788);
            assert_eq!(
                seg2.as_ptr().add(5000).cast::<u64>().read_volatile(),
                0x1122_3344_5566_7788
            );
            seg2.as_ptr().add(8191).write_volatile(0xab);
            assert_eq!(seg.as_ptr().add(8191).read_volatile(), 0xab);
        }
        bell2.ring().unwrap();
        assert!(
            bell.wait(Some(Duration::from_secs(5))).unwrap(),
            "ringing the received copy wakes the original"
        );
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(
            maps.contains(&format!("/memfd:{}", seg_name("pass"))),
            "{maps}"
        );
        // A descriptor of the wrong type is refused on both sides.
        assert!(matches!(
            Doorbell::from_fd(seg.fd().try_clone_to_owned().unwrap()),
            Err(LocalError::Invalid(_))
        ));
        assert!(matches!(
            Segment::from_fd(bell.fd().try_clone_to_owned().unwrap()),
            Err(LocalError::Invalid(_))
        ));
        drop((seg, seg2));
        assert_no_dev_shm(&before);
    }

    #[test]
    fn segment_from_fd_refuses_empty_and_shrinkable_files() {
        let raw_memfd = |len: i64, flags: libc::c_uint| {
            let n = CString::new("rcomm-test-raw").unwrap();
            // SAFETY: valid name; result checked and owned at once.
            let fd = unsafe { libc::memfd_create(n.as_ptr(), flags) };
            assert!(fd >= 0);
            // SAFETY: fresh descriptor we own.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: ftruncate on our descriptor.
            assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), len) }, 0);
            fd
        };
        let e = Segment::from_fd(raw_memfd(0, libc::MFD_CLOEXEC)).unwrap_err();
        assert!(e.to_string().contains("size 0"), "{e}");
        let e = Segment::from_fd(raw_memfd(4096, libc::MFD_CLOEXEC)).unwrap_err();
        assert!(e.to_string().contains("can still shrink"), "{e}");
        assert!(Segment::create("x", 0).is_err());
        assert!(Segment::create("x\0y", 10).is_err());
    }

    #[test]
    fn doorbell_wakes_a_waiter_and_times_out_when_not_rung() {
        let bell = std::sync::Arc::new(Doorbell::new().unwrap());
        let t0 = Instant::now();
        assert!(!bell.wait(Some(Duration::from_millis(50))).unwrap());
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(50) && took < Duration::from_secs(2),
            "{took:?}"
        );

        let b = bell.clone();
        let waiter = thread::spawn(move || {
            let t0 = Instant::now();
            (b.wait(Some(Duration::from_secs(10))).unwrap(), t0.elapsed())
        });
        thread::sleep(Duration::from_millis(50));
        bell.ring().unwrap();
        let (rung, took) = waiter.join().unwrap();
        assert!(rung && took < Duration::from_secs(5), "{took:?}");

        // Several rings before a wait are one wake-up; the counter is drained.
        bell.ring().unwrap();
        bell.ring().unwrap();
        assert!(bell.wait(Some(Duration::ZERO)).unwrap());
        assert!(!bell.wait(Some(Duration::ZERO)).unwrap());
    }

    #[test]
    fn peer_drop_is_seen_as_peer_closed_promptly() {
        let (a, c) = pair(4);
        let a = std::sync::Arc::new(a);
        let a2 = a.clone();
        let blocked = thread::spawn(move || {
            let r = a2.recv();
            (r, Instant::now())
        });
        thread::sleep(Duration::from_millis(50));
        let t0 = Instant::now();
        drop(c);
        let (r, woke) = blocked.join().unwrap();
        assert!(
            matches!(r, Err(LocalError::PeerClosed { peer: Some(4) })),
            "{r:?}"
        );
        assert!(woke.duration_since(t0) < Duration::from_secs(1));
        assert!(a.poll_closed());
        assert!(matches!(
            a.send(1, b"x", &[]),
            Err(LocalError::PeerClosed { peer: Some(4) })
        ));
        let msg = a.recv().unwrap_err().to_string();
        assert!(
            msg.contains("local rank 4") && msg.contains("killed"),
            "{msg}"
        );
    }

    #[test]
    fn wrong_secret_is_refused_and_the_listener_still_admits_a_good_client() {
        let s = Secret::random().unwrap();
        let l = LocalListener::bind(&unique_job(), 0, s.clone()).unwrap();
        let name = l.name().to_string();
        let n2 = name.clone();
        let bad = thread::spawn(move || LocalConn::connect(&n2, 1, &Secret::random().unwrap()));
        let e = l.accept().unwrap_err();
        assert!(
            matches!(e, LocalError::Auth(auth::AuthError::BadProof)),
            "{e}"
        );
        assert!(bad.join().unwrap().is_err());
        let good = thread::spawn(move || LocalConn::connect(&name, 2, &s));
        assert_eq!(l.accept().unwrap().peer_rank(), Some(2));
        good.join().unwrap().unwrap();
    }

    #[test]
    fn garbage_and_silent_clients_are_refused_and_a_good_client_still_gets_in() {
        let s = Secret::random().unwrap();
        let l = LocalListener::bind(&unique_job(), 0, s.clone()).unwrap();
        let addr = abstract_addr(l.name()).unwrap();
        let (tx, rx) = mpsc::channel();
        // Queue order: silent, garbage, good. Each bad client holds its socket open.
        let a1 = addr.clone();
        let tx1 = tx.clone();
        let silent = thread::spawn(move || {
            let s = UnixStream::connect_addr(&a1).unwrap();
            tx1.send(()).unwrap();
            thread::sleep(Duration::from_secs(2));
            drop(s);
        });
        rx.recv().unwrap();
        let garbage = thread::spawn(move || {
            let mut s = UnixStream::connect_addr(&addr).unwrap();
            s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
            tx.send(()).unwrap();
            thread::sleep(Duration::from_secs(2));
        });
        rx.recv().unwrap();
        let name = l.name().to_string();
        let good = thread::spawn(move || LocalConn::connect(&name, 7, &s));

        let t0 = Instant::now();
        let e1 = l.accept().unwrap_err();
        let t1 = t0.elapsed();
        assert!(matches!(&e1, LocalError::Auth(a) if a.is_timeout()), "{e1}");
        assert!(
            t1 >= Duration::from_millis(900) && t1 < Duration::from_secs(2),
            "silent client cut off at {t1:?}"
        );
        let e2 = l.accept().unwrap_err();
        assert!(matches!(&e2, LocalError::Auth(_)), "{e2}");
        assert!(
            t0.elapsed() - t1 < Duration::from_millis(500),
            "garbage refused at once"
        );
        let c = l.accept().unwrap();
        assert_eq!(c.peer_rank(), Some(7));
        assert!(t0.elapsed() < Duration::from_secs(3));
        good.join().unwrap().unwrap();
        silent.join().unwrap();
        garbage.join().unwrap();
    }

    #[test]
    fn another_users_process_is_refused_by_uid() {
        if euid() != 0 {
            // CI runs as root: a skip there would hide a regression.
            rcomm_testkit::skip("needs root to connect as another uid");
            return;
        }
        let l = LocalListener::bind(&unique_job(), 0, Secret::random().unwrap()).unwrap();
        let cname = CString::new(l.name()).unwrap();
        let mut cmd = Command::new("/bin/true");
        cmd.uid(65534)
            .gid(65534)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: the hook runs in the forked child after setuid and before exec, calling only
        // async-signal-safe system calls on memory prepared before the fork (`cname`).
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                let mut sa: libc::sockaddr_un = mem::zeroed();
                sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
                let b = cname.as_bytes();
                for (i, &x) in b.iter().enumerate() {
                    sa.sun_path[i + 1] = x as libc::c_char;
                }
                let len = mem::size_of::<libc::sa_family_t>() + 1 + b.len();
                libc::connect(fd, (&raw const sa).cast(), len as libc::socklen_t);
                Ok(())
            });
        }
        let Ok(mut child) = cmd.spawn() else {
            rcomm_testkit::skip("cannot run a process as uid 65534 here");
            return;
        };
        child.wait().unwrap();
        // The connection is queued by now (connect returned before exec).
        assert!(poll_fd(l.as_fd(), libc::POLLIN, Some(Duration::from_secs(5))).unwrap());
        let e = l.try_accept().unwrap_err();
        assert!(
            matches!(
                e,
                LocalError::WrongUser {
                    uid: 65534,
                    ours: 0
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn oversized_frames_and_too_many_descriptors_are_refused() {
        let (a, c) = pair(1);
        let big = vec![0u8; MAX_LOCAL_PAYLOAD + 1];
        assert!(matches!(
            c.send(1, &big, &[]),
            Err(LocalError::Wire(WireError::TooLong { .. }))
        ));
        let bells: Vec<Doorbell> = (0..MAX_FDS + 1).map(|_| Doorbell::new().unwrap()).collect();
        let fds: Vec<BorrowedFd<'_>> = bells.iter().map(|b| b.fd()).collect();
        assert!(matches!(
            c.send(1, b"", &fds),
            Err(LocalError::TooManyFds { count: 17 })
        ));

        // A peer that attaches too many anyway: the frame is consumed, the stream stays usable.
        c.send_raw(&wire::encode_frame(2, b"many"), &fds).unwrap();
        c.send(3, b"next", &fds[..MAX_FDS]).unwrap();
        assert!(matches!(a.recv(), Err(LocalError::TooManyFds { .. })));
        let m = a.recv().unwrap();
        assert_eq!(
            (m.kind, &m.payload[..], m.fds.len()),
            (3, &b"next"[..], MAX_FDS)
        );

        // A header announcing more than the limit is refused before anything is allocated, and
        // the connection is dead from then on.
        let mut f = wire::encode_frame(1, b"");
        f[4..8].copy_from_slice(&((MAX_LOCAL_PAYLOAD + 1) as u32).to_le_bytes());
        c.send_raw(&f, &[]).unwrap();
        assert!(matches!(
            a.recv(),
            Err(LocalError::Wire(WireError::TooLong { .. }))
        ));
        c.send(1, b"late", &[]).unwrap();
        assert!(matches!(a.recv(), Err(LocalError::Invalid(_))));
    }

    #[test]
    fn nonblocking_recv_assembles_a_frame_sent_byte_by_byte() {
        let (a, c) = pair(1);
        a.set_nonblocking(true).unwrap();
        assert!(a.recv().unwrap_err().is_would_block());
        let bell = Doorbell::new().unwrap();
        let f = wire::encode_frame(6, b"piecewise");
        c.send_raw(&f[..1], &[bell.fd()]).unwrap();
        for i in 1..f.len() {
            assert!(a.recv().unwrap_err().is_would_block(), "byte {i}");
            c.send_raw(&f[i..i + 1], &[]).unwrap();
        }
        let m = a.recv().unwrap();
        assert_eq!(
            (m.kind, &m.payload[..], m.fds.len()),
            (6, &b"piecewise"[..], 1)
        );
        a.set_nonblocking(false).unwrap();
        c.send(7, &[1; 100], &[]).unwrap();
        assert_eq!(a.recv().unwrap().payload, vec![1; 100]);
    }

    #[test]
    fn large_messages_with_descriptors_survive_partial_reads() {
        let (a, c) = pair(1);
        let payload: Vec<u8> = (0..MAX_LOCAL_PAYLOAD)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let bell = Doorbell::new().unwrap();
        let sender = thread::spawn(move || {
            for i in 0..20u8 {
                c.send(i, &payload, &[bell.fd()]).unwrap();
            }
            (c, bell)
        });
        for i in 0..20u8 {
            let m = a.recv().unwrap();
            assert_eq!(
                (m.kind, m.payload.len(), m.fds.len()),
                (i, MAX_LOCAL_PAYLOAD, 1)
            );
            assert!(
                m.payload
                    .iter()
                    .enumerate()
                    .all(|(j, &b)| b == (j * 7 % 251) as u8)
            );
        }
        sender.join().unwrap();
    }

    const CHILD_ENV: &str = "RCOMM_LOCAL_TEST_CHILD";
    const CHILD_SECRET_FD: &str = "RCOMM_LOCAL_TEST_SECRET_FD";
    const RING_MSGS: u64 = 1000;

    /// The child side of the cross-process test: maps what the parent sent, answers through the
    /// segment, a ring and a segment of its own, then waits to be killed.
    fn child_role(name: &str) -> ! {
        let fd: RawFd = std::env::var(CHILD_SECRET_FD).unwrap().parse().unwrap();
        let secret = Secret::from_fd(fd).unwrap();
        let conn = LocalConn::connect(name, 1, &secret).unwrap();
        let mut m = conn.recv().unwrap();
        assert_eq!((m.kind, m.fds.len()), (1, 3));
        let ring_seg = std::sync::Arc::new(Segment::from_fd(m.fds.pop().unwrap()).unwrap());
        let bell = Doorbell::from_fd(m.fds.pop().unwrap()).unwrap();
        let seg = Segment::from_fd(m.fds.pop().unwrap()).unwrap();
        let mut prod = Ring::attach(&ring_seg).unwrap().producer().unwrap();
        // SAFETY: the mapping is 4096 bytes; the parent only reads this half after the bell.
        unsafe {
            assert_eq!(std::slice::from_raw_parts(seg.as_ptr(), 11), b"from parent");
            std::ptr::copy_nonoverlapping(b"from child".as_ptr(), seg.as_ptr().add(2048), 10);
        }
        for i in 0..RING_MSGS {
            while !prod.try_push(&i.to_le_bytes()).unwrap() {
                thread::yield_now();
            }
            bell.ring().unwrap();
        }
        let own = Segment::create(&seg_name("child"), 100).unwrap();
        // SAFETY: fresh 100-byte mapping only we know of yet.
        unsafe { std::ptr::copy_nonoverlapping(b"child segment".as_ptr(), own.as_ptr(), 13) };
        conn.send(2, &std::process::id().to_le_bytes(), &[own.fd()])
            .unwrap();
        // Stay alive until killed; if the parent dies first, leave quietly.
        let _ = conn.recv();
        std::process::exit(0);
    }

    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn descriptors_cross_processes_and_a_sigkilled_child_is_seen_as_peer_closed() {
        if let Ok(name) = std::env::var(CHILD_ENV) {
            child_role(&name);
        }
        let before = dev_shm();
        let secret = Secret::random().unwrap();
        let l = LocalListener::bind(&unique_job(), 0, secret.clone()).unwrap();
        // The secret reaches the child the way the launcher passes it: an inherited memfd.
        let secret_fd =
            rcomm_runtime::os::sealed_memfd("rcomm-test-secret", secret.as_bytes(), true).unwrap();
        let full = concat!(
            module_path!(),
            "::descriptors_cross_processes_and_a_sigkilled_child_is_seen_as_peer_closed"
        );
        let test = full.split_once("::").unwrap().1;
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, l.name())
            .env(CHILD_SECRET_FD, secret_fd.as_raw_fd().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut child = KillOnDrop(child);
        drop(secret_fd);
        let (conn, errs) = accept_within(&l, Duration::from_secs(20));
        let conn = conn
            .unwrap_or_else(|| panic!("child never connected: {errs:?}, {:?}", child.0.try_wait()));
        assert_eq!(conn.peer_rank(), Some(1));

        let seg = Segment::create(&seg_name("xproc"), 4096).unwrap();
        let bell = Doorbell::new().unwrap();
        let ring_seg =
            std::sync::Arc::new(Segment::create(&seg_name("ring"), Ring::layout_size(8)).unwrap());
        let mut cons = Ring::init(&ring_seg, 8).unwrap().consumer().unwrap();
        // SAFETY: fresh mapping; the child reads it only after receiving the descriptor.
        unsafe { std::ptr::copy_nonoverlapping(b"from parent".as_ptr(), seg.as_ptr(), 11) };
        conn.send(1, b"setup", &[seg.fd(), bell.fd(), ring_seg.fd()])
            .unwrap();

        let mut next = 0u64;
        while next < RING_MSGS {
            while cons.try_pop(|b| {
                assert_eq!(b, next.to_le_bytes());
                next += 1;
            }) {}
            if next < RING_MSGS {
                assert!(
                    bell.wait(Some(Duration::from_secs(10))).unwrap(),
                    "child stalled at {next}"
                );
            }
        }
        let m = conn.recv().unwrap();
        assert_eq!((m.kind, m.fds.len()), (2, 1));
        assert_eq!(m.payload, child.0.id().to_le_bytes());
        // SAFETY: the child wrote these bytes before sending message 2, which we have received.
        unsafe {
            assert_eq!(
                std::slice::from_raw_parts(seg.as_ptr().add(2048), 10),
                b"from child"
            )
        };
        let theirs = Segment::from_fd(m.fds.into_iter().next().unwrap()).unwrap();
        // SAFETY: written by the child before it sent the descriptor.
        unsafe {
            assert_eq!(
                std::slice::from_raw_parts(theirs.as_ptr(), 13),
                b"child segment"
            )
        };

        assert!(!conn.poll_closed());
        let t0 = Instant::now();
        child.0.kill().unwrap();
        let r = conn.recv();
        let took = t0.elapsed();
        assert!(
            matches!(r, Err(LocalError::PeerClosed { peer: Some(1) })),
            "{r:?}"
        );
        assert!(
            took < Duration::from_secs(1),
            "death noticed after {took:?}"
        );
        assert!(conn.poll_closed());
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.0.wait().unwrap().signal(), Some(libc::SIGKILL));
        // The child's segment outlives the child: we hold the only mapping now.
        // SAFETY: as above; nobody else maps it any more.
        unsafe { assert_eq!(theirs.as_ptr().read(), b'c') };
        drop(cons);
        drop((seg, ring_seg, theirs));
        assert_no_dev_shm(&before);
    }
}
