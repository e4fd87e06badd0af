//! Rank program: the first collectives against a sequential reference. For every algorithm,
//! dtype, op and count, each rank contributes data that depends on (rank, index, iteration);
//! results are compared with the sequential reference (exact for integers, a stated tolerance
//! for floats) and are checked bitwise equal across ranks (rank 0 gathers everyone's bytes).
//! Broadcast from the first and the last rank. Prints `ok <case>` on rank 0.
//!
//! Every allreduce through `with_algo(…, algo)` is shown to have run `algo` by its
//! flight-recorder record (`Communicator::last_collective`). Last, one call of each collective
//! kind on the world, unforced, prints `algo <op> <algorithm>` on rank 0 (what `RCOMM_ALGO`
//! forced, or the tuner chose).
use rcomm::{Communicator, Element, Op, Source, Tag};

/// Runs `f`, one collective `op` on `c`, and returns the algorithm its new flight-recorder
/// record names; asserts that `forced` ran if given.
fn ran<R>(c: &Communicator, op: &str, forced: Option<&str>, f: impl FnOnce() -> R) -> (R, String) {
    let before = c.last_collective().map_or(0, |r| r.seq);
    let out = f();
    let rec = c
        .last_collective()
        .unwrap_or_else(|| panic!("{op}: no collective recorded (flight recorder off?)"));
    assert!(
        rec.seq > before && rec.op == op,
        "{op}: the last collective recorded is {rec:?}, not a new {op} after #{before}"
    );
    assert!(
        rcomm::algorithms(op).contains(&rec.algo) && rec.algo != "auto",
        "{op}: recorded algorithm {:?} is not one of {op}'s",
        rec.algo
    );
    if let Some(a) = forced {
        assert_eq!(rec.algo, a, "{op} forced to {a} ran {:?}", rec.algo);
    }
    (out, rec.algo.to_string())
}

fn contribution(rank: u32, i: usize, it: u32) -> i64 {
    ((rank as i64 * 7919 + i as i64 * 104_729 + it as i64 * 31) % 2001) - 1000
}

fn same_bytes_everywhere(w: &Communicator, bytes: &[u8], what: &str) {
    if w.rank() == 0 {
        for p in 1..w.size() {
            let mut other = vec![0u8; bytes.len()];
            w.recv(&mut other, Source::Rank(p), Tag(77)).unwrap();
            assert!(
                other == bytes,
                "{what}: rank {p}'s result differs bitwise from rank 0's"
            );
        }
    } else {
        w.send(bytes, 0, Tag(77)).unwrap();
    }
}

#[allow(clippy::too_many_arguments)]
fn check<T: Element + Copy>(
    w: &Communicator,
    conv: fn(i64) -> T,
    back: fn(T) -> f64,
    tol: f64,
    op: Op,
    algo: &str,
    count: usize,
    it: u32,
) {
    let (r, n) = (w.rank(), w.size());
    let mut buf: Vec<T> = (0..count).map(|i| conv(contribution(r, i, it))).collect();
    let c = w.with_algo("allreduce", algo).unwrap();
    let forced = (algo != "auto").then_some(algo);
    ran(&c, "allreduce", forced, || {
        c.allreduce_in_place(&mut buf, op)
    })
    .0
    .unwrap();
    for (i, &got) in buf.iter().enumerate() {
        let vals: Vec<f64> = (0..n).map(|p| back(conv(contribution(p, i, it)))).collect();
        let want = match op {
            Op::Sum => vals.iter().sum::<f64>(),
            Op::Max => vals.iter().cloned().fold(f64::MIN, f64::max),
            Op::Min => vals.iter().cloned().fold(f64::MAX, f64::min),
            Op::Avg => vals.iter().sum::<f64>() / n as f64,
            _ => unreachable!(),
        };
        let g = back(got);
        let ok = if op == Op::Avg && tol == 0.0 {
            (g - want.trunc()).abs() <= 1.0
        } else {
            (g - want).abs() <= tol * (1.0 + want.abs())
        };
        assert!(
            ok,
            "{op:?} {algo:?} count {count} element {i}: got {g}, want {want}"
        );
    }
    same_bytes_everywhere(
        w,
        bytemuck::cast_slice(&buf),
        &format!("{op:?} {algo:?} {count}"),
    );
}

