//! The facade in a world of one (no launcher needed): datatypes, derive, packing, reductions
//! with built-in and user operations, requests. Multi-rank behaviour is tested by running
//! rsmpi's own examples (tests/tests/rsmpi_examples.rs).

use mpi::collective::{SystemOperation, UserOperation};
use mpi::datatype::{MutView, UserDatatype, View};
use mpi::topology::Color;
use mpi::traits::*;
// The derive macro (with feature `derive` it is also in `mpi::traits`).
#[cfg(not(feature = "derive"))]
use rcomm_mpi_derive::Equivalence;

#[derive(Equivalence, Default, Debug, PartialEq, Clone, Copy)]
struct Particle {
    alive: bool,
    pos: [f64; 3],
    id: (u16, i8),
}

/// Counts its drops; a heap value, so a freed one would read back as garbage.
#[derive(Debug, Clone, PartialEq)]
struct Label(String);

impl CommAttribute for Label {
    const CLONE_ON_DUP: bool = true;
}

static LABEL_DROPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Drop for Label {
    fn drop(&mut self) {
        LABEL_DROPS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Attributes: a reference `get_attr` lent stays valid while the value is replaced through
/// another path to the same communicator (`&C` is a communicator); `duplicate` clones;
/// every value is dropped once, with its communicator.
fn attributes(world: &mpi::topology::SimpleCommunicator) {
    let drops = || LABEL_DROPS.load(std::sync::atomic::Ordering::SeqCst);
    let mut comm = world.duplicate();
    comm.set_attr(Label("first".repeat(40)));
    let lent: &Label = comm.get_attr::<Label>().unwrap();
    let mut path = &comm;
    path.set_attr(Label("second".into()));
    assert_eq!(
        lent.0,
        "first".repeat(40),
        "a lent reference outlives its replacement"
    );
    assert_eq!(comm.get_attr::<Label>().unwrap().0, "second");
    let dup = comm.duplicate();
    assert_eq!(dup.get_attr::<Label>().unwrap().0, "second");
    let before = drops();
    drop(comm);
    assert_eq!(
        drops() - before,
        2,
        "the replaced and the live value, with the communicator"
    );
    drop(dup);
    assert_eq!(drops() - before, 3);
}

#[test]
fn world_of_one() {
    assert!(!mpi::is_initialized());
    let universe = mpi::initialize().expect("first initialize");
    assert!(
        mpi::initialize().is_none(),
        "a second initialize is refused"
    );
    let world = universe.world();
    assert_eq!((world.rank(), world.size()), (0, 1));
    attributes(&world);
    // The environment is rcomm's: the level `initialize` asked for, the host name.
    assert_eq!(
        mpi::environment::threading_support(),
        mpi::Threading::Single
    );
    assert_eq!(rcomm::query_thread(), rcomm::ThreadLevel::Single);
    assert_eq!(
        mpi::environment::processor_name().unwrap(),
        rcomm::processor_name()
    );

    // A derived struct packs to its fields' bytes only (no padding) and back.
    let p = Particle {
        alive: true,
        pos: [1.5, -2.0, 3.25],
        id: (7, -3),
    };
    // A user reduction on the padded struct (27 data bytes in 40), locally and all-reduced.
    let add = UserOperation::associative(|x, y| {
        let x: &[Particle] = x.downcast().unwrap();
        let y: &mut [Particle] = y.downcast().unwrap();
        for (a, b) in x.iter().zip(y) {
            b.alive &= a.alive;
            for k in 0..3 {
                b.pos[k] = a.pos[k] + 2.0 * b.pos[k];
            }
            b.id = (a.id.0, b.id.1);
        }
    });
    let mut r = [p, p];
    r[1].pos[2] = 0.5;
    mpi::collective::reduce_local_into(&[p, p][..], &mut r[..], &add);
    assert_eq!(r[0].pos, [4.5, -6.0, 9.75]);
    assert_eq!((r[1].pos[2], r[1].id, r[1].alive), (4.25, (7, -3), true));
    let mut all = [Particle::default(); 2];
    world.all_reduce_into(&r[..], &mut all[..], &add);
    assert_eq!(all, r, "a world of one reduces to its own contribution");

    let packed = world.pack(&p);
    assert_eq!(
        packed.len(),
        1 + 3 * 8 + 2 + 1,
        "padding must not be packed"
    );
    let mut q = Particle::default();
    unsafe { world.unpack_into(&packed, &mut q, 0) };
    assert_eq!(p, q);

    // A vector type: every other element of 6, sent to itself, lands in the same places.
    let t = UserDatatype::vector(3, 1, 2, &i32::equivalent_datatype());
    let a = [1, 2, 3, 4, 5, 6];
    let mut b = [0; 6];
    {
        let v = unsafe { View::with_count_and_datatype(&a[..], 1, &t) };
        let mut w = unsafe { MutView::with_count_and_datatype(&mut b[..], 1, &t) };
        mpi::point_to_point::send_receive_into(
            &v,
            &world.this_process(),
            &mut w,
            &world.this_process(),
        );
    }
    assert_eq!(b, [1, 0, 3, 0, 5, 0]);

    // Reductions: built-in, logical on bool, user closure with downcast.
    let mut s = 0.0f64;
    world.all_reduce_into(&2.5f64, &mut s, SystemOperation::sum());
    assert_eq!(s, 2.5);
    let mut l = false;
    world.all_reduce_into(&true, &mut l, SystemOperation::logical_and());
    assert!(l);
    let op = UserOperation::commutative(|x, y| {
        let x: &[u64] = x.downcast().unwrap();
        let y: &mut [u64] = y.downcast().unwrap();
        for (a, b) in x.iter().zip(y) {
            *b = (*b).max(*a) * 10;
        }
    });
    let mut m = [0u64; 2];
    world.all_reduce_into(&[4u64, 9][..], &mut m[..], &op);
    assert_eq!(m, [4, 9], "one rank: the result is its own contribution");
    let mut c = 0u16;
    mpi::collective::reduce_local_into(&3u16, &mut c, SystemOperation::bitwise_or());
    assert_eq!(c, 3);

    // Requests: a receive posted before its send, completed in a scope.
    let mut got = [0u8; 4];
    mpi::request::scope(|scope| {
        let r = world
            .this_process()
            .immediate_receive_into(scope, &mut got[..]);
        world.this_process().send(&[9u8, 8, 7, 6][..]);
        let st = r.wait();
        assert_eq!(st.source_rank(), 0);
    });
    assert_eq!(got, [9, 8, 7, 6]);

    // Communicators: split, duplicate, names, groups.
    let half = world
        .split_by_color(Color::with_value(0))
        .expect("in the split");
    assert_eq!(half.size(), 1);
    assert!(world.split_by_color(Color::undefined()).is_none());
    assert_eq!(world.get_name(), "MPI_COMM_WORLD");
    let dup = world.duplicate();
    dup.set_name("dup");
    assert_eq!(dup.get_name(), "dup");
    assert_eq!(world.group().rank(), Some(0));
    rsmpi_items(&world);
    drop(universe);
    assert!(mpi::is_finalized());
}

/// Counts the ranks of any communicator, as generic rsmpi code does.
fn size_via<C: Communicator>(c: &C) -> mpi::Rank {
    c.size()
}

fn needs_unwind_safe<T: std::panic::UnwindSafe>() {}

/// Items of rsmpi's API that its examples leave out (tests/tests/rsmpi_items.rs lists them
/// all): what programs print, processes as communicators, conversions from MPI's constants.
fn rsmpi_items(world: &mpi::topology::SimpleCommunicator) {
    use mpi::topology::{CommunicatorRelation, GroupRelation, IntoTopology, Topology};

    // `Debug` of a status prints as rsmpi's: source and tag only.
    let mut got = [0u8; 2];
    let st = mpi::request::scope(|scope| {
        let r = world
            .this_process()
            .immediate_receive_into_with_tag(scope, &mut got[..], 7);
        world.this_process().send_with_tag(&[1u8, 2][..], 7);
        r.wait()
    });
    assert_eq!(format!("{st:?}"), "Status { source_rank: 0, tag: 7 }");
    assert_eq!(got, [1, 2]);

    // A process stands for its communicator (rsmpi: `Communicator`, `AsCommunicator`, the
    // collectives on `Process` and `AnyProcess`).
    let p = world.process_at_rank(0);
    assert_eq!((p.size(), p.target_size(), size_via(&p)), (1, 1, 1));
    assert_eq!(p.as_communicator().size(), 1);
    assert_eq!(size_via(&world.any_process()), 1);
    p.barrier();
    let mut sum = 0i64;
    p.all_reduce_into(&5i64, &mut sum, SystemOperation::sum());
    assert_eq!(sum, 5);
    assert_eq!(world.target_size(), 1);

    // Topology.
    assert_eq!(world.topology(), Topology::Undefined);
    assert!(matches!(
        world.duplicate().into_topology(),
        IntoTopology::Undefined(_)
    ));
    let cart = world
        .create_cartesian_communicator(&[1], &[true], false)
        .expect("a grid of one");
    assert_eq!(unsafe { cart.shift_unchecked(0, 1) }, (Some(0), Some(0)));
    assert_eq!(unsafe { cart.coordinates_to_rank_unchecked(&[0]) }, 0);

    // MPI's constants, as rsmpi converts them.
    assert_eq!(mpi::Threading::from(3), mpi::Threading::Multiple);
    assert_eq!(mpi::Threading::from(0), mpi::Threading::Single);
    assert_eq!(
        CommunicatorRelation::from(1),
        CommunicatorRelation::Congruent
    );
    assert_eq!(GroupRelation::from(2), GroupRelation::Similar);

    // Errors print rsmpi's messages.
    assert_eq!(
        mpi::MpiError::Spawn(2, 3).to_string(),
        "Failed to spawn 2 of 3 processes"
    );
    let nul: mpi::MpiError = std::ffi::CString::new("a\0b").unwrap_err().into();
    assert_eq!(nul.to_string(), "An interior 0 byte was found in string");
    assert!(std::error::Error::source(&nul).is_some());

    // `Default`, `Eq`, `Hash` on the static scope, as generic code bounds them.
    fn default_of<T: Default + Eq + std::hash::Hash>() -> T {
        T::default()
    }
    assert_eq!(
        default_of::<mpi::request::StaticScope>(),
        mpi::request::StaticScope
    );
    needs_unwind_safe::<mpi::request::Request<'static, [u8]>>();
}
