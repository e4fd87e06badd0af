//! Datatypes: which Rust types travel as which bytes (rsmpi's `mpi::datatype`).
//!
//! Every datatype here is an [`rcomm::datatype::Datatype`] (a type map) plus, for the predefined
//! types, which primitive it is (reductions need that). Contiguous layouts move straight from
//! memory; others are packed into MPI's canonical packed form, moved, and unpacked.

use std::borrow::Borrow;
use std::ffi::c_void;
use std::sync::OnceLock;

use rcomm::datatype::Datatype as CoreType;

use crate::{Address, Count, fail};

/// The primitive kind of a predefined datatype.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prim {
    /// `i8`
    I8,
    /// `i16`
    I16,
    /// `i32`
    I32,
    /// `i64`
    I64,
    /// `u8`
    U8,
    /// `u16`
    U16,
    /// `u32`
    U32,
    /// `u64`
    U64,
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// `bool` (one byte, 0 or 1)
    Bool,
    /// `char` (four bytes)
    Char,
}

/// A datatype as rcomm sees it: the type map and, for predefined types, the primitive.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct Dt {
    pub(crate) core: CoreType,
    pub(crate) prim: Option<Prim>,
}

impl Dt {
    fn prim(p: Prim, size: usize) -> Dt {
        Dt {
            core: CoreType::bytes(size),
            prim: Some(p),
        }
    }

    /// Bytes of `count` elements in packed form.
    pub(crate) fn packed(&self, count: usize) -> usize {
        self.core.packed_size(count)
    }

    /// Size in bytes of one element's data.
    pub(crate) fn size(&self) -> usize {
        self.core.size()
    }
}

fn core_or_abort(r: rcomm::Result<CoreType>) -> CoreType {
    r.unwrap_or_else(|e| fail(&e))
}

fn sys(p: Prim) -> &'static Dt {
    static TABLE: OnceLock<Vec<Dt>> = OnceLock::new();
    let t = TABLE.get_or_init(|| {
        vec![
            Dt::prim(Prim::I8, 1),
            Dt::prim(Prim::I16, 2),
            Dt::prim(Prim::I32, 4),
            Dt::prim(Prim::I64, 8),
            Dt::prim(Prim::U8, 1),
            Dt::prim(Prim::U16, 2),
            Dt::prim(Prim::U32, 4),
            Dt::prim(Prim::U64, 8),
            Dt::prim(Prim::F32, 4),
            Dt::prim(Prim::F64, 8),
            Dt::prim(Prim::Bool, 1),
            Dt::prim(Prim::Char, 4),
        ]
    });
    &t[p as usize]
}

/// A borrowed datatype (rsmpi's `DatatypeRef`); predefined types are `DatatypeRef<'static>`.
#[derive(Debug, Clone, Copy)]
pub struct DatatypeRef<'a> {
    dt: &'a Dt,
}

impl<'a> DatatypeRef<'a> {
    pub(crate) fn from_dt(dt: &'a Dt) -> Self {
        DatatypeRef { dt }
    }

    /// The datatype this refers to, for the facade's internals.
    #[doc(hidden)]
    pub fn inner(&self) -> &'a Dt {
        self.dt
    }
}

/// A predefined datatype.
pub type SystemDatatype = DatatypeRef<'static>;
/// rsmpi distinguishes datatypes not yet committed; rcomm's are ready when built.
pub type UncommittedDatatypeRef<'a> = DatatypeRef<'a>;
/// rsmpi distinguishes datatypes not yet committed; rcomm's are ready when built.
pub type UncommittedUserDatatype = UserDatatype;

/// A datatype built by the program (MPI's derived datatypes).
#[derive(Debug, Clone)]
pub struct UserDatatype {
    dt: Dt,
}

fn counts(xs: &[Count]) -> Vec<usize> {
    xs.iter()
        .map(|&c| usize::try_from(c).unwrap_or_else(|_| fail(&format!("negative count {c}"))))
        .collect()
}

fn ucount(c: Count) -> usize {
    usize::try_from(c).unwrap_or_else(|_| fail(&format!("negative count {c}")))
}

impl UserDatatype {
    fn from_core(core: CoreType) -> UserDatatype {
        UserDatatype {
            dt: Dt { core, prim: None },
        }
    }

