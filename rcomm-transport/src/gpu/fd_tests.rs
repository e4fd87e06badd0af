//! The stand-in's pool and VMM allocations between two processes: exported by descriptor over
//! the local channel, imported by mapping it. This test is the exporter; a child process (this
//! test binary running `standin_fd_child`) imports, told what to import on its stdin.
use super::cache::{ShareKind, decode_key};
use super::standin::StandIn;
use super::*;
use rcomm_runtime::auth::Secret;
use std::io::{BufRead, BufReader, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29) ^ seed ^ ((i >> 9) as u8))
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Lines of this process's memory map naming a stand-in memfd of `what` (`pool`, `vmm`).
fn mapped(what: &str) -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&format!("rcomm-standin-{what}")))
        .count()
}

const N: usize = (64 << 10) + 3;

/// The one job of this test process: the responder keeps the first job it serves, so every
/// test that exports by descriptor sets the same one.
pub(super) fn test_job() -> (String, Secret) {
    static JOB: std::sync::OnceLock<(String, Secret)> = std::sync::OnceLock::new();
    let j = JOB.get_or_init(|| {
        (
            format!("fdtest{}", std::process::id()),
            Secret::random().unwrap(),
        )
    });
    fdshare::set_job(&j.0, &j.1);
    j.clone()
}

#[test]
fn standin_pool_and_vmm_memory_travel_by_descriptor_between_two_processes() {
    let (job, secret) = test_job();
    let g = StandIn::new();
    let pool = g
        .alloc_kind(0, N, AllocKind::Pool { shareable: true })
        .unwrap();
    let vmm = g
        .alloc_kind(0, N, AllocKind::Vmm { shareable: true })
        .unwrap();
    assert_eq!(
        g.alloc_kind_of(pool + 9).unwrap(),
        AllocKind::Pool { shareable: true }
    );
    g.copy_htod(pool, &pattern(N, 1)).unwrap();
    g.copy_htod(vmm, &pattern(N, 2)).unwrap();
    let kp = g.export(pool + 5, N - 5).unwrap();
    let kv = g.export(vmm, N).unwrap();
    assert_eq!(decode_key(kp.as_bytes()).unwrap().kind, ShareKind::PoolFd);
    assert_eq!(decode_key(kv.as_bytes()).unwrap().kind, ShareKind::VmmFd);
    g.export(vmm, 10).unwrap();
    // A freed allocation: its key is stale, and asking for it is refused.
    let gone = g
        .alloc_kind(0, 4096, AllocKind::Vmm { shareable: true })
        .unwrap();
    let kg = g.export(gone, 4096).unwrap();
    let gone_id = g.ptr_info(gone).unwrap().buffer_id;
    g.free(gone).unwrap();
    assert!(!fdshare::is_offered(gone_id));
    let s = g.stats();
    assert_eq!((s.exports, s.export_hits, s.fd_exports), (3, 1, 3), "{s:?}");

    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "gpu::fd_tests::standin_fd_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            if tx.send(l.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let wait_for = |what: &str| loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(what) => break l,
            Ok(_) => {}
            Err(e) => panic!("the child ended or hung before {what}: {e}"),
        }
    };
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        "{job} {} {} {} {}",
        hex(secret.as_bytes()),
        hex(kp.as_bytes()),
        hex(kv.as_bytes()),
        hex(kg.as_bytes())
    )
    .unwrap();
    wait_for("FD-1");
    // The pool allocation freed and made again (another buffer id, likely the same place):
    // the child's import of the old one must go.
    g.free(pool).unwrap();
    let pool2 = g
        .alloc_kind(0, N, AllocKind::Pool { shareable: true })
        .unwrap();
    g.copy_htod(pool2, &pattern(N, 3)).unwrap();
    let kp2 = g.export(pool2, N).unwrap();
    writeln!(stdin, "{}", hex(kp2.as_bytes())).unwrap();
    let l = wait_for("FD-2");
    assert!(l.contains("ok"), "{l}");
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "the child hangs");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    g.free(pool2).unwrap();
    g.free(vmm).unwrap();
}

