//! `rcomm-bench overlap`: how much of a non-blocking allreduce hides behind computation.
//!
//! Per size (`-b`, `-e`, `-f`/`-i` as `rcomm-bench coll`), every rank measures, each as `-w`
//! warm-up rounds, a barrier, then `-n` rounds back to back timed as one loop:
//! - `t_comm`: `iallreduce(buf, Op::Sum)` then `wait` at once;
//! - `t_comp`: the computation alone: [`CHUNK_ROUNDS`] dependent multiply-add rounds on
//!   [`LANES`] `f64` lanes per chunk (registers only, no memory traffic, so it does not compete
//!   with the copies of the collective for memory bandwidth). Rank 0 calibrates the number of
//!   chunks per size so that `t_comp ≈ t_comm` and broadcasts it, so every rank computes the
//!   same;
//! - `t_both`: `iallreduce` started, the computation, `wait`; with `--test-every K` a second mode
//!   also calls `test()` every `K` chunks (progress by hand instead of a progress thread).
//!
//! Each rank's time per round is combined over ranks as `-a` says (as `coll`), and
//! overlap = (t_comm + t_comp − t_both) / min(t_comm, t_comp) × 100, clamped to 0…100
//! ([`overlap_pct`]): 100 % when the slower of the two hides the faster completely, 0 % when
//! they run one after the other. Whether rcomm's progress thread runs is decided by
//! `RCOMM_ASYNC_PROGRESS` in the environment, which the header prints. After the timed loops a
//! check pass per mode runs one started/computed/waited allreduce on the check data of
//! [`crate::coll`] and compares it with the sequential reference (`#wrong`, exit status 1).

use crate::coll::{self, Average, BenchElem, CheckCtx, CollOp, Layout, TIMING_SEED};
use crate::coll_run::{Quiet, WrongResults, exchange};
use rcomm::{Communicator, Dtype, Op};
use std::error::Error;
use std::io::Write;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn Error>>;

/// Dependent multiply-add rounds per chunk of computation.
pub const CHUNK_ROUNDS: usize = 1024;
/// Independent chains per round (a chunk is `CHUNK_ROUNDS × LANES` multiply-adds).
pub const LANES: usize = 8;

/// The state the computation carries from chunk to chunk.
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    s: [f64; LANES],
    /// Block the thread instead of computing (the host thread while an accelerator computes).
    pub sleep: bool,
}

impl Default for Kernel {
    fn default() -> Self {
        Kernel {
            s: std::array::from_fn(|i| i as f64 * 0.125),
            sleep: false,
        }
    }
}

/// How long one chunk of the `sleep` computation blocks the thread.
pub const SLEEP_CHUNK: std::time::Duration = std::time::Duration::from_micros(20);

impl Kernel {
    /// One chunk: every lane `x ← x·a + b`, [`CHUNK_ROUNDS`] times in a row (each round
    /// depends on the previous one; the values converge to 1 and stay finite).
    #[inline(never)]
    pub fn chunk(&mut self) {
        if self.sleep {
            std::thread::sleep(SLEEP_CHUNK);
            return;
        }
        let mut s = self.s;
        for _ in 0..CHUNK_ROUNDS {
            for x in s.iter_mut() {
                *x = *x * 0.999_999_9 + 1e-7;
            }
        }
        self.s = std::hint::black_box(s);
    }

    /// `chunks` chunks; `every(k)` is called after every `k`-th chunk when `k > 0`.
    pub fn run(
        &mut self,
        chunks: u64,
        k: u64,
        mut every: impl FnMut() -> rcomm::Result<()>,
    ) -> rcomm::Result<()> {
        for c in 1..=chunks {
            self.chunk();
            if k > 0 && c % k == 0 {
                every()?;
            }
        }
        Ok(())
    }

    /// The lanes (for tests: the computation was not optimised away).
    pub fn state(&self) -> [f64; LANES] {
        self.s
    }
}

/// (t_comm + t_comp − t_both) / min(t_comm, t_comp) × 100, clamped to 0…100 (0 when a time
/// is not positive).
pub fn overlap_pct(t_comm: f64, t_comp: f64, t_both: f64) -> f64 {
    let m = t_comm.min(t_comp);
    if m <= 0.0 || !m.is_finite() || !t_both.is_finite() {
        return 0.0;
    }
    ((t_comm + t_comp - t_both) / m * 100.0).clamp(0.0, 100.0)
}

