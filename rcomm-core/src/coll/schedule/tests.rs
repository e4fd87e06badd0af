use super::*;
use proptest::prelude::*;

/// Runs the schedules of all ranks in lock step, moving bytes by (src, dst) FIFO queues,
/// with integer sum as the op, and returns every rank's final buffer.
fn simulate(scheds: &[Schedule], inputs: Vec<Vec<u8>>, elem: usize) -> Vec<Vec<u8>> {
    let ins = inputs.clone();
    simulate_io(scheds, inputs, ins, elem)
}

fn simulate_io(
    scheds: &[Schedule],
    inputs: Vec<Vec<u8>>,
    ins: Vec<Vec<u8>>,
    elem: usize,
) -> Vec<Vec<u8>> {
    use std::collections::{HashMap, VecDeque};
    let n = scheds.len();
    let mut bufs = inputs;
    let mut tmps: Vec<Vec<u8>> = scheds.iter().map(|s| vec![0; s.tmp_len]).collect();
    let mut pc = vec![0usize; n];
    let mut posted = vec![false; n];
    let mut chan: HashMap<(usize, usize), VecDeque<Vec<u8>>> = HashMap::new();
    let mut progress = true;
    while progress {
        progress = false;
        for r in 0..n {
            let Some(ph) = scheds[r].phases.get(pc[r]) else {
                continue;
            };
            let input_r = ins[r].clone();
            let get = |b: &Vec<u8>, t: &Vec<u8>, c: Chunk| match c.buf {
                Buf::Data => b[c.off..c.off + c.len].to_vec(),
                Buf::Tmp => t[c.off..c.off + c.len].to_vec(),
                Buf::Input => input_r[c.off..c.off + c.len].to_vec(),
            };
            // Sends of a phase go out once (they do not wait); receives wait for data.
            if !posted[r] {
                posted[r] = true;
                progress = true;
                for st in &ph.xfers {
                    if let Step::Send { peer, src } = st {
                        let v = get(&bufs[r], &tmps[r], *src);
                        chan.entry((r, *peer as usize)).or_default().push_back(v);
                    }
                }
            }
            let recvs_ready = ph.xfers.iter().all(|st| match st {
                Step::Recv { peer, .. } => chan
                    .get(&(*peer as usize, r))
                    .is_some_and(|q| !q.is_empty()),
                _ => true,
            });
            if !recvs_ready {
                continue;
            }
            for st in &ph.xfers {
                if let Step::Recv { peer, dst } = st {
                    let v = chan
                        .get_mut(&(*peer as usize, r))
                        .unwrap()
                        .pop_front()
                        .unwrap();
                    assert_eq!(v.len(), dst.len);
                    match dst.buf {
                        Buf::Data => bufs[r][dst.off..dst.off + dst.len].copy_from_slice(&v),
                        Buf::Tmp => tmps[r][dst.off..dst.off + dst.len].copy_from_slice(&v),
                        Buf::Input => panic!("receive into the input buffer"),
                    }
                }
            }
            for st in &ph.local {
                if let Step::Copy { dst, src } = st {
                    let v = get(&bufs[r], &tmps[r], *src);
                    bufs[r][dst.off..dst.off + dst.len].copy_from_slice(&v);
                }
                if let Step::Reduce { dst, src, .. } = st {
                    let s = get(&bufs[r], &tmps[r], *src);
                    assert_eq!(dst.buf, Buf::Data);
                    for (d, s) in bufs[r][dst.off..dst.off + dst.len]
                        .chunks_mut(elem)
                        .zip(s.chunks(elem))
                    {
                        let a = u32::from_le_bytes(d.try_into().unwrap())
                            .wrapping_add(u32::from_le_bytes(s.try_into().unwrap()));
                        d.copy_from_slice(&a.to_le_bytes());
                    }
                }
            }
            pc[r] += 1;
            posted[r] = false;
            progress = true;
        }
    }
    for r in 0..n {
        assert_eq!(
            pc[r],
            scheds[r].phases.len(),
            "rank {r} stuck: deadlock in the schedule"
        );
    }
    bufs
}

fn input(r: usize, count: usize) -> Vec<u8> {
    (0..count)
        .flat_map(|i| ((r * 1000 + i * 7) as u32).to_le_bytes())
        .collect()
}

