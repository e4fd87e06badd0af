//! Checked collectives (`RCOMM_CHECK=1`): every rank verifies that all ranks made the same
//! collective call — same operation, element type, count, reduction op and root.
//!
//! **Signature.** A [`Call`] describes what every rank must pass alike to one collective call:
//! its kind, element size and type, reduction op, root and count (for calls whose per-rank
//! counts must agree, such as `allgatherv`, the whole counts array, hashed). Its 64-bit hash,
//! the *signature*, travels in the `signature` slot of the header of every message the call
//! sends; the `coll_seq` slot carries the communicator's *generation* (an id its members agree
//! on when it is created, so a later communicator that reuses the context id is told apart);
//! the tag names the call (the communicator's collective sequence number).
//!
//! **Detection.** The engine compares the signature of every arriving collective message with
//! this rank's own for that call ([`Checks::on_data`]): at once if this rank has started the
//! call, else when it does ([`Checks::register`]). Ranks whose calls differ may never exchange
//! a message (different counts pick different algorithms, a root is someone else elsewhere,
//! one rank runs a shared-memory algorithm and another sends messages), so every rank that
//! starts a message-based call also sends a *token* — an empty control message with its
//! signature — to the next rank (rank + 1 mod n): if any rank differs, some rank's left
//! neighbour differs from it, and that rank detects the mismatch. Shared-memory collectives
//! compare signatures in their shared descriptors, which every rank reads.
//!
//! **Verdict.** A rank that detects a mismatch sends its own call to every member (a *vote*);
//! a rank that receives a vote sends its own, once. With every vote in (or after
//! [`VOTE_WAIT`]), each rank takes the signature most ranks have as the intended call and names
//! the others ([`decide`]). The collective that detects fails with
//! [`CommError::CollMismatch`], and so does every later collective on the communicator (its
//! ranks are out of step): a rank whose part of the mismatched call completed before it heard
//! of the mismatch gets the error from its next collective on that communicator.

use super::reduce::Reducer;
use super::seq::later;
pub(crate) use super::seq::seq_of;
use crate::comm::{Communicator, Tag};
use crate::p2p::engine::Engine;
use crate::{CommError, Result};
use rcomm_kernels::{Dtype, Op};
use rcomm_runtime::fastmap::FastMap;
use rcomm_runtime::wire::{Header, ProtoKind};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a rank that knows of a mismatch waits for every member's vote before it names
/// the disagreeing ranks from the votes it has.
pub(crate) const VOTE_WAIT: Duration = Duration::from_secs(3);
/// Header flags of the check's control messages (kind [`ProtoKind::Control`]).
pub(crate) const FLAG_TOKEN: u8 = 0xc1;
/// A vote: the sender's call in the payload, its signature in the header.
pub(crate) const FLAG_VOTE: u8 = 0xc2;
/// Calls remembered per communicator (to answer votes and check late arrivals).
const HIST: usize = 64;
/// Arrivals kept for calls this rank has not started yet.
const EARLY_MAX: usize = 4096;
/// Set once any communicator of this process failed a check: from then on shared-memory
/// calls record theirs before they start (otherwise only once they wait long).
static ANY_FAILED: AtomicBool = AtomicBool::new(false);

/// No root.
pub(crate) const NO_ROOT: u32 = u32::MAX;
/// The count field holds a hash of a counts array whose entries differ.
const VEC: u64 = 1 << 63;

/// The kinds of collective a signature tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub(crate) enum Kind {
    Unknown = 0,
    Allreduce,
    Bcast,
    Reduce,
    Allgather,
    ReduceScatter,
    Gather,
    Scatter,
    Alltoall,
    Scan,
    Exscan,
    Barrier,
}

impl Kind {
    const ALL: [Kind; 12] = [
        Kind::Unknown,
        Kind::Allreduce,
        Kind::Bcast,
        Kind::Reduce,
        Kind::Allgather,
        Kind::ReduceScatter,
        Kind::Gather,
        Kind::Scatter,
        Kind::Alltoall,
        Kind::Scan,
        Kind::Exscan,
        Kind::Barrier,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Unknown => "collective",
            Kind::Allreduce => "allreduce",
            Kind::Bcast => "bcast",
            Kind::Reduce => "reduce",
            Kind::Allgather => "allgather",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::Gather => "gather",
            Kind::Scatter => "scatter",
            Kind::Alltoall => "alltoall",
            Kind::Scan => "scan",
            Kind::Exscan => "exscan",
            Kind::Barrier => "barrier",
        }
    }
}

/// What every rank must pass alike to one collective call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Call {
    pub kind: Kind,
    /// 0: no reduction; 1 + built-in [`Op`]; `0xfe`/`0xff`: a user op (non-commutative or
    /// commutative; user closures cannot be compared across processes).
    pub op: u8,
    /// 0: no built-in type (only the element size is known); else 1 + [`Dtype`].
    pub dtype: u8,
    /// Element size in bytes (0 when the call has none).
    pub elem: u32,
    /// The root, or [`NO_ROOT`].
    pub root: u32,
    /// Element count; [`VEC`] | hash for a counts array whose entries differ.
    pub count: u64,
}

impl Call {
    pub(crate) const fn new(kind: Kind) -> Self {
        Self {
            kind,
            op: 0,
            dtype: 0,
            elem: 0,
            root: NO_ROOT,
            count: 0,
        }
    }

    pub(crate) fn elem(mut self, bytes: usize) -> Self {
        self.elem = bytes as u32;
        self
    }

    pub(crate) fn count(mut self, n: usize) -> Self {
        self.count = n as u64 & !VEC;
        self
    }

