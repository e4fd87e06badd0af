//! What the machine looks like: packages, NUMA nodes, cores, caches, PCI devices, NICs and
//! GPUs (`model`), read from sysfs or hwloc, and the decisions made from it.

mod build;
mod error;
#[doc(hidden)]
pub mod fixture;
#[cfg(feature = "hwloc")]
pub mod hwloc;
mod json;
pub use json::MAX_JSON;
pub mod model;
pub mod sysfs;

pub use error::TopoError;
pub use model::{
    Cache, Link, LinkKind, Obj, ObjId, ObjKind, OsDevKind, PciAddr, PcieLink, Source, Topology,
};

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
