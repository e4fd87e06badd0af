//! The TP × PP × DP (× EP) layout planner behind `rcomm-plan`: given a cluster and a model, it
//! prices one training step of every feasible layout with the fixed formulas below, ranks the
//! layouts and says what is wrong with them. Pure computation: no I/O, no clock, no rcomm
//! world; the same inputs always give the same list.
//!
//! A crate of its own so that `rcomm-plan` and a site's tools link the planner without rcomm's
//! runtime; `rcomm::plan` is this crate re-exported.
//!
//! ```
//! use rcomm_planner::{Cluster, Link, Model};
//! let cluster = Cluster {
//!     nodes: 8,
//!     gpus_per_node: 8,
//!     intra: Link { latency_s: 1e-6, bandwidth: 900e9 },
//!     inter: Link { latency_s: 5e-6, bandwidth: 50e9 },
//!     gpu_mem_bytes: 80e9,
//! };
//! let model = Model::new(70e9, 80, 8192, 4096, 512);
//! let plan = rcomm_planner::plan(&cluster, &model)?;
//! let best = &plan.ranked[0];
//! assert!(best.fits && best.layout.tp <= 8);
//! println!("{}: {:.2} s of communication per step", best.layout, best.comm_time_s);
//! # Ok::<(), rcomm_planner::PlanError>(())
//! ```
//!
//! # Inputs
//!
//! The cluster: `nodes` × `gpus_per_node` GPUs (N in all), an intra-node link and an
//! inter-node link, each a latency α (seconds) and a bandwidth β (bytes per second **per
//! direction, per GPU**: what one GPU can send while it also receives as much), and the memory
//! of one GPU. The model: P parameters, L layers, hidden size h (and optionally the number of
//! attention heads), sequence length s, micro-batch b, global batch G (sequences per step),
//! `bytes` per parameter (2 for 16-bit training; activations and gradients have the same
//! element size), optionally E experts (every layer a mixture-of-experts layer, each token
//! routed to k of them), the ZeRO stage and the achieved FLOP/s per GPU.
//!
//! # Layouts and placement
//!
//! A layout is (tp, pp, dp, ep) with tp·pp·dp = N and ep dividing dp. Rank r sits on node
//! ⌊r / gpus_per_node⌋ and has coordinates t = r mod tp, p = ⌊r / tp⌋ mod pp,
//! d = ⌊r / (tp·pp)⌋: **TP innermost** (a TP group is tp consecutive ranks), then PP, **DP
//! outermost**. With experts the DP index splits as d = e + ep·j: an EP group is ep consecutive
//! DP indices (e varies), and each expert's weights are replicated over the dp/ep ranks that
//! share e (its expert-data-parallel group). A group **crosses nodes** when its ranks land on
//! more than one node; its collectives then run over the inter-node link (the slowest link
//! the group spans), otherwise over the intra-node link. Pipeline traffic uses the inter-node
//! link when any stage boundary (ranks r and r + tp) crosses nodes.
//!
//! A layout is dropped (not listed; [`Plan::dropped`] says why) unless tp divides h (and the
//! heads, when given), pp divides L (so pp ≤ L), ep divides both dp and E, and dp·b divides G,
//! giving m = G / (dp·b) ≥ 1 micro-batches per step. Layouts that do not fit in memory are
//! kept, flagged and ranked after all that fit.
//!
//! # Collective costs
//!
//! For n ranks, S bytes and a link (α, β); every cost is 0 when n = 1 or S = 0:
//!
//! | operation | time |
//! |---|---|
//! | ring all-reduce of S bytes | 2(n−1)·α + 2(n−1)/n · S/β |
//! | all-gather, S the gathered size (reduce-scatter alike) | (n−1)·α + (n−1)/n · S/β |
//! | pairwise all-to-all, S the bytes one rank sends in all | (n−1)·α + (n−1)/n · S/β |
//! | point-to-point | α + S/β |
//!
//! Three local costs can be added, each an optional input that defaults to nothing (the step
//! formulas below leave them all out; [`price_local`], `rcomm-plan --price …`):
//!
//! | term | added to | input |
//! |---|---|---|
//! | reduction (n−1)/n · S/γ: the bytes a rank folds, at the local reduction rate γ | all-reduce, reduce-scatter | `--reduce-bw` γ |
//! | own block S/(n·κ): the pairwise all-to-all copies the block a rank keeps, S/n bytes, at the local copy rate κ | all-to-all | `--copy-bw` κ |
//! | per-call overhead o: what one collective call costs beyond its messages' α (schedule lookup, tag, request and completion bookkeeping), once per call | every collective (not p2p) | `--call-overhead` o |
//!
//! On a GPU the fold and the copy run inside the transfer at memory speed, far above any
//! link's β, and o (microseconds) vanishes next to a step's all-reduces of megabytes, so they
//! would change no ranking; on CPUs they matter for small and for out-of-cache collectives,
//! and `benches/scripts/plan-validate.sh` prices with all three, each measured on its own.
//!
//! # One step
//!
//! With A = b·s·h·bytes (one micro-batch's activations at a layer boundary), m micro-batches,
//! L_s = L/pp layers per stage, P_e = P·8E/(4 + 8E) expert weights (a layer has 4h² attention
//! weights and E experts of 8h² MLP weights each; P_e = 0 without experts) and P_d = P − P_e
//! dense weights, per GPU:
//!
//! - **TP**: tp_time = m · L_s · 4 · allreduce(tp, A) — four all-reduces per layer and
//!   micro-batch (two forward, two backward).
//! - **PP**: pp_time = m · 2 · p2p(A) when pp > 1 — each micro-batch's activations go forward
//!   and its gradients back across each stage boundary; boundaries work in parallel.
//! - **EP**: ep_time = m · L_s · 4 · alltoall(ep, k·A) — dispatch and combine, forward and
//!   backward, in every (MoE) layer.
//! - **DP**: dp_time = allreduce(dp, W_d) + allreduce(dp/ep, W_e) with
//!   W_d = P_d/(tp·pp)·bytes and W_e = P_e/(tp·pp·ep)·bytes, once per step after the last
//!   micro-batch (ZeRO-1/2 do a reduce-scatter and an all-gather instead, which costs the
//!   same); ZeRO-3 adds one parameter all-gather per step, allgather(dp, W_d) +
//!   allgather(dp/ep, W_e) (parameters kept gathered across the step's micro-batches, so this
//!   is a lower bound for implementations that gather again per micro-batch).
//! - **bubble** = (pp − 1)/(m + pp − 1): the per-micro-batch work runs in m + pp − 1 pipeline
//!   slots instead of m (GPipe and 1F1B alike).
//! - **comm_time** = (tp_time + pp_time + ep_time)/(1 − bubble) + dp_time — the communication
//!   on the critical path of one step, stretched by the bubble like the work it sits in; no
//!   overlap with computation is assumed.
//! - With `tflops` F (achieved per GPU): compute_time = m · 6·P_act·b·s/(tp·pp·F), with
//!   P_act = P_d + P_e·k/E (6 FLOP per active parameter and token, forward and backward, no
//!   recomputation), and **step_time** = (compute_time + tp_time + pp_time + ep_time)/(1 −
//!   bubble) + dp_time.
//!
//! # Memory per GPU
//!
//! Mixed-precision Adam: weights `bytes`, gradients `bytes` and optimizer state 12 B (fp32
//! master weights, momentum, variance) per parameter held — 16 B per parameter at 2 bytes,
//! before ZeRO sharding. A GPU holds P_d/(tp·pp) dense and P_e/(tp·pp·ep) expert parameters;
//! ZeRO-1 divides the optimizer state by the parameters' replication (dp for dense, dp/ep for
//! expert weights), ZeRO-2 the gradients too, ZeRO-3 the weights too. Activations: per layer
//! and micro-batch 17·bytes·s·b·h/tp (Korthikanti et al. 2022, "Reducing Activation
//! Recomputation in Large Transformer Models": 34·s·b·h/t with tensor and sequence parallelism
//! and selective recomputation, for 2-byte activations, scaled by the element size; the same
//! for MoE layers), and the first pipeline stage keeps min(pp, m) micro-batches of its L_s
//! layers in flight (1F1B): activations = min(pp, m)·L_s·17·bytes·s·b·h/tp.
//!
//! # Ranking
//!
//! Layouts that fit in GPU memory come first; then the smaller step_time when `tflops` is
//! given, else the smaller comm_time; ties go to less memory, then smaller tp, pp, ep. The
//! warnings: TP (or EP) crossing nodes (`TP=16 crosses nodes: every layer's all-reduce rides
//! the inter-node link`), memory over the budget, a bubble over 50 %. DP and PP crossing nodes
//! is how large jobs are laid out and draws no warning.
#![warn(missing_docs)]

