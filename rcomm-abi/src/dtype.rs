//! Datatype constructors, commit/free, envelope/contents, size and extent queries, pack and
//! unpack, `MPI_Get_address`. Every constructor is rcomm's [`Datatype`] constructor of the
//! same name; what MPI adds is kept beside it in [`SIDE`]: the one predefined type the new
//! type is made of (reductions with predefined ops need it), the alignment MPI's struct
//! extent rounds to, and the component types `MPI_Type_get_contents` hands back.

use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::layout::{self, Basic, Wide};
use crate::ptr;
use crate::typeobj::{self, Contents, TYPES, TypeObj};
use rcomm::datatype::{Datatype, Order};
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The external32 representation.
mod external;
/// The Fortran 90 parameterised types.
mod f90;
/// Names, size matching and value-index pairs.
mod info;
/// The large-count constructors (apart so this file stays readable).
mod large;

/// What a type is made of, beyond its layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Info {
    /// The predefined type every part is, if there is one.
    basic: Option<MPI_Datatype>,
    /// The strictest alignment of its parts (a struct's extent is a multiple of it).
    align: usize,
}

/// A derived type's extra facts and its components (alive as long as it is).
struct Side {
    info: Info,
    parts: Parts,
}

/// A derived type's [`Side`], kept in its object (`TypeObj::ext`).
fn side_of(t: &TypeObj) -> Option<&Side> {
    t.ext.get().and_then(|b| b.downcast_ref::<Side>())
}

fn align_of_basic(h: MPI_Datatype, size: usize) -> usize {
    match layout::basic_of(h) {
        Some(Basic::Pair(v, i)) => pair_align(*v).max(pair_align(*i)),
        Some(Basic::C32) => 4,
        Some(Basic::C64) => 8,
        _ => size.clamp(1, 16),
    }
}

fn pair_align(b: Basic) -> usize {
    match b {
        Basic::Int(n) | Basic::Uint(n) => n,
        Basic::F32 => 4,
        _ => 8,
    }
}

fn info_of(h: MPI_Datatype, t: &TypeObj) -> Info {
    if h < crate::handles::FIRST_DYNAMIC {
        return Info {
            basic: Some(h),
            align: align_of_basic(h, t.size()),
        };
    }
    side_of(t).map(|x| x.info).unwrap_or(Info {
        basic: None,
        align: 1,
    })
}

/// The one predefined type a derived type is made of, if any (for reductions).
pub fn uniform_basic(h: MPI_Datatype) -> Option<MPI_Datatype> {
    typeobj::get(h)
        .ok()
        .and_then(|t| side_of(&t).and_then(|x| x.info.basic))
}

fn predefined_size(h: MPI_Datatype) -> usize {
    typeobj::get(h).map_or(0, |t| t.size())
}

/// Registers a new derived type made from `parts`, returning its handle in `*out`.
fn make(dt: Datatype, contents: Contents, parts: &[MPI_Datatype], out: *mut MPI_Datatype) -> Res {
    if out.is_null() {
        return Err(err(MPI_ERR_ARG, "newtype is a null pointer"));
    }
    let obj = build(dt, contents, parts)?;
    let h = TYPES
        .insert(obj)
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many datatypes"))?;
    ptr::write(out, h, "newtype")
}

/// A derived type's object, made from `parts`.
fn build(dt: Datatype, contents: Contents, parts: &[MPI_Datatype]) -> Res<TypeObj> {
    let mut objs = Vec::with_capacity(parts.len());
    for &p in parts {
        let t = typeobj::get(p)?;
        let i = info_of(p, &t);
        objs.push((p, t, i));
    }
    let first = objs.first().map(|o| o.2.basic).unwrap_or(None);
    let basic = objs
        .iter()
        .all(|o| o.2.basic.is_some() && o.2.basic == first)
        .then_some(first)
        .flatten();
    let align = objs.iter().map(|o| o.2.align).max().unwrap_or(1);
    let basic_size = basic.and_then(|b| match layout::basic_of(b) {
        Some(Basic::Pair(..)) => None,
        _ => Some(predefined_size(b)),
    });
    let obj = TypeObj::derived(dt, contents, basic_size);
    let _ = obj.ext.set(Box::new(Side {
        info: Info { basic, align },
        parts: objs,
    }));
    Ok(obj)
}

