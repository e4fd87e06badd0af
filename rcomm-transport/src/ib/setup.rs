//! Whether and where a rank uses `ib`: the library, the HCA and the port.
//!
//! Under `RCOMM_TRANSPORT=auto` a rank opens an endpoint only when the job spans nodes and
//! the machine shows RDMA devices in sysfs (so single-node jobs and machines without RDMA
//! never load libibverbs); anything missing is a fall-back to TCP, logged once under
//! `RCOMM_DEBUG_SUBSYS=NET`. Under `RCOMM_TRANSPORT=ib` every missing piece is an init error
//! that says which.

use super::any::IbNet;
use super::verbs::{PortState, Verbs};
use rcomm_runtime::config::{Config, TransportChoice};
use rcomm_runtime::ifaddr::IfSpec;

/// The rails (device, port) a rank uses: among the devices `v` lists that pass `filter`
/// (`RCOMM_IB_HCA`), `preferred` first (the topology's nearest HCA), then in listing order,
/// the first `rails` active ports.
pub fn choose_ports<V: Verbs>(
    v: &V,
    filter: Option<&IfSpec>,
    preferred: Option<&str>,
    rails: usize,
) -> Result<Vec<(String, u8)>, String> {
    let devs = v
        .devices()
        .map_err(|e| format!("listing RDMA devices: {e}"))?;
    if devs.is_empty() {
        return Err("libibverbs lists no RDMA device".into());
    }
    let mut names: Vec<&str> = devs
        .iter()
        .map(|d| d.name.as_str())
        .filter(|n| filter.is_none_or(|f| rcomm_runtime::topo::choose::hca_matches(f, n)))
        .collect();
    if names.is_empty() {
        return Err(format!(
            "RCOMM_IB_HCA excludes every RDMA device ({})",
            devs.iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(p) = preferred
        && let Some(i) = names.iter().position(|n| *n == p)
    {
        let n = names.remove(i);
        names.insert(0, n);
    }
    let mut seen = Vec::new();
    let mut found = Vec::new();
    for name in names {
        let d = devs.iter().find(|d| d.name == name).expect("listed");
        let ctx = match v.open(name) {
            Ok(c) => c,
            Err(e) => {
                seen.push(format!("{name}: {e}"));
                continue;
            }
        };
        for port in 1..=d.phys_port_cnt {
            if found.len() == rails {
                break;
            }
            match v.query_port(ctx, port) {
                Ok(a) if a.state == PortState::Active => found.push((name.to_string(), port)),
                Ok(a) => seen.push(format!("{name} port {port}: {}", a.state.name())),
                Err(e) => seen.push(format!("{name} port {port}: {e}")),
            }
        }
        let _ = v.close(ctx);
        if found.len() == rails {
            break;
        }
    }
    if found.is_empty() {
        return Err(format!("no active RDMA port ({})", seen.join("; ")));
    }
    Ok(found)
}

/// Whether GPUDirect RDMA may run over a GPU–HCA path of class `class` under
/// `RCOMM_NET_GDR_LEVEL` = `level` (as NCCL_NET_GDR_LEVEL; `LOC` means never).
pub fn gdr_within(
    level: rcomm_runtime::config::P2pLevel,
    class: rcomm_runtime::topo::path::PathClass,
) -> bool {
    use rcomm_runtime::config::P2pLevel as L;
    use rcomm_runtime::topo::path::PathClass as C;
    let c = match class {
        C::X | C::Nv(_) => 0,
        C::Pix => 1,
        C::Pxb => 2,
        C::Phb => 3,
        C::Node => 4,
        C::Sys => 5,
    };
    match level {
        L::Off | L::Loc => false,
        L::Nvl => c == 0,
        L::Pix => c <= 1,
        L::Pxb => c <= 2,
        L::Phb => c <= 3,
        L::Sys => true,
    }
}

/// Whether this machine shows RDMA devices at all (`/sys/class/infiniband` has entries).
fn sysfs_has_devices() -> bool {
    std::fs::read_dir(std::path::Path::new("/").join(super::sysfs::CLASS_DIR))
        .is_ok_and(|mut d| d.next().is_some())
}

/// This rank's endpoint, when the settings and the machine call for one: `Ok(None)` where
/// `auto` does not use `ib` (a single-node job, no RDMA device, no library — the reason
/// logged once); `Err` only under `RCOMM_TRANSPORT=ib`.
pub fn open_for_rank(
    cfg: &Config,
    local_rank: u32,
    local_size: u32,
    rank: u32,
    size: u32,
) -> Result<Option<IbNet>, String> {
    let forced = cfg.transport == TransportChoice::Ib;
    if !forced && (cfg.transport != TransportChoice::Auto || size <= local_size) {
        return Ok(None);
    }
    let skip = |why: String| -> Result<Option<IbNet>, String> {
        if forced {
            Err(why)
        } else {
            rcomm_runtime::rlog!(Info, "NET", "ib not used ({why}); TCP between nodes");
            Ok(None)
        }
    };
    if !forced && !sysfs_has_devices() {
        return skip("no RDMA devices in /sys/class/infiniband".into());
    }
    open_lib(cfg, local_rank, rank, size, skip)
}

#[cfg(not(feature = "ib"))]
fn open_lib(
    _: &Config,
    _: u32,
    _: u32,
    _: u32,
    skip: impl Fn(String) -> Result<Option<IbNet>, String>,
) -> Result<Option<IbNet>, String> {
    skip("this build of rcomm has no ib (cargo feature `ib` of rcomm-transport)".into())
}

/// Loads libibverbs and opens this rank's rails.
#[cfg(feature = "ib")]
fn open_lib(
    cfg: &Config,
    local_rank: u32,
    rank: u32,
    size: u32,
    skip: impl Fn(String) -> Result<Option<IbNet>, String>,
) -> Result<Option<IbNet>, String> {
    use super::ep::{IbEndpoint, IbParams};
    let v = match super::libverbs::LibVerbs::load() {
        Ok(l) => super::any::AnyVerbs::Lib(l),
        Err(e) => return skip(e.to_string()),
    };
    let choice = rcomm_runtime::topo::choose::for_this_process(cfg, local_rank).map(|(_, c)| c);
    let preferred = choice
        .as_ref()
        .and_then(|c| c.hca.as_ref())
        .map(|p| p.name.clone());
    // GPUDirect RDMA where this rank has a GPU and its HCA is within RCOMM_NET_GDR_LEVEL of
    // it; the driver's dma-buf export is tried at the first registration (refused: staged).
    let gdr = choice.as_ref().is_some_and(|c| {
        c.gpu.is_some()
            && c.hca
                .as_ref()
                .is_some_and(|h| gdr_within(cfg.ib.gdr_level, h.class))
    });
    let rails = cfg.ib.rails as usize;
    let found = match choose_ports(&v, cfg.ib_hca.as_ref(), preferred.as_deref(), rails) {
        Ok(x) => x,
        Err(e) => return skip(e),
    };
    let shown: Vec<String> = found.iter().map(|(d, p)| format!("{d}:{p}")).collect();
    let devs: Vec<(&str, u8)> = found.iter().map(|(d, p)| (d.as_str(), *p)).collect();
    let params = IbParams {
        gdr,
        ..IbParams::from_settings(&cfg.ib)
    };
    match IbEndpoint::open(v, &devs, rank, size, params) {
        Ok(ep) => {
            rcomm_runtime::rlog!(
                Info,
                "NET",
                "ib: rank {rank} uses {}; device memory {}",
                shown.join(", "),
                if gdr {
                    "by GPUDirect RDMA"
                } else {
                    "staged through host memory"
                }
            );
            Ok(Some(ep))
        }
        Err(e) => skip(format!("opening {}: {e}", shown.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ib::sim::{HcaSpec, PortSpec, SimConfig, SimFabric};

    fn fabric() -> SimFabric {
        let f = SimFabric::new(SimConfig::default());
        for (i, n) in ["mlx5_0", "mlx5_1", "mlx5_2"].into_iter().enumerate() {
            f.add_hca(HcaSpec {
                name: n.into(),
                node_guid: i as u64 + 1,
                ports: vec![PortSpec::ib(i as u16 + 1, i as u64 + 1, 0)],
            });
        }
        f
    }

    #[test]
    fn the_preferred_hca_wins_then_listing_order_and_down_ports_are_skipped() {
        let f = fabric();
        let v = f.host(&["mlx5_0", "mlx5_1", "mlx5_2"]);
        let one = |f, p| choose_ports(&v, f, p, 1);
        assert_eq!(one(None, None).unwrap(), vec![("mlx5_0".into(), 1)]);
        assert_eq!(
            one(None, Some("mlx5_2")).unwrap(),
            vec![("mlx5_2".into(), 1)]
        );
        assert_eq!(
            choose_ports(&v, None, Some("mlx5_2"), 2).unwrap(),
            vec![("mlx5_2".into(), 1), ("mlx5_0".into(), 1)],
            "two rails: the preferred, then listing order"
        );
        assert_eq!(
            choose_ports(&v, None, None, 8).unwrap().len(),
            3,
            "as many as active"
        );
        f.set_port("mlx5_0", 1, false);
        assert_eq!(one(None, None).unwrap(), vec![("mlx5_1".into(), 1)]);
        let only0 = IfSpec::parse("=mlx5_0").unwrap();
        let e = one(Some(&only0), None).unwrap_err();
        assert!(
            e.contains("no active RDMA port") && e.contains("mlx5_0 port 1: DOWN"),
            "{e}"
        );
        let none = IfSpec::parse("^mlx5").unwrap();
        let e = one(Some(&none), None).unwrap_err();
        assert!(e.contains("RCOMM_IB_HCA excludes every RDMA device"), "{e}");
        let empty = f.host(&[]);
        let e = choose_ports(&empty, None, None, 1).unwrap_err();
        assert!(e.contains("no RDMA device"), "{e}");
    }

    #[test]
    fn gpudirect_follows_the_gdr_level_as_nccl() {
        use rcomm_runtime::config::P2pLevel as L;
        use rcomm_runtime::topo::path::PathClass as C;
        assert!(gdr_within(L::Pxb, C::Pix) && gdr_within(L::Pxb, C::Pxb));
        assert!(!gdr_within(L::Pxb, C::Phb) && !gdr_within(L::Pxb, C::Sys));
        assert!(gdr_within(L::Sys, C::Sys) && gdr_within(L::Phb, C::Phb));
        assert!(!gdr_within(L::Loc, C::Pix), "LOC: never");
        assert!(!gdr_within(L::Pix, C::Node));
    }

    #[test]
    fn auto_does_not_use_ib_on_one_node_and_ib_without_devices_says_why() {
        let env = |t: &str| {
            Config::from_map(
                &[("RCOMM_TRANSPORT".to_string(), t.to_string())]
                    .into_iter()
                    .collect(),
            )
            .unwrap()
        };
        assert!(matches!(open_for_rank(&env("auto"), 0, 4, 0, 4), Ok(None)));
        assert!(matches!(open_for_rank(&env("tcp"), 0, 1, 0, 4), Ok(None)));
        if sysfs_has_devices() {
            eprintln!(
                "this machine has RDMA devices: the no-device half of this test does not apply"
            );
            return;
        }
        assert!(matches!(open_for_rank(&env("auto"), 0, 1, 0, 4), Ok(None)));
        let e = open_for_rank(&env("ib"), 0, 1, 0, 4).unwrap_err();
        assert!(
            e.contains("libibverbs lists no RDMA device") || e.contains("libibverbs.so.1"),
            "{e}"
        );
    }
}
