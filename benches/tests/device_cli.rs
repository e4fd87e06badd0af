//! `rcomm-bench pt2pt … --device`, `rcomm-bench coll … --device` and `rcomm-bench dtod` on the
//! host-memory stand-in of a device (`RCOMM_GPU_STANDIN=1`, so they run without a GPU): rows
//! say `"memory":"device"` and pass their check pass (coll: #wrong 0), a receive that stops
//! writing or a corrupted result fails it, `dtod` prints a figure; and without a device (no
//! driver, no stand-in) they fail with rcomm's reason, not a panic.

mod common;
use common::{figure_ok, json_row, json_str};
use std::path::PathBuf;
use std::process::{Command, Output};

const BENCH: &str = env!("CARGO_BIN_EXE_rcomm-bench");

/// target/<profile>/rcomm-run, when it has been built.
fn rcomm_run() -> Option<PathBuf> {
    let p = PathBuf::from(BENCH).parent()?.join("rcomm-run");
    p.exists().then_some(p)
}

fn skip_without_launcher() {
    rcomm_testkit::skip(
        "rcomm-run is not built beside rcomm-bench: `cargo test --workspace` builds it, or `cargo build -p \
         rcomm-launcher` (same profile) before `cargo test -p rcomm-benches`",
    );
}

fn text(o: &Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `rcomm-run -n N rcomm-bench SUB ARGS`, on the stand-in when `standin`.
fn bench(run: &PathBuf, n: u32, standin: bool, sub: &str, args: &[&str]) -> (i32, String, String) {
    let mut c = Command::new(run);
    c.args(["-n", &n.to_string(), "--no-prefix", BENCH, sub])
        .args(args);
    if standin {
        c.env("RCOMM_GPU_STANDIN", "1");
    } else {
        c.env_remove("RCOMM_GPU_STANDIN");
    }
    text(&c.output().expect("run rcomm-run"))
}

/// `rcomm-run -n 2 rcomm-bench pt2pt ARGS`, on the stand-in when `standin`.
fn pt2pt(run: &PathBuf, standin: bool, args: &[&str]) -> (i32, String, String) {
    bench(run, 2, standin, "pt2pt", args)
}

/// `rcomm-run -n N rcomm-bench coll ARGS`, on the stand-in when `standin`.
fn coll(run: &PathBuf, n: u32, standin: bool, args: &[&str]) -> (i32, String, String) {
    bench(run, n, standin, "coll", args)
}

const CHECK_PASSED: &str =
    "# check passed at every size: each receive buffer held the sender's last message";

#[test]
fn device_rows_pass_their_check_and_say_device() {
    let Some(run) = rcomm_run() else {
        return skip_without_launcher();
    };
    for (test, key) in [
        ("latency", "latency_us"),
        ("exchange", "latency_us"),
        ("bw", "bandwidth_MBps"),
        ("bibw", "bandwidth_MBps"),
    ] {
        let (rc, out, err) = pt2pt(
            &run,
            true,
            &[
                test, "-m", "1:256K", "-i", "3", "-x", "1", "-W", "8", "--json", "--device",
            ],
        );
        assert_eq!(rc, 0, "{test}: {out}\n{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 19, "{test}: {out}");
        for l in lines {
            let (size, v) = json_row(l, key).unwrap_or_else(|| panic!("{test}: not a row: {l:?}"));
            assert!(figure_ok(key, size, v), "{test}, size {size}: {v}");
            assert_eq!(json_str(l, "memory"), Some("device"), "{test}: {l}");
        }
        assert!(err.contains(CHECK_PASSED), "{test}: {err}");
        assert!(err.contains("memory: device 0 (stand-in)"), "{test}: {err}");
        assert!(err.contains("device bytes: ipc read"), "{test}: {err}");
    }
    // Host rows say host.
    let (rc, out, err) = pt2pt(&run, false, &["latency", "-m", "8", "-i", "3", "--json"]);
    assert_eq!(rc, 0, "{out}\n{err}");
    for l in out.lines() {
        assert_eq!(json_str(l, "memory"), Some("host"), "{l}");
    }
}

#[test]
fn a_device_receive_that_stops_writing_fails_the_check() {
    let Some(run) = rcomm_run() else {
        return skip_without_launcher();
    };
    for test in ["latency", "bw"] {
        let (rc, out, err) = pt2pt(
            &run,
            true,
            &[
                test,
                "-m",
                "64K:64K",
                "-i",
                "4",
                "-x",
                "1",
                "-W",
                "4",
                "--device",
                "--inject-stale",
                "2",
            ],
        );
        assert_ne!(rc, 0, "{test}: {out}\n{err}");
        assert!(
            err.contains("check failed")
                && err.contains("iteration 2, not of the last iteration 4"),
            "{test}: {out}\n{err}"
        );
    }
}

#[test]
fn without_a_device_pt2pt_device_fails_with_the_reason() {
    let Some(run) = rcomm_run() else {
        return skip_without_launcher();
    };
    let (rc, out, err) = pt2pt(&run, false, &["latency", "-m", "8", "-i", "3", "--device"]);
    if rc == 0 {
        // A machine with a GPU: nothing to check here.
        return;
    }
    assert!(err.contains("--device on rank"), "{out}\n{err}");
    assert!(err.contains("no CUDA device is usable"), "{out}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn dtod_prints_a_bandwidth_on_the_stand_in() {
    let o = Command::new(BENCH)
        .args(["dtod", "--size", "1M", "--iters", "3", "--json"])
        .env("RCOMM_GPU_STANDIN", "1")
        .output()
        .unwrap();
    let (rc, out, err) = text(&o);
    assert_eq!(rc, 0, "{out}\n{err}");
    let l = out.trim();
    assert_eq!(json_str(l, "backend"), Some("stand-in"), "{l}");
    let gbps: f64 = l
        .split_once("\"GBps\":")
        .and_then(|(_, r)| r.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{l}"));
    assert!(gbps.is_finite() && gbps > 0.0, "{l}");
    let o = Command::new(BENCH)
        .args(["dtod", "--size", "64K", "--iters", "2"])
        .env("RCOMM_GPU_STANDIN", "1")
        .output()
        .unwrap();
    let (rc, out, err) = text(&o);
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(
        out.contains("bytes counted once:") && out.contains("read + written (2x):"),
        "{out}"
    );
    // No device: rcomm's reason, exit status 1.
    let o = Command::new(BENCH)
        .args(["dtod", "--size", "64K", "--iters", "2"])
        .env_remove("RCOMM_GPU_STANDIN")
        .output()
        .unwrap();
    let (rc, out, err) = text(&o);
    if rc != 0 {
        assert_eq!(rc, 1, "{out}\n{err}");
        assert!(
            err.contains("rcomm-bench dtod: no CUDA device is usable"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// The device sum kernel's benchmark (host functions on the stand-in) checks its result bit for
/// bit against the CPU kernel for every element type it takes, and refuses the others.
#[test]
fn dtod_reduce_times_the_sum_kernel_and_checks_it() {
    for d in ["f32", "bf16", "f16", "i32"] {
        let o = Command::new(BENCH)
            .args([
                "dtod", "--reduce", d, "--size", "1M", "--iters", "2", "--json",
            ])
            .env("RCOMM_GPU_STANDIN", "1")
            .output()
            .unwrap();
        let (rc, out, err) = text(&o);
        assert_eq!(rc, 0, "{d}: {out}\n{err}");
        assert_eq!(
            json_str(out.trim(), "op"),
            Some(format!("sum_{d}").as_str()),
            "{out}"
        );
    }
    let o = Command::new(BENCH)
        .args(["dtod", "--reduce", "u8", "--size", "1M"])
        .env("RCOMM_GPU_STANDIN", "1")
        .output()
        .unwrap();
    let (rc, out, err) = text(&o);
    assert_eq!(rc, 1, "{out}\n{err}");
    assert!(err.contains("f32, bf16, f16 or i32"), "{err}");
}

/// Every device collective on 3 ranks (rooted ones at root 1), f32 and a 16-bit type, small
/// sizes: each JSON row says `"memory":"device"` and has `"wrong":0` in the variants the device
/// API has (allreduce both, bcast in place, the others out of place) and `null` in the other;
/// then allreduce on a created stream (`--stream`) on 2 ranks, as the table.
#[test]
fn coll_device_rows_have_no_wrong_elements() {
    let Some(run) = rcomm_run() else {
        return skip_without_launcher();
    };
    // (out of place, in place) checked; the other column is null.
    for (op, oop_ok, ip_ok) in [
        ("allreduce", true, true),
        ("bcast", false, true),
        ("reduce", true, false),
        ("allgather", true, false),
        ("reduce_scatter", true, false),
        ("alltoall", true, false),
    ] {
        for dtype in ["float", "bfloat16"] {
            let what = format!("{op} {dtype}");
            let (rc, out, err) = coll(
                &run,
                3,
                true,
                &[
                    op, "-b", "96", "-e", "24K", "-f", "16", "-n", "2", "-w", "1", "-r", "1", "-d",
                    dtype, "--json", "--device",
                ],
            );
            assert_eq!(rc, 0, "{what}: {out}\n{err}");
            let rows: Vec<&str> = out.lines().collect();
            assert_eq!(rows.len(), 3, "{what}: {out}");
            for l in rows {
                assert_eq!(json_str(l, "memory"), Some("device"), "{what}: {l}");
                let (oop, ip) = l.split_once("\"inplace\":").expect("inplace field");
                for (part, ok) in [(oop, oop_ok), (ip, ip_ok)] {
                    if ok {
                        assert!(part.contains("\"wrong\":0"), "{what}: {l}");
                    } else {
                        assert!(
                            part.contains("\"wrong\":null") || part.starts_with("null"),
                            "{what}: {l}"
                        );
                    }
                }
            }
            assert!(
                err.contains("# memory: device 0 (stand-in), *_device collectives"),
                "{what}: {err}"
            );
            assert!(err.contains("Out of bounds values : 0 OK"), "{what}: {err}");
        }
    }
    let (rc, out, err) = coll(
        &run,
        2,
        true,
        &[
            "allreduce",
            "-b",
            "8",
            "-e",
            "64K",
            "-f",
            "8",
            "-n",
            "2",
            "-w",
            "1",
            "--device",
            "--stream",
        ],
    );
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(
        out.contains("allreduce_device_on a created stream"),
        "{out}"
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 5, "{out}");
    for f in rows {
        // size count type redop root | out of place (time algbw busbw #wrong) | in place
        assert_eq!(f.len(), 13, "{f:?}");
        assert_eq!((f[8], f[12]), ("0", "0"), "{out}");
    }
}

/// A corrupted device result fails the run with #wrong > 0; collectives without a device form
/// and `--stream` outside allreduce are refused before anything runs; without a device the
/// run fails with rcomm's reason.
#[test]
fn coll_device_failures_are_reported() {
    let Some(run) = rcomm_run() else {
        return skip_without_launcher();
    };
    let (rc, out, err) = coll(
        &run,
        2,
        true,
        &[
            "reduce_scatter",
            "-b",
            "1K",
            "-e",
            "1K",
            "-n",
            "2",
            "--device",
            "--inject-wrong",
        ],
    );
    assert_eq!(rc, 1, "{out}\n{err}");
    assert!(out.contains("Out of bounds values : 1 FAILED"), "{out}");
    assert!(err.contains("1 wrong elements"), "{err}");
    for (args, msg) in [
        (
            &["gather", "--device"][..],
            "--device: rcomm has no device form of gather yet",
        ),
        (
            &["barrier", "--device"][..],
            "--device: barrier has no buffers",
        ),
        (
            &["bcast", "--device", "--stream"][..],
            "--stream: only allreduce has a stream-ordered device form",
        ),
    ] {
        let (rc, out, err) = coll(&run, 2, true, &[args, &["-b", "8", "-e", "8"]].concat());
        assert_eq!(rc, 2, "{args:?}: {out}\n{err}");
        assert!(err.contains(msg), "{args:?}: {err}");
    }
    let (rc, out, err) = coll(
        &run,
        2,
        false,
        &["allreduce", "-b", "8", "-e", "8", "--device"],
    );
    if rc != 0 {
        assert!(err.contains("--device on rank"), "{out}\n{err}");
        assert!(err.contains("no CUDA device is usable"), "{out}\n{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `-A all` with `--device` runs every device algorithm of the operation (the device
/// executor's and `staged`), each forced in turn, every row checked.
#[test]
fn coll_device_runs_every_device_algorithm_with_a_all() {
    let Some(run) = rcomm_run() else {
        return skip_without_launcher();
    };
    let (rc, out, err) = coll(
        &run,
        3,
        true,
        &[
            "allreduce",
            "--device",
            "-b",
            "8",
            "-e",
            "64K",
            "-f",
            "64",
            "-A",
            "all",
        ],
    );
    assert_eq!(rc, 0, "{out}\n{err}");
    for a in ["one_shot", "two_shot", "ring", "staged"] {
        assert!(out.contains(&format!("# algo: {a}")), "{a}\n{out}");
    }
    assert!(out.contains("# Out of bounds values : 0 OK"), "{out}");
    let (rc, out, err) = coll(
        &run,
        2,
        true,
        &["allreduce", "--device", "-A", "rabenseifner"],
    );
    assert_eq!(rc, 2, "{out}\n{err}");
    assert!(err.contains("one_shot"), "{err}");
}
