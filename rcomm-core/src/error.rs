//! Errors a user of rcomm can see. Each says what happened, to which rank or host, and what
//! to try.

use rcomm_runtime::bootstrap::BootstrapError;
use rcomm_runtime::config::ConfigError;
use rcomm_runtime::identity::SettingsMismatch;

/// An error from an rcomm call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommError {
    /// An `RCOMM_*` variable holds an invalid value.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// Finding the other ranks failed.
    #[error("bootstrap: {0}")]
    Bootstrap(#[from] BootstrapError),
    /// Ranks disagree on a protocol-relevant setting.
    #[error("{0}")]
    Settings(#[from] SettingsMismatch),
    /// Another launcher started this process but rcomm cannot bootstrap from it.
    #[error("{0}")]
    ForeignLauncher(String),
    /// Ranks run different rcomm versions.
    #[error(
        "rank {rank} runs rcomm {theirs} but rank 0 runs {ours}: rebuild every rank with one version"
    )]
    Version {
        /// The odd rank.
        rank: u32,
        /// Its version.
        theirs: String,
        /// Rank 0's version.
        ours: String,
    },
    /// A rank number outside the communicator.
    #[error("rank {rank} is out of range: the communicator has {size} ranks")]
    InvalidRank {
        /// The rank given.
        rank: u32,
        /// The communicator size.
        size: u32,
    },
    /// A peer died or became unreachable while this rank waited on it (or before).
    #[error("{op}: rank {rank} (host {host}) is lost: {why}")]
    PeerLost {
        /// The lost rank.
        rank: u32,
        /// Its host.
        host: String,
        /// The operation that failed.
        op: &'static str,
        /// What was seen.
        why: String,
    },
    /// A peer stopped answering the launcher's liveness check (stopped with SIGSTOP, or stuck
    /// in the kernel) and was killed: this rank waited on it, or on a communicator it belongs to.
    #[error("{op}: rank {rank} (host {host}) hung: {why}")]
    PeerHung {
        /// The hung rank.
        rank: u32,
        /// Its host.
        host: String,
        /// The operation that failed.
        op: &'static str,
        /// What the launcher saw.
        why: String,
    },
    /// The communicator was revoked (`Communicator::revoke`): nothing more runs on it; shrink it
    /// or make another.
    #[error("{op}: the communicator was revoked by rank {by}")]
    Revoked {
        /// The operation that failed.
        op: &'static str,
        /// World rank that revoked it.
        by: u32,
    },
    /// The receive buffer was smaller than the message; the message is consumed.
    #[error(
        "message truncated: {message} bytes do not fit the {buffer}-byte buffer (the message was consumed)"
    )]
    Truncated {
        /// Buffer size in bytes.
        buffer: usize,
        /// Message size in bytes.
        message: usize,
    },
    /// A negative tag on a send (negative tags are reserved; `Tag::Any` is for receives).
    #[error("tag {tag} is invalid: user tags are 0..=i32::MAX (Tag::Any only on receives)")]
    InvalidTag {
        /// The tag.
        tag: i32,
    },
    /// A peer broke the protocol.
    #[error("rank {rank} broke the protocol: {why}")]
    Protocol {
        /// The rank.
        rank: u32,
        /// What happened.
        why: String,
    },
    /// Setting up the transports failed.
    #[error("transport setup: {0}")]
    Transport(#[from] rcomm_transport::error::TransportError),
    /// Two ranks cannot reach each other with the requested transport.
    #[error("no transport from rank {from} to rank {to}: {why}")]
    NoRoute {
        /// This rank.
        from: u32,
        /// The peer.
        to: u32,
        /// Why.
        why: String,
    },
    /// A buffer's size is not a whole number of elements of the requested type.
    #[error("{bytes} bytes are not a whole number of {elem}-byte elements")]
    Size {
        /// Bytes.
        bytes: usize,
        /// Element size.
        elem: usize,
    },
    /// Ranks passed different arguments to a collective call.
    #[error("rank {rank} disagrees on {what}: it has {theirs}, this rank {ours}")]
    Mismatch {
        /// What differs.
        what: String,
        /// The other rank.
        rank: u32,
        /// Its value.
        theirs: u64,
        /// Ours.
        ours: u64,
    },
    /// Ranks made different collective calls (checked mode, `RCOMM_CHECK=1`): another
    /// operation, element type, count, reduction op or root. Returned by the collective that
    /// finds it and by every later collective on the communicator, whose ranks are out of step.
    #[error("{detail}")]
    CollMismatch {
        /// This rank's call, e.g. `allreduce(count 100, f32, sum)`.
        call: String,
        /// Which collective call of the communicator (0 for its first).
        seq: u32,
        /// The ranks (of the communicator) whose call differs from the one most ranks made.
        ranks: Vec<u32>,
        /// What differs: `collective`, `count`, `element type`, `reduction op`, `root`.
        fields: Vec<&'static str>,
        /// The whole explanation, naming the ranks with their hosts and calls.
        detail: String,
    },
    /// A resource ran out.
    #[error("{0}")]
    Exhausted(String),
    /// An argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArg(String),
    /// A device-memory operation failed: no usable GPU, a pointer that is not device memory, a
    /// CUDA call that failed (its name, device and error are in `why`).
    #[error("{op} on rank {rank}: device memory: {why}")]
    Device {
        /// The operation.
        op: &'static str,
        /// This process's rank (in the world).
        rank: u32,
        /// What failed.
        why: String,
    },
    /// Starting processes (`spawn`) failed: the spawning root's reason.
    #[error("spawning processes: {0}")]
    Spawn(String),
    /// A peer's address record could not be decoded.
    #[error("rank {rank}'s address record is unreadable: {err}")]
    BadRecord {
        /// The rank.
        rank: u32,
        /// Why.
        err: rcomm_runtime::wire::WireError,
    },
    /// An operation made no progress for `RCOMM_TIMEOUT` (collectives: `seq` > 0) or
    /// `RCOMM_P2P_TIMEOUT` (receives, probes: `seq` 0): a rank never arrived, or is stuck.
    /// Under `rcomm-run` the job's hang report names it. A communicator whose collective timed
    /// out is out of step: end the job, or stop using that communicator.
    #[error("{}", timeout_text(op, *seq, comm, *peer, *waited))]
    Timeout {
        /// The operation (`allreduce`, `recv`, …).
        op: &'static str,
        /// Its number among the communicator's collectives (equal on every rank for the same
        /// call); 0 for point-to-point.
        seq: u64,
        /// The communicator, by name (`Communicator::set_name`) or context id.
        comm: String,
        /// The rank waited for (world rank), for a receive or probe from one rank.
        peer: Option<u32>,
        /// How long it waited without progress.
        waited: std::time::Duration,
    },
}

fn timeout_text(
    op: &str,
    seq: u64,
    comm: &str,
    peer: Option<u32>,
    waited: std::time::Duration,
) -> String {
    let secs = waited.as_secs_f64();
    if seq > 0 {
        return format!(
            "{op} #{seq} on comm {comm}: no progress for {secs:.1} s (RCOMM_TIMEOUT): a rank has not called it or is stuck; rcomm-run's hang report names it"
        );
    }
    let from = peer.map_or("any rank".to_string(), |p| format!("rank {p}"));
    format!(
        "{op} from {from} on comm {comm}: no message for {secs:.1} s (RCOMM_P2P_TIMEOUT); the receive was cancelled"
    )
}
