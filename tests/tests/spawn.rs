//! Process spawning through real `rcomm-run` jobs (`rt_spawn`): parents start children with
//! two commands, trade data both ways over the intercommunicator, merge it both ways round
//! and reduce over the merge; and the failures — a program that cannot start, children that
//! crash before init, a child that leaves mid-job — end in errors on every parent, quickly,
//! with no process left behind (`Job::run` checks; children carry the job's marker).

use rcomm_tests::{Job, JobOutput, test_program};
use std::time::Duration;

fn run(n: u32, case: &str, transport: &str) -> JobOutput {
    let prog = test_program("rt_spawn");
    let out = Job::new(n, &[prog.as_str(), case])
        .env("RCOMM_TRANSPORT", transport)
        .deadline(Duration::from_secs(90))
        .run();
    assert_eq!(out.code(), 0, "{case} at {n} ranks over {transport}\n{out}");
    out
}

fn ok_line<'a>(out: &'a JobOutput, prefix: &str) -> &'a str {
    out.rank_lines(0)
        .into_iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?}\n{out}"))
}

#[test]
fn parents_and_children_talk_merge_and_reduce_at_1_to_4_parents() {
    for (n, transport) in [(1, "shm"), (2, "shm"), (3, "shm"), (4, "shm"), (2, "tcp")] {
        let out = run(n, "spawn", transport);
        ok_line(&out, &format!("ok spawn parents {n} children 3"));
        // The children's own lines reach the job's output through the spawning rank.
        for (c, app, label) in [(0, 0, "A"), (1, 0, "A"), (2, 1, "B")] {
            ok_line(&out, &format!("child {c} app {app} {label} ok"));
        }
    }
}

#[test]
fn a_program_that_cannot_start_is_an_error_on_every_parent() {
    let out = run(2, "bad-program", "shm");
    let l = ok_line(&out, "ok bad-program: ");
    assert!(l.contains("No such file"), "{l}");
}

#[test]
fn children_that_crash_before_init_fail_the_spawn_at_once() {
    let out = run(2, "crash-before-init", "shm");
    let l = ok_line(&out, "ok crash-before-init in ");
    assert!(
        l.contains("exit status: 3"),
        "the error names the child's exit: {l}"
    );
    assert!(
        out.elapsed < Duration::from_secs(30),
        "{:?}\n{out}",
        out.elapsed
    );
}

#[test]
fn children_that_quit_before_init_with_status_0_fail_the_spawn_at_once() {
    let out = run(2, "quit-before-init", "shm");
    let l = ok_line(&out, "ok quit-before-init in ");
    assert!(l.contains("before joining its parents"), "{l}");
    assert!(
        out.elapsed < Duration::from_secs(30),
        "{:?}\n{out}",
        out.elapsed
    );
}

#[test]
fn a_child_that_leaves_mid_job_is_a_lost_peer_for_the_parent() {
    let out = run(2, "dies-later", "shm");
    let l = ok_line(&out, "ok dies-later: ");
    assert!(l.contains("is lost"), "{l}");
    assert!(
        out.elapsed < Duration::from_secs(40),
        "{:?}\n{out}",
        out.elapsed
    );
}
