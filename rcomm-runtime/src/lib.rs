//! rcomm's process runtime, shared by the launcher and every rank: the environment's
//! configuration (`config`, the one place `RCOMM_*` is parsed, and the `rlog!` logging it
//! governs), the operating-system calls (`os`), the wire formats (`wire`), the job secret
//! (`auth`), who a process is (`identity`), how ranks find each other (`bootstrap`), the
//! machine's topology (`topo`), the flight recorder (`flight`), the algorithm registry (`algo`),
//! and the small hot-path tables they and the transports use (`fastmap`, `dense`). It names no
//! transport: those live in `rcomm-transport`, above it.
#![warn(missing_docs)]

pub mod algo;
pub mod auth;
pub mod bootstrap;
pub mod config;
pub mod dense;
pub mod fastmap;
pub mod flight;
pub mod identity;
pub mod ifaddr;
pub mod os;
pub mod topo;
pub mod wire;
