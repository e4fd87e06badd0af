//! The functions of the ABI not built yet. Each is exported (a binary that names one links
//! and runs) and reports `MPI_ERR_UNSUPPORTED_OPERATION`, naming itself, through the error
//! handler of its communicator argument (when its first parameter is one) or of
//! `MPI_COMM_WORLD`. `build.rs` writes them: every name of `names::ABI_FUNCTIONS` that no
//! module defines; [`NOT_BUILT`] lists them for docs/mpi-coverage.md and its test.

use crate::call::raise;
use crate::consts::*;
use crate::errors::err;

/// Reports that `func` is not built.
pub fn unsupported(func: &'static str, comm: Option<MPI_Comm>) -> c_int {
    raise(
        func,
        comm,
        err(
            MPI_ERR_UNSUPPORTED_OPERATION,
            format!("{func} is not built in rcomm's C ABI yet (see docs/mpi-coverage.md)"),
        ),
    )
}

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
