//! The examples `heat` and `train3d` (rcomm-core/examples/) as real jobs under `rcomm-run`:
//! the parallel runs must reproduce the one-rank numbers (`train3d` also with `--device`, on
//! the stand-in of a GPU).

use rcomm_tests::{Job, JobOutput};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The examples' directory, `target/<profile>/examples`, after building both examples once for
/// every test of this file (`cargo test` builds a package's examples only when it tests that
/// package, and a test building while another runs the binary would fail with "text file
/// busy"). Built with this test's profile and the whole workspace's feature resolution, as
/// `cargo test --workspace` builds them, so there they are already up to date.
fn examples_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        // target/<profile dir>/deps/<test>
        let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
        let profile = match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "test",
            Some(other) => other,
        };
        let out = Command::new(env!("CARGO"))
            .args(["build", "--workspace", "--example", "heat"])
            .args(["--example", "train3d", "--example", "restart"])
            .args(["--profile", profile])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .output()
            .expect("run cargo");
        assert!(
            out.status.success(),
            "building the examples failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir.join("examples")
    })
}

fn run(n: u32, example: &str, args: &[&str], env: &[(&str, &str)]) -> JobOutput {
    let exe = examples_dir().join(example);
    let exe = exe.to_str().expect("utf-8 path");
    let mut job = Job::new(n, &[&[exe][..], args].concat()).deadline(Duration::from_secs(60));
    for (k, v) in env {
        job = job.env(k, v);
    }
    let out = job.run();
    assert_eq!(out.code(), 0, "{example} on {n} ranks\n{out}");
    out
}

/// Rank 0's line starting with `prefix`, the rest of it.
fn line<'a>(out: &'a JobOutput, prefix: &str) -> &'a str {
    out.rank_lines(0)
        .into_iter()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line `{prefix}`\n{out}"))
}

/// `heat result: steps S residual R sum X checksum C (T s)`.
#[derive(Debug, PartialEq)]
struct Heat {
    steps: u32,
    residual: f64,
    sum: f64,
    checksum: String,
}

fn heat(out: &JobOutput) -> Heat {
    let w: Vec<&str> = line(out, "heat result: ").split_whitespace().collect();
    assert_eq!(
        (w[0], w[2], w[4], w[6]),
        ("steps", "residual", "sum", "checksum"),
        "{out}"
    );
    Heat {
        steps: w[1].parse().unwrap(),
        residual: w[3].parse().unwrap(),
        sum: w[5].parse().unwrap(),
        checksum: w[7].to_string(),
    }
}

#[test]
fn heat_on_3_and_4_ranks_reproduces_the_one_rank_run() {
    let args = [
        "--nx", "50", "--ny", "37", "--steps", "3000", "--tol", "1e-6", "--every", "10",
    ];
    let one = heat(&run(1, "heat", &args, &[]));
    // Jacobi sweeps the same cells with the same arithmetic on any decomposition, and the
    // residual (a Max allreduce) and the fixed-point checksum (an integer Sum) are exact.
    assert_eq!(one.steps, 2750, "{one:?}");
    assert_eq!(one.residual, 9.994062531437642e-7, "{one:?}");
    assert_eq!(one.checksum, "0002835e8de01a43", "{one:?}");
    assert!((one.sum - 643.3693523468).abs() < 1e-9, "{one:?}");
    for (n, blocks) in [(4, "2x2"), (3, "3x1")] {
        let out = run(n, "heat", &args, &[]);
        assert!(
            line(&out, "heat: ").contains(&format!("on {n} ranks ({blocks} blocks)")),
            "{out}"
        );
        let h = heat(&out);
        assert_eq!(
            (h.steps, h.residual, &h.checksum),
            (one.steps, one.residual, &one.checksum),
            "{n} ranks\n{out}"
        );
        // The floating-point sum adds its terms in another order.
        assert!(((h.sum - one.sum) / one.sum).abs() < 1e-12, "{h:?} {one:?}");
    }
}

/// The `step K loss L` lines of rank 0.
fn losses(out: &JobOutput) -> Vec<f64> {
    let v: Vec<f64> = out
        .rank_lines(0)
        .into_iter()
        .filter_map(|l| l.strip_prefix("step "))
        .enumerate()
        .map(|(i, l)| {
            let (k, loss) = l.split_once(" loss ").expect("step K loss L");
            assert_eq!(k, i.to_string(), "{out}");
            loss.parse().unwrap()
        })
        .collect();
    assert_eq!(v.len(), 6, "{out}");
    v
}

