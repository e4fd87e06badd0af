//! The simulated fabric against libibverbs' RC semantics: bytes moved, completions, statuses
//! and QP states for every operation and every failure the protocol core must survive.

use super::sim::{HcaSpec, PortSpec, SimConfig, SimFabric, SimVerbs};
use super::*;
use std::net::Ipv4Addr;

/// Builds a request from the requester node, its source buffer and the peer's buffer.
type MakeOp<'a> = &'a dyn Fn(&Node, &Buf, &Buf) -> (SendOp, Vec<Sge>);
/// What a probe saw: requester completions and QP state, responder QP state, events and
/// receive completions.
type Outcome = (
    Vec<(u64, WcStatus)>,
    QpState,
    QpState,
    Vec<AsyncEvent>,
    Vec<(u64, WcStatus)>,
);

const RW: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

/// A fabric with IB HCAs `a` (LID 1) and `b` (LID 2), and RoCE HCAs `ra` (10.0.0.1) and `rb`
/// (10.0.0.2) on another subnet.
fn fabric(cfg: SimConfig) -> SimFabric {
    let f = SimFabric::new(cfg);
    for (i, name) in ["a", "b"].into_iter().enumerate() {
        let guid = 0x1000 + i as u64;
        f.add_hca(HcaSpec {
            name: name.into(),
            node_guid: guid,
            ports: vec![PortSpec::ib(i as u16 + 1, guid, 0)],
        });
    }
    for (i, name) in ["ra", "rb"].into_iter().enumerate() {
        let guid = 0x2000 + i as u64;
        f.add_hca(HcaSpec {
            name: name.into(),
            node_guid: guid,
            ports: vec![PortSpec::roce(
                Ipv4Addr::new(10, 0, 0, i as u8 + 1),
                guid,
                1,
            )],
        });
    }
    f
}

/// One process's objects on one HCA.
struct Node {
    v: SimVerbs,
    ctx: Context,
    pd: Pd,
    scq: Cq,
    rcq: Cq,
}

impl Node {
    fn new(f: &SimFabric, dev: &str) -> Self {
        let v = f.host(&[dev]);
        let ctx = v.open(dev).unwrap();
        let pd = v.alloc_pd(ctx).unwrap();
        let scq = v.create_cq(ctx, 256).unwrap();
        let rcq = v.create_cq(ctx, 256).unwrap();
        Self {
            v,
            ctx,
            pd,
            scq,
            rcq,
        }
    }

    /// A QP in INIT on port 1 allowing remote reads and writes.
    fn qp(&self) -> Qp {
        self.qp_access(Access::REMOTE_WRITE | Access::REMOTE_READ)
    }

    fn qp_access(&self, access: Access) -> Qp {
        let cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
        };
        let qp = self
            .v
            .create_qp(
                self.pd,
                &QpInitAttr {
                    send_cq: self.scq,
                    recv_cq: self.rcq,
                    cap,
                },
            )
            .unwrap();
        let init = InitAttr {
            port: 1,
            pkey_index: 0,
            access,
        };
        self.v.modify_qp(qp, &QpModify::Init(init)).unwrap();
        qp
    }

    fn port(&self) -> PortAttr {
        self.v.query_port(self.ctx, 1).unwrap()
    }

    /// Registers a zeroed buffer of `len` bytes.
    fn buf(&self, len: usize, access: Access) -> Buf {
        let mut data = vec![0u8; len].into_boxed_slice();
        // SAFETY: `data` lives in the returned Buf, which the tests keep until the fabric is
        // done with it, and never borrow across a step.
        let mr = unsafe {
            self.v
                .reg_mr(self.pd, data.as_mut_ptr() as u64, len as u64, access)
                .unwrap()
        };
        Buf { data, mr }
    }

    fn poll(&self, cq: Cq) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        self.v.poll_cq(cq, 1024, &mut v).unwrap();
        v
    }

    fn sends(&self) -> Vec<WorkCompletion> {
        self.poll(self.scq)
    }

    fn recvs(&self) -> Vec<WorkCompletion> {
        self.poll(self.rcq)
    }

    fn state(&self, qp: Qp) -> QpState {
        self.v.qp_state(qp).unwrap()
    }

    fn events(&self) -> Vec<AsyncEvent> {
        std::iter::from_fn(|| self.v.get_async_event(self.ctx).unwrap()).collect()
    }
}

struct Buf {
    data: Box<[u8]>,
    mr: Mr,
}

impl Buf {
    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.mr.addr + off as u64,
            len: len as u32,
            lkey: self.mr.lkey,
        }
    }

    fn at(&self, off: usize) -> u64 {
        self.mr.addr + off as u64
    }

    fn fill(&mut self, seed: u8) {
        for (i, b) in self.data.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
        }
    }
}

/// Connection settings.
#[derive(Clone, Copy)]
struct Conn {
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    mtu: Mtu,
    /// Added to the PSN `b` expects (0: matching).
    psn_skew: u32,
    /// RoCE source GID index (None: auto).
    gid_index: Option<u8>,
}

const CONN: Conn = Conn {
    timeout: 14,
    retry_cnt: 7,
    rnr_retry: 7,
    min_rnr_timer: 1,
    mtu: Mtu::M1024,
    psn_skew: 0,
    gid_index: None,
};