mod units;

pub use units::{
    format_bandwidth, format_bytes, format_time, parse_bandwidth, parse_bytes, parse_count,
    parse_duration, parse_key_values,
};

use std::fmt;

/// The most GPUs a plan covers (every layout's groups are checked rank by rank).
pub const MAX_GPUS: u64 = 1 << 16;

/// Why no plan could be made. Messages name the setting and what to try.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A value that does not parse or is out of range.
    #[error("{what}: {why} (got `{input}`)")]
    BadValue {
        /// The setting (`--intra-bw`, `topology file line 3`, …).
        what: String,
        /// What was given.
        input: String,
        /// What is wrong and what is accepted.
        why: String,
    },
    /// A required setting nobody gave.
    #[error("missing {0}")]
    Missing(String),
    /// A topology-file key the planner does not know.
    #[error("unknown cluster key `{0}` (known: {keys})", keys = CLUSTER_KEYS.join(", "))]
    UnknownKey(String),
    /// Valid inputs that admit no layout at all.
    #[error("no feasible layout: {0}")]
    NoLayout(String),
}

fn bad(what: &str, input: impl fmt::Display, why: impl Into<String>) -> PlanError {
    PlanError::BadValue {
        what: what.to_string(),
        input: input.to_string(),
        why: why.into(),
    }
}

/// One kind of link: latency and bandwidth.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    /// Latency α per message, seconds.
    pub latency_s: f64,
    /// Bandwidth β per direction, bytes per second.
    pub bandwidth: f64,
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per direction, {}",
            format_bandwidth(self.bandwidth),
            format_time(self.latency_s)
        )
    }
}

/// The keys of [`Cluster::from_pairs`] (and of a topology file), as `rcomm-plan`'s flags
/// spell them without the leading dashes.
pub const CLUSTER_KEYS: &[&str] = &[
    "nodes",
    "gpus-per-node",
    "intra-bw",
    "inter-bw",
    "intra-lat",
    "inter-lat",
    "gpu-mem",
];

