//! The state the collective layer keeps per process, as plain types below `comm` (which holds
//! it in `Shared`) so that `comm` names nothing of `coll`: the schedule and choice caches,
//! scratch, the non-blocking collectives in flight and the progress thread's list (their
//! behaviour is in `coll::exec` and `coll::progress`), and the tuner's constants (chosen by
//! `coll::tuner`).

use crate::Result;
use crate::coll::schedule::Schedule;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Process-wide collective state: reusable scratch and cached schedules.
#[derive(Default)]
pub(crate) struct CollShared {
    /// Scratch buffers kept at their largest length, so a large collective does not zero
    /// megabytes of fresh memory each call.
    pub(crate) scratch: Mutex<Vec<Vec<u8>>>,
    /// Schedules by what they are a pure function of.
    pub(crate) cache: Mutex<rcomm_transport::fastmap::FastMap<SchedKey, Arc<Schedule>>>,
    pub(crate) progress: Option<Arc<Progress>>,
    /// Non-blocking collectives started and not known to be finished, on every communicator:
    /// a rank blocked waiting for one advances the others too, so collectives started or
    /// waited in different orders on different ranks complete (MPI's progress rule).
    pub(crate) inflight: Mutex<Vec<std::sync::Weak<Mutex<dyn Advance>>>>,
    /// `inflight` may hold an unfinished collective: lets blocking waits skip the list (and
    /// its lock) when there is none.
    pub(crate) any_inflight: std::sync::atomic::AtomicBool,
    /// The tuner's choices by what they are a pure function of.
    pub(crate) choices: Mutex<rcomm_transport::fastmap::FastMap<ChoiceKey, &'static str>>,
    /// Choices already logged: (op, ranks, bytes, algorithm).
    pub(crate) logged: Mutex<std::collections::HashSet<(&'static str, u32, usize, &'static str)>>,
}

impl std::fmt::Debug for CollShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollShared").finish_non_exhaustive()
    }
}

/// What a cached schedule was built from (v-variants are not cached: their block tables
/// would make the key as big as the schedule).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SchedKey {
    pub op: &'static str,
    pub algo: &'static str,
    pub rank: u32,
    pub n: u32,
    pub root: u32,
    pub count: usize,
    pub elem: usize,
}

/// What an algorithm choice depends on besides the process-wide tuning and settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ChoiceKey {
    pub op: &'static str,
    pub n: u32,
    pub bytes: usize,
    pub elem: usize,
    pub commutative: bool,
    pub one_node: bool,
    pub nodes: u32,
    pub forced: Option<&'static str>,
}

/// What the progress thread sees of a request.
pub(crate) trait Advance: Send {
    /// Moves through as many phases as are ready; `Ok(true)` once complete.
    fn advance(&mut self, block: bool) -> Result<bool>;
    /// Complete (or failed).
    fn finished(&self) -> bool;
    /// The point-to-point requests the current phase waits for.
    fn pending_reqs(&self, out: &mut Vec<crate::p2p::engine::ReqId>);
}

pub(crate) type Item = Arc<Mutex<dyn Advance>>;

/// Requests in flight and the thread that advances them.
#[derive(Default)]
pub(crate) struct Progress {
    pub(crate) list: Mutex<Vec<Item>>,
    pub(crate) cv: Condvar,
    pub(crate) stop: AtomicBool,
    pub(crate) thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress").finish_non_exhaustive()
    }
}

/// Where a constant of the [`Tuning`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Measured by rank 0 at init.
    Measured,
    /// A built-in default.
    Default,
}

/// Latency and bandwidth of one kind of link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Link {
    /// Per-message latency α, µs.
    pub alpha_us: f64,
    /// Bandwidth β, bytes per µs.
    pub beta: f64,
    /// Where α and β came from (they are measured together).
    pub origin: Origin,
}

/// The cost model's constants: rank 0's, so that every rank chooses alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Tuning {
    /// Peers on the same node.
    pub intra: Link,
    /// Peers on other nodes.
    pub inter: Link,
    /// Local reduction throughput γ, bytes of the vector reduced per µs.
    pub gamma: f64,
    /// Local memcpy throughput μ, bytes per µs.
    pub memcpy: f64,
    /// Where γ and μ came from.
    pub local_origin: Origin,
    /// Rank 0's probe found single copy (cross-memory attach) slower than pipelined copy on its
    /// node: every rank turns it off (see `coll::tuner::measure`).
    pub single_copy_off: bool,
}