    /// Counts every rank passes alike (per-rank blocks): the count when they are all equal,
    /// else a hash of the array.
    pub(crate) fn counts(self, c: &[usize]) -> Self {
        match c.first() {
            Some(&f) if c.iter().any(|&x| x != f) => {
                let mut h = 0x243f_6a88_85a3_08d3u64;
                for &x in c {
                    h = mix(h ^ x as u64);
                }
                Self {
                    count: VEC | h >> 1,
                    ..self
                }
            }
            f => self.count(f.copied().unwrap_or(0)),
        }
    }

    pub(crate) fn root(mut self, r: u32) -> Self {
        self.root = r;
        self
    }

    pub(crate) fn reducer(mut self, r: &Reducer) -> Self {
        match r {
            Reducer::Builtin(op, d) => {
                self.op = 1 + *op as u8;
                self.dtype = 1 + *d as u8;
            }
            Reducer::User { commutative, .. } => {
                self.op = 0xfe + u8::from(*commutative);
                self.dtype = 0;
            }
        }
        self
    }

    /// The call as three words (descriptors and votes carry it).
    pub(crate) fn words(&self) -> [u64; 3] {
        [
            self.count,
            u64::from(self.elem) | u64::from(self.root) << 32,
            self.kind as u64 | u64::from(self.op) << 8 | u64::from(self.dtype) << 16,
        ]
    }

    pub(crate) fn from_words(w: [u64; 3]) -> Option<Self> {
        let kind = *Kind::ALL.get((w[2] & 0xff) as usize)?;
        Some(Self {
            kind,
            op: (w[2] >> 8) as u8,
            dtype: (w[2] >> 16) as u8,
            elem: w[1] as u32,
            root: (w[1] >> 32) as u32,
            count: w[0],
        })
    }

    fn encode(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        for (i, w) in self.words().iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        let w = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        Self::from_words([w(0)?, w(1)?, w(2)?])
    }

    /// The signature: a hash of the call, never 0 (0 means "unchecked").
    pub(crate) fn sig(&self) -> u64 {
        let [a, b, c] = self.words();
        let h = mix(mix(mix(0x9e37_79b9_7f4a_7c15 ^ a) ^ b) ^ c);
        h.max(1)
    }

    /// The call as a user wrote it, e.g. `allreduce(count 100, f32, sum)`.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !matches!(self.kind, Kind::Barrier | Kind::Unknown) {
            if self.count & VEC != 0 {
                parts.push(format!("counts #{:08x}", self.count as u32));
            } else if !matches!(self.kind, Kind::Gather | Kind::Scatter | Kind::Alltoall) {
                parts.push(format!("count {}", self.count));
            }
            match Dtype::ALL.get(usize::from(self.dtype).wrapping_sub(1)) {
                Some(d) => parts.push(d.name().to_string()),
                None => parts.push(format!("{}-byte elements", self.elem)),
            }
        }
        match self.op {
            0 => {}
            0xfe => parts.push("user op (non-commutative)".into()),
            0xff => parts.push("user op (commutative)".into()),
            o => match Op::ALL.get(usize::from(o) - 1) {
                Some(op) => parts.push(op.name().to_string()),
                None => parts.push(format!("op #{o}")),
            },
        }
        if self.root != NO_ROOT {
            parts.push(format!("root {}", self.root));
        }
        format!("{}({})", self.kind.name(), parts.join(", "))
    }

    /// The fields in which `other` differs from this call.
    pub(crate) fn differs(&self, other: &Call) -> Vec<&'static str> {
        let mut d = Vec::new();
        if self.kind != other.kind {
            d.push("collective");
        }
        if self.count != other.count {
            d.push("count");
        }
        if self.dtype != other.dtype || self.elem != other.elem {
            d.push("element type");
        }
        if self.op != other.op {
            d.push("reduction op");
        }
        if self.root != other.root {
            d.push("root");
        }
        d
    }
}

/// A 64-bit finaliser (splitmix64's).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A generation from the bytes every member gathered when a communicator was created.
pub(crate) fn generation(agreed: &[u8]) -> u32 {
    let mut h = 0x6a09_e667_f3bc_c909u64;
    for c in agreed.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = mix(h ^ u64::from_le_bytes(w));
    }
    (h as u32).max(1)
}

thread_local! {
    /// The call the last plan was made for, taken by the code that runs it.
    static NOTED: Cell<Option<Call>> = const { Cell::new(None) };
}

/// Notes the call about to run on this thread (the planning functions do, in checked mode).
pub(crate) fn note(c: Call) {
    NOTED.set(Some(c));
}

/// Takes the call noted for the collective about to run.
pub(crate) fn take() -> Call {
    NOTED.take().unwrap_or(Call::new(Kind::Unknown))
}

pub(crate) use crate::p2p::hook::Stamp;

/// One member's answer: its signature (0: it does not know the call) and its call.
pub(crate) type Vote = Option<(u64, Option<Call>)>;

/// Who called what, decided from the votes.
#[derive(Debug, Clone)]
pub(crate) struct Verdict {
    /// The communicator's call number.
    pub seq: u32,
    /// This rank's call.
    pub mine: Option<Call>,
    /// The call most ranks made, and those ranks.
    pub majority: Option<(Option<Call>, Vec<u32>)>,
    /// The ranks that made another call, grouped by call.
    pub odd: Vec<(Option<Call>, Vec<u32>)>,
    /// Ranks that did not answer (or no longer knew the call).
    pub silent: Vec<u32>,
}

