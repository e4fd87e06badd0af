//! `MPI_Remove_error_class` / `_code` / `_string` (MPI-4.1): undo what the `MPI_Add_error_*`
//! calls added. Standard classes and codes cannot be removed. The exported functions are in
//! `comm`, beside `MPI_Add_error_*`.

use super::*;

/// `code` as an added code (or class): `MPI_ERR_ARG` for a standard or unknown one.
fn added_code(a: &Added, code: c_int) -> Res<c_int> {
    a.class_of
        .get(&code)
        .copied()
        .ok_or_else(|| err(MPI_ERR_ARG, format!("{code} was not added")))
}

/// Refuses to remove a code or class that still has its string: the string goes first
/// (`MPI_Remove_error_string`), as MPICH requires too.
fn no_string(a: &Added, code: c_int) -> Res {
    if a.strings.contains_key(&code) {
        return Err(err(
            MPI_ERR_ARG,
            format!("{code} still has an error string: remove it first"),
        ));
    }
    Ok(())
}

/// `MPI_Remove_error_class`: the class must have no codes left but itself, and no string.
pub fn remove_class(errorclass: c_int) -> Res {
    added(|a| {
        if added_code(a, errorclass)? != errorclass {
            return Err(err(
                MPI_ERR_ARG,
                format!("{errorclass} is a code, not a class"),
            ));
        }
        if a.class_of
            .iter()
            .any(|(&c, &k)| k == errorclass && c != errorclass)
        {
            return Err(err(
                MPI_ERR_ARG,
                format!("error class {errorclass} still has codes: remove them first"),
            ));
        }
        no_string(a, errorclass)?;
        a.class_of.remove(&errorclass);
        a.strings.remove(&errorclass);
        Ok(())
    })
}

/// `MPI_Remove_error_code`.
pub fn remove_code(errorcode: c_int) -> Res {
    added(|a| {
        if added_code(a, errorcode)? == errorcode {
            return Err(err(
                MPI_ERR_ARG,
                format!("{errorcode} is a class, not a code"),
            ));
        }
        no_string(a, errorcode)?;
        a.class_of.remove(&errorcode);
        a.strings.remove(&errorcode);
        Ok(())
    })
}

/// `MPI_Remove_error_string`.
pub fn remove_string(errorcode: c_int) -> Res {
    added(|a| {
        added_code(a, errorcode)?;
        a.strings
            .remove(&errorcode)
            .map(drop)
            .ok_or_else(|| err(MPI_ERR_ARG, format!("{errorcode} has no string")))
    })
}
