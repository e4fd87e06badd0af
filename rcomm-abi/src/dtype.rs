//! Datatype constructors, commit/free, envelope/contents, size and extent queries, pack and
//! unpack, `MPI_Get_address`. Every constructor is rcomm's [`Datatype`] constructor of the
//! same name; what MPI adds is kept beside it in [`SIDE`]: the one predefined type the new
//! type is made of (reductions with predefined ops need it), the alignment MPI's struct
//! extent rounds to, and the component types `MPI_Type_get_contents` hands back.

use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::ops::{self, Basic};
use crate::ptr;
use crate::typeobj::{self, Contents, TYPES, TypeObj};
use rcomm::datatype::{Datatype, Order};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

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

static SIDE: Mutex<Option<HashMap<usize, Side>>> = Mutex::new(None);

fn side<R>(f: impl FnOnce(&mut HashMap<usize, Side>) -> R) -> R {
    let mut g = SIDE.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

fn align_of_basic(h: MPI_Datatype, size: usize) -> usize {
    match ops::basic_of(h) {
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
    side(|s| s.get(&h).map(|x| x.info)).unwrap_or(Info {
        basic: None,
        align: 1,
    })
}

/// The one predefined type a derived type is made of, if any (for reductions).
pub fn uniform_basic(h: MPI_Datatype) -> Option<MPI_Datatype> {
    side(|s| s.get(&h).and_then(|x| x.info.basic))
}

fn predefined_size(h: MPI_Datatype) -> usize {
    typeobj::get(h).map_or(0, |t| t.size())
}

/// Registers a new derived type made from `parts`, returning its handle in `*out`.
fn make(dt: Datatype, contents: Contents, parts: &[MPI_Datatype], out: *mut MPI_Datatype) -> Res {
    if out.is_null() {
        return Err(err(MPI_ERR_ARG, "newtype is a null pointer"));
    }
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
    let basic_size = basic.and_then(|b| match ops::basic_of(b) {
        Some(Basic::Pair(..)) => None,
        _ => Some(predefined_size(b)),
    });
    let h = TYPES
        .insert(TypeObj::derived(dt, contents, basic_size))
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many datatypes"))?;
    side(|s| {
        s.insert(
            h,
            Side {
                info: Info { basic, align },
                parts: objs,
            },
        )
    });
    ptr::write(out, h, "newtype")
}

fn old(h: MPI_Datatype) -> Res<Arc<TypeObj>> {
    typeobj::get(h)
}

fn cnt(n: c_int, what: &str) -> Res<usize> {
    usize::try_from(n).map_err(|_| err(MPI_ERR_COUNT, format!("{what} {n} is negative")))
}

fn contents(
    combiner: c_int,
    ints: Vec<c_int>,
    aints: Vec<MPI_Aint>,
    types: Vec<MPI_Datatype>,
) -> Contents {
    Contents {
        combiner,
        ints,
        aints,
        counts: Vec::new(),
        types,
    }
}

fn blocklens(p: *const c_int, n: usize) -> Res<Vec<usize>> {
    ptr::slice(p, n, "array_of_blocklengths")?
        .iter()
        .map(|&b| cnt(b, "block length"))
        .collect()
}

/// `MPI_Type_contiguous`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_contiguous(
    count: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_contiguous", None, || {
        let dt = Datatype::contiguous(cnt(count, "count")?, &old(oldtype)?.dt)?;
        let c = contents(MPI_COMBINER_CONTIGUOUS, vec![count], vec![], vec![oldtype]);
        make(dt, c, &[oldtype], newtype)
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
        let dt = Datatype::vector(
            cnt(count, "count")?,
            cnt(blocklength, "blocklength")?,
            stride as isize,
            &old(oldtype)?.dt,
        )?;
        let c = contents(
            MPI_COMBINER_VECTOR,
            vec![count, blocklength, stride],
            vec![],
            vec![oldtype],
        );
        make(dt, c, &[oldtype], newtype)
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
        let dt = Datatype::hvector(
            cnt(count, "count")?,
            cnt(blocklength, "blocklength")?,
            stride,
            &old(oldtype)?.dt,
        )?;
        let c = contents(
            MPI_COMBINER_HVECTOR,
            vec![count, blocklength],
            vec![stride],
            vec![oldtype],
        );
        make(dt, c, &[oldtype], newtype)
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
        let n = cnt(count, "count")?;
        let bl = blocklens(array_of_blocklengths, n)?;
        let ds = ptr::slice(array_of_displacements, n, "array_of_displacements")?;
        let dsz: Vec<isize> = ds.iter().map(|&d| d as isize).collect();
        let dt = Datatype::indexed(&bl, &dsz, &old(oldtype)?.dt)?;
        let mut ints = vec![count];
        ints.extend(ptr::slice(
            array_of_blocklengths,
            n,
            "array_of_blocklengths",
        )?);
        ints.extend(ds);
        let c = contents(MPI_COMBINER_INDEXED, ints, vec![], vec![oldtype]);
        make(dt, c, &[oldtype], newtype)
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
        let n = cnt(count, "count")?;
        let bl = blocklens(array_of_blocklengths, n)?;
        let ds = ptr::slice(array_of_displacements, n, "array_of_displacements")?;
        let dt = Datatype::hindexed(&bl, ds, &old(oldtype)?.dt)?;
        let mut ints = vec![count];
        ints.extend(ptr::slice(
            array_of_blocklengths,
            n,
            "array_of_blocklengths",
        )?);
        let c = contents(MPI_COMBINER_HINDEXED, ints, ds.to_vec(), vec![oldtype]);
        make(dt, c, &[oldtype], newtype)
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
        let n = cnt(count, "count")?;
        let ds = ptr::slice(array_of_displacements, n, "array_of_displacements")?;
        let dsz: Vec<isize> = ds.iter().map(|&d| d as isize).collect();
        let dt =
            Datatype::indexed_block(cnt(blocklength, "blocklength")?, &dsz, &old(oldtype)?.dt)?;
        let mut ints = vec![count, blocklength];
        ints.extend(ds);
        let c = contents(MPI_COMBINER_INDEXED_BLOCK, ints, vec![], vec![oldtype]);
        make(dt, c, &[oldtype], newtype)
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
        let n = cnt(count, "count")?;
        let ds = ptr::slice(array_of_displacements, n, "array_of_displacements")?;
        let dt = Datatype::hindexed_block(cnt(blocklength, "blocklength")?, ds, &old(oldtype)?.dt)?;
        let c = contents(
            MPI_COMBINER_HINDEXED_BLOCK,
            vec![count, blocklength],
            ds.to_vec(),
            vec![oldtype],
        );
        make(dt, c, &[oldtype], newtype)
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
        let n = cnt(count, "count")?;
        let bl = blocklens(array_of_blocklengths, n)?;
        let ds = ptr::slice(array_of_displacements, n, "array_of_displacements")?;
        let ts = ptr::slice(array_of_types, n, "array_of_types")?;
        let objs = ts.iter().map(|&t| old(t)).collect::<Res<Vec<_>>>()?;
        let dts: Vec<Datatype> = objs.iter().map(|o| o.dt.clone()).collect();
        let mut dt = Datatype::structured(&bl, ds, &dts)?;
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
        let mut ints = vec![count];
        ints.extend(ptr::slice(
            array_of_blocklengths,
            n,
            "array_of_blocklengths",
        )?);
        let c = contents(MPI_COMBINER_STRUCT, ints, ds.to_vec(), ts.to_vec());
        make(dt, c, ts, newtype)
    })
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
        let n = cnt(ndims, "ndims")?;
        if n == 0 {
            return Err(err(MPI_ERR_DIMS, "ndims must be positive"));
        }
        let get = |p, what: &str| -> Res<Vec<usize>> {
            ptr::slice(p, n, what)?
                .iter()
                .map(|&v| cnt(v, what))
                .collect()
        };
        let (sizes, subs, starts) = (
            get(array_of_sizes, "array_of_sizes")?,
            get(array_of_subsizes, "array_of_subsizes")?,
            get(array_of_starts, "array_of_starts")?,
        );
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
        let mut ints = vec![ndims];
        for p in [array_of_sizes, array_of_subsizes, array_of_starts] {
            ints.extend(ptr::slice(p, n, "array")?);
        }
        ints.push(order);
        let c = contents(MPI_COMBINER_SUBARRAY, ints, vec![], vec![oldtype]);
        make(dt, c, &[oldtype], newtype)
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
        let dt = old(oldtype)?.dt.resized(lb, extent)?;
        let c = contents(
            MPI_COMBINER_RESIZED,
            vec![],
            vec![lb, extent],
            vec![oldtype],
        );
        make(dt, c, &[oldtype], newtype)
    })
}

