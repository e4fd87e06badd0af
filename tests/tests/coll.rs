//! Collectives (allreduce by ring and recursive doubling, broadcast, reduce, gather, scatter,
//! allgather, reduce_scatter, alltoall, scan, exscan) through
//! real jobs, against a sequential reference and bitwise equal across ranks.

use rcomm_tests::{Job, test_program};
use std::time::Duration;

#[test]
fn allreduce_and_bcast_match_the_reference_at_1_to_8_ranks_on_shm_and_tcp() {
    for t in ["auto", "tcp"] {
        for n in [1u32, 2, 3, 5, 8] {
            let out = Job::new(n, &[&test_program("rt_coll")])
                .env("RCOMM_TRANSPORT", t)
                .deadline(Duration::from_secs(120))
                .run();
            assert_eq!(out.code(), 0, "{t} {n} ranks\n{out}");
            let ok: Vec<&str> = out
                .rank_lines(0)
                .into_iter()
                .filter_map(|l| l.strip_prefix("ok "))
                .collect();
            assert_eq!(
                ok,
                [
                    "allreduce-auto",
                    "allreduce-ring",
                    "allreduce-rd",
                    "bcast",
                    "reduce-gather-scatter-allgather-reduce_scatter-alltoall-scan",
                    "nonblocking",
                    "bad-input"
                ],
                "{t} {n}\n{out}"
            );
        }
    }
}

/// `RCOMM_ALGO` decides what the world's unforced collectives run: rank 0 of `rt_coll` prints
/// `algo <op> <algorithm>` from each one's flight-recorder record. (`with_algo` still wins over
/// it: `rt_coll` checks that its `rd` allreduce ran `rd`.)
#[test]
fn rcomm_algo_forces_the_algorithm_and_rejects_unknown_names() {
    let forced = [
        ("allreduce", "ring"),
        ("bcast", "scatter_allgather"),
        ("reduce", "direct"),
        ("allgather", "bruck"),
        ("reduce_scatter", "ring"),
        ("alltoall", "bruck"),
        ("gather", "tree"),
        ("scatter", "tree"),
    ];
    let algo: Vec<String> = forced.iter().map(|(o, a)| format!("{o}:{a}")).collect();
    let out = Job::new(3, &[&test_program("rt_coll")])
        .env("RCOMM_ALGO", &algo.join(","))
        .env("RCOMM_KERNEL_ISA", "portable")
        .run();
    assert_eq!(out.code(), 0, "{out}");
    let lines = out.rank_lines(0);
    for (op, a) in forced {
        let want = format!("algo {op} {a}");
        assert!(
            lines.contains(&want.as_str()),
            "RCOMM_ALGO={}: no `{want}` line\n{out}",
            algo.join(",")
        );
    }
    let out = Job::new(2, &[&test_program("rt_coll")])
        .env("RCOMM_ALGO", "allreduce:magic")
        .deadline(Duration::from_secs(20))
        .run();
    assert_ne!(out.code(), 0, "{out}");
    assert!(
        out.stderr.contains("RCOMM_ALGO") && out.stderr.contains("auto, ring, rd"),
        "{out}"
    );
}
