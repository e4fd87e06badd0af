//! The collectives table, run by one launch per (rank count, transport): every collective and
//! every algorithm rcomm has for it, dtypes {i32, f32, bf16, f64}, counts {0, 1, 7, 1023,
//! 64 Ki + 3, 4 Mi}, roots first and last, in place and not, blocking and non-blocking (the
//! reference is computed while the non-blocking call is in flight) — each against a sequential
//! reference, and every result bitwise equal across the ranks that share it.
//!
//! Tolerance: contributions are small integers (floats also carry quarter fractions for f32
//! and f64), so every sum, product, min and max is exact in every dtype and every order: the
//! comparison is exact. Only `Avg` divides: floats compare within 2⁻⁸ (bf16), 1e-6 (f32),
//! 1e-12 (f64) relative; integer `Avg` truncates exactly. A separate pass with inexact random
//! floats checks the rounding: within n·2⁻²⁴·Σ|x| (f32), bitwise equal across ranks, and — with
//! `RCOMM_DETERMINISTIC=1` — bitwise equal to the canonical fold `a₀ ⊕ (a₁ ⊕ (… ⊕ aₙ₋₁))`; the
//! hash printed on `det` lines lets the test compare runs, transports and progress modes.
//!
//! Large counts (64 Ki + 3 and 4 Mi) run `Sum` only, and 4 Mi only on ≤ 4 ranks (8 ranks on 2
//! cores would spend minutes there without testing anything the smaller counts do not); at
//! 4 Mi the data-movement collectives run for f32 only (they move bytes, whatever the dtype).
//!
//! Every call through a forced handle (`with_algo(op, algo)`) is shown to have run that
//! algorithm: its flight-recorder record (`Communicator::last_collective`) must be a new `op`
//! whose algorithm is `algo` (`auto`: one the tuner may choose here). The summary line counts
//! those records. With `RT_NODES=<k>` (ranks placed on k nodes, e.g. by `RCOMM_HOSTID`) each
//! rank also checks the placement — `same_node` agrees with the hostname and `RCOMM_HOSTID`,
//! the tuner chooses `hier` for a 4 MiB allreduce and the node and cross-node collectives it
//! is made of ran, TCP carried bytes — and prints `ok nodes <k> …`.

use half::bf16;
use rcomm::{Communicator, Element, Op, Tag, UserOp};
use rcomm_tests::placement;
use std::fmt::Debug;

trait V: Element + Copy + Debug + PartialEq + Send + Sync + 'static {
    const NAME: &'static str;
    const FLOAT: bool;
    /// Relative tolerance of `Avg`.
    const AVG_TOL: f64;
    fn of(x: f64) -> Self;
    fn f(self) -> f64;
}

macro_rules! v_int {
    ($t:ty, $n:expr) => {
        impl V for $t {
            const NAME: &'static str = $n;
            const FLOAT: bool = false;
            const AVG_TOL: f64 = 0.0;
            fn of(x: f64) -> Self {
                x as $t
            }
            fn f(self) -> f64 {
                self as f64
            }
        }
    };
}
v_int!(i32, "i32");

impl V for f32 {
    const NAME: &'static str = "f32";
    const FLOAT: bool = true;
    const AVG_TOL: f64 = 1e-6;
    fn of(x: f64) -> Self {
        x as f32
    }
    fn f(self) -> f64 {
        self as f64
    }
}
impl V for f64 {
    const NAME: &'static str = "f64";
    const FLOAT: bool = true;
    const AVG_TOL: f64 = 1e-12;
    fn of(x: f64) -> Self {
        x
    }
    fn f(self) -> f64 {
        self
    }
}
impl V for bf16 {
    const NAME: &'static str = "bf16";
    const FLOAT: bool = true;
    const AVG_TOL: f64 = 1.0 / 256.0;
    fn of(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn f(self) -> f64 {
        self.to_f64()
    }
}

/// Rank `r`'s element `i` for `op` (salted per case so stale data cannot pass).
fn contrib<T: V>(op: Op, r: u32, i: usize, salt: u64) -> f64 {
    let h = (u64::from(r) * 0x9e37_79b9 + i as u64 * 0x85eb_ca6b + salt * 0xc2b2_ae35) >> 7;
    match op {
        // Powers of two with a sign: products stay exact (|x| ≤ 2^n).
        Op::Prod => [1.0, 2.0, -1.0, 1.0][(h % 4) as usize],
        Op::BAnd | Op::BOr | Op::BXor => (h % 1024) as f64,
        _ => {
            let int = (h % 9) as f64 - 4.0;
            // Quarters are exact in f32/f64 sums; bf16 stays on integers.
            if T::FLOAT && T::NAME != "bf16" {
                int + ((h >> 5) % 4) as f64 * 0.25
            } else {
                int
            }
        }
    }
}

/// `a ⊕ b` exactly, in f64 (integers exactly as i32 with wrapping, which these values never
/// reach).
fn combine(op: Op, a: f64, b: f64) -> f64 {
    match op {
        Op::Sum | Op::Avg => a + b,
        Op::Prod => a * b,
        Op::Min => a.min(b),
        Op::Max => a.max(b),
        Op::BAnd => ((a as i64) & (b as i64)) as f64,
        Op::BOr => ((a as i64) | (b as i64)) as f64,
        Op::BXor => ((a as i64) ^ (b as i64)) as f64,
    }
}

/// The reduction over ranks `0..upto` of element `i`.
fn reference<T: V>(op: Op, upto: u32, n: u32, i: usize, salt: u64) -> f64 {
    let mut acc = contrib::<T>(op, 0, i, salt);
    for r in 1..upto {
        acc = combine(op, acc, contrib::<T>(op, r, i, salt));
    }
    if op == Op::Avg {
        acc /= f64::from(n);
        if !T::FLOAT {
            acc = acc.trunc();
        }
    }
    acc
}

fn matches<T: V>(op: Op, got: T, want: f64) -> bool {
    if op == Op::Avg && T::FLOAT {
        (got.f() - want).abs() <= T::AVG_TOL * want.abs().max(1.0)
    } else {
        got.f() == T::of(want).f()
    }
}

/// A hash of the bytes, 8 at a time (FNV-style; only compared between ranks and runs).
fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))).wrapping_mul(0x0100_0000_01b3);
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Asserts that every rank of `c` holds the same bytes.
fn same_everywhere(c: &Communicator, bytes: &[u8], what: &str) {
    let mine = [fnv(bytes)];
    let mut all = vec![0u64; c.size() as usize];
    c.allgather(&mine, &mut all).unwrap();
    assert!(
        all.iter().all(|&h| h == mine[0]),
        "{what}: ranks hold different bytes"
    );
}