fn old(h: MPI_Datatype) -> Res<Arc<TypeObj>> {
    typeobj::get(h)
}

fn cnt(n: i64, what: &str) -> Res<usize> {
    usize::try_from(n).map_err(|_| err(MPI_ERR_COUNT, format!("{what} {n} is negative")))
}

/// `n` integers (`int`, `MPI_Count` or `MPI_Aint`) from the caller's array, as `i64`s.
fn arr<T: Wide>(p: *const T, n: usize, what: &str) -> Res<Vec<i64>> {
    Ok(ptr::slice(p, n, what)?.iter().map(|&v| v.wide()).collect())
}

fn counts_of(v: &[i64], what: &str) -> Res<Vec<usize>> {
    v.iter().map(|&b| cnt(b, what)).collect()
}

fn displs_of(v: &[i64]) -> Vec<isize> {
    v.iter().map(|&d| d as isize).collect()
}

/// A constructor's arguments as `MPI_Type_get_contents` hands them back: the `int` forms
/// keep integers and addresses apart, the `_c` forms hold both as large counts (integers
/// first), as the standard's table for the large-count constructors lays them out.
fn recorded(
    large: bool,
    combiner: c_int,
    ints: Vec<i64>,
    aints: Vec<i64>,
    types: Vec<MPI_Datatype>,
) -> Contents {
    if large {
        Contents {
            combiner,
            ints: Vec::new(),
            aints: Vec::new(),
            counts: ints.into_iter().chain(aints).collect(),
            types,
        }
    } else {
        Contents {
            combiner,
            ints: ints.into_iter().map(|v| v as c_int).collect(),
            aints: aints.into_iter().map(|v| v as MPI_Aint).collect(),
            counts: Vec::new(),
            types,
        }
    }
}

/// Contiguous; `large`: made by the `_c` form (so its contents are large counts).
fn contiguous(count: i64, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype, large: bool) -> Res {
    let dt = Datatype::contiguous(cnt(count, "count")?, &old(oldtype)?.dt)?;
    let c = recorded(
        large,
        MPI_COMBINER_CONTIGUOUS,
        vec![count],
        vec![],
        vec![oldtype],
    );
    make(dt, c, &[oldtype], newtype)
}

/// Vector (`bytes`: hvector, the stride in bytes).
fn vector(
    [count, blocklength, stride]: [i64; 3],
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
    large: bool,
    bytes: bool,
) -> Res {
    let (n, bl) = (cnt(count, "count")?, cnt(blocklength, "blocklength")?);
    let o = old(oldtype)?;
    let (dt, c) = if bytes {
        (
            Datatype::hvector(n, bl, stride as MPI_Aint, &o.dt)?,
            recorded(
                large,
                MPI_COMBINER_HVECTOR,
                vec![count, blocklength],
                vec![stride],
                vec![oldtype],
            ),
        )
    } else {
        (
            Datatype::vector(n, bl, stride as isize, &o.dt)?,
            recorded(
                large,
                MPI_COMBINER_VECTOR,
                vec![count, blocklength, stride],
                vec![],
                vec![oldtype],
            ),
        )
    };
    make(dt, c, &[oldtype], newtype)
}

/// Indexed (`bytes`: hindexed, the displacements in bytes).
fn indexed(
    bls: &[i64],
    ds: &[i64],
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
    large: bool,
    bytes: bool,
) -> Res {
    let bl = counts_of(bls, "block length")?;
    let o = old(oldtype)?;
    let mut ints = vec![bls.len() as i64];
    ints.extend(bls);
    let (dt, c) = if bytes {
        (
            Datatype::hindexed(&bl, &displs_of(ds), &o.dt)?,
            recorded(
                large,
                MPI_COMBINER_HINDEXED,
                ints,
                ds.to_vec(),
                vec![oldtype],
            ),
        )
    } else {
        ints.extend(ds);
        (
            Datatype::indexed(&bl, &displs_of(ds), &o.dt)?,
            recorded(large, MPI_COMBINER_INDEXED, ints, vec![], vec![oldtype]),
        )
    };
    make(dt, c, &[oldtype], newtype)
}

