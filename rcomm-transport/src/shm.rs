//! Shared-memory rings: single-producer/single-consumer queues of variable-length messages in
//! a [`Segment`], usable across processes that map the same segment.
//!
//! Layout (offsets in bytes; the segment is page-aligned):
//!
//! ```text
//!   0  header line   magic, version, slot count, slot size, role claims   (written at init)
//! 128  producer line head: slot positions pushed so far                    (producer writes)
//! 256  consumer line tail: slot positions popped so far                    (consumer writes)
//! 384  slots[n]      64-byte lines
//! ```
//!
//! A message of `len` bytes occupies `ceil((8 + len) / 64)` consecutive slots: an 8-byte word
//! `seq << 24 | len` at the start of its first slot, then the bytes, contiguous across slot
//! boundaries, so the consumer can hand out one borrowed slice. A message that would run past
//! the end of the ring is preceded by a pad word (`len = PAD`) that sends the consumer back to
//! slot 0. Small messages (up to 56 bytes) take one cache line: header and payload travel
//! together, and a ping-pong moves one line each way.
//!
//! Protocol and memory ordering:
//! - The producer copies the message bytes, then stores the first slot's word with **Release**;
//!   the consumer loads the word with **Acquire** and reads the bytes only if the word carries
//!   the sequence number of its position (`seq = pos mod (2⁴⁰−1) + 1`, never 0, so neither a
//!   zeroed line nor a word left from an earlier lap matches). Release/Acquire on that word
//!   makes every byte of the message visible.
//! - Only a message's *first* slot holds a word; its other slots hold user bytes that could
//!   look like a word. So after consuming a message the consumer zeroes the first 8 bytes of
//!   its continuation slots: a position the consumer reaches always holds either a fresh word,
//!   a word of an earlier lap, or zero — never stale user bytes.
//! - The consumer publishes `tail` with **Release** after it has finished with a message; the
//!   producer reloads `tail` with **Acquire** before reusing slots, so the consumer's reads
//!   happen-before the producer's new writes.
//! - Each side keeps its own index privately and a cached copy of the other's. The consumer
//!   never reads `head` to pop (the word tells it), and the producer rereads `tail` only when
//!   its cached copy says the ring is full. In steady state a shared line moves between cores
//!   only when data does.
//! - The index lines are 128 bytes apart, not 64, because Intel's adjacent-line prefetcher pulls
//!   64-byte lines in pairs: at 64 bytes the two writers would still steal each other's line.
//! - `head` is published with Relaxed: nobody reads payload on its strength; it serves the
//!   backlog diagnostic and the sleep re-check.
//!
//! The atomics live in memory shared between processes; Rust's lock-free atomics are plain
//! machine instructions on the address, so they order accesses across processes exactly as
//! across threads.

use crate::local::Segment;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes of one slot: one cache line.
pub const SLOT_SIZE: usize = 64;
/// Payload bytes a one-slot message carries: the line minus the 8-byte word.
pub const SLOT_INLINE: usize = SLOT_SIZE - WORD;
/// Most slots a ring may have; more would only waste a peer's memory budget.
pub const MAX_SLOTS: usize = 1 << 24;

const WORD: usize = 8;
const MAGIC: u64 = u64::from_le_bytes(*b"rcommRNG");
const VERSION: u32 = 2;
const LEN_BITS: u32 = 24;
const LEN_MASK: u64 = (1 << LEN_BITS) - 1;
/// The length value of a pad word.
const PAD: u64 = LEN_MASK;
/// Sequence numbers cycle through 1..=SEQ_MOD.
const SEQ_MOD: u64 = (1 << 40) - 1;

/// Why a ring could not be set up or used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShmError {
    /// The segment or the slot count is unusable, or the segment holds no valid ring.
    #[error("shared-memory ring: {0}")]
    Invalid(String),
    /// A message larger than the ring can ever hold.
    #[error(
        "message of {len} bytes exceeds the ring's limit of {cap} bytes; larger messages need another path"
    )]
    TooLarge {
        /// Message length.
        len: usize,
        /// The ring's limit ([`Producer::max_msg`]).
        cap: usize,
    },
    /// Someone (in any process mapping the ring) already holds this end.
    #[error("the ring's {0} end is already taken; a ring has one producer and one consumer")]
    RoleTaken(&'static str),
}

