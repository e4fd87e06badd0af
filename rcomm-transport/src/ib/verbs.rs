//! The subset of libibverbs that rcomm's RC protocol needs, as plain Rust types.
//!
//! Semantics follow libibverbs (`ibv_*`), so that the simulated fabric (`ib::sim`, feature
//! `sim`) and a later libibverbs backend are interchangeable under the protocol core: objects
//! are handles (a backend keeps the pointers), errors returned by a call are what the C call
//! would return, and what happens on the wire is reported by work completions and async events.

use std::fmt;
use std::net::Ipv4Addr;

/// What a verbs call refused (the C call's errno, with enough words to act on).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    /// No such device (or it is not visible to this process).
    #[error("no RDMA device named {0:?}")]
    NoDevice(String),
    /// The device has no such port.
    #[error("{dev}: no port {port}")]
    NoPort {
        /// Device name.
        dev: String,
        /// Port number asked for (ports count from 1).
        port: u8,
    },
    /// The GID table entry is empty or beyond the table.
    #[error("{dev} port {port}: no GID at index {index}")]
    NoGid {
        /// Device name.
        dev: String,
        /// Port number.
        port: u8,
        /// GID index.
        index: u16,
    },
    /// A handle that names nothing (destroyed, or from another device).
    #[error("stale or foreign {0} handle")]
    BadHandle(&'static str),
    /// An argument out of range (EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The object is still used by others (EBUSY), e.g. a PD with MRs.
    #[error("{0} is still in use")]
    Busy(&'static str),
    /// A queue has no room (ENOMEM on post).
    #[error("{0} is full")]
    QueueFull(&'static str),
    /// The QP's state does not allow the call.
    #[error("QP {qpn:#x} is in state {state:?}: {why}")]
    QpState {
        /// The QP number.
        qpn: u32,
        /// Its state.
        state: QpState,
        /// What was asked.
        why: String,
    },
    /// The CQ overflowed; completions were lost (the CQ is unusable, as after CQ overrun).
    #[error("completion queue overrun: completions were lost")]
    CqOverrun,
    /// The device stopped working (after `IBV_EVENT_DEVICE_FATAL`).
    #[error("device {0} is dead")]
    DeviceDead(String),
}

/// `ibv_post_send`/`ibv_post_recv` refused a work request: the ones before `bad_wr` were
/// posted, that one and those after were not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("work request {bad_wr} refused: {error}")]
pub struct PostError {
    /// Index of the first refused work request (libibverbs' `bad_wr`).
    pub bad_wr: usize,
    /// Why.
    pub error: VerbsError,
}

/// Result of a verbs call.
pub type Result<T> = std::result::Result<T, VerbsError>;

/// An opened device (`ibv_context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Context(pub u32);

/// A protection domain (`ibv_pd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pd(pub u32);

/// A completion queue (`ibv_cq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cq(pub u32);

/// A queue pair (`ibv_qp`): the handle and the number the peer connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Qp {
    /// The handle.
    pub id: u32,
    /// The QP number (24 bits), published in the connection blob.
    pub qpn: u32,
}

/// A memory region (`ibv_mr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mr {
    /// The handle.
    pub id: u32,
    /// Key for local scatter/gather entries.
    pub lkey: u32,
    /// Key a peer names in RDMA operations.
    pub rkey: u32,
    /// Start of the registered range.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// Memory-region and QP access flags (`IBV_ACCESS_*`); local read is always allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    /// No remote access, no local write.
    pub const NONE: Self = Self(0);
    /// The HCA may write the memory (receives, RDMA READ targets).
    pub const LOCAL_WRITE: Self = Self(1);
    /// Peers may RDMA WRITE into it (needs `LOCAL_WRITE`, as libibverbs).
    pub const REMOTE_WRITE: Self = Self(1 << 1);
    /// Peers may RDMA READ it.
    pub const REMOTE_READ: Self = Self(1 << 2);
    /// Peers may run atomics on it (needs `LOCAL_WRITE`); rcomm uses none yet.
    pub const REMOTE_ATOMIC: Self = Self(1 << 3);

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Self;
    fn bitor(self, o: Self) -> Self {
        Self(self.0 | o.0)
    }
}

