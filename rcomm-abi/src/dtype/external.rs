//! `MPI_Pack_external` / `MPI_Unpack_external` / `MPI_Pack_external_size` (+ `_c`) for the
//! `"external32"` representation: big-endian, with the standard's sizes (`long` is 4 bytes
//! there, so a `long` that does not fit is `MPI_ERR_CONVERSION`). Types made of one basic
//! type are built; `long double` (binary128 there) and types mixing basic types report
//! `MPI_ERR_UNSUPPORTED_DATAREP`.

use super::*;
use std::ffi::c_char;

/// One component of an element: native bytes, external32 bytes, signed.
type Unit = (usize, usize, bool);

fn units_of_basic(b: &Basic, out: &mut Vec<Unit>) -> bool {
    match b {
        Basic::Int(n) => out.push((*n, *n, true)),
        Basic::Uint(n) | Basic::Logical(n) => out.push((*n, *n, false)),
        Basic::Byte => out.push((1, 1, false)),
        Basic::F32 => out.push((4, 4, false)),
        Basic::F64 => out.push((8, 8, false)),
        Basic::C32 => out.extend([(4, 4, false); 2]),
        Basic::C64 => out.extend([(8, 8, false); 2]),
        Basic::Pair(a, b) => return units_of_basic(a, out) && units_of_basic(b, out),
        Basic::Opaque => return false,
    }
    true
}

/// The components of one element of `h` in external32.
fn units(h: MPI_Datatype) -> Res<Vec<Unit>> {
    let basic = if h < crate::handles::FIRST_DYNAMIC {
        Some(h)
    } else {
        uniform_basic(h)
    };
    let unsupported = || {
        err(
            MPI_ERR_UNSUPPORTED_DATAREP,
            "external32 of this datatype is not built (long double, or mixed basic types)",
        )
    };
    let b = basic.ok_or_else(unsupported)?;
    let mut u = Vec::new();
    match b {
        MPI_LONG => u.push((8, 4, true)),
        MPI_UNSIGNED_LONG => u.push((8, 4, false)),
        MPI_LONG_INT => u.extend([(8, 4, true), (4, 4, true)]),
        _ => {
            if !units_of_basic(&crate::layout::basic_of(b).ok_or_else(unsupported)?, &mut u) {
                return Err(unsupported());
            }
        }
    }
    Ok(u)
}

fn check_datarep(datarep: *const c_char) -> Res {
    let d = ptr::cstr(datarep, "datarep")?;
    if d != "external32" {
        return Err(err(
            MPI_ERR_UNSUPPORTED_DATAREP,
            format!("data representation {d:?}: only \"external32\""),
        ));
    }
    Ok(())
}

/// Native packed bytes → external32.
fn to_external(native: &[u8], u: &[Unit]) -> Res<Vec<u8>> {
    let mut out = Vec::with_capacity(native.len());
    let mut at = 0;
    while at < native.len() {
        for &(n, e, signed) in u {
            let b = &native[at..at + n];
            if n == e {
                out.extend(b.iter().rev());
            } else {
                let v = i64::from_le_bytes(b.try_into().expect("8 bytes"));
                let fits = if signed {
                    i32::try_from(v).is_ok()
                } else {
                    u32::try_from(v as u64).is_ok()
                };
                if !fits {
                    return Err(err(
                        MPI_ERR_CONVERSION,
                        format!("{v} does not fit external32's 4-byte long"),
                    ));
                }
                out.extend_from_slice(&(v as u32).to_be_bytes());
            }
            at += n;
        }
    }
    Ok(out)
}

/// external32 bytes → native packed bytes.
fn from_external(ext: &[u8], u: &[Unit]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < ext.len() {
        for &(n, e, signed) in u {
            let b = &ext[at..at + e];
            if n == e {
                out.extend(b.iter().rev());
            } else {
                let w = u32::from_be_bytes(b.try_into().expect("4 bytes"));
                let v = if signed {
                    i64::from(w as i32)
                } else {
                    i64::from(w)
                };
                out.extend_from_slice(&v.to_le_bytes());
            }
            at += e;
        }
    }
    out
}

