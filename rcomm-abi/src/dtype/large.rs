//! The large-count (`_c`) datatype constructors: the paths of the `int` forms, their
//! arguments recorded as large counts.

use super::*;

/// `MPI_Type_contiguous_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_contiguous_c(
    count: MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_contiguous_c", None, || {
        contiguous(count, oldtype, newtype, true)
    })
}

/// `MPI_Type_vector_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_vector_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    stride: MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_vector_c", None, || {
        vector([count, blocklength, stride], oldtype, newtype, true, false)
    })
}

/// `MPI_Type_create_hvector_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_hvector_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    stride: MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_hvector_c", None, || {
        vector([count, blocklength, stride], oldtype, newtype, true, true)
    })
}

/// `MPI_Type_indexed_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_indexed_c(
    count: MPI_Count,
    array_of_blocklengths: *const MPI_Count,
    array_of_displacements: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_indexed_c", None, || {
        let n = cnt(count, "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let ds = arr(array_of_displacements, n, "array_of_displacements")?;
        indexed(&bl, &ds, oldtype, newtype, true, false)
    })
}

/// `MPI_Type_create_hindexed_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_hindexed_c(
    count: MPI_Count,
    array_of_blocklengths: *const MPI_Count,
    array_of_displacements: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_hindexed_c", None, || {
        let n = cnt(count, "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let ds = arr(array_of_displacements, n, "array_of_displacements")?;
        indexed(&bl, &ds, oldtype, newtype, true, true)
    })
}

/// `MPI_Type_create_indexed_block_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_indexed_block_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    array_of_displacements: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_indexed_block_c", None, || {
        let n = cnt(count, "count")?;
        let ds = arr(array_of_displacements, n, "array_of_displacements")?;
        indexed_block(blocklength, &ds, oldtype, newtype, true, false)
    })
}

/// `MPI_Type_create_hindexed_block_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_hindexed_block_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    array_of_displacements: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_hindexed_block_c", None, || {
        let n = cnt(count, "count")?;
        let ds = arr(array_of_displacements, n, "array_of_displacements")?;
        indexed_block(blocklength, &ds, oldtype, newtype, true, true)
    })
}

/// `MPI_Type_create_struct_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_struct_c(
    count: MPI_Count,
    array_of_blocklengths: *const MPI_Count,
    array_of_displacements: *const MPI_Count,
    array_of_types: *const MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_struct_c", None, || {
        let n = cnt(count, "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let ds = arr(array_of_displacements, n, "array_of_displacements")?;
        let ts = ptr::slice(array_of_types, n, "array_of_types")?;
        structured(&bl, &ds, ts, newtype, true)
    })
}

/// `MPI_Type_create_subarray_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_subarray_c(
    ndims: c_int,
    array_of_sizes: *const MPI_Count,
    array_of_subsizes: *const MPI_Count,
    array_of_starts: *const MPI_Count,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_subarray_c", None, || {
        let p = [array_of_sizes, array_of_subsizes, array_of_starts];
        subarray(subarray_dims(ndims, p)?, order, oldtype, newtype, true)
    })
}

/// `MPI_Type_create_resized_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_resized_c(
    oldtype: MPI_Datatype,
    lb: MPI_Count,
    extent: MPI_Count,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_resized_c", None, || {
        resized(lb, extent, oldtype, newtype, true)
    })
}