/// Path and port MTU (`ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    /// 256 bytes.
    M256 = 1,
    /// 512 bytes.
    M512 = 2,
    /// 1024 bytes.
    M1024 = 3,
    /// 2048 bytes.
    M2048 = 4,
    /// 4096 bytes.
    M4096 = 5,
}

impl Mtu {
    /// Payload bytes per packet.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The MTU of exactly `bytes`, if it is one.
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        [
            Self::M256,
            Self::M512,
            Self::M1024,
            Self::M2048,
            Self::M4096,
        ]
        .into_iter()
        .find(|m| m.bytes() == bytes)
    }

    /// The largest IB MTU that fits an Ethernet MTU once RoCE's headers are taken off (as the
    /// kernel's `iboe_get_mtu`: GRH/IP, UDP, BTH, the largest extended header, ICRC).
    pub fn for_ethernet(eth_mtu: u32) -> Option<Self> {
        let room = eth_mtu.checked_sub(40 + 8 + 12 + 4 + 28 + 4)?;
        [
            Self::M4096,
            Self::M2048,
            Self::M1024,
            Self::M512,
            Self::M256,
        ]
        .into_iter()
        .find(|m| m.bytes() <= room)
    }
}

/// Logical port state (`ibv_port_state`, sysfs `ports/N/state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// No state change.
    Nop,
    /// Link down.
    Down,
    /// Link up, not yet configured by the subnet manager.
    Init,
    /// Configured, not yet active.
    Armed,
    /// Usable.
    Active,
    /// Active, deferring.
    ActiveDefer,
}

impl PortState {
    /// From the number libibverbs and sysfs use.
    pub fn from_num(n: u32) -> Option<Self> {
        Some(match n {
            0 => Self::Nop,
            1 => Self::Down,
            2 => Self::Init,
            3 => Self::Armed,
            4 => Self::Active,
            5 => Self::ActiveDefer,
            _ => return None,
        })
    }

    /// The name sysfs prints.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nop => "NOP",
            Self::Down => "DOWN",
            Self::Init => "INIT",
            Self::Armed => "ARMED",
            Self::Active => "ACTIVE",
            Self::ActiveDefer => "ACTIVE_DEFER",
        }
    }
}

/// What a port speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// InfiniBand: addressed by LID (GRH optional).
    InfiniBand,
    /// Ethernet (RoCE): addressed by GID, a GRH on every packet.
    Ethernet,
}

impl LinkLayer {
    /// The name sysfs gives it (`ports/N/link_layer`).
    pub fn name(self) -> &'static str {
        match self {
            Self::InfiniBand => "InfiniBand",
            Self::Ethernet => "Ethernet",
        }
    }

    /// From its sysfs name.
    pub fn from_name(s: &str) -> Option<Self> {
        [Self::InfiniBand, Self::Ethernet]
            .into_iter()
            .find(|l| l.name() == s)
    }
}

/// Per-lane signalling rate of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkSpeed {
    /// 2.5 Gb/s.
    Sdr,
    /// 5 Gb/s.
    Ddr,
    /// 10 Gb/s.
    Qdr,
    /// 10 Gb/s, 64b/66b.
    Fdr10,
    /// 14 Gb/s.
    Fdr,
    /// 25 Gb/s.
    Edr,
    /// 50 Gb/s.
    Hdr,
    /// 100 Gb/s.
    Ndr,
    /// 200 Gb/s.
    Xdr,
}

impl LinkSpeed {
    /// Data rate of one lane in Mb/s (FDR counted as the kernel's 56 Gb/s for 4X).
    pub fn lane_mbps(self) -> u64 {
        match self {
            Self::Sdr => 2_500,
            Self::Ddr => 5_000,
            Self::Qdr | Self::Fdr10 => 10_000,
            Self::Fdr => 14_000,
            Self::Edr => 25_000,
            Self::Hdr => 50_000,
            Self::Ndr => 100_000,
            Self::Xdr => 200_000,
        }
    }

