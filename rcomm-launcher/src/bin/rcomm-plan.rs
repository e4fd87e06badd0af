//! `rcomm-plan`: ranks the TP × PP × DP (× EP) layouts of a model on a cluster by the
//! communication (or step) time and memory `rcomm-planner` estimates for them; or, with
//! `--price`, prices one collective by the same formulas. The formulas are in
//! `rcomm-planner`'s documentation (also `rcomm::plan`); this file only reads the command line
//! and prints.

use clap::Parser;
use rcomm_planner::{self as plan, Cluster, Collective, Estimate, Model, PlanError};
use std::process::ExitCode;

const AFTER_HELP: &str = "\
Bandwidths are per direction and per GPU: what one GPU sends while it receives as much (NVLink's \
900 GB/s bidirectional is 450 GB/s here; a 400 Gb/s NIC per GPU is 400Gb/s or 50GB/s). Units: \
bandwidths B/s KB/s MB/s GB/s TB/s KiB/s…TiB/s or bits Gb/s, Gbit/s, Gbps; times s, ms, us, ns; \
sizes B, KB…TB, KiB…TiB; counts K, M, B (or G), T.

Topology file (--topology): one `key = value` per line, # comments, keys as the cluster flags \
without dashes: nodes, gpus-per-node, intra-bw, inter-bw, intra-lat, inter-lat, gpu-mem. Flags \
given on the command line override the file.

Placement: TP innermost (consecutive ranks), then PP, DP outermost; a group whose ranks land on \
more than one node is priced on the inter-node link. Per step: TP 4 ring all-reduces of \
b·s·h·bytes per layer and micro-batch; PP activations forward and gradients back per micro-batch \
(α + S/β each); DP a ring all-reduce of params/(tp·pp)·bytes; bubble (pp−1)/(m+pp−1); \
comm time = (TP + PP + EP time)/(1 − bubble) + DP time. Memory: 16 B per parameter \
(mixed-precision Adam) before ZeRO sharding, plus activations. Layouts that fit rank first, then by \
step time with --tflops, else by comm time. Full formulas: the rcomm-planner documentation \
(rcomm::plan).";

/// Rank the TP × PP × DP layouts of a model on a cluster by estimated communication time.
#[derive(Debug, Parser)]
#[command(name = "rcomm-plan", version, after_help = AFTER_HELP, args_override_self = true)]
struct Cli {
    /// A file with the cluster's settings (`key = value` lines, see below).
    #[arg(long, value_name = "FILE", help_heading = "Cluster")]
    topology: Option<std::path::PathBuf>,
    /// Number of nodes.
    #[arg(long, value_name = "N", help_heading = "Cluster")]
    nodes: Option<String>,
    /// GPUs per node.
    #[arg(long, value_name = "N", help_heading = "Cluster")]
    gpus_per_node: Option<String>,
    /// Bandwidth between two GPUs of one node, per direction (e.g. 900GB/s).
    #[arg(long, value_name = "BW", help_heading = "Cluster")]
    intra_bw: Option<String>,
    /// Bandwidth between GPUs of different nodes, per direction and per GPU (e.g. 50GB/s or
    /// 400Gb/s).
    #[arg(long, value_name = "BW", help_heading = "Cluster")]
    inter_bw: Option<String>,
    /// Latency of one message inside a node (e.g. 1us).
    #[arg(long, value_name = "TIME", help_heading = "Cluster")]
    intra_lat: Option<String>,
    /// Latency of one message between nodes (e.g. 5us).
    #[arg(long, value_name = "TIME", help_heading = "Cluster")]
    inter_lat: Option<String>,
    /// Memory of one GPU [default: 80GB].
    #[arg(long, value_name = "SIZE", help_heading = "Cluster")]
    gpu_mem: Option<String>,

