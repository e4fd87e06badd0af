//! `rcomm-bench coll OP`: the rank side of the nccl-tests-style collective benchmark (the
//! methodology is in [`crate::coll`]).
//!
//! What rcomm offers for each operation — which calls exist out of place and in place, and
//! which algorithms can be forced — is in [`variants`], [`forcible`] and [`call`]; an
//! operation new in rcomm is a few lines there plus its row in [`crate::coll::OPS`].
//!
//! `--device` runs the same sweep on device memory ([`Plan::device`]): the send and receive
//! buffers are `DeviceBuffer`s and the calls are rcomm's `*_device` collectives
//! ([`device_variants`], [`call_device`]). Both memories go through one loop ([`measure`])
//! over the [`Buffers`] trait: the check data is written into host buffers (device mode: host
//! mirrors, copied to the device before the checked call and back after it), so the expected
//! values and the comparison are the host mode's.

use crate::coll::{
    self, Average, BenchElem, CheckCtx, CollOp, Counts, Layout, Measure, RowHead, TIMING_SEED,
};
use crate::device;
use crate::osu::AlignedBuf;
use crate::plot::{self, Series};
use rcomm::gpu::{DevMut, DevRef, DeviceBuffer, Stream};
use rcomm::{Communicator, Dtype, Op, Tag};

/// An algorithm name as `RCOMM_ALGO` spells it (`auto`: rcomm's choice).
type Algo = &'static str;
use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn Error>>;

/// Bookkeeping messages (times, wrong counts) between ranks: point-to-point, so they never
/// depend on the collective under test.
const TAG_BOOK: Tag = Tag(201);

/// The `RCOMM_ALGO` key of `op`: `allreduce`, or `allreduce_device` on device buffers.
pub fn algo_key(op: CollOp, device: bool) -> String {
    if device {
        format!("{}_device", op.name())
    } else {
        op.name().to_string()
    }
}

/// Algorithms rcomm has for `op` (the names of `RCOMM_ALGO`, the device collectives' own with
/// `device`), besides `auto`, which every operation has; each is forced per run with
/// [`Communicator::with_algo`].
pub fn forcible(op: CollOp, device: bool) -> &'static [&'static str] {
    match op {
        CollOp::Barrier => &["dissemination"],
        _ => {
            let all = rcomm::algorithms(&algo_key(op, device));
            all.strip_prefix(&["auto"]).unwrap_or(all)
        }
    }
}

/// Which calls rcomm has for `op`: (out-of-place, in-place); `None`: rcomm lacks the operation.
pub fn variants(op: CollOp) -> Option<(bool, bool)> {
    match op {
        // allreduce(send, recv) and allreduce_in_place / allreduce_with.
        CollOp::Allreduce => Some((true, true)),
        // bcast(buf, root): one buffer, in place by nature (as MPI_Bcast).
        CollOp::Bcast => Some((false, true)),
        // Out of place only (no in-place form in rcomm's API yet).
        CollOp::Reduce
        | CollOp::Allgather
        | CollOp::ReduceScatter
        | CollOp::Alltoall
        | CollOp::Gather
        | CollOp::Scatter
        | CollOp::Scan => Some((true, false)),
        // Printed in the out-of-place columns (time only).
        CollOp::Barrier => Some((true, false)),
    }
}

/// Which `*_device` calls rcomm has for `op` (out-of-place, in-place), or why `--device`
/// cannot run it: `allreduce_device` both (`allreduce_device_into` out of place),
/// `bcast_device` in place, `reduce_device`,
/// `allgather_device`, `reduce_scatter_device` and `alltoall_device` out of place.
pub fn device_variants(op: CollOp) -> Result<(bool, bool), String> {
    match op {
        CollOp::Allreduce => Ok((true, true)),
        CollOp::Bcast => Ok((false, true)),
        CollOp::Reduce | CollOp::Allgather | CollOp::ReduceScatter | CollOp::Alltoall => {
            Ok((true, false))
        }
        CollOp::Barrier => Err("--device: barrier has no buffers; run it without --device".into()),
        CollOp::Gather | CollOp::Scatter | CollOp::Scan => Err(format!(
            "--device: rcomm has no device form of {op} yet (device collectives: allreduce, bcast, \
             reduce, allgather, reduce_scatter, alltoall); run it without --device"
        )),
    }
}

