//! User reductions on derived datatypes whose element is not 1, 2, 4, 8 or 16 contiguous
//! bytes: a 12-byte struct and a `repr(C)` struct with padding (13 data bytes in 24), reduced
//! with non-commutative user operations (composition of affine maps, "first wins") through
//! every reducing collective, blocking and not, and locally. Each result is compared with a
//! sequential fold in rank order computed here, so an operation applied out of order, a
//! contribution lost or counted twice, or an element split between chunks fails. Written
//! against rsmpi's API only; built and run at 1-4 ranks by tests/tests/rsmpi_examples.rs.

use std::os::raw::{c_int, c_void};

use mpi::collective::{UnsafeUserOperation, UserOperation};
use mpi::datatype::{MutView, UserDatatype, View};
use mpi::ffi::MPI_Datatype;
use mpi::traits::*;

/// The affine map x ↦ m·x + c (wrapping), and how many contributions were combined.
#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Aff {
    m: i32,
    c: i32,
    n: i32,
}

/// `a ⊕ b` = a ∘ b: associative, not commutative.
fn compose(a: Aff, b: Aff) -> Aff {
    Aff {
        m: a.m.wrapping_mul(b.m),
        c: a.m.wrapping_mul(b.c).wrapping_add(a.c),
        n: a.n + b.n,
    }
}

/// A struct with padding: 1 + 7 + 8 + 4 + 4 bytes, 13 of them data.
#[repr(C)]
#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Pad {
    tag: u8,
    m: i64,
    c: i32,
}

/// `a ⊕ b`: the left tag wins; (m, c) compose as affine maps over 2³² with multiplier m.
fn pad_op(a: Pad, b: Pad) -> Pad {
    Pad {
        tag: a.tag,
        m: a.m.wrapping_mul(b.m),
        c: (a.m as i32).wrapping_mul(b.c).wrapping_add(a.c),
    }
}

/// `inout[i] = input[i] ⊕ inout[i]` over `Aff`, as a C-style function.
unsafe extern "C" fn compose_raw(
    input: *mut c_void,
    inout: *mut c_void,
    len: *mut c_int,
    _dt: *mut MPI_Datatype,
) {
    let n = unsafe { *len } as usize;
    let a = unsafe { std::slice::from_raw_parts(input as *const Aff, n) };
    let b = unsafe { std::slice::from_raw_parts_mut(inout as *mut Aff, n) };
    for (x, y) in a.iter().zip(b) {
        *y = compose(*x, *y);
    }
}

fn aff(rank: i32, i: i32) -> Aff {
    Aff {
        m: 2 * rank + 3 + 2 * i,
        c: 7 * rank - i + 1,
        n: 1,
    }
}

fn pad(rank: i32, i: i32) -> Pad {
    Pad {
        tag: (rank * 16 + i) as u8,
        m: 2 * rank as i64 + 5 + i as i64 * 1_000_000_007,
        c: -3 * rank + 11 * i,
    }
}

