//! `rcomm-bench --straggler` end to end: the table on a world of one rank, and on four ranks
//! through `rcomm-run` (where it has been built beside this test) a rank slowed by `--slow` is
//! named the outlier, and nobody is without it.

use std::path::PathBuf;
use std::process::Command;

fn out_of(mut c: Command) -> (i32, String, String) {
    let out = c.output().expect("run rcomm-bench");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// target/<profile>/rcomm-run, when it has been built.
fn rcomm_run() -> Option<PathBuf> {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rcomm-bench"));
    let p = bench.parent()?.join("rcomm-run");
    p.exists().then_some(p)
}

#[test]
fn one_rank_prints_the_table_and_no_outlier() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rcomm-bench"));
    c.args([
        "--straggler",
        "--size",
        "4K",
        "--iters",
        "5",
        "--warmup",
        "1",
    ])
    .env_remove("RCOMM_RANK");
    let (rc, out, err) = out_of(c);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("late mean us"), "{out}");
    assert!(out.contains("# outliers: none"), "{out}");
    // A subcommand's flags and --straggler do not mix; nothing at all is an error.
    let mut c = Command::new(env!("CARGO_BIN_EXE_rcomm-bench"));
    c.args(["--straggler", "coll", "allreduce"]);
    assert_ne!(out_of(c).0, 0);
    assert_eq!(out_of(Command::new(env!("CARGO_BIN_EXE_rcomm-bench"))).0, 2);
}

#[test]
fn a_slowed_rank_is_named_the_outlier() {
    let Some(run) = rcomm_run() else {
        return rcomm_testkit::skip(
            "rcomm-run is not built beside rcomm-bench: `cargo test --workspace` builds it, or `cargo build -p \
             rcomm-launcher` (same profile) before `cargo test -p rcomm-benches`",
        );
    };
    let mut c = Command::new(run);
    c.args(["-n", "4", env!("CARGO_BIN_EXE_rcomm-bench")])
        .args(["--straggler", "--size", "16K", "--iters", "40"])
        .args(["--slow", "1:5000"]);
    let (rc, out, err) = out_of(c);
    assert_eq!(rc, 0, "{out}\n{err}");
    let outliers: Vec<&str> = out.lines().filter(|l| l.contains("# outlier:")).collect();
    assert_eq!(outliers.len(), 1, "{out}");
    assert!(outliers[0].contains("rank 1 "), "{out}");
}