struct Case<'a> {
    w: &'a Communicator,
    op: Op,
    count: usize,
    salt: u64,
    done: &'a mut u64,
}

impl Case<'_> {
    fn mine<T: V>(&self, count: usize) -> Vec<T> {
        let r = self.w.rank();
        (0..count)
            .map(|i| T::of(contrib::<T>(self.op, r, i, self.salt)))
            .collect()
    }

    fn check<T: V>(&mut self, got: &[T], want: impl Fn(usize) -> f64, what: &str) {
        for (i, &g) in got.iter().enumerate() {
            let w = want(i);
            assert!(
                matches(self.op, g, w),
                "{what} {} {:?} count {}: element {i} is {g:?}, want {w}",
                T::NAME,
                self.op,
                self.count
            );
        }
        *self.done += 1;
    }
}

/// Whether every rank shares this node (set once in `main`).
static ONE_NODE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether every node holds as many ranks as every other (set once in `main`): only then do
/// the hierarchical allgather and reduce_scatter run; otherwise they fall back to the ring.
static REGULAR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Collectives whose recorded algorithm was checked ([`ran`]).
static RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The number of the last collective recorded on `c` (0: none).
fn last_seq(c: &Communicator) -> u64 {
    c.last_collective().map_or(0, |r| r.seq)
}

/// Asserts that the last collective recorded on `c` is newer than number `before`, is `op`,
/// and ran `algo`: the forced one, or for `auto` one the tuner may choose for `op` here (never
/// `hier` on one node, nor `shm` across nodes).
fn expect_ran(c: &Communicator, before: u64, op: &str, algo: &str) {
    let rec = c
        .last_collective()
        .unwrap_or_else(|| panic!("{op}/{algo}: no collective recorded (flight recorder off?)"));
    assert!(
        rec.seq > before && rec.op == op,
        "{op}/{algo}: the last collective recorded is {rec:?}, not a new {op} after #{before}"
    );
    if algo == "auto" {
        let one = ONE_NODE.load(std::sync::atomic::Ordering::Relaxed);
        let banned = if one { "hier" } else { "shm" };
        assert!(
            rcomm::algorithms(op).contains(&rec.algo) && rec.algo != "auto" && rec.algo != banned,
            "{op}/auto: the tuner chose {:?}, not an algorithm it may choose here",
            rec.algo
        );
    } else {
        let regular = REGULAR.load(std::sync::atomic::Ordering::Relaxed);
        let want = if algo == "hier" && matches!(op, "allgather" | "reduce_scatter") && !regular {
            "ring"
        } else {
            algo
        };
        assert_eq!(rec.algo, want, "{op} forced to {algo} ran {:?}", rec.algo);
    }
    RECORDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// What a call of `op` forced to `algo` runs when it cannot run `algo` itself — a
/// non-blocking call, or an in-place one that runs the schedule: `shm`, which only a blocking
/// call can run, falls back, and the record says so (`hier` runs its composed schedule).
fn fallback<'a>(op: &str, algo: &'a str) -> &'a str {
    match (op, algo) {
        ("allreduce", "shm") => "direct",
        ("allgather", "shm") => "ring",
        ("alltoall", "shm") => "pairwise",
        ("reduce_scatter", "shm") => "direct",
        ("bcast", "shm") => "tree",
        _ => algo,
    }
}

