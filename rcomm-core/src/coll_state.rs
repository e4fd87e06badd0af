//! The state the collective layer keeps per process, as plain types below `comm` (which holds
//! it in `Shared`) so that `comm` names nothing of `coll`: the schedule and choice caches,
//! scratch, the non-blocking collectives in flight and the progress thread's list (their
//! behaviour is in `coll::exec` and `coll::progress`), and the tuner's constants (chosen by
//! `coll::tuner`).

use crate::Result;
use crate::schedule::Schedule;
use rcomm_runtime::algo::{Algo, Coll};
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
    pub(crate) cache: Mutex<rcomm_runtime::fastmap::FastMap<SchedKey, Arc<Schedule>>>,
    pub(crate) progress: Option<Arc<Progress>>,
    /// Non-blocking collectives started and not known to be finished, on every communicator:
    /// a rank blocked waiting for one advances the others too, so collectives started or
    /// waited in different orders on different ranks complete (MPI's progress rule).
    pub(crate) inflight: Mutex<Vec<std::sync::Weak<Mutex<dyn Advance>>>>,
    /// `inflight` may hold an unfinished collective: lets blocking waits skip the list (and
    /// its lock) when there is none.
    pub(crate) any_inflight: std::sync::atomic::AtomicBool,
    /// The tuner's choices by what they are a pure function of.
    pub(crate) choices: Mutex<rcomm_runtime::fastmap::FastMap<ChoiceKey, Algo>>,
    /// Choices already logged: (op, ranks, bytes, algorithm).
    pub(crate) logged: Mutex<std::collections::HashSet<(Coll, u32, usize, Algo)>>,
}

impl std::fmt::Debug for CollShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollShared").finish_non_exhaustive()
    }
}

/// What a cached schedule was built from (v-variants are not cached: their block tables
/// would make the key as big as the schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SchedKey {
    pub op: &'static str,
    pub algo: Algo,
    pub rank: u32,
    pub n: u32,
    pub root: u32,
    pub count: usize,
    pub elem: usize,
}

/// What an algorithm choice depends on besides the process-wide tuning and settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ChoiceKey {
    pub op: Coll,
    pub n: u32,
    pub bytes: usize,
    pub elem: usize,
    pub commutative: bool,
    pub one_node: bool,
    pub nodes: u32,
    pub forced: Option<Algo>,
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

/// The last algorithm chosen for each collective kind on one handle (a handle's forced
/// algorithms are part of what a choice depends on, so `with_algo` gets a memo of its own):
/// one word per kind, read without a lock. A training loop repeats the same few collectives,
/// and the choice is a pure function of the size, element and commutativity there.
#[derive(Debug, Default)]
pub(crate) struct ChoiceMemo([std::sync::atomic::AtomicU64; MEMO_KINDS]);

/// Collective kinds the tuner knows (checked against its list there).
pub(crate) const MEMO_KINDS: usize = 9;

/// Word layout: bytes (bits 0–39), element size (40–47), commutative (48), the algorithm's
/// code (49–55), valid (63). A word is complete in itself, so Relaxed
/// loads and stores suffice.
const MEMO_VALID: u64 = 1 << 63;
const MEMO_KEY: u64 = (1 << 49) - 1;

impl ChoiceMemo {
    fn key(bytes: usize, elem: usize, commutative: bool) -> Option<u64> {
        (bytes < 1 << 40 && elem < 1 << 8)
            .then(|| bytes as u64 | (elem as u64) << 40 | u64::from(commutative) << 48)
    }

    /// The code of the algorithm remembered for `kind` (its `Coll` number) with this key, if
    /// any.
    pub(crate) fn get(
        &self,
        kind: usize,
        bytes: usize,
        elem: usize,
        commutative: bool,
    ) -> Option<usize> {
        let key = Self::key(bytes, elem, commutative)?;
        let w = self.0.get(kind)?.load(std::sync::atomic::Ordering::Relaxed);
        (w & MEMO_VALID != 0 && w & MEMO_KEY == key).then_some((w >> 49 & 0x7f) as usize)
    }

    pub(crate) fn put(
        &self,
        kind: usize,
        bytes: usize,
        elem: usize,
        commutative: bool,
        algo: usize,
    ) {
        if let (Some(key), Some(slot), true) = (
            Self::key(bytes, elem, commutative),
            self.0.get(kind),
            algo < 0x80,
        ) {
            slot.store(
                MEMO_VALID | (algo as u64) << 49 | key,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ChoiceMemo;

    #[test]
    fn a_memo_answers_only_for_the_key_it_holds() {
        let m = ChoiceMemo::default();
        assert_eq!(m.get(0, 8, 4, true), None, "empty");
        m.put(0, 8, 4, true, 5);
        assert_eq!(m.get(0, 8, 4, true), Some(5));
        // Another size, element, commutativity or kind is not this choice.
        assert_eq!(m.get(0, 16, 4, true), None);
        assert_eq!(m.get(0, 8, 8, true), None);
        assert_eq!(m.get(0, 8, 4, false), None);
        assert_eq!(m.get(1, 8, 4, true), None);
        // Index 0 and the largest sizes that fit are told apart from an empty word.
        m.put(2, 0, 1, false, 0);
        assert_eq!(m.get(2, 0, 1, false), Some(0));
        let big = (1usize << 40) - 1;
        m.put(3, big, 255, true, 0x7f);
        assert_eq!(m.get(3, big, 255, true), Some(0x7f));
        // Keys that do not fit are never remembered, and never alias a smaller one.
        m.put(4, 1 << 40, 4, true, 1);
        assert_eq!(m.get(4, 1 << 40, 4, true), None);
        assert_eq!(m.get(4, 0, 4, true), None);
        m.put(5, 8, 256, true, 1);
        assert_eq!(m.get(5, 8, 0, true), None);
        // The last choice replaces the one before; an out-of-range kind is ignored.
        m.put(0, 64, 4, true, 2);
        assert_eq!(
            (m.get(0, 8, 4, true), m.get(0, 64, 4, true)),
            (None, Some(2))
        );
        m.put(99, 8, 4, true, 1);
        assert_eq!(m.get(99, 8, 4, true), None);
    }
}
