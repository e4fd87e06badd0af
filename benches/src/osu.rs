//! The OSU micro-benchmarks 7.2 methodology, as plain data and functions.
//!
//! What OSU does, and what `rcomm-bench` and `benches/mpi/osu_like.c` therefore do:
//! - sizes are powers of two from MIN to MAX (`-m [MIN:]MAX`, default 1:4194304; a size of 0 is
//!   followed by 1, as in OSU);
//! - per size, `skip` warm-up iterations then `iterations` timed ones; "large" means
//!   `size > 8192`. Latency: 10 000 + 100 warm-up (small), 1 000 + 10 (large). Bandwidth: 100
//!   windows + 10 warm-up (small), 20 + 2 (large). `-i` sets the iterations of both classes,
//!   `-x` the warm-up of both (OSU's `set_num_iterations` / `set_num_warmup`);
//! - each timed iteration is timed on its own and the times are summed (OSU 7 times every
//!   iteration between `MPI_Wtime` calls);
//! - latency = half the ping-pong round trip; the ping is sent from one buffer and the pong
//!   received into another (`s_buf`, `r_buf`);
//! - bandwidth = bytes of a window of 64 non-blocking sends, then one 4-byte acknowledgement
//!   per window, over the time from the first send to the acknowledgement; bidirectional
//!   bandwidth = both ranks post 64 receives and 64 sends per window, bytes counted both ways;
//! - buffers are page-aligned and reused; with `-b multiple` (OSU's `--buffer-num multiple`)
//!   every window slot has its own send and receive buffer, allocated per size.
//!
//! Additions that do not change what is timed: before the timed loop the send buffers are
//! filled with a pattern that depends on (size, rank, window slot) and the receive buffers with
//! a poison pattern; before each iteration's sends the sender stamps the iteration number into
//! at most three 8-byte words of each send buffer (the first, one in the middle, the last:
//! [`stamp`], 24 bytes whatever the size), so every iteration's messages differ; after the
//! timed loop, in a separate pass, the receiver checks that every receive buffer holds exactly
//! the sender's last message: its pattern stamped with the last iteration ([`check_last`]). A
//! receive that stops writing after some iteration, writes only part of the message, or never
//! writes is caught, and said which.

use std::fmt;
use std::ops::Range;

/// OSU's `LARGE_MESSAGE_SIZE`: sizes above it use the "large" loop counts.
pub const LARGE_MESSAGE_SIZE: usize = 8192;
/// OSU's default window of non-blocking operations for the bandwidth tests.
pub const WINDOW_SIZE: usize = 64;
/// Alignment of every buffer (OSU aligns to the page size).
pub const PAGE: usize = 4096;
/// Largest supported message size.
pub const MAX_SIZE: usize = 1 << 30;
/// OSU's default size range.
pub const DEFAULT_RANGE: SizeRange = SizeRange {
    min: 1,
    max: 4 << 20,
};
/// Most memory one rank may allocate for buffers (multiple buffers: 2 × window × size).
pub const MEM_LIMIT: usize = 4 << 30;

/// The three point-to-point tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// `osu_latency`: ping-pong, half the round trip.
    Latency,
    /// `osu_bw`: windows of 64 sends, one acknowledgement per window.
    Bw,
    /// `osu_bibw`: windows of 64 sends and 64 receives on both ranks.
    Bibw,
    /// Not an OSU test: both ranks `sendrecv` the size with each other at once, one exchange
    /// per iteration; the time per exchange. This is one step of a ring or pairwise collective
    /// (both directions busy), the link α + S/β that `rcomm-plan` prices.
    Exchange,
}

