//! Reduction operations as the collectives see them: a built-in [`Op`] on a built-in dtype,
//! or a user closure on any `Pod` element type, declared commutative or not.

use crate::{CommError, Result};
use bytemuck::Pod;
use rcomm_kernels::{Dtype, Element, Op};
use std::marker::PhantomData;
use std::sync::Arc;

pub use super::schedule::Order;

type ErasedFn = dyn Fn(&[u8], &mut [u8]) + Send + Sync;

/// A user-defined reduction: `f(input, inout)` sets `inout[i] = input[i] ⊕ inout[i]` for every
/// `i` (MPI's convention). The function must be associative; declare it commutative only if it
/// is, because algorithms that combine in any other order than rank order are then allowed.
/// Non-commutative ops are combined in rank order: the result is `a₀ ⊕ a₁ ⊕ … ⊕ aₙ₋₁`.
///
/// Cloning is cheap (the closure is shared).
pub struct UserOp<T> {
    f: Arc<ErasedFn>,
    commutative: bool,
    _t: PhantomData<fn(T)>,
}

impl<T> Clone for UserOp<T> {
    fn clone(&self) -> Self {
        Self {
            f: self.f.clone(),
            commutative: self.commutative,
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for UserOp<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserOp")
            .field("commutative", &self.commutative)
            .finish_non_exhaustive()
    }
}

impl<T: Pod> UserOp<T> {
    /// Wraps `f(input, inout)`: `inout = input ⊕ inout`, element-wise. Both slices always have
    /// the same length.
    pub fn new(commutative: bool, f: impl Fn(&[T], &mut [T]) + Send + Sync + 'static) -> Self {
        let erased = move |input: &[u8], inout: &mut [u8]| {
            // Scratch buffers are byte vectors: borrow as `T` where aligned, copy where not.
            let copied_in;
            let a: &[T] = match bytemuck::try_cast_slice(input) {
                Ok(a) => a,
                Err(_) => {
                    copied_in = aligned_copy::<T>(input);
                    &copied_in
                }
            };
            match bytemuck::try_cast_slice_mut::<u8, T>(inout) {
                Ok(b) => f(a, b),
                Err(_) => {
                    let mut b = aligned_copy::<T>(inout);
                    f(a, &mut b);
                    inout.copy_from_slice(bytemuck::cast_slice(&b));
                }
            }
        };
        Self {
            f: Arc::new(erased),
            commutative,
            _t: PhantomData,
        }
    }

    /// Whether the op was declared commutative.
    pub fn is_commutative(&self) -> bool {
        self.commutative
    }
}

/// `bytes` (a whole number of `T`) copied into properly aligned storage.
fn aligned_copy<T: Pod>(bytes: &[u8]) -> Vec<T> {
    let mut v = vec![T::zeroed(); bytes.len() / size_of::<T>().max(1)];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(bytes);
    v
}

/// The reduction a collective applies: a built-in [`Op`] (for [`Element`] types) or a
/// [`UserOp`]. Functions taking `impl Into<ReduceOp<T>>` accept `Op::Sum` or `&my_user_op`.
#[derive(Debug)]
pub struct ReduceOp<T>(pub(crate) Reducer, PhantomData<fn(T)>);

impl<T> ReduceOp<T> {
    /// Wraps an erased reduction (for collectives composed of other collectives).
    pub(crate) fn erased(r: Reducer) -> Self {
        Self(r, PhantomData)
    }
}

impl<T: Element> From<Op> for ReduceOp<T> {
    fn from(op: Op) -> Self {
        Self(Reducer::Builtin(op, T::DTYPE), PhantomData)
    }
}

impl<T: Pod> From<&UserOp<T>> for ReduceOp<T> {
    fn from(u: &UserOp<T>) -> Self {
        Self(
            Reducer::User {
                f: u.f.clone(),
                elem: size_of::<T>(),
                commutative: u.commutative,
            },
            PhantomData,
        )
    }
}

impl<T: Pod> From<UserOp<T>> for ReduceOp<T> {
    fn from(u: UserOp<T>) -> Self {
        (&u).into()
    }
}

/// A type-erased reduction, cloned into non-blocking requests.
#[derive(Clone)]
pub(crate) enum Reducer {
    Builtin(Op, Dtype),
    User {
        f: Arc<ErasedFn>,
        elem: usize,
        commutative: bool,
    },
}

impl std::fmt::Debug for Reducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reducer::Builtin(op, d) => write!(f, "{op:?}<{d:?}>"),
            Reducer::User { commutative, .. } => {
                write!(f, "user op (commutative: {commutative})")
            }
        }
    }
}

impl Reducer {
    /// Checks the op is defined for its dtype.
    pub(crate) fn check(&self) -> Result<()> {
        match self {
            Reducer::Builtin(op, d) => op
                .check(*d)
                .map_err(|e| CommError::InvalidArg(e.to_string())),
            Reducer::User { .. } => Ok(()),
        }
    }

