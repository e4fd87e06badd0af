//! Every device reduction compiles with NVRTC, for every architecture of [`ARCHS`], to a CUBIN
//! whose ELF header names that architecture and to PTX whose `.version` maps to a driver the
//! docs state; the loader picks the CUBIN for each of them. The test command installs NVRTC
//! (the nvidia-cuda-nvrtc wheel) and puts it on LD_LIBRARY_PATH, so under CI this never skips;
//! elsewhere without NVRTC it says it skips.

use rcomm_kernels::cuda::image::{self, ImageKind};
use rcomm_kernels::cuda::{
    ARCHS, Build, Source, all_kernels, compile_cubin, compile_ptx, image_for, nvrtc_archs,
    nvrtc_available, nvrtc_version, pick,
};

fn nvrtc_here() -> bool {
    match nvrtc_available() {
        Ok(()) => true,
        Err(e) => {
            rcomm_testkit::skip(&format!(
                "NVRTC is needed to compile the device reductions: {e}"
            ));
            false
        }
    }
}

/// The architecture documentation, where the oldest driver of each image is stated.
fn architecture_md() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn every_reduction_kernel_compiles_to_a_cubin_of_each_arch_and_to_ptx_the_docs_date() {
    if !nvrtc_here() {
        return;
    }
    let version = nvrtc_version().expect("nvrtcVersion");
    let known = nvrtc_archs().expect("nvrtcGetSupportedArchs");
    let docs = architecture_md();
    for arch in ARCHS {
        let sm = image::parse_sm(arch).unwrap();
        assert!(
            known.contains(&sm),
            "NVRTC {version:?} does not know {arch} (it knows {known:?}): ARCHS lists only \
             architectures CI's NVRTC builds"
        );

        // The CUBIN: an EM_CUDA ELF file for exactly this SM, holding every kernel's symbol.
        let cubin = compile_cubin(arch).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            image::describe(&cubin),
            Ok(ImageKind::Cubin { sm }),
            "{arch}: the CUBIN's ELF header"
        );
        for k in all_kernels() {
            assert!(
                cubin
                    .windows(k.len() + 1)
                    .any(|w| w[..k.len()] == *k.as_bytes() && w[k.len()] == 0),
                "{arch}: kernel {k} missing from the CUBIN's symbols"
            );
        }

        // The PTX fall-back: every entry, and a header whose ISA the table maps to a driver
        // that docs/architecture.md names.
        let ptx = compile_ptx(&format!("compute_{sm}")).unwrap_or_else(|e| panic!("{e}"));
        for k in all_kernels() {
            assert!(
                ptx.contains(&format!(".entry {k}(")),
                "{arch}: kernel {k} missing from the PTX"
            );
        }
        let (isa, target) = image::ptx_header(&ptx).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(target, sm, "{arch}: the PTX's .target");
        let min = image::ptx_min_driver(isa).unwrap_or_else(|| {
            panic!("{arch}: PTX ISA {isa:?} of NVRTC {version:?} is not in the driver table")
        });
        let stated = format!(
            "PTX ISA {}.{} needs driver {}",
            isa.0,
            isa.1,
            image::driver_name(min)
        );
        assert!(
            docs.contains(&stated),
            "docs/architecture.md does not state {stated:?}"
        );

        // The loader's choice for a GPU of this architecture is the CUBIN, the very bytes.
        let (build, chosen) = image_for(sm).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(build, Build::Cubin(sm), "{arch}: the loader's choice");
        assert!(
            std::sync::Arc::ptr_eq(&chosen, &cubin),
            "{arch}: not cached"
        );
        // And it beats a folder of precompiled kernels.
        let (src, _) = pick(
            image_for(sm),
            || Some(cubin.clone()),
            || Some(cubin.clone()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(src, Source::NvrtcCubin, "{arch}: the loader's source");
    }
    let cubin_min = image::driver_name(image::MIN_DRIVER);
    assert!(
        docs.contains(&format!("from {cubin_min}")),
        "docs/architecture.md does not state that a CUBIN loads on every driver from {cubin_min}"
    );
}

#[test]
fn a_gpu_newer_than_nvrtc_gets_ptx_for_the_newest_arch_below_it() {
    if !nvrtc_here() {
        return;
    }
    let known = nvrtc_archs().expect("nvrtcGetSupportedArchs");
    let newest = *known.iter().max().expect("NVRTC knows some architecture");
    let (build, img) = image_for(newest + 10).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(build, Build::Ptx(newest));
    match image::describe(&img) {
        Ok(ImageKind::Ptx { target, .. }) => assert_eq!(target, newest),
        other => panic!("not PTX: {other:?}"),
    }
    // A GPU older than everything NVRTC knows is an error naming both, not a panic.
    let oldest = *known.iter().min().unwrap();
    let e = image_for(oldest - 1).unwrap_err().to_string();
    assert!(e.contains(&format!("sm_{}", oldest - 1)), "{e}");
}
