//! Liveness: heartbeats catch a stopped rank (its sockets stay open, so nothing else would), every
//! survivor learns of it — also one blocked on a live peer — and a rank that merely computes
//! is not accused. Every job is bounded by a deadline; afterwards no process of the job and no
//! shared-memory segment of it is left.
use rcomm_tests::{Job, dev_shm, test_program, wait_no_processes};
use std::time::Duration;

/// Heartbeat every 200 ms, hung after 5 silent intervals: 1 s.
const HEARTBEAT: &str = "200ms,5";

#[test]
fn a_stopped_rank_is_declared_hung_killed_and_named_by_every_survivor() {
    for transport in ["auto", "tcp"] {
        let shm0 = dev_shm();
        let job = Job::new(
            4,
            &["--on-failure", "continue", &test_program("rt_live"), "stop"],
        )
        .env("RCOMM_HEARTBEAT", HEARTBEAT)
        .env("RCOMM_TRANSPORT", transport)
        .deadline(Duration::from_secs(30));
        let marker = job.marker().to_string();
        let out = job.run();
        assert_eq!(out.code(), 137, "{transport}: {out}");
        assert!(
            out.stderr.contains("rank 2 (pid ")
                && out.stderr.contains("sent no heartbeat for")
                && out.stderr.contains("killing it"),
            "{transport}: the launcher must say it declared rank 2 hung\n{out}"
        );
        // The hang report, from the survivors' flight recorders: rank 2 cannot answer, the
        // others wait in the allreduce (ranks 0, 3) or in a receive from rank 0 (rank 1).
        assert!(
            out.stderr.contains("hang report (rank 2 ")
                && out.stderr.contains("rank 2 (")
                && out.stderr.contains("no answer (no heartbeat for")
                && out.stderr.contains("ranks 0,3 wait in allreduce #")
                && out.stderr.contains("waits in recv from rank 0"),
            "{transport}: the hang report must name rank 2 and say where the others wait\n{out}"
        );
        for r in [0u32, 1, 3] {
            let l = out.rank_lines(r);
            assert_eq!(l.len(), 2, "{transport}: {out}");
            let (msg, ms) = l[0].rsplit_once(" after ").expect("timing");
            let ms: u64 = ms.strip_suffix(" ms").unwrap().parse().unwrap();
            assert!(
                msg.contains("rank 2 (host ")
                    && msg.contains(" hung: ")
                    && msg.contains("heartbeat"),
                "{transport}: rank {r} must name rank 2 as hung: {msg}"
            );
            // Rank 2 stops at once; the error follows the 1 s limit, plus the launcher's tick
            // and scheduling on an oversubscribed machine.
            assert!(ms < 4000, "{transport}: rank {r} waited {ms} ms\n{out}");
            assert!(
                l[1].contains("rank 2") && l[1].contains("hung"),
                "{transport}: a new operation on the broken world fails too: {}",
                l[1]
            );
        }
        let left = wait_no_processes("RCOMMTEST_MARKER", &marker, Duration::from_secs(5));
        assert!(left.is_empty(), "{transport}: processes left: {left:?}");
        let leaked: Vec<String> = dev_shm().difference(&shm0).cloned().collect();
        assert!(leaked.is_empty(), "{transport}: segments left: {leaked:?}");
    }
}

#[test]
fn a_rank_computing_for_three_heartbeat_limits_is_not_declared_hung() {
    let out = Job::new(4, &[&test_program("rt_live"), "busy", "3"])
        .env("RCOMM_HEARTBEAT", HEARTBEAT)
        .deadline(Duration::from_secs(30))
        .run();
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(out.rank_lines(0), vec!["sum 6"], "{out}");
    assert!(!out.stderr.contains("heartbeat"), "{out}");
}

#[test]
fn a_bad_heartbeat_setting_is_refused_before_anything_starts() {
    let out = Job::new(2, &[&test_program("rt_live"), "busy", "0"])
        .env("RCOMM_HEARTBEAT", "1s,0")
        .deadline(Duration::from_secs(10))
        .run();
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.stderr.contains("RCOMM_HEARTBEAT"), "{out}");
}
