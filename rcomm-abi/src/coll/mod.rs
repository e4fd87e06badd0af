//! Collectives of the C binding over rcomm's.
//!
//! Every call packs its buffers (any committed datatype, derived ones included) into bytes,
//! starts rcomm's non-blocking collective on them, and on completion unpacks the result into
//! the caller's buffer. The blocking call is the non-blocking one waited for at once: one
//! path, so the two cannot drift apart, and rcomm's non-blocking schedules are its blocking
//! ones (without the shared-memory windows).
//!
//! Reductions move the contributions with rcomm's gather / allgather / all-to-all and fold
//! them here in rank order with the op's C-level step (`ops::combine`): an MPI op may be a C
//! callback on any datatype with holes, or MINLOC on pairs, which rcomm's typed reductions do
//! not take. Rank order makes non-commutative ops right and every rank's result identical.
//!
//! The v/w-variants force rcomm's linear gather/scatter and pairwise all-to-all: those need
//! only this rank's counts, which is all an MPI rank knows.

pub mod moves;
pub mod neighbor;
pub mod reduce;

use crate::comm::{self, CommObj};
use crate::consts::*;
use crate::errors::{Res, err};
pub(crate) use crate::layout::{Wide, check_addr};
use crate::ops;
use crate::ptr;
use crate::request::{self, Pending};
use crate::typeobj::{self, TypeObj};
use rcomm::CollRequest;
use std::ffi::c_void;
use std::sync::Arc;

/// A caller's buffer: address, count, datatype.
#[derive(Clone)]
pub(crate) struct Buf {
    addr: usize,
    count: usize,
    ty: Arc<TypeObj>,
}

impl Buf {
    /// Checks count, datatype and address. Every rank checks its own arguments before
    /// anything starts, so a bad argument all ranks pass is an error on all of them rather
    /// than a rank left waiting for one that gave up.
    fn new(p: *const c_void, count: i64, dt: MPI_Datatype) -> Res<Buf> {
        let count = ptr::count(count)?;
        let ty = typeobj::get_committed(dt)?;
        if ty.dt.packed_size(count) > 0 {
            check_addr(p as usize, count, &ty, "buffer")?;
        }
        Ok(Buf {
            addr: p as usize,
            count,
            ty,
        })
    }

    /// Packed bytes of the whole buffer.
    fn bytes(&self) -> usize {
        self.ty.dt.packed_size(self.count)
    }

    /// Bytes one element packs to.
    fn elem(&self) -> usize {
        self.ty.size()
    }

    fn pack(&self, what: &str) -> Res<Vec<u8>> {
        ops::pack_at(self.addr as *const c_void, self.count, &self.ty, what)
    }

    fn unpack(&self, data: &[u8], what: &str) -> Res {
        ops::unpack_at(self.addr as *mut c_void, self.count, &self.ty, data, what)
    }

    /// `count` elements starting `displ` extents in.
    fn at(&self, displ: isize, count: usize) -> Buf {
        self.at_bytes(displ.wrapping_mul(self.ty.dt.extent()), count)
    }

    /// `count` elements starting `bytes` bytes in.
    fn at_bytes(&self, bytes: isize, count: usize) -> Buf {
        Buf {
            addr: self.addr.wrapping_add_signed(bytes),
            count,
            ty: self.ty.clone(),
        }
    }
}

/// Whether a buffer argument is `MPI_IN_PLACE`.
fn in_place(p: *const c_void) -> bool {
    p as usize == IN_PLACE
}

/// The live communicator `h` names, intra only.
fn intra(h: MPI_Comm) -> Res<comm::CommRef> {
    comm::get_intra(h, "this collective")
}

/// `root` as a rank of `c`.
fn root_of(c: &CommObj, root: c_int) -> Res<u32> {
    u32::try_from(root)
        .ok()
        .filter(|&r| r < c.comm.size())
        .ok_or_else(|| {
            err(
                MPI_ERR_ROOT,
                format!(
                    "root {root} is not a rank of a {}-rank communicator",
                    c.comm.size()
                ),
            )
        })
}

/// An array of `n` counts or displacements as `i64`s.
fn ints<T: Wide>(p: *const T, n: usize, what: &str) -> Res<Vec<i64>> {
    Ok(ptr::slice(p, n, what)?.iter().map(|&v| v.wide()).collect())
}

/// Counts, each checked non-negative.
fn counts<T: Wide>(p: *const T, n: usize, what: &str) -> Res<Vec<usize>> {
    ints(p, n, what)?
        .into_iter()
        .map(|c| {
            usize::try_from(c)
                .map_err(|_| err(MPI_ERR_COUNT, format!("{what}: count {c} is negative")))
        })
        .collect()
}

/// Displacements as `isize`.
fn displs<T: Wide>(p: *const T, n: usize, what: &str) -> Res<Vec<isize>> {
    Ok(ints(p, n, what)?.into_iter().map(|d| d as isize).collect())
}

/// What to do with the bytes a collective hands back.
type Finish = Box<dyn FnOnce(Vec<u8>) -> Res + Send>;

/// rcomm's request of a started byte collective (a collective's or a neighbour exchange's).
pub(crate) trait ByteReq: Send {
    /// Whether it completed (progressing it).
    fn done(&mut self) -> Res<bool>;
    /// Waits and hands back the bytes.
    fn finish(self: Box<Self>) -> Res<Vec<u8>>;
}

impl ByteReq for CollRequest<u8> {
    fn done(&mut self) -> Res<bool> {
        Ok(self.test()?)
    }
    fn finish(self: Box<Self>) -> Res<Vec<u8>> {
        Ok(self.wait()?)
    }
}