    /// `count` copies of `oldtype` side by side (`MPI_Type_contiguous`).
    pub fn contiguous<D: UncommittedDatatype>(count: Count, oldtype: &D) -> UserDatatype {
        Self::from_core(core_or_abort(CoreType::contiguous(
            ucount(count),
            &oldtype.dt().core,
        )))
    }

    /// `count` blocks of `blocklength` elements, `stride` elements apart (`MPI_Type_vector`).
    pub fn vector<D: UncommittedDatatype>(
        count: Count,
        blocklength: Count,
        stride: Count,
        oldtype: &D,
    ) -> UserDatatype {
        Self::from_core(core_or_abort(CoreType::vector(
            ucount(count),
            ucount(blocklength),
            stride as isize,
            &oldtype.dt().core,
        )))
    }

    /// As [`vector`](Self::vector) with the stride in bytes (`MPI_Type_create_hvector`).
    pub fn heterogeneous_vector<D: UncommittedDatatype>(
        count: Count,
        blocklength: Count,
        stride: Address,
        oldtype: &D,
    ) -> UserDatatype {
        Self::from_core(core_or_abort(CoreType::hvector(
            ucount(count),
            ucount(blocklength),
            stride,
            &oldtype.dt().core,
        )))
    }

    /// Blocks of different lengths at displacements in elements (`MPI_Type_indexed`).
    pub fn indexed<D: UncommittedDatatype>(
        blocklengths: &[Count],
        displacements: &[Count],
        oldtype: &D,
    ) -> UserDatatype {
        let d: Vec<isize> = displacements.iter().map(|&x| x as isize).collect();
        Self::from_core(core_or_abort(CoreType::indexed(
            &counts(blocklengths),
            &d,
            &oldtype.dt().core,
        )))
    }

    /// Blocks at displacements in bytes (`MPI_Type_create_hindexed`).
    pub fn heterogeneous_indexed<D: UncommittedDatatype>(
        blocklengths: &[Count],
        displacements: &[Address],
        oldtype: &D,
    ) -> UserDatatype {
        let d: Vec<isize> = displacements.to_vec();
        Self::from_core(core_or_abort(CoreType::hindexed(
            &counts(blocklengths),
            &d,
            &oldtype.dt().core,
        )))
    }

    /// Equal blocks at displacements in elements (`MPI_Type_create_indexed_block`).
    pub fn indexed_block<D: UncommittedDatatype>(
        blocklength: Count,
        displacements: &[Count],
        oldtype: &D,
    ) -> UserDatatype {
        let d: Vec<isize> = displacements.iter().map(|&x| x as isize).collect();
        Self::from_core(core_or_abort(CoreType::indexed_block(
            ucount(blocklength),
            &d,
            &oldtype.dt().core,
        )))
    }

    /// Equal blocks at displacements in bytes (`MPI_Type_create_hindexed_block`).
    pub fn heterogeneous_indexed_block<D: UncommittedDatatype>(
        blocklength: Count,
        displacements: &[Address],
        oldtype: &D,
    ) -> UserDatatype {
        let bl = vec![ucount(blocklength); displacements.len()];
        let d: Vec<isize> = displacements.to_vec();
        Self::from_core(core_or_abort(CoreType::hindexed(
            &bl,
            &d,
            &oldtype.dt().core,
        )))
    }

    /// Blocks of different types at byte displacements (`MPI_Type_create_struct`).
    pub fn structured<D: UncommittedDatatype>(
        blocklengths: &[Count],
        displacements: &[Address],
        types: &[D],
    ) -> UserDatatype {
        let d: Vec<isize> = displacements.to_vec();
        let t: Vec<CoreType> = types.iter().map(|t| t.dt().core.clone()).collect();
        Self::from_core(core_or_abort(CoreType::structured(
            &counts(blocklengths),
            &d,
            &t,
        )))
    }

    /// A copy with a new lower bound and extent (`MPI_Type_create_resized`).
    pub fn resized(&self, lb: Address, extent: Address) -> UserDatatype {
        Self::from_core(core_or_abort(self.dt.core.resized(lb, extent)))
    }

    /// A borrowed reference to this datatype.
    pub fn as_ref(&self) -> DatatypeRef<'_> {
        DatatypeRef { dt: &self.dt }
    }

    /// rsmpi commits uncommitted datatypes; rcomm's are ready when built, so this is identity.
    pub fn commit(self) -> UserDatatype {
        self
    }
}

