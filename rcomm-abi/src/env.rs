//! The process's MPI state: init and finalize, thread levels, the world, abort, clocks,
//! versions and names.

use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::ptr;
use crate::world::{AFTER, BEFORE, MAIN_THREAD, PHASE, RUNNING, THREAD_LEVEL, WORLD, require_init};
use std::ffi::c_char;
use std::sync::atomic::Ordering;

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
    crate::world::init_predefined(comm)?;
    crate::typeobj::fill_runs();
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

/// Starts the world for a session begun before `MPI_Init` (any thread may use a session).
pub(crate) fn init_for_session() -> Res {
    init(MPI_THREAD_MULTIPLE).map(drop)
}

/// Ends the world the last session begun before `MPI_Init` kept.
pub(crate) fn finalize_for_session() -> Res {
    finalize()
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
    crate::world::abort_job(
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

/// `MPI_Get_library_version`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int) -> c_int {
    guard("MPI_Get_library_version", None, || {
        ptr::write_cstr(
            version,
            MPI_MAX_LIBRARY_VERSION_STRING as usize,
            &crate::world::library_version(),
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

/// `MPI_Pcontrol`: profiling control is for tools that intercept it; the library itself has
/// nothing to switch.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Pcontrol(level: c_int) -> c_int {
    let _ = level;
    MPI_SUCCESS
}

/// `MPI_Alloc_mem`: ordinary memory (rcomm registers nothing up front), 64-byte aligned.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Alloc_mem(
    size: MPI_Aint,
    info: MPI_Info,
    baseptr: *mut std::ffi::c_void,
) -> c_int {
    let _ = info;
    guard("MPI_Alloc_mem", None, || {
        let n = usize::try_from(size)
            .map_err(|_| err(MPI_ERR_SIZE, format!("size {size} is negative")))?;
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: posix_memalign writes one pointer into `p`, a live local.
        let rc = unsafe { libc::posix_memalign(&mut p, 64, n.max(1)) };
        if rc != 0 {
            return Err(err(MPI_ERR_NO_MEM, format!("{n} bytes: out of memory")));
        }
        ptr::write(baseptr.cast::<*mut std::ffi::c_void>(), p, "baseptr")
    })
}

/// `MPI_Free_mem`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Free_mem(base: *mut std::ffi::c_void) -> c_int {
    // SAFETY: `base` came from MPI_Alloc_mem (posix_memalign) or is null, as the standard
    // requires of the caller.
    unsafe { libc::free(base) };
    MPI_SUCCESS
}
