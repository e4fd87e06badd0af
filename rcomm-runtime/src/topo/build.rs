//! The CPU side of a topology from per-core facts, shared by the sysfs and hwloc readers so
//! that both shape the same machine the same way.

use super::model::{ObjId, ObjKind, Topology};
use std::collections::{BTreeMap, BTreeSet};

/// One core: its package id, its own number and its PUs (Linux CPU numbers).
pub(crate) struct CoreSpec {
    pub package: u32,
    pub os_index: u32,
    pub pus: Vec<u32>,
}

/// NUMA nodes by number: their PUs and local memory in bytes.
pub(crate) type Nodes = BTreeMap<u32, (Vec<u32>, u64)>;

/// Adds packages, NUMA nodes, cores and PUs under the machine: a node inside one package
/// under that package with the package's cores in it; returns the nodes' objects by number.
pub(crate) fn cpu_side(
    t: &mut Topology,
    cores: Vec<CoreSpec>,
    nodes: &Nodes,
) -> BTreeMap<u32, ObjId> {
    let mut package_of = BTreeMap::new();
    let mut packages: BTreeMap<u32, Vec<CoreSpec>> = BTreeMap::new();
    for c in cores {
        for &pu in &c.pus {
            package_of.insert(pu, c.package);
        }
        packages.entry(c.package).or_default().push(c);
    }
    let mut node_of = BTreeMap::new();
    for (&n, (cpus, _)) in nodes {
        for &c in cpus {
            node_of.entry(c).or_insert(n);
        }
    }
    // A node spanning packages (rare) sits under the machine with its cores, and the
    // packages lose those cores: the model's CPU side is a tree.
    let span = |n: &u32| {
        let pk: BTreeSet<_> = nodes[n]
            .0
            .iter()
            .filter_map(|c| package_of.get(c))
            .collect();
        pk.len() != 1
    };
    let mut node_ids = BTreeMap::new();
    for (&n, (_, mem)) in nodes {
        if span(&n) {
            let id = t.add(
                Topology::MACHINE,
                ObjKind::NumaNode { memory_bytes: *mem },
                Some(n),
                "",
            );
            node_ids.insert(n, id);
        }
    }
    for (p, cores) in &packages {
        let mut pkg = None;
        for CoreSpec {
            os_index: core,
            pus,
            ..
        } in cores
        {
            let parent = match pus.first().and_then(|c| node_of.get(c)) {
                Some(n) if node_ids.contains_key(n) => node_ids[n],
                Some(&n) => {
                    let pid = *pkg.get_or_insert_with(|| {
                        t.add(Topology::MACHINE, ObjKind::Package, Some(*p), "")
                    });
                    *node_ids.entry(n).or_insert_with(|| {
                        t.add(
                            pid,
                            ObjKind::NumaNode {
                                memory_bytes: nodes[&n].1,
                            },
                            Some(n),
                            "",
                        )
                    })
                }
                None => *pkg.get_or_insert_with(|| {
                    t.add(Topology::MACHINE, ObjKind::Package, Some(*p), "")
                }),
            };
            let cid = t.add(parent, ObjKind::Core, Some(*core), "");
            for &pu in pus {
                t.add(cid, ObjKind::Pu, Some(pu), "");
            }
        }
    }
    // Nodes with memory and no CPU (HBM, CXL) hang under the machine.
    for (&n, (_, mem)) in nodes {
        node_ids.entry(n).or_insert_with(|| {
            t.add(
                Topology::MACHINE,
                ObjKind::NumaNode { memory_bytes: *mem },
                Some(n),
                "",
            )
        });
    }
    node_ids
}
