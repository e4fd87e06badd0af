//! Which link joins two GPUs of this node, named by PCI address (what every rank can say about
//! its GPU, whatever `CUDA_VISIBLE_DEVICES` hides from the others), and whether
//! `RCOMM_P2P_LEVEL` lets them copy directly.
//!
//! The PCI part comes from the machine's topology (`path`); NVLink comes from the driver's
//! management library (NVML), which reports per GPU the far end of each active link: another
//! GPU's PCI address, or an NVSwitch. Two GPUs are `NV#` with `#` their direct links, or, when
//! both reach NVSwitches, the fewer of their switch links (every GPU on the switches reaches
//! every other over all of its links, as on a DGX/HGX board).

use super::model::{Link, LinkKind, ObjId, ObjKind, PciAddr, Topology};
use super::path::PathClass;
use crate::config::P2pLevel;

/// One active NVLink of a GPU, as the driver reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvLinkEnd {
    /// Straight to this GPU.
    Gpu(PciAddr),
    /// To an NVSwitch.
    Switch,
}

impl Topology {
    /// The PCI function at `addr`.
    pub fn pci_function(&self, addr: PciAddr) -> Option<ObjId> {
        self.ids()
            .find(|&i| matches!(self.obj(i).kind, ObjKind::PciDevice { addr: a, .. } if a == addr))
    }

    /// Records the NVLinks the driver reports (`ends`: per GPU, its active links) as links
    /// between the GPUs' PCI functions, replacing NVLinks recorded before between the same
    /// two. GPUs not in the topology are left out.
    pub fn add_nvlinks(&mut self, ends: &[(PciAddr, Vec<NvLinkEnd>)]) {
        for (i, (a, la)) in ends.iter().enumerate() {
            for (b, lb) in &ends[i + 1..] {
                let direct = la.iter().filter(|e| **e == NvLinkEnd::Gpu(*b)).count();
                let back = lb.iter().filter(|e| **e == NvLinkEnd::Gpu(*a)).count();
                let switch =
                    |l: &[NvLinkEnd]| l.iter().filter(|e| **e == NvLinkEnd::Switch).count();
                let lanes = direct.max(back) + switch(la).min(switch(lb));
                let (Some(fa), Some(fb)) = (self.pci_function(*a), self.pci_function(*b)) else {
                    continue;
                };
                self.links.retain(|l| {
                    !(matches!(l.kind, LinkKind::NvLink { .. })
                        && ((l.a == fa && l.b == fb) || (l.a == fb && l.b == fa)))
                });
                if lanes > 0 {
                    self.links.push(Link {
                        a: fa,
                        b: fb,
                        kind: LinkKind::NvLink {
                            lanes: lanes.min(u8::MAX as usize) as u8,
                        },
                        bandwidth_gbs: None,
                    });
                }
            }
        }
    }

    /// The class of the path between the GPUs at PCI addresses `a` and `b`: `X` when they
    /// are one; `SYS` (the farthest) when either is not in the topology.
    pub fn gpu_class(&self, a: PciAddr, b: PciAddr) -> PathClass {
        if a == b {
            return PathClass::X;
        }
        match (self.pci_function(a), self.pci_function(b)) {
            (Some(fa), Some(fb)) => self.path_class(fa, fb),
            _ => PathClass::Sys,
        }
    }
}

/// The least `RCOMM_P2P_LEVEL` under which two GPUs `class` apart copy directly (NCCL's
/// `NCCL_P2P_LEVEL` words: `LOC` the same GPU, `NVL` NVLink, `PIX`, `PXB`, `PHB`, `SYS`; a
/// `NODE` path needs `SYS`, as rcomm's levels have no word between).
pub fn required_level(class: PathClass) -> P2pLevel {
    match class {
        PathClass::X => P2pLevel::Loc,
        PathClass::Nv(_) => P2pLevel::Nvl,
        PathClass::Pix => P2pLevel::Pix,
        PathClass::Pxb => P2pLevel::Pxb,
        PathClass::Phb => P2pLevel::Phb,
        PathClass::Node | PathClass::Sys => P2pLevel::Sys,
    }
}

