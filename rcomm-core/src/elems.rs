//! `bool` and `char` elements (`MPI_C_BOOL`, `MPI_WCHAR`-like) in point-to-point, non-blocking
//! calls and collectives. They are not `bytemuck::Pod` (not every bit pattern is a valid `bool`
//! or `char`), so the generic calls do not take them: these send a `bool` as one byte (0 or 1)
//! and a `char` as its 4-byte scalar value, and check on receipt that every element is valid
//! (an error, and the destination left as it was, never an invalid value). `usize`/`isize` are
//! `Pod` and go through the generic calls.

use crate::coll::{CollRequest, Op};
use crate::comm::{Communicator, Request, Tag};
use crate::p2p::engine::Status;
use crate::p2p::matcher::Source;
use crate::{CommError, Result};
use bytemuck::Pod;

mod sealed {
    pub trait Sealed {}
    impl Sealed for bool {}
    impl Sealed for char {}
}

/// An element type with invalid bit patterns (`bool`, `char`), moved as a `Pod` wire form and
/// checked element by element on receipt.
pub trait CheckedElem: Copy + Send + Sync + 'static + sealed::Sealed {
    /// What goes on the wire: `u8` for `bool`, `u32` for `char`.
    type Wire: Pod + Send + Default;
    /// The type's name in errors.
    const NAME: &'static str;
    /// The wire form.
    fn to_wire(self) -> Self::Wire;
    /// The element a wire value stands for; `None` when it stands for none.
    fn from_wire(w: Self::Wire) -> Option<Self>;
    /// How a wire value is shown in an error.
    fn show(w: Self::Wire) -> String;
}

impl CheckedElem for bool {
    type Wire = u8;
    const NAME: &'static str = "bool";
    fn to_wire(self) -> u8 {
        u8::from(self)
    }
    fn from_wire(w: u8) -> Option<bool> {
        match w {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
    fn show(w: u8) -> String {
        format!("the byte {w}")
    }
}

impl CheckedElem for char {
    type Wire = u32;
    const NAME: &'static str = "char";
    fn to_wire(self) -> u32 {
        u32::from(self)
    }
    fn from_wire(w: u32) -> Option<char> {
        char::from_u32(w)
    }
    fn show(w: u32) -> String {
        format!("{w:#x}")
    }
}

/// The logical reductions of `bool`s (`MPI_LAND`, `MPI_LOR`, `MPI_LXOR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logical {
    /// True when every contribution is.
    And,
    /// True when any contribution is.
    Or,
    /// True when an odd number of contributions are.
    Xor,
}

impl Logical {
    /// The bitwise op on 0/1 bytes that computes it (and keeps every result 0 or 1).
    fn op(self) -> Op {
        match self {
            Logical::And => Op::BAnd,
            Logical::Or => Op::BOr,
            Logical::Xor => Op::BXor,
        }
    }
}

fn encode<T: CheckedElem>(buf: &[T]) -> Vec<T::Wire> {
    buf.iter().map(|&x| x.to_wire()).collect()
}

/// The elements `wire` stands for; an invalid one is an error naming it.
fn decode_vec<T: CheckedElem>(wire: &[T::Wire], op: &str) -> Result<Vec<T>> {
    wire.iter()
        .enumerate()
        .map(|(i, &w)| {
            T::from_wire(w).ok_or_else(|| {
                CommError::InvalidArg(format!(
                    "{op}: element {i} is {}, not a {}",
                    T::show(w),
                    T::NAME
                ))
            })
        })
        .collect()
}

/// Decodes `wire` into the first elements of `out`, all or nothing: an invalid element is an
/// error, and `out` is left as it was.
fn decode<T: CheckedElem>(wire: &[T::Wire], out: &mut [T], op: &str) -> Result<()> {
    let vals = decode_vec(wire, op)?;
    out[..vals.len()].copy_from_slice(&vals);
    Ok(())
}

/// Runs a collective `f` into a wire buffer the size of `recv`, then decodes it into `recv`.
fn receive_checked<T: CheckedElem>(
    recv: &mut [T],
    op: &str,
    f: impl FnOnce(&mut [T::Wire]) -> Result<()>,
) -> Result<()> {
    let mut wire = vec![T::Wire::default(); recv.len()];
    f(&mut wire)?;
    decode(&wire, recv, op)
}

/// A receive of `bool`s or `char`s in flight ([`Communicator::irecv_checked`]).
#[must_use = "a receive request does nothing useful unless waited for"]
pub struct CheckedRecv<T: CheckedElem> {
    req: Request<T::Wire>,
}

impl<T: CheckedElem> CheckedRecv<T> {
    /// Waits for the message; the elements received (as many as it held) and the status. An
    /// invalid element, or a length that is not whole elements (`CommError::Size`), is an
    /// error.
    pub fn wait(self) -> Result<(Vec<T>, Status)> {
        let (wire, st) = self.req.wait()?;
        let n = st.bytes / size_of::<T::Wire>();
        Ok((decode_vec(&wire[..n], "irecv_checked")?, st))
    }

