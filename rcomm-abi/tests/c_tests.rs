//! The C binding's collectives, reduction ops, datatypes and topologies seen from C: each
//! program under `tests/c/` is compiled against rcomm's `mpi.h` and `libmpi_abi.so.1` and run
//! under `rcomm-run` at 1 to 4 ranks; it checks its results against references it computes
//! itself and exits non-zero on the first mismatch.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// target/<profile>, where cargo puts the library and `rcomm-run`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// A directory with rcomm's `mpi.h` and `libmpi_abi.so.1` (the SONAME programs load).
fn sdk() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = target_dir().join("c-tests");
        std::fs::create_dir_all(&dir).expect("create c-tests");
        std::fs::write(dir.join("mpi.h"), mpi_abi::header::header()).expect("write mpi.h");
        // `cargo test` builds the cdylib into deps/ (only `cargo build` copies it up): the
        // newer of the two is this source's.
        let lib = ["deps/libmpi_abi.so", "libmpi_abi.so"]
            .iter()
            .map(|p| target_dir().join(p))
            .filter(|p| p.exists())
            .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
            .expect("libmpi_abi.so: cargo builds it with the crate");
        let link = dir.join("libmpi_abi.so.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link).expect("link libmpi_abi.so.1");
        let dev = dir.join("libmpi_abi.so");
        let _ = std::fs::remove_file(&dev);
        std::os::unix::fs::symlink(&lib, &dev).expect("link libmpi_abi.so");
        dir
    })
}

fn compile(name: &str) -> PathBuf {
    let dir = sdk();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args([
            "-std=c11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-unused-parameter",
        ])
        .arg("-I")
        .arg(dir)
        .arg("-I")
        .arg(src.parent().unwrap())
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(dir)
        .arg("-lmpi_abi")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc {name}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn rcomm_run() -> PathBuf {
    let p = target_dir().join("rcomm-run");
    assert!(
        p.exists(),
        "{} is missing: build it first (cargo build -p rcomm-launcher --bin rcomm-run)",
        p.display()
    );
    p
}

/// Runs `prog` at `n` ranks; its output when every rank exits 0.
fn run(prog: &Path, n: u32) -> String {
    let child = Command::new("timeout")
        .arg("-k")
        .arg("5")
        .arg("120")
        .arg(rcomm_run())
        .arg("-n")
        .arg(n.to_string())
        .arg(prog)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn rcomm-run");
    let out = child.wait_with_output().expect("wait");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} at {n} ranks failed ({}):\n{text}",
        prog.display(),
        out.status
    );
    text
}

fn each_size(name: &str, sizes: &[u32]) {
    let exe = compile(name);
    for &n in sizes {
        let out = run(&exe, n);
        assert!(
            out.contains("PASS"),
            "{name} at {n} ranks printed no PASS:\n{out}"
        );
    }
}

#[test]
fn collectives_from_c() {
    each_size("coll", &[1, 2, 3, 4]);
}

#[test]
fn datatypes_from_c() {
    each_size("dtype", &[1, 2, 3, 4]);
}

#[test]
fn topologies_from_c() {
    each_size("topo", &[1, 2, 3, 4]);
}
