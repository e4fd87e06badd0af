//! `rcomm-topo`: this machine as rcomm sees it (see `rcomm_launcher::topo_report`), and its
//! RDMA devices (HCAs with their ports and GID tables, from `/sys/class/infiniband`, or from
//! the tree given by `--sysfs-root`). Under `rcomm-run` every host answers: local rank 0 of
//! each host prints, its lines prefixed with its host name, and the other ranks stay quiet.

use clap::Parser;
use rcomm_launcher::topo_report;
use rcomm_runtime::topo::Topology;
use rcomm_transport::ib::LinkLayer;
use rcomm_transport::ib::sysfs::{self, HcaInfo};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Show the machine's packages, NUMA nodes, cores, caches, GPUs and NICs, and the distance
/// classes between GPUs and NICs (as `nvidia-smi topo -m`); the GPUs the CUDA driver sees; and
/// the RDMA devices: each HCA port's state, link layer, rate and GID table.
#[derive(Debug, Parser)]
#[command(name = "rcomm-topo", version, after_help = after_help())]
struct Args {
    /// Print JSON (counts, devices, the matrix) instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the model to FILE in rcomm's file form (for RCOMM_TOPO_FILE or --file).
    #[arg(long, value_name = "FILE")]
    dump: Option<PathBuf>,
    /// Read the machine from a sysfs tree under DIR (a fixture) instead of this machine.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["file", "xml"])]
    sysfs_root: Option<PathBuf>,
    /// Read the model from a file written by --dump.
    #[arg(long, value_name = "F", conflicts_with = "xml")]
    file: Option<PathBuf>,
    /// Read an hwloc XML export (`lstopo --of xml`) through hwloc (builds with feature hwloc).
    #[arg(long, value_name = "F")]
    xml: Option<PathBuf>,
    /// Do not ask the CUDA driver for its GPUs (by default, reading this machine lists them:
    /// ordinal, name, PCI bus id, memory, SMs, compute capability; or says why none is usable).
    #[arg(long)]
    no_cuda: bool,
}

fn after_help() -> String {
    format!(
        "Classes, nearest first: {}. Under rcomm-run, local rank 0 of each host prints, prefixed with the host name.",
        topo_report::legend()
    )
}

fn load(a: &Args) -> Result<Topology, String> {
    use rcomm_runtime::topo;
    if let Some(f) = &a.file {
        return Topology::load(f).map_err(|e| e.to_string());
    }
    if let Some(f) = &a.xml {
        return topo::load_hwloc_xml(f).map_err(|e| e.to_string());
    }
    if let Some(d) = &a.sysfs_root {
        return topo::sysfs::read(d).map_err(|e| format!("--sysfs-root {}: {e}", d.display()));
    }
    topo::detect().map_err(|e| format!("reading this machine: {e}"))
}

fn main() -> ExitCode {
    let a = Args::parse();
    let launch = match rcomm_runtime::config::global() {
        Ok(c) => c.launch.as_ref().map(|l| l.local_rank),
        Err(e) => {
            eprintln!("rcomm-topo: {e}");
            return ExitCode::from(2);
        }
    };
    if launch.is_some_and(|r| r != 0) {
        return ExitCode::SUCCESS;
    }
    let t = match load(&a) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rcomm-topo: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(f) = &a.dump
        && let Err(e) = std::fs::write(f, t.to_json() + "\n")
    {
        eprintln!("rcomm-topo: {}: {e}", f.display());
        return ExitCode::from(1);
    }
    let prefix = if launch.is_some() {
        format!("{}: ", rcomm_runtime::identity::hostname())
    } else {
        String::new()
    };
    // The driver's view of the GPUs: only for this machine (not a fixture or a file), and
    // only here (rcomm-run itself never loads the CUDA driver).
    let this_machine = a.file.is_none() && a.xml.is_none() && a.sysfs_root.is_none();
    let cuda = (this_machine && !a.no_cuda).then(topo_report::cuda_devices);
    // RDMA devices exist only in a file system: this machine's, or the fixture tree.
    let rdma_root = match &a.sysfs_root {
        Some(d) => Some(d.clone()),
        None => this_machine.then(|| PathBuf::from("/")),
    };
    let rdma = rdma_root.map(|r| {
        let found = sysfs::discover(&r).map_err(|e| e.to_string());
        (r, found)
    });
    if a.json {
        let mut v = topo_report::json(&t);
        if let Some(c) = &cuda {
            v["cuda"] = topo_report::cuda_json(c);
        }
        if let Some((_, found)) = &rdma {
            v["rdma"] = rdma_json(found);
        }
        if launch.is_some() {
            v["reported_by"] = rcomm_runtime::identity::hostname().into();
        }
        println!("{prefix}{v}");
    } else {
        print!("{}", topo_report::text(&t, &prefix));
        if let Some(c) = &cuda {
            print!("{}", topo_report::cuda_text(c, &prefix));
        }
        if let Some((root, found)) = &rdma {
            print!("{}", rdma_text(root, found, &prefix));
        }
    }
    ExitCode::SUCCESS
}

