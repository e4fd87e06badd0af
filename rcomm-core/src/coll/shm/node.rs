//! One communicator's windows: whether its ranks share a node, the exchange that maps every
//! rank's window, and the calls that run the protocol's rounds under the communicator's lock,
//! watching the members' liveness and marking the windows broken when a round cannot finish.

use super::*;

/// The windows' data is the collective part's (`comm::coll_part`); what they do is here.
pub(crate) use crate::comm::coll_part::{NodeShm, WindowState};

/// Checked mode's registration of a shared-memory call: its number and what it is.
pub(crate) type Checked = Option<(crate::comm::Tag, crate::coll::check::Call)>;

/// Whether every rank of `comm` is on this node (a pure function of init's identity exchange,
/// so every rank gets the same answer without talking).
pub(crate) fn all_on_node(comm: &Communicator) -> Result<Vec<u32>> {
    let world: Vec<u32> = (0..comm.size())
        .map(|r| comm.world_rank(r))
        .collect::<Result<_>>()?;
    let node_of = &comm.shared().node_of;
    let mine = node_of[world[comm.rank() as usize] as usize];
    if let Some(&w) = world.iter().find(|&&w| node_of[w as usize] != mine) {
        return Err(CommError::InvalidArg(format!(
            "world rank {w} is on another node than this rank: shared memory needs every rank of the communicator on one node"
        )));
    }
    Ok(world)
}

/// Creates a segment of `len` bytes here and maps every member's segment (each may have its
/// own length). Collective. `Ok(None)` when some rank could not create or map (agreed: every
/// rank learns it in a second exchange). Returns the segments by rank with each rank's
/// published `tag` (for `alloc_shared`, its buffer id; its byte count rides along).
pub(crate) fn exchange_segments(
    comm: &Communicator,
    name: &str,
    len: usize,
    tag: u64,
) -> Result<Option<Vec<(Segment, u64, u64)>>> {
    let (n, me) = (comm.size() as usize, comm.rank() as usize);
    let own = comm
        .shared()
        .lock()
        .net()
        .window_create(name, len, MemKind::Host);
    if let Err(e) = &own {
        rlog!(Warn, "COLL", "shared-memory window of {len} bytes: {e}");
    }
    const REC: usize = WINDOW_BLOB + 8 + 8 + 1;
    let mut rec = Vec::with_capacity(REC);
    rec.extend_from_slice(own.as_ref().map_or(&[0u8; WINDOW_BLOB], |w| &w.blob));
    rec.extend_from_slice(&tag.to_le_bytes());
    rec.extend_from_slice(&(len as u64).to_le_bytes());
    rec.push(own.is_ok() as u8);
    let all = comm.allgather_bytes(&rec)?;
    let mut own = own.ok();
    let mut segs = Vec::with_capacity(n);
    let mut ok = own.is_some();
    for (j, r) in all.chunks(REC).enumerate() {
        let u64_at = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().expect("8 bytes"));
        let (blob, t, bytes) = (
            &r[..WINDOW_BLOB],
            u64_at(WINDOW_BLOB),
            u64_at(WINDOW_BLOB + 8),
        );
        if r[REC - 1] == 0 {
            ok = false;
            continue;
        }
        if j == me {
            if let Some(w) = own.take() {
                segs.push((w.seg, t, bytes));
            }
            continue;
        }
        let mapped = comm.shared().lock().net().window_map(blob, MemKind::Host);
        match mapped {
            Ok(s) => segs.push((s, t, bytes)),
            Err(e) => {
                rlog!(Info, "COLL", "cannot map rank {j}'s shared window: {e}");
                ok = false;
            }
        }
    }
    let oks = comm.allgather_bytes(&[ok as u8])?;
    Ok((oks.iter().all(|&b| b == 1) && segs.len() == n).then_some(segs))
}

impl NodeShm {
    /// The windows of `comm`, set up on first use. Collective (on first use every rank must
    /// call it, in the same order relative to other collectives). `Ok(None)` when not every
    /// rank is on this node or mapping failed somewhere (agreed).
    /// Checked mode's call `checked` is recorded before a setup: a rank that planned another
    /// call is then found, and the setup's exchanges fail instead of waiting for it.
    pub(crate) fn get_or_setup(
        comm: &Communicator,
        checked: Checked,
    ) -> Result<Option<Arc<NodeShm>>> {
        // Kept with the communicator's clones, so the windows go with the last of them.
        let windows = comm.coll_part().node_windows();
        if let Some(e) = windows.get() {
            return Ok(e.clone());
        }
        if let Some((tag, call)) = checked {
            comm.check_register(tag, call)?;
        }
        let made = Self::setup(comm)?.map(Arc::new);
        // Two threads setting up at once would be two concurrent collectives on one
        // communicator (erroneous); the first one's windows stay.
        Ok(windows.get_or_init(|| made).clone())
    }

