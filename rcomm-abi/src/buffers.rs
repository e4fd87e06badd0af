//! The buffers buffered sends go through (MPI-4.1): one a communicator holds
//! (`MPI_Comm_attach_buffer`), one a session holds (`MPI_Session_attach_buffer`, serving the
//! communicators made from its groups and their descendants) and the process's
//! (`MPI_Buffer_attach`, in `p2p`: rcomm's own budget). A buffered send uses the first of these
//! its communicator has.
//!
//! For a communicator's or a session's buffer the C layer keeps the account: each buffered
//! send is an rcomm send of its own copy of the data (as MPI's buffer would hold it), charged
//! with its bytes plus `MPI_BSEND_OVERHEAD` until it completes; one that does not fit gives
//! `MPI_ERR_BUFFER`. Detach and flush wait for the sends charged to that buffer; the
//! non-blocking flush is a request over them.

use crate::call::guard;
use crate::consts::*;
use crate::errors::{Error, Res, err};
use crate::ptr;
use crate::request::{self, Op, Pending, empty_status};
use crate::world::CommObj;
use std::ffi::c_void;
use std::sync::Mutex;

/// What a buffer is attached to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// A communicator, by handle.
    Comm(MPI_Comm),
    /// A session, by handle.
    Session(MPI_Session),
}

/// A buffered send in flight and the bytes it is charged.
type Charged = (rcomm::Request<u8>, usize);

/// An attached buffer: its address and size as the program gave them, what is charged to it.
struct Attached {
    owner: Owner,
    addr: usize,
    size: usize,
    used: usize,
    sends: Vec<Charged>,
}

static ATTACHED: Mutex<Vec<Attached>> = Mutex::new(Vec::new());

/// `MPI_BUFFER_AUTOMATIC`: the library provides the memory, without a limit.
const AUTOMATIC: usize = 2;

fn lock() -> std::sync::MutexGuard<'static, Vec<Attached>> {
    ATTACHED.lock().unwrap_or_else(|p| p.into_inner())
}

fn describe(o: Owner) -> String {
    match o {
        Owner::Comm(h) => format!("communicator {h:#x}"),
        Owner::Session(h) => format!("session {h:#x}"),
    }
}

/// Attaches `size` bytes at `addr` (or `MPI_BUFFER_AUTOMATIC`) to `owner`.
pub fn attach(owner: Owner, addr: *mut c_void, size: i64) -> Res {
    let n = ptr::count(size)?;
    if addr.is_null() && n > 0 {
        return Err(err(MPI_ERR_BUFFER, "the buffer is a null pointer"));
    }
    let mut all = lock();
    if all.iter().any(|a| a.owner == owner) {
        return Err(err(
            MPI_ERR_BUFFER,
            format!(
                "{} has a buffer attached already: detach it first",
                describe(owner)
            ),
        ));
    }
    all.push(Attached {
        owner,
        addr: addr as usize,
        size: n,
        used: 0,
        sends: Vec::new(),
    });
    Ok(())
}

/// Waits for every send of `sends`; the first error, after all are done.
fn wait_all(sends: Vec<Charged>) -> Res {
    let mut first: Option<Error> = None;
    for (r, _) in sends {
        if let Err(e) = r.wait() {
            first.get_or_insert(e.into());
        }
    }
    first.map_or(Ok(()), Err)
}

/// Detaches `owner`'s buffer once its sends are done: its address (written to the `void**`
/// `buffer_addr`) and its size (0 for `MPI_BUFFER_AUTOMATIC`).
pub fn detach(owner: Owner, buffer_addr: *mut c_void) -> Res<i64> {
    let a = {
        let mut all = lock();
        let i = all.iter().position(|a| a.owner == owner).ok_or_else(|| {
            err(
                MPI_ERR_BUFFER,
                format!("{} has no buffer attached", describe(owner)),
            )
        })?;
        all.remove(i)
    };
    let (addr, size) = (a.addr, a.size);
    wait_all(a.sends)?;
    ptr::write(buffer_addr.cast::<usize>(), addr, "buffer_addr")?;
    Ok(if addr == AUTOMATIC { 0 } else { size as i64 })
}

/// The sends charged to `owner`'s buffer, taken out to be waited for (none without a buffer).
fn take_sends(owner: Owner) -> Vec<Charged> {
    lock()
        .iter_mut()
        .find(|a| a.owner == owner)
        .map(|a| std::mem::take(&mut a.sends))
        .unwrap_or_default()
}

/// Gives back the bytes of completed sends to `owner`'s buffer, if it is still attached.
fn release(owner: Owner, bytes: usize) {
    if let Some(a) = lock().iter_mut().find(|a| a.owner == owner) {
        a.used = a.used.saturating_sub(bytes);
    }
}

/// Blocks until every send charged to `owner`'s buffer is done.
pub fn flush(owner: Owner) -> Res {
    let sends = take_sends(owner);
    let bytes = sends.iter().map(|s| s.1).sum();
    let res = wait_all(sends);
    release(owner, bytes);
    res
}

/// The non-blocking flush: done when the sends charged at the call are.
struct Flush {
    owner: Owner,
    sends: Vec<Charged>,
    bytes: usize,
}

