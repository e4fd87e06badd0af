//! Reductions: allreduce, reduce-scatter, reduce and scan schedules.

use super::{
    Blocks, Chunk, Order, Phase, Schedule, Step, concat, data, direct_allgather_v, equal_blocks,
    ring_allgather_v, segments, tmp, tmp_at, xfer_pair,
};

fn reduce(dst: Chunk, src: Chunk, order: Order) -> Step {
    Step::Reduce { dst, src, order }
}

fn one(xfers: Vec<Step>, local: Vec<Step>) -> Phase {
    Phase { xfers, local }
}

/// Ring allreduce: reduce-scatter then allgather, 2(n−1) phases of one send and one receive,
/// each rank sending 2(n−1)/n of the buffer — bandwidth-optimal for large buffers.
///
/// `Data` holds this rank's `count` elements before and the reduction after; `Tmp` is one
/// segment. **Not rank-ordered** (segment i is combined starting at rank i+1, around the ring):
/// commutative ops only. Every rank ends with identical bytes, because each segment is reduced
/// once and then copied.
pub fn ring_allreduce(rank: u32, n: u32, count: usize, elem: usize) -> Schedule {
    let (r, n) = (rank as usize, n as usize);
    let mut s = Schedule::default();
    if n < 2 || count == 0 {
        return s;
    }
    let right = ((r + 1) % n) as u32;
    let left = ((r + n - 1) % n) as u32;
    let seg = segments(n as u32, count, elem);
    s.tmp_len = seg[0].1;
    for k in 0..n - 1 {
        let (so, sl) = seg[(r + n - k) % n];
        let (ro, rl) = seg[(r + 2 * n - k - 1) % n];
        let local = if rl > 0 {
            vec![reduce(data(ro, rl), tmp(rl), Order::DstFirst)]
        } else {
            vec![]
        };
        let xfers = xfer_pair(right, data(so, sl), left, tmp(rl));
        if !xfers.is_empty() {
            s.phases.push(one(xfers, local));
        }
    }
    // Rank r now owns segment r+1; pass the reduced segments on around the same ring.
    for k in 0..n - 1 {
        let (so, sl) = seg[(r + 1 + n - k) % n];
        let (ro, rl) = seg[(r + n - k) % n];
        let xfers = xfer_pair(right, data(so, sl), left, data(ro, rl));
        if !xfers.is_empty() {
            s.phases.push(one(xfers, vec![]));
        }
    }
    s
}

