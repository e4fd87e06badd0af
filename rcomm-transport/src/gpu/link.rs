//! The link class between two GPUs of this node, by PCI address: the node's topology (sysfs or
//! hwloc, `RCOMM_TOPO_FILE`) with the NVLinks the driver's management library reports (NVML,
//! `libnvidia-ml.so.1`, loaded at run time and optional: without it, NVLink is not seen and
//! two GPUs are classed by their PCI path). NVML sees every GPU of the node whatever
//! `CUDA_VISIBLE_DEVICES` says, so ranks that do not see each other's GPU still agree on the
//! class. Read once per process.

use rcomm_runtime::topo::{NvLinkEnd, PathClass, PciAddr, Topology};
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// The class between the GPUs at PCI bus ids `a` and `b` (`0000:3b:00.0`; NVML's
/// eight-digit domains are accepted): `X` when they are one, `SYS` when either is unknown.
pub fn class_between(a: &str, b: &str) -> PathClass {
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) if x == y => PathClass::X,
        (Some(x), Some(y)) => node().map_or(PathClass::Sys, |t| t.gpu_class(x, y)),
        _ if !a.is_empty() && a.eq_ignore_ascii_case(b) => PathClass::X,
        _ => PathClass::Sys,
    }
}

/// The PCI bus id of the GPU with this UUID, from NVML (a GPU this process does not see).
pub fn pci_of_uuid(uuid: &[u8; 16]) -> Option<String> {
    let n = nvml()?;
    let text = CString::new(uuid_text(uuid)).ok()?;
    let mut dev: *mut c_void = std::ptr::null_mut();
    let mut info = PciInfo::default();
    // SAFETY: NVML functions with the declared signatures; `text` is NUL-terminated, `dev`
    // and `info` are written by the calls.
    let ok =
        unsafe { (n.by_uuid)(text.as_ptr(), &mut dev) == 0 && (n.pci_info)(dev, &mut info) == 0 };
    ok.then(|| bus_id(&info.bus_id)).flatten()
}

/// `GPU-` and `8-4-4-4-12` hexadecimal words, as NVML and `nvidia-smi -L` print a UUID.
pub(crate) fn uuid_text(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// `DDDD:BB:DD.F` or NVML's `DDDDDDDD:BB:DD.F`.
fn parse(s: &str) -> Option<PciAddr> {
    let s = s.trim();
    let (dom, rest) = s.split_once(':')?;
    let dom = u32::from_str_radix(dom, 16).ok()?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let a = PciAddr {
        domain: u16::try_from(dom).ok()?,
        bus: u8::from_str_radix(bus, 16).ok()?,
        dev: u8::from_str_radix(dev, 16).ok()?,
        func: u8::from_str_radix(func, 16).ok()?,
    };
    (a.dev < 32 && a.func < 8).then_some(a)
}

/// This node's topology with NVML's NVLinks, read once.
fn node() -> Option<&'static Topology> {
    static NODE: OnceLock<Option<Topology>> = OnceLock::new();
    NODE.get_or_init(|| {
        let mut t = rcomm_runtime::topo::detect()
            .map_err(|e| {
                rcomm_runtime::rlog!(
                    Info,
                    "TOPO",
                    "no topology for GPU link classes ({e}): GPUs are classed SYS"
                )
            })
            .ok()?;
        if let Some(ends) = nvlink_ends(&t) {
            t.add_nvlinks(&ends);
        }
        Some(t)
    })
    .as_ref()
}

/// Per NVIDIA GPU of `t`, its active NVLinks as NVML reports them; `None` without NVML.
fn nvlink_ends(t: &Topology) -> Option<Vec<(PciAddr, Vec<NvLinkEnd>)>> {
    let n = nvml()?;
    let gpus = t.ids().filter_map(|i| match t.obj(i).kind {
        rcomm_runtime::topo::ObjKind::PciDevice {
            addr,
            class,
            vendor: 0x10de,
            ..
        } if class >> 8 == 0x03 => Some(addr),
        _ => None,
    });
    let mut out = Vec::new();
    for a in gpus {
        let id = CString::new(format!(
            "{:08x}:{:02x}:{:02x}.{:x}",
            a.domain, a.bus, a.dev, a.func
        ))
        .expect("no NUL");
        let mut dev: *mut c_void = std::ptr::null_mut();
        // SAFETY: as declared by NVML; writes the handle.
        if unsafe { (n.by_pci)(id.as_ptr(), &mut dev) } != 0 {
            continue;
        }
        let mut ends = Vec::new();
        for link in 0..MAX_LINKS {
            let mut active: c_int = 0;
            // SAFETY: as declared by NVML; writes one enum value.
            if unsafe { (n.link_state)(dev, link, &mut active) } != 0 || active == 0 {
                continue;
            }
            let mut kind: c_int = KIND_GPU;
            // SAFETY: as declared by NVML; writes one enum value. Missing (old drivers):
            // the far end is read as a GPU's address below.
            if let Some(f) = n.remote_type
                && unsafe { f(dev, link, &mut kind) } != 0
            {
                kind = KIND_GPU;
            }
            if kind == KIND_SWITCH {
                ends.push(NvLinkEnd::Switch);
                continue;
            }
            let mut info = PciInfo::default();
            // SAFETY: as declared by NVML; writes one `nvmlPciInfo_t`.
            if unsafe { (n.remote_pci)(dev, link, &mut info) } == 0
                && let Some(b) = bus_id(&info.bus_id).as_deref().and_then(parse)
            {
                ends.push(NvLinkEnd::Gpu(b));
            }
        }
        out.push((a, ends));
    }
    Some(out)
}

