use super::*;
use proptest::prelude::*;
use rcomm_kernels::{Dtype, Op, reduce_into, reduce3};
use std::collections::{HashMap, VecDeque};

/// `dst = dst ⊕ src` or `dst = src ⊕ dst` on whole chunks.
type ReduceFn<'a> = &'a dyn Fn(&mut [u8], &[u8], Order);

/// Two chunks share bytes.
fn overlap(a: &Chunk, b: &Chunk) -> bool {
    a.buf == b.buf && a.len > 0 && b.len > 0 && a.off < b.off + b.len && b.off < a.off + a.len
}

/// Runs the schedules of all ranks in lock step, moving bytes by (src, dst) FIFO queues (MPI's
/// non-overtaking order), and returns every rank's final `Data`. Panics on a deadlock, a
/// message left unreceived, a size mismatch, an empty message, a chunk outside its buffer, a
/// write to `Input`, or chunks of one phase (or one local step) that overlap where one is
/// written — everything an executor relies on.
fn simulate(
    scheds: &[Schedule],
    data: Vec<Vec<u8>>,
    input: Vec<Vec<u8>>,
    red: ReduceFn,
) -> Vec<Vec<u8>> {
    let n = scheds.len();
    let mut bufs = data;
    let mut tmps: Vec<Vec<u8>> = scheds.iter().map(|s| vec![0xa5; s.tmp_len]).collect();
    let mut pc = vec![0usize; n];
    let mut posted = vec![false; n];
    let mut chan: HashMap<(usize, usize), VecDeque<Vec<u8>>> = HashMap::new();
    for (r, s) in scheds.iter().enumerate() {
        for ph in &s.phases {
            let (sends, recvs): (Vec<Chunk>, Vec<Chunk>) = (
                ph.xfers
                    .iter()
                    .filter_map(|st| match st {
                        Step::Send { src, .. } => Some(*src),
                        _ => None,
                    })
                    .collect(),
                ph.xfers
                    .iter()
                    .filter_map(|st| match st {
                        Step::Recv { dst, .. } => Some(*dst),
                        _ => None,
                    })
                    .collect(),
            );
            for (i, d) in recvs.iter().enumerate() {
                assert_ne!(d.buf, Buf::Input, "rank {r}: receive into Input");
                for o in sends.iter().chain(&recvs[i + 1..]) {
                    assert!(!overlap(d, o), "rank {r}: {d:?} overlaps {o:?} in a phase");
                }
            }
            for c in sends.iter().chain(&recvs) {
                assert!(c.len > 0, "rank {r}: empty message");
            }
            for st in &ph.local {
                match st {
                    Step::Reduce { dst, src, .. } | Step::Copy { dst, src } => {
                        assert_ne!(dst.buf, Buf::Input, "rank {r}: local write to Input");
                        assert!(!overlap(dst, src), "rank {r}: {st:?} overlaps itself");
                        assert_eq!(dst.len, src.len, "rank {r}: {st:?}");
                    }
                    _ => panic!("rank {r}: transfer among local steps"),
                }
            }
            for st in &ph.xfers {
                assert!(
                    matches!(st, Step::Send { .. } | Step::Recv { .. }),
                    "rank {r}: local step among transfers"
                );
            }
        }
    }
    let read = |b: &[u8], t: &[u8], i: &[u8], c: Chunk| -> Vec<u8> {
        let whole = match c.buf {
            Buf::Data => b,
            Buf::Tmp => t,
            Buf::Input => i,
        };
        assert!(c.off + c.len <= whole.len(), "{c:?} outside its buffer");
        whole[c.off..c.off + c.len].to_vec()
    };
    let mut progress = true;
    while progress {
        progress = false;
        for r in 0..n {
            let Some(ph) = scheds[r].phases.get(pc[r]) else {
                continue;
            };
            // Sends of a phase go out once (they do not wait); receives wait for data.
            if !posted[r] {
                posted[r] = true;
                progress = true;
                for st in &ph.xfers {
                    if let Step::Send { peer, src } = st {
                        let v = read(&bufs[r], &tmps[r], &input[r], *src);
                        chan.entry((r, *peer as usize)).or_default().push_back(v);
                    }
                }
            }
            // Receives from one peer match its sends in order.
            let mut want: HashMap<usize, usize> = HashMap::new();
            for st in &ph.xfers {
                if let Step::Recv { peer, .. } = st {
                    *want.entry(*peer as usize).or_default() += 1;
                }
            }
            let ready = want
                .iter()
                .all(|(&p, &k)| chan.get(&(p, r)).is_some_and(|q| q.len() >= k));
            if !ready {
                continue;
            }
            for st in &ph.xfers {
                if let Step::Recv { peer, dst } = st {
                    let v = chan
                        .get_mut(&(*peer as usize, r))
                        .unwrap()
                        .pop_front()
                        .unwrap();
                    assert_eq!(v.len(), dst.len, "rank {r}: message size from {peer}");
                    let whole = if dst.buf == Buf::Data {
                        &mut bufs[r]
                    } else {
                        &mut tmps[r]
                    };
                    assert!(dst.off + dst.len <= whole.len(), "{dst:?} outside");
                    whole[dst.off..dst.off + dst.len].copy_from_slice(&v);
                }
            }
            for st in &ph.local {
                let (Step::Copy { dst, src } | Step::Reduce { dst, src, .. }) = st else {
                    unreachable!()
                };
                let s = read(&bufs[r], &tmps[r], &input[r], *src);
                let whole = if dst.buf == Buf::Data {
                    &mut bufs[r]
                } else {
                    &mut tmps[r]
                };
                assert!(dst.off + dst.len <= whole.len(), "{dst:?} outside");
                let d = &mut whole[dst.off..dst.off + dst.len];
                match st {
                    Step::Reduce { order, .. } => red(d, &s, *order),
                    _ => d.copy_from_slice(&s),
                }
            }
            pc[r] += 1;
            posted[r] = false;
            progress = true;
        }
    }
    for r in 0..n {
        assert_eq!(
            pc[r],
            scheds[r].phases.len(),
            "rank {r} stuck: deadlock in the schedule"
        );
    }
    for ((from, to), q) in &chan {
        assert!(
            q.is_empty(),
            "{} message(s) {from} → {to} never received",
            q.len()
        );
    }
    bufs
}

