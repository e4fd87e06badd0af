//! Info objects: ordered (key, value) string pairs behind an `MPI_Info`, `MPI_INFO_ENV`, and
//! every `MPI_Info_*` function.

use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::handles::{Kind, Registry};
use crate::ptr;
use std::ffi::c_char;
use std::sync::{Arc, Mutex};

/// What an `MPI_Info` names.
pub type InfoObj = Mutex<Vec<(String, String)>>;

/// Info objects the program holds.
pub static INFOS: Registry<InfoObj> = Registry::new(Kind::Info);

/// `MPI_INFO_ENV`'s pairs: how the program was started, as far as a process can tell.
fn env_pairs() -> Vec<(String, String)> {
    let mut v = Vec::new();
    let args: Vec<String> = std::env::args().collect();
    if let Some(cmd) = args.first() {
        v.push(("command".to_owned(), cmd.clone()));
    }
    if args.len() > 1 {
        v.push(("argv".to_owned(), args[1..].join(" ")));
    }
    if let Ok(w) = crate::world::world_comm() {
        v.push(("maxprocs".to_owned(), w.size().to_string()));
    }
    v.push(("thread_level".to_owned(), "MPI_THREAD_MULTIPLE".to_owned()));
    if let Ok(d) = std::env::current_dir() {
        v.push(("wdir".to_owned(), d.display().to_string()));
    }
    v.push(("host".to_owned(), rcomm::processor_name()));
    v
}

fn env_info() -> Arc<InfoObj> {
    Arc::new(Mutex::new(env_pairs()))
}

/// The info `h` names (`MPI_INFO_ENV` is read-only: a fresh copy each time).
pub fn get(h: MPI_Info) -> Res<Arc<InfoObj>> {
    if h == MPI_INFO_ENV {
        return Ok(env_info());
    }
    INFOS.get(h).ok_or_else(|| {
        err(
            MPI_ERR_INFO,
            if h == MPI_INFO_NULL {
                "MPI_INFO_NULL is not a valid info object".to_owned()
            } else {
                format!("{h:#x} is not a live info object")
            },
        )
    })
}

/// The pairs of `h` (`MPI_INFO_NULL`: none), for functions taking hints.
pub fn pairs(h: MPI_Info) -> Res<Vec<(String, String)>> {
    if h == MPI_INFO_NULL {
        return Ok(Vec::new());
    }
    Ok(get(h)?.lock().unwrap_or_else(|p| p.into_inner()).clone())
}

/// Registers an info object holding `pairs`; its handle.
pub fn insert(pairs: Vec<(String, String)>) -> Res<MPI_Info> {
    INFOS
        .insert(Mutex::new(pairs))
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many info objects"))
}

fn key(p: *const c_char) -> Res<String> {
    let k = ptr::cstr(p, "key")?;
    if k.is_empty() || k.len() >= MPI_MAX_INFO_KEY as usize {
        return Err(err(
            MPI_ERR_INFO_KEY,
            format!("info key of {} bytes", k.len()),
        ));
    }
    Ok(k)
}

fn writable(h: MPI_Info) -> Res<Arc<InfoObj>> {
    if h == MPI_INFO_ENV {
        return Err(err(MPI_ERR_INFO, "MPI_INFO_ENV is read-only"));
    }
    get(h)
}

fn lookup(h: MPI_Info, k: &str) -> Res<Option<String>> {
    let i = get(h)?;
    let v = i.lock().unwrap_or_else(|p| p.into_inner());
    Ok(v.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.clone()))
}

/// `MPI_Info_create`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_create(info: *mut MPI_Info) -> c_int {
    guard("MPI_Info_create", None, || {
        ptr::write(info, insert(Vec::new())?, "info")
    })
}

/// `MPI_Info_create_env`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_create_env(
    argc: c_int,
    argv: *mut *mut c_char,
    info: *mut MPI_Info,
) -> c_int {
    let _ = (argc, argv);
    guard("MPI_Info_create_env", None, || {
        ptr::write(info, insert(env_pairs())?, "info")
    })
}

/// `MPI_Info_set`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_set(info: MPI_Info, key: *const c_char, value: *const c_char) -> c_int {
    guard("MPI_Info_set", None, || {
        let i = writable(info)?;
        let k = self::key(key)?;
        let v = ptr::cstr(value, "value")?;
        if v.len() >= MPI_MAX_INFO_VAL as usize {
            return Err(err(
                MPI_ERR_INFO_VALUE,
                format!("info value of {} bytes", v.len()),
            ));
        }
        let mut pairs = i.lock().unwrap_or_else(|p| p.into_inner());
        match pairs.iter_mut().find(|(kk, _)| *kk == k) {
            Some(p) => p.1 = v,
            None => pairs.push((k, v)),
        }
        Ok(())
    })
}

/// `MPI_Info_delete`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_delete(info: MPI_Info, key: *const c_char) -> c_int {
    guard("MPI_Info_delete", None, || {
        let i = writable(info)?;
        let k = self::key(key)?;
        let mut pairs = i.lock().unwrap_or_else(|p| p.into_inner());
        let at = pairs
            .iter()
            .position(|(kk, _)| *kk == k)
            .ok_or_else(|| err(MPI_ERR_INFO_NOKEY, format!("no key {k:?}")))?;
        pairs.remove(at);
        Ok(())
    })
}

