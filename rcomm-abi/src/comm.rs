//! Communicators: the object behind an `MPI_Comm`, the predefined world and self, and the
//! `MPI_Comm_*` functions that make, compare, name and free them.

use crate::consts::*;
use crate::errors::{Res, err, guard};
use crate::handles::{Kind, Registry};
use crate::ptr;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

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
        }
    }
}

/// Communicators the program made.
pub static COMMS: Registry<CommObj> = Registry::new(Kind::Comm);

/// `MPI_COMM_WORLD` and `MPI_COMM_SELF` while MPI runs.
static PREDEFINED: RwLock<[Option<Arc<CommObj>>; 2]> = RwLock::new([None, None]);

/// Sets up the predefined communicators (in `MPI_Init`, collective: all ranks are there).
pub fn init_predefined(world: rcomm::Communicator) -> Res {
    let me = world.rank();
    let own = world.split(Some(me), 0)?.ok_or_else(|| {
        err(
            MPI_ERR_INTERN,
            "MPI_COMM_SELF: the split gave no communicator",
        )
    })?;
    let mut p = PREDEFINED.write().unwrap_or_else(|p| p.into_inner());
    p[0] = Some(Arc::new(CommObj::new(
        world,
        MPI_ERRORS_ARE_FATAL,
        "MPI_COMM_WORLD",
    )));
    p[1] = Some(Arc::new(CommObj::new(
        own,
        MPI_ERRORS_ARE_FATAL,
        "MPI_COMM_SELF",
    )));
    Ok(())
}

/// Drops every communicator (finalize): the program's first, then self and world, each's
/// attributes deleted as MPI_Finalize does for self.
pub fn finalize_all() {
    let made: Vec<usize> = COMMS.lock().iter().map(|(h, _)| h).collect();
    for h in made {
        if let Some(c) = COMMS.get(h) {
            crate::attr::delete_all(h, &c);
        }
        COMMS.remove(h);
    }
    for h in [MPI_COMM_SELF, MPI_COMM_WORLD] {
        if let Ok(c) = get(h) {
            crate::attr::delete_all(h, &c);
        }
    }
    *PREDEFINED.write().unwrap_or_else(|p| p.into_inner()) = [None, None];
}

/// The communicator `h` names; `MPI_ERR_COMM` for null, stale or foreign values.
pub fn get(h: MPI_Comm) -> Res<Arc<CommObj>> {
    let found = match h {
        MPI_COMM_WORLD | MPI_COMM_SELF => {
            let p = PREDEFINED.read().unwrap_or_else(|p| p.into_inner());
            p[h - MPI_COMM_WORLD].clone()
        }
        _ => COMMS.get(h),
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

/// The error handler of a live communicator.
pub fn errhandler_of(h: MPI_Comm) -> Option<MPI_Errhandler> {
    get(h)
        .ok()
        .map(|c| *c.errhandler.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Registers a new communicator made from `parent` (which lends its error handler); its handle.
pub fn insert(comm: rcomm::Communicator, parent: &CommObj) -> Res<MPI_Comm> {
    let eh = *parent.errhandler.lock().unwrap_or_else(|p| p.into_inner());
    COMMS
        .insert(CommObj::new(comm, eh, ""))
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many communicators"))
}

/// `MPI_Comm_size`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_size(comm: MPI_Comm, size: *mut c_int) -> c_int {
    guard("MPI_Comm_size", Some(comm), || {
        let c = get(comm)?;
        ptr::write(size, c.comm.size() as c_int, "size")
    })
}

/// `MPI_Comm_rank`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_rank(comm: MPI_Comm, rank: *mut c_int) -> c_int {
    guard("MPI_Comm_rank", Some(comm), || {
        let c = get(comm)?;
        ptr::write(rank, c.comm.rank() as c_int, "rank")
    })
}
