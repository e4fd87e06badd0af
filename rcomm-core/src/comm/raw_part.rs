//! Requests on memory the caller lends by address: MPI's own contract for non-blocking calls
//! (the buffer stays valid and untouched until the request completes), for bindings such as
//! the C ABI where the program, not a Rust borrow, keeps the memory alive. The owned
//! [`Request`](super::Request) would cost such a binding an allocation and a copy per message.

use super::{Communicator, localize};
use crate::p2p::engine::{ReqId, Status};
use crate::p2p::matcher::Source;
use crate::p2p::region::Region;
use crate::{Result, Tag};
use std::sync::Arc;

/// How a raw send completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawSendMode {
    /// `MPI_Isend` (and `MPI_Irsend`: rcomm sends a ready send as a standard one).
    Standard,
    /// `MPI_Issend`: complete only once a receive matched it.
    Sync,
}

/// A send or receive on lent memory. Dropped while pending it finishes in the background
/// (`MPI_Request_free`): the memory must then stay valid until the program knows by other
/// means that it completed.
#[derive(Debug)]
#[must_use = "a request does nothing useful unless waited for"]
pub struct RawRequest {
    shared: Arc<super::Shared>,
    group: Option<Arc<super::topo_part::Members>>,
    req: Option<ReqId>,
    recv: bool,
    done: Option<Status>,
    cancelled: bool,
}

impl Communicator {
    /// Starts sending `len` bytes at `ptr`.
    ///
    /// # Safety
    /// The memory is valid for reads of `len` bytes and is not written until the request
    /// completes (waited or tested done), is cancelled, or, after it was dropped, until the
    /// program knows otherwise that it completed.
    pub unsafe fn isend_raw(
        &self,
        ptr: *const u8,
        len: usize,
        dest: u32,
        tag: Tag,
        mode: RawSendMode,
    ) -> Result<RawRequest> {
        let wdest = self.world_rank(dest)?;
        // SAFETY: the caller's contract is the region's invariant; a send only reads it.
        let region = unsafe { Region::from_raw(ptr.cast_mut(), len) };
        let mut e = self.shared.lock();
        let (req, done) = match mode {
            RawSendMode::Standard => match e.send(self.ctx, wdest, tag.0, region, "isend", true)? {
                Some(r) => (Some(r), None),
                None => (None, Some(self.sent_status(tag, len))),
            },
            RawSendMode::Sync => (
                Some(e.issend(self.ctx, wdest, tag.0, region, "issend")?),
                None,
            ),
        };
        drop(e);
        Ok(self.raw(req, false, done))
    }

    /// Starts receiving at most `len` bytes into `ptr`.
    ///
    /// # Safety
    /// The memory is valid for writes of `len` bytes and not otherwise accessed until the
    /// request completes, is cancelled, or, after it was dropped, until the program knows
    /// otherwise that it completed.
    pub unsafe fn irecv_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        src: impl Into<Source>,
        tag: Tag,
    ) -> Result<RawRequest> {
        let src = self.source(src.into())?;
        let mut e = self.shared.lock();
        let now = super::recv_now_into(&mut e, self.ctx, src, tag, len, &mut |p| {
            if !p.is_empty() {
                // SAFETY: the caller's contract; `p` is at most `len` bytes (the room given).
                unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), ptr, p.len()) }
            }
        });
        let (req, done) = match now {
            Some(st) => (None, Some(self.local(st))),
            None => {
                // SAFETY: the caller's contract is the region's invariant.
                let region = unsafe { Region::from_raw(ptr, len) };
                (
                    Some(e.irecv(self.ctx, src, tag.sel(), region, "irecv")?),
                    None,
                )
            }
        };
        drop(e);
        Ok(self.raw(req, true, done))
    }

    fn raw(&self, req: Option<ReqId>, recv: bool, done: Option<Status>) -> RawRequest {
        RawRequest {
            shared: self.shared.clone(),
            group: self.topo.members().clone(),
            req,
            recv,
            done,
            cancelled: false,
        }
    }
}

impl RawRequest {
    /// Waits for completion; the status (a receive's `bytes` is what arrived).
    pub fn wait(mut self) -> Result<Status> {
        if let Some(st) = self.done.take() {
            return Ok(st);
        }
        let req = self.req.take().expect("request pending");
        Ok(localize(&self.group, self.shared.wait(req)?))
    }

    /// Whether it has completed (progressing once).
    pub fn test(&mut self) -> bool {
        if self.done.is_some() {
            return true;
        }
        self.req.is_some_and(|r| self.shared.test_req(r))
    }

    /// Tries to cancel, as [`Request::try_cancel`](super::Request::try_cancel): true when
    /// cancelled (then `wait` returns an empty status at once).
    pub fn try_cancel(&mut self) -> Result<bool> {
        if self.cancelled {
            return Ok(true);
        }
        let Some(req) = self.req else {
            return Ok(false);
        };
        if !super::cancel_req(&self.shared, req, self.recv)? {
            return Ok(false);
        }
        self.req = None;
        self.cancelled = true;
        self.done = Some(super::CANCELLED);
        Ok(true)
    }

    /// Whether [`try_cancel`](Self::try_cancel) cancelled it.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }
}

impl Drop for RawRequest {
    fn drop(&mut self) {
        let Some(req) = self.req.take() else { return };
        // It finishes in the background on the memory the program lent (a receive too: MPI
        // lets a freed receive complete).
        self.shared.lock().orphan(req, Box::new(()));
    }
}
