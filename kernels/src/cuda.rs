//! Device reductions: the CUDA C source (`kernels/cuda/reduce.cu`), the names of its kernels,
//! and its compilation with NVRTC at run time (cudarc, loaded dynamically: a build needs no CUDA
//! toolkit, and a machine without NVRTC gets an error saying so, never a panic).
//!
//! What a GPU loads ([`image_for`]) is a CUBIN for its own architecture wherever NVRTC knows
//! that architecture: a CUBIN of any CUDA 12 NVRTC loads on every driver from 12.0 (R525, CUDA
//! minor version compatibility), while PTX needs a driver at least as new as the NVRTC that
//! wrote it (NVRTC 12.9 writes PTX ISA 8.8, which drivers before R575 refuse). PTX is the
//! fall-back for a GPU newer than NVRTC, built for the newest architecture NVRTC knows below
//! it and JIT-compiled by the driver. Compiled images are cached per architecture for the life
//! of the process. [`image`] reads images and words the error when a driver refuses one.
//!
//! The kernels have the CPU kernels' semantics ([`Op`], bitwise identical for the same operand
//! order): `rcomm_reduce_<op>_<dtype>(out, a, b, n)` computes `out[i] = a[i] ⊕ b[i]`, and
//! `rcomm_div_<dtype>(buf, n, count)` finishes an average as [`crate::finalize_avg`] does.

use crate::{Dtype, KernelError, Op};
use std::sync::Arc;

pub mod image;

/// The CUDA C source of every device reduction.
pub const REDUCE_SRC: &str = include_str!("../cuda/reduce.cu");

/// The GPU architectures CI compiles every kernel for, to CUBIN and PTX (Ampere A100 and
/// GA10x, Ada, Hopper, Blackwell data-centre and consumer): every one NVRTC 12.9 knows from
/// sm_80 on, minus the embedded ones (sm_87, sm_101, sm_103, sm_121).
pub const ARCHS: [&str; 6] = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"];

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
    /// NVRTC knows no architecture whose code runs on this GPU.
    #[error(
        "NVRTC knows no architecture that runs on sm_{sm} (it knows {known:?}): use an NVRTC \
         that supports this GPU, or RCOMM_PTX_DIR"
    )]
    NoArch {
        /// The GPU's SM.
        sm: u32,
        /// The SMs NVRTC knows.
        known: Vec<u32>,
    },
}

/// What to build for a GPU: a CUBIN for its SM, or PTX for a virtual architecture below it
/// (JIT-compiled by the driver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    /// `--gpu-architecture=sm_XY`, `nvrtcGetCUBIN`.
    Cubin(u32),
    /// `--gpu-architecture=compute_XY`, `nvrtcGetPTX`.
    Ptx(u32),
}

impl Build {
    /// The `--gpu-architecture` value.
    pub fn arch(self) -> String {
        match self {
            Build::Cubin(sm) => format!("sm_{sm}"),
            Build::Ptx(sm) => format!("compute_{sm}"),
        }
    }
}

/// The loader's choice for a GPU of SM `sm` given the SMs NVRTC knows: a CUBIN when NVRTC
/// knows `sm`, else PTX for the newest architecture it knows below `sm` (PTX runs on later
/// GPUs, never on earlier ones), else nothing.
pub fn choose(sm: u32, known: &[u32]) -> Option<Build> {
    if known.contains(&sm) {
        return Some(Build::Cubin(sm));
    }
    known
        .iter()
        .copied()
        .filter(|&k| k < sm)
        .max()
        .map(Build::Ptx)
}

/// Where a GPU's kernels come from ([`pick`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// NVRTC's CUBIN for the GPU's SM: loads on every driver from 12.0.
    NvrtcCubin,
    /// `RCOMM_PTX_DIR/rcomm-reduce-sm_XY.cubin`.
    DirCubin,
    /// `RCOMM_PTX_DIR/rcomm-reduce-sm_XY.ptx` (perhaps from an older NVRTC, whose PTX an older
    /// driver takes).
    DirPtx,
    /// NVRTC's PTX for an earlier architecture (a GPU newer than NVRTC): needs a driver as new
    /// as NVRTC.
    NvrtcPtx,
}

/// The loader's order: NVRTC's CUBIN, then the folder's CUBIN, then the folder's PTX, then
/// NVRTC's PTX; `nvrtc` is [`image_for`]'s answer, the folder's files are read only when
/// needed. NVRTC's error when nothing is found.
pub fn pick<T>(
    nvrtc: Result<(Build, T), NvrtcError>,
    dir_cubin: impl FnOnce() -> Option<T>,
    dir_ptx: impl FnOnce() -> Option<T>,
) -> Result<(Source, T), NvrtcError> {
    let nvrtc = match nvrtc {
        Ok((Build::Cubin(_), img)) => return Ok((Source::NvrtcCubin, img)),
        other => other,
    };
    if let Some(img) = dir_cubin() {
        return Ok((Source::DirCubin, img));
    }
    if let Some(img) = dir_ptx() {
        return Ok((Source::DirPtx, img));
    }
    nvrtc.map(|(_, img)| (Source::NvrtcPtx, img))
}

