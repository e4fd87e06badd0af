//! The topology from the system's libhwloc (feature `hwloc`, through the hwlocality bindings):
//! this machine, or an XML export.
//!
//! hwloc's tree is reshaped into the model's: NUMA nodes are memory children in hwloc and tree
//! levels here; caches are tree levels in hwloc and a list here; Die and Group levels are
//! dropped (the model has no place for them, and rcomm decides nothing from them). The CPU side
//! goes through the same builder as the sysfs reader's.
//!
//! I/O: hwloc's important devices (its default I/O filter); a host bridge goes under the one
//! NUMA node its locality covers, else under the machine. GPUs: one GPU device per NVIDIA
//! display function, named after hwloc's CUDA device (`cuda0`) where hwloc has one, else
//! `gpuN` by PCI order as the sysfs reader does; hwloc's other GPU names (NVML, OpenCL, DRM)
//! are not repeated. hwloc reports a PCIe link only as bandwidth, which does not tell rate and
//! width apart, so links are left unknown. Network speeds are not in hwloc either.

use super::TopoError;
use super::build::{CoreSpec, Nodes, cpu_side};
use super::model::{Cache, ObjId, ObjKind, OsDevKind, PciAddr, Source, Topology};
use hwlocality::object::TopologyObject;
use hwlocality::object::attributes::{ObjectAttributes, UpstreamAttributes};
use hwlocality::object::types::{BridgeType, CacheType, OSDeviceType, ObjectType};
use hwlocality::topology::builder::TypeFilter;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// This machine, with its important I/O devices.
pub fn detect() -> Result<Topology, TopoError> {
    let b = hwlocality::Topology::builder()
        .with_io_type_filter(TypeFilter::KeepImportant)
        .map_err(err)?;
    convert(&b.build().map_err(err)?, Source::Hwloc { xml: None })
}

/// An XML export (`lstopo --of xml`), with the I/O devices it holds.
pub fn load_xml(path: &Path) -> Result<Topology, TopoError> {
    // Read here, not by hwloc: hwlocality's `from_xml_file` panics when the file is missing
    // (it takes hwloc's ENOENT for impossible), and this bounds what is read.
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(super::MAX_JSON as u64).read_to_string(&mut text))
        .map_err(|source| TopoError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    let b = hwlocality::Topology::builder()
        .from_xml(&text)
        .map_err(|e| TopoError::Hwloc(format!("{}: {e}", path.display())))?
        .with_io_type_filter(TypeFilter::KeepAll)
        .map_err(err)?;
    let xml = Some(path.display().to_string());
    convert(&b.build().map_err(err)?, Source::Hwloc { xml })
}

fn err(e: impl std::fmt::Display) -> TopoError {
    TopoError::Hwloc(e.to_string())
}

/// An object's PUs as Linux CPU numbers (hwloc's sets hold OS indices).
fn cpus(o: &TopologyObject) -> Vec<u32> {
    o.cpuset().map_or_else(Vec::new, |s| numbers(s.iter_set()))
}

/// The NUMA nodes an object is local to, by number.
fn node_set(o: &TopologyObject) -> Vec<u32> {
    o.nodeset().map_or_else(Vec::new, |s| numbers(s.iter_set()))
}

fn numbers(it: impl Iterator<Item = hwlocality::bitmap::BitmapIndex>) -> Vec<u32> {
    it.filter_map(|i| u32::try_from(usize::from(i)).ok())
        .collect()
}

fn os_index(o: &TopologyObject) -> Option<u32> {
    o.os_index().and_then(|i| u32::try_from(i).ok())
}

