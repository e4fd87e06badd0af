//! Rank program: meshes. `rt_mesh LABELS CASE...`: `LABELS` names each world rank's node
//! (`0,0,1,1,...`: what the test set up, with `RCOMM_HOSTID` or real hosts); the expected
//! placement is computed here from them, independently of rcomm's. Cases:
//! - `shapes`: for several shapes, every rank's coordinates, `rank_at`, `coords_of`, the
//!   members of every dimension's communicator and of `sub`, `next`/`prev`, and whether each
//!   communicator is on one node;
//! - `warn`: a `tp` of 8 (and a chatty `pp`) that span nodes: a warning (the test reads
//!   stderr), and in strict mode an error on every rank, printed by rank 0 as `strict: <error>`;
//! - `ep`: `alltoallv` over the `ep` dimension against a reference;
//! - `device`: the `tp` communicator of a dp × pp × tp mesh all-reduces a `DeviceBuffer`
//!   (`allreduce_device`, plain and on a stream; a GPU or `RCOMM_GPU_STANDIN=1`) against the
//!   sum computed here from its members.
//!
//! Prints `ok <case>` (rank 0).
use rcomm::{Communicator, Mesh};

fn ok(w: &Communicator, case: &str) {
    w.barrier().unwrap();
    if w.rank() == 0 {
        println!("ok {case}");
    }
}

/// The expected placement: world ranks node by node (nodes in the order of their lowest
/// rank), in rank order within a node.
fn expected_order(labels: &[u32]) -> Vec<u32> {
    let mut nodes: Vec<u32> = Vec::new();
    for &l in labels {
        if !nodes.contains(&l) {
            nodes.push(l);
        }
    }
    nodes
        .iter()
        .flat_map(|&n| (0..labels.len() as u32).filter(move |&r| labels[r as usize] == n))
        .collect()
}

/// Row-major, last fastest.
fn coords(mut m: u32, sizes: &[u32]) -> Vec<u32> {
    let mut c = vec![0; sizes.len()];
    for i in (0..sizes.len()).rev() {
        c[i] = m % sizes[i];
        m /= sizes[i];
    }
    c
}

fn members(c: &Communicator) -> Vec<u32> {
    let mut all = vec![0u32; c.size() as usize];
    c.allgather(&[c.world_rank(c.rank()).unwrap()], &mut all)
        .unwrap();
    all
}

/// World ranks whose coordinates agree with `mine` outside the dimensions in `keep`, in
/// row-major order of the kept coordinates.
fn expected_members(order: &[u32], sizes: &[u32], mine: &[u32], keep: &[usize]) -> Vec<u32> {
    let mut v: Vec<(Vec<u32>, u32)> = (0..order.len() as u32)
        .map(|m| (coords(m, sizes), order[m as usize]))
        .filter(|(c, _)| (0..sizes.len()).all(|d| keep.contains(&d) || c[d] == mine[d]))
        .map(|(c, w)| (keep.iter().map(|&d| c[d]).collect(), w))
        .collect();
    v.sort();
    v.into_iter().map(|(_, w)| w).collect()
}

