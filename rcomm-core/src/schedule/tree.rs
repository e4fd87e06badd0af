//! Rooted data movement: large broadcasts (scatter + allgather, pipelined chain) and binomial
//! scatter and gather.

use super::{Phase, Schedule, Step, data, input, ring_allgather_map, segments, tmp_at};

/// Communicator rank of virtual rank `v` (virtual rank 0 is `root`).
fn real(v: usize, root: u32, n: usize) -> u32 {
    ((v + root as usize) % n) as u32
}

/// The lowest set bit of virtual rank `v` (its subtree's span in a binomial tree), or for the
/// root the smallest power of two ≥ n.
fn span(v: usize, n: usize) -> usize {
    if v == 0 {
        n.next_power_of_two()
    } else {
        1 << v.trailing_zeros()
    }
}

/// Van de Geijn broadcast for large buffers: a binomial scatter cuts the root's buffer into n
/// segments (virtual rank v = rank − root mod n gets segment v, its subtree's contiguous
/// segments travel together), then a ring allgather of the segments. ⌈log₂ n⌉ + n − 1 phases;
/// every rank receives about 2(n−1)/n of the buffer instead of log₂ n whole buffers.
///
/// The root's `Data` holds `bytes` before; every rank's `Data` holds them after. No `Tmp`;
/// segments are byte-aligned and may be empty (`bytes < n`), costing no message. Not a
/// reduction.
pub fn scatter_allgather_bcast(rank: u32, n: u32, root: u32, bytes: usize) -> Schedule {
    let nn = n as usize;
    let mut s = Schedule::default();
    if nn < 2 || bytes == 0 {
        return s;
    }
    let vr = ((rank + n - root) % n) as usize;
    let seg = segments(n, bytes, 1);
    // Virtual ranks [a, b) own contiguous bytes.
    let range = |a: usize, b: usize| {
        let b = b.min(nn);
        data(seg[a].0, seg[b - 1].0 + seg[b - 1].1 - seg[a].0)
    };
    let m = span(vr, nn);
    if vr != 0 {
        let dst = range(vr, vr + m);
        if dst.len > 0 {
            s.phases.push(Phase {
                xfers: vec![Step::Recv {
                    peer: real(vr - m, root, nn),
                    dst,
                }],
                local: vec![],
            });
        }
    }
    let sends: Vec<Step> = std::iter::successors(Some(m / 2), |&c| Some(c / 2))
        .take_while(|&c| c > 0)
        .filter(|&c| vr + c < nn)
        .map(|c| (c, range(vr + c, vr + 2 * c)))
        .filter(|(_, src)| src.len > 0)
        .map(|(c, src)| Step::Send {
            peer: real(vr + c, root, nn),
            src,
        })
        .collect();
    if !sends.is_empty() {
        s.phases.push(Phase {
            xfers: sends,
            local: vec![],
        });
    }
    let ring = ring_allgather_map(vr, &seg, |v| real(v, root, nn));
    s.phases.extend(ring.phases);
    s
}

/// Pipelined chain broadcast: the buffer is cut into segments of `seg` bytes (the last may be
/// shorter; `seg` 0 means one segment) that flow down the chain root, root+1, …, root−1. In
/// its phase k an inner rank receives segment k from its predecessor while it forwards segment
/// k−1 to its successor, so all links carry data at once; the root sends segment k in phase
/// k, the last rank posts every receive in one phase. S + n − 2 segment times for S segments.
///
/// The root's `Data` holds `bytes` before; every rank's `Data` holds them after. No `Tmp`.
/// Not a reduction.
pub fn pipeline_bcast(rank: u32, n: u32, root: u32, bytes: usize, seg: usize) -> Schedule {
    let nn = n as usize;
    let mut s = Schedule::default();
    if nn < 2 || bytes == 0 {
        return s;
    }
    let seg = if seg == 0 { bytes } else { seg };
    let count = bytes.div_ceil(seg);
    let piece = |k: usize| data(k * seg, seg.min(bytes - k * seg));
    let vr = ((rank + n - root) % n) as usize;
    let (prev, next) = (real(vr + nn - 1, root, nn), real(vr + 1, root, nn));
    if vr + 1 == nn {
        s.phases.push(Phase {
            xfers: (0..count)
                .map(|k| Step::Recv {
                    peer: prev,
                    dst: piece(k),
                })
                .collect(),
            local: vec![],
        });
        return s;
    }
    for k in 0..count + usize::from(vr > 0) {
        let mut xfers = Vec::with_capacity(2);
        if vr == 0 {
            xfers.push(Step::Send {
                peer: next,
                src: piece(k),
            });
        } else {
            if k < count {
                xfers.push(Step::Recv {
                    peer: prev,
                    dst: piece(k),
                });
            }
            if k > 0 {
                xfers.push(Step::Send {
                    peer: next,
                    src: piece(k - 1),
                });
            }
        }
        s.phases.push(Phase {
            xfers,
            local: vec![],
        });
    }
    s
}

/// Children of virtual rank `v` in a binomial tree over n, as (distance c, subtree blocks)
/// with the child at v + c, farthest first.
fn children(v: usize, n: usize) -> Vec<(usize, usize)> {
    std::iter::successors(Some(span(v, n) / 2), |&c| Some(c / 2))
        .take_while(|&c| c > 0)
        .filter(|&c| v + c < n)
        .map(|c| (c, c.min(n - v - c)))
        .collect()
}

/// Blocks in the subtree of virtual rank `v`, itself included.
fn subtree(v: usize, n: usize) -> usize {
    if v == 0 { n } else { span(v, n).min(n - v) }
}

