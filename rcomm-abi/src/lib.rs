//! `libmpi_abi.so.1`: the MPI-5.0 standard ABI's C binding over rcomm. A C program built
//! against any MPI-5.0 ABI `mpi.h` (rcomm's, from `rcomm-cc`, or MPICH's `mpi_abi.h`) runs
//! on rcomm unchanged under `rcomm-run`.
//!
//! Every function is exported as `PMPI_x` (the definition) and `MPI_x` (a weak alias, so
//! profiling tools can interpose); functions not built yet report
//! `MPI_ERR_UNSUPPORTED_OPERATION` through the error handler (`stubs`).
//!
//! Module layout (who owns what):
//! - `consts`: types, struct layouts and every constant value of the ABI (the tables the
//!   header and its test use); `names`: the ABI's function names.
//! - `handles`: handle encoding and the tables of live objects (safe decoding).
//! - `errors`: error classes, strings, error handler objects; `ptr`: reading and writing the
//!   caller's pointers.
//! - `world`: the init phase, the world, communicator objects (with their handlers) and
//!   aborting; `call`: the path every function ends in (`guard` → `raise` → the handler).
//! - `env`: init/finalize, thread levels, abort, clocks, versions.
//! - `comm`: communicators; `group`: groups; `attr`: keyvals and attributes;
//!   `info`: info objects; `session`: sessions.
//! - `typeobj`: the datatype object and predefined types (derived ones fill it);
//!   `opobj`: the op object and predefined ops.
//! - `p2p`: point-to-point; `request`: requests and completion (the `Pending` trait
//!   collectives implement too).
//! - `conv`: `*_toint` / `*_fromint`; `header`: rcomm's `mpi.h`; `stubs`: the not-built ones.
//! - `coll`, `ops`, `dtype`, `topo`: collectives, reduction ops, datatype constructors and
//!   pack/unpack, topologies and neighbour collectives.
#![allow(non_snake_case, non_camel_case_types, non_upper_case_globals)]
// The exported functions take C's pointers and are called from C, where `unsafe` means
// nothing; every dereference goes through `ptr`, whose module states the one contract (MPI's
// rule on what callers pass) and checks null. Marking them `unsafe fn` would add no check.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod attr;
pub mod buffers;
pub mod call;
pub mod coll;
pub mod comm;
pub mod consts;
pub mod conv;
pub mod dtype;
pub mod env;
pub mod errors;
pub mod fuzzing;
pub mod grequest;
pub mod group;
pub mod handles;
pub mod header;
pub mod info;
pub mod layout;
/// The ABI's function names (the header's list), which `build.rs` also reads.
pub mod names;
pub mod opobj;
pub mod ops;
pub mod p2p;
pub mod p2p_abi;
pub mod ptr;
pub mod request;
pub mod session;
pub mod spawn;
pub mod stubs;
pub mod topo;
pub mod typeobj;
pub mod world;

include!(concat!(env!("OUT_DIR"), "/aliases.rs"));