impl<'a> From<&'a UserDatatype> for DatatypeRef<'a> {
    fn from(d: &'a UserDatatype) -> Self {
        d.as_ref()
    }
}

/// A datatype that may be used to build others (rsmpi's `UncommittedDatatype`).
pub trait UncommittedDatatype {
    /// The facade's view of the datatype.
    #[doc(hidden)]
    fn dt(&self) -> &Dt;

    /// A copy of this datatype (`MPI_Type_dup`).
    fn dup(&self) -> UserDatatype {
        UserDatatype {
            dt: Dt {
                core: self.dt().core.dup(),
                prim: self.dt().prim,
            },
        }
    }
}

/// A datatype that describes data in buffers (rsmpi's `Datatype`).
pub trait Datatype: UncommittedDatatype {}

impl UncommittedDatatype for DatatypeRef<'_> {
    fn dt(&self) -> &Dt {
        self.dt
    }
}
impl Datatype for DatatypeRef<'_> {}
impl UncommittedDatatype for UserDatatype {
    fn dt(&self) -> &Dt {
        &self.dt
    }
}
impl Datatype for UserDatatype {}
impl<D: UncommittedDatatype> UncommittedDatatype for &D {
    fn dt(&self) -> &Dt {
        (**self).dt()
    }
}
impl<D: Datatype> Datatype for &D {}

/// Rust types that have an equivalent datatype.
///
/// # Safety
/// The datatype must describe exactly bytes of `Self` that are initialised, and any bytes
/// written by a receive must form a valid `Self`.
pub unsafe trait Equivalence {
    /// The datatype's type.
    type Out: Datatype;
    /// The datatype equivalent to `Self`.
    fn equivalent_datatype() -> Self::Out;
}

macro_rules! system_equiv {
    ($($t:ty => $p:ident),* $(,)?) => {$(
        unsafe impl Equivalence for $t {
            type Out = SystemDatatype;
            fn equivalent_datatype() -> SystemDatatype {
                DatatypeRef { dt: sys(Prim::$p) }
            }
        }
    )*};
}

system_equiv!(
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    f32 => F32, f64 => F64, bool => Bool, char => Char,
);
#[cfg(target_pointer_width = "64")]
system_equiv!(isize => I64, usize => U64);
#[cfg(target_pointer_width = "32")]
system_equiv!(isize => I32, usize => U32);

/// `Equivalence` for `num_complex`'s `Complex32` and `Complex64` (feature `complex`), where
/// rsmpi has it.
#[cfg(feature = "complex")]
pub mod complex_datatype {
    use super::*;
    use num_complex::{Complex32, Complex64};

    fn cplx(n: usize) -> &'static Dt {
        static C32: OnceLock<Dt> = OnceLock::new();
        static C64: OnceLock<Dt> = OnceLock::new();
        let cell = if n == 8 { &C32 } else { &C64 };
        cell.get_or_init(|| Dt {
            core: CoreType::bytes(n),
            prim: None,
        })
    }

    unsafe impl Equivalence for Complex32 {
        type Out = SystemDatatype;
        fn equivalent_datatype() -> SystemDatatype {
            DatatypeRef { dt: cplx(8) }
        }
    }
    unsafe impl Equivalence for Complex64 {
        type Out = SystemDatatype;
        fn equivalent_datatype() -> SystemDatatype {
            DatatypeRef { dt: cplx(16) }
        }
    }
}

/// Something with a datatype.
///
/// # Safety
/// The datatype must describe the memory the value points to.
pub unsafe trait AsDatatype {
    /// The datatype's type.
    type Out: Datatype;
    /// The datatype of the elements.
    fn as_datatype(&self) -> Self::Out;
}

/// Something with a number of elements.
///
/// # Safety
/// The count must not exceed the memory the value covers.
pub unsafe trait Collection {
    /// How many elements.
    fn count(&self) -> Count;
}

/// Something with an address to read from.
///
/// # Safety
/// The pointer must be valid for the elements the value describes.
pub unsafe trait Pointer {
    /// The start address.
    fn pointer(&self) -> *const c_void;
}

/// Something with an address to write to.
///
/// # Safety
/// The pointer must be valid for writes of the elements the value describes.
pub unsafe trait PointerMut {
    /// The start address.
    fn pointer_mut(&mut self) -> *mut c_void;
}

