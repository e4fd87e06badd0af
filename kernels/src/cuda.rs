//! Device reductions: the CUDA C source (`kernels/cuda/reduce.cu`), the names of its kernels,
//! and its compilation to PTX with NVRTC at run time (cudarc, loaded dynamically: a build needs
//! no CUDA toolkit, and a machine without NVRTC gets an error saying so, never a panic).
//! Compiled PTX is cached per architecture for the life of the process.
//!
//! The kernels have the CPU kernels' semantics ([`Op`], bitwise identical for the same operand
//! order): `rcomm_reduce_<op>_<dtype>(out, a, b, n)` computes `out[i] = a[i] ⊕ b[i]`, and
//! `rcomm_div_<dtype>(buf, n, count)` finishes an average as [`crate::finalize_avg`] does.

use crate::{Dtype, KernelError, Op};

/// The CUDA C source of every device reduction.
pub const REDUCE_SRC: &str = include_str!("../cuda/reduce.cu");

/// The GPU architectures the source must compile for (Ampere, Hopper, Blackwell).
pub const ARCHS: [&str; 3] = ["sm_80", "sm_90", "sm_100"];

/// The kernel computing `out = a ⊕ b` for `op` on `dtype` (`Avg` reduces as `Sum`).
pub fn reduce_kernel(op: Op, dtype: Dtype) -> Result<String, KernelError> {
    op.check(dtype)?;
    let op = if op == Op::Avg { Op::Sum } else { op };
    Ok(format!("rcomm_reduce_{}_{}", op.name(), dtype.name()))
}

/// The kernel dividing by the contribution count at the end of an average.
pub fn div_kernel(dtype: Dtype) -> String {
    format!("rcomm_div_{}", dtype.name())
}

/// Every kernel name of [`REDUCE_SRC`].
pub fn all_kernels() -> Vec<String> {
    let mut v: Vec<String> = Dtype::ALL
        .iter()
        .flat_map(|&d| {
            Op::ALL
                .iter()
                .filter(move |&&o| o != Op::Avg && o.is_defined_for(d))
                .map(move |&o| reduce_kernel(o, d).expect("defined"))
        })
        .collect();
    v.extend(Dtype::ALL.iter().map(|&d| div_kernel(d)));
    v
}

/// Why the source could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvrtcError {
    /// No NVRTC library in this process (or this build has no `cuda` feature).
    #[error("NVRTC is not available: {0}")]
    Unavailable(String),
    /// NVRTC refused the source for `arch`; its log.
    #[error("NVRTC could not compile the reductions for {arch}: {log}")]
    Compile {
        /// The architecture.
        arch: String,
        /// NVRTC's log.
        log: String,
    },
}

/// Whether NVRTC can be loaded here.
pub fn nvrtc_available() -> Result<(), NvrtcError> {
    imp::available()
}

/// The PTX of [`REDUCE_SRC`] for `arch` (one of [`ARCHS`], or any `sm_XY` NVRTC knows),
/// compiled once per architecture and process.
pub fn compile_ptx(arch: &str) -> Result<std::sync::Arc<str>, NvrtcError> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<str>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(arch) {
        return Ok(p.clone());
    }
    let ptx: Arc<str> = imp::compile(arch)?.into();
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(arch.to_string(), ptx.clone());
    Ok(ptx)
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;

    pub(super) fn available() -> Result<(), NvrtcError> {
        // SAFETY: only tries to open the library.
        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            Ok(())
        } else {
            Err(NvrtcError::Unavailable(
                "libnvrtc.so not found (install CUDA's NVRTC, or the nvidia-cuda-nvrtc wheel, and put its lib directory on LD_LIBRARY_PATH)".into(),
            ))
        }
    }

    pub(super) fn compile(arch: &str) -> Result<String, NvrtcError> {
        available()?;
        // NVRTC takes the architecture as a static string: the known ones, else leaked once
        // per new name (the cache above keeps that to once per process).
        let arch: &'static str = ARCHS
            .iter()
            .find(|a| **a == arch)
            .copied()
            .unwrap_or_else(|| Box::leak(arch.to_string().into_boxed_str()));
        let opts = cudarc::nvrtc::CompileOptions {
            arch: Some(arch),
            // IEEE results, as the CPU kernels: no flush to zero, no contraction.
            ftz: Some(false),
            fmad: Some(false),
            prec_div: Some(true),
            name: Some("reduce.cu".into()),
            ..Default::default()
        };
        // cudarc panics on a symbol missing from an unexpected NVRTC: an error, not a panic.
        match std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(REDUCE_SRC, opts)) {
            Ok(Ok(ptx)) => Ok(ptx.to_src()),
            Ok(Err(e)) => Err(NvrtcError::Compile {
                arch: arch.to_string(),
                log: format!("{e:?}"),
            }),
            Err(_) => Err(NvrtcError::Unavailable(
                "the NVRTC library lacks an entry point rcomm calls".into(),
            )),
        }
    }
}

#[cfg(not(feature = "cuda"))]
mod imp {
    use super::*;

    pub(super) fn available() -> Result<(), NvrtcError> {
        Err(NvrtcError::Unavailable(
            "rcomm-kernels was built without the cuda feature".into(),
        ))
    }

    pub(super) fn compile(_arch: &str) -> Result<String, NvrtcError> {
        available().map(|()| String::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_cover_every_defined_op_and_dtype_once() {
        let all = all_kernels();
        let mut set = std::collections::BTreeSet::new();
        for k in &all {
            assert!(set.insert(k.clone()), "{k} twice");
        }
        // 8 integer dtypes x 7 ops + 4 float dtypes x 4 ops + 12 divisions.
        assert_eq!(all.len(), 8 * 7 + 4 * 4 + 12);
        assert_eq!(
            reduce_kernel(Op::Avg, Dtype::Bf16).unwrap(),
            "rcomm_reduce_sum_bf16"
        );
        assert!(reduce_kernel(Op::BXor, Dtype::F32).is_err());
    }
}