    pub(crate) fn commutative(&self) -> bool {
        match self {
            Reducer::Builtin(..) => true,
            Reducer::User { commutative, .. } => *commutative,
        }
    }

    /// `Some(op)` for a built-in op.
    pub(crate) fn builtin(&self) -> Option<Op> {
        match self {
            Reducer::Builtin(op, _) => Some(*op),
            Reducer::User { .. } => None,
        }
    }

    /// A short name for logs and errors.
    pub(crate) fn name(&self) -> String {
        match self {
            Reducer::Builtin(op, _) => op.name().to_string(),
            Reducer::User { commutative, .. } => {
                if *commutative {
                    "user(commutative)".into()
                } else {
                    "user(non-commutative)".into()
                }
            }
        }
    }

    /// Element type and reduction as the flight recorder's codes (`rcomm_runtime::flight`
    /// lists the names in the kernels' enum order; a test checks it).
    pub(crate) fn codes(&self) -> (u8, u8) {
        match self {
            Reducer::Builtin(op, d) => (*d as u8 + 1, *op as u8 + 1),
            Reducer::User { .. } => (0, rcomm_runtime::flight::redop_code("user op")),
        }
    }

    /// What ranks must agree on for a shared-memory reduction: op and dtype, or a user op of
    /// an element size.
    pub(crate) fn signature(&self) -> u64 {
        match self {
            Reducer::Builtin(op, d) => (*op as u64) << 8 | *d as u64,
            Reducer::User { elem, .. } => 1 << 40 | *elem as u64,
        }
    }

    /// Combines `src` into `dst` in the given operand order.
    pub(crate) fn apply(&self, dst: &mut [u8], src: &[u8], order: Order) -> Result<()> {
        if dst.len() != src.len() {
            return Err(CommError::InvalidArg(format!(
                "reduction of {} bytes with {} bytes",
                dst.len(),
                src.len()
            )));
        }
        match self {
            // Built-in ops are commutative bit for bit (the kernels canonicalise NaNs and
            // order ±0), so the operand order does not matter.
            Reducer::Builtin(op, d) => rcomm_kernels::reduce_into(*op, *d, dst, src)
                .map_err(|e| CommError::InvalidArg(e.to_string())),
            Reducer::User { f, elem, .. } => {
                if !dst.len().is_multiple_of(*elem) {
                    return Err(CommError::Size {
                        bytes: dst.len(),
                        elem: *elem,
                    });
                }
                match order {
                    Order::SrcFirst => f(src, dst),
                    Order::DstFirst => {
                        let mut out = src.to_vec();
                        f(dst, &mut out);
                        dst.copy_from_slice(&out);
                    }
                }
                Ok(())
            }
        }
    }

    /// The op that accumulates: `Sum` for `Avg` (whose division comes once, at the end).
    pub(crate) fn sum_form(&self) -> Reducer {
        match self {
            Reducer::Builtin(Op::Avg, d) => Reducer::Builtin(Op::Sum, *d),
            r => r.clone(),
        }
    }

    /// Divides by the contribution count where the op is `Avg` (the last step of an average).
    pub(crate) fn finalize(&self, buf: &mut [u8], contributions: usize) -> Result<()> {
        if let Reducer::Builtin(Op::Avg, d) = self {
            rcomm_kernels::finalize_avg(*d, buf, contributions)
                .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ops_follow_the_mpi_operand_convention_in_both_orders() {
        // Non-commutative: keep the left operand ("first wins").
        let first = UserOp::<u32>::new(false, |a, b| b.copy_from_slice(a));
        let r = ReduceOp::from(&first).0;
        let mut dst = [1u8, 0, 0, 0, 2, 0, 0, 0];
        let src = [7u8, 0, 0, 0, 8, 0, 0, 0];
        r.apply(&mut dst, &src, Order::SrcFirst).unwrap();
        assert_eq!(dst, src, "src ⊕ dst keeps src");
        let mut dst = [1u8, 0, 0, 0, 2, 0, 0, 0];
        r.apply(&mut dst, &src, Order::DstFirst).unwrap();
        assert_eq!(dst, [1u8, 0, 0, 0, 2, 0, 0, 0], "dst ⊕ src keeps dst");
        assert!(!r.commutative());
    }

    #[test]
    fn misaligned_scratch_is_copied_not_rejected() {
        let add = UserOp::<u64>::new(true, |a, b| {
            for (x, y) in a.iter().zip(b) {
                *y += *x
            }
        });
        let r = ReduceOp::from(&add).0;
        let mut back = [0u8; 17];
        back[1..9].copy_from_slice(&5u64.to_le_bytes());
        let src = 6u64.to_le_bytes();
        r.apply(&mut back[1..9], &src, Order::SrcFirst).unwrap();
        assert_eq!(u64::from_le_bytes(back[1..9].try_into().unwrap()), 11);
        assert!(matches!(
            r.apply(&mut back[..3], &src[..3], Order::SrcFirst),
            Err(CommError::Size { .. })
        ));
    }
}
