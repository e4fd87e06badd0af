//! Groups, `create` and meshes through real jobs: `rt_group` (communicators made of groups;
//! non-blocking collectives on two communicators started and waited in different orders on
//! different ranks) and `rt_mesh` (coordinates and the members of every dimension's
//! communicator for several shapes on 8 ranks, under real and fake host groupings, the
//! warning when `tp` spans nodes, strict mode's error, `alltoallv` over `ep`, a device buffer
//! all-reduced over `tp` on the stand-in of a GPU).

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
                "create-different-groups",
                "create-disjoint",
                "create-bad-input",
                "create-group",
                "two-communicators",
                "two-communicators-forced"
            ],
            "{n} ranks {t}\n{out}"
        );
    }
}

/// `rcomm-run -n 8 [launcher args] rt_mesh LABELS CASES…`, each rank's `RCOMM_HOSTID` set to
/// `node<its label>`: one machine split into the nodes the labels describe.
fn mesh_job(labels: &[u32], launcher: &[&str], cases: &[&str]) -> rcomm_tests::JobOutput {
    let labels: Vec<String> = labels.iter().map(u32::to_string).collect();
    let labels = labels.join(",");
    let prog = test_program("rt_mesh");
    let script = r#"i=0; for l in $(echo "$0" | tr , " "); do [ "$i" = "$RCOMM_RANK" ] && export RCOMM_HOSTID=node$l; i=$((i+1)); done; exec "$@""#;
    let mut args: Vec<&str> = launcher.to_vec();
    args.extend(["sh", "-c", script, &labels, &prog, &labels]);
    args.extend(cases);
    Job::new(8, &args).deadline(Duration::from_secs(120)).run()
}

const STRICT_TP: &str = "dimension tp of size 8 spans nodes: nodes have 4 ranks";
const STRICT_PP: &str = "dimension pp of size 4 spans nodes: nodes have 4 ranks";

fn assert_cases(out: &rcomm_tests::JobOutput, cases: &[&str], what: &str) {
    assert_eq!(out.code(), 0, "{what}\n{out}");
    let ok = ok_lines(out);
    let shapes = ok.iter().filter(|l| l.starts_with("shape ")).count();
    assert_eq!(
        shapes,
        if cases.contains(&"shapes") { 6 } else { 0 },
        "{what}\n{out}"
    );
    for c in cases.iter().filter(|c| **c != "shapes") {
        assert!(ok.contains(c), "{what}: no `ok {c}`\n{out}");
    }
}

/// Two nodes of 4, ranks placed by slot (0–3 on one node) and by node (alternating, as
/// `--map-by node` places them on two hosts): the same shapes, `tp` inside a node either way;
/// a `tp` of 8 warns (once), and strict mode refuses it naming the dimension, its size and
/// the node size.
#[test]
fn meshes_place_fast_dimensions_inside_nodes_and_warn_when_tp_spans_them() {
    for (labels, launcher) in [
        (&[0, 0, 0, 0, 1, 1, 1, 1][..], &[][..]),
        (&[0, 1, 0, 1, 0, 1, 0, 1][..], &["--map-by", "node"][..]),
    ] {
        let cases = ["shapes", "warn", "ep"];
        let out = mesh_job(labels, launcher, &cases);
        let what = format!("nodes {labels:?}");
        assert_cases(&out, &cases, &what);
        // The warnings: once each (rank 0 logs), naming dimension, size and node size.
        for msg in [STRICT_TP, STRICT_PP] {
            let warned = out
                .stderr
                .lines()
                .filter(|l| l.contains("rcomm Warn MESH") && l.contains(msg))
                .count();
            assert_eq!(warned, 1, "{what}: the warning `{msg}`\n{out}");
        }
        let strict: Vec<&str> = out
            .rank_lines(0)
            .into_iter()
            .filter_map(|l| l.strip_prefix("strict: "))
            .collect();
        assert_eq!(strict.len(), 2, "{what}\n{out}");
        assert!(strict[0].contains(STRICT_TP), "{what}\n{out}");
        assert!(strict[1].contains(STRICT_PP), "{what}\n{out}");
        // Only the meant warnings: the shapes keep tp inside nodes.
        let warnings = out.stderr.matches("rcomm Warn MESH").count();
        assert_eq!(warnings, 2, "{what}\n{out}");
    }
}

/// One node of 8, and unequal nodes (3 and 5 ranks): the placement follows them; where a
/// `tp` group must straddle the two nodes the warning gives both node sizes.
#[test]
fn meshes_on_one_node_and_on_unequal_nodes() {
    let out = mesh_job(&[0; 8], &[], &["shapes", "ep"]);
    assert_cases(&out, &["shapes", "ep"], "one node");
    assert!(!out.stderr.contains("rcomm Warn MESH"), "{out}");
    let uneven = [0, 0, 0, 1, 1, 1, 1, 1];
    let out = mesh_job(&uneven, &[], &["shapes"]);
    assert_cases(&out, &["shapes"], "nodes of 3 and 5");
    assert!(
        out.stderr
            .contains("dimension tp of size 4 spans nodes: nodes have 3 to 5 ranks"),
        "{out}"
    );
}

/// The tp communicator of a 2 × 2 × 2 mesh all-reduces a `DeviceBuffer` (plain and on a
/// stream), on the host-memory stand-in of a GPU: each rank checks the result against the sum
/// (and max) over its tp members computed in the rank program.
#[test]
fn a_mesh_tp_communicator_all_reduces_a_device_buffer() {
    let prog = test_program("rt_mesh");
    let out = Job::new(8, &[&prog, "0,0,0,0,0,0,0,0", "device"])
        .env("RCOMM_GPU_STANDIN", "1")
        .deadline(Duration::from_secs(60))
        .run();
    assert_cases(&out, &["device"], "device buffer over tp");
}