/// The address of `to`'s port as `from` names it: LID on IB, GID (auto index) on RoCE.
fn ah(from: &Node, to: &Node, c: Conn) -> AhAttr {
    let p = from.port();
    let grh = (p.link_layer == LinkLayer::Ethernet).then(|| {
        let table = |n: &Node| -> Vec<GidEntry> {
            (0..n.port().gid_tbl_len)
                .filter_map(|i| n.v.query_gid(n.ctx, 1, i).ok())
                .collect()
        };
        let mine = c
            .gid_index
            .unwrap_or_else(|| gid_index_auto(LinkLayer::Ethernet, &table(from)).unwrap() as u8);
        let theirs = gid_index_auto(LinkLayer::Ethernet, &table(to)).unwrap();
        Grh {
            dgid: to.v.query_gid(to.ctx, 1, theirs).unwrap().gid,
            sgid_index: mine,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    });
    AhAttr {
        dlid: to.port().lid,
        sl: 0,
        port: 1,
        grh,
    }
}

/// Brings `qa` on `a` and `qb` on `b` to RTS, connected to each other.
fn connect(a: &Node, qa: Qp, b: &Node, qb: Qp, c: Conn) {
    let (psn_a, psn_b) = (0x100, 0x2000);
    let rtr = |n: &Node, q: Qp, peer: &Node, pq: Qp, rq_psn: u32| {
        let attr = RtrAttr {
            path_mtu: c.mtu,
            dest_qpn: pq.qpn,
            rq_psn,
            max_dest_rd_atomic: 16,
            min_rnr_timer: c.min_rnr_timer,
            ah: ah(n, peer, c),
        };
        n.v.modify_qp(q, &QpModify::Rtr(attr)).unwrap();
    };
    rtr(a, qa, b, qb, psn_b);
    rtr(b, qb, a, qa, (psn_a + c.psn_skew) & 0xff_ffff);
    for (n, q, sq_psn) in [(a, qa, psn_a), (b, qb, psn_b)] {
        let attr = RtsAttr {
            sq_psn,
            timeout: c.timeout,
            retry_cnt: c.retry_cnt,
            rnr_retry: c.rnr_retry,
            max_rd_atomic: 16,
        };
        n.v.modify_qp(q, &QpModify::Rts(attr)).unwrap();
    }
}

/// Nodes on `a` and `b` with one connected QP pair.
fn pair(f: &SimFabric, c: Conn) -> (Node, Node, Qp, Qp) {
    let (a, b) = (Node::new(f, "a"), Node::new(f, "b"));
    let (qa, qb) = (a.qp(), b.qp());
    connect(&a, qa, &b, qb, c);
    (a, b, qa, qb)
}

fn wr(wr_id: u64, op: SendOp, sg: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id,
        op,
        sg,
        signaled: true,
    }
}

fn write(b: &Buf, off: usize, rkey: u32) -> SendOp {
    SendOp::RdmaWrite {
        remote_addr: b.at(off),
        rkey,
    }
}

fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