    /// Whether the message has arrived (then [`wait`](Self::wait) returns at once).
    pub fn test(&mut self) -> bool {
        self.req.test()
    }
}

impl<T: CheckedElem> crate::reqset::Pending for CheckedRecv<T> {
    fn poll(&mut self) -> bool {
        self.test()
    }
}

/// A non-blocking collective on `bool`s or `char`s in flight ([`Communicator::ibcast_checked`]
/// and the other `i*_checked` / `i*_bools` calls).
#[must_use = "a collective request does nothing useful unless waited for"]
pub struct CheckedCollRequest<T: CheckedElem> {
    req: CollRequest<T::Wire>,
    op: &'static str,
}

impl<T: CheckedElem> CheckedCollRequest<T> {
    /// Waits for completion; the result as the starting call describes it, every element
    /// checked (an invalid one is an error naming it).
    pub fn wait(self) -> Result<Vec<T>> {
        decode_vec(&self.req.wait()?, self.op)
    }

    /// Whether the collective has completed (advancing it as far as possible without waiting).
    pub fn test(&mut self) -> Result<bool> {
        self.req.test()
    }
}

impl<T: CheckedElem> crate::reqset::Pending for CheckedCollRequest<T> {
    fn poll(&mut self) -> bool {
        self.req.poll()
    }
}

fn started<T: CheckedElem>(
    req: Result<CollRequest<T::Wire>>,
    op: &'static str,
) -> Result<CheckedCollRequest<T>> {
    Ok(CheckedCollRequest { req: req?, op })
}

impl Communicator {
    /// Sends `bool`s, one byte each ([`send`](Self::send)).
    pub fn send_bools(&self, buf: &[bool], dest: u32, tag: Tag) -> Result<()> {
        self.send_checked(buf, dest, tag)
    }

    /// Receives `bool`s sent by [`send_bools`](Self::send_bools) into the first elements of
    /// `buf` ([`recv`](Self::recv)); `status.count::<bool>()` says how many. A byte other than
    /// 0 or 1 is an error (and `buf` is left as it was).
    pub fn recv_bools(&self, buf: &mut [bool], src: impl Into<Source>, tag: Tag) -> Result<Status> {
        self.recv_checked(buf, src, tag)
    }

    /// Sends `char`s as their 4-byte scalar values ([`send`](Self::send)).
    pub fn send_chars(&self, buf: &[char], dest: u32, tag: Tag) -> Result<()> {
        self.send_checked(buf, dest, tag)
    }

    /// Receives `char`s sent by [`send_chars`](Self::send_chars) into the first elements of
    /// `buf`; `status.count::<char>()` says how many. A value that is not a Unicode scalar
    /// value, or a length that is not whole chars, is an error (and `buf` is left as it was).
    pub fn recv_chars(&self, buf: &mut [char], src: impl Into<Source>, tag: Tag) -> Result<Status> {
        self.recv_checked(buf, src, tag)
    }