/// Groups the votes by signature; the largest group is the intended call (a tie goes to the
/// group with the lowest rank), every other group disagrees with it.
pub(crate) fn decide(seq: u32, me: u32, votes: &[Vote]) -> Verdict {
    let mut groups: Vec<(u64, Option<Call>, Vec<u32>)> = Vec::new();
    let mut silent = Vec::new();
    for (r, v) in votes.iter().enumerate() {
        match v {
            Some((sig, call)) if *sig != 0 => match groups.iter_mut().find(|g| g.0 == *sig) {
                Some(g) => {
                    g.1 = g.1.or(*call);
                    g.2.push(r as u32);
                }
                None => groups.push((*sig, *call, vec![r as u32])),
            },
            _ => silent.push(r as u32),
        }
    }
    // Stable sort: among equal sizes the group met first holds the lowest rank.
    groups.sort_by_key(|g| std::cmp::Reverse(g.2.len()));
    let mine = votes.get(me as usize).copied().flatten().and_then(|v| v.1);
    let mut it = groups.into_iter().map(|(_, c, r)| (c, r));
    let majority = it.next();
    Verdict {
        seq,
        mine,
        majority,
        odd: it.collect(),
        silent,
    }
}

impl Verdict {
    /// The disagreeing ranks.
    pub(crate) fn ranks(&self) -> Vec<u32> {
        let mut r: Vec<u32> = self
            .odd
            .iter()
            .flat_map(|(_, r)| r.iter().copied())
            .collect();
        r.sort_unstable();
        r
    }

    /// The error, naming ranks with `who` (e.g. `3 (world rank 5 on host h)`).
    pub(crate) fn error(&self, who: &dyn Fn(u32) -> String) -> CommError {
        let list = |ranks: &[u32]| -> String {
            let names: Vec<String> = ranks.iter().map(|&r| who(r)).collect();
            let s = if ranks.len() == 1 { "" } else { "s" };
            format!("rank{s} {}", names.join(", "))
        };
        let desc = |c: &Option<Call>| c.map_or_else(|| "an unknown call".into(), |c| c.describe());
        let mut fields: Vec<&'static str> = Vec::new();
        let mut parts = Vec::new();
        let maj = self.majority.as_ref();
        for (call, ranks) in &self.odd {
            let diff = match (call, maj.and_then(|m| m.0)) {
                (Some(a), Some(b)) => b.differs(a),
                _ => Vec::new(),
            };
            for f in &diff {
                if !fields.contains(f) {
                    fields.push(f);
                }
            }
            let what = if diff.is_empty() {
                String::new()
            } else {
                format!(" ({} differs)", diff.join(", "))
            };
            parts.push(format!("{} called {}{what}", list(ranks), desc(call)));
        }
        let majority = match maj {
            Some((c, r)) if !self.odd.is_empty() => {
                format!(", but {} called {}", list(r), desc(c))
            }
            _ => String::new(),
        };
        let silent = if self.silent.is_empty() {
            String::new()
        } else {
            format!(
                "; no answer from {} within {} s",
                list(&self.silent),
                VOTE_WAIT.as_secs()
            )
        };
        let detail = format!(
            "collective call {} on this communicator differs between ranks (RCOMM_CHECK): {}{majority}{silent}; every rank must make the same collective calls in the same order with the same count, element type, reduction op and root",
            self.seq,
            if parts.is_empty() {
                "the ranks' calls could not be compared".to_string()
            } else {
                parts.join("; ")
            },
        );
        CommError::CollMismatch {
            call: desc(&self.mine),
            seq: self.seq,
            ranks: self.ranks(),
            fields,
            detail,
        }
    }
}

/// A control message the checks want sent.
pub(crate) type OutMsg = crate::p2p::hook::HookMsg;

/// Something that arrived for a call this rank has not started (or a communicator it has not
/// used yet).
#[derive(Debug, Clone, Copy)]
struct Early {
    epoch: u32,
    tag: i32,
    from: u32,
    sig: u64,
    /// `Some` for a vote: the sender's call, if it knew it.
    vote: Option<Option<Call>>,
}

#[derive(Debug)]
struct Bad {
    tag: i32,
    votes: Vec<Vote>,
    since: Instant,
    voted: bool,
    verdict: Option<Verdict>,
}

/// The checks of one communicator (one internal context, one generation).
#[derive(Debug, Default)]
struct CtxState {
    epoch: u32,
    live: bool,
    /// World ranks of the members, by communicator rank.
    members: Vec<u32>,
    rank_of: FastMap<u32, u32>,
    me: u32,
    /// Calls started, by tag modulo [`HIST`]: (tag, signature, call).
    hist: Vec<(i32, u64, Call)>,
    last: Option<i32>,
    early: Vec<Early>,
    bad: Option<Bad>,
}

impl CtxState {
    fn lookup(&self, tag: i32) -> Option<(u64, Call)> {
        let (t, s, c) = *self.hist.get(tag.rem_euclid(HIST as i32) as usize)?;
        (t == tag).then_some((s, c))
    }

    fn future(&self, tag: i32) -> bool {
        self.last.is_none_or(|l| later(tag, l))
    }

    fn keep_early(&mut self, x: Early) {
        if self.early.len() >= EARLY_MAX {
            self.early.remove(0);
        }
        self.early.push(x);
    }
}

