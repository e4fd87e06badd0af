//! The runtime through real `rcomm-run` jobs: init at several sizes, the bootstrap store, the
//! settings check, foreign launchers, failure notices and abort. Each job is checked for
//! leftovers (processes, /dev/shm entries) by the harness.

use rcomm_tests::{Job, dev_shm, test_program};
use std::process::Command;
use std::time::Duration;

fn world() -> String {
    test_program("rt_world")
}

#[test]
fn init_reports_rank_size_and_peers_at_1_to_8_ranks() {
    let shm0 = dev_shm();
    for n in [1u32, 2, 3, 4, 8] {
        let out = Job::new(n, &[&world(), "basic"]).run();
        assert_eq!(out.code(), 0, "{n} ranks\n{out}");
        for r in 0..n {
            assert_eq!(
                out.rank_lines(r),
                vec![format!("ok rank {r} size {n} peers {n}")],
                "{out}"
            );
        }
    }
    assert_eq!(dev_shm(), shm0, "no shared-memory file may be left behind");
}

#[test]
fn bootstrap_put_fence_get_rounds_at_1_to_8_ranks() {
    for n in [1u32, 2, 5, 8] {
        let out = Job::new(n, &[&world(), "kvs", "6"]).run();
        assert_eq!(out.code(), 0, "{out}");
        for r in 0..n {
            assert_eq!(
                out.rank_lines(r),
                vec![format!("ok kvs rank {r} rounds 6")],
                "{out}"
            );
        }
    }
}

#[test]
fn settings_mismatch_is_an_init_error_naming_the_variable_and_ranks() {
    let script = format!(
        r#"if [ "$RCOMM_RANK" = 2 ]; then export RCOMM_TRANSPORT=tcp; fi; exec {} init-error"#,
        world()
    );
    let out = Job::new(4, &["sh", "-c", &script])
        .deadline(Duration::from_secs(20))
        .run();
    assert_eq!(out.code(), 3, "{out}");
    for r in 0..4 {
        let lines = out.rank_lines(r);
        assert_eq!(lines.len(), 1, "{out}");
        let l = lines[0];
        assert!(
            l.starts_with("init error:") && l.contains("RCOMM_TRANSPORT"),
            "{l}"
        );
        assert!(
            l.contains("\"tcp\" on rank 2") && l.contains("ranks 0,1,3"),
            "{l}"
        );
    }
    assert!(out.elapsed < Duration::from_secs(10), "{out}");
}

#[test]
fn foreign_launcher_without_bootstrap_is_an_error_not_a_world_of_one() {
    for (k, v, hint) in [
        ("SLURM_NTASKS", "4", "--mpi=pmi2"),
        ("OMPI_COMM_WORLD_SIZE", "2", "PMIx"),
        ("PMIX_RANK", "0", "PMIx"),
    ] {
        let out = Command::new(world())
            .arg("init-error")
            .env(k, v)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(3), "{k}: {text}");
        assert!(
            text.contains(hint) && text.contains("rcomm-run"),
            "{k}: {text}"
        );
    }
    // Alone and without any launcher: a world of one.
    let out = Command::new(world()).arg("init-error").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "unexpected init success at rank 0"
    );
}

#[test]
fn survivors_get_the_failure_notice_then_the_job_stops_within_5s() {
    let out = Job::new(3, &["--grace", "1", &world(), "notice"])
        .deadline(Duration::from_secs(20))
        .run();
    assert_eq!(out.code(), 1, "{out}");
    for r in [0, 2] {
        let l = out.rank_lines(r);
        assert_eq!(l.len(), 1, "{out}");
        assert!(
            l[0].starts_with("saw failure of rank 1 after") && l[0].contains("exit"),
            "{}",
            l[0]
        );
        let ms: u64 = l[0]
            .split_whitespace()
            .nth(6)
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!(ms < 2000, "notice took {ms} ms");
    }
    assert!(out.stderr.contains("rank 1"), "{out}");
    assert!(out.elapsed < Duration::from_secs(5), "{out}");
}

#[test]
fn a_rank_leaving_without_finalizing_is_a_failure_the_others_hear_of() {
    let out = Job::new(3, &["--grace", "1", &world(), "exit0"])
        .deadline(Duration::from_secs(20))
        .run();
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr.contains("rank 1") && out.stderr.contains("without finalizing"),
        "{out}"
    );
    for r in [0, 2] {
        let l = out.rank_lines(r);
        assert!(
            l.len() == 1 && l[0].starts_with("saw failure of rank 1"),
            "{out}"
        );
    }
    assert!(out.elapsed < Duration::from_secs(5), "{out}");
}

#[test]
fn abort_ends_the_job_with_its_code_and_message() {
    let out = Job::new(3, &[&world(), "abort"])
        .deadline(Duration::from_secs(20))
        .run();
    assert_eq!(out.code(), 7, "{out}");
    assert!(out.stderr.contains("rank 1 gives up"), "{out}");
    assert!(out.elapsed < Duration::from_secs(5), "{out}");
}

#[test]
fn unknown_rcomm_variable_is_warned_about() {
    let out = Job::new(2, &[&world(), "basic"])
        .env("RCOMM_TRANSPOTR", "tcp")
        .run();
    assert_eq!(out.code(), 0, "{out}");
    assert!(
        out.stderr.contains("unknown variable RCOMM_TRANSPOTR"),
        "{out}"
    );
}

#[test]
fn shared_memory_rings_pass_checked_messages_between_ranks_over_the_local_channel() {
    let shm0 = dev_shm();
    for n in [2u32, 3, 4] {
        let out = Job::new(n, &[&test_program("rt_local"), "20000"]).run();
        assert_eq!(out.code(), 0, "{out}");
        for r in 0..(n & !1) {
            let l = out.rank_lines(r);
            assert!(
                l.len() == 1
                    && l[0].starts_with(&format!(
                        "rank {r} exchanged 20000 messages with rank {}",
                        r ^ 1
                    )),
                "{out}"
            );
        }
    }
    assert_eq!(
        dev_shm(),
        shm0,
        "segments are memfds: nothing may appear in /dev/shm"
    );
}

#[test]
fn a_killed_partner_is_seen_as_end_of_file_on_the_local_channel() {
    let out = Job::new(
        2,
        &[
            "--on-failure",
            "continue",
            &test_program("rt_local"),
            "100",
            "die",
        ],
    )
    .run();
    assert_eq!(out.code(), 137, "{out}");
    let l = out.rank_lines(0);
    assert_eq!(l.len(), 2, "{out}");
    let ms: u64 = l[1]
        .strip_prefix("rank 0 saw rank 1 die after ")
        .and_then(|s| s.strip_suffix(" ms"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(ms < 1000, "{out}");
}
