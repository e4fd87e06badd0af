//! The C programs of tests/c/, compiled with `rcomm-cc` (rcomm's header and library) and run
//! under `rcomm-run` at 1 to 4 ranks (point-to-point, communicators, errors, every collective,
//! datatypes, topologies); each checks its results against values it computes and
//! aborts the job on the first wrong one, so a passing run prints `PASS <name>` on every rank.
//! The same sources compiled against MPICH's ABI header and linked with MPICH's
//! `libmpi_abi.so.1` run on rcomm unchanged.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"))
}

fn expect_pass(job: &common::Job, name: &str, n: u32) {
    assert_eq!(job.code, Some(0), "{name} at {n} ranks:\n{job}");
    for r in 0..n {
        let line = format!("PASS {name} rank {r} of {n}");
        assert!(job.stdout.contains(&line), "{name}: no `{line}`:\n{job}");
    }
}

fn run_program(name: &str, ranks: &[u32]) {
    let Some(run) = common::rcomm_run() else {
        return;
    };
    let dir = common::scratch(name);
    let exe = dir.join(name);
    common::rcomm_cc_build(&[&source(name)], &exe);
    for &n in ranks {
        expect_pass(&common::rcomm_run_job(&run, n, &exe, &[]), name, n);
    }
}

#[test]
fn point_to_point() {
    run_program("p2p", &[1, 2, 3, 4]);
}

#[test]
fn communicators_groups_attributes_info_errhandlers() {
    run_program("comm", &[1, 2, 3, 4]);
}

#[test]
fn bad_input_gives_the_error_class() {
    run_program("errors", &[1, 3]);
}

#[test]
fn collectives_and_reduction_ops() {
    run_program("coll", &[1, 2, 3, 4]);
}

#[test]
fn large_count_collectives() {
    run_program("large", &[1, 2, 3, 4]);
}

#[test]
fn datatype_names_attributes_and_matching() {
    run_program("typeinfo", &[1, 2]);
}

#[test]
fn persistent_collectives() {
    run_program("persist", &[1, 2, 3, 4]);
}

#[test]
fn sessions_and_removed_error_codes() {
    run_program("session", &[1, 2, 3]);
}

#[test]
fn spawn_exchange_and_merge() {
    run_program("spawn", &[1, 2, 3]);
}

#[test]
fn derived_datatypes_and_pack() {
    run_program("dtype", &[1, 2, 3, 4]);
}

#[test]
fn topologies_and_neighbour_collectives() {
    run_program("topo", &[1, 2, 3, 4]);
}

/// A program built with rcomm-cc runs without a launcher too (a world of one; the rpath
/// finds the library).
#[test]
fn a_program_runs_alone() {
    let dir = common::scratch("alone");
    let exe = dir.join("p2p");
    common::rcomm_cc_build(&[&source("p2p")], &exe);
    let mut cmd = Command::new(&exe);
    cmd.env_remove("LD_LIBRARY_PATH");
    let job = common::run_with_deadline(cmd, std::time::Duration::from_secs(60));
    expect_pass(&job, "p2p", 1);
}

#[test]
fn a_function_not_built_ends_the_job_naming_itself() {
    let Some(run) = common::rcomm_run() else {
        return;
    };
    let dir = common::scratch("fatal");
    let exe = dir.join("fatal");
    common::rcomm_cc_build(&[&source("fatal")], &exe);
    let job = common::rcomm_run_job(&run, 2, &exe, &[]);
    assert_ne!(job.code, Some(0), "{job}");
    assert!(job.code.is_some(), "hung:\n{job}");
    assert!(job.stderr.contains("MPI_Win_create is not built"), "{job}");
    assert!(
        job.stderr.contains("MPI_ERR_UNSUPPORTED_OPERATION"),
        "{job}"
    );
    assert!(!job.stdout.contains("NOT REACHED"), "{job}");
}

/// A call on `MPI_COMM_WORLD` after `MPI_Finalize` ends the process with a message naming the
/// call and the communicator (the predefined communicators are kept to exit, so this is an
/// error, not a use after free).
#[test]
fn a_call_after_finalize_ends_the_process_with_its_error() {
    let Some(run) = common::rcomm_run() else {
        return;
    };
    let dir = common::scratch("after");
    let exe = dir.join("after");
    common::rcomm_cc_build(&[&source("after")], &exe);
    let job = common::rcomm_run_job(&run, 2, &exe, &[]);
    assert_ne!(job.code, Some(0), "{job}");
    assert!(job.code.is_some(), "hung:\n{job}");
    assert!(
        job.stderr
            .contains("MPI_Send: a predefined communicator outside init/finalize"),
        "{job}"
    );
    assert!(job.stderr.contains("MPI_ERR_COMM"), "{job}");
    assert!(!job.stdout.contains("NOT REACHED"), "{job}");
}

/// Built against MPICH's header and library (as `mpicc_abi` builds), run under rcomm-run:
/// the ranks load rcomm's library (comm.c checks the library version names rcomm).
#[test]
fn binaries_built_against_mpich_run_on_rcomm() {
    let Some(run) = common::rcomm_run() else {
        return;
    };
    let Some(mpich) = common::mpich() else { return };
    let dir = common::scratch("mpich");
    for name in [
        "p2p", "comm", "errors", "coll", "dtype", "topo", "large", "typeinfo",
    ] {
        let exe = dir.join(name);
        common::mpich_build(&mpich, &[&source(name)], &exe);
        let needed = common::run_ok(Command::new("readelf").arg("-d").arg(&exe));
        assert!(
            String::from_utf8_lossy(&needed.stdout).contains("[libmpi_abi.so.1]"),
            "{name} does not need libmpi_abi.so.1"
        );
        for n in [2, 3] {
            expect_pass(&common::rcomm_run_job(&run, n, &exe, &[]), name, n);
        }
    }
}

/// Launched by MPICH's own `mpiexec` (hydra, PMI-1) instead of rcomm-run: the ranks find rcomm's
/// library by the rpath rcomm-cc set and their peers through hydra's PMI server.
#[test]
fn mpich_mpiexec_launches_abi_programs_on_rcomm() {
    let Some(mpiexec) = ["/usr/bin/mpiexec.hydra", "/usr/bin/mpiexec"]
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
    else {
        rcomm_testkit::skip("MPICH's mpiexec is not installed (scripts/test.sh installs mpich)");
        return;
    };
    let dir = common::scratch("mpiexec");
    for name in ["p2p", "coll"] {
        let exe = dir.join(name);
        common::rcomm_cc_build(&[&source(name)], &exe);
        let mut cmd = Command::new(mpiexec);
        cmd.args(["-n", "3"])
            .arg(&exe)
            .env_remove("LD_LIBRARY_PATH");
        let job = common::run_with_deadline(cmd, std::time::Duration::from_secs(120));
        expect_pass(&job, name, 3);
        // rcomm's library (rcomm-cc's link beside this build), not a system MPI's.
        let ldd = common::run_ok(Command::new("ldd").arg(&exe));
        let libs = String::from_utf8_lossy(&ldd.stdout);
        let line = libs
            .lines()
            .find(|l| l.contains("libmpi_abi.so.1"))
            .unwrap_or_else(|| panic!("{name}: no libmpi_abi.so.1 in ldd:\n{libs}"));
        assert!(
            line.contains(&*common::profile_dir().to_string_lossy()),
            "{name} resolves libmpi_abi.so.1 elsewhere: {line}"
        );
    }
}
