//! The protocols: what arrives (eager data, RTS, CTS, FIN, chunks, completions) and the steps
//! that need the transports (GETs and PUTs to start, queued messages, streaming).

use super::*;

/// A rendezvous record: `vals`, then the key's bytes.
pub(super) fn keyed(vals: &[u64], key: Option<&RKey>) -> OutPayload {
    let Some(k) = key else {
        return small(vals);
    };
    let mut b = Vec::with_capacity(vals.len() * 8 + k.as_bytes().len());
    for v in vals {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(k.as_bytes());
    OutPayload::Keyed(b.into_boxed_slice())
}

/// The key after `words` leading words of a record, if any bytes follow them.
pub(super) fn key_after(b: &[u8], words: usize) -> Option<Option<RKey>> {
    match b.get(words * 8..) {
        None => None,
        Some([]) => Some(None),
        Some(k) => RKey::new(k).map(Some),
    }
}

impl Engine {
    /// Protocol steps that need the transports: single-copy pulls, queued messages, streaming.
    pub(super) fn after_protocol(&mut self) -> usize {
        let mut work = if self.st.landing.is_empty() {
            0
        } else {
            self.st.land()
        };
        while let Some(p) = self.st.pulls.pop() {
            work += 1;
            let region = self.st.req_region(p.req);
            let tok = self.st.token();
            let dst = MemRef {
                len: p.env.len as usize,
                ..region.mem_ref()
            };
            let started = if p.dev {
                self.net.get_on(Lane::Device, p.peer, dst, &p.key, tok)
            } else {
                self.net.get(p.peer, dst, &p.key, tok)
            };
            match started {
                Ok(Tx::Done) => self.st.got(p),
                Ok(Tx::Pending) => {
                    self.st.gets.insert(tok, p);
                }
                Err(TransportError::Unsupported { why, .. }) if p.dev => {
                    // This pair of devices cannot copy directly (or IPC is refused here):
                    // this message stages through host memory; the next one tries again.
                    rcomm_runtime::rlog!(
                        Info,
                        "P2P",
                        "device GET from rank {} refused ({why}); staging through host memory",
                        p.peer
                    );
                    self.st
                        .start_cts(p.req, p.peer, p.env, p.sender_token, false);
                }
                Err(TransportError::Unsupported { why, .. }) => {
                    rcomm_runtime::rlog!(
                        Info,
                        "P2P",
                        "GET from rank {} refused ({why}); using the next protocol",
                        p.peer
                    );
                    if region.is_device() || p.src_dev {
                        // Device memory could not be registered here: this message and the
                        // next stage through host memory; host GET stays.
                        self.st.gdr[p.peer as usize] = false;
                    } else {
                        let b = &mut self.st.bulk[p.peer as usize];
                        *b = b.without(Ops::GET);
                    }
                    let host_only = !region.is_device() && !p.src_dev;
                    self.st
                        .start_cts(p.req, p.peer, p.env, p.sender_token, host_only);
                }
                Err(e) => {
                    let peer = e.peer();
                    self.transport_failed(peer, e.to_string());
                }
            }
        }
        // Receives answering with a PUT: their buffer's key goes in the CTS.
        while let Some((req, peer, env, sender_token)) = self.st.put_cts.pop() {
            work += 1;
            let region = self.st.req_region(req);
            let m = MemRef::host(region.addr(), env.len as usize);
            match self.net.register(peer, &m) {
                Ok(key) => {
                    let releases = self
                        .net
                        .lane_features(Lane::Route, peer)
                        .contains(Features::RELEASES_KEYS);
                    let exposed = releases.then(|| Exposed {
                        peer,
                        m,
                        q: self.st.releases.clone(),
                    });
                    self.st
                        .start_put_cts(req, peer, env, sender_token, key, exposed)
                }
                Err(e) => {
                    rcomm_runtime::rlog!(Info, "P2P", "no PUT key for rank {peer}: {e}");
                    let b = &mut self.st.bulk[peer as usize];
                    *b = b.without(Ops::PUT);
                    self.st.start_cts(req, peer, env, sender_token, true);
                }
            }
        }
        while let Some(ps) = self.st.put_starts.pop() {
            work += 1;
            let Some(s) = self.st.rndv_send.get(&ps.send_token) else {
                continue;
            };
            let (peer, region) = (s.peer, s.region);
            let src = MemRef::host(region.addr(), region.len());
            let started = self
                .net
                .register(peer, &src)
                .and_then(|_| self.net.put(peer, src, &ps.key, ps.send_token));
            match started {
                Ok(Tx::Done) => self.st.put_done(ps.send_token),
                Ok(Tx::Pending) => {
                    if let Some(s) = self.st.rndv_send.get_mut(&ps.send_token) {
                        s.putting = Some(ps.key);
                    }
                }
                Err(e) => self.transport_failed(Some(peer), e.to_string()),
            }
        }
        if self.st.out_len > 0 {
            let peers: Vec<u32> = self
                .st
                .out
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(p, _)| p)
                .collect();
            for p in peers {
                work += self.flush_peer(p);
            }
        }
        let mut i = 0;
        while i < self.st.streaming.len() {
            let token = self.st.streaming[i];
            let Some(s) = self.st.rndv_send.get_mut(&token) else {
                self.st.streaming.swap_remove(i);
                continue;
            };
            let recv_token = s.recv_token.expect("streaming after CTS");
            let mut failed = None;
            while s.offset < s.region.len() {
                // Device memory goes out through a host bounce buffer, a chunk at a time;
                // `offset` counts bytes the transport took.
                let data = if s.region.is_device() {
                    match stage_next(
                        s.stage.get_or_insert_with(Default::default),
                        s.peer,
                        &s.region,
                        s.offset,
                    ) {
                        Ok(Some(d)) => d,
                        // The chunk's copy out of the device is still under way.
                        Ok(None) => break,
                        Err(e) => {
                            failed = Some((s.peer, format!("staging device memory: {e}")));
                            break;
                        }
                    }
                } else {
                    &s.region.bytes()[s.offset..]
                };
                match self
                    .net
                    .send_chunk(s.peer, recv_token, s.offset as u64, data)
                {
                    Ok(0) => break,
                    Ok(n) => {
                        s.offset += n;
                        work += 1;
                    }
                    Err(e) => {
                        failed = Some((s.peer, e.to_string()));
                        break;
                    }
                }
            }
            if let Some((peer, why)) = failed {
                self.transport_failed(Some(peer), why);
                continue;
            }
            if s.offset == s.region.len() {
                let (req, tag, len) = (s.req, s.tag, s.region.len());
                self.st.rndv_send.remove(&token);
                self.st.streaming.swap_remove(i);
                self.st.complete(
                    req,
                    Ok(Status {
                        source: self.st.me,
                        tag,
                        bytes: len,
                    }),
                );
            } else {
                i += 1;
            }
        }
        work
    }

    pub(super) fn flush_peer(&mut self, peer: u32) -> usize {
        let mut sent = 0;
        loop {
            let Some(q) = self.st.out.get_mut(&peer) else {
                return sent;
            };
            let Some(o) = q.front() else { return sent };
            let bytes = match &o.payload {
                OutPayload::Small(b, n) => &b[..*n as usize],
                OutPayload::User(r) => r.bytes(),
                OutPayload::Keyed(b) => b,
            };
            match self.net.try_send(peer, &o.hdr, bytes) {
                Ok(true) => {
                    let o = q.pop_front().expect("front exists");
                    self.st.out_len -= 1;
                    sent += 1;
                    if let Some(req) = o.req {
                        self.st.complete(
                            req,
                            Ok(Status {
                                source: self.st.me,
                                tag: o.hdr.tag,
                                bytes: o.hdr.len as usize,
                            }),
                        );
                    }
                }
                Ok(false) => return sent,
                Err(e) => {
                    self.transport_failed(Some(peer), e.to_string());
                    return sent;
                }
            }
        }
    }

    /// Whether anything is queued that needs progress even with nothing arriving.
    pub(crate) fn busy(&self) -> bool {
        self.net.needs_polling()
            || !self.st.streaming.is_empty()
            || !self.st.landing.is_empty()
            || self.st.out_len > 0
            || !self.st.pulls.is_empty()
            || !self.st.put_starts.is_empty()
            || !self.st.put_cts.is_empty()
            || self.net.has_queued_output()
    }

    /// Largest message this rank receives by single copy (0: never).
    pub(crate) fn single_copy_max(&self) -> usize {
        self.st.cfg.get_max
    }

    /// Sets [`single_copy_max`](Self::single_copy_max): the receiver chooses the protocol of
    /// each large message when it matches it, so this takes effect for every message matched
    /// from now on (init's probe turns single copy off where pipelined copy is faster).
    pub(crate) fn set_single_copy_max(&mut self, max: usize) {
        self.st.cfg.get_max = max;
    }

    /// Whether this rank can read `peer`'s memory by single copy (a GET on shared memory).
    pub(crate) fn single_copy_with(&self, peer: u32) -> bool {
        self.net.features(peer).contains(Features::NODE_LOCAL)
            && self
                .st
                .bulk
                .get(peer as usize)
                .is_some_and(|b| b.contains(Ops::GET))
            && self.st.cfg.get_max > 0
    }

    /// Whether queued work needs this thread to keep spinning: output that waits on a peer no
    /// descriptor reports (shared memory). Output that waits only for room in TCP sockets does
    /// not — a sleeping rank polls those sockets for room ([`Net::wait_fds`]).
    pub(crate) fn needs_cpu(&self) -> bool {
        let net = &self.net;
        // Device copies complete without a descriptor to wait on: they are polled (the
        // device lane's reads, and staging copies of device memory being streamed).
        net.needs_polling()
            || self
                .st
                .streaming
                .iter()
                .filter_map(|t| self.st.rndv_send.get(t))
                .any(|s| s.stage.is_some())
            || !self.st.landing.is_empty()
            || self
                .st
                .streaming
                .iter()
                .filter_map(|t| self.st.rndv_send.get(t))
                .any(|s| !net.output_pollable(s.peer))
            || self
                .st
                .out
                .iter()
                .any(|(p, q)| !q.is_empty() && !net.output_pollable(p))
    }
}

