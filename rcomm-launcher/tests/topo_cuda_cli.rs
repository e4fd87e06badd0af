//! `rcomm-topo`'s list of the GPUs the device backend sees: one line saying why none is usable
//! where there is no driver (not a failure), the stand-in's device under
//! `RCOMM_GPU_STANDIN=1`, the same in `--json`, and nothing of it for a fixture or `--no-cuda`.

use serde_json::Value;
use std::process::{Command, Output};

const TOPO: &str = env!("CARGO_BIN_EXE_rcomm-topo");

fn topo(args: &[&str], standin: bool) -> Output {
    let mut c = Command::new(TOPO);
    c.args(args)
        .env_remove("RCOMM_RANK")
        .env_remove("RCOMM_SIZE");
    if standin {
        c.env("RCOMM_GPU_STANDIN", "1");
    } else {
        c.env_remove("RCOMM_GPU_STANDIN");
    }
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn cuda_gpus_are_listed_or_one_line_says_why_not() {
    let out = text(&topo(&[], false));
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("CUDA GPUs")).collect();
    assert_eq!(lines.len(), 1, "{out}");
    let l = lines[0].trim();
    assert!(
        (l.starts_with("CUDA GPUs: none usable (") && l.ends_with(')'))
            || l.starts_with("CUDA GPUs (cuda): "),
        "{out}"
    );
    let v: Value = serde_json::from_str(&text(&topo(&["--json"], false))).unwrap();
    assert!(
        v["cuda"]["error"].is_string() || v["cuda"]["backend"] == "cuda",
        "{v}"
    );
    let none = text(&topo(&["--no-cuda"], false));
    assert!(!none.contains("CUDA GPUs"), "{none}");
}

#[test]
fn the_stand_in_device_is_listed() {
    let out = text(&topo(&[], true));
    assert!(out.contains("  CUDA GPUs (stand-in): 1\n"), "{out}");
    assert!(out.contains("    GPU 0: "), "{out}");
    assert!(out.contains("compute capability "), "{out}");
    let v: Value = serde_json::from_str(&text(&topo(&["--json"], true))).unwrap();
    let c = &v["cuda"];
    assert_eq!(c["backend"], "stand-in", "{v}");
    assert_eq!(c["devices"].as_array().map(Vec::len), Some(1), "{v}");
    for k in [
        "ordinal",
        "name",
        "pci_bus_id",
        "memory_bytes",
        "sm_count",
        "compute_capability",
    ] {
        assert!(!c["devices"][0][k].is_null(), "{k}: {v}");
    }
    assert!(c["error"].is_null(), "{v}");
}