/// Runs `f`, one collective `op` on `c` (or the start of a non-blocking one), and asserts it
/// ran `algo` ([`expect_ran`]).
fn ran<R>(c: &Communicator, op: &str, algo: &str, f: impl FnOnce() -> R) -> R {
    let before = last_seq(c);
    let out = f();
    expect_ran(c, before, op, algo);
    out
}

/// The algorithms to run for `op`: all of them, but the shared-memory ones only when every rank
/// is on this node (forcing them across nodes is an error, tested in `bad_input`).
fn algos(op: &str) -> Vec<&'static str> {
    let one = ONE_NODE.load(std::sync::atomic::Ordering::Relaxed);
    rcomm::algorithms(op)
        .iter()
        .copied()
        .filter(|a| one || *a != "shm")
        .collect()
}

/// Every reduction collective for one (dtype, op, count).
fn reductions<T: V>(cx: &mut Case<'_>) {
    let w = cx.w;
    let (n, r, count, op, salt) = (w.size(), w.rank(), cx.count, cx.op, cx.salt);
    // References once per case (they cost more than the collectives at 4 Mi).
    let b = if count > 1023 {
        count / n as usize
    } else {
        count
    };
    let full_v: Vec<f64> = (0..count.max(b * n as usize))
        .map(|i| reference::<T>(op, n, n, i, salt))
        .collect();
    let full = |i: usize| full_v[i];
    let mine_v = cx.mine::<T>(count.max(b * n as usize));
    for a in algos("allreduce") {
        let c = w.with_algo("allreduce", a).unwrap();
        let send = mine_v[..count].to_vec();
        let mut out = vec![T::of(0.0); count];
        ran(&c, "allreduce", a, || c.allreduce(&send, &mut out, op))
            .unwrap_or_else(|e| panic!("allreduce/{a}: {e}"));
        cx.check(&out, full, &format!("allreduce/{a}"));
        same_everywhere(w, bytemuck::cast_slice(&out), "allreduce");
        let mut inp = send.clone();
        ran(&c, "allreduce", a, || c.allreduce_in_place(&mut inp, op)).unwrap();
        assert!(
            inp == out,
            "allreduce/{a}: in place differs from out of place"
        );
        let req = ran(&c, "allreduce", fallback("allreduce", a), || {
            c.iallreduce(send, op)
        })
        .unwrap();
        // Work overlapped with the collective: the check of the blocking result.
        cx.check(&out, full, &format!("allreduce/{a} (again, overlapped)"));
        let nb = req.wait().unwrap();
        assert!(
            nb == out,
            "allreduce/{a}: non-blocking differs from blocking"
        );
    }
    for a in algos("reduce") {
        let c = w.with_algo("reduce", a).unwrap();
        for root in [0, n - 1] {
            let send = mine_v[..count].to_vec();
            let mut out = vec![T::of(0.0); count];
            ran(&c, "reduce", a, || {
                c.reduce(&send, (r == root).then_some(&mut out[..]), op, root)
            })
            .unwrap();
            let mut inp = send.clone();
            ran(&c, "reduce", a, || c.reduce_in_place(&mut inp, op, root)).unwrap();
            let nb = ran(&c, "reduce", a, || c.ireduce(send.clone(), op, root))
                .unwrap()
                .wait()
                .unwrap();
            if r == root {
                cx.check(&out, full, &format!("reduce/{a} root {root}"));
                assert!(inp == out && nb == out, "reduce/{a}: variants differ");
            } else {
                assert!(inp == send && nb.is_empty(), "reduce/{a}: non-root buffers");
            }
        }
    }
    // Reduce-scatter: blocks of `b` elements (the count split, for the large counts).
    let b = if count > 1023 {
        count / n as usize
    } else {
        count
    };
    for a in algos("reduce_scatter") {
        let c = w.with_algo("reduce_scatter", a).unwrap();
        let send = cx.mine::<T>(b * n as usize);
        let at = r as usize * b;
        let mut out = vec![T::of(0.0); b];
        ran(&c, "reduce_scatter", a, || {
            c.reduce_scatter(&send, &mut out, op)
        })
        .unwrap();
        cx.check(&out, |i| full(at + i), &format!("reduce_scatter/{a}"));
        let mut inp = send.clone();
        ran(&c, "reduce_scatter", fallback("reduce_scatter", a), || {
            c.reduce_scatter_in_place(&mut inp, op)
        })
        .unwrap();
        assert!(
            inp[at..at + b] == out[..],
            "reduce_scatter/{a}: in place differs"
        );
        let nb = ran(&c, "reduce_scatter", fallback("reduce_scatter", a), || {
            c.ireduce_scatter(send, op)
        })
        .unwrap()
        .wait()
        .unwrap();
        assert!(nb == out, "reduce_scatter/{a}: non-blocking differs");
    }
    if op != Op::Avg {
        let upto: Vec<f64> = (0..count)
            .map(|i| reference::<T>(op, r + 1, n, i, salt))
            .collect();
        let before: Vec<f64> = (0..count)
            .map(|i| reference::<T>(op, r.max(1), n, i, salt))
            .collect();
        for a in algos("scan") {
            let c = w.with_algo("scan", a).unwrap();
            let send = mine_v[..count].to_vec();
            let mut out = vec![T::of(0.0); count];
            ran(&c, "scan", a, || c.scan(&send, &mut out, op)).unwrap();
            cx.check(&out, |i| upto[i], "scan");
            let nb = ran(&c, "scan", a, || c.iscan(send.clone(), op))
                .unwrap()
                .wait()
                .unwrap();
            assert!(nb == out, "scan: non-blocking differs");
            let mut ex = vec![T::of(7.0); count];
            ran(&c, "scan", a, || c.exscan(&send, &mut ex, op)).unwrap();
            let nbx = ran(&c, "scan", a, || c.iexscan(send.clone(), op))
                .unwrap()
                .wait()
                .unwrap();
            if r > 0 {
                cx.check(&ex, |i| before[i], "exscan");
                assert!(nbx == ex, "exscan: non-blocking differs");
            } else {
                assert!(
                    ex.iter().all(|&x| x == T::of(7.0)),
                    "exscan: rank 0 changed"
                );
                assert!(nbx == send, "iexscan: rank 0 gets its input back");
            }
        }
    }
}

