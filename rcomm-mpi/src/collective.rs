//! Collective communication (rsmpi's `mpi::collective`).
//!
//! Data moves as bytes through rcomm's collectives (packed first when a datatype is not
//! contiguous); reductions run on rcomm's typed reductions, over the primitive the datatype
//! names (built-in operations) or over same-sized plain integers (user operations on
//! contiguous user datatypes of 1, 2, 4, 8 or 16 bytes). User operations on any other user
//! datatype (a 12-byte struct, a struct with padding, a strided layout) run on rcomm's
//! reductions over opaque elements ([`rcomm::coll::ElemOp`]): each element travels as its
//! memory image (`extent` bytes, zero where the datatype has no data), so the operation sees
//! its elements as they lie in memory and combines them in rank order, as MPI's user
//! operations do.
//!
//! Why one file: the facade keeps rsmpi's layout, one module per rsmpi module; this is
//! `mpi::collective` (operations, the collective traits and the root's calls), as in rsmpi.

use std::os::raw::{c_int, c_void};
use std::sync::Arc;

use rcomm::coll::ElemOp;
use rcomm::{Op as CoreOp, ReduceOp, UserOp};

use crate::datatype::{
    Buffer, BufferMut, DatatypeRef, Dst, Dt, DynBuffer, DynBufferMut, Partitioned,
    PartitionedBuffer, PartitionedBufferMut, Prim, Src, UncommittedDatatype, dst_of, src_of,
};
use crate::ffi::MPI_Datatype;
use crate::request::{Coll, Pending, Request, Scope};
use crate::topology::{AsHandle, Communicator, Process, Rank};
use crate::{Count, check, fail};

// ------------------------------------------------------------------ operations

/// The built-in operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub enum Sys {
    Max,
    Min,
    Sum,
    Prod,
    LAnd,
    BAnd,
    LOr,
    BOr,
    LXor,
    BXor,
}

/// A built-in reduction operation (`MPI_SUM`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemOperation(Sys);

macro_rules! sys_ctors {
    ($($name:ident => $v:ident, $doc:literal;)*) => {
        impl SystemOperation {$(
            #[doc = $doc]
            pub fn $name() -> SystemOperation {
                SystemOperation(Sys::$v)
            }
        )*}
    };
}

sys_ctors! {
    max => Max, "Maximum.";
    min => Min, "Minimum.";
    sum => Sum, "Sum.";
    product => Prod, "Product.";
    logical_and => LAnd, "Logical and.";
    bitwise_and => BAnd, "Bitwise and.";
    logical_or => LOr, "Logical or.";
    bitwise_or => BOr, "Bitwise or.";
    logical_xor => LXor, "Logical exclusive or.";
    bitwise_xor => BXor, "Bitwise exclusive or.";
}

type DynFn<'a> = dyn Fn(DynBuffer, DynBufferMut) + Sync + 'a;

struct SendFn(Arc<DynFn<'static>>);
unsafe impl Send for SendFn {}
unsafe impl Sync for SendFn {}

impl SendFn {
    fn call(&self, a: DynBuffer, b: DynBufferMut) {
        (self.0)(a, b)
    }
}

/// The C signature of an unsafe user operation.
pub type UnsafeUserFunction =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype);

#[doc(hidden)]
#[derive(Clone)]
pub enum OpKind<'o> {
    Sys(Sys),
    User(Arc<DynFn<'o>>, bool),
    Unsafe(UnsafeUserFunction, bool),
}

/// A reduction operation.
pub trait Operation {
    /// What the facade runs.
    #[doc(hidden)]
    fn kind(&self) -> OpKind<'_>;

    /// Whether the operation is commutative.
    fn is_commutative(&self) -> bool {
        match self.kind() {
            OpKind::Sys(_) => true,
            OpKind::User(_, c) | OpKind::Unsafe(_, c) => c,
        }
    }
}

impl<T: Operation> Operation for &T {
    fn kind(&self) -> OpKind<'_> {
        (**self).kind()
    }
}

impl Operation for SystemOperation {
    fn kind(&self) -> OpKind<'_> {
        OpKind::Sys(self.0)
    }
}

/// A reduction operation from a closure over dynamically typed buffers:
/// `f(input, inoutput)` sets `inoutput = input ⊕ inoutput` element-wise.
pub struct UserOperation<'a> {
    f: Arc<DynFn<'a>>,
    commute: bool,
}

impl std::fmt::Debug for UserOperation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserOperation")
            .field("commutative", &self.commute)
            .finish()
    }
}

impl<'a> UserOperation<'a> {
    /// An associative (not commutative) operation.
    pub fn associative<F: Fn(DynBuffer, DynBufferMut) + Sync + 'a>(function: F) -> Self {
        Self::new(false, function)
    }

    /// A commutative operation.
    pub fn commutative<F: Fn(DynBuffer, DynBufferMut) + Sync + 'a>(function: F) -> Self {
        Self::new(true, function)
    }

    /// An operation, commutative or not.
    pub fn new<F: Fn(DynBuffer, DynBufferMut) + Sync + 'a>(commute: bool, function: F) -> Self {
        UserOperation {
            f: Arc::new(function),
            commute,
        }
    }
}

impl Operation for UserOperation<'_> {
    fn kind(&self) -> OpKind<'_> {
        OpKind::User(self.f.clone(), self.commute)
    }
}

/// A reduction operation from a C-style function.
#[derive(Debug)]
pub struct UnsafeUserOperation {
    f: UnsafeUserFunction,
    commute: bool,
}

impl UnsafeUserOperation {
    /// An associative operation.
    ///
    /// # Safety
    /// `function` must read and write only the elements it is given.
    pub unsafe fn associative(function: UnsafeUserFunction) -> Self {
        UnsafeUserOperation {
            f: function,
            commute: false,
        }
    }

    /// A commutative operation.
    ///
    /// # Safety
    /// As [`associative`](Self::associative).
    pub unsafe fn commutative(function: UnsafeUserFunction) -> Self {
        UnsafeUserOperation {
            f: function,
            commute: true,
        }
    }

    /// An operation, commutative or not.
    ///
    /// # Safety
    /// As [`associative`](Self::associative).
    pub unsafe fn new(commute: bool, function: UnsafeUserFunction) -> Self {
        UnsafeUserOperation {
            f: function,
            commute,
        }
    }
}

impl Operation for UnsafeUserOperation {
    fn kind(&self) -> OpKind<'_> {
        OpKind::Unsafe(self.f, self.commute)
    }
}

/// The element type a reduction runs on.
#[derive(Debug, Clone, Copy)]
enum Elem {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
    U128,
    /// Memory images of user datatype elements of this extent (user operations only).
    Image(usize),
}

