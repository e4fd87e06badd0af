//! `rcomm-topo`: what rcomm sees of a machine — a summary, and the affinity matrix of GPUs and
//! NICs in `nvidia-smi topo -m`'s words — as text or JSON, and the model as a file; and, for
//! this machine, the GPUs the CUDA driver sees ([`cuda_devices`]).

use rcomm_runtime::topo::choose;
use rcomm_runtime::topo::{ObjId, ObjKind, OsDevKind, PathClass, Topology};
use rcomm_transport::gpu::{self, DeviceInfo, GpuError};
use serde_json::{Value, json};
use std::fmt::Write as _;

/// The devices of the matrix: GPUs, HCAs, then network interfaces on a PCI function that no
/// HCA already stands for (`ib0` beside `mlx5_0` would only repeat its row).
pub fn matrix_devices(t: &Topology) -> Vec<ObjId> {
    let mut v = choose::gpus(t);
    let hcas = choose::hcas(t);
    v.extend(&hcas);
    for n in choose::nets(t) {
        let on_pci = matches!(t.obj(t.pci_of(n)).kind, ObjKind::PciDevice { .. });
        if on_pci && !hcas.iter().any(|&h| t.pci_of(h) == t.pci_of(n)) {
            v.push(n);
        }
    }
    v
}

fn pci(t: &Topology, d: ObjId) -> String {
    match t.obj(t.pci_of(d)).kind {
        ObjKind::PciDevice { addr, .. } => format!(
            "{:04x}:{:02x}:{:02x}.{}",
            addr.domain, addr.bus, addr.dev, addr.func
        ),
        _ => "-".into(),
    }
}

fn numa(t: &Topology, d: ObjId) -> Option<u32> {
    t.numa_of(d).and_then(|n| t.obj(n).os_index)
}

fn cpu_list(cpus: &[u32]) -> String {
    let v: Vec<usize> = cpus.iter().map(|&c| c as usize).collect();
    crate::spawn::cpu_list(&v)
}

fn bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < units.len() {
        x /= 1024.0;
        i += 1;
    }
    if x.fract() == 0.0 {
        format!("{x} {}", units[i])
    } else {
        format!("{x:.1} {}", units[i])
    }
}

fn speed(t: &Topology, d: ObjId) -> Option<u64> {
    match &t.obj(d).kind {
        ObjKind::OsDevice {
            kind: OsDevKind::Net { speed_mbps },
        } => *speed_mbps,
        _ => None,
    }
}

