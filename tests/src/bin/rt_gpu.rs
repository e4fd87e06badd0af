//! Rank program: point-to-point on device buffers. The same program checks the device path on
//! the host-memory stand-in of a GPU (`RCOMM_GPU_STANDIN=1`, CI) and on a real GPU
//! (`scripts/gpu-check.sh`). Rank 0 prints `ok <case>` per case.
//!
//! - `rt_gpu table [--big]`:
//!   - `sizes`: every rank sends device buffers of 0, 1, 7, 64 KiB + 3 and 4 MiB bytes (and
//!     256 MiB with `--big`) round a ring, twice with the same buffers (the second round must
//!     hit the import cache), by scoped `isend_device`/`irecv_device` and by
//!     `sendrecv_device`; data depends on (sender, receiver, size index, round);
//!   - `mixed`: device to host and host to device, small and large; a probe of a device
//!     message;
//!   - `stream`: `send_device_on`/`recv_device_on`: the sender's buffer is written by work
//!     queued on the stream before the call, so a send that did not wait for the stream sends
//!     stale bytes;
//!   - `realloc`: a buffer freed and made again between two sends: the receiver must not read
//!     the old allocation through a stale import;
//!   - `errors`: host memory passed as device memory, a length past the allocation;
//!   - `coll`: collectives on device buffers (staged through the host): allreduce (i32 sum,
//!     f32 max, bf16 sum, stream-ordered), bcast, reduce, allgather, reduce_scatter, alltoall
//!     at 0, 1, 7 and 64 Ki + 3 elements against sequential references;
//!   - `cache`: the device layer's counters (an import hit on node peers);
//!   - `leak`: device memory free at the end equals free memory after the first round.
//! - `rt_gpu kinds`: memory as frameworks allocate it, round a ring (stand-in or CUDA):
//!   - `kinds`: pool and VMM memory made shareable (POSIX file-descriptor handles), 0, 7,
//!     64 KiB + 3 and 4 MiB bytes: node peers pull the large ones by descriptor import
//!     (`fd_imports`, `ipc_bytes` grow, `staged_bytes` does not);
//!   - `defpool`: memory of a pool without descriptor handles (the default pool) is staged,
//!     the bytes right, with one warning per process (the test counts them);
//!   - `register`: `register` exports a buffer before its first send (the send hits the
//!     export), `deregister` drops the export (the next send exports anew).
//! - `rt_gpu kill`: the last rank dies (SIGKILL) with a large device receive posted; rank 0's
//!   send to it and every other rank's receive from it fail with `PeerLost` (run with
//!   `--on-failure continue`).

use rcomm::gpu::{DevMut, DevRef, DeviceBuffer};
use rcomm::{CommError, Source, Tag, World};
use rcomm_transport::gpu::AllocKind;
use std::time::{Duration, Instant};

fn ok(w: &World, case: &str) {
    w.barrier().expect("barrier");
    if w.rank() == 0 {
        println!("ok {case}");
    }
}

fn val(from: u32, to: u32, k: usize, round: u32, i: usize) -> u8 {
    (from.wrapping_mul(131) ^ to.wrapping_mul(71) ^ round.wrapping_mul(29)) as u8
        ^ (k as u8).wrapping_mul(17)
        ^ (i as u8).wrapping_mul(7)
        ^ ((i >> 8) as u8).wrapping_mul(13)
        ^ ((i >> 16) as u8)
}

fn data(from: u32, to: u32, k: usize, round: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| val(from, to, k, round, i)).collect()
}

fn check(got: &[u8], from: u32, to: u32, k: usize, round: u32, what: &str) {
    if let Some(i) = (0..got.len()).find(|&i| got[i] != val(from, to, k, round, i)) {
        panic!(
            "{what}: {} bytes from rank {from} to {to} (size #{k}, round {round}): byte {i} is {} not {}",
            got.len(),
            got[i],
            val(from, to, k, round, i)
        );
    }
}