/// Resolves `-A`: `auto`, a name of [`forcible`], `all` (every algorithm rcomm has for the
/// operation, in turn), or a comma-separated list.
pub fn parse_algos(op: CollOp, s: &str, device: bool) -> Result<Vec<(&'static str, Algo)>, String> {
    let valid = || {
        let mut v = vec!["auto"];
        v.extend_from_slice(forcible(op, device));
        v.push("all");
        v.join(", ")
    };
    let mut out: Vec<(&'static str, Algo)> = Vec::new();
    for part in s.split(',').map(|p| p.trim().to_ascii_lowercase()) {
        let part = match part.as_str() {
            "recursive_doubling" | "recursive-doubling" | "recursivedoubling" => "rd".to_string(),
            _ => part,
        };
        let names: Vec<&'static str> = if part == "all" {
            forcible(op, device).to_vec()
        } else if part == "auto" {
            vec!["auto"]
        } else {
            match forcible(op, device).iter().find(|n| **n == part) {
                Some(n) => vec![*n],
                None => {
                    return Err(format!(
                        "-A {part}: {op} has no such algorithm in rcomm; valid: {}",
                        valid()
                    ));
                }
            }
        };
        for n in names {
            if !out.iter().any(|(m, _)| *m == n) {
                out.push((n, n));
            }
        }
    }
    if out.is_empty() {
        return Err(format!("-A: no algorithm given; valid: {}", valid()));
    }
    Ok(out)
}

/// What to run, checked before `init` (except what needs the rank count).
#[derive(Debug, Clone)]
pub struct Plan {
    /// The operation.
    pub op: CollOp,
    /// Element type.
    pub dtype: Dtype,
    /// Reduction.
    pub redop: Op,
    /// Root of rooted operations.
    pub root: u32,
    /// Sizes in bytes (barrier: one row, size 0).
    pub sizes: Vec<usize>,
    /// `-b`, `-e`, `-f`, `-i` as given (for the header).
    pub sweep: (usize, usize, usize, usize),
    /// Timed calls per size and variant.
    pub iters: usize,
    /// Warm-up calls per size and variant.
    pub warmup: usize,
    /// Check passes per size and variant (0: no check).
    pub check: u32,
    /// How per-rank times are combined.
    pub average: Average,
    /// Algorithms, run one after the other.
    pub algos: Vec<(&'static str, Algo)>,
    /// One JSON object per size on stdout instead of the table (headers to stderr).
    pub json: bool,
    /// Write an SVG plot of busbw against size here.
    pub plot: Option<PathBuf>,
    /// Corrupt one output element on the last rank in every check pass (tests the check and
    /// the exit status).
    pub inject_wrong: bool,
    /// `--device`: buffers in device memory (device `RCOMM_LOCAL_RANK` mod the device count),
    /// the `*_device` collectives.
    pub device: bool,
    /// `--stream` (with `--device`, allreduce only): `allreduce_device_on` a stream this rank
    /// creates, synchronized after the timed loop.
    pub stream: bool,
}

/// Checks what can be checked without ranks.
pub fn validate(p: &Plan) -> Result<(), String> {
    let info = p.op.info();
    if variants(p.op).is_none() {
        return Err(format!("rcomm has no {} yet", p.op));
    }
    if p.device {
        device_variants(p.op)?;
    }
    if p.stream && !(p.device && p.op == CollOp::Allreduce) {
        return Err(
            "--stream: only allreduce has a stream-ordered device form (allreduce_device_on); \
             it needs --device"
                .into(),
        );
    }
    if info.reduces {
        p.redop
            .check(p.dtype)
            .map_err(|e| format!("-o {} -d {}: {e}", p.redop, coll::dtype_name(p.dtype)))?;
        if p.op == CollOp::Scan && p.redop == Op::Avg {
            return Err("-o avg: scan with avg is not defined (MPI has no such op either)".into());
        }
    }
    if p.plot.is_some() && info.bus.factor(2).is_none() {
        return Err(format!(
            "--plot: {} reports a time only, there is no bandwidth to plot",
            p.op
        ));
    }
    let (min, max, _, _) = p.sweep;
    if min > max {
        return Err(format!("-b {min} is above -e {max}"));
    }
    if max > coll::MAX_BYTES {
        return Err(format!(
            "-e {max}: sizes above 1 GiB ({} bytes) are not supported",
            coll::MAX_BYTES
        ));
    }
    Ok(())
}

/// A failure that rank 0 reports for every rank (the others exit without repeating it).
#[derive(Debug)]
pub struct Quiet;

impl std::fmt::Display for Quiet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failed (reported by rank 0)")
    }
}

