//! NCCL's C types and codes as nccl.h declares them, the stream header rcomm's GPU stand-in
//! puts first in its streams, and the error every call reports.

use rcomm_kernels::{Dtype, Op};
use std::ffi::{CStr, c_char, c_int, c_void};

/// `ncclGetVersion`'s answer: 2.23.4.
pub const VERSION_CODE: c_int = 22304;

/// `ncclResult_t` values.
pub const SUCCESS: c_int = 0;
/// `ncclUnhandledCudaError`.
pub const UNHANDLED_CUDA: c_int = 1;
/// `ncclSystemError`.
pub const SYSTEM: c_int = 2;
/// `ncclInternalError`.
pub const INTERNAL: c_int = 3;
/// `ncclInvalidArgument`.
pub const INVALID_ARGUMENT: c_int = 4;
/// `ncclInvalidUsage`.
pub const INVALID_USAGE: c_int = 5;
/// `ncclRemoteError`.
pub const REMOTE: c_int = 6;
/// `ncclInProgress`.
pub const IN_PROGRESS: c_int = 7;

/// `NCCL_SPLIT_NOCOLOR`.
pub const SPLIT_NOCOLOR: c_int = -1;
/// `NCCL_CONFIG_UNDEF_INT`: a field the caller left to NCCL.
pub const CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// The magic `NCCL_CONFIG_INITIALIZER` writes.
pub const CONFIG_MAGIC: u32 = 0xcafe_beef;

/// The first word of a [`StreamAbi`].
pub const STREAM_MAGIC: u64 = u64::from_le_bytes(*b"rcommstr");

/// A host function queued on a stream (`CUhostFn`).
pub type HostFn = unsafe extern "C" fn(*mut c_void);

/// The header a non-null `cudaStream_t` points at: the stand-in queues each operation as one
/// host function with `launch_host_func`, which the stream's owner runs in FIFO order on its
/// own thread after the work queued before it (as `cuLaunchHostFunc`). It returns 0 when the
/// function was queued.
#[repr(C)]
pub struct StreamAbi {
    /// [`STREAM_MAGIC`].
    pub magic: u64,
    /// Queues `f(arg)` on `stream` (the pointer to this header).
    pub launch_host_func:
        unsafe extern "C" fn(stream: *mut c_void, f: HostFn, arg: *mut c_void) -> c_int,
}

/// `ncclUniqueId`: 128 bytes passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    /// What `ncclGetUniqueId` wrote.
    pub internal: [u8; 128],
}

/// `ncclConfig_t` as nccl.h of 2.27 lays it out (each release appends fields, so this is a
/// prefix-compatible superset of 2.19's to 2.26's). Only `size`, `magic`, `version` and
/// `blocking` are read, and nothing at or past `size` bytes.
#[repr(C)]
pub struct Config {
    /// `sizeof(ncclConfig_t)` of the caller's header.
    pub size: usize,
    /// [`CONFIG_MAGIC`].
    pub magic: u32,
    /// The caller's `NCCL_VERSION_CODE`.
    pub version: u32,
    /// 0: non-blocking calls; 1 or [`CONFIG_UNDEF_INT`]: blocking.
    pub blocking: c_int,
    /// Not read.
    pub cga_cluster_size: c_int,
    /// Not read.
    pub min_ctas: c_int,
    /// Not read.
    pub max_ctas: c_int,
    /// Not read.
    pub net_name: *const c_char,
    /// Not read.
    pub split_share: c_int,
    /// Not read.
    pub traffic_class: c_int,
    /// Not read.
    pub comm_name: *const c_char,
    /// Not read.
    pub collnet_enable: c_int,
    /// Not read.
    pub cta_policy: c_int,
    /// Not read.
    pub shrink_share: c_int,
    /// Not read.
    pub nvls_ctas: c_int,
}

impl Config {
    /// What `NCCL_CONFIG_INITIALIZER` gives, with `blocking` set.
    pub fn new(blocking: bool) -> Config {
        Config {
            size: std::mem::size_of::<Config>(),
            magic: CONFIG_MAGIC,
            version: VERSION_CODE as u32,
            blocking: c_int::from(blocking),
            cga_cluster_size: CONFIG_UNDEF_INT,
            min_ctas: CONFIG_UNDEF_INT,
            max_ctas: CONFIG_UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: CONFIG_UNDEF_INT,
            traffic_class: CONFIG_UNDEF_INT,
            comm_name: std::ptr::null(),
            collnet_enable: CONFIG_UNDEF_INT,
            cta_policy: CONFIG_UNDEF_INT,
            shrink_share: CONFIG_UNDEF_INT,
            nvls_ctas: CONFIG_UNDEF_INT,
        }
    }
}

