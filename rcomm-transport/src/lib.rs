//! rcomm's transport layer: the wire formats, identity, bootstrap, the local channel and the
//! transports. `rcomm-core` sees transports only through this crate's types.
//!
//! Two features hold what only tests and fuzzers use, and are off unless a test or fuzz crate
//! asks for them (rcomm's libraries and binaries never do):
//!
//! - `sim`: the simulated fabrics — `sim` (a virtual-time network), `sim_ep` (a transport
//!   over it, its row of the [`table`] and `Net::sim`), `ib::sim` (a simulated verbs HCA,
//!   `ib::AnyVerbs::Sim` and `Net::ib_only`) — and the simulated machines of `topo::fixture`
//!   and `topo::testkit`.
//! - `fuzzing`: `fuzzing`, one entry point per decoder of untrusted bytes, for `fuzz/` and
//!   the in-CI fuzzers.
#![warn(missing_docs)]

pub mod algo;
pub mod auth;
pub mod bootstrap;
pub mod caps;
pub mod config;
pub mod cuda_ep;
pub mod dense;
pub mod error;
pub mod fastmap;
pub mod flight;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod gpu;
pub mod ib;
pub mod identity;
pub mod ifaddr;
pub mod local;
pub mod mem;
pub mod net;
pub mod os;
pub mod setup;
pub mod shm;
pub mod shmnet;
#[cfg(feature = "sim")]
pub mod sim;
#[cfg(feature = "sim")]
pub mod sim_ep;
pub mod table;
pub mod tcp;
pub mod topo;
pub mod transport;
pub mod window;
pub mod wire;
