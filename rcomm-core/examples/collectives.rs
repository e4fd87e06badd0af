//! The collectives part of the book's using.md, as a program (built by `cargo test`, so the book's
//! example keeps compiling): `rcomm-run -n 4 target/release/examples/collectives`.

use rcomm::{Op, SplitType, UserOp};

fn main() -> Result<(), rcomm::CommError> {
    let world = rcomm::init()?;
    let (rank, size) = (world.rank(), world.size());

    let mut grads = vec![1.0f32; 1 << 20];
    world.allreduce_in_place(&mut grads, Op::Sum)?; // identical bytes on every rank
    assert!(grads.iter().all(|&g| g == size as f32));

    // Non-blocking: the request owns the buffer and hands the result back.
    let req = world.iallreduce(vec![rank as f64; 1 << 16], Op::Avg)?;
    let avg = req.wait()?;
    assert!(avg.iter().all(|&a| a == f64::from(size - 1) / 2.0));

    // User-defined reductions: `inout = input ⊕ inout`, combined in rank order when not
    // commutative.
    let matmul = UserOp::<[u64; 4]>::new(false, |input, inout| {
        for (a, b) in input.iter().zip(inout.iter_mut()) {
            *b = [
                (a[0] * b[0] + a[1] * b[2]) % 1_000_003,
                (a[0] * b[1] + a[1] * b[3]) % 1_000_003,
                (a[2] * b[0] + a[3] * b[2]) % 1_000_003,
                (a[2] * b[1] + a[3] * b[3]) % 1_000_003,
            ];
        }
    });
    let mut m = vec![[u64::from(rank) + 2, 1, 0, 1]; 4];
    world.allreduce_in_place(&mut m, &matmul)?; // m₀ · m₁ · … · mₙ₋₁

    // Forcing an algorithm for one handle (every rank must do the same), and shared buffers.
    world
        .with_algo("allreduce", "ring")?
        .allreduce_in_place(&mut grads, Op::Sum)?;
    let node = world.split_type(SplitType::Node)?;
    let mut shared = node.alloc_shared::<f32>(1 << 20)?; // peers read it in place
    shared.fill(1.0);
    node.allreduce_shared(&mut shared, Op::Sum)?;
    assert!(shared.iter().all(|&x| x == node.size() as f32));
    if rank == 0 {
        println!("collectives ok on {size} ranks: m[0] = {:?}", m[0]);
    }
    Ok(())
}
