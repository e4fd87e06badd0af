//! Communicators: the object behind an `MPI_Comm`, the predefined world and self, and the
//! `MPI_Comm_*` functions that make, compare, name and free them.

use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::ptr;
pub use crate::world::{COMMS, CommObj, CommRef, errhandler_of, get, get_intra, insert};

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
    crate::world::end_predefined();
}

/// `MPI_Comm_size`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_size(comm: MPI_Comm, size: *mut c_int) -> c_int {
    guard("MPI_Comm_size", Some(comm), || {
        let c = get(comm)?;
        ptr::write(size, c.size() as c_int, "size")
    })
}

/// `MPI_Comm_rank`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_rank(comm: MPI_Comm, rank: *mut c_int) -> c_int {
    guard("MPI_Comm_rank", Some(comm), || {
        let c = get(comm)?;
        ptr::write(rank, c.rank() as c_int, "rank")
    })
}

fn new_comm(
    parent_h: MPI_Comm,
    parent: &CommObj,
    c: rcomm::Communicator,
    out: *mut MPI_Comm,
) -> Res {
    let _ = parent_h;
    let h = insert(c, parent)?;
    ptr::write(out, h, "newcomm")
}

fn dup(comm: MPI_Comm, info: Option<Vec<(String, String)>>, newcomm: *mut MPI_Comm) -> Res {
    let c = get_intra(comm, "MPI_Comm_dup")?;
    if newcomm.is_null() {
        return Err(err(MPI_ERR_ARG, "newcomm is a null pointer"));
    }
    let d = c.comm.dup()?;
    let h = insert(d, &c)?;
    let n = COMMS
        .get(h)
        .ok_or_else(|| err(MPI_ERR_INTERN, "new communicator vanished"))?;
    *n.info.lock().unwrap_or_else(|p| p.into_inner()) = match info {
        Some(i) => i,
        None => c.info.lock().unwrap_or_else(|p| p.into_inner()).clone(),
    };
    if let Err(e) = crate::attr::copy_all(comm, &c, &n) {
        COMMS.remove(h);
        return Err(e);
    }
    ptr::write(newcomm, h, "newcomm")
}

/// `MPI_Comm_dup`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_dup(comm: MPI_Comm, newcomm: *mut MPI_Comm) -> c_int {
    guard("MPI_Comm_dup", Some(comm), || dup(comm, None, newcomm))
}

/// `MPI_Comm_dup_with_info`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_dup_with_info(
    comm: MPI_Comm,
    info: MPI_Info,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard("MPI_Comm_dup_with_info", Some(comm), || {
        let pairs = crate::info::pairs(info)?;
        dup(comm, Some(pairs), newcomm)
    })
}

/// `MPI_Comm_idup`: the duplicate is made on the spot (rcomm's dup is one short agreement),
/// and the request is complete.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_idup(
    comm: MPI_Comm,
    newcomm: *mut MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Comm_idup", Some(comm), || {
        dup(comm, None, newcomm)?;
        let r = crate::request::insert(
            Box::new(crate::request::Ready(crate::request::empty_status())),
            comm,
        )?;
        ptr::write(request, r, "request")
    })
}

/// `MPI_Comm_idup_with_info`: as `MPI_Comm_idup`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_idup_with_info(
    comm: MPI_Comm,
    info: MPI_Info,
    newcomm: *mut MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard("MPI_Comm_idup_with_info", Some(comm), || {
        let pairs = crate::info::pairs(info)?;
        dup(comm, Some(pairs), newcomm)?;
        let r = crate::request::insert(
            Box::new(crate::request::Ready(crate::request::empty_status())),
            comm,
        )?;
        ptr::write(request, r, "request")
    })
}

/// `MPI_Comm_split`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_split(
    comm: MPI_Comm,
    color: c_int,
    key: c_int,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard("MPI_Comm_split", Some(comm), || {
        let c = get_intra(comm, "MPI_Comm_split")?;
        let color = match color {
            MPI_UNDEFINED => None,
            c if c >= 0 => Some(c as u32),
            c => return Err(err(MPI_ERR_ARG, format!("color {c} is negative"))),
        };
        match c.comm.split(color, key)? {
            Some(n) => new_comm(comm, &c, n, newcomm),
            None => ptr::write(newcomm, MPI_COMM_NULL, "newcomm"),
        }
    })
}

/// The one hardware resource `MPI_Comm_split_type` knows by name (rcomm's node).
const SHARED_MEMORY: &str = "mpi_shared_memory";
const HW_RESOURCE_TYPE: &str = "mpi_hw_resource_type";