/// Pads and aligns its content to 128 bytes (see the module notes on false sharing).
#[repr(C, align(128))]
struct Line<T>(T);

#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    slots: AtomicU32,
    slot_size: AtomicU32,
    producer_taken: AtomicU32,
    consumer_taken: AtomicU32,
}

#[repr(C)]
struct Control {
    header: Line<Header>,
    head: Line<AtomicU64>,
    tail: Line<AtomicU64>,
}

const _: () = assert!(size_of::<Control>() == 384);
const SLOTS_OFFSET: usize = size_of::<Control>();

fn word(pos: u64, len: u64) -> u64 {
    ((pos % SEQ_MOD + 1) << LEN_BITS) | len
}

fn word_seq_matches(w: u64, pos: u64) -> bool {
    w >> LEN_BITS == pos % SEQ_MOD + 1
}

fn slots_for(len: usize) -> u64 {
    (WORD + len).div_ceil(SLOT_SIZE) as u64
}

/// A view of a ring inside a segment; take its [`producer`](Ring::producer) or
/// [`consumer`](Ring::consumer) end.
#[derive(Clone)]
pub struct Ring {
    /// Keeps the mapping alive as long as any view of it.
    seg: Arc<Segment>,
    /// First slot; `n` slots of `SLOT_SIZE` bytes follow, inside `seg`.
    base: *mut u8,
    n: usize,
}

// SAFETY: a Ring is a view of shared memory whose every access goes through the atomics of
// `Control`, the slot words, or the producer/consumer protocol (one of each, claimed through the
// header), which orders the raw byte accesses; moving the view to another thread changes
// nothing about that, and the Arc keeps the mapping alive wherever the view goes.
unsafe impl Send for Ring {}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("slots", &self.n)
            .finish_non_exhaustive()
    }
}

impl Ring {
    /// Bytes of segment a ring of `slots` slots needs.
    pub const fn layout_size(slots: usize) -> usize {
        SLOTS_OFFSET.saturating_add(slots.saturating_mul(SLOT_SIZE))
    }

    fn view(seg: &Arc<Segment>, slots: usize) -> Self {
        debug_assert!(seg.len() >= Self::layout_size(slots));
        // SAFETY: the segment is at least `layout_size(slots)` long (checked by both callers), so
        // `base` points to `slots` whole lines inside it.
        let base = unsafe { seg.as_ptr().add(SLOTS_OFFSET) };
        Self {
            seg: seg.clone(),
            base,
            n: slots,
        }
    }

    fn ctl(&self) -> &Control {
        // SAFETY: the segment is page-aligned and longer than `Control` (checked when the view
        // was made), so `Control` lies inside it, suitably aligned. It holds only atomics, so
        // other processes writing it does not break the reference's rules, and the reference
        // borrows `self`, which keeps the mapping alive.
        unsafe { &*self.seg.as_ptr().cast::<Control>() }
    }

    /// The word at the start of slot `i` (taken modulo the ring size).
    fn word_at(&self, i: u64) -> &AtomicU64 {
        let i = (i as usize) & (self.n - 1);
        // SAFETY: slot i lies inside the mapping (i < n) and is 64-byte aligned, so its first 8
        // bytes form a valid, aligned AtomicU64; all concurrent accesses to a word are atomic.
        unsafe { &*self.base.add(i * SLOT_SIZE).cast::<AtomicU64>() }
    }

