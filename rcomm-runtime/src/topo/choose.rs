//! Which GPU and which NICs a rank uses, from the topology.
//!
//! * GPU: local rank `i` of a host takes GPU `i mod #GPUs`, GPUs in PCI-address order (what
//!   `CUDA_DEVICE_ORDER=PCI_BUS_ID` numbers).
//! * NIC: among the candidates (HCAs for the verbs path, network interfaces for TCP), the
//!   nearest by [`PathClass`] from the rank's GPU, or from the rank's NUMA node when the host
//!   has no GPU (the node its allowed CPUs lie in; a rank spanning nodes has no origin and
//!   every NIC is as near as any other). When `k` candidates are equally near, local rank `i`
//!   takes the `(i mod k)`-th of them in PCI order: ranks sharing a switch spread over its NICs
//!   and rank `i` of every host lands on the same rail.
//! * `RCOMM_IB_HCA` and `RCOMM_SOCKET_IFNAME` (same syntax: prefixes, `^` excludes, `=` exact)
//!   remove candidates before the choice; an HCA name's `:port` suffix is ignored. Network
//!   interfaces count only when they sit on a PCI function (virtual ones have no locality).

use super::model::{ObjId, ObjKind, OsDevKind, Topology};
use super::path::PathClass;
use crate::ifaddr::IfSpec;

/// A chosen device and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pick {
    /// The OS device.
    pub dev: ObjId,
    /// Its name (`mlx5_0`, `ib0`).
    pub name: String,
    /// Its class from the rank's GPU or NUMA node (`SYS` without an origin).
    pub class: PathClass,
    /// How many candidates were that near.
    pub tied: usize,
}

/// A rank's devices.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Choice {
    /// Its GPU, if the host has any.
    pub gpu: Option<ObjId>,
    /// Its HCA, if any passes `RCOMM_IB_HCA`.
    pub hca: Option<Pick>,
    /// Its network interface, if any passes `RCOMM_SOCKET_IFNAME`.
    pub net: Option<Pick>,
}

/// Candidate filters (from [`Config`](crate::config::Config)).
#[derive(Clone, Copy, Debug, Default)]
pub struct Filters<'a> {
    /// `RCOMM_IB_HCA`.
    pub ib_hca: Option<&'a IfSpec>,
    /// `RCOMM_SOCKET_IFNAME`.
    pub socket_ifname: Option<&'a IfSpec>,
}

fn pci_key(t: &Topology, id: ObjId) -> Option<super::model::PciAddr> {
    match t.obj(t.pci_of(id)).kind {
        ObjKind::PciDevice { addr, .. } => Some(addr),
        _ => None,
    }
}

/// OS devices satisfying `pred`, in PCI order (devices outside the PCI tree last), then name.
fn devices(t: &Topology, pred: impl Fn(&OsDevKind) -> bool) -> Vec<ObjId> {
    let mut v: Vec<ObjId> = t
        .filter(|k| matches!(k, ObjKind::OsDevice { kind } if pred(kind)))
        .collect();
    v.sort_by_key(|&d| {
        (
            pci_key(t, d).is_none(),
            pci_key(t, d),
            t.obj(d).name.clone(),
        )
    });
    v
}

/// The GPUs, in PCI order.
pub fn gpus(t: &Topology) -> Vec<ObjId> {
    devices(t, |k| matches!(k, OsDevKind::Gpu))
}

/// The HCAs, in PCI order.
pub fn hcas(t: &Topology) -> Vec<ObjId> {
    devices(t, |k| matches!(k, OsDevKind::Ib))
}

/// The network interfaces, in PCI order.
pub fn nets(t: &Topology) -> Vec<ObjId> {
    devices(t, |k| matches!(k, OsDevKind::Net { .. }))
}

/// Where distances are measured from.
#[derive(Clone, Copy, Debug)]
enum Origin {
    Gpu(ObjId),
    Numa(ObjId),
    Nowhere,
}

fn pick(t: &Topology, from: Origin, cands: &[ObjId], local_rank: u32) -> Option<Pick> {
    let class = |d: ObjId| match from {
        Origin::Gpu(g) => t.path_class(g, d),
        Origin::Numa(n) => t.numa_class(d, n),
        Origin::Nowhere => PathClass::Sys,
    };
    let best = cands.iter().map(|&d| class(d)).min()?;
    let near: Vec<ObjId> = cands
        .iter()
        .copied()
        .filter(|&d| class(d) == best)
        .collect();
    let dev = near[local_rank as usize % near.len()];
    Some(Pick {
        dev,
        name: t.obj(dev).name.clone(),
        class: best,
        tied: near.len(),
    })
}

/// Whether HCA `name` (a `:port` suffix ignored) is one `RCOMM_IB_HCA` admits.
pub fn hca_matches(spec: &IfSpec, name: &str) -> bool {
    let bare = IfSpec {
        names: spec
            .names
            .iter()
            .map(|n| n.split(':').next().unwrap_or(n).to_string())
            .collect(),
        ..spec.clone()
    };
    bare.matches(name)
}

/// The devices of local rank `local_rank` whose allowed CPUs are `cpus` (see the module notes).
pub fn choose(t: &Topology, local_rank: u32, cpus: &[u32], f: Filters<'_>) -> Choice {
    let gpus = gpus(t);
    let gpu = (!gpus.is_empty()).then(|| gpus[local_rank as usize % gpus.len()]);
    let from = match gpu {
        Some(g) => Origin::Gpu(g),
        None => match t.numa_nodes_touching(cpus).as_slice() {
            [n] => Origin::Numa(*n),
            _ => Origin::Nowhere,
        },
    };
    let name = |d: &ObjId| t.obj(*d).name.clone();
    let hcas: Vec<ObjId> = hcas(t)
        .into_iter()
        .filter(|d| f.ib_hca.is_none_or(|s| hca_matches(s, &name(d))))
        .collect();
    // Only interfaces on a PCI function: virtual ones (lo, docker0, veth) have no locality and
    // are no rail.
    let nets: Vec<ObjId> = nets(t)
        .into_iter()
        .filter(|&d| pci_key(t, d).is_some())
        .filter(|d| f.socket_ifname.is_none_or(|s| s.matches(&name(d))))
        .collect();
    Choice {
        gpu,
        hca: pick(t, from, &hcas, local_rank),
        net: pick(t, from, &nets, local_rank),
    }
}

