//! The I/O side from sysfs: the PCI tree and the OS devices on it.
//!
//! Each `sys/bus/pci/devices/*` link resolves to `sys/devices/…/pciDDDD:BB/<function>/…`: the
//! `pciDDDD:BB` directory is the host bridge and the functions on the way are bridges, so the
//! tree is read from the path, never from bus numbers.
//!
//! Which devices are kept, like hwloc's default I/O filter but narrower: network controllers
//! (class 0x02xx), display controllers (0x03xx), anything NVIDIA makes (vendor 0x10de) and
//! NVMe (0x0108), with the bridges and host bridges leading to them; the rest (USB, SATA, audio,
//! bridges to nothing kept) is dropped. hwloc also keeps other storage and processing
//! accelerators; nothing in rcomm places ranks by those.
//!
//! OS devices: every `sys/class/net/*` and `sys/class/infiniband/*` whose `device` link is a
//! kept function, and a GPU on each NVIDIA display function, named `gpuN` by PCI address order
//! (nvidia-smi's order, and CUDA's under `CUDA_DEVICE_ORDER=PCI_BUS_ID`). hwloc without CUDA
//! or NVML names GPUs after their DRM devices, which servers often lack; the PCI order is what
//! is always there.

use super::Reader;
use crate::topo::TopoError;
use crate::topo::model::{ObjId, ObjKind, OsDevKind, PciAddr, PcieLink, Topology};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const NVIDIA: u16 = 0x10de;
const BRIDGE_CLASS: u16 = 0x0604;

/// Parses `DDDD:BB:DD.F`.
pub fn parse_addr(s: &str) -> Option<PciAddr> {
    let (dom, rest) = s.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let ok = dom.len() == 4 && bus.len() == 2 && dev.len() == 2 && func.len() == 1;
    let a = PciAddr {
        domain: u16::from_str_radix(dom, 16).ok()?,
        bus: u8::from_str_radix(bus, 16).ok()?,
        dev: u8::from_str_radix(dev, 16).ok()?,
        func: u8::from_str_radix(func, 16).ok()?,
    };
    (ok && a.dev < 32 && a.func < 8).then_some(a)
}

/// What sysfs says about one function.
struct Func {
    /// The host bridge's directory name (`pci0000:00`).
    host: String,
    /// The bridge above it, if any.
    parent: Option<PciAddr>,
    class: u16,
    vendor: u16,
    device: u16,
    numa: Option<u32>,
    link: Option<PcieLink>,
}

impl Func {
    fn interesting(&self) -> bool {
        let base = self.class >> 8;
        self.class != BRIDGE_CLASS
            && (base == 0x02 || base == 0x03 || self.vendor == NVIDIA || self.class == 0x0108)
    }
}

pub(super) fn read(
    r: &Reader,
    t: &mut Topology,
    nodes: &BTreeMap<u32, ObjId>,
) -> Result<(), TopoError> {
    let funcs = read_funcs(r)?;
    let mut keep = BTreeSet::new();
    for (a, f) in &funcs {
        if f.interesting() {
            let mut cur = Some(*a);
            while let Some(c) = cur {
                if !keep.insert(c) {
                    break;
                }
                cur = funcs.get(&c).and_then(|f| f.parent);
            }
        }
    }
    let has_children: BTreeSet<PciAddr> = funcs.values().filter_map(|f| f.parent).collect();
    let mut hosts: BTreeMap<&str, Vec<PciAddr>> = BTreeMap::new();
    for a in &keep {
        hosts.entry(funcs[a].host.as_str()).or_default().push(*a);
    }
    let mut ids = BTreeMap::new();
    for members in hosts.values() {
        // A host bridge goes where its devices say they are local; unknown (-1) → the machine.
        let parent = members
            .iter()
            .find_map(|a| funcs[a].numa.and_then(|n| nodes.get(&n)))
            .copied()
            .unwrap_or(Topology::MACHINE);
        let hb = t.add(parent, ObjKind::HostBridge, None, "");
        // `keep` is sorted by address and a bridge's children have higher bus numbers than
        // the bridge, so parents are added before their children.
        for a in members {
            let f = &funcs[a];
            let up = f.parent.map_or(hb, |p| ids[&p]);
            let kind = if f.class == BRIDGE_CLASS || has_children.contains(a) {
                ObjKind::PciBridge { addr: *a }
            } else {
                ObjKind::PciDevice {
                    addr: *a,
                    class: f.class,
                    vendor: f.vendor,
                    device: f.device,
                    link: f.link,
                }
            };
            ids.insert(*a, t.add(up, kind, None, ""));
        }
    }
    let mut gpus = 0;
    for (a, id) in &ids {
        let f = &funcs[a];
        if f.vendor == NVIDIA && f.class >> 8 == 0x03 && !has_children.contains(a) {
            let kind = ObjKind::OsDevice {
                kind: OsDevKind::Gpu,
            };
            t.add(*id, kind, None, format!("gpu{gpus}"));
            gpus += 1;
        }
    }
    for (class, kind) in [
        ("infiniband", OsDevKind::Ib),
        ("net", OsDevKind::Net { speed_mbps: None }),
    ] {
        for name in r.names(format!("sys/class/{class}"))? {
            let dev = r.resolve(format!("sys/class/{class}/{name}/device"))?;
            let Some(a) = file_name(&dev).and_then(parse_addr) else {
                continue;
            };
            let Some(&id) = ids.get(&a) else { continue };
            if !matches!(t.obj(id).kind, ObjKind::PciDevice { .. }) {
                continue;
            }
            let kind = match kind {
                OsDevKind::Net { .. } => OsDevKind::Net {
                    speed_mbps: net_speed(r, &format!("sys/class/net/{name}"))?,
                },
                ref k => k.clone(),
            };
            t.add(id, ObjKind::OsDevice { kind }, None, name);
        }
    }
    Ok(())
}