/// `NVML_NVLINK_MAX_LINKS`.
const MAX_LINKS: c_uint = 18;
/// `NVML_NVLINK_DEVICE_TYPE_GPU`, `_SWITCH`.
const KIND_GPU: c_int = 0;
const KIND_SWITCH: c_int = 2;

/// `nvmlPciInfo_t`.
#[repr(C)]
#[derive(Default)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

fn bus_id(b: &[c_char; 32]) -> Option<String> {
    let bytes: Vec<u8> = b
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    (!bytes.is_empty()).then(|| String::from_utf8_lossy(&bytes).into_owned())
}

type Dev = *mut c_void;

type Init = unsafe extern "C" fn() -> c_int;
type ByText = unsafe extern "C" fn(*const c_char, *mut Dev) -> c_int;
type PciOf = unsafe extern "C" fn(Dev, *mut PciInfo) -> c_int;
type LinkInt = unsafe extern "C" fn(Dev, c_uint, *mut c_int) -> c_int;
type LinkPci = unsafe extern "C" fn(Dev, c_uint, *mut PciInfo) -> c_int;

struct Nvml {
    by_pci: ByText,
    by_uuid: ByText,
    pci_info: PciOf,
    link_state: LinkInt,
    remote_pci: LinkPci,
    remote_type: Option<LinkInt>,
}

// SAFETY: function pointers into a library kept loaded for the process; NVML is thread-safe.
unsafe impl Send for Nvml {}
// SAFETY: as above.
unsafe impl Sync for Nvml {}

/// NVML, initialised once; `None` where it is absent (no NVIDIA driver) or fails to start.
fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(load).as_ref()
}

fn load() -> Option<Nvml> {
    // SAFETY: dlopen of the driver's management library, whose initialisers set up its own
    // state only; the handle is kept for the process (the functions point into it).
    let h = unsafe {
        libc::dlopen(
            c"libnvidia-ml.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        )
    };
    if h.is_null() {
        return None;
    }
    let sym = |name: &CStr| {
        // SAFETY: dlsym only looks a symbol up.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    // SAFETY: each symbol is the NVML function of that name, whose C declaration the
    // transmuted type matches.
    unsafe {
        use std::mem::transmute;
        let init = transmute::<*mut c_void, Init>(sym(c"nvmlInit_v2")?);
        let n = Nvml {
            by_pci: transmute::<*mut c_void, ByText>(sym(c"nvmlDeviceGetHandleByPciBusId_v2")?),
            by_uuid: transmute::<*mut c_void, ByText>(sym(c"nvmlDeviceGetHandleByUUID")?),
            pci_info: transmute::<*mut c_void, PciOf>(sym(c"nvmlDeviceGetPciInfo_v3")?),
            link_state: transmute::<*mut c_void, LinkInt>(sym(c"nvmlDeviceGetNvLinkState")?),
            remote_pci: transmute::<*mut c_void, LinkPci>(sym(
                c"nvmlDeviceGetNvLinkRemotePciInfo_v2",
            )?),
            remote_type: sym(c"nvmlDeviceGetNvLinkRemoteDeviceType")
                .map(|p| transmute::<*mut c_void, LinkInt>(p)),
        };
        if init() != 0 {
            rcomm_runtime::rlog!(Info, "TOPO", "NVML did not start: NVLink is not seen");
            return None;
        }
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_in_both_spellings_and_bad_ones() {
        let a = PciAddr {
            domain: 0,
            bus: 0x3b,
            dev: 0,
            func: 0,
        };
        assert_eq!(parse("0000:3b:00.0"), Some(a));
        assert_eq!(parse("00000000:3B:00.0"), Some(a));
        for bad in [
            "",
            "3b:00.0",
            "0000:3b:00",
            "0000:3b:20.0",
            "0000:3b:00.8",
            "1ffff:00:00.0",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(
            class_between("0000:3b:00.0", "00000000:3B:00.0"),
            PathClass::X
        );
        assert_eq!(class_between("", "0000:3b:00.0"), PathClass::Sys);
        assert_eq!(class_between("gpu-a", "GPU-A"), PathClass::X);
    }

    #[test]
    fn uuid_text_as_nvml_prints_it() {
        let u: [u8; 16] = std::array::from_fn(|i| (i * 17) as u8);
        assert_eq!(uuid_text(&u), "GPU-00112233-4455-6677-8899-aabbccddeeff");
    }

    #[test]
    fn nvml_pci_info_layout() {
        assert_eq!(std::mem::size_of::<PciInfo>(), 68);
        assert_eq!(std::mem::offset_of!(PciInfo, bus_id), 36);
    }
}
