//! What the machine looks like: packages, NUMA nodes, cores, caches, PCI devices, NICs and
//! GPUs (`model`), read from sysfs or hwloc, and the decisions made from it.

mod error;
#[doc(hidden)]
pub mod fixture;
pub mod model;
pub mod sysfs;

pub use error::TopoError;
pub use model::{
    Cache, Link, LinkKind, Obj, ObjId, ObjKind, OsDevKind, PciAddr, PcieLink, Source, Topology,
};
