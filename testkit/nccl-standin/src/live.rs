//! What is alive in this process, for `rcommNcclStandInLive`: tests prove with it that abort
//! and destroy leave nothing behind.

use std::sync::atomic::{AtomicU64, Ordering};

/// Communicators (ready ones, until their last queued operation let go of them).
pub static COMMS: AtomicU64 = AtomicU64::new(0);
/// Ranks' connections to a hub.
pub static CONNS: AtomicU64 = AtomicU64::new(0);
/// Hub threads: each hub's acceptor and one reader per connection.
pub static HUB_THREADS: AtomicU64 = AtomicU64::new(0);
/// Other threads: each connection's reader.
pub static OTHER_THREADS: AtomicU64 = AtomicU64::new(0);

/// One live thing of a kind, counted while it exists.
pub struct Count(&'static AtomicU64);

impl Count {
    /// Counts one more of `what`.
    pub fn new(what: &'static AtomicU64) -> Count {
        what.fetch_add(1, Ordering::SeqCst);
        Count(what)
    }
}

impl Drop for Count {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `[communicators, connections, hub threads, other threads]`.
pub fn snapshot() -> [u64; 4] {
    [&COMMS, &CONNS, &HUB_THREADS, &OTHER_THREADS].map(|c| c.load(Ordering::SeqCst))
}