/// Indexed with one block length (`bytes`: hindexed_block).
fn indexed_block(
    blocklength: i64,
    ds: &[i64],
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
    large: bool,
    bytes: bool,
) -> Res {
    let bl = cnt(blocklength, "blocklength")?;
    let o = old(oldtype)?;
    let mut ints = vec![ds.len() as i64, blocklength];
    let (dt, c) = if bytes {
        (
            Datatype::hindexed_block(bl, &displs_of(ds), &o.dt)?,
            recorded(
                large,
                MPI_COMBINER_HINDEXED_BLOCK,
                ints,
                ds.to_vec(),
                vec![oldtype],
            ),
        )
    } else {
        ints.extend(ds);
        (
            Datatype::indexed_block(bl, &displs_of(ds), &o.dt)?,
            recorded(
                large,
                MPI_COMBINER_INDEXED_BLOCK,
                ints,
                vec![],
                vec![oldtype],
            ),
        )
    };
    make(dt, c, &[oldtype], newtype)
}

fn structured(
    bls: &[i64],
    ds: &[i64],
    ts: &[MPI_Datatype],
    newtype: *mut MPI_Datatype,
    large: bool,
) -> Res {
    let n = bls.len();
    let bl = counts_of(bls, "block length")?;
    let objs = ts.iter().map(|&t| old(t)).collect::<Res<Vec<_>>>()?;
    let dts: Vec<Datatype> = objs.iter().map(|o| o.dt.clone()).collect();
    let mut dt = Datatype::structured(&bl, &displs_of(ds), &dts)?;
    // MPI pads a struct's extent to its strictest member alignment, as C pads the struct
    // (rcomm's `structured` spans the blocks exactly).
    let align = ts
        .iter()
        .zip(&objs)
        .map(|(&t, o)| info_of(t, o).align)
        .max()
        .unwrap_or(1) as isize;
    let ext = dt.extent();
    if n > 0 && ext % align != 0 {
        dt = dt.resized(dt.lb(), ext + align - ext.rem_euclid(align))?;
    }
    let mut ints = vec![n as i64];
    ints.extend(bls);
    let c = recorded(large, MPI_COMBINER_STRUCT, ints, ds.to_vec(), ts.to_vec());
    make(dt, c, ts, newtype)
}

/// Subarray: `dims` holds sizes, subsizes and starts (`ndims` each).
fn subarray(
    dims: [Vec<i64>; 3],
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
    large: bool,
) -> Res {
    let n = dims[0].len();
    if n == 0 {
        return Err(err(MPI_ERR_DIMS, "ndims must be positive"));
    }
    let [sizes, subs, starts] = [
        counts_of(&dims[0], "array_of_sizes")?,
        counts_of(&dims[1], "array_of_subsizes")?,
        counts_of(&dims[2], "array_of_starts")?,
    ];
    let ord = match order {
        MPI_ORDER_C => Order::RowMajor,
        MPI_ORDER_FORTRAN => Order::ColumnMajor,
        o => {
            return Err(err(
                MPI_ERR_ARG,
                format!("order {o} is neither C nor Fortran"),
            ));
        }
    };
    let dt = Datatype::subarray(&sizes, &subs, &starts, ord, &old(oldtype)?.dt)?;
    let all: Vec<i64> = dims.concat();
    // The large-count form keeps ndims and order as integers, only the extents as counts.
    let c = if large {
        Contents {
            combiner: MPI_COMBINER_SUBARRAY,
            ints: vec![n as c_int, order],
            aints: Vec::new(),
            counts: all,
            types: vec![oldtype],
        }
    } else {
        let mut ints = vec![n as i64];
        ints.extend(all);
        ints.push(order.into());
        recorded(false, MPI_COMBINER_SUBARRAY, ints, vec![], vec![oldtype])
    };
    make(dt, c, &[oldtype], newtype)
}

