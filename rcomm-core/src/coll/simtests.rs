//! The collective schedules on engines over the simulated fabric, in virtual time. Every rank
//! runs its schedule through the executor's own stepping code (`exec::advance` over a
//! [`Port`], what a communicator runs) on a [`SimFabric`] with jitter, several streams per
//! pair and every rendezvous protocol, at 2–64 ranks; each rank's result is compared with a
//! sequential reference. The algorithms come from the tuner's table: one added there without a
//! case here fails the tests. Deterministic: a seed replays a run exactly.

use super::exec::{Cursor, advance};
use super::port::{Batch, Pending, Port};
use super::reduce::{ReduceOp, Reducer, UserOp};
use super::schedule::{self as sch, Blocks, Schedule};
use super::tuner::{self, Query};
use crate::coll_state::Tuning;
use crate::p2p::engine::{Engine, ProtoConfig, ReqId};
use crate::p2p::matcher::{Source, TagSel};
use crate::p2p::region::Region;
use crate::{CommError, Result};
use rcomm_kernels::{Dtype, Op};
use rcomm_runtime::algo::{Algo, Coll};
use rcomm_transport::caps::Ops;
use rcomm_transport::net::Net;
use rcomm_transport::sim::SimConfig;
use rcomm_transport::sim_ep::{SimFabric, SimFabricConfig};

/// The world's user context; collectives run on the internal one above it.
const CTX: u32 = 0;
/// No request of a phase completing for this long (virtual ns) ends the wait, as
/// `RCOMM_TIMEOUT` does on a real job.
const TIMEOUT_NS: u64 = 5_000_000;
/// A run that lasts longer than this (virtual ns) is a hang.
const HANG_NS: u64 = 2_000_000_000;
/// Largest eager payload: every size list has messages on both sides of it.
const EAGER: usize = 128;

/// Engines of every rank over one simulated fabric.
struct Fab {
    fabric: SimFabric,
    engines: Vec<Engine>,
    /// Virtual time that passed with nothing in flight (ranks waiting on each other): the
    /// fabric's clock moves only with events, the watchdogs' clock runs on.
    idle_ns: u64,
    /// Whether a failed rank is reported to the others (the launcher's notice), or only seen
    /// by the transport of the ranks that talk to it.
    notices: bool,
    reported: Vec<bool>,
}

impl Fab {
    fn new(n: usize, bulk: Ops, jitter_ns: u64, streams: usize, seed: u64) -> Self {
        let fabric = SimFabric::new(SimFabricConfig {
            net: SimConfig {
                ranks: n,
                latency_ns: 1_000,
                bandwidth_bytes_per_s: 1e9,
                jitter_ns,
                loss: 0.0,
                seed,
            },
            bulk,
            eager_limit: EAGER,
            chunk: 256,
            streams,
            ..SimFabricConfig::default()
        })
        .expect("valid sim config");
        let n32 = n as u32;
        let engines = (0..n32)
            .map(|r| {
                let mut e = Engine::new(
                    r,
                    n32,
                    Net::sim(r, &fabric),
                    (0..n).map(|h| format!("sim{h}")).collect(),
                    ProtoConfig {
                        get_max: usize::MAX,
                    },
                );
                e.register_comm(CTX, None);
                e
            })
            .collect();
        Self {
            fabric,
            engines,
            idle_ns: 0,
            notices: true,
            reported: vec![false; n],
        }
    }

    fn now(&self) -> u64 {
        self.fabric.now() + self.idle_ns
    }

    /// Tells every live rank of ranks that failed (with notices on), then progresses every
    /// live engine; the work done.
    fn progress(&mut self) -> usize {
        let n = self.engines.len();
        if self.notices {
            for d in 0..n {
                if !self.reported[d] && self.fabric.is_failed(d as u32) {
                    self.reported[d] = true;
                    for (r, e) in self.engines.iter_mut().enumerate() {
                        if !self.fabric.is_failed(r as u32) {
                            e.launcher_reports_failed(d as u32, "killed by the test".into());
                        }
                    }
                }
            }
        }
        let mut work = 0;
        for (r, e) in self.engines.iter_mut().enumerate() {
            if !self.fabric.is_failed(r as u32) {
                work += e.progress();
            }
        }
        work
    }

    /// One step of the world: engine work, else the next event in virtual time, else time
    /// passing with nothing in flight. False in the last case.
    fn tick(&mut self) -> bool {
        if self.progress() > 0 || self.fabric.advance() {
            return true;
        }
        self.idle_ns += TIMEOUT_NS / 4;
        false
    }

    /// Runs until nothing is in flight; then no live engine may have work left.
    fn settle(&mut self) {
        while self.tick() {}
        for (r, e) in self.engines.iter().enumerate() {
            assert!(
                self.fabric.is_failed(r as u32) || !e.busy(),
                "rank {r} busy after the collectives"
            );
        }
    }
}

/// A phase's no-progress clock (virtual time).
struct Watch {
    since: u64,
    done: usize,
}

impl Watch {
    fn new(now: u64) -> Self {
        Self {
            since: now,
            done: 0,
        }
    }

    /// Notes `done` completions at `now`; how long it waited once past the limit.
    fn look(&mut self, now: u64, done: usize) -> Option<u64> {
        if done != self.done {
            self.done = done;
            self.since = now;
        }
        let waited = now - self.since;
        (waited >= TIMEOUT_NS).then_some(waited)
    }
}

/// One rank's side of a collective on the simulated fabric.
struct SimPort<'a> {
    fab: &'a mut Fab,
    rank: usize,
    tag: i32,
    op: &'static str,
    watch: &'a mut Watch,
}