fn counts(t: &Topology) -> [(&'static str, usize); 4] {
    [
        ("packages", t.count(&ObjKind::Package)),
        (
            "numa_nodes",
            t.count(&ObjKind::NumaNode { memory_bytes: 0 }),
        ),
        ("cores", t.count(&ObjKind::Core)),
        ("pus", t.count(&ObjKind::Pu)),
    ]
}

fn numa_nodes(t: &Topology) -> Vec<ObjId> {
    t.of_kind(&ObjKind::NumaNode { memory_bytes: 0 }).collect()
}

/// The summary and the matrix as text, each line prefixed with `prefix`.
pub fn text(t: &Topology, prefix: &str) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        let _ = writeln!(out, "{prefix}{s}");
    };
    let host = if t.hostname.is_empty() {
        "(unnamed)"
    } else {
        &t.hostname
    };
    let c = counts(t);
    line(format!(
        "host {host}: {} packages, {} NUMA nodes, {} cores, {} PUs",
        c[0].1, c[1].1, c[2].1, c[3].1
    ));
    for n in numa_nodes(t) {
        let o = t.obj(n);
        let mem = match o.kind {
            ObjKind::NumaNode { memory_bytes } => memory_bytes,
            _ => 0,
        };
        line(format!(
            "  NUMA node {}: {} memory, cpus {}",
            o.os_index.map_or("?".into(), |i| i.to_string()),
            bytes(mem),
            cpu_list(&o.cpuset)
        ));
    }
    let mut caches: Vec<(u8, u64, usize)> = Vec::new();
    for k in &t.caches {
        match caches
            .iter_mut()
            .find(|(l, s, _)| *l == k.level && *s == k.size_bytes)
        {
            Some(e) => e.2 += 1,
            None => caches.push((k.level, k.size_bytes, 1)),
        }
    }
    if !caches.is_empty() {
        let list: Vec<String> = caches
            .iter()
            .map(|(l, s, n)| format!("L{l} {} ×{n}", bytes(*s)))
            .collect();
        line(format!("  caches: {}", list.join(", ")));
    }
    let describe = |d: ObjId| {
        let mut s = format!("{} ({}", t.obj(d).name, pci(t, d));
        if let Some(m) = speed(t, d) {
            let _ = write!(s, ", {} Gb/s", m as f64 / 1000.0);
        }
        if let Some(n) = numa(t, d) {
            let _ = write!(s, ", NUMA {n}");
        }
        s + ")"
    };
    for (what, list) in [
        ("GPUs", choose::gpus(t)),
        ("HCAs", choose::hcas(t)),
        ("NICs", choose::nets(t)),
    ] {
        let items: Vec<String> = list.into_iter().map(describe).collect();
        let items = if items.is_empty() {
            "none".to_string()
        } else {
            items.join(", ")
        };
        line(format!("  {what}: {items}"));
    }
    let devs = matrix_devices(t);
    if devs.is_empty() {
        return out;
    }
    let names: Vec<&str> = devs.iter().map(|&d| t.obj(d).name.as_str()).collect();
    let w = names.iter().map(|n| n.len()).max().unwrap_or(4).max(4) + 1;
    let mut head = format!("{:w$}", "");
    for n in &names {
        let _ = write!(head, "{n:<w$}");
    }
    line(format!("{head}{:<16}NUMA Affinity", "CPU Affinity"));
    for (i, &a) in devs.iter().enumerate() {
        let mut row = format!("{:<w$}", names[i]);
        for &b in &devs {
            let _ = write!(row, "{:<w$}", t.path_class(a, b).to_string());
        }
        let aff = cpu_list(&t.obj(a).cpuset);
        let node = numa(t, a).map_or("N/A".into(), |n| n.to_string());
        line(format!("{row}{aff:<16}{node}"));
    }
    line(String::new());
    line("Legend: X = self, NV# = # bonded NVLinks, PIX = one PCIe switch, PXB = several PCIe bridges, PHB = one PCIe host bridge, NODE = host bridges of one NUMA node, SYS = across NUMA nodes".into());
    out
}

/// The summary and the matrix as JSON.
pub fn json(t: &Topology) -> Value {
    let mut v = json!({ "host": t.hostname });
    for (k, n) in counts(t) {
        v[k] = json!(n);
    }
    v["numa"] = numa_nodes(t)
        .into_iter()
        .map(|n| {
            let o = t.obj(n);
            let mem = match o.kind {
                ObjKind::NumaNode { memory_bytes } => memory_bytes,
                _ => 0,
            };
            json!({ "os_index": o.os_index, "memory_bytes": mem, "cpus": o.cpuset })
        })
        .collect();
    v["caches"] = json!(t.caches);
    let dev = |d: ObjId| {
        json!({
            "name": t.obj(d).name,
            "pci": pci(t, d),
            "numa": numa(t, d),
            "speed_mbps": speed(t, d),
        })
    };
    v["gpus"] = choose::gpus(t).into_iter().map(dev).collect();
    v["hcas"] = choose::hcas(t).into_iter().map(dev).collect();
    v["nics"] = choose::nets(t).into_iter().map(dev).collect();
    let devs = matrix_devices(t);
    let classes: Vec<Vec<String>> = devs
        .iter()
        .map(|&a| {
            devs.iter()
                .map(|&b| t.path_class(a, b).to_string())
                .collect()
        })
        .collect();
    v["matrix"] = json!({
        "devices": devs.iter().map(|&d| t.obj(d).name.clone()).collect::<Vec<_>>(),
        "classes": classes,
        "cpu_affinity": devs.iter().map(|&d| cpu_list(&t.obj(d).cpuset)).collect::<Vec<_>>(),
        "numa_affinity": devs.iter().map(|&d| numa(t, d)).collect::<Vec<_>>(),
    });
    v
}

/// The class names, nearest first (for help texts).
pub fn legend() -> String {
    [
        PathClass::X,
        PathClass::Nv(4),
        PathClass::Pix,
        PathClass::Pxb,
        PathClass::Phb,
        PathClass::Node,
        PathClass::Sys,
    ]
    .iter()
    .map(ToString::to_string)
    .collect::<Vec<_>>()
    .join(" < ")
}

