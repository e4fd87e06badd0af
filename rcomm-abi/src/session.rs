//! Sessions (MPI-4): a session is a handle on the one world rcomm runs in, with its own
//! error handler and info. Its process sets are `mpi://WORLD` and `mpi://SELF`; groups made
//! from them become communicators with `MPI_Comm_create_from_group` (rcomm's
//! `create_group` over the world, collective over the group only).
//!
//! A session started before `MPI_Init` starts the world as `MPI_Init` would (a later
//! `MPI_Init` is then refused), and finalizing the last such session finalizes it.

use crate::buffers::Owner;
use crate::call::guard;
use crate::consts::*;
use crate::errors::{Error, Handler, Res, err};
use crate::handles::{Kind, Registry};
use crate::ptr;
use std::ffi::{c_char, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// What an `MPI_Session` names.
pub struct SessionObj {
    /// Its error handler.
    errhandler: Mutex<MPI_Errhandler>,
    /// The info it was started with.
    info: Vec<(String, String)>,
}

static SESSIONS: Registry<SessionObj> = Registry::new(Kind::Session);

/// Whether a session (not `MPI_Init`) started the world.
static STARTED_WORLD: AtomicBool = AtomicBool::new(false);

/// Live sessions.
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn get(h: MPI_Session) -> Res<std::sync::Arc<SessionObj>> {
    SESSIONS
        .get(h)
        .ok_or_else(|| err(MPI_ERR_SESSION, format!("{h:#x} is not a live session")))
}

/// Runs a session function's body; an error goes to the session's handler (the world's when
/// the session is not live, as for any other call).
fn sguard(func: &'static str, session: MPI_Session, body: impl FnOnce() -> Res) -> c_int {
    let Ok(s) = get(session) else {
        return guard(func, None, body);
    };
    let errh = *s.errhandler.lock().unwrap_or_else(|p| p.into_inner());
    // The body runs under `guard` with errors returned, so only the session handler acts.
    let mut e: Option<Error> = None;
    let rc = guard(func, None, || {
        body().inspect_err(|x| e = Some(x.clone())).or(Ok(()))
    });
    let Some(e) = e else { return rc };
    match crate::errors::handler(errh).unwrap_or(Handler::Fatal) {
        Handler::Return => e.code,
        Handler::Comm(f) | Handler::Session(f) => {
            let (mut h, mut code) = (session, e.code);
            // SAFETY: the program's session error handler, given two live locals.
            unsafe { f(&mut h, &mut code) };
            e.code
        }
        Handler::Fatal | Handler::Abort => {
            crate::world::abort_job(MPI_COMM_WORLD, e.code.max(1), &format!("{func}: {}", e.msg))
        }
    }
}

/// `MPI_Session_init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_init(
    info: MPI_Info,
    errhandler: MPI_Errhandler,
    session: *mut MPI_Session,
) -> c_int {
    guard("MPI_Session_init", None, || {
        let pairs = crate::info::pairs(info)?;
        crate::errors::handler(errhandler)?;
        if session.is_null() {
            return Err(err(MPI_ERR_ARG, "session is a null pointer"));
        }
        if crate::world::require_init().is_err() {
            crate::env::init_for_session()?;
            STARTED_WORLD.store(true, Ordering::Release);
        }
        let h = SESSIONS
            .insert(SessionObj {
                errhandler: Mutex::new(errhandler),
                info: pairs,
            })
            .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many sessions"))?;
        LIVE.fetch_add(1, Ordering::AcqRel);
        ptr::write(session, h, "session")
    })
}

/// `MPI_Session_finalize`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_finalize(session: *mut MPI_Session) -> c_int {
    let h = ptr::read(session, "session").unwrap_or(MPI_SESSION_NULL);
    sguard("MPI_Session_finalize", h, || {
        get(h)?;
        crate::buffers::owner_gone(crate::buffers::Owner::Session(h));
        SESSIONS.remove(h);
        ptr::write(session, MPI_SESSION_NULL, "session")?;
        let left = LIVE.fetch_sub(1, Ordering::AcqRel) - 1;
        if STARTED_WORLD.load(Ordering::Acquire) && left == 0 {
            STARTED_WORLD.store(false, Ordering::Release);
            crate::env::finalize_for_session()?;
        }
        Ok(())
    })
}

const PSETS: [&str; 2] = ["mpi://WORLD", "mpi://SELF"];

/// `MPI_Session_get_num_psets`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_get_num_psets(
    session: MPI_Session,
    info: MPI_Info,
    npset_names: *mut c_int,
) -> c_int {
    sguard("MPI_Session_get_num_psets", session, || {
        get(session)?;
        crate::info::pairs(info)?;
        ptr::write(npset_names, PSETS.len() as c_int, "npset_names")
    })
}