fn resized(
    lb: i64,
    extent: i64,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
    large: bool,
) -> Res {
    let dt = old(oldtype)?
        .dt
        .resized(lb as MPI_Aint, extent as MPI_Aint)?;
    let c = recorded(
        large,
        MPI_COMBINER_RESIZED,
        vec![],
        vec![lb, extent],
        vec![oldtype],
    );
    make(dt, c, &[oldtype], newtype)
}

/// `MPI_Type_contiguous`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_contiguous(
    count: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_contiguous", None, || {
        contiguous(count.into(), oldtype, newtype, false)
    })
}

/// `MPI_Type_vector`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_vector", None, || {
        let a = [count.into(), blocklength.into(), stride.into()];
        vector(a, oldtype, newtype, false, false)
    })
}

/// `MPI_Type_create_hvector`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_hvector(
    count: c_int,
    blocklength: c_int,
    stride: MPI_Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_hvector", None, || {
        let a = [count.into(), blocklength.into(), stride.wide()];
        vector(a, oldtype, newtype, false, true)
    })
}

/// `MPI_Type_indexed`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_indexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_indexed", None, || {
        let n = cnt(count.into(), "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let ds = arr(array_of_displacements, n, "array_of_displacements")?;
        indexed(&bl, &ds, oldtype, newtype, false, false)
    })
}

/// `MPI_Type_create_hindexed`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_hindexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const MPI_Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_hindexed", None, || {
        let n = cnt(count.into(), "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let ds = arr(array_of_displacements, n, "array_of_displacements")?;
        indexed(&bl, &ds, oldtype, newtype, false, true)
    })
}

/// `MPI_Type_create_indexed_block`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_indexed_block(
    count: c_int,
    blocklength: c_int,
    array_of_displacements: *const c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_indexed_block", None, || {
        let n = cnt(count.into(), "count")?;
        let ds = arr(array_of_displacements, n, "array_of_displacements")?;
        indexed_block(blocklength.into(), &ds, oldtype, newtype, false, false)
    })
}

/// `MPI_Type_create_hindexed_block`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_hindexed_block(
    count: c_int,
    blocklength: c_int,
    array_of_displacements: *const MPI_Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_hindexed_block", None, || {
        let n = cnt(count.into(), "count")?;
        let ds = arr(array_of_displacements, n, "array_of_displacements")?;
        indexed_block(blocklength.into(), &ds, oldtype, newtype, false, true)
    })
}

/// `MPI_Type_create_struct`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_struct(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const MPI_Aint,
    array_of_types: *const MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_struct", None, || {
        let n = cnt(count.into(), "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let ds = arr(array_of_displacements, n, "array_of_displacements")?;
        let ts = ptr::slice(array_of_types, n, "array_of_types")?;
        structured(&bl, &ds, ts, newtype, false)
    })
}

/// The three arrays of a subarray constructor.
fn subarray_dims<T: Wide>(ndims: c_int, p: [*const T; 3]) -> Res<[Vec<i64>; 3]> {
    let n = cnt(ndims.into(), "ndims")?;
    Ok([
        arr(p[0], n, "array_of_sizes")?,
        arr(p[1], n, "array_of_subsizes")?,
        arr(p[2], n, "array_of_starts")?,
    ])
}

/// `MPI_Type_create_subarray`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_subarray(
    ndims: c_int,
    array_of_sizes: *const c_int,
    array_of_subsizes: *const c_int,
    array_of_starts: *const c_int,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_subarray", None, || {
        let p = [array_of_sizes, array_of_subsizes, array_of_starts];
        subarray(subarray_dims(ndims, p)?, order, oldtype, newtype, false)
    })
}

/// `MPI_Type_create_resized`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_resized(
    oldtype: MPI_Datatype,
    lb: MPI_Aint,
    extent: MPI_Aint,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_resized", None, || {
        resized(lb.wide(), extent.wide(), oldtype, newtype, false)
    })
}

/// `MPI_Type_dup`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    guard("MPI_Type_dup", None, || {
        let o = old(oldtype)?;
        let c = recorded(false, MPI_COMBINER_DUP, vec![], vec![], vec![oldtype]);
        make(o.dt.dup(), c, &[oldtype], newtype)?;
        let h = ptr::read(newtype, "newtype")?;
        let n = typeobj::get(h)?;
        // A duplicate keeps the committed state of its original.
        if o.is_committed() {
            n.committed.store(true, Ordering::Release);
        }
        crate::attr::types::copy_all(oldtype, &o, &n)
    })
}

