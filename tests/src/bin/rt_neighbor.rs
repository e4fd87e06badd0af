//! Rank program: neighbour collectives against brute force. `rt_neighbor <seed>` builds, on
//! every rank, Cartesian grids in 1–3 dimensions with every mix of periods, random symmetric
//! multigraphs (`graph_create`), random weighted directed multigraphs
//! (`dist_graph_create_adjacent`) and graphs whose edges are named anywhere
//! (`dist_graph_create`); on each it runs `neighbor_allgather(v)` and `neighbor_alltoall(v)`,
//! blocking and non-blocking (several outstanding at once, a blocking call between post and
//! wait, completed by `wait_all_of` in a set with a collective request, by waits in reverse
//! and by `test_some_of` loops; one dropped unwaited), and refused arguments.
//! Every receive buffer is compared exactly with the one computed from the topology alone:
//! which rank and which of its blocks lands in each block (the i-th edge from p to q pairs
//! with the i-th; on a grid, what p sends up lands in the block its upper neighbour receives
//! from below). Each element names (call, sender, sender's block, index), so a crossed,
//! permuted or stale block fails. Rank 0 prints `ok <case>` per case.
use rcomm::neighbor::NeighborRequest;
use rcomm::{CartComm, CommError, Communicator, GraphComm, Op, Pending, Result};

/// What no message may write.
const UNTOUCHED: u64 = u64::MAX;
/// The "block" of an allgather's data (the same to every destination).
const ALL: usize = 0xffff;

