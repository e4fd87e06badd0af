//! Pool and VMM memory between two processes on the CUDA driver (where one loads; else the
//! test says it skipped): this test exports, a child process (this test binary running
//! `driver_fd_child`) imports by descriptor and checks the bytes; kinds are found from the
//! driver; default-pool memory refuses export.
use super::*;
use rcomm_runtime::auth::Secret;
use std::io::{BufRead, BufReader, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed ^ ((i >> 10) as u8))
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

const N: usize = (4 << 20) + 3;

#[test]
fn driver_pool_and_vmm_memory_travel_by_descriptor_between_two_processes() {
    let d = match driver::Driver::load() {
        Ok(d) => d,
        Err(e) => {
            rcomm_testkit::skip_hardware(&format!(
                "driver_pool_and_vmm_memory_travel_by_descriptor_between_two_processes needs a GPU: {e}"
            ));
            return;
        }
    };
    let (job, secret) = super::fd_tests::test_job();
    let pool = d
        .alloc_kind(0, N, AllocKind::Pool { shareable: true })
        .unwrap();
    let vmm = d
        .alloc_kind(0, N, AllocKind::Vmm { shareable: true })
        .unwrap();
    let def = d
        .alloc_kind(0, 4096, AllocKind::Pool { shareable: false })
        .unwrap();
    assert_eq!(
        d.alloc_kind_of(pool + 7).unwrap(),
        AllocKind::Pool { shareable: true }
    );
    assert_eq!(
        d.alloc_kind_of(vmm).unwrap(),
        AllocKind::Vmm { shareable: true }
    );
    assert_eq!(
        d.alloc_kind_of(def).unwrap(),
        AllocKind::Pool { shareable: false }
    );
    assert!(matches!(d.export(def, 4096), Err(GpuError::Unreachable(_))));
    d.copy_htod(pool, &pattern(N, 1)).unwrap();
    d.copy_htod(vmm, &pattern(N, 2)).unwrap();
    let kp = d.export(pool, N).unwrap();
    let kv = d.export(vmm + 4096, N - 4096).unwrap();
    assert_eq!(d.stats().fd_exports, 2);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "gpu::driver_fd_tests::driver_fd_child",
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
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        "{job} {} {} {}",
        hex(secret.as_bytes()),
        hex(kp.as_bytes()),
        hex(kv.as_bytes())
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let line = loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) if l.contains("DRVFD") => break l,
            Ok(_) => {}
            Err(e) => panic!("the child ended or hung before importing: {e}"),
        }
    };
    assert!(line.contains("ok"), "{line}");
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "the child hangs");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    for p in [pool, vmm, def] {
        d.free(p).unwrap();
    }
}

#[test]
#[ignore = "run by driver_pool_and_vmm_memory_travel_by_descriptor_between_two_processes"]
fn driver_fd_child() {
    let mut l = String::new();
    if std::io::stdin().lock().read_line(&mut l).unwrap() == 0 {
        return;
    }
    let w: Vec<&str> = l.split_whitespace().collect();
    fdshare::set_job(w[0], &Secret::from_bytes(unhex(w[1]).try_into().unwrap()));
    let key = |h: &str| crate::mem::RKey::new(&unhex(h)).unwrap();
    let d = driver::Driver::load().unwrap();
    let dst = d.alloc(0, N).unwrap();
    let get = |k: &crate::mem::RKey, dst: u64, len: usize| {
        let p = d.get(0, k, dst, len)?;
        d.finish(p)
    };
    get(&key(w[2]), dst, N).unwrap();
    let mut back = vec![0u8; N];
    d.copy_dtoh(&mut back, dst).unwrap();
    assert_eq!(back, pattern(N, 1), "pool bytes");
    let kv = key(w[3]);
    let mut host = vec![0u8; N - 4096];
    get(&kv, host.as_mut_ptr() as u64, N - 4096).unwrap();
    assert_eq!(host, pattern(N, 2)[4096..], "vmm bytes");
    get(&kv, dst, 100).unwrap();
    let s = d.stats();
    assert_eq!((s.fd_imports, s.import_hits), (2, 1), "{s:?}");
    d.forget_peer(0);
    d.free(dst).unwrap();
    println!("DRVFD ok {s:?}");
}
