//! The library exports every function of the ABI: `nm -D` lists `PMPI_x` as a defined
//! function and `MPI_x` as a weak one for each name of the table, and nothing else named
//! MPI; the table is the list of functions the published ABI header declares; the SONAME is
//! `libmpi_abi.so.1`.

mod common;

use mpi_abi::names::ABI_FUNCTIONS;
use std::collections::BTreeSet;
use std::process::Command;

fn nm() -> Vec<(String, String)> {
    let out = common::run_ok(
        Command::new("nm")
            .arg("-D")
            .arg("--defined-only")
            .arg(common::library()),
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| (f[1].to_owned(), f[2].to_owned()))
        })
        .collect()
}

#[test]
fn every_abi_function_is_exported_as_pmpi_and_weak_mpi() {
    let syms = nm();
    let with = |kind: &str, prefix: &str| -> BTreeSet<String> {
        syms.iter()
            .filter(|(k, n)| k == kind && (n.starts_with(prefix)))
            .map(|(_, n)| n.clone())
            .collect()
    };
    let want: BTreeSet<String> = ABI_FUNCTIONS.iter().map(|s| s.to_string()).collect();
    let want_p: BTreeSet<String> = ABI_FUNCTIONS.iter().map(|s| format!("P{s}")).collect();
    let mut weak = with("W", "MPI");
    weak.retain(|n| n.starts_with("MPI_") || n.starts_with("MPIX_"));
    let diff = |got: &BTreeSet<String>, want: &BTreeSet<String>| -> (Vec<String>, Vec<String>) {
        (
            want.difference(got).cloned().collect(),
            got.difference(want).cloned().collect(),
        )
    };
    assert_eq!(
        diff(&weak, &want),
        (vec![], vec![]),
        "weak MPI_ symbols: (missing, extra)"
    );
    assert_eq!(
        diff(&with("T", "PMPI"), &want_p),
        (vec![], vec![]),
        "PMPI_ functions: (missing, extra)"
    );
    let strong_mpi = with("T", "MPI");
    assert!(
        strong_mpi.is_empty(),
        "MPI_ names defined strongly: {strong_mpi:?}"
    );
}

#[test]
fn the_soname_is_libmpi_abi_so_1() {
    let out = common::run_ok(Command::new("readelf").arg("-d").arg(common::library()));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Library soname: [libmpi_abi.so.1]"), "{text}");
}

/// The table is what the published header declares (MPI_ and PMPI_ alike).
#[test]
fn the_table_is_the_headers_function_list() {
    let Some(m) = common::mpich() else { return };
    let h = std::fs::read_to_string(m.join("include/mpi_abi.h")).expect("mpi_abi.h");
    let mut mpi = BTreeSet::new();
    let mut pmpi = BTreeSet::new();
    let lines = h.lines().map(|l| l.split("/*").next().unwrap_or("").trim());
    for line in lines.filter(|l| l.ends_with(';') && l.contains('(') && !l.starts_with("typedef")) {
        let head = &line[..line.find('(').unwrap_or(0)];
        let Some(name) = head.split_whitespace().last() else {
            continue;
        };
        if let Some(n) = name.strip_prefix('P').filter(|n| n.starts_with("MPI")) {
            pmpi.insert(n.to_owned());
        } else if name.starts_with("MPI_") || name.starts_with("MPIX_") {
            mpi.insert(name.to_owned());
        }
    }
    let table: BTreeSet<String> = ABI_FUNCTIONS.iter().map(|s| s.to_string()).collect();
    for (what, got) in [("MPI_", &mpi), ("PMPI_", &pmpi)] {
        let missing: Vec<_> = got.difference(&table).collect();
        // MPICH's header has no PMPIX_Op_create_x; rcomm exports it anyway (every name both ways).
        let extra: Vec<_> = table
            .difference(got)
            .filter(|n| !(what == "PMPI_" && n.starts_with("MPIX_")))
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{what} prototypes of mpi_abi.h not in the table: {missing:?}; in the table only: {extra:?}"
        );
    }
}

/// Each not-built function answers MPI_ERR_UNSUPPORTED_OPERATION through MPI_ERRORS_RETURN;
/// the list of them is in the library.
#[test]
fn not_built_functions_are_listed_and_in_the_table() {
    for n in mpi_abi::stubs::NOT_BUILT {
        assert!(ABI_FUNCTIONS.contains(n), "{n}");
    }
    assert!(mpi_abi::stubs::NOT_BUILT.len() < ABI_FUNCTIONS.len());
}
