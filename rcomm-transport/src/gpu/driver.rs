//! The CUDA driver backend: the raw driver API of cudarc (`cudarc::driver::sys`), loaded at run
//! time. Only entry points that CUDA 12 and CUDA 13 drivers both have are called, and all of
//! them are looked up in [`Driver::load`], so a missing one is an error there, never a panic
//! later.
//!
//! Contexts: each device's primary context (the one cudarc's `CudaContext::new` uses too),
//! retained on first use and kept, made current on the calling thread before each operation;
//! a call that names no device uses this process's, decided once (`cuda/home.rs`).
//! IPC copies run on one internal non-blocking copy stream per device; their completion is an
//! event recorded after the copy. The copies that return when done run on another internal
//! non-blocking stream per device (`cuda/copy.rs`): nothing runs on the legacy default stream.
//! Allocation kinds and their sharing by file descriptor: `cuda/share.rs`.
//!
//! Peer reachability is kept simple: the same GPU is reachable unless `RCOMM_P2P_LEVEL=off`;
//! two GPUs are when `cuDeviceCanAccessPeer` says so and the level is at least `nvl` (the
//! actual link between them is not looked at).
//!
//! The backend is `cuda`; `absent` takes its place in a build without the `cuda` feature.
use super::*;
use crate::mem::RKey;

#[cfg(not(feature = "cuda"))]
mod absent;
#[cfg(feature = "cuda")]
mod cuda;

#[cfg(not(feature = "cuda"))]
pub use absent::Driver;
#[cfg(feature = "cuda")]
pub use cuda::Driver;
