//! The object behind an `MPI_Datatype`: predefined types from the standard's table and the
//! slot derived types (module `dtype`) fill. Every type carries an rcomm
//! [`Datatype`](rcomm::datatype::Datatype) layout, so point-to-point packs any of them the
//! same way.

use crate::consts::*;
use crate::errors::{Res, err};
use crate::handles::{Kind, Registry};
use rcomm::datatype::Datatype;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// How a type was made, as `MPI_Type_get_envelope` / `get_contents` report it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    /// `MPI_COMBINER_*`.
    pub combiner: c_int,
    /// The integer arguments.
    pub ints: Vec<c_int>,
    /// The address arguments.
    pub aints: Vec<MPI_Aint>,
    /// The large-count arguments.
    pub counts: Vec<MPI_Count>,
    /// The datatype arguments.
    pub types: Vec<MPI_Datatype>,
}

/// What an `MPI_Datatype` names.
pub struct TypeObj {
    /// The byte layout of one element.
    pub dt: Datatype,
    /// Its name (`MPI_Type_set_name`; predefined: the standard's).
    pub name: Mutex<String>,
    /// Whether it is one of the standard's types (never freed).
    pub predefined: bool,
    /// `MPI_Type_commit` was called (predefined: always).
    pub committed: AtomicBool,
    /// How it was made.
    pub contents: Contents,
    /// The size of the basic element every part is made of, when all are one basic type
    /// (`MPI_Get_elements` counts these); `None` for mixed types.
    pub basic_size: Option<usize>,
    /// Attributes: keyval → value.
    pub attrs: Mutex<HashMap<c_int, usize>>,
    /// What `dtype` knows of a derived type beyond its layout (its parts, as objects, and
    /// their alignment), set once when it is made: it lives as long as the object, so a type
    /// whose handle was freed still answers for the types built from it.
    pub ext: OnceLock<Box<dyn std::any::Any + Send + Sync>>,
}

impl TypeObj {
    /// A derived type (not yet committed).
    pub fn derived(dt: Datatype, contents: Contents, basic_size: Option<usize>) -> TypeObj {
        TypeObj {
            dt,
            name: Mutex::new(String::new()),
            predefined: false,
            committed: AtomicBool::new(false),
            contents,
            basic_size,
            attrs: Mutex::new(HashMap::new()),
            ext: OnceLock::new(),
        }
    }

    /// Bytes of data in one element.
    pub fn size(&self) -> usize {
        self.dt.size()
    }

    /// Whether communication may use it.
    pub fn is_committed(&self) -> bool {
        self.committed.load(Ordering::Acquire)
    }
}

/// Derived types.
pub static TYPES: Registry<TypeObj> = Registry::new(Kind::Datatype);

fn predefined_layout(name: &str, size: usize, extent: usize) -> Res<Datatype> {
    let dt = match name {
        // short at 0, int at 4: a hole in the middle.
        "MPI_SHORT_INT" => Datatype::hindexed(&[2, 4], &[0, 4], &Datatype::bytes(1))?,
        _ => Datatype::bytes(size),
    };
    Ok(if extent != size {
        dt.resized(0, extent as isize)?
    } else {
        dt
    })
}

/// The basic element of a pair type (`MPI_DOUBLE_INT` is a double and an int): `MPI_Get_elements`
/// counts two per pair.
fn basic_size(name: &str, size: usize) -> Option<usize> {
    match name {
        "MPI_FLOAT_INT"
        | "MPI_DOUBLE_INT"
        | "MPI_LONG_INT"
        | "MPI_SHORT_INT"
        | "MPI_LONG_DOUBLE_INT" => None,
        "MPI_2INT" | "MPI_2REAL" | "MPI_2INTEGER" => Some(4),
        "MPI_2DOUBLE_PRECISION" => Some(8),
        _ => Some(size),
    }
}

