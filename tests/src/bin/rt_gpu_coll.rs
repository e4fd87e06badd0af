//! Rank program: collectives on device buffers, every algorithm of the device executor and the
//! staged path forced in turn (`with_algo`) and the tuner's own choice, against sequential
//! references built from every rank's inputs. The same program runs on the host-memory
//! stand-in of a GPU (`RCOMM_GPU_STANDIN=1`, CI: the executor's logic with host functions for
//! kernels) and on a real GPU (`scripts/gpu-check.sh`). Rank 0 prints `ok <case>` per case.
//!
//! `rt_gpu_coll [--big] [--expect-ipc]`:
//! - `allreduce`: f32, bf16, f16 and i32 at 0, 1, 7 and 64 Ki + 3 elements (and 16 Mi with
//!   `--big`); sum of small integers (exact in any order), max, and avg (f32); in place, out of
//!   place and stream-ordered; plus a sum of arbitrary f32 whose bytes must be identical on
//!   every rank;
//! - `reduce_scatter` (equal and uneven counts), `allgather` (out of place, in place, uneven),
//!   `bcast` (every root), `alltoall` (equal and uneven), `reduce`, `barrier`;
//! - `executor`: with `--expect-ipc`, the executor's algorithms moved device bytes by IPC (the
//!   counters grew), so a silent fall-back to staging cannot pass;
//! - `group`: a batch of device sends and receives to both neighbours (`group_device`);
//! - `bad-op`: an op the element type has not (bitwise and of f32) is a clear error;
//! - `leak`: device memory free at the end equals free memory after the first round (the
//!   executor's pooled scratch counted apart).
//!
//! `rt_gpu_coll budget`: the device executor's cost per in-place f32 allreduce, by algorithm
//! (one-shot, two-shot, ring; 64 Ki + 3 elements, so peers' bytes move by IPC): the kernels
//! and copies it queues and the host waits it makes must equal what the algorithm's schedule
//! (`rcomm::schedule`) asks for - one launch per non-empty local step, one wait per phase
//! that queued any - so a synchronisation that sneaks in fails it.
//!
//! `rt_gpu_coll --pool [--big]` and `rt_gpu_coll --graph [--big]` (real GPU only) run one case
//! each instead of the table, with the driver API called as an application would (cudarc):
//! - `--pool`: allreduces (every algorithm; f32 sum) on buffers from the stream-ordered
//!   allocator's default pool (`cuMemAllocAsync` on a non-blocking stream), 7 and 64 Ki + 3
//!   elements, and 256 MiB with `--big`, freed with `cuMemFreeAsync` between sizes;
//! - `--graph`: a stream-ordered allreduce captured into a CUDA graph (`cuStreamBeginCapture`
//!   on a non-blocking stream, `on_stream(..).allreduce_device`, `cuStreamEndCapture`,
//!   `cuGraphInstantiate`), the graph launched 3 times, the buffer checked after each launch
//!   (`n^(j-1)` times the sum after launch `j`). A capture that fails (a call that
//!   synchronises the capturing stream) is printed as `finding graph: ...`, not a crash.

use cudarc::driver::sys as cu;
use half::{bf16, f16};
use rcomm::gpu::DeviceBuffer;
use rcomm::{Communicator, Element, Op, World};

fn ok(w: &World, case: &str) {
    w.barrier().expect("barrier");
    if w.rank() == 0 {
        println!("ok {case}");
    }
}

fn device() -> u32 {
    let n = rcomm::gpu::devices().expect("devices").len().max(1) as u32;
    std::env::var("RCOMM_LOCAL_RANK")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(0)
        % n
}

fn dev_of<T: bytemuck::Pod>(v: &[T]) -> DeviceBuffer {
    DeviceBuffer::from_host(device(), bytemuck::cast_slice(v)).expect("alloc")
}

fn host_of<T: bytemuck::Pod>(b: &DeviceBuffer) -> Vec<T> {
    let bytes = b.to_vec().expect("read");
    let mut v = vec![T::zeroed(); bytes.len() / size_of::<T>()];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&bytes);
    v
}

/// Element types of the table: built from small integers exactly.
trait Val: Element + PartialEq + std::fmt::Debug {
    const NAME: &'static str;
    fn of(x: i32) -> Self;
}