fn device() -> u32 {
    let n = rcomm::gpu::devices().map(|d| d.len()).unwrap_or(1).max(1) as u32;
    std::env::var("RCOMM_LOCAL_RANK")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(0)
        % n
}

fn sizes(big: bool) -> Vec<usize> {
    let mut s = vec![0, 1, 7, (64 << 10) + 3, 4 << 20];
    if big {
        s.push(256 << 20);
    }
    s
}

fn ring(w: &World, big: bool) {
    let (r, n) = (w.rank(), w.size());
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    let dev = device();
    let sz = sizes(big);
    let sends: Vec<DeviceBuffer> = sz
        .iter()
        .map(|&l| DeviceBuffer::new(dev, l).expect("alloc send"))
        .collect();
    let mut recvs: Vec<DeviceBuffer> = sz
        .iter()
        .map(|&l| DeviceBuffer::new(dev, l).expect("alloc recv"))
        .collect();
    for round in 0..2u32 {
        for (k, &l) in sz.iter().enumerate() {
            sends[k]
                .copy_from_host(&data(r, right, k, round, l))
                .expect("fill");
        }
        w.scope(|s| {
            let mut reqs = Vec::new();
            for (k, b) in recvs.iter_mut().enumerate() {
                reqs.push(
                    s.irecv_device(b, Source::Rank(left), Tag(k as i32))
                        .expect("irecv_device"),
                );
            }
            for (k, b) in sends.iter().enumerate() {
                reqs.push(
                    s.isend_device(b, right, Tag(k as i32))
                        .expect("isend_device"),
                );
            }
            for (i, q) in reqs.into_iter().enumerate() {
                let st = q.wait().expect("wait");
                if i < sz.len() {
                    assert_eq!(st.source, left, "status source");
                    assert_eq!(st.bytes, sz[i], "status bytes");
                }
            }
        });
        for (k, b) in recvs.iter().enumerate() {
            check(&b.to_vec().expect("read"), left, r, k, round, "isend/irecv");
        }
    }
    // sendrecv_device the other way round.
    for (k, &l) in sz.iter().enumerate() {
        sends[k]
            .copy_from_host(&data(r, left, k, 7, l))
            .expect("fill");
        let st = w
            .sendrecv_device(
                &sends[k],
                left,
                Tag(100),
                &mut recvs[k],
                Source::Rank(right),
                Tag(100),
            )
            .expect("sendrecv_device");
        assert_eq!((st.source, st.bytes), (right, l));
        check(
            &recvs[k].to_vec().expect("read"),
            right,
            r,
            k,
            7,
            "sendrecv",
        );
    }
    drop(sends);
    drop(recvs);
}

fn mixed(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    let dev = device();
    for (k, l) in [(0usize, 5usize), (1, 3 << 20)] {
        // Device to host.
        let src = DeviceBuffer::from_host(dev, &data(r, right, k, 11, l)).expect("alloc");
        let mut host = vec![0u8; l];
        w.scope(|s| {
            let a = s
                .irecv(&mut host, Source::Rank(left), Tag(200))
                .expect("irecv");
            let b = s.isend_device(&src, right, Tag(200)).expect("isend_device");
            b.wait().expect("send");
            a.wait().expect("recv");
        });
        check(&host, left, r, k, 11, "device to host");
        // A probe sees a device message as any other: its source and size.
        let src = DeviceBuffer::from_host(dev, &data(r, right, k, 13, l)).expect("alloc");
        let mut dst = DeviceBuffer::new(dev, l).expect("alloc");
        w.scope(|s| {
            let b = s.isend_device(&src, right, Tag(202)).expect("isend_device");
            let st = w.probe(Source::Any, Tag(202)).expect("probe");
            assert_eq!(
                (st.source, st.bytes),
                (left, l),
                "probe of a device message"
            );
            w.recv_device(&mut dst, Source::Rank(left), Tag(202))
                .expect("recv_device");
            b.wait().expect("send");
        });
        check(&dst.to_vec().expect("read"), left, r, k, 13, "probed");
        // Host to device.
        let out = data(r, right, k, 12, l);
        let mut dst = DeviceBuffer::new(dev, l).expect("alloc");
        w.scope(|s| {
            let a = s
                .irecv_device(&mut dst, Source::Rank(left), Tag(201))
                .expect("irecv_device");
            let b = s.isend(&out, right, Tag(201)).expect("isend");
            b.wait().expect("send");
            a.wait().expect("recv");
        });
        check(
            &dst.to_vec().expect("read"),
            left,
            r,
            k,
            12,
            "host to device",
        );
    }
}

