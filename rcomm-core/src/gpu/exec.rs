//! The device executor: runs the same [`Schedule`]s as the CPU executor over device memory.
//!
//! - **Transfers** are the engine's point-to-point on device regions, so each message takes
//!   the device path P11 chose for it: between ranks of one node the receiver's copy engine
//!   reads the sender's buffer in place (CUDA IPC, allocations exported and imported once and
//!   cached); elsewhere the bytes are staged through pinned host buffers over the host lanes.
//! - **Local steps** are queued on one stream: a copy goes to the copy engine
//!   (`cuMemcpyDtoDAsync`), a reduction launches a kernel of `kernels/cuda/reduce.cu`
//!   (compiled once per architecture by NVRTC, to a CUBIN for the GPU's own architecture, or
//!   taken from `RCOMM_PTX_DIR`: `kernel_image`; the module loaded once per device). On the host-memory stand-in the same steps are host functions queued on a
//!   stand-in stream and the reduction runs the CPU kernels: a stand-in, not a GPU.
//! - **Ordering**: before a phase's messages are posted, the stream has finished the previous
//!   phase's local steps (a host wait on an event), because a peer may start reading the
//!   result as soon as the message is announced. The synchronisation between ranks is the
//!   engine's (host-memory rendezvous messages), not flags in device memory; so a call blocks
//!   the host until it is done, as the point-to-point `*_on` calls do.
//! - **Scratch**: the schedule's `Tmp` is device memory from the process state's pool (plain
//!   allocations, so they can be exported to peers; `comm::device_part::DeviceState`), kept
//!   across calls, counted in [`Device::scratch_bytes`](crate::Device::scratch_bytes) and
//!   freed with the process state.
//!
//! User-defined ops never reach this executor: a user function cannot run on device memory.

use super::mem::{backend, dev_err};
use crate::coll::check::Stamp;
use crate::coll::exec::{complete, post};
use crate::coll::reduce::{Order, Reducer};
use crate::comm::Communicator;
use crate::comm::DeviceState;
use crate::p2p::region::Region;
use crate::schedule::{Buf, Chunk, Schedule, Step};
use crate::{CommError, Result};
use rcomm_transport::gpu::{Gpu, Stream};
use std::sync::Mutex;

/// Bytes of device scratch the executor holds in this process (for leak accounting: it is
/// kept for reuse), over every initialised world.
#[deprecated(note = "use `Communicator::device().scratch_bytes()`")]
pub fn scratch_bytes() -> usize {
    crate::comm::SCRATCH_HELD.load(std::sync::atomic::Ordering::Relaxed)
}

/// A device range of the executor: address and length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DevSpan {
    pub addr: u64,
    pub len: usize,
}

impl DevSpan {
    pub(crate) const EMPTY: DevSpan = DevSpan { addr: 0, len: 0 };
}

/// A scratch buffer on loan from the pool; back to it when dropped.
pub(crate) struct Scratch<'a> {
    pool: &'a DeviceState,
    device: u32,
    addr: u64,
    len: usize,
}

impl<'a> Scratch<'a> {
    /// Its address.
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }

    /// At least `len` bytes on `device`, from `state`'s pool or newly allocated.
    pub(crate) fn take(
        state: &'a DeviceState,
        gpu: &Gpu,
        device: u32,
        len: usize,
        op: &'static str,
        me: u32,
    ) -> Result<Self> {
        if len == 0 {
            return Ok(Self {
                pool: state,
                device,
                addr: 0,
                len: 0,
            });
        }
        let mut pool = state.scratch.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = pool.iter().position(|s| s.0 == device && s.2 >= len) {
            let (device, addr, len) = pool.swap_remove(i);
            return Ok(Self {
                pool: state,
                device,
                addr,
                len,
            });
        }
        drop(pool);
        // Round up so that a run of growing sizes does not allocate every time.
        let want = len.next_power_of_two().max(1 << 16);
        let addr = gpu.alloc(device, want).map_err(dev_err(op, me))?;
        state.count_scratch(want, true);
        Ok(Self {
            pool: state,
            device,
            addr,
            len: want,
        })
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        if self.len > 0 {
            self.pool
                .scratch
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((self.device, self.addr, self.len));
        }
    }
}