/// Every data-movement collective for one (dtype, count).
fn movements<T: V>(cx: &mut Case<'_>) {
    let w = cx.w;
    let (n, r, count) = (w.size(), w.rank(), cx.count);
    let nn = n as usize;
    let b = if count > 1023 { count / nn } else { count };
    let val = |rank: u32, i: usize| T::of(((u64::from(rank) * 31 + i as u64 * 7) % 97) as f64);
    let block = |rank: u32, len: usize, k: usize| -> Vec<T> {
        (0..len).map(|i| val(rank, k * len + i)).collect()
    };
    for a in algos("bcast") {
        let c = w.with_algo("bcast", a).unwrap();
        for root in [0, n - 1] {
            let want = block(root, count, 0);
            let mut buf = if r == root {
                want.clone()
            } else {
                vec![T::of(0.0); count]
            };
            ran(&c, "bcast", a, || c.bcast(&mut buf, root)).unwrap();
            assert!(buf == want, "bcast/{a} root {root} count {count}");
            let start = if r == root {
                want.clone()
            } else {
                vec![T::of(0.0); count]
            };
            let nb = ran(&c, "bcast", fallback("bcast", a), || c.ibcast(start, root))
                .unwrap()
                .wait()
                .unwrap();
            assert!(nb == want, "ibcast/{a} root {root}");
            *cx.done += 2;
        }
    }
    let all: Vec<T> = (0..n).flat_map(|p| block(p, b, 0)).collect();
    for a in algos("allgather") {
        let c = w.with_algo("allgather", a).unwrap();
        let mut out = vec![T::of(0.0); b * nn];
        ran(&c, "allgather", a, || {
            c.allgather(&block(r, b, 0), &mut out)
        })
        .unwrap();
        assert!(out == all, "allgather/{a} block {b}");
        let mut inp = vec![T::of(0.0); b * nn];
        inp[r as usize * b..(r as usize + 1) * b].copy_from_slice(&block(r, b, 0));
        ran(&c, "allgather", fallback("allgather", a), || {
            c.allgather_in_place(&mut inp)
        })
        .unwrap();
        assert!(inp == all, "allgather_in_place/{a}");
        let nb = ran(&c, "allgather", fallback("allgather", a), || {
            c.iallgather(block(r, b, 0))
        })
        .unwrap()
        .wait()
        .unwrap();
        assert!(nb == all, "iallgather/{a}");
        *cx.done += 3;
    }
    for a in algos("alltoall") {
        let c = w.with_algo("alltoall", a).unwrap();
        // Block k of rank p's send is block(p, b, k); it lands as block p on rank k.
        let send: Vec<T> = (0..nn).flat_map(|k| block(r, b, k)).collect();
        let want: Vec<T> = (0..n).flat_map(|p| block(p, b, r as usize)).collect();
        let mut out = vec![T::of(0.0); b * nn];
        ran(&c, "alltoall", a, || c.alltoall(&send, &mut out)).unwrap();
        assert!(out == want, "alltoall/{a} block {b}");
        let mut inp = send.clone();
        ran(&c, "alltoall", a, || c.alltoall_in_place(&mut inp)).unwrap();
        assert!(inp == want, "alltoall_in_place/{a}");
        let nb = ran(&c, "alltoall", fallback("alltoall", a), || {
            c.ialltoall(send)
        })
        .unwrap()
        .wait()
        .unwrap();
        assert!(nb == want, "ialltoall/{a}");
        *cx.done += 3;
    }
    for a in algos("gather") {
        let c = w.with_algo("gather", a).unwrap();
        for root in [0, n - 1] {
            let mut out = vec![T::of(0.0); b * nn];
            ran(&c, "gather", a, || {
                c.gather(&block(r, b, 0), (r == root).then_some(&mut out[..]), root)
            })
            .unwrap();
            let nb = ran(&c, "gather", a, || c.igather(block(r, b, 0), root))
                .unwrap()
                .wait()
                .unwrap();
            if r == root {
                assert!(out == all && nb == all, "gather/{a} root {root}");
            } else {
                assert!(nb.is_empty(), "igather/{a}: non-root result");
            }
            *cx.done += 2;
        }
    }
    for a in algos("scatter") {
        let c = w.with_algo("scatter", a).unwrap();
        for root in [0, n - 1] {
            let src: Vec<T> = (0..nn).flat_map(|k| block(root, b, k)).collect();
            let want = block(root, b, r as usize);
            let mut out = vec![T::of(0.0); b];
            ran(&c, "scatter", a, || {
                c.scatter((r == root).then_some(&src[..]), &mut out, root)
            })
            .unwrap();
            assert!(out == want, "scatter/{a} root {root}");
            let nb = ran(&c, "scatter", a, || {
                c.iscatter((r == root).then(|| src.clone()), b, root)
            })
            .unwrap()
            .wait()
            .unwrap();
            assert!(nb == want, "iscatter/{a} root {root}");
            *cx.done += 2;
        }
    }
}

