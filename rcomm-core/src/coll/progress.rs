//! The optional progress thread (`RCOMM_ASYNC_PROGRESS=1`): advances non-blocking collectives
//! and the transports while the application computes, so a collective started before a
//! computation has finished (or nearly) when the computation ends.
//!
//! The thread exists only while there is work: it starts on the first registration, and
//! parks on a condition variable when no request is in flight, so an idle rank costs no CPU
//! (ranks here are often oversubscribed). While requests are in flight it spins briefly,
//! yields, and then sleeps on the transports' descriptors with the same sleep protocol as a
//! blocked caller, so peers' doorbells wake it.

use crate::coll_state::{Item, Progress};
use crate::comm::Shared;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Rounds without progress before yielding turns into sleeping on descriptors.
const YIELD_ROUNDS: u32 = 200;

impl Progress {
    /// Hands a request to the thread (starting it if needed).
    pub(crate) fn register(self: &Arc<Self>, item: Item, shared: &Arc<Shared>) {
        self.list
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(item);
        self.cv.notify_one();
        let mut t = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        if t.is_none() && !self.stop.load(Ordering::Acquire) {
            let me = self.clone();
            let weak = Arc::downgrade(shared);
            *t = std::thread::Builder::new()
                .name("rcomm-progress".into())
                .spawn(move || me.run(weak))
                .ok();
        }
    }

    /// Stops and joins the thread (at finalize). Requests still registered are left to their
    /// owners' `wait`/drop.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.cv.notify_all();
        let t = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }

    fn run(&self, shared: Weak<Shared>) {
        let mut idle: u32 = 0;
        let mut fds = rcomm_runtime::os::PollSet::default();
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let items: Vec<Item> = {
                let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
                if l.is_empty() {
                    // Parked: woken by `register` or `stop`; the timeout only bounds a missed
                    // wake-up.
                    let _ = self
                        .cv
                        .wait_timeout(l, Duration::from_millis(200))
                        .map(drop);
                    continue;
                }
                l.retain(|i| i.try_lock().map(|s| !s.finished()).unwrap_or(true));
                l.clone()
            };
            let Some(sh) = shared.upgrade() else { return };
            let mut moved = false;
            for it in &items {
                // A request its owner is waiting on is skipped: the owner advances it.
                if let Ok(mut s) = it.try_lock()
                    && !s.finished()
                {
                    moved |= s.advance(false).unwrap_or(true);
                }
            }
            {
                let mut e = sh.lock();
                moved |= e.progress() > 0;
            }
            if moved {
                idle = 0;
                continue;
            }
            idle = idle.saturating_add(1);
            if idle < YIELD_ROUNDS {
                std::thread::yield_now();
                continue;
            }
            // Sleep on the transports' descriptors, announcing it so peers ring doorbells.
            let mut e = sh.lock();
            if e.needs_cpu() {
                drop(e);
                std::thread::yield_now();
                continue;
            }
            e.net().begin_sleep();
            let progressed = e.progress() > 0;
            fds.clear();
            e.net().wait_fds(&mut fds);
            drop(e);
            if !progressed {
                let _ = fds.wait(Duration::from_millis(2));
            }
            sh.lock().net().end_sleep();
        }
    }
}