/// `v(r₀) ⊕ v(r₀+1) ⊕ … ⊕ v(r₁−1)` element-wise, folded in rank order (right to left, as MPI's
/// `inout = in ⊕ inout`).
fn fold<T: Copy>(
    ranks: std::ops::Range<i32>,
    v: impl Fn(i32) -> Vec<T>,
    op: fn(T, T) -> T,
) -> Vec<T> {
    let mut acc = v(ranks.end - 1);
    for r in ranks.rev().skip(1) {
        for (y, x) in acc.iter_mut().zip(v(r)) {
            *y = op(x, *y);
        }
    }
    acc
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    const K: i32 = 5;
    let mine_of = |r: i32| (0..K).map(|i| aff(r, i)).collect::<Vec<_>>();
    let pads_of = |r: i32| (0..K).map(|i| pad(r, i)).collect::<Vec<_>>();
    let mine = mine_of(rank);
    let pads = pads_of(rank);
    assert_eq!(std::mem::size_of::<Aff>(), 12);
    assert_eq!(std::mem::size_of::<Pad>(), 24);

    let op = UserOperation::associative(|x, y| {
        let x: &[Aff] = x.downcast().unwrap();
        let y: &mut [Aff] = y.downcast().unwrap();
        for (a, b) in x.iter().zip(y) {
            *b = compose(*a, *b);
        }
    });
    let pop = UserOperation::associative(|x, y| {
        let x: &[Pad] = x.downcast().unwrap();
        let y: &mut [Pad] = y.downcast().unwrap();
        for (a, b) in x.iter().zip(y) {
            *b = pad_op(*a, *b);
        }
    });
    let raw = unsafe { UnsafeUserOperation::associative(compose_raw) };
    let all = fold(0..size, mine_of, compose);
    let all_pads = fold(0..size, pads_of, pad_op);
    assert_eq!(all[0].n, size);

    // The sequential fold itself is order-sensitive (else these checks could not fail).
    if size > 1 {
        assert_ne!(compose(aff(0, 0), aff(1, 0)), compose(aff(1, 0), aff(0, 0)));
        assert_ne!(pad_op(pad(0, 0), pad(1, 0)), pad_op(pad(1, 0), pad(0, 0)));
    }

    // All-reduce: the same rank-ordered result everywhere.
    let mut out = vec![Aff::default(); K as usize];
    world.all_reduce_into(&mine[..], &mut out[..], &op);
    assert_eq!(out, all, "all_reduce_into, 12-byte elements");
    let mut out = vec![Aff::default(); K as usize];
    world.all_reduce_into(&mine[..], &mut out[..], &raw);
    assert_eq!(out, all, "all_reduce_into, unsafe op");
    let mut pout = vec![Pad::default(); K as usize];
    world.all_reduce_into(&pads[..], &mut pout[..], &pop);
    assert_eq!(pout, all_pads, "all_reduce_into, padded elements");

    // Large enough for the chunked algorithms (ring, shared-memory pieces): no element may be
    // split between chunks.
    const BIG: i32 = 20_011;
    let big_of = |r: i32| (0..BIG).map(|i| aff(r, i)).collect::<Vec<_>>();
    let mut out = vec![Aff::default(); BIG as usize];
    world.all_reduce_into(&big_of(rank)[..], &mut out[..], &op);
    assert!(
        out == fold(0..size, big_of, compose),
        "all_reduce_into, {BIG} elements"
    );
    let bigp_of = |r: i32| (0..BIG).map(|i| pad(r, i)).collect::<Vec<_>>();
    let mut pout = vec![Pad::default(); BIG as usize];
    world.all_reduce_into(&bigp_of(rank)[..], &mut pout[..], &pop);
    assert!(
        pout == fold(0..size, bigp_of, pad_op),
        "all_reduce_into, {BIG} padded"
    );

    // Reduce to the first and to the last rank.
    for root_rank in [0, size - 1] {
        let root = world.process_at_rank(root_rank);
        if rank == root_rank {
            let mut out = vec![Aff::default(); K as usize];
            root.reduce_into_root(&mine[..], &mut out[..], &op);
            assert_eq!(out, all, "reduce_into_root at {root_rank}");
            let mut pout = vec![Pad::default(); K as usize];
            root.reduce_into_root(&pads[..], &mut pout[..], &pop);
            assert_eq!(pout, all_pads, "reduce_into_root at {root_rank}, padded");
        } else {
            root.reduce_into(&mine[..], &op);
            root.reduce_into(&pads[..], &pop);
        }
    }

    // Inclusive and exclusive scans: prefixes in rank order.
    let mut out = vec![Aff::default(); K as usize];
    world.scan_into(&mine[..], &mut out[..], &op);
    assert_eq!(out, fold(0..rank + 1, mine_of, compose), "scan_into");
    let mut pout = vec![Pad::default(); K as usize];
    world.scan_into(&pads[..], &mut pout[..], &pop);
    assert_eq!(
        pout,
        fold(0..rank + 1, pads_of, pad_op),
        "scan_into, padded"
    );
    let sentinel = Aff {
        m: -1,
        c: -2,
        n: -3,
    };
    let mut out = vec![sentinel; K as usize];
    world.exclusive_scan_into(&mine[..], &mut out[..], &op);
    if rank == 0 {
        assert_eq!(
            out,
            vec![sentinel; K as usize],
            "exclusive_scan_into at rank 0"
        );
    } else {
        assert_eq!(out, fold(0..rank, mine_of, compose), "exclusive_scan_into");
    }
    let psentinel = Pad {
        tag: 99,
        m: -5,
        c: 77,
    };
    let mut pout = vec![psentinel; K as usize];
    world.exclusive_scan_into(&pads[..], &mut pout[..], &pop);
    if rank == 0 {
        assert_eq!(
            pout,
            vec![psentinel; K as usize],
            "exclusive_scan_into at rank 0, padded"
        );
    } else {
        assert_eq!(
            pout,
            fold(0..rank, pads_of, pad_op),
            "exclusive_scan_into, padded"
        );
    }

    // Reduce-scatter of equal blocks: two elements per rank.
    let wide_of = |r: i32| (0..2 * size).map(|i| aff(r, i)).collect::<Vec<_>>();
    let wide = wide_of(rank);
    let mut block = vec![Aff::default(); 2];
    world.reduce_scatter_block_into(&wide[..], &mut block[..], &op);
    let whole = fold(0..size, wide_of, compose);
    assert_eq!(
        block,
        whole[2 * rank as usize..2 * rank as usize + 2],
        "reduce_scatter_block_into"
    );

    let wide_of = |r: i32| (0..BIG * size).map(|i| aff(r, i)).collect::<Vec<_>>();
    let mut block = vec![Aff::default(); BIG as usize];
    world.reduce_scatter_block_into(&wide_of(rank)[..], &mut block[..], &op);
    let whole = fold(0..size, wide_of, compose);
    let mine_block = &whole[(BIG * rank) as usize..(BIG * (rank + 1)) as usize];
    assert!(
        block == mine_block,
        "reduce_scatter_block_into, {BIG} per rank"
    );

    // Non-blocking forms.
    let mut a_out = vec![Aff::default(); K as usize];
    let mut p_out = vec![Pad::default(); K as usize];
    let mut s_out = vec![Aff::default(); K as usize];
    let mut r_out = vec![Aff::default(); K as usize];
    mpi::request::scope(|scope| {
        let r1 = world.immediate_all_reduce_into(scope, &mine[..], &mut a_out[..], &op);
        let r2 = world.immediate_all_reduce_into(scope, &pads[..], &mut p_out[..], &pop);
        let r3 = world.immediate_scan_into(scope, &mine[..], &mut s_out[..], &op);
        let root = world.process_at_rank(size - 1);
        if rank == size - 1 {
            root.immediate_reduce_into_root(scope, &mine[..], &mut r_out[..], &op)
                .wait();
        } else {
            root.immediate_reduce_into(scope, &mine[..], &op).wait();
        }
        r3.wait();
        r2.wait();
        r1.wait();
    });
    assert_eq!(a_out, all, "immediate_all_reduce_into");
    assert_eq!(p_out, all_pads, "immediate_all_reduce_into, padded");
    assert_eq!(
        s_out,
        fold(0..rank + 1, mine_of, compose),
        "immediate_scan_into"
    );
    if rank == size - 1 {
        assert_eq!(r_out, all, "immediate_reduce_into_root");
    }

    // A strided type: words 0 and 2 of every 3 (extent 12, a 4-byte gap), reduced through
    // views; the op reads its elements through raw pointers, 12 bytes apart. The gap words of
    // the receive buffer stay as they were.
    let strided = UserDatatype::vector(2, 1, 2, &i32::equivalent_datatype());
    let sop = UserOperation::associative(|x, mut y| {
        let n = x.len();
        let a = unsafe { std::slice::from_raw_parts(x.as_ptr() as *const i32, 3 * n) };
        let b = unsafe { std::slice::from_raw_parts_mut(y.as_mut_ptr() as *mut i32, 3 * n) };
        for e in 0..n {
            let r = compose(
                Aff {
                    m: a[3 * e],
                    c: a[3 * e + 2],
                    n: 0,
                },
                Aff {
                    m: b[3 * e],
                    c: b[3 * e + 2],
                    n: 0,
                },
            );
            (b[3 * e], b[3 * e + 2]) = (r.m, r.c);
        }
    });
    let words_of = |r: i32| {
        (0..K)
            .flat_map(|i| [aff(r, i).m, -1000 - r, aff(r, i).c])
            .collect::<Vec<i32>>()
    };
    let words = words_of(rank);
    let mut got = vec![-7i32; 3 * K as usize];
    {
        let s = unsafe { View::with_count_and_datatype(&words[..], K, &strided) };
        let mut r = unsafe { MutView::with_count_and_datatype(&mut got[..], K, &strided) };
        world.all_reduce_into(&s, &mut r, &sop);
    }
    let want: Vec<i32> = all.iter().flat_map(|a| [a.m, -7, a.c]).collect();
    assert_eq!(got, want, "all_reduce_into, strided type");
    let mut got = vec![-7i32; 3 * K as usize];
    {
        let s = unsafe { View::with_count_and_datatype(&words[..], K, &strided) };
        let mut r = unsafe { MutView::with_count_and_datatype(&mut got[..], K, &strided) };
        world.scan_into(&s, &mut r, &sop);
    }
    let want: Vec<i32> = fold(0..rank + 1, mine_of, compose)
        .iter()
        .flat_map(|a| [a.m, -7, a.c])
        .collect();
    assert_eq!(got, want, "scan_into, strided type");

    // Locally: inout = in ⊕ inout.
    let mut local = pads_of(rank + 1);
    mpi::collective::reduce_local_into(&pads[..], &mut local[..], &pop);
    let want: Vec<Pad> = pads
        .iter()
        .zip(pads_of(rank + 1))
        .map(|(&a, b)| pad_op(a, b))
        .collect();
    assert_eq!(local, want, "reduce_local_into, padded");
    let mut local = mine_of(rank + 1);
    mpi::collective::reduce_local_into(&mine[..], &mut local[..], &raw);
    let want: Vec<Aff> = mine
        .iter()
        .zip(mine_of(rank + 1))
        .map(|(&a, b)| compose(a, b))
        .collect();
    assert_eq!(local, want, "reduce_local_into, unsafe op");

    world.barrier();
    if rank == 0 {
        println!("user reductions on 12-byte and padded structs passed at {size} ranks");
    }
}
