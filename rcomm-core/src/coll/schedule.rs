//! Collective algorithms as plain data: a [`Schedule`] is a list of phases; in each phase the
//! transfers (sends and receives of byte ranges) run concurrently, then the local steps
//! (reductions, copies) run in order. An executor on the CPU runs it today; the same data could
//! drive a GPU kernel or a proxy later, and schedules can be cached per (algorithm, ranks, size).

/// Which buffer a chunk lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buf {
    /// The caller's buffer (the result, in place).
    Data,
    /// Scratch of [`Schedule::tmp_len`] bytes owned by the executor.
    Tmp,
    /// The caller's separate input buffer (out-of-place operations); only read.
    Input,
}

/// A byte range of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// The buffer.
    pub buf: Buf,
    /// Offset in bytes.
    pub off: usize,
    /// Length in bytes.
    pub len: usize,
}

/// One step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send `src` to communicator rank `peer`.
    Send {
        /// Destination rank.
        peer: u32,
        /// What to send.
        src: Chunk,
    },
    /// Receive exactly `dst.len` bytes from `peer` into `dst`.
    Recv {
        /// Source rank.
        peer: u32,
        /// Where to.
        dst: Chunk,
    },
    /// `dst = dst ⊕ src` with the collective's op.
    Reduce {
        /// Accumulator.
        dst: Chunk,
        /// Operand.
        src: Chunk,
    },
    /// `dst = src`.
    Copy {
        /// Destination.
        dst: Chunk,
        /// Source.
        src: Chunk,
    },
}

/// Transfers that run together, then local steps in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Phase {
    /// Sends and receives (receives are posted first).
    pub xfers: Vec<Step>,
    /// Reductions after every transfer of the phase completed.
    pub local: Vec<Step>,
}

/// A collective as data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Phases in order.
    pub phases: Vec<Phase>,
    /// Scratch bytes needed.
    pub tmp_len: usize,
}

fn data(off: usize, len: usize) -> Chunk {
    Chunk {
        buf: Buf::Data,
        off,
        len,
    }
}

fn tmp(len: usize) -> Chunk {
    Chunk {
        buf: Buf::Tmp,
        off: 0,
        len,
    }
}

/// Byte range of segment `i` of `count` elements of `elem` bytes cut into `n` nearly equal
/// segments (the first `count % n` one element longer).
fn segment(i: usize, n: usize, count: usize, elem: usize) -> (usize, usize) {
    let (q, r) = (count / n, count % n);
    let start = i * q + i.min(r);
    let len = q + usize::from(i < r);
    (start * elem, len * elem)
}

/// Ring allreduce: reduce-scatter then allgather, 2(n−1) steps, each rank sending
/// 2(n−1)/n of the buffer — bandwidth-optimal for large buffers. Commutative ops only (each
/// segment is combined in a rotated rank order); every rank ends with identical bytes, because
/// each segment is reduced once and then copied.
pub fn ring_allreduce(rank: u32, n: u32, count: usize, elem: usize) -> Schedule {
    let (r, n) = (rank as usize, n as usize);
    let mut s = Schedule::default();
    if n < 2 || count == 0 {
        return s;
    }
    let right = ((r + 1) % n) as u32;
    let left = ((r + n - 1) % n) as u32;
    s.tmp_len = segment(0, n, count, elem).1;
    for k in 0..n - 1 {
        let (so, sl) = segment((r + n - k) % n, n, count, elem);
        let (ro, rl) = segment((r + 2 * n - k - 1) % n, n, count, elem);
        s.phases.push(Phase {
            xfers: vec![
                Step::Send {
                    peer: right,
                    src: data(so, sl),
                },
                Step::Recv {
                    peer: left,
                    dst: tmp(rl),
                },
            ],
            local: vec![Step::Reduce {
                dst: data(ro, rl),
                src: tmp(rl),
            }],
        });
    }
    for k in 0..n - 1 {
        let (so, sl) = segment((r + 1 + n - k) % n, n, count, elem);
        let (ro, rl) = segment((r + n - k) % n, n, count, elem);
        s.phases.push(Phase {
            xfers: vec![
                Step::Send {
                    peer: right,
                    src: data(so, sl),
                },
                Step::Recv {
                    peer: left,
                    dst: data(ro, rl),
                },
            ],
            local: vec![],
        });
    }
    s
}

