//! The one place that reads `RCOMM_*` environment variables.
//!
//! Why one file: the one reader of `RCOMM_*`: the variables table and its parsers, one edit each.
//!
//! Every variable rcomm understands is listed in [`VARIABLES`] (the book's table, book/src/reference/environment.md, is checked
//! against it by a test). Variables marked protocol-relevant must agree on every rank: their
//! values travel in each rank's [`PeerInfo`](crate::identity::PeerInfo), and a mismatch is an
//! init error naming the variable and the ranks, instead of a hang later.

use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The variables a launcher sets for each rank it starts: `rcomm-run`, and a spawning rank for
/// its children (`Communicator::spawn`). Each removes inherited values first.
pub const LAUNCHER_VARS: [&str; 7] = [
    "RCOMM_RANK",
    "RCOMM_SIZE",
    "RCOMM_LOCAL_RANK",
    "RCOMM_LOCAL_SIZE",
    "RCOMM_KVS_ADDR",
    "RCOMM_JOB_ID",
    "RCOMM_SECRET_FD",
];

/// One documented variable.
#[derive(Debug, Clone, Copy)]
pub struct VarSpec {
    /// Its name.
    pub name: &'static str,
    /// Whether every rank must use the same value.
    pub protocol: bool,
    /// Who sets it, what it does, its values and default.
    pub help: &'static str,
}

/// Every `RCOMM_*` variable rcomm reads.
pub const VARIABLES: &[VarSpec] = &[
    VarSpec {
        name: "RCOMM_RANK",
        protocol: false,
        help: "set by the launcher: this process's rank",
    },
    VarSpec {
        name: "RCOMM_SIZE",
        protocol: false,
        help: "set by the launcher: number of ranks",
    },
    VarSpec {
        name: "RCOMM_LOCAL_RANK",
        protocol: false,
        help: "set by the launcher: rank among the ranks on this node",
    },
    VarSpec {
        name: "RCOMM_LOCAL_SIZE",
        protocol: false,
        help: "set by the launcher: number of ranks on this node",
    },
    VarSpec {
        name: "RCOMM_KVS_ADDR",
        protocol: false,
        help: "set by the launcher: ip:port of its key-value store",
    },
    VarSpec {
        name: "RCOMM_JOB_ID",
        protocol: false,
        help: "set by the launcher: the job's id; tags every process of the job",
    },
    VarSpec {
        name: "RCOMM_SECRET_FD",
        protocol: false,
        help: "set by the launcher: inherited descriptor holding the job secret (never on a command line)",
    },
    VarSpec {
        name: "RCOMM_DEBUG",
        protocol: false,
        help: "log level: WARN (default), INFO, TRACE; logs go to stderr prefixed with host, pid and rank",
    },
    VarSpec {
        name: "RCOMM_DEBUG_SUBSYS",
        protocol: false,
        help: "comma list limiting logs to INIT, P2P, COLL, MESH, NET, TOPO, LAUNCH (default: all)",
    },
    VarSpec {
        name: "RCOMM_TRANSPORT",
        protocol: true,
        help: "transport between ranks: auto (default: shm on a node, then ib where both ranks have an active RDMA port on one fabric, then tcp), shm, tcp, ib (every peer over InfiniBand/RoCE verbs; an init error where a rank has no usable RDMA device); must agree on every rank",
    },
    VarSpec {
        name: "RCOMM_SHM_CMA",
        protocol: false,
        help: "1 (default): large shared-memory messages up to RCOMM_SHM_CMA_MAX move by single copy (process_vm_readv), at every launch alike; 0: always pipelined copy through shared buffers; auto: init times both (1 MiB round trips) and turns single copy off if pipelined copy is clearly faster at that moment (the choice can then differ from launch to launch)",
    },
    VarSpec {
        name: "RCOMM_SHM_MEMBARRIER",
        protocol: false,
        help: "1 (default): a rank about to sleep makes a membarrier(2) barrier so that shared-memory senders need no fence per message (used where the kernel offers it); 0: a fence per message",
    },
    VarSpec {
        name: "RCOMM_SHM_CMA_MAX",
        protocol: false,
        help: "largest message (bytes, K/M/G suffixes) moved by single copy; larger ones use pipelined copy (default 4M)",
    },
    VarSpec {
        name: "RCOMM_TCP_STREAMS",
        protocol: false,
        help: "TCP connections per peer for bulk data (default 1, at most 8)",
    },
    VarSpec {
        name: "RCOMM_SOCKET_IFNAME",
        protocol: false,
        help: "network interface for TCP (and for rcomm-run's KVS when set), as NCCL_SOCKET_IFNAME: name prefixes eth,ens; ^ excludes (^lo,docker); = exact names (=eth0); default: the first non-loopback interface up with an IPv4 address, else loopback",
    },
    VarSpec {
        name: "RCOMM_IB_HCA",
        protocol: false,
        help: "which InfiniBand/RoCE HCAs a rank may choose from, as NCCL_IB_HCA: name prefixes mlx5_0,mlx5_1; ^ excludes (^mlx5_3); = exact names (=mlx5_0); a :port suffix is accepted and ignored; default: all; among those left each rank takes the nearest to its GPU (or NUMA node), see rcomm-topo",
    },
    VarSpec {
        name: "RCOMM_IB_GID_INDEX",
        protocol: false,
        help: "ib transport: GID index of the port's table to send from, 0 to 255, as NCCL_IB_GID_INDEX; default: auto (0 on InfiniBand; on RoCE the IPv4 RoCE v2 entry, as NCCL; rcomm-topo lists the tables)",
    },
    VarSpec {
        name: "RCOMM_IB_TIMEOUT",
        protocol: false,
        help: "ib transport: local ACK timeout of its queue pairs, 4.096 µs × 2^value, 1 to 31 (default 20, about 4.3 s), as NCCL_IB_TIMEOUT",
    },
    VarSpec {
        name: "RCOMM_IB_RETRY_CNT",
        protocol: false,
        help: "ib transport: retransmissions after an ACK timeout before a peer is lost, 0 to 7 (default 7), as NCCL_IB_RETRY_CNT",
    },
    VarSpec {
        name: "RCOMM_IB_SL",
        protocol: false,
        help: "ib transport: InfiniBand service level of its queue pairs, 0 to 15 (default 0), as NCCL_IB_SL",
    },
    VarSpec {
        name: "RCOMM_IB_TC",
        protocol: false,
        help: "ib transport: traffic class (RoCE: IP DSCP and ECN bits) of its packets, 0 to 255 (default 0), as NCCL_IB_TC",
    },
    VarSpec {
        name: "RCOMM_IB_QPS_PER_CONNECTION",
        protocol: false,
        help: "ib transport: queue pairs per peer connection and rail, 1 to 16 (default 1), as NCCL_IB_QPS_PER_CONNECTION; messages spread over them round-robin (MPI order is kept by sequence numbers)",
    },
    VarSpec {
        name: "RCOMM_IB_RAILS",
        protocol: false,
        help: "ib transport: HCA ports a rank stripes its traffic over, 1 to 8 (default 1: the nearest HCA); rail i of a rank pairs with rail i of its peer, as many as both have",
    },
    VarSpec {
        name: "RCOMM_NET_GDR_LEVEL",
        protocol: false,
        help: "ib transport: the farthest path between a GPU and its NIC over which the NIC reads and writes device memory directly (GPUDirect RDMA by dma-buf), as NCCL_NET_GDR_LEVEL: LOC (never), PIX, PXB (default), PHB, SYS, or NCCL's numbers 0 to 4; farther pairs stage device memory through host memory",
    },
    VarSpec {
        name: "RCOMM_P2P_LEVEL",
        protocol: false,
        help: "user: how far apart two GPUs of one node may be for direct device copies (CUDA IPC, peer copies), as NCCL_P2P_LEVEL: LOC (same GPU only), NVL (NVLink), PIX, PXB, PHB, SYS (default); farther pairs stage through host memory. Ranks sharing one GPU always copy directly unless set to 0/off",
    },
    VarSpec {
        name: "RCOMM_DEVICE",
        protocol: false,
        help: "launcher or user: the GPU of this rank, an ordinal among the GPUs this process sees; default: the device of the CUDA context current on the thread that first uses device memory, else local rank modulo the number of visible GPUs. Decided once per process and logged at INFO",
    },
    VarSpec {
        name: "RCOMM_GPU_STANDIN",
        protocol: false,
        help: "tests: 1 makes device buffers host memory behind the device interface (a stand-in of a GPU, no CUDA), so the device protocols run on machines without a GPU, one stand-in GPU shared by the node; distinct: the same, but each process's stand-in GPU has a UUID of its own (one GPU per rank, where RCOMM_GPU_BACKEND=auto picks NCCL); default 0",
    },
    VarSpec {
        name: "RCOMM_GPU_BACKEND",
        protocol: true,
        help: "who runs collectives on device buffers: auto (default: NCCL where libnccl loads on every rank and no two ranks of the communicator share a GPU, agreed at the communicator's first device collective; rcomm's own otherwise), rcomm (rcomm's own: the device executor, or staged through the host), nccl (NCCL, loaded at run time; an error, not a fall-back, where it does not load); must agree on every rank",
    },
    VarSpec {
        name: "RCOMM_NCCL_LIB",
        protocol: false,
        help: "a path of libnccl tried before libnccl.so.2 and libnccl.so (an NCCL outside the library path, or the tests' stand-in)",
    },
    VarSpec {
        name: "RCOMM_ABI_LIB",
        protocol: false,
        help: "rcomm-run: the rcomm libmpi_abi.so that C programs built against the MPI ABI load (default: the one beside rcomm-run); the ranks find it first through a job folder prepended to LD_LIBRARY_PATH",
    },
    VarSpec {
        name: "RCOMM_PTX_DIR",
        protocol: false,
        help: "a folder of precompiled device reduction kernels (rcomm-reduce-sm_XY.cubin and .ptx, written by `rcomm-bench ptx`), used when NVRTC cannot be loaded or does not know the GPU's architecture; a CUBIN is preferred over PTX",
    },
    VarSpec {
        name: "RCOMM_NVTX",
        protocol: false,
        help: "1 (default): mark each collective and each send/recv as an NVTX range for Nsight Systems when libnvToolsExt.so.1 loads (nothing happens where it does not); 0: never load it",
    },
    VarSpec {
        name: "RCOMM_TCP_TIMEOUT",
        protocol: false,
        help: "how long a TCP peer may stay silent before it is lost (TCP_USER_TIMEOUT and keepalive probes), in seconds or with ms/s suffix (default 10s, 0 = system default, minutes); catches cut links, also on idle receive-only connections",
    },
    VarSpec {
        name: "RCOMM_RESTART_COUNT",
        protocol: false,
        help: "set by rcomm-run --max-restarts: which run of the job this is (0 first, then 1, 2, …), so a program can resume from its checkpoint (World::restart_count)",
    },
    VarSpec {
        name: "RCOMM_HEARTBEAT",
        protocol: false,
        help: "liveness under rcomm-run: each process tells the launcher it is alive every INTERVAL from a thread of its own; after MISSES silent intervals the launcher declares it hung, kills it and every rank gets PeerHung. INTERVAL[,MISSES] (default 1s,5; 0 = off)",
    },
    VarSpec {
        name: "RCOMM_ALGO",
        protocol: true,
        help: "force collective algorithms, e.g. allreduce:ring,bcast:tree; must agree on every rank",
    },
    VarSpec {
        name: "RCOMM_DETERMINISTIC",
        protocol: true,
        help: "1: allreduce combines contributions in one canonical order (bitwise identical across runs, transports, progress modes, in place or not, blocking or not); 0 (default): the tuner may pick any algorithm; must agree on every rank",
    },
    VarSpec {
        name: "RCOMM_CHECK",
        protocol: true,
        help: "1: checked collectives: every collective verifies that all ranks called the same operation with the same element type, count, op and root, and a mismatch is an error naming the disagreeing ranks (CollMismatch) instead of a hang or wrong data; 0 (default): off; must agree on every rank",
    },
    VarSpec {
        name: "RCOMM_STRAGGLER",
        protocol: true,
        help: "1: record how long each blocking collective waits on every rank and print a straggler report (the ranks arriving last, mean and p99 lateness) from rank 0 at finalize; Communicator::straggler_report gives it on demand; 0 (default): off; must agree on every rank (the report is collective)",
    },
    VarSpec {
        name: "RCOMM_ASYNC_PROGRESS",
        protocol: false,
        help: "1: a background thread advances non-blocking collectives and the transports while ranks compute; 0 (default): progress happens inside rcomm calls",
    },
    VarSpec {
        name: "RCOMM_TUNE",
        protocol: false,
        help: "measure (default): measure latency, bandwidth and reduce throughput at init for the collective cost model; default: use built-in constants (rank 0's values are broadcast either way)",
    },
    VarSpec {
        name: "RCOMM_SSH",
        protocol: false,
        help: "rcomm-run: command that starts its daemon on another host, split at spaces (default ssh; --ssh overrides)",
    },
    VarSpec {
        name: "RCOMM_KERNEL_ISA",
        protocol: false,
        help: "reduction kernel instruction set: avx512, avx2, portable (default: the best the CPU has)",
    },
    VarSpec {
        name: "RCOMM_HOSTID",
        protocol: false,
        help: "overrides node identity: ranks with different values are on different nodes (no shared memory between them), like NCCL_HOSTID; for containers that share a hostname, and to run multi-node code paths on one machine",
    },
    VarSpec {
        name: "RCOMM_TOPO_FILE",
        protocol: false,
        help: "topology of this machine from a file in rcomm's form (JSON, as rcomm-topo --dump writes it) instead of detecting it; for machines whose firmware misreports, and to test placement for another machine",
    },
    VarSpec {
        name: "RCOMM_FR_SIZE",
        protocol: false,
        help: "flight recorder: how many recent operations each process keeps for the hang report, rounded up to a power of two (default 2048, 0 = off, at most 1048576)",
    },
    VarSpec {
        name: "RCOMM_TIMEOUT",
        protocol: false,
        help: "collective watchdog: a collective that makes no progress for this long fails with a timeout error and makes rcomm-run print a hang report; seconds or with ms/s suffix (default 600, 0 = off)",
    },
    VarSpec {
        name: "RCOMM_P2P_TIMEOUT",
        protocol: false,
        help: "the same watchdog for point-to-point waits (recv, send, probe, wait); seconds or with ms/s suffix (default 0 = off: a server may wait on recv forever)",
    },
    VarSpec {
        name: "RCOMM_BOOTSTRAP_TIMEOUT",
        protocol: false,
        help: "seconds any one bootstrap wait (PMI reply, fence, store connect) may take before init fails (default 120)",
    },
    VarSpec {
        name: "RCOMM_PMI",
        protocol: false,
        help: "PMI wire version on PMI_FD: auto (default: 2 under srun --mpi=pmi2, i.e. SLURM_MPI_TYPE=pmi2, else 1), 1, 2",
    },
    VarSpec {
        name: "RCOMM_STORE_PORT",
        protocol: false,
        help: "torchrun-style start: port of the store rank 0 serves on MASTER_ADDR (default MASTER_PORT + 1)",
    },
    VarSpec {
        name: "RCOMM_PARENT_KVS_ADDR",
        protocol: false,
        help: "set by a spawning rank (MPI_Comm_spawn) for the processes it starts: the store of the world joining parents and children; with RCOMM_PARENT_RANK, RCOMM_PARENT_SIZE, RCOMM_PARENT_GROUP, RCOMM_PARENT_JOB_ID and RCOMM_PARENT_SECRET_FD",
    },
    VarSpec {
        name: "RCOMM_PARENT_RANK",
        protocol: false,
        help: "set by a spawning rank: this process's rank in the world of parents and children",
    },
    VarSpec {
        name: "RCOMM_PARENT_SIZE",
        protocol: false,
        help: "set by a spawning rank: the size of the world of parents and children",
    },
    VarSpec {
        name: "RCOMM_PARENT_GROUP",
        protocol: false,
        help: "set by a spawning rank: how many parents (they hold the first ranks of the joint world)",
    },
    VarSpec {
        name: "RCOMM_PARENT_JOB_ID",
        protocol: false,
        help: "set by a spawning rank: the job id of the world of parents and children",
    },
    VarSpec {
        name: "RCOMM_PARENT_SECRET_FD",
        protocol: false,
        help: "set by a spawning rank: descriptor holding the secret of the world of parents and children",
    },
    VarSpec {
        name: "RCOMM_APPNUM",
        protocol: false,
        help: "set by a spawning rank: which of the spawned commands this process runs (MPI_APPNUM), from 0",
    },
    VarSpec {
        name: "RCOMM_STORE_SECRET",
        protocol: false,
        help: "torchrun-style start: shared secret authenticating the store; without it one is derived from MASTER_ADDR, MASTER_PORT and WORLD_SIZE (not a secret)",
    },
];

