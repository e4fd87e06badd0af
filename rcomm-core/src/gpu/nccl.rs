//! Device collectives handed to NCCL (`RCOMM_GPU_BACKEND=nccl`).
//!
//! **Loading.** libnccl is opened at run time (`libnccl.so.2`, the name NCCL's packages and the
//! `nvidia-nccl-cu12` wheel install, then `libnccl.so`), as the CUDA driver is, so one binary
//! runs with and without it; without it a call is [`CommError::Device`] saying how to get it,
//! never a panic. cudarc's NCCL bindings are not used: their loader panics on a missing symbol
//! and does not look for `libnccl.so.2`. NCCL 2.10 or newer is required (bf16, `ncclAvg`).
//!
//! **Choice.** `RCOMM_GPU_BACKEND=nccl` forces NCCL, `rcomm` forbids it, and `auto` (the
//! default) lets each communicator's ranks agree at its first device collective (an
//! allgather of "libnccl usable here" and the device's UUID): NCCL when it is usable on every
//! rank and no two ranks share a GPU, rcomm's own collectives otherwise; the answer is kept
//! per communicator and logged once per process. Reductions NCCL lacks stay rcomm's under
//! `auto`.
//!
//! **The NCCL communicator** of an rcomm communicator is made at its first NCCL collective
//! (each rank says whether it can take part, so that none waits for one that will never come;
//! rank 0 makes the unique id, rcomm's host broadcast carries it) by
//! `ncclCommInitRankConfig` with `blocking = 0`, polled under `RCOMM_TIMEOUT`; or, for a
//! communicator made by `split`, `create`, `dup` or a mesh dimension from one that has an NCCL
//! communicator, by `ncclCommSplit` of the parent's (ranks outside pass `NCCL_SPLIT_NOCOLOR`).
//! It is kept as an attribute of the communicator (not copied: the split makes the child's),
//! destroyed — or aborted, after a failure — when the communicator's last handle goes. See
//! `nccl_comm` for its failures, waits and watchdog.
//!
//! **Ordering.** Every call enqueues on a stream after the work already there. The
//! stream-ordered calls (`on_stream`, `*_device_on`) enqueue on the caller's stream and
//! return: no host wait. The plain calls enqueue on the executor's stream and then wait for an
//! event recorded after the operation — by polling, never `cuStreamSynchronize`, so a lost
//! peer, a revocation or the deadline ends the wait. Calls on one communicator from several
//! threads are serialised (NCCL forbids concurrent calls on one communicator).
//!
//! **Results** are NCCL's: reductions do not follow `RCOMM_DETERMINISTIC`'s canonical order,
//! float `Min`/`Max` treat NaN as NCCL does, `Avg` rounds as NCCL does. Element types NCCL
//! lacks (i16, u16) and the bitwise ops are refused, naming them.
//!
//! Written without a GPU: run only against the tests' stand-in libnccl (`rcomm-nccl-standin`,
//! host memory for device memory), never against a real libnccl or on a capturing stream.

use super::mem::{Stream, backend, dev_err};
use super::nccl_comm::{Failure, NcclComm, await_ready, count_call};
use super::nccl_lib::{
    IN_PROGRESS, Lib, NCCL_UINT8, NcclConfig, Raw, SPLIT_NOCOLOR, UniqueId, lib, result_text,
    version_text,
};
use crate::attr::{AttrCopy, Keyval};
use crate::{CommError, Communicator, Result, fr};
use rcomm_kernels::{Dtype, Op};
use std::ffi::c_int;
#[cfg(feature = "cuda")]
use std::sync::Mutex;
use std::sync::{Arc, OnceLock};

