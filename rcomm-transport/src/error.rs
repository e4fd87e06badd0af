//! Errors of the byte transports (shm, tcp, self, ...).

use std::io;

/// A transport failure. The core turns peer failures into `PeerLost` errors naming the rank,
/// host and operation.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The peer closed its end or died (end-of-file, reset, broken pipe).
    #[error("connection to rank {peer} closed: the peer exited or died")]
    PeerClosed {
        /// The peer's rank.
        peer: u32,
    },
    /// The link stopped working (e.g. `TCP_USER_TIMEOUT` expired on a cut link).
    #[error("link to rank {peer} failed: {source}")]
    Link {
        /// The peer's rank.
        peer: u32,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The peer sent bytes that break the protocol; the connection is dropped.
    #[error("rank {peer} broke the protocol: {why}")]
    Protocol {
        /// The peer's rank.
        peer: u32,
        /// What was wrong.
        why: String,
    },
    /// Setting up a connection failed.
    #[error("cannot connect to rank {peer} at {addr}: {why}")]
    Connect {
        /// The peer's rank.
        peer: u32,
        /// The address tried.
        addr: String,
        /// Why.
        why: String,
    },
    /// A local resource failed (socket, mapping, descriptor).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl TransportError {
    /// The peer this error is about, if any.
    pub fn peer(&self) -> Option<u32> {
        match self {
            Self::PeerClosed { peer }
            | Self::Link { peer, .. }
            | Self::Protocol { peer, .. }
            | Self::Connect { peer, .. } => Some(*peer),
            Self::Io { .. } => None,
        }
    }
}

/// What a transport can do, for the protocol layer's choices and the cost model
/// (`time ≈ latency + bytes / bandwidth`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Caps {
    /// One-way latency of a small message, seconds.
    pub latency_s: f64,
    /// Streaming bandwidth, bytes per second.
    pub bandwidth_bps: f64,
    /// Largest message sent eagerly (header and payload in one go); larger ones use rendezvous.
    pub eager_limit: usize,
    /// Largest payload one `try_send` accepts (eager messages and data chunks).
    pub max_frame: usize,
    /// Whether the receiver can read the sender's memory directly (single copy).
    pub single_copy: bool,
}
