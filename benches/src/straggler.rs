//! `rcomm-bench --straggler`: the per-rank timing test used in the field to find slow ranks.
//! Every rank times the same allreduce loop, one time per iteration; rank 0 gathers each
//! rank's summary and prints per-rank mean, p50 and p99 time, and per-rank *lateness* — at each
//! iteration, the longest time any rank spent in the allreduce minus this rank's own: a rank
//! that arrives late waits least (everyone else waits for it), so its lateness is how much
//! later than the first rank it arrived. Clocks are never compared across ranks.
//!
//! **Outliers** ([`outliers`]): a rank whose mean lateness exceeds the median rank's by more
//! than 3.5 robust standard deviations (1.4826 × the median absolute deviation of the ranks'
//! mean lateness) and by at least 5 % of the median iteration time (so that microsecond jitter
//! on a quiet machine names nobody); or a rank whose mean time is more than 1.5 × the median
//! rank's (for collectives that do not synchronise every rank).

use rcomm::Op;
use std::error::Error;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Bytes per allreduce (f32 sum).
    pub bytes: usize,
    /// Timed iterations.
    pub iters: usize,
    /// Warm-up iterations.
    pub warmup: usize,
    /// Testing aid: (rank, delay) — that rank sleeps this long before every iteration.
    pub slow: Option<(u32, Duration)>,
    /// One JSON object per rank (and one for the outliers) instead of the table.
    pub json: bool,
}

/// One rank's summary, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankStats {
    /// Mean time per iteration.
    pub mean: f64,
    /// Median time per iteration.
    pub p50: f64,
    /// 99th percentile time per iteration.
    pub p99: f64,
    /// Mean lateness.
    pub late_mean: f64,
    /// 99th percentile lateness.
    pub late_p99: f64,
}

/// The value below which `q` (0..=1) of the sorted values lie.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Summarises one rank's per-iteration times and lateness (µs).
pub fn summarise(times: &[f64], late: &[f64]) -> RankStats {
    let sorted = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        s
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (t, l) = (sorted(times), sorted(late));
    RankStats {
        mean: mean(times),
        p50: percentile(&t, 0.5),
        p99: percentile(&t, 0.99),
        late_mean: mean(late),
        late_p99: percentile(&l, 0.99),
    }
}

/// The ranks named as outliers (see the module's rule), each with why.
pub fn outliers(stats: &[RankStats]) -> Vec<(usize, String)> {
    let late: Vec<f64> = stats.iter().map(|s| s.late_mean).collect();
    let means: Vec<f64> = stats.iter().map(|s| s.mean).collect();
    let (med_late, med_time) = (median(&late), median(&means));
    let mad = median(
        &late
            .iter()
            .map(|l| (l - med_late).abs())
            .collect::<Vec<_>>(),
    );
    let bar = med_late + (3.5 * 1.4826 * mad).max(0.05 * med_time);
    let mut out = Vec::new();
    for (r, s) in stats.iter().enumerate() {
        if s.late_mean > bar {
            out.push((
                r,
                format!(
                    "arrives {:.1} µs late on average (median rank {:.1} µs; bar {:.1} µs)",
                    s.late_mean, med_late, bar
                ),
            ));
        } else if stats.len() > 2 && s.mean > 1.5 * med_time {
            out.push((
                r,
                format!(
                    "takes {:.1} µs per iteration (median rank {:.1} µs)",
                    s.mean, med_time
                ),
            ));
        }
    }
    out
}

