//! Attributes: keyvals with the program's C copy and delete callbacks, values on
//! communicators, and the predefined keys (`MPI_TAG_UB`, `MPI_HOST`, …).

use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::ptr;
use crate::world::{self as comm, CommObj};
use std::collections::HashMap;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

/// Datatype attributes (the same keyvals).
pub mod types;

/// A C function pointer passed as a plain address: the ABI's sentinel values
/// (`MPI_COMM_DUP_FN` is 1) are not valid Rust function pointers. `T` names the C typedef, for
/// the header.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FnPtr<T>(pub usize, PhantomData<T>);

impl<T> FnPtr<T> {
    /// The address.
    pub fn addr(self) -> usize {
        self.0
    }
}

/// C typedef names, for [`FnPtr`].
pub mod ctypes {
    /// `MPI_Comm_copy_attr_function`.
    pub enum MPI_Comm_copy_attr_function {}
    /// `MPI_Comm_delete_attr_function`.
    pub enum MPI_Comm_delete_attr_function {}
    /// `MPI_Copy_function`.
    pub enum MPI_Copy_function {}
    /// `MPI_Delete_function`.
    pub enum MPI_Delete_function {}
    /// `MPI_Comm_errhandler_function`.
    pub enum MPI_Comm_errhandler_function {}
    /// `MPI_Session_errhandler_function`.
    pub enum MPI_Session_errhandler_function {}
    /// `MPI_User_function`.
    pub enum MPI_User_function {}
    /// `MPI_User_function_c`.
    pub enum MPI_User_function_c {}
    /// `MPI_Type_copy_attr_function`.
    pub enum MPI_Type_copy_attr_function {}
    /// `MPI_Type_delete_attr_function`.
    pub enum MPI_Type_delete_attr_function {}
}

type CopyFn = unsafe extern "C" fn(
    MPI_Comm,
    c_int,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_int,
) -> c_int;
type DeleteFn = unsafe extern "C" fn(MPI_Comm, c_int, *mut c_void, *mut c_void) -> c_int;

const NULL_FN: usize = 0;
const DUP_FN: usize = 1;

#[derive(Clone, Copy)]
struct Keyval {
    copy: usize,
    delete: usize,
    extra: usize,
}

struct Keyvals {
    next: c_int,
    live: HashMap<c_int, Keyval>,
}

static KEYVALS: Mutex<Option<Keyvals>> = Mutex::new(None);

fn keyvals<R>(f: impl FnOnce(&mut Keyvals) -> R) -> R {
    let mut g = KEYVALS.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(|| Keyvals {
        next: 1000,
        live: HashMap::new(),
    }))
}

fn keyval(k: c_int) -> Res<Keyval> {
    keyvals(|t| t.live.get(&k).copied())
        .ok_or_else(|| err(MPI_ERR_KEYVAL, format!("{k} is not a live keyval")))
}

fn is_predefined(k: c_int) -> bool {
    (MPI_TAG_UB..=MPI_UNIVERSE_SIZE).contains(&k)
}

/// Calls `key`'s delete callback on `value`.
fn delete_one(h: MPI_Comm, key: c_int, value: usize) -> Res {
    let Ok(kv) = keyval(key) else { return Ok(()) };
    if kv.delete == NULL_FN {
        return Ok(());
    }
    // SAFETY: a non-null delete callback is the MPI_Comm_delete_attr_function the program
    // registered for this keyval.
    let f: DeleteFn = unsafe { std::mem::transmute::<usize, DeleteFn>(kv.delete) };
    // SAFETY: calling the program's callback with the values it stored.
    let rc = unsafe { f(h, key, value as *mut c_void, kv.extra as *mut c_void) };
    if rc != MPI_SUCCESS {
        return Err(err(
            rc,
            format!("the delete callback of keyval {key} returned {rc}"),
        ));
    }
    Ok(())
}

/// Deletes every attribute of `c` (freeing it, or finalize for self and world).
pub fn delete_all(h: MPI_Comm, c: &CommObj) {
    let all = std::mem::take(&mut *c.attrs.lock().unwrap_or_else(|p| p.into_inner()));
    for (k, v) in all {
        let _ = delete_one(h, k, v);
    }
}