/// The process state's device memory and streams go with it: a later world in the same
/// process starts its own.
impl Drop for DeviceState {
    fn drop(&mut self) {
        let scratch = std::mem::take(self.scratch.get_mut().unwrap_or_else(|e| e.into_inner()));
        let streams = std::mem::take(self.streams.get_mut().unwrap_or_else(|e| e.into_inner()));
        if scratch.is_empty() && streams.is_empty() {
            return;
        }
        let Ok(gpu) = backend("finalize", 0) else {
            return;
        };
        for (_, addr, len) in scratch {
            // A failure here leaves the memory to the process's end: nothing else to do.
            let _ = gpu.free(addr);
            self.count_scratch(len, false);
        }
        for (_, s) in streams {
            let _ = gpu.stream_destroy(s);
        }
    }
}

/// The executor's stream on `device` (also the NCCL backend's for plain calls), kept in
/// `state`.
pub(crate) fn stream(
    state: &DeviceState,
    gpu: &Gpu,
    device: u32,
    op: &'static str,
    me: u32,
) -> Result<Stream> {
    let mut ss = state.streams.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = ss.iter().find(|s| s.0 == device) {
        return Ok(s.1);
    }
    let s = gpu.stream_create(device).map_err(dev_err(op, me))?;
    ss.push((device, s));
    Ok(s)
}

/// Launches the reductions: NVRTC kernels on a GPU, the CPU kernels as host functions on the
/// stand-in.
struct Kernels {
    gpu: &'static Gpu,
    device: u32,
    stream: Stream,
    op: &'static str,
    me: u32,
    /// Work was queued since the last wait (a wait with nothing queued costs nothing).
    queued: std::cell::Cell<bool>,
}

#[cfg(feature = "cuda")]
#[derive(Clone)]
struct CudaKernels {
    image: std::sync::Arc<[u8]>,
    sms: u32,
}

/// Threads per block of the reductions (grid-stride loops).
#[cfg(feature = "cuda")]
const BLOCK: u32 = 256;

impl Kernels {
    fn new(
        gpu: &'static Gpu,
        device: u32,
        stream: Stream,
        op: &'static str,
        me: u32,
    ) -> Result<Self> {
        Ok(Self {
            gpu,
            device,
            stream,
            op,
            me,
            queued: std::cell::Cell::new(false),
        })
    }

    /// The compiled reductions on a GPU (`None` on the stand-in), made at the first
    /// reduction on the device and kept for the process — failures too, so a machine
    /// without NVRTC does not look for it at every collective, and collectives that reduce
    /// nothing never need it.
    #[cfg(feature = "cuda")]
    fn cuda(&self) -> Result<Option<CudaKernels>> {
        type Made = std::result::Result<CudaKernels, String>;
        static MADE: Mutex<Vec<(u32, Made)>> = Mutex::new(Vec::new());
        if matches!(self.gpu, Gpu::StandIn(_)) {
            return Ok(None);
        }
        let mut m = MADE.lock().unwrap_or_else(|e| e.into_inner());
        let made = match m.iter().find(|(d, _)| *d == self.device) {
            Some((_, r)) => r.clone(),
            None => {
                let r = cuda_kernels(self.gpu, self.device).map_err(|e| e.to_string());
                m.push((self.device, r.clone()));
                r
            }
        };
        made.map(Some).map_err(|why| CommError::Device {
            op: self.op,
            rank: self.me,
            why,
        })
    }

    /// `out = a ⊕ b` over `bytes` bytes.
    fn reduce(&self, r: &Reducer, out: u64, a: u64, b: u64, bytes: usize) -> Result<()> {
        let (op, dtype) = match r.sum_form() {
            Reducer::Builtin(op, d) => (op, d),
            _ => return Err(user_op_error(self.op)),
        };
        self.queued.set(true);
        #[cfg(feature = "cuda")]
        if let Some(k) = &self.cuda()? {
            let name = rcomm_kernels::cuda::reduce_kernel(op, dtype)
                .map_err(|e| CommError::InvalidArg(e.to_string()))?;
            let n = (bytes / dtype.size()) as u64;
            return self
                .gpu
                .launch(
                    self.stream,
                    &k.image,
                    &name,
                    k.grid(n),
                    BLOCK,
                    &[out, a, b, n],
                )
                .map_err(dev_err(self.op, self.me));
        }
        let r = Reducer::Builtin(op, dtype);
        self.host_fn(move || {
            // SAFETY: stand-in device memory is host memory; the three ranges lie in live
            // allocations of the collective (checked by its caller), `out` is `a` or `b` or
            // apart from both, and nothing else touches them until the stream is waited for.
            let (d, s, order) = unsafe {
                if out == a {
                    (slice_mut(out, bytes), slice(b, bytes), Order::DstFirst)
                } else {
                    std::ptr::copy(b as *const u8, out as *mut u8, bytes);
                    (slice_mut(out, bytes), slice(a, bytes), Order::SrcFirst)
                }
            };
            r.apply(d, s, order).map_err(|e| e.to_string())
        })
    }