/// The machine: identical nodes of identical GPUs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cluster {
    /// Number of nodes.
    pub nodes: u64,
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// Link between two GPUs of one node.
    pub intra: Link,
    /// Link between GPUs of different nodes (per GPU: each GPU has its own share of the
    /// network).
    pub inter: Link,
    /// Memory of one GPU, bytes.
    pub gpu_mem_bytes: f64,
}

/// GPU memory when neither flag nor file gives one: 80 GB.
pub const DEFAULT_GPU_MEM: f64 = 80e9;

impl Cluster {
    /// Every GPU: nodes × gpus per node.
    pub fn gpus(&self) -> u64 {
        self.nodes.saturating_mul(self.gpus_per_node)
    }

    /// The cluster from `key, value` pairs with units (`900GB/s`, `1us`, `80GB`; keys in
    /// [`CLUSTER_KEYS`], `_` for `-` accepted); a later pair overrides an earlier one, so
    /// pairs from a topology file followed by those from flags let flags win. `gpu-mem`
    /// defaults to [`DEFAULT_GPU_MEM`]; the others are required.
    ///
    /// ```
    /// let c = rcomm_planner::Cluster::from_pairs([
    ///     ("nodes", "2"), ("gpus-per-node", "8"), ("intra-bw", "900GB/s"),
    ///     ("inter-bw", "400Gb/s"), ("intra-lat", "1us"), ("inter-lat", "5us"),
    /// ])?;
    /// assert_eq!((c.gpus(), c.inter.bandwidth), (16, 50e9));
    /// # Ok::<(), rcomm_planner::PlanError>(())
    /// ```
    pub fn from_pairs<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, PlanError> {
        let mut vals: [Option<String>; 7] = Default::default();
        for (k, v) in pairs {
            let k = k.as_ref().trim().replace('_', "-");
            let i = CLUSTER_KEYS
                .iter()
                .position(|&c| c == k)
                .ok_or_else(|| PlanError::UnknownKey(k.clone()))?;
            vals[i] = Some(v.as_ref().trim().to_string());
        }
        let get = |i: usize| {
            vals[i].as_deref().ok_or_else(|| {
                PlanError::Missing(format!(
                    "--{k} (or `{k} = …` in the topology file)",
                    k = CLUSTER_KEYS[i]
                ))
            })
        };
        let int = |i: usize| -> Result<u64, PlanError> {
            let s = get(i)?;
            let what = format!("--{}", CLUSTER_KEYS[i]);
            s.parse::<u64>()
                .map_err(|_| bad(&what, s, "expected a whole number"))
        };
        let link = |bw: usize, lat: usize| -> Result<Link, PlanError> {
            Ok(Link {
                bandwidth: parse_bandwidth(&format!("--{}", CLUSTER_KEYS[bw]), get(bw)?)?,
                latency_s: parse_duration(&format!("--{}", CLUSTER_KEYS[lat]), get(lat)?)?,
            })
        };
        let c = Cluster {
            nodes: int(0)?,
            gpus_per_node: int(1)?,
            intra: link(2, 4)?,
            inter: link(3, 5)?,
            gpu_mem_bytes: match vals[6].as_deref() {
                Some(s) => parse_bytes("--gpu-mem", s)?,
                None => DEFAULT_GPU_MEM,
            },
        };
        c.validate()?;
        Ok(c)
    }

    /// Refuses clusters the formulas cannot price: no GPUs, more than [`MAX_GPUS`], links
    /// without bandwidth or with a negative or non-finite latency, no memory.
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.nodes == 0 {
            return Err(bad("--nodes", self.nodes, "at least 1"));
        }
        if self.gpus_per_node == 0 {
            return Err(bad("--gpus-per-node", self.gpus_per_node, "at least 1"));
        }
        if self.gpus() > MAX_GPUS {
            return Err(bad(
                "--nodes × --gpus-per-node",
                self.gpus(),
                format!("at most {MAX_GPUS} GPUs"),
            ));
        }
        for (name, l) in [("intra", &self.intra), ("inter", &self.inter)] {
            if !(l.bandwidth.is_finite() && l.bandwidth > 0.0) {
                return Err(bad(
                    &format!("--{name}-bw"),
                    l.bandwidth,
                    "a bandwidth above zero",
                ));
            }
            if !(l.latency_s.is_finite() && l.latency_s >= 0.0) {
                return Err(bad(
                    &format!("--{name}-lat"),
                    l.latency_s,
                    "a latency of zero or more",
                ));
            }
        }
        if !(self.gpu_mem_bytes.is_finite() && self.gpu_mem_bytes > 0.0) {
            return Err(bad("--gpu-mem", self.gpu_mem_bytes, "a size above zero"));
        }
        Ok(())
    }

    fn node_of(&self, rank: u64) -> u64 {
        rank / self.gpus_per_node
    }
}

impl fmt::Display for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} GPUs ({} nodes × {}, {} each); intra-node {}; inter-node {}",
            self.gpus(),
            self.nodes,
            self.gpus_per_node,
            format_bytes(self.gpu_mem_bytes),
            self.intra,
            self.inter
        )
    }
}