proptest! {
    #[test]
    fn allreduce_schedules_compute_the_sum_on_every_rank(n in 1u32..12, count in 0usize..40, ring in any::<bool>()) {
        let scheds: Vec<Schedule> = (0..n).map(|r| if ring { ring_allreduce(r, n, count, 4) } else { recursive_doubling_allreduce(r, n, count, 4) }).collect();
        let out = simulate(&scheds, (0..n as usize).map(|r| input(r, count)).collect(), 4);
        let want: Vec<u8> = (0..count).flat_map(|i| (0..n as usize).map(|r| (r * 1000 + i * 7) as u32).fold(0u32, u32::wrapping_add).to_le_bytes()).collect();
        for b in out {
            prop_assert_eq!(&b, &want);
        }
    }

    #[test]
    fn reduce_allgather_reduce_scatter_gather_scatter_alltoall_scan_schedules_are_right(n in 1u32..10, blk in 0usize..6, root_sel in any::<u32>()) {
        let root = root_sel % n;
        let nn = n as usize;
        let val = |r: usize, i: usize| (r * 1000 + i * 7) as u32;
        let blockv = |r: usize, b: usize| -> Vec<u8> { (0..blk).flat_map(|i| val(r, b * blk + i).to_le_bytes()).collect() };
        let sum_at = |upto: usize, i: usize| (0..upto).map(|r| val(r, i)).fold(0u32, u32::wrapping_add);
        let words = |v: &[u8]| -> Vec<u32> { v.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect() };
        // reduce
        let sc: Vec<_> = (0..n).map(|r| binomial_reduce(r, n, root, blk * 4)).collect();
        let out = simulate(&sc, (0..nn).map(|r| blockv(r, 0)).collect(), 4);
        prop_assert_eq!(words(&out[root as usize]), (0..blk).map(|i| sum_at(nn, i)).collect::<Vec<_>>());
        // allgather: each rank's own block in place
        let sc: Vec<_> = (0..n).map(|r| ring_allgather(r, n, blk * 4)).collect();
        let ins: Vec<Vec<u8>> = (0..nn).map(|r| { let mut v = vec![0u8; nn * blk * 4]; v[r * blk * 4..(r + 1) * blk * 4].copy_from_slice(&blockv(r, r)); v }).collect();
        let want: Vec<u8> = (0..nn).flat_map(|b| blockv(b, b)).collect();
        for o in simulate(&sc, ins, 4) { prop_assert_eq!(&o, &want); }
        // reduce_scatter: block r ends as the sum of every rank's block r
        let sc: Vec<_> = (0..n).map(|r| ring_reduce_scatter(r, n, blk * 4)).collect();
        let ins: Vec<Vec<u8>> = (0..nn).map(|r| (0..nn).flat_map(|b| blockv(r, b)).collect()).collect();
        let out = simulate(&sc, ins, 4);
        for (r, o) in out.iter().enumerate() {
            let want: Vec<u32> = (0..blk).map(|i| sum_at(nn, r * blk + i)).collect();
            prop_assert_eq!(words(&o[r * blk * 4..(r + 1) * blk * 4]), want);
        }
        // gather: root's own block in place, others send their input
        let sc: Vec<_> = (0..n).map(|r| linear_gather(r, n, root, blk * 4)).collect();
        let datas: Vec<Vec<u8>> = (0..nn).map(|r| { let mut v = vec![0u8; nn * blk * 4]; if r == root as usize { v[r * blk * 4..(r + 1) * blk * 4].copy_from_slice(&blockv(r, r)); } v }).collect();
        let ins: Vec<Vec<u8>> = (0..nn).map(|r| blockv(r, r)).collect();
        let out = simulate_io(&sc, datas, ins, 4);
        prop_assert_eq!(&out[root as usize], &(0..nn).flat_map(|b| blockv(b, b)).collect::<Vec<u8>>());
        // scatter
        let sc: Vec<_> = (0..n).map(|r| linear_scatter(r, n, root, blk * 4)).collect();
        let ins: Vec<Vec<u8>> = (0..nn).map(|_| (0..nn).flat_map(|b| blockv(root as usize, b)).collect()).collect();
        let datas: Vec<Vec<u8>> = (0..nn).map(|r| if r == root as usize { blockv(root as usize, r) } else { vec![0u8; blk * 4] }).collect();
        let out = simulate_io(&sc, datas, ins, 4);
        for (r, o) in out.iter().enumerate() { prop_assert_eq!(o, &blockv(root as usize, r)); }
        // alltoall: rank r's block b goes to rank b's block r
        let sc: Vec<_> = (0..n).map(|r| pairwise_alltoall(r, n, blk * 4)).collect();
        let ins: Vec<Vec<u8>> = (0..nn).map(|r| (0..nn).flat_map(|b| blockv(r, b)).collect()).collect();
        let datas: Vec<Vec<u8>> = (0..nn).map(|r| { let mut v = vec![0u8; nn * blk * 4]; v[r * blk * 4..(r + 1) * blk * 4].copy_from_slice(&blockv(r, r)); v }).collect();
        let out = simulate_io(&sc, datas, ins, 4);
        for (r, o) in out.iter().enumerate() { prop_assert_eq!(o, &(0..nn).flat_map(|b| blockv(b, r)).collect::<Vec<u8>>()); }
        // scans
        for exclusive in [false, true] {
            let sc: Vec<_> = (0..n).map(|r| chain_scan(r, n, blk * 4, exclusive)).collect();
            let out = simulate(&sc, (0..nn).map(|r| blockv(r, 0)).collect(), 4);
            for (r, o) in out.iter().enumerate() {
                let upto = if exclusive { r } else { r + 1 };
                if exclusive && r == 0 { continue; }
                prop_assert_eq!(words(o), (0..blk).map(|i| sum_at(upto, i)).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn bcast_schedules_deliver_the_root_buffer(n in 1u32..20, root_sel in any::<u32>(), bytes in 0usize..64) {
        let root = root_sel % n;
        let scheds: Vec<Schedule> = (0..n).map(|r| binomial_bcast(r, n, root, bytes)).collect();
        let inputs: Vec<Vec<u8>> = (0..n as usize).map(|r| vec![r as u8; bytes]).collect();
        let out = simulate(&scheds, inputs, 4);
        for b in out {
            prop_assert_eq!(&b, &vec![root as u8; bytes]);
        }
    }
}
