//! Ready and buffered send modes (`MPI_Rsend`, `MPI_Bsend` with `MPI_Buffer_attach` /
//! `MPI_Buffer_detach`).
//!
//! A buffered send copies the data at once and returns; the copy travels in the background.
//! The attached buffer is a byte budget for such copies, process-wide as in MPI: each message
//! takes its size plus [`BSEND_OVERHEAD`] until it has been delivered (a copy that went out
//! eagerly is delivered at once; one sent by rendezvous holds its share until the receiver
//! matched it). rcomm allocates the copies itself, so `buffer_attach` takes a size, not memory.
//! As in MPI, detach before the program ends: [`buffer_detach`] is what waits for buffered
//! sends still in flight (a process that exits without it may leave them undelivered).

use crate::comm::{Communicator, Request, Tag};
use crate::p2p::engine::Status;
use crate::{CommError, Result};
use bytemuck::Pod;
use std::sync::Mutex;

/// Bytes of the attached buffer each buffered message takes besides its data
/// (`MPI_BSEND_OVERHEAD`).
pub const BSEND_OVERHEAD: usize = 64;

struct Pool {
    size: usize,
    /// Buffered sends still in flight, with the budget each holds.
    inflight: Vec<(Request<u8>, usize)>,
    /// The first error of a buffered send that completed in the background.
    err: Option<CommError>,
}

impl Pool {
    /// Frees the share of every buffered send that has completed.
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.inflight.len() {
            if self.inflight[i].0.test() {
                let (r, _) = self.inflight.swap_remove(i);
                if let Err(e) = r.wait() {
                    self.err.get_or_insert(e);
                }
            } else {
                i += 1;
            }
        }
    }

    fn used(&self) -> usize {
        self.inflight.iter().map(|(_, n)| n).sum()
    }
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

fn pool() -> std::sync::MutexGuard<'static, Option<Pool>> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Attaches a buffer of `size` bytes for buffered sends (`MPI_Buffer_attach`); an error if one
/// is already attached (detach it first).
pub fn buffer_attach(size: usize) -> Result<()> {
    let mut p = pool();
    if let Some(old) = p.as_ref() {
        return Err(CommError::InvalidArg(format!(
            "buffer_attach: a buffer of {} B is already attached; detach it first",
            old.size
        )));
    }
    *p = Some(Pool {
        size,
        inflight: Vec::new(),
        err: None,
    });
    Ok(())
}

/// Detaches the buffer (`MPI_Buffer_detach`): waits until every buffered send has been
/// delivered, then returns the buffer's size. An error if none is attached, or the first
/// error of a buffered send that failed in the background.
pub fn buffer_detach() -> Result<usize> {
    // Taken out first: the waits below run without the lock (other threads may attach anew).
    let Some(pool) = pool().take() else {
        return Err(CommError::InvalidArg(
            "buffer_detach: no buffer is attached".into(),
        ));
    };
    let mut err = pool.err;
    for (r, _) in pool.inflight {
        if let Err(e) = r.wait() {
            err.get_or_insert(e);
        }
    }
    err.map_or(Ok(pool.size), Err)
}

impl Communicator {
    /// Buffered send (`MPI_Bsend`): copies `buf` into the attached buffer's budget
    /// ([`buffer_attach`]) and returns at once, whether or not a receive is posted.
    /// `CommError::Exhausted` when the copy does not fit in what the sends still in flight
    /// leave of the budget (each takes its size plus [`BSEND_OVERHEAD`]);
    /// `CommError::InvalidArg` when no buffer is attached.
    pub fn bsend<T: Pod>(&self, buf: &[T], dest: u32, tag: Tag) -> Result<()> {
        self.world_rank(dest)?;
        let bytes: &[u8] = bytemuck::cast_slice(buf);
        let need = bytes.len() + BSEND_OVERHEAD;
        let mut guard = pool();
        let Some(pool) = guard.as_mut() else {
            return Err(CommError::InvalidArg(
                "bsend with no buffer attached (buffer_attach first)".into(),
            ));
        };
        pool.reap();
        let used = pool.used();
        if used + need > pool.size {
            return Err(CommError::Exhausted(format!(
                "bsend of {} B: the attached buffer has {} B of {} B free ({} B overhead per \
                 message)",
                bytes.len(),
                pool.size - used,
                pool.size,
                BSEND_OVERHEAD
            )));
        }
        let req = self.isend(bytes.to_vec(), dest, tag)?;
        pool.inflight.push((req, need));
        Ok(())
    }

    /// Buffered send, non-blocking (`MPI_Ibsend`): [`bsend`](Self::bsend)'s copy is made
    /// before this returns, so the request is already complete and hands `buf` back at once.
    pub fn ibsend<T: Pod + Send>(&self, buf: Vec<T>, dest: u32, tag: Tag) -> Result<Request<T>> {
        self.bsend(&buf, dest, tag)?;
        let st = Status {
            source: self.rank(),
            tag: tag.0,
            bytes: size_of_val(buf.as_slice()),
        };
        Ok(Request::completed(self, buf, st))
    }

    /// Ready send (`MPI_Rsend`). MPI makes it erroneous unless the matching receive is already
    /// posted, so that an implementation may skip the handshake; rcomm does not rely on that
    /// and sends as [`send`](Self::send) does, which is correct whether or not the receive is
    /// posted (a program that breaks the rule is not told).
    pub fn rsend<T: Pod>(&self, buf: &[T], dest: u32, tag: Tag) -> Result<()> {
        self.send(buf, dest, tag)
    }

    /// Ready send, non-blocking (`MPI_Irsend`): as [`isend`](Self::isend) (see
    /// [`rsend`](Self::rsend)).
    pub fn irsend<T: Pod + Send>(&self, buf: Vec<T>, dest: u32, tag: Tag) -> Result<Request<T>> {
        self.isend(buf, dest, tag)
    }
}
