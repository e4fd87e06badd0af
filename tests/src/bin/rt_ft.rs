//! Rank program: recovering from failures (4 ranks, `--on-failure continue`).
//!
//! - `rt_ft shrink`: rank 1 dies (SIGKILL) after a barrier (once every other rank told it it
//!   is past it); the others fail in an allreduce
//!   naming it, shrink the world, check the new communicator's size and ranks, and run a
//!   correct allreduce and a barrier on it. Each survivor prints `shrunk R->NEW of SIZE sum S`.
//! - `rt_ft revoke`: ranks 1..3 wait in a receive from rank 0 on a duplicate of the world;
//!   rank 0 revokes it instead of sending. Every rank then gets `Revoked` for any operation on
//!   it (rank 0 included), while the world still works. Each prints `revoked: <error>`.
use rcomm::{CommError, Op, Tag};

fn main() {
    let w = rcomm::init().expect("init");
    let r = w.rank();
    match std::env::args().nth(1).as_deref() {
        Some("shrink") => {
            w.barrier().unwrap();
            // Rank 1 dies only once every other rank is past the barrier: a collective may
            // fail on some ranks and succeed on others when a member dies in it (as in
            // ULFM), and a rank still in the barrier's last round would fail there.
            if r == 1 {
                for _ in 1..w.size() {
                    let mut ack = [0u8; 1];
                    w.recv(&mut ack, rcomm::Source::Any, Tag(9)).unwrap();
                }
                // SAFETY: signalling our own process.
                unsafe { libc::raise(libc::SIGKILL) };
            }
            w.send(&[1u8], 1, Tag(9)).unwrap();
            let mut v = vec![1u64; 4096];
            let err = w
                .allreduce_in_place(&mut v, Op::Sum)
                .expect_err("rank 1 is dead");
            assert!(
                matches!(err, CommError::PeerLost { rank: 1, .. }),
                "rank {r}: {err}"
            );
            let s = w.shrink().expect("shrink");
            assert_eq!(s.size(), 3);
            let want = [0u32, 2, 3];
            assert_eq!(s.world_rank(s.rank()).unwrap(), r);
            assert_eq!(want[s.rank() as usize], r);
            let mut x = vec![u64::from(r); 1000];
            s.allreduce_in_place(&mut x, Op::Sum).unwrap();
            assert!(x.iter().all(|&e| e == 5), "sum of 0, 2, 3");
            s.barrier().unwrap();
            // A second shrink with nobody else lost keeps everyone.
            let s2 = s.shrink().unwrap();
            assert_eq!(s2.size(), 3);
            println!("shrunk {r}->{} of {} sum {}", s.rank(), s.size(), x[0]);
        }
        Some("revoke") => {
            let d = w.dup().unwrap();
            w.barrier().unwrap();
            let err = if r == 0 {
                std::thread::sleep(std::time::Duration::from_millis(200));
                d.revoke();
                d.send(&[1u8], 1, Tag(5)).expect_err("revoked")
            } else {
                let mut b = [0u8; 1];
                d.recv(&mut b, 0, Tag(5)).map(drop).expect_err("revoked")
            };
            assert!(
                matches!(err, CommError::Revoked { by: 0, .. }),
                "rank {r}: {err}"
            );
            assert!(d.is_revoked());
            let mut v = vec![1u32; 8];
            let coll = d.allreduce_in_place(&mut v, Op::Sum).expect_err("revoked");
            assert!(
                matches!(coll, CommError::Revoked { .. }),
                "rank {r}: {coll}"
            );
            // The world is not affected.
            let mut v = vec![1u32; 8];
            w.allreduce_in_place(&mut v, Op::Sum).unwrap();
            assert_eq!(v[0], w.size());
            // Its context id freed, a new communicator (likely on the same id) is not revoked.
            drop(d);
            let d2 = w.dup().unwrap();
            assert!(!d2.is_revoked());
            let mut v = vec![1u32; 8];
            d2.allreduce_in_place(&mut v, Op::Sum).unwrap();
            assert_eq!(v[0], w.size());
            println!("revoked: {err}");
        }
        m => panic!("unknown mode {m:?}"),
    }
}