/// The engine's side of checked mode: what each communicator's ranks called, and what
/// arrived. Pure state: control messages to send are left in [`outbox`](Self::outbox).
#[derive(Debug, Default)]
pub(crate) struct Checks {
    /// This process's world rank.
    me: u32,
    ctxs: FastMap<u32, CtxState>,
    /// Sub-communicator context → parent context: a mismatch of the parent's call fails the
    /// collectives a hierarchical algorithm runs on its parts.
    /// (child's generation, parent context, parent's generation): a link holds only while
    /// both communicators live (their contexts may be reused).
    parents: FastMap<u32, (u32, u32, u32)>,
    pub(crate) outbox: Vec<OutMsg>,
}

impl crate::p2p::hook::Hook for Checks {
    fn on_data(&mut self, from: u32, hdr: &Header) {
        Checks::on_data(self, from, hdr)
    }

    fn on_control(&mut self, from: u32, hdr: &Header, payload: &[u8]) -> bool {
        Checks::on_control(self, from, hdr, payload)
    }

    fn drain(&mut self, out: &mut dyn FnMut(OutMsg)) {
        for m in self.outbox.drain(..) {
            out(m);
        }
    }
}

/// Checked mode's entry points on the engine (the hook it installs is a [`Checks`]).
pub(crate) trait CheckedEngine {
    /// Turns checked mode on (at init, before any collective).
    fn check_enable(&mut self);
    /// Records that this rank starts `call` as call `tag` on internal context `ctx` and sends
    /// its token to `token_to`; true if the communicator already failed a check (see
    /// [`Checks::register`]).
    #[allow(clippy::too_many_arguments)]
    fn check_register(
        &mut self,
        ctx: u32,
        epoch: u32,
        tag: i32,
        call: Call,
        me: u32,
        members: &dyn Fn() -> Vec<u32>,
        token_to: Option<u32>,
    ) -> bool;
    /// Whether call `tag` on `ctx` fails a check.
    fn check_failed(&self, ctx: u32, epoch: u32, tag: i32) -> bool;
    /// The verdict on a failed call once it is decided, with the world ranks of the
    /// communicator it names ranks of.
    fn check_verdict(&mut self, ctx: u32, epoch: u32, tag: i32) -> Option<(Verdict, Vec<u32>)>;
    /// The call at which the communicator on `ctx` failed a check, if it did.
    fn check_poisoned(&self, ctx: u32, epoch: u32) -> Option<i32>;
    /// Collectives on `child` run a call of `parent`'s (hierarchical algorithms); both are
    /// (internal context, generation).
    fn check_link(&mut self, child: (u32, u32), parent: (u32, u32));
}

impl CheckedEngine for Engine {
    fn check_enable(&mut self) {
        let me = self.me();
        self.set_hook(Box::new(Checks::new(me)));
    }

    fn check_register(
        &mut self,
        ctx: u32,
        epoch: u32,
        tag: i32,
        call: Call,
        me: u32,
        members: &dyn Fn() -> Vec<u32>,
        token_to: Option<u32>,
    ) -> bool {
        let Some(c) = self.hook_mut::<Checks>() else {
            return false;
        };
        let failed = c.register(ctx, epoch, tag, call, me, members, token_to);
        self.flush_hook(token_to);
        failed
    }

    fn check_failed(&self, ctx: u32, epoch: u32, tag: i32) -> bool {
        self.hook::<Checks>()
            .is_some_and(|c| c.failed(ctx, epoch, tag))
    }

    fn check_verdict(&mut self, ctx: u32, epoch: u32, tag: i32) -> Option<(Verdict, Vec<u32>)> {
        let c = self.hook_mut::<Checks>()?;
        let v = c.verdict(ctx, epoch, tag)?;
        Some((v, c.members(ctx, epoch, tag)))
    }

    fn check_poisoned(&self, ctx: u32, epoch: u32) -> Option<i32> {
        self.hook::<Checks>()?.poisoned(ctx, epoch)
    }

    fn check_link(&mut self, child: (u32, u32), parent: (u32, u32)) {
        if let Some(c) = self.hook_mut::<Checks>() {
            c.link(child.0, child.1, parent.0, parent.1);
        }
    }
}

impl Checks {
    pub(crate) fn new(me: u32) -> Self {
        Self {
            me,
            ..Default::default()
        }
    }

