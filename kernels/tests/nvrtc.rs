//! Every device reduction compiles with NVRTC to PTX for sm_80, sm_90 and sm_100, and the PTX
//! has every kernel rcomm launches. The test command installs NVRTC (the nvidia-cuda-nvrtc
//! wheel) and puts it on LD_LIBRARY_PATH, so under CI this never skips; elsewhere without
//! NVRTC it says it skips.

use rcomm_kernels::cuda::{ARCHS, all_kernels, compile_ptx, nvrtc_available};

#[test]
fn every_reduction_kernel_compiles_to_ptx_for_ampere_hopper_and_blackwell() {
    if let Err(e) = nvrtc_available() {
        rcomm_testkit::skip(&format!(
            "NVRTC is needed to compile the device reductions: {e}"
        ));
        return;
    }
    for arch in ARCHS {
        let ptx = compile_ptx(arch).unwrap_or_else(|e| panic!("{e}"));
        let target = format!(".target {arch}");
        assert!(ptx.contains(&target), "{arch}: no `{target}` in the PTX");
        for k in all_kernels() {
            assert!(
                ptx.contains(&format!(".entry {k}(")),
                "{arch}: kernel {k} missing from the PTX"
            );
        }
        // Cached: the second call hands back the same text.
        assert!(std::sync::Arc::ptr_eq(&ptx, &compile_ptx(arch).unwrap()));
    }
}