fn elem_of(dt: &Dt, op: &OpKind) -> Elem {
    match (dt.prim, op) {
        (Some(p), _) => match p {
            Prim::I8 => Elem::I8,
            Prim::I16 => Elem::I16,
            Prim::I32 => Elem::I32,
            Prim::I64 => Elem::I64,
            Prim::U8 | Prim::Bool => Elem::U8,
            Prim::U16 => Elem::U16,
            Prim::U32 | Prim::Char => Elem::U32,
            Prim::U64 => Elem::U64,
            Prim::F32 => Elem::F32,
            Prim::F64 => Elem::F64,
        },
        (None, OpKind::Sys(s)) => fail(&format!("built-in operation {s:?} on a user datatype")),
        (None, _) => match (dt.core.is_contiguous(), dt.size()) {
            (true, 1) => Elem::U8,
            (true, 2) => Elem::U16,
            (true, 4) => Elem::U32,
            (true, 8) => Elem::U64,
            (true, 16) => Elem::U128,
            _ => Elem::Image(image_extent(dt)),
        },
    }
}

/// The extent of a user datatype whose elements are reduced as memory images: each element's
/// data must lie within its own extent (true lower bound ≥ 0, true upper bound ≤ extent), so
/// that `count` elements are `count` disjoint runs of `extent` bytes.
fn image_extent(dt: &Dt) -> usize {
    let ext = dt.core.extent();
    let (tlb, span) = dt.core.true_extent();
    if ext <= 0 || tlb < 0 || tlb + span > ext {
        fail(&format!(
            "rcomm-mpi reduces user datatypes whose data lies within one extent of the \
             element's start only (extent {ext}, data at {tlb}..{})",
            tlb + span
        ));
    }
    ext as usize
}

/// `count` elements of `dt` as they lie in memory (`count × extent` bytes), from their packed
/// bytes (fewer than `count` elements' fill the first ones); bytes no element covers are zero.
fn image_of(dt: &Dt, ext: usize, packed: &[u8], count: usize) -> Vec<u8> {
    let mut img = vec![0u8; count * ext];
    check(dt.core.unpack(packed, &mut img, count));
    img
}

/// The packed bytes of `count` elements of `dt` in a memory image.
fn packed_of(dt: &Dt, img: &[u8], count: usize) -> Vec<u8> {
    let mut out = vec![0u8; dt.packed(count)];
    check(dt.core.pack(img, count, &mut out));
    out
}

/// A user operation as the image reductions call it.
#[derive(Clone)]
enum UserFn {
    Safe(Arc<SendFn>),
    Unsafe(UnsafeUserFunction),
}

fn user_fn(op: &OpKind) -> UserFn {
    match op {
        OpKind::User(f, _) => {
            // The closure lives as long as the call or request that uses it ('a); rcomm keeps
            // the wrapper only while the operation runs.
            let f: Arc<DynFn<'static>> =
                unsafe { std::mem::transmute::<Arc<DynFn<'_>>, Arc<DynFn<'static>>>(f.clone()) };
            UserFn::Safe(Arc::new(SendFn(f)))
        }
        OpKind::Unsafe(f, _) => UserFn::Unsafe(*f),
        OpKind::Sys(s) => fail(&format!("built-in operation {s:?} on a user datatype")),
    }
}

/// `b = a ⊕ b` on memory images of whole elements of `dt` (`extent` bytes each).
fn combine_images(f: &UserFn, dt: &Dt, ext: usize, a: &[u8], b: &mut [u8]) {
    let n = a.len() / ext;
    // The operation sees its own element type: copies aligned for any primitive (rcomm's
    // scratch buffers are bytes, at any offset).
    let aligned = |x: &[u8]| {
        let mut v = vec![0u128; x.len().div_ceil(16)];
        bytemuck::cast_slice_mut::<u128, u8>(&mut v)[..x.len()].copy_from_slice(x);
        v
    };
    let mut sa = aligned(a);
    let mut sb = aligned(&b[..n * ext]);
    let r = DatatypeRef::from_dt(dt);
    match f {
        UserFn::Safe(g) => unsafe {
            g.call(
                DynBuffer::from_raw(sa.as_ptr().cast::<u8>(), n as Count, r),
                DynBufferMut::from_raw(sb.as_mut_ptr().cast::<u8>(), n as Count, r),
            )
        },
        UserFn::Unsafe(g) => {
            let mut len = n as c_int;
            unsafe {
                g(
                    sa.as_mut_ptr().cast(),
                    sb.as_mut_ptr().cast(),
                    &mut len,
                    std::ptr::null_mut(),
                )
            }
        }
    }
    // Back only the bytes the datatype covers: the operation may have left padding undefined
    // (a struct assignment), so the image keeps its zeros there.
    let mut packed = vec![0u8; dt.packed(n)];
    // SAFETY: `sb` holds `n` elements' images and every element's data lies within its extent
    // (`image_extent`); pack reads only those bytes.
    unsafe { dt.core.pack_raw(sb.as_ptr().cast(), n, &mut packed) }.unwrap_or_else(|e| fail(&e));
    check(dt.core.unpack(&packed, &mut b[..n * ext], n));
}

/// The packed bytes a receive layout holds now.
fn current(d: &Dst) -> Vec<u8> {
    Src {
        ptr: d.ptr,
        count: d.count,
        dt: d.dt.clone(),
    }
    .bytes()
    .into_owned()
}

/// The rcomm reduction over memory images of `dt`'s elements.
fn image_op(op: &OpKind, dt: &Dt, ext: usize) -> ElemOp {
    let f = user_fn(op);
    let dt = dt.clone();
    check(ElemOp::new(ext, op_commutes(op), move |a, b| {
        combine_images(&f, &dt, ext, a, b)
    }))
}

fn op_commutes(op: &OpKind) -> bool {
    match op {
        OpKind::Sys(_) => true,
        OpKind::User(_, c) | OpKind::Unsafe(_, c) => *c,
    }
}

fn nonzero<T: bytemuck::Pod>(x: &T) -> bool {
    bytemuck::bytes_of(x).iter().any(|&b| b != 0)
}

fn logical<T: bytemuck::Pod>(f: fn(bool, bool) -> bool) -> ReduceOp<T> {
    UserOp::<T>::new(true, move |a: &[T], b: &mut [T]| {
        for (x, y) in a.iter().zip(b.iter_mut()) {
            let r = f(nonzero(x), nonzero(y));
            *y = T::zeroed();
            if r {
                // 1 in the lowest byte: the value one on little-endian targets.
                bytemuck::bytes_of_mut(y)[if cfg!(target_endian = "little") {
                    0
                } else {
                    size_of::<T>() - 1
                }] = 1;
            }
        }
    })
    .into()
}

