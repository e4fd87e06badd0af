//! Shared-memory transport, first piece: a single-producer/single-consumer ring of 64-byte
//! slots in a [`Segment`], usable across processes that map the same segment.
//!
//! Layout (offsets in bytes; the segment is page-aligned):
//!
//! ```text
//!   0  header line   magic, version, slot count, slot size, role claims   (written at init)
//! 128  producer line head: positions pushed so far                         (producer writes)
//! 256  consumer line tail: positions popped so far                         (consumer writes)
//! 384  slots[n]      per slot: u64 word = seq << 8 | len, then 56 payload bytes
//! ```
//!
//! Protocol and memory ordering:
//! - The producer copies the payload into slot `head % n`, then stores the slot's word with
//!   **Release**; the consumer loads the word with **Acquire** and reads the payload only if the
//!   word carries the sequence it expects (`seq = position + 1`, so a word left from an earlier
//!   lap, or the zero of a fresh segment, never matches). Release/Acquire on the same word makes
//!   the payload writes happen-before the payload reads.
//! - The consumer publishes `tail` with **Release** after it has finished with a slot; the
//!   producer reloads `tail` with **Acquire** before reusing a slot, so the consumer's reads of
//!   the old payload happen-before the producer's new writes: slots are never read and written
//!   at once.
//! - Each side keeps its own index privately and a cached copy of the other's. The consumer
//!   needs no copy of `head` at all (the slot word tells it there is data, from the line it must
//!   read anyway), and the producer rereads `tail` only when its cached copy says the ring is
//!   full — once per lap at most while the consumer keeps up. So in steady state each shared
//!   line moves between cores only when data does.
//! - The index lines are 128 bytes apart, not 64, because Intel's adjacent-line prefetcher pulls
//!   64-byte lines in pairs: at 64 bytes the two writers would still steal each other's line.
//! - `head` is published with Relaxed: nobody reads payload on its strength; it is for the
//!   backlog diagnostic, and for the sleep/doorbell re-check the full transport adds.
//!
//! The atomics live in memory shared between processes; Rust's lock-free atomics are plain
//! machine instructions on the address, so they order accesses across processes exactly as
//! across threads.

use crate::local::Segment;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes of one slot: one cache line.
pub const SLOT_SIZE: usize = 64;
/// Payload bytes one slot carries inline: the line minus the 8-byte sequence/length word.
pub const SLOT_INLINE: usize = SLOT_SIZE - 8;
/// Most slots a ring may have; more would only waste a peer's memory budget.
pub const MAX_SLOTS: usize = 1 << 24;

const MAGIC: u64 = u64::from_le_bytes(*b"rcommRNG");
const VERSION: u32 = 1;
/// Sequence numbers keep 56 bits, the length byte the low 8.
const SEQ_MASK: u64 = (1 << 56) - 1;

/// Why a ring could not be set up or used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShmError {
    /// The segment or the slot count is unusable, or the segment holds no valid ring.
    #[error("shared-memory ring: {0}")]
    Invalid(String),
    /// A payload larger than one slot.
    #[error(
        "payload of {len} bytes does not fit a ring slot ({cap} bytes); larger messages need another path"
    )]
    TooLarge {
        /// Payload length.
        len: usize,
        /// Inline capacity ([`SLOT_INLINE`]).
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

#[repr(C, align(64))]
struct Slot {
    word: AtomicU64,
    data: UnsafeCell<[u8; SLOT_INLINE]>,
}

// SAFETY: `data` is accessed only through the unsafe blocks in `Producer::try_push` (by the one
// producer, on slots the consumer has released) and `Consumer::try_pop` (by the one consumer, on
// slots the producer has published), as argued in the module notes; `word` is atomic.
unsafe impl Sync for Slot {}

const _: () = assert!(size_of::<Slot>() == SLOT_SIZE);
const _: () = assert!(size_of::<Control>() == 384);
const SLOTS_OFFSET: usize = size_of::<Control>();

fn word(pos: u64, len: usize) -> u64 {
    ((pos.wrapping_add(1) & SEQ_MASK) << 8) | len as u64
}

fn word_seq_matches(w: u64, pos: u64) -> bool {
    w >> 8 == pos.wrapping_add(1) & SEQ_MASK
}

/// A view of a ring inside a segment; take its [`producer`](Ring::producer) or
/// [`consumer`](Ring::consumer) end.
#[derive(Clone, Copy)]
pub struct Ring<'a> {
    ctl: &'a Control,
    slots: &'a [Slot],
}