    /// Lays out an empty ring of `slots` slots (a power of two, at least 2) at the start of
    /// `seg`. Only the segment's creator calls this, before handing the segment to the peer.
    pub fn init(seg: &Arc<Segment>, slots: usize) -> Result<Self, ShmError> {
        if !slots.is_power_of_two() || !(2..=MAX_SLOTS).contains(&slots) {
            return Err(ShmError::Invalid(format!(
                "{slots} slots: need a power of two from 2 to {MAX_SLOTS}"
            )));
        }
        if seg.len() < Self::layout_size(slots) {
            return Err(ShmError::Invalid(format!(
                "segment of {} bytes is too small for {slots} slots ({} bytes)",
                seg.len(),
                Self::layout_size(slots)
            )));
        }
        let r = Self::view(seg, slots);
        let h = &r.ctl().header.0;
        // Invalidate first, so a re-initialised segment never looks valid half-way.
        h.magic.store(0, Ordering::Relaxed);
        h.version.store(VERSION, Ordering::Relaxed);
        h.slots.store(slots as u32, Ordering::Relaxed);
        h.slot_size.store(SLOT_SIZE as u32, Ordering::Relaxed);
        h.producer_taken.store(0, Ordering::Relaxed);
        h.consumer_taken.store(0, Ordering::Relaxed);
        r.ctl().head.0.store(0, Ordering::Relaxed);
        r.ctl().tail.0.store(0, Ordering::Relaxed);
        for i in 0..slots as u64 {
            r.word_at(i).store(0, Ordering::Relaxed);
        }
        // Release: whoever sees the magic (Acquire in `attach`) sees everything above.
        h.magic.store(MAGIC, Ordering::Release);
        Ok(r)
    }

    /// Opens the ring that [`init`](Self::init) laid out in `seg` (typically in another
    /// process), checking its header against the segment.
    pub fn attach(seg: &Arc<Segment>) -> Result<Self, ShmError> {
        if seg.len() < SLOTS_OFFSET {
            return Err(ShmError::Invalid(format!(
                "segment of {} bytes cannot hold a ring",
                seg.len()
            )));
        }
        let v = Self::view(seg, 0);
        let h = &v.ctl().header.0;
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(ShmError::Invalid(
                "segment holds no initialised ring (wrong segment, or attached before init)".into(),
            ));
        }
        let version = h.version.load(Ordering::Relaxed);
        if version != VERSION {
            return Err(ShmError::Invalid(format!(
                "ring layout version {version}, this rcomm knows {VERSION}: mixed rcomm builds in one job?"
            )));
        }
        let slot_size = h.slot_size.load(Ordering::Relaxed) as usize;
        let slots = h.slots.load(Ordering::Relaxed) as usize;
        if slot_size != SLOT_SIZE
            || !slots.is_power_of_two()
            || !(2..=MAX_SLOTS).contains(&slots)
            || seg.len() < Self::layout_size(slots)
        {
            return Err(ShmError::Invalid(format!(
                "corrupt ring header: {slots} slots of {slot_size} bytes in a {}-byte segment",
                seg.len()
            )));
        }
        Ok(Self::view(seg, slots))
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.n
    }

    /// Takes the producer end; fails while another producer (in any process) holds it.
    pub fn producer(&self) -> Result<Producer, ShmError> {
        claim(&self.ctl().header.0.producer_taken, "producer")?;
        // Acquire on the claim (above) orders these loads after a previous producer's release.
        let head = self.ctl().head.0.load(Ordering::Relaxed);
        let cached_tail = self.ctl().tail.0.load(Ordering::Acquire);
        Ok(Producer {
            ring: self.clone(),
            head,
            cached_tail,
        })
    }

    /// Takes the consumer end; fails while another consumer (in any process) holds it.
    pub fn consumer(&self) -> Result<Consumer, ShmError> {
        claim(&self.ctl().header.0.consumer_taken, "consumer")?;
        let tail = self.ctl().tail.0.load(Ordering::Relaxed);
        Ok(Consumer {
            ring: self.clone(),
            tail,
        })
    }
}

/// The claim words make "single producer, single consumer" a checked fact rather than a
/// promise, within a process and across processes that follow this code.
fn claim(flag: &AtomicU32, role: &'static str) -> Result<(), ShmError> {
    flag.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .map(|_| ())
        .map_err(|_| ShmError::RoleTaken(role))
}

/// The writing end of a ring.
pub struct Producer {
    ring: Ring,
    head: u64,
    cached_tail: u64,
}

// SAFETY: see `Ring`'s Send; the producer role is exclusive (claimed) wherever the value lives.
unsafe impl Send for Producer {}

impl Producer {
    /// Largest message this ring accepts: half the ring, so a message plus its pad always fits
    /// an empty ring.
    pub fn max_msg(&self) -> usize {
        (self.ring.n / 2 * SLOT_SIZE - WORD).min(PAD as usize - 1)
    }