/// Recursive doubling allreduce: ⌈log₂ n⌉ exchanges of the whole buffer — latency-optimal for
/// small buffers. Ranks beyond the largest power of two first fold their data into a partner
/// and get the result back at the end. Commutative ops only; results are bitwise identical on
/// every rank (each combination is a commutative pair of identical operands).
pub fn recursive_doubling_allreduce(rank: u32, n: u32, count: usize, elem: usize) -> Schedule {
    let (r, n) = (rank as usize, n as usize);
    let bytes = count * elem;
    let mut s = Schedule {
        phases: vec![],
        tmp_len: bytes,
    };
    if n < 2 || count == 0 {
        return Schedule::default();
    }
    let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let rem = n - p;
    let all = data(0, bytes);
    let newrank = if r < 2 * rem {
        if r % 2 == 0 {
            s.phases.push(Phase {
                xfers: vec![Step::Send {
                    peer: (r + 1) as u32,
                    src: all,
                }],
                local: vec![],
            });
            None
        } else {
            s.phases.push(Phase {
                xfers: vec![Step::Recv {
                    peer: (r - 1) as u32,
                    dst: tmp(bytes),
                }],
                local: vec![Step::Reduce {
                    dst: all,
                    src: tmp(bytes),
                }],
            });
            Some(r / 2)
        }
    } else {
        Some(r - rem)
    };
    if let Some(nr) = newrank {
        let mut mask = 1;
        while mask < p {
            let pn = nr ^ mask;
            let partner = if pn < rem { pn * 2 + 1 } else { pn + rem } as u32;
            s.phases.push(Phase {
                xfers: vec![
                    Step::Send {
                        peer: partner,
                        src: all,
                    },
                    Step::Recv {
                        peer: partner,
                        dst: tmp(bytes),
                    },
                ],
                local: vec![Step::Reduce {
                    dst: all,
                    src: tmp(bytes),
                }],
            });
            mask <<= 1;
        }
    }
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
        s.phases.push(Phase {
            xfers: vec![step],
            local: vec![],
        });
    }
    s
}

fn input(off: usize, len: usize) -> Chunk {
    Chunk {
        buf: Buf::Input,
        off,
        len,
    }
}

/// Binomial-tree reduce to `root` (commutative ops): ⌈log₂ n⌉ rounds; the result is left in
/// the root's `Data`, other ranks' `Data` is used as scratch.
pub fn binomial_reduce(rank: u32, n: u32, root: u32, bytes: usize) -> Schedule {
    let (n, vr) = (n as usize, ((rank + n - root) % n) as usize);
    let mut s = Schedule {
        phases: vec![],
        tmp_len: bytes,
    };
    if n < 2 || bytes == 0 {
        return Schedule::default();
    }
    let real = |v: usize| ((v + root as usize) % n) as u32;
    let all = data(0, bytes);
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            s.phases.push(Phase {
                xfers: vec![Step::Send {
                    peer: real(vr - mask),
                    src: all,
                }],
                local: vec![],
            });
            break;
        }
        if vr + mask < n {
            s.phases.push(Phase {
                xfers: vec![Step::Recv {
                    peer: real(vr + mask),
                    dst: tmp(bytes),
                }],
                local: vec![Step::Reduce {
                    dst: all,
                    src: tmp(bytes),
                }],
            });
        }
        mask <<= 1;
    }
    s
}

/// Byte ranges of rank-ordered blocks: `(offset, length)` per rank.
pub type Blocks = Vec<(usize, usize)>;

/// `n` equal blocks of `block` bytes.
pub fn equal_blocks(n: u32, block: usize) -> Blocks {
    (0..n as usize).map(|i| (i * block, block)).collect()
}