impl std::fmt::Debug for Ring<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Ring<'a> {
    /// Bytes of segment a ring of `slots` slots needs.
    pub const fn layout_size(slots: usize) -> usize {
        SLOTS_OFFSET.saturating_add(slots.saturating_mul(SLOT_SIZE))
    }

    fn view(seg: &'a Segment, slots: usize) -> Self {
        debug_assert!(seg.len() >= Self::layout_size(slots));
        // SAFETY: the segment is page-aligned and at least `layout_size(slots)` long (checked by
        // both callers), so `Control` and the slot array lie inside it, suitably aligned. Every
        // field reachable through these shared references is atomic or an UnsafeCell, so other
        // processes writing the memory does not break the references' rules. The references
        // borrow `seg`, so they cannot outlive the mapping.
        unsafe {
            let ctl = &*seg.as_ptr().cast::<Control>();
            let slots =
                std::slice::from_raw_parts(seg.as_ptr().add(SLOTS_OFFSET).cast::<Slot>(), slots);
            Self { ctl, slots }
        }
    }

    /// Lays out an empty ring of `slots` slots (a power of two) at the start of `seg`. Only the
    /// segment's creator calls this, before handing the segment to the peer.
    pub fn init(seg: &'a Segment, slots: usize) -> Result<Self, ShmError> {
        if !slots.is_power_of_two() || slots > MAX_SLOTS {
            return Err(ShmError::Invalid(format!(
                "{slots} slots: need a power of two up to {MAX_SLOTS}"
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
        let h = &r.ctl.header.0;
        // Invalidate first, so a re-initialised segment never looks valid half-way.
        h.magic.store(0, Ordering::Relaxed);
        h.version.store(VERSION, Ordering::Relaxed);
        h.slots.store(slots as u32, Ordering::Relaxed);
        h.slot_size.store(SLOT_SIZE as u32, Ordering::Relaxed);
        h.producer_taken.store(0, Ordering::Relaxed);
        h.consumer_taken.store(0, Ordering::Relaxed);
        r.ctl.head.0.store(0, Ordering::Relaxed);
        r.ctl.tail.0.store(0, Ordering::Relaxed);
        for s in r.slots {
            s.word.store(0, Ordering::Relaxed);
        }
        // Release: whoever sees the magic (Acquire in `attach`) sees everything above.
        h.magic.store(MAGIC, Ordering::Release);
        Ok(r)
    }

    /// Opens the ring that [`init`](Self::init) laid out in `seg` (typically in another
    /// process), checking its header against the segment.
    pub fn attach(seg: &'a Segment) -> Result<Self, ShmError> {
        if seg.len() < SLOTS_OFFSET {
            return Err(ShmError::Invalid(format!(
                "segment of {} bytes cannot hold a ring",
                seg.len()
            )));
        }
        let h = &Self::view(seg, 0).ctl.header.0;
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
            || slots > MAX_SLOTS
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
        self.slots.len()
    }

    /// Takes the producer end; fails while another producer (in any process) holds it.
    pub fn producer(&self) -> Result<Producer<'a>, ShmError> {
        claim(&self.ctl.header.0.producer_taken, "producer")?;
        // Acquire on the claim (above) orders these loads after a previous producer's release.
        let head = self.ctl.head.0.load(Ordering::Relaxed);
        let cached_tail = self.ctl.tail.0.load(Ordering::Acquire);
        Ok(Producer {
            ring: *self,
            head,
            cached_tail,
        })
    }

    /// Takes the consumer end; fails while another consumer (in any process) holds it.
    pub fn consumer(&self) -> Result<Consumer<'a>, ShmError> {
        claim(&self.ctl.header.0.consumer_taken, "consumer")?;
        let tail = self.ctl.tail.0.load(Ordering::Relaxed);
        Ok(Consumer { ring: *self, tail })
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
pub struct Producer<'a> {
    ring: Ring<'a>,
    head: u64,
    cached_tail: u64,
}

impl Producer<'_> {
    /// Copies `data` into the next slot; `Ok(false)` if the ring is full. Payloads longer than
    /// [`SLOT_INLINE`] are an error.
    pub fn try_push(&mut self, data: &[u8]) -> Result<bool, ShmError> {
        if data.len() > SLOT_INLINE {
            return Err(ShmError::TooLarge {
                len: data.len(),
                cap: SLOT_INLINE,
            });
        }
        let n = self.ring.slots.len() as u64;
        if self.head.wrapping_sub(self.cached_tail) >= n {
            // Acquire pairs with the consumer's Release of `tail`: its reads of the slot we are
            // about to overwrite are finished.
            self.cached_tail = self.ring.ctl.tail.0.load(Ordering::Acquire);
            if self.head.wrapping_sub(self.cached_tail) >= n {
                return Ok(false);
            }
        }
        let slot = &self.ring.slots[(self.head & (n - 1)) as usize];
        // SAFETY: we are the only producer (claimed), and the consumer released this slot (the
        // check above), so nothing else accesses its payload until we publish the word below.
        // `data` fits the 56-byte array.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), slot.data.get().cast::<u8>(), data.len())
        };
        // Release: the payload bytes are visible to whoever Acquires this word.
        slot.word
            .store(word(self.head, data.len()), Ordering::Release);
        self.head = self.head.wrapping_add(1);
        self.ring.ctl.head.0.store(self.head, Ordering::Relaxed);
        Ok(true)
    }
}

