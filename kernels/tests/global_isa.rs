//! The process-wide ISA choice. Its own test binary (one test), so no other test races on it.

use rcomm_kernels::{Isa, Op, isa, reduce_into_typed, set_isa};

#[test]
fn set_isa_forces_the_path_and_refuses_missing_ones() {
    assert_eq!(isa(), Isa::best(), "default is the best supported path");
    for i in Isa::ALL {
        if i.is_supported() {
            set_isa(i).unwrap();
            assert_eq!(isa(), i);
            let mut d = [1u64, 2, 3, 4, 5, 6, 7, 8, 9];
            reduce_into_typed(Op::Sum, &mut d, &[1; 9]).unwrap();
            assert_eq!(d, [2, 3, 4, 5, 6, 7, 8, 9, 10]);
        } else {
            let before = isa();
            assert!(set_isa(i).is_err());
            assert_eq!(isa(), before, "a refused set_isa changes nothing");
        }
    }
    for i in Isa::ALL {
        assert_eq!(i.name().parse::<Isa>(), Ok(i));
    }
}
