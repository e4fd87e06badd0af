//! Errors: the MPI error classes a call reports, error handler objects, error strings and
//! user-added classes and codes. The call path that reports an error through a handler is in
//! `call`.

use crate::consts::*;
use crate::handles::{Kind, Registry};
use std::collections::HashMap;
use std::sync::Mutex;

/// Removing added classes, codes and strings.
pub mod remove;

/// A failed call: its MPI error class (or added code) and what went wrong, for the message a
/// fatal handler prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The error code returned / passed to the handler.
    pub code: c_int,
    /// Why, in words.
    pub msg: String,
}

/// A call's result.
pub type Res<T = ()> = Result<T, Error>;

/// An error of `code`.
pub fn err(code: c_int, msg: impl Into<String>) -> Error {
    Error {
        code,
        msg: msg.into(),
    }
}

impl From<rcomm::CommError> for Error {
    fn from(e: rcomm::CommError) -> Self {
        use rcomm::CommError as E;
        let code = match &e {
            E::InvalidRank { .. } => MPI_ERR_RANK,
            E::Truncated { .. } => MPI_ERR_TRUNCATE,
            E::InvalidTag { .. } => MPI_ERR_TAG,
            E::PeerLost { .. } | E::PeerHung { .. } => MPI_ERR_PROC_ABORTED,
            E::InvalidArg(_) => MPI_ERR_ARG,
            E::Size { .. } => MPI_ERR_TRUNCATE,
            E::Exhausted(_) => MPI_ERR_NO_MEM,
            E::Spawn(_) => MPI_ERR_SPAWN,
            _ => MPI_ERR_OTHER,
        };
        err(code, e.to_string())
    }
}

/// What an error handler does.
#[derive(Debug, Clone, Copy)]
pub enum Handler {
    /// Print the error and abort the job (`MPI_ERRORS_ARE_FATAL`).
    Fatal,
    /// Print the error and abort the communicator's processes (`MPI_ERRORS_ABORT`); rcomm
    /// aborts the job, which contains them.
    Abort,
    /// Return the code (`MPI_ERRORS_RETURN`).
    Return,
    /// A user's `MPI_Comm_errhandler_function`, called with the communicator and code.
    Comm(CommErrhandlerFn),
    /// A user's session handler (sessions report through it).
    Session(CommErrhandlerFn),
}

/// `MPI_Comm_errhandler_function` (its C type is variadic; rcomm passes the two named
/// arguments, which the SysV and AAPCS64 conventions pass identically).
pub type CommErrhandlerFn = unsafe extern "C" fn(*mut usize, *mut c_int);

/// User error handlers (`MPI_Comm_create_errhandler`); the predefined ones are constants.
pub static ERRHANDLERS: Registry<Handler> = Registry::new(Kind::Errhandler);

/// The handler an `MPI_Errhandler` names.
pub fn handler(h: MPI_Errhandler) -> Res<Handler> {
    match h {
        MPI_ERRORS_ARE_FATAL => Ok(Handler::Fatal),
        MPI_ERRORS_ABORT => Ok(Handler::Abort),
        MPI_ERRORS_RETURN => Ok(Handler::Return),
        _ => ERRHANDLERS.get(h).map(|a| *a).ok_or_else(|| {
            err(
                MPI_ERR_ERRHANDLER,
                format!("{h:#x} is not an error handler"),
            )
        }),
    }
}

/// Classes and codes added by `MPI_Add_error_class` / `MPI_Add_error_code`, with their strings.
struct Added {
    last: c_int,
    class_of: HashMap<c_int, c_int>,
    strings: HashMap<c_int, String>,
}

static ADDED: Mutex<Option<Added>> = Mutex::new(None);

fn added<R>(f: impl FnOnce(&mut Added) -> R) -> R {
    let mut g = ADDED.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(|| Added {
        last: MPI_ERR_LASTCODE,
        class_of: HashMap::new(),
        strings: HashMap::new(),
    }))
}

/// A new error class (above `MPI_ERR_LASTCODE`).
pub fn add_class() -> c_int {
    added(|a| {
        a.last += 1;
        a.class_of.insert(a.last, a.last);
        a.last
    })
}

