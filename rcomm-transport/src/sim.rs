//! `sim`: an in-process, deterministic network of N ranks running on *virtual time*.
//!
//! Everything above the transport — the point-to-point matching engine, collective schedules,
//! failure handling — must be tested against latency, bandwidth limits, reordering, loss and dead
//! peers. Real sockets make such tests slow, flaky and impossible to replay. Following the
//! approach of `quinn-proto`, this module is sans-IO: no threads, no sockets, no wall clock. The
//! test drives the network explicitly (`send`, then `step` / `run_until` / `run_until_idle`), and
//! time only moves when the test asks for the next event. Every random choice (jitter, loss) comes
//! from a seeded PRNG and ties in time are broken by insertion order, so one seed always yields
//! exactly the same event sequence and a failing case can be replayed bit for bit.
//!
//! The cost model is the one `tune` uses, `time ≈ α + bytes/β`, plus per-link serialisation: a
//! link `from → to` transmits one message at a time, so back-to-back large messages queue.

use std::collections::{BTreeMap, HashMap};

/// Upper bound on `SimConfig::ranks`, so that a bad configuration yields an error instead of an
/// out-of-memory abort or a failure broadcast that never ends.
pub const MAX_RANKS: usize = 1 << 20;

/// Parameters of a simulated network; plain data so tests can sweep them in tables.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Number of ranks; ranks are `0..ranks`.
    pub ranks: usize,
    /// Per-message latency α in nanoseconds, paid after transmission.
    pub latency_ns: u64,
    /// Link bandwidth β in bytes per second; `f64::INFINITY` makes transmission free.
    pub bandwidth_bytes_per_s: f64,
    /// Maximum random extra delay per message (uniform in `0..=jitter_ns`); any value above zero
    /// lets messages of one pair overtake each other, which exercises reordering logic.
    pub jitter_ns: u64,
    /// Probability in `0..=1` that a message is dropped instead of delivered.
    pub loss: f64,
    /// Seed of the PRNG behind jitter and loss; the same seed replays the same run.
    pub seed: u64,
}

impl Default for SimConfig {
    /// Two ranks on a quiet, fast link (1 µs, 10 GB/s, no jitter, no loss): the common case a
    /// test tweaks one field of.
    fn default() -> Self {
        SimConfig {
            ranks: 2,
            latency_ns: 1_000,
            bandwidth_bytes_per_s: 10e9,
            jitter_ns: 0,
            loss: 0.0,
            seed: 0,
        }
    }
}

/// Identity of one sent message, unique within a `SimNet` and increasing in send order, so a
/// test can tell which send an event belongs to and check ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MsgId(pub u64);

/// Something observable that happened on the simulated network; a test (or the layer under test)
/// reacts to these in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimEvent {
    /// A message reached its receiver at virtual time `at` (ns).
    Deliver {
        /// Virtual time of arrival.
        at: u64,
        /// Sending rank.
        from: usize,
        /// Receiving rank.
        to: usize,
        /// The id `send` returned.
        id: MsgId,
        /// The bytes handed to `send`, unchanged.
        payload: Vec<u8>,
    },
    /// Live rank `observer` learnt that rank `failed` died; arrives `latency_ns` after the
    /// failure, as a launcher notice or a broken connection would.
    PeerFailed {
        /// Virtual time of the observation.
        at: u64,
        /// The live rank that notices.
        observer: usize,
        /// The rank that failed.
        failed: usize,
    },
    /// A message was lost by the injected loss; reported so tests can see what the layer above
    /// must recover from (a real network would say nothing).
    Dropped {
        /// Virtual time at which it would have arrived.
        at: u64,
        /// Sending rank.
        from: usize,
        /// Intended receiver.
        to: usize,
        /// The id `send` returned.
        id: MsgId,
    },
}

impl SimEvent {
    /// Virtual time of the event, whatever its kind; handy for ordering assertions.
    pub fn at(&self) -> u64 {
        match self {
            SimEvent::Deliver { at, .. }
            | SimEvent::PeerFailed { at, .. }
            | SimEvent::Dropped { at, .. } => *at,
        }
    }
}

