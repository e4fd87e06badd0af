//! Reduction operations and which dtypes each is defined for.

use std::fmt;
use std::str::FromStr;

use crate::{Dtype, KernelError};

/// An element-wise reduction operation `x ⊕ y`.
///
/// Semantics, identical on every instruction-set path:
/// - Integer `Sum` and `Prod` wrap (two's complement, like `wrapping_add`/`wrapping_mul`): a
///   reduction must not fail half-way through a collective, and wrapping is what every SIMD
///   instruction does.
/// - Float `Min`/`Max` are IEEE 754-2019 `minimum`/`maximum`: a NaN operand gives NaN, and
///   `-0 < +0` (so `min(+0, -0) = -0`, `max(+0, -0) = +0`). NaN-propagating rather than
///   `maxNum` (`f32::max`), so one rank's NaN is never silently dropped, and symmetric, so the
///   result does not depend on operand order.
/// - Every NaN a float kernel produces is the canonical quiet NaN (positive, only the top
///   mantissa bit set: `f32::NAN`, `f64::NAN`, `0x7e00` for f16, `0x7fc0` for bf16). Hardware
///   and compilers disagree on NaN payloads; canonicalising keeps all paths and all operand
///   orders bit-identical.
/// - `BAnd`, `BOr`, `BXor` are defined for integers only.
/// - `Avg` reduces like `Sum`; the division by the number of contributions is a separate step,
///   [`crate::finalize_avg`], run once at the end (an average of N ranks is a sum then one
///   division).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// Sum (wrapping for integers).
    Sum,
    /// Product (wrapping for integers).
    Prod,
    /// Minimum (IEEE `minimum` for floats).
    Min,
    /// Maximum (IEEE `maximum` for floats).
    Max,
    /// Bitwise and (integers only).
    BAnd,
    /// Bitwise or (integers only).
    BOr,
    /// Bitwise exclusive or (integers only).
    BXor,
    /// Average: a sum here, divided by the contribution count in [`crate::finalize_avg`].
    Avg,
}

impl Op {
    /// Every op.
    pub const ALL: [Op; 8] = [
        Op::Sum,
        Op::Prod,
        Op::Min,
        Op::Max,
        Op::BAnd,
        Op::BOr,
        Op::BXor,
        Op::Avg,
    ];

    /// Lower-case name, as accepted by [`FromStr`].
    pub const fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Prod => "prod",
            Op::Min => "min",
            Op::Max => "max",
            Op::BAnd => "band",
            Op::BOr => "bor",
            Op::BXor => "bxor",
            Op::Avg => "avg",
        }
    }

    /// True for the bitwise ops, which are defined for integers only.
    pub const fn is_bitwise(self) -> bool {
        matches!(self, Op::BAnd | Op::BOr | Op::BXor)
    }

    /// Whether this op is defined for `dtype`.
    pub const fn is_defined_for(self, dtype: Dtype) -> bool {
        !(self.is_bitwise() && dtype.is_float())
    }

    /// `Ok` when defined for `dtype`, otherwise [`KernelError::OpNotDefined`].
    pub fn check(self, dtype: Dtype) -> Result<(), KernelError> {
        if self.is_defined_for(dtype) {
            Ok(())
        } else {
            Err(KernelError::OpNotDefined { op: self, dtype })
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Op {
    type Err = KernelError;

    /// Parses a name from [`Op::name`], ignoring ASCII case and surrounding white space.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        Op::ALL
            .into_iter()
            .find(|o| o.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| KernelError::UnknownName {
                what: "op",
                name: s.to_owned(),
                valid: "sum, prod, min, max, band, bor, bxor, avg",
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for o in Op::ALL {
            assert_eq!(o.name().parse::<Op>(), Ok(o));
        }
        assert!("mean".parse::<Op>().is_err());
    }

    #[test]
    fn bitwise_only_for_integers() {
        for d in Dtype::ALL {
            for o in Op::ALL {
                assert_eq!(
                    o.check(d).is_ok(),
                    !(o.is_bitwise() && d.is_float()),
                    "{o} {d}"
                );
            }
        }
    }
}