    /// Records that this rank starts `call` as call `tag` of the communicator on `ctx`
    /// (generation `epoch`; `me` its rank there, `members` its world ranks, asked for only when
    /// the communicator is new here). Checks what arrived early for it, and queues a token to
    /// `token_to` (a world rank). Returns whether the communicator already failed a check at
    /// this call or before.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn register(
        &mut self,
        ctx: u32,
        epoch: u32,
        tag: i32,
        call: Call,
        me: u32,
        members: &dyn Fn() -> Vec<u32>,
        token_to: Option<u32>,
    ) -> bool {
        let world = self.me;
        let st = self.ctxs.entry(ctx).or_default();
        if !st.live || st.epoch != epoch {
            // A communicator new here (the context may be reused): keep what arrived for it.
            let mut early = std::mem::take(&mut st.early);
            early.retain(|x| x.epoch == epoch);
            let members = members();
            let rank_of = members
                .iter()
                .enumerate()
                .map(|(i, &w)| (w, i as u32))
                .collect();
            *st = CtxState {
                epoch,
                live: true,
                members,
                rank_of,
                me,
                hist: vec![(-1, 0, Call::new(Kind::Unknown)); HIST],
                last: None,
                early,
                bad: None,
            };
        }
        let sig = call.sig();
        st.hist[tag.rem_euclid(HIST as i32) as usize] = (tag, sig, call);
        if st.future(tag) {
            st.last = Some(tag);
        }
        let mut hits = Vec::new();
        st.early.retain(|x| {
            if x.epoch != epoch {
                return true;
            }
            if x.tag == tag {
                hits.push(*x);
                return false;
            }
            later(x.tag, tag)
        });
        let mut out = std::mem::take(&mut self.outbox);
        let st = self.ctxs.get_mut(&ctx).expect("just made");
        for x in hits {
            match x.vote {
                Some(c) => vote_in(st, ctx, world, tag, x.from, x.sig, c, &mut out),
                None if x.sig != sig => detect(st, ctx, world, tag, x.from, x.sig, &mut out),
                None => {}
            }
        }
        if let Some(b) = &st.bad
            && b.tag == tag
            && !b.voted
        {
            start_bad(st, ctx, world, tag, &mut out);
        }
        if let Some(peer) = token_to {
            out.push(OutMsg {
                peer,
                hdr: control(ctx, world, tag, epoch, sig, FLAG_TOKEN, 0),
                payload: [0; 24],
                len: 0,
            });
        }
        self.outbox = out;
        st.bad.as_ref().is_some_and(|b| !later(b.tag, tag))
    }

    /// A collective message (or a token) from world rank `from` arrived.
    pub(crate) fn on_data(&mut self, from: u32, hdr: &Header) {
        let world = self.me;
        let st = self.ctxs.entry(hdr.context).or_default();
        let early = Early {
            epoch: hdr.coll_seq,
            tag: hdr.tag,
            from,
            sig: hdr.signature,
            vote: None,
        };
        if !st.live || st.epoch != hdr.coll_seq {
            st.keep_early(early);
            return;
        }
        match st.lookup(hdr.tag) {
            Some((mine, _)) if mine != hdr.signature => {
                let mut out = std::mem::take(&mut self.outbox);
                detect(
                    st,
                    hdr.context,
                    world,
                    hdr.tag,
                    from,
                    hdr.signature,
                    &mut out,
                );
                self.outbox = out;
            }
            Some(_) => {}
            None if st.future(hdr.tag) => st.keep_early(early),
            // A call this rank has forgotten: too old to matter.
            None => {}
        }
    }

    /// A control message of the checks arrived; false if it is not one.
    pub(crate) fn on_control(&mut self, from: u32, hdr: &Header, payload: &[u8]) -> bool {
        match hdr.flags {
            FLAG_TOKEN => self.on_data(from, hdr),
            FLAG_VOTE => {
                let world = self.me;
                let call = Call::decode(payload);
                let st = self.ctxs.entry(hdr.context).or_default();
                if !st.live || st.epoch != hdr.coll_seq || st.future(hdr.tag) {
                    st.keep_early(Early {
                        epoch: hdr.coll_seq,
                        tag: hdr.tag,
                        from,
                        sig: hdr.signature,
                        vote: Some(call),
                    });
                    return true;
                }
                let mut out = std::mem::take(&mut self.outbox);
                vote_in(
                    st,
                    hdr.context,
                    world,
                    hdr.tag,
                    from,
                    hdr.signature,
                    call,
                    &mut out,
                );
                self.outbox = out;
            }
            _ => return false,
        }
        true
    }

    fn failed_state(&self, ctx: u32, epoch: u32, tag: i32) -> Option<&CtxState> {
        let own = self.ctxs.get(&ctx).filter(|s| {
            s.live && s.epoch == epoch && s.bad.as_ref().is_some_and(|b| !later(b.tag, tag))
        });
        own.or_else(|| self.parent_failed(ctx, epoch))
    }

    /// The parent's state of a linked communicator whose parent failed a check.
    fn parent_failed(&self, ctx: u32, epoch: u32) -> Option<&CtxState> {
        let &(child_epoch, p, p_epoch) = self.parents.get(&ctx)?;
        (child_epoch == epoch).then_some(())?;
        self.ctxs
            .get(&p)
            .filter(|s| s.live && s.epoch == p_epoch && s.bad.is_some())
    }

    /// Whether call `tag` of the communicator on `ctx` fails a check (a mismatch at this call
    /// or an earlier one, or in the parent's call a hierarchical algorithm runs for).
    pub(crate) fn failed(&self, ctx: u32, epoch: u32, tag: i32) -> bool {
        self.failed_state(ctx, epoch, tag).is_some()
    }

    /// The call at which the communicator on `ctx` failed a check, if it did.
    pub(crate) fn poisoned(&self, ctx: u32, epoch: u32) -> Option<i32> {
        let s = self.ctxs.get(&ctx).filter(|s| s.live && s.epoch == epoch)?;
        s.bad.as_ref().map(|b| b.tag)
    }

    /// The verdict for a failed call, once every vote is in or [`VOTE_WAIT`] has passed.
    pub(crate) fn verdict(&mut self, ctx: u32, epoch: u32, tag: i32) -> Option<Verdict> {
        let key = match self.ctxs.get(&ctx) {
            Some(s)
                if s.live
                    && s.epoch == epoch
                    && s.bad.as_ref().is_some_and(|b| !later(b.tag, tag)) =>
            {
                ctx
            }
            _ => {
                self.parent_failed(ctx, epoch)?;
                self.parents.get(&ctx)?.1
            }
        };
        let st = self.ctxs.get_mut(&key)?;
        let me = st.me;
        let b = st.bad.as_mut()?;
        if b.verdict.is_none() {
            let complete = b
                .votes
                .iter()
                .all(|v| v.is_some_and(|(s, c)| s == 0 || c.is_some()));
            if complete || b.since.elapsed() >= VOTE_WAIT {
                b.verdict = Some(decide(seq_of(b.tag), me, &b.votes));
            }
        }
        b.verdict.clone()
    }

    /// World ranks of the members of the communicator whose verdict `verdict` gives for `ctx`.
    pub(crate) fn members(&self, ctx: u32, epoch: u32, tag: i32) -> Vec<u32> {
        self.failed_state(ctx, epoch, tag)
            .map(|s| s.members.clone())
            .unwrap_or_default()
    }

    /// The collectives of `child` (generation `child_epoch`) run a call of `parent`'s
    /// (hierarchical algorithms).
    pub(crate) fn link(&mut self, child: u32, child_epoch: u32, parent: u32, parent_epoch: u32) {
        self.parents
            .insert(child, (child_epoch, parent, parent_epoch));
    }
}