/// The largest power of two not above `n` (n ≥ 1).
fn pow2_floor(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// The communicator rank of new rank `nr` after [`fold_in`] (new rank `nr < rem` stands for
/// the pair {2nr, 2nr+1}). Monotone, so new-rank order is rank order.
fn real_of(nr: usize, rem: usize) -> u32 {
    (if nr < rem { nr * 2 + 1 } else { nr + rem }) as u32
}

/// Folds a non-power-of-two rank count onto the largest power of two p: of the first 2·rem
/// ranks, each even one sends its whole buffer to the odd one above it, which combines them in
/// rank order. Returns (p, rem, this rank's new rank or `None` when it sits out).
fn fold_in(s: &mut Schedule, r: usize, n: usize, all: Chunk) -> (usize, usize, Option<usize>) {
    let p = pow2_floor(n);
    let rem = n - p;
    if r >= 2 * rem {
        return (p, rem, Some(r - rem));
    }
    if r.is_multiple_of(2) {
        s.phases.push(one(
            vec![Step::Send {
                peer: (r + 1) as u32,
                src: all,
            }],
            vec![],
        ));
        (p, rem, None)
    } else {
        s.tmp_len = s.tmp_len.max(all.len);
        s.phases.push(one(
            vec![Step::Recv {
                peer: (r - 1) as u32,
                dst: tmp(all.len),
            }],
            vec![reduce(all, tmp(all.len), Order::SrcFirst)],
        ));
        (p, rem, Some(r / 2))
    }
}

/// Hands the result back to the ranks that sat out after [`fold_in`].
fn fold_out(s: &mut Schedule, r: usize, rem: usize, all: Chunk) {
    if r < 2 * rem {
        let step = if r % 2 == 1 {
            Step::Send {
                peer: (r - 1) as u32,
                src: all,
            }
        } else {
            Step::Recv {
                peer: (r + 1) as u32,
                dst: all,
            }
        };
        s.phases.push(one(vec![step], vec![]));
    }
}

/// Recursive doubling allreduce: ⌈log₂ n⌉ exchanges of the whole buffer (plus two for
/// non-powers of two) — latency-optimal for small buffers.
///
/// `Data` holds this rank's `count` elements before and the reduction after; `Tmp` is the whole
/// buffer. With p the largest power of two ≤ n and rem = n − p, ranks 2i < 2·rem first send
/// their buffer to rank 2i+1 (which combines them as a(2i) ⊕ a(2i+1)) and get the result back
/// at the end. **Rank-ordered**: after the exchange at distance d every rank holds the ordered
/// reduction of an aligned group of 2d (new) ranks, and the lower group's partial is always the
/// left operand, so the result is valid for non-commutative ops. Both partners combine the same
/// two operands in the same order, so every rank ends with bitwise identical bytes.
pub fn recursive_doubling_allreduce(rank: u32, n: u32, count: usize, elem: usize) -> Schedule {
    let (r, n) = (rank as usize, n as usize);
    let bytes = count * elem;
    if n < 2 || count == 0 {
        return Schedule::default();
    }
    let mut s = Schedule {
        phases: vec![],
        tmp_len: bytes,
        ..Schedule::default()
    };
    let all = data(0, bytes);
    let (p, rem, newrank) = fold_in(&mut s, r, n, all);
    if let Some(nr) = newrank {
        let mut mask = 1;
        while mask < p {
            let pn = nr ^ mask;
            let partner = real_of(pn, rem);
            let order = if pn < nr {
                Order::SrcFirst
            } else {
                Order::DstFirst
            };
            s.phases.push(one(
                vec![
                    Step::Send {
                        peer: partner,
                        src: all,
                    },
                    Step::Recv {
                        peer: partner,
                        dst: tmp(bytes),
                    },
                ],
                vec![reduce(all, tmp(bytes), order)],
            ));
            mask <<= 1;
        }
    }
    fold_out(&mut s, r, rem, all);
    s
}

/// Rabenseifner's allreduce: reduce-scatter by recursive halving, then allgather by recursive
/// doubling — 2·log₂ p exchanges (p the largest power of two ≤ n, plus two for the fold of
/// non-powers of two as in [`recursive_doubling_allreduce`]), each rank sending about
/// 2(p−1)/p of the buffer: bandwidth-optimal like the ring with logarithmic latency.
///
/// `Data` holds this rank's `count` elements before and the reduction after; `Tmp` is half the
/// buffer (the whole buffer on the ranks that receive a fold). The buffer is cut into p
/// element-aligned segments; the halving pairs ranks at distance 1, 2, 4, … so every partial is
/// the ordered reduction of an aligned group of ranks, combined with the lower group on the
/// left: **rank-ordered** (valid for non-commutative ops), and since each segment is reduced
/// on one rank and then copied, every rank ends with bitwise identical bytes.
pub fn rabenseifner_allreduce(rank: u32, n: u32, count: usize, elem: usize) -> Schedule {
    let (r, n) = (rank as usize, n as usize);
    let bytes = count * elem;
    let mut s = Schedule::default();
    if n < 2 || count == 0 {
        return s;
    }
    let all = data(0, bytes);
    let (p, rem, newrank) = fold_in(&mut s, r, n, all);
    if let Some(nr) = newrank {
        let seg = segments(p as u32, count, elem);
        // Segments [lo, hi) are contiguous bytes.
        let range = |(lo, hi): (usize, usize)| {
            let start = seg[lo].0;
            data(start, seg[hi - 1].0 + seg[hi - 1].1 - start)
        };
        let (mut lo, mut hi) = (0, p);
        let mut halvings = Vec::new();
        let mut mask = 1;
        while mask < p {
            let mid = lo + (hi - lo) / 2;
            let (keep, give) = if nr & mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            let partner = real_of(nr ^ mask, rem);
            let (k, g) = (range(keep), range(give));
            // The partner's group is the lower one exactly when our bit is set.
            let order = if nr & mask != 0 {
                Order::SrcFirst
            } else {
                Order::DstFirst
            };
            let xfers = xfer_pair(partner, g, partner, tmp(k.len));
            if !xfers.is_empty() {
                let local = if k.len > 0 {
                    vec![reduce(k, tmp(k.len), order)]
                } else {
                    vec![]
                };
                s.phases.push(one(xfers, local));
            }
            s.tmp_len = s.tmp_len.max(k.len);
            halvings.push((partner, k, g));
            (lo, hi) = keep;
            mask <<= 1;
        }
        for (partner, k, g) in halvings.into_iter().rev() {
            let xfers = xfer_pair(partner, k, partner, g);
            if !xfers.is_empty() {
                s.phases.push(one(xfers, vec![]));
            }
        }
    }
    fold_out(&mut s, r, rem, all);
    s
}

/// The local steps of the canonical right fold `acc = a(n−1); acc = a(j) ⊕ acc` for j = n−2
/// down to 0, leaving the result in `mine` (which holds this rank's operand a(r)); `slot(j)`
/// holds a(j) for j ≠ r and may be overwritten. No copy: the fold accumulates in slot n−1 until
/// it reaches r, where `mine ⊕ acc` (`DstFirst`) is the same combination as `a(r) ⊕ acc`.
fn canonical_fold(r: usize, n: usize, mine: Chunk, slot: impl Fn(usize) -> Chunk) -> Vec<Step> {
    let mut v = Vec::with_capacity(n.saturating_sub(1));
    if mine.len == 0 {
        return v;
    }
    if r + 1 < n {
        let acc = slot(n - 1);
        for j in (r + 1..n - 1).rev() {
            v.push(reduce(acc, slot(j), Order::SrcFirst));
        }
        v.push(reduce(mine, acc, Order::DstFirst));
    }
    for j in (0..r).rev() {
        v.push(reduce(mine, slot(j), Order::SrcFirst));
    }
    v
}

/// Direct (pairwise) reduce-scatter over `Data` laid out as `blocks`: in one phase every rank
/// sends block j to rank j and receives its own block from every peer, then reduces the n
/// contributions in the **canonical order**, the right fold
/// `acc = a(n−1); for j in (0..n−1).rev() { acc = a(j) ⊕ acc }`.
///
/// `Data` holds this rank's full input (every block) before; after, block `rank` holds the
/// reduction (other blocks unchanged). `Tmp` is n−1 copies of this rank's block (slot j for
/// peer j < rank, j−1 above). n−1 messages each way, all concurrent; n−1 reductions.
/// **Rank-ordered and deterministic**: the result is bit for bit the canonical right fold, for
/// floats too, whatever the rank count or message timing — other implementations (shared
/// memory) reproduce the same fold to get the same bytes.
pub fn direct_reduce_scatter_v(rank: u32, blocks: &Blocks) -> Schedule {
    let (r, n) = (rank as usize, blocks.len());
    if n < 2 {
        return Schedule::default();
    }
    let (off, len) = blocks[r];
    let slot = |j: usize| tmp_at(if j < r { j } else { j - 1 } * len, len);
    let mut xfers = Vec::new();
    for j in (0..n).filter(|&j| j != r) {
        if len > 0 {
            xfers.push(Step::Recv {
                peer: j as u32,
                dst: slot(j),
            });
        }
        if blocks[j].1 > 0 {
            xfers.push(Step::Send {
                peer: j as u32,
                src: data(blocks[j].0, blocks[j].1),
            });
        }
    }
    let local = canonical_fold(r, n, data(off, len), slot);
    let mut s = Schedule {
        phases: vec![],
        tmp_len: (n - 1) * len,
        ..Schedule::default()
    };
    if !xfers.is_empty() || !local.is_empty() {
        s.phases.push(one(xfers, local));
    }
    s
}

/// [`direct_reduce_scatter_v`] of n blocks of `block` bytes.
pub fn direct_reduce_scatter(rank: u32, n: u32, block: usize) -> Schedule {
    direct_reduce_scatter_v(rank, &equal_blocks(n, block))
}

/// Direct allreduce: [`direct_reduce_scatter_v`] over the n element-aligned [`segments`] of
/// the buffer, then a ring allgather of the segments ([`ring_allgather_v`]). 1 + (n−1) phases,
/// 2(n−1) messages sent per rank, each rank sending 2(n−1)/n of the buffer.
///
/// `Data` holds this rank's `count` elements before and the reduction after; `Tmp` is n−1
/// segments. **Rank-ordered and deterministic**: every element is the canonical right fold
/// `a(0) ⊕ (a(1) ⊕ (… ⊕ a(n−1)))`, bit for bit (also for floats) and identical on every rank —
/// the algorithm for `RCOMM_DETERMINISTIC=1` and large non-commutative allreduces.
pub fn direct_allreduce(rank: u32, n: u32, count: usize, elem: usize) -> Schedule {
    if n < 2 || count == 0 {
        return Schedule::default();
    }
    let seg = segments(n, count, elem);
    concat(
        direct_reduce_scatter_v(rank, &seg),
        ring_allgather_v(rank, &seg),
    )
}

/// One-shot allreduce: every rank sends its whole buffer to every peer and folds the n inputs
/// itself, in the canonical order ([`direct_reduce_scatter_v`] where every rank's block is
/// the whole buffer). One phase, (n−1)·bytes received per rank: the algorithm for small
/// buffers, where one step of latency beats moving less data (the device executor's choice
/// between ranks of one node, whose copy engines read the peers' buffers in place).
///
/// `Data` holds this rank's `count` elements before and the reduction after; `Tmp` is n−1
/// buffers. **Rank-ordered and deterministic**: the canonical right fold, bit for bit, as
/// [`direct_allreduce`].
pub fn one_shot_allreduce(rank: u32, n: u32, count: usize, elem: usize) -> Schedule {
    if n < 2 || count == 0 {
        return Schedule::default();
    }
    direct_reduce_scatter_v(rank, &vec![(0, count * elem); n as usize])
}

/// Two-shot allreduce: [`direct_reduce_scatter_v`] over the n element-aligned [`segments`],
/// then a direct allgather of the segments ([`direct_allgather_v`]). Two phases, each rank
/// receiving 2(n−1)/n of the buffer: the large-buffer algorithm between ranks of one node.
///
/// `Data` holds this rank's `count` elements before and the reduction after; `Tmp` is n−1
/// segments. **Rank-ordered and deterministic**: the canonical right fold, bit for bit.
pub fn two_shot_allreduce(rank: u32, n: u32, count: usize, elem: usize) -> Schedule {
    if n < 2 || count == 0 {
        return Schedule::default();
    }
    let seg = segments(n, count, elem);
    concat(
        direct_reduce_scatter_v(rank, &seg),
        direct_allgather_v(rank, &seg),
    )
}

/// Direct reduce to `root`: [`direct_reduce_scatter_v`] over the n element-aligned
/// [`segments`], then every rank sends its reduced segment to the root (one phase).
///
/// `Data` holds this rank's `count` elements before; after, the root's `Data` holds the
/// reduction, other ranks' `Data` is scratch (their segment holds its reduction). `Tmp` is n−1
/// segments. 2(n−1) messages at the root. **Rank-ordered and deterministic**: the canonical
/// right fold bit for bit, as [`direct_allreduce`].
pub fn direct_reduce(rank: u32, n: u32, root: u32, count: usize, elem: usize) -> Schedule {
    if n < 2 || count == 0 {
        return Schedule::default();
    }
    let seg = segments(n, count, elem);
    let mut gather = Schedule::default();
    let xfers: Vec<Step> = if rank == root {
        (0..n)
            .filter(|&j| j != root && seg[j as usize].1 > 0)
            .map(|j| Step::Recv {
                peer: j,
                dst: data(seg[j as usize].0, seg[j as usize].1),
            })
            .collect()
    } else if seg[rank as usize].1 > 0 {
        vec![Step::Send {
            peer: root,
            src: data(seg[rank as usize].0, seg[rank as usize].1),
        }]
    } else {
        vec![]
    };
    if !xfers.is_empty() {
        gather.phases.push(one(xfers, vec![]));
    }
    concat(direct_reduce_scatter_v(rank, &seg), gather)
}

/// Binomial-tree reduce to `root`: ⌈log₂ n⌉ rounds; in round k virtual rank v (v = rank − root
/// mod n) with bit k clear receives the partial of virtual ranks [v+2ᵏ, v+2ᵏ⁺¹) and appends it
/// on the right (`DstFirst`); with bit k set it sends its partial up and is done.
///
/// `Data` holds this rank's `bytes` before; after, the root's `Data` holds the reduction,
/// other ranks' `Data` is scratch. `Tmp` is the whole buffer. Operands combine in virtual-rank
/// order root, root+1, …, n−1, 0, …, root−1: **rank-ordered only for root 0**; for another
/// root and a non-commutative op use [`binomial_reduce_ordered`] (or [`direct_reduce`]).
pub fn binomial_reduce(rank: u32, n: u32, root: u32, bytes: usize) -> Schedule {
    let (n, vr) = (n as usize, ((rank + n - root) % n) as usize);
    if n < 2 || bytes == 0 {
        return Schedule::default();
    }
    let mut s = Schedule {
        phases: vec![],
        tmp_len: bytes,
        ..Schedule::default()
    };
    let real = |v: usize| ((v + root as usize) % n) as u32;
    let all = data(0, bytes);
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            s.phases.push(one(
                vec![Step::Send {
                    peer: real(vr - mask),
                    src: all,
                }],
                vec![],
            ));
            break;
        }
        if vr + mask < n {
            s.phases.push(one(
                vec![Step::Recv {
                    peer: real(vr + mask),
                    dst: tmp(bytes),
                }],
                vec![reduce(all, tmp(bytes), Order::DstFirst)],
            ));
        }
        mask <<= 1;
    }
    s
}