fn check_shape(w: &Communicator, labels: &[u32], dims: &[(&str, u32)]) {
    let (r, n) = (w.rank(), w.size());
    let sizes: Vec<u32> = dims.iter().map(|d| d.1).collect();
    let order = expected_order(labels);
    let mesh = Mesh::new(w, dims).unwrap();
    let m = order.iter().position(|&x| x == r).unwrap() as u32;
    let mine = coords(m, &sizes);
    assert_eq!(mesh.coords(), mine, "{dims:?}: rank {r}");
    assert_eq!(mesh.rank(), m);
    for mm in 0..n {
        assert_eq!(
            mesh.rank_at(&coords(mm, &sizes)).unwrap(),
            order[mm as usize]
        );
        assert_eq!(
            mesh.coords_of(order[mm as usize]).unwrap(),
            coords(mm, &sizes)
        );
    }
    // Every rank's coordinates, gathered: each coordinate tuple once.
    let mut all = vec![0u32; (n as usize) * sizes.len()];
    w.allgather(mesh.coords(), &mut all).unwrap();
    for (q, c) in all.chunks(sizes.len()).enumerate() {
        let mq = order.iter().position(|&x| x == q as u32).unwrap() as u32;
        assert_eq!(c, coords(mq, &sizes), "{dims:?}: rank {q}'s coordinates");
    }
    for (d, (name, size)) in dims.iter().enumerate() {
        let c = mesh.comm(name).unwrap();
        let want = expected_members(&order, &sizes, &mine, &[d]);
        assert_eq!(members(c), want, "{dims:?}: comm {name} of rank {r}");
        assert_eq!((c.size(), c.rank()), (*size, mine[d]));
        assert_eq!(mesh.coord(name).unwrap(), mine[d]);
        let one_node = want
            .iter()
            .all(|&x| labels[x as usize] == labels[r as usize]);
        assert_eq!(
            c.on_one_node(),
            one_node,
            "{dims:?}: comm {name} of rank {r}"
        );
        let next = mesh.next(name).unwrap();
        let prev = mesh.prev(name).unwrap();
        assert_eq!(next, (mine[d] + 1 < *size).then_some(mine[d] + 1));
        assert_eq!(prev, mine[d].checked_sub(1));
        // A message to the next stage arrives from the previous one.
        if let Some(nx) = next {
            c.send(&[r], nx, rcomm::Tag(3)).unwrap();
        }
        if let Some(pv) = prev {
            let mut got = [0u32];
            c.recv(&mut got, pv, rcomm::Tag(3)).unwrap();
            let mut pc = mine.clone();
            pc[d] -= 1;
            assert_eq!(got[0], mesh.rank_at(&pc).unwrap());
        }
    }
    // Every pair of dimensions as a sub-communicator (named in reverse: mesh order counts).
    for a in 0..dims.len() {
        for b in a + 1..dims.len() {
            let s = mesh.sub(&[dims[b].0, dims[a].0]).unwrap();
            let want = expected_members(&order, &sizes, &mine, &[a, b]);
            assert_eq!(
                members(&s),
                want,
                "{dims:?}: sub {}+{}",
                dims[a].0,
                dims[b].0
            );
        }
    }
    let all: Vec<&str> = dims.iter().map(|d| d.0).collect();
    assert_eq!(members(&mesh.sub(&all).unwrap()), order);
    ok(w, &format!("shape {dims:?}"));
}

fn warn(w: &Communicator) {
    // Non-strict: built, with a warning (the test reads it on stderr).
    let mesh = Mesh::new(w, &[("tp", 8)]).unwrap();
    assert_eq!(mesh.comm("tp").unwrap().size(), 8);
    let _ = Mesh::builder(w)
        .dims(&[("pp", 4), ("tp", 2)])
        .chatty("pp")
        .build()
        .unwrap();
    // Strict: an error on every rank.
    let e = Mesh::builder(w)
        .dims(&[("tp", 8)])
        .strict(true)
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("dimension tp of size 8 spans nodes"), "{e}");
    if w.rank() == 0 {
        println!("strict: {e}");
    }
    let e = Mesh::builder(w)
        .dims(&[("pp", 4), ("tp", 2)])
        .chatty("pp")
        .strict(true)
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("dimension pp of size 4 spans nodes"), "{e}");
    if w.rank() == 0 {
        println!("strict: {e}");
    }
    // A chatty dimension that fits: strict is satisfied.
    let m = Mesh::builder(w)
        .dims(&[("dp", 4), ("tp", 2)])
        .strict(true)
        .build()
        .unwrap();
    assert!(m.comm("tp").unwrap().on_one_node());
    ok(w, "warn");
}

/// `alltoallv` over `ep`: rank i of the ep communicator sends `i + 2j + 1` elements to rank j,
/// each naming (sender's world rank, destination, index).
fn ep(w: &Communicator) {
    let mesh = Mesh::new(w, &[("dp", 2), ("ep", 2), ("tp", 2)]).unwrap();
    let c = mesh.comm("ep").unwrap();
    let (i, p) = (c.rank() as usize, c.size() as usize);
    let me = w.rank();
    let val = |src: u32, dst: usize, k: usize| src * 10_000 + dst as u32 * 100 + k as u32;
    let send_counts: Vec<usize> = (0..p).map(|j| i + 2 * j + 1).collect();
    let recv_counts: Vec<usize> = (0..p).map(|s| s + 2 * i + 1).collect();
    let send: Vec<u32> = (0..p)
        .flat_map(|j| (0..send_counts[j]).map(move |k| val(me, j, k)))
        .collect();
    let mut recv = vec![0u32; recv_counts.iter().sum()];
    c.alltoallv(&send, &send_counts, &mut recv, &recv_counts)
        .unwrap();
    let want: Vec<u32> = (0..p)
        .flat_map(|s| {
            let src = c.world_rank(s as u32).unwrap();
            (0..recv_counts[s]).map(move |k| val(src, i, k))
        })
        .collect();
    assert_eq!(recv, want);
    // And non-blocking, with the tp communicator's allreduce in flight at the same time.
    let t = mesh.comm("tp").unwrap();
    let rt = t.iallreduce(vec![me; 4], rcomm::Op::Sum).unwrap();
    let re = c.ialltoallv(send, &send_counts, &recv_counts).unwrap();
    assert_eq!(re.wait().unwrap(), want);
    let tp_sum: u32 = members(t).iter().sum();
    assert_eq!(rt.wait().unwrap(), vec![tp_sum; 4]);
    ok(w, "ep");
}