impl State {
    pub(super) fn send_ctl(&mut self, peer: u32, kind: ProtoKind, vals: &[u64]) {
        self.send_ctl_flagged(peer, kind, 0, vals);
    }

    pub(super) fn send_ctl_flagged(&mut self, peer: u32, kind: ProtoKind, flags: u8, vals: &[u64]) {
        let hdr = ctl_header(self.me, kind, flags);
        self.out_len += 1;
        self.out.get_or_default(peer).push_back(Out {
            hdr,
            payload: small(vals),
            req: None,
        });
    }

    /// This rank's `MPI_Issend` to itself: matched like an eager message, but the sending
    /// request `sender` completes only when a receive takes the data.
    pub(super) fn deliver_self_sync(&mut self, hdr: &Header, payload: &[u8], sender: ReqId) {
        let env = Envelope {
            source: self.me,
            tag: hdr.tag,
            len: hdr.len,
        };
        let c = self.ctx.get_or_default(hdr.context);
        match c.m.arrive(&env, hdr.seq) {
            MRoute::Deliver(rid) => {
                self.finish_eager(rid.owner as ReqId, env, payload);
                self.complete_self_sync(sender, env);
            }
            MRoute::Keep => {
                let mut data = self.pool.pop().unwrap_or_default();
                data.clear();
                data.extend_from_slice(payload);
                (self.ctx.get_or_default(hdr.context).m).keep(
                    env,
                    hdr.seq,
                    Stored::SelfSync { data, sender },
                );
            }
        }
    }