    /// Whether a message of `len` bytes would fit right now.
    pub fn fits(&mut self, len: usize) -> bool {
        len <= self.max_msg() && self.room_for(len).is_some()
    }

    /// Slots needed now (pad + message) if they are free.
    fn room_for(&mut self, len: usize) -> Option<(u64, u64)> {
        let n = self.ring.n as u64;
        let need = slots_for(len);
        let off = self.head & (n - 1);
        let pad = if off + need > n { n - off } else { 0 };
        if self.head + pad + need - self.cached_tail > n {
            // Acquire pairs with the consumer's Release of `tail`: its reads of the slots we are
            // about to overwrite are finished.
            self.cached_tail = self.ring.ctl().tail.0.load(Ordering::Acquire);
            if self.head + pad + need - self.cached_tail > n {
                return None;
            }
        }
        Some((pad, need))
    }

    /// Copies `data` into the ring as one message; `Ok(false)` if the ring is full now.
    pub fn try_push(&mut self, data: &[u8]) -> Result<bool, ShmError> {
        self.try_push_parts(&[data])
    }

    /// Copies the concatenation of `parts` into the ring as one message (a header and a
    /// payload, without gluing them first); `Ok(false)` if the ring is full now.
    pub fn try_push_parts(&mut self, parts: &[&[u8]]) -> Result<bool, ShmError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.max_msg() {
            return Err(ShmError::TooLarge {
                len,
                cap: self.max_msg(),
            });
        }
        let Some((pad, _)) = self.room_for(len) else {
            return Ok(false);
        };
        if pad > 0 {
            // Release so the consumer, seeing the pad, also sees nothing stale (it reads nothing
            // else from these slots); ordering only matters for the word itself.
            self.ring
                .word_at(self.head)
                .store(word(self.head, PAD), Ordering::Release);
            self.head += pad;
        }
        let start = ((self.head as usize) & (self.ring.n - 1)) * SLOT_SIZE + WORD;
        let mut off = 0;
        for p in parts {
            // SAFETY: the message's slots [head, head + need) lie inside the ring without wrapping
            // (room_for placed a pad otherwise) and are released by the consumer (room_for
            // checked `tail`); we are the only producer (claimed), so nothing else touches these
            // bytes until we publish the word below.
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr(), self.ring.base.add(start + off), p.len())
            };
            off += p.len();
        }
        // Release: the bytes are visible to whoever Acquires this word.
        self.ring
            .word_at(self.head)
            .store(word(self.head, len as u64), Ordering::Release);
        self.head += slots_for(len);
        self.ring.ctl().head.0.store(self.head, Ordering::Relaxed);
        Ok(true)
    }

    /// Whether the consumer has taken every message pushed so far.
    pub fn is_drained(&self) -> bool {
        self.ring.ctl().tail.0.load(Ordering::Acquire) == self.head
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // Release: a later producer's Acquire claim sees our last `head` store.
        self.ring
            .ctl()
            .header
            .0
            .producer_taken
            .store(0, Ordering::Release);
    }
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("head", &self.head)
            .field("slots", &self.ring.slots())
            .finish()
    }
}

/// The reading end of a ring.
pub struct Consumer {
    ring: Ring,
    tail: u64,
}

// SAFETY: see `Ring`'s Send; the consumer role is exclusive (claimed) wherever the value lives.
unsafe impl Send for Consumer {}

impl Consumer {
    /// Whether a message is ready (one Acquire load of the next word, two after a pad).
    pub fn ready(&mut self) -> bool {
        self.next_word().is_some()
    }

    /// The published word of the next message, skipping a pad; `None` if nothing is published.
    /// The word is loaded once and then trusted: reloading could see a pad published between
    /// the loads and take it for a message.
    fn next_word(&mut self) -> Option<u64> {
        // Acquire pairs with the producer's Release of the word: what it published is visible.
        let w = self.ring.word_at(self.tail).load(Ordering::Acquire);
        if !word_seq_matches(w, self.tail) {
            return None;
        }
        if w & LEN_MASK != PAD {
            return Some(w);
        }
        let n = self.ring.n as u64;
        self.tail += n - (self.tail & (n - 1));
        let w = self.ring.word_at(self.tail).load(Ordering::Acquire);
        (word_seq_matches(w, self.tail) && w & LEN_MASK != PAD).then_some(w)
    }