    fn setup(comm: &Communicator) -> Result<Option<NodeShm>> {
        let Ok(world) = all_on_node(comm) else {
            return Ok(None);
        };
        let name = format!("rcomm-coll-ctx{}", comm.ctx());
        let Some(segs) = exchange_segments(comm, &name, WINDOW, 0)? else {
            rlog!(
                Info,
                "COLL",
                "shared-memory collectives unusable on context {}: a rank could not map the windows",
                comm.ctx()
            );
            return Ok(None);
        };
        let segs: Vec<Segment> = segs.into_iter().map(|(s, _, _)| s).collect();
        let bases = segs
            .iter()
            .map(|s| NonNull::new(s.as_ptr()).expect("mappings are not null"))
            .collect();
        Ok(Some(NodeShm {
            segs,
            bases,
            world,
            me: comm.rank() as usize,
            state: Mutex::new(WindowState::default()),
        }))
    }

    fn run(
        &self,
        comm: &Communicator,
        op: &'static str,
        checked: Checked,
        f: impl FnOnce(&mut Proto<'_>, &mut u64) -> PResult<()>,
    ) -> Result<()> {
        let t0 = comm.straggler_start();
        let res = self.run_untimed(comm, op, checked, f);
        comm.straggler_end(t0);
        res
    }

    fn run_untimed(
        &self,
        comm: &Communicator,
        op: &'static str,
        checked: Checked,
        f: impl FnOnce(&mut Proto<'_>, &mut u64) -> PResult<()>,
    ) -> Result<()> {
        let res = self.run_rounds(comm, op, checked, f);
        crate::fr::end_coll(comm.ctx(), &res);
        res
    }

    fn run_rounds(
        &self,
        comm: &Communicator,
        op: &'static str,
        checked: Checked,
        f: impl FnOnce(&mut Proto<'_>, &mut u64) -> PResult<()>,
    ) -> Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &st.broken {
            return Err(CommError::Protocol {
                rank: comm.rank(),
                why: format!(
                    "{op}: an earlier shared-memory collective on this communicator failed ({why}); its windows are out of step"
                ),
            });
        }
        let shared = &comm.shared();
        let world = &self.world;
        // Checked mode: this call's number and what it is (the descriptors carry it); recorded
        // with the engine once we wait long (a rank running another algorithm for another call
        // sends messages, which the engine then matches against it).
        let mut registered = false;
        // The watchdog (RCOMM_TIMEOUT): waiting that long for one rank in one round.
        let mut watch = crate::fr::Watch::new();
        // The rank waited for, and any rank whose failure fails this communicator (it may be
        // the reason the one we wait for is stuck).
        let mut check = |j: usize, waited: Duration| {
            if watch.over_limit(waited) {
                return Err(watch.error(waited, None));
            }
            // Non-blocking collectives never run here, so advancing them takes no lock held.
            shared.coll.advance_inflight();
            let alive = shared.check_alive(&world[j..=j], op);
            if alive.is_err() {
                // The rank we wait for is gone; if it left because another member failed
                // first (it gave up and exited), the launcher's notice names the cause.
                shared.await_notice(
                    |w| comm.in_failure_scope(w),
                    crate::p2p::engine::NOTICE_GRACE,
                );
            }
            let e = shared.lock();
            if let Some(err) = e.revoked_error(comm.ctx(), op) {
                return Err(err);
            }
            match comm.failed_member(&e) {
                Some(w) => Err(e.lost_error(w, op).unwrap_or(CommError::PeerLost {
                    rank: w,
                    host: e.host_of(w).to_string(),
                    op,
                    why: "failed".into(),
                })),
                None => {
                    drop(e);
                    alive?;
                    if let Some((tag, call)) = checked
                        && !registered
                    {
                        registered = true;
                        comm.check_register(tag, call)?;
                    }
                    comm.check_shm_wait(checked.map(|c| c.0))
                }
            }
        };
        let mut p = Proto::new(self.me, &self.bases, &mut check)
            .with_spin(comm.shared().policy.spin.min(SPIN))
            .with_sleep(comm.shared().policy.sleep)
            .with_check(checked.map(|(t, c)| (crate::coll::check::seq_of(t.0), c)));
        p.seen = st.seen;
        let WindowState {
            round,
            seen,
            broken,
        } = &mut *st;
        let res = f(&mut p, round);
        *seen = p.seen;
        let e = match res {
            Ok(()) => return Ok(()),
            Err(ProtoError::Agreed(e)) => return Err(e),
            Err(ProtoError::Check(v)) => return Err(comm.check_verdict_error(&v)),
            Err(ProtoError::Fatal(e @ CommError::CollMismatch { .. })) => {
                // Found through messages, which every member hears of: no need to poison
                // the windows, but they are out of step here.
                *broken = Some(e.to_string());
                return Err(e);
            }
            Err(ProtoError::Fatal(e)) => e,
            Err(ProtoError::Aborted {
                code: TIMED_OUT, ..
            }) => {
                // Another rank's watchdog fired in this same wait: so does ours.
                // (It waited its limit without progress; so, about, did we.)
                let w = crate::fr::Watch::new();
                let waited = w.limit().unwrap_or_default();
                w.error(waited, None)
            }
            Err(ProtoError::Aborted { j, code }) => {
                let lost = u32::try_from(code - 1).ok().filter(|&w| w < u32::MAX);
                match lost.map(|w| shared.check_alive(&[w], op)) {
                    Some(Err(e)) => e,
                    Some(Ok(())) => CommError::PeerLost {
                        rank: lost.unwrap_or(u32::MAX),
                        host: String::from("?"),
                        op,
                        why: format!("rank {j} of the communicator saw it fail"),
                    },
                    None => CommError::Protocol {
                        rank: self.world[j],
                        why: format!("{op}: it gave up on the shared-memory windows"),
                    },
                }
            }
        };
        p.poison(match &e {
            CommError::PeerLost { rank, .. } | CommError::PeerHung { rank, .. } => {
                u64::from(*rank) + 1
            }
            CommError::Timeout { .. } => TIMED_OUT,
            _ => u64::MAX,
        });
        *broken = Some(e.to_string());
        if matches!(e, CommError::Timeout { .. }) {
            shared.report_hang(&e);
        }
        Err(e)
    }

    /// Allreduce of `data` (elements of `elem` bytes), out of place when `input` is given (of
    /// `data`'s length: `data` is then only written). `combine(acc, left)` computes
    /// `acc = left ⊕ acc`; the order is the canonical right fold in rank order,
    /// `acc = a(n−1); for j in (0..n−1).rev() { acc = a(j) ⊕ acc }`, so every rank ends with
    /// identical bytes. `sig` (op and type) and the length are checked equal on every rank
    /// (`Mismatch` otherwise).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn allreduce_sig(
        &self,
        comm: &Communicator,
        data: &mut [u8],
        input: Option<&[u8]>,
        elem: usize,
        sig: u64,
        combine: &dyn Combine,
        checked: Checked,
    ) -> Result<()> {
        if input.is_some_and(|i| i.len() != data.len()) {
            return Err(CommError::InvalidArg(
                "allreduce: input and output lengths differ".into(),
            ));
        }
        self.run(comm, "allreduce (shared memory)", checked, |p, round| {
            // SAFETY: `data` is borrowed exclusively for the call, `input` (as long) shared;
            // a `&mut` and a `&` cannot overlap.
            unsafe {
                p.allreduce(
                    round,
                    data.as_mut_ptr(),
                    data.len(),
                    elem,
                    sig,
                    combine,
                    input.map(|i| i.as_ptr()),
                    None,
                )
            }
        })
    }

    /// Allreduce with every rank's input read in place from its shared buffer; the result
    /// overwrites our buffer (`zc.bases[me]`).
    ///
    /// # Safety
    /// Every `zc.bases[j]` is valid for reads of `total` bytes, `zc.bases[me]` also for
    /// writes, and nothing else in this process accesses our buffer during the call.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn allreduce_zc(
        &self,
        comm: &Communicator,
        total: usize,
        elem: usize,
        sig: u64,
        combine: &dyn Combine,
        zc: &ZeroCopy,
        checked: Checked,
    ) -> Result<()> {
        let data = zc.bases[self.me].as_ptr();
        self.run(
            comm,
            "allreduce (shared memory, in place)",
            checked,
            |p, round| {
                // SAFETY: the caller's contract is this function's.
                unsafe { p.allreduce(round, data, total, elem, sig, combine, None, Some(zc)) }
            },
        )
    }