    /// A receive took this rank's synchronous message to itself: its send is complete.
    pub(super) fn complete_self_sync(&mut self, sender: ReqId, env: Envelope) {
        self.complete(
            sender,
            Ok(Status {
                source: env.source,
                tag: env.tag,
                bytes: env.len as usize,
            }),
        );
    }

    /// A message arrived from `peer`.
    pub(super) fn deliver(&mut self, peer: u32, hdr: &Header, payload: &[u8]) {
        match hdr.kind {
            ProtoKind::Eager | ProtoKind::RndvRts => {
                if hdr.source != peer {
                    rcomm_runtime::rlog!(
                        Warn,
                        "P2P",
                        "rank {peer} sent a header claiming source {}; dropped",
                        hdr.source
                    );
                    return;
                }
                // The context is the peer's word: one no communicator can have is dropped
                // rather than given matching state (a table of at most MAX_CTX entries).
                if hdr.context >= MAX_CTX {
                    rcomm_runtime::rlog!(
                        Warn,
                        "P2P",
                        "rank {peer} sent a message on context {}, which no communicator has; dropped",
                        hdr.context
                    );
                    return;
                }
                if hdr.signature != 0
                    && let Some(c) = self.hook.as_deref_mut()
                {
                    c.on_data(peer, hdr);
                    self.flush_checks();
                }
                let pool = &mut self.pool;
                let mut stored = || match hdr.kind {
                    ProtoKind::Eager => {
                        let mut v = pool.pop().unwrap_or_default();
                        v.clear();
                        v.extend_from_slice(payload);
                        Some(Stored::Eager(v))
                    }
                    _ => Some(Stored::Rts {
                        sender_token: u64_at(payload, 0)?,
                        key: key_after(payload, 1)?,
                        dev: hdr.flags & RTS_DEV != 0,
                        net: hdr.flags & RTS_NET != 0,
                    }),
                };
                let env = Envelope {
                    source: peer,
                    tag: hdr.tag,
                    len: hdr.len,
                };
                let c = self.ctx.get_or_default(hdr.context);
                match c.m.arrive(&env, hdr.seq) {
                    MRoute::Deliver(rid) => {
                        // The receive was posted with its request as owner.
                        let req = rid.owner as ReqId;
                        match hdr.kind {
                            ProtoKind::Eager => self.finish_eager(req, env, payload),
                            _ => match stored() {
                                Some(s) => self.start_recv(req, env, s),
                                None => self.complete(
                                    req,
                                    Err(CommError::Protocol {
                                        rank: peer,
                                        why: "malformed RTS".into(),
                                    }),
                                ),
                            },
                        }
                    }
                    MRoute::Keep => match stored() {
                        Some(s) => c.m.keep(env, hdr.seq, s),
                        None => rcomm_runtime::rlog!(
                            Warn,
                            "P2P",
                            "malformed RTS from rank {peer}; dropped"
                        ),
                    },
                }
                if !self
                    .ctx
                    .get(&hdr.context)
                    .is_some_and(|c| c.m.holds_early())
                {
                    return;
                }
                let mut released = std::mem::take(&mut self.released);
                if let Some(c) = self.ctx.get_mut(&hdr.context) {
                    c.m.release(peer, &mut |rid, env, s| released.push((rid, env, s)));
                }
                for (rid, env, s) in released.drain(..) {
                    let req = rid.owner as ReqId;
                    self.start_recv(req, env, s);
                }
                self.released = released;
            }
            ProtoKind::RndvCts => {
                if let (Some(st), Some(rt)) = (u64_at(payload, 0), u64_at(payload, 1))
                    && let Some(s) = self.rndv_send.get_mut(&st)
                    && s.peer == peer
                    && s.recv_token.is_none()
                {
                    s.recv_token = Some(rt);
                    match (u64_at(payload, 2), key_after(payload, 3)) {
                        (None, _) => self.streaming.push(st),
                        (Some(CTS_PUT), Some(Some(key))) => self.put_starts.push(PutStart {
                            send_token: st,
                            key,
                        }),
                        _ => rcomm_runtime::rlog!(
                            Warn,
                            "P2P",
                            "malformed CTS from rank {peer}; dropped"
                        ),
                    }
                }
            }
            ProtoKind::RndvFin if hdr.flags == FIN_PUT || hdr.flags == FIN_PUT_FAILED => {
                if let Some(rt) = u64_at(payload, 0)
                    && self
                        .rndv_recv
                        .get(&rt)
                        .is_some_and(|r| r.put && r.peer == peer)
                {
                    let r = self.rndv_recv.remove(&rt).expect("present");
                    let res = if hdr.flags == FIN_PUT {
                        Ok(Status {
                            source: r.env.source,
                            tag: r.env.tag,
                            bytes: r.env.len as usize,
                        })
                    } else {
                        Err(CommError::Protocol {
                            rank: peer,
                            why: "its write into our buffer failed".into(),
                        })
                    };
                    self.complete(r.req, res);
                }
            }
            ProtoKind::RndvFin => {
                if let Some(s) = u64_at(payload, 0).and_then(|t| self.rndv_send.remove(&t)) {
                    let len = s.region.len();
                    self.complete(
                        s.req,
                        Ok(Status {
                            source: self.me,
                            tag: s.tag,
                            bytes: len,
                        }),
                    );
                }
            }
            // Checked mode's control messages have flags of their own (revocations have none):
            // tested first.
            ProtoKind::Control
                if self
                    .hook
                    .as_deref_mut()
                    .is_some_and(|c| c.on_control(peer, hdr, payload)) =>
            {
                self.flush_checks();
            }
            ProtoKind::Control if self.protocol_control(peer, payload) => {}
            ProtoKind::Data | ProtoKind::Credit | ProtoKind::Control => {
                rcomm_runtime::rlog!(Trace, "P2P", "ignored {:?} from rank {peer}", hdr.kind);
            }
        }
    }