/// Collective algorithm names `RCOMM_ALGO` accepts, per operation (`auto` first): a view of
/// [`crate::algo`]'s table.
pub const ALGOS: &[(&str, &[&str])] = crate::algo::HOST_NAMES;

/// Algorithm names of the collectives on device buffers `RCOMM_ALGO` accepts: a view of
/// [`crate::algo`]'s table.
pub const DEVICE_ALGOS: &[(&str, &[&str])] = crate::algo::DEVICE_NAMES;

/// Parses `RCOMM_ALGO` (`op:algo,op:algo`) into (operation, algorithm; `None` for `auto`),
/// checking every name against [`crate::algo`]'s table.
pub fn parse_forced(v: &str) -> Result<Vec<crate::algo::Forced>, ConfigError> {
    crate::algo::parse_forced(v).map_err(|expected| ConfigError {
        name: "RCOMM_ALGO",
        value: v.to_string(),
        expected,
    })
}

/// [`parse_forced`], spelled as names (`op`, `algo`; `auto` kept).
pub fn parse_algo(v: &str) -> Result<Vec<(String, String)>, ConfigError> {
    Ok(parse_forced(v)?
        .into_iter()
        .map(|(c, a)| {
            (
                c.name().to_string(),
                crate::algo::forced_name(a).to_string(),
            )
        })
        .collect())
}

/// A parsing error, naming the variable and the accepted values.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{name}={value:?} is invalid: {expected}")]
pub struct ConfigError {
    /// Variable name.
    pub name: &'static str,
    /// Value found.
    pub value: String,
    /// What would have been accepted.
    pub expected: String,
}

/// Log verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Problems the user should know about (default).
    Warn,
    /// Decisions: bootstrap, transport choice, algorithm choice.
    Info,
    /// Everything.
    Trace,
}

/// What the launcher told this rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    /// Rank.
    pub rank: u32,
    /// World size.
    pub size: u32,
    /// Rank on this node.
    pub local_rank: u32,
    /// Ranks on this node.
    pub local_size: u32,
    /// The launcher's KVS address.
    pub kvs_addr: String,
    /// Job id.
    pub job_id: String,
    /// Descriptor holding the job secret.
    pub secret_fd: i32,
}

/// What a spawning rank hands the processes it starts (`RCOMM_PARENT_*`, `RCOMM_APPNUM`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentEnv {
    /// How to join the world of parents and children (its rank, size, store and secret).
    pub join: LaunchEnv,
    /// How many parents: they hold ranks `0..parents` of that world, the children the rest.
    pub parents: u32,
    /// Which spawned command this process runs.
    pub appnum: u32,
}

/// Which PMI wire version to speak (`RCOMM_PMI`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmiVersion {
    /// PMI-2 under Slurm's pmi2 plugin (`SLURM_MPI_TYPE=pmi2`), PMI-1 elsewhere.
    Auto,
    /// PMI-1 (line protocol).
    V1,
    /// PMI-2 (length-prefixed).
    V2,
}

