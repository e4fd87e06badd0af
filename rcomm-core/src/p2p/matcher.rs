//! The sans-IO matching engine of one communicator: which receive gets which message.
//!
//! MPI's rules, exactly:
//! - **Non-overtaking.** One sender's messages to one receiver are matched in send order by any
//!   receive that can match them. Every message carries a per-(sender, communicator) sequence
//!   number; arrivals are processed strictly in that order and early ones are held back, so
//!   several streams or rails per peer cannot reorder matching.
//! - **Post order.** Receives are matched in the order they were posted. Specific-source receives
//!   wait in per-source queues and wildcard receives in one list; an arriving message takes the
//!   earliest-posted receive that matches it, the post sequence deciding between the two.
//! - **Unexpected messages** (no receive posted yet) queue per source in arrival order; a new
//!   receive, a probe or an mprobe takes the earliest matching one (for `Any` source, the
//!   earliest arrival over all sources).
//!
//! The engine does no I/O and owns no buffers of posted receives: it names which receive
//! (`RecvId`) a message goes to, and stores the payload handle `P` only for messages that must
//! wait. An eager message matching a posted receive is therefore copied once, straight from the
//! transport's slot into the user's buffer.

use rcomm_runtime::dense::DenseMap;
use rcomm_runtime::fastmap::FastMap;
use std::collections::{BTreeMap, VecDeque};

/// Which sources a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// Any source (`MPI_ANY_SOURCE`).
    Any,
    /// One rank.
    Rank(u32),
}

/// Which tags a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TagSel {
    /// Any tag (`MPI_ANY_TAG`).
    Any,
    /// One tag.
    Tag(i32),
}

/// What identifies a message for matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    /// Sender's rank in the communicator.
    pub source: u32,
    /// Tag.
    pub tag: i32,
    /// Payload length in bytes.
    pub len: u64,
}

impl Envelope {
    fn matches(&self, src: Source, tag: TagSel) -> bool {
        (match src {
            Source::Any => true,
            Source::Rank(r) => r == self.source,
        }) && match tag {
            TagSel::Any => true,
            TagSel::Tag(t) => t == self.tag,
        }
    }
}

/// A posted receive, as the engine knows it: its place in post order (`seq`, which orders
/// receives) and the number its poster gave it (`owner`: the engine's request, so a delivery
/// names the request with no table between).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecvId {
    /// Post order (compared first, and unique).
    pub seq: u64,
    /// The number given to [`Matcher::post`].
    pub owner: u64,
}

/// Where an arriving message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Straight into this posted receive.
    Deliver(RecvId),
    /// Nobody can take it yet: hand the payload to [`Matcher::keep`].
    Keep,
}

/// A message the engine stores until a receive takes it.
#[derive(Debug)]
struct Stored<P> {
    env: Envelope,
    /// The sender's sequence number (what a sender's cancel names).
    seq: u32,
    arrival: u64,
    payload: P,
}

#[derive(Debug, Clone, Copy)]
struct Posted {
    id: RecvId,
    src: Source,
    tag: TagSel,
}

/// What the matcher keeps per source, found by its rank.
/// Index of the oldest receive in `q` that `env` matches: the front in the steady case (one
/// compare), else a search.
fn first_match(q: &VecDeque<Posted>, env: &Envelope) -> Option<usize> {
    match q.front() {
        Some(f) if env.matches(f.src, f.tag) => Some(0),
        _ => q.iter().position(|p| env.matches(p.src, p.tag)),
    }
}

/// Removes receive `i` of `q` (found by [`first_match`]): a pop at the front when it is first.
fn take_at(q: &mut VecDeque<Posted>, i: usize) -> Posted {
    if i == 0 { q.pop_front() } else { q.remove(i) }.expect("an index from first_match")
}

#[derive(Debug)]
struct Peer<P> {
    /// Next expected sequence number.
    expected: u32,
    /// Unexpected messages, in arrival (= sequence) order. An emptied queue keeps its
    /// capacity: a peer whose messages keep arriving before their receives (a collective's
    /// root running ahead) must not cost an allocation each time.
    unexpected: VecDeque<Stored<P>>,
    /// Posted receives for this source, in post order.
    posted: VecDeque<Posted>,
}

