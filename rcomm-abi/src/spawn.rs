//! Spawning and intercommunicators over rcomm's `Communicator::spawn` and `InterComm`: the
//! intercommunicator's object holds the joint world of parents and children, and
//! point-to-point maps remote ranks into it (`CommObj::peer`, `CommObj::status`).
//! Collectives on an intercommunicator are refused (merge it first), as in rcomm.

use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::ptr;
use crate::world::{self as comm, COMMS};
use std::ffi::c_char;
use std::process::Command;
use std::sync::Mutex;

/// A NULL-terminated array of C strings (`MPI_ARGV_NULL`: none).
fn argv(p: *const *const c_char) -> Res<Vec<String>> {
    let mut out = Vec::new();
    if p.is_null() {
        return Ok(out);
    }
    for i in 0.. {
        // SAFETY: the program passes a NULL-terminated array; we stop at its NULL.
        let s = unsafe { *p.add(i) };
        if s.is_null() {
            break;
        }
        out.push(ptr::cstr(s, "argv")?);
    }
    Ok(out)
}

/// Starts `cmds` (program, arguments, copies; read at the root only) from the processes of
/// `h`, writing the intercommunicator and, when asked, one `MPI_SUCCESS` per child (a
/// failed spawn fails as a whole, on every parent).
fn spawn(
    cmds: impl FnOnce() -> Res<Vec<(String, Vec<String>, u32)>>,
    root: c_int,
    h: MPI_Comm,
    intercomm: *mut MPI_Comm,
    errcodes: *mut c_int,
) -> Res {
    let c = comm::get(h)?;
    if c.inter.is_some() {
        return Err(err(MPI_ERR_COMM, "spawn from an intercommunicator"));
    }
    let root = u32::try_from(root)
        .ok()
        .filter(|&r| r < c.comm.size())
        .ok_or_else(|| err(MPI_ERR_ROOT, format!("root {root} is not a rank")))?;
    let mine = if c.comm.rank() == root {
        cmds()?
    } else {
        Vec::new()
    };
    let built: Vec<(Command, u32)> = mine
        .iter()
        .map(|(prog, args, n)| {
            let mut cmd = Command::new(prog);
            cmd.args(args);
            (cmd, *n)
        })
        .collect();
    let spec: Vec<rcomm::SpawnCommand<'_>> = built
        .iter()
        .map(|(command, copies)| rcomm::SpawnCommand {
            command,
            copies: *copies,
        })
        .collect();
    let ic = c.comm.spawn(root, &spec)?;
    let n = ic.remote_size() as usize;
    let eh = *c.errhandler.lock().unwrap_or_else(|p| p.into_inner());
    let out = comm::insert_inter(ic, eh)?;
    // An output on every rank (the root's arguments are the only inputs that are root-only).
    if !errcodes.is_null() {
        ptr::slice_mut(errcodes, n, "array_of_errcodes")?.fill(MPI_SUCCESS);
    }
    ptr::write(intercomm, out, "intercomm")
}

fn maxprocs(n: c_int) -> Res<u32> {
    u32::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| err(MPI_ERR_SPAWN, format!("maxprocs {n} is not positive")))
}

/// `MPI_Comm_spawn`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_spawn(
    command: *const c_char,
    argv_: *mut *mut c_char,
    maxprocs_: c_int,
    info: MPI_Info,
    root: c_int,
    comm: MPI_Comm,
    intercomm: *mut MPI_Comm,
    array_of_errcodes: *mut c_int,
) -> c_int {
    guard("MPI_Comm_spawn", Some(comm), || {
        let read = || {
            crate::info::pairs(info)?;
            Ok(vec![(
                ptr::cstr(command, "command")?,
                argv(argv_ as *const *const c_char)?,
                maxprocs(maxprocs_)?,
            )])
        };
        spawn(read, root, comm, intercomm, array_of_errcodes)
    })
}

/// `MPI_Comm_spawn_multiple`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_spawn_multiple(
    count: c_int,
    array_of_commands: *mut *mut c_char,
    array_of_argv: *mut *mut *mut c_char,
    array_of_maxprocs: *const c_int,
    array_of_info: *const MPI_Info,
    root: c_int,
    comm: MPI_Comm,
    intercomm: *mut MPI_Comm,
    array_of_errcodes: *mut c_int,
) -> c_int {
    guard("MPI_Comm_spawn_multiple", Some(comm), || {
        let read = || {
            let n = usize::try_from(count)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| err(MPI_ERR_ARG, format!("count {count} is not positive")))?;
            let cmds = ptr::slice(array_of_commands as *const *mut c_char, n, "commands")?;
            let procs = ptr::slice(array_of_maxprocs, n, "array_of_maxprocs")?;
            let infos = ptr::slice(array_of_info, n, "array_of_info")?;
            let argvs = if array_of_argv.is_null() {
                vec![std::ptr::null_mut(); n]
            } else {
                ptr::slice(array_of_argv as *const *mut *mut c_char, n, "array_of_argv")?.to_vec()
            };
            (0..n)
                .map(|i| {
                    crate::info::pairs(infos[i])?;
                    Ok((
                        ptr::cstr(cmds[i], "command")?,
                        argv(argvs[i] as *const *const c_char)?,
                        maxprocs(procs[i])?,
                    ))
                })
                .collect()
        };
        spawn(read, root, comm, intercomm, array_of_errcodes)
    })
}

/// The parent intercommunicator's handle once made (`MPI_Comm_get_parent` returns the same
/// one each time, and `MPI_COMM_NULL` once the program freed it).
static PARENT: Mutex<Option<MPI_Comm>> = Mutex::new(None);

/// `MPI_Comm_get_parent`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_get_parent(parent: *mut MPI_Comm) -> c_int {
    guard("MPI_Comm_get_parent", None, || {
        crate::world::require_init()?;
        let mut p = PARENT.lock().unwrap_or_else(|p| p.into_inner());
        let h = match *p {
            Some(h) if COMMS.get(h).is_some() => h,
            Some(_) => MPI_COMM_NULL,
            None => {
                let ic = crate::world::WORLD
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_ref()
                    .and_then(|w| w.parent().cloned());
                match ic {
                    Some(ic) => {
                        let h = comm::insert_inter(ic, MPI_ERRORS_ARE_FATAL)?;
                        *p = Some(h);
                        h
                    }
                    None => MPI_COMM_NULL,
                }
            }
        };
        ptr::write(parent, h, "parent")
    })
}

/// The intercommunicator `h` names.
fn inter(h: MPI_Comm) -> Res<rcomm::InterComm> {
    comm::get(h)?
        .inter
        .clone()
        .ok_or_else(|| err(MPI_ERR_COMM, "not an intercommunicator"))
}

/// `MPI_Comm_remote_size`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_remote_size(comm: MPI_Comm, size: *mut c_int) -> c_int {
    guard("MPI_Comm_remote_size", Some(comm), || {
        ptr::write(size, inter(comm)?.remote_size() as c_int, "size")
    })
}

/// `MPI_Intercomm_merge`: the side passing `high = 0` first (the parents when both pass the
/// same).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Intercomm_merge(
    intercomm: MPI_Comm,
    high: c_int,
    newintracomm: *mut MPI_Comm,
) -> c_int {
    guard("MPI_Intercomm_merge", Some(intercomm), || {
        let c = comm::get(intercomm)?;
        let merged = inter(intercomm)?.merge(high != 0)?;
        ptr::write(newintracomm, comm::insert(merged, &c)?, "newintracomm")
    })
}