fn user_op<T: bytemuck::Pod>(op: &OpKind, dt: &Dt) -> ReduceOp<T> {
    match op {
        OpKind::Sys(Sys::LAnd) => logical::<T>(|a, b| a && b),
        OpKind::Sys(Sys::LOr) => logical::<T>(|a, b| a || b),
        OpKind::Sys(Sys::LXor) => logical::<T>(|a, b| a != b),
        OpKind::Sys(s) => fail(&format!(
            "operation {s:?} on elements of {} bytes",
            size_of::<T>()
        )),
        OpKind::User(f, commute) => {
            // The closure lives as long as the call or request that uses it ('a); rcomm keeps
            // the wrapper only while the operation runs.
            let f: Arc<DynFn<'static>> =
                unsafe { std::mem::transmute::<Arc<DynFn<'_>>, Arc<DynFn<'static>>>(f.clone()) };
            let f = SendFn(f);
            let dt = dt.clone();
            UserOp::<T>::new(*commute, move |a: &[T], b: &mut [T]| {
                let r = DatatypeRef::from_dt(&dt);
                let (ia, ib) = unsafe {
                    (
                        DynBuffer::from_raw(a.as_ptr(), a.len() as Count, r),
                        DynBufferMut::from_raw(b.as_mut_ptr(), b.len() as Count, r),
                    )
                };
                f.call(ia, ib)
            })
            .into()
        }
        OpKind::Unsafe(f, commute) => {
            let f = *f;
            UserOp::<T>::new(*commute, move |a: &[T], b: &mut [T]| {
                let mut n = a.len() as c_int;
                unsafe {
                    f(
                        a.as_ptr() as *mut c_void,
                        b.as_mut_ptr().cast(),
                        &mut n,
                        std::ptr::null_mut(),
                    )
                }
            })
            .into()
        }
    }
}

fn el_op<T: rcomm::Element>(op: &OpKind, dt: &Dt, float: bool) -> ReduceOp<T> {
    let core = match op {
        OpKind::Sys(Sys::Max) => CoreOp::Max,
        OpKind::Sys(Sys::Min) => CoreOp::Min,
        OpKind::Sys(Sys::Sum) => CoreOp::Sum,
        OpKind::Sys(Sys::Prod) => CoreOp::Prod,
        OpKind::Sys(Sys::BAnd) if !float => CoreOp::BAnd,
        OpKind::Sys(Sys::BOr) if !float => CoreOp::BOr,
        OpKind::Sys(Sys::BXor) if !float => CoreOp::BXor,
        _ => return user_op::<T>(op, dt),
    };
    core.into()
}

macro_rules! typed {
    ($e:expr, $op:expr, $dt:expr, |$T:ident, $rop:ident| $body:block) => {
        match $e {
            Elem::I8 => {
                type $T = i8;
                let $rop = el_op::<i8>($op, $dt, false);
                $body
            }
            Elem::I16 => {
                type $T = i16;
                let $rop = el_op::<i16>($op, $dt, false);
                $body
            }
            Elem::I32 => {
                type $T = i32;
                let $rop = el_op::<i32>($op, $dt, false);
                $body
            }
            Elem::I64 => {
                type $T = i64;
                let $rop = el_op::<i64>($op, $dt, false);
                $body
            }
            Elem::U8 => {
                type $T = u8;
                let $rop = el_op::<u8>($op, $dt, false);
                $body
            }
            Elem::U16 => {
                type $T = u16;
                let $rop = el_op::<u16>($op, $dt, false);
                $body
            }
            Elem::U32 => {
                type $T = u32;
                let $rop = el_op::<u32>($op, $dt, false);
                $body
            }
            Elem::U64 => {
                type $T = u64;
                let $rop = el_op::<u64>($op, $dt, false);
                $body
            }
            Elem::F32 => {
                type $T = f32;
                let $rop = el_op::<f32>($op, $dt, true);
                $body
            }
            Elem::F64 => {
                type $T = f64;
                let $rop = el_op::<f64>($op, $dt, true);
                $body
            }
            Elem::U128 => {
                type $T = u128;
                let $rop = user_op::<u128>($op, $dt);
                $body
            }
            Elem::Image(_) => unreachable!("memory images take their own path"),
        }
    };
}

fn to_vec<T: bytemuck::Pod>(b: &[u8]) -> Vec<T> {
    let mut v = vec![T::zeroed(); b.len() / size_of::<T>()];
    let n = v.len() * size_of::<T>();
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&b[..n]);
    v
}

/// Applies `op` to `a` and `b` in place (`b = a ⊕ b`) on this process.
fn apply_local<T: bytemuck::Pod>(
    op: &OpKind,
    dt: &Dt,
    a: &[T],
    b: &mut [T],
    core: Option<CoreOp>,
) -> Option<CoreOp> {
    match op {
        OpKind::Sys(Sys::LAnd | Sys::LOr | Sys::LXor) => {
            let f: fn(bool, bool) -> bool = match op {
                OpKind::Sys(Sys::LAnd) => |x, y| x && y,
                OpKind::Sys(Sys::LOr) => |x, y| x || y,
                _ => |x, y| x != y,
            };
            for (x, y) in a.iter().zip(b.iter_mut()) {
                let r = f(nonzero(x), nonzero(y));
                *y = T::zeroed();
                if r {
                    bytemuck::bytes_of_mut(y)[0] = 1;
                }
            }
            None
        }
        OpKind::Sys(_) => core,
        OpKind::User(f, _) => {
            let r = DatatypeRef::from_dt(dt);
            unsafe {
                f(
                    DynBuffer::from_raw(a.as_ptr(), a.len() as Count, r),
                    DynBufferMut::from_raw(b.as_mut_ptr(), b.len() as Count, r),
                )
            };
            None
        }
        OpKind::Unsafe(f, _) => {
            let mut n = a.len() as c_int;
            unsafe {
                f(
                    a.as_ptr() as *mut c_void,
                    b.as_mut_ptr().cast(),
                    &mut n,
                    std::ptr::null_mut(),
                )
            };
            None
        }
    }
}

fn core_op(op: &OpKind) -> Option<CoreOp> {
    match op {
        OpKind::Sys(Sys::Max) => Some(CoreOp::Max),
        OpKind::Sys(Sys::Min) => Some(CoreOp::Min),
        OpKind::Sys(Sys::Sum) => Some(CoreOp::Sum),
        OpKind::Sys(Sys::Prod) => Some(CoreOp::Prod),
        OpKind::Sys(Sys::BAnd) => Some(CoreOp::BAnd),
        OpKind::Sys(Sys::BOr) => Some(CoreOp::BOr),
        OpKind::Sys(Sys::BXor) => Some(CoreOp::BXor),
        _ => None,
    }
}

