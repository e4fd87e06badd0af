//! The hang report: what `rcomm-run` prints when a rank's watchdog fires (`RCOMM_TIMEOUT`), on
//! SIGUSR1 or on `rcomm-run --dump`. Every rank sends its flight recorder (its last
//! operations, see `rcomm_runtime::flight`); this module compares them, a pure function of
//! the dumps so that it is tested on its own.
//!
//! Per communicator (known by context id, lowest world rank and size, which tell apart the
//! communicators of one split), the ranks that reached its latest collective wait in it, and
//! the ranks behind are named as late, with where they are: "rank 5 (host2) is at allreduce
//! #41 on comm tp (done; in no rcomm call since); ranks 4,6,7 wait in allreduce #42 for
//! 3.0 s". Ranks that did not answer are listed with why (a stopped process cannot answer).

use rcomm_runtime::identity::rank_list;
use rcomm_runtime::wire::{DumpRecord, FlightDump};
use std::collections::BTreeMap;

/// What one rank contributed to the report.
#[derive(Debug, Clone)]
pub struct RankView {
    /// World rank.
    pub rank: u32,
    /// Its host as the launcher knows it (the dump's own name wins when there is one).
    pub host: String,
    /// Its flight recorder, or why there is none ("stopped?", "exited").
    pub dump: Result<FlightDump, String>,
}

/// A communicator as records name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct CommKey {
    ctx: u32,
    first: u32,
    size: u32,
}

fn key(r: &DumpRecord) -> CommKey {
    CommKey {
        ctx: r.ctx & !1,
        first: r.comm_first,
        size: r.comm_size,
    }
}

/// Still in the operation when it dumped — or it was, when its watchdog fired (a rank that
/// timed out was waiting; whether its dump left before or after its error is a race).
fn running(r: &DumpRecord) -> bool {
    matches!(r.state.as_str(), "waiting" | "posted" | "timed out")
}

/// The state the report groups by: a timeout is a wait that ended.
fn state_of(r: &DumpRecord) -> &str {
    match r.state.as_str() {
        "timed out" => "waiting",
        s => s,
    }
}

/// "for 3.0 s" from a record's start and its dump's clock ("" when not timed).
fn age(r: &DumpRecord, d: &FlightDump) -> String {
    if r.start_us == 0 || !running(r) {
        return String::new();
    }
    format!(
        " for {:.1} s",
        d.now_us.saturating_sub(r.start_us) as f64 / 1e6
    )
}

fn host_of(v: &RankView) -> &str {
    match &v.dump {
        Ok(d) if !d.host.is_empty() => &d.host,
        _ => &v.host,
    }
}

/// `rank 5 (host2)`.
fn who(v: &RankView) -> String {
    format!("rank {} ({})", v.rank, host_of(v))
}

/// How the flight recorder appends an NCCL operation's stream to its algorithm
/// (`nccl op 3 on stream 0x…`).
const STREAM_SEP: &str = " on stream ";

/// The streams of the NCCL operations the ranks `ahead` are in: `rank 0 0x…, rank 1 0x…`.
fn device_streams(ahead: &[&(&RankView, &FlightDump, &DumpRecord)]) -> Option<String> {
    let s: Vec<String> = ahead
        .iter()
        .filter_map(|(v, _, r)| {
            let (_, stream) = r.algo.split_once(STREAM_SEP)?;
            Some(format!("rank {} {stream}", v.rank))
        })
        .collect();
    (!s.is_empty()).then(|| format!("NCCL streams: {}", s.join(", ")))
}