/// Traffic delivered over one directed link; tests assert these so that traffic cannot silently
/// take another path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Messages delivered.
    pub messages: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
}

/// Counters of a `SimNet` run, for assertions about what actually crossed the network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Delivered traffic per directed link `(from, to)`; links with no delivery are absent.
    pub links: BTreeMap<(usize, usize), LinkStats>,
    /// Messages lost to injected loss.
    pub dropped: u64,
    /// Messages in flight to or from a rank when it failed, hence never delivered.
    pub discarded: u64,
}

impl SimStats {
    /// Delivered traffic of one link; zero for links (or ranks) that saw none, so callers need
    /// not special-case absent entries.
    pub fn link(&self, from: usize, to: usize) -> LinkStats {
        self.links.get(&(from, to)).copied().unwrap_or_default()
    }
}

/// Everything that can go wrong driving a `SimNet`; each message names the bad value or rank.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// A network needs someone on it.
    #[error("sim config has 0 ranks; a simulated network needs at least 1 rank")]
    NoRanks,
    /// The rank count exceeds `MAX_RANKS`.
    #[error("sim config asks for {ranks} ranks, more than the simulator's limit of {max}")]
    TooManyRanks {
        /// Requested rank count.
        ranks: usize,
        /// The limit, `MAX_RANKS`.
        max: usize,
    },
    /// Bandwidth must be a positive number of bytes per second.
    #[error("sim bandwidth {value} bytes/s is not positive; use e.g. 1e10 for 10 GB/s")]
    BadBandwidth {
        /// The rejected value.
        value: f64,
    },
    /// Loss is a probability.
    #[error("sim loss probability {value} is outside 0..=1")]
    BadLoss {
        /// The rejected value.
        value: f64,
    },
    /// A rank outside `0..ranks` was named.
    #[error(
        "rank {rank} does not exist in a simulated network of {ranks} ranks (valid: 0..{ranks})"
    )]
    BadRank {
        /// The rank named.
        rank: usize,
        /// Size of the network.
        ranks: usize,
    },
    /// The rank has failed, so nothing more can be sent to or from it.
    #[error("rank {rank} has failed; no message can be sent to or from it")]
    PeerFailed {
        /// The failed rank.
        rank: usize,
    },
    /// Virtual time never runs backwards, so a failure cannot be scheduled in the past.
    #[error("cannot fail rank {rank} at {at} ns: virtual time is already {now} ns")]
    TimeInPast {
        /// The rank to fail.
        rank: usize,
        /// The requested time.
        at: u64,
        /// The current virtual time.
        now: u64,
    },
}

/// What sits in the event queue; `Fail` is internal and never surfaces as an event itself.
#[derive(Debug)]
enum Pending {
    Deliver {
        from: usize,
        to: usize,
        id: MsgId,
        payload: Vec<u8>,
    },
    Drop {
        from: usize,
        to: usize,
        id: MsgId,
    },
    Fail {
        rank: usize,
    },
    Observe {
        observer: usize,
        failed: usize,
    },
}

impl Pending {
    /// Whether this is a message with `rank` at either end (discarded when `rank` fails).
    fn is_message_of(&self, rank: usize) -> bool {
        match self {
            Pending::Deliver { from, to, .. } | Pending::Drop { from, to, .. } => {
                *from == rank || *to == rank
            }
            Pending::Fail { .. } | Pending::Observe { .. } => false,
        }
    }
}

/// splitmix64: tiny, seedable and good enough for jitter and loss; no crate dependency.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The simulated network: a virtual clock, a time-ordered event queue and per-link state. One
/// value holds all ranks, so a single-threaded test sees and controls everything.
#[derive(Debug)]
pub struct SimNet {
    cfg: SimConfig,
    now: u64,
    seq: u64,
    next_id: u64,
    rng: SplitMix64,
    /// Keyed by (time, insertion sequence): iteration order is the deterministic event order.
    queue: BTreeMap<(u64, u64), Pending>,
    /// Virtual time at which each link finishes its current transmission.
    /// Keyed by (from, to, stream): each stream of a pair is serialised on its own.
    link_free: HashMap<(usize, usize, usize), u64>,
    failed: Vec<bool>,
    stats: SimStats,
}