    /// Hands the next message to `f` as a slice of the ring itself (no copy) and frees its slots
    /// when `f` returns; false if the ring is empty.
    pub fn try_pop<F: FnOnce(&[u8])>(&mut self, f: F) -> bool {
        self.try_pop_if(|b| {
            f(b);
            true
        })
    }

    /// Like [`try_pop`](Self::try_pop), but the message stays in the ring (to be seen again)
    /// when `f` returns false — for a consumer that must first fetch something the message
    /// refers to.
    pub fn try_pop_if<F: FnOnce(&[u8]) -> bool>(&mut self, f: F) -> bool {
        let Some(w) = self.next_word() else {
            return false;
        };
        let n = self.ring.n;
        let off = (self.tail as usize) & (n - 1);
        // A producer following the protocol never announces more than fits before the ring's
        // end; the clamp keeps a broken one from making us read past the mapping.
        let len = ((w & LEN_MASK) as usize).min((n - off) * SLOT_SIZE - WORD);
        // SAFETY: the word is published for our position, so the producer has finished these
        // bytes and will not touch them again until we publish a `tail` past them, after `f`.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.ring.base.add(off * SLOT_SIZE + WORD), len) };
        if !f(bytes) {
            return false;
        }
        let used = slots_for(len);
        for k in 1..used {
            // Continuation slots hold user bytes where a word could be; zero them so a later lap
            // never mistakes them for a published word (see the module notes).
            self.ring.word_at(self.tail + k).store(0, Ordering::Relaxed);
        }
        self.tail += used;
        // Release: our reads (and the zeroing) happen-before the producer reuses the slots.
        self.ring.ctl().tail.0.store(self.tail, Ordering::Release);
        true
    }

