//! Hangs through real `rcomm-run` jobs: the collective watchdog (`RCOMM_TIMEOUT`), the
//! point-to-point one (`RCOMM_P2P_TIMEOUT`), and the hang report `rcomm-run` prints from every
//! rank's flight recorder — on a watchdog timeout, on `rcomm-run --dump`, on SIGUSR1, and with a
//! stopped rank that cannot answer. The harness checks that nothing is left behind.

use rcomm_tests::{Job, JobOutput, rcomm_run, test_program};
use std::process::Command;
use std::time::{Duration, Instant};

fn hang() -> String {
    test_program("rt_hang")
}

/// The lines of the hang report(s) on the launcher's stderr.
fn report(out: &JobOutput) -> String {
    out.stderr
        .lines()
        .filter(|l| l.starts_with("rcomm-run: "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Ranks 0, 1, 3 wait in allreduce #4 (after 3 warm-up allreduces) for rank 2, which sleeps:
/// each gets a Timeout naming the collective, and the report names rank 2 as late.
fn late_rank_times_out_the_others(algo: &str) {
    let t0 = Instant::now();
    let out = Job::new(4, &[&hang(), "late", "20"])
        .env("RCOMM_TIMEOUT", "3s")
        .env("RCOMM_ALGO", algo)
        .deadline(Duration::from_secs(30))
        .run();
    let took = t0.elapsed();
    assert_eq!(out.code(), 3, "{out}");
    for r in [0, 1, 3] {
        let l = out.rank_lines(r).join("\n");
        assert!(
            l.contains("error after") && l.contains("(Timeout)"),
            "rank {r}: {l}\n{out}"
        );
        assert!(
            l.contains("allreduce #4 on comm world") && l.contains("RCOMM_TIMEOUT"),
            "rank {r}: {l}\n{out}"
        );
    }
    let rep = report(&out);
    assert!(rep.contains("hang report (rank "), "{out}");
    assert!(rep.contains("comm world:"), "{out}");
    assert!(
        rep.contains("rank 2 (") && rep.contains("is at allreduce #3"),
        "the report must name rank 2 as late, at allreduce #3\n{out}"
    );
    assert!(
        rep.contains("it is in no rcomm call"),
        "rank 2 sleeps outside rcomm\n{out}"
    );
    assert!(
        rep.contains("ranks 0,1,3 wait in allreduce #4"),
        "the report must say where the others wait\n{out}"
    );
    // 3 s of watchdog, the report, then the launcher's stop sequence (grace 1 s + SIGTERM).
    assert!(took < Duration::from_secs(15), "{took:?}\n{out}");
}

#[test]
fn a_rank_that_never_arrives_times_out_the_others_and_is_named_shared_memory() {
    late_rank_times_out_the_others("allreduce:auto");
}

#[test]
fn a_rank_that_never_arrives_times_out_the_others_and_is_named_schedule() {
    late_rank_times_out_the_others("allreduce:ring");
}

#[test]
fn dump_and_sigusr1_print_a_report_and_the_job_goes_on() {
    let dir = std::env::temp_dir().join(format!("rcommtest-hang-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let idfile = dir.join("job-id");
    let _ = std::fs::remove_file(&idfile);
    let job = Job::new(4, &[&hang(), "catchup", "6", idfile.to_str().unwrap()])
        .deadline(Duration::from_secs(30))
        .spawn();
    let launcher = job.child.id();
    // The job id, once rank 0 has written it; then the others are about to wait.
    let t0 = Instant::now();
    let id = loop {
        if let Ok(s) = std::fs::read_to_string(&idfile)
            && !s.is_empty()
        {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "no job id");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(1500));
    let by_id = Command::new(rcomm_run())
        .args(["--dump", &id])
        .output()
        .unwrap();
    assert!(
        by_id.status.success(),
        "{}",
        String::from_utf8_lossy(&by_id.stderr)
    );
    assert!(
        String::from_utf8_lossy(&by_id.stderr).contains(&format!("(pid {launcher})")),
        "{}",
        String::from_utf8_lossy(&by_id.stderr)
    );
    std::thread::sleep(Duration::from_millis(1000));
    // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
    assert_eq!(unsafe { libc::kill(launcher as i32, libc::SIGUSR1) }, 0);
    let wrong = Command::new(rcomm_run())
        .args(["--dump", "no-such-job"])
        .output()
        .unwrap();
    assert_eq!(wrong.status.code(), Some(1));
    let out = job.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.code(), 0, "the job must go on and complete\n{out}");
    for r in 0..4 {
        assert!(
            out.rank_lines(r)
                .iter()
                .any(|l| l.starts_with("ok allreduce")),
            "{out}"
        );
    }
    let rep = report(&out);
    assert_eq!(rep.matches("hang report (").count(), 2, "{out}");
    assert!(rep.contains("hang report (SIGUSR1 to rcomm-run)"), "{out}");
    assert_eq!(
        rep.matches("ranks 0,1,3 wait in allreduce #4").count(),
        2,
        "{out}"
    );
    assert!(rep.contains("is at allreduce #3"), "{out}");
}

#[test]
fn a_stopped_rank_cannot_answer_and_is_named_by_the_others_view() {
    let out = Job::new(4, &[&hang(), "stop"])
        .env("RCOMM_TIMEOUT", "3s")
        .deadline(Duration::from_secs(30))
        .run();
    assert_ne!(out.code(), 0, "{out}");
    for r in [0, 1, 3] {
        let l = out.rank_lines(r).join("\n");
        assert!(
            l.contains("allreduce #4 on comm world"),
            "rank {r}: {l}\n{out}"
        );
    }
    let rep = report(&out);
    // Unanswered after 2 s; or, if the heartbeat limit passed meanwhile, declared hung.
    assert!(
        rep.contains("rank 2 (")
            && (rep.contains("no answer (stopped?") || rep.contains("no answer (no heartbeat")),
        "{out}"
    );
    assert!(rep.contains("wait in allreduce #4"), "{out}");
}

#[test]
fn a_receive_times_out_only_with_rcomm_p2p_timeout() {
    let out = Job::new(3, &[&hang(), "recv"])
        .env("RCOMM_P2P_TIMEOUT", "2s")
        .deadline(Duration::from_secs(30))
        .run();
    assert_eq!(out.code(), 3, "{out}");
    let l = out.rank_lines(1).join("\n");
    assert!(
        l.contains("recv from rank 0 on comm world: no message for")
            && l.contains("RCOMM_P2P_TIMEOUT"),
        "{l}\n{out}"
    );
    assert!(
        report(&out).contains("rank 1 (") && report(&out).contains("waits in recv from rank 0"),
        "{out}"
    );
}