/// Queues, on `stream`, work that writes `bytes` into `buf`: a host function on the stand-in,
/// which runs only when someone waits for the stream. On CUDA the write is made at once (the
/// stream form is then checked for its result only).
fn enqueue_write(stream: rcomm::gpu::Stream, buf: &DeviceBuffer, bytes: Vec<u8>) {
    let addr = buf.addr();
    if rcomm::gpu::backend_name() == Ok("stand-in") {
        rcomm_transport::gpu::standin_enqueue(
            stream,
            Box::new(move || {
                rcomm_transport::gpu::gpu()
                    .expect("stand-in")
                    .copy_htod(addr, &bytes)
                    .expect("queued write");
            }),
        )
        .expect("enqueue");
    } else {
        buf.copy_from_host(&bytes).expect("write");
    }
}

fn stream(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    let dev = device();
    let s = rcomm::gpu::stream_create(dev).expect("stream");
    for (k, l) in [(0usize, 100usize), (1, 5 << 20)] {
        let src = DeviceBuffer::from_host(dev, &vec![0xEE; l]).expect("alloc");
        let mut dst = DeviceBuffer::new(dev, l).expect("alloc");
        // The send buffer's final contents are written by work on the stream.
        enqueue_write(s, &src, data(r, right, k, 21, l));
        // Even ranks send first; odd ranks receive first (two ranks: no deadlock).
        if r % 2 == 0 || n == 1 {
            w.scope(|sc| {
                let a = sc
                    .irecv_device(&mut dst, Source::Rank(left), Tag(300))
                    .expect("irecv");
                w.send_device_on(&src, right, Tag(300), s).expect("send_on");
                a.wait().expect("recv");
            });
        } else {
            let mut tmp = DeviceBuffer::new(dev, l).expect("alloc");
            w.recv_device_on(&mut tmp, Source::Rank(left), Tag(300), s)
                .expect("recv_on");
            w.send_device_on(&src, right, Tag(300), s).expect("send_on");
            dst = tmp;
        }
        rcomm::gpu::stream_synchronize(s).expect("sync");
        check(
            &dst.to_vec().expect("read"),
            left,
            r,
            k,
            21,
            "stream-ordered",
        );
    }
    rcomm::gpu::stream_destroy(s).expect("destroy");
}

fn realloc(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    let dev = device();
    let l = 2 << 20;
    let mut dst = DeviceBuffer::new(dev, l).expect("alloc");
    for round in 0..3u32 {
        // A new allocation each round, likely at the address of the one just freed.
        let src = DeviceBuffer::from_host(dev, &data(r, right, 0, 40 + round, l)).expect("alloc");
        w.scope(|s| {
            let a = s
                .irecv_device(&mut dst, Source::Rank(left), Tag(400))
                .expect("irecv");
            let b = s.isend_device(&src, right, Tag(400)).expect("isend");
            b.wait().expect("send");
            a.wait().expect("recv");
        });
        check(
            &dst.to_vec().expect("read"),
            left,
            r,
            0,
            40 + round,
            "realloc",
        );
        drop(src);
    }
}