/// Reduces `inbuf` into `inoutbuf` locally (`MPI_Reduce_local`).
pub fn reduce_local_into<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
    inbuf: &S,
    inoutbuf: &mut R,
    op: O,
) {
    let s = src_of(inbuf);
    let mut d = dst_of(inoutbuf);
    let k = op.kind();
    let sb = s.bytes();
    let e = elem_of(&s.dt, &k);
    if let Elem::Image(ext) = e {
        // `inout` is an operand: its bytes are read first (`with_bytes` only writes).
        let count = s.count;
        let a = image_of(&s.dt, ext, &sb, count);
        let cur = current(&d);
        let mut b = image_of(&s.dt, ext, &cur[..cur.len().min(s.dt.packed(count))], count);
        combine_images(&user_fn(&k), &s.dt, ext, &a, &mut b);
        let pk = packed_of(&s.dt, &b, count);
        d.unpack_at(0, &pk[..pk.len().min(d.packed_len())]);
        return;
    }
    d.with_bytes(|out| {
        macro_rules! el {
            ($t:ty) => {{
                let a = to_vec::<$t>(&sb);
                let mut b = to_vec::<$t>(out);
                if let Some(c) = apply_local(&k, &s.dt, &a, &mut b, core_op(&k)) {
                    check(rcomm::reduce_local(&a, &mut b, c));
                }
                out.copy_from_slice(bytemuck::cast_slice(&b));
            }};
        }
        match e {
            Elem::I8 => el!(i8),
            Elem::I16 => el!(i16),
            Elem::I32 => el!(i32),
            Elem::I64 => el!(i64),
            Elem::U8 => el!(u8),
            Elem::U16 => el!(u16),
            Elem::U32 => el!(u32),
            Elem::U64 => el!(u64),
            Elem::F32 => el!(f32),
            Elem::F64 => el!(f64),
            Elem::Image(_) => unreachable!("memory images take their own path"),
            Elem::U128 => {
                let a = to_vec::<u128>(&sb);
                let mut b = to_vec::<u128>(out);
                if apply_local(&k, &s.dt, &a, &mut b, None).is_some() {
                    fail(&"built-in operation on 16-byte elements");
                }
                out.copy_from_slice(bytemuck::cast_slice(&b));
            }
        }
    });
}

// ------------------------------------------------------------------ collectives

fn comm_of<C: ?Sized + AsHandle>(c: &C) -> &rcomm::Communicator {
    c.as_handle().coll_comm()
}

fn part_counts(counts: &[Count], size: usize) -> Vec<usize> {
    counts.iter().map(|&c| c.max(0) as usize * size).collect()
}

/// Unpacks rank-ordered packed parts into a partitioned layout.
fn unpack_parts(d: &Dst, counts: &[Count], displs: &[Count], packed: &[u8]) {
    let size = d.dt.size();
    let mut off = 0;
    for (&c, &p) in counts.iter().zip(displs) {
        let n = c.max(0) as usize * size;
        d.unpack_at(p.max(0) as usize, &packed[off..off + n]);
        off += n;
    }
}

/// Packs a partitioned layout's parts, in rank order.
fn pack_parts(s: &Src, counts: &[Count], displs: &[Count]) -> Vec<u8> {
    let mut out = Vec::new();
    for (&c, &p) in counts.iter().zip(displs) {
        out.extend_from_slice(&s.bytes_at(p.max(0) as usize, c.max(0) as usize));
    }
    out
}

/// MPI's rule for the v-collectives' buffers (MPI-3.1 §5.5-§5.8): the counts and
/// displacements say which elements are used, and the buffer must hold them; it may be longer
/// (the rest is neither sent nor written). C cannot check the second half; the facade, which
/// knows the buffer's length, does, so a part outside its buffer is an error, not a read or
/// write past the end. Parts of no elements address nothing and are not checked.
fn check_parts<B: ?Sized + Partitioned>(b: &B, what: &str) {
    let Some(len) = b.buffer_count() else { return };
    for (i, (&c, &d)) in b.counts().iter().zip(b.displs()).enumerate() {
        if c > 0 && (d < 0 || d as i64 + c as i64 > len as i64) {
            fail(&format!(
                "{what}: part {i} (elements {d}..{}) lies outside the buffer of {len} elements",
                d as i64 + c as i64
            ));
        }
    }
}

fn psrc<B: ?Sized + PartitionedBuffer>(b: &B) -> Src {
    check_parts(b, "varcount send buffer");
    Src {
        ptr: b.pointer().cast(),
        count: 0,
        dt: b.as_datatype().dt().clone(),
    }
}

fn pdst<B: ?Sized + PartitionedBufferMut>(b: &mut B) -> Dst {
    check_parts(b, "varcount receive buffer");
    Dst {
        ptr: b.pointer_mut().cast(),
        count: 0,
        dt: b.as_datatype().dt().clone(),
    }
}

/// Collectives over all ranks of a communicator.
pub trait CommunicatorCollectives: Communicator {
    /// Waits until every rank has called (`MPI_Barrier`).
    fn barrier(&self) {
        check(comm_of(self).barrier())
    }

