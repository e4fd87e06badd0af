//! The nccl-tests methodology for collectives, as plain data and functions (no ranks needed).
//!
//! What nccl-tests (`all_reduce_perf` & co.) does, and what `rcomm-bench coll` and the
//! collective modes of `benches/mpi/osu_like.c` therefore do:
//! - sizes from `-b` to `-e`, multiplied by `-f` (or incremented by `-i` bytes when `-f` is 1);
//!   a size of S bytes is `S / sizeof(type)` elements, cut for each operation as nccl-tests'
//!   `getCollByteCount` does ([`Layout::counts`]): allgather and gather send `count/n` and
//!   receive `n·(count/n)`, reduce_scatter and scatter the other way round, alltoall moves
//!   `n·(count/n)` both ways; the printed size is the larger buffer and the printed count the
//!   count passed to the call;
//! - per size, out-of-place then in-place: warm-up calls, a barrier, then `-n` calls back to back
//!   timed as one loop; each rank's time per call is combined across ranks as `-a` says
//!   (0 = rank 0's, 1 = the average (default), 2 = the minimum, 3 = the maximum);
//!   successive calls use successive windows of a buffer allocated for the largest size (as
//!   nccl-tests' `startColl` shifts its pointers), so a sweep does not run out of one cache-hot
//!   window;
//! - algbw = S / t (GB/s, 10⁹ bytes), busbw = algbw × a factor ([`BusFactor`]); barrier reports a
//!   time only;
//! - a separate check pass after the timed loop (`-c N`: N passes, 0 = none): inputs depend on
//!   (rank, index, pass), outputs start poisoned, one call, every rank compares its output with a
//!   sequential reference ([`reference`]): exact for integers (wrapping, as the kernels define),
//!   within a stated bound for floats ([`tolerance`]); `#wrong` is the number of wrong elements
//!   summed over ranks;
//! - the table has nccl-tests' columns (`size count type redop root` then `time algbw busbw
//!   #wrong` twice) and number formats ([`float_str`]), and ends with the `Avg bus bandwidth`
//!   line (mean busbw over every printed result).

use rcomm::{Dtype, Element, Op};
use std::fmt::{self, Write as _};

/// Most bytes of one buffer (send or receive) at the largest size.
pub const MAX_BYTES: usize = 1 << 30;

/// Seed of the data the timed loop runs on (nccl-tests initialises with 99 before timing).
pub const TIMING_SEED: u64 = 99;

/// A collective operation the benchmark knows. Whether rcomm implements it is decided where the
/// call is made (`rcomm-bench`'s dispatch), so the table can name operations before rcomm has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CollOp {
    /// `allreduce`.
    Allreduce,
    /// `reduce` to a root.
    Reduce,
    /// `bcast` from a root.
    Bcast,
    /// `allgather`.
    Allgather,
    /// `reduce_scatter` (equal blocks).
    ReduceScatter,
    /// `alltoall`.
    Alltoall,
    /// `gather` to a root.
    Gather,
    /// `scatter` from a root.
    Scatter,
    /// Inclusive `scan`.
    Scan,
    /// `barrier`.
    Barrier,
}

/// How a size becomes send, receive and call counts (nccl-tests' `getCollByteCount`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One vector of `count` elements in and out (allreduce, reduce, bcast, scan).
    Same,
    /// `count/n` in, `n` blocks of it out (allgather, gather).
    Gather,
    /// `n` blocks of `count/n` in, one block out (reduce_scatter, scatter).
    Scatter,
    /// `n` blocks of `count/n` in and out (alltoall).
    AllToAll,
    /// No data (barrier).
    Empty,
}

/// Element counts of one size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Elements in each rank's send buffer.
    pub send: usize,
    /// Elements in each rank's receive buffer.
    pub recv: usize,
    /// The count passed to the call (and printed in the `count` column).
    pub param: usize,
}

impl Counts {
    /// The larger buffer, in elements (the printed size is this times the element size).
    pub fn total(&self) -> usize {
        self.send.max(self.recv)
    }
}

impl Layout {
    /// Counts for `count` elements (the size divided by the element size) on `n` ranks.
    pub fn counts(self, count: usize, n: usize) -> Counts {
        let per = count / n.max(1);
        match self {
            Layout::Same => Counts {
                send: count,
                recv: count,
                param: count,
            },
            Layout::Gather => Counts {
                send: per,
                recv: per * n,
                param: per,
            },
            Layout::Scatter => Counts {
                send: per * n,
                recv: per,
                param: per,
            },
            Layout::AllToAll => Counts {
                send: per * n,
                recv: per * n,
                param: per,
            },
            Layout::Empty => Counts {
                send: 0,
                recv: 0,
                param: 0,
            },
        }
    }
}

/// The bus bandwidth factor of an operation (nccl-tests' `getBw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusFactor {
    /// `2(n−1)/n` (allreduce).
    TwoNMinusOneOverN,
    /// `(n−1)/n` (allgather, reduce_scatter, alltoall, gather, scatter).
    NMinusOneOverN,
    /// `1` (bcast, reduce, scan).
    One,
    /// No bandwidth: time only (barrier).
    TimeOnly,
}

impl BusFactor {
    /// The factor on `n` ranks (`None` for time-only operations).
    pub fn factor(self, n: usize) -> Option<f64> {
        let n = n.max(1) as f64;
        match self {
            BusFactor::TwoNMinusOneOverN => Some(2.0 * (n - 1.0) / n),
            BusFactor::NMinusOneOverN => Some((n - 1.0) / n),
            BusFactor::One => Some(1.0),
            BusFactor::TimeOnly => None,
        }
    }
}

/// One row of the operation table.
#[derive(Debug, Clone, Copy)]
pub struct OpInfo {
    /// The operation.
    pub op: CollOp,
    /// Name on the command line (`rcomm-bench coll NAME`).
    pub name: &'static str,
    /// The nccl-tests program with this layout (`all_reduce_perf`), for the header; empty where
    /// nccl-tests has none (scan, barrier).
    pub perf: &'static str,
    /// Whether it takes a reduction op (`-o`); otherwise the `redop` column says `none`.
    pub reduces: bool,
    /// Whether it takes a root (`-r`); otherwise the `root` column says `-1`.
    pub rooted: bool,
    /// How a size becomes counts.
    pub layout: Layout,
    /// Bus bandwidth factor.
    pub bus: BusFactor,
}

