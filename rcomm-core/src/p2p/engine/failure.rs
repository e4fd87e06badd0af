//! Failures: peers lost (a transport's loss, the launcher's notice, a hung rank), what fails
//! with them, and the asynchronous operations taken back from the transports first.

use super::*;

impl Engine {
    /// Unlinks a request from matching and from the rendezvous tables, before it fails.
    pub(super) fn drop_req_state(&mut self, req: ReqId) {
        self.st.unpost(req);
        self.take_back(|p| p.req == req, |s| s.req == req);
        self.st.rndv_send.retain(|_, s| s.req != req);
        self.st.rndv_recv.retain(|_, s| s.req != req);
        self.st
            .streaming
            .retain(|t| self.st.rndv_send.contains_key(t));
        self.st.pulls.retain(|p| p.req != req);
        self.st.put_cts.retain(|p| p.0 != req);
    }

    /// Takes back from the transports the asynchronous operations that `get` and `put`
    /// select (GETs and PUTs under way), so their buffers are no longer touched; returns them
    /// (the GETs, and the PUTs' send tokens with the receivers' keys) for the caller to drop
    /// or start again.
    pub(super) fn take_back(
        &mut self,
        get: impl Fn(&Pull) -> bool,
        put: impl Fn(&RndvSend) -> bool,
    ) -> (Vec<Pull>, Vec<PutStart>) {
        let get_toks: Vec<u64> = (self.st.gets.iter())
            .filter(|(_, p)| get(p))
            .map(|(&t, _)| t)
            .collect();
        let mut gets = Vec::with_capacity(get_toks.len());
        for t in get_toks {
            let p = self.st.gets.remove(&t).expect("listed");
            self.net.quiesce(p.peer, t);
            gets.push(p);
        }
        let put_toks: Vec<u64> = (self.st.rndv_send.iter())
            .filter(|(_, s)| s.putting.is_some() && put(s))
            .map(|(&t, _)| t)
            .collect();
        let mut puts = Vec::with_capacity(put_toks.len());
        for t in put_toks {
            let s = self.st.rndv_send.get_mut(&t).expect("listed");
            let key = s.putting.take().expect("putting");
            let peer = s.peer;
            self.net.quiesce(peer, t);
            puts.push(PutStart { send_token: t, key });
        }
        (gets, puts)
    }

    pub(super) fn transport_failed(&mut self, peer: Option<u32>, why: String) {
        match peer {
            Some(p) => self.transport_lost(p, why),
            None => {
                rcomm_runtime::rlog!(Warn, "P2P", "transport error: {why}");
                self.st.error = Some((self.st.me, why));
            }
        }
    }

    /// Marks `peer` as lost: every operation waiting on it (and every wildcard receive) fails.
    pub(crate) fn peer_failed(&mut self, peer: u32, why: String) {
        if peer >= self.st.size || self.st.failed.contains_key(&peer) {
            return;
        }
        rcomm_runtime::rlog!(Info, "P2P", "rank {peer} lost: {why}");
        self.st.failed.insert(peer, why.clone());
        if let Some(q) = self.st.out.remove(&peer) {
            self.st.out_len -= q.len();
        }
        let lost = self.st.active_reqs(|r| r.peer == Some(peer) || r.wildcard);
        for req in lost {
            self.st.unpost(req);
            let op = self.st.req_mut(req).op;
            let e = self.st.lost(peer, op, why.clone());
            self.st.complete(req, Err(e));
        }
        self.take_back(|p| p.peer == peer, |s| s.peer == peer);
        // Its device memory may be gone: close what was imported from it.
        self.net.forget_peer(peer);
        self.st.rndv_send.retain(|_, s| s.peer != peer);
        self.st.rndv_recv.retain(|_, s| s.peer != peer);
        self.st.pulls.retain(|p| p.peer != peer);
        self.st.put_cts.retain(|p| p.1 != peer);
        self.st
            .put_starts
            .retain(|p| self.st.rndv_send.contains_key(&p.send_token));
        // Messages that arrived complete before the peer went stay receivable.
    }

    /// The first peer seen dead by a transport, without waiting.
    pub(crate) fn poll_dead(&mut self) {
        if let Some(p) = self.net.dead_peer() {
            self.transport_lost(
                p,
                "its connection closed (the process exited or died)".into(),
            );
        }
    }

    /// A transport saw `peer`'s connection close. When the launcher killed it (a rank declared
    /// hung), or saw it die, its notice says why and is on its way — it is sent before the
    /// kill — so when something waits on that peer, give it a moment to arrive: the error then
    /// names the cause, not the closed socket. A peer that finished normally sends no notice.
    pub(super) fn transport_lost(&mut self, peer: u32, why: String) {
        self.transport_lost_while(peer, why, false);
    }

    /// A blocking send that found `dest` gone before it made a request: its caller waits on
    /// `dest` as a request would, so the launcher's reason gets the same moment to arrive.
    /// The error names what the communicator lost first, as a collective's does: `dest` often
    /// left because another member failed, and every survivor should point at that one.
    #[cold]
    pub(super) fn send_failed(
        &mut self,
        ctx: u32,
        dest: u32,
        op: &'static str,
        why: String,
    ) -> CommError {
        self.transport_lost_while(dest, why.clone(), true);
        if let Err(e) = self.check_comm(ctx, op) {
            return e;
        }
        self.lost_error(dest, op)
            .unwrap_or_else(|| self.st.lost(dest, op, why))
    }

