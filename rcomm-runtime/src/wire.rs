//! Every byte format rcomm speaks on a socket: frames, the bootstrap (KVS) protocol, the
//! authentication handshake, address records and the data-plane message header.
//!
//! Rules, because every listener faces untrusted bytes: frames are versioned and length-limited,
//! the length is checked *before* anything is allocated, and every decoder returns a
//! [`WireError`] on any input — it never panics and never allocates more than the frame limit.
//! All integers are little-endian.

use crate::identity::PeerInfo;
use std::io::{self, Read, Write};

/// Two bytes every frame starts with; a peer speaking anything else is dropped at once.
pub const MAGIC: [u8; 2] = *b"RC";
/// Version of the frame layout and of every message in this module. Bumped on any change.
pub const WIRE_VERSION: u8 = 1;
/// Bytes of the frame header: magic (2), version (1), kind (1), payload length (4).
pub const FRAME_HEADER_LEN: usize = 8;
/// Largest control frame payload. Address records and KVS values are small; a peer announcing
/// more is lying or broken, and must not make us allocate.
pub const MAX_FRAME_PAYLOAD: usize = 1 << 20;
/// Longest key accepted by the KVS.
pub const MAX_KEY_LEN: usize = 256;
/// Longest free-text string (error messages, hostnames) accepted in a frame.
pub const MAX_TEXT_LEN: usize = 4096;
/// Most protocol-relevant settings a [`PeerInfo`] may carry.
pub const MAX_SETTINGS: usize = 64;
/// Most endpoint addresses an [`AddrRecord`] may carry.
pub const MAX_ENDPOINTS: usize = 16;

/// Why bytes could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// The first bytes are not rcomm's magic: the peer is not an rcomm process.
    #[error("bad magic {0:02x?}: the peer does not speak the rcomm protocol")]
    BadMagic([u8; 2]),
    /// The peer speaks another version of the protocol.
    #[error(
        "wire version {got} but this rcomm speaks version {WIRE_VERSION}: mixed rcomm builds in one job?"
    )]
    Version {
        /// Version found in the frame.
        got: u8,
    },
    /// The frame announces more payload than allowed.
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    TooLong {
        /// Announced length.
        len: usize,
        /// Limit in force.
        limit: usize,
    },
    /// The input ended inside a field.
    #[error("truncated: needed {needed} more bytes for {what}")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// How many bytes were missing.
        needed: usize,
    },
    /// A kind byte names no known message.
    #[error("unknown {what} kind {kind}")]
    UnknownKind {
        /// Which enumeration.
        what: &'static str,
        /// The byte found.
        kind: u8,
    },
    /// A field holds a value outside its range.
    #[error("invalid {what}: {why}")]
    Invalid {
        /// The field.
        what: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// Bytes were left over after the message ended.
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
}

/// An error reading or writing frames on a stream.
#[derive(Debug, thiserror::Error)]
pub enum FrameIoError {
    /// The socket failed (includes timeouts and the peer closing mid-frame).
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// The peer sent bytes that are not a valid frame.
    #[error("protocol: {0}")]
    Wire(#[from] WireError),
    /// The peer closed the connection cleanly between frames.
    #[error("connection closed by peer")]
    Closed,
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Message kind; meaning depends on the protocol using the frame.
    pub kind: u8,
    /// Payload bytes following the header.
    pub len: usize,
}

/// Checks and decodes a frame header, enforcing `limit` on the announced payload length.
pub fn decode_frame_header(
    b: &[u8; FRAME_HEADER_LEN],
    limit: usize,
) -> Result<FrameHeader, WireError> {
    if b[0..2] != MAGIC {
        return Err(WireError::BadMagic([b[0], b[1]]));
    }
    if b[2] != WIRE_VERSION {
        return Err(WireError::Version { got: b[2] });
    }
    let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
    if len > limit {
        return Err(WireError::TooLong { len, limit });
    }
    Ok(FrameHeader { kind: b[3], len })
}

/// Encodes one frame (header and payload) into a new buffer.
pub fn encode_frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    debug_assert!(payload.len() <= MAX_FRAME_PAYLOAD);
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.push(WIRE_VERSION);
    out.push(kind);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// A frame decoded in place: header, payload, bytes consumed.
pub type DecodedFrame<'a> = (FrameHeader, &'a [u8], usize);

/// Decodes one frame from the front of `buf`: `Ok(None)` if more bytes are needed, otherwise the
/// header, the payload and the number of bytes consumed.
pub fn decode_frame(buf: &[u8], limit: usize) -> Result<Option<DecodedFrame<'_>>, WireError> {
    let Some(hdr) = buf.first_chunk::<FRAME_HEADER_LEN>() else {
        // Reject a wrong magic as soon as it is visible, so garbage is dropped without waiting.
        if !buf.is_empty() && buf[0] != MAGIC[0] || buf.len() >= 2 && buf[1] != MAGIC[1] {
            return Err(WireError::BadMagic([buf[0], *buf.get(1).unwrap_or(&0)]));
        }
        return Ok(None);
    };
    let h = decode_frame_header(hdr, limit)?;
    let end = FRAME_HEADER_LEN + h.len;
    if buf.len() < end {
        return Ok(None);
    }
    Ok(Some((h, &buf[FRAME_HEADER_LEN..end], end)))
}