/// Every operation, in the order of `--help`. Adding one is a row here, an arm in
/// [`reference`]'s caller ([`expected`]) and a call in `rcomm-bench`'s dispatch.
pub const OPS: &[OpInfo] = &[
    OpInfo {
        op: CollOp::Allreduce,
        name: "allreduce",
        perf: "all_reduce_perf",
        reduces: true,
        rooted: false,
        layout: Layout::Same,
        bus: BusFactor::TwoNMinusOneOverN,
    },
    OpInfo {
        op: CollOp::Reduce,
        name: "reduce",
        perf: "reduce_perf",
        reduces: true,
        rooted: true,
        layout: Layout::Same,
        bus: BusFactor::One,
    },
    OpInfo {
        op: CollOp::Bcast,
        name: "bcast",
        perf: "broadcast_perf",
        reduces: false,
        rooted: true,
        layout: Layout::Same,
        bus: BusFactor::One,
    },
    OpInfo {
        op: CollOp::Allgather,
        name: "allgather",
        perf: "all_gather_perf",
        reduces: false,
        rooted: false,
        layout: Layout::Gather,
        bus: BusFactor::NMinusOneOverN,
    },
    OpInfo {
        op: CollOp::ReduceScatter,
        name: "reduce_scatter",
        perf: "reduce_scatter_perf",
        reduces: true,
        rooted: false,
        layout: Layout::Scatter,
        bus: BusFactor::NMinusOneOverN,
    },
    OpInfo {
        op: CollOp::Alltoall,
        name: "alltoall",
        perf: "alltoall_perf",
        reduces: false,
        rooted: false,
        layout: Layout::AllToAll,
        bus: BusFactor::NMinusOneOverN,
    },
    OpInfo {
        op: CollOp::Gather,
        name: "gather",
        perf: "gather_perf",
        reduces: false,
        rooted: true,
        layout: Layout::Gather,
        bus: BusFactor::NMinusOneOverN,
    },
    OpInfo {
        op: CollOp::Scatter,
        name: "scatter",
        perf: "scatter_perf",
        reduces: false,
        rooted: true,
        layout: Layout::Scatter,
        bus: BusFactor::NMinusOneOverN,
    },
    OpInfo {
        op: CollOp::Scan,
        name: "scan",
        perf: "",
        reduces: true,
        rooted: false,
        layout: Layout::Same,
        bus: BusFactor::One,
    },
    OpInfo {
        op: CollOp::Barrier,
        name: "barrier",
        perf: "",
        reduces: false,
        rooted: false,
        layout: Layout::Empty,
        bus: BusFactor::TimeOnly,
    },
];

impl CollOp {
    /// This operation's row of [`OPS`].
    pub fn info(self) -> &'static OpInfo {
        OPS.iter()
            .find(|i| i.op == self)
            .expect("every operation has a row")
    }

    /// Name on the command line.
    pub fn name(self) -> &'static str {
        self.info().name
    }
}

impl fmt::Display for CollOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses an operation name (`reduce-scatter` and `reducescatter` are accepted too).
pub fn parse_op(s: &str) -> Result<CollOp, String> {
    let t = s.trim().to_ascii_lowercase().replace('-', "_");
    let t = match t.as_str() {
        "reducescatter" => "reduce_scatter",
        "broadcast" => "bcast",
        "all_reduce" => "allreduce",
        "all_gather" => "allgather",
        x => x,
    };
    OPS.iter()
        .find(|i| i.name == t)
        .map(|i| i.op)
        .ok_or_else(|| {
            format!(
                "unknown collective {s:?}; valid: {}",
                OPS.iter().map(|i| i.name).collect::<Vec<_>>().join(", ")
            )
        })
}

/// How per-rank times are combined (`-a`, as nccl-tests: 0 = rank 0, 1 = average, 2 = minimum,
/// 3 = maximum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Average {
    /// Rank 0's time.
    Rank0,
    /// The mean over ranks (nccl-tests' default).
    Avg,
    /// The fastest rank's time.
    Min,
    /// The slowest rank's time.
    Max,
}

impl Average {
    /// From nccl-tests' `-a` number.
    pub fn from_flag(v: u8) -> Result<Self, String> {
        match v {
            0 => Ok(Average::Rank0),
            1 => Ok(Average::Avg),
            2 => Ok(Average::Min),
            3 => Ok(Average::Max),
            _ => Err(format!(
                "-a {v}: expected 0 (rank 0), 1 (average), 2 (minimum) or 3 (maximum)"
            )),
        }
    }

    /// The `-a` number.
    pub fn flag(self) -> u8 {
        match self {
            Average::Rank0 => 0,
            Average::Avg => 1,
            Average::Min => 2,
            Average::Max => 3,
        }
    }