fn control(ctx: u32, me: u32, tag: i32, epoch: u32, sig: u64, flags: u8, len: u64) -> Header {
    Header {
        context: ctx,
        source: me,
        seq: 0,
        tag,
        len,
        kind: ProtoKind::Control,
        flags,
        coll_seq: epoch,
        signature: sig,
    }
}

/// World rank `from` called call `tag` with signature `theirs`, which is not ours.
fn detect(
    st: &mut CtxState,
    ctx: u32,
    world: u32,
    tag: i32,
    from: u32,
    theirs: u64,
    out: &mut Vec<OutMsg>,
) {
    let Some(&r) = st.rank_of.get(&from) else {
        return;
    };
    start_bad(st, ctx, world, tag, out);
    if let Some(b) = st.bad.as_mut()
        && b.tag == tag
    {
        b.votes[r as usize].get_or_insert((theirs, None));
    }
}

/// A vote of world rank `from` for call `tag`.
#[allow(clippy::too_many_arguments)]
fn vote_in(
    st: &mut CtxState,
    ctx: u32,
    world: u32,
    tag: i32,
    from: u32,
    sig: u64,
    call: Option<Call>,
    out: &mut Vec<OutMsg>,
) {
    let Some(&r) = st.rank_of.get(&from) else {
        return;
    };
    start_bad(st, ctx, world, tag, out);
    if let Some(b) = st.bad.as_mut()
        && b.tag == tag
    {
        b.votes[r as usize] = Some((sig, call));
    }
}

/// Makes sure the communicator is marked failed at call `tag` (unless an earlier call failed)
/// and that this rank has voted for it, if it can yet.
fn start_bad(st: &mut CtxState, ctx: u32, world: u32, tag: i32, out: &mut Vec<OutMsg>) {
    match &st.bad {
        Some(b) if b.tag == tag => {}
        Some(b) if later(tag, b.tag) => return,
        _ => {
            ANY_FAILED.store(true, Ordering::Relaxed);
            st.bad = Some(Bad {
                tag,
                votes: vec![None; st.members.len()],
                since: Instant::now(),
                voted: false,
                verdict: None,
            });
        }
    }
    if st.bad.as_ref().is_some_and(|b| b.voted) {
        return;
    }
    // A call this rank has not started: it votes when it does (`register`).
    let mine = match st.lookup(tag) {
        Some((s, c)) => (s, Some(c)),
        None if st.future(tag) => return,
        None => (0, None),
    };
    let (me, epoch) = (st.me, st.epoch);
    for (r, &w) in st.members.iter().enumerate() {
        if r as u32 != me {
            out.push(OutMsg {
                peer: w,
                hdr: control(ctx, world, tag, epoch, mine.0, FLAG_VOTE, 24),
                payload: mine.1.map_or([0; 24], |c| c.encode()),
                len: if mine.1.is_some() { 24 } else { 0 },
            });
        }
    }
    let b = st.bad.as_mut().expect("set above");
    b.votes[me as usize] = Some(mine);
    b.voted = true;
}

/// The collectives' side of checked mode (every entry is a no-op when it is off).
impl Communicator {
    /// Notes the call about to run, in checked mode.
    pub(crate) fn check_note(&self, call: Call) {
        if self.shared().check {
            note(call);
        }
    }

    /// For a message-based collective taking call number `tag` and running `sched`: in
    /// checked mode, records the noted call and sends the token; the stamp for its messages
    /// and the call number its waits check (both empty when unchecked). No token when the
    /// schedule's first phase sends to the next rank anyway: that message, posted at once,
    /// carries the signature there (ring allreduce, recursive doubling at even ranks, the
    /// barrier, …).
    pub(crate) fn check_start(
        &self,
        tag: Tag,
        sched: &super::schedule::Schedule,
    ) -> Result<(Stamp, Option<Tag>)> {
        if !self.shared().check {
            return Ok((Stamp::default(), None));
        }
        let next = (self.rank() + 1) % self.size();
        let sends_next = sched.phases.first().is_some_and(|ph| {
            ph.xfers
                .iter()
                .any(|st| matches!(st, super::schedule::Step::Send { peer, .. } if *peer == next))
        });
        Ok((self.check_begin(tag, !sends_next)?, Some(tag)))
    }

    /// For a collective that sends no messages of its own (shared memory, or a composition
    /// of sub-communicator collectives): in checked mode, takes a call number and records the
    /// noted call (a composition also sends the token: its parts run on other contexts).
    /// Called before the algorithm's one-time collective setup (windows, sub-communicators),
    /// whose exchanges then fail instead of waiting for a rank that planned otherwise
    /// ([`check_wait`](Self::check_wait)). Returns the call number and the call.
    pub(crate) fn check_composite(&self, token: bool) -> Result<Option<(Tag, Call)>> {
        if !self.shared().check {
            return Ok(None);
        }
        let tag = self.next_coll_tag();
        let call = take();
        note(call);
        self.check_begin(tag, token)?;
        // Still noted: a plan whose setup finds its algorithm unusable falls back to a
        // schedule, which registers the call again under a call number of its own.
        note(call);
        Ok(Some((tag, call)))
    }