fn errors(w: &World) {
    let host = [0u8; 64];
    // SAFETY: deliberately wrong (host memory named as device memory); rcomm must refuse it
    // before touching it.
    let bad = unsafe { DevRef::from_raw(host.as_ptr() as u64, host.len()) };
    match w.send_device(&bad, 0, Tag(1)) {
        Err(CommError::Device { .. }) => {}
        other => panic!("host memory as device memory: {other:?}"),
    }
    let b = DeviceBuffer::new(device(), 100).expect("alloc");
    // SAFETY: deliberately past the end; rcomm must refuse it.
    let mut past = unsafe { DevMut::from_raw(b.addr(), 4096) };
    match w.recv_device(&mut past, Source::Rank(0), Tag(1)) {
        Err(CommError::Device { why, .. }) if why.contains("past the end") => {}
        other => panic!("length past the allocation: {other:?}"),
    }
}

fn cache(w: &World) {
    let st = rcomm::gpu::stats().expect("device stats");
    let ipc = w.size() > 1
        && std::env::var("RCOMM_TRANSPORT").as_deref() != Ok("tcp")
        && std::env::var("RCOMM_P2P_LEVEL").as_deref() != Ok("off");
    println!(
        "rank {} device stats: exports {} (+{} cached), imports {} (+{} cached, {} evicted), ipc bytes {}, staged bytes {}",
        w.rank(),
        st.exports,
        st.export_hits,
        st.imports,
        st.import_hits,
        st.import_evictions,
        st.ipc_bytes,
        st.staged_bytes
    );
    if ipc {
        assert!(st.ipc_bytes > 0, "no bytes went by IPC: {st:?}");
        assert!(
            st.import_hits > 0,
            "the import cache was never reused: {st:?}"
        );
        assert!(
            st.export_hits > 0,
            "the export cache was never reused: {st:?}"
        );
        let c = w.transport_counters().get("cuda");
        assert!(c.bytes_recv > 0, "no cuda lane bytes counted: {c:?}");
    } else {
        assert_eq!(st.ipc_bytes, 0, "IPC used where it must not be: {st:?}");
        assert!(st.staged_bytes > 0, "nothing staged: {st:?}");
    }
}

/// A device buffer holding `v`.
fn dev_of<T: bytemuck::Pod>(v: &[T]) -> DeviceBuffer {
    DeviceBuffer::from_host(device(), bytemuck::cast_slice(v)).expect("alloc")
}

/// A device buffer read back as `T`s.
fn host_of<T: bytemuck::Pod>(b: &DeviceBuffer) -> Vec<T> {
    let bytes = b.to_vec().expect("read");
    let mut v = vec![T::zeroed(); bytes.len() / size_of::<T>()];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&bytes);
    v
}

fn cv(r: u32, j: usize, i: usize) -> i32 {
    (r as i32 * 1_000_003) ^ (j as i32 * 7919) ^ (i as i32).wrapping_mul(31)
}