fn dtype<T: V>(w: &Communicator, counts: &[usize], done: &mut u64) {
    let ops: &[Op] = if T::FLOAT {
        &[Op::Sum, Op::Prod, Op::Min, Op::Max, Op::Avg]
    } else {
        &[
            Op::Sum,
            Op::Prod,
            Op::Min,
            Op::Max,
            Op::Avg,
            Op::BAnd,
            Op::BOr,
            Op::BXor,
        ]
    };
    for (k, &count) in counts.iter().enumerate() {
        for (j, &op) in ops.iter().enumerate() {
            if count > 1023 && op != Op::Sum {
                continue;
            }
            let salt = (k * 16 + j) as u64;
            let mut cx = Case {
                w,
                op,
                count,
                salt,
                done,
            };
            reductions::<T>(&mut cx);
            // Data movement does not depend on the dtype beyond its size: the 4 Mi case
            // moves f32 only.
            if j == 0 && (count <= 65_539 || T::NAME == "f32") {
                movements::<T>(&mut cx);
            }
        }
    }
    w.barrier().unwrap();
    w.ibarrier().unwrap().wait().unwrap();
}

/// 2×2 matrices modulo a prime: associative, not commutative.
const P: u64 = 1_000_003;
fn matmul(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
    [
        (a[0] * b[0] + a[1] * b[2]) % P,
        (a[0] * b[1] + a[1] * b[3]) % P,
        (a[2] * b[0] + a[3] * b[2]) % P,
        (a[2] * b[1] + a[3] * b[3]) % P,
    ]
}

fn non_commutative(w: &Communicator, done: &mut u64) {
    let (n, r) = (w.size(), w.rank());
    let m = |rank: u32, i: usize| -> [u64; 4] {
        let x = u64::from(rank) * 7 + i as u64 * 3 + 2;
        [x % P, (x * x + 1) % P, (3 * x + 5) % P, 1]
    };
    let op = UserOp::<[u64; 4]>::new(false, |a, b| {
        for (x, y) in a.iter().zip(b.iter_mut()) {
            *y = matmul(x, y);
        }
    });
    let prefix = |upto: u32, i: usize| (1..upto).fold(m(0, i), |acc, p| matmul(&acc, &m(p, i)));
    for count in [0usize, 1, 7, 1023] {
        let send: Vec<[u64; 4]> = (0..count).map(|i| m(r, i)).collect();
        let want: Vec<[u64; 4]> = (0..count).map(|i| prefix(n, i)).collect();
        for a in algos("allreduce") {
            let c = w.with_algo("allreduce", a).unwrap();
            let mut out = send.clone();
            let before = last_seq(&c);
            match c.allreduce_in_place(&mut out, &op) {
                Ok(()) => {
                    expect_ran(&c, before, "allreduce", a);
                    assert!(out == want, "non-commutative allreduce/{a}: rank order");
                    *done += 1;
                }
                // Algorithms that do not combine in rank order must refuse, not mis-compute.
                Err(e) => assert!(e.to_string().contains("rank order"), "allreduce/{a}: {e}"),
            }
        }
        let nb = w.iallreduce(send.clone(), &op).unwrap().wait().unwrap();
        assert!(nb == want, "non-commutative iallreduce");
        for a in algos("reduce") {
            let c = w.with_algo("reduce", a).unwrap();
            for root in [0, n - 1] {
                let mut out = vec![[0u64; 4]; count];
                let before = last_seq(&c);
                match c.reduce(&send, (r == root).then_some(&mut out[..]), &op, root) {
                    Ok(()) => {
                        expect_ran(&c, before, "reduce", a);
                        assert!(r != root || out == want, "reduce/{a} root {root}")
                    }
                    Err(e) => assert!(e.to_string().contains("rank order"), "reduce/{a}: {e}"),
                }
            }
        }
        let b = count;
        let big: Vec<[u64; 4]> = (0..b * n as usize).map(|i| m(r, i)).collect();
        let mut part = vec![[0u64; 4]; b];
        w.reduce_scatter(&big, &mut part, &op).unwrap();
        assert!(
            (0..b).all(|i| part[i] == prefix(n, r as usize * b + i)),
            "non-commutative reduce_scatter"
        );
        let mut sc = vec![[0u64; 4]; count];
        w.scan(&send, &mut sc, &op).unwrap();
        assert!(
            (0..count).all(|i| sc[i] == prefix(r + 1, i)),
            "non-commutative scan"
        );
        *done += 3;
    }
    if n > 1 {
        let e = w
            .with_algo("allreduce", "ring")
            .unwrap()
            .allreduce_in_place(&mut [[1u64; 4]; 4], &op)
            .unwrap_err();
        assert!(e.to_string().contains("rank order"), "{e}");
    }
}

