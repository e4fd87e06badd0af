//! What a module image is (a CUBIN for one SM, or PTX of one ISA version for one virtual
//! architecture), which driver can load it, and the message when one cannot. Pure functions on
//! bytes and numbers: the loader (rcomm-transport) and the CI check (kernels/tests) share them,
//! and they run without a GPU or NVRTC.

use std::fmt;

/// The oldest driver rcomm's kernels load on: CUDA 12.0, branch R525. A CUBIN built by any CUDA
/// 12 NVRTC runs on it (CUDA minor version compatibility; one of a CUDA 13 NVRTC needs a 13.x
/// driver); PTX may need a newer one ([`ptx_min_driver`]).
pub const MIN_DRIVER: i32 = 12000;

/// `ELFOSABI`-independent facts of a CUBIN's ELF header (the layout LLVM's
/// `BinaryFormat/ELF.h` documents for `EM_CUDA`).
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// `e_machine` of NVIDIA GPU code.
pub const EM_CUDA: u16 = 190;
/// `e_ident[EI_ABIVERSION]` of the first CUDA ELF ABI, which keeps the SM in the low byte of
/// `e_flags` (`EF_CUDA_SM`); later ABIs (8, from the Blackwell toolchains on, for every
/// architecture) keep it in bits 8-15 (`EF_CUDA_SM_MASK`, `EF_CUDA_SM_OFFSET`).
const ELFABIVERSION_CUDA_V1: u8 = 7;

/// What a module image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// Machine code for one SM (`sm_XY`, as `10 * major + minor`).
    Cubin {
        /// The SM it was built for.
        sm: u32,
    },
    /// PTX, JIT-compiled by the driver.
    Ptx {
        /// The `.version` directive: (major, minor).
        isa: (u32, u32),
        /// The `.target` directive's SM (the virtual architecture `compute_XY`).
        target: u32,
    },
}

impl fmt::Display for ImageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ImageKind::Cubin { sm } => write!(f, "CUBIN sm_{sm}"),
            ImageKind::Ptx { isa, target } => {
                write!(f, "PTX ISA {}.{} for compute_{target}", isa.0, isa.1)
            }
        }
    }
}

/// Whether `image` is an ELF file (a CUBIN) rather than PTX text.
pub fn is_elf(image: &[u8]) -> bool {
    image.starts_with(ELF_MAGIC)
}

/// What `image` is: a CUBIN (its SM from the ELF header) or PTX (its `.version` and `.target`).
pub fn describe(image: &[u8]) -> Result<ImageKind, String> {
    if is_elf(image) {
        cubin_sm(image).map(|sm| ImageKind::Cubin { sm })
    } else {
        let text = std::str::from_utf8(image.strip_suffix(b"\0").unwrap_or(image))
            .map_err(|_| "neither an ELF file nor PTX text".to_string())?;
        let (isa, target) = ptx_header(text)?;
        Ok(ImageKind::Ptx { isa, target })
    }
}

/// The SM a CUBIN was built for, from its ELF header (64-bit, little-endian, `EM_CUDA`).
pub fn cubin_sm(elf: &[u8]) -> Result<u32, String> {
    // e_ident (16 bytes), e_type, e_machine, e_version, e_entry, e_phoff, e_shoff, e_flags:
    // e_flags sits at 0x30 in the 64-bit header.
    if elf.len() < 0x40 || !is_elf(elf) {
        return Err(format!("{} bytes: not a 64-bit ELF header", elf.len()));
    }
    if elf[4] != 2 || elf[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let machine = u16::from_le_bytes([elf[18], elf[19]]);
    if machine != EM_CUDA {
        return Err(format!(
            "ELF machine {machine}, not EM_CUDA ({EM_CUDA}): not GPU code"
        ));
    }
    // The driver takes no length with the image: a file cut short must stop here, not be
    // read past its end. The section and program header tables end inside it.
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().expect("8 bytes"));
    let u16_at = |o: usize| u64::from(u16::from_le_bytes([elf[o], elf[o + 1]]));
    for (what, off, size, count) in [
        ("program", u64_at(0x20), u16_at(0x36), u16_at(0x38)),
        ("section", u64_at(0x28), u16_at(0x3a), u16_at(0x3c)),
    ] {
        let end = off.checked_add(size * count);
        if end.is_none_or(|e| e > elf.len() as u64) {
            return Err(format!(
                "{} bytes: the {what} header table ({count} x {size} bytes at {off}) lies past \
                 the end (a file cut short?)",
                elf.len()
            ));
        }
    }
    let flags = u32::from_le_bytes([elf[0x30], elf[0x31], elf[0x32], elf[0x33]]);
    let sm = if elf[8] == ELFABIVERSION_CUDA_V1 {
        flags & 0xff
    } else {
        (flags >> 8) & 0xff
    };
    if sm == 0 {
        return Err(format!("ELF flags {flags:#x} name no SM"));
    }
    Ok(sm)
}

