//! The object behind an `MPI_Op`: predefined operations are the standard's constants; user
//! operations (`MPI_Op_create`, module `ops`) live in [`OPS`].

use crate::consts::*;
use crate::errors::{Res, err};
use crate::handles::{Kind, Registry};
use std::sync::Arc;

/// A user operation.
#[derive(Clone, Copy, Debug)]
pub struct UserOp {
    /// The `MPI_User_function` (or `MPI_User_function_c` when `large`) address.
    pub func: usize,
    /// Whether it commutes.
    pub commute: bool,
    /// Made by `MPI_Op_create_c` (counts are `MPI_Count`).
    pub large: bool,
}

/// User operations.
pub static OPS: Registry<UserOp> = Registry::new(Kind::Op);

/// What an `MPI_Op` names.
#[derive(Clone, Debug)]
pub enum OpRef {
    /// A predefined operation (its handle).
    Predefined(MPI_Op),
    /// A user operation.
    User(Arc<UserOp>),
}

/// The operation `h` names; `MPI_ERR_OP` for null, stale or foreign values.
pub fn get(h: MPI_Op) -> Res<OpRef> {
    if OPS_PREDEFINED.contains(&h) {
        return Ok(OpRef::Predefined(h));
    }
    OPS.get(h)
        .map(OpRef::User)
        .ok_or_else(|| err(MPI_ERR_OP, format!("{h:#x} is not an operation")))
}

/// The predefined operations (not `MPI_OP_NULL`).
pub const OPS_PREDEFINED: &[MPI_Op] = &[
    MPI_SUM,
    MPI_MIN,
    MPI_MAX,
    MPI_PROD,
    MPI_BAND,
    MPI_BOR,
    MPI_BXOR,
    MPI_LAND,
    MPI_LOR,
    MPI_LXOR,
    MPI_MINLOC,
    MPI_MAXLOC,
    MPI_REPLACE,
    MPI_NO_OP,
];