fn no_reduce(_: &mut [u8], _: &[u8], _: Order) {
    panic!("a data-movement schedule reduced");
}

/// The Mersenne prime 2³¹ − 1: matrix entries stay below it, products fit in u64.
const P: u64 = (1 << 31) - 1;

/// A reduction: a built-in (op, dtype) through the kernels, or 2×2 matrix product modulo
/// [`P`] over elements of four little-endian u32 — associative, not commutative.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Comb {
    Kernel(Op, Dtype),
    Mat,
}

fn mat(b: &[u8]) -> [u64; 4] {
    std::array::from_fn(|i| u64::from(u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap())))
}

fn mat_mul(x: &[u8], y: &[u8], out: &mut [u8]) {
    for ((o, a), b) in out.chunks_mut(16).zip(x.chunks(16)).zip(y.chunks(16)) {
        let (a, b) = (mat(a), mat(b));
        let c = [
            (a[0] * b[0] + a[1] * b[2]) % P,
            (a[0] * b[1] + a[1] * b[3]) % P,
            (a[2] * b[0] + a[3] * b[2]) % P,
            (a[2] * b[1] + a[3] * b[3]) % P,
        ];
        for (i, v) in c.iter().enumerate() {
            o[4 * i..4 * i + 4].copy_from_slice(&(*v as u32).to_le_bytes());
        }
    }
}

impl Comb {
    fn elem(self) -> usize {
        match self {
            Comb::Kernel(_, d) => d.size(),
            Comb::Mat => 16,
        }
    }

    /// `out = left ⊕ right`.
    fn apply3(self, out: &mut [u8], left: &[u8], right: &[u8]) {
        match self {
            Comb::Kernel(op, d) => reduce3(op, d, out, left, right).unwrap(),
            Comb::Mat => mat_mul(left, right, out),
        }
    }

    /// The simulator's reduction, honouring the orientation.
    fn apply(self, dst: &mut [u8], src: &[u8], order: Order) {
        match (self, order) {
            (Comb::Kernel(op, d), Order::DstFirst) => reduce_into(op, d, dst, src).unwrap(),
            (_, o) => {
                let mut out = vec![0; dst.len()];
                if o == Order::DstFirst {
                    self.apply3(&mut out, dst, src);
                } else {
                    self.apply3(&mut out, src, dst);
                }
                dst.copy_from_slice(&out);
            }
        }
    }