/// Payload bytes [`read_frame`] allocates before any of them arrived; beyond it, the buffer grows
/// at most to twice what was received.
pub const READ_FRAME_STEP: usize = 64 << 10;

/// Reads one frame from a blocking stream. The length must pass `limit` before anything is
/// allocated, and even then the buffer grows with the bytes that actually arrive (at most
/// [`READ_FRAME_STEP`] ahead of them, or as many again as have come), so a peer that announces
/// a large frame and sends nothing costs little. A clean close before the first byte is
/// [`FrameIoError::Closed`].
pub fn read_frame<R: Read>(r: &mut R, limit: usize) -> Result<(u8, Vec<u8>), FrameIoError> {
    let mut hb = [0u8; FRAME_HEADER_LEN];
    let mut got = 0;
    while got < FRAME_HEADER_LEN {
        match r.read(&mut hb[got..]) {
            Ok(0) if got == 0 => return Err(FrameIoError::Closed),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let h = decode_frame_header(&hb, limit)?;
    let mut payload = Vec::new();
    while payload.len() < h.len {
        let have = payload.len();
        let step = (h.len - have).min(have.max(READ_FRAME_STEP));
        payload.reserve_exact(step);
        payload.resize(have + step, 0);
        r.read_exact(&mut payload[have..])?;
    }
    Ok((h.kind, payload))
}

/// Writes one frame to a blocking stream in a single write call where possible.
pub fn write_frame<W: Write>(w: &mut W, kind: u8, payload: &[u8]) -> Result<(), FrameIoError> {
    if payload.len() > MAX_FRAME_PAYLOAD {
        return Err(WireError::TooLong {
            len: payload.len(),
            limit: MAX_FRAME_PAYLOAD,
        }
        .into());
    }
    w.write_all(&encode_frame(kind, payload))?;
    w.flush()?;
    Ok(())
}

/// Appends little-endian fields to a buffer.
#[derive(Default, Debug)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    /// A fresh, empty encoder.
    pub fn new() -> Self {
        Self(Vec::new())
    }
    /// Appends one byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    /// Appends a u16.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends an i32.
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends raw bytes with no length prefix (fixed-size fields).
    pub fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    /// Appends a u32 length and the bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32);
        self.raw(b)
    }
    /// Appends a length-prefixed UTF-8 string.
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }
    /// The encoded bytes.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
}

/// Reads little-endian fields from a byte slice; every read is bounds-checked.
#[derive(Debug)]
pub struct Dec<'a> {
    buf: &'a [u8],
}

impl<'a> Dec<'a> {
    /// Starts decoding `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }
    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    /// Takes `n` raw bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated {
                what,
                needed: n - self.buf.len(),
            });
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    /// Takes a fixed-size array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    /// Reads one byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }
    /// Reads a u16.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    /// Reads a u32.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    /// Reads an i32.
    pub fn i32(&mut self, what: &'static str) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    /// Reads a u64.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    /// Reads a u32-length-prefixed byte string of at most `max` bytes.
    pub fn bytes(&mut self, max: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(WireError::TooLong { len: n, limit: max });
        }
        self.take(n, what)
    }
    /// Reads a length-prefixed UTF-8 string of at most `max` bytes.
    pub fn str(&mut self, max: usize, what: &'static str) -> Result<String, WireError> {
        let b = self.bytes(max, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| WireError::Invalid {
            what,
            why: "not UTF-8".into(),
        })
    }
    /// Fails unless every byte was consumed.
    pub fn end(&self) -> Result<(), WireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing(self.buf.len()))
        }
    }
}

// PMI-1 / PMI-2 text on `PMI_FD` (hydra, Slurm).
pub mod pmi;

// ---------------------------------------------------------------------------------------------
// Authentication handshake (see `auth`): three frames, whatever the listener.

/// Frame kinds of the authentication handshake. They are distinct from every protocol's kinds
/// so a peer that skips the handshake is refused on its first frame.
pub mod auth_kind {
    /// Server → client: server nonce.
    pub const CHALLENGE: u8 = 0xA1;
    /// Client → server: client id, client nonce, client MAC.
    pub const RESPONSE: u8 = 0xA2;
    /// Server → client: server MAC.
    pub const PROOF: u8 = 0xA3;
}

/// Bytes of a handshake nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a handshake MAC (HMAC-SHA-256).
pub const MAC_LEN: usize = 32;

/// The client's answer to a challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthResponse {
    /// Who the client says it is (a rank, or `u32::MAX` for a launcher tool); covered by the MAC.
    pub client_id: u32,
    /// The client's own challenge to the server.
    pub nonce: [u8; NONCE_LEN],
    /// HMAC proving the client knows the secret.
    pub mac: [u8; MAC_LEN],
}

impl AuthResponse {
    /// Encodes the payload.
    pub fn encode(&self) -> Vec<u8> {
        Enc::new()
            .u32(self.client_id)
            .raw(&self.nonce)
            .raw(&self.mac)
            .finish()
    }
    /// Decodes the payload.
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut d = Dec::new(b);
        let r = Self {
            client_id: d.u32("client id")?,
            nonce: d.array("nonce")?,
            mac: d.array("mac")?,
        };
        d.end()?;
        Ok(r)
    }
}

