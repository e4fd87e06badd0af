//! Rank program: groups and `create`, and non-blocking collectives on two communicators
//! started in different orders on different ranks and waited in different orders (MPI's
//! progress rule: they complete). Prints `ok <case>` on rank 0.
use rcomm::{CommError, Communicator, Comparison, Group, Op, Source, Tag};

fn ok(w: &Communicator, case: &str) {
    w.barrier().unwrap();
    if w.rank() == 0 {
        println!("ok {case}");
    }
}

/// Each rank sends its world rank to the right and checks the left neighbour's.
fn ring_check(c: &Communicator) {
    let (r, n) = (c.rank(), c.size());
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    let me = c.world_rank(r).unwrap();
    let mut got = [0u32];
    let st = c
        .sendrecv(&[me], right, Tag(9), &mut got, Source::Any, Tag(9))
        .unwrap();
    assert_eq!(st.source, left);
    assert_eq!(got[0], c.world_rank(left).unwrap());
}

/// The world ranks of the members, gathered over the communicator itself.
fn members(c: &Communicator) -> Vec<u32> {
    let mut all = vec![0u32; c.size() as usize];
    c.allgather(&[c.world_rank(c.rank()).unwrap()], &mut all)
        .unwrap();
    all
}

fn groups_and_create(w: &Communicator) {
    let (r, n) = (w.rank(), w.size());
    let g = w.group();
    assert_eq!(g.world_ranks(), (0..n).collect::<Vec<_>>());
    assert_eq!(g.compare(&Group::new(0..n).unwrap()), Comparison::Ident);
    assert_eq!(g.rank_of(r), Some(r));

    // Even world ranks, highest first.
    let evens: Vec<u32> = (0..n).filter(|x| x % 2 == 0).rev().collect();
    let ge = g.incl(&evens).unwrap();
    let c = w.create(&ge).unwrap();
    assert_eq!(c.is_some(), r % 2 == 0);
    if let Some(c) = &c {
        assert_eq!(c.size() as usize, evens.len());
        assert_eq!(c.rank(), ge.rank_of(r).unwrap());
        assert_eq!(members(c), evens, "create keeps the group's order");
        assert_eq!(c.group().compare(&ge), Comparison::Ident);
        ring_check(c);
        let mut x = [r as u64];
        c.allreduce_in_place(&mut x, Op::Sum).unwrap();
        assert_eq!(x[0], evens.iter().map(|&e| e as u64).sum::<u64>());
    }
    ok(w, "create-evens");

    // Groups combined by MPI's rules, then made into a communicator.
    let odds = g.difference(&ge);
    let mixed = odds.union(&ge).excl(&[0]).unwrap();
    let c = w.create(&mixed).unwrap();
    assert_eq!(c.is_some(), mixed.rank_of(r).is_some());
    if let Some(c) = &c {
        assert_eq!(members(c), mixed.world_ranks());
        ring_check(c);
    }
    ok(w, "create-combined");

    // On a sub-communicator: the group is of world ranks, ranks are the new communicator's.
    let half = w.split(Some(r % 2), -(r as i32)).unwrap().unwrap();
    let hg = half.group();
    assert_eq!(hg.size(), half.size());
    let first_two = hg.incl(&(0..hg.size().min(2)).collect::<Vec<_>>()).unwrap();
    let c = half.create(&first_two).unwrap();
    assert_eq!(c.is_some(), first_two.rank_of(r).is_some());
    if let Some(c) = &c {
        assert_eq!(members(c), first_two.world_ranks());
        ring_check(c);
    }
    // A world rank outside the parent: an error on every rank of it.
    let other = Group::new([1 - r % 2]).unwrap();
    if n > 1 {
        let e = half.create(&other).unwrap_err().to_string();
        assert!(
            e.contains("is not a member of the communicator"),
            "rank {r}: {e}"
        );
    }
    ok(w, "create-on-sub-communicator");

    // Ranks passing different groups: an error everywhere, not a hang.
    if n > 1 {
        let mine = if r == 0 {
            g.excl(&[0]).unwrap()
        } else {
            g.clone()
        };
        match w.create(&mine) {
            Err(CommError::Mismatch { what, .. }) => assert!(what.contains("group"), "{what}"),
            other => panic!("rank {r}: different groups gave {other:?}"),
        }
    }
    ok(w, "create-different-groups");

    // Disjoint groups in one call (MPI 2.2): evens and odds, each rank passing its own.
    let parity: Vec<u32> = (0..n).filter(|x| x % 2 == r % 2).collect();
    let c = w
        .create(&Group::new(parity.clone()).unwrap())
        .unwrap()
        .expect("a member of the group it passed");
    assert_eq!(members(&c), parity);
    ring_check(&c);
    let mut x = [r as u64];
    c.allreduce_in_place(&mut x, Op::Sum).unwrap();
    assert_eq!(x[0], parity.iter().map(|&p| p as u64).sum::<u64>());
    // Ranks in no group pass the empty one.
    let pair = Group::new(0..n.min(2)).unwrap();
    let mine = if r < 2 { pair.clone() } else { Group::empty() };
    let c = w.create(&mine).unwrap();
    assert_eq!(c.is_some(), r < 2);
    if let Some(c) = &c {
        assert_eq!(members(c), pair.world_ranks());
        ring_check(c);
    }
    ok(w, "create-disjoint");

    // The empty group: nobody gets a communicator.
    assert!(w.create(&Group::empty()).unwrap().is_none());
    // Bad ranks to incl/excl are errors, not panics.
    assert!(g.incl(&[n]).is_err() && g.excl(&[0, 0]).is_err());
    ok(w, "create-bad-input");
}