impl Val for f32 {
    const NAME: &'static str = "f32";
    fn of(x: i32) -> Self {
        x as f32
    }
}
impl Val for bf16 {
    const NAME: &'static str = "bf16";
    fn of(x: i32) -> Self {
        bf16::from_f32(x as f32)
    }
}
impl Val for f16 {
    const NAME: &'static str = "f16";
    fn of(x: i32) -> Self {
        f16::from_f32(x as f32)
    }
}
impl Val for i32 {
    const NAME: &'static str = "i32";
    fn of(x: i32) -> Self {
        x
    }
}

/// Rank `q`'s input `j`, element `i`: a small integer (sums of a few stay exact in bf16).
fn sv(q: u32, j: usize, i: usize) -> i32 {
    ((q as usize * 5 + j * 3 + i * 7) % 13) as i32 - 4
}

/// The forced handles: every algorithm of `op`, and the tuner's choice.
fn handles(w: &Communicator, op: &str, algos: &[&str]) -> Vec<(String, Communicator)> {
    let mut v = vec![("auto".to_string(), w.clone())];
    for a in algos {
        v.push((a.to_string(), w.with_algo(op, a).expect("with_algo")));
    }
    v
}

fn sizes(big: bool) -> Vec<usize> {
    let mut v = vec![0, 1, 7, (64 << 10) + 3];
    if big {
        v.push(16 << 20);
    }
    v
}

fn allreduce_of<T: Val>(w: &World, big: bool) {
    let (r, n) = (w.rank(), w.size());
    let stream = rcomm::gpu::Stream {
        device: device(),
        raw: 0,
    };
    for (algo, c) in handles(
        w,
        "allreduce_device",
        &["one_shot", "two_shot", "ring", "hier", "staged"],
    ) {
        for &k in &sizes(big) {
            for (op, fold) in [
                (Op::Sum, (|a: i32, b: i32| a + b) as fn(i32, i32) -> i32),
                (Op::Max, |a: i32, b: i32| a.max(b)),
            ] {
                let want: Vec<T> = (0..k)
                    .map(|i| T::of((1..n).fold(sv(0, 0, i), |a, q| fold(a, sv(q, 0, i)))))
                    .collect();
                let mine: Vec<T> = (0..k).map(|i| T::of(sv(r, 0, i))).collect();
                let what = format!("allreduce {} {op:?} {k} by {algo}", T::NAME);
                // In place.
                let mut a = dev_of(&mine);
                c.allreduce_device::<T>(&mut a, op).expect(&what);
                assert_eq!(host_of::<T>(&a), want, "{what}, in place");
                // Out of place: the input stays as it was.
                let s = dev_of(&mine);
                let mut o = dev_of(&vec![T::of(0); k]);
                c.allreduce_device_into::<T>(&s, &mut o, op).expect(&what);
                assert_eq!(host_of::<T>(&o), want, "{what}, out of place");
                assert_eq!(host_of::<T>(&s), mine, "{what}: the input changed");
                // Stream-ordered.
                let mut a = dev_of(&mine);
                c.on_stream(stream)
                    .allreduce_device::<T>(&mut a, op)
                    .expect(&what);
                assert_eq!(host_of::<T>(&a), want, "{what}, on a stream");
            }
        }
    }
}

/// Arbitrary f32 (sums round): every rank must hold the same bytes; avg of small integers.
fn allreduce_bitwise(w: &World) {
    let (r, n) = (w.rank(), w.size());
    for (algo, c) in handles(
        w,
        "allreduce_device",
        &["one_shot", "two_shot", "ring", "hier", "staged"],
    ) {
        let k = (64 << 10) + 3;
        let mine: Vec<f32> = (0..k)
            .map(|i| ((r as f32 + 1.7) * (i as f32 * 0.37).sin()) / 3.1)
            .collect();
        let mut a = dev_of(&mine);
        c.allreduce_device::<f32>(&mut a, Op::Sum).expect("sum");
        let got = host_of::<f32>(&a);
        let mut all = vec![0f32; k * n as usize];
        w.allgather(&got, &mut all).expect("allgather");
        for (q, b) in all.chunks(k).enumerate() {
            assert!(
                b.iter().zip(&got).all(|(x, y)| x.to_bits() == y.to_bits()),
                "f32 sum by {algo}: rank {q}'s bytes differ from rank {r}'s"
            );
        }
        for (i, g) in got.iter().enumerate() {
            let want: f64 = (0..n)
                .map(|q| f64::from(((q as f32 + 1.7) * (i as f32 * 0.37).sin()) / 3.1))
                .sum();
            assert!(
                (f64::from(*g) - want).abs() < 1e-4,
                "f32 sum by {algo} at {i}"
            );
        }
        let mut a = dev_of(&(0..k).map(|i| sv(r, 1, i) as f32).collect::<Vec<_>>());
        c.allreduce_device::<f32>(&mut a, Op::Avg).expect("avg");
        let want: Vec<f32> = (0..k)
            .map(|i| (0..n).map(|q| sv(q, 1, i)).sum::<i32>() as f32 / n as f32)
            .collect();
        assert_eq!(host_of::<f32>(&a), want, "f32 avg by {algo}");
    }
}