struct SimBatch<'b> {
    e: &'b mut Engine,
    tag: i32,
    op: &'static str,
}

impl Batch for SimBatch<'_> {
    type Req = ReqId;

    fn recv(&mut self, peer: u32, dst: Region) -> Result<ReqId> {
        self.e.irecv(
            CTX + 1,
            Source::Rank(peer),
            TagSel::Tag(self.tag),
            dst,
            self.op,
        )
    }

    fn send(&mut self, peer: u32, src: Region) -> Result<ReqId> {
        self.e.isend(CTX + 1, peer, self.tag, src, self.op)
    }

    fn take(&mut self, req: ReqId) -> Result<usize> {
        self.e.take(req).map(|st| st.bytes)
    }
}

impl SimPort<'_> {
    /// What a wait would end with now, if anything: every request done, a member reported
    /// lost, or the watchdog.
    fn verdict(&mut self, reqs: &[Pending<ReqId>]) -> Option<Result<()>> {
        let e = &self.fab.engines[self.rank];
        let done = reqs.iter().filter(|p| e.is_done(p.req)).count();
        if done == reqs.len() {
            return Some(Ok(()));
        }
        if let Some(&w) = e.reported_failed().first() {
            let err = e.lost_error(w, self.op).unwrap_or(CommError::PeerLost {
                rank: w,
                host: e.host_of(w).to_string(),
                op: self.op,
                why: "failed".into(),
            });
            return Some(Err(err));
        }
        let now = self.fab.now();
        self.watch.look(now, done).map(|waited| {
            Err(CommError::Timeout {
                op: self.op,
                seq: self.tag as u64,
                comm: "sim".into(),
                peer: None,
                waited: std::time::Duration::from_nanos(waited),
            })
        })
    }
}

impl Port for SimPort<'_> {
    type Req = ReqId;
    type Batch<'b>
        = SimBatch<'b>
    where
        Self: 'b;

    fn batch(&mut self) -> SimBatch<'_> {
        SimBatch {
            e: &mut self.fab.engines[self.rank],
            tag: self.tag,
            op: self.op,
        }
    }

    fn ready(&mut self, reqs: &[Pending<ReqId>]) -> bool {
        self.fab.engines[self.rank].progress();
        self.verdict(reqs).is_some()
    }

    fn wait(&mut self, reqs: &[Pending<ReqId>]) -> Result<()> {
        loop {
            match self.verdict(reqs) {
                Some(Ok(())) => return Ok(()),
                Some(Err(err)) => {
                    for p in reqs {
                        self.fab.engines[self.rank].abandon(p.req);
                    }
                    return Err(err);
                }
                None => {
                    // Only the engines move meanwhile, not the other ranks' schedules.
                    self.fab.tick();
                }
            }
        }
    }

    fn drain(&mut self, reqs: &[Pending<ReqId>]) {
        if self.wait(reqs).is_ok() {
            for p in reqs {
                let _ = self.fab.engines[self.rank].take(p.req);
            }
        }
    }

    fn failure(&mut self, e: CommError) -> CommError {
        e
    }
}

/// Runs one schedule per rank, every rank stepped without blocking as the fabric moves;
/// each live rank's outcome (`None`: the rank failed).
fn run(
    fab: &mut Fab,
    scheds: &[Schedule],
    data: &mut [Vec<u8>],
    input: &[Vec<u8>],
    reduce: Option<&Reducer>,
    tag: i32,
) -> Vec<Option<Result<()>>> {
    let n = scheds.len();
    let mut tmp: Vec<Vec<u8>> = scheds.iter().map(|s| vec![0x5a; s.tmp_len]).collect();
    let mut cur: Vec<Cursor<ReqId>> = (0..n).map(|_| Cursor::new(Vec::new())).collect();
    let start = fab.now();
    let mut watch: Vec<Watch> = (0..n).map(|_| Watch::new(start)).collect();
    let mut out: Vec<Option<Result<()>>> = (0..n).map(|_| None).collect();
    loop {
        let mut moved = false;
        for r in 0..n {
            if out[r].is_some() || fab.fabric.is_failed(r as u32) {
                continue;
            }
            // A rank whose messages are in flight waits: what `ready` would say, cheaply.
            let e = &fab.engines[r];
            let p = &cur[r].pending;
            let waiting = !p.is_empty()
                && p.iter().filter(|q| e.is_done(q.req)).count() == watch[r].done
                && p.iter().any(|q| !e.is_done(q.req))
                && e.reported_failed().is_empty()
                && fab.now() - watch[r].since < TIMEOUT_NS;
            if waiting {
                continue;
            }
            let (phase, posted) = (cur[r].phase, cur[r].pending.len());
            let mut port = SimPort {
                fab: &mut *fab,
                rank: r,
                tag,
                op: scheds[r].op_name(),
                watch: &mut watch[r],
            };
            let res = advance(
                &mut port,
                &scheds[r],
                &mut cur[r],
                &mut data[r],
                &input[r],
                &mut tmp[r],
                reduce,
                false,
            );
            match res {
                Ok(true) => out[r] = Some(Ok(())),
                Ok(false) => {}
                Err(e) => out[r] = Some(Err(e)),
            }
            if cur[r].phase != phase {
                watch[r] = Watch::new(fab.now());
            }
            moved |= out[r].is_some() || cur[r].phase != phase || cur[r].pending.len() != posted;
        }
        if (0..n).all(|r| out[r].is_some() || fab.fabric.is_failed(r as u32)) {
            return out;
        }
        if moved {
            fab.progress();
        } else {
            fab.tick();
        }
        assert!(
            fab.now() - start < HANG_NS,
            "no end after {HANG_NS} virtual ns: ranks at phases {:?}",
            cur.iter().map(|c| c.phase).collect::<Vec<_>>()
        );
    }
}

