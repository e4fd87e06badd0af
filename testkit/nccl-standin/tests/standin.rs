//! The stand-in through its C entry points: ranks as threads of this process, and — for a
//! rank that dies or hangs — as child processes re-running this test binary with a role in
//! `ROLE_VAR`. Every wait has a deadline, so a bug fails a test instead of hanging it.

use half::bf16;
use nccl::abi::{self, StreamAbi};
use nccl::*;
use std::ffi::{CStr, c_int, c_void};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(120);
const ROLE_VAR: &str = "NCCL_STANDIN_TEST_ROLE";

// ncclDataType_t and ncclRedOp_t codes.
const U8: c_int = 1;
const I32: c_int = 2;
const F32: c_int = 7;
const BF16: c_int = 9;
const SUM: c_int = 0;
const AVG: c_int = 4;

/// A communicator handle that may cross threads (the library's handles are thread-safe).
#[derive(Clone, Copy)]
struct C(NcclComm);
unsafe impl Send for C {}
unsafe impl Sync for C {}

fn ok(r: c_int, what: &str) {
    assert_eq!(
        r,
        0,
        "{what}: {} ({})",
        err_text(r),
        last(std::ptr::null_mut())
    );
}

fn err_text(r: c_int) -> String {
    unsafe { CStr::from_ptr(ncclGetErrorString(r)) }
        .to_string_lossy()
        .into_owned()
}

fn last(c: NcclComm) -> String {
    unsafe { CStr::from_ptr(ncclGetLastError(c)) }
        .to_string_lossy()
        .into_owned()
}

fn uid() -> UniqueId {
    let mut id = UniqueId { internal: [0; 128] };
    ok(unsafe { ncclGetUniqueId(&mut id) }, "ncclGetUniqueId");
    id
}

fn init(n: usize, id: UniqueId, rank: usize) -> C {
    let mut c = std::ptr::null_mut();
    ok(
        unsafe { ncclCommInitRank(&mut c, n as c_int, id, rank as c_int) },
        "ncclCommInitRank",
    );
    C(c)
}

fn live() -> [u64; 4] {
    let mut v = [9u64; 4];
    ok(unsafe { rcommNcclStandInLive(v.as_mut_ptr()) }, "live");
    v
}

/// `f(rank)` on `n` threads; every one must finish within the deadline.
fn on_ranks<T: Send + 'static>(n: usize, f: impl Fn(usize) -> T + Send + Sync + 'static) -> Vec<T> {
    let f = Arc::new(f);
    let (tx, rx) = mpsc::channel();
    for r in 0..n {
        let (f, tx) = (f.clone(), tx.clone());
        std::thread::spawn(move || {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(r)));
            let _ = tx.send((r, out.map_err(|e| panic_text(&e))));
        });
    }
    let end = Instant::now() + DEADLINE;
    let mut got: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let left = end.saturating_duration_since(Instant::now());
        let (r, out) = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("ranks did not finish within {DEADLINE:?}"));
        match out {
            Ok(v) => got[r] = Some(v),
            Err(e) => panic!("rank {r}: {e}"),
        }
    }
    got.into_iter().map(Option::unwrap).collect()
}

fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

