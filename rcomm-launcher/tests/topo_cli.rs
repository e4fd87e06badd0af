//! `rcomm-topo` as a user runs it: the DGX-like testkit machine through `--file` (text matrix
//! and `--json`), `--dump` round trip, bad input, and under `rcomm-run` (one report per host).

use rcomm_runtime::topo::testkit;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

const TOPO: &str = env!("CARGO_BIN_EXE_rcomm-topo");
const RUN: &str = env!("CARGO_BIN_EXE_rcomm-run");

/// A directory of one test's own, removed when the test ends. No two tests share a file:
/// when every test rewrote one shared `dgx.json` while other tests' `rcomm-topo` read it, the
/// readers failed under load (a half-written file).
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "rcomm-topo-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The DGX-like testkit machine as a topology file.
    fn dgx(&self) -> PathBuf {
        let f = self.join("dgx.json");
        std::fs::write(&f, serde_json::to_string(&testkit::dgx()).unwrap()).unwrap();
        f
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn topo(args: &[&str]) -> Output {
    Command::new(TOPO)
        .args(args)
        .env_remove("RCOMM_RANK")
        .env_remove("RCOMM_SIZE")
        .output()
        .unwrap()
}

#[test]
fn the_dgx_matrix_in_nvidia_smi_words() {
    let dir = Scratch::new();
    let f = dir.dgx();
    let o = topo(&["--file", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(
        out.contains("host dgx: 2 packages, 2 NUMA nodes, 16 cores, 32 PUs"),
        "{out}"
    );
    assert!(
        out.contains("NUMA node 1: 64 GiB memory, cpus 8-15,24-31"),
        "{out}"
    );
    assert!(out.contains("mlx5_3 (0000:43:00.0, NUMA 1)"), "{out}");
    assert!(out.contains("eth0 (0000:05:00.0, 1 Gb/s, NUMA 0)"), "{out}");
    // Columns: gpu0..gpu7, mlx5_0..mlx5_3, eth0 (ibN repeat their HCA's row and are left out).
    let header = out.lines().find(|l| l.contains("CPU Affinity")).unwrap();
    let cols: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        &cols[..13],
        [
            "gpu0", "gpu1", "gpu2", "gpu3", "gpu4", "gpu5", "gpu6", "gpu7", "mlx5_0", "mlx5_1",
            "mlx5_2", "mlx5_3", "eth0"
        ]
    );
    let row = |name: &str| -> Vec<String> {
        out.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row {name} in {out}"))
            .split_whitespace()
            .skip(1)
            .map(String::from)
            .collect()
    };
    let gpu0 = row("gpu0");
    assert_eq!(
        gpu0,
        [
            "X",
            "NV4",
            "PHB",
            "PHB",
            "SYS",
            "SYS",
            "SYS",
            "SYS",
            "PIX",
            "PHB",
            "SYS",
            "SYS",
            "PHB",
            "0-7,16-23",
            "0"
        ]
    );
    let mlx3 = row("mlx5_3");
    assert_eq!(&mlx3[6..9], ["PIX", "PIX", "SYS"]);
    assert_eq!(&mlx3[13..], ["8-15,24-31", "1"]);
}

#[test]
fn json_counts_devices_and_matrix() {
    let dir = Scratch::new();
    let f = dir.dgx();
    let o = topo(&["--json", "--file", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&v["packages"], &v["numa_nodes"], &v["cores"], &v["pus"]),
        (&2.into(), &2.into(), &16.into(), &32.into())
    );
    assert_eq!(v["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(v["hcas"][2]["name"], "mlx5_2");
    assert_eq!(v["nics"].as_array().unwrap().len(), 5);
    let m = &v["matrix"];
    assert_eq!(m["devices"][4], "gpu4");
    assert_eq!(m["classes"][0][1], "NV4");
    assert_eq!(m["classes"][0][4], "SYS");
    assert_eq!(m["classes"][1][8], "PIX");
    assert_eq!(m["numa_affinity"][11], 1);
}

#[test]
fn dump_writes_a_file_that_reads_back_and_bad_files_are_refused() {
    let d = Scratch::new();
    let out = d.join("again.json");
    let f = d.dgx();
    let o = topo(&[
        "--file",
        f.to_str().unwrap(),
        "--dump",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut back: rcomm_runtime::topo::Topology =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // --file records where the model came from; the rest is the machine, unchanged.
    assert_eq!(
        back.source,
        rcomm_runtime::topo::Source::File {
            path: f.to_str().unwrap().into()
        }
    );
    back.source = testkit::dgx().source;
    assert_eq!(back, testkit::dgx());
    // This machine dumps too.
    let here = d.join("here.json");
    for args in [
        ["--dump", here.to_str().unwrap()],
        ["--file", here.to_str().unwrap()],
    ] {
        let o = topo(&args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let bad = d.join("bad.json");
    std::fs::write(&bad, "{\"objects\": 3}").unwrap();
    let o = topo(&["--file", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a topology"));
    let o = topo(&["--file", "/nonexistent/topo.json"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn under_rcomm_run_each_host_reports_once_with_its_name() {
    let dir = Scratch::new();
    let f = dir.dgx();
    let o = Command::new(RUN)
        .args([
            "-n",
            "3",
            "--no-prefix",
            TOPO,
            "--file",
            f.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let host = rcomm_runtime::identity::hostname();
    assert_eq!(out.matches("host dgx:").count(), 1, "{out}");
    assert!(
        out.lines().all(|l| l.starts_with(&format!("{host}: "))),
        "{out}"
    );
}

#[test]
fn rcomm_topo_file_overrides_detection_and_a_bad_one_is_an_error() {
    let dir = Scratch::new();
    let f = dir.dgx();
    let o = Command::new(TOPO)
        .arg("--json")
        .env("RCOMM_TOPO_FILE", &f)
        .env_remove("RCOMM_RANK")
        .env_remove("RCOMM_SIZE")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 8, "{v}");
    // A file that is not a topology is refused, never half-used or replaced by detection.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "[1, 2").unwrap();
    let o = Command::new(TOPO)
        .env("RCOMM_TOPO_FILE", &bad)
        .env_remove("RCOMM_RANK")
        .env_remove("RCOMM_SIZE")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.json"), "{err}");
}
