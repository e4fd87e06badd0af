//! The collective tuner: a cost model that picks an algorithm per call, the same on every rank.
//!
//! Why one file: the cost formulas, the table of (operation, algorithm) and the measurements
//! that feed them are one model; a change to one cost touches all three.
//!
//! # Model
//!
//! Every algorithm is costed NCCL-style as
//!
//! ```text
//! time = α · steps  +  bytes_on_the_wire_per_rank / β  +  reduce_bytes / γ  (+ copies / μ)
//! ```
//!
//! with α the per-message latency (µs) and β the bandwidth (bytes/µs) of the link the
//! collective crosses (the node-local one when every rank is on one node, else the
//! inter-node one, which is then the bottleneck), γ the local reduction throughput (bytes of
//! the vector reduced per µs) and μ the memcpy throughput. `n` is the rank count, `B` the bytes
//! of [`Query::bytes`], `L = ⌈log₂ n⌉`, `p = 2^⌊log₂ n⌋` and `x = 1` when `n` is not a power of
//! two (else 0). The formula of each algorithm is on [`cost`].
//!
//! # Rank consistency
//!
//! [`choose`] is a pure function of ([`Tuning`], [`Query`], forced name). The [`Tuning`] every
//! rank holds is rank 0's, broadcast at init by [`measure`], and every [`Query`] field is
//! something all ranks of a collective share (rank count, the call's count × element size, the
//! op, `RCOMM_DETERMINISTIC` which init checks equal, the communicator's topology) — so every
//! rank computes the same choice without talking, and never runs a different schedule from
//! its peers.

use super::schedule::{self, Schedule};
use crate::coll_state::SchedKey;
pub(crate) use crate::coll_state::{Link, Origin, Tuning};
use crate::comm::{Communicator, Tag};
use crate::p2p::matcher::{Source, TagSel};
use crate::p2p::region::Region;
use crate::{CommError, Result};
use rcomm_runtime::algo::{Algo, Coll};
use rcomm_runtime::config::TuneMode;
use rcomm_runtime::rlog;
use std::fmt;
use std::time::Instant;

/// Ping-pongs of the measurement, on the world's internal context. Group helpers use tags 1
/// (allgather) and 2 (barrier) there and collectives 16 and up, so 3 and 4 meet nothing else.
const TAG_TUNE_PING: Tag = Tag(3);
/// Rank 0's broadcast of the [`Tuning`].
const TAG_TUNE_BCAST: Tag = Tag(4);

/// Small-message size of the latency ping-pong.
const LAT_BYTES: usize = 8;
/// Untimed round trips first (connection set-up, first-touch page faults), then timed ones.
const LAT_WARMUP: usize = 2;
const LAT_ITERS: usize = 10;
/// Large-message size of the bandwidth ping-pong: large enough that the bandwidth term
/// dominates α by two orders of magnitude on shared memory, small enough to keep init quick.
const BW_BYTES: usize = 256 << 10;
/// The same between nodes: networks (and rate limiters) pass a first burst at line rate, so one
/// probe overstates a slow link's bandwidth (by 15 % for a 256 KiB burst and a 2 MiB probe).
/// Two sizes are timed and β is the slope between them, in which a burst cancels out.
const BW_BYTES_INTER: usize = 2 << 20;
/// The smaller probe of the slope; above a typical limiter's burst.
const BW_BYTES_INTER_SMALL: usize = 512 << 10;
/// Message of the single-copy probe: where the ring's chunks of mid-sized collectives fall.
const SINGLE_COPY_PROBE_BYTES: usize = 1 << 20;
/// Single copy stays on unless pipelined copy takes at most this share of its time: a clear
/// loss, not noise, turns it off.
const SINGLE_COPY_LOSES: f64 = 0.75;
const BW_WARMUP: usize = 1;
const BW_ITERS: usize = 3;
/// Buffer of the γ and μ measurement (f32 elements: 1 MiB).
const LOCAL_ELEMS: usize = 256 << 10;
const LOCAL_ITERS: usize = 3;

/// Segment of the pipelined (chain) broadcast: the cost model assumes this size, so an
/// implementation should use it too.
pub(crate) const PIPELINE_SEGMENT: usize = 64 << 10;

/// A shared-memory flag hand-off (the synchronisation of the `shm` algorithms) costs this
/// fraction of a node-local p2p message's α: one cache line, no envelope, no matching.
const SHM_SYNC_FRACTION: f64 = 0.5;

/// What one collective call through the schedule runner costs beyond its messages, as a
/// fraction of a node-local α (see [`cost`]).
const SCHED_CALL_FRACTION: f64 = 0.5;

/// Default constants (used with `RCOMM_TUNE=default`, in a world of one rank, and for a link
/// rank 0 has no peer on). Node-local: shared memory with single-copy large messages on a
/// current x86 server, ~1 µs and ~8 GB/s. Inter-node: TCP over a 10 Gb/s class network,
/// ~20 µs and ~1.2 GB/s. γ: an in-place AVX2 `f32` sum over cache-resident data, ~10 GB/s of
/// vector; μ: memcpy of the same, ~10 GB/s.
const DEFAULT_INTRA_ALPHA_US: f64 = 1.0;
const DEFAULT_INTRA_BETA: f64 = 8_000.0;
const DEFAULT_INTER_ALPHA_US: f64 = 20.0;
const DEFAULT_INTER_BETA: f64 = 1_200.0;
const DEFAULT_GAMMA: f64 = 10_000.0;
const DEFAULT_MEMCPY: f64 = 10_000.0;

/// Measured values are clamped to these ranges, so one disturbed sample (a preempted rank on
/// an oversubscribed node, a clock step) cannot make the model absurd.
const ALPHA_RANGE_US: (f64, f64) = (0.05, 100_000.0);
const THROUGHPUT_RANGE: (f64, f64) = (1.0, 10_000_000.0);

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Measured => "measured",
            Origin::Default => "default",
        })
    }
}

impl Tuning {
    /// Length of [`to_bytes`](Self::to_bytes).
    pub(crate) const BYTES: usize = 6 * 8 + 1;

    /// The built-in constants.
    pub(crate) fn defaults() -> Self {
        Self {
            intra: Link {
                alpha_us: DEFAULT_INTRA_ALPHA_US,
                beta: DEFAULT_INTRA_BETA,
                origin: Origin::Default,
            },
            inter: Link {
                alpha_us: DEFAULT_INTER_ALPHA_US,
                beta: DEFAULT_INTER_BETA,
                origin: Origin::Default,
            },
            gamma: DEFAULT_GAMMA,
            memcpy: DEFAULT_MEMCPY,
            local_origin: Origin::Default,
            single_copy_off: false,
        }
    }

    /// Fixed-size little-endian encoding for the broadcast: six `f64` then a bit set of origins
    /// (bit 0 intra, 1 inter, 2 local; set = measured) and bit 3, single copy off.
    pub(crate) fn to_bytes(self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        let vals = [
            self.intra.alpha_us,
            self.intra.beta,
            self.inter.alpha_us,
            self.inter.beta,
            self.gamma,
            self.memcpy,
        ];
        for (chunk, v) in out.chunks_exact_mut(8).zip(vals) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        let bit = |o: Origin, b: u8| if o == Origin::Measured { 1 << b } else { 0 };
        out[48] = bit(self.intra.origin, 0)
            | bit(self.inter.origin, 1)
            | bit(self.local_origin, 2)
            | (self.single_copy_off as u8) << 3;
        out
    }

    /// Decodes [`to_bytes`](Self::to_bytes), refusing a wrong length, unknown origin bits and
    /// constants that are not finite and positive (they would make every cost meaningless).
    pub(crate) fn from_bytes(b: &[u8]) -> Result<Self, String> {
        if b.len() != Self::BYTES {
            return Err(format!(
                "tuning record of {} bytes, expected {}",
                b.len(),
                Self::BYTES
            ));
        }
        let mut vals = [0f64; 6];
        for (v, chunk) in vals.iter_mut().zip(b.chunks_exact(8)) {
            *v = f64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            if !(v.is_finite() && *v > 0.0) {
                return Err(format!("tuning constant {v} is not finite and positive"));
            }
        }
        let bits = b[48];
        if bits & !0b1111 != 0 {
            return Err(format!("tuning origin bits {bits:#04x} unknown"));
        }
        let origin = |i: u8| {
            if bits >> i & 1 == 1 {
                Origin::Measured
            } else {
                Origin::Default
            }
        };
        Ok(Self {
            intra: Link {
                alpha_us: vals[0],
                beta: vals[1],
                origin: origin(0),
            },
            inter: Link {
                alpha_us: vals[2],
                beta: vals[3],
                origin: origin(1),
            },
            gamma: vals[4],
            memcpy: vals[5],
            local_origin: origin(2),
            single_copy_off: bits >> 3 & 1 == 1,
        })
    }
}