/// External32 bytes of `count` elements of `h`.
fn ext_size(count: usize, h: MPI_Datatype) -> Res<usize> {
    let t = typeobj::get(h)?;
    let u = units(h)?;
    let (native, ext) = u.iter().fold((0, 0), |(a, b), &(n, e, _)| (a + n, b + e));
    Ok(t.dt.packed_size(count) / native.max(1) * ext)
}

#[allow(clippy::too_many_arguments)]
fn pack_ext<T: Wide + TryFrom<i128>>(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: i64,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: i64,
    position_: *mut T,
) -> Res {
    check_datarep(datarep)?;
    let t = typeobj::get_committed(datatype)?;
    let n = cnt(incount, "incount")?;
    let size = cnt(outsize, "outsize")?;
    let pos = position(position_, outsize)?;
    let data = to_external(
        &crate::layout::pack_at(inbuf, n, &t, "inbuf")?,
        &units(datatype)?,
    )?;
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

#[allow(clippy::too_many_arguments)]
fn unpack_ext<T: Wide + TryFrom<i128>>(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: i64,
    position_: *mut T,
    outbuf: *mut c_void,
    outcount: i64,
    datatype: MPI_Datatype,
) -> Res {
    check_datarep(datarep)?;
    let t = typeobj::get_committed(datatype)?;
    let n = cnt(outcount, "outcount")?;
    let size = cnt(insize, "insize")?;
    let pos = position(position_, insize)?;
    let need = ext_size(n, datatype)?;
    if pos + need > size {
        return Err(err(
            MPI_ERR_TRUNCATE,
            "inbuf holds fewer packed bytes than asked for",
        ));
    }
    let inb = ptr::slice(inbuf.cast::<u8>(), size, "inbuf")?;
    let native = from_external(&inb[pos..pos + need], &units(datatype)?);
    crate::layout::unpack_at(outbuf, n, &t, &native, "outbuf")?;
    advance(position_, pos + need)
}

/// `MPI_Pack_external`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Pack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: c_int,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: MPI_Aint,
    position_: *mut MPI_Aint,
) -> c_int {
    guard("MPI_Pack_external", None, || {
        let (i, o) = (incount.into(), outsize.wide());
        pack_ext(datarep, inbuf, i, datatype, outbuf, o, position_)
    })
}

/// `MPI_Pack_external_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Pack_external_c(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: MPI_Count,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position_: *mut MPI_Count,
) -> c_int {
    guard("MPI_Pack_external_c", None, || {
        pack_ext(
            datarep, inbuf, incount, datatype, outbuf, outsize, position_,
        )
    })
}

/// `MPI_Unpack_external`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Unpack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: MPI_Aint,
    position_: *mut MPI_Aint,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: MPI_Datatype,
) -> c_int {
    guard("MPI_Unpack_external", None, || {
        let (i, o) = (insize.wide(), outcount.into());
        unpack_ext(datarep, inbuf, i, position_, outbuf, o, datatype)
    })
}

/// `MPI_Unpack_external_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Unpack_external_c(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: MPI_Count,
    position_: *mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    datatype: MPI_Datatype,
) -> c_int {
    guard("MPI_Unpack_external_c", None, || {
        unpack_ext(
            datarep, inbuf, insize, position_, outbuf, outcount, datatype,
        )
    })
}

/// `MPI_Pack_external_size`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Pack_external_size(
    datarep: *const c_char,
    incount: c_int,
    datatype: MPI_Datatype,
    size: *mut MPI_Aint,
) -> c_int {
    guard("MPI_Pack_external_size", None, || {
        check_datarep(datarep)?;
        let s = ext_size(cnt(incount.into(), "incount")?, datatype)?;
        ptr::write(size, fits(s as i128, "size")?, "size")
    })
}

/// `MPI_Pack_external_size_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Pack_external_size_c(
    datarep: *const c_char,
    incount: MPI_Count,
    datatype: MPI_Datatype,
    size: *mut MPI_Count,
) -> c_int {
    guard("MPI_Pack_external_size_c", None, || {
        check_datarep(datarep)?;
        let s = ext_size(cnt(incount, "incount")?, datatype)?;
        ptr::write(size, fits(s as i128, "size")?, "size")
    })
}