    /// Parameters, all experts included (e.g. 70B).
    #[arg(long, value_name = "COUNT", help_heading = "Model")]
    params: Option<String>,
    /// Transformer layers.
    #[arg(long, value_name = "N", help_heading = "Model")]
    layers: Option<u64>,
    /// Hidden size.
    #[arg(long, value_name = "N", help_heading = "Model")]
    hidden: Option<u64>,
    /// Attention heads (TP must divide them) [default: not checked].
    #[arg(long, value_name = "N", help_heading = "Model")]
    heads: Option<u64>,
    /// Sequence length, tokens.
    #[arg(long, value_name = "N", help_heading = "Model")]
    seq: Option<u64>,
    /// Sequences per micro-batch.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Model")]
    micro_batch: u64,
    /// Sequences per step (all data-parallel replicas together).
    #[arg(long, value_name = "N", help_heading = "Model")]
    global_batch: Option<u64>,
    /// Bytes per parameter, activation and gradient element.
    #[arg(long, value_name = "N", default_value_t = 2, help_heading = "Model")]
    bytes_per_param: u64,
    /// Experts per layer (every layer a mixture-of-experts layer); 1: dense.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Model")]
    experts: u64,
    /// Experts each token is routed to.
    #[arg(long, value_name = "K", default_value_t = 1, help_heading = "Model")]
    top_k: u64,
    /// ZeRO stage: 1 shards optimizer state over DP, 2 also gradients, 3 also weights (and
    /// adds a parameter all-gather per step).
    #[arg(
        long,
        value_name = "0|1|2|3",
        default_value_t = 0,
        help_heading = "Model"
    )]
    zero: u8,
    /// Achieved TFLOP/s per GPU: adds compute to get a step-time estimate, which then ranks.
    #[arg(long, value_name = "F", help_heading = "Model")]
    tflops: Option<f64>,

    /// Rows to print [default: 10 in the table, every layout with --json].
    #[arg(long, value_name = "N", help_heading = "Output")]
    top: Option<usize>,
    /// A JSON list on stdout, best first, one object per layout: tp pp dp ep micro_batches
    /// comm_time_s tp_time_s pp_time_s ep_time_s dp_time_s bubble compute_time_s step_time_s
    /// mem_per_gpu_bytes weights_bytes grads_bytes optimizer_bytes activations_bytes fits
    /// crosses_nodes warnings.
    #[arg(long, help_heading = "Output")]
    json: bool,

    /// Price one collective instead: allreduce, allgather, reduce_scatter, alltoall or p2p,
    /// with --ranks, --bytes and the --link's latency and bandwidth; prints seconds.
    #[arg(long, value_name = "OP", help_heading = "Pricing one collective")]
    price: Option<String>,
    /// Ranks taking part (--price).
    #[arg(long, value_name = "N", help_heading = "Pricing one collective")]
    ranks: Option<u64>,
    /// Bytes: the all-reduced, gathered, or sent size (--price).
    #[arg(long, value_name = "SIZE", help_heading = "Pricing one collective")]
    bytes: Option<String>,
    /// Which link's --*-lat and --*-bw price it (--price).
    #[arg(
        long,
        value_name = "intra|inter",
        default_value = "intra",
        help_heading = "Pricing one collective"
    )]
    link: String,
    /// Local reduction rate γ (bytes folded per second, e.g. 20GB/s; --price): adds
    /// (n−1)/n · S/γ to allreduce and reduce_scatter. Without it the reduction is free.
    #[arg(long, value_name = "RATE", help_heading = "Pricing one collective")]
    reduce_bw: Option<String>,
    /// Local copy rate κ (bytes copied per second, e.g. 10GB/s; --price): adds S/(n·κ) to
    /// alltoall, the block a rank keeps. Without it the copy is free.
    #[arg(long, value_name = "RATE", help_heading = "Pricing one collective")]
    copy_bw: Option<String>,
    /// Per-call overhead o of a collective beyond its messages' latency (e.g. 250ns; --price):
    /// added once to every operation but p2p [default: 0].
    #[arg(long, value_name = "TIME", help_heading = "Pricing one collective")]
    call_overhead: Option<String>,
}

