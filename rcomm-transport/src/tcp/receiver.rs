//! The receiving side: the streams one peer opened to us, cut into messages.

use super::frame::FrameBuf;
use super::{MAX_STREAMS, TcpConfig, io_error, replay};
use crate::error::{Caps, TransportError};
use crate::wire::{Header, ProtoKind};
use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

/// Most bytes one [`TcpReceiver::progress`] call reads, so one busy peer cannot starve the
/// others a progress pass serves. What is left stays in the socket, which stays readable.
pub const READ_BUDGET: usize = 4 << 20;

/// One accepted stream and its frame buffer.
#[derive(Debug)]
struct InStream {
    sock: TcpStream,
    buf: FrameBuf,
    /// The peer closed this stream; its complete frames have been delivered.
    eof: bool,
}

/// The messages one peer sends us, read from the streams it opened to our
/// [`super::TcpAcceptor`]. Built empty, then given each [`super::Incoming`] stream of that peer
/// with [`add_stream`](Self::add_stream); messages flow as soon as stream 0 is there.
#[derive(Debug)]
pub struct TcpReceiver {
    peer: u32,
    max_frame: usize,
    caps: Caps,
    /// Indexed by stream index.
    streams: Vec<Option<InStream>>,
    /// Stream served first by the next `progress`, rotating for fairness.
    next: usize,
    failed: Option<TransportError>,
}

impl TcpReceiver {
    /// A receiver for rank `peer`'s messages, with the frame limit of `cfg` (which must match
    /// the acceptor's).
    pub fn new(peer: u32, cfg: &TcpConfig) -> Self {
        Self {
            peer,
            max_frame: cfg.max_frame(),
            caps: cfg.caps(),
            streams: Vec::new(),
            next: 0,
            failed: None,
        }
    }

    /// The peer's rank.
    pub fn peer(&self) -> u32 {
        self.peer
    }

    /// What this transport offers.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Number of streams added so far.
    pub fn stream_count(&self) -> usize {
        self.streams.iter().flatten().count()
    }

    /// Adds the peer's stream number `index` (from [`super::Incoming`]). Allocates its receive
    /// buffer (one largest frame). A second stream with the same index is a protocol error: the
    /// peer reconnected, so what it sent before may be lost.
    pub fn add_stream(&mut self, index: u32, stream: TcpStream) -> Result<(), TransportError> {
        let i = index as usize;
        if i >= MAX_STREAMS {
            return Err(TransportError::Protocol {
                peer: self.peer,
                why: format!("stream index {index} is out of range"),
            });
        }
        if self.streams.get(i).is_some_and(Option::is_some) {
            return Err(TransportError::Protocol {
                peer: self.peer,
                why: format!(
                    "it opened stream {index} a second time (did it reconnect after an error?)"
                ),
            });
        }
        stream
            .set_nonblocking(true)
            .map_err(|source| TransportError::Io {
                what: "making an accepted TCP stream non-blocking",
                source,
            })?;
        if self.streams.len() <= i {
            self.streams.resize_with(i + 1, || None);
        }
        self.streams[i] = Some(InStream {
            sock: stream,
            buf: FrameBuf::new(self.max_frame),
            eof: false,
        });
        Ok(())
    }

    /// Reads what has arrived, without blocking, and calls `on_msg` with each complete message
    /// in stream order (the payload is borrowed from the receive buffer: copy what you keep).
    /// Returns how many messages were delivered. Reads at most [`READ_BUDGET`] bytes per call;
    /// keeps partial frames for the next. End-of-file on every stream is
    /// [`TransportError::PeerClosed`], after every message that arrived before it (a stream that
    /// ends first is set aside while the others drain, since a sender's streams close one by
    /// one); a reset is `PeerClosed` at once, bytes that are not a valid frame
    /// [`TransportError::Protocol`], other socket errors [`TransportError::Link`].
    pub fn progress(
        &mut self,
        on_msg: &mut dyn FnMut(&Header, &[u8]),
    ) -> Result<usize, TransportError> {
        if let Some(e) = &self.failed {
            return Err(replay(e));
        }
        let n = self.streams.len();
        let mut msgs = 0;
        let mut budget = READ_BUDGET;
        let mut result = Ok(());
        for k in 0..n {
            let i = (self.next + k) % n;
            let Some(s) = self.streams[i].as_mut().filter(|s| !s.eof) else {
                continue;
            };
            result = pump(s, i, self.peer, &mut budget, on_msg, &mut msgs);
            if result.is_err() || budget == 0 {
                break;
            }
        }
        if n > 0 {
            self.next = (self.next + 1) % n;
        }
        if result.is_ok() && n > 0 && self.streams.iter().flatten().all(|s| s.eof) {
            result = Err(TransportError::PeerClosed { peer: self.peer });
        }
        match result {
            Ok(()) => Ok(msgs),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// The sockets, for `poll`/`epoll` (readable: call [`progress`](Self::progress)).
    pub fn raw_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.streams.iter().flatten().map(|s| s.sock.as_raw_fd())
    }

    /// Records the first failure (later calls repeat it) and drops the connection on every
    /// stream, so the peer's sender learns of it at once.
    fn fail(&mut self, e: TransportError) -> TransportError {
        for s in self.streams.iter().flatten() {
            let _ = s.sock.shutdown(Shutdown::Both);
        }
        self.failed = Some(replay(&e));
        e
    }
}

/// Delivers the complete frames of one stream, reading while the socket has bytes and the
/// budget lasts.
fn pump(
    s: &mut InStream,
    index: usize,
    peer: u32,
    budget: &mut usize,
    on_msg: &mut dyn FnMut(&Header, &[u8]),
    msgs: &mut usize,
) -> Result<(), TransportError> {
    loop {
        // Deliver before reading: bytes already out of the socket would not wake a poller again.
        deliver(s, index, peer, on_msg, msgs)?;
        if *budget == 0 {
            return Ok(());
        }
        let w = s.buf.window();
        if w.is_empty() {
            debug_assert!(false, "an incomplete frame always leaves room to read");
            return Ok(());
        }
        let want = w.len().min(*budget);
        match (&s.sock).read(&mut w[..want]) {
            Ok(0) => {
                s.eof = true;
                return Ok(());
            }
            Ok(got) => {
                s.buf.filled(got);
                *budget -= got;
                if got < want {
                    // The socket is most likely empty now: deliver and stop, saving a read that
                    // would only say so.
                    return deliver(s, index, peer, on_msg, msgs);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(peer, e)),
        }
    }
}

/// Hands every complete frame in the buffer of stream `index` to `on_msg`.
fn deliver(
    s: &mut InStream,
    index: usize,
    peer: u32,
    on_msg: &mut dyn FnMut(&Header, &[u8]),
    msgs: &mut usize,
) -> Result<(), TransportError> {
    let proto = |why: String| TransportError::Protocol {
        peer,
        why: format!("stream {index}: {why}"),
    };
    while let Some((hdr, range)) = s.buf.next().map_err(|e| proto(e.to_string()))? {
        if index != 0 && hdr.kind != ProtoKind::Data {
            // Ordered messages on another stream could overtake earlier ones unnoticed.
            return Err(proto(format!(
                "a {:?} message, but only data chunks may leave stream 0",
                hdr.kind
            )));
        }
        on_msg(&hdr, s.buf.bytes(range));
        *msgs += 1;
    }
    Ok(())
}