/// `MPI_Info_get_string`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_get_string(
    info: MPI_Info,
    key: *const c_char,
    buflen: *mut c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    guard("MPI_Info_get_string", None, || {
        let k = self::key(key)?;
        let cap = ptr::read(buflen, "buflen")?;
        match lookup(info, &k)? {
            None => ptr::write(flag, 0, "flag"),
            Some(v) => {
                ptr::write(flag, 1, "flag")?;
                if cap > 0 {
                    ptr::write_cstr(value, cap as usize, &v, std::ptr::null_mut(), "value")?;
                }
                ptr::write(buflen, v.len() as c_int + 1, "buflen")
            }
        }
    })
}

/// `MPI_Info_get` (deprecated).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_get(
    info: MPI_Info,
    key: *const c_char,
    valuelen: c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    guard("MPI_Info_get", None, || {
        let k = self::key(key)?;
        match lookup(info, &k)? {
            None => ptr::write(flag, 0, "flag"),
            Some(v) => {
                ptr::write(flag, 1, "flag")?;
                let cap = ptr::count(valuelen as i64)? + 1;
                ptr::write_cstr(value, cap, &v, std::ptr::null_mut(), "value")
            }
        }
    })
}

/// `MPI_Info_get_valuelen` (deprecated).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_get_valuelen(
    info: MPI_Info,
    key: *const c_char,
    valuelen: *mut c_int,
    flag: *mut c_int,
) -> c_int {
    guard("MPI_Info_get_valuelen", None, || {
        let k = self::key(key)?;
        match lookup(info, &k)? {
            None => ptr::write(flag, 0, "flag"),
            Some(v) => {
                ptr::write(flag, 1, "flag")?;
                ptr::write(valuelen, v.len() as c_int, "valuelen")
            }
        }
    })
}

/// `MPI_Info_get_nkeys`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_get_nkeys(info: MPI_Info, nkeys: *mut c_int) -> c_int {
    guard("MPI_Info_get_nkeys", None, || {
        let n = get(info)?.lock().unwrap_or_else(|p| p.into_inner()).len();
        ptr::write(nkeys, n as c_int, "nkeys")
    })
}

/// `MPI_Info_get_nthkey`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_get_nthkey(info: MPI_Info, n: c_int, key: *mut c_char) -> c_int {
    guard("MPI_Info_get_nthkey", None, || {
        let i = get(info)?;
        let pairs = i.lock().unwrap_or_else(|p| p.into_inner());
        let k = usize::try_from(n)
            .ok()
            .and_then(|n| pairs.get(n))
            .map(|(k, _)| k.clone())
            .ok_or_else(|| err(MPI_ERR_ARG, format!("key number {n} of {}", pairs.len())))?;
        ptr::write_cstr(
            key,
            MPI_MAX_INFO_KEY as usize,
            &k,
            std::ptr::null_mut(),
            "key",
        )
    })
}

/// `MPI_Info_dup`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_dup(info: MPI_Info, newinfo: *mut MPI_Info) -> c_int {
    guard("MPI_Info_dup", None, || {
        let p = get(info)?.lock().unwrap_or_else(|p| p.into_inner()).clone();
        ptr::write(newinfo, insert(p)?, "newinfo")
    })
}

/// `MPI_Info_free`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_free(info: *mut MPI_Info) -> c_int {
    guard("MPI_Info_free", None, || {
        let h = ptr::read(info, "info")?;
        if h == MPI_INFO_ENV {
            return Err(err(MPI_ERR_INFO, "MPI_INFO_ENV cannot be freed"));
        }
        INFOS
            .remove(h)
            .ok_or_else(|| err(MPI_ERR_INFO, format!("{h:#x} is not a live info object")))?;
        ptr::write(info, MPI_INFO_NULL, "info")
    })
}

/// `MPI_Abi_get_info`: facts about this ABI library.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Abi_get_info(info: *mut MPI_Info) -> c_int {
    guard("MPI_Abi_get_info", None, || {
        let pairs = vec![
            (
                "mpi_aint_size".to_owned(),
                size_of::<MPI_Aint>().to_string(),
            ),
            (
                "mpi_count_size".to_owned(),
                size_of::<MPI_Count>().to_string(),
            ),
            (
                "mpi_offset_size".to_owned(),
                size_of::<MPI_Offset>().to_string(),
            ),
            ("library".to_owned(), crate::world::library_version()),
        ];
        ptr::write(info, insert(pairs)?, "info")
    })
}

/// `MPI_Abi_get_fortran_info`: rcomm has no Fortran bindings, so there are no Fortran type
/// sizes to report: `MPI_INFO_NULL`, the standard's answer for that case.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Abi_get_fortran_info(info: *mut MPI_Info) -> c_int {
    guard("MPI_Abi_get_fortran_info", None, || {
        ptr::write(info, MPI_INFO_NULL, "info")
    })
}

/// `MPI_Get_hw_resource_info`: the hardware resource types this process can split a
/// communicator by (`MPI_Comm_split_type` with `MPI_COMM_TYPE_HW_GUIDED`), each a key with
/// the value `"true"`; rcomm knows one, the node's shared memory.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Get_hw_resource_info(hw_info: *mut MPI_Info) -> c_int {
    guard("MPI_Get_hw_resource_info", None, || {
        let pairs = vec![("mpi_shared_memory".to_owned(), "true".to_owned())];
        ptr::write(hw_info, insert(pairs)?, "hw_info")
    })
}