// ---------------------------------------------------------------------------------------------
// Bootstrap key-value store protocol.

/// Frame kinds of KVS requests (client → server).
mod kvs_req {
    pub const PUT: u8 = 1;
    pub const GET: u8 = 2;
    pub const FENCE: u8 = 3;
    pub const ABORT: u8 = 4;
    pub const FINALIZE: u8 = 5;
    pub const HEARTBEAT: u8 = 6;
    pub const AGREE: u8 = 7;
    pub const FLIGHT_DUMP: u8 = 10;
}
/// Frame kinds of KVS replies and notices (server → client).
mod kvs_rep {
    pub const OK: u8 = 16;
    pub const VALUE: u8 = 17;
    pub const NOT_FOUND: u8 = 18;
    pub const FENCE_DONE: u8 = 19;
    pub const ERROR: u8 = 20;
    pub const NOTICE_RANK_FAILED: u8 = 21;
    pub const NOTICE_ABORT: u8 = 22;
    pub const NOTICE_RANK_HUNG: u8 = 23;
    pub const AGREED: u8 = 24;
    pub const NOTICE_DUMP_REQUEST: u8 = 30;
}

/// Most members of one agreement (a communicator of that many ranks).
pub const MAX_AGREE_MEMBERS: u32 = 1 << 20;

/// A request from a rank to the key-value store served by the launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvsRequest {
    /// Store `val` under (sender's rank, `key`).
    Put {
        /// Key, at most [`MAX_KEY_LEN`] bytes.
        key: String,
        /// Value.
        val: Vec<u8>,
    },
    /// Read the value `rank` stored under `key`.
    Get {
        /// Rank that published the key.
        rank: u32,
        /// Key.
        key: String,
    },
    /// Wait until every rank has called fence; puts before it are visible to gets after it.
    Fence,
    /// Ask the launcher to end the job.
    Abort {
        /// Exit code the job should end with.
        code: i32,
        /// Why; shown to the user.
        msg: String,
    },
    /// The rank is finishing normally; its exit is not a failure.
    Finalize,
    /// The rank's flight recorder ([`FlightDump`] bytes), answering the launcher's
    /// [`KvsReply::DumpRequest`] `id`, or (`id` 0, `why` set) sent unasked by a rank whose
    /// watchdog fired, asking the launcher for a hang report. Never answered.
    FlightDump {
        /// The request answered; 0 when unasked.
        id: u64,
        /// Why a hang report is wanted (empty when answering).
        why: String,
        /// The encoded [`FlightDump`].
        dump: Vec<u8>,
    },
    /// The rank's process is alive (sent by its heartbeat thread; never answered).
    Heartbeat,
    /// Agree with `members` under `key` (answered once every member has asked or failed): the
    /// launcher is the source of truth about who failed. `data` (the same length from every
    /// member) is combined by bitwise AND.
    Agree {
        /// Names the agreement (communicator and round).
        key: String,
        /// World ranks taking part.
        members: Vec<u32>,
        /// This rank's contribution.
        data: Vec<u8>,
    },
}

impl KvsRequest {
    /// Encodes as one frame.
    pub fn to_frame(&self) -> Vec<u8> {
        let mut e = Enc::new();
        let kind = match self {
            Self::Put { key, val } => {
                e.str(key).bytes(val);
                kvs_req::PUT
            }
            Self::Get { rank, key } => {
                e.u32(*rank).str(key);
                kvs_req::GET
            }
            Self::Fence => kvs_req::FENCE,
            Self::Abort { code, msg } => {
                e.i32(*code).str(msg);
                kvs_req::ABORT
            }
            Self::Finalize => kvs_req::FINALIZE,
            Self::FlightDump { id, why, dump } => {
                e.u64(*id).str(why).bytes(dump);
                kvs_req::FLIGHT_DUMP
            }
            Self::Heartbeat => kvs_req::HEARTBEAT,
            Self::Agree { key, members, data } => {
                e.str(key).u32(members.len() as u32);
                for &m in members {
                    e.u32(m);
                }
                e.bytes(data);
                kvs_req::AGREE
            }
        };
        encode_frame(kind, &e.finish())
    }

    /// Decodes a request from a frame's kind and payload.
    pub fn decode(kind: u8, b: &[u8]) -> Result<Self, WireError> {
        let mut d = Dec::new(b);
        let r = match kind {
            kvs_req::PUT => Self::Put {
                key: d.str(MAX_KEY_LEN, "key")?,
                val: d.bytes(MAX_FRAME_PAYLOAD, "value")?.to_vec(),
            },
            kvs_req::GET => Self::Get {
                rank: d.u32("rank")?,
                key: d.str(MAX_KEY_LEN, "key")?,
            },
            kvs_req::FENCE => Self::Fence,
            kvs_req::ABORT => Self::Abort {
                code: d.i32("code")?,
                msg: d.str(MAX_TEXT_LEN, "message")?,
            },
            kvs_req::FINALIZE => Self::Finalize,
            kvs_req::FLIGHT_DUMP => Self::FlightDump {
                id: d.u64("dump id")?,
                why: d.str(MAX_TEXT_LEN, "why")?,
                dump: d.bytes(MAX_FRAME_PAYLOAD, "dump")?.to_vec(),
            },
            kvs_req::HEARTBEAT => Self::Heartbeat,
            kvs_req::AGREE => {
                let key = d.str(MAX_KEY_LEN, "key")?;
                let n = d.u32("members")?;
                if n > MAX_AGREE_MEMBERS {
                    return Err(WireError::Invalid {
                        what: "agreement members",
                        why: format!("{n} is more than {MAX_AGREE_MEMBERS}"),
                    });
                }
                let members = (0..n).map(|_| d.u32("member")).collect::<Result<_, _>>()?;
                Self::Agree {
                    key,
                    members,
                    data: d.bytes(MAX_TEXT_LEN, "data")?.to_vec(),
                }
            }
            k => {
                return Err(WireError::UnknownKind {
                    what: "KVS request",
                    kind: k,
                });
            }
        };
        d.end()?;
        Ok(r)
    }
}