/// The element arithmetic of a case: integer-valued `f64` sums (exact in any order), or 2×2
/// matrix products mod a prime (associative, not commutative: a wrong operand order shows).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Arith {
    Sum,
    Mat,
}

const PRIME: u64 = 251;

fn matmul(a: [u64; 4], b: [u64; 4]) -> [u64; 4] {
    [
        (a[0] * b[0] + a[1] * b[2]) % PRIME,
        (a[0] * b[1] + a[1] * b[3]) % PRIME,
        (a[2] * b[0] + a[3] * b[2]) % PRIME,
        (a[2] * b[1] + a[3] * b[3]) % PRIME,
    ]
}

impl Arith {
    fn elem(self) -> usize {
        match self {
            Arith::Sum => 8,
            Arith::Mat => 32,
        }
    }

    /// Element `i` of rank `r`'s buffer `salt`.
    fn value(self, r: usize, i: usize, salt: usize) -> Vec<u8> {
        let x = r * 37 + i * 11 + salt * 5;
        match self {
            Arith::Sum => (((x % 101) as f64) - 50.0).to_le_bytes().to_vec(),
            Arith::Mat => {
                let x = x as u64;
                let m = [
                    1 + x % 250,
                    (x * 3 + 1) % PRIME,
                    (x * 5 + 2) % PRIME,
                    1 + x * 7 % 250,
                ];
                m.iter().flat_map(|w| w.to_le_bytes()).collect()
            }
        }
    }

    fn vector(self, r: usize, count: usize, salt: usize) -> Vec<u8> {
        (0..count).flat_map(|i| self.value(r, i, salt)).collect()
    }

    /// `a ⊕ b`, element-wise.
    fn combine(self, a: &[u8], b: &[u8]) -> Vec<u8> {
        let word = |c: &[u8], k: usize| u64::from_le_bytes(c[8 * k..8 * k + 8].try_into().unwrap());
        let e = self.elem();
        a.chunks_exact(e)
            .zip(b.chunks_exact(e))
            .flat_map(|(x, y)| match self {
                Arith::Sum => {
                    let s = f64::from_bits(word(x, 0)) + f64::from_bits(word(y, 0));
                    s.to_le_bytes().to_vec()
                }
                Arith::Mat => {
                    let m = |c: &[u8]| [word(c, 0), word(c, 1), word(c, 2), word(c, 3)];
                    matmul(m(x), m(y))
                        .iter()
                        .flat_map(|w| w.to_le_bytes())
                        .collect()
                }
            })
            .collect()
    }

    /// `v[0] ⊕ v[1] ⊕ …` in rank order.
    fn fold(self, v: &[Vec<u8>]) -> Vec<u8> {
        let mut acc = v[0].clone();
        for x in &v[1..] {
            acc = self.combine(&acc, x);
        }
        acc
    }

    fn reducer(self) -> Reducer {
        match self {
            Arith::Sum => Reducer::Builtin(Op::Sum, Dtype::F64),
            Arith::Mat => {
                // MPI's convention: `inout = input ⊕ inout`.
                let u = UserOp::<[u64; 4]>::new(false, |input, inout| {
                    for (o, i) in inout.iter_mut().zip(input) {
                        *o = matmul(*i, *o);
                    }
                });
                ReduceOp::from(&u).0
            }
        }
    }
}

/// One collective at one shape: every rank's schedule and buffers, and what each rank's
/// `Data` must hold after (an offset and the bytes there; `None`: unspecified).
struct Case {
    name: String,
    scheds: Vec<Schedule>,
    data: Vec<Vec<u8>>,
    input: Vec<Vec<u8>>,
    want: Vec<Option<(usize, Vec<u8>)>>,
    reduce: Option<Reducer>,
}

/// The shape of one case.
#[derive(Clone, Copy, Debug)]
struct Shape {
    n: usize,
    /// Elements: of the vector (allreduce, bcast, reduce, scan, reduce-scatter's total per
    /// block) or of one block (allgather, alltoall, gather, scatter).
    count: usize,
    root: usize,
    ar: Arith,
}

impl Shape {
    fn per_rank(&self, f: impl Fn(u32) -> Schedule) -> Vec<Schedule> {
        (0..self.n as u32).map(f).collect()
    }
    fn vectors(&self, count: usize, salt: usize) -> Vec<Vec<u8>> {
        (0..self.n)
            .map(|r| self.ar.vector(r, count, salt))
            .collect()
    }
    /// Block counts: all `count`, or uneven (`count + j % 3`, so some ranks differ).
    fn counts(&self, uneven: bool) -> Vec<usize> {
        (0..self.n)
            .map(|j| self.count + if uneven { j % 3 } else { 0 })
            .collect()
    }
}

fn none(n: usize) -> Vec<Vec<u8>> {
    vec![Vec::new(); n]
}

/// `total` bytes of filler with `blocks[r]` of them set to `own`.
fn with_block(total: usize, (off, len): (usize, usize), own: &[u8]) -> Vec<u8> {
    let mut d = vec![0xee; total];
    d[off..off + len].copy_from_slice(own);
    d
}

fn total(blocks: &Blocks) -> usize {
    blocks.last().map_or(0, |(o, l)| o + l)
}

