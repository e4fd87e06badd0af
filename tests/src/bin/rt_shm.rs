//! Rank program: direct shared-memory collectives (`allreduce_shm`, `bcast_shm`,
//! `alloc_shared`, `allreduce_shared`). Results are compared bitwise with a sequential
//! reference computed in the canonical order (right fold in rank order) and checked bitwise
//! equal across ranks (hashes allgathered). Prints `ok <case>` on rank 0.
//!
//! Arguments: `all [big]` (`big` adds a 4 Mi-element allreduce) or `fault` (rank 1 exits in
//! the middle of a run of allreduces; the others print `error after <ms> ms: <error>`) or
//! `fault-kill` (rank 1 is killed inside a large allreduce; the same output).
use rcomm::{Communicator, Element, Op};
use std::time::Instant;

fn val(rank: u32, i: usize, it: u32) -> i64 {
    ((rank as i64 * 7919 + i as i64 * 104_729 + it as i64 * 31) % 2001) - 1000
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn same_everywhere(w: &Communicator, bytes: &[u8], what: &str) {
    let mut all = vec![0u64; w.size() as usize];
    w.allgather(&[fnv(bytes)], &mut all).unwrap();
    assert!(
        all.iter().all(|&h| h == all[0]),
        "{what}: results differ across ranks"
    );
}

/// acc = a(n−1); for j in (0..n−1).rev() { acc = a(j) ⊕ acc }.
fn canonical<T: Copy>(n: u32, a: impl Fn(u32) -> T, op: impl Fn(T, T) -> T) -> T {
    let mut acc = a(n - 1);
    for j in (0..n - 1).rev() {
        acc = op(a(j), acc);
    }
    acc
}

fn check<T: Element + Copy + PartialEq + std::fmt::Debug>(
    w: &Communicator,
    conv: fn(i64) -> T,
    f: fn(T, T) -> T,
    op: Op,
    count: usize,
    it: u32,
) {
    let (r, n) = (w.rank(), w.size());
    let mut buf: Vec<T> = (0..count).map(|i| conv(val(r, i, it))).collect();
    assert!(w.allreduce_shm(&mut buf, op).unwrap(), "shm path unusable");
    for (i, &got) in buf.iter().enumerate() {
        let want = canonical(n, |p| conv(val(p, i, it)), f);
        assert!(
            bytemuck::bytes_of(&got) == bytemuck::bytes_of(&want),
            "{op:?} {:?} count {count} element {i}: got {got:?}, want {want:?}",
            T::DTYPE
        );
    }
    same_everywhere(
        w,
        bytemuck::cast_slice(&buf),
        &format!("{op:?} {:?} {count}", T::DTYPE),
    );
}

fn say(w: &Communicator, what: &str) {
    if w.rank() == 0 {
        println!("ok {what}");
    }
}

fn all(w: &Communicator, big: bool) {
    let (r, n) = (w.rank(), w.size());
    let mut counts = vec![0usize, 1, 7, 1023, 65_539];
    if big {
        counts.push(4 << 20);
    }
    for (it, &count) in counts.iter().enumerate() {
        let it = it as u32;
        check::<f32>(w, |v| v as f32 / 7.0, |a, b| a + b, Op::Sum, count, it);
        check::<i32>(w, |v| v as i32, i32::wrapping_add, Op::Sum, count, it);
        check::<i32>(w, |v| v as i32, i32::max, Op::Max, count, it);
    }
    say(w, "allreduce");

    for root in [0, n - 1] {
        for count in [0usize, 5, 1 << 20 | 3] {
            let mut b: Vec<u8> = (0..count)
                .map(|i| {
                    if r == root {
                        (i % 253) as u8 ^ root as u8
                    } else {
                        0
                    }
                })
                .collect();
            assert!(w.bcast_shm(&mut b, root).unwrap());
            assert!(
                b.iter()
                    .enumerate()
                    .all(|(i, &v)| v == (i % 253) as u8 ^ root as u8),
                "bcast from {root}, {count} bytes"
            );
        }
    }
    say(w, "bcast");

    // Each rank its own size; write own, barrier, read every peer's.
    let mut sb = w.alloc_shared::<u64>(r as usize + 5).unwrap();
    assert!(sb.iter().all(|&v| v == 0));
    for (i, v) in sb.iter_mut().enumerate() {
        *v = u64::from(r) << 32 | i as u64;
    }
    w.barrier().unwrap();
    for p in 0..n {
        let peer = sb.peer(p).unwrap();
        assert_eq!(peer.len(), p as usize + 5);
        assert!(
            peer.iter()
                .enumerate()
                .all(|(i, &v)| v == u64::from(p) << 32 | i as u64),
            "rank {p}'s shared buffer"
        );
    }
    w.barrier().unwrap();
    drop(sb);
    say(w, "alloc_shared");

    for count in [3usize, 100_003] {
        let mut sb = w.alloc_shared::<f32>(count).unwrap();
        for (i, v) in sb.iter_mut().enumerate() {
            *v = val(r, i, 9) as f32 / 3.0;
        }
        w.allreduce_shared(&mut sb, Op::Sum).unwrap();
        for (i, &got) in sb.iter().enumerate() {
            let want = canonical(n, |p| val(p, i, 9) as f32 / 3.0, |a, b| a + b);
            assert!(got.to_bits() == want.to_bits(), "in place {count} [{i}]");
        }
        same_everywhere(w, bytemuck::cast_slice(&sb), "allreduce_shared");
    }
    say(w, "allreduce_shared");

    for it in 0..300u32 {
        let mut b: Vec<i32> = (0..3).map(|i| val(r, i, it) as i32).collect();
        assert!(w.allreduce_shm(&mut b, Op::Sum).unwrap());
        for (i, &got) in b.iter().enumerate() {
            assert_eq!(got, (0..n).map(|p| val(p, i, it) as i32).sum::<i32>());
        }
    }
    say(w, "repeated");

    let mut b = vec![0i32; 4 + (r == 0) as usize];
    let e = w.allreduce_shm(&mut b, Op::Sum);
    assert!(n == 1 || e.is_err(), "different lengths must fail");
    let mut b = vec![1i32; 4];
    assert!(w.allreduce_shm(&mut b, Op::Sum).unwrap());
    assert!(b.iter().all(|&v| v == n as i32));
    say(w, "mismatch");
}

fn fault(w: &Communicator) {
    for it in 0..50u32 {
        let mut b = vec![it as i32; 16];
        let t0 = Instant::now();
        match w.allreduce_shm(&mut b, Op::Sum) {
            Ok(used) => assert!(used),
            // Once rank 1 has done its last round and exited, a lagging survivor may be told of
            // the loss (by the launcher, or by a survivor that already gave up) before it
            // finishes that round: errors after a failure need not be uniform (as in MPI's
            // fault-tolerance model); what matters is that it names rank 1 and comes quickly.
            Err(e) if w.rank() != 1 && it >= 45 => {
                println!("error after {} ms: {e}", t0.elapsed().as_millis());
                return;
            }
            Err(e) => panic!("allreduce {it}: {e}"),
        }
    }
    if w.rank() == 1 {
        std::process::exit(3);
    }
    let t0 = Instant::now();
    for _ in 0..1000 {
        let mut b = vec![1i32; 16];
        if let Err(e) = w.allreduce_shm(&mut b, Op::Sum) {
            println!("error after {} ms: {e}", t0.elapsed().as_millis());
            return;
        }
    }
    println!("no error");
}

/// Rank 1 is killed (SIGKILL) from a timer thread while every rank runs large, chunked
/// allreduces, so it dies in the middle of one.
fn fault_kill(w: &Communicator) {
    if w.rank() == 1 {
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(150));
            // SAFETY: kill with our own pid and a valid signal number.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        });
    }
    let mut b = vec![1.5f32; 300_007];
    let mut t0 = Instant::now();
    loop {
        t0 = if t0.elapsed().as_secs() > 20 {
            println!("no error");
            return;
        } else {
            Instant::now()
        };
        if let Err(e) = w.allreduce_shm(&mut b, Op::Sum) {
            println!("error after {} ms: {e}", t0.elapsed().as_millis());
            return;
        }
    }
}

fn main() {
    let w = rcomm::init().unwrap();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("fault") => fault(&w),
        Some("fault-kill") => fault_kill(&w),
        _ => all(&w, args.iter().any(|a| a == "big")),
    }
}
