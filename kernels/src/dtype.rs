//! Element types the kernels reduce, and the [`Element`] trait tying a Rust type to its [`Dtype`].

use std::fmt;
use std::str::FromStr;

use crate::KernelError;

/// An element type of a reduction buffer.
///
/// `F16` and `Bf16` are IEEE binary16 and bfloat16 ([`half::f16`], [`half::bf16`]); they are
/// computed in `f32` and rounded once per kernel call (round to nearest, ties to even).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// `i8`
    I8,
    /// `i16`
    I16,
    /// `i32`
    I32,
    /// `i64`
    I64,
    /// `u8`
    U8,
    /// `u16`
    U16,
    /// `u32`
    U32,
    /// `u64`
    U64,
    /// IEEE 754 binary16 ([`half::f16`]).
    F16,
    /// bfloat16 ([`half::bf16`]).
    Bf16,
    /// `f32`
    F32,
    /// `f64`
    F64,
}

impl Dtype {
    /// Every dtype, integers first.
    pub const ALL: [Dtype; 12] = [
        Dtype::I8,
        Dtype::I16,
        Dtype::I32,
        Dtype::I64,
        Dtype::U8,
        Dtype::U16,
        Dtype::U32,
        Dtype::U64,
        Dtype::F16,
        Dtype::Bf16,
        Dtype::F32,
        Dtype::F64,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            Dtype::I8 | Dtype::U8 => 1,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 8,
        }
    }

    /// Lower-case name, as accepted by [`FromStr`] (`"i8"`, …, `"bf16"`, `"f64"`).
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::I8 => "i8",
            Dtype::I16 => "i16",
            Dtype::I32 => "i32",
            Dtype::I64 => "i64",
            Dtype::U8 => "u8",
            Dtype::U16 => "u16",
            Dtype::U32 => "u32",
            Dtype::U64 => "u64",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
        }
    }

    /// True for the four floating-point dtypes.
    pub const fn is_float(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::Bf16 | Dtype::F32 | Dtype::F64)
    }

    /// True for the eight integer dtypes.
    pub const fn is_integer(self) -> bool {
        !self.is_float()
    }

    /// True for the signed integer dtypes.
    pub const fn is_signed_integer(self) -> bool {
        matches!(self, Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dtype {
    type Err = KernelError;

    /// Parses a name from [`Dtype::name`], ignoring ASCII case and surrounding white space.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        Dtype::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| KernelError::UnknownName {
                what: "dtype",
                name: s.to_owned(),
                valid: "i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64",
            })
    }
}

mod sealed {
    /// Only this crate implements [`super::Element`]: the kernels reinterpret bytes by
    /// `DTYPE`, so a foreign impl with a wrong `DTYPE` would make the typed API lie.
    pub trait Sealed {}
}

/// A Rust type the kernels can reduce: plain old data ([`bytemuck::Pod`]) with its [`Dtype`].
///
/// Implemented for `i8`…`i64`, `u8`…`u64`, [`half::f16`], [`half::bf16`], `f32` and `f64`;
/// sealed.
pub trait Element: bytemuck::Pod + Send + Sync + sealed::Sealed {
    /// The dtype whose kernels reduce slices of `Self`.
    const DTYPE: Dtype;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
        }
    )*};
}

element!(
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    half::f16 => F16, half::bf16 => Bf16, f32 => F32, f64 => F64,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_rust_types() {
        fn size_of<T: Element>() -> (usize, usize) {
            (T::DTYPE.size(), std::mem::size_of::<T>())
        }
        for (a, b) in [
            size_of::<i8>(),
            size_of::<i16>(),
            size_of::<i32>(),
            size_of::<i64>(),
            size_of::<u8>(),
            size_of::<u16>(),
            size_of::<u32>(),
            size_of::<u64>(),
            size_of::<half::f16>(),
            size_of::<half::bf16>(),
            size_of::<f32>(),
            size_of::<f64>(),
        ] {
            assert_eq!(a, b);
        }
    }

    #[test]
    fn names_round_trip() {
        for d in Dtype::ALL {
            assert_eq!(d.name().parse::<Dtype>(), Ok(d));
            assert_eq!(d.to_string().to_uppercase().parse::<Dtype>(), Ok(d));
        }
        assert!("f8".parse::<Dtype>().is_err());
    }
}