/// The algorithms the tests know to be schedules; `shm` is not (the node's shared memory)
/// and is tested elsewhere.
const NOT_SCHEDULES: [Algo; 1] = [Algo::Shm];

/// Node maps of `n` ranks (a node colour per rank) for the hierarchical cases: one node, one
/// rank per node, regular (d interleaved nodes for the least divisor 1 < d < n: 2×4 at 8),
/// and irregular (nodes of 3, 1, 4, 3, 1, … ranks: 3+1+4 at 8).
fn node_maps(n: usize) -> Vec<(String, Vec<u32>)> {
    let mut maps = vec![
        ("one node".to_string(), vec![0; n]),
        ("one per node".to_string(), (0..n as u32).collect()),
    ];
    if let Some(d) = (2..n).find(|d| n.is_multiple_of(*d)) {
        maps.push((
            format!("{d}x{}", n / d),
            (0..n).map(|r| (r % d) as u32).collect(),
        ));
    }
    let mut colours = Vec::with_capacity(n);
    for (node, size) in [3usize, 1, 4].into_iter().cycle().enumerate() {
        if colours.len() >= n {
            break;
        }
        colours.extend(std::iter::repeat_n(
            node as u32,
            size.min(n - colours.len()),
        ));
    }
    maps.push(("3+1+4…".to_string(), colours));
    maps
}

/// The composed hierarchical schedules of `kind` at `s` on every [`node_maps`] map (the
/// equal-block kinds on the regular maps only: elsewhere the communicator runs the ring).
fn hier_cases(kind: Coll, s: Shape) -> Vec<Case> {
    let (n, count, root, ar) = (s.n, s.count, s.root, s.ar);
    let (e, rt) = (ar.elem(), root as u32);
    let mut out = Vec::new();
    for (map, colours) in node_maps(n) {
        let nodes = sch::Nodes::from_colours(&colours);
        let name = format!("{}/hier ({map}) n={n} count={count} {ar:?}", kind.name());
        match kind {
            Coll::Allreduce => {
                let data = s.vectors(count, 0);
                let all = ar.fold(&data);
                for intra in [sch::NodeLevel::Ring, sch::NodeLevel::Direct] {
                    out.push(Case {
                        name: format!("{name} {intra:?}"),
                        scheds: s.per_rank(|r| sch::hier_allreduce(r, &nodes, count, e, intra)),
                        data: data.clone(),
                        input: none(n),
                        want: vec![Some((0, all.clone())); n],
                        reduce: Some(ar.reducer()),
                    });
                }
            }
            Coll::Bcast => {
                let bytes = count * e;
                let payload = ar.vector(root, count, 1);
                out.push(Case {
                    name,
                    scheds: s.per_rank(|r| sch::hier_bcast(r, &nodes, rt, bytes)),
                    data: (0..n)
                        .map(|r| {
                            if r == root {
                                payload.clone()
                            } else {
                                vec![0xee; bytes]
                            }
                        })
                        .collect(),
                    input: none(n),
                    want: vec![Some((0, payload.clone())); n],
                    reduce: None,
                });
            }
            Coll::Allgather => {
                let b = count * e;
                let Some(scheds) = (0..n as u32)
                    .map(|r| sch::hier_allgather(r, &nodes, b))
                    .collect::<Option<Vec<_>>>()
                else {
                    continue;
                };
                let blocks = sch::equal_blocks(n as u32, b);
                let own: Vec<Vec<u8>> = (0..n).map(|r| ar.vector(r, count, 3)).collect();
                out.push(Case {
                    name,
                    scheds,
                    data: (0..n)
                        .map(|r| with_block(n * b, blocks[r], &own[r]))
                        .collect(),
                    input: none(n),
                    want: vec![Some((0, own.concat())); n],
                    reduce: None,
                });
            }
            Coll::ReduceScatter => {
                let b = count * e;
                let Some(scheds) = (0..n as u32)
                    .map(|r| sch::hier_reduce_scatter(r, &nodes, b))
                    .collect::<Option<Vec<_>>>()
                else {
                    continue;
                };
                let data = s.vectors(n * count, 4);
                let all = ar.fold(&data);
                out.push(Case {
                    name,
                    scheds,
                    data,
                    input: none(n),
                    want: (0..n)
                        .map(|r| Some((r * b, all[r * b..(r + 1) * b].to_vec())))
                        .collect(),
                    reduce: Some(ar.reducer()),
                });
            }
            _ => panic!("{} has no hierarchical case here: add one", kind.name()),
        }
    }
    out
}