thread_local! {
    /// A call of this thread answered `ncclInProgress` since the flag was last taken.
    static IN_PROGRESS_SEEN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The error of a process where NCCL is not usable, with what to do about it.
fn unusable(op: &'static str, rank: u32, why: &str) -> CommError {
    CommError::Device {
        op,
        rank,
        why: format!(
            "{why}. RCOMM_GPU_BACKEND=nccl needs NCCL 2.10 or newer: install it (the libnccl2 \
             package, or pip's nvidia-nccl-cu12) and put the directory holding libnccl.so.2 \
             on LD_LIBRARY_PATH, or unset RCOMM_GPU_BACKEND to use rcomm's own device \
             collectives"
        ),
    }
}

/// Whether device collectives are forced to NCCL (`RCOMM_GPU_BACKEND=nccl`). Says nothing
/// about whether NCCL loads: the calls report that, so that a misconfigured job fails instead
/// of silently running something else.
pub(crate) fn nccl_enabled() -> bool {
    rcomm_runtime::config::gpu_backend() == rcomm_runtime::config::GpuBackend::Nccl
}

/// Whether NCCL may run device collectives at all (`nccl` or `auto`).
pub(crate) fn nccl_allowed() -> bool {
    rcomm_runtime::config::gpu_backend() != rcomm_runtime::config::GpuBackend::Rcomm
}

/// Whether NCCL has this reduction (under `auto` the others stay rcomm's).
pub(crate) fn nccl_reduces(dtype: Dtype, op: Op) -> bool {
    nccl_type(dtype).is_some() && nccl_op(op).is_some()
}

fn nccl_type(d: Dtype) -> Option<c_int> {
    Some(match d {
        Dtype::I8 => 0,
        Dtype::U8 => 1,
        Dtype::I32 => 2,
        Dtype::U32 => 3,
        Dtype::I64 => 4,
        Dtype::U64 => 5,
        Dtype::F16 => 6,
        Dtype::F32 => 7,
        Dtype::F64 => 8,
        Dtype::Bf16 => 9,
        Dtype::I16 | Dtype::U16 => return None,
    })
}

fn nccl_op(o: Op) -> Option<c_int> {
    // ncclRedOp_t's order: sum, prod, max, min, avg.
    Some(match o {
        Op::Sum => 0,
        Op::Prod => 1,
        Op::Max => 2,
        Op::Min => 3,
        Op::Avg => 4,
        Op::BAnd | Op::BOr | Op::BXor => return None,
    })
}

/// NCCL's codes for `dtype` and `op`, or the refusal naming what NCCL lacks.
fn reduction(op: &'static str, rank: u32, dtype: Dtype, red: Op) -> Result<(c_int, c_int)> {
    let refuse = |what: String| CommError::Device {
        op,
        rank,
        why: format!("{what} (RCOMM_GPU_BACKEND=nccl; rcomm's own device collectives have it)"),
    };
    let t = nccl_type(dtype)
        .ok_or_else(|| refuse(format!("NCCL has no {} element type", dtype.name())))?;
    let o = nccl_op(red).ok_or_else(|| refuse(format!("NCCL has no {} reduction", red.name())))?;
    Ok((t, o))
}

/// Makes `device`'s primary context current on this thread: NCCL's set-up takes its device
/// from the current context, and its calls expect that device's.
#[cfg(feature = "cuda")]
fn make_current(op: &'static str, rank: u32, device: u32) -> Result<()> {
    use cudarc::driver::sys as cu;
    use std::sync::PoisonError;
    if !matches!(backend(op, rank)?, rcomm_transport::gpu::Gpu::Cuda(_)) {
        // The stand-in device has no context to make current.
        return Ok(());
    }
    static CTX: Mutex<Vec<(u32, usize)>> = Mutex::new(Vec::new());
    let fail = |call: &str, r: cu::CUresult| CommError::Device {
        op,
        rank,
        why: format!("{call} failed on device {device}: {r:?}"),
    };
    let mut known = CTX.lock().unwrap_or_else(PoisonError::into_inner);
    let ctx = match known.iter().find(|(d, _)| *d == device) {
        Some(&(_, c)) => c,
        None => {
            // The driver backend checked these entries when it loaded; guarded all the same,
            // as a missing one is cudarc's panic.
            let c = std::panic::catch_unwind(|| {
                let mut dev: cu::CUdevice = 0;
                // SAFETY: writes one device handle.
                let r = unsafe { cu::cuDeviceGet(&mut dev, device as c_int) };
                if r != cu::CUresult::CUDA_SUCCESS {
                    return Err(fail("cuDeviceGet", r));
                }
                let mut c: cu::CUcontext = std::ptr::null_mut();
                // SAFETY: writes one context handle; the retain is kept for the process,
                // as the driver backend keeps its own.
                let r = unsafe { cu::cuDevicePrimaryCtxRetain(&mut c, dev) };
                if r != cu::CUresult::CUDA_SUCCESS {
                    return Err(fail("cuDevicePrimaryCtxRetain", r));
                }
                Ok(c as usize)
            })
            .unwrap_or_else(|_| {
                Err(CommError::Device {
                    op,
                    rank,
                    why: "the CUDA driver lacks an entry NCCL's set-up needs".into(),
                })
            })?;
            known.push((device, c));
            c
        }
    };
    drop(known);
    // SAFETY: a retained primary context, never released.
    let r = unsafe { cu::cuCtxSetCurrent(ctx as cu::CUcontext) };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err(fail("cuCtxSetCurrent", r));
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn make_current(op: &'static str, rank: u32, _device: u32) -> Result<()> {
    if matches!(backend(op, rank)?, rcomm_transport::gpu::Gpu::StandIn(_)) {
        return Ok(());
    }
    Err(CommError::Device {
        op,
        rank,
        why: "rcomm was built without its cuda feature: NCCL needs the CUDA driver".into(),
    })
}

fn comm_key() -> &'static Keyval<Arc<NcclComm>> {
    static KEY: OnceLock<Keyval<Arc<NcclComm>>> = OnceLock::new();
    KEY.get_or_init(|| Keyval::new(AttrCopy::Never))
}

/// NCCL's result `r` of `call` as rcomm's error, with NCCL's own words for it.
/// `ncclInProgress` is no error: the caller polls the communicator before relying on it.
fn check(lib: &Lib, comm: Raw, op: &'static str, rank: u32, call: &str, r: c_int) -> Result<()> {
    // Every NCCL call rcomm makes for an operation passes here once: the budget tests count
    // them.
    count_call();
    if r == 0 {
        return Ok(());
    }
    if r == IN_PROGRESS {
        IN_PROGRESS_SEEN.with(|f| f.set(true));
        return Ok(());
    }
    Err(CommError::Device {
        op,
        rank,
        why: format!("{call} failed: {}", result_text(lib, comm, r)),
    })
}

/// A buffer of a grouped point-to-point call: `bytes` at device address `addr`, to or from
/// communicator rank `peer`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NcclPeerBuf {
    pub addr: u64,
    pub bytes: usize,
    pub peer: u32,
}