/// `MPI_Comm_split_type`: `MPI_COMM_TYPE_SHARED` is a node. The guided kinds split by the
/// resource the info's `mpi_hw_resource_type` names, of which rcomm has one,
/// `mpi_shared_memory` (the node): any other name, or none, gives `MPI_COMM_NULL`.
/// `MPI_COMM_TYPE_HW_UNGUIDED` gives the node when it is strictly smaller than `comm`
/// (naming it in the info), else `MPI_COMM_NULL`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_split_type(
    comm: MPI_Comm,
    split_type: c_int,
    key: c_int,
    info: MPI_Info,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard("MPI_Comm_split_type", Some(comm), || {
        let c = get_intra(comm, "MPI_Comm_split_type")?;
        let named = crate::info::pairs(info)?
            .into_iter()
            .find(|(k, _)| k == HW_RESOURCE_TYPE)
            .is_some_and(|(_, v)| v == SHARED_MEMORY);
        let wanted = match split_type {
            MPI_UNDEFINED => false,
            MPI_COMM_TYPE_SHARED | MPI_COMM_TYPE_HW_UNGUIDED => true,
            MPI_COMM_TYPE_HW_GUIDED | MPI_COMM_TYPE_RESOURCE_GUIDED => named,
            t => return Err(err(MPI_ERR_ARG, format!("{t} is not a split type"))),
        };
        // Every rank, whatever it asked for (MPI_UNDEFINED too), takes part in the same two
        // collectives: the node split, then the split that drops the ranks wanting no part.
        let node = c.comm.split_type(rcomm::SplitType::Node)?;
        let wanted =
            wanted && (split_type != MPI_COMM_TYPE_HW_UNGUIDED || node.size() < c.comm.size());
        match node.split(wanted.then_some(0), key)? {
            Some(n) => {
                if split_type == MPI_COMM_TYPE_HW_UNGUIDED && info != MPI_INFO_NULL {
                    let i = crate::info::get(info)?;
                    let mut pairs = i.lock().unwrap_or_else(|p| p.into_inner());
                    pairs.retain(|(k, _)| k != HW_RESOURCE_TYPE);
                    pairs.push((HW_RESOURCE_TYPE.to_owned(), SHARED_MEMORY.to_owned()));
                }
                new_comm(comm, &c, n, newcomm)
            }
            None => ptr::write(newcomm, MPI_COMM_NULL, "newcomm"),
        }
    })
}

/// `MPI_Comm_create`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_create(
    comm: MPI_Comm,
    group: MPI_Group,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard("MPI_Comm_create", Some(comm), || {
        let c = get_intra(comm, "MPI_Comm_create")?;
        let g = crate::group::get(group)?;
        match c.comm.create(&g)? {
            Some(n) => new_comm(comm, &c, n, newcomm),
            None => ptr::write(newcomm, MPI_COMM_NULL, "newcomm"),
        }
    })
}

/// `MPI_Comm_create_group`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_create_group(
    comm: MPI_Comm,
    group: MPI_Group,
    tag: c_int,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard("MPI_Comm_create_group", Some(comm), || {
        let c = get_intra(comm, "MPI_Comm_create_group")?;
        let g = crate::group::get(group)?;
        if tag < 0 {
            return Err(err(MPI_ERR_TAG, format!("tag {tag} is negative")));
        }
        if g.rank_of(c.comm.world_rank(c.comm.rank())?).is_none() {
            return ptr::write(newcomm, MPI_COMM_NULL, "newcomm");
        }
        let n = c.comm.create_group(&g, rcomm::Tag(tag))?;
        new_comm(comm, &c, n, newcomm)
    })
}

/// `MPI_Comm_free`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_free(comm: *mut MPI_Comm) -> c_int {
    let h = ptr::read(comm, "comm").unwrap_or(MPI_COMM_NULL);
    guard("MPI_Comm_free", Some(h), || {
        let h = ptr::read(comm, "comm")?;
        if h == MPI_COMM_WORLD || h == MPI_COMM_SELF {
            return Err(err(
                MPI_ERR_COMM,
                "a predefined communicator cannot be freed",
            ));
        }
        let c = get(h)?;
        crate::attr::delete_all(h, &c);
        crate::buffers::owner_gone(crate::buffers::Owner::Comm(h));
        COMMS.remove(h);
        ptr::write(comm, MPI_COMM_NULL, "comm")
    })
}

/// `MPI_Comm_disconnect`: as `MPI_Comm_free` (rcomm's communicators complete their sends
/// before they go).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_disconnect(comm: *mut MPI_Comm) -> c_int {
    PMPI_Comm_free(comm)
}

