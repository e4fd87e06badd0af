//! The process's MPI state below every exported function: the init phase, the world, and the
//! communicator objects with their error handlers (the error path looks them up), and aborting
//! the job.

use crate::consts::*;
use crate::errors::{Res, err};
use crate::handles::{Kind, Registry};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::ThreadId;

pub(crate) const BEFORE: u8 = 0;
pub(crate) const RUNNING: u8 = 1;
pub(crate) const AFTER: u8 = 2;

pub(crate) static PHASE: AtomicU8 = AtomicU8::new(BEFORE);
pub(crate) static WORLD: RwLock<Option<rcomm::World>> = RwLock::new(None);
pub(crate) static THREAD_LEVEL: AtomicI32 = AtomicI32::new(MPI_THREAD_SINGLE);
pub(crate) static MAIN_THREAD: OnceLock<ThreadId> = OnceLock::new();

/// Errors unless MPI is initialized and not finalized (every call but the few the standard
/// allows outside).
pub fn require_init() -> Res {
    match PHASE.load(Ordering::Acquire) {
        RUNNING => Ok(()),
        BEFORE => Err(err(
            MPI_ERR_OTHER,
            "MPI is not initialized (call MPI_Init first)",
        )),
        _ => Err(err(MPI_ERR_OTHER, "MPI is finalized")),
    }
}

/// The world communicator (a clone: it shares the world's state).
pub fn world_comm() -> Res<rcomm::Communicator> {
    require_init()?;
    let w = WORLD.read().unwrap_or_else(|p| p.into_inner());
    w.as_ref()
        .map(|w| (**w).clone())
        .ok_or_else(|| err(MPI_ERR_OTHER, "MPI is not initialized"))
}

/// Prints `msg` and ends the job with `code`: rcomm's abort through the launcher when the
/// world is up, else this process's exit.
pub fn abort_job(_comm: MPI_Comm, code: c_int, msg: &str) -> ! {
    eprintln!("rcomm-abi: {msg}");
    if let Ok(w) = WORLD.try_read()
        && let Some(w) = w.as_ref()
    {
        w.abort(code, msg)
    }
    std::process::exit(code)
}

/// What an `MPI_Comm` names.
pub struct CommObj {
    /// rcomm's communicator.
    pub comm: rcomm::Communicator,
    /// Its error handler (an `MPI_Errhandler`).
    pub errhandler: Mutex<MPI_Errhandler>,
    /// `MPI_Comm_set_name`'s name.
    pub name: Mutex<String>,
    /// Attributes: keyval → the `void*` value the program stored.
    pub attrs: Mutex<BTreeMap<c_int, usize>>,
    /// Hints given by `MPI_Comm_set_info` / `dup_with_info`.
    pub info: Mutex<Vec<(String, String)>>,
    /// For an intercommunicator (from a spawn): rcomm's, whose joint world `comm` is; ranks
    /// given to point-to-point name the remote group.
    pub inter: Option<rcomm::InterComm>,
    /// The session whose group it was made from (or its parent's), whose attached buffer
    /// serves its buffered sends when it has none of its own.
    pub session: Option<MPI_Session>,
}

impl CommObj {
    /// A communicator object with the given handler and name.
    pub fn new(comm: rcomm::Communicator, errhandler: MPI_Errhandler, name: &str) -> Self {
        CommObj {
            comm,
            errhandler: Mutex::new(errhandler),
            name: Mutex::new(name.to_owned()),
            attrs: Mutex::new(BTreeMap::new()),
            info: Mutex::new(Vec::new()),
            inter: None,
            session: None,
        }
    }

    /// The local group's size (for an intercommunicator, not the joint world's).
    pub fn size(&self) -> u32 {
        self.inter.as_ref().map_or(self.comm.size(), |i| i.size())
    }

    /// This process's rank in the local group.
    pub fn rank(&self) -> u32 {
        self.inter.as_ref().map_or(self.comm.rank(), |i| i.rank())
    }

    /// The rank of peer `r` in `comm`: `r` itself, or on an intercommunicator remote rank `r`
    /// in the joint world.
    pub fn peer(&self, r: u32) -> Res<u32> {
        match &self.inter {
            Some(i) => Ok(i.remote_to_joint(r)?),
            None => Ok(r),
        }
    }

    /// A status's source as the program names it (the remote rank on an intercommunicator).
    pub fn status(&self, st: MPI_Status) -> MPI_Status {
        remote_status(self.inter.as_ref(), st)
    }
}

/// Communicators the program made.
pub static COMMS: Registry<CommObj> = Registry::new(Kind::Comm);

/// `MPI_COMM_WORLD` and `MPI_COMM_SELF`, made once (at init, which a process runs at most once)
/// and kept to exit, so that looking one up takes neither a lock nor a reference count: every
/// call on them looks them up, and those atomics cost a short message more than the rest of the
/// C layer together. The pointer is null outside init/finalize; after finalize they answer
/// as invalid. World's drop at finalize has finished the engine (drained, progress stopped, the
/// bootstrap told); what these two still hold, memory and descriptors, goes at exit.
static PREDEFINED: AtomicPtr<[CommObj; 2]> = AtomicPtr::new(std::ptr::null_mut());

