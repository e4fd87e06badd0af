//! docs/mpi-coverage.md lists exactly the ABI functions the library does not build (its
//! stubs), between the `abi-not-built` markers.

use std::collections::BTreeSet;

#[test]
fn the_coverage_list_is_the_librarys() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/mpi-coverage.md");
    let doc = std::fs::read_to_string(path).expect("docs/mpi-coverage.md");
    let (_, rest) = doc
        .split_once("<!-- abi-not-built:begin -->")
        .expect("begin marker");
    let (list, _) = rest
        .split_once("<!-- abi-not-built:end -->")
        .expect("end marker");
    let listed: BTreeSet<&str> = list
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- `")?.strip_suffix('`'))
        .collect();
    let stubs: BTreeSet<&str> = mpi_abi::stubs::NOT_BUILT.iter().copied().collect();
    let block: String = stubs.iter().map(|n| format!("- `{n}`\n")).collect();
    assert!(
        listed == stubs,
        "docs/mpi-coverage.md's list differs from the library's stubs; listed but built: {:?}; \
         not built but not listed: {:?}. The list should read:\n{block}",
        listed.difference(&stubs).collect::<Vec<_>>(),
        stubs.difference(&listed).collect::<Vec<_>>()
    );
}