impl<P> Default for Peer<P> {
    fn default() -> Self {
        Self {
            expected: 0,
            unexpected: VecDeque::new(),
            posted: VecDeque::new(),
        }
    }
}

/// The matching state of one communicator.
#[derive(Debug)]
pub struct Matcher<P> {
    /// Per source, by rank (sources are ranks the engine checked: the table grows to the
    /// highest one seen, at most the world's size).
    peers: DenseMap<Peer<P>>,
    /// Early arrivals per source, by sequence number (rare: several lanes to one peer);
    /// `None` marks one its sender withdrew (a cancelled send), skipped when its turn comes.
    early: FastMap<u32, BTreeMap<u32, Option<(Envelope, P)>>>,
    unexpected_count: usize,
    /// Posted wildcard-source receives, in post order.
    wildcard: VecDeque<Posted>,
    next_recv: u64,
    next_arrival: u64,
}

impl<P> Default for Matcher<P> {
    fn default() -> Self {
        Self {
            peers: DenseMap::default(),
            early: FastMap::default(),
            unexpected_count: 0,
            wildcard: VecDeque::new(),
            next_recv: 0,
            next_arrival: 0,
        }
    }
}

/// What [`Matcher::withdraw`] did with a sender's message.
#[derive(Debug)]
pub enum Withdraw<P> {
    /// Taken out before any receive matched it: no receive, probe or mprobe will see it.
    Taken(Envelope, P),
    /// Already matched (received, being received, or taken by mprobe): it stays.
    Matched,
    /// Not here yet (it is still on its way): ask again later.
    NotArrived,
}

/// The result of posting a receive.
#[derive(Debug)]
pub enum Posting<P> {
    /// A stored message matched at once.
    Matched(Envelope, P),
    /// The receive waits under this id.
    Posted(RecvId),
}

impl<P> Matcher<P> {
    /// An empty engine.
    pub fn new() -> Self {
        Self::default()
    }

    fn peer(&self, src: u32) -> Option<&Peer<P>> {
        self.peers.get(&src)
    }

    fn peer_mut(&mut self, src: u32) -> &mut Peer<P> {
        self.peers.get_or_default(src)
    }

    /// Posts a receive: takes the earliest stored matching message, or waits under a
    /// [`RecvId`] carrying `owner`.
    pub fn post(&mut self, src: Source, tag: TagSel, owner: u64) -> Posting<P> {
        if let Some(m) = self.take_unexpected(src, tag) {
            return Posting::Matched(m.env, m.payload);
        }
        let id = RecvId {
            seq: self.next_recv,
            owner,
        };
        self.next_recv += 1;
        let p = Posted { id, src, tag };
        match src {
            Source::Rank(r) => self.peer_mut(r).posted.push_back(p),
            Source::Any => self.wildcard.push_back(p),
        }
        Posting::Posted(id)
    }

    /// Withdraws a posted receive; false if it was already matched (or never posted).
    pub fn cancel(&mut self, id: RecvId) -> bool {
        if let Some(i) = self.wildcard.iter().position(|p| p.id == id) {
            self.wildcard.remove(i);
            return true;
        }
        for q in self.peers.values_mut().map(|p| &mut p.posted) {
            if let Some(i) = q.iter().position(|p| p.id == id) {
                q.remove(i);
                return true;
            }
        }
        false
    }

    /// Routes an arriving message with sequence number `seq`. On [`Route::Keep`] the caller must
    /// pass the payload to [`keep`](Self::keep) before the next arrival from that source.
    pub fn arrive(&mut self, env: &Envelope, seq: u32) -> Route {
        if self.wildcard.is_empty() {
            // Only the source's own receives can take it, the oldest matching one first: one
            // table look, and a pop at the front when that one matches (the steady case).
            let Some(p) = self.peers.get_mut(&env.source) else {
                // No state: nothing posted from this source.
                return Route::Keep;
            };
            if seq != p.expected {
                return Route::Keep;
            }
            let Some(i) = first_match(&p.posted, env) else {
                return Route::Keep;
            };
            p.expected = seq.wrapping_add(1);
            return Route::Deliver(take_at(&mut p.posted, i).id);
        }
        if seq != self.peer_mut(env.source).expected {
            return Route::Keep;
        }
        match self.take_posted(env) {
            Some(id) => {
                self.peer_mut(env.source).expected = seq.wrapping_add(1);
                Route::Deliver(id)
            }
            None => Route::Keep,
        }
    }

