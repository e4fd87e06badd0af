//! What a communicator keeps for its collectives: their count, the last choice per kind, the
//! algorithms a handle forces, the ranks whose failure fails them, and what the first
//! collectives set up (the node's shared-memory windows, the hierarchical levels). The data is
//! here, typed; what it does is `coll`'s (`coll::shm`, `coll::hier`, `coll::mod`).

mod levels;
mod windows;

pub(crate) use levels::Hier;
pub(crate) use windows::{NodeShm, WindowState};

use crate::coll_state::ChoiceMemo;
use crate::{CommError, Result};
use rcomm_runtime::algo::{Algo, Coll, Forced};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

/// What every handle of one communicator shares — its clones and its `with_algo` handles,
/// not a `dup` or `split` of it: set up once, dropped with the last handle.
#[derive(Default)]
struct PerComm {
    /// Collectives started: every rank starts collectives in the same order, so the count
    /// names a collective alike everywhere and gives each one its own tag — concurrent
    /// non-blocking collectives never mix messages.
    seq: AtomicU32,
    /// The node's windows; `None` inside: set up and unusable (agreed by every rank).
    windows: OnceLock<Option<Arc<NodeShm>>>,
    /// The hierarchical levels (their sub-communicators go with the last handle).
    levels: OnceLock<Arc<Hier>>,
}

/// A communicator handle's collective state. Its clones share the count, windows and levels;
/// [`Communicator::with_algo`](crate::Communicator::with_algo) makes a handle with its own
/// forced algorithms and choice memo over the same shared state.
#[derive(Clone, Default)]
pub(crate) struct CollPart {
    per_comm: Arc<PerComm>,
    /// The last choice per collective kind (this handle's: `with_algo` starts a new one).
    memo: Arc<ChoiceMemo>,
    /// Algorithms forced on this handle, before `RCOMM_ALGO`.
    forced: Option<Arc<Vec<Forced>>>,
    /// World ranks whose failure fails this communicator's collectives, when more than its
    /// members: the parent's, for the sub-communicators a hierarchical collective runs on.
    failure_scope: Option<Arc<Vec<u32>>>,
}

impl std::fmt::Debug for CollPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollPart")
            .field("started", &self.per_comm.seq.load(Ordering::Relaxed))
            .field("forced", &self.forced)
            .finish_non_exhaustive()
    }
}

impl CollPart {
    /// The collective count (shared by every handle of the communicator).
    #[inline]
    pub(crate) fn seq(&self) -> &AtomicU32 {
        &self.per_comm.seq
    }

    /// This handle's last choice per kind.
    #[inline]
    pub(crate) fn memo(&self) -> &ChoiceMemo {
        &self.memo
    }

    /// The algorithm this handle forces for `op`: `Some(None)` forces the tuner's choice;
    /// `None` forces nothing here (`RCOMM_ALGO` decides).
    #[inline]
    pub(crate) fn forced_here(&self, op: Coll) -> Option<Option<Algo>> {
        let list = self.forced.as_deref()?;
        list.iter().find(|(o, _)| *o == op).map(|(_, a)| *a)
    }

    /// This handle's part with `op` forced to `algo`: the rest shared, a memo of its own (a
    /// forced algorithm is part of what a choice depends on).
    pub(crate) fn with_forced(&self, op: Coll, algo: Option<Algo>) -> CollPart {
        let mut list: Vec<Forced> = self
            .forced
            .as_deref()
            .map(|l| l.iter().copied().filter(|(o, _)| *o != op).collect())
            .unwrap_or_default();
        list.push((op, algo));
        CollPart {
            per_comm: self.per_comm.clone(),
            memo: Default::default(),
            forced: Some(Arc::new(list)),
            failure_scope: self.failure_scope.clone(),
        }
    }

    /// The world ranks whose failure fails these collectives, when not just the members'.
    #[inline]
    pub(crate) fn failure_scope(&self) -> Option<&[u32]> {
        self.failure_scope.as_deref().map(Vec::as_slice)
    }

    /// Widens the failure scope to `ranks` (sorted world ranks).
    pub(crate) fn set_failure_scope(&mut self, ranks: Arc<Vec<u32>>) {
        self.failure_scope = Some(ranks);
    }

    /// The node's windows, set up on the first shared-memory collective.
    #[inline]
    pub(crate) fn node_windows(&self) -> &OnceLock<Option<Arc<NodeShm>>> {
        &self.per_comm.windows
    }

    /// The hierarchical levels, made on the first hierarchical collective.
    #[inline]
    pub(crate) fn levels(&self) -> &OnceLock<Arc<Hier>> {
        &self.per_comm.levels
    }
}

/// A communicator's collective part as its users see it ([`Communicator::collectives`]).
///
/// [`Communicator::collectives`]: crate::Communicator::collectives
#[derive(Debug, Clone, Copy)]
pub struct Collectives<'a> {
    pub(crate) part: &'a CollPart,
    pub(crate) ctx: u32,
    /// `RCOMM_ALGO`'s list.
    pub(crate) process: &'a [Forced],
}