    /// Sends `bool`s or `char`s ([`send_bools`](Self::send_bools),
    /// [`send_chars`](Self::send_chars)).
    pub fn send_checked<T: CheckedElem>(&self, buf: &[T], dest: u32, tag: Tag) -> Result<()> {
        self.send(&encode(buf), dest, tag)
    }

    /// Receives `bool`s or `char`s into the first elements of `buf`
    /// ([`recv_bools`](Self::recv_bools), [`recv_chars`](Self::recv_chars)).
    pub fn recv_checked<T: CheckedElem>(
        &self,
        buf: &mut [T],
        src: impl Into<Source>,
        tag: Tag,
    ) -> Result<Status> {
        let mut wire = vec![T::Wire::default(); buf.len()];
        // A message of part of an element is `CommError::Size` (checked by `recv`).
        let st = self.recv(&mut wire, src, tag)?;
        let what = if T::NAME == "bool" {
            "recv_bools"
        } else {
            "recv_chars"
        };
        decode(&wire[..st.bytes / size_of::<T::Wire>()], buf, what)?;
        Ok(st)
    }

    /// Starts sending `bool`s or `char`s: they are encoded now, so `buf` may be reused at once.
    pub fn isend_checked<T: CheckedElem>(
        &self,
        buf: &[T],
        dest: u32,
        tag: Tag,
    ) -> Result<Request<T::Wire>> {
        self.isend(encode(buf), dest, tag)
    }

    /// Starts receiving up to `len` `bool`s or `char`s; [`CheckedRecv::wait`] checks them.
    pub fn irecv_checked<T: CheckedElem>(
        &self,
        len: usize,
        src: impl Into<Source>,
        tag: Tag,
    ) -> Result<CheckedRecv<T>> {
        Ok(CheckedRecv {
            req: self.irecv(vec![T::Wire::default(); len], src, tag)?,
        })
    }

    /// Broadcasts `buf` from `root` ([`bcast`](Self::bcast)); every rank passes the same length.
    pub fn bcast_checked<T: CheckedElem>(&self, buf: &mut [T], root: u32) -> Result<()> {
        let mut wire = encode(buf);
        self.bcast(&mut wire, root)?;
        decode(&wire, buf, "bcast_checked")
    }

    /// Gathers every rank's `send` into `recv` on every rank ([`allgather`](Self::allgather)).
    pub fn allgather_checked<T: CheckedElem>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        receive_checked(recv, "allgather_checked", |w| {
            self.allgather(&encode(send), w)
        })
    }