/// The predefined types by handle: a slice indexed by the (small, fixed) handle value, since
/// every send and receive looks its datatype up (a hashed map cost more than the rest of the
/// C layer's work per message).
fn predefined_table() -> &'static [Option<Arc<TypeObj>>] {
    static T: OnceLock<Vec<Option<Arc<TypeObj>>>> = OnceLock::new();
    T.get_or_init(|| {
        let top = DATATYPES.iter().map(|&(_, h, _, _)| h).max().unwrap_or(0);
        let mut t: Vec<Option<Arc<TypeObj>>> = vec![None; top + 1];
        for &(name, h, size, extent) in DATATYPES {
            if h == MPI_DATATYPE_NULL {
                continue;
            }
            let Ok(dt) = predefined_layout(name, size, extent) else {
                continue;
            };
            t[h] = Some(Arc::new(TypeObj {
                dt,
                name: Mutex::new(name.to_owned()),
                predefined: true,
                committed: AtomicBool::new(true),
                contents: Contents {
                    combiner: MPI_COMBINER_NAMED,
                    ..Contents::default()
                },
                basic_size: basic_size(name, size),
                attrs: Mutex::new(HashMap::new()),
                ext: OnceLock::new(),
            }));
        }
        t
    })
}

/// Per predefined datatype handle, the byte size of one element when `count` elements are one
/// run of `count * size` bytes from the buffer's address (every predefined type but the pairs
/// with a gap), else 0. Filled at init ([`fill_runs`]), so that the hot paths of send and
/// receive read one byte, no lock or lazy cell.
static RUNS: [AtomicU8; RUNS_LEN] = [const { AtomicU8::new(0) }; RUNS_LEN];
const RUNS_LEN: usize = 0x400;

/// Fills [`RUNS`] (at init).
pub fn fill_runs() {
    for (h, t) in predefined_table().iter().enumerate() {
        if let Some(t) = t
            && h < RUNS_LEN
            && t.size() > 0
            && t.size() < 256
            && t.dt.is_contiguous()
            && t.dt.lb() == 0
            && t.dt.extent() == t.size() as isize
        {
            RUNS[h].store(t.size() as u8, Ordering::Relaxed);
        }
    }
}

/// The byte size of one element of predefined type `h` laid out as one run ([`RUNS`]); `None`
/// for any other handle, and before init.
#[inline(always)]
pub fn predefined_run(h: MPI_Datatype) -> Option<usize> {
    match RUNS.get(h)?.load(Ordering::Relaxed) {
        0 => None,
        n => Some(n as usize),
    }
}

/// The type `h` names; `MPI_ERR_TYPE` for null, stale or foreign values.
pub fn get(h: MPI_Datatype) -> Res<Arc<TypeObj>> {
    if h < crate::handles::FIRST_DYNAMIC {
        return predefined_table().get(h).cloned().flatten().ok_or_else(|| {
            err(
                MPI_ERR_TYPE,
                if h == MPI_DATATYPE_NULL {
                    "MPI_DATATYPE_NULL is not a valid datatype".to_owned()
                } else {
                    format!("{h:#x} is not a datatype")
                },
            )
        });
    }
    TYPES
        .get(h)
        .ok_or_else(|| err(MPI_ERR_TYPE, format!("{h:#x} is not a live datatype")))
}

/// A datatype held for one call: the predefined ones borrowed from their static table (no
/// reference count touched on every send and receive), the others shared.
pub enum TypeRef {
    /// A predefined type.
    Static(&'static TypeObj),
    /// A type the program made.
    Shared(Arc<TypeObj>),
}

impl std::ops::Deref for TypeRef {
    type Target = TypeObj;
    fn deref(&self) -> &TypeObj {
        match self {
            TypeRef::Static(t) => t,
            TypeRef::Shared(t) => t,
        }
    }
}

/// [`get_committed`] without a reference count for the predefined types.
pub fn get_committed_ref(h: MPI_Datatype) -> Res<TypeRef> {
    if let Some(Some(t)) = predefined_table().get(h) {
        return Ok(TypeRef::Static(t));
    }
    get_committed(h).map(TypeRef::Shared)
}

/// The type `h` names, which communication may use (committed).
pub fn get_committed(h: MPI_Datatype) -> Res<Arc<TypeObj>> {
    let t = get(h)?;
    if !t.is_committed() {
        return Err(err(
            MPI_ERR_TYPE,
            format!("datatype {h:#x} is not committed"),
        ));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_predefined_type_has_its_size_and_extent() {
        for &(name, h, size, extent) in DATATYPES {
            if h == MPI_DATATYPE_NULL {
                assert!(get(h).is_err());
                continue;
            }
            let t = get(h).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(t.size(), size, "{name}");
            assert_eq!(t.dt.extent(), extent as isize, "{name}");
        }
    }
}
