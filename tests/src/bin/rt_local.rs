//! Rank program: the local channel and a shared-memory ring between real ranks of one job.
//! Ranks pair up (0-1, 2-3, ...; an odd last rank sits out). The even rank of a pair creates two
//! memfd segments, each holding a ring, and a doorbell, and passes the three descriptors to its
//! partner through the local channel; the pair then ping-pongs `ITERS` messages whose bytes
//! depend on (rank, index), every one checked. `rt_local ITERS [die]`: with `die`, the odd rank
//! SIGKILLs itself after the exchange and the even one reports how long it took to see it.
use rcomm_runtime::auth::Secret;
use rcomm_runtime::bootstrap::{Bootstrap, KvsClient};
use rcomm_runtime::config::Config;
use rcomm_transport::local::{Doorbell, LocalConn, LocalError, LocalListener, Segment};
use rcomm_transport::shm::{Producer, Ring};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SLOTS: usize = 64;

fn payload(rank: u32, i: u32) -> Vec<u8> {
    let n = 1 + (i as usize * 7 + rank as usize) % 56;
    (0..n)
        .map(|k| (rank as usize * 31 + i as usize * 17 + k) as u8)
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let iters: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let die = args.get(2).is_some_and(|a| a == "die");
    let env = Config::from_env()
        .unwrap()
        .launch
        .expect("run me with rcomm-run");
    let secret = Secret::from_fd(env.secret_fd).unwrap();
    let listener = LocalListener::bind(&env.job_id, env.local_rank, secret.clone()).unwrap();
    let mut kvs = KvsClient::connect(env.clone(), &secret).unwrap();
    kvs.put("local", listener.name().as_bytes()).unwrap();
    kvs.fence().unwrap();
    let (rank, size) = (kvs.rank(), kvs.size());
    let partner = rank ^ 1;
    if partner >= size {
        println!("rank {rank} has no partner");
        kvs.finalize().unwrap();
        return;
    }
    let even = rank % 2 == 0;
    let (conn, to_odd, to_even, bell) = if even {
        let name = String::from_utf8(kvs.get(partner, "local").unwrap()).unwrap();
        let conn = LocalConn::connect(&name, env.local_rank, &secret).unwrap();
        let a = Arc::new(Segment::create("rcomm-smoke-a", Ring::layout_size(SLOTS)).unwrap());
        let b = Arc::new(Segment::create("rcomm-smoke-b", Ring::layout_size(SLOTS)).unwrap());
        Ring::init(&a, SLOTS).unwrap();
        Ring::init(&b, SLOTS).unwrap();
        let bell = Doorbell::new().unwrap();
        conn.send(1, b"rings", &[a.fd(), b.fd(), bell.fd()])
            .unwrap();
        (conn, a, b, bell)
    } else {
        let conn = listener.accept().unwrap();
        assert_eq!(conn.peer_rank(), Some(env.local_rank ^ 1));
        let msg = conn.recv().unwrap();
        assert_eq!(
            (msg.kind, msg.payload.as_slice(), msg.fds.len()),
            (1, &b"rings"[..], 3)
        );
        let mut fds = msg.fds.into_iter();
        let a = Arc::new(Segment::from_fd(fds.next().unwrap()).unwrap());
        let b = Arc::new(Segment::from_fd(fds.next().unwrap()).unwrap());
        let bell = Doorbell::from_fd(fds.next().unwrap()).unwrap();
        (conn, a, b, bell)
    };
    let (ring_to_odd, ring_to_even) = (
        Ring::attach(&to_odd).unwrap(),
        Ring::attach(&to_even).unwrap(),
    );
    let (mut tx, mut rx) = if even {
        (
            ring_to_odd.producer().unwrap(),
            ring_to_even.consumer().unwrap(),
        )
    } else {
        (
            ring_to_even.producer().unwrap(),
            ring_to_odd.consumer().unwrap(),
        )
    };
    let send = |tx: &mut Producer, data: &[u8]| {
        while !tx.try_push(data).unwrap() {
            std::hint::spin_loop();
        }
        bell.ring().unwrap();
    };
    let t0 = Instant::now();
    for i in 0..iters {
        if even {
            send(&mut tx, &payload(rank, i));
        }
        let mut got = None;
        let mut spins = 0u32;
        while !rx.try_pop(|b| got = Some(b.to_vec())) {
            spins += 1;
            if spins.is_multiple_of(1024) {
                assert!(!conn.poll_closed(), "partner died mid-exchange");
                std::thread::yield_now(); // oversubscribed runs must let the partner run
            }
        }
        assert_eq!(
            got.unwrap(),
            payload(partner, i),
            "message {i} from rank {partner}"
        );
        if !even {
            send(&mut tx, &payload(rank, i));
        }
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(iters.max(1)) / 2.0;
    println!("rank {rank} exchanged {iters} messages with rank {partner} ({us:.2} us one way)");
    if die {
        if !even {
            kvs.finalize().unwrap();
            // SAFETY: kill(2) on our own pid with a valid signal number.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            std::thread::sleep(Duration::from_secs(10));
        }
        let t = Instant::now();
        match conn.recv() {
            Err(LocalError::PeerClosed { .. }) => {
                println!(
                    "rank {rank} saw rank {partner} die after {} ms",
                    t.elapsed().as_millis()
                )
            }
            other => panic!("expected PeerClosed, got {other:?}"),
        }
    }
    kvs.finalize().unwrap();
}