impl Error for Quiet {}

/// Wrong results were found (the table says where); the exit status must be non-zero.
#[derive(Debug)]
pub struct WrongResults(pub u64);

impl std::fmt::Display for WrongResults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} wrong elements (see #wrong and the messages above)",
            self.0
        )
    }
}

impl Error for WrongResults {}

/// Every rank's `mine`, in rank order, on every rank (point-to-point through rank 0).
pub(crate) fn exchange(comm: &Communicator, mine: [f64; 2]) -> Res<Vec<[f64; 2]>> {
    let (n, rank) = (comm.size() as usize, comm.rank());
    let mut all = vec![0.0f64; 2 * n];
    if rank == 0 {
        all[..2].copy_from_slice(&mine);
        for r in 1..n {
            comm.recv(&mut all[2 * r..2 * r + 2], r as u32, TAG_BOOK)?;
        }
        for r in 1..n {
            comm.send(&all, r as u32, TAG_BOOK)?;
        }
    } else {
        comm.send(&mine, 0, TAG_BOOK)?;
        comm.recv(&mut all, 0, TAG_BOOK)?;
    }
    Ok(all.chunks(2).map(|c| [c[0], c[1]]).collect())
}

/// The call under test. `send` and `recv` are this iteration's windows; in place, only `recv`.
#[allow(clippy::too_many_arguments)]
fn call<T: BenchElem>(
    comm: &Communicator,
    op: CollOp,
    redop: Op,
    root: u32,
    send: &[T],
    recv: &mut [T],
    inplace: bool,
) -> rcomm::Result<()> {
    let is_root = comm.rank() == root;
    match (op, inplace) {
        (CollOp::Allreduce, false) => comm.allreduce(send, recv, redop),
        (CollOp::Allreduce, true) => comm.allreduce_in_place(recv, redop),
        (CollOp::Bcast, _) => comm.bcast(recv, root),
        (CollOp::Reduce, _) => comm.reduce(send, is_root.then_some(recv), redop, root),
        (CollOp::Allgather, _) => comm.allgather(send, recv),
        (CollOp::ReduceScatter, _) => comm.reduce_scatter(send, recv, redop),
        (CollOp::Alltoall, _) => comm.alltoall(send, recv),
        (CollOp::Gather, _) => comm.gather(send, is_root.then_some(recv), root),
        (CollOp::Scatter, _) => comm.scatter(is_root.then_some(send), recv, root),
        (CollOp::Scan, _) => comm.scan(send, recv, redop),
        (CollOp::Barrier, _) => comm.barrier(),
    }
}

/// Where the input and the output of an in-place call lie in the receive buffer, in elements:
/// (input offset, input length, output offset, output length).
fn inplace_regions(op: CollOp, c: &Counts) -> (usize, usize, usize, usize) {
    match op.info().layout {
        Layout::Same => (0, c.send, 0, c.recv),
        // MPI_IN_PLACE conventions, for when rcomm grows in-place forms of these.
        Layout::Gather | Layout::Scatter | Layout::AllToAll | Layout::Empty => {
            (0, c.send, 0, c.recv)
        }
    }
}

/// Whether this rank's input matters (the root's only, for bcast and scatter).
fn has_input(op: CollOp, rank: u32, root: u32) -> bool {
    !matches!(op, CollOp::Bcast | CollOp::Scatter) || rank == root
}

struct Ctx<'a> {
    comm: &'a Communicator,
    plan: &'a Plan,
    n: u32,
    rank: u32,
    /// Check passes so far (all ranks count alike), part of the check data's seed.
    rep: u64,
}

/// This iteration's windows of the buffers, in elements: the send window at `at` of `send`
/// elements, the receive window at `at` of `recv` elements (in place: the only one).
#[derive(Clone, Copy, Debug)]
struct Window {
    at: usize,
    send: usize,
    recv: usize,
    inplace: bool,
}