/// The cluster settings from the topology file, then the flags (later ones win).
fn cluster_pairs(cli: &Cli) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    if let Some(path) = &cli.topology {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read topology file {}: {e}", path.display()))?;
        pairs = plan::parse_key_values(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    for (k, v) in [
        ("nodes", &cli.nodes),
        ("gpus-per-node", &cli.gpus_per_node),
        ("intra-bw", &cli.intra_bw),
        ("inter-bw", &cli.inter_bw),
        ("intra-lat", &cli.intra_lat),
        ("inter-lat", &cli.inter_lat),
        ("gpu-mem", &cli.gpu_mem),
    ] {
        if let Some(v) = v {
            pairs.push((k.to_string(), v.clone()));
        }
    }
    Ok(pairs)
}

fn required<T: Copy>(v: Option<T>, flag: &str) -> Result<T, PlanError> {
    v.ok_or_else(|| PlanError::Missing(flag.to_string()))
}

fn model(cli: &Cli) -> Result<Model, PlanError> {
    let params = plan::parse_count("--params", required(cli.params.as_deref(), "--params")?)?;
    Ok(Model {
        heads: cli.heads,
        micro_batch: cli.micro_batch,
        bytes_per_param: cli.bytes_per_param,
        experts: cli.experts,
        top_k: cli.top_k,
        zero: cli.zero,
        tflops: cli.tflops,
        ..Model::new(
            params,
            required(cli.layers, "--layers")?,
            required(cli.hidden, "--hidden")?,
            required(cli.seq, "--seq")?,
            required(cli.global_batch, "--global-batch")?,
        )
    })
}

/// `--price`: one collective's time by the planner's formula.
fn price(cli: &Cli, op: &str) -> Result<String, String> {
    let op: Collective = op.parse().map_err(|e: PlanError| e.to_string())?;
    let pairs = cluster_pairs(cli)?;
    let link = cli.link.as_str();
    if link != "intra" && link != "inter" {
        return Err(format!("--link {link}: expected intra or inter"));
    }
    let get = |key: String| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k.replace('_', "-") == key)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("--price needs --{key} (or `{key}` in the topology file)"))
    };
    let bw = plan::parse_bandwidth(&format!("--{link}-bw"), &get(format!("{link}-bw"))?)
        .map_err(|e| e.to_string())?;
    let lat = plan::parse_duration(&format!("--{link}-lat"), &get(format!("{link}-lat"))?)
        .map_err(|e| e.to_string())?;
    let ranks = cli.ranks.ok_or("--price needs --ranks")?;
    if ranks == 0 {
        return Err("--ranks: at least 1".into());
    }
    let bytes = plan::parse_bytes(
        "--bytes",
        cli.bytes.as_deref().ok_or("--price needs --bytes")?,
    )
    .map_err(|e| e.to_string())?;
    let link = plan::Link {
        latency_s: lat,
        bandwidth: bw,
    };
    let rate = |flag: &str, v: &Option<String>| {
        v.as_deref()
            .map(|v| plan::parse_bandwidth(flag, v).map_err(|e| e.to_string()))
            .transpose()
    };
    let local = plan::Local {
        reduce_bw: rate("--reduce-bw", &cli.reduce_bw)?,
        copy_bw: rate("--copy-bw", &cli.copy_bw)?,
        call_overhead_s: cli
            .call_overhead
            .as_deref()
            .map(|v| plan::parse_duration("--call-overhead", v).map_err(|e| e.to_string()))
            .transpose()?
            .unwrap_or(0.0),
    };
    let t = plan::price_local(op, ranks, bytes, link, &local);
    Ok(if cli.json {
        format!(
            "{{\"op\":\"{}\",\"ranks\":{ranks},\"bytes\":{bytes},\"latency_s\":{lat},\
             \"bandwidth\":{bw},\"time_s\":{t}}}",
            op.name()
        )
    } else {
        format!("{t}")
    })
}