/// Chunks that take `target` seconds when `chunks` took `took` seconds (at least 1).
pub fn rescale(chunks: u64, took: f64, target: f64) -> u64 {
    if took <= 0.0 || !took.is_finite() || !target.is_finite() {
        return chunks.max(1);
    }
    ((chunks as f64 * target / took).round() as u64).max(1)
}

/// How the computation and the collective share the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Start, compute, wait.
    Wait,
    /// Start, compute with `test()` every `K` chunks, wait.
    TestEvery(u64),
}

impl Mode {
    /// Column text: `wait` or `test/K`.
    pub fn name(self) -> String {
        match self {
            Mode::Wait => "wait".into(),
            Mode::TestEvery(k) => format!("test/{k}"),
        }
    }

    fn every(self) -> u64 {
        match self {
            Mode::Wait => 0,
            Mode::TestEvery(k) => k,
        }
    }
}

/// One result row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Bytes of the allreduced buffer.
    pub size: usize,
    /// Its elements.
    pub count: usize,
    /// Type name (`float`).
    pub dtype: &'static str,
    /// The mode.
    pub mode: Mode,
    /// Chunks of computation per round.
    pub chunks: u64,
    /// Combined seconds per round: communication alone, computation alone, both.
    pub t_comm: f64,
    /// See `t_comm`.
    pub t_comp: f64,
    /// See `t_comm`.
    pub t_both: f64,
    /// Wrong elements over all ranks in the check pass (`None`: not checked).
    pub wrong: Option<u64>,
}

/// Column header lines.
pub fn table_header() -> [String; 2] {
    [
        format!(
            "# {:>10}  {:>10}  {:>8}  {:>8}  {:>8}  {:>10}  {:>10}  {:>10}  {:>8}  {:>6}",
            "size",
            "count",
            "type",
            "mode",
            "chunks",
            "t_comm",
            "t_comp",
            "t_both",
            "overlap",
            "#wrong"
        ),
        format!(
            "# {:>10}  {:>10}  {:>8}  {:>8}  {:>8}  {:>10}  {:>10}  {:>10}  {:>8}  {:>6}",
            "(B)", "(elements)", "", "", "", "(us)", "(us)", "(us)", "(%)", ""
        ),
    ]
}

/// One table row, under [`table_header`].
pub fn table_row(r: &Row) -> String {
    format!(
        "{:>12}  {:>10}  {:>8}  {:>8}  {:>8}  {:>10.2}  {:>10.2}  {:>10.2}  {:>8.1}  {:>6}",
        r.size,
        r.count,
        r.dtype,
        r.mode.name(),
        r.chunks,
        r.t_comm * 1e6,
        r.t_comp * 1e6,
        r.t_both * 1e6,
        overlap_pct(r.t_comm, r.t_comp, r.t_both),
        r.wrong.map_or_else(|| "N/A".to_string(), |w| w.to_string())
    )
}

/// One JSON object: `{"op":"iallreduce","size","count","type","redop":"sum","mode",
/// "test_every","async_progress","chunks","t_comm_us","t_comp_us","t_both_us","overlap_pct",
/// "wrong"}` (`async_progress`: the value of `RCOMM_ASYNC_PROGRESS`, or null when unset).
pub fn json_row(r: &Row, async_progress: Option<&str>) -> String {
    let ap = async_progress.map_or_else(
        || "null".to_string(),
        |v| format!("\"{}\"", v.replace(['"', '\\'], "")),
    );
    format!(
        "{{\"op\":\"iallreduce\",\"size\":{},\"count\":{},\"type\":\"{}\",\"redop\":\"sum\",\"mode\":\"{}\",\
         \"test_every\":{},\"async_progress\":{ap},\"chunks\":{},\"t_comm_us\":{:.3},\"t_comp_us\":{:.3},\
         \"t_both_us\":{:.3},\"overlap_pct\":{:.1},\"wrong\":{}}}",
        r.size,
        r.count,
        r.dtype,
        r.mode.name(),
        match r.mode {
            Mode::Wait => "null".to_string(),
            Mode::TestEvery(k) => k.to_string(),
        },
        r.chunks,
        r.t_comm * 1e6,
        r.t_comp * 1e6,
        r.t_both * 1e6,
        overlap_pct(r.t_comm, r.t_comp, r.t_both),
        r.wrong
            .map_or_else(|| "null".to_string(), |w| w.to_string())
    )
}

