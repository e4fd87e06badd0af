//! What moves data by a datatype's layout, below the modules that use it (point-to-point,
//! collectives, reductions, datatype constructors): the basic C types and their sizes, the
//! address check every buffer passes, packing from and unpacking into a caller's memory, and
//! the C integer types counts arrive in.

use crate::consts::*;
use crate::errors::{Res, err};
use crate::typeobj::TypeObj;
use rcomm::datatype::Datatype;
use std::ffi::c_void;

/// A predefined type as the kernels see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basic {
    /// A signed integer of this many bytes.
    Int(usize),
    /// An unsigned integer of this many bytes.
    Uint(usize),
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// A complex of two `float`s.
    C32,
    /// A complex of two `double`s.
    C64,
    /// A logical (C `bool` or Fortran `LOGICAL`) of this many bytes: zero is false.
    Logical(usize),
    /// `MPI_BYTE`: bitwise ops only.
    Byte,
    /// A (value, index) pair for MINLOC/MAXLOC, packed as value then index.
    Pair(&'static Basic, &'static Basic),
    /// A type no op is defined on here (long double, `MPI_PACKED`, 16-byte Fortran kinds).
    Opaque,
}

pub(crate) const I4: Basic = Basic::Int(4);
pub(crate) const I8: Basic = Basic::Int(8);
pub(crate) const I2: Basic = Basic::Int(2);
pub(crate) const F4: Basic = Basic::F32;
pub(crate) const F8: Basic = Basic::F64;

/// The kernel class of a predefined type handle.
pub fn basic_of(h: MPI_Datatype) -> Option<Basic> {
    Some(match h {
        MPI_CHAR | MPI_SIGNED_CHAR | MPI_INT8_T | MPI_INTEGER1 | MPI_CHARACTER => Basic::Int(1),
        MPI_SHORT | MPI_INT16_T | MPI_INTEGER2 => I2,
        MPI_INT | MPI_INT32_T | MPI_INTEGER | MPI_INTEGER4 | MPI_WCHAR => I4,
        MPI_LONG | MPI_LONG_LONG | MPI_INT64_T | MPI_INTEGER8 | MPI_AINT | MPI_COUNT
        | MPI_OFFSET => I8,
        MPI_UNSIGNED_CHAR | MPI_UINT8_T => Basic::Uint(1),
        MPI_UNSIGNED_SHORT | MPI_UINT16_T => Basic::Uint(2),
        MPI_UNSIGNED | MPI_UINT32_T => Basic::Uint(4),
        MPI_UNSIGNED_LONG | MPI_UNSIGNED_LONG_LONG | MPI_UINT64_T => Basic::Uint(8),
        MPI_FLOAT | MPI_REAL | MPI_REAL4 => F4,
        MPI_DOUBLE | MPI_DOUBLE_PRECISION | MPI_REAL8 => F8,
        MPI_C_FLOAT_COMPLEX | MPI_CXX_FLOAT_COMPLEX | MPI_COMPLEX | MPI_COMPLEX8 => Basic::C32,
        MPI_C_DOUBLE_COMPLEX | MPI_CXX_DOUBLE_COMPLEX | MPI_DOUBLE_COMPLEX | MPI_COMPLEX16 => {
            Basic::C64
        }
        MPI_C_BOOL | MPI_CXX_BOOL | MPI_LOGICAL1 => Basic::Logical(1),
        MPI_LOGICAL2 => Basic::Logical(2),
        MPI_LOGICAL | MPI_LOGICAL4 => Basic::Logical(4),
        MPI_LOGICAL8 => Basic::Logical(8),
        MPI_BYTE => Basic::Byte,
        MPI_FLOAT_INT => Basic::Pair(&F4, &I4),
        MPI_DOUBLE_INT => Basic::Pair(&F8, &I4),
        MPI_LONG_INT => Basic::Pair(&I8, &I4),
        MPI_2INT | MPI_2INTEGER => Basic::Pair(&I4, &I4),
        MPI_SHORT_INT => Basic::Pair(&I2, &I4),
        MPI_2REAL => Basic::Pair(&F4, &F4),
        MPI_2DOUBLE_PRECISION => Basic::Pair(&F8, &F8),
        MPI_DATATYPE_NULL => return None,
        _ => Basic::Opaque,
    })
}

impl Basic {
    /// Packed bytes of one element.
    pub(crate) fn size(self) -> usize {
        match self {
            Basic::Int(n) | Basic::Uint(n) | Basic::Logical(n) => n,
            Basic::F32 => 4,
            Basic::F64 | Basic::C32 => 8,
            Basic::C64 => 16,
            Basic::Byte => 1,
            Basic::Pair(a, b) => a.size() + b.size(),
            Basic::Opaque => 0,
        }
    }

    pub(crate) fn is_int(self) -> bool {
        matches!(self, Basic::Int(_) | Basic::Uint(_))
    }

