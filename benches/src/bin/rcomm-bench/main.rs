//! `rcomm-bench`: rcomm benchmarks.
//!
//! `rcomm-run -n 2 rcomm-bench pt2pt latency|bw|bibw [-m MIN:MAX] [-i ITERS] [-x WARMUP] [--json]
//! [--device]` runs OSU 7.2's `osu_latency`, `osu_bw` or `osu_bibw` methodology over rcomm (see
//! [`rcomm_benches::osu`]); `benches/mpi/osu_like.c` is the same program for MPI. `--device` is
//! OSU's `D D`: both ranks' buffers in device memory (see [`rcomm_benches::device`]).
//!
//! `rcomm-bench dtod [--size 256M] [--iters N] [--json]` times device-to-device copies in one
//! process: the reference for the bandwidth of device messages between ranks.
//!
//! `rcomm-run -n N rcomm-bench coll OP [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
//! [-d TYPE] [-o REDOP] [-r ROOT] [-c CHECK] [-a 0|1|2|3] [-A ALGO] [--json] [--plot FILE.svg]
//! [--device [--stream]]` runs a collective with nccl-tests' methodology and columns (see
//! [`rcomm_benches::coll`]); `--device` on device buffers with the `*_device` collectives.
//!
//! `rcomm-run -n N rcomm-bench overlap [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
//! [-d TYPE] [--test-every K] [--json]` measures how much of a non-blocking allreduce hides
//! behind computation (see [`rcomm_benches::overlap`]).
//!
//! `rcomm-run -n N rcomm-bench --straggler [--size BYTES] [--iters N] [--warmup N]
//! [--slow RANK:US] [--json]` is the per-rank timing test: every rank times the same
//! allreduce loop; per-rank mean/p50/p99 and lateness, outliers named (see
//! [`rcomm_benches::straggler`]).

use clap::{Args, Parser, Subcommand, ValueEnum};
use rcomm::{Communicator, Dtype, Op, Tag};
use rcomm_benches::coll::{self, CollOp};
use rcomm_benches::coll_run::{self, WrongResults};
use rcomm_benches::device::{self, DevBuf};
use rcomm_benches::osu::{self, AlignedBuf, Loop, Mismatch, SizeRange, Test};
use rcomm_benches::overlap;
use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn Error>>;

/// Ping-pong tag (OSU: 1).
const TAG_LAT: Tag = Tag(1);
/// Window data from rank 0 (OSU: 100).
const TAG_DATA: Tag = Tag(100);
/// Window data from rank 1 in bibw (OSU: 10).
const TAG_DATA_BACK: Tag = Tag(10);
/// Per-window acknowledgement (OSU: 101).
const TAG_ACK: Tag = Tag(101);
/// Check results (OSU: 102).
const TAG_CHECK: Tag = Tag(102);
/// The handshake that stands in for `MPI_Barrier`.
const TAG_SYNC: Tag = Tag(103);

#[derive(Parser, Debug)]
#[command(
    name = "rcomm-bench",
    version,
    about = "rcomm benchmarks (start with: rcomm-run -n 2 rcomm-bench pt2pt latency)"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    straggler: StragglerArgs,
}

/// The per-rank timing test (`--straggler`).
#[derive(Args, Debug)]
struct StragglerArgs {
    /// Per-rank timing test: every rank times the same allreduce loop; rank 0 prints each
    /// rank's mean/p50/p99 time and lateness (the longest time of any rank at an iteration
    /// minus its own) and names outliers: mean lateness above the median rank's by more than
    /// max(3.5 × 1.4826 × MAD, 5 % of the median time), or mean time above 1.5 × the median's.
    #[arg(long)]
    straggler: bool,
    /// --straggler: bytes per allreduce (float, sum; K/M/G suffixes).
    #[arg(long, value_name = "BYTES", default_value = "64K", value_parser = osu::parse_size, requires = "straggler")]
    size: usize,
    /// --straggler: timed iterations.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..), requires = "straggler")]
    iters: u64,
    /// --straggler: warm-up iterations.
    #[arg(long, value_name = "N", default_value_t = 20, requires = "straggler")]
    warmup: u64,
    /// --straggler, testing aid: rank RANK sleeps US microseconds before every iteration.
    #[arg(long, value_name = "RANK:US", value_parser = parse_slow, requires = "straggler")]
    slow: Option<(u32, Duration)>,
    /// --straggler: one JSON object per rank and one listing the outliers, instead of the table.
    #[arg(long = "straggler-json", requires = "straggler")]
    json: bool,
}

fn parse_slow(v: &str) -> Result<(u32, Duration), String> {
    let (r, us) = v
        .split_once(':')
        .ok_or_else(|| format!("{v}: expected RANK:MICROSECONDS"))?;
    let r = r.trim().parse().map_err(|_| format!("{r}: not a rank"))?;
    let us: u64 = us
        .trim()
        .parse()
        .map_err(|_| format!("{us}: not a number of microseconds"))?;
    Ok((r, Duration::from_micros(us)))
}

fn main_straggler(a: &StragglerArgs) -> ExitCode {
    let plan = rcomm_benches::straggler::Plan {
        bytes: a.size,
        iters: a.iters as usize,
        warmup: a.warmup as usize,
        slow: a.slow,
        json: a.json,
    };
    match rcomm_benches::straggler::run(&plan) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rcomm-bench --straggler: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Point-to-point latency and bandwidth between 2 ranks, with OSU 7.2's methodology.
    Pt2pt(Pt2ptArgs),
    /// A collective on every rank, with nccl-tests' methodology, flags and columns.
    Coll(CollArgs),
    /// Computation/communication overlap of a non-blocking allreduce (iallreduce + compute + wait).
    Overlap(OverlapArgs),
    /// The local reduction's speed (f32 sum, one process, no ranks needed): the cost model's γ;
    /// with --copy the local copy's: κ.
    Reduce(ReduceArgs),
    /// Device-to-device copy bandwidth in one process (no ranks needed): the reference for
    /// `pt2pt bw --device` between ranks of one node.
    Dtod(DtodArgs),
    /// Writes the device reduction kernels compiled by NVRTC, as PTX, for machines without
    /// NVRTC (`RCOMM_PTX_DIR`).
    Ptx(PtxArgs),
}

/// `ptx`: one file per architecture.
#[derive(Args, Debug)]
struct PtxArgs {
    /// Architectures (`sm_80,sm_90`; default: every one the sources are tested for).
    #[arg(long, value_delimiter = ',')]
    arch: Vec<String>,
    /// Folder to write `rcomm-reduce-<arch>.ptx` into.
    #[arg(long, default_value = ".")]
    out: std::path::PathBuf,
}