/// The model and how it is trained.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// Parameters P (all experts included).
    pub params: f64,
    /// Transformer layers L.
    pub layers: u64,
    /// Hidden size h.
    pub hidden: u64,
    /// Attention heads, when known (tp must divide them).
    pub heads: Option<u64>,
    /// Sequence length s, tokens.
    pub seq: u64,
    /// Micro-batch b, sequences.
    pub micro_batch: u64,
    /// Global batch G, sequences per step.
    pub global_batch: u64,
    /// Bytes per parameter (and per activation and gradient element): 2 for fp16/bf16.
    pub bytes_per_param: u64,
    /// Experts per layer E; 1 for a dense model.
    pub experts: u64,
    /// Experts each token is routed to, k (ignored for a dense model).
    pub top_k: u64,
    /// ZeRO stage, 0–3.
    pub zero: u8,
    /// Achieved TFLOP/s (10¹² FLOP/s) per GPU, for a step-time estimate.
    pub tflops: Option<f64>,
}

impl Model {
    /// A dense model trained in 16-bit with micro-batch 1, no ZeRO, no FLOP/s given.
    pub fn new(params: f64, layers: u64, hidden: u64, seq: u64, global_batch: u64) -> Self {
        Model {
            params,
            layers,
            hidden,
            heads: None,
            seq,
            micro_batch: 1,
            global_batch,
            bytes_per_param: 2,
            experts: 1,
            top_k: 1,
            zero: 0,
            tflops: None,
        }
    }

    /// Refuses models the formulas cannot price (zero sizes, ZeRO stage above 3, top-k above
    /// the experts, non-finite numbers), naming the flag.
    pub fn validate(&self) -> Result<(), PlanError> {
        if !(self.params.is_finite() && self.params >= 1.0) {
            return Err(bad("--params", self.params, "at least 1 parameter"));
        }
        for (name, v) in [
            ("--layers", self.layers),
            ("--hidden", self.hidden),
            ("--seq", self.seq),
            ("--micro-batch", self.micro_batch),
            ("--global-batch", self.global_batch),
            ("--experts", self.experts),
            ("--top-k", self.top_k),
        ] {
            if v == 0 {
                return Err(bad(name, v, "at least 1"));
            }
        }
        if self.heads == Some(0) {
            return Err(bad("--heads", 0, "at least 1"));
        }
        if !(1..=16).contains(&self.bytes_per_param) {
            return Err(bad("--bytes-per-param", self.bytes_per_param, "1 to 16"));
        }
        if self.zero > 3 {
            return Err(bad("--zero", self.zero, "a ZeRO stage: 0, 1, 2 or 3"));
        }
        if self.experts > 1 && self.top_k > self.experts {
            return Err(bad(
                "--top-k",
                self.top_k,
                format!("at most the {} experts", self.experts),
            ));
        }
        if let Some(t) = self.tflops
            && !(t.is_finite() && t > 0.0)
        {
            return Err(bad("--tflops", t, "a rate above zero"));
        }
        if self.global_batch < self.micro_batch {
            return Err(bad(
                "--global-batch",
                self.global_batch,
                format!("at least the micro-batch ({})", self.micro_batch),
            ));
        }
        Ok(())
    }

    /// The share of the parameters that are expert weights: 8E/(4 + 8E) with E experts (4h²
    /// attention and E × 8h² MLP weights per layer), 0 for a dense model.
    pub fn expert_fraction(&self) -> f64 {
        if self.experts <= 1 {
            0.0
        } else {
            let e = self.experts as f64;
            8.0 * e / (4.0 + 8.0 * e)
        }
    }

    /// A = b·s·h·bytes: one micro-batch's activations at a layer boundary, the size of every
    /// TP all-reduce and PP transfer.
    pub fn activation_bytes(&self) -> f64 {
        (self.micro_batch * self.seq * self.hidden * self.bytes_per_param) as f64
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.params;
        let (v, u) = if p >= 1e12 {
            (p / 1e12, "T")
        } else if p >= 1e9 {
            (p / 1e9, "B")
        } else if p >= 1e6 {
            (p / 1e6, "M")
        } else {
            (p, "")
        };
        write!(
            f,
            "{v}{u} parameters, {} layers, hidden {}, seq {}, micro-batch {}, global batch {}, \
             {} B/param, ZeRO-{}",
            self.layers,
            self.hidden,
            self.seq,
            self.micro_batch,
            self.global_batch,
            self.bytes_per_param,
            self.zero
        )?;
        if self.experts > 1 {
            write!(f, ", {} experts (top-{})", self.experts, self.top_k)?;
        }
        if let Some(t) = self.tflops {
            write!(f, ", {t} TFLOP/s per GPU")?;
        }
        Ok(())
    }
}

/// One way to split the GPUs: tp·pp·dp = N, ep divides dp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Layout {
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Pipeline stages.
    pub pp: u64,
    /// Data-parallel degree.
    pub dp: u64,
    /// Expert-parallel degree (a divisor of dp; 1 for a dense model).
    pub ep: u64,
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TP{} × PP{} × DP{}", self.tp, self.pp, self.dp)?;
        if self.ep > 1 {
            write!(f, " (EP{})", self.ep)?;
        }
        Ok(())
    }
}

