//! rcomm's transports: the transport contract and table, the local channel, shared memory,
//! TCP, InfiniBand and the GPU device layer. `rcomm-core` sees transports only through this
//! crate's types. What every process shares without naming a transport (configuration, wire
//! formats, bootstrap, topology, the flight recorder, the algorithm registry) is
//! `rcomm-runtime`, below this crate.
//!
//! Two features hold what only tests and fuzzers use, and are off unless a test or fuzz crate
//! asks for them (rcomm's libraries and binaries never do):
//!
//! - `sim`: the simulated fabrics — `sim` (a virtual-time network), `sim_ep` (a transport
//!   over it, its row of the [`table`] and `Net::sim`) and `ib::sim` (a simulated verbs HCA,
//!   `ib::AnyVerbs::Sim` and `Net::ib_only`).
//! - `fuzzing`: `fuzzing`, one entry point per decoder of untrusted bytes, for `fuzz/` and
//!   the in-CI fuzzers.
#![warn(missing_docs)]

// Compatibility re-exports: these modules moved to `rcomm-runtime`; the old paths keep working
// for one release. New code names `rcomm_runtime::...`.
#[doc(hidden)]
pub use rcomm_runtime::{
    algo, auth, bootstrap, config, dense, fastmap, flight, identity, ifaddr, os, rlog, topo, wire,
};

pub mod caps;
pub mod cuda_ep;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod gpu;
pub mod ib;
pub mod local;
pub mod mem;
pub mod net;
pub mod setup;
pub mod shm;
pub mod shmnet;
#[cfg(feature = "sim")]
pub mod sim;
#[cfg(feature = "sim")]
pub mod sim_ep;
pub mod table;
pub mod tcp;
pub mod transport;
pub mod window;