    /// Divides `bytes` bytes at `buf` by `count` (the end of an average).
    fn finalize(&self, r: &Reducer, buf: u64, bytes: usize, count: usize) -> Result<()> {
        let Reducer::Builtin(rcomm_kernels::Op::Avg, _dtype) = *r else {
            return Ok(());
        };
        self.queued.set(true);
        #[cfg(feature = "cuda")]
        if let Some(k) = &self.cuda()? {
            let n = (bytes / _dtype.size()) as u64;
            let name = rcomm_kernels::cuda::div_kernel(_dtype);
            return self
                .gpu
                .launch(
                    self.stream,
                    &k.image,
                    &name,
                    k.grid(n),
                    BLOCK,
                    &[buf, n, count as u64],
                )
                .map_err(dev_err(self.op, self.me));
        }
        let r = r.clone();
        // SAFETY: as in `reduce`.
        self.host_fn(move || {
            r.finalize(unsafe { slice_mut(buf, bytes) }, count)
                .map_err(|e| e.to_string())
        })
    }

    /// `dst = src` on the stream.
    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.queued.set(true);
        self.gpu
            .copy_dtod_on(self.stream, dst, src, bytes)
            .map_err(dev_err(self.op, self.me))
    }

    /// Queues `f` on the stand-in's stream; a failure is reported at the next wait.
    fn host_fn(
        &self,
        f: impl FnOnce() -> std::result::Result<(), String> + Send + 'static,
    ) -> Result<()> {
        let failed = self.failed();
        rcomm_transport::gpu::standin_enqueue(
            self.stream,
            Box::new(move || {
                if let Err(e) = f() {
                    *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
            }),
        )
        .map_err(dev_err(self.op, self.me))
    }

    fn failed(&self) -> std::sync::Arc<Mutex<Option<String>>> {
        HOST_FN_ERR.with(|e| e.clone())
    }

    /// Waits until the stream ran what was queued.
    fn wait(&self) -> Result<()> {
        if !self.queued.replace(false) {
            return Ok(());
        }
        self.gpu
            .stream_wait_host(self.stream)
            .map_err(dev_err(self.op, self.me))?;
        if let Some(e) = self
            .failed()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            return Err(CommError::Device {
                op: self.op,
                rank: self.me,
                why: format!("a reduction on device {} failed: {e}", self.device),
            });
        }
        Ok(())
    }
}

thread_local! {
    /// A stand-in host function's failure, read at the next wait on this thread.
    static HOST_FN_ERR: std::sync::Arc<Mutex<Option<String>>> = Default::default();
}

#[cfg(feature = "cuda")]
impl CudaKernels {
    /// Blocks for `n` elements: enough to fill the GPU, no more than the work.
    fn grid(&self, n: u64) -> u32 {
        let want = n.div_ceil(u64::from(BLOCK)).max(1);
        want.min(u64::from(self.sms) * 8) as u32
    }
}

/// The reductions for `device`'s architecture (once per process: the images are cached).
#[cfg(feature = "cuda")]
fn cuda_kernels(gpu: &Gpu, device: u32) -> std::result::Result<CudaKernels, String> {
    let info = gpu
        .devices()
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|d| d.ordinal == device)
        .ok_or_else(|| format!("no device {device}"))?;
    let sm = info.cc.0 * 10 + info.cc.1;
    Ok(CudaKernels {
        image: kernel_image(sm)?,
        sms: info.sm_count.max(1),
    })
}

