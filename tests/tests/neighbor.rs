//! Neighbour collectives through real `rcomm-run` jobs: `rt_neighbor` runs
//! `neighbor_allgather(v)` and `neighbor_alltoall(v)`, blocking and non-blocking, on Cartesian
//! grids (1–3 dimensions, every mix of periods), graphs, and distributed graphs (weighted
//! multigraphs, edges named anywhere), and compares every receive buffer with the one the
//! topology alone gives; refused arguments must be errors.

use rcomm_tests::{Job, test_program};
use std::time::Duration;

const CASES: [&str; 5] = [
    "cart",
    "not-early",
    "graph",
    "dist-graph",
    "dist-graph-named",
];

fn run(n: u32, seed: u64, env: &[(&str, &str)]) {
    let prog = test_program("rt_neighbor");
    let seed = seed.to_string();
    let mut job = Job::new(n, &[prog.as_str(), seed.as_str()]).deadline(Duration::from_secs(90));
    for (k, v) in env {
        job = job.env(k, v);
    }
    let out = job.run();
    assert_eq!(out.code(), 0, "{n} ranks, seed {seed} {env:?}\n{out}");
    let ok = out.rank_lines(0);
    for c in CASES {
        assert!(
            ok.contains(&format!("ok {c}").as_str()),
            "case {c} did not pass at {n} ranks, seed {seed} {env:?}\n{out}"
        );
    }
}

#[test]
fn neighbour_collectives_match_brute_force_at_1_to_8_ranks() {
    for n in [1u32, 2, 3, 4, 6, 8] {
        for seed in [1, 2] {
            run(n, seed, &[]);
        }
    }
}

#[test]
fn neighbour_collectives_match_brute_force_at_16_ranks() {
    run(16, 3, &[]);
}

#[test]
fn neighbour_collectives_over_tcp_with_a_progress_thread_and_in_checked_mode() {
    run(4, 4, &[("RCOMM_TRANSPORT", "tcp")]);
    // The progress thread moves non-blocking neighbour requests on too, while their owners
    // test and wait for them.
    run(4, 6, &[("RCOMM_ASYNC_PROGRESS", "1")]);
    // Non-blocking neighbour calls take collective sequence numbers without a checked
    // signature: checked mode must still agree with them.
    run(5, 5, &[("RCOMM_CHECK", "1")]);
}