/// Blocks of `counts[i]` elements of `elem` bytes, packed in rank order (MPI's v-variants with
/// default displacements).
pub fn packed_blocks(counts: &[usize], elem: usize) -> Blocks {
    let mut off = 0;
    counts
        .iter()
        .map(|&c| {
            let b = (off, c * elem);
            off += c * elem;
            b
        })
        .collect()
}

fn xfer_pair(to: u32, src: Chunk, from: u32, dst: Chunk) -> Vec<Step> {
    let mut v = Vec::with_capacity(2);
    if src.len > 0 {
        v.push(Step::Send { peer: to, src });
    }
    if dst.len > 0 {
        v.push(Step::Recv { peer: from, dst });
    }
    v
}

/// Ring allgather into `Data` laid out as `blocks` (every rank knows every block; this rank's
/// already in place): n−1 steps, each forwarding the block received in the step before.
/// Empty blocks cost no message (both ends know they are empty).
pub fn ring_allgather_v(rank: u32, blocks: &Blocks) -> Schedule {
    let (r, n) = (rank as usize, blocks.len());
    let mut s = Schedule::default();
    if n < 2 {
        return s;
    }
    let right = ((r + 1) % n) as u32;
    let left = ((r + n - 1) % n) as u32;
    for k in 0..n - 1 {
        let (so, sl) = blocks[(r + n - k) % n];
        let (ro, rl) = blocks[(r + 2 * n - k - 1) % n];
        let xfers = xfer_pair(right, data(so, sl), left, data(ro, rl));
        if !xfers.is_empty() {
            s.phases.push(Phase {
                xfers,
                local: vec![],
            });
        }
    }
    s
}

/// Ring allgather of `block` bytes per rank.
pub fn ring_allgather(rank: u32, n: u32, block: usize) -> Schedule {
    ring_allgather_v(rank, &equal_blocks(n, block))
}

/// Ring reduce-scatter over `Data` laid out as `blocks` (commutative ops): after n−1 steps
/// this rank's block holds the reduction over all ranks.
pub fn ring_reduce_scatter_v(rank: u32, blocks: &Blocks) -> Schedule {
    let (r, n) = (rank as usize, blocks.len());
    let tmp_len = blocks.iter().map(|b| b.1).max().unwrap_or(0);
    let mut s = Schedule {
        phases: vec![],
        tmp_len,
    };
    if n < 2 || tmp_len == 0 {
        return Schedule::default();
    }
    let right = ((r + 1) % n) as u32;
    let left = ((r + n - 1) % n) as u32;
    for k in 0..n - 1 {
        let (so, sl) = blocks[(r + 2 * n - k - 1) % n];
        let (ro, rl) = blocks[(r + 2 * n - k - 2) % n];
        let xfers = xfer_pair(right, data(so, sl), left, tmp(rl));
        let local = if rl > 0 {
            vec![Step::Reduce {
                dst: data(ro, rl),
                src: tmp(rl),
            }]
        } else {
            vec![]
        };
        if !xfers.is_empty() {
            s.phases.push(Phase { xfers, local });
        }
    }
    s
}

/// Ring reduce-scatter of n blocks of `block` bytes.
pub fn ring_reduce_scatter(rank: u32, n: u32, block: usize) -> Schedule {
    ring_reduce_scatter_v(rank, &equal_blocks(n, block))
}