    /// Acts on a control message of the protocol itself (revoke, cancel, cancel reply); false
    /// when `payload` is none of them. (Not match guards with `let`: those need Rust 1.95, and
    /// the declared minimum is older.)
    fn protocol_control(&mut self, peer: u32, payload: &[u8]) -> bool {
        let word = u64_at(payload, 0);
        if word == Some(CTL_REVOKE)
            && let Some(w) = u64_at(payload, 1)
            && ((w & 0xffff_ffff) as u32) < self.size
        {
            self.revokes_in
                .push(((w >> 32) as u32, (w & 0xffff_ffff) as u32));
            return true;
        }
        if word == Some(CTL_CANCEL)
            && let (Some(w), Some(token)) = (u64_at(payload, 1), u64_at(payload, 2))
        {
            let answer = self.withdraw(peer, (w >> 32) as u32, w as u32);
            self.send_ctl(peer, ProtoKind::Control, &[CTL_CANCEL_REPLY, token, answer]);
            return true;
        }
        if word == Some(CTL_CANCEL_REPLY)
            && let (Some(token), Some(answer)) = (u64_at(payload, 1), u64_at(payload, 2))
        {
            self.cancel_answered(peer, token, answer);
            return true;
        }
        false
    }

    /// Asks the receiver of cancel `token`'s send to withdraw its message.
    pub(super) fn ask_cancel(&mut self, token: u64) {
        let Some(c) = self.cancels.get(&token) else {
            return;
        };
        let (peer, w) = (c.peer, u64::from(c.ctx) << 32 | u64::from(c.seq));
        self.send_ctl(peer, ProtoKind::Control, &[CTL_CANCEL, w, token]);
    }