fn mix(a: u64) -> u64 {
    let a = (a ^ (a >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (a ^ (a >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ (a >> 32)
}

fn h(xs: &[u64]) -> u64 {
    xs.iter().fold(0x1234_5678, |acc, &x| mix(acc ^ x))
}

/// Element `i` of block `blk` that rank `p` sends in call `call`.
fn enc(call: u64, p: u32, blk: usize, i: usize) -> u64 {
    call << 48 | u64::from(p) << 32 | (blk as u64) << 16 | i as u64
}

/// The topology as every rank sees it, from the construction alone.
struct Model {
    /// Per rank: out-neighbours and in-neighbours by block (`None`: no neighbour).
    out: Vec<Vec<Option<u32>>>,
    inn: Vec<Vec<Option<u32>>>,
    /// Per rank and in-block: the sender and its out-block that land there.
    src: Vec<Vec<Option<(u32, usize)>>>,
}

impl Model {
    /// A graph: the i-th occurrence of p among q's in-neighbours pairs with the i-th of q among
    /// p's out-neighbours.
    fn graph(out: Vec<Vec<u32>>, inn: Vec<Vec<u32>>) -> Model {
        let src = (0..inn.len())
            .map(|q| {
                (0..inn[q].len())
                    .map(|k| {
                        let p = inn[q][k];
                        let i = inn[q][..k].iter().filter(|&&x| x == p).count();
                        let j = (0..out[p as usize].len())
                            .filter(|&j| out[p as usize][j] == q as u32)
                            .nth(i)
                            .expect("edges listed at both ends");
                        Some((p, j))
                    })
                    .collect()
            })
            .collect();
        let some = |v: Vec<Vec<u32>>| v.into_iter().map(|l| l.into_iter().map(Some).collect());
        Model {
            out: some(out).collect(),
            inn: some(inn).collect(),
            src,
        }
    }

    /// A grid of `dims` (row-major) with `periods`: per dimension the neighbour at −1, then at
    /// +1; in-block 2d comes from the −1 neighbour's block 2d+1 (it sent up), block 2d+1 from
    /// the +1 neighbour's block 2d.
    fn cart(dims: &[u32], periods: &[bool]) -> Model {
        let cells: u32 = dims.iter().product();
        let coords = |mut r: u32| {
            let mut c = vec![0i64; dims.len()];
            for d in (0..dims.len()).rev() {
                c[d] = i64::from(r % dims[d]);
                r /= dims[d];
            }
            c
        };
        let rank = |c: &[i64]| -> Option<u32> {
            let mut r = 0i64;
            for d in 0..dims.len() {
                let e = i64::from(dims[d]);
                let x = if periods[d] { c[d].rem_euclid(e) } else { c[d] };
                if !(0..e).contains(&x) {
                    return None;
                }
                r = r * e + x;
            }
            Some(r as u32)
        };
        let nb: Vec<Vec<Option<u32>>> = (0..cells)
            .map(|r| {
                (0..2 * dims.len())
                    .map(|k| {
                        let mut c = coords(r);
                        c[k / 2] += if k % 2 == 0 { -1 } else { 1 };
                        rank(&c)
                    })
                    .collect()
            })
            .collect();
        let src = nb
            .iter()
            .map(|l| {
                (l.iter().enumerate())
                    .map(|(k, w)| w.map(|p| (p, if k % 2 == 0 { k + 1 } else { k - 1 })))
                    .collect()
            })
            .collect();
        Model {
            out: nb.clone(),
            inn: nb,
            src,
        }
    }
}

/// The neighbour collectives of both topology kinds, under one name.
trait Nb {
    fn comm(&self) -> &Communicator;
    fn ag(&self, s: &[u64], r: &mut [u64]) -> Result<()>;
    fn agv(&self, s: &[u64], r: &mut [u64], rc: &[usize], rd: &[usize]) -> Result<()>;
    fn a2a(&self, s: &[u64], r: &mut [u64]) -> Result<()>;
    #[allow(clippy::too_many_arguments)]
    fn a2av(
        &self,
        s: &[u64],
        sc: &[usize],
        sd: &[usize],
        r: &mut [u64],
        rc: &[usize],
        rd: &[usize],
    ) -> Result<()>;
    fn iag(&self, s: Vec<u64>, r: Vec<u64>) -> Result<NeighborRequest<u64>>;
    fn iagv(
        &self,
        s: Vec<u64>,
        r: Vec<u64>,
        rc: &[usize],
        rd: &[usize],
    ) -> Result<NeighborRequest<u64>>;
    fn ia2a(&self, s: Vec<u64>, r: Vec<u64>) -> Result<NeighborRequest<u64>>;
    #[allow(clippy::too_many_arguments)]
    fn ia2av(
        &self,
        s: Vec<u64>,
        sc: &[usize],
        sd: &[usize],
        r: Vec<u64>,
        rc: &[usize],
        rd: &[usize],
    ) -> Result<NeighborRequest<u64>>;
}

macro_rules! nb {
    ($t:ty) => {
        impl Nb for $t {
            fn comm(&self) -> &Communicator {
                <$t>::comm(self)
            }
            fn ag(&self, s: &[u64], r: &mut [u64]) -> Result<()> {
                self.neighbor_allgather(s, r)
            }
            fn agv(&self, s: &[u64], r: &mut [u64], rc: &[usize], rd: &[usize]) -> Result<()> {
                self.neighbor_allgatherv(s, r, rc, rd)
            }
            fn a2a(&self, s: &[u64], r: &mut [u64]) -> Result<()> {
                self.neighbor_alltoall(s, r)
            }
            fn a2av(
                &self,
                s: &[u64],
                sc: &[usize],
                sd: &[usize],
                r: &mut [u64],
                rc: &[usize],
                rd: &[usize],
            ) -> Result<()> {
                self.neighbor_alltoallv(s, sc, sd, r, rc, rd)
            }
            fn iag(&self, s: Vec<u64>, r: Vec<u64>) -> Result<NeighborRequest<u64>> {
                self.ineighbor_allgather(s, r)
            }
            fn iagv(
                &self,
                s: Vec<u64>,
                r: Vec<u64>,
                rc: &[usize],
                rd: &[usize],
            ) -> Result<NeighborRequest<u64>> {
                self.ineighbor_allgatherv(s, r, rc, rd)
            }
            fn ia2a(&self, s: Vec<u64>, r: Vec<u64>) -> Result<NeighborRequest<u64>> {
                self.ineighbor_alltoall(s, r)
            }
            fn ia2av(
                &self,
                s: Vec<u64>,
                sc: &[usize],
                sd: &[usize],
                r: Vec<u64>,
                rc: &[usize],
                rd: &[usize],
            ) -> Result<NeighborRequest<u64>> {
                self.ineighbor_alltoallv(s, sc, sd, r, rc, rd)
            }
        }
    };
}
nb!(CartComm);
nb!(GraphComm);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Ag,
    Agv,
    A2a,
    A2av,
}

/// One call's arguments on this rank and the receive buffer it must leave.
#[derive(Clone, Debug)]
struct Case {
    kind: Kind,
    call: u64,
    send: Vec<u64>,
    sc: Vec<usize>,
    sd: Vec<usize>,
    recv: Vec<u64>,
    rc: Vec<usize>,
    rd: Vec<usize>,
    want: Vec<u64>,
}

/// Displacements for blocks of `counts` in a shuffled order with gaps, and the buffer length.
fn layout(counts: &[usize], salt: u64) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..counts.len()).collect();
    order.sort_by_key(|&k| h(&[salt, k as u64]));
    let mut displs = vec![0; counts.len()];
    let mut pos = 0;
    for k in order {
        pos += (h(&[salt, k as u64, 1]) % 2) as usize;
        displs[k] = pos;
        pos += counts[k];
    }
    (displs, pos + (h(&[salt, 2]) % 2) as usize)
}

struct Ctx<'a> {
    m: &'a Model,
    me: u32,
    seed: u64,
    what: String,
}