thread_local! {
    /// The caller's stream of the stream-ordered call this thread is in, while NCCL takes it.
    static CALLER: std::cell::Cell<Option<Stream>> = const { std::cell::Cell::new(None) };
}

/// The caller's stream of the stream-ordered call this thread is in, when NCCL runs it.
pub(super) fn caller_stream() -> Option<Stream> {
    CALLER.with(std::cell::Cell::get)
}

/// Sets [`caller_stream`] for one call.
pub(super) struct CallerScope(Option<Stream>);

impl CallerScope {
    pub(super) fn enter(s: Stream) -> Self {
        Self(CALLER.with(|c| c.replace(Some(s))))
    }
}

impl Drop for CallerScope {
    fn drop(&mut self) {
        CALLER.with(|c| c.set(self.0));
    }
}

/// libnccl, if it can serve this process's device backend: a real NCCL needs the CUDA
/// backend, the tests' stand-in libnccl the stand-in device.
pub(super) fn usable_lib(op: &'static str, me: u32) -> Result<&'static Lib> {
    let lib = lib().map_err(|why| unusable(op, me, why))?;
    let g = backend(op, me)?;
    if (g.backend_name() == "cuda") == lib.standin {
        return Err(CommError::Device {
            op,
            rank: me,
            why: if lib.standin {
                "the libnccl loaded is rcomm's test stand-in, which cannot run on a real GPU".into()
            } else {
                format!(
                    "NCCL needs CUDA device memory; the device backend is the {} \
                     (RCOMM_GPU_STANDIN=1)",
                    g.backend_name()
                )
            },
        });
    }
    Ok(lib)
}

pub(super) fn choice_key() -> &'static Keyval<bool> {
    static KEY: OnceLock<Keyval<bool>> = OnceLock::new();
    KEY.get_or_init(|| Keyval::new(AttrCopy::Never))
}

/// Polls a communicator whose calls answered `ncclInProgress`, so work recorded after them
/// follows them (a non-blocking communicator may enqueue in the background).
fn settle(comm: &NcclComm, op: &'static str, me: u32) -> Result<()> {
    if !IN_PROGRESS_SEEN.with(|f| f.replace(false)) {
        return Ok(());
    }
    await_ready(comm.lib, comm.raw(), op, me, "").map_err(|e| {
        let f = comm.fail(Failure::Nccl(e.to_string()));
        f.error(op, me)
    })
}

impl Communicator {
    /// This communicator's members as world ranks, in rank order.
    fn member_ranks(&self) -> Vec<u32> {
        (0..self.size())
            .map(|r| self.world_rank(r).unwrap_or(u32::MAX))
            .collect()
    }

    /// Whether NCCL runs this communicator's device collectives: forced by
    /// `RCOMM_GPU_BACKEND`, or under `auto` agreed by its ranks at the first call (collective
    /// then; see the module's documentation) and kept.
    pub(crate) fn nccl_serves(&self, op: &'static str, device: u32) -> Result<bool> {
        use rcomm_runtime::config::GpuBackend;
        match rcomm_runtime::config::gpu_backend() {
            GpuBackend::Rcomm => return Ok(false),
            GpuBackend::Nccl => return Ok(true),
            GpuBackend::Auto => {}
        }
        if let Some(b) = self.get_attr(choice_key()) {
            return Ok(b);
        }
        if self.size() < 2 {
            // Alone: nobody to agree with.
            let serves = usable_lib(op, self.world_me()).is_ok();
            self.set_attr(choice_key(), serves);
            return Ok(serves);
        }
        self.device_agreement(op, device).map(|(_, serves)| serves)
    }