/// Inexact floats: within tolerance of the f64 sum, bitwise equal across ranks; in
/// deterministic mode also bitwise equal to the canonical fold, for every algorithm the tuner
/// may pick, in place or not, blocking or not. Prints `det <count> <hash>` lines.
fn rounding(w: &Communicator, done: &mut u64) {
    let (n, r) = (w.size(), w.rank());
    let det = std::env::var("RCOMM_DETERMINISTIC").is_ok_and(|v| v == "1");
    let x = |rank: u32, i: usize| -> f32 {
        let h = (u64::from(rank) * 0x2545_f491 + i as u64 * 0x9e37_79b9) % 1_000_003;
        (h as f32 / 1_000_003.0 - 0.5) * 1e3
    };
    for count in [1usize, 7, 1023, 65_539] {
        let send: Vec<f32> = (0..count).map(|i| x(r, i)).collect();
        let mut out = send.clone();
        w.allreduce_in_place(&mut out, Op::Sum).unwrap();
        same_everywhere(w, bytemuck::cast_slice(&out), "inexact allreduce");
        for (i, &g) in out.iter().enumerate() {
            let exact: f64 = (0..n).map(|p| f64::from(x(p, i))).sum();
            let mag: f64 = (0..n).map(|p| f64::from(x(p, i)).abs()).sum();
            let tol = f64::from(n) * f64::from(f32::EPSILON) * mag;
            assert!(
                (f64::from(g) - exact).abs() <= tol,
                "inexact allreduce element {i}: {g} vs {exact} (tolerance {tol})"
            );
        }
        if det {
            let canon: Vec<f32> = (0..count)
                .map(|i| (0..n - 1).rev().fold(x(n - 1, i), |acc, p| x(p, i) + acc))
                .collect();
            assert!(
                bytemuck::cast_slice::<f32, u8>(&out) == bytemuck::cast_slice::<f32, u8>(&canon),
                "deterministic allreduce of {count} differs from the canonical fold"
            );
            let mut oop = vec![0f32; count];
            w.allreduce(&send, &mut oop, Op::Sum).unwrap();
            let nb = w.iallreduce(send.clone(), Op::Sum).unwrap().wait().unwrap();
            assert!(
                oop == out && nb == out,
                "deterministic: out of place / non-blocking differ"
            );
            if r == 0 {
                println!("det {count} {:016x}", fnv(bytemuck::cast_slice(&out)));
            }
        }
        *done += 1;
    }
}

/// Traffic on a parent and on its split/dup children with the same tags never crosses.
fn isolation(w: &Communicator, done: &mut u64) {
    let (n, r) = (w.size(), w.rank());
    let d = w.dup().unwrap();
    let half = w.split(Some(r % 2), r as i32).unwrap().unwrap();
    if n > 1 {
        let to = (r + 1) % n;
        let from = (r + n - 1) % n;
        // Same tag, three communicators, sent in one order and received in the reverse one.
        w.send(&[1u32], to, Tag(5)).unwrap();
        d.send(&[2u32], to, Tag(5)).unwrap();
        let mut x = [0u32];
        d.recv(&mut x, from, Tag(5)).unwrap();
        assert_eq!(x[0], 2, "dup received the parent's message");
        w.recv(&mut x, from, Tag(5)).unwrap();
        assert_eq!(x[0], 1, "parent received the dup's message");
    }
    // Collectives interleaved on the three communicators.
    let mut a = vec![r as i64; 5];
    let mut b = vec![1i64; 5];
    let mut c = vec![10i64; 5];
    let rb = d.iallreduce(b.clone(), Op::Sum).unwrap();
    half.allreduce_in_place(&mut c, Op::Sum).unwrap();
    w.allreduce_in_place(&mut a, Op::Sum).unwrap();
    b = rb.wait().unwrap();
    let n64 = i64::from(n);
    assert!(
        a.iter().all(|&v| v == n64 * (n64 - 1) / 2),
        "parent allreduce"
    );
    assert!(b.iter().all(|&v| v == n64), "dup allreduce");
    assert!(
        c.iter().all(|&v| v == 10 * i64::from(half.size())),
        "split allreduce"
    );
    *done += 1;
}

