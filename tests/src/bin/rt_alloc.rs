//! Rank program: proves the hot path allocates nothing. A counting global allocator counts
//! allocations made by this process while ranks 0 and 1 exchange 1000 pairs of 8-byte messages
//! (after a warm-up that creates rings and queues), or, with argument `coll`, make 1000 calls
//! each of an 8-byte allreduce, bcast and allgather (every result checked). Prints
//! `allocations N`, and for `coll` also `liveness_polls N ms M` (the shared-memory transport's
//! looks at peer liveness during those calls, and how long they took).
use rcomm::Tag;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

struct Counting;
static COUNT: AtomicU64 = AtomicU64::new(0);
static ON: AtomicBool = AtomicBool::new(false);
/// Debug aid: `RT_ALLOC_TRAP=1` raises SIGTRAP at the first counted allocation (run under gdb).
static TRAP: AtomicBool = AtomicBool::new(false);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            COUNT.fetch_add(1, Ordering::Relaxed);
            if TRAP.load(Ordering::Relaxed) {
                ON.store(false, Ordering::Relaxed);
                // SAFETY: raising a signal in our own process.
                unsafe { libc::raise(libc::SIGTRAP) };
            }
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            COUNT.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn main() {
    TRAP.store(
        std::env::var_os("RT_ALLOC_TRAP").is_some(),
        Ordering::Relaxed,
    );
    let w = rcomm::init().expect("init");
    if std::env::args().nth(1).as_deref() == Some("coll") {
        assert!(w.size() <= 4, "coll: run with at most 4 ranks");
        return colls(&w);
    }
    assert_eq!(w.size(), 2, "run with 2 ranks");
    let peer = 1 - w.rank();
    let mut out = [0u8; 8];
    let mut inb = [0u8; 8];
    let round = |i: u64, out: &mut [u8; 8], inb: &mut [u8; 8]| {
        *out = (i * 2 + u64::from(w.rank())).to_le_bytes();
        // Warm-up rounds with a late reply: the receive outlasts its direct path's spin and
        // takes the general one (request, posted receive), so both are warm before counting.
        let late = |r: u32| i < 200 && i % 10 == u64::from(r) * 5;
        let pause = || std::thread::sleep(std::time::Duration::from_millis(5));
        if w.rank() == 0 {
            if late(0) {
                pause();
            }
            w.send(out, peer, Tag(1)).unwrap();
            w.recv(inb, peer, Tag(1)).unwrap();
        } else {
            w.recv(inb, peer, Tag(1)).unwrap();
            if late(1) {
                pause();
            }
            w.send(out, peer, Tag(1)).unwrap();
        }
        assert_eq!(u64::from_le_bytes(*inb), i * 2 + u64::from(peer));
    };
    for i in 0..200 {
        round(i, &mut out, &mut inb);
    }
    ON.store(true, Ordering::SeqCst);
    for i in 200..1200 {
        round(i, &mut out, &mut inb);
    }
    ON.store(false, Ordering::SeqCst);
    println!("allocations {}", COUNT.load(Ordering::SeqCst));
}

fn colls(w: &rcomm::Communicator) {
    let (me, n) = (w.rank(), w.size());
    let call = |i: u32| {
        let mut sum = [0u32; 2];
        w.allreduce(&[me + i, 1], &mut sum, rcomm::Op::Sum).unwrap();
        assert_eq!(sum, [(0..n).map(|r| r + i).sum::<u32>(), n]);
        let mut b = [if me == 0 { i } else { u32::MAX }; 2];
        w.bcast(&mut b, 0).unwrap();
        assert_eq!(b, [i; 2]);
        let mut all = [0u32; 4];
        w.allgather(&[me * 1000 + i], &mut all[..n as usize])
            .unwrap();
        for (r, &got) in all[..n as usize].iter().enumerate() {
            assert_eq!(got, r as u32 * 1000 + i, "allgather from rank {r}");
        }
    };
    for i in 0..200 {
        call(i);
    }
    let polls = || w.transport_counters().get("shm").liveness_polls;
    let (p0, t0) = (polls(), std::time::Instant::now());
    ON.store(true, Ordering::SeqCst);
    for i in 200..1200 {
        call(i);
    }
    ON.store(false, Ordering::SeqCst);
    println!("allocations {}", COUNT.load(Ordering::SeqCst));
    println!(
        "liveness_polls {} ms {}",
        polls() - p0,
        t0.elapsed().as_millis()
    );
}