    /// Stores a message [`arrive`](Self::arrive) routed to `Keep`: in sequence it joins the
    /// unexpected queue; early it is held back until the messages before it have arrived.
    pub fn keep(&mut self, env: Envelope, seq: u32, payload: P) {
        let peer = self.peer_mut(env.source);
        if seq == peer.expected {
            peer.expected = seq.wrapping_add(1);
            self.push_unexpected(env, seq, payload);
        } else {
            self.early
                .entry(env.source)
                .or_default()
                .insert(seq, Some((env, payload)));
        }
    }

    /// Processes held-back messages of `source` that are now in sequence; each is delivered to a
    /// posted receive through `deliver` or stored as unexpected. Call after every arrival.
    pub fn release(&mut self, source: u32, deliver: &mut dyn FnMut(RecvId, Envelope, P)) {
        while !self.early.is_empty() {
            let exp = self.peer_mut(source).expected;
            let Some(q) = self.early.get_mut(&source) else {
                return;
            };
            let Some(held) = q.remove(&exp) else {
                return;
            };
            if q.is_empty() {
                self.early.remove(&source);
            }
            self.peer_mut(source).expected = exp.wrapping_add(1);
            // A withdrawn message only holds its place in the sequence.
            let Some((env, payload)) = held else { continue };
            match self.take_posted(&env) {
                Some(id) => deliver(id, env, payload),
                None => self.push_unexpected(env, exp, payload),
            }
        }
    }

    /// The earliest stored message a receive for (`src`, `tag`) would get, without taking it.
    pub fn probe(&self, src: Source, tag: TagSel) -> Option<&Envelope> {
        self.find_unexpected(src, tag)
            .map(|(s, i)| &self.peers.get(&s).expect("found there").unexpected[i].env)
    }

    /// Takes the earliest stored matching message (for `mprobe`): no later receive can get it.
    pub fn take(&mut self, src: Source, tag: TagSel) -> Option<(Envelope, P)> {
        self.take_unexpected(src, tag).map(|m| (m.env, m.payload))
    }

    /// The sequence number the next message from `src` must carry to go straight to a
    /// receive of (`src`, `tag`) outside this matcher — the direct path of a blocking receive.
    /// `None` when something here has a say first: a stored message from `src` that the
    /// receive would take, held-back arrivals from `src`, or any posted receive that could
    /// match `src` (it was posted earlier, so it takes precedence).
    #[inline]
    pub fn direct_seq(&self, src: u32, tag: TagSel) -> Option<u32> {
        let peer = self.peer(src);
        if !self.wildcard.is_empty()
            || peer.is_some_and(|p| !p.posted.is_empty())
            || (!self.early.is_empty() && self.early.contains_key(&src))
            || self.find_unexpected(Source::Rank(src), tag).is_some()
        {
            return None;
        }
        Some(peer.map_or(0, |p| p.expected))
    }

    /// Whether messages that came ahead of their turn are held back (then every arrival must
    /// be followed by [`release`](Self::release)).
    pub fn holds_early(&self) -> bool {
        !self.early.is_empty()
    }

    /// Records that the message `seq` from `src` (the one [`direct_seq`](Self::direct_seq)
    /// named) was received outside the matcher.
    pub fn direct_taken(&mut self, src: u32, seq: u32) {
        self.peer_mut(src).expected = seq.wrapping_add(1);
    }