/// [`binomial_reduce`] to rank 0, where virtual order is rank order, then (for root ≠ 0) one
/// message from rank 0 to the root: ⌈log₂ n⌉ + 1 rounds. Same buffer conventions;
/// **rank-ordered** for every root.
pub fn binomial_reduce_ordered(rank: u32, n: u32, root: u32, bytes: usize) -> Schedule {
    let mut s = binomial_reduce(rank, n, 0, bytes);
    if root != 0 && n > 1 && bytes > 0 && (rank == 0 || rank == root) {
        let all = data(0, bytes);
        let step = if rank == 0 {
            Step::Send {
                peer: root,
                src: all,
            }
        } else {
            Step::Recv { peer: 0, dst: all }
        };
        s.phases.push(one(vec![step], vec![]));
    }
    s
}

/// Ring reduce-scatter over `Data` laid out as `blocks`: n−1 phases of one send and one
/// receive.
///
/// `Data` holds this rank's full input (every block) before; after, block `rank` holds the
/// reduction over all ranks (other blocks are scratch). `Tmp` is the largest block. **Not
/// rank-ordered** (block i is combined starting at rank i+1, around the ring): commutative ops
/// only.
pub fn ring_reduce_scatter_v(rank: u32, blocks: &Blocks) -> Schedule {
    let (r, n) = (rank as usize, blocks.len());
    let tmp_len = blocks.iter().map(|b| b.1).max().unwrap_or(0);
    if n < 2 || tmp_len == 0 {
        return Schedule::default();
    }
    let mut s = Schedule {
        phases: vec![],
        tmp_len,
        ..Schedule::default()
    };
    let right = ((r + 1) % n) as u32;
    let left = ((r + n - 1) % n) as u32;
    for k in 0..n - 1 {
        let (so, sl) = blocks[(r + 2 * n - k - 1) % n];
        let (ro, rl) = blocks[(r + 2 * n - k - 2) % n];
        let xfers = xfer_pair(right, data(so, sl), left, tmp(rl));
        let local = if rl > 0 {
            vec![reduce(data(ro, rl), tmp(rl), Order::DstFirst)]
        } else {
            vec![]
        };
        if !xfers.is_empty() {
            s.phases.push(one(xfers, local));
        }
    }
    s
}

