//! Hand-built topologies for tests (until the sysfs fixture trees can be read instead): a
//! plain 2-socket server and a DGX-like node. Public (hidden) so that other crates' tests and
//! `rcomm-topo --file` tests can use the same shapes.
//!
//! Both: 2 packages × 8 cores × 2 threads, one NUMA node per package, CPUs numbered as Linux
//! numbers them (first threads of socket 0, then of socket 1, then the siblings in the same
//! order): core `c` of package `p` has PUs `8p + c` and `16 + 8p + c`. Each NUMA node has 64 GiB,
//! each core an L1d and L2, each package an L3.

use super::model::{
    Cache, Link, LinkKind, ObjId, ObjKind, OsDevKind, PciAddr, PcieLink, Source, Topology,
};

const PACKAGES: u32 = 2;
const CORES: u32 = 8;

fn addr(bus: u8, dev: u8) -> PciAddr {
    PciAddr {
        domain: 0,
        bus,
        dev,
        func: 0,
    }
}

fn bridge(t: &mut Topology, parent: ObjId, bus: u8, dev: u8) -> ObjId {
    t.add(
        parent,
        ObjKind::PciBridge {
            addr: addr(bus, dev),
        },
        None,
        "",
    )
}

fn function(t: &mut Topology, parent: ObjId, bus: u8, class: u16, vendor: u16) -> ObjId {
    t.add(
        parent,
        ObjKind::PciDevice {
            addr: addr(bus, 0),
            class,
            vendor,
            device: 0x1234,
            link: Some(PcieLink {
                gts: 16.0,
                width: 16,
            }),
        },
        None,
        "",
    )
}

fn osdev(t: &mut Topology, parent: ObjId, kind: OsDevKind, name: &str) -> ObjId {
    t.add(parent, ObjKind::OsDevice { kind }, None, name)
}

/// The CPU side of both machines; returns the NUMA node ids (node 0, node 1).
fn cpus(t: &mut Topology) -> [ObjId; 2] {
    let mut nodes = [ObjId(0); 2];
    for p in 0..PACKAGES {
        let pkg = t.add(Topology::MACHINE, ObjKind::Package, Some(p), "");
        let node = t.add(
            pkg,
            ObjKind::NumaNode {
                memory_bytes: 64 << 30,
            },
            Some(p),
            "",
        );
        nodes[p as usize] = node;
        let mut l3 = Vec::new();
        for c in 0..CORES {
            let core = t.add(node, ObjKind::Core, Some(c), "");
            let pus = [p * CORES + c, PACKAGES * CORES + p * CORES + c];
            for pu in pus {
                t.add(core, ObjKind::Pu, Some(pu), "");
            }
            for (level, size) in [(1, 48 << 10), (2, 2 << 20)] {
                t.caches.push(Cache {
                    level,
                    size_bytes: size,
                    cpuset: pus.to_vec(),
                });
            }
            l3.extend(pus);
        }
        l3.sort_unstable();
        t.caches.push(Cache {
            level: 3,
            size_bytes: 32 << 20,
            cpuset: l3,
        });
    }
    nodes
}

/// A 2-socket server without accelerators: `eth0` (25 Gb/s) under socket 0's host bridge.
pub fn server2s() -> Topology {
    let mut t = Topology::new(Source::Manual, "server2s");
    let nodes = cpus(&mut t);
    let hb = t.add(nodes[0], ObjKind::HostBridge, None, "");
    let port = bridge(&mut t, hb, 0, 1);
    let f = function(&mut t, port, 0x01, 0x0200, 0x8086);
    osdev(
        &mut t,
        f,
        OsDevKind::Net {
            speed_mbps: Some(25_000),
        },
        "eth0",
    );
    t.fill_cpusets();
    t
}

/// A DGX-like node: per NUMA node one host bridge with two root ports, each leading to a PCIe
/// switch (an upstream bridge with one downstream-port bridge per device); each switch holds two
/// GPUs and a ConnectX HCA (`mlx5_k` with its net device `ibk`). Switches 0–1 are on NUMA node
/// 0, 2–3 on node 1; `eth0` (1 Gb/s) is on a root port of socket 0's host bridge. GPUs are
/// named `gpu0`…`gpu7` in PCI order; GPU pairs (0,1), (2,3), … are joined by 4-lane NVLink.
///
/// With one host bridge per socket, GPU0–GPU2 (different switches, same host bridge) is PHB.
pub fn dgx() -> Topology {
    let mut t = Topology::new(Source::Manual, "dgx");
    let nodes = cpus(&mut t);
    let mut gpus = Vec::new();
    for (n, &node) in nodes.iter().enumerate() {
        let hb = t.add(node, ObjKind::HostBridge, None, "");
        for s in 0..2u8 {
            let sw = n as u8 * 2 + s;
            // Bus numbers: switch k's ports on 0x10·(k+1), its devices on 0x10·(k+1) + 1…3.
            let base = 0x10 * (sw + 1);
            let root = bridge(&mut t, hb, 0, 1 + sw);
            let up = bridge(&mut t, root, base, 0);
            for (slot, class, vendor) in [
                (0u8, 0x0302, 0x10de),
                (1, 0x0302, 0x10de),
                (2, 0x0207, 0x15b3),
            ] {
                let down = bridge(&mut t, up, base, 1 + slot);
                let f = function(&mut t, down, base + 1 + slot, class, vendor);
                if class == 0x0302 {
                    let g = osdev(&mut t, f, OsDevKind::Gpu, &format!("gpu{}", gpus.len()));
                    gpus.push(g);
                } else {
                    osdev(&mut t, f, OsDevKind::Ib, &format!("mlx5_{sw}"));
                    osdev(
                        &mut t,
                        f,
                        OsDevKind::Net {
                            speed_mbps: Some(200_000),
                        },
                        &format!("ib{sw}"),
                    );
                }
            }
        }
        if n == 0 {
            let port = bridge(&mut t, hb, 0, 8);
            let f = function(&mut t, port, 0x05, 0x0200, 0x8086);
            osdev(
                &mut t,
                f,
                OsDevKind::Net {
                    speed_mbps: Some(1_000),
                },
                "eth0",
            );
        }
    }
    for pair in gpus.chunks(2) {
        t.links.push(Link {
            a: pair[0],
            b: pair[1],
            kind: LinkKind::NvLink { lanes: 4 },
            bandwidth_gbs: Some(100.0),
        });
    }
    t.fill_cpusets();
    t
}

/// The object named `name` (an OS device).
pub fn named(t: &Topology, name: &str) -> Option<ObjId> {
    t.ids().find(|&i| t.obj(i).name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testkit_machines_are_valid_and_shaped_as_documented() {
        for t in [server2s(), dgx()] {
            t.validate().unwrap();
            assert_eq!(t.count(&ObjKind::Package), 2);
            assert_eq!(t.count(&ObjKind::NumaNode { memory_bytes: 0 }), 2);
            assert_eq!(t.count(&ObjKind::Core), 16);
            assert_eq!(t.count(&ObjKind::Pu), 32);
        }
        let t = dgx();
        assert_eq!(
            t.filter(|k| matches!(
                k,
                ObjKind::OsDevice {
                    kind: OsDevKind::Gpu
                }
            ))
            .count(),
            8
        );
        let node1 = t.numa_of(named(&t, "mlx5_3").unwrap()).unwrap();
        assert_eq!(t.obj(node1).os_index, Some(1));
        assert_eq!(
            t.obj(named(&t, "eth0").unwrap()).cpuset,
            (0..8).chain(16..24).collect::<Vec<_>>()
        );
    }
}
