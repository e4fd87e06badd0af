//! Ranks pass a token around a ring and then ping-pong with rank 0, checking every byte.
//! Run: `rcomm-run -n 4 target/release/examples/pingpong`.
use rcomm::{Source, Tag};
use std::time::Instant;

fn main() -> Result<(), rcomm::CommError> {
    let world = rcomm::init()?;
    let (rank, size) = (world.rank(), world.size());
    // A token goes once around the ring, each rank adding its rank.
    if size > 1 {
        let mut token = [0u64; 1];
        if rank == 0 {
            world.send(&[0u64], 1, Tag(1))?;
            world.recv(&mut token, size - 1, Tag(1))?;
            let expect: u64 = (1..size as u64).sum();
            assert_eq!(token[0], expect, "ring token");
            println!("ring of {size} ranks: token {} as expected", token[0]);
        } else {
            world.recv(&mut token, rank - 1, Tag(1))?;
            world.send(&[token[0] + rank as u64], (rank + 1) % size, Tag(1))?;
        }
    }
    // Rank 0 ping-pongs with every other rank at a few sizes; payloads depend on (peer, size).
    for peer in 1..size {
        for len in [8usize, 4096, 1 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i as u32 * 7 + peer * 13) as u8).collect();
            let mut back = vec![0u8; len];
            if rank == 0 {
                let t = Instant::now();
                let iters = 50;
                for _ in 0..iters {
                    world.send(&data, peer, Tag(2))?;
                    world.recv(&mut back, peer, Tag(3))?;
                }
                assert_eq!(back, data);
                let us = t.elapsed().as_secs_f64() * 1e6 / iters as f64 / 2.0;
                println!(
                    "rank 0 <-> rank {peer} via {}: {len} B, {us:.2} us one way",
                    world.transport_to(peer)?
                );
            } else if rank == peer {
                for _ in 0..50 {
                    let st = world.recv(&mut back, Source::Rank(0), Tag(2))?;
                    assert_eq!(st.bytes, len);
                    world.send(&back, 0, Tag(3))?;
                }
            }
        }
    }
    Ok(())
}
