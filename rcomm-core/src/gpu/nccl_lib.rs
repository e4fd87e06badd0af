//! Loading libnccl: the entry points rcomm calls, resolved by hand at run time (see `nccl`
//! for why not cudarc's bindings), NCCL's C types and codes, and its words for a result.

use rcomm_runtime::os::dl_error;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;

/// `ncclComm_t` and `cudaStream_t`: opaque pointers.
pub(super) type Raw = *mut c_void;

/// `ncclInProgress`: a non-blocking communicator's call goes on in the background.
pub(super) const IN_PROGRESS: c_int = 7;

/// `NCCL_SPLIT_NOCOLOR`: this rank takes no part in the communicator split off.
pub(super) const SPLIT_NOCOLOR: c_int = -1;

/// `ncclConfig_t` as NCCL 2.18 lays it out (the fields after `version` are read only as far
/// as `version` says they exist); every field but `blocking` left unset.
#[repr(C)]
pub(super) struct NcclConfig {
    size: usize,
    magic: std::ffi::c_uint,
    version: std::ffi::c_uint,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
}

impl NcclConfig {
    /// `NCCL_CONFIG_INITIALIZER` with `blocking = 0`.
    pub(super) fn nonblocking() -> Self {
        const UNDEF: c_int = c_int::MIN;
        Self {
            size: size_of::<Self>(),
            magic: 0xcafe_beef,
            version: 21800,
            blocking: 0,
            cga_cluster_size: UNDEF,
            min_ctas: UNDEF,
            max_ctas: UNDEF,
            net_name: std::ptr::null(),
            split_share: UNDEF,
        }
    }
}

/// `ncclUniqueId`: 128 bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct UniqueId(pub(super) [u8; 128]);

/// `ncclDataType_t` of bytes, for the calls that move bytes without reducing them.
pub(super) const NCCL_UINT8: c_int = 1;

// NCCL's entry points as nccl.h declares them (enums are C ints).
pub(super) type VersionFn = unsafe extern "C" fn(*mut c_int) -> c_int;
pub(super) type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
pub(super) type LastErrorFn = unsafe extern "C" fn(Raw) -> *const c_char;
pub(super) type UniqueIdFn = unsafe extern "C" fn(*mut UniqueId) -> c_int;
pub(super) type InitRankFn = unsafe extern "C" fn(*mut Raw, c_int, UniqueId, c_int) -> c_int;
pub(super) type DestroyFn = unsafe extern "C" fn(Raw) -> c_int;
/// `ncclAllReduce`, `ncclReduceScatter`: send, recv, count, type, op, comm, stream.
pub(super) type ReduceAllFn =
    unsafe extern "C" fn(*const c_void, Raw, usize, c_int, c_int, Raw, Raw) -> c_int;
/// `ncclBroadcast`: send, recv, count, type, root, comm, stream.
pub(super) type BroadcastFn = ReduceAllFn;
/// `ncclReduce`: send, recv, count, type, op, root, comm, stream.
pub(super) type ReduceFn =
    unsafe extern "C" fn(*const c_void, Raw, usize, c_int, c_int, c_int, Raw, Raw) -> c_int;
pub(super) type AllGatherFn =
    unsafe extern "C" fn(*const c_void, Raw, usize, c_int, Raw, Raw) -> c_int;
pub(super) type SendFn =
    unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Raw, Raw) -> c_int;
pub(super) type RecvFn = unsafe extern "C" fn(Raw, usize, c_int, c_int, Raw, Raw) -> c_int;
pub(super) type GroupFn = unsafe extern "C" fn() -> c_int;
pub(super) type InitRankConfigFn =
    unsafe extern "C" fn(*mut Raw, c_int, UniqueId, c_int, *mut NcclConfig) -> c_int;
pub(super) type AsyncErrorFn = unsafe extern "C" fn(Raw, *mut c_int) -> c_int;
/// `ncclCommSplit`: comm, color, key, new comm, config.
pub(super) type SplitFn =
    unsafe extern "C" fn(Raw, c_int, c_int, *mut Raw, *mut NcclConfig) -> c_int;

/// The entry points rcomm uses, resolved once.
pub(super) struct Lib {
    /// `ncclGetVersion`'s code (e.g. 22105 for 2.21.5).
    pub(super) version: c_int,
    pub(super) error_string: ErrorStringFn,
    /// Absent before NCCL 2.13: errors then carry the result code's text only.
    pub(super) last_error: Option<LastErrorFn>,
    pub(super) unique_id: UniqueIdFn,
    pub(super) init_rank: InitRankFn,
    pub(super) all_reduce: ReduceAllFn,
    pub(super) broadcast: BroadcastFn,
    pub(super) reduce: ReduceFn,
    pub(super) all_gather: AllGatherFn,
    pub(super) reduce_scatter: ReduceAllFn,
    pub(super) send: SendFn,
    pub(super) recv: RecvFn,
    pub(super) group_start: GroupFn,
    pub(super) group_end: GroupFn,
    pub(super) get_async_error: AsyncErrorFn,
    pub(super) abort: DestroyFn,
    pub(super) destroy: DestroyFn,
    /// NCCL 2.14+: non-blocking set-up; older ones are set up blocking.
    pub(super) init_rank_config: Option<InitRankConfigFn>,
    /// NCCL 2.18+; older ones make a split-off communicator from a new unique id.
    pub(super) split: Option<SplitFn>,
    /// NCCL 2.18+: flushes a non-blocking communicator's work before `ncclCommDestroy`.
    pub(super) finalize: Option<DestroyFn>,
    /// The tests' stand-in libnccl (it has `rcommNcclStandInLive`): works on the stand-in
    /// GPU's host memory, so it may serve the stand-in device backend.
    pub(super) standin: bool,
}