type Found = Result<Vec<HcaInfo>, String>;

/// The HCAs, one line per port and one per GID; the GID `RCOMM_IB_GID_INDEX` would default
/// to is marked `(auto)`.
fn rdma_text(root: &Path, found: &Found, prefix: &str) -> String {
    let class = Path::new("/").join(sysfs::CLASS_DIR);
    let shown = if root == Path::new("/") {
        class.display().to_string()
    } else {
        format!("{} under {}", class.display(), root.display())
    };
    let hcas = match found {
        Err(e) => return format!("{prefix}RDMA devices: cannot read {shown}: {e}\n"),
        Ok(h) if h.is_empty() => {
            return if root.join(sysfs::CLASS_DIR).exists() {
                format!("{prefix}no RDMA devices ({shown} is empty)\n")
            } else {
                format!("{prefix}no RDMA devices (no {shown})\n")
            };
        }
        Ok(h) => h,
    };
    let mut out = format!("{prefix}RDMA devices ({shown}):\n");
    for h in hcas {
        let guid = h
            .node_guid
            .map_or(String::new(), |g| format!(", node GUID {g:016x}"));
        out += &format!("{prefix}  {}: {} port(s){guid}\n", h.name, h.ports.len());
        for p in &h.ports {
            let ll = match p.link_layer {
                LinkLayer::InfiniBand => format!("InfiniBand, LID {:#x}", p.lid),
                LinkLayer::Ethernet => "Ethernet (RoCE)".to_string(),
            };
            let mtu = p
                .active_mtu
                .map_or(String::new(), |m| format!(", MTU {}", m.bytes()));
            let rate = if p.rate.is_empty() {
                "rate unknown"
            } else {
                &p.rate
            };
            out += &format!(
                "{prefix}    port {}: {} ({}), {ll}, {rate}{mtu}\n",
                p.num,
                p.state.name(),
                if p.phys_state.is_empty() {
                    "?"
                } else {
                    &p.phys_state
                }
            );
            let auto = p.gid_index_auto();
            for g in &p.gids {
                let ty = g.gid_type.name();
                let v4 = g.gid.ipv4().map_or(String::new(), |a| format!(" {a}"));
                let nd = g.ndev.as_ref().map_or(String::new(), |n| format!(" {n}"));
                let mark = if auto == Some(g.index) { " (auto)" } else { "" };
                out += &format!(
                    "{prefix}      GID {:>3} {} {ty}{nd}{v4}{mark}\n",
                    g.index, g.gid
                );
            }
        }
    }
    out
}

fn rdma_json(found: &Found) -> serde_json::Value {
    use serde_json::json;
    match found {
        Err(e) => json!({ "error": e }),
        Ok(hcas) => json!(
            hcas.iter()
                .map(|h| json!({
                    "name": h.name,
                    "node_guid": h.node_guid.map(|g| format!("{g:016x}")),
                    "ports": h.ports.iter().map(|p| json!({
                        "port": p.num,
                        "state": p.state.name(),
                        "phys_state": p.phys_state,
                        "link_layer": p.link_layer.name(),
                        "rate": p.rate,
                        "rate_mbps": p.rate_mbps,
                        "lid": p.lid,
                        "active_mtu": p.active_mtu.map(|m| m.bytes()),
                        "gid_index_auto": p.gid_index_auto(),
                        "gids": p.gids.iter().map(|g| json!({
                            "index": g.index,
                            "gid": g.gid.to_string(),
                            "type": g.gid_type.name(),
                            "ndev": g.ndev,
                            "ipv4": g.gid.ipv4().map(|a| a.to_string()),
                        })).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                }))
                .collect::<Vec<_>>()
        ),
    }
}