impl fmt::Display for Tuning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "intra α {:.2} µs β {:.0} B/µs ({}), inter α {:.2} µs β {:.0} B/µs ({}), \
             γ {:.0} B/µs μ {:.0} B/µs ({}){}",
            self.intra.alpha_us,
            self.intra.beta,
            self.intra.origin,
            self.inter.alpha_us,
            self.inter.beta,
            self.inter.origin,
            self.gamma,
            self.memcpy,
            self.local_origin,
            if self.single_copy_off {
                ", single copy off (slower than pipelined copy here)"
            } else {
                ""
            }
        )
    }
}

const _: () = assert!(Coll::HOST.len() == crate::coll_state::MEMO_KINDS);

/// How an algorithm combines contributions, which decides when it may run a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Combine {
    /// It combines nothing (the kind does not reduce).
    Nothing,
    /// In one canonical order whatever the rank count and placement (`RCOMM_DETERMINISTIC=1`).
    Canonical,
    /// In rank order (valid for non-commutative ops), but not canonically.
    RankOrder,
    /// In an order of its own.
    Any,
}

/// The modelled time of one algorithm.
#[derive(Clone, Copy)]
enum Cost {
    /// Not a choice (a schedule variant another choice runs).
    None,
    /// A host algorithm: µs from the call's terms (see [`cost`]).
    Host(fn(&Terms) -> f64),
    /// A device allreduce on `nf` ranks of `s` kB each: (kB each rank receives, kB it reduces,
    /// steps), see [`device_allreduce_us`].
    Device(fn(f64, f64) -> (f64, f64, f64)),
}

/// What rcomm knows of one (operation, algorithm) pair: its cost model, when it may run, how
/// its schedule is built, and what runs when its own path cannot.
struct Spec {
    coll: Coll,
    algo: Algo,
    combine: Combine,
    cost: Cost,
    /// The cached schedule of an equal-block call, from its key; `None`: the algorithm runs
    /// on a path of its own (`shm`, `staged`), over per-rank block tables, or from the node
    /// map (`hier`: `schedule::hier_*`, which a call runs where the blocking composition of
    /// sub-communicator collectives cannot).
    build: Option<fn(&SchedKey) -> Schedule>,
    /// What a call that cannot take the algorithm's own path runs: a non-blocking one for
    /// `shm`; for `hier`'s allgather and reduce-scatter, unequal nodes or blocks.
    fallback: Option<Algo>,
}

/// The terms of one call's host cost formulas (see [`cost`]).
struct Terms<'a> {
    t: &'a Tuning,
    q: &'a Query,
    /// α and β of the link crossed, β shared by the ranks of a node in a flat algorithm.
    a: f64,
    bw: f64,
    g: f64,
    mu: f64,
    n: f64,
    l: f64,
    lg_p: f64,
    p: f64,
    x: f64,
    b: f64,
    frac: f64,
    sync: f64,
}

fn ring_like(c: &Terms) -> f64 {
    2.0 * (c.n - 1.0) * c.a + 2.0 * c.frac * c.b / c.bw + c.frac * c.b / c.g
}

fn one_per_peer(c: &Terms) -> f64 {
    (c.n - 1.0) * (c.a + c.b / c.bw)
}

fn gather_tree(c: &Terms) -> f64 {
    c.l * c.a + (c.n - 1.0) * c.b / c.bw + (c.n - 1.0) * c.b / c.mu
}