fn reduce_scatter(w: &World) {
    let (r, n) = (w.rank(), w.size() as usize);
    for (algo, c) in handles(w, "reduce_scatter_device", &["direct", "ring", "staged"]) {
        for k in [0usize, 1, 7, (16 << 10) + 3] {
            // Equal blocks of k; block j of rank q's input is sv(q, 10 + j, i).
            let s = dev_of(
                &(0..n)
                    .flat_map(|j| (0..k).map(move |i| sv(r, 10 + j, i)))
                    .collect::<Vec<_>>(),
            );
            let mut o = dev_of(&vec![0i32; k]);
            c.reduce_scatter_device::<i32>(&s, &mut o, Op::Sum)
                .expect("reduce_scatter");
            let want: Vec<i32> = (0..k)
                .map(|i| (0..n as u32).map(|q| sv(q, 10 + r as usize, i)).sum())
                .collect();
            assert_eq!(host_of::<i32>(&o), want, "reduce_scatter {k} by {algo}");
            // Uneven: rank j gets k + j elements.
            let counts: Vec<usize> = (0..n).map(|j| k + j).collect();
            let total: usize = counts.iter().sum();
            let s = dev_of(
                &(0..total)
                    .map(|i| T16::of(sv(r, 20, i)))
                    .collect::<Vec<_>>(),
            );
            let mut o = dev_of(&vec![T16::of(0); counts[r as usize]]);
            c.reduce_scatter_v_device::<T16>(&s, &mut o, &counts, Op::Sum)
                .expect("reduce_scatter_v");
            let off: usize = counts[..r as usize].iter().sum();
            let want: Vec<T16> = (off..off + counts[r as usize])
                .map(|i| T16::of((0..n as u32).map(|q| sv(q, 20, i)).sum()))
                .collect();
            assert_eq!(host_of::<T16>(&o), want, "reduce_scatter_v {k} by {algo}");
        }
    }
}

type T16 = bf16;

fn allgather(w: &World) {
    let (r, n) = (w.rank(), w.size() as usize);
    for (algo, c) in handles(w, "allgather_device", &["direct", "ring", "staged"]) {
        for k in [0usize, 1, 7, (16 << 10) + 3] {
            let want: Vec<i32> = (0..n as u32)
                .flat_map(|q| (0..k).map(move |i| sv(q, 4, i) * 1000 + q as i32))
                .collect();
            let s = dev_of(
                &(0..k)
                    .map(|i| sv(r, 4, i) * 1000 + r as i32)
                    .collect::<Vec<_>>(),
            );
            let mut g = dev_of(&vec![0i32; k * n]);
            c.allgather_device(&s, &mut g).expect("allgather");
            assert_eq!(host_of::<i32>(&g), want, "allgather {k} by {algo}");
            // In place: own block already there.
            let mut v = vec![0i32; k * n];
            v[r as usize * k..(r as usize + 1) * k].copy_from_slice(&host_of::<i32>(&s));
            let mut g = dev_of(&v);
            c.allgather_device_in_place(&mut g)
                .expect("allgather in place");
            assert_eq!(host_of::<i32>(&g), want, "allgather in place {k} by {algo}");
            // Uneven: rank q gives k + 2q bytes.
            let counts: Vec<usize> = (0..n).map(|q| k + 2 * q).collect();
            let s = dev_of(
                &(0..counts[r as usize])
                    .map(|i| (i as u8) ^ (r as u8).wrapping_mul(37))
                    .collect::<Vec<u8>>(),
            );
            let mut g = dev_of(&vec![0u8; counts.iter().sum()]);
            c.allgatherv_device(&s, &mut g, &counts)
                .expect("allgatherv");
            let want: Vec<u8> = (0..n)
                .flat_map(|q| (0..counts[q]).map(move |i| (i as u8) ^ (q as u8).wrapping_mul(37)))
                .collect();
            assert_eq!(host_of::<u8>(&g), want, "allgatherv {k} by {algo}");
        }
    }
}

