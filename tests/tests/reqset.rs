//! Request sets mixing kinds (`wait_some_of`, `wait_any_of`, `test_*_of`) through real
//! `rcomm-run` jobs: `rt_reqset` at 1-4 ranks over shared memory and 3 over TCP.

use rcomm_tests::{Job, test_program};
use std::time::Duration;

fn table(n: u32, transport: &str) {
    let prog = test_program("rt_reqset");
    let out = Job::new(n, &[prog.as_str()])
        .env("RCOMM_TRANSPORT", transport)
        .deadline(Duration::from_secs(60))
        .run();
    assert_eq!(out.code(), 0, "{n} ranks over {transport}\n{out}");
    for case in ["mixed", "order"] {
        assert!(
            out.rank_lines(0).contains(&format!("ok {case}").as_str()),
            "case {case} at {n} ranks over {transport}\n{out}"
        );
    }
}

#[test]
fn mixed_request_sets_over_shared_memory_at_1_to_4_ranks() {
    for n in [1, 2, 3, 4] {
        table(n, "shm");
    }
}

#[test]
fn mixed_request_sets_over_tcp_at_3_ranks() {
    table(3, "tcp");
}