    /// Every rank's `sendbuf`, in rank order, into every rank's `recvbuf` (`MPI_Allgather`).
    fn all_gather_into<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let sb = src_of(sendbuf);
        let sb = sb.bytes();
        let c = comm_of(self);
        dst_of(recvbuf).with_bytes(|r| check(c.allgather(&sb, r)));
    }

    /// As `all_gather_into` with per-rank counts and displacements (`MPI_Allgatherv`).
    fn all_gather_varcount_into<S: ?Sized + Buffer, R: ?Sized + PartitionedBufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let sb = src_of(sendbuf);
        let sb = sb.bytes();
        let (counts, displs) = (recvbuf.counts().to_vec(), recvbuf.displs().to_vec());
        let d = pdst(recvbuf);
        let bc = part_counts(&counts, d.dt.size());
        let mut tmp = vec![0u8; bc.iter().sum()];
        check(comm_of(self).allgatherv(&sb, &mut tmp, &bc));
        unpack_parts(&d, &counts, &displs, &tmp);
    }

    /// Block i of every rank's `sendbuf` to rank i (`MPI_Alltoall`).
    fn all_to_all_into<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let sb = src_of(sendbuf);
        let sb = sb.bytes();
        let c = comm_of(self);
        dst_of(recvbuf).with_bytes(|r| check(c.alltoall(&sb, r)));
    }

    /// As `all_to_all_into` with per-rank counts and displacements (`MPI_Alltoallv`).
    fn all_to_all_varcount_into<S: ?Sized + PartitionedBuffer, R: ?Sized + PartitionedBufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let s = psrc(sendbuf);
        let sp = pack_parts(&s, sendbuf.counts(), sendbuf.displs());
        let sc = part_counts(sendbuf.counts(), s.dt.size());
        let (counts, displs) = (recvbuf.counts().to_vec(), recvbuf.displs().to_vec());
        let d = pdst(recvbuf);
        let rc = part_counts(&counts, d.dt.size());
        let mut tmp = vec![0u8; rc.iter().sum()];
        check(comm_of(self).alltoallv(&sp, &sc, &mut tmp, &rc));
        unpack_parts(&d, &counts, &displs, &tmp);
    }

    /// Reduces every rank's `sendbuf` with `op` into every rank's `recvbuf` (`MPI_Allreduce`).
    fn all_reduce_into<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) {
        reduce_like(comm_of(self), sendbuf, recvbuf, &op, Kind::All)
    }

    /// Reduces, then scatters equal blocks (`MPI_Reduce_scatter_block`).
    fn reduce_scatter_block_into<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) {
        reduce_like(comm_of(self), sendbuf, recvbuf, &op, Kind::ScatterBlock)
    }

    /// Inclusive prefix reduction (`MPI_Scan`).
    fn scan_into<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) {
        reduce_like(comm_of(self), sendbuf, recvbuf, &op, Kind::Scan)
    }

    /// Exclusive prefix reduction (`MPI_Exscan`); rank 0's `recvbuf` is left as it was.
    fn exclusive_scan_into<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) {
        reduce_like(comm_of(self), sendbuf, recvbuf, &op, Kind::Exscan)
    }

    /// Starts a barrier (`MPI_Ibarrier`).
    fn immediate_barrier(&self) -> Request<'static, ()> {
        let req = check(comm_of(self).ibarrier());
        Request::new(Coll::boxed(req, |_| {}), &(), crate::request::StaticScope)
    }

    /// Starts an all-gather.
    fn immediate_all_gather_into<'a, S: ?Sized + Buffer, R: ?Sized + BufferMut, Sc: Scope<'a>>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc> {
        let sb = src_of(sendbuf).bytes().into_owned();
        let d = dst_of(recvbuf);
        let req = check(comm_of(self).iallgather(sb));
        Request::new(
            Coll::boxed(req, move |v: Vec<u8>| d.unpack_at(0, &v)),
            recvbuf,
            scope,
        )
    }

    /// Starts an all-gather with per-rank counts.
    fn immediate_all_gather_varcount_into<
        'a,
        S: ?Sized + Buffer,
        R: ?Sized + PartitionedBufferMut,
        Sc: Scope<'a>,
    >(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc> {
        let sb = src_of(sendbuf).bytes().into_owned();
        let (counts, displs) = (recvbuf.counts().to_vec(), recvbuf.displs().to_vec());
        let d = pdst(recvbuf);
        let bc = part_counts(&counts, d.dt.size());
        let req = check(comm_of(self).iallgatherv(sb, &bc));
        Request::new(
            Coll::boxed(req, move |v: Vec<u8>| {
                unpack_parts(&d, &counts, &displs, &v)
            }),
            recvbuf,
            scope,
        )
    }

    /// Starts an all-to-all.
    fn immediate_all_to_all_into<'a, S: ?Sized + Buffer, R: ?Sized + BufferMut, Sc: Scope<'a>>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc> {
        let sb = src_of(sendbuf).bytes().into_owned();
        let d = dst_of(recvbuf);
        let req = check(comm_of(self).ialltoall(sb));
        Request::new(
            Coll::boxed(req, move |v: Vec<u8>| d.unpack_at(0, &v)),
            recvbuf,
            scope,
        )
    }

    /// Starts an all-to-all with per-rank counts.
    fn immediate_all_to_all_varcount_into<
        'a,
        S: ?Sized + PartitionedBuffer,
        R: ?Sized + PartitionedBufferMut,
        Sc: Scope<'a>,
    >(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc> {
        let s = psrc(sendbuf);
        let sp = pack_parts(&s, sendbuf.counts(), sendbuf.displs());
        let sc = part_counts(sendbuf.counts(), s.dt.size());
        let (counts, displs) = (recvbuf.counts().to_vec(), recvbuf.displs().to_vec());
        let d = pdst(recvbuf);
        let rc = part_counts(&counts, d.dt.size());
        let req = check(comm_of(self).ialltoallv(sp, &sc, &rc));
        Request::new(
            Coll::boxed(req, move |v: Vec<u8>| {
                unpack_parts(&d, &counts, &displs, &v)
            }),
            recvbuf,
            scope,
        )
    }

    /// Starts an all-reduce.
    fn immediate_all_reduce_into<
        'a,
        S: ?Sized + Buffer,
        R: ?Sized + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    >(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc> {
        let p = ireduce_like(comm_of(self), sendbuf, dst_of(recvbuf), &op, Kind::All);
        Request::new(p, recvbuf, scope)
    }

    /// Starts a reduce-scatter of equal blocks.
    fn immediate_reduce_scatter_block_into<
        'a,
        S: ?Sized + Buffer,
        R: ?Sized + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    >(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc> {
        let p = ireduce_like(
            comm_of(self),
            sendbuf,
            dst_of(recvbuf),
            &op,
            Kind::ScatterBlock,
        );
        Request::new(p, recvbuf, scope)
    }

    /// Starts an inclusive scan.
    fn immediate_scan_into<
        'a,
        S: ?Sized + Buffer,
        R: ?Sized + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    >(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc> {
        let p = ireduce_like(comm_of(self), sendbuf, dst_of(recvbuf), &op, Kind::Scan);
        Request::new(p, recvbuf, scope)
    }

    /// Starts an exclusive scan.
    fn immediate_exclusive_scan_into<
        'a,
        S: ?Sized + Buffer,
        R: ?Sized + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    >(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc> {
        let p = ireduce_like(comm_of(self), sendbuf, dst_of(recvbuf), &op, Kind::Exscan);
        Request::new(p, recvbuf, scope)
    }
}

impl<C: ?Sized + Communicator> CommunicatorCollectives for C {}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    All,
    ScatterBlock,
    Scan,
    Exscan,
    Root(u32),
}

fn reduce_like<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
    c: &rcomm::Communicator,
    sendbuf: &S,
    recvbuf: &mut R,
    op: &O,
    kind: Kind,
) {
    let mut d = dst_of(recvbuf);
    reduce_run(c, sendbuf, Some(&mut d), op, kind)
}

fn reduce_run<S: ?Sized + Buffer, O: Operation>(
    c: &rcomm::Communicator,
    sendbuf: &S,
    d: Option<&mut Dst>,
    op: &O,
    kind: Kind,
) {
    let s = src_of(sendbuf);
    let k = op.kind();
    let e = elem_of(&s.dt, &k);
    let sb = s.bytes();
    if let Elem::Image(ext) = e {
        return image_reduce(c, &s, &sb, d, &k, ext, kind);
    }
    typed!(e, &k, &s.dt, |T, rop| {
        let sv = to_vec::<T>(&sb);
        match d {
            Some(d) => d.with_bytes(|out| {
                // As MPI, the result has the send buffer's type and count.
                let mut rv = vec![
                    <T as bytemuck::Zeroable>::zeroed();
                    if kind == Kind::ScatterBlock {
                        sv.len() / c.size() as usize
                    } else {
                        sv.len()
                    }
                ];
                let n = out.len().min(rv.len() * size_of::<T>());
                bytemuck::cast_slice_mut::<T, u8>(&mut rv)[..n].copy_from_slice(&out[..n]);
                match kind {
                    Kind::All => check(c.allreduce(&sv, &mut rv, rop)),
                    Kind::ScatterBlock => check(c.reduce_scatter(&sv, &mut rv, rop)),
                    Kind::Scan => check(c.scan(&sv, &mut rv, rop)),
                    Kind::Exscan => check(c.exscan(&sv, &mut rv, rop)),
                    Kind::Root(root) => check(c.reduce(&sv, Some(&mut rv), rop, root)),
                }
                out[..n].copy_from_slice(&bytemuck::cast_slice::<T, u8>(&rv)[..n]);
            }),
            None => match kind {
                Kind::Root(root) => check(c.reduce(&sv, None, rop, root)),
                _ => unreachable!("only a rooted reduce has no receive buffer"),
            },
        }
    })
}

/// `reduce_run` over memory images of a user datatype's elements.
fn image_reduce(
    c: &rcomm::Communicator,
    s: &Src,
    sb: &[u8],
    d: Option<&mut Dst>,
    k: &OpKind,
    ext: usize,
    kind: Kind,
) {
    let dt = &s.dt;
    let op = image_op(k, dt, ext);
    let send = image_of(dt, ext, sb, s.count);
    match d {
        Some(d) => {
            // As MPI, the result has the send buffer's type and count; it starts as what the
            // receive buffer holds (rank 0's exclusive scan leaves it so).
            let rcount = if kind == Kind::ScatterBlock {
                s.count / c.size() as usize
            } else {
                s.count
            };
            let cur = current(d);
            let mut recv = image_of(dt, ext, &cur[..cur.len().min(dt.packed(rcount))], rcount);
            match kind {
                Kind::All => check(c.allreduce_elems(&send, &mut recv, &op)),
                Kind::ScatterBlock => check(c.reduce_scatter_elems(&send, &mut recv, &op)),
                Kind::Scan => check(c.scan_elems(&send, &mut recv, &op)),
                Kind::Exscan => check(c.exscan_elems(&send, &mut recv, &op)),
                Kind::Root(root) => check(c.reduce_elems(&send, Some(&mut recv), &op, root)),
            }
            let pk = packed_of(dt, &recv, rcount);
            d.unpack_at(0, &pk[..pk.len().min(d.packed_len())]);
        }
        None => match kind {
            Kind::Root(root) => check(c.reduce_elems(&send, None, &op, root)),
            _ => unreachable!("only a rooted reduce has no receive buffer"),
        },
    }
}

fn ireduce_like<'a, S: ?Sized + Buffer, O: Operation>(
    c: &rcomm::Communicator,
    sendbuf: &S,
    d: Dst,
    op: &O,
    kind: Kind,
) -> Pending<'a> {
    ireduce_run(c, sendbuf, Some(d), op, kind)
}

fn ireduce_run<'a, S: ?Sized + Buffer, O: Operation>(
    c: &rcomm::Communicator,
    sendbuf: &S,
    d: Option<Dst>,
    op: &O,
    kind: Kind,
) -> Pending<'a> {
    let s = src_of(sendbuf);
    let k = op.kind();
    let e = elem_of(&s.dt, &k);
    let sb = s.bytes();
    let me = c.rank();
    if let Elem::Image(ext) = e {
        let op = image_op(&k, &s.dt, ext);
        let send = image_of(&s.dt, ext, &sb, s.count);
        let req = check(match kind {
            Kind::All => c.iallreduce_elems(send, &op),
            Kind::ScatterBlock => c.ireduce_scatter_elems(send, &op),
            Kind::Scan => c.iscan_elems(send, &op),
            Kind::Exscan => c.iexscan_elems(send, &op),
            Kind::Root(root) => c.ireduce_elems(send, &op, root),
        });
        let dt = s.dt.clone();
        return Coll::boxed(req, move |v: Vec<u8>| {
            if let Some(d) = d {
                if kind == Kind::Exscan && me == 0 {
                    return; // rank 0's result is undefined in MPI: leave the buffer alone
                }
                let pk = packed_of(&dt, &v, v.len() / ext);
                d.unpack_at(0, &pk[..pk.len().min(d.count * d.dt.size())]);
            }
        });
    }
    typed!(e, &k, &s.dt, |T, rop| {
        let sv = to_vec::<T>(&sb);
        let req = check(match kind {
            Kind::All => c.iallreduce(sv, rop),
            Kind::ScatterBlock => c.ireduce_scatter(sv, rop),
            Kind::Scan => c.iscan(sv, rop),
            Kind::Exscan => c.iexscan(sv, rop),
            Kind::Root(root) => c.ireduce(sv, rop, root),
        });
        Coll::boxed(req, move |v: Vec<T>| {
            if let Some(d) = d {
                if kind == Kind::Exscan && me == 0 {
                    return; // rank 0's result is undefined in MPI: leave the buffer alone
                }
                d.unpack_at(
                    0,
                    bytemuck::cast_slice(&v[..v.len().min(d.count * d.dt.size() / size_of::<T>())]),
                );
            }
        })
    })
}