    /// For a shared-memory call (every rank compares the others' signatures in the windows'
    /// descriptors): in checked mode, takes a call number; the call is recorded with the
    /// engine only when needed — before the windows' setup (see
    /// [`check_composite`](Self::check_composite)), once a waiter waits long (a rank that
    /// runs another algorithm sends messages, which the engine matches against it), or at
    /// once after any check failed in this process (a failed communicator fails at once).
    pub(crate) fn check_shm_call(&self) -> Result<Option<(Tag, Call)>> {
        if !self.shared().check {
            return Ok(None);
        }
        let tag = self.next_coll_tag();
        let call = take();
        if ANY_FAILED.load(Ordering::Relaxed) {
            self.check_register(tag, call)?;
        }
        // Still noted for a fallback schedule (see `check_composite`).
        note(call);
        Ok(Some((tag, call)))
    }

    /// Records `call` as call `tag` (no token); fails if the communicator failed a check at
    /// or before it. Recording a call twice is harmless.
    pub(crate) fn check_register(&self, tag: Tag, call: Call) -> Result<()> {
        note(call);
        self.check_begin(tag, false).map(drop)
    }

    /// Records the noted call as call `tag` (sending the token to the next rank when `token`);
    /// fails if the communicator failed a check at or before this call.
    fn check_begin(&self, tag: Tag, token: bool) -> Result<Stamp> {
        let call = take();
        let epoch = self.check_gen();
        let right = if token && self.size() > 1 {
            Some(self.world_rank((self.rank() + 1) % self.size())?)
        } else {
            None
        };
        let members = || {
            (0..self.size())
                .map(|r| self.world_rank(r).unwrap_or(u32::MAX))
                .collect()
        };
        let failed = self.shared().lock().check_register(
            self.ctx() + 1,
            epoch,
            tag.0,
            call,
            self.rank(),
            &members,
            right,
        );
        if failed {
            return Err(self.check_error(tag));
        }
        Ok(Stamp {
            epoch,
            sig: call.sig(),
        })
    }

    /// Checked mode: waits for a request of an internal exchange on this communicator
    /// (setting up windows or sub-communicators for a call), failing if the communicator fails
    /// a check meanwhile — a rank that planned another call never takes part.
    pub(crate) fn check_wait(&self, req: crate::p2p::engine::ReqId) -> Result<crate::Status> {
        let (ctx, epoch) = (self.ctx() + 1, self.check_gen());
        let r = self.shared().block_on(|e| {
            if e.is_done(req) {
                return Some(Ok(e.take(req)));
            }
            e.check_poisoned(ctx, epoch).map(Err)
        });
        match r {
            Ok(st) => st,
            Err(tag) => {
                self.shared().lock().abandon(req);
                Err(self.check_error(Tag(tag)))
            }
        }
    }

    /// Whether call `tag` fails a check (see [`Checks::failed`]).
    pub(crate) fn check_failed(&self, e: &Engine, tag: Tag) -> bool {
        e.check_failed(self.ctx() + 1, self.check_gen(), tag.0)
    }

    /// The error of a call that failed a check, once the votes are in (at most
    /// [`VOTE_WAIT`]). Progresses the engine meanwhile (the caller holds no lock).
    pub(crate) fn check_error(&self, tag: Tag) -> CommError {
        let (ctx, epoch) = (self.ctx() + 1, self.check_gen());
        let (v, members) = self
            .shared()
            .block_on(|e| e.check_verdict(ctx, epoch, tag.0));
        self.verdict_error(&v, &members)
    }

    /// The error of a verdict on this communicator's call (shared-memory descriptors).
    pub(crate) fn check_verdict_error(&self, v: &Verdict) -> CommError {
        let members: Vec<u32> = (0..self.size())
            .map(|r| self.world_rank(r).unwrap_or(u32::MAX))
            .collect();
        self.verdict_error(v, &members)
    }

    /// `v`'s error, naming ranks with their world ranks (`members`) and hosts.
    fn verdict_error(&self, v: &Verdict, members: &[u32]) -> CommError {
        let e = self.shared().lock();
        let who = |r: u32| match members.get(r as usize) {
            Some(&w) if w == r => format!("{r} (on {})", e.host_of(w)),
            Some(&w) => format!("{r} (world rank {w} on {})", e.host_of(w)),
            None => r.to_string(),
        };
        v.error(&who)
    }