/// What to run, checked before `init`.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Element type.
    pub dtype: Dtype,
    /// Sizes in bytes.
    pub sizes: Vec<usize>,
    /// `-b`, `-e`, `-f`, `-i` as given (for the header).
    pub sweep: (usize, usize, usize, usize),
    /// Timed rounds per size and measurement.
    pub iters: usize,
    /// Warm-up rounds per size and measurement.
    pub warmup: usize,
    /// Check passes per size and mode (0: none).
    pub check: u32,
    /// How per-rank times are combined.
    pub average: Average,
    /// The modes of `t_both` (`wait`, and `test/K` with `--test-every K`).
    pub modes: Vec<Mode>,
    /// JSON objects on stdout instead of the table (headers to stderr).
    pub json: bool,
    /// The computation blocks the thread (sleeps) instead of using the CPU: what the host
    /// thread does while an accelerator computes, and the only way to see overlap when every
    /// core already runs a rank.
    pub sleep: bool,
}

/// Checks what can be checked without ranks.
pub fn validate(p: &Plan) -> Result<(), String> {
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
    if p.sizes.is_empty() {
        return Err("no sizes in -b … -e".into());
    }
    Ok(())
}

fn say(json: bool, line: &str) {
    if json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// Runs the plan on this rank; rank 0 prints.
pub fn run(plan: &Plan) -> Res<()> {
    let world = rcomm::init()?;
    let n = world.size();
    let ap = std::env::var("RCOMM_ASYNC_PROGRESS").ok();
    if world.rank() == 0 {
        let (b, e, f, i) = plan.sweep;
        let step = if f > 1 {
            format!("{f}(factor)")
        } else {
            format!("{i}(bytes)")
        };
        let mut lines = vec![
            format!(
                "# rcomm-bench overlap: iallreduce (sum) started, computation, wait | rcomm {}",
                env!("CARGO_PKG_VERSION")
            ),
            format!(
                "# nRanks {n} minBytes {b} maxBytes {e} step: {step} warmup iters: {} iters: {} validation: {} average: {} ({})",
                plan.warmup,
                plan.iters,
                plan.check,
                plan.average.flag(),
                plan.average.name()
            ),
            match &ap {
                Some(v) => format!("# RCOMM_ASYNC_PROGRESS={v}"),
                None => "# RCOMM_ASYNC_PROGRESS unset (no progress thread: the collective advances in test, wait and other rcomm calls)".into(),
            },
            format!(
                "# compute: {}, calibrated on rank 0 so that t_comp ≈ t_comm, broadcast",
                if plan.sleep {
                    format!(
                        "sleep (chunks of {} µs blocked, as while an accelerator computes)",
                        SLEEP_CHUNK.as_micros()
                    )
                } else {
                    format!(
                        "fma (chunks of {CHUNK_ROUNDS} dependent multiply-add rounds on {LANES} f64 lanes, registers only)"
                    )
                }
            ),
            "# overlap = (t_comm + t_comp - t_both) / min(t_comm, t_comp) x 100, clamped to 0..100".into(),
        ];
        if let Ok(v) = std::env::var("RCOMM_ALGO") {
            lines.insert(2, format!("# RCOMM_ALGO={v}"));
        }
        // With one CPU per rank (rcomm-run binds ranks to cores when they fit), a progress
        // thread shares its core with the computation.
        let cpus = std::thread::available_parallelism().map_or(0, |c| c.get());
        let mut where_ = format!("# CPUs rank 0 may run on: {cpus}");
        if n > 1 {
            where_ += &format!(" | transport to rank 1: {}", world.transport_to(1)?);
        }
        lines.push(where_);
        for l in &lines {
            say(plan.json, l);
        }
    }
    match plan.dtype {
        Dtype::I8 => run_typed::<i8>(&world, plan, ap.as_deref()),
        Dtype::I16 => run_typed::<i16>(&world, plan, ap.as_deref()),
        Dtype::I32 => run_typed::<i32>(&world, plan, ap.as_deref()),
        Dtype::I64 => run_typed::<i64>(&world, plan, ap.as_deref()),
        Dtype::U8 => run_typed::<u8>(&world, plan, ap.as_deref()),
        Dtype::U16 => run_typed::<u16>(&world, plan, ap.as_deref()),
        Dtype::U32 => run_typed::<u32>(&world, plan, ap.as_deref()),
        Dtype::U64 => run_typed::<u64>(&world, plan, ap.as_deref()),
        Dtype::F16 => run_typed::<half::f16>(&world, plan, ap.as_deref()),
        Dtype::Bf16 => run_typed::<half::bf16>(&world, plan, ap.as_deref()),
        Dtype::F32 => run_typed::<f32>(&world, plan, ap.as_deref()),
        Dtype::F64 => run_typed::<f64>(&world, plan, ap.as_deref()),
    }
}

/// Times `rounds` of `f` after `warmup` untimed ones and a barrier: seconds per round, combined
/// over ranks.
fn timed(comm: &Communicator, plan: &Plan, mut f: impl FnMut() -> rcomm::Result<()>) -> Res<f64> {
    for _ in 0..plan.warmup {
        f()?;
    }
    comm.barrier()?;
    let t0 = Instant::now();
    for _ in 0..plan.iters {
        f()?;
    }
    let secs = t0.elapsed().as_secs_f64() / plan.iters as f64;
    let all = exchange(comm, [secs, 0.0])?;
    let per_rank: Vec<f64> = all.iter().map(|v| v[0]).collect();
    Ok(plan.average.combine(&per_rank))
}

/// Rank 0 finds the chunks of computation that take `target` seconds; every rank gets them.
fn calibrate(comm: &Communicator, kernel: &mut Kernel, target: f64) -> Res<u64> {
    let mut chunks = [1u64];
    if comm.rank() == 0 {
        let time = |k: &mut Kernel, c: u64| {
            let t0 = Instant::now();
            let _ = k.run(c, 0, || Ok(()));
            t0.elapsed().as_secs_f64()
        };
        // A first estimate from a short run, then two refinements at the size itself (the
        // median of three runs each, so a preemption does not skew it).
        let mut c = 16u64;
        let mut took = time(kernel, c);
        while took < 200e-6 && c < 1 << 40 {
            c *= 4;
            took = time(kernel, c);
        }
        c = rescale(c, took, target);
        for _ in 0..2 {
            let mut t = [time(kernel, c), time(kernel, c), time(kernel, c)];
            t.sort_by(f64::total_cmp);
            c = rescale(c, t[1], target);
        }
        chunks[0] = c;
    }
    comm.bcast(&mut chunks, 0)?;
    Ok(chunks[0])
}

fn run_typed<T: BenchElem + Send + 'static>(
    comm: &Communicator,
    plan: &Plan,
    ap: Option<&str>,
) -> Res<()> {
    let (n, rank) = (comm.size(), comm.rank());
    let elem = size_of::<T>();
    let mut out = std::io::stdout().lock();
    if rank == 0 && !plan.json {
        for l in table_header() {
            writeln!(out, "{l}")?;
        }
    }
    let mut kernel = Kernel {
        sleep: plan.sleep,
        ..Kernel::default()
    };
    let mut wrong_total = 0u64;
    let mut rep = 0u64;
    for &size in &plan.sizes {
        let count = size / elem;
        let fill = |seed: u64, rank: u32| -> Vec<T> {
            let ctx = check_ctx(n, rank, count, seed);
            let mut v = vec![T::from_i128(0); count];
            coll::fill_input(&ctx, rank, &mut v);
            v
        };
        // The buffer goes into every iallreduce and comes back from its wait.
        let mut buf = Some(fill(TIMING_SEED, rank));
        let t_comm = timed(comm, plan, || {
            let b = buf.take().expect("buffer");
            buf = Some(comm.iallreduce(b, Op::Sum)?.wait()?);
            Ok(())
        })?;
        let chunks = calibrate(comm, &mut kernel, t_comm)?;
        let t_comp = timed(comm, plan, || kernel.run(chunks, 0, || Ok(())))?;
        for &mode in &plan.modes {
            let k = mode.every();
            let t_both = timed(comm, plan, || {
                let b = buf.take().expect("buffer");
                let mut req = comm.iallreduce(b, Op::Sum)?;
                kernel.run(chunks, k, || req.test().map(|_| ()))?;
                buf = Some(req.wait()?);
                Ok(())
            })?;
            // Check pass: the same round on the check data.
            let mut wrong = (plan.check > 0).then_some(0u64);
            for _ in 0..plan.check {
                rep += 1;
                let seed = coll::check_seed(rep, 0);
                let mut req = comm.iallreduce(fill(seed, rank), Op::Sum)?;
                kernel.run(chunks, k, || req.test().map(|_| ()))?;
                let got = req.wait()?;
                let (w, first) = coll::count_wrong(&check_ctx(n, rank, count, seed), &got);
                if let Some((j, g, want)) = first {
                    eprintln!(
                        "rcomm-bench: rank {rank}: overlap {} size {size} {}: {w} wrong elements; first at index {j}: \
                         got {g:?}, expected {want:?}",
                        coll::dtype_name(plan.dtype),
                        mode.name()
                    );
                }
                let sum: u64 = exchange(comm, [w as f64, 0.0])?
                    .iter()
                    .map(|v| v[0] as u64)
                    .sum();
                wrong = wrong.map(|x| x + sum);
                if sum > 0 {
                    break;
                }
            }
            wrong_total += wrong.unwrap_or(0);
            if rank == 0 {
                let row = Row {
                    size: count * elem,
                    count,
                    dtype: coll::dtype_name(plan.dtype),
                    mode,
                    chunks,
                    t_comm,
                    t_comp,
                    t_both,
                    wrong,
                };
                let line = if plan.json {
                    json_row(&row, ap)
                } else {
                    table_row(&row)
                };
                writeln!(out, "{line}")?;
                out.flush()?;
            }
        }
    }
    if rank == 0 {
        say(
            plan.json,
            &format!(
                "# {:<20} : {} {}",
                "Out of bounds values",
                wrong_total,
                if wrong_total > 0 { "FAILED" } else { "OK" }
            ),
        );
    }
    // Keep the computation observable (its result is otherwise unused).
    std::hint::black_box(kernel.state());
    if wrong_total > 0 {
        if rank != 0 {
            return Err(Quiet.into());
        }
        return Err(WrongResults(wrong_total).into());
    }
    Ok(())
}

