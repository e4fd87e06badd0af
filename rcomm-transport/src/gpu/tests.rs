//! Tests of the device layer: the stand-in everywhere; the CUDA driver where one loads (and,
//! where none does, that loading it is an error, not a panic).
use super::standin::StandIn;
use super::*;
use rcomm_runtime::config::P2pLevel;
use std::sync::{Arc, Mutex};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn standin_alloc_ptr_info_free() {
    let g = StandIn::new();
    let (free0, total) = g.mem_info(0).unwrap();
    assert_eq!(free0, total);
    let p = g.alloc(0, 1000).unwrap();
    assert_eq!(p % 256, 0);
    let i = g.ptr_info(p + 10).unwrap();
    assert_eq!((i.device, i.base, i.size), (0, p, 1000));
    assert!(i.buffer_id >= 1);
    assert!(matches!(g.ptr_info(p + 1000), Err(GpuError::Invalid(_))));
    assert_eq!(g.mem_info(0).unwrap().0, total - 1000);
    let z = g.alloc(0, 0).unwrap();
    assert_ne!(g.ptr_info(z).unwrap().buffer_id, i.buffer_id);
    g.free(z).unwrap();
    g.free(p).unwrap();
    assert!(matches!(g.free(p), Err(GpuError::Invalid(_))));
    assert!(matches!(g.ptr_info(p), Err(GpuError::Invalid(_))));
    assert_eq!(g.mem_info(0).unwrap().0, total);
    assert!(matches!(g.alloc(1, 8), Err(GpuError::Invalid(_))));
    let d = g.devices().unwrap();
    assert_eq!(d.len(), 1);
    assert!(d[0].name.contains("stand-in"));
}

#[test]
fn standin_copies_both_ways() {
    let g = StandIn::new();
    let a = g.alloc(0, 4096).unwrap();
    let b = g.alloc(0, 4096).unwrap();
    let data = pattern(4096, 5);
    g.copy_htod(a, &data).unwrap();
    g.copy_dtod(b, a, 4096).unwrap();
    let mut back = vec![0u8; 4096];
    g.copy_dtoh(&mut back, b).unwrap();
    assert_eq!(back, data);
    let mut part = vec![0u8; 100];
    g.copy_dtoh(&mut part, a + 50).unwrap();
    assert_eq!(part, data[50..150]);
    assert_eq!(g.stats().staged_bytes, 4096 + 4096 + 100);
    // Past the end of the allocation.
    assert!(matches!(
        g.copy_dtoh(&mut part, a + 4000),
        Err(GpuError::Invalid(_))
    ));
    assert!(matches!(
        g.copy_htod(b + 4095, &[1, 2]),
        Err(GpuError::Invalid(_))
    ));
    g.free(a).unwrap();
    g.free(b).unwrap();
}

#[test]
fn standin_rejects_host_pointers() {
    let g = StandIn::new();
    let host = [0u8; 64];
    let hp = host.as_ptr() as u64;
    let e = g.ptr_info(hp).unwrap_err();
    assert!(
        matches!(&e, GpuError::Invalid(m) if m.contains("not device memory")),
        "{e}"
    );
    let mut out = [0u8; 8];
    assert!(matches!(
        g.copy_dtoh(&mut out, hp),
        Err(GpuError::Invalid(_))
    ));
    assert!(matches!(g.export(hp, 8), Err(GpuError::Invalid(_))));
}

