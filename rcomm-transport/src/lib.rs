//! rcomm's transports: the transport contract and table, the local channel, shared memory,
//! TCP, InfiniBand, the GPU device layer and the test fabrics. `rcomm-core` sees transports only
//! through this crate's types. What every process shares without naming a transport
//! (configuration, wire formats, bootstrap, topology, ...) is `rcomm-runtime`, below this crate.
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
pub mod sim;
pub mod sim_ep;
pub mod table;
pub mod tcp;
pub mod transport;
pub mod window;