macro_rules! buffer_impls {
    ($($(#[$m:meta])* [$($g:tt)*] $ty:ty, $n:expr;)*) => {$(
        unsafe impl<$($g)*> AsDatatype for $ty {
            type Out = <T as Equivalence>::Out;
            fn as_datatype(&self) -> Self::Out {
                T::equivalent_datatype()
            }
        }
        unsafe impl<$($g)*> Collection for $ty {
            fn count(&self) -> Count {
                let f: fn(&Self) -> usize = $n;
                f(self) as Count
            }
        }
        unsafe impl<$($g)*> Pointer for $ty {
            fn pointer(&self) -> *const c_void {
                (self as *const Self).cast()
            }
        }
        unsafe impl<$($g)*> PointerMut for $ty {
            fn pointer_mut(&mut self) -> *mut c_void {
                (self as *mut Self).cast()
            }
        }
        unsafe impl<$($g)*> Buffer for $ty {}
        unsafe impl<$($g)*> BufferMut for $ty {}
    )*};
}

buffer_impls! {
    [T: Equivalence] T, |_| 1;
    [T: Equivalence] [T], |s| s.len();
    [T: Equivalence, const D: usize] [T; D], |_| D;
}

// A Vec's elements live behind its pointer, not at its own address.
unsafe impl<T: Equivalence> AsDatatype for Vec<T> {
    type Out = <T as Equivalence>::Out;
    fn as_datatype(&self) -> Self::Out {
        T::equivalent_datatype()
    }
}
unsafe impl<T: Equivalence> Collection for Vec<T> {
    fn count(&self) -> Count {
        self.len() as Count
    }
}
unsafe impl<T: Equivalence> Pointer for Vec<T> {
    fn pointer(&self) -> *const c_void {
        self.as_ptr().cast()
    }
}
unsafe impl<T: Equivalence> PointerMut for Vec<T> {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.as_mut_ptr().cast()
    }
}
unsafe impl<T: Equivalence> Buffer for Vec<T> {}
unsafe impl<T: Equivalence> BufferMut for Vec<T> {}

/// A buffer to read from: address, count and datatype.
///
/// # Safety
/// The three must describe readable memory.
pub unsafe trait Buffer: Pointer + Collection + AsDatatype {}

/// A buffer to write to: address, count and datatype.
///
/// # Safety
/// The three must describe writable memory.
pub unsafe trait BufferMut: PointerMut + Collection + AsDatatype {}

/// A buffer whose element type is known only at run time (the arguments of user operations).
#[derive(Debug, Clone, Copy)]
pub struct DynBuffer<'a> {
    ptr: *const c_void,
    len: Count,
    datatype: DatatypeRef<'a>,
}

unsafe impl Send for DynBuffer<'_> {}
unsafe impl Sync for DynBuffer<'_> {}

fn same_type(a: &Dt, b: &Dt) -> bool {
    match (a.prim, b.prim) {
        (Some(x), Some(y)) => x == y,
        (None, None) => a.core.size() == b.core.size() && a.core.extent() == b.core.extent(),
        _ => false,
    }
}

impl<'a> DynBuffer<'a> {
    /// A dynamic view of a slice.
    pub fn new<T: Equivalence<Out = SystemDatatype>>(buf: &'a [T]) -> Self {
        DynBuffer {
            ptr: buf.as_ptr().cast(),
            len: buf.len() as Count,
            datatype: T::equivalent_datatype(),
        }
    }

    /// A dynamic buffer from its parts.
    ///
    /// # Safety
    /// `ptr` must point to `len` elements of `datatype`, valid for `'a`.
    pub unsafe fn from_raw<T>(ptr: *const T, len: Count, datatype: DatatypeRef<'a>) -> Self {
        DynBuffer {
            ptr: ptr.cast(),
            len,
            datatype,
        }
    }

    /// The elements as `[T]` if `T`'s datatype is this buffer's.
    pub fn downcast<T: Equivalence>(self) -> Option<&'a [T]> {
        if same_type(T::equivalent_datatype().dt(), self.datatype.dt) {
            Some(unsafe { std::slice::from_raw_parts(self.ptr.cast(), self.len as usize) })
        } else {
            None
        }
    }

    /// Whether the elements are of type `T`.
    pub fn is<T: Equivalence>(&self) -> bool {
        same_type(T::equivalent_datatype().dt(), self.datatype.dt)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start address.
    pub fn as_ptr(&self) -> *const c_void {
        self.ptr
    }

    /// The datatype.
    pub fn as_datatype(&self) -> DatatypeRef<'a> {
        self.datatype
    }
}