/// Whether NVRTC can be loaded here.
pub fn nvrtc_available() -> Result<(), NvrtcError> {
    imp::available()
}

/// NVRTC's version (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32), NvrtcError> {
    imp::version()
}

/// The SMs NVRTC can build for (`nvrtcGetSupportedArchs`: 80 for sm_80).
pub fn nvrtc_archs() -> Result<Vec<u32>, NvrtcError> {
    imp::archs()
}

/// Compiled images: (arch, CUBIN?) → bytes.
type Cache = std::sync::Mutex<std::collections::HashMap<(String, bool), Arc<[u8]>>>;

/// Compiles once per `(arch, cubin)` and process.
fn cached(arch: &str, cubin: bool) -> Result<Arc<[u8]>, NvrtcError> {
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (arch.to_string(), cubin);
    if let Some(p) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(p.clone());
    }
    let made: Arc<[u8]> = imp::compile(arch, cubin)?.into();
    // A racing thread may have put its own: hand out the one in the cache, so every caller
    // sees one address (the driver's module cache is keyed by it).
    Ok(cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key)
        .or_insert(made)
        .clone())
}

/// The PTX text of [`REDUCE_SRC`] for `arch` (`compute_XY`, or `sm_XY`: the same PTX),
/// compiled once per architecture and process.
pub fn compile_ptx(arch: &str) -> Result<Arc<str>, NvrtcError> {
    let bytes = cached(arch, false)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| NvrtcError::Compile {
        arch: arch.to_string(),
        log: "NVRTC wrote PTX that is not UTF-8".into(),
    })?;
    Ok(text.into())
}

/// The CUBIN of [`REDUCE_SRC`] for `arch` (`sm_XY`), compiled once per architecture and
/// process.
pub fn compile_cubin(arch: &str) -> Result<Arc<[u8]>, NvrtcError> {
    cached(arch, true)
}

