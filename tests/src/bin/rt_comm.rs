//! Rank program: communicators. `dup` and `split` isolate traffic (the same tags on parent and
//! child never cross), ranks and statuses are the communicator's own, opt-out works,
//! `split_type(Node)`, nested splits, barriers, and context ids are recycled. Prints `ok <case>`.
use rcomm::{Communicator, Source, SplitType, Tag};

fn ok(w: &Communicator, case: &str) {
    w.barrier().unwrap();
    if w.rank() == 0 {
        println!("ok {case}");
    }
}

fn val(comm_kind: u32, src: u32, dst: u32) -> [u32; 3] {
    [comm_kind, src, dst]
}

fn ring_check(c: &Communicator, kind: u32) {
    let (r, n) = (c.rank(), c.size());
    let right = (r + 1) % n;
    let left = (r + n - 1) % n;
    let mut got = [0u32; 3];
    let st = c
        .sendrecv(
            &val(kind, r, right),
            right,
            Tag(5),
            &mut got,
            Source::Any,
            Tag(5),
        )
        .unwrap();
    assert_eq!(
        st.source, left,
        "status source must be the communicator's rank"
    );
    assert_eq!(got, val(kind, left, r), "ring on comm kind {kind}");
}

fn main() {
    let w = rcomm::init().unwrap();
    let (r, n) = (w.rank(), w.size());

    // dup: same tag on both; the receiver takes the dup's message first, then the world's.
    let d = w.dup().unwrap();
    assert_eq!((d.rank(), d.size()), (r, n));
    let right = (r + 1) % n;
    let left = (r + n - 1) % n;
    w.send(&val(1, r, right), right, Tag(5)).unwrap();
    d.send(&val(2, r, right), right, Tag(5)).unwrap();
    let mut got = [0u32; 3];
    d.recv(&mut got, Source::Any, Tag::Any).unwrap();
    assert_eq!(got, val(2, left, r), "dup must not see the world's message");
    w.recv(&mut got, Source::Any, Tag::Any).unwrap();
    assert_eq!(got, val(1, left, r));
    ok(&w, "dup-isolation");

    // split by parity, reversed order by key.
    let s = w.split(Some(r % 2), -(r as i32)).unwrap().unwrap();
    let same: Vec<u32> = (0..n).filter(|x| x % 2 == r % 2).rev().collect();
    assert_eq!(s.size() as usize, same.len());
    assert_eq!(s.world_rank(s.rank()).unwrap(), r);
    for (i, &wr) in same.iter().enumerate() {
        assert_eq!(s.world_rank(i as u32).unwrap(), wr, "split order by key");
    }
    ring_check(&s, 3);
    assert!(
        s.send(&[0u8], s.size(), Tag(0)).is_err(),
        "ranks are the communicator's"
    );
    ok(&w, "split-parity");

    // Opt-out: rank 0 takes no part.
    let o = w.split(if r == 0 { None } else { Some(7) }, 0).unwrap();
    assert_eq!(o.is_none(), r == 0);
    if let Some(o) = &o {
        assert_eq!((o.size(), o.rank()), (n - 1, r - 1));
        ring_check(o, 4);
    }
    ok(&w, "split-opt-out");

    // split_type(Node): one node here.
    let node = w.split_type(SplitType::Node).unwrap();
    assert_eq!((node.size(), node.rank()), (n, r));
    ring_check(&node, 5);
    ok(&w, "split-type-node");

    // split_type(Numa): on a machine with one NUMA node (or ranks that all span the same
    // nodes, as unbound ranks do) it is the node split.
    let one_numa = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("node"))
                .count()
                <= 1
        })
        .unwrap_or(true);
    let numa = w.split_type(SplitType::Numa).unwrap();
    if one_numa {
        assert_eq!((numa.size(), numa.rank()), (node.size(), node.rank()));
    }
    ring_check(&numa, 9);
    ok(&w, "split-type-numa");

    // Nested: a dup of a split, a split of a split.
    let sd = s.dup().unwrap();
    ring_check(&sd, 6);
    let ss = s.split(Some(0), s.rank() as i32).unwrap().unwrap();
    assert_eq!(ss.size(), s.size());
    ring_check(&ss, 7);
    ok(&w, "nested");

    // Context ids are recycled: many more dups than ids, freed as they go.
    for i in 0..2500 {
        let t = w.dup().unwrap();
        if i % 500 == 0 {
            ring_check(&t, 8);
        }
    }
    ok(&w, "ids-recycled");

    for _ in 0..20 {
        w.barrier().unwrap();
    }
    ok(&w, "barriers");
}
