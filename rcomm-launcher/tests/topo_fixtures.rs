//! The topology decisions on machines this one cannot be: a 2-socket CPU server and a DGX-like
//! node (2 sockets, 8 GPUs behind 4 PCIe switches, a ConnectX HCA per switch), each read two
//! ways — rcomm's sysfs reader over a fixture tree (`topo::fixture`) and hwloc over hwloc's own
//! XML export of that tree (`rcomm-runtime/tests/fixtures/topo/`, made by `make-xml.sh`) —
//! and the same answers asserted for both: path classes, the NIC each of 8 local ranks picks,
//! the NUMA split's view of affinity masks, and the launcher's binding plans.
//!
//! NUMA memory placement itself cannot be measured here (this machine has one NUMA node); these
//! tests check the placement decisions.

use rcomm_launcher::binding::{self, Places, Share};
use rcomm_launcher::cli::BindTo;
use rcomm_launcher::hosts::PprUnit;
use rcomm_runtime::topo::{self, PathClass, Topology, choose};
use std::path::{Path, PathBuf};

fn xml(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../rcomm-runtime/tests/fixtures/topo")
        .join(format!("{name}.xml"))
}

/// The machine `name` from both sources: (label, topology). hwloc's is missing only in a build
/// without feature `hwloc` — never under CI, whose test line enables it.
fn both(name: &str) -> Vec<(&'static str, Topology)> {
    let dir = tempdir(name);
    topo::fixture::write(name, &dir).unwrap();
    let mut v = vec![("sysfs", topo::sysfs::read(&dir).unwrap())];
    let _ = std::fs::remove_dir_all(&dir);
    match topo::load_hwloc_xml(&xml(name)) {
        Ok(t) => v.push(("hwloc", t)),
        // Under CI this fails the test: CI's test line enables `hwloc`.
        Err(e) => rcomm_testkit::skip(&format!(
            "the hwloc half for {name} ({}): {e}; build with --features rcomm-runtime/hwloc",
            xml(name).display()
        )),
    }
    v
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rcomm-topo-fixtures-{name}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn named(t: &Topology, name: &str) -> topo::ObjId {
    t.ids()
        .find(|&i| t.obj(i).name == name)
        .unwrap_or_else(|| panic!("no device {name}"))
}

#[test]
fn dgx_path_classes() {
    for (src, t) in both("dgx") {
        let g = choose::gpus(&t);
        assert_eq!(g.len(), 8, "{src}");
        let hca = |k: usize| named(&t, &format!("mlx5_{k}"));
        // Same switch: PIX; switches on different host bridges of one NUMA node: NODE; across
        // the sockets: SYS.
        assert_eq!(t.path_class(g[0], g[1]), PathClass::Pix, "{src}");
        assert_eq!(t.path_class(g[0], g[2]), PathClass::Node, "{src}");
        assert_eq!(t.path_class(g[0], g[4]), PathClass::Sys, "{src}");
        assert_eq!(t.path_class(g[6], g[7]), PathClass::Pix, "{src}");
        assert_eq!(t.path_class(g[0], hca(0)), PathClass::Pix, "{src}");
        assert_eq!(t.path_class(g[0], hca(1)), PathClass::Node, "{src}");
        assert_eq!(t.path_class(g[5], hca(0)), PathClass::Sys, "{src}");
        assert_eq!(t.path_class(g[3], g[3]), PathClass::X, "{src}");
        // The management NIC sits on host bridge 0 itself.
        let eth0 = named(&t, "eth0");
        assert_eq!(t.path_class(g[0], eth0), PathClass::Phb, "{src}");
        assert_eq!(t.path_class(g[4], eth0), PathClass::Sys, "{src}");
    }
}

#[test]
fn dgx_eight_local_ranks_pick_the_nic_on_their_gpus_switch() {
    for (src, t) in both("dgx") {
        for r in 0..8u32 {
            let c = choose::choose(&t, r, &[], choose::Filters::default());
            let want = format!("mlx5_{}", r / 2);
            let hca = c
                .hca
                .unwrap_or_else(|| panic!("{src}: rank {r} got no HCA"));
            assert_eq!(hca.name, want, "{src}: local rank {r}");
            assert_eq!(hca.class, PathClass::Pix, "{src}: local rank {r}");
            assert_eq!(c.gpu, Some(choose::gpus(&t)[r as usize]), "{src}");
        }
    }
}

#[test]
fn numa_split_sees_which_nodes_a_mask_touches() {
    for name in ["server2s", "dgx"] {
        for (src, t) in both(name) {
            let numas: Vec<_> = t
                .of_kind(&topo::ObjKind::NumaNode { memory_bytes: 0 })
                .collect();
            assert_eq!(numas.len(), 2, "{name} {src}");
            // One core of each node; a mask spanning both; no mask.
            let (c0, c1) = (t.obj(numas[0]).cpuset[0], t.obj(numas[1]).cpuset[0]);
            assert_eq!(t.numa_nodes_touching(&[c0]), vec![numas[0]], "{name} {src}");
            assert_eq!(t.numa_nodes_touching(&[c1]), vec![numas[1]], "{name} {src}");
            assert_eq!(t.numa_nodes_touching(&[c0, c1]), numas, "{name} {src}");
        }
    }
}

fn all_cpus(t: &Topology) -> Vec<usize> {
    t.obj(Topology::MACHINE)
        .cpuset
        .iter()
        .map(|&c| c as usize)
        .collect()
}

fn bound(v: &[Option<Vec<usize>>]) -> Vec<Vec<usize>> {
    v.iter().map(|c| c.clone().expect("bound")).collect()
}

#[test]
fn server2s_binding_plans() {
    for (src, t) in both("server2s") {
        let numa_cpus: Vec<Vec<usize>> = t
            .of_kind(&topo::ObjKind::NumaNode { memory_bytes: 0 })
            .map(|n| t.obj(n).cpuset.iter().map(|&c| c as usize).collect())
            .collect();
        let places = Places::new(&all_cpus(&t), &t);
        assert_eq!(
            (places.cores(), places.numas(), places.packages()),
            (8, 2, 2)
        );
        // Default, 4 ranks on 8 cores: one core each (both hyperthreads), in core order.
        let (p, w) = binding::plan(None, None, Share::alone(4), &places);
        assert!(w.is_none(), "{src}");
        let p = bound(&p);
        for (i, cpus) in p.iter().enumerate() {
            assert_eq!(
                cpus.len(),
                2,
                "{src}: rank {i} gets one core's two PUs: {cpus:?}"
            );
        }
        let mut flat: Vec<usize> = p.concat();
        flat.sort_unstable();
        flat.dedup();
        assert_eq!(flat.len(), 8, "{src}: distinct cores");
        // --bind-to numa with ppr:2:numa: ranks 0–1 on node 0, 2–3 on node 1, each the node.
        let (p, _) = binding::plan(
            Some(BindTo::Numa),
            Some((2, PprUnit::Numa)),
            Share::alone(4),
            &places,
        );
        assert_eq!(
            bound(&p),
            vec![
                numa_cpus[0].clone(),
                numa_cpus[0].clone(),
                numa_cpus[1].clone(),
                numa_cpus[1].clone()
            ],
            "{src}"
        );
        // --bind-to socket, 2 ranks: one socket each (here a socket is a NUMA node).
        let (p, _) = binding::plan(Some(BindTo::Socket), None, Share::alone(2), &places);
        assert_eq!(bound(&p), numa_cpus, "{src}");
        // 9 ranks by default: more ranks than cores, so none is bound.
        let (p, _) = binding::plan(None, None, Share::alone(9), &places);
        assert!(p.iter().all(Option::is_none), "{src}");
    }
}

#[test]
fn dgx_binding_puts_each_gpus_rank_on_its_gpus_socket_with_ppr() {
    for (src, t) in both("dgx") {
        let places = Places::new(&all_cpus(&t), &t);
        assert_eq!((places.cores(), places.numas()), (16, 2), "{src}");
        // ppr:4:numa, bound to cores: ranks 0–3 (GPUs 0–3, NUMA 0) on node 0's cores, 4–7 on
        // node 1's — each rank on the socket its GPU and NIC hang from.
        let (p, w) = binding::plan(
            Some(BindTo::Core),
            Some((4, PprUnit::Numa)),
            Share::alone(8),
            &places,
        );
        assert!(w.is_none(), "{src}");
        let gpus = choose::gpus(&t);
        for (r, cpus) in bound(&p).iter().enumerate() {
            let node = t.numa_nodes_touching(&cpus.iter().map(|&c| c as u32).collect::<Vec<_>>());
            assert_eq!(node.len(), 1, "{src}: rank {r} within one node");
            assert_eq!(
                t.numa_of(gpus[r]),
                Some(node[0]),
                "{src}: rank {r}'s cores and GPU share a NUMA node"
            );
        }
    }
}
