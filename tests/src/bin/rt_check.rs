//! Rank program for checked collectives (`RCOMM_CHECK=1`): in every case one rank (`RT_ODD`,
//! default the last) calls a collective with another count, element type, root, reduction op
//! or another collective than the others, on a fresh communicator. Every rank must get
//! `CollMismatch` naming that rank — from the mismatched call, or (if its part of that call
//! completed before it heard) from the next collective on the communicator, a barrier.
//! Prints `case <name> err <ranks> <fields> <ms>` per case (or `case <name> NO ERROR`), then
//! `ok check` once matched collectives still work. `RT_CASES` picks cases (comma list);
//! `RT_WARM=1` runs a matched allreduce and bcast on each communicator first.
//! `RT_NODES=<k>`: the ranks were placed on k nodes (by `RCOMM_HOSTID`); each rank checks it —
//! `same_node` agrees with the hostname and `RCOMM_HOSTID`, the matched allreduce of the
//! `allreduce-count-big` shape runs `hier` (the tuner's choice, and forced: recorded so, with
//! collectives on its node and cross-node parts), TCP carried bytes — and prints `ok nodes <k> …`.
use rcomm::{CommError, Communicator, Op};
use rcomm_tests::CHECK_CASES as CASES;
use rcomm_tests::placement;
use std::time::Instant;

/// The checks of `RT_NODES=nodes` (see the top of the file), on a fresh communicator `c`.
fn placement(world: &rcomm::World, c: &Communicator, nodes: u32) {
    let me = placement::check_nodes(world, c, nodes);
    if nodes > 1 {
        // The shape of `allreduce-count-big`, matched.
        let mut v = vec![1f32; 300_000];
        placement::ran_hier(
            c,
            "allreduce",
            "the tuner's allreduce of 300000 f32",
            || c.allreduce_in_place(&mut v, Op::Sum),
        );
        assert!(v.iter().all(|&x| x == c.size() as f32));
        let f = c.with_algo("allreduce", "hier").expect("with_algo");
        let mut v = vec![1u32; 16];
        placement::ran_hier(&f, "allreduce", "the forced hier allreduce", || {
            f.allreduce_in_place(&mut v, Op::Sum)
        });
        assert!(v.iter().all(|&x| x == c.size()));
    }
    let t = placement::tcp_carried(world, &me);
    println!(
        "ok nodes {nodes} rank {} on {me}: hier chosen and forced, tcp {} B sent {} B received",
        world.rank(),
        t.get("tcp").bytes_sent,
        t.get("tcp").bytes_recv
    );
}

fn reduce<T: rcomm::Element + Default + Clone>(
    c: &Communicator,
    n: usize,
    op: Op,
    root: u32,
) -> rcomm::Result<()> {
    let send = vec![T::default(); n];
    let mut recv = vec![T::default(); n];
    let out = (c.rank() == root).then_some(&mut recv[..]);
    c.reduce(&send, out, op, root)
}

fn allgather<T: bytemuck::Pod + Default>(c: &Communicator, n: usize) -> rcomm::Result<()> {
    let send = vec![T::default(); n];
    let mut recv = vec![T::default(); n * c.size() as usize];
    c.allgather(&send, &mut recv)
}

