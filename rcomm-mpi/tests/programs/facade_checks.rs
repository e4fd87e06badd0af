//! Checks of the facade that rsmpi's examples do not make, written against rsmpi's API only
//! (so it would build against rsmpi too). Built and run at 1-4 ranks by
//! tests/tests/rsmpi_examples.rs beside rsmpi's examples. Data depend on rank and position, so
//! a permuted or stale block fails.

use mpi::collective::SystemOperation;
use mpi::datatype::{MutView, Partition, PartitionMut, UserDatatype, View};
use mpi::topology::{Color, Rank};
use mpi::traits::*;
use mpi::Count;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let root = world.process_at_rank(0);

    // all_to_all_varcount: rank r sends j+1 values to rank j, each r*100 + j*10 + k.
    let send_counts: Vec<Count> = (0..size).map(|j| j + 1).collect();
    let send_displs: Vec<Count> = (0..size).map(|j| j * (j + 1) / 2).collect();
    let send: Vec<i32> = (0..size)
        .flat_map(|j| (0..=j).map(move |k| rank * 100 + j * 10 + k))
        .collect();
    let recv_counts: Vec<Count> = vec![rank + 1; size as usize];
    // Received blocks in reverse rank order, to check displacements are honoured.
    let recv_displs: Vec<Count> = (0..size).map(|i| (size - 1 - i) * (rank + 1)).collect();
    let mut recv = vec![-1i32; (size * (rank + 1)) as usize];
    {
        let s = Partition::new(&send[..], &send_counts[..], &send_displs[..]);
        let mut r = PartitionMut::new(&mut recv[..], &recv_counts[..], &recv_displs[..]);
        world.all_to_all_varcount_into(&s, &mut r);
    }
    for i in 0..size {
        for k in 0..=rank {
            let got = recv[((size - 1 - i) * (rank + 1) + k) as usize];
            assert_eq!(
                got,
                i * 100 + rank * 10 + k,
                "alltoallv from {i}, element {k}"
            );
        }
    }

    // A strided column (every third of 9) broadcast and all-gathered through views.
    let column = UserDatatype::vector(3, 1, 3, &i64::equivalent_datatype());
    let mut grid: Vec<i64> = (0..9)
        .map(|i| if rank == 0 { 1000 + i } else { -1 })
        .collect();
    {
        let mut v = unsafe { MutView::with_count_and_datatype(&mut grid[..], 1, &column) };
        root.broadcast_into(&mut v);
    }
    for (i, &g) in grid.iter().enumerate() {
        let want = if rank == 0 || i % 3 == 0 {
            1000 + i as i64
        } else {
            -1
        };
        assert_eq!(g, want, "broadcast column, element {i}");
    }
    let mine: Vec<i64> = (0..9).map(|i| rank as i64 * 10 + i).collect();
    // Every rank's column 0 becomes column r of a 3 x size row-major table.
    let col_of_table = UserDatatype::vector(3, 1, size, &i64::equivalent_datatype())
        .resized(0, std::mem::size_of::<i64>() as mpi::Address);
    let mut table = vec![-1i64; 3 * size as usize];
    {
        let s = unsafe { View::with_count_and_datatype(&mine[..], 1, &column) };
        let mut t =
            unsafe { MutView::with_count_and_datatype(&mut table[..], size, &col_of_table) };
        world.all_gather_into(&s, &mut t);
    }
    for row in 0..3 {
        for r in 0..size {
            assert_eq!(
                table[(row * size + r) as usize],
                r as i64 * 10 + row as i64 * 3,
                "table ({row}, {r})"
            );
        }
    }

    // Varcount gather where only the root knows every count.
    let part: Vec<u16> = (0..rank as u16).map(|k| rank as u16 * 10 + k).collect();
    if rank == 0 {
        let counts: Vec<Count> = (0..size).collect();
        let displs: Vec<Count> = (0..size).map(|r| r * (r - 1) / 2).collect();
        let mut all = vec![0u16; (size * (size - 1) / 2) as usize];
        {
            let mut p = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            root.gather_varcount_into_root(&part[..], &mut p);
        }
        let want: Vec<u16> = (0..size as u16)
            .flat_map(|r| (0..r).map(move |k| r * 10 + k))
            .collect();
        assert_eq!(all, want);
    } else {
        root.gather_varcount_into(&part[..]);
    }

    // Exclusive scan leaves rank 0's buffer alone; logical or over bools.
    let mut ex = -7i64;
    world.exclusive_scan_into(&(rank as i64 + 1), &mut ex, SystemOperation::sum());
    let want = if rank == 0 {
        -7
    } else {
        (rank as i64) * (rank as i64 + 1) / 2
    };
    assert_eq!(ex, want, "exscan");
    let mut any = false;
    world.all_reduce_into(&(rank == size - 1), &mut any, SystemOperation::logical_or());
    assert!(any);
    let mut maxf = 0.0f32;
    world.all_reduce_into(&(rank as f32 * 0.5), &mut maxf, SystemOperation::max());
    assert_eq!(maxf, (size - 1) as f32 * 0.5);

    // A receive that no message matches is cancelled and leaves its buffer untouched.
    let mut untouched = [42u8; 3];
    mpi::request::scope(|scope| {
        let r = world
            .any_process()
            .immediate_receive_into_with_tag(scope, &mut untouched[..], 999);
        r.cancel();
        r.wait();
    });
    assert_eq!(untouched, [42; 3]);
    world.barrier();

    // Split with a key that reverses the order.
    let rev = world
        .split_by_color_with_key(Color::with_value(0), size - rank)
        .expect("every rank has color 0");
    assert_eq!(rev.rank(), size - 1 - rank);
    let mut from_rev_root: Rank = -1;
    if rev.rank() == 0 {
        from_rev_root = rank;
    }
    rev.process_at_rank(0).broadcast_into(&mut from_rev_root);
    assert_eq!(from_rev_root, size - 1);

    // Buffered sends to every rank before anyone receives.
    let mut universe = universe;
    universe.set_buffer_size(64 * 1024);
    for r in 0..size {
        world
            .process_at_rank(r)
            .buffered_send_with_tag(&[rank, r][..], 5);
    }
    let mut seen = vec![false; size as usize];
    for _ in 0..size {
        let (v, st) = world.any_process().receive_vec_with_tag::<Rank>(5);
        assert_eq!(v, vec![st.source_rank(), rank]);
        seen[st.source_rank() as usize] = true;
    }
    assert!(seen.iter().all(|&s| s));
    universe.detach_buffer();
    world.barrier();
    if rank == 0 {
        println!("facade checks passed at {size} ranks");
    }
}