fn main_ptx(a: &PtxArgs) -> ExitCode {
    let archs: Vec<String> = if a.arch.is_empty() {
        rcomm_kernels::cuda::ARCHS
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        a.arch.clone()
    };
    for arch in &archs {
        let path = a.out.join(rcomm::gpu::ptx_file(arch));
        let res = rcomm_kernels::cuda::compile_ptx(arch)
            .map_err(|e| e.to_string())
            .and_then(|p| std::fs::write(&path, p.as_bytes()).map_err(|e| e.to_string()));
        match res {
            Ok(()) => println!("{}", path.display()),
            Err(e) => {
                eprintln!("rcomm-bench ptx: {arch}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// `dtod`: one copy size, timed on device 0 (or --device).
#[derive(Args, Debug)]
struct DtodArgs {
    /// Bytes per copy (K/M/G suffixes).
    #[arg(long, default_value = "256M", value_parser = osu::parse_size)]
    size: usize,
    /// Timed copies (each timed on its own, the times summed).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Untimed copies before them.
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// Device ordinal.
    #[arg(long, default_value_t = 0)]
    device: u32,
    /// Time the device sum kernel `out = a + b` of this element type instead of a copy
    /// (f32, bf16, f16, i32), checked bit for bit against the CPU kernel; its bandwidth counts
    /// three bytes of traffic per byte.
    #[arg(long, value_parser = parse_dtype)]
    reduce: Option<rcomm_kernels::Dtype>,
    /// One JSON object instead of the text: {"test":"dtod","op","device","name","backend",
    /// "memory","size","iters","warmup","time_us","GBps","GBps_rw","GBps_best"}.
    #[arg(long)]
    json: bool,
}

fn main_dtod(a: &DtodArgs) -> ExitCode {
    let (iters, warmup) = (a.iters as usize, a.warmup as usize);
    let res = match a.reduce {
        Some(d) => device::reduce_kernel(a.device, d, a.size, iters, warmup),
        None => device::dtod(a.device, a.size, iters, warmup),
    };
    match res {
        Ok(d) if a.json => {
            println!("{}", d.json());
            ExitCode::SUCCESS
        }
        Ok(d) => {
            print!("{}", d.text());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rcomm-bench dtod: {e}");
            ExitCode::FAILURE
        }
    }
}

/// An element type by its name (`f32`, `bf16`, …).
fn parse_dtype(s: &str) -> Result<rcomm_kernels::Dtype, String> {
    rcomm_kernels::Dtype::ALL
        .iter()
        .copied()
        .find(|d| d.name() == s)
        .ok_or_else(|| format!("an element type (f32, bf16, f16, i32, …), not {s:?}"))
}

/// `reduce`'s sweep: sizes double from -b to -e.
#[derive(Args, Debug)]
struct ReduceArgs {
    /// Smallest operand size in bytes (K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "64K", value_parser = osu::parse_size)]
    min: usize,
    /// Largest operand size in bytes (K/M/G suffixes).
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = osu::parse_size)]
    max: usize,
    /// At least this many timed calls per size (and as many warm-up calls).
    #[arg(short = 'n', long, default_value_t = 10)]
    iters: u64,
    /// And at least this many milliseconds of timed calls per size.
    #[arg(long, default_value_t = 50)]
    min_ms: u64,
    /// One JSON object per size instead of the table.
    #[arg(long)]
    json: bool,
    /// Time a plain copy (memcpy, `dst.copy_from_slice(src)`) instead of the reduction: the
    /// local copy rate κ (`rcomm-plan --price … --copy-bw`).
    #[arg(long)]
    copy: bool,
}

fn main_reduce(a: &ReduceArgs) -> ExitCode {
    if a.min == 0 || a.min > a.max {
        eprintln!("rcomm-bench reduce: need 0 < -b <= -e");
        return ExitCode::from(2);
    }
    if !a.json {
        println!("# {:>12} {:>12} {:>10}", "size", "time(us)", "GB/s");
    }
    let mut s = a.min;
    while s <= a.max {
        let kind = if a.copy {
            rcomm_benches::reduce::Kind::Copy
        } else {
            rcomm_benches::reduce::Kind::Reduce
        };
        match rcomm_benches::reduce::measure_kind(kind, s, a.iters, Duration::from_millis(a.min_ms))
        {
            Ok(p) if a.json => println!("{}", p.json()),
            Ok(p) => println!(
                "  {:>12} {:>12.2} {:>10.2}",
                p.size,
                p.time_s * 1e6,
                p.gamma() / 1e9
            ),
            Err(e) => {
                eprintln!("rcomm-bench reduce: {e}");
                return ExitCode::FAILURE;
            }
        }
        s = match s.checked_mul(2) {
            Some(v) => v,
            None => break,
        };
    }
    ExitCode::SUCCESS
}

/// `coll`'s sweep flags, for `iallreduce` against a computation of the same length.
#[derive(Args, Debug)]
#[command(
    after_help = "Per size, each as -w warm-up rounds, a barrier and -n timed rounds (time per \
    round, combined over ranks as -a): t_comm = iallreduce(buf, sum) then wait at once; t_comp = \
    the computation alone (dependent multiply-adds in registers, its length calibrated on rank 0 \
    so that t_comp ≈ t_comm, then broadcast); t_both = iallreduce started, the computation, wait. \
    overlap = (t_comm + t_comp − t_both) / min(t_comm, t_comp) × 100, clamped to 0…100. \
    RCOMM_ASYNC_PROGRESS=1 in the environment starts rcomm's progress thread (the header says \
    which); --test-every K adds a mode that calls test() every K chunks of computation instead. \
    A check pass per size and mode compares the result with coll's sequential reference."
)]
struct OverlapArgs {
    /// Smallest size in bytes (K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", value_name = "MINBYTES", default_value = "64K", value_parser = osu::parse_size)]
    min_bytes: usize,
    /// Largest size in bytes (K/M/G suffixes).
    #[arg(short = 'e', long = "maxbytes", value_name = "MAXBYTES", default_value = "16M", value_parser = osu::parse_size)]
    max_bytes: usize,
    /// Multiply the size by this from one step to the next (1: add -i bytes instead).
    #[arg(
        short = 'f',
        long = "stepfactor",
        value_name = "FACTOR",
        default_value_t = 4
    )]
    factor: usize,
    /// Add this many bytes from one step to the next when -f is 1.
    #[arg(short = 'i', long = "stepbytes", value_name = "BYTES", default_value = "1M", value_parser = osu::parse_size)]
    step: usize,
    /// Timed rounds per size and measurement.
    #[arg(short = 'n', long = "iters", value_name = "ITERS", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Warm-up rounds before each measurement.
    #[arg(
        short = 'w',
        long = "warmup_iters",
        value_name = "WARMUP",
        default_value_t = 5
    )]
    warmup: u64,
    /// Data type (as coll's -d); the reduction is sum.
    #[arg(short = 'd', long = "datatype", value_name = "TYPE", default_value = "float", value_parser = coll::parse_dtype)]
    dtype: Dtype,
    /// Check passes per size and mode (0: none).
    #[arg(short = 'c', long = "check", value_name = "CHECK", default_value_t = 1)]
    check: u32,
    /// How per-rank times are combined: 0 rank 0's, 1 average, 2 minimum, 3 maximum.
    #[arg(short = 'a', long = "average", value_name = "0|1|2|3", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    average: u8,
    /// Also run a mode that calls test() on the request every K chunks of computation
    /// (progress by hand), printed as mode test/K.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    test_every: Option<u64>,
    /// One JSON object per size and mode on stdout instead of the table (headers go to stderr):
    /// {"op":"iallreduce","size","count","type","redop","mode","test_every","async_progress",
    /// "chunks","t_comm_us","t_comp_us","t_both_us","overlap_pct","wrong"}.
    #[arg(long)]
    json: bool,
    /// The computation: fma (the CPU busy with register-only multiply-adds) or sleep (the
    /// thread blocked, as while an accelerator computes; overlap then needs no spare core).
    #[arg(long, value_name = "fma|sleep", default_value = "fma", value_parser = ["fma", "sleep"])]
    compute: String,
}