    /// The name sysfs's `rate` file uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sdr => "SDR",
            Self::Ddr => "DDR",
            Self::Qdr => "QDR",
            Self::Fdr10 => "FDR10",
            Self::Fdr => "FDR",
            Self::Edr => "EDR",
            Self::Hdr => "HDR",
            Self::Ndr => "NDR",
            Self::Xdr => "XDR",
        }
    }

    /// From that name.
    pub fn from_name(s: &str) -> Option<Self> {
        [
            Self::Sdr,
            Self::Ddr,
            Self::Qdr,
            Self::Fdr10,
            Self::Fdr,
            Self::Edr,
            Self::Hdr,
            Self::Ndr,
            Self::Xdr,
        ]
        .into_iter()
        .find(|v| v.name() == s)
    }
}

/// A 128-bit global identifier: on RoCE an IPv6 address (IPv4 as `::ffff:a.b.c.d`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an IPv4 address (`::ffff:a.b.c.d`), as RoCE tables hold them.
    pub fn from_ipv4(a: Ipv4Addr) -> Self {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&a.octets());
        Self(g)
    }

    /// The IPv4 address of an IPv4-mapped GID.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        (self.0[..10] == [0; 10] && self.0[10..12] == [0xff, 0xff])
            .then(|| Ipv4Addr::new(self.0[12], self.0[13], self.0[14], self.0[15]))
    }

    /// An unused table entry.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// `fe80::/10`.
    pub fn is_link_local(&self) -> bool {
        self.0[0] == 0xfe && self.0[1] & 0xc0 == 0x80
    }

    /// Parses sysfs's form: eight groups of four hex digits separated by `:`.
    pub fn parse(s: &str) -> Option<Self> {
        let mut g = [0u8; 16];
        let groups: Vec<&str> = s.trim().split(':').collect();
        if groups.len() != 8 {
            return None;
        }
        for (i, grp) in groups.iter().enumerate() {
            if grp.is_empty() || grp.len() > 4 {
                return None;
            }
            let v = u16::from_str_radix(grp, 16).ok()?;
            g[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
        }
        Some(Self(g))
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in 0..8 {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", self.0[2 * i], self.0[2 * i + 1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// What a GID table entry is for (sysfs `gid_attrs/types/K`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// `IB/RoCE v1`: native IB, or RoCE v1 (Ethernet frames, not routable) on Ethernet ports.
    IbRoceV1,
    /// `RoCE v2`: UDP/IP, routable.
    RoceV2,
}

impl GidType {
    /// The name sysfs gives it (`gid_attrs/types/K`).
    pub fn name(self) -> &'static str {
        match self {
            Self::IbRoceV1 => "IB/RoCE v1",
            Self::RoceV2 => "RoCE v2",
        }
    }

    /// From its sysfs name.
    pub fn from_name(s: &str) -> Option<Self> {
        [Self::IbRoceV1, Self::RoceV2]
            .into_iter()
            .find(|t| t.name() == s)
    }
}

/// One GID table entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GidEntry {
    /// Its index (what `sgid_index` names).
    pub index: u16,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub gid_type: GidType,
    /// The network device it belongs to (RoCE; `gid_attrs/ndevs/K`).
    pub ndev: Option<String>,
}

/// A device as the device list shows it (`ibv_device` + `ibv_query_device`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Kernel name (`mlx5_0`).
    pub name: String,
    /// Node GUID.
    pub node_guid: u64,
    /// Number of ports (numbered from 1).
    pub phys_port_cnt: u8,
    /// Most work requests one queue may hold.
    pub max_qp_wr: u32,
    /// Most scatter/gather entries per work request.
    pub max_sge: u32,
    /// Most entries one CQ may hold.
    pub max_cqe: u32,
}

/// A port (`ibv_query_port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical state.
    pub state: PortState,
    /// What it speaks.
    pub link_layer: LinkLayer,
    /// MTU in use.
    pub active_mtu: Mtu,
    /// Lanes in use (1, 2, 4, 8, 12).
    pub active_width: u8,
    /// Per-lane rate in use.
    pub active_speed: LinkSpeed,
    /// Local identifier (IB; 0 on Ethernet).
    pub lid: u16,
    /// GID table size.
    pub gid_tbl_len: u16,
}

