//! Where the job stands — not yet initialised, running or finalised — with its world and the
//! thread that initialised. Below `environment`, `topology` and `datatype`, which all read it;
//! `environment` alone changes it.

use std::sync::atomic::{AtomicU8, Ordering as AO};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::ThreadId;

/// 0 = never initialised, 1 = running, 2 = finalised.
static STATE: AtomicU8 = AtomicU8::new(0);
static WORLD: RwLock<Option<Arc<rcomm::World>>> = RwLock::new(None);
/// The thread that initialised (the level is rcomm's: `rcomm::query_thread`).
static INIT: Mutex<Option<ThreadId>> = Mutex::new(None);

/// Whether `initialize` has been called.
pub fn is_initialized() -> bool {
    STATE.load(AO::SeqCst) != 0
}

/// Whether the universe has been dropped.
pub fn is_finalized() -> bool {
    STATE.load(AO::SeqCst) == 2
}

/// Claims initialisation: true for the first caller only, so a job initialises once.
pub(crate) fn claim() -> bool {
    STATE.compare_exchange(0, 1, AO::SeqCst, AO::SeqCst).is_ok()
}

/// Records the world of a claimed initialisation and the thread that made it.
pub(crate) fn started(world: Arc<rcomm::World>) {
    *WORLD.write().unwrap_or_else(|p| p.into_inner()) = Some(world);
    *INIT.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::thread::current().id());
}

/// Marks the job finalised and lets go of the world.
pub(crate) fn finished() {
    STATE.store(2, AO::SeqCst);
    *WORLD.write().unwrap_or_else(|p| p.into_inner()) = None;
}

/// The world, while the universe lives.
pub(crate) fn world() -> Option<Arc<rcomm::World>> {
    WORLD.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// This rank's place in the world (0 before initialisation).
pub(crate) fn world_rank() -> u32 {
    world().map(|w| w.rank()).unwrap_or(0)
}

/// Ends the whole job with `msg` (panics when there is no job to end).
pub(crate) fn abort_job(code: i32, msg: &str) -> ! {
    match world() {
        Some(w) => {
            eprintln!("{msg}");
            w.abort(code, msg)
        }
        None => panic!("{msg}"),
    }
}

/// Panics unless a derived datatype may be built now (as rsmpi: after initialisation, before
/// finalisation, and on the initialising thread unless the level is `Multiple`).
pub(crate) fn check_may_build_datatype() {
    match STATE.load(AO::SeqCst) {
        0 => panic!("rcomm-mpi: a derived datatype was built before mpi::initialize"),
        2 => panic!("rcomm-mpi: a derived datatype was built after the universe was dropped"),
        _ => {}
    }
    let init = *INIT.lock().unwrap_or_else(|p| p.into_inner());
    // Initialised here, so the level is rcomm's (what `threading_support` reports); its
    // variants print as the facade's `Threading` does.
    let level = rcomm::query_thread();
    if let Some(tid) = init
        && level < rcomm::ThreadLevel::Multiple
        && std::thread::current().id() != tid
    {
        panic!(
            "rcomm-mpi: a derived datatype was first built on a thread other than the one that \
             initialised, at thread level {level:?} (build it on the main thread first, or ask \
             for Threading::Multiple)"
        );
    }
}
