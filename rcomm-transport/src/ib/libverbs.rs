//! The [`Verbs`] trait on the system's libibverbs (rdma-core), loaded at run time.
//!
//! `libibverbs.so.1` is opened with `dlopen`, not linked (as rcomm-core loads NCCL and NVTX):
//! one binary runs with or without rdma-core, and where it is missing [`LibVerbs::load`] says
//! so with a [`LoadError`] instead of the binary failing to start. rcomm keeps `#[repr(C)]`
//! copies of exactly the structs and fields it touches, checked against `verbs.h` by the test
//! `rcomm-transport/tests/ib_abi.rs` (which compiles a C file printing `sizeof`/`offsetof`
//! and compares with [`abi_layout`]).
//!
//! Calls:
//! - Exported functions are looked up with `dlvsym` at the symbol version a program compiled
//!   against `verbs.h` records (`IBVERBS_1.1` for the classic verbs, `IBVERBS_1.11` for
//!   `_ibv_query_gid_ex`). Plain `dlsym` would give the library's default version, which is
//!   the same today, but pinning the version pins the ABI the struct copies describe: the
//!   `IBVERBS_1.0` twins of these symbols take the pre-1.1 structs, and a future default
//!   version could change them again.
//! - `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are `static inline` in `verbs.h`
//!   (calls through `context->ops`); they are reproduced here the same way.
//! - `ibv_query_port` is a macro over an inline wrapper that uses the provider's extended
//!   `verbs_context` when it has one and otherwise calls the exported
//!   `ibv_query_port@IBVERBS_1.1` on a zeroed struct. This backend always takes that second
//!   path: the exported function fills the original (`_compat_ibv_port_attr`) prefix of the
//!   struct, which holds every field rcomm reads, and it copies no more than that prefix.
//! - `ibv_reg_mr` is a macro choosing between the exported `ibv_reg_mr` and `ibv_reg_mr_iova2`:
//!   it takes `ibv_reg_mr` when no flag of `IBV_ACCESS_OPTIONAL_RANGE` is set, which holds for
//!   every [`Access`] flag, so that is the one called.
//! - `ibv_query_gid_ex` is an inline wrapper over the exported `_ibv_query_gid_ex` (rdma-core
//!   32 and newer) passing `sizeof(struct ibv_gid_entry)`.
//!
//! Objects are kept in tables behind a `RwLock`, keyed by ids that are never reused, so a
//! stale, forged or foreign handle is [`VerbsError::BadHandle`] and never a dangling pointer.
//! Calls on existing objects (posts, polls, queries) take the lock shared, so they run
//! concurrently as libibverbs allows; creating and destroying take it exclusively, so nothing
//! is destroyed while another thread uses it. Closing a device, freeing a PD or destroying a
//! CQ that our tables still see in use is refused with [`VerbsError::Busy`] before libibverbs
//! is asked (`ibv_close_device` itself would free a context under live objects).
//!
//! Only loading and device listing have run (on a machine with rdma-core and no RDMA devices):
//! nothing past `ibv_get_device_list` has met a device.
//!
//! Why one file: the mirror of one C ABI (libibverbs'): the `#[repr(C)]` copies, the symbols
//! looked up and the calls through them change together when `verbs.h` does, and `abi_layout`
//! checks them as one.

use rcomm_runtime::os::dl_error;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::verbs::{
    Access, AsyncEvent, Context, Cq, DeviceAttr, GidEntry, GidType, LinkLayer, LinkSpeed, Mr, Mtu,
    Pd, PortAttr, PortState, PostError, Qp, QpInitAttr, QpModify, QpState, RecvWr, Result, SendOp,
    SendWr, Verbs, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

/// The library's name: the runtime package (`libibverbs1`) installs it, `-dev` is not needed.
pub const LIB_NAME: &str = "libibverbs.so.1";

/// Why libibverbs could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// `dlopen` failed: no such library (or not loadable here).
    #[error("{path} not found: install rdma-core (libibverbs1) ({reason})")]
    NotFound {
        /// What was opened.
        path: String,
        /// `dlerror`'s text.
        reason: String,
    },
    /// The library lacks an entry point rcomm needs.
    #[error("{path} has no {symbol}@{version}: {hint}")]
    MissingSymbol {
        /// What was opened.
        path: String,
        /// The symbol.
        symbol: &'static str,
        /// Its version.
        version: &'static str,
        /// What that probably means.
        hint: &'static str,
    },
}

// ---------------------------------------------------------------------------------------------
// The structs, as `verbs.h` (rdma-core) lays them out. Field names are the C names, so that
// `abi_layout` and the C side of the ABI test print the same strings. Leading-underscore
// fields stand for C members rcomm never touches (compatibility slots, padding of unions).

/// `union ibv_gid` (its `global` view of two `__be64` gives it 8-byte alignment).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
struct IbvGid {
    raw: [u8; 16],
}

/// `struct ibv_device`: only ever handled by pointer.
#[repr(C)]
struct IbvDevice {
    _opaque: [u8; 0],
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
struct IbvDeviceAttr {
    fw_ver: [c_char; 64],
    node_guid: u64,
    sys_image_guid: u64,
    max_mr_size: u64,
    page_size_cap: u64,
    vendor_id: u32,
    vendor_part_id: u32,
    hw_ver: u32,
    max_qp: c_int,
    max_qp_wr: c_int,
    device_cap_flags: u32,
    max_sge: c_int,
    max_sge_rd: c_int,
    max_cq: c_int,
    max_cqe: c_int,
    max_mr: c_int,
    max_pd: c_int,
    max_qp_rd_atom: c_int,
    max_ee_rd_atom: c_int,
    max_res_rd_atom: c_int,
    max_qp_init_rd_atom: c_int,
    max_ee_init_rd_atom: c_int,
    atomic_cap: u32,
    max_ee: c_int,
    max_rdd: c_int,
    max_mw: c_int,
    max_raw_ipv6_qp: c_int,
    max_raw_ethy_qp: c_int,
    max_mcast_grp: c_int,
    max_mcast_qp_attach: c_int,
    max_total_mcast_qp_attach: c_int,
    max_ah: c_int,
    max_fmr: c_int,
    max_map_per_fmr: c_int,
    max_srq: c_int,
    max_srq_wr: c_int,
    max_srq_sge: c_int,
    max_pkeys: u16,
    local_ca_ack_delay: u8,
    phys_port_cnt: u8,
}

/// `struct ibv_port_attr` (rdma-core 44: ends with `port_cap_flags2`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvPortAttr {
    state: u32,
    max_mtu: u32,
    active_mtu: u32,
    gid_tbl_len: c_int,
    port_cap_flags: u32,
    max_msg_sz: u32,
    bad_pkey_cntr: u32,
    qkey_viol_cntr: u32,
    pkey_tbl_len: u16,
    lid: u16,
    sm_lid: u16,
    lmc: u8,
    max_vl_num: u8,
    sm_sl: u8,
    subnet_timeout: u8,
    init_type_reply: u8,
    active_width: u8,
    active_speed: u8,
    phys_state: u8,
    link_layer: u8,
    flags: u8,
    port_cap_flags2: u16,
}

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvGidEntry {
    gid: IbvGid,
    gid_index: u32,
    port_num: u32,
    gid_type: u32,
    ndev_ifindex: u32,
}

/// `struct ibv_context_ops`: 32 function pointers; rcomm calls three.
#[repr(C)]
struct IbvContextOps {
    _before_poll_cq: [*mut c_void; 11],
    poll_cq: Option<PollCqFn>,
    req_notify_cq: Option<ReqNotifyCqFn>,
    _before_post_send: [*mut c_void; 12],
    post_send: Option<PostSendFn>,
    post_recv: Option<PostRecvFn>,
    _after_post_recv: [*mut c_void; 5],
}

/// `struct ibv_context`.
#[repr(C)]
struct IbvContext {
    device: *mut IbvDevice,
    ops: IbvContextOps,
    cmd_fd: c_int,
    async_fd: c_int,
    num_comp_vectors: c_int,
    mutex: libc::pthread_mutex_t,
    abi_compat: *mut c_void,
}

