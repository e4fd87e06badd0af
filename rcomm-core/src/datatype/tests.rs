//! Every constructor against a reference: a naive type map (one entry per byte, built by
//! recursion straight from MPI's definitions) packed and unpacked byte by byte.

use super::*;
use proptest::prelude::*;

/// A constructor tree, the reference's input.
#[derive(Clone, Debug)]
enum T {
    Prim(usize),
    Contig(usize, Box<T>),
    Vector(usize, usize, isize, Box<T>),
    HVector(usize, usize, isize, Box<T>),
    Indexed(Vec<usize>, Vec<isize>, Box<T>),
    HIndexed(Vec<usize>, Vec<isize>, Box<T>),
    Struct(Vec<(usize, isize, T)>),
    Subarray(Vec<usize>, Vec<usize>, Vec<usize>, Order, Box<T>),
    Resized(isize, isize, Box<T>),
}

/// Byte offsets in type-map order, lower and upper bound.
#[derive(Clone, Debug)]
struct Ref {
    offs: Vec<isize>,
    lb: isize,
    ub: isize,
}

fn place(out: &mut Ref, set: &mut bool, disp: isize, n: usize, old: &Ref) {
    let ext = old.ub - old.lb;
    for e in 0..n {
        let base = disp + e as isize * ext;
        out.offs.extend(old.offs.iter().map(|o| base + o));
        let (lo, hi) = (base + old.lb, base + old.ub);
        if *set {
            out.lb = out.lb.min(lo);
            out.ub = out.ub.max(hi);
        } else {
            (out.lb, out.ub, *set) = (lo, hi, true);
        }
    }
}

