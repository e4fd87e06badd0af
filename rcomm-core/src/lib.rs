//! rcomm: MPI-style message passing and NCCL-class collectives in Rust.
//!
//! Start with [`init`], which finds the other ranks of the job (started by `rcomm-run`, or a
//! world of one when run alone) and returns the [`World`]:
//!
//! ```
//! let world = rcomm::init()?;
//! println!("rank {} of {} on {}", world.rank(), world.size(), world.hostname());
//! for r in 0..world.size() {
//!     let p = world.peer(r)?;
//!     println!("  rank {r}: {} pid {} same node: {}", p.hostname, p.pid, world.same_node(r)?);
//! }
//! # Ok::<(), rcomm::CommError>(())
//! ```
#![warn(missing_docs)]

// The README's and the book's Rust samples, compiled (and where one rank can, run) as this
// crate's doctests: a sample that stops compiling fails `cargo test`.
#[cfg(doctest)]
mod book {
    #[doc = include_str!("../../README.md")]
    struct Readme;
    #[doc = include_str!("../../book/src/using.md")]
    struct Using;
    #[doc = include_str!("../../book/src/guide/groups-and-meshes.md")]
    struct GroupsAndMeshes;
    #[doc = include_str!("../../book/src/guide/gpu.md")]
    struct Gpu;
}

mod attr;
mod bsend;
pub mod coll;
mod coll_state;
mod comm;
mod comm_attr;
mod ctxid;
pub mod datatype;
mod elems;
mod environment;
mod error;
mod fr;
pub mod gpu;
mod graph;
mod group;
pub mod mesh;
pub mod neighbor;
mod nvtx;
pub mod p2p;
mod reqset;
pub mod schedule;
mod shared_buf;
pub mod straggler;
mod topo;
mod world;

pub use attr::{AttrCopy, AttrCopyFn, Keyval};
pub use bsend::{BSEND_OVERHEAD, buffer_attach, buffer_detach};
pub use coll::{CollRequest, Dtype, Element, Op, ReduceOp, UserOp};
pub use comm::start_all;
pub use comm::{
    Collectives, Communicator, Device, Message, Persistent, RawRequest, RawSendMode, Request,
    Scope, ScopedRequest, Tag, TopoPart, test_all, test_any, test_some, wait_all, wait_any,
    wait_some,
};
pub use elems::{CheckedCollRequest, CheckedElem, CheckedRecv, Logical};
pub use environment::{ThreadLevel, init_thread, processor_name, query_thread, standard_version};
pub use environment::{library_version, reduce_local, wtick, wtime};
pub use error::CommError;
pub use fr::CollRecord;
pub use graph::GraphComm;
pub use group::{Comparison, Group, SplitType};
pub use mesh::{Mesh, MeshBuilder};
pub use p2p::engine::Status;
pub use p2p::matcher::Source;
/// The layout planner behind `rcomm-plan` (crate `rcomm-planner`), at its old path.
pub use rcomm_planner as plan;
pub use rcomm_runtime::identity::PeerInfo;
pub use rcomm_transport::net::NetCounters;
pub use reqset::{
    Pending, test_all_of, test_any_of, test_some_of, wait_all_of, wait_any_of, wait_some_of,
};
pub use shared_buf::SharedBuf;
pub use straggler::{RankLateness, StragglerReport};
pub use topo::{CartComm, dims_create};
pub use world::spawn::{InterComm, SpawnCommand};
pub use world::{World, init};

/// The collective algorithms rcomm has for `op` (`allreduce`, `bcast`, …), as `RCOMM_ALGO`
/// and [`Communicator::with_algo`] name them, `auto` first; empty for an unknown op.
pub fn algorithms(op: &str) -> &'static [&'static str] {
    rcomm_runtime::algo::Coll::from_name(op).map_or(&[], |c| c.algo_names())
}

/// `Result` with [`CommError`].
pub type Result<T, E = CommError> = std::result::Result<T, E>;
