//! Straggler statistics (`RCOMM_STRAGGLER=1`): which ranks arrive last at collectives.
//!
//! **Method.** Clocks on different nodes do not agree, so arrival times cannot be compared
//! directly. Each rank instead measures how long it spends inside every blocking collective
//! (entry to return: its *wait*) and keeps the last [`KEEP`] waits per communicator. For a
//! collective whose ranks all leave at about the same time (allreduce, allgather, barrier,
//! reduce-scatter, alltoall — every rank needs every other's data), the rank that arrives last
//! waits least; a rank's *lateness* at a call is the longest wait of any rank at that call
//! minus its own, which is how much later than the first rank it arrived. The report
//! (collective: [`crate::Communicator::straggler_report`], and at finalize on the world) takes the
//! maximum of the waits across ranks per call with one allreduce, then every rank summarises
//! its lateness (mean, p99, max) and rank 0 lists the ranks that were latest on average.
//!
//! **Limits.** Rooted collectives (bcast, reduce, gather, scatter) do not end at the same
//! time everywhere (a bcast root leaves once its data is out), so part of what they show as
//! lateness is the algorithm's own skew; the ordering of ranks still points at the late
//! ones when the skew is systematic. Non-blocking collectives are not recorded (their time
//! includes the caller's computation). Only calls every rank still keeps are compared (the
//! last [`KEEP`] per communicator).

use rcomm_runtime::fastmap::FastMap;
use std::sync::Mutex;
use std::time::Duration;

/// Waits kept per communicator (the report compares the last this many calls).
pub const KEEP: usize = 4096;

/// The waits of every communicator of this process, by internal context.
#[derive(Debug, Default)]
pub(crate) struct Waits {
    comms: Mutex<FastMap<u32, Ring>>,
}

#[derive(Debug)]
struct Ring {
    /// The communicator's generation (a reused context starts over).
    epoch: u32,
    /// Calls recorded so far.
    next: u64,
    /// Waits in seconds, call k at `k % KEEP`.
    secs: Vec<f64>,
    /// The report's own collectives are not recorded.
    paused: bool,
}

impl Waits {
    pub(crate) fn record(&self, ctx: u32, epoch: u32, secs: f64) {
        let mut m = self.comms.lock().unwrap_or_else(|p| p.into_inner());
        let r = m.entry(ctx).or_insert_with(|| Ring {
            epoch,
            next: 0,
            secs: Vec::new(),
            paused: false,
        });
        if r.epoch != epoch {
            *r = Ring {
                epoch,
                next: 0,
                secs: Vec::new(),
                paused: false,
            };
        }
        if r.paused {
            return;
        }
        let i = (r.next % KEEP as u64) as usize;
        if i == r.secs.len() {
            r.secs.push(secs);
        } else {
            r.secs[i] = secs;
        }
        r.next += 1;
    }

    /// The calls recorded and their waits, pausing the recording (or resuming it).
    pub(crate) fn snapshot(&self, ctx: u32, epoch: u32, pause: bool) -> (u64, Vec<f64>) {
        let mut m = self.comms.lock().unwrap_or_else(|p| p.into_inner());
        match m.get_mut(&ctx).filter(|r| r.epoch == epoch) {
            Some(r) => {
                r.paused = pause;
                (r.next, r.secs.clone())
            }
            None => (0, Vec::new()),
        }
    }
}

/// One rank's line of a [`StragglerReport`].
#[derive(Debug, Clone, PartialEq)]
pub struct RankLateness {
    /// The rank (of the communicator).
    pub rank: u32,
    /// Its host.
    pub host: String,
    /// Mean lateness: how much later than the first rank it arrived, on average.
    pub mean: Duration,
    /// 99th percentile of its lateness.
    pub p99: Duration,
    /// Its largest lateness.
    pub max: Duration,
    /// Mean time it spent inside the collectives.
    pub mean_wait: Duration,
}

/// Per-rank arrival lateness at the blocking collectives of a communicator (see
/// [`crate::Communicator::straggler_report`]); ranks latest on average first.
#[derive(Debug, Clone, PartialEq)]
pub struct StragglerReport {
    /// Collective calls compared (the last ones every rank recorded, at most [`KEEP`]).
    pub calls: usize,
    /// Every rank, latest on average first.
    pub ranks: Vec<RankLateness>,
}

impl StragglerReport {
    /// The rank latest on average, if any call was compared.
    pub fn slowest(&self) -> Option<&RankLateness> {
        self.ranks.first().filter(|_| self.calls > 0)
    }
}

/// Ranks listed by the report's text (the latest ones).
const SHOWN: usize = 16;

impl std::fmt::Display for StragglerReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        writeln!(
            f,
            "rcomm straggler report: {} blocking collective calls on {} ranks; lateness = how much later than the first rank a rank entered a call (from the ranks' waits, no clock sync)",
            self.calls,
            self.ranks.len()
        )?;
        writeln!(
            f,
            "  {:>6}  {:<20} {:>13} {:>13} {:>13} {:>13}",
            "rank", "host", "mean late ms", "p99 late ms", "max late ms", "mean wait ms"
        )?;
        for r in self.ranks.iter().take(SHOWN) {
            writeln!(
                f,
                "  {:>6}  {:<20} {:>13.3} {:>13.3} {:>13.3} {:>13.3}",
                r.rank,
                r.host,
                ms(r.mean),
                ms(r.p99),
                ms(r.max),
                ms(r.mean_wait)
            )?;
        }
        if self.ranks.len() > SHOWN {
            writeln!(f, "  … {} more ranks", self.ranks.len() - SHOWN)?;
        }
        Ok(())
    }
}

/// Mean, 99th percentile and maximum of `v` (zeros when empty).
pub(crate) fn summary(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let p99 = s[(s.len() * 99).div_ceil(100).max(1) - 1];
    (s.iter().sum::<f64>() / s.len() as f64, p99, s[s.len() - 1])
}

pub(crate) fn dur(secs: f64) -> Duration {
    Duration::from_secs_f64(secs.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_and_the_ring_keep_the_last_calls() {
        assert_eq!(summary(&[]), (0.0, 0.0, 0.0));
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(summary(&v), (50.5, 99.0, 100.0));
        let w = Waits::default();
        for i in 0..KEEP + 10 {
            w.record(3, 1, i as f64);
        }
        let (next, secs) = w.snapshot(3, 1, true);
        assert_eq!((next, secs.len()), ((KEEP + 10) as u64, KEEP));
        assert_eq!(secs[5], (KEEP + 5) as f64);
        w.record(3, 1, 0.0);
        assert_eq!(w.snapshot(3, 1, false).0, next, "paused");
        w.record(3, 2, 7.0);
        assert_eq!(
            w.snapshot(3, 2, false),
            (1, vec![7.0]),
            "a new communicator"
        );
    }
}
