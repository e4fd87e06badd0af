//! Device memory for the benchmarks: `rcomm-bench pt2pt … --device` (OSU's `D D` mode, both
//! ranks' buffers in device memory) and `rcomm-bench dtod` (a device-to-device copy in one
//! process, the reference for the bandwidth of a copy between two processes' device memory).
//!
//! The check data is the host mode's ([`crate::osu`]): patterns are written on the host and
//! copied to the device before the timed loop, the per-iteration stamps (at most three words)
//! are copied to their places in the device buffer before each iteration's timer starts, and
//! the receive buffers are copied back to the host for the check pass after the timed loop.

use crate::osu;
use rcomm::gpu::{DevMut, DevRef, DeviceBuffer};
use std::error::Error;
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn Error>>;

/// The device this rank uses: `RCOMM_LOCAL_RANK` modulo the number of devices this process
/// sees (0 without a local rank). An error (rcomm's, saying why) when no device is usable.
pub fn pick_device() -> rcomm::Result<u32> {
    let n = rcomm::gpu::devices()?.len() as u32;
    let local = std::env::var("RCOMM_LOCAL_RANK")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(0);
    Ok(if n == 0 { 0 } else { local % n })
}

/// A JSON row with the memory kind added: `{…,"memory":"host"}` or `"device"` (`pt2pt` and
/// `coll` rows).
pub fn with_memory(row: &str, device: bool) -> String {
    let body = row.strip_suffix('}').unwrap_or(row);
    let m = if device { "device" } else { "host" };
    format!("{body},\"memory\":\"{m}\"}}")
}

/// A device allocation used by its first `n` bytes (allocated with at least one byte: a
/// 0-byte message still needs an address).
#[derive(Debug)]
pub struct DevBuf {
    buf: DeviceBuffer,
}

impl DevBuf {
    /// `len` bytes (at least 1) on `device`.
    pub fn new(device: u32, len: usize) -> rcomm::Result<Self> {
        Ok(Self {
            buf: DeviceBuffer::new(device, len.max(1))?,
        })
    }

    /// Capacity in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Its device.
    pub fn device(&self) -> u32 {
        self.buf.device()
    }

    /// Whether the capacity is zero (never: at least one byte is allocated).
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The first `n` bytes, to send.
    pub fn view(&self, n: usize) -> DevRef<'_> {
        assert!(
            n <= self.buf.len(),
            "DevBuf::view({n}) beyond {}",
            self.buf.len()
        );
        // SAFETY: the range lies in this allocation, which the borrow keeps alive.
        unsafe { DevRef::from_raw(self.buf.addr(), n) }
    }

    /// The first `n` bytes, to receive into.
    pub fn view_mut(&mut self, n: usize) -> DevMut<'_> {
        assert!(
            n <= self.buf.len(),
            "DevBuf::view_mut({n}) beyond {}",
            self.buf.len()
        );
        // SAFETY: the range lies in this allocation, borrowed mutably for the view's life.
        unsafe { DevMut::from_raw(self.buf.addr(), n) }
    }

    /// Writes the first `n` bytes with the pattern of `seed` ([`osu::fill`]).
    pub fn fill(&self, n: usize, seed: u64) -> rcomm::Result<()> {
        let mut h = vec![0u8; n];
        osu::fill(&mut h, seed);
        self.buf.copy_from_host(&h)
    }

    /// Copies iteration `iteration`'s stamp ([`osu::stamp`]) into the first `n` bytes: at most
    /// three small host-to-device copies, at the stamp ranges (each complete on return, as
    /// the device layer's copies are).
    pub fn stamp(&self, n: usize, seed: u64, iteration: u64) -> Res<()> {
        let g = rcomm_transport::gpu::gpu()?;
        for (which, r) in osu::stamp_ranges(n).into_iter().enumerate() {
            if r.is_empty() {
                continue;
            }
            let w = osu::stamp_word(seed, iteration, which).to_le_bytes();
            g.copy_htod(self.buf.addr() + r.start as u64, &w[..r.len()])?;
        }
        Ok(())
    }

    /// The first `n` bytes, copied to the host.
    pub fn read(&self, n: usize) -> rcomm::Result<Vec<u8>> {
        let mut h = vec![0u8; n];
        self.buf.copy_to_host(&mut h)?;
        Ok(h)
    }
}

