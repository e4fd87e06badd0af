//! Datatype attributes: the communicator keyval table and callbacks (an `MPI_Datatype` is a
//! handle like an `MPI_Comm`, so the callbacks take the same arguments), stored on the type.

use super::*;
use crate::typeobj::{self, TypeObj};

/// Deletes every attribute of `t` (`MPI_Type_free`), calling the delete callbacks.
pub fn delete_all(h: MPI_Datatype, t: &TypeObj) {
    let all = std::mem::take(&mut *t.attrs.lock().unwrap_or_else(|p| p.into_inner()));
    for (k, v) in all {
        let _ = delete_one(h, k, v);
    }
}

/// Copies `old`'s attributes to `new` as each keyval's copy callback says (`MPI_Type_dup`).
pub fn copy_all(old_h: MPI_Datatype, old: &TypeObj, new: &TypeObj) -> Res {
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

/// `MPI_Type_create_keyval`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_keyval(
    type_copy_attr_fn: FnPtr<ctypes::MPI_Type_copy_attr_function>,
    type_delete_attr_fn: FnPtr<ctypes::MPI_Type_delete_attr_function>,
    type_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    guard("MPI_Type_create_keyval", None, || {
        create_keyval(
            type_copy_attr_fn.addr(),
            type_delete_attr_fn.addr(),
            type_keyval,
            extra_state as usize,
        )
    })
}

/// `MPI_Type_free_keyval`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_free_keyval(type_keyval: *mut c_int) -> c_int {
    guard("MPI_Type_free_keyval", None, || free_keyval(type_keyval))
}

/// `MPI_Type_set_attr`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_set_attr(
    datatype: MPI_Datatype,
    type_keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    guard("MPI_Type_set_attr", None, || {
        let t = typeobj::get(datatype)?;
        keyval(type_keyval)?;
        let old = t
            .attrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&type_keyval);
        if let Some(v) = old {
            delete_one(datatype, type_keyval, v)?;
        }
        t.attrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(type_keyval, attribute_val as usize);
        Ok(())
    })
}

/// `MPI_Type_get_attr`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_attr(
    datatype: MPI_Datatype,
    type_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    guard("MPI_Type_get_attr", None, || {
        let t = typeobj::get(datatype)?;
        keyval(type_keyval)?;
        let v = t
            .attrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&type_keyval)
            .copied();
        if let Some(v) = v {
            ptr::write(attribute_val.cast::<usize>(), v, "attribute_val")?;
        }
        ptr::write(flag, v.is_some() as c_int, "flag")
    })
}

/// `MPI_Type_delete_attr`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_delete_attr(datatype: MPI_Datatype, type_keyval: c_int) -> c_int {
    guard("MPI_Type_delete_attr", None, || {
        let t = typeobj::get(datatype)?;
        keyval(type_keyval)?;
        let v = t
            .attrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&type_keyval);
        match v {
            Some(v) => delete_one(datatype, type_keyval, v),
            None => Err(err(
                MPI_ERR_KEYVAL,
                format!("no attribute of keyval {type_keyval} on this datatype"),
            )),
        }
    })
}