    /// Short name for the header.
    pub fn name(self) -> &'static str {
        match self {
            Average::Rank0 => "rank0",
            Average::Avg => "avg",
            Average::Min => "min",
            Average::Max => "max",
        }
    }

    /// Combines per-rank values (in rank order).
    pub fn combine(self, per_rank: &[f64]) -> f64 {
        match self {
            Average::Rank0 => per_rank.first().copied().unwrap_or(0.0),
            Average::Avg => per_rank.iter().sum::<f64>() / per_rank.len().max(1) as f64,
            Average::Min => per_rank.iter().copied().fold(f64::INFINITY, f64::min),
            Average::Max => per_rank.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// nccl-tests' name of a dtype (`float`, `bfloat16`, …; rcomm's 16-bit integers, which NCCL
/// lacks, are `int16` and `uint16`).
pub fn dtype_name(d: Dtype) -> &'static str {
    match d {
        Dtype::I8 => "int8",
        Dtype::U8 => "uint8",
        Dtype::I16 => "int16",
        Dtype::U16 => "uint16",
        Dtype::I32 => "int32",
        Dtype::U32 => "uint32",
        Dtype::I64 => "int64",
        Dtype::U64 => "uint64",
        Dtype::F16 => "half",
        Dtype::Bf16 => "bfloat16",
        Dtype::F32 => "float",
        Dtype::F64 => "double",
    }
}

/// Parses `-d`: nccl-tests' names (`int8 uint8 int32 uint32 int64 uint64 half float double
/// bfloat16`), rcomm's (`i8` … `f64`, `bf16`, `f16`) and a few common aliases.
pub fn parse_dtype(s: &str) -> Result<Dtype, String> {
    let t = s.trim().to_ascii_lowercase();
    if let Some(d) = Dtype::ALL.into_iter().find(|&d| dtype_name(d) == t) {
        return Ok(d);
    }
    let alias = match t.as_str() {
        "char" => Some(Dtype::I8),
        "int" => Some(Dtype::I32),
        "float16" | "fp16" => Some(Dtype::F16),
        "float32" | "fp32" => Some(Dtype::F32),
        "float64" | "fp64" => Some(Dtype::F64),
        _ => None,
    };
    if let Some(d) = alias {
        return Ok(d);
    }
    t.parse::<Dtype>().map_err(|_| {
        format!(
            "unknown data type {s:?}; valid: {} (or rcomm's names i8 … f64, bf16)",
            Dtype::ALL.map(dtype_name).join(", ")
        )
    })
}

/// Parses `-o`: `sum prod min max avg` (nccl-tests) and rcomm's `band bor bxor`.
pub fn parse_redop(s: &str) -> Result<Op, String> {
    s.parse::<Op>().map_err(|e| e.to_string())
}

/// The sizes of a sweep: from `min` to `max` multiplied by `factor` (> 1), or else incremented
/// by `step` bytes (nccl-tests' `-f` / `-i`). A size of 0 is followed by 1 in factor mode.
pub fn sizes(min: usize, max: usize, factor: usize, step: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut s = min;
    while s <= max {
        v.push(s);
        let next = if factor > 1 {
            if s == 0 { 1 } else { s.saturating_mul(factor) }
        } else {
            s.saturating_add(step.max(1))
        };
        if next <= s {
            break;
        }
        s = next;
    }
    v
}

/// nccl-tests' `getFloatStr`: a value in `width` characters, with 2, 1 or 0 decimals as the
/// integer part grows, then in exponent form.
pub fn float_str(value: f64, width: usize) -> String {
    let mut power = 0usize;
    let mut val = 1.0f64;
    while value >= val && power < 400 {
        power += 1;
        val *= 10.0;
    }
    if power + 2 < width {
        format!("{value:>width$.2}")
    } else if power + 1 < width {
        format!("{value:>width$.1}")
    } else if power < width + 1 {
        format!("{value:>width$.0}")
    } else {
        // C's "%*.1e": one decimal, a signed exponent of at least two digits.
        let s = format!("{value:.1e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        let sign = if e < 0 { '-' } else { '+' };
        format!("{:>width$}", format!("{m}e{sign}{:02}", e.abs()))
    }
}

/// C's `%g` (6 significant digits, trailing zeros removed), as nccl-tests prints the average
/// bus bandwidth.
pub fn g_str(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v == 0.0 { "0".into() } else { format!("{v}") };
    }
    let exp = v.abs().log10().floor() as i32;
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..6).contains(&exp) {
        let s = format!("{v:.5e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        let sign = if e < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(m.to_string()), e.abs())
    } else {
        let decimals = (5 - exp).max(0) as usize;
        trim(format!("{v:.decimals$}"))
    }
}

/// One measured variant (out-of-place or in-place) of one size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measure {
    /// Combined time per call in µs.
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s (`None` for time-only operations).
    pub algbw: Option<f64>,
    /// Bus bandwidth, GB/s (`None` for time-only operations).
    pub busbw: Option<f64>,
    /// Wrong elements over all ranks (`None` when not checked).
    pub wrong: Option<u64>,
}

impl Measure {
    /// From the combined time per call, the size in bytes and the bus factor.
    pub fn new(secs: f64, bytes: usize, factor: Option<f64>, wrong: Option<u64>) -> Self {
        let algbw = factor.map(|_| {
            if secs > 0.0 {
                bytes as f64 / 1e9 / secs
            } else {
                0.0
            }
        });
        Measure {
            time_us: secs * 1e6,
            algbw,
            busbw: algbw.zip(factor).map(|(a, f)| a * f),
            wrong,
        }
    }
}

/// The fixed columns of one row.
#[derive(Debug, Clone, PartialEq)]
pub struct RowHead {
    /// Printed size in bytes (the larger buffer).
    pub size: usize,
    /// Printed count (the count passed to the call).
    pub count: usize,
    /// Type name (`float`; `none` for barrier).
    pub dtype: &'static str,
    /// Reduction name (`sum`; `none` for non-reductions).
    pub redop: &'static str,
    /// Root (−1 for operations without one).
    pub root: i64,
}

/// The column header lines (nccl-tests' `writeResultHeader`).
pub fn table_header() -> [String; 4] {
    let e = "";
    [
        "#".to_string(),
        format!(
            "# {e:>10}  {e:>12}  {e:>8}  {e:>6}  {e:>6}           out-of-place                       in-place"
        ),
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
            "size",
            "count",
            "type",
            "redop",
            "root",
            "time",
            "algbw",
            "busbw",
            "#wrong",
            "time",
            "algbw",
            "busbw",
            "#wrong"
        ),
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}",
            "(B)",
            "(elements)",
            "",
            "",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)"
        ),
    ]
}

