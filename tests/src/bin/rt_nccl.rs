//! Rank program: device collectives handed to NCCL — the tests' stand-in libnccl
//! (`RCOMM_NCCL_LIB`) over the GPU stand-in (`RCOMM_GPU_STANDIN=distinct`: a GPU per rank) —
//! under `RCOMM_GPU_BACKEND=auto`. Each rank prints `rank <r>: ok <case>` per case passed.
//!
//! `rt_nccl <case>`:
//! - `choice nccl|rcomm`: which engine `auto` chose, read from the flight recorder;
//! - `table`: every regular device collective and a grouped send/receive against sequential
//!   references, then a 2×2 mesh whose two dimensions get NCCL communicators by split;
//! - `enqueue`: a stream-ordered allreduce returns while the stream is held busy by an
//!   earlier host function, and its result is there once that is let go;
//! - `budget`: per collective, no host wait and exactly one NCCL call in the stream-ordered
//!   form, no host wait in the plain form;
//! - `die`: rank 2 dies in its third NCCL collective (`NCCL_STANDIN_FAULT=exit@3`); the others
//!   get `PeerLost` naming it, and abort leaves nothing of the stand-in alive;
//! - `hang`: rank 2 never joins its third (`hang@3`); every rank gets `Timeout`;
//! - `hang-stream`: the same with stream-ordered calls: the watchdog aborts at the deadline;
//! - `revoke`: rank 0 revokes a communicator instead of joining; the others get `Revoked`;
//! - `checked`: under `RCOMM_CHECK=1` a call whose count differs on one rank is `CollMismatch`.

use rcomm::gpu::{DeviceBuffer, DeviceMem, DeviceMemMut};
use rcomm::{CommError, Communicator, Op, World};
use std::time::{Duration, Instant};

fn ok(r: u32, case: &str) {
    println!("rank {r}: ok {case}");
}

fn dev_of<T: bytemuck::Pod>(v: &[T]) -> DeviceBuffer {
    DeviceBuffer::from_host(0, bytemuck::cast_slice(v)).expect("alloc")
}

fn host_of<T: bytemuck::Pod>(b: &DeviceBuffer) -> Vec<T> {
    let bytes = b.to_vec().expect("read");
    let mut v = vec![T::zeroed(); bytes.len() / size_of::<T>()];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&bytes);
    v
}

/// The algorithm of the last collective on `c`, as its flight record says.
fn algo(c: &Communicator) -> &'static str {
    c.last_collective().map_or("", |r| r.algo)
}

/// Rank `r`'s input of `n` small integers (sums of them are exact in any order).
fn input(r: u32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((r as usize * 7 + i * 3) % 11) as f32)
        .collect()
}

fn choice(w: &World, want: &str) {
    let (r, n) = (w.rank(), w.size());
    let mut a = dev_of(&input(r, 33));
    w.allreduce_device::<f32>(&mut a, Op::Sum)
        .expect("allreduce");
    let expect: Vec<f32> = (0..33)
        .map(|i| (0..n).map(|q| input(q, 33)[i]).sum())
        .collect();
    assert_eq!(host_of::<f32>(&a), expect);
    let ran = algo(w);
    assert_eq!(
        ran == "nccl",
        want == "nccl",
        "auto ran {ran:?}, wanted {want}"
    );
    ok(r, &format!("choice {want}"));
}

