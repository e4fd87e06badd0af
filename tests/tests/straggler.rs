//! The straggler report (`RCOMM_STRAGGLER=1`): a rank that sleeps before every collective is
//! named the slowest, on demand (`straggler_report`) and in rank 0's report at finalize.

use rcomm_tests::{Job, test_program};
use std::time::Duration;

#[test]
fn the_rank_that_sleeps_before_every_collective_is_reported_slowest() {
    for (n, slow) in [(4u32, 2u32), (3, 0)] {
        let out = Job::new(n, &[&test_program("rt_straggler")])
            .env("RCOMM_STRAGGLER", "1")
            .env("RT_SLOW", &slow.to_string())
            .deadline(Duration::from_secs(120))
            .run();
        assert_eq!(out.code(), 0, "{out}");
        let lines = out.rank_lines(0);
        let s = lines
            .iter()
            .find_map(|l| l.strip_prefix("slowest "))
            .unwrap_or_else(|| panic!("no report\n{out}"));
        let f: Vec<&str> = s.split_whitespace().collect();
        assert_eq!(f[0], slow.to_string(), "{out}");
        // 20 ms of sleep before each call: most of it shows as lateness (generous bounds for
        // oversubscribed cores).
        let mean: f64 = f[1].parse().unwrap();
        assert!(mean > 8.0, "mean lateness {mean} ms\n{out}");
        assert_eq!(f[4], "15", "calls compared\n{out}");
        assert!(
            lines.contains(&format!("world slowest {slow}").as_str()),
            "{out}"
        );
        // At finalize: rank 0's report on stderr, the slow rank first.
        let report: Vec<&str> = out
            .stderr
            .lines()
            .skip_while(|l| !l.contains("rcomm straggler report"))
            .collect();
        assert!(report.len() >= 3, "no report at finalize\n{out}");
        let first: Vec<&str> = report[2].split_whitespace().collect();
        assert_eq!(first[1], slow.to_string(), "{out}");
    }
}

#[test]
fn the_report_is_an_error_without_rcomm_straggler() {
    let out = Job::new(2, &[&test_program("rt_straggler")])
        .deadline(Duration::from_secs(60))
        .run();
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.stderr.contains("RCOMM_STRAGGLER=1"), "{out}");
}
