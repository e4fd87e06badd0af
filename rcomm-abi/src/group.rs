//! Groups: the object behind an `MPI_Group` (an rcomm [`Group`], members as world ranks) and
//! every `MPI_Group_*` function.

use crate::call::guard;
use crate::consts::*;
use crate::errors::{Res, err};
use crate::handles::{Kind, Registry};
use crate::ptr;
use rcomm::Group;
use std::sync::Arc;

/// Groups the program holds.
pub static GROUPS: Registry<Group> = Registry::new(Kind::Group);

/// The group `h` names; `MPI_ERR_GROUP` for null, stale or foreign values.
pub fn get(h: MPI_Group) -> Res<Arc<Group>> {
    if h == MPI_GROUP_EMPTY {
        return Ok(Arc::new(Group::empty()));
    }
    GROUPS.get(h).ok_or_else(|| {
        err(
            MPI_ERR_GROUP,
            if h == MPI_GROUP_NULL {
                "MPI_GROUP_NULL is not a valid group".to_owned()
            } else {
                format!("{h:#x} is not a live group")
            },
        )
    })
}

/// Registers a group; its handle (the empty group is `MPI_GROUP_EMPTY`).
pub fn insert(g: Group) -> Res<MPI_Group> {
    if g.is_empty() {
        return Ok(MPI_GROUP_EMPTY);
    }
    GROUPS
        .insert(g)
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many groups"))
}

fn ranks(p: *const c_int, n: c_int, size: u32) -> Res<Vec<u32>> {
    let n = ptr::count(n as i64)?;
    ptr::slice(p, n, "ranks")?
        .iter()
        .map(|&r| {
            u32::try_from(r).ok().filter(|&r| r < size).ok_or_else(|| {
                err(
                    MPI_ERR_RANK,
                    format!("rank {r} is not in a group of {size}"),
                )
            })
        })
        .collect()
}

/// The ranks of `n` (first, last, stride) triplets.
fn ranges(p: *const [c_int; 3], n: c_int, size: u32) -> Res<Vec<u32>> {
    let n = ptr::count(n as i64)?;
    let mut out = Vec::new();
    for &[first, last, stride] in ptr::slice(p, n, "ranges")? {
        if stride == 0 {
            return Err(err(MPI_ERR_ARG, "a range's stride is 0"));
        }
        let mut r = first as i64;
        while (stride > 0 && r <= last as i64) || (stride < 0 && r >= last as i64) {
            if r < 0 || r >= size as i64 {
                return Err(err(
                    MPI_ERR_RANK,
                    format!("rank {r} is not in a group of {size}"),
                ));
            }
            out.push(r as u32);
            r += stride as i64;
        }
    }
    Ok(out)
}

fn out(g: Group, newgroup: *mut MPI_Group) -> Res {
    if newgroup.is_null() {
        return Err(err(MPI_ERR_ARG, "newgroup is a null pointer"));
    }
    ptr::write(newgroup, insert(g)?, "newgroup")
}

/// `MPI_Group_size`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_size(group: MPI_Group, size: *mut c_int) -> c_int {
    guard("MPI_Group_size", None, || {
        ptr::write(size, get(group)?.size() as c_int, "size")
    })
}

/// `MPI_Group_rank`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_rank(group: MPI_Group, rank: *mut c_int) -> c_int {
    guard("MPI_Group_rank", None, || {
        let g = get(group)?;
        let me = crate::world::world_comm()?.rank();
        let r = g.rank_of(me).map_or(MPI_UNDEFINED, |r| r as c_int);
        ptr::write(rank, r, "rank")
    })
}