/// The cases of algorithm `algo` of `kind` at `s`; empty for [`NOT_SCHEDULES`]. Panics for an
/// algorithm this table does not know: a new one needs its case here.
fn cases(kind: Coll, algo: Algo, s: Shape) -> Vec<Case> {
    if NOT_SCHEDULES.contains(&algo) {
        return Vec::new();
    }
    if algo == Algo::Hier {
        return hier_cases(kind, s);
    }
    let (n, count, root, ar) = (s.n, s.count, s.root, s.ar);
    let (nn, e, rt) = (n as u32, ar.elem(), root as u32);
    let name = |what: &str| format!("{}/{algo}{what} n={n} count={count} {ar:?}", kind.name());
    let red = || Some(ar.reducer());
    let mut out = Vec::new();
    match kind {
        Coll::Allreduce => {
            let mk: fn(u32, u32, usize, usize) -> Schedule = match algo {
                Algo::Ring => sch::ring_allreduce,
                Algo::Rd => sch::recursive_doubling_allreduce,
                Algo::Rabenseifner => sch::rabenseifner_allreduce,
                Algo::Direct => sch::direct_allreduce,
                // The device executor's, host-runnable all the same.
                Algo::OneShot => sch::one_shot_allreduce,
                Algo::TwoShot => sch::two_shot_allreduce,
                _ => panic!("allreduce algorithm `{algo}` has no case here: add one"),
            };
            let data = s.vectors(count, 0);
            let all = ar.fold(&data);
            out.push(Case {
                name: name(""),
                scheds: s.per_rank(|r| mk(r, nn, count, e)),
                data,
                input: none(n),
                want: vec![Some((0, all)); n],
                reduce: red(),
            });
        }
        Coll::Bcast => {
            let bytes = count * e;
            let mut variants: Vec<(&str, Vec<Schedule>)> = Vec::new();
            match algo {
                Algo::Tree => {
                    variants.push(("", s.per_rank(|r| sch::binomial_bcast(r, nn, rt, bytes))))
                }
                Algo::ScatterAllgather => variants.push((
                    "",
                    s.per_rank(|r| sch::scatter_allgather_bcast(r, nn, rt, bytes)),
                )),
                Algo::Pipeline => {
                    let seg = super::pipeline_segment(bytes);
                    variants.push((
                        "",
                        s.per_rank(|r| sch::pipeline_bcast(r, nn, rt, bytes, seg)),
                    ));
                    // Segments small enough that the chain really pipelines.
                    variants.push((
                        " (3-element segments)",
                        s.per_rank(|r| sch::pipeline_bcast(r, nn, rt, bytes, 3 * e)),
                    ));
                }
                _ => panic!("bcast algorithm `{algo}` has no case here: add one"),
            }
            let payload = ar.vector(root, count, 1);
            for (what, scheds) in variants {
                out.push(Case {
                    name: name(what),
                    scheds,
                    data: (0..n)
                        .map(|r| {
                            if r == root {
                                payload.clone()
                            } else {
                                vec![0xee; bytes]
                            }
                        })
                        .collect(),
                    input: none(n),
                    want: vec![Some((0, payload.clone())); n],
                    reduce: None,
                });
            }
        }
        Coll::Reduce => {
            let scheds = match algo {
                // As the communicator runs it: the plain tree combines in rotated order.
                Algo::Tree if ar == Arith::Mat => {
                    s.per_rank(|r| sch::binomial_reduce_ordered(r, nn, rt, count * e))
                }
                Algo::Tree => s.per_rank(|r| sch::binomial_reduce(r, nn, rt, count * e)),
                Algo::Direct => s.per_rank(|r| sch::direct_reduce(r, nn, rt, count, e)),
                _ => panic!("reduce algorithm `{algo}` has no case here: add one"),
            };
            let data = s.vectors(count, 2);
            let all = ar.fold(&data);
            let want = (0..n)
                .map(|r| (r == root).then(|| (0, all.clone())))
                .collect();
            out.push(Case {
                name: name(""),
                scheds,
                data,
                input: none(n),
                want,
                reduce: red(),
            });
        }
        Coll::Allgather => {
            let mut variants: Vec<(&str, Vec<usize>, Vec<Schedule>)> = Vec::new();
            let b = count * e;
            match algo {
                Algo::Ring => {
                    variants.push((
                        "",
                        s.counts(false),
                        s.per_rank(|r| sch::ring_allgather(r, nn, b)),
                    ));
                    let cs = s.counts(true);
                    let blocks = sch::packed_blocks(&cs, e);
                    let sc = s.per_rank(|r| sch::ring_allgather_v(r, &blocks));
                    variants.push((" (v)", cs, sc));
                }
                Algo::Bruck => {
                    variants.push((
                        "",
                        s.counts(false),
                        s.per_rank(|r| sch::bruck_allgather(r, nn, b)),
                    ));
                }
                _ => panic!("allgather algorithm `{algo}` has no case here: add one"),
            }
            for (what, cs, scheds) in variants {
                let blocks = sch::packed_blocks(&cs, e);
                let own: Vec<Vec<u8>> = (0..n).map(|r| ar.vector(r, cs[r], 3)).collect();
                let all = own.concat();
                out.push(Case {
                    name: name(what),
                    scheds,
                    data: (0..n)
                        .map(|r| with_block(total(&blocks), blocks[r], &own[r]))
                        .collect(),
                    input: none(n),
                    want: vec![Some((0, all)); n],
                    reduce: None,
                });
            }
        }
        Coll::ReduceScatter => {
            let mk: fn(u32, &Blocks) -> Schedule = match algo {
                Algo::Ring => sch::ring_reduce_scatter_v,
                Algo::Direct => sch::direct_reduce_scatter_v,
                _ => panic!("reduce_scatter algorithm `{algo}` has no case here: add one"),
            };
            for (what, uneven) in [("", false), (" (v)", true)] {
                let cs = s.counts(uneven);
                let blocks = sch::packed_blocks(&cs, e);
                let data = s.vectors(cs.iter().sum(), 4);
                let all = ar.fold(&data);
                let want = (0..n)
                    .map(|r| {
                        let (o, l) = blocks[r];
                        Some((o, all[o..o + l].to_vec()))
                    })
                    .collect();
                out.push(Case {
                    name: name(what),
                    scheds: s.per_rank(|r| mk(r, &blocks)),
                    data,
                    input: none(n),
                    want,
                    reduce: red(),
                });
            }
        }
        Coll::Alltoall => {
            // What rank i sends to rank j: `c(i, j)` elements.
            let c = |i: usize, j: usize, uneven: bool| count + if uneven { (i + j) % 2 } else { 0 };
            let variants: &[(&str, bool)] = match algo {
                Algo::Pairwise => &[("", false), (" (v)", true)],
                Algo::Bruck => &[("", false)],
                _ => panic!("alltoall algorithm `{algo}` has no case here: add one"),
            };
            for &(what, uneven) in variants {
                let block = |i: usize, j: usize| ar.vector(i, c(i, j, uneven), 5 + j);
                let input: Vec<Vec<u8>> = (0..n)
                    .map(|i| (0..n).flat_map(|j| block(i, j)).collect())
                    .collect();
                let want: Vec<Option<(usize, Vec<u8>)>> = (0..n)
                    .map(|j| Some((0, (0..n).flat_map(|i| block(i, j)).collect())))
                    .collect();
                let (scheds, data) = if algo == Algo::Bruck {
                    let sc = s.per_rank(|r| sch::bruck_alltoall(r, nn, count * e));
                    (sc, (0..n).map(|_| vec![0xee; n * count * e]).collect())
                } else {
                    let send = |i: usize| {
                        sch::packed_blocks(&(0..n).map(|j| c(i, j, uneven)).collect::<Vec<_>>(), e)
                    };
                    let recv = |j: usize| {
                        sch::packed_blocks(&(0..n).map(|i| c(i, j, uneven)).collect::<Vec<_>>(), e)
                    };
                    let sc = s.per_rank(|r| {
                        sch::pairwise_alltoall_v(r, &send(r as usize), &recv(r as usize))
                    });
                    // The caller copies its own block; the schedule does not.
                    let data = (0..n)
                        .map(|r| {
                            let rb = recv(r);
                            with_block(total(&rb), rb[r], &block(r, r))
                        })
                        .collect();
                    (sc, data)
                };
                out.push(Case {
                    name: name(what),
                    scheds,
                    data,
                    input,
                    want,
                    reduce: None,
                });
            }
        }
        Coll::Gather | Coll::Scatter => {
            let gather = kind == Coll::Gather;
            let variants: &[(&str, bool)] = match algo {
                Algo::Linear => &[("", false), (" (v)", true)],
                Algo::Tree => &[("", false)],
                _ => panic!(
                    "{} algorithm `{algo}` has no case here: add one",
                    kind.name()
                ),
            };
            for &(what, uneven) in variants {
                let cs = s.counts(uneven);
                let blocks = sch::packed_blocks(&cs, e);
                let own: Vec<Vec<u8>> = (0..n).map(|r| ar.vector(r, cs[r], 6)).collect();
                let all = own.concat();
                let tree = algo == Algo::Tree;
                let b = count * e;
                let c = if gather {
                    Case {
                        name: name(what),
                        scheds: if tree {
                            s.per_rank(|r| sch::binomial_gather(r, nn, rt, b))
                        } else {
                            s.per_rank(|r| sch::linear_gather_v(r, rt, &blocks))
                        },
                        // The linear gather leaves the root's own block to the caller.
                        data: (0..n)
                            .map(|r| match (r == root, tree) {
                                (true, false) => with_block(total(&blocks), blocks[r], &own[r]),
                                (true, true) => vec![0xee; total(&blocks)],
                                _ => Vec::new(),
                            })
                            .collect(),
                        input: own.clone(),
                        want: (0..n)
                            .map(|r| (r == root).then(|| (0, all.clone())))
                            .collect(),
                        reduce: None,
                    }
                } else {
                    Case {
                        name: name(what),
                        scheds: if tree {
                            s.per_rank(|r| sch::binomial_scatter(r, nn, rt, b))
                        } else {
                            s.per_rank(|r| sch::linear_scatter_v(r, rt, &blocks))
                        },
                        data: (0..n).map(|r| vec![0xee; cs[r] * e]).collect(),
                        input: (0..n)
                            .map(|r| if r == root { all.clone() } else { Vec::new() })
                            .collect(),
                        // The linear scatter leaves the root's own block to the caller.
                        want: (0..n)
                            .map(|r| (tree || r != root).then(|| (0, own[r].clone())))
                            .collect(),
                        reduce: None,
                    }
                };
                out.push(c);
            }
        }
        Coll::Scan => {
            assert_eq!(
                algo,
                Algo::Chain,
                "scan algorithm `{algo}` has no case here: add one"
            );
            let data = s.vectors(count, 7);
            for exclusive in [false, true] {
                let want = (0..n)
                    .map(|r| {
                        let upto = if exclusive { r } else { r + 1 };
                        Some((
                            0,
                            if upto == 0 {
                                data[0].clone()
                            } else {
                                ar.fold(&data[..upto])
                            },
                        ))
                    })
                    .collect();
                out.push(Case {
                    name: name(if exclusive { " (exclusive)" } else { "" }),
                    scheds: s.per_rank(|r| sch::chain_scan(r, nn, count * e, exclusive)),
                    data: data.clone(),
                    input: none(n),
                    want,
                    reduce: red(),
                });
            }
        }
        device => panic!(
            "{} is a device collective: its schedules are the extra cases",
            device.name()
        ),
    }
    out
}