    /// Gathers every rank's `send` into `recv` at `root` ([`gather`](Self::gather)).
    pub fn gather_checked<T: CheckedElem>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        root: u32,
    ) -> Result<()> {
        let send = encode(send);
        match recv {
            Some(recv) => receive_checked(recv, "gather_checked", |w| {
                self.gather(&send, Some(w), root)
            }),
            None => self.gather(&send, None, root),
        }
    }

    /// Scatters `send` from `root` in equal parts into every rank's `recv`
    /// ([`scatter`](Self::scatter)).
    pub fn scatter_checked<T: CheckedElem>(
        &self,
        send: Option<&[T]>,
        recv: &mut [T],
        root: u32,
    ) -> Result<()> {
        let send = send.map(encode);
        receive_checked(recv, "scatter_checked", |w| {
            self.scatter(send.as_deref(), w, root)
        })
    }

    /// Every rank sends its `i`-th part of `send` to rank `i` ([`alltoall`](Self::alltoall)).
    pub fn alltoall_checked<T: CheckedElem>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        receive_checked(recv, "alltoall_checked", |w| {
            self.alltoall(&encode(send), w)
        })
    }

    /// [`allgather_checked`](Self::allgather_checked) with `counts[i]` elements from rank `i`
    /// ([`allgatherv`](Self::allgatherv)).
    pub fn allgatherv_checked<T: CheckedElem>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<()> {
        receive_checked(recv, "allgatherv_checked", |w| {
            self.allgatherv(&encode(send), w, counts)
        })
    }

    /// [`gather_checked`](Self::gather_checked) with `counts[i]` elements from rank `i`
    /// ([`gatherv`](Self::gatherv)).
    pub fn gatherv_checked<T: CheckedElem>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        counts: &[usize],
        root: u32,
    ) -> Result<()> {
        let send = encode(send);
        match recv {
            Some(recv) => receive_checked(recv, "gatherv_checked", |w| {
                self.gatherv(&send, Some(w), counts, root)
            }),
            None => self.gatherv(&send, None, counts, root),
        }
    }

    /// [`scatter_checked`](Self::scatter_checked) of `counts[i]` elements to rank `i`
    /// ([`scatterv`](Self::scatterv)).
    pub fn scatterv_checked<T: CheckedElem>(
        &self,
        send: Option<&[T]>,
        counts: &[usize],
        recv: &mut [T],
        root: u32,
    ) -> Result<()> {
        let send = send.map(encode);
        receive_checked(recv, "scatterv_checked", |w| {
            self.scatterv(send.as_deref(), counts, w, root)
        })
    }

    /// [`alltoall_checked`](Self::alltoall_checked) with counts per rank
    /// ([`alltoallv`](Self::alltoallv)).
    pub fn alltoallv_checked<T: CheckedElem>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<()> {
        receive_checked(recv, "alltoallv_checked", |w| {
            self.alltoallv(&encode(send), send_counts, w, recv_counts)
        })
    }

    /// Starts [`bcast_checked`](Self::bcast_checked); `wait` hands back the broadcast values.
    pub fn ibcast_checked<T: CheckedElem>(
        &self,
        buf: Vec<T>,
        root: u32,
    ) -> Result<CheckedCollRequest<T>> {
        started(self.ibcast(encode(&buf), root), "ibcast_checked")
    }

    /// Starts [`allgather_checked`](Self::allgather_checked); `wait` hands back every rank's
    /// elements in rank order.
    pub fn iallgather_checked<T: CheckedElem>(
        &self,
        send: Vec<T>,
    ) -> Result<CheckedCollRequest<T>> {
        started(self.iallgather(encode(&send)), "iallgather_checked")
    }

    /// Starts [`gather_checked`](Self::gather_checked); `wait` hands back every rank's
    /// elements at `root` (as [`igather`](Self::igather) does elsewhere).
    pub fn igather_checked<T: CheckedElem>(
        &self,
        send: Vec<T>,
        root: u32,
    ) -> Result<CheckedCollRequest<T>> {
        started(self.igather(encode(&send), root), "igather_checked")
    }

    /// Starts [`scatter_checked`](Self::scatter_checked) of `count` elements per rank; `wait`
    /// hands back this rank's part.
    pub fn iscatter_checked<T: CheckedElem>(
        &self,
        send: Option<Vec<T>>,
        count: usize,
        root: u32,
    ) -> Result<CheckedCollRequest<T>> {
        let send = send.map(|v| encode(&v));
        started(self.iscatter(send, count, root), "iscatter_checked")
    }

    /// Starts [`alltoall_checked`](Self::alltoall_checked); `wait` hands back what every rank
    /// sent this one, in rank order.
    pub fn ialltoall_checked<T: CheckedElem>(&self, send: Vec<T>) -> Result<CheckedCollRequest<T>> {
        started(self.ialltoall(encode(&send)), "ialltoall_checked")
    }

    /// Starts [`allreduce_bools`](Self::allreduce_bools); `wait` hands back the result.
    pub fn iallreduce_bools(
        &self,
        buf: Vec<bool>,
        op: Logical,
    ) -> Result<CheckedCollRequest<bool>> {
        started(self.iallreduce(encode(&buf), op.op()), "iallreduce_bools")
    }

    /// Starts [`reduce_bools`](Self::reduce_bools); `wait` hands back the result at `root`
    /// (as [`ireduce`](Self::ireduce) does elsewhere).
    pub fn ireduce_bools(
        &self,
        send: Vec<bool>,
        op: Logical,
        root: u32,
    ) -> Result<CheckedCollRequest<bool>> {
        started(self.ireduce(encode(&send), op.op(), root), "ireduce_bools")
    }

    /// Inclusive prefix reduction of `bool`s with a logical op ([`scan`](Self::scan)).
    pub fn scan_bools(&self, send: &[bool], recv: &mut [bool], op: Logical) -> Result<()> {
        let mut wire = encode(recv);
        self.scan(&encode(send), &mut wire, op.op())?;
        decode(&wire, recv, "scan_bools")
    }

    /// Exclusive prefix reduction of `bool`s with a logical op ([`exscan`](Self::exscan)); on
    /// rank 0 `recv` is left as it was.
    pub fn exscan_bools(&self, send: &[bool], recv: &mut [bool], op: Logical) -> Result<()> {
        let mut wire = encode(recv);
        self.exscan(&encode(send), &mut wire, op.op())?;
        decode(&wire, recv, "exscan_bools")
    }

    /// Reduces `bool`s elementwise over all ranks with a logical op, in place, on every rank
    /// (`MPI_Allreduce` with `MPI_C_BOOL` and `MPI_LAND`/`LOR`/`LXOR`).
    pub fn allreduce_bools(&self, buf: &mut [bool], op: Logical) -> Result<()> {
        let mut wire = encode(buf);
        self.allreduce_in_place(&mut wire, op.op())?;
        decode(&wire, buf, "allreduce_bools")
    }

    /// [`allreduce_bools`](Self::allreduce_bools) with the result at `root` only.
    pub fn reduce_bools(
        &self,
        send: &[bool],
        recv: Option<&mut [bool]>,
        op: Logical,
        root: u32,
    ) -> Result<()> {
        let send = encode(send);
        match recv {
            Some(recv) => receive_checked(recv, "reduce_bools", |w| {
                self.reduce(&send, Some(w), op.op(), root)
            }),
            None => self.reduce(&send, None, op.op(), root),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Tag;

    #[test]
    fn bools_and_chars_go_to_oneself_and_invalid_ones_are_refused() {
        let w = crate::init().unwrap();
        let me = w.rank();
        w.send_bools(&[true, false, true], me, Tag(1)).unwrap();
        let mut b = [false; 4];
        let st = w.recv_bools(&mut b, me, Tag(1)).unwrap();
        assert_eq!((b, st.count::<bool>()), ([true, false, true, false], 3));
        w.send(&[0u8, 2], me, Tag(2)).unwrap();
        let mut b = [true; 2];
        assert!(w.recv_bools(&mut b, me, Tag(2)).is_err());
        assert_eq!(b, [true; 2], "left as it was");
        let s = ['a', 'é', '\u{1F600}', '\0'];
        w.send_chars(&s, me, Tag(3)).unwrap();
        let mut c = ['x'; 5];
        let st = w.recv_chars(&mut c, me, Tag(3)).unwrap();
        assert_eq!((&c[..4], c[4], st.count::<char>()), (&s[..], 'x', 4));
        w.send(&[0xD800u32], me, Tag(4)).unwrap();
        assert!(w.recv_chars(&mut c, me, Tag(4)).is_err(), "a surrogate");
        w.send(&[0u8; 3], me, Tag(5)).unwrap();
        let e = w.recv_chars(&mut c, me, Tag(5)).unwrap_err();
        assert!(
            matches!(e, crate::CommError::Size { bytes: 3, elem: 4 }),
            "{e}"
        );
        // Non-blocking, and the error names the element.
        let s = w.isend_checked(&['x', 'y'], me, Tag(6)).unwrap();
        let r = w.irecv_checked::<char>(3, me, Tag(6)).unwrap();
        s.wait().unwrap();
        let (got, st) = r.wait().unwrap();
        assert_eq!((got, st.bytes), (vec!['x', 'y'], 8));
        w.send(&[1u8, 0, 9], me, Tag(7)).unwrap();
        let e = w
            .irecv_checked::<bool>(3, me, Tag(7))
            .unwrap()
            .wait()
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("element 2 is the byte 9, not a bool"),
            "{e}"
        );
    }
}