impl Test {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Test::Latency => "latency",
            Test::Bw => "bw",
            Test::Bibw => "bibw",
            Test::Exchange => "exchange",
        }
    }

    /// OSU's default loop counts for this test.
    pub fn default_counts(self) -> LoopCounts {
        match self {
            Test::Latency | Test::Exchange => LoopCounts {
                small: Loop {
                    iterations: 10_000,
                    skip: 100,
                },
                large: Loop {
                    iterations: 1_000,
                    skip: 10,
                },
            },
            Test::Bw | Test::Bibw => LoopCounts {
                small: Loop {
                    iterations: 100,
                    skip: 10,
                },
                large: Loop {
                    iterations: 20,
                    skip: 2,
                },
            },
        }
    }

    /// Title line, as OSU prints it.
    pub fn title(self) -> &'static str {
        match self {
            Test::Latency => "# OSU-style Latency Test (osu_latency methodology)",
            Test::Bw => "# OSU-style Bandwidth Test (osu_bw methodology)",
            Test::Bibw => "# OSU-style Bi-Directional Bandwidth Test (osu_bibw methodology)",
            Test::Exchange => "# Exchange Test (both ranks sendrecv at once; time per exchange)",
        }
    }

    /// Column header line of the table.
    pub fn column_header(self) -> String {
        let unit = if matches!(self, Test::Latency | Test::Exchange) {
            "Latency (us)"
        } else {
            "Bandwidth (MB/s)"
        };
        format!("{:<10}{:>20}", "# Size", unit)
    }

    /// One table row: size and value with OSU's widths and two decimals.
    pub fn row(self, size: usize, value: f64) -> String {
        format!("{size:<10}{value:>20.2}")
    }

    /// One JSON line: `{"size":N,"latency_us":X}` or `{"size":N,"bandwidth_MBps":X}`.
    pub fn json(self, size: usize, value: f64) -> String {
        match self {
            Test::Latency | Test::Exchange => {
                format!("{{\"size\":{size},\"latency_us\":{value:.3}}}")
            }
            Test::Bw | Test::Bibw => format!("{{\"size\":{size},\"bandwidth_MBps\":{value:.2}}}"),
        }
    }

    /// The reported figure from the summed time of `iterations` timed iterations:
    /// latency in µs (half round trip) or bandwidth in MB/s (10^6 bytes per second).
    pub fn figure(self, size: usize, iterations: usize, window: usize, total_secs: f64) -> f64 {
        match self {
            Test::Latency => total_secs * 1e6 / (2.0 * iterations as f64),
            Test::Exchange => total_secs * 1e6 / iterations as f64,
            Test::Bw => size as f64 / 1e6 * iterations as f64 * window as f64 / total_secs,
            Test::Bibw => size as f64 / 1e6 * iterations as f64 * window as f64 * 2.0 / total_secs,
        }
    }

    /// Whether a size is run (the bandwidth tests skip 0 bytes, as OSU does).
    pub fn runs_size(self, size: usize) -> bool {
        size > 0 || matches!(self, Test::Latency | Test::Exchange)
    }
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Warm-up and timed iterations for one size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loop {
    /// Timed iterations (windows for the bandwidth tests).
    pub iterations: usize,
    /// Warm-up iterations before them.
    pub skip: usize,
}

/// Loop counts for small (≤ 8 KiB) and large sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopCounts {
    /// Sizes up to [`LARGE_MESSAGE_SIZE`].
    pub small: Loop,
    /// Larger sizes.
    pub large: Loop,
}

impl LoopCounts {
    /// Applies `-i` and `-x`, which (as in OSU) set both size classes.
    pub fn with_overrides(mut self, iterations: Option<usize>, skip: Option<usize>) -> Self {
        if let Some(i) = iterations {
            self.small.iterations = i;
            self.large.iterations = i;
        }
        if let Some(x) = skip {
            self.small.skip = x;
            self.large.skip = x;
        }
        self
    }

    /// The counts for `size`.
    pub fn for_size(&self, size: usize) -> Loop {
        if size > LARGE_MESSAGE_SIZE {
            self.large
        } else {
            self.small
        }
    }
}

/// An inclusive range of message sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeRange {
    /// Smallest size in bytes.
    pub min: usize,
    /// Largest size in bytes.
    pub max: usize,
}

impl SizeRange {
    /// The sizes OSU runs: `min`, then doubling (0 is followed by 1) while ≤ `max`.
    pub fn sizes(&self) -> Vec<usize> {
        let mut v = Vec::new();
        let mut s = self.min;
        while s <= self.max {
            v.push(s);
            s = if s == 0 { 1 } else { s * 2 };
        }
        v
    }
}

