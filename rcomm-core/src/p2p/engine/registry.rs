//! The communicators the engine knows (members by context, for failure propagation),
//! revocation, and the hook checked mode installs.

use super::*;

impl Engine {
    /// Revokes the communicator of context `ctx` (MPI's `MPI_Comm_revoke`), as rank `by` asked:
    /// every pending and future operation on it fails with `Revoked`. The first time, this
    /// rank passes it on to every other member, so all learn it even if `by` dies meanwhile.
    pub(crate) fn revoke(&mut self, ctx: u32, by: u32) {
        let key = ctx & !1;
        if self.revoked.contains_key(&key) {
            return;
        }
        rcomm_runtime::rlog!(Info, "P2P", "communicator {key} revoked by rank {by}");
        self.revoked.insert(key, by);
        let doomed = self.st.active_reqs(|r| r.ctx & !1 == key);
        for req in doomed {
            self.drop_req_state(req);
            let op = self.st.req_mut(req).op;
            self.st.complete(req, Err(CommError::Revoked { op, by }));
        }
        let members: Vec<u32> = match self.comms.get(&key) {
            Some(Some(m)) => m.to_vec(),
            _ => (0..self.st.size).collect(),
        };
        for m in members {
            if m != self.st.me && m != by && !self.st.failed.contains_key(&m) {
                self.st.send_ctl(
                    m,
                    ProtoKind::Control,
                    &[CTL_REVOKE, u64::from(key) << 32 | u64::from(by)],
                );
            }
        }
        self.after_protocol();
    }

    /// Whether the communicator of context `ctx` was revoked.
    pub(crate) fn is_revoked(&self, ctx: u32) -> bool {
        self.revoked.contains_key(&(ctx & !1))
    }

    /// The `Revoked` error for an operation on context `ctx`, if it was revoked.
    pub(crate) fn revoked_error(&self, ctx: u32, op: &'static str) -> Option<CommError> {
        self.revoked
            .get(&(ctx & !1))
            .map(|&by| CommError::Revoked { op, by })
    }

    /// Records the members (world ranks; `None`: every rank) of the communicator whose user
    /// context is `ctx` (its internal one is `ctx + 1`), for failure propagation. A freed
    /// context keeps its entry until it is reused: no operation runs on it meanwhile.
    pub(crate) fn register_comm(&mut self, ctx: u32, members: Option<Arc<[u32]>>) {
        self.comms.insert(ctx & !1, members);
        // A new communicator on a reused context id is not the revoked one that had it.
        self.revoked.remove(&(ctx & !1));
    }

    /// Whether world rank `rank` belongs to the communicator of context `ctx` (unknown
    /// contexts: no).
    pub(super) fn comm_has(&self, ctx: u32, rank: u32) -> bool {
        match self.comms.get(&(ctx & !1)) {
            Some(None) => true,
            Some(Some(m)) => m.contains(&rank),
            None => false,
        }
    }

    /// Fails a new operation on a communicator that lost a member: the others may never do
    /// their part (MPI's revoked communicator; `shrink` makes a working one).
    #[inline]
    pub(super) fn check_comm(&self, ctx: u32, op: &'static str) -> Result<(), CommError> {
        // Both empty in a job without failures: two loads on the hot path.
        if self.revoked.is_empty() && self.reported.is_empty() {
            return Ok(());
        }
        self.check_comm_failed(ctx, op)
    }

    #[cold]
    fn check_comm_failed(&self, ctx: u32, op: &'static str) -> Result<(), CommError> {
        if !self.revoked.is_empty()
            && let Some(&by) = self.revoked.get(&(ctx & !1))
        {
            return Err(CommError::Revoked { op, by });
        }
        if self.reported.is_empty() {
            return Ok(());
        }
        match self.reported.iter().find(|&&r| self.comm_has(ctx, r)) {
            Some(&r) => Err(self.st.lost(
                r,
                op,
                format!(
                    "{}; the communicator lost it (shrink it to go on without)",
                    self.st.failed.get(&r).map_or("failed", String::as_str)
                ),
            )),
            None => Ok(()),
        }
    }
}

/// The hook of checked mode: `coll::check` keeps what each communicator's ranks called and
/// drives it through these.
impl Engine {
    /// Installs `hook` (at init, before any collective).
    pub(crate) fn set_hook(&mut self, hook: Box<dyn Hook>) {
        self.st.hook = Some(hook);
    }

    /// The installed hook, if it is a `T`.
    pub(crate) fn hook<T: Hook>(&self) -> Option<&T> {
        let h: &dyn std::any::Any = self.st.hook.as_deref()?;
        h.downcast_ref()
    }

    /// The installed hook, if it is a `T`.
    pub(crate) fn hook_mut<T: Hook>(&mut self) -> Option<&mut T> {
        let h: &mut dyn std::any::Any = self.st.hook.as_deref_mut()?;
        h.downcast_mut()
    }

    /// Queues what the hook wants sent, and sends what is queued for `peer` now.
    pub(crate) fn flush_hook(&mut self, peer: Option<u32>) {
        self.st.flush_checks();
        if let Some(p) = peer {
            self.flush_peer(p);
        }
    }
}

impl State {
    /// Queues the checks' control messages (progress sends them).
    pub(super) fn flush_checks(&mut self) {
        let State {
            hook,
            out,
            out_len,
            failed,
            me,
            ..
        } = self;
        let Some(c) = hook.as_deref_mut() else {
            return;
        };
        c.drain(&mut |m| {
            // Tokens go to the next rank and votes to the others: never to this one.
            if failed.contains_key(&m.peer) || m.peer == *me {
                return;
            }
            let mut b = [0u8; 32];
            b[..24].copy_from_slice(&m.payload);
            *out_len += 1;
            out.get_or_default(m.peer).push_back(Out {
                hdr: m.hdr,
                payload: OutPayload::Small(b, m.len),
                req: None,
            });
        });
    }
}