impl Pending for Flush {
    fn test(&mut self) -> Res<Option<MPI_Status>> {
        if self.sends.iter_mut().all(|(r, _)| r.test()) {
            return self.wait().map(Some);
        }
        Ok(None)
    }

    fn wait(&mut self) -> Res<MPI_Status> {
        let res = wait_all(std::mem::take(&mut self.sends));
        release(self.owner, std::mem::take(&mut self.bytes));
        res.map(|()| empty_status())
    }
}

/// Starts a non-blocking flush of `owner`'s buffer; its request handle.
pub fn iflush(owner: Owner, comm: MPI_Comm) -> Res<MPI_Request> {
    let sends = take_sends(owner);
    let bytes = sends.iter().map(|s| s.1).sum();
    request::insert_op(
        Op::Boxed(Box::new(Flush {
            owner,
            sends,
            bytes,
        })),
        comm,
    )
}

/// The buffer a buffered send on communicator `h` goes through when it is not the
/// process's: the communicator's own, else its session's.
pub fn owner_for(h: MPI_Comm, c: &CommObj) -> Option<Owner> {
    let all = lock();
    if all.iter().any(|a| a.owner == Owner::Comm(h)) {
        return Some(Owner::Comm(h));
    }
    let s = Owner::Session(c.session?);
    all.iter().any(|a| a.owner == s).then_some(s)
}

/// A buffered send through `owner`'s buffer: charged there, or `MPI_ERR_BUFFER`.
pub fn bsend(owner: Owner, c: &CommObj, data: Vec<u8>, to: u32, tag: rcomm::Tag) -> Res {
    let mut all = lock();
    let a = all.iter_mut().find(|a| a.owner == owner).ok_or_else(|| {
        err(
            MPI_ERR_BUFFER,
            format!("{} has no buffer attached", describe(owner)),
        )
    })?;
    // Sends done since give their room back.
    let mut k = 0;
    while k < a.sends.len() {
        if a.sends[k].0.test() {
            let (_, n) = a.sends.swap_remove(k);
            a.used -= n;
        } else {
            k += 1;
        }
    }
    let need = data.len() + MPI_BSEND_OVERHEAD as usize;
    if a.addr != AUTOMATIC && a.used + need > a.size {
        return Err(err(
            MPI_ERR_BUFFER,
            format!(
                "the {}-byte buffer of {} has {} bytes free; this buffered send needs {need}",
                a.size,
                describe(owner),
                a.size - a.used
            ),
        ));
    }
    let r = c.comm.isend(data, to, tag)?;
    a.used += need;
    a.sends.push((r, need));
    Ok(())
}

/// A communicator or session going away: its buffer's sends are waited for and it is
/// dropped.
pub fn owner_gone(owner: Owner) {
    let gone = {
        let mut all = lock();
        all.iter()
            .position(|a| a.owner == owner)
            .map(|i| all.remove(i))
    };
    if let Some(a) = gone {
        let _ = wait_all(a.sends);
    }
}

fn comm_checked(comm: MPI_Comm) -> Res {
    crate::world::get(comm).map(drop)
}

/// `MPI_Comm_attach_buffer`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_attach_buffer(
    comm: MPI_Comm,
    buffer: *mut c_void,
    size: c_int,
) -> c_int {
    guard("MPI_Comm_attach_buffer", Some(comm), || {
        comm_checked(comm)?;
        attach(Owner::Comm(comm), buffer, i64::from(size))
    })
}

/// `MPI_Comm_attach_buffer_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_attach_buffer_c(
    comm: MPI_Comm,
    buffer: *mut c_void,
    size: MPI_Count,
) -> c_int {
    guard("MPI_Comm_attach_buffer_c", Some(comm), || {
        comm_checked(comm)?;
        attach(Owner::Comm(comm), buffer, size)
    })
}

/// `MPI_Comm_detach_buffer`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_detach_buffer(
    comm: MPI_Comm,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> c_int {
    guard("MPI_Comm_detach_buffer", Some(comm), || {
        comm_checked(comm)?;
        let n = detach(Owner::Comm(comm), buffer_addr)?;
        ptr::write(size, c_int::try_from(n).unwrap_or(c_int::MAX), "size")
    })
}

/// `MPI_Comm_detach_buffer_c`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_detach_buffer_c(
    comm: MPI_Comm,
    buffer_addr: *mut c_void,
    size: *mut MPI_Count,
) -> c_int {
    guard("MPI_Comm_detach_buffer_c", Some(comm), || {
        comm_checked(comm)?;
        let n = detach(Owner::Comm(comm), buffer_addr)?;
        ptr::write(size, n, "size")
    })
}

/// `MPI_Comm_flush_buffer`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_flush_buffer(comm: MPI_Comm) -> c_int {
    guard("MPI_Comm_flush_buffer", Some(comm), || {
        comm_checked(comm)?;
        flush(Owner::Comm(comm))
    })
}

/// `MPI_Comm_iflush_buffer`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_iflush_buffer(comm: MPI_Comm, request: *mut MPI_Request) -> c_int {
    guard("MPI_Comm_iflush_buffer", Some(comm), || {
        comm_checked(comm)?;
        let r = iflush(Owner::Comm(comm), comm)?;
        ptr::write(request, r, "request")
    })
}