/// Parses a size: digits with an optional binary suffix K, M or G (`4K` = 4096).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (digits, mult) = match t.as_bytes().last() {
        Some(b'k' | b'K') => (&t[..t.len() - 1], 1usize << 10),
        Some(b'm' | b'M') => (&t[..t.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = digits.parse().map_err(|_| {
        format!("bad size {s:?}: expected a number with an optional K, M or G suffix")
    })?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// Parses OSU's `-m` argument: `MIN:MAX`, `MAX`, `MIN:` (up to the default maximum) or `:MAX`.
pub fn parse_range(s: &str) -> Result<SizeRange, String> {
    let (min, max) = match s.split_once(':') {
        Some((a, b)) => {
            let min = if a.trim().is_empty() {
                DEFAULT_RANGE.min
            } else {
                parse_size(a)?
            };
            let max = if b.trim().is_empty() {
                DEFAULT_RANGE.max.max(min)
            } else {
                parse_size(b)?
            };
            (min, max)
        }
        None => (DEFAULT_RANGE.min, parse_size(s)?),
    };
    if min > max {
        return Err(format!(
            "bad size range {s:?}: minimum {min} is above maximum {max}"
        ));
    }
    if max > MAX_SIZE {
        return Err(format!(
            "bad size range {s:?}: sizes above 1 GiB ({MAX_SIZE} bytes) are not supported"
        ));
    }
    Ok(SizeRange { min, max })
}

/// Seed of the pattern a rank sends at one size from one window slot.
pub fn seed(size: usize, rank: u32, slot: usize) -> u64 {
    (size as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (u64::from(rank) << 48)
        ^ ((slot as u64) << 32)
        ^ 0x0005_DEEC_E66D
}

/// Seed of the poison written into receive buffers before a size runs.
pub fn poison_seed(size: usize, rank: u32, slot: usize) -> u64 {
    seed(size, rank, slot) ^ 0xA5A5_A5A5_A5A5_A5A5
}

/// Word `k` of the pattern with `seed` (a 64-bit mix; the C program computes the same).
#[inline]
fn word(seed: u64, k: u64) -> u64 {
    let mut x = seed ^ k.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 31;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 29)
}

/// Fills `buf` with the pattern of `seed`: little-endian 64-bit words, the last one truncated.
pub fn fill(buf: &mut [u8], seed: u64) {
    let mut chunks = buf.chunks_exact_mut(8);
    let mut k = 0u64;
    for c in &mut chunks {
        c.copy_from_slice(&word(seed, k).to_le_bytes());
        k += 1;
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&word(seed, k).to_le_bytes()[..n]);
}

/// Offset of the first byte of `buf` that differs from the pattern of `seed`, if any.
pub fn first_mismatch(buf: &[u8], seed: u64) -> Option<usize> {
    let mut chunks = buf.chunks_exact(8);
    let mut k = 0u64;
    for c in &mut chunks {
        let w = word(seed, k).to_le_bytes();
        if c != w {
            let i = c.iter().zip(w).position(|(a, b)| *a != b).unwrap_or(0);
            return Some(k as usize * 8 + i);
        }
        k += 1;
    }
    let rest = chunks.remainder();
    let w = word(seed, k).to_le_bytes();
    rest.iter()
        .zip(w)
        .position(|(a, b)| *a != b)
        .map(|i| k as usize * 8 + i)
}

/// Key of the stamp words' base (the C program uses the same).
const STAMP_KEY: u64 = 0x57A3_9C0D_E1F2_B468;

/// The byte ranges a stamp overwrites in a message of `n` bytes, in this order: the first word
/// (`0..8`), a word in the middle (on a word boundary) and the last 8 bytes; disjoint, so short
/// messages get fewer (empty ranges) or shorter ones: up to 8 bytes only the first (the whole
/// message), up to 16 the first and the rest, up to 23 the first and the last; from 24 bytes
/// on all three.
pub fn stamp_ranges(n: usize) -> [Range<usize>; 3] {
    let first = 0..n.min(8);
    let last = if n > 8 { (n - 8).max(8)..n } else { n..n };
    let m = (n / 2) & !7;
    let middle = if m >= 8 && m + 8 <= last.start {
        m..m + 8
    } else {
        n..n
    };
    [first, middle, last]
}

/// Stamp word `which` (0 first, 1 middle, 2 last) of iteration `iteration` (counted from 0,
/// warm-up included) for the pattern of `seed`: a base that depends on the seed and the word,
/// exclusive-or `iteration + 1`, so different iterations always differ in the low byte.
pub fn stamp_word(seed: u64, iteration: u64, which: usize) -> u64 {
    word(seed ^ STAMP_KEY, which as u64) ^ iteration.wrapping_add(1)
}

/// Writes iteration `iteration`'s stamp into `buf` (a send buffer filled with the pattern of
/// `seed`): [`stamp_word`]s over the [`stamp_ranges`], little-endian, truncated to short
/// ranges. At most 24 bytes are written, whatever the size, so stamping costs nothing next to
/// sending.
#[inline]
pub fn stamp(buf: &mut [u8], seed: u64, iteration: u64) {
    for (which, r) in stamp_ranges(buf.len()).into_iter().enumerate() {
        let len = r.len();
        buf[r].copy_from_slice(&stamp_word(seed, iteration, which).to_le_bytes()[..len]);
    }
}

/// What a receive buffer holds instead of the sender's last message, at the first wrong byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrong {
    /// Still the poison written before the timed loop: no message was received there.
    Poison,
    /// A full stamp word of an earlier iteration: the buffer was last written then.
    Stale {
        /// The iteration whose stamp it holds (counted from 0, warm-up included).
        found: u64,
    },
    /// A stamp that is not the last iteration's (and not a full word of an earlier one).
    Stamp,
    /// Data that differs from the sender's pattern.
    Pattern,
}

/// The first wrong byte of a receive buffer, and what it holds ([`check_last`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Byte offset of the first wrong byte.
    pub offset: usize,
    /// What is there.
    pub wrong: Wrong,
}