/// What a PMI launcher (`mpiexec.mpich`, `srun --mpi=pmi2`) told this rank: `PMI_FD`,
/// `PMI_RANK`, `PMI_SIZE` and, from Slurm, `PMI_JOBID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmiEnv {
    /// The inherited socket to the PMI server.
    pub fd: i32,
    /// Rank.
    pub rank: u32,
    /// World size.
    pub size: u32,
    /// `PMI_JOBID` (Slurm sets it, e.g. `8.0`; PMI-2's fullinit wants it as `pmijobid`).
    pub jobid: Option<String>,
    /// The version to speak, resolved from `RCOMM_PMI` and `SLURM_MPI_TYPE`.
    pub version: PmiVersion,
    /// Who serves PMI_FD, for error messages: `Slurm (srun)` or `the PMI server (mpiexec)`.
    pub launcher: String,
}

/// A torchrun-style start: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
/// `MASTER_ADDR`, `MASTER_PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchEnv {
    /// Rank.
    pub rank: u32,
    /// World size.
    pub size: u32,
    /// Rank on this node (`LOCAL_RANK`, default: unknown → rank).
    pub local_rank: u32,
    /// Ranks on this node (`LOCAL_WORLD_SIZE`, default 1).
    pub local_size: u32,
    /// `MASTER_ADDR`.
    pub master_addr: String,
    /// `MASTER_PORT` (owned by torchrun's agent; rcomm does not bind it).
    pub master_port: u16,
    /// Port of rcomm's store on `MASTER_ADDR` (`RCOMM_STORE_PORT`, default `MASTER_PORT + 1`).
    pub store_port: u16,
    /// `RCOMM_STORE_SECRET`, if set.
    pub store_secret: Option<String>,
}

/// Transport requested by `RCOMM_TRANSPORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportChoice {
    /// Pick per peer from topology.
    Auto,
    /// Shared memory only (peers on other nodes are an error).
    Shm,
    /// TCP for every peer.
    Tcp,
    /// InfiniBand / RoCE verbs for every peer (no device is an init error).
    Ib,
}

impl TransportChoice {
    /// Every choice, with the word `RCOMM_TRANSPORT` takes for it.
    pub const ALL: [(&'static str, TransportChoice); 4] = [
        ("auto", TransportChoice::Auto),
        ("shm", TransportChoice::Shm),
        ("tcp", TransportChoice::Tcp),
        ("ib", TransportChoice::Ib),
    ];

    /// The word `RCOMM_TRANSPORT` takes for this choice (a transport's name, or `auto`).
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, c)| *c == self)
            .map_or("auto", |(n, _)| n)
    }
}

/// How the collective cost model gets its constants (`RCOMM_TUNE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TuneMode {
    /// Measure latency, bandwidth and reduce throughput at init (rank 0's values are used).
    Measure,
    /// Use the built-in constants; no measurement traffic at init.
    Default,
}

/// `RCOMM_P2P_LEVEL`: the farthest path between two GPUs over which device memory is copied
/// directly (as `NCCL_P2P_LEVEL`), nearest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum P2pLevel {
    /// Never directly, not even on one GPU (`0`, `off`): everything stages through the host.
    Off,
    /// Only ranks on the same GPU.
    Loc,
    /// GPUs joined by NVLink.
    Nvl,
    /// At most one PCIe switch between them.
    Pix,
    /// Several PCIe switches, no host bridge.
    Pxb,
    /// Through the PCIe host bridge of one CPU.
    Phb,
    /// Across CPUs (the default: any two GPUs the driver lets reach each other).
    Sys,
}

/// `RCOMM_GPU_BACKEND`: who runs collectives on device buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuBackend {
    /// NCCL where it serves the communicator (libnccl loads everywhere, a GPU per rank),
    /// rcomm's own otherwise; decided per communicator, alike on its ranks.
    Auto,
    /// rcomm's own device collectives.
    Rcomm,
    /// NCCL, loaded at run time.
    Nccl,
}

impl GpuBackend {
    /// The name `RCOMM_GPU_BACKEND` takes.
    pub fn name(self) -> &'static str {
        match self {
            GpuBackend::Auto => "auto",
            GpuBackend::Rcomm => "rcomm",
            GpuBackend::Nccl => "nccl",
        }
    }
}

/// The InfiniBand/RoCE settings (`RCOMM_IB_*`, `RCOMM_NET_GDR_LEVEL`), read for the `ib`
/// transport (P13), which does not use them yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbSettings {
    /// `RCOMM_IB_GID_INDEX`; `None`: chosen from the GID table (`ib::gid_index_auto`).
    pub gid_index: Option<u8>,
    /// `RCOMM_IB_TIMEOUT`: ACK timeout code, 4.096 µs · 2^t.
    pub timeout: u8,
    /// `RCOMM_IB_RETRY_CNT`.
    pub retry_cnt: u8,
    /// `RCOMM_IB_SL`.
    pub sl: u8,
    /// `RCOMM_IB_TC`.
    pub tc: u8,
    /// `RCOMM_IB_QPS_PER_CONNECTION`.
    pub qps_per_connection: u32,
    /// `RCOMM_IB_RAILS`: HCA ports a rank stripes over.
    pub rails: u32,
    /// `RCOMM_NET_GDR_LEVEL`: the farthest GPU–NIC path for GPUDirect RDMA (`Loc`: never).
    pub gdr_level: P2pLevel,
}

impl Default for IbSettings {
    /// NCCL's defaults.
    fn default() -> Self {
        Self {
            gid_index: None,
            timeout: 20,
            retry_cnt: 7,
            sl: 0,
            tc: 0,
            qps_per_connection: 1,
            rails: 1,
            gdr_level: P2pLevel::Pxb,
        }
    }
}

impl IbSettings {
    /// From the environment, with range checks naming the variable.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let d = Self::default();
        let ranged = |name: &'static str, lo: u32, hi: u32| -> Result<Option<u32>, ConfigError> {
            get(env, name)
                .map(|v| {
                    v.trim()
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (lo..=hi).contains(n))
                        .ok_or_else(|| ConfigError {
                            name,
                            value: v.clone(),
                            expected: format!("an integer from {lo} to {hi}"),
                        })
                })
                .transpose()
        };
        let byte = |name, lo, hi, default: u8| -> Result<u8, ConfigError> {
            Ok(ranged(name, lo, hi)?.map_or(default, |n| n as u8))
        };
        Ok(Self {
            gid_index: ranged("RCOMM_IB_GID_INDEX", 0, 255)?.map(|n| n as u8),
            timeout: byte("RCOMM_IB_TIMEOUT", 1, 31, d.timeout)?,
            retry_cnt: byte("RCOMM_IB_RETRY_CNT", 0, 7, d.retry_cnt)?,
            sl: byte("RCOMM_IB_SL", 0, 15, d.sl)?,
            tc: byte("RCOMM_IB_TC", 0, 255, d.tc)?,
            qps_per_connection: ranged("RCOMM_IB_QPS_PER_CONNECTION", 1, 16)?
                .unwrap_or(d.qps_per_connection),
            rails: ranged("RCOMM_IB_RAILS", 1, 8)?.unwrap_or(d.rails),
            gdr_level: choice(
                env,
                "RCOMM_NET_GDR_LEVEL",
                d.gdr_level,
                &[
                    ("loc", P2pLevel::Loc),
                    ("pix", P2pLevel::Pix),
                    ("pxb", P2pLevel::Pxb),
                    ("phb", P2pLevel::Phb),
                    ("sys", P2pLevel::Sys),
                    ("0", P2pLevel::Loc),
                    ("1", P2pLevel::Pix),
                    ("2", P2pLevel::Pxb),
                    ("3", P2pLevel::Phb),
                    ("4", P2pLevel::Sys),
                ],
            )?,
        })
    }
}

/// The InfiniBand settings of the process configuration (NCCL's defaults when it does not
/// parse: init reports that error).
pub fn ib_settings() -> IbSettings {
    global()
        .as_ref()
        .map_or_else(|_| IbSettings::default(), |c| c.ib)
}

