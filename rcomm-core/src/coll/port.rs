//! The point-to-point side of running a schedule, as a trait: the executor's stepping code
//! (`exec`) is written once over it, so the schedules that run on a communicator's engine also
//! run, step for step, on engines over the simulated fabric in virtual time (the tests'
//! `coll::simtests`). Implementations are chosen statically: nothing is boxed per message.

use crate::p2p::region::Region;
use crate::{CommError, Result};

/// A message of a phase in flight.
#[derive(Debug)]
pub(crate) struct Pending<R> {
    pub(crate) req: R,
    /// The bytes a receive must bring (`None`: a send).
    pub(crate) want: Option<usize>,
    /// Communicator rank of the peer, for a size mismatch's error.
    pub(crate) peer: u32,
}

/// One collective's messages on one rank: posting, waiting and failure, with tag, context
/// and rank mapping fixed by the implementation.
pub(crate) trait Port {
    /// A posted message.
    type Req: Copy;
    /// Several posts or results taken together.
    type Batch<'b>: Batch<Req = Self::Req>
    where
        Self: 'b;

    /// Opens a batch (the communicator's engine lock is taken once for a phase's posts, and
    /// once for its results).
    fn batch(&mut self) -> Self::Batch<'_>;

    /// Moves what can move without blocking; whether [`wait`](Self::wait) would return at
    /// once (every request done, or a reason to stop waiting such as a failed check).
    fn ready(&mut self, reqs: &[Pending<Self::Req>]) -> bool;

    /// Waits until every request is done. An error ends the collective here (no progress
    /// for the watchdog's limit, a member lost, a failed check); the requests still in flight
    /// are then abandoned, so their buffers are free again.
    fn wait(&mut self, reqs: &[Pending<Self::Req>]) -> Result<()>;

    /// Waits for each request whatever its outcome (after a failed post: no buffer may be
    /// written after the executor returns).
    fn drain(&mut self, reqs: &[Pending<Self::Req>]);

    /// The collective's error for a message that failed (the communicator names the member
    /// lost first and every other it knows of).
    fn failure(&mut self, e: CommError) -> CommError;
}

/// Posting and taking results within one [`Port::batch`].
pub(crate) trait Batch {
    /// A posted message.
    type Req: Copy;
    /// Posts a receive from communicator rank `peer` into `dst`.
    fn recv(&mut self, peer: u32, dst: Region) -> Result<Self::Req>;
    /// Posts a send of `src` to communicator rank `peer`.
    fn send(&mut self, peer: u32, src: Region) -> Result<Self::Req>;
    /// The bytes a done request moved, or its error; the request is gone after.
    fn take(&mut self, req: Self::Req) -> Result<usize>;
}
