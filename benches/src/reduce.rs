//! `rcomm-bench reduce`: the local reduction's speed, one process, no communication — the γ
//! of the cost model (`rcomm-plan --price … --reduce-bw`). Per size S it times
//! `dst[i] += src[i]` over S bytes of f32 with the kernel the collectives use, and reports
//! γ = S / t: bytes of operand reduced per second (a call reads 2S and writes S).
//!
//! Each size runs at least `min_iters` calls and at least `min_time`, after as many warm-up
//! calls, on buffers first touched before timing: like the collectives' buffers, they are
//! resident, and in cache when they fit.
//!
//! With `--copy` ([`Kind::Copy`]) it times `dst.copy_from_slice(src)` (memcpy) instead: κ, the
//! local copy rate of the cost model (`rcomm-plan --price … --copy-bw`), as the pairwise
//! all-to-all pays it for the block a rank keeps (a call reads S and writes S).

use rcomm::Op;
use std::time::{Duration, Instant};

/// What is timed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    /// `dst[i] += src[i]`, f32: γ.
    #[default]
    Reduce,
    /// `dst.copy_from_slice(src)`: κ.
    Copy,
}

/// One size's result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// What was timed.
    pub kind: Kind,
    /// Bytes of each operand.
    pub size: usize,
    /// Mean seconds per call.
    pub time_s: f64,
    /// Calls timed.
    pub iters: u64,
}

impl Point {
    /// γ (or κ): operand bytes reduced (or copied) per second.
    pub fn gamma(&self) -> f64 {
        self.size as f64 / self.time_s
    }

    /// One JSON object: `{"op":"reduce","type":"float","redop":"sum","size","time_us","gbs","iters"}`
    /// (`{"op":"copy","type":"byte","redop":"none",…}` for a copy).
    pub fn json(&self) -> String {
        let (op, ty, redop) = match self.kind {
            Kind::Reduce => ("reduce", "float", "sum"),
            Kind::Copy => ("copy", "byte", "none"),
        };
        format!(
            "{{\"op\":\"{op}\",\"type\":\"{ty}\",\"redop\":\"{redop}\",\"size\":{},\"time_us\":{:.4},\"gbs\":{:.4},\"iters\":{}}}",
            self.size,
            self.time_s * 1e6,
            self.gamma() / 1e9,
            self.iters
        )
    }
}

/// Times the f32 sum over `size` bytes (rounded down to whole elements; at least one).
pub fn measure(size: usize, min_iters: u64, min_time: Duration) -> Result<Point, String> {
    measure_kind(Kind::Reduce, size, min_iters, min_time)
}

/// Times `kind` over `size` bytes (rounded down to whole f32 elements; at least one).
pub fn measure_kind(
    kind: Kind,
    size: usize,
    min_iters: u64,
    min_time: Duration,
) -> Result<Point, String> {
    let n = (size / 4).max(1);
    // Values whose sums stay normal: the loop measures memory and arithmetic, not the slow
    // paths of subnormals or infinities.
    let src = vec![1.0f32; n];
    let mut dst = vec![0.5f32; n];
    let call = |dst: &mut [f32]| match kind {
        Kind::Reduce => {
            rcomm_kernels::reduce_into_typed(Op::Sum, dst, &src).map_err(|e| e.to_string())
        }
        Kind::Copy => {
            dst.copy_from_slice(std::hint::black_box(&src));
            Ok(())
        }
    };
    for _ in 0..min_iters.max(1) {
        call(&mut dst)?;
    }
    let start = Instant::now();
    let mut iters = 0u64;
    while iters < min_iters.max(1) || start.elapsed() < min_time {
        call(&mut dst)?;
        std::hint::black_box(&mut dst);
        iters += 1;
    }
    let t = start.elapsed().as_secs_f64() / iters as f64;
    std::hint::black_box(&dst);
    Ok(Point {
        kind,
        size: n * 4,
        time_s: t,
        iters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_whole_elements_and_reports_json() {
        let p = measure(4099, 3, Duration::ZERO).unwrap();
        assert_eq!(p.size, 4096);
        assert!(p.iters >= 3 && p.time_s > 0.0 && p.gamma().is_finite());
        let j = p.json();
        assert!(j.starts_with("{\"op\":\"reduce\"") && j.contains("\"size\":4096"));
        let c = measure_kind(Kind::Copy, 4096, 3, Duration::ZERO).unwrap();
        assert!(c.kind == Kind::Copy && c.size == 4096 && c.time_s > 0.0);
        assert!(c.json().starts_with("{\"op\":\"copy\",\"type\":\"byte\""));
    }
}
