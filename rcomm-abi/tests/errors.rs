//! Bad arguments to the collectives, ops, datatypes and topologies come back as their MPI
//! error class through the error handler (here `MPI_ERRORS_RETURN` on a world of one), never
//! as a crash or a hang; the library still works afterwards.

use mpi_abi::coll::{moves::*, neighbor::*, reduce::*};
use mpi_abi::consts::*;
use mpi_abi::dtype::*;
use mpi_abi::ops::*;
use mpi_abi::topo::*;
use std::ffi::c_void;
use std::ptr::{null, null_mut};

fn init() {
    assert_eq!(mpi_abi::env::PMPI_Init(null_mut(), null_mut()), MPI_SUCCESS);
    let w = mpi_abi::comm::get(MPI_COMM_WORLD).unwrap();
    *w.errhandler.lock().unwrap() = MPI_ERRORS_RETURN;
}

fn v(x: &mut i32) -> *mut c_void {
    (x as *mut i32).cast()
}

fn collectives() {
    let mut x = 7i32;
    let (w, b) = (MPI_COMM_WORLD, v(&mut x));
    assert_eq!(PMPI_Bcast(null_mut(), 5, MPI_INT, 0, w), MPI_ERR_BUFFER);
    assert_eq!(PMPI_Bcast(b, -1, MPI_INT, 0, w), MPI_ERR_COUNT);
    assert_eq!(PMPI_Bcast(b, 1, MPI_DATATYPE_NULL, 0, w), MPI_ERR_TYPE);
    assert_eq!(PMPI_Bcast(b, 1, 0x1234_5678, 0, w), MPI_ERR_TYPE);
    assert_eq!(PMPI_Bcast(b, 1, MPI_INT, 1, w), MPI_ERR_ROOT);
    assert_eq!(PMPI_Bcast(b, 1, MPI_INT, -1, w), MPI_ERR_ROOT);
    assert_eq!(PMPI_Bcast(b, 1, MPI_INT, 0, MPI_COMM_NULL), MPI_ERR_COMM);
    assert_eq!(PMPI_Bcast(b, 1, MPI_INT, 0, 0x0777_0000), MPI_ERR_COMM);
    // A derived type must be committed, and a freed one is gone.
    let mut t = MPI_DATATYPE_NULL;
    assert_eq!(PMPI_Type_contiguous(1, MPI_INT, &mut t), MPI_SUCCESS);
    assert_eq!(PMPI_Bcast(b, 1, t, 0, w), MPI_ERR_TYPE);
    let dead = t;
    assert_eq!(PMPI_Type_free(&mut t), MPI_SUCCESS);
    assert_eq!(PMPI_Bcast(b, 1, dead, 0, w), MPI_ERR_TYPE);

    let mut y = 0i32;
    let r = v(&mut y);
    assert_eq!(PMPI_Allreduce(b, r, 1, MPI_INT, MPI_OP_NULL, w), MPI_ERR_OP);
    assert_eq!(PMPI_Allreduce(b, r, 1, MPI_INT, 0x0999_0000, w), MPI_ERR_OP);
    assert_eq!(PMPI_Allreduce(b, r, 1, MPI_INT, MPI_MINLOC, w), MPI_ERR_OP);
    assert_eq!(PMPI_Allreduce(b, r, 1, MPI_C_BOOL, MPI_SUM, w), MPI_ERR_OP);
    let mut d = 1.0f64;
    let dp = (&mut d as *mut f64).cast();
    assert_eq!(
        PMPI_Allreduce(dp, dp, 1, MPI_DOUBLE, MPI_BAND, w),
        MPI_ERR_OP
    );
    assert_eq!(PMPI_Reduce(b, r, -3, MPI_INT, MPI_SUM, 0, w), MPI_ERR_COUNT);
    assert_eq!(
        PMPI_Scan(b, null_mut(), 1, MPI_INT, MPI_SUM, w),
        MPI_ERR_BUFFER
    );

    // No request pointer: nothing starts, so nothing is left half-done.
    assert_eq!(PMPI_Ibcast(b, 1, MPI_INT, 0, w, null_mut()), MPI_ERR_ARG);
    let (neg, zero) = ([-1i32], [0i32]);
    assert_eq!(
        PMPI_Gatherv(b, 1, MPI_INT, r, neg.as_ptr(), zero.as_ptr(), MPI_INT, 0, w),
        MPI_ERR_COUNT
    );
    assert_eq!(
        PMPI_Gatherv(b, 1, MPI_INT, r, null(), zero.as_ptr(), MPI_INT, 0, w),
        MPI_ERR_ARG
    );
    let one = [1i32];
    assert_eq!(
        PMPI_Alltoallw(
            b,
            one.as_ptr(),
            zero.as_ptr(),
            null(),
            r,
            one.as_ptr(),
            zero.as_ptr(),
            null(),
            w
        ),
        MPI_ERR_ARG
    );

    // Still working.
    assert_eq!(PMPI_Barrier(w), MPI_SUCCESS);
    assert_eq!(PMPI_Allreduce(b, r, 1, MPI_INT, MPI_SUM, w), MPI_SUCCESS);
    assert_eq!(y, 7);
}