/// Ring reduce-scatter of n blocks of `block` bytes (see [`ring_reduce_scatter_v`]).
pub fn ring_reduce_scatter(rank: u32, n: u32, block: usize) -> Schedule {
    ring_reduce_scatter_v(rank, &equal_blocks(n, block))
}

/// Scan along the rank chain: rank r receives the prefix a(0) ⊕ … ⊕ a(r−1) from rank r−1,
/// puts it on the left of its own operand (`SrcFirst`) and passes the result to rank r+1:
/// n−1 messages in sequence.
///
/// `Data` holds this rank's `bytes` before; after, the inclusive prefix a(0) ⊕ … ⊕ a(r), or
/// with `exclusive` the prefix a(0) ⊕ … ⊕ a(r−1) (rank 0's `Data` is left unchanged). `Tmp` is
/// the whole buffer. **Rank-ordered.**
pub fn chain_scan(rank: u32, n: u32, bytes: usize, exclusive: bool) -> Schedule {
    let (r, n) = (rank as usize, n as usize);
    if n < 2 || bytes == 0 {
        return Schedule::default();
    }
    let mut s = Schedule {
        phases: vec![],
        tmp_len: bytes,
        ..Schedule::default()
    };
    let all = data(0, bytes);
    if r > 0 {
        s.phases.push(one(
            vec![Step::Recv {
                peer: (r - 1) as u32,
                dst: tmp(bytes),
            }],
            vec![reduce(all, tmp(bytes), Order::SrcFirst)],
        ));
    }
    if r + 1 < n {
        s.phases.push(one(
            vec![Step::Send {
                peer: (r + 1) as u32,
                src: all,
            }],
            vec![],
        ));
    }
    if exclusive && r > 0 {
        s.phases.push(one(
            vec![],
            vec![Step::Copy {
                dst: all,
                src: tmp(bytes),
            }],
        ));
    }
    s
}