    /// This communicator's NCCL communicator on `device`, made now if it has none (collective:
    /// see the module's documentation).
    fn nccl_comm(&self, op: &'static str, device: u32) -> Result<Arc<NcclComm>> {
        let me = self.world_me();
        if let Some(c) = self.get_attr(comm_key()) {
            if c.device != device {
                return Err(CommError::Device {
                    op,
                    rank: me,
                    why: format!(
                        "this communicator's NCCL communicator is on device {}, the stream on \
                         device {device} (one device per communicator: dup it for another)",
                        c.device
                    ),
                });
            }
            return Ok(c);
        }
        let local: Result<(&Lib, UniqueId)> = (|| {
            let lib = usable_lib(op, me)?;
            make_current(op, me, device)?;
            let mut id = UniqueId([0; 128]);
            if self.rank() == 0 {
                // SAFETY: writes 128 bytes.
                let r = unsafe { (lib.unique_id)(&mut id) };
                check(lib, std::ptr::null_mut(), op, me, "ncclGetUniqueId", r)?;
            }
            Ok((lib, id))
        })();
        let mut all_ready = [u8::from(local.is_ok())];
        self.allreduce_in_place(&mut all_ready[..], Op::Min)?;
        let (lib, mut id) = local?;
        if all_ready[0] == 0 {
            return Err(CommError::Device {
                op,
                rank: me,
                why: "another rank of the communicator cannot use NCCL (its own error says why; \
                      most often libnccl is missing there)"
                    .into(),
            });
        }
        self.bcast(&mut id.0[..], 0)?;
        make_current(op, me, device)?;
        let mut raw: Raw = std::ptr::null_mut();
        let (n, r) = (self.size() as c_int, self.rank() as c_int);
        match lib.init_rank_config {
            Some(init) => {
                let mut cfg = NcclConfig::nonblocking();
                // SAFETY: writes one communicator handle; every rank passes the same id and
                // size and its own rank; the config is read during the call.
                let rc = unsafe { init(&mut raw, n, id, r, &mut cfg) };
                check(lib, raw, op, me, "ncclCommInitRankConfig", rc)?;
                IN_PROGRESS_SEEN.with(|f| f.set(false));
                await_ready(lib, raw, op, me, &fr::comm_label(self.ctx()))?;
            }
            None => {
                // SAFETY: as above, blocking (NCCL before 2.14).
                let rc = unsafe { (lib.init_rank)(&mut raw, n, id, r) };
                check(lib, raw, op, me, "ncclCommInitRank", rc)?;
            }
        }
        let c = NcclComm::new(
            raw,
            device,
            lib,
            self.ctx(),
            self.member_ranks(),
            self.shared(),
        );
        self.set_attr(comm_key(), c.clone());
        rcomm_runtime::rlog!(
            Info,
            "COLL",
            "NCCL {} communicator of {} ranks on comm {} (device {device})",
            version_text(lib.version),
            self.size(),
            fr::comm_label(self.ctx())
        );
        Ok(c)
    }

    /// Gives `child` (made by `split`, `create` or `dup` of this communicator; `None` on the
    /// ranks outside it) an NCCL communicator split off this one's, if this one has one.
    /// Collective over this communicator, as those calls are.
    pub(crate) fn nccl_split_into(&self, child: Option<&Communicator>) -> Result<()> {
        let Some(parent) = self.get_attr(comm_key()) else {
            return Ok(());
        };
        const OP: &str = "split";
        let me = self.world_me();
        if let Some(f) = parent.failed() {
            return Err(f.error(OP, me));
        }
        let lib = parent.lib;
        // Equal on the members of one child and apart between children: the world rank of
        // the child's rank 0.
        let (color, key) = match child {
            Some(c) => (c.world_rank(0)? as c_int, c.rank() as c_int),
            None => (SPLIT_NOCOLOR, 0),
        };
        let Some(split) = lib.split else {
            // NCCL before 2.18: the child makes its own at its first NCCL collective.
            return Ok(());
        };
        make_current(OP, me, parent.device)?;
        let mut raw: Raw = std::ptr::null_mut();
        let mut cfg = NcclConfig::nonblocking();
        {
            let _one = parent.calls.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: a live parent; writes one handle (null for NOCOLOR); every rank of the
            // parent calls it, as rcomm's split is collective over the parent.
            let rc = unsafe { split(parent.raw(), color, key, &mut raw, &mut cfg) };
            check(lib, parent.raw(), OP, me, "ncclCommSplit", rc)?;
        }
        IN_PROGRESS_SEEN.with(|f| f.set(false));
        let Some(child) = child else {
            return Ok(());
        };
        await_ready(lib, raw, OP, me, &fr::comm_label(child.ctx()))?;
        super::nccl_comm::SPLITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let c = NcclComm::new(
            raw,
            parent.device,
            lib,
            child.ctx(),
            child.member_ranks(),
            child.shared(),
        );
        child.set_attr(comm_key(), c);
        // A part of a communicator NCCL served has a GPU per rank too.
        child.set_attr(choice_key(), true);
        rcomm_runtime::rlog!(
            Info,
            "COLL",
            "NCCL communicator of {} ranks on comm {} split off comm {}",
            child.size(),
            fr::comm_label(child.ctx()),
            fr::comm_label(self.ctx())
        );
        Ok(())
    }