/// Every setting rcomm takes from the environment, parsed once.
#[derive(Debug, Clone)]
pub struct Config {
    /// Log level.
    pub debug: Level,
    /// Subsystems to log; `None` means all.
    pub debug_subsys: Option<Vec<String>>,
    /// Transport choice.
    pub transport: TransportChoice,
    /// Whether single copy may be used on shared memory.
    pub shm_cma: bool,
    /// `RCOMM_SHM_MEMBARRIER`: sleeping ranks make the wake-up barrier (senders need no fence).
    pub shm_membarrier: bool,
    /// Largest message moved by single copy.
    pub shm_cma_max: usize,
    /// `RCOMM_SHM_CMA=auto` (so single copy is on) and no `RCOMM_SHM_CMA_MAX`: init times single
    /// copy against pipelined copy and may turn single copy off. Off by default: a choice made from one timing at init differs between launches
    /// on a machine whose speed changes (a VM's cores moving between host cores), and a job's
    /// protocol must not be a coin toss.
    pub shm_cma_probe: bool,
    /// TCP streams per peer.
    pub tcp_streams: usize,
    /// `RCOMM_SOCKET_IFNAME`: which interface TCP binds to; `None` = the default rule.
    pub socket_ifname: Option<crate::ifaddr::IfSpec>,
    /// `RCOMM_IB_HCA`: which HCAs the device choice may use; `None` = all.
    pub ib_hca: Option<crate::ifaddr::IfSpec>,
    /// `RCOMM_IB_*` and `RCOMM_NET_GDR_LEVEL`.
    pub ib: IbSettings,
    /// `RCOMM_TCP_TIMEOUT` in milliseconds (0 = the system's).
    pub tcp_timeout_ms: u32,
    /// `RCOMM_P2P_LEVEL`: how far apart GPUs may be for direct copies.
    pub p2p_level: P2pLevel,
    /// `RCOMM_GPU_STANDIN`: device buffers are host memory behind the device interface (tests).
    pub gpu_standin: bool,
    /// `RCOMM_GPU_STANDIN=distinct`: the stand-in GPU of each process has a UUID of its own.
    pub gpu_standin_distinct: bool,
    /// `RCOMM_DEVICE`: the GPU of this rank, if the launcher or the user chose one.
    pub device: Option<u32>,
    /// `RCOMM_GPU_BACKEND`: who runs device collectives (checked equal on every rank: NCCL's
    /// collectives and rcomm's do not talk to each other).
    pub gpu_backend: GpuBackend,
    /// `RCOMM_NVTX`: NVTX ranges where the library loads.
    pub nvtx: bool,
    /// `RCOMM_HEARTBEAT`: interval and misses; `None` when off.
    pub heartbeat: Option<Heartbeat>,
    /// `RCOMM_RESTART_COUNT` (0 when unset).
    pub restart_count: u32,
    /// Forced collective algorithms, (op, algo) as named ([`Config::forced_algos`] reads them
    /// as the registry's values).
    pub algo: Vec<(String, String)>,
    /// Forced kernel instruction set, as given.
    pub kernel_isa: Option<String>,
    /// `RCOMM_DETERMINISTIC`: reductions combine in one canonical order (checked equal on every
    /// rank, since it changes which algorithms the tuner may pick).
    pub deterministic: bool,
    /// `RCOMM_CHECK`: collectives verify that every rank makes the same call (checked equal on
    /// every rank: checked collectives exchange signatures the unchecked ones do not expect).
    pub check: bool,
    /// `RCOMM_STRAGGLER`: per-rank collective wait statistics, reported at finalize (checked
    /// equal on every rank: the report is a collective).
    pub straggler: bool,
    /// `RCOMM_ASYNC_PROGRESS`: progress communication from a background thread.
    pub async_progress: bool,
    /// `RCOMM_TUNE`: where the collective cost model's constants come from.
    pub tune: TuneMode,
    /// `RCOMM_HOSTID`: a node identity override (part of what makes two ranks one node).
    pub host_id: Option<String>,
    /// `RCOMM_SSH`: how `rcomm-run` reaches other hosts (`None`: plain `ssh`).
    pub ssh: Option<String>,
    /// Present when started by `rcomm-run` (or a daemon of it).
    pub launch: Option<LaunchEnv>,
    /// Started by a spawning rank: how to join the parents.
    pub parent: Option<ParentEnv>,
    /// Present when `PMI_FD`, `PMI_RANK` and `PMI_SIZE` are set (hydra, Slurm).
    pub pmi: Option<PmiEnv>,
    /// Present when `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` are set.
    pub torch: Option<TorchEnv>,
    /// `RCOMM_BOOTSTRAP_TIMEOUT`: the longest any one bootstrap wait may take.
    pub bootstrap_timeout: std::time::Duration,
    /// `RCOMM_FR_SIZE`: operations the flight recorder keeps (0 = off).
    pub fr_size: usize,
    /// `RCOMM_TIMEOUT`: the collective no-progress watchdog (`None` = off).
    pub coll_timeout: Option<std::time::Duration>,
    /// `RCOMM_P2P_TIMEOUT`: the point-to-point no-progress watchdog (`None` = off).
    pub p2p_timeout: Option<std::time::Duration>,
    /// `RCOMM_*` names found in the environment that rcomm does not know (likely typos).
    pub unknown: Vec<String>,
}

fn get(env: &BTreeMap<String, String>, name: &str) -> Option<String> {
    env.get(name).filter(|v| !v.is_empty()).cloned()
}

fn parse_u32(
    env: &BTreeMap<String, String>,
    name: &'static str,
) -> Result<Option<u32>, ConfigError> {
    get(env, name)
        .map(|v| {
            v.trim().parse::<u32>().map_err(|_| ConfigError {
                name,
                value: v.clone(),
                expected: "a non-negative integer".into(),
            })
        })
        .transpose()
}

/// Parses a byte size with an optional K/M/G suffix (powers of 1024).
pub fn parse_size_str(v: &str) -> Option<usize> {
    let v = v.trim();
    let (num, mul) = match v.as_bytes().last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 1usize << 10),
        b'm' | b'M' => (&v[..v.len() - 1], 1 << 20),
        b'g' | b'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.trim().parse::<usize>().ok()?.checked_mul(mul)
}

/// `RCOMM_GPU_STANDIN` of the process configuration (false when it does not parse: init
/// reports that error).
pub fn gpu_standin() -> bool {
    global().as_ref().is_ok_and(|c| c.gpu_standin)
}

/// `RCOMM_GPU_STANDIN=distinct` of the process configuration.
pub fn gpu_standin_distinct() -> bool {
    global().as_ref().is_ok_and(|c| c.gpu_standin_distinct)
}

/// `RCOMM_DEVICE` of the process configuration (`None` when unset or when it does not parse:
/// init reports that error).
pub fn gpu_device() -> Option<u32> {
    global().as_ref().ok().and_then(|c| c.device)
}

/// This process's rank among the ranks of its node, as its launcher said (`rcomm-run`'s
/// `RCOMM_LOCAL_RANK`, torchrun's `LOCAL_RANK`); `None` without a launcher.
pub fn local_rank() -> Option<u32> {
    let c = global().as_ref().ok()?;
    c.launch
        .as_ref()
        .map(|l| l.local_rank)
        .or_else(|| c.torch.as_ref().map(|t| t.local_rank))
}

/// The GPU a rank takes when neither `RCOMM_DEVICE` nor a current context names one: ranks of
/// a node spread round the GPUs they see, as launchers that bind one GPU per rank do, so two
/// ranks share a GPU only when there are more ranks than GPUs. `None` when no GPU is visible.
pub fn device_for_local_rank(local_rank: u32, visible: u32) -> Option<u32> {
    (visible > 0).then(|| local_rank % visible)
}

/// `RCOMM_GPU_BACKEND` of the process configuration (rcomm's own when it does not parse: init
/// reports that error).
pub fn gpu_backend() -> GpuBackend {
    global()
        .as_ref()
        .map_or(GpuBackend::Rcomm, |c| c.gpu_backend)
}

/// `RCOMM_NCCL_LIB` from the process environment. Read on each call, not kept in [`Config`]:
/// it is read once, where libnccl is first loaded.
pub fn nccl_lib() -> Option<std::path::PathBuf> {
    std::env::var_os("RCOMM_NCCL_LIB")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
}

/// `RCOMM_ABI_LIB` from the process environment (rcomm-run reads it once per job).
pub fn abi_lib() -> Option<std::path::PathBuf> {
    std::env::var_os("RCOMM_ABI_LIB")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
}

/// `RCOMM_NVTX` of the process configuration (off when it does not parse: nothing is loaded
/// on behalf of a configuration init will refuse).
pub fn nvtx() -> bool {
    global().as_ref().is_ok_and(|c| c.nvtx)
}

/// `RCOMM_P2P_LEVEL` of the process configuration (the default when it does not parse).
pub fn p2p_level() -> P2pLevel {
    global().as_ref().map_or(P2pLevel::Sys, |c| c.p2p_level)
}

/// `RCOMM_TOPO_FILE` from the process environment. Read on each call, not kept in [`Config`]:
/// tools (`rcomm-topo`, the launcher) detect topology without a parsed configuration.
pub fn topo_file() -> Option<std::path::PathBuf> {
    std::env::var_os("RCOMM_TOPO_FILE")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
}

/// `RCOMM_PTX_DIR` from the process environment. Read on each call, not kept in [`Config`]:
/// it is read once per architecture, only where NVRTC cannot build a CUBIN for the GPU.
pub fn ptx_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("RCOMM_PTX_DIR")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
}

/// Liveness settings (`RCOMM_HEARTBEAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// How often a process says it is alive.
    pub interval_ms: u32,
    /// Silent intervals after which the launcher declares it hung.
    pub misses: u32,
}

impl Heartbeat {
    /// The default: every second, hung after 5 silent seconds.
    pub const DEFAULT: Self = Self {
        interval_ms: 1000,
        misses: 5,
    };

    /// Silence after which a process is declared hung.
    pub fn limit(&self) -> std::time::Duration {
        std::time::Duration::from_millis(u64::from(self.interval_ms) * u64::from(self.misses))
    }

    /// Parses `INTERVAL[,MISSES]`; `0` is off (`Ok(None)`).
    pub fn parse(v: &str) -> Option<Option<Self>> {
        let (i, m) = match v.split_once(',') {
            Some((i, m)) => (i, Some(m)),
            None => (v, None),
        };
        let interval_ms = parse_duration_ms(i)?;
        if interval_ms == 0 {
            return Some(None);
        }
        let misses = match m {
            Some(m) => m
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|&m| (1..=1000).contains(&m))?,
            None => Self::DEFAULT.misses,
        };
        Some(Some(Self {
            interval_ms,
            misses,
        }))
    }

    /// From the environment (`RCOMM_HEARTBEAT`), the default when unset.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<Option<Self>, ConfigError> {
        match get(env, "RCOMM_HEARTBEAT") {
            None => Ok(Some(Self::DEFAULT)),
            Some(v) => Self::parse(&v).ok_or_else(|| ConfigError {
                name: "RCOMM_HEARTBEAT",
                value: v.clone(),
                expected: "INTERVAL[,MISSES] like 1s,5 or 500ms,10 (MISSES 1 to 1000); 0 = off"
                    .into(),
            }),
        }
    }
}

/// Parses a duration in seconds (`10`, `2.5`, `2.5s`) or milliseconds (`500ms`) into
/// milliseconds, at most one hour (longer is surely a unit mistake).
pub fn parse_duration_ms(v: &str) -> Option<u32> {
    let v = v.trim();
    let (num, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000.0)
    } else {
        (v, 1000.0)
    };
    let x: f64 = num.trim().parse().ok()?;
    let ms = (x * scale).round();
    (x.is_finite() && (0.0..=3_600_000.0).contains(&ms)).then_some(ms as u32)
}

fn parse_size(
    env: &BTreeMap<String, String>,
    name: &'static str,
) -> Result<Option<usize>, ConfigError> {
    get(env, name)
        .map(|v| {
            parse_size_str(&v).ok_or_else(|| ConfigError {
                name,
                value: v.clone(),
                expected: "a byte count like 65536, 64K or 4M".into(),
            })
        })
        .transpose()
}

fn choice<T: Copy>(
    env: &BTreeMap<String, String>,
    name: &'static str,
    default: T,
    table: &[(&str, T)],
) -> Result<T, ConfigError> {
    let Some(v) = get(env, name) else {
        return Ok(default);
    };
    table
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(v.trim()))
        .map(|&(_, t)| t)
        .ok_or_else(|| ConfigError {
            name,
            value: v,
            expected: format!(
                "one of {}",
                table.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
            ),
        })
}