type NoopFn = extern "C" fn(*mut c_void, *mut c_void, *mut i32, *mut MPI_Datatype);

extern "C" fn noop(_: *mut c_void, _: *mut c_void, _: *mut i32, _: *mut MPI_Datatype) {}

type UserFn = mpi_abi::attr::FnPtr<mpi_abi::attr::ctypes::MPI_User_function>;

/// A function pointer as C passes it (`FnPtr` is a transparent address).
fn user_fn(addr: usize) -> UserFn {
    // SAFETY: `FnPtr` is `#[repr(transparent)]` over a `usize` (its marker is zero-sized).
    unsafe { std::mem::transmute::<usize, UserFn>(addr) }
}

fn ops() {
    let mut op = MPI_OP_NULL;
    assert_eq!(PMPI_Op_create(user_fn(0), 1, &mut op), MPI_ERR_ARG);
    assert_eq!(
        PMPI_Op_create(user_fn(noop as NoopFn as usize), 1, &mut op),
        MPI_SUCCESS
    );
    let dead = op;
    assert_eq!(PMPI_Op_free(&mut op), MPI_SUCCESS);
    assert_eq!(op, MPI_OP_NULL);
    let mut flag = 0;
    assert_eq!(PMPI_Op_commutative(dead, &mut flag), MPI_ERR_OP);
    let mut sum = MPI_SUM;
    assert_eq!(PMPI_Op_free(&mut sum), MPI_ERR_OP);
    let (mut a, mut c) = (1i32, 2i32);
    assert_eq!(
        PMPI_Reduce_local(v(&mut a), v(&mut c), -1, MPI_INT, MPI_SUM),
        MPI_ERR_COUNT
    );
    assert_eq!(
        PMPI_Reduce_local(v(&mut a), v(&mut c), 1, MPI_INT, dead),
        MPI_ERR_OP
    );
}