unsafe impl Collection for DynBuffer<'_> {
    fn count(&self) -> Count {
        self.len
    }
}
unsafe impl Pointer for DynBuffer<'_> {
    fn pointer(&self) -> *const c_void {
        self.ptr
    }
}
unsafe impl<'a> AsDatatype for DynBuffer<'a> {
    type Out = DatatypeRef<'a>;
    fn as_datatype(&self) -> Self::Out {
        self.datatype
    }
}
unsafe impl Buffer for DynBuffer<'_> {}

/// A mutable buffer whose element type is known only at run time.
#[derive(Debug)]
pub struct DynBufferMut<'a> {
    ptr: *mut c_void,
    len: Count,
    datatype: DatatypeRef<'a>,
}

unsafe impl Send for DynBufferMut<'_> {}
unsafe impl Sync for DynBufferMut<'_> {}

impl<'a> DynBufferMut<'a> {
    /// The buffer's address.
    pub fn as_ptr(&self) -> *const c_void {
        self.ptr
    }

    /// A dynamic view of a mutable slice.
    pub fn new<T: Equivalence<Out = SystemDatatype>>(buf: &'a mut [T]) -> Self {
        DynBufferMut {
            ptr: buf.as_mut_ptr().cast(),
            len: buf.len() as Count,
            datatype: T::equivalent_datatype(),
        }
    }

    /// A dynamic buffer from its parts.
    ///
    /// # Safety
    /// `ptr` must point to `len` writable elements of `datatype`, valid for `'a`.
    pub unsafe fn from_raw<T>(ptr: *mut T, len: Count, datatype: DatatypeRef<'a>) -> Self {
        DynBufferMut {
            ptr: ptr.cast(),
            len,
            datatype,
        }
    }

    /// The elements as `[T]` if `T`'s datatype is this buffer's.
    pub fn downcast<T: Equivalence>(self) -> Option<&'a mut [T]> {
        if same_type(T::equivalent_datatype().dt(), self.datatype.dt) {
            Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.len as usize) })
        } else {
            None
        }
    }

    /// Whether the elements are of type `T`.
    pub fn is<T: Equivalence>(&self) -> bool {
        same_type(T::equivalent_datatype().dt(), self.datatype.dt)
    }

    /// A read-only buffer of the same elements.
    pub fn downgrade(self) -> DynBuffer<'a> {
        DynBuffer {
            ptr: self.ptr,
            len: self.len,
            datatype: self.datatype,
        }
    }

    /// A shorter-lived copy of this buffer.
    pub fn reborrow_mut(&mut self) -> DynBufferMut<'_> {
        DynBufferMut {
            ptr: self.ptr,
            len: self.len,
            datatype: self.datatype,
        }
    }

    /// A read-only view.
    pub fn reborrow(&self) -> DynBuffer<'_> {
        DynBuffer {
            ptr: self.ptr,
            len: self.len,
            datatype: self.datatype,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start address.
    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        self.ptr
    }

    /// The datatype.
    pub fn as_datatype(&self) -> DatatypeRef<'a> {
        self.datatype
    }
}

unsafe impl Collection for DynBufferMut<'_> {
    fn count(&self) -> Count {
        self.len
    }
}
unsafe impl Pointer for DynBufferMut<'_> {
    fn pointer(&self) -> *const c_void {
        self.ptr
    }
}
unsafe impl PointerMut for DynBufferMut<'_> {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.ptr
    }
}
unsafe impl<'a> AsDatatype for DynBufferMut<'a> {
    type Out = DatatypeRef<'a>;
    fn as_datatype(&self) -> Self::Out {
        self.datatype
    }
}
unsafe impl Buffer for DynBufferMut<'_> {}
unsafe impl BufferMut for DynBufferMut<'_> {}

/// A buffer seen through an explicit count and datatype.
pub struct View<'d, 'b, D, B: ?Sized>
where
    D: 'd + Datatype,
    B: 'b + Pointer,
{
    datatype: &'d D,
    count: Count,
    buffer: &'b B,
}

impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + Pointer> View<'d, 'b, D, B> {
    /// `count` elements of `datatype` starting at `buffer`'s address.
    ///
    /// # Safety
    /// The layout must lie inside `buffer`.
    pub unsafe fn with_count_and_datatype(buffer: &'b B, count: Count, datatype: &'d D) -> Self {
        View {
            datatype,
            count,
            buffer,
        }
    }
}

unsafe impl<'d, D: 'd + Datatype, B: ?Sized + Pointer> AsDatatype for View<'d, '_, D, B> {
    type Out = &'d D;
    fn as_datatype(&self) -> Self::Out {
        self.datatype
    }
}
unsafe impl<D: Datatype, B: ?Sized + Pointer> Collection for View<'_, '_, D, B> {
    fn count(&self) -> Count {
        self.count
    }
}
unsafe impl<D: Datatype, B: ?Sized + Pointer> Pointer for View<'_, '_, D, B> {
    fn pointer(&self) -> *const c_void {
        self.buffer.pointer()
    }
}
unsafe impl<D: Datatype, B: ?Sized + Pointer> Buffer for View<'_, '_, D, B> {}

/// A mutable buffer seen through an explicit count and datatype.
pub struct MutView<'d, 'b, D, B: ?Sized>
where
    D: 'd + Datatype,
    B: 'b + PointerMut,
{
    datatype: &'d D,
    count: Count,
    buffer: &'b mut B,
}

impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + PointerMut> MutView<'d, 'b, D, B> {
    /// `count` elements of `datatype` starting at `buffer`'s address.
    ///
    /// # Safety
    /// The layout must lie inside `buffer`.
    pub unsafe fn with_count_and_datatype(
        buffer: &'b mut B,
        count: Count,
        datatype: &'d D,
    ) -> Self {
        MutView {
            datatype,
            count,
            buffer,
        }
    }
}

unsafe impl<'d, D: 'd + Datatype, B: ?Sized + PointerMut> AsDatatype for MutView<'d, '_, D, B> {
    type Out = &'d D;
    fn as_datatype(&self) -> Self::Out {
        self.datatype
    }
}
unsafe impl<D: Datatype, B: ?Sized + PointerMut> Collection for MutView<'_, '_, D, B> {
    fn count(&self) -> Count {
        self.count
    }
}
unsafe impl<D: Datatype, B: ?Sized + PointerMut> PointerMut for MutView<'_, '_, D, B> {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.buffer.pointer_mut()
    }
}
unsafe impl<D: Datatype, B: ?Sized + PointerMut> BufferMut for MutView<'_, '_, D, B> {}

/// Counts and displacements (in elements) of the parts of a buffer, one per rank.
pub trait Partitioned {
    /// Elements per rank.
    fn counts(&self) -> &[Count];
    /// Where each rank's part starts, in elements.
    fn displs(&self) -> &[Count];
    /// How many elements the buffer underneath holds, where the facade knows it (the parts
    /// must lie inside it).
    #[doc(hidden)]
    fn buffer_count(&self) -> Option<Count> {
        None
    }
}

/// A partitioned buffer to read from.
pub trait PartitionedBuffer: Partitioned + Pointer + AsDatatype {}
/// A partitioned buffer to write to.
pub trait PartitionedBufferMut: Partitioned + PointerMut + AsDatatype {}

/// A buffer divided into parts for the `_varcount` collectives.
pub struct Partition<'b, B: 'b + ?Sized, C, D> {
    buf: &'b B,
    counts: C,
    displs: D,
}

impl<'b, B: ?Sized + Buffer, C: Borrow<[Count]>, D: Borrow<[Count]>> Partition<'b, B, C, D> {
    /// Parts of `buf` of `counts` elements at `displs`.
    pub fn new(buf: &'b B, counts: C, displs: D) -> Self {
        let n = counts.borrow().len();
        if displs.borrow().len() != n {
            fail(&format!(
                "a partition has {n} counts but {} displacements",
                displs.borrow().len()
            ));
        }
        Partition {
            buf,
            counts,
            displs,
        }
    }
}

