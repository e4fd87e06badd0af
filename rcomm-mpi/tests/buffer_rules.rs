//! MPI's buffer rules in the facade's varcount collectives (docs/mpi-coverage.md, "Buffer
//! lengths"), in a world of one: a buffer may be longer than what its counts and
//! displacements address (MPI-3.1 §5.5-§5.8); what they address must lie in it. Multi-rank
//! forms of the same rules run in tests/tests/buffer_rules.rs over the core.

use mpi::datatype::{Partition, PartitionMut};
use mpi::traits::*;

const PAD: i32 = -1;

/// A part outside its buffer ends the job with a message (never a read or write past the
/// end); run in a child process of this test binary, since it ends the process.
const CHILD: &str = "FACADE_BUFLEN_CHILD";

#[test]
fn varcount_buffers_may_be_longer_than_their_parts_and_parts_must_lie_inside() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let root = world.process_at_rank(0);
    let src: Vec<i32> = (0..10).collect();

    // §5.6 (MPI_Scatterv): the send buffer holds 10 elements, the part is 4 at 3.
    let mut got = [PAD; 4];
    let counts = [4];
    let displs = [3];
    root.scatter_varcount_into_root(
        &Partition::new(&src[..], &counts[..], &displs[..]),
        &mut got[..],
    );
    assert_eq!(got, [3, 4, 5, 6]);

    // §5.7 (MPI_Allgatherv): the receive buffer of 9 gets 3 elements at 5, the rest untouched.
    let mut recv = [PAD; 9];
    world.all_gather_varcount_into(
        &src[..3],
        &mut PartitionMut::new(&mut recv[..], &[3][..], &[5][..]),
    );
    assert_eq!(recv, [PAD, PAD, PAD, PAD, PAD, 0, 1, 2, PAD]);

    // §5.5 (MPI_Gatherv) at the root, the same.
    let mut recv = [PAD; 6];
    root.gather_varcount_into_root(
        &src[7..9],
        &mut PartitionMut::new(&mut recv[..], &[2][..], &[1][..]),
    );
    assert_eq!(recv, [PAD, 7, 8, PAD, PAD, PAD]);

    // §5.8 (MPI_Alltoallv): both buffers longer than their parts.
    let mut recv = [PAD; 7];
    world.all_to_all_varcount_into(
        &Partition::new(&src[..], &[2][..], &[6][..]),
        &mut PartitionMut::new(&mut recv[..], &[2][..], &[4][..]),
    );
    assert_eq!(recv, [PAD, PAD, PAD, PAD, 6, 7, PAD]);
    drop(universe);

    // A part reaching past its buffer: the child ends with the facade's message.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "part_outside_its_buffer_child", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child should fail\n{err}");
    assert!(
        err.contains(
            "varcount send buffer: part 0 (elements 8..12) lies outside the buffer of 10 elements"
        ),
        "{err}"
    );
}

/// The child: scatters a part of 4 at 8 from a buffer of 10.
#[test]
fn part_outside_its_buffer_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let src: Vec<i32> = (0..10).collect();
    let mut got = [PAD; 4];
    world
        .process_at_rank(0)
        .scatter_varcount_into_root(&Partition::new(&src[..], &[4][..], &[8][..]), &mut got[..]);
    unreachable!("the part lies outside its buffer: got {got:?}");
}
