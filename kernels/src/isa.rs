//! Instruction-set paths, run-time detection, and the process-wide choice.
//!
//! The choice is a global because every reduction in a process should take the same path: the
//! paths agree bit for bit, so this is about speed and about testing each path, not results.
//! rcomm's config module maps `RCOMM_KERNEL_ISA` to [`set_isa`]; this crate reads no
//! environment.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::KernelError;

/// An instruction-set path of the CPU kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Plain Rust loops (the compiler may auto-vectorise them for the build target). Always
    /// available, on every architecture.
    Portable,
    /// x86-64 AVX2 (+ F16C for f16 conversion).
    Avx2,
    /// x86-64 AVX-512 F + BW (BW for the 8- and 16-bit integer ops).
    Avx512,
}

impl Isa {
    /// Every path, slowest first.
    pub const ALL: [Isa; 3] = [Isa::Portable, Isa::Avx2, Isa::Avx512];

    /// Lower-case name, as accepted by [`FromStr`] (`portable`, `avx2`, `avx512`).
    pub const fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// The CPU features this path needs, for messages.
    pub const fn requirements(self) -> &'static str {
        match self {
            Isa::Portable => "nothing",
            Isa::Avx2 => "x86-64 with avx2 and f16c",
            Isa::Avx512 => "x86-64 with avx512f, avx512bw, avx2 and f16c",
        }
    }

    /// Whether this CPU (and build target) can run this path.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 => false,
        }
    }

    /// `Ok` when supported, otherwise [`KernelError::IsaUnavailable`].
    pub fn check(self) -> Result<(), KernelError> {
        if self.is_supported() {
            Ok(())
        } else {
            Err(KernelError::IsaUnavailable {
                isa: self,
                needs: self.requirements(),
            })
        }
    }

    /// The paths this CPU supports, slowest first.
    pub fn supported() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
    }

    /// The fastest supported path: the default of [`isa`].
    pub fn best() -> Isa {
        Isa::ALL
            .into_iter()
            .rev()
            .find(|i| i.is_supported())
            .unwrap_or(Isa::Portable)
    }

    const fn code(self) -> u8 {
        match self {
            Isa::Portable => 1,
            Isa::Avx2 => 2,
            Isa::Avx512 => 3,
        }
    }

    const fn from_code(c: u8) -> Option<Isa> {
        match c {
            1 => Some(Isa::Portable),
            2 => Some(Isa::Avx2),
            3 => Some(Isa::Avx512),
            _ => None,
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Isa {
    type Err = KernelError;

    /// Parses `avx512`, `avx2` or `portable` (ASCII case and surrounding white space ignored),
    /// the values of `RCOMM_KERNEL_ISA`. Does not check CPU support: see [`Isa::check`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| KernelError::UnknownName {
                what: "kernel ISA",
                name: s.to_owned(),
                valid: "avx512, avx2, portable",
            })
    }
}

/// 0 = not chosen yet; otherwise [`Isa::code`].
static CURRENT: AtomicU8 = AtomicU8::new(0);

/// The path the entry points without an explicit [`Isa`] use: the one set by [`set_isa`], or
/// [`Isa::best`] if none was set.
pub fn isa() -> Isa {
    match Isa::from_code(CURRENT.load(Ordering::Relaxed)) {
        Some(i) => i,
        None => {
            // Two threads may both detect; they store the same value, so the race is benign.
            let best = Isa::best();
            CURRENT.store(best.code(), Ordering::Relaxed);
            best
        }
    }
}

/// Forces the path for this process. Errors (and changes nothing) if the CPU lacks it.
pub fn set_isa(isa: Isa) -> Result<(), KernelError> {
    isa.check()?;
    CURRENT.store(isa.code(), Ordering::Relaxed);
    Ok(())
}