impl SimNet {
    /// Validates `cfg` up front so a bad test table fails with a message, not a panic mid-run.
    pub fn new(cfg: SimConfig) -> Result<SimNet, SimError> {
        if cfg.ranks == 0 {
            return Err(SimError::NoRanks);
        }
        if cfg.ranks > MAX_RANKS {
            return Err(SimError::TooManyRanks {
                ranks: cfg.ranks,
                max: MAX_RANKS,
            });
        }
        let bw = cfg.bandwidth_bytes_per_s;
        if bw.is_nan() || bw <= 0.0 {
            return Err(SimError::BadBandwidth { value: bw });
        }
        if !(0.0..=1.0).contains(&cfg.loss) {
            return Err(SimError::BadLoss { value: cfg.loss });
        }
        Ok(SimNet {
            rng: SplitMix64(cfg.seed),
            failed: vec![false; cfg.ranks],
            cfg,
            now: 0,
            seq: 0,
            next_id: 0,
            queue: BTreeMap::new(),
            link_free: HashMap::new(),
            stats: SimStats::default(),
        })
    }

    /// The configuration this network was built with.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Number of ranks, so callers iterating over peers need not keep the config around.
    pub fn ranks(&self) -> usize {
        self.cfg.ranks
    }

    /// Current virtual time in nanoseconds; moves only when events are processed or
    /// `run_until` is called.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Whether `rank` has failed (false for ranks that do not exist).
    pub fn is_failed(&self, rank: usize) -> bool {
        self.failed.get(rank).copied().unwrap_or(false)
    }

    /// Number of queued events (messages in flight, pending failures and notices); zero means
    /// `step` would return `None`.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Counters of delivered, dropped and discarded traffic so far.
    pub fn stats(&self) -> &SimStats {
        &self.stats
    }

    /// Sends `payload` from `from` to `to` at the current virtual time. It arrives at
    /// `max(now, link free) + len/β + α (+ jitter)`; the link stays busy for `len/β`, so later
    /// messages on the same link queue behind it. Loss is decided here, deterministically.
    pub fn send(&mut self, from: usize, to: usize, payload: Vec<u8>) -> Result<MsgId, SimError> {
        self.send_on(from, to, 0, payload)
    }

    /// [`send`](Self::send) on stream `stream` of the pair: streams (several connections, or
    /// rails) are serialised independently, so a small message on one overtakes a large one
    /// sent earlier on another.
    pub fn send_on(
        &mut self,
        from: usize,
        to: usize,
        stream: usize,
        payload: Vec<u8>,
    ) -> Result<MsgId, SimError> {
        self.check_rank(from)?;
        self.check_rank(to)?;
        for rank in [from, to] {
            if self.failed[rank] {
                return Err(SimError::PeerFailed { rank });
            }
        }
        let id = MsgId(self.next_id);
        self.next_id += 1;
        let tx = self.transmit_ns(payload.len());
        let free = self.link_free.entry((from, to, stream)).or_insert(0);
        let finish = (*free).max(self.now).saturating_add(tx);
        *free = finish;
        let jitter = match self.cfg.jitter_ns {
            0 => 0,
            u64::MAX => self.rng.next_u64(),
            j => self.rng.next_u64() % (j + 1),
        };
        let at = finish
            .saturating_add(self.cfg.latency_ns)
            .saturating_add(jitter);
        let lost = self.cfg.loss > 0.0 && self.rng.next_unit() < self.cfg.loss;
        let ev = if lost {
            Pending::Drop { from, to, id }
        } else {
            Pending::Deliver {
                from,
                to,
                id,
                payload,
            }
        };
        self.schedule(at, ev);
        Ok(id)
    }