    /// `a(0) ⊕ a(1) ⊕ …` from the left.
    fn fold_left(self, a: &[Vec<u8>]) -> Vec<u8> {
        let mut acc = a[0].clone();
        for x in &a[1..] {
            let prev = acc.clone();
            self.apply3(&mut acc, &prev, x);
        }
        acc
    }

    /// The canonical right fold of the direct algorithms: `acc = a(n−1); acc = a(j) ⊕ acc`.
    fn fold_canonical(self, a: &[Vec<u8>]) -> Vec<u8> {
        let mut acc = a[a.len() - 1].clone();
        for x in a[..a.len() - 1].iter().rev() {
            let prev = acc.clone();
            self.apply3(&mut acc, x, &prev);
        }
        acc
    }

    /// Operands of `count` elements for rank `r`: any bits for integers, matrices mod P,
    /// and floats in [0.5, 2) (no cancellation, no overflow over 64 ranks, so a relative
    /// tolerance is meaningful).
    fn operands(self, seed: u64, r: usize, count: usize) -> Vec<u8> {
        let mut x = seed ^ (r as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut next = move || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let unit = |v: u64| 0.5 + 1.5 * ((v >> 11) as f64 / (1u64 << 53) as f64);
        let mut out = Vec::with_capacity(count * self.elem());
        for _ in 0..count {
            match self {
                Comb::Mat => (0..4).for_each(|_| {
                    out.extend_from_slice(&((next() % P) as u32).to_le_bytes());
                }),
                Comb::Kernel(_, Dtype::F32) => {
                    out.extend_from_slice(&(unit(next()) as f32).to_le_bytes());
                }
                Comb::Kernel(_, Dtype::F64) => out.extend_from_slice(&unit(next()).to_le_bytes()),
                Comb::Kernel(_, Dtype::Bf16) => {
                    let bits = (unit(next()) as f32).to_bits() >> 16;
                    out.extend_from_slice(&(bits as u16).to_le_bytes());
                }
                Comb::Kernel(_, d) => {
                    out.extend_from_slice(&next().to_le_bytes()[..d.size()]);
                }
            }
        }
        out
    }

    /// Asserts `got` matches the reference `want` of an n-rank reduction: bitwise for
    /// integers, matrices and float min/max; for float sums and products within a relative
    /// 2·n·u (u the unit roundoff), the first-order bound for any order of combining n
    /// positive operands.
    fn assert_close(self, n: usize, got: &[u8], want: &[u8], what: &str) {
        let Comb::Kernel(op, d) = self else {
            assert_eq!(got, want, "{what}");
            return;
        };
        if !(d.is_float() && matches!(op, Op::Sum | Op::Prod)) {
            assert_eq!(got, want, "{what}: {op:?} {d:?}");
            return;
        }
        let (u, dec): (f64, fn(&[u8]) -> f64) = match d {
            Dtype::F32 => (2f64.powi(-24), |b| {
                f64::from(f32::from_le_bytes(b.try_into().unwrap()))
            }),
            Dtype::F64 => (2f64.powi(-53), |b| {
                f64::from_le_bytes(b.try_into().unwrap())
            }),
            Dtype::Bf16 => (2f64.powi(-8), |b| {
                f64::from(f32::from_bits(
                    u32::from(u16::from_le_bytes(b.try_into().unwrap())) << 16,
                ))
            }),
            _ => unreachable!(),
        };
        let tol = 2.0 * n as f64 * u;
        assert_eq!(got.len(), want.len(), "{what}");
        for (g, w) in got.chunks(d.size()).zip(want.chunks(d.size())) {
            let (g, w) = (dec(g), dec(w));
            assert!(
                (g - w).abs() <= tol * w.abs(),
                "{what}: {op:?} {d:?} on {n} ranks: {g} vs {w}"
            );
        }
    }
}

/// Every built-in (op, dtype) pair the kernels define for the tested dtypes.
fn kernel_combs() -> Vec<Comb> {
    let dtypes = [
        Dtype::I32,
        Dtype::U8,
        Dtype::I64,
        Dtype::F32,
        Dtype::F64,
        Dtype::Bf16,
    ];
    let ops = [
        Op::Sum,
        Op::Prod,
        Op::Min,
        Op::Max,
        Op::BAnd,
        Op::BOr,
        Op::BXor,
    ];
    dtypes
        .iter()
        .flat_map(|&d| ops.iter().map(move |&o| (o, d)))
        .filter(|(o, d)| o.check(*d).is_ok())
        .map(|(o, d)| Comb::Kernel(o, d))
        .collect()
}

/// A reduction: `sel` picks a built-in pair, or the matrix product when `ordered` allows it
/// (roughly one case in four).
fn pick_comb(sel: usize, ordered: bool) -> Comb {
    let k = kernel_combs();
    if ordered && sel.is_multiple_of(4) {
        Comb::Mat
    } else {
        k[sel % k.len()]
    }
}

/// An element count: 0, 1, 7, an odd count, or one not divisible by n; smaller for many
/// ranks so each case stays fast.
fn pick_count(n: usize, sel: usize, q: usize) -> usize {
    let q = q % (96 / n).max(2);
    match sel % 5 {
        0 => 0,
        1 => 1,
        2 => 7,
        3 => 2 * q + 1,
        _ => n * q + 1 + q % n.max(1),
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ar {
    Ring,
    Rd,
    Rabenseifner,
    Direct,
    OneShot,
    TwoShot,
}

fn allreduce_case(algo: Ar, n: usize, count: usize, comb: Comb, seed: u64) {
    let elem = comb.elem();
    let ins: Vec<Vec<u8>> = (0..n).map(|r| comb.operands(seed, r, count)).collect();
    let scheds: Vec<Schedule> = (0..n as u32)
        .map(|r| match algo {
            Ar::Ring => ring_allreduce(r, n as u32, count, elem),
            Ar::Rd => recursive_doubling_allreduce(r, n as u32, count, elem),
            Ar::Rabenseifner => rabenseifner_allreduce(r, n as u32, count, elem),
            Ar::Direct => direct_allreduce(r, n as u32, count, elem),
            Ar::OneShot => one_shot_allreduce(r, n as u32, count, elem),
            Ar::TwoShot => two_shot_allreduce(r, n as u32, count, elem),
        })
        .collect();
    let red = |d: &mut [u8], s: &[u8], o: Order| comb.apply(d, s, o);
    let out = simulate(&scheds, ins.clone(), vec![vec![]; n], &red);
    let what = format!("{algo:?} allreduce of {count} on {n} ranks");
    if matches!(algo, Ar::Direct | Ar::OneShot | Ar::TwoShot) {
        assert_eq!(
            out[0],
            comb.fold_canonical(&ins),
            "{what}: not the canonical fold"
        );
    } else {
        comb.assert_close(n, &out[0], &comb.fold_left(&ins), &what);
    }
    for (r, o) in out.iter().enumerate() {
        assert_eq!(o, &out[0], "{what}: rank {r} differs from rank 0");
    }
}

fn reduce_scatter_case(direct: bool, counts: &[usize], comb: Comb, seed: u64) {
    let n = counts.len();
    let blocks = packed_blocks(counts, comb.elem());
    let total: usize = counts.iter().sum();
    let ins: Vec<Vec<u8>> = (0..n).map(|r| comb.operands(seed, r, total)).collect();
    let scheds: Vec<Schedule> = (0..n as u32)
        .map(|r| {
            if direct {
                direct_reduce_scatter_v(r, &blocks)
            } else {
                ring_reduce_scatter_v(r, &blocks)
            }
        })
        .collect();
    let red = |d: &mut [u8], s: &[u8], o: Order| comb.apply(d, s, o);
    let out = simulate(&scheds, ins.clone(), vec![vec![]; n], &red);
    for (r, o) in out.iter().enumerate() {
        let (off, len) = blocks[r];
        let parts: Vec<Vec<u8>> = ins.iter().map(|v| v[off..off + len].to_vec()).collect();
        let got = &o[off..off + len];
        let what = format!("reduce_scatter (direct {direct}) {counts:?} rank {r}");
        if direct {
            assert_eq!(got, comb.fold_canonical(&parts), "{what}");
        } else {
            comb.assert_close(n, got, &comb.fold_left(&parts), &what);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Red {
    Binomial,
    BinomialOrdered,
    Direct,
}

fn reduce_case(algo: Red, n: usize, root: usize, count: usize, comb: Comb, seed: u64) {
    let elem = comb.elem();
    let ins: Vec<Vec<u8>> = (0..n).map(|r| comb.operands(seed, r, count)).collect();
    let (nn, rt) = (n as u32, root as u32);
    let scheds: Vec<Schedule> = (0..nn)
        .map(|r| match algo {
            Red::Binomial => binomial_reduce(r, nn, rt, count * elem),
            Red::BinomialOrdered => binomial_reduce_ordered(r, nn, rt, count * elem),
            Red::Direct => direct_reduce(r, nn, rt, count, elem),
        })
        .collect();
    let red = |d: &mut [u8], s: &[u8], o: Order| comb.apply(d, s, o);
    let out = simulate(&scheds, ins.clone(), vec![vec![]; n], &red);
    let what = format!("{algo:?} reduce of {count} to {root} on {n} ranks");
    if algo == Red::Direct {
        assert_eq!(out[root], comb.fold_canonical(&ins), "{what}");
    } else {
        comb.assert_close(n, &out[root], &comb.fold_left(&ins), &what);
    }
}

fn scan_case(n: usize, count: usize, comb: Comb, seed: u64, exclusive: bool) {
    let ins: Vec<Vec<u8>> = (0..n).map(|r| comb.operands(seed, r, count)).collect();
    let scheds: Vec<Schedule> = (0..n as u32)
        .map(|r| chain_scan(r, n as u32, count * comb.elem(), exclusive))
        .collect();
    let red = |d: &mut [u8], s: &[u8], o: Order| comb.apply(d, s, o);
    let out = simulate(&scheds, ins.clone(), vec![vec![]; n], &red);
    for (r, o) in out.iter().enumerate() {
        let upto = if exclusive { r } else { r + 1 };
        let want = if upto == 0 || count == 0 {
            ins[r].clone()
        } else {
            comb.fold_left(&ins[..upto])
        };
        comb.assert_close(
            n,
            o,
            &want,
            &format!("scan (exclusive {exclusive}) rank {r}"),
        );
    }
}

#[test]
fn every_rank_ordered_algorithm_gives_the_ordered_matrix_product() {
    let comb = Comb::Mat;
    for n in 1..=20 {
        for count in [0, 1, 7, n + 1] {
            let seed = (n * 100 + count) as u64;
            for algo in [Ar::Rd, Ar::Rabenseifner, Ar::Direct] {
                allreduce_case(algo, n, count, comb, seed);
            }
            for root in [0, n / 2, n - 1] {
                reduce_case(Red::Direct, n, root, count, comb, seed);
                reduce_case(Red::BinomialOrdered, n, root, count, comb, seed);
            }
            reduce_case(Red::Binomial, n, 0, count, comb, seed);
            reduce_scatter_case(true, &vec![count % 3; n], comb, seed);
            for exclusive in [false, true] {
                scan_case(n, count, comb, seed, exclusive);
            }
        }
    }
}

#[test]
fn the_matrix_product_is_not_commutative() {
    let (a, b) = (Comb::Mat.operands(1, 0, 3), Comb::Mat.operands(1, 1, 3));
    let (mut ab, mut ba) = (vec![0; 48], vec![0; 48]);
    mat_mul(&a, &b, &mut ab);
    mat_mul(&b, &a, &mut ba);
    assert_ne!(ab, ba);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn allreduce_schedules_reduce_in_rank_order_and_agree_bitwise(
        n in 1usize..=64, algo in 0usize..6, csel in any::<usize>(), q in any::<usize>(),
        osel in any::<usize>(), seed in any::<u64>(),
    ) {
        let algo = [Ar::Ring, Ar::Rd, Ar::Rabenseifner, Ar::Direct, Ar::OneShot, Ar::TwoShot][algo];
        let comb = pick_comb(osel, algo != Ar::Ring);
        allreduce_case(algo, n, pick_count(n, csel, q), comb, seed);
    }

    #[test]
    fn reduce_scatter_reduce_and_scan_schedules_are_right(
        n in 1usize..=64, root_sel in any::<usize>(), csel in any::<usize>(), q in any::<usize>(),
        osel in any::<usize>(), seed in any::<u64>(), counts_sel in any::<u64>(),
    ) {
        let root = root_sel % n;
        let count = pick_count(n, csel, q);
        let ordered = pick_comb(osel, true);
        let commutative = pick_comb(osel, false);
        let counts: Vec<usize> = (0..n).map(|i| (counts_sel >> (i % 32 * 2)) as usize % 4).collect();
        reduce_scatter_case(true, &counts, ordered, seed);
        reduce_scatter_case(false, &counts, commutative, seed);
        reduce_case(Red::Direct, n, root, count, ordered, seed);
        reduce_case(Red::BinomialOrdered, n, root, count, ordered, seed);
        reduce_case(Red::Binomial, n, 0, count, ordered, seed);
        reduce_case(Red::Binomial, n, root, count, commutative, seed);
        scan_case(n, count, ordered, seed, root_sel.is_multiple_of(2));
    }

    #[test]
    fn data_movement_schedules_deliver_every_block(
        n in 1usize..=64, root_sel in any::<usize>(), blk in 0usize..6, seg in 0usize..9,
        seed in any::<u64>(),
    ) {
        let (nn, root) = (n as u32, (root_sel % n) as u32);
        let rt = root as usize;
        let byte = |r: usize, i: usize| (seed as usize ^ (r * 131 + i * 7)) as u8;
        let blockv = |r: usize, b: usize| -> Vec<u8> { (0..blk).map(|i| byte(r, b * blk + i)).collect() };
        let own_in_place = |r: usize| { let mut v = vec![0u8; n * blk]; v[r * blk..(r + 1) * blk].copy_from_slice(&blockv(r, r)); v };
        let all_blocks: Vec<u8> = (0..n).flat_map(|b| blockv(b, b)).collect();
        let none = || vec![vec![]; n];
        // allgather: ring, Bruck and direct, own block in place
        for algo in 0..3 {
            let sc: Vec<_> = (0..nn).map(|r| match algo { 0 => ring_allgather(r, nn, blk), 1 => bruck_allgather(r, nn, blk), _ => direct_allgather_v(r, &equal_blocks(nn, blk)) }).collect();
            for o in simulate(&sc, (0..n).map(own_in_place).collect(), none(), &no_reduce) { prop_assert_eq!(&o, &all_blocks); }
        }
        // alltoall: rank r's block b goes to rank b's block r
        let ins: Vec<Vec<u8>> = (0..n).map(|r| (0..n).flat_map(|b| blockv(r, b)).collect()).collect();
        let sc: Vec<_> = (0..nn).map(|r| pairwise_alltoall(r, nn, blk)).collect();
        let out = simulate(&sc, (0..n).map(|r| { let mut v = vec![0u8; n * blk]; v[r * blk..(r + 1) * blk].copy_from_slice(&blockv(r, r)); v }).collect(), ins.clone(), &no_reduce);
        for (r, o) in out.iter().enumerate() { prop_assert_eq!(o, &(0..n).flat_map(|b| blockv(b, r)).collect::<Vec<u8>>()); }
        let sc: Vec<_> = (0..nn).map(|r| bruck_alltoall(r, nn, blk)).collect();
        let out = simulate(&sc, vec![vec![0u8; n * blk]; n], ins, &no_reduce);
        for (r, o) in out.iter().enumerate() { prop_assert_eq!(o, &(0..n).flat_map(|b| blockv(b, r)).collect::<Vec<u8>>()); }
        // bcast of n·blk + seg bytes: binomial, scatter-allgather, pipelined chain
        let bytes = n * blk + seg;
        let rootbuf: Vec<u8> = (0..bytes).map(|i| byte(rt, i)).collect();
        for algo in 0..3 {
            let sc: Vec<_> = (0..nn).map(|r| match algo {
                0 => binomial_bcast(r, nn, root, bytes),
                1 => scatter_allgather_bcast(r, nn, root, bytes),
                _ => pipeline_bcast(r, nn, root, bytes, seg),
            }).collect();
            let datas: Vec<Vec<u8>> = (0..n).map(|r| if r == rt { rootbuf.clone() } else { vec![0xee; bytes] }).collect();
            for o in simulate(&sc, datas, none(), &no_reduce) { prop_assert_eq!(&o, &rootbuf); }
        }
        // gather: linear (root's own block in place) and binomial (every copy in the schedule)
        let ins: Vec<Vec<u8>> = (0..n).map(|r| blockv(r, r)).collect();
        let sc: Vec<_> = (0..nn).map(|r| linear_gather(r, nn, root, blk)).collect();
        let datas: Vec<Vec<u8>> = (0..n).map(|r| if r == rt { own_in_place(r) } else { vec![0u8; n * blk] }).collect();
        prop_assert_eq!(&simulate(&sc, datas, ins.clone(), &no_reduce)[rt], &all_blocks);
        let sc: Vec<_> = (0..nn).map(|r| binomial_gather(r, nn, root, blk)).collect();
        prop_assert_eq!(&simulate(&sc, vec![vec![0u8; n * blk]; n], ins, &no_reduce)[rt], &all_blocks);
        // scatter: linear (root copies its own block beforehand) and binomial
        let ins: Vec<Vec<u8>> = (0..n).map(|r| if r == rt { (0..n).flat_map(|b| blockv(rt, b)).collect() } else { vec![] }).collect();
        let sc: Vec<_> = (0..nn).map(|r| linear_scatter(r, nn, root, blk)).collect();
        let datas: Vec<Vec<u8>> = (0..n).map(|r| if r == rt { blockv(rt, r) } else { vec![0u8; blk] }).collect();
        for (r, o) in simulate(&sc, datas, ins.clone(), &no_reduce).iter().enumerate() { prop_assert_eq!(o, &blockv(rt, r)); }
        let sc: Vec<_> = (0..nn).map(|r| binomial_scatter(r, nn, root, blk)).collect();
        for (r, o) in simulate(&sc, vec![vec![0u8; blk]; n], ins, &no_reduce).iter().enumerate() { prop_assert_eq!(o, &blockv(rt, r)); }
    }
}

// ---------------------------------------------------------------- the hierarchy combinator

/// Node colours: regular 2×4 (interleaved, so nodes are not rank ranges), irregular 3+1+4,
/// one node, one rank per node.
fn node_maps() -> Vec<(&'static str, Vec<u32>)> {
    vec![
        ("2x4", (0..8).map(|r| r % 2).collect()),
        ("3+1+4", vec![7, 7, 3, 7, 9, 9, 9, 9]),
        ("one node", vec![5; 6]),
        ("one per node", (0..5).map(|r| 10 - r).collect()),
    ]
}

#[test]
fn nodes_group_ranks_by_colour_in_order_of_their_lowest_rank() {
    let n = Nodes::from_colours(&[7, 7, 3, 7, 9, 9, 9, 9]);
    assert_eq!((n.ranks(), n.count(), n.regular()), (8, 3, false));
    assert_eq!(n.node(0), &[0, 1, 3]);
    assert_eq!(n.node(1), &[2]);
    assert_eq!(n.node(2), &[4, 5, 6, 7]);
    assert_eq!((n.node_of(3), n.local(3), n.local(7)), (0, 2, 3));
    assert_eq!(n.stripe(0), vec![0, 2, 4]);
    assert_eq!(n.stripe(2), vec![3, 6]);
    let r = Nodes::from_colours(&[1, 0, 1, 0]);
    assert!(r.regular());
    assert_eq!(r.stripe(1), vec![2, 3]);
}

#[test]
fn remap_moves_peers_and_at_moves_data_only() {
    let s = ring_allreduce(1, 3, 6, 4);
    let members = [10, 20, 30];
    let m = s.clone().remap(&members).at(100);
    assert_eq!(m.tmp_len, s.tmp_len);
    for (a, b) in s.phases.iter().zip(&m.phases) {
        for (x, y) in a
            .xfers
            .iter()
            .chain(&a.local)
            .zip(b.xfers.iter().chain(&b.local))
        {
            match (x, y) {
                (Step::Send { peer, src }, Step::Send { peer: q, src: t }) => {
                    assert_eq!(members[*peer as usize], *q);
                    assert_eq!((src.buf, src.off + 100, src.len), (t.buf, t.off, t.len));
                }
                (Step::Recv { peer, dst }, Step::Recv { peer: q, dst: t }) => {
                    assert_eq!(members[*peer as usize], *q);
                    // Receives of the ring land in Tmp, which does not move.
                    let moved = if dst.buf == Buf::Data { 100 } else { 0 };
                    assert_eq!(dst.off + moved, t.off);
                }
                (Step::Reduce { dst, src, .. }, Step::Reduce { dst: d, src: t, .. }) => {
                    assert_eq!((dst.off + 100, src.off), (d.off, t.off));
                }
                other => panic!("step changed kind: {other:?}"),
            }
        }
    }
}

#[test]
fn then_runs_in_sequence_and_beside_side_by_side() {
    let a = ring_reduce_scatter(0, 2, 8);
    let b = ring_reduce_scatter_v(0, &vec![(16, 8), (24, 8)]);
    let t = a.clone().then(b.clone());
    assert_eq!(t.phases.len(), a.phases.len() + b.phases.len());
    assert_eq!(t.tmp_len, a.tmp_len.max(b.tmp_len));
    let s = a.clone().beside(b.clone());
    assert_eq!(s.phases.len(), a.phases.len().max(b.phases.len()));
    assert_eq!(s.tmp_len, a.tmp_len + b.tmp_len);
    // b's scratch sits after a's.
    let tmp_offs: Vec<usize> = s.phases[0]
        .xfers
        .iter()
        .filter_map(|st| match st {
            Step::Recv { dst, .. } if dst.buf == Buf::Tmp => Some(dst.off),
            _ => None,
        })
        .collect();
    assert_eq!(tmp_offs, vec![0, a.tmp_len]);
}

#[test]
fn hierarchical_schedules_match_their_references_on_every_node_map() {
    let comb = Comb::Kernel(Op::Sum, Dtype::I64);
    let e = comb.elem();
    for (name, colours) in node_maps() {
        let nodes = Nodes::from_colours(&colours);
        let n = colours.len();
        let nn = n as u32;
        let none = || vec![vec![]; n];
        for count in [0usize, 1, 7, 3 * n + 2] {
            for intra in [NodeLevel::Ring, NodeLevel::Direct] {
                let ins: Vec<Vec<u8>> = (0..n).map(|r| comb.operands(9, r, count)).collect();
                let sc: Vec<_> = (0..nn)
                    .map(|r| hier_allreduce(r, &nodes, count, e, intra))
                    .collect();
                let red = |d: &mut [u8], s: &[u8], o: Order| comb.apply(d, s, o);
                let out = simulate(&sc, ins.clone(), none(), &red);
                let want = if count == 0 {
                    vec![]
                } else {
                    comb.fold_left(&ins)
                };
                for (r, o) in out.iter().enumerate() {
                    assert_eq!(o, &want, "{name} {intra:?} allreduce of {count}: rank {r}");
                }
            }
            let bytes = count * e;
            for root in [0, n - 1, n / 2] {
                let payload: Vec<u8> = (0..bytes).map(|i| (i * 7 + root) as u8).collect();
                let datas = (0..n)
                    .map(|r| {
                        if r == root {
                            payload.clone()
                        } else {
                            vec![0xee; bytes]
                        }
                    })
                    .collect();
                let sc: Vec<_> = (0..nn)
                    .map(|r| hier_bcast(r, &nodes, root as u32, bytes))
                    .collect();
                for (r, o) in simulate(&sc, datas, none(), &no_reduce).iter().enumerate() {
                    assert_eq!(o, &payload, "{name} bcast from {root}: rank {r}");
                }
            }
            // Equal blocks of `count` elements; regular maps only.
            let ag: Option<Vec<_>> = (0..nn).map(|r| hier_allgather(r, &nodes, bytes)).collect();
            let rs: Option<Vec<_>> = (0..nn)
                .map(|r| hier_reduce_scatter(r, &nodes, bytes))
                .collect();
            assert_eq!(ag.is_some(), nodes.regular(), "{name}");
            assert_eq!(rs.is_some(), nodes.regular(), "{name}");
            if let (Some(ag), Some(rs)) = (ag, rs) {
                let own: Vec<Vec<u8>> = (0..n).map(|r| comb.operands(3, r, count)).collect();
                let datas = (0..n)
                    .map(|r| {
                        let mut v = vec![0xee; n * bytes];
                        v[r * bytes..(r + 1) * bytes].copy_from_slice(&own[r]);
                        v
                    })
                    .collect();
                for (r, o) in simulate(&ag, datas, none(), &no_reduce).iter().enumerate() {
                    assert_eq!(o, &own.concat(), "{name} allgather of {count}: rank {r}");
                }
                let ins: Vec<Vec<u8>> = (0..n).map(|r| comb.operands(5, r, n * count)).collect();
                let red = |d: &mut [u8], s: &[u8], o: Order| comb.apply(d, s, o);
                let all = comb.fold_left(&ins);
                for (r, o) in simulate(&rs, ins, none(), &red).iter().enumerate() {
                    let b = r * bytes..(r + 1) * bytes;
                    assert_eq!(
                        o[b.clone()],
                        all[b],
                        "{name} reduce_scatter of {count}: rank {r}"
                    );
                }
            }
        }
    }
}