fn table(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let len = 1000;
    // allreduce, in place and out of place.
    let mut a = dev_of(&input(r, len));
    w.allreduce_device::<f32>(&mut a, Op::Sum)
        .expect("allreduce");
    let sum: Vec<f32> = (0..len)
        .map(|i| (0..n).map(|q| input(q, len)[i]).sum())
        .collect();
    assert_eq!(host_of::<f32>(&a), sum);
    assert_eq!(algo(w), "nccl");
    let s = dev_of(&input(r, len));
    let mut m = dev_of(&vec![0f32; len]);
    w.allreduce_device_into::<f32>(&s, &mut m, Op::Max)
        .expect("allreduce max");
    let max: Vec<f32> = (0..len)
        .map(|i| (0..n).map(|q| input(q, len)[i]).fold(f32::MIN, f32::max))
        .collect();
    assert_eq!(host_of::<f32>(&m), max);
    ok(r, "allreduce");
    // bcast from every root.
    for root in 0..n {
        let mut b = dev_of(&if r == root {
            input(root + 100, 77)
        } else {
            vec![0.0; 77]
        });
        w.bcast_device(&mut b, root).expect("bcast");
        assert_eq!(host_of::<f32>(&b), input(root + 100, 77), "root {root}");
        assert_eq!(algo(w), "nccl");
    }
    ok(r, "bcast");
    // reduce to rank 1.
    let mut out = dev_of(&vec![0f32; len]);
    w.reduce_device::<f32>(&s, &mut out, Op::Sum, 1)
        .expect("reduce");
    if r == 1 {
        assert_eq!(host_of::<f32>(&out), sum);
    }
    assert_eq!(algo(w), "nccl");
    ok(r, "reduce");
    // allgather.
    let mine: Vec<u8> = (0..40).map(|i| (r * 40 + i) as u8).collect();
    let mut g = dev_of(&vec![0u8; 40 * n as usize]);
    w.allgather_device(&dev_of(&mine), &mut g)
        .expect("allgather");
    let all: Vec<u8> = (0..40 * n).map(|i| i as u8).collect();
    assert_eq!(host_of::<u8>(&g), all);
    assert_eq!(algo(w), "nccl");
    ok(r, "allgather");
    // reduce_scatter: block `r` of the sum.
    let blk = 25;
    let mut rs = dev_of(&vec![0f32; blk]);
    w.reduce_scatter_device::<f32>(&dev_of(&input(r, blk * n as usize)), &mut rs, Op::Sum)
        .expect("reduce_scatter");
    let full: Vec<f32> = (0..blk * n as usize)
        .map(|i| (0..n).map(|q| input(q, blk * n as usize)[i]).sum())
        .collect();
    assert_eq!(
        host_of::<f32>(&rs),
        full[r as usize * blk..(r as usize + 1) * blk]
    );
    assert_eq!(algo(w), "nccl");
    ok(r, "reduce_scatter");
    // alltoall: block j from rank i is i*16+j.
    let send: Vec<u8> = (0..n).flat_map(|j| [(r * 16 + j) as u8; 9]).collect();
    let mut recv = dev_of(&vec![0u8; 9 * n as usize]);
    w.alltoall_device(&dev_of(&send), &mut recv)
        .expect("alltoall");
    let want: Vec<u8> = (0..n).flat_map(|i| [(i * 16 + r) as u8; 9]).collect();
    assert_eq!(host_of::<u8>(&recv), want);
    assert_eq!(algo(w), "nccl");
    ok(r, "alltoall");
    // A grouped send/receive with both neighbours.
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    let v = |from: u32, to: u32| -> Vec<u8> {
        (0..300).map(|i| (from * 31 + to * 7 + i) as u8).collect()
    };
    let (sr, sl) = (dev_of(&v(r, right)), dev_of(&v(r, left)));
    let (mut fl, mut fr) = (dev_of(&vec![0u8; 300]), dev_of(&vec![0u8; 300]));
    let calls = rcomm::gpu::nccl_stats().calls;
    {
        let sends = [(sr.device_ref(), right), (sl.device_ref(), left)];
        let mut recvs = [(fl.device_mut(), left), (fr.device_mut(), right)];
        w.group_device(&sends, &mut recvs, rcomm::Tag(5))
            .expect("group");
    }
    assert!(
        rcomm::gpu::nccl_stats().calls >= calls + 6,
        "the group went to NCCL (start, 2 sends, 2 receives, end)"
    );
    assert_eq!(host_of::<u8>(&fl), v(left, r));
    assert_eq!(host_of::<u8>(&fr), v(right, r));
    ok(r, "group");
    // A 2×2 mesh: each dimension's communicator gets its NCCL communicator by split.
    let splits = rcomm::gpu::nccl_stats().splits;
    let mesh = rcomm::Mesh::new(w, &[("dp", 2), ("tp", 2)]).expect("mesh");
    assert_eq!(
        rcomm::gpu::nccl_stats().splits,
        splits + 2,
        "one split per dimension"
    );
    for dim in ["dp", "tp"] {
        let c = mesh.comm(dim).expect("dim");
        let mut who = vec![0u32; c.size() as usize];
        c.allgather(&[r], &mut who).expect("members");
        let mut a = dev_of(&input(r, 64));
        c.allreduce_device::<f32>(&mut a, Op::Sum)
            .expect("dim allreduce");
        let want: Vec<f32> = (0..64)
            .map(|i| who.iter().map(|&q| input(q, 64)[i]).sum())
            .collect();
        assert_eq!(host_of::<f32>(&a), want, "{dim}");
        assert_eq!(algo(c), "nccl", "{dim}");
    }
    ok(r, "mesh");
}