    /// Broadcast of `data` from `root`.
    pub(crate) fn bcast(
        &self,
        comm: &Communicator,
        data: &mut [u8],
        root: u32,
        checked: Checked,
    ) -> Result<()> {
        if root >= comm.size() {
            return Err(CommError::InvalidRank {
                rank: root,
                size: comm.size(),
            });
        }
        self.run(comm, "bcast (shared memory)", checked, |p, round| {
            p.bcast(round, data, root as usize)
        })
    }

    /// Allgather of equal blocks: `send` from every rank into `recv`, in rank order.
    pub(crate) fn allgather(
        &self,
        comm: &Communicator,
        send: &[u8],
        recv: &mut [u8],
        checked: Checked,
    ) -> Result<()> {
        self.run(comm, "allgather (shared memory)", checked, |p, round| {
            p.allgather(round, send, recv)
        })
    }

    /// Reduce-scatter of equal blocks (`send` n blocks of `recv.len()` bytes).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reduce_scatter(
        &self,
        comm: &Communicator,
        send: &[u8],
        recv: &mut [u8],
        elem: usize,
        sig: u64,
        combine: &dyn Combine,
        checked: Checked,
    ) -> Result<()> {
        self.run(
            comm,
            "reduce_scatter (shared memory)",
            checked,
            |p, round| p.reduce_scatter(round, send, recv, elem, sig, combine),
        )
    }

    /// All-to-all of equal blocks (`send` and `recv` both n blocks).
    pub(crate) fn alltoall(
        &self,
        comm: &Communicator,
        send: &[u8],
        recv: &mut [u8],
        checked: Checked,
    ) -> Result<()> {
        self.run(comm, "alltoall (shared memory)", checked, |p, round| {
            p.alltoall(round, send, recv)
        })
    }
}

