//! Memory registrations kept for reuse, with users counted and ranges invalidated.
//!
//! Registering pins pages and costs a kernel call, so a registration outlives the operation
//! that made it and is found again for a buffer used again. Two things make that unsafe if
//! done naively, and this cache handles both: an entry still named by an operation in flight
//! is never evicted (users are counted), and an address range that was freed and reused
//! must not be served by the old registration, whose pages are the freed ones — whoever
//! learns of the change (a memory monitor, a test, the application through rcomm) calls
//! [`Registrations::invalidate`], after which the range is registered anew and the old
//! registration goes as soon as its last user is done.
//!
//! Sans-IO: it hands back the handles to deregister; the caller makes the verbs calls.

/// One cached registration.
#[derive(Debug)]
struct Entry<H> {
    addr: u64,
    len: u64,
    h: H,
    users: u32,
    /// Invalidated while in use: no new users; deregistered at the last release.
    stale: bool,
    /// Last use, for eviction (least recently used first).
    used_at: u64,
}

/// Registrations by address range.
#[derive(Debug)]
pub struct Registrations<H> {
    cap: usize,
    entries: Vec<Entry<H>>,
    clock: u64,
    hits: u64,
    misses: u64,
}

/// What [`Registrations::acquire`] found.
#[derive(Debug, PartialEq, Eq)]
pub struct Acquired<H> {
    /// The registration to use (one more user until [`Registrations::release`]).
    pub h: H,
    /// Registrations evicted to make room: deregister them.
    pub evicted: Vec<H>,
}