/// `MPI_Type_commit`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_commit(datatype: *mut MPI_Datatype) -> c_int {
    guard("MPI_Type_commit", None, || {
        let t = typeobj::get(ptr::read(datatype, "datatype")?)?;
        t.committed.store(true, Ordering::Release);
        Ok(())
    })
}

/// `MPI_Type_free`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_free(datatype: *mut MPI_Datatype) -> c_int {
    guard("MPI_Type_free", None, || {
        let h = ptr::read(datatype, "datatype")?;
        let t = typeobj::get(h)?;
        if t.predefined {
            return Err(err(MPI_ERR_TYPE, "a predefined datatype cannot be freed"));
        }
        crate::attr::types::delete_all(h, &t);
        // Communication in flight holds its own `Arc` of the layout.
        TYPES.remove(h);
        ptr::write(datatype, MPI_DATATYPE_NULL, "datatype")
    })
}

fn envelope(h: MPI_Datatype) -> Res<Contents> {
    Ok(typeobj::get(h)?.contents.clone())
}

/// The contents of a type made by a `_c` constructor hold large counts, which the `int`
/// envelope has no place for.
fn no_large_counts(c: &Contents) -> Res {
    if !c.counts.is_empty() {
        return Err(err(
            MPI_ERR_TYPE,
            "the type was made by a large-count constructor: use MPI_Type_get_envelope_c",
        ));
    }
    Ok(())
}

/// `MPI_Type_get_envelope`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_envelope(
    datatype: MPI_Datatype,
    num_integers: *mut c_int,
    num_addresses: *mut c_int,
    num_datatypes: *mut c_int,
    combiner: *mut c_int,
) -> c_int {
    guard("MPI_Type_get_envelope", None, || {
        let c = envelope(datatype)?;
        no_large_counts(&c)?;
        ptr::write(num_integers, c.ints.len() as c_int, "num_integers")?;
        ptr::write(num_addresses, c.aints.len() as c_int, "num_addresses")?;
        ptr::write(num_datatypes, c.types.len() as c_int, "num_datatypes")?;
        ptr::write(combiner, c.combiner, "combiner")
    })
}

/// `MPI_Type_get_envelope_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_envelope_c(
    datatype: MPI_Datatype,
    num_integers: *mut MPI_Count,
    num_addresses: *mut MPI_Count,
    num_large_counts: *mut MPI_Count,
    num_datatypes: *mut MPI_Count,
    combiner: *mut c_int,
) -> c_int {
    guard("MPI_Type_get_envelope_c", None, || {
        let c = envelope(datatype)?;
        ptr::write(num_integers, c.ints.len() as MPI_Count, "num_integers")?;
        ptr::write(num_addresses, c.aints.len() as MPI_Count, "num_addresses")?;
        ptr::write(
            num_large_counts,
            c.counts.len() as MPI_Count,
            "num_large_counts",
        )?;
        ptr::write(num_datatypes, c.types.len() as MPI_Count, "num_datatypes")?;
        ptr::write(combiner, c.combiner, "combiner")
    })
}

/// Where `MPI_Type_get_contents(_c)` writes: the array sizes the caller gave and the arrays
/// (no large counts for the `int` form).
struct ContentsOut {
    max: [i64; 4],
    ints: *mut c_int,
    aints: *mut MPI_Aint,
    counts: *mut MPI_Count,
    types: *mut MPI_Datatype,
}

