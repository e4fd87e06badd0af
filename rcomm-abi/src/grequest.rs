//! Generalized requests (`MPI_Grequest_start`, `MPI_Grequest_complete`): a request the program
//! completes itself, waited for and tested like any other through [`Pending`].

use crate::attr::FnPtr;
use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::ptr;
use crate::request::{self, Pending};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// C typedef names, for [`FnPtr`].
pub mod ctypes {
    /// `MPI_Grequest_query_function`.
    pub enum MPI_Grequest_query_function {}
    /// `MPI_Grequest_free_function`.
    pub enum MPI_Grequest_free_function {}
    /// `MPI_Grequest_cancel_function`.
    pub enum MPI_Grequest_cancel_function {}
}
use ctypes::*;

type QueryFn = unsafe extern "C" fn(*mut c_void, *mut MPI_Status) -> c_int;
type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type CancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// The completion flag of each live generalized request, by handle: `MPI_Grequest_complete`
/// gets the handle only, and the request's operation sits behind `dyn Pending`.
static COMPLETE: Mutex<Option<HashMap<MPI_Request, Arc<AtomicBool>>>> = Mutex::new(None);

fn flags<R>(f: impl FnOnce(&mut HashMap<MPI_Request, Arc<AtomicBool>>) -> R) -> R {
    f(COMPLETE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new))
}

struct Greq {
    query: usize,
    free: usize,
    cancel: usize,
    extra: usize,
    done: Arc<AtomicBool>,
    /// The free function ran (at completion, so that the completing call reports its error).
    freed: bool,
}

impl Greq {
    fn call_free(&mut self) -> Res {
        if std::mem::replace(&mut self.freed, true) || self.free == 0 {
            return Ok(());
        }
        // SAFETY: the program passed this address as an MPI_Grequest_free_function; it runs
        // once.
        let f: FreeFn = unsafe { std::mem::transmute(self.free) };
        // SAFETY: the callback gets back the program's own extra state.
        code(unsafe { f(self.extra as *mut c_void) }, "free")
    }
}

fn code(rc: c_int, what: &str) -> Res {
    if rc == MPI_SUCCESS {
        Ok(())
    } else {
        Err(err(
            rc,
            format!("the generalized request's {what} function failed"),
        ))
    }
}

impl Pending for Greq {
    fn test(&mut self) -> Res<Option<MPI_Status>> {
        if !self.done.load(Ordering::Acquire) {
            return Ok(None);
        }
        let mut st = request::empty_status();
        if self.query != 0 {
            // SAFETY: the program passed this address as an MPI_Grequest_query_function.
            let f: QueryFn = unsafe { std::mem::transmute(self.query) };
            // SAFETY: the callback gets back the program's own extra state and a status.
            let queried = code(unsafe { f(self.extra as *mut c_void, &mut st) }, "query");
            if queried.is_err() {
                let _ = self.call_free();
                return queried.map(|()| None);
            }
        }
        self.call_free()?;
        Ok(Some(st))
    }

    fn cancel(&mut self) -> Res<bool> {
        if self.cancel != 0 {
            // SAFETY: the program passed this address as an MPI_Grequest_cancel_function.
            let f: CancelFn = unsafe { std::mem::transmute(self.cancel) };
            let complete = c_int::from(self.done.load(Ordering::Acquire));
            // SAFETY: as for the query function.
            code(unsafe { f(self.extra as *mut c_void, complete) }, "cancel")?;
        }
        // Whether it was cancelled is the query function's word (MPI_Status_set_cancelled).
        Ok(false)
    }
}

impl Drop for Greq {
    fn drop(&mut self) {
        flags(|m| m.retain(|_, f| !Arc::ptr_eq(f, &self.done)));
        // A request freed before it completed: nobody is left to report a failure to.
        let _ = self.call_free();
    }
}

/// `MPI_Grequest_start`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Grequest_start(
    query_fn: FnPtr<MPI_Grequest_query_function>,
    free_fn: FnPtr<MPI_Grequest_free_function>,
    cancel_fn: FnPtr<MPI_Grequest_cancel_function>,
    extra_state: *mut c_void,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Grequest_start", None, || {
        if request.is_null() {
            return Err(err(MPI_ERR_ARG, "request is a null pointer"));
        }
        let done = Arc::new(AtomicBool::new(false));
        let g = Greq {
            query: query_fn.addr(),
            free: free_fn.addr(),
            cancel: cancel_fn.addr(),
            extra: extra_state as usize,
            done: done.clone(),
            freed: false,
        };
        let h = request::insert(Box::new(g), MPI_COMM_SELF)?;
        flags(|m| m.insert(h, done));
        ptr::write(request, h, "request")
    })
}

/// `MPI_Grequest_complete`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Grequest_complete(request: MPI_Request) -> c_int {
    guard("MPI_Grequest_complete", None, || {
        let f = flags(|m| m.get(&request).cloned()).ok_or_else(|| {
            err(
                MPI_ERR_REQUEST,
                format!("{request:#x} is not a live generalized request"),
            )
        })?;
        f.store(true, Ordering::Release);
        Ok(())
    })
}