/// One phase between the root and every other rank: the root receives every other rank's
/// block into `Data` (`to_root`, gather) or sends each its block of `Input` (scatter); the other
/// ranks send their `Input` / receive into `Data`. Empty blocks cost no message.
fn linear_root_v(rank: u32, root: u32, blocks: &Blocks, to_root: bool) -> Schedule {
    let n = blocks.len() as u32;
    let mut s = Schedule::default();
    if n < 2 {
        return s;
    }
    let step = |peer: u32, root_side: bool, (off, len): (usize, usize)| match (to_root, root_side) {
        (true, true) => Step::Recv {
            peer,
            dst: data(off, len),
        },
        (true, false) => Step::Send {
            peer,
            src: input(0, len),
        },
        (false, true) => Step::Send {
            peer,
            src: input(off, len),
        },
        (false, false) => Step::Recv {
            peer,
            dst: data(0, len),
        },
    };
    let xfers: Vec<Step> = if rank == root {
        (0..n)
            .filter(|&p| p != root && blocks[p as usize].1 > 0)
            .map(|p| step(p, true, blocks[p as usize]))
            .collect()
    } else if blocks[rank as usize].1 > 0 {
        vec![step(root, false, blocks[rank as usize])]
    } else {
        vec![]
    };
    if !xfers.is_empty() {
        s.phases.push(Phase {
            xfers,
            local: vec![],
        });
    }
    s
}

/// Linear gather into the root's `Data` laid out as `blocks` (the root's own block already in
/// place); every other rank sends its `Input` (`blocks[rank].1` bytes).
pub fn linear_gather_v(rank: u32, root: u32, blocks: &Blocks) -> Schedule {
    linear_root_v(rank, root, blocks, true)
}

/// Linear gather of `block` bytes per rank.
pub fn linear_gather(rank: u32, n: u32, root: u32, block: usize) -> Schedule {
    linear_gather_v(rank, root, &equal_blocks(n, block))
}

/// Linear scatter of the root's `Input` laid out as `blocks` into every rank's `Data` (its
/// block; the root copies its own).
pub fn linear_scatter_v(rank: u32, root: u32, blocks: &Blocks) -> Schedule {
    linear_root_v(rank, root, blocks, false)
}

/// Linear scatter of n blocks of `block` bytes.
pub fn linear_scatter(rank: u32, n: u32, root: u32, block: usize) -> Schedule {
    linear_scatter_v(rank, root, &equal_blocks(n, block))
}

/// Pairwise all-to-all: in step k this rank sends `send[rank+k]` of `Input` and receives
/// `recv[rank−k]` of `Data` (its own block copied beforehand). The two tables are this rank's;
/// the peers' must agree (what i sends to j is what j expects from i).
pub fn pairwise_alltoall_v(rank: u32, send: &Blocks, recv: &Blocks) -> Schedule {
    let (r, n) = (rank as usize, send.len());
    let mut s = Schedule::default();
    if n < 2 {
        return s;
    }
    for k in 1..n {
        let to = (r + k) % n;
        let from = (r + n - k) % n;
        let xfers = xfer_pair(
            to as u32,
            input(send[to].0, send[to].1),
            from as u32,
            data(recv[from].0, recv[from].1),
        );
        if !xfers.is_empty() {
            s.phases.push(Phase {
                xfers,
                local: vec![],
            });
        }
    }
    s
}

/// Pairwise all-to-all of n blocks of `block` bytes.
pub fn pairwise_alltoall(rank: u32, n: u32, block: usize) -> Schedule {
    let b = equal_blocks(n, block);
    pairwise_alltoall_v(rank, &b, &b)
}

/// Inclusive scan along the rank chain: rank r receives the prefix of ranks 0..r, combines it
/// with its own `Data` and passes the result on. `exclusive`: rank r passes on the prefix
/// including itself but keeps the prefix of ranks 0..r−1 (rank 0's result is left unchanged).
pub fn chain_scan(rank: u32, n: u32, bytes: usize, exclusive: bool) -> Schedule {
    let (r, n) = (rank as usize, n as usize);
    let mut s = Schedule {
        phases: vec![],
        tmp_len: bytes,
    };
    if n < 2 || bytes == 0 {
        return Schedule::default();
    }
    let all = data(0, bytes);
    if r > 0 {
        s.phases.push(Phase {
            xfers: vec![Step::Recv {
                peer: (r - 1) as u32,
                dst: tmp(bytes),
            }],
            local: vec![Step::Reduce {
                dst: all,
                src: tmp(bytes),
            }],
        });
    }
    if r + 1 < n {
        s.phases.push(Phase {
            xfers: vec![Step::Send {
                peer: (r + 1) as u32,
                src: all,
            }],
            local: vec![],
        });
    }
    if exclusive && r > 0 {
        s.phases.push(Phase {
            xfers: vec![],
            local: vec![Step::Copy {
                dst: all,
                src: tmp(bytes),
            }],
        });
    }
    s
}