fn get_contents(datatype: MPI_Datatype, o: ContentsOut) -> Res {
    let c = envelope(datatype)?;
    if c.combiner == MPI_COMBINER_NAMED {
        return Err(err(MPI_ERR_TYPE, "a predefined datatype has no contents"));
    }
    let need = [c.ints.len(), c.aints.len(), c.counts.len(), c.types.len()];
    if o.max.iter().zip(need).any(|(&m, n)| m < n as i64) {
        return Err(err(
            MPI_ERR_ARG,
            "the output arrays are smaller than the envelope says",
        ));
    }
    ptr::slice_mut(o.ints, c.ints.len(), "array_of_integers")?.copy_from_slice(&c.ints);
    ptr::slice_mut(o.aints, c.aints.len(), "array_of_addresses")?.copy_from_slice(&c.aints);
    ptr::slice_mut(o.counts, c.counts.len(), "array_of_large_counts")?.copy_from_slice(&c.counts);
    let out = ptr::slice_mut(o.types, c.types.len(), "array_of_datatypes")?;
    let me = typeobj::get(datatype)?;
    let parts = side_of(&me)
        .map(|x| clone_parts(&x.parts))
        .unwrap_or_default();
    // Derived components come back as new handles (the standard: the caller frees them),
    // made from the objects the type holds, so they are valid even after the originals
    // were freed.
    for (k, (h, t, i)) in parts.into_iter().enumerate() {
        out[k] = if h < crate::handles::FIRST_DYNAMIC {
            h
        } else {
            let mut obj = TypeObj::derived(t.dt.clone(), t.contents.clone(), t.basic_size);
            obj.committed = t.is_committed().into();
            // Its own parts come along, so its contents can be asked for in turn.
            let sub = side_of(&t).map(|x| clone_parts(&x.parts));
            let _ = obj.ext.set(Box::new(Side {
                info: i,
                parts: sub.unwrap_or_default(),
            }));
            TYPES
                .insert(obj)
                .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many datatypes"))?
        };
    }
    Ok(())
}

/// `MPI_Type_get_contents`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_contents(
    datatype: MPI_Datatype,
    max_integers: c_int,
    max_addresses: c_int,
    max_datatypes: c_int,
    array_of_integers: *mut c_int,
    array_of_addresses: *mut MPI_Aint,
    array_of_datatypes: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_get_contents", None, || {
        no_large_counts(&envelope(datatype)?)?;
        let o = ContentsOut {
            max: [max_integers, max_addresses, 0, max_datatypes].map(i64::from),
            ints: array_of_integers,
            aints: array_of_addresses,
            counts: std::ptr::null_mut(),
            types: array_of_datatypes,
        };
        get_contents(datatype, o)
    })
}

/// `MPI_Type_get_contents_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_contents_c(
    datatype: MPI_Datatype,
    max_integers: MPI_Count,
    max_addresses: MPI_Count,
    max_large_counts: MPI_Count,
    max_datatypes: MPI_Count,
    array_of_integers: *mut c_int,
    array_of_addresses: *mut MPI_Aint,
    array_of_large_counts: *mut MPI_Count,
    array_of_datatypes: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_get_contents_c", None, || {
        let o = ContentsOut {
            max: [max_integers, max_addresses, max_large_counts, max_datatypes],
            ints: array_of_integers,
            aints: array_of_addresses,
            counts: array_of_large_counts,
            types: array_of_datatypes,
        };
        get_contents(datatype, o)
    })
}

type Parts = Vec<(MPI_Datatype, Arc<TypeObj>, Info)>;

fn clone_parts(p: &Parts) -> Parts {
    p.iter().map(|(h, t, i)| (*h, t.clone(), *i)).collect()
}

fn fits<T: TryFrom<i128>>(v: i128, what: &str) -> Res<T> {
    T::try_from(v).map_err(|_| err(MPI_ERR_VALUE_TOO_LARGE, format!("{what} {v} does not fit")))
}

/// `MPI_Type_size`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_size(datatype: MPI_Datatype, size: *mut c_int) -> c_int {
    guard("MPI_Type_size", None, || {
        let s = typeobj::get(datatype)?.size();
        ptr::write(size, fits(s as i128, "size")?, "size")
    })
}

/// `MPI_Type_size_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_size_c(datatype: MPI_Datatype, size: *mut MPI_Count) -> c_int {
    guard("MPI_Type_size_c", None, || {
        let s = typeobj::get(datatype)?.size();
        ptr::write(size, s as MPI_Count, "size")
    })
}