/// The `.version` (major, minor) and the `.target` SM of PTX text.
pub fn ptx_header(ptx: &str) -> Result<((u32, u32), u32), String> {
    let mut version = None;
    let mut target = None;
    // The directives come first, after comments; a kernel body never starts a line with them.
    for line in ptx.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix(".version") {
            let v = v.trim();
            let (a, b) = v
                .split_once('.')
                .ok_or_else(|| format!("`.version {v}`: not MAJOR.MINOR"))?;
            let num = |s: &str| {
                s.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("`.version {v}`: not MAJOR.MINOR"))
            };
            version = Some((num(a)?, num(b)?));
        } else if let Some(t) = line.strip_prefix(".target") {
            // `.target sm_90`, or with options: `.target sm_90a, debug`.
            let first = t.split(',').next().unwrap_or("").trim();
            target = Some(parse_sm(first).ok_or_else(|| format!("`.target {first}`: no sm_XY"))?);
        }
        if let (Some(v), Some(t)) = (version, target) {
            return Ok((v, t));
        }
    }
    Err(match version {
        None => "no `.version` directive: not PTX".into(),
        Some(_) => "no `.target` directive: not PTX".into(),
    })
}

/// `sm_90` / `compute_90` / `sm_90a` / `sm_100f` → 90 / 90 / 90 / 100.
pub fn parse_sm(arch: &str) -> Option<u32> {
    let digits = arch
        .strip_prefix("sm_")
        .or_else(|| arch.strip_prefix("compute_"))?;
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let rest = &digits[end..];
    if end == 0 || !(rest.is_empty() || rest == "a" || rest == "f") {
        return None;
    }
    digits[..end].parse().ok().filter(|&n| n > 0)
}

/// Whether `image` runs on a GPU of SM `sm`: a CUBIN on its own SM and later minors of the same
/// major (binary compatibility: sm_80 code runs on sm_86 and sm_89, not on sm_90); PTX on its
/// target and every later SM (the driver JIT-compiles it).
pub fn runs_on(image: ImageKind, sm: u32) -> bool {
    match image {
        ImageKind::Cubin { sm: s } => s / 10 == sm / 10 && s <= sm,
        ImageKind::Ptx { target, .. } => target <= sm,
    }
}

/// The first CUDA release whose driver loads each PTX ISA version, as `cuDriverGetVersion`
/// writes it (12.9 = 12090). From the release history in NVIDIA's PTX ISA manual
/// (docs.nvidia.com/cuda/parallel-thread-execution, "Release Notes": PTX ISA 8.0 came with
/// CUDA 12.0 ... 8.5 with 12.5 and 12.6, 8.6 with 12.7, 8.7 with 12.8, 8.8 with 12.9, 9.0
/// with 13.0). CUDA 12.7 had no driver release, so PTX ISA 8.6 needs the 12.8 driver.
const PTX_ISA_DRIVER: [((u32, u32), i32); 11] = [
    ((8, 0), 12000),
    ((8, 1), 12010),
    ((8, 2), 12020),
    ((8, 3), 12030),
    ((8, 4), 12040),
    ((8, 5), 12050),
    ((8, 6), 12080),
    ((8, 7), 12080),
    ((8, 8), 12090),
    ((9, 0), 13000),
    ((9, 1), 13010),
];

/// The driver branch of each CUDA release's driver (the CUDA toolkit release notes' table of
/// toolkit and minimum driver versions): 12.4 ships with R550.
const DRIVER_BRANCH: [(i32, u32); 11] = [
    (12000, 525),
    (12010, 530),
    (12020, 535),
    (12030, 545),
    (12040, 550),
    (12050, 555),
    (12060, 560),
    (12080, 570),
    (12090, 575),
    (13000, 580),
    (13010, 590),
];

/// The oldest driver (as `cuDriverGetVersion` writes it) that loads PTX of ISA `isa`; `None`
/// for a version the table does not know (newer than it: assume the newest driver).
pub fn ptx_min_driver(isa: (u32, u32)) -> Option<i32> {
    PTX_ISA_DRIVER
        .iter()
        .find(|(v, _)| *v == isa)
        .map(|&(_, d)| d)
}