/// What `rcomm-bench dtod` measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Dtod {
    /// Device ordinal.
    pub device: u32,
    /// Its name.
    pub name: String,
    /// `"cuda"` or `"stand-in"`.
    pub backend: &'static str,
    /// What was timed: `None` a copy, `Some(d)` the sum kernel `out = a + b` of `d` elements.
    pub kernel: Option<rcomm_kernels::Dtype>,
    /// Bytes per copy (per operand of the kernel).
    pub size: usize,
    /// Timed copies.
    pub iters: usize,
    /// Warm-up copies before them.
    pub warmup: usize,
    /// Summed time of the timed copies.
    pub total: Duration,
    /// The fastest timed copy.
    pub best: Duration,
}

impl Dtod {
    /// Mean time per copy in µs.
    pub fn mean_us(&self) -> f64 {
        self.total.as_secs_f64() * 1e6 / self.iters as f64
    }

    /// Bytes copied per second over the mean time, in GB/s (10^9), each byte counted once.
    pub fn gbps(&self) -> f64 {
        self.size as f64 * self.iters as f64 / self.total.as_secs_f64() / 1e9
    }

    /// The same over the fastest copy.
    pub fn gbps_best(&self) -> f64 {
        self.size as f64 / self.best.as_secs_f64() / 1e9
    }

    /// Bytes of memory traffic per byte of `size`: a copy reads and writes (2), the kernel
    /// reads two operands and writes one (3).
    pub fn traffic(&self) -> f64 {
        if self.kernel.is_some() { 3.0 } else { 2.0 }
    }

    /// What was timed, for the text and the JSON.
    pub fn what(&self) -> String {
        match self.kernel {
            None => "copy".into(),
            Some(d) => format!("sum_{}", d.name()),
        }
    }

    /// The table lines.
    pub fn text(&self) -> String {
        let f = self.traffic();
        format!(
            "# dtod: device {} ({}, backend {}), {} of {} bytes, {} timed after {} warm-up\n\
             time per {} (mean): {:.2} us\n\
             bandwidth, bytes counted once: {:.2} GB/s (best {:.2} GB/s)\n\
             bandwidth, bytes read + written ({f}x): {:.2} GB/s (best {:.2} GB/s)\n",
            self.device,
            self.name,
            self.backend,
            self.what(),
            self.size,
            self.iters,
            self.warmup,
            self.what(),
            self.mean_us(),
            self.gbps(),
            self.gbps_best(),
            f * self.gbps(),
            f * self.gbps_best()
        )
    }

    /// One JSON object.
    pub fn json(&self) -> String {
        format!(
            "{{\"test\":\"dtod\",\"op\":\"{}\",\"device\":{},\"name\":{:?},\"backend\":\"{}\",\"memory\":\"device\",\"size\":{},\
             \"iters\":{},\"warmup\":{},\"time_us\":{:.3},\"GBps\":{:.3},\"GBps_rw\":{:.3},\"GBps_best\":{:.3}}}",
            self.what(),
            self.device,
            self.name,
            self.backend,
            self.size,
            self.iters,
            self.warmup,
            self.mean_us(),
            self.gbps(),
            self.traffic() * self.gbps(),
            self.gbps_best()
        )
    }
}

/// Times `iters` runs of the device's sum kernel `out = a + b` over `size` bytes of `dtype`
/// (the device collectives' reduction) after `warmup` untimed ones, each launched and waited
/// for on its own; then checks `out` bit for bit against the CPU kernel on the same operands
/// (random bit patterns: NaNs and infinities included).
pub fn reduce_kernel(
    device: u32,
    dtype: rcomm_kernels::Dtype,
    size: usize,
    iters: usize,
    warmup: usize,
) -> Res<Dtod> {
    use rcomm_kernels::{Dtype, Op};
    fn run<T: rcomm::Element>(
        device: u32,
        size: usize,
        iters: usize,
        warmup: usize,
    ) -> Res<(Duration, Duration, DevBuf, DevBuf, DevBuf)> {
        let (mut out, a, b) = (
            DevBuf::new(device, size)?,
            DevBuf::new(device, size)?,
            DevBuf::new(device, size)?,
        );
        a.fill(size, osu::seed(size, 1, 0))?;
        b.fill(size, osu::seed(size, 2, 0))?;
        let s = rcomm::gpu::stream_create(device)?;
        let mut once = || -> Res<Duration> {
            let t0 = Instant::now();
            rcomm::gpu::reduce_local::<T>(&mut out.buf, &a.buf, &b.buf, Op::Sum, s)?;
            rcomm::gpu::stream_synchronize(s)?;
            Ok(t0.elapsed())
        };
        for _ in 0..warmup {
            once()?;
        }
        let (mut total, mut best) = (Duration::ZERO, Duration::MAX);
        for _ in 0..iters {
            let t = once()?;
            total += t;
            best = best.min(t);
        }
        rcomm::gpu::stream_destroy(s)?;
        Ok((total, best, out, a, b))
    }
    if size == 0 || iters == 0 || !size.is_multiple_of(dtype.size()) {
        return Err("the kernel needs --size > 0, a whole number of elements, --iters > 0".into());
    }
    let g = rcomm_transport::gpu::gpu()?;
    let info = rcomm::gpu::devices()?
        .into_iter()
        .find(|d| d.ordinal == device)
        .ok_or_else(|| format!("no device {device} in this process"))?;
    let (total, best, out, a, b) = match dtype {
        Dtype::F32 => run::<f32>(device, size, iters, warmup)?,
        Dtype::Bf16 => run::<half::bf16>(device, size, iters, warmup)?,
        Dtype::F16 => run::<half::f16>(device, size, iters, warmup)?,
        Dtype::I32 => run::<i32>(device, size, iters, warmup)?,
        d => {
            return Err(
                format!("the kernel benchmark takes f32, bf16, f16 or i32, not {d:?}").into(),
            );
        }
    };
    let mut want = vec![0u8; size];
    rcomm_kernels::reduce3(Op::Sum, dtype, &mut want, &a.read(size)?, &b.read(size)?)?;
    if let Some(off) = out.read(size)?.iter().zip(&want).position(|(x, y)| x != y) {
        return Err(format!(
            "check failed: byte {off} of the device sum differs from the CPU kernel's"
        )
        .into());
    }
    Ok(Dtod {
        device,
        name: info.name,
        backend: g.backend_name(),
        kernel: Some(dtype),
        size,
        iters,
        warmup,
        total,
        best: best.max(Duration::from_nanos(1)),
    })
}