impl<'a> Ctx<'a> {
    fn new(m: &'a Model, me: u32, seed: u64, what: String) -> Self {
        Ctx { m, me, seed, what }
    }

    /// Elements from rank `p`'s out-block `j` in call `call` of a v-variant.
    fn count(&self, call: u64, p: u32, j: usize) -> usize {
        (h(&[self.seed, call, u64::from(p), j as u64]) % 4) as usize
    }

    fn case(&self, kind: Kind, call: u64) -> Case {
        self.case_scaled(kind, call, 1)
    }

    /// A case whose counts are `scale` times larger (blocks past the eager limits).
    fn case_scaled(&self, kind: Kind, call: u64, scale: usize) -> Case {
        let me = self.me as usize;
        let (out, src) = (&self.m.out[me], &self.m.src[me]);
        let (no, ni) = (out.len(), src.len());
        let salt = h(&[self.seed, call, u64::from(self.me)]);
        // Blocks of fixed-size calls: `b` elements (0 sometimes).
        let b = (h(&[self.seed, call]) % 4) as usize * scale;
        let (sc, sd, slen) = match kind {
            Kind::Ag | Kind::Agv => {
                let c = if kind == Kind::Ag {
                    b
                } else {
                    self.count(call, self.me, ALL) * scale
                };
                (vec![c; no], vec![0; no], c)
            }
            Kind::A2a => (vec![b; no], (0..no).map(|j| j * b).collect(), b * no),
            Kind::A2av => {
                let c: Vec<usize> = (0..no)
                    .map(|j| self.count(call, self.me, j) * scale)
                    .collect();
                let (d, len) = layout(&c, salt ^ 1);
                (c, d, len)
            }
        };
        let mut send = vec![0xdead; slen];
        for j in 0..no {
            for i in 0..sc[j] {
                let blk = if matches!(kind, Kind::Ag | Kind::Agv) {
                    ALL
                } else {
                    j
                };
                send[sd[j] + i] = enc(call, self.me, blk, i);
            }
        }
        // The receive side, from the topology: who sends block k, and how much.
        let (rc, rd, rlen): (Vec<usize>, Vec<usize>, usize) = match kind {
            Kind::Ag | Kind::A2a => (vec![b; ni], (0..ni).map(|k| k * b).collect(), b * ni),
            Kind::Agv | Kind::A2av => {
                let c: Vec<usize> = (0..ni)
                    .map(|k| match src[k] {
                        Some((p, j)) => {
                            let blk = if kind == Kind::Agv { ALL } else { j };
                            self.count(call, p, blk) * scale
                        }
                        // No neighbour: any count, the block stays as it was.
                        None => (h(&[salt, k as u64, 3]) % 3) as usize,
                    })
                    .collect();
                let (d, len) = layout(&c, salt ^ 2);
                (c, d, len)
            }
        };
        let recv = vec![UNTOUCHED; rlen];
        let mut want = recv.clone();
        for k in 0..ni {
            if let Some((p, j)) = src[k] {
                let blk = if matches!(kind, Kind::Ag | Kind::Agv) {
                    ALL
                } else {
                    j
                };
                for i in 0..rc[k] {
                    want[rd[k] + i] = enc(call, p, blk, i);
                }
            }
        }
        Case {
            kind,
            call,
            send,
            sc,
            sd,
            recv,
            rc,
            rd,
            want,
        }
    }

