//! Reduction operations: the standard's predefined ops on every predefined type they are
//! defined for, user ops (`MPI_Op_create`) called through their C function, and the one
//! combining step every reduction collective folds with ([`combine`]).
//!
//! rcomm's kernels cover sum/prod/min/max/bitwise on machine integers and floats; MPI also
//! needs logical ops, MINLOC/MAXLOC on pairs, complex numbers and a C callback that sees the
//! datatype handle, so the element-wise step lives here, on packed bytes (a derived type built
//! from one predefined type packs to a plain run of that type, so one kernel serves both).

use crate::attr::FnPtr;
use crate::attr::ctypes::{MPI_User_function, MPI_User_function_c};
use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
pub use crate::layout::{Basic, basic_of, pack_at, unpack_at};
use crate::layout::{F4, F8};
use crate::opobj::{self, OPS, OpRef, UserOp};
use crate::ptr;
use crate::typeobj::{self, TypeObj};
use std::ffi::c_void;
use std::sync::Arc;

/// Reads element `i` of `b` (as f64 for ordering, the exact value for ints as i128).
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Num {
    I(i128),
    F(f64),
}

fn load(b: &[u8], t: Basic) -> Num {
    let mut a = [0u8; 16];
    a[..b.len()].copy_from_slice(b);
    match t {
        Basic::Int(n) => {
            let shift = 128 - 8 * n as u32;
            Num::I((i128::from_le_bytes(a) << shift) >> shift)
        }
        Basic::Uint(_) | Basic::Logical(_) | Basic::Byte => Num::I(i128::from_le_bytes(a)),
        Basic::F32 => Num::F(f32::from_le_bytes([a[0], a[1], a[2], a[3]]) as f64),
        Basic::F64 => Num::F(f64::from_le_bytes(a[..8].try_into().expect("8 bytes"))),
        _ => Num::I(0),
    }
}

fn store(b: &mut [u8], t: Basic, v: Num) {
    match (t, v) {
        (Basic::F32, Num::F(f)) => b.copy_from_slice(&(f as f32).to_le_bytes()),
        (Basic::F64, Num::F(f)) => b.copy_from_slice(&f.to_le_bytes()),
        (_, Num::I(i)) => b.copy_from_slice(&i.to_le_bytes()[..b.len()]),
        (_, Num::F(f)) => b.copy_from_slice(&(f as i128).to_le_bytes()[..b.len()]),
    }
}

fn arith(op: MPI_Op, t: Basic, x: Num, y: Num) -> Num {
    match (x, y) {
        // Integer sums and products wrap, as C's unsigned arithmetic and every MPI do.
        (Num::I(a), Num::I(b)) => Num::I(match op {
            MPI_SUM => a.wrapping_add(b),
            MPI_PROD => a.wrapping_mul(b),
            MPI_MIN => a.min(b),
            MPI_MAX => a.max(b),
            MPI_BAND => a & b,
            MPI_BOR => a | b,
            MPI_BXOR => a ^ b,
            MPI_LAND => ((a != 0) && (b != 0)) as i128,
            MPI_LOR => ((a != 0) || (b != 0)) as i128,
            MPI_LXOR => ((a != 0) != (b != 0)) as i128,
            _ => b,
        }),
        (Num::F(a), Num::F(b)) => Num::F(match (op, t) {
            // f32 arithmetic rounds like the C program's own: compute in f32.
            (MPI_SUM, Basic::F32) => (a as f32 + b as f32) as f64,
            (MPI_PROD, Basic::F32) => (a as f32 * b as f32) as f64,
            (MPI_SUM, _) => a + b,
            (MPI_PROD, _) => a * b,
            (MPI_MIN, _) => a.min(b),
            (MPI_MAX, _) => a.max(b),
            _ => b,
        }),
        _ => y,
    }
}