#[test]
fn standin_export_get_in_process() {
    let g = StandIn::new();
    let src = g.alloc(0, 8192).unwrap();
    let data = pattern(8192, 9);
    g.copy_htod(src, &data).unwrap();
    let key = g.export(src + 100, 4000).unwrap();
    assert!(key.as_bytes().len() <= crate::mem::RKEY_MAX);
    let dst = g.alloc(0, 4000).unwrap();
    let p = g.get(1, &key, dst, 4000).unwrap();
    // Completion shows on the second query (exercises the asynchronous path).
    assert!(!g.query(&p).unwrap());
    assert!(g.query(&p).unwrap());
    g.finish(p).unwrap();
    let mut back = vec![0u8; 4000];
    g.copy_dtoh(&mut back, dst).unwrap();
    assert_eq!(back, data[100..4100]);
    // Into host memory, a shorter length.
    let mut host = vec![0u8; 1000];
    let p = g.get(1, &key, host.as_mut_ptr() as u64, 1000).unwrap();
    g.finish(p).unwrap();
    assert_eq!(host, data[100..1100]);
    // Longer than the key: refused.
    assert!(matches!(
        g.get(1, &key, dst, 4001),
        Err(GpuError::Invalid(_))
    ));
    // A second export of the same allocation is a hit.
    let _ = g.export(src, 10).unwrap();
    let s = g.stats();
    assert_eq!((s.exports, s.export_hits), (1, 1));
    assert_eq!((s.imports, s.import_hits, s.import_evictions), (1, 1, 0));
    assert_eq!(s.ipc_bytes, 5000);
    // A key that does not decode.
    let bad = crate::mem::RKey::new(&[1, 2, 3]).unwrap();
    assert!(matches!(g.get(1, &bad, dst, 1), Err(GpuError::Invalid(_))));
    g.forget_peer(1);
    let p = g.get(1, &key, dst, 10).unwrap();
    g.finish(p).unwrap();
    assert_eq!(g.stats().imports, 2);
    g.free(src).unwrap();
    g.free(dst).unwrap();
}

#[test]
fn standin_realloc_reexports_and_evicts_stale_import() {
    let g = StandIn::new();
    let dst = g.alloc(0, 4096).unwrap();
    let a = g.alloc(0, 4096).unwrap();
    let id_a = g.ptr_info(a).unwrap().buffer_id;
    g.copy_htod(a, &pattern(4096, 1)).unwrap();
    let k1 = g.export(a, 4096).unwrap();
    g.finish(g.get(3, &k1, dst, 4096).unwrap()).unwrap();
    g.free(a).unwrap();
    // Freed: the old key no longer reads (in-process the stand-in can tell).
    assert!(matches!(g.get(4, &k1, dst, 16), Err(GpuError::Invalid(_))));
    // Made again, likely at the same address: another buffer id.
    let b = g.alloc(0, 4096).unwrap();
    let id_b = g.ptr_info(b).unwrap().buffer_id;
    assert_ne!(id_a, id_b);
    g.copy_htod(b, &pattern(4096, 2)).unwrap();
    let k2 = g.export(b, 4096).unwrap();
    assert_eq!(g.stats().exports, 2, "a new allocation is exported anew");
    assert_eq!(g.stats().export_hits, 0);
    let ev = g.stats().import_evictions;
    g.finish(g.get(3, &k2, dst, 4096).unwrap()).unwrap();
    let mut back = vec![0u8; 4096];
    g.copy_dtoh(&mut back, dst).unwrap();
    assert_eq!(back, pattern(4096, 2));
    if b == a {
        assert_eq!(
            g.stats().import_evictions,
            ev + 1,
            "the stale import of the same place went"
        );
    }
    g.free(b).unwrap();
    g.free(dst).unwrap();
}

/// Polls `done` until true or a few seconds passed.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    false
}

/// A host function that blocks its stream until the returned sender is dropped or sent to.
fn gate(g: &StandIn, s: Stream) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    g.enqueue(
        s,
        Box::new(move || {
            let _ = rx.recv_timeout(std::time::Duration::from_secs(30));
        }),
    )
    .unwrap();
    tx
}