/// `MPI_Type_dup`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    guard("MPI_Type_dup", None, || {
        let o = old(oldtype)?;
        let c = contents(MPI_COMBINER_DUP, vec![], vec![], vec![oldtype]);
        make(o.dt.dup(), c, &[oldtype], newtype)?;
        // A duplicate keeps the committed state of its original.
        if o.is_committed() {
            let h = ptr::read(newtype, "newtype")?;
            typeobj::get(h)?.committed.store(true, Ordering::Release);
        }
        Ok(())
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
        if typeobj::get(h)?.predefined {
            return Err(err(MPI_ERR_TYPE, "a predefined datatype cannot be freed"));
        }
        // Communication in flight holds its own `Arc` of the layout.
        TYPES.remove(h);
        side(|s| s.remove(&h));
        ptr::write(datatype, MPI_DATATYPE_NULL, "datatype")
    })
}

fn envelope(h: MPI_Datatype) -> Res<Contents> {
    Ok(typeobj::get(h)?.contents.clone())
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
        ptr::write(num_integers, c.ints.len() as c_int, "num_integers")?;
        ptr::write(num_addresses, c.aints.len() as c_int, "num_addresses")?;
        ptr::write(num_datatypes, c.types.len() as c_int, "num_datatypes")?;
        ptr::write(combiner, c.combiner, "combiner")
    })
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
        let c = envelope(datatype)?;
        if c.combiner == MPI_COMBINER_NAMED {
            return Err(err(MPI_ERR_TYPE, "a predefined datatype has no contents"));
        }
        if (max_integers as i64) < c.ints.len() as i64
            || (max_addresses as i64) < c.aints.len() as i64
            || (max_datatypes as i64) < c.types.len() as i64
        {
            return Err(err(
                MPI_ERR_ARG,
                "the output arrays are smaller than the envelope says",
            ));
        }
        ptr::slice_mut(array_of_integers, c.ints.len(), "array_of_integers")?
            .copy_from_slice(&c.ints);
        ptr::slice_mut(array_of_addresses, c.aints.len(), "array_of_addresses")?
            .copy_from_slice(&c.aints);
        let out = ptr::slice_mut(array_of_datatypes, c.types.len(), "array_of_datatypes")?;
        let parts = side(|s| s.get(&datatype).map(|x| clone_parts(&x.parts))).unwrap_or_default();
        // Derived components come back as new handles (the standard: the caller frees them),
        // made from the objects the type holds, so they are valid even after the originals
        // were freed.
        for (k, (h, t, i)) in parts.into_iter().enumerate() {
            out[k] = if h < crate::handles::FIRST_DYNAMIC {
                h
            } else {
                let mut obj = TypeObj::derived(t.dt.clone(), t.contents.clone(), t.basic_size);
                obj.committed = t.is_committed().into();
                let nh = TYPES
                    .insert(obj)
                    .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many datatypes"))?;
                let sub = side(|s| s.get(&h).map(|x| clone_parts(&x.parts)));
                side(|s| {
                    s.insert(
                        nh,
                        Side {
                            info: i,
                            parts: sub.unwrap_or_default(),
                        },
                    )
                });
                nh
            };
        }
        Ok(())
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