/// A message from the key-value store to a rank: a reply to its last request, or an unsolicited
/// notice (which may arrive at any time and is never a reply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvsReply {
    /// A put or finalize succeeded.
    Ok,
    /// The value asked for.
    Value(Vec<u8>),
    /// No such key from that rank.
    NotFound,
    /// Every rank reached the fence.
    FenceDone,
    /// The request failed; the text says why.
    Error(String),
    /// Notice: a rank died or exited without finalizing.
    RankFailed {
        /// The failed rank.
        rank: u32,
        /// Its host as the launcher names it (empty where the store does not know it).
        host: String,
        /// How it ended, e.g. "killed by signal 9 (SIGKILL)".
        how: String,
    },
    /// An agreement completed: the members the launcher knows failed, and the AND of the
    /// survivors' data.
    Agreed {
        /// Failed members, ascending.
        failed: Vec<u32>,
        /// Combined data.
        data: Vec<u8>,
    },
    /// Notice: a rank stopped sending heartbeats (stopped, or stuck outside user code) and the
    /// launcher killed it.
    RankHung {
        /// The rank.
        rank: u32,
        /// How long it had been silent, in milliseconds.
        silent_ms: u64,
    },
    /// Notice: the job is being aborted.
    Abort {
        /// The rank that asked for the abort, or `u32::MAX` for the launcher.
        from: u32,
        /// Exit code.
        code: i32,
        /// Why.
        msg: String,
    },
    /// Notice: send your flight recorder ([`KvsRequest::FlightDump`] with this `id`).
    DumpRequest {
        /// Names the collection the dump belongs to.
        id: u64,
    },
}

impl KvsReply {
    /// True for unsolicited notices, which are not replies to a request.
    pub fn is_notice(&self) -> bool {
        matches!(
            self,
            Self::RankFailed { .. }
                | Self::RankHung { .. }
                | Self::Abort { .. }
                | Self::DumpRequest { .. }
        )
    }

    /// Encodes as one frame.
    pub fn to_frame(&self) -> Vec<u8> {
        let mut e = Enc::new();
        let kind = match self {
            Self::Ok => kvs_rep::OK,
            Self::Value(v) => {
                e.bytes(v);
                kvs_rep::VALUE
            }
            Self::NotFound => kvs_rep::NOT_FOUND,
            Self::FenceDone => kvs_rep::FENCE_DONE,
            Self::Error(m) => {
                e.str(m);
                kvs_rep::ERROR
            }
            Self::RankFailed { rank, host, how } => {
                e.u32(*rank).str(host).str(how);
                kvs_rep::NOTICE_RANK_FAILED
            }
            Self::Abort { from, code, msg } => {
                e.u32(*from).i32(*code).str(msg);
                kvs_rep::NOTICE_ABORT
            }
            Self::DumpRequest { id } => {
                e.u64(*id);
                kvs_rep::NOTICE_DUMP_REQUEST
            }
            Self::RankHung { rank, silent_ms } => {
                e.u32(*rank).u64(*silent_ms);
                kvs_rep::NOTICE_RANK_HUNG
            }
            Self::Agreed { failed, data } => {
                e.u32(failed.len() as u32);
                for &f in failed {
                    e.u32(f);
                }
                e.bytes(data);
                kvs_rep::AGREED
            }
        };
        encode_frame(kind, &e.finish())
    }

    /// Decodes a reply from a frame's kind and payload.
    pub fn decode(kind: u8, b: &[u8]) -> Result<Self, WireError> {
        let mut d = Dec::new(b);
        let r = match kind {
            kvs_rep::OK => Self::Ok,
            kvs_rep::VALUE => Self::Value(d.bytes(MAX_FRAME_PAYLOAD, "value")?.to_vec()),
            kvs_rep::NOT_FOUND => Self::NotFound,
            kvs_rep::FENCE_DONE => Self::FenceDone,
            kvs_rep::ERROR => Self::Error(d.str(MAX_TEXT_LEN, "error")?),
            kvs_rep::NOTICE_RANK_FAILED => Self::RankFailed {
                rank: d.u32("rank")?,
                host: d.str(MAX_TEXT_LEN, "host")?,
                how: d.str(MAX_TEXT_LEN, "how")?,
            },
            kvs_rep::NOTICE_ABORT => Self::Abort {
                from: d.u32("from")?,
                code: d.i32("code")?,
                msg: d.str(MAX_TEXT_LEN, "message")?,
            },
            kvs_rep::NOTICE_DUMP_REQUEST => Self::DumpRequest {
                id: d.u64("dump id")?,
            },
            kvs_rep::NOTICE_RANK_HUNG => Self::RankHung {
                rank: d.u32("rank")?,
                silent_ms: d.u64("silent")?,
            },
            kvs_rep::AGREED => {
                let n = d.u32("failed")?;
                if n > MAX_AGREE_MEMBERS {
                    return Err(WireError::Invalid {
                        what: "failed members",
                        why: format!("{n} is more than {MAX_AGREE_MEMBERS}"),
                    });
                }
                let failed = (0..n)
                    .map(|_| d.u32("failed rank"))
                    .collect::<Result<_, _>>()?;
                Self::Agreed {
                    failed,
                    data: d.bytes(MAX_TEXT_LEN, "data")?.to_vec(),
                }
            }
            k => {
                return Err(WireError::UnknownKind {
                    what: "KVS reply",
                    kind: k,
                });
            }
        };
        d.end()?;
        Ok(r)
    }
}