    /// Enqueues an NCCL operation (`enqueue`: its calls on the communicator and stream it is
    /// given) on `stream`. On the caller's stream of a stream-ordered call it returns at once,
    /// the watchdog tracking the work; otherwise it waits for the work by polling (see
    /// `nccl_comm`).
    fn nccl_run(
        &self,
        op: &'static str,
        comm: &NcclComm,
        stream: Stream,
        chk: Option<crate::Tag>,
        enqueue: impl FnOnce(&Lib, Raw, Raw) -> Result<()>,
    ) -> Result<()> {
        let me = self.world_me();
        if let Some(f) = comm.failed() {
            return Err(f.error(op, me));
        }
        let on_caller = caller_stream() == Some(stream);
        let seq = comm.next_seq();
        fr::set_device_op(self.ctx(), stream.raw, seq);
        {
            let _one = comm.calls.lock().unwrap_or_else(|p| p.into_inner());
            make_current(op, me, comm.device)?;
            IN_PROGRESS_SEEN.with(|f| f.set(false));
            enqueue(comm.lib, comm.raw(), stream.raw as Raw)?;
            settle(comm, op, me)?;
        }
        let g = backend(op, me)?;
        // A caller's stream captured into a CUDA graph: the graph's launch runs the work
        // later; no event can be polled for it now.
        if on_caller && g.stream_is_capturing(stream).map_err(dev_err(op, me))? {
            return Ok(());
        }
        let ev = g.event_record(stream).map_err(dev_err(op, me))?;
        if on_caller {
            comm.track(ev, op, seq);
            return Ok(());
        }
        // Checked mode: another rank's signature may prove this call wrong while it runs.
        let checked = |t: crate::Tag| {
            let failed = {
                let mut e = self.shared().lock();
                e.progress();
                self.check_failed(&e, t)
            };
            failed.then(|| self.check_error(t))
        };
        // A timeout names the collective by its number on the communicator, as rcomm's own
        // do (the record beside it has NCCL's number).
        let coll_seq = fr::current()
            .filter(|h| h.ctx() == self.ctx())
            .map_or(seq, |h| h.seq());
        let checked = chk.map(|t| move || checked(t));
        let checked = checked
            .as_ref()
            .map(|f| f as &dyn Fn() -> Option<CommError>);
        let r = comm.wait(g, &ev, op, coll_seq, me, checked);
        let _ = g.event_destroy(ev);
        r
    }

    /// One NCCL collective, recorded by the flight recorder as rcomm's own are (algorithm
    /// `nccl`).
    #[allow(clippy::too_many_arguments)]
    fn nccl_coll(
        &self,
        op: &'static str,
        bytes: usize,
        codes: (u8, u8),
        root: Option<u32>,
        stream: Stream,
        enqueue: impl FnOnce(&Lib, Raw, Raw) -> Result<()>,
    ) -> Result<()> {
        if let Some(r) = root.filter(|&r| r >= self.size()) {
            return Err(CommError::InvalidArg(format!(
                "{op}: root {r} of a communicator of {} ranks",
                self.size()
            )));
        }
        let comm = self.nccl_comm(op, stream.device)?;
        let _fr = fr::Scope::enter();
        // NCCL chooses its own algorithm: the record says `nccl` (with NCCL's operation number
        // and the stream, set when it is enqueued).
        fr::begin_coll(self.ctx(), op, None, bytes, codes);
        if let Some(r) = root {
            fr::set_root(self.ctx(), r);
        }
        // Checked mode: the signature is recorded and passed on before anything is enqueued
        // (a communicator that failed a check fails here at once).
        let kind = {
            use crate::coll::check::Kind;
            match op {
                "allreduce" => Kind::Allreduce,
                "bcast" => Kind::Bcast,
                "reduce" => Kind::Reduce,
                "allgather" => Kind::Allgather,
                "reduce_scatter" => Kind::ReduceScatter,
                "alltoall" => Kind::Alltoall,
                _ => Kind::Unknown,
            }
        };
        let mut call = crate::coll::check::Call::new(kind).elem(1).count(bytes);
        (call.dtype, call.op) = codes;
        if let Some(r) = root {
            call = call.root(r);
        }
        self.check_note(call);
        let res = self
            .check_composite(true)
            .and_then(|chk| self.nccl_run(op, &comm, stream, chk.map(|c| c.0), enqueue));
        fr::end_coll(self.ctx(), &res);
        res
    }

    /// Makes this communicator's NCCL communicator on `device` if it has none. Collective;
    /// needed before [`nccl_group`](Self::nccl_group) when no NCCL collective ran yet.
    pub(crate) fn nccl_setup(&self, device: u32) -> Result<()> {
        self.nccl_comm("setup", device).map(drop)
    }