/// Collectives on device buffers (staged through the host), each against a sequential
/// reference built from every rank's inputs.
fn coll(w: &World) {
    use half::bf16;
    use rcomm::Op;
    let (r, n) = (w.rank(), w.size());
    let ranks = 0..n;
    for k in [0usize, 1, 7, (64 << 10) + 3] {
        // allreduce: i32 sum (wrapping), f32 max, bf16 sum of small integers (exact).
        let mut a = dev_of(&(0..k).map(|i| cv(r, 0, i)).collect::<Vec<_>>());
        w.allreduce_device::<i32>(&mut a, Op::Sum)
            .expect("allreduce i32");
        let want: Vec<i32> = (0..k)
            .map(|i| ranks.clone().fold(0i32, |s, q| s.wrapping_add(cv(q, 0, i))))
            .collect();
        assert_eq!(host_of::<i32>(&a), want, "allreduce i32 sum, {k}");
        let mut f = dev_of(
            &(0..k)
                .map(|i| (cv(r, 1, i) % 1000) as f32)
                .collect::<Vec<_>>(),
        );
        w.allreduce_device::<f32>(&mut f, Op::Max)
            .expect("allreduce f32");
        let want: Vec<f32> = (0..k)
            .map(|i| {
                ranks
                    .clone()
                    .map(|q| (cv(q, 1, i) % 1000) as f32)
                    .fold(f32::MIN, f32::max)
            })
            .collect();
        assert_eq!(host_of::<f32>(&f), want, "allreduce f32 max, {k}");
        let small = |q: u32, i: usize| bf16::from_f32(((q as usize + i) % 8) as f32);
        let mut h = dev_of(&(0..k).map(|i| small(r, i)).collect::<Vec<_>>());
        w.allreduce_device_on::<bf16>(
            &mut h,
            Op::Sum,
            rcomm::gpu::Stream {
                device: device(),
                raw: 0,
            },
        )
        .expect("allreduce bf16");
        let want: Vec<bf16> = (0..k)
            .map(|i| bf16::from_f32(ranks.clone().map(|q| small(q, i).to_f32()).sum::<f32>()))
            .collect();
        assert_eq!(host_of::<bf16>(&h), want, "allreduce bf16 sum, {k}");
        // bcast from the last rank.
        let root = n - 1;
        let mut b = dev_of(&(0..k).map(|i| cv(r, 2, i)).collect::<Vec<_>>());
        w.bcast_device(&mut b, root).expect("bcast");
        assert_eq!(
            host_of::<i32>(&b),
            (0..k).map(|i| cv(root, 2, i)).collect::<Vec<_>>(),
            "bcast {k}"
        );
        // reduce to rank 0.
        let s = dev_of(&(0..k).map(|i| cv(r, 3, i)).collect::<Vec<_>>());
        let mut out = dev_of(&vec![0i32; if r == 0 { k } else { 0 }]);
        w.reduce_device::<i32>(&s, &mut out, Op::Sum, 0)
            .expect("reduce");
        if r == 0 {
            let want: Vec<i32> = (0..k)
                .map(|i| ranks.clone().fold(0i32, |a, q| a.wrapping_add(cv(q, 3, i))))
                .collect();
            assert_eq!(host_of::<i32>(&out), want, "reduce {k}");
        }
        // allgather: every rank's block in rank order.
        let s = dev_of(&(0..k).map(|i| cv(r, 4, i)).collect::<Vec<_>>());
        let mut g = dev_of(&vec![0i32; k * n as usize]);
        w.allgather_device(&s, &mut g).expect("allgather");
        let want: Vec<i32> = ranks
            .clone()
            .flat_map(|q| (0..k).map(move |i| cv(q, 4, i)))
            .collect();
        assert_eq!(host_of::<i32>(&g), want, "allgather {k}");
        // reduce_scatter: block j of rank q's input is cv(q, 10 + j, i).
        let s = dev_of(
            &(0..n as usize)
                .flat_map(|j| (0..k).map(move |i| cv(r, 10 + j, i)))
                .collect::<Vec<_>>(),
        );
        let mut o = dev_of(&vec![0i32; k]);
        w.reduce_scatter_device::<i32>(&s, &mut o, Op::Sum)
            .expect("reduce_scatter");
        let want: Vec<i32> = (0..k)
            .map(|i| {
                ranks
                    .clone()
                    .fold(0i32, |a, q| a.wrapping_add(cv(q, 10 + r as usize, i)))
            })
            .collect();
        assert_eq!(host_of::<i32>(&o), want, "reduce_scatter {k}");
        // alltoall: block j of rank q goes to rank j.
        let s = dev_of(
            &(0..n as usize)
                .flat_map(|j| (0..k).map(move |i| cv(r, 100 + j, i)))
                .collect::<Vec<_>>(),
        );
        let mut o = dev_of(&vec![0i32; k * n as usize]);
        w.alltoall_device(&s, &mut o).expect("alltoall");
        let want: Vec<i32> = ranks
            .clone()
            .flat_map(|q| (0..k).map(move |i| cv(q, 100 + r as usize, i)))
            .collect();
        assert_eq!(host_of::<i32>(&o), want, "alltoall {k}");
    }
}

