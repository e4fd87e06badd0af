//! Going on after a failure: `shrink` (the launcher says who failed; the survivors get one
//! communicator and it works) and `revoke` (one rank fails every operation on a communicator
//! everywhere). Every job is bounded by a deadline and leaves no process behind.
use rcomm_tests::{Job, test_program, wait_no_processes};
use std::time::Duration;

#[test]
fn survivors_of_a_killed_rank_shrink_the_world_and_allreduce_correctly() {
    for transport in ["auto", "tcp"] {
        let job = Job::new(
            4,
            &["--on-failure", "continue", &test_program("rt_ft"), "shrink"],
        )
        .env("RCOMM_TRANSPORT", transport)
        .deadline(Duration::from_secs(30));
        let marker = job.marker().to_string();
        let out = job.run();
        // The job reports rank 1's death; the survivors finish.
        assert_eq!(out.code(), 137, "{transport}: {out}");
        for (r, new) in [(0u32, 0u32), (2, 1), (3, 2)] {
            assert_eq!(
                out.rank_lines(r),
                vec![format!("shrunk {r}->{new} of 3 sum 5").as_str()],
                "{transport}: {out}"
            );
        }
        assert!(out.elapsed < Duration::from_secs(15), "{transport}: {out}");
        let left = wait_no_processes("RCOMMTEST_MARKER", &marker, Duration::from_secs(5));
        assert!(left.is_empty(), "{transport}: processes left: {left:?}");
    }
}

#[test]
fn a_revoked_communicator_fails_everywhere_and_the_world_goes_on() {
    let out = Job::new(4, &[&test_program("rt_ft"), "revoke"])
        .deadline(Duration::from_secs(30))
        .run();
    assert_eq!(out.code(), 0, "{out}");
    for r in 0..4u32 {
        let l = out.rank_lines(r);
        assert_eq!(l.len(), 1, "{out}");
        assert!(
            l[0].starts_with("revoked: ")
                && l[0].ends_with("the communicator was revoked by rank 0"),
            "{out}"
        );
    }
}