    /// Withdraws message `seq` of `src` for its sender's cancel, if no receive matched it
    /// yet: out of the unexpected queue, or, held back early, replaced by a mark that keeps
    /// its place in the sequence so the messages after it are still released in order. Each
    /// message is withdrawn at most once.
    pub fn withdraw(&mut self, src: u32, seq: u32) -> Withdraw<P> {
        if let Some(slot) = self.early.get_mut(&src).and_then(|q| q.get_mut(&seq))
            && let Some((env, payload)) = slot.take()
        {
            return Withdraw::Taken(env, payload);
        }
        let expected = self.peer(src).map_or(0, |p| p.expected);
        // At or after the next expected number (modulo wrapping): not sequenced yet.
        if seq.wrapping_sub(expected) < 1 << 31 {
            return Withdraw::NotArrived;
        }
        let Some(p) = self.peers.get_mut(&src) else {
            return Withdraw::Matched;
        };
        match p.unexpected.iter().position(|m| m.seq == seq) {
            Some(i) => {
                let m = p.unexpected.remove(i).expect("found");
                self.unexpected_count -= 1;
                Withdraw::Taken(m.env, m.payload)
            }
            None => Withdraw::Matched,
        }
    }

    /// Number of stored (unexpected or held-back) messages.
    pub fn stored(&self) -> usize {
        self.unexpected_count
            + (self.early.values())
                .map(|q| q.values().filter(|m| m.is_some()).count())
                .sum::<usize>()
    }

    /// Number of posted receives waiting.
    pub fn posted(&self) -> usize {
        self.wildcard.len() + self.peers.values().map(|p| p.posted.len()).sum::<usize>()
    }

    fn push_unexpected(&mut self, env: Envelope, seq: u32, payload: P) {
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        self.peer_mut(env.source).unexpected.push_back(Stored {
            env,
            seq,
            arrival,
            payload,
        });
        self.unexpected_count += 1;
    }

    /// Earliest-posted receive matching `env`, removed from its queue. The common case — the
    /// source's oldest receive, no wildcard posted — is one table look and a pop at the front.
    fn take_posted(&mut self, env: &Envelope) -> Option<RecvId> {
        let wild = if self.wildcard.is_empty() {
            None
        } else {
            self.wildcard
                .iter()
                .position(|p| env.matches(p.src, p.tag))
                .map(|j| (j, self.wildcard[j].id))
        };
        let posted = self.peers.get_mut(&env.source).map(|p| &mut p.posted);
        let specific = posted.and_then(|q| {
            let i = first_match(q, env)?;
            Some((q, i))
        });
        match (specific, wild) {
            (Some((q, i)), Some((_, b))) if q[i].id < b => Some(take_at(q, i).id),
            (_, Some((j, _))) => Some(take_at(&mut self.wildcard, j).id),
            (Some((q, i)), None) => Some(take_at(q, i).id),
            (None, None) => None,
        }
    }

    /// (source, index) of the earliest stored message matching (`src`, `tag`).
    #[inline]
    fn find_unexpected(&self, src: Source, tag: TagSel) -> Option<(u32, usize)> {
        // Nothing stored (a receive posted before its message): no call.
        if self.unexpected_count == 0 {
            return None;
        }
        self.search_unexpected(src, tag)
    }

    fn search_unexpected(&self, src: Source, tag: TagSel) -> Option<(u32, usize)> {
        let first_in = |s: u32, q: &VecDeque<Stored<P>>| {
            q.iter()
                .position(|m| m.env.matches(src, tag))
                .map(|i| (s, i, q[i].arrival))
        };
        let best = match src {
            Source::Rank(r) => self.peer(r).and_then(|p| first_in(r, &p.unexpected)),
            Source::Any => self
                .peers
                .iter()
                .filter_map(|(s, p)| first_in(s, &p.unexpected))
                .min_by_key(|&(_, _, a)| a),
        };
        best.map(|(s, i, _)| (s, i))
    }

