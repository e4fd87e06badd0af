//! The sending side: one rank's write-only streams to one peer.

use super::frame::{CHUNK_PREFIX, encode_chunk_prefix, encode_header};
use super::{
    AUTH_PURPOSE, CONNECT_TIMEOUT, FRAME_HEADER_LEN, HELLO_TIMEOUT, Hello, TcpConfig, hello_kind,
    io_error, replay, sys, tune,
};
use crate::error::{Caps, TransportError};
use rcomm_runtime::auth::{self, Secret};
use rcomm_runtime::wire::{self, Header, MAX_TEXT_LEN, ProtoKind};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// How often an idle sender checks that its peer is still there. Its sockets are write-only, so
/// without writing, only a look at the receive side (end-of-file, reset, timeout) tells.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// A data frame whose header is written (or queued) but whose payload the socket has taken
/// only in part. The caller's bytes are never copied into the queue: the next
/// [`TcpSender::send_chunk`] for the same receive and offset writes the rest.
#[derive(Debug, Clone, Copy)]
struct Owed {
    token: u64,
    /// Message offset of the next payload byte.
    offset: u64,
    /// Payload bytes still to write.
    left: usize,
}

/// One stream and the bytes the socket has not taken yet.
#[derive(Debug)]
struct OutStream {
    sock: TcpStream,
    /// Bytes of accepted messages not yet written, in order. Keeps its capacity once grown, so
    /// steady traffic does not allocate.
    queue: VecDeque<u8>,
    /// The data frame being written, if its payload is not all out; nothing else may go on
    /// this stream until it is.
    owed: Option<Owed>,
}

impl OutStream {
    /// Whether a frame of `total` bytes may be queued now.
    fn fits(&self, total: usize, max_queued: usize) -> bool {
        self.owed.is_none() && (self.queue.is_empty() || self.queue.len() + total <= max_queued)
    }

    /// Starts a data frame: one vectored write of header, prefix and payload. What the socket
    /// does not take of header and prefix is queued; of the payload, owed. Returns the payload
    /// bytes written.
    fn start_chunk(
        &mut self,
        fh: &[u8; FRAME_HEADER_LEN],
        prefix: &[u8; CHUNK_PREFIX],
        data: &[u8],
        token: u64,
        offset: u64,
    ) -> io::Result<usize> {
        debug_assert!(self.queue.is_empty() && self.owed.is_none());
        let iov = [IoSlice::new(fh), IoSlice::new(prefix), IoSlice::new(data)];
        let n = match sys::send_nosignal(self.sock.as_fd(), &iov) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        let head = FRAME_HEADER_LEN + CHUNK_PREFIX;
        let sent = n.saturating_sub(head);
        if n < head {
            self.queue.extend(&fh[n.min(FRAME_HEADER_LEN)..]);
            self.queue
                .extend(&prefix[n.saturating_sub(FRAME_HEADER_LEN)..]);
        }
        if sent < data.len() {
            self.owed = Some(Owed {
                token,
                offset: offset + sent as u64,
                left: data.len() - sent,
            });
        }
        Ok(sent)
    }