/// `inout[i] = input[i] op inout[i]` on one packed element of `t`.
fn elem(op: MPI_Op, t: Basic, input: &[u8], inout: &mut [u8]) {
    match (op, t) {
        (MPI_NO_OP, _) => {}
        (MPI_REPLACE, _) => inout.copy_from_slice(input),
        (_, Basic::C32 | Basic::C64) => {
            let half = t.size() / 2;
            let part = if half == 4 { F4 } else { F8 };
            let (ar, ai) = (load(&input[..half], part), load(&input[half..], part));
            let (br, bi) = (load(&inout[..half], part), load(&inout[half..], part));
            let f = |n: Num| match n {
                Num::F(f) => f,
                Num::I(_) => 0.0,
            };
            let (ar, ai, br, bi) = (f(ar), f(ai), f(br), f(bi));
            let (re, im) = if op == MPI_SUM {
                (ar + br, ai + bi)
            } else {
                (ar * br - ai * bi, ar * bi + ai * br)
            };
            store(&mut inout[..half], part, Num::F(re));
            store(&mut inout[half..], part, Num::F(im));
        }
        (MPI_MINLOC | MPI_MAXLOC, Basic::Pair(v, i)) => {
            let n = v.size();
            let (av, bv) = (load(&input[..n], *v), load(&inout[..n], *v));
            let (ai, bi) = (load(&input[n..], *i), load(&inout[n..], *i));
            let better = if op == MPI_MINLOC { av < bv } else { av > bv };
            // Ties keep the smaller index, so the result does not depend on the fold order.
            if better || (av == bv && ai < bi) {
                inout.copy_from_slice(input);
            }
        }
        _ => {
            let r = arith(op, t, load(input, t), load(inout, t));
            store(inout, t, r);
        }
    }
}

/// Applies the predefined `op` on packed runs of `t`.
fn predefined(op: MPI_Op, t: Basic, input: &[u8], inout: &mut [u8]) -> Res {
    if !t.allows(op) || t.size() == 0 {
        return Err(err(
            MPI_ERR_OP,
            format!("the predefined operation {op:#x} is not defined on this datatype ({t:?})"),
        ));
    }
    let n = t.size();
    for (a, b) in input.chunks_exact(n).zip(inout.chunks_exact_mut(n)) {
        elem(op, t, a, b);
    }
    Ok(())
}

/// The predefined type a datatype's packed form is a run of: itself, or for a derived type the
/// one predefined type all its parts are made of.
fn packed_basic(dt: MPI_Datatype) -> Option<Basic> {
    if dt < crate::handles::FIRST_DYNAMIC {
        return basic_of(dt);
    }
    crate::dtype::uniform_basic(dt).and_then(basic_of)
}

/// Whether the op's result must be folded in rank order.
pub fn commutes(op: &OpRef) -> bool {
    match op {
        OpRef::Predefined(_) => true,
        OpRef::User(u) => u.commute,
    }
}

/// The check a reduction makes before it moves data: the op is live and defined on `dt`.
pub fn check(op: &OpRef, dt: MPI_Datatype) -> Res {
    if let OpRef::Predefined(o) = op {
        let t = packed_basic(dt).unwrap_or(Basic::Opaque);
        if !t.allows(*o) || t.size() == 0 {
            return Err(err(
                MPI_ERR_OP,
                format!("the predefined operation {o:#x} is not defined on datatype {dt:#x}"),
            ));
        }
    }
    Ok(())
}

/// `inout = input ⊕ inout` for `count` elements of `dt`, both packed.
pub fn combine(
    op: &OpRef,
    dt: MPI_Datatype,
    ty: &TypeObj,
    count: usize,
    input: &[u8],
    inout: &mut [u8],
) -> Res {
    match op {
        OpRef::Predefined(o) => {
            let t = packed_basic(dt).unwrap_or(Basic::Opaque);
            predefined(*o, t, input, inout)
        }
        OpRef::User(u) => call_user(u, dt, ty, count, input, inout),
    }
}