/// The reduction kernels a GPU of SM `sm` loads, in this order: NVRTC's CUBIN for `sm`
/// (loads on every driver from 12.0); `RCOMM_PTX_DIR`'s CUBIN, then its PTX (built elsewhere,
/// perhaps by an older NVRTC whose PTX this driver takes); last NVRTC's PTX for an older
/// architecture (a GPU newer than NVRTC), which needs a driver as new as NVRTC.
#[cfg(feature = "cuda")]
fn kernel_image(sm: u32) -> std::result::Result<std::sync::Arc<[u8]>, String> {
    use rcomm_kernels::cuda::{Source, image_for, pick};
    let arch = format!("sm_{sm}");
    let nvrtc = image_for(sm);
    let ptx_arch = nvrtc.as_ref().map(|(b, _)| b.arch()).unwrap_or_default();
    match pick(
        nvrtc,
        || precompiled(&cubin_file(&arch), sm),
        || precompiled(&ptx_file(&arch), sm),
    ) {
        Ok((src, img)) => {
            let what = match src {
                Source::NvrtcCubin => "CUBIN from NVRTC".to_string(),
                Source::DirCubin | Source::DirPtx => "from RCOMM_PTX_DIR".to_string(),
                Source::NvrtcPtx => format!(
                    "PTX for {ptx_arch} from NVRTC, which does not know {arch} (JIT-compiled by \
                     the driver: needs a driver as new as NVRTC)"
                ),
            };
            rcomm_runtime::rlog!(Info, "COLL", "device kernels for {arch}: {what}");
            Ok(img)
        }
        Err(e) => Err(format!(
            "the reduction kernels for {arch}: {e} (install NVRTC, or point RCOMM_PTX_DIR at \
             kernels written by `rcomm-bench ptx`: {} or {})",
            cubin_file(&arch),
            ptx_file(&arch)
        )),
    }
}

/// `RCOMM_PTX_DIR/<file>`, read once per file (the same bytes each time: the driver's module
/// cache is keyed by their address); `None` when absent, or not kernels that run on `sm`
/// (said in the log, so a stale folder does not go unnoticed).
#[cfg(feature = "cuda")]
fn precompiled(file: &str, sm: u32) -> Option<std::sync::Arc<[u8]>> {
    use rcomm_kernels::cuda::image;
    use std::collections::HashMap;
    use std::sync::{Arc, OnceLock};
    type Read = Mutex<HashMap<String, Option<Arc<[u8]>>>>;
    static READ: OnceLock<Read> = OnceLock::new();
    let mut m = READ
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    m.entry(file.to_string())
        .or_insert_with(|| {
            let dir = rcomm_runtime::config::ptx_dir()?;
            let path = dir.join(file);
            let bytes = std::fs::read(&path).ok()?;
            if !image::describe(&bytes).is_ok_and(|k| image::runs_on(k, sm)) {
                rcomm_runtime::rlog!(
                    Warn,
                    "COLL",
                    "{} is not device kernels for sm_{sm} ({}): ignored",
                    path.display(),
                    image::describe(&bytes).map_or_else(|e| e, |k| k.to_string())
                );
                return None;
            }
            rcomm_runtime::rlog!(Info, "COLL", "device kernels from {}", path.display());
            Some(bytes.into())
        })
        .clone()
}

/// The file name of the precompiled PTX for `arch` (`rcomm-bench ptx` writes it).
pub fn ptx_file(arch: &str) -> String {
    format!("rcomm-reduce-{arch}.ptx")
}

/// The file name of the precompiled CUBIN for `arch` (`rcomm-bench ptx` writes it).
pub fn cubin_file(arch: &str) -> String {
    format!("rcomm-reduce-{arch}.cubin")
}

/// # Safety
/// `addr..addr+len` is host memory (stand-in device memory) nobody else uses meanwhile.
unsafe fn slice<'a>(addr: u64, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

/// # Safety
/// As [`slice`], and not aliased.
unsafe fn slice_mut<'a>(addr: u64, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) }
}

/// The error for a user-defined op on device memory.
pub(crate) fn user_op_error(op: &'static str) -> CommError {
    CommError::InvalidArg(format!(
        "{op} on device memory takes a built-in op: a user-defined function cannot run on the device"
    ))
}