// ---------------------------------------------------------------------------------------------
// Address records.

/// How a peer can be reached by one transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointAddr {
    /// A TCP listener: `ip:port` text (IPv4 or IPv6).
    Tcp(String),
    /// The name of the rank's local-channel listener (an abstract Unix socket name).
    Local(String),
    /// An endpoint kind this build does not know; kept so newer peers stay compatible.
    Other {
        /// Kind byte.
        kind: u8,
        /// Opaque bytes.
        data: Vec<u8>,
    },
}

/// The one record each rank publishes at bootstrap: who it is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrRecord {
    /// Identity and settings.
    pub info: PeerInfo,
    /// Listeners, one per transport that accepts connections.
    pub endpoints: Vec<EndpointAddr>,
}

impl AddrRecord {
    /// Encodes the record (it travels as a KVS value).
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u8(WIRE_VERSION);
        encode_peer_info(&self.info, &mut e);
        e.u16(self.endpoints.len() as u16);
        for ep in &self.endpoints {
            match ep {
                EndpointAddr::Tcp(a) => e.u8(1).str(a),
                EndpointAddr::Local(n) => e.u8(2).str(n),
                EndpointAddr::Other { kind, data } => e.u8(*kind).bytes(data),
            };
        }
        e.finish()
    }

    /// Decodes a record.
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut d = Dec::new(b);
        let v = d.u8("record version")?;
        if v != WIRE_VERSION {
            return Err(WireError::Version { got: v });
        }
        let info = decode_peer_info(&mut d)?;
        let n = d.u16("endpoint count")? as usize;
        if n > MAX_ENDPOINTS {
            return Err(WireError::TooLong {
                len: n,
                limit: MAX_ENDPOINTS,
            });
        }
        let mut endpoints = Vec::with_capacity(n);
        for _ in 0..n {
            endpoints.push(match d.u8("endpoint kind")? {
                1 => EndpointAddr::Tcp(d.str(MAX_TEXT_LEN, "tcp address")?),
                2 => EndpointAddr::Local(d.str(MAX_TEXT_LEN, "local name")?),
                kind => EndpointAddr::Other {
                    kind,
                    data: d.bytes(MAX_TEXT_LEN, "endpoint")?.to_vec(),
                },
            });
        }
        d.end()?;
        Ok(Self { info, endpoints })
    }
}

// The identity's byte form lives here with every other format; `identity` stays free of the codec.
fn encode_peer_info(p: &PeerInfo, e: &mut Enc) {
    e.str(&p.hostname)
        .str(&p.boot_id)
        .u64(p.netns)
        .u32(p.uid)
        .u32(p.pid)
        .str(&p.version);
    e.u16(p.settings.len() as u16);
    for (k, v) in &p.settings {
        e.str(k).str(v);
    }
}

fn decode_peer_info(d: &mut Dec<'_>) -> Result<PeerInfo, WireError> {
    let hostname = d.str(MAX_TEXT_LEN, "hostname")?;
    let boot_id = d.str(MAX_TEXT_LEN, "boot id")?;
    let netns = d.u64("netns")?;
    let uid = d.u32("uid")?;
    let pid = d.u32("pid")?;
    let version = d.str(MAX_TEXT_LEN, "version")?;
    let n = d.u16("settings count")? as usize;
    if n > MAX_SETTINGS {
        return Err(WireError::TooLong {
            len: n,
            limit: MAX_SETTINGS,
        });
    }
    let mut settings = Vec::with_capacity(n);
    for _ in 0..n {
        settings.push((
            d.str(MAX_TEXT_LEN, "setting name")?,
            d.str(MAX_TEXT_LEN, "setting value")?,
        ));
    }
    Ok(PeerInfo {
        hostname,
        boot_id,
        netns,
        uid,
        pid,
        version,
        settings,
    })
}

// The data-plane message header.
mod header;
pub use header::{Header, ProtoKind};

// ---------------------------------------------------------------------------------------------
// Flight recorder dumps (see `flight`): what a rank sends the launcher for a hang report.