    /// `peer` cancels its send of message `seq` on context `ctx`: withdraws it if no receive
    /// matched it yet; the answer (`CANCEL_*`) for the sender.
    fn withdraw(&mut self, peer: u32, ctx: u32, seq: u32) -> u64 {
        if ctx >= MAX_CTX {
            return CANCEL_MATCHED;
        }
        match self.ctx_mut(ctx).m.withdraw(peer, seq) {
            Withdraw::Taken(_, stored) => {
                self.recycle(stored);
                CANCEL_WITHDRAWN
            }
            Withdraw::Matched => CANCEL_MATCHED,
            Withdraw::NotArrived => CANCEL_NOT_ARRIVED,
        }
    }

    /// The receiver answered cancel `token`. A withdrawn rendezvous send lets go of its
    /// buffer (nobody will ask for its data); a message not arrived yet is asked for again.
    fn cancel_answered(&mut self, peer: u32, token: u64, answer: u64) {
        let Some(c) = self.cancels.get_mut(&token).filter(|c| c.peer == peer) else {
            return;
        };
        match answer {
            CANCEL_WITHDRAWN => {
                c.answer = Some(true);
                let req = c.req;
                self.rndv_send.retain(|_, s| s.req != req);
            }
            CANCEL_NOT_ARRIVED => self.ask_cancel(token),
            _ => c.answer = Some(false),
        }
    }

    pub(super) fn finish_eager(&mut self, req: ReqId, env: Envelope, payload: &[u8]) {
        let r = self.req_mut(req);
        r.peer = Some(env.source);
        let region = r.region;
        let res = if (env.len as usize) > region.len() {
            Err(CommError::Truncated {
                buffer: region.len(),
                message: env.len as usize,
            })
        } else {
            match region.write_checked(0, payload) {
                Ok(_) => Ok(Status {
                    source: env.source,
                    tag: env.tag,
                    bytes: payload.len(),
                }),
                Err(e) => Err(CommError::Device {
                    op: "recv",
                    rank: self.me,
                    why: e.to_string(),
                }),
            }
        };
        self.complete(req, res);
    }