/// Why a layout is not listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Infeasible {
    /// tp·pp·dp is not the number of GPUs.
    Product,
    /// tp does not divide the hidden size.
    TpHidden,
    /// tp does not divide the attention heads.
    TpHeads,
    /// pp does not divide the layers (so also pp > layers).
    PpLayers,
    /// dp × micro-batch does not divide the global batch.
    Batch,
    /// ep does not divide dp.
    EpDp,
    /// ep does not divide the experts.
    EpExperts,
    /// The cluster or the model fails its `validate` ([`plan`] reports which and why).
    Invalid,
}

impl fmt::Display for Infeasible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Infeasible::Product => "tp × pp × dp is not the number of GPUs",
            Infeasible::TpHidden => "tp does not divide the hidden size",
            Infeasible::TpHeads => "tp does not divide the attention heads",
            Infeasible::PpLayers => "pp does not divide the layers",
            Infeasible::Batch => "dp × micro-batch does not divide the global batch",
            Infeasible::EpDp => "ep does not divide dp",
            Infeasible::EpExperts => "ep does not divide the experts",
            Infeasible::Invalid => "the cluster or the model is invalid",
        })
    }
}

/// Memory one GPU needs, bytes (the worst GPU: the first pipeline stage).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Memory {
    /// Weights (after ZeRO-3 sharding).
    pub weights: f64,
    /// Gradients (after ZeRO-2 sharding).
    pub grads: f64,
    /// Optimizer state: fp32 master weights, momentum, variance (after ZeRO-1 sharding).
    pub optimizer: f64,
    /// Activations kept for the backward pass.
    pub activations: f64,
}

impl Memory {
    /// The sum.
    pub fn total(&self) -> f64 {
        self.weights + self.grads + self.optimizer + self.activations
    }
}

/// Which of a layout's groups cross nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Crossing {
    /// Some TP group spans more than one node.
    pub tp: bool,
    /// Some stage boundary joins ranks on different nodes.
    pub pp: bool,
    /// Some DP group spans more than one node.
    pub dp: bool,
    /// Some EP group spans more than one node.
    pub ep: bool,
    /// Some expert-data-parallel group (dp/ep ranks) spans more than one node.
    pub edp: bool,
}

/// One layout, priced.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// The layout.
    pub layout: Layout,
    /// m: micro-batches per step per pipeline, G / (dp·b).
    pub micro_batches: u64,
    /// TP all-reduce time per step, seconds (before the bubble stretch).
    pub tp_time_s: f64,
    /// PP send/receive time per step, seconds (before the bubble stretch).
    pub pp_time_s: f64,
    /// EP all-to-all time per step, seconds (before the bubble stretch).
    pub ep_time_s: f64,
    /// DP gradient all-reduce (and ZeRO-3 all-gather) time per step, seconds.
    pub dp_time_s: f64,
    /// (tp + pp + ep time) / (1 − bubble) + dp time: the ranking key without `tflops`.
    pub comm_time_s: f64,
    /// Pipeline bubble fraction (pp − 1)/(m + pp − 1).
    pub bubble: f64,
    /// Computation per step before the bubble stretch, when `tflops` is given.
    pub compute_time_s: Option<f64>,
    /// (compute + tp + pp + ep time)/(1 − bubble) + dp time, when `tflops` is given: then
    /// the ranking key.
    pub step_time_s: Option<f64>,
    /// Memory per GPU.
    pub memory: Memory,
    /// Whether the memory fits the GPU.
    pub fits: bool,
    /// Which groups cross nodes.
    pub crosses: Crossing,
    /// What is wrong or risky, one sentence each.
    pub warnings: Vec<String>,
}

impl Estimate {
    /// What the ranking sorts by (after fitting): step time when known, else comm time.
    pub fn key(&self) -> f64 {
        self.step_time_s.unwrap_or(self.comm_time_s)
    }

    /// Memory per GPU, bytes.
    pub fn mem_per_gpu_bytes(&self) -> f64 {
        self.memory.total()
    }
}

/// A collective the planner prices (for [`price`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    /// Ring all-reduce: 2(n−1)·α + 2(n−1)/n · S/β.
    Allreduce,
    /// All-gather of S bytes in all: (n−1)·α + (n−1)/n · S/β.
    Allgather,
    /// Reduce-scatter of S bytes in all: as the all-gather (plus (n−1)/n · S/γ with a
    /// reduction rate).
    ReduceScatter,
    /// Pairwise all-to-all, S bytes sent by each rank: (n−1)·α + (n−1)/n · S/β (plus
    /// S/(n·κ) for its own block with a local copy rate).
    Alltoall,
    /// One message: α + S/β (n is ignored).
    P2p,
}

impl Collective {
    /// Its name: `allreduce`, `allgather`, `alltoall`, `p2p`.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Allreduce => "allreduce",
            Collective::Allgather => "allgather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Alltoall => "alltoall",
            Collective::P2p => "p2p",
        }
    }
}

impl std::str::FromStr for Collective {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, PlanError> {
        Ok(match s {
            "allreduce" => Collective::Allreduce,
            "allgather" => Collective::Allgather,
            "reduce_scatter" => Collective::ReduceScatter,
            "alltoall" => Collective::Alltoall,
            "p2p" | "sendrecv" => Collective::P2p,
            _ => {
                return Err(bad(
                    "--price",
                    s,
                    "one of allreduce, allgather, reduce_scatter, alltoall, p2p",
                ));
            }
        })
    }
}