/// The registry's table: every algorithm of every operation rcomm runs (the operations' lists
/// and their order are [`Coll::algos`]'s; `tests` checks the two agree).
const SPECS: &[Spec] = {
    use Algo::*;
    use Coll::*;
    use Combine::{Any, Canonical, Nothing, RankOrder};
    const fn spec(coll: Coll, algo: Algo, combine: Combine, cost: Cost) -> Spec {
        Spec {
            coll,
            algo,
            combine,
            cost,
            build: None,
            fallback: None,
        }
    }
    const fn sched(s: Spec, build: fn(&SchedKey) -> Schedule) -> Spec {
        Spec {
            build: Some(build),
            ..s
        }
    }
    const fn falls_to(s: Spec, to: Algo) -> Spec {
        Spec {
            fallback: Some(to),
            ..s
        }
    }
    &[
        sched(spec(Allreduce, Ring, Any, Cost::Host(ring_like)), |k| {
            schedule::ring_allreduce(k.rank, k.n, k.count, k.elem)
        }),
        sched(
            spec(
                Allreduce,
                Rd,
                RankOrder,
                Cost::Host(|c| {
                    let s = c.lg_p + 2.0 * c.x;
                    s * c.a + s * c.b / c.bw + (c.lg_p + c.x) * c.b / c.g
                }),
            ),
            |k| schedule::recursive_doubling_allreduce(k.rank, k.n, k.count, k.elem),
        ),
        sched(
            spec(
                Allreduce,
                Rabenseifner,
                Any,
                Cost::Host(|c| {
                    let pf = (c.p - 1.0) / c.p;
                    (2.0 * c.lg_p + 2.0 * c.x) * c.a
                        + (2.0 * pf + 2.0 * c.x) * c.b / c.bw
                        + (pf + c.x) * c.b / c.g
                }),
            ),
            |k| schedule::rabenseifner_allreduce(k.rank, k.n, k.count, k.elem),
        ),
        sched(
            spec(Allreduce, Direct, Canonical, Cost::Host(ring_like)),
            |k| schedule::direct_allreduce(k.rank, k.n, k.count, k.elem),
        ),
        falls_to(
            spec(
                Allreduce,
                Shm,
                Canonical,
                Cost::Host(|c| 2.0 * c.sync + 2.0 * c.b / c.mu + c.frac * c.b / c.g),
            ),
            Direct,
        ),
        // Blocking: the node and cross-node sub-communicators; otherwise the composed
        // schedule (`schedule::hier_allreduce`), on any placement.
        spec(
            Allreduce,
            Hier,
            Any,
            Cost::Host(|c| hier_allreduce(c.t, c.q)),
        ),
        sched(
            spec(
                Bcast,
                Tree,
                Nothing,
                Cost::Host(|c| c.l * (c.a + c.b / c.bw)),
            ),
            |k| schedule::binomial_bcast(k.rank, k.n, k.root, k.count * k.elem),
        ),
        sched(
            spec(
                Bcast,
                ScatterAllgather,
                Nothing,
                Cost::Host(|c| (c.l + c.n - 1.0) * c.a + 2.0 * c.frac * c.b / c.bw),
            ),
            |k| schedule::scatter_allgather_bcast(k.rank, k.n, k.root, k.count * k.elem),
        ),
        sched(
            spec(
                Bcast,
                Pipeline,
                Nothing,
                Cost::Host(|c| {
                    // Segments hold whole elements, so there are at most `count` of them.
                    let count = (c.q.bytes / c.q.elem.max(1)).max(1);
                    let k = c.q.bytes.div_ceil(PIPELINE_SEGMENT).clamp(1, count) as f64;
                    (c.n - 2.0 + k) * (c.a + c.b / k / c.bw)
                }),
            ),
            |k| {
                let bytes = k.count * k.elem;
                schedule::pipeline_bcast(k.rank, k.n, k.root, bytes, super::pipeline_segment(bytes))
            },
        ),
        falls_to(
            spec(
                Bcast,
                Shm,
                Nothing,
                Cost::Host(|c| 2.0 * c.sync + 2.0 * c.b / c.mu),
            ),
            Tree,
        ),
        spec(Bcast, Hier, Nothing, Cost::Host(|c| hier_bcast(c.t, c.q))),
        sched(
            spec(
                Reduce,
                Tree,
                Any,
                Cost::Host(|c| c.l * (c.a + c.b / c.bw + c.b / c.g)),
            ),
            |k| schedule::binomial_reduce(k.rank, k.n, k.root, k.count * k.elem),
        ),
        sched(spec(Reduce, TreeOrdered, RankOrder, Cost::None), |k| {
            schedule::binomial_reduce_ordered(k.rank, k.n, k.root, k.count * k.elem)
        }),
        sched(
            spec(Reduce, Direct, Canonical, Cost::Host(ring_like)),
            |k| schedule::direct_reduce(k.rank, k.n, k.root, k.count, k.elem),
        ),
        sched(
            spec(Allgather, Ring, Nothing, Cost::Host(one_per_peer)),
            |k| schedule::ring_allgather(k.rank, k.n, k.count * k.elem),
        ),
        sched(
            spec(
                Allgather,
                Bruck,
                Nothing,
                Cost::Host(|c| c.l * c.a + (c.n - 1.0) * c.b / c.bw + c.n * c.b / c.mu),
            ),
            |k| schedule::bruck_allgather(k.rank, k.n, k.count * k.elem),
        ),
        // Every rank copies its block into its slot and every block out.
        falls_to(
            spec(
                Allgather,
                Shm,
                Nothing,
                Cost::Host(|c| 2.0 * c.sync + (c.n + 1.0) * c.b / c.mu),
            ),
            Ring,
        ),
        falls_to(
            spec(
                Allgather,
                Hier,
                Nothing,
                Cost::Host(|c| {
                    // Across nodes among this local index (p of them share the link), then
                    // the parts in the node, then the reordering copy.
                    let (t, (pp, m)) = (c.t, shape(c.q));
                    (m - 1.0) * (t.inter.alpha_us + c.b * pp / t.inter.beta)
                        + (pp - 1.0) * (t.intra.alpha_us + m * c.b / t.intra.beta)
                        + c.n * c.b / c.mu
                }),
            ),
            Ring,
        ),
        // Out of place, the ring works on a copy of the input and copies its block out; the
        // direct algorithm reads the input where it lies and copies only its own block.
        spec(
            ReduceScatter,
            Ring,
            Any,
            Cost::Host(|c| {
                (c.n - 1.0) * c.a
                    + c.frac * c.b / c.bw
                    + c.frac * c.b / c.g
                    + (c.b + c.b / c.n) / c.mu
            }),
        ),
        spec(
            ReduceScatter,
            Direct,
            Canonical,
            Cost::Host(|c| {
                (c.n - 1.0) * c.a + c.frac * c.b / c.bw + c.frac * c.b / c.g + c.b / c.n / c.mu
            }),
        ),
        // Every rank copies its input into its slot and folds its block of every slot.
        falls_to(
            spec(
                ReduceScatter,
                Shm,
                Canonical,
                Cost::Host(|c| 2.0 * c.sync + c.b / c.mu + c.frac * c.b / c.g),
            ),
            Direct,
        ),
        falls_to(
            spec(
                ReduceScatter,
                Hier,
                Any,
                Cost::Host(|c| {
                    let (t, (pp, m)) = (c.t, shape(c.q));
                    let (ai, bi, ae, be) = (
                        t.intra.alpha_us,
                        t.intra.beta,
                        t.inter.alpha_us,
                        t.inter.beta,
                    );
                    let (b, part) = (c.b, c.b / pp);
                    (pp - 1.0) * ai
                        + (pp - 1.0) / pp * b / bi
                        + (pp - 1.0) / pp * b / c.g
                        + b / c.mu
                        + (m - 1.0) * ae
                        + (m - 1.0) / m * part / (be / pp)
                        + (m - 1.0) / m * part / c.g
                }),
            ),
            Ring,
        ),
        spec(Alltoall, Pairwise, Nothing, Cost::Host(one_per_peer)),
        sched(
            spec(
                Alltoall,
                Bruck,
                Nothing,
                Cost::Host(|c| c.l * c.a + c.l * (c.n / 2.0) * c.b / c.bw + 2.0 * c.n * c.b / c.mu),
            ),
            |k| schedule::bruck_alltoall(k.rank, k.n, k.count * k.elem),
        ),
        // Every rank copies its n blocks into its slot and n blocks out.
        falls_to(
            spec(
                Alltoall,
                Shm,
                Nothing,
                Cost::Host(|c| 2.0 * c.sync + 2.0 * c.n * c.b / c.mu),
            ),
            Pairwise,
        ),
        spec(Gather, Linear, Nothing, Cost::Host(one_per_peer)),
        sched(spec(Gather, Tree, Nothing, Cost::Host(gather_tree)), |k| {
            schedule::binomial_gather(k.rank, k.n, k.root, k.count * k.elem)
        }),
        spec(Scatter, Linear, Nothing, Cost::Host(one_per_peer)),
        sched(spec(Scatter, Tree, Nothing, Cost::Host(gather_tree)), |k| {
            schedule::binomial_scatter(k.rank, k.n, k.root, k.count * k.elem)
        }),
        sched(
            spec(
                Scan,
                Chain,
                Canonical,
                Cost::Host(|c| (c.n - 1.0) * (c.a + c.b / c.bw + c.b / c.g)),
            ),
            |k| schedule::chain_scan(k.rank, k.n, k.count * k.elem, false),
        ),
        sched(spec(Scan, ExscanChain, Canonical, Cost::None), |k| {
            schedule::chain_scan(k.rank, k.n, k.count * k.elem, true)
        }),
        sched(
            spec(
                AllreduceDevice,
                OneShot,
                Any,
                Cost::Device(|nf, s| ((nf - 1.0) * s, (nf - 1.0) * s, 1.0)),
            ),
            |k| schedule::one_shot_allreduce(k.rank, k.n, k.count, k.elem),
        ),
        sched(
            spec(
                AllreduceDevice,
                TwoShot,
                Any,
                Cost::Device(|nf, s| (2.0 * (nf - 1.0) / nf * s, (nf - 1.0) / nf * s, 2.0)),
            ),
            |k| schedule::two_shot_allreduce(k.rank, k.n, k.count, k.elem),
        ),
        sched(
            spec(
                AllreduceDevice,
                Ring,
                Any,
                Cost::Device(|nf, s| {
                    (
                        2.0 * (nf - 1.0) / nf * s,
                        (nf - 1.0) / nf * s,
                        2.0 * (nf - 1.0),
                    )
                }),
            ),
            |k| schedule::ring_allreduce(k.rank, k.n, k.count, k.elem),
        ),
        spec(AllreduceDevice, Hier, Any, Cost::None),
        spec(AllreduceDevice, Staged, Any, Cost::None),
        spec(ReduceScatterDevice, Direct, Canonical, Cost::None),
        spec(ReduceScatterDevice, Ring, Any, Cost::None),
        spec(ReduceScatterDevice, Staged, Any, Cost::None),
        spec(AllgatherDevice, Direct, Nothing, Cost::None),
        spec(AllgatherDevice, Ring, Nothing, Cost::None),
        spec(AllgatherDevice, Staged, Nothing, Cost::None),
        sched(spec(BcastDevice, Tree, Nothing, Cost::None), |k| {
            schedule::binomial_bcast(k.rank, k.n, k.root, k.count * k.elem)
        }),
        spec(BcastDevice, Staged, Nothing, Cost::None),
        spec(AlltoallDevice, Pairwise, Nothing, Cost::None),
        spec(AlltoallDevice, Staged, Nothing, Cost::None),
    ]
};

fn spec(coll: Coll, algo: Algo) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.coll == coll && s.algo == algo)
}

/// The schedule of `algo` for `coll` (a schedule algorithm: the fallback applied already),
/// shaped by `key`.
pub(crate) fn build(coll: Coll, key: &SchedKey) -> Schedule {
    match spec(coll, key.algo).and_then(|s| s.build) {
        Some(b) => b(key),
        None => unreachable!("{coll}:{} builds no cached schedule", key.algo),
    }
}

/// What runs instead of `algo` where its own path cannot (`shm` in a non-blocking call,
/// `hier`'s allgather and reduce-scatter on unequal nodes or blocks): `algo` itself if it has
/// no such path.
pub(crate) fn fallback(coll: Coll, algo: Algo) -> Algo {
    spec(coll, algo).and_then(|s| s.fallback).unwrap_or(algo)
}

/// What the tuner needs to know about one collective call. Every field must be the same on
/// every rank of the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Query {
    /// The operation.
    pub kind: Coll,
    /// Ranks in the communicator.
    pub ranks: u32,
    /// Bytes, as count × element size of the MPI call: the whole vector for allreduce, bcast,
    /// reduce, scan and reduce_scatter (all `n` blocks of the input); ONE rank's block for
    /// allgather, alltoall (the block sent to each peer), gather and scatter.
    pub bytes: usize,
    /// Element size in bytes (segments never split an element).
    pub elem: usize,
    /// Whether the op is commutative; if not, only rank-ordered algorithms are allowed.
    pub commutative: bool,
    /// `RCOMM_DETERMINISTIC`: only algorithms with one canonical combination order.
    pub deterministic: bool,
    /// All ranks on one node and the shared-memory path available (enables `shm`).
    pub shm: bool,
    /// Some ranks on different nodes: costs use the inter-node link.
    pub inter_node: bool,
    /// Nodes the ranks are on (1 when `inter_node` is false); the hierarchical algorithms
    /// need more than one, and ranks per node share a node's link in the flat ones.
    pub nodes: u32,
}