/// Queues `out = a ⊕ b` (`bytes` bytes of `dtype` elements, `op` built in) on `stream` of
/// `device`: the reduction kernel the executor launches (on the stand-in, a host function).
/// The ranges were checked by the caller; wait for the stream before reading `out`.
pub(crate) fn reduce_local(
    device: u32,
    stream: Stream,
    op: rcomm_kernels::Op,
    dtype: rcomm_kernels::Dtype,
    (out, a, b): (u64, u64, u64),
    bytes: usize,
    me: u32,
) -> Result<()> {
    const OP: &str = "reduce_local";
    op.check(dtype)
        .map_err(|e| CommError::InvalidArg(e.to_string()))?;
    let gpu = backend(OP, me)?;
    let k = Kernels::new(gpu, device, stream, OP, me)?;
    let r = Reducer::Builtin(op, dtype);
    k.reduce(&r, out, a, b, bytes)
}

impl Communicator {
    /// Runs `s` over device memory of `device` to completion: `data` (in place, the result)
    /// and the read-only `input`. The caller checked both ranges and began the flight-recorder
    /// record; `reduce` is the collective's op (its `Avg` finished by the caller).
    pub(crate) fn run_schedule_device(
        &self,
        s: &Schedule,
        device: u32,
        data: DevSpan,
        input: DevSpan,
        reduce: Option<&Reducer>,
    ) -> Result<()> {
        let t0 = self.straggler_start();
        let res = self.run_device_untimed(s, device, data, input, reduce);
        self.straggler_end(t0);
        crate::fr::end_coll(self.ctx(), &res);
        res
    }

    fn run_device_untimed(
        &self,
        s: &Schedule,
        device: u32,
        data: DevSpan,
        input: DevSpan,
        reduce: Option<&Reducer>,
    ) -> Result<()> {
        let op = s.op_name();
        let me = self.world_me();
        if reduce.is_some_and(|r| r.builtin().is_none()) {
            return Err(user_op_error(op));
        }
        let tag = self.next_coll_tag();
        let (stamp, chk): (Stamp, _) = self.check_start(tag, s)?;
        if s.phases.is_empty() {
            return Ok(());
        }
        let gpu = backend(op, me)?;
        let state = self.shared().device();
        let tmp = Scratch::take(state, gpu, device, s.tmp_len, op, me)?;
        let tmp_span = DevSpan {
            addr: tmp.addr,
            len: s.tmp_len,
        };
        let k = Kernels::new(gpu, device, stream(state, gpu, device, op, me)?, op, me)?;
        let span = |b: Buf| match b {
            Buf::Data => data,
            Buf::Input => input,
            Buf::Tmp => tmp_span,
        };
        let at = |c: &Chunk| -> Result<u64> {
            let sp = span(c.buf);
            if c.off + c.len > sp.len {
                return Err(CommError::InvalidArg(
                    "schedule chunk outside its buffer".into(),
                ));
            }
            Ok(sp.addr + c.off as u64)
        };
        let mut region =
            |c: &Chunk| -> Result<Region> { Ok(Region::device(at(c)?, c.len, device)) };
        let mut list = Vec::new();
        let mut port = self.port(op, tag, stamp, chk);
        let res = (|| {
            for ph in &s.phases {
                post(&mut port, ph, &mut region, &mut list)?;
                complete(&mut port, &mut list)?;
                for st in &ph.local {
                    match *st {
                        Step::Copy { dst, src } if dst.len > 0 => {
                            k.copy(at(&dst)?, at(&src)?, dst.len)?;
                        }
                        Step::Reduce { dst, src, order } if dst.len > 0 => {
                            let r = reduce.ok_or_else(|| {
                                CommError::InvalidArg("reduction step without an op".into())
                            })?;
                            let (d, s) = (at(&dst)?, at(&src)?);
                            // Built-in ops are commutative bit for bit, but keep the schedule's
                            // operand order anyway (the kernels take `a ⊕ b`).
                            let (a, b) = match order {
                                Order::DstFirst => (d, s),
                                Order::SrcFirst => (s, d),
                            };
                            k.reduce(r, d, a, b, dst.len)?;
                        }
                        _ => {}
                    }
                }
                if !ph.local.is_empty() {
                    // Peers may read these results as soon as the next phase announces them.
                    k.wait()?;
                }
            }
            Ok(())
        })();
        let res = res.map_err(|e| self.in_sequence(e, tag));
        // Nothing may stay queued over the scratch once it goes back to the pool.
        let waited = k.wait();
        res?;
        waited?;
        if let Some(r) = reduce {
            k.finalize(r, data.addr, data.len, self.size() as usize)?;
            k.wait()?;
        }
        Ok(())
    }
}
