//! The device of this process, decided once, on the first call that needs one without naming
//! one (and logged): `RCOMM_DEVICE` where the launcher or the user set it; else the device of
//! the context that was current on the thread that first used device memory (it loaded the
//! driver: the framework's choice, as `torch.cuda.set_device`); else local rank modulo the
//! number of visible GPUs. Never "device
//! 0 because nothing is current": on a node of eight GPUs that puts every rank's scratch and
//! streams on one.
//!
//! Ranks of one node on one GPU (more ranks than GPUs) time-slice it unless MPS runs: each
//! rank claims its GPU under the job's name on the node (an abstract socket bound for the
//! life of the process), and the second claimant warns once when no MPS control socket is
//! found.

use super::*;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

/// This rank's claim on its GPU, held for the process (the name goes with the socket).
static CLAIM: OnceLock<UnixListener> = OnceLock::new();

impl Driver {
    /// This process's device (see the module docs).
    pub(super) fn home(&self) -> Result<u32, GpuError> {
        self.home.get_or_init(|| self.choose_home()).clone()
    }

    fn choose_home(&self) -> Result<u32, GpuError> {
        let n = self.devs.len() as u32;
        let (d, why) = if let Some(d) = rcomm_runtime::config::gpu_device() {
            if d >= n {
                return Err(GpuError::Invalid(format!(
                    "RCOMM_DEVICE={d}, but this process sees {n} GPU(s) (0 to {}); CUDA_VISIBLE_DEVICES renumbers them",
                    n - 1
                )));
            }
            (d, "RCOMM_DEVICE".to_string())
        } else if let Some(d) = self.first_ctx {
            (
                d,
                "the CUDA context current on the first thread to use the device".into(),
            )
        } else {
            let r = rcomm_runtime::config::local_rank().unwrap_or(0);
            let d = rcomm_runtime::config::device_for_local_rank(r, n).unwrap_or(0);
            (d, format!("local rank {r} of {n} visible GPU(s)"))
        };
        rcomm_runtime::rlog!(
            Info,
            "INIT",
            "device of this process: GPU {d} ({}), chosen by {why}",
            self.devs[d as usize].pci
        );
        self.claim(d);
        Ok(d)
    }

    /// Claims GPU `d` for this rank on the node; warns when another rank of the job has it
    /// and MPS is not running.
    fn claim(&self, d: u32) {
        let Some(job) = crate::gpu::fdshare::job_id() else {
            return;
        };
        let uuid: String = self.devs[d as usize]
            .uuid
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let name = format!("rcomm.{job}.gpu.{uuid}");
        let bound = SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|a| UnixListener::bind_addr(&a));
        match bound {
            Ok(l) => {
                let _ = CLAIM.set(l);
            }
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
                if !mps_running() {
                    rcomm_runtime::rlog!(
                        Warn,
                        "INIT",
                        "another rank of this job on this node uses GPU {} too, and MPS is not running: the ranks time-slice the GPU. Start MPS (nvidia-cuda-mps-control -d), or run at most one rank per GPU",
                        self.devs[d as usize].pci
                    );
                }
            }
            Err(_) => {}
        }
    }
}

/// The ordinal of the device of the context current on this thread, if any.
pub(super) fn current_device(devs: &[Dev]) -> Option<u32> {
    let mut c: cu::CUcontext = std::ptr::null_mut();
    // SAFETY: writes one context handle (null: none current).
    let r = unsafe { cu::cuCtxGetCurrent(&mut c) };
    if r != cu::CUresult::CUDA_SUCCESS || c.is_null() {
        return None;
    }
    let mut dev: cu::CUdevice = 0;
    // SAFETY: writes one device handle of the current context.
    if unsafe { cu::cuCtxGetDevice(&mut dev) } != cu::CUresult::CUDA_SUCCESS {
        return None;
    }
    devs.iter().position(|d| d.dev == dev).map(|i| i as u32)
}

/// Whether an MPS control daemon runs: its pipe directory (`CUDA_MPS_PIPE_DIRECTORY`, else
/// /tmp/nvidia-mps) has a `control` socket. (CUDA's own variable, read where CUDA reads it.)
fn mps_running() -> bool {
    mps_control_in(std::env::var_os("CUDA_MPS_PIPE_DIRECTORY"))
}

/// Whether MPS's pipe directory `dir` (else the default) has its control socket.
pub(super) fn mps_control_in(dir: Option<std::ffi::OsString>) -> bool {
    dir.filter(|v| !v.is_empty())
        .map_or_else(
            || std::path::PathBuf::from("/tmp/nvidia-mps"),
            std::path::PathBuf::from,
        )
        .join("control")
        .exists()
}

#[cfg(test)]
mod tests {
    #[test]
    fn mps_is_seen_by_its_control_socket_in_the_pipe_directory() {
        let dir = std::env::temp_dir().join(format!("rcomm-mps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = Some(dir.clone().into_os_string());
        assert!(!super::mps_control_in(d.clone()), "no control socket yet");
        std::fs::write(dir.join("control"), b"").unwrap();
        assert!(super::mps_control_in(d));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