#[test]
fn standin_streams_run_eagerly_in_order_and_are_destroyed_with_their_work_done() {
    let g = StandIn::new();
    let s = g.stream_create(0).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..5 {
        let l = log.clone();
        g.enqueue(s, Box::new(move || l.lock().unwrap().push(i)))
            .unwrap();
    }
    let l = log.clone();
    g.enqueue(
        Stream { device: 0, raw: 0 },
        Box::new(move || l.lock().unwrap().push(100)),
    )
    .unwrap();
    // Nobody waits: the workers run the queues, as a GPU would.
    assert!(eventually(|| log.lock().unwrap().len() == 6));
    let v = log.lock().unwrap().clone();
    let ours: Vec<i32> = v.iter().copied().filter(|&x| x < 100).collect();
    assert_eq!(ours, vec![0, 1, 2, 3, 4], "FIFO order within a stream");
    assert!(g.stream_query(s).unwrap());
    // Destroy with work still queued: the work runs first and the worker is joined.
    let tx = gate(&g, s);
    let l = log.clone();
    g.enqueue(s, Box::new(move || l.lock().unwrap().push(7)))
        .unwrap();
    assert!(!g.stream_query(s).unwrap());
    let t = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(tx);
    });
    g.stream_destroy(s).unwrap();
    assert_eq!(log.lock().unwrap().last(), Some(&7));
    t.join().unwrap();
    assert!(g.stream_wait_host(s).is_err());
    assert!(g.enqueue(s, Box::new(|| ())).is_err());
    assert!(g.stream_destroy(Stream { device: 0, raw: 0 }).is_err());
}

#[test]
fn standin_events_poll_and_wait_with_a_deadline_and_order_other_streams() {
    let g = StandIn::new();
    let (a, b) = (g.stream_create(0).unwrap(), g.stream_create(0).unwrap());
    let tx = gate(&g, a);
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    g.enqueue(a, Box::new(move || l.lock().unwrap().push("a")))
        .unwrap();
    let e = g.event_record(a).unwrap();
    assert!(!g.event_query(&e).unwrap());
    assert!(!g.stream_query(a).unwrap());
    let t0 = std::time::Instant::now();
    let short = t0 + std::time::Duration::from_millis(30);
    assert!(
        !g.event_wait_host(&e, short).unwrap(),
        "the deadline came first"
    );
    assert!(t0.elapsed() >= std::time::Duration::from_millis(30));
    // Work on b after the event waits for a's work before it.
    g.stream_wait_event(b, &e).unwrap();
    let l = log.clone();
    g.enqueue(b, Box::new(move || l.lock().unwrap().push("b")))
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(log.lock().unwrap().is_empty(), "b ran before a's event");
    // Work queued on a after the event is not part of it.
    let tx2 = {
        drop(tx);
        gate(&g, a)
    };
    let long = std::time::Instant::now() + std::time::Duration::from_secs(10);
    assert!(g.event_wait_host(&e, long).unwrap());
    assert!(g.event_query(&e).unwrap());
    assert!(!g.stream_query(a).unwrap(), "the second gate still holds a");
    g.stream_wait_host(b).unwrap();
    assert_eq!(*log.lock().unwrap(), vec!["a", "b"]);
    drop(tx2);
    g.event_destroy(e).unwrap();
    g.stream_destroy(a).unwrap();
    g.stream_destroy(b).unwrap();
}

#[test]
fn standin_stream_handles_are_a_c_header_that_queues_host_functions() {
    unsafe extern "C" fn bump(arg: *mut std::ffi::c_void) {
        // SAFETY: the test passes a live AtomicU64.
        let n = unsafe { &*(arg as *const std::sync::atomic::AtomicU64) };
        n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    let g = StandIn::new();
    let s = g.stream_create(0).unwrap();
    // SAFETY: a stand-in stream handle is the address of its `StreamAbi` header.
    let abi = unsafe { &*(s.raw as usize as *const StreamAbi) };
    assert_eq!(abi.magic, STREAM_MAGIC);
    assert_eq!(STREAM_MAGIC.to_le_bytes(), *b"rcommstr");
    let tx = gate(&g, s);
    let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let arg = Arc::as_ptr(&n) as *mut std::ffi::c_void;
    for _ in 0..3 {
        // SAFETY: the stream is live; `bump` reads `arg`, alive until the stream is waited for.
        let rc = unsafe { (abi.launch_host_func)(s.raw as usize as *mut _, bump, arg) };
        assert_eq!(rc, 0);
    }
    std::thread::sleep(std::time::Duration::from_millis(10));
    assert_eq!(
        n.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "after the gate"
    );
    drop(tx);
    g.stream_wait_host(s).unwrap();
    assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 3);
    // A null stream is refused, not dereferenced.
    // SAFETY: the entry checks for null before anything else.
    let rc = unsafe { (abi.launch_host_func)(std::ptr::null_mut(), bump, arg) };
    assert_ne!(rc, 0);
    g.stream_destroy(s).unwrap();
}