fn free_mem() -> usize {
    let g = rcomm_transport::gpu::gpu().expect("gpu");
    g.mem_info(device()).expect("mem_info").0
}

fn table(w: &World, big: bool) {
    ring(w, big);
    ok(w, "sizes-first");
    // The device collectives' pooled scratch is kept for reuse, not leaked: count it as free.
    let base = free_mem() + w.device().scratch_bytes();
    ring(w, big);
    ok(w, "sizes");
    mixed(w);
    ok(w, "mixed");
    stream(w);
    ok(w, "stream");
    realloc(w);
    ok(w, "realloc");
    errors(w);
    ok(w, "errors");
    coll(w);
    ok(w, "coll");
    cache(w);
    ok(w, "cache");
    // Imports keep peers' freed allocations mapped until closed: close them, then compare.
    w.barrier().expect("barrier");
    let g = rcomm_transport::gpu::gpu().expect("gpu");
    for p in 0..w.size() {
        g.forget_peer(p);
    }
    w.barrier().expect("barrier");
    let after = free_mem() + w.device().scratch_bytes();
    let tol = 64usize << 20;
    println!(
        "rank {} free device memory: {base} after warm-up, {after} at the end",
        w.rank()
    );
    assert!(
        after + tol >= base,
        "device memory leaked: {base} bytes free after warm-up, {after} at the end"
    );
    ok(w, "leak");
}

fn kill(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let victim = n - 1;
    let l = if rcomm::gpu::backend_name() == Ok("cuda") {
        256 << 20
    } else {
        16 << 20
    };
    let mut b = DeviceBuffer::new(device(), l).expect("alloc");
    w.barrier().expect("barrier");
    let t = Instant::now();
    if r == victim {
        // The receive is posted (its RTS may be matched and a copy started) when it dies.
        w.scope(|s| {
            let _q = s
                .irecv_device(&mut b, Source::Rank(0), Tag(500))
                .expect("irecv");
            std::thread::sleep(Duration::from_millis(50));
            // SAFETY: raising a signal on this process.
            unsafe { libc::raise(libc::SIGKILL) };
        });
        unreachable!("killed");
    }
    let res = if r == 0 {
        w.send_device(&b, victim, Tag(500)).map(drop)
    } else {
        w.recv_device(&mut b, Source::Rank(victim), Tag(501))
            .map(drop)
    };
    match res {
        Err(CommError::PeerLost { rank, .. }) if rank == victim => {}
        other => panic!("rank {r}: expected PeerLost of rank {victim}, got {other:?}"),
    }
    let took = t.elapsed();
    assert!(took < Duration::from_secs(20), "took {took:?}");
    println!(
        "rank {r}: ok kill (PeerLost after {:.2} s)",
        took.as_secs_f64()
    );
}

/// Whether node peers move device memory by IPC in this run (as `cache` decides).
fn ipc_expected(w: &World) -> bool {
    w.size() > 1
        && std::env::var("RCOMM_TRANSPORT").as_deref() != Ok("tcp")
        && std::env::var("RCOMM_P2P_LEVEL").as_deref() != Ok("off")
}

/// Device memory of a given kind from the backend, freed on drop.
struct Raw {
    addr: u64,
    len: usize,
}

impl Raw {
    fn new(kind: AllocKind, len: usize) -> Self {
        let g = rcomm_transport::gpu::gpu().expect("gpu");
        let addr = g
            .alloc_kind(device(), len, kind)
            .unwrap_or_else(|e| panic!("alloc {kind:?} of {len}: {e}"));
        Self { addr, len }
    }

