//! The book's groups and meshes chapter (book/src/guide/groups-and-meshes.md), as a program (built by `cargo test`, so it keeps
//! compiling): `rcomm-run -n 8 target/release/examples/mesh`. Any rank count works: the mesh
//! is dp × pp × tp with tp and pp of 2 where they divide it.

use rcomm::{Mesh, Op, Tag};

fn main() -> Result<(), rcomm::CommError> {
    let world = rcomm::init()?;
    let (rank, size) = (world.rank(), world.size());

    // Groups: ordered sets of world ranks, combined locally with MPI's rules.
    let evens = world
        .group()
        .incl(&(0..size).step_by(2).collect::<Vec<_>>())?;
    if let Some(c) = world.create(&evens)? {
        // Collective over the world; only members get a communicator.
        assert_eq!(c.world_rank(c.rank())?, rank);
        c.barrier()?;
    }

    let tp = if size.is_multiple_of(2) { 2 } else { 1 };
    let pp = if (size / tp).is_multiple_of(2) { 2 } else { 1 };
    let dp = size / (tp * pp);
    let mesh = Mesh::new(&world, &[("dp", dp), ("pp", pp), ("tp", tp)])?;
    let mut activ = vec![1.0f32; 1024];
    mesh.comm("tp")?.allreduce_in_place(&mut activ, Op::Sum)?;
    assert!(activ.iter().all(|&a| a == tp as f32));
    let [d, p, t] = mesh.coords() else {
        unreachable!("three dimensions")
    };
    let peer = mesh.rank_at(&[(d + 1) % dp, *p, *t])?; // the world rank at those coordinates
    let dp_tp = mesh.sub(&["dp", "tp"])?; // the ranks sharing this pp coordinate
    assert_eq!(dp_tp.size(), dp * tp);
    // A pipeline step: activations to the next stage, from the previous one.
    let pipe = mesh.comm("pp")?;
    if let Some(next) = mesh.next("pp")? {
        pipe.send(&activ, next, Tag(0))?;
    }
    if let Some(prev) = mesh.prev("pp")? {
        pipe.recv(&mut activ, prev, Tag(0))?;
    }
    println!(
        "rank {rank}: mesh rank {} at dp {d} pp {p} tp {t}; dp neighbour is world rank {peer}",
        mesh.rank()
    );

    // Strict: an error, rather than a warning, if tp (or a dimension marked chatty) would
    // span nodes. (Across nodes of fewer than 2 ranks this fails, and says why.)
    match Mesh::builder(&world)
        .dims(&[("dp", size / tp), ("ep", tp)])
        .chatty("ep")
        .strict(true)
        .build()
    {
        Ok(m) => {
            // All-to-all over the expert dimension.
            let ep = m.comm("ep")?;
            let send: Vec<u32> = (0..ep.size()).map(|j| rank * 100 + j).collect();
            let mut recv = vec![0u32; send.len()];
            ep.alltoall(&send, &mut recv)?;
        }
        Err(e) if rank == 0 => println!("strict mesh refused: {e}"),
        Err(_) => {}
    }
    Ok(())
}
