//! Bruck's algorithms: allgather and all-to-all in ⌈log₂ n⌉ rounds for any rank count, for
//! small blocks where message count, not bytes, is the cost.

use super::{Chunk, Phase, Schedule, Step, data, input, tmp_at};

/// Bruck allgather of `block` bytes per rank: ⌈log₂ n⌉ phases of one send and one receive. In
/// the phase at distance d = 2ᵏ each rank sends the first min(d, n−d) blocks it has (its own
/// and the following ranks') to rank − d and receives as many from rank + d.
///
/// `Data` (n blocks) holds this rank's block at `rank · block` before (as for
/// [`ring_allgather`](super::ring_allgather)) and every block after. The blocks gather in
/// `Tmp` (n blocks) in the order rank, rank+1, …, which the last phase rotates into `Data` with
/// at most two copies. Not a reduction.
pub fn bruck_allgather(rank: u32, n: u32, block: usize) -> Schedule {
    let (r, n) = (rank as usize, n as usize);
    let mut s = Schedule::default();
    if n < 2 || block == 0 {
        return s;
    }
    s.tmp_len = n * block;
    // W[i], the block of rank r+i, lives at Tmp[i · block].
    let w = |i: usize, cnt: usize| tmp_at(i * block, cnt * block);
    let mut dist = 1;
    while dist < n {
        let cnt = dist.min(n - dist);
        // W[0] is still only in Data in the first phase, which moves exactly that block.
        let src = if dist == 1 {
            data(r * block, block)
        } else {
            w(0, cnt)
        };
        let mut local = Vec::new();
        if dist == 1 && n > 2 {
            local.push(Step::Copy {
                dst: w(0, 1),
                src: data(r * block, block),
            });
        }
        s.phases.push(Phase {
            xfers: vec![
                Step::Recv {
                    peer: ((r + dist) % n) as u32,
                    dst: w(dist, cnt),
                },
                Step::Send {
                    peer: ((r + n - dist) % n) as u32,
                    src,
                },
            ],
            local,
        });
        dist <<= 1;
    }
    let last = &mut s.phases.last_mut().expect("n ≥ 2 has a phase").local;
    if r + 1 < n {
        last.push(Step::Copy {
            dst: data((r + 1) * block, (n - r - 1) * block),
            src: w(1, n - r - 1),
        });
    }
    if r > 0 {
        last.push(Step::Copy {
            dst: data(0, r * block),
            src: w(n - r, r),
        });
    }
    s
}

/// Runs of indices in `0..n` with bit `k` set, as (first, length).
fn runs_with_bit(n: usize, k: u32) -> impl Iterator<Item = (usize, usize)> {
    let d = 1usize << k;
    (d..n).step_by(2 * d).map(move |a| (a, d.min(n - a)))
}

/// Bruck all-to-all of `block` bytes per rank pair: ⌈log₂ n⌉ phases of one send and one
/// receive of about n/2 blocks each (against n−1 phases for
/// [`pairwise_alltoall`](super::pairwise_alltoall)), so it wins for small blocks.
///
/// `Input` holds n blocks, block j for rank j; after, `Data` (n blocks) holds at block i what
/// rank i sent to this rank. Unlike `pairwise_alltoall` the schedule does every copy itself,
/// own block included: `Data` needs no content before. `Tmp` is n blocks plus two packing
/// buffers of at most ⌈n/2⌉ blocks. A local phase first rotates `Input` into `Tmp` so that
/// W\[i\] is the block for rank + i; in phase k the blocks whose index has bit k set are packed,
/// sent to rank + 2ᵏ, and replaced by the ones received from rank − 2ᵏ; at the end W\[i\] came
/// from rank − i and is copied to `Data` block rank − i (n copies of one block). Not a
/// reduction.
pub fn bruck_alltoall(rank: u32, n: u32, block: usize) -> Schedule {
    let (r, n) = (rank as usize, n as usize);
    let mut s = Schedule::default();
    if block == 0 || n == 0 {
        return s;
    }
    if n == 1 {
        s.phases.push(Phase {
            xfers: vec![],
            local: vec![Step::Copy {
                dst: data(0, block),
                src: input(0, block),
            }],
        });
        return s;
    }
    let w = |i: usize, cnt: usize| tmp_at(i * block, cnt * block);
    let rounds = usize::BITS - (n - 1).leading_zeros();
    let pack_len = (0..rounds)
        .map(|k| runs_with_bit(n, k).map(|(_, l)| l).sum::<usize>())
        .max()
        .unwrap_or(0);
    let send_buf = n * block;
    let recv_buf = send_buf + pack_len * block;
    s.tmp_len = recv_buf + pack_len * block;
    // (packed, unpacked) chunk pairs of round k, in index order.
    let packing = |k: u32, at: usize| -> Vec<(Chunk, Chunk)> {
        let mut pos = 0;
        runs_with_bit(n, k)
            .map(|(a, l)| {
                let c = (tmp_at(at + pos * block, l * block), w(a, l));
                pos += l;
                c
            })
            .collect()
    };
    let pack = |k: u32| {
        packing(k, send_buf)
            .into_iter()
            .map(|(dst, src)| Step::Copy { dst, src })
    };
    let mut local = vec![Step::Copy {
        dst: w(0, n - r),
        src: input(r * block, (n - r) * block),
    }];
    if r > 0 {
        local.push(Step::Copy {
            dst: w(n - r, r),
            src: input(0, r * block),
        });
    }
    local.extend(pack(0));
    s.phases.push(Phase {
        xfers: vec![],
        local,
    });
    for k in 0..rounds {
        let d = 1usize << k;
        let len: usize = runs_with_bit(n, k).map(|(_, l)| l).sum::<usize>() * block;
        let mut local: Vec<Step> = packing(k, recv_buf)
            .into_iter()
            .map(|(src, dst)| Step::Copy { dst, src })
            .collect();
        if k + 1 < rounds {
            local.extend(pack(k + 1));
        } else {
            local.extend((0..n).map(|i| Step::Copy {
                dst: data((r + n - i) % n * block, block),
                src: w(i, 1),
            }));
        }
        s.phases.push(Phase {
            xfers: vec![
                Step::Recv {
                    peer: ((r + n - d) % n) as u32,
                    dst: tmp_at(recv_buf, len),
                },
                Step::Send {
                    peer: ((r + d) % n) as u32,
                    src: tmp_at(send_buf, len),
                },
            ],
            local,
        });
    }
    s
}
