//! The skip rule as a person meets it: this test binary runs one of its own tests as a child,
//! which skips — once outside CI (it passes, and says so on stderr past libtest's capture and
//! in the skip log) and once under CI (it fails).

use rcomm_testkit::SKIP_LOG_VAR;
use std::process::{Command, Output};

const CHILD: &str = "RCOMM_TESTKIT_CHILD";

/// Skips when run as the child; does nothing in a normal run.
#[test]
fn child_that_skips() {
    if std::env::var_os(CHILD).is_some() {
        rcomm_testkit::skip("the parent test asked for a skip");
    }
}

fn run_child(ci: Option<&str>, log: &std::path::Path) -> Output {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child_that_skips", "--test-threads", "1"])
        .env(CHILD, "1")
        .env(SKIP_LOG_VAR, log)
        .env_remove("CI");
    if let Some(v) = ci {
        c.env("CI", v);
    }
    c.output().unwrap()
}

#[test]
fn a_skip_shows_past_the_capture_is_logged_and_fails_under_ci() {
    let log = std::env::temp_dir().join(format!("rcomm-testkit-skips-{}", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let want = "SKIPPED child_that_skips: the parent test asked for a skip";

    let o = run_child(None, &log);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "outside CI a skip passes: {o:?}");
    assert!(err.contains(want), "the skip must show on stderr: {err}");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(logged, format!("{want}\n"), "and in the skip log");

    let o = run_child(Some("true"), &log);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "under CI a skip fails: {o:?}");
    assert!(out.contains("may not be skipped"), "{out}");
    let _ = std::fs::remove_file(&log);
}