/// Schedules the communicator runs that are no algorithm of the tuner's table.
fn extra_cases(s: Shape) -> Vec<Case> {
    let n = s.n;
    let mut out = cases(Coll::Allreduce, Algo::OneShot, s);
    out.extend(cases(Coll::Allreduce, Algo::TwoShot, s));
    out.push(Case {
        name: format!("barrier n={n}"),
        scheds: s.per_rank(|r| super::dissemination_barrier(r, n as u32)),
        data: none(n),
        input: none(n),
        want: vec![None; n],
        reduce: None,
    });
    out
}

/// Runs `case` on `fab` and checks every rank's result.
fn check(fab: &mut Fab, mut case: Case, tag: i32, seed: u64) {
    let out = run(
        fab,
        &case.scheds,
        &mut case.data,
        &case.input,
        case.reduce.as_ref(),
        tag,
    );
    for (r, o) in out.iter().enumerate() {
        match o {
            Some(Ok(())) => {}
            Some(Err(e)) => panic!("{} (seed {seed}): rank {r} failed: {e}", case.name),
            None => panic!("{} (seed {seed}): rank {r} lost", case.name),
        }
        if let Some((off, want)) = &case.want[r] {
            let got = &case.data[r][*off..*off + want.len()];
            assert!(
                got == &want[..],
                "{} (seed {seed}): rank {r} holds a wrong result",
                case.name
            );
        }
    }
}