impl ByteReq for rcomm::neighbor::NeighborRequest<u8> {
    fn done(&mut self) -> Res<bool> {
        Ok(self.test())
    }
    fn finish(self: Box<Self>) -> Res<Vec<u8>> {
        Ok(self.wait()?)
    }
}

/// A started collective: rcomm's request and the step that lands its result.
pub(crate) struct Coll {
    req: Option<Box<dyn ByteReq>>,
    finish: Option<Finish>,
}

impl Coll {
    pub(crate) fn new(
        req: impl ByteReq + 'static,
        finish: impl FnOnce(Vec<u8>) -> Res + Send + 'static,
    ) -> Self {
        Coll {
            req: Some(Box::new(req)),
            finish: Some(Box::new(finish)),
        }
    }

    fn land(&mut self, data: Vec<u8>) -> Res<MPI_Status> {
        if let Some(f) = self.finish.take() {
            f(data)?;
        }
        Ok(request::empty_status())
    }
}

impl Pending for Coll {
    fn test(&mut self) -> Res<Option<MPI_Status>> {
        let Some(r) = self.req.as_mut() else {
            return Ok(Some(request::empty_status()));
        };
        if !r.done()? {
            return Ok(None);
        }
        let data = self.req.take().expect("present").finish()?;
        self.land(data).map(Some)
    }

    fn wait(&mut self) -> Res<MPI_Status> {
        match self.req.take() {
            Some(r) => {
                let data = r.finish()?;
                self.land(data)
            }
            None => Ok(request::empty_status()),
        }
    }
}

/// Runs a started collective to completion (the blocking calls).
pub(crate) fn block(c: Res<Coll>) -> Res {
    c?.wait().map(|_| ())
}

/// Starts a collective as `*request` (checked before anything starts, so a bad pointer
/// leaves no collective half-started).
pub(crate) fn nonblocking(
    request: *mut MPI_Request,
    comm: MPI_Comm,
    start: impl FnOnce() -> Res<Coll>,
) -> Res {
    if request.is_null() {
        return Err(err(MPI_ERR_ARG, "request is a null pointer"));
    }
    let h = request::insert(Box::new(start()?), comm)?;
    ptr::write(request, h, "request")
}

/// A persistent collective's arguments, kept for each `MPI_Start`: the buffers and arrays
/// they point to are the program's, which the standard forbids it to free or change until
/// the request is freed, so reading them at each start is reading what init was given.
#[derive(Clone, Copy)]
struct Bound<T>(T);

// SAFETY: `Bound` carries the caller's pointers to the thread that calls `MPI_Start`, as
// the program does when it starts the request there.
unsafe impl<T> Send for Bound<T> {}
// SAFETY: as above; the values are only copied out.
unsafe impl<T> Sync for Bound<T> {}

impl<T: Copy> Bound<T> {
    /// The values (a method, so a closure captures the whole `Bound`, not its field).
    fn get(&self) -> T {
        self.0
    }
}

/// Makes `*request` a persistent collective (`MPI_*_init`) that starts `start(args)`, the
/// non-blocking collective, at each `MPI_Start`. The communicator and info are checked now.
pub(crate) fn persistent<T: Copy + 'static>(
    request: *mut MPI_Request,
    comm: MPI_Comm,
    info: MPI_Info,
    args: T,
    start: fn(T) -> Res<Coll>,
) -> Res {
    persistent_kept(request, comm, info, args, start, Vec::new())
}

/// Arrays a persistent collective copied at its init ([`keep`]), held as long as the request.
pub(crate) type Held = Vec<Box<dyn std::any::Any + Send + Sync>>;

/// The array of `n` values at `p`, copied into `hold`; a pointer to the copy (null stays
/// null). A persistent collective reads its counts, displacements and types when it is made,
/// as MPICH does: a program may reuse those arrays once the init call returned (mpi4py
/// frees them), while its data buffers are read and written at each start.
pub(crate) fn keep<C: Copy + Send + Sync + 'static>(
    p: *const C,
    n: usize,
    what: &str,
    hold: &mut Held,
) -> Res<*const C> {
    if p.is_null() || n == 0 {
        return Ok(p);
    }
    let v: Vec<C> = ptr::slice(p, n, what)?.to_vec();
    let q = v.as_ptr();
    hold.push(Box::new(v));
    Ok(q)
}

/// The size of communicator `h` (the length of its per-rank arrays).
pub(crate) fn size_of_comm(h: MPI_Comm) -> Res<usize> {
    Ok(intra(h)?.comm.size() as usize)
}

/// Whether this rank is `root` of `h` (root-only arrays are copied only there).
pub(crate) fn is_root(h: MPI_Comm, root: c_int) -> Res<bool> {
    Ok(intra(h)?.comm.rank() as c_int == root)
}

/// [`persistent`], holding `hold` (the arrays [`keep`] copied) for the request's life.
pub(crate) fn persistent_kept<T: Copy + 'static>(
    request: *mut MPI_Request,
    comm: MPI_Comm,
    info: MPI_Info,
    args: T,
    start: fn(T) -> Res<Coll>,
    hold: Held,
) -> Res {
    if request.is_null() {
        return Err(err(MPI_ERR_ARG, "request is a null pointer"));
    }
    intra(comm)?;
    crate::info::pairs(info)?;
    let args = Bound(args);
    let starter: request::Starter = Box::new(move || {
        // Named so the closure owns `hold`: the pointers in `args` point into it.
        let _held = &hold;
        Ok(Box::new(start(args.get())?) as Box<dyn Pending>)
    });
    let h = request::insert_persistent(starter, comm)?;
    ptr::write(request, h, "request")
}
