//! The in-CI fuzzer of the control channel's decoders (`rcomm_launcher::ctl::fuzzing`), as
//! `rcomm-transport/tests/decoders.rs` does for the transport's: random bytes, mutations of
//! valid streams, and a replay of `fuzz/corpus/ctl_*`; no panic, allocation bounded by what
//! arrived (a counting allocator), no hang.

use proptest::prelude::*;
use rcomm_launcher::ctl::fuzzing::{TARGETS, seeds};
use rcomm_transport::fuzzing::{Target, mutate};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const HANG: Duration = Duration::from_secs(2);

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(n: isize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + n;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are
// thread-local cells with constant initialisers, which neither allocate nor need destructors.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            count(l.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            count(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from this allocator with layout `l`.
        unsafe { System.dealloc(p, l) };
        count(-(l.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: `p` came from this allocator with layout `l`.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            count(new as isize - l.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn check(t: &Target, data: &[u8]) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    let t0 = Instant::now();
    (t.run)(data);
    let took = t0.elapsed();
    let peak = PEAK.with(Cell::get).max(0) as usize;
    let limit = (t.max_alloc)(data.len());
    assert!(
        peak <= limit,
        "{}: {peak} bytes allocated at once for an input of {} bytes (limit {limit}): {:02x?}",
        t.name,
        data.len(),
        &data[..data.len().min(64)]
    );
    assert!(took < HANG, "{}: {took:?} on {} bytes", t.name, data.len());
}

fn target(name: &str) -> &'static Target {
    TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("a ctl target")
}

fn corpus() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus"))
}

#[test]
fn control_channel_decoders_replay_their_committed_corpus() {
    for t in TARGETS {
        let n = rcomm_transport::fuzzing::replay_dir(t, &corpus().join(t.name))
            .unwrap_or_else(|e| panic!("{}: {e}", t.name));
        assert!(n > 0, "{}: empty corpus", t.name);
        for f in std::fs::read_dir(corpus().join(t.name)).unwrap() {
            check(t, &std::fs::read(f.unwrap().path()).unwrap());
        }
    }
}

#[test]
fn control_channel_seeds_decode_and_refusals_are_clean() {
    for (name, _, data) in seeds() {
        check(target(name), &data);
    }
}

/// Writes `fuzz/corpus/ctl_*` (see the transport's `write_seed_corpus`).
#[test]
#[ignore = "writes the committed corpus; run by hand after a format change"]
fn write_ctl_seed_corpus() {
    for (t, name, data) in seeds() {
        let dir = corpus().join(t);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), data).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_on_the_control_channel_are_refused_cleanly(data in proptest::collection::vec(any::<u8>(), 0..1500)) {
        for t in TARGETS {
            check(t, &data);
        }
    }

    #[test]
    fn mutated_control_streams_are_decoded_or_refused_cleanly(
        pick in any::<usize>(),
        rnd in proptest::collection::vec(any::<u64>(), 1..6),
    ) {
        let s = seeds();
        let (name, _, seed) = &s[pick % s.len()];
        let m = mutate(seed, &rnd);
        check(target(name), &m);
        for t in TARGETS {
            check(t, &m);
        }
    }
}