impl Drop for Producer<'_> {
    fn drop(&mut self) {
        // Release: a later producer's Acquire claim sees our last `head` store.
        self.ring
            .ctl
            .header
            .0
            .producer_taken
            .store(0, Ordering::Release);
    }
}

impl std::fmt::Debug for Producer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("head", &self.head)
            .field("slots", &self.ring.slots())
            .finish()
    }
}

/// The reading end of a ring.
pub struct Consumer<'a> {
    ring: Ring<'a>,
    tail: u64,
}

impl Consumer<'_> {
    /// Hands the next message to `f` as a slice of the slot itself (no copy) and frees the slot
    /// when `f` returns; false if the ring is empty.
    pub fn try_pop<F: FnOnce(&[u8])>(&mut self, f: F) -> bool {
        let n = self.ring.slots.len() as u64;
        let slot = &self.ring.slots[(self.tail & (n - 1)) as usize];
        // Acquire pairs with the producer's Release of this word: its payload is visible.
        let w = slot.word.load(Ordering::Acquire);
        if !word_seq_matches(w, self.tail) {
            return false;
        }
        // A producer following the protocol never writes more; the clamp keeps a broken one
        // from making us read past the slot.
        let len = ((w & 0xff) as usize).min(SLOT_INLINE);
        // SAFETY: the word is published for our position, so the producer has finished this
        // slot and will not touch it again until we publish a `tail` past it, after `f`.
        let bytes = unsafe { std::slice::from_raw_parts(slot.data.get().cast::<u8>(), len) };
        f(bytes);
        self.tail = self.tail.wrapping_add(1);
        // Release: our reads of the slot happen-before the producer reuses it.
        self.ring.ctl.tail.0.store(self.tail, Ordering::Release);
        true
    }

    /// Messages pushed but not yet popped, as far as this side can tell now (a diagnostic: the
    /// producer may push more at any moment).
    pub fn backlog(&self) -> u64 {
        self.ring
            .ctl
            .head
            .0
            .load(Ordering::Relaxed)
            .wrapping_sub(self.tail)
    }
}

impl Drop for Consumer<'_> {
    fn drop(&mut self) {
        // Release: a later consumer's Acquire claim sees our last `tail` store.
        self.ring
            .ctl
            .header
            .0
            .consumer_taken
            .store(0, Ordering::Release);
    }
}

impl std::fmt::Debug for Consumer<'_> {
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

    fn segment(slots: usize) -> Segment {
        Segment::create(
            &format!("rcomm-test-{}-ring", std::process::id()),
            Ring::layout_size(slots),
        )
        .unwrap()
    }

    fn pop(c: &mut Consumer<'_>) -> Option<Vec<u8>> {
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
        assert_eq!(
            p.try_push(&[0; SLOT_INLINE + 1]),
            Err(ShmError::TooLarge { len: 57, cap: 56 })
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
        let seg2 = Segment::from_fd(seg.fd().try_clone_to_owned().unwrap()).unwrap();
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
        let h = &Ring::view(&seg, 0).ctl.header.0;
        h.version.store(99, Ordering::Relaxed);
        assert!(
            matches!(Ring::attach(&seg), Err(ShmError::Invalid(m)) if m.contains("version 99"))
        );
        h.version.store(VERSION, Ordering::Relaxed);
        h.slots.store(1 << 20, Ordering::Relaxed);
        assert!(matches!(Ring::attach(&seg), Err(ShmError::Invalid(m)) if m.contains("corrupt")));
        let tiny = Segment::create("rcomm-test-tiny", 100).unwrap();
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
        let msg = |i: u64, buf: &mut [u8; SLOT_INLINE]| -> usize {
            let len = 8 + (i % (SLOT_INLINE as u64 - 7)) as usize;
            buf[..8].copy_from_slice(&i.to_le_bytes());
            for (j, b) in buf[8..len].iter_mut().enumerate() {
                *b = (i as usize).wrapping_mul(31).wrapping_add(j) as u8;
            }
            len
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut buf = [0u8; SLOT_INLINE];
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
            let mut want = [0u8; SLOT_INLINE];
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

    #[derive(Debug, Clone)]
    enum Op {
        Push(Vec<u8>),
        Pop,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..=SLOT_INLINE).prop_map(Op::Push),
            Just(Op::Pop)
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_bounded_queue(log_slots in 0u32..4, ops in proptest::collection::vec(op(), 0..300)) {
            let slots = 1usize << log_slots;
            let seg = segment(slots);
            let r = Ring::init(&seg, slots).unwrap();
            let (mut p, mut c) = (r.producer().unwrap(), r.consumer().unwrap());
            let mut model = VecDeque::new();
            for op in ops {
                match op {
                    Op::Push(m) => {
                        let pushed = p.try_push(&m).unwrap();
                        prop_assert_eq!(pushed, model.len() < slots);
                        if pushed {
                            model.push_back(m);
                        }
                    }
                    Op::Pop => prop_assert_eq!(pop(&mut c), model.pop_front()),
                }
                prop_assert_eq!(c.backlog(), model.len() as u64);
            }
        }
    }
}