/// This process's devices as local rank `local_rank` of its host, from the detected topology
/// and `cfg`'s filters; the choice is logged (subsystem `TOPO`). `None` when the machine cannot
/// be read (the caller keeps its topology-free default).
pub fn for_this_process(
    cfg: &crate::config::Config,
    local_rank: u32,
) -> Option<(Topology, Choice)> {
    let t = match super::detect() {
        Ok(t) => t,
        Err(e) => {
            crate::rlog!(Info, "TOPO", "no topology ({e}); devices chosen without it");
            return None;
        }
    };
    let cpus = crate::os::allowed_cpus().unwrap_or_default();
    let f = Filters {
        ib_hca: cfg.ib_hca.as_ref(),
        socket_ifname: cfg.socket_ifname.as_ref(),
    };
    let c = choose(&t, local_rank, &cpus, f);
    let show = |p: &Option<Pick>| match p {
        Some(p) => format!("{} ({}, 1 of {} as near)", p.name, p.class, p.tied),
        None => "none".into(),
    };
    crate::rlog!(
        Info,
        "TOPO",
        "local rank {local_rank}: gpu {}, hca {}, net {}",
        c.gpu.map_or("none".into(), |g| t.obj(g).name.clone()),
        show(&c.hca),
        show(&c.net)
    );
    Some((t, c))
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{dgx, named, server2s};
    use super::*;

    fn names(t: &Topology, c: &Choice) -> (String, String, String) {
        (
            c.gpu.map(|g| t.obj(g).name.clone()).unwrap_or_default(),
            c.hca.as_ref().map(|p| p.name.clone()).unwrap_or_default(),
            c.net.as_ref().map(|p| p.name.clone()).unwrap_or_default(),
        )
    }

    #[test]
    fn eight_ranks_on_a_dgx_take_the_nic_on_their_gpus_switch() {
        let t = dgx();
        for i in 0..8u32 {
            let c = choose(&t, i, &[], Filters::default());
            let sw = i / 2;
            assert_eq!(
                names(&t, &c),
                (format!("gpu{i}"), format!("mlx5_{sw}"), format!("ib{sw}"))
            );
            let hca = c.hca.unwrap();
            assert_eq!((hca.class, hca.tied), (PathClass::Pix, 1));
        }
        // 16 ranks: rank 8 is back on GPU 0.
        assert_eq!(names(&t, &choose(&t, 8, &[], Filters::default())).0, "gpu0");
    }

    #[test]
    fn filters_remove_candidates_before_the_choice() {
        let t = dgx();
        let only = IfSpec::parse("mlx5_2,mlx5_3:1").unwrap();
        let not0 = IfSpec::parse("^=ib0").unwrap();
        let f = Filters {
            ib_hca: Some(&only),
            socket_ifname: Some(&not0),
        };
        // GPU 0's own NIC is filtered away: the rest are on the other socket (SYS, two of them,
        // rank 0 takes the first) and ib1 / eth0 on this socket's host bridge (PHB).
        let c = choose(&t, 0, &[], f);
        let hca = c.hca.unwrap();
        assert_eq!(
            (hca.name.as_str(), hca.class, hca.tied),
            ("mlx5_2", PathClass::Sys, 2)
        );
        let net = c.net.unwrap();
        assert_eq!((net.class, net.tied), (PathClass::Phb, 2));
        let c = choose(&t, 1, &[], f);
        assert_eq!(c.hca.unwrap().name, "mlx5_3");
        let none = IfSpec::parse("=mlx9").unwrap();
        let f = Filters {
            ib_hca: Some(&none),
            socket_ifname: None,
        };
        assert!(choose(&t, 0, &[], f).hca.is_none());
    }

    #[test]
    fn without_gpus_the_numa_node_decides() {
        let mut t = dgx();
        // Make the DGX's GPUs disappear (their OS devices become "other").
        for g in gpus(&t) {
            t.objects[g.0 as usize].kind = ObjKind::OsDevice {
                kind: OsDevKind::Other,
            };
        }
        // A rank on socket 1's CPUs: mlx5_2 and mlx5_3 are PHB; ranks alternate.
        let c = choose(&t, 0, &[8, 9], Filters::default());
        assert_eq!(
            c.hca.as_ref().map(|p| (p.name.as_str(), p.tied)),
            Some(("mlx5_2", 2))
        );
        assert_eq!(
            choose(&t, 1, &[8], Filters::default()).hca.unwrap().name,
            "mlx5_3"
        );
        // Spanning both sockets: all four are equally (un)near.
        let c = choose(&t, 5, &[0, 8], Filters::default());
        assert_eq!(c.hca.map(|p| (p.name, p.tied)), Some(("mlx5_1".into(), 4)));
        let s = server2s();
        let c = choose(&s, 3, &[9], Filters::default());
        assert!(c.gpu.is_none() && c.hca.is_none());
        assert_eq!(
            c.net.map(|p| (p.name, p.class)),
            Some(("eth0".into(), PathClass::Sys))
        );
        assert!(named(&s, "eth0").is_some());
    }
}
