//! Rank program: the point-to-point table. `rt_p2p table [big]` runs every case below on every
//! rank and prints `ok <case>` per case (rank 0) and `counters ...` per rank; `big` adds one
//! message of 2 GiB + 1 between ranks 0 and 1. `rt_p2p die` kills rank 1 while the others wait
//! on it. Data depends on (source, destination, case, index, iteration), so a stale, crossed or
//! permuted message fails its check.
//!
//! Why one file: the point-to-point table, one case per method of one harness (`T`) run in
//! order by `main`; the cases share its patterns, checks and barrier.
use rcomm::{CommError, Communicator, Source, Tag};
use std::time::{Duration, Instant};

fn pattern(src: u32, dst: u32, case: u32, idx: usize, len: usize) -> Vec<u8> {
    let seed = (src as u64) << 40 ^ (dst as u64) << 24 ^ (case as u64) << 12 ^ idx as u64;
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn check(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: data mismatch (lengths {} vs {}, first difference at {first:?})",
            got.len(),
            want.len()
        );
    }
}

struct T<'a> {
    w: &'a Communicator,
    r: u32,
    n: u32,
}

impl T<'_> {
    /// Ends a case on every rank before the next starts (wildcard receives would otherwise
    /// take the next case's messages). Point-to-point only: gather to 0, then release.
    fn ok(&self, case: &str) {
        self.barrier();
        if self.r == 0 {
            println!("ok {case}");
        }
    }

    fn barrier(&self) {
        let mut b = [0u8; 1];
        if self.r == 0 {
            for p in 1..self.n {
                self.w.recv(&mut b, p, Tag(999)).unwrap();
            }
            for p in 1..self.n {
                self.w.send(&[1u8], p, Tag(998)).unwrap();
            }
        } else {
            self.w.send(&[1u8], 0, Tag(999)).unwrap();
            self.w.recv(&mut b, 0, Tag(998)).unwrap();
        }
    }

    /// Every rank sends one message of each size to every other rank (shifted pairing, so no
    /// two ranks wait on each other), receiving with specific sources.
    fn sizes(&self, sizes: &[usize], case: u32) {
        for (i, &len) in sizes.iter().enumerate() {
            for k in 1..self.n {
                let dst = (self.r + k) % self.n;
                let src = (self.r + self.n - k) % self.n;
                let out = pattern(self.r, dst, case, i, len);
                let mut inb = vec![0u8; len];
                let st = self
                    .w
                    .sendrecv(&out, dst, Tag(i as i32), &mut inb, src, Tag(i as i32))
                    .unwrap();
                assert_eq!(
                    (st.source, st.tag, st.bytes),
                    (src, i as i32, len),
                    "status of size {len}"
                );
                check(
                    &inb,
                    &pattern(src, self.r, case, i, len),
                    &format!("size {len} from {src}"),
                );
            }
            // Self messages.
            let out = pattern(self.r, self.r, case, i, len);
            let mut inb = vec![0u8; len];
            self.w
                .sendrecv(&out, self.r, Tag(7), &mut inb, self.r, Tag(7))
                .unwrap();
            check(&inb, &out, &format!("self size {len}"));
        }
    }

    /// Rank 0 collects one message from every other rank with Source::Any / Tag::Any.
    fn wildcards(&self) {
        if self.r == 0 {
            let mut seen = vec![false; self.n as usize];
            for _ in 1..self.n {
                let mut b = vec![0u8; 100];
                let st = self.w.recv(&mut b, Source::Any, Tag::Any).unwrap();
                assert_eq!(st.tag, 40 + st.source as i32);
                check(
                    &b[..st.bytes],
                    &pattern(st.source, 0, 2, 0, 50 + st.source as usize),
                    "wildcard",
                );
                assert!(
                    !std::mem::replace(&mut seen[st.source as usize], true),
                    "twice from {}",
                    st.source
                );
            }
            for p in 1..self.n {
                self.w.send(&[0u8], p, Tag(41)).unwrap();
            }
        } else {
            // The ack (sent once every wildcard message is in) keeps this rank's next message
            // out of rank 0's wildcard receives.
            self.w
                .send(
                    &pattern(self.r, 0, 2, 0, 50 + self.r as usize),
                    0,
                    Tag(40 + self.r as i32),
                )
                .unwrap();
            self.w.recv(&mut [0u8; 1], 0, Tag(41)).unwrap();
        }
    }

    /// Non-overtaking: messages from one sender are matched in send order by any receive that
    /// can match them, also across eager and rendezvous messages.
    fn ordering(&self) {
        if self.n < 2 {
            return;
        }
        let big = 3 << 20;
        if self.r == 1 {
            self.w.send(&pattern(1, 0, 3, 0, 10), 0, Tag(1)).unwrap();
            self.w.send(&pattern(1, 0, 3, 1, 20), 0, Tag(2)).unwrap();
            let r = self.w.isend(pattern(1, 0, 3, 2, big), 0, Tag(3)).unwrap();
            self.w.send(&pattern(1, 0, 3, 3, 30), 0, Tag(3)).unwrap();
            r.wait().unwrap();
            self.w.send(&pattern(1, 0, 3, 4, 5), 0, Tag(4)).unwrap();
            self.w.send(&pattern(1, 0, 3, 5, 6), 0, Tag(5)).unwrap();
        } else if self.r == 0 {
            let mut b = vec![0u8; big];
            // Tag::Any gets the earlier of two differently tagged messages.
            let st = self.w.recv(&mut b, 1, Tag::Any).unwrap();
            assert_eq!((st.tag, st.bytes), (1, 10));
            check(&b[..10], &pattern(1, 0, 3, 0, 10), "first");
            let st = self.w.recv(&mut b, Source::Any, Tag(2)).unwrap();
            assert_eq!((st.source, st.tag, st.bytes), (1, 2, 20));
            // A large (rendezvous) message sent before a small one on the same tag comes first.
            let st = self.w.recv(&mut b, 1, Tag(3)).unwrap();
            assert_eq!(st.bytes, big, "rendezvous message must not be overtaken");
            check(&b, &pattern(1, 0, 3, 2, big), "big");
            let st = self.w.recv(&mut b, 1, Tag(3)).unwrap();
            assert_eq!(st.bytes, 30);
            // A specific tag may skip ahead; the skipped message is still there.
            let st = self.w.recv(&mut b, 1, Tag(5)).unwrap();
            assert_eq!(st.bytes, 6);
            let st = self.w.recv(&mut b, 1, Tag(4)).unwrap();
            assert_eq!(st.bytes, 5);
            // Receives match in post order: two posted receives for the same source and tag.
        }
        if self.r == 1 {
            for i in 0..4 {
                self.w.send(&pattern(1, 0, 4, i, 8 + i), 0, Tag(9)).unwrap();
            }
        } else if self.r == 0 {
            let reqs: Vec<_> = (0..4)
                .map(|_| self.w.irecv(vec![0u8; 16], 1, Tag(9)).unwrap())
                .collect();
            for (i, (b, st)) in rcomm::wait_all(reqs).unwrap().into_iter().enumerate() {
                assert_eq!(st.bytes, 8 + i, "post order");
                check(
                    &b[..st.bytes],
                    &pattern(1, 0, 4, i, 8 + i),
                    "post order data",
                );
            }
        }
    }

    /// The direct path of blocking receives (straight from the peer's ring) keeps MPI's
    /// order: rank 1's messages sit in rank 0's ring, untouched by any progress, when rank 0's
    /// receive looks, and something earlier has a say each time — a wildcard receive posted
    /// before, a message already stored, a head message of another tag. Then a ping-pong,
    /// where the direct path runs (the counters show it).
    fn direct(&self) {
        if self.n < 2 || self.r > 1 {
            return;
        }
        // Long enough for rank 1's sends to land in the ring before rank 0 looks.
        let settle = || std::thread::sleep(Duration::from_millis(30));
        let msg = |i: usize, len: usize| pattern(1, 0, 14, i, len);
        let mut b = vec![0u8; 64];
        if self.r == 1 {
            self.w.send(&msg(0, 10), 0, Tag(3)).unwrap();
            self.w.send(&msg(1, 11), 0, Tag(3)).unwrap();
            self.w.send(&msg(2, 12), 0, Tag(4)).unwrap();
            self.w.recv(&mut b[..1], 0, Tag(50)).unwrap();
            self.w.send(&msg(3, 13), 0, Tag(4)).unwrap();
            self.w.send(&msg(4, 14), 0, Tag(6)).unwrap();
            self.w.send(&msg(5, 15), 0, Tag(7)).unwrap();
        } else {
            settle();
            // A wildcard receive posted first takes the first message; the blocking receive
            // gets the second.
            let early = self.w.irecv(vec![0u8; 64], Source::Any, Tag(3)).unwrap();
            let st = self.w.recv(&mut b, 1, Tag(3)).unwrap();
            assert_eq!(
                st.bytes, 11,
                "a receive posted earlier takes the first message"
            );
            check(&b[..11], &msg(1, 11), "second after a posted wildcard");
            let (eb, est) = early.wait().unwrap();
            assert_eq!(est.bytes, 10);
            check(&eb[..10], &msg(0, 10), "first to the posted wildcard");
            // A stored message comes before the next one in the ring.
            while self.w.iprobe(1, Tag(4)).unwrap().is_none() {}
            self.w.send(&[0u8], 1, Tag(50)).unwrap();
            settle();
            let st = self.w.recv(&mut b, 1, Tag(4)).unwrap();
            assert_eq!(st.bytes, 12, "the stored message first");
            check(&b[..12], &msg(2, 12), "stored before ring");
            let st = self.w.recv(&mut b, 1, Tag(4)).unwrap();
            check(&b[..st.bytes], &msg(3, 13), "ring after stored");
            // The ring's head has another tag: it waits, the later match is received.
            let st = self.w.recv(&mut b, 1, Tag(7)).unwrap();
            assert_eq!((st.tag, st.bytes), (7, 15), "a specific tag skips ahead");
            check(&b[..15], &msg(5, 15), "skipped ahead");
            let st = self.w.recv(&mut b, 1, Tag(6)).unwrap();
            check(&b[..st.bytes], &msg(4, 14), "the skipped message");
        }
        let peer = 1 - self.r;
        for i in 0..300 {
            let want = pattern(peer, self.r, 15, i, 8);
            if self.r == 0 {
                self.w.send(&pattern(0, 1, 15, i, 8), 1, Tag(8)).unwrap();
                self.w.recv(&mut b[..8], 1, Tag(8)).unwrap();
            } else {
                self.w.recv(&mut b[..8], 0, Tag(8)).unwrap();
                self.w.send(&pattern(1, 0, 15, i, 8), 0, Tag(8)).unwrap();
            }
            check(&b[..8], &want, "ping-pong");
        }
    }

    /// A non-blocking receive posted when its message already sits at the head of the peer's
    /// ring takes it at once (no request; the direct counter moves), and steps aside whenever
    /// something has a say first: a head message of another tag, a receive posted before
    /// (specific or wildcard). A message that is not a whole number of elements fails alike.
    fn irecv_direct(&self) {
        if self.n < 2 {
            return;
        }
        let pair = self
            .w
            .split((self.r < 2).then_some(0), self.r as i32)
            .unwrap();
        let Some(pair) = pair else { return };
        let shm = self.w.transport_to(1 - self.r).unwrap() == "shm";
        // Ranks 0 and 1 meet in a shared-memory allreduce (its windows do not read the rings,
        // though a long wait there progresses the engine, which would): rank 1 sends after a
        // meeting, rank 0 lets it land without progressing, then posts. Tried until the look
        // found it (a late sender only delays it), at most 20 times.
        let p = pair.with_algo("allreduce", "shm").unwrap();
        let meet = |v: u32| {
            let mut x = [0u32];
            p.allreduce(&[v], &mut x, rcomm::Op::Sum).unwrap();
            x[0]
        };
        let msg = |i: usize, len: usize| pattern(1, 0, 16, i, len);
        let direct = || self.w.transport_counters().get("shm").msgs_direct;
        let mut took = 0;
        for i in 0..20 {
            if meet(took) > 0 || (i > 0 && !shm) {
                break;
            }
            if self.r == 1 {
                self.w.send(&msg(100 + i, 10), 0, Tag(21)).unwrap();
                continue;
            }
            std::thread::sleep(Duration::from_millis(5));
            let before = direct();
            let mut r = self.w.irecv(vec![0u8; 16], 1, Tag(21)).unwrap();
            if direct() > before {
                took = 1;
                assert!(r.test(), "complete when posted");
            }
            let (b, st) = r.wait().unwrap();
            assert_eq!((st.source, st.tag, st.bytes), (1, 21, 10));
            check(&b[..10], &msg(100 + i, 10), "taken when posted");
        }
        if self.r == 0 && shm {
            assert_eq!(
                took, 1,
                "a receive posted after its message took it from the ring"
            );
        }
        let settle = || std::thread::sleep(Duration::from_millis(30));
        if self.r == 1 {
            self.w.send(&msg(1, 11), 0, Tag(22)).unwrap();
            self.w.send(&msg(2, 5), 0, Tag(23)).unwrap();
            self.w.send(&msg(3, 13), 0, Tag(24)).unwrap();
            let mut b = [0u8; 1];
            self.w.recv(&mut b, 0, Tag(51)).unwrap();
            self.w.send(&msg(4, 9), 0, Tag(25)).unwrap();
            self.w.send(&msg(5, 8), 0, Tag(25)).unwrap();
            return;
        }
        settle();
        // The head (tag 22) is not for a tag-23 receive; the tag-22 receive posted next has a
        // receive from rank 1 before it: both go the general way, each gets its own message.
        let (mut b22, mut b23) = (vec![0u8; 16], vec![0u8; 16]);
        self.w.scope(|s| {
            let r23 = s.irecv(&mut b23, 1, Tag(23)).unwrap();
            let r22 = s.irecv(&mut b22, 1, Tag(22)).unwrap();
            assert_eq!(r22.wait().unwrap().bytes, 11);
            assert_eq!(r23.wait().unwrap().bytes, 5);
        });
        check(&b22[..11], &msg(1, 11), "tag 22");
        check(&b23[..5], &msg(2, 5), "tag 23");
        // 13 bytes into u32 elements.
        let r = self.w.irecv(vec![0u32; 4], 1, Tag(24)).unwrap();
        assert!(matches!(
            r.wait(),
            Err(CommError::Size { bytes: 13, elem: 4 })
        ));
        // A wildcard receive posted before the messages arrive takes the first of them.
        let any = self.w.irecv(vec![0u8; 16], Source::Any, Tag(25)).unwrap();
        self.w.send(&[0u8], 1, Tag(51)).unwrap();
        settle();
        let mut b25 = [0u8; 16];
        self.w.scope(|s| {
            let st = s.irecv(&mut b25, 1, Tag(25)).unwrap().wait().unwrap();
            assert_eq!(
                st.bytes, 8,
                "the second message: the wildcard was posted first"
            );
        });
        check(&b25[..8], &msg(5, 8), "after the wildcard");
        let (b, st) = any.wait().unwrap();
        assert_eq!((st.source, st.bytes), (1, 9));
        check(&b[..9], &msg(4, 9), "to the wildcard");
    }

    /// A too-small buffer: Truncated, the message consumed, the next one intact.
    fn truncation(&self) {
        if self.n < 2 {
            return;
        }
        if self.r == 1 {
            self.w.send(&pattern(1, 0, 5, 0, 100), 0, Tag(1)).unwrap();
            self.w
                .send(&pattern(1, 0, 5, 1, 1 << 20), 0, Tag(1))
                .unwrap();
            self.w.send(&pattern(1, 0, 5, 2, 33), 0, Tag(1)).unwrap();
        } else if self.r == 0 {
            let mut small = vec![0u8; 50];
            match self.w.recv(&mut small, 1, Tag(1)) {
                Err(CommError::Truncated {
                    buffer: 50,
                    message: 100,
                }) => {}
                other => panic!("expected truncation, got {other:?}"),
            }
            match self.w.recv(&mut small, 1, Tag(1)) {
                Err(CommError::Truncated {
                    buffer: 50,
                    message,
                }) if message == 1 << 20 => {}
                other => panic!("expected rendezvous truncation, got {other:?}"),
            }
            let st = self.w.recv(&mut small, 1, Tag(1)).unwrap();
            check(
                &small[..st.bytes],
                &pattern(1, 0, 5, 2, 33),
                "after truncation",
            );
        }
    }

    /// probe, iprobe, mprobe and improbe.
    fn probes(&self) {
        if self.n < 2 {
            return;
        }
        if self.r == 1 {
            self.w.send(&pattern(1, 0, 6, 0, 1234), 0, Tag(11)).unwrap();
            self.w
                .send(&pattern(1, 0, 6, 1, 2 << 20), 0, Tag(12))
                .unwrap();
            self.w.send(&pattern(1, 0, 6, 2, 77), 0, Tag(13)).unwrap();
        } else if self.r == 0 {
            let st = self.w.probe(Source::Any, Tag(11)).unwrap();
            assert_eq!((st.source, st.bytes), (1, 1234));
            let m = self.w.mprobe(1, Tag(11)).unwrap();
            assert_eq!(m.status().bytes, 1234);
            let (v, _) = m.recv_vec::<u8>().unwrap();
            check(&v, &pattern(1, 0, 6, 0, 1234), "mprobe eager");
            let m = self.w.mprobe(1, Tag(12)).unwrap();
            let (v, st) = m.recv_vec::<u8>().unwrap();
            assert_eq!(st.bytes, 2 << 20);
            check(&v, &pattern(1, 0, 6, 1, 2 << 20), "mprobe rendezvous");
            let t0 = Instant::now();
            let m = loop {
                if let Some(m) = self.w.improbe(1, Tag(13)).unwrap() {
                    break m;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "improbe never matched"
                );
            };
            let mut b = [0u8; 77];
            m.recv_into(&mut b).unwrap();
            check(&b, &pattern(1, 0, 6, 2, 77), "improbe");
            assert!(self.w.iprobe(1, Tag(13)).unwrap().is_none());
        }
    }

    /// Non-blocking rings: many outstanding sends and receives in both directions, owned and
    /// scoped, completed by wait_all, wait_any and scope end.
    /// Send modes and request sets: a synchronous send completes only once its receive is
    /// posted (tested while the receiver provably has not posted it), pairwise blocking
    /// `ssend`, `sendrecv_replace` around the ring, and `test_any` / `test_some` / `wait_some`
    /// / `test_all` over mixed sizes.
    fn modes(&self) {
        let right = (self.r + 1) % self.n;
        let left = (self.r + self.n - 1) % self.n;
        // To itself a blocking synchronous send completes at once (documented).
        let me = pattern(self.r, self.r, 20, 0, 33);
        self.w.ssend(&me, self.r, Tag(330)).unwrap();
        let mut back = vec![0u8; 33];
        self.w.recv(&mut back, self.r, Tag(330)).unwrap();
        check(&back, &me, "ssend to self");
        // A non-blocking one is done only once a receive matched it, to itself too.
        let mut req = self.w.issend(me.clone(), self.r, Tag(331)).unwrap();
        assert!(!req.test(), "issend to self completed before its receive");
        self.w.recv(&mut back, self.r, Tag(331)).unwrap();
        let (_, st) = req.wait().unwrap();
        assert_eq!((st.source, st.bytes), (self.r, 33), "issend to self status");
        if self.n > 1 {
            for (i, len) in [0usize, 8, 100_000].into_iter().enumerate() {
                let out = pattern(self.r, right, 21, i, len);
                let mut req = self.w.issend(out.clone(), right, Tag(300)).unwrap();
                // The right neighbour posts its receive only after our go below: until then
                // the synchronous send cannot complete, whatever its size.
                for _ in 0..20 {
                    assert!(
                        !req.test(),
                        "issend of {len} B completed before its receive was posted"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                self.w.send(&[1u8], right, Tag(301)).unwrap();
                let mut go = [0u8; 1];
                self.w.recv(&mut go, left, Tag(301)).unwrap();
                let mut inb = vec![0u8; len];
                let st = self.w.recv(&mut inb, left, Tag(300)).unwrap();
                assert_eq!((st.source, st.bytes), (left, len));
                check(&inb, &pattern(left, self.r, 21, i, len), "issend data");
                let (b, st) = req.wait().unwrap();
                assert_eq!(
                    (b.len(), st.bytes, st.tag),
                    (len, len, 300),
                    "issend status"
                );
            }
            // Blocking ssend in pairs (even ranks send first, so no pair deadlocks).
            let partner = self.r ^ 1;
            if partner < self.n {
                let out = pattern(self.r, partner, 22, 0, 4000);
                let mut inb = vec![0u8; 4000];
                if self.r.is_multiple_of(2) {
                    self.w.ssend(&out, partner, Tag(302)).unwrap();
                    self.w.recv(&mut inb, partner, Tag(302)).unwrap();
                } else {
                    self.w.recv(&mut inb, partner, Tag(302)).unwrap();
                    self.w.ssend(&out, partner, Tag(302)).unwrap();
                }
                check(&inb, &pattern(partner, self.r, 22, 0, 4000), "ssend data");
            }
        }
        for (i, len) in [0usize, 5, 50_000].into_iter().enumerate() {
            let mut buf = pattern(self.r, right, 23, i, len);
            let st = self
                .w
                .sendrecv_replace(&mut buf, right, Tag(310), left, Tag(310))
                .unwrap();
            assert_eq!((st.source, st.tag, st.bytes), (left, 310, len));
            check(&buf, &pattern(left, self.r, 23, i, len), "sendrecv_replace");
        }
        // Persistent requests: set up once, started every iteration with new contents.
        let mut ps = self.w.send_init(vec![0u64; 300], right, Tag(340)).unwrap();
        let mut pr = self.w.recv_init(vec![0u64; 300], left, Tag(340)).unwrap();
        assert!(pr.wait().is_err(), "wait before start");
        for it in 0..5u64 {
            for (i, x) in ps.buffer_mut().unwrap().iter_mut().enumerate() {
                *x = u64::from(self.r) << 32 | it << 16 | i as u64;
            }
            pr.start().unwrap();
            assert!(pr.start().is_err(), "start while active");
            ps.start().unwrap();
            assert!(pr.is_active() && pr.buffer().is_none());
            let st = pr.wait().unwrap();
            ps.wait().unwrap();
            assert_eq!((st.source, st.tag, st.bytes), (left, 340, 2400));
            let got = pr.buffer().unwrap();
            assert!(
                got.iter()
                    .enumerate()
                    .all(|(i, &x)| x == u64::from(left) << 32 | it << 16 | i as u64),
                "persistent run {it}"
            );
        }
        assert!(ps.test() && !ps.is_active());
        let mut none: Vec<rcomm::Request<u8>> = Vec::new();
        assert!(rcomm::test_any(&mut none).unwrap().is_none());
        assert!(
            rcomm::wait_some(&mut none).is_err(),
            "wait_some on nothing is an error"
        );
        let lens = [1usize, 30_000, 0, 200_000];
        let mut recvs: Vec<_> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                self.w
                    .irecv(vec![0u8; l], left, Tag(320 + i as i32))
                    .unwrap()
            })
            .collect();
        let mut sends: Vec<_> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                self.w
                    .isend(pattern(self.r, right, 24, i, l), right, Tag(320 + i as i32))
                    .unwrap()
            })
            .collect();
        let mut got = vec![false; lens.len()];
        // Indices are positions in the vector as it was before each call: keep the tags' map.
        let mut tags: Vec<usize> = (0..lens.len()).collect();
        let check_one = |k: usize, b: &[u8], st: &rcomm::Status, got: &mut Vec<bool>| {
            assert_eq!(st.tag, 320 + k as i32, "index names the request");
            check(b, &pattern(left, self.r, 24, k, lens[k]), "test_some data");
            assert!(!std::mem::replace(&mut got[k], true), "taken twice");
        };
        let t0 = Instant::now();
        while !recvs.is_empty() {
            let batch = if tags.len().is_multiple_of(2) {
                rcomm::wait_some(&mut recvs).unwrap()
            } else {
                match rcomm::test_any(&mut recvs).unwrap() {
                    Some((i, b, st)) => vec![(i, b, st)],
                    None => rcomm::test_some(&mut recvs).unwrap(),
                }
            };
            let mut taken: Vec<usize> = batch.iter().map(|(i, _, _)| *i).collect();
            for (i, b, st) in &batch {
                check_one(tags[*i], b, st, &mut got);
            }
            taken.sort_unstable();
            for i in taken.into_iter().rev() {
                tags.remove(i);
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "request set never completed"
            );
        }
        assert!(got.iter().all(|&g| g));
        while !rcomm::test_all(&mut sends) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "sends never completed"
            );
        }
        for (i, (b, _)) in rcomm::wait_all(sends).unwrap().into_iter().enumerate() {
            assert_eq!(b.len(), lens[i]);
        }
    }

    /// Ready and buffered sends, cancel, start_all. Buffered sends return at once: every rank
    /// bsends a rendezvous-sized message to its right before anyone posts a receive (a send that
    /// waited for its receive would hang the ring), and the attached budget runs out.
    /// Cancel of sends: an unmatched rendezvous send and an unmatched synchronous send are
    /// taken back (their waits return at once, empty) and the receiver gets the next message,
    /// never them; a matched send is not cancelled and its data arrives intact.
    fn send_cancel(&self) {
        let (left, right) = ((self.r + self.n - 1) % self.n, (self.r + 1) % self.n);
        let big = 200_000; // rendezvous over shared memory and over TCP
        let t0 = Instant::now();
        let mut s = self
            .w
            .isend(pattern(self.r, right, 40, 0, big), right, Tag(390))
            .unwrap();
        assert!(
            s.cancel() && s.is_cancelled(),
            "unmatched rendezvous send cancelled"
        );
        let (b, st) = s.wait().unwrap();
        assert_eq!(
            (b.len(), st.bytes),
            (big, 0),
            "cancelled send: empty status"
        );
        let mut s = self
            .w
            .issend(pattern(self.r, right, 40, 1, 100), right, Tag(391))
            .unwrap();
        assert!(
            s.cancel() && s.is_cancelled(),
            "unmatched synchronous send cancelled"
        );
        assert_eq!(s.wait().unwrap().1.bytes, 0);
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "cancels took {:?}",
            t0.elapsed()
        );
        self.w
            .send(&pattern(self.r, right, 40, 2, 50), right, Tag(392))
            .unwrap();
        // Every cancel has its answer before any receive is posted (a receive posted first
        // could match a message whose cancel is still on its way: then it is not cancelled).
        self.barrier();
        // Rank 0 may already hold the next barrier's messages from ranks ahead of it: it
        // names its source. The others get nothing else before their next barrier.
        let mut inb = vec![0u8; big];
        let st = if self.r == 0 {
            self.w.recv(&mut inb, left, Tag::Any).unwrap()
        } else {
            self.w.recv(&mut inb, Source::Any, Tag::Any).unwrap()
        };
        assert_eq!(
            (st.source, st.tag, st.bytes),
            (left, 392, 50),
            "the receive got a cancelled message"
        );
        check(
            &inb[..50],
            &pattern(left, self.r, 40, 2, 50),
            "after cancels",
        );
        for tag in [390, 391] {
            assert!(
                self.w.iprobe(left, Tag(tag)).unwrap().is_none(),
                "tag {tag}"
            );
        }
        // A send whose receive was posted before it is matched when it arrives.
        let rq = self.w.irecv(vec![0u8; big], left, Tag(393)).unwrap();
        self.barrier();
        let mut s = self
            .w
            .isend(pattern(self.r, right, 40, 3, big), right, Tag(393))
            .unwrap();
        assert!(
            !s.cancel() && !s.is_cancelled(),
            "a matched send is not cancelled"
        );
        let (b, st) = rq.wait().unwrap();
        assert_eq!(st.bytes, big);
        check(
            &b,
            &pattern(left, self.r, 40, 3, big),
            "matched, not cancelled",
        );
        assert_eq!(s.wait().unwrap().1.bytes, big);
        self.ok("send-cancel");
    }

    fn send_modes(&self) {
        let right = (self.r + 1) % self.n;
        let left = (self.r + self.n - 1) % self.n;
        // Ready send: the receive is posted before the sender hears "posted".
        for (i, len) in [0usize, 40, 90_000].into_iter().enumerate() {
            let rq = self.w.irecv(vec![0u8; len], left, Tag(350)).unwrap();
            self.w.send(&[1u8], left, Tag(351)).unwrap();
            self.w.recv(&mut [0u8; 1], right, Tag(351)).unwrap();
            let out = pattern(self.r, right, 30, i, len);
            if i == 1 {
                let (b, _) = self.w.irsend(out, right, Tag(350)).unwrap().wait().unwrap();
                assert_eq!(b.len(), len);
            } else {
                self.w.rsend(&out, right, Tag(350)).unwrap();
            }
            let (b, st) = rq.wait().unwrap();
            assert_eq!((st.source, st.bytes), (left, len));
            check(&b, &pattern(left, self.r, 30, i, len), "rsend data");
        }
        // Buffered sends.
        assert!(
            matches!(
                self.w.bsend(&[1u8], right, Tag(360)),
                Err(CommError::InvalidArg(_))
            ),
            "bsend with nothing attached"
        );
        assert!(
            rcomm::buffer_detach().is_err(),
            "detach with nothing attached"
        );
        let big = 90_000; // rendezvous over shared memory and over TCP
        let budget = big + 5 * (100 + rcomm::BSEND_OVERHEAD) + rcomm::BSEND_OVERHEAD;
        rcomm::buffer_attach(budget).unwrap();
        assert!(rcomm::buffer_attach(10).is_err(), "attached twice");
        self.w
            .bsend(&pattern(self.r, right, 31, 0, big), right, Tag(360))
            .unwrap();
        let mut small = Vec::new();
        for k in 0..5 {
            let r = self
                .w
                .ibsend(pattern(self.r, right, 31, 1 + k, 100), right, Tag(361))
                .unwrap();
            small.push(r);
        }
        if self.n > 1 {
            // The big one is not matched yet (its receiver has not posted): its share is held.
            let e = self
                .w
                .bsend(&pattern(self.r, right, 31, 9, big), right, Tag(362))
                .unwrap_err();
            assert!(matches!(e, CommError::Exhausted(_)), "{e}");
        }
        for (k, r) in small.into_iter().enumerate() {
            let (b, st) = r.wait().unwrap();
            assert_eq!((b.len(), st.bytes), (100, 100), "ibsend {k}");
        }
        self.w.send(&[1u8], right, Tag(363)).unwrap();
        self.w.recv(&mut [0u8; 1], left, Tag(363)).unwrap();
        let mut inb = vec![0u8; big];
        self.w.recv(&mut inb, left, Tag(360)).unwrap();
        check(&inb, &pattern(left, self.r, 31, 0, big), "bsend data");
        for k in 0..5 {
            let mut inb = vec![0u8; 100];
            self.w.recv(&mut inb, left, Tag(361)).unwrap();
            check(&inb, &pattern(left, self.r, 31, 1 + k, 100), "ibsend data");
        }
        assert_eq!(rcomm::buffer_detach().unwrap(), budget);
        // Cancel: an unmatched receive is taken back and never gets the message sent later.
        let mut rq = self.w.irecv(vec![7u8; 16], left, Tag(370)).unwrap();
        assert!(
            rq.cancel() && rq.is_cancelled(),
            "unmatched receive cancelled"
        );
        let (b, st) = rq.wait().unwrap();
        assert_eq!((b, st.bytes), (vec![7u8; 16], 0), "cancelled: untouched");
        self.barrier();
        let mut sq = self
            .w
            .isend(pattern(self.r, right, 32, 0, 16), right, Tag(370))
            .unwrap();
        let mut inb = vec![0u8; 16];
        self.w.recv(&mut inb, left, Tag(370)).unwrap();
        check(&inb, &pattern(left, self.r, 32, 0, 16), "after cancel");
        // Received everywhere: a send whose message was matched is not taken back.
        self.barrier();
        assert!(
            !sq.cancel() && !sq.is_cancelled(),
            "a received send is not cancelled"
        );
        sq.wait().unwrap();
        // A matched receive is not cancelled.
        let mut rq = self.w.irecv(vec![0u8; 8], left, Tag(371)).unwrap();
        self.w
            .send(&pattern(self.r, right, 33, 0, 8), right, Tag(371))
            .unwrap();
        let t0 = Instant::now();
        while !rq.test() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "receive never completed"
            );
            std::thread::yield_now();
        }
        assert!(!rq.cancel() && !rq.is_cancelled());
        let (b, _) = rq.wait().unwrap();
        check(
            &b,
            &pattern(left, self.r, 33, 0, 8),
            "matched, not cancelled",
        );
        // start_all over persistent requests.
        let mut rs = vec![
            self.w.recv_init(vec![0u32; 10], left, Tag(380)).unwrap(),
            self.w.recv_init(vec![0u32; 10], right, Tag(381)).unwrap(),
        ];
        let mut ss = vec![
            self.w.send_init(vec![self.r; 10], right, Tag(380)).unwrap(),
            self.w
                .send_init(vec![self.r + 1000; 10], left, Tag(381))
                .unwrap(),
        ];
        for _ in 0..3 {
            rcomm::start_all(&mut rs).unwrap();
            rcomm::start_all(&mut ss).unwrap();
            assert!(rcomm::start_all(&mut rs).is_err(), "started while active");
            for p in ss.iter_mut().chain(rs.iter_mut()) {
                p.wait().unwrap();
            }
            assert_eq!(rs[0].buffer().unwrap(), &[left; 10]);
            assert_eq!(rs[1].buffer().unwrap(), &[right + 1000; 10]);
        }
    }

    /// Graph and distributed-graph topologies and neighbour collectives against brute force:
    /// a pseudo-random multigraph (0-2 edges per ordered pair, self edges included, lists in
    /// shuffled order) built adjacent and from edges named anywhere, a symmetric ring graph,
    /// and neighbor_alltoallv on Cartesian grids of 1-3 dimensions with every period mix.
    fn graph(&self) {
        let n = self.n;
        let me = self.r;
        let enc = |p: u32, q: u32, o: usize, i: usize| -> u64 {
            u64::from(p) << 48 | u64::from(q) << 32 | (o as u64) << 16 | i as u64
        };
        let mix = |a: u64| a.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(23) ^ a;
        for seed in 0..3u64 {
            let m =
                |p: u32, q: u32| (mix(seed << 40 | u64::from(p) << 20 | u64::from(q)) % 3) as usize;
            // Lists in an order shuffled per rank; the i-th p among our sources pairs with the
            // i-th us among p's destinations.
            let shuffled = |salt: u64| {
                let mut v: Vec<u32> = (0..n).collect();
                v.sort_by_key(|&x| mix(salt ^ u64::from(x) << 8 ^ seed));
                v
            };
            let dests: Vec<u32> = shuffled(1 + u64::from(me))
                .into_iter()
                .flat_map(|q| std::iter::repeat_n(q, m(me, q)))
                .collect();
            let srcs: Vec<u32> = shuffled(1000 + u64::from(me))
                .into_iter()
                .flat_map(|p| std::iter::repeat_n(p, m(p, me)))
                .collect();
            let dw: Vec<i32> = dests.iter().map(|&q| (me * 100 + q) as i32).collect();
            let sw: Vec<i32> = srcs.iter().map(|&p| (p * 100 + me) as i32).collect();
            let g = self
                .w
                .dist_graph_create_adjacent(&srcs, Some(&sw), &dests, Some(&dw), true)
                .unwrap();
            assert_eq!(
                g.dist_graph_neighbors(),
                (&srcs[..], Some(&sw[..]), &dests[..], Some(&dw[..]))
            );
            assert_eq!(
                g.dist_graph_neighbors_count(),
                (srcs.len() as u32, dests.len() as u32, true)
            );
            assert!(!g.is_graph() && g.graph_neighbors(0).is_err());
            // Occurrence of each entry among equal ranks before it.
            let occ = |v: &[u32]| -> Vec<usize> {
                (0..v.len())
                    .map(|k| v[..k].iter().filter(|&&x| x == v[k]).count())
                    .collect()
            };
            let (so, doc) = (occ(&srcs), occ(&dests));
            self.check_graph_collectives(&g, &srcs, &so, &dests, &doc, &enc);
            // The same graph, each edge named by rank (p + q) mod n.
            let (mut es, mut ed) = (vec![], vec![]);
            for p in 0..n {
                for q in 0..n {
                    if (p + q) % n == me {
                        for _ in 0..m(p, q) {
                            es.push(p);
                            ed.push(q);
                        }
                    }
                }
            }
            let g2 = self
                .w
                .dist_graph_create(&es, &vec![1; es.len()], &ed, None, false)
                .unwrap();
            // Expected: edges ordered by the naming rank, then by (p, q) as named.
            let mut ins: Vec<(u32, u32, u32)> = vec![];
            let mut outs: Vec<(u32, u32, u32)> = vec![];
            for r in 0..n {
                for p in 0..n {
                    for q in 0..n {
                        if (p + q) % n == r {
                            for _ in 0..m(p, q) {
                                if q == me {
                                    ins.push((r, p, q));
                                }
                                if p == me {
                                    outs.push((r, p, q));
                                }
                            }
                        }
                    }
                }
            }
            let s2: Vec<u32> = ins.iter().map(|e| e.1).collect();
            let d2: Vec<u32> = outs.iter().map(|e| e.2).collect();
            assert_eq!(g2.dist_graph_neighbors(), (&s2[..], None, &d2[..], None));
            self.check_graph_collectives(&g2, &s2, &occ(&s2), &d2, &occ(&d2), &enc);
        }
        // Edges that disagree fail on every rank (rank 0 sends to rank 1 % n, nobody listens).
        let extra: Vec<u32> = if me == 0 { vec![1 % n] } else { vec![] };
        let e = self
            .w
            .dist_graph_create_adjacent(&[], None, &extra, None, false)
            .unwrap_err();
        assert!(matches!(e, CommError::InvalidArg(_)), "{e}");
        assert!(
            self.w
                .dist_graph_create_adjacent(&[n], None, &[], None, false)
                .is_err()
        );
        // A symmetric graph: a ring (n = 1 and 2 make multi-edges to oneself and the other).
        let index: Vec<u32> = (1..=n).map(|i| 2 * i).collect();
        let edges: Vec<u32> = (0..n)
            .flat_map(|p| [(p + 1) % n, (p + n - 1) % n])
            .collect();
        let g = self.w.graph_create(&index, &edges, false).unwrap().unwrap();
        assert!(g.is_graph());
        for r in 0..n {
            assert_eq!(
                g.graph_neighbors(r).unwrap(),
                vec![(r + 1) % n, (r + n - 1) % n]
            );
        }
        assert!(g.graph_neighbors(n).is_err());
        assert_eq!(g.graph_get().unwrap(), (&index[..], &edges[..]));
        let nb = g.graph_neighbors(me).unwrap();
        let o = occ_of(&nb);
        self.check_graph_collectives(&g, &nb, &o, &nb, &o, &enc);
        // Fewer nodes than ranks: the rest get None. A one-way edge is refused.
        let small = self.w.graph_create(&[0], &[], false).unwrap();
        assert_eq!(small.is_some(), me == 0);
        assert_eq!(self.w.graph_map(&[0], &[]).unwrap(), (me == 0).then_some(0));
        if n >= 2 {
            assert!(
                self.w.graph_create(&[1, 1], &[1], false).is_err(),
                "one-way edge"
            );
        }
        assert!(
            self.w.graph_create(&[2], &[0], false).is_err(),
            "index past edges"
        );
        assert!(
            self.w.graph_create(&[1], &[5], false).is_err(),
            "edge to no node"
        );
        // neighbor_alltoallv on Cartesian grids: block k to neighbour k, counts k+1, gaps
        // between receive blocks left untouched.
        for nd in 1..=3usize {
            let mut dims = vec![0u32; nd];
            rcomm::dims_create(n, &mut dims).unwrap();
            for pmask in 0..(1u32 << nd) {
                let periods: Vec<bool> = (0..nd).map(|d| pmask >> d & 1 == 1).collect();
                assert_eq!(self.w.cart_map(&dims, &periods).unwrap(), Some(me));
                let c = self.w.cart_create(&dims, &periods, false).unwrap().unwrap();
                let nbs = c.neighbors().unwrap();
                let k = nbs.len();
                let sc: Vec<usize> = (0..k).map(|j| j + 1).collect();
                let sd: Vec<usize> = (0..k).map(|j| j * (j + 1) / 2).collect();
                let send: Vec<u64> = (0..k)
                    .flat_map(|j| (0..=j).map(move |i| enc(me, 0, j, i)))
                    .collect();
                // Neighbour j sent us its block j ^ 1.
                let rc: Vec<usize> = (0..k).map(|j| (j ^ 1) + 1).collect();
                let mut rd = vec![0usize; k];
                let mut at = 1;
                for j in 0..k {
                    rd[j] = at;
                    at += rc[j] + 1;
                }
                let sentinel = u64::MAX;
                let mut recv = vec![sentinel; at];
                c.neighbor_alltoallv(&send, &sc, &sd, &mut recv, &rc, &rd)
                    .unwrap();
                let mut want = vec![sentinel; at];
                for j in 0..k {
                    if let Some(w) = nbs[j] {
                        for i in 0..rc[j] {
                            want[rd[j] + i] = enc(w, 0, j ^ 1, i);
                        }
                    }
                }
                assert_eq!(
                    recv, want,
                    "cart alltoallv dims {dims:?} periods {periods:?}"
                );
                let bad = c.neighbor_alltoallv(&send, &sc[1..], &sd, &mut recv, &rc, &rd);
                assert!(bad.is_err(), "counts of the wrong length");
            }
        }
        assert!(self.w.cart_map(&[n + 1], &[false]).is_err());
    }

    /// allgather, alltoall and alltoallv on `g` against what each source sent: `srcs[k]` is
    /// source k, `so[k]` its occurrence among equal sources (and the same for destinations).
    fn check_graph_collectives(
        &self,
        g: &rcomm::GraphComm,
        srcs: &[u32],
        so: &[usize],
        dests: &[u32],
        doc: &[usize],
        enc: &dyn Fn(u32, u32, usize, usize) -> u64,
    ) {
        let me = self.r;
        let s = u64::MAX;
        let mut got = vec![s; 2 * srcs.len()];
        g.neighbor_allgather(&[enc(me, 9, 9, 0), enc(me, 9, 9, 1)], &mut got)
            .unwrap();
        let want: Vec<u64> = srcs
            .iter()
            .flat_map(|&p| [enc(p, 9, 9, 0), enc(p, 9, 9, 1)])
            .collect();
        assert_eq!(got, want, "graph allgather");
        let send: Vec<u64> = dests
            .iter()
            .zip(doc)
            .flat_map(|(&q, &o)| [enc(me, q, o, 0), enc(me, q, o, 1)])
            .collect();
        let mut got = vec![s; 2 * srcs.len()];
        g.neighbor_alltoall(&send, &mut got).unwrap();
        let want: Vec<u64> = srcs
            .iter()
            .zip(so)
            .flat_map(|(&p, &o)| [enc(p, me, o, 0), enc(p, me, o, 1)])
            .collect();
        assert_eq!(got, want, "graph alltoall");
        // alltoallv: the edge's count depends on its ends and occurrence; receive blocks in
        // reverse order with a gap each.
        let cnt = |p: u32, q: u32, o: usize| 1 + (p as usize + 2 * q as usize + o) % 3;
        let sc: Vec<usize> = dests
            .iter()
            .zip(doc)
            .map(|(&q, &o)| cnt(me, q, o))
            .collect();
        let sd: Vec<usize> = (0..sc.len()).map(|k| sc[..k].iter().sum()).collect();
        let send: Vec<u64> = dests
            .iter()
            .zip(doc)
            .flat_map(|(&q, &o)| (0..cnt(me, q, o)).map(move |i| enc(me, q, o, i)))
            .collect();
        let rc: Vec<usize> = srcs.iter().zip(so).map(|(&p, &o)| cnt(p, me, o)).collect();
        let mut rd = vec![0usize; rc.len()];
        let mut at = 0;
        for k in (0..rc.len()).rev() {
            at += 1;
            rd[k] = at;
            at += rc[k];
        }
        let mut got = vec![s; at + 1];
        g.neighbor_alltoallv(&send, &sc, &sd, &mut got, &rc, &rd)
            .unwrap();
        let mut want = vec![s; at + 1];
        for k in 0..rc.len() {
            for i in 0..rc[k] {
                want[rd[k] + i] = enc(srcs[k], me, so[k], i);
            }
        }
        assert_eq!(got, want, "graph alltoallv");
        if rc.len() > 1 {
            // Block 0 moved onto block 1's place: refused before anything moves.
            let mut overlap = rd.clone();
            overlap[0] = rd[1];
            let e = g.neighbor_alltoallv(&send, &sc, &sd, &mut got, &rc, &overlap);
            assert!(e.is_err(), "overlapping receive blocks");
        }
    }

    /// Cartesian topologies against coordinates computed here: dims, coords and ranks, shifts,
    /// neighbour collectives (a periodic dimension of 2 makes one rank both neighbours), sub-
    /// grids, ranks left off a smaller grid, and the errors.
    fn cart(&self) {
        let n = self.n;
        let mut dims = [0u32, 0];
        rcomm::dims_create(n, &mut dims).unwrap();
        assert_eq!(dims[0] * dims[1], n);
        for periods in [[true, false], [true, true]] {
            let c = self
                .w
                .cart_create(&dims, &periods, false)
                .unwrap()
                .expect("on the grid");
            assert_eq!(c.size(), n);
            let me = c.coords(c.rank()).unwrap();
            assert_eq!(me, vec![self.r / dims[1], self.r % dims[1]], "row-major");
            for r in 0..n {
                let xy = c.coords(r).unwrap();
                assert_eq!(c.rank_of(&[i64::from(xy[0]), i64::from(xy[1])]).unwrap(), r);
            }
            // The reference: neighbours from coordinates, wrapping where periodic.
            let at = |d: usize, delta: i64| -> Option<u32> {
                let mut xy = [i64::from(me[0]), i64::from(me[1])];
                xy[d] += delta;
                let ext = i64::from(dims[d]);
                if periods[d] {
                    xy[d] = xy[d].rem_euclid(ext);
                } else if !(0..ext).contains(&xy[d]) {
                    return None;
                }
                Some((xy[0] * i64::from(dims[1]) + xy[1]) as u32)
            };
            let want: Vec<Option<u32>> = vec![at(0, -1), at(0, 1), at(1, -1), at(1, 1)];
            assert_eq!(c.neighbors().unwrap(), want, "{periods:?}");
            assert_eq!(c.shift(1, 1).unwrap(), (want[2], want[3]));
            assert_eq!(c.shift(0, -1).unwrap(), (want[1], want[0]));
            let sentinel = u32::MAX;
            let mut got = vec![sentinel; 8];
            c.neighbor_allgather(&[self.r, self.r * 10 + 1], &mut got)
                .unwrap();
            for (k, w) in want.iter().enumerate() {
                let blk = &got[2 * k..2 * k + 2];
                match w {
                    Some(p) => assert_eq!(blk, [*p, p * 10 + 1], "allgather block {k}"),
                    None => assert_eq!(blk, [sentinel; 2], "no neighbour: untouched"),
                }
            }
            let send: Vec<u32> = (0..4).map(|k| self.r * 100 + k).collect();
            let mut got = vec![sentinel; 4];
            c.neighbor_alltoall(&send, &mut got).unwrap();
            for (k, w) in want.iter().enumerate() {
                // The neighbour at -1 sent us its +1 block, and the other way round.
                let want_k = w.map_or(sentinel, |p| p * 100 + (k as u32 ^ 1));
                assert_eq!(got[k], want_k, "alltoall block {k} {periods:?}");
            }
            let row = c.sub(&[false, true]).unwrap();
            assert_eq!(
                (row.size(), row.rank(), row.dims()),
                (dims[1], me[1], &dims[1..])
            );
            let mut sum = [self.r];
            row.allreduce_in_place(&mut sum, rcomm::Op::Sum).unwrap();
            let base = me[0] * dims[1];
            assert_eq!(
                sum[0],
                (base..base + dims[1]).sum::<u32>(),
                "a row holds its ranks"
            );
        }
        // A grid smaller than the communicator leaves the last ranks off.
        let c = self
            .w
            .cart_create(&[n.div_ceil(2)], &[false], true)
            .unwrap();
        assert_eq!(c.is_some(), self.r < n.div_ceil(2));
        if let Some(c) = c {
            assert!(c.rank_of(&[-1]).is_err(), "off a non-periodic edge");
            assert!(c.coords(n).is_err());
        }
        assert!(self.w.cart_create(&[n + 1], &[true], false).is_err());
        assert!(self.w.cart_create(&[n], &[true, false], false).is_err());
    }

    fn nonblocking(&self) {
        let right = (self.r + 1) % self.n;
        let left = (self.r + self.n - 1) % self.n;
        for iter in 0..3 {
            let lens = [0usize, 1, 100, 20_000, 70_000, 300_000];
            let recvs: Vec<_> = lens
                .iter()
                .enumerate()
                .map(|(i, &l)| {
                    self.w
                        .irecv(vec![0u8; l], left, Tag(100 + i as i32))
                        .unwrap()
                })
                .collect();
            let sends: Vec<_> = lens
                .iter()
                .enumerate()
                .rev()
                .map(|(i, &l)| {
                    self.w
                        .isend(
                            pattern(self.r, right, 8 + iter, i, l),
                            right,
                            Tag(100 + i as i32),
                        )
                        .unwrap()
                })
                .collect();
            let mut recvs = recvs;
            let mut got = 0;
            while !recvs.is_empty() {
                let (_, b, st) = rcomm::wait_any(&mut recvs).unwrap();
                let i = (st.tag - 100) as usize;
                check(&b, &pattern(left, self.r, 8 + iter, i, lens[i]), "wait_any");
                got += 1;
            }
            assert_eq!(got, lens.len());
            for (b, st) in rcomm::wait_all(sends).unwrap() {
                assert!(lens.contains(&b.len()), "send buffers come back");
                // Eager sends complete when they start (no request), the others later: the
                // status says the same either way.
                let i = lens.iter().position(|&l| l == b.len()).unwrap();
                assert_eq!(
                    (st.source, st.tag, st.bytes),
                    (self.r, 100 + i as i32, b.len()),
                    "send status"
                );
            }
        }
        // Scoped requests borrow; the scope waits for what is not waited for explicitly.
        let out: Vec<Vec<u8>> = (0..4)
            .map(|i| pattern(self.r, right, 11, i, 1000 * i + 1))
            .collect();
        let mut inb: Vec<Vec<u8>> = (0..4).map(|i| vec![0u8; 1000 * i + 1]).collect();
        self.w.scope(|s| {
            let mut rs = Vec::new();
            for (i, b) in inb.iter_mut().enumerate() {
                rs.push(s.irecv(b, left, Tag(200 + i as i32)).unwrap());
            }
            for (i, b) in out.iter().enumerate() {
                let r = s.isend(b, right, Tag(200 + i as i32)).unwrap();
                if i == 0 {
                    let st = r.wait().unwrap();
                    assert_eq!(
                        (st.source, st.tag, st.bytes),
                        (self.r, 200, 1),
                        "scoped send"
                    );
                }
            }
            rs.pop().unwrap().wait().unwrap();
        });
        for (i, b) in inb.iter().enumerate() {
            check(b, &pattern(left, self.r, 11, i, 1000 * i + 1), "scoped");
        }
        // Dropping an unmatched receive cancels it: the message goes to the next receive.
        let before = self.w.irecv(vec![0u8; 8], left, Tag(300)).unwrap();
        drop(before);
        self.barrier(); // nobody sends before every rank has dropped its receive
        self.w
            .send(&pattern(self.r, right, 12, 0, 8), right, Tag(300))
            .unwrap();
        let mut b = [0u8; 8];
        self.w.recv(&mut b, left, Tag(300)).unwrap();
        check(&b, &pattern(left, self.r, 12, 0, 8), "after cancel");
    }

    /// Raw requests on lent memory (`isend_raw`, `irecv_raw`): the data lands in the lent
    /// buffer itself, eager and rendezvous, standard and synchronous; truncation is the
    /// error and writes nothing past the buffer; an unmatched receive cancels; a dropped
    /// (freed) send still delivers.
    fn raw(&self) {
        use rcomm::RawSendMode::{Standard, Sync};
        let right = (self.r + 1) % self.n;
        let left = (self.r + self.n - 1) % self.n;
        let lens = [0usize, 1, 100, 20_000, 300_000];
        for (k, mode) in [Standard, Sync].into_iter().enumerate() {
            let mut inb: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0u8; l]).collect();
            let out: Vec<Vec<u8>> = (0..lens.len())
                .map(|i| pattern(self.r, right, 20 + k as u32, i, lens[i]))
                .collect();
            // SAFETY: the buffers outlive the requests, which are all waited for below.
            let recvs: Vec<_> = inb
                .iter_mut()
                .enumerate()
                .map(|(i, b)| unsafe {
                    self.w
                        .irecv_raw(b.as_mut_ptr(), b.len(), left, Tag(400 + i as i32))
                        .unwrap()
                })
                .collect();
            let sends: Vec<_> = out
                .iter()
                .enumerate()
                .rev()
                .map(|(i, b)| unsafe {
                    self.w
                        .isend_raw(b.as_ptr(), b.len(), right, Tag(400 + i as i32), mode)
                        .unwrap()
                })
                .collect();
            for (i, r) in recvs.into_iter().enumerate() {
                let st = r.wait().unwrap();
                assert_eq!(
                    (st.source, st.tag, st.bytes),
                    (left, 400 + i as i32, lens[i])
                );
            }
            for s in sends {
                s.wait().unwrap();
            }
            for (i, b) in inb.iter().enumerate() {
                check(b, &pattern(left, self.r, 20 + k as u32, i, lens[i]), "raw");
            }
        }
        // Truncation, eager and rendezvous: an error, and the guard bytes past the lent length
        // stay as they were.
        for (i, l) in [64usize, 200_000].into_iter().enumerate() {
            let mut b = vec![0xA5u8; 40];
            let r = unsafe {
                self.w
                    .irecv_raw(b.as_mut_ptr(), 32, left, Tag(450 + i as i32))
            }
            .unwrap();
            let data = pattern(self.r, right, 22, i, l);
            let s = unsafe {
                self.w
                    .isend_raw(data.as_ptr(), l, right, Tag(450 + i as i32), Standard)
            }
            .unwrap();
            match r.wait() {
                Err(CommError::Truncated {
                    buffer: 32,
                    message,
                }) if message == l => {}
                other => panic!("raw truncation of {l} bytes: {other:?}"),
            }
            assert!(
                b[32..].iter().all(|&x| x == 0xA5),
                "written past the lent length"
            );
            s.wait().unwrap();
        }
        // A receive cancelled before any message matched it leaves its buffer alone.
        let mut b = [7u8; 8];
        let mut r = unsafe { self.w.irecv_raw(b.as_mut_ptr(), 8, left, Tag(460)) }.unwrap();
        assert!(r.try_cancel().unwrap() && r.is_cancelled());
        assert_eq!(r.wait().unwrap().bytes, 0);
        assert_eq!(b, [7u8; 8]);
        // A send dropped while pending (MPI_Request_free) still arrives.
        let data = pattern(self.r, right, 23, 0, 300_000);
        drop(
            unsafe {
                self.w
                    .isend_raw(data.as_ptr(), data.len(), right, Tag(461), Standard)
            }
            .unwrap(),
        );
        let mut got = vec![0u8; 300_000];
        self.w.recv(&mut got, left, Tag(461)).unwrap();
        check(
            &got,
            &pattern(left, self.r, 23, 0, 300_000),
            "freed raw send",
        );
        // The sender's buffer must outlive the freed send: the barrier says every rank has it.
        self.barrier();
        drop(data);
    }

    fn bad_input(&self) {
        assert!(matches!(
            self.w.send(&[1u8], self.n, Tag(0)),
            Err(CommError::InvalidRank { .. })
        ));
        assert!(matches!(
            self.w.send(&[1u8], 0, Tag(-5)),
            Err(CommError::InvalidTag { tag: -5 })
        ));
        assert!(matches!(
            self.w.send(&[1u8], 0, Tag::Any),
            Err(CommError::InvalidTag { .. })
        ));
        let mut b = [0u8; 1];
        assert!(matches!(
            self.w.recv(&mut b, self.n + 3, Tag(0)),
            Err(CommError::InvalidRank { .. })
        ));
        // A message of 5 bytes into u32 elements is not a whole number of elements.
        self.w.send(&[1u8, 2, 3, 4, 5], self.r, Tag(1)).unwrap();
        let mut w = [0u32; 4];
        assert!(matches!(
            self.w.recv(&mut w, self.r, Tag(1)),
            Err(CommError::Size { bytes: 5, elem: 4 })
        ));
        // Typed messages round-trip.
        let f: Vec<f64> = (0..1000).map(|i| i as f64 * 0.5 + self.r as f64).collect();
        let mut g = vec![0f64; 1000];
        let st = self
            .w
            .sendrecv(&f, self.r, Tag(2), &mut g, self.r, Tag(2))
            .unwrap();
        assert_eq!((st.count::<f64>(), &g), (1000, &f));
    }

    fn big(&self) {
        let len = (2usize << 30) + 1;
        // Period 251 (prime): a block moved by any power-of-two offset shows.
        let period: Vec<u8> = (0..251 * 4096).map(|i| (i % 251) as u8).collect();
        if self.r == 1 {
            let mut v = vec![0u8; len];
            for c in v.chunks_mut(period.len()) {
                c.copy_from_slice(&period[..c.len()]);
            }
            self.w.send(&v, 0, Tag(1)).unwrap();
        } else if self.r == 0 {
            let mut v = vec![0u8; len];
            let st = self.w.recv(&mut v, 1, Tag(1)).unwrap();
            assert_eq!(st.bytes, len);
            assert!(
                v.chunks(period.len()).all(|c| c == &period[..c.len()]),
                "2 GiB + 1 message corrupt"
            );
        }
    }
}

