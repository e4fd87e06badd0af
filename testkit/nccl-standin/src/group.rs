//! `ncclGroupStart`/`ncclGroupEnd`: per thread and nestable. Calls inside a group are
//! collected; the outermost `ncclGroupEnd` queues them, one host function per communicator
//! and stream (null-stream ones run there and then), or, if a call in the group failed,
//! queues nothing and reports that failure.

use crate::abi::Fail;
use crate::comm::{self, Comm, Task};
use std::cell::RefCell;
use std::sync::Arc;

#[derive(Default)]
struct Group {
    depth: u32,
    calls: Vec<(Arc<Comm>, usize, Task)>,
    err: Option<Fail>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// `ncclGroupStart`.
pub fn start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// Runs `task` now, or keeps it for the group's end.
///
/// # Safety
/// The task's buffers are valid as its call's contract says, until the work ran.
pub unsafe fn enqueue(comm: &Arc<Comm>, stream: usize, task: Task) -> Result<(), Fail> {
    let kept = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return false;
        }
        g.calls.push((comm.clone(), stream, task));
        true
    });
    if kept {
        return Ok(());
    }
    // SAFETY: the caller's contract.
    unsafe { comm::submit(vec![(comm.clone(), stream, vec![task])]) }
}

/// Remembers the failure of a call made inside a group (the first one is reported by the
/// group's end).
pub fn failed(f: &Fail) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 && g.err.is_none() {
            g.err = Some(f.clone());
        }
    });
}

/// `ncclGroupEnd`.
///
/// # Safety
/// The collected tasks' buffers are valid as their calls' contracts say, until the work ran.
pub unsafe fn end() -> Result<(), Fail> {
    let (calls, err) = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Fail::usage("ncclGroupEnd without ncclGroupStart"));
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok((Vec::new(), None));
        }
        Ok((std::mem::take(&mut g.calls), g.err.take()))
    })?;
    if let Some(f) = err {
        return Err(Fail::new(
            f.code,
            format!("a call in the group failed, so none of it ran: {}", f.text),
        ));
    }
    let mut buckets: Vec<(Arc<Comm>, usize, Vec<Task>)> = Vec::new();
    for (c, s, t) in calls {
        match buckets
            .iter_mut()
            .find(|(bc, bs, _)| Arc::ptr_eq(bc, &c) && *bs == s)
        {
            Some(b) => b.2.push(t),
            None => buckets.push((c, s, vec![t])),
        }
    }
    // SAFETY: the caller's contract.
    unsafe { comm::submit(buckets) }
}