fn main_overlap(a: &OverlapArgs) -> ExitCode {
    let mut modes = vec![overlap::Mode::Wait];
    modes.extend(a.test_every.map(overlap::Mode::TestEvery));
    let plan = coll::Average::from_flag(a.average).and_then(|average| {
        let p = overlap::Plan {
            dtype: a.dtype,
            sizes: coll::sizes(a.min_bytes, a.max_bytes, a.factor, a.step),
            sweep: (a.min_bytes, a.max_bytes, a.factor, a.step),
            iters: a.iters as usize,
            warmup: a.warmup as usize,
            check: a.check,
            average,
            modes,
            json: a.json,
            sleep: a.compute == "sleep",
        };
        overlap::validate(&p).map(|()| p)
    });
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            if rcomm_rank0() {
                eprintln!("rcomm-bench overlap: {e}");
            }
            return ExitCode::from(2);
        }
    };
    match overlap::run(&plan) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<coll_run::Quiet>() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rcomm-bench overlap: {e}");
            ExitCode::FAILURE
        }
    }
}

/// nccl-tests' flags (`all_reduce_perf -b 8 -e 128M -f 2 …`), plus `-A` for the algorithm.
#[derive(Args, Debug)]
#[command(
    after_help = "Output: nccl-tests' table: `size count type redop root` (size: the larger \
    buffer in bytes; count: the count passed to the call), then `time algbw busbw #wrong` out of \
    place and again in place (N/A where rcomm has no such call: bcast is in place only, reduce, \
    allgather, reduce_scatter, alltoall, gather, scatter and scan out of place only). \
    Times in µs, \
    bandwidths in GB/s (10^9 B/s); algbw = size / time, busbw = algbw × 2(n−1)/n (allreduce), \
    (n−1)/n (allgather, reduce_scatter, alltoall, gather, scatter), 1 (bcast, reduce, scan); barrier \
    reports a time only. #wrong: wrong elements over all ranks in the check pass after the timed \
    loop; any makes the exit status 1. Check data: integers exact (wrapping); float inputs lie on \
    a grid that keeps every partial result exact up to 64 ranks, so any combining order gives the \
    reference, within 2·eps·|value|.\n\nDifferences from nccl-tests: the -w warm-up calls run \
    before every size and variant (nccl-tests runs them once at the largest and smallest size); \
    -A picks rcomm's algorithm (out of place with a forced algorithm copies the input to the \
    output, then runs that algorithm in place)."
)]
struct CollArgs {
    /// The collective: allreduce, reduce, bcast, allgather, reduce_scatter, alltoall, gather,
    /// scatter, scan or barrier.
    #[arg(value_parser = coll::parse_op, value_name = "OP")]
    op: CollOp,
    /// Smallest size in bytes (K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", value_name = "MINBYTES", default_value = "32M", value_parser = osu::parse_size)]
    min_bytes: usize,
    /// Largest size in bytes (K/M/G suffixes).
    #[arg(short = 'e', long = "maxbytes", value_name = "MAXBYTES", default_value = "32M", value_parser = osu::parse_size)]
    max_bytes: usize,
    /// Multiply the size by this from one step to the next (1: add -i bytes instead).
    #[arg(
        short = 'f',
        long = "stepfactor",
        value_name = "FACTOR",
        default_value_t = 1
    )]
    factor: usize,
    /// Add this many bytes from one step to the next when -f is 1.
    #[arg(short = 'i', long = "stepbytes", value_name = "BYTES", default_value = "1M", value_parser = osu::parse_size)]
    step: usize,
    /// Timed calls per size (and variant), back to back.
    #[arg(short = 'n', long = "iters", value_name = "ITERS", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Warm-up calls before each size (and variant).
    #[arg(
        short = 'w',
        long = "warmup_iters",
        value_name = "WARMUP",
        default_value_t = 5
    )]
    warmup: u64,
    /// Data type: int8 uint8 int16 uint16 int32 uint32 int64 uint64 half bfloat16 float double
    /// (rcomm's names i8 … f64, bf16 work too).
    #[arg(short = 'd', long = "datatype", value_name = "TYPE", default_value = "float", value_parser = coll::parse_dtype)]
    dtype: Dtype,
    /// Reduction: sum prod min max avg (and rcomm's band bor bxor for integers).
    #[arg(short = 'o', long = "op", value_name = "REDOP", default_value = "sum", value_parser = coll::parse_redop)]
    redop: Op,
    /// Root of bcast, reduce, gather and scatter.
    #[arg(short = 'r', long = "root", value_name = "ROOT", default_value_t = 0)]
    root: u32,
    /// Check passes after the timed loop of each size (0: no check, #wrong is N/A).
    #[arg(short = 'c', long = "check", value_name = "CHECK", default_value_t = 1)]
    check: u32,
    /// How per-rank times are combined: 0 rank 0's, 1 average, 2 minimum, 3 maximum.
    #[arg(short = 'a', long = "average", value_name = "0|1|2|3", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    average: u8,
    /// Algorithm: auto (rcomm's choice, or RCOMM_ALGO's), all (each algorithm rcomm has for OP,
    /// in turn), a name, or a comma-separated list. allreduce: ring, rd (recursive doubling);
    /// the other operations have one each so far (bcast, reduce: tree; allgather,
    /// reduce_scatter: ring; alltoall: pairwise; gather, scatter: linear; scan: chain).
    #[arg(
        short = 'A',
        long = "algo",
        value_name = "ALGO",
        default_value = "auto"
    )]
    algo: String,
    /// One JSON object per size on stdout instead of the table (headers go to stderr):
    /// {"op","algo","size","count","type","redop","root","time_us","algbw","busbw","wrong",
    /// "inplace":{"time_us","algbw","busbw","wrong"},"memory":"host"|"device"}; null where a
    /// variant does not exist.
    #[arg(long)]
    json: bool,
    /// Also draw busbw against size (log x) into this SVG file, one line per algorithm.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Buffers in device memory: `DeviceBuffer`s on device RCOMM_LOCAL_RANK mod the number of
    /// devices (as `pt2pt --device`), the `*_device` collectives (allreduce both, bcast in place;
    /// reduce, allgather, reduce_scatter, alltoall out of place; no gather, scatter, scan or
    /// barrier). The check data is copied in before the checked call and the result copied
    /// back to the host for #wrong, outside the timed loop; JSON rows say "memory":"device".
    #[arg(long)]
    device: bool,
    /// With --device, allreduce only: the stream-ordered `allreduce_device_on` on a stream this
    /// rank creates, synchronized after the timed loop (inside the time, as nccl-tests does).
    #[arg(long, requires = "device")]
    stream: bool,
    /// Testing the benchmark: corrupt one output element on the last rank in every check pass.
    #[arg(long, hide = true)]
    inject_wrong: bool,
}

