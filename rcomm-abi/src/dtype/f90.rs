//! `MPI_Type_create_f90_integer`, `_real` and `_complex`: the sized predefined type that holds
//! a Fortran 90 kind of the given precision and range. The standard makes the result a
//! predefined type (never freed) whose envelope names the F90 combiner and the arguments, so
//! each is a handle of its own over its sized type, made once per argument set.

use super::*;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Handles already made, by (combiner, p, r).
static MADE: Mutex<BTreeMap<(c_int, c_int, c_int), MPI_Datatype>> = Mutex::new(BTreeMap::new());

/// Integer kinds: the decimal exponent range each holds, smallest first.
const INTEGERS: &[(c_int, MPI_Datatype)] = &[
    (2, MPI_INTEGER1),
    (4, MPI_INTEGER2),
    (9, MPI_INTEGER4),
    (18, MPI_INTEGER8),
    (38, MPI_INTEGER16),
];

/// Real kinds: (decimal precision, decimal exponent range, real type, complex type).
const REALS: &[(c_int, c_int, MPI_Datatype, MPI_Datatype)] = &[
    (6, 37, MPI_REAL4, MPI_COMPLEX8),
    (15, 307, MPI_REAL8, MPI_COMPLEX16),
    (33, 4931, MPI_REAL16, MPI_COMPLEX32),
];

/// The F90 type over `base` for the arguments, made on first use.
fn f90(combiner: c_int, p: c_int, r: c_int, base: MPI_Datatype, out: *mut MPI_Datatype) -> Res {
    if out.is_null() {
        return Err(err(MPI_ERR_ARG, "newtype is a null pointer"));
    }
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&h) = made.get(&(combiner, p, r))
        && typeobj::get(h).is_ok()
    {
        return ptr::write(out, h, "newtype");
    }
    let b = old(base)?;
    let ints = if combiner == MPI_COMBINER_F90_INTEGER {
        vec![i64::from(r)]
    } else {
        vec![i64::from(p), i64::from(r)]
    };
    // The sized type is what it is made of (for reductions), but not a part its contents
    // name: the envelope holds integers only.
    let mut obj = TypeObj::derived(
        b.dt.dup(),
        recorded(false, combiner, ints, vec![], vec![]),
        b.basic_size,
    );
    let _ = obj.ext.set(Box::new(Side {
        info: Info {
            basic: Some(base),
            align: align_of_basic(base, b.size()),
        },
        parts: Vec::new(),
    }));
    obj.predefined = true;
    obj.committed.store(true, Ordering::Release);
    *obj.name.get_mut().unwrap_or_else(|e| e.into_inner()) =
        b.name.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let h = TYPES
        .insert(obj)
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many datatypes"))?;
    made.insert((combiner, p, r), h);
    ptr::write(out, h, "newtype")
}

/// Whether rcomm has the sized type `h`.
fn have(h: MPI_Datatype) -> bool {
    typeobj::get(h).is_ok()
}

/// The smallest real kind with precision `p` and range `r` (either may be `MPI_UNDEFINED`).
fn real_kind(p: c_int, r: c_int, complex: bool) -> Res<MPI_Datatype> {
    if p == MPI_UNDEFINED && r == MPI_UNDEFINED {
        return Err(err(
            MPI_ERR_ARG,
            "precision and range are both MPI_UNDEFINED: give at least one",
        ));
    }
    let want_p = if p == MPI_UNDEFINED { 0 } else { p };
    let want_r = if r == MPI_UNDEFINED { 0 } else { r };
    if want_p < 0 || want_r < 0 {
        return Err(err(
            MPI_ERR_ARG,
            format!("precision {p} or range {r} is negative"),
        ));
    }
    REALS
        .iter()
        .map(|&(kp, kr, real, cplx)| (kp, kr, if complex { cplx } else { real }))
        .find(|&(kp, kr, h)| want_p <= kp && want_r <= kr && have(h))
        .map(|(_, _, h)| h)
        .ok_or_else(|| {
            err(
                MPI_ERR_ARG,
                format!("no real kind has precision {p} and range {r}"),
            )
        })
}

/// `MPI_Type_create_f90_integer`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_f90_integer(r: c_int, newtype: *mut MPI_Datatype) -> c_int {
    guard("MPI_Type_create_f90_integer", None, || {
        let base = INTEGERS
            .iter()
            .find(|&&(kr, h)| r >= 0 && r <= kr && have(h))
            .map(|&(_, h)| h)
            .ok_or_else(|| err(MPI_ERR_ARG, format!("no integer kind has range {r}")))?;
        f90(MPI_COMBINER_F90_INTEGER, MPI_UNDEFINED, r, base, newtype)
    })
}

/// `MPI_Type_create_f90_real`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_f90_real(
    p: c_int,
    r: c_int,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_f90_real", None, || {
        f90(
            MPI_COMBINER_F90_REAL,
            p,
            r,
            real_kind(p, r, false)?,
            newtype,
        )
    })
}

/// `MPI_Type_create_f90_complex`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_create_f90_complex(
    p: c_int,
    r: c_int,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard("MPI_Type_create_f90_complex", None, || {
        f90(
            MPI_COMBINER_F90_COMPLEX,
            p,
            r,
            real_kind(p, r, true)?,
            newtype,
        )
    })
}