/// Copies `old`'s attributes to `new` as each keyval's copy callback says (`MPI_Comm_dup`).
pub fn copy_all(old_h: MPI_Comm, old: &CommObj, new: &CommObj) -> Res {
    let all: Vec<(c_int, usize)> = old
        .attrs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(k, v)| (*k, *v))
        .collect();
    for (k, v) in all {
        if let Some(v) = copy_one(old_h, k, v)? {
            new.attrs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(k, v);
        }
    }
    Ok(())
}

/// What keyval `k`'s copy callback makes of value `v` of the object `old_h` (a communicator
/// or a datatype: both callbacks take the handle first); `None`: not copied.
fn copy_one(old_h: usize, k: c_int, v: usize) -> Res<Option<usize>> {
    let kv = keyval(k)?;
    Ok(match kv.copy {
        NULL_FN => None,
        DUP_FN => Some(v),
        f => {
            // SAFETY: the program's copy callback for this keyval.
            let f: CopyFn = unsafe { std::mem::transmute::<usize, CopyFn>(f) };
            let mut out: usize = 0;
            let mut flag: c_int = 0;
            // SAFETY: the callback gets the stored value and pointers to two locals.
            let rc = unsafe {
                f(
                    old_h,
                    k,
                    kv.extra as *mut c_void,
                    v as *mut c_void,
                    (&mut out as *mut usize).cast(),
                    &mut flag,
                )
            };
            if rc != MPI_SUCCESS {
                return Err(err(
                    rc,
                    format!("the copy callback of keyval {k} returned {rc}"),
                ));
            }
            (flag != 0).then_some(out)
        }
    })
}

static TAG_UB: AtomicI32 = AtomicI32::new(i32::MAX);
static HOST: AtomicI32 = AtomicI32::new(MPI_PROC_NULL);
static IO: AtomicI32 = AtomicI32::new(MPI_ANY_SOURCE);
static WTIME_IS_GLOBAL: AtomicI32 = AtomicI32::new(0);
static UNIVERSE_SIZE: AtomicI32 = AtomicI32::new(1);
static LASTUSEDCODE: AtomicI32 = AtomicI32::new(MPI_ERR_LASTCODE);

/// A predefined key's value: the address of an int that lives as long as the library.
fn predefined(c: &CommObj, k: c_int) -> Option<usize> {
    let cell = match k {
        MPI_TAG_UB => &TAG_UB,
        MPI_HOST => &HOST,
        MPI_IO => &IO,
        MPI_WTIME_IS_GLOBAL => &WTIME_IS_GLOBAL,
        MPI_UNIVERSE_SIZE => {
            let n = crate::world::world_comm().map_or(c.comm.size(), |w| w.size());
            UNIVERSE_SIZE.store(n as i32, Ordering::Relaxed);
            &UNIVERSE_SIZE
        }
        MPI_LASTUSEDCODE => {
            LASTUSEDCODE.store(crate::errors::last_used_code(), Ordering::Relaxed);
            &LASTUSEDCODE
        }
        // rcomm-run starts one application: MPI_APPNUM is not set.
        _ => return None,
    };
    Some(cell.as_ptr() as usize)
}

fn create_keyval(copy: usize, delete: usize, key: *mut c_int, extra: usize) -> Res {
    let k = keyvals(|t| {
        let k = t.next;
        t.next += 1;
        t.live.insert(
            k,
            Keyval {
                copy,
                delete,
                extra,
            },
        );
        k
    });
    ptr::write(key, k, "keyval")
}

fn free_keyval(key: *mut c_int) -> Res {
    let k = ptr::read(key, "keyval")?;
    if is_predefined(k) {
        return Err(err(MPI_ERR_KEYVAL, format!("keyval {k} is predefined")));
    }
    keyvals(|t| t.live.remove(&k))
        .ok_or_else(|| err(MPI_ERR_KEYVAL, format!("{k} is not a live keyval")))?;
    ptr::write(key, MPI_KEYVAL_INVALID, "keyval")
}