unsafe impl<B: ?Sized + Buffer, C, D> AsDatatype for Partition<'_, B, C, D> {
    type Out = <B as AsDatatype>::Out;
    fn as_datatype(&self) -> Self::Out {
        self.buf.as_datatype()
    }
}
unsafe impl<B: ?Sized + Buffer, C, D> Pointer for Partition<'_, B, C, D> {
    fn pointer(&self) -> *const c_void {
        self.buf.pointer()
    }
}
impl<B: ?Sized + Collection, C: Borrow<[Count]>, D: Borrow<[Count]>> Partitioned
    for Partition<'_, B, C, D>
{
    fn counts(&self) -> &[Count] {
        self.counts.borrow()
    }
    fn displs(&self) -> &[Count] {
        self.displs.borrow()
    }
    fn buffer_count(&self) -> Option<Count> {
        Some(self.buf.count())
    }
}
impl<B: ?Sized + Buffer, C: Borrow<[Count]>, D: Borrow<[Count]>> PartitionedBuffer
    for Partition<'_, B, C, D>
{
}

/// A mutable buffer divided into parts for the `_varcount` collectives.
pub struct PartitionMut<'b, B: 'b + ?Sized, C, D> {
    buf: &'b mut B,
    counts: C,
    displs: D,
}

impl<'b, B: ?Sized + BufferMut, C: Borrow<[Count]>, D: Borrow<[Count]>> PartitionMut<'b, B, C, D> {
    /// Parts of `buf` of `counts` elements at `displs`.
    pub fn new(buf: &'b mut B, counts: C, displs: D) -> Self {
        let n = counts.borrow().len();
        if displs.borrow().len() != n {
            fail(&format!(
                "a partition has {n} counts but {} displacements",
                displs.borrow().len()
            ));
        }
        PartitionMut {
            buf,
            counts,
            displs,
        }
    }
}

unsafe impl<B: ?Sized + BufferMut, C, D> AsDatatype for PartitionMut<'_, B, C, D> {
    type Out = <B as AsDatatype>::Out;
    fn as_datatype(&self) -> Self::Out {
        self.buf.as_datatype()
    }
}
unsafe impl<B: ?Sized + BufferMut, C, D> PointerMut for PartitionMut<'_, B, C, D> {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.buf.pointer_mut()
    }
}
impl<B: ?Sized + Collection, C: Borrow<[Count]>, D: Borrow<[Count]>> Partitioned
    for PartitionMut<'_, B, C, D>
{
    fn counts(&self) -> &[Count] {
        self.counts.borrow()
    }
    fn displs(&self) -> &[Count] {
        self.displs.borrow()
    }
    fn buffer_count(&self) -> Option<Count> {
        Some(self.buf.count())
    }
}
impl<B: ?Sized + BufferMut, C: Borrow<[Count]>, D: Borrow<[Count]>> PartitionedBufferMut
    for PartitionMut<'_, B, C, D>
{
}

/// The address of `x` (`MPI_Get_address`).
pub fn address_of<T>(x: &T) -> Address {
    x as *const T as Address
}

// ------------------------------------------------------------------ moving bytes (internal)

/// A readable layout: base address, element count, datatype.
pub(crate) struct Src {
    pub(crate) ptr: *const u8,
    pub(crate) count: usize,
    pub(crate) dt: Dt,
}

/// A writable layout.
pub(crate) struct Dst {
    pub(crate) ptr: *mut u8,
    pub(crate) count: usize,
    pub(crate) dt: Dt,
}

unsafe impl Send for Dst {}

pub(crate) fn src_of<B: ?Sized + Buffer>(b: &B) -> Src {
    Src {
        ptr: b.pointer().cast(),
        count: ucount(b.count()),
        dt: b.as_datatype().dt().clone(),
    }
}

pub(crate) fn dst_of<B: ?Sized + BufferMut>(b: &mut B) -> Dst {
    Dst {
        ptr: b.pointer_mut().cast(),
        count: ucount(b.count()),
        dt: b.as_datatype().dt().clone(),
    }
}

impl Src {
    /// Packed bytes of the layout (borrowed straight from memory when contiguous).
    pub(crate) fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        self.bytes_at(0, self.count)
    }

    /// Packed bytes of `count` elements starting `first` elements in.
    pub(crate) fn bytes_at(&self, first: usize, count: usize) -> std::borrow::Cow<'_, [u8]> {
        let core = &self.dt.core;
        let base = self.ptr.wrapping_offset(first as isize * core.extent());
        if core.is_contiguous() {
            let start = base.wrapping_offset(core.lb());
            let n = core.size() * count;
            if n == 0 {
                return std::borrow::Cow::Borrowed(&[]);
            }
            std::borrow::Cow::Borrowed(unsafe { std::slice::from_raw_parts(start, n) })
        } else {
            let mut out = vec![0u8; core.packed_size(count)];
            unsafe { core.pack_raw(base, count, &mut out) }.unwrap_or_else(|e| fail(&e));
            std::borrow::Cow::Owned(out)
        }
    }
}