/// Calls a user function on packed data: directly where the packed form is the memory form,
/// else through scratch images laid out as the datatype says (the function reads the type's
/// layout, with its holes).
fn call_user(
    u: &UserOp,
    dt: MPI_Datatype,
    ty: &TypeObj,
    count: usize,
    input: &[u8],
    inout: &mut [u8],
) -> Res {
    if count == 0 {
        return Ok(());
    }
    if ty.dt.is_contiguous() && ty.dt.lb() == 0 {
        invoke(u, dt, count, input.as_ptr(), inout.as_mut_ptr())
    } else {
        let (lo, hi) = ty.dt.span(count);
        let len = usize::try_from(hi - lo).map_err(|_| err(MPI_ERR_TYPE, "datatype span"))?;
        let mut a = vec![0u8; len];
        let mut b = vec![0u8; len];
        let shift = -lo as isize;
        // SAFETY: `a`/`b` cover span(count) shifted by `-lo`, so every byte the layout touches
        // from base `a + shift` lies inside them.
        unsafe {
            ty.dt
                .unpack_raw(input, a.as_mut_ptr().offset(shift), count)?;
            ty.dt
                .unpack_raw(inout, b.as_mut_ptr().offset(shift), count)?;
        }
        // SAFETY: as above; the images outlive the call.
        let (pa, pb) = unsafe { (a.as_ptr().offset(shift), b.as_mut_ptr().offset(shift)) };
        invoke(u, dt, count, pa, pb)?;
        // SAFETY: as above.
        unsafe { ty.dt.pack_raw(pb, count, inout)? };
        Ok(())
    }
}

fn invoke(u: &UserOp, dt: MPI_Datatype, count: usize, a: *const u8, b: *mut u8) -> Res {
    let mut dt = dt;
    if u.large {
        let mut n = count as MPI_Count;
        // SAFETY: `func` is the program's MPI_User_function_c (checked non-null at creation);
        // the pointers cover `count` elements of `dt` and the locals outlive the call.
        unsafe {
            let f: unsafe extern "C" fn(
                *mut c_void,
                *mut c_void,
                *mut MPI_Count,
                *mut MPI_Datatype,
            ) = std::mem::transmute(u.func);
            f(a as *mut c_void, b.cast(), &mut n, &mut dt);
        }
    } else {
        let mut n = c_int::try_from(count)
            .map_err(|_| err(MPI_ERR_COUNT, "count too large for an int user function"))?;
        // SAFETY: as above, for MPI_User_function.
        unsafe {
            let f: unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype) =
                std::mem::transmute(u.func);
            f(a as *mut c_void, b.cast(), &mut n, &mut dt);
        }
    }
    Ok(())
}

fn create(func: usize, commute: c_int, op: *mut MPI_Op, large: bool) -> Res {
    if func == 0 {
        return Err(err(MPI_ERR_ARG, "the user function is a null pointer"));
    }
    let h = OPS
        .insert(UserOp {
            func,
            commute: commute != 0,
            large,
        })
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many operations"))?;
    ptr::write(op, h, "op")
}

/// `MPI_Op_create`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Op_create(
    user_fn: FnPtr<MPI_User_function>,
    commute: c_int,
    op: *mut MPI_Op,
) -> c_int {
    guard("MPI_Op_create", None, || {
        create(user_fn.addr(), commute, op, false)
    })
}

/// `MPI_Op_create_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Op_create_c(
    user_fn: FnPtr<MPI_User_function_c>,
    commute: c_int,
    op: *mut MPI_Op,
) -> c_int {
    guard("MPI_Op_create_c", None, || {
        create(user_fn.addr(), commute, op, true)
    })
}

