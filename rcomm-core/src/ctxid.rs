//! Context ids: which ids this process uses, and the guard that frees a communicator's id when
//! its last clone goes. Plain state, below `comm` and `group` (`group` agrees on ids).

use std::sync::{Arc, Mutex};

/// Context ids per process (a bitmask of this many bits is exchanged when one is allocated).
pub(crate) const MAX_IDS: usize = 2048;
pub(crate) const WORDS: usize = MAX_IDS / 64;

/// Which context ids this process uses.
#[derive(Debug)]
pub(crate) struct CtxIds {
    used: Mutex<[u64; WORDS]>,
}

impl CtxIds {
    /// With the world's id (0) taken.
    pub(crate) fn new() -> Self {
        let mut used = [0u64; WORDS];
        used[0] = 1;
        Self {
            used: Mutex::new(used),
        }
    }

    pub(crate) fn free_mask(&self) -> [u64; WORDS] {
        let used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        let mut m = [0u64; WORDS];
        for (f, u) in m.iter_mut().zip(used.iter()) {
            *f = !u;
        }
        m
    }

    pub(crate) fn take(&self, id: usize) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        let (w, b) = (id / 64, id % 64);
        let was = used[w] >> b & 1 == 1;
        used[w] |= 1 << b;
        !was
    }

    pub(crate) fn release(&self, id: usize) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        used[id / 64] &= !(1 << (id % 64));
    }
}

/// Returns a communicator's context id to the pool when its last clone is dropped.
#[derive(Debug)]
pub(crate) struct CtxGuard {
    pub(crate) ids: Arc<CtxIds>,
    pub(crate) id: usize,
    /// An id every member agrees on and no earlier communicator on this context had (checked
    /// collectives tell a reused context's communicators apart by it).
    pub(crate) epoch: u32,
}

impl Drop for CtxGuard {
    fn drop(&mut self) {
        self.ids.release(self.id);
    }
}