fn main() {
    let w = rcomm::init().unwrap();
    let counts = [0usize, 1, 7, 1023, 65_539];
    for (it, algo) in ["auto", "ring", "rd"].into_iter().enumerate() {
        for &count in &counts {
            for op in [Op::Sum, Op::Max, Op::Min] {
                check::<i32>(
                    &w,
                    |v| v as i32,
                    |v| v as f64,
                    0.0,
                    op,
                    algo,
                    count,
                    it as u32,
                );
                check::<f64>(
                    &w,
                    |v| v as f64 * 0.25,
                    |v| v,
                    1e-12,
                    op,
                    algo,
                    count,
                    it as u32,
                );
                check::<f32>(
                    &w,
                    |v| v as f32 * 0.5,
                    |v| v as f64,
                    1e-5,
                    op,
                    algo,
                    count,
                    it as u32,
                );
            }
            check::<f64>(
                &w,
                |v| v as f64,
                |v| v,
                1e-12,
                Op::Avg,
                algo,
                count,
                it as u32,
            );
        }
        if w.rank() == 0 {
            println!("ok allreduce-{algo}");
        }
    }
    for root in [0, w.size() - 1] {
        for &count in &counts {
            let mut buf: Vec<u64> = (0..count)
                .map(|i| {
                    if w.rank() == root {
                        (i as u64) << 8 | u64::from(root)
                    } else {
                        0
                    }
                })
                .collect();
            w.bcast(&mut buf, root).unwrap();
            assert!(
                buf.iter()
                    .enumerate()
                    .all(|(i, &v)| v == (i as u64) << 8 | u64::from(root)),
                "bcast from {root}, count {count}"
            );
        }
    }
    w.barrier().unwrap();
    if w.rank() == 0 {
        println!("ok bcast");
    }
    // The rest of the set, against sequential references, every root first and last.
    let (r, n) = (w.rank(), w.size());
    let v = |p: u32, i: usize| contribution(p, i, 9);
    for &b in &[0usize, 1, 7, 1000] {
        for root in [0, n - 1] {
            // reduce
            let send: Vec<i64> = (0..b).map(|i| v(r, i)).collect();
            let mut recv = vec![0i64; b];
            w.reduce(
                &send,
                if r == root { Some(&mut recv) } else { None },
                Op::Sum,
                root,
            )
            .unwrap();
            if r == root {
                assert!(
                    (0..b).all(|i| recv[i] == (0..n).map(|p| v(p, i)).sum::<i64>()),
                    "reduce b={b} root={root}"
                );
            }
            // gather
            let mut all = vec![0i64; n as usize * b];
            w.gather(&send, if r == root { Some(&mut all) } else { None }, root)
                .unwrap();
            if r == root {
                assert!(
                    (0..n as usize).all(|p| (0..b).all(|i| all[p * b + i] == v(p as u32, i))),
                    "gather"
                );
            }
            // scatter
            let src: Vec<i64> = (0..n as usize * b).map(|k| v(root, k) * 3).collect();
            let mut mine = vec![0i64; b];
            w.scatter(if r == root { Some(&src) } else { None }, &mut mine, root)
                .unwrap();
            assert!(
                (0..b).all(|i| mine[i] == v(root, r as usize * b + i) * 3),
                "scatter"
            );
        }
        // allgather
        let send: Vec<i64> = (0..b).map(|i| v(r, i)).collect();
        let mut all = vec![0i64; n as usize * b];
        w.allgather(&send, &mut all).unwrap();
        assert!(
            (0..n as usize).all(|p| (0..b).all(|i| all[p * b + i] == v(p as u32, i))),
            "allgather"
        );
        // reduce_scatter
        let big: Vec<i64> = (0..n as usize * b).map(|k| v(r, k)).collect();
        let mut part = vec![0i64; b];
        w.reduce_scatter(&big, &mut part, Op::Sum).unwrap();
        assert!(
            (0..b).all(|i| part[i] == (0..n).map(|p| v(p, r as usize * b + i)).sum::<i64>()),
            "reduce_scatter"
        );
        // alltoall: block j of rank p is (p, j)-dependent
        let send: Vec<i64> = (0..n as usize * b)
            .map(|k| v(r, k) * 11 + (k / b.max(1)) as i64)
            .collect();
        let mut got = vec![0i64; n as usize * b];
        w.alltoall(&send, &mut got).unwrap();
        assert!(
            (0..n as usize).all(|p| (0..b)
                .all(|i| got[p * b + i] == v(p as u32, r as usize * b + i) * 11 + r as i64)),
            "alltoall"
        );
        // scan and exscan
        let send: Vec<i64> = (0..b).map(|i| v(r, i)).collect();
        let mut out = vec![0i64; b];
        w.scan(&send, &mut out, Op::Sum).unwrap();
        assert!(
            (0..b).all(|i| out[i] == (0..=r).map(|p| v(p, i)).sum::<i64>()),
            "scan"
        );
        let mut out = vec![-7i64; b];
        w.exscan(&send, &mut out, Op::Sum).unwrap();
        if r == 0 {
            assert!(
                out.iter().all(|&x| x == -7),
                "exscan leaves rank 0's buffer unchanged"
            );
        } else {
            assert!(
                (0..b).all(|i| out[i] == (0..r).map(|p| v(p, i)).sum::<i64>()),
                "exscan"
            );
        }
    }
    // v-variants with uneven counts, including zero-length blocks.
    {
        let count = |p: u32| ((p as usize * 7) % 5) * 3; // 0, 6, 12, 3, 9, ...
        let counts: Vec<usize> = (0..n).map(count).collect();
        let total: usize = counts.iter().sum();
        let offs: Vec<usize> = (0..n as usize).map(|p| counts[..p].iter().sum()).collect();
        let mine: Vec<i64> = (0..counts[r as usize]).map(|i| v(r, i) + 5).collect();
        let mut all = vec![0i64; total];
        w.allgatherv(&mine, &mut all, &counts).unwrap();
        assert!(
            (0..n)
                .all(|p| (0..counts[p as usize]).all(|i| all[offs[p as usize] + i] == v(p, i) + 5)),
            "allgatherv"
        );
        for root in [0, n - 1] {
            let mut g = vec![0i64; total];
            w.gatherv(
                &mine,
                if r == root { Some(&mut g) } else { None },
                &counts,
                root,
            )
            .unwrap();
            if r == root {
                assert_eq!(g, all, "gatherv");
            }
            let mut part = vec![0i64; counts[r as usize]];
            w.scatterv(
                if r == root { Some(&all) } else { None },
                &counts,
                &mut part,
                root,
            )
            .unwrap();
            assert_eq!(part, mine, "scatterv");
        }
        let big: Vec<i64> = (0..total).map(|k| v(r, k)).collect();
        let mut red = vec![0i64; counts[r as usize]];
        w.reduce_scatter_v(&big, &mut red, &counts, Op::Sum)
            .unwrap();
        assert!(
            (0..counts[r as usize])
                .all(|i| red[i] == (0..n).map(|p| v(p, offs[r as usize] + i)).sum::<i64>()),
            "reduce_scatter_v"
        );
        // alltoallv: rank i sends (i + j) % 3 elements to rank j.
        let c = |i: u32, j: u32| ((i + j) % 3) as usize;
        let sc: Vec<usize> = (0..n).map(|j| c(r, j)).collect();
        let rc: Vec<usize> = (0..n).map(|i| c(i, r)).collect();
        let send: Vec<i64> = (0..n)
            .flat_map(|j| (0..c(r, j)).map(move |k| (r as i64) * 100 + (j as i64) * 10 + k as i64))
            .collect();
        let mut recv = vec![0i64; rc.iter().sum()];
        w.alltoallv(&send, &sc, &mut recv, &rc).unwrap();
        let want: Vec<i64> = (0..n)
            .flat_map(|i| (0..c(i, r)).map(move |k| (i as i64) * 100 + (r as i64) * 10 + k as i64))
            .collect();
        assert_eq!(recv, want, "alltoallv");
    }
    w.barrier().unwrap();
    if w.rank() == 0 {
        println!("ok reduce-gather-scatter-allgather-reduce_scatter-alltoall-scan");
    }
    // Non-blocking: several collectives outstanding at once, advanced by test() while the rank
    // computes, completed in another order than started.
    {
        let sizes = [3usize, 5000, 70_000];
        let mut reqs: Vec<_> = sizes
            .iter()
            .map(|&c| {
                w.iallreduce((0..c).map(|i| v(r, i)).collect::<Vec<i64>>(), Op::Sum)
                    .unwrap()
            })
            .collect();
        let root = n - 1;
        let mut b = w
            .ibcast(
                (0..1000u64)
                    .map(|i| if r == root { i * 3 } else { 0 })
                    .collect::<Vec<u64>>(),
                root,
            )
            .unwrap();
        let mut acc = 0u64;
        for k in 0..200_000u64 {
            acc = acc.wrapping_add(k * k);
            if k % 20_000 == 0 {
                for q in &mut reqs {
                    let _ = q.test().unwrap();
                }
                let _ = b.test().unwrap();
            }
        }
        assert!(acc > 0);
        let bres = b.wait().unwrap();
        assert!(
            bres.iter().enumerate().all(|(i, &x)| x == i as u64 * 3),
            "ibcast"
        );
        while let Some(q) = reqs.pop() {
            let c = sizes[reqs.len()];
            let res = q.wait().unwrap();
            assert!(
                (0..c).all(|i| res[i] == (0..n).map(|p| v(p, i)).sum::<i64>()),
                "iallreduce of {c}"
            );
        }
        // Blocking and non-blocking combine in the same order: bitwise equal float results.
        for c in [10usize, 70_000] {
            let x: Vec<f32> = (0..c)
                .map(|i| (contribution(r, i, 4) as f32) * 0.1 + 1e-3 * r as f32)
                .collect();
            let mut blocking = x.clone();
            w.allreduce_in_place(&mut blocking, Op::Sum).unwrap();
            let nb = w.iallreduce(x, Op::Sum).unwrap().wait().unwrap();
            assert!(
                bytemuck::cast_slice::<f32, u8>(&blocking) == bytemuck::cast_slice::<f32, u8>(&nb),
                "iallreduce differs bitwise from allreduce ({c})"
            );
        }
        // Dropped before completion: it completes anyway (no buffer used after free).
        drop(w.iallreduce(vec![1i32; 100_000], Op::Sum).unwrap());
    }
    w.barrier().unwrap();
    if w.rank() == 0 {
        println!("ok nonblocking");
    }
    // Bad input is an error, not a hang or corruption.
    let mut f = [1.0f32; 4];
    assert!(
        w.allreduce_in_place(&mut f, Op::BAnd).is_err(),
        "bitwise op on floats"
    );
    assert!(w.bcast(&mut f, w.size()).is_err(), "root out of range");
    w.barrier().unwrap();
    if w.rank() == 0 {
        println!("ok bad-input");
    }
    // What the world's unforced calls ran: `RCOMM_ALGO`'s algorithm, or the tuner's.
    let b = 5usize;
    let nn = n as usize;
    let one: Vec<i64> = (0..b).map(|i| v(r, i)).collect();
    let all: Vec<i64> = (0..nn * b).map(|k| v(r, k)).collect();
    let root = n - 1;
    let algos = [
        ran(&w, "allreduce", None, || {
            w.allreduce_in_place(&mut one.clone(), Op::Sum)
        }),
        ran(&w, "bcast", None, || w.bcast(&mut one.clone(), root)),
        ran(&w, "reduce", None, || {
            let mut out = one.clone();
            w.reduce(&one, (r == root).then_some(&mut out[..]), Op::Sum, root)
        }),
        ran(&w, "allgather", None, || {
            w.allgather(&one, &mut vec![0i64; nn * b])
        }),
        ran(&w, "reduce_scatter", None, || {
            w.reduce_scatter(&all, &mut vec![0i64; b], Op::Sum)
        }),
        ran(&w, "alltoall", None, || {
            w.alltoall(&all, &mut vec![0i64; nn * b])
        }),
        ran(&w, "gather", None, || {
            let mut out = vec![0i64; nn * b];
            w.gather(&one, (r == root).then_some(&mut out[..]), root)
        }),
        ran(&w, "scatter", None, || {
            w.scatter((r == root).then_some(&all[..]), &mut vec![0i64; b], root)
        }),
        ran(&w, "scan", None, || {
            w.scan(&one, &mut vec![0i64; b], Op::Sum)
        }),
    ];
    let ops = [
        "allreduce",
        "bcast",
        "reduce",
        "allgather",
        "reduce_scatter",
        "alltoall",
        "gather",
        "scatter",
        "scan",
    ];
    for (op, (res, algo)) in ops.iter().zip(algos) {
        res.unwrap_or_else(|e| panic!("{op}: {e}"));
        if r == 0 {
            println!("algo {op} {algo}");
        }
    }
}
