//! Request sets mixing kinds (`MPI_Waitany`, `_Waitsome`, `_Waitall`, `_Testany`, `_Testsome`,
//! `_Testall` over any requests): point-to-point requests of any element type, collective
//! requests, derived-datatype receives, persistent requests, in one set.
//!
//! The calls report *which* requests completed, by index; each request's own `wait` then hands
//! over its result without waiting (MPI's split between completion and the status array). The
//! typed sets in `comm` (`wait_any` over `Vec<Request<T>>`, ...) stay for the common case of one
//! kind, where results come back directly.
//!
//! Waiting polls every request of the set, then backs off: a few spin rounds, then yields, then
//! short sleeps (rising to 200 µs). Requests may belong to different communicators and mix
//! engine-driven and collective progress, so no single engine wait covers them; the backoff
//! keeps a rank that shares its core from starving the rank it waits for.

use crate::coll::CollRequest;
use crate::comm::{Persistent, Request};
use crate::datatype::DtRecv;
use bytemuck::Pod;
use std::time::Duration;

/// A request in a mixed set.
pub trait Pending {
    /// Progresses once; whether the operation has completed. A failed operation counts as
    /// completed: its `wait` returns the error.
    fn poll(&mut self) -> bool;
}

impl<T: Pod + Send> Pending for Request<T> {
    fn poll(&mut self) -> bool {
        self.test()
    }
}

impl<T: Pod + Send + 'static> Pending for CollRequest<T> {
    fn poll(&mut self) -> bool {
        CollRequest::poll(self)
    }
}

impl Pending for DtRecv<'_> {
    fn poll(&mut self) -> bool {
        self.test()
    }
}

/// A persistent request counts as completed when no run is active.
impl<T: Pod + Send> Pending for Persistent<T> {
    fn poll(&mut self) -> bool {
        self.test()
    }
}

/// Spin rounds before the first yield, and yields before the first sleep.
const SPINS: u32 = 8;
const YIELDS: u32 = 64;
const MAX_SLEEP: Duration = Duration::from_micros(200);

struct Backoff(u32);

impl Backoff {
    fn snooze(&mut self) {
        self.0 = self.0.saturating_add(1);
        if self.0 <= SPINS {
            std::hint::spin_loop();
        } else if self.0 <= SPINS + YIELDS {
            std::thread::yield_now();
        } else {
            let us = u64::from((self.0 - SPINS - YIELDS).min(200));
            std::thread::sleep(Duration::from_micros(us).min(MAX_SLEEP));
        }
    }
}

/// Indices of the completed requests among `reqs` (each polled once; `MPI_Testsome`).
pub fn test_some_of(reqs: &mut [&mut dyn Pending]) -> Vec<usize> {
    let mut done = Vec::new();
    for (i, r) in reqs.iter_mut().enumerate() {
        if r.poll() {
            done.push(i);
        }
    }
    done
}

/// The index of a completed request, if any (polling in order, stopping at the first;
/// `MPI_Testany`).
pub fn test_any_of(reqs: &mut [&mut dyn Pending]) -> Option<usize> {
    reqs.iter_mut().position(|r| r.poll())
}

/// Whether every request has completed (each polled once; `MPI_Testall`).
pub fn test_all_of(reqs: &mut [&mut dyn Pending]) -> bool {
    let mut all = true;
    for r in reqs.iter_mut() {
        all &= r.poll();
    }
    all
}

/// Waits until at least one request completes; the indices of every completed one
/// (`MPI_Waitsome`). Empty only for an empty set.
pub fn wait_some_of(reqs: &mut [&mut dyn Pending]) -> Vec<usize> {
    if reqs.is_empty() {
        return Vec::new();
    }
    let mut b = Backoff(0);
    loop {
        let done = test_some_of(reqs);
        if !done.is_empty() {
            return done;
        }
        b.snooze();
    }
}

/// Waits until one request completes; its index (`MPI_Waitany`), `None` for an empty set.
/// Polls from the front, so earlier requests win ties.
pub fn wait_any_of(reqs: &mut [&mut dyn Pending]) -> Option<usize> {
    if reqs.is_empty() {
        return None;
    }
    let mut b = Backoff(0);
    loop {
        if let Some(i) = test_any_of(reqs) {
            return Some(i);
        }
        b.snooze();
    }
}

/// Waits until every request has completed (`MPI_Waitall`); each `wait` then returns at once.
pub fn wait_all_of(reqs: &mut [&mut dyn Pending]) {
    let mut b = Backoff(0);
    while !test_all_of(reqs) {
        b.snooze();
    }
}
