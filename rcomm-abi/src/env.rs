//! The process's MPI state: init and finalize, thread levels, the world, abort, clocks,
//! versions and names.

use crate::consts::*;
use crate::errors::{Res, err, guard};
use crate::ptr;
use std::ffi::c_char;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::{OnceLock, RwLock};
use std::thread::ThreadId;

const BEFORE: u8 = 0;
const RUNNING: u8 = 1;
const AFTER: u8 = 2;

static PHASE: AtomicU8 = AtomicU8::new(BEFORE);
static WORLD: RwLock<Option<rcomm::World>> = RwLock::new(None);
static THREAD_LEVEL: AtomicI32 = AtomicI32::new(MPI_THREAD_SINGLE);
static MAIN_THREAD: OnceLock<ThreadId> = OnceLock::new();

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

fn level_of(l: rcomm::ThreadLevel) -> c_int {
    match l {
        rcomm::ThreadLevel::Single => MPI_THREAD_SINGLE,
        rcomm::ThreadLevel::Funneled => MPI_THREAD_FUNNELED,
        rcomm::ThreadLevel::Serialized => MPI_THREAD_SERIALIZED,
        _ => MPI_THREAD_MULTIPLE,
    }
}

fn init(required: c_int) -> Res<c_int> {
    let want = match required {
        MPI_THREAD_SINGLE => rcomm::ThreadLevel::Single,
        MPI_THREAD_FUNNELED => rcomm::ThreadLevel::Funneled,
        MPI_THREAD_SERIALIZED => rcomm::ThreadLevel::Serialized,
        MPI_THREAD_MULTIPLE => rcomm::ThreadLevel::Multiple,
        l => return Err(err(MPI_ERR_ARG, format!("{l} is not a thread level"))),
    };
    if PHASE
        .compare_exchange(BEFORE, RUNNING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Err(err(
            MPI_ERR_OTHER,
            "MPI_Init called twice (or after MPI_Finalize)",
        ));
    }
    let (world, got) = match rcomm::init_thread(want) {
        Ok(x) => x,
        Err(e) => {
            PHASE.store(BEFORE, Ordering::Release);
            return Err(e.into());
        }
    };
    let _ = MAIN_THREAD.set(std::thread::current().id());
    let level = level_of(got);
    THREAD_LEVEL.store(level, Ordering::Release);
    let comm = (*world).clone();
    *WORLD.write().unwrap_or_else(|p| p.into_inner()) = Some(world);
    crate::comm::init_predefined(comm)?;
    Ok(level)
}

fn finalize() -> Res {
    require_init()?;
    crate::comm::finalize_all();
    crate::request::REQUESTS.lock().clear();
    let world = WORLD.write().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(w) = &world {
        w.barrier()?;
    }
    drop(world);
    PHASE.store(AFTER, Ordering::Release);
    Ok(())
}

/// `MPI_Init`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    let _ = (argc, argv);
    guard("MPI_Init", None, || init(MPI_THREAD_SINGLE).map(drop))
}

/// `MPI_Init_thread`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    let _ = (argc, argv);
    guard("MPI_Init_thread", None, || {
        let got = init(required)?;
        ptr::write(provided, got, "provided")
    })
}

/// `MPI_Finalize`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Finalize() -> c_int {
    guard("MPI_Finalize", None, finalize)
}

/// `MPI_Initialized`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Initialized(flag: *mut c_int) -> c_int {
    guard("MPI_Initialized", None, || {
        ptr::write(
            flag,
            (PHASE.load(Ordering::Acquire) != BEFORE) as c_int,
            "flag",
        )
    })
}

/// `MPI_Finalized`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Finalized(flag: *mut c_int) -> c_int {
    guard("MPI_Finalized", None, || {
        ptr::write(
            flag,
            (PHASE.load(Ordering::Acquire) == AFTER) as c_int,
            "flag",
        )
    })
}

/// `MPI_Query_thread`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Query_thread(provided: *mut c_int) -> c_int {
    guard("MPI_Query_thread", None, || {
        ptr::write(provided, THREAD_LEVEL.load(Ordering::Acquire), "provided")
    })
}

/// `MPI_Is_thread_main`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Is_thread_main(flag: *mut c_int) -> c_int {
    guard("MPI_Is_thread_main", None, || {
        require_init()?;
        let main = MAIN_THREAD.get() == Some(&std::thread::current().id());
        ptr::write(flag, main as c_int, "flag")
    })
}

/// `MPI_Abort`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Abort(comm: MPI_Comm, errorcode: c_int) -> c_int {
    abort_job(
        comm,
        errorcode,
        &format!("MPI_Abort called with error code {errorcode}"),
    )
}

/// `MPI_Wtime`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Wtime() -> f64 {
    rcomm::wtime()
}

/// `MPI_Wtick`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Wtick() -> f64 {
    rcomm::wtick()
}

/// `MPI_Aint_add`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    base.wrapping_add(disp)
}

/// `MPI_Aint_diff`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Aint_diff(addr1: MPI_Aint, addr2: MPI_Aint) -> MPI_Aint {
    addr1.wrapping_sub(addr2)
}

/// `MPI_Get_version`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
    guard("MPI_Get_version", None, || {
        ptr::write(version, MPI_VERSION, "version")?;
        ptr::write(subversion, MPI_SUBVERSION, "subversion")
    })
}

/// `MPI_Abi_get_version`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Abi_get_version(abi_major: *mut c_int, abi_minor: *mut c_int) -> c_int {
    guard("MPI_Abi_get_version", None, || {
        ptr::write(abi_major, MPI_ABI_VERSION, "abi_major")?;
        ptr::write(abi_minor, MPI_ABI_SUBVERSION, "abi_minor")
    })
}

/// The library version string.
pub fn library_version() -> String {
    format!(
        "rcomm {} (MPI {MPI_VERSION}.{MPI_SUBVERSION} ABI {MPI_ABI_VERSION}.{MPI_ABI_SUBVERSION}, libmpi_abi.so.1): {}",
        env!("CARGO_PKG_VERSION"),
        rcomm::library_version()
    )
}

/// `MPI_Get_library_version`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int) -> c_int {
    guard("MPI_Get_library_version", None, || {
        ptr::write_cstr(
            version,
            MPI_MAX_LIBRARY_VERSION_STRING as usize,
            &library_version(),
            resultlen,
            "version",
        )
    })
}

/// `MPI_Get_processor_name`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) -> c_int {
    guard("MPI_Get_processor_name", None, || {
        ptr::write_cstr(
            name,
            MPI_MAX_PROCESSOR_NAME as usize,
            &rcomm::processor_name(),
            resultlen,
            "name",
        )
    })
}