/// The send and receive buffers of a sweep, in host or device memory: what [`measure`] needs
/// of them. The check data goes through [`host`](Buffers::host) views (the buffers
/// themselves, or host mirrors of device buffers).
trait Buffers<T> {
    /// Capacity of each buffer in elements.
    fn cap(&self) -> usize;
    /// Host views of the send and receive buffers, to write inputs into and read results from.
    fn host(&mut self) -> (&mut [T], &mut [T]);
    /// Makes the buffers hold what [`host`](Buffers::host) holds (device: copies it in).
    fn push(&mut self) -> Res<()>;
    /// Makes [`host`](Buffers::host)'s receive buffer hold the result (device: copies it out),
    /// after the calls before it are done.
    fn pull(&mut self) -> Res<()>;
    /// The call under test on window `w`.
    fn call(&mut self, comm: &Communicator, p: &Plan, w: Window) -> rcomm::Result<()>;
    /// Waits until the calls made so far are done (device `--stream`: the stream's work).
    fn sync(&self) -> Res<()> {
        Ok(())
    }
}

/// Host buffers (page-aligned), called with the host collectives.
struct HostBufs<T> {
    send: AlignedBuf,
    recv: AlignedBuf,
    cap: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: BenchElem> HostBufs<T> {
    fn new(cap: usize) -> Self {
        let bytes = cap * size_of::<T>();
        HostBufs {
            send: AlignedBuf::new(bytes),
            recv: AlignedBuf::new(bytes),
            cap,
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: BenchElem> Buffers<T> for HostBufs<T> {
    fn cap(&self) -> usize {
        self.cap
    }

    fn host(&mut self) -> (&mut [T], &mut [T]) {
        let bytes = self.cap * size_of::<T>();
        (
            bytemuck::cast_slice_mut(self.send.get_mut(bytes)),
            bytemuck::cast_slice_mut(self.recv.get_mut(bytes)),
        )
    }

    fn push(&mut self) -> Res<()> {
        Ok(())
    }

    fn pull(&mut self) -> Res<()> {
        Ok(())
    }

    fn call(&mut self, comm: &Communicator, p: &Plan, w: Window) -> rcomm::Result<()> {
        let (send, recv) = self.host();
        let s = &send[w.at..w.at + w.send];
        let r = &mut recv[w.at..w.at + w.recv];
        call(comm, p.op, p.redop, p.root, s, r, w.inplace)
    }
}

/// Device buffers (`DeviceBuffer`s on this rank's device) with host mirrors for the check
/// data, called with the `*_device` collectives.
struct DevBufs<T> {
    send: DeviceBuffer,
    recv: DeviceBuffer,
    mirror: (Vec<T>, Vec<T>),
    /// `--stream`: the stream the allreduce is ordered on.
    stream: Option<Stream>,
}

impl<T: BenchElem> DevBufs<T> {
    /// `cap` elements each on `dev` (at least one byte: an empty window still needs an
    /// address), and a stream there when `stream`.
    fn new(dev: u32, cap: usize, stream: bool) -> rcomm::Result<Self> {
        let bytes = (cap * size_of::<T>()).max(1);
        Ok(DevBufs {
            send: DeviceBuffer::new(dev, bytes)?,
            recv: DeviceBuffer::new(dev, bytes)?,
            mirror: (vec![T::zeroed(); cap], vec![T::zeroed(); cap]),
            stream: if stream {
                Some(rcomm::gpu::stream_create(dev)?)
            } else {
                None
            },
        })
    }
}

impl<T> Drop for DevBufs<T> {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            let _ = rcomm::gpu::stream_destroy(s);
        }
    }
}

impl<T: BenchElem> Buffers<T> for DevBufs<T> {
    fn cap(&self) -> usize {
        self.mirror.0.len()
    }

    fn host(&mut self) -> (&mut [T], &mut [T]) {
        (&mut self.mirror.0, &mut self.mirror.1)
    }

    fn push(&mut self) -> Res<()> {
        self.send
            .copy_from_host(bytemuck::cast_slice(&self.mirror.0))?;
        self.recv
            .copy_from_host(bytemuck::cast_slice(&self.mirror.1))?;
        Ok(())
    }

    fn pull(&mut self) -> Res<()> {
        self.sync()?;
        self.recv
            .copy_to_host(bytemuck::cast_slice_mut(&mut self.mirror.1))?;
        Ok(())
    }

    fn call(&mut self, comm: &Communicator, p: &Plan, w: Window) -> rcomm::Result<()> {
        let elem = size_of::<T>();
        assert!(w.at + w.send.max(w.recv) <= self.cap(), "window {w:?}");
        let at = (w.at * elem) as u64;
        // SAFETY: both windows lie in their allocations (asserted above), which `self` keeps
        // alive for the call; the receive window is borrowed through `&mut self`.
        let (send, recv) = unsafe {
            (
                DevRef::from_raw(self.send.addr() + at, w.send * elem),
                DevMut::from_raw(self.recv.addr() + at, w.recv * elem),
            )
        };
        call_device::<T>(comm, p, send, recv, self.stream, w.inplace)
    }

    fn sync(&self) -> Res<()> {
        if let Some(s) = self.stream {
            rcomm::gpu::stream_synchronize(s)?;
        }
        Ok(())
    }
}

/// The `*_device` call under test ([`device_variants`] says which exist). `send` and `recv`
/// are this iteration's windows; in place, only `recv`.
pub fn call_device<T: BenchElem>(
    comm: &Communicator,
    p: &Plan,
    send: DevRef<'_>,
    mut recv: DevMut<'_>,
    stream: Option<Stream>,
    inplace: bool,
) -> rcomm::Result<()> {
    let (redop, root) = (p.redop, p.root);
    match (p.op, stream) {
        (CollOp::Allreduce, Some(s)) if inplace => {
            comm.allreduce_device_on::<T>(&mut recv, redop, s)
        }
        (CollOp::Allreduce, Some(s)) => comm
            .on_stream(s)
            .allreduce_device_into::<T>(&send, &mut recv, redop),
        (CollOp::Allreduce, None) if inplace => comm.allreduce_device::<T>(&mut recv, redop),
        (CollOp::Allreduce, None) => comm.allreduce_device_into::<T>(&send, &mut recv, redop),
        (CollOp::Bcast, _) => comm.bcast_device(&mut recv, root),
        (CollOp::Reduce, _) => comm.reduce_device::<T>(&send, &mut recv, redop, root),
        (CollOp::Allgather, _) => comm.allgather_device(&send, &mut recv),
        (CollOp::ReduceScatter, _) => comm.reduce_scatter_device::<T>(&send, &mut recv, redop),
        (CollOp::Alltoall, _) => comm.alltoall_device(&send, &mut recv),
        (op, _) => Err(rcomm::CommError::InvalidArg(
            device_variants(op).err().unwrap_or_default(),
        )),
    }
}

/// Times one variant of one size and checks it; returns the combined seconds per call and the
/// wrong elements over all ranks (`None`: not checked).
fn measure<T: BenchElem>(
    cx: &mut Ctx<'_>,
    bufs: &mut dyn Buffers<T>,
    algo: (&'static str, Algo),
    size: usize,
    counts: Counts,
    inplace: bool,
) -> Res<(f64, Option<u64>)> {
    let p = cx.plan;
    let op = p.op;
    let forced;
    let comm = if algo.1 == "auto" || op == CollOp::Barrier {
        cx.comm
    } else {
        forced = cx.comm.with_algo(&algo_key(op, p.device), algo.1)?;
        &forced
    };
    let total = counts.total();
    // Successive calls use successive windows of the buffers (nccl-tests' startColl shift).
    let steps = bufs.cap().checked_div(total).unwrap_or(1).max(1);
    let window = |i: usize| Window {
        at: total * (i % steps),
        send: counts.send,
        recv: if inplace { total } else { counts.recv },
        inplace,
    };
    for i in 0..p.warmup {
        bufs.call(comm, p, window(i))?;
    }
    comm.barrier()?;
    let t0 = Instant::now();
    for i in 0..p.iters {
        bufs.call(comm, p, window(i))?;
    }
    bufs.sync()?;
    let secs = t0.elapsed().as_secs_f64() / p.iters as f64;

    // Check pass, outside the timed loop.
    let mut wrong = (p.check > 0 && op != CollOp::Barrier).then_some(0u64);
    let mut first = None;
    for _ in 0..if wrong.is_some() { p.check } else { 0 } {
        cx.rep += 1;
        let ctx = CheckCtx {
            op,
            redop: p.redop,
            n: cx.n,
            rank: cx.rank,
            root: p.root,
            counts,
            seed: coll::check_seed(cx.rep, u64::from(inplace)),
        };
        let mine = has_input(op, cx.rank, p.root);
        let (send, recv) = bufs.host();
        let (out_off, out_len) = if inplace {
            let (in_off, in_len, out_off, out_len) = inplace_regions(op, &counts);
            coll::fill_poison(&ctx, &mut recv[..total]);
            if mine {
                coll::fill_input(&ctx, cx.rank, &mut recv[in_off..in_off + in_len]);
            }
            (out_off, out_len)
        } else {
            coll::fill_input(&ctx, cx.rank, &mut send[..counts.send]);
            coll::fill_poison(&ctx, &mut recv[..counts.recv]);
            (0, counts.recv)
        };
        bufs.push()?;
        bufs.call(comm, p, window(0))?;
        bufs.pull()?;
        let recv = bufs.host().1;
        if p.inject_wrong && cx.rank == cx.n - 1 && out_len > 0 {
            recv[out_off] = coll::corrupt(recv[out_off]);
        }
        let (w, f) = coll::count_wrong(&ctx, &recv[out_off..out_off + out_len]);
        first = first.or(f);
        let all = exchange(comm, [w as f64, 0.0])?;
        let sum: u64 = all.iter().map(|v| v[0] as u64).sum();
        wrong = wrong.map(|x| x + sum);
        if let Some((j, got, want)) = first.filter(|_| w > 0) {
            eprintln!(
                "rcomm-bench: rank {}: {op} {} {} size {size} {} (algo {}): {w} wrong elements; first at index {j}: got \
                 {got:?}, expected {want:?}",
                cx.rank,
                coll::dtype_name(p.dtype),
                p.redop,
                if inplace { "in-place" } else { "out-of-place" },
                algo.0
            );
        }
        if sum > 0 {
            break;
        }
    }
    // Restore valid timing data where the check pass left poison (later sizes reuse the buffers).
    if wrong.is_some() {
        fill_timing::<T>(cx, bufs)?;
    }
    let times = exchange(comm, [secs, 0.0])?;
    let per_rank: Vec<f64> = times.iter().map(|v| v[0]).collect();
    Ok((p.average.combine(&per_rank), wrong))
}

/// Fills both whole buffers with valid inputs of this rank (what the timed loops run on).
fn fill_timing<T: BenchElem>(cx: &Ctx<'_>, bufs: &mut dyn Buffers<T>) -> Res<()> {
    let cap = bufs.cap();
    let ctx = CheckCtx {
        op: cx.plan.op,
        redop: cx.plan.redop,
        n: cx.n,
        rank: cx.rank,
        root: cx.plan.root,
        counts: Counts {
            send: cap,
            recv: cap,
            param: cap,
        },
        seed: TIMING_SEED,
    };
    let (s, r) = bufs.host();
    coll::fill_input(&ctx, cx.rank, s);
    coll::fill_input(&ctx, cx.rank, r);
    bufs.push()
}

fn say(json: bool, line: &str) {
    if json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// Runs the plan on this rank. Rank 0 prints; every rank returns an error when any rank saw
/// wrong results ([`WrongResults`]).
pub fn run(plan: &Plan) -> Res<()> {
    let world = rcomm::init()?;
    let (n, rank) = (world.size(), world.rank());
    let info = plan.op.info();
    if info.rooted && plan.root >= n {
        if rank != 0 {
            return Err(Quiet.into());
        }
        return Err(format!("-r {}: this job has {n} ranks (0…{})", plan.root, n - 1).into());
    }
    // --device: this rank's device, or rcomm's reason why there is none.
    let dev = if plan.device {
        Some(device::pick_device().map_err(|e| format!("--device on rank {rank}: {e}"))?)
    } else {
        None
    };
    if rank == 0 {
        let (b, e, f, i) = plan.sweep;
        let step = if f > 1 {
            format!("{f}(factor)")
        } else {
            format!("{i}(bytes)")
        };
        let algos: Vec<&str> = plan.algos.iter().map(|a| a.0).collect();
        let mut lines = vec![
            format!(
                "# rcomm-bench coll {}: nccl-tests layout ({}) | rcomm {}",
                plan.op,
                if info.perf.is_empty() {
                    "no nccl-tests program has this operation"
                } else {
                    info.perf
                },
                env!("CARGO_PKG_VERSION")
            ),
            format!(
                "# nRanks {n} minBytes {b} maxBytes {e} step: {step} warmup iters: {} iters: {} validation: {} average: {} ({}) algo: {}",
                plan.warmup,
                plan.iters,
                plan.check,
                plan.average.flag(),
                plan.average.name(),
                algos.join(",")
            ),
            format!("# memory: {}", memory_line(dev, plan.stream)),
            "#".into(),
            "# Using ranks".into(),
        ];
        if let Ok(v) = std::env::var("RCOMM_ALGO") {
            // It changes what `auto` runs.
            lines.insert(3, format!("# RCOMM_ALGO={v}"));
        }
        for r in 0..n {
            let pi = world.peer(r)?;
            lines.push(format!(
                "#  Rank {r:>2} Pid {:>7} on {:>10} transport {}",
                pi.pid,
                pi.hostname,
                world.transport_to(r)?
            ));
        }
        for l in &lines {
            say(plan.json, l);
        }
    }
    match plan.dtype {
        Dtype::I8 => run_typed::<i8>(&world, plan, dev),
        Dtype::I16 => run_typed::<i16>(&world, plan, dev),
        Dtype::I32 => run_typed::<i32>(&world, plan, dev),
        Dtype::I64 => run_typed::<i64>(&world, plan, dev),
        Dtype::U8 => run_typed::<u8>(&world, plan, dev),
        Dtype::U16 => run_typed::<u16>(&world, plan, dev),
        Dtype::U32 => run_typed::<u32>(&world, plan, dev),
        Dtype::U64 => run_typed::<u64>(&world, plan, dev),
        Dtype::F16 => run_typed::<half::f16>(&world, plan, dev),
        Dtype::Bf16 => run_typed::<half::bf16>(&world, plan, dev),
        Dtype::F32 => run_typed::<f32>(&world, plan, dev),
        Dtype::F64 => run_typed::<f64>(&world, plan, dev),
    }
}

/// The header's memory: `host`, or `device D (backend)` and the calls used.
fn memory_line(dev: Option<u32>, stream: bool) -> String {
    match dev {
        None => "host".into(),
        Some(d) => format!(
            "device {d} ({}), *_device collectives{}",
            rcomm::gpu::backend_name().unwrap_or("?"),
            if stream {
                ", allreduce_device_on a created stream"
            } else {
                ""
            }
        ),
    }
}

/// The sweep of every algorithm and size, on host buffers or (`dev`) on device `dev`.
fn run_typed<T: BenchElem>(comm: &Communicator, plan: &Plan, dev: Option<u32>) -> Res<()> {
    let (n, rank) = (comm.size(), comm.rank());
    let info = plan.op.info();
    let elem = size_of::<T>();
    let (oop_ok, ip_ok) = match dev {
        Some(_) => device_variants(plan.op)?,
        None => variants(plan.op).expect("validated"),
    };
    let sizes: Vec<usize> = if plan.op == CollOp::Barrier {
        vec![0]
    } else {
        plan.sizes.clone()
    };
    let counts_of = |s: usize| info.layout.counts(s / elem, n as usize);
    let cap = sizes
        .iter()
        .map(|&s| counts_of(s).total())
        .max()
        .unwrap_or(0);
    let mut bufs: Box<dyn Buffers<T>> = match dev {
        Some(d) => Box::new(DevBufs::<T>::new(d, cap, plan.stream)?),
        None => Box::new(HostBufs::<T>::new(cap)),
    };
    let bufs = &mut *bufs;
    let mut cx = Ctx {
        comm,
        plan,
        n,
        rank,
        rep: 0,
    };
    fill_timing(&cx, bufs)?;
    let factor = info.bus.factor(n as usize);
    let mut out = std::io::stdout().lock();
    let (mut bw_sum, mut bw_count, mut failed, mut wrong_total) = (0.0f64, 0usize, 0usize, 0u64);
    let mut per_algo: Vec<(&str, f64, usize)> = Vec::new();
    let mut series = Vec::new();
    for &algo in &plan.algos {
        if algo.0 == "shm" && !comm.on_one_node() {
            if rank == 0 {
                say(
                    plan.json,
                    "# algo: shm skipped: the ranks are on more than one node",
                );
            }
            continue;
        }
        if rank == 0 {
            if plan.algos.len() > 1 || algo.0 != "auto" {
                say(plan.json, &format!("# algo: {}", algo.0));
            }
            if !plan.json {
                for l in coll::table_header() {
                    writeln!(out, "{l}")?;
                }
            }
        }
        let (mut a_sum, mut a_count) = (0.0f64, 0usize);
        let mut points = Vec::new();
        for &size in &sizes {
            let counts = counts_of(size);
            let head = RowHead {
                size: counts.total() * elem,
                count: counts.param,
                dtype: if plan.op == CollOp::Barrier {
                    "none"
                } else {
                    coll::dtype_name(plan.dtype)
                },
                redop: if info.reduces {
                    plan.redop.name()
                } else {
                    "none"
                },
                root: if info.rooted {
                    i64::from(plan.root)
                } else {
                    -1
                },
            };
            let mut results: [Option<Measure>; 2] = [None, None];
            for (k, inplace) in [(0, false), (1, true)] {
                if (inplace && !ip_ok) || (!inplace && !oop_ok) {
                    continue;
                }
                let (secs, wrong) = measure(&mut cx, bufs, algo, size, counts, inplace)?;
                let m = Measure::new(secs, head.size, factor, wrong);
                if let Some(b) = m.busbw {
                    bw_sum += b;
                    bw_count += 1;
                    a_sum += b;
                    a_count += 1;
                }
                if let Some(w) = wrong.filter(|&w| w > 0) {
                    failed += 1;
                    wrong_total += w;
                }
                results[k] = Some(m);
            }
            if let Some(b) = results[0].or(results[1]).and_then(|m| m.busbw) {
                points.push((head.size as f64, b));
            }
            if rank == 0 {
                let line = if plan.json {
                    let row = coll::json_row(
                        plan.op,
                        algo.0,
                        &head,
                        results[0].as_ref(),
                        results[1].as_ref(),
                    );
                    device::with_memory(&row, dev.is_some())
                } else {
                    coll::table_row(&head, results[0].as_ref(), results[1].as_ref())
                };
                writeln!(out, "{line}")?;
                out.flush()?;
            }
        }
        per_algo.push((algo.0, a_sum, a_count));
        let variant = if oop_ok { "out-of-place" } else { "in-place" };
        series.push(Series {
            label: format!("{} ({variant})", algo.0),
            points,
        });
    }
    if rank == 0 {
        let avg = (factor.is_some() && bw_count > 0).then(|| bw_sum / bw_count as f64);
        let [a, b, c] = coll::footer(failed, avg);
        say(plan.json, &a);
        say(plan.json, &b);
        if per_algo.len() > 1 {
            for (name, s, k) in &per_algo {
                let v = if *k > 0 {
                    coll::g_str(s / *k as f64)
                } else {
                    "N/A".into()
                };
                say(
                    plan.json,
                    &format!("#   {:<18} : {v}", format!("algo {name}")),
                );
            }
        }
        say(plan.json, &c);
        if let Some(path) = &plan.plot {
            let title = format!(
                "rcomm {} {} {}, {n} ranks: bus bandwidth",
                plan.op,
                coll::dtype_name(plan.dtype),
                if info.reduces { plan.redop.name() } else { "" }
            );
            plot::busbw_svg(path, title.replace("  ", " ").trim(), &series)?;
            say(plan.json, &format!("# plot: {}", path.display()));
        }
    }
    if wrong_total > 0 {
        return Err(WrongResults(wrong_total).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_lists() {
        let a = parse_algos(CollOp::Allreduce, "all", false).unwrap();
        assert!(a.iter().any(|x| x.0 == "ring") && a.iter().any(|x| x.0 == "rd"));
        assert!(!a.iter().any(|x| x.0 == "auto"));
        let a = parse_algos(CollOp::Allreduce, "auto,recursive-doubling,rd", false).unwrap();
        assert_eq!(a, vec![("auto", "auto"), ("rd", "rd")]);
        assert_eq!(
            parse_algos(CollOp::Bcast, "tree", false).unwrap(),
            vec![("tree", "tree")]
        );
        let e = parse_algos(CollOp::Bcast, "ring", false).unwrap_err();
        assert!(e.contains("valid: auto, tree"), "{e}");
        assert!(
            parse_algos(CollOp::Allreduce, "tree", false)
                .unwrap_err()
                .contains("auto, rd, ring")
                || parse_algos(CollOp::Allreduce, "tree", false)
                    .unwrap_err()
                    .contains("auto, ring, rd")
        );
    }

    #[test]
    fn every_operation_has_a_variant_and_inputs_where_mpi_puts_them() {
        for i in coll::OPS {
            let (o, ip) = variants(i.op).unwrap();
            assert!(o || ip, "{}", i.name);
        }
        assert!(has_input(CollOp::Bcast, 2, 2) && !has_input(CollOp::Bcast, 1, 2));
        assert!(has_input(CollOp::Allreduce, 1, 0));
    }
}
