//! The data-frame format and the receive buffer that cuts a byte stream into frames.

use super::FRAME_HEADER_LEN;
use rcomm_runtime::wire::{Header, WireError};
use std::ops::Range;

/// Frames at least this large are read into the buffer only up to their end, so the next frame
/// starts at the front of the buffer instead of straddling its end and having to be moved.
/// Small frames are read in large batches instead, to save system calls.
pub(super) const BIG_FRAME: usize = 64 << 10;

/// Bytes of the prefix of a data frame's payload: the receive's token and the chunk's offset in
/// the message, both `u64` little endian.
pub const CHUNK_PREFIX: usize = 16;

/// Encodes the prefix of a data chunk.
pub(super) fn encode_chunk_prefix(token: u64, offset: u64) -> [u8; CHUNK_PREFIX] {
    let mut b = [0u8; CHUNK_PREFIX];
    b[..8].copy_from_slice(&token.to_le_bytes());
    b[8..].copy_from_slice(&offset.to_le_bytes());
    b
}

/// Decodes a data chunk's prefix from the front of its payload, if it is long enough.
pub fn decode_chunk_prefix(payload: &[u8]) -> Option<(u64, u64)> {
    let token = u64::from_le_bytes(payload.get(0..8)?.try_into().ok()?);
    let offset = u64::from_le_bytes(payload.get(8..16)?.try_into().ok()?);
    Some((token, offset))
}

/// Encodes the 44 bytes that precede a payload of `payload_len` bytes.
pub(super) fn encode_header(hdr: &Header, payload_len: usize) -> [u8; FRAME_HEADER_LEN] {
    let mut b = [0u8; FRAME_HEADER_LEN];
    b[..Header::LEN].copy_from_slice(&hdr.encode());
    b[Header::LEN..].copy_from_slice(&(payload_len as u32).to_le_bytes());
    b
}

/// Why bytes on a data stream are not a frame.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum FrameError {
    /// The length field exceeds the limit.
    TooLong {
        /// Announced payload length.
        len: usize,
        /// Limit in force.
        limit: usize,
    },
    /// The header does not decode.
    Header(WireError),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLong { len, limit } => write!(
                f,
                "a frame announces {len} payload bytes but the limit is {limit} (do eager limit and chunk size agree on every rank?)"
            ),
            Self::Header(e) => write!(f, "invalid message header: {e}"),
        }
    }
}

/// A fixed receive buffer holding at most one partial frame after the complete ones have been
/// taken out. Its size is one largest frame, so it never grows, whatever the peer sends.
#[derive(Debug)]
pub(super) struct FrameBuf {
    buf: Box<[u8]>,
    /// First byte not yet consumed.
    start: usize,
    /// End of the bytes read.
    end: usize,
    max_frame: usize,
}

impl FrameBuf {
    /// A buffer for frames with payloads of at most `max_frame` bytes.
    pub(super) fn new(max_frame: usize) -> Self {
        Self {
            buf: vec![0u8; max_frame + FRAME_HEADER_LEN].into_boxed_slice(),
            start: 0,
            end: 0,
            max_frame,
        }
    }