    /// Whether this communicator has its NCCL communicator already (the grouped
    /// point-to-point call under `auto` uses NCCL only then: it cannot make one).
    pub(crate) fn has_nccl_comm(&self) -> bool {
        self.get_attr(comm_key()).is_some()
    }

    /// All-reduce of `count` elements of `dtype` from device memory `send` into `recv` (the
    /// same address: in place) with `op`, on `stream`; complete on return.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn nccl_allreduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: Dtype,
        op: Op,
        stream: Stream,
    ) -> Result<()> {
        let me = self.world_me();
        let (t, o) = reduction("allreduce", me, dtype, op)?;
        let bytes = count.saturating_mul(dtype.size());
        let codes = crate::coll::reduce::Reducer::Builtin(op, dtype).codes();
        self.nccl_coll("allreduce", bytes, codes, None, stream, |lib, c, s| {
            // SAFETY: device ranges of `count` elements each (the caller checked them);
            // NCCL reads `send` and writes `recv` in stream order.
            let r = unsafe { (lib.all_reduce)(send as _, recv as _, count, t, o, c, s) };
            check(lib, c, "allreduce", me, "ncclAllReduce", r)
        })
    }

    /// Broadcast of `bytes` of device memory at `buf` from communicator rank `root`, in place.
    pub(crate) fn nccl_bcast(
        &self,
        buf: u64,
        bytes: usize,
        root: u32,
        stream: Stream,
    ) -> Result<()> {
        let me = self.world_me();
        self.nccl_coll("bcast", bytes, (0, 0), Some(root), stream, |lib, c, s| {
            // SAFETY: a device range of `bytes` (checked by the caller), read on the root and
            // written elsewhere.
            let r = unsafe {
                (lib.broadcast)(buf as _, buf as _, bytes, NCCL_UINT8, root as c_int, c, s)
            };
            check(lib, c, "bcast", me, "ncclBroadcast", r)
        })
    }

    /// Reduce of `count` elements of `dtype` from `send` into `recv` on `root` with `op`
    /// (`recv` is not touched elsewhere and may be 0 there).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn nccl_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: Dtype,
        op: Op,
        root: u32,
        stream: Stream,
    ) -> Result<()> {
        let me = self.world_me();
        let (t, o) = reduction("reduce", me, dtype, op)?;
        let codes = crate::coll::reduce::Reducer::Builtin(op, dtype).codes();
        let bytes = count.saturating_mul(dtype.size());
        self.nccl_coll("reduce", bytes, codes, Some(root), stream, |lib, c, s| {
            // SAFETY: device ranges of `count` elements (checked by the caller; `recv` used on
            // the root only).
            let r = unsafe { (lib.reduce)(send as _, recv as _, count, t, o, root as c_int, c, s) };
            check(lib, c, "reduce", me, "ncclReduce", r)
        })
    }

    /// All-gather: `bytes` at `send` from every rank land in rank order at `recv`
    /// (`size × bytes`).
    pub(crate) fn nccl_allgather(
        &self,
        send: u64,
        recv: u64,
        bytes: usize,
        stream: Stream,
    ) -> Result<()> {
        let me = self.world_me();
        self.nccl_coll("allgather", bytes, (0, 0), None, stream, |lib, c, s| {
            // SAFETY: device ranges of `bytes` and `size × bytes` (checked by the caller).
            let r = unsafe { (lib.all_gather)(send as _, recv as _, bytes, NCCL_UINT8, c, s) };
            check(lib, c, "allgather", me, "ncclAllGather", r)
        })
    }

    /// Reduce-scatter: `send` holds `size` blocks of `recv_count` elements of `dtype`; block
    /// `rank` of their reduction with `op` lands at `recv`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn nccl_reduce_scatter(
        &self,
        send: u64,
        recv: u64,
        recv_count: usize,
        dtype: Dtype,
        op: Op,
        stream: Stream,
    ) -> Result<()> {
        let me = self.world_me();
        let (t, o) = reduction("reduce_scatter", me, dtype, op)?;
        let codes = crate::coll::reduce::Reducer::Builtin(op, dtype).codes();
        let bytes = recv_count.saturating_mul(dtype.size());
        self.nccl_coll("reduce_scatter", bytes, codes, None, stream, |lib, c, s| {
            // SAFETY: device ranges of `size × recv_count` and `recv_count` elements (checked
            // by the caller).
            let r = unsafe { (lib.reduce_scatter)(send as _, recv as _, recv_count, t, o, c, s) };
            check(lib, c, "reduce_scatter", me, "ncclReduceScatter", r)
        })
    }

    /// All-to-all: block `j` (`bytes` long) of `send` goes to rank `j`, whose block `i` of
    /// `recv` it becomes. A group of sends and receives: `ncclAlltoAll` exists only from 2.28.
    pub(crate) fn nccl_alltoall(
        &self,
        send: u64,
        recv: u64,
        bytes: usize,
        stream: Stream,
    ) -> Result<()> {
        let me = self.world_me();
        let n = self.size() as usize;
        self.nccl_coll("alltoall", bytes, (0, 0), None, stream, |lib, c, s| {
            let at = |base: u64, j: usize| base + (j * bytes) as u64;
            grouped(lib, c, "alltoall", me, |lib| {
                for j in 0..n {
                    // SAFETY: block j of ranges of `size × bytes` (checked by the caller).
                    let r = unsafe {
                        (lib.send)(at(send, j) as _, bytes, NCCL_UINT8, j as c_int, c, s)
                    };
                    check(lib, c, "alltoall", me, "ncclSend", r)?;
                    // SAFETY: as above, written by the receive.
                    let r = unsafe {
                        (lib.recv)(at(recv, j) as _, bytes, NCCL_UINT8, j as c_int, c, s)
                    };
                    check(lib, c, "alltoall", me, "ncclRecv", r)?;
                }
                Ok(())
            })
        })
    }

    /// Sends and receives as one NCCL group (each buffer to or from its communicator rank),
    /// complete on return. Only the ranks named take part, so it cannot make the NCCL
    /// communicator: [`nccl_setup`](Self::nccl_setup) or an NCCL collective must have run on
    /// this communicator (and on `stream`'s device) first.
    pub(crate) fn nccl_group(
        &self,
        sends: &[NcclPeerBuf],
        recvs: &[NcclPeerBuf],
        stream: Stream,
    ) -> Result<()> {
        let me = self.world_me();
        let op = "sendrecv";
        if let Some(b) = sends.iter().chain(recvs).find(|b| b.peer >= self.size()) {
            return Err(CommError::InvalidArg(format!(
                "{op}: peer {} of a communicator of {} ranks",
                b.peer,
                self.size()
            )));
        }
        lib().map_err(|why| unusable(op, me, why))?;
        let Some(comm) = self.get_attr(comm_key()) else {
            return Err(CommError::Device {
                op,
                rank: me,
                why: "NCCL point-to-point needs this communicator's NCCL communicator, which is \
                      made collectively: run an NCCL collective (or the set-up) on every rank \
                      first"
                    .into(),
            });
        };
        if comm.device != stream.device {
            return Err(CommError::Device {
                op,
                rank: me,
                why: format!(
                    "this communicator's NCCL communicator is on device {}, the stream on \
                     device {}",
                    comm.device, stream.device
                ),
            });
        }
        let _nvtx = crate::nvtx::Range::new(op);
        self.nccl_run(op, &comm, stream, None, |lib, c, s| {
            grouped(lib, c, op, me, |lib| {
                for b in sends {
                    // SAFETY: a device range of `bytes` the caller checked.
                    let r = unsafe {
                        (lib.send)(b.addr as _, b.bytes, NCCL_UINT8, b.peer as c_int, c, s)
                    };
                    check(lib, c, op, me, "ncclSend", r)?;
                }
                for b in recvs {
                    // SAFETY: as above, written by the receive.
                    let r = unsafe {
                        (lib.recv)(b.addr as _, b.bytes, NCCL_UINT8, b.peer as c_int, c, s)
                    };
                    check(lib, c, op, me, "ncclRecv", r)?;
                }
                Ok(())
            })
        })
    }
}