fn enqueue(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let s = rcomm::gpu::stream_create(0).expect("stream");
    // Warm-up: the NCCL communicator exists before the measured call.
    let mut a = dev_of(&input(r, 16));
    w.allreduce_device::<f32>(&mut a, Op::Sum).expect("warm-up");
    let mut a = dev_of(&input(r, 16));
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    rcomm_transport::gpu::standin_enqueue(
        s,
        Box::new(move || {
            let _ = rx.recv_timeout(Duration::from_secs(30));
        }),
    )
    .expect("gate");
    let t = Instant::now();
    w.on_stream(s)
        .allreduce_device::<f32>(&mut a, Op::Sum)
        .expect("on_stream allreduce");
    let g = rcomm_transport::gpu::gpu().expect("gpu");
    assert!(
        !g.stream_query(s).expect("query"),
        "the gate holds the stream"
    );
    assert_eq!(host_of::<f32>(&a), input(r, 16), "nothing ran yet");
    assert!(t.elapsed() < Duration::from_secs(5));
    tx.send(()).expect("release");
    rcomm::gpu::stream_synchronize(s).expect("sync");
    let want: Vec<f32> = (0..16)
        .map(|i| (0..n).map(|q| input(q, 16)[i]).sum())
        .collect();
    assert_eq!(host_of::<f32>(&a), want);
    rcomm::gpu::stream_destroy(s).expect("destroy");
    ok(r, "enqueue");
}

fn budget(w: &World) {
    let r = w.rank();
    let s = rcomm::gpu::stream_create(0).expect("stream");
    let mut a = dev_of(&input(r, 256));
    w.on_stream(s)
        .allreduce_device::<f32>(&mut a, Op::Sum)
        .expect("warm-up");
    rcomm::gpu::stream_synchronize(s).expect("sync");
    const K: u64 = 20;
    let (g0, n0) = (
        rcomm::gpu::stats().expect("stats"),
        rcomm::gpu::nccl_stats(),
    );
    for _ in 0..K {
        w.on_stream(s)
            .allreduce_device::<f32>(&mut a, Op::Sum)
            .expect("on_stream");
    }
    let (g1, n1) = (
        rcomm::gpu::stats().expect("stats"),
        rcomm::gpu::nccl_stats(),
    );
    assert_eq!(
        g1.host_waits, g0.host_waits,
        "a host wait in the stream-ordered form"
    );
    assert_eq!(
        n1.calls - n0.calls,
        K,
        "one NCCL call per stream-ordered allreduce"
    );
    rcomm::gpu::stream_synchronize(s).expect("sync");
    let g2 = rcomm::gpu::stats().expect("stats");
    for _ in 0..K {
        w.allreduce_device::<f32>(&mut a, Op::Sum).expect("plain");
    }
    let g3 = rcomm::gpu::stats().expect("stats");
    assert_eq!(
        g3.host_waits, g2.host_waits,
        "a blocking wait in the plain form"
    );
    rcomm::gpu::stream_destroy(s).expect("destroy");
    ok(r, "budget");
}

/// `rcommNcclStandInLive` of the stand-in libnccl this process loaded.
fn standin_live() -> [u64; 4] {
    let path = std::env::var("RCOMM_NCCL_LIB").expect("RCOMM_NCCL_LIB");
    let c = std::ffi::CString::new(path).expect("path");
    // SAFETY: RTLD_NOLOAD only looks the loaded library up; the symbol has the stand-in's
    // signature (`void rcommNcclStandInLive(uint64_t out[4])`).
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!h.is_null(), "the stand-in libnccl is not loaded");
        let f = libc::dlsym(h, c"rcommNcclStandInLive".as_ptr());
        assert!(!f.is_null(), "no rcommNcclStandInLive");
        let f: unsafe extern "C" fn(*mut u64) = std::mem::transmute(f);
        let mut out = [0u64; 4];
        f(out.as_mut_ptr());
        out
    }
}

/// Sets the stand-in's fault on rank 2 before its first NCCL call reads it.
fn fault_on_rank_2(w: &World, what: &str) {
    if w.rank() == 2 {
        // SAFETY: set before any NCCL call of this process (the stand-in reads it once, at its
        // first collective); rcomm's own threads read no environment after init.
        unsafe { std::env::set_var("NCCL_STANDIN_FAULT", what) };
    }
}

fn die(w: &World) {
    let r = w.rank();
    fault_on_rank_2(w, "exit@3");
    let c = w.dup().expect("dup");
    let mut a = dev_of(&input(r, 64));
    let t = Instant::now();
    let res = (0..10).try_for_each(|_| c.allreduce_device::<f32>(&mut a, Op::Sum));
    match res {
        Err(CommError::PeerLost { rank: 2, .. }) => {}
        other => panic!("rank {r}: expected PeerLost naming rank 2, got {other:?}"),
    }
    let took = t.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // Later calls on the communicator say the same.
    match c.allreduce_device::<f32>(&mut a, Op::Sum) {
        Err(CommError::PeerLost { rank: 2, .. }) => {}
        other => panic!("rank {r}: a later call: {other:?}"),
    }
    drop(c);
    let end = Instant::now() + Duration::from_secs(5);
    let mut live = standin_live();
    while live != [0; 4] && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
        live = standin_live();
    }
    assert_eq!(
        live, [0; 4],
        "the stand-in still has comms/connections/threads alive"
    );
    ok(
        r,
        &format!("die (PeerLost after {:.2} s)", took.as_secs_f64()),
    );
}

