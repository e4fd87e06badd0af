//! What the machine looks like: packages, NUMA nodes, cores, caches, PCI devices, NICs and
//! GPUs (`model`), read from sysfs (`sysfs`) or hwloc (`hwloc`, feature `hwloc`) or rcomm's
//! own file form (`json`), and the decisions made from it: how far apart two devices are
//! (`path`, and between GPUs named by PCI address with the driver's NVLinks: `gpu_link`) and
//! which GPU and NICs a rank uses (`choose`).

mod build;
pub mod choose;
mod error;
#[doc(hidden)]
pub mod fixture;
pub mod gpu_link;
#[cfg(feature = "hwloc")]
pub mod hwloc;
mod json;
mod jsonv;
pub mod model;
pub mod path;
pub mod sysfs;
#[doc(hidden)]
pub mod testkit;

pub use error::TopoError;
pub use gpu_link::{NvLinkEnd, p2p_allows, required_level};
pub use json::MAX_JSON;
pub use model::{
    Cache, Link, LinkKind, Obj, ObjId, ObjKind, OsDevKind, PciAddr, PcieLink, Source, Topology,
};
pub use path::PathClass;

/// This machine's topology: from `RCOMM_TOPO_FILE` when set (an unusable file is an error,
/// not a reason to guess), else from hwloc when built with feature `hwloc` (falling back to
/// sysfs, with a warning saying why, if hwloc fails), else from sysfs.
pub fn detect() -> Result<Topology, TopoError> {
    if let Some(path) = crate::config::topo_file() {
        return Topology::load(&path);
    }
    #[cfg(feature = "hwloc")]
    match hwloc::detect() {
        Ok(t) => return Ok(t),
        Err(e) => crate::rlog!(Warn, "TOPO", "{e}; reading sysfs instead"),
    }
    sysfs::read(std::path::Path::new("/"))
}

/// An hwloc XML export (`lstopo --of xml`), read through hwloc; an error naming the file when
/// this build has no hwloc (feature `hwloc`).
pub fn load_hwloc_xml(path: &std::path::Path) -> Result<Topology, TopoError> {
    #[cfg(feature = "hwloc")]
    return hwloc::load_xml(path);
    #[cfg(not(feature = "hwloc"))]
    Err(TopoError::File {
        path: path.display().to_string(),
        why: "this build reads hwloc XML only with feature `hwloc` (the system's libhwloc)".into(),
    })
}
