//! The direct path of a receive: when nothing already here could take the message first, a
//! receive from a node peer copies the message at the head of that peer's ring straight into
//! the caller's buffer — no request, no pass over the other transports, no matching queues. A
//! blocking receive with nothing else under way waits on the ring that way; a non-blocking one
//! looks once when it is posted. Whenever any of that does not hold it steps
//! aside and the general path (post, progress, wait) runs: MPI's order is the matcher's, and
//! the direct path only takes what the matcher would have handed to this receive.

use super::{Engine, Status};
use crate::p2p::matcher::TagSel;
use rcomm_runtime::wire::ProtoKind;
use rcomm_transport::caps::Features;

/// What one look at the peer's ring found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direct {
    /// The message was received into the buffer.
    Done(Status),
    /// Nothing from the peer yet; looking again is right.
    Empty,
    /// The general path must take this receive (something else is pending, the head message
    /// is not for it, or it needs a protocol: rendezvous, truncation, checked mode).
    General,
}

impl Engine {
    /// One look for a message from `src` (world rank) on context `ctx` matching `tag`, for a
    /// blocking receive about to wait on that ring.
    pub(crate) fn recv_direct(
        &mut self,
        ctx: u32,
        src: u32,
        tag: TagSel,
        room: usize,
        put: &mut impl FnMut(&[u8]),
    ) -> Direct {
        // Anything in flight may need this wait's progress (a queued send, a rendezvous, a
        // receive posted earlier).
        if self.st.active != 0 || self.st.out_len != 0 {
            return Direct::General;
        }
        self.recv_now_into(ctx, src, tag, room, put)
    }

    /// One look for a message from `src` matching `tag` that is already on the ring, for a
    /// receive being posted: it does not wait, so nothing else in flight needs its progress;
    /// the matcher still decides whether the message is this receive's (no receive posted
    /// before it could take it). The payload (at most `room` bytes: a longer message takes the
    /// general path, which reports the truncation) goes to `put`, which copies it out of the
    /// ring: into a buffer, or scattered into a non-contiguous layout.
    #[inline]
    pub(crate) fn recv_now_into(
        &mut self,
        ctx: u32,
        src: u32,
        tag: TagSel,
        room: usize,
        put: &mut impl FnMut(&[u8]),
    ) -> Direct {
        match self.direct_from(ctx, src, tag) {
            Some(seq) => self.take_head(ctx, src, tag, seq, room, put),
            None => Direct::General,
        }
    }

    /// The sequence number the head of `src`'s ring must carry to be this receive's, when
    /// the direct path may take it at all. Inlined into every receive being posted: behind
    /// receives posted earlier (a window of them) it answers in a few loads, with no call.
    #[inline]
    fn direct_from(&self, ctx: u32, src: u32, tag: TagSel) -> Option<u32> {
        let st = &self.st;
        // Failures and checked mode have their own rules.
        if st.hook.is_some()
            || !st.failed.is_empty()
            || !self.reported.is_empty()
            || !self.revoked.is_empty()
            || src >= st.size
        {
            return None;
        }
        // The matcher first: behind receives posted earlier (a window of them) this is one
        // look, and the ring is not read at all.
        let seq = st.ctx.get(&ctx)?.m.direct_seq(src, tag)?;
        self.net
            .features(src)
            .contains(Features::DIRECT_POP)
            .then_some(seq)
    }

    /// Takes the head of `src`'s ring if it is message `seq` and matches.
    fn take_head(
        &mut self,
        ctx: u32,
        src: u32,
        tag: TagSel,
        seq: u32,
        room: usize,
        put: &mut impl FnMut(&[u8]),
    ) -> Direct {
        let mut got = None;
        let took = self.net.pop_from(src, &mut |h, payload| {
            let ok = h.kind == ProtoKind::Eager
                && h.context == ctx
                && h.source == src
                && h.seq == seq
                && h.signature == 0
                && h.len == payload.len() as u64
                && payload.len() <= room
                && match tag {
                    TagSel::Any => true,
                    TagSel::Tag(t) => t == h.tag,
                };
            if ok {
                put(payload);
                got = Some(Status {
                    source: src,
                    tag: h.tag,
                    bytes: payload.len(),
                });
            }
            ok
        });
        match (took, got) {
            (Some(true), Some(status)) => {
                if let Some(c) = self.st.ctx.get_mut(&ctx) {
                    c.m.direct_taken(src, seq);
                }
                Direct::Done(status)
            }
            (None, _) => Direct::Empty,
            _ => Direct::General,
        }
    }
}