/// A stream as rcomm's GPU stand-in makes them: the header, then a worker thread running the
/// queued host functions in order.
#[repr(C)]
struct TestStream {
    abi: StreamAbi,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

enum Job {
    Host(abi::HostFn, usize),
    Gate(mpsc::Receiver<()>),
    Mark(mpsc::Sender<()>),
}

unsafe extern "C" fn launch(s: *mut c_void, f: abi::HostFn, arg: *mut c_void) -> c_int {
    let s = unsafe { &*s.cast::<TestStream>() };
    match s.tx.lock().unwrap().as_ref() {
        Some(tx) if tx.send(Job::Host(f, arg as usize)).is_ok() => 0,
        _ => 1,
    }
}

impl TestStream {
    fn new() -> Box<TestStream> {
        let (tx, rx) = mpsc::channel::<Job>();
        let worker = std::thread::spawn(move || {
            for j in rx {
                match j {
                    Job::Host(f, a) => unsafe { f(a as *mut c_void) },
                    Job::Gate(g) => {
                        let _ = g.recv_timeout(DEADLINE);
                    }
                    Job::Mark(m) => {
                        let _ = m.send(());
                    }
                }
            }
        });
        Box::new(TestStream {
            abi: StreamAbi {
                magic: STREAM_MAGIC,
                launch_host_func: launch,
            },
            tx: Mutex::new(Some(tx)),
            worker: Mutex::new(Some(worker)),
        })
    }
    fn ptr(&self) -> *mut c_void {
        self as *const TestStream as *mut c_void
    }
    fn push(&self, j: Job) {
        self.tx.lock().unwrap().as_ref().unwrap().send(j).unwrap();
    }
    /// Holds the worker until the returned sender sends (or drops).
    fn hold(&self) -> mpsc::Sender<()> {
        let (tx, rx) = mpsc::channel();
        self.push(Job::Gate(rx));
        tx
    }
    /// Waits up to `limit` for the work queued so far.
    fn sync_within(&self, limit: Duration) -> bool {
        let (tx, rx) = mpsc::channel();
        self.push(Job::Mark(tx));
        rx.recv_timeout(limit).is_ok()
    }
    fn sync(&self) {
        assert!(
            self.sync_within(DEADLINE),
            "stream not done within {DEADLINE:?}"
        );
    }
}

impl Drop for TestStream {
    fn drop(&mut self) {
        self.tx.lock().unwrap().take();
        if std::thread::panicking() {
            // A failing test: the worker may be stuck in a host function; the test's failure
            // must not wait for it.
            return;
        }
        if let Some(w) = self.worker.lock().unwrap().take() {
            let _ = w.join();
        }
    }
}

// ---- references ----

fn es(dt: c_int) -> usize {
    match dt {
        U8 => 1,
        BF16 => 2,
        _ => 4,
    }
}

/// Element `i` of rank `r`'s input.
fn value(dt: c_int, r: usize, i: usize) -> Vec<u8> {
    match dt {
        F32 => (((r * 7 + i * 3) % 11) as f32 - 5.0 + 0.25)
            .to_le_bytes()
            .to_vec(),
        BF16 => bf16::from_f32(((r * 5 + i * 3) % 13) as f32 * 0.75 - 4.5)
            .to_bits()
            .to_le_bytes()
            .to_vec(),
        I32 => ((r as i32).wrapping_mul(1_000_003) ^ (i as i32).wrapping_mul(791_923))
            .to_le_bytes()
            .to_vec(),
        U8 => vec![(r * 31 + i * 7) as u8],
        _ => unreachable!(),
    }
}

fn input(dt: c_int, r: usize, count: usize) -> Vec<u8> {
    (0..count).flat_map(|i| value(dt, r, i)).collect()
}

/// `a ⊕ b` for one element, as the stand-in's left fold must give it.
fn combine(dt: c_int, op: c_int, a: &[u8], b: &[u8]) -> Vec<u8> {
    match dt {
        F32 => {
            let (x, y) = (
                f32::from_le_bytes(a.try_into().unwrap()),
                f32::from_le_bytes(b.try_into().unwrap()),
            );
            let v = match op {
                0 | 4 => x + y,
                1 => x * y,
                2 => x.max(y),
                _ => x.min(y),
            };
            v.to_le_bytes().to_vec()
        }
        BF16 => {
            let f = |s: &[u8]| bf16::from_bits(u16::from_le_bytes(s.try_into().unwrap())).to_f32();
            let (x, y) = (f(a), f(b));
            let v = match op {
                0 | 4 => x + y,
                1 => x * y,
                2 => x.max(y),
                _ => x.min(y),
            };
            bf16::from_f32(v).to_bits().to_le_bytes().to_vec()
        }
        I32 => {
            let (x, y) = (
                i32::from_le_bytes(a.try_into().unwrap()),
                i32::from_le_bytes(b.try_into().unwrap()),
            );
            let v = match op {
                0 | 4 => x.wrapping_add(y),
                1 => x.wrapping_mul(y),
                2 => x.max(y),
                _ => x.min(y),
            };
            v.to_le_bytes().to_vec()
        }
        U8 => {
            let (x, y) = (a[0], b[0]);
            vec![match op {
                0 | 4 => x.wrapping_add(y),
                1 => x.wrapping_mul(y),
                2 => x.max(y),
                _ => x.min(y),
            }]
        }
        _ => unreachable!(),
    }
}

fn divide(dt: c_int, a: &[u8], n: usize) -> Vec<u8> {
    match dt {
        F32 => (f32::from_le_bytes(a.try_into().unwrap()) / n as f32)
            .to_le_bytes()
            .to_vec(),
        BF16 => {
            let x = bf16::from_bits(u16::from_le_bytes(a.try_into().unwrap())).to_f32();
            bf16::from_f32(x / n as f32)
                .to_bits()
                .to_le_bytes()
                .to_vec()
        }
        I32 => (i32::from_le_bytes(a.try_into().unwrap()) / n as i32)
            .to_le_bytes()
            .to_vec(),
        U8 => vec![a[0] / n as u8],
        _ => unreachable!(),
    }
}

/// The reduction of `parts` (one per rank), folded left in rank order.
fn reduce_ref(dt: c_int, op: c_int, parts: &[Vec<u8>]) -> Vec<u8> {
    let e = es(dt);
    let n = parts.len();
    (0..parts[0].len() / e)
        .flat_map(|i| {
            let at = |p: &Vec<u8>| p[i * e..(i + 1) * e].to_vec();
            let mut acc = at(&parts[0]);
            for p in &parts[1..] {
                acc = combine(dt, op, &acc, &at(p));
            }
            if op == AVG { divide(dt, &acc, n) } else { acc }
        })
        .collect()
}

const GARBAGE: u8 = 0xa5;

/// One collective on this rank, checked against the reference. `k` numbers the operation
/// (the same on every rank) and picks the op and root.
#[allow(clippy::too_many_arguments)]
fn one_collective(
    c: C,
    stream: Option<&TestStream>,
    n: usize,
    r: usize,
    which: usize,
    dt: c_int,
    count: usize,
    in_place: bool,
    k: usize,
) {
    let e = es(dt);
    let op = (k % 5) as c_int;
    let root = k % n;
    let s = stream.map_or(std::ptr::null_mut(), TestStream::ptr);
    let done = || {
        if let Some(s) = stream {
            s.sync();
        }
    };
    let what =
        format!("coll {which} dt {dt} count {count} in_place {in_place} op {op} root {root} n {n}");
    let mine = input(dt, r, count);
    match which {
        // all-reduce
        0 => {
            let want = reduce_ref(
                dt,
                op,
                &(0..n).map(|q| input(dt, q, count)).collect::<Vec<_>>(),
            );
            let mut send = mine.clone();
            let mut recv = vec![GARBAGE; count * e];
            let (sp, rp) = if in_place {
                (
                    send.as_ptr() as *const c_void,
                    send.as_mut_ptr() as *mut c_void,
                )
            } else {
                (
                    send.as_ptr() as *const c_void,
                    recv.as_mut_ptr() as *mut c_void,
                )
            };
            ok(
                unsafe { ncclAllReduce(sp, rp, count, dt, op, c.0, s) },
                &what,
            );
            done();
            assert_eq!(if in_place { &send } else { &recv }, &want, "{what}");
        }
        // broadcast
        1 => {
            let want = input(dt, root, count);
            let mut send = mine.clone();
            let mut recv = vec![GARBAGE; count * e];
            let (sp, rp) = if in_place {
                (
                    send.as_ptr() as *const c_void,
                    send.as_mut_ptr() as *mut c_void,
                )
            } else {
                (
                    send.as_ptr() as *const c_void,
                    recv.as_mut_ptr() as *mut c_void,
                )
            };
            ok(
                unsafe { ncclBroadcast(sp, rp, count, dt, root as c_int, c.0, s) },
                &what,
            );
            done();
            assert_eq!(if in_place { &send } else { &recv }, &want, "{what}");
        }
        // reduce
        2 => {
            let want = reduce_ref(
                dt,
                op,
                &(0..n).map(|q| input(dt, q, count)).collect::<Vec<_>>(),
            );
            let mut send = mine.clone();
            let mut recv = vec![GARBAGE; count * e];
            let (sp, rp) = if in_place {
                (
                    send.as_ptr() as *const c_void,
                    send.as_mut_ptr() as *mut c_void,
                )
            } else {
                (
                    send.as_ptr() as *const c_void,
                    recv.as_mut_ptr() as *mut c_void,
                )
            };
            ok(
                unsafe { ncclReduce(sp, rp, count, dt, op, root as c_int, c.0, s) },
                &what,
            );
            done();
            let got = if in_place { &send } else { &recv };
            if r == root {
                assert_eq!(got, &want, "{what}");
            } else if in_place {
                assert_eq!(got, &mine, "{what}: a non-root's buffer changed");
            } else {
                assert!(
                    got.iter().all(|&b| b == GARBAGE),
                    "{what}: a non-root's recvbuff was written"
                );
            }
        }
        // all-gather
        3 => {
            let want: Vec<u8> = (0..n).flat_map(|q| input(dt, q, count)).collect();
            let mut recv = vec![GARBAGE; n * count * e];
            let send = mine.clone();
            let sp = if in_place {
                recv[r * count * e..(r + 1) * count * e].copy_from_slice(&mine);
                unsafe { recv.as_ptr().add(r * count * e) as *const c_void }
            } else {
                send.as_ptr() as *const c_void
            };
            ok(
                unsafe { ncclAllGather(sp, recv.as_mut_ptr() as *mut c_void, count, dt, c.0, s) },
                &what,
            );
            done();
            assert_eq!(recv, want, "{what}");
        }
        // reduce-scatter
        _ => {
            let full = reduce_ref(
                dt,
                op,
                &(0..n).map(|q| input(dt, q, n * count)).collect::<Vec<_>>(),
            );
            let want = full[r * count * e..(r + 1) * count * e].to_vec();
            let mut send = input(dt, r, n * count);
            let mut recv = vec![GARBAGE; count * e];
            let rp = if in_place {
                unsafe { send.as_mut_ptr().add(r * count * e) as *mut c_void }
            } else {
                recv.as_mut_ptr() as *mut c_void
            };
            ok(
                unsafe {
                    ncclReduceScatter(send.as_ptr() as *const c_void, rp, count, dt, op, c.0, s)
                },
                &what,
            );
            done();
            let got = if in_place {
                send[r * count * e..(r + 1) * count * e].to_vec()
            } else {
                recv
            };
            assert_eq!(got, want, "{what}");
        }
    }
}

fn every_collective_on(n: usize) {
    let id = uid();
    on_ranks(n, move |r| {
        let c = init(n, id, r);
        let stream = TestStream::new();
        let mut k = 0;
        for on_stream in [false, true] {
            for dt in [F32, BF16, I32, U8] {
                for count in [0, 1, 7, 65_539] {
                    for in_place in [false, true] {
                        for which in 0..5 {
                            let s = on_stream.then_some(&*stream);
                            one_collective(c, s, n, r, which, dt, count, in_place, k);
                            k += 1;
                        }
                    }
                }
            }
        }
        let mut a = -1;
        ok(unsafe { ncclCommGetAsyncError(c.0, &mut a) }, "async");
        assert_eq!(a, 0);
        drop(stream);
        ok(unsafe { ncclCommDestroy(c.0) }, "destroy");
    });
}

#[test]
fn every_collective_on_1_rank() {
    every_collective_on(1);
}

#[test]
fn every_collective_on_2_ranks() {
    every_collective_on(2);
}

#[test]
fn every_collective_on_3_ranks() {
    every_collective_on(3);
}

#[test]
fn every_collective_on_4_ranks() {
    every_collective_on(4);
}

#[test]
fn a_call_on_a_stream_returns_before_its_work_is_done() {
    let id = uid();
    on_ranks(2, move |r| {
        let c = init(2, id, r);
        let stream = TestStream::new();
        let gate = stream.hold();
        let send = input(F32, r, 7);
        let mut recv = vec![GARBAGE; 7 * 4];
        // The worker is held, so nothing queued can have run when the call returns.
        ok(
            unsafe {
                ncclAllReduce(
                    send.as_ptr().cast(),
                    recv.as_mut_ptr().cast(),
                    7,
                    F32,
                    SUM,
                    c.0,
                    stream.ptr(),
                )
            },
            "allreduce",
        );
        assert!(
            recv.iter().all(|&b| b == GARBAGE),
            "written before the stream ran it"
        );
        gate.send(()).unwrap();
        stream.sync();
        assert_eq!(
            recv,
            reduce_ref(F32, SUM, &[input(F32, 0, 7), input(F32, 1, 7)])
        );
        drop(stream);
        ok(unsafe { ncclCommDestroy(c.0) }, "destroy");
    });
}

#[test]
fn a_grouped_ring_exchange_does_not_deadlock() {
    for n in [1, 3, 4] {
        let id = uid();
        on_ranks(n, move |r| {
            let c = init(n, id, r);
            let stream = TestStream::new();
            for on_stream in [false, true] {
                let s = if on_stream {
                    stream.ptr()
                } else {
                    std::ptr::null_mut()
                };
                let next = (r + 1) % n;
                let prev = (r + n - 1) % n;
                let send = input(I32, r, 1000);
                let mut recv = vec![GARBAGE; 4000];
                ok(ncclGroupStart(), "group start");
                // The receive first: both ranks of a pair would wait in it if posts waited.
                ok(
                    unsafe { ncclRecv(recv.as_mut_ptr().cast(), 1000, I32, prev as c_int, c.0, s) },
                    "recv",
                );
                ok(
                    unsafe { ncclSend(send.as_ptr().cast(), 1000, I32, next as c_int, c.0, s) },
                    "send",
                );
                ok(unsafe { ncclGroupEnd() }, "group end");
                if on_stream {
                    stream.sync();
                }
                assert_eq!(recv, input(I32, prev, 1000), "rank {r} of {n}");
            }
            drop(stream);
            ok(unsafe { ncclCommDestroy(c.0) }, "destroy");
        });
    }
}

#[test]
fn split_into_halves_and_by_nocolor() {
    let id = uid();
    on_ranks(4, move |r| {
        let c = init(4, id, r);
        // Halves, each ordered by descending parent rank (key = -rank).
        let mut h = std::ptr::null_mut();
        ok(
            unsafe {
                ncclCommSplit(
                    c.0,
                    (r / 2) as c_int,
                    -(r as c_int),
                    &mut h,
                    std::ptr::null_mut(),
                )
            },
            "split",
        );
        let (mut cnt, mut me) = (0, 0);
        ok(unsafe { ncclCommCount(h, &mut cnt) }, "count");
        ok(unsafe { ncclCommUserRank(h, &mut me) }, "rank");
        assert_eq!((cnt, me), (2, 1 - (r % 2) as c_int), "rank {r}");
        let send = [r as i32 + 1];
        let mut recv = [0i32];
        ok(
            unsafe {
                ncclAllReduce(
                    send.as_ptr().cast(),
                    recv.as_mut_ptr().cast(),
                    1,
                    I32,
                    SUM,
                    h,
                    std::ptr::null_mut(),
                )
            },
            "allreduce on a half",
        );
        let lo = (r / 2) * 2;
        assert_eq!(recv[0], (lo + 1 + lo + 2) as i32);
        // Rank 3 takes no part: it gets no communicator; the others one of 3.
        let mut g = std::ptr::null_mut();
        let color = if r == 3 { abi::SPLIT_NOCOLOR } else { 5 };
        ok(
            unsafe { ncclCommSplit(c.0, color, 0, &mut g, std::ptr::null_mut()) },
            "split nocolor",
        );
        if r == 3 {
            assert!(g.is_null());
        } else {
            ok(unsafe { ncclCommCount(g, &mut cnt) }, "count");
            assert_eq!(cnt, 3);
            let mut recv = [0i32];
            ok(
                unsafe {
                    ncclAllReduce(
                        send.as_ptr().cast(),
                        recv.as_mut_ptr().cast(),
                        1,
                        I32,
                        SUM,
                        g,
                        std::ptr::null_mut(),
                    )
                },
                "allreduce on 3",
            );
            assert_eq!(recv[0], 1 + 2 + 3);
            ok(unsafe { ncclCommDestroy(g) }, "destroy");
        }
        ok(unsafe { ncclCommDestroy(h) }, "destroy");
        ok(unsafe { ncclCommDestroy(c.0) }, "destroy");
    });
}

fn wait_async(c: NcclComm, want: c_int) {
    let end = Instant::now() + DEADLINE;
    loop {
        let mut a = -1;
        ok(unsafe { ncclCommGetAsyncError(c, &mut a) }, "async");
        if a == want {
            return;
        }
        assert_eq!(a, abi::IN_PROGRESS, "{}", last(c));
        assert!(Instant::now() < end, "still in progress after {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn non_blocking_init_and_split_are_in_progress_then_done() {
    let id = uid();
    let first = Arc::new(Barrier::new(3));
    on_ranks(3, move |r| {
        let mut cfg = Config::new(false);
        let mut c = std::ptr::null_mut();
        if r != 0 {
            first.wait(); // until rank 0 saw its init in progress
        }
        let rc = unsafe { ncclCommInitRankConfig(&mut c, 3, id, r as c_int, &mut cfg) };
        assert_eq!(rc, abi::IN_PROGRESS);
        if r == 0 {
            let mut a = -1;
            ok(unsafe { ncclCommGetAsyncError(c, &mut a) }, "async");
            assert_eq!(a, abi::IN_PROGRESS, "rank 0 joined alone");
            first.wait();
        }
        wait_async(c, 0);
        first.wait();
        let mut s = std::ptr::null_mut();
        if r != 0 {
            first.wait(); // until rank 0 saw its split in progress
        }
        let rc = unsafe { ncclCommSplit(c, 0, r as c_int, &mut s, &mut cfg) };
        assert_eq!(rc, abi::IN_PROGRESS);
        if r == 0 {
            let mut a = -1;
            ok(unsafe { ncclCommGetAsyncError(s, &mut a) }, "async");
            assert_eq!(a, abi::IN_PROGRESS, "rank 0 split alone");
            first.wait();
        }
        wait_async(s, 0);
        let mut cnt = 0;
        ok(unsafe { ncclCommCount(s, &mut cnt) }, "count");
        assert_eq!(cnt, 3);
        ok(unsafe { ncclCommDestroy(s) }, "destroy");
        ok(unsafe { ncclCommDestroy(c) }, "destroy");
    });
}

#[test]
fn bad_input_is_an_error_naming_it() {
    let id = uid();
    let c = init(1, id, 0).0;
    let null = std::ptr::null_mut();
    let buf = [0u8; 64];
    let mut out = [0u8; 64];
    let (b, o) = (
        buf.as_ptr() as *const c_void,
        out.as_mut_ptr() as *mut c_void,
    );
    let check = |r: c_int, code: c_int, words: &str| {
        assert_eq!(r, code, "{words}: {}", last(null));
        assert!(
            last(null).contains(words),
            "{words} not in {:?}",
            last(null)
        );
    };
    let inv = abi::INVALID_ARGUMENT;
    check(
        unsafe { ncclAllReduce(b, o, 4, F32, SUM, null, null) },
        inv,
        "comm is null",
    );
    check(
        unsafe { ncclAllReduce(std::ptr::null(), o, 4, F32, SUM, c, null) },
        inv,
        "sendbuff is null",
    );
    check(
        unsafe { ncclAllReduce(b, null, 4, F32, SUM, c, null) },
        inv,
        "recvbuff is null",
    );
    check(
        unsafe { ncclAllReduce(b, o, 4, 42, SUM, c, null) },
        inv,
        "ncclDataType_t 42",
    );
    check(
        unsafe { ncclAllReduce(b, o, 4, F32, 9, c, null) },
        inv,
        "ncclRedOp_t 9",
    );
    check(
        unsafe { ncclBroadcast(b, o, 4, F32, 1, c, null) },
        inv,
        "root 1",
    );
    check(unsafe { ncclSend(b, 4, F32, -1, c, null) }, inv, "peer -1");
    check(
        unsafe { ncclAllReduce(b, o, usize::MAX / 2, F32, SUM, c, null) },
        inv,
        "too large",
    );
    let mut fake = StreamAbi {
        magic: 7,
        launch_host_func: launch,
    };
    check(
        unsafe { ncclAllReduce(b, o, 4, F32, SUM, c, (&mut fake as *mut StreamAbi).cast()) },
        inv,
        "rcommstr",
    );
    let mut h = null;
    check(
        unsafe { ncclCommInitRank(&mut h, 0, id, 0) },
        inv,
        "nranks 0",
    );
    check(
        unsafe { ncclCommInitRank(&mut h, 2, id, 3) },
        inv,
        "rank 3 of 2",
    );
    check(
        unsafe { ncclCommInitRank(std::ptr::null_mut(), 2, id, 0) },
        inv,
        "comm is null",
    );
    let zero = UniqueId { internal: [0; 128] };
    check(
        unsafe { ncclCommInitRank(&mut h, 1, zero, 0) },
        inv,
        "unique id",
    );
    let mut cfg = Config::new(true);
    cfg.magic = 1;
    check(
        unsafe { ncclCommInitRankConfig(&mut h, 1, id, 0, &mut cfg) },
        inv,
        "magic",
    );
    cfg = Config::new(true);
    cfg.size = 4;
    check(
        unsafe { ncclCommInitRankConfig(&mut h, 1, id, 0, &mut cfg) },
        inv,
        "too short",
    );
    check(
        unsafe { ncclGroupEnd() },
        abi::INVALID_USAGE,
        "without ncclGroupStart",
    );
    check(
        unsafe { ncclGetVersion(std::ptr::null_mut()) },
        inv,
        "version is null",
    );
    check(
        unsafe { rcommNcclStandInLive(std::ptr::null_mut()) },
        inv,
        "out is null",
    );
    check(
        unsafe { ncclCommGetAsyncError(c, std::ptr::null_mut()) },
        inv,
        "asyncError is null",
    );
    check(
        unsafe { ncclCommSplit(c, -2, 0, &mut h, null.cast()) },
        inv,
        "color -2",
    );
    // A bad call inside a group: the group's end reports it, and nothing of the group runs.
    ok(ncclGroupStart(), "group");
    let mut good = [0u8; 4];
    ok(
        unsafe { ncclAllReduce(b, good.as_mut_ptr().cast(), 1, F32, SUM, c, null) },
        "good call",
    );
    check(unsafe { ncclRecv(o, 4, U8, 5, c, null) }, inv, "peer 5");
    check(unsafe { ncclGroupEnd() }, inv, "none of it ran");
    assert_eq!(good, [0; 4], "a call of a failed group ran");
    // The communicator is still usable, and answers as a one-rank communicator on device 0.
    let (mut cnt, mut me, mut dev) = (-1, -1, -1);
    ok(unsafe { ncclCommCount(c, &mut cnt) }, "count");
    ok(unsafe { ncclCommUserRank(c, &mut me) }, "rank");
    ok(unsafe { ncclCommCuDevice(c, &mut dev) }, "device");
    assert_eq!((cnt, me, dev), (1, 0, 0));
    assert_eq!(
        err_text(abi::REMOTE),
        "remote process exited or there was a network error"
    );
    assert_eq!(err_text(0), "no error");
    assert_eq!(err_text(99), "unknown result code");
    let mut v = 0;
    ok(unsafe { ncclGetVersion(&mut v) }, "version");
    assert_eq!(v, 22304);
    ok(
        unsafe { ncclAllReduce(b, o, 4, F32, SUM, c, null) },
        "after the bad calls",
    );
    ok(unsafe { ncclCommDestroy(c) }, "destroy");
    assert!(nccl::is_invalid(inv));
}

#[test]
fn a_count_mismatch_is_a_remote_error_naming_it_on_every_rank() {
    let id = uid();
    on_ranks(3, move |r| {
        let c = init(3, id, r);
        let send = [1u8; 16];
        let mut recv = [0u8; 16];
        let count = if r == 2 { 8 } else { 7 };
        let rc = unsafe {
            ncclAllReduce(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                count,
                U8,
                SUM,
                c.0,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, abi::REMOTE, "rank {r}");
        let text = last(c.0);
        assert!(
            text.contains("count mismatch") && text.contains("rank 2 gave 8"),
            "{text}"
        );
        let mut a = 0;
        ok(unsafe { ncclCommGetAsyncError(c.0, &mut a) }, "async");
        assert_eq!(a, abi::REMOTE);
        assert_eq!(recv, [0; 16], "written despite the mismatch");
        ok(unsafe { ncclCommDestroy(c.0) }, "destroy");
    });
}

fn async_of(c: NcclComm) -> c_int {
    let mut a = -1;
    ok(unsafe { ncclCommGetAsyncError(c, &mut a) }, "async");
    a
}

#[test]
fn a_rank_joining_twice_or_with_other_nranks_is_refused_and_the_others_go_on() {
    let id = uid();
    let mut cfg = Config::new(false);
    // Two rank 0s, without waiting: whichever the hub sees second is refused.
    let mut a = std::ptr::null_mut();
    let mut b = std::ptr::null_mut();
    for h in [&mut a, &mut b] {
        let rc = unsafe { ncclCommInitRankConfig(h, 2, id, 0, &mut cfg) };
        assert_eq!(rc, abi::IN_PROGRESS);
    }
    let end = Instant::now() + DEADLINE;
    let (loser, winner) = loop {
        match (async_of(a), async_of(b)) {
            (abi::IN_PROGRESS, abi::IN_PROGRESS) => {}
            (abi::INVALID_ARGUMENT, abi::IN_PROGRESS) => break (a, b),
            (abi::IN_PROGRESS, abi::INVALID_ARGUMENT) => break (b, a),
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < end, "neither rank 0 was refused");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(
        last(loser).contains("rank 0 of 2 joined twice"),
        "{}",
        last(loser)
    );
    ok(unsafe { ncclCommDestroy(loser) }, "destroy the refused one");
    // nranks differs from the first join's: refused at once.
    let mut h = std::ptr::null_mut();
    let rc = unsafe { ncclCommInitRank(&mut h, 3, id, 1) };
    assert_eq!(rc, abi::INVALID_ARGUMENT);
    let text = last(std::ptr::null_mut());
    assert!(
        text.contains("says nranks 3") && text.contains("said 2"),
        "{text}"
    );
    assert!(h.is_null());
    let c1 = init(2, id, 1);
    wait_async(winner, 0);
    ok(unsafe { ncclCommDestroy(winner) }, "destroy");
    ok(unsafe { ncclCommDestroy(c1.0) }, "destroy");
}

#[test]
fn the_built_libnccl_so_loads_and_runs_through_dlopen() {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    let lib = [dir.join("libnccl.so"), dir.join("../libnccl.so")]
        .into_iter()
        .find(|p| p.exists());
    let Some(lib) = lib else {
        rcomm_testkit::skip(&format!("no libnccl.so next to {}", exe.display()));
        return;
    };
    let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {}", lib.display());
    let sym = |s: &CStr| {
        let p = unsafe { libc::dlsym(h, s.as_ptr()) };
        assert!(!p.is_null(), "{s:?} missing");
        p
    };
    for s in [
        c"ncclGetVersion",
        c"ncclGetErrorString",
        c"ncclGetLastError",
        c"ncclGetUniqueId",
        c"ncclCommInitRank",
        c"ncclCommInitRankConfig",
        c"ncclCommSplit",
        c"ncclCommGetAsyncError",
        c"ncclCommAbort",
        c"ncclCommFinalize",
        c"ncclCommDestroy",
        c"ncclCommCount",
        c"ncclCommUserRank",
        c"ncclCommCuDevice",
        c"ncclAllReduce",
        c"ncclBroadcast",
        c"ncclReduce",
        c"ncclAllGather",
        c"ncclReduceScatter",
        c"ncclSend",
        c"ncclRecv",
        c"ncclGroupStart",
        c"ncclGroupEnd",
        c"rcommNcclStandInLive",
    ] {
        sym(s);
    }
    unsafe {
        let version: unsafe extern "C" fn(*mut c_int) -> c_int =
            std::mem::transmute(sym(c"ncclGetVersion"));
        let mut v = 0;
        assert_eq!(version(&mut v), 0);
        assert_eq!(v, 22304);
        let get_id: unsafe extern "C" fn(*mut UniqueId) -> c_int =
            std::mem::transmute(sym(c"ncclGetUniqueId"));
        let init: unsafe extern "C" fn(*mut NcclComm, c_int, UniqueId, c_int) -> c_int =
            std::mem::transmute(sym(c"ncclCommInitRank"));
        let all_reduce: unsafe extern "C" fn(
            *const c_void,
            *mut c_void,
            usize,
            c_int,
            c_int,
            NcclComm,
            *mut c_void,
        ) -> c_int = std::mem::transmute(sym(c"ncclAllReduce"));
        let destroy: unsafe extern "C" fn(NcclComm) -> c_int =
            std::mem::transmute(sym(c"ncclCommDestroy"));
        let live: unsafe extern "C" fn(*mut u64) -> c_int =
            std::mem::transmute(sym(c"rcommNcclStandInLive"));
        let mut id = UniqueId { internal: [0; 128] };
        assert_eq!(get_id(&mut id), 0);
        let mut c = std::ptr::null_mut();
        assert_eq!(init(&mut c, 1, id, 0), 0);
        let send = [1.5f32, 2.0];
        let mut recv = [0f32; 2];
        assert_eq!(
            all_reduce(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                2,
                F32,
                AVG,
                c,
                std::ptr::null_mut()
            ),
            0
        );
        assert_eq!(recv, send);
        assert_eq!(destroy(c), 0);
        let end = Instant::now() + DEADLINE;
        loop {
            let mut v = [9u64; 4];
            assert_eq!(live(v.as_mut_ptr()), 0);
            if v == [0; 4] {
                break;
            }
            assert!(Instant::now() < end, "left alive: {v:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

// ---- rank processes ----

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn id_hex(id: &UniqueId) -> String {
    id.internal.iter().map(|b| format!("{b:02x}")).collect()
}

fn id_from_hex(s: &str) -> UniqueId {
    let mut id = UniqueId { internal: [0; 128] };
    for (i, b) in id.internal.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    id
}

/// This test binary again, running `role_entry` as `role`.
fn spawn_role(role: &str, env: &[(&str, String)], stdin: bool, stdout: bool) -> Proc {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "role_entry",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE_VAR, role)
    .env_remove("NCCL_STANDIN_FAULT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if stdout {
        cmd.stdout(std::process::Stdio::piped());
    }
    if stdin {
        cmd.stdin(std::process::Stdio::piped());
    } else {
        cmd.stdin(std::process::Stdio::null());
    }
    Proc(Some(cmd.spawn().expect("spawn a rank process")))
}

/// A rank process, killed if the test fails before it was waited for.
struct Proc(Option<std::process::Child>);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn wait_exit(mut p: Proc, limit: Duration) -> std::process::ExitStatus {
    let mut ch = p.0.take().unwrap();
    let end = Instant::now() + limit;
    loop {
        if let Some(s) = ch.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > end {
            let _ = ch.kill();
            let _ = ch.wait();
            panic!("a rank process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A rank process's body: ignored in a normal run, run (`--ignored`) by the tests below in
/// the child processes they start.
#[test]
#[ignore = "a rank process's body, run in child processes by the fault tests"]
fn role_entry() {
    let role =
        std::env::var(ROLE_VAR).expect("role_entry runs in a rank process, with its role set");
    match role.as_str() {
        "death-observer" => death_observer(),
        "hang-observer" => hang_observer(),
        "hub-death-observer" => hub_death_observer(),
        "finalize-observer" => finalize_observer(),
        "peer" => peer(),
        r => panic!("unknown role {r}"),
    }
}

/// A rank process: joins, runs `NCCL_STANDIN_TEST_COLLS` all-reduces on the null stream, and
/// exits 0 if they all succeed, or if one failed with what `NCCL_STANDIN_TEST_EXPECT` names.
/// With `NCCL_STANDIN_TEST_ABORT_ON_STDIN`, a thread aborts the communicator when stdin closes.
fn peer() {
    let env = |k: &str| std::env::var(k).unwrap();
    let id = match env("NCCL_STANDIN_TEST_ID").as_str() {
        // This process holds the hub: it says the id on stdout.
        "make" => {
            let id = uid();
            println!("ID {}", id_hex(&id));
            std::io::Write::flush(&mut std::io::stdout()).unwrap();
            id
        }
        hex => id_from_hex(hex),
    };
    let n: usize = env("NCCL_STANDIN_TEST_NRANKS").parse().unwrap();
    let r: usize = env("NCCL_STANDIN_TEST_RANK").parse().unwrap();
    let colls: usize = env("NCCL_STANDIN_TEST_COLLS").parse().unwrap();
    let expect = std::env::var("NCCL_STANDIN_TEST_EXPECT").ok();
    let c = init(n, id, r);
    let abort_mode = std::env::var_os("NCCL_STANDIN_TEST_ABORT_ON_STDIN").is_some();
    if abort_mode {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut s);
            let c = c;
            assert_eq!(unsafe { ncclCommAbort(c.0) }, 0);
            // The aborted collective returned: nothing else to do.
            std::process::exit(0);
        });
    }
    for k in 0..colls {
        let send = [r as u32 + 1; 4];
        let mut recv = [0u32; 4];
        let rc = unsafe {
            ncclAllReduce(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                4,
                3,
                SUM,
                c.0,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 && abort_mode {
            // Aborted: `c` is gone, and the aborting thread ends the process.
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        if rc != 0 {
            let text = last(c.0);
            match &expect {
                Some(w) if rc == abi::REMOTE && text.contains(w.as_str()) => {
                    eprintln!("rank {r}: collective {k} failed as expected: {text}");
                    std::process::exit(0);
                }
                _ => panic!("rank {r}: collective {k}: {rc} {text}"),
            }
        }
        assert_eq!(recv, [(n * (n + 1) / 2) as u32; 4]);
    }
    if std::env::var_os("NCCL_STANDIN_TEST_FINALIZE_EXIT").is_some() {
        // Done with the communicator, then gone without destroying it.
        ok(unsafe { ncclCommFinalize(c.0) }, "finalize");
        unsafe { libc::_exit(0) };
    }
    assert!(
        expect.is_none(),
        "rank {r}: no failure, expected {expect:?}"
    );
    ok(unsafe { ncclCommDestroy(c.0) }, "destroy");
}

fn wait_all_gone(base_threads: usize, base_fds: usize) {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let (l, t, f) = (live(), threads(), fds());
        if l == [0; 4] && t == base_threads && f == base_fds {
            return;
        }
        assert!(
            Instant::now() < end,
            "left behind: live {l:?}, threads {t} (were {base_threads}), fds {f} (were {base_fds})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Rank 0 of 3 (hub holder): rank 2's process `_exit`s at its 3rd collective; rank 0's
/// operations on a stream must end, with `ncclRemoteError` naming rank 2, within seconds.
fn death_observer() {
    let (t0, f0) = (threads(), fds());
    let id = uid();
    let base = |r: usize| {
        vec![
            ("NCCL_STANDIN_TEST_ID", id_hex(&id)),
            ("NCCL_STANDIN_TEST_NRANKS", "3".into()),
            ("NCCL_STANDIN_TEST_RANK", r.to_string()),
            ("NCCL_STANDIN_TEST_COLLS", "10".into()),
        ]
    };
    let mut e1 = base(1);
    e1.push((
        "NCCL_STANDIN_TEST_EXPECT",
        "rank 2 of communicator 1 disconnected".into(),
    ));
    let mut e2 = base(2);
    e2.push(("NCCL_STANDIN_FAULT", "exit@3".into()));
    let p1 = spawn_role("peer", &e1, false, false);
    let p2 = spawn_role("peer", &e2, false, false);
    let c = init(3, id, 0);
    let stream = TestStream::new();
    let mut failed_at = None;
    for k in 0..10 {
        let send = [1u32; 4];
        let mut recv = [7u32; 4];
        let t = Instant::now();
        ok(
            unsafe {
                ncclAllReduce(
                    send.as_ptr().cast(),
                    recv.as_mut_ptr().cast(),
                    4,
                    3,
                    SUM,
                    c.0,
                    stream.ptr(),
                )
            },
            "queue",
        );
        assert!(
            stream.sync_within(Duration::from_secs(10)),
            "collective {k} still running after 10 s"
        );
        // The loss may already be known after a collective that completed: its output
        // tells which one failed.
        if recv != [1 + 2 + 3; 4] {
            assert_eq!(recv, [7; 4], "collective {k} wrote something else");
            assert_eq!(async_of(c.0), abi::REMOTE);
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "noticed after {:?}",
                t.elapsed()
            );
            failed_at = Some(k);
            break;
        }
    }
    assert_eq!(failed_at, Some(2), "the third collective should fail");
    let text = last(c.0);
    assert!(
        text.contains("rank 2 of communicator 1 disconnected"),
        "{text}"
    );
    // Later calls fail at once with the same error.
    let send = [1u32; 4];
    let mut recv = [7u32; 4];
    let rc = unsafe {
        ncclAllReduce(
            send.as_ptr().cast(),
            recv.as_mut_ptr().cast(),
            4,
            3,
            SUM,
            c.0,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, abi::REMOTE);
    assert_eq!(
        wait_exit(p2, DEADLINE).code(),
        Some(137),
        "rank 2 exits as injected"
    );
    assert!(wait_exit(p1, DEADLINE).success(), "rank 1 saw the loss");
    drop(stream);
    ok(unsafe { ncclCommDestroy(c.0) }, "destroy");
    wait_all_gone(t0, f0);
}

/// Rank 0 of 2 (hub holder): rank 1's process never takes part in its 2nd collective; rank
/// 0's waits in it on a stream until `ncclCommAbort` from this thread; then rank 1 aborts
/// too, and nothing of the stand-in is left in this process.
fn hang_observer() {
    let (t0, f0) = (threads(), fds());
    let id = uid();
    let env = vec![
        ("NCCL_STANDIN_TEST_ID", id_hex(&id)),
        ("NCCL_STANDIN_TEST_NRANKS", "2".into()),
        ("NCCL_STANDIN_TEST_RANK", "1".into()),
        ("NCCL_STANDIN_TEST_COLLS", "5".into()),
        ("NCCL_STANDIN_TEST_ABORT_ON_STDIN", "1".into()),
        ("NCCL_STANDIN_FAULT", "hang@2".into()),
    ];
    let mut p1 = spawn_role("peer", &env, true, false);
    let c = init(2, id, 0);
    let stream = TestStream::new();
    let send = [1u32; 4];
    let mut recv = [7u32; 4];
    for k in 0..2 {
        ok(
            unsafe {
                ncclAllReduce(
                    send.as_ptr().cast(),
                    recv.as_mut_ptr().cast(),
                    4,
                    3,
                    SUM,
                    c.0,
                    stream.ptr(),
                )
            },
            "queue",
        );
        if k == 0 {
            stream.sync();
            assert_eq!(recv, [3; 4]);
            recv = [7; 4];
        }
    }
    assert!(
        !stream.sync_within(Duration::from_secs(2)),
        "the collective rank 1 never joins finished"
    );
    ok(unsafe { ncclCommAbort(c.0) }, "abort");
    assert!(
        stream.sync_within(Duration::from_secs(10)),
        "abort did not wake the stream"
    );
    assert_eq!(recv, [7; 4], "an aborted collective wrote its output");
    drop(stream);
    drop(p1.0.as_mut().unwrap().stdin.take());
    assert!(
        wait_exit(p1, DEADLINE).success(),
        "rank 1 aborted and exited"
    );
    wait_all_gone(t0, f0);
}

/// Rank 1 of 2: rank 0's process holds the hub and `_exit`s at its 2nd collective; rank 1's
/// operation on a stream must end with `ncclRemoteError` naming rank 0 as the hub's process.
fn hub_death_observer() {
    let (t0, f0) = (threads(), fds());
    let env = vec![
        ("NCCL_STANDIN_TEST_ID", "make".to_string()),
        ("NCCL_STANDIN_TEST_NRANKS", "2".into()),
        ("NCCL_STANDIN_TEST_RANK", "0".into()),
        ("NCCL_STANDIN_TEST_COLLS", "10".into()),
        ("NCCL_STANDIN_FAULT", "exit@2".into()),
    ];
    let mut p0 = spawn_role("peer", &env, false, true);
    let mut out = std::io::BufReader::new(p0.0.as_mut().unwrap().stdout.take().unwrap());
    // libtest's "test role_entry ... " precedes it on the line.
    let hex = std::io::BufRead::lines(&mut out)
        .map_while(Result::ok)
        .find_map(|l| l.split_once("ID ").map(|(_, h)| h.trim().to_string()))
        .expect("rank 0 printed no id");
    let id = id_from_hex(&hex);
    let c = init(2, id, 1);
    let stream = TestStream::new();
    let mut failed_at = None;
    for k in 0..10 {
        let send = [2u32; 4];
        let mut recv = [7u32; 4];
        ok(
            unsafe {
                ncclAllReduce(
                    send.as_ptr().cast(),
                    recv.as_mut_ptr().cast(),
                    4,
                    3,
                    SUM,
                    c.0,
                    stream.ptr(),
                )
            },
            "queue",
        );
        assert!(
            stream.sync_within(Duration::from_secs(10)),
            "collective {k} still running after 10 s"
        );
        // The loss may already be known after a collective that completed: its output
        // tells which one failed.
        if recv != [1 + 2; 4] {
            assert_eq!(recv, [7; 4], "collective {k} wrote something else");
            assert_eq!(async_of(c.0), abi::REMOTE);
            failed_at = Some(k);
            break;
        }
    }
    assert_eq!(failed_at, Some(1), "the second collective should fail");
    let text = last(c.0);
    assert!(
        text.contains("rank 0 of communicator 1 disconnected (the hub's process exited)"),
        "{text}"
    );
    assert_eq!(
        wait_exit(p0, DEADLINE).code(),
        Some(137),
        "rank 0 exits as injected"
    );
    // Open until rank 0 is gone: its writes must not meet a closed pipe.
    drop(out);
    drop(stream);
    ok(unsafe { ncclCommDestroy(c.0) }, "destroy");
    wait_all_gone(t0, f0);
}

/// Rank 0 of 2: rank 1 finalizes its communicator and exits without destroying it; that is
/// no failure of rank 0's communicator.
fn finalize_observer() {
    let (t0, f0) = (threads(), fds());
    let id = uid();
    let env = vec![
        ("NCCL_STANDIN_TEST_ID", id_hex(&id)),
        ("NCCL_STANDIN_TEST_NRANKS", "2".into()),
        ("NCCL_STANDIN_TEST_RANK", "1".into()),
        ("NCCL_STANDIN_TEST_COLLS", "3".into()),
        ("NCCL_STANDIN_TEST_FINALIZE_EXIT", "1".into()),
    ];
    let p1 = spawn_role("peer", &env, false, false);
    let c = init(2, id, 0);
    for _ in 0..3 {
        let send = [1u32; 4];
        let mut recv = [0u32; 4];
        ok(
            unsafe {
                ncclAllReduce(
                    send.as_ptr().cast(),
                    recv.as_mut_ptr().cast(),
                    4,
                    3,
                    SUM,
                    c.0,
                    std::ptr::null_mut(),
                )
            },
            "allreduce",
        );
        assert_eq!(recv, [3; 4]);
    }
    assert!(
        wait_exit(p1, DEADLINE).success(),
        "rank 1 finalized and exited"
    );
    // Its connection's close has reached the hub once the hub's reader of it is gone.
    let end = Instant::now() + DEADLINE;
    while live()[2] > 1 {
        assert!(
            Instant::now() < end,
            "the hub never saw rank 1 go: {:?}",
            live()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(async_of(c.0), 0, "{}", last(c.0));
    ok(unsafe { ncclCommDestroy(c.0) }, "destroy");
    wait_all_gone(t0, f0);
}

fn run_observer(role: &str) {
    let ch = spawn_role(role, &[], false, false);
    let s = wait_exit(ch, DEADLINE);
    assert!(s.success(), "{role} failed: {s} (its output is above)");
}

#[test]
fn a_rank_process_dying_mid_collective_is_a_remote_error_naming_it() {
    run_observer("death-observer");
}

#[test]
fn a_hanging_rank_blocks_until_abort_and_nothing_is_left_behind() {
    run_observer("hang-observer");
}

#[test]
fn the_hub_s_process_dying_is_a_remote_error_naming_its_rank() {
    run_observer("hub-death-observer");
}

#[test]
fn a_rank_that_finalized_may_exit_without_failing_the_others() {
    run_observer("finalize-observer");
}