    fn take_unexpected(&mut self, src: Source, tag: TagSel) -> Option<Stored<P>> {
        let (s, i) = self.find_unexpected(src, tag)?;
        let m = self.peer_mut(s).unexpected.remove(i)?;
        self.unexpected_count -= 1;
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn env(source: u32, tag: i32) -> Envelope {
        Envelope {
            source,
            tag,
            len: 0,
        }
    }

    /// Delivers one arrival the way a transport's progress loop does; returns (recv, payload)
    /// matches made.
    fn arrive(m: &mut Matcher<u64>, e: Envelope, seq: u32, payload: u64) -> Vec<(RecvId, u64)> {
        let mut out = Vec::new();
        match m.arrive(&e, seq) {
            Route::Deliver(id) => out.push((id, payload)),
            Route::Keep => m.keep(e, seq, payload),
        }
        m.release(e.source, &mut |id, _, p| out.push((id, p)));
        out
    }

    #[test]
    fn any_tag_receive_gets_the_earlier_of_two_differently_tagged_messages() {
        let mut m = Matcher::new();
        arrive(&mut m, env(1, 5), 0, 100);
        arrive(&mut m, env(1, 6), 1, 101);
        match m.post(Source::Rank(1), TagSel::Any, 0) {
            Posting::Matched(e, p) => assert_eq!((e.tag, p), (5, 100)),
            p => panic!("{p:?}"),
        }
        // A specific tag receive can skip ahead to a later message with its tag.
        arrive(&mut m, env(1, 7), 2, 102);
        match m.post(Source::Rank(1), TagSel::Tag(7), 0) {
            Posting::Matched(e, p) => assert_eq!((e.tag, p), (7, 102)),
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn early_arrivals_are_held_until_their_predecessors_arrive() {
        let mut m = Matcher::new();
        let Posting::Posted(a) = m.post(Source::Rank(0), TagSel::Any, 0) else {
            panic!()
        };
        assert!(
            arrive(&mut m, env(0, 1), 1, 11).is_empty(),
            "seq 1 must wait for seq 0"
        );
        assert_eq!(m.stored(), 1);
        let got = arrive(&mut m, env(0, 1), 0, 10);
        assert_eq!(got, vec![(a, 10)]);
        assert_eq!(m.stored(), 1, "seq 1 released into the unexpected queue");
        assert!(matches!(
            m.post(Source::Rank(0), TagSel::Any, 0),
            Posting::Matched(_, 11)
        ));
    }

    #[test]
    fn posted_receives_match_in_post_order_across_specific_and_wildcard() {
        let mut m = Matcher::<u64>::new();
        let Posting::Posted(w) = m.post(Source::Any, TagSel::Tag(3), 0) else {
            panic!()
        };
        let Posting::Posted(s) = m.post(Source::Rank(2), TagSel::Tag(3), 0) else {
            panic!()
        };
        assert_eq!(arrive(&mut m, env(2, 3), 0, 1), vec![(w, 1)]);
        assert_eq!(arrive(&mut m, env(2, 3), 1, 2), vec![(s, 2)]);
        assert!(!m.cancel(w) && !m.cancel(s));
    }

    #[test]
    fn cancel_withdraws_a_posted_receive() {
        let mut m = Matcher::<u64>::new();
        let Posting::Posted(a) = m.post(Source::Rank(0), TagSel::Any, 0) else {
            panic!()
        };
        assert!(m.cancel(a));
        assert!(arrive(&mut m, env(0, 0), 0, 5).is_empty());
        assert_eq!(m.probe(Source::Any, TagSel::Any).map(|e| e.source), Some(0));
    }

    #[test]
    fn withdraw_takes_unexpected_and_held_back_messages_and_keeps_the_sequence() {
        let mut m = Matcher::<u64>::new();
        assert!(matches!(m.withdraw(0, 0), Withdraw::NotArrived));
        arrive(&mut m, env(0, 1), 0, 10);
        arrive(&mut m, env(0, 1), 2, 12); // early: 1 is on its way
        arrive(&mut m, env(0, 1), 3, 13); // early
        assert!(matches!(m.withdraw(0, 1), Withdraw::NotArrived));
        assert!(matches!(m.withdraw(0, 2), Withdraw::Taken(_, 12)));
        assert!(matches!(m.withdraw(0, 0), Withdraw::Taken(_, 10)));
        assert_eq!(m.stored(), 1, "only 3 is left (held back)");
        // 1 arrives: 2 is skipped, 3 is released after it, in order.
        let Posting::Posted(a) = m.post(Source::Any, TagSel::Any, 7) else {
            panic!()
        };
        assert_eq!(arrive(&mut m, env(0, 1), 1, 11), vec![(a, 11)]);
        assert!(matches!(
            m.post(Source::Any, TagSel::Any, 8),
            Posting::Matched(_, 13)
        ));
        assert!(matches!(m.withdraw(0, 1), Withdraw::Matched));
        assert!(matches!(m.withdraw(0, 3), Withdraw::Matched));
        assert!(matches!(m.withdraw(0, 4), Withdraw::NotArrived));
        assert_eq!(m.stored(), 0);
        // A message taken out of the middle of the unexpected queue, by its number.
        for (seq, tag) in [(4, 1), (5, 2), (6, 1)] {
            arrive(&mut m, env(0, tag), seq, 100 + seq as u64);
        }
        assert!(matches!(m.withdraw(0, 5), Withdraw::Taken(e, 105) if e.tag == 2));
        assert!(matches!(
            m.post(Source::Rank(0), TagSel::Any, 9),
            Posting::Matched(_, 104)
        ));
        assert!(matches!(
            m.post(Source::Rank(0), TagSel::Any, 9),
            Posting::Matched(_, 106)
        ));
        assert!(m.probe(Source::Any, TagSel::Any).is_none());
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut m = Matcher::<u64>::new();
        m.peer_mut(0).expected = u32::MAX;
        arrive(&mut m, env(0, 0), 0, 2); // early (after the wrap)
        arrive(&mut m, env(0, 0), u32::MAX, 1);
        assert!(matches!(
            m.post(Source::Rank(0), TagSel::Any, 0),
            Posting::Matched(_, 1)
        ));
        assert!(matches!(
            m.post(Source::Rank(0), TagSel::Any, 0),
            Posting::Matched(_, 2)
        ));
    }

    // ---- reference model -------------------------------------------------------------------

    #[derive(Debug, Clone)]
    enum Op {
        /// Sender `src` sends a message with `tag` (gets the next sequence number).
        Send {
            src: u32,
            tag: i32,
        },
        /// Deliver one in-flight message (index into the in-flight list, mod its length).
        Deliver(usize),
        Post {
            src: Option<u32>,
            tag: Option<i32>,
        },
        Probe {
            src: Option<u32>,
            tag: Option<i32>,
        },
        MProbe {
            src: Option<u32>,
            tag: Option<i32>,
        },
        Cancel(usize),
    }

    fn sel(src: Option<u32>, tag: Option<i32>) -> (Source, TagSel) {
        (
            src.map_or(Source::Any, Source::Rank),
            tag.map_or(TagSel::Any, TagSel::Tag),
        )
    }

    /// The model: every message in send order per source is in one global "sent" log; a message
    /// is *visible* once it and all earlier messages of its source have been delivered.
    /// Matching follows MPI's rules over visible messages and posted receives directly.
    #[derive(Default)]
    struct Model {
        // (src, seq, tag, id, arrival order when it became visible)
        visible: Vec<(u32, u32, i32, u64, u64)>,
        delivered: HashMap<u32, BTreeMap<u32, (i32, u64)>>,
        next_visible: HashMap<u32, u32>,
        posted: Vec<(u64, Source, TagSel)>, // post order
        matched: Vec<(u64, u64)>,           // (recv tag-id, msg id)
        vis_clock: u64,
    }

    impl Model {
        fn ok(e: (u32, i32), s: Source, t: TagSel) -> bool {
            env(e.0, e.1).matches(s, t)
        }
        fn on_deliver(&mut self, src: u32, seq: u32, tag: i32, id: u64) {
            self.delivered
                .entry(src)
                .or_default()
                .insert(seq, (tag, id));
            loop {
                let n = *self.next_visible.entry(src).or_default();
                let Some((tag, id)) = self.delivered.get_mut(&src).and_then(|d| d.remove(&n))
                else {
                    break;
                };
                self.next_visible.insert(src, n + 1);
                // First posted receive in post order that matches.
                if let Some(i) = self
                    .posted
                    .iter()
                    .position(|&(_, s, t)| Self::ok((src, tag), s, t))
                {
                    let (r, _, _) = self.posted.remove(i);
                    self.matched.push((r, id));
                } else {
                    self.vis_clock += 1;
                    self.visible.push((src, n, tag, id, self.vis_clock));
                }
            }
        }
        fn find(&self, s: Source, t: TagSel) -> Option<usize> {
            self.visible
                .iter()
                .enumerate()
                .filter(|(_, v)| Self::ok((v.0, v.2), s, t))
                .min_by_key(|(_, v)| v.4)
                .map(|(i, _)| i)
        }
    }

    fn op() -> impl Strategy<Value = Op> {
        let src = 0u32..3;
        let osrc = proptest::option::of(0u32..3);
        let otag = proptest::option::of(0i32..3);
        prop_oneof![
            3 => (src, 0i32..3).prop_map(|(src, tag)| Op::Send { src, tag }),
            4 => any::<usize>().prop_map(Op::Deliver),
            2 => (osrc.clone(), otag.clone()).prop_map(|(src, tag)| Op::Post { src, tag }),
            1 => (osrc.clone(), otag.clone()).prop_map(|(src, tag)| Op::Probe { src, tag }),
            1 => (osrc, otag).prop_map(|(src, tag)| Op::MProbe { src, tag }),
            1 => any::<usize>().prop_map(Op::Cancel),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        #[test]
        fn engine_matches_the_reference_model(ops in proptest::collection::vec(op(), 0..120)) {
            let mut m = Matcher::<u64>::new();
            let mut model = Model::default();
            let mut seq: HashMap<u32, u32> = HashMap::new();
            let mut in_flight: Vec<(u32, u32, i32, u64)> = Vec::new();
            let mut next_id = 0u64;
            // Receive ids in the engine and the model are both post counters; map engine ids.
            let mut posts: Vec<(RecvId, u64)> = Vec::new();
            let mut post_no = 0u64;
            let mut engine_matched: Vec<(u64, u64)> = Vec::new();
            for op in ops {
                match op {
                    Op::Send { src, tag } => {
                        let s = seq.entry(src).or_default();
                        in_flight.push((src, *s, tag, next_id));
                        *s += 1;
                        next_id += 1;
                    }
                    Op::Deliver(i) if !in_flight.is_empty() => {
                        let (src, sq, tag, id) = in_flight.remove(i % in_flight.len());
                        model.on_deliver(src, sq, tag, id);
                        for (rid, msg) in arrive(&mut m, env(src, tag), sq, id) {
                            let p = posts.iter().find(|(r, _)| *r == rid).expect("known recv").1;
                            // The delivery names the poster's number with no table between.
                            prop_assert_eq!(rid.owner, p);
                            engine_matched.push((p, msg));
                        }
                    }
                    Op::Deliver(_) => {}
                    Op::Post { src, tag } => {
                        let (s, t) = sel(src, tag);
                        let no = post_no;
                        post_no += 1;
                        match (m.post(s, t, no), model.find(s, t)) {
                            (Posting::Matched(_, id), Some(i)) => {
                                let v = model.visible.remove(i);
                                prop_assert_eq!(id, v.3);
                                engine_matched.push((no, id));
                                model.matched.push((no, id));
                            }
                            (Posting::Posted(rid), None) => {
                                posts.push((rid, no));
                                model.posted.push((no, s, t));
                            }
                            (a, b) => prop_assert!(false, "post mismatch: engine {:?} model {:?}", a, b),
                        }
                    }
                    Op::Probe { src, tag } => {
                        let (s, t) = sel(src, tag);
                        let e = m.probe(s, t).map(|e| (e.source, e.tag));
                        let mo = model.find(s, t).map(|i| (model.visible[i].0, model.visible[i].2));
                        prop_assert_eq!(e, mo);
                    }
                    Op::MProbe { src, tag } => {
                        let (s, t) = sel(src, tag);
                        let e = m.take(s, t).map(|(_, id)| id);
                        let mo = model.find(s, t).map(|i| model.visible.remove(i).3);
                        prop_assert_eq!(e, mo);
                    }
                    Op::Cancel(i) if !model.posted.is_empty() => {
                        let (no, _, _) = model.posted.remove(i % model.posted.len());
                        let rid = posts.iter().find(|(_, n)| *n == no).unwrap().0;
                        prop_assert!(m.cancel(rid));
                    }
                    Op::Cancel(_) => {}
                }
                prop_assert_eq!(&engine_matched, &model.matched);
                prop_assert_eq!(m.posted(), model.posted.len());
            }
        }
    }
}