/// `MPI_Type_size_x`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_size_x(datatype: MPI_Datatype, size: *mut MPI_Count) -> c_int {
    guard("MPI_Type_size_x", None, || {
        let s = typeobj::get(datatype)?.size();
        ptr::write(size, s as MPI_Count, "size")
    })
}

/// `MPI_Type_get_extent`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_extent(
    datatype: MPI_Datatype,
    lb: *mut MPI_Aint,
    extent: *mut MPI_Aint,
) -> c_int {
    guard("MPI_Type_get_extent", None, || {
        let t = typeobj::get(datatype)?;
        ptr::write(lb, t.dt.lb(), "lb")?;
        ptr::write(extent, t.dt.extent(), "extent")
    })
}

/// `MPI_Type_get_extent_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_extent_c(
    datatype: MPI_Datatype,
    lb: *mut MPI_Count,
    extent: *mut MPI_Count,
) -> c_int {
    guard("MPI_Type_get_extent_c", None, || {
        let t = typeobj::get(datatype)?;
        ptr::write(lb, t.dt.lb() as MPI_Count, "lb")?;
        ptr::write(extent, t.dt.extent() as MPI_Count, "extent")
    })
}

/// `MPI_Type_get_true_extent`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_true_extent(
    datatype: MPI_Datatype,
    true_lb: *mut MPI_Aint,
    true_extent: *mut MPI_Aint,
) -> c_int {
    guard("MPI_Type_get_true_extent", None, || {
        let (l, e) = typeobj::get(datatype)?.dt.true_extent();
        ptr::write(true_lb, l, "true_lb")?;
        ptr::write(true_extent, e, "true_extent")
    })
}

/// `MPI_Type_get_true_extent_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_true_extent_c(
    datatype: MPI_Datatype,
    true_lb: *mut MPI_Count,
    true_extent: *mut MPI_Count,
) -> c_int {
    guard("MPI_Type_get_true_extent_c", None, || {
        let (l, e) = typeobj::get(datatype)?.dt.true_extent();
        ptr::write(true_lb, l as MPI_Count, "true_lb")?;
        ptr::write(true_extent, e as MPI_Count, "true_extent")
    })
}

/// `MPI_Get_address`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Get_address(location: *const c_void, address: *mut MPI_Aint) -> c_int {
    guard("MPI_Get_address", None, || {
        ptr::write(address, location as MPI_Aint, "address")
    })
}

/// Packed bytes of `incount` elements, checked to fit the count type (`int` or `MPI_Count`).
fn pack_size<T: TryFrom<i128>>(incount: i64, datatype: MPI_Datatype, comm: MPI_Comm) -> Res<T> {
    crate::comm::get(comm)?;
    let n = cnt(incount, "incount")?;
    let s = typeobj::get(datatype)?.dt.packed_size(n);
    fits(s as i128, "pack size")
}

/// `MPI_Pack_size`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Pack_size(
    incount: c_int,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
    size: *mut c_int,
) -> c_int {
    guard("MPI_Pack_size", Some(comm), || {
        ptr::write(size, pack_size(incount.into(), datatype, comm)?, "size")
    })
}

/// `MPI_Pack_size_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Pack_size_c(
    incount: MPI_Count,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
    size: *mut MPI_Count,
) -> c_int {
    guard("MPI_Pack_size_c", Some(comm), || {
        ptr::write(size, pack_size(incount, datatype, comm)?, "size")
    })
}

/// A pack position (`int` or `MPI_Count`), checked against a buffer of `size` bytes.
fn position<T: Wide>(p: *mut T, size: i64) -> Res<usize> {
    let pos = ptr::read(p, "position")?.wide();
    if pos < 0 || pos > size {
        return Err(err(
            MPI_ERR_ARG,
            format!("position {pos} is outside the {size}-byte buffer"),
        ));
    }
    Ok(pos as usize)
}

/// Moves the position on to `to` (it fits: it is at most the buffer's size, a `T`).
fn advance<T: Wide + TryFrom<i128>>(p: *mut T, to: usize) -> Res {
    ptr::write(p, fits(to as i128, "position")?, "position")
}