    fn blocking(&self, c: &impl Nb, mut cs: Case) {
        let r = &mut cs.recv;
        let res = match cs.kind {
            Kind::Ag => c.ag(&cs.send, r),
            Kind::Agv => c.agv(&cs.send, r, &cs.rc, &cs.rd),
            Kind::A2a => c.a2a(&cs.send, r),
            Kind::A2av => c.a2av(&cs.send, &cs.sc, &cs.sd, r, &cs.rc, &cs.rd),
        };
        res.unwrap_or_else(|e| panic!("{}: blocking {:?}: {e}", self.what, cs.kind));
        self.check(&cs, &cs.recv, "blocking");
    }

    fn start(&self, c: &impl Nb, cs: &Case) -> Result<NeighborRequest<u64>> {
        let (s, r) = (cs.send.clone(), cs.recv.clone());
        match cs.kind {
            Kind::Ag => c.iag(s, r),
            Kind::Agv => c.iagv(s, r, &cs.rc, &cs.rd),
            Kind::A2a => c.ia2a(s, r),
            Kind::A2av => c.ia2av(s, &cs.sc, &cs.sd, r, &cs.rc, &cs.rd),
        }
    }

    fn check(&self, cs: &Case, got: &[u64], how: &str) {
        if got != cs.want {
            let k = got.iter().zip(&cs.want).position(|(a, b)| a != b);
            panic!(
                "{}: {how} {:?} (call {}) on rank {}: got {got:x?}, want {:x?} (first \
                 difference at {k:?}; rc {:?} rd {:?})",
                self.what, cs.kind, cs.call, self.me, cs.want, cs.rc, cs.rd
            );
        }
    }

    /// Every call blocking, then non-blocking ones outstanding together.
    fn suite(&self, c: &impl Nb) {
        let kinds = [Kind::Ag, Kind::Agv, Kind::A2a, Kind::A2av];
        for (i, &k) in kinds.iter().enumerate() {
            self.blocking(c, self.case(k, i as u64));
        }
        for round in 0..3u64 {
            let base = 10 + 10 * round;
            // Round 1's blocks run to 72 KiB: past every transport's eager limit.
            let scale = if round == 1 { 3000 } else { 1 };
            let first = [
                self.case_scaled(Kind::Agv, base, scale),
                self.case_scaled(Kind::A2av, base + 1, scale),
                self.case_scaled(Kind::A2a, base + 2, scale),
            ];
            let mut reqs: Vec<(Case, NeighborRequest<u64>)> = first
                .into_iter()
                .map(|cs| {
                    let r = self.start(c, &cs).unwrap();
                    (cs, r)
                })
                .collect();
            // Blocking calls between post and wait: a neighbour one and another collective.
            self.blocking(c, self.case(kinds[round as usize], base + 3));
            let mut sum = [u64::from(self.me)];
            c.comm().allreduce_in_place(&mut sum, Op::Sum).unwrap();
            let n = u64::from(c.comm().size());
            assert_eq!(sum[0], n * (n - 1) / 2);
            for (k, call) in [(Kind::Ag, base + 4), (Kind::Agv, base + 5)] {
                let cs = self.case_scaled(k, call, scale);
                let r = self.start(c, &cs).unwrap();
                reqs.push((cs, r));
            }
            match round {
                // One mixed set with a collective request, completed by wait_all_of, ...
                0 => {
                    let mut sum = (c.comm().iallreduce(vec![u64::from(self.me)], Op::Sum)).unwrap();
                    {
                        let mut set: Vec<&mut dyn Pending> = reqs
                            .iter_mut()
                            .map(|(_, r)| r as &mut dyn Pending)
                            .collect();
                        set.push(&mut sum);
                        rcomm::wait_all_of(&mut set);
                    }
                    assert_eq!(sum.wait().unwrap(), [n * (n - 1) / 2]);
                    for (cs, r) in reqs {
                        self.check(&cs, &r.wait().unwrap(), "wait_all_of");
                    }
                }
                // ... waits in reverse, handing the send buffer back too, ...
                1 => {
                    for (cs, r) in reqs.into_iter().rev() {
                        let (s, got) = r.wait_buffers().unwrap();
                        assert_eq!(s, cs.send, "the send buffer comes back as it was");
                        self.check(&cs, &got, "waited in reverse");
                    }
                }
                // ... and test_some_of until every one is taken out.
                _ => {
                    while !reqs.is_empty() {
                        let done = {
                            let mut set: Vec<&mut dyn Pending> = reqs
                                .iter_mut()
                                .map(|(_, r)| r as &mut dyn Pending)
                                .collect();
                            rcomm::test_some_of(&mut set)
                        };
                        for &i in done.iter().rev() {
                            let (cs, r) = reqs.remove(i);
                            self.check(&cs, &r.wait().unwrap(), "test_some_of");
                        }
                    }
                }
            }
        }
        self.refusals(c);
    }

