//! The CPU side from sysfs: packages, NUMA nodes, cores, PUs and caches.

use super::Reader;
use crate::topo::TopoError;
use crate::topo::build::{CoreSpec, cpu_side};
use crate::topo::model::{Cache, ObjId, Topology};
use std::collections::BTreeMap;

const CPU: &str = "sys/devices/system/cpu";
const NODE: &str = "sys/devices/system/node";

/// Adds the CPU objects to `t` and its caches; returns the NUMA nodes by number, for the
/// PCI reader to hang host bridges under.
pub(super) fn read(r: &Reader, t: &mut Topology) -> Result<BTreeMap<u32, ObjId>, TopoError> {
    let online_file = format!("{CPU}/online");
    let online = r.list(&online_file)?.ok_or_else(|| TopoError::Io {
        path: r.path(&online_file),
        source: std::io::ErrorKind::NotFound.into(),
    })?;
    // package id → core id → PUs. Firmware that does not know (some VMs) says -1: one package.
    let mut packages: BTreeMap<u32, BTreeMap<u32, Vec<u32>>> = BTreeMap::new();
    for &cpu in &online {
        let id = |f: &str| -> Result<u32, TopoError> {
            let rel = format!("{CPU}/cpu{cpu}/topology/{f}");
            let v = r.int(&rel)?.ok_or_else(|| TopoError::Io {
                path: r.path(&rel),
                source: std::io::ErrorKind::NotFound.into(),
            })?;
            u32::try_from(v.max(0)).map_err(|_| r.bad(&rel, "an id below 2^32", &v.to_string()))
        };
        let (p, c) = (id("physical_package_id")?, id("core_id")?);
        packages
            .entry(p)
            .or_default()
            .entry(c)
            .or_default()
            .push(cpu);
    }
    let nodes = read_nodes(r, &online)?;
    let cores = packages
        .into_iter()
        .flat_map(|(package, cores)| {
            cores.into_iter().map(move |(os_index, pus)| CoreSpec {
                package,
                os_index,
                pus,
            })
        })
        .collect();
    let node_ids = cpu_side(t, cores, &nodes);
    t.caches = read_caches(r, &online)?;
    Ok(node_ids)
}

/// NUMA nodes: number → (online PUs, memory bytes). None at all without `node/`.
fn read_nodes(r: &Reader, online: &[u32]) -> Result<BTreeMap<u32, (Vec<u32>, u64)>, TopoError> {
    let mut nodes = BTreeMap::new();
    for name in r.names(NODE)? {
        let Some(n) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = format!("{NODE}/{name}");
        let cpus = r
            .list(format!("{dir}/cpulist"))?
            .unwrap_or_default()
            .into_iter()
            .filter(|c| online.binary_search(c).is_ok())
            .collect();
        nodes.insert(n, (cpus, mem_total(r, &format!("{dir}/meminfo"))?));
    }
    Ok(nodes)
}

/// `Node N MemTotal: X kB` from a node's meminfo, in bytes; 0 when the file is missing.
fn mem_total(r: &Reader, rel: &str) -> Result<u64, TopoError> {
    let Some(s) = r.read(rel)? else {
        return Ok(0);
    };
    let line = s.lines().find(|l| l.contains("MemTotal:"));
    line.and_then(|l| {
        let mut w = l.split_whitespace().rev();
        let unit = w.next()?;
        let kib: u64 = w.next()?.parse().ok()?;
        (unit == "kB").then(|| kib.checked_mul(1024)).flatten()
    })
    .ok_or_else(|| r.bad(rel, "a line `Node N MemTotal: X kB`", line.unwrap_or(&s)))
}

/// Data and unified caches of the online CPUs, one entry per (level, sharing PUs).
fn read_caches(r: &Reader, online: &[u32]) -> Result<Vec<Cache>, TopoError> {
    let mut seen = BTreeMap::new();
    for &cpu in online {
        let dir = format!("{CPU}/cpu{cpu}/cache");
        for index in r.names(&dir)? {
            if !index.starts_with("index") {
                continue;
            }
            let d = format!("{dir}/{index}");
            let ty = r.need(format!("{d}/type"))?;
            if ty.trim() == "Instruction" {
                continue;
            }
            let level_file = format!("{d}/level");
            let level = r.need(&level_file)?;
            let level: u8 = level
                .trim()
                .parse()
                .map_err(|_| r.bad(&level_file, "a cache level", &level))?;
            let size_file = format!("{d}/size");
            let size = r.need(&size_file)?;
            let size_bytes = parse_size(size.trim())
                .ok_or_else(|| r.bad(&size_file, "a size like 48K", &size))?;
            let shared_file = format!("{d}/shared_cpu_list");
            let shared = r.list(&shared_file)?.ok_or_else(|| TopoError::Io {
                path: r.path(&shared_file),
                source: std::io::ErrorKind::NotFound.into(),
            })?;
            let cpuset: Vec<u32> = shared
                .into_iter()
                .filter(|c| online.binary_search(c).is_ok())
                .collect();
            seen.entry((level, cpuset)).or_insert(size_bytes);
        }
    }
    Ok(seen
        .into_iter()
        .map(|((level, cpuset), size_bytes)| Cache {
            level,
            size_bytes,
            cpuset,
        })
        .collect())
}

/// `48K`, `2048K`, `32M`, `1G` or plain bytes.
fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}