/// Binomial-tree broadcast from `root`: ⌈log₂ n⌉ rounds, each rank receiving once.
pub fn binomial_bcast(rank: u32, n: u32, root: u32, bytes: usize) -> Schedule {
    let (n, vr) = (n as usize, ((rank + n - root) % n) as usize);
    let mut s = Schedule::default();
    if n < 2 || bytes == 0 {
        return s;
    }
    let real = |v: usize| ((v + root as usize) % n) as u32;
    let all = data(0, bytes);
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            s.phases.push(Phase {
                xfers: vec![Step::Recv {
                    peer: real(vr - mask),
                    dst: all,
                }],
                local: vec![],
            });
            break;
        }
        mask <<= 1;
    }
    let mut sends = Vec::new();
    mask >>= 1;
    while mask > 0 {
        if vr + mask < n {
            sends.push(Step::Send {
                peer: real(vr + mask),
                src: all,
            });
        }
        mask >>= 1;
    }
    if !sends.is_empty() {
        s.phases.push(Phase {
            xfers: sends,
            local: vec![],
        });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs the schedules of all ranks in lock step, moving bytes by (src, dst) FIFO queues,
    /// with integer sum as the op, and returns every rank's final buffer.
    fn simulate(scheds: &[Schedule], inputs: Vec<Vec<u8>>, elem: usize) -> Vec<Vec<u8>> {
        let ins = inputs.clone();
        simulate_io(scheds, inputs, ins, elem)
    }

    fn simulate_io(
        scheds: &[Schedule],
        inputs: Vec<Vec<u8>>,
        ins: Vec<Vec<u8>>,
        elem: usize,
    ) -> Vec<Vec<u8>> {
        use std::collections::{HashMap, VecDeque};
        let n = scheds.len();
        let mut bufs = inputs;
        let mut tmps: Vec<Vec<u8>> = scheds.iter().map(|s| vec![0; s.tmp_len]).collect();
        let mut pc = vec![0usize; n];
        let mut posted = vec![false; n];
        let mut chan: HashMap<(usize, usize), VecDeque<Vec<u8>>> = HashMap::new();
        let mut progress = true;
        while progress {
            progress = false;
            for r in 0..n {
                let Some(ph) = scheds[r].phases.get(pc[r]) else {
                    continue;
                };
                let input_r = ins[r].clone();
                let get = |b: &Vec<u8>, t: &Vec<u8>, c: Chunk| match c.buf {
                    Buf::Data => b[c.off..c.off + c.len].to_vec(),
                    Buf::Tmp => t[c.off..c.off + c.len].to_vec(),
                    Buf::Input => input_r[c.off..c.off + c.len].to_vec(),
                };
                // Sends of a phase go out once (they do not wait); receives wait for data.
                if !posted[r] {
                    posted[r] = true;
                    progress = true;
                    for st in &ph.xfers {
                        if let Step::Send { peer, src } = st {
                            let v = get(&bufs[r], &tmps[r], *src);
                            chan.entry((r, *peer as usize)).or_default().push_back(v);
                        }
                    }
                }
                let recvs_ready = ph.xfers.iter().all(|st| match st {
                    Step::Recv { peer, .. } => chan
                        .get(&(*peer as usize, r))
                        .is_some_and(|q| !q.is_empty()),
                    _ => true,
                });
                if !recvs_ready {
                    continue;
                }
                for st in &ph.xfers {
                    if let Step::Recv { peer, dst } = st {
                        let v = chan
                            .get_mut(&(*peer as usize, r))
                            .unwrap()
                            .pop_front()
                            .unwrap();
                        assert_eq!(v.len(), dst.len);
                        match dst.buf {
                            Buf::Data => bufs[r][dst.off..dst.off + dst.len].copy_from_slice(&v),
                            Buf::Tmp => tmps[r][dst.off..dst.off + dst.len].copy_from_slice(&v),
                            Buf::Input => panic!("receive into the input buffer"),
                        }
                    }
                }
                for st in &ph.local {
                    if let Step::Copy { dst, src } = st {
                        let v = get(&bufs[r], &tmps[r], *src);
                        bufs[r][dst.off..dst.off + dst.len].copy_from_slice(&v);
                    }
                    if let Step::Reduce { dst, src } = st {
                        let s = get(&bufs[r], &tmps[r], *src);
                        assert_eq!(dst.buf, Buf::Data);
                        for (d, s) in bufs[r][dst.off..dst.off + dst.len]
                            .chunks_mut(elem)
                            .zip(s.chunks(elem))
                        {
                            let a = u32::from_le_bytes(d.try_into().unwrap())
                                .wrapping_add(u32::from_le_bytes(s.try_into().unwrap()));
                            d.copy_from_slice(&a.to_le_bytes());
                        }
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
        bufs
    }

    fn input(r: usize, count: usize) -> Vec<u8> {
        (0..count)
            .flat_map(|i| ((r * 1000 + i * 7) as u32).to_le_bytes())
            .collect()
    }

    proptest! {
        #[test]
        fn allreduce_schedules_compute_the_sum_on_every_rank(n in 1u32..12, count in 0usize..40, ring in any::<bool>()) {
            let scheds: Vec<Schedule> = (0..n).map(|r| if ring { ring_allreduce(r, n, count, 4) } else { recursive_doubling_allreduce(r, n, count, 4) }).collect();
            let out = simulate(&scheds, (0..n as usize).map(|r| input(r, count)).collect(), 4);
            let want: Vec<u8> = (0..count).flat_map(|i| (0..n as usize).map(|r| (r * 1000 + i * 7) as u32).fold(0u32, u32::wrapping_add).to_le_bytes()).collect();
            for b in out {
                prop_assert_eq!(&b, &want);
            }
        }

        #[test]
        fn reduce_allgather_reduce_scatter_gather_scatter_alltoall_scan_schedules_are_right(n in 1u32..10, blk in 0usize..6, root_sel in any::<u32>()) {
            let root = root_sel % n;
            let nn = n as usize;
            let val = |r: usize, i: usize| (r * 1000 + i * 7) as u32;
            let blockv = |r: usize, b: usize| -> Vec<u8> { (0..blk).flat_map(|i| val(r, b * blk + i).to_le_bytes()).collect() };
            let sum_at = |upto: usize, i: usize| (0..upto).map(|r| val(r, i)).fold(0u32, u32::wrapping_add);
            let words = |v: &[u8]| -> Vec<u32> { v.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect() };
            // reduce
            let sc: Vec<_> = (0..n).map(|r| binomial_reduce(r, n, root, blk * 4)).collect();
            let out = simulate(&sc, (0..nn).map(|r| blockv(r, 0)).collect(), 4);
            prop_assert_eq!(words(&out[root as usize]), (0..blk).map(|i| sum_at(nn, i)).collect::<Vec<_>>());
            // allgather: each rank's own block in place
            let sc: Vec<_> = (0..n).map(|r| ring_allgather(r, n, blk * 4)).collect();
            let ins: Vec<Vec<u8>> = (0..nn).map(|r| { let mut v = vec![0u8; nn * blk * 4]; v[r * blk * 4..(r + 1) * blk * 4].copy_from_slice(&blockv(r, r)); v }).collect();
            let want: Vec<u8> = (0..nn).flat_map(|b| blockv(b, b)).collect();
            for o in simulate(&sc, ins, 4) { prop_assert_eq!(&o, &want); }
            // reduce_scatter: block r ends as the sum of every rank's block r
            let sc: Vec<_> = (0..n).map(|r| ring_reduce_scatter(r, n, blk * 4)).collect();
            let ins: Vec<Vec<u8>> = (0..nn).map(|r| (0..nn).flat_map(|b| blockv(r, b)).collect()).collect();
            let out = simulate(&sc, ins, 4);
            for (r, o) in out.iter().enumerate() {
                let want: Vec<u32> = (0..blk).map(|i| sum_at(nn, r * blk + i)).collect();
                prop_assert_eq!(words(&o[r * blk * 4..(r + 1) * blk * 4]), want);
            }
            // gather: root's own block in place, others send their input
            let sc: Vec<_> = (0..n).map(|r| linear_gather(r, n, root, blk * 4)).collect();
            let datas: Vec<Vec<u8>> = (0..nn).map(|r| { let mut v = vec![0u8; nn * blk * 4]; if r == root as usize { v[r * blk * 4..(r + 1) * blk * 4].copy_from_slice(&blockv(r, r)); } v }).collect();
            let ins: Vec<Vec<u8>> = (0..nn).map(|r| blockv(r, r)).collect();
            let out = simulate_io(&sc, datas, ins, 4);
            prop_assert_eq!(&out[root as usize], &(0..nn).flat_map(|b| blockv(b, b)).collect::<Vec<u8>>());
            // scatter
            let sc: Vec<_> = (0..n).map(|r| linear_scatter(r, n, root, blk * 4)).collect();
            let ins: Vec<Vec<u8>> = (0..nn).map(|_| (0..nn).flat_map(|b| blockv(root as usize, b)).collect()).collect();
            let datas: Vec<Vec<u8>> = (0..nn).map(|r| if r == root as usize { blockv(root as usize, r) } else { vec![0u8; blk * 4] }).collect();
            let out = simulate_io(&sc, datas, ins, 4);
            for (r, o) in out.iter().enumerate() { prop_assert_eq!(o, &blockv(root as usize, r)); }
            // alltoall: rank r's block b goes to rank b's block r
            let sc: Vec<_> = (0..n).map(|r| pairwise_alltoall(r, n, blk * 4)).collect();
            let ins: Vec<Vec<u8>> = (0..nn).map(|r| (0..nn).flat_map(|b| blockv(r, b)).collect()).collect();
            let datas: Vec<Vec<u8>> = (0..nn).map(|r| { let mut v = vec![0u8; nn * blk * 4]; v[r * blk * 4..(r + 1) * blk * 4].copy_from_slice(&blockv(r, r)); v }).collect();
            let out = simulate_io(&sc, datas, ins, 4);
            for (r, o) in out.iter().enumerate() { prop_assert_eq!(o, &(0..nn).flat_map(|b| blockv(b, r)).collect::<Vec<u8>>()); }
            // scans
            for exclusive in [false, true] {
                let sc: Vec<_> = (0..n).map(|r| chain_scan(r, n, blk * 4, exclusive)).collect();
                let out = simulate(&sc, (0..nn).map(|r| blockv(r, 0)).collect(), 4);
                for (r, o) in out.iter().enumerate() {
                    let upto = if exclusive { r } else { r + 1 };
                    if exclusive && r == 0 { continue; }
                    prop_assert_eq!(words(o), (0..blk).map(|i| sum_at(upto, i)).collect::<Vec<_>>());
                }
            }
        }

        #[test]
        fn bcast_schedules_deliver_the_root_buffer(n in 1u32..20, root_sel in any::<u32>(), bytes in 0usize..64) {
            let root = root_sel % n;
            let scheds: Vec<Schedule> = (0..n).map(|r| binomial_bcast(r, n, root, bytes)).collect();
            let inputs: Vec<Vec<u8>> = (0..n as usize).map(|r| vec![r as u8; bytes]).collect();
            let out = simulate(&scheds, inputs, 4);
            for b in out {
                prop_assert_eq!(&b, &vec![root as u8; bytes]);
            }
        }
    }
}
