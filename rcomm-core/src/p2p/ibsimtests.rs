//! The protocol engine of every rank over the `ib` transport on the simulated verbs fabric
//! (`rcomm_transport::ib::sim`): RC queue pairs, eager writes with immediate into credited
//! rings, rendezvous by RDMA READ, failures from the fabric (retry exhaustion, a QP in error,
//! a port going down) — and the collective schedules over it, against sequential references.
//! Deterministic: virtual time, seeded interleavings. No verbs call reaches hardware here.

use super::engine::{Engine, ProtoConfig, ReqId};
use super::matcher::{Source, TagSel};
use super::region::Region;
use super::simtests::pattern;
use crate::CommError;
use crate::coll::schedule::{self as sch, Buf, Chunk, Schedule, Step};
use rcomm_transport::ib::conn::ConnBlob;
use rcomm_transport::ib::ep::{IbEndpoint, IbParams};
use rcomm_transport::ib::sim::{HcaSpec, PortSpec, SimConfig, SimFabric};
use rcomm_transport::ib::{AnyVerbs, QpModify, Verbs};
use rcomm_transport::net::Net;

struct Cluster {
    fabric: SimFabric,
    engines: Vec<Engine>,
    /// Ranks whose HCA died: not progressed any more (the process is gone).
    dead: Vec<bool>,
}

/// Small rings and short timeouts, so tests reach credit limits and retry exhaustion soon.
fn params(slots: u16, eager: u32, qps: u8) -> IbParams {
    IbParams {
        slots,
        slot_bytes: eager + 44,
        qps,
        // 4.096 µs · 2^10 ≈ 4.2 ms, three retries: a dead peer is noticed within ~17 ms.
        timeout: 10,
        retry_cnt: 3,
        ..IbParams::default()
    }
}

fn hca(r: usize) -> String {
    format!("mlx5_{r}")
}

/// Rail `i` of rank `r`: its HCA (rail 0 is [`hca`]).
fn rail_hca(r: usize, i: usize) -> String {
    if i == 0 {
        hca(r)
    } else {
        format!("mlx5_{r}r{i}")
    }
}

impl Cluster {
    fn new(n: usize, p: IbParams, sim: SimConfig, roce: bool) -> Self {
        Self::with_rails(&vec![1; n], p, sim, roce)
    }

    /// Rank `r` has `rails[r]` HCAs, one port each.
    fn with_rails(rails: &[usize], p: IbParams, sim: SimConfig, roce: bool) -> Self {
        let n = rails.len();
        let fabric = SimFabric::new(sim);
        for (r, &nr) in rails.iter().enumerate() {
            for i in 0..nr {
                let guid = 0x7000 + (r * 16 + i) as u64;
                let port = if roce {
                    PortSpec::roce(
                        std::net::Ipv4Addr::new(10, 9, i as u8, r as u8 + 1),
                        guid,
                        0,
                    )
                } else {
                    PortSpec::ib((r * 16 + i) as u16 + 1, guid, 0)
                };
                fabric.add_hca(HcaSpec {
                    name: rail_hca(r, i),
                    node_guid: guid,
                    ports: vec![port],
                });
            }
        }
        let mut eps: Vec<_> = (0..n)
            .map(|r| {
                let names: Vec<String> = (0..rails[r]).map(|i| rail_hca(r, i)).collect();
                let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
                let devs: Vec<(&str, u8)> = refs.iter().map(|d| (*d, 1)).collect();
                let v = AnyVerbs::Sim(fabric.host(&refs));
                IbEndpoint::open(v, &devs, r as u32, n as u32, p).expect("open")
            })
            .collect();
        // Blobs travel as bytes, as in the address records.
        let blobs: Vec<Vec<u8>> = eps.iter().map(|e| e.blob().encode()).collect();
        for (r, e) in eps.iter_mut().enumerate() {
            for (q, b) in blobs.iter().enumerate().filter(|(q, _)| *q != r) {
                e.connect(q as u32, &ConnBlob::decode(b).unwrap()).unwrap();
            }
        }
        let engines = eps
            .into_iter()
            .enumerate()
            .map(|(r, e)| {
                Engine::new(
                    r as u32,
                    n as u32,
                    Net::ib_only(r as u32, n as u32, e),
                    (0..n).map(|h| format!("node{h}")).collect(),
                    ProtoConfig {
                        get_max: usize::MAX,
                    },
                )
            })
            .collect();
        Self {
            fabric,
            engines,
            dead: vec![false; n],
        }
    }

    /// One round: progress every live rank; when none had work, the fabric moves one step.
    /// `false` once nothing can happen any more.
    fn round(&mut self) -> bool {
        let mut work = 0;
        for (r, e) in self.engines.iter_mut().enumerate() {
            if !self.dead[r] {
                work += e.progress();
            }
        }
        work > 0 || self.fabric.step()
    }

    fn run(&mut self, mut done: impl FnMut(&mut Self) -> bool) -> Result<(), String> {
        for _ in 0..4_000_000 {
            if done(self) {
                return Ok(());
            }
            if !self.round() {
                return if done(self) {
                    Ok(())
                } else {
                    Err(format!("stuck at {} ns", self.fabric.now_ns()))
                };
            }
        }
        Err("no end after 4M rounds".into())
    }