    /// `err`, the loss of a peer known gone, unless the launcher has since reported a failure
    /// in the communicator of `ctx` (the peer's closed connection was seen first, its cause's
    /// notice taken in only now): then the error names that failure, as a collective's does.
    #[cold]
    pub(super) fn peer_gone(&mut self, ctx: u32, op: &'static str, err: CommError) -> CommError {
        self.take_notices();
        self.check_comm(ctx, op).err().unwrap_or(err)
    }

    fn transport_lost_while(&mut self, peer: u32, why: String, caller_waits: bool) {
        if peer >= self.st.size || self.st.failed.contains_key(&peer) {
            return;
        }
        // Notices not yet taken in may already explain it (the peer gave up on a lost rank
        // and left), and fail what waits on it with the real cause.
        self.take_notices();
        if self.st.failed.contains_key(&peer) {
            return;
        }
        let waited_on = caller_waits
            || self.st.reqs.iter().flatten().any(|r| {
                matches!(r.state, ReqState::Active) && (r.peer == Some(peer) || r.wildcard)
            });
        if waited_on && let Some(nb) = self.notices.clone() {
            // The peer itself, or another rank whose failure made the peer give up and leave:
            // either notice explains what waits on the peer better than a closed socket.
            let known = self.reported.clone();
            nb.wait_for(NOTICE_GRACE, |n| {
                n.failed
                    .iter()
                    .any(|(r, _)| *r == peer || !known.contains(r))
            });
            self.take_notices();
            if self.st.failed.contains_key(&peer) {
                return;
            }
        }
        self.peer_failed(peer, why);
    }

    /// Takes in every failure the launcher has reported so far.
    pub(crate) fn take_notices(&mut self) {
        let Some(nb) = self.notices.clone() else {
            return;
        };
        let n = nb.snapshot();
        for &rank in &n.hung {
            self.mark_hung(rank);
        }
        for (rank, how) in n.failed {
            self.launcher_reports_failed(rank, format!("the launcher reports it {how}"));
        }
    }

    /// The launcher's notices, so a transport's loss can wait for the launcher's reason.
    pub(crate) fn set_notices(
        &mut self,
        n: Option<Arc<rcomm_runtime::bootstrap::kvs::NoticeBoard>>,
    ) {
        self.notices = n;
    }

    pub(crate) fn failed(&self) -> &FastMap<u32, String> {
        &self.st.failed
    }

    /// A rank the launcher reports failed (died, or exited without finalizing) — unlike a
    /// closed connection, which a rank that finalized and left also gives. Every operation on
    /// a communicator it belongs to fails too, also one between two live ranks: either may
    /// wait for something the lost rank would have caused, and nobody would end that wait.
    pub(crate) fn launcher_reports_failed(&mut self, peer: u32, why: String) {
        if peer >= self.st.size || self.reported.contains(&peer) {
            return;
        }
        self.reported.push(peer);
        self.peer_failed(peer, why.clone());
        // The launcher knows why (a closed connection seen first only says that it closed).
        self.st.failed.insert(peer, why.clone());
        let broken = self.st.active_reqs(|r| self.comm_has(r.ctx, peer));
        for req in broken {
            self.drop_req_state(req);
            let op = self.st.req_mut(req).op;
            let e = self.st.lost(peer, op, why.clone());
            self.st.complete(req, Err(e));
        }
    }

    /// Marks `peer` as declared hung by the launcher: errors about it are `PeerHung`.
    pub(crate) fn mark_hung(&mut self, peer: u32) {
        if !self.st.hung.contains(&peer) {
            self.st.hung.push(peer);
        }
    }

    /// Ranks the launcher reported failed, in the order it did.
    pub(crate) fn reported_failed(&self) -> &[u32] {
        &self.reported
    }

    /// Host of world rank `rank` (empty if unknown).
    pub(crate) fn host_of(&self, rank: u32) -> &str {
        self.st.hosts.get(rank as usize).map_or("", String::as_str)
    }

    /// The `PeerLost` error for world rank `rank` if it is known to have failed.
    pub(crate) fn lost_error(&self, rank: u32, op: &'static str) -> Option<CommError> {
        self.st
            .failed
            .get(&rank)
            .map(|why| self.st.lost(rank, op, why.clone()))
    }
}

impl State {
    pub(super) fn check_peer(&self, r: u32, op: &'static str) -> Result<(), CommError> {
        if r >= self.size {
            return Err(CommError::InvalidRank {
                rank: r,
                size: self.size,
            });
        }
        match self.failed.get(&r) {
            Some(why) => Err(self.lost(r, op, why.clone())),
            None => Ok(()),
        }
    }

    pub(super) fn lost(&self, rank: u32, op: &'static str, why: String) -> CommError {
        let host = self.hosts.get(rank as usize).cloned().unwrap_or_default();
        if self.hung.contains(&rank) {
            return CommError::PeerHung {
                rank,
                host,
                op,
                why,
            };
        }
        CommError::PeerLost {
            rank,
            host,
            op,
            why,
        }
    }
}