/// One record in words: `allreduce #42 (f32 sum, 4096 B, ring)`, `recv from rank 3`.
fn describe(r: &DumpRecord) -> String {
    let mut detail: Vec<String> = Vec::new();
    let ty = [r.dtype.as_str(), r.redop.as_str()]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    if !ty.is_empty() {
        detail.push(ty);
    }
    if r.seq > 0 {
        if r.bytes > 0 {
            detail.push(format!("{} B", r.bytes));
        }
        if r.peer != u32::MAX {
            detail.push(format!("root {}", r.peer));
        }
        if !r.algo.is_empty() {
            // An NCCL operation's stream differs per rank: listed apart (`device_streams`), so
            // that ranks in the same operation group together.
            detail.push(r.algo.split(STREAM_SEP).next().unwrap_or("").to_string());
        }
        let d = if detail.is_empty() {
            String::new()
        } else {
            format!(" ({})", detail.join(", "))
        };
        return format!("{} #{}{d}", r.op, r.seq);
    }
    let from = match (r.op.as_str(), r.peer) {
        (_, u32::MAX) => " from any rank".to_string(),
        ("send" | "isend", p) => format!(" to rank {p}"),
        (_, p) => format!(" from rank {p}"),
    };
    format!("{}{from}", r.op)
}

/// The communicator's name in the report: a name some rank gave it, else its id and shape.
fn comm_name(k: &CommKey, views: &[RankView]) -> String {
    let named = views
        .iter()
        .filter_map(|v| v.dump.as_ref().ok())
        .filter(|d| d.records.iter().any(|r| key(r) == *k) || k.ctx == 0)
        .find_map(|d| {
            d.comms
                .iter()
                .find(|(c, n)| *c == k.ctx && !n.is_empty())
                .map(|(_, n)| n.clone())
        });
    match named {
        Some(n) => n,
        None => format!("#{} ({} ranks from rank {})", k.ctx / 2, k.size, k.first),
    }
}

/// Where a rank is now, from its most recent record: waiting in something, or outside rcomm.
fn now_at(d: &FlightDump) -> String {
    match d
        .records
        .last()
        .filter(|r| running(r) && r.state != "posted")
    {
        Some(r) => format!(
            "it waits in {} on comm {}{}",
            describe(r),
            comm_label_of(r, d),
            age(r, d)
        ),
        None => "it is in no rcomm call (computing, or blocked elsewhere)".to_string(),
    }
}

fn comm_label_of(r: &DumpRecord, d: &FlightDump) -> String {
    d.comms
        .iter()
        .find(|(c, n)| *c == r.ctx & !1 && !n.is_empty())
        .map(|(_, n)| n.clone())
        .unwrap_or_else(|| format!("#{}", r.ctx / 2))
}