/// `MPI_Pack_size`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Pack_size(
    incount: c_int,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
    size: *mut c_int,
) -> c_int {
    guard("MPI_Pack_size", Some(comm), || {
        crate::comm::get(comm)?;
        let n = cnt(incount, "incount")?;
        let s = typeobj::get(datatype)?.dt.packed_size(n);
        ptr::write(size, fits(s as i128, "pack size")?, "size")
    })
}

/// Checks a pack position against a buffer of `size` bytes.
fn position(p: *mut c_int, size: c_int) -> Res<usize> {
    let pos = ptr::read(p, "position")?;
    if pos < 0 || pos > size {
        return Err(err(
            MPI_ERR_ARG,
            format!("position {pos} is outside the {size}-byte buffer"),
        ));
    }
    Ok(pos as usize)
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
        crate::comm::get(comm)?;
        let t = typeobj::get_committed(datatype)?;
        let n = cnt(incount, "incount")?;
        let pos = position(position_, outsize)?;
        let data = ops::pack_at(inbuf, n, &t, "inbuf")?;
        if pos + data.len() > outsize as usize {
            return Err(err(
                MPI_ERR_TRUNCATE,
                "the packed data does not fit in outbuf",
            ));
        }
        let out = ptr::slice_mut(outbuf.cast::<u8>(), outsize as usize, "outbuf")?;
        out[pos..pos + data.len()].copy_from_slice(&data);
        ptr::write(position_, (pos + data.len()) as c_int, "position")
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
        crate::comm::get(comm)?;
        let t = typeobj::get_committed(datatype)?;
        let n = cnt(outcount, "outcount")?;
        let pos = position(position_, insize)?;
        let need = t.dt.packed_size(n);
        if pos + need > insize as usize {
            return Err(err(
                MPI_ERR_TRUNCATE,
                "inbuf holds fewer packed bytes than asked for",
            ));
        }
        let inb = ptr::slice(inbuf.cast::<u8>(), insize as usize, "inbuf")?;
        ops::unpack_at(outbuf, n, &t, &inb[pos..pos + need], "outbuf")?;
        ptr::write(position_, (pos + need) as c_int, "position")
    })
}