fn file_name(p: &Path) -> Option<&str> {
    p.file_name()?.to_str()
}

/// Every PCI function under `sys/bus/pci/devices`, by address. Functions whose path does not
/// lead through a `pciDDDD:BB` host bridge directory (none on real machines) are left out.
fn read_funcs(r: &Reader) -> Result<BTreeMap<PciAddr, Func>, TopoError> {
    let mut out = BTreeMap::new();
    for name in r.names("sys/bus/pci/devices")? {
        let Some(addr) = parse_addr(&name) else {
            continue;
        };
        let dir = r.resolve(format!("sys/bus/pci/devices/{name}"))?;
        let comps: Vec<&str> = dir.iter().filter_map(|c| c.to_str()).collect();
        // From the end: the function, the bridges above it, then the host bridge.
        let mut chain = Vec::new();
        let mut host = None;
        for c in comps.iter().rev() {
            match parse_addr(c) {
                Some(a) => chain.push(a),
                None => {
                    host = c.strip_prefix("pci").map(|_| c.to_string());
                    break;
                }
            }
        }
        let (Some(host), Some(&last)) = (host, chain.first()) else {
            continue;
        };
        if last != addr {
            continue;
        }
        let class = r.hex(dir.join("class"))?;
        let vendor = r.hex(dir.join("vendor"))?;
        let device = r.hex(dir.join("device"))?;
        let numa = r.int(dir.join("numa_node"))?;
        out.insert(
            addr,
            Func {
                link: link(r, &dir)?,
                host,
                parent: chain.get(1).copied(),
                class: (class >> 8) as u16,
                vendor: vendor as u16,
                device: device as u16,
                numa: numa.and_then(|n| u32::try_from(n).ok()),
            },
        );
    }
    Ok(out)
}

/// `current_link_speed` (`16.0 GT/s PCIe`; older kernels `8 GT/s`) and `current_link_width`.
/// Missing, `Unknown` or width 0: no link known.
fn link(r: &Reader, dir: &Path) -> Result<Option<PcieLink>, TopoError> {
    let (sf, wf) = (
        dir.join("current_link_speed"),
        dir.join("current_link_width"),
    );
    let (Some(speed), Some(width)) = (r.read(&sf)?, r.read(&wf)?) else {
        return Ok(None);
    };
    if speed.trim().starts_with("Unknown") {
        return Ok(None);
    }
    let gts = speed
        .split_whitespace()
        .next()
        .and_then(|g| g.parse::<f32>().ok())
        .filter(|g| g.is_finite() && *g > 0.0 && speed.contains("GT/s"))
        .ok_or_else(|| r.bad(&sf, "a rate like `16.0 GT/s PCIe`", &speed))?;
    let width: u8 = width
        .trim()
        .parse()
        .map_err(|_| r.bad(&wf, "a lane count", &width))?;
    Ok((width > 0).then_some(PcieLink { gts, width }))
}

/// A network interface's `speed` in Mbit/s. The kernel answers EINVAL, or -1, when the link is
/// down or the driver does not know: both are `None`.
fn net_speed(r: &Reader, class_dir: &str) -> Result<Option<u64>, TopoError> {
    let rel = format!("{class_dir}/speed");
    match r.int(&rel) {
        Ok(v) => Ok(v.and_then(|s| u64::try_from(s).ok()).filter(|&s| s > 0)),
        Err(TopoError::Io { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}