/// `allreduce_device` over `tp` of a 2 × 2 × 2 mesh: each rank's `DeviceBuffer` holds values
/// naming (its world rank, index); the result, copied back, must be the sum over the tp
/// members (integers in f64: exact in any order). Then `Max` on a created stream.
fn device(w: &Communicator) {
    use rcomm::gpu::{self, DeviceBuffer};
    let mesh = Mesh::new(w, &[("dp", 2), ("pp", 2), ("tp", 2)]).unwrap();
    let t = mesh.comm("tp").unwrap();
    let devs = gpu::devices().unwrap().len() as u32;
    let local: u32 = std::env::var("RCOMM_LOCAL_RANK").map_or(0, |v| v.parse().unwrap());
    let dev = local % devs.max(1);
    let val = |r: u32, k: usize| f64::from(r) * 1000.0 + k as f64;
    let n = 1000;
    let mine: Vec<f64> = (0..n).map(|k| val(w.rank(), k)).collect();
    let mut buf = DeviceBuffer::from_host(dev, bytemuck::cast_slice(&mine)).unwrap();
    t.allreduce_device::<f64>(&mut buf, rcomm::Op::Sum).unwrap();
    let mut got = vec![0.0f64; n];
    buf.copy_to_host(bytemuck::cast_slice_mut(&mut got))
        .unwrap();
    let tp = members(t);
    assert_eq!(tp.len(), 2);
    let want: Vec<f64> = (0..n)
        .map(|k| tp.iter().map(|&r| val(r, k)).sum())
        .collect();
    assert_eq!(got, want, "tp sum on world rank {}", w.rank());
    // Stream-ordered, Max.
    buf.copy_from_host(bytemuck::cast_slice(&mine)).unwrap();
    let s = gpu::stream_create(dev).unwrap();
    t.allreduce_device_on::<f64>(&mut buf, rcomm::Op::Max, s)
        .unwrap();
    gpu::stream_synchronize(s).unwrap();
    gpu::stream_destroy(s).unwrap();
    buf.copy_to_host(bytemuck::cast_slice_mut(&mut got))
        .unwrap();
    let top = *tp.iter().max().unwrap();
    let want: Vec<f64> = (0..n).map(|k| val(top, k)).collect();
    assert_eq!(got, want, "tp max on world rank {}", w.rank());
    ok(w, "device");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let labels: Vec<u32> = args[1].split(',').map(|x| x.parse().unwrap()).collect();
    let w = rcomm::init().unwrap();
    assert_eq!(labels.len(), w.size() as usize, "one label per rank");
    for q in 0..w.size() {
        assert_eq!(
            w.same_node(q).unwrap(),
            labels[q as usize] == labels[w.rank() as usize],
            "the node layout is not the one the test meant"
        );
    }
    for case in &args[2..] {
        match case.as_str() {
            "shapes" => {
                let n = w.size();
                let shapes: Vec<Vec<(&str, u32)>> = vec![
                    vec![("all", n)],
                    vec![("dp", 2), ("tp", n / 2)],
                    vec![("dp", n / 2), ("tp", 2)],
                    vec![("dp", 2), ("pp", n / 4), ("tp", 2)],
                    vec![("one", 1), ("dp", n / 2), ("x", 1), ("y", 2)],
                    vec![("pp", n / 2), ("dp", 2)],
                ];
                for s in shapes {
                    check_shape(&w, &labels, &s);
                }
            }
            "warn" => warn(&w),
            "ep" => ep(&w),
            "device" => device(&w),
            other => panic!("unknown case {other}"),
        }
    }
}