/// Times `iters` synchronous device-to-device copies of `size` bytes on `device` after
/// `warmup` untimed ones, each copy timed on its own; then checks that the destination holds
/// the source's pattern.
pub fn dtod(device: u32, size: usize, iters: usize, warmup: usize) -> Res<Dtod> {
    if size == 0 || iters == 0 {
        return Err("dtod needs --size > 0 and --iters > 0".into());
    }
    let g = rcomm_transport::gpu::gpu()?;
    let info = rcomm::gpu::devices()?
        .into_iter()
        .find(|d| d.ordinal == device)
        .ok_or_else(|| format!("no device {device} in this process"))?;
    let src = DevBuf::new(device, size)?;
    let dst = DevBuf::new(device, size)?;
    let seed = osu::seed(size, 0, 0);
    src.fill(size, seed)?;
    dst.fill(size, osu::poison_seed(size, 0, 0))?;
    let (s, d) = (src.buf.addr(), dst.buf.addr());
    // Each copy is complete on return (the device layer waits for it).
    for _ in 0..warmup {
        g.copy_dtod(d, s, size)?;
    }
    let mut total = Duration::ZERO;
    let mut best = Duration::MAX;
    for _ in 0..iters {
        let t0 = Instant::now();
        g.copy_dtod(d, s, size)?;
        let t = t0.elapsed();
        total += t;
        best = best.min(t);
    }
    if let Some(off) = osu::first_mismatch(&dst.read(size)?, seed) {
        return Err(
            format!("check failed: byte {off} of the destination differs from the source").into(),
        );
    }
    Ok(Dtod {
        device,
        name: info.name,
        backend: g.backend_name(),
        kernel: None,
        size,
        iters,
        warmup,
        total,
        best: best.max(Duration::from_nanos(1)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_count_bytes_once_and_twice() {
        let d = Dtod {
            device: 0,
            name: "x".into(),
            backend: "stand-in",
            kernel: None,
            size: 1_000_000_000,
            iters: 4,
            warmup: 1,
            total: Duration::from_secs(2),
            best: Duration::from_millis(250),
        };
        assert!((d.gbps() - 2.0).abs() < 1e-9);
        assert!((d.gbps_best() - 4.0).abs() < 1e-9);
        assert!((d.mean_us() - 500_000.0).abs() < 1e-6);
        assert!(
            d.json().contains("\"GBps\":2.000,\"GBps_rw\":4.000"),
            "{}",
            d.json()
        );
        assert!(
            d.text().contains("read + written (2x): 4.00 GB/s"),
            "{}",
            d.text()
        );
        // The sum kernel reads two operands and writes one: three bytes of traffic per byte.
        let k = Dtod {
            kernel: Some(rcomm_kernels::Dtype::F32),
            ..d
        };
        assert!(k.json().contains("\"op\":\"sum_f32\""), "{}", k.json());
        assert!(k.json().contains("\"GBps_rw\":6.000"), "{}", k.json());
        assert!(
            k.text().contains("read + written (3x): 6.00 GB/s"),
            "{}",
            k.text()
        );
    }
}