/// Whether calls on a communicator made with `config` block (null: they do).
///
/// # Safety
/// `config` is null or points at `size` readable bytes, `size` being its first field.
pub unsafe fn blocking(config: *const Config) -> Result<bool, Fail> {
    if config.is_null() {
        return Ok(true);
    }
    // SAFETY: the caller's contract; the fields are read one by one, each only when `size`
    // covers it.
    unsafe {
        let size = std::ptr::addr_of!((*config).size).read_unaligned();
        let end_of = |off: usize, len: usize| off + len <= size;
        if !end_of(std::mem::offset_of!(Config, version), 4) {
            return Err(Fail::invalid(format!(
                "ncclConfig_t of {size} bytes: too short to hold its magic and version \
                 (initialise it with NCCL_CONFIG_INITIALIZER)"
            )));
        }
        let magic = std::ptr::addr_of!((*config).magic).read_unaligned();
        if magic != CONFIG_MAGIC {
            return Err(Fail::invalid(format!(
                "ncclConfig_t magic is {magic:#x}, expected {CONFIG_MAGIC:#x} (initialise it \
                 with NCCL_CONFIG_INITIALIZER)"
            )));
        }
        if !end_of(std::mem::offset_of!(Config, blocking), 4) {
            return Ok(true);
        }
        let b = std::ptr::addr_of!((*config).blocking).read_unaligned();
        match b {
            0 => Ok(false),
            1 | CONFIG_UNDEF_INT => Ok(true),
            _ => Err(Fail::invalid(format!(
                "ncclConfig_t blocking is {b}, expected 0 or 1"
            ))),
        }
    }
}

/// The element type of an `ncclDataType_t`.
pub fn dtype(code: c_int) -> Result<Dtype, Fail> {
    Ok(match code {
        0 => Dtype::I8,
        1 => Dtype::U8,
        2 => Dtype::I32,
        3 => Dtype::U32,
        4 => Dtype::I64,
        5 => Dtype::U64,
        6 => Dtype::F16,
        7 => Dtype::F32,
        8 => Dtype::F64,
        9 => Dtype::Bf16,
        _ => {
            return Err(Fail::invalid(format!(
                "ncclDataType_t {code} is not one of 0 (int8) to 9 (bfloat16)"
            )));
        }
    })
}

/// The reduction of an `ncclRedOp_t` (`Avg` sums; the division comes last).
pub fn red_op(code: c_int) -> Result<Op, Fail> {
    Ok(match code {
        0 => Op::Sum,
        1 => Op::Prod,
        2 => Op::Max,
        3 => Op::Min,
        4 => Op::Avg,
        _ => {
            return Err(Fail::invalid(format!(
                "ncclRedOp_t {code} is not one of 0 (sum) to 4 (avg)"
            )));
        }
    })
}

/// `ncclGetErrorString`'s texts, as NCCL words them.
pub fn error_string(code: c_int) -> &'static CStr {
    match code {
        SUCCESS => c"no error",
        UNHANDLED_CUDA => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        SYSTEM => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        INTERNAL => c"internal error - please report this issue to the NCCL developers",
        INVALID_ARGUMENT => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        INVALID_USAGE => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        REMOTE => c"remote process exited or there was a network error",
        IN_PROGRESS => c"NCCL operation in progress",
        _ => c"unknown result code",
    }
}

/// A failed call: its `ncclResult_t` and the text `ncclGetLastError` gives for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    /// The result code (never [`SUCCESS`]).
    pub code: c_int,
    /// What went wrong, for `ncclGetLastError`.
    pub text: String,
}

impl Fail {
    /// A failure of `code`.
    pub fn new(code: c_int, text: impl Into<String>) -> Fail {
        Fail {
            code,
            text: text.into(),
        }
    }
    /// `ncclInvalidArgument`.
    pub fn invalid(text: impl Into<String>) -> Fail {
        Fail::new(INVALID_ARGUMENT, text)
    }
    /// `ncclInvalidUsage`.
    pub fn usage(text: impl Into<String>) -> Fail {
        Fail::new(INVALID_USAGE, text)
    }
    /// `ncclRemoteError`.
    pub fn remote(text: impl Into<String>) -> Fail {
        Fail::new(REMOTE, text)
    }
    /// `ncclSystemError`.
    pub fn system(text: impl Into<String>) -> Fail {
        Fail::new(SYSTEM, text)
    }
    /// `ncclInternalError`.
    pub fn internal(text: impl Into<String>) -> Fail {
        Fail::new(INTERNAL, text)
    }
}
