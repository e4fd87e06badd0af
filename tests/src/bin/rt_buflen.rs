//! Rank program: MPI's buffer-length rules, one case per rule (`rt_buflen <case>`; rank 0
//! prints `ok <case>`). Every value depends on (rank, index), results are compared with what
//! a sequential computation gives, and the part of a buffer past what its counts address is
//! filled with a sentinel that must survive (never sent, never written).
use rcomm::{CommError, Communicator, Op, Tag};

const PAD: i64 = -7_777;

fn v(rank: u32, i: usize) -> i64 {
    rank as i64 * 100_000 + i as i64
}

/// Rank p's count in the v-collectives: uneven, some zero.
fn count(p: u32) -> usize {
    ((p as usize * 7) % 5) * 3 + (p as usize % 2)
}

fn padded(mut data: Vec<i64>, extra: usize) -> Vec<i64> {
    data.extend(std::iter::repeat_n(PAD, extra));
    data
}

fn ok(w: &Communicator, case: &str) {
    w.barrier().unwrap();
    if w.rank() == 0 {
        println!("ok {case}");
    }
}

fn invalid<T: std::fmt::Debug>(r: rcomm::Result<T>, what: &str) {
    match r {
        Err(CommError::InvalidArg(m)) => assert!(m.contains("fewer than"), "{what}: {m}"),
        other => panic!("{what}: expected an InvalidArg error, got {other:?}"),
    }
}