/// Collectives with a root process.
pub trait Root: AsHandle {
    /// The root's rank.
    fn root_rank(&self) -> Rank;

    /// Starts `maxprocs` copies of `command` (`MPI_Comm_spawn`): collective over the
    /// communicator of the root process; only the root's commands are read. The children run
    /// on the root's node.
    fn spawn(
        &self,
        command: &std::process::Command,
        maxprocs: Rank,
    ) -> Result<crate::topology::InterCommunicator, crate::MpiError> {
        self.spawn_multiple(std::slice::from_ref(command), &[maxprocs])
    }

    /// Starts `maxprocs[i]` copies of each `commands[i]` (`MPI_Comm_spawn_multiple`); each
    /// child's `appnum` is its command's index.
    fn spawn_multiple(
        &self,
        commands: &[std::process::Command],
        maxprocs: &[Rank],
    ) -> Result<crate::topology::InterCommunicator, crate::MpiError> {
        let root = self.root_rank() as u32;
        let comm = self.as_handle().coll_comm();
        let mine = comm.rank() == root;
        let asked: Rank = maxprocs.iter().map(|&n| n.max(0)).sum();
        if mine && (commands.len() != maxprocs.len() || maxprocs.iter().any(|&n| n < 0)) {
            eprintln!(
                "rcomm-mpi: spawn_multiple: {} commands with {} non-negative counts",
                commands.len(),
                maxprocs.len()
            );
            return Err(crate::MpiError::Spawn(asked, asked));
        }
        let cmds: Vec<rcomm::SpawnCommand<'_>> = if mine {
            commands
                .iter()
                .zip(maxprocs)
                .map(|(command, &n)| rcomm::SpawnCommand {
                    command,
                    copies: n as u32,
                })
                .collect()
        } else {
            Vec::new()
        };
        comm.spawn(root, &cmds)
            .map(crate::topology::InterCommunicator::new)
            .map_err(|e| {
                // rcomm starts every child or none; the reason goes where MPI's would.
                eprintln!("rcomm-mpi: spawn: {e}");
                crate::MpiError::Spawn(asked, asked)
            })
    }

    /// Broadcasts the root's `buffer` to every rank (`MPI_Bcast`).
    fn broadcast_into<Buf: ?Sized + BufferMut>(&self, buffer: &mut Buf)
    where
        Self: Sized,
    {
        let c = comm_of(self);
        let root = self.root_rank() as u32;
        let mut d = dst_of(buffer);
        if d.direct().is_some() {
            d.with_bytes(|b| check(c.bcast(b, root)));
        } else {
            let mut tmp = if c.rank() == root {
                Src {
                    ptr: d.ptr,
                    count: d.count,
                    dt: d.dt.clone(),
                }
                .bytes()
                .into_owned()
            } else {
                vec![0u8; d.packed_len()]
            };
            check(c.bcast(&mut tmp, root));
            if c.rank() != root {
                d.unpack_at(0, &tmp);
            }
        }
    }

    /// Sends `sendbuf` to the root's gather (`MPI_Gather` on a non-root rank).
    fn gather_into<S: ?Sized + Buffer>(&self, sendbuf: &S)
    where
        Self: Sized,
    {
        let sb = src_of(sendbuf);
        check(comm_of(self).gather(&sb.bytes(), None, self.root_rank() as u32))
    }

    /// Gathers every rank's `sendbuf` into `recvbuf` on the root.
    fn gather_into_root<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) where
        Self: Sized,
    {
        let sb = src_of(sendbuf);
        let sb = sb.bytes();
        let c = comm_of(self);
        let root = self.root_rank() as u32;
        dst_of(recvbuf).with_bytes(|r| check(c.gather(&sb, Some(r), root)));
    }

    /// Sends `sendbuf` to the root's varcount gather (`MPI_Gatherv` on a non-root rank).
    fn gather_varcount_into<S: ?Sized + Buffer>(&self, sendbuf: &S)
    where
        Self: Sized,
    {
        let c = comm_of(self);
        let sb = src_of(sendbuf);
        let sb = sb.bytes();
        let mut counts = vec![0usize; c.size() as usize];
        counts[c.rank() as usize] = sb.len();
        check(c.gatherv(&sb, None, &counts, self.root_rank() as u32))
    }

    /// Gathers every rank's `sendbuf` into the root's partitioned `recvbuf`.
    fn gather_varcount_into_root<S: ?Sized + Buffer, R: ?Sized + PartitionedBufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) where
        Self: Sized,
    {
        let c = comm_of(self);
        let sb = src_of(sendbuf);
        let sb = sb.bytes();
        let (counts, displs) = (recvbuf.counts().to_vec(), recvbuf.displs().to_vec());
        let d = pdst(recvbuf);
        let bc = part_counts(&counts, d.dt.size());
        let mut tmp = vec![0u8; bc.iter().sum()];
        check(c.gatherv(&sb, Some(&mut tmp), &bc, self.root_rank() as u32));
        unpack_parts(&d, &counts, &displs, &tmp);
    }

    /// Receives this rank's block of the root's scatter (`MPI_Scatter` on a non-root rank).
    fn scatter_into<R: ?Sized + BufferMut>(&self, recvbuf: &mut R)
    where
        Self: Sized,
    {
        let c = comm_of(self);
        let root = self.root_rank() as u32;
        dst_of(recvbuf).with_bytes(|r| check(c.scatter(None, r, root)));
    }

    /// Scatters the root's `sendbuf` in equal blocks, one per rank.
    fn scatter_into_root<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) where
        Self: Sized,
    {
        let c = comm_of(self);
        let root = self.root_rank() as u32;
        let sb = src_of(sendbuf);
        let sb = sb.bytes();
        dst_of(recvbuf).with_bytes(|r| check(c.scatter(Some(&sb), r, root)));
    }

    /// Receives this rank's part of the root's varcount scatter (`MPI_Scatterv`).
    fn scatter_varcount_into<R: ?Sized + BufferMut>(&self, recvbuf: &mut R)
    where
        Self: Sized,
    {
        let c = comm_of(self);
        let root = self.root_rank() as u32;
        let mut d = dst_of(recvbuf);
        let mut counts = vec![0usize; c.size() as usize];
        counts[c.rank() as usize] = d.packed_len();
        d.with_bytes(|r| check(c.scatterv(None, &counts, r, root)));
    }

    /// Scatters the root's partitioned `sendbuf`.
    fn scatter_varcount_into_root<S: ?Sized + PartitionedBuffer, R: ?Sized + BufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) where
        Self: Sized,
    {
        let c = comm_of(self);
        let root = self.root_rank() as u32;
        let s = psrc(sendbuf);
        let sp = pack_parts(&s, sendbuf.counts(), sendbuf.displs());
        let sc = part_counts(sendbuf.counts(), s.dt.size());
        dst_of(recvbuf).with_bytes(|r| check(c.scatterv(Some(&sp), &sc, r, root)));
    }

    /// Contributes `sendbuf` to the root's reduction (`MPI_Reduce` on a non-root rank).
    fn reduce_into<S: ?Sized + Buffer, O: Operation>(&self, sendbuf: &S, op: O)
    where
        Self: Sized,
    {
        reduce_run(
            comm_of(self),
            sendbuf,
            None,
            &op,
            Kind::Root(self.root_rank() as u32),
        )
    }

    /// Reduces every rank's `sendbuf` into the root's `recvbuf`.
    fn reduce_into_root<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) where
        Self: Sized,
    {
        reduce_like(
            comm_of(self),
            sendbuf,
            recvbuf,
            &op,
            Kind::Root(self.root_rank() as u32),
        )
    }

    /// Starts a broadcast.
    fn immediate_broadcast_into<'a, Buf: ?Sized + 'a + BufferMut, Sc: Scope<'a>>(
        &self,
        scope: Sc,
        buf: &'a mut Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Self: Sized,
    {
        let c = comm_of(self);
        let root = self.root_rank() as u32;
        let d = dst_of(buf);
        let data = if c.rank() == root {
            Src {
                ptr: d.ptr,
                count: d.count,
                dt: d.dt.clone(),
            }
            .bytes()
            .into_owned()
        } else {
            vec![0u8; d.packed_len()]
        };
        let me = c.rank();
        let req = check(c.ibcast(data, root));
        Request::new(
            Coll::boxed(req, move |v: Vec<u8>| {
                if me != root {
                    d.unpack_at(0, &v)
                }
            }),
            buf,
            scope,
        )
    }

    /// Starts the non-root part of a gather.
    fn immediate_gather_into<'a, S: ?Sized + 'a + Buffer, Sc: Scope<'a>>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
    ) -> Request<'a, S, Sc>
    where
        Self: Sized,
    {
        let req = check(comm_of(self).igather(
            src_of(sendbuf).bytes().into_owned(),
            self.root_rank() as u32,
        ));
        Request::new(Coll::boxed(req, |_| {}), sendbuf, scope)
    }

    /// Starts the root's part of a gather.
    fn immediate_gather_into_root<
        'a,
        S: ?Sized + 'a + Buffer,
        R: ?Sized + 'a + BufferMut,
        Sc: Scope<'a>,
    >(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Self: Sized,
    {
        let d = dst_of(recvbuf);
        let req = check(comm_of(self).igather(
            src_of(sendbuf).bytes().into_owned(),
            self.root_rank() as u32,
        ));
        Request::new(
            Coll::boxed(req, move |v: Vec<u8>| d.unpack_at(0, &v)),
            recvbuf,
            scope,
        )
    }

    /// Starts the non-root part of a varcount gather.
    fn immediate_gather_varcount_into<'a, Sc: Scope<'a>, S: ?Sized + 'a + Buffer>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
    ) -> Request<'a, S, Sc>
    where
        Self: Sized,
    {
        let c = comm_of(self);
        let sb = src_of(sendbuf).bytes().into_owned();
        let mut counts = vec![0usize; c.size() as usize];
        counts[c.rank() as usize] = sb.len();
        let req = check(c.igatherv(sb, &counts, self.root_rank() as u32));
        Request::new(Coll::boxed(req, |_| {}), sendbuf, scope)
    }

    /// Starts the root's part of a varcount gather.
    fn immediate_gather_varcount_into_root<
        'a,
        Sc: Scope<'a>,
        S: ?Sized + 'a + Buffer,
        R: ?Sized + 'a + PartitionedBufferMut,
    >(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Self: Sized,
    {
        let c = comm_of(self);
        let sb = src_of(sendbuf).bytes().into_owned();
        let (counts, displs) = (recvbuf.counts().to_vec(), recvbuf.displs().to_vec());
        let d = pdst(recvbuf);
        let bc = part_counts(&counts, d.dt.size());
        let req = check(c.igatherv(sb, &bc, self.root_rank() as u32));
        Request::new(
            Coll::boxed(req, move |v: Vec<u8>| {
                unpack_parts(&d, &counts, &displs, &v)
            }),
            recvbuf,
            scope,
        )
    }

    /// Starts the non-root part of a scatter.
    fn immediate_scatter_into<'a, Sc: Scope<'a>, R: ?Sized + 'a + BufferMut>(
        &self,
        scope: Sc,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Self: Sized,
    {
        let d = dst_of(recvbuf);
        let req = check(comm_of(self).iscatter(None, d.packed_len(), self.root_rank() as u32));
        Request::new(
            Coll::boxed(req, move |v: Vec<u8>| d.unpack_at(0, &v)),
            recvbuf,
            scope,
        )
    }

    /// Starts the root's part of a scatter.
    fn immediate_scatter_into_root<
        'a,
        Sc: Scope<'a>,
        S: ?Sized + 'a + Buffer,
        R: ?Sized + 'a + BufferMut,
    >(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Self: Sized,
    {
        let d = dst_of(recvbuf);
        let sb = src_of(sendbuf).bytes().into_owned();
        let req = check(comm_of(self).iscatter(Some(sb), d.packed_len(), self.root_rank() as u32));
        Request::new(
            Coll::boxed(req, move |v: Vec<u8>| d.unpack_at(0, &v)),
            recvbuf,
            scope,
        )
    }

    /// Starts the non-root part of a varcount scatter.
    fn immediate_scatter_varcount_into<'a, Sc: Scope<'a>, R: ?Sized + 'a + BufferMut>(
        &self,
        scope: Sc,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Self: Sized,
    {
        let c = comm_of(self);
        let d = dst_of(recvbuf);
        let mut counts = vec![0usize; c.size() as usize];
        counts[c.rank() as usize] = d.packed_len();
        let req = check(c.iscatterv(None, &counts, self.root_rank() as u32));
        Request::new(
            Coll::boxed(req, move |v: Vec<u8>| d.unpack_at(0, &v)),
            recvbuf,
            scope,
        )
    }

    /// Starts the root's part of a varcount scatter.
    fn immediate_scatter_varcount_into_root<
        'a,
        Sc: Scope<'a>,
        S: ?Sized + 'a + PartitionedBuffer,
        R: ?Sized + 'a + BufferMut,
    >(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        Self: Sized,
    {
        let c = comm_of(self);
        let d = dst_of(recvbuf);
        let s = psrc(sendbuf);
        let sp = pack_parts(&s, sendbuf.counts(), sendbuf.displs());
        let sc = part_counts(sendbuf.counts(), s.dt.size());
        let req = check(c.iscatterv(Some(sp), &sc, self.root_rank() as u32));
        Request::new(
            Coll::boxed(req, move |v: Vec<u8>| d.unpack_at(0, &v)),
            recvbuf,
            scope,
        )
    }

    /// Starts the non-root part of a reduction.
    fn immediate_reduce_into<'a, Sc: Scope<'a>, S: ?Sized + 'a + Buffer, O: 'a + Operation>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        op: O,
    ) -> Request<'a, S, Sc>
    where
        Self: Sized,
    {
        let p = ireduce_run(
            comm_of(self),
            sendbuf,
            None,
            &op,
            Kind::Root(self.root_rank() as u32),
        );
        Request::new(p, sendbuf, scope)
    }

    /// Starts the root's part of a reduction.
    fn immediate_reduce_into_root<
        'a,
        Sc: Scope<'a>,
        S: ?Sized + 'a + Buffer,
        R: ?Sized + 'a + BufferMut,
        O: 'a + Operation,
    >(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        Self: Sized,
    {
        let p = ireduce_run(
            comm_of(self),
            sendbuf,
            Some(dst_of(recvbuf)),
            &op,
            Kind::Root(self.root_rank() as u32),
        );
        Request::new(p, recvbuf, scope)
    }
}

impl Root for Process<'_> {
    fn root_rank(&self) -> Rank {
        self.rank
    }
}

/// Useful traits.
pub mod traits {
    pub use super::{CommunicatorCollectives, Operation, Root};
}
