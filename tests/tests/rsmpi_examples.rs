//! rsmpi's own examples and tests, unchanged, built against `rcomm-mpi` (the facade with
//! library name `mpi`) and run under `rcomm-run` at 1-4 ranks (issue 19).
//!
//! The source of rsmpi 0.8.2 is taken from cargo's registry cache (brought there by `cargo
//! fetch` on a small manifest naming it when missing; nothing of it is committed). A package is
//! generated under `target/rsmpi-examples/` whose `[[example]]`s and `[[test]]`s point at those
//! files and whose `mpi` dependency is `rcomm-mpi` by path; one `cargo build` builds them all.
//!
//! Examples that cannot run are listed in [`CANNOT_RUN`] with the reason (also in
//! docs/mpi-coverage.md); every other example must exit 0 at each rank count it supports.
//! rcomm's own programs in `rcomm-mpi/tests/programs/` (written against rsmpi's API, checking
//! what the examples leave out) are built and run the same way, as examples named `rcomm_*`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rcomm_tests::{Job, workspace};

const VERSION: &str = "0.8.2";

/// Examples that are not built or not run, and why (none since spawning was built; the list
/// stays for what a later rsmpi adds).
const CANNOT_RUN: &[(&str, &str)] = &[];

/// Rank counts each example runs at (default 1-4).
fn ranks(example: &str) -> &'static [u32] {
    match example {
        // The examples assert more than one rank.
        "all_gather_bool" | "immediate_multiple_requests" => &[2, 3, 4],
        // Rank r sleeps r seconds before receiving.
        "wait_any" => &[1, 2, 3],
        _ => &[1, 2, 3, 4],
    }
}

/// Where cargo keeps registry sources.
fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"))
}

fn find_rsmpi() -> Option<PathBuf> {
    let src = cargo_home().join("registry").join("src");
    std::fs::read_dir(src)
        .ok()?
        .flatten()
        .map(|d| d.path().join(format!("mpi-{VERSION}")))
        .find(|p| p.join("examples").is_dir())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// rsmpi's source, fetched into cargo's registry cache if it is not there (sources only: the
/// crate is never built, it would need a C MPI).
fn rsmpi_source(scratch: &Path) -> PathBuf {
    if let Some(p) = find_rsmpi() {
        return p;
    }
    let dir = scratch.join("fetch");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"rsmpi-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             [workspace]\n[dependencies]\nmpi = {{ version = \"={VERSION}\", default-features = false }}\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    let st = cargo()
        .arg("fetch")
        .current_dir(&dir)
        .status()
        .expect("cargo fetch");
    assert!(st.success(), "cargo fetch of mpi {VERSION} failed");
    find_rsmpi().expect("mpi source in the registry cache after cargo fetch")
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

fn rs_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    v.sort();
    v
}

/// Writes the package of rsmpi's examples and tests over rcomm-mpi.
fn generate(pkg: &Path, rsmpi: &Path) -> (Vec<String>, Vec<String>) {
    let mut toml = format!(
        r#"[package]
name = "rsmpi-examples"
version = "0.0.0"
edition = "2021"
publish = false
autoexamples = false
autotests = false

[workspace]

[features]
default = ["user-operations", "derive", "complex"]
user-operations = ["mpi/user-operations"]
derive = ["mpi/derive"]
complex = ["mpi/complex"]

[dependencies]
mpi = {{ package = "rcomm-mpi", path = "{}", default-features = false }}
num-complex = "0.4"

# The examples say #![deny(warnings)]; rsmpi's build script declares this cfg.
[lints.rust]
unexpected_cfgs = {{ level = "warn", check-cfg = ["cfg(msmpi)"] }}

# Unoptimised: the build takes ~35 s on 2 cores (~130 s at opt-level 1), the runs are short.
[profile.dev]
opt-level = 0
debug = false
incremental = false
"#,
        workspace().join("rcomm-mpi").display()
    );
    let mut examples = Vec::new();
    for f in rs_files(&rsmpi.join("examples")) {
        let name = stem(&f);
        if CANNOT_RUN
            .iter()
            .any(|c| c.0 == name && c.1.starts_with("does not compile"))
        {
            continue;
        }
        toml += &format!(
            "\n[[example]]\nname = \"{name}\"\npath = \"{}\"\n",
            f.display()
        );
        examples.push(name);
    }
    // rcomm's own checks of what the examples leave out, written against rsmpi's API.
    let own = workspace().join("rcomm-mpi/tests/programs");
    for f in rs_files(&own) {
        let name = format!("rcomm_{}", stem(&f));
        toml += &format!(
            "\n[[example]]\nname = \"{name}\"\npath = \"{}\"\n",
            f.display()
        );
        examples.push(name);
    }
    let mut tests = Vec::new();
    for f in rs_files(&rsmpi.join("tests")) {
        let name = stem(&f);
        toml += &format!(
            "\n[[test]]\nname = \"{name}\"\npath = \"{}\"\n",
            f.display()
        );
        tests.push(name);
    }
    std::fs::create_dir_all(pkg.join("src")).unwrap();
    std::fs::write(pkg.join("Cargo.toml"), toml).unwrap();
    std::fs::write(pkg.join("src/lib.rs"), "").unwrap();
    // The workspace's lock, so the package builds with the versions CI checked.
    std::fs::copy(workspace().join("Cargo.lock"), pkg.join("Cargo.lock")).unwrap();
    (examples, tests)
}

/// Builds every example and test; returns the test executables by name.
fn build(pkg: &Path, target: &Path) -> Vec<(String, PathBuf)> {
    let st = cargo()
        .args(["build", "--examples"])
        .arg("--target-dir")
        .arg(target)
        .current_dir(pkg)
        // The examples' own flags (they deny warnings themselves); the suite's RUSTFLAGS are
        // for the workspace.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .expect("cargo build");
    assert!(
        st.success(),
        "building rsmpi's examples against rcomm-mpi failed"
    );
    // Test harnesses: cargo names each on stderr ("Executable <source> (<path from pkg>)").
    let out = cargo()
        .args(["test", "--no-run", "--tests"])
        .arg("--target-dir")
        .arg(target)
        .current_dir(pkg)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .expect("cargo test --no-run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "building rsmpi's tests against rcomm-mpi failed\n{err}"
    );
    err.lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("Executable ")?;
            let (src, rest) = l.split_once(" (")?;
            if src.starts_with("unittests") {
                return None;
            }
            Some((stem(Path::new(src)), pkg.join(rest.strip_suffix(')')?)))
        })
        .collect()
}