    /// A receive matched a message (arriving, or stored earlier).
    pub(super) fn start_recv(&mut self, req: ReqId, env: Envelope, stored: Stored) {
        self.req_mut(req).peer = Some(env.source);
        match stored {
            Stored::Eager(data) => {
                self.finish_eager(req, env, &data);
                if self.pool.len() < POOL_MAX && data.capacity() <= POOL_BUF_MAX {
                    self.pool.push(data);
                }
            }
            Stored::SelfSync { data, sender } => {
                self.finish_eager(req, env, &data);
                self.complete_self_sync(sender, env);
                if self.pool.len() < POOL_MAX && data.capacity() <= POOL_BUF_MAX {
                    self.pool.push(data);
                }
            }
            Stored::Rts {
                sender_token,
                key,
                dev,
                net,
            } => {
                let region = self.req_region(req);
                let cap = region.len();
                if env.len as usize > cap {
                    // Truncation consumes the message (MPI_ERR_TRUNCATE): release the sender.
                    self.send_ctl(env.source, ProtoKind::RndvFin, &[sender_token]);
                    self.complete(
                        req,
                        Err(CommError::Truncated {
                            buffer: cap,
                            message: env.len as usize,
                        }),
                    );
                } else if env.source == self.me {
                    unreachable!("self messages are eager");
                } else if env.len == 0 {
                    // Nothing to move (a synchronous send of no bytes): matched is done.
                    self.send_ctl(env.source, ProtoKind::RndvFin, &[sender_token]);
                    self.complete(
                        req,
                        Ok(Status {
                            source: env.source,
                            tag: env.tag,
                            bytes: 0,
                        }),
                    );
                } else if let Some(key) = key
                    && dev
                    && !net
                {
                    // Device memory on this node: the device lane pulls it (into device or
                    // host memory), whatever its size; a pair it cannot serve falls back.
                    self.pulls.push(Pull {
                        req,
                        peer: env.source,
                        env,
                        sender_token,
                        key,
                        dev: true,
                        src_dev: true,
                    });
                } else if let Some(key) = key
                    && (!region.is_device() || self.gdr[env.source as usize])
                    && self.bulk[env.source as usize].contains(Ops::GET)
                    && env.len as usize <= self.cfg.get_max
                {
                    // Host memory by the host lane's GET; device memory on either side where
                    // the lane's NIC reaches it (GPUDirect RDMA).
                    self.pulls.push(Pull {
                        req,
                        peer: env.source,
                        env,
                        sender_token,
                        key,
                        dev: false,
                        src_dev: dev,
                    });
                } else {
                    // PUT is host memory to host memory only: device memory on either side
                    // streams through host staging.
                    let host_only = !dev && !region.is_device();
                    self.start_cts(req, env.source, env, sender_token, host_only);
                }
            }
        }
    }

    /// A GET completed: release the sender, complete the receive.
    pub(super) fn got(&mut self, p: Pull) {
        self.send_ctl(p.peer, ProtoKind::RndvFin, &[p.sender_token]);
        self.complete(
            p.req,
            Ok(Status {
                source: p.env.source,
                tag: p.env.tag,
                bytes: p.env.len as usize,
            }),
        );
    }

    /// The PUT of send `token` completed: tell the receiver, complete the send.
    pub(super) fn put_done(&mut self, token: u64) {
        let Some(s) = self.rndv_send.remove(&token) else {
            return;
        };
        let rt = s.recv_token.expect("a PUT follows a CTS");
        self.send_ctl_flagged(s.peer, ProtoKind::RndvFin, FIN_PUT, &[rt]);
        self.complete(
            s.req,
            Ok(Status {
                source: self.me,
                tag: s.tag,
                bytes: s.region.len(),
            }),
        );
    }

    /// Answers an RTS that is not pulled: a CTS asking for a PUT where the lane offers it
    /// (its key comes from the transport, so it is made in `after_protocol`), else for STREAM.
    pub(super) fn start_cts(
        &mut self,
        req: ReqId,
        peer: u32,
        env: Envelope,
        sender_token: u64,
        host_only: bool,
    ) {
        if host_only && self.bulk[peer as usize].contains(Ops::PUT) {
            self.put_cts.push((req, peer, env, sender_token));
            return;
        }
        let token = self.rndv_recv_start(req, peer, env, false);
        self.send_ctl(peer, ProtoKind::RndvCts, &[sender_token, token]);
    }

    /// Registers the receive `req` as waiting for `peer`'s data (by PUT or chunks); its token.
    pub(super) fn rndv_recv_start(
        &mut self,
        req: ReqId,
        peer: u32,
        env: Envelope,
        put: bool,
    ) -> u64 {
        let token = self.token();
        self.rndv_recv.insert(
            token,
            RndvRecv {
                req,
                peer,
                env,
                received: 0,
                put,
                stage: StageIn::default(),
                exposed: None,
            },
        );
        token
    }

    pub(super) fn start_put_cts(
        &mut self,
        req: ReqId,
        peer: u32,
        env: Envelope,
        sender_token: u64,
        key: RKey,
        exposed: Option<Exposed>,
    ) {
        let token = self.rndv_recv_start(req, peer, env, true);
        if let Some(r) = self.rndv_recv.get_mut(&token) {
            r.exposed = exposed;
        }
        self.out_len += 1;
        self.out.get_or_default(peer).push_back(Out {
            hdr: ctl_header(self.me, ProtoKind::RndvCts, 0),
            payload: keyed(&[sender_token, token, CTS_PUT], Some(&key)),
            req: None,
        });
    }