/// `MPI_Op_free`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Op_free(op: *mut MPI_Op) -> c_int {
    guard("MPI_Op_free", None, || {
        let h = ptr::read(op, "op")?;
        if opobj::OPS_PREDEFINED.contains(&h) {
            return Err(err(MPI_ERR_OP, "a predefined operation cannot be freed"));
        }
        // Reductions in flight hold their own `Arc`: freeing does not pull the function away.
        OPS.remove(h)
            .ok_or_else(|| err(MPI_ERR_OP, format!("{h:#x} is not a user operation")))?;
        ptr::write(op, MPI_OP_NULL, "op")
    })
}

/// `MPI_Op_commutative`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Op_commutative(op: MPI_Op, commute: *mut c_int) -> c_int {
    guard("MPI_Op_commutative", None, || {
        let o = opobj::get(op)?;
        ptr::write(commute, commutes(&o) as c_int, "commute")
    })
}

fn reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> Res {
    let n = ptr::count(count)?;
    let ty: Arc<TypeObj> = typeobj::get_committed(datatype)?;
    let o = opobj::get(op)?;
    check(&o, datatype)?;
    let a = pack_at(inbuf, n, &ty, "inbuf")?;
    let mut b = pack_at(inoutbuf, n, &ty, "inoutbuf")?;
    combine(&o, datatype, &ty, n, &a, &mut b)?;
    unpack_at(inoutbuf, n, &ty, &b, "inoutbuf")
}

/// `MPI_Reduce_local`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> c_int {
    guard("MPI_Reduce_local", None, || {
        reduce_local(inbuf, inoutbuf, count as i64, datatype, op)
    })
}

/// `MPI_Reduce_local_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Reduce_local_c(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> c_int {
    guard("MPI_Reduce_local_c", None, || {
        reduce_local(inbuf, inoutbuf, count, datatype, op)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::I2;

    fn ints(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn predefined_ops_on_ints_and_their_refusals() {
        let t = basic_of(MPI_INT).unwrap();
        for (op, want) in [
            (MPI_SUM, [5, -1]),
            (MPI_PROD, [6, -6]),
            (MPI_MIN, [2, -3]),
            (MPI_MAX, [3, 2]),
            (MPI_LAND, [1, 1]),
            (MPI_BXOR, [1, -3 ^ 2]),
        ] {
            let mut b = ints(&[3, 2]);
            predefined(op, t, &ints(&[2, -3]), &mut b).unwrap();
            assert_eq!(b, ints(&want), "{op:#x}");
        }
        assert!(predefined(MPI_BAND, Basic::F64, &[0; 8], &mut [0; 8]).is_err());
        assert!(predefined(MPI_MINLOC, t, &[0; 4], &mut [0; 4]).is_err());
        assert!(predefined(MPI_MIN, Basic::C32, &[0; 8], &mut [0; 8]).is_err());
    }

    #[test]
    fn maxloc_keeps_the_lower_index_on_ties() {
        let t = basic_of(MPI_DOUBLE_INT).unwrap();
        let pair = |v: f64, i: i32| [v.to_le_bytes().to_vec(), i.to_le_bytes().to_vec()].concat();
        let mut b = pair(2.0, 5);
        predefined(MPI_MAXLOC, t, &pair(2.0, 3), &mut b).unwrap();
        assert_eq!(b, pair(2.0, 3));
        predefined(MPI_MAXLOC, t, &pair(1.0, 0), &mut b).unwrap();
        assert_eq!(b, pair(2.0, 3));
        predefined(MPI_MINLOC, t, &pair(1.0, 9), &mut b).unwrap();
        assert_eq!(b, pair(1.0, 9));
    }

    #[test]
    fn unsigned_and_narrow_ints_wrap() {
        let mut b = vec![250u8];
        predefined(MPI_SUM, Basic::Uint(1), &[10], &mut b).unwrap();
        assert_eq!(b, [4]);
        let mut b = (-2i16).to_le_bytes().to_vec();
        predefined(MPI_MAX, I2, &(-7i16).to_le_bytes(), &mut b).unwrap();
        assert_eq!(b, (-2i16).to_le_bytes());
    }
}