fn bcast(w: &World) {
    let (r, n) = (w.rank(), w.size());
    for (algo, c) in handles(w, "bcast_device", &["tree", "staged"]) {
        for k in [0usize, 1, 7, (64 << 10) + 3] {
            for root in 0..n {
                let mut b = dev_of(
                    &(0..k)
                        .map(|i| sv(r, 2, i) + 100 * r as i32)
                        .collect::<Vec<_>>(),
                );
                c.bcast_device(&mut b, root).expect("bcast");
                let want: Vec<i32> = (0..k).map(|i| sv(root, 2, i) + 100 * root as i32).collect();
                assert_eq!(host_of::<i32>(&b), want, "bcast {k} from {root} by {algo}");
            }
        }
    }
}

fn alltoall(w: &World) {
    let (r, n) = (w.rank(), w.size() as usize);
    let v = |from: usize, to: usize, i: usize| (from * 31 + to * 7 + i) as u8;
    for (algo, c) in handles(w, "alltoall_device", &["pairwise", "staged"]) {
        for k in [0usize, 1, 7, (16 << 10) + 3] {
            let me = r as usize;
            let s = dev_of(
                &(0..n)
                    .flat_map(|j| (0..k).map(move |i| v(me, j, i)))
                    .collect::<Vec<_>>(),
            );
            let mut o = dev_of(&vec![0u8; k * n]);
            c.alltoall_device(&s, &mut o).expect("alltoall");
            let want: Vec<u8> = (0..n)
                .flat_map(|q| (0..k).map(move |i| v(q, me, i)))
                .collect();
            assert_eq!(host_of::<u8>(&o), want, "alltoall {k} by {algo}");
            // Uneven: from q to j, k + q + 2j bytes.
            let len = |from: usize, to: usize| k + from + 2 * to;
            let sc: Vec<usize> = (0..n).map(|j| len(me, j)).collect();
            let rc: Vec<usize> = (0..n).map(|q| len(q, me)).collect();
            let s = dev_of(
                &(0..n)
                    .flat_map(|j| (0..len(me, j)).map(move |i| v(me, j, i)))
                    .collect::<Vec<_>>(),
            );
            let mut o = dev_of(&vec![0u8; rc.iter().sum()]);
            c.alltoallv_device(&s, &sc, &mut o, &rc).expect("alltoallv");
            let want: Vec<u8> = (0..n)
                .flat_map(|q| (0..len(q, me)).map(move |i| v(q, me, i)))
                .collect();
            assert_eq!(host_of::<u8>(&o), want, "alltoallv {k} by {algo}");
        }
    }
}

fn reduce_and_barrier(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let stream = rcomm::gpu::Stream {
        device: device(),
        raw: 0,
    };
    for k in [0usize, 7, (64 << 10) + 3] {
        for root in 0..n {
            let s = dev_of(&(0..k).map(|i| sv(r, 3, i)).collect::<Vec<_>>());
            let mut o = dev_of(&vec![0i32; if r == root { k } else { 0 }]);
            w.on_stream(stream)
                .reduce_device::<i32>(&s, &mut o, Op::Sum, root)
                .expect("reduce");
            if r == root {
                let want: Vec<i32> = (0..k).map(|i| (0..n).map(|q| sv(q, 3, i)).sum()).collect();
                assert_eq!(host_of::<i32>(&o), want, "reduce {k} to {root}");
            }
        }
    }
    w.on_stream(stream).barrier().expect("barrier");
}