impl Communicator {
    /// Allreduce through the node's shared memory, without messages, when every rank of the
    /// communicator runs on this node: each rank reads its peers' inputs from their shared
    /// windows. Returns `Ok(false)`, leaving `buf` untouched, when that path is unusable
    /// (ranks on other nodes, or mapping failed somewhere) — every rank gets the same answer.
    ///
    /// The result is the right fold in rank order, `a(0) ⊕ (a(1) ⊕ (… ⊕ a(n−1)))`, bitwise
    /// identical on every rank. Collective; the first call on a communicator sets up its
    /// windows (about 1 MiB per rank).
    pub fn allreduce_shm<T: Element>(&self, buf: &mut [T], op: Op) -> Result<bool> {
        op.check(T::DTYPE)
            .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        let _fr = crate::fr::Scope::enter();
        let r = super::Reducer::Builtin(op, T::DTYPE);
        crate::fr::begin_coll(
            self.ctx(),
            "allreduce",
            Some(Algo::Shm),
            size_of_val(buf),
            r.codes(),
        );
        self.check_note(
            crate::coll::check::Call::new(crate::coll::check::Kind::Allreduce)
                .elem(size_of::<T>())
                .count(buf.len())
                .reducer(&r),
        );
        let chk = self.check_shm_call()?;
        let Some(node) = NodeShm::get_or_setup(self, chk)? else {
            return Ok(false);
        };
        node.allreduce_sig(
            self,
            bytemuck::cast_slice_mut(buf),
            None,
            size_of::<T>(),
            r.signature(),
            &r,
            chk,
        )?;
        if op == Op::Avg {
            rcomm_kernels::finalize_avg_typed(buf, self.size() as usize)
                .map_err(|e| CommError::InvalidArg(e.to_string()))?;
        }
        Ok(true)
    }

    /// Broadcast from `root` through the node's shared memory; `Ok(false)` (nothing done) when
    /// that path is unusable, as for [`allreduce_shm`](Self::allreduce_shm). Collective.
    pub fn bcast_shm<T: bytemuck::Pod>(&self, buf: &mut [T], root: u32) -> Result<bool> {
        let _fr = crate::fr::Scope::enter();
        crate::fr::begin_coll(
            self.ctx(),
            "bcast",
            Some(Algo::Shm),
            size_of_val(buf),
            (0, 0),
        );
        crate::fr::set_root(self.ctx(), root);
        self.check_note(
            crate::coll::check::Call::new(crate::coll::check::Kind::Bcast)
                .elem(size_of::<T>())
                .count(buf.len())
                .root(root),
        );
        let chk = self.check_shm_call()?;
        let Some(node) = NodeShm::get_or_setup(self, chk)? else {
            return Ok(false);
        };
        node.bcast(self, bytemuck::cast_slice_mut(buf), root, chk)?;
        Ok(true)
    }
}
