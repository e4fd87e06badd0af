//! `rcomm-mpi`: rsmpi 0.8's public API (library name `mpi`) over rcomm.
//!
//! A program written for rsmpi switches to rcomm by one line in its `Cargo.toml`:
//!
//! ```toml
//! mpi = { package = "rcomm-mpi", version = "0.1" }
//! ```
//!
//! and runs under `rcomm-run -n N prog` (or any launcher rcomm supports). The names and
//! signatures follow rsmpi; the bodies call rcomm. Where rsmpi's signature returns no `Result`,
//! an rcomm error prints rcomm's message and aborts the job, as MPI would. What differs from
//! rsmpi is listed in `docs/mpi-coverage.md` ("The rsmpi facade").
#![warn(missing_docs)]
// Signatures follow rsmpi's, bounds placed as there.
#![allow(clippy::multiple_bound_locations)]

pub mod attribute;
pub mod collective;
pub mod datatype;
pub mod environment;
pub mod ffi;
mod job;
pub mod point_to_point;
pub mod request;
mod status;
pub mod topology;

pub use environment::{
    Threading, initialize, initialize_with_threading, is_finalized, is_initialized, time,
    time_resolution,
};
pub use topology::Rank;

/// Error codes (rsmpi: `c_int`).
pub type Error = std::os::raw::c_int;
/// Element counts (MPI's `int`).
pub type Count = std::os::raw::c_int;
/// Message tags.
pub type Tag = std::os::raw::c_int;
/// Addresses and byte displacements (`MPI_Aint`).
pub type Address = isize;

/// An error from a call that reports errors (rsmpi's `MpiError`, the same variants and
/// messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MpiError {
    /// `Spawn(failed, asked)`: `failed` of the `asked` processes could not be started (rcomm
    /// starts all or none; its reason is printed on standard error).
    Spawn(Rank, Rank),
    /// A string passed on had an interior 0 byte.
    StringNul(std::ffi::NulError),
}

impl std::fmt::Display for MpiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MpiError::Spawn(failed, asked) => {
                write!(f, "Failed to spawn {failed} of {asked} processes")
            }
            MpiError::StringNul(_) => f.write_str("An interior 0 byte was found in string"),
        }
    }
}

impl std::error::Error for MpiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MpiError::StringNul(e) => Some(e),
            MpiError::Spawn(..) => None,
        }
    }
}

impl From<std::ffi::NulError> for MpiError {
    fn from(e: std::ffi::NulError) -> Self {
        MpiError::StringNul(e)
    }
}

/// Every trait a program needs, to `use mpi::traits::*`.
pub mod traits {
    pub use crate::attribute::traits::*;
    pub use crate::collective::traits::*;
    pub use crate::datatype::traits::*;
    pub use crate::point_to_point::traits::*;
    pub use crate::topology::traits::*;
    #[cfg(feature = "derive")]
    pub use rcomm_mpi_derive::Equivalence;
}

/// Internals used by `#[derive(Equivalence)]`'s expansion.
#[doc(hidden)]
pub mod internal {
    pub use crate::datatype::{array_of, cached_derived, dt_of, structure_of};
    pub use std::sync::OnceLock;
}

/// Prints `e` and ends the job (the whole job, as `MPI_Abort`), or panics before `initialize`.
#[doc(hidden)]
#[track_caller]
pub fn fail(e: &dyn std::fmt::Display) -> ! {
    let msg = format!("rcomm-mpi: {e} (at {})", std::panic::Location::caller());
    job::abort_job(1, &msg)
}

/// Unwraps an rcomm result, failing the job on error.
#[track_caller]
pub(crate) fn check<T>(r: rcomm::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => fail(&e),
    }
}