/// The report's lines (without the launcher's prefix). `views` holds every rank of the job.
pub fn report(views: &[RankView]) -> Vec<String> {
    let mut out = Vec::new();
    let answered: Vec<(&RankView, &FlightDump)> = views
        .iter()
        .filter_map(|v| v.dump.as_ref().ok().map(|d| (v, d)))
        .collect();
    let silent: Vec<&RankView> = views.iter().filter(|v| v.dump.is_err()).collect();
    // Every communicator any answering rank recorded a collective on, world first.
    let mut comms: BTreeMap<CommKey, ()> = BTreeMap::new();
    let mut world_shown = false;
    // Ranks whose current wait a block already told.
    let mut told: Vec<u32> = Vec::new();
    for (_, d) in &answered {
        for r in d.records.iter().filter(|r| r.seq > 0) {
            comms.insert(key(r), ());
        }
    }
    for k in comms.keys() {
        // Each member's latest collective on it.
        let mut last: Vec<(&RankView, &FlightDump, &DumpRecord)> = answered
            .iter()
            .filter_map(|(v, d)| {
                d.records
                    .iter()
                    .filter(|r| r.seq > 0 && key(r) == *k)
                    .max_by_key(|r| (r.seq, r.id))
                    .map(|r| (*v, *d, r))
            })
            .collect();
        last.sort_by_key(|(v, _, _)| v.rank);
        let Some(max) = last.iter().map(|(_, _, r)| r.seq).max() else {
            continue;
        };
        let ahead: Vec<&(&RankView, &FlightDump, &DumpRecord)> =
            last.iter().filter(|(_, _, r)| r.seq == max).collect();
        let behind: Vec<&(&RankView, &FlightDump, &DumpRecord)> =
            last.iter().filter(|(_, _, r)| r.seq < max).collect();
        // Members that did not answer: every silent rank of the world; of another
        // communicator, only as a count (its members are known by their records).
        let silent_members: Vec<u32> = if k.ctx == 0 {
            silent.iter().map(|v| v.rank).collect()
        } else {
            Vec::new()
        };
        let unseen = (k.size as usize).saturating_sub(last.len() + silent_members.len());
        let all_done = behind.is_empty()
            && silent_members.is_empty()
            && unseen == 0
            && ahead.iter().all(|(_, _, r)| !running(r));
        if all_done {
            continue;
        }
        let name = comm_name(k, views);
        world_shown |= k.ctx == 0;
        let mut parts: Vec<String> = Vec::new();
        for (v, d, r) in &behind {
            told.push(v.rank);
            parts.push(format!(
                "{} is at {} on comm {name} ({}{}); {}",
                who(v),
                describe(r),
                r.state,
                age(r, d),
                now_at(d)
            ));
        }
        for &w in &silent_members {
            if let Some(v) = views.iter().find(|v| v.rank == w) {
                parts.push(format!(
                    "{}: no answer ({})",
                    who(v),
                    v.dump.as_ref().err().map_or("", String::as_str)
                ));
            }
        }
        if unseen > 0 {
            parts.push(format!(
                "{unseen} member{} of comm {name} recorded no collective on it",
                if unseen == 1 { "" } else { "s" }
            ));
        }
        // The ranks ahead, grouped by what they are in (ranks calling collectives in
        // different orders show as different operations under one number).
        let mut groups: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
        let mut oldest: BTreeMap<(String, String), String> = BTreeMap::new();
        for (v, d, r) in &ahead {
            let g = (describe(r), state_of(r).to_string());
            groups.entry(g.clone()).or_default().push(v.rank);
            let a = age(r, d);
            let e = oldest.entry(g).or_default();
            if a.len() > e.len() || (a.len() == e.len() && a > *e) {
                *e = a;
            }
        }
        for ((what, state), ranks) in &groups {
            let verb = match state.as_str() {
                "waiting" if ranks.len() == 1 => "waits in",
                "waiting" => "wait in",
                "posted" => "posted",
                "done" => "finished",
                s => {
                    parts.push(format!(
                        "{} {} {what} ({s})",
                        plural(ranks),
                        rank_list(ranks)
                    ));
                    continue;
                }
            };
            parts.push(format!(
                "{} {} {verb} {what}{}",
                plural(ranks),
                rank_list(ranks),
                oldest
                    .get(&(what.clone(), state.clone()))
                    .cloned()
                    .unwrap_or_default()
            ));
        }
        if let Some(s) = device_streams(&ahead) {
            parts.push(s);
        }
        if groups.len() > 1
            && groups
                .keys()
                .any(|(w, _)| w != &groups.keys().next().unwrap().0)
        {
            parts.push(format!(
                "collective #{max} differs between ranks: they call collectives on comm {name} in different orders"
            ));
        }
        out.push(format!("comm {name}:"));
        out.extend(parts.into_iter().map(|p| format!("  {p}")));
    }
    // Silent ranks, unless the world's block named them.
    if !silent.is_empty() && !world_shown {
        let list: Vec<String> = silent
            .iter()
            .map(|v| {
                format!(
                    "{} ({})",
                    who(v),
                    v.dump.as_ref().err().map_or("", String::as_str)
                )
            })
            .collect();
        out.push(format!("no answer from {}", list.join(", ")));
    }
    // Ranks waiting outside any collective (point-to-point), which the comparison above
    // cannot show.
    for (v, d) in answered.iter().filter(|(v, _)| !told.contains(&v.rank)) {
        if let Some(r) = d.records.last().filter(|r| r.seq == 0 && running(r)) {
            out.push(format!(
                "{} waits in {} on comm {}{}{}",
                who(v),
                describe(r),
                comm_label_of(r, d),
                age(r, d),
                if r.state == "timed out" {
                    " (its watchdog fired)"
                } else {
                    ""
                }
            ));
        }
    }
    if out.is_empty() {
        out.push(format!(
            "nothing looks stuck: every one of the {} ranks that answered is past its last collective",
            answered.len()
        ));
    }
    out
}

