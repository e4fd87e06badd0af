//! `rcomm-bench pt2pt`: OSU's `osu_latency`, `osu_bw` and `osu_bibw` (and `exchange`) between
//! two ranks, on host or device buffers: the options, the plan checked before `init`, and the
//! timed loops.

use clap::{Args, ValueEnum};
use rcomm::{Communicator, Tag};
use rcomm_benches::device::{self, DevBuf};
use rcomm_benches::osu::{self, AlignedBuf, Loop, Mismatch, SizeRange, Test};
use std::error::Error;
use std::io::Write;
use std::time::{Duration, Instant};

pub(super) type Res<T> = Result<T, Box<dyn Error>>;

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

#[derive(Args, Debug)]
pub(super) struct Pt2ptArgs {
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
pub(super) struct Plan {
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

pub(super) fn plan(a: &Pt2ptArgs) -> Res<Plan> {
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

/// A failure that rank 0 reports for every rank (the others exit without repeating it).
#[derive(Debug)]
pub(super) struct Quiet;

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

pub(super) fn run(plan: &Plan) -> Res<()> {
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