    fn wait(&mut self, r: usize, q: ReqId) -> Result<super::engine::Status, CommError> {
        self.run(|c| c.engines[r].is_done(q))
            .unwrap_or_else(|e| panic!("{e}"));
        self.engines[r].take(q)
    }

    fn kill(&mut self, r: usize) {
        let rails = self.engines[r]
            .net()
            .transport::<IbEndpoint<AnyVerbs>>()
            .unwrap()
            .rails()
            .len();
        for i in 0..rails {
            self.fabric.kill_hca(&rail_hca(r, i));
        }
        self.dead[r] = true;
    }

    fn ib(&mut self, r: usize) -> rcomm_transport::transport::Counters {
        self.engines[r].net().counters().get("ib")
    }
}

const SIZES: [usize; 9] = [0, 1, 63, 64, 200, 256, 257, 5000, 70_000];

impl super::simtests::SimJob for Cluster {
    fn engine(&mut self, rank: usize) -> &mut Engine {
        &mut self.engines[rank]
    }
    fn settle(&mut self) {
        self.run(|c| c.engines.iter().all(|e| !e.busy()) && !c.fabric.step())
            .unwrap();
    }
    fn wait_all(
        &mut self,
        reqs: &[(usize, ReqId)],
    ) -> Vec<Result<super::engine::Status, CommError>> {
        reqs.iter().map(|&(r, q)| self.wait(r, q)).collect()
    }
}

/// Posts a receive from `src` with `tag` into each buffer at `rank`, in order.
fn post_recvs(
    cl: &mut Cluster,
    rank: usize,
    src: u32,
    tag: i32,
    bufs: &mut [Vec<u8>],
) -> Vec<ReqId> {
    bufs.iter_mut()
        .map(|b| {
            let reg = Region::from_mut(b);
            cl.engines[rank]
                .irecv(0, Source::Rank(src), TagSel::Tag(tag), reg, "recv")
                .unwrap()
        })
        .collect()
}

/// The shared all-to-all traffic (`simtests::all_to_all_traffic`) over simulated verbs.
fn all_to_all(n: usize, p: IbParams, sim: SimConfig, roce: bool) -> Cluster {
    let mut cl = Cluster::new(n, p, sim, roce);
    super::simtests::all_to_all_traffic(&mut cl, n, &SIZES);
    cl
}

#[test]
fn every_size_arrives_exactly_over_ib_at_2_to_16_ranks() {
    for n in [2, 3, 5, 8, 16] {
        let mut cl = all_to_all(n, params(4, 256, 1), SimConfig::default(), false);
        for r in 0..n {
            // Host registrations live as long as their rendezvous: none is left pinned.
            let ep = cl.engines[r]
                .net_mut()
                .transport_mut::<IbEndpoint<AnyVerbs>>()
                .unwrap();
            assert_eq!(ep.registrations(), 0, "rank {r} of {n}: registrations left");
            let c = cl.engines[r].net().counters().get("ib");
            // Sizes above 256 bytes went by RDMA READ: 3 per peer.
            assert_eq!(
                c.bytes_cma,
                ((257 + 5000 + 70_000) * (n - 1)) as u64,
                "rank {r} of {n}: {c:?}"
            );
            assert!(c.msgs_recv > 0 && c.msgs_sent > 0);
        }
    }
}

#[test]
fn roce_ports_connect_by_gid_and_carry_the_same_traffic() {
    let cl = all_to_all(3, params(8, 1024, 1), SimConfig::default(), true);
    assert!(cl.engines[0].net().counters().get("ib").bytes_cma > 0);
}

#[test]
fn mpi_order_holds_across_several_qps_under_shuffled_completion() {
    // Four QPs per peer, the fabric acting on QPs in a seeded random order one packet at a
    // time: messages overtake each other across QPs; the receiver must still match in order.
    for seed in 1..=6 {
        let sim = SimConfig {
            seed: Some(seed),
            packets_per_step: 1,
            step_ns: 500,
        };
        let mut cl = Cluster::new(2, params(8, 128, 4), sim, false);
        let sizes: Vec<usize> = (0..120).map(|i| [3, 100, 128, 129, 700][i % 5]).collect();
        let msgs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &l)| pattern(0, 1, i, l))
            .collect();
        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&l| vec![0; l]).collect();
        let sends: Vec<ReqId> = msgs
            .iter()
            .map(|m| {
                cl.engines[0]
                    .isend(0, 1, 5, Region::from_ref(m), "send")
                    .unwrap()
            })
            .collect();
        let recvs: Vec<ReqId> = post_recvs(&mut cl, 1, 0, 5, &mut bufs);
        for (i, q) in recvs.into_iter().enumerate() {
            let st = cl.wait(1, q).unwrap();
            assert_eq!(st.bytes, sizes[i], "seed {seed}: message {i}");
        }
        for q in sends {
            cl.wait(0, q).unwrap();
        }
        for (i, (b, m)) in bufs.iter().zip(&msgs).enumerate() {
            assert!(b == m, "seed {seed}: message {i} out of order or corrupt");
        }
    }
}

