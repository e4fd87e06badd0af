//! Errors a user of rcomm can see. Each says what happened, to which rank or host, and what
//! to try.

use rcomm_transport::bootstrap::BootstrapError;
use rcomm_transport::config::ConfigError;
use rcomm_transport::identity::SettingsMismatch;

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
    #[error("rank {rank} runs rcomm {theirs} but rank 0 runs {ours}: rebuild every rank with one version")]
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
    /// A peer's address record could not be decoded.
    #[error("rank {rank}'s address record is unreadable: {err}")]
    BadRecord {
        /// The rank.
        rank: u32,
        /// Why.
        err: rcomm_transport::wire::WireError,
    },
}
