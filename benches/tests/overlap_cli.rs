//! `rcomm-bench overlap` end to end: on a world of one rank (no launcher) the columns, the
//! modes, the JSON objects and the exit status; on two ranks through `rcomm-run` where it has
//! been built beside this test (target/<profile>/rcomm-run, e.g. by `cargo build -p
//! rcomm-launcher`).

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

fn bench(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rcomm-bench"));
    c.arg("overlap")
        .args(args)
        .env_remove("RCOMM_RANK")
        .env_remove("RCOMM_ASYNC_PROGRESS");
    for (k, v) in env {
        c.env(k, v);
    }
    out_of(c)
}

fn rows(out: &str) -> Vec<Vec<&str>> {
    out.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect()
}

#[test]
fn table_has_the_columns_and_both_modes() {
    let (rc, out, err) = bench(
        &[
            "-b",
            "4K",
            "-e",
            "64K",
            "-f",
            "4",
            "-n",
            "3",
            "-w",
            "1",
            "--test-every",
            "2",
        ],
        &[],
    );
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("# RCOMM_ASYNC_PROGRESS unset"), "{out}");
    assert!(
        out.contains(
            "#       size       count      type      mode    chunks      t_comm      t_comp      t_both   overlap  #wrong"
        ),
        "{out}"
    );
    let r = rows(&out);
    assert_eq!(r.len(), 6, "3 sizes × 2 modes: {out}");
    for (i, f) in r.iter().enumerate() {
        assert_eq!(f.len(), 10, "{f:?}");
        let size = [4096, 16384, 65536][i / 2];
        assert_eq!(f[0], size.to_string());
        assert_eq!(f[1], (size / 4).to_string());
        assert_eq!(f[2], "float");
        assert_eq!(f[3], if i % 2 == 0 { "wait" } else { "test/2" });
        assert!(f[4].parse::<u64>().unwrap() >= 1);
        for t in &f[5..8] {
            assert!(t.parse::<f64>().unwrap() > 0.0, "{f:?}");
        }
        let ov: f64 = f[8].parse().unwrap();
        assert!((0.0..=100.0).contains(&ov), "{f:?}");
        assert_eq!(f[9], "0");
    }
    assert!(out.contains("# Out of bounds values : 0 OK"));
}

#[test]
fn json_objects_say_the_progress_setting() {
    let (rc, out, err) = bench(
        &[
            "-b", "1K", "-e", "1K", "-n", "2", "-w", "0", "-d", "int32", "--json",
        ],
        &[("RCOMM_ASYNC_PROGRESS", "1")],
    );
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "only JSON on stdout: {out}");
    assert!(
        lines[0].starts_with(
            "{\"op\":\"iallreduce\",\"size\":1024,\"count\":256,\"type\":\"int32\",\"redop\":\"sum\",\
             \"mode\":\"wait\",\"test_every\":null,\"async_progress\":\"1\",\"chunks\":"
        ),
        "{}",
        lines[0]
    );
    assert!(lines[0].ends_with(",\"wrong\":0}"), "{}", lines[0]);
    assert!(err.contains("# RCOMM_ASYNC_PROGRESS=1"), "{err}");
}

#[test]
fn bad_flags_are_usage_errors() {
    let (rc, _, err) = bench(&["-b", "2M", "-e", "1M"], &[]);
    assert_eq!(rc, 2);
    assert!(err.contains("-b 2097152 is above -e 1048576"), "{err}");
    let (rc, _, _) = bench(&["--test-every", "0"], &[]);
    assert_eq!(rc, 2);
}

/// target/<profile>/rcomm-run, when it has been built.
fn rcomm_run() -> Option<PathBuf> {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rcomm-bench"));
    let p = bench.parent()?.join("rcomm-run");
    p.exists().then_some(p)
}

#[test]
fn two_ranks_through_the_launcher() {
    let Some(run) = rcomm_run() else {
        return rcomm_testkit::skip(
            "rcomm-run is not built beside rcomm-bench: `cargo test --workspace` builds it, or `cargo build -p \
             rcomm-launcher` (same profile) before `cargo test -p rcomm-benches`",
        );
    };
    let mut c = Command::new(run);
    c.args(["-n", "2", "--no-prefix"])
        .arg(env!("CARGO_BIN_EXE_rcomm-bench"))
        .args([
            "overlap",
            "-b",
            "16K",
            "-e",
            "64K",
            "-f",
            "4",
            "-n",
            "3",
            "-w",
            "1",
            "--test-every",
            "1",
        ])
        .env_remove("RCOMM_ASYNC_PROGRESS");
    let (rc, out, err) = out_of(c);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("# nRanks 2 "), "{out}");
    let r = rows(&out);
    assert_eq!(r.len(), 4, "{out}");
    assert!(r.iter().all(|f| f.len() == 10 && f[9] == "0"), "{out}");
}