#[test]
fn a_receiver_that_does_not_progress_stops_the_sender_at_its_credits() {
    // Two slots: without the receiver returning credits, exactly two messages go out.
    let mut cl = Cluster::new(2, params(2, 64, 1), SimConfig::default(), false);
    let msgs: Vec<Vec<u8>> = (0..40).map(|i| pattern(0, 1, i, 10 + i)).collect();
    let sends: Vec<ReqId> = msgs
        .iter()
        .map(|m| {
            cl.engines[0]
                .isend(0, 1, 1, Region::from_ref(m), "send")
                .unwrap()
        })
        .collect();
    for _ in 0..10_000 {
        let w = cl.engines[0].progress();
        if w == 0 && !cl.fabric.step() {
            break;
        }
    }
    assert_eq!(cl.ib(0).msgs_sent, 2, "credits bound what is in flight");
    assert!(
        !cl.engines[0].is_done(sends[2]),
        "the third waits for a credit"
    );
    // The receiver comes back: everything arrives, in order, credits flowing back.
    let mut bufs: Vec<Vec<u8>> = msgs.iter().map(|m| vec![0; m.len()]).collect();
    let recvs: Vec<ReqId> = post_recvs(&mut cl, 1, 0, 1, &mut bufs);
    for q in recvs {
        cl.wait(1, q).unwrap();
    }
    for q in sends {
        cl.wait(0, q).unwrap();
    }
    assert!(bufs == msgs);
    assert_eq!(cl.ib(0).msgs_sent, 40);
}

#[test]
fn a_peer_dying_during_an_rdma_read_fails_the_receive_naming_it() {
    // Rank 1 reads 4 MB from rank 0, a packet per step; rank 0's HCA dies at several points
    // once the READ is under way. (Before that, rank 1 has nothing outstanding towards rank
    // 0, and RC says nothing about a silent peer: the launcher's liveness watch does.)
    for kill_after in [0usize, 3, 60, 250] {
        let sim = SimConfig {
            packets_per_step: 1,
            ..SimConfig::default()
        };
        let mut cl = Cluster::new(3, params(4, 256, 1), sim, false);
        let msg = pattern(0, 1, 0, 4 << 20);
        let mut buf = vec![0u8; msg.len()];
        let _s = cl.engines[0]
            .isend(0, 1, 0, Region::from_ref(&msg), "send")
            .unwrap();
        let r = cl.engines[1]
            .irecv(
                0,
                Source::Rank(0),
                TagSel::Tag(0),
                Region::from_mut(&mut buf),
                "recv",
            )
            .unwrap();
        cl.run(|c| c.ib(1).bytes_cma > 0).unwrap();
        for _ in 0..kill_after {
            cl.round();
        }
        assert!(
            !cl.engines[1].is_done(r),
            "kill after {kill_after}: the READ already ended"
        );
        let t0 = cl.fabric.now_ns();
        cl.kill(0);
        let res = cl.wait(1, r);
        match res {
            Err(CommError::PeerLost {
                rank: 0,
                ref host,
                ref why,
                ..
            }) => {
                assert_eq!(host, "node0");
                assert!(
                    why.contains("retries exhausted") || why.contains("down"),
                    "{why}"
                );
            }
            other => panic!("kill after {kill_after}: {other:?}"),
        }
        // Noticed within the retry budget: 4 tries of 4.2 ms (virtual).
        let t = cl.fabric.now_ns() - t0;
        assert!(
            t <= 40_000_000,
            "kill after {kill_after}: noticed after {t} ns"
        );
        // The third rank is untouched: it still talks to rank 1.
        let (m2, mut b2) = (pattern(2, 1, 9, 3000), vec![0u8; 3000]);
        let s2 = cl.engines[2]
            .isend(0, 1, 9, Region::from_ref(&m2), "send")
            .unwrap();
        let r2 = cl.engines[1]
            .irecv(
                0,
                Source::Rank(2),
                TagSel::Tag(9),
                Region::from_mut(&mut b2),
                "recv",
            )
            .unwrap();
        cl.wait(1, r2).unwrap();
        cl.wait(2, s2).unwrap();
        assert_eq!(b2, m2);
        assert!(
            !cl.engines[1].busy(),
            "nothing left behind for the lost peer"
        );
    }
}