    /// Refused arguments are errors, not panics, before anything moves; blocks of the wrong
    /// length are errors where they arrive. Calls after them still work.
    fn refusals(&self, c: &impl Nb) {
        let me = self.me as usize;
        let (no, ni) = (self.m.out[me].len(), self.m.inn[me].len());
        let bad = |r: Result<()>, what: &str| match r {
            Err(CommError::InvalidArg(_)) => {}
            r => panic!("{}: {what}: {r:?}, want InvalidArg", self.what),
        };
        let ibad = |r: Result<NeighborRequest<u64>>, what: &str| match r {
            Err(CommError::InvalidArg(_)) => {}
            Ok(_) => panic!("{}: {what}: started, want InvalidArg", self.what),
            Err(e) => panic!("{}: {what}: {e}, want InvalidArg", self.what),
        };
        let cs = self.case(Kind::Agv, 100);
        let mut r = cs.recv.clone();
        // One count too many.
        let mut rc = cs.rc.clone();
        rc.push(0);
        bad(c.agv(&cs.send, &mut r, &rc, &cs.rd), "allgatherv counts");
        ibad(
            c.iagv(cs.send.clone(), r.clone(), &rc, &cs.rd),
            "iallgatherv counts",
        );
        // A block past the end of the buffer, or overlapping blocks.
        let (mut rc, mut rd) = (cs.rc.clone(), cs.rd.clone());
        if ni >= 1 {
            (rc[0], rd[0]) = (1, r.len());
        } else {
            rd.push(0);
        }
        bad(c.agv(&cs.send, &mut r, &rc, &rd), "allgatherv past the end");
        ibad(
            c.iagv(cs.send.clone(), r.clone(), &rc, &rd),
            "iallgatherv past the end",
        );
        let (rc, mut rd) = (vec![2; ni], vec![0; ni]);
        let mut rr = vec![0u64; 2 * ni + 1];
        if ni >= 2 {
            rd = (0..ni).collect();
        } else {
            rd.push(0);
        }
        bad(c.agv(&cs.send, &mut rr, &rc, &rd), "allgatherv overlap");
        ibad(
            c.iagv(cs.send.clone(), rr.clone(), &rc, &rd),
            "iallgatherv overlap",
        );
        // alltoallv: a send block past the end.
        let cs = self.case(Kind::A2av, 101);
        let (mut sc, mut sd) = (cs.sc.clone(), cs.sd.clone());
        if no >= 1 {
            (sc[0], sd[0]) = (1, cs.send.len());
        } else {
            sc.push(1);
        }
        let mut r = cs.recv.clone();
        bad(
            c.a2av(&cs.send, &sc, &sd, &mut r, &cs.rc, &cs.rd),
            "alltoallv send past the end",
        );
        ibad(
            c.ia2av(cs.send.clone(), &sc, &sd, r.clone(), &cs.rc, &cs.rd),
            "ialltoallv send past the end",
        );
        // Fixed-size calls whose buffers do not split into blocks.
        let s = if no > 0 { vec![0u64; 2 * no] } else { vec![1] };
        let mut r = vec![0u64; 2 * ni + 1];
        bad(c.a2a(&s, &mut r), "alltoall");
        ibad(c.ia2a(s.clone(), r.clone()), "ialltoall");
        let mut r = vec![0u64; 2 * ni + 1];
        bad(c.ag(&[1, 2], &mut r), "allgather");
        ibad(c.iag(vec![1, 2], r.clone()), "iallgather");
        // Receivers expecting one element more than each sender sends: an error where a block
        // arrives, nowhere else.
        let arrives = self.m.src[me].iter().any(Option::is_some);
        let cs = self.case(Kind::Agv, 102);
        let rc: Vec<usize> = cs.rc.iter().map(|&x| x + 1).collect();
        let (rd, len) = layout(&rc, 7);
        let mut r = vec![0u64; len];
        let res = c.agv(&cs.send, &mut r, &rc, &rd);
        assert_eq!(
            res.is_err(),
            arrives,
            "{}: short blocks: {res:?}",
            self.what
        );
        let res = c.iagv(cs.send.clone(), r, &rc, &rd).unwrap().wait();
        assert_eq!(
            res.is_err(),
            arrives,
            "{}: short blocks: {res:?}",
            self.what
        );
        // A request dropped unwaited takes back its receives: its messages must not land in
        // the calls after it (on one tag for every call they would).
        drop(self.start(c, &self.case(Kind::A2a, 105)).unwrap());
        let cs = self.case(Kind::A2av, 106);
        self.check(
            &cs,
            &self.start(c, &cs).unwrap().wait().unwrap(),
            "after a drop",
        );
        // Everything still in step.
        self.blocking(c, self.case(Kind::A2av, 103));
        let cs = self.case(Kind::Agv, 104);
        let got = self.start(c, &cs).unwrap().wait().unwrap();
        self.check(&cs, &got, "after the refusals");
    }
}