impl Mismatch {
    /// Three words for the wire (the other rank prints them): kind (1 poison, 2 stale, 3
    /// stamp, 4 pattern), offset, found iteration.
    pub fn encode(&self) -> [u64; 3] {
        let (kind, found) = match self.wrong {
            Wrong::Poison => (1, 0),
            Wrong::Stale { found } => (2, found),
            Wrong::Stamp => (3, 0),
            Wrong::Pattern => (4, 0),
        };
        [kind, self.offset as u64, found]
    }

    /// The inverse of [`Mismatch::encode`]; `None` for anything else (kind 0: no mismatch).
    pub fn decode(w: [u64; 3]) -> Option<Self> {
        let wrong = match w[0] {
            1 => Wrong::Poison,
            2 => Wrong::Stale { found: w[2] },
            3 => Wrong::Stamp,
            4 => Wrong::Pattern,
            _ => return None,
        };
        Some(Mismatch {
            offset: w[1] as usize,
            wrong,
        })
    }

    /// What is wrong, in words, for a check against iteration `last`.
    pub fn describe(&self, last: u64) -> String {
        let at = self.offset;
        match self.wrong {
            Wrong::Poison => format!(
                "byte {at} still holds the poison written before the timed loop (no message was received there)"
            ),
            Wrong::Stale { found } => format!(
                "byte {at} holds the stamp of iteration {found}, not of the last iteration {last} (the buffer was \
                 not written after iteration {found})"
            ),
            Wrong::Stamp => {
                format!("byte {at} is an iteration stamp that is not the last iteration's ({last})")
            }
            Wrong::Pattern => format!("byte {at} differs from the sender's data pattern"),
        }
    }
}

/// Byte `p` of the pattern of `seed`.
fn pattern_byte(seed: u64, p: usize) -> u8 {
    word(seed, (p / 8) as u64).to_le_bytes()[p % 8]
}