/// A new error code of `class`.
pub fn add_code(class: c_int) -> Res<c_int> {
    added(|a| {
        let known = (0..=MPI_ERR_ABI).contains(&class) || a.class_of.get(&class) == Some(&class);
        if !known {
            return Err(err(MPI_ERR_ARG, format!("{class} is not an error class")));
        }
        a.last += 1;
        a.class_of.insert(a.last, class);
        Ok(a.last)
    })
}

/// Sets the string of an added class or code.
pub fn add_string(code: c_int, s: &str) -> Res {
    added(|a| {
        if !a.class_of.contains_key(&code) {
            return Err(err(
                MPI_ERR_ARG,
                format!("{code} is not an added error code"),
            ));
        }
        a.strings.insert(code, s.to_owned());
        Ok(())
    })
}

/// The largest code in use (`MPI_LASTUSEDCODE`).
pub fn last_used_code() -> c_int {
    added(|a| a.last)
}

/// The class of a code: standard codes are their own class.
pub fn class_of(code: c_int) -> c_int {
    if (0..=MPI_ERR_ABI).contains(&code)
        || (MPI_T_ERR_CANNOT_INIT..=MPI_T_ERR_PVAR_NO_ATOMIC).contains(&code)
    {
        return code;
    }
    added(|a| a.class_of.get(&code).copied()).unwrap_or(MPI_ERR_UNKNOWN)
}

/// Whether `code` is a standard or added code.
pub fn is_code(code: c_int) -> bool {
    (0..=MPI_ERR_ABI).contains(&code)
        || (MPI_T_ERR_CANNOT_INIT..=MPI_T_ERR_PVAR_NO_ATOMIC).contains(&code)
        || added(|a| a.class_of.contains_key(&code))
}

/// The string of any code: an added one's own (empty until set), else its class's.
pub fn code_string(code: c_int) -> Option<String> {
    // An added class or code has the empty string until MPI_Add_error_string gives it one.
    if let Some(s) = added(|a| {
        (a.class_of.contains_key(&code)).then(|| a.strings.get(&code).cloned().unwrap_or_default())
    }) {
        return Some(s);
    }
    class_string(class_of(code)).map(str::to_owned)
}