/// A boolean variable: `1`/`on` or `0`/`off` (empty or unset: `default`).
fn flag(
    env: &BTreeMap<String, String>,
    name: &'static str,
    default: bool,
) -> Result<bool, ConfigError> {
    choice(
        env,
        name,
        default,
        &[("1", true), ("0", false), ("on", true), ("off", false)],
    )
}

/// `PMI_FD` + `PMI_RANK` + `PMI_SIZE` (all three, or the PMI start is not usable).
/// The spawned process's way to its parents: all of `RCOMM_PARENT_*` or none, consistent with
/// one another and with the process's own world (which `rcomm`'s variables describe).
fn parse_parent(
    env: &BTreeMap<String, String>,
    launch: Option<&LaunchEnv>,
) -> Result<Option<ParentEnv>, ConfigError> {
    let Some(kvs_addr) = get(env, "RCOMM_PARENT_KVS_ADDR") else {
        return Ok(None);
    };
    let missing = |name: &'static str| ConfigError {
        name,
        value: String::new(),
        expected: "to be set by the spawning rank together with RCOMM_PARENT_KVS_ADDR".into(),
    };
    let need = |name: &'static str| -> Result<u32, ConfigError> {
        parse_u32(env, name)?.ok_or_else(|| missing(name))
    };
    let (rank, size, parents) = (
        need("RCOMM_PARENT_RANK")?,
        need("RCOMM_PARENT_SIZE")?,
        need("RCOMM_PARENT_GROUP")?,
    );
    let children = launch.map_or(1, |l| l.size);
    if parents == 0 || parents.checked_add(children) != Some(size) || rank < parents || rank >= size
    {
        return Err(ConfigError {
            name: "RCOMM_PARENT_RANK",
            value: format!("{rank} (size {size}, {parents} parents)"),
            expected: format!(
                "a rank among the last {children} of the joint world, after at least one parent"
            ),
        });
    }
    Ok(Some(ParentEnv {
        join: LaunchEnv {
            rank,
            size,
            local_rank: rank,
            local_size: size,
            kvs_addr,
            job_id: get(env, "RCOMM_PARENT_JOB_ID")
                .ok_or_else(|| missing("RCOMM_PARENT_JOB_ID"))?,
            secret_fd: need("RCOMM_PARENT_SECRET_FD")? as i32,
        },
        parents,
        appnum: parse_u32(env, "RCOMM_APPNUM")?.unwrap_or(0),
    }))
}

fn parse_pmi(env: &BTreeMap<String, String>) -> Result<Option<PmiEnv>, ConfigError> {
    let Some(fd) = parse_u32(env, "PMI_FD")? else {
        return Ok(None);
    };
    let expected = |what: &str| ConfigError {
        name: "PMI_FD",
        value: fd.to_string(),
        expected: format!("PMI_RANK and PMI_SIZE to be set with it by the launcher ({what})"),
    };
    let (Some(rank), Some(size)) = (parse_u32(env, "PMI_RANK")?, parse_u32(env, "PMI_SIZE")?)
    else {
        return Err(expected("one is missing"));
    };
    if size == 0 || rank >= size {
        return Err(ConfigError {
            name: "PMI_RANK",
            value: rank.to_string(),
            expected: format!("a rank below PMI_SIZE={size}"),
        });
    }
    let slurm_pmi2 = get(env, "SLURM_MPI_TYPE").is_some_and(|t| t.trim() == "pmi2");
    let version = match choice(
        env,
        "RCOMM_PMI",
        PmiVersion::Auto,
        &[
            ("auto", PmiVersion::Auto),
            ("1", PmiVersion::V1),
            ("2", PmiVersion::V2),
        ],
    )? {
        PmiVersion::Auto if slurm_pmi2 => PmiVersion::V2,
        PmiVersion::Auto => PmiVersion::V1,
        v => v,
    };
    let launcher = if get(env, "SLURM_JOB_ID").is_some() || get(env, "SLURM_STEP_ID").is_some() {
        "Slurm (srun)"
    } else {
        "the PMI server (mpiexec)"
    };
    Ok(Some(PmiEnv {
        fd: fd as i32,
        rank,
        size,
        jobid: get(env, "PMI_JOBID"),
        version,
        launcher: launcher.into(),
    }))
}

/// torchrun's variables; only when `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` are all
/// set (`RANK` alone is too common a name to mean anything).
fn parse_torch(env: &BTreeMap<String, String>) -> Result<Option<TorchEnv>, ConfigError> {
    let (Some(master_addr), Some(_)) = (get(env, "MASTER_ADDR"), get(env, "MASTER_PORT")) else {
        return Ok(None);
    };
    let (Some(rank), Some(size)) = (parse_u32(env, "RANK")?, parse_u32(env, "WORLD_SIZE")?) else {
        return Ok(None);
    };
    if size == 0 || rank >= size {
        return Err(ConfigError {
            name: "RANK",
            value: rank.to_string(),
            expected: format!("a rank below WORLD_SIZE={size}"),
        });
    }
    let port = |name: &'static str| -> Result<Option<u16>, ConfigError> {
        get(env, name)
            .map(|v| {
                v.trim()
                    .parse::<u16>()
                    .ok()
                    .filter(|&p| p != 0)
                    .ok_or_else(|| ConfigError {
                        name,
                        value: v.clone(),
                        expected: "a TCP port, 1 to 65535".into(),
                    })
            })
            .transpose()
    };
    let master_port = port("MASTER_PORT")?.unwrap_or(0);
    let store_port = match port("RCOMM_STORE_PORT")? {
        Some(p) => p,
        None => master_port.checked_add(1).ok_or_else(|| ConfigError {
            name: "MASTER_PORT",
            value: master_port.to_string(),
            expected:
                "below 65535 (the store defaults to MASTER_PORT + 1), or set RCOMM_STORE_PORT"
                    .into(),
        })?,
    };
    Ok(Some(TorchEnv {
        rank,
        size,
        local_rank: parse_u32(env, "LOCAL_RANK")?.unwrap_or(rank),
        local_size: parse_u32(env, "LOCAL_WORLD_SIZE")?.unwrap_or(1),
        master_addr,
        master_port,
        store_port,
        store_secret: get(env, "RCOMM_STORE_SECRET"),
    }))
}

impl Config {
    /// [`algo`](Self::algo) as (operation, algorithm; `None` for `auto`); names the registry
    /// does not know are left out.
    pub fn forced_algos(&self) -> Vec<crate::algo::Forced> {
        self.algo
            .iter()
            .filter_map(|(o, a)| {
                let coll = crate::algo::Coll::from_name(o)?;
                if a == crate::algo::AUTO {
                    return Some((coll, None));
                }
                Some((coll, Some(crate::algo::Algo::from_name(a)?)))
            })
            .collect()
    }

