//! How far apart two I/O devices are, in the words of `nvidia-smi topo -m` (and NCCL):
//!
//! | class | meaning |
//! |-------|---------|
//! | `X`   | the same device (a PCI function and its OS devices, e.g. `mlx5_0` and `ib0`) |
//! | `NV#` | joined by a direct link (NVLink) of `#` bonded lanes |
//! | `PIX` | their lowest common ancestor is a PCI bridge that each reaches through at most one further bridge: two devices behind one PCIe switch |
//! | `PXB` | their lowest common ancestor is a PCI bridge, otherwise (cascaded switches) |
//! | `PHB` | the same PCI host bridge (traffic crosses the root complex) |
//! | `NODE`| different host bridges in one NUMA node |
//! | `SYS` | different NUMA nodes (crosses the inter-socket link), or locality unknown |
//!
//! Rules, precisely: an OS device stands for its PCI function. When counting bridges on the way
//! up to the common ancestor, a PCIe switch counts once: sysfs and hwloc show a switch as an
//! upstream port with one bridge per downstream port, and a downstream port directly under its
//! upstream port (both on the path) is one hop, as NCCL flattens it. Root ports are bridges
//! directly under a host bridge; below them, bridges alternate between upstream (even depth)
//! and downstream (odd depth) ports.
//!
//! Classes are ordered nearer first: `X < NV# < PIX < PXB < PHB < NODE < SYS`, and among NVLink
//! classes more lanes are nearer.
//!
//! Towards the CPU side there is no tree path to classify: a device is `PHB` from its own NUMA
//! node (its host bridge hangs there) and `SYS` from any other or from CPUs outside its node.

use super::model::{ObjId, ObjKind, Topology};
use std::cmp::Ordering;
use std::fmt;

/// Distance class between two devices (see the module notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathClass {
    /// The same device.
    X,
    /// A direct link with this many lanes.
    Nv(u8),
    /// Behind one PCIe switch.
    Pix,
    /// Behind cascaded PCIe bridges.
    Pxb,
    /// Under one host bridge.
    Phb,
    /// Different host bridges, one NUMA node.
    Node,
    /// Different NUMA nodes, or unknown.
    Sys,
}

impl PathClass {
    fn rank(self) -> (u8, std::cmp::Reverse<u8>) {
        let (i, lanes) = match self {
            PathClass::X => (0, 0),
            PathClass::Nv(n) => (1, n),
            PathClass::Pix => (2, 0),
            PathClass::Pxb => (3, 0),
            PathClass::Phb => (4, 0),
            PathClass::Node => (5, 0),
            PathClass::Sys => (6, 0),
        };
        (i, std::cmp::Reverse(lanes))
    }
}

impl Ord for PathClass {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl PartialOrd for PathClass {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for PathClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathClass::X => f.write_str("X"),
            PathClass::Nv(n) => write!(f, "NV{n}"),
            PathClass::Pix => f.write_str("PIX"),
            PathClass::Pxb => f.write_str("PXB"),
            PathClass::Phb => f.write_str("PHB"),
            PathClass::Node => f.write_str("NODE"),
            PathClass::Sys => f.write_str("SYS"),
        }
    }
}

impl Topology {
    /// The PCI function an object stands for: an OS device's parent function, else itself.
    pub fn pci_of(&self, id: ObjId) -> ObjId {
        match (&self.obj(id).kind, self.obj(id).parent) {
            (ObjKind::OsDevice { .. }, Some(p))
                if matches!(self.obj(p).kind, ObjKind::PciDevice { .. }) =>
            {
                p
            }
            _ => id,
        }
    }

    /// PCI bridges above `id` up to and including the root port (nearest first).
    fn bridge_depth(&self, id: ObjId) -> usize {
        self.ancestors(id)
            .into_iter()
            .filter(|&a| matches!(self.obj(a).kind, ObjKind::PciBridge { .. }))
            .count()
    }

    /// Hops from `from` up to (not including) `lca`, a switch counting once.
    fn bridge_hops(&self, from: ObjId, lca: ObjId) -> usize {
        let path: Vec<ObjId> = self
            .ancestors(from)
            .into_iter()
            .skip(1)
            .take_while(|&a| a != lca)
            .filter(|&a| matches!(self.obj(a).kind, ObjKind::PciBridge { .. }))
            .collect();
        let merged = path
            .iter()
            .filter(|&&b| {
                let d = self.bridge_depth(b);
                d >= 3 && d % 2 == 1 && self.obj(b).parent.is_some_and(|p| path.contains(&p))
            })
            .count();
        path.len() - merged
    }

    /// The link class between two objects (or their PCI functions), if a link joins them.
    fn link_class(&self, a: ObjId, b: ObjId) -> Option<PathClass> {
        let ends_a = [a, self.pci_of(a)];
        let ends_b = [b, self.pci_of(b)];
        self.links
            .iter()
            .filter(|l| {
                (ends_a.contains(&l.a) && ends_b.contains(&l.b))
                    || (ends_a.contains(&l.b) && ends_b.contains(&l.a))
            })
            .map(|l| match l.kind {
                super::model::LinkKind::NvLink { lanes } => PathClass::Nv(lanes),
            })
            .min()
    }