/// Binomial scatter from `root` of n blocks of `block` bytes: ⌈log₂ n⌉ rounds; each rank
/// receives its subtree's blocks once and forwards the children's parts.
///
/// The root's `Input` holds n blocks in rank order before (other ranks' `Input` is unused);
/// after, every rank's `Data` (one block) holds its block — the schedule does every copy,
/// the root's own block included. `Tmp`: for a root other than 0, n blocks (the root's `Input`
/// rotated into virtual order, so subtrees are contiguous); for an inner rank, its subtree's
/// blocks; leaves receive straight into `Data`. Not a reduction.
pub fn binomial_scatter(rank: u32, n: u32, root: u32, block: usize) -> Schedule {
    let nn = n as usize;
    let mut s = Schedule::default();
    if block == 0 || nn == 0 {
        return s;
    }
    let vr = ((rank + n - root) % n) as usize;
    let size = subtree(vr, nn);
    let r0 = root as usize;
    // Where virtual block v' (relative to this rank's subtree) of the subtree is.
    let (staged, mut local) = if vr == 0 && r0 == 0 {
        (None, vec![])
    } else if vr == 0 {
        s.tmp_len = nn * block;
        let rot = vec![
            Step::Copy {
                dst: tmp_at(0, (nn - r0) * block),
                src: input(r0 * block, (nn - r0) * block),
            },
            Step::Copy {
                dst: tmp_at((nn - r0) * block, r0 * block),
                src: input(0, r0 * block),
            },
        ];
        (Some(()), rot)
    } else if size > 1 {
        s.tmp_len = size * block;
        (Some(()), vec![])
    } else {
        (None, vec![])
    };
    let at = |i: usize, cnt: usize| {
        if staged.is_some() {
            tmp_at(i * block, cnt * block)
        } else if vr == 0 {
            input(i * block, cnt * block)
        } else {
            data(0, block)
        }
    };
    if vr == 0 {
        local.push(Step::Copy {
            dst: data(0, block),
            src: input(r0 * block, block),
        });
    } else {
        let parent = real(vr - span(vr, nn), root, nn);
        if size > 1 {
            local.push(Step::Copy {
                dst: data(0, block),
                src: at(0, 1),
            });
        }
        s.phases.push(Phase {
            xfers: vec![Step::Recv {
                peer: parent,
                dst: at(0, size),
            }],
            local: vec![],
        });
    }
    let sends: Vec<Step> = children(vr, nn)
        .into_iter()
        .map(|(c, cnt)| Step::Send {
            peer: real(vr + c, root, nn),
            src: at(c, cnt),
        })
        .collect();
    // A local step follows its phase's transfers: staged blocks must be in place before the
    // phase that sends them, while a root sending straight from `Input` copies its own block
    // after its sends.
    if staged.is_some() || sends.is_empty() {
        match s.phases.last_mut() {
            Some(p) => p.local.append(&mut local),
            None if !local.is_empty() => s.phases.push(Phase {
                xfers: vec![],
                local: std::mem::take(&mut local),
            }),
            None => {}
        }
    }
    if !sends.is_empty() {
        s.phases.push(Phase {
            xfers: sends,
            local,
        });
    }
    s
}

/// Binomial gather to `root` of one block of `block` bytes per rank: ⌈log₂ n⌉ rounds; each
/// rank receives its children's subtrees (concurrently), then sends its whole subtree up once.
///
/// Every rank's `Input` holds its block before (the root's too); after, the root's `Data`
/// holds the n blocks in rank order — the schedule does every copy, the root's own block
/// included. Other ranks' `Data` is unused. `Tmp`: an inner rank's subtree; for a root other
/// than 0, n blocks in virtual order, rotated into `Data` at the end; leaves send straight
/// from `Input`. Not a reduction.
pub fn binomial_gather(rank: u32, n: u32, root: u32, block: usize) -> Schedule {
    let nn = n as usize;
    let mut s = Schedule::default();
    if block == 0 || nn == 0 {
        return s;
    }
    let vr = ((rank + n - root) % n) as usize;
    let size = subtree(vr, nn);
    let r0 = root as usize;
    let direct = vr == 0 && r0 == 0;
    let at = |i: usize, cnt: usize| {
        if direct {
            data(i * block, cnt * block)
        } else {
            tmp_at(i * block, cnt * block)
        }
    };
    if size > 1 && !direct {
        s.tmp_len = size * block;
    }
    let own = input(0, block);
    let recvs: Vec<Step> = children(vr, nn)
        .into_iter()
        .map(|(c, cnt)| Step::Recv {
            peer: real(vr + c, root, nn),
            dst: at(c, cnt),
        })
        .collect();
    let mut local = Vec::new();
    if vr == 0 {
        local.push(Step::Copy {
            dst: data(r0 * block, block),
            src: own,
        });
        if !direct {
            if r0 + 1 < nn {
                local.push(Step::Copy {
                    dst: data((r0 + 1) * block, (nn - r0 - 1) * block),
                    src: at(1, nn - r0 - 1),
                });
            }
            local.push(Step::Copy {
                dst: data(0, r0 * block),
                src: at(nn - r0, r0),
            });
        }
    } else if size > 1 {
        local.push(Step::Copy {
            dst: at(0, 1),
            src: own,
        });
    }
    if !recvs.is_empty() || !local.is_empty() {
        s.phases.push(Phase {
            xfers: recvs,
            local,
        });
    }
    if vr != 0 {
        s.phases.push(Phase {
            xfers: vec![Step::Send {
                peer: real(vr - span(vr, nn), root, nn),
                src: if size > 1 { at(0, size) } else { own },
            }],
            local: vec![],
        });
    }
    s
}