    /// Parses the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_map(&std::env::vars().collect())
    }

    /// Parses a given environment (tests use this).
    pub fn from_map(env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let debug = choice(
            env,
            "RCOMM_DEBUG",
            Level::Warn,
            &[
                ("WARN", Level::Warn),
                ("INFO", Level::Info),
                ("TRACE", Level::Trace),
            ],
        )?;
        let debug_subsys = get(env, "RCOMM_DEBUG_SUBSYS").map(|v| {
            v.split(',')
                .map(|s| s.trim().to_ascii_uppercase())
                .filter(|s| !s.is_empty())
                .collect()
        });
        let transport = choice(
            env,
            "RCOMM_TRANSPORT",
            TransportChoice::Auto,
            &TransportChoice::ALL,
        )?;
        let (shm_cma, shm_cma_probe) = choice(
            env,
            "RCOMM_SHM_CMA",
            (true, false),
            &[
                ("1", (true, false)),
                ("on", (true, false)),
                ("0", (false, false)),
                ("off", (false, false)),
                ("auto", (true, true)),
            ],
        )?;
        let (gpu_standin, gpu_standin_distinct) = choice(
            env,
            "RCOMM_GPU_STANDIN",
            (false, false),
            &[
                ("1", (true, false)),
                ("0", (false, false)),
                ("on", (true, false)),
                ("off", (false, false)),
                ("distinct", (true, true)),
            ],
        )?;
        let gpu_backend = choice(
            env,
            "RCOMM_GPU_BACKEND",
            GpuBackend::Auto,
            &[
                ("auto", GpuBackend::Auto),
                ("rcomm", GpuBackend::Rcomm),
                ("nccl", GpuBackend::Nccl),
            ],
        )?;
        let nvtx = flag(env, "RCOMM_NVTX", true)?;
        let p2p_level = choice(
            env,
            "RCOMM_P2P_LEVEL",
            P2pLevel::Sys,
            &[
                ("0", P2pLevel::Off),
                ("off", P2pLevel::Off),
                ("loc", P2pLevel::Loc),
                ("nvl", P2pLevel::Nvl),
                ("pix", P2pLevel::Pix),
                ("pxb", P2pLevel::Pxb),
                ("phb", P2pLevel::Phb),
                ("sys", P2pLevel::Sys),
            ],
        )?;
        let shm_membarrier = flag(env, "RCOMM_SHM_MEMBARRIER", true)?;
        let deterministic = flag(env, "RCOMM_DETERMINISTIC", false)?;
        let async_progress = flag(env, "RCOMM_ASYNC_PROGRESS", false)?;
        let check = flag(env, "RCOMM_CHECK", false)?;
        let straggler = flag(env, "RCOMM_STRAGGLER", false)?;
        let tune = choice(
            env,
            "RCOMM_TUNE",
            TuneMode::Measure,
            &[
                ("measure", TuneMode::Measure),
                ("default", TuneMode::Default),
            ],
        )?;
        let shm_cma_max = parse_size(env, "RCOMM_SHM_CMA_MAX")?.unwrap_or(4 << 20);
        // A size limit set by the user is a choice the probe must not override.
        let shm_cma_probe = shm_cma_probe && get(env, "RCOMM_SHM_CMA_MAX").is_none();
        let tcp_streams = parse_u32(env, "RCOMM_TCP_STREAMS")?.unwrap_or(1) as usize;
        if !(1..=8).contains(&tcp_streams) {
            return Err(ConfigError {
                name: "RCOMM_TCP_STREAMS",
                value: tcp_streams.to_string(),
                expected: "1 to 8".into(),
            });
        }
        let socket_ifname = get(env, "RCOMM_SOCKET_IFNAME")
            .map(|v| {
                crate::ifaddr::IfSpec::parse(&v).ok_or_else(|| ConfigError {
                    name: "RCOMM_SOCKET_IFNAME",
                    value: v.clone(),
                    expected: "interface name prefixes like eth,ens; ^ to exclude (^lo,docker); = for exact names (=eth0)".into(),
                })
            })
            .transpose()?;
        let ib_hca = get(env, "RCOMM_IB_HCA")
            .map(|v| {
                crate::ifaddr::IfSpec::parse(&v).ok_or_else(|| ConfigError {
                    name: "RCOMM_IB_HCA",
                    value: v.clone(),
                    expected: "HCA name prefixes like mlx5_0,mlx5_1; ^ to exclude (^mlx5_3); = for exact names (=mlx5_0)".into(),
                })
            })
            .transpose()?;
        let tcp_timeout_ms = get(env, "RCOMM_TCP_TIMEOUT")
            .map(|v| {
                parse_duration_ms(&v).ok_or_else(|| ConfigError {
                    name: "RCOMM_TCP_TIMEOUT",
                    value: v.clone(),
                    expected:
                        "a duration like 10, 2.5s or 500ms (0 = system default), at most 1 hour"
                            .into(),
                })
            })
            .transpose()?
            .unwrap_or(10_000);
        let launch = match (parse_u32(env, "RCOMM_RANK")?, parse_u32(env, "RCOMM_SIZE")?) {
            (Some(rank), Some(size)) => {
                let missing = |name: &'static str| ConfigError {
                    name,
                    value: String::new(),
                    expected: "to be set by the launcher together with RCOMM_RANK and RCOMM_SIZE"
                        .into(),
                };
                if size == 0 || rank >= size {
                    return Err(ConfigError {
                        name: "RCOMM_RANK",
                        value: rank.to_string(),
                        expected: format!("a rank below RCOMM_SIZE={size}"),
                    });
                }
                let secret_fd =
                    parse_u32(env, "RCOMM_SECRET_FD")?.ok_or_else(|| missing("RCOMM_SECRET_FD"))?;
                Some(LaunchEnv {
                    rank,
                    size,
                    local_rank: parse_u32(env, "RCOMM_LOCAL_RANK")?.unwrap_or(0),
                    local_size: parse_u32(env, "RCOMM_LOCAL_SIZE")?.unwrap_or(1),
                    kvs_addr: get(env, "RCOMM_KVS_ADDR")
                        .ok_or_else(|| missing("RCOMM_KVS_ADDR"))?,
                    job_id: get(env, "RCOMM_JOB_ID").ok_or_else(|| missing("RCOMM_JOB_ID"))?,
                    secret_fd: secret_fd as i32,
                })
            }
            (None, None) => None,
            (r, _) => {
                return Err(ConfigError {
                    name: if r.is_some() {
                        "RCOMM_SIZE"
                    } else {
                        "RCOMM_RANK"
                    },
                    value: String::new(),
                    expected: "RCOMM_RANK and RCOMM_SIZE to be set together (by rcomm-run)".into(),
                });
            }
        };
        let parent = parse_parent(env, launch.as_ref())?;
        let pmi = parse_pmi(env)?;
        let torch = parse_torch(env)?;
        let bootstrap_timeout = std::time::Duration::from_secs(
            parse_u32(env, "RCOMM_BOOTSTRAP_TIMEOUT")?
                .unwrap_or(120)
                .max(1) as u64,
        );
        let fr_size = parse_u32(env, "RCOMM_FR_SIZE")?.unwrap_or(2048) as usize;
        if fr_size > 1 << 20 {
            return Err(ConfigError {
                name: "RCOMM_FR_SIZE",
                value: fr_size.to_string(),
                expected: "0 (off) to 1048576 operations".into(),
            });
        }
        let watchdog = |name: &'static str, default_ms: u32| -> Result<_, ConfigError> {
            let ms = get(env, name)
                .map(|v| {
                    parse_duration_ms(&v).ok_or_else(|| ConfigError {
                        name,
                        value: v.clone(),
                        expected: "a duration like 600, 2.5s or 500ms (0 = off), at most 1 hour"
                            .into(),
                    })
                })
                .transpose()?
                .unwrap_or(default_ms);
            Ok((ms > 0).then(|| std::time::Duration::from_millis(u64::from(ms))))
        };
        let coll_timeout = watchdog("RCOMM_TIMEOUT", 600_000)?;
        let p2p_timeout = watchdog("RCOMM_P2P_TIMEOUT", 0)?;
        let unknown = env
            .keys()
            .filter(|k| k.starts_with("RCOMM_") && !VARIABLES.iter().any(|v| v.name == k.as_str()))
            .cloned()
            .collect();
        let algo = get(env, "RCOMM_ALGO")
            .map(|v| parse_algo(&v))
            .transpose()?
            .unwrap_or_default();
        let kernel_isa = get(env, "RCOMM_KERNEL_ISA").map(|v| v.trim().to_ascii_lowercase());
        if let Some(isa) = &kernel_isa
            && !["avx512", "avx2", "portable"].contains(&isa.as_str())
        {
            return Err(ConfigError {
                name: "RCOMM_KERNEL_ISA",
                value: isa.clone(),
                expected: "one of avx512, avx2, portable".into(),
            });
        }
        Ok(Self {
            debug,
            debug_subsys,
            transport,
            shm_cma,
            shm_membarrier,
            shm_cma_max,
            shm_cma_probe,
            tcp_streams,
            socket_ifname,
            ib_hca,
            ib: IbSettings::from_env(env)?,
            tcp_timeout_ms,
            p2p_level,
            gpu_standin,
            gpu_standin_distinct,
            device: parse_u32(env, "RCOMM_DEVICE")?,
            gpu_backend,
            nvtx,
            heartbeat: Heartbeat::from_env(env)?,
            restart_count: parse_u32(env, "RCOMM_RESTART_COUNT")?.unwrap_or(0),
            algo,
            kernel_isa,
            deterministic,
            check,
            straggler,
            async_progress,
            tune,
            host_id: get(env, "RCOMM_HOSTID").filter(|v| !v.trim().is_empty()),
            ssh: get(env, "RCOMM_SSH"),
            launch,
            parent,
            pmi,
            torch,
            bootstrap_timeout,
            fr_size,
            coll_timeout,
            p2p_timeout,
            unknown,
        })
    }

    /// The protocol-relevant settings as (name, value) pairs, in [`VARIABLES`] order; these must
    /// be equal on every rank.
    pub fn protocol_settings(&self) -> Vec<(String, String)> {
        let transport = self.transport.name();
        let algo: Vec<String> = self.algo.iter().map(|(o, a)| format!("{o}:{a}")).collect();
        vec![
            ("RCOMM_TRANSPORT".to_string(), transport.to_string()),
            ("RCOMM_ALGO".to_string(), algo.join(",")),
            (
                "RCOMM_DETERMINISTIC".to_string(),
                u8::from(self.deterministic).to_string(),
            ),
            ("RCOMM_CHECK".to_string(), u8::from(self.check).to_string()),
            (
                "RCOMM_STRAGGLER".to_string(),
                u8::from(self.straggler).to_string(),
            ),
            (
                "RCOMM_GPU_BACKEND".to_string(),
                self.gpu_backend.name().to_string(),
            ),
        ]
    }

    /// Whether a message at `level` for `subsys` should be logged.
    pub fn logs(&self, level: Level, subsys: &str) -> bool {
        level <= self.debug
            && self
                .debug_subsys
                .as_ref()
                .is_none_or(|l| l.iter().any(|s| s == subsys))
    }
}

/// The process-wide configuration, parsed on first use. A parse error is kept and returned by
/// `rcomm::init`; logging falls back to defaults so it can still report it.
pub fn global() -> &'static Result<Config, ConfigError> {
    static CFG: OnceLock<Result<Config, ConfigError>> = OnceLock::new();
    CFG.get_or_init(Config::from_env)
}

/// Logs a line to stderr if `RCOMM_DEBUG`/`RCOMM_DEBUG_SUBSYS` allow it.
#[doc(hidden)]
pub fn log_line(level: Level, subsys: &str, msg: std::fmt::Arguments<'_>) {
    let on = match global() {
        Ok(c) => c.logs(level, subsys),
        Err(_) => level == Level::Warn,
    };
    if on {
        let host = crate::os::hostname();
        let rank = std::env::var("RCOMM_RANK").unwrap_or_else(|_| "-".into());
        eprintln!(
            "{host}:{}:{rank} rcomm {level:?} {subsys} {msg}",
            std::process::id()
        );
    }
}

