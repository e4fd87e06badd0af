fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
fn main() {
    let w = rcomm::init().unwrap();
    let mut b = [0u8; 8];
    let mut x = vec![1.0f32; 2];
    for round in 0..3 {
        let n: u64 = std::env::var("ZZ_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2_000_000);
        let t0 = cpu_ns();
        for _ in 0..n {
            w.send(&b, 0, rcomm::Tag(1)).unwrap();
            w.recv(&mut b, 0, rcomm::Tag(1)).unwrap();
        }
        let p2p = (cpu_ns() - t0) as f64 / n as f64;
        let t0 = cpu_ns();
        let n = if std::env::var("ZZ_P2P").is_ok() {
            0
        } else {
            n
        };
        for _ in 0..n {
            w.allreduce_in_place(&mut x, rcomm::Op::Sum).unwrap();
        }
        let ar = (cpu_ns() - t0) as f64 / n as f64;
        println!("round {round}: self send+recv {p2p:.1} ns, allreduce (1 rank) {ar:.1} ns");
    }
}