impl PortAttr {
    /// Data rate in Mb/s (lanes × lane rate).
    pub fn rate_mbps(&self) -> u64 {
        u64::from(self.active_width) * self.active_speed.lane_mbps()
    }
}

/// QP states (`ibv_qp_state`); the ones an RC connection passes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Created; nothing posted may run.
    Reset,
    /// Port and access set; receives may be posted.
    Init,
    /// Ready to receive: connected to the peer's QP.
    Rtr,
    /// Ready to send.
    Rts,
    /// Failed: every outstanding and later work request completes flushed.
    Err,
}

/// Queue sizes of a new QP (`ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive.
    pub max_recv_sge: u32,
}

/// A new RC QP (`ibv_qp_init_attr`, `IBV_QPT_RC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// Where send completions go.
    pub send_cq: Cq,
    /// Where receive completions go.
    pub recv_cq: Cq,
    /// Queue sizes.
    pub cap: QpCap,
}

/// Global routing header (required on RoCE, between IB subnets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grh {
    /// The peer's GID.
    pub dgid: Gid,
    /// Which of our GIDs to send from (RoCE v1/v2 and IP family follow from it).
    pub sgid_index: u8,
    /// Hop limit (IP TTL).
    pub hop_limit: u8,
    /// Traffic class (IP DSCP/ECN on RoCE).
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
}

/// Address of the peer (`ibv_ah_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhAttr {
    /// The peer port's LID (IB).
    pub dlid: u16,
    /// Service level (0–15).
    pub sl: u8,
    /// Our port to send from.
    pub port: u8,
    /// Global routing; `None` on IB within one subnet.
    pub grh: Option<Grh>,
}

/// RESET → INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitAttr {
    /// Our port.
    pub port: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// Which remote operations peers may run on this QP.
    pub access: Access,
}

/// INIT → RTR: the connection to the peer's QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    /// Path MTU (at most the port's active MTU).
    pub path_mtu: Mtu,
    /// The peer's QP number.
    pub dest_qpn: u32,
    /// The first PSN expected from the peer (its `sq_psn`), 24 bits.
    pub rq_psn: u32,
    /// RDMA READs the peer may have outstanding at us.
    pub max_dest_rd_atomic: u8,
    /// How long a peer is told to wait after an RNR NAK (IB's 5-bit code; 0 = 655.36 ms).
    pub min_rnr_timer: u8,
    /// Where the peer is.
    pub ah: AhAttr,
}

/// RTR → RTS: the sender's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    /// Our first PSN (the peer's `rq_psn`), 24 bits.
    pub sq_psn: u32,
    /// Local ACK timeout, 4.096 µs · 2^timeout (0 = wait for ever), at most 31.
    pub timeout: u8,
    /// Retransmissions after a timeout before failing (0–7).
    pub retry_cnt: u8,
    /// Retransmissions after an RNR NAK before failing (0–6; 7 = for ever).
    pub rnr_retry: u8,
    /// RDMA READs we may have outstanding.
    pub max_rd_atomic: u8,
}

/// One `ibv_modify_qp` transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpModify {
    /// RESET → INIT.
    Init(InitAttr),
    /// INIT → RTR.
    Rtr(RtrAttr),
    /// RTR → RTS.
    Rts(RtsAttr),
    /// Any → ERR (flushes).
    Err,
    /// Any → RESET (drops queued work without completions).
    Reset,
}

/// Local ACK timeout in nanoseconds for the `timeout` code (`None`: infinite).
pub fn ack_timeout_ns(timeout: u8) -> Option<u64> {
    (timeout != 0).then(|| 4096u64 << timeout.min(31))
}

/// The RNR NAK timer in nanoseconds for the 5-bit code (IB spec table 45).
pub fn rnr_timer_ns(code: u8) -> u64 {
    // In units of 10 µs.
    const TEN_US: [u64; 32] = [
        65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
        1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
    ];
    TEN_US[(code & 31) as usize] * 10_000
}

/// One scatter/gather entry: `len` bytes at `addr`, inside the MR whose `lkey` it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Start.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// The local key of an MR covering it.
    pub lkey: u32,
}