fn body(m: Option<&Measure>) -> String {
    let Some(m) = m else {
        return format!("  {:>7}  {:>6}  {:>6}  {:>6}", "N/A", "N/A", "N/A", "N/A");
    };
    let bw = |v: Option<f64>| v.map_or_else(|| format!("{:>6}", "N/A"), |v| float_str(v, 6));
    let wrong = m
        .wrong
        .map_or_else(|| "   N/A".to_string(), |w| format!("{w:>6}"));
    format!(
        "  {}  {}  {}  {}",
        float_str(m.time_us, 7),
        bw(m.algbw),
        bw(m.busbw),
        wrong
    )
}

/// One table row: the fixed columns, then out-of-place and in-place (`None`: the variant does
/// not exist, printed `N/A`).
pub fn table_row(h: &RowHead, oop: Option<&Measure>, ip: Option<&Measure>) -> String {
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{}",
        h.size,
        h.count,
        h.dtype,
        h.redop,
        h.root,
        body(oop),
        body(ip)
    )
}

fn json_num(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => "null".into(),
    }
}

fn json_body(m: &Measure) -> String {
    format!(
        "\"time_us\":{},\"algbw\":{},\"busbw\":{},\"wrong\":{}",
        json_num(Some(m.time_us), 3),
        json_num(m.algbw, 4),
        json_num(m.busbw, 4),
        m.wrong
            .map_or_else(|| "null".to_string(), |w| w.to_string())
    )
}

/// One JSON line: `{"op":…,"algo":…,"size":…,"count":…,"type":…,"redop":…,"root":…,
/// "time_us":…,"algbw":…,"busbw":…,"wrong":…,"inplace":{"time_us":…,"algbw":…,"busbw":…,
/// "wrong":…}}`; a variant that does not exist has `null` values (`"inplace":null`).
pub fn json_row(
    op: CollOp,
    algo: &str,
    h: &RowHead,
    oop: Option<&Measure>,
    ip: Option<&Measure>,
) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\"op\":\"{}\",\"algo\":\"{algo}\",\"size\":{},\"count\":{},\"type\":\"{}\",\"redop\":\"{}\",\"root\":{},",
        op.name(),
        h.size,
        h.count,
        h.dtype,
        h.redop,
        h.root
    );
    match oop {
        Some(m) => s.push_str(&json_body(m)),
        None => s.push_str("\"time_us\":null,\"algbw\":null,\"busbw\":null,\"wrong\":null"),
    }
    match ip {
        Some(m) => {
            let _ = write!(s, ",\"inplace\":{{{}}}}}", json_body(m));
        }
        None => s.push_str(",\"inplace\":null}"),
    }
    s
}