fn set_attr(h: MPI_Comm, k: c_int, value: usize) -> Res {
    let c = comm::get(h)?;
    if is_predefined(k) {
        return Err(err(
            MPI_ERR_KEYVAL,
            format!("keyval {k} is predefined (read-only)"),
        ));
    }
    keyval(k)?;
    let old = c.attrs.lock().unwrap_or_else(|p| p.into_inner()).remove(&k);
    if let Some(v) = old {
        delete_one(h, k, v)?;
    }
    c.attrs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(k, value);
    Ok(())
}

fn get_attr(h: MPI_Comm, k: c_int, out: *mut c_void, flag: *mut c_int) -> Res {
    let c = comm::get(h)?;
    let v = if is_predefined(k) {
        predefined(&c, k)
    } else {
        keyval(k)?;
        c.attrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&k)
            .copied()
    };
    if let Some(v) = v {
        ptr::write(out.cast::<usize>(), v, "attribute_val")?;
    }
    ptr::write(flag, v.is_some() as c_int, "flag")
}

fn delete_attr(h: MPI_Comm, k: c_int) -> Res {
    let c = comm::get(h)?;
    keyval(k)?;
    let v = c.attrs.lock().unwrap_or_else(|p| p.into_inner()).remove(&k);
    match v {
        Some(v) => delete_one(h, k, v),
        None => Err(err(
            MPI_ERR_KEYVAL,
            format!("no attribute of keyval {k} on this communicator"),
        )),
    }
}

/// `MPI_Comm_create_keyval`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_create_keyval(
    comm_copy_attr_fn: FnPtr<ctypes::MPI_Comm_copy_attr_function>,
    comm_delete_attr_fn: FnPtr<ctypes::MPI_Comm_delete_attr_function>,
    comm_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    guard("MPI_Comm_create_keyval", None, || {
        create_keyval(
            comm_copy_attr_fn.addr(),
            comm_delete_attr_fn.addr(),
            comm_keyval,
            extra_state as usize,
        )
    })
}

/// `MPI_Keyval_create` (deprecated spelling).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Keyval_create(
    copy_fn: FnPtr<ctypes::MPI_Copy_function>,
    delete_fn: FnPtr<ctypes::MPI_Delete_function>,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    guard("MPI_Keyval_create", None, || {
        create_keyval(
            copy_fn.addr(),
            delete_fn.addr(),
            keyval,
            extra_state as usize,
        )
    })
}

/// `MPI_Comm_free_keyval`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_free_keyval(comm_keyval: *mut c_int) -> c_int {
    guard("MPI_Comm_free_keyval", None, || free_keyval(comm_keyval))
}

/// `MPI_Keyval_free` (deprecated spelling).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Keyval_free(keyval: *mut c_int) -> c_int {
    guard("MPI_Keyval_free", None, || free_keyval(keyval))
}

/// `MPI_Comm_set_attr`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_set_attr(
    comm: MPI_Comm,
    comm_keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    guard("MPI_Comm_set_attr", Some(comm), || {
        set_attr(comm, comm_keyval, attribute_val as usize)
    })
}

/// `MPI_Attr_put` (deprecated spelling).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Attr_put(
    comm: MPI_Comm,
    keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    guard("MPI_Attr_put", Some(comm), || {
        set_attr(comm, keyval, attribute_val as usize)
    })
}

/// `MPI_Comm_get_attr`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_get_attr(
    comm: MPI_Comm,
    comm_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    guard("MPI_Comm_get_attr", Some(comm), || {
        get_attr(comm, comm_keyval, attribute_val, flag)
    })
}

/// `MPI_Attr_get` (deprecated spelling).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Attr_get(
    comm: MPI_Comm,
    keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    guard("MPI_Attr_get", Some(comm), || {
        get_attr(comm, keyval, attribute_val, flag)
    })
}

/// `MPI_Comm_delete_attr`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_delete_attr(comm: MPI_Comm, comm_keyval: c_int) -> c_int {
    guard("MPI_Comm_delete_attr", Some(comm), || {
        delete_attr(comm, comm_keyval)
    })
}

/// `MPI_Attr_delete` (deprecated spelling).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Attr_delete(comm: MPI_Comm, keyval: c_int) -> c_int {
    guard("MPI_Attr_delete", Some(comm), || delete_attr(comm, keyval))
}
