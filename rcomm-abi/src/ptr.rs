//! Reading and writing through the pointers a C caller passes. Every exported function goes
//! through these, so the one contract they rely on is stated once: a non-null pointer the
//! program passes points to memory valid for the binding's type and length, as the MPI
//! standard requires of callers. Null where a value is needed is an `MPI_ERR_ARG` (or the
//! class the caller names), never a crash.

use crate::consts::*;
use crate::errors::{Res, err};
use std::ffi::{CStr, c_char};

/// Stores `v` at `p`.
pub fn write<T>(p: *mut T, v: T, what: &str) -> Res {
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, format!("{what} is a null pointer")));
    }
    // SAFETY: non-null; the caller's contract (module doc) makes it valid for one T.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Stores `v` at `p` unless `p` is null (optional outputs).
pub fn write_opt<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: as in `write`.
        unsafe { p.write_unaligned(v) };
    }
}

/// Reads the value at `p`.
pub fn read<T: Copy>(p: *const T, what: &str) -> Res<T> {
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, format!("{what} is a null pointer")));
    }
    // SAFETY: non-null; valid for one T by the caller's contract.
    Ok(unsafe { p.read_unaligned() })
}

/// `n` elements from `p` (no pointer needed when `n` is 0).
pub fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Res<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, format!("{what} is a null pointer")));
    }
    if !p.cast::<u8>().align_offset(align_of::<T>()).eq(&0) {
        return Err(err(MPI_ERR_ARG, format!("{what} is misaligned")));
    }
    // SAFETY: non-null and aligned; valid for `n` elements by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// `n` elements at `p`, to write.
pub fn slice_mut<'a, T>(p: *mut T, n: usize, what: &str) -> Res<&'a mut [T]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, format!("{what} is a null pointer")));
    }
    if !p.cast::<u8>().align_offset(align_of::<T>()).eq(&0) {
        return Err(err(MPI_ERR_ARG, format!("{what} is misaligned")));
    }
    // SAFETY: as in `slice`, and the program does not touch the buffer during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// A NUL-terminated C string.
pub fn cstr(p: *const c_char, what: &str) -> Res<String> {
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, format!("{what} is a null pointer")));
    }
    // SAFETY: non-null; the caller passes a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    Ok(s.to_string_lossy().into_owned())
}

/// Copies `s` into the caller's `cap`-byte buffer `dst` with a NUL, cut to fit, and its length
/// into `len` when given.
pub fn write_cstr(dst: *mut c_char, cap: usize, s: &str, len: *mut c_int, what: &str) -> Res {
    if cap == 0 {
        return Err(err(MPI_ERR_ARG, format!("{what}: no room")));
    }
    let b = s.as_bytes();
    let n = b.len().min(cap - 1);
    let out = slice_mut(dst.cast::<u8>(), n + 1, what)?;
    out[..n].copy_from_slice(&b[..n]);
    out[n] = 0;
    write_opt(len, n as c_int);
    Ok(())
}

/// A C `int` count as `usize` (negative: `MPI_ERR_COUNT`).
pub fn count(n: i64) -> Res<usize> {
    usize::try_from(n).map_err(|_| err(MPI_ERR_COUNT, format!("count {n} is negative")))
}