/// `calls` between `ncclGroupStart` and `ncclGroupEnd`; the group is closed even when a call
/// in it failed (an open group would swallow the next collective).
fn grouped(
    lib: &Lib,
    comm: Raw,
    op: &'static str,
    rank: u32,
    calls: impl FnOnce(&Lib) -> Result<()>,
) -> Result<()> {
    // SAFETY: plain NCCL calls.
    check(lib, comm, op, rank, "ncclGroupStart", unsafe {
        (lib.group_start)()
    })?;
    let inner = calls(lib);
    // SAFETY: closes the group opened above.
    let end = check(lib, comm, op, rank, "ncclGroupEnd", unsafe {
        (lib.group_end)()
    });
    inner.and(end)
}

#[cfg(test)]
mod tests {
    use super::super::nccl_lib::open;
    use super::*;

    #[test]
    fn without_libnccl_the_error_says_how_to_get_it() {
        let why = match open(&["libnccl-rcomm-test-absent.so.2"]) {
            Err(w) => w,
            Ok(_) => panic!("a library that does not exist loaded"),
        };
        assert!(why.starts_with("libnccl could not be loaded ("), "{why}");
        assert!(why.contains("libnccl-rcomm-test-absent.so.2"), "{why}");
        let e = unusable("allreduce", 3, &why);
        assert!(matches!(
            e,
            CommError::Device {
                op: "allreduce",
                rank: 3,
                ..
            }
        ));
        let s = e.to_string();
        for want in [
            "libnccl could not be loaded",
            "LD_LIBRARY_PATH",
            "unset RCOMM_GPU_BACKEND",
        ] {
            assert!(s.contains(want), "{want} not in {s}");
        }
    }

