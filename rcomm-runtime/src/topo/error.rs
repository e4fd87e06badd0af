//! Why a topology could not be had.

use std::path::PathBuf;

/// A topology source failed. Every variant names what it failed on, so that a bad file on a
/// strange machine can be found without a debugger.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds something the reader cannot make sense of.
    #[error("{path}: {why}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        why: String,
    },
    /// A symbolic link leads outside the root the reader was given; never followed.
    #[error("{path}: symbolic link leads outside {root}")]
    Escape {
        /// The link (or the path that went through it).
        path: PathBuf,
        /// The root.
        root: PathBuf,
    },
    /// A topology in rcomm's own form (`RCOMM_TOPO_FILE`) was refused.
    #[error("topology file {path}: {why}")]
    File {
        /// The file, or `<json>` for text given directly.
        path: String,
        /// Why.
        why: String,
    },
    /// hwloc failed (feature `hwloc`).
    #[error("hwloc: {0}")]
    Hwloc(String),
    /// A reader built a tree that breaks the model's rules (a reader bug, or a machine unlike
    /// any the reader knows).
    #[error("inconsistent topology: {0}")]
    Invalid(String),
}