#[test]
#[ignore = "run by standin_pool_and_vmm_memory_travel_by_descriptor_between_two_processes"]
fn standin_fd_child() {
    let mut l = String::new();
    if std::io::stdin().lock().read_line(&mut l).unwrap() == 0 {
        return;
    }
    let w: Vec<&str> = l.split_whitespace().collect();
    let secret = Secret::from_bytes(unhex(w[1]).try_into().unwrap());
    fdshare::set_job(w[0], &secret);
    let key = |h: &str| crate::mem::RKey::new(&unhex(h)).unwrap();
    let (kp, kv, kg) = (key(w[2]), key(w[3]), key(w[4]));
    let g = StandIn::new();
    let dst = g.alloc(0, N).unwrap();
    let get = |k: &crate::mem::RKey, dst: u64, len: usize| {
        let p = g.get(0, k, dst, len)?;
        while !g.query(&p)? {}
        g.finish(p)
    };
    get(&kp, dst, N - 5).unwrap();
    let mut back = vec![0u8; N - 5];
    g.copy_dtoh(&mut back, dst).unwrap();
    assert_eq!(back, pattern(N, 1)[5..], "pool bytes");
    // Into host memory, twice: the second is an import hit.
    let mut host = vec![0u8; N];
    get(&kv, host.as_mut_ptr() as u64, N).unwrap();
    assert_eq!(host, pattern(N, 2), "vmm bytes");
    get(&kv, host.as_mut_ptr() as u64, 100).unwrap();
    let s = g.stats();
    assert_eq!((s.imports, s.import_hits, s.fd_imports), (2, 1, 2), "{s:?}");
    assert_eq!(s.ipc_bytes as usize, (N - 5) + N + 100, "{s:?}");
    assert_eq!((mapped("pool"), mapped("vmm")), (1, 1));
    // The freed allocation: refused, as a legacy key of a freed allocation is.
    match get(&kg, dst, 4096) {
        Err(GpuError::Invalid(why)) if why.contains("freed") => {}
        other => panic!("a freed allocation's key: {other:?}"),
    }
    assert_eq!(g.stats().fd_imports, 2);
    println!("FD-1");
    let mut l = String::new();
    std::io::stdin().lock().read_line(&mut l).unwrap();
    let kp2 = key(l.trim());
    get(&kp2, dst, N).unwrap();
    g.copy_dtoh(&mut back, dst).unwrap();
    assert_eq!(
        back,
        pattern(N, 3)[..N - 5],
        "the new pool allocation's bytes"
    );
    let s = g.stats();
    assert_eq!((s.fd_imports, s.import_evictions), (3, 1), "{s:?}");
    assert_eq!(mapped("pool"), 1, "the stale import is unmapped");
    // The peer is lost: every import goes, and its mapping with it.
    g.forget_peer(0);
    assert_eq!((mapped("pool"), mapped("vmm")), (0, 0));
    g.free(dst).unwrap();
    println!("FD-2 ok {s:?}");
}

#[test]
fn standin_memory_of_an_unshareable_pool_or_vmm_handle_refuses_export() {
    let g = StandIn::new();
    for kind in [
        AllocKind::Pool { shareable: false },
        AllocKind::Vmm { shareable: false },
    ] {
        let p = g.alloc_kind(0, 1000, kind).unwrap();
        assert_eq!(g.alloc_kind_of(p).unwrap(), kind);
        g.copy_htod(p, &pattern(1000, 4)).unwrap();
        match g.export(p, 1000) {
            Err(GpuError::Unreachable(why)) => assert!(why.contains("cannot be shared"), "{why}"),
            other => panic!("{kind:?}: {other:?}"),
        }
        let mut back = vec![0u8; 1000];
        g.copy_dtoh(&mut back, p).unwrap();
        assert_eq!(back, pattern(1000, 4));
        g.free(p).unwrap();
    }
    assert_eq!(g.stats().exports, 0);
}

#[test]
fn standin_pool_and_vmm_memory_between_ranks_of_one_process_is_copied_directly() {
    let g = StandIn::new();
    for (seed, kind) in [
        AllocKind::Pool { shareable: true },
        AllocKind::Vmm { shareable: true },
    ]
    .into_iter()
    .enumerate()
    {
        let p = g.alloc_kind(0, N, kind).unwrap();
        g.copy_htod(p, &pattern(N, 10 + seed as u8)).unwrap();
        let k = g.export(p + 3, N - 3).unwrap();
        let mut host = vec![0u8; N - 3];
        let q = g.get(1, &k, host.as_mut_ptr() as u64, N - 3).unwrap();
        g.finish(q).unwrap();
        assert_eq!(host, pattern(N, 10 + seed as u8)[3..], "{kind:?}");
        g.free(p).unwrap();
        // Freed: the key is stale, as a legacy one is.
        match g.get(1, &k, host.as_mut_ptr() as u64, 1) {
            Err(GpuError::Invalid(why)) if why.contains("freed") => {}
            other => panic!("{kind:?}: {other:?}"),
        }
    }
    assert_eq!(g.stats().fd_imports, 0, "no descriptor within one process");
}
