//! `rcomm-plan` as a user runs it: the issue's 70B command with `--json`, parsed; the help
//! text; a topology file; bad input; `--price`.

use serde_json::Value;
use std::process::{Command, Output};

const PLAN: &str = env!("CARGO_BIN_EXE_rcomm-plan");

/// The issue's 64-GPU cluster.
const CLUSTER: &[&str] = &[
    "--nodes",
    "8",
    "--gpus-per-node",
    "8",
    "--intra-bw",
    "900GB/s",
    "--inter-bw",
    "50GB/s",
    "--intra-lat",
    "1us",
    "--inter-lat",
    "5us",
];

/// The issue's 70B model.
const MODEL: &[&str] = &[
    "--params",
    "70B",
    "--layers",
    "80",
    "--hidden",
    "8192",
    "--seq",
    "4096",
    "--micro-batch",
    "1",
    "--global-batch",
    "512",
    "--bytes-per-param",
    "2",
];

fn plan(args: &[&str]) -> Output {
    Command::new(PLAN)
        .args(args)
        .output()
        .expect("run rcomm-plan")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "rcomm-plan failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn json_plan(extra: &[&str]) -> Vec<Value> {
    let args: Vec<&str> = [CLUSTER, MODEL, &["--json"], extra].concat();
    let out = stdout(&plan(&args));
    match serde_json::from_str(&out).expect("--json prints JSON") {
        Value::Array(v) => v,
        other => panic!("expected a list, got {other}"),
    }
}

