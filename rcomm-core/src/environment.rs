//! What an MPI program asks of its environment besides communicators: the clock
//! (`MPI_Wtime`, `MPI_Wtick`), the library's name and version, the standard's version, the
//! processor name, thread support levels (`MPI_Init_thread`, `MPI_Query_thread`) and local
//! reductions (`MPI_Reduce_local`).

use crate::{CommError, Element, Op, Result};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};
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

/// The version of the MPI standard whose semantics rcomm follows (`MPI_Get_version`):
/// (3, 1). rcomm implements a subset of it (docs/mpi-coverage.md says which), with errors
/// returned instead of handlers.
pub fn standard_version() -> (u32, u32) {
    (3, 1)
}

/// The name of the processor this process runs on (`MPI_Get_processor_name`): the node's
/// host name, as [`World::hostname`](crate::World::hostname) reports it (callable before
/// init).
pub fn processor_name() -> String {
    rcomm_runtime::identity::hostname()
}

/// Thread support levels (`MPI_THREAD_*`), ordered from least to most.
///
/// Every rcomm call is thread-safe at every level: communicators and requests may be used
/// from any thread at any time, and calls from several threads at once progress each other.
/// The level is what the program promises about its own use, and what [`init_thread`]
/// provides is what was asked for:
///
/// - `Single`: only one thread exists (rcomm itself starts none unless asked).
/// - `Funneled`: only the thread that called [`init_thread`] makes rcomm calls.
/// - `Serialized`: any thread may call, never two at once.
/// - `Multiple`: any thread may call at any time.
///
/// rcomm runs the same code at every level today (its waits already take a lock only
/// briefly); a lower level leaves room for a lock-free fast path later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ThreadLevel {
    /// `MPI_THREAD_SINGLE`.
    Single,
    /// `MPI_THREAD_FUNNELED`.
    Funneled,
    /// `MPI_THREAD_SERIALIZED`.
    Serialized,
    /// `MPI_THREAD_MULTIPLE`.
    Multiple,
}

/// The level [`init_thread`] provided; `Multiple` (what rcomm supports) otherwise.
static THREAD_LEVEL: AtomicU8 = AtomicU8::new(ThreadLevel::Multiple as u8);

/// [`init`](crate::init) with a thread support level (`MPI_Init_thread`): returns the world
/// and the level provided, which is `required` — rcomm supports every level (see
/// [`ThreadLevel`]). [`query_thread`] reports it afterwards.
pub fn init_thread(required: ThreadLevel) -> Result<(crate::World, ThreadLevel)> {
    let world = crate::init()?;
    THREAD_LEVEL.store(required as u8, Ordering::Relaxed);
    Ok((world, required))
}

/// The thread support level in force (`MPI_Query_thread`): what [`init_thread`] provided,
/// or `Multiple` when the world came from [`init`](crate::init).
pub fn query_thread() -> ThreadLevel {
    match THREAD_LEVEL.load(Ordering::Relaxed) {
        0 => ThreadLevel::Single,
        1 => ThreadLevel::Funneled,
        2 => ThreadLevel::Serialized,
        _ => ThreadLevel::Multiple,
    }
}

/// `inout[i] = input[i] ⊕ inout[i]` with a built-in op, on this rank only
/// (`MPI_Reduce_local`). [`Op::Avg`] has no meaning for two operands and is refused, as are
/// ops the type lacks (bitwise ops on floats). `input.len()` is the count: `inout` may be
/// longer (MPI-3.1 §5.9.7: both buffers hold `count` elements; the rest of a longer one is
/// left alone), not shorter.
pub fn reduce_local<T: Element>(input: &[T], inout: &mut [T], op: Op) -> Result<()> {
    if op == Op::Avg {
        return Err(CommError::InvalidArg(
            "reduce_local: Avg needs a contribution count; use Sum and divide".into(),
        ));
    }
    let Some(inout) = inout.get_mut(..input.len()) else {
        return Err(CommError::InvalidArg(format!(
            "reduce_local: input has {} elements, inout only {}",
            input.len(),
            inout.len()
        )));
    };
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
    fn thread_levels_are_provided_as_asked_and_the_environment_answers() {
        assert!(ThreadLevel::Single < ThreadLevel::Funneled);
        assert!(ThreadLevel::Serialized < ThreadLevel::Multiple);
        for want in [
            ThreadLevel::Funneled,
            ThreadLevel::Single,
            ThreadLevel::Multiple,
            ThreadLevel::Serialized,
        ] {
            let (w, got) = init_thread(want).unwrap();
            assert_eq!((got, query_thread()), (want, want));
            assert_eq!(processor_name(), w.hostname());
        }
        assert!(!processor_name().is_empty());
        assert_eq!(standard_version(), (3, 1));
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
        // The count is input's: a longer inout keeps its tail, a shorter one is refused.
        reduce_local(&[1.0f32], &mut f, Op::Sum).unwrap();
        assert_eq!(f, [2.75, 2.0]);
        assert!(reduce_local(&[1.0f32, 2.0, 3.0], &mut f, Op::Sum).is_err());
        assert_eq!(f, [2.75, 2.0], "a refused call leaves inout alone");
    }
}
