//! Rank program: request sets mixing kinds (`rcomm::wait_some_of` and friends). `rt_reqset
//! table` runs every case on every rank; rank 0 prints `ok <case>` per case.
//!
//! - `mixed`: in one set, receives of two element types from both ring neighbours, sends of
//!   both, a derived-datatype receive of a strided column, an `iallreduce`, an `ibcast` and a
//!   started persistent receive; `wait_some_of` until every index came back exactly once,
//!   then every result against its sequential value.
//! - `order`: a collective that cannot complete (rank 1 joins it only when rank 0 says so)
//!   and a receive that can: `wait_any_of` must report the receive although the collective
//!   is first in the set; `test_any_of`/`test_all_of` agree; then the collective completes.

use rcomm::datatype::Datatype;
use rcomm::{Op, Pending, Source, Tag, World};

fn ok(w: &World, case: &str) {
    w.barrier().expect("barrier");
    if w.rank() == 0 {
        println!("ok {case}");
    }
}

fn val(from: u32, to: u32, i: usize) -> u32 {
    from.wrapping_mul(7919) ^ to.wrapping_mul(104_729) ^ (i as u32).wrapping_mul(31)
}

fn mixed(w: &World) {
    let (r, n) = (w.rank(), w.size());
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    // A 16 x 4 row-major block: column 1 receives the left neighbour's column.
    let mut grid = vec![-1.0f64; 16 * 4];
    let column = Datatype::vector(16, 1, 4, &Datatype::of::<f64>()).expect("vector");

    let mut a = w
        .irecv(vec![0u32; 50], Source::Rank(left), Tag(1))
        .expect("irecv u32");
    let mut b = w
        .irecv(vec![0f64; 30], Source::Rank(right), Tag(2))
        .expect("irecv f64");
    let mut c = w
        .irecv_dt(&mut grid[1..], 1, &column, Source::Rank(left), Tag(3))
        .expect("irecv_dt");
    let mut d = w
        .iallreduce(vec![u64::from(r) + 1; 5], Op::Sum)
        .expect("iallreduce");
    let mut e = w
        .ibcast(
            if r == n - 1 {
                vec![42i16, -7]
            } else {
                vec![0; 2]
            },
            n - 1,
        )
        .expect("ibcast");
    let mut f = w
        .recv_init(vec![0u8; 3], Source::Rank(right), Tag(4))
        .expect("recv_init");
    f.start().expect("start");
    let out_a: Vec<u32> = (0..50).map(|i| val(r, right, i)).collect();
    let mut g = w.isend(out_a, right, Tag(1)).expect("isend u32");
    let out_b: Vec<f64> = (0..30).map(|i| f64::from(val(r, left, i))).collect();
    let mut h = w.isend(out_b, left, Tag(2)).expect("isend f64");
    let col: Vec<f64> = (0..16).map(|i| f64::from(r * 100 + i)).collect();
    w.send_dt(&col, 16, &Datatype::of::<f64>(), right, Tag(3))
        .expect("send column");
    w.send(&[r as u8, 1, 2], left, Tag(4)).expect("send bytes");

    // Each round waits on the requests not yet reported; every index must come back once.
    let mut seen = [0u32; 8];
    {
        let mut left: Vec<(usize, &mut dyn Pending)> = vec![
            (0, &mut a),
            (1, &mut b),
            (2, &mut c),
            (3, &mut d),
            (4, &mut e),
            (5, &mut f),
            (6, &mut g),
            (7, &mut h),
        ];
        while !left.is_empty() {
            let done = {
                let mut set: Vec<&mut dyn Pending> = left
                    .iter_mut()
                    .map(|(_, p)| -> &mut dyn Pending { &mut **p })
                    .collect();
                rcomm::wait_some_of(&mut set)
            };
            assert!(!done.is_empty(), "wait_some_of returned nothing");
            for &k in done.iter().rev() {
                let (orig, _) = left.remove(k);
                seen[orig] += 1;
            }
        }
    }
    assert_eq!(seen, [1; 8], "every request reported exactly once");
    let (got, _) = a.wait().expect("a");
    assert_eq!(got, (0..50).map(|i| val(left, r, i)).collect::<Vec<_>>());
    let (got, _) = b.wait().expect("b");
    let want: Vec<f64> = (0..30).map(|i| f64::from(val(right, r, i))).collect();
    assert_eq!(got, want);
    c.wait().expect("c");
    for i in 0..16 {
        assert_eq!(
            grid[i * 4 + 1],
            f64::from(left * 100 + i as u32),
            "column row {i}"
        );
        assert_eq!(grid[i * 4], -1.0, "untouched");
    }
    let sum: u64 = (1..=u64::from(n)).sum();
    assert_eq!(d.wait().expect("d"), vec![sum; 5]);
    assert_eq!(e.wait().expect("e"), vec![42i16, -7]);
    f.wait().expect("f");
    assert_eq!(f.buffer().expect("buffer"), &[right as u8, 1, 2]);
    g.wait().expect("g");
    h.wait().expect("h");
}

fn order(w: &World) {
    let r = w.rank();
    if w.size() < 2 {
        return;
    }
    if r == 1 {
        w.send(&[7u32], 0, Tag(10)).expect("send");
        let mut go = [0u8; 1];
        w.recv(&mut go, Source::Rank(0), Tag(11)).expect("go");
        let req = w.ibarrier().expect("ibarrier");
        req.wait().expect("barrier");
        return;
    }
    let mut coll = w.ibarrier().expect("ibarrier");
    if r != 0 {
        coll.wait().expect("barrier");
        return;
    }
    let mut recv = w
        .irecv(vec![0u32; 1], Source::Rank(1), Tag(10))
        .expect("irecv");
    {
        let mut set: [&mut dyn Pending; 2] = [&mut coll, &mut recv];
        assert_eq!(
            rcomm::wait_any_of(&mut set),
            Some(1),
            "only the receive can complete"
        );
        assert!(
            !rcomm::test_all_of(&mut set),
            "the barrier waits for rank 1"
        );
        assert_eq!(rcomm::test_some_of(&mut set), vec![1]);
    }
    w.send(&[1u8], 1, Tag(11)).expect("go");
    {
        let mut set: [&mut dyn Pending; 1] = [&mut coll];
        assert_eq!(rcomm::wait_any_of(&mut set), Some(0));
        rcomm::wait_all_of(&mut set);
        assert!(rcomm::test_all_of(&mut set));
    }
    assert_eq!(recv.wait().expect("recv").0, vec![7]);
    coll.wait().expect("barrier");
    let mut none: [&mut dyn Pending; 0] = [];
    assert_eq!(rcomm::wait_any_of(&mut none), None);
    assert!(rcomm::wait_some_of(&mut none).is_empty());
}

fn main() {
    let w = rcomm::init().expect("init");
    mixed(&w);
    ok(&w, "mixed");
    order(&w);
    ok(&w, "order");
}
