//! `rcomm-bench`: rcomm benchmarks.
//!
//! `rcomm-run -n 2 rcomm-bench pt2pt latency|bw|bibw [-m MIN:MAX] [-i ITERS] [-x WARMUP] [--json]`
//! runs OSU 7.2's `osu_latency`, `osu_bw` or `osu_bibw` methodology over rcomm (see
//! [`rcomm_benches::osu`]); `benches/mpi/osu_like.c` is the same program for MPI.

use clap::{Args, Parser, Subcommand, ValueEnum};
use rcomm::{Communicator, Tag};
use rcomm_benches::osu::{self, AlignedBuf, Loop, SizeRange, Test};
use std::error::Error;
use std::io::Write;
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
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Point-to-point latency and bandwidth between 2 ranks, with OSU 7.2's methodology.
    Pt2pt(Pt2ptArgs),
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
    /// Print one JSON object per size (`{"size":N,"latency_us":X}` or
    /// `{"size":N,"bandwidth_MBps":X}`) instead of the table; headers go to stderr.
    #[arg(long)]
    json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum TestArg {
    Latency,
    Bw,
    Bibw,
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
}

fn plan(a: &Pt2ptArgs) -> Res<Plan> {
    let test = match a.test {
        TestArg::Latency => Test::Latency,
        TestArg::Bw => Test::Bw,
        TestArg::Bibw => Test::Bibw,
    };
    let window = a.window as usize;
    let buffers = match (test, a.buffers) {
        (Test::Latency, b) => b.unwrap_or(BufNum::Single),
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
    let sizes: Vec<usize> = a
        .range
        .sizes()
        .into_iter()
        .filter(|&s| test.runs_size(s))
        .collect();
    let largest = sizes.last().copied().unwrap_or(0);
    let per_rank = if buffers == BufNum::Multiple && test != Test::Latency {
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
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Cmd::Pt2pt(args) = cli.cmd;
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

    /// Combines both ranks' check results (first bad buffer: slot and byte offset) on both
    /// ranks; an error names the rank, slot and offset.
    fn agree(&self, test: Test, size: usize, mine: Option<(usize, usize)>) -> Res<()> {
        let enc = |m: Option<(usize, usize)>| {
            m.map_or([0u64; 3], |(slot, off)| [1, slot as u64, off as u64])
        };
        let mut theirs = [0u64; 3];
        if self.rank == 0 {
            self.comm.recv(&mut theirs, self.peer, TAG_CHECK)?;
            self.comm.send(&enc(mine), self.peer, TAG_CHECK)?;
        } else {
            self.comm.send(&enc(mine), self.peer, TAG_CHECK)?;
            self.comm.recv(&mut theirs, self.peer, TAG_CHECK)?;
        }
        let mut bad = Vec::new();
        if let Some((slot, off)) = mine {
            bad.push((self.rank, slot as u64, off as u64));
        }
        if theirs[0] != 0 {
            bad.push((self.peer, theirs[1], theirs[2]));
        }
        bad.sort();
        match bad.first() {
            None => Ok(()),
            Some(_) if self.rank != 0 => Err(Quiet.into()),
            Some((r, slot, off)) => Err(format!(
                "{test}, size {size}: rank {r} received wrong data in receive buffer {slot} at byte {off} (the check \
                 pass after the timed loop compares the last message with the sender's pattern)"
            )
            .into()),
        }
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
    if rank == 0 {
        let header = [
            t.title().to_string(),
            format!(
                "# rcomm {} | transport to rank 1: {} | buffers: {} | window: {}",
                env!("CARGO_PKG_VERSION"),
                world.transport_to(1)?,
                if plan.buffers == BufNum::Single {
                    "single"
                } else {
                    "multiple"
                },
                if t == Test::Latency {
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
    let mut single = (plan.buffers == BufNum::Single)
        .then(|| (AlignedBuf::new(largest), AlignedBuf::new(largest)));
    let mut out = std::io::stdout().lock();
    for &n in &plan.sizes {
        let lp = plan.counts.for_size(n);
        let total = match t {
            Test::Latency => {
                let mut per_size;
                let (s, r) = match single.as_mut() {
                    Some((s, r)) => (s, r),
                    None => {
                        per_size = (AlignedBuf::new(n), AlignedBuf::new(n));
                        (&mut per_size.0, &mut per_size.1)
                    }
                };
                latency(&pair, n, lp, s, r)?
            }
            Test::Bw | Test::Bibw => {
                let mut s: Vec<AlignedBuf> = (0..plan.window).map(|_| AlignedBuf::new(n)).collect();
                let mut r: Vec<AlignedBuf> = (0..plan.window).map(|_| AlignedBuf::new(n)).collect();
                bandwidth(&pair, t, n, lp, &mut s, &mut r)?
            }
        };
        if rank == 0 {
            let v = t.figure(n, lp.iterations, plan.window, total.as_secs_f64());
            let line = if plan.json { t.json(n, v) } else { t.row(n, v) };
            writeln!(out, "{line}")?;
            out.flush()?;
        }
    }
    report_counters(&pair, plan.json)?;
    Ok(())
}

/// `osu_latency` for one size: blocking send from `s`, blocking receive into `r`.
fn latency(
    p: &Pair<'_>,
    n: usize,
    lp: Loop,
    s: &mut AlignedBuf,
    r: &mut AlignedBuf,
) -> Res<Duration> {
    osu::fill(s.get_mut(n), osu::seed(n, p.rank, 0));
    osu::fill(r.get_mut(n), osu::poison_seed(n, p.rank, 0));
    let (sb, rb) = (s.get(n), r.get_mut(n));
    p.sync()?;
    let mut total = Duration::ZERO;
    if p.rank == 0 {
        for i in 0..lp.skip + lp.iterations {
            let t0 = (i >= lp.skip).then(Instant::now);
            p.comm.send(sb, p.peer, TAG_LAT)?;
            p.comm.recv(&mut *rb, p.peer, TAG_LAT)?;
            if let Some(t0) = t0 {
                total += t0.elapsed();
            }
        }
    } else {
        for _ in 0..lp.skip + lp.iterations {
            p.comm.recv(&mut *rb, p.peer, TAG_LAT)?;
            p.comm.send(sb, p.peer, TAG_LAT)?;
        }
    }
    // Check pass, outside the timed loop.
    let bad = osu::first_mismatch(rb, osu::seed(n, p.peer, 0)).map(|off| (0, off));
    p.agree(Test::Latency, n, bad)?;
    Ok(total)
}

/// `osu_bw` / `osu_bibw` for one size, one send and one receive buffer per window slot.
fn bandwidth(
    p: &Pair<'_>,
    t: Test,
    n: usize,
    lp: Loop,
    sbufs: &mut [AlignedBuf],
    rbufs: &mut [AlignedBuf],
) -> Res<Duration> {
    for (j, b) in sbufs.iter_mut().enumerate() {
        osu::fill(b.get_mut(n), osu::seed(n, p.rank, j));
    }
    for (j, b) in rbufs.iter_mut().enumerate() {
        osu::fill(b.get_mut(n), osu::poison_seed(n, p.rank, j));
    }
    let window = sbufs.len();
    let sends: Vec<&[u8]> = sbufs.iter().map(|b| b.get(n)).collect();
    let mut recvs: Vec<&mut [u8]> = rbufs.iter_mut().map(|b| b.get_mut(n)).collect();
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
    p.sync()?;
    let mut total = Duration::ZERO;
    for i in 0..lp.skip + lp.iterations {
        let t0 = (p.rank == 0 && i >= lp.skip).then(Instant::now);
        // The scope's requests borrow the buffers until they complete; the closure takes the
        // borrows by value (a window's receives need each buffer mutably for the whole scope).
        let (sv, rv) = (&sends, &mut recvs);
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
    // Check pass, outside the timed loop: every receive buffer holds its slot's message.
    let bad = if receiver {
        recvs
            .iter()
            .enumerate()
            .find_map(|(j, b)| osu::first_mismatch(b, osu::seed(n, p.peer, j)).map(|off| (j, off)))
    } else {
        None
    };
    p.agree(t, n, bad)?;
    Ok(total)
}

/// Prints both ranks' transport byte counters, so a run shows which path carried the data
/// (shared memory or TCP, and how much of it moved by single copy).
fn report_counters(p: &Pair<'_>, json: bool) -> Res<()> {
    let c = p.comm.transport_counters();
    let mine = [
        c.shm.bytes_sent,
        c.shm.bytes_recv,
        c.shm.bytes_cma,
        c.tcp.bytes_sent,
        c.tcp.bytes_recv,
    ];
    if p.rank == 1 {
        p.comm.send(&mine, p.peer, TAG_CHECK)?;
        return Ok(());
    }
    let mut theirs = [0u64; 5];
    p.comm.recv(&mut theirs, p.peer, TAG_CHECK)?;
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
    Ok(())
}