fn main() {
    let case = std::env::args().nth(1).expect("case");
    let w = rcomm::init().unwrap();
    let (r, n) = (w.rank(), w.size());
    let counts: Vec<usize> = (0..n).map(count).collect();
    let total: usize = counts.iter().sum();
    let offs: Vec<usize> = (0..n as usize).map(|p| counts[..p].iter().sum()).collect();
    let me = r as usize;
    let mine: Vec<i64> = (0..counts[me]).map(|i| v(r, i)).collect();
    // Everyone's contributions in rank order: the sequential reference of the gathers.
    let all: Vec<i64> = (0..n)
        .flat_map(|p| (0..count(p)).map(move |i| v(p, i)))
        .collect();
    match case.as_str() {
        // MPI-3.1 §5.6 (MPI_Scatterv): the root's send buffer need only hold the blocks its
        // counts and displacements address. The reported program: 2400 elements, counts
        // addressing 2376.
        "scatterv-send-longer" => {
            let c: Vec<usize> = (0..n)
                .map(|p| 2376 / n as usize + usize::from(p == 0) * (2376 % n as usize))
                .collect();
            let src: Vec<i64> = (0..2400).map(|i| v(0, i)).collect();
            for root in [0, n - 1] {
                let mut part = vec![PAD; c[me]];
                w.scatterv((r == root).then_some(&src[..]), &c, &mut part, root)
                    .unwrap();
                let off: usize = c[..me].iter().sum();
                assert_eq!(part, src[off..off + c[me]], "scatterv root {root}");
                let req = w
                    .iscatterv((r == root).then(|| src.clone()), &c, root)
                    .unwrap();
                assert_eq!(req.wait().unwrap(), src[off..off + c[me]], "iscatterv");
            }
        }
        // §5.5 (MPI_Gatherv), §5.7 (MPI_Allgatherv): a send buffer longer than the sendcount;
        // only the first `counts[rank]` elements go.
        "gatherv-send-longer" => {
            let send = padded(mine.clone(), 5);
            let mut got = vec![0; total];
            w.allgatherv(&send, &mut got, &counts).unwrap();
            assert_eq!(got, all, "allgatherv");
            let mut g = vec![0; total];
            w.gatherv(&send, (r == 0).then_some(&mut g[..]), &counts, 0)
                .unwrap();
            if r == 0 {
                assert_eq!(g, all, "gatherv");
            }
            let got = w
                .iallgatherv(send.clone(), &counts)
                .unwrap()
                .wait()
                .unwrap();
            assert_eq!(got, all, "iallgatherv");
            let got = w.igatherv(send, &counts, 0).unwrap().wait().unwrap();
            if r == 0 {
                assert_eq!(got, all, "igatherv");
            }
        }
        // §5.5, §5.7, §5.6: receive buffers longer than the counts address; the blocks land
        // in rank order from the start, the rest is left alone.
        "v-recv-longer" => {
            let mut got = vec![PAD; total + 4];
            w.allgatherv(&mine, &mut got, &counts).unwrap();
            assert_eq!(got, padded(all.clone(), 4), "allgatherv");
            let mut g = vec![PAD; total + 3];
            w.gatherv(&mine, (r == n - 1).then_some(&mut g[..]), &counts, n - 1)
                .unwrap();
            if r == n - 1 {
                assert_eq!(g, padded(all.clone(), 3), "gatherv");
            }
            let mut part = vec![PAD; counts[me] + 2];
            w.scatterv((r == 0).then_some(&all[..]), &counts, &mut part, 0)
                .unwrap();
            assert_eq!(part, padded(mine.clone(), 2), "scatterv");
        }
        // §5.8 (MPI_Alltoallv): send and receive buffers longer than their counts address.
        // Rank i sends j the block of (i + j) % 3 + 1 elements.
        "alltoallv-longer" => {
            let sc: Vec<usize> = (0..n).map(|j| (r + j) as usize % 3 + 1).collect();
            let rc: Vec<usize> = (0..n).map(|i| (i + r) as usize % 3 + 1).collect();
            let send: Vec<i64> = (0..n)
                .flat_map(|j| (0..sc[j as usize]).map(move |k| v(r, j as usize * 10 + k)))
                .collect();
            let want: Vec<i64> = (0..n)
                .flat_map(|i| (0..rc[i as usize]).map(move |k| v(i, me * 10 + k)))
                .collect();
            let mut got = vec![PAD; want.len() + 6];
            w.alltoallv(&padded(send.clone(), 9), &sc, &mut got, &rc)
                .unwrap();
            assert_eq!(got, padded(want.clone(), 6), "alltoallv");
            let got = w
                .ialltoallv(padded(send, 9), &sc, &rc)
                .unwrap()
                .wait()
                .unwrap();
            assert_eq!(got, want, "ialltoallv");
        }
        // §5.10.1 (MPI_Reduce_scatter): the send buffer holds sum(recvcounts) elements, the
        // receive buffer recvcounts[rank]; longer ones are used from the start.
        "reduce-scatter-v-longer" => {
            let big = padded((0..total).map(|k| v(r, k)).collect(), 3);
            let want: Vec<i64> = (0..counts[me])
                .map(|i| (0..n).map(|p| v(p, offs[me] + i)).sum())
                .collect();
            let mut red = vec![PAD; counts[me] + 2];
            w.reduce_scatter_v(&big, &mut red, &counts, Op::Sum)
                .unwrap();
            assert_eq!(red, padded(want.clone(), 2), "reduce_scatter_v");
            let got = w
                .ireduce_scatter_v(big, &counts, Op::Sum)
                .unwrap()
                .wait()
                .unwrap();
            assert_eq!(got, want, "ireduce_scatter_v");
        }
        // §5.9 (MPI_Reduce, MPI_Allreduce), §5.11 (MPI_Scan, MPI_Exscan), §5.8
        // (MPI_Alltoall), §5.10.2 (MPI_Reduce_scatter_block), §5.9.7 (MPI_Reduce_local): one
        // count for both buffers (here the send slice's length); a longer receive buffer
        // gets the result in its first `count` elements and keeps the rest.
        "reduce-recv-longer" => {
            let x: Vec<i64> = (0..6).map(|i| v(r, i)).collect();
            let sum: Vec<i64> = (0..6).map(|i| (0..n).map(|p| v(p, i)).sum()).collect();
            let mut got = vec![PAD; 9];
            w.allreduce(&x, &mut got, Op::Sum).unwrap();
            assert_eq!(got, padded(sum.clone(), 3), "allreduce");
            let mut got = vec![PAD; 8];
            w.reduce(&x, (r == 0).then_some(&mut got[..]), Op::Sum, 0)
                .unwrap();
            if r == 0 {
                assert_eq!(got, padded(sum, 2), "reduce");
            }
            let upto = |last: u32| -> Vec<i64> {
                (0..6).map(|i| (0..last).map(|p| v(p, i)).sum()).collect()
            };
            let mut got = vec![PAD; 7];
            w.scan(&x, &mut got, Op::Sum).unwrap();
            assert_eq!(got, padded(upto(r + 1), 1), "scan");
            let mut got = vec![PAD; 10];
            w.exscan(&x, &mut got, Op::Sum).unwrap();
            if r > 0 {
                assert_eq!(got, padded(upto(r), 4), "exscan");
            } else {
                assert_eq!(got, vec![PAD; 10], "exscan leaves rank 0's buffer alone");
            }
            // Blocks of 2: block j of every rank goes to rank j.
            let send: Vec<i64> = (0..2 * n as usize).map(|k| v(r, k)).collect();
            let want: Vec<i64> = (0..n)
                .flat_map(|p| (0..2).map(move |k| v(p, me * 2 + k)))
                .collect();
            let mut got = vec![PAD; 2 * n as usize + 5];
            w.alltoall(&send, &mut got).unwrap();
            assert_eq!(got, padded(want, 5), "alltoall");
            // Reduce-scatter of equal blocks of 2: a send buffer longer than size × 2.
            let big = padded((0..2 * n as usize).map(|k| v(r, k)).collect(), 3);
            let mut red = vec![PAD; 2];
            w.reduce_scatter(&big, &mut red, Op::Sum).unwrap();
            let want: Vec<i64> = (0..2)
                .map(|i| (0..n).map(|p| v(p, me * 2 + i)).sum())
                .collect();
            assert_eq!(red, want, "reduce_scatter");
            let mut inout = padded(vec![1, 2], 2);
            rcomm::reduce_local(&[10i64, 20], &mut inout, Op::Sum).unwrap();
            assert_eq!(inout, padded(vec![11, 22], 2), "reduce_local");
        }
        // The rule's other half: a buffer shorter than its counts address is an error before
        // anything moves (every rank passes a short one, so none is left waiting).
        "shorter-refused" => {
            let mut got = vec![0; total.saturating_sub(1)];
            if total > 0 {
                invalid(w.allgatherv(&mine, &mut got, &counts), "allgatherv recv");
            }
            let c = vec![2usize; n as usize];
            let mut out = vec![0i64; 2 * n as usize];
            invalid(
                w.alltoallv(&vec![1i64; 2 * n as usize - 1], &c, &mut out, &c),
                "alltoallv send",
            );
            invalid(
                w.reduce_scatter_v(&vec![1i64; 2 * n as usize], &mut [0i64; 1], &c, Op::Sum),
                "reduce_scatter_v recv",
            );
            // Still in step: a collective after the refused ones.
            let mut got = vec![0; total];
            w.allgatherv(&mine, &mut got, &counts).unwrap();
            assert_eq!(got, all);
        }
        // MPI-3.1 §3.2.4: a receive buffer longer than the message is fine (the count is an
        // upper bound; the status gives the length); a message longer than the buffer is
        // MPI_ERR_TRUNCATE (§3.2.5), here `Truncated`.
        "recv-longer-and-truncate" => {
            let (to, from) = ((r + 1) % n, (r + n - 1) % n);
            let msg: Vec<i64> = (0..5).map(|i| v(r, i)).collect();
            let req = w.isend(msg.clone(), to, Tag(3)).unwrap();
            let mut buf = vec![PAD; 8];
            let st = w.recv(&mut buf, from, Tag(3)).unwrap();
            req.wait().unwrap();
            assert_eq!(st.bytes, 5 * 8, "status length");
            let want: Vec<i64> = (0..5).map(|i| v(from, i)).collect();
            assert_eq!(buf, padded(want, 3));
            let req = w.isend(msg, to, Tag(4)).unwrap();
            let mut small = [PAD; 3];
            match w.recv(&mut small, from, Tag(4)) {
                Err(CommError::Truncated { buffer, message }) => {
                    assert_eq!((buffer, message), (24, 40))
                }
                other => panic!("expected Truncated, got {other:?}"),
            }
            req.wait().unwrap();
        }
        other => panic!("unknown case {other}"),
    }
    ok(&w, &case);
}