#[test]
fn standin_p2p_off_is_unreachable() {
    let g = StandIn::new();
    g.set_p2p_level(P2pLevel::Off);
    let a = g.alloc(0, 64).unwrap();
    let b = g.alloc(0, 64).unwrap();
    let k = g.export(a, 64).unwrap();
    assert!(matches!(g.get(1, &k, b, 64), Err(GpuError::Unreachable(_))));
    g.set_p2p_level(P2pLevel::Loc);
    g.finish(g.get(1, &k, b, 64).unwrap()).unwrap();
    g.free(a).unwrap();
    g.free(b).unwrap();
}

#[test]
fn standin_get_from_dead_process_is_an_error() {
    let g = StandIn::new();
    let a = g.alloc(0, 64).unwrap();
    let k = g.export(a, 64).unwrap();
    let mut parts = cache::decode_key(k.as_bytes()).unwrap();
    // A pid that does not exist (above the kernel's pid_max).
    parts.pid = 0x7fff_fff0;
    let k = cache::encode_key(&parts);
    let mut out = [0u8; 64];
    let e = g.get(2, &k, out.as_mut_ptr() as u64, 64).unwrap_err();
    assert!(
        matches!(
            e,
            GpuError::Call {
                call: "process_vm_readv",
                ..
            } | GpuError::Unreachable(_)
        ),
        "{e}"
    );
    g.free(a).unwrap();
}

#[test]
fn driver_load_is_an_error_not_a_panic_without_a_device() {
    match driver::Driver::load() {
        Ok(d) => {
            // A GPU is here: a short check of the basics.
            let devs = d.devices().unwrap();
            assert!(!devs.is_empty());
            assert!(devs[0].pci_bus_id.len() == 12, "{}", devs[0].pci_bus_id);
            let p = d.alloc(0, 1 << 20).unwrap();
            let i = d.ptr_info(p + 5).unwrap();
            assert_eq!((i.device, i.base, i.size), (0, p, 1 << 20));
            let data = pattern(1 << 20, 3);
            d.copy_htod(p, &data).unwrap();
            let q = d.alloc(0, 1 << 20).unwrap();
            d.copy_dtod(q, p, 1 << 20).unwrap();
            let mut back = vec![0u8; 1 << 20];
            d.copy_dtoh(&mut back, q).unwrap();
            assert_eq!(back, data);
            let host = [0u8; 64];
            assert!(matches!(
                d.ptr_info(host.as_ptr() as u64),
                Err(GpuError::Invalid(_))
            ));
            assert!(matches!(
                d.ptr_info(0xdead_0000_0000),
                Err(GpuError::Invalid(_))
            ));
            let k = d.export(p + 64, 1000).unwrap();
            let _ = d.export(p, 10).unwrap();
            assert_eq!((d.stats().exports, d.stats().export_hits), (1, 1));
            assert!(matches!(
                d.get(1, &k, q, 1000),
                Err(GpuError::Unreachable(_))
            ));
            let s = d.stream_create(0).unwrap();
            d.stream_wait_host(s).unwrap();
            d.stream_wait_host(Stream { device: 0, raw: 0 }).unwrap();
            d.stream_destroy(s).unwrap();
            let (free, total) = d.mem_info(0).unwrap();
            assert!(free <= total && total > 0);
            d.free(p).unwrap();
            d.free(q).unwrap();
        }
        Err(e) => {
            rcomm_testkit::skip_hardware(&format!(
                "the driver's checks on a real GPU (only the no-device error is checked): {e}"
            ));
            assert!(matches!(&e, GpuError::NoDevice { .. }), "{e}");
            let m = e.to_string();
            assert!(
                m.contains("not found")
                    || m.contains("cuInit")
                    || m.contains("no device")
                    || m.contains("feature"),
                "{m}"
            );
        }
    }
}

