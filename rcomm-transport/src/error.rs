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
    /// The operation cannot be done with this peer (the kernel refused single copy, the memory
    /// is not reachable this way): nothing was moved, and the protocol layer chooses another
    /// way. Not a failure of the peer.
    #[error("{op} with rank {peer} is not possible here: {why}")]
    Unsupported {
        /// The peer's rank.
        peer: u32,
        /// The operation.
        op: &'static str,
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
            | Self::Connect { peer, .. }
            | Self::Unsupported { peer, .. } => Some(*peer),
            Self::Io { .. } => None,
        }
    }
}

pub use crate::caps::Caps;
