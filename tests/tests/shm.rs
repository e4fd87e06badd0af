//! Direct shared-memory collectives through real jobs: allreduce and bcast over the ranks'
//! windows, `alloc_shared`, in-place allreduce of shared buffers, slot reuse under repetition,
//! length mismatches, and a rank dying in the middle.

use rcomm_tests::{Job, dev_shm, test_program};
use std::time::Duration;

#[test]
fn shm_collectives_match_the_canonical_reference_at_1_to_8_ranks() {
    let shm0 = dev_shm();
    for n in [1u32, 2, 3, 4, 8] {
        let mut args = vec![test_program("rt_shm"), "all".into()];
        if n <= 2 {
            args.push("big".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = Job::new(n, &args).deadline(Duration::from_secs(90)).run();
        assert_eq!(out.code(), 0, "{n} ranks\n{out}");
        let ok: Vec<&str> = out
            .rank_lines(0)
            .into_iter()
            .filter_map(|l| l.strip_prefix("ok "))
            .collect();
        assert_eq!(
            ok,
            [
                "allreduce",
                "bcast",
                "alloc_shared",
                "allreduce_shared",
                "repeated",
                "mismatch"
            ],
            "{n} ranks\n{out}"
        );
    }
    assert_eq!(
        dev_shm(),
        shm0,
        "windows are memfds: nothing may appear in /dev/shm"
    );
}

#[test]
fn a_rank_dying_mid_collective_fails_the_others_within_seconds() {
    let shm0 = dev_shm();
    for (mode, n) in [("fault", 3u32), ("fault-kill", 4)] {
        let out = Job::new(
            n,
            &["--on-failure", "continue", &test_program("rt_shm"), mode],
        )
        .deadline(Duration::from_secs(30))
        .run();
        assert_ne!(out.code(), 0, "{mode}\n{out}");
        for r in (0..n).filter(|&r| r != 1) {
            let l = out.rank_lines(r);
            let line = l
                .iter()
                .find_map(|l| l.strip_prefix("error after "))
                .unwrap_or_else(|| panic!("{mode}: rank {r} saw no error\n{out}"));
            // Time from the start of the failing call to its error.
            let ms: u64 = line.split_whitespace().next().unwrap().parse().unwrap();
            assert!(ms < 3000, "{mode}: rank {r} took {ms} ms\n{out}");
            assert!(line.contains("rank 1"), "{line}");
        }
        assert!(out.elapsed < Duration::from_secs(15), "{mode}\n{out}");
    }
    assert_eq!(dev_shm(), shm0);
}