fn expect_sum(len: usize, n: u32, salt: f64) -> Vec<f64> {
    (0..len)
        .map(|i| (0..n).map(|r| value(r, i, salt)).sum())
        .collect()
}

fn value(r: u32, i: usize, salt: f64) -> f64 {
    // Small integers: sums are exact in any order.
    ((r as usize * 7 + i) % 13) as f64 + salt
}

/// Two communicators; half the ranks start A's collective first, half B's; they wait in yet
/// another order. Both complete with the right results.
fn two_communicators(w: &Communicator, algo: Option<&str>) {
    let (r, n) = (w.rank(), w.size());
    let a = w.dup().unwrap();
    // B with another rank order: its ranks are the world's reversed.
    let rev: Vec<u32> = (0..n).rev().collect();
    let b = w.create(&Group::new(rev).unwrap()).unwrap().unwrap();
    let (a, b) = match algo {
        Some(x) => (
            a.with_algo("allreduce", x).unwrap(),
            b.with_algo("allreduce", x).unwrap(),
        ),
        None => (a, b),
    };
    for len in [1usize, 100, 5000, 1 << 17] {
        for round in 0..3 {
            let va: Vec<f64> = (0..len).map(|i| value(r, i, 0.0)).collect();
            let vb: Vec<f64> = (0..len).map(|i| value(r, i, 1.0)).collect();
            let a_first = (r + round) % 2 == 0;
            let (ra, rb) = if a_first {
                let ra = a.iallreduce(va, Op::Sum).unwrap();
                (ra, b.iallreduce(vb, Op::Sum).unwrap())
            } else {
                let rb = b.iallreduce(vb, Op::Sum).unwrap();
                (a.iallreduce(va, Op::Sum).unwrap(), rb)
            };
            // Wait order differs from start order on some ranks.
            let (ga, gb) = if (r / 2 + round) % 2 == 0 {
                let ga = ra.wait().unwrap();
                (ga, rb.wait().unwrap())
            } else {
                let gb = rb.wait().unwrap();
                (ra.wait().unwrap(), gb)
            };
            assert_eq!(ga, expect_sum(len, n, 0.0), "A, {len} elements, {algo:?}");
            assert_eq!(gb, expect_sum(len, n, 1.0), "B, {len} elements, {algo:?}");
        }
    }
    // Other collectives mixed in: an all-to-all on A against an allreduce on B.
    let blocks: Vec<u32> = (0..n).flat_map(|j| [r * 100 + j; 3]).collect();
    let (ra, rb) = if r % 2 == 0 {
        let ra = a.ialltoall(blocks).unwrap();
        (ra, b.iallreduce(vec![r; 1000], Op::Sum).unwrap())
    } else {
        let rb = b.iallreduce(vec![r; 1000], Op::Sum).unwrap();
        (a.ialltoall(blocks).unwrap(), rb)
    };
    let (gb, ga) = if r % 3 == 0 {
        let gb = rb.wait().unwrap();
        (gb, ra.wait().unwrap())
    } else {
        let ga = ra.wait().unwrap();
        (rb.wait().unwrap(), ga)
    };
    let want: Vec<u32> = (0..n).flat_map(|i| [i * 100 + r; 3]).collect();
    assert_eq!(ga, want);
    assert_eq!(gb, vec![n * (n - 1) / 2; 1000]);
    // MPI's progress rule for blocking calls: even ranks start A's allreduce, run a blocking
    // allreduce and a blocking barrier on B, then wait for A; odd ranks wait for A first. The
    // even ranks' blocking calls must advance A, or the odd ranks never reach B.
    for len in [3usize, 1 << 16] {
        let ra = a.iallreduce(vec![r as f64; len], Op::Sum).unwrap();
        let sum = f64::from(n * (n - 1) / 2);
        if r % 2 == 0 {
            let mut vb = vec![1.0f64; len];
            b.allreduce_in_place(&mut vb, Op::Sum).unwrap();
            b.barrier().unwrap();
            assert_eq!(vb, vec![f64::from(n); len]);
            assert_eq!(ra.wait().unwrap(), vec![sum; len]);
        } else {
            assert_eq!(ra.wait().unwrap(), vec![sum; len]);
            let mut vb = vec![1.0f64; len];
            b.allreduce_in_place(&mut vb, Op::Sum).unwrap();
            b.barrier().unwrap();
            assert_eq!(vb, vec![f64::from(n); len]);
        }
    }
}