/// One case's call: the odd rank's differs.
#[allow(clippy::useless_vec)] // vectors as user code has them (some are large)
fn call(c: &Communicator, case: &str, odd: bool) -> rcomm::Result<()> {
    let last = c.size() - 1;
    match case {
        "allreduce-count" => {
            c.allreduce_in_place(&mut vec![1f32; if odd { 17 } else { 16 }], Op::Sum)
        }
        "allreduce-count-big" => {
            c.allreduce_in_place(&mut vec![1f32; if odd { 1000 } else { 300_000 }], Op::Sum)
        }
        "allreduce-dtype" if odd => c.allreduce_in_place(&mut vec![1i32; 16], Op::Sum),
        "allreduce-dtype" => c.allreduce_in_place(&mut vec![1f32; 16], Op::Sum),
        "allreduce-op" => {
            c.allreduce_in_place(&mut vec![1f32; 16], if odd { Op::Max } else { Op::Sum })
        }
        "allreduce-coll" if odd => reduce::<f32>(c, 16, Op::Sum, 0),
        "allreduce-coll" => c.allreduce_in_place(&mut vec![1f32; 16], Op::Sum),
        "bcast-count" => c.bcast(&mut vec![0u8; if odd { 100 } else { 64 }], 0),
        "bcast-dtype" if odd => c.bcast(&mut vec![0f64; 16], 0),
        "bcast-dtype" => c.bcast(&mut vec![0f32; 16], 0),
        "bcast-root" => c.bcast(&mut vec![0u32; 16], if odd { last } else { 0 }),
        "bcast-coll" if odd => allgather::<u8>(c, 16),
        "bcast-coll" => c.bcast(&mut vec![0u8; 16], 0),
        "reduce-count" => reduce::<i64>(c, if odd { 9 } else { 8 }, Op::Sum, 0),
        "reduce-dtype" if odd => reduce::<f64>(c, 8, Op::Sum, 0),
        "reduce-dtype" => reduce::<i64>(c, 8, Op::Sum, 0),
        "reduce-root" => reduce::<i64>(c, 8, Op::Sum, if odd { last } else { 0 }),
        "reduce-op" => reduce::<i64>(c, 8, if odd { Op::Min } else { Op::Sum }, 0),
        "allgather-count" => allgather::<u32>(c, if odd { 9 } else { 8 }),
        "allgather-dtype" if odd => allgather::<u64>(c, 8),
        "allgather-dtype" => allgather::<u32>(c, 8),
        "allgather-coll" if odd => c.allreduce_in_place(&mut vec![0u32; 8], Op::Sum),
        "allgather-coll" => allgather::<u32>(c, 8),
        "barrier-coll" if odd => c.allreduce_in_place(&mut [1u64], Op::Sum),
        "barrier-coll" => c.barrier(),
        // Zero-size calls are checked too.
        "allreduce-zero-dtype" if odd => c.allreduce_in_place::<i32>(&mut [], Op::Sum),
        "allreduce-zero-dtype" => c.allreduce_in_place::<f32>(&mut [], Op::Sum),
        "bcast-zero-root" => c.bcast::<u8>(&mut [], if odd { last } else { 0 }),
        other => panic!("unknown case {other}"),
    }
}

fn main() {
    let world = rcomm::init().expect("init");
    let (r, n) = (world.rank(), world.size());
    let odd: u32 = std::env::var("RT_ODD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n - 1);
    let only = std::env::var("RT_CASES").ok();
    let warm = std::env::var("RT_WARM").is_ok_and(|v| v == "1");
    // Communicators stay alive to the end: a mismatch leaves messages behind on a context,
    // which a later communicator reusing it must not meet.
    let mut keep = Vec::new();
    for case in CASES {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|c| c == *case))
        {
            continue;
        }
        let c = world.dup().expect("dup");
        if warm {
            // Shared-memory windows already set up: a shared-memory call records itself with
            // the engine only once it waits.
            let mut v = vec![1f32; 16];
            c.allreduce_in_place(&mut v, Op::Sum)
                .expect("warm-up allreduce");
            let mut b = vec![0u8; 16];
            c.bcast(&mut b, 0).expect("warm-up bcast");
        }
        let t0 = Instant::now();
        let mut res = call(&c, case, r == odd);
        // A rank whose part completed hears of the mismatch at its next collectives.
        for _ in 0..3 {
            if res.is_err() {
                break;
            }
            res = c.barrier();
        }
        let ms = t0.elapsed().as_millis();
        if let Err(e) = &res
            && r == 0
        {
            eprintln!("{case}: {e}");
        }
        match res {
            Err(CommError::CollMismatch { ranks, fields, .. }) => {
                println!("case {case} err {ranks:?} {fields:?} {ms}")
            }
            Err(e) => println!("case {case} other error after {ms} ms: {e}"),
            Ok(()) => println!("case {case} NO ERROR"),
        }
        keep.push(c);
        world.barrier().expect("world barrier between cases");
    }
    // Matched collectives still work (and a fresh communicator is unaffected).
    let c = world.dup().expect("dup");
    let mut v = vec![1u64; 1000];
    c.allreduce_in_place(&mut v, Op::Sum).expect("allreduce");
    assert!(v.iter().all(|&x| x == u64::from(n)));
    let mut b = vec![r; 10];
    c.bcast(&mut b, n - 1).expect("bcast");
    assert!(b.iter().all(|&x| x == n - 1));
    let mut all = vec![0u32; n as usize];
    c.allgather(&[r], &mut all).expect("allgather");
    assert_eq!(all, (0..n).collect::<Vec<_>>());
    c.barrier().expect("barrier");
    if let Ok(k) = std::env::var("RT_NODES") {
        placement(&world, &c, k.parse().expect("RT_NODES: a number"));
    }
    world.barrier().expect("barrier");
    println!("ok check");
}