impl Dst {
    /// Bytes the layout holds in packed form.
    pub(crate) fn packed_len(&self) -> usize {
        self.dt.packed(self.count)
    }

    /// The layout's memory as one slice when it is contiguous.
    pub(crate) fn direct(&mut self) -> Option<&mut [u8]> {
        let core = &self.dt.core;
        if core.is_contiguous() {
            let n = core.size() * self.count;
            if n == 0 {
                return Some(&mut []);
            }
            Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.wrapping_offset(core.lb()), n) })
        } else {
            None
        }
    }

    /// Unpacks `packed` (whole elements) into the layout, `first` elements in.
    pub(crate) fn unpack_at(&self, first: usize, packed: &[u8]) {
        let core = &self.dt.core;
        let size = core.size().max(1);
        let count = packed.len() / size;
        if count == 0 {
            return;
        }
        let base = self.ptr.wrapping_offset(first as isize * core.extent());
        if core.is_contiguous() {
            unsafe {
                std::ptr::copy_nonoverlapping(
                    packed.as_ptr(),
                    base.wrapping_offset(core.lb()),
                    count * core.size(),
                );
            }
        } else {
            unsafe { core.unpack_raw(&packed[..count * core.size()], base, count) }
                .unwrap_or_else(|e| fail(&e));
        }
    }

    /// Runs `f` on a packed byte buffer for the layout, then stores what it wrote.
    pub(crate) fn with_bytes<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        if let Some(s) = self.direct() {
            return f(s);
        }
        let mut tmp = vec![0u8; self.packed_len()];
        let r = f(&mut tmp);
        self.unpack_at(0, &tmp);
        r
    }
}

/// Builds the datatype of a struct from `(byte offset, datatype)` fields, with the struct's
/// size as extent. Used by `#[derive(Equivalence)]`.
#[doc(hidden)]
pub fn structure_of(fields: &[(usize, &Dt)], size: usize) -> UserDatatype {
    let bl = vec![1usize; fields.len()];
    let d: Vec<isize> = fields.iter().map(|f| f.0 as isize).collect();
    let t: Vec<CoreType> = fields.iter().map(|f| f.1.core.clone()).collect();
    let s = core_or_abort(CoreType::structured(&bl, &d, &t));
    UserDatatype::from_core(core_or_abort(s.resized(0, size as isize)))
}

/// `n` copies of a datatype back to back (a Rust array field). Used by the derive.
#[doc(hidden)]
pub fn array_of(elem: &Dt, n: usize) -> UserDatatype {
    if n == 0 {
        return UserDatatype::from_core(CoreType::bytes(0));
    }
    UserDatatype::from_core(core_or_abort(CoreType::contiguous(n, &elem.core)))
}

/// What `#[derive(Equivalence)]` calls: builds the datatype once, after `initialize` and
/// before the universe is dropped, as rsmpi does (it panics otherwise, and when a thread other
/// than the one that initialised builds it without `Threading::Multiple`).
#[doc(hidden)]
pub fn cached_derived(
    cell: &'static OnceLock<UserDatatype>,
    build: impl FnOnce() -> UserDatatype,
) -> DatatypeRef<'static> {
    if let Some(d) = cell.get() {
        if crate::job::is_finalized() {
            panic!("rcomm-mpi: a derived datatype was used after the universe was dropped");
        }
        return d.as_ref();
    }
    crate::job::check_may_build_datatype();
    cell.get_or_init(build).as_ref()
}

#[doc(hidden)]
pub fn dt_of<D: UncommittedDatatype>(d: &D) -> &Dt {
    d.dt()
}

/// Useful traits.
pub mod traits {
    pub use super::{
        AsDatatype, Buffer, BufferMut, Collection, Datatype, Equivalence, Partitioned,
        PartitionedBuffer, PartitionedBufferMut, Pointer, PointerMut, UncommittedDatatype,
    };
}

impl PartialEq for UserDatatype {
    fn eq(&self, o: &Self) -> bool {
        same_type(&self.dt, &o.dt)
    }
}