/// The time of `op` on `n` ranks for `bytes` bytes over `link`, by the formulas in the module
/// documentation; 0 for one rank or no bytes (except [`Collective::P2p`], which needs only
/// bytes).
///
/// ```
/// use rcomm_planner::{price, Collective, Link};
/// let nvlink = Link { latency_s: 1e-6, bandwidth: 100e9 };
/// // 2·3·1 µs + 2·3/4 · 16 MiB / 100 GB/s
/// let t = price(Collective::Allreduce, 4, 16.0 * 1048576.0, nvlink);
/// assert!((t - (6e-6 + 1.5 * 16777216.0 / 100e9)).abs() < 1e-12);
/// ```
pub fn price(op: Collective, n: u64, bytes: f64, link: Link) -> f64 {
    price_with(op, n, bytes, link, None)
}

/// [`price`] plus the reduction term (n−1)/n · S/γ for the all-reduce and the reduce-scatter,
/// γ = `reduce_bw` in bytes folded per second (`None`, or infinite: no term).
///
/// ```
/// use rcomm_planner::{price, price_with, Collective, Link};
/// let l = Link { latency_s: 1e-6, bandwidth: 10e9 };
/// let s = 1048576.0;
/// let with = price_with(Collective::Allreduce, 2, s, l, Some(20e9));
/// assert!((with - price(Collective::Allreduce, 2, s, l) - 0.5 * s / 20e9).abs() < 1e-15);
/// ```
pub fn price_with(op: Collective, n: u64, bytes: f64, link: Link, reduce_bw: Option<f64>) -> f64 {
    price_local(
        op,
        n,
        bytes,
        link,
        &Local {
            reduce_bw,
            ..Local::default()
        },
    )
}

/// The local costs of a collective beyond its messages (module documentation, "Collective
/// costs"); the default adds nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Local {
    /// γ, bytes folded per second by the reduction (all-reduce, reduce-scatter).
    pub reduce_bw: Option<f64>,
    /// κ, bytes copied per second locally (the all-to-all's own block).
    pub copy_bw: Option<f64>,
    /// o, seconds per collective call beyond its messages' α.
    pub call_overhead_s: f64,
}

/// [`price`] plus the local terms of `local`: (n−1)/n · S/γ for the all-reduce and the
/// reduce-scatter, S/(n·κ) for the all-to-all, o for every collective but p2p (each only when
/// there is something to do: n ≥ 2 and S > 0).
///
/// ```
/// use rcomm_planner::{price, price_local, Collective, Link, Local};
/// let l = Link { latency_s: 1e-6, bandwidth: 10e9 };
/// let s = 1048576.0;
/// let loc = Local { reduce_bw: None, copy_bw: Some(5e9), call_overhead_s: 2e-7 };
/// let t = price_local(Collective::Alltoall, 4, s, l, &loc);
/// assert!((t - price(Collective::Alltoall, 4, s, l) - s / 4.0 / 5e9 - 2e-7).abs() < 1e-15);
/// ```
pub fn price_local(op: Collective, n: u64, bytes: f64, link: Link, local: &Local) -> f64 {
    let (a, b) = (link.latency_s, link.bandwidth);
    if op == Collective::P2p {
        return if bytes > 0.0 { a + bytes / b } else { 0.0 };
    }
    if n <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let (n1, nf) = ((n - 1) as f64, n as f64);
    let rate = |r: Option<f64>| r.filter(|&r| r > 0.0);
    let fold = match (op, rate(local.reduce_bw)) {
        (Collective::Allreduce | Collective::ReduceScatter, Some(g)) => n1 / nf * bytes / g,
        _ => 0.0,
    };
    let copy = match (op, rate(local.copy_bw)) {
        (Collective::Alltoall, Some(k)) => bytes / nf / k,
        _ => 0.0,
    };
    local.call_overhead_s.max(0.0)
        + fold
        + copy
        + match op {
            Collective::Allreduce => 2.0 * n1 * a + 2.0 * n1 / nf * bytes / b,
            Collective::Allgather | Collective::ReduceScatter | Collective::Alltoall => {
                n1 * a + n1 / nf * bytes / b
            }
            Collective::P2p => unreachable!("handled above"),
        }
}

/// Whether any group of ranks that share `leader(r)` spans more than one node.
fn crosses(cluster: &Cluster, n: u64, leader: impl Fn(u64) -> u64) -> bool {
    (0..n).any(|r| cluster.node_of(r) != cluster.node_of(leader(r)))
}

