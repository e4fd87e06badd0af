//! `rcomm-bench pt2pt` end to end on two ranks through `rcomm-run` (built beside rcomm-bench,
//! target/<profile>/rcomm-run, by `cargo test --workspace` or `cargo build -p rcomm-launcher`):
//! latency, bw, bibw and exchange print a row per size with a positive finite figure and pass
//! their check pass; and a receive that stops writing (`--inject-stale`, rank 1 receiving into
//! a spare buffer after some iteration) fails it, naming the size, the rank, the buffer and
//! the iteration whose data the buffer holds.

mod common;
use common::{figure_ok, json_row};
use std::path::PathBuf;
use std::process::Command;

/// target/<profile>/rcomm-run, when it has been built.
fn rcomm_run() -> Option<PathBuf> {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rcomm-bench"));
    let p = bench.parent()?.join("rcomm-run");
    p.exists().then_some(p)
}

fn skip_without_launcher() {
    rcomm_testkit::skip(
        "rcomm-run is not built beside rcomm-bench: `cargo test --workspace` builds it, or `cargo build -p \
         rcomm-launcher` (same profile) before `cargo test -p rcomm-benches`",
    );
}

/// `rcomm-run -n 2 rcomm-bench pt2pt ARGS`: (exit status, stdout, stderr).
fn pt2pt(run: &PathBuf, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(run)
        .args(["-n", "2", "--no-prefix"])
        .arg(env!("CARGO_BIN_EXE_rcomm-bench"))
        .arg("pt2pt")
        .args(args)
        .output()
        .expect("run rcomm-run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const CHECK_PASSED: &str =
    "# check passed at every size: each receive buffer held the sender's last message";

#[test]
fn every_test_prints_every_size_and_passes_its_check() {
    let Some(run) = rcomm_run() else {
        return skip_without_launcher();
    };
    let sizes: Vec<usize> = (0..=16).map(|k| 1usize << k).collect();
    for (test, key, iters) in [
        ("latency", "latency_us", "50"),
        ("exchange", "latency_us", "50"),
        ("bw", "bandwidth_MBps", "3"),
        ("bibw", "bandwidth_MBps", "3"),
    ] {
        let (rc, out, err) = pt2pt(
            &run,
            &[test, "-m", "1:64K", "-i", iters, "-x", "2", "--json"],
        );
        assert_eq!(rc, 0, "{test}: {out}\n{err}");
        // Only the rows on stdout, one per size in order (a size's row is printed only after
        // its check pass agreed on both ranks).
        let rows: Vec<(usize, f64)> = out
            .lines()
            .map(|l| json_row(l, key).unwrap_or_else(|| panic!("{test}: not a row: {l:?}\n{out}")))
            .collect();
        assert_eq!(
            rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            sizes,
            "{test}: {out}"
        );
        for (size, v) in &rows {
            assert!(figure_ok(key, *size, *v), "{test}, size {size}: {v}\n{out}");
        }
        assert!(err.contains(CHECK_PASSED), "{test}: {err}");
        assert!(!err.contains("check failed"), "{test}: {err}");
    }
    // The table: title, header, a row per size, the check line.
    let (rc, out, err) = pt2pt(&run, &["bw", "-m", "1K:4K", "-i", "2", "-x", "1"]);
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(
        out.contains("# OSU-style Bandwidth Test (osu_bw methodology)"),
        "{out}"
    );
    assert!(out.contains(CHECK_PASSED), "{out}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    for (row, size) in rows.iter().zip(["1024", "2048", "4096"]) {
        assert_eq!(row.len(), 2, "{out}");
        assert_eq!(row[0], size, "{out}");
        let v: f64 = row[1].parse().unwrap();
        assert!(v.is_finite() && v > 0.0, "{out}");
    }
}

#[test]
fn a_receive_that_stops_writing_fails_the_check() {
    let Some(run) = rcomm_run() else {
        return skip_without_launcher();
    };
    // -i 4 -x 2: iterations 0..=5. Rank 1 receives into a spare buffer after iteration ITER,
    // so its receive buffer keeps iteration ITER's message.
    for (test, stale) in [
        ("latency", "0"),
        ("exchange", "3"),
        ("bw", "0"),
        ("bibw", "4"),
    ] {
        let (rc, out, err) = pt2pt(
            &run,
            &[
                test,
                "-m",
                "64:128",
                "-i",
                "4",
                "-x",
                "2",
                "--inject-stale",
                stale,
            ],
        );
        assert_eq!(rc, 1, "{test}: {out}\n{err}");
        let want = format!(
            "rcomm-bench: check failed: {test}, size 64: rank 1, receive buffer 0: byte 0 holds the stamp of \
             iteration {stale}, not of the last iteration 5 (the buffer was not written after iteration {stale})"
        );
        assert!(err.contains(&want), "{test}: wanted {want:?} in\n{err}");
        // No row for the failed size, nor for the next one (the run stops), no "passed".
        assert!(
            out.lines().all(|l| l.starts_with('#')),
            "{test}: a row was printed: {out}"
        );
        assert!(!out.contains(CHECK_PASSED), "{test}: {out}");
    }
    // Stale after the last iteration: nothing is missed, the check passes.
    let (rc, out, err) = pt2pt(
        &run,
        &[
            "bw",
            "-m",
            "64",
            "-i",
            "4",
            "-x",
            "2",
            "--inject-stale",
            "5",
        ],
    );
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(out.contains(CHECK_PASSED), "{out}");
}

#[test]
fn percentiles_describe_every_size_of_a_latency_run() {
    let Some(run) = rcomm_run() else {
        return skip_without_launcher();
    };
    let (rc, out, err) = pt2pt(
        &run,
        &[
            "latency",
            "-m",
            "8:64",
            "-i",
            "200",
            "-x",
            "5",
            "--json",
            "--percentiles",
        ],
    );
    assert_eq!(rc, 0, "{out}\n{err}");
    for size in [8, 16, 32, 64] {
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("# percentiles size {size}: ")))
            .unwrap_or_else(|| panic!("no percentiles for size {size}\n{err}"));
        // p50 ≤ p90 ≤ p99 ≤ p99.9 ≤ max, all positive, and a share between 0 and 100 %.
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |key: &str| -> f64 {
            let i = words
                .iter()
                .position(|w| *w == key)
                .unwrap_or_else(|| panic!("no {key:?} in {line}"));
            words[i + 1]
                .trim_end_matches('%')
                .parse()
                .unwrap_or_else(|e| panic!("{key:?} in {line}: {e}"))
        };
        let (p50, p90, p99, p999, max) = (
            after("p50"),
            after("p90"),
            after("p99"),
            after("p99.9"),
            after("max"),
        );
        // The share closes the line: "… above p99 4.7%".
        let share: f64 = words
            .last()
            .and_then(|w| w.trim_end_matches('%').parse().ok())
            .unwrap_or_else(|| panic!("no share in {line}"));
        assert!(
            p50 > 0.0 && p50 <= p90 && p90 <= p99 && p99 <= p999 && p999 <= max,
            "{line}"
        );
        assert!((0.0..=100.0).contains(&share), "{line}");
    }
    // Only where every iteration is timed on its own.
    for args in [
        &["bw", "--percentiles"][..],
        &["latency", "--device", "--percentiles"],
    ] {
        let (rc, _, err) = pt2pt(&run, args);
        assert_ne!(rc, 0, "{args:?}");
        assert!(err.contains("--percentiles times each iteration"), "{err}");
    }
}
