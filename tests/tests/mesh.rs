//! Groups, `create` and meshes through real jobs: `rt_group` (communicators made of groups;
//! non-blocking collectives on two communicators started and waited in different orders on
//! different ranks) and `rt_mesh` (coordinates and the members of every dimension's
//! communicator for several shapes on 8 ranks, under real and fake host groupings, the
//! warning when `tp` spans nodes, strict mode's error, `alltoallv` over `ep`).

use rcomm_tests::{Job, test_program};
use std::time::Duration;

fn ok_lines(out: &rcomm_tests::JobOutput) -> Vec<&str> {
    out.rank_lines(0)
        .into_iter()
        .filter_map(|l| l.strip_prefix("ok "))
        .collect()
}

#[test]
fn groups_make_communicators_and_two_communicators_progress_in_any_order() {
    for (n, t) in [(4u32, "auto"), (3, "tcp")] {
        let out = Job::new(n, &[&test_program("rt_group")])
            .env("RCOMM_TRANSPORT", t)
            .deadline(Duration::from_secs(60))
            .run();
        assert_eq!(out.code(), 0, "{n} ranks {t}\n{out}");
        assert_eq!(
            ok_lines(&out),
            [
                "create-evens",
                "create-combined",
                "create-on-sub-communicator",
                "create-bad-input",
                "two-communicators",
                "two-communicators-forced"
            ],
            "{n} ranks {t}\n{out}"
        );
    }
}