/// Prices one layout, or says why it is infeasible. Memory over the budget is not
/// infeasible here: the estimate says `fits: false` and carries a warning. An invalid cluster
/// or model gives [`Infeasible::Invalid`] (never a panic or a NaN).
pub fn estimate(cluster: &Cluster, model: &Model, layout: Layout) -> Result<Estimate, Infeasible> {
    if cluster.validate().is_err() || model.validate().is_err() {
        return Err(Infeasible::Invalid);
    }
    let Layout { tp, pp, dp, ep } = layout;
    let n = cluster.gpus();
    if tp == 0
        || pp == 0
        || dp == 0
        || ep == 0
        || tp.checked_mul(pp).and_then(|x| x.checked_mul(dp)) != Some(n)
    {
        return Err(Infeasible::Product);
    }
    if !model.hidden.is_multiple_of(tp) {
        return Err(Infeasible::TpHidden);
    }
    if model.heads.is_some_and(|h| !h.is_multiple_of(tp)) {
        return Err(Infeasible::TpHeads);
    }
    if !model.layers.is_multiple_of(pp) {
        return Err(Infeasible::PpLayers);
    }
    if !dp.is_multiple_of(ep) {
        return Err(Infeasible::EpDp);
    }
    if !model.experts.is_multiple_of(ep) {
        return Err(Infeasible::EpExperts);
    }
    let per_step = dp * model.micro_batch;
    if !model.global_batch.is_multiple_of(per_step) {
        return Err(Infeasible::Batch);
    }
    let m = model.global_batch / per_step;

    // Placement: r = t + tp·(p + pp·d), d = e + ep·j.
    let tpp = tp * pp;
    let cross = Crossing {
        tp: crosses(cluster, n, |r| r - r % tp),
        pp: pp > 1
            && (0..n)
                .any(|r| (r / tp) % pp + 1 < pp && cluster.node_of(r) != cluster.node_of(r + tp)),
        dp: crosses(cluster, n, |r| r % tpp),
        ep: crosses(cluster, n, |r| r - ((r / tpp) % ep) * tpp),
        edp: crosses(cluster, n, |r| r % (tpp * ep)),
    };
    let link = |crossing: bool| {
        if crossing {
            cluster.inter
        } else {
            cluster.intra
        }
    };

    let a = model.activation_bytes();
    let mf = m as f64;
    let ls = (model.layers / pp) as f64;
    let tp_time = mf * ls * 4.0 * price(Collective::Allreduce, tp, a, link(cross.tp));
    let pp_time = if pp > 1 {
        mf * 2.0 * price(Collective::P2p, 2, a, link(cross.pp))
    } else {
        0.0
    };
    let k = model.top_k.min(model.experts) as f64;
    let ep_time = if model.experts > 1 {
        mf * ls * 4.0 * price(Collective::Alltoall, ep, k * a, link(cross.ep))
    } else {
        0.0
    };

    let bytes = model.bytes_per_param as f64;
    let p_e = model.params * model.expert_fraction();
    let p_d = model.params - p_e;
    // Parameters one GPU holds, and over how many GPUs each is replicated.
    let (held_d, held_e) = (p_d / tpp as f64, p_e / (tpp * ep) as f64);
    let (rep_d, rep_e) = (dp, dp / ep);
    let (w_d, w_e) = (held_d * bytes, held_e * bytes);
    let mut dp_time = price(Collective::Allreduce, rep_d, w_d, link(cross.dp))
        + price(Collective::Allreduce, rep_e, w_e, link(cross.edp));
    if model.zero >= 3 {
        dp_time += price(Collective::Allgather, rep_d, w_d, link(cross.dp))
            + price(Collective::Allgather, rep_e, w_e, link(cross.edp));
    }

    let bubble = (pp - 1) as f64 / (m + pp - 1) as f64;
    let stretch = 1.0 / (1.0 - bubble); // (m + pp − 1)/m
    let comm = (tp_time + pp_time + ep_time) * stretch + dp_time;
    let compute = model.tflops.map(|t| {
        let active = if model.experts > 1 {
            p_d + p_e * k / model.experts as f64
        } else {
            p_d
        };
        let tokens = (model.micro_batch * model.seq) as f64;
        mf * 6.0 * active * tokens / (tpp as f64 * t * 1e12)
    });
    let step = compute.map(|c| (c + tp_time + pp_time + ep_time) * stretch + dp_time);

    let shard = |stage: u8, rep: u64| if model.zero >= stage { rep as f64 } else { 1.0 };
    let held = |stage: u8| held_d / shard(stage, rep_d) + held_e / shard(stage, rep_e);
    let act_layer =
        17.0 * bytes * (model.seq * model.micro_batch * model.hidden) as f64 / tp as f64;
    let memory = Memory {
        weights: bytes * held(3),
        grads: bytes * held(2),
        optimizer: 12.0 * held(1),
        activations: pp.min(m) as f64 * ls * act_layer,
    };
    let fits = memory.total() <= cluster.gpu_mem_bytes;

    let mut warnings = Vec::new();
    if cross.tp {
        warnings.push(format!(
            "TP={tp} crosses nodes: every layer's all-reduce rides the inter-node link"
        ));
    }
    if cross.ep {
        warnings.push(format!(
            "EP={ep} crosses nodes: every layer's all-to-all rides the inter-node link"
        ));
    }
    if !fits {
        warnings.push(format!(
            "needs {} per GPU, over the {} budget",
            format_bytes(memory.total()),
            format_bytes(cluster.gpu_mem_bytes)
        ));
    }
    if bubble > 0.5 {
        warnings.push(format!(
            "pipeline bubble {:.0} % ({pp} stages, {m} micro-batches): raise the global batch \
             or lower PP",
            bubble * 100.0
        ));
    }
    Ok(Estimate {
        layout,
        micro_batches: m,
        tp_time_s: tp_time,
        pp_time_s: pp_time,
        ep_time_s: ep_time,
        dp_time_s: dp_time,
        comm_time_s: comm,
        bubble,
        compute_time_s: compute,
        step_time_s: step,
        memory,
        fits,
        crosses: cross,
        warnings,
    })
}

/// Every layout priced, best first.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Feasible layouts: those that fit in memory first, each part by [`Estimate::key`]
    /// (ties: less memory, then smaller tp, pp, ep).
    pub ranked: Vec<Estimate>,
    /// Layouts with tp·pp·dp = N (and ep | dp) that break a divisibility rule, with the first
    /// rule they break.
    pub dropped: Vec<(Layout, Infeasible)>,
}