    /// In checked mode, the shared-memory windows' check of call `tag`, from a waiter: the
    /// error if the call failed a check (a rank that sends messages instead was found by
    /// the token it sent). Progresses nothing itself.
    pub(crate) fn check_shm_wait(&self, tag: Option<Tag>) -> Result<()> {
        let Some(t) = tag else { return Ok(()) };
        let failed = self.check_failed(&self.shared().lock(), t);
        if failed {
            return Err(self.check_error(t));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` ranks' checks on one communicator (context 1, generation 7), world rank = rank.
    fn ranks(n: u32) -> Vec<Checks> {
        (0..n).map(Checks::new).collect()
    }

    /// Delivers every queued control message until none is left.
    fn pump(cs: &mut [Checks]) {
        loop {
            let msgs: Vec<(u32, OutMsg)> = cs
                .iter_mut()
                .enumerate()
                .flat_map(|(i, c)| {
                    std::mem::take(&mut c.outbox)
                        .into_iter()
                        .map(move |m| (i as u32, m))
                })
                .collect();
            if msgs.is_empty() {
                return;
            }
            for (from, m) in msgs {
                let p = m.payload;
                assert!(cs[m.peer as usize].on_control(from, &m.hdr, &p[..m.len as usize]));
            }
        }
    }

    fn start(cs: &mut [Checks], r: u32, tag: i32, call: Call) -> bool {
        let n = cs.len() as u32;
        cs[r as usize].register(1, 7, tag, call, r, &|| (0..n).collect(), Some((r + 1) % n))
    }

    fn allreduce(count: usize) -> Call {
        Call::new(Kind::Allreduce)
            .elem(4)
            .count(count)
            .reducer(&Reducer::Builtin(Op::Sum, Dtype::F32))
    }

    #[test]
    fn equal_calls_pass_and_every_field_changes_the_signature() {
        let mut cs = ranks(3);
        for tag in 16..20 {
            for r in 0..3 {
                assert!(!start(&mut cs, r, tag, allreduce(10)));
            }
            pump(&mut cs);
        }
        assert!(cs.iter().all(|c| !c.failed(1, 7, 19)));
        let base = allreduce(10);
        let variants = [
            allreduce(11),
            base.reducer(&Reducer::Builtin(Op::Max, Dtype::F32)),
            base.reducer(&Reducer::Builtin(Op::Sum, Dtype::I32)),
            base.root(0),
            Call {
                kind: Kind::Reduce,
                ..base
            },
            base.counts(&[1, 2]),
        ];
        for v in variants {
            assert_ne!(v.sig(), base.sig(), "{v:?}");
            assert!(!base.differs(&v).is_empty());
            assert_eq!(Call::from_words(v.words()), Some(v));
        }
        assert_eq!(base.counts(&[10, 10]), base);
    }

    #[test]
    fn a_mismatch_is_seen_by_every_rank_and_names_the_odd_one() {
        let mut cs = ranks(4);
        // Rank 2 passes another count; it starts first, so the others see its token early.
        for r in [2, 0, 1, 3] {
            start(&mut cs, r, 16, allreduce(if r == 2 { 99 } else { 100 }));
        }
        pump(&mut cs);
        for (r, c) in cs.iter_mut().enumerate() {
            assert!(c.failed(1, 7, 16), "rank {r}");
            assert!(c.failed(1, 7, 17), "later calls fail too");
            assert!(
                !c.failed(1, 8, 16),
                "another generation is another communicator"
            );
            let v = c.verdict(1, 7, 16).expect("every vote is in");
            assert_eq!(v.ranks(), vec![2], "rank {r}: {v:?}");
            assert_eq!(v.majority.as_ref().unwrap().1, vec![0, 1, 3]);
            let e = v.error(&|r| r.to_string());
            let CommError::CollMismatch { ranks, fields, .. } = &e else {
                panic!("{e:?}")
            };
            assert_eq!(
                (ranks.as_slice(), fields.as_slice()),
                (&[2][..], &["count"][..])
            );
            assert!(
                e.to_string().contains("rank 2 called allreduce(count 99"),
                "{e}"
            );
        }
        // A new call on the failed communicator reports it at once.
        assert!(start(&mut cs, 0, 17, allreduce(100)));
    }

    #[test]
    fn a_rank_that_starts_the_call_after_hearing_of_the_mismatch_still_votes() {
        let mut cs = ranks(3);
        start(
            &mut cs,
            0,
            16,
            Call::new(Kind::Bcast).elem(1).count(8).root(0),
        );
        start(
            &mut cs,
            1,
            16,
            Call::new(Kind::Bcast).elem(1).count(8).root(1),
        );
        pump(&mut cs);
        // Rank 1 saw rank 0's token; both voted; rank 2 has not started the call.
        assert!(cs[1].failed(1, 7, 16) && cs[0].failed(1, 7, 16));
        assert!(
            cs[0].verdict(1, 7, 16).is_none(),
            "rank 2's vote is missing"
        );
        assert!(start(
            &mut cs,
            2,
            16,
            Call::new(Kind::Bcast).elem(1).count(8).root(0)
        ));
        pump(&mut cs);
        for c in &mut cs {
            let v = c.verdict(1, 7, 16).unwrap();
            assert_eq!(v.ranks(), vec![1]);
        }
    }

    #[test]
    fn tags_wrap_and_old_generations_are_ignored() {
        let top = super::super::exec::TAG_COLL_BASE + (1 << 30) - 1;
        assert!(later(super::super::exec::TAG_COLL_BASE, top));
        assert!(!later(top, super::super::exec::TAG_COLL_BASE));
        let mut c = Checks::new(0);
        // Leftovers of an older communicator on context 1 do not fail the new one.
        let old = control(1, 1, 16, 3, 42, FLAG_TOKEN, 0);
        c.on_control(1, &old, &[]);
        assert!(!c.register(1, 7, 16, allreduce(1), 0, &|| vec![0, 1], None));
        assert!(!c.failed(1, 7, 16));
    }

    #[test]
    fn ties_go_to_the_group_with_the_lowest_rank() {
        let a = allreduce(1);
        let b = allreduce(2);
        let v = decide(0, 1, &[Some((a.sig(), Some(a))), Some((b.sig(), Some(b)))]);
        assert_eq!(v.ranks(), vec![1]);
        let v = decide(0, 0, &[Some((a.sig(), Some(a))), None]);
        assert_eq!((v.ranks(), v.silent), (vec![], vec![1]));
    }
}