/// `rlog!(Info, "INIT", "format {}", args)` logs through [`log_line`].
#[macro_export]
macro_rules! rlog {
    ($lvl:ident, $sub:expr, $($arg:tt)*) => {
        $crate::config::log_line($crate::config::Level::$lvl, $sub, format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn defaults_without_variables() {
        let c = Config::from_map(&env(&[])).unwrap();
        assert_eq!(
            (c.debug, c.transport, c.launch.is_none()),
            (Level::Warn, TransportChoice::Auto, true)
        );
    }

    #[test]
    fn bad_values_name_the_variable_and_the_choices() {
        let e = Config::from_map(&env(&[("RCOMM_TRANSPORT", "ib0")])).unwrap_err();
        assert_eq!(e.name, "RCOMM_TRANSPORT");
        assert!(e.to_string().contains("auto, shm, tcp"), "{e}");
        let e = Config::from_map(&env(&[("RCOMM_RANK", "4"), ("RCOMM_SIZE", "4")])).unwrap_err();
        assert_eq!(e.name, "RCOMM_RANK");
        let e = Config::from_map(&env(&[("RCOMM_RANK", "0")])).unwrap_err();
        assert_eq!(e.name, "RCOMM_SIZE");
    }

    #[test]
    fn a_spawned_process_reads_its_parents_and_refuses_inconsistent_ranks() {
        let child = [
            ("RCOMM_RANK", "1"),
            ("RCOMM_SIZE", "3"),
            ("RCOMM_KVS_ADDR", "127.0.0.1:1"),
            ("RCOMM_JOB_ID", "j"),
            ("RCOMM_SECRET_FD", "3"),
            ("RCOMM_PARENT_KVS_ADDR", "127.0.0.1:2"),
            ("RCOMM_PARENT_RANK", "3"),
            ("RCOMM_PARENT_SIZE", "5"),
            ("RCOMM_PARENT_GROUP", "2"),
            ("RCOMM_PARENT_JOB_ID", "jj"),
            ("RCOMM_PARENT_SECRET_FD", "4"),
            ("RCOMM_APPNUM", "1"),
        ];
        let c = Config::from_map(&env(&child)).unwrap();
        let p = c.parent.expect("parent");
        assert_eq!(
            (p.join.rank, p.join.size, p.parents, p.appnum),
            (3, 5, 2, 1)
        );
        assert_eq!(
            (p.join.kvs_addr.as_str(), p.join.secret_fd),
            ("127.0.0.1:2", 4)
        );
        assert!(c.unknown.is_empty(), "{:?}", c.unknown);
        // A rank among the parents, sizes that do not add up, a missing piece: errors.
        for (k, v) in [
            ("RCOMM_PARENT_RANK", "1"),
            ("RCOMM_PARENT_RANK", "5"),
            ("RCOMM_PARENT_SIZE", "6"),
            ("RCOMM_PARENT_GROUP", "0"),
            ("RCOMM_PARENT_JOB_ID", ""),
            ("RCOMM_PARENT_SECRET_FD", "x"),
        ] {
            let mut e = env(&child);
            e.insert(k.into(), v.into());
            let err = Config::from_map(&e).expect_err(k);
            assert!(err.name.starts_with("RCOMM_PARENT_"), "{k}={v}: {err}");
        }
    }

    #[test]
    fn socket_ifname_and_tcp_timeout_parse_and_bad_values_name_the_variable() {
        let c = Config::from_map(&env(&[
            ("RCOMM_SOCKET_IFNAME", "^lo,docker"),
            ("RCOMM_TCP_TIMEOUT", "2.5"),
        ]))
        .unwrap();
        let s = c.socket_ifname.unwrap();
        assert!(s.exclude && !s.exact && s.names == ["lo", "docker"]);
        assert_eq!(c.tcp_timeout_ms, 2500);
        let c = Config::from_map(&env(&[])).unwrap();
        assert_eq!((c.socket_ifname, c.tcp_timeout_ms), (None, 10_000));
        for (v, ms) in [("500ms", 500), ("3s", 3000), ("0", 0), (" 1 ", 1000)] {
            assert_eq!(parse_duration_ms(v), Some(ms), "{v}");
        }
        for v in ["-1", "x", "2h", "3601", "nan"] {
            assert_eq!(parse_duration_ms(v), None, "{v}");
        }
        let e = Config::from_map(&env(&[("RCOMM_SOCKET_IFNAME", "^")])).unwrap_err();
        assert_eq!(e.name, "RCOMM_SOCKET_IFNAME");
        let e = Config::from_map(&env(&[("RCOMM_TCP_TIMEOUT", "soon")])).unwrap_err();
        assert_eq!(e.name, "RCOMM_TCP_TIMEOUT");
        let c = Config::from_map(&env(&[("RCOMM_IB_HCA", "^=mlx5_3")])).unwrap();
        let h = c.ib_hca.unwrap();
        assert!(h.exclude && h.exact && h.names == ["mlx5_3"]);
        let e = Config::from_map(&env(&[("RCOMM_IB_HCA", ",")])).unwrap_err();
        assert_eq!(e.name, "RCOMM_IB_HCA");
    }

    #[test]
    fn launcher_variables_parse_and_unknown_names_are_kept() {
        let c = Config::from_map(&env(&[
            ("RCOMM_RANK", "1"),
            ("RCOMM_SIZE", "2"),
            ("RCOMM_KVS_ADDR", "127.0.0.1:5"),
            ("RCOMM_JOB_ID", "j"),
            ("RCOMM_SECRET_FD", "9"),
            ("RCOMM_TRANSPOTR", "tcp"),
        ]))
        .unwrap();
        assert_eq!(c.launch.unwrap().secret_fd, 9);
        assert_eq!(c.unknown, vec!["RCOMM_TRANSPOTR".to_string()]);
    }

    #[test]
    fn algo_overrides_are_checked_against_the_known_names() {
        let c = Config::from_map(&env(&[("RCOMM_ALGO", "allreduce:ring, bcast:tree")])).unwrap();
        assert_eq!(
            c.algo,
            vec![
                ("allreduce".into(), "ring".into()),
                ("bcast".into(), "tree".into())
            ]
        );
        let e = Config::from_map(&env(&[("RCOMM_ALGO", "allreduce:magic")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("auto, ring, rd, rabenseifner, direct, shm"),
            "{e}"
        );
        let e = Config::from_map(&env(&[("RCOMM_ALGO", "reduce:ring")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("for reduce one of auto, tree, direct"),
            "{e}"
        );
        // Every operation accepts every name listed for it, and `auto` first.
        for (op, algos) in ALGOS {
            assert_eq!(algos[0], "auto", "{op}");
            for a in *algos {
                let c = Config::from_map(&env(&[("RCOMM_ALGO", &format!("{op}:{a}"))])).unwrap();
                assert_eq!(c.algo, vec![(op.to_string(), a.to_string())]);
            }
        }
        let e = Config::from_map(&env(&[("RCOMM_ALGO", "allfoo:ring")])).unwrap_err();
        assert!(e.to_string().contains("allreduce, bcast"), "{e}");
        assert!(Config::from_map(&env(&[("RCOMM_KERNEL_ISA", "sse")])).is_err());
    }

    #[test]
    fn deterministic_async_progress_and_tune_parse_with_defaults() {
        let c = Config::from_map(&env(&[])).unwrap();
        assert_eq!(
            (c.deterministic, c.async_progress, c.tune),
            (false, false, TuneMode::Measure)
        );
        let c = Config::from_map(&env(&[
            ("RCOMM_DETERMINISTIC", "1"),
            ("RCOMM_ASYNC_PROGRESS", "on"),
            ("RCOMM_TUNE", "Default"),
        ]))
        .unwrap();
        assert_eq!(
            (c.deterministic, c.async_progress, c.tune),
            (true, true, TuneMode::Default)
        );
        // An empty value counts as unset, like every other variable.
        let c = Config::from_map(&env(&[("RCOMM_TUNE", "")])).unwrap();
        assert_eq!(c.tune, TuneMode::Measure);
        for (name, bad, want) in [
            ("RCOMM_DETERMINISTIC", "yes", "one of 1, 0, on, off"),
            ("RCOMM_ASYNC_PROGRESS", "2", "one of 1, 0, on, off"),
            ("RCOMM_TUNE", "fast", "one of measure, default"),
        ] {
            let e = Config::from_map(&env(&[(name, bad)])).unwrap_err();
            assert_eq!(e.name, name);
            assert!(e.to_string().contains(want), "{e}");
        }
    }

    #[test]
    fn single_copy_is_the_same_choice_at_every_launch_unless_auto_is_asked() {
        let c = |kv: &[(&str, &str)]| {
            let c = Config::from_map(&env(kv)).unwrap();
            (c.shm_cma, c.shm_cma_probe, c.shm_cma_max)
        };
        // The default: single copy up to 4 MiB, decided by no timing at init.
        assert_eq!(c(&[]), (true, false, 4 << 20));
        assert_eq!(c(&[("RCOMM_SHM_CMA", "")]), (true, false, 4 << 20));
        assert_eq!(c(&[("RCOMM_SHM_CMA", "1")]), (true, false, 4 << 20));
        assert_eq!(c(&[("RCOMM_SHM_CMA", "off")]), (false, false, 4 << 20));
        assert_eq!(c(&[("RCOMM_SHM_CMA", "0")]), (false, false, 4 << 20));
        // Only `auto` lets init's probe decide; a size limit the user set is kept as chosen.
        assert_eq!(c(&[("RCOMM_SHM_CMA", "AUTO")]), (true, true, 4 << 20));
        assert_eq!(
            c(&[("RCOMM_SHM_CMA", "auto"), ("RCOMM_SHM_CMA_MAX", "1M")]),
            (true, false, 1 << 20)
        );
        let e = Config::from_map(&env(&[("RCOMM_SHM_CMA", "maybe")])).unwrap_err();
        assert_eq!(e.name, "RCOMM_SHM_CMA");
        assert!(e.to_string().contains("one of 1, on, 0, off, auto"), "{e}");
    }

    #[test]
    fn deterministic_is_a_protocol_setting() {
        let on = Config::from_map(&env(&[("RCOMM_DETERMINISTIC", "1")])).unwrap();
        let off = Config::from_map(&env(&[])).unwrap();
        let get = |c: &Config| {
            c.protocol_settings()
                .into_iter()
                .find(|(n, _)| n == "RCOMM_DETERMINISTIC")
                .map(|(_, v)| v)
        };
        assert_eq!(get(&on).as_deref(), Some("1"));
        assert_eq!(get(&off).as_deref(), Some("0"));
        // The other two only change local behaviour, so ranks may differ.
        for name in ["RCOMM_ASYNC_PROGRESS", "RCOMM_TUNE"] {
            assert!(
                VARIABLES.iter().any(|v| v.name == name && !v.protocol),
                "{name}"
            );
        }
    }

    #[test]
    fn flight_recorder_and_watchdogs_parse_with_defaults() {
        use std::time::Duration;
        let d = Config::from_map(&env(&[])).unwrap();
        assert_eq!(d.fr_size, 2048);
        assert_eq!(d.coll_timeout, Some(Duration::from_secs(600)));
        assert_eq!(d.p2p_timeout, None);
        let c = Config::from_map(&env(&[
            ("RCOMM_FR_SIZE", "0"),
            ("RCOMM_TIMEOUT", "3s"),
            ("RCOMM_P2P_TIMEOUT", "250ms"),
        ]))
        .unwrap();
        assert_eq!(c.fr_size, 0);
        assert_eq!(c.coll_timeout, Some(Duration::from_secs(3)));
        assert_eq!(c.p2p_timeout, Some(Duration::from_millis(250)));
        let off = Config::from_map(&env(&[("RCOMM_TIMEOUT", "0")])).unwrap();
        assert_eq!(off.coll_timeout, None);
        for (k, v) in [
            ("RCOMM_FR_SIZE", "2000000"),
            ("RCOMM_FR_SIZE", "lots"),
            ("RCOMM_TIMEOUT", "soon"),
            ("RCOMM_P2P_TIMEOUT", "-1"),
        ] {
            let e = Config::from_map(&env(&[(k, v)])).unwrap_err();
            assert_eq!(e.name, k, "{e}");
        }
    }

    #[test]
    fn check_and_straggler_are_protocol_flags() {
        let c = Config::from_map(&env(&[])).unwrap();
        assert_eq!((c.check, c.straggler), (false, false));
        let c = Config::from_map(&env(&[("RCOMM_CHECK", "1"), ("RCOMM_STRAGGLER", "on")])).unwrap();
        assert_eq!((c.check, c.straggler), (true, true));
        let s = c.protocol_settings();
        for name in ["RCOMM_CHECK", "RCOMM_STRAGGLER"] {
            assert!(s.iter().any(|(n, v)| n == name && v == "1"), "{name}");
            assert!(VARIABLES.iter().any(|v| v.name == name && v.protocol));
        }
        let e = Config::from_map(&env(&[("RCOMM_CHECK", "yes")])).unwrap_err();
        assert_eq!(e.name, "RCOMM_CHECK");
    }

    #[test]
    fn pmi_and_torchrun_variables_parse() {
        let c = Config::from_map(&env(&[
            ("PMI_FD", "6"),
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "4"),
            ("PMI_JOBID", "8.0"),
            ("SLURM_MPI_TYPE", "pmi2"),
            ("SLURM_JOB_ID", "8"),
        ]))
        .unwrap();
        let p = c.pmi.unwrap();
        assert_eq!((p.fd, p.rank, p.size, p.version), (6, 1, 4, PmiVersion::V2));
        assert_eq!(p.jobid.as_deref(), Some("8.0"));
        assert!(p.launcher.contains("Slurm"));
        let c = Config::from_map(&env(&[
            ("PMI_FD", "6"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2"),
        ]))
        .unwrap();
        assert_eq!(c.pmi.unwrap().version, PmiVersion::V1);
        let c = Config::from_map(&env(&[
            ("PMI_FD", "6"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2"),
            ("RCOMM_PMI", "2"),
        ]))
        .unwrap();
        assert_eq!(c.pmi.unwrap().version, PmiVersion::V2);
        assert_eq!(
            Config::from_map(&env(&[("PMI_FD", "6")])).unwrap_err().name,
            "PMI_FD"
        );
        let c = Config::from_map(&env(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "2"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
        ]))
        .unwrap();
        let t = c.torch.unwrap();
        assert_eq!((t.rank, t.size, t.local_rank, t.local_size), (2, 4, 2, 4));
        assert_eq!((t.master_port, t.store_port), (29500, 29501));
        let c = Config::from_map(&env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "65535"),
        ]));
        assert_eq!(c.unwrap_err().name, "MASTER_PORT");
        // RANK alone (a common name) is not a torchrun start.
        let c = Config::from_map(&env(&[("RANK", "3"), ("WORLD_SIZE", "4")])).unwrap();
        assert!(c.torch.is_none());
        assert_eq!(c.bootstrap_timeout, std::time::Duration::from_secs(120));
    }

    #[test]
    fn gpu_backend_and_nvtx_parse_with_defaults_and_name_the_choices() {
        let c = Config::from_map(&env(&[])).unwrap();
        assert_eq!((c.gpu_backend, c.nvtx), (GpuBackend::Auto, true));
        assert_eq!((c.gpu_standin, c.gpu_standin_distinct), (false, false));
        let c = Config::from_map(&env(&[("RCOMM_GPU_STANDIN", "1")])).unwrap();
        assert_eq!((c.gpu_standin, c.gpu_standin_distinct), (true, false));
        let c = Config::from_map(&env(&[("RCOMM_GPU_STANDIN", "Distinct")])).unwrap();
        assert_eq!((c.gpu_standin, c.gpu_standin_distinct), (true, true));
        let c = Config::from_map(&env(&[("RCOMM_GPU_BACKEND", "auto")])).unwrap();
        assert_eq!(c.gpu_backend, GpuBackend::Auto);
        let c =
            Config::from_map(&env(&[("RCOMM_GPU_BACKEND", "NCCL"), ("RCOMM_NVTX", "0")])).unwrap();
        assert_eq!((c.gpu_backend, c.nvtx), (GpuBackend::Nccl, false));
        let c = Config::from_map(&env(&[("RCOMM_GPU_BACKEND", "rcomm")])).unwrap();
        assert_eq!(c.gpu_backend, GpuBackend::Rcomm);
        // Ranks that disagree would run collectives that never meet: a protocol setting.
        assert!(
            c.protocol_settings()
                .iter()
                .any(|(n, v)| n == "RCOMM_GPU_BACKEND" && v == "rcomm")
        );
        for (name, bad, want) in [
            ("RCOMM_GPU_BACKEND", "mpi", "one of auto, rcomm, nccl"),
            ("RCOMM_GPU_STANDIN", "2", "one of 1, 0, on, off, distinct"),
            ("RCOMM_NVTX", "yes", "one of 1, 0, on, off"),
        ] {
            let e = Config::from_map(&env(&[(name, bad)])).unwrap_err();
            assert_eq!(e.name, name);
            assert!(e.to_string().contains(want), "{e}");
        }
        assert!(c.unknown.is_empty());
    }

    #[test]
    fn ib_settings_default_as_nccl_and_refuse_out_of_range_values() {
        let c = Config::from_map(&env(&[])).unwrap();
        assert_eq!(c.ib, IbSettings::default());
        assert_eq!(
            (
                c.ib.gid_index,
                c.ib.timeout,
                c.ib.retry_cnt,
                c.ib.qps_per_connection
            ),
            (None, 20, 7, 1)
        );
        assert_eq!(c.ib.gdr_level, P2pLevel::Pxb);
        let c = Config::from_map(&env(&[
            ("RCOMM_IB_GID_INDEX", "3"),
            ("RCOMM_IB_TIMEOUT", "22"),
            ("RCOMM_IB_RETRY_CNT", "0"),
            ("RCOMM_IB_SL", "15"),
            ("RCOMM_IB_TC", "106"),
            ("RCOMM_IB_QPS_PER_CONNECTION", "4"),
            ("RCOMM_NET_GDR_LEVEL", "SYS"),
        ]))
        .unwrap();
        let want = IbSettings {
            gid_index: Some(3),
            timeout: 22,
            retry_cnt: 0,
            sl: 15,
            tc: 106,
            qps_per_connection: 4,
            rails: 1,
            gdr_level: P2pLevel::Sys,
        };
        assert_eq!(c.ib, want);
        assert!(c.unknown.is_empty(), "{:?}", c.unknown);
        let c = Config::from_map(&env(&[("RCOMM_NET_GDR_LEVEL", "0")])).unwrap();
        assert_eq!(c.ib.gdr_level, P2pLevel::Loc);
        for (name, bad, want) in [
            ("RCOMM_IB_GID_INDEX", "256", "from 0 to 255"),
            ("RCOMM_IB_GID_INDEX", "auto", "from 0 to 255"),
            ("RCOMM_IB_TIMEOUT", "0", "from 1 to 31"),
            ("RCOMM_IB_TIMEOUT", "32", "from 1 to 31"),
            ("RCOMM_IB_RETRY_CNT", "8", "from 0 to 7"),
            ("RCOMM_IB_SL", "16", "from 0 to 15"),
            ("RCOMM_IB_TC", "-1", "from 0 to 255"),
            ("RCOMM_IB_QPS_PER_CONNECTION", "0", "from 1 to 16"),
            ("RCOMM_IB_RAILS", "9", "from 1 to 8"),
            ("RCOMM_NET_GDR_LEVEL", "NVL", "LOC"),
            ("RCOMM_NET_GDR_LEVEL", "5", "PXB"),
        ] {
            let e = Config::from_map(&env(&[(name, bad)])).unwrap_err();
            assert_eq!(e.name, name, "{e}");
            assert!(
                e.to_string().to_lowercase().contains(&want.to_lowercase()),
                "{e}"
            );
        }
    }

    #[test]
    fn every_protocol_setting_is_a_documented_protocol_variable() {
        let c = Config::from_map(&env(&[])).unwrap();
        for (name, _) in c.protocol_settings() {
            assert!(
                VARIABLES.iter().any(|v| v.name == name && v.protocol),
                "{name}"
            );
        }
    }

    #[test]
    fn the_device_of_a_rank_is_rcomm_device_or_its_local_rank_round_the_gpus() {
        assert_eq!(Config::from_map(&env(&[])).unwrap().device, None);
        let c = Config::from_map(&env(&[("RCOMM_DEVICE", " 3 ")])).unwrap();
        assert_eq!(c.device, Some(3));
        for bad in ["-1", "gpu1", "1.5"] {
            let e = Config::from_map(&env(&[("RCOMM_DEVICE", bad)])).unwrap_err();
            assert_eq!(e.name, "RCOMM_DEVICE", "{bad}");
            assert!(e.to_string().contains("non-negative integer"), "{e}");
        }
        // Eight ranks on four GPUs: two per GPU, neighbours on different ones.
        let on: Vec<u32> = (0..8)
            .map(|r| device_for_local_rank(r, 4).unwrap())
            .collect();
        assert_eq!(on, [0, 1, 2, 3, 0, 1, 2, 3]);
        assert_eq!(device_for_local_rank(5, 1), Some(0));
        assert_eq!(device_for_local_rank(2, 8), Some(2));
        assert_eq!(device_for_local_rank(0, 0), None, "no GPU visible");
    }
}
