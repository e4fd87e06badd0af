//! `rcomm-bench coll` end to end on a world of one rank (run without the launcher): the
//! columns, the JSON objects, the plot, and the exit status when results are wrong.

use std::process::Command;

fn bench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rcomm-bench"))
        .args(args)
        .env_remove("RCOMM_RANK")
        .output()
        .expect("run rcomm-bench");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn table_has_nccl_tests_shape() {
    let (rc, out, err) = bench(&[
        "coll",
        "allreduce",
        "-b",
        "8",
        "-e",
        "4K",
        "-f",
        "8",
        "-n",
        "3",
        "-w",
        "1",
    ]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains(
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
    ));
    let rows: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 4, "{out}");
    let f: Vec<&str> = rows[1].split_whitespace().collect();
    // size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
    assert_eq!(f.len(), 13, "{}", rows[1]);
    assert_eq!(&f[..5], ["64", "16", "float", "sum", "-1"]);
    assert_eq!((f[8], f[12]), ("0", "0"));
    assert!(out.contains("# Out of bounds values : 0 OK"));
    assert!(out.contains("# Avg bus bandwidth    : "));
}

#[test]
fn json_objects_and_missing_variants() {
    let (rc, out, err) = bench(&[
        "coll", "bcast", "-b", "1K", "-e", "1K", "-n", "2", "-w", "0", "-d", "bfloat16", "--json",
    ]);
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "only JSON on stdout: {out}");
    let l = lines[0];
    assert!(
        l.starts_with(
            "{\"op\":\"bcast\",\"algo\":\"auto\",\"size\":1024,\"count\":512,\"type\":\"bfloat16\""
        ),
        "{l}"
    );
    assert!(
        l.contains("\"time_us\":null") && l.contains("\"inplace\":{\"time_us\":"),
        "{l}"
    );
    assert!(
        err.contains("# rcomm-bench coll bcast"),
        "headers go to stderr: {err}"
    );
}

#[test]
fn wrong_results_fail_the_run() {
    let (rc, out, err) = bench(&[
        "coll",
        "reduce_scatter",
        "-b",
        "64",
        "-e",
        "64",
        "-n",
        "1",
        "-w",
        "0",
        "-d",
        "int32",
        "--inject-wrong",
    ]);
    assert_eq!(rc, 1, "{out}{err}");
    assert!(out.contains("# Out of bounds values : 1 FAILED"), "{out}");
    assert!(err.contains("wrong elements; first at index 0"), "{err}");
}

#[test]
fn algorithms_and_plot() {
    let dir = std::env::temp_dir().join(format!("rcomm-coll-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("busbw.svg");
    let (rc, out, err) = bench(&[
        "coll",
        "allreduce",
        "-b",
        "1K",
        "-e",
        "16K",
        "-f",
        "4",
        "-n",
        "2",
        "-w",
        "0",
        "-A",
        "all",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(rc, 0, "{err}");
    for a in ["ring", "rd", "rabenseifner", "direct", "shm", "hier"] {
        assert!(out.contains(&format!("# algo: {a}")), "{a}\n{out}");
    }
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    std::fs::remove_dir_all(&dir).unwrap();
    let (rc, _, err) = bench(&["coll", "bcast", "-A", "ring"]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("valid: auto, tree, scatter_allgather, pipeline, shm, hier, all"),
        "{err}"
    );
    let (rc, _, err) = bench(&["coll", "barrier", "--plot", "x.svg"]);
    assert_eq!(rc, 2);
    assert!(err.contains("time only"), "{err}");
}
