//! The node's shared-memory windows of one communicator, as its collective part keeps them
//! (set up and run by `coll::shm`).

use rcomm_transport::local::Segment;
use std::ptr::NonNull;
use std::sync::Mutex;

/// Mapped windows of every rank of one communicator.
pub(crate) struct NodeShm {
    /// By communicator rank; ours included (the segment we created).
    pub(crate) segs: Vec<Segment>,
    pub(crate) bases: Vec<NonNull<u8>>,
    /// World ranks of the members, for liveness checks.
    pub(crate) world: Vec<u32>,
    pub(crate) me: usize,
    pub(crate) state: Mutex<WindowState>,
}

// SAFETY: the raw pointers in `bases` point into `segs`, owned alongside and valid for the
// NodeShm's life; every access through them is synchronised by the protocol (atomics in the
// windows), and a call holds `state` for its whole duration, so one thread at a time drives it.
unsafe impl Send for NodeShm {}
// SAFETY: as above: shared use goes through `state`.
unsafe impl Sync for NodeShm {}

impl std::fmt::Debug for NodeShm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeShm")
            .field("ranks", &self.segs.len())
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

/// Where the windows' protocol stands between calls.
#[derive(Debug, Default)]
pub(crate) struct WindowState {
    /// Rounds run so far (the same on every rank between calls).
    pub(crate) round: u64,
    /// The protocol's `seen` between calls.
    pub(crate) seen: u64,
    /// Why the windows can no longer be trusted to be in step.
    pub(crate) broken: Option<String>,
}
