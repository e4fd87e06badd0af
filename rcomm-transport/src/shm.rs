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
//! NUMA placement: the producer creates the segment and writes only the header
//! ([`Ring::init_fresh`]); the consumer faults the slot pages in when it attaches
//! ([`Ring::first_touch`]), so Linux's first-touch policy puts them on the consumer's NUMA node,
//! where the polling happens. The benefit can only be measured on a multi-node machine; the
//! tests check who touches which page (mincore), not where the pages land.
//!
//! The atomics live in memory shared between processes; Rust's lock-free atomics are plain
//! machine instructions on the address, so they order accesses across processes exactly as
//! across threads.
//!
//! The protocol is written once, over a small private trait (`RingMem`: the slot words, `head`,
//! `tail`, the claims, and byte copies in and out of the slots). [`Ring`], the mapped segment,
//! implements it for production, with static dispatch and inlined accesses. Under `cfg(loom)`
//! the tests implement it with loom's atomics and checked cells and model-check the same
//! producer and consumer code:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p rcomm-transport --lib --release shm::loom
//! ```

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

/// One end of a ring.
#[derive(Clone, Copy)]
enum End {
    Producer,
    Consumer,
}

/// The memory the ring protocol runs on. The producer ([`Tx`]) and consumer ([`Rx`]) logic is
/// written once over this trait: [`Ring`] (the mapped segment) implements it for production, and
/// under `cfg(loom)` a model does, so that loom checks the real protocol code.
///
/// `pos` arguments are the protocol's unbounded slot positions; implementations take them modulo
/// the slot count. `at` arguments are byte offsets from the start of slot 0. Orderings are the
/// caller's choice (the protocol's), except for the claims.
trait RingMem: Clone {
    /// Number of slots: a power of two, at least 2.
    fn slots(&self) -> usize;
    /// Loads the word at the start of slot `pos`.
    fn load_word(&self, pos: u64, order: Ordering) -> u64;
    /// Stores the word at the start of slot `pos` (a message's first slot, or a pad).
    fn store_word(&self, pos: u64, w: u64, order: Ordering);
    /// Zeroes the word of slot `pos`, a continuation slot whose first 8 bytes held user data. In
    /// memory this is `store_word(pos, 0, order)`; the model also records it as an access to the
    /// slot's bytes.
    fn zero_word(&self, pos: u64, order: Ordering);
    /// Loads `head` (slot positions pushed so far).
    fn load_head(&self, order: Ordering) -> u64;
    /// Stores `head`.
    fn store_head(&self, head: u64, order: Ordering);
    /// Loads `tail` (slot positions popped so far).
    fn load_tail(&self, order: Ordering) -> u64;
    /// Stores `tail`.
    fn store_tail(&self, tail: u64, order: Ordering);
    /// Takes `end`: compare-exchange of its claim word from 0 to 1 with Acquire, so the taker
    /// sees what the previous holder did before [`unclaim`](Self::unclaim). False if taken.
    fn claim(&self, end: End) -> bool;
    /// Gives `end` back: stores 0 to its claim word with Release.
    fn unclaim(&self, end: End);
    /// Copies `src` into the slot bytes `at..at + src.len()`.
    ///
    /// # Safety
    /// The range lies inside the slots, and the protocol gives those bytes to the caller (the
    /// producer): no one reads or writes them until the caller publishes them.
    unsafe fn write(&self, at: usize, src: &[u8]);
    /// Hands `f` the slot bytes `at..at + len`.
    ///
    /// # Safety
    /// The range lies inside the slots, and the protocol keeps every writer off it until `f`
    /// returns.
    unsafe fn read<R>(&self, at: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> R;
    /// Lets `fill` write the slot bytes `at..at + len` (a gather straight into the ring).
    ///
    /// # Safety
    /// As [`write`](Self::write).
    unsafe fn write_with(&self, at: usize, len: usize, fill: &mut dyn FnMut(&mut [u8])) {
        let mut b = vec![0; len];
        fill(&mut b);
        // SAFETY: forwarded from the caller.
        unsafe { self.write(at, &b) }
    }
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

    #[inline]
    fn ctl(&self) -> &Control {
        // SAFETY: the segment is page-aligned and longer than `Control` (checked when the view
        // was made), so `Control` lies inside it, suitably aligned. It holds only atomics, so
        // other processes writing it does not break the reference's rules, and the reference
        // borrows `self`, which keeps the mapping alive.
        unsafe { &*self.seg.as_ptr().cast::<Control>() }
    }

    /// The word at the start of slot `i` (taken modulo the ring size).
    #[inline]
    fn word_at(&self, i: u64) -> &AtomicU64 {
        let i = (i as usize) & (self.n - 1);
        // SAFETY: slot i lies inside the mapping (i < n) and is 64-byte aligned, so its first 8
        // bytes form a valid, aligned AtomicU64; all concurrent accesses to a word are atomic.
        unsafe { &*self.base.add(i * SLOT_SIZE).cast::<AtomicU64>() }
    }

    /// The claim word of `end`.
    #[inline]
    fn claim_word(&self, end: End) -> &AtomicU32 {
        let h = &self.ctl().header.0;
        match end {
            End::Producer => &h.producer_taken,
            End::Consumer => &h.consumer_taken,
        }
    }

    /// Lays out an empty ring of `slots` slots (a power of two, at least 2) at the start of
    /// `seg`. Only the segment's creator calls this, before handing the segment to the peer.
    pub fn init(seg: &Arc<Segment>, slots: usize) -> Result<Self, ShmError> {
        Self::init_with(seg, slots, true)
    }

    /// [`init`](Self::init) for a segment fresh from [`Segment::create`], whose pages the
    /// kernel supplies zeroed: only the header is written, so the slot pages stay untouched
    /// until the consumer calls [`first_touch`](Self::first_touch) (see there).
    pub fn init_fresh(seg: &Arc<Segment>, slots: usize) -> Result<Self, ShmError> {
        Self::init_with(seg, slots, false)
    }

    /// Faults in every slot page from this process, without changing a byte. Linux places a
    /// shared page on the NUMA node of the CPU that first touches it, so the consumer calling
    /// this right after attaching puts the ring's slots in its own node's memory: it polls them
    /// continuously, while the producer writes each line once per message. Pages the producer
    /// already wrote (its first messages) stay where they are. Safe concurrently with the
    /// producer: `MADV_POPULATE_WRITE` changes no data, and the fallback for kernels without
    /// it (before 5.14) adds zero atomically to one slot word per page.
    pub fn first_touch(&self) {
        // SAFETY: sysconf has no preconditions.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => 4096,
        };
        let len = self.n * SLOT_SIZE;
        let start = self.base as usize;
        let aligned = start & !(page - 1);
        // SAFETY: the range lies within this ring's mapping (aligned down to the page holding
        // the first slot, which belongs to the same segment); MADV_POPULATE_WRITE only faults
        // pages in, as a write would, and leaves their contents alone.
        let r = unsafe {
            libc::madvise(
                aligned as *mut libc::c_void,
                start + len - aligned,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if r != 0 {
            for i in (0..self.n as u64).step_by((page / SLOT_SIZE).max(1)) {
                self.word_at(i).fetch_add(0, Ordering::Relaxed);
            }
        }
    }

    fn init_with(seg: &Arc<Segment>, slots: usize, zero_slots: bool) -> Result<Self, ShmError> {
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
        if zero_slots {
            for i in 0..slots as u64 {
                r.word_at(i).store(0, Ordering::Relaxed);
            }
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
        Tx::new(self.clone()).map(Producer)
    }

    /// Takes the consumer end; fails while another consumer (in any process) holds it.
    pub fn consumer(&self) -> Result<Consumer, ShmError> {
        Rx::new(self.clone()).map(Consumer)
    }
}

/// The production memory: the mapped segment, accessed in place.
impl RingMem for Ring {
    #[inline]
    fn slots(&self) -> usize {
        self.n
    }

    #[inline]
    fn load_word(&self, pos: u64, order: Ordering) -> u64 {
        self.word_at(pos).load(order)
    }

    #[inline]
    fn store_word(&self, pos: u64, w: u64, order: Ordering) {
        self.word_at(pos).store(w, order);
    }

    #[inline]
    fn zero_word(&self, pos: u64, order: Ordering) {
        self.word_at(pos).store(0, order);
    }

    #[inline]
    fn load_head(&self, order: Ordering) -> u64 {
        self.ctl().head.0.load(order)
    }

    #[inline]
    fn store_head(&self, head: u64, order: Ordering) {
        self.ctl().head.0.store(head, order);
    }

    #[inline]
    fn load_tail(&self, order: Ordering) -> u64 {
        self.ctl().tail.0.load(order)
    }

    #[inline]
    fn store_tail(&self, tail: u64, order: Ordering) {
        self.ctl().tail.0.store(tail, order);
    }

    /// The claim words make "single producer, single consumer" a checked fact rather than a
    /// promise, within a process and across processes that follow this code.
    #[inline]
    fn claim(&self, end: End) -> bool {
        self.claim_word(end)
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    fn unclaim(&self, end: End) {
        self.claim_word(end).store(0, Ordering::Release);
    }

    #[inline]
    unsafe fn write(&self, at: usize, src: &[u8]) {
        // SAFETY: the caller guarantees `at..at + src.len()` lies inside the slots, which lie
        // inside the mapping, and that nothing else accesses those bytes meanwhile.
        unsafe { copy_bytes(src.as_ptr(), self.base.add(at), src.len()) }
    }

    #[inline]
    unsafe fn read<R>(&self, at: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        // SAFETY: the caller guarantees `at..at + len` lies inside the slots, which lie inside
        // the mapping, and that no one writes those bytes until `f` returns; the slice does not
        // outlive the call, and `self` keeps the mapping alive during it.
        f(unsafe { std::slice::from_raw_parts(self.base.add(at), len) })
    }

    #[inline]
    unsafe fn write_with(&self, at: usize, len: usize, fill: &mut dyn FnMut(&mut [u8])) {
        // SAFETY: as `write`: the range is inside the mapping and the caller's alone until it
        // publishes it; the slice does not outlive the call.
        fill(unsafe { std::slice::from_raw_parts_mut(self.base.add(at), len) })
    }
}

/// Copies `len` bytes; short copies (headers, small payloads: the latency path) are done
/// inline in words instead of calling `memcpy`, whose call and dispatch cost as much as the copy.
///
/// # Safety
/// As `ptr::copy_nonoverlapping`.
#[inline(always)]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    if len > 64 {
        // SAFETY: forwarded from the caller.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let mut i = 0;
    while i + 8 <= len {
        // SAFETY: i + 8 <= len, so both 8-byte ranges are inside the caller's valid ranges;
        // unaligned accesses are allowed by read/write_unaligned.
        unsafe {
            dst.add(i)
                .cast::<u64>()
                .write_unaligned(src.add(i).cast::<u64>().read_unaligned())
        };
        i += 8;
    }
    while i < len {
        // SAFETY: i < len.
        unsafe { *dst.add(i) = *src.add(i) };
        i += 1;
    }
}

/// The producer's half of the protocol, over any [`RingMem`].
struct Tx<M: RingMem> {
    mem: M,
    /// Slot positions pushed so far (ours; published to `head` for diagnostics).
    head: u64,
    /// The consumer's `tail` as last loaded.
    cached_tail: u64,
}

impl<M: RingMem> Tx<M> {
    /// Claims the producer end of `mem`.
    fn new(mem: M) -> Result<Self, ShmError> {
        if !mem.claim(End::Producer) {
            return Err(ShmError::RoleTaken("producer"));
        }
        // Acquire on the claim (above) orders these loads after a previous producer's release.
        let head = mem.load_head(Ordering::Relaxed);
        let cached_tail = mem.load_tail(Ordering::Acquire);
        Ok(Self {
            mem,
            head,
            cached_tail,
        })
    }

    #[inline]
    fn max_msg(&self) -> usize {
        (self.mem.slots() / 2 * SLOT_SIZE - WORD).min(PAD as usize - 1)
    }

    #[inline]
    fn fits(&mut self, len: usize) -> bool {
        len <= self.max_msg() && self.room_for(len).is_some()
    }

    /// Slots needed now (pad + message) if they are free.
    #[inline]
    fn room_for(&mut self, len: usize) -> Option<(u64, u64)> {
        let n = self.mem.slots() as u64;
        let need = slots_for(len);
        let off = self.head & (n - 1);
        let pad = if off + need > n { n - off } else { 0 };
        if self.head + pad + need - self.cached_tail > n {
            // Acquire pairs with the consumer's Release of `tail`: its reads of the slots we are
            // about to overwrite are finished.
            self.cached_tail = self.mem.load_tail(Ordering::Acquire);
            if self.head + pad + need - self.cached_tail > n {
                return None;
            }
        }
        Some((pad, need))
    }

    // Always: the public wrapper is this function, as before the protocol was made generic.
    #[inline(always)]
    fn try_push_parts(&mut self, parts: &[&[u8]]) -> Result<bool, ShmError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.try_push_by(len, |mem, mut at| {
            for p in parts {
                // SAFETY: `try_push_by`'s contract: `at..at + len` is ours until published.
                unsafe { mem.write(at, p) };
                at += p.len();
            }
        })
    }

    /// `head` and then `len` bytes written by `fill` into the slot, as one message.
    fn try_push_with(
        &mut self,
        head: &[u8],
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, ShmError> {
        self.try_push_by(head.len() + len, |mem, at| {
            // SAFETY: `try_push_by`'s contract, as above.
            unsafe {
                mem.write(at, head);
                mem.write_with(at + head.len(), len, fill);
            }
        })
    }

    /// Claims room for a message of `len` bytes, lets `write(mem, at)` put its bytes at
    /// `at..at + len` (inside the ring, not wrapping, nobody else's until published) and
    /// publishes it.
    #[inline(always)]
    fn try_push_by(&mut self, len: usize, write: impl FnOnce(&M, usize)) -> Result<bool, ShmError> {
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
            self.mem
                .store_word(self.head, word(self.head, PAD), Ordering::Release);
            self.head += pad;
        }
        // The message's slots [head, head + need) lie inside the ring without wrapping
        // (room_for placed a pad otherwise) and are released by the consumer (room_for checked
        // `tail`); we are the only producer (claimed), so nothing else touches these bytes
        // until we publish the word below.
        write(
            &self.mem,
            ((self.head as usize) & (self.mem.slots() - 1)) * SLOT_SIZE + WORD,
        );
        // Release: the bytes are visible to whoever Acquires this word.
        self.mem
            .store_word(self.head, word(self.head, len as u64), Ordering::Release);
        self.head += slots_for(len);
        self.mem.store_head(self.head, Ordering::Relaxed);
        Ok(true)
    }

    #[inline]
    fn is_drained(&self) -> bool {
        self.mem.load_tail(Ordering::Acquire) == self.head
    }
}

impl<M: RingMem> Drop for Tx<M> {
    fn drop(&mut self) {
        // Release: a later producer's Acquire claim sees our last `head` store.
        self.mem.unclaim(End::Producer);
    }
}

/// The consumer's half of the protocol, over any [`RingMem`].
struct Rx<M: RingMem> {
    mem: M,
    /// Slot positions popped so far (ours; published to `tail`).
    tail: u64,
}

impl<M: RingMem> Rx<M> {
    /// Claims the consumer end of `mem`.
    fn new(mem: M) -> Result<Self, ShmError> {
        if !mem.claim(End::Consumer) {
            return Err(ShmError::RoleTaken("consumer"));
        }
        let tail = mem.load_tail(Ordering::Relaxed);
        Ok(Self { mem, tail })
    }

    /// The published word of the next message, skipping a pad; `None` if nothing is published.
    /// The word is loaded once and then trusted: reloading could see a pad published between
    /// the loads and take it for a message.
    #[inline]
    fn next_word(&mut self) -> Option<u64> {
        // Acquire pairs with the producer's Release of the word: what it published is visible.
        let w = self.mem.load_word(self.tail, Ordering::Acquire);
        if !word_seq_matches(w, self.tail) {
            return None;
        }
        if w & LEN_MASK != PAD {
            return Some(w);
        }
        let n = self.mem.slots() as u64;
        self.tail += n - (self.tail & (n - 1));
        let w = self.mem.load_word(self.tail, Ordering::Acquire);
        (word_seq_matches(w, self.tail) && w & LEN_MASK != PAD).then_some(w)
    }

    // Always: the public wrapper is this function, as before the protocol was made generic.
    #[inline(always)]
    fn try_pop_if<F: FnOnce(&[u8]) -> bool>(&mut self, f: F) -> bool {
        let Some(w) = self.next_word() else {
            return false;
        };
        let n = self.mem.slots();
        let off = (self.tail as usize) & (n - 1);
        // A producer following the protocol never announces more than fits before the ring's
        // end; the clamp keeps a broken one from making us read past the slots.
        let len = ((w & LEN_MASK) as usize).min((n - off) * SLOT_SIZE - WORD);
        // SAFETY: the word is published for our position, so the producer has finished these
        // bytes and will not touch them again until we publish a `tail` past them, after `f`.
        if !unsafe { self.mem.read(off * SLOT_SIZE + WORD, len, f) } {
            return false;
        }
        let used = slots_for(len);
        for k in 1..used {
            // Continuation slots hold user bytes where a word could be; zero them so a later lap
            // never mistakes them for a published word (see the module notes).
            self.mem.zero_word(self.tail + k, Ordering::Relaxed);
        }
        self.tail += used;
        // Release: our reads (and the zeroing) happen-before the producer reuses the slots.
        self.mem.store_tail(self.tail, Ordering::Release);
        true
    }

    #[inline]
    fn backlog(&self) -> u64 {
        self.mem
            .load_head(Ordering::Relaxed)
            .wrapping_sub(self.tail)
    }
}

impl<M: RingMem> Drop for Rx<M> {
    fn drop(&mut self) {
        // Release: a later consumer's Acquire claim sees our last `tail` store.
        self.mem.unclaim(End::Consumer);
    }
}

/// The writing end of a ring.
pub struct Producer(Tx<Ring>);

impl Producer {
    /// Largest message this ring accepts: half the ring, so a message plus its pad always fits
    /// an empty ring.
    pub fn max_msg(&self) -> usize {
        self.0.max_msg()
    }

    /// Whether a message of `len` bytes would fit right now.
    pub fn fits(&mut self, len: usize) -> bool {
        self.0.fits(len)
    }

    /// Copies `data` into the ring as one message; `Ok(false)` if the ring is full now.
    pub fn try_push(&mut self, data: &[u8]) -> Result<bool, ShmError> {
        self.0.try_push_parts(&[data])
    }

    /// Copies the concatenation of `parts` into the ring as one message (a header and a
    /// payload, without gluing them first); `Ok(false)` if the ring is full now.
    pub fn try_push_parts(&mut self, parts: &[&[u8]]) -> Result<bool, ShmError> {
        self.0.try_push_parts(parts)
    }

    /// One message of `head` followed by `len` bytes that `fill` writes straight into the
    /// ring (a gather: no intermediate buffer); `Ok(false)` if the ring is full now. `fill`
    /// must write every byte of its slice; it runs only when there is room.
    pub fn try_push_with(
        &mut self,
        head: &[u8],
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, ShmError> {
        self.0.try_push_with(head, len, fill)
    }

    /// Whether the consumer has taken every message pushed so far.
    pub fn is_drained(&self) -> bool {
        self.0.is_drained()
    }

    /// Faults this end's mapping of every slot page in, once a consumer has claimed the ring;
    /// true if it did, false (nothing done) while no consumer holds it. A consumer that calls
    /// [`Ring::first_touch`] before it claims the ring (as the shared-memory transport does)
    /// has then placed the pages on its NUMA node, so this only fills the producer's page
    /// tables: without it the producer's first lap takes one minor fault per page (~1 µs each
    /// on a VM, the slowest iterations of a fresh job's first thousand messages). Changes no
    /// byte of the ring, so it is safe at any time.
    pub fn prefault_after_consumer(&self) -> bool {
        if self.0.mem.claim_word(End::Consumer).load(Ordering::Acquire) == 0 {
            return false;
        }
        self.0.mem.first_touch();
        true
    }
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("head", &self.0.head)
            .field("slots", &self.0.mem.slots())
            .finish()
    }
}

/// The reading end of a ring.
pub struct Consumer(Rx<Ring>);

impl Consumer {
    /// Whether a message is ready (one Acquire load of the next word, two after a pad).
    pub fn ready(&mut self) -> bool {
        self.0.next_word().is_some()
    }

    /// Hands the next message to `f` as a slice of the ring itself (no copy) and frees its slots
    /// when `f` returns; false if the ring is empty.
    pub fn try_pop<F: FnOnce(&[u8])>(&mut self, f: F) -> bool {
        self.0.try_pop_if(|b| {
            f(b);
            true
        })
    }

    /// Like [`try_pop`](Self::try_pop), but the message stays in the ring (to be seen again)
    /// when `f` returns false — for a consumer that must first fetch something the message
    /// refers to.
    // Inlined into the transport's progress loop: out of line (as a change of code-generation
    // units once made it) the receive path measured slower.
    #[inline]
    pub fn try_pop_if<F: FnOnce(&[u8]) -> bool>(&mut self, f: F) -> bool {
        self.0.try_pop_if(f)
    }

    /// Slots pushed but not yet popped, as far as this side can tell now (a diagnostic and the
    /// sleep re-check: the producer may push more at any moment).
    pub fn backlog(&self) -> u64 {
        self.0.backlog()
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("tail", &self.0.tail)
            .field("slots", &self.0.mem.slots())
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

    /// Which of the segment's pages are resident (in the page cache), by mincore.
    fn resident(seg: &Segment) -> Vec<bool> {
        // SAFETY: sysconf has no preconditions.
        let pages = seg
            .len()
            .div_ceil(unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize);
        let mut v = vec![0u8; pages];
        // SAFETY: the segment's mapping is page-aligned and `v` holds one byte per page.
        let r = unsafe { libc::mincore(seg.as_ptr().cast(), seg.len(), v.as_mut_ptr()) };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        v.iter().map(|b| b & 1 == 1).collect()
    }

    #[test]
    fn the_consumer_first_touches_the_slot_pages() {
        let slots = 1024; // 64 KiB of slots: several pages after the header's
        let seg = segment(slots);
        let r = Ring::init_fresh(&seg, slots).unwrap();
        let before = resident(&seg);
        assert!(before[0], "the creator writes the header");
        assert!(
            before[1..].iter().all(|&p| !p),
            "the creator leaves the slot pages alone: {before:?}"
        );
        let (mut p, mut c) = (r.producer().unwrap(), r.consumer().unwrap());
        r.first_touch();
        assert!(resident(&seg).iter().all(|&p| p));
        // Touching changed nothing: the ring works as a zeroed one.
        assert_eq!(pop(&mut c), None);
        assert!(p.try_push(b"after the touch").unwrap());
        r.first_touch();
        assert_eq!(pop(&mut c).as_deref(), Some(&b"after the touch"[..]));
    }

    /// Kilobytes of this process's page tables that map `seg` (`Rss` of its mapping in
    /// /proc/self/smaps): unlike mincore, which reports the segment's pages whoever mapped them,
    /// this counts only what this mapping has faulted in.
    fn mapped_kib(seg: &Segment) -> u64 {
        let start = format!("{:x}-", seg.as_ptr() as usize);
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
        assert!(lines.next().is_some(), "no mapping at {start} in smaps");
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("an Rss line")
    }

    #[test]
    fn the_producer_prefaults_its_mapping_only_after_the_consumer_touched_the_pages() {
        let slots = 1024; // 64 KiB of slots
        let seg = segment(slots);
        let ring = Ring::init_fresh(&seg, slots).unwrap();
        // The consumer's own mapping of the same memfd, as another process has.
        let theirs = Arc::new(Segment::from_fd(seg.fd().try_clone_to_owned().unwrap()).unwrap());
        let p = ring.producer().unwrap();
        assert!(
            !p.prefault_after_consumer(),
            "no consumer yet: nothing done"
        );
        assert!(
            resident(&seg)[1..].iter().all(|&r| !r),
            "the slot pages are still the consumer's to touch first"
        );
        let mine_before = mapped_kib(&seg);
        let far = Ring::attach(&theirs).unwrap();
        far.first_touch();
        let mut c = far.consumer().unwrap();
        let theirs_kib = mapped_kib(&theirs);
        assert!(
            theirs_kib >= 64,
            "the consumer mapped its slots: {theirs_kib} KiB"
        );
        assert!(
            mapped_kib(&seg) < mine_before + 64,
            "touching theirs filled not ours"
        );
        assert!(p.prefault_after_consumer());
        let mine = mapped_kib(&seg);
        assert!(
            mine >= mine_before + 64,
            "our mapping now holds every slot page: {mine_before} -> {mine} KiB"
        );
        // Nothing changed in the ring.
        assert_eq!(pop(&mut c), None);
        let mut p = p;
        assert!(p.try_push(b"after the prefault").unwrap());
        assert_eq!(pop(&mut c).as_deref(), Some(&b"after the prefault"[..]));
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
    fn a_gather_writes_straight_into_the_ring_wrapping_and_full_as_any_push() {
        let seg = segment(8);
        let r = Ring::init(&seg, 8).unwrap();
        let (mut p, mut c) = (r.producer().unwrap(), r.consumer().unwrap());
        // Sizes that start mid-ring, so some messages need a pad before them (no wrapping).
        for (round, len) in [0usize, 1, 7, 100, 3 * SLOT_SIZE - 20, 200, 5]
            .into_iter()
            .enumerate()
        {
            let head = [round as u8; 5];
            let mut calls = 0;
            let pushed = p
                .try_push_with(&head, len, &mut |s| {
                    calls += 1;
                    assert_eq!(s.len(), len);
                    for (i, b) in s.iter_mut().enumerate() {
                        *b = (i * 3 + round) as u8;
                    }
                })
                .unwrap();
            assert!(pushed && calls == 1, "round {round}");
            let mut want = head.to_vec();
            want.extend((0..len).map(|i| (i * 3 + round) as u8));
            assert_eq!(pop(&mut c), Some(want), "round {round}, {len} bytes");
        }
        // Full: the fill never runs and nothing is published.
        while p.try_push(&[1; 3 * SLOT_SIZE]).unwrap() {}
        let mut ran = false;
        assert!(
            !p.try_push_with(b"h", 3 * SLOT_SIZE, &mut |_| ran = true)
                .unwrap()
        );
        assert!(!ran);
        assert_eq!(
            p.try_push_with(b"h", p.max_msg(), &mut |_| ran = true),
            Err(ShmError::TooLarge { len: 249, cap: 248 })
        );
        assert!(!ran);
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
                        if spins.is_multiple_of(64) {
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
                    if spins.is_multiple_of(64) {
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

/// Model checking of the protocol with loom: the `Tx`/`Rx` code above, over a model of the ring's
/// memory built from loom's atomics and checked cells. Run with
/// `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p rcomm-transport --lib --release shm::loom`.
#[cfg(all(test, loom))]
mod loom {
    use super::*;
    use ::loom::cell::UnsafeCell;
    use ::loom::model::Builder;
    use ::loom::sync::Arc;
    use ::loom::sync::atomic::{AtomicU32 as LoomU32, AtomicU64 as LoomU64};
    use ::loom::thread;

    /// One 64-byte slot of the model.
    ///
    /// In the segment, the first 8 bytes of every slot are at once the slot's word (accessed
    /// atomically by the protocol) and, in a message's continuation slots, plain user bytes
    /// written by the producer's copy. The model keeps one value for those 8 bytes, `word`, so
    /// that user bytes *are* what a later word load sees, as in memory: the producer's copy
    /// stores them into `word` (Relaxed; the copy is ordered only by the first slot's Release,
    /// like a plain write), the consumer's read of the message loads them from `word` (Relaxed),
    /// and the zeroing is a store to `word`. A message whose bytes spell a valid future word
    /// therefore misleads a consumer that skips the zeroing, which the tests check.
    ///
    /// `bytes` is the whole line; its first 8 bytes are written by a copy but never read back
    /// (their value is `word`'s).
    /// Every plain access to the slot (a copy in, a copy out, the zeroing, which overwrites user
    /// bytes) goes through it, so loom reports a copy that is not ordered against another
    /// access to the same slot. One cell per slot: loom tracks races per slot, and a message
    /// spanning several slots is copied slot by slot.
    struct Slot {
        word: LoomU64,
        bytes: UnsafeCell<[u8; SLOT_SIZE]>,
    }

    struct Mem {
        head: LoomU64,
        tail: LoomU64,
        producer_taken: LoomU32,
        consumer_taken: LoomU32,
        slots: Vec<Slot>,
    }

    // SAFETY: the cells are only accessed through `with`/`with_mut`, which loom checks: an
    // access that the protocol does not order against a conflicting one fails the test.
    unsafe impl Sync for Mem {}

    /// A freshly initialised ring of `n` slots (all words zero), shared by the model's threads.
    #[derive(Clone)]
    struct ModelRing(Arc<Mem>);

    impl ModelRing {
        fn new(n: usize) -> Self {
            assert!(n.is_power_of_two() && n >= 2);
            let slots = (0..n)
                .map(|_| Slot {
                    word: LoomU64::new(0),
                    bytes: UnsafeCell::new([0; SLOT_SIZE]),
                })
                .collect();
            Self(Arc::new(Mem {
                head: LoomU64::new(0),
                tail: LoomU64::new(0),
                producer_taken: LoomU32::new(0),
                consumer_taken: LoomU32::new(0),
                slots,
            }))
        }

        fn slot(&self, pos: u64) -> &Slot {
            &self.0.slots[(pos as usize) & (self.0.slots.len() - 1)]
        }

        fn claim_word(&self, end: End) -> &LoomU32 {
            match end {
                End::Producer => &self.0.producer_taken,
                End::Consumer => &self.0.consumer_taken,
            }
        }

        /// Splits the byte range `at..at + len` into per-slot pieces: (slot, offset in it,
        /// offset in the range, length). Panics if the range leaves the slots.
        fn pieces(&self, at: usize, len: usize) -> Vec<(&Slot, usize, usize, usize)> {
            assert!(
                at + len <= self.0.slots.len() * SLOT_SIZE,
                "access past the slots"
            );
            let mut out = Vec::new();
            let mut done = 0;
            while done < len {
                let (i, o) = ((at + done) / SLOT_SIZE, (at + done) % SLOT_SIZE);
                let k = (SLOT_SIZE - o).min(len - done);
                out.push((&self.0.slots[i], o, done, k));
                done += k;
            }
            out
        }
    }

    impl RingMem for ModelRing {
        fn slots(&self) -> usize {
            self.0.slots.len()
        }

        fn load_word(&self, pos: u64, order: Ordering) -> u64 {
            self.slot(pos).word.load(order)
        }

        fn store_word(&self, pos: u64, w: u64, order: Ordering) {
            self.slot(pos).word.store(w, order);
        }

        fn zero_word(&self, pos: u64, order: Ordering) {
            let s = self.slot(pos);
            // The zeroing overwrites user bytes: a plain write as far as the producer's copy is
            // concerned, so it must be ordered before the producer's next copy into this slot.
            s.bytes.with_mut(|_| ());
            s.word.store(0, order);
        }

        fn load_head(&self, order: Ordering) -> u64 {
            self.0.head.load(order)
        }

        fn store_head(&self, head: u64, order: Ordering) {
            self.0.head.store(head, order);
        }

        fn load_tail(&self, order: Ordering) -> u64 {
            self.0.tail.load(order)
        }

        fn store_tail(&self, tail: u64, order: Ordering) {
            self.0.tail.store(tail, order);
        }

        fn claim(&self, end: End) -> bool {
            self.claim_word(end)
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        }

        fn unclaim(&self, end: End) {
            self.claim_word(end).store(0, Ordering::Release);
        }

        unsafe fn write(&self, at: usize, src: &[u8]) {
            for (s, o, from, k) in self.pieces(at, src.len()) {
                let src = &src[from..from + k];
                // Loom checks this access against every other access to the slot.
                s.bytes.with_mut(|p| {
                    // SAFETY: `p` points to the cell's line, which loom lets us write now.
                    let line = unsafe { &mut *p };
                    line[o..o + k].copy_from_slice(src);
                });
                if o < WORD {
                    // User bytes over a continuation slot's word (see `Slot`).
                    let mut w = s.word.load(Ordering::Relaxed).to_ne_bytes();
                    let m = (WORD - o).min(k);
                    w[o..o + m].copy_from_slice(&src[..m]);
                    s.word.store(u64::from_ne_bytes(w), Ordering::Relaxed);
                }
            }
        }

        /// Copies the bytes out slot by slot and hands `f` the copy: the checked reads happen
        /// just before `f` runs rather than inside it, in both cases before the consumer
        /// publishes `tail`, which is what the protocol orders.
        unsafe fn read<R>(&self, at: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
            let mut buf = vec![0; len];
            for (s, o, to, k) in self.pieces(at, len) {
                let dst = &mut buf[to..to + k];
                // Loom checks this access against every other access to the slot.
                s.bytes.with(|p| {
                    // SAFETY: `p` points to the cell's line, which loom lets us read now.
                    let line = unsafe { &*p };
                    dst.copy_from_slice(&line[o..o + k]);
                });
                if o < WORD {
                    // What the word holds is what these bytes are (see `Slot`).
                    let w = s.word.load(Ordering::Relaxed).to_ne_bytes();
                    let m = (WORD - o).min(k);
                    dst[..m].copy_from_slice(&w[o..o + m]);
                }
            }
            f(&buf)
        }
    }

    /// Tries per blocking push or pop; a correct peer makes progress long before.
    const TRIES: usize = 100;

    /// Checks `f` under every interleaving loom distinguishes (no preemption bound unless
    /// `LOOM_MAX_PREEMPTIONS` sets one: these models are small enough to explore whole, about
    /// 170,000 executions for the four, some seconds in release), and reports how many it ran
    /// (seen with `--nocapture`).
    fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
        let b = Builder::new();
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = runs.clone();
        b.check(move || {
            count.fetch_add(1, Ordering::Relaxed);
            f();
        });
        eprintln!(
            "{name}: {} interleavings (preemption bound {:?})",
            runs.load(Ordering::Relaxed),
            b.preemption_bound
        );
    }

    /// Message `i` of `len` bytes, distinct from every other message of the tests.
    fn msg(i: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|j| (j as u8).wrapping_mul(7) ^ i.wrapping_mul(0x35))
            .collect()
    }

    fn push(tx: &mut Tx<ModelRing>, parts: &[&[u8]]) {
        for _ in 0..TRIES {
            if tx.try_push_parts(parts).unwrap() {
                return;
            }
            thread::yield_now();
        }
        panic!("producer stuck at head {}", tx.head);
    }

    fn pop(rx: &mut Rx<ModelRing>) -> Vec<u8> {
        for _ in 0..TRIES {
            let mut got = None;
            if rx.try_pop_if(|b| {
                got = Some(b.to_vec());
                true
            }) {
                return got.unwrap();
            }
            thread::yield_now();
        }
        panic!("consumer stuck at tail {}", rx.tail);
    }

    fn ends(n: usize) -> (Tx<ModelRing>, Rx<ModelRing>) {
        let mem = ModelRing::new(n);
        (Tx::new(mem.clone()).unwrap(), Rx::new(mem).unwrap())
    }

    /// Mixed sizes on 4 slots: one slot, two slots pushed as two parts split inside the
    /// continuation slot's word bytes, two slots that must wrap behind a pad, one slot.
    #[test]
    fn mixed_sizes_arrive_in_order_and_intact() {
        model("mixed_sizes_arrive_in_order_and_intact", || {
            let (mut tx, mut rx) = ends(4);
            let msgs = [msg(0, 5), msg(1, 100), msg(2, 70), msg(3, 20)];
            let sent = msgs.clone();
            let producer = thread::spawn(move || {
                push(&mut tx, &[&sent[0]]);
                // Bytes 56..64 of the message are the continuation slot's word bytes.
                push(&mut tx, &[&sent[1][..60], &sent[1][60..]]);
                push(&mut tx, &[&sent[2]]); // head 3: pad, then slots 0-1
                push(&mut tx, &[&sent[3]]);
                tx
            });
            for m in &msgs {
                assert_eq!(&pop(&mut rx), m);
            }
            let tx = producer.join().unwrap();
            assert!(!rx.try_pop_if(|_| panic!("nothing more was pushed")));
            assert!(tx.is_drained());
            assert_eq!(rx.backlog(), 0);
        });
    }

    /// A full ring refuses the producer until the consumer frees enough slots.
    #[test]
    fn full_ring_blocks_the_producer_until_the_consumer_frees_slots() {
        model(
            "full_ring_blocks_the_producer_until_the_consumer_frees_slots",
            || {
                let (mut tx, mut rx) = ends(4);
                let msgs = [msg(0, 100), msg(1, 100), msg(2, 30), msg(3, 100)];
                push(&mut tx, &[&msgs[0]]);
                push(&mut tx, &[&msgs[1]]);
                assert!(!tx.fits(1), "4 slots hold two 2-slot messages");
                assert!(!tx.try_push_parts(&[&msgs[2]]).unwrap());
                let want = msgs.clone();
                let consumer = thread::spawn(move || {
                    for m in &want {
                        assert_eq!(&pop(&mut rx), m);
                    }
                    rx
                });
                push(&mut tx, &[&msgs[2]]); // needs msgs[0] popped
                push(&mut tx, &[&msgs[3]]); // needs msgs[1] popped
                let rx = consumer.join().unwrap();
                assert!(tx.is_drained());
                assert_eq!(rx.tail, 7);
            },
        );
    }

    /// A message refused by `try_pop_if` stays, and its slots stay closed to the producer, until
    /// a later pop takes it.
    #[test]
    fn refused_message_stays_for_a_later_pop() {
        model("refused_message_stays_for_a_later_pop", || {
            let (mut tx, mut rx) = ends(4);
            let msgs = [msg(0, 100), msg(1, 100), msg(2, 20)];
            let sent = msgs.clone();
            let producer = thread::spawn(move || {
                for m in &sent {
                    push(&mut tx, &[m]); // the third needs the first's slots
                }
            });
            let mut refused = false;
            for _ in 0..TRIES {
                let mut seen = None;
                let popped = rx.try_pop_if(|b| {
                    seen = Some(b.to_vec());
                    false
                });
                assert!(!popped);
                if let Some(b) = seen {
                    assert_eq!(b, msgs[0]);
                    refused = true;
                    break;
                }
                thread::yield_now();
            }
            assert!(refused, "consumer never saw the first message");
            assert!(
                rx.next_word().is_some(),
                "the refused message is still ready"
            );
            for m in &msgs {
                assert_eq!(&pop(&mut rx), m);
            }
            producer.join().unwrap();
        });
    }

    /// User bytes equal to the word of a future message at the same slot: without the
    /// consumer's zeroing of continuation words, the consumer would take them for that message
    /// before the producer wrote it.
    #[test]
    fn user_bytes_that_look_like_a_future_word_are_never_taken_for_one() {
        model(
            "user_bytes_that_look_like_a_future_word_are_never_taken_for_one",
            || {
                let (mut tx, mut rx) = ends(4);
                // The fifth message lands at position 5: slot 1, the first message's continuation
                // slot, whose first 8 bytes are the first message's bytes 56..64.
                let mut first = msg(0, 120);
                first[SLOT_INLINE..SLOT_SIZE].copy_from_slice(&word(5, 20).to_ne_bytes());
                let msgs = [first, msg(1, 10), msg(2, 10), msg(3, 10), msg(4, 20)];
                let sent = msgs.clone();
                let producer = thread::spawn(move || {
                    for m in &sent {
                        push(&mut tx, &[m]);
                    }
                });
                for m in &msgs {
                    assert_eq!(&pop(&mut rx), m);
                }
                producer.join().unwrap();
                assert!(!rx.try_pop_if(|_| panic!("nothing more was pushed")));
            },
        );
    }
}