/// Most records a dump carries (the most recent ones): bounds the frame below
/// [`MAX_FRAME_PAYLOAD`] whatever `RCOMM_FR_SIZE` is.
pub const MAX_DUMP_RECORDS: usize = 8192;
/// Most distinct names (operations, types, algorithms, states) a dump's string table holds.
const MAX_DUMP_STRINGS: usize = 255;
/// Longest name in a dump's string table.
const MAX_DUMP_NAME: usize = 64;
/// Most communicator names a dump carries.
const MAX_DUMP_COMMS: usize = 4096;
/// Longest communicator name kept.
pub const MAX_COMM_NAME: usize = 256;

/// One recorded operation, as the launcher reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpRecord {
    /// The rank's operation number (1 = its first).
    pub id: u64,
    /// Context id of the communicator.
    pub ctx: u32,
    /// Lowest world rank of the communicator (with `ctx` and `comm_size` it tells apart the
    /// communicators of a split, which share a context id).
    pub comm_first: u32,
    /// Ranks in the communicator.
    pub comm_size: u32,
    /// Collective number on the communicator (1 = its first; equal on every member for the
    /// same call); 0 for point-to-point.
    pub seq: u64,
    /// Operation (`allreduce`, `recv`, …).
    pub op: String,
    /// Element type, if known.
    pub dtype: String,
    /// Reduction, if any.
    pub redop: String,
    /// Algorithm, if chosen.
    pub algo: String,
    /// Bytes of the vector (a collective's per-rank size, a message's length).
    pub bytes: u64,
    /// Root of a rooted collective or peer of a point-to-point operation (world rank);
    /// `u32::MAX` when none.
    pub peer: u32,
    /// `posted`, `waiting`, `done`, `failed`, `timed out`.
    pub state: String,
    /// Start, µs on the rank's monotonic clock; 0 for a fast operation that never waited
    /// (timing every collective would cost as much as recording it).
    pub start_us: u64,
    /// End (0 while it runs, and for a fast operation).
    pub end_us: u64,
}