/// Runs the test on every rank; rank 0 prints. Returns the outliers (on rank 0; empty
/// elsewhere).
pub fn run(plan: &Plan) -> Result<Vec<usize>, Box<dyn Error>> {
    let world = rcomm::init()?;
    let (r, n) = (world.rank(), world.size() as usize);
    let count = (plan.bytes / 4).max(1);
    let mut buf = vec![1f32; count];
    for _ in 0..plan.warmup {
        world.allreduce_in_place(&mut buf, Op::Sum)?;
    }
    world.barrier()?;
    let mut times = vec![0f64; plan.iters];
    for t in times.iter_mut() {
        if let Some((s, d)) = plan.slow
            && s == r
        {
            std::thread::sleep(d);
        }
        let t0 = Instant::now();
        world.allreduce_in_place(&mut buf, Op::Sum)?;
        *t = t0.elapsed().as_secs_f64() * 1e6;
    }
    let mut longest = times.clone();
    world.allreduce_in_place(&mut longest, Op::Max)?;
    let late: Vec<f64> = longest.iter().zip(&times).map(|(m, t)| m - t).collect();
    let s = summarise(&times, &late);
    let mut all = vec![0f64; 5 * n];
    world.allgather(&[s.mean, s.p50, s.p99, s.late_mean, s.late_p99], &mut all)?;
    let hosts: Vec<String> = (0..n as u32)
        .map(|q| {
            world
                .peer(q)
                .map(|p| p.hostname.clone())
                .unwrap_or_default()
        })
        .collect();
    if r != 0 {
        return Ok(Vec::new());
    }
    let stats: Vec<RankStats> = all
        .chunks(5)
        .map(|c| RankStats {
            mean: c[0],
            p50: c[1],
            p99: c[2],
            late_mean: c[3],
            late_p99: c[4],
        })
        .collect();
    let out = outliers(&stats);
    if plan.json {
        for (q, st) in stats.iter().enumerate() {
            println!(
                "{{\"rank\":{q},\"host\":\"{}\",\"bytes\":{},\"iters\":{},\"mean_us\":{:.3},\"p50_us\":{:.3},\"p99_us\":{:.3},\"late_mean_us\":{:.3},\"late_p99_us\":{:.3}}}",
                hosts[q],
                plan.bytes,
                plan.iters,
                st.mean,
                st.p50,
                st.p99,
                st.late_mean,
                st.late_p99
            );
        }
        let list: Vec<String> = out.iter().map(|(q, _)| q.to_string()).collect();
        println!("{{\"outliers\":[{}]}}", list.join(","));
    } else {
        println!(
            "# rcomm-bench --straggler: allreduce of {} B (float, sum) on {n} ranks, {} iterations after {} warm-up",
            count * 4,
            plan.iters,
            plan.warmup
        );
        println!(
            "# time: per iteration inside the allreduce; late: the longest time of any rank at that iteration minus this rank's (how much later than the first rank it arrived)"
        );
        println!(
            "# {:>5}  {:<20} {:>10} {:>10} {:>10} {:>12} {:>12}",
            "rank", "host", "mean us", "p50 us", "p99 us", "late mean us", "late p99 us"
        );
        for (q, st) in stats.iter().enumerate() {
            println!(
                "  {:>5}  {:<20} {:>10.2} {:>10.2} {:>10.2} {:>12.2} {:>12.2}",
                q, hosts[q], st.mean, st.p50, st.p99, st.late_mean, st.late_p99
            );
        }
        if out.is_empty() {
            println!("# outliers: none");
        }
        for (q, why) in &out {
            println!("# outlier: rank {q} ({}) {why}", hosts[*q]);
        }
    }
    Ok(out.into_iter().map(|(q, _)| q).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(mean: f64, late: f64) -> RankStats {
        RankStats {
            mean,
            p50: mean,
            p99: mean,
            late_mean: late,
            late_p99: late,
        }
    }

    #[test]
    fn a_late_rank_is_named_and_jitter_is_not() {
        let quiet = [
            st(100.0, 2.0),
            st(101.0, 3.0),
            st(99.0, 1.0),
            st(100.0, 4.0),
        ];
        assert!(outliers(&quiet).is_empty());
        let mut one_late = quiet;
        one_late[2] = st(60.0, 80.0);
        let o = outliers(&one_late);
        assert_eq!(o.len(), 1, "{o:?}");
        assert_eq!(o[0].0, 2);
        let mut one_slow = quiet;
        one_slow[1] = st(400.0, 2.0);
        assert_eq!(outliers(&one_slow)[0].0, 1);
    }

    #[test]
    fn percentiles_and_summaries() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((percentile(&v, 0.5), percentile(&v, 0.99)), (50.0, 99.0));
        assert_eq!(percentile(&[], 0.5), 0.0);
        let s = summarise(&[1.0, 3.0], &[0.0, 2.0]);
        assert_eq!((s.mean, s.late_mean, s.late_p99), (2.0, 1.0, 2.0));
    }
}
