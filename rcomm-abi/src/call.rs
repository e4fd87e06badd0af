//! The path every exported function ends in: its body runs under [`guard`], and an error (or a
//! panic) goes through [`raise`] to the error handler of the communicator it concerns.

use crate::consts::*;
use crate::errors::{Error, Handler, Res, class_of, class_string, err, handler};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Reports `e` from `func` through the error handler of `comm` (when it names a live
/// communicator) or else `MPI_COMM_WORLD`'s (the default before init: fatal). Returns the
/// code the call returns when the handler returns.
pub fn raise(func: &str, comm: Option<MPI_Comm>, e: Error) -> c_int {
    let (comm, errh) = match comm.and_then(crate::world::errhandler_of) {
        Some(h) => (comm.unwrap_or(MPI_COMM_WORLD), h),
        None => (
            MPI_COMM_WORLD,
            crate::world::errhandler_of(MPI_COMM_WORLD).unwrap_or(MPI_ERRORS_ARE_FATAL),
        ),
    };
    match handler(errh).unwrap_or(Handler::Fatal) {
        Handler::Return => e.code,
        Handler::Comm(f) | Handler::Session(f) => {
            let mut c = comm;
            let mut code = e.code;
            // SAFETY: `f` is the function the program registered with
            // MPI_Comm_create_errhandler; it gets pointers to two live locals.
            unsafe { f(&mut c, &mut code) };
            e.code
        }
        Handler::Fatal | Handler::Abort => {
            let msg = format!(
                "{func}: {} ({})",
                e.msg,
                class_string(class_of(e.code)).unwrap_or("unknown error")
            );
            crate::world::abort_job(comm, e.code.max(1), &msg)
        }
    }
}

/// Runs an exported function's body: its error (or a panic, as `MPI_ERR_INTERN`) goes through
/// [`raise`] with `comm` as the communicator whose handler applies.
#[inline(always)]
pub fn guard(func: &'static str, comm: Option<MPI_Comm>, body: impl FnOnce() -> Res) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => MPI_SUCCESS,
        Ok(Err(e)) => failed(func, comm, e),
        Err(p) => panicked(func, comm, p),
    }
}

/// [`guard`] for a body that learns as it goes whose handler applies (a request's
/// communicator, known once the request is looked up): it sets the slot it is given.
#[inline(always)]
pub fn guard_late(func: &'static str, body: impl FnOnce(&mut Option<MPI_Comm>) -> Res) -> c_int {
    let mut comm = None;
    match catch_unwind(AssertUnwindSafe(|| body(&mut comm))) {
        Ok(Ok(())) => MPI_SUCCESS,
        Ok(Err(e)) => failed(func, comm, e),
        Err(p) => panicked(func, comm, p),
    }
}

/// [`raise`], kept out of every exported function's body (a success path is all that runs
/// there in a healthy program).
#[cold]
#[inline(never)]
fn failed(func: &str, comm: Option<MPI_Comm>, e: Error) -> c_int {
    raise(func, comm, e)
}

/// A panic in a body, reported as `MPI_ERR_INTERN`.
#[cold]
#[inline(never)]
fn panicked(func: &str, comm: Option<MPI_Comm>, p: Box<dyn std::any::Any + Send>) -> c_int {
    let why = p
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| p.downcast_ref::<&str>().copied())
        .unwrap_or("panic");
    raise(
        func,
        comm,
        err(MPI_ERR_INTERN, format!("internal error: {why}")),
    )
}