/// What a send work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND: consumes a receive at the peer.
    Send,
    /// RDMA WRITE to `remote_addr` in the peer's MR `rkey`; no receive consumed.
    RdmaWrite {
        /// Peer address.
        remote_addr: u64,
        /// Peer MR key.
        rkey: u32,
    },
    /// RDMA WRITE plus a 32-bit immediate that consumes a receive at the peer.
    RdmaWriteImm {
        /// Peer address.
        remote_addr: u64,
        /// Peer MR key.
        rkey: u32,
        /// Delivered in the peer's receive completion.
        imm: u32,
    },
    /// RDMA READ from `remote_addr` in the peer's MR `rkey` into the local entries.
    RdmaRead {
        /// Peer address.
        remote_addr: u64,
        /// Peer MR key.
        rkey: u32,
    },
}

/// A send work request (`ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local data (gathered for SEND/WRITE, scattered into for READ).
    pub sg: &'a [Sge],
    /// Whether success produces a completion (errors always do).
    pub signaled: bool,
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where an incoming SEND's data goes (WRITE WITH IMM ignores it).
    pub sg: &'a [Sge],
}

/// Completion status (`ibv_wc_status`), the ones an RC QP produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// Done.
    Success,
    /// An incoming SEND was longer than the receive's entries.
    LocLenErr,
    /// A local entry names no MR, a foreign one, or lies outside it, or lacks local write.
    LocProtErr,
    /// The QP was (or went) in error; the request did not run.
    WrFlushErr,
    /// The peer refused the request as invalid (e.g. its receive was too short).
    RemInvReqErr,
    /// The peer's rkey, range or access refused an RDMA operation.
    RemAccessErr,
    /// The peer could not complete the request (e.g. its receive entries are bad).
    RemOpErr,
    /// The peer did not answer within `timeout` after `retry_cnt` retransmissions.
    RetryExcErr,
    /// The peer had no receive posted through `rnr_retry` retransmissions.
    RnrRetryExcErr,
}

/// Completion opcode (`ibv_wc_opcode`). On an error completion only `wr_id`, `status` and
/// `qp_num` are defined (as in libibverbs); the simulation fills the rest anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND finished.
    Send,
    /// An RDMA WRITE (with or without immediate) finished.
    RdmaWrite,
    /// An RDMA READ finished.
    RdmaRead,
    /// A SEND arrived.
    Recv,
    /// A WRITE WITH IMM arrived.
    RecvRdmaWithImm,
}

/// A work completion (`ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What finished.
    pub opcode: WcOpcode,
    /// Bytes received (receives) or read (RDMA READ).
    pub byte_len: u32,
    /// The immediate of an incoming WRITE WITH IMM.
    pub imm_data: Option<u32>,
    /// The QP it belongs to.
    pub qp_num: u32,
}

/// An asynchronous event (`ibv_get_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// A port became active.
    PortActive {
        /// Port number.
        port: u8,
    },
    /// A port went down.
    PortErr {
        /// Port number.
        port: u8,
    },
    /// A QP went to error for a reason no completion reports (e.g. its CQ overran).
    QpFatal {
        /// QP number.
        qpn: u32,
    },
    /// A peer's request violated this QP's access (bad rkey, range, rights); it went to error.
    QpAccessErr {
        /// QP number.
        qpn: u32,
    },
    /// A CQ overran.
    CqErr {
        /// The CQ.
        cq: Cq,
    },
    /// The device died; nothing on it works any more.
    DeviceFatal,
}