fn bad_op(w: &World) {
    // Device collectives take a built-in `Op` (a user function cannot run on the device: the
    // type rules it out); an op the element type has not is a clear error.
    let mut a = dev_of(&[1i32, 2, 3]);
    let e = w.allreduce_device::<i32>(&mut a, Op::BAnd);
    assert!(e.is_ok(), "a built-in integer op: {e:?}");
    let mut f = dev_of(&[1.0f32, 2.0]);
    let e = w.allreduce_device::<f32>(&mut f, Op::BAnd);
    match e {
        Err(rcomm::CommError::InvalidArg(m)) => assert!(
            m.contains("f32") || m.contains("band") || m.contains("BAnd"),
            "{m}"
        ),
        other => panic!("bitwise and on f32 device memory: {other:?}"),
    }
}

/// Grouped point-to-point: every rank sends to both neighbours and receives from both in one
/// batch (a pipeline's forward and backward exchange at once).
fn group(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    let v = |from: u32, to: u32, k: usize| -> Vec<u8> {
        (0..k)
            .map(|i| (from as usize * 7 + to as usize * 13 + i) as u8)
            .collect()
    };
    w.device_setup(device()).expect("setup");
    for k in [0usize, 5, (256 << 10) + 1] {
        let (sr, sl) = (dev_of(&v(r, right, k)), dev_of(&v(r, left, k)));
        let mut fl = dev_of(&vec![0u8; k]);
        let mut fr = dev_of(&vec![0u8; k]);
        {
            use rcomm::gpu::{DeviceMem, DeviceMemMut};
            let sends = [(sr.device_ref(), right), (sl.device_ref(), left)];
            let mut recvs = [(fl.device_mut(), left), (fr.device_mut(), right)];
            w.group_device(&sends, &mut recvs, rcomm::Tag(77))
                .expect("group");
        }
        if n > 2 || n == 1 {
            assert_eq!(
                host_of::<u8>(&fl),
                v(left, r, k),
                "group {k}: from the left"
            );
            assert_eq!(
                host_of::<u8>(&fr),
                v(right, r, k),
                "group {k}: from the right"
            );
        } else {
            // Two ranks: both messages come from the one peer, matched in order of sending.
            let got = [host_of::<u8>(&fl), host_of::<u8>(&fr)];
            assert_eq!(got[0], v(left, r, k), "group {k}: first from the peer");
            assert_eq!(got[1], v(right, r, k), "group {k}: second from the peer");
        }
    }
}

/// `RCOMM_GPU_BACKEND=nccl` on a machine without libnccl: a clear error, no hang, no panic.
fn nccl_missing(w: &World) {
    let mut a = dev_of(&[1i32, 2, 3]);
    match w.allreduce_device::<i32>(&mut a, Op::Sum) {
        Err(rcomm::CommError::Device { why, .. }) => {
            assert!(why.contains("libnccl"), "{why}");
            println!("rank {}: {why}", w.rank());
        }
        other => panic!("allreduce with RCOMM_GPU_BACKEND=nccl and no libnccl: {other:?}"),
    }
    ok(w, "nccl-missing");
}

/// The last rank dies (SIGKILL) as the others run device allreduces by `algo`: every
/// survivor's call fails with `PeerLost` naming it, within seconds.
fn kill(w: &World, algo: &str) {
    let (r, n) = (w.rank(), w.size());
    let victim = n - 1;
    let mut a = dev_of(&vec![1.0f32; 4 << 20]);
    w.allreduce_device::<f32>(&mut a, Op::Sum).expect("warm-up");
    w.barrier().expect("barrier");
    if r == victim {
        std::thread::sleep(std::time::Duration::from_millis(100));
        // SAFETY: raising a signal on this process.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    let t = std::time::Instant::now();
    let c = w.with_algo("allreduce_device", algo).expect("with_algo");
    let res = (0..100).try_for_each(|_| c.allreduce_device::<f32>(&mut a, Op::Sum));
    match res {
        Err(rcomm::CommError::PeerLost { rank, .. }) if rank == victim => {}
        other => panic!("rank {r} ({algo}): expected PeerLost of rank {victim}, got {other:?}"),
    }
    let took = t.elapsed();
    assert!(took < std::time::Duration::from_secs(20), "took {took:?}");
    println!(
        "rank {r}: ok kill (PeerLost after {:.2} s, {algo})",
        took.as_secs_f64()
    );
}

/// The driver's result as an error naming the call.
fn cu_check(r: cu::CUresult, call: &str) -> Result<(), String> {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call}: {r:?}"))
    }
}