fn coll_plan(a: &CollArgs) -> Result<coll_run::Plan, String> {
    let algos = coll_run::parse_algos(a.op, &a.algo, a.device)?;
    let p = coll_run::Plan {
        op: a.op,
        dtype: a.dtype,
        redop: a.redop,
        root: a.root,
        sizes: coll::sizes(a.min_bytes, a.max_bytes, a.factor, a.step),
        sweep: (a.min_bytes, a.max_bytes, a.factor, a.step),
        iters: a.iters as usize,
        warmup: a.warmup as usize,
        check: a.check,
        average: coll::Average::from_flag(a.average)?,
        algos,
        json: a.json,
        plot: a.plot.clone(),
        inject_wrong: a.inject_wrong,
        device: a.device,
        stream: a.stream,
    };
    coll_run::validate(&p)?;
    // A send and a receive buffer of the largest size, per rank.
    let largest = p.sizes.last().copied().unwrap_or(0);
    let per_rank = 2 * largest;
    if per_rank > osu::MEM_LIMIT {
        return Err(format!(
            "sizes up to {largest} bytes need {} MiB per rank (limit {} MiB); lower -e",
            per_rank >> 20,
            osu::MEM_LIMIT >> 20
        ));
    }
    Ok(p)
}

fn main_coll(args: &CollArgs) -> ExitCode {
    let plan = match coll_plan(args) {
        Ok(p) => p,
        Err(e) => {
            // Every rank finds the same mistake; one says so.
            if rcomm_rank0() {
                eprintln!("rcomm-bench coll: {e}");
            }
            return ExitCode::from(2);
        }
    };
    match coll_run::run(&plan) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<coll_run::Quiet>() => ExitCode::FAILURE,
        Err(e) if e.is::<WrongResults>() => {
            if rcomm_rank0() {
                eprintln!("rcomm-bench coll: {e}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("rcomm-bench coll: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether this process is rank 0 (or runs alone), from the launcher's environment.
fn rcomm_rank0() -> bool {
    std::env::var("RCOMM_RANK").map_or(true, |r| r.trim() == "0")
}

#[derive(Args, Debug)]
struct Pt2ptArgs {
    /// Which test: latency (osu_latency), bw (osu_bw) or bibw (osu_bibw).
    #[arg(value_enum)]
    test: TestArg,
    /// Message sizes `[MIN:]MAX` in bytes, K/M/G suffixes allowed; powers of two from MIN to MAX.
    #[arg(short = 'm', long = "message-size", value_name = "MIN:MAX", value_parser = osu::parse_range, default_value = "1:4194304")]
    range: SizeRange,
    /// Timed iterations per size, for small and large sizes alike [OSU default: latency 10000
    /// (≤ 8 KiB) / 1000, bandwidth 100 / 20 windows].
    #[arg(short = 'i', long = "iterations", value_name = "ITERS", value_parser = clap::value_parser!(u64).range(1..))]
    iterations: Option<u64>,
    /// Warm-up iterations per size [OSU default: latency 100 / 10, bandwidth 10 / 2].
    #[arg(short = 'x', long = "warmup", value_name = "WARMUP")]
    warmup: Option<u64>,
    /// Window of non-blocking operations (bw, bibw).
    #[arg(short = 'W', long = "window-size", default_value_t = osu::WINDOW_SIZE as u64, value_parser = clap::value_parser!(u64).range(1..=1000))]
    window: u64,
    /// Buffers as OSU's `--buffer-num`: `single` (one send and one receive buffer; latency
    /// only, see the note) or `multiple` (one per window slot, allocated per size; the default
    /// for bw and bibw).
    ///
    /// rcomm cannot post a window of 64 receives into one buffer: a receive borrows its buffer
    /// mutably (or owns it) until it completes, so bw and bibw always use multiple buffers —
    /// compare them with `osu_like -b multiple`.
    #[arg(short = 'b', long = "buffer-num", value_enum)]
    buffers: Option<BufNum>,
    /// Print one JSON object per size (`{"size":N,"latency_us":X,"memory":"host"}` or
    /// `{"size":N,"bandwidth_MBps":X,"memory":"host"}`) instead of the table; headers go to
    /// stderr.
    #[arg(long)]
    json: bool,
    /// OSU's `D D`: both ranks' send and receive buffers in device memory (rcomm's
    /// `DeviceBuffer` on device RCOMM_LOCAL_RANK mod the number of devices), moved with
    /// `send_device` / `recv_device` and scoped `isend_device` / `irecv_device`. The check data
    /// is written and read back by host copies outside the timed loop.
    #[arg(long)]
    device: bool,
    /// Testing the benchmark: rank 1 receives every message after iteration ITER (counted from
    /// 0, warm-up included) into a spare buffer, as a receive that stops writing would, so the
    /// check pass must fail.
    #[arg(long, value_name = "ITER", hide = true)]
    inject_stale: Option<u64>,
    /// latency and exchange: also print, per size on stderr, the distribution of the timed
    /// iterations (half round trips, ns): `# percentiles size N: p50 … p90 … p99 … p99.9 …
    /// max … | share of the time above p99 …%`. Tells a launch that is slow throughout (p50
    /// moved) from one that lost its time to a few stalls (the share above p99: a preempted
    /// rank, a kernel thread on its core).
    #[arg(long)]
    percentiles: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum TestArg {
    Latency,
    Bw,
    Bibw,
    Exchange,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BufNum {
    Single,
    Multiple,
}

/// What to run, checked before `init`.
struct Plan {
    test: Test,
    sizes: Vec<usize>,
    counts: osu::LoopCounts,
    window: usize,
    buffers: BufNum,
    json: bool,
    device: bool,
    inject_stale: Option<u64>,
    percentiles: bool,
}

fn plan(a: &Pt2ptArgs) -> Res<Plan> {
    let test = match a.test {
        TestArg::Latency => Test::Latency,
        TestArg::Bw => Test::Bw,
        TestArg::Bibw => Test::Bibw,
        TestArg::Exchange => Test::Exchange,
    };
    let window = a.window as usize;
    let buffers = match (test, a.buffers) {
        (Test::Latency | Test::Exchange, b) => b.unwrap_or(BufNum::Single),
        (_, None | Some(BufNum::Multiple)) => BufNum::Multiple,
        (_, Some(BufNum::Single)) => {
            return Err(format!(
                "-b single is not available for {test}: rcomm cannot post {window} receives into one buffer (a \
                 receive holds its buffer exclusively until it completes); use -b multiple and compare with \
                 `osu_like {test} -b multiple`"
            )
            .into());
        }
    };
    if a.percentiles && (!matches!(test, Test::Latency | Test::Exchange) || a.device) {
        return Err(format!(
            "--percentiles times each iteration of latency and exchange on host memory; {test}{} times windows \
             or device copies as a whole",
            if a.device { " --device" } else { "" }
        )
        .into());
    }
    let sizes: Vec<usize> = a
        .range
        .sizes()
        .into_iter()
        .filter(|&s| test.runs_size(s))
        .collect();
    let largest = sizes.last().copied().unwrap_or(0);
    let per_rank = if buffers == BufNum::Multiple && !matches!(test, Test::Latency | Test::Exchange)
    {
        2 * window * largest
    } else {
        2 * largest
    };
    if per_rank > osu::MEM_LIMIT {
        return Err(format!(
            "{test} up to {largest} bytes with {} buffers needs {} MiB per rank (limit {} MiB); lower -m or -W",
            if buffers == BufNum::Multiple { "multiple" } else { "single" },
            per_rank >> 20,
            osu::MEM_LIMIT >> 20
        )
        .into());
    }
    let counts = test.default_counts().with_overrides(
        a.iterations.map(|v| v as usize),
        a.warmup.map(|v| v as usize),
    );
    Ok(Plan {
        test,
        sizes,
        counts,
        window,
        buffers,
        json: a.json,
        device: a.device,
        inject_stale: a.inject_stale,
        percentiles: a.percentiles,
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let args = match cli.cmd {
        Some(Cmd::Pt2pt(a)) => a,
        Some(Cmd::Coll(a)) => return main_coll(&a),
        Some(Cmd::Overlap(a)) => return main_overlap(&a),
        Some(Cmd::Reduce(a)) => return main_reduce(&a),
        Some(Cmd::Dtod(a)) => return main_dtod(&a),
        Some(Cmd::Ptx(a)) => return main_ptx(&a),
        None if cli.straggler.straggler => return main_straggler(&cli.straggler),
        None => {
            eprintln!(
                "rcomm-bench: give a subcommand (pt2pt, coll, overlap, reduce, dtod, ptx) or --straggler; see --help"
            );
            return ExitCode::from(2);
        }
    };
    let plan = match plan(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rcomm-bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&plan) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Quiet>() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rcomm-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A failure that rank 0 reports for every rank (the others exit without repeating it).
#[derive(Debug)]
struct Quiet;

impl std::fmt::Display for Quiet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failed (reported by rank 0)")
    }
}

impl Error for Quiet {}

/// The two ranks of a benchmark.
struct Pair<'a> {
    comm: &'a Communicator,
    rank: u32,
    peer: u32,
}

impl Pair<'_> {
    /// A round trip that stands in for `MPI_Barrier` (OSU calls one before every size).
    fn sync(&self) -> Res<()> {
        let mut b = [0u8; 1];
        if self.rank == 0 {
            self.comm.send(&b, self.peer, TAG_SYNC)?;
            self.comm.recv(&mut b, self.peer, TAG_SYNC)?;
        } else {
            self.comm.recv(&mut b, self.peer, TAG_SYNC)?;
            self.comm.send(&b, self.peer, TAG_SYNC)?;
        }
        Ok(())
    }

    /// Combines both ranks' check results (the first wrong receive buffer: its slot and what
    /// is wrong) on both ranks; an error names the rank, the slot, the byte and what it holds.
    fn agree(
        &self,
        test: Test,
        size: usize,
        last: u64,
        mine: Option<(usize, Mismatch)>,
    ) -> Res<()> {
        let enc = |m: Option<(usize, Mismatch)>| {
            m.map_or([0u64; 4], |(slot, m)| {
                let [kind, off, found] = m.encode();
                [kind, slot as u64, off, found]
            })
        };
        let mut theirs = [0u64; 4];
        if self.rank == 0 {
            self.comm.recv(&mut theirs, self.peer, TAG_CHECK)?;
            self.comm.send(&enc(mine), self.peer, TAG_CHECK)?;
        } else {
            self.comm.send(&enc(mine), self.peer, TAG_CHECK)?;
            self.comm.recv(&mut theirs, self.peer, TAG_CHECK)?;
        }
        let mut bad = Vec::new();
        if let Some((slot, m)) = mine {
            bad.push((self.rank, slot as u64, m));
        }
        let [kind, slot, off, found] = theirs;
        if kind != 0 {
            let m = Mismatch::decode([kind, off, found]).ok_or_else(|| {
                format!(
                    "{test}, size {size}: rank {} sent a check result of unknown kind {kind}",
                    self.peer
                )
            })?;
            bad.push((self.peer, slot, m));
        }
        bad.sort_by_key(|&(r, slot, m)| (r, slot, m.offset));
        let Some((r, slot, m)) = bad.first() else {
            return Ok(());
        };
        // Rank 0 says what is wrong, then lets rank 1 go: a rank that exits first makes
        // rcomm-run stop the other, which could cut the message.
        let mut done = [0u8; 1];
        if self.rank == 0 {
            eprintln!(
                "rcomm-bench: check failed: {test}, size {size}: rank {r}, receive buffer {slot}: {} (after the timed \
                 loop every receive buffer must hold the sender's last message: its data pattern stamped with \
                 iteration {last}, the last of {} counting warm-up)",
                m.describe(last),
                last + 1
            );
            self.comm.send(&done, self.peer, TAG_SYNC)?;
        } else {
            self.comm.recv(&mut done, self.peer, TAG_SYNC)?;
        }
        Err(Quiet.into())
    }
}

fn run(plan: &Plan) -> Res<()> {
    let world = rcomm::init()?;
    let (rank, size) = (world.rank(), world.size());
    if size != 2 {
        if rank != 0 {
            return Err(Quiet.into());
        }
        return Err(format!(
            "pt2pt needs exactly 2 ranks; this job has {size} (rank {rank}). Start it with: rcomm-run -n 2 rcomm-bench \
             pt2pt {} ...",
            plan.test
        )
        .into());
    }
    let pair = Pair {
        comm: &world,
        rank,
        peer: 1 - rank,
    };
    let t = plan.test;
    // --device: this rank's device, or rcomm's reason why there is none.
    let dev = if plan.device {
        Some(device::pick_device().map_err(|e| format!("--device on rank {rank}: {e}"))?)
    } else {
        None
    };
    let memory = match dev {
        Some(d) => format!("device {d} ({})", rcomm::gpu::backend_name().unwrap_or("?")),
        None => "host".to_string(),
    };
    if rank == 0 {
        let header = [
            t.title().to_string(),
            format!(
                "# rcomm {} | transport to rank 1: {} | buffers: {} | window: {} | memory: {memory}",
                env!("CARGO_PKG_VERSION"),
                world.transport_to(1)?,
                if plan.buffers == BufNum::Single {
                    "single"
                } else {
                    "multiple"
                },
                if matches!(t, Test::Latency | Test::Exchange) {
                    "-".to_string()
                } else {
                    plan.window.to_string()
                },
            ),
            t.column_header(),
        ];
        for h in header {
            if plan.json {
                eprintln!("{h}")
            } else {
                println!("{h}")
            }
        }
    }
    // Single buffers are allocated once for the largest size (as OSU does).
    let largest = plan.sizes.last().copied().unwrap_or(0);
    let mut single = (plan.buffers == BufNum::Single && dev.is_none())
        .then(|| (AlignedBuf::new(largest), AlignedBuf::new(largest)));
    let mut dsingle = match dev {
        Some(d) if plan.buffers == BufNum::Single => {
            Some((DevBuf::new(d, largest)?, DevBuf::new(d, largest)?))
        }
        _ => None,
    };
    let mut out = std::io::stdout().lock();
    for &n in &plan.sizes {
        let lp = plan.counts.for_size(n);
        let total = match (t, dev) {
            (Test::Latency | Test::Exchange, Some(d)) => {
                let mut per_size;
                let (s, r) = match dsingle.as_mut() {
                    Some((s, r)) => (s, r),
                    None => {
                        per_size = (DevBuf::new(d, n)?, DevBuf::new(d, n)?);
                        (&mut per_size.0, &mut per_size.1)
                    }
                };
                latency_device(&pair, t, n, lp, &*s, r, plan.inject_stale)?
            }
            (Test::Bw | Test::Bibw, Some(d)) => {
                let mut s = Vec::with_capacity(plan.window);
                let mut r = Vec::with_capacity(plan.window);
                for _ in 0..plan.window {
                    s.push(DevBuf::new(d, n)?);
                    r.push(DevBuf::new(d, n)?);
                }
                bandwidth_device(&pair, t, n, lp, &s, &mut r, plan.inject_stale)?
            }
            (Test::Latency | Test::Exchange, None) => {
                let mut per_size;
                let (s, r) = match single.as_mut() {
                    Some((s, r)) => (s, r),
                    None => {
                        per_size = (AlignedBuf::new(n), AlignedBuf::new(n));
                        (&mut per_size.0, &mut per_size.1)
                    }
                };
                latency(&pair, t, n, lp, s, r, plan.inject_stale, plan.percentiles)?
            }
            (Test::Bw | Test::Bibw, None) => {
                let mut s: Vec<AlignedBuf> = (0..plan.window).map(|_| AlignedBuf::new(n)).collect();
                let mut r: Vec<AlignedBuf> = (0..plan.window).map(|_| AlignedBuf::new(n)).collect();
                bandwidth(&pair, t, n, lp, &mut s, &mut r, plan.inject_stale)?
            }
        };
        if rank == 0 {
            let v = t.figure(n, lp.iterations, plan.window, total.as_secs_f64());
            let line = if plan.json {
                device::with_memory(&t.json(n, v), dev.is_some())
            } else {
                t.row(n, v)
            };
            writeln!(out, "{line}")?;
            out.flush()?;
        }
    }
    if rank == 0 {
        let line = "# check passed at every size: each receive buffer held the sender's last message \
                    (data pattern and iteration stamps)";
        if plan.json {
            eprintln!("{line}")
        } else {
            println!("{line}")
        }
    }
    report_counters(&pair, plan.json, dev.is_some())?;
    Ok(())
}

/// `--percentiles`: the distribution of one size's timed round trips (`rtt`, ns; sorted here)
/// as half round trips.
fn percentile_line(size: usize, rtt: &mut [u64]) -> String {
    if rtt.is_empty() {
        return format!("# percentiles size {size}: no timed iterations");
    }
    rtt.sort_unstable();
    let at = |f: f64| rtt[((rtt.len() - 1) as f64 * f).round() as usize] / 2;
    let p99 = at(0.99);
    let total: u64 = rtt.iter().sum();
    let above: u64 = rtt.iter().filter(|&&x| x / 2 > p99).sum();
    format!(
        "# percentiles size {size}: p50 {} p90 {} p99 {p99} p99.9 {} max {} ns | share of the time above p99 {:.1}%",
        at(0.5),
        at(0.9),
        at(0.999),
        rtt[rtt.len() - 1] / 2,
        100.0 * above as f64 / total.max(1) as f64
    )
}

/// One size of `osu_latency` (blocking send from `s`, blocking receive into `r`, rank 0's
/// round trips) or of the exchange test (both ranks `sendrecv` at once, rank 0's time).
/// `stale`: `--inject-stale`; `percentiles`: `--percentiles`.
#[allow(clippy::too_many_arguments)]
fn latency(
    p: &Pair<'_>,
    t: Test,
    n: usize,
    lp: Loop,
    s: &mut AlignedBuf,
    r: &mut AlignedBuf,
    stale: Option<u64>,
    percentiles: bool,
) -> Res<Duration> {
    let (mine, theirs) = (osu::seed(n, p.rank, 0), osu::seed(n, p.peer, 0));
    let poison = osu::poison_seed(n, p.rank, 0);
    osu::fill(s.get_mut(n), mine);
    osu::fill(r.get_mut(n), poison);
    let (sb, rb) = (s.get_mut(n), r.get_mut(n));
    let stale = stale.filter(|_| p.rank == 1);
    let mut spare = AlignedBuf::new(if stale.is_some() { n } else { 0 });
    let rounds = lp.skip + lp.iterations;
    let hist_on = percentiles && p.rank == 0;
    let mut hist: Vec<u64> = Vec::with_capacity(if hist_on { rounds } else { 0 });
    p.sync()?;
    let mut total = Duration::ZERO;
    for i in 0..rounds {
        // This iteration's message differs from every other's: 24 bytes, before the timer
        // starts (rank 1 stamps before it waits for the ping).
        osu::stamp(sb, mine, i as u64);
        let into: &mut [u8] = match stale {
            Some(k) if i as u64 > k => spare.get_mut(n),
            _ => &mut *rb,
        };
        let t0 = (p.rank == 0 && i >= lp.skip).then(Instant::now);
        match (t, p.rank) {
            (Test::Exchange, _) => {
                p.comm
                    .sendrecv(&*sb, p.peer, TAG_LAT, into, p.peer, TAG_LAT)?;
            }
            (_, 0) => {
                p.comm.send(&*sb, p.peer, TAG_LAT)?;
                p.comm.recv(into, p.peer, TAG_LAT)?;
            }
            _ => {
                p.comm.recv(into, p.peer, TAG_LAT)?;
                p.comm.send(&*sb, p.peer, TAG_LAT)?;
            }
        }
        if let Some(t0) = t0 {
            let d = t0.elapsed();
            total += d;
            if hist_on {
                hist.push(d.as_nanos() as u64);
            }
        }
    }
    if hist_on {
        eprintln!("{}", percentile_line(n, &mut hist));
    }
    // Check pass, outside the timed loop: the receive buffer holds the peer's last message.
    let last = rounds.saturating_sub(1) as u64;
    let bad = osu::check_last(rb, theirs, poison, last).map(|m| (0, m));
    p.agree(t, n, last, bad)?;
    Ok(total)
}

/// `osu_bw` / `osu_bibw` for one size, one send and one receive buffer per window slot.
/// `stale`: `--inject-stale`.
fn bandwidth(
    p: &Pair<'_>,
    t: Test,
    n: usize,
    lp: Loop,
    sbufs: &mut [AlignedBuf],
    rbufs: &mut [AlignedBuf],
    stale: Option<u64>,
) -> Res<Duration> {
    let window = sbufs.len();
    let mine: Vec<u64> = (0..window).map(|j| osu::seed(n, p.rank, j)).collect();
    let poison = |j| osu::poison_seed(n, p.rank, j);
    for (b, &sd) in sbufs.iter_mut().zip(&mine) {
        osu::fill(b.get_mut(n), sd);
    }
    for (j, b) in rbufs.iter_mut().enumerate() {
        osu::fill(b.get_mut(n), poison(j));
    }
    let mut sends: Vec<&mut [u8]> = sbufs.iter_mut().map(|b| b.get_mut(n)).collect();
    let mut recvs: Vec<&mut [u8]> = rbufs.iter_mut().map(|b| b.get_mut(n)).collect();
    let stale = stale.filter(|_| p.rank == 1);
    let mut spare_bufs: Vec<AlignedBuf> = (0..if stale.is_some() { window } else { 0 })
        .map(|_| AlignedBuf::new(n))
        .collect();
    let mut spare: Vec<&mut [u8]> = spare_bufs.iter_mut().map(|b| b.get_mut(n)).collect();
    let (sender, receiver) = (
        t == Test::Bibw || p.rank == 0,
        t == Test::Bibw || p.rank == 1,
    );
    // osu_bw: rank 0 sends tag 100; osu_bibw: rank 0 sends tag 100, rank 1 sends tag 10.
    let (stag, rtag) = if p.rank == 0 {
        (TAG_DATA, TAG_DATA_BACK)
    } else {
        (TAG_DATA_BACK, TAG_DATA)
    };
    let mut ack = [0u8; 4];
    let rounds = lp.skip + lp.iterations;
    p.sync()?;
    let mut total = Duration::ZERO;
    for i in 0..rounds {
        // This iteration's messages differ from every other's: 24 bytes per slot, before the
        // timer starts (the previous window's sends have completed).
        if sender {
            for (b, &sd) in sends.iter_mut().zip(&mine) {
                osu::stamp(b, sd, i as u64);
            }
        }
        let t0 = (p.rank == 0 && i >= lp.skip).then(Instant::now);
        // The scope's requests borrow the buffers until they complete; the closure takes the
        // borrows by value (a window's receives need each buffer mutably for the whole scope).
        let (sv, rv) = match stale {
            Some(k) if i as u64 > k => (&sends, &mut spare),
            _ => (&sends, &mut recvs),
        };
        p.comm.scope(move |sc| -> Res<()> {
            let mut rreqs = Vec::with_capacity(window);
            if receiver {
                for b in rv {
                    rreqs.push(sc.irecv(b, p.peer, rtag)?);
                }
            }
            let mut sreqs = Vec::with_capacity(window);
            if sender {
                for b in sv {
                    sreqs.push(sc.isend(b, p.peer, stag)?);
                }
            }
            for r in sreqs {
                r.wait()?;
            }
            for r in rreqs {
                r.wait()?;
            }
            Ok(())
        })?;
        if t == Test::Bw {
            if p.rank == 0 {
                p.comm.recv(&mut ack, p.peer, TAG_ACK)?;
            } else {
                p.comm.send(&ack, p.peer, TAG_ACK)?;
            }
        }
        if let Some(t0) = t0 {
            total += t0.elapsed();
        }
    }
    // Check pass, outside the timed loop: every receive buffer holds its slot's last message.
    let last = rounds.saturating_sub(1) as u64;
    let bad = if receiver {
        recvs.iter().enumerate().find_map(|(j, b)| {
            osu::check_last(b, osu::seed(n, p.peer, j), poison(j), last).map(|m| (j, m))
        })
    } else {
        None
    };
    p.agree(t, n, last, bad)?;
    Ok(total)
}

/// [`latency`] with both buffers in device memory (`send_device`, `recv_device`,
/// `sendrecv_device`); the stamps are copied into the send buffer before each iteration's
/// timer starts, the receive buffer is copied back for the check pass.
fn latency_device(
    p: &Pair<'_>,
    t: Test,
    n: usize,
    lp: Loop,
    s: &DevBuf,
    r: &mut DevBuf,
    stale: Option<u64>,
) -> Res<Duration> {
    let (mine, theirs) = (osu::seed(n, p.rank, 0), osu::seed(n, p.peer, 0));
    let poison = osu::poison_seed(n, p.rank, 0);
    s.fill(n, mine)?;
    r.fill(n, poison)?;
    let stale = stale.filter(|_| p.rank == 1);
    let mut spare = match stale {
        Some(_) => Some(DevBuf::new(s.device(), n)?),
        None => None,
    };
    let rounds = lp.skip + lp.iterations;
    p.sync()?;
    let mut total = Duration::ZERO;
    for i in 0..rounds {
        s.stamp(n, mine, i as u64)?;
        let sb = s.view(n);
        let mut into = match (stale, spare.as_mut()) {
            (Some(k), Some(sp)) if i as u64 > k => sp.view_mut(n),
            _ => r.view_mut(n),
        };
        let t0 = (p.rank == 0 && i >= lp.skip).then(Instant::now);
        match (t, p.rank) {
            (Test::Exchange, _) => {
                p.comm
                    .sendrecv_device(&sb, p.peer, TAG_LAT, &mut into, p.peer, TAG_LAT)?;
            }
            (_, 0) => {
                p.comm.send_device(&sb, p.peer, TAG_LAT)?;
                p.comm.recv_device(&mut into, p.peer, TAG_LAT)?;
            }
            _ => {
                p.comm.recv_device(&mut into, p.peer, TAG_LAT)?;
                p.comm.send_device(&sb, p.peer, TAG_LAT)?;
            }
        }
        if let Some(t0) = t0 {
            total += t0.elapsed();
        }
    }
    // Check pass, outside the timed loop: the receive buffer, copied back to the host.
    let last = rounds.saturating_sub(1) as u64;
    let bad = osu::check_last(&r.read(n)?, theirs, poison, last).map(|m| (0, m));
    p.agree(t, n, last, bad)?;
    Ok(total)
}

/// [`bandwidth`] with every window slot's buffers in device memory (scoped `isend_device` /
/// `irecv_device`); the acknowledgement stays a host message, as in OSU's `D D` mode.
fn bandwidth_device(
    p: &Pair<'_>,
    t: Test,
    n: usize,
    lp: Loop,
    sbufs: &[DevBuf],
    rbufs: &mut [DevBuf],
    stale: Option<u64>,
) -> Res<Duration> {
    let window = sbufs.len();
    let mine: Vec<u64> = (0..window).map(|j| osu::seed(n, p.rank, j)).collect();
    let poison = |j| osu::poison_seed(n, p.rank, j);
    for (b, &sd) in sbufs.iter().zip(&mine) {
        b.fill(n, sd)?;
    }
    for (j, b) in rbufs.iter().enumerate() {
        b.fill(n, poison(j))?;
    }
    let stale = stale.filter(|_| p.rank == 1);
    let mut spare_bufs = Vec::new();
    if stale.is_some() {
        for b in rbufs.iter() {
            spare_bufs.push(DevBuf::new(b.device(), n)?);
        }
    }
    let sends: Vec<_> = sbufs.iter().map(|b| b.view(n)).collect();
    let mut recvs: Vec<_> = rbufs.iter_mut().map(|b| b.view_mut(n)).collect();
    let mut spare: Vec<_> = spare_bufs.iter_mut().map(|b| b.view_mut(n)).collect();
    let (sender, receiver) = (
        t == Test::Bibw || p.rank == 0,
        t == Test::Bibw || p.rank == 1,
    );
    let (stag, rtag) = if p.rank == 0 {
        (TAG_DATA, TAG_DATA_BACK)
    } else {
        (TAG_DATA_BACK, TAG_DATA)
    };
    let mut ack = [0u8; 4];
    let rounds = lp.skip + lp.iterations;
    p.sync()?;
    let mut total = Duration::ZERO;
    for i in 0..rounds {
        // The stamps: at most three small host-to-device copies per slot, before the timer.
        if sender {
            for (b, &sd) in sbufs.iter().zip(&mine) {
                b.stamp(n, sd, i as u64)?;
            }
        }
        let t0 = (p.rank == 0 && i >= lp.skip).then(Instant::now);
        let (sv, rv) = match stale {
            Some(k) if i as u64 > k => (&sends, &mut spare),
            _ => (&sends, &mut recvs),
        };
        p.comm.scope(move |sc| -> Res<()> {
            let mut rreqs = Vec::with_capacity(window);
            if receiver {
                for b in rv {
                    rreqs.push(sc.irecv_device(b, p.peer, rtag)?);
                }
            }
            let mut sreqs = Vec::with_capacity(window);
            if sender {
                for b in sv {
                    sreqs.push(sc.isend_device(b, p.peer, stag)?);
                }
            }
            for r in sreqs {
                r.wait()?;
            }
            for r in rreqs {
                r.wait()?;
            }
            Ok(())
        })?;
        if t == Test::Bw {
            if p.rank == 0 {
                p.comm.recv(&mut ack, p.peer, TAG_ACK)?;
            } else {
                p.comm.send(&ack, p.peer, TAG_ACK)?;
            }
        }
        if let Some(t0) = t0 {
            total += t0.elapsed();
        }
    }
    drop((sends, recvs, spare));
    // Check pass, outside the timed loop: every receive buffer, copied back to the host.
    let last = rounds.saturating_sub(1) as u64;
    let mut bad = None;
    if receiver {
        for (j, b) in rbufs.iter().enumerate() {
            if let Some(m) = osu::check_last(&b.read(n)?, osu::seed(n, p.peer, j), poison(j), last)
            {
                bad = Some((j, m));
                break;
            }
        }
    }
    p.agree(t, n, last, bad)?;
    Ok(total)
}

/// Prints both ranks' transport byte counters, so a run shows which path carried the data
/// (shared memory or TCP, and how much of it moved by single copy).
fn report_counters(p: &Pair<'_>, json: bool, device: bool) -> Res<()> {
    let c = p.comm.transport_counters();
    let mine = [
        c.get("shm").bytes_sent,
        c.get("shm").bytes_recv,
        c.get("shm").bytes_cma,
        c.get("tcp").bytes_sent,
        c.get("tcp").bytes_recv,
    ];
    let dmine = rcomm::gpu::stats().map_or([0; 4], |g| {
        [g.ipc_bytes, g.staged_bytes, g.imports, g.import_hits]
    });
    let mut dtheirs = [0u64; 4];
    if p.rank == 1 {
        p.comm.send(&mine, p.peer, TAG_CHECK)?;
        if device {
            p.comm.send(&dmine, p.peer, TAG_CHECK)?;
        }
        return Ok(());
    }
    let mut theirs = [0u64; 5];
    p.comm.recv(&mut theirs, p.peer, TAG_CHECK)?;
    if device {
        p.comm.recv(&mut dtheirs, p.peer, TAG_CHECK)?;
    }
    for (r, v) in [(0, mine), (1, theirs)] {
        let line = format!(
            "# rank {r} bytes: shm sent {} received {} single-copy read {} | tcp sent {} received {}",
            v[0], v[1], v[2], v[3], v[4]
        );
        if json {
            eprintln!("{line}")
        } else {
            println!("{line}")
        }
    }
    if device {
        // Which way the device bytes went (their IPC GETs or host staging), as the device layer
        // counted them.
        let line = |r: u32, d: [u64; 4]| {
            format!(
                "# rank {r} device bytes: ipc read {} staged {} | imports {} (cache hits {}, on the receiving side)",
                d[0], d[1], d[2], d[3]
            )
        };
        for (r, d) in [(0, dmine), (1, dtheirs)] {
            if json {
                eprintln!("{}", line(r, d))
            } else {
                println!("{}", line(r, d))
            }
        }
    }
    Ok(())
}