#[test]
fn write_read_send_and_write_with_imm_move_real_bytes() {
    let f = fabric(SimConfig::default());
    let (a, b, qa, qb) = pair(&f, CONN);
    let mut src = a.buf(8192, RW);
    src.fill(1);
    let dst = b.buf(8192, RW);
    // A gathered WRITE (two entries, 3000 bytes: three 1024-byte packets), then an unsignaled
    // one, then a READ of what was written back into the source's second half.
    let sg = [src.sge(0, 1000), src.sge(2000, 2000)];
    let sg2 = [src.sge(100, 10)];
    let back = [src.sge(4096, 3000)];
    let mut unsig = wr(2, write(&dst, 5000, dst.mr.rkey), &sg2);
    unsig.signaled = false;
    a.v.post_send(
        qa,
        &[
            wr(1, write(&dst, 0, dst.mr.rkey), &sg),
            unsig,
            wr(
                3,
                SendOp::RdmaRead {
                    remote_addr: dst.at(0),
                    rkey: dst.mr.rkey,
                },
                &back,
            ),
        ],
    )
    .unwrap();
    assert_eq!(f.run(100), 3, "one request per QP per step");
    let wcs = a.sends();
    assert_eq!(
        statuses(&wcs),
        [(1, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert_eq!(
        (wcs[0].opcode, wcs[1].opcode, wcs[1].byte_len),
        (WcOpcode::RdmaWrite, WcOpcode::RdmaRead, 3000)
    );
    assert_eq!(&dst.data[..1000], &src.data[..1000]);
    assert_eq!(&dst.data[1000..3000], &src.data[2000..4000]);
    assert_eq!(&dst.data[5000..5010], &src.data[100..110]);
    assert_eq!(dst.data[3000], 0, "nothing past the message");
    assert_eq!(&src.data[4096..5096], &src.data[..1000]);
    assert_eq!(&src.data[5096..7096], &src.data[2000..4000]);
    assert!(
        b.sends().is_empty() && b.recvs().is_empty(),
        "RDMA consumes no receive"
    );

    // SEND scatters into the receive's two entries; WRITE WITH IMM (also zero-length) takes
    // one receive each and reports the immediate.
    let rs = [dst.sge(6000, 100), dst.sge(7000, 900)];
    b.v.post_recv(
        qb,
        &[
            RecvWr { wr_id: 10, sg: &rs },
            RecvWr { wr_id: 11, sg: &[] },
            RecvWr { wr_id: 12, sg: &[] },
        ],
    )
    .unwrap();
    let s1 = [src.sge(0, 300)];
    let s2 = [src.sge(300, 2500)];
    let imm = |off, imm| SendOp::RdmaWriteImm {
        remote_addr: dst.at(off),
        rkey: dst.mr.rkey,
        imm,
    };
    a.v.post_send(
        qa,
        &[
            wr(4, SendOp::Send, &s1),
            wr(5, imm(0, 0xabcd), &s2),
            wr(6, imm(0, 7), &[]),
        ],
    )
    .unwrap();
    f.run(100);
    assert_eq!(&dst.data[6000..6100], &src.data[..100]);
    assert_eq!(&dst.data[7000..7200], &src.data[100..300]);
    assert_eq!(&dst.data[..2500], &src.data[300..2800]);
    let r = b.recvs();
    let got: Vec<_> = r
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data))
        .collect();
    assert_eq!(
        got,
        [
            (10, WcStatus::Success, WcOpcode::Recv, 300, None),
            (
                11,
                WcStatus::Success,
                WcOpcode::RecvRdmaWithImm,
                2500,
                Some(0xabcd)
            ),
            (12, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 0, Some(7)),
        ]
    );
    assert_eq!(r[0].qp_num, qb.qpn);
    let s = a.sends();
    assert_eq!(
        s.iter().map(|w| (w.wr_id, w.opcode)).collect::<Vec<_>>(),
        [
            (4, WcOpcode::Send),
            (5, WcOpcode::RdmaWrite),
            (6, WcOpcode::RdmaWrite)
        ]
    );
    assert_eq!((a.state(qa), b.state(qb)), (QpState::Rts, QpState::Rts));
}

#[test]
fn the_qp_state_machine_refuses_skipped_states_and_bad_attributes() {
    let f = fabric(SimConfig::default());
    let (a, b) = (Node::new(&f, "a"), Node::new(&f, "b"));
    let qa =
        a.v.create_qp(
            a.pd,
            &QpInitAttr {
                send_cq: a.scq,
                recv_cq: a.rcq,
                cap: QpCap {
                    max_send_wr: 2,
                    max_recv_wr: 2,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                },
            },
        )
        .unwrap();
    assert_eq!(a.state(qa), QpState::Reset);
    let e =
        a.v.post_recv(qa, &[RecvWr { wr_id: 1, sg: &[] }])
            .unwrap_err();
    assert_eq!(e.bad_wr, 0);
    assert!(
        matches!(
            e.error,
            VerbsError::QpState {
                state: QpState::Reset,
                ..
            }
        ),
        "{e}"
    );
    let rts = RtsAttr {
        sq_psn: 0,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
    };
    assert!(matches!(
        a.v.modify_qp(qa, &QpModify::Rts(rts)),
        Err(VerbsError::QpState { .. })
    ));
    let init = InitAttr {
        port: 1,
        pkey_index: 0,
        access: Access::REMOTE_WRITE,
    };
    assert!(
        a.v.modify_qp(qa, &QpModify::Init(InitAttr { port: 2, ..init }))
            .is_err()
    );
    a.v.modify_qp(qa, &QpModify::Init(init)).unwrap();
    assert!(
        a.v.modify_qp(qa, &QpModify::Init(init)).is_err(),
        "INIT twice"
    );
    // Receives may be posted from INIT; sends only from RTS.
    a.v.post_recv(qa, &[RecvWr { wr_id: 1, sg: &[] }]).unwrap();
    let e = a.v.post_send(qa, &[wr(1, SendOp::Send, &[])]).unwrap_err();
    assert!(
        matches!(
            e.error,
            VerbsError::QpState {
                state: QpState::Init,
                ..
            }
        ),
        "{e}"
    );
    let qb = b.qp();
    let good = RtrAttr {
        path_mtu: Mtu::M4096,
        dest_qpn: qb.qpn,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
        ah: ah(&a, &b, CONN),
    };
    for bad in [
        RtrAttr {
            dest_qpn: 1 << 24,
            ..good
        },
        RtrAttr {
            min_rnr_timer: 32,
            ..good
        },
        RtrAttr {
            ah: AhAttr { sl: 16, ..good.ah },
            ..good
        },
        RtrAttr {
            ah: AhAttr { port: 2, ..good.ah },
            ..good
        },
    ] {
        assert!(
            matches!(
                a.v.modify_qp(qa, &QpModify::Rtr(bad)),
                Err(VerbsError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
    a.v.modify_qp(qa, &QpModify::Rtr(good)).unwrap();
    assert_eq!(a.state(qa), QpState::Rtr);
    for bad in [
        RtsAttr {
            retry_cnt: 8,
            ..rts
        },
        RtsAttr {
            rnr_retry: 8,
            ..rts
        },
        RtsAttr { timeout: 32, ..rts },
    ] {
        assert!(a.v.modify_qp(qa, &QpModify::Rts(bad)).is_err(), "{bad:?}");
    }
    a.v.modify_qp(qa, &QpModify::Rts(rts)).unwrap();
    // The send queue holds two: the third post is refused at index 2 (the others went in).
    let e =
        a.v.post_send(
            qa,
            &[
                wr(1, SendOp::Send, &[]),
                wr(2, SendOp::Send, &[]),
                wr(3, SendOp::Send, &[]),
            ],
        )
        .unwrap_err();
    assert_eq!(
        (e.bad_wr, e.error),
        (2, VerbsError::QueueFull("send queue"))
    );
    let many = [Sge {
        addr: 0,
        len: 0,
        lkey: 0,
    }; 2];
    assert_eq!(
        a.v.post_send(qa, &[wr(4, SendOp::Send, &many)])
            .unwrap_err()
            .bad_wr,
        0
    );
    // RESET drops everything without completions; ERR from RESET is allowed.
    a.v.modify_qp(qa, &QpModify::Reset).unwrap();
    assert_eq!(a.state(qa), QpState::Reset);
    assert!(a.sends().is_empty() && a.recvs().is_empty());
    f.run(10);
    assert!(a.sends().is_empty());

    // A RoCE port refuses RTR without a global route, and a path MTU above its own.
    let (ra, rb) = (Node::new(&f, "ra"), Node::new(&f, "rb"));
    let (q1, q2) = (ra.qp(), rb.qp());
    let roce = RtrAttr {
        path_mtu: Mtu::M1024,
        dest_qpn: q2.qpn,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
        ah: ah(&ra, &rb, CONN),
    };
    assert!(roce.ah.grh.is_some());
    assert!(
        ra.v.modify_qp(
            q1,
            &QpModify::Rtr(RtrAttr {
                ah: AhAttr {
                    grh: None,
                    ..roce.ah
                },
                ..roce
            })
        )
        .is_err()
    );
    assert!(
        ra.v.modify_qp(
            q1,
            &QpModify::Rtr(RtrAttr {
                path_mtu: Mtu::M2048,
                ..roce
            })
        )
        .is_err()
    );
    let bad_gid = Grh {
        sgid_index: 9,
        ..roce.ah.grh.unwrap()
    };
    assert!(
        ra.v.modify_qp(
            q1,
            &QpModify::Rtr(RtrAttr {
                ah: AhAttr {
                    grh: Some(bad_gid),
                    ..roce.ah
                },
                ..roce
            })
        )
        .is_err()
    );
    ra.v.modify_qp(q1, &QpModify::Rtr(roce)).unwrap();
}

#[test]
fn completion_order_across_qps_follows_the_seed_and_stays_in_order_per_qp() {
    let order = |seed: Option<u64>| -> Vec<(u32, u64)> {
        let f = fabric(SimConfig {
            seed,
            ..SimConfig::default()
        });
        let (a, b) = (Node::new(&f, "a"), Node::new(&f, "b"));
        let mut src = a.buf(4096, RW);
        src.fill(3);
        let dst = b.buf(4 * 8 * 64, RW);
        let mut qps = Vec::new();
        for _ in 0..4 {
            let (qa, qb) = (a.qp(), b.qp());
            connect(&a, qa, &b, qb, CONN);
            qps.push(qa);
        }
        let sgs: Vec<[Sge; 1]> = (0..32).map(|i| [src.sge(i * 64, 64)]).collect();
        for (k, &qa) in qps.iter().enumerate() {
            for i in 0..8 {
                let slot = k * 8 + i;
                a.v.post_send(
                    qa,
                    &[wr(
                        i as u64,
                        write(&dst, slot * 64, dst.mr.rkey),
                        &sgs[slot],
                    )],
                )
                .unwrap();
            }
        }
        f.run(1000);
        let wcs = a.sends();
        assert_eq!(wcs.len(), 32);
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(
            &dst.data[..],
            &src.data[..2048],
            "every block where it belongs"
        );
        // In order per QP, whatever the interleaving.
        for q in &qps {
            let ids: Vec<u64> = wcs
                .iter()
                .filter(|w| w.qp_num == q.qpn)
                .map(|w| w.wr_id)
                .collect();
            assert_eq!(ids, (0..8).collect::<Vec<_>>(), "QP {:#x}", q.qpn);
        }
        wcs.iter()
            .map(|w| (w.qp_num - qps[0].qpn, w.wr_id))
            .collect()
    };
    let plain = order(None);
    // Without a seed the QPs take turns in creation order.
    let expect: Vec<(u32, u64)> = (0..8).flat_map(|i| (0..4).map(move |q| (q, i))).collect();
    assert_eq!(plain, expect);
    let (s1, s1again, s2) = (order(Some(1)), order(Some(1)), order(Some(2)));
    assert_eq!(s1, s1again, "a seed replays exactly");
    assert_ne!(s1, plain, "seed 1 reorders across QPs");
    assert_ne!(s1, s2, "different seeds, different interleavings");
}

#[test]
fn rnr_then_success_when_a_receive_arrives_within_the_retry_budget() {
    let f = fabric(SimConfig::default());
    // min_rnr_timer 14: 1.28 ms between tries; 3 retries.
    let (a, b, qa, qb) = pair(
        &f,
        Conn {
            rnr_retry: 3,
            min_rnr_timer: 14,
            ..CONN
        },
    );
    let mut src = a.buf(64, RW);
    src.fill(9);
    let dst = b.buf(64, RW);
    let sg = [src.sge(0, 64)];
    let op = SendOp::RdmaWriteImm {
        remote_addr: dst.at(0),
        rkey: dst.mr.rkey,
        imm: 42,
    };
    a.v.post_send(qa, &[wr(1, op, &sg)]).unwrap();
    let t0 = f.now_ns();
    f.step(); // RNR 1
    f.step(); // RNR 2, 1.28 ms later
    assert!(a.sends().is_empty());
    assert_eq!(a.state(qa), QpState::Rts);
    assert!(f.now_ns() - t0 >= rnr_timer_ns(14));
    b.v.post_recv(qb, &[RecvWr { wr_id: 77, sg: &[] }]).unwrap();
    f.run(10);
    assert_eq!(statuses(&a.sends()), [(1, WcStatus::Success)]);
    let r = b.recvs();
    assert_eq!(
        (r[0].wr_id, r[0].imm_data, r[0].byte_len),
        (77, Some(42), 64)
    );
    assert_eq!(&dst.data[..], &src.data[..]);
    // The data of a WRITE WITH IMM lands only once, whatever the retries.
    assert!(f.now_ns() - t0 >= 2 * rnr_timer_ns(14));

    // rnr_retry 7 waits for ever: a SEND waits through a thousand RNRs, then goes through.
    let (a, b, qa, qb) = pair(
        &f,
        Conn {
            rnr_retry: 7,
            ..CONN
        },
    );
    a.v.post_send(qa, &[wr(2, SendOp::Send, &[])]).unwrap();
    assert_eq!(f.run(1000), 1000);
    assert!(a.sends().is_empty());
    b.v.post_recv(qb, &[RecvWr { wr_id: 3, sg: &[] }]).unwrap();
    f.run(10);
    assert_eq!(statuses(&a.sends()), [(2, WcStatus::Success)]);
}

#[test]
fn rnr_retry_exhaustion_fails_the_request_and_flushes_the_rest() {
    let f = fabric(SimConfig::default());
    let (a, b, qa, qb) = pair(
        &f,
        Conn {
            rnr_retry: 2,
            ..CONN
        },
    );
    let src = a.buf(64, RW);
    let sg = [src.sge(0, 8)];
    let mut second = wr(2, SendOp::Send, &sg);
    second.signaled = false;
    a.v.post_send(qa, &[wr(1, SendOp::Send, &sg), second])
        .unwrap();
    // The first try and two retries get RNR; the third RNR fails it.
    assert_eq!(f.run(100), 3);
    assert_eq!(a.state(qa), QpState::Err);
    // The unsignaled request behind it still completes, flushed: errors always report.
    assert_eq!(
        statuses(&a.sends()),
        [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    // Later posts complete flushed at once; the responder never noticed.
    a.v.post_send(qa, &[wr(3, SendOp::Send, &sg)]).unwrap();
    a.v.post_recv(qa, &[RecvWr { wr_id: 4, sg: &[] }]).unwrap();
    assert_eq!(statuses(&a.sends()), [(3, WcStatus::WrFlushErr)]);
    assert_eq!(statuses(&a.recvs()), [(4, WcStatus::WrFlushErr)]);
    assert_eq!(b.state(qb), QpState::Rts);
    assert!(b.events().is_empty());
}

#[test]
fn a_peer_dying_mid_rdma_read_exhausts_the_retries() {
    // One 1024-byte packet per step: a 4 KiB READ takes four steps.
    let f = fabric(SimConfig {
        packets_per_step: 1,
        ..SimConfig::default()
    });
    let c = Conn {
        retry_cnt: 3,
        timeout: 10,
        ..CONN
    };
    let (a, b, qa, _qb) = pair(&f, c);
    let local = a.buf(4096, RW);
    let mut remote = b.buf(4096, RW);
    remote.fill(5);
    let sg = [local.sge(0, 4096)];
    let sg2 = [local.sge(0, 16)];
    let read = SendOp::RdmaRead {
        remote_addr: remote.at(0),
        rkey: remote.mr.rkey,
    };
    a.v.post_send(qa, &[wr(1, read, &sg), wr(2, read, &sg2)])
        .unwrap();
    f.step();
    f.step();
    assert_eq!(&local.data[..2048], &remote.data[..2048]);
    assert!(local.data[2048..].iter().all(|&x| x == 0));
    f.kill_hca("b");
    let t0 = f.now_ns();
    // The first try and three retries go unanswered, one ACK timeout apart.
    assert_eq!(f.run(100), 4);
    assert!(f.now_ns() - t0 >= 3 * ack_timeout_ns(10).unwrap());
    assert_eq!(
        statuses(&a.sends()),
        [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(a.state(qa), QpState::Err);
    assert!(
        local.data[2048..].iter().all(|&x| x == 0),
        "nothing after the death"
    );
    assert_eq!(b.events(), [AsyncEvent::DeviceFatal]);
    assert!(
        a.events().is_empty(),
        "the requester learns from its completion"
    );
    assert!(matches!(
        b.v.alloc_pd(b.ctx),
        Err(VerbsError::DeviceDead(_))
    ));
}

#[test]
fn a_port_down_on_either_side_ends_in_retry_exceeded_with_port_events() {
    let f = fabric(SimConfig::default());
    for down in ["b", "a"] {
        let (a, b, qa, qb) = pair(
            &f,
            Conn {
                retry_cnt: 1,
                ..CONN
            },
        );
        a.events();
        b.events();
        let buf = b.buf(64, RW);
        let src = a.buf(64, RW);
        let sg = [src.sge(0, 64)];
        f.set_port(down, 1, false);
        let (dn, up) = if down == "b" { (&b, &a) } else { (&a, &b) };
        assert_eq!(dn.events(), [AsyncEvent::PortErr { port: 1 }]);
        assert!(up.events().is_empty());
        assert_eq!(dn.port().state, PortState::Down);
        a.v.post_send(qa, &[wr(1, write(&buf, 0, buf.mr.rkey), &sg)])
            .unwrap();
        assert_eq!(f.run(100), 2);
        assert_eq!(statuses(&a.sends()), [(1, WcStatus::RetryExcErr)]);
        assert_eq!((a.state(qa), b.state(qb)), (QpState::Err, QpState::Rts));
        f.set_port(down, 1, true);
        assert_eq!(dn.events(), [AsyncEvent::PortActive { port: 1 }]);
    }
}

#[test]
fn a_qp_put_in_error_flushes_queued_and_later_work_in_order() {
    let f = fabric(SimConfig::default());
    let (a, b, qa, qb) = pair(&f, CONN);
    let dst = b.buf(64, RW);
    let src = a.buf(64, RW);
    let sg = [src.sge(0, 8)];
    let ops: Vec<_> = (1..=3)
        .map(|i| wr(i, write(&dst, 0, dst.mr.rkey), &sg))
        .collect();
    a.v.post_send(qa, &ops).unwrap();
    a.v.post_recv(
        qa,
        &[RecvWr { wr_id: 8, sg: &[] }, RecvWr { wr_id: 9, sg: &[] }],
    )
    .unwrap();
    a.v.modify_qp(qa, &QpModify::Err).unwrap();
    let flushed = |v: &[u64]| {
        v.iter()
            .map(|&i| (i, WcStatus::WrFlushErr))
            .collect::<Vec<_>>()
    };
    assert_eq!(statuses(&a.sends()), flushed(&[1, 2, 3]));
    assert_eq!(statuses(&a.recvs()), flushed(&[8, 9]));
    a.v.post_send(qa, &ops[..1]).unwrap();
    assert_eq!(statuses(&a.sends()), flushed(&[1]));
    assert_eq!(f.run(10), 0, "nothing left to run");
    assert_eq!(dst.data[0], 0, "no flushed write ran");
    // The peer hears nothing from a QP in error: its SEND towards it times out.
    let c = b.buf(8, RW);
    let s = [c.sge(0, 8)];
    b.v.post_send(qb, &[wr(5, SendOp::Send, &s)]).unwrap();
    f.run(100);
    assert_eq!(statuses(&b.sends()), [(5, WcStatus::RetryExcErr)]);
}

#[test]
fn rkey_range_and_access_violations_fail_both_sides() {
    let f = fabric(SimConfig::default());
    let probe = |make: MakeOp<'_>, remote_access: Access, qp_access: Access| {
        let (a, b) = (Node::new(&f, "a"), Node::new(&f, "b"));
        let (qa, qb) = (a.qp(), b.qp_access(qp_access));
        connect(&a, qa, &b, qb, CONN);
        let mut src = a.buf(256, RW);
        src.fill(7);
        let dst = b.buf(256, remote_access);
        let (op, sg) = make(&a, &src, &dst);
        a.v.post_send(qa, &[wr(1, op, &sg), wr(2, op, &sg)])
            .unwrap();
        b.v.post_recv(qb, &[RecvWr { wr_id: 9, sg: &[] }]).unwrap();
        f.run(100);
        let r = (
            statuses(&a.sends()),
            a.state(qa),
            b.state(qb),
            b.events(),
            statuses(&b.recvs()),
        );
        assert!(dst.data.iter().all(|&x| x == 0), "nothing written");
        r
    };
    let w = |off: usize, len: usize| {
        move |_: &Node, s: &Buf, d: &Buf| (write(d, off, d.mr.rkey), vec![s.sge(0, len)])
    };
    let fail_remote = |r: Outcome| {
        assert_eq!(
            r.0,
            [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
        );
        assert_eq!((r.1, r.2), (QpState::Err, QpState::Err));
        assert!(
            matches!(r.3[..], [AsyncEvent::QpAccessErr { .. }]),
            "{:?}",
            r.3
        );
        assert_eq!(
            r.4,
            [(9, WcStatus::WrFlushErr)],
            "the responder's receives flush"
        );
    };
    // A wrong rkey, a range past the MR's end, an address overflowing, an MR without remote
    // write, a QP without remote write, a READ of an MR without remote read.
    fail_remote(probe(
        &|_, s, d| (write(d, 0, d.mr.rkey ^ 0x100), vec![s.sge(0, 8)]),
        RW,
        RW,
    ));
    fail_remote(probe(&w(200, 100), RW, RW));
    fail_remote(probe(
        &|_, s, d| {
            (
                SendOp::RdmaWrite {
                    remote_addr: u64::MAX - 4,
                    rkey: d.mr.rkey,
                },
                vec![s.sge(0, 8)],
            )
        },
        RW,
        RW,
    ));
    fail_remote(probe(
        &w(0, 8),
        Access::LOCAL_WRITE | Access::REMOTE_READ,
        RW,
    ));
    fail_remote(probe(&w(0, 8), RW, Access::REMOTE_READ));
    let rd = |s: &Buf, d: &Buf| {
        (
            SendOp::RdmaRead {
                remote_addr: d.at(0),
                rkey: d.mr.rkey,
            },
            vec![s.sge(0, 8)],
        )
    };
    fail_remote(probe(
        &|_, s, d| rd(s, d),
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        RW,
    ));
    // Local faults: a wrong lkey, an entry past its MR, a READ into memory without local
    // write. The peer is untouched.
    for local in [0, 1, 2] {
        let (a, b, qa, qb) = pair(&f, CONN);
        let src = a.buf(64, if local == 2 { Access::REMOTE_READ } else { RW });
        let dst = b.buf(64, RW);
        let (op, sg) = match local {
            0 => (
                write(&dst, 0, dst.mr.rkey),
                Sge {
                    lkey: src.mr.lkey + 1,
                    ..src.sge(0, 8)
                },
            ),
            1 => (write(&dst, 0, dst.mr.rkey), src.sge(60, 8)),
            _ => (
                SendOp::RdmaRead {
                    remote_addr: dst.at(0),
                    rkey: dst.mr.rkey,
                },
                src.sge(0, 8),
            ),
        };
        let sg = [sg];
        a.v.post_send(qa, &[wr(1, op, &sg)]).unwrap();
        f.run(10);
        assert_eq!(
            statuses(&a.sends()),
            [(1, WcStatus::LocProtErr)],
            "case {local}"
        );
        assert_eq!((a.state(qa), b.state(qb)), (QpState::Err, QpState::Rts));
    }
    // A SEND longer than the receive: LocLenErr at the responder, RemInvReqErr here, both
    // QPs in error; registering remote write without local write is refused.
    let (a, b, qa, qb) = pair(&f, CONN);
    let src = a.buf(64, RW);
    let dst = b.buf(64, RW);
    let (sg, rs) = ([src.sge(0, 64)], [dst.sge(0, 32)]);
    b.v.post_recv(qb, &[RecvWr { wr_id: 5, sg: &rs }]).unwrap();
    a.v.post_send(qa, &[wr(1, SendOp::Send, &sg)]).unwrap();
    f.run(10);
    assert_eq!(statuses(&a.sends()), [(1, WcStatus::RemInvReqErr)]);
    assert_eq!(statuses(&b.recvs()), [(5, WcStatus::LocLenErr)]);
    assert_eq!((a.state(qa), b.state(qb)), (QpState::Err, QpState::Err));
    let mut x = [0u8; 8];
    // SAFETY: refused before anything could touch `x`.
    let e = unsafe {
        a.v.reg_mr(a.pd, x.as_mut_ptr() as u64, 8, Access::REMOTE_WRITE)
    };
    assert!(matches!(e, Err(VerbsError::Invalid(_))));
}

#[test]
fn deregistered_memory_faults_and_new_registrations_get_new_keys() {
    let f = fabric(SimConfig {
        packets_per_step: 1,
        ..SimConfig::default()
    });
    let (a, b, qa, _) = pair(&f, CONN);
    let mut src = a.buf(4096, RW);
    src.fill(2);
    let dst = b.buf(4096, RW);
    let sg = [src.sge(0, 4096)];
    a.v.post_send(qa, &[wr(1, write(&dst, 0, dst.mr.rkey), &sg)])
        .unwrap();
    f.step();
    // Deregistered after the first packet: the second faults.
    b.v.dereg_mr(dst.mr).unwrap();
    f.run(10);
    assert_eq!(statuses(&a.sends()), [(1, WcStatus::RemAccessErr)]);
    assert_eq!(&dst.data[..1024], &src.data[..1024]);
    assert!(dst.data[1024..].iter().all(|&x| x == 0));
    assert_eq!(b.v.dereg_mr(dst.mr), Err(VerbsError::BadHandle("MR")));

    // The same range registered again has new keys: the new rkey works, the old faults, and
    // the new one faults from a QP of another PD on the same device.
    let (a, b, qa, _) = pair(&f, CONN);
    let mut dst2 = dst;
    // SAFETY: dst2's memory lives until the end of the test.
    let mr = unsafe { b.v.reg_mr(b.pd, dst2.mr.addr, 4096, RW).unwrap() };
    assert!(mr.rkey != dst2.mr.rkey && mr.lkey != dst2.mr.lkey);
    let old = dst2.mr.rkey;
    dst2.mr = mr;
    let mut src = a.buf(8, RW);
    src.fill(6);
    let s8 = [src.sge(0, 8)];
    a.v.post_send(
        qa,
        &[
            wr(1, write(&dst2, 2048, mr.rkey), &s8),
            wr(2, write(&dst2, 0, old), &s8),
        ],
    )
    .unwrap();
    f.run(10);
    assert_eq!(
        statuses(&a.sends()),
        [(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]
    );
    assert_eq!(&dst2.data[2048..2056], &src.data[..8]);
    let (a2, _b2, qa2, _) = pair(&f, CONN);
    let src2 = a2.buf(8, RW);
    let s8 = [src2.sge(0, 8)];
    a2.v.post_send(qa2, &[wr(3, write(&dst2, 0, mr.rkey), &s8)])
        .unwrap();
    f.run(10);
    assert_eq!(statuses(&a2.sends()), [(3, WcStatus::RemAccessErr)]);
    // A deregistered local MR faults locally.
    let (a, b, qa, _) = pair(&f, CONN);
    let l = a.buf(64, RW);
    let d = b.buf(64, RW);
    a.v.dereg_mr(l.mr).unwrap();
    let s = [l.sge(0, 8)];
    a.v.post_send(qa, &[wr(3, write(&d, 0, d.mr.rkey), &s)])
        .unwrap();
    f.run(10);
    assert_eq!(statuses(&a.sends()), [(3, WcStatus::LocProtErr)]);
}

#[test]
fn roce_connects_by_auto_gid_and_mismatched_addressing_times_out() {
    let f = fabric(SimConfig::default());
    let run = |c: Conn| {
        let (a, b) = (Node::new(&f, "ra"), Node::new(&f, "rb"));
        let (qa, qb) = (a.qp(), b.qp());
        connect(&a, qa, &b, qb, c);
        let mut src = a.buf(64, RW);
        src.fill(4);
        let dst = b.buf(64, RW);
        let sg = [src.sge(0, 64)];
        a.v.post_send(qa, &[wr(1, write(&dst, 0, dst.mr.rkey), &sg)])
            .unwrap();
        f.run(100);
        let ok = dst.data[..] == src.data[..];
        (statuses(&a.sends()), ok)
    };
    // Auto picks index 3 (IPv4, RoCE v2) on both sides.
    assert_eq!(run(CONN), (vec![(1, WcStatus::Success)], true));
    // Sending from the link-local IPv6 GID to the peer's IPv4 one: no route, retries, failure.
    let v1 = Conn {
        gid_index: Some(1),
        retry_cnt: 2,
        ..CONN
    };
    assert_eq!(run(v1), (vec![(1, WcStatus::RetryExcErr)], false));
    // A PSN the peer does not expect is never accepted.
    let skew = Conn {
        psn_skew: 5,
        retry_cnt: 2,
        ..CONN
    };
    assert_eq!(run(skew), (vec![(1, WcStatus::RetryExcErr)], false));
    // IB and RoCE ports never reach each other; timeout 0 waits for ever.
    let (a, b) = (Node::new(&f, "a"), Node::new(&f, "b"));
    let (qa, qb) = (a.qp(), b.qp());
    connect(&a, qa, &b, qb, Conn { timeout: 0, ..CONN });
    f.set_port("b", 1, false);
    a.v.post_send(qa, &[wr(1, SendOp::Send, &[])]).unwrap();
    f.advance(60_000_000_000);
    assert!(a.sends().is_empty());
    assert_eq!(a.state(qa), QpState::Rts);
}

#[test]
fn resources_in_use_are_busy_and_a_cq_overrun_is_reported() {
    let f = fabric(SimConfig::default());
    let (a, b, qa, qb) = pair(&f, CONN);
    assert_eq!(
        a.v.dealloc_pd(a.pd),
        Err(VerbsError::Busy("protection domain"))
    );
    assert_eq!(
        a.v.destroy_cq(a.scq),
        Err(VerbsError::Busy("completion queue"))
    );
    assert_eq!(a.v.close(a.ctx), Err(VerbsError::Busy("context")));
    assert!(a.v.open("b").is_err(), "a host sees only its own devices");
    assert_eq!(a.v.devices().unwrap().len(), 1);
    // A CQ of 2 entries, 3 completions: the third is lost; CQ and QP errors are raised.
    let small = b.v.create_cq(b.ctx, 2).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
    };
    let q =
        b.v.create_qp(
            b.pd,
            &QpInitAttr {
                send_cq: small,
                recv_cq: small,
                cap,
            },
        )
        .unwrap();
    b.v.modify_qp(
        q,
        &QpModify::Init(InitAttr {
            port: 1,
            pkey_index: 0,
            access: Access::NONE,
        }),
    )
    .unwrap();
    b.v.post_recv(
        q,
        &[
            RecvWr { wr_id: 1, sg: &[] },
            RecvWr { wr_id: 2, sg: &[] },
            RecvWr { wr_id: 3, sg: &[] },
        ],
    )
    .unwrap();
    b.v.modify_qp(q, &QpModify::Err).unwrap();
    let mut out = Vec::new();
    assert_eq!(b.v.poll_cq(small, 8, &mut out), Err(VerbsError::CqOverrun));
    assert_eq!(b.events(), [AsyncEvent::CqErr { cq: small }]);
    // Teardown in order works.
    b.v.destroy_qp(q).unwrap();
    b.v.destroy_cq(small).unwrap();
    a.v.destroy_qp(qa).unwrap();
    assert_eq!(a.v.qp_state(qa), Err(VerbsError::BadHandle("QP")));
    a.v.destroy_cq(a.scq).unwrap();
    a.v.destroy_cq(a.rcq).unwrap();
    a.v.dealloc_pd(a.pd).unwrap();
    a.v.close(a.ctx).unwrap();
    let _ = qb;
}

#[test]
fn gid_auto_prefers_ipv4_roce_v2_and_ib_takes_index_0() {
    let e = |index, gid: Gid, gid_type| GidEntry {
        index,
        gid,
        gid_type,
        ndev: None,
    };
    let v4 = Gid::from_ipv4(Ipv4Addr::new(192, 168, 1, 2));
    let ll = Gid::parse("fe80:0000:0000:0000:0000:0000:0000:0001").unwrap();
    let v6 = Gid::parse("2001:0db8:0000:0000:0000:0000:0000:0001").unwrap();
    let t = [
        e(0, ll, GidType::IbRoceV1),
        e(1, ll, GidType::RoceV2),
        e(2, v4, GidType::IbRoceV1),
        e(3, v4, GidType::RoceV2),
        e(4, v6, GidType::RoceV2),
    ];
    assert_eq!(gid_index_auto(LinkLayer::Ethernet, &t), Some(3));
    assert_eq!(
        gid_index_auto(
            LinkLayer::Ethernet,
            &[t[0].clone(), t[1].clone(), t[4].clone()]
        ),
        Some(4)
    );
    assert_eq!(
        gid_index_auto(LinkLayer::Ethernet, &[t[0].clone(), t[2].clone()]),
        Some(2)
    );
    assert_eq!(
        gid_index_auto(LinkLayer::Ethernet, &[t[0].clone(), t[1].clone()]),
        Some(1)
    );
    assert_eq!(gid_index_auto(LinkLayer::InfiniBand, &t), Some(0));
    assert_eq!(gid_index_auto(LinkLayer::Ethernet, &[]), None);
    assert_eq!(v4.to_string(), "0000:0000:0000:0000:0000:ffff:c0a8:0102");
    assert_eq!(Gid::parse(&v4.to_string()), Some(v4));
    assert_eq!(Mtu::for_ethernet(1500), Some(Mtu::M1024));
    assert_eq!(Mtu::for_ethernet(9000), Some(Mtu::M4096));
    assert_eq!(Mtu::M4096.bytes(), 4096);
    assert_eq!(ack_timeout_ns(20), Some(4096 << 20));
    assert_eq!(rnr_timer_ns(0), 655_360_000);
}