    fn fill(&self, bytes: &[u8]) {
        let g = rcomm_transport::gpu::gpu().expect("gpu");
        g.copy_htod(self.addr, bytes).expect("fill");
    }

    fn read(&self) -> Vec<u8> {
        let g = rcomm_transport::gpu::gpu().expect("gpu");
        let mut v = vec![0u8; self.len];
        g.copy_dtoh(&mut v, self.addr).expect("read");
        v
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let g = rcomm_transport::gpu::gpu().expect("gpu");
        g.free(self.addr).expect("free");
    }
}

/// Sends `sends[k]` right and receives `recvs[k]` from the left, all at once.
fn ring_raw(w: &World, sends: &[Raw], recvs: &[Raw], tag0: i32) {
    let (r, n) = (w.rank(), w.size());
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    // SAFETY: each `Raw` is live device memory of `len` bytes that nothing else touches
    // until the scope below ends (the receives write theirs, the sends only read).
    let mut muts: Vec<DevMut<'_>> = recvs
        .iter()
        .map(|b| unsafe { DevMut::from_raw(b.addr, b.len) })
        .collect();
    // SAFETY: as above.
    let refs: Vec<DevRef<'_>> = sends
        .iter()
        .map(|b| unsafe { DevRef::from_raw(b.addr, b.len) })
        .collect();
    w.scope(|s| {
        let mut reqs = Vec::new();
        for (k, m) in muts.iter_mut().enumerate() {
            reqs.push(
                s.irecv_device(m, Source::Rank(left), Tag(tag0 + k as i32))
                    .expect("irecv"),
            );
        }
        for (k, m) in refs.iter().enumerate() {
            reqs.push(
                s.isend_device(m, right, Tag(tag0 + k as i32))
                    .expect("isend"),
            );
        }
        for q in reqs {
            q.wait().expect("wait");
        }
    });
}

fn kinds(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    let g = rcomm_transport::gpu::gpu().expect("gpu");
    let ipc = ipc_expected(w);
    for (ki, kind) in [
        AllocKind::Pool { shareable: true },
        AllocKind::Vmm { shareable: true },
    ]
    .into_iter()
    .enumerate()
    {
        let round = 60 + ki as u32;
        // Small ones go eagerly (staged by design), large ones by rendezvous: apart, so the
        // counters of the large ones are their own.
        for (part, sz) in [[0usize, 7], [(64 << 10) + 3, 4 << 20]].iter().enumerate() {
            let sends: Vec<Raw> = sz.iter().map(|&l| Raw::new(kind, l)).collect();
            let recvs: Vec<Raw> = sz.iter().map(|&l| Raw::new(kind, l)).collect();
            for (k, b) in sends.iter().enumerate() {
                b.fill(&data(r, right, 2 * part + k, round, b.len));
            }
            w.barrier().expect("barrier");
            let before = g.stats();
            ring_raw(w, &sends, &recvs, 600 + 10 * ki as i32);
            w.barrier().expect("barrier");
            let after = g.stats();
            for (k, b) in recvs.iter().enumerate() {
                check(
                    &b.read(),
                    left,
                    r,
                    2 * part + k,
                    round,
                    &format!("{kind:?}"),
                );
            }
            if ipc && part == 1 {
                let d = |f: fn(&rcomm_transport::gpu::GpuStats) -> u64| f(&after) - f(&before);
                assert_eq!(d(|s| s.fd_imports), 2, "{kind:?}: {before:?} -> {after:?}");
                assert_eq!(d(|s| s.fd_exports), 2, "{kind:?}: {before:?} -> {after:?}");
                assert_eq!(
                    d(|s| s.ipc_bytes) as usize,
                    sz.iter().sum::<usize>(),
                    "{kind:?}: {before:?} -> {after:?}"
                );
                assert_eq!(
                    d(|s| s.staged_bytes),
                    0,
                    "{kind:?} was staged: {before:?} -> {after:?}"
                );
            }
        }
    }
}