/// The tuner's answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Choice {
    /// One of the query's kind's algorithms.
    pub algo: Algo,
    /// The model's time for it, µs (0 for a one-rank communicator).
    pub predicted_us: f64,
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (predicted {:.1} µs)", self.algo, self.predicted_us)
    }
}

/// ⌈log₂ n⌉ (0 for n ≤ 1); without `next_power_of_two`, which overflows above 2³¹.
fn ceil_log2(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

/// Modelled time of `algo` for `q`, µs; `None` for a name the kind does not have.
///
/// With α, β the link's constants (intra-node unless `q.inter_node`), γ reduce and μ memcpy
/// throughput, `n` ranks, `B` = `q.bytes`, `L = ⌈log₂ n⌉`, `p = 2^⌊log₂ n⌋`, `x = [n ≠ p]`,
/// `σ = SHM_SYNC_FRACTION · α_intra · L` (one shared-memory flag synchronisation); every
/// algorithm but `shm` also pays `SCHED_CALL_FRACTION · α_intra` per call (the schedule
/// runner's own software), which the table leaves out:
///
/// | kind | algo | time |
/// |---|---|---|
/// | allreduce | rd | `s·α + s·B/β + (log₂p + x)·B/γ`, `s = log₂p + 2x` (fold extras in, send results out) |
/// | allreduce | ring | `2(n−1)·α + 2(n−1)/n·B/β + (n−1)/n·B/γ` |
/// | allreduce | rabenseifner | `(2log₂p + 2x)·α + (2(p−1)/p + 2x)·B/β + ((p−1)/p + x)·B/γ` |
/// | allreduce | direct | `2(n−1)·α + 2(n−1)/n·B/β + (n−1)/n·B/γ` (see below) |
/// | allreduce | shm | `2σ + 2·B/μ + (n−1)/n·B/γ` |
/// | bcast | tree | `L·(α + B/β)` |
/// | bcast | scatter_allgather | `(L + n−1)·α + 2(n−1)/n·B/β` |
/// | bcast | pipeline | `(n−2+k)·(α + B/k/β)`, `k = ⌈B/PIPELINE_SEGMENT⌉` (chain; at most one segment per element) |
/// | bcast | shm | `2σ + 2·B/μ` |
/// | reduce | tree | `L·(α + B/β + B/γ)` |
/// | reduce | direct | `2(n−1)·α + 2(n−1)/n·B/β + (n−1)/n·B/γ` (reduce-scatter + gather) |
/// | allgather | ring | `(n−1)·(α + B/β)` |
/// | allgather | bruck | `L·α + (n−1)·B/β + n·B/μ` (final rotation) |
/// | reduce_scatter | ring, direct | `(n−1)·α + (n−1)/n·B/β + (n−1)/n·B/γ` |
/// | alltoall | pairwise | `(n−1)·(α + B/β)` |
/// | alltoall | bruck | `L·α + L·(n/2)·B/β + 2n·B/μ` (rotations before and after) |
/// | alltoall | shm | `2·sync + 2n·B/μ` (n blocks into the slot, n out) |
/// | reduce_scatter | shm | `2·sync + B/μ + (n−1)/n·B/γ` (input into the slot, fold one block) |
/// | gather, scatter | linear | `(n−1)·(α + B/β)` |
/// | gather, scatter | tree | `L·α + (n−1)·B/β + (n−1)·B/μ` (staging in relative-rank order) |
/// | scan | chain | `(n−1)·(α + B/β + B/γ)` |
///
/// `direct` posts its n−1 messages per phase at once, so their wire latencies overlap, but
/// each still pays the per-message software cost on one progress thread, which on shared
/// memory is most of α; we charge the upper bound, α per message. Its bytes equal the ring's
/// (a block to each owner, the owners' blocks back), so it ties with the ring and is chosen
/// only where it is the one allowed (non-commutative ops, `RCOMM_DETERMINISTIC`).
fn cost(t: &Tuning, q: &Query, algo: Algo) -> Option<f64> {
    let Cost::Host(formula) = spec(q.kind, algo)?.cost else {
        return None;
    };
    let link = if q.inter_node { t.inter } else { t.intra };
    let mut bw = link.beta;
    if q.inter_node && q.nodes > 1 {
        // Contention: in a flat algorithm every rank of a node may be on the wire at once, so
        // they share the node's link.
        bw /= (f64::from(q.ranks) / f64::from(q.nodes)).max(1.0);
    }
    let n = f64::from(q.ranks.max(1));
    let lg_p = f64::from(q.ranks.max(1).ilog2());
    let p = lg_p.exp2();
    let l = f64::from(ceil_log2(q.ranks));
    let time = formula(&Terms {
        t,
        q,
        a: link.alpha_us,
        bw,
        g: t.gamma,
        mu: t.memcpy,
        n,
        l,
        lg_p,
        p,
        x: if n == p { 0.0 } else { 1.0 },
        b: q.bytes as f64,
        frac: (n - 1.0) / n,
        sync: SHM_SYNC_FRACTION * t.intra.alpha_us * l,
    });
    // A call through the schedule runner (and a composition of them) also pays its own
    // software: schedule lookup, tag, requests, completion — measured at about half a
    // node-local α (benches/scripts/plan-validate.sh's o). The shared-memory algorithms skip it.
    let call = if algo == Algo::Shm {
        0.0
    } else {
        SCHED_CALL_FRACTION * t.intra.alpha_us
    };
    Some(time + call)
}

/// Ranks per node and nodes of `q` (regular placement assumed by the model).
fn shape(q: &Query) -> (f64, f64) {
    let m = f64::from(q.nodes.max(1));
    (f64::from(q.ranks.max(1)) / m, m)
}

/// Hierarchical allreduce: a reduce-scatter among the p ranks of a node (shared memory), an
/// allreduce of each 1/p stripe among the m nodes — the p stripes cross the node's link at
/// once, so each gets β_inter/p (the contention term) — and an allgather in the node.
fn hier_allreduce(t: &Tuning, q: &Query) -> f64 {
    let (p, m) = shape(q);
    let b = q.bytes as f64;
    let (ai, bi, ae, be, g) = (
        t.intra.alpha_us,
        t.intra.beta,
        t.inter.alpha_us,
        t.inter.beta,
        t.gamma,
    );
    let node = 2.0 * (p - 1.0) * ai + 2.0 * (p - 1.0) / p * b / bi + (p - 1.0) / p * b / g;
    let stripe = b / p;
    let cross =
        2.0 * (m - 1.0) * ae + 2.0 * (m - 1.0) / m * stripe / (be / p) + (m - 1.0) / m * stripe / g;
    node + cross
}

/// Hierarchical bcast: a tree among the nodes (one rank each), then a tree in every node.
fn hier_bcast(t: &Tuning, q: &Query) -> f64 {
    let (p, m) = shape(q);
    let b = q.bytes as f64;
    let lm = f64::from(ceil_log2(m as u32));
    let lp = f64::from(ceil_log2(p.ceil() as u32));
    lm * (t.inter.alpha_us + b / t.inter.beta) + lp * (t.intra.alpha_us + b / t.intra.beta)
}

/// The kind's algorithms that `ok` admits, as a message lists them.
fn listed(kind: Coll, ok: fn(Combine) -> bool) -> String {
    let names: Vec<&str> = kind
        .algos()
        .iter()
        .filter(|a| spec(kind, **a).is_some_and(|s| ok(s.combine)))
        .map(|a| a.name())
        .collect();
    names.join(", ")
}

impl Combine {
    fn rank_ordered(self) -> bool {
        self != Combine::Any
    }

    fn canonical(self) -> bool {
        matches!(self, Combine::Nothing | Combine::Canonical)
    }
}

/// Why `algo` may not run `q`, or `None` if it may. `algo` is one of the kind's algorithms.
fn forbidden(q: &Query, algo: Algo) -> Option<String> {
    let kind = q.kind;
    let combine = spec(kind, algo).map_or(Combine::Any, |s| s.combine);
    if !q.commutative && !combine.rank_ordered() {
        return Some(format!(
            "{kind}:{algo} combines contributions out of rank order, which a non-commutative op \
             does not allow; with this op {kind} may use {}",
            listed(kind, Combine::rank_ordered)
        ));
    }
    if q.deterministic && !combine.canonical() {
        return Some(format!(
            "{kind}:{algo} does not combine in one canonical order, which RCOMM_DETERMINISTIC=1 \
             requires; {kind} may then use {}",
            listed(kind, Combine::canonical)
        ));
    }
    if algo == Algo::Shm && (!q.shm || q.inter_node) {
        return Some(format!(
            "{kind}:{algo} needs every rank on one node with the shared-memory path available"
        ));
    }
    None
}

/// Picks the algorithm for `q`: `forced` (from `RCOMM_ALGO`; `None` to choose) if it is
/// allowed, else the allowed algorithm of least modelled time (ties: [`Coll::algos`] order).
///
/// Errors (a message for the user) when `forced` is not an algorithm of the kind or is not
/// allowed for this call (non-commutative op, `RCOMM_DETERMINISTIC`, no shared memory). A pure
/// function: equal inputs give equal choices on every rank.
pub(crate) fn choose(t: &Tuning, q: &Query, forced: Option<Algo>) -> Result<Choice, String> {
    let algos = q.kind.algos();
    let kind = q.kind;
    let price = |algo: Algo| Choice {
        algo,
        // A one-rank collective is a local copy at most.
        predicted_us: if q.ranks <= 1 {
            0.0
        } else {
            cost(t, q, algo).unwrap_or(f64::INFINITY)
        },
    };
    if let Some(algo) = forced {
        if !kind.accepts(algo) {
            return Err(format!(
                "{kind} has no algorithm `{algo}`; valid: {}",
                kind.algo_names().join(", ")
            ));
        }
        return match forbidden(q, algo) {
            Some(why) => Err(why),
            None => Ok(price(algo)),
        };
    }
    algos
        .iter()
        .copied()
        .filter(|a| forbidden(q, *a).is_none())
        // On one node the hierarchical algorithms are their node phase: valid when forced,
        // never a choice.
        .filter(|a| *a != Algo::Hier || q.nodes > 1)
        .map(price)
        // Strictly less: the first of equal costs wins. NaN cannot arise from valid constants,
        // but total_cmp keeps the order total whatever happens.
        .fold(None, |best: Option<Choice>, c| match best {
            Some(b) if c.predicted_us.total_cmp(&b.predicted_us).is_ge() => Some(b),
            _ => Some(c),
        })
        .ok_or_else(|| format!("no {kind} algorithm is allowed for this call"))
}

impl Communicator {
    /// The tuning constants every communicator of the process shares (rank 0's, set at init).
    pub(crate) fn tuning(&self) -> Tuning {
        self.shared()
            .tuning
            .get()
            .copied()
            .unwrap_or_else(Tuning::defaults)
    }

    /// Blocking send on the internal context (world ranks: `measure` runs on the world).
    fn tune_send(&self, buf: &[u8], dest: u32, tag: Tag) -> Result<()> {
        let req = self.shared().lock().send(
            self.ctx() + 1,
            dest,
            tag.0,
            Region::from_ref(buf),
            "tune",
            true,
        )?;
        match req {
            Some(req) => self.shared().wait(req).map(drop),
            None => Ok(()),
        }
    }

    /// Blocking receive of exactly `buf.len()` bytes on the internal context.
    fn tune_recv(&self, buf: &mut [u8], src: u32, tag: Tag) -> Result<()> {
        let want = buf.len();
        let req = self.shared().lock().irecv(
            self.ctx() + 1,
            Source::Rank(src),
            TagSel::Tag(tag.0),
            Region::from_mut(buf),
            "tune",
        )?;
        let st = self.shared().wait(req)?;
        if st.bytes != want {
            return Err(CommError::Mismatch {
                what: "tuning message size".into(),
                rank: src,
                theirs: st.bytes as u64,
                ours: want as u64,
            });
        }
        Ok(())
    }
}

/// Median of a few samples (robust against one preempted iteration).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn clamp(v: f64, (lo, hi): (f64, f64)) -> f64 {
    if v.is_finite() { v.clamp(lo, hi) } else { hi }
}