impl Plan {
    /// `pp does not divide the layers: 3, tp does not divide …: 1`, or empty when nothing
    /// was dropped.
    pub fn dropped_summary(&self) -> String {
        let mut counts: Vec<(Infeasible, usize)> = Vec::new();
        for (_, why) in &self.dropped {
            match counts.iter_mut().find(|(w, _)| w == why) {
                Some((_, c)) => *c += 1,
                None => counts.push((*why, 1)),
            }
        }
        counts.sort();
        counts
            .iter()
            .map(|(w, c)| format!("{w}: {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn divisors(n: u64) -> Vec<u64> {
    let mut small = Vec::new();
    let mut large = Vec::new();
    let mut d = 1;
    while d * d <= n {
        if n.is_multiple_of(d) {
            small.push(d);
            if d * d != n {
                large.push(n / d);
            }
        }
        d += 1;
    }
    small.extend(large.into_iter().rev());
    small
}

/// Prices every layout of `model` on `cluster` (tp, pp over the divisors of N, dp = N/(tp·pp),
/// ep over the divisors of dp, 1 without experts) and ranks them. An error when an input is
/// invalid or no layout passes the divisibility rules.
pub fn plan(cluster: &Cluster, model: &Model) -> Result<Plan, PlanError> {
    cluster.validate()?;
    model.validate()?;
    let n = cluster.gpus();
    let mut ranked = Vec::new();
    let mut dropped = Vec::new();
    for tp in divisors(n) {
        for pp in divisors(n / tp) {
            let dp = n / tp / pp;
            let eps = if model.experts > 1 {
                divisors(dp)
            } else {
                vec![1]
            };
            for ep in eps {
                let layout = Layout { tp, pp, dp, ep };
                match estimate(cluster, model, layout) {
                    Ok(e) => ranked.push(e),
                    Err(why) => dropped.push((layout, why)),
                }
            }
        }
    }
    ranked.sort_by(|a, b| {
        b.fits
            .cmp(&a.fits)
            .then(a.key().total_cmp(&b.key()))
            .then(a.mem_per_gpu_bytes().total_cmp(&b.mem_per_gpu_bytes()))
            .then(a.layout.cmp(&b.layout))
    });
    let plan = Plan { ranked, dropped };
    if plan.ranked.is_empty() {
        return Err(PlanError::NoLayout(format!(
            "every split of {n} GPUs breaks a rule ({})",
            plan.dropped_summary()
        )));
    }
    Ok(plan)
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number (`null` for a non-finite value, which valid inputs never produce).
fn json_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

fn json_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "null".into(), json_num)
}

impl Estimate {
    /// One JSON object: `tp pp dp ep micro_batches comm_time_s tp_time_s pp_time_s ep_time_s
    /// dp_time_s bubble compute_time_s step_time_s` (the last two `null` without `tflops`),
    /// `mem_per_gpu_bytes weights_bytes grads_bytes optimizer_bytes activations_bytes`
    /// (whole bytes), `fits`, `crosses_nodes` (`{"tp","pp","dp","ep"}` booleans) and
    /// `warnings` (a list of strings).
    pub fn to_json(&self) -> String {
        let l = &self.layout;
        let m = &self.memory;
        let c = &self.crosses;
        let warnings: Vec<String> = self.warnings.iter().map(|w| json_str(w)).collect();
        format!(
            "{{\"tp\":{},\"pp\":{},\"dp\":{},\"ep\":{},\"micro_batches\":{},\
             \"comm_time_s\":{},\"tp_time_s\":{},\"pp_time_s\":{},\"ep_time_s\":{},\
             \"dp_time_s\":{},\"bubble\":{},\"compute_time_s\":{},\"step_time_s\":{},\
             \"mem_per_gpu_bytes\":{},\"weights_bytes\":{},\"grads_bytes\":{},\
             \"optimizer_bytes\":{},\"activations_bytes\":{},\"fits\":{},\
             \"crosses_nodes\":{{\"tp\":{},\"pp\":{},\"dp\":{},\"ep\":{}}},\"warnings\":[{}]}}",
            l.tp,
            l.pp,
            l.dp,
            l.ep,
            self.micro_batches,
            json_num(self.comm_time_s),
            json_num(self.tp_time_s),
            json_num(self.pp_time_s),
            json_num(self.ep_time_s),
            json_num(self.dp_time_s),
            json_num(self.bubble),
            json_opt(self.compute_time_s),
            json_opt(self.step_time_s),
            json_num(m.total().round()),
            json_num(m.weights.round()),
            json_num(m.grads.round()),
            json_num(m.optimizer.round()),
            json_num(m.activations.round()),
            self.fits,
            c.tp,
            c.pp,
            c.dp,
            c.ep,
            warnings.join(",")
        )
    }
}

/// A JSON list of [`Estimate::to_json`] objects, in the given order, one per line.
pub fn to_json(estimates: &[Estimate]) -> String {
    let items: Vec<String> = estimates
        .iter()
        .map(|e| format!("  {}", e.to_json()))
        .collect();
    if items.is_empty() {
        "[]".into()
    } else {
        format!("[\n{}\n]", items.join(",\n"))
    }
}

#[cfg(test)]
mod tests;