/// Every algorithm of every kind in the tuner's table (and the extra schedules), at each
/// of `ranks`, for each seed (rendezvous protocol, streams and jitter vary with it), at
/// element counts 0, 1, one not divisible by the rank count and one past the eager limit
/// (`small` false: only 1 and the large one).
fn every_algorithm(ranks: &[usize], seeds: std::ops::Range<u64>, small: bool) {
    for &n in ranks {
        for seed in seeds.clone() {
            let bulk = [Ops::STREAM, Ops::GET, Ops::PUT][seed as usize % 3];
            let streams = 1 + seed as usize % 2;
            let mut fab = Fab::new(n, bulk, 20_000, streams, seed * 7919 + n as u64);
            let mut tag = 16;
            // Vector counts, and block counts (whose messages are `count` elements already).
            let large_vec = 20 * n + 3;
            let large_block = EAGER / 8 + 5;
            let (vecs, blocks): (Vec<usize>, Vec<usize>) = if small {
                (vec![0, 1, 2 * n + 1, large_vec], vec![0, 1, 3, large_block])
            } else {
                (vec![1, large_vec], vec![1, large_block])
            };
            for kind in Coll::HOST.iter().copied() {
                let by_block = matches!(
                    kind,
                    Coll::Allgather | Coll::Alltoall | Coll::Gather | Coll::Scatter
                );
                for &count in if by_block { &blocks } else { &vecs } {
                    let s = Shape {
                        n,
                        count,
                        root: (n / 2 + seed as usize) % n,
                        ar: Arith::Sum,
                    };
                    for &algo in kind.algos() {
                        for case in cases(kind, algo, s) {
                            check(&mut fab, case, tag, seed);
                            tag += 1;
                        }
                    }
                    if kind == Coll::Allreduce {
                        for case in extra_cases(s) {
                            check(&mut fab, case, tag, seed);
                            tag += 1;
                        }
                    }
                }
            }
            fab.settle();
            if n > 2 {
                assert!(
                    fab.fabric.stats().overtaken > 0,
                    "n={n} seed {seed}: jitter reordered nothing"
                );
            }
        }
    }
}

#[test]
fn every_host_algorithm_matches_its_sequential_reference_at_2_to_8_ranks() {
    every_algorithm(&[2, 3, 4, 5, 7, 8], 0..3, true);
}

#[test]
fn every_host_algorithm_matches_its_sequential_reference_at_16_and_33_ranks() {
    every_algorithm(&[16, 33], 0..2, true);
}

#[test]
fn every_host_algorithm_matches_its_sequential_reference_at_64_ranks() {
    every_algorithm(&[64], 1..2, false);
}

/// Whether the tuner lets `algo` run a non-commutative op of `kind`.
fn tuner_allows_non_commutative(kind: Coll, algo: Algo, n: usize) -> bool {
    let q = Query {
        kind,
        ranks: n as u32,
        bytes: 1024,
        elem: 32,
        commutative: false,
        deterministic: false,
        shm: true,
        inter_node: false,
        nodes: 1,
    };
    tuner::choose(&Tuning::defaults(), &q, Some(algo)).is_ok()
}

#[test]
fn rank_ordered_algorithms_combine_a_non_commutative_op_in_rank_order() {
    // What the schedules document as rank-ordered ("tree" reduce runs the ordered tree for
    // such an op), and everything the tuner would run for one.
    let documented: [(Coll, Algo); 7] = [
        (Coll::Allreduce, Algo::Rd),
        (Coll::Allreduce, Algo::Rabenseifner),
        (Coll::Allreduce, Algo::Direct),
        (Coll::Reduce, Algo::Tree),
        (Coll::Reduce, Algo::Direct),
        (Coll::ReduceScatter, Algo::Direct),
        (Coll::Scan, Algo::Chain),
    ];
    for (i, n) in [2usize, 3, 5, 8, 16, 33].into_iter().enumerate() {
        let seed = i as u64;
        let mut fab = Fab::new(n, [Ops::GET, Ops::PUT, Ops::STREAM][i % 3], 20_000, 1, seed);
        let mut tag = 16;
        let mut ran = 0;
        for kind in [
            Coll::Allreduce,
            Coll::Reduce,
            Coll::ReduceScatter,
            Coll::Scan,
        ] {
            for &algo in kind.algos() {
                let tuner_says = tuner_allows_non_commutative(kind, algo, n);
                if !tuner_says && !documented.contains(&(kind, algo)) {
                    continue;
                }
                for count in [1, 2 * n + 1, 4 * n + 3] {
                    let s = Shape {
                        n,
                        count,
                        root: n - 1,
                        ar: Arith::Mat,
                    };
                    for case in cases(kind, algo, s) {
                        check(&mut fab, case, tag, seed);
                        tag += 1;
                        ran += 1;
                    }
                }
            }
        }
        // binomial_reduce is rank-ordered for root 0.
        for count in [1, 2 * n + 1] {
            let s = Shape {
                n,
                count,
                root: 0,
                ar: Arith::Mat,
            };
            let data = s.vectors(count, 2);
            let all = Arith::Mat.fold(&data);
            let c = Case {
                name: format!("reduce/tree root 0 n={n} count={count} Mat"),
                scheds: s.per_rank(|r| sch::binomial_reduce(r, n as u32, 0, count * 32)),
                data,
                input: none(n),
                want: (0..n).map(|r| (r == 0).then(|| (0, all.clone()))).collect(),
                reduce: Some(Arith::Mat.reducer()),
            };
            check(&mut fab, c, tag, seed);
            tag += 1;
        }
        assert!(ran >= documented.len(), "n={n}: only {ran} cases ran");
        fab.settle();
    }
}