/// Whether `level` lets two GPUs `class` apart copy directly.
pub fn p2p_allows(level: P2pLevel, class: PathClass) -> bool {
    level >= required_level(class)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{dgx, named, server2s};
    use super::*;

    fn addr_of(t: &Topology, name: &str) -> PciAddr {
        let id = t.pci_of(named(t, name).unwrap());
        match t.obj(id).kind {
            ObjKind::PciDevice { addr, .. } => addr,
            ref k => panic!("{name} is {k:?}"),
        }
    }

    #[test]
    fn pci_classes_by_address_and_unknown_gpus_are_farthest() {
        let mut t = dgx();
        t.links.clear();
        let (g0, g1, g2, g4) = (
            addr_of(&t, "gpu0"),
            addr_of(&t, "gpu1"),
            addr_of(&t, "gpu2"),
            addr_of(&t, "gpu4"),
        );
        assert_eq!(t.gpu_class(g0, g0), PathClass::X);
        assert_eq!(t.gpu_class(g0, g1), PathClass::Pix);
        assert_eq!(t.gpu_class(g0, g2), PathClass::Phb);
        assert_eq!(t.gpu_class(g0, g4), PathClass::Sys);
        let nowhere = PciAddr {
            domain: 7,
            bus: 0xee,
            dev: 1,
            func: 0,
        };
        assert_eq!(t.gpu_class(g0, nowhere), PathClass::Sys);
        assert_eq!(t.gpu_class(nowhere, nowhere), PathClass::X);
    }

    #[test]
    fn nvlinks_from_the_driver_direct_and_through_switches() {
        let mut t = dgx();
        t.links.clear();
        let g: Vec<PciAddr> = (0..8).map(|i| addr_of(&t, &format!("gpu{i}"))).collect();
        // gpu0–gpu1 by 2 direct links (reported from one end only), gpu2..gpu7 on switches
        // (gpu5 with fewer switch links), gpu0 also 1 switch link.
        let mut ends: Vec<(PciAddr, Vec<NvLinkEnd>)> = g.iter().map(|&a| (a, vec![])).collect();
        ends[0].1 = vec![
            NvLinkEnd::Gpu(g[1]),
            NvLinkEnd::Gpu(g[1]),
            NvLinkEnd::Switch,
        ];
        for (i, e) in ends.iter_mut().enumerate().skip(2) {
            e.1 = vec![NvLinkEnd::Switch; if i == 5 { 6 } else { 18 }];
        }
        t.add_nvlinks(&ends);
        assert_eq!(t.gpu_class(g[0], g[1]), PathClass::Nv(2));
        assert_eq!(t.gpu_class(g[2], g[3]), PathClass::Nv(18));
        assert_eq!(t.gpu_class(g[2], g[5]), PathClass::Nv(6));
        assert_eq!(t.gpu_class(g[0], g[6]), PathClass::Nv(1));
        // gpu1 has no switch link: to gpu2 it is PCI (PHB on this board).
        assert_eq!(t.gpu_class(g[1], g[2]), PathClass::Phb);
        // Again, with fewer links: replaced, not added to.
        ends[0].1 = vec![NvLinkEnd::Gpu(g[1])];
        t.add_nvlinks(&ends);
        assert_eq!(t.gpu_class(g[0], g[1]), PathClass::Nv(1));
        assert_eq!(t.gpu_class(g[0], g[6]), PathClass::Sys);
        t.validate().unwrap();
    }

    #[test]
    fn the_level_admits_classes_nearer_than_or_at_it() {
        use PathClass::*;
        let classes = [X, Nv(4), Pix, Pxb, Phb, Node, Sys];
        let cases = [
            (P2pLevel::Off, 0),
            (P2pLevel::Loc, 1),
            (P2pLevel::Nvl, 2),
            (P2pLevel::Pix, 3),
            (P2pLevel::Pxb, 4),
            (P2pLevel::Phb, 5),
            (P2pLevel::Sys, 7),
        ];
        for (level, admitted) in cases {
            for (i, c) in classes.iter().enumerate() {
                assert_eq!(p2p_allows(level, *c), i < admitted, "{level:?} {c}");
            }
        }
        let t = server2s();
        assert!(t.pci_function(addr_of(&dgx(), "gpu0")).is_none());
    }
}