/// The GPUs the device backend sees (the CUDA driver, or the host stand-in under
/// `RCOMM_GPU_STANDIN=1`): the backend's name and its devices, or why there are none. Loads
/// the CUDA driver: only `rcomm-topo` calls it (never `rcomm-run`).
pub fn cuda_devices() -> Result<(&'static str, Vec<DeviceInfo>), String> {
    let why = |e: GpuError| match e {
        GpuError::NoDevice { why } => why,
        e => e.to_string(),
    };
    let g = gpu::gpu().map_err(why)?;
    let devs = g.devices().map_err(why)?;
    if devs.is_empty() {
        return Err(format!("the {} backend sees no device", g.backend_name()));
    }
    Ok((g.backend_name(), devs))
}

fn uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// [`cuda_devices`] as text: `  CUDA GPUs (BACKEND): N` and a line per device, or one line
/// `  CUDA GPUs: none usable (REASON)`.
pub fn cuda_text(r: &Result<(&'static str, Vec<DeviceInfo>), String>, prefix: &str) -> String {
    let mut out = String::new();
    match r {
        Err(why) => {
            let _ = writeln!(out, "{prefix}  CUDA GPUs: none usable ({why})");
        }
        Ok((backend, devs)) => {
            let _ = writeln!(out, "{prefix}  CUDA GPUs ({backend}): {}", devs.len());
            for d in devs {
                let _ = writeln!(
                    out,
                    "{prefix}    GPU {}: {} (PCI {}, {} memory, {} SMs, compute capability {}.{}, {})",
                    d.ordinal,
                    d.name,
                    d.pci_bus_id,
                    bytes(d.total_mem as u64),
                    d.sm_count,
                    d.cc.0,
                    d.cc.1,
                    uuid(&d.uuid)
                );
            }
        }
    }
    out
}

/// [`cuda_devices`] as JSON: `{"backend", "devices": [{"ordinal", "name", "pci_bus_id",
/// "uuid", "memory_bytes", "sm_count", "compute_capability"}], "error"}` (backend null and
/// error the reason when none is usable).
pub fn cuda_json(r: &Result<(&'static str, Vec<DeviceInfo>), String>) -> Value {
    match r {
        Err(why) => json!({ "backend": null, "devices": [], "error": why }),
        Ok((backend, devs)) => json!({
            "backend": backend,
            "devices": devs
                .iter()
                .map(|d| json!({
                    "ordinal": d.ordinal,
                    "name": d.name,
                    "pci_bus_id": d.pci_bus_id,
                    "uuid": uuid(&d.uuid),
                    "memory_bytes": d.total_mem,
                    "sm_count": d.sm_count,
                    "compute_capability": format!("{}.{}", d.cc.0, d.cc.1),
                }))
                .collect::<Vec<_>>(),
            "error": null,
        }),
    }
}

#[cfg(test)]
mod cuda_tests {
    use super::*;

    #[test]
    fn cuda_lines_and_json() {
        let none: Result<(&'static str, Vec<DeviceInfo>), String> = Err("no libcuda".into());
        assert_eq!(
            cuda_text(&none, "h: "),
            "h:   CUDA GPUs: none usable (no libcuda)\n"
        );
        assert_eq!(cuda_json(&none)["error"], "no libcuda");
        let d = DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            uuid: [0xab; 16],
            pci_bus_id: "0000:3b:00.0".into(),
            total_mem: 141 << 30,
            sm_count: 132,
            cc: (9, 0),
        };
        let some = Ok(("cuda", vec![d]));
        let t = cuda_text(&some, "");
        assert!(t.starts_with("  CUDA GPUs (cuda): 1\n"), "{t}");
        assert!(
            t.contains("GPU 0: NVIDIA H200 (PCI 0000:3b:00.0, 141 GiB memory, 132 SMs, compute capability 9.0, GPU-abababab-abab-"),
            "{t}"
        );
        let j = cuda_json(&some);
        assert_eq!(j["devices"][0]["compute_capability"], "9.0");
        assert_eq!(j["devices"][0]["sm_count"], 132);
        assert!(j["error"].is_null());
    }
}