    /// The class of the path between two I/O objects (see the module notes).
    pub fn path_class(&self, a: ObjId, b: ObjId) -> PathClass {
        let (pa, pb) = (self.pci_of(a), self.pci_of(b));
        if pa == pb {
            return PathClass::X;
        }
        if let Some(c) = self.link_class(a, b) {
            return c;
        }
        let up_b = self.ancestors(pb);
        let Some(lca) = self.ancestors(pa).into_iter().find(|x| up_b.contains(x)) else {
            return PathClass::Sys;
        };
        match self.obj(lca).kind {
            ObjKind::PciBridge { .. } => {
                if self.bridge_hops(pa, lca) <= 1 && self.bridge_hops(pb, lca) <= 1 {
                    PathClass::Pix
                } else {
                    PathClass::Pxb
                }
            }
            ObjKind::HostBridge => PathClass::Phb,
            _ => match (self.numa_of(pa), self.numa_of(pb)) {
                (Some(x), Some(y)) if x == y => PathClass::Node,
                _ => PathClass::Sys,
            },
        }
    }

    /// The class between an I/O object and NUMA node `numa`: `PHB` when the object is local to
    /// it, else `SYS`.
    pub fn numa_class(&self, io: ObjId, numa: ObjId) -> PathClass {
        if self.numa_of(io) == Some(numa) {
            PathClass::Phb
        } else {
            PathClass::Sys
        }
    }

    /// The class between an I/O object and a set of CPUs: `PHB` when every CPU is in the
    /// object's NUMA node, else `SYS` (also for an empty set or unknown locality).
    pub fn cpus_class(&self, io: ObjId, cpus: &[u32]) -> PathClass {
        match self.numa_of(io) {
            Some(n) if !cpus.is_empty() && cpus.iter().all(|c| self.obj(n).cpuset.contains(c)) => {
                PathClass::Phb
            }
            _ => PathClass::Sys,
        }
    }

    /// The NUMA nodes whose CPUs intersect `cpus` (in arena order).
    pub fn numa_nodes_touching(&self, cpus: &[u32]) -> Vec<ObjId> {
        self.filter(|k| matches!(k, ObjKind::NumaNode { .. }))
            .filter(|&n| self.obj(n).cpuset.iter().any(|c| cpus.contains(c)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{dgx, named, server2s};
    use super::*;

    #[test]
    fn dgx_path_classes() {
        let t = dgx();
        let n = |s: &str| named(&t, s).unwrap();
        assert_eq!(t.path_class(n("gpu0"), n("gpu0")), PathClass::X);
        assert_eq!(t.path_class(n("mlx5_0"), n("ib0")), PathClass::X);
        assert_eq!(t.path_class(n("gpu0"), n("gpu1")), PathClass::Nv(4));
        assert_eq!(t.path_class(n("gpu1"), n("mlx5_0")), PathClass::Pix);
        assert_eq!(t.path_class(n("gpu0"), n("ib0")), PathClass::Pix);
        assert_eq!(t.path_class(n("gpu0"), n("gpu2")), PathClass::Phb);
        assert_eq!(t.path_class(n("gpu0"), n("eth0")), PathClass::Phb);
        assert_eq!(t.path_class(n("gpu0"), n("gpu4")), PathClass::Sys);
        assert_eq!(t.path_class(n("mlx5_0"), n("mlx5_3")), PathClass::Sys);
        let node0 = t.numa_of(n("gpu0")).unwrap();
        assert_eq!(t.numa_class(n("mlx5_1"), node0), PathClass::Phb);
        assert_eq!(t.numa_class(n("mlx5_2"), node0), PathClass::Sys);
        assert_eq!(t.cpus_class(n("gpu5"), &[8, 24]), PathClass::Phb);
        assert_eq!(t.cpus_class(n("gpu5"), &[0, 8]), PathClass::Sys);
        assert_eq!(t.numa_nodes_touching(&[0, 8]).len(), 2);
    }

    #[test]
    fn without_nvlink_switch_peers_are_pix_and_cascades_pxb() {
        let mut t = dgx();
        t.links.clear();
        let gpu = |t: &Topology, s: &str| named(t, s).unwrap();
        assert_eq!(
            t.path_class(gpu(&t, "gpu0"), gpu(&t, "gpu1")),
            PathClass::Pix
        );
        // A second switch below switch 0's GPU 0 port: device → down → up → (switch 0's down
        // port) → switch 0's up port, where gpu1 sits one hop away.
        let down0 = t.obj(t.pci_of(gpu(&t, "gpu0"))).parent.unwrap();
        let addr = super::super::model::PciAddr {
            domain: 0,
            bus: 0x90,
            dev: 0,
            func: 0,
        };
        let up = t.add(down0, ObjKind::PciBridge { addr }, None, "");
        let down = t.add(up, ObjKind::PciBridge { addr }, None, "");
        let f = t.add(
            down,
            ObjKind::PciDevice {
                addr,
                class: 0x0302,
                vendor: 0x10de,
                device: 1,
                link: None,
            },
            None,
            "",
        );
        assert_eq!(t.path_class(f, gpu(&t, "gpu0")), PathClass::Pix);
        assert_eq!(t.path_class(f, gpu(&t, "gpu1")), PathClass::Pxb);
        t.validate().unwrap();
    }

    #[test]
    fn order_and_words() {
        let mut v = [
            PathClass::Sys,
            PathClass::Pix,
            PathClass::Nv(2),
            PathClass::X,
            PathClass::Node,
            PathClass::Nv(12),
            PathClass::Phb,
            PathClass::Pxb,
        ];
        v.sort();
        let words: Vec<String> = v.iter().map(ToString::to_string).collect();
        assert_eq!(
            words,
            ["X", "NV12", "NV2", "PIX", "PXB", "PHB", "NODE", "SYS"]
        );
        let t = server2s();
        let eth = named(&t, "eth0").unwrap();
        assert_eq!(t.path_class(eth, eth), PathClass::X);
    }
}
