//! Checked collectives (`RCOMM_CHECK=1`): a rank that calls a collective with another count,
//! element type, root, reduction op or another collective than the others is named on every
//! rank — over shared memory and TCP, with the shared-memory windows set up by the mismatched
//! call or before it, and across two (fake) nodes — and matched collectives still pass the
//! collectives table.

use rcomm_tests::{CHECK_CASES as CASES, Job, JobOutput, test_program};
use std::time::Duration;

/// What each case must report as differing.
fn field(case: &str) -> &'static str {
    match case.rsplit('-').next() {
        Some("count") | Some("big") => "\"count\"",
        Some("dtype") => "\"element type\"",
        Some("root") => "\"root\"",
        Some("op") => "\"reduction op\"",
        _ => "\"collective\"",
    }
}

/// Runs `rt_check` on 4 ranks with `odd` as the odd rank and checks every rank's line of
/// every case: `CollMismatch` naming exactly `odd`, the right field, within 10 s.
fn run(label: &str, job: Job, odd: u32) -> JobOutput {
    let out = job
        .env("RCOMM_CHECK", "1")
        .env("RT_ODD", &odd.to_string())
        .deadline(Duration::from_secs(180))
        .run();
    assert_eq!(out.code(), 0, "{label}\n{out}");
    for r in 0..4 {
        let lines = out.rank_lines(r);
        for case in CASES {
            let prefix = format!("case {case} ");
            let line = lines
                .iter()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("{label}: rank {r} has no line for {case}\n{out}"));
            let rest = &line[prefix.len()..];
            let ok = rest.starts_with(&format!("err [{odd}] ")) && rest.contains(field(case));
            assert!(ok, "{label}: rank {r}: {line}\n{out}");
            let ms: u64 = rest.rsplit(' ').next().unwrap().parse().unwrap();
            assert!(ms < 10_000, "{label}: rank {r} took {ms} ms: {line}");
        }
        assert!(lines.contains(&"ok check"), "{label}: rank {r}\n{out}");
    }
    // The message names the rank, its call and the others' (rank 0 prints every one).
    assert!(
        out.stderr.contains(&format!("rank {odd} (on "))
            && out
                .stderr
                .contains("called allreduce(count 17, f32, sum) (count differs)"),
        "{label}\n{out}"
    );
    out
}

#[test]
fn checked_mode_names_the_rank_with_another_count_dtype_root_op_or_collective() {
    for (t, odd, warm) in [("auto", 3, "0"), ("tcp", 1, "0"), ("auto", 0, "1")] {
        let job = Job::new(4, &[&test_program("rt_check")])
            .env("RCOMM_TRANSPORT", t)
            .env("RT_WARM", warm);
        run(&format!("{t}, odd rank {odd}, warm {warm}"), job, odd);
    }
}

#[test]
fn checked_mode_names_the_odd_rank_across_two_nodes() {
    // Ranks 0-1 and 2-3 on two nodes: TCP between them, hierarchical collectives for the
    // large allreduce (whose odd rank runs a flat algorithm for its small count). Each rank
    // checks that (`RT_NODES`) and prints `ok nodes 2 rank <r> on <host>/n<r / 2>: … tcp <sent>
    // B sent <received> B received`. The tuner uses its built-in constants (RCOMM_TUNE=default):
    // its choice is then the cost model's, which a measurement on a busy machine may not be.
    let job = Job::new(
        4,
        &[
            "sh",
            "-c",
            &format!(
                "RCOMM_HOSTID=n$((RCOMM_RANK / 2)) exec {}",
                test_program("rt_check")
            ),
        ],
    )
    .env("RT_NODES", "2")
    .env("RCOMM_TUNE", "default");
    let out = run("two nodes", job, 2);
    out.assert_node_lines(4, 2, "n");
}

#[test]
fn matched_collectives_pass_the_table_in_checked_mode() {
    for (t, n) in [("auto", 3u32), ("tcp", 4)] {
        let out = Job::new(n, &[&test_program("rt_table")])
            .env("RCOMM_CHECK", "1")
            .env("RCOMM_TRANSPORT", t)
            .env("RT_TABLE", "nobig")
            .deadline(Duration::from_secs(300))
            .run();
        assert_eq!(out.code(), 0, "{t} {n} ranks\n{out}");
        assert!(
            out.rank_lines(0).iter().any(|l| l.starts_with("ok table")),
            "{t} {n}\n{out}"
        );
    }
}