/// A rank's flight recorder, sent to the launcher for a hang report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlightDump {
    /// World rank.
    pub rank: u32,
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The rank's monotonic clock at the dump, µs (ages are `now_us - start_us`).
    pub now_us: u64,
    /// Operations recorded since the process started (more than `records` once the ring
    /// wrapped).
    pub total: u64,
    /// Names given to communicators (`Communicator::set_name`), by context id.
    pub comms: Vec<(u32, String)>,
    /// The most recent operations, oldest first.
    pub records: Vec<DumpRecord>,
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl FlightDump {
    /// Encodes compactly: names once in a table, records referring to them by index.
    pub fn encode(&self) -> Vec<u8> {
        fn idx<'s>(table: &mut Vec<&'s str>, s: &'s str) -> u8 {
            let s = cut(s, MAX_DUMP_NAME);
            match table.iter().position(|t| *t == s) {
                Some(i) => i as u8,
                None if table.len() < MAX_DUMP_STRINGS => {
                    table.push(s);
                    (table.len() - 1) as u8
                }
                None => 0,
            }
        }
        // "" first: a name that does not fit the table reads as none.
        let mut table: Vec<&str> = vec![""];
        let recs = &self.records[self.records.len().saturating_sub(MAX_DUMP_RECORDS)..];
        let coded: Vec<[u8; 5]> = recs
            .iter()
            .map(|r| {
                [
                    idx(&mut table, &r.op),
                    idx(&mut table, &r.dtype),
                    idx(&mut table, &r.redop),
                    idx(&mut table, &r.algo),
                    idx(&mut table, &r.state),
                ]
            })
            .collect();
        let mut e = Enc::new();
        e.u32(self.rank)
            .str(cut(&self.host, MAX_TEXT_LEN))
            .u32(self.pid)
            .u64(self.now_us)
            .u64(self.total);
        let comms = &self.comms[..self.comms.len().min(MAX_DUMP_COMMS)];
        e.u32(comms.len() as u32);
        for (ctx, name) in comms {
            e.u32(*ctx).str(cut(name, MAX_COMM_NAME));
        }
        e.u8(table.len() as u8);
        for t in &table {
            e.str(t);
        }
        e.u32(recs.len() as u32);
        for (r, c) in recs.iter().zip(&coded) {
            e.u64(r.id)
                .u32(r.ctx)
                .u32(r.comm_first)
                .u32(r.comm_size)
                .u64(r.seq)
                .raw(c)
                .u64(r.bytes)
                .u32(r.peer)
                .u64(r.start_us)
                .u64(r.end_us);
        }
        e.finish()
    }

    /// Decodes a dump; any malformed input is an error (never a panic, never an allocation
    /// beyond the input's size times a small constant).
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut d = Dec::new(b);
        let rank = d.u32("rank")?;
        let host = d.str(MAX_TEXT_LEN, "host")?;
        let pid = d.u32("pid")?;
        let now_us = d.u64("now")?;
        let total = d.u64("total")?;
        let n = d.u32("comm count")? as usize;
        if n > MAX_DUMP_COMMS {
            return Err(WireError::TooLong {
                len: n,
                limit: MAX_DUMP_COMMS,
            });
        }
        let mut comms = Vec::with_capacity(n.min(d.remaining() / 8));
        for _ in 0..n {
            comms.push((d.u32("ctx")?, d.str(MAX_COMM_NAME, "comm name")?));
        }
        let nt = d.u8("string count")? as usize;
        // Each name takes at least its 4-byte length: a count the input cannot hold must not
        // reserve 255 `String`s.
        let mut table = Vec::with_capacity(nt.min(d.remaining() / 4));
        for _ in 0..nt {
            table.push(d.str(MAX_DUMP_NAME, "name")?);
        }
        let name = |i: u8| -> Result<String, WireError> {
            table
                .get(i as usize)
                .cloned()
                .ok_or_else(|| WireError::Invalid {
                    what: "name index",
                    why: format!("{i} but the table has {} names", table.len()),
                })
        };
        let nr = d.u32("record count")? as usize;
        if nr > MAX_DUMP_RECORDS {
            return Err(WireError::TooLong {
                len: nr,
                limit: MAX_DUMP_RECORDS,
            });
        }
        let mut records = Vec::with_capacity(nr.min(d.remaining() / 61));
        for _ in 0..nr {
            let (id, ctx, comm_first, comm_size, seq) = (
                d.u64("id")?,
                d.u32("ctx")?,
                d.u32("comm first")?,
                d.u32("comm size")?,
                d.u64("seq")?,
            );
            let [op, dtype, redop, algo, state] = d.array::<5>("names")?;
            records.push(DumpRecord {
                id,
                ctx,
                comm_first,
                comm_size,
                seq,
                op: name(op)?,
                dtype: name(dtype)?,
                redop: name(redop)?,
                algo: name(algo)?,
                state: name(state)?,
                bytes: d.u64("bytes")?,
                peer: d.u32("peer")?,
                start_us: d.u64("start")?,
                end_us: d.u64("end")?,
            });
        }
        d.end()?;
        Ok(Self {
            rank,
            host,
            pid,
            now_us,
            total,
            comms,
            records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::PeerInfo;
    use proptest::prelude::*;

    fn sample_info() -> PeerInfo {
        PeerInfo {
            hostname: "node1".into(),
            boot_id: "b0".into(),
            netns: 4026531840,
            uid: 0,
            pid: 42,
            version: "0.1.0".into(),
            settings: vec![("RCOMM_TRANSPORT".into(), "auto".into())],
        }
    }

    #[test]
    fn frames_round_trip_and_report_incomplete_input() {
        let f = encode_frame(7, b"hello");
        for cut in 0..f.len() {
            assert_eq!(decode_frame(&f[..cut], 100), Ok(None), "cut at {cut}");
        }
        let (h, p, used) = decode_frame(&f, 100).unwrap().unwrap();
        assert_eq!((h.kind, p, used), (7, &b"hello"[..], f.len()));
    }

    #[test]
    fn oversized_frame_is_refused_before_reading_its_payload() {
        let mut f = encode_frame(1, b"");
        f[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = read_frame(&mut &f[..], MAX_FRAME_PAYLOAD).unwrap_err();
        assert!(
            matches!(err, FrameIoError::Wire(WireError::TooLong { .. })),
            "{err}"
        );
    }

    #[test]
    fn garbage_is_refused_at_the_first_bytes() {
        assert!(matches!(
            decode_frame(b"GET / HTTP/1.1", 100),
            Err(WireError::BadMagic(_))
        ));
        assert!(matches!(
            decode_frame(b"G", 100),
            Err(WireError::BadMagic(_))
        ));
        let mut f = encode_frame(1, b"");
        f[2] = 99;
        assert_eq!(decode_frame(&f, 100), Err(WireError::Version { got: 99 }));
    }

    #[test]
    fn kvs_messages_round_trip() {
        let reqs = [
            KvsRequest::Put {
                key: "addr".into(),
                val: vec![1, 2, 3],
            },
            KvsRequest::Get {
                rank: 3,
                key: "addr".into(),
            },
            KvsRequest::Fence,
            KvsRequest::Abort {
                code: 3,
                msg: "bye".into(),
            },
            KvsRequest::Finalize,
        ];
        for r in reqs {
            let f = r.to_frame();
            let (h, p, _) = decode_frame(&f, MAX_FRAME_PAYLOAD).unwrap().unwrap();
            assert_eq!(KvsRequest::decode(h.kind, p).unwrap(), r);
        }
        let reps = [
            KvsReply::Ok,
            KvsReply::Value(vec![9; 100]),
            KvsReply::NotFound,
            KvsReply::FenceDone,
            KvsReply::Error("x".into()),
            KvsReply::RankFailed {
                rank: 1,
                host: "node1".into(),
                how: "killed".into(),
            },
            KvsReply::Abort {
                from: 2,
                code: 1,
                msg: "m".into(),
            },
        ];
        for r in reps {
            let f = r.to_frame();
            let (h, p, _) = decode_frame(&f, MAX_FRAME_PAYLOAD).unwrap().unwrap();
            assert_eq!(KvsReply::decode(h.kind, p).unwrap(), r);
        }
    }

    #[test]
    fn addr_record_round_trips() {
        let r = AddrRecord {
            info: sample_info(),
            endpoints: vec![
                EndpointAddr::Tcp("10.77.0.1:4000".into()),
                EndpointAddr::Local("rcomm-x-1".into()),
                EndpointAddr::Other {
                    kind: 9,
                    data: vec![1],
                },
            ],
        };
        assert_eq!(AddrRecord::decode(&r.encode()).unwrap(), r);
    }

    fn sample_dump(records: usize) -> FlightDump {
        FlightDump {
            rank: 5,
            host: "host2".into(),
            pid: 4242,
            now_us: 9_000_000,
            total: records as u64 + 7,
            comms: vec![(0, "world".into()), (4, "tp".into())],
            records: (0..records)
                .map(|i| DumpRecord {
                    id: i as u64 + 8,
                    ctx: 4,
                    comm_first: 4,
                    comm_size: 4,
                    seq: i as u64 + 1,
                    op: if i % 2 == 0 { "allreduce" } else { "bcast" }.into(),
                    dtype: "f32".into(),
                    redop: if i % 2 == 0 { "sum" } else { "" }.into(),
                    algo: "ring".into(),
                    bytes: 4096,
                    peer: if i % 2 == 0 { u32::MAX } else { 0 },
                    state: if i + 1 == records { "waiting" } else { "done" }.into(),
                    start_us: 1000 * i as u64,
                    end_us: if i + 1 == records {
                        0
                    } else {
                        1000 * i as u64 + 5
                    },
                })
                .collect(),
        }
    }

    #[test]
    fn flight_dumps_and_their_kvs_messages_round_trip_compactly() {
        let d = sample_dump(2048);
        let b = d.encode();
        assert_eq!(FlightDump::decode(&b).unwrap(), d);
        // Names travel once: about 60 bytes per record.
        assert!(b.len() < 2048 * 64, "{} bytes", b.len());
        // More records than a dump carries: the most recent ones go.
        let big = sample_dump(MAX_DUMP_RECORDS + 10);
        let back = FlightDump::decode(&big.encode()).unwrap();
        assert_eq!(back.records.len(), MAX_DUMP_RECORDS);
        assert_eq!(back.records.last(), big.records.last());
        assert!(big.encode().len() < MAX_FRAME_PAYLOAD);
        for cut in [0, 1, 10, b.len() / 2, b.len() - 1] {
            assert!(FlightDump::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let req = KvsRequest::FlightDump {
            id: 3,
            why: "allreduce #42 timed out".into(),
            dump: b,
        };
        let f = req.to_frame();
        let (h, p, _) = decode_frame(&f, MAX_FRAME_PAYLOAD).unwrap().unwrap();
        assert_eq!(KvsRequest::decode(h.kind, p).unwrap(), req);
        let rep = KvsReply::DumpRequest { id: 3 };
        assert!(rep.is_notice());
        let f = rep.to_frame();
        let (h, p, _) = decode_frame(&f, MAX_FRAME_PAYLOAD).unwrap().unwrap();
        assert_eq!(KvsReply::decode(h.kind, p).unwrap(), rep);
    }

    #[test]
    fn header_round_trips_and_is_fixed_size() {
        let h = Header {
            context: 1,
            source: 2,
            seq: u32::MAX,
            tag: -5,
            len: 1 << 40,
            kind: ProtoKind::RndvRts,
            flags: 3,
            coll_seq: 17,
            signature: 0xdead_beef,
        };
        let e = h.encode();
        assert_eq!(e.len(), Header::LEN);
        assert_eq!(Header::decode(&e).unwrap(), h);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn decoders_never_panic_on_random_bytes(kind in any::<u8>(), b in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_frame(&b, 256);
            let _ = KvsRequest::decode(kind, &b);
            let _ = KvsReply::decode(kind, &b);
            let _ = AddrRecord::decode(&b);
            let _ = Header::decode(&b);
            let _ = AuthResponse::decode(&b);
            let _ = FlightDump::decode(&b);
            let _ = read_frame(&mut &b[..], 256);
        }

        #[test]
        fn the_header_decoder_agrees_with_the_field_by_field_one(
            b in proptest::collection::vec(any::<u8>(), 0..48),
            kind in 0u8..9,
            reserved in prop_oneof![Just(0u16), any::<u16>()],
        ) {
            // Mostly valid kinds and clear reserved bits, so both paths get past their checks.
            let mut b = b;
            if b.len() > 27 {
                b[24] = kind;
                b[26..28].copy_from_slice(&reserved.to_le_bytes());
            }
            prop_assert_eq!(Header::decode(&b), Header::decode_fields(&b));
        }

        #[test]
        fn truncated_valid_messages_error_cleanly(cut in 0usize..200, key in "[a-z]{0,20}", val in proptest::collection::vec(any::<u8>(), 0..64)) {
            let rec = AddrRecord { info: sample_info(), endpoints: vec![EndpointAddr::Tcp(key.clone())] }.encode();
            let c = cut.min(rec.len());
            if c < rec.len() { prop_assert!(AddrRecord::decode(&rec[..c]).is_err()); }
            let f = KvsRequest::Put { key, val }.to_frame();
            let c = cut.min(f.len());
            if c < f.len() {
                prop_assert_eq!(decode_frame(&f[..c], MAX_FRAME_PAYLOAD), Ok(None));
                prop_assert!(KvsRequest::decode(1, &f[FRAME_HEADER_LEN.min(c)..c]).is_err());
            }
        }

        #[test]
        fn huge_length_prefixes_never_allocate(len in (MAX_FRAME_PAYLOAD as u32 + 1)..=u32::MAX) {
            // A Put whose value claims `len` bytes inside a small frame.
            let mut p = Enc::new();
            p.str("k").u32(len);
            prop_assert!(KvsRequest::decode(1, &p.finish()).is_err());
        }
    }
}
