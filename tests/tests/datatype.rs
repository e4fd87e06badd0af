//! Derived datatypes through real `rcomm-run` jobs: one launch per (rank count, transport) runs
//! every case of `rt_dtype` (columns, structs, a 2D halo exchange, short and truncated
//! receives, non-blocking calls, a flood that fills the ring, `bool`s and `char`s through the
//! collectives, bad layouts).

use rcomm_tests::{Job, test_program};
use std::time::Duration;

const CASES: [&str; 9] = [
    "column",
    "structs",
    "within-contiguous",
    "halo",
    "short-and-truncated",
    "nonblocking",
    "flood",
    "bools-and-chars",
    "bad-input",
];

fn table(n: u32, transport: &str) {
    let prog = test_program("rt_dtype");
    let out = Job::new(n, &[prog.as_str(), "table"])
        .env("RCOMM_TRANSPORT", transport)
        .deadline(Duration::from_secs(120))
        .run();
    assert_eq!(out.code(), 0, "{n} ranks over {transport}\n{out}");
    let ok: Vec<&str> = out
        .rank_lines(0)
        .into_iter()
        .filter_map(|l| l.strip_prefix("ok "))
        .collect();
    for c in CASES {
        assert!(
            ok.contains(&c),
            "case {c} did not pass at {n} ranks over {transport}\n{out}"
        );
    }
}

#[test]
fn derived_datatypes_between_ranks_over_shared_memory_at_1_to_4_ranks() {
    for n in [1, 2, 3, 4] {
        table(n, "shm");
    }
}

#[test]
fn derived_datatypes_between_ranks_over_tcp_at_2_and_3_ranks() {
    for n in [2, 3] {
        table(n, "tcp");
    }
}