/// The kernels a GPU of SM `sm` loads, as NVRTC here builds them ([`choose`]): the choice and
/// the image (CUBIN bytes, or PTX text without a NUL), the same allocation on every call.
pub fn image_for(sm: u32) -> Result<(Build, Arc<[u8]>), NvrtcError> {
    let known = nvrtc_archs()?;
    let build = choose(sm, &known).ok_or(NvrtcError::NoArch { sm, known })?;
    let bytes = cached(&build.arch(), matches!(build, Build::Cubin(_)))?;
    Ok((build, bytes))
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use cudarc::nvrtc::{result, sys};

    pub(super) fn available() -> Result<(), NvrtcError> {
        // SAFETY: only tries to open the library.
        if unsafe { sys::is_culib_present() } {
            Ok(())
        } else {
            Err(NvrtcError::Unavailable(
                "libnvrtc.so not found (install CUDA's NVRTC, or the nvidia-cuda-nvrtc wheel, and put its lib directory on LD_LIBRARY_PATH)".into(),
            ))
        }
    }

    /// cudarc panics on a symbol missing from an unexpected NVRTC: an error, not a panic.
    fn guarded<T>(f: impl FnOnce() -> Result<T, NvrtcError>) -> Result<T, NvrtcError> {
        available()?;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
            Err(NvrtcError::Unavailable(
                "the NVRTC library lacks an entry point rcomm calls".into(),
            ))
        })
    }

    fn call(r: sys::nvrtcResult, what: &str) -> Result<(), NvrtcError> {
        r.result()
            .map_err(|e| NvrtcError::Unavailable(format!("{what}: {e:?}")))
    }

    pub(super) fn version() -> Result<(i32, i32), NvrtcError> {
        guarded(|| {
            let (mut a, mut b) = (0, 0);
            // SAFETY: writes two integers.
            call(unsafe { sys::nvrtcVersion(&mut a, &mut b) }, "nvrtcVersion")?;
            Ok((a, b))
        })
    }

    pub(super) fn archs() -> Result<Vec<u32>, NvrtcError> {
        guarded(|| {
            let mut n = 0;
            // SAFETY: writes one integer.
            call(
                unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) },
                "nvrtcGetNumSupportedArchs",
            )?;
            let mut v = vec![0; n.max(0) as usize];
            // SAFETY: writes `n` integers into a buffer of `n`.
            call(
                unsafe { sys::nvrtcGetSupportedArchs(v.as_mut_ptr()) },
                "nvrtcGetSupportedArchs",
            )?;
            Ok(v.into_iter()
                .filter_map(|a| u32::try_from(a).ok())
                .collect())
        })
    }

    /// Destroys the program however compilation ends.
    struct Program(sys::nvrtcProgram);

    impl Drop for Program {
        fn drop(&mut self) {
            // SAFETY: made by `create_program`, destroyed once, here.
            let _ = unsafe { result::destroy_program(self.0) };
        }
    }

    /// A C string NVRTC wrote, up to its NUL.
    fn text(raw: &[std::ffi::c_char]) -> String {
        let b: Vec<u8> = raw
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&b).into_owned()
    }

    pub(super) fn compile(arch: &str, cubin: bool) -> Result<Vec<u8>, NvrtcError> {
        let fail = |log: String| NvrtcError::Compile {
            arch: arch.to_string(),
            log,
        };
        guarded(|| {
            let src = std::ffi::CString::new(REDUCE_SRC)
                .map_err(|_| fail("a NUL in the source".into()))?;
            let prog = Program(
                result::create_program(&src, Some(c"reduce.cu"))
                    .map_err(|e| fail(format!("nvrtcCreateProgram: {e:?}")))?,
            );
            let opts = [
                format!("--gpu-architecture={arch}"),
                // IEEE results, as the CPU kernels: no flush to zero, no contraction.
                "--ftz=false".into(),
                "--fmad=false".into(),
                "--prec-div=true".into(),
            ];
            // SAFETY: a live program; cudarc copies the options into C strings.
            if let Err(e) = unsafe { result::compile_program(prog.0, &opts) } {
                // SAFETY: a live program.
                let log = unsafe { result::get_program_log(prog.0) }
                    .map(|l| text(&l))
                    .unwrap_or_default();
                return Err(fail(format!("{e:?}: {log}")));
            }
            let out = if cubin {
                let mut n = 0usize;
                // SAFETY: a compiled program; writes one size.
                call(
                    unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut n) },
                    "nvrtcGetCUBINSize",
                )?;
                let mut v = vec![0u8; n];
                // SAFETY: writes `n` bytes into a buffer of `n`.
                call(
                    unsafe { sys::nvrtcGetCUBIN(prog.0, v.as_mut_ptr().cast()) },
                    "nvrtcGetCUBIN",
                )?;
                v
            } else {
                // SAFETY: a compiled program.
                let p = unsafe { result::get_ptx(prog.0) }
                    .map_err(|e| fail(format!("nvrtcGetPTX: {e:?}")))?;
                // The text without NVRTC's NUL: the loader adds its own.
                text(&p).into_bytes()
            };
            if out.is_empty() {
                return Err(fail(format!(
                    "NVRTC wrote no {}",
                    if cubin { "CUBIN" } else { "PTX" }
                )));
            }
            Ok(out)
        })
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

    pub(super) fn version() -> Result<(i32, i32), NvrtcError> {
        available().map(|()| (0, 0))
    }

    pub(super) fn archs() -> Result<Vec<u32>, NvrtcError> {
        available().map(|()| Vec::new())
    }

    pub(super) fn compile(_arch: &str, _cubin: bool) -> Result<Vec<u8>, NvrtcError> {
        available().map(|()| Vec::new())
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

    #[test]
    fn the_loader_prefers_a_cubin_and_falls_back_to_older_ptx() {
        let nvrtc_12_9 = [75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121];
        for arch in ARCHS {
            let sm = image::parse_sm(arch).unwrap();
            assert_eq!(choose(sm, &nvrtc_12_9), Some(Build::Cubin(sm)), "{arch}");
        }
        // A GPU newer than NVRTC: PTX of the newest architecture below it.
        assert_eq!(choose(130, &nvrtc_12_9), Some(Build::Ptx(121)));
        assert_eq!(choose(95, &nvrtc_12_9), Some(Build::Ptx(90)));
        // Older than anything NVRTC knows: nothing it builds runs there.
        assert_eq!(choose(70, &nvrtc_12_9), None);
        assert_eq!(choose(90, &[]), None);
        assert_eq!(Build::Ptx(90).arch(), "compute_90");
        // With a folder too: NVRTC's CUBIN wins, the folder (CUBIN first) beats NVRTC's PTX.
        let gone = || NvrtcError::Unavailable("no".into());
        let dir = |what: &'static str| move || Some(what);
        let none = || None::<&str>;
        assert_eq!(
            pick(Ok((Build::Cubin(90), "nvrtc")), dir("c"), dir("p")),
            Ok((Source::NvrtcCubin, "nvrtc"))
        );
        assert_eq!(
            pick(Ok((Build::Ptx(90), "nvrtc")), dir("c"), dir("p")),
            Ok((Source::DirCubin, "c"))
        );
        assert_eq!(pick(Err(gone()), none, dir("p")), Ok((Source::DirPtx, "p")));
        assert_eq!(
            pick(Ok((Build::Ptx(121), "nvrtc")), none, none),
            Ok((Source::NvrtcPtx, "nvrtc"))
        );
        assert_eq!(pick(Err(gone()), none, none), Err(gone()));
        assert_eq!(Build::Cubin(120).arch(), "sm_120");
    }
}