    #[test]
    fn every_call_without_libnccl_is_that_error_and_nothing_panics() {
        if lib().is_ok() {
            return; // A machine with NCCL: nothing to check here (scripts/gpu-check.sh).
        }
        let cfg = rcomm_runtime::config::Config::from_map(&Default::default()).unwrap();
        let w = crate::world::init_for_test(&cfg);
        let s = Stream { device: 0, raw: 0 };
        type Call<'a> = (&'static str, Box<dyn Fn() -> Result<()> + 'a>);
        let calls: Vec<Call<'_>> = vec![
            (
                "allreduce",
                Box::new(|| w.nccl_allreduce(0, 0, 4, Dtype::F32, Op::Sum, s)),
            ),
            ("bcast", Box::new(|| w.nccl_bcast(0, 16, 0, s))),
            (
                "reduce",
                Box::new(|| w.nccl_reduce(0, 0, 4, Dtype::Bf16, Op::Max, 0, s)),
            ),
            ("allgather", Box::new(|| w.nccl_allgather(0, 0, 16, s))),
            (
                "reduce_scatter",
                Box::new(|| w.nccl_reduce_scatter(0, 0, 4, Dtype::I64, Op::Avg, s)),
            ),
            ("alltoall", Box::new(|| w.nccl_alltoall(0, 0, 16, s))),
            ("setup", Box::new(|| w.nccl_setup(0))),
            (
                "sendrecv",
                Box::new(|| {
                    let b = NcclPeerBuf {
                        addr: 0,
                        bytes: 16,
                        peer: 0,
                    };
                    w.nccl_group(&[b], &[b], s)
                }),
            ),
        ];
        for (name, call) in calls {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&call))
                .unwrap_or_else(|_| panic!("{name} panicked"));
            match r {
                Err(CommError::Device { op, why, .. }) => {
                    assert_eq!(op, name);
                    assert!(why.contains("libnccl could not be loaded"), "{name}: {why}");
                    assert!(why.contains("RCOMM_GPU_BACKEND"), "{name}: {why}");
                }
                r => panic!("{name}: {r:?}"),
            }
        }
        // The set-up's agreement ran (every rank says whether it can) and left no record
        // open on this thread.
        assert_eq!(fr::current(), None);
    }

    #[test]
    fn the_test_stand_in_is_loaded_only_when_rcomm_nccl_lib_names_it() {
        // Next to this test binary when the tests crate built rcomm-nccl-standin.
        let Some(p) = std::env::current_exe()
            .ok()
            .and_then(|e| Some(e.parent()?.join("libnccl.so")))
            .filter(|p| p.is_file())
        else {
            return; // Not built in this target directory: nothing to refuse.
        };
        let why = match open(&[p.to_str().expect("utf-8")]) {
            Err(w) => w,
            Ok(_) => panic!("the stand-in loaded by a default name"),
        };
        assert!(why.contains("rcomm's test stand-in"), "{why}");
    }

    #[test]
    fn what_nccl_lacks_is_refused_by_name() {
        for d in Dtype::ALL {
            assert_eq!(
                nccl_type(d).is_none(),
                matches!(d, Dtype::I16 | Dtype::U16),
                "{d:?}"
            );
        }
        for o in Op::ALL {
            assert_eq!(
                nccl_op(o).is_none(),
                matches!(o, Op::BAnd | Op::BOr | Op::BXor),
                "{o:?}"
            );
        }
        let e = reduction("allreduce", 0, Dtype::I16, Op::Sum).unwrap_err();
        assert!(
            e.to_string().contains("NCCL has no i16 element type"),
            "{e}"
        );
        let e = reduction("allreduce", 0, Dtype::U32, Op::BXor).unwrap_err();
        assert!(e.to_string().contains("NCCL has no bxor reduction"), "{e}");
        assert_eq!(
            reduction("allreduce", 0, Dtype::F32, Op::Min).unwrap(),
            (7, 3)
        );
        assert_eq!(version_text(22105), "2.21.5");
        assert_eq!(version_text(2804), "2.8.4");
    }

    #[test]
    fn nccl_is_chosen_only_by_the_variable() {
        // The process configuration of the tests sets nothing: rcomm's own collectives.
        if std::env::var_os("RCOMM_GPU_BACKEND").is_none() {
            assert!(!nccl_enabled());
        }
        let env = [("RCOMM_GPU_BACKEND".to_string(), "nccl".to_string())].into();
        let c = rcomm_runtime::config::Config::from_map(&env).unwrap();
        assert_eq!(c.gpu_backend, rcomm_runtime::config::GpuBackend::Nccl);
    }
}