/// Random multiplicities in 0..3 (about a third zero); `sym` makes m(p, q) = m(q, p).
fn mult(seed: u64, p: u32, q: u32, sym: bool) -> usize {
    let (a, b) = if sym { (p.min(q), p.max(q)) } else { (p, q) };
    (h(&[seed, u64::from(a), u64::from(b)]) % 3) as usize
}

/// Ranks `0..n`, each `m(x)` times, in an order shuffled by `salt`.
fn shuffled(n: u32, salt: u64, m: impl Fn(u32) -> usize) -> Vec<u32> {
    let mut v: Vec<(u64, u32)> = (0..n)
        .flat_map(|x| (0..m(x)).map(move |i| (x, i)))
        .map(|(x, i)| (h(&[salt, u64::from(x), i as u64]), x))
        .collect();
    v.sort();
    v.into_iter().map(|(_, x)| x).collect()
}

fn main() {
    let seed: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let world = rcomm::init().expect("init");
    let (me, n) = (world.rank(), world.size());
    let ok = |case: &str| {
        world.barrier().unwrap();
        if me == 0 {
            println!("ok {case}");
        }
    };

    // Grids in 1-3 dimensions, every mix of periods; one smaller than the communicator.
    let mut shapes: Vec<Vec<u32>> = vec![vec![n]];
    for nd in [2, 3] {
        let mut d = vec![0; nd];
        rcomm::dims_create(n, &mut d).unwrap();
        shapes.push(d);
    }
    if n > 2 {
        shapes.push(vec![n - 1]);
        let mut d = vec![0, 2];
        if rcomm::dims_create(n - n % 2, &mut d).is_ok() {
            shapes.push(d);
        }
    }
    for (si, dims) in shapes.iter().enumerate() {
        for mask in 0..1u32 << dims.len() {
            let periods: Vec<bool> = (0..dims.len()).map(|d| mask >> d & 1 == 1).collect();
            let what = format!("cart {dims:?} periods {periods:?}");
            let m = Model::cart(dims, &periods);
            match world.cart_create(dims, &periods, false).unwrap() {
                Some(c) => {
                    assert_eq!(c.neighbors().unwrap(), m.out[me as usize], "{what}");
                    Ctx::new(&m, me, h(&[seed, (si as u64) << 8 | u64::from(mask)]), what)
                        .suite(&c);
                }
                None => assert!(me >= dims.iter().product::<u32>(), "{what}"),
            }
        }
    }
    ok("cart");

    // A request is not complete before its neighbours have started: rank 0 tests its own
    // while the others wait for its word to start theirs (a test that says "complete" too
    // early fails here, which a wait would hide).
    if n > 1 {
        let c = world.cart_create(&[n], &[true], false).unwrap().unwrap();
        let send = vec![u64::from(me); 3];
        if me == 0 {
            let mut r = c.ineighbor_allgather(send, vec![0; 6]).unwrap();
            for _ in 0..100 {
                assert!(!r.test(), "complete before the neighbours started");
                let mut set: [&mut dyn Pending; 1] = [&mut r];
                assert!(rcomm::test_some_of(&mut set).is_empty());
                assert!(!rcomm::test_all_of(&mut set));
            }
            for p in 1..n {
                world.send(&[1u8], p, rcomm::Tag(7)).unwrap();
            }
            let got = r.wait().unwrap();
            assert_eq!(got, [[u64::from(n - 1); 3], [1; 3]].concat());
        } else {
            let mut go = [0u8];
            world.recv(&mut go, 0, rcomm::Tag(7)).unwrap();
            let got = c
                .ineighbor_allgather(send, vec![0; 6])
                .unwrap()
                .wait()
                .unwrap();
            let (lo, hi) = ((me + n - 1) % n, (me + 1) % n);
            assert_eq!(got, [[u64::from(lo); 3], [u64::from(hi); 3]].concat());
        }
    }
    ok("not-early");

    // Symmetric multigraphs with self loops, lists shuffled per node; the last rank is left
    // off in every other one.
    for s in 0..3u64 {
        let gs = h(&[seed, 100 + s]);
        let nodes = if s % 2 == 1 && n > 1 { n - 1 } else { n };
        let lists: Vec<Vec<u32>> = (0..nodes)
            .map(|p| shuffled(nodes, gs ^ u64::from(p), |q| mult(gs, p, q, true)))
            .collect();
        let mut index = Vec::new();
        let mut edges = Vec::new();
        for l in &lists {
            edges.extend_from_slice(l);
            index.push(edges.len() as u32);
        }
        let what = format!("graph {s} ({nodes} nodes)");
        let m = Model::graph(lists.clone(), lists);
        match world.graph_create(&index, &edges, false).unwrap() {
            Some(g) => {
                assert_eq!(g.sources(), g.graph_neighbors(me).unwrap(), "{what}");
                assert_eq!(
                    g.destinations()
                        .iter()
                        .map(|&x| Some(x))
                        .collect::<Vec<_>>(),
                    m.out[me as usize],
                    "{what}"
                );
                Ctx::new(&m, me, h(&[seed, 100 + s]), what).suite(&g);
            }
            None => assert!(me >= nodes, "{what}"),
        }
    }
    ok("graph");

    // Directed weighted multigraphs, both lists shuffled per rank.
    for s in 0..3u64 {
        let gs = h(&[seed, 200 + s]);
        let outs: Vec<Vec<u32>> = (0..n)
            .map(|p| shuffled(n, gs ^ 1 ^ u64::from(p) << 8, |q| mult(gs, p, q, false)))
            .collect();
        let ins: Vec<Vec<u32>> = (0..n)
            .map(|q| shuffled(n, gs ^ 2 ^ u64::from(q) << 8, |p| mult(gs, p, q, false)))
            .collect();
        let (o, i) = (&outs[me as usize], &ins[me as usize]);
        let ow: Vec<i32> = o.iter().map(|&q| (me * 100 + q) as i32).collect();
        let iw: Vec<i32> = i.iter().map(|&p| (p * 100 + me) as i32).collect();
        let g = world
            .dist_graph_create_adjacent(i, Some(&iw), o, Some(&ow), false)
            .unwrap();
        assert_eq!(
            g.dist_graph_neighbors(),
            (&i[..], Some(&iw[..]), &o[..], Some(&ow[..]))
        );
        let m = Model::graph(outs.clone(), ins.clone());
        Ctx::new(&m, me, h(&[seed, 200 + s]), format!("dist graph {s}")).suite(&g);
    }
    ok("dist-graph");

    // Edges named anywhere: edge p -> q by rank (p + q) mod n; each rank's lists ordered by
    // the naming rank, then the order it named them in.
    let gs = h(&[seed, 300]);
    let (mut es, mut ed) = (vec![], vec![]);
    let (mut outs, mut ins) = (vec![vec![]; n as usize], vec![vec![]; n as usize]);
    for r in 0..n {
        for p in 0..n {
            for q in 0..n {
                if (p + q) % n == r {
                    for _ in 0..mult(gs, p, q, false) {
                        outs[p as usize].push(q);
                        ins[q as usize].push(p);
                        if r == me {
                            es.push(p);
                            ed.push(q);
                        }
                    }
                }
            }
        }
    }
    let g = world
        .dist_graph_create(&es, &vec![1; es.len()], &ed, None, false)
        .unwrap();
    assert_eq!(
        (g.sources(), g.destinations()),
        (&ins[me as usize][..], &outs[me as usize][..])
    );
    let m = Model::graph(outs, ins);
    Ctx::new(&m, me, h(&[seed, 300]), "dist graph named anywhere".into()).suite(&g);
    ok("dist-graph-named");
}