    pub(super) fn chunk(&mut self, peer: u32, token: u64, offset: u64, data: &[u8]) {
        if let Some(dst) = self.chunk_dest(peer, token, offset, data.len()) {
            dst.copy_from_slice(data);
            self.chunk_landed(token, offset, data.len());
        }
    }

    /// `len` bytes at `offset` of receive `token` are in place (in its bounce buffer, for
    /// device memory, whence they go to the device now).
    pub(super) fn chunk_landed(&mut self, token: u64, offset: u64, len: usize) {
        let Some(r) = self.rndv_recv.get(&token) else {
            return;
        };
        let region = self.reqs[r.req].as_ref().expect("live request").region;
        if region.is_device() {
            let r = self.rndv_recv.get_mut(&token).expect("present");
            let dst = region.addr() + offset;
            match r.stage.landed(r.peer, dst, len) {
                // On its way to the device: counted when its copy is done (`land`).
                Ok(true) => {
                    if !self.landing.contains(&token) {
                        self.landing.push(token);
                    }
                    return;
                }
                Ok(false) => {}
                Err(e) => return self.stage_failed(token, e),
            }
        }
        self.chunk_written(token, len);
    }

    /// Receive `token` fails: its device staging broke.
    fn stage_failed(&mut self, token: u64, e: rcomm_transport::gpu::GpuError) {
        if let Some(r) = self.rndv_recv.remove(&token) {
            self.complete(
                r.req,
                Err(CommError::Device {
                    op: "recv",
                    rank: self.me,
                    why: e.to_string(),
                }),
            );
        }
    }

    /// Polls the staged chunks on their way to device receive buffers; a receive whose last
    /// bytes landed completes.
    pub(super) fn land(&mut self) -> usize {
        let mut work = 0;
        let mut i = 0;
        while i < self.landing.len() {
            let token = self.landing[i];
            let Some(r) = self.rndv_recv.get_mut(&token) else {
                self.landing.swap_remove(i);
                continue;
            };
            match r.stage.poll() {
                Ok(0) => {}
                Ok(n) => {
                    work += 1;
                    self.chunk_written(token, n);
                }
                Err(e) => {
                    self.stage_failed(token, e);
                    continue;
                }
            }
            match self.rndv_recv.get(&token) {
                Some(r) if r.stage.landing() => i += 1,
                _ => {
                    self.landing.swap_remove(i);
                }
            }
        }
        work
    }

    /// The bytes of receive `token`'s buffer that `len` bytes at `offset` from `peer` go to;
    /// `None` (after failing the receive if the chunk does not belong there) to drop them.
    pub(super) fn chunk_dest(
        &mut self,
        peer: u32,
        token: u64,
        offset: u64,
        len: usize,
    ) -> Option<&mut [u8]> {
        let Some(r) = self.rndv_recv.get(&token) else {
            rcomm_runtime::rlog!(
                Trace,
                "P2P",
                "chunk for unknown token {token} from rank {peer}"
            );
            return None;
        };
        let region = self.reqs[r.req].as_ref().expect("live request").region;
        let fits = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= r.env.len && end <= region.len() as u64);
        if r.peer != peer || !fits {
            let req = r.req;
            self.rndv_recv.remove(&token);
            self.complete(
                req,
                Err(CommError::Protocol {
                    rank: peer,
                    why: "data chunk outside the message".into(),
                }),
            );
            return None;
        }
        let o = offset as usize;
        let req = r.req;
        if self.reqs[req]
            .as_ref()
            .expect("live request")
            .region
            .is_device()
        {
            let r = self.rndv_recv.get_mut(&token).expect("present");
            match r.stage.room(len) {
                // Bytes of an earlier chunk landed while making room: received now (not the
                // whole message: this chunk is still to come).
                Ok(n) => r.received += n as u64,
                Err(e) => {
                    self.stage_failed(token, e);
                    return None;
                }
            }
            let r = self.rndv_recv.get_mut(&token).expect("present");
            return Some(r.stage.slot(len));
        }
        let region = &self.reqs[req].as_ref().expect("live request").region;
        Some(&mut region.bytes_mut()[o..o + len])
    }

    /// `len` more bytes of receive `token` are in; completes it when all are.
    pub(super) fn chunk_written(&mut self, token: u64, len: usize) {
        let Some(r) = self.rndv_recv.get_mut(&token) else {
            return;
        };
        r.received += len as u64;
        if r.received == r.env.len {
            let r = self.rndv_recv.remove(&token).expect("present");
            self.complete(
                r.req,
                Ok(Status {
                    source: r.env.source,
                    tag: r.env.tag,
                    bytes: r.env.len as usize,
                }),
            );
        }
    }
}