#[test]
fn train3d_on_2x2x2_ranks_matches_the_single_process_run() {
    let reference = run(1, "train3d", &[], &[]);
    assert!(
        line(&reference, "train3d: ").starts_with("single-process reference"),
        "{reference}"
    );
    let want = losses(&reference);
    assert!((want[0] - 0.574154002629397).abs() < 1e-12, "{want:?}");
    assert!(
        want.windows(2).all(|w| w[1] < w[0]),
        "loss must fall: {want:?}"
    );
    assert!(want[5] < 0.8 * want[0], "{want:?}");
    // With progress inside rcomm calls only, and with the progress thread advancing the
    // gradient buckets' allreduces during the backward pass.
    for progress in ["0", "1"] {
        let out = run(8, "train3d", &[], &[("RCOMM_ASYNC_PROGRESS", progress)]);
        let head = line(&out, "train3d: ");
        assert!(
            head.starts_with("dp 2 x pp 2 x tp 2 on 8 ranks")
                && head.contains("2 gradient bucket(s) per stage"),
            "{out}"
        );
        assert_losses_match(&out, &want);
    }
}

/// Every step's loss of `out` agrees with the reference `want` within 1e-12 (relative), and so
/// does the difference train3d reports itself.
fn assert_losses_match(out: &JobOutput, want: &[f64]) {
    let got = losses(out);
    for (s, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            ((g - w) / w).abs() < 1e-12,
            "step {s}: {g} vs reference {w}\n{out}"
        );
    }
    let diff: f64 = line(
        out,
        "max relative difference from the single-process reference: ",
    )
    .parse()
    .unwrap();
    assert!(diff < 1e-12, "{out}");
}

/// `train3d --device` on the host-memory stand-in of a GPU (`RCOMM_GPU_STANDIN=1`): the tp
/// sums and dp gradient buckets are `allreduce_device` calls on `DeviceBuffer`s, the pipeline
/// messages `send_device` / `recv_device`; the losses must match the single-process reference
/// as the host run's do.
#[test]
fn train3d_device_on_2x2x2_ranks_matches_the_single_process_run() {
    let want = losses(&run(1, "train3d", &[], &[]));
    let out = run(8, "train3d", &["--device"], &[("RCOMM_GPU_STANDIN", "1")]);
    let head = line(&out, "train3d: ");
    assert!(
        head.starts_with("dp 2 x pp 2 x tp 2 on 8 ranks")
            && head.ends_with("communication through device memory"),
        "{out}"
    );
    assert_losses_match(&out, &want);
}

/// `restart` (checkpoint and resume): rank 1 dies at step 23 of the first run; with
/// `--max-restarts 1` rcomm-run starts the job again, every rank resumes from its step-20
/// checkpoint, and the result equals an uninterrupted run's.
#[test]
fn restart_resumes_from_the_checkpoint_and_matches_an_uninterrupted_run() {
    let dir = std::env::temp_dir().join(format!("rcomm-restart-{}", std::process::id()));
    let d = dir.to_str().expect("utf-8 path");
    let exe = examples_dir().join("restart");
    let exe = exe.to_str().expect("utf-8 path");
    let plain = run(4, "restart", &[d, "40", "5"], &[]);
    let want = line(&plain, "result ").to_string();
    let out = Job::new(
        4,
        &["--max-restarts", "1", exe, d, "40", "5", "--fail-at", "23"],
    )
    .deadline(Duration::from_secs(60))
    .run();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.code(), 0, "{out}");
    assert!(
        out.stderr
            .contains("restarting it (1 of 1), RCOMM_RESTART_COUNT=1"),
        "{out}"
    );
    assert!(out.rank_lines(0).contains(&"resumed from step 20"), "{out}");
    assert_eq!(line(&out, "result "), want, "{out}");
    // Without restarts the same failure ends the job.
    let once = Job::new(4, &[exe, d, "40", "5", "--fail-at", "23"])
        .deadline(Duration::from_secs(60))
        .run();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(once.code(), 134, "{once}");
}
