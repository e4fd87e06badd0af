//! Rank program for the TCP tests (two ranks).
//!
//! * `rt_tcp order K` — both ranks post K `Tag::Any` receives from the other, then send it K
//!   messages of interleaved small (eager) and large (rendezvous, striped over every stream)
//!   sizes, message i with tag i. MPI order says receive i gets message i: checked by tag,
//!   size and contents (which depend on source, index and size). Prints `ok order K` and the
//!   TCP byte counters.
//! * `rt_tcp cut READY_FILE` — one warm-up exchange (so every connection is open), then rank 1
//!   creates READY_FILE and both wait idle in a receive from the other while the test cuts the
//!   link. Prints `lost rank R host H at MS: ERROR` (MS: Unix time in ms) or what else came,
//!   then creates READY_FILE.done<rank>.
use rcomm::{CommError, Tag};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn pattern(src: u32, idx: usize, len: usize) -> Vec<u8> {
    let mut x = ((src as u64) << 40 ^ (idx as u64) << 8 ^ len as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sizes cycle through eager ones (below, at and above 64 KiB) and rendezvous ones of several
/// chunks, so small messages sent after a large one must wait for it at the receiver.
const SIZES: [usize; 10] = [
    0,
    1,
    100,
    (64 << 10) - 1,
    (64 << 10) + 1,
    (1 << 20) + 3,
    7,
    5 << 20,
    33,
    300_007,
];

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let world = rcomm::init().expect("init");
    let (me, n) = (world.rank(), world.size());
    assert_eq!(n, 2, "rt_tcp runs on two ranks");
    let peer = 1 - me;
    match args.get(1).map(String::as_str) {
        Some("order") => {
            let k: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(60);
            let max = *SIZES.iter().max().expect("sizes");
            let recvs: Vec<_> = (0..k)
                .map(|_| world.irecv(vec![0u8; max], peer, Tag::Any).expect("irecv"))
                .collect();
            let sends: Vec<_> = (0..k)
                .map(|i| {
                    let len = SIZES[i % SIZES.len()];
                    world
                        .isend(pattern(me, i, len), peer, Tag(i as i32))
                        .expect("isend")
                })
                .collect();
            for (i, r) in recvs.into_iter().enumerate() {
                let (b, st) = r.wait().expect("recv");
                let len = SIZES[i % SIZES.len()];
                assert_eq!(
                    (st.tag, st.bytes),
                    (i as i32, len),
                    "receive {i}: MPI order broken"
                );
                assert!(
                    b[..len] == pattern(peer, i, len)[..],
                    "receive {i}: data mismatch"
                );
            }
            for s in sends {
                s.wait().expect("send");
            }
            let c = world.transport_counters();
            println!(
                "ok order {k} tcp_sent {} shm_sent {}",
                c.get("tcp").bytes_sent,
                c.get("shm").bytes_sent
            );
        }
        Some("cut") => {
            let ready = args.get(2).expect("ready file");
            let mut b = [0u8; 8];
            if me == 0 {
                world.send(&[1u8; 8], 1, Tag(1)).unwrap();
                world.recv(&mut b, 1, Tag(2)).unwrap();
            } else {
                world.recv(&mut b, 0, Tag(1)).unwrap();
                world.send(&[2u8; 8], 0, Tag(2)).unwrap();
                // Let rank 0's receive of tag 2 finish before the cut.
                std::thread::sleep(Duration::from_millis(200));
                std::fs::write(ready, b"ready").unwrap();
            }
            match world.recv(&mut b, peer, Tag(3)) {
                Err(e @ CommError::PeerLost { .. }) => {
                    let CommError::PeerLost { rank, ref host, .. } = e else {
                        unreachable!()
                    };
                    println!("lost rank {rank} host {host} at {}: {e}", now_ms());
                }
                other => println!("unexpected {other:?}"),
            }
            // Tells the test this rank is done waiting (it heals the link then, so the exit's
            // goodbye to the launcher goes through).
            std::fs::write(format!("{ready}.done{me}"), b"done").unwrap();
        }
        m => panic!("unknown mode {m:?}"),
    }
}
