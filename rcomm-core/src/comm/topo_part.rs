//! Where a communicator's ranks are: its members as world ranks and the nodes they run on.

use crate::{CommError, Result};
use std::sync::Arc;

/// The members of a communicator, as world ranks, with the reverse map.
#[derive(Debug)]
pub(crate) struct Members {
    pub(crate) world: Vec<u32>,
    pub(crate) local: rcomm_runtime::fastmap::FastMap<u32, u32>,
}

impl Members {
    pub(crate) fn new(world: Vec<u32>) -> Self {
        let local = world
            .iter()
            .enumerate()
            .map(|(i, &w)| (w, i as u32))
            .collect();
        Self { world, local }
    }
}

/// A communicator's placement: which world ranks it holds and which nodes they run on. Fixed
/// when the communicator is made; its clones share it. Read it through
/// [`Communicator::topology`](crate::Communicator::topology).
#[derive(Debug, Clone)]
pub struct TopoPart {
    /// Members by communicator rank; `None` for the world itself (rank = world rank).
    members: Option<Arc<Members>>,
    /// Each world rank's node colour (the lowest world rank on its node): the process's table,
    /// shared by every communicator.
    colours: Arc<[u32]>,
    /// Every member runs on this node (shared-memory algorithms are possible).
    one_node: bool,
    /// How many nodes the members run on.
    nodes: u32,
}

impl TopoPart {
    /// The placement of the members `world` (world ranks by communicator rank; `None`: every
    /// world rank in order) given each world rank's node colour.
    pub(crate) fn new(world: Option<Vec<u32>>, colours: Arc<[u32]>) -> Self {
        let mut mine: Vec<u32> = match &world {
            Some(w) => w.iter().map(|&r| colours[r as usize]).collect(),
            None => colours.to_vec(),
        };
        let one_node = mine.iter().all(|&c| Some(&c) == mine.first());
        mine.sort_unstable();
        mine.dedup();
        Self {
            members: world.map(|w| Arc::new(Members::new(w))),
            colours,
            one_node,
            nodes: mine.len() as u32,
        }
    }

    /// Members by communicator rank (`None` for the world).
    #[inline]
    pub(crate) fn members(&self) -> &Option<Arc<Members>> {
        &self.members
    }

    /// Every member runs on this node (so the shared-memory collective algorithms can run).
    #[inline]
    pub fn one_node(&self) -> bool {
        self.one_node
    }

    /// How many nodes the members run on.
    #[inline]
    pub fn nodes(&self) -> u32 {
        self.nodes
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        match &self.members {
            Some(m) => m.world.len() as u32,
            None => self.colours.len() as u32,
        }
    }

    /// The world rank of communicator rank `rank`.
    pub fn world_rank(&self, rank: u32) -> Result<u32> {
        let w = match &self.members {
            Some(m) => m.world.get(rank as usize).copied(),
            None => (rank < self.size()).then_some(rank),
        };
        w.ok_or(CommError::InvalidRank {
            rank,
            size: self.size(),
        })
    }

    /// The communicator rank of world rank `world`, if it is a member.
    pub fn rank_of_world(&self, world: u32) -> Option<u32> {
        match &self.members {
            Some(m) => m.local.get(&world).copied(),
            None => (world < self.size()).then_some(world),
        }
    }

    /// The node of communicator rank `rank`, named by the lowest world rank on that node (the
    /// same number on every rank): two ranks share a node exactly when their colours are equal.
    pub fn node_of(&self, rank: u32) -> Result<u32> {
        Ok(self.colours[self.world_rank(rank)? as usize])
    }
}