fn defpool(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    let g = rcomm_transport::gpu::gpu().expect("gpu");
    let kind = AllocKind::Pool { shareable: false };
    let sz = [(64 << 10) + 3, 4 << 20];
    let sends: Vec<Raw> = sz.iter().map(|&l| Raw::new(kind, l)).collect();
    let recvs: Vec<Raw> = sz.iter().map(|&l| Raw::new(kind, l)).collect();
    for (k, b) in sends.iter().enumerate() {
        b.fill(&data(r, right, k, 70, b.len));
    }
    w.barrier().expect("barrier");
    let before = g.stats();
    ring_raw(w, &sends, &recvs, 700);
    w.barrier().expect("barrier");
    let after = g.stats();
    for (k, b) in recvs.iter().enumerate() {
        check(&b.read(), left, r, k, 70, "default pool");
    }
    assert_eq!(after.fd_imports, before.fd_imports, "{after:?}");
    assert_eq!(after.ipc_bytes, before.ipc_bytes, "{after:?}");
    if n > 1 {
        assert!(
            after.staged_bytes >= before.staged_bytes + sz.iter().sum::<usize>() as u64,
            "not staged: {before:?} -> {after:?}"
        );
    }
}

fn register(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    let g = rcomm_transport::gpu::gpu().expect("gpu");
    let ipc = ipc_expected(w);
    // Pool memory where descriptors can travel (the job's local channel is up); cuMemAlloc
    // memory otherwise.
    let kind = if ipc {
        AllocKind::Pool { shareable: true }
    } else {
        AllocKind::Legacy
    };
    let l = (1 << 20) + 5;
    let b = Raw::new(kind, l);
    let dst = Raw::new(kind, l);
    b.fill(&data(r, right, 0, 80, l));
    let s0 = g.stats();
    rcomm::gpu::register(b.addr, l).expect("register");
    let s1 = g.stats();
    assert_eq!(s1.exports, s0.exports + 1, "register exports: {s1:?}");
    w.barrier().expect("barrier");
    ring_raw(w, std::slice::from_ref(&b), std::slice::from_ref(&dst), 800);
    check(&dst.read(), left, r, 0, 80, "registered");
    let s2 = g.stats();
    if ipc {
        assert_eq!(s2.exports, s1.exports, "the send exported again: {s2:?}");
        assert!(s2.export_hits > s1.export_hits, "no export hit: {s2:?}");
    }
    w.barrier().expect("barrier");
    assert!(rcomm::gpu::deregister(b.addr).expect("deregister"));
    assert!(!rcomm::gpu::deregister(b.addr).expect("deregister twice"));
    b.fill(&data(r, right, 0, 81, l));
    w.barrier().expect("barrier");
    ring_raw(w, std::slice::from_ref(&b), std::slice::from_ref(&dst), 810);
    check(&dst.read(), left, r, 0, 81, "deregistered");
    let s3 = g.stats();
    if ipc {
        assert_eq!(s3.exports, s2.exports + 1, "not exported anew: {s3:?}");
    }
    // Bad input is an error, not a panic.
    let host = [0u8; 16];
    assert!(rcomm::gpu::register(host.as_ptr() as u64, 16).is_err());
    assert!(rcomm::gpu::register(b.addr, l + 1).is_err());
    w.barrier().expect("barrier");
    let _ = n;
}

fn kinds_table(w: &World) {
    kinds(w);
    ok(w, "kinds");
    defpool(w);
    ok(w, "defpool");
    register(w);
    ok(w, "register");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let w = rcomm::init().expect("init");
    match args.first().map(String::as_str) {
        Some("kill") => kill(&w),
        Some("kinds") => kinds_table(&w),
        _ => table(&w, args.iter().any(|a| a == "--big")),
    }
}