/// Checks that `buf` holds exactly the last message of the sender: the pattern of `seed`
/// stamped with iteration `last` ([`fill`] then [`stamp`]). `poison` is the seed of the poison
/// the buffer was filled with before the timed loop, to tell "never received" apart.
pub fn check_last(buf: &[u8], seed: u64, poison: u64, last: u64) -> Option<Mismatch> {
    let n = buf.len();
    let mut want = vec![0u8; n];
    fill(&mut want, seed);
    stamp(&mut want, seed, last);
    if buf == want.as_slice() {
        return None;
    }
    let offset = buf.iter().zip(&want).position(|(a, b)| a != b)?;
    let end = (offset + 8).min(n);
    let wrong = if (offset..end).all(|p| buf[p] == pattern_byte(poison, p)) {
        Wrong::Poison
    } else if let Some((which, r)) = stamp_ranges(n)
        .into_iter()
        .enumerate()
        .find(|(_, r)| r.contains(&offset))
    {
        let full = r.len() == 8;
        let mut got = [0u8; 8];
        got[..r.len()].copy_from_slice(&buf[r]);
        // Undo the base: what is left is iteration + 1.
        let found = (u64::from_le_bytes(got) ^ stamp_word(seed, 0, which) ^ 1).wrapping_sub(1);
        if full && found < last {
            Wrong::Stale { found }
        } else {
            Wrong::Stamp
        }
    } else {
        Wrong::Pattern
    };
    Some(Mismatch { offset, wrong })
}

/// A page-aligned, zero-initialised byte buffer (OSU aligns its buffers to the page size).
#[derive(Debug)]
pub struct AlignedBuf {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    /// A buffer of `len` bytes starting on a page boundary. Its pages are touched only when
    /// written (the allocation is zeroed by the allocator, usually by mapping fresh pages).
    pub fn new(len: usize) -> Self {
        let raw = vec![0u8; len + PAGE];
        let off = (PAGE - raw.as_ptr().addr() % PAGE) % PAGE;
        Self { raw, off, len }
    }

    /// Capacity in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the capacity is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first `n` bytes.
    pub fn get(&self, n: usize) -> &[u8] {
        assert!(n <= self.len, "AlignedBuf::get({n}) beyond {}", self.len);
        &self.raw[self.off..self.off + n]
    }