/// Where NCCL is looked for, in order.
pub(super) const LIB_NAMES: &[&str] = &["libnccl.so.2", "libnccl.so"];

/// The oldest NCCL accepted (2.10.0 in `ncclGetVersion`'s code).
pub(super) const MIN_VERSION: c_int = 21000;

pub(super) fn version_text(v: c_int) -> String {
    // Codes below 2.9 were major*1000 + minor*100 + patch.
    if v >= 10000 {
        format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, v / 100 % 10, v % 100)
    }
}

/// Opens the first of `names` that loads and resolves every entry; the reason otherwise.
pub(super) fn open(names: &[&str]) -> std::result::Result<Lib, String> {
    let mut tried = Vec::new();
    let first = rcomm_runtime::config::nccl_lib().map(|p| p.to_string_lossy().into_owned());
    for name in first.as_deref().into_iter().chain(names.iter().copied()) {
        let Ok(c) = CString::new(name) else { continue };
        // SAFETY: dlopen runs NCCL's initialisers, which only set up its own state. The
        // handle is kept for the process: the entry points below point into it.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            tried.push(dl_error());
            continue;
        }
        // The tests' stand-in is built where cargo's library path points (target/*/deps): only
        // a library named by RCOMM_NCCL_LIB may be it, never one found by the usual names.
        // SAFETY: looking a symbol up calls nothing.
        let standin = !unsafe { libc::dlsym(h, c"rcommNcclStandInLive".as_ptr()) }.is_null();
        if standin && Some(name) != first.as_deref() {
            tried.push(format!(
                "{name} is rcomm's test stand-in, used only when RCOMM_NCCL_LIB names it"
            ));
            // SAFETY: nothing of it was used.
            unsafe { libc::dlclose(h) };
            continue;
        }
        return resolve(h, name);
    }
    Err(format!(
        "libnccl could not be loaded ({})",
        tried.join("; ")
    ))
}

pub(super) fn resolve(h: *mut c_void, name: &str) -> std::result::Result<Lib, String> {
    let find = |sym: &CStr| {
        // SAFETY: looking a symbol up calls nothing.
        let p = unsafe { libc::dlsym(h, sym.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    macro_rules! need {
        ($sym:literal, $t:ty) => {{
            let p = find($sym).ok_or_else(|| {
                format!(
                    "{name} has no {} (NCCL older than 2.10?)",
                    $sym.to_string_lossy()
                )
            })?;
            // SAFETY: nccl.h declares the symbol with this signature (checked by hand against
            // the headers of 2.10 to 2.2x).
            unsafe { std::mem::transmute::<*mut c_void, $t>(p) }
        }};
    }
    let get_version = need!(c"ncclGetVersion", VersionFn);
    let mut version: c_int = 0;
    // SAFETY: writes one int.
    if unsafe { get_version(&mut version) } != 0 || version < MIN_VERSION {
        return Err(format!(
            "{name} is NCCL {}; rcomm needs 2.10 or newer",
            version_text(version)
        ));
    }
    Ok(Lib {
        version,
        error_string: need!(c"ncclGetErrorString", ErrorStringFn),
        last_error: find(c"ncclGetLastError").map(|p| {
            // SAFETY: as in `need!`: `const char* ncclGetLastError(ncclComm_t)`.
            unsafe { std::mem::transmute::<*mut c_void, LastErrorFn>(p) }
        }),
        unique_id: need!(c"ncclGetUniqueId", UniqueIdFn),
        init_rank: need!(c"ncclCommInitRank", InitRankFn),
        destroy: need!(c"ncclCommDestroy", DestroyFn),
        get_async_error: need!(c"ncclCommGetAsyncError", AsyncErrorFn),
        abort: need!(c"ncclCommAbort", DestroyFn),
        // SAFETY (the three below): as in `need!`, with nccl.h's signatures.
        init_rank_config: find(c"ncclCommInitRankConfig")
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, InitRankConfigFn>(p) }),
        split: find(c"ncclCommSplit")
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, SplitFn>(p) }),
        finalize: find(c"ncclCommFinalize")
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, DestroyFn>(p) }),
        standin: find(c"rcommNcclStandInLive").is_some(),
        all_reduce: need!(c"ncclAllReduce", ReduceAllFn),
        broadcast: need!(c"ncclBroadcast", BroadcastFn),
        reduce: need!(c"ncclReduce", ReduceFn),
        all_gather: need!(c"ncclAllGather", AllGatherFn),
        reduce_scatter: need!(c"ncclReduceScatter", ReduceAllFn),
        send: need!(c"ncclSend", SendFn),
        recv: need!(c"ncclRecv", RecvFn),
        group_start: need!(c"ncclGroupStart", GroupFn),
        group_end: need!(c"ncclGroupEnd", GroupFn),
    })
}

pub(super) fn lib() -> std::result::Result<&'static Lib, &'static str> {
    static LIB: OnceLock<std::result::Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(|| open(LIB_NAMES))
        .as_ref()
        .map_err(String::as_str)
}

/// NCCL's words for result `r` (and its last error on `comm`, where it has one).
pub(super) fn result_text(lib: &Lib, comm: Raw, r: c_int) -> String {
    let text = |p: *const c_char| {
        // SAFETY: NCCL returns static or per-communicator NUL-terminated strings, or null.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    // SAFETY: plain NCCL calls on a result code / a live communicator (or null).
    let what = text(unsafe { (lib.error_string)(r) }).unwrap_or_else(|| "unknown error".into());
    let last = lib
        .last_error
        .and_then(|f| text(unsafe { f(comm) }))
        .filter(|s| !s.is_empty());
    match last {
        Some(l) => format!("{what} (NCCL result {r}): {l}"),
        None => format!("{what} (NCCL result {r})"),
    }
}