fn plural(ranks: &[u32]) -> &'static str {
    if ranks.len() == 1 { "rank" } else { "ranks" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(
        id: u64,
        ctx: u32,
        first: u32,
        size: u32,
        seq: u64,
        op: &str,
        state: &str,
    ) -> DumpRecord {
        DumpRecord {
            id,
            ctx,
            comm_first: first,
            comm_size: size,
            seq,
            op: op.into(),
            dtype: if op == "allreduce" { "f32" } else { "" }.into(),
            redop: if op == "allreduce" { "sum" } else { "" }.into(),
            algo: "ring".into(),
            bytes: 1024,
            peer: u32::MAX,
            state: state.into(),
            start_us: if state == "done" { 0 } else { 7_000_000 },
            end_us: 0,
        }
    }

    fn view(rank: u32, records: Vec<DumpRecord>, comms: &[(u32, &str)]) -> RankView {
        RankView {
            rank,
            host: format!("host{}", rank / 4),
            dump: Ok(FlightDump {
                rank,
                host: format!("host{}", rank / 4),
                pid: 100 + rank,
                now_us: 10_000_000,
                total: records.len() as u64,
                comms: comms.iter().map(|(c, n)| (*c, n.to_string())).collect(),
                records,
            }),
        }
    }

    #[test]
    fn nccl_operations_are_named_with_their_number_and_each_rank_s_stream() {
        // Ranks 0, 1, 3 wait in NCCL's operation 3 (allreduce #6), each on a stream of its
        // own; rank 2 is at #5.
        let mut views = Vec::new();
        for r in 0..4u32 {
            let mut recs = vec![rec(1, 0, 0, 4, 5, "allreduce", "done")];
            recs[0].algo = format!("nccl op 2 on stream 0x{:x}", 0x1000 + r);
            if r != 2 {
                let mut w = rec(2, 0, 0, 4, 6, "allreduce", "waiting");
                w.algo = format!("nccl op 3 on stream 0x{:x}", 0x1000 + r);
                recs.push(w);
            }
            views.push(view(r, recs, &[(0, "world")]));
        }
        let rep = report(&views).join("\n");
        assert!(
            rep.contains("ranks 0,1,3 wait in allreduce #6 (f32 sum, 1024 B, nccl op 3)"),
            "{rep}"
        );
        assert!(
            rep.contains("NCCL streams: rank 0 0x1000, rank 1 0x1001, rank 3 0x1003"),
            "{rep}"
        );
        assert!(rep.contains("is at allreduce #5"), "{rep}");
        assert!(!rep.contains("differs between ranks"), "{rep}");
    }

    #[test]
    fn a_late_rank_is_named_with_where_it_is_and_the_waiting_ranks_in_ranges() {
        // 8 ranks; tp = ranks 4..8 (ctx 4). Rank 5 finished tp allreduce #41, then left rcomm.
        let mut views = Vec::new();
        for r in 0..8u32 {
            let mut recs = vec![rec(1, 0, 0, 8, 1, "barrier", "done")];
            if r >= 4 {
                recs.push(rec(2, 4, 4, 4, 41, "allreduce", "done"));
                if r != 5 {
                    // Rank 4's watchdog fired before it dumped: still one group.
                    let st = if r == 4 { "timed out" } else { "waiting" };
                    recs.push(rec(3, 4, 4, 4, 42, "allreduce", st));
                }
            }
            views.push(view(r, recs, &[(0, "world"), (4, "tp")]));
        }
        let lines = report(&views);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert_eq!(lines[0], "comm tp:");
        let l = &lines.join("\n");
        assert!(
            l.contains(
                "rank 5 (host1) is at allreduce #41 (f32 sum, 1024 B, ring) on comm tp (done)"
            ),
            "{l}"
        );
        assert!(l.contains("it is in no rcomm call"), "{l}");
        assert!(
            l.contains("ranks 4,6,7 wait in allreduce #42 (f32 sum, 1024 B, ring) for 3.0 s"),
            "{l}"
        );
    }

    #[test]
    fn a_silent_rank_is_named_and_the_others_view_used() {
        let mut views: Vec<RankView> = (0..8u32)
            .filter(|&r| r != 5)
            .map(|r| {
                view(
                    r,
                    vec![
                        rec(1, 0, 0, 8, 41, "allreduce", "done"),
                        rec(2, 0, 0, 8, 42, "allreduce", "waiting"),
                    ],
                    &[(0, "world")],
                )
            })
            .collect();
        views.insert(
            5,
            RankView {
                rank: 5,
                host: "host1".into(),
                dump: Err("stopped?".into()),
            },
        );
        let lines = report(&views);
        assert_eq!(lines[0], "comm world:", "{lines:#?}");
        assert_eq!(
            lines[1], "  rank 5 (host1): no answer (stopped?)",
            "{lines:#?}"
        );
        assert!(
            lines[2].contains("ranks 0-4,6,7 wait in allreduce #42"),
            "{lines:#?}"
        );
        assert!(!lines.iter().any(|l| l.starts_with("no answer from")));
        // With no collective on the world to compare, the silent ranks still show.
        let only_p2p: Vec<RankView> = views
            .iter()
            .map(|v| match &v.dump {
                Ok(d) => RankView {
                    dump: Ok(FlightDump {
                        records: vec![],
                        ..d.clone()
                    }),
                    ..v.clone()
                },
                Err(_) => v.clone(),
            })
            .collect();
        assert!(
            report(&only_p2p)
                .iter()
                .any(|l| l == "no answer from rank 5 (host1) (stopped?)")
        );
    }

    #[test]
    fn communicators_of_one_split_are_told_apart_and_idle_ones_left_out() {
        // Two tp groups share context id 4: ranks 0-3 (first 0) and 4-7 (first 4). Group
        // 0-3 finished #9; in group 4-7 rank 7 is behind.
        let views: Vec<RankView> = (0..8u32)
            .map(|r| {
                let (first, seq, st) = match r {
                    0..=3 => (0, 9, "done"),
                    7 => (4, 8, "done"),
                    _ => (4, 9, "waiting"),
                };
                let mut recs = vec![rec(1, 4, first, 4, seq, "bcast", st)];
                if r == 7 {
                    recs.push(rec(2, 1, 0, 8, 0, "recv", "waiting"));
                    recs[1].peer = 2;
                }
                view(r, recs, &[(4, "tp")])
            })
            .collect();
        let lines = report(&views);
        // Rank 7's receive is told once, in its block.
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert_eq!(lines[0], "comm tp:");
        assert!(
            lines[1].contains("rank 7 (host1) is at bcast #8"),
            "{lines:#?}"
        );
        assert!(
            lines[1].contains("it waits in recv from rank 2 on comm #0"),
            "{lines:#?}"
        );
        assert!(
            lines[2].contains("ranks 4-6 wait in bcast #9"),
            "{lines:#?}"
        );
        assert!(!lines.join("\n").contains("rank 0"), "{lines:#?}");
    }

    #[test]
    fn ranks_in_different_collectives_under_one_number_are_flagged() {
        let views: Vec<RankView> = (0..4u32)
            .map(|r| {
                let op = if r == 2 { "bcast" } else { "allreduce" };
                view(r, vec![rec(1, 0, 0, 4, 3, op, "waiting")], &[(0, "world")])
            })
            .collect();
        let l = &report(&views).join("\n");
        assert!(l.contains("rank 2 waits in bcast #3"), "{l}");
        assert!(l.contains("ranks 0,1,3 wait in allreduce #3"), "{l}");
        assert!(l.contains("different orders"), "{l}");
    }

    #[test]
    fn a_job_that_is_not_stuck_says_so() {
        let views: Vec<RankView> = (0..2u32)
            .map(|r| view(r, vec![rec(1, 0, 0, 2, 5, "barrier", "done")], &[]))
            .collect();
        assert!(report(&views)[0].starts_with("nothing looks stuck"));
    }
}