#[test]
fn a_qp_in_error_mid_transfer_fails_only_its_peer() {
    let sim = SimConfig {
        packets_per_step: 1,
        ..SimConfig::default()
    };
    let mut cl = Cluster::new(3, params(4, 256, 2), sim, false);
    let (m0, m1) = (pattern(0, 2, 0, 300_000), pattern(1, 2, 0, 300_000));
    let (mut b0, mut b1) = (vec![0u8; m0.len()], vec![0u8; m1.len()]);
    let s0 = cl.engines[0]
        .isend(0, 2, 0, Region::from_ref(&m0), "send")
        .unwrap();
    let s1 = cl.engines[1]
        .isend(0, 2, 0, Region::from_ref(&m1), "send")
        .unwrap();
    let r0 = cl.engines[2]
        .irecv(
            0,
            Source::Rank(0),
            TagSel::Tag(0),
            Region::from_mut(&mut b0),
            "recv",
        )
        .unwrap();
    let r1 = cl.engines[2]
        .irecv(
            0,
            Source::Rank(1),
            TagSel::Tag(0),
            Region::from_mut(&mut b1),
            "recv",
        )
        .unwrap();
    for _ in 0..50 {
        cl.round();
    }
    // Rank 2's QPs to rank 0 go to error, as after a local fault.
    let v = cl.fabric.host(&[&hca(2)]);
    let qps = cl.engines[2]
        .net_mut()
        .transport_mut::<IbEndpoint<AnyVerbs>>()
        .unwrap()
        .qps_of(0)
        .to_vec();
    for q in qps {
        v.modify_qp(q, &QpModify::Err).unwrap();
    }
    match cl.wait(2, r0) {
        Err(CommError::PeerLost { rank: 0, why, .. }) => {
            assert!(why.contains("QP") || why.contains("flushed"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    cl.wait(2, r1).unwrap();
    cl.wait(1, s1).unwrap();
    assert_eq!(b1, m1, "the other peer's transfer is whole");
    // Rank 0, which only waits for rank 2's FIN, learns at its next operation towards rank 2:
    // its write meets a QP in error, retries run out, and both sends fail naming rank 2.
    let ping = [1u8; 8];
    let s2 = cl.engines[0]
        .isend(0, 2, 1, Region::from_ref(&ping), "send")
        .unwrap();
    cl.run(|c| c.engines[0].is_done(s0)).unwrap();
    for (q, what) in [(s0, "the rendezvous send"), (s2, "the next send")] {
        match cl.engines[0].take(q) {
            Err(CommError::PeerLost { rank: 2, why, .. }) => {
                assert!(why.contains("retries exhausted"), "{what}: {why}")
            }
            Ok(_) if what == "the next send" => {}
            other => panic!("{what}: {other:?}"),
        }
    }
}

#[test]
fn a_port_going_down_fails_every_peer_of_the_port_with_the_reason() {
    let mut cl = Cluster::new(3, params(4, 256, 1), SimConfig::default(), false);
    let mut b = vec![0u8; 100];
    let r = cl.engines[2]
        .irecv(
            0,
            Source::Rank(0),
            TagSel::Tag(0),
            Region::from_mut(&mut b),
            "recv",
        )
        .unwrap();
    cl.fabric.set_port(&hca(2), 1, false);
    match cl.wait(2, r) {
        Err(CommError::PeerLost { rank: 0, why, .. }) => {
            assert!(why.contains("port 1 went down"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

/// Runs one schedule per rank over the engines, phase by phase, with `u32` wrapping sums as
/// the reduction; returns every rank's `Data`.
fn execute(
    cl: &mut Cluster,
    scheds: &[Schedule],
    mut data: Vec<Vec<u8>>,
    input: Vec<Vec<u8>>,
) -> Vec<Vec<u8>> {
    let n = scheds.len();
    let mut tmp: Vec<Vec<u8>> = scheds.iter().map(|s| vec![0u8; s.tmp_len]).collect();
    let mut pc = vec![0usize; n];
    let mut reqs: Vec<Option<Vec<ReqId>>> = vec![None; n];
    let slice = |d: &mut Vec<u8>, t: &mut Vec<u8>, i: &Vec<u8>, c: Chunk| -> Region {
        match c.buf {
            Buf::Data => Region::from_mut(&mut d[c.off..c.off + c.len]),
            Buf::Tmp => Region::from_mut(&mut t[c.off..c.off + c.len]),
            Buf::Input => Region::from_ref(&i[c.off..c.off + c.len]),
        }
    };
    let read = |d: &[u8], t: &[u8], i: &[u8], c: Chunk| -> Vec<u8> {
        let w = match c.buf {
            Buf::Data => d,
            Buf::Tmp => t,
            Buf::Input => i,
        };
        w[c.off..c.off + c.len].to_vec()
    };
    for _ in 0..4_000_000 {
        let mut work = 0;
        for r in 0..n {
            let Some(ph) = scheds[r].phases.get(pc[r]) else {
                continue;
            };
            match &reqs[r] {
                None => {
                    let mut v = Vec::new();
                    let recvs = ph.xfers.iter().filter(|s| matches!(s, Step::Recv { .. }));
                    let sends = ph.xfers.iter().filter(|s| matches!(s, Step::Send { .. }));
                    for st in recvs.chain(sends) {
                        let q = match *st {
                            Step::Recv { peer, dst } => {
                                let reg = slice(&mut data[r], &mut tmp[r], &input[r], dst);
                                cl.engines[r].irecv(
                                    7,
                                    Source::Rank(peer),
                                    TagSel::Tag(3),
                                    reg,
                                    "recv",
                                )
                            }
                            Step::Send { peer, src } => {
                                let reg = slice(&mut data[r], &mut tmp[r], &input[r], src);
                                cl.engines[r].isend(7, peer, 3, reg, "send")
                            }
                            _ => unreachable!(),
                        };
                        v.push(q.unwrap());
                    }
                    reqs[r] = Some(v);
                    work += 1;
                }
                Some(v) if v.iter().all(|&q| cl.engines[r].is_done(q)) => {
                    for &q in v {
                        cl.engines[r].take(q).unwrap();
                    }
                    for st in &ph.local {
                        let (dst, val) = match *st {
                            Step::Copy { dst, src } => {
                                (dst, read(&data[r], &tmp[r], &input[r], src))
                            }
                            Step::Reduce { dst, src, .. } => {
                                let a = read(&data[r], &tmp[r], &input[r], dst);
                                let b = read(&data[r], &tmp[r], &input[r], src);
                                let s: Vec<u8> = a
                                    .chunks(4)
                                    .zip(b.chunks(4))
                                    .flat_map(|(x, y)| {
                                        let x = u32::from_le_bytes(x.try_into().unwrap());
                                        let y = u32::from_le_bytes(y.try_into().unwrap());
                                        x.wrapping_add(y).to_le_bytes()
                                    })
                                    .collect();
                                (dst, s)
                            }
                            _ => unreachable!(),
                        };
                        let w = match dst.buf {
                            Buf::Data => &mut data[r],
                            Buf::Tmp => &mut tmp[r],
                            Buf::Input => unreachable!(),
                        };
                        w[dst.off..dst.off + dst.len].copy_from_slice(&val);
                    }
                    reqs[r] = None;
                    pc[r] += 1;
                    work += 1;
                }
                Some(_) => {}
            }
        }
        if (0..n).all(|r| pc[r] == scheds[r].phases.len()) {
            return data;
        }
        if work == 0 && !cl.round() {
            panic!("collective stuck at phases {pc:?}");
        }
    }
    panic!("collective did not end");
}

fn words(r: usize, len: usize, salt: u32) -> Vec<u8> {
    (0..len / 4)
        .flat_map(|i| {
            ((r as u32 + 1).wrapping_mul(0x9e37_79b9) ^ (i as u32 * 7 + salt)).to_le_bytes()
        })
        .collect()
}

fn wsum(bufs: &[Vec<u8>]) -> Vec<u8> {
    let mut acc = vec![0u32; bufs[0].len() / 4];
    for b in bufs {
        for (a, w) in acc.iter_mut().zip(b.chunks(4)) {
            *a = a.wrapping_add(u32::from_le_bytes(w.try_into().unwrap()));
        }
    }
    acc.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn the_collective_schedules_over_ib_match_their_sequential_references_at_2_to_16_ranks() {
    for n in [2usize, 3, 4, 7, 16] {
        let mut cl = Cluster::new(n, params(8, 512, 2), SimConfig::default(), false);
        let nn = n as u32;
        // Allreduce, three algorithms, below and above the eager limit.
        for count in [1usize, 37, 3000] {
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| words(r, count * 4, count as u32)).collect();
            let want = wsum(&inputs);
            for (name, mk) in [
                (
                    "ring",
                    sch::ring_allreduce as fn(u32, u32, usize, usize) -> Schedule,
                ),
                ("recursive doubling", sch::recursive_doubling_allreduce),
                ("rabenseifner", sch::rabenseifner_allreduce),
            ] {
                let scheds: Vec<_> = (0..nn).map(|r| mk(r, nn, count, 4)).collect();
                let got = execute(&mut cl, &scheds, inputs.clone(), vec![vec![]; n]);
                for (r, g) in got.iter().enumerate() {
                    assert!(
                        g == &want,
                        "{name} allreduce of {count} at {n} ranks: rank {r}"
                    );
                }
            }
        }
        let block = 1028;
        // Allgather (ring), reduce-scatter (ring), alltoall (pairwise and Bruck), bcast, gather.
        let own: Vec<Vec<u8>> = (0..n).map(|r| words(r, block, 11)).collect();
        let all: Vec<u8> = own.concat();
        let data: Vec<Vec<u8>> = (0..n)
            .map(|r| {
                let mut d = vec![0u8; n * block];
                d[r * block..(r + 1) * block].copy_from_slice(&own[r]);
                d
            })
            .collect();
        let s: Vec<_> = (0..nn).map(|r| sch::ring_allgather(r, nn, block)).collect();
        for (r, g) in execute(&mut cl, &s, data, vec![vec![]; n])
            .iter()
            .enumerate()
        {
            assert!(g == &all, "allgather at {n} ranks: rank {r}");
        }
        let full: Vec<Vec<u8>> = (0..n).map(|r| words(r, n * block, 5)).collect();
        let red = wsum(&full);
        let s: Vec<_> = (0..nn)
            .map(|r| sch::ring_reduce_scatter(r, nn, block))
            .collect();
        for (r, g) in execute(&mut cl, &s, full, vec![vec![]; n])
            .iter()
            .enumerate()
        {
            assert!(
                g[r * block..(r + 1) * block] == red[r * block..(r + 1) * block],
                "reduce_scatter at {n} ranks: rank {r}"
            );
        }
        let sendbufs: Vec<Vec<u8>> = (0..n).map(|r| words(r, n * block, 99)).collect();
        let expect = |r: usize| -> Vec<u8> {
            (0..n)
                .flat_map(|i| sendbufs[i][r * block..(r + 1) * block].to_vec())
                .collect()
        };
        let s: Vec<_> = (0..nn)
            .map(|r| sch::pairwise_alltoall(r, nn, block))
            .collect();
        let data: Vec<Vec<u8>> = (0..n)
            .map(|r| {
                let mut d = vec![0u8; n * block];
                d[r * block..(r + 1) * block]
                    .copy_from_slice(&sendbufs[r][r * block..(r + 1) * block]);
                d
            })
            .collect();
        for (r, g) in execute(&mut cl, &s, data, sendbufs.clone())
            .iter()
            .enumerate()
        {
            assert!(g == &expect(r), "pairwise alltoall at {n} ranks: rank {r}");
        }
        let s: Vec<_> = (0..nn).map(|r| sch::bruck_alltoall(r, nn, block)).collect();
        let data = vec![vec![0u8; n * block]; n];
        for (r, g) in execute(&mut cl, &s, data, sendbufs.clone())
            .iter()
            .enumerate()
        {
            assert!(g == &expect(r), "bruck alltoall at {n} ranks: rank {r}");
        }
        let root = (n / 2) as u32;
        let payload = words(99, 40_000, 3);
        let s: Vec<_> = (0..nn)
            .map(|r| sch::binomial_bcast(r, nn, root, payload.len()))
            .collect();
        let data: Vec<Vec<u8>> = (0..n)
            .map(|r| {
                if r as u32 == root {
                    payload.clone()
                } else {
                    vec![0u8; payload.len()]
                }
            })
            .collect();
        for (r, g) in execute(&mut cl, &s, data, vec![vec![]; n])
            .iter()
            .enumerate()
        {
            assert!(g == &payload, "bcast at {n} ranks: rank {r}");
        }
        let s: Vec<_> = (0..nn)
            .map(|r| sch::linear_gather(r, nn, root, block))
            .collect();
        let data: Vec<Vec<u8>> = (0..n)
            .map(|r| {
                let mut d = vec![0u8; n * block];
                if r as u32 == root {
                    d[r * block..(r + 1) * block].copy_from_slice(&own[r]);
                }
                d
            })
            .collect();
        let got = execute(&mut cl, &s, data, own.clone());
        assert!(got[root as usize] == all, "gather at {n} ranks");
        for r in 0..n {
            assert!(
                !cl.engines[r].busy(),
                "rank {r} of {n} busy after the table"
            );
        }
    }
}

#[test]
fn a_registration_invalidated_after_free_is_made_anew_and_the_old_key_is_refused() {
    // With host registrations cached (`cache_host`: the user vouches that buffers are not
    // freed behind rcomm's back, or a memory monitor calls `invalidate`).
    let p = IbParams {
        cache_host: true,
        ..params(4, 64, 1)
    };
    let mut cl = Cluster::new(2, p, SimConfig::default(), false);
    let buf = vec![7u8; 4096];
    let m = rcomm_transport::mem::MemRef::host(buf.as_ptr() as u64, buf.len());
    let ep = cl.engines[0]
        .net_mut()
        .transport_mut::<IbEndpoint<AnyVerbs>>()
        .unwrap();
    let k1 = ep.register(1, &m).unwrap();
    let k2 = ep.register(1, &m).unwrap();
    assert_eq!(
        k1.as_bytes(),
        k2.as_bytes(),
        "a reused buffer hits the cache"
    );
    assert_eq!(ep.registrations(), 1);
    // Both rendezvous end: cached (cache_host), not deregistered.
    ep.release(&m);
    ep.release(&m);
    assert_eq!(ep.registrations(), 1);
    // The buffer is freed and its range reused: the old registration goes.
    ep.invalidate(m.addr, m.len as u64);
    assert_eq!(ep.registrations(), 0);
    let k3 = ep.register(1, &m).unwrap();
    assert_ne!(
        k1.as_bytes(),
        k3.as_bytes(),
        "registered anew, with a new key"
    );
    // Rank 1 reading with the stale key is refused by the fabric: an error, not stale bytes.
    let mut dst = vec![0u8; 4096];
    let d = rcomm_transport::mem::MemRef::host(dst.as_mut_ptr() as u64, dst.len());
    struct Sink(Vec<(u32, u64, bool)>);
    impl rcomm_transport::net::Deliver for Sink {
        fn incoming(&mut self, _: u32, _: rcomm_transport::transport::Incoming<'_>) {}
        fn place(&mut self, _: u32, _: u64, _: u64, _: usize) -> Option<&mut [u8]> {
            None
        }
        fn placed(&mut self, _: u32, _: u64, _: u64, _: usize) {}
        fn completed(
            &mut self,
            peer: u32,
            tok: u64,
            res: Result<(), rcomm_transport::error::TransportError>,
        ) {
            self.0.push((peer, tok, res.is_ok()));
        }
    }
    let mut sink = Sink(Vec::new());
    let ep1 = cl.engines[1]
        .net_mut()
        .transport_mut::<IbEndpoint<AnyVerbs>>()
        .unwrap();
    ep1.get(0, d, &k1, 42).unwrap();
    let mut err = None;
    for _ in 0..1000 {
        cl.fabric.step();
        if let Err(e) = cl.engines[1]
            .net_mut()
            .transport_mut::<IbEndpoint<AnyVerbs>>()
            .unwrap()
            .progress(64, &mut sink)
        {
            err = Some(e.to_string());
            break;
        }
    }
    assert_eq!(sink.0, vec![(0, 42, false)], "the READ completed in error");
    assert!(err.unwrap().contains("refused access"));
    assert!(dst.iter().all(|&b| b == 0), "no byte moved");
}

#[test]
fn device_buffers_go_by_gpudirect_rdma_or_stage_through_host_memory_in_every_pairing() {
    // The GPU stand-in (host memory behind the device interface; not a GPU). Without
    // GPUDirect RDMA the engine stages device memory through host memory in chunks over the
    // eager rings (STREAM); with it (`gdr`, the stand-in's "dma-buf" registering its memory
    // on the simulated fabric) every rendezvous is one RDMA READ, device memory on either
    // side, and no chunk moves.
    use rcomm_transport::gpu::use_standin;
    let g = use_standin().expect("the stand-in");
    assert_eq!(g.backend_name(), "stand-in", "a real GPU in a unit test?");
    let sizes = [0usize, 1, 63, 65, 1000, 5000, 40_000];
    let rndv: u64 = sizes.iter().filter(|&&l| l > 256).map(|&l| l as u64).sum();
    for gdr in [false, true] {
        for (src_dev, dst_dev) in [(true, false), (false, true), (true, true)] {
            let n = 3;
            let p = IbParams {
                gdr,
                ..params(4, 256, 1)
            };
            let mut cl = Cluster::new(n, p, SimConfig::default(), false);
            let mut host: Vec<Vec<u8>> = Vec::new();
            let mut dev: Vec<u64> = Vec::new();
            let mut region = |dev_side: bool, data: &[u8]| -> (Region, usize) {
                if dev_side {
                    let a = g.alloc(0, data.len()).expect("alloc");
                    if !data.is_empty() {
                        g.copy_htod(a, data).expect("fill");
                    }
                    dev.push(a);
                    (Region::device(a, data.len(), 0), dev.len() - 1)
                } else {
                    host.push(data.to_vec());
                    let v = host.last_mut().unwrap();
                    (Region::from_mut(v), usize::MAX)
                }
            };
            let mut reqs = Vec::new();
            let mut checks = Vec::new();
            for f in 0..n {
                for t in (0..n).filter(|&t| t != f) {
                    for (i, &len) in sizes.iter().enumerate() {
                        let want = pattern(f, t, i, len);
                        let (rr, _) = region(dst_dev, &vec![0xEE; len]);
                        let q = cl.engines[t]
                            .irecv(0, Source::Rank(f as u32), TagSel::Tag(i as i32), rr, "recv")
                            .unwrap();
                        reqs.push((t, q));
                        checks.push((rr, want.clone()));
                        let (sr, _) = region(src_dev, &want);
                        let q = cl.engines[f]
                            .isend(0, t as u32, i as i32, sr, "send")
                            .unwrap();
                        reqs.push((f, q));
                    }
                }
            }
            for (r, q) in reqs {
                cl.wait(r, q)
                    .unwrap_or_else(|e| panic!("{src_dev}/{dst_dev}: {e}"));
            }
            for (reg, want) in checks {
                let got = if reg.is_device() {
                    let mut v = vec![0u8; want.len()];
                    if !v.is_empty() {
                        g.copy_dtoh(&mut v, reg.addr()).expect("read");
                    }
                    v
                } else {
                    reg.bytes().to_vec()
                };
                assert!(got == want, "{src_dev}/{dst_dev}: {} bytes", want.len());
            }
            for r in 0..n {
                let ib = cl.ib(r);
                let what = format!("gdr {gdr}, {src_dev}/{dst_dev}, rank {r}: {ib:?}");
                if gdr {
                    assert_eq!(ib.bytes_cma, rndv * (n as u64 - 1), "all by READ: {what}");
                    assert!(ib.bytes_recv < 1000 * n as u64, "no chunks: {what}");
                } else {
                    assert_eq!(ib.bytes_cma, 0, "nothing by READ: {what}");
                    assert!(ib.bytes_recv >= rndv * (n as u64 - 1), "chunks: {what}");
                }
            }
            for a in dev {
                g.free(a).expect("free");
            }
        }
    }
}

#[test]
fn two_rails_stripe_every_size_and_keep_mpi_order_across_rails_and_qps() {
    // Two HCAs per rank, two QPs per rail: messages and RDMA spread over four QPs on two
    // rails; bytes exact, order kept, and both rails carry traffic.
    let sim = SimConfig {
        seed: Some(3),
        packets_per_step: 1,
        step_ns: 500,
    };
    let mut cl = Cluster::with_rails(&[2, 2, 2], params(8, 256, 2), sim, false);
    let sizes = [0usize, 5, 256, 257, 3000, 100_000];
    let mut reqs = Vec::new();
    let mut checks = Vec::new();
    let sends: Vec<Vec<u8>> = (0..3 * 3 * 30)
        .map(|k| pattern(k / 90, (k / 30) % 3, k % 30, sizes[k % sizes.len()]))
        .collect();
    let mut recvs: Vec<Vec<u8>> = sends.iter().map(|m| vec![0xEE; m.len()]).collect();
    for f in 0..3 {
        for t in (0..3).filter(|&t| t != f) {
            for i in 0..30 {
                let k = (f * 3 + t) * 30 + i;
                let q = cl.engines[t]
                    .irecv(
                        0,
                        Source::Rank(f as u32),
                        TagSel::Tag(4),
                        Region::from_mut(&mut recvs[k]),
                        "recv",
                    )
                    .unwrap();
                reqs.push((t, q));
                checks.push(k);
                let q = cl.engines[f]
                    .isend(0, t as u32, 4, Region::from_ref(&sends[k]), "send")
                    .unwrap();
                reqs.push((f, q));
            }
        }
    }
    for (r, q) in reqs {
        cl.wait(r, q).unwrap();
    }
    for k in checks {
        assert!(recvs[k] == sends[k], "message {k}: out of order or corrupt");
    }
    for r in 0..3 {
        let rails = cl.engines[r]
            .net()
            .transport::<IbEndpoint<AnyVerbs>>()
            .unwrap()
            .rails();
        assert_eq!(rails.len(), 2);
        for (dev, _, bytes) in &rails {
            assert!(
                *bytes > 10_000,
                "rank {r}: rail {dev} carried {bytes} bytes: {rails:?}"
            );
        }
    }
}

#[test]
fn ranks_with_different_rail_counts_use_the_rails_they_share() {
    let mut cl = Cluster::with_rails(&[2, 1, 3], params(4, 128, 1), SimConfig::default(), false);
    let m = pattern(0, 1, 0, 50_000);
    let mut b = vec![0u8; m.len()];
    let s = cl.engines[0]
        .isend(0, 1, 0, Region::from_ref(&m), "send")
        .unwrap();
    let r = cl.engines[1]
        .irecv(
            0,
            Source::Rank(0),
            TagSel::Tag(0),
            Region::from_mut(&mut b),
            "recv",
        )
        .unwrap();
    let m2 = pattern(2, 0, 0, 50_000);
    let mut b2 = vec![0u8; m2.len()];
    let s2 = cl.engines[2]
        .isend(0, 0, 0, Region::from_ref(&m2), "send")
        .unwrap();
    let r2 = cl.engines[0]
        .irecv(
            0,
            Source::Rank(2),
            TagSel::Tag(0),
            Region::from_mut(&mut b2),
            "recv",
        )
        .unwrap();
    for (rk, q) in [(1, r), (0, s), (0, r2), (2, s2)] {
        cl.wait(rk, q).unwrap();
    }
    assert_eq!((b, b2), (m, m2));
    // No peer has a third rail: rank 2's third HCA carries nothing; rank 0 read the 50 kB.
    let rails = cl.engines[2]
        .net()
        .transport::<IbEndpoint<AnyVerbs>>()
        .unwrap()
        .rails();
    assert!(rails[0].2 > 0 && rails[2].2 == 0, "{rails:?}");
    let r0: u64 = cl.engines[0]
        .net()
        .transport::<IbEndpoint<AnyVerbs>>()
        .unwrap()
        .rails()
        .iter()
        .map(|r| r.2)
        .sum();
    assert!(r0 >= 50_000, "{r0}");
}

#[test]
fn a_freed_device_buffer_is_never_served_from_the_registration_cache() {
    // GPUDirect RDMA registrations are checked against the allocation (its id changes when
    // an address is freed and allocated again): a freed range is refused, not served from
    // the cache, and a new allocation gets its own registration.
    use rcomm_transport::gpu::use_standin;
    use rcomm_transport::mem::{MemKind, MemRef};
    let g = use_standin().expect("the stand-in");
    let p = IbParams {
        gdr: true,
        ..params(4, 64, 1)
    };
    let mut cl = Cluster::new(2, p, SimConfig::default(), false);
    let a = g.alloc(0, 8192).unwrap();
    let m = MemRef {
        addr: a,
        len: 8192,
        kind: MemKind::Cuda { device: 0 },
    };
    let ep = cl.engines[0]
        .net_mut()
        .transport_mut::<IbEndpoint<AnyVerbs>>()
        .unwrap();
    let k1 = ep.register(1, &m).unwrap();
    assert_eq!(
        ep.register(1, &m).unwrap().as_bytes(),
        k1.as_bytes(),
        "cached"
    );
    g.free(a).unwrap();
    let e = ep.register(1, &m).unwrap_err().to_string();
    assert!(e.contains("not device memory"), "{e}");
    let b = g.alloc(0, 8192).unwrap();
    let k2 = ep.register(1, &MemRef { addr: b, ..m }).unwrap();
    assert_ne!(
        k1.as_bytes(),
        k2.as_bytes(),
        "a new allocation, a new registration"
    );
    g.free(b).unwrap();
}
