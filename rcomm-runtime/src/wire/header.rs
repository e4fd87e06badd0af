//! The data-plane message header: what every point-to-point message and collective step
//! carries in front of its payload, on every transport. Every message passes its decoder, so
//! it reads fixed offsets rather than going field by field.

use super::{Dec, WireError};

/// What a message is, at the protocol level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ProtoKind {
    /// Header followed by the whole payload.
    Eager = 1,
    /// Rendezvous request-to-send: announces a large message; the payload moves later.
    RndvRts = 2,
    /// Rendezvous clear-to-send: the receiver is ready.
    RndvCts = 3,
    /// Rendezvous completion.
    RndvFin = 4,
    /// Flow-control credits returned to a sender.
    Credit = 5,
    /// Internal control (heartbeats, revoke, ...).
    Control = 6,
    /// A chunk of a rendezvous message's payload; the payload starts with the receiver's
    /// token (u64) and the chunk's offset in the message (u64).
    Data = 7,
}

impl TryFrom<u8> for ProtoKind {
    type Error = WireError;
    fn try_from(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            1 => Self::Eager,
            2 => Self::RndvRts,
            3 => Self::RndvCts,
            4 => Self::RndvFin,
            5 => Self::Credit,
            6 => Self::Control,
            7 => Self::Data,
            kind => {
                return Err(WireError::UnknownKind {
                    what: "protocol",
                    kind,
                });
            }
        })
    }
}

/// The header every data-plane message carries. Its fields are fixed from the start so later
/// features (multi-rail ordering, checked collectives) need no format change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Communicator context id: messages of different communicators never match.
    pub context: u32,
    /// Sender's rank in the communicator.
    pub source: u32,
    /// Per (sender, receiver, context) sequence number: arrivals are matched in this order, so
    /// several streams or rails per peer keep MPI's non-overtaking order. Wraps.
    pub seq: u32,
    /// MPI tag (non-negative for users; negative values are reserved for rcomm's collectives).
    pub tag: i32,
    /// Length of the whole user message (not of this frame's payload: transports frame their
    /// payloads themselves, so an RTS can announce 2 GiB while carrying a few bytes).
    pub len: u64,
    /// Protocol kind.
    pub kind: ProtoKind,
    /// Protocol flags (meaning per kind).
    pub flags: u8,
    /// Collective sequence number on the communicator (0 for point-to-point).
    pub coll_seq: u32,
    /// Signature slot for checked mode: a hash of (op, dtype, count, root) of the collective.
    pub signature: u64,
}

impl Header {
    /// Encoded size in bytes.
    pub const LEN: usize = 40;

    /// Encodes into a fixed array.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut o = [0u8; Self::LEN];
        o[0..4].copy_from_slice(&self.context.to_le_bytes());
        o[4..8].copy_from_slice(&self.source.to_le_bytes());
        o[8..12].copy_from_slice(&self.seq.to_le_bytes());
        o[12..16].copy_from_slice(&self.tag.to_le_bytes());
        o[16..24].copy_from_slice(&self.len.to_le_bytes());
        o[24] = self.kind as u8;
        o[25] = self.flags;
        // o[26..28] reserved, zero.
        o[28..32].copy_from_slice(&self.coll_seq.to_le_bytes());
        o[32..40].copy_from_slice(&self.signature.to_le_bytes());
        o
    }

    /// Decodes from the front of `b`.
    #[inline]
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        // Every message's header passes here: fixed offsets from one bounds check, where the
        // field-by-field cursor costs a check and an advance per field. A short buffer takes
        // the cursor, whose error names the field that is missing.
        let Some(a) = b.first_chunk::<{ Self::LEN }>() else {
            return Self::decode_fields(b);
        };
        let u32_at = |i: usize| u32::from_le_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | u64::from(u32_at(i + 4)) << 32;
        let kind = ProtoKind::try_from(a[24])?;
        if a[26] != 0 || a[27] != 0 {
            return Err(Self::reserved_set());
        }
        Ok(Self {
            context: u32_at(0),
            source: u32_at(4),
            seq: u32_at(8),
            tag: u32_at(12) as i32,
            len: u64_at(16),
            kind,
            flags: a[25],
            coll_seq: u32_at(28),
            signature: u64_at(32),
        })
    }

    #[cold]
    fn reserved_set() -> WireError {
        WireError::Invalid {
            what: "header",
            why: "reserved bits set".into(),
        }
    }

    /// The field-by-field decoder: what [`decode`](Self::decode) does where fewer than
    /// [`LEN`](Self::LEN) bytes are given (and, in the tests, its reference).
    #[cold]
    pub(super) fn decode_fields(b: &[u8]) -> Result<Self, WireError> {
        let mut d = Dec::new(b);
        let context = d.u32("context")?;
        let source = d.u32("source")?;
        let seq = d.u32("seq")?;
        let tag = d.i32("tag")?;
        let len = d.u64("len")?;
        let kind = ProtoKind::try_from(d.u8("kind")?)?;
        let flags = d.u8("flags")?;
        let reserved = d.u16("reserved")?;
        if reserved != 0 {
            return Err(Self::reserved_set());
        }
        let coll_seq = d.u32("coll_seq")?;
        let signature = d.u64("signature")?;
        Ok(Self {
            context,
            source,
            seq,
            tag,
            len,
            kind,
            flags,
            coll_seq,
            signature,
        })
    }
}