/// `struct ibv_pd`.
#[repr(C)]
struct IbvPd {
    context: *mut IbvContext,
    handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
struct IbvMr {
    context: *mut IbvContext,
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    handle: u32,
    lkey: u32,
    rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
struct IbvCompChannel {
    context: *mut IbvContext,
    fd: c_int,
    refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
struct IbvCq {
    context: *mut IbvContext,
    channel: *mut c_void,
    cq_context: *mut c_void,
    handle: u32,
    cqe: c_int,
    mutex: libc::pthread_mutex_t,
    cond: libc::pthread_cond_t,
    comp_events_completed: u32,
    async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
struct IbvQp {
    context: *mut IbvContext,
    qp_context: *mut c_void,
    pd: *mut IbvPd,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    srq: *mut c_void,
    handle: u32,
    qp_num: u32,
    state: u32,
    qp_type: u32,
    mutex: libc::pthread_mutex_t,
    cond: libc::pthread_cond_t,
    events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvQpCap {
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
struct IbvQpInitAttr {
    qp_context: *mut c_void,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    srq: *mut c_void,
    cap: IbvQpCap,
    qp_type: u32,
    sq_sig_all: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvGlobalRoute {
    dgid: IbvGid,
    flow_label: u32,
    sgid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvAhAttr {
    grh: IbvGlobalRoute,
    dlid: u16,
    sl: u8,
    src_path_bits: u8,
    static_rate: u8,
    is_global: u8,
    port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvQpAttr {
    qp_state: u32,
    cur_qp_state: u32,
    path_mtu: u32,
    path_mig_state: u32,
    qkey: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_qp_num: u32,
    qp_access_flags: u32,
    cap: IbvQpCap,
    ah_attr: IbvAhAttr,
    alt_ah_attr: IbvAhAttr,
    pkey_index: u16,
    alt_pkey_index: u16,
    en_sqd_async_notify: u8,
    sq_draining: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    port_num: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    alt_port_num: u8,
    alt_timeout: u8,
    rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvSge {
    addr: u64,
    length: u32,
    lkey: u32,
}

/// The `rdma` member of `ibv_send_wr`'s `wr` union.
#[repr(C)]
#[derive(Clone, Copy)]
struct IbvRdma {
    remote_addr: u64,
    rkey: u32,
}

/// `ibv_send_wr`'s `wr` union: `rdma`, and `atomic` (the largest member, 32 bytes) for size.
#[repr(C)]
#[derive(Clone, Copy)]
union IbvSendWrWr {
    rdma: IbvRdma,
    _atomic: [u64; 4],
}

/// `struct ibv_send_wr`. `imm_data` is the anonymous union with `invalidate_rkey`, in network
/// byte order; `qp_type` is the union holding `xrc.remote_srqn`; `bind_mw` stands for the
/// last anonymous union (`bind_mw`/`tso`, 48 bytes), never used by RC sends.
#[repr(C)]
struct IbvSendWr {
    wr_id: u64,
    next: *mut IbvSendWr,
    sg_list: *mut IbvSge,
    num_sge: c_int,
    opcode: u32,
    send_flags: u32,
    imm_data: u32,
    wr: IbvSendWrWr,
    qp_type: u32,
    bind_mw: [u64; 6],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
struct IbvRecvWr {
    wr_id: u64,
    next: *mut IbvRecvWr,
    sg_list: *mut IbvSge,
    num_sge: c_int,
}

/// `struct ibv_wc`. `imm_data` (union with `invalidated_rkey`) is in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvWc {
    wr_id: u64,
    status: u32,
    opcode: u32,
    vendor_err: u32,
    byte_len: u32,
    imm_data: u32,
    qp_num: u32,
    src_qp: u32,
    wc_flags: u32,
    pkey_index: u16,
    slid: u16,
    sl: u8,
    dlid_path_bits: u8,
}

/// `ibv_async_event`'s `element` union.
#[repr(C)]
#[derive(Clone, Copy)]
union IbvAsyncElement {
    cq: *mut IbvCq,
    qp: *mut IbvQp,
    srq: *mut c_void,
    wq: *mut c_void,
    port_num: c_int,
}

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
struct IbvAsyncEvent {
    element: IbvAsyncElement,
    event_type: u32,
}

// Constants of `verbs.h`.
const IBV_QPT_RC: u32 = 2;
const IBV_QPS_RESET: u32 = 0;
const IBV_QPS_INIT: u32 = 1;
const IBV_QPS_RTR: u32 = 2;
const IBV_QPS_RTS: u32 = 3;
const IBV_QPS_SQD: u32 = 4;
const IBV_QPS_SQE: u32 = 5;
const IBV_QPS_ERR: u32 = 6;

const IBV_QP_STATE: c_int = 1 << 0;
const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
const IBV_QP_PORT: c_int = 1 << 5;
const IBV_QP_AV: c_int = 1 << 7;
const IBV_QP_PATH_MTU: c_int = 1 << 8;
const IBV_QP_TIMEOUT: c_int = 1 << 9;
const IBV_QP_RETRY_CNT: c_int = 1 << 10;
const IBV_QP_RNR_RETRY: c_int = 1 << 11;
const IBV_QP_RQ_PSN: c_int = 1 << 12;
const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
const IBV_QP_SQ_PSN: c_int = 1 << 16;
const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
const IBV_QP_DEST_QPN: c_int = 1 << 20;

const IBV_WR_RDMA_WRITE: u32 = 0;
const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
const IBV_WR_SEND: u32 = 2;
const IBV_WR_RDMA_READ: u32 = 4;
const IBV_SEND_SIGNALED: u32 = 1 << 1;

const IBV_WC_WITH_IMM: u32 = 1 << 1;

const IBV_LINK_LAYER_ETHERNET: u8 = 2;

const IBV_GID_TYPE_ROCE_V2: u32 = 2;

// `enum ibv_event_type`.
const IBV_EVENT_CQ_ERR: u32 = 0;
const IBV_EVENT_QP_FATAL: u32 = 1;
const IBV_EVENT_QP_REQ_ERR: u32 = 2;
const IBV_EVENT_QP_ACCESS_ERR: u32 = 3;
const IBV_EVENT_DEVICE_FATAL: u32 = 8;
const IBV_EVENT_PORT_ACTIVE: u32 = 9;
const IBV_EVENT_PORT_ERR: u32 = 10;

// Entry points (the exported C functions, and the three in `ibv_context_ops`).
type GetDeviceListFn = unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDevice;
type FreeDeviceListFn = unsafe extern "C" fn(*mut *mut IbvDevice);
type GetDeviceNameFn = unsafe extern "C" fn(*mut IbvDevice) -> *const c_char;
type OpenDeviceFn = unsafe extern "C" fn(*mut IbvDevice) -> *mut IbvContext;
type CloseDeviceFn = unsafe extern "C" fn(*mut IbvContext) -> c_int;
type QueryDeviceFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvDeviceAttr) -> c_int;
type QueryPortFn = unsafe extern "C" fn(*mut IbvContext, u8, *mut IbvPortAttr) -> c_int;
type QueryGidExFn =
    unsafe extern "C" fn(*mut IbvContext, u32, u32, *mut IbvGidEntry, u32, usize) -> c_int;
type AllocPdFn = unsafe extern "C" fn(*mut IbvContext) -> *mut IbvPd;
type DeallocPdFn = unsafe extern "C" fn(*mut IbvPd) -> c_int;
type RegMrFn = unsafe extern "C" fn(*mut IbvPd, *mut c_void, usize, c_int) -> *mut IbvMr;
type DeregMrFn = unsafe extern "C" fn(*mut IbvMr) -> c_int;
type RegDmabufMrFn = unsafe extern "C" fn(*mut IbvPd, u64, usize, u64, c_int, c_int) -> *mut IbvMr;
type CreateCqFn =
    unsafe extern "C" fn(*mut IbvContext, c_int, *mut c_void, *mut c_void, c_int) -> *mut IbvCq;
type DestroyCqFn = unsafe extern "C" fn(*mut IbvCq) -> c_int;
type CreateQpFn = unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp;
type ModifyQpFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int;
type QueryQpFn =
    unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int, *mut IbvQpInitAttr) -> c_int;
type DestroyQpFn = unsafe extern "C" fn(*mut IbvQp) -> c_int;
type GetAsyncEventFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvAsyncEvent) -> c_int;
type AckAsyncEventFn = unsafe extern "C" fn(*mut IbvAsyncEvent);
type PollCqFn = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;
type ReqNotifyCqFn = unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int;
type CreateCompChannelFn = unsafe extern "C" fn(*mut IbvContext) -> *mut IbvCompChannel;
type DestroyCompChannelFn = unsafe extern "C" fn(*mut IbvCompChannel) -> c_int;
type GetCqEventFn =
    unsafe extern "C" fn(*mut IbvCompChannel, *mut *mut IbvCq, *mut *mut c_void) -> c_int;
type AckCqEventsFn = unsafe extern "C" fn(*mut IbvCq, u32);
type PostSendFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
type PostRecvFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;

/// The exported functions rcomm calls.
struct Fns {
    get_device_list: GetDeviceListFn,
    free_device_list: FreeDeviceListFn,
    get_device_name: GetDeviceNameFn,
    open_device: OpenDeviceFn,
    close_device: CloseDeviceFn,
    query_device: QueryDeviceFn,
    query_port: QueryPortFn,
    query_gid_ex: QueryGidExFn,
    alloc_pd: AllocPdFn,
    dealloc_pd: DeallocPdFn,
    reg_mr: RegMrFn,
    dereg_mr: DeregMrFn,
    create_cq: CreateCqFn,
    destroy_cq: DestroyCqFn,
    create_qp: CreateQpFn,
    modify_qp: ModifyQpFn,
    query_qp: QueryQpFn,
    destroy_qp: DestroyQpFn,
    get_async_event: GetAsyncEventFn,
    ack_async_event: AckAsyncEventFn,
    create_comp_channel: CreateCompChannelFn,
    destroy_comp_channel: DestroyCompChannelFn,
    get_cq_event: GetCqEventFn,
    ack_cq_events: AckCqEventsFn,
    /// `ibv_reg_dmabuf_mr@IBVERBS_1.12` (rdma-core 34+): optional, GPUDirect RDMA only.
    reg_dmabuf_mr: Option<RegDmabufMrFn>,
}

fn resolve(h: *mut c_void, path: &str) -> std::result::Result<Fns, LoadError> {
    const V1_1: &CStr = c"IBVERBS_1.1";
    const V1_11: &CStr = c"IBVERBS_1.11";
    // The completion channel calls were never versioned again after 1.0.
    const V1_0: &CStr = c"IBVERBS_1.0";
    let find = |sym: &CStr, ver: &CStr| {
        // SAFETY: looking a versioned symbol up calls nothing.
        let p = unsafe { libc::dlvsym(h, sym.as_ptr(), ver.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    macro_rules! need {
        ($sym:literal, $ver:ident, $t:ty, $hint:expr) => {{
            let p = find($sym, $ver).ok_or_else(|| LoadError::MissingSymbol {
                path: path.to_string(),
                symbol: match $sym.to_str() {
                    Ok(s) => s,
                    Err(_) => "?",
                },
                version: match $ver.to_str() {
                    Ok(s) => s,
                    Err(_) => "?",
                },
                hint: $hint,
            })?;
            // SAFETY: verbs.h (rdma-core 44) declares the symbol at this version with exactly
            // this signature, with the struct copies of this module as arguments.
            unsafe { std::mem::transmute::<*mut c_void, $t>(p) }
        }};
    }
    const OLD: &str = "not rdma-core's libibverbs, or older than 1.1";
    Ok(Fns {
        get_device_list: need!(c"ibv_get_device_list", V1_1, GetDeviceListFn, OLD),
        free_device_list: need!(c"ibv_free_device_list", V1_1, FreeDeviceListFn, OLD),
        get_device_name: need!(c"ibv_get_device_name", V1_1, GetDeviceNameFn, OLD),
        open_device: need!(c"ibv_open_device", V1_1, OpenDeviceFn, OLD),
        close_device: need!(c"ibv_close_device", V1_1, CloseDeviceFn, OLD),
        query_device: need!(c"ibv_query_device", V1_1, QueryDeviceFn, OLD),
        query_port: need!(c"ibv_query_port", V1_1, QueryPortFn, OLD),
        query_gid_ex: need!(
            c"_ibv_query_gid_ex",
            V1_11,
            QueryGidExFn,
            "rdma-core older than 32; rcomm needs 32 or newer"
        ),
        alloc_pd: need!(c"ibv_alloc_pd", V1_1, AllocPdFn, OLD),
        dealloc_pd: need!(c"ibv_dealloc_pd", V1_1, DeallocPdFn, OLD),
        reg_mr: need!(c"ibv_reg_mr", V1_1, RegMrFn, OLD),
        dereg_mr: need!(c"ibv_dereg_mr", V1_1, DeregMrFn, OLD),
        create_cq: need!(c"ibv_create_cq", V1_1, CreateCqFn, OLD),
        destroy_cq: need!(c"ibv_destroy_cq", V1_1, DestroyCqFn, OLD),
        create_qp: need!(c"ibv_create_qp", V1_1, CreateQpFn, OLD),
        modify_qp: need!(c"ibv_modify_qp", V1_1, ModifyQpFn, OLD),
        query_qp: need!(c"ibv_query_qp", V1_1, QueryQpFn, OLD),
        destroy_qp: need!(c"ibv_destroy_qp", V1_1, DestroyQpFn, OLD),
        get_async_event: need!(c"ibv_get_async_event", V1_1, GetAsyncEventFn, OLD),
        ack_async_event: need!(c"ibv_ack_async_event", V1_1, AckAsyncEventFn, OLD),
        create_comp_channel: need!(c"ibv_create_comp_channel", V1_0, CreateCompChannelFn, OLD),
        destroy_comp_channel: need!(c"ibv_destroy_comp_channel", V1_0, DestroyCompChannelFn, OLD),
        get_cq_event: need!(c"ibv_get_cq_event", V1_1, GetCqEventFn, OLD),
        ack_cq_events: need!(c"ibv_ack_cq_events", V1_1, AckCqEventsFn, OLD),
        // SAFETY: verbs.h (rdma-core 44) declares it at IBVERBS_1.12 with this signature.
        reg_dmabuf_mr: find(c"ibv_reg_dmabuf_mr", c"IBVERBS_1.12")
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, RegDmabufMrFn>(p) }),
    })
}

// ---------------------------------------------------------------------------------------------
// Handle tables.

struct CtxEntry {
    ptr: *mut IbvContext,
    name: String,
}

struct PdEntry {
    ptr: *mut IbvPd,
    ctx: u32,
}

struct MrEntry {
    ptr: *mut IbvMr,
    pd: u32,
    lkey: u32,
    rkey: u32,
}

struct CqEntry {
    ptr: *mut IbvCq,
    ctx: u32,
    /// Its completion channel (non-blocking descriptor), the wake-up of a sleeping rank.
    channel: *mut IbvCompChannel,
}

struct QpEntry {
    ptr: *mut IbvQp,
    pd: u32,
    qpn: u32,
    send_cq: u32,
    recv_cq: u32,
}

#[derive(Default)]
struct Tables {
    /// The last id handed out; ids are never reused, whatever their kind.
    last_id: u32,
    ctxs: HashMap<u32, CtxEntry>,
    pds: HashMap<u32, PdEntry>,
    mrs: HashMap<u32, MrEntry>,
    cqs: HashMap<u32, CqEntry>,
    qps: HashMap<u32, QpEntry>,
}

impl Tables {
    /// [`new_id`](Self::new_id) for an object just made: when no id is left, `undo` destroys
    /// it again (it was never handed out).
    fn new_id_or(&mut self, undo: impl FnOnce()) -> Result<u32> {
        self.new_id().inspect_err(|_| undo())
    }

    fn new_id(&mut self) -> Result<u32> {
        self.last_id = self
            .last_id
            .checked_add(1)
            .ok_or_else(|| VerbsError::Invalid("verbs handle ids exhausted".into()))?;
        Ok(self.last_id)
    }

    fn ctx(&self, id: u32) -> Result<&CtxEntry> {
        self.ctxs.get(&id).ok_or(VerbsError::BadHandle("context"))
    }

    fn pd(&self, id: u32) -> Result<&PdEntry> {
        self.pds.get(&id).ok_or(VerbsError::BadHandle("PD"))
    }

    fn cq(&self, id: u32) -> Result<&CqEntry> {
        self.cqs.get(&id).ok_or(VerbsError::BadHandle("CQ"))
    }

    fn qp(&self, qp: Qp) -> Result<&QpEntry> {
        self.qps
            .get(&qp.id)
            .filter(|e| e.qpn == qp.qpn)
            .ok_or(VerbsError::BadHandle("QP"))
    }

    fn mr(&self, mr: &Mr) -> Result<&MrEntry> {
        self.mrs
            .get(&mr.id)
            .filter(|e| e.lkey == mr.lkey && e.rkey == mr.rkey)
            .ok_or(VerbsError::BadHandle("MR"))
    }

    /// The name of the device a PD belongs to, for error messages.
    fn pd_dev(&self, pd: u32) -> String {
        self.pds
            .get(&pd)
            .and_then(|p| self.ctxs.get(&p.ctx))
            .map(|c| c.name.clone())
            .unwrap_or_default()
    }

    fn cq_dev(&self, cq: u32) -> String {
        self.cqs
            .get(&cq)
            .and_then(|c| self.ctxs.get(&c.ctx))
            .map(|c| c.name.clone())
            .unwrap_or_default()
    }
}

/// libibverbs, loaded; implements [`Verbs`].
pub struct LibVerbs {
    path: String,
    fns: Fns,
    tables: RwLock<Tables>,
}

// SAFETY: the pointers in the tables name libibverbs objects, which libibverbs lets any thread
// use (the library and its providers lock internally). Destroying an object takes the tables'
// write lock and every use of one holds the read lock, so no thread uses an object another
// destroys.
unsafe impl Send for LibVerbs {}
// SAFETY: as for `Send`: all shared access to the pointers is under the `RwLock`.
unsafe impl Sync for LibVerbs {}

impl std::fmt::Debug for LibVerbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibVerbs")
            .field("path", &self.path)
            .finish()
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The errno of a call that returns 0 or an errno value (some providers return -1 and set
/// `errno` instead; 0 from a failed call is taken as EIO).
fn rc_errno(rc: c_int) -> i32 {
    let e = if rc > 0 {
        rc
    } else if rc == -1 {
        errno()
    } else {
        rc.saturating_neg()
    };
    if e == 0 { libc::EIO } else { e }
}

/// The errno of a call that returned NULL.
fn null_errno() -> i32 {
    match errno() {
        0 => libc::ENOMEM,
        e => e,
    }
}

/// An errno as the trait's error: `what` is the object concerned, `dev` its device.
fn verbs_error(call: &str, e: i32, what: &'static str, dev: &str) -> VerbsError {
    let text = std::io::Error::from_raw_os_error(e);
    match e {
        libc::EBUSY => VerbsError::Busy(what),
        libc::EIO | libc::ENODEV | libc::ENXIO | libc::ESHUTDOWN => {
            VerbsError::DeviceDead(dev.to_string())
        }
        libc::EINVAL => VerbsError::Invalid(format!("{call}: {text}")),
        libc::ENOMEM | libc::EPERM | libc::EACCES if call == "ibv_reg_mr" => VerbsError::Invalid(
            format!("{call}: {text} (is the locked-memory limit, ulimit -l, high enough?)"),
        ),
        _ => VerbsError::Invalid(format!("{call} failed: {text}")),
    }
}

fn gid_type(t: u32) -> GidType {
    if t == IBV_GID_TYPE_ROCE_V2 {
        GidType::RoceV2
    } else {
        // IBV_GID_TYPE_IB and IBV_GID_TYPE_ROCE_V1: sysfs calls both "IB/RoCE v1".
        GidType::IbRoceV1
    }
}

/// `ibv_port_attr.active_width` is a bit per width: 1X, 4X, 8X, 12X, 2X.
fn width_lanes(w: u8) -> u8 {
    match w {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 0,
    }
}

/// `ibv_port_attr.active_speed` is a bit per speed. XDR has no bit here (rdma-core 44 has no
/// `active_speed_ex`); a value with no known bit (a port down may report 0) reads as SDR.
fn speed(s: u8) -> LinkSpeed {
    match s {
        2 => LinkSpeed::Ddr,
        4 => LinkSpeed::Qdr,
        8 => LinkSpeed::Fdr10,
        16 => LinkSpeed::Fdr,
        32 => LinkSpeed::Edr,
        64 => LinkSpeed::Hdr,
        128 => LinkSpeed::Ndr,
        _ => LinkSpeed::Sdr,
    }
}

fn mtu(m: u32) -> Option<Mtu> {
    Some(match m {
        1 => Mtu::M256,
        2 => Mtu::M512,
        3 => Mtu::M1024,
        4 => Mtu::M2048,
        5 => Mtu::M4096,
        _ => return None,
    })
}

/// `ibv_wc_status` as the trait's status. The trait names the statuses an RC QP produces in
/// rcomm's use; the others fall to the nearest one (all are errors that leave the QP in error).
fn wc_status(s: u32) -> WcStatus {
    match s {
        0 => WcStatus::Success,
        1 => WcStatus::LocLenErr,
        // LOC_QP_OP_ERR, LOC_EEC_OP_ERR, LOC_PROT_ERR, MW_BIND_ERR, LOC_ACCESS_ERR,
        // LOC_RDD_VIOL_ERR: local faults.
        2 | 3 | 4 | 6 | 8 | 14 => WcStatus::LocProtErr,
        5 => WcStatus::WrFlushErr,
        // REM_INV_REQ_ERR, BAD_RESP_ERR, REM_INV_RD_REQ_ERR.
        9 | 7 | 15 => WcStatus::RemInvReqErr,
        10 => WcStatus::RemAccessErr,
        12 => WcStatus::RetryExcErr,
        13 => WcStatus::RnrRetryExcErr,
        // RESP_TIMEOUT_ERR.
        20 => WcStatus::RetryExcErr,
        // REM_OP_ERR, REM_ABORT_ERR, INV_EECN_ERR, INV_EEC_STATE_ERR, FATAL_ERR,
        // GENERAL_ERR, TM_*, and anything newer.
        _ => WcStatus::RemOpErr,
    }
}

/// `ibv_wc_opcode`; rcomm posts no atomics, binds or TSO, so other codes cannot come with
/// success, and on an error completion the opcode is undefined anyway.
fn wc_opcode(o: u32) -> WcOpcode {
    match o {
        1 => WcOpcode::RdmaWrite,
        2 => WcOpcode::RdmaRead,
        128 => WcOpcode::Recv,
        129 => WcOpcode::RecvRdmaWithImm,
        _ => WcOpcode::Send,
    }
}

fn wc(w: &IbvWc) -> WorkCompletion {
    WorkCompletion {
        wr_id: w.wr_id,
        status: wc_status(w.status),
        opcode: wc_opcode(w.opcode),
        byte_len: w.byte_len,
        imm_data: (w.wc_flags & IBV_WC_WITH_IMM != 0).then(|| u32::from_be(w.imm_data)),
        qp_num: w.qp_num,
    }
}

fn gid(g: &super::verbs::Gid) -> IbvGid {
    IbvGid { raw: g.0 }
}

fn ah_attr(a: &super::verbs::AhAttr) -> IbvAhAttr {
    let mut ah = IbvAhAttr {
        dlid: a.dlid,
        sl: a.sl,
        port_num: a.port,
        ..Default::default()
    };
    if let Some(g) = &a.grh {
        ah.is_global = 1;
        ah.grh = IbvGlobalRoute {
            dgid: gid(&g.dgid),
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        };
    }
    ah
}

impl LibVerbs {
    /// Lists an MR libibverbs just returned (non-null) and hands out its handle; on failure
    /// it is deregistered again.
    fn adopt_mr(&self, t: &mut Tables, ptr: *mut IbvMr, pd: Pd, addr: u64, len: u64) -> Result<Mr> {
        // SAFETY: a valid MR just returned by libibverbs.
        let (lkey, rkey) = unsafe { ((*ptr).lkey, (*ptr).rkey) };
        let id = t.new_id_or(|| {
            // SAFETY: the MR just registered, never handed out.
            unsafe { (self.fns.dereg_mr)(ptr) };
        })?;
        t.mrs.insert(
            id,
            MrEntry {
                ptr,
                pd: pd.0,
                lkey,
                rkey,
            },
        );
        Ok(Mr {
            id,
            lkey,
            rkey,
            addr,
            len,
        })
    }

    /// Opens the system's `libibverbs.so.1`.
    pub fn load() -> std::result::Result<Self, LoadError> {
        Self::load_from(LIB_NAME)
    }

    /// Opens libibverbs at `path` (a name the dynamic loader searches, or a path).
    pub fn load_from(path: &str) -> std::result::Result<Self, LoadError> {
        let not_found = |reason: String| LoadError::NotFound {
            path: path.to_string(),
            reason,
        };
        let c = CString::new(path).map_err(|_| not_found("the name contains a NUL".into()))?;
        // SAFETY: dlopen runs libibverbs' initialisers, which set up its own state only. The
        // handle is kept for the process (never dlclosed): the entry points point into it and
        // the providers it loads do not support being unloaded.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(not_found(dl_error()));
        }
        Ok(Self {
            path: path.to_string(),
            fns: resolve(h, path)?,
            tables: RwLock::new(Tables::default()),
        })
    }

    fn read(&self) -> RwLockReadGuard<'_, Tables> {
        // No code panics while holding the lock; a poisoned lock still holds valid tables.
        self.tables.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Tables> {
        self.tables.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `f` with the device list (empty where the kernel has no RDMA support); frees it.
    fn with_device_list<T>(&self, f: impl FnOnce(&[*mut IbvDevice]) -> Result<T>) -> Result<T> {
        let mut n: c_int = 0;
        // SAFETY: writes one int; returns a NULL-terminated array owned by us until freed.
        let list = unsafe { (self.fns.get_device_list)(&mut n) };
        if list.is_null() {
            return match errno() {
                // No kernel RDMA support (no uverbs ABI in sysfs): no devices.
                libc::ENOSYS | 0 => f(&[]),
                e => Err(verbs_error("ibv_get_device_list", e, "device list", "")),
            };
        }
        let n = usize::try_from(n).unwrap_or(0);
        // SAFETY: the list holds `n` device pointers (and a NULL after them).
        let devs = unsafe { std::slice::from_raw_parts(list, n) };
        let r = f(devs);
        // SAFETY: the list from ibv_get_device_list, freed once; devices opened meanwhile stay
        // valid (libibverbs keeps a device alive while a context on it is open).
        unsafe { (self.fns.free_device_list)(list) };
        r
    }

    fn dev_name(&self, d: *mut IbvDevice) -> String {
        // SAFETY: a device of the current list; the name is a NUL-terminated string inside it.
        let p = unsafe { (self.fns.get_device_name)(d) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: as above, valid until the list is freed; copied out now.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn query_device_attr(&self, ctx: *mut IbvContext, name: &str) -> Result<DeviceAttr> {
        // SAFETY: all-zero is a valid value of this plain-data struct.
        let mut a: IbvDeviceAttr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and a struct of the header's size to fill.
        let rc = unsafe { (self.fns.query_device)(ctx, &mut a) };
        if rc != 0 {
            return Err(verbs_error(
                "ibv_query_device",
                rc_errno(rc),
                "device",
                name,
            ));
        }
        let nonneg = |v: c_int| u32::try_from(v).unwrap_or(0);
        Ok(DeviceAttr {
            name: name.to_string(),
            // __be64: the GUID's bytes in wire order.
            node_guid: u64::from_be(a.node_guid),
            phys_port_cnt: a.phys_port_cnt,
            max_qp_wr: nonneg(a.max_qp_wr),
            max_sge: nonneg(a.max_sge),
            max_cqe: nonneg(a.max_cqe),
        })
    }

    fn close_ctx(&self, ptr: *mut IbvContext) -> c_int {
        // SAFETY: a context we opened and no longer list; nothing of ours uses it.
        unsafe { (self.fns.close_device)(ptr) }
    }

    fn query_qp_state(&self, ptr: *mut IbvQp) -> std::result::Result<u32, i32> {
        let mut attr = IbvQpAttr::default();
        // SAFETY: all-zero is valid for this plain struct (null pointers, zero numbers).
        let mut init: IbvQpInitAttr = unsafe { std::mem::zeroed() };
        // SAFETY: a live QP (caller holds the tables' lock) and two structs to fill.
        let rc = unsafe { (self.fns.query_qp)(ptr, &mut attr, IBV_QP_STATE, &mut init) };
        if rc != 0 {
            return Err(rc_errno(rc));
        }
        Ok(attr.qp_state)
    }
}

fn qp_state(s: u32) -> Option<QpState> {
    Some(match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        // SQE only exists for UD/UC-like send-queue errors; for rcomm it is an error state.
        IBV_QPS_SQE | IBV_QPS_ERR => QpState::Err,
        _ => return None,
    })
}

/// The C form of one send request, its list links left for `link` (the immediate goes in
/// network byte order, `__be32`).
fn send_wr(w: &SendWr<'_>, num_sge: c_int) -> IbvSendWr {
    let (opcode, imm, remote_addr, rkey) = match w.op {
        SendOp::Send => (IBV_WR_SEND, 0, 0, 0),
        SendOp::RdmaWrite { remote_addr, rkey } => (IBV_WR_RDMA_WRITE, 0, remote_addr, rkey),
        SendOp::RdmaWriteImm {
            remote_addr,
            rkey,
            imm,
        } => (IBV_WR_RDMA_WRITE_WITH_IMM, imm.to_be(), remote_addr, rkey),
        SendOp::RdmaRead { remote_addr, rkey } => (IBV_WR_RDMA_READ, 0, remote_addr, rkey),
    };
    IbvSendWr {
        wr_id: w.wr_id,
        next: std::ptr::null_mut(),
        sg_list: std::ptr::null_mut(),
        num_sge,
        opcode,
        send_flags: if w.signaled { IBV_SEND_SIGNALED } else { 0 },
        imm_data: imm,
        wr: IbvSendWrWr {
            rdma: IbvRdma { remote_addr, rkey },
        },
        qp_type: 0,
        bind_mw: [0; 6],
    }
}

impl Drop for LibVerbs {
    fn drop(&mut self) {
        // Everything still open is torn down in dependency order; errors are ignored (there
        // is nobody to tell). The library stays loaded (see `load_from`).
        let t = std::mem::take(self.tables.get_mut().unwrap_or_else(|e| e.into_inner()));
        for q in t.qps.into_values() {
            // SAFETY: a QP we created and no longer list.
            unsafe { (self.fns.destroy_qp)(q.ptr) };
        }
        for m in t.mrs.into_values() {
            // SAFETY: an MR we registered and no longer list.
            unsafe { (self.fns.dereg_mr)(m.ptr) };
        }
        for c in t.cqs.into_values() {
            // SAFETY: a CQ we created, its QPs destroyed above; then its channel, which no
            // other CQ uses (every event it delivered was acknowledged by `arm_cq`).
            unsafe {
                (self.fns.destroy_cq)(c.ptr);
                if !c.channel.is_null() {
                    (self.fns.destroy_comp_channel)(c.channel);
                }
            }
        }
        for p in t.pds.into_values() {
            // SAFETY: a PD we allocated, its QPs and MRs gone.
            unsafe { (self.fns.dealloc_pd)(p.ptr) };
        }
        for c in t.ctxs.into_values() {
            self.close_ctx(c.ptr);
        }
    }
}

impl Verbs for LibVerbs {
    fn devices(&self) -> Result<Vec<DeviceAttr>> {
        self.with_device_list(|devs| {
            let mut out = Vec::with_capacity(devs.len());
            for &d in devs {
                let name = self.dev_name(d);
                // SAFETY: a device of the current list.
                let ctx = unsafe { (self.fns.open_device)(d) };
                // One device that cannot be opened or queried does not hide the others.
                let attr = if ctx.is_null() {
                    Err(verbs_error(
                        "ibv_open_device",
                        null_errno(),
                        "device",
                        &name,
                    ))
                } else {
                    let a = self.query_device_attr(ctx, &name);
                    self.close_ctx(ctx);
                    a
                };
                match attr {
                    Ok(a) => out.push(a),
                    Err(e) => rcomm_runtime::rlog!(Warn, "NET", "RDMA device {name} skipped: {e}"),
                }
            }
            Ok(out)
        })
    }

    fn open(&self, name: &str) -> Result<Context> {
        let ptr = self.with_device_list(|devs| {
            let d = devs
                .iter()
                .copied()
                .find(|&d| self.dev_name(d) == name)
                .ok_or_else(|| VerbsError::NoDevice(name.to_string()))?;
            // SAFETY: a device of the current list.
            let ctx = unsafe { (self.fns.open_device)(d) };
            if ctx.is_null() {
                return Err(verbs_error("ibv_open_device", null_errno(), "device", name));
            }
            Ok(ctx)
        })?;
        // `get_async_event` must never block: the async fd goes non-blocking now.
        // SAFETY: `async_fd` is a field of the context just opened.
        if let Err(e) = rcomm_runtime::os::set_nonblocking(unsafe { (*ptr).async_fd }) {
            let e = e.raw_os_error().unwrap_or(libc::EIO);
            self.close_ctx(ptr);
            return Err(verbs_error(
                "fcntl(async_fd, O_NONBLOCK)",
                e,
                "device",
                name,
            ));
        }
        let mut t = self.write();
        let id = t.new_id_or(|| {
            self.close_ctx(ptr);
        })?;
        t.ctxs.insert(
            id,
            CtxEntry {
                ptr,
                name: name.to_string(),
            },
        );
        Ok(Context(id))
    }

    fn close(&self, ctx: Context) -> Result<()> {
        let mut t = self.write();
        t.ctx(ctx.0)?;
        if t.pds.values().any(|p| p.ctx == ctx.0) || t.cqs.values().any(|c| c.ctx == ctx.0) {
            return Err(VerbsError::Busy("context"));
        }
        let Some(e) = t.ctxs.remove(&ctx.0) else {
            return Err(VerbsError::BadHandle("context"));
        };
        let rc = self.close_ctx(e.ptr);
        if rc != 0 {
            // The context is gone from our tables either way: libibverbs frees it whatever
            // the kernel said.
            return Err(verbs_error(
                "ibv_close_device",
                rc_errno(rc),
                "context",
                &e.name,
            ));
        }
        Ok(())
    }

    fn query_port(&self, ctx: Context, port: u8) -> Result<PortAttr> {
        let t = self.read();
        let c = t.ctx(ctx.0)?;
        let no_port = || VerbsError::NoPort {
            dev: c.name.clone(),
            port,
        };
        if port == 0 {
            return Err(no_port());
        }
        let mut a = IbvPortAttr::default();
        // SAFETY: an open context (read lock held) and a zeroed struct at least as large as the
        // `_compat_ibv_port_attr` the exported function fills (see the module comment).
        let rc = unsafe { (self.fns.query_port)(c.ptr, port, &mut a) };
        if rc != 0 {
            return match rc_errno(rc) {
                libc::EINVAL => Err(no_port()),
                e => Err(verbs_error("ibv_query_port", e, "port", &c.name)),
            };
        }
        Ok(PortAttr {
            state: PortState::from_num(a.state).unwrap_or(PortState::Nop),
            // UNSPECIFIED (old kernels) means InfiniBand, as libibverbs' own tools read it.
            link_layer: if a.link_layer == IBV_LINK_LAYER_ETHERNET {
                LinkLayer::Ethernet
            } else {
                LinkLayer::InfiniBand
            },
            // A port that is down may report no MTU: the smallest is then as good as any.
            active_mtu: mtu(a.active_mtu).unwrap_or(Mtu::M256),
            active_width: width_lanes(a.active_width),
            active_speed: speed(a.active_speed),
            lid: a.lid,
            gid_tbl_len: u16::try_from(a.gid_tbl_len).unwrap_or(0),
        })
    }

    fn query_gid(&self, ctx: Context, port: u8, index: u16) -> Result<GidEntry> {
        let t = self.read();
        let c = t.ctx(ctx.0)?;
        let no_gid = || VerbsError::NoGid {
            dev: c.name.clone(),
            port,
            index,
        };
        let mut e = IbvGidEntry::default();
        // SAFETY: an open context (read lock held); the entry and its size, as the inline
        // `ibv_query_gid_ex` passes them.
        let rc = unsafe {
            (self.fns.query_gid_ex)(
                c.ptr,
                u32::from(port),
                u32::from(index),
                &mut e,
                0,
                std::mem::size_of::<IbvGidEntry>(),
            )
        };
        if rc != 0 {
            return match rc_errno(rc) {
                libc::ENODATA | libc::EINVAL => Err(no_gid()),
                err => Err(verbs_error("ibv_query_gid_ex", err, "GID", &c.name)),
            };
        }
        let ndev = (e.ndev_ifindex != 0)
            .then(|| {
                let mut buf = [0 as c_char; libc::IF_NAMESIZE];
                // SAFETY: writes at most IF_NAMESIZE bytes, NUL included, into `buf`.
                let p = unsafe { libc::if_indextoname(e.ndev_ifindex, buf.as_mut_ptr()) };
                // SAFETY: on success `buf` holds a NUL-terminated name.
                (!p.is_null()).then(|| {
                    unsafe { CStr::from_ptr(buf.as_ptr()) }
                        .to_string_lossy()
                        .into()
                })
            })
            .flatten();
        Ok(GidEntry {
            index,
            gid: super::verbs::Gid(e.gid.raw),
            gid_type: gid_type(e.gid_type),
            ndev,
        })
    }

    fn alloc_pd(&self, ctx: Context) -> Result<Pd> {
        let mut t = self.write();
        let c = t.ctx(ctx.0)?;
        let name = c.name.clone();
        // SAFETY: an open context (write lock held).
        let ptr = unsafe { (self.fns.alloc_pd)(c.ptr) };
        if ptr.is_null() {
            return Err(verbs_error("ibv_alloc_pd", null_errno(), "PD", &name));
        }
        let id = t.new_id_or(|| {
            // SAFETY: the PD just allocated, never handed out.
            unsafe { (self.fns.dealloc_pd)(ptr) };
        })?;
        t.pds.insert(id, PdEntry { ptr, ctx: ctx.0 });
        Ok(Pd(id))
    }

    fn dealloc_pd(&self, pd: Pd) -> Result<()> {
        let mut t = self.write();
        let p = t.pd(pd.0)?;
        if t.mrs.values().any(|m| m.pd == pd.0) || t.qps.values().any(|q| q.pd == pd.0) {
            return Err(VerbsError::Busy("PD"));
        }
        // SAFETY: a PD we allocated with no MR or QP of ours on it (write lock held).
        let rc = unsafe { (self.fns.dealloc_pd)(p.ptr) };
        if rc != 0 {
            return Err(verbs_error(
                "ibv_dealloc_pd",
                rc_errno(rc),
                "PD",
                &t.pd_dev(pd.0),
            ));
        }
        t.pds.remove(&pd.0);
        Ok(())
    }

    unsafe fn reg_mr(&self, pd: Pd, addr: u64, len: u64, access: Access) -> Result<Mr> {
        let mut t = self.write();
        let p = t.pd(pd.0)?;
        let (Ok(a), Ok(l)) = (usize::try_from(addr), usize::try_from(len)) else {
            return Err(VerbsError::Invalid(format!(
                "range {addr:#x}+{len} does not fit this machine's addresses"
            )));
        };
        if a.checked_add(l).is_none() {
            return Err(VerbsError::Invalid(format!(
                "range {addr:#x}+{len} wraps around"
            )));
        }
        let Ok(flags) = c_int::try_from(access.0) else {
            return Err(VerbsError::Invalid(format!("access flags {:#x}", access.0)));
        };
        // SAFETY: a live PD (write lock held); the caller promises the range stays valid until
        // `dereg_mr` (this function's contract), which is what the registration needs.
        let ptr = unsafe { (self.fns.reg_mr)(p.ptr, a as *mut c_void, l, flags) };
        if ptr.is_null() {
            return Err(verbs_error(
                "ibv_reg_mr",
                null_errno(),
                "MR",
                &t.pd_dev(pd.0),
            ));
        }
        self.adopt_mr(&mut t, ptr, pd, addr, len)
    }

    unsafe fn reg_dmabuf_mr(
        &self,
        pd: Pd,
        offset: u64,
        len: u64,
        iova: u64,
        fd: i32,
        access: Access,
    ) -> Result<Mr> {
        let mut t = self.write();
        let p = t.pd(pd.0)?;
        let Some(reg) = self.fns.reg_dmabuf_mr else {
            return Err(VerbsError::Invalid(
                "libibverbs has no ibv_reg_dmabuf_mr (rdma-core older than 34)".into(),
            ));
        };
        let (Ok(l), Ok(flags)) = (usize::try_from(len), c_int::try_from(access.0)) else {
            return Err(VerbsError::Invalid(format!("dma-buf range of {len} bytes")));
        };
        // SAFETY: a live PD (write lock held); the caller promises the device memory behind
        // the dma-buf stays allocated until `dereg_mr`.
        let ptr = unsafe { reg(p.ptr, offset, l, iova, fd, flags) };
        if ptr.is_null() {
            return Err(verbs_error(
                "ibv_reg_dmabuf_mr",
                null_errno(),
                "MR",
                &t.pd_dev(pd.0),
            ));
        }
        self.adopt_mr(&mut t, ptr, pd, iova, len)
    }

    fn dereg_mr(&self, mr: Mr) -> Result<()> {
        let mut t = self.write();
        let m = t.mr(&mr)?;
        // SAFETY: an MR we registered (write lock held: no post uses the table meanwhile).
        let rc = unsafe { (self.fns.dereg_mr)(m.ptr) };
        if rc != 0 {
            let dev = t.pd_dev(m.pd);
            return Err(verbs_error("ibv_dereg_mr", rc_errno(rc), "MR", &dev));
        }
        t.mrs.remove(&mr.id);
        Ok(())
    }

    fn create_cq(&self, ctx: Context, cqe: u32) -> Result<Cq> {
        let mut t = self.write();
        let c = t.ctx(ctx.0)?;
        let name = c.name.clone();
        let n = c_int::try_from(cqe)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| VerbsError::Invalid(format!("CQ size {cqe}")))?;
        // A completion channel per CQ, its descriptor non-blocking: a rank sleeps on it
        // (poll) and drains it without ever blocking in libibverbs.
        // SAFETY: an open context (write lock held).
        let channel = unsafe { (self.fns.create_comp_channel)(c.ptr) };
        if channel.is_null() {
            return Err(verbs_error(
                "ibv_create_comp_channel",
                null_errno(),
                "CQ",
                &name,
            ));
        }
        // SAFETY: `fd` is a field of the channel just created.
        if let Err(e) = rcomm_runtime::os::set_nonblocking(unsafe { (*channel).fd }) {
            let e = e.raw_os_error().unwrap_or(libc::EIO);
            // SAFETY: the channel just created, no CQ on it.
            unsafe { (self.fns.destroy_comp_channel)(channel) };
            return Err(verbs_error("fcntl(channel, O_NONBLOCK)", e, "CQ", &name));
        }
        // SAFETY: an open context (write lock held), the channel of that context, vector 0.
        let ptr =
            unsafe { (self.fns.create_cq)(c.ptr, n, std::ptr::null_mut(), channel.cast(), 0) };
        if ptr.is_null() {
            let e = null_errno();
            // SAFETY: as above.
            unsafe { (self.fns.destroy_comp_channel)(channel) };
            return Err(verbs_error("ibv_create_cq", e, "CQ", &name));
        }
        let id = t.new_id_or(|| {
            // SAFETY: the CQ and channel just created, never handed out.
            unsafe {
                (self.fns.destroy_cq)(ptr);
                (self.fns.destroy_comp_channel)(channel);
            }
        })?;
        t.cqs.insert(
            id,
            CqEntry {
                ptr,
                ctx: ctx.0,
                channel,
            },
        );
        Ok(Cq(id))
    }

    fn destroy_cq(&self, cq: Cq) -> Result<()> {
        let mut t = self.write();
        let c = t.cq(cq.0)?;
        if t.qps
            .values()
            .any(|q| q.send_cq == cq.0 || q.recv_cq == cq.0)
        {
            return Err(VerbsError::Busy("CQ"));
        }
        // SAFETY: a CQ we created, no QP of ours on it (write lock held).
        let rc = unsafe { (self.fns.destroy_cq)(c.ptr) };
        if rc != 0 {
            return Err(verbs_error(
                "ibv_destroy_cq",
                rc_errno(rc),
                "CQ",
                &t.cq_dev(cq.0),
            ));
        }
        // ibv_destroy_cq waits for every channel event it delivered to be acknowledged;
        // `arm_cq` acknowledges each as it reads it, so nothing is owed here.
        let channel = t.cqs.remove(&cq.0).map(|e| e.channel);
        if let Some(ch) = channel.filter(|c| !c.is_null()) {
            // SAFETY: the channel of the CQ just destroyed; no other CQ uses it.
            unsafe { (self.fns.destroy_comp_channel)(ch) };
        }
        Ok(())
    }

    fn poll_cq(&self, cq: Cq, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize> {
        const CHUNK: usize = 32;
        let t = self.read();
        let c = t.cq(cq.0)?;
        // SAFETY: a live CQ (read lock held): its context pointer is valid, and so is the ops
        // table inside that context.
        let poll = unsafe { (*(*c.ptr).context).ops.poll_cq };
        let Some(poll) = poll else {
            return Err(VerbsError::Invalid("the provider has no poll_cq".into()));
        };
        let mut buf = [IbvWc::default(); CHUNK];
        let mut done = 0;
        while done < max {
            let want = (max - done).min(CHUNK);
            // SAFETY: the inline `ibv_poll_cq` of verbs.h: `cq->context->ops.poll_cq(cq, n,
            // wc)`, with room for `want` completions.
            let n = unsafe { poll(c.ptr, want as c_int, buf.as_mut_ptr()) };
            if n < 0 {
                if done > 0 {
                    // Hand over what was polled; the error shows on the next call.
                    break;
                }
                return Err(VerbsError::Invalid(format!(
                    "ibv_poll_cq failed ({n}) on device {}",
                    t.cq_dev(cq.0)
                )));
            }
            let n = (n as usize).min(want);
            out.extend(buf[..n].iter().map(wc));
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    fn create_qp(&self, pd: Pd, attr: &QpInitAttr) -> Result<Qp> {
        let mut t = self.write();
        let p = t.pd(pd.0)?;
        let scq = t.cq(attr.send_cq.0)?;
        let rcq = t.cq(attr.recv_cq.0)?;
        if scq.ctx != p.ctx || rcq.ctx != p.ctx {
            return Err(VerbsError::BadHandle("CQ"));
        }
        let mut init = IbvQpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: scq.ptr,
            recv_cq: rcq.ptr,
            srq: std::ptr::null_mut(),
            cap: IbvQpCap {
                max_send_wr: attr.cap.max_send_wr,
                max_recv_wr: attr.cap.max_recv_wr,
                max_send_sge: attr.cap.max_send_sge,
                max_recv_sge: attr.cap.max_recv_sge,
                max_inline_data: 0,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: a live PD and CQs of its device (write lock held), an init struct.
        let ptr = unsafe { (self.fns.create_qp)(p.ptr, &mut init) };
        if ptr.is_null() {
            return Err(verbs_error(
                "ibv_create_qp",
                null_errno(),
                "QP",
                &t.pd_dev(pd.0),
            ));
        }
        // SAFETY: a valid QP just returned by libibverbs.
        let qpn = unsafe { (*ptr).qp_num };
        let id = t.new_id_or(|| {
            // SAFETY: the QP just created, never handed out.
            unsafe { (self.fns.destroy_qp)(ptr) };
        })?;
        t.qps.insert(
            id,
            QpEntry {
                ptr,
                pd: pd.0,
                qpn,
                send_cq: attr.send_cq.0,
                recv_cq: attr.recv_cq.0,
            },
        );
        Ok(Qp { id, qpn })
    }

    fn modify_qp(&self, qp: Qp, m: &QpModify) -> Result<()> {
        let t = self.read();
        let q = t.qp(qp)?;
        let mut a = IbvQpAttr::default();
        let mask = match m {
            QpModify::Init(i) => {
                a.qp_state = IBV_QPS_INIT;
                a.pkey_index = i.pkey_index;
                a.port_num = i.port;
                a.qp_access_flags = i.access.0;
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
            }
            QpModify::Rtr(r) => {
                a.qp_state = IBV_QPS_RTR;
                a.path_mtu = r.path_mtu as u32;
                a.dest_qp_num = r.dest_qpn;
                a.rq_psn = r.rq_psn;
                a.max_dest_rd_atomic = r.max_dest_rd_atomic;
                a.min_rnr_timer = r.min_rnr_timer;
                a.ah_attr = ah_attr(&r.ah);
                IBV_QP_STATE
                    | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER
            }
            QpModify::Rts(r) => {
                a.qp_state = IBV_QPS_RTS;
                a.sq_psn = r.sq_psn;
                a.timeout = r.timeout;
                a.retry_cnt = r.retry_cnt;
                a.rnr_retry = r.rnr_retry;
                a.max_rd_atomic = r.max_rd_atomic;
                IBV_QP_STATE
                    | IBV_QP_SQ_PSN
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_MAX_QP_RD_ATOMIC
            }
            QpModify::Err => {
                a.qp_state = IBV_QPS_ERR;
                IBV_QP_STATE
            }
            QpModify::Reset => {
                a.qp_state = IBV_QPS_RESET;
                IBV_QP_STATE
            }
        };
        // SAFETY: a live QP (read lock held: nobody destroys it meanwhile) and its attributes.
        let rc = unsafe { (self.fns.modify_qp)(q.ptr, &mut a, mask) };
        if rc == 0 {
            return Ok(());
        }
        let e = rc_errno(rc);
        if e == libc::EINVAL
            && let Ok(Some(state)) = self.query_qp_state(q.ptr).map(qp_state)
        {
            return Err(VerbsError::QpState {
                qpn: q.qpn,
                state,
                why: format!("ibv_modify_qp to {m:?} refused (EINVAL)"),
            });
        }
        Err(verbs_error("ibv_modify_qp", e, "QP", &t.pd_dev(q.pd)))
    }

    fn qp_state(&self, qp: Qp) -> Result<QpState> {
        let t = self.read();
        let q = t.qp(qp)?;
        match self.query_qp_state(q.ptr) {
            Ok(s) => qp_state(s).ok_or_else(|| {
                VerbsError::Invalid(format!(
                    "QP {:#x} is in state {} ({}), which rcomm never asks for",
                    q.qpn,
                    s,
                    if s == IBV_QPS_SQD { "SQD" } else { "unknown" }
                ))
            }),
            Err(e) => Err(verbs_error("ibv_query_qp", e, "QP", &t.pd_dev(q.pd))),
        }
    }

    fn destroy_qp(&self, qp: Qp) -> Result<()> {
        let mut t = self.write();
        let q = t.qp(qp)?;
        // SAFETY: a QP we created (write lock held: no post or poll uses it meanwhile).
        let rc = unsafe { (self.fns.destroy_qp)(q.ptr) };
        if rc != 0 {
            let dev = t.pd_dev(q.pd);
            return Err(verbs_error("ibv_destroy_qp", rc_errno(rc), "QP", &dev));
        }
        t.qps.remove(&qp.id);
        Ok(())
    }

    fn post_send(&self, qp: Qp, wrs: &[SendWr<'_>]) -> std::result::Result<(), PostError> {
        let t = self.read();
        let q = t.qp(qp).map_err(at0)?;
        if wrs.is_empty() {
            return Ok(());
        }
        // SAFETY: a live QP (read lock held): its context and ops table are valid.
        let post = unsafe { (*(*q.ptr).context).ops.post_send }
            .ok_or_else(|| at0(VerbsError::Invalid("the provider has no post_send".into())))?;
        // SAFETY: the inline `ibv_post_send` of verbs.h, `qp->context->ops.post_send`, on a
        // live QP (read lock held). The memory the requests name is the caller's registered
        // memory (`reg_mr`'s contract).
        unsafe { post_list(q.ptr, wrs, |w| w.sg, send_wr, post, || t.pd_dev(q.pd)) }
    }

    fn post_recv(&self, qp: Qp, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError> {
        let t = self.read();
        let q = t.qp(qp).map_err(at0)?;
        if wrs.is_empty() {
            return Ok(());
        }
        // SAFETY: a live QP (read lock held): its context and ops table are valid.
        let post = unsafe { (*(*q.ptr).context).ops.post_recv }
            .ok_or_else(|| at0(VerbsError::Invalid("the provider has no post_recv".into())))?;
        let recv_wr = |w: &RecvWr<'_>, num_sge| IbvRecvWr {
            wr_id: w.wr_id,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge,
        };
        // SAFETY: the inline `ibv_post_recv` of verbs.h, as for `post_send`.
        unsafe { post_list(q.ptr, wrs, |w| w.sg, recv_wr, post, || t.pd_dev(q.pd)) }
    }

    fn event_fds(&self, ctx: Context, cq: Cq) -> [Option<std::os::fd::RawFd>; 2] {
        let t = self.read();
        // SAFETY: live objects (read lock held); the descriptors are plain fields.
        let chan = t
            .cq(cq.0)
            .ok()
            .filter(|c| !c.channel.is_null())
            .map(|c| unsafe { (*c.channel).fd });
        let async_fd = t.ctx(ctx.0).ok().map(|c| unsafe { (*c.ptr).async_fd });
        [chan, async_fd]
    }

    fn arm_cq(&self, cq: Cq) -> Result<()> {
        let t = self.read();
        let c = t.cq(cq.0)?;
        if !c.channel.is_null() {
            // Take and acknowledge the events delivered since the last arming (the descriptor
            // is non-blocking: get_cq_event fails with EAGAIN once it is empty).
            let mut n = 0u32;
            loop {
                let mut got: *mut IbvCq = std::ptr::null_mut();
                let mut ctx: *mut c_void = std::ptr::null_mut();
                // SAFETY: the live channel of this CQ; out-pointers to locals.
                let rc = unsafe { (self.fns.get_cq_event)(c.channel, &mut got, &mut ctx) };
                if rc != 0 {
                    break;
                }
                n += 1;
            }
            if n > 0 {
                // SAFETY: the CQ the events were delivered for (the channel serves only it).
                unsafe { (self.fns.ack_cq_events)(c.ptr, n) };
            }
        }
        // SAFETY: the inline `ibv_req_notify_cq` of verbs.h: `cq->context->ops.req_notify_cq(cq,
        // 0)` on a live CQ (read lock held).
        let rc = unsafe {
            match (*(*c.ptr).context).ops.req_notify_cq {
                Some(f) => f(c.ptr, 0),
                None => libc::EOPNOTSUPP,
            }
        };
        if rc != 0 {
            return Err(verbs_error(
                "ibv_req_notify_cq",
                rc_errno(rc),
                "CQ",
                &t.cq_dev(cq.0),
            ));
        }
        Ok(())
    }

    fn get_async_event(&self, ctx: Context) -> Result<Option<AsyncEvent>> {
        let t = self.read();
        let c = t.ctx(ctx.0)?;
        // SAFETY: an open context (read lock held).
        let fd = unsafe { (*c.ptr).async_fd };
        // Events the trait has no name for (COMM_EST, LID_CHANGE, …) are acknowledged and
        // passed over; the loop ends when the descriptor has nothing more to read.
        loop {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd, timeout 0: never blocks.
            let r = unsafe { libc::poll(&mut pfd, 1, 0) };
            if r == 0 {
                return Ok(None);
            }
            if r < 0 {
                match errno() {
                    libc::EINTR => continue,
                    e => return Err(verbs_error("poll(async_fd)", e, "device", &c.name)),
                }
            }
            let mut ev = IbvAsyncEvent {
                element: IbvAsyncElement { port_num: 0 },
                event_type: u32::MAX,
            };
            // SAFETY: an open context whose async fd is non-blocking (set in `open`), and an
            // event struct to fill.
            let rc = unsafe { (self.fns.get_async_event)(c.ptr, &mut ev) };
            if rc != 0 {
                return match errno() {
                    libc::EAGAIN | libc::EINTR => Ok(None),
                    e => Err(verbs_error("ibv_get_async_event", e, "device", &c.name)),
                };
            }
            // SAFETY: the union member matching the event type, as verbs.h documents: a QP for
            // QP events, a CQ for CQ events, a port number for port events. The QP/CQ stays
            // valid until the event is acknowledged below (destroying waits for the ack).
            let out = unsafe {
                match ev.event_type {
                    IBV_EVENT_CQ_ERR => {
                        let p = ev.element.cq;
                        t.cqs
                            .iter()
                            .find(|(_, e)| e.ptr == p)
                            .map(|(&id, _)| AsyncEvent::CqErr { cq: Cq(id) })
                    }
                    IBV_EVENT_QP_FATAL | IBV_EVENT_QP_REQ_ERR => Some(AsyncEvent::QpFatal {
                        qpn: (*ev.element.qp).qp_num,
                    }),
                    IBV_EVENT_QP_ACCESS_ERR => Some(AsyncEvent::QpAccessErr {
                        qpn: (*ev.element.qp).qp_num,
                    }),
                    IBV_EVENT_DEVICE_FATAL => Some(AsyncEvent::DeviceFatal),
                    IBV_EVENT_PORT_ACTIVE => Some(AsyncEvent::PortActive {
                        port: u8::try_from(ev.element.port_num).unwrap_or(0),
                    }),
                    IBV_EVENT_PORT_ERR => Some(AsyncEvent::PortErr {
                        port: u8::try_from(ev.element.port_num).unwrap_or(0),
                    }),
                    _ => None,
                }
            };
            // SAFETY: the event just returned, acknowledged once.
            unsafe { (self.fns.ack_async_event)(&mut ev) };
            if out.is_some() {
                return Ok(out);
            }
        }
    }
}

/// A C work request as posting sees it: `ibv_send_wr` and `ibv_recv_wr` both carry the
/// list link, the entry pointer and the entry count.
trait CWr: Sized {
    /// The queue the request goes to, and the inline call of verbs.h, for errors.
    const QUEUE: &'static str;
    const CALL: &'static str;
    fn next_mut(&mut self) -> &mut *mut Self;
    fn sg_list_mut(&mut self) -> &mut *mut IbvSge;
    fn num_sge(&self) -> c_int;
}

impl CWr for IbvSendWr {
    const QUEUE: &'static str = "send queue";
    const CALL: &'static str = "ibv_post_send";
    fn next_mut(&mut self) -> &mut *mut Self {
        &mut self.next
    }
    fn sg_list_mut(&mut self) -> &mut *mut IbvSge {
        &mut self.sg_list
    }
    fn num_sge(&self) -> c_int {
        self.num_sge
    }
}

impl CWr for IbvRecvWr {
    const QUEUE: &'static str = "receive queue";
    const CALL: &'static str = "ibv_post_recv";
    fn next_mut(&mut self) -> &mut *mut Self {
        &mut self.next
    }
    fn sg_list_mut(&mut self) -> &mut *mut IbvSge {
        &mut self.sg_list
    }
    fn num_sge(&self) -> c_int {
        self.num_sge
    }
}

/// A post error at the first request.
fn at0(error: VerbsError) -> PostError {
    PostError { bad_wr: 0, error }
}

/// Posts `wrs` through the provider's `post`: the requests (made by `c_wr` from each one and
/// its entry count) as one linked C list, their scatter/gather entries (`sg`) in one array
/// each request points into; the provider's refusal as a [`PostError`] naming the first
/// request it did not take (`dev` names the device, asked only then).
///
/// # Safety
/// `qp` is a live QP for the call and `post` its provider's post function for `C`; the memory
/// the entries name is registered for the QP's protection domain.
unsafe fn post_list<W, C: CWr>(
    qp: *mut IbvQp,
    wrs: &[W],
    sg: impl Fn(&W) -> &[crate::ib::verbs::Sge],
    c_wr: impl Fn(&W, c_int) -> C,
    post: unsafe extern "C" fn(*mut IbvQp, *mut C, *mut *mut C) -> c_int,
    dev: impl FnOnce() -> String,
) -> std::result::Result<(), PostError> {
    let mut sges: Vec<IbvSge> = Vec::new();
    let mut c_wrs: Vec<C> = Vec::with_capacity(wrs.len());
    for (i, w) in wrs.iter().enumerate() {
        let sg = sg(w);
        let num_sge = c_int::try_from(sg.len()).map_err(|_| PostError {
            bad_wr: i,
            error: VerbsError::Invalid(format!("{} scatter/gather entries", sg.len())),
        })?;
        sges.extend(sg.iter().map(|s| IbvSge {
            addr: s.addr,
            length: s.len,
            lkey: s.lkey,
        }));
        c_wrs.push(c_wr(w, num_sge));
    }
    // Linked now that neither vector moves any more: each request points to its entries
    // (laid out in order in `sges`) and to the request after it (null for the last).
    let (base, len, entries) = (c_wrs.as_mut_ptr(), c_wrs.len(), sges.as_mut_ptr());
    let mut off = 0usize;
    for i in 0..len {
        // SAFETY: `i < len`, one request borrowed at a time, all through `base` (the pointer
        // the provider gets).
        let w = unsafe { &mut *base.add(i) };
        let n = usize::try_from(w.num_sge()).unwrap_or(0);
        *w.sg_list_mut() = if n == 0 {
            std::ptr::null_mut()
        } else {
            entries.wrapping_add(off)
        };
        off += n;
        *w.next_mut() = if i + 1 < len {
            base.wrapping_add(i + 1)
        } else {
            std::ptr::null_mut()
        };
    }
    let mut bad: *mut C = std::ptr::null_mut();
    // SAFETY: the caller's contract for `qp` and `post`; the list and its entries live until
    // the call returns (the provider copies them into the queue).
    let rc = unsafe { post(qp, base, &mut bad) };
    if rc == 0 {
        return Ok(());
    }
    let bad_wr = index_of(c_wrs.as_ptr(), bad, len);
    let e = rc_errno(rc);
    let error = if e == libc::ENOMEM {
        VerbsError::QueueFull(C::QUEUE)
    } else {
        verbs_error(C::CALL, e, "QP", &dev())
    };
    Err(PostError { bad_wr, error })
}

/// Index of the request `bad` in the array at `base` of `len` requests (0 if it is not one).
fn index_of<T>(base: *const T, bad: *const T, len: usize) -> usize {
    let size = std::mem::size_of::<T>().max(1);
    let off = (bad as usize).wrapping_sub(base as usize);
    if bad.is_null() || !off.is_multiple_of(size) || off / size >= len {
        0
    } else {
        off / size
    }
}

/// `sizeof` and `offsetof` of every struct and field copied here, named as C would name them
/// (`ibv_wc` for `sizeof(struct ibv_wc)`, `ibv_wc.imm_data` for an offset); the ABI test
/// compares them with what a C compiler says for `verbs.h`.
#[doc(hidden)]
pub fn abi_layout() -> Vec<(&'static str, usize)> {
    use std::mem::{offset_of, size_of};
    let mut v = Vec::new();
    macro_rules! size {
        ($t:ty, $c:literal) => {
            v.push(($c, size_of::<$t>()));
        };
    }
    macro_rules! fields {
        ($t:ty, $c:literal: $($f0:ident $(. $f:ident)*),+ $(,)?) => {
            $(v.push((
                concat!($c, ".", stringify!($f0) $(, ".", stringify!($f))*),
                offset_of!($t, $f0 $(. $f)*),
            ));)+
        };
    }
    size!(IbvGid, "ibv_gid");
    fields!(IbvGid, "ibv_gid": raw);
    size!(IbvDeviceAttr, "ibv_device_attr");
    fields!(IbvDeviceAttr, "ibv_device_attr": fw_ver, node_guid, sys_image_guid, max_mr_size,
        page_size_cap, vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags,
        max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom,
        max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd,
        max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt);
    size!(IbvPortAttr, "ibv_port_attr");
    fields!(IbvPortAttr, "ibv_port_attr": state, max_mtu, active_mtu, gid_tbl_len,
        port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid,
        lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed,
        phys_state, link_layer, flags, port_cap_flags2);
    size!(IbvGidEntry, "ibv_gid_entry");
    fields!(IbvGidEntry, "ibv_gid_entry": gid, gid_index, port_num, gid_type, ndev_ifindex);
    size!(IbvContextOps, "ibv_context_ops");
    fields!(IbvContextOps, "ibv_context_ops": poll_cq, req_notify_cq, post_send, post_recv);
    size!(IbvContext, "ibv_context");
    fields!(IbvContext, "ibv_context": device, ops, cmd_fd, async_fd, num_comp_vectors, mutex,
        abi_compat);
    size!(IbvPd, "ibv_pd");
    fields!(IbvPd, "ibv_pd": context, handle);
    size!(IbvMr, "ibv_mr");
    fields!(IbvMr, "ibv_mr": context, pd, addr, length, handle, lkey, rkey);
    size!(IbvCq, "ibv_cq");
    size!(IbvCompChannel, "ibv_comp_channel");
    fields!(IbvCompChannel, "ibv_comp_channel": context, fd, refcnt);
    fields!(IbvCq, "ibv_cq": context, channel, cq_context, handle, cqe, mutex, cond,
        comp_events_completed, async_events_completed);
    size!(IbvQp, "ibv_qp");
    fields!(IbvQp, "ibv_qp": context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num,
        state, qp_type, mutex, cond, events_completed);
    size!(IbvQpCap, "ibv_qp_cap");
    fields!(IbvQpCap, "ibv_qp_cap": max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
        max_inline_data);
    size!(IbvQpInitAttr, "ibv_qp_init_attr");
    fields!(IbvQpInitAttr, "ibv_qp_init_attr": qp_context, send_cq, recv_cq, srq, cap, qp_type,
        sq_sig_all);
    size!(IbvGlobalRoute, "ibv_global_route");
    fields!(IbvGlobalRoute, "ibv_global_route": dgid, flow_label, sgid_index, hop_limit,
        traffic_class);
    size!(IbvAhAttr, "ibv_ah_attr");
    fields!(IbvAhAttr, "ibv_ah_attr": grh, dlid, sl, src_path_bits, static_rate, is_global,
        port_num);
    size!(IbvQpAttr, "ibv_qp_attr");
    fields!(IbvQpAttr, "ibv_qp_attr": qp_state, cur_qp_state, path_mtu, path_mig_state, qkey,
        rq_psn, sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index,
        alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic,
        min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout,
        rate_limit);
    size!(IbvSge, "ibv_sge");
    fields!(IbvSge, "ibv_sge": addr, length, lkey);
    size!(IbvSendWr, "ibv_send_wr");
    fields!(IbvSendWr, "ibv_send_wr": wr_id, next, sg_list, num_sge, opcode, send_flags,
        imm_data, wr, wr.rdma.remote_addr, wr.rdma.rkey, qp_type, bind_mw);
    size!(IbvRecvWr, "ibv_recv_wr");
    fields!(IbvRecvWr, "ibv_recv_wr": wr_id, next, sg_list, num_sge);
    size!(IbvWc, "ibv_wc");
    fields!(IbvWc, "ibv_wc": wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num,
        src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits);
    size!(IbvAsyncEvent, "ibv_async_event");
    fields!(IbvAsyncEvent, "ibv_async_event": element, element.cq, element.qp,
        element.port_num, event_type);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ib::verbs::{RecvWr, Sge};
    use std::cell::RefCell;

    /// A request as the stand-in provider saw it: its wr_id and its (addr, length, lkey) entries.
    type Seen = (u64, Vec<(u64, u32, u32)>);

    thread_local! {
        /// What the stand-in provider's post saw, in list order.
        static POSTED: RefCell<Vec<Seen>> = const { RefCell::new(Vec::new()) };
    }

    /// A provider's `post_recv` that walks the list as a real one would, and refuses the
    /// request whose `wr_id` is 7 (ENOMEM: its queue is full) or 8 (EINVAL).
    unsafe extern "C" fn walking_post(
        _qp: *mut IbvQp,
        mut wr: *mut IbvRecvWr,
        bad: *mut *mut IbvRecvWr,
    ) -> c_int {
        while !wr.is_null() {
            // SAFETY: the list post_list built, live for the call.
            let w = unsafe { &*wr };
            if w.wr_id == 7 || w.wr_id == 8 {
                // SAFETY: `bad` is post_list's out-pointer.
                unsafe { *bad = wr };
                return if w.wr_id == 7 {
                    libc::ENOMEM
                } else {
                    libc::EINVAL
                };
            }
            let entries = (0..usize::try_from(w.num_sge).unwrap())
                // SAFETY: `num_sge` entries at `sg_list`, live for the call.
                .map(|k| unsafe { *w.sg_list.add(k) })
                .map(|e| (e.addr, e.length, e.lkey))
                .collect();
            POSTED.with(|p| p.borrow_mut().push((w.wr_id, entries)));
            wr = w.next;
        }
        0
    }

    #[test]
    fn a_post_hands_the_provider_one_linked_list_and_names_the_request_it_refused() {
        let sg = |k: u64| Sge {
            addr: 0x1000 * k,
            len: k as u32,
            lkey: 40 + k as u32,
        };
        let (a, b) = ([sg(1), sg(2)], [sg(3)]);
        let wr = |wr_id, sg| RecvWr { wr_id, sg };
        let recv_wr = |w: &RecvWr<'_>, num_sge| IbvRecvWr {
            wr_id: w.wr_id,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge,
        };
        let no_dev = || -> String { panic!("the device is named only for an error") };
        let post = |wrs: &[RecvWr<'_>], dev: &dyn Fn() -> String| {
            POSTED.with(|p| p.borrow_mut().clear());
            // SAFETY: the stand-in provider never touches the QP.
            let r = unsafe {
                post_list(
                    std::ptr::null_mut(),
                    wrs,
                    |w| w.sg,
                    recv_wr,
                    walking_post,
                    dev,
                )
            };
            (r, POSTED.with(|p| p.borrow().clone()))
        };
        // Entries of each request in order, one without any, the list ending with null.
        let (r, seen) = post(&[wr(1, &a), wr(2, &[]), wr(3, &b)], &no_dev);
        assert!(r.is_ok());
        assert_eq!(
            seen,
            vec![
                (1, vec![(0x1000, 1, 41), (0x2000, 2, 42)]),
                (2, vec![]),
                (3, vec![(0x3000, 3, 43)])
            ]
        );
        // Refused at the third request: the two before it were taken.
        let (r, seen) = post(&[wr(1, &a), wr(2, &b), wr(7, &a), wr(4, &b)], &no_dev);
        let e = r.unwrap_err();
        assert_eq!(e.bad_wr, 2);
        assert!(
            matches!(e.error, VerbsError::QueueFull("receive queue")),
            "{:?}",
            e.error
        );
        assert_eq!(seen.len(), 2);
        let (r, _) = post(&[wr(8, &a)], &|| "mlx5_0".to_string());
        let e = r.unwrap_err();
        assert_eq!(e.bad_wr, 0);
        assert!(e.error.to_string().contains("ibv_post_recv"), "{}", e.error);
    }

    #[test]
    fn statuses_and_opcodes_map_as_libibverbs_numbers_them() {
        assert_eq!(wc_status(0), WcStatus::Success);
        assert_eq!(wc_status(5), WcStatus::WrFlushErr);
        assert_eq!(wc_status(10), WcStatus::RemAccessErr);
        assert_eq!(wc_status(12), WcStatus::RetryExcErr);
        assert_eq!(wc_status(13), WcStatus::RnrRetryExcErr);
        assert_eq!(wc_status(999), WcStatus::RemOpErr);
        assert_eq!(wc_opcode(129), WcOpcode::RecvRdmaWithImm);
        assert_eq!(width_lanes(2), 4);
        assert_eq!(speed(64), LinkSpeed::Hdr);
        assert_eq!(mtu(5), Some(Mtu::M4096));
        assert_eq!(qp_state(IBV_QPS_RTS), Some(QpState::Rts));
        assert_eq!(qp_state(IBV_QPS_SQD), None);
    }

    #[test]
    fn immediates_are_in_network_byte_order_both_ways() {
        // Sending: the request's immediate lies in memory most significant byte first.
        let sent = send_wr(
            &SendWr {
                wr_id: 7,
                op: SendOp::RdmaWriteImm {
                    remote_addr: 0x1000,
                    rkey: 9,
                    imm: 0x0102_0304,
                },
                sg: &[],
                signaled: true,
            },
            0,
        );
        assert_eq!(sent.imm_data.to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(
            (sent.opcode, sent.send_flags, sent.wr_id),
            (IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SIGNALED, 7)
        );
        // Receiving: those bytes read back as the value sent.
        let w = IbvWc {
            imm_data: u32::from_ne_bytes([1, 2, 3, 4]),
            wc_flags: IBV_WC_WITH_IMM,
            opcode: 129,
            ..Default::default()
        };
        assert_eq!(wc(&w).imm_data, Some(0x0102_0304));
        assert_eq!(wc(&IbvWc::default()).imm_data, None);
    }

    #[test]
    fn a_bad_wr_pointer_outside_the_list_reads_as_the_first() {
        let a = [0u64; 4];
        assert_eq!(index_of(a.as_ptr(), a.as_ptr().wrapping_add(2), 4), 2);
        assert_eq!(index_of(a.as_ptr(), std::ptr::null(), 4), 0);
        assert_eq!(index_of(a.as_ptr(), a.as_ptr().wrapping_add(9), 4), 0);
    }
}