fn pct(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

/// A time; `-` for none (no such traffic in this layout).
fn secs(v: f64) -> String {
    if v == 0.0 {
        "-".into()
    } else {
        plan::format_time(v)
    }
}

fn table(cluster: &Cluster, model: &Model, plan: &plan::Plan, top: usize) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "cluster: {cluster}");
    let _ = writeln!(out, "model:   {model}");
    let unfit = plan.ranked.iter().filter(|e| !e.fits).count();
    let _ = write!(
        out,
        "{} layouts ({} over the memory budget)",
        plan.ranked.len(),
        unfit
    );
    if !plan.dropped.is_empty() {
        let _ = write!(
            out,
            "; {} dropped ({})",
            plan.dropped.len(),
            plan.dropped_summary()
        );
    }
    let by = if model.tflops.is_some() {
        "step time (compute + communication, no overlap)"
    } else {
        "communication time per step (--tflops adds compute)"
    };
    let _ = writeln!(out, "; ranked by {by}\n");
    let moe = model.experts > 1;
    let step = model.tflops.is_some();
    let mut header = vec!["#", "tp", "pp", "dp"];
    if moe {
        header.push("ep");
    }
    header.push("m");
    if step {
        header.push("step");
    }
    header.extend(["comm", "TP", "PP"]);
    if moe {
        header.push("EP");
    }
    header.extend(["DP", "bubble", "mem/GPU"]);
    let mut rows: Vec<(Vec<String>, &Estimate)> = Vec::new();
    for (i, e) in plan.ranked.iter().take(top).enumerate() {
        let l = e.layout;
        let mut r = vec![
            (i + 1).to_string(),
            l.tp.to_string(),
            l.pp.to_string(),
            l.dp.to_string(),
        ];
        if moe {
            r.push(l.ep.to_string());
        }
        r.push(e.micro_batches.to_string());
        if let Some(s) = e.step_time_s {
            r.push(secs(s));
        }
        r.extend([secs(e.comm_time_s), secs(e.tp_time_s), secs(e.pp_time_s)]);
        if moe {
            r.push(secs(e.ep_time_s));
        }
        r.extend([
            secs(e.dp_time_s),
            pct(e.bubble),
            plan::format_bytes(e.mem_per_gpu_bytes()),
        ]);
        rows.push((r, e));
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|(r, _)| r[c].chars().count())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let hdr: Vec<String> = header.iter().map(|s| s.to_string()).collect();
    let _ = writeln!(out, "{}", line(&hdr));
    for (r, e) in &rows {
        let _ = writeln!(out, "{}", line(r));
        for w in &e.warnings {
            let _ = writeln!(out, "{:pad$}  ! {w}", "", pad = widths[0]);
        }
    }
    if top < plan.ranked.len() {
        let _ = writeln!(
            out,
            "({} more; --top N shows more, --json all)",
            plan.ranked.len() - top
        );
    }
    out
}

fn run(cli: &Cli) -> Result<String, String> {
    if let Some(op) = &cli.price {
        return price(cli, op);
    }
    let cluster = Cluster::from_pairs(cluster_pairs(cli)?).map_err(|e| e.to_string())?;
    let model = model(cli).map_err(|e| e.to_string())?;
    let plan = plan::plan(&cluster, &model).map_err(|e| e.to_string())?;
    Ok(if cli.json {
        let n = cli.top.unwrap_or(plan.ranked.len()).min(plan.ranked.len());
        plan::to_json(&plan.ranked[..n])
    } else {
        table(&cluster, &model, &plan, cli.top.unwrap_or(10))
    })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
    };
    match run(&cli) {
        Ok(s) => {
            println!("{}", s.trim_end());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rcomm-plan: {e}");
            ExitCode::from(2)
        }
    }
}