/// Mismatched buffers are errors, not corruption.
fn bad_input(w: &Communicator) {
    let n = w.size() as usize;
    let mut r3 = [0f32; 3];
    assert!(w.allreduce(&[1f32; 4], &mut r3, Op::Sum).is_err());
    // A send shorter than size × the block is the error (a longer one is MPI's rule).
    assert!(
        w.reduce_scatter(&[1f32; 3], &mut [0f32; 2], Op::Sum)
            .is_err()
            || n == 1
    );
    // A receive buffer shorter than the send is an error; a longer one is MPI's rule
    // (the rest left alone), so only the short one is refused.
    assert!(w.alltoall(&[1u8; 4], &mut [0u8; 3]).is_err());
    assert!(w.bcast(&mut [0u8; 1], w.size()).is_err());
    assert!(w.allreduce_in_place(&mut [1i32], Op::BAnd).is_ok());
    assert!(w.allreduce_in_place(&mut [1f32], Op::BAnd).is_err());
    assert!(w.with_algo("allreduce", "magic").is_err());
    assert!(w.scan(&[1f32], &mut [0f32], Op::Avg).is_err());
    if !ONE_NODE.load(std::sync::atomic::Ordering::Relaxed) {
        let e = w
            .with_algo("allreduce", "shm")
            .unwrap()
            .allreduce_in_place(&mut [1f32], Op::Sum)
            .unwrap_err();
        assert!(e.to_string().contains("one node"), "{e}");
    }
}

/// The placement on `RT_NODES` nodes: `same_node` follows the hostname and `RCOMM_HOSTID` (false
/// across the split, true within), the world spans that many nodes, and the tuner chooses the
/// hierarchical allreduce for 4 MiB (unless `RT_TUNER_FREE=1`), which runs collectives on its
/// node and cross-node parts (as does a forced one). Returns this rank's node key.
fn placement(w: &rcomm::World, nodes: u32) -> String {
    let me = placement::check_nodes(w, w, nodes);
    assert!(
        nodes == 1 || !w.on_one_node(),
        "on_one_node across {nodes} nodes"
    );
    if nodes > 1 {
        let mut big = vec![1f32; 1 << 20];
        // RT_TUNER_FREE=1: measured links (fake hosts' veth pairs), whose rates may make the
        // ring win; otherwise the launch sets RCOMM_TUNE=default, and the cost model with its
        // built-in constants must choose `hier` (a measurement on a busy machine may not).
        if std::env::var("RT_TUNER_FREE").is_ok_and(|v| v == "1") {
            let before = last_seq(w);
            w.allreduce_in_place(&mut big, Op::Sum).unwrap();
            expect_ran(w, before, "allreduce", "auto");
        } else {
            placement::ran_hier(w, "allreduce", "the tuner's allreduce of 4 MiB", || {
                w.allreduce_in_place(&mut big, Op::Sum)
            });
        }
        assert!(big.iter().all(|&x| x == w.size() as f32), "hier allreduce");
        let c = w.with_algo("allreduce", "hier").unwrap();
        let mut small = vec![2i64; 7];
        placement::ran_hier(&c, "allreduce", "the forced hier allreduce", || {
            c.allreduce_in_place(&mut small, Op::Sum)
        });
        assert!(small.iter().all(|&x| x == 2 * i64::from(w.size())));
        nonblocking_hier(w);
    }
    me
}

/// The non-blocking hierarchical collectives, forced: they run the composed schedule on any
/// placement (the equal-block kinds on equal nodes only; elsewhere the ring), recorded so,
/// against references.
fn nonblocking_hier(w: &rcomm::World) {
    let (n, r) = (w.size(), w.rank());
    let c = w.with_algo("allreduce", "hier").unwrap();
    for count in [1usize, 7, 1000] {
        let v =
            |q: u32| -> Vec<i64> { (0..count as i64).map(|i| i64::from(q) * 1000 + i).collect() };
        let want: Vec<i64> = (0..count as i64)
            .map(|i| (0..n).map(|q| i64::from(q) * 1000 + i).sum())
            .collect();
        let got = ran(&c, "allreduce", "hier", || c.iallreduce(v(r), Op::Sum))
            .unwrap()
            .wait()
            .unwrap();
        assert!(got == want, "iallreduce/hier of {count}");
    }
    let c = w.with_algo("bcast", "hier").unwrap();
    for root in [0, n / 2, n - 1] {
        let v: Vec<u32> = (0..777).map(|i| root * 7919 + i).collect();
        let start = if r == root { v.clone() } else { vec![0; 777] };
        let got = ran(&c, "bcast", "hier", || c.ibcast(start, root))
            .unwrap()
            .wait()
            .unwrap();
        assert!(got == v, "ibcast/hier from {root}");
    }
    let c = w.with_algo("allgather", "hier").unwrap();
    let block = |q: u32| -> Vec<u32> { (0..5).map(|i| q * 31 + i).collect() };
    let got = ran(&c, "allgather", "hier", || c.iallgather(block(r)))
        .unwrap()
        .wait()
        .unwrap();
    assert!(
        got == (0..n).flat_map(block).collect::<Vec<_>>(),
        "iallgather/hier"
    );
    let c = w.with_algo("reduce_scatter", "hier").unwrap();
    let send: Vec<i64> = (0..3 * n as i64).map(|i| i64::from(r) + i).collect();
    let got = ran(&c, "reduce_scatter", "hier", || {
        c.ireduce_scatter(send, Op::Sum)
    })
    .unwrap()
    .wait()
    .unwrap();
    let want: Vec<i64> = (3 * i64::from(r)..3 * i64::from(r) + 3)
        .map(|i| (0..n).map(|q| i64::from(q) + i).sum())
        .collect();
    assert!(got == want, "ireduce_scatter/hier");
}

