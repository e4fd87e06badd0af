//! Rank program: derived datatypes between ranks. `rt_dtype table` runs every case on every
//! rank and prints `ok <case>` (rank 0). Each rank talks to its ring neighbours; every value
//! depends on (sender, case, index, iteration), so a crossed, stale or misplaced element fails.
use rcomm::datatype::{Datatype, Order};
use rcomm::{CommError, Communicator, Tag};

fn val(src: u32, case: u32, i: usize, it: usize) -> f64 {
    (src as f64) * 1e6 + (case as f64) * 1e4 + (it as f64) * 1e3 + i as f64
}

struct T<'a> {
    w: &'a Communicator,
    r: u32,
    n: u32,
}

impl T<'_> {
    fn right(&self) -> u32 {
        (self.r + 1) % self.n
    }
    fn left(&self) -> u32 {
        (self.r + self.n - 1) % self.n
    }
    fn ok(&self, case: &str) {
        self.w.barrier().unwrap();
        if self.r == 0 {
            println!("ok {case}");
        }
    }

    /// A column of a row-major matrix (vector type) arrives as a contiguous row, and a row is
    /// received into a column: different type maps with one signature.
    fn column(&self) {
        let f = Datatype::of::<f64>();
        let (rows, cols) = (37usize, 11usize);
        for it in 0..3 {
            let c = (it * 4 + self.r as usize) % cols;
            let m: Vec<f64> = (0..rows * cols).map(|i| val(self.r, 1, i, it)).collect();
            let colt = Datatype::vector(rows, 1, cols as isize, &f).unwrap();
            let mut row = vec![0f64; rows];
            self.w
                .sendrecv_dt(
                    &m[c..],
                    1,
                    &colt,
                    self.right(),
                    Tag(1),
                    &mut row,
                    rows,
                    &f,
                    self.left(),
                    Tag(1),
                )
                .unwrap();
            let lc = (it * 4 + self.left() as usize) % cols;
            let want: Vec<f64> = (0..rows)
                .map(|k| val(self.left(), 1, k * cols + lc, it))
                .collect();
            assert_eq!(row, want, "column {lc} of rank {}'s matrix", self.left());

            // Back the other way: a row into column `c` of a fresh matrix.
            let mut into = vec![-1f64; rows * cols];
            let out: Vec<f64> = (0..rows).map(|k| val(self.r, 2, k, it)).collect();
            let st = self
                .w
                .sendrecv_dt(
                    &out,
                    rows,
                    &f,
                    self.left(),
                    Tag(2),
                    &mut into[c..],
                    1,
                    &colt,
                    self.right(),
                    Tag(2),
                )
                .unwrap();
            assert_eq!(st.bytes, rows * 8);
            for (i, v) in into.iter().enumerate() {
                let want = if i % cols == c {
                    val(self.right(), 2, i / cols, it)
                } else {
                    -1.0
                };
                assert_eq!(*v, want, "element {i} after receiving a column");
            }
        }
    }

    /// `sendrecv_dt_within` on contiguous layouts: disjoint runs go straight from memory in
    /// either order; overlapping ones send what was there before the receive.
    fn within_contiguous(&self) {
        let f = Datatype::of::<f64>();
        for (soff, roff) in [(0usize, 40usize), (40, 0), (10, 20)] {
            let mut buf: Vec<f64> = (0..80).map(|i| val(self.r, 4, i, soff)).collect();
            let before = buf.clone();
            self.w
                .sendrecv_dt_within(
                    &mut buf,
                    (soff, 30, &f),
                    self.right(),
                    Tag(13),
                    (roff, 30, &f),
                    self.left(),
                    Tag(13),
                )
                .unwrap();
            for (i, v) in buf.iter().enumerate() {
                let want = if (roff..roff + 30).contains(&i) {
                    val(self.left(), 4, i - roff + soff, soff)
                } else {
                    before[i]
                };
                assert_eq!(*v, want, "element {i}, send at {soff}, receive at {roff}");
            }
        }
        let mut buf = [0f64; 4];
        let e = self
            .w
            .sendrecv_dt_within(
                &mut buf,
                (3, 2, &f),
                self.right(),
                Tag(14),
                (0, 1, &f),
                self.left(),
                Tag(14),
            )
            .unwrap_err();
        assert!(matches!(e, CommError::InvalidArg(_)), "{e}");
    }

    /// An array of C structs { u8 a; f64 b; u16 c; } (24-byte extent) by a struct datatype,
    /// received as packed triples of a different layout (u8, u16 then f64 reordered is not
    /// the same signature, so the receiver uses the same field order, packed tight).
    fn structs(&self) {
        let st = Datatype::structured(
            &[1, 1, 1],
            &[0, 8, 16],
            &[
                Datatype::of::<u8>(),
                Datatype::of::<f64>(),
                Datatype::of::<u16>(),
            ],
        )
        .unwrap()
        .resized(0, 24)
        .unwrap();
        let tight = Datatype::structured(
            &[1, 1, 1],
            &[0, 1, 9],
            &[
                Datatype::of::<u8>(),
                Datatype::of::<f64>(),
                Datatype::of::<u16>(),
            ],
        )
        .unwrap();
        assert_eq!((st.size(), tight.size(), tight.extent()), (11, 11, 11));
        let k = 17usize;
        let mut mem = vec![0xABu8; 24 * k];
        for i in 0..k {
            mem[24 * i] = (self.r as usize + i) as u8;
            mem[24 * i + 8..24 * i + 16].copy_from_slice(&val(self.r, 3, i, 0).to_ne_bytes());
            mem[24 * i + 16..24 * i + 18]
                .copy_from_slice(&((i * 3 + self.r as usize) as u16).to_ne_bytes());
        }
        let mut got = vec![0u8; 11 * k];
        self.w
            .sendrecv_dt(
                &mem,
                k,
                &st,
                self.right(),
                Tag(3),
                &mut got,
                k,
                &tight,
                self.left(),
                Tag(3),
            )
            .unwrap();
        let l = self.left() as usize;
        for i in 0..k {
            let g = &got[11 * i..11 * i + 11];
            assert_eq!(g[0], (l + i) as u8);
            assert_eq!(
                f64::from_ne_bytes(g[1..9].try_into().unwrap()),
                val(self.left(), 3, i, 0)
            );
            assert_eq!(
                u16::from_ne_bytes(g[9..11].try_into().unwrap()),
                (i * 3 + l) as u16
            );
        }
        // And back into the padded layout: padding bytes stay untouched.
        let mut back = vec![0x55u8; 24 * k];
        self.w
            .sendrecv_dt(
                &got,
                k,
                &tight,
                self.left(),
                Tag(4),
                &mut back,
                k,
                &st,
                self.right(),
                Tag(4),
            )
            .unwrap();
        for i in 0..k {
            let (a, b) = (&back[24 * i..24 * i + 24], &mem[24 * i..24 * i + 24]);
            assert_eq!(a[0], b[0]);
            assert_eq!(a[8..18], b[8..18]);
            assert!(
                a[1..8].iter().chain(&a[18..]).all(|&x| x == 0x55),
                "padding written"
            );
        }
    }

    /// A 2D halo exchange: each rank holds a (ny + 2) x (nx + 2) block with ghost cells and
    /// trades its first and last interior columns (vector types) and rows (subarrays) with its
    /// ring neighbours.
    fn halo(&self) {
        let (ny, nx) = (9usize, 6usize);
        let w = nx + 2;
        let f = Datatype::of::<f64>();
        let col = Datatype::vector(ny, 1, w as isize, &f).unwrap();
        let row = Datatype::subarray(&[ny + 2, w], &[1, nx], &[0, 1], Order::RowMajor, &f).unwrap();
        for it in 0..4 {
            let g: Vec<f64> = (0..(ny + 2) * w)
                .map(|i| {
                    let (y, x) = (i / w, i % w);
                    if (1..=ny).contains(&y) && (1..=nx).contains(&x) {
                        val(self.r, 5, i, it)
                    } else {
                        -1.0
                    }
                })
                .collect();
            let mut h = g.clone();
            // East: send my last interior column right, receive my west ghost from the left —
            // both in the one array (sendrecv_dt_within).
            let (a, b) = (w + nx, w);
            let src = g.clone();
            self.w
                .sendrecv_dt_within(
                    &mut h,
                    (a, 1, &col),
                    self.right(),
                    Tag(5),
                    (b, 1, &col),
                    self.left(),
                    Tag(5),
                )
                .unwrap();
            // West: first interior column left, east ghost from the right.
            self.w
                .sendrecv_dt_within(
                    &mut h,
                    (w + 1, 1, &col),
                    self.left(),
                    Tag(6),
                    (w + nx + 1, 1, &col),
                    self.right(),
                    Tag(6),
                )
                .unwrap();
            // North/south rows as subarrays (row 1 -> left's row ny + 1, row ny -> right's row 0).
            let top =
                Datatype::subarray(&[ny + 2, w], &[1, nx], &[1, 1], Order::RowMajor, &f).unwrap();
            let bottom_ghost =
                Datatype::subarray(&[ny + 2, w], &[1, nx], &[ny + 1, 1], Order::RowMajor, &f)
                    .unwrap();
            self.w
                .sendrecv_dt(
                    &src,
                    1,
                    &top,
                    self.left(),
                    Tag(7),
                    &mut h,
                    1,
                    &bottom_ghost,
                    self.right(),
                    Tag(7),
                )
                .unwrap();
            let bottom =
                Datatype::subarray(&[ny + 2, w], &[1, nx], &[ny, 1], Order::RowMajor, &f).unwrap();
            self.w
                .sendrecv_dt(
                    &src,
                    1,
                    &bottom,
                    self.right(),
                    Tag(8),
                    &mut h,
                    1,
                    &row,
                    self.left(),
                    Tag(8),
                )
                .unwrap();
            for (i, v) in h.iter().enumerate() {
                let (y, x) = (i / w, i % w);
                let interior = |y: usize, x: usize| (1..=ny).contains(&y) && (1..=nx).contains(&x);
                let want = if interior(y, x) {
                    g[i]
                } else if x == 0 && interior(y, 1) {
                    val(self.left(), 5, y * w + nx, it)
                } else if x == nx + 1 && interior(y, nx) {
                    val(self.right(), 5, y * w + 1, it)
                } else if y == ny + 1 && interior(ny, x) {
                    val(self.right(), 5, w + x, it)
                } else if y == 0 && interior(1, x) {
                    val(self.left(), 5, ny * w + x, it)
                } else {
                    -1.0
                };
                assert_eq!(*v, want, "halo cell ({y}, {x}) iteration {it}");
            }
        }
    }

    /// A message of fewer elements than the receive count fills the first ones; one of more is
    /// consumed and reported as truncated, and the next message is intact.
    fn short_and_truncated(&self) {
        let f = Datatype::of::<f64>();
        let col = Datatype::vector(4, 1, 3, &f).unwrap();
        let m: Vec<f64> = (0..36).map(|i| val(self.r, 6, i, 0)).collect();
        // Two columns sent (extent 10 elements), three posted.
        let mut into = vec![-1f64; 36];
        let st = self
            .w
            .sendrecv_dt(
                &m,
                2,
                &col,
                self.right(),
                Tag(9),
                &mut into,
                3,
                &col,
                self.left(),
                Tag(9),
            )
            .unwrap();
        assert_eq!(col.count_in(st.bytes), Some(2));
        for (i, v) in into.iter().enumerate() {
            let hit = i < 20 && (i % 10) % 3 == 0 && i % 10 < 10;
            let want = if hit { val(self.left(), 6, i, 0) } else { -1.0 };
            assert_eq!(*v, want, "element {i} of a short receive");
        }
        // Three sent, two posted: truncated, then the next message arrives whole.
        let res = self.w.sendrecv_dt(
            &m,
            3,
            &col,
            self.right(),
            Tag(10),
            &mut into,
            2,
            &col,
            self.left(),
            Tag(10),
        );
        match res {
            Err(CommError::Truncated {
                buffer: 64,
                message: 96,
            }) => {}
            other => panic!("expected a truncation, got {other:?}"),
        }
        let mut next = [0f64; 2];
        self.w
            .sendrecv(
                &[val(self.r, 7, 0, 0), 1.5],
                self.right(),
                Tag(11),
                &mut next,
                self.left(),
                Tag(11),
            )
            .unwrap();
        assert_eq!(next, [val(self.left(), 7, 0, 0), 1.5]);
    }

    /// Non-blocking: a column sent by `isend_dt` (the buffer reused at once) into a column
    /// received by `irecv_dt`; a dropped unmatched `irecv_dt` leaves its buffer untouched.
    fn nonblocking(&self) {
        let f = Datatype::of::<f64>();
        let col = Datatype::vector(5, 1, 4, &f).unwrap();
        let mut into = [-1f64; 20];
        {
            let mut unused = [-2f64; 20];
            let r = self
                .w
                .irecv_dt(&mut unused, 1, &col, self.left(), Tag(15))
                .unwrap();
            drop(r);
            assert!(unused.iter().all(|&v| v == -2.0));
        }
        let mut r = self
            .w
            .irecv_dt(&mut into[1..], 1, &col, self.left(), Tag(16))
            .unwrap();
        let mut m: Vec<f64> = (0..20).map(|i| val(self.r, 9, i, 0)).collect();
        let s = self
            .w
            .isend_dt(&m[2..], 1, &col, self.right(), Tag(16))
            .unwrap();
        m.fill(0.0);
        s.wait().unwrap();
        let _ = r.test();
        let st = r.wait().unwrap();
        assert_eq!(st.bytes, 40);
        for (i, v) in into.iter().enumerate() {
            let want = if i % 4 == 1 {
                val(self.left(), 9, i + 1, 0)
            } else {
                -1.0
            };
            assert_eq!(*v, want, "element {i} of a non-blocking column");
        }
    }

    /// Rank 0 floods rank 1 with small column sends while rank 1 starts late, so rank 1's ring
    /// fills: a send that cannot be gathered into the ring is packed and queued instead, and
    /// every message still arrives whole and in order, whether rank 1 scatters it straight out
    /// of the ring (`recv_dt`), takes it through a request (`irecv_dt`), or it was sent as
    /// plain bytes (one signature, another type map).
    fn flood(&self) {
        if self.n < 2 || self.r > 1 {
            return;
        }
        const N: usize = 2000;
        let f = Datatype::of::<f64>();
        let col = Datatype::vector(6, 1, 3, &f).unwrap();
        if self.r == 0 {
            for it in 0..N {
                let m: Vec<f64> = (0..16).map(|i| val(0, 12, i, it)).collect();
                if it % 5 == 4 {
                    let packed: Vec<f64> = (0..6).map(|k| m[3 * k]).collect();
                    self.w.send(&packed, 1, Tag(20)).unwrap();
                } else {
                    self.w.send_dt(&m, 1, &col, 1, Tag(20)).unwrap();
                }
            }
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        for it in 0..N {
            let mut into = vec![-1f64; 16];
            let st = if it % 3 == 0 {
                self.w
                    .irecv_dt(&mut into, 1, &col, 0, Tag(20))
                    .unwrap()
                    .wait()
            } else {
                self.w.recv_dt(&mut into, 1, &col, 0, Tag(20))
            }
            .unwrap();
            assert_eq!(st.bytes, 48, "message {it}");
            for (i, v) in into.iter().enumerate() {
                let want = if i % 3 == 0 { val(0, 12, i, it) } else { -1.0 };
                assert_eq!(*v, want, "element {i} of message {it}");
            }
        }
    }

    /// `bool`s and `char`s through every collective and non-blocking point-to-point, each
    /// against a sequential reference (values depend on rank and index), and an invalid
    /// element refused.
    fn bools_and_chars(&self) {
        let (r, n) = (self.r as usize, self.n as usize);
        let b = |rank: usize, i: usize| (rank * 7 + i * 3) % 5 < 2;
        let c =
            |rank: usize, i: usize| char::from_u32(0x61 + ((rank * 31 + i) % 26) as u32).unwrap();
        let wide = |rank: usize, i: usize| ['é', '\u{1F600}', 'ß', '中'][(rank + i) % 4];
        for len in [0usize, 1, 5, 1000] {
            let root = (len % n) as u32;
            let mut bb: Vec<bool> = (0..len)
                .map(|i| if r == root as usize { b(9, i) } else { false })
                .collect();
            self.w.bcast_checked(&mut bb, root).unwrap();
            assert_eq!(
                bb,
                (0..len).map(|i| b(9, i)).collect::<Vec<_>>(),
                "bcast of {len} bools"
            );
            let mut cc: Vec<char> = (0..len)
                .map(|i| if r == root as usize { wide(9, i) } else { 'x' })
                .collect();
            self.w.bcast_checked(&mut cc, root).unwrap();
            assert_eq!(
                cc,
                (0..len).map(|i| wide(9, i)).collect::<Vec<_>>(),
                "bcast of {len} chars"
            );

            let mine: Vec<char> = (0..len).map(|i| c(r, i)).collect();
            let all: Vec<char> = (0..n)
                .flat_map(|k| (0..len).map(move |i| c(k, i)))
                .collect();
            let mut got = vec!['?'; len * n];
            self.w.allgather_checked(&mine, &mut got).unwrap();
            assert_eq!(got, all, "allgather of {len} chars");
            let mut got = vec!['?'; len * n];
            let at = (n - 1) as u32;
            self.w
                .gather_checked(&mine, (r == at as usize).then_some(&mut got[..]), at)
                .unwrap();
            if r == at as usize {
                assert_eq!(got, all, "gather of {len} chars");
            }
            let from: Vec<bool> = (0..len * n).map(|i| b(11, i)).collect();
            let mut part = vec![false; len];
            self.w
                .scatter_checked((r == 0).then_some(&from[..]), &mut part, 0)
                .unwrap();
            assert_eq!(part, from[r * len..(r + 1) * len], "scatter of {len} bools");
            // Part k of rank s is b(s * n + k, i): rank r gets part r of every rank.
            let send: Vec<bool> = (0..n)
                .flat_map(|k| (0..len).map(move |i| b(r * n + k, i)))
                .collect();
            let want: Vec<bool> = (0..n)
                .flat_map(|s| (0..len).map(move |i| b(s * n + r, i)))
                .collect();
            let mut got = vec![false; len * n];
            self.w.alltoall_checked(&send, &mut got).unwrap();
            assert_eq!(got, want, "alltoall of {len} bools");

            let mine: Vec<bool> = (0..len).map(|i| b(r, i)).collect();
            for op in [rcomm::Logical::And, rcomm::Logical::Or, rcomm::Logical::Xor] {
                let want: Vec<bool> = (0..len)
                    .map(|i| logic(op, (0..n).map(|k| b(k, i))))
                    .collect();
                let mut got = mine.clone();
                self.w.allreduce_bools(&mut got, op).unwrap();
                assert_eq!(got, want, "allreduce {op:?} of {len} bools");
                let mut at_root = vec![false; len];
                let root = (n / 2) as u32;
                self.w
                    .reduce_bools(
                        &mine,
                        (r == root as usize).then_some(&mut at_root[..]),
                        op,
                        root,
                    )
                    .unwrap();
                if r == root as usize {
                    assert_eq!(at_root, want, "reduce {op:?} of {len} bools");
                }
            }
        }
        // The `v` collectives: rank k contributes (k + 1) % 3 + 1 elements.
        let counts: Vec<usize> = (0..n).map(|k| (k + 1) % 3 + 1).collect();
        let total: usize = counts.iter().sum();
        let mine: Vec<char> = (0..counts[r]).map(|i| wide(r, i)).collect();
        let all: Vec<char> = (0..n)
            .flat_map(|k| (0..counts[k]).map(move |i| wide(k, i)))
            .collect();
        let mut got = vec!['?'; total];
        self.w.allgatherv_checked(&mine, &mut got, &counts).unwrap();
        assert_eq!(got, all, "allgatherv of chars");
        let mut got = vec!['?'; total];
        self.w
            .gatherv_checked(&mine, (r == 0).then_some(&mut got[..]), &counts, 0)
            .unwrap();
        if r == 0 {
            assert_eq!(got, all, "gatherv of chars");
        }
        let from: Vec<bool> = (0..total).map(|i| b(13, i)).collect();
        let mut part = vec![false; counts[r]];
        let last = (n - 1) as u32;
        self.w
            .scatterv_checked((r == n - 1).then_some(&from[..]), &counts, &mut part, last)
            .unwrap();
        let off: usize = counts[..r].iter().sum();
        assert_eq!(part, from[off..off + counts[r]], "scatterv of bools");
        // Rank s sends (s + d) % 2 + 1 elements to rank d.
        let sc: Vec<usize> = (0..n).map(|d| (r + d) % 2 + 1).collect();
        let rc: Vec<usize> = (0..n).map(|s| (s + r) % 2 + 1).collect();
        let send: Vec<bool> = (0..n)
            .flat_map(|d| (0..sc[d]).map(move |i| b(r * n + d, i)))
            .collect();
        let want: Vec<bool> = (0..n)
            .flat_map(|s| (0..rc[s]).map(move |i| b(s * n + r, i)))
            .collect();
        let mut got = vec![false; want.len()];
        self.w.alltoallv_checked(&send, &sc, &mut got, &rc).unwrap();
        assert_eq!(got, want, "alltoallv of bools");
        // Scans: the fold over ranks 0..=r (exclusive: 0..r, and rank 0 left as it was).
        let mine: Vec<bool> = (0..7).map(|i| b(r, i)).collect();
        for op in [rcomm::Logical::And, rcomm::Logical::Or, rcomm::Logical::Xor] {
            let upto = |m: usize| -> Vec<bool> {
                (0..7).map(|i| logic(op, (0..m).map(|k| b(k, i)))).collect()
            };
            let mut got = vec![false; 7];
            self.w.scan_bools(&mine, &mut got, op).unwrap();
            assert_eq!(got, upto(r + 1), "scan {op:?}");
            let mut got = vec![true; 7];
            self.w.exscan_bools(&mine, &mut got, op).unwrap();
            let want = if r == 0 { vec![true; 7] } else { upto(r) };
            assert_eq!(got, want, "exscan {op:?}");
        }
        // Non-blocking collectives.
        let mine = if r == 0 {
            vec!['a', '中']
        } else {
            vec!['x'; 2]
        };
        let got = self.w.ibcast_checked(mine, 0).unwrap().wait().unwrap();
        assert_eq!(got, vec!['a', '中'], "ibcast of chars");
        let mine: Vec<char> = (0..3).map(|i| c(r, i)).collect();
        let all: Vec<char> = (0..n).flat_map(|k| (0..3).map(move |i| c(k, i))).collect();
        let got = self
            .w
            .iallgather_checked(mine.clone())
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(got, all, "iallgather of chars");
        let got = self.w.igather_checked(mine, 0).unwrap().wait().unwrap();
        assert_eq!(got, if r == 0 { all } else { vec![] }, "igather of chars");
        let from: Vec<bool> = (0..2 * n).map(|i| b(17, i)).collect();
        let send = (r == 0).then(|| from.clone());
        let got = self.w.iscatter_checked(send, 2, 0).unwrap().wait().unwrap();
        assert_eq!(got, from[2 * r..2 * r + 2], "iscatter of bools");
        let send: Vec<bool> = (0..n).map(|d| b(r * n + d, 0)).collect();
        let want: Vec<bool> = (0..n).map(|s| b(s * n + r, 0)).collect();
        let got = self.w.ialltoall_checked(send).unwrap().wait().unwrap();
        assert_eq!(got, want, "ialltoall of bools");
        let mine: Vec<bool> = (0..5).map(|i| b(r, i)).collect();
        let want: Vec<bool> = (0..5).map(|i| (0..n).any(|k| b(k, i))).collect();
        let or = rcomm::Logical::Or;
        let got = self
            .w
            .iallreduce_bools(mine.clone(), or)
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(got, want, "iallreduce of bools");
        let got = self.w.ireduce_bools(mine, or, 0).unwrap().wait().unwrap();
        assert_eq!(got, if r == 0 { want } else { vec![] }, "ireduce of bools");

        // Non-blocking around the ring, and a byte that is no bool refused.
        let out: Vec<char> = (0..9).map(|i| wide(r, i)).collect();
        let rq = self
            .w
            .irecv_checked::<char>(16, self.left(), Tag(30))
            .unwrap();
        let sq = self.w.isend_checked(&out, self.right(), Tag(30)).unwrap();
        sq.wait().unwrap();
        let (got, st) = rq.wait().unwrap();
        assert_eq!(st.bytes, 36);
        assert_eq!(
            got,
            (0..9)
                .map(|i| wide(self.left() as usize, i))
                .collect::<Vec<_>>()
        );
        self.w.send(&[1u8, 0, 2], self.right(), Tag(31)).unwrap();
        let mut into = [true; 3];
        let e = self
            .w
            .recv_bools(&mut into, self.left(), Tag(31))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("element 2 is the byte 2, not a bool"),
            "{e}"
        );
        assert_eq!(into, [true; 3], "left as it was");
    }

    /// A layout reaching outside the buffer is refused before anything is sent.
    fn bad_input(&self) {
        let f = Datatype::of::<f64>();
        let col = Datatype::vector(4, 1, 3, &f).unwrap();
        let small = [0f64; 9];
        let e = self
            .w
            .send_dt(&small, 1, &col, self.right(), Tag(12))
            .unwrap_err();
        assert!(e.to_string().contains("outside the 72-byte buffer"), "{e}");
        let mut small = [0f64; 9];
        let e = self
            .w
            .recv_dt(&mut small, 1, &col, self.left(), Tag(12))
            .unwrap_err();
        assert!(matches!(e, CommError::InvalidArg(_)), "{e}");
        // An exchange whose receive names a bad tag or rank is refused before its send goes
        // out (the send goes first when it can leave at once).
        let mut m = [5f64; 12];
        let refused = |e: CommError| {
            assert!(
                matches!(
                    e,
                    CommError::InvalidTag { .. } | CommError::InvalidRank { .. }
                ),
                "{e}"
            )
        };
        for (src, rtag) in [(self.left(), Tag(-5)), (99, Tag(12))] {
            let e = self
                .w
                .sendrecv_dt_within(
                    &mut m,
                    (0, 1, &col),
                    self.right(),
                    Tag(12),
                    (1, 1, &col),
                    src,
                    rtag,
                )
                .unwrap_err();
            refused(e);
            let e = self
                .w
                .sendrecv_dt(
                    &m,
                    1,
                    &col,
                    self.right(),
                    Tag(12),
                    &mut small,
                    1,
                    &f,
                    src,
                    rtag,
                )
                .unwrap_err();
            refused(e);
            let e = self
                .w
                .sendrecv(&[6f64], self.right(), Tag(12), &mut small[..1], src, rtag)
                .unwrap_err();
            refused(e);
        }
        // Nothing went out: the next message on the tag is the real one.
        let mut b = [0f64; 1];
        self.w
            .sendrecv(
                &[val(self.r, 8, 0, 0)],
                self.right(),
                Tag(12),
                &mut b,
                self.left(),
                Tag(12),
            )
            .unwrap();
        assert_eq!(b[0], val(self.left(), 8, 0, 0));
    }
}

/// The sequential reference of a logical reduction.
fn logic(op: rcomm::Logical, v: impl Iterator<Item = bool>) -> bool {
    match op {
        rcomm::Logical::And => v.fold(true, |a, x| a & x),
        rcomm::Logical::Or => v.fold(false, |a, x| a | x),
        rcomm::Logical::Xor => v.fold(false, |a, x| a ^ x),
    }
}

fn main() {
    let world = rcomm::init().expect("init");
    let t = T {
        w: &world,
        r: world.rank(),
        n: world.size(),
    };
    t.column();
    t.ok("column");
    t.structs();
    t.ok("structs");
    t.within_contiguous();
    t.ok("within-contiguous");
    t.halo();
    t.ok("halo");
    t.short_and_truncated();
    t.ok("short-and-truncated");
    t.nonblocking();
    t.ok("nonblocking");
    t.flood();
    t.ok("flood");
    t.bools_and_chars();
    t.ok("bools-and-chars");
    t.bad_input();
    t.ok("bad-input");
}
