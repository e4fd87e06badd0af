//! Bad input is an error, never a panic, and leaves the destination untouched.

use rcomm_kernels::{
    Dtype, Isa, KernelError, Op, finalize_avg, finalize_avg_typed, reduce_into, reduce_into_typed,
    reduce_into_with, reduce3, reduce3_typed, reduce3_with,
};

#[test]
fn length_mismatch_is_an_error() {
    for isa in Isa::supported() {
        let mut dst = [7u8; 8];
        let e = reduce_into_with(isa, Op::Sum, Dtype::I32, &mut dst, &[0u8; 12]).unwrap_err();
        assert_eq!(e, KernelError::LengthMismatch { dst: 8, src: 12 });
        assert_eq!(dst, [7u8; 8]);

        let mut out = [7u8; 8];
        let e = reduce3_with(isa, Op::Sum, Dtype::I32, &mut out, &[0u8; 8], &[0u8; 4]).unwrap_err();
        assert_eq!(e, KernelError::LengthMismatch { dst: 8, src: 4 });
        let e =
            reduce3_with(isa, Op::Sum, Dtype::I32, &mut out, &[0u8; 16], &[0u8; 8]).unwrap_err();
        assert_eq!(e, KernelError::LengthMismatch { dst: 8, src: 16 });
        assert_eq!(out, [7u8; 8]);
    }
    let mut d = [1.0f64; 3];
    assert_eq!(
        reduce_into_typed(Op::Max, &mut d, &[0.0; 2]),
        Err(KernelError::LengthMismatch { dst: 24, src: 16 })
    );
    let mut o = [0u16; 3];
    assert!(reduce3_typed(Op::Min, &mut o, &[1; 3], &[1; 4]).is_err());
    assert_eq!(o, [0; 3]);
}

#[test]
fn partial_element_is_an_error() {
    for dtype in Dtype::ALL.into_iter().filter(|d| d.size() > 1) {
        let len = 3 * dtype.size() + 1;
        let mut dst = vec![9u8; len];
        let e = reduce_into(Op::Sum, dtype, &mut dst, &vec![0u8; len]).unwrap_err();
        assert_eq!(e, KernelError::NotMultiple { len, dtype });
        let e = reduce3(Op::Min, dtype, &mut dst, &vec![0u8; len], &vec![0u8; len]).unwrap_err();
        assert_eq!(e, KernelError::NotMultiple { len, dtype });
        let e = finalize_avg(dtype, &mut dst, 2).unwrap_err();
        assert_eq!(e, KernelError::NotMultiple { len, dtype });
        assert!(dst.iter().all(|&b| b == 9));
        assert!(e.to_string().contains(dtype.name()));
    }
}

#[test]
fn bitwise_ops_on_floats_are_errors() {
    for dtype in Dtype::ALL.into_iter().filter(|d| d.is_float()) {
        for op in [Op::BAnd, Op::BOr, Op::BXor] {
            for isa in Isa::supported() {
                let mut dst = vec![3u8; 4 * dtype.size()];
                let src = vec![5u8; 4 * dtype.size()];
                let want = KernelError::OpNotDefined { op, dtype };
                assert_eq!(
                    reduce_into_with(isa, op, dtype, &mut dst, &src),
                    Err(want.clone())
                );
                assert_eq!(
                    reduce3_with(isa, op, dtype, &mut dst, &src, &src),
                    Err(want.clone())
                );
                // Even on empty buffers: the op is wrong whatever the data.
                assert_eq!(reduce_into_with(isa, op, dtype, &mut [], &[]), Err(want));
                assert!(dst.iter().all(|&b| b == 3));
            }
        }
    }
    let mut f = [1.0f32];
    assert!(reduce_into_typed(Op::BXor, &mut f, &[2.0]).is_err());
}

#[test]
fn unknown_names_are_errors() {
    let e = "sse2".parse::<Isa>().unwrap_err();
    assert!(e.to_string().contains("avx512, avx2, portable"), "{e}");
    assert!("mean".parse::<Op>().is_err());
    assert!("f8".parse::<Dtype>().is_err());
    assert_eq!(" AVX512 ".parse::<Isa>(), Ok(Isa::Avx512));
    assert_eq!("Portable".parse::<Isa>(), Ok(Isa::Portable));
}

#[test]
fn unavailable_isa_is_an_error() {
    let missing: Vec<Isa> = Isa::ALL.into_iter().filter(|i| !i.is_supported()).collect();
    if missing.is_empty() {
        rcomm_testkit::skip_hardware("this CPU supports every kernel ISA, so none is unavailable");
    }
    for isa in missing {
        let mut d = [1u8; 4];
        let e = reduce_into_with(isa, Op::Sum, Dtype::U8, &mut d, &[1; 4]).unwrap_err();
        assert!(matches!(e, KernelError::IsaUnavailable { isa: i, .. } if i == isa));
        assert_eq!(d, [1; 4]);
        assert!(rcomm_kernels::set_isa(isa).is_err());
    }
}

#[test]
fn zero_count_average_is_an_error() {
    let mut d = [4i32, 8];
    assert_eq!(finalize_avg_typed(&mut d, 0), Err(KernelError::ZeroCount));
    assert_eq!(d, [4, 8]);
}

#[test]
fn empty_buffers_are_fine() {
    for isa in Isa::supported() {
        for dtype in Dtype::ALL {
            for op in Op::ALL.into_iter().filter(|o| o.is_defined_for(dtype)) {
                reduce_into_with(isa, op, dtype, &mut [], &[]).unwrap();
                reduce3_with(isa, op, dtype, &mut [], &[], &[]).unwrap();
            }
            finalize_avg(dtype, &mut [], 3).unwrap();
        }
    }
}

#[test]
fn same_buffer_for_both_operands() {
    for isa in Isa::supported() {
        let a: Vec<u8> = bytemuck::cast_slice(&[1.5f32, -2.0, 3.0, 0.25]).to_vec();
        let mut out = vec![0u8; a.len()];
        reduce3_with(isa, Op::Prod, Dtype::F32, &mut out, &a, &a).unwrap();
        assert_eq!(
            bytemuck::cast_slice::<u8, f32>(&out),
            &[2.25, 4.0, 9.0, 0.0625]
        );
    }
}