/// The verbs calls rcomm's RC protocol makes, with libibverbs' meaning.
///
/// Every call takes `&self`: libibverbs is thread-safe, and the simulation shares one fabric
/// between the handles of several simulated hosts.
pub trait Verbs {
    /// The devices this process sees (`ibv_get_device_list` + `ibv_query_device`).
    fn devices(&self) -> Result<Vec<DeviceAttr>>;
    /// Opens a device by name.
    fn open(&self, name: &str) -> Result<Context>;
    /// Closes it; its objects must have been destroyed (EBUSY otherwise).
    fn close(&self, ctx: Context) -> Result<()>;
    /// A port's attributes (ports count from 1).
    fn query_port(&self, ctx: Context, port: u8) -> Result<PortAttr>;
    /// One GID table entry (`ibv_query_gid_ex`).
    fn query_gid(&self, ctx: Context, port: u8, index: u16) -> Result<GidEntry>;
    /// A new protection domain.
    fn alloc_pd(&self, ctx: Context) -> Result<Pd>;
    /// Frees a PD; EBUSY while MRs or QPs use it.
    fn dealloc_pd(&self, pd: Pd) -> Result<()>;
    /// Registers `len` bytes at `addr` with `access` (`REMOTE_WRITE`/`REMOTE_ATOMIC` need
    /// `LOCAL_WRITE`, as libibverbs).
    ///
    /// # Safety
    /// The range must stay valid (allocated, not moved) until [`Verbs::dereg_mr`], readable,
    /// and writable where `access` lets the device write; while the device may access it
    /// (operations naming its keys outstanding), no Rust reference may alias the bytes it
    /// writes: the device acts like another thread doing DMA.
    unsafe fn reg_mr(&self, pd: Pd, addr: u64, len: u64, access: Access) -> Result<Mr>;
    /// Deregisters; later operations naming its keys fault.
    fn dereg_mr(&self, mr: Mr) -> Result<()>;
    /// A CQ of at least `cqe` entries.
    fn create_cq(&self, ctx: Context, cqe: u32) -> Result<Cq>;
    /// Destroys a CQ; EBUSY while QPs use it.
    fn destroy_cq(&self, cq: Cq) -> Result<()>;
    /// Moves up to `max` completions, oldest first, to the end of `out`; returns how many.
    fn poll_cq(&self, cq: Cq, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize>;
    /// A new RC QP in RESET.
    fn create_qp(&self, pd: Pd, attr: &QpInitAttr) -> Result<Qp>;
    /// One state transition; refused (EINVAL) if the current state does not allow it.
    fn modify_qp(&self, qp: Qp, m: &QpModify) -> Result<()>;
    /// The QP's current state.
    fn qp_state(&self, qp: Qp) -> Result<QpState>;
    /// Destroys a QP; its outstanding work is dropped without completions.
    fn destroy_qp(&self, qp: Qp) -> Result<()>;
    /// Posts send work requests (RTS, or ERR where they complete flushed).
    fn post_send(&self, qp: Qp, wrs: &[SendWr<'_>]) -> std::result::Result<(), PostError>;
    /// Posts receive work requests (any state but RESET; flushed in ERR).
    fn post_recv(&self, qp: Qp, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError>;
    /// The next async event of the device, if any (never blocks).
    fn get_async_event(&self, ctx: Context) -> Result<Option<AsyncEvent>>;

    /// Registers device memory exported as a dma-buf (`ibv_reg_dmabuf_mr`, GPUDirect RDMA):
    /// `len` bytes at `offset` in the dma-buf `fd`, addressed by peers as `iova` (rcomm uses
    /// the device pointer). Implementations without it refuse (`Invalid`).
    ///
    /// # Safety
    /// As [`Verbs::reg_mr`]: the device memory must stay allocated until [`Verbs::dereg_mr`].
    unsafe fn reg_dmabuf_mr(
        &self,
        _pd: Pd,
        _offset: u64,
        _len: u64,
        _iova: u64,
        _fd: i32,
        _access: Access,
    ) -> Result<Mr> {
        Err(VerbsError::Invalid(
            "this verbs library cannot register dma-bufs".into(),
        ))
    }

    /// Descriptors a sleeping rank waits on: `cq`'s completion channel (readable after a
    /// completion, once [`arm_cq`](Self::arm_cq) asked for it) and `ctx`'s async events.
    /// `None`s where there are none (the simulation, driven by the test): the caller polls.
    fn event_fds(&self, _ctx: Context, _cq: Cq) -> [Option<std::os::fd::RawFd>; 2] {
        [None, None]
    }

    /// Asks for a channel event at the next completion on `cq` (`ibv_req_notify_cq`),
    /// acknowledging the events already delivered. A completion that came before the call
    /// raises no event: poll once more after arming, then sleep.
    fn arm_cq(&self, _cq: Cq) -> Result<()> {
        Ok(())
    }
}