/// The oldest driver that loads `image`: [`MIN_DRIVER`] for a CUBIN, the table's for PTX.
pub fn min_driver(image: ImageKind) -> Option<i32> {
    match image {
        ImageKind::Cubin { .. } => Some(MIN_DRIVER),
        ImageKind::Ptx { isa, .. } => ptx_min_driver(isa),
    }
}

/// A driver version as people name it: `12040` → `12.4 (R550)`; the branch only where the
/// table knows it.
pub fn driver_name(version: i32) -> String {
    let v = format!("{}.{}", version / 1000, (version % 1000) / 10);
    match DRIVER_BRANCH.iter().find(|(d, _)| *d == version) {
        Some((_, r)) => format!("{v} (R{r})"),
        None => v,
    }
}

/// The message when the driver refused to load `image`: the driver's version (`None`: not
/// known), what was loaded and the oldest driver that needs, and what to do. `code` is the
/// driver's error name and text.
pub fn load_error(driver: Option<i32>, image: &[u8], code: &str) -> String {
    let this = match driver {
        Some(v) => format!("driver {}", driver_name(v)),
        None => "a driver of unknown version".into(),
    };
    let fix_dir = "or set RCOMM_PTX_DIR to a folder of kernels built by `rcomm-bench ptx` (a \
                   CUBIN per architecture, which loads on every driver from 12.0 (R525), or PTX \
                   from an older NVRTC)";
    match describe(image) {
        Ok(kind @ ImageKind::Ptx { isa, .. }) => {
            let needs = match ptx_min_driver(isa) {
                Some(d) => format!("which needs driver {} or newer", driver_name(d)),
                None => "an ISA newer than rcomm's table of drivers".into(),
            };
            format!(
                "{this} could not load the reduction kernels ({kind}, {needs}): {code}. Install \
                 a newer driver, {fix_dir}."
            )
        }
        Ok(kind @ ImageKind::Cubin { .. }) => format!(
            "{this} could not load the reduction kernels ({kind}; a CUBIN of a CUDA 12 NVRTC \
             needs driver {} or newer, one of CUDA 13 driver {}, and a GPU of that \
             architecture): {code}. Install a newer driver, {fix_dir}.",
            driver_name(MIN_DRIVER),
            driver_name(13000)
        ),
        Err(why) => format!(
            "{this} could not load the reduction kernels (an image rcomm cannot read: {why}): \
             {code}. Rebuild them with `rcomm-bench ptx`, or unset RCOMM_PTX_DIR."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-bit little-endian ELF header of `machine`, ABI version `abi`, flags `flags`.
    fn elf(machine: u16, abi: u8, flags: u32) -> Vec<u8> {
        let mut h = vec![0u8; 0x40];
        h[..4].copy_from_slice(ELF_MAGIC);
        h[4] = 2;
        h[5] = 1;
        h[7] = 51; // ELFOSABI_CUDA
        h[8] = abi;
        h[18..20].copy_from_slice(&machine.to_le_bytes());
        h[0x30..0x34].copy_from_slice(&flags.to_le_bytes());
        h
    }

    #[test]
    fn cubin_sm_reads_both_elf_abis() {
        // The old ABI: SM in the low byte, address-size and texture-mode bits above it.
        assert_eq!(cubin_sm(&elf(EM_CUDA, 7, 0x0050_0550)), Ok(80));
        // The new ABI (any architecture from the Blackwell toolchains on): bits 8-15.
        assert_eq!(cubin_sm(&elf(EM_CUDA, 8, 0x0600_5a04)), Ok(90));
        assert_eq!(cubin_sm(&elf(EM_CUDA, 8, 0x0600_7802)), Ok(120));
        assert!(
            cubin_sm(&elf(62, 8, 0x5a00))
                .unwrap_err()
                .contains("EM_CUDA")
        );
        assert!(cubin_sm(&elf(EM_CUDA, 8, 0)).is_err());
        assert!(cubin_sm(b"\x7fELF").is_err());
        // Header tables past the end of the file: refused before any driver reads them.
        let mut cut = elf(EM_CUDA, 8, 0x5a00);
        cut[0x28..0x30].copy_from_slice(&0x40u64.to_le_bytes());
        cut[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        cut[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        assert!(cubin_sm(&cut).unwrap_err().contains("section header table"));
        cut.resize(0x40 + 3 * 64, 0);
        assert_eq!(cubin_sm(&cut), Ok(90));
        cut[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        cut[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        cut[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        assert!(cubin_sm(&cut).unwrap_err().contains("program header table"));
        assert_eq!(
            describe(&elf(EM_CUDA, 8, 0x5a00)).unwrap().to_string(),
            "CUBIN sm_90"
        );
    }

    #[test]
    fn ptx_header_and_arch_names_parse() {
        let ptx = "//\n// Generated by NVIDIA NVVM Compiler\n\n.version 8.8\n.target sm_90\n\
                   .address_size 64\n";
        assert_eq!(ptx_header(ptx), Ok(((8, 8), 90)));
        assert_eq!(
            describe(format!("{ptx}\0").as_bytes()).unwrap().to_string(),
            "PTX ISA 8.8 for compute_90"
        );
        assert_eq!(
            ptx_header(".version 9.0\n.target sm_100a, debug\n"),
            Ok(((9, 0), 100))
        );
        assert!(ptx_header(".target sm_90\n").is_err());
        assert!(ptx_header(".version 8\n.target sm_90\n").is_err());
        assert!(ptx_header(".version 8.8\n.target gfx90a\n").is_err());
        assert!(describe(&[0xff, 0xfe]).is_err());
        assert_eq!(parse_sm("compute_120"), Some(120));
        assert_eq!(parse_sm("sm_90a"), Some(90));
        assert_eq!(parse_sm("sm_"), None);
        assert_eq!(parse_sm("sm_90x"), None);
        assert_eq!(parse_sm("90"), None);
    }

    #[test]
    fn cubins_run_within_their_major_and_ptx_on_later_sms() {
        let cubin = |sm| ImageKind::Cubin { sm };
        let ptx = |target| ImageKind::Ptx {
            isa: (8, 8),
            target,
        };
        assert!(runs_on(cubin(90), 90));
        assert!(runs_on(cubin(80), 86));
        assert!(!runs_on(cubin(86), 80));
        assert!(!runs_on(cubin(80), 90));
        assert!(!runs_on(cubin(90), 100));
        assert!(runs_on(cubin(100), 103));
        assert!(runs_on(ptx(90), 120));
        assert!(runs_on(ptx(90), 90));
        assert!(!runs_on(ptx(100), 90));
    }

    #[test]
    fn ptx_isa_maps_to_its_first_driver() {
        assert_eq!(ptx_min_driver((8, 0)), Some(12000));
        assert_eq!(ptx_min_driver((8, 4)), Some(12040));
        // 12.7 never had a driver: PTX ISA 8.6 needs 12.8's.
        assert_eq!(ptx_min_driver((8, 6)), Some(12080));
        assert_eq!(ptx_min_driver((8, 8)), Some(12090));
        assert_eq!(ptx_min_driver((7, 8)), None);
        assert_eq!(driver_name(12040), "12.4 (R550)");
        assert_eq!(driver_name(12090), "12.9 (R575)");
        assert_eq!(driver_name(12070), "12.7");
        assert_eq!(min_driver(ImageKind::Cubin { sm: 120 }), Some(MIN_DRIVER));
        // Every ISA in the table maps to a driver whose branch the table names.
        for (isa, d) in PTX_ISA_DRIVER {
            assert!(driver_name(d).contains("(R"), "{isa:?} → {d}");
        }
    }

    #[test]
    fn load_error_names_driver_image_minimum_and_remedy() {
        let ptx = b".version 8.8\n.target sm_90\n";
        let m = load_error(
            Some(12040),
            ptx,
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the provided PTX was compiled with an \
             unsupported toolchain.",
        );
        for want in [
            "driver 12.4 (R550)",
            "PTX ISA 8.8 for compute_90",
            "needs driver 12.9 (R575) or newer",
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            "newer driver",
            "RCOMM_PTX_DIR",
        ] {
            assert!(m.contains(want), "{want:?} missing from: {m}");
        }
        let m = load_error(
            None,
            &elf(EM_CUDA, 8, 0x5a00),
            "CUDA_ERROR_NO_BINARY_FOR_GPU",
        );
        for want in [
            "unknown version",
            "CUBIN sm_90",
            "12.0 (R525)",
            "13.0 (R580)",
            "RCOMM_PTX_DIR",
        ] {
            assert!(m.contains(want), "{want:?} missing from: {m}");
        }
        let m = load_error(Some(13000), b"garbage", "CUDA_ERROR_INVALID_IMAGE");
        assert!(
            m.contains("driver 13.0 (R580)") && m.contains("cannot read"),
            "{m}"
        );
    }
}