impl<H: Copy + PartialEq> Registrations<H> {
    /// A cache keeping at most `cap` unused registrations (entries in use are never evicted,
    /// so it may hold more while operations are in flight).
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            entries: Vec::new(),
            clock: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// The registration covering `len` bytes at `addr`, made by `register` on a miss; one
    /// more user of it.
    pub fn acquire<E>(
        &mut self,
        addr: u64,
        len: u64,
        register: impl FnOnce() -> Result<H, E>,
    ) -> Result<Acquired<H>, E> {
        self.clock += 1;
        let end = addr.saturating_add(len);
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| !e.stale && e.addr <= addr && end <= e.addr + e.len)
        {
            e.users += 1;
            e.used_at = self.clock;
            self.hits += 1;
            return Ok(Acquired {
                h: e.h,
                evicted: Vec::new(),
            });
        }
        self.misses += 1;
        let h = register()?;
        self.entries.push(Entry {
            addr,
            len,
            h,
            users: 1,
            stale: false,
            used_at: self.clock,
        });
        Ok(Acquired {
            h,
            evicted: self.evict(),
        })
    }

    /// Unused entries beyond the cap, least recently used first.
    fn evict(&mut self) -> Vec<H> {
        let mut out = Vec::new();
        loop {
            let idle = self.entries.iter().filter(|e| e.users == 0).count();
            if self.entries.len() <= self.cap || idle == 0 {
                return out;
            }
            let (i, _) = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.users == 0)
                .min_by_key(|(_, e)| e.used_at)
                .expect("an idle entry");
            out.push(self.entries.swap_remove(i).h);
        }
    }

    /// One user of `h` is done. Returns `h` when it is to be deregistered now (it was
    /// invalidated while in use); otherwise it stays cached.
    pub fn release(&mut self, h: H) -> Option<H> {
        let i = self.entries.iter().position(|e| e.h == h)?;
        let e = &mut self.entries[i];
        e.users = e.users.saturating_sub(1);
        if e.users == 0 && e.stale {
            return Some(self.entries.swap_remove(i).h);
        }
        None
    }

    /// One user of `h` is done, and `h` is not to be kept for reuse: returns it to
    /// deregister when no user is left (or it was invalidated).
    pub fn release_idle(&mut self, h: H) -> Option<H> {
        let i = self.entries.iter().position(|e| e.h == h)?;
        let e = &mut self.entries[i];
        e.users = e.users.saturating_sub(1);
        (e.users == 0).then(|| self.entries.swap_remove(i).h)
    }

    /// The range `[addr, addr + len)` was freed or remapped: entries overlapping it serve no
    /// new operation. Returns those to deregister now (no user left); the others go at their
    /// last release.
    pub fn invalidate(&mut self, addr: u64, len: u64) -> Vec<H> {
        let end = addr.saturating_add(len);
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.entries.len() {
            let e = &mut self.entries[i];
            if e.addr < end && addr < e.addr + e.len {
                if e.users == 0 {
                    out.push(self.entries.swap_remove(i).h);
                    continue;
                }
                e.stale = true;
            }
            i += 1;
        }
        out
    }

    /// Every registration, for teardown.
    pub fn drain(&mut self) -> Vec<H> {
        self.entries.drain(..).map(|e| e.h).collect()
    }

    /// Registrations held now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// (hits, misses) so far.
    pub fn stats(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(next: &mut u32) -> Result<u32, ()> {
        *next += 1;
        Ok(*next)
    }

    #[test]
    fn hits_cover_misses_register_and_only_idle_entries_are_evicted() {
        let mut c = Registrations::new(2);
        let mut n = 0;
        let a = c.acquire(1000, 100, || reg(&mut n)).unwrap();
        assert_eq!((a.h, a.evicted.len()), (1, 0));
        let b = c.acquire(1010, 50, || reg(&mut n)).unwrap();
        assert_eq!(b.h, 1, "inside the first registration");
        assert_eq!(
            c.acquire(1050, 100, || reg(&mut n)).unwrap().h,
            2,
            "runs past"
        );
        // Three entries would exceed the cap, but all are in use: nothing goes.
        let d = c.acquire(5000, 10, || reg(&mut n)).unwrap();
        assert_eq!((d.h, d.evicted.len()), (3, 0));
        assert_eq!(c.len(), 3);
        assert_eq!(c.release(1), None);
        assert_eq!(c.release(1), None);
        assert_eq!(c.release(3), None);
        // The next miss evicts the least recently used idle entries down to the cap.
        let e = c.acquire(9000, 10, || reg(&mut n)).unwrap();
        assert_eq!(e.h, 4);
        assert_eq!(e.evicted, vec![1, 3], "2 is in use, 4 is new");
        assert_eq!(c.stats(), (1, 4));
    }

    #[test]
    fn an_invalidated_range_is_registered_anew_and_the_old_goes_after_its_last_user() {
        let mut c = Registrations::new(8);
        let mut n = 0;
        let a = c.acquire(0x1000, 0x1000, || reg(&mut n)).unwrap().h;
        let idle = c.acquire(0x8000, 0x100, || reg(&mut n)).unwrap().h;
        assert_eq!(c.release(idle), None);
        // Freed and reused: a page in the middle of the first, and all of the second.
        assert_eq!(c.invalidate(0x1800, 0x10), vec![], "first still in use");
        assert_eq!(
            c.invalidate(0x8000, 0x100),
            vec![idle],
            "idle: deregistered now"
        );
        let b = c.acquire(0x1000, 0x1000, || reg(&mut n)).unwrap().h;
        assert_ne!(a, b, "the stale registration serves no new operation");
        assert_eq!(c.release(a), Some(a), "its last user done: deregister it");
        assert_eq!(c.release(b), None, "the new one stays cached");
        assert_eq!(c.invalidate(0x3000, 0x1000), vec![], "not overlapping");
        assert_eq!(c.drain(), vec![b]);
        assert!(c.is_empty());
    }

    #[test]
    fn an_uncached_registration_goes_with_its_last_user() {
        let mut c = Registrations::new(8);
        let mut n = 0;
        let a = c.acquire(0x1000, 0x100, || reg(&mut n)).unwrap().h;
        assert_eq!(c.acquire(0x1000, 0x100, || reg(&mut n)).unwrap().h, a);
        assert_eq!(c.release_idle(a), None, "one user left");
        assert_eq!(c.release_idle(a), Some(a));
        assert!(c.is_empty());
    }

    #[test]
    fn a_failed_registration_leaves_nothing_behind() {
        let mut c: Registrations<u32> = Registrations::new(2);
        assert_eq!(c.acquire(0, 10, || Err("no")), Err("no"));
        assert!(c.is_empty());
    }
}