    /// Slots pushed but not yet popped, as far as this side can tell now (a diagnostic and the
    /// sleep re-check: the producer may push more at any moment).
    pub fn backlog(&self) -> u64 {
        self.ring
            .ctl()
            .head
            .0
            .load(Ordering::Relaxed)
            .wrapping_sub(self.tail)
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // Release: a later consumer's Acquire claim sees our last `tail` store.
        self.ring
            .ctl()
            .header
            .0
            .consumer_taken
            .store(0, Ordering::Release);
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("tail", &self.tail)
            .field("slots", &self.ring.slots())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::time::{Duration, Instant};

    fn segment(slots: usize) -> Arc<Segment> {
        Arc::new(
            Segment::create(
                &format!("rcomm-test-{}-ring", std::process::id()),
                Ring::layout_size(slots),
            )
            .unwrap(),
        )
    }

    fn pop(c: &mut Consumer) -> Option<Vec<u8>> {
        let mut out = None;
        c.try_pop(|b| out = Some(b.to_vec()));
        out
    }

    #[test]
    fn single_thread_push_pop_round_trips() {
        let seg = segment(8);
        let r = Ring::init(&seg, 8).unwrap();
        let (mut p, mut c) = (r.producer().unwrap(), r.consumer().unwrap());
        assert_eq!(pop(&mut c), None);
        for m in [&b""[..], b"a", &[7u8; SLOT_INLINE]] {
            assert!(p.try_push(m).unwrap());
            assert_eq!(c.backlog(), 1);
            assert_eq!(pop(&mut c).as_deref(), Some(m));
        }
        assert_eq!(pop(&mut c), None);
        // Multi-slot messages come back as one contiguous slice.
        let big: Vec<u8> = (0..p.max_msg()).map(|i| i as u8).collect();
        assert!(p.try_push_parts(&[&big[..10], &big[10..]]).unwrap());
        assert_eq!(pop(&mut c), Some(big));
        assert_eq!(p.max_msg(), 4 * SLOT_SIZE - 8);
        assert_eq!(
            p.try_push(&[0; 4 * SLOT_SIZE - 7]),
            Err(ShmError::TooLarge { len: 249, cap: 248 })
        );
    }

    #[test]
    fn full_ring_refuses_push_until_a_pop() {
        let seg = segment(4);
        let r = Ring::init(&seg, 4).unwrap();
        let (mut p, mut c) = (r.producer().unwrap(), r.consumer().unwrap());
        for i in 0..4u8 {
            assert!(p.try_push(&[i]).unwrap());
        }
        assert!(!p.try_push(b"x").unwrap());
        assert_eq!(pop(&mut c), Some(vec![0]));
        assert!(p.try_push(&[4]).unwrap());
        assert!(!p.try_push(b"x").unwrap());
        for i in 1..5u8 {
            assert_eq!(pop(&mut c), Some(vec![i]));
        }
        assert_eq!(pop(&mut c), None);
    }

    #[test]
    fn wraps_around_many_times_through_a_second_mapping() {
        // The consumer reads through an independent mapping of the same memfd, as another
        // process would.
        let seg = segment(4);
        let seg2 = Arc::new(Segment::from_fd(seg.fd().try_clone_to_owned().unwrap()).unwrap());
        let mut p = Ring::init(&seg, 4).unwrap().producer().unwrap();
        let mut c = Ring::attach(&seg2).unwrap().consumer().unwrap();
        for i in 0..10_000u32 {
            let len = (i as usize) % (SLOT_INLINE + 1);
            let m: Vec<u8> = (0..len).map(|j| (i as usize * 13 + j) as u8).collect();
            assert!(p.try_push(&m).unwrap());
            if i % 3 == 0 {
                assert!(p.try_push(b"extra").unwrap());
                assert_eq!(pop(&mut c).unwrap(), m);
                assert_eq!(pop(&mut c).unwrap(), b"extra");
            } else {
                assert_eq!(pop(&mut c).unwrap(), m);
            }
        }
    }

    #[test]
    fn attach_checks_the_header_and_init_checks_its_arguments() {
        let seg = segment(16);
        assert!(
            matches!(Ring::attach(&seg), Err(ShmError::Invalid(m)) if m.contains("no initialised ring"))
        );
        assert!(Ring::init(&seg, 3).is_err());
        assert!(Ring::init(&seg, 0).is_err());
        assert!(Ring::init(&seg, 32).is_err(), "does not fit");
        Ring::init(&seg, 16).unwrap();
        assert_eq!(Ring::attach(&seg).unwrap().slots(), 16);
        let view = Ring::view(&seg, 0);
        let h = &view.ctl().header.0;
        h.version.store(99, Ordering::Relaxed);
        assert!(
            matches!(Ring::attach(&seg), Err(ShmError::Invalid(m)) if m.contains("version 99"))
        );
        h.version.store(VERSION, Ordering::Relaxed);
        h.slots.store(1 << 20, Ordering::Relaxed);
        assert!(matches!(Ring::attach(&seg), Err(ShmError::Invalid(m)) if m.contains("corrupt")));
        let tiny = Arc::new(Segment::create("rcomm-test-tiny", 100).unwrap());
        assert!(Ring::attach(&tiny).is_err());
    }

    #[test]
    fn each_end_can_be_held_once_at_a_time() {
        let seg = segment(2);
        let r = Ring::init(&seg, 2).unwrap();
        let r2 = Ring::attach(&seg).unwrap();
        let mut p = r.producer().unwrap();
        assert_eq!(r2.producer().unwrap_err(), ShmError::RoleTaken("producer"));
        let c = r.consumer().unwrap();
        assert_eq!(r2.consumer().unwrap_err(), ShmError::RoleTaken("consumer"));
        assert!(p.try_push(b"kept").unwrap());
        drop((p, c));
        // A successor picks up where the previous holders stopped.
        let mut p = r2.producer().unwrap();
        let mut c = r2.consumer().unwrap();
        assert!(p.try_push(b"second").unwrap());
        assert_eq!(pop(&mut c).unwrap(), b"kept");
        assert_eq!(pop(&mut c).unwrap(), b"second");
    }

    #[test]
    fn two_threads_pass_200k_messages_in_order_and_intact() {
        const N: u64 = 200_000;
        let seg = segment(64);
        let r = Ring::init(&seg, 64).unwrap();
        let (mut p, mut c) = (r.producer().unwrap(), r.consumer().unwrap());
        // Sizes from one line to many, so messages span slots and wrap with pads.
        let msg = |i: u64, buf: &mut [u8; 1024]| -> usize {
            let len = 8 + (i.wrapping_mul(37) % 1000) as usize;
            buf[..8].copy_from_slice(&i.to_le_bytes());
            for (j, b) in buf[8..len].iter_mut().enumerate() {
                *b = (i as usize).wrapping_mul(31).wrapping_add(j) as u8;
            }
            len
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut buf = [0u8; 1024];
                for i in 0..N {
                    let len = msg(i, &mut buf);
                    let mut spins = 0u32;
                    while !p.try_push(&buf[..len]).unwrap() {
                        assert!(Instant::now() < deadline, "producer stuck at {i}");
                        spins += 1;
                        if spins % 64 == 0 {
                            std::thread::yield_now();
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                }
            });
            let mut want = [0u8; 1024];
            let mut i = 0;
            let mut spins = 0u32;
            while i < N {
                let len = msg(i, &mut want);
                if c.try_pop(|b| assert_eq!(b, &want[..len], "message {i}")) {
                    i += 1;
                } else {
                    assert!(Instant::now() < deadline, "consumer stuck at {i}");
                    spins += 1;
                    if spins % 64 == 0 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
            assert!(!c.try_pop(|_| panic!("nothing beyond N")));
        });
    }

    #[test]
    fn fill_then_drain_with_multi_slot_messages_and_pads() {
        let seg = segment(64);
        let r = Ring::init(&seg, 64).unwrap();
        let (mut p, mut c) = (r.producer().unwrap(), r.consumer().unwrap());
        let sizes: Vec<usize> = (0..2000u64)
            .map(|i| 8 + (i.wrapping_mul(37) % 1000) as usize)
            .collect();
        // single thread, alternating patterns
        let mut q = std::collections::VecDeque::new();
        let mut i = 0;
        let mut popped = 0;
        while popped < sizes.len() {
            if i < sizes.len() {
                let m: Vec<u8> = (0..sizes[i]).map(|k| (i * 31 + k) as u8).collect();
                if p.try_push(&m).unwrap() {
                    q.push_back(m);
                    i += 1;
                    continue;
                }
            }
            let want = q.pop_front().unwrap();
            let mut got = None;
            assert!(c.try_pop(|b| got = Some(b.to_vec())), "pop {popped}");
            assert_eq!(got.unwrap(), want, "msg {popped}");
            popped += 1;
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(Vec<u8>),
        Pop,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..=SLOT_INLINE).prop_map(Op::Push),
            // Multi-slot messages, some of which must wrap with a pad.
            proptest::collection::vec(any::<u8>(), 0..=8 * SLOT_SIZE).prop_map(Op::Push),
            // User bytes that look exactly like published words must never be taken for one.
            (0u64..64).prop_map(|p| Op::Push([word(p, 3).to_le_bytes(); 20].concat())),
            Just(Op::Pop)
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_fifo_that_refuses_only_when_full(log_slots in 1u32..6, ops in proptest::collection::vec(op(), 0..300)) {
            let slots = 1usize << log_slots;
            let seg = segment(slots);
            let r = Ring::init(&seg, slots).unwrap();
            let (mut p, mut c) = (r.producer().unwrap(), r.consumer().unwrap());
            let mut model = VecDeque::new();
            for op in ops {
                match op {
                    Op::Push(m) if m.len() > p.max_msg() => {
                        let too_large = matches!(p.try_push(&m), Err(ShmError::TooLarge { .. }));
                        prop_assert!(too_large);
                    }
                    Op::Push(m) => {
                        let pushed = p.try_push(&m).unwrap();
                        // An empty ring takes any message up to max_msg.
                        prop_assert!(pushed || !model.is_empty());
                        if pushed {
                            model.push_back(m);
                        }
                    }
                    Op::Pop => prop_assert_eq!(pop(&mut c), model.pop_front()),
                }
                prop_assert_eq!(c.backlog() == 0, model.is_empty());
            }
            while let Some(m) = model.pop_front() {
                prop_assert_eq!(pop(&mut c), Some(m));
            }
            prop_assert_eq!(pop(&mut c), None);
        }
    }
}
