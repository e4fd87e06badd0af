//! The receiving side: the streams one peer opened to us, cut into messages.

use super::frame::{BIG_FRAME, CHUNK_PREFIX, FrameBuf, decode_chunk_prefix};
use super::{FRAME_HEADER_LEN, MAX_STREAMS, TcpConfig, io_error, replay};
use crate::error::{Caps, TransportError};
use rcomm_runtime::wire::{Header, ProtoKind};
use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

/// Most bytes one [`TcpReceiver::progress`] call reads, so one busy peer cannot starve the
/// others a progress pass serves. What is left stays in the socket, which stays readable.
pub const READ_BUDGET: usize = 4 << 20;

/// Where a [`TcpReceiver`] hands what arrives.
///
/// Large rendezvous chunks are read straight from the socket into the receiver's memory: once
/// a data frame's header and prefix are in, the receiver asks [`place`](Self::place) where its
/// bytes go and reads them there, so they are copied once (by the kernel), not twice.
pub trait TcpSink {
    /// A whole frame: an ordered message, or a data chunk delivered whole (`hdr.kind` is
    /// `Data`; the payload starts with the chunk prefix, see
    /// [`decode_chunk_prefix`](super::decode_chunk_prefix)).
    fn frame(&mut self, hdr: &Header, payload: &[u8]);

    /// Where `len` bytes of the rendezvous data for `token`, at `offset` in the message,
    /// should be read to: a slice of exactly `len` bytes. `None`: read them and drop them (the
    /// receive is gone, or the chunk does not fit it and the sink has failed it).
    fn place(&mut self, token: u64, offset: u64, len: usize) -> Option<&mut [u8]>;

    /// `len` bytes were read into what [`place`](Self::place) returned for `(token, offset)`.
    fn placed(&mut self, token: u64, offset: u64, len: usize);

    /// Whether to read large chunks in place at all; when not, every frame goes to
    /// [`frame`](Self::frame) whole.
    fn in_place(&self) -> bool {
        true
    }
}

/// A closure taking whole frames, as a sink that never places data.
struct Frames<'a>(&'a mut dyn FnMut(&Header, &[u8]));

impl TcpSink for Frames<'_> {
    fn frame(&mut self, hdr: &Header, payload: &[u8]) {
        (self.0)(hdr, payload)
    }
    fn place(&mut self, _: u64, _: u64, _: usize) -> Option<&mut [u8]> {
        None
    }
    fn placed(&mut self, _: u64, _: u64, _: usize) {}
    fn in_place(&self) -> bool {
        false
    }
}

/// The rest of a data frame being read in place.
#[derive(Debug, Clone, Copy)]
struct InPlace {
    token: u64,
    /// Message offset of the next byte.
    offset: u64,
    /// Payload bytes still to read.
    left: usize,
}

/// One accepted stream and its frame buffer.
#[derive(Debug)]
struct InStream {
    sock: TcpStream,
    buf: FrameBuf,
    /// The peer closed this stream; its complete frames have been delivered.
    eof: bool,
    /// The frame whose payload is being read in place.
    in_place: Option<InPlace>,
    /// Read no further than the next frame's header and chunk prefix: the last frame was read
    /// in place, and the next is likely another chunk, whose payload a large read would pull
    /// through the buffer.
    header_next: bool,
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
            in_place: None,
            header_next: false,
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
        self.progress_into(&mut Frames(on_msg))
    }

    /// [`progress`](Self::progress) into a [`TcpSink`], which may take large rendezvous chunks
    /// in place. A chunk read in place counts as one message when its last byte is in.
    pub fn progress_into(&mut self, sink: &mut dyn TcpSink) -> Result<usize, TransportError> {
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
            result = pump(s, i, self.peer, &mut budget, sink, &mut msgs);
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
    sink: &mut dyn TcpSink,
    msgs: &mut usize,
) -> Result<(), TransportError> {
    loop {
        if s.in_place.is_some() {
            if read_in_place(s, peer, budget, sink, msgs)? {
                continue;
            }
            return Ok(());
        }
        // Deliver before reading: bytes already out of the socket would not wake a poller again.
        deliver(s, index, peer, sink, msgs)?;
        if s.in_place.is_some() {
            continue;
        }
        if *budget == 0 {
            return Ok(());
        }
        let held = s.buf.held_bytes();
        let w = s.buf.window();
        if w.is_empty() {
            debug_assert!(false, "an incomplete frame always leaves room to read");
            return Ok(());
        }
        let mut want = w.len().min(*budget);
        if s.header_next {
            want = want.min(
                (FRAME_HEADER_LEN + CHUNK_PREFIX)
                    .saturating_sub(held)
                    .max(1),
            );
        }
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
                    deliver(s, index, peer, sink, msgs)?;
                    if s.in_place.is_none() {
                        return Ok(());
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(peer, e)),
        }
    }
}

/// Reads the payload of the frame being taken in place, where the sink says (or into the
/// buffer, to drop). True to go on reading, false to stop (socket empty, budget spent,
/// end-of-file).
fn read_in_place(
    s: &mut InStream,
    peer: u32,
    budget: &mut usize,
    sink: &mut dyn TcpSink,
    msgs: &mut usize,
) -> Result<bool, TransportError> {
    let Some(mut d) = s.in_place else {
        return Ok(true);
    };
    if *budget == 0 {
        return Ok(false);
    }
    let want = d.left.min(*budget);
    let (r, placed) = match sink.place(d.token, d.offset, want) {
        Some(dst) => {
            let n = want.min(dst.len());
            ((&s.sock).read(&mut dst[..n]), true)
        }
        None => {
            let w = s.buf.scratch();
            let n = want.min(w.len());
            ((&s.sock).read(&mut w[..n]), false)
        }
    };
    match r {
        Ok(0) => {
            s.eof = true;
            Ok(false)
        }
        Ok(got) => {
            if placed {
                sink.placed(d.token, d.offset, got);
            }
            *budget -= got;
            d.offset += got as u64;
            d.left -= got;
            if d.left == 0 {
                s.in_place = None;
                s.header_next = true;
                *msgs += 1;
            } else {
                s.in_place = Some(d);
            }
            Ok(got == want)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
        Err(e) => Err(io_error(peer, e)),
    }
}

/// Hands every complete frame in the buffer of stream `index` to the sink; then, if the front
/// frame is a large data chunk only partly in, hands over the bytes that are and sets the
/// stream to read the rest in place.
fn deliver(
    s: &mut InStream,
    index: usize,
    peer: u32,
    sink: &mut dyn TcpSink,
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
        sink.frame(&hdr, s.buf.bytes(range));
        s.header_next = false;
        *msgs += 1;
    }
    if !sink.in_place() {
        return Ok(());
    }
    if let Some((_, len, range)) = s.buf.take_partial_data(BIG_FRAME) {
        let present = s.buf.bytes(range);
        let (token, offset) = decode_chunk_prefix(present).expect("prefix is in");
        let data = &present[CHUNK_PREFIX..];
        if !data.is_empty()
            && let Some(dst) = sink.place(token, offset, data.len())
        {
            let n = dst.len().min(data.len());
            dst[..n].copy_from_slice(&data[..n]);
            sink.placed(token, offset, n);
        }
        s.in_place = Some(InPlace {
            token,
            offset: offset + data.len() as u64,
            left: len - CHUNK_PREFIX - data.len(),
        });
    } else if s.buf.held_bytes() >= FRAME_HEADER_LEN + CHUNK_PREFIX {
        s.header_next = false;
    }
    Ok(())
}