/// create_group: only the group's members call it — evens and odds at the same time with
/// different tags, the others busy elsewhere — and compare of communicators.
fn create_group_and_compare(w: &Communicator) {
    let (r, n) = (w.rank(), w.size());
    let parity: Vec<u32> = (0..n).filter(|x| x % 2 == r % 2).collect();
    let g = Group::new(parity.clone()).unwrap();
    let c = w.create_group(&g, Tag(7 + (r % 2) as i32)).unwrap();
    assert_eq!(members(&c), parity, "create_group members");
    assert_eq!(
        c.rank(),
        parity.iter().position(|&x| x == r).unwrap() as u32
    );
    ring_check(&c);
    let mut x = [u64::from(r)];
    c.allreduce_in_place(&mut x, Op::Sum).unwrap();
    assert_eq!(x[0], parity.iter().map(|&p| u64::from(p)).sum::<u64>());
    // Only rank 0 makes a communicator of itself; nobody else takes part.
    if r == 0 {
        let solo = w.create_group(&Group::new([0]).unwrap(), Tag(1)).unwrap();
        assert_eq!((solo.size(), solo.rank()), (1, 0));
    }
    // Not a member, a bad tag, a rank outside the communicator: errors, nothing sent.
    let others = Group::new((0..n).filter(|&x| x != r)).unwrap();
    assert!(matches!(
        w.create_group(&others, Tag(3)),
        Err(CommError::InvalidArg(_))
    ));
    assert!(w.create_group(&g, Tag(-2)).is_err());
    assert!(
        w.create_group(&Group::new([r, n]).unwrap(), Tag(3))
            .is_err()
    );
    // Ranks 0 and 1 pass the pair in different orders: both get Mismatch.
    if n >= 2 && r < 2 {
        let order = if r == 0 { [0, 1] } else { [1, 0] };
        match w.create_group(&Group::new(order).unwrap(), Tag(4)) {
            Err(CommError::Mismatch { what, .. }) => assert!(what.contains("group"), "{what}"),
            other => panic!("rank {r}: different orders gave {other:?}"),
        }
    }
    w.barrier().unwrap();
    // compare.
    assert_eq!(w.compare(&w.clone()), Comparison::Ident);
    let d = w.dup().unwrap();
    assert_eq!(w.compare(&d), Comparison::Congruent);
    assert_eq!(d.compare(&d), Comparison::Ident);
    let rev = w.split(Some(0), -(r as i32)).unwrap().unwrap();
    let want = if n > 1 {
        Comparison::Similar
    } else {
        Comparison::Congruent
    };
    assert_eq!(w.compare(&rev), want, "reversed order");
    let want = if n > 1 {
        Comparison::Unequal
    } else {
        Comparison::Congruent
    };
    assert_eq!(w.compare(&c), want, "a half");
}

fn main() {
    let w = rcomm::init().unwrap();
    groups_and_create(&w);
    create_group_and_compare(&w);
    ok(&w, "create-group");
    two_communicators(&w, None);
    ok(&w, "two-communicators");
    for algo in ["ring", "rd"] {
        two_communicators(&w, Some(algo));
    }
    ok(&w, "two-communicators-forced");
}
