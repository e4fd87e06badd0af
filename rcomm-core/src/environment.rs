//! What an MPI program asks of its environment besides communicators: the clock
//! (`MPI_Wtime`, `MPI_Wtick`), the library's name and version, and local reductions
//! (`MPI_Reduce_local`).

use crate::{CommError, Element, Op, Result};
use std::sync::OnceLock;
use std::time::Instant;

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Seconds since an arbitrary moment in this process's past, on the monotonic clock
/// (`MPI_Wtime`). Differences between two calls time a region; values of different ranks are
/// not comparable (as `MPI_WTIME_IS_GLOBAL` false says in MPI).
pub fn wtime() -> f64 {
    epoch().elapsed().as_secs_f64()
}

/// The resolution of [`wtime`] in seconds (`MPI_Wtick`): the monotonic clock counts
/// nanoseconds.
pub fn wtick() -> f64 {
    1e-9
}

/// The library's name and version (`MPI_Get_library_version`), e.g. `rcomm 0.1.0`.
pub fn library_version() -> String {
    format!("rcomm {}", env!("CARGO_PKG_VERSION"))
}

/// `inout[i] = input[i] ⊕ inout[i]` with a built-in op, on this rank only
/// (`MPI_Reduce_local`). [`Op::Avg`] has no meaning for two operands and is refused, as are
/// ops the type lacks (bitwise ops on floats) and slices of different lengths.
pub fn reduce_local<T: Element>(input: &[T], inout: &mut [T], op: Op) -> Result<()> {
    if op == Op::Avg {
        return Err(CommError::InvalidArg(
            "reduce_local: Avg needs a contribution count; use Sum and divide".into(),
        ));
    }
    if input.len() != inout.len() {
        return Err(CommError::InvalidArg(format!(
            "reduce_local: input has {} elements, inout {}",
            input.len(),
            inout.len()
        )));
    }
    // rcomm's built-in ops are commutative, so inout ⊕ input is input ⊕ inout.
    rcomm_kernels::reduce_into_typed(op, inout, input)
        .map_err(|e| CommError::InvalidArg(format!("reduce_local: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_forward_at_its_tick() {
        let a = wtime();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = wtime();
        assert!(b - a >= 0.019, "{a} -> {b}");
        assert!(wtick() > 0.0 && wtick() <= 1e-6);
        assert!(library_version().starts_with("rcomm "));
    }

    #[test]
    fn reduce_local_matches_the_sequential_fold_and_refuses_what_has_no_meaning() {
        let input: Vec<i64> = (0..37).map(|i| i * 3 - 50).collect();
        for op in Op::ALL.into_iter().filter(|&o| o != Op::Avg) {
            let mut inout: Vec<i64> = (0..37).map(|i| 7 - i * i).collect();
            let want: Vec<i64> = input
                .iter()
                .zip(&inout)
                .map(|(&a, &b)| match op {
                    Op::Sum => a.wrapping_add(b),
                    Op::Prod => a.wrapping_mul(b),
                    Op::Min => a.min(b),
                    Op::Max => a.max(b),
                    Op::BAnd => a & b,
                    Op::BOr => a | b,
                    _ => a ^ b,
                })
                .collect();
            reduce_local(&input, &mut inout, op).unwrap();
            assert_eq!(inout, want, "{op:?}");
        }
        let mut f = [1.5f32, -2.0];
        reduce_local(&[0.25f32, 4.0], &mut f, Op::Sum).unwrap();
        assert_eq!(f, [1.75, 2.0]);
        assert!(reduce_local(&[1.0f32, 2.0], &mut f, Op::BXor).is_err());
        assert!(reduce_local(&[1.0f32, 2.0], &mut f, Op::Avg).is_err());
        assert!(reduce_local(&[1.0f32], &mut f, Op::Sum).is_err());
    }
}