#[test]
fn standin_process_vm_readv_path_reads_memory() {
    // The cross-process read, aimed at this process (allowed for oneself).
    let src = pattern(100_000, 4);
    let mut dst = vec![0u8; 100_000];
    standin::read_remote(
        std::process::id(),
        src.as_ptr() as u64,
        dst.as_mut_ptr() as u64,
        dst.len(),
    )
    .unwrap();
    assert_eq!(dst, src);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// CUDA IPC between two processes on one GPU (where a driver loads; else nothing): this test
/// exports, a child process (this test binary running `driver_ipc_child`) imports and checks
/// the bytes; then the allocation is freed and made again and the child's import cache must
/// drop the stale mapping.
#[test]
fn driver_ipc_between_two_processes() {
    use std::io::{BufRead, BufReader, Write};
    let d = match driver::Driver::load() {
        Ok(d) => d,
        Err(e) => {
            rcomm_testkit::skip_hardware(&format!(
                "driver_ipc_between_two_processes needs a GPU: {e}"
            ));
            return;
        }
    };
    let n = 1 << 20;
    let a = d.alloc(0, n).unwrap();
    d.copy_htod(a, &pattern(n, 1)).unwrap();
    let k1 = d.export(a + 4096, n - 4096).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "gpu::tests::driver_ipc_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RCOMM_TEST_IPC_KEY", hex(k1.as_bytes()))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut wait_for = |what: &str| loop {
        let mut l = String::new();
        assert!(
            out.read_line(&mut l).unwrap() > 0,
            "the child ended before {what}"
        );
        if l.contains(what) {
            break l;
        }
    };
    // (The harness writes "test … ... " before the child's own line: look for the marker.)
    wait_for("IPC-1");
    d.free(a).unwrap();
    let b = d.alloc(0, n).unwrap();
    d.copy_htod(b, &pattern(n, 2)).unwrap();
    let k2 = d.export(b, n).unwrap();
    assert_eq!(d.stats().exports, 2);
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{} {}", hex(k2.as_bytes()), u8::from(a == b)).unwrap();
    let l = wait_for("IPC-2");
    assert!(l.contains("ok"), "{l}");
    assert!(child.wait().unwrap().success());
    d.free(b).unwrap();
}

#[test]
#[ignore = "run by driver_ipc_between_two_processes"]
fn driver_ipc_child() {
    use std::io::BufRead;
    let Ok(key) = std::env::var("RCOMM_TEST_IPC_KEY") else {
        return;
    };
    let d = driver::Driver::load().unwrap();
    let n = 1 << 20;
    let k1 = crate::mem::RKey::new(&unhex(&key)).unwrap();
    let dst = d.alloc(0, n).unwrap();
    let p = d.get(0, &k1, dst, n - 4096).unwrap();
    while !d.query(&p).unwrap() {}
    d.finish(p).unwrap();
    let mut back = vec![0u8; n - 4096];
    d.copy_dtoh(&mut back, dst).unwrap();
    assert_eq!(back, pattern(n, 1)[4096..]);
    // Into host memory, and a second get of the same allocation: an import hit.
    let mut host = vec![0u8; 4096];
    let p = d.get(0, &k1, host.as_mut_ptr() as u64, 4096).unwrap();
    d.finish(p).unwrap();
    assert_eq!(host, pattern(n, 1)[4096..8192]);
    let s = d.stats();
    assert_eq!((s.imports, s.import_hits), (1, 1), "{s:?}");
    println!("IPC-1");
    let mut l = String::new();
    std::io::stdin().lock().read_line(&mut l).unwrap();
    let (k2, same) = l.trim().split_once(' ').unwrap();
    let k2 = crate::mem::RKey::new(&unhex(k2)).unwrap();
    let p = d.get(0, &k2, dst, n).unwrap();
    d.finish(p).unwrap();
    let mut back = vec![0u8; n];
    d.copy_dtoh(&mut back, dst).unwrap();
    assert_eq!(back, pattern(n, 2));
    let s = d.stats();
    assert_eq!(s.imports, 2, "{s:?}");
    if same == "1" {
        assert_eq!(s.import_evictions, 1, "{s:?}");
    }
    d.forget_peer(0);
    d.free(dst).unwrap();
    println!("IPC-2 ok {s:?}");
}