fn main() {
    let w = rcomm::init().unwrap();
    let one_node = (0..w.size()).all(|r| w.same_node(r).unwrap());
    ONE_NODE.store(one_node, std::sync::atomic::Ordering::Relaxed);
    let per_node: Vec<usize> = (0..w.size())
        .map(|r| {
            let me = w.peer(r).unwrap();
            (0..w.size())
                .filter(|&q| w.peer(q).unwrap().same_node(me))
                .count()
        })
        .collect();
    REGULAR.store(
        per_node.iter().all(|&k| k == per_node[0]),
        std::sync::atomic::Ordering::Relaxed,
    );
    // RT_TABLE=det: only the rounding pass (deterministic-mode comparisons between runs);
    // RT_TABLE=nobig: without the 4 Mi count (the TCP launches: the bytes are the same);
    // RT_TABLE=small: counts up to 1023 (the multi-node launch: algorithms and layouts, not
    // bytes); RT_TABLE=placement: only the placement's checks (with RT_NODES).
    let mode = std::env::var("RT_TABLE").unwrap_or_default();
    let mut counts = vec![0usize, 1, 7, 1023];
    if mode != "small" {
        counts.push(65_539);
    }
    if w.size() <= 4 && mode != "nobig" && mode != "small" {
        counts.push(4 << 20);
    }
    let mut done = 0u64;
    let t0 = std::time::Instant::now();
    // RT_NODES=k: the launch placed the ranks on k nodes.
    let nodes: Option<u32> = std::env::var("RT_NODES")
        .ok()
        .map(|v| v.parse().expect("RT_NODES: a number"));
    let key = nodes.map(|k| placement(&w, k));
    if mode == "placement" {
        // Only the placement's checks, and an all-to-all so that every rank's TCP (checked
        // below) carries something, whichever ranks the hierarchical algorithms involve.
        let c = w.with_algo("alltoall", "pairwise").unwrap();
        let (n, r) = (w.size(), w.rank());
        let mut out = vec![0u32; n as usize];
        c.alltoall(&(0..n).map(|q| r * 100 + q).collect::<Vec<_>>(), &mut out)
            .unwrap();
        assert!(
            out == (0..n).map(|q| q * 100 + r).collect::<Vec<_>>(),
            "alltoall"
        );
    } else if mode != "det" {
        dtype::<i32>(&w, &counts, &mut done);
        dtype::<f32>(&w, &counts, &mut done);
        dtype::<bf16>(&w, &counts, &mut done);
        dtype::<f64>(&w, &counts, &mut done);
        non_commutative(&w, &mut done);
        isolation(&w, &mut done);
        bad_input(&w);
    }
    if mode != "placement" {
        rounding(&w, &mut done);
    }
    if let (Some(k), Some(key)) = (nodes, key) {
        // Between the nodes TCP, within them shared memory.
        let t = placement::tcp_carried(&w, &key);
        let partner = (0..w.size()).any(|p| p != w.rank() && w.same_node(p).unwrap());
        assert!(
            !partner || t.get("shm").msgs_sent > 0,
            "rank {} ({key}) has a peer on its node but sent nothing over shared memory: {:?}",
            w.rank(),
            t.get("shm")
        );
        println!(
            "ok nodes {k} rank {} on {key}: hier {}, tcp {} B sent {} B received, shm {} messages",
            w.rank(),
            if std::env::var("RT_TUNER_FREE").is_ok_and(|v| v == "1") {
                "forced"
            } else {
                "chosen and forced"
            },
            t.get("tcp").bytes_sent,
            t.get("tcp").bytes_recv,
            t.get("shm").msgs_sent
        );
    }
    if w.rank() == 0 {
        println!(
            "ok table {done} checks, {} recorded algorithms, on {} ranks in {:.1} s",
            RECORDED.load(std::sync::atomic::Ordering::Relaxed),
            w.size(),
            t0.elapsed().as_secs_f64()
        );
    }
}