/// `MPI_Comm_compare`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_compare(comm1: MPI_Comm, comm2: MPI_Comm, result: *mut c_int) -> c_int {
    guard("MPI_Comm_compare", Some(comm1), || {
        let a = get(comm1)?;
        let b = get(comm2)?;
        let r = if comm1 == comm2 {
            MPI_IDENT
        } else {
            match a.comm.compare(&b.comm) {
                // Two handles on one rcomm communicator are still two MPI communicators.
                rcomm::Comparison::Ident | rcomm::Comparison::Congruent => MPI_CONGRUENT,
                rcomm::Comparison::Similar => MPI_SIMILAR,
                _ => MPI_UNEQUAL,
            }
        };
        ptr::write(result, r, "result")
    })
}

/// `MPI_Comm_group`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_group(comm: MPI_Comm, group: *mut MPI_Group) -> c_int {
    guard("MPI_Comm_group", Some(comm), || {
        let c = get(comm)?;
        // rcomm-abi's groups hold ranks of this process's world, and an intercommunicator's
        // other side is not in it.
        if c.inter.is_some() {
            return Err(err(
                MPI_ERR_COMM,
                "the group of an intercommunicator is not built: merge it first",
            ));
        }
        let g = crate::group::insert(c.comm.group())?;
        ptr::write(group, g, "group")
    })
}

/// `MPI_Comm_test_inter`: true for a spawn's intercommunicators.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_test_inter(comm: MPI_Comm, flag: *mut c_int) -> c_int {
    guard("MPI_Comm_test_inter", Some(comm), || {
        let c = get(comm)?;
        ptr::write(flag, c.inter.is_some() as c_int, "flag")
    })
}

/// `MPI_Comm_set_name`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_set_name(comm: MPI_Comm, comm_name: *const std::ffi::c_char) -> c_int {
    guard("MPI_Comm_set_name", Some(comm), || {
        let c = get(comm)?;
        let mut name = ptr::cstr(comm_name, "comm_name")?;
        name.truncate(MPI_MAX_OBJECT_NAME as usize - 1);
        c.comm.set_name(&name);
        *c.name.lock().unwrap_or_else(|p| p.into_inner()) = name;
        Ok(())
    })
}

/// `MPI_Comm_get_name`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_get_name(
    comm: MPI_Comm,
    comm_name: *mut std::ffi::c_char,
    resultlen: *mut c_int,
) -> c_int {
    guard("MPI_Comm_get_name", Some(comm), || {
        // The null handle answers with its own name, as MPICH does (programs print it).
        let name = if comm == MPI_COMM_NULL {
            "MPI_COMM_NULL".to_owned()
        } else {
            get(comm)?
                .name
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        };
        ptr::write_cstr(
            comm_name,
            MPI_MAX_OBJECT_NAME as usize,
            &name,
            resultlen,
            "comm_name",
        )
    })
}

/// `MPI_Comm_set_info`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_set_info(comm: MPI_Comm, info: MPI_Info) -> c_int {
    guard("MPI_Comm_set_info", Some(comm), || {
        let c = get(comm)?;
        let pairs = crate::info::pairs(info)?;
        *c.info.lock().unwrap_or_else(|p| p.into_inner()) = pairs;
        Ok(())
    })
}

/// `MPI_Comm_get_info`: the hints set, as a new info object.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_get_info(comm: MPI_Comm, info_used: *mut MPI_Info) -> c_int {
    guard("MPI_Comm_get_info", Some(comm), || {
        let c = get(comm)?;
        let pairs = c.info.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let h = crate::info::insert(pairs)?;
        ptr::write(info_used, h, "info_used")
    })
}

/// `MPI_Comm_create_errhandler`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_create_errhandler(
    comm_errhandler_fn: crate::attr::FnPtr<crate::attr::ctypes::MPI_Comm_errhandler_function>,
    errhandler: *mut MPI_Errhandler,
) -> c_int {
    guard("MPI_Comm_create_errhandler", None, || {
        let f = comm_errhandler_fn.addr();
        if f == 0 {
            return Err(err(MPI_ERR_ARG, "the error handler function is null"));
        }
        // SAFETY: a non-null MPI_Comm_errhandler_function from the program.
        let f = unsafe { std::mem::transmute::<usize, crate::errors::CommErrhandlerFn>(f) };
        let h = crate::errors::ERRHANDLERS
            .insert(crate::errors::Handler::Comm(f))
            .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many error handlers"))?;
        ptr::write(errhandler, h, "errhandler")
    })
}