/// `MPI_Session_get_nth_pset`: with `*pset_len` 0, only the length (with the NUL) is
/// returned.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_get_nth_pset(
    session: MPI_Session,
    info: MPI_Info,
    n: c_int,
    pset_len: *mut c_int,
    pset_name: *mut c_char,
) -> c_int {
    sguard("MPI_Session_get_nth_pset", session, || {
        get(session)?;
        crate::info::pairs(info)?;
        let name = usize::try_from(n)
            .ok()
            .and_then(|i| PSETS.get(i))
            .ok_or_else(|| err(MPI_ERR_ARG, format!("there is no process set {n}")))?;
        let cap = ptr::read(pset_len, "pset_len")?;
        ptr::write(pset_len, name.len() as c_int + 1, "pset_len")?;
        if cap <= 0 {
            return Ok(());
        }
        let out = ptr::slice_mut(pset_name.cast::<u8>(), cap as usize, "pset_name")?;
        let k = name.len().min(cap as usize - 1);
        out[..k].copy_from_slice(&name.as_bytes()[..k]);
        out[k] = 0;
        Ok(())
    })
}

/// The communicator a process set is the group of.
fn pset_comm(name: &str) -> Res<MPI_Comm> {
    match name {
        "mpi://WORLD" => Ok(MPI_COMM_WORLD),
        "mpi://SELF" => Ok(MPI_COMM_SELF),
        _ => Err(err(
            MPI_ERR_ARG,
            format!("no process set is named {name:?}"),
        )),
    }
}

/// `MPI_Session_get_pset_info`: `mpi_size`, the set's size.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_get_pset_info(
    session: MPI_Session,
    pset_name: *const c_char,
    info: *mut MPI_Info,
) -> c_int {
    sguard("MPI_Session_get_pset_info", session, || {
        get(session)?;
        let c = crate::world::get(pset_comm(&ptr::cstr(pset_name, "pset_name")?)?)?;
        let h = crate::info::insert(vec![("mpi_size".into(), c.comm.size().to_string())])?;
        ptr::write(info, h, "info")
    })
}

/// `MPI_Session_get_info`: the info it was started with and the thread level.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_get_info(session: MPI_Session, info_used: *mut MPI_Info) -> c_int {
    sguard("MPI_Session_get_info", session, || {
        let s = get(session)?;
        let mut pairs = s.info.clone();
        let level = match crate::world::THREAD_LEVEL.load(Ordering::Acquire) {
            MPI_THREAD_SINGLE => "MPI_THREAD_SINGLE",
            MPI_THREAD_FUNNELED => "MPI_THREAD_FUNNELED",
            MPI_THREAD_SERIALIZED => "MPI_THREAD_SERIALIZED",
            _ => "MPI_THREAD_MULTIPLE",
        };
        pairs.retain(|(k, _)| k != "mpi_thread_support_level");
        pairs.push(("mpi_thread_support_level".into(), level.into()));
        ptr::write(info_used, crate::info::insert(pairs)?, "info_used")
    })
}

/// `MPI_Group_from_session_pset`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_from_session_pset(
    session: MPI_Session,
    pset_name: *const c_char,
    newgroup: *mut MPI_Group,
) -> c_int {
    sguard("MPI_Group_from_session_pset", session, || {
        get(session)?;
        let c = crate::world::get(pset_comm(&ptr::cstr(pset_name, "pset_name")?)?)?;
        let g = crate::group::insert(c.comm.group())?;
        let mut from = GROUP_SESSION.lock().unwrap_or_else(|p| p.into_inner());
        // Handles of freed groups are not reused with the same generation; forget those.
        from.retain(|&(gh, _)| crate::group::GROUPS.get(gh).is_some());
        from.push((g, session));
        ptr::write(newgroup, g, "newgroup")
    })
}

/// The session each group made by `MPI_Group_from_session_pset` came from: a communicator
/// made from such a group belongs to that session (its buffer serves the buffered sends).
static GROUP_SESSION: Mutex<Vec<(MPI_Group, MPI_Session)>> = Mutex::new(Vec::new());

/// The session a group came from, if it was made from a session's process set.
fn session_of_group(g: MPI_Group) -> Option<MPI_Session> {
    GROUP_SESSION
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|&&(gh, _)| gh == g)
        .map(|&(_, s)| s)
}

/// The tag `MPI_Comm_create_from_group` matches its members' calls by: the string tag hashed
/// (FNV-1a) into the non-negative tags.
fn tag_of(s: &str) -> i32 {
    let h = s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (h & 0x3fff_ffff) as i32
}

/// `MPI_Comm_create_from_group`: collective over the group's members, which must include
/// the caller.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_create_from_group(
    group: MPI_Group,
    stringtag: *const c_char,
    info: MPI_Info,
    errhandler: MPI_Errhandler,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard("MPI_Comm_create_from_group", None, || {
        let g = crate::group::get(group)?;
        let tag = tag_of(&ptr::cstr(stringtag, "stringtag")?);
        let pairs = crate::info::pairs(info)?;
        if matches!(crate::errors::handler(errhandler)?, Handler::Session(_)) {
            return Err(err(
                MPI_ERR_ARG,
                "a session error handler on a communicator",
            ));
        }
        let w = crate::world::get(MPI_COMM_WORLD)?;
        if g.rank_of(w.comm.rank()).is_none() {
            return Err(err(
                MPI_ERR_GROUP,
                "the calling process is not in the group",
            ));
        }
        let c = w.comm.create_group(&g, rcomm::Tag(tag))?;
        let h = crate::world::insert_in(c, &w, session_of_group(group))?;
        let obj = crate::world::get(h)?;
        *obj.errhandler.lock().unwrap_or_else(|p| p.into_inner()) = errhandler;
        *obj.info.lock().unwrap_or_else(|p| p.into_inner()) = pairs;
        ptr::write(newcomm, h, "newcomm")
    })
}