/// What each standard error class means.
pub fn class_string(class: c_int) -> Option<&'static str> {
    Some(match class {
        MPI_SUCCESS => "MPI_SUCCESS: no error",
        MPI_ERR_BUFFER => "MPI_ERR_BUFFER: invalid buffer pointer",
        MPI_ERR_COUNT => "MPI_ERR_COUNT: invalid count argument",
        MPI_ERR_TYPE => "MPI_ERR_TYPE: invalid datatype",
        MPI_ERR_TAG => "MPI_ERR_TAG: invalid tag",
        MPI_ERR_COMM => "MPI_ERR_COMM: invalid communicator",
        MPI_ERR_RANK => "MPI_ERR_RANK: invalid rank",
        MPI_ERR_REQUEST => "MPI_ERR_REQUEST: invalid request",
        MPI_ERR_ROOT => "MPI_ERR_ROOT: invalid root",
        MPI_ERR_GROUP => "MPI_ERR_GROUP: invalid group",
        MPI_ERR_OP => "MPI_ERR_OP: invalid reduction operation",
        MPI_ERR_TOPOLOGY => "MPI_ERR_TOPOLOGY: invalid topology",
        MPI_ERR_DIMS => "MPI_ERR_DIMS: invalid dimension argument",
        MPI_ERR_ARG => "MPI_ERR_ARG: invalid argument",
        MPI_ERR_UNKNOWN => "MPI_ERR_UNKNOWN: unknown error",
        MPI_ERR_TRUNCATE => "MPI_ERR_TRUNCATE: message truncated",
        MPI_ERR_OTHER => "MPI_ERR_OTHER: other error",
        MPI_ERR_INTERN => "MPI_ERR_INTERN: internal error",
        MPI_ERR_PENDING => "MPI_ERR_PENDING: pending request",
        MPI_ERR_IN_STATUS => "MPI_ERR_IN_STATUS: error code is in status",
        MPI_ERR_ACCESS => "MPI_ERR_ACCESS: permission denied",
        MPI_ERR_AMODE => "MPI_ERR_AMODE: invalid file access mode",
        MPI_ERR_ASSERT => "MPI_ERR_ASSERT: invalid assertion",
        MPI_ERR_BAD_FILE => "MPI_ERR_BAD_FILE: invalid file name",
        MPI_ERR_BASE => "MPI_ERR_BASE: invalid base",
        MPI_ERR_CONVERSION => "MPI_ERR_CONVERSION: data conversion failed",
        MPI_ERR_DISP => "MPI_ERR_DISP: invalid displacement",
        MPI_ERR_DUP_DATAREP => "MPI_ERR_DUP_DATAREP: data representation already defined",
        MPI_ERR_FILE_EXISTS => "MPI_ERR_FILE_EXISTS: file exists",
        MPI_ERR_FILE_IN_USE => "MPI_ERR_FILE_IN_USE: file in use",
        MPI_ERR_FILE => "MPI_ERR_FILE: invalid file",
        MPI_ERR_INFO_KEY => "MPI_ERR_INFO_KEY: info key too long",
        MPI_ERR_INFO_NOKEY => "MPI_ERR_INFO_NOKEY: no such info key",
        MPI_ERR_INFO_VALUE => "MPI_ERR_INFO_VALUE: info value too long",
        MPI_ERR_INFO => "MPI_ERR_INFO: invalid info object",
        MPI_ERR_IO => "MPI_ERR_IO: I/O error",
        MPI_ERR_KEYVAL => "MPI_ERR_KEYVAL: invalid attribute key",
        MPI_ERR_LOCKTYPE => "MPI_ERR_LOCKTYPE: invalid lock type",
        MPI_ERR_NAME => "MPI_ERR_NAME: invalid service name",
        MPI_ERR_NO_MEM => "MPI_ERR_NO_MEM: out of memory",
        MPI_ERR_NOT_SAME => "MPI_ERR_NOT_SAME: arguments differ between processes",
        MPI_ERR_NO_SPACE => "MPI_ERR_NO_SPACE: no space left",
        MPI_ERR_NO_SUCH_FILE => "MPI_ERR_NO_SUCH_FILE: no such file",
        MPI_ERR_PORT => "MPI_ERR_PORT: invalid port",
        MPI_ERR_QUOTA => "MPI_ERR_QUOTA: quota exceeded",
        MPI_ERR_READ_ONLY => "MPI_ERR_READ_ONLY: read-only file",
        MPI_ERR_RMA_ATTACH => "MPI_ERR_RMA_ATTACH: memory cannot be attached",
        MPI_ERR_RMA_CONFLICT => "MPI_ERR_RMA_CONFLICT: conflicting window accesses",
        MPI_ERR_RMA_RANGE => "MPI_ERR_RMA_RANGE: target memory outside the window",
        MPI_ERR_RMA_SHARED => "MPI_ERR_RMA_SHARED: memory cannot be shared",
        MPI_ERR_RMA_SYNC => "MPI_ERR_RMA_SYNC: wrong window synchronization",
        MPI_ERR_SERVICE => "MPI_ERR_SERVICE: invalid service",
        MPI_ERR_SIZE => "MPI_ERR_SIZE: invalid size",
        MPI_ERR_SPAWN => "MPI_ERR_SPAWN: spawn failed",
        MPI_ERR_UNSUPPORTED_DATAREP => {
            "MPI_ERR_UNSUPPORTED_DATAREP: unsupported data representation"
        }
        MPI_ERR_UNSUPPORTED_OPERATION => "MPI_ERR_UNSUPPORTED_OPERATION: operation not supported",
        MPI_ERR_WIN => "MPI_ERR_WIN: invalid window",
        MPI_ERR_RMA_FLAVOR => "MPI_ERR_RMA_FLAVOR: wrong window flavor",
        MPI_ERR_PROC_ABORTED => "MPI_ERR_PROC_ABORTED: a peer process aborted",
        MPI_ERR_VALUE_TOO_LARGE => "MPI_ERR_VALUE_TOO_LARGE: value too large for the output",
        MPI_ERR_SESSION => "MPI_ERR_SESSION: invalid session",
        MPI_ERR_ERRHANDLER => "MPI_ERR_ERRHANDLER: invalid error handler",
        MPI_ERR_ABI => "MPI_ERR_ABI: ABI mismatch",
        c if (MPI_T_ERR_CANNOT_INIT..=MPI_T_ERR_PVAR_NO_ATOMIC).contains(&c) => {
            "MPI_T error (the tool interface is not built)"
        }
        _ => return None,
    })
}