    /// Fails `rank` now: its in-flight messages (both directions) are discarded, later sends
    /// involving it return `PeerFailed`, and every live rank observes the failure after α.
    /// Failing an already failed rank does nothing, so scripted and scheduled failures compose.
    pub fn fail_rank(&mut self, rank: usize) -> Result<(), SimError> {
        self.check_rank(rank)?;
        self.fail_now(rank);
        Ok(())
    }

    /// Schedules the failure of `rank` at virtual time `at`, so a test can kill a peer in the
    /// middle of an operation; messages arriving before `at` are still delivered.
    pub fn fail_rank_at(&mut self, rank: usize, at: u64) -> Result<(), SimError> {
        self.check_rank(rank)?;
        if at < self.now {
            return Err(SimError::TimeInPast {
                rank,
                at,
                now: self.now,
            });
        }
        if at == self.now {
            self.fail_now(rank);
        } else {
            self.schedule(at, Pending::Fail { rank });
        }
        Ok(())
    }

    /// Advances virtual time to the next observable event and returns it; `None` when nothing
    /// is left. Internal events (a scheduled failure taking effect) are processed on the way.
    pub fn step(&mut self) -> Option<SimEvent> {
        loop {
            let ((at, _), pending) = self.queue.pop_first()?;
            if let Some(ev) = self.process(at, pending) {
                return Some(ev);
            }
        }
    }