/// `MPI_Comm_set_errhandler`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_set_errhandler(comm: MPI_Comm, errhandler: MPI_Errhandler) -> c_int {
    guard("MPI_Comm_set_errhandler", Some(comm), || {
        let c = get(comm)?;
        match crate::errors::handler(errhandler)? {
            crate::errors::Handler::Session(_) => {
                return Err(err(
                    MPI_ERR_ARG,
                    "a session error handler on a communicator",
                ));
            }
            _ => *c.errhandler.lock().unwrap_or_else(|p| p.into_inner()) = errhandler,
        }
        Ok(())
    })
}

/// `MPI_Comm_get_errhandler`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_get_errhandler(
    comm: MPI_Comm,
    errhandler: *mut MPI_Errhandler,
) -> c_int {
    guard("MPI_Comm_get_errhandler", Some(comm), || {
        let c = get(comm)?;
        let h = *c.errhandler.lock().unwrap_or_else(|p| p.into_inner());
        ptr::write(errhandler, h, "errhandler")
    })
}

/// `MPI_Comm_call_errhandler`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_call_errhandler(comm: MPI_Comm, errorcode: c_int) -> c_int {
    if let Err(e) = get(comm) {
        return crate::call::raise("MPI_Comm_call_errhandler", None, e);
    }
    crate::call::raise(
        "MPI_Comm_call_errhandler",
        Some(comm),
        err(
            errorcode,
            format!("error code {errorcode} raised by the program"),
        ),
    );
    MPI_SUCCESS
}

/// `MPI_Errhandler_free`: the predefined handlers stay; a user handler goes when its last
/// communicator lets go of it (its handle is dead at once).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Errhandler_free(errhandler: *mut MPI_Errhandler) -> c_int {
    guard("MPI_Errhandler_free", None, || {
        let h = ptr::read(errhandler, "errhandler")?;
        crate::errors::handler(h)?;
        if !matches!(
            h,
            MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT | MPI_ERRORS_RETURN
        ) {
            // Communicators still naming it keep working: the table entry stays until
            // finalize (handlers are a few words each).
            let _ = h;
        }
        ptr::write(errhandler, MPI_ERRHANDLER_NULL, "errhandler")
    })
}

/// `MPI_Error_class`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
    guard("MPI_Error_class", None, || {
        if !crate::errors::is_code(errorcode) {
            return Err(err(
                MPI_ERR_ARG,
                format!("{errorcode} is not an error code"),
            ));
        }
        ptr::write(errorclass, crate::errors::class_of(errorcode), "errorclass")
    })
}

/// `MPI_Error_string`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Error_string(
    errorcode: c_int,
    string: *mut std::ffi::c_char,
    resultlen: *mut c_int,
) -> c_int {
    guard("MPI_Error_string", None, || {
        let s = crate::errors::code_string(errorcode)
            .ok_or_else(|| err(MPI_ERR_ARG, format!("{errorcode} is not an error code")))?;
        ptr::write_cstr(
            string,
            MPI_MAX_ERROR_STRING as usize,
            &s,
            resultlen,
            "string",
        )
    })
}
/// `MPI_Remove_error_class`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Remove_error_class(errorclass: c_int) -> c_int {
    guard("MPI_Remove_error_class", None, || {
        crate::errors::remove::remove_class(errorclass)
    })
}

/// `MPI_Remove_error_code`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Remove_error_code(errorcode: c_int) -> c_int {
    guard("MPI_Remove_error_code", None, || {
        crate::errors::remove::remove_code(errorcode)
    })
}

/// `MPI_Remove_error_string`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Remove_error_string(errorcode: c_int) -> c_int {
    guard("MPI_Remove_error_string", None, || {
        crate::errors::remove::remove_string(errorcode)
    })
}

/// `MPI_Add_error_class`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Add_error_class(errorclass: *mut c_int) -> c_int {
    guard("MPI_Add_error_class", None, || {
        ptr::write(errorclass, crate::errors::add_class(), "errorclass")
    })
}

/// `MPI_Add_error_code`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> c_int {
    guard("MPI_Add_error_code", None, || {
        ptr::write(errorcode, crate::errors::add_code(errorclass)?, "errorcode")
    })
}

/// `MPI_Add_error_string`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Add_error_string(
    errorcode: c_int,
    string: *const std::ffi::c_char,
) -> c_int {
    guard("MPI_Add_error_string", None, || {
        let s = ptr::cstr(string, "string")?;
        crate::errors::add_string(errorcode, &s)
    })
}