fn convert(h: &hwlocality::Topology, source: Source) -> Result<Topology, TopoError> {
    let root = h.root_object();
    let hostname = root
        .info("HostName")
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut t = Topology::new(source, hostname);
    let mut nodes = Nodes::new();
    for n in h.objects_with_type(ObjectType::NUMANode) {
        let mem = match n.attributes() {
            Some(ObjectAttributes::NUMANode(a)) => a.local_memory().map_or(0, |m| m.get()),
            _ => 0,
        };
        let id = os_index(n).ok_or_else(|| err("a NUMA node without a number"))?;
        nodes.insert(id, (cpus(n), mem));
    }
    let mut cores = Vec::new();
    for c in h.objects_with_type(ObjectType::Core) {
        let package = c
            .first_ancestor_with_type(ObjectType::Package)
            .and_then(os_index)
            .unwrap_or(0);
        let pus = cpus(c);
        let os_index = os_index(c).unwrap_or(pus.first().copied().unwrap_or(0));
        cores.push(CoreSpec {
            package,
            os_index,
            pus,
        });
    }
    let node_ids = cpu_side(&mut t, cores, &nodes);
    t.caches = caches(h);
    let mut gpus = Vec::new();
    for hb in h.objects_with_type(ObjectType::Bridge) {
        let host = matches!(hb.attributes(), Some(ObjectAttributes::Bridge(b)) if b.upstream_type() == BridgeType::Host);
        if !host {
            continue;
        }
        let local = hb.first_non_io_ancestor().map(node_set).unwrap_or_default();
        let parent = match local.as_slice() {
            [n] => node_ids.get(n).copied().unwrap_or(Topology::MACHINE),
            _ => Topology::MACHINE,
        };
        let id = t.add(parent, ObjKind::HostBridge, None, "");
        for c in hb.io_children() {
            io(&mut t, id, c, &mut gpus);
        }
    }
    gpus.sort_by_key(|g: &(PciAddr, ObjId, Option<String>)| g.0);
    for (i, (_, id, cuda)) in gpus.into_iter().enumerate() {
        let name = cuda.unwrap_or_else(|| format!("gpu{i}"));
        t.add(
            id,
            ObjKind::OsDevice {
                kind: OsDevKind::Gpu,
            },
            None,
            name,
        );
    }
    t.fill_cpusets();
    t.validate().map_err(TopoError::Invalid)?;
    Ok(t)
}

/// Data and unified caches, one per (level, PUs) as the sysfs reader lists them.
fn caches(h: &hwlocality::Topology) -> Vec<Cache> {
    let mut seen = BTreeMap::new();
    for o in h.objects() {
        let Some(ObjectAttributes::Cache(c)) = o.attributes() else {
            continue;
        };
        if !o.object_type().is_cpu_data_cache() || c.cache_type() == CacheType::Instruction {
            continue;
        }
        let Ok(level) = u8::try_from(c.depth()) else {
            continue;
        };
        let set = cpus(o);
        seen.entry((level, set))
            .or_insert(c.size().map_or(0, |s| s.get()));
    }
    seen.into_iter()
        .map(|((level, cpuset), size_bytes)| Cache {
            level,
            size_bytes,
            cpuset,
        })
        .collect()
}

/// Adds hwloc's I/O object `o` (and what is below it) under `parent`; NVIDIA display
/// functions are noted in `gpus` with the CUDA name hwloc gives them, if any.
fn io(
    t: &mut Topology,
    parent: ObjId,
    o: &TopologyObject,
    gpus: &mut Vec<(PciAddr, ObjId, Option<String>)>,
) {
    let addr = |p: &hwlocality::object::attributes::PCIDeviceAttributes| PciAddr {
        domain: p.domain(),
        bus: p.bus_id(),
        dev: p.bus_device(),
        func: p.function(),
    };
    let name = || {
        o.name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let id = match o.attributes() {
        Some(ObjectAttributes::Bridge(b)) => {
            let Some(UpstreamAttributes::PCI(p)) = b.upstream_attributes() else {
                return;
            };
            t.add(parent, ObjKind::PciBridge { addr: addr(p) }, None, "")
        }
        Some(ObjectAttributes::PCIDevice(p)) => {
            let kind = ObjKind::PciDevice {
                addr: addr(p),
                class: p.class_id(),
                vendor: p.vendor_id(),
                device: p.device_id(),
                link: None,
            };
            let id = t.add(parent, kind, None, "");
            if p.vendor_id() == 0x10de && p.class_id() >> 8 == 0x03 {
                let cuda = o.io_children().find_map(|c| {
                    let sub = c.subtype()?.to_str().ok()?;
                    let coproc = matches!(c.attributes(), Some(ObjectAttributes::OSDevice(d)) if d.device_type() == OSDeviceType::CoProcessor);
                    (coproc && sub == "CUDA").then(|| c.name().map(|n| n.to_string_lossy().into_owned())).flatten()
                });
                gpus.push((addr(p), id, cuda));
            }
            id
        }
        Some(ObjectAttributes::OSDevice(d)) => {
            // OS devices off the PCI tree (block devices, DMA engines) are not placed.
            if !matches!(t.obj(parent).kind, ObjKind::PciDevice { .. }) {
                return;
            }
            let kind = match d.device_type() {
                OSDeviceType::Network => OsDevKind::Net { speed_mbps: None },
                OSDeviceType::OpenFabrics => OsDevKind::Ib,
                // GPUs get one device each, made by the caller.
                OSDeviceType::GPU | OSDeviceType::CoProcessor => return,
                _ => OsDevKind::Other,
            };
            t.add(parent, ObjKind::OsDevice { kind }, None, name())
        }
        _ => return,
    };
    for c in o.io_children() {
        io(t, id, c, gpus);
    }
}
