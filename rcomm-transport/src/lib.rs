//! rcomm's transport layer: the wire formats, identity, bootstrap, the local channel and the
//! transports. `rcomm-core` sees transports only through this crate's types.
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
pub mod sim;
pub mod sim_ep;
pub mod table;
pub mod tcp;
pub mod topo;
pub mod transport;
pub mod window;
pub mod wire;
