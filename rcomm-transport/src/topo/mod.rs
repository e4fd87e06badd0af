//! What the machine looks like: packages, NUMA nodes, cores, caches, PCI devices, NICs and
//! GPUs (`model`), read from sysfs or hwloc, and the decisions made from it: how far apart two
//! devices are (`path`) and which GPU and NICs a rank uses (`choose`).

pub mod choose;
// TEMPORARY: replaced by the real detection on merge (see the file).
mod detect_shim;
pub mod model;
pub mod path;
#[doc(hidden)]
pub mod testkit;

pub use detect_shim::detect;
pub use model::{
    Cache, Link, LinkKind, Obj, ObjId, ObjKind, OsDevKind, PciAddr, PcieLink, Source, Topology,
};
pub use path::PathClass;
