//! `rcomm-topo`'s RDMA device listing: the fixture node of `rcomm-transport/tests/fixtures/ib`
//! (an InfiniBand HDR HCA, a RoCE v2 HCA with IPv4-mapped GIDs, an HCA whose port is down)
//! through `--sysfs-root`, as text and JSON, and this machine, which may have none.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TOPO: &str = env!("CARGO_BIN_EXE_rcomm-topo");

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../rcomm-transport/tests/fixtures/ib/node")
}

fn topo(args: &[&str]) -> Output {
    Command::new(TOPO)
        .args(args)
        .env_remove("RCOMM_RANK")
        .env_remove("RCOMM_SIZE")
        .env_remove("RCOMM_TOPO_FILE")
        .output()
        .unwrap()
}

#[test]
fn the_fixture_node_lists_its_hcas_ports_and_gids() {
    let root = fixture();
    let o = topo(&["--sysfs-root", root.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let has = |s: &str| assert!(out.contains(s), "no {s:?} in\n{out}");
    has("RDMA devices (/sys/class/infiniband under ");
    has("mlx5_0: 1 port(s), node GUID 0c42a10300651234");
    has("port 1: ACTIVE (LinkUp), InfiniBand, LID 0x5, 200 Gb/sec (4X HDR)");
    has("GID   0 fe80:0000:0000:0000:0c42:a103:0065:1234 IB/RoCE v1 (auto)");
    has("port 1: ACTIVE (LinkUp), Ethernet (RoCE), 100 Gb/sec (4X EDR), MTU 4096");
    has("GID   3 0000:0000:0000:0000:0000:ffff:0a00:0007 RoCE v2 ens1f0 10.0.0.7 (auto)");
    has("GID   2 0000:0000:0000:0000:0000:ffff:0a00:0007 IB/RoCE v1 ens1f0 10.0.0.7\n");
    has("mlx5_2: 1 port(s)");
    has("port 1: DOWN (Disabled), InfiniBand, LID 0xffff, 10 Gb/sec (4X SDR)");
    assert_eq!(out.matches("(auto)").count(), 3, "{out}");
}

#[test]
fn json_carries_the_same_devices() {
    let root = fixture();
    let o = topo(&["--json", "--sysfs-root", root.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &v["rdma"];
    assert_eq!(r.as_array().unwrap().len(), 3, "{r}");
    assert_eq!(r[0]["ports"][0]["link_layer"], "InfiniBand");
    assert_eq!(r[0]["ports"][0]["rate_mbps"], 200_000);
    assert_eq!(r[1]["ports"][0]["gid_index_auto"], 3);
    assert_eq!(r[1]["ports"][0]["gids"][3]["type"], "RoCE v2");
    assert_eq!(r[1]["ports"][0]["gids"][3]["ipv4"], "10.0.0.7");
    assert_eq!(r[1]["ports"][0]["active_mtu"], 4096);
    assert_eq!(r[2]["ports"][0]["state"], "DOWN");
}

#[test]
fn this_machine_says_whether_it_has_rdma_devices() {
    let o = topo(&["--no-cuda"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    if Path::new("/sys/class/infiniband").exists() {
        assert!(out.contains("/sys/class/infiniband"), "{out}");
    } else {
        assert!(
            out.contains("no RDMA devices (no /sys/class/infiniband)"),
            "{out}"
        );
    }
    // A topology from a file describes another machine: no RDMA section from this one.
    let dir = std::env::temp_dir().join(format!("rcomm-topo-ib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("t.json");
    let o = topo(&["--no-cuda", "--dump", f.to_str().unwrap()]);
    assert!(o.status.success());
    let o = topo(&["--file", f.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!String::from_utf8(o.stdout).unwrap().contains("RDMA"));
}