fn hang(w: &World) {
    let r = w.rank();
    fault_on_rank_2(w, "hang@3");
    let mut a = dev_of(&input(r, 64));
    let t = Instant::now();
    let res = (0..10).try_for_each(|_| w.allreduce_device::<f32>(&mut a, Op::Sum));
    match res {
        Err(CommError::Timeout {
            op: "allreduce", ..
        }) => {}
        other => panic!("rank {r}: expected Timeout, got {other:?}"),
    }
    ok(
        r,
        &format!("hang (Timeout after {:.2} s)", t.elapsed().as_secs_f64()),
    );
    // The stand-in's hub lives in rank 0's process: it stays until every rank's deadline
    // has passed (theirs differ by a few milliseconds), or a late one sees the hub go first.
    std::thread::sleep(Duration::from_secs(1));
}

/// As `hang`, but stream-ordered: the calls return at once, the watchdog aborts the NCCL
/// communicator at the deadline (so the stream's work ends), and the next call is `Timeout`.
fn hang_stream(w: &World) {
    let r = w.rank();
    fault_on_rank_2(w, "hang@3");
    let s = rcomm::gpu::stream_create(0).expect("stream");
    let mut a = dev_of(&input(r, 64));
    let t = Instant::now();
    for _ in 0..3 {
        w.on_stream(s)
            .allreduce_device::<f32>(&mut a, Op::Sum)
            .expect("enqueued");
    }
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let g = rcomm_transport::gpu::gpu().expect("gpu");
    while !g.stream_query(s).expect("query") {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the stream never ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let ended = t.elapsed();
    assert!(
        ended >= Duration::from_secs(3),
        "ended before the deadline: {ended:?}"
    );
    match w.allreduce_device::<f32>(&mut a, Op::Sum) {
        Err(CommError::Timeout { .. }) => {}
        other => panic!("rank {r}: expected Timeout after the watchdog, got {other:?}"),
    }
    ok(
        r,
        &format!("hang-stream (aborted after {:.2} s)", ended.as_secs_f64()),
    );
    std::thread::sleep(Duration::from_secs(1));
}

/// Rank 0 revokes a communicator while the others wait in an NCCL allreduce on it.
fn revoke(w: &World) {
    let r = w.rank();
    let c = w.dup().expect("dup");
    let mut a = dev_of(&input(r, 64));
    c.allreduce_device::<f32>(&mut a, Op::Sum).expect("warm-up");
    w.barrier().expect("barrier");
    if r == 0 {
        std::thread::sleep(Duration::from_millis(300));
        c.revoke();
    }
    let t = Instant::now();
    match c.allreduce_device::<f32>(&mut a, Op::Sum) {
        Err(CommError::Revoked { by: 0, .. }) => {}
        other => panic!("rank {r}: expected Revoked by rank 0, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    ok(r, "revoke");
}

/// Checked mode (`RCOMM_CHECK=1`): rank 1 allreduces one element more than the others; every
/// rank's call is `CollMismatch`, found before or while NCCL runs it.
fn checked(w: &World) {
    let r = w.rank();
    let c = w.dup().expect("dup");
    let mut a = dev_of(&input(r, 64));
    c.allreduce_device::<f32>(&mut a, Op::Sum)
        .expect("a matching call");
    let mut b = dev_of(&input(r, if r == 1 { 65 } else { 64 }));
    match c.allreduce_device::<f32>(&mut b, Op::Sum) {
        Err(CommError::CollMismatch { .. }) => {}
        other => panic!("rank {r}: expected CollMismatch, got {other:?}"),
    }
    ok(r, "checked");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let w = rcomm::init().expect("init");
    match args.first().map(String::as_str) {
        Some("choice") => choice(&w, args.get(1).map_or("nccl", String::as_str)),
        Some("table") => table(&w),
        Some("enqueue") => enqueue(&w),
        Some("budget") => budget(&w),
        Some("die") => die(&w),
        Some("hang") => hang(&w),
        Some("revoke") => revoke(&w),
        Some("hang-stream") => hang_stream(&w),
        Some("checked") => checked(&w),
        other => panic!("rt_nccl: unknown case {other:?}"),
    }
    // No rank leaves before the others are done: the stand-in libnccl's hub lives in one
    // rank's process (a real NCCL has no such tie).
    if !args
        .iter()
        .any(|a| a == "die" || a == "hang" || a == "hang-stream")
    {
        w.barrier().expect("final barrier");
    }
}