    /// The first `n` bytes, writable.
    pub fn get_mut(&mut self, n: usize) -> &mut [u8] {
        assert!(
            n <= self.len,
            "AlignedBuf::get_mut({n}) beyond {}",
            self.len
        );
        &mut self.raw[self.off..self.off + n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_double_from_min_to_max_like_osu() {
        assert_eq!(SizeRange { min: 1, max: 8 }.sizes(), vec![1, 2, 4, 8]);
        assert_eq!(SizeRange { min: 0, max: 4 }.sizes(), vec![0, 1, 2, 4]);
        assert_eq!(SizeRange { min: 8, max: 100 }.sizes(), vec![8, 16, 32, 64]);
        assert_eq!(DEFAULT_RANGE.sizes().len(), 23);
    }

    #[test]
    fn ranges_accept_suffixes_and_osu_forms() {
        assert_eq!(
            parse_range("1:4M").unwrap(),
            SizeRange {
                min: 1,
                max: 4 << 20
            }
        );
        assert_eq!(
            parse_range("8:16m").unwrap(),
            SizeRange {
                min: 8,
                max: 16 << 20
            }
        );
        assert_eq!(
            parse_range("64K").unwrap(),
            SizeRange { min: 1, max: 65536 }
        );
        assert_eq!(
            parse_range("1K:").unwrap(),
            SizeRange {
                min: 1024,
                max: 4 << 20
            }
        );
        assert_eq!(parse_range(":2K").unwrap(), SizeRange { min: 1, max: 2048 });
        assert_eq!(
            parse_range("1G:1G").unwrap(),
            SizeRange {
                min: 1 << 30,
                max: 1 << 30
            }
        );
        assert!(parse_range("2G:2G").unwrap_err().contains("1 GiB"));
        assert!(parse_range("8:4").unwrap_err().contains("above maximum"));
        assert!(parse_range("x").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }

    #[test]
    fn loop_counts_are_osus_and_overrides_set_both_classes() {
        let lat = Test::Latency.default_counts();
        assert_eq!(
            lat.for_size(8192),
            Loop {
                iterations: 10_000,
                skip: 100
            }
        );
        assert_eq!(
            lat.for_size(8193),
            Loop {
                iterations: 1_000,
                skip: 10
            }
        );
        let bw = Test::Bw.default_counts();
        assert_eq!(
            bw.for_size(8),
            Loop {
                iterations: 100,
                skip: 10
            }
        );
        assert_eq!(
            bw.for_size(1 << 20),
            Loop {
                iterations: 20,
                skip: 2
            }
        );
        let o = bw.with_overrides(Some(7), Some(1));
        assert_eq!(
            o.for_size(8),
            Loop {
                iterations: 7,
                skip: 1
            }
        );
        assert_eq!(
            o.for_size(1 << 20),
            Loop {
                iterations: 7,
                skip: 1
            }
        );
    }

    #[test]
    fn figures_follow_osu_formulas() {
        // 1000 round trips in 2 ms: 1 µs half round trip.
        assert!((Test::Latency.figure(8, 1000, 64, 0.002) - 1.0).abs() < 1e-9);
        // 1000 exchanges in 2 ms: 2 µs each.
        assert!((Test::Exchange.figure(8, 1000, 64, 0.002) - 2.0).abs() < 1e-9);
        // 10 windows of 64 × 1 MB in 1 s: 640 MB/s; both ways: 1280.
        assert!((Test::Bw.figure(1_000_000, 10, 64, 1.0) - 640.0).abs() < 1e-9);
        assert!((Test::Bibw.figure(1_000_000, 10, 64, 1.0) - 1280.0).abs() < 1e-9);
        assert_eq!(
            Test::Latency.json(8, 0.25),
            r#"{"size":8,"latency_us":0.250}"#
        );
        assert_eq!(
            Test::Bw.json(1024, 2864.0),
            r#"{"size":1024,"bandwidth_MBps":2864.00}"#
        );
        assert_eq!(Test::Bw.row(1024, 2864.0), "1024                   2864.00");
        assert!(!Test::Bw.runs_size(0) && Test::Latency.runs_size(0));
    }

    #[test]
    fn pattern_check_finds_the_first_wrong_byte_and_differs_by_rank_size_and_slot() {
        for n in [0usize, 1, 7, 8, 9, 4096 + 3] {
            let mut b = vec![0u8; n];
            fill(&mut b, seed(n, 0, 0));
            assert_eq!(first_mismatch(&b, seed(n, 0, 0)), None);
            if n > 0 {
                b[n - 1] ^= 1;
                assert_eq!(first_mismatch(&b, seed(n, 0, 0)), Some(n - 1));
            }
        }
        let mut b = vec![0u8; 64];
        fill(&mut b, seed(64, 0, 0));
        assert!(first_mismatch(&b, seed(64, 1, 0)).is_some());
        assert!(first_mismatch(&b, seed(64, 0, 1)).is_some());
        assert!(first_mismatch(&b, seed(32, 0, 0)).is_some());
        assert!(first_mismatch(&b, poison_seed(64, 0, 0)).is_some());
    }

    #[test]
    fn stamp_ranges_are_disjoint_inside_the_message_and_at_most_24_bytes() {
        for n in 0..200usize {
            let r = stamp_ranges(n);
            let mut covered = vec![false; n];
            for x in r.iter().cloned() {
                assert!(x.end <= n, "{n}: {r:?}");
                for p in x {
                    assert!(!covered[p], "{n}: ranges overlap: {r:?}");
                    covered[p] = true;
                }
            }
            let total = covered.iter().filter(|&&c| c).count();
            let want = match n {
                0..=16 => n,
                17..=23 => 16,
                _ => 24,
            };
            assert_eq!(total, want, "{n}: {r:?}");
            // The first and the last byte are always stamped, and the middle from 24 bytes on.
            if n > 0 {
                assert!(covered[0] && covered[n - 1], "{n}: {r:?}");
            }
            assert_eq!(!r[1].is_empty(), n >= 24, "{n}: {r:?}");
        }
        assert_eq!(stamp_ranges(4 << 20)[1], (2 << 20)..(2 << 20) + 8);
    }

    /// The sender's message of iteration `i`: pattern, then stamp.
    fn message(n: usize, sd: u64, i: u64) -> Vec<u8> {
        let mut b = vec![0u8; n];
        fill(&mut b, sd);
        stamp(&mut b, sd, i);
        b
    }

    #[test]
    fn the_check_wants_exactly_the_last_iteration() {
        let last = 109;
        for n in [1usize, 2, 7, 8, 9, 16, 23, 24, 25, 100, 4096 + 3] {
            let sd = seed(n, 1, 3);
            let ps = poison_seed(n, 0, 3);
            assert_eq!(check_last(&message(n, sd, last), sd, ps, last), None, "{n}");
            // Every earlier iteration differs from the last one (for n < 8 the stamp has n
            // bytes, so iterations 256^n apart would look the same; none are here).
            for i in 0..last {
                let m = check_last(&message(n, sd, i), sd, ps, last)
                    .unwrap_or_else(|| panic!("{n}: iteration {i} passes for {last}"));
                assert_eq!(m.offset, 0, "{n}");
                let want = if n >= 8 {
                    Wrong::Stale { found: i }
                } else {
                    Wrong::Stamp
                };
                assert_eq!(m.wrong, want, "{n}, iteration {i}");
            }
            // Never written: the poison.
            let mut b = vec![0u8; n];
            fill(&mut b, ps);
            assert_eq!(
                check_last(&b, sd, ps, last),
                Some(Mismatch {
                    offset: 0,
                    wrong: Wrong::Poison
                }),
                "{n}"
            );
            // Only the first half written: the rest still poison.
            if n >= 16 {
                let mut b = message(n, sd, last);
                let half = n / 2;
                let mut p = vec![0u8; n];
                fill(&mut p, ps);
                b[half..].copy_from_slice(&p[half..]);
                assert_eq!(
                    check_last(&b, sd, ps, last),
                    Some(Mismatch {
                        offset: half,
                        wrong: Wrong::Poison
                    }),
                    "{n}"
                );
            }
            // The last stamp is checked too: the tail of an earlier iteration.
            if n > 8 {
                let mut b = message(n, sd, last);
                let tail = stamp_ranges(n)[2].clone();
                b[tail.clone()].copy_from_slice(&message(n, sd, last - 1)[tail.clone()]);
                let m = check_last(&b, sd, ps, last).expect("stale tail");
                assert_eq!(m.offset, tail.start, "{n}");
                let want = if tail.len() == 8 {
                    Wrong::Stale { found: last - 1 }
                } else {
                    Wrong::Stamp
                };
                assert_eq!(m.wrong, want, "{n}");
            }
            // One flipped byte of data outside the stamps.
            let stamped = stamp_ranges(n);
            if let Some(p) = (0..n).find(|p| !stamped.iter().any(|r| r.contains(p))) {
                let mut b = message(n, sd, last);
                b[p] ^= 0x40;
                assert_eq!(
                    check_last(&b, sd, ps, last),
                    Some(Mismatch {
                        offset: p,
                        wrong: Wrong::Pattern
                    }),
                    "{n}"
                );
            }
            // Another slot's or rank's message.
            if n >= 8 {
                let other = seed(n, 1, 4);
                assert!(check_last(&message(n, other, last), sd, ps, last).is_some());
            }
        }
        assert_eq!(check_last(&[], 1, 2, 5), None);
        let m = Mismatch {
            offset: 4096,
            wrong: Wrong::Stale { found: 0 },
        };
        assert_eq!(Mismatch::decode(m.encode()), Some(m));
        assert_eq!(Mismatch::decode([0, 0, 0]), None);
        assert!(
            m.describe(109)
                .contains("iteration 0, not of the last iteration 109")
        );
    }

    #[test]
    fn pattern_words_match_the_c_program() {
        // `osu_like --selftest` prints the same four numbers.
        let sd = seed(8, 1, 0);
        let mut b = [0u8; 16];
        fill(&mut b, sd);
        let w0 = u64::from_le_bytes(b[..8].try_into().unwrap());
        let w1 = u64::from_le_bytes(b[8..].try_into().unwrap());
        let mut p = [0u8; 8];
        fill(&mut p, poison_seed(8, 1, 0));
        assert_eq!(
            (sd, w0, w1, u64::from_le_bytes(p)),
            (
                0xf1ba_cdce_24bf_06c5,
                0x22ee_5278_8308_ca7f,
                0x0a3c_084a_57bf_a36e,
                0x82a4_4253_fe0e_4d42
            )
        );
    }

    #[test]
    fn aligned_buffers_start_on_a_page() {
        for n in [1usize, 100, 5000] {
            let mut b = AlignedBuf::new(n);
            assert_eq!(b.get(n).as_ptr().addr() % PAGE, 0);
            assert_eq!(b.get_mut(n).len(), n);
            assert_eq!(b.len(), n);
        }
    }
}
