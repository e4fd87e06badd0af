//! rcomm's NCCL engine through real `rcomm-run` jobs: the stand-in libnccl
//! (`rcomm-nccl-standin`, a dev-dependency, so its `libnccl.so` is built next to this test's
//! binary) over the GPU stand-in with a GPU per rank (`RCOMM_GPU_STANDIN=distinct`), chosen by
//! `RCOMM_GPU_BACKEND=auto`. What this proves is rcomm's side — the choice, the split, the
//! enqueue without a wait, the host-wait budget, failures as rcomm's errors; a real NCCL on
//! real GPUs is `scripts/gpu-check.sh`'s.

use rcomm_tests::{Job, JobOutput, test_program};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The stand-in libnccl next to this binary (`target/<profile>/deps/libnccl.so`), or the skip.
fn standin_lib() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    let p = [dir.join("libnccl.so"), dir.join("../libnccl.so")]
        .into_iter()
        .find(|p| p.is_file());
    if p.is_none() {
        rcomm_tests::skip(&format!(
            "no stand-in libnccl.so next to {} (build the rcomm-nccl-standin package)",
            exe.display()
        ));
    }
    p
}

fn job(n: u32, args: &[&str], lib: &std::path::Path, gpus: &str) -> Job {
    job_with(n, &[], args, lib, gpus)
}

/// A job of `rt_nccl args` with the launcher's options `pre`.
fn job_with(n: u32, pre: &[&str], args: &[&str], lib: &std::path::Path, gpus: &str) -> Job {
    let prog = test_program("rt_nccl");
    let mut all = pre.to_vec();
    all.push(prog.as_str());
    all.extend_from_slice(args);
    Job::new(n, &all)
        .env("RCOMM_GPU_STANDIN", gpus)
        .env("RCOMM_NCCL_LIB", lib.to_str().expect("utf-8 path"))
        .env("RCOMM_TRANSPORT", "shm")
        .env("RCOMM_DEBUG", "INFO")
        .env("RCOMM_DEBUG_SUBSYS", "COLL")
        .deadline(Duration::from_secs(90))
}

fn all_ok(out: &JobOutput, ranks: &[u32], case: &str) {
    for &r in ranks {
        assert!(
            out.rank_lines(r)
                .iter()
                .any(|l| l.contains(&format!("rank {r}: ok {case}"))),
            "rank {r} did not pass {case}\n{out}"
        );
    }
}

#[test]
fn auto_chooses_nccl_with_a_gpu_per_rank_and_rcomm_on_a_shared_gpu() {
    let Some(lib) = standin_lib() else { return };
    let out = job(4, &["choice", "nccl"], &lib, "distinct").run();
    assert_eq!(out.code(), 0, "{out}");
    all_ok(&out, &[0, 1, 2, 3], "choice nccl");
    assert!(
        out.stderr.contains("RCOMM_GPU_BACKEND=auto")
            || out.stdout.contains("RCOMM_GPU_BACKEND=auto"),
        "the choice is logged with its reason\n{out}"
    );
    let out = job(4, &["choice", "rcomm"], &lib, "1").run();
    assert_eq!(out.code(), 0, "{out}");
    all_ok(&out, &[0, 1, 2, 3], "choice rcomm");
}

#[test]
fn every_collective_a_group_and_a_mesh_on_nccl_at_4_ranks() {
    let Some(lib) = standin_lib() else { return };
    let out = job(4, &["table"], &lib, "distinct").run();
    assert_eq!(out.code(), 0, "{out}");
    for case in [
        "allreduce",
        "bcast",
        "reduce",
        "allgather",
        "reduce_scatter",
        "alltoall",
        "group",
        "mesh",
    ] {
        all_ok(&out, &[0, 1, 2, 3], case);
    }
}

#[test]
fn a_stream_ordered_call_returns_before_its_stream_ran_it() {
    let Some(lib) = standin_lib() else { return };
    let out = job(2, &["enqueue"], &lib, "distinct").run();
    assert_eq!(out.code(), 0, "{out}");
    all_ok(&out, &[0, 1], "enqueue");
}

#[test]
fn nccl_collectives_cost_no_host_wait_and_one_nccl_call() {
    let Some(lib) = standin_lib() else { return };
    let out = job(2, &["budget"], &lib, "distinct").run();
    assert_eq!(out.code(), 0, "{out}");
    all_ok(&out, &[0, 1], "budget");
}

#[test]
fn a_rank_dying_mid_collective_is_peer_lost_naming_it_and_abort_leaves_nothing() {
    let Some(lib) = standin_lib() else { return };
    let t = Instant::now();
    let out = job_with(4, &["--on-failure", "continue"], &["die"], &lib, "distinct")
        .env("RCOMM_TIMEOUT", "30s")
        .run();
    all_ok(&out, &[0, 1, 3], "die");
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "{:?}\n{out}",
        t.elapsed()
    );
}

#[test]
fn a_rank_that_never_joins_times_out_the_others_and_the_report_names_the_nccl_op() {
    let Some(lib) = standin_lib() else { return };
    let t = Instant::now();
    let out = job(4, &["hang"], &lib, "distinct")
        .env("RCOMM_TIMEOUT", "3s")
        .run();
    for r in [0, 1, 3] {
        assert!(
            out.rank_lines(r)
                .iter()
                .any(|l| l.contains(&format!("rank {r}: ok hang"))),
            "rank {r}\n{out}"
        );
    }
    let report: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("rcomm-run: "))
        .collect();
    let report = report.join("\n");
    assert!(report.contains("hang report"), "{out}");
    assert!(
        report.contains("allreduce #")
            && report.contains("nccl op 3)")
            && report.contains("NCCL streams: rank "),
        "the report names the NCCL operation and its number\n{out}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(40),
        "{:?}\n{out}",
        t.elapsed()
    );
}

#[test]
fn a_revoked_communicator_ends_the_nccl_wait_with_revoked() {
    let Some(lib) = standin_lib() else { return };
    let out = job(4, &["revoke"], &lib, "distinct")
        .env("RCOMM_TIMEOUT", "30s")
        .run();
    assert_eq!(out.code(), 0, "{out}");
    all_ok(&out, &[0, 1, 2, 3], "revoke");
}

#[test]
fn checked_mode_finds_a_call_that_differs_on_the_nccl_path() {
    let Some(lib) = standin_lib() else { return };
    let out = job(4, &["checked"], &lib, "distinct")
        .env("RCOMM_CHECK", "1")
        .env("RCOMM_TIMEOUT", "30s")
        .run();
    assert_eq!(out.code(), 0, "{out}");
    all_ok(&out, &[0, 1, 2, 3], "checked");
}

#[test]
fn the_watchdog_aborts_stream_ordered_work_past_the_deadline() {
    let Some(lib) = standin_lib() else { return };
    let out = job(4, &["hang-stream"], &lib, "distinct")
        .env("RCOMM_TIMEOUT", "3s")
        .run();
    all_ok(&out, &[0, 1, 3], "hang-stream");
}