/// The footer (nccl-tests' `writeResultFooter`): failed results and the mean bus bandwidth
/// over every printed result (`None`: time-only operation).
pub fn footer(failed_results: usize, avg_busbw: Option<f64>) -> [String; 3] {
    [
        format!(
            "# {:<20} : {} {}",
            "Out of bounds values",
            failed_results,
            if failed_results > 0 { "FAILED" } else { "OK" }
        ),
        format!(
            "# {:<20} : {}",
            "Avg bus bandwidth",
            avg_busbw.map_or_else(|| "N/A".to_string(), g_str)
        ),
        "#".to_string(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Data and the sequential reference.

/// The 64-bit mix of the check data (`benches/mpi/osu_like.c` computes the same).
#[inline]
pub fn mix(seed: u64, rank: u32, idx: u64) -> u64 {
    let mut x = seed
        ^ u64::from(rank).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ idx.wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ 0x0005_DEEC_E66D;
    x ^= x >> 31;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 29;
    x
}

/// Seed of check pass `pass` of one result (`variant` 0 = out-of-place, 1 = in-place).
pub fn check_seed(pass: u64, variant: u64) -> u64 {
    0x00C0_FFEE ^ (pass << 8) ^ variant
}

/// Seed of the poison written into outputs before a check pass.
pub fn poison_seed(seed: u64) -> u64 {
    seed ^ 0xA5A5_A5A5_A5A5_A5A5
}

/// Integer or float semantics of an element type, for the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Class {
    /// Integers: exact, wrapping.
    Int,
    /// Floats with unit roundoff ×2 (`eps`) and the largest sum of magnitudes up to which every
    /// partial sum of the check data is exact (`exact_up_to`; the data is on a grid of
    /// `grid`).
    Float {
        /// Machine epsilon (2^−(mantissa bits)).
        eps: f64,
        /// Sums of magnitudes up to this stay exact on the data's grid.
        exact_up_to: f64,
    },
}

/// An element type the benchmark can fill and check.
pub trait BenchElem: Element + PartialEq + fmt::Debug {
    /// Integer or float.
    const CLASS: Class;
    /// From an integer (wrapping for integer types; floats get the nearest value).
    fn from_i128(v: i128) -> Self;
    /// From a float (floats: rounded to nearest; integers: not used).
    fn from_f64(v: f64) -> Self;
    /// As an integer (integer types only; floats truncate).
    fn to_i128(self) -> i128;
    /// As a float.
    fn to_f64(self) -> f64;
}

macro_rules! bench_int {
    ($($t:ty),*) => {$(
        impl BenchElem for $t {
            const CLASS: Class = Class::Int;
            fn from_i128(v: i128) -> Self { v as $t }
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_i128(self) -> i128 { self as i128 }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
bench_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! bench_float {
    ($($t:ty => $eps:expr, $exact:expr, $from:expr, $to:expr);* $(;)?) => {$(
        impl BenchElem for $t {
            const CLASS: Class = Class::Float { eps: $eps, exact_up_to: $exact };
            fn from_i128(v: i128) -> Self { ($from)(v as f64) }
            fn from_f64(v: f64) -> Self { ($from)(v) }
            fn to_i128(self) -> i128 { ($to)(self) as i128 }
            fn to_f64(self) -> f64 { ($to)(self) }
        }
    )*};
}
// exact_up_to: integer data (f16, bf16) stays exact while |partial sums| ≤ 2^(p), quarter data
// (f32, f64) while ≤ 2^(p−2), p the significand bits.
bench_float!(
    f32 => f32::EPSILON as f64, (1u64 << 22) as f64, |v: f64| v as f32, |x: f32| x as f64;
    f64 => f64::EPSILON, (1u64 << 51) as f64, |v: f64| v, |x: f64| x;
    half::f16 => 0.000_976_562_5, 2048.0, half::f16::from_f64, half::f16::to_f64;
    half::bf16 => 0.007_812_5, 256.0, half::bf16::from_f64, half::bf16::to_f64;
);

/// Whether a type has integer data on its grid (f16, bf16: few significand bits).
fn coarse<T: BenchElem>() -> bool {
    matches!(T::CLASS, Class::Float { eps, .. } if eps > 1e-4)
}

/// Element `idx` of the input of `rank` for reduction `op` and `seed`.
///
/// Integers: −100…100 (unsigned 0…200) for sum, min, max, avg and the bitwise ops; 1…3 with a
/// random sign for prod. Floats: multiples of ¼ in −8…8 (f16, bf16: integers in −4…4) for sum,
/// min, max, avg; for prod ±1, and ±2 or ±½ on the one rank `idx mod n`, so products stay in
/// ½…2 and exact. With these, every partial result of the check data is exactly representable
/// up to 64 ranks (bf16) or far more, so any combining order gives the same result.
pub fn input<T: BenchElem>(op: Op, n: u32, rank: u32, idx: usize, seed: u64) -> T {
    let h = mix(seed, rank, idx as u64);
    match (T::CLASS, op) {
        (Class::Int, Op::Prod) => {
            let v = (h % 3) as i128 + 1;
            T::from_i128(if (h >> 8) & 1 == 1 && T::from_i128(-1).to_i128() < 0 {
                -v
            } else {
                v
            })
        }
        (Class::Int, _) => {
            let v = (h % 201) as i128;
            T::from_i128(if T::from_i128(-1).to_i128() < 0 {
                v - 100
            } else {
                v
            })
        }
        (Class::Float { .. }, Op::Prod) => {
            let sign = if (h >> 8) & 1 == 1 { -1.0 } else { 1.0 };
            let mag = if n > 0 && idx % n as usize == rank as usize {
                if h & 1 == 1 { 2.0 } else { 0.5 }
            } else {
                1.0
            };
            T::from_f64(sign * mag)
        }
        (Class::Float { .. }, _) => {
            if coarse::<T>() {
                T::from_f64((h % 9) as f64 - 4.0)
            } else {
                T::from_f64(((h % 65) as f64 - 32.0) / 4.0)
            }
        }
    }
}

/// The sequential reference of `op` over `vals` (in rank order) with the kernels' semantics:
/// integers wrap (computed exactly in `i128` and truncated, which is the same), `avg` divides
/// the (wrapped) sum by the number of contributions, truncating for integers; floats are
/// combined in `f64` and rounded once.
pub fn reference<T: BenchElem>(op: Op, vals: impl Iterator<Item = T>) -> (T, f64) {
    let mut count = 0usize;
    let mut mag = 0.0f64;
    match T::CLASS {
        Class::Int => {
            let mut acc: Option<i128> = None;
            for v in vals {
                count += 1;
                let x = v.to_i128();
                mag += (x as f64).abs();
                acc = Some(match acc {
                    None => x,
                    Some(a) => match op {
                        Op::Sum | Op::Avg => a.wrapping_add(x),
                        Op::Prod => T::from_i128(a.wrapping_mul(x)).to_i128(),
                        Op::Min => a.min(x),
                        Op::Max => a.max(x),
                        Op::BAnd => a & x,
                        Op::BOr => a | x,
                        Op::BXor => a ^ x,
                    },
                });
            }
            let a = T::from_i128(acc.unwrap_or(0));
            if op == Op::Avg && count > 0 {
                (T::from_i128(a.to_i128() / count as i128), mag)
            } else {
                (a, mag)
            }
        }
        Class::Float { .. } => {
            let mut acc: Option<f64> = None;
            for v in vals {
                count += 1;
                let x = v.to_f64();
                mag += x.abs();
                acc = Some(match acc {
                    None => x,
                    Some(a) => match op {
                        Op::Prod => a * x,
                        Op::Min => a.min(x),
                        Op::Max => a.max(x),
                        _ => a + x,
                    },
                });
            }
            let mut a = acc.unwrap_or(0.0);
            if op == Op::Avg && count > 0 {
                a /= count as f64;
            }
            (T::from_f64(a), mag)
        }
    }
}

/// How far a float result may be from the reference: `2·eps·|want|` (the final rounding, and
/// `avg`'s division), plus `(n−1)·eps·Σ|vᵢ|` once the sum of magnitudes passes the range where
/// the check data's partial sums are exact (more than 64 ranks for bf16). Integers: 0.
pub fn tolerance<T: BenchElem>(want: T, magnitude: f64, contributions: usize) -> f64 {
    match T::CLASS {
        Class::Int => 0.0,
        Class::Float { eps, exact_up_to } => {
            let mut tol = 2.0 * eps * want.to_f64().abs();
            if magnitude > exact_up_to {
                tol += contributions.saturating_sub(1) as f64 * eps * magnitude;
            }
            tol
        }
    }
}

/// A value that differs from `x` (for `--inject-wrong`, which tests the check itself).
pub fn corrupt<T: BenchElem>(x: T) -> T {
    match T::CLASS {
        Class::Int => T::from_i128(x.to_i128().wrapping_add(1)),
        Class::Float { .. } => T::from_f64(x.to_f64() + 1.0),
    }
}

/// Whether `got` matches `want` (integers: bitwise; floats: within `tol`, NaN never).
pub fn matches<T: BenchElem>(got: T, want: T, tol: f64) -> bool {
    match T::CLASS {
        Class::Int => got == want,
        Class::Float { .. } => {
            let (g, w) = (got.to_f64(), want.to_f64());
            g == w || (g - w).abs() <= tol
        }
    }
}

/// Parameters of one check.
#[derive(Debug, Clone, Copy)]
pub struct CheckCtx {
    /// The operation.
    pub op: CollOp,
    /// Reduction (ignored by data movement).
    pub redop: Op,
    /// Ranks.
    pub n: u32,
    /// This rank.
    pub rank: u32,
    /// Root of rooted operations.
    pub root: u32,
    /// Counts of this size.
    pub counts: Counts,
    /// Seed of the inputs.
    pub seed: u64,
}

/// Fills a rank's input (`counts.send` elements) for `ctx`.
pub fn fill_input<T: BenchElem>(ctx: &CheckCtx, rank: u32, buf: &mut [T]) {
    for (i, x) in buf.iter_mut().enumerate() {
        *x = input(ctx.redop, ctx.n, rank, i, ctx.seed);
    }
}

/// Fills `buf` with poison (values of another seed).
pub fn fill_poison<T: BenchElem>(ctx: &CheckCtx, buf: &mut [T]) {
    for (i, x) in buf.iter_mut().enumerate() {
        *x = input(ctx.redop, ctx.n, ctx.rank, i, poison_seed(ctx.seed));
    }
}

/// What element `j` of this rank's output must be, with its tolerance; `None` where the
/// operation leaves the output undefined on this rank (non-root ranks of reduce and gather).
pub fn expected<T: BenchElem>(ctx: &CheckCtx, j: usize) -> Option<(T, f64)> {
    let n = ctx.n;
    let per = ctx.counts.param;
    let inp = |q: u32, i: usize| input::<T>(ctx.redop, n, q, i, ctx.seed);
    let red = |ranks: std::ops::Range<u32>, i: usize| {
        let k = ranks.len();
        let (w, mag) = reference(ctx.redop, ranks.map(|q| inp(q, i)));
        (w, tolerance(w, mag, k))
    };
    let exact = |v: T| (v, 0.0);
    match ctx.op {
        CollOp::Allreduce => Some(red(0..n, j)),
        CollOp::Reduce => (ctx.rank == ctx.root).then(|| red(0..n, j)),
        CollOp::Scan => Some(red(0..ctx.rank + 1, j)),
        CollOp::Bcast => Some(exact(inp(ctx.root, j))),
        CollOp::Allgather => Some(exact(inp((j / per) as u32, j % per))),
        CollOp::Gather => (ctx.rank == ctx.root).then(|| exact(inp((j / per) as u32, j % per))),
        CollOp::ReduceScatter => Some(red(0..n, ctx.rank as usize * per + j)),
        CollOp::Scatter => Some(exact(inp(ctx.root, ctx.rank as usize * per + j))),
        CollOp::Alltoall => Some(exact(inp(
            (j / per) as u32,
            ctx.rank as usize * per + j % per,
        ))),
        CollOp::Barrier => None,
    }
}

/// Number of wrong elements in this rank's output `got` (`counts.recv` elements), and the
/// first one (index, got, want) for the error report.
pub fn count_wrong<T: BenchElem>(ctx: &CheckCtx, got: &[T]) -> (u64, Option<(usize, T, T)>) {
    let mut wrong = 0u64;
    let mut first = None;
    for (j, &g) in got.iter().enumerate() {
        if let Some((w, tol)) = expected::<T>(ctx, j)
            && !matches(g, w, tol)
        {
            wrong += 1;
            first = first.or(Some((j, g, w)));
        }
    }
    (wrong, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_nccl_tests() {
        // 1 MiB of floats on 4 ranks.
        let c = 262_144;
        assert_eq!(
            Layout::Same.counts(c, 4),
            Counts {
                send: c,
                recv: c,
                param: c
            }
        );
        assert_eq!(
            Layout::Gather.counts(c, 4),
            Counts {
                send: c / 4,
                recv: c,
                param: c / 4
            }
        );
        assert_eq!(
            Layout::Scatter.counts(c, 4),
            Counts {
                send: c,
                recv: c / 4,
                param: c / 4
            }
        );
        assert_eq!(
            Layout::AllToAll.counts(c, 4),
            Counts {
                send: c,
                recv: c,
                param: c / 4
            }
        );
        // Not divisible: rounded down to whole blocks.
        assert_eq!(Layout::Gather.counts(10, 3).recv, 9);
        assert_eq!(Layout::Empty.counts(10, 3).total(), 0);
    }

    #[test]
    fn bus_factors() {
        assert_eq!(BusFactor::TwoNMinusOneOverN.factor(2), Some(1.0));
        assert_eq!(BusFactor::TwoNMinusOneOverN.factor(4), Some(1.5));
        assert_eq!(BusFactor::NMinusOneOverN.factor(4), Some(0.75));
        assert_eq!(BusFactor::One.factor(8), Some(1.0));
        assert_eq!(BusFactor::TimeOnly.factor(8), None);
        assert_eq!(CollOp::Allreduce.info().bus, BusFactor::TwoNMinusOneOverN);
        for op in [
            CollOp::Allgather,
            CollOp::ReduceScatter,
            CollOp::Alltoall,
            CollOp::Gather,
            CollOp::Scatter,
        ] {
            assert_eq!(op.info().bus, BusFactor::NMinusOneOverN, "{op}");
        }
        for op in [CollOp::Bcast, CollOp::Reduce] {
            assert_eq!(op.info().bus, BusFactor::One, "{op}");
        }
        // 1 GB in 1 s on 2 ranks: algbw 1, busbw 1 (allreduce).
        let m = Measure::new(
            1.0,
            1_000_000_000,
            BusFactor::TwoNMinusOneOverN.factor(2),
            Some(0),
        );
        assert_eq!((m.time_us, m.algbw, m.busbw), (1e6, Some(1.0), Some(1.0)));
        let b = Measure::new(2e-6, 0, None, None);
        assert_eq!((b.algbw, b.busbw), (None, None));
    }

    #[test]
    fn names_parse() {
        for i in OPS {
            assert_eq!(parse_op(i.name).unwrap(), i.op);
        }
        assert_eq!(parse_op("reduce-scatter").unwrap(), CollOp::ReduceScatter);
        assert!(parse_op("allfoo").unwrap_err().contains("allreduce"));
        assert_eq!(parse_dtype("float").unwrap(), Dtype::F32);
        assert_eq!(parse_dtype("bfloat16").unwrap(), Dtype::Bf16);
        assert_eq!(parse_dtype("half").unwrap(), Dtype::F16);
        assert_eq!(parse_dtype("f64").unwrap(), Dtype::F64);
        assert_eq!(parse_dtype("int32").unwrap(), Dtype::I32);
        assert!(parse_dtype("quad").is_err());
        for d in Dtype::ALL {
            assert_eq!(parse_dtype(dtype_name(d)).unwrap(), d);
        }
        assert_eq!(parse_redop("avg").unwrap(), Op::Avg);
        assert!(parse_redop("mulsum").is_err());
        assert_eq!(Average::from_flag(1).unwrap(), Average::Avg);
        assert!(Average::from_flag(4).is_err());
        assert_eq!(Average::Max.combine(&[1.0, 3.0, 2.0]), 3.0);
        assert_eq!(Average::Min.combine(&[1.0, 3.0, 2.0]), 1.0);
        assert_eq!(Average::Avg.combine(&[1.0, 3.0, 2.0]), 2.0);
        assert_eq!(Average::Rank0.combine(&[1.0, 3.0, 2.0]), 1.0);
    }

    #[test]
    fn sweeps() {
        assert_eq!(sizes(8, 64, 2, 0), vec![8, 16, 32, 64]);
        assert_eq!(sizes(8, 100, 4, 0), vec![8, 32]);
        assert_eq!(sizes(0, 2, 2, 0), vec![0, 1, 2]);
        assert_eq!(
            sizes(1 << 20, 3 << 20, 1, 1 << 20),
            vec![1 << 20, 2 << 20, 3 << 20]
        );
        assert_eq!(sizes(5, 5, 2, 0), vec![5]);
        assert!(sizes(6, 5, 2, 0).is_empty());
    }

    #[test]
    fn number_formats_match_nccl_tests() {
        assert_eq!(float_str(0.4, 7), "   0.40");
        assert_eq!(float_str(16.84, 7), "  16.84");
        assert_eq!(float_str(1234.567, 7), "1234.57");
        assert_eq!(float_str(12345.6, 7), "12345.6");
        assert_eq!(float_str(123456.7, 7), " 123457");
        assert_eq!(float_str(1234567.0, 7), "1234567");
        assert_eq!(float_str(12345678.0, 7), "1.2e+07");
        assert_eq!(float_str(0.0, 6), "  0.00");
        assert_eq!(float_str(12.345, 6), " 12.35");
        assert_eq!(float_str(123.45, 6), "123.45");
        assert_eq!(float_str(1234.56, 6), "1234.6");
        assert_eq!(g_str(12.3456789), "12.3457");
        assert_eq!(g_str(0.5), "0.5");
        assert_eq!(g_str(0.0), "0");
        assert_eq!(g_str(1234567.0), "1.23457e+06");
        assert_eq!(g_str(0.00001234), "1.234e-05");
    }

    #[test]
    fn rows_have_nccl_tests_columns() {
        let h = RowHead {
            size: 1_048_576,
            count: 262_144,
            dtype: "float",
            redop: "sum",
            root: -1,
        };
        let m = Measure::new(205e-6, 1_048_576, Some(1.0), Some(0));
        let row = table_row(&h, Some(&m), None);
        assert_eq!(
            row,
            "     1048576        262144     float     sum      -1   205.00    5.12    5.12       0      N/A     N/A     N/A     N/A"
        );
        let hdr = table_header();
        // The data columns line up under their headers.
        let col = |line: &str, name: &str| line.find(name).map(|i| i + name.len());
        assert_eq!(col(&hdr[2], "count"), col(&row, "262144"));
        assert_eq!(col(&hdr[2], "redop"), col(&row, "sum"));
        assert_eq!(
            json_row(CollOp::Allreduce, "ring", &h, Some(&m), None),
            "{\"op\":\"allreduce\",\"algo\":\"ring\",\"size\":1048576,\"count\":262144,\"type\":\"float\",\"redop\":\"sum\",\
             \"root\":-1,\"time_us\":205.000,\"algbw\":5.1150,\"busbw\":5.1150,\"wrong\":0,\"inplace\":null}"
        );
        let unchecked = Measure::new(1e-6, 8, Some(1.0), None);
        assert!(table_row(&h, Some(&unchecked), Some(&unchecked)).ends_with("    N/A"));
        assert!(
            json_row(CollOp::Bcast, "auto", &h, None, Some(&unchecked))
                .contains("\"time_us\":null,\"algbw\":null,\"busbw\":null,\"wrong\":null,\"inplace\":{\"time_us\":1.000")
        );
        assert_eq!(footer(0, Some(5.115))[1], "# Avg bus bandwidth    : 5.115");
        assert_eq!(footer(2, None)[0], "# Out of bounds values : 2 FAILED");
    }

    fn ctx(op: CollOp, redop: Op, n: u32, rank: u32, count: usize) -> CheckCtx {
        CheckCtx {
            op,
            redop,
            n,
            rank,
            root: n - 1,
            counts: op.info().layout.counts(count, n as usize),
            seed: check_seed(1, 0),
        }
    }

    /// Simulates an operation sequentially and checks that the reference accepts it and
    /// counts corrupted elements.
    fn simulate<T: BenchElem>(op: CollOp, redop: Op, n: u32, count: usize) {
        let c0 = ctx(op, redop, n, 0, count);
        let per = c0.counts.param;
        let inputs: Vec<Vec<T>> = (0..n)
            .map(|q| {
                let mut v = vec![T::from_i128(0); c0.counts.send];
                fill_input(&c0, q, &mut v);
                v
            })
            .collect();
        // Reductions combined in reverse rank order, as a ring might: results must still match.
        let acc_op = if redop == Op::Avg { Op::Sum } else { redop };
        let reduce_rev = |ranks: std::ops::Range<u32>, i: usize| -> T {
            let mut it = ranks.rev();
            let first = it.next().unwrap();
            let mut acc = inputs[first as usize][i];
            for q in it {
                let x = inputs[q as usize][i];
                acc = match T::CLASS {
                    Class::Int => reference(acc_op, [acc, x].into_iter()).0,
                    Class::Float { .. } => {
                        let (a, b) = (acc.to_f64(), x.to_f64());
                        T::from_f64(match redop {
                            Op::Prod => a * b,
                            Op::Min => a.min(b),
                            Op::Max => a.max(b),
                            _ => a + b,
                        })
                    }
                };
            }
            acc
        };
        for r in 0..n {
            let c = CheckCtx { rank: r, ..c0 };
            let root = c.root as usize;
            let mut out: Vec<T> = (0..c.counts.recv)
                .map(|j| match op {
                    CollOp::Allreduce | CollOp::Reduce => reduce_rev(0..n, j),
                    CollOp::Scan => reduce_rev(0..r + 1, j),
                    CollOp::Bcast => inputs[root][j],
                    CollOp::Allgather | CollOp::Gather => inputs[j / per][j % per],
                    CollOp::ReduceScatter => reduce_rev(0..n, r as usize * per + j),
                    CollOp::Scatter => inputs[root][r as usize * per + j],
                    CollOp::Alltoall => inputs[j / per][r as usize * per + j % per],
                    CollOp::Barrier => unreachable!(),
                })
                .collect();
            if redop == Op::Avg
                && matches!(
                    op,
                    CollOp::Allreduce | CollOp::Reduce | CollOp::ReduceScatter | CollOp::Scan
                )
            {
                let k = if op == CollOp::Scan { r + 1 } else { n } as usize;
                for (j, x) in out.iter_mut().enumerate() {
                    let src = if op == CollOp::ReduceScatter {
                        r as usize * per + j
                    } else {
                        j
                    };
                    let ranks = if op == CollOp::Scan { 0..r + 1 } else { 0..n };
                    *x = match T::CLASS {
                        Class::Int => T::from_i128(reduce_rev(ranks, src).to_i128() / k as i128),
                        Class::Float { .. } => {
                            T::from_f64(reduce_rev(ranks, src).to_f64() / k as f64)
                        }
                    };
                }
            }
            let (wrong, first) = count_wrong(&c, &out);
            assert_eq!(
                wrong,
                0,
                "{op} {redop} {:?} n={n} rank {r}: first {first:?}",
                T::DTYPE
            );
            let defined = (op != CollOp::Reduce && op != CollOp::Gather) || r == c.root;
            if !out.is_empty() && defined {
                let k = out.len() / 2;
                out[k] = match T::CLASS {
                    Class::Int => T::from_i128(out[k].to_i128().wrapping_add(1)),
                    Class::Float { .. } => T::from_f64(out[k].to_f64() + 0.25),
                };
                assert_eq!(
                    count_wrong(&c, &out).0,
                    1,
                    "{op} {redop} n={n}: corruption not seen"
                );
            }
        }
    }

    #[test]
    fn reference_accepts_other_orders_and_catches_corruption() {
        for n in [1u32, 2, 3, 5] {
            for op in OPS.iter().map(|i| i.op).filter(|&o| o != CollOp::Barrier) {
                let redops: &[Op] = if op.info().reduces {
                    &[Op::Sum, Op::Prod, Op::Min, Op::Max, Op::Avg]
                } else {
                    &[Op::Sum]
                };
                for &redop in redops {
                    simulate::<f32>(op, redop, n, 61);
                    simulate::<i32>(op, redop, n, 61);
                    simulate::<u8>(op, redop, n, 33);
                    simulate::<half::bf16>(op, redop, n, 45);
                    simulate::<half::f16>(op, redop, n, 45);
                    simulate::<f64>(op, redop, n, 17);
                }
            }
        }
    }

    #[test]
    fn float_sums_are_exact_up_to_64_ranks() {
        // bf16 with integer data in −4…4: partial sums within ±256 are exact, so a reversed
        // order gives the same bits.
        let c = ctx(CollOp::Allreduce, Op::Sum, 64, 0, 128);
        let Class::Float { eps, exact_up_to } = half::bf16::CLASS else {
            unreachable!()
        };
        for j in 0..128 {
            let vals: Vec<half::bf16> = (0..64).map(|q| input(Op::Sum, 64, q, j, c.seed)).collect();
            let (a, mag) = reference(Op::Sum, vals.iter().copied());
            let (b, _) = reference(Op::Sum, vals.iter().rev().copied());
            assert_eq!(a, b);
            assert!(mag <= exact_up_to, "element {j}: Σ|v| = {mag}");
            // Exact sums: the tolerance is the final rounding's 2·eps·|a| alone, as on one
            // rank; the 63 other contributions do not widen it (Σ|v| stays in the exact range).
            assert_eq!(
                tolerance(a, mag, 64),
                2.0 * eps * a.to_f64().abs(),
                "element {j}: sum {a}, Σ|v| {mag}"
            );
        }
    }

    #[test]
    fn integer_references_wrap_and_avg_truncates() {
        let (s, _) = reference::<i8>(Op::Sum, [100i8, 100, 100].into_iter());
        assert_eq!(s, 300i32 as i8);
        let (p, _) = reference::<u8>(Op::Prod, [16u8, 16, 3].into_iter());
        assert_eq!(p, 0);
        let (a, _) = reference::<i32>(Op::Avg, [-3i32, -4].into_iter());
        assert_eq!(a, -3);
        let (m, _) = reference::<u64>(Op::Max, [u64::MAX, 1].into_iter());
        assert_eq!(m, u64::MAX);
        let (x, _) = reference::<i16>(Op::BXor, [-1i16, 5].into_iter());
        assert_eq!(x, -6);
    }

    #[test]
    fn mix_matches_the_c_program() {
        // `osu_like --selftest` prints the same number.
        assert_eq!(mix(99, 1, 7), 0x1c33_9f02_e48f_714e);
    }
}