fn datatypes() {
    let mut t = MPI_DATATYPE_NULL;
    assert_eq!(PMPI_Type_contiguous(-1, MPI_INT, &mut t), MPI_ERR_COUNT);
    assert_eq!(
        PMPI_Type_vector(2, 1, 2, MPI_DATATYPE_NULL, &mut t),
        MPI_ERR_TYPE
    );
    assert_eq!(PMPI_Type_vector(2, 1, 2, MPI_INT, null_mut()), MPI_ERR_ARG);
    let mut int = MPI_INT;
    assert_eq!(PMPI_Type_free(&mut int), MPI_ERR_TYPE);
    assert_eq!(PMPI_Type_contiguous(2, MPI_INT, &mut t), MPI_SUCCESS);
    let mut again = t;
    assert_eq!(PMPI_Type_free(&mut t), MPI_SUCCESS);
    assert_eq!(PMPI_Type_free(&mut again), MPI_ERR_TYPE);
    let (mut i, mut a, mut d) = ([0i32; 4], [0isize; 4], [0usize; 4]);
    assert_eq!(
        PMPI_Type_get_contents(
            MPI_INT,
            4,
            4,
            4,
            i.as_mut_ptr(),
            a.as_mut_ptr(),
            d.as_mut_ptr()
        ),
        MPI_ERR_TYPE
    );
    let (sz, sub, st) = ([4i32], [3i32], [2i32]);
    assert_ne!(
        PMPI_Type_create_subarray(
            1,
            sz.as_ptr(),
            sub.as_ptr(),
            st.as_ptr(),
            MPI_ORDER_C,
            MPI_INT,
            &mut t
        ),
        MPI_SUCCESS
    );
    assert_eq!(
        PMPI_Type_create_subarray(
            1,
            sz.as_ptr(),
            sub.as_ptr(),
            [0].as_ptr(),
            77,
            MPI_INT,
            &mut t
        ),
        MPI_ERR_ARG
    );
    assert_eq!(PMPI_Type_size(MPI_INT, null_mut()), MPI_ERR_ARG);
    let mut x = [1i32, 2];
    let mut out = [0u8; 4];
    let mut pos = 0;
    assert_eq!(
        PMPI_Pack(
            x.as_mut_ptr().cast(),
            2,
            MPI_INT,
            out.as_mut_ptr().cast(),
            4,
            &mut pos,
            MPI_COMM_WORLD
        ),
        MPI_ERR_TRUNCATE
    );
    assert_eq!(pos, 0);
}

fn topologies() {
    let w = MPI_COMM_WORLD;
    let mut c = MPI_COMM_NULL;
    let (dims, per) = ([2i32, 1], [0i32, 0]);
    assert_eq!(
        PMPI_Cart_create(w, 2, dims.as_ptr(), per.as_ptr(), 0, &mut c),
        MPI_ERR_DIMS
    );
    assert_eq!(
        PMPI_Cart_create(w, -1, dims.as_ptr(), per.as_ptr(), 0, &mut c),
        MPI_ERR_DIMS
    );
    assert_eq!(
        PMPI_Cart_create(w, 1, [0].as_ptr(), per.as_ptr(), 0, &mut c),
        MPI_ERR_DIMS
    );
    let mut nd = 0;
    assert_eq!(PMPI_Cartdim_get(w, &mut nd), MPI_ERR_TOPOLOGY);
    assert_eq!(
        PMPI_Cart_create(w, 1, [1].as_ptr(), per.as_ptr(), 0, &mut c),
        MPI_SUCCESS
    );
    let (mut s, mut t) = (0, 0);
    assert_eq!(PMPI_Cart_shift(c, 5, 1, &mut s, &mut t), MPI_ERR_ARG);
    let mut co = [0i32; 1];
    assert_eq!(PMPI_Cart_coords(c, 9, 1, co.as_mut_ptr()), MPI_ERR_RANK);
    let mut dd = [2i32, 0];
    assert_eq!(PMPI_Dims_create(5, 2, dd.as_mut_ptr()), MPI_ERR_DIMS);
    let mut g = MPI_COMM_NULL;
    assert_eq!(
        PMPI_Graph_create(w, 1, [1].as_ptr(), [7].as_ptr(), 0, &mut g),
        MPI_ERR_RANK
    );
    let (mut i, mut o, mut wt) = (0, 0, 0);
    assert_eq!(
        PMPI_Dist_graph_neighbors_count(c, &mut i, &mut o, &mut wt),
        MPI_ERR_TOPOLOGY
    );
    let mut x = 1i32;
    let mut y = [0i32; 2];
    assert_eq!(
        PMPI_Neighbor_allgather(v(&mut x), 1, MPI_INT, y.as_mut_ptr().cast(), 1, MPI_INT, w),
        MPI_ERR_TOPOLOGY
    );
}

#[test]
fn bad_arguments_return_their_error_class() {
    init();
    collectives();
    ops();
    datatypes();
    topologies();
    assert_eq!(mpi_abi::env::PMPI_Finalize(), MPI_SUCCESS);
}