#[test]
fn json_lists_every_layout_best_first_with_the_required_fields() {
    let list = json_plan(&[]);
    assert!(list.len() > 10, "{} layouts", list.len());
    for o in &list {
        for k in ["tp", "pp", "dp", "ep", "micro_batches", "mem_per_gpu_bytes"] {
            assert!(o[k].is_u64(), "{k} in {o}");
        }
        for k in [
            "comm_time_s",
            "bubble",
            "tp_time_s",
            "pp_time_s",
            "dp_time_s",
        ] {
            assert!(o[k].as_f64().is_some_and(|v| v >= 0.0), "{k} in {o}");
        }
        assert!(
            o["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .all(Value::is_string)
        );
        assert!(o["fits"].is_boolean() && o["step_time_s"].is_null());
        let (tp, pp, dp) = (o["tp"].as_u64(), o["pp"].as_u64(), o["dp"].as_u64());
        assert_eq!(tp.unwrap() * pp.unwrap() * dp.unwrap(), 64);
    }
    // Best first: the layouts that fit, by communication time, then the ones that do not.
    let key = |o: &Value| {
        (
            !o["fits"].as_bool().unwrap(),
            o["comm_time_s"].as_f64().unwrap(),
        )
    };
    for w in list.windows(2) {
        let (a, b) = (key(&w[0]), key(&w[1]));
        assert!(
            (!a.0 && b.0) || (a.0 == b.0 && a.1 <= b.1),
            "{} before {}",
            w[0],
            w[1]
        );
    }
    // TP8 × PP4 × DP2 above every TP16 layout, each of which is flagged.
    let at = |tp, pp, dp| {
        list.iter()
            .position(|o| o["tp"] == tp && o["pp"] == pp && o["dp"] == dp)
            .unwrap()
    };
    let good = at(8, 4, 2);
    let mut tp16 = 0;
    for (i, o) in list.iter().enumerate().filter(|(_, o)| o["tp"] == 16) {
        tp16 += 1;
        assert!(i > good, "{o} ranks above TP8 × PP4 × DP2");
        assert!(
            o["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w
                    == "TP=16 crosses nodes: every layer's all-reduce rides the inter-node link"),
            "{o}"
        );
    }
    assert_eq!(tp16, 3, "TP16 with PP 1, 2, 4");
    // --top cuts the list.
    assert_eq!(json_plan(&["--top", "3"]).len(), 3);
}

#[test]
fn tflops_add_a_step_time_that_ranks() {
    let list = json_plan(&["--tflops", "400", "--zero", "1"]);
    let step = |o: &Value| o["step_time_s"].as_f64().unwrap();
    assert!(
        list.iter()
            .all(|o| step(o) > o["comm_time_s"].as_f64().unwrap())
    );
    let fitting: Vec<_> = list.iter().filter(|o| o["fits"] == true).collect();
    assert!(fitting.windows(2).all(|w| step(w[0]) <= step(w[1])));
}

#[test]
fn the_table_shows_the_top_layouts_and_their_warnings() {
    let args: Vec<&str> = [CLUSTER, MODEL, &["--top", "7"]].concat();
    let out = stdout(&plan(&args));
    assert!(out.contains("64 GPUs (8 nodes × 8"), "{out}");
    assert!(out.contains("per direction"), "{out}");
    assert!(out.contains("! TP=16 crosses nodes"), "{out}");
    assert!(out.contains("more; --top N shows more"), "{out}");
}

#[test]
fn help_says_bandwidths_are_per_direction() {
    let out = stdout(&plan(&["--help"]));
    assert!(out.contains("Bandwidths are per direction"), "{out}");
    assert!(
        out.contains("--intra-bw") && out.contains("--topology"),
        "{out}"
    );
}

#[test]
fn a_topology_file_gives_the_cluster_and_flags_override_it() {
    let dir = std::env::temp_dir().join(format!("rcomm-plan-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cluster.txt");
    std::fs::write(
        &file,
        "# 8 DGX-like nodes\nnodes = 4\ngpus_per_node = 8\nintra-bw = 900GB/s\n\
         inter-bw = 400Gb/s\nintra-lat = 1us\ninter-lat = 5us\ngpu-mem = 80GB\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    // nodes = 4 in the file, 8 on the command line: the same plan as the flags alone.
    let args: Vec<&str> = [&["--topology", f, "--nodes", "8", "--json"], MODEL].concat();
    let from_file = stdout(&plan(&args));
    let args: Vec<&str> = [CLUSTER, MODEL, &["--json"]].concat();
    assert_eq!(from_file, stdout(&plan(&args)));

    std::fs::write(&file, "nodes = 8\ngpus per node 8\n").unwrap();
    let args: Vec<&str> = [&["--topology", f], MODEL].concat();
    let o = plan(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("line 2") && err.contains("cluster.txt"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_an_error_naming_the_flag_never_a_panic() {
    for (args, want) in [
        (vec!["--intra-bw", "900GB"], "--intra-bw"),
        (vec!["--inter-lat", "5"], "--inter-lat"),
        (vec!["--params", "70X"], "--params"),
        (vec!["--zero", "4"], "--zero"),
        (vec!["--nodes", "0"], "--nodes"),
        (vec!["--global-batch", "0"], "--global-batch"),
    ] {
        // The flag given last wins over the good value before it.
        let all: Vec<&str> = [CLUSTER, MODEL, &args].concat();
        let o = plan(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(want) && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    let o = plan(&["--nodes", "8"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("missing --gpus-per-node"), "{err}");
}

/// `rcomm-plan ARGS` (a `--price` call without `--json`): the seconds it prints.
fn priced(args: &[&str]) -> f64 {
    stdout(&plan(args)).trim().parse().unwrap()
}

#[test]
fn price_gives_one_collective_by_the_planners_formula() {
    // 2·3·1 µs + 2·3/4 · 16 777 216 B / 100 GB/s = 2.5765824e-4 s.
    let o = stdout(&plan(&[
        "--price",
        "allreduce",
        "--ranks",
        "4",
        "--bytes",
        "16MiB",
        "--intra-bw",
        "100GB/s",
        "--intra-lat",
        "1us",
        "--json",
    ]));
    let v: Value = serde_json::from_str(&o).unwrap();
    assert_eq!(v["op"], "allreduce");
    let t = v["time_s"].as_f64().unwrap();
    assert!((t - 2.5765824e-4).abs() < 1e-15, "{t}");
    // p2p on the inter link: 5 µs + 1 MB / 10 GB/s = 1.05e-4 s.
    let t = priced(&[
        "--price",
        "p2p",
        "--ranks",
        "2",
        "--bytes",
        "1MB",
        "--link",
        "inter",
        "--inter-bw",
        "10GB/s",
        "--inter-lat",
        "5us",
    ]);
    assert!((t - 1.05e-4).abs() < 1e-15, "{t}");
    // reduce_scatter with a reduction rate: 3 · 1 µs + 3/4 · 1 MB / 10 GB/s + 3/4 · 1 MB / 5 GB/s
    // = 3 µs + 75 µs + 150 µs.
    let t = priced(&[
        "--price",
        "reduce_scatter",
        "--ranks",
        "4",
        "--bytes",
        "1MB",
        "--intra-bw",
        "10GB/s",
        "--intra-lat",
        "1us",
        "--reduce-bw",
        "5GB/s",
    ]);
    assert!((t - 228e-6).abs() < 1e-15, "{t}");
    // alltoall with a copy rate and a per-call overhead: 1 µs + 1/2 · 1 MB / 10 GB/s (the
    // exchange) + 1 MB / 2 / 5 GB/s (the kept block) + 250 ns = 1 µs + 50 µs + 100 µs + 0.25 µs.
    let t = priced(&[
        "--price",
        "alltoall",
        "--ranks",
        "2",
        "--bytes",
        "1MB",
        "--intra-bw",
        "10GB/s",
        "--intra-lat",
        "1us",
        "--copy-bw",
        "5GB/s",
        "--call-overhead",
        "250ns",
    ]);
    assert!((t - 151.25e-6).abs() < 1e-15, "{t}");
    // p2p is one message: neither term applies (1 µs + 1 MB / 10 GB/s).
    let t = priced(&[
        "--price",
        "p2p",
        "--ranks",
        "2",
        "--bytes",
        "1MB",
        "--intra-bw",
        "10GB/s",
        "--intra-lat",
        "1us",
        "--copy-bw",
        "5GB/s",
        "--call-overhead",
        "250ns",
    ]);
    assert!((t - 101e-6).abs() < 1e-15, "{t}");
    let o = plan(&["--price", "bcast", "--ranks", "2", "--bytes", "1MB"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_book_shows_what_the_issue_command_prints() {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../book/src/tools/plan.md"
    ))
    .unwrap();
    let args: Vec<&str> = [CLUSTER, MODEL, &["--top", "6"]].concat();
    let out = stdout(&plan(&args));
    for line in out.lines() {
        assert!(
            readme.contains(&format!("\n{line}\n")),
            "book/src/tools/plan.md's rcomm-plan example lacks the line {line:?}: paste the output again"
        );
    }
}