/// `MPI_Session_create_errhandler`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_create_errhandler(
    session_errhandler_fn: crate::attr::FnPtr<crate::attr::ctypes::MPI_Session_errhandler_function>,
    errhandler: *mut MPI_Errhandler,
) -> c_int {
    guard("MPI_Session_create_errhandler", None, || {
        let f = session_errhandler_fn.addr();
        if f == 0 {
            return Err(err(MPI_ERR_ARG, "the error handler function is null"));
        }
        // SAFETY: a non-null MPI_Session_errhandler_function from the program (called with
        // the two named arguments, as communicator handlers are).
        let f = unsafe { std::mem::transmute::<usize, crate::errors::CommErrhandlerFn>(f) };
        let h = crate::errors::ERRHANDLERS
            .insert(Handler::Session(f))
            .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many error handlers"))?;
        ptr::write(errhandler, h, "errhandler")
    })
}

/// `MPI_Session_set_errhandler`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_set_errhandler(
    session: MPI_Session,
    errhandler: MPI_Errhandler,
) -> c_int {
    sguard("MPI_Session_set_errhandler", session, || {
        let s = get(session)?;
        if matches!(crate::errors::handler(errhandler)?, Handler::Comm(_)) {
            return Err(err(
                MPI_ERR_ARG,
                "a communicator error handler on a session",
            ));
        }
        *s.errhandler.lock().unwrap_or_else(|p| p.into_inner()) = errhandler;
        Ok(())
    })
}

/// `MPI_Session_get_errhandler`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_get_errhandler(
    session: MPI_Session,
    errhandler: *mut MPI_Errhandler,
) -> c_int {
    sguard("MPI_Session_get_errhandler", session, || {
        let s = get(session)?;
        let h = *s.errhandler.lock().unwrap_or_else(|p| p.into_inner());
        ptr::write(errhandler, h, "errhandler")
    })
}

/// `MPI_Session_call_errhandler`: reports `errorcode` through the session's handler.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_call_errhandler(session: MPI_Session, errorcode: c_int) -> c_int {
    let rc = sguard("MPI_Session_call_errhandler", session, || {
        get(session)?;
        Err(err(errorcode, "MPI_Session_call_errhandler"))
    });
    // The call itself succeeds once the handler has returned.
    if rc == errorcode { MPI_SUCCESS } else { rc }
}

/// `MPI_Session_attach_buffer`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_attach_buffer(
    session: MPI_Session,
    buffer: *mut c_void,
    size: c_int,
) -> c_int {
    sguard("MPI_Session_attach_buffer", session, || {
        get(session)?;
        crate::buffers::attach(Owner::Session(session), buffer, i64::from(size))
    })
}

/// `MPI_Session_attach_buffer_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_attach_buffer_c(
    session: MPI_Session,
    buffer: *mut c_void,
    size: MPI_Count,
) -> c_int {
    sguard("MPI_Session_attach_buffer_c", session, || {
        get(session)?;
        crate::buffers::attach(Owner::Session(session), buffer, size)
    })
}

/// `MPI_Session_detach_buffer`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_detach_buffer(
    session: MPI_Session,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> c_int {
    sguard("MPI_Session_detach_buffer", session, || {
        get(session)?;
        let n = crate::buffers::detach(Owner::Session(session), buffer_addr)?;
        ptr::write(size, c_int::try_from(n).unwrap_or(c_int::MAX), "size")
    })
}

/// `MPI_Session_detach_buffer_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_detach_buffer_c(
    session: MPI_Session,
    buffer_addr: *mut c_void,
    size: *mut MPI_Count,
) -> c_int {
    sguard("MPI_Session_detach_buffer_c", session, || {
        get(session)?;
        let n = crate::buffers::detach(Owner::Session(session), buffer_addr)?;
        ptr::write(size, n, "size")
    })
}

/// `MPI_Session_flush_buffer`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_flush_buffer(session: MPI_Session) -> c_int {
    sguard("MPI_Session_flush_buffer", session, || {
        get(session)?;
        crate::buffers::flush(Owner::Session(session))
    })
}

/// `MPI_Session_iflush_buffer`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_iflush_buffer(
    session: MPI_Session,
    request: *mut MPI_Request,
) -> c_int {
    sguard("MPI_Session_iflush_buffer", session, || {
        get(session)?;
        let r = crate::buffers::iflush(Owner::Session(session), MPI_COMM_WORLD)?;
        ptr::write(request, r, "request")
    })
}