fn check_ctx(n: u32, rank: u32, count: usize, seed: u64) -> CheckCtx {
    CheckCtx {
        op: CollOp::Allreduce,
        redop: Op::Sum,
        n,
        rank,
        root: 0,
        counts: Layout::Same.counts(count, n as usize),
        seed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_formula() {
        // Fully hidden: both take as long as the longer one.
        assert_eq!(overlap_pct(10.0, 10.0, 10.0), 100.0);
        assert_eq!(overlap_pct(4.0, 10.0, 10.0), 100.0);
        // One after the other.
        assert_eq!(overlap_pct(10.0, 10.0, 20.0), 0.0);
        // Half of the shorter one hidden.
        assert_eq!(overlap_pct(10.0, 4.0, 12.0), 50.0);
        // Clamped: slower than sequential, or faster than either alone (noise).
        assert_eq!(overlap_pct(10.0, 10.0, 25.0), 0.0);
        assert_eq!(overlap_pct(10.0, 10.0, 5.0), 100.0);
        assert_eq!(overlap_pct(0.0, 10.0, 10.0), 0.0);
        assert_eq!(overlap_pct(1.0, 1.0, f64::NAN), 0.0);
    }

    #[test]
    fn rescaling_and_the_kernel() {
        assert_eq!(rescale(100, 2.0, 1.0), 50);
        assert_eq!(rescale(100, 1.0, 3.0), 300);
        assert_eq!(rescale(3, 1.0, 1e-9), 1);
        assert_eq!(rescale(7, 0.0, 1.0), 7);
        let mut k = Kernel::default();
        let before = k.state();
        let mut calls = 0;
        k.run(10, 3, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 3);
        let after = k.state();
        assert_ne!(before, after);
        assert!(after.iter().all(|x| x.is_finite() && *x > 0.0 && *x < 1.0));
    }

    #[test]
    fn rows() {
        let r = Row {
            size: 65536,
            count: 16384,
            dtype: "float",
            mode: Mode::TestEvery(4),
            chunks: 12,
            t_comm: 20e-6,
            t_comp: 20e-6,
            t_both: 30e-6,
            wrong: Some(0),
        };
        let h = table_header();
        let row = table_row(&r);
        let col = |line: &str, name: &str| line.find(name).map(|i| i + name.len());
        assert_eq!(col(&h[0], "mode"), col(&row, "test/4"));
        assert_eq!(col(&h[0], "overlap"), col(&row, "50.0"));
        assert_eq!(row.split_whitespace().count(), 10);
        assert_eq!(
            json_row(&r, Some("1")),
            "{\"op\":\"iallreduce\",\"size\":65536,\"count\":16384,\"type\":\"float\",\"redop\":\"sum\",\
             \"mode\":\"test/4\",\"test_every\":4,\"async_progress\":\"1\",\"chunks\":12,\"t_comm_us\":20.000,\
             \"t_comp_us\":20.000,\"t_both_us\":30.000,\"overlap_pct\":50.0,\"wrong\":0}"
        );
        let w = Row {
            mode: Mode::Wait,
            wrong: None,
            ..r
        };
        assert!(
            json_row(&w, None)
                .contains("\"mode\":\"wait\",\"test_every\":null,\"async_progress\":null")
        );
        assert!(table_row(&w).ends_with("N/A"));
    }
}