impl Collectives<'_> {
    /// Collectives started on this communicator so far, by every handle of it (its clones and
    /// `with_algo` handles count together; the communicator makers `split`, `dup` and
    /// `create` are not counted). The same on every rank between collectives.
    pub fn started(&self) -> u32 {
        self.part.seq().load(Ordering::Relaxed)
    }

    /// The algorithm forced for the collective `op` (as `RCOMM_ALGO` names operations:
    /// `allreduce`, `bcast`, …) on this handle ([`with_algo`]) or, failing that, by
    /// `RCOMM_ALGO`: its name, `Some("auto")` where the tuner's choice is forced, `None`
    /// where nothing is. An unknown operation is an error naming the known ones.
    ///
    /// [`with_algo`]: crate::Communicator::with_algo
    pub fn forced(&self, op: &str) -> Result<Option<&'static str>> {
        let coll = Coll::from_name(&op.trim().to_ascii_lowercase()).ok_or_else(|| {
            let ops: Vec<&str> = Coll::all().map(Coll::name).collect();
            CommError::InvalidArg(format!(
                "`{op}` is not a collective operation; one of {}",
                ops.join(", ")
            ))
        })?;
        let forced = self.part.forced_here(coll).or_else(|| {
            self.process
                .iter()
                .find(|(o, _)| *o == coll)
                .map(|(_, a)| *a)
        });
        Ok(forced.map(rcomm_runtime::algo::forced_name))
    }

    /// Whether the hierarchical collectives' levels (a node communicator and a cross-node one)
    /// are made: on the first hierarchical collective, kept until the last handle goes.
    pub fn has_levels(&self) -> bool {
        self.part.levels().get().is_some()
    }

    /// Whether the node's shared-memory windows are set up and usable (after the first
    /// shared-memory collective; kept until the last handle goes).
    pub fn has_node_windows(&self) -> bool {
        matches!(self.part.node_windows().get(), Some(Some(_)))
    }

    /// The last collective this process recorded on this communicator; see
    /// [`Communicator::last_collective`](crate::Communicator::last_collective).
    pub fn last(&self) -> Option<crate::fr::CollRecord> {
        crate::fr::last_collective(self.ctx)
    }
}

#[cfg(test)]
mod tests {
    use crate::Communicator;

    /// A context id in use in `c`'s process.
    fn in_use(c: &Communicator, ctx: u32) -> bool {
        let id = (ctx / 2) as usize;
        c.shared().ctx_ids.free_mask()[id / 64] >> (id % 64) & 1 == 0
    }

    #[test]
    fn levels_are_made_once_per_communicator_shared_by_its_handles_and_freed_with_the_last() {
        let w = crate::world::init_singleton().unwrap();
        let c = w.dup().unwrap();
        let (h, again) = (
            crate::coll::hier::Hier::get_or_setup(&c).unwrap(),
            crate::coll::hier::Hier::get_or_setup(&c).unwrap(),
        );
        assert!(std::sync::Arc::ptr_eq(&h, &again), "made once");
        let clone = c.clone();
        let forced = c.with_algo("allreduce", "ring").unwrap();
        for other in [&clone, &forced] {
            let theirs = crate::coll::hier::Hier::get_or_setup(other).unwrap();
            assert!(
                std::sync::Arc::ptr_eq(&h, &theirs),
                "shared by clones and with_algo"
            );
        }
        assert!(forced.collectives().has_levels());
        // A dup is another communicator: levels of its own.
        let d = c.dup().unwrap();
        assert!(!d.collectives().has_levels());
        let hd = crate::coll::hier::Hier::get_or_setup(&d).unwrap();
        assert!(!std::sync::Arc::ptr_eq(&h, &hd));
        // The levels' sub-communicators hold context ids until the last handle goes.
        let ids = [h.node.ctx(), h.cross.ctx()];
        assert!(ids.iter().all(|&x| in_use(&w, x)), "{ids:?} in use");
        drop((h, again, hd, clone));
        assert!(
            ids.iter().all(|&x| in_use(&w, x)),
            "a handle still holds them"
        );
        drop(c);
        assert!(
            ids.iter().all(|&x| in_use(&w, x)),
            "the with_algo handle holds them"
        );
        drop(forced);
        assert!(ids.iter().all(|&x| !in_use(&w, x)), "{ids:?} freed");
    }

    #[test]
    fn forced_algorithms_are_the_handle_s_then_the_process_s() {
        let w = crate::world::init_singleton().unwrap();
        let c = w.with_algo("bcast", "tree").unwrap();
        assert_eq!(c.collectives().forced("bcast").unwrap(), Some("tree"));
        assert_eq!(w.collectives().forced("bcast").unwrap(), None);
        let auto = c.with_algo("bcast", "auto").unwrap();
        assert_eq!(auto.collectives().forced("BCAST").unwrap(), Some("auto"));
        assert!(c.collectives().forced("nonsense").is_err());
        // The count is the communicator's: every handle's collectives add to it.
        let before = w.collectives().started();
        c.barrier().unwrap();
        w.allreduce_in_place(&mut [1u32][..], crate::Op::Sum)
            .unwrap();
        assert!(w.collectives().started() > before);
        assert_eq!(c.collectives().started(), w.collectives().started());
    }
}