/// Occurrence of each entry among the equal entries before it.
fn occ_of(v: &[u32]) -> Vec<usize> {
    (0..v.len())
        .map(|k| v[..k].iter().filter(|&&x| x == v[k]).count())
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let world = rcomm::init().expect("init");
    let t = T {
        w: &world,
        r: world.rank(),
        n: world.size(),
    };
    match args.get(1).map(String::as_str) {
        Some("table") => {
            let (shm_eager, tcp_eager) = (16 << 10, 64 << 10);
            let sizes = [
                0usize,
                1,
                7,
                shm_eager - 1,
                shm_eager,
                shm_eager + 1,
                tcp_eager - 1,
                tcp_eager,
                tcp_eager + 1,
                (64 << 10) + 3,
                (1 << 20) + 3,
            ];
            t.sizes(&sizes, 1);
            t.ok("sizes");
            let big_sizes: &[usize] = if t.n <= 4 { &[64 << 20] } else { &[] };
            t.sizes(big_sizes, 13);
            t.ok("64MiB");
            t.wildcards();
            t.ok("wildcards");
            t.ordering();
            t.ok("ordering");
            t.direct();
            t.ok("direct");
            t.irecv_direct();
            t.ok("irecv-direct");
            t.truncation();
            t.ok("truncation");
            t.probes();
            t.ok("probes");
            t.nonblocking();
            t.ok("nonblocking");
            t.raw();
            t.ok("raw");
            t.modes();
            t.ok("modes");
            t.send_modes();
            t.ok("send-modes");
            t.send_cancel();
            t.cart();
            t.ok("cart");
            t.graph();
            t.ok("graph");
            t.bad_input();
            t.ok("bad-input");
            if args.get(2).is_some_and(|a| a == "big") {
                t.big();
                t.ok("2GiB+1");
            }
            let c = world.transport_counters();
            let routes: Vec<&str> = (0..t.n).map(|p| world.transport_to(p).unwrap()).collect();
            println!(
                "counters rank {} shm_sent {} shm_cma {} shm_direct {} tcp_sent {} routes {}",
                t.r,
                c.get("shm").bytes_sent,
                c.get("shm").bytes_cma,
                c.get("shm").msgs_direct,
                c.get("tcp").bytes_sent,
                routes.join(",")
            );
        }
        Some("tcp-wait") => {
            // Run with more ranks than CPUs over TCP: rank 0's receive waits 30 ms for rank 1,
            // and the empty passes over its sockets before it sleeps are what it reports.
            // Nobody else sends to rank 0 meanwhile (each message would wake it): the others
            // wait for rank 0's word that it is done.
            t.w.barrier().unwrap();
            let mut b = [0u8; 8];
            if t.r == 0 {
                let before = world.transport_counters().get("tcp").empty_polls;
                world.recv(&mut b, 1, Tag(5)).unwrap();
                check(&b, &pattern(1, 0, 21, 0, 8), "tcp-wait");
                let after = world.transport_counters().get("tcp").empty_polls;
                println!("empty_polls {}", after - before);
                for p in 1..t.n {
                    world.send(&[1u8], p, Tag(6)).unwrap();
                }
            } else {
                if t.r == 1 {
                    std::thread::sleep(Duration::from_millis(30));
                    world.send(&pattern(1, 0, 21, 0, 8), 0, Tag(5)).unwrap();
                }
                world.recv(&mut [0u8; 1], 0, Tag(6)).unwrap();
            }
        }
        Some("gone") => {
            // Rank 1 sends three messages and leaves normally; rank 0 waits until it is gone,
            // still receives all three, and only a fourth receive fails.
            if t.r == 1 {
                for i in 0..3 {
                    world
                        .send(&pattern(1, 0, 20, i, 100 + i), 0, Tag(i as i32))
                        .unwrap();
                }
            } else if t.r == 0 {
                std::thread::sleep(Duration::from_millis(500));
                let _ = world.failed_ranks();
                for i in (0..3).rev() {
                    let mut b = vec![0u8; 100 + i];
                    world.recv(&mut b, Source::Any, Tag(i as i32)).unwrap();
                    check(
                        &b,
                        &pattern(1, 0, 20, i, 100 + i),
                        "message of a rank that left",
                    );
                }
                let t0 = Instant::now();
                match world.recv(&mut [0u8; 4], 1, Tag::Any) {
                    Err(CommError::PeerLost { rank: 1, .. }) => println!(
                        "rank 0 got all messages, then PeerLost after {} ms",
                        t0.elapsed().as_millis()
                    ),
                    other => panic!("expected PeerLost, got {other:?}"),
                }
            }
        }
        Some("die") => {
            if t.r == 1 {
                std::thread::sleep(Duration::from_millis(300));
                // SAFETY: kill(2) on our own pid with a valid signal number.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
            let t0 = Instant::now();
            let mut b = [0u8; 8];
            let res = if t.r == 2 {
                world.recv(&mut b, Source::Any, Tag(0))
            } else {
                world.recv(&mut b, 1, Tag(0))
            };
            match res {
                Err(CommError::PeerLost { rank: 1, op, .. }) => {
                    println!(
                        "rank {} got PeerLost(rank 1) in {op} after {} ms",
                        t.r,
                        t0.elapsed().as_millis()
                    )
                }
                other => println!("rank {} got {other:?}", t.r),
            }
            // Survivors leave together, so no one's exit reaches another's wildcard receive.
            let survivors: Vec<u32> = (0..t.n).filter(|&r| r != 1).collect();
            if t.r == 0 {
                for &p in &survivors[1..] {
                    world.recv(&mut b, p, Tag(999)).unwrap();
                }
                for &p in &survivors[1..] {
                    world.send(&b, p, Tag(998)).unwrap();
                }
            } else {
                world.send(&b, 0, Tag(999)).unwrap();
                world.recv(&mut b, 0, Tag(998)).unwrap();
            }
        }
        m => panic!("unknown mode {m:?}"),
    }
}