pub(super) fn ctl_header(me: u32, kind: ProtoKind, flags: u8) -> Header {
    Header {
        context: 0,
        source: me,
        seq: 0,
        tag: 0,
        len: 0,
        kind,
        flags,
        coll_seq: 0,
        signature: 0,
    }
}

impl Deliver for State {
    fn completed(&mut self, peer: u32, tok: u64, res: Result<(), TransportError>) {
        if let Some(p) = self.gets.remove(&tok) {
            match res {
                Ok(()) => self.got(p),
                Err(e) => {
                    // Nothing usable arrived: release the sender, fail the receive.
                    self.send_ctl(p.peer, ProtoKind::RndvFin, &[p.sender_token]);
                    self.complete(
                        p.req,
                        Err(CommError::Protocol {
                            rank: peer,
                            why: format!("reading its buffer failed: {e}"),
                        }),
                    );
                }
            }
        } else if self
            .rndv_send
            .get(&tok)
            .is_some_and(|s| s.putting.is_some() && s.peer == peer)
        {
            match res {
                Ok(()) => self.put_done(tok),
                Err(e) => {
                    let s = self.rndv_send.remove(&tok).expect("present");
                    let rt = s.recv_token.expect("a PUT follows a CTS");
                    self.send_ctl_flagged(s.peer, ProtoKind::RndvFin, FIN_PUT_FAILED, &[rt]);
                    self.complete(
                        s.req,
                        Err(CommError::Protocol {
                            rank: peer,
                            why: format!("writing into its buffer failed: {e}"),
                        }),
                    );
                }
            }
        }
    }

    fn incoming(&mut self, peer: u32, inc: Incoming<'_>) {
        match inc {
            Incoming::Msg(hdr, payload) => self.deliver(peer, hdr, payload),
            Incoming::Chunk {
                token,
                offset,
                data,
            } => self.chunk(peer, token, offset, data),
        }
    }

    fn place(&mut self, peer: u32, token: u64, offset: u64, len: usize) -> Option<&mut [u8]> {
        self.chunk_dest(peer, token, offset, len)
    }

    fn placed(&mut self, _peer: u32, token: u64, offset: u64, len: usize) {
        self.chunk_landed(token, offset, len);
    }
}

/// The staged bytes of `region` from `offset` to the end of its chunk, once they are in host
/// memory (`None`: the copy is under way); starts the copies of this chunk and the next.
fn stage_next<'a>(
    st: &'a mut Stage,
    peer: u32,
    region: &Region,
    offset: usize,
) -> Result<Option<&'a [u8]>, rcomm_transport::gpu::GpuError> {
    let g = rcomm_transport::gpu::gpu()?;
    let len = region.len();
    let chunk = offset / STAGE_BYTES;
    let chunk_len = |k: usize| STAGE_BYTES.min(len - k * STAGE_BYTES);
    // Chunk k may use buffer k % 2 once chunk k - 2 is sent: k <= chunk + 1.
    while st.issued <= chunk + 1 && st.issued * STAGE_BYTES < len {
        let k = st.issued;
        let b = k % 2;
        if st.bufs[b].is_none() {
            st.bufs[b] = Some(StageBuf::take(g)?);
        }
        let dst = st.bufs[b].as_ref().expect("taken").addr();
        let src = region.addr() + (k * STAGE_BYTES) as u64;
        st.copies[b] = Some(g.copy_dtoh_async(peer, dst, src, chunk_len(k))?);
        st.issued += 1;
    }
    let b = chunk % 2;
    if let Some(p) = &st.copies[b] {
        if !g.query(p)? {
            return Ok(None);
        }
        // Done, as the query said: released without a host wait.
        g.release(st.copies[b].take().expect("present"))?;
    }
    let within = offset - chunk * STAGE_BYTES;
    let buf = st.bufs[b].as_ref().expect("taken when issued");
    Ok(Some(&buf.bytes(chunk_len(chunk))[within..]))
}