    /// Writes more of the owed payload from `data` (the message from the owed offset on).
    /// Returns the bytes written.
    fn continue_chunk(&mut self, data: &[u8]) -> io::Result<usize> {
        if !self.flush()? {
            return Ok(0);
        }
        let Some(mut o) = self.owed else {
            return Ok(0);
        };
        let m = o.left.min(data.len());
        let n = match sys::send_nosignal(self.sock.as_fd(), &[IoSlice::new(&data[..m])]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        o.left -= n;
        o.offset += n as u64;
        self.owed = (o.left > 0).then_some(o);
        Ok(n)
    }

    /// Writes queued bytes until the socket is full; true when none are left.
    fn flush(&mut self) -> io::Result<bool> {
        while !self.queue.is_empty() {
            let (a, b) = self.queue.as_slices();
            match sys::send_nosignal(self.sock.as_fd(), &[IoSlice::new(a), IoSlice::new(b)]) {
                Ok(n) => {
                    self.queue.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Sends one frame: behind the queue if there is one, otherwise straight to the socket,
    /// queueing what it does not take.
    fn send(&mut self, fh: &[u8; FRAME_HEADER_LEN], parts: &[&[u8]]) -> io::Result<()> {
        if !self.queue.is_empty() && !self.flush()? {
            self.queue.extend(fh);
            for p in parts {
                self.queue.extend(*p);
            }
            return Ok(());
        }
        // One vectored write of the header and the caller's bytes where they lie (no staging
        // copy); only what the socket does not take is queued.
        let mut iov = [IoSlice::new(&[]); 4];
        iov[0] = IoSlice::new(fh);
        let k = parts.len().min(3);
        for (slot, p) in iov[1..=k].iter_mut().zip(parts) {
            *slot = IoSlice::new(p);
        }
        let mut n = match sys::send_nosignal(self.sock.as_fd(), &iov[..=k]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        for piece in std::iter::once(&fh[..]).chain(parts.iter().copied()) {
            if n >= piece.len() {
                n -= piece.len();
            } else {
                self.queue.extend(&piece[n..]);
                n = 0;
            }
        }
        Ok(())
    }
}

/// A rank's connection(s) to one peer, for the messages it sends there. Opened lazily by the
/// protocol layer at the first send; the peer reads them with a [`super::TcpReceiver`].
#[derive(Debug)]
pub struct TcpSender {
    peer: u32,
    streams: Vec<OutStream>,
    /// Stream the next data chunk tries first.
    next_data: usize,
    max_queued: usize,
    caps: Caps,
    failed: Option<TransportError>,
    last_probe: Instant,
}

impl TcpSender {
    /// Opens [`TcpConfig::streams`] connections to rank `peer`'s listener at `addr` (`ip:port`)
    /// as rank `my_rank`, each authenticated with `secret` and accepted by the listener. Blocks
    /// for the handshakes (normally a few round trips; at most about
    /// [`CONNECT_TIMEOUT`] plus two seconds per stream).
    pub fn connect(
        addr: &str,
        my_rank: u32,
        peer: u32,
        secret: &Secret,
        cfg: &TcpConfig,
    ) -> Result<Self, TransportError> {
        let cerr = |why: String| TransportError::Connect {
            peer,
            addr: addr.to_string(),
            why,
        };
        let sa = addr
            .to_socket_addrs()
            .map_err(|e| cerr(format!("not a usable address: {e}")))?
            .next()
            .ok_or_else(|| cerr("the address resolves to nothing".into()))?;
        let count = cfg.stream_count();
        let mut streams = Vec::with_capacity(count);
        for index in 0..count {
            let sock = open_stream(sa, my_rank, peer, secret, cfg, index as u32, count as u32)
                .map_err(|why| {
                    cerr(if count == 1 {
                        why
                    } else {
                        format!("stream {index} of {count}: {why}")
                    })
                })?;
            streams.push(OutStream {
                sock,
                queue: VecDeque::new(),
                owed: None,
            });
        }
        Ok(Self {
            peer,
            streams,
            next_data: 0,
            max_queued: cfg.max_queued,
            caps: cfg.caps(),
            failed: None,
            last_probe: Instant::now(),
        })
    }

    /// The peer's rank.
    pub fn peer(&self) -> u32 {
        self.peer
    }

    /// What this transport offers (limits the payload of one [`try_send`](Self::try_send)).
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Number of streams.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Offers one message: `hdr` and a payload of at most [`Caps::max_frame`] bytes. Returns
    /// `Ok(true)` when the transport took all of it (written now as far as the socket allows,
    /// the rest queued for [`flush`](Self::flush)), `Ok(false)` when it took nothing because the
    /// queue is full (back-pressure: call `flush`, progress, and offer it again). Messages of
    /// every kind but [`ProtoKind::Data`] go on stream 0 and so keep their order; data chunks
    /// go round-robin over the streams with room.
    pub fn try_send(&mut self, hdr: &Header, payload: &[u8]) -> Result<bool, TransportError> {
        self.try_send_parts(hdr, &[payload])
    }

    /// [`try_send`](Self::try_send) of a payload in up to three pieces, written as one frame
    /// without joining them first.
    pub fn try_send_parts(
        &mut self,
        hdr: &Header,
        parts: &[&[u8]],
    ) -> Result<bool, TransportError> {
        assert!(parts.len() <= 3, "at most three payload pieces");
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if let Some(e) = &self.failed {
            return Err(replay(e));
        }
        if len > self.caps.max_frame {
            return Err(TransportError::Io {
                what: "sending over TCP: payload larger than Caps::max_frame (a bug in the protocol layer)",
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} bytes to rank {}, limit {}",
                        len, self.peer, self.caps.max_frame
                    ),
                ),
            });
        }
        let total = FRAME_HEADER_LEN + len;
        let picked = if hdr.kind == ProtoKind::Data {
            self.pick_data_stream(total)
        } else {
            self.room(0, total).map(|ok| ok.then_some(0))
        };
        let idx = match picked {
            Ok(Some(i)) => i,
            Ok(None) => return Ok(false),
            Err(e) => return Err(self.fail(e)),
        };
        let fh = encode_header(hdr, len);
        if let Err(e) = self.streams[idx].send(&fh, parts) {
            return Err(self.fail(io_error(self.peer, e)));
        }
        Ok(true)
    }

    /// Sends rendezvous data for the receive `token`: `data` is the message from `offset` on.
    /// Writes one data frame of at most `chunk` bytes (prefix: token and offset), straight from
    /// `data`, and returns how many bytes of `data` the socket took (0: later). A frame the
    /// socket took only in part stays open on its stream: the caller must come back with the
    /// same `token` and the offset moved on by what was taken — the next call for that pair
    /// writes the rest of the frame, and nothing else goes on that stream meanwhile. So the
    /// caller's bytes are never copied into the queue.
    pub fn send_chunk(
        &mut self,
        token: u64,
        offset: u64,
        data: &[u8],
        chunk: usize,
    ) -> Result<usize, TransportError> {
        if let Some(e) = &self.failed {
            return Err(replay(e));
        }
        let open = self.streams.iter().position(|s| {
            s.owed
                .is_some_and(|o| o.token == token && o.offset == offset)
        });
        let r = match open {
            Some(i) => self.streams[i].continue_chunk(data),
            None => {
                let len = data
                    .len()
                    .min(chunk.max(1))
                    .min(self.caps.max_frame - CHUNK_PREFIX);
                let Some(i) = self.free_stream().map_err(|e| self.fail(e))? else {
                    return Ok(0);
                };
                let hdr = Header {
                    context: 0,
                    source: 0,
                    seq: 0,
                    tag: 0,
                    len: len as u64,
                    kind: ProtoKind::Data,
                    flags: 0,
                    coll_seq: 0,
                    signature: 0,
                };
                let fh = encode_header(&hdr, CHUNK_PREFIX + len);
                let prefix = encode_chunk_prefix(token, offset);
                self.next_data = (i + 1) % self.streams.len();
                self.streams[i].start_chunk(&fh, &prefix, &data[..len], token, offset)
            }
        };
        r.map_err(|e| self.fail(io_error(self.peer, e)))
    }

    /// A stream with nothing queued or owed, round-robin from the last one used.
    fn free_stream(&mut self) -> Result<Option<usize>, TransportError> {
        let n = self.streams.len();
        for k in 0..n {
            let i = (self.next_data + k) % n;
            let s = &mut self.streams[i];
            if s.owed.is_some() {
                continue;
            }
            if s.queue.is_empty() || s.flush().map_err(|e| io_error(self.peer, e))? {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// Writes queued bytes as far as the sockets take them; true when nothing is left queued.
    /// Call it on every progress pass. When idle it also checks, every 100 ms, that the peer is
    /// still there, so a sender with nothing to send learns of a dead peer too.
    pub fn flush(&mut self) -> Result<bool, TransportError> {
        if let Some(e) = &self.failed {
            return Err(replay(e));
        }
        let mut empty = true;
        let mut err = None;
        for s in &mut self.streams {
            match s.flush() {
                Ok(done) => empty &= done,
                Err(e) => {
                    err = Some(io_error(self.peer, e));
                    break;
                }
            }
        }
        if let Some(e) = err {
            return Err(self.fail(e));
        }
        if empty && self.last_probe.elapsed() >= PROBE_INTERVAL {
            self.last_probe = Instant::now();
            if let Err(e) = self.probe() {
                return Err(self.fail(e));
            }
        }
        Ok(empty)
    }

    /// Whether bytes wait in the queue; a sleeping rank then polls [`raw_fds`](Self::raw_fds)
    /// for writability.
    pub fn wants_write(&self) -> bool {
        self.streams
            .iter()
            .any(|s| !s.queue.is_empty() || s.owed.is_some())
    }

    /// Bytes not yet written to the sockets: queued, and owed to open data frames.
    pub fn queued(&self) -> usize {
        self.streams
            .iter()
            .map(|s| s.queue.len() + s.owed.map_or(0, |o| o.left))
            .sum()
    }

    /// The sockets, for `poll`/`epoll`: writable matters while [`wants_write`](Self::wants_write);
    /// readable or hang-up always means the peer went away (it never writes to them).
    pub fn raw_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.streams.iter().map(|s| s.sock.as_raw_fd())
    }

    /// Picks a stream with room for a data chunk of `total` bytes, round-robin.
    fn pick_data_stream(&mut self, total: usize) -> Result<Option<usize>, TransportError> {
        let n = self.streams.len();
        for k in 0..n {
            let i = (self.next_data + k) % n;
            if self.room(i, total)? {
                self.next_data = (i + 1) % n;
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// Whether stream `i` can take `total` more bytes, flushing it first if that could help.
    fn room(&mut self, i: usize, total: usize) -> Result<bool, TransportError> {
        let s = &mut self.streams[i];
        if s.fits(total, self.max_queued) {
            return Ok(true);
        }
        s.flush().map_err(|e| io_error(self.peer, e))?;
        Ok(s.fits(total, self.max_queued))
    }

    /// Looks at the receive side of each socket without blocking: the peer never writes, so
    /// anything there is end-of-file, an error, or a broken peer.
    fn probe(&self) -> Result<(), TransportError> {
        for s in &self.streams {
            match s.sock.peek(&mut [0u8; 1]) {
                Ok(0) => return Err(TransportError::PeerClosed { peer: self.peer }),
                Ok(_) => {
                    return Err(TransportError::Protocol {
                        peer: self.peer,
                        why: "it sent bytes on a connection that carries only our messages to it"
                            .into(),
                    });
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(io_error(self.peer, e)),
            }
        }
        Ok(())
    }

    /// Records the first failure (later calls repeat it) and shuts every stream, so the peer's
    /// receiver sees the end at once on all of them. Queued bytes are lost with the connection.
    fn fail(&mut self, e: TransportError) -> TransportError {
        for s in &self.streams {
            let _ = s.sock.shutdown(Shutdown::Both);
        }
        self.failed = Some(replay(&e));
        e
    }
}

/// Connects one stream and runs the client side of the handshake and hello; returns it
/// non-blocking and tuned, or why not.
fn open_stream(
    sa: SocketAddr,
    my_rank: u32,
    peer: u32,
    secret: &Secret,
    cfg: &TcpConfig,
    index: u32,
    count: u32,
) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT).map_err(|e| match e.kind() {
        io::ErrorKind::ConnectionRefused => {
            format!("{e}: nobody listens there (has rank {peer} exited?)")
        }
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            format!(
                "no answer within {CONNECT_TIMEOUT:?} (is the host up and the port not firewalled?)"
            )
        }
        _ => e.to_string(),
    })?;
    // The listener may be busy with other handshakes; wait longer for its challenge than the
    // handshake's own deadline allows, then run the handshake.
    s.set_read_timeout(Some(CONNECT_TIMEOUT))
        .map_err(|e| e.to_string())?;
    match s.peek(&mut [0u8; 1]) {
        Ok(0) => return Err("the listener closed the connection before the handshake".into()),
        Ok(_) => {}
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            return Err(format!(
                "the listener started no handshake within {CONNECT_TIMEOUT:?}: rank {peer} is alive but not serving connections (stuck?)"
            ));
        }
        Err(e) => return Err(format!("waiting for the handshake: {e}")),
    }
    auth::connect(&mut s, secret, AUTH_PURPOSE, my_rank).map_err(|e| {
        format!("{e} (do both ranks belong to the same job, with the same secret?)")
    })?;
    s.set_read_timeout(Some(HELLO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(HELLO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let hello = Hello {
        dest: peer,
        index,
        count,
        max_frame: cfg.max_frame() as u32,
    };
    wire::write_frame(&mut s, hello_kind::HELLO, &hello.encode())
        .map_err(|e| format!("sending the hello: {e}"))?;
    let (kind, reply) = wire::read_frame(&mut s, MAX_TEXT_LEN)
        .map_err(|e| format!("waiting for the listener's answer: {e}"))?;
    match kind {
        hello_kind::ACCEPTED => {}
        hello_kind::REFUSED => {
            return Err(format!(
                "refused by the listener: {}",
                String::from_utf8_lossy(&reply)
            ));
        }
        k => {
            return Err(format!(
                "the listener answered the hello with frame kind {k}"
            ));
        }
    }
    tune(&s, cfg).map_err(|e| format!("setting socket options: {e}"))?;
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    s.set_write_timeout(None).map_err(|e| e.to_string())?;
    s.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok(s)
}