    /// Bytes held (read but not yet taken as frames).
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.end - self.start
    }

    /// The buffer's fixed size.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The payload length of the frame at the front, if its length field is in.
    fn front_len(&self) -> Option<usize> {
        if self.end - self.start < FRAME_HEADER_LEN {
            return None;
        }
        let l = &self.buf[self.start + Header::LEN..self.start + FRAME_HEADER_LEN];
        Some(u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize)
    }

    /// Where the next read should go. Call only after [`next`](Self::next) returned `Ok(None)`;
    /// the window is then never empty. Moves a partial frame to the front first when it could
    /// not otherwise be completed in place.
    pub(super) fn window(&mut self) -> &mut [u8] {
        if self.start == self.end {
            // Empty: start over at the front, so reads stay large and nothing needs moving.
            self.start = 0;
            self.end = 0;
        }
        let len = self.front_len();
        let need = FRAME_HEADER_LEN + len.map_or(0, |l| l.min(self.max_frame));
        if self.start + need > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let limit = match len {
            Some(l) if l >= BIG_FRAME => (self.start + need).max(self.end),
            _ => self.buf.len(),
        };
        &mut self.buf[self.end..limit]
    }

    /// Records that `n` bytes were read into the front of the last [`window`](Self::window).
    pub(super) fn filled(&mut self, n: usize) {
        debug_assert!(self.end + n <= self.buf.len());
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Takes the next complete frame: its header and where its payload lies (see
    /// [`bytes`](Self::bytes)); `Ok(None)` if more bytes are needed. Errors as soon as the
    /// length field or the header is wrong, without waiting for the payload.
    pub(super) fn next(&mut self) -> Result<Option<(Header, Range<usize>)>, FrameError> {
        let Some(len) = self.front_len() else {
            return Ok(None);
        };
        if len > self.max_frame {
            return Err(FrameError::TooLong {
                len,
                limit: self.max_frame,
            });
        }
        let hdr = Header::decode(&self.buf[self.start..self.start + Header::LEN])
            .map_err(FrameError::Header)?;
        let p = self.start + FRAME_HEADER_LEN;
        if self.end < p + len {
            return Ok(None);
        }
        self.start = p + len;
        Ok(Some((hdr, p..p + len)))
    }

    /// Takes the start of the front frame when it is a data frame of at least `min_len` payload
    /// bytes whose header and chunk prefix are in but whose payload is not complete: its header,
    /// its payload length, and where its bytes read so far lie (prefix first). The buffer is
    /// then empty; the caller reads the rest of the payload itself. Call after
    /// [`next`](Self::next) returned `Ok(None)`.
    pub(super) fn take_partial_data(
        &mut self,
        min_len: usize,
    ) -> Option<(Header, usize, Range<usize>)> {
        let len = self.front_len()?;
        let p = self.start + FRAME_HEADER_LEN;
        if len < min_len.max(CHUNK_PREFIX) || len > self.max_frame || self.end < p + CHUNK_PREFIX {
            return None;
        }
        if self.end >= p + len {
            return None;
        }
        let hdr = Header::decode(&self.buf[self.start..self.start + Header::LEN]).ok()?;
        if hdr.kind != rcomm_runtime::wire::ProtoKind::Data {
            return None;
        }
        self.start = self.end;
        Some((hdr, len, p..self.end))
    }

    /// The whole buffer, for bytes to be read and dropped. Only while it holds nothing.
    pub(super) fn scratch(&mut self) -> &mut [u8] {
        debug_assert_eq!(self.start, self.end, "scratch only while empty");
        self.start = 0;
        self.end = 0;
        &mut self.buf
    }

    /// Bytes held (read but not yet taken as frames).
    pub(super) fn held_bytes(&self) -> usize {
        self.end - self.start
    }

    /// The bytes of a payload returned by [`next`](Self::next) (valid until the next
    /// [`window`](Self::window)).
    pub(super) fn bytes(&self, r: Range<usize>) -> &[u8] {
        &self.buf[r]
    }
}

/// The fuzzing entry of the receive buffer (see [`crate::fuzzing`]): the first two bytes set
/// the frame limit (up to 64 KiB), the third seeds how the rest is cut into reads and whether
/// large data frames are taken in place, as the receiver does. Every frame that comes out must
/// respect the limit, and the buffer must never grow.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_frames(data: &[u8]) {
    let [a, b, c, rest @ ..] = data else {
        return;
    };
    let max = u16::from_le_bytes([*a, *b]) as usize;
    let mut fb = FrameBuf::new(max);
    let cap = fb.buf.len();
    let in_place = c & 1 == 1;
    let mut x = u32::from(*c) | 0x100;
    let mut pos = 0;
    loop {
        loop {
            match fb.next() {
                Ok(Some((h, r))) => {
                    assert!(r.len() <= max, "frame over the limit");
                    assert_eq!(Header::decode(&h.encode()), Ok(h));
                    if h.kind == rcomm_runtime::wire::ProtoKind::Data {
                        let _ = decode_chunk_prefix(fb.bytes(r));
                    }
                }
                Ok(None) => break,
                Err(_) => return, // the receiver ends the connection here
            }
        }
        if in_place && let Some((h, len, r)) = fb.take_partial_data(CHUNK_PREFIX) {
            assert_eq!(h.kind, rcomm_runtime::wire::ProtoKind::Data);
            assert!(len <= max && r.len() >= CHUNK_PREFIX && r.len() < len);
            assert!(decode_chunk_prefix(fb.bytes(r.clone())).is_some());
            // The receiver reads the rest of this payload past the buffer.
            pos = (pos + len - r.len()).min(rest.len());
            assert_eq!(fb.held_bytes(), 0);
        }
        if pos == rest.len() {
            return;
        }
        let w = fb.window();
        assert!(!w.is_empty(), "an incomplete frame always leaves room");
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let n = (1 + x as usize % 300).min(w.len()).min(rest.len() - pos);
        w[..n].copy_from_slice(&rest[pos..pos + n]);
        fb.filled(n);
        pos += n;
        assert!(
            fb.held_bytes() <= cap && fb.buf.len() == cap,
            "the buffer grew"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rcomm_runtime::wire::ProtoKind;

    fn hdr(seq: u32, kind: ProtoKind) -> Header {
        Header {
            context: 1,
            source: 2,
            seq,
            tag: 3,
            len: 4,
            kind,
            flags: 0,
            coll_seq: 0,
            signature: 0,
        }
    }

    /// Feeds `input` in pieces of the given sizes, taking frames as they complete.
    fn feed(
        fb: &mut FrameBuf,
        input: &[u8],
        pieces: &[usize],
    ) -> Result<Vec<(Header, Vec<u8>)>, FrameError> {
        let mut out = Vec::new();
        let mut pos = 0;
        let mut k = 0;
        loop {
            while let Some((h, r)) = fb.next()? {
                out.push((h, fb.bytes(r).to_vec()));
            }
            assert!(fb.held() <= fb.capacity());
            if pos == input.len() {
                return Ok(out);
            }
            let w = fb.window();
            assert!(
                !w.is_empty(),
                "window must not be empty while a frame is incomplete"
            );
            let want = pieces.get(k).copied().unwrap_or(usize::MAX).max(1);
            k += 1;
            let n = want.min(w.len()).min(input.len() - pos);
            w[..n].copy_from_slice(&input[pos..pos + n]);
            fb.filled(n);
            pos += n;
        }
    }

    #[test]
    fn tcp_frame_header_is_44_bytes_and_round_trips() {
        let h = hdr(9, ProtoKind::Eager);
        let mut wire = encode_header(&h, 3).to_vec();
        wire.extend_from_slice(b"abc");
        let mut fb = FrameBuf::new(100);
        let got = feed(&mut fb, &wire, &[1; 64]).unwrap();
        assert_eq!(got, vec![(h, b"abc".to_vec())]);
    }

    #[test]
    fn tcp_frame_with_oversized_length_is_refused_before_its_payload() {
        let mut wire = encode_header(&hdr(0, ProtoKind::Eager), 101).to_vec();
        wire.truncate(FRAME_HEADER_LEN);
        let mut fb = FrameBuf::new(100);
        assert_eq!(
            feed(&mut fb, &wire, &[]).unwrap_err(),
            FrameError::TooLong {
                len: 101,
                limit: 100
            }
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn tcp_frame_decoder_never_panics_or_grows_on_random_bytes(
            max in 0usize..300,
            input in proptest::collection::vec(any::<u8>(), 0..4000),
            pieces in proptest::collection::vec(1usize..500, 0..40),
        ) {
            let mut fb = FrameBuf::new(max);
            let cap = fb.capacity();
            let _ = feed(&mut fb, &input, &pieces);
            prop_assert_eq!(fb.capacity(), cap);
            prop_assert!(fb.held() <= cap);
        }

        #[test]
        fn tcp_frames_survive_any_split(
            sizes in proptest::collection::vec(0usize..300, 0..30),
            pieces in proptest::collection::vec(1usize..700, 0..60),
        ) {
            let mut wire = Vec::new();
            let mut want = Vec::new();
            for (i, &n) in sizes.iter().enumerate() {
                let h = hdr(i as u32, ProtoKind::Data);
                let p: Vec<u8> = (0..n).map(|j| (i * 7 + j) as u8).collect();
                wire.extend_from_slice(&encode_header(&h, n));
                wire.extend_from_slice(&p);
                want.push((h, p));
            }
            let mut fb = FrameBuf::new(300);
            prop_assert_eq!(feed(&mut fb, &wire, &pieces).unwrap(), want);
            prop_assert_eq!(fb.held(), 0);
        }
    }
}
