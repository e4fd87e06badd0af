//! Datatype names, `MPI_Type_match_size` and `MPI_Type_get_value_index`.

use super::*;
use std::ffi::c_char;

/// `MPI_Type_set_name`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_set_name(datatype: MPI_Datatype, type_name: *const c_char) -> c_int {
    guard("MPI_Type_set_name", None, || {
        let t = typeobj::get(datatype)?;
        let mut name = ptr::cstr(type_name, "type_name")?;
        name.truncate(MPI_MAX_OBJECT_NAME as usize - 1);
        *t.name.lock().unwrap_or_else(|p| p.into_inner()) = name;
        Ok(())
    })
}

/// `MPI_Type_get_name`: a predefined type's is its MPI name (`"MPI_INT"`), a derived
/// type's empty until set.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_name(
    datatype: MPI_Datatype,
    type_name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    guard("MPI_Type_get_name", None, || {
        // The null handle answers with its own name, as MPICH does (programs print it).
        let name = if datatype == MPI_DATATYPE_NULL {
            "MPI_DATATYPE_NULL".to_owned()
        } else {
            typeobj::get(datatype)?
                .name
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        };
        ptr::write_cstr(
            type_name,
            MPI_MAX_OBJECT_NAME as usize,
            &name,
            resultlen,
            "type_name",
        )
    })
}

/// The sized types `MPI_Type_match_size` chooses from, per type class.
const SIZED: [(c_int, &[MPI_Datatype]); 3] = [
    (
        MPI_TYPECLASS_INTEGER,
        &[
            MPI_INTEGER1,
            MPI_INTEGER2,
            MPI_INTEGER4,
            MPI_INTEGER8,
            MPI_INTEGER16,
        ],
    ),
    (
        MPI_TYPECLASS_REAL,
        &[MPI_REAL2, MPI_REAL4, MPI_REAL8, MPI_REAL16],
    ),
    (
        MPI_TYPECLASS_COMPLEX,
        &[MPI_COMPLEX4, MPI_COMPLEX8, MPI_COMPLEX16, MPI_COMPLEX32],
    ),
];

/// `MPI_Type_match_size`: the predefined type of the class with `size` bytes.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_match_size(
    typeclass: c_int,
    size: c_int,
    datatype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_match_size", None, || {
        let (_, cands) = SIZED
            .iter()
            .find(|(c, _)| *c == typeclass)
            .ok_or_else(|| err(MPI_ERR_ARG, format!("{typeclass} is not a type class")))?;
        let found = cands
            .iter()
            .copied()
            .find(|&h| typeobj::get(h).is_ok_and(|t| t.size() as i64 == i64::from(size)))
            .ok_or_else(|| {
                err(
                    MPI_ERR_ARG,
                    format!("no type of class {typeclass} has {size} bytes"),
                )
            })?;
        ptr::write(datatype, found, "datatype")
    })
}

/// The predefined (value, index) pair types of MINLOC and MAXLOC.
const PAIRS: [(MPI_Datatype, MPI_Datatype, MPI_Datatype); 9] = [
    (MPI_FLOAT, MPI_INT, MPI_FLOAT_INT),
    (MPI_DOUBLE, MPI_INT, MPI_DOUBLE_INT),
    (MPI_LONG, MPI_INT, MPI_LONG_INT),
    (MPI_INT, MPI_INT, MPI_2INT),
    (MPI_SHORT, MPI_INT, MPI_SHORT_INT),
    (MPI_LONG_DOUBLE, MPI_INT, MPI_LONG_DOUBLE_INT),
    (MPI_REAL, MPI_REAL, MPI_2REAL),
    (
        MPI_DOUBLE_PRECISION,
        MPI_DOUBLE_PRECISION,
        MPI_2DOUBLE_PRECISION,
    ),
    (MPI_INTEGER, MPI_INTEGER, MPI_2INTEGER),
];

/// `MPI_Type_get_value_index`: the pair type, or `MPI_DATATYPE_NULL` when none is predefined.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_value_index(
    value_type: MPI_Datatype,
    index_type: MPI_Datatype,
    pair_type: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_get_value_index", None, || {
        typeobj::get(value_type)?;
        typeobj::get(index_type)?;
        let pair = PAIRS
            .iter()
            .find(|p| p.0 == value_type && p.1 == index_type)
            .map_or(MPI_DATATYPE_NULL, |p| p.2);
        ptr::write(pair_type, pair, "pair_type")
    })
}
