//! Completion flags of requests, readable without the engine lock. A thread testing a request
//! that another thread's wait is progressing (or the progress thread) sees its completion with
//! one load instead of queueing on the lock the waiter holds while it spins.
//!
//! The flags live in pages that never move once made, found by request id; ids beyond the last
//! page have no flag and are answered by the engine under its lock. A flag is written only under
//! the engine lock (cleared when the id is handed out, set when the request completes) and read
//! only by the holder of the request, whose id cannot be reused before it gives it back.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

const PAGE: usize = 1024;
const PAGES: usize = 64;

type Page = [AtomicBool; PAGE];

/// Per request id: whether it completed.
pub(crate) struct DoneFlags {
    pages: [OnceLock<Box<Page>>; PAGES],
}

impl std::fmt::Debug for DoneFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DoneFlags").finish_non_exhaustive()
    }
}

impl Default for DoneFlags {
    fn default() -> Self {
        Self {
            pages: std::array::from_fn(|_| OnceLock::new()),
        }
    }
}

impl DoneFlags {
    /// Records whether request `id` is done (the engine, under its lock).
    pub(crate) fn set(&self, id: usize, done: bool) {
        let Some(page) = self.pages.get(id / PAGE) else {
            return;
        };
        let page = page.get_or_init(|| Box::new(std::array::from_fn(|_| AtomicBool::new(false))));
        page[id % PAGE].store(done, Ordering::Release);
    }

    /// Whether request `id` is known done without the lock; `false` means "ask the engine".
    pub(crate) fn get(&self, id: usize) -> bool {
        self.pages
            .get(id / PAGE)
            .and_then(OnceLock::get)
            .is_some_and(|p| p[id % PAGE].load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_follow_their_ids_and_ids_without_a_page_ask_the_engine() {
        let f = DoneFlags::default();
        assert!(!f.get(0) && !f.get(5000));
        f.set(5000, true);
        assert!(f.get(5000) && !f.get(5001) && !f.get(4999));
        f.set(5000, false);
        assert!(!f.get(5000));
        let beyond = PAGE * PAGES;
        f.set(beyond, true);
        assert!(!f.get(beyond), "no page: the engine answers");
    }
}
