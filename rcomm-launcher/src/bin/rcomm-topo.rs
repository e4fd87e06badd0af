//! `rcomm-topo`: this machine as rcomm sees it (see `rcomm_launcher::topo_report`). Under
//! `rcomm-run` every host answers: local rank 0 of each host prints, its lines prefixed with
//! its host name, and the other ranks stay quiet.

use clap::Parser;
use rcomm_launcher::topo_report;
use rcomm_transport::topo::Topology;
use std::path::PathBuf;
use std::process::ExitCode;

/// Show the machine's packages, NUMA nodes, cores, caches, GPUs and NICs, and the distance
/// classes between GPUs and NICs (as `nvidia-smi topo -m`); and the GPUs the CUDA driver sees.
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
    use rcomm_transport::topo;
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
    let launch = match rcomm_transport::config::global() {
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
        format!("{}: ", rcomm_transport::identity::hostname())
    } else {
        String::new()
    };
    // The driver's view of the GPUs: only for this machine (not a fixture or a file), and
    // only here (rcomm-run itself never loads the CUDA driver).
    let this_machine = a.file.is_none() && a.xml.is_none() && a.sysfs_root.is_none();
    let cuda = (this_machine && !a.no_cuda).then(topo_report::cuda_devices);
    if a.json {
        let mut v = topo_report::json(&t);
        if let Some(c) = &cuda {
            v["cuda"] = topo_report::cuda_json(c);
        }
        if launch.is_some() {
            v["reported_by"] = rcomm_transport::identity::hostname().into();
        }
        println!("{prefix}{v}");
    } else {
        print!("{}", topo_report::text(&t, &prefix));
        if let Some(c) = &cuda {
            print!("{}", topo_report::cuda_text(c, &prefix));
        }
    }
    ExitCode::SUCCESS
}
