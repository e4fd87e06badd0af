//! The few C MPI names that rsmpi programs spell out. rcomm has no C library behind it: these
//! exist so that code naming them (user operations' signatures) compiles unchanged.
#![allow(non_camel_case_types)]

/// An opaque datatype handle, as passed to [`UnsafeUserOperation`](crate::collective::UnsafeUserOperation)
/// functions (rcomm passes a null pointer).
#[repr(C)]
pub struct MPI_Datatype {
    _opaque: [u8; 0],
}

/// An opaque communicator handle.
#[repr(C)]
pub struct MPI_Comm {
    _opaque: [u8; 0],
}

/// An opaque operation handle.
#[repr(C)]
pub struct MPI_Op {
    _opaque: [u8; 0],
}

/// `MPI_UNDEFINED`.
pub const MPI_UNDEFINED: std::os::raw::c_int = -32766;
/// `MPI_ANY_SOURCE`.
pub const MPI_ANY_SOURCE: std::os::raw::c_int = -1;
/// `MPI_ANY_TAG`.
pub const MPI_ANY_TAG: std::os::raw::c_int = -1;
