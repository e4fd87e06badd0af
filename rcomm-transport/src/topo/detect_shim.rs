//! TEMPORARY (delete on merge with the real `topo::detect`, which reads RCOMM_TOPO_FILE,
//! hwloc or the full sysfs tree): the CPU side of this machine from sysfs, so that binding,
//! `split_type(Numa)` and `rcomm-topo` have a model to work from. No I/O devices, no caches.

use super::model::{ObjKind, Source, Topology};
use std::collections::BTreeMap;

fn read_u32(path: &str) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn numa_of_cpu(cpu: u32) -> Option<u32> {
    std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}"))
        .ok()?
        .flatten()
        .find_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
}

fn node_memory(node: u32) -> u64 {
    let Ok(s) = std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/meminfo"))
    else {
        return 0;
    };
    s.lines()
        .find(|l| l.contains("MemTotal:"))
        .and_then(|l| l.split_whitespace().rev().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// This machine's CPU side (packages, NUMA nodes, cores, PUs) from sysfs; a CPU sysfs does not
/// describe becomes a core of its own in package 0, node 0.
pub fn detect() -> Result<Topology, std::io::Error> {
    let mut cpus: Vec<u32> = std::fs::read_dir("/sys/devices/system/cpu")?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
        .collect();
    cpus.sort_unstable();
    // (package, node) → core id → PUs.
    let mut tree: BTreeMap<(u32, u32), BTreeMap<u32, Vec<u32>>> = BTreeMap::new();
    for &c in &cpus {
        let topo = format!("/sys/devices/system/cpu/cpu{c}/topology");
        let pkg = read_u32(&format!("{topo}/physical_package_id")).unwrap_or(0);
        let core = read_u32(&format!("{topo}/core_id")).unwrap_or(u32::MAX - c);
        let node = numa_of_cpu(c).unwrap_or(0);
        tree.entry((pkg, node))
            .or_default()
            .entry(core)
            .or_default()
            .push(c);
    }
    let mut t = Topology::new(
        Source::Sysfs { root: "/".into() },
        crate::identity::hostname(),
    );
    let mut packages = BTreeMap::new();
    for ((pkg, node), cores) in tree {
        let p = *packages
            .entry(pkg)
            .or_insert_with(|| t.add(Topology::MACHINE, ObjKind::Package, Some(pkg), ""));
        let memory_bytes = node_memory(node);
        let n = t.add(p, ObjKind::NumaNode { memory_bytes }, Some(node), "");
        for (core, pus) in cores {
            let c = t.add(n, ObjKind::Core, Some(core), "");
            for pu in pus {
                t.add(c, ObjKind::Pu, Some(pu), "");
            }
        }
    }
    t.fill_cpusets();
    Ok(t)
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_machine_reads_as_a_valid_model_with_every_allowed_cpu() {
        let t = super::detect().unwrap();
        t.validate().unwrap();
        let all = &t.obj(super::Topology::MACHINE).cpuset;
        for c in crate::os::allowed_cpus().unwrap() {
            assert!(all.contains(&c), "cpu {c}");
        }
    }
}
