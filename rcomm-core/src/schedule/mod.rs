//! Collective algorithms as plain data: a [`Schedule`] is a list of phases; in each phase the
//! transfers (sends and receives of byte ranges) run concurrently, then the local steps
//! (reductions, copies) run in order. An executor on the CPU runs it today; the same data could
//! drive a GPU kernel or a proxy later, and schedules can be cached per (algorithm, ranks, size).
//!
//! Every algorithm is a pure function of (rank, ranks, sizes), so all ranks build matching
//! schedules without talking. Sizes are in bytes; where a buffer is cut into segments the cuts
//! fall on element boundaries (`elem` bytes). An empty chunk never costs a message: both ends
//! know it is empty.
//!
//! **Rank order.** An algorithm is *rank-ordered* when every result it computes is
//! `a(0) ⊕ a(1) ⊕ … ⊕ a(n−1)` for some parenthesisation (operands never swap), so it is valid
//! for associative but non-commutative ops; each function's documentation says whether it is.
//! [`Step::Reduce`] carries the operand [`Order`] to make that possible.
//!
//! | rank-ordered | commutative ops only | not a reduction |
//! |---|---|---|
//! | [`recursive_doubling_allreduce`], [`rabenseifner_allreduce`], [`direct_allreduce`]¹, [`direct_reduce_scatter_v`]¹, [`direct_reduce`]¹, [`binomial_reduce_ordered`], [`binomial_reduce`] with root 0, [`chain_scan`] | [`ring_allreduce`], [`ring_reduce_scatter_v`], [`binomial_reduce`] with root ≠ 0, [`hier_allreduce`], [`hier_reduce_scatter`] | allgathers, all-to-alls, broadcasts, scatters, gathers |
//!
//! ¹ Deterministic: the canonical right fold `a(0) ⊕ (a(1) ⊕ (… ⊕ a(n−1)))`, bit for bit.
//! Every allreduce leaves bitwise identical bytes on every rank.

mod bruck;
mod hier;
mod reduce;
#[cfg(test)]
mod tests;
mod tree;

pub use bruck::*;
pub use hier::*;
pub use reduce::*;
pub use tree::*;

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
    /// Send `src` (any buffer) to communicator rank `peer`. Messages between two ranks match
    /// in the order they are posted.
    Send {
        /// Destination rank.
        peer: u32,
        /// What to send.
        src: Chunk,
    },
    /// Receive exactly `dst.len` bytes from `peer` into `dst` (`Data` or `Tmp`). No chunk
    /// written in a phase overlaps another chunk of that phase.
    Recv {
        /// Source rank.
        peer: u32,
        /// Where to.
        dst: Chunk,
    },
    /// `dst = dst ⊕ src` ([`Order::DstFirst`]) or `dst = src ⊕ dst` ([`Order::SrcFirst`])
    /// with the collective's op. `src` may be in any buffer, `dst` in `Data` or `Tmp`; the two
    /// never overlap.
    Reduce {
        /// Accumulator (and one operand).
        dst: Chunk,
        /// The other operand.
        src: Chunk,
        /// Which operand is on the left.
        order: Order,
    },
    /// `dst = src`. `src` may be in any buffer, `dst` in `Data` or `Tmp`; they never overlap.
    Copy {
        /// Destination.
        dst: Chunk,
        /// Source.
        src: Chunk,
    },
}

/// Operand order of a [`Step::Reduce`]. Built-in ops are commutative (bitwise: the kernels
/// canonicalise NaNs and use symmetric min/max), so for them both orders give the same bytes;
/// user ops need not be. MPI's user-function convention `inout = in ⊕ inout` is `SrcFirst`
/// with `in` as `src`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// `dst = dst ⊕ src`: the accumulator holds the lower-ranked operand.
    DstFirst,
    /// `dst = src ⊕ dst`: the incoming operand is the lower-ranked one.
    SrcFirst,
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
    /// The operation it carries out (`allreduce`, …), for errors; set when it is cached
    /// (empty: "collective").
    pub op: &'static str,
}

impl Schedule {
    /// [`op`](Self::op), or "collective" when unset.
    pub fn op_name(&self) -> &'static str {
        if self.op.is_empty() {
            "collective"
        } else {
            self.op
        }
    }
}

/// `a` then `b` (scratch shared: phases run one after the other).
fn concat(mut a: Schedule, b: Schedule) -> Schedule {
    a.phases.extend(b.phases);
    a.tmp_len = a.tmp_len.max(b.tmp_len);
    a
}

fn data(off: usize, len: usize) -> Chunk {
    Chunk {
        buf: Buf::Data,
        off,
        len,
    }
}

fn tmp(len: usize) -> Chunk {
    tmp_at(0, len)
}