fn reference(t: &T) -> Ref {
    let mut r = Ref {
        offs: vec![],
        lb: 0,
        ub: 0,
    };
    let mut set = false;
    match t {
        T::Prim(n) => {
            r.offs = (0..*n as isize).collect();
            r.ub = *n as isize;
        }
        T::Contig(c, o) => place(&mut r, &mut set, 0, *c, &reference(o)),
        T::Vector(c, bl, st, o) | T::HVector(c, bl, st, o) => {
            let old = reference(o);
            let unit = if matches!(t, T::Vector(..)) {
                old.ub - old.lb
            } else {
                1
            };
            for i in 0..*c {
                place(&mut r, &mut set, i as isize * st * unit, *bl, &old);
            }
        }
        T::Indexed(bl, d, o) | T::HIndexed(bl, d, o) => {
            let old = reference(o);
            let unit = if matches!(t, T::Indexed(..)) {
                old.ub - old.lb
            } else {
                1
            };
            for (n, d) in bl.iter().zip(d) {
                place(&mut r, &mut set, d * unit, *n, &old);
            }
        }
        T::Struct(items) => {
            for (n, d, t) in items {
                place(&mut r, &mut set, *d, *n, &reference(t));
            }
        }
        T::Subarray(sizes, sub, starts, order, o) => {
            let old = reference(o);
            let ext = old.ub - old.lb;
            let nd = sizes.len();
            let dims: Vec<usize> = match order {
                Order::RowMajor => (0..nd).collect(),
                Order::ColumnMajor => (0..nd).rev().collect(),
            };
            // Every element of the sub-block in storage order, slowest dimension first.
            let mut idx = vec![0usize; nd];
            let total: usize = sub.iter().product();
            for _ in 0..total {
                let mut lin = 0isize;
                for &d in &dims {
                    lin = lin * sizes[d] as isize + (starts[d] + idx[d]) as isize;
                }
                place(&mut r, &mut set, lin * ext, 1, &old);
                for &d in dims.iter().rev() {
                    idx[d] += 1;
                    if idx[d] < sub[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
            r.lb = 0;
            r.ub = sizes.iter().product::<usize>() as isize * ext;
        }
        T::Resized(lb, ext, o) => {
            r = reference(o);
            (r.lb, r.ub) = (*lb, lb + ext);
        }
    }
    r
}

fn build(t: &T) -> Datatype {
    match t {
        T::Prim(n) => Datatype::bytes(*n),
        T::Contig(c, o) => Datatype::contiguous(*c, &build(o)).unwrap(),
        T::Vector(c, b, s, o) => Datatype::vector(*c, *b, *s, &build(o)).unwrap(),
        T::HVector(c, b, s, o) => Datatype::hvector(*c, *b, *s, &build(o)).unwrap(),
        T::Indexed(b, d, o) => Datatype::indexed(b, d, &build(o)).unwrap(),
        T::HIndexed(b, d, o) => Datatype::hindexed(b, d, &build(o)).unwrap(),
        T::Struct(items) => {
            let bl: Vec<usize> = items.iter().map(|i| i.0).collect();
            let d: Vec<isize> = items.iter().map(|i| i.1).collect();
            let ts: Vec<Datatype> = items.iter().map(|i| build(&i.2)).collect();
            Datatype::structured(&bl, &d, &ts).unwrap()
        }
        T::Subarray(s, ss, st, o, old) => Datatype::subarray(s, ss, st, *o, &build(old)).unwrap(),
        T::Resized(lb, ext, o) => build(o).resized(*lb, *ext).unwrap(),
    }
}

fn tree() -> impl Strategy<Value = T> {
    let leaf = prop_oneof![Just(1usize), Just(2), Just(4), Just(8), Just(3)].prop_map(T::Prim);
    leaf.prop_recursive(3, 24, 4, |inner| {
        let b = || inner.clone().prop_map(Box::new);
        prop_oneof![
            (0usize..4, b()).prop_map(|(c, o)| T::Contig(c, o)),
            (0usize..5, 0usize..3, -3isize..5, b())
                .prop_map(|(c, bl, s, o)| T::Vector(c, bl, s, o)),
            (0usize..5, 0usize..3, -24isize..40, b())
                .prop_map(|(c, bl, s, o)| T::HVector(c, bl, s, o)),
            (prop::collection::vec((0usize..3, -4isize..8), 0..4), b()).prop_map(|(v, o)| {
                let (bl, d) = v.into_iter().unzip();
                T::Indexed(bl, d, o)
            }),
            (prop::collection::vec((0usize..3, -16isize..48), 0..4), b()).prop_map(|(v, o)| {
                let (bl, d) = v.into_iter().unzip();
                T::HIndexed(bl, d, o)
            }),
            prop::collection::vec((0usize..3, -16isize..48, inner.clone()), 1..4)
                .prop_map(T::Struct),
            (
                prop::collection::vec((1usize..4, 0usize..4, 0usize..4), 1..4),
                any::<bool>(),
                b()
            )
                .prop_map(|(d, row, o)| {
                    let sizes: Vec<usize> = d.iter().map(|x| x.0 + x.1.min(x.0)).collect();
                    let sub: Vec<usize> = d.iter().map(|x| x.0).collect();
                    let starts: Vec<usize> = d.iter().map(|x| x.1.min(x.0)).collect();
                    let order = if row {
                        Order::RowMajor
                    } else {
                        Order::ColumnMajor
                    };
                    T::Subarray(sizes, sub, starts, order, o)
                }),
            (-8isize..8, 0isize..24, b()).prop_map(|(lb, e, o)| T::Resized(lb, e, o)),
        ]
    })
}

/// The span `count` elements touch in the reference, as (lowest, one past highest).
fn ref_span(r: &Ref, count: usize) -> (isize, isize) {
    let ext = r.ub - r.lb;
    let mut lo = isize::MAX;
    let mut hi = isize::MIN;
    for i in 0..count {
        for o in &r.offs {
            lo = lo.min(i as isize * ext + o);
            hi = hi.max(i as isize * ext + o + 1);
        }
    }
    if lo > hi { (0, 0) } else { (lo, hi) }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn pack_and_unpack_match_the_reference_type_map(t in tree(), count in 0usize..4, cut in 0usize..1000) {
        let r = reference(&t);
        let dt = build(&t);
        prop_assert_eq!(dt.size(), r.offs.len());
        prop_assert_eq!((dt.lb(), dt.extent()), (r.lb, r.ub - r.lb));
        let (lo, hi) = ref_span(&r, count);
        let got = dt.span(count);
        if !r.offs.is_empty() && count > 0 {
            prop_assert_eq!(got, (lo as i128, hi as i128));
        }
        // Memory around the span, the base placed so that every offset is inside.
        let shift = (-lo).max(0) as usize + 3;
        let len = shift + hi.max(0) as usize + 3;
        let mem: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        let ext = r.ub - r.lb;
        let want: Vec<u8> = (0..count)
            .flat_map(|i| r.offs.iter().map(move |o| i as isize * ext + o))
            .map(|o| mem[(shift as isize + o) as usize])
            .collect();
        let mut packed = vec![0u8; dt.packed_size(count)];
        // SAFETY: the span lies inside `mem` by construction of `shift` and `len`.
        let n = unsafe { dt.pack_raw(mem.as_ptr().add(shift), count, &mut packed) }.unwrap();
        prop_assert_eq!(n, want.len());
        prop_assert_eq!(&packed, &want);

        // Unpack a prefix (a short message) into fresh memory: the reference writes the same
        // bytes in the same order (overlapping layouts: the last write wins in both).
        let p = if want.is_empty() { 0 } else { cut % (want.len() + 1) };
        let mut dst = vec![0xEEu8; len];
        let mut refdst = dst.clone();
        let offs = (0..count).flat_map(|i| r.offs.iter().map(move |o| i as isize * ext + o));
        for (k, o) in offs.take(p).enumerate() {
            refdst[(shift as isize + o) as usize] = want[k];
        }
        // SAFETY: as above.
        let m = unsafe { dt.unpack_raw(&want[..p], dst.as_mut_ptr().add(shift), count) }.unwrap();
        prop_assert_eq!(m, p);
        prop_assert_eq!(dst, refdst);

        // The safe calls agree where the span starts at or after the buffer start, and refuse
        // where it does not.
        let safe = dt.pack(&mem[shift..], count, &mut packed);
        if lo >= 0 || want.is_empty() {
            prop_assert_eq!(safe.unwrap(), want.len());
        } else {
            prop_assert!(safe.is_err());
        }
    }
}

#[test]
fn a_column_of_a_matrix_is_one_strided_block() {
    let col = Datatype::vector(1000, 1, 7, &Datatype::of::<f64>()).unwrap();
    assert_eq!(col.0.blocks.len(), 1);
    assert_eq!(
        col.0.blocks[0],
        Block {
            off: 0,
            len: 8,
            stride: 56,
            count: 1000
        }
    );
    assert_eq!(col.size(), 8000);
    assert_eq!(col.extent(), (999 * 7 + 1) * 8);
    // Several columns of a subarray fold the same way: one block per row of the block.
    let sub = Datatype::subarray(
        &[100, 100],
        &[50, 3],
        &[1, 2],
        Order::RowMajor,
        &Datatype::of::<f32>(),
    )
    .unwrap();
    assert_eq!(sub.0.blocks.len(), 1, "{:?}", sub.0.blocks);
    assert_eq!(sub.size(), 50 * 3 * 4);
    assert_eq!((sub.lb(), sub.extent()), (0, 100 * 100 * 4));
}

#[test]
fn contiguous_layouts_are_sent_from_memory() {
    let f = Datatype::of::<f64>();
    assert!(Datatype::contiguous(10, &f).unwrap().is_contiguous());
    assert!(Datatype::vector(4, 2, 2, &f).unwrap().is_contiguous());
    assert!(!Datatype::vector(4, 1, 2, &f).unwrap().is_contiguous());
    assert!(!f.resized(0, 16).unwrap().is_contiguous());
    assert_eq!(Datatype::vector(3, 1, 2, &f).unwrap().count_in(48), Some(2));
    assert_eq!(Datatype::vector(3, 1, 2, &f).unwrap().count_in(50), None);
}

#[test]
fn bad_layouts_are_errors_not_panics() {
    let f = Datatype::of::<f64>();
    let e = Datatype::indexed(&[1, 2], &[0], &f)
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 block lengths but 1 displacements"), "{e}");
    let e = Datatype::subarray(&[4, 4], &[2, 3], &[0, 2], Order::RowMajor, &f)
        .unwrap_err()
        .to_string();
    assert!(e.contains("exceeds size"), "{e}");
    assert!(Datatype::vector(usize::MAX, 2, 3, &f).is_err());
    assert!(Datatype::vector(2, 1, isize::MAX, &f).is_err());
    assert!(Datatype::hvector(3, 1, isize::MAX / 2, &f).is_err());
    // A layout that would build for ever is refused within a bound.
    let t = std::time::Instant::now();
    let big = Datatype::vector(1 << 20, 1, 2, &Datatype::bytes(1)).unwrap();
    assert!(Datatype::contiguous(1 << 30, &Datatype::vector(2, 1, 3, &big).unwrap()).is_err());
    assert!(t.elapsed().as_secs() < 30);
    // Packing outside the buffer is refused.
    let col = Datatype::vector(3, 1, 4, &f).unwrap();
    let m = [0f64; 8];
    let mut out = [0u8; 24];
    let e = col
        .pack(bytemuck::cast_slice(&m), 1, &mut out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("outside the 64-byte buffer"), "{e}");
    let mut small = [0u8; 8];
    assert!(
        col.pack(bytemuck::cast_slice(&[0f64; 9]), 1, &mut small)
            .is_err()
    );
    // A packed message longer than the receive count is a truncation.
    let mut dst = [0f64; 9];
    assert!(matches!(
        col.unpack(&[0u8; 32], bytemuck::cast_slice_mut(&mut dst), 1),
        Err(CommError::Truncated {
            buffer: 24,
            message: 32
        })
    ));
}