/// `MPI_Group_translate_ranks`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_translate_ranks(
    group1: MPI_Group,
    n: c_int,
    ranks1: *const c_int,
    group2: MPI_Group,
    ranks2: *mut c_int,
) -> c_int {
    guard("MPI_Group_translate_ranks", None, || {
        let a = get(group1)?;
        let b = get(group2)?;
        let count = ptr::count(n as i64)?;
        let input = ptr::slice(ranks1, count, "ranks1")?;
        let output = ptr::slice_mut(ranks2, count, "ranks2")?;
        for (o, &r) in output.iter_mut().zip(input) {
            *o = if r == MPI_PROC_NULL {
                MPI_PROC_NULL
            } else {
                let r = u32::try_from(r)
                    .ok()
                    .filter(|&r| r < a.size())
                    .ok_or_else(|| err(MPI_ERR_RANK, format!("rank {r} is not in group1")))?;
                b.rank_of(a.world_rank(r)?)
                    .map_or(MPI_UNDEFINED, |x| x as c_int)
            };
        }
        Ok(())
    })
}

/// `MPI_Group_compare`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_compare(
    group1: MPI_Group,
    group2: MPI_Group,
    result: *mut c_int,
) -> c_int {
    guard("MPI_Group_compare", None, || {
        let r = match get(group1)?.compare(&*get(group2)?) {
            rcomm::Comparison::Ident => MPI_IDENT,
            rcomm::Comparison::Similar => MPI_SIMILAR,
            rcomm::Comparison::Congruent => MPI_IDENT,
            _ => MPI_UNEQUAL,
        };
        ptr::write(result, r, "result")
    })
}

/// `MPI_Group_union`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_union(
    group1: MPI_Group,
    group2: MPI_Group,
    newgroup: *mut MPI_Group,
) -> c_int {
    guard("MPI_Group_union", None, || {
        out(get(group1)?.union(&*get(group2)?), newgroup)
    })
}

/// `MPI_Group_intersection`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_intersection(
    group1: MPI_Group,
    group2: MPI_Group,
    newgroup: *mut MPI_Group,
) -> c_int {
    guard("MPI_Group_intersection", None, || {
        out(get(group1)?.intersection(&*get(group2)?), newgroup)
    })
}

/// `MPI_Group_difference`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_difference(
    group1: MPI_Group,
    group2: MPI_Group,
    newgroup: *mut MPI_Group,
) -> c_int {
    guard("MPI_Group_difference", None, || {
        out(get(group1)?.difference(&*get(group2)?), newgroup)
    })
}

/// `MPI_Group_incl`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_incl(
    group: MPI_Group,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut MPI_Group,
) -> c_int {
    guard("MPI_Group_incl", None, || {
        let g = get(group)?;
        let r = self::ranks(ranks, n, g.size())?;
        out(g.incl(&r)?, newgroup)
    })
}

/// `MPI_Group_excl`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_excl(
    group: MPI_Group,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut MPI_Group,
) -> c_int {
    guard("MPI_Group_excl", None, || {
        let g = get(group)?;
        let r = self::ranks(ranks, n, g.size())?;
        out(g.excl(&r)?, newgroup)
    })
}

/// `MPI_Group_range_incl`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_range_incl(
    group: MPI_Group,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut MPI_Group,
) -> c_int {
    guard("MPI_Group_range_incl", None, || {
        let g = get(group)?;
        let r = self::ranges(ranges, n, g.size())?;
        out(g.incl(&r)?, newgroup)
    })
}

/// `MPI_Group_range_excl`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_range_excl(
    group: MPI_Group,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut MPI_Group,
) -> c_int {
    guard("MPI_Group_range_excl", None, || {
        let g = get(group)?;
        let r = self::ranges(ranges, n, g.size())?;
        out(g.excl(&r)?, newgroup)
    })
}

/// `MPI_Group_free`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_free(group: *mut MPI_Group) -> c_int {
    guard("MPI_Group_free", None, || {
        let h = ptr::read(group, "group")?;
        get(h)?;
        if h != MPI_GROUP_EMPTY {
            GROUPS.remove(h);
        }
        ptr::write(group, MPI_GROUP_NULL, "group")
    })
}