/// `MPI_Pack` and `MPI_Pack_c`.
fn pack<T: Wide + TryFrom<i128>>(
    inbuf: *const c_void,
    incount: i64,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: i64,
    position_: *mut T,
    comm: MPI_Comm,
) -> Res {
    crate::comm::get(comm)?;
    let t = typeobj::get_committed(datatype)?;
    let n = cnt(incount, "incount")?;
    let size = cnt(outsize, "outsize")?;
    let pos = position(position_, outsize)?;
    let data = layout::pack_at(inbuf, n, &t, "inbuf")?;
    if pos + data.len() > size {
        return Err(err(
            MPI_ERR_TRUNCATE,
            "the packed data does not fit in outbuf",
        ));
    }
    let out = ptr::slice_mut(outbuf.cast::<u8>(), size, "outbuf")?;
    out[pos..pos + data.len()].copy_from_slice(&data);
    advance(position_, pos + data.len())
}

/// `MPI_Unpack` and `MPI_Unpack_c`.
fn unpack<T: Wide + TryFrom<i128>>(
    inbuf: *const c_void,
    insize: i64,
    position_: *mut T,
    outbuf: *mut c_void,
    outcount: i64,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
) -> Res {
    crate::comm::get(comm)?;
    let t = typeobj::get_committed(datatype)?;
    let n = cnt(outcount, "outcount")?;
    let size = cnt(insize, "insize")?;
    let pos = position(position_, insize)?;
    let need = t.dt.packed_size(n);
    if pos + need > size {
        return Err(err(
            MPI_ERR_TRUNCATE,
            "inbuf holds fewer packed bytes than asked for",
        ));
    }
    let inb = ptr::slice(inbuf.cast::<u8>(), size, "inbuf")?;
    layout::unpack_at(outbuf, n, &t, &inb[pos..pos + need], "outbuf")?;
    advance(position_, pos + need)
}

/// `MPI_Pack`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Pack(
    inbuf: *const c_void,
    incount: c_int,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: c_int,
    position_: *mut c_int,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Pack", Some(comm), || {
        let (i, o) = (incount.into(), outsize.into());
        pack(inbuf, i, datatype, outbuf, o, position_, comm)
    })
}

/// `MPI_Pack_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Pack_c(
    inbuf: *const c_void,
    incount: MPI_Count,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position_: *mut MPI_Count,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Pack_c", Some(comm), || {
        pack(inbuf, incount, datatype, outbuf, outsize, position_, comm)
    })
}

/// `MPI_Unpack`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Unpack(
    inbuf: *const c_void,
    insize: c_int,
    position_: *mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Unpack", Some(comm), || {
        let (i, o) = (insize.into(), outcount.into());
        unpack(inbuf, i, position_, outbuf, o, datatype, comm)
    })
}

/// `MPI_Unpack_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Unpack_c(
    inbuf: *const c_void,
    insize: MPI_Count,
    position_: *mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard("MPI_Unpack_c", Some(comm), || {
        unpack(inbuf, insize, position_, outbuf, outcount, datatype, comm)
    })
}

/// `MPI_Type_get_extent_x` (MPI-3's name of `MPI_Type_get_extent_c`).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_extent_x(
    datatype: MPI_Datatype,
    lb: *mut MPI_Count,
    extent: *mut MPI_Count,
) -> c_int {
    guard("MPI_Type_get_extent_x", None, || {
        let t = typeobj::get(datatype)?;
        ptr::write(lb, t.dt.lb() as MPI_Count, "lb")?;
        ptr::write(extent, t.dt.extent() as MPI_Count, "extent")
    })
}

/// `MPI_Type_get_true_extent_x` (MPI-3's name of `MPI_Type_get_true_extent_c`).
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_get_true_extent_x(
    datatype: MPI_Datatype,
    true_lb: *mut MPI_Count,
    true_extent: *mut MPI_Count,
) -> c_int {
    guard("MPI_Type_get_true_extent_x", None, || {
        let (l, e) = typeobj::get(datatype)?.dt.true_extent();
        ptr::write(true_lb, l as MPI_Count, "true_lb")?;
        ptr::write(true_extent, e as MPI_Count, "true_extent")
    })
}
