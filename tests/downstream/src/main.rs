//! What a downstream user writes with rcomm-mpi, the rsmpi-compatible API (rcomm's own types
//! under it). Only built by scripts/downstream-check.sh; `rcomm-run -n 2` runs it.

use mpi::traits::*;

#[derive(Equivalence, Clone, Copy, Default)]
struct Pair {
    a: i32,
    b: f64,
}

fn main() {
    let universe = mpi::initialize().expect("rcomm-mpi init");
    let world = universe.world();
    let mut p = Pair::default();
    if world.rank() == 0 {
        p = Pair { a: 7, b: 0.5 };
    }
    world.process_at_rank(0).broadcast_into(&mut p);
    // The check the script relies on: a wrong broadcast ends the run with a failure.
    assert_eq!((p.a, p.b), (7, 0.5), "rank {}: the broadcast", world.rank());
    // rcomm's own types are there beside rsmpi's.
    let none: Option<rcomm::Status> = None;
    // The planner alone is the same crate rcomm re-exports as `rcomm::plan`.
    let _same: Option<rcomm_planner::Link> = None::<rcomm::plan::Link>;
    println!(
        "rank {} of {} has ({}, {}){}",
        world.rank(),
        world.size(),
        p.a,
        p.b,
        none.map_or(String::new(), |s| format!(", {s:?}"))
    );
}