/// Sets up the predefined communicators (in `MPI_Init`, collective: all ranks are there).
pub fn init_predefined(world: rcomm::Communicator) -> Res {
    let me = world.rank();
    let own = world.split(Some(me), 0)?.ok_or_else(|| {
        err(
            MPI_ERR_INTERN,
            "MPI_COMM_SELF: the split gave no communicator",
        )
    })?;
    let made: &'static mut [CommObj; 2] = Box::leak(Box::new([
        CommObj::new(world, MPI_ERRORS_ARE_FATAL, "MPI_COMM_WORLD"),
        CommObj::new(own, MPI_ERRORS_ARE_FATAL, "MPI_COMM_SELF"),
    ]));
    PREDEFINED.store(made, Ordering::Release);
    Ok(())
}

/// Ends the predefined communicators (finalize): from now on their handles are refused (the
/// objects stay, for a call that looked one up just before).
pub fn end_predefined() {
    PREDEFINED.store(std::ptr::null_mut(), Ordering::Release);
}

/// `MPI_COMM_WORLD` or `MPI_COMM_SELF` while MPI runs; `None` for any other handle.
#[inline(always)]
pub fn predefined(h: MPI_Comm) -> Option<&'static CommObj> {
    let i = h.wrapping_sub(MPI_COMM_WORLD);
    if i > 1 {
        return None;
    }
    let p = PREDEFINED.load(Ordering::Acquire);
    // SAFETY: non-null only between init and finalize, pointing at the pair `init_predefined`
    // leaked: never freed, so a reference lives as long as the process.
    unsafe { p.as_ref() }.map(|p| &p[i])
}

/// A live communicator: a predefined one (borrowed, kept to exit) or one the program made
/// (counted, so that freeing its handle mid-call leaves the call its object).
#[derive(Clone)]
pub enum CommRef {
    /// `MPI_COMM_WORLD` or `MPI_COMM_SELF`.
    Predefined(&'static CommObj),
    /// From the registry.
    Made(Arc<CommObj>),
}

impl std::ops::Deref for CommRef {
    type Target = CommObj;
    #[inline]
    fn deref(&self) -> &CommObj {
        match self {
            CommRef::Predefined(c) => c,
            CommRef::Made(c) => c,
        }
    }
}

/// The communicator `h` names; `MPI_ERR_COMM` for null, stale or foreign values.
pub fn get(h: MPI_Comm) -> Res<CommRef> {
    let found = match h {
        MPI_COMM_WORLD | MPI_COMM_SELF => predefined(h).map(CommRef::Predefined),
        _ => COMMS.get(h).map(CommRef::Made),
    };
    found.ok_or_else(|| {
        let what = match h {
            MPI_COMM_NULL => "MPI_COMM_NULL".to_owned(),
            MPI_COMM_WORLD | MPI_COMM_SELF => {
                "a predefined communicator outside init/finalize".into()
            }
            _ => format!("{h:#x}"),
        };
        err(MPI_ERR_COMM, format!("{what} is not a valid communicator"))
    })
}

/// The live communicator `h` names, refused (`MPI_ERR_COMM`, naming `what`) when it is an
/// intercommunicator: calls not built for those must not run on the joint world beneath and
/// give a wrong answer.
pub fn get_intra(h: MPI_Comm, what: &str) -> Res<CommRef> {
    let c = get(h)?;
    if c.inter.is_some() {
        return Err(err(
            MPI_ERR_COMM,
            format!("{what} on an intercommunicator is not built: merge it first"),
        ));
    }
    Ok(c)
}

/// The error handler of a live communicator.
pub fn errhandler_of(h: MPI_Comm) -> Option<MPI_Errhandler> {
    get(h)
        .ok()
        .map(|c| *c.errhandler.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Registers a new communicator made from `parent` (which lends its error handler); its handle.
pub fn insert(comm: rcomm::Communicator, parent: &CommObj) -> Res<MPI_Comm> {
    insert_in(comm, parent, parent.session)
}

/// Registers a communicator made from `parent` within `session` (if any); its handle.
pub fn insert_in(
    comm: rcomm::Communicator,
    parent: &CommObj,
    session: Option<MPI_Session>,
) -> Res<MPI_Comm> {
    let eh = *parent.errhandler.lock().unwrap_or_else(|p| p.into_inner());
    let mut obj = CommObj::new(comm, eh, "");
    obj.session = session;
    COMMS
        .insert(obj)
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many communicators"))
}

/// `st` with its source as a remote rank of `inter` (unchanged without one).
pub fn remote_status(inter: Option<&rcomm::InterComm>, mut st: MPI_Status) -> MPI_Status {
    if let Some(i) = inter
        && let Some(r) = u32::try_from(st.MPI_SOURCE)
            .ok()
            .and_then(|j| i.joint_to_remote(j))
    {
        st.MPI_SOURCE = r as c_int;
    }
    st
}

/// Registers an intercommunicator (a spawn's, or the parent one); its handle.
pub fn insert_inter(inter: rcomm::InterComm, errhandler: MPI_Errhandler) -> Res<MPI_Comm> {
    let mut obj = CommObj::new(inter.joint().clone(), errhandler, "");
    obj.inter = Some(inter);
    COMMS
        .insert(obj)
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many communicators"))
}

/// The library version string.
pub fn library_version() -> String {
    format!(
        "rcomm {} (MPI {MPI_VERSION}.{MPI_SUBVERSION} ABI {MPI_ABI_VERSION}.{MPI_ABI_SUBVERSION}, libmpi_abi.so.1): {}",
        env!("CARGO_PKG_VERSION"),
        rcomm::library_version()
    )
}