fn tmp_at(off: usize, len: usize) -> Chunk {
    Chunk {
        buf: Buf::Tmp,
        off,
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

fn input(off: usize, len: usize) -> Chunk {
    Chunk {
        buf: Buf::Input,
        off,
        len,
    }
}

/// Byte ranges of rank-ordered blocks: `(offset, length)` per rank.
pub type Blocks = Vec<(usize, usize)>;

/// `n` equal blocks of `block` bytes, back to back.
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

/// Byte ranges of `count` elements of `elem` bytes cut into `n` nearly equal segments (the
/// first `count % n` one element longer; some empty when `count < n`), as a block table.
pub fn segments(n: u32, count: usize, elem: usize) -> Blocks {
    (0..n as usize)
        .map(|i| segment(i, n as usize, count, elem))
        .collect()
}

/// Ring allgather into `Data` laid out as `blocks`: n−1 phases of one send and one receive,
/// each forwarding the block received in the phase before.
///
/// `Data` holds this rank's block (`blocks[rank]`) before and every block after; no `Tmp`.
/// Empty blocks cost no message (both ends know they are empty).
pub fn ring_allgather_v(rank: u32, blocks: &Blocks) -> Schedule {
    let n = blocks.len();
    ring_allgather_map(rank as usize, blocks, |v| (v % n.max(1)) as u32)
}

/// [`ring_allgather_v`] where `blocks` and `v` are in a virtual rank order and `real` maps a
/// virtual rank (taken mod n by the caller's map) to a communicator rank.
fn ring_allgather_map(v: usize, blocks: &Blocks, real: impl Fn(usize) -> u32) -> Schedule {
    let n = blocks.len();
    let mut s = Schedule::default();
    if n < 2 {
        return s;
    }
    let (right, left) = (real(v + 1), real(v + n - 1));
    for k in 0..n - 1 {
        let (so, sl) = blocks[(v + n - k) % n];
        let (ro, rl) = blocks[(v + 2 * n - k - 1) % n];
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

/// Direct allgather into `Data` laid out as `blocks`: one phase in which every rank sends its
/// block to every peer and receives each peer's block in place. `Data` holds this rank's block
/// before and every block after; no `Tmp`. n−1 messages each way, all concurrent.
pub fn direct_allgather_v(rank: u32, blocks: &Blocks) -> Schedule {
    let (r, n) = (rank as usize, blocks.len());
    let mut s = Schedule::default();
    if n < 2 {
        return s;
    }
    let (off, len) = blocks[r];
    let mut xfers = Vec::new();
    for j in (0..n).filter(|&j| j != r) {
        xfers.extend(xfer_pair(
            j as u32,
            data(off, len),
            j as u32,
            data(blocks[j].0, blocks[j].1),
        ));
    }
    if !xfers.is_empty() {
        s.phases.push(Phase {
            xfers,
            local: vec![],
        });
    }
    s
}

/// Ring allgather of `block` bytes per rank ([`ring_allgather_v`] with equal blocks): `Data`
/// (n blocks) holds this rank's block at `rank · block` before and every block after.
pub fn ring_allgather(rank: u32, n: u32, block: usize) -> Schedule {
    ring_allgather_v(rank, &equal_blocks(n, block))
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

/// Linear gather: one phase in which the root receives n−1 blocks concurrently.
///
/// Every non-root rank's `Input` holds its block (`blocks[rank].1` bytes); the root's `Data`,
/// laid out as `blocks`, holds the root's own block before (the caller copies it) and every
/// block after. Other ranks' `Data` is unused; no `Tmp`. Not a reduction.
pub fn linear_gather_v(rank: u32, root: u32, blocks: &Blocks) -> Schedule {
    linear_root_v(rank, root, blocks, true)
}

/// Linear gather of `block` bytes per rank (see [`linear_gather_v`]).
pub fn linear_gather(rank: u32, n: u32, root: u32, block: usize) -> Schedule {
    linear_gather_v(rank, root, &equal_blocks(n, block))
}

/// Linear scatter: one phase in which the root sends n−1 blocks concurrently.
///
/// The root's `Input`, laid out as `blocks`, holds every block; after, each non-root rank's
/// `Data` holds its block (`blocks[rank].1` bytes). The root's own block is not touched: the
/// caller copies it. No `Tmp`. Not a reduction.
pub fn linear_scatter_v(rank: u32, root: u32, blocks: &Blocks) -> Schedule {
    linear_root_v(rank, root, blocks, false)
}

/// Linear scatter of n blocks of `block` bytes (see [`linear_scatter_v`]).
pub fn linear_scatter(rank: u32, n: u32, root: u32, block: usize) -> Schedule {
    linear_scatter_v(rank, root, &equal_blocks(n, block))
}

/// Pairwise all-to-all: n−1 phases; in phase k this rank sends `send[rank+k]` of `Input` and
/// receives `recv[rank−k]` of `Data`. The two tables are this rank's; the peers' must agree
/// (what i sends to j is what j expects from i).
///
/// `Input` holds the outgoing blocks; after, `Data` holds the incoming ones. The caller copies
/// its own block (`send[rank]` to `recv[rank]`) beforehand; the schedule does not. No `Tmp`.
/// Not a reduction. For small equal blocks see [`bruck_alltoall`] (⌈log₂ n⌉ phases).
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

/// Pairwise all-to-all of n blocks of `block` bytes (see [`pairwise_alltoall_v`]).
pub fn pairwise_alltoall(rank: u32, n: u32, block: usize) -> Schedule {
    let b = equal_blocks(n, block);
    pairwise_alltoall_v(rank, &b, &b)
}

/// Binomial-tree broadcast from `root`: ⌈log₂ n⌉ rounds, each rank receiving the whole
/// buffer once and then sending it to its children concurrently (one phase).
///
/// The root's `Data` holds `bytes` before; every rank's `Data` holds them after. No `Tmp`. Not
/// a reduction. For large buffers see [`scatter_allgather_bcast`] and [`pipeline_bcast`].
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
