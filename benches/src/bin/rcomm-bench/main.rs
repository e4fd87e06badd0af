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

use clap::{Args, Parser, Subcommand};
use rcomm::{Dtype, Op};
use rcomm_benches::coll::{self, CollOp};
use rcomm_benches::coll_run::{self, WrongResults};
use rcomm_benches::device;
use rcomm_benches::osu;
use rcomm_benches::overlap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

mod pt2pt;

use pt2pt::{Pt2ptArgs, Quiet, plan, run};

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
    /// Writes the device reduction kernels compiled by NVRTC, a CUBIN and PTX per architecture,
    /// for machines without NVRTC, or whose NVRTC does not know their GPU (`RCOMM_PTX_DIR`).
    Ptx(PtxArgs),
}

/// `ptx`: two files per architecture.
#[derive(Args, Debug)]
struct PtxArgs {
    /// Architectures (`sm_80,sm_90`; default: every one the sources are tested for).
    #[arg(long, value_delimiter = ',')]
    arch: Vec<String>,
    /// Folder to write `rcomm-reduce-<arch>.cubin` and `rcomm-reduce-<arch>.ptx` into.
    #[arg(long, default_value = ".")]
    out: std::path::PathBuf,
}

fn main_ptx(a: &PtxArgs) -> ExitCode {
    use rcomm_kernels::cuda::{compile_cubin, compile_ptx, image};
    let archs: Vec<String> = if a.arch.is_empty() {
        rcomm_kernels::cuda::ARCHS
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        a.arch.clone()
    };
    for arch in &archs {
        let Some(sm) = image::parse_sm(arch).filter(|_| arch.starts_with("sm_")) else {
            eprintln!("rcomm-bench ptx: {arch:?} is not an architecture (sm_XY)");
            return ExitCode::FAILURE;
        };
        let cubin = a.out.join(rcomm::gpu::cubin_file(arch));
        let ptx = a.out.join(rcomm::gpu::ptx_file(arch));
        let res = compile_cubin(arch)
            .map_err(|e| e.to_string())
            .and_then(|c| std::fs::write(&cubin, &c[..]).map_err(|e| e.to_string()))
            .and_then(|()| compile_ptx(&format!("compute_{sm}")).map_err(|e| e.to_string()))
            .and_then(|p| {
                // Where the PTX is dated: the oldest driver that JIT-compiles it.
                let when = image::ptx_header(&p)
                    .ok()
                    .and_then(|(isa, _)| image::ptx_min_driver(isa))
                    .map_or_else(String::new, |d| {
                        format!(" (needs driver {})", image::driver_name(d))
                    });
                std::fs::write(&ptx, p.as_bytes())
                    .map(|()| when)
                    .map_err(|e| e.to_string())
            });
        match res {
            Ok(when) => {
                println!("{}", cubin.display());
                println!("{}{when}", ptx.display());
            }
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
