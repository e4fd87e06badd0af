//! What a completed receive or probe reports; `point_to_point` (where rsmpi's path names it)
//! and `request` both hand it out.

use crate::datatype::Datatype;
use crate::topology::Rank;
use crate::{Count, Tag};

/// The outcome of a receive or probe (`MPI_Status`).
#[derive(Copy, Clone)]
pub struct Status(pub(crate) rcomm::Status);

impl Status {
    /// The sender's rank.
    pub fn source_rank(&self) -> Rank {
        self.0.source as Rank
    }

    /// The message's tag.
    pub fn tag(&self) -> Tag {
        self.0.tag
    }

    /// Number of whole elements of `d` in the message.
    pub fn count<D: Datatype>(&self, d: D) -> Count {
        self.0.bytes.checked_div(d.dt().size()).unwrap_or(0) as Count
    }

    /// rcomm's status underneath.
    pub fn rcomm(&self) -> rcomm::Status {
        self.0
    }
}

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Status {{ source_rank: {}, tag: {} }}",
            self.source_rank(),
            self.tag()
        )
    }
}