/// Rank `r`'s f32 input of `k` elements, and the sum over `n` ranks.
fn f32_case(r: u32, n: u32, k: usize) -> (Vec<f32>, Vec<f32>) {
    let mine = (0..k).map(|i| sv(r, 0, i) as f32).collect();
    let sum = (0..k)
        .map(|i| (0..n).map(|q| sv(q, 0, i)).sum::<i32>() as f32)
        .collect();
    (mine, sum)
}

/// `--pool`: allreduce on memory from the stream-ordered allocator, as a framework's caching
/// allocator hands it out (not rcomm's own allocations).
fn pool(w: &World, big: bool) {
    let (r, n) = (w.rank(), w.size());
    // Makes the device's primary context current on this thread, which the raw calls use.
    let s = rcomm::gpu::stream_create(device()).expect("stream");
    let cs = s.raw as usize as cu::CUstream;
    let mut ks = vec![7usize, (64 << 10) + 3];
    if big {
        ks.push(64 << 20);
    }
    for k in ks {
        let bytes = k * 4;
        let (mine, want) = f32_case(r, n, k);
        let algos: &[&str] = if k > 1 << 20 {
            &[]
        } else {
            &["one_shot", "two_shot", "ring", "staged"]
        };
        for (algo, c) in handles(w, "allreduce_device", algos) {
            let what = format!("pool: allreduce f32 sum of {bytes} bytes by {algo}");
            let mut p: cu::CUdeviceptr = 0;
            // SAFETY: writes one device pointer; `cs` is a live stream of the current context.
            cu_check(
                unsafe { cu::cuMemAllocAsync(&mut p, bytes, cs) },
                "cuMemAllocAsync",
            )
            .and_then(|()| {
                // SAFETY: a live stream.
                cu_check(
                    unsafe { cu::cuStreamSynchronize(cs) },
                    "cuStreamSynchronize",
                )
            })
            .and_then(|()| {
                // SAFETY: `p` holds `bytes` bytes (allocated above), `mine` as many.
                cu_check(
                    unsafe { cu::cuMemcpyHtoD_v2(p, mine.as_ptr().cast(), bytes) },
                    "cuMemcpyHtoD",
                )
            })
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            // SAFETY: `p..p + bytes` is this process's device memory, alive until freed below,
            // touched by nobody else meanwhile.
            let mut d = unsafe { rcomm::gpu::DevMut::from_raw(p, bytes) };
            c.allreduce_device::<f32>(&mut d, Op::Sum)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let mut got = vec![0f32; k];
            // SAFETY: `got` holds `bytes` bytes; `p` is live.
            cu_check(
                unsafe { cu::cuMemcpyDtoH_v2(got.as_mut_ptr().cast(), p, bytes) },
                "cuMemcpyDtoH",
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(got == want, "{what}: wrong sums");
            w.barrier().expect("barrier");
            // Every rank is done with every peer's block before it goes back to the pool.
            // SAFETY: allocated above, freed once; the stream is live.
            cu_check(unsafe { cu::cuMemFreeAsync(p, cs) }, "cuMemFreeAsync")
                .and_then(|()| {
                    // SAFETY: a live stream.
                    cu_check(
                        unsafe { cu::cuStreamSynchronize(cs) },
                        "cuStreamSynchronize",
                    )
                })
                .unwrap_or_else(|e| panic!("{what}: {e}"));
        }
        ok(w, &format!("pool {bytes} bytes"));
    }
    rcomm::gpu::stream_destroy(s).expect("stream");
    ok(w, "pool");
}

/// `--graph`: a stream-ordered allreduce captured into a CUDA graph and the graph launched 3
/// times. Where capture fails, that is the finding (printed), not a crash.
fn graph(w: &World, big: bool) {
    let (r, n) = (w.rank(), w.size());
    let s = rcomm::gpu::stream_create(device()).expect("stream");
    let cs = s.raw as usize as cu::CUstream;
    let k = if big { 64 << 20 } else { (64 << 10) + 3 };
    let (mine, sum) = f32_case(r, n, k);
    let mut a = dev_of(&mine);
    // SAFETY: a live stream of the current context.
    cu_check(
        unsafe {
            cu::cuStreamBeginCapture_v2(
                cs,
                cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        },
        "cuStreamBeginCapture",
    )
    .expect("begin capture");
    let res = w.on_stream(s).allreduce_device::<f32>(&mut a, Op::Sum);
    let mut g: cu::CUgraph = std::ptr::null_mut();
    // SAFETY: the stream is capturing (or its capture was invalidated); writes one graph.
    let end = unsafe { cu::cuStreamEndCapture(cs, &mut g) };
    if res.is_err() || end != cu::CUresult::CUDA_SUCCESS || g.is_null() {
        if !g.is_null() {
            // SAFETY: a graph made by the capture, destroyed once.
            unsafe { cu::cuGraphDestroy(g) };
        }
        println!(
            "finding graph: rank {r}: capturing a stream-ordered allreduce failed: the call \
             returned {res:?}, cuStreamEndCapture {end:?}"
        );
        w.barrier().expect("barrier");
        rcomm::gpu::stream_destroy(s).expect("stream");
        return;
    }
    let mut exec: cu::CUgraphExec = std::ptr::null_mut();
    // SAFETY: a graph from the capture; writes one executable graph.
    cu_check(
        unsafe { cu::cuGraphInstantiateWithFlags(&mut exec, g, 0) },
        "cuGraphInstantiate",
    )
    .expect("instantiate");
    // The capture may have run the collective at once (outside the stream): start the graph
    // from the inputs again, in the same allocation the graph refers to.
    a.copy_from_host(bytemuck::cast_slice(&mine))
        .expect("reset");
    let mut want = sum;
    for j in 1..=3 {
        // SAFETY: an instantiated graph and a live stream.
        cu_check(unsafe { cu::cuGraphLaunch(exec, cs) }, "cuGraphLaunch")
            .and_then(|()| {
                // SAFETY: a live stream.
                cu_check(
                    unsafe { cu::cuStreamSynchronize(cs) },
                    "cuStreamSynchronize",
                )
            })
            .unwrap_or_else(|e| panic!("graph launch {j}: {e}"));
        let got = host_of::<f32>(&a);
        if got != want {
            println!(
                "finding graph: rank {r}: launch {j} of the captured allreduce left the wrong \
                 values (the collective's work is not in the graph)"
            );
            break;
        }
        if r == 0 {
            println!("graph launch {j}: ok");
        }
        want.iter_mut().for_each(|x| *x *= n as f32);
    }
    // SAFETY: made above, destroyed once, after the stream finished with them.
    unsafe {
        cu::cuGraphExecDestroy(exec);
        cu::cuGraphDestroy(g);
    }
    rcomm::gpu::stream_destroy(s).expect("stream");
    ok(w, "graph");
}

/// `--pool` and `--graph` call the driver beside rcomm: only where rcomm runs on a real GPU.
/// Elsewhere rank 0 says it skips (gpu-check's table shows it), and the program ends normally.
fn raw_driver(w: &World, what: &str) -> bool {
    let real = rcomm::gpu::backend_name() == Ok("cuda");
    // SAFETY: only tries to open the library.
    let here = real && unsafe { cu::is_culib_present() };
    if !here && w.rank() == 0 {
        println!("skip {what}: needs a real GPU and the CUDA driver library");
    }
    here
}

/// What `sched` costs the executor: (launches, host waits) - a copy or a kernel per local step
/// that moves bytes, and one wait for the stream after each phase that queued any.
fn schedule_budget(sched: &rcomm::schedule::Schedule) -> (u64, u64) {
    use rcomm::schedule::Step;
    let moves = |st: &Step| match st {
        Step::Copy { dst, .. } | Step::Reduce { dst, .. } => dst.len > 0,
        _ => false,
    };
    sched.phases.iter().fold((0, 0), |(l, w), ph| {
        let k = ph.local.iter().filter(|st| moves(st)).count() as u64;
        (l + k, w + u64::from(k > 0))
    })
}

fn budget(w: &World) {
    use rcomm::schedule::{one_shot_allreduce, ring_allreduce, two_shot_allreduce};
    let (r, n) = (w.rank(), w.size());
    let k = (64 << 10) + 3;
    let mine: Vec<f32> = (0..k).map(|i| sv(r, 0, i) as f32).collect();
    let want: Vec<f32> = (0..k)
        .map(|i| (0..n).map(|q| sv(q, 0, i) as f32).sum())
        .collect();
    type Build = fn(u32, u32, usize, usize) -> rcomm::schedule::Schedule;
    let algos: [(&str, Build); 3] = [
        ("one_shot", one_shot_allreduce),
        ("two_shot", two_shot_allreduce),
        ("ring", ring_allreduce),
    ];
    const CALLS: u64 = 4;
    for (algo, build) in algos {
        let c = w.with_algo("allreduce_device", algo).expect("with_algo");
        let (launches, waits) = schedule_budget(&build(r, n, k, 4));
        // Warm-up: the scratch pool, the stream, the peers' imports and the kernels are made once.
        let mut a = dev_of(&mine);
        c.allreduce_device::<f32>(&mut a, Op::Sum).expect(algo);
        let mut bufs: Vec<DeviceBuffer> = (0..CALLS).map(|_| dev_of(&mine)).collect();
        w.barrier().expect("barrier");
        let before = rcomm::gpu::stats().expect("stats");
        for b in &mut bufs {
            c.allreduce_device::<f32>(b, Op::Sum).expect(algo);
        }
        let after = rcomm::gpu::stats().expect("stats");
        for b in &bufs {
            assert_eq!(host_of::<f32>(b), want, "allreduce by {algo}");
        }
        let (dl, dw) = (
            after.launches - before.launches,
            after.host_waits - before.host_waits,
        );
        println!(
            "rank {r}: {algo}: {dl} launches and {dw} host waits in {CALLS} calls (schedule: {launches} and {waits} a call)"
        );
        assert_eq!(dl, CALLS * launches, "{algo}: launches per allreduce");
        assert_eq!(dw, CALLS * waits, "{algo}: host waits per allreduce");
        ok(w, &format!("budget {algo}"));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let big = args.iter().any(|a| a == "--big");
    let expect_ipc = args.iter().any(|a| a == "--expect-ipc");
    let w = rcomm::init().expect("init");
    if args.iter().any(|a| a == "--pool") {
        if raw_driver(&w, "--pool") {
            pool(&w, big);
        }
        return;
    }
    if args.iter().any(|a| a == "--graph") {
        if raw_driver(&w, "--graph") {
            graph(&w, big);
        }
        return;
    }
    if args.iter().any(|a| a == "budget") {
        return budget(&w);
    }
    if args.iter().any(|a| a == "nccl-missing") {
        return nccl_missing(&w);
    }
    if let Some(i) = args.iter().position(|a| a == "kill") {
        return kill(&w, args.get(i + 1).map_or("auto", String::as_str));
    }
    let free = || {
        rcomm_transport::gpu::gpu()
            .expect("gpu")
            .mem_info(device())
            .expect("mem")
            .0
    };
    allreduce_of::<f32>(&w, big);
    let base = free() + w.device().scratch_bytes();
    let ipc0 = rcomm::gpu::stats().map_or(0, |s| s.ipc_bytes);
    ok(&w, "allreduce-f32");
    allreduce_of::<bf16>(&w, big);
    allreduce_of::<f16>(&w, big);
    allreduce_of::<i32>(&w, big);
    allreduce_bitwise(&w);
    ok(&w, "allreduce");
    reduce_scatter(&w);
    ok(&w, "reduce_scatter");
    allgather(&w);
    ok(&w, "allgather");
    bcast(&w);
    ok(&w, "bcast");
    alltoall(&w);
    ok(&w, "alltoall");
    reduce_and_barrier(&w);
    ok(&w, "reduce");
    if expect_ipc && w.size() > 1 {
        let ipc = rcomm::gpu::stats().map_or(0, |s| s.ipc_bytes) - ipc0;
        assert!(ipc > 0, "the executor moved no device bytes by IPC");
        println!("rank {}: {ipc} bytes by IPC", w.rank());
    }
    ok(&w, "executor");
    group(&w);
    ok(&w, "group");
    bad_op(&w);
    ok(&w, "bad-op");
    w.barrier().expect("barrier");
    let g = rcomm_transport::gpu::gpu().expect("gpu");
    for p in 0..w.size() {
        g.forget_peer(p);
    }
    w.barrier().expect("barrier");
    let after = free() + w.device().scratch_bytes();
    let tol = 64usize << 20;
    assert!(
        after + tol >= base,
        "device memory leaked: {base} bytes free after warm-up, {after} at the end"
    );
    ok(&w, "leak");
}
