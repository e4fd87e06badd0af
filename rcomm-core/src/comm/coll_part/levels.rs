//! The two levels a hierarchical collective runs on, as the collective part keeps them (made
//! and run by `coll::hier`).

use crate::comm::Communicator;

/// The two levels of a communicator.
#[derive(Debug)]
pub(crate) struct Hier {
    /// The ranks of this node, in the parent's order.
    pub(crate) node: Communicator,
    /// Ranks with this rank's local index, one per node that has that many ranks, in the
    /// parent's order.
    pub(crate) cross: Communicator,
    /// Every node has the same number of ranks (the striped algorithms need it).
    pub(crate) regular: bool,
    /// Each parent rank's index within its node.
    pub(crate) local_index: Vec<u32>,
    /// Each parent rank's rank in its cross-node communicator.
    pub(crate) cross_rank: Vec<u32>,
}