/// Rank 0's side of the ping-pong with `peer`: α from 8-byte round trips, β from large ones
/// (one-way time minus α), or from the slope between two sizes when `small_bytes` is given.
fn ping(
    world: &Communicator,
    peer: u32,
    bw_bytes: usize,
    small_bytes: Option<usize>,
    probe_single_copy: bool,
) -> Result<(Link, bool)> {
    let mut small = [0u8; LAT_BYTES];
    small[0] = 1; // "measure": the peer answers every ping
    small[1] = probe_single_copy as u8;
    let mut back = [0u8; LAT_BYTES];
    let mut lat = Vec::with_capacity(LAT_ITERS);
    for i in 0..LAT_WARMUP + LAT_ITERS {
        let t0 = Instant::now();
        world.tune_send(&small, peer, TAG_TUNE_PING)?;
        world.tune_recv(&mut back, peer, TAG_TUNE_PING)?;
        if i >= LAT_WARMUP {
            lat.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    let alpha = clamp(median(lat), ALPHA_RANGE_US);
    let one_way = |bytes: usize| -> Result<f64> {
        let big = vec![0u8; bytes];
        let mut big_back = vec![0u8; bytes];
        let mut bw = Vec::with_capacity(BW_ITERS);
        for i in 0..BW_WARMUP + BW_ITERS {
            let t0 = Instant::now();
            world.tune_send(&big, peer, TAG_TUNE_PING)?;
            world.tune_recv(&mut big_back, peer, TAG_TUNE_PING)?;
            if i >= BW_WARMUP {
                bw.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        Ok(median(bw))
    };
    let t_big = one_way(bw_bytes)?;
    // A one-way large message costs α + B/β; what is left after α is the bandwidth term.
    let mut beta = bw_bytes as f64 / (t_big - alpha).max(1e-3);
    if let Some(sb) = small_bytes {
        let t_small = one_way(sb)?;
        let slope = (bw_bytes - sb) as f64 / (t_big - t_small);
        // The slope only lowers β (a burst makes the large probe look fast); a slope far
        // below is noise on a fast link, where both probes take microseconds.
        if slope.is_finite() && slope > 0.0 {
            beta = beta.min(slope.max(beta / 2.0));
        }
    }
    let mut single_copy_off = false;
    if probe_single_copy {
        let with = one_way(SINGLE_COPY_PROBE_BYTES)?;
        let without = without_single_copy(world, || one_way(SINGLE_COPY_PROBE_BYTES))?;
        single_copy_off = without < SINGLE_COPY_LOSES * with;
        // β stays the 256 KiB ping's even when single copy goes: the pipelined probe's 1 MiB
        // runs in cache and would price a 16 MiB ring (memory-bound) at twice its speed; one β
        // cannot hold both regimes (the planner's validation reads them by working set).
        rlog!(
            Info,
            "COLL",
            "1 MiB to rank {peer}: {with:.0} µs by single copy, {without:.0} µs by pipelined copy{}",
            if single_copy_off {
                ": single copy off"
            } else {
                ""
            }
        );
    }
    Ok((
        Link {
            alpha_us: alpha,
            beta: clamp(beta, THROUGHPUT_RANGE),
            origin: Origin::Measured,
        },
        single_copy_off,
    ))
}

/// Runs `f` with single copy off on this rank (it receives by pipelined copy), then restores
/// it. Both sides of the probe call it at the same point of their exchange, between two
/// blocking calls, so no message straddles the switch.
fn without_single_copy<R>(world: &Communicator, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let saved = world.shared().lock().single_copy_max();
    world.shared().lock().set_single_copy_max(0);
    let r = f();
    world.shared().lock().set_single_copy_max(saved);
    r
}

/// A peer's side: answer rank 0's pings until the fixed iteration counts are done, or return
/// at once when rank 0 says it does not measure.
fn pong(world: &Communicator, bw_bytes: usize, small_bytes: Option<usize>) -> Result<()> {
    let mut small = [0u8; LAT_BYTES];
    world.tune_recv(&mut small, 0, TAG_TUNE_PING)?;
    if small[0] == 0 {
        return Ok(());
    }
    world.tune_send(&small, 0, TAG_TUNE_PING)?;
    for _ in 1..LAT_WARMUP + LAT_ITERS {
        world.tune_recv(&mut small, 0, TAG_TUNE_PING)?;
        world.tune_send(&small, 0, TAG_TUNE_PING)?;
    }
    let round_trips = |bytes: usize| -> Result<()> {
        let mut big = vec![0u8; bytes];
        for _ in 0..BW_WARMUP + BW_ITERS {
            world.tune_recv(&mut big, 0, TAG_TUNE_PING)?;
            world.tune_send(&big, 0, TAG_TUNE_PING)?;
        }
        Ok(())
    };
    for bytes in std::iter::once(bw_bytes).chain(small_bytes) {
        round_trips(bytes)?;
    }
    // Rank 0's single-copy probe (the second byte of its first ping): the same round trips by
    // single copy, then by pipelined copy.
    if small[1] == 1 {
        round_trips(SINGLE_COPY_PROBE_BYTES)?;
        without_single_copy(world, || round_trips(SINGLE_COPY_PROBE_BYTES))?;
    }
    Ok(())
}

/// γ (in-place `f32` sum) and μ (memcpy) on rank 0, best of a few runs over 1 MiB.
fn measure_local() -> (f64, f64) {
    let src = vec![1.0f32; LOCAL_ELEMS];
    let mut dst = vec![0.5f32; LOCAL_ELEMS];
    let bytes = (LOCAL_ELEMS * 4) as f64;
    let (mut red, mut cpy) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..LOCAL_ITERS {
        let t0 = Instant::now();
        let ok = rcomm_kernels::reduce_into(
            rcomm_kernels::Op::Sum,
            rcomm_kernels::Dtype::F32,
            bytemuck::cast_slice_mut(&mut dst),
            bytemuck::cast_slice(&src),
        );
        let t = t0.elapsed().as_secs_f64() * 1e6;
        if ok.is_ok() {
            red = red.min(t);
        }
        let t0 = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        cpy = cpy.min(t0.elapsed().as_secs_f64() * 1e6);
    }
    let rate = |us: f64, default: f64| {
        if us.is_finite() {
            clamp(bytes / us.max(1e-3), THROUGHPUT_RANGE)
        } else {
            default
        }
    };
    (rate(red, DEFAULT_GAMMA), rate(cpy, DEFAULT_MEMCPY))
}

/// The world's tuning, collectively (every rank calls it once at init): rank 0 measures α and
/// β to one peer on its node and one on another node (whichever exist), γ and μ locally —
/// unless its `mode` is [`TuneMode::Default`] — then sends the result to every rank along a
/// binomial tree. Peers learn from rank 0's first ping whether it measures, so ranks whose
/// `RCOMM_TUNE` differs still agree (they all end up with rank 0's values).
///
/// On rank 0's node it also probes single copy, only when asked (`probe_single_copy`:
/// `RCOMM_SHM_CMA=auto` and no `RCOMM_SHM_CMA_MAX`) and rank 0 can read
/// its node peer's memory, 1 MiB round trips by single copy and by pipelined copy; if pipelined
/// copy takes under 3/4 of the time, every rank turns single copy off. Whether
/// a cross-memory-attach read beats two overlapped copies depends on the kernel and hypervisor (page
/// pinning) and, on a VM, on which host cores its vCPUs sit at that moment: on one 2-vCPU VM it
/// lost by 2× at 1–4 MiB in one hour and won in another, and the probe's verdict changed from
/// launch to launch (4 of 10 launches turned it off), so it is not the default.
pub(crate) fn measure(
    world: &Communicator,
    mode: TuneMode,
    probe_single_copy: bool,
) -> Result<Tuning> {
    measure_on(world, mode, probe_single_copy).map_err(|e| world.with_other_losses(e))
}

fn measure_on(world: &Communicator, mode: TuneMode, probe_single_copy: bool) -> Result<Tuning> {
    let (n, me) = (world.size(), world.rank());
    if n == 1 {
        return Ok(Tuning::defaults());
    }
    let t0 = Instant::now();
    let node_of = &world.shared().node_of;
    // The same choice on every rank: node_of is identical everywhere.
    let intra_peer = (1..n).find(|&r| node_of[r as usize] == node_of[0]);
    let inter_peer = (1..n).find(|&r| node_of[r as usize] != node_of[0]);
    let mut tuning = Tuning::defaults();
    if me == 0 {
        for (peer, link, bytes, small, on_node) in [
            (intra_peer, &mut tuning.intra, BW_BYTES, None, true),
            (
                inter_peer,
                &mut tuning.inter,
                BW_BYTES_INTER,
                Some(BW_BYTES_INTER_SMALL),
                false,
            ),
        ] {
            let Some(peer) = peer else { continue };
            if mode == TuneMode::Measure {
                let probe =
                    on_node && probe_single_copy && world.shared().lock().single_copy_with(peer);
                let off;
                (*link, off) = ping(world, peer, bytes, small, probe)?;
                tuning.single_copy_off |= off;
            } else {
                world.tune_send(&[0u8; LAT_BYTES], peer, TAG_TUNE_PING)?;
            }
        }
        if mode == TuneMode::Measure {
            (tuning.gamma, tuning.memcpy) = measure_local();
            tuning.local_origin = Origin::Measured;
        }
    } else if Some(me) == intra_peer {
        pong(world, BW_BYTES, None)?;
    } else if Some(me) == inter_peer {
        pong(world, BW_BYTES_INTER, Some(BW_BYTES_INTER_SMALL))?;
    }
    // Binomial broadcast from rank 0: receive from the parent, then send to children.
    let mut buf = tuning.to_bytes();
    let mut mask = 1u32;
    while mask < n {
        if me & mask != 0 {
            world.tune_recv(&mut buf, me - mask, TAG_TUNE_BCAST)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if me + mask < n {
            world.tune_send(&buf, me + mask, TAG_TUNE_BCAST)?;
        }
        mask >>= 1;
    }
    let tuning = Tuning::from_bytes(&buf).map_err(|why| CommError::Protocol { rank: 0, why })?;
    if tuning.single_copy_off {
        world.shared().lock().set_single_copy_max(0);
    }
    if me == 0 {
        rlog!(
            Info,
            "COLL",
            "tuning ({mode:?}, {:.0} µs): {tuning}",
            t0.elapsed().as_secs_f64() * 1e6
        );
        log_choices(&tuning, n, inter_peer.is_some(), inter_peer.is_none());
    } else {
        rlog!(Trace, "COLL", "tuning from rank 0: {tuning}");
    }
    Ok(tuning)
}

/// With `RCOMM_DEBUG=INFO RCOMM_DEBUG_SUBSYS=COLL`, what the model picks for the world across
/// sizes: a quick check of the measured constants' effect.
fn log_choices(t: &Tuning, n: u32, inter_node: bool, one_node: bool) {
    let on = rcomm_runtime::config::global()
        .as_ref()
        .is_ok_and(|c| c.logs(rcomm_runtime::config::Level::Info, "COLL"));
    if !on {
        return;
    }
    for &kind in Coll::HOST {
        let picks: Vec<String> = [8usize, 64 << 10, 16 << 20]
            .iter()
            .map(|&bytes| {
                let q = Query {
                    kind,
                    ranks: n,
                    bytes,
                    elem: 4,
                    commutative: true,
                    deterministic: false,
                    shm: one_node,
                    inter_node,
                    nodes: if inter_node { 2 } else { 1 },
                };
                match choose(t, &q, None) {
                    Ok(c) => format!("{bytes} B: {c}"),
                    Err(e) => format!("{bytes} B: {e}"),
                }
            })
            .collect();
        rlog!(
            Info,
            "COLL",
            "model on {n} ranks, {}: {}",
            kind.name(),
            picks.join("; ")
        );
    }
}

// ---------------------------------------------------------------------------------------
// Collectives on device buffers.

/// The device link class is the device part's (`comm::device_part`); its cost is the tuner's.
pub(crate) use crate::comm::DevLink;

impl DevLink {
    /// (α in µs per step, β in GB/s). `SameGpu` is measured on one H200 (P11's point-to-point:
    /// IPC 256 MiB at 1589 GB/s; latency 18 µs under MPS, 153 µs without, so α takes a value
    /// between); the others are nominal until measured (NVLink 4 per direction, PCIe 5 x16,
    /// pinned host staging).
    pub(crate) fn alpha_beta(self) -> (f64, f64) {
        match self {
            DevLink::SameGpu => (40.0, 1589.0),
            DevLink::NvLink => (40.0, 370.0),
            DevLink::Pcie => (40.0, 45.0),
            DevLink::Staged => (60.0, 10.0),
        }
    }
}

/// Modelled µs of the device allreduce `algo` on `n` ranks, `bytes` each, over `link`: steps
/// cost α, bytes cost what each GPU moves over β (on one GPU, what all ranks move together).
pub(crate) fn device_allreduce_us(algo: Algo, n: u32, bytes: usize, link: DevLink) -> f64 {
    let Some(Cost::Device(terms)) = spec(Coll::AllreduceDevice, algo).map(|s| s.cost) else {
        return f64::INFINITY;
    };
    let (a, b) = link.alpha_beta();
    let (nf, s) = (f64::from(n.max(1)), bytes as f64 / 1e3);
    // Bytes each rank receives, bytes it reduces, and steps.
    let (recv, reduced, steps) = terms(nf, s);
    let shared = if link == DevLink::SameGpu { nf } else { 1.0 };
    // A reduction reads two operands and writes one at the GPU's memory bandwidth
    // (`DEV_MEM_GBPS`).
    steps * a + (recv / b + 3.0 * reduced / DEV_MEM_GBPS) * shared
}

/// Memory bandwidth a reduction kernel streams at, GB/s: twice the device-to-device copy
/// measured on one H200 (1895 GB/s, each byte read and written).
const DEV_MEM_GBPS: f64 = 3790.0;

/// The device allreduce for `n` ranks and `bytes` over `link` by the cost model — one-shot,
/// two-shot or ring over the device executor — or `forced` (one of those, or `staged`
/// through the host collective). Over host staging (`Staged`) every message crosses the host
/// while the reductions stay on the device; the model still prefers two-shot for large
/// buffers (fewer steps than the ring at the same bytes).
pub(crate) fn device_allreduce(n: u32, bytes: usize, link: DevLink, forced: Option<Algo>) -> Algo {
    if let Some(f) = forced.filter(|f| *f != Algo::Hier && Coll::AllreduceDevice.accepts(*f)) {
        return f;
    }
    // The modelled ones, in the table's order (the first of equal costs wins).
    Coll::AllreduceDevice
        .algos()
        .iter()
        .copied()
        .filter(|a| matches!(spec(Coll::AllreduceDevice, *a), Some(s) if matches!(s.cost, Cost::Device(_))))
        .min_by(|x, y| {
            device_allreduce_us(*x, n, bytes, link).total_cmp(&device_allreduce_us(*y, n, bytes, link))
        })
        .unwrap_or(Algo::Ring)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(kind: Coll, ranks: u32, bytes: usize) -> Query {
        Query {
            kind,
            ranks,
            bytes,
            elem: 4,
            commutative: true,
            deterministic: false,
            shm: false,
            inter_node: false,
            nodes: 1,
        }
    }

    fn pick(query: &Query) -> Algo {
        choose(&Tuning::defaults(), query, None).unwrap().algo
    }

    #[test]
    fn every_listed_algorithm_has_a_cost_and_every_kind_is_in_algos() {
        let t = Tuning::defaults();
        for &kind in Coll::HOST {
            assert!(!kind.algos().is_empty(), "{kind:?}");
            for &a in kind.algos() {
                let c = cost(&t, &q(kind, 8, 1 << 20), a);
                assert!(c.is_some_and(|c| c.is_finite() && c > 0.0), "{kind:?} {a}");
            }
        }
        // The table holds every pair the registry lists, and no other choice.
        for s in SPECS {
            let listed = s.coll.accepts(s.algo);
            assert_eq!(
                listed,
                !matches!(s.cost, Cost::None) || s.coll.is_device(),
                "{}:{}",
                s.coll,
                s.algo
            );
        }
        for c in Coll::all() {
            for &a in c.algos() {
                assert!(spec(c, a).is_some(), "{c}:{a} missing from the table");
            }
        }
    }

    #[test]
    fn device_allreduce_is_one_shot_when_small_and_two_shot_when_large_on_one_gpu() {
        for n in [2, 4, 8] {
            assert_eq!(
                device_allreduce(n, 8, DevLink::SameGpu, None),
                Algo::OneShot
            );
            assert_eq!(
                device_allreduce(n, 256 << 20, DevLink::SameGpu, None),
                Algo::TwoShot
            );
            assert_eq!(
                device_allreduce(n, 256 << 20, DevLink::NvLink, None),
                Algo::TwoShot
            );
        }
        assert_eq!(
            device_allreduce(64, 256 << 20, DevLink::Staged, None),
            Algo::TwoShot
        );
        assert_eq!(
            device_allreduce(4, 8, DevLink::SameGpu, Some(Algo::Ring)),
            Algo::Ring
        );
        assert_eq!(
            device_allreduce(4, 8, DevLink::SameGpu, Some(Algo::Staged)),
            Algo::Staged
        );
        for link in [
            DevLink::SameGpu,
            DevLink::NvLink,
            DevLink::Pcie,
            DevLink::Staged,
        ] {
            let mut last = 0.0;
            for b in [0usize, 8, 1 << 20, 1 << 30] {
                let t = device_allreduce_us(device_allreduce(4, b, link, None), 4, b, link);
                assert!(t >= last && t.is_finite(), "{link:?} {b}");
                last = t;
            }
        }
    }

    #[test]
    fn ceil_log2_over_the_whole_range() {
        let cases = [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 3),
            (1 << 31, 31),
        ];
        for (n, l) in cases {
            assert_eq!(ceil_log2(n), l, "{n}");
        }
        assert_eq!(ceil_log2((1 << 31) + 1), 32);
        assert_eq!(ceil_log2(u32::MAX), 32);
    }

    #[test]
    fn choose_is_pure() {
        let t = Tuning::defaults();
        for &kind in Coll::HOST {
            for bytes in [0, 8, 4096, 1 << 20, 1 << 30] {
                let query = q(kind, 6, bytes);
                assert_eq!(choose(&t, &query, None), choose(&t, &query, None));
            }
        }
    }

    #[test]
    fn small_messages_pick_latency_algorithms_and_large_ones_bandwidth_algorithms() {
        use Coll::*;
        for n in [4, 8, 16] {
            assert_eq!(pick(&q(Allreduce, n, 8)), Algo::Rd, "n={n}");
            assert_eq!(
                pick(&q(Allreduce, n, 64 << 20)),
                Algo::Rabenseifner,
                "n={n}"
            );
            assert_eq!(pick(&q(Bcast, n, 8)), Algo::Tree, "n={n}");
            assert_ne!(pick(&q(Bcast, n, 64 << 20)), Algo::Tree, "n={n}");
            assert_eq!(pick(&q(Reduce, n, 8)), Algo::Tree, "n={n}");
            assert_eq!(pick(&q(Reduce, n, 64 << 20)), Algo::Direct, "n={n}");
            assert_eq!(pick(&q(Allgather, n, 8)), Algo::Bruck, "n={n}");
            assert_eq!(pick(&q(Alltoall, n, 8)), Algo::Bruck, "n={n}");
            assert_eq!(pick(&q(Alltoall, n, 1 << 20)), Algo::Pairwise, "n={n}");
            assert_eq!(pick(&q(Gather, n, 8)), Algo::Tree, "n={n}");
            assert_eq!(pick(&q(Scatter, n, 1 << 20)), Algo::Linear, "n={n}");
            assert_eq!(pick(&q(Scan, n, 1 << 20)), Algo::Chain, "n={n}");
        }
        // Not a power of two: Rabenseifner pays a whole-buffer fold, the ring does not.
        assert_eq!(pick(&q(Allreduce, 6, 64 << 20)), Algo::Ring);
        // Two ranks: recursive doubling is one exchange, at every size.
        assert_eq!(pick(&q(Allreduce, 2, 8)), Algo::Rd);
        // Between nodes with one rank each the same shape holds with the slower link.
        let inter = Query {
            inter_node: true,
            nodes: 8,
            ..q(Allreduce, 8, 8)
        };
        assert_eq!(pick(&inter), Algo::Rd);
        let inter = Query {
            bytes: 64 << 20,
            ..inter
        };
        assert_eq!(pick(&inter), Algo::Rabenseifner);
        // Four ranks on each of two nodes: the hierarchical algorithms cross the slow link
        // less often (small) and share it better (large); never on one node.
        let two = Query {
            inter_node: true,
            nodes: 2,
            ..q(Allreduce, 8, 8)
        };
        assert_eq!(pick(&two), Algo::Hier);
        assert_eq!(
            pick(&Query {
                bytes: 64 << 20,
                ..two
            }),
            Algo::Hier
        );
        assert_eq!(
            pick(&Query {
                kind: Bcast,
                bytes: 64 << 20,
                ..two
            }),
            Algo::Hier
        );
        // The splits of tests/tests/coll_table.rs (3 and 4 ranks on 2 nodes, 4 MiB) and
        // checked.rs (4 ranks, 300000 f32), with the built-in constants: those launches assert
        // these choices end to end.
        for (n, bytes) in [(3, 4 << 20), (4, 4 << 20), (4, 1_200_000)] {
            assert_eq!(
                pick(&Query {
                    ranks: n,
                    bytes,
                    ..two
                }),
                Algo::Hier,
                "{n} ranks on 2 nodes, {bytes} B"
            );
        }
        for kind in [Allreduce, Bcast] {
            for bytes in [8, 64 << 20] {
                assert_ne!(pick(&q(kind, 8, bytes)), Algo::Hier);
            }
        }
    }

    #[test]
    fn shm_is_chosen_only_where_available() {
        let mut query = q(Coll::Allreduce, 8, 1 << 20);
        assert_ne!(pick(&query), Algo::Shm);
        query.shm = true;
        assert_eq!(pick(&query), Algo::Shm);
        // An inconsistent query (shm but inter-node) never gets shm.
        query.inter_node = true;
        assert_ne!(pick(&query), Algo::Shm);
        let e = choose(&Tuning::defaults(), &query, Some(Algo::Shm)).unwrap_err();
        assert!(e.contains("one node"), "{e}");
    }

    #[test]
    fn small_allgathers_alltoalls_and_reduce_scatters_on_one_node_use_the_windows() {
        for (kind, n, bytes) in [2, 8]
            .into_iter()
            .flat_map(|n| {
                [
                    (Coll::Allgather, n, 8),
                    (Coll::Alltoall, n, 8),
                    (Coll::ReduceScatter, n, 8 * n as usize),
                ]
            })
            .chain([(Coll::Allgather, 8, 4096), (Coll::Alltoall, 8, 4096)])
        {
            let mut query = q(kind, n, bytes);
            assert_ne!(
                pick(&query),
                Algo::Shm,
                "{kind:?} {n} ranks, {bytes} B, no shared memory"
            );
            query.shm = true;
            assert_eq!(
                pick(&query),
                Algo::Shm,
                "{kind:?} {n} ranks, {bytes} B on one node"
            );
            query.inter_node = true;
            assert_ne!(
                pick(&query),
                Algo::Shm,
                "{kind:?} {n} ranks, {bytes} B across nodes"
            );
        }
    }

    #[test]
    fn forcing_is_respected_and_auto_means_choose() {
        let t = Tuning::defaults();
        let query = q(Coll::Allreduce, 8, 8);
        for &a in Coll::Allreduce.algos().iter().filter(|a| **a != Algo::Shm) {
            assert_eq!(choose(&t, &query, Some(a)).unwrap().algo, a);
        }
        let e = choose(&t, &query, Some(Algo::Tree)).unwrap_err();
        assert!(
            e.contains("allreduce has no algorithm `tree`; valid: auto, ring, rd"),
            "{e}"
        );
    }

    #[test]
    fn non_commutative_ops_get_rank_ordered_algorithms_only() {
        let t = Tuning::defaults();
        let mut query = q(Coll::Allreduce, 8, 64 << 20);
        query.commutative = false;
        assert_eq!(pick(&query), Algo::Direct);
        query.bytes = 8;
        assert_eq!(pick(&query), Algo::Rd);
        let e = choose(&t, &query, Some(Algo::Ring)).unwrap_err();
        assert!(e.contains("non-commutative"), "{e}");
        assert!(e.contains("allreduce may use rd, direct, shm"), "{e}");
        for kind in [Coll::Reduce, Coll::ReduceScatter] {
            let query = Query {
                commutative: false,
                ..q(kind, 8, 8)
            };
            assert_eq!(pick(&query), Algo::Direct, "{kind:?}");
        }
        // Operations that do not reduce ignore commutativity.
        let query = Query {
            commutative: false,
            ..q(Coll::Bcast, 8, 8)
        };
        assert_eq!(pick(&query), Algo::Tree);
    }

    #[test]
    fn deterministic_allows_canonical_order_only() {
        let t = Tuning::defaults();
        let mut query = q(Coll::Allreduce, 8, 8);
        query.deterministic = true;
        assert_eq!(pick(&query), Algo::Direct);
        query.shm = true;
        assert_eq!(pick(&query), Algo::Shm);
        let e = choose(&t, &query, Some(Algo::Rd)).unwrap_err();
        assert!(e.contains("RCOMM_DETERMINISTIC=1"), "{e}");
        assert!(e.contains("direct, shm"), "{e}");
        for kind in [Coll::Reduce, Coll::ReduceScatter] {
            let query = Query {
                deterministic: true,
                ..q(kind, 8, 8)
            };
            assert_eq!(pick(&query), Algo::Direct, "{kind:?}");
        }
        assert_eq!(
            pick(&Query {
                deterministic: true,
                ..q(Coll::Scan, 8, 8)
            }),
            Algo::Chain
        );
    }

    #[test]
    fn one_rank_is_trivial_but_still_checks_forcing() {
        let t = Tuning::defaults();
        let c = choose(&t, &q(Coll::Allreduce, 1, 1 << 20), None).unwrap();
        assert_eq!(c.predicted_us, 0.0);
        let c = choose(&t, &q(Coll::Allreduce, 1, 1 << 20), Some(Algo::Ring)).unwrap();
        assert_eq!((c.algo, c.predicted_us), (Algo::Ring, 0.0));
        let query = Query {
            commutative: false,
            ..q(Coll::Allreduce, 1, 8)
        };
        assert!(choose(&t, &query, Some(Algo::Ring)).is_err());
    }

    #[test]
    fn measured_constants_move_the_crossover() {
        // A faster network makes the bandwidth algorithm win earlier.
        let slow = Tuning::defaults();
        let mut fast = slow;
        fast.intra.alpha_us = 50.0; // high latency: latency algorithms win longer
        let query = q(Coll::Allreduce, 8, 256 << 10);
        assert_eq!(
            choose(&slow, &query, None).unwrap().algo,
            Algo::Rabenseifner
        );
        assert_eq!(choose(&fast, &query, None).unwrap().algo, Algo::Rd);
    }

    #[test]
    fn tuning_bytes_round_trip_and_bad_records_are_refused() {
        let mut t = Tuning::defaults();
        assert_eq!(Tuning::from_bytes(&t.to_bytes()), Ok(t));
        t.intra = Link {
            alpha_us: 0.731,
            beta: 12_345.5,
            origin: Origin::Measured,
        };
        t.local_origin = Origin::Measured;
        assert_eq!(Tuning::from_bytes(&t.to_bytes()), Ok(t));
        assert!(Tuning::from_bytes(&t.to_bytes()[..10]).is_err());
        let mut bad = t.to_bytes();
        bad[0..8].copy_from_slice(&f64::NAN.to_le_bytes());
        assert!(Tuning::from_bytes(&bad).is_err());
        let mut bad = t.to_bytes();
        bad[8..16].copy_from_slice(&0f64.to_le_bytes());
        assert!(Tuning::from_bytes(&bad).is_err());
        let mut bad = t.to_bytes();
        bad[48] = 0x80;
        assert!(Tuning::from_bytes(&bad).is_err());
    }

    #[test]
    fn choice_and_tuning_display() {
        let c = Choice {
            algo: Algo::Ring,
            predicted_us: 12.345,
        };
        assert_eq!(c.to_string(), "ring (predicted 12.3 µs)");
        let s = Tuning::defaults().to_string();
        assert!(
            s.contains("intra α 1.00 µs") && s.contains("(default)"),
            "{s}"
        );
    }

    fn any_kind() -> impl Strategy<Value = Coll> {
        (0..Coll::HOST.len()).prop_map(|i| Coll::HOST[i])
    }

    fn any_tuning() -> impl Strategy<Value = Tuning> {
        let v = || 1e-3f64..1e7;
        (v(), v(), v(), v(), v(), v()).prop_map(|(a, b, c, d, g, m)| Tuning {
            intra: Link {
                alpha_us: a,
                beta: b,
                origin: Origin::Measured,
            },
            inter: Link {
                alpha_us: c,
                beta: d,
                origin: Origin::Default,
            },
            gamma: g,
            memcpy: m,
            local_origin: Origin::Measured,
            single_copy_off: a > 1.0,
        })
    }

    fn any_forced() -> impl Strategy<Value = Option<Algo>> {
        prop_oneof![
            Just(None),
            proptest::sample::select(Algo::ALL.to_vec()).prop_map(Some),
        ]
    }

    proptest! {
        #[test]
        fn choose_never_panics_and_returns_an_allowed_algorithm(
            kind in any_kind(),
            ranks in prop_oneof![1u32..=64, any::<u32>()],
            bytes in prop_oneof![0usize..=1 << 24, any::<usize>()],
            elem in 1usize..=16,
            flags in any::<[bool; 4]>(),
            t in prop_oneof![Just(Tuning::defaults()), any_tuning()],
            forced in any_forced(),
        ) {
            let query = Query {
                kind, ranks, bytes, elem,
                commutative: flags[0], deterministic: flags[1], shm: flags[2], inter_node: flags[3],
                nodes: if flags[3] { 1 + ranks.min(8) / 2 } else { 1 },
            };
            let res = choose(&t, &query, forced);
            if forced.is_none() {
                prop_assert!(res.is_ok(), "{res:?}");
            }
            if let Ok(c) = res {
                prop_assert!(kind.algos().contains(&c.algo));
                prop_assert!(forbidden(&query, c.algo).is_none(), "{c:?} for {query:?}");
                prop_assert!(c.predicted_us >= 0.0 && !c.predicted_us.is_nan(), "{c:?}");
                if let Some(f) = forced {
                    prop_assert_eq!(c.algo, f);
                }
            }
            prop_assert_eq!(res, choose(&t, &query, forced));
        }
    }
}
