//! The straggler report on a communicator: the waits `crate::straggler` keeps, combined over
//! the ranks by collectives.

use crate::coll::Op;
use crate::comm::Communicator;
use crate::straggler::{KEEP, RankLateness, StragglerReport, dur, summary};
use crate::{CommError, Result};
use std::time::Instant;

/// Timing of blocking collectives for the straggler report (no-ops when it is off).
impl Communicator {
    /// The start of a blocking collective, when waits are recorded.
    pub(crate) fn straggler_start(&self) -> Option<Instant> {
        self.shared().straggler.as_ref().map(|_| Instant::now())
    }

    /// The end of a blocking collective started at `t0`.
    pub(crate) fn straggler_end(&self, t0: Option<Instant>) {
        if let (Some(t0), Some(w)) = (t0, &self.shared().straggler) {
            w.record(self.ctx() + 1, self.check_gen(), t0.elapsed().as_secs_f64());
        }
    }

    /// Which ranks arrive last at this communicator's blocking collectives, from the waits
    /// recorded with `RCOMM_STRAGGLER=1` (see the [method](crate::straggler) and its
    /// limits). Collective; every rank gets the same report. With `RCOMM_STRAGGLER=1` rank 0
    /// also prints the world's report to stderr at finalize.
    pub fn straggler_report(&self) -> Result<StragglerReport> {
        let Some(w) = &self.shared().straggler else {
            return Err(CommError::InvalidArg(
                "straggler_report needs RCOMM_STRAGGLER=1 (no collective waits were recorded)"
                    .into(),
            ));
        };
        let (ctx, epoch) = (self.ctx() + 1, self.check_gen());
        let (next, secs) = w.snapshot(ctx, epoch, true);
        let res = self.straggler_compute(next, &secs);
        w.snapshot(ctx, epoch, false);
        res
    }

    fn straggler_compute(&self, next: u64, secs: &[f64]) -> Result<StragglerReport> {
        // The calls every rank has recorded: the last `w` before the fewest any rank made.
        let mut agreed = [next];
        self.allreduce_in_place(&mut agreed, Op::Min)?;
        let last = agreed[0];
        let w = last.min(KEEP as u64) as usize;
        let first = last - w as u64;
        let mine: Vec<f64> = (first..last)
            .map(|k| {
                // Kept unless this rank made so many more calls that it overwrote them.
                if k + (KEEP as u64) >= next {
                    secs.get((k % KEEP as u64) as usize)
                        .copied()
                        .unwrap_or(-1.0)
                } else {
                    -1.0
                }
            })
            .collect();
        let mut longest = mine.clone();
        if w > 0 {
            self.allreduce_in_place(&mut longest, Op::Max)?;
        }
        let (late, waits): (Vec<f64>, Vec<f64>) = mine
            .iter()
            .zip(&longest)
            .filter(|(m, _)| **m >= 0.0)
            .map(|(m, x)| (x - m, *m))
            .unzip();
        let (mean, p99, max) = summary(&late);
        let mean_wait = summary(&waits).0;
        let n = self.size() as usize;
        let mut all = vec![0f64; 4 * n];
        self.allgather(&[mean, p99, max, mean_wait], &mut all)?;
        let mut ranks: Vec<RankLateness> = {
            let e = self.shared().lock();
            all.chunks(4)
                .enumerate()
                .map(|(r, s)| RankLateness {
                    rank: r as u32,
                    host: self
                        .world_rank(r as u32)
                        .map(|w| e.host_of(w).to_string())
                        .unwrap_or_default(),
                    mean: dur(s[0]),
                    p99: dur(s[1]),
                    max: dur(s[2]),
                    mean_wait: dur(s[3]),
                })
                .collect()
        };
        ranks.sort_by(|a, b| b.mean.cmp(&a.mean).then(a.rank.cmp(&b.rank)));
        Ok(StragglerReport { calls: w, ranks })
    }
}