    /// Processes every event due at or before `t`, in order, and then sets the clock to `t`
    /// (never backwards), so a test can model time spent computing between sends.
    pub fn run_until(&mut self, t: u64) -> Vec<SimEvent> {
        let mut out = Vec::new();
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > t {
                break;
            }
            let ((at, _), pending) = entry.remove_entry();
            out.extend(self.process(at, pending));
        }
        self.now = self.now.max(t);
        out
    }

    /// Processes events until the queue is empty and returns them in order; terminates because
    /// processing only ever adds a bounded number of failure notices.
    pub fn run_until_idle(&mut self) -> Vec<SimEvent> {
        std::iter::from_fn(|| self.step()).collect()
    }

    fn check_rank(&self, rank: usize) -> Result<(), SimError> {
        if rank < self.cfg.ranks {
            Ok(())
        } else {
            Err(SimError::BadRank {
                rank,
                ranks: self.cfg.ranks,
            })
        }
    }

    /// Transmission time of `len` bytes, rounded to the nearest ns (saturating).
    fn transmit_ns(&self, len: usize) -> u64 {
        (len as f64 * 1e9 / self.cfg.bandwidth_bytes_per_s).round() as u64
    }

    fn schedule(&mut self, at: u64, ev: Pending) {
        self.queue.insert((at, self.seq), ev);
        self.seq += 1;
    }

    fn fail_now(&mut self, rank: usize) {
        if self.failed[rank] {
            return;
        }
        self.failed[rank] = true;
        let before = self.queue.len();
        self.queue.retain(|_, p| !p.is_message_of(rank));
        self.stats.discarded += (before - self.queue.len()) as u64;
        let at = self.now.saturating_add(self.cfg.latency_ns);
        for observer in 0..self.cfg.ranks {
            if !self.failed[observer] {
                self.schedule(
                    at,
                    Pending::Observe {
                        observer,
                        failed: rank,
                    },
                );
            }
        }
    }

    fn process(&mut self, at: u64, pending: Pending) -> Option<SimEvent> {
        self.now = self.now.max(at);
        match pending {
            Pending::Deliver {
                from,
                to,
                id,
                payload,
            } => {
                let link = self.stats.links.entry((from, to)).or_default();
                link.messages += 1;
                link.bytes += payload.len() as u64;
                Some(SimEvent::Deliver {
                    at,
                    from,
                    to,
                    id,
                    payload,
                })
            }
            Pending::Drop { from, to, id } => {
                self.stats.dropped += 1;
                Some(SimEvent::Dropped { at, from, to, id })
            }
            Pending::Fail { rank } => {
                self.fail_now(rank);
                None
            }
            Pending::Observe { observer, failed } => {
                (!self.failed[observer]).then_some(SimEvent::PeerFailed {
                    at,
                    observer,
                    failed,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn net(cfg: SimConfig) -> SimNet {
        SimNet::new(cfg).expect("valid config")
    }

    fn delivered_ids(events: &[SimEvent], from: usize, to: usize) -> Vec<MsgId> {
        events
            .iter()
            .filter_map(|e| match e {
                SimEvent::Deliver {
                    from: f, to: t, id, ..
                } if (*f, *t) == (from, to) => Some(*id),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn delivery_time_is_alpha_plus_bytes_over_beta() {
        // 1 MB at 10 GB/s = 100 µs, plus 1 µs latency.
        let mut n = net(SimConfig::default());
        let id = n.send(0, 1, vec![7; 1_000_000]).unwrap();
        match n.step() {
            Some(SimEvent::Deliver {
                at,
                from: 0,
                to: 1,
                id: got,
                payload,
            }) => {
                assert_eq!(at, 1_000 + 100_000);
                assert_eq!(got, id);
                assert_eq!(payload, vec![7; 1_000_000]);
            }
            other => panic!("expected delivery, got {other:?}"),
        }
        assert_eq!(n.now(), 101_000);
        assert_eq!(n.step(), None);
        // An empty message costs exactly alpha, counted from the current time.
        n.send(1, 0, Vec::new()).unwrap();
        assert_eq!(n.step().unwrap().at(), 101_000 + 1_000);
    }

    #[test]
    fn back_to_back_messages_on_one_link_serialise_but_other_links_do_not() {
        let mut n = net(SimConfig {
            ranks: 3,
            ..SimConfig::default()
        });
        for _ in 0..3 {
            n.send(0, 1, vec![0; 1_000_000]).unwrap(); // 100 µs each on link 0->1
        }
        n.send(0, 2, vec![0; 1_000_000]).unwrap(); // independent link
        let ev = n.run_until_idle();
        let times = |to: usize| -> Vec<u64> {
            ev.iter()
                .filter(|e| matches!(e, SimEvent::Deliver { to: t, .. } if *t == to))
                .map(SimEvent::at)
                .collect()
        };
        assert_eq!(times(1), vec![101_000, 201_000, 301_000]);
        assert_eq!(times(2), vec![101_000]);
        // A link that went idle does not charge for past transmissions.
        n.run_until(1_000_000);
        n.send(0, 1, vec![0; 10]).unwrap();
        assert_eq!(n.step().unwrap().at(), 1_000_000 + 1 + 1_000);
    }

    #[test]
    fn equal_times_are_broken_by_send_order() {
        let mut n = net(SimConfig {
            ranks: 4,
            ..SimConfig::default()
        });
        let ids: Vec<_> = (1..4)
            .rev()
            .map(|to| n.send(0, to, vec![1]).unwrap())
            .collect();
        let got: Vec<_> = n
            .run_until_idle()
            .into_iter()
            .map(|e| match e {
                SimEvent::Deliver { id, .. } => id,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(got, ids);
    }

    fn burst(cfg: SimConfig, count: usize) -> Vec<SimEvent> {
        let mut n = net(cfg);
        for i in 0..count {
            n.send(i % 2, (i + 1) % 2, vec![i as u8; 64]).unwrap();
        }
        n.run_until_idle()
    }

    #[test]
    fn jitter_reorders_messages_of_one_pair_and_no_jitter_never_does() {
        let jittery = burst(
            SimConfig {
                jitter_ns: 50_000,
                seed: 3,
                ..SimConfig::default()
            },
            200,
        );
        let ids = delivered_ids(&jittery, 0, 1);
        assert_eq!(ids.len(), 100);
        assert!(
            ids.windows(2).any(|w| w[0] > w[1]),
            "jitter should reorder: {ids:?}"
        );
        for seed in 0..5 {
            let calm = burst(
                SimConfig {
                    seed,
                    ..SimConfig::default()
                },
                200,
            );
            for (f, t) in [(0, 1), (1, 0)] {
                let ids = delivered_ids(&calm, f, t);
                assert_eq!(ids.len(), 100);
                assert!(
                    ids.windows(2).all(|w| w[0] < w[1]),
                    "reordered without jitter"
                );
            }
        }
    }

    #[test]
    fn same_seed_replays_identically_and_another_seed_differs() {
        let cfg = SimConfig {
            jitter_ns: 20_000,
            loss: 0.1,
            seed: 42,
            ..SimConfig::default()
        };
        let a = burst(cfg.clone(), 300);
        assert_eq!(a, burst(cfg.clone(), 300));
        assert_ne!(a, burst(SimConfig { seed: 43, ..cfg }, 300));
    }

    #[test]
    fn loss_drops_about_the_configured_fraction() {
        let mut n = net(SimConfig {
            loss: 0.25,
            seed: 9,
            ..SimConfig::default()
        });
        let total = 10_000;
        for _ in 0..total {
            n.send(0, 1, vec![0; 8]).unwrap();
        }
        let ev = n.run_until_idle();
        let dropped = ev
            .iter()
            .filter(|e| matches!(e, SimEvent::Dropped { .. }))
            .count();
        assert_eq!(ev.len(), total);
        assert!(
            (2_200..=2_800).contains(&dropped),
            "dropped {dropped} of {total}"
        );
        assert_eq!(n.stats().dropped, dropped as u64);
        assert_eq!(n.stats().link(0, 1).messages, (total - dropped) as u64);
        assert_eq!(n.stats().link(0, 1).bytes, 8 * (total - dropped) as u64);
        // loss = 1 drops everything, loss = 0 nothing.
        let all = burst(
            SimConfig {
                loss: 1.0,
                ..SimConfig::default()
            },
            50,
        );
        assert!(all.iter().all(|e| matches!(e, SimEvent::Dropped { .. })));
        let none = burst(SimConfig::default(), 50);
        assert!(none.iter().all(|e| matches!(e, SimEvent::Deliver { .. })));
    }

    #[test]
    fn failure_discards_in_flight_rejects_sends_and_is_observed_by_all_live_ranks() {
        let mut n = net(SimConfig {
            ranks: 4,
            ..SimConfig::default()
        });
        n.send(0, 1, vec![1; 100]).unwrap();
        n.send(1, 2, vec![2; 100]).unwrap();
        n.send(2, 3, vec![3; 100]).unwrap();
        n.fail_rank(3).unwrap();
        n.fail_rank(1).unwrap();
        n.fail_rank(1).unwrap(); // idempotent
        assert_eq!(n.stats().discarded, 3);
        assert_eq!(n.send(0, 1, vec![]), Err(SimError::PeerFailed { rank: 1 }));
        assert_eq!(n.send(1, 0, vec![]), Err(SimError::PeerFailed { rank: 1 }));
        let ev = n.run_until_idle();
        // Rank 3's failure is seen by 0 and 2 (rank 1 died before its notice arrived); rank 1's too.
        let expect = |observer, failed| SimEvent::PeerFailed {
            at: 1_000,
            observer,
            failed,
        };
        assert_eq!(
            ev,
            vec![expect(0, 3), expect(2, 3), expect(0, 1), expect(2, 1)]
        );
        assert!(n.stats().links.is_empty());
        assert!(n.is_failed(1) && n.is_failed(3) && !n.is_failed(0) && !n.is_failed(99));
    }

    #[test]
    fn scheduled_failure_takes_effect_at_its_virtual_time() {
        let mut n = net(SimConfig {
            ranks: 3,
            ..SimConfig::default()
        });
        n.send(0, 1, vec![0; 10]).unwrap(); // arrives at 1_001
        n.send(0, 1, vec![0; 1_000_000]).unwrap(); // would arrive at 101_001
        n.fail_rank_at(1, 50_000).unwrap();
        let ev = n.run_until_idle();
        assert_eq!(delivered_ids(&ev, 0, 1), vec![MsgId(0)]);
        assert_eq!(
            &ev[1..],
            &[
                SimEvent::PeerFailed {
                    at: 51_000,
                    observer: 0,
                    failed: 1
                },
                SimEvent::PeerFailed {
                    at: 51_000,
                    observer: 2,
                    failed: 1
                },
            ]
        );
        assert_eq!(n.stats().discarded, 1);
        assert_eq!(
            n.stats().link(0, 1),
            LinkStats {
                messages: 1,
                bytes: 10
            }
        );
        assert_eq!(
            n.fail_rank_at(2, 10),
            Err(SimError::TimeInPast {
                rank: 2,
                at: 10,
                now: 51_000
            })
        );
    }

    #[test]
    fn bad_config_and_bad_ranks_are_errors_with_clear_messages() {
        let bad = |cfg| SimNet::new(cfg).unwrap_err();
        let d = SimConfig::default;
        assert_eq!(bad(SimConfig { ranks: 0, ..d() }), SimError::NoRanks);
        assert!(matches!(
            bad(SimConfig {
                ranks: usize::MAX,
                ..d()
            }),
            SimError::TooManyRanks { .. }
        ));
        for bw in [0.0, -1.0, f64::NAN, f64::NEG_INFINITY] {
            let e = bad(SimConfig {
                bandwidth_bytes_per_s: bw,
                ..d()
            });
            assert!(matches!(e, SimError::BadBandwidth { .. }), "{bw}: {e}");
        }
        for loss in [-0.1, 1.5, f64::NAN] {
            let e = bad(SimConfig { loss, ..d() });
            assert!(e.to_string().contains("loss probability"), "{e}");
        }
        let mut n = net(d());
        let e = n.send(0, 2, vec![]).unwrap_err();
        assert_eq!(e, SimError::BadRank { rank: 2, ranks: 2 });
        assert!(e.to_string().contains("rank 2"), "{e}");
        assert!(n.send(5, 0, vec![]).is_err() && n.fail_rank(2).is_err());
        assert!(n.fail_rank_at(7, 100).is_err());
        // Extreme but valid settings saturate instead of overflowing.
        let mut n = net(SimConfig {
            latency_ns: u64::MAX,
            jitter_ns: u64::MAX,
            bandwidth_bytes_per_s: f64::MIN_POSITIVE,
            ..d()
        });
        n.send(0, 1, vec![0; 4]).unwrap();
        assert_eq!(n.step().unwrap().at(), u64::MAX);
    }

    proptest! {
        #[test]
        fn without_jitter_or_loss_each_pair_is_fifo_and_exactly_once(
            ranks in 1usize..5,
            latency_ns in 0u64..10_000,
            bandwidth in 1e6f64..1e11,
            ops in prop::collection::vec((0usize..5, 0usize..5, 0usize..3_000, 0u64..5_000), 0..80),
        ) {
            let mut n = net(SimConfig { ranks, latency_ns, bandwidth_bytes_per_s: bandwidth, ..SimConfig::default() });
            let mut sent = Vec::new();
            let mut ev = Vec::new();
            for (from, to, len, pause) in ops {
                let (from, to) = (from % ranks, to % ranks);
                let payload: Vec<u8> = (0..len).map(|i| (i + sent.len()) as u8).collect();
                let id = n.send(from, to, payload.clone()).unwrap();
                sent.push((from, to, id, payload));
                let until = n.now() + pause;
                ev.extend(n.run_until(until));
            }
            ev.extend(n.run_until_idle());
            prop_assert_eq!(ev.len(), sent.len());
            prop_assert!(ev.windows(2).all(|w| w[0].at() <= w[1].at()));
            for e in &ev {
                let SimEvent::Deliver { from, to, id, payload, .. } = e else {
                    return Err(TestCaseError::fail(format!("unexpected {e:?}")));
                };
                let s = &sent[id.0 as usize];
                prop_assert_eq!((s.0, s.1, s.2, &s.3), (*from, *to, *id, payload));
            }
            for f in 0..ranks {
                for t in 0..ranks {
                    let want: Vec<_> = sent.iter().filter(|s| (s.0, s.1) == (f, t)).map(|s| s.2).collect();
                    prop_assert_eq!(delivered_ids(&ev, f, t), want);
                }
            }
        }
    }
}