#[test]
fn rsmpi_examples_and_tests_run_on_rcomm() {
    let t0 = Instant::now();
    let scratch = target_dir().join("rsmpi-examples");
    let rsmpi = rsmpi_source(&scratch);
    let pkg = scratch.join("pkg");
    let (examples, _) = generate(&pkg, &rsmpi);
    let built_tests = build(&pkg, &scratch.join("target"));
    let built = t0.elapsed();
    let exdir = scratch.join("target/debug/examples");

    // Every example of rsmpi's is either run or listed with a reason.
    for f in rs_files(&rsmpi.join("examples")) {
        let name = stem(&f);
        assert!(
            examples.contains(&name) || CANNOT_RUN.iter().any(|c| c.0 == name),
            "example {name} neither built nor listed in CANNOT_RUN"
        );
    }

    let mut failures = Vec::new();
    let mut runs = 0;
    for ex in &examples {
        if CANNOT_RUN.iter().any(|c| c.0 == ex) {
            continue;
        }
        let exe = exdir.join(ex);
        for &n in ranks(ex) {
            let out = Job::new(n, &[exe.to_str().unwrap()])
                .deadline(Duration::from_secs(60))
                .run();
            runs += 1;
            if out.code() != 0 {
                failures.push(format!("{ex} at {n} ranks: exit {}\n{out}", out.code()));
            }
        }
    }

    // The spawning examples print from the children too (through the spawning rank's
    // output): every child of every run must have said it ran.
    for (ex, child_line, children) in [
        ("spawn", "Child universe", 1),
        ("spawn_multiple", "has parent size", 3),
    ] {
        for n in [1u32, 2] {
            let out = Job::new(n, &[exdir.join(ex).to_str().unwrap()])
                .deadline(Duration::from_secs(60))
                .run();
            let said = out.stdout.matches(child_line).count();
            if out.code() != 0 || said != children {
                failures.push(format!(
                    "{ex} at {n} ranks: exit {}, {said} of {children} children reported\n{out}",
                    out.code()
                ));
            }
        }
    }

    // rsmpi's integration tests (derive_tests, trait_object_safety_test) under rcomm-run.
    assert_eq!(
        built_tests.len(),
        rs_files(&rsmpi.join("tests")).len(),
        "{built_tests:?}"
    );
    for (name, exe) in &built_tests {
        for n in [1u32, 2] {
            let out = Job::new(n, &[exe.to_str().unwrap(), "--test-threads=1"]).run();
            runs += 1;
            if out.code() != 0 {
                failures.push(format!(
                    "test {name} at {n} ranks: exit {}\n{out}",
                    out.code()
                ));
            }
        }
    }

    eprintln!(
        "rsmpi examples: {} built, {runs} runs; build {:.0?}, total {:.0?}",
        examples.len(),
        built,
        t0.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