    /// Whether the predefined `op` is defined on this type (MPI-4.1 §6.9.2's table).
    pub fn allows(self, op: MPI_Op) -> bool {
        let real = self.is_int() || matches!(self, Basic::F32 | Basic::F64);
        let complex = matches!(self, Basic::C32 | Basic::C64);
        match op {
            MPI_SUM | MPI_PROD => real || complex,
            MPI_MIN | MPI_MAX => real,
            MPI_LAND | MPI_LOR | MPI_LXOR => self.is_int() || matches!(self, Basic::Logical(_)),
            MPI_BAND | MPI_BOR | MPI_BXOR => self.is_int() || self == Basic::Byte,
            MPI_MINLOC | MPI_MAXLOC => matches!(self, Basic::Pair(..)),
            MPI_REPLACE | MPI_NO_OP => true,
            _ => false,
        }
    }
}

/// Addresses below this are the null page: a buffer reaching into it is `MPI_ERR_BUFFER`
/// (a null pointer with data), never a fault. `MPI_BOTTOM` with absolute displacements lands
/// far above it.
const NULL_PAGE: i128 = 4096;

/// Checks that `count` elements of `ty` at `addr` lie off the null page and inside the address
/// space.
pub(crate) fn check_addr(addr: usize, count: usize, ty: &TypeObj, what: &str) -> Res {
    let (lo, hi) = ty.dt.span(count);
    let (lo, hi) = (addr as i128 + lo, addr as i128 + hi);
    if lo < NULL_PAGE || hi > isize::MAX as i128 {
        return Err(err(
            MPI_ERR_BUFFER,
            format!("{what}: {count} element(s) at {addr:#x} reach outside valid memory"),
        ));
    }
    Ok(())
}

/// The C integer types counts and displacements come in (`int`, `MPI_Count`, `MPI_Aint`).
pub(crate) trait Wide: Copy {
    fn wide(self) -> i64;
}

impl Wide for i32 {
    fn wide(self) -> i64 {
        self.into()
    }
}

impl Wide for i64 {
    fn wide(self) -> i64 {
        self
    }
}

impl Wide for isize {
    fn wide(self) -> i64 {
        self as i64
    }
}

/// A base address and layout to read `count` elements of `ty` at `addr` through. Addresses
/// relative to `MPI_BOTTOM` (0) are absolute: the layout is shifted so the base is the lowest
/// byte touched, because pointer offsets from null are undefined behaviour in Rust.
fn based(addr: usize, count: usize, ty: &TypeObj) -> Res<(usize, Datatype, usize)> {
    if addr != 0 {
        return Ok((addr, ty.dt.clone(), count));
    }
    let (lo, _) = ty.dt.span(count);
    let lo = isize::try_from(lo).map_err(|_| err(MPI_ERR_BUFFER, "address out of range"))?;
    let shifted = Datatype::hindexed(&[count], &[-lo], &ty.dt)?;
    Ok((lo as usize, shifted, 1))
}

/// The packed bytes of `count` elements of `ty` at `buf` (a null `buf` is refused unless
/// nothing is read).
pub fn pack_at(buf: *const c_void, count: usize, ty: &TypeObj, what: &str) -> Res<Vec<u8>> {
    let n = ty.dt.packed_size(count);
    if n == 0 {
        return Ok(Vec::new());
    }
    check_addr(buf as usize, count, ty, what)?;
    // A count no memory holds is the program's error to hear about, not an abort.
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| {
        err(
            MPI_ERR_NO_MEM,
            format!("{what}: {n} bytes to pack: out of memory"),
        )
    })?;
    out.resize(n, 0);
    let (base, dt, k) = based(buf as usize, count, ty)?;
    // SAFETY: the caller's buffer holds `count` elements of `ty` (MPI's contract); the span
    // was checked to stay off the null page, and `based` keeps the same bytes.
    unsafe { dt.pack_raw(base as *const u8, k, &mut out)? };
    Ok(out)
}

/// Unpacks `data` into `count` elements of `ty` at `buf`.
pub fn unpack_at(buf: *mut c_void, count: usize, ty: &TypeObj, data: &[u8], what: &str) -> Res {
    if data.is_empty() {
        return Ok(());
    }
    check_addr(buf as usize, count, ty, what)?;
    let (base, dt, k) = based(buf as usize, count, ty)?;
    // SAFETY: as in `pack_at`, for writing.
    unsafe { dt.unpack_raw(data, base as *mut u8, k)? };
    Ok(())
}

#[cfg(test)]
mod bottom_tests {
    use super::*;

    #[test]
    fn absolute_addresses_pack_from_bottom() {
        let x: i32 = 41;
        let y: f64 = 2.5;
        let (ax, ay) = (&x as *const i32 as isize, &y as *const f64 as isize);
        let dt = Datatype::structured(
            &[1, 1],
            &[ax, ay],
            &[Datatype::bytes(4), Datatype::bytes(8)],
        )
        .unwrap();
        let t = TypeObj::derived(dt, Default::default(), None);
        let out = pack_at(std::ptr::null(), 1, &t, "b").unwrap();
        assert_eq!(&out[..4], &41i32.to_ne_bytes());
    }
}