#[test]
fn the_table_has_a_case_for_every_algorithm_and_the_references_see_order() {
    let s = Shape {
        n: 3,
        count: 2,
        root: 1,
        ar: Arith::Sum,
    };
    for kind in Coll::HOST.iter().copied() {
        for &algo in kind.algos() {
            let c = cases(kind, algo, s);
            assert_eq!(
                c.is_empty(),
                NOT_SCHEDULES.contains(&algo),
                "{}/{algo}",
                kind.name()
            );
        }
    }
    // The matrix op tells operand orders apart, so the rank-ordered checks mean something.
    let (a, b) = (Arith::Mat.value(0, 0, 0), Arith::Mat.value(1, 0, 0));
    assert_ne!(Arith::Mat.combine(&a, &b), Arith::Mat.combine(&b, &a));
}

/// How an allreduce with a failing rank ended.
struct Loss {
    /// Every rank's outcome (`None`: the rank failed).
    out: Vec<Option<Result<()>>>,
    /// Every rank's `Data` after.
    data: Vec<Vec<u8>>,
    /// The reference result.
    want: Vec<u8>,
    /// Virtual time the run took.
    took: u64,
}

/// An allreduce at `n` ranks with `dead` failing at virtual time `at` after the collective
/// started (`None`: never).
fn lose_mid_allreduce(n: usize, dead: usize, at: Option<u64>, notices: bool, algo: Algo) -> Loss {
    let mut fab = Fab::new(n, Ops::GET, 2_000, 1, 5);
    fab.notices = notices;
    let s = Shape {
        n,
        count: 20 * n + 3,
        root: 0,
        ar: Arith::Sum,
    };
    let mut case = cases(Coll::Allreduce, algo, s).remove(0);
    let want = case.want[0].clone().unwrap().1;
    let t0 = fab.now();
    if let Some(at) = at {
        fab.fabric.fail_at(dead as u32, t0 + at).unwrap();
    }
    let out = run(
        &mut fab,
        &case.scheds,
        &mut case.data,
        &case.input,
        case.reduce.as_ref(),
        99,
    );
    Loss {
        out,
        data: case.data,
        want,
        took: fab.now() - t0,
    }
}

#[test]
fn a_peer_lost_mid_collective_fails_the_survivors_in_bounded_virtual_time() {
    let n = 8;
    let dead = 3;
    for algo in [Algo::Ring, Algo::Rd, Algo::Rabenseifner, Algo::Direct] {
        // How long the collective takes without failure.
        let clean = lose_mid_allreduce(n, dead, None, true, algo);
        let span = clean.took;
        assert!(
            clean.out.iter().all(|o| matches!(o, Some(Ok(())))),
            "{algo}"
        );
        for notices in [true, false] {
            for at in [1, span / 3, span * 2 / 3] {
                let what = format!("{algo}, failure at {at} of {span} ns, notices {notices}");
                let Loss {
                    out,
                    data,
                    want,
                    took,
                } = lose_mid_allreduce(n, dead, Some(at), notices, algo);
                assert!(out[dead].is_none(), "{what}: the dead rank ran on");
                let mut failed = 0;
                for (r, o) in out.iter().enumerate().filter(|(r, _)| *r != dead) {
                    match o.as_ref().expect("survivors end") {
                        // A rank that got every contribution before the failure is done.
                        Ok(()) => assert!(data[r] == want, "{what}: rank {r} wrong result"),
                        Err(CommError::PeerLost { rank, .. }) if notices => {
                            assert_eq!(*rank, dead as u32, "{what}: rank {r}");
                            failed += 1;
                        }
                        Err(CommError::PeerLost { .. } | CommError::Timeout { .. }) if !notices => {
                            failed += 1;
                        }
                        Err(e) => panic!("{what}: rank {r}: {e}"),
                    }
                }
                assert!(failed > 0, "{what}: nobody noticed");
                if at == 1 {
                    // Nothing of the dead rank's left it: nobody can finish.
                    assert_eq!(failed, n - 1, "{what}");
                }
                // Bounded: the watchdog's limit per phase at most, never the hang bound.
                let phases = 2 * n as u64 + 4;
                assert!(
                    took <= span + phases * (TIMEOUT_NS + TIMEOUT_NS / 4),
                    "{what}: took {took} ns"
                );
            }
        }
    }
}
