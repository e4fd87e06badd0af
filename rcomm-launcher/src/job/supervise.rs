//! The supervising loop and its policy: each turn's key-value store events, remote hosts'
//! reports, ended ranks and heartbeats, the failure policy, the stop sequence and the
//! diagnostic report of a hung job.

use super::*;

impl Supervisor {
    fn running(&self) -> usize {
        self.ranks.iter().filter(|r| r.ended.is_none()).count()
    }

    fn signal_all(&mut self, sig: i32) {
        for r in self.ranks.iter().filter(|r| r.child.is_some()) {
            let _ = os::kill_group(r.pid, sig);
        }
        for d in self.daemons.iter_mut().flatten() {
            let _ = d.send(&ToDaemon::Signal(sig));
        }
    }

    /// The host rank `i` runs on, as users know it: the name it was given, or this machine's.
    fn host_name(&self, i: usize) -> String {
        if self.multi {
            self.hosts[self.ranks[i].host].name.clone()
        } else {
            rcomm_runtime::identity::hostname()
        }
    }

    /// " on HOST" in messages of a job that was given hosts.
    fn on_host(&self, i: usize) -> String {
        if self.multi {
            format!(" on {}", self.hosts[self.ranks[i].host].name)
        } else {
            String::new()
        }
    }

    /// Fixes the exit status unless an earlier event did.
    fn set_outcome(&mut self, code: i32) {
        self.outcome.get_or_insert(code);
    }

    /// Starts the stop sequence: wait `grace` for the ranks to end on their own, then send
    /// `steps` one per grace period. A sequence already under way is kept.
    fn begin_stop(&mut self, steps: &[i32]) {
        if self.stop.is_none() {
            self.stop = Some(Stop {
                next_at: Instant::now() + self.grace,
                steps: steps.iter().copied().collect(),
            });
        }
    }

    pub(super) fn spawn_failed(&mut self, rank: u32, spec: &JobSpec, e: io::Error) {
        let code = match e.kind() {
            io::ErrorKind::NotFound => 127,
            _ => 126,
        };
        say(format_args!(
            "cannot start rank {rank} ({}): {e}; stopping the other ranks",
            spec.program.display()
        ));
        let host = self.host_name(rank as usize);
        self.kvs
            .notify_rank_failed(rank, &host, &format!("could not be started: {e}"));
        self.set_outcome(code);
        // Local ranks not started (this one and those after it) will never end by themselves.
        let here: Vec<usize> = self.ranks[rank as usize..]
            .iter()
            .filter(|r| r.child.is_none() && self.daemons[r.host].is_none())
            .map(|r| r.rank as usize)
            .collect();
        for i in here {
            self.ranks[i].ended = Some(Ending::Exited(code));
        }
        self.begin_stop(&[libc::SIGTERM, libc::SIGKILL]);
    }

    /// Takes what the daemons reported since the last turn.
    fn poll_remote(&mut self) {
        if self.last_beat.elapsed() >= crate::ctl::HEARTBEAT {
            self.last_beat = Instant::now();
            for d in self.daemons.iter_mut().flatten().filter(|d| !d.closed) {
                let _ = d.send(&ToDaemon::Heartbeat);
            }
        }
        let mut events: Vec<(usize, DaemonEvent)> = Vec::new();
        while let Ok(e) = self.remote_events.try_recv() {
            if let Some(d) = self.daemons[e.0].as_mut() {
                d.last_heard = Instant::now();
            }
            events.push(e);
        }
        // A daemon silent for too long is gone, whatever ssh thinks (it notices a cut link
        // late): its ranks are lost.
        for (h, d) in self.daemons.iter().enumerate() {
            if let Some(d) = d
                && !d.closed
                && d.last_heard.elapsed() > crate::ctl::SILENCE_LIMIT
            {
                events.push((
                    h,
                    DaemonEvent::Closed(Some(format!(
                        "no word from it for {} s: host down or network cut?",
                        crate::ctl::SILENCE_LIMIT.as_secs()
                    ))),
                ));
            }
        }
        for (h, ev) in events {
            match ev {
                DaemonEvent::Msg(FromDaemon::Started { rank, pid }) => {
                    if let Some(r) = self.ranks.get_mut(rank as usize)
                        && r.host == h
                    {
                        r.pid = pid;
                        r.started = Instant::now();
                    }
                }
                DaemonEvent::Msg(FromDaemon::Exited { rank, ending }) => {
                    if self
                        .ranks
                        .get(rank as usize)
                        .is_some_and(|r| r.host == h && r.ended.is_none())
                    {
                        self.rank_ended(rank as usize, ending);
                    }
                }
                DaemonEvent::Msg(FromDaemon::Failed { code, msg }) => {
                    let name = self.hosts[h].name.clone();
                    say(format_args!("host {name}: {msg}; stopping the other ranks"));
                    self.set_outcome(code);
                    let lost: Vec<usize> = (0..self.ranks.len())
                        .filter(|&i| self.ranks[i].host == h && self.ranks[i].ended.is_none())
                        .collect();
                    for i in lost {
                        self.ranks[i].ended = Some(Ending::Exited(code));
                        self.kvs.notify_rank_failed(
                            i as u32,
                            &name,
                            &format!("could not be started on {name}: {msg}"),
                        );
                    }
                    self.begin_stop(&[libc::SIGTERM, libc::SIGKILL]);
                }
                DaemonEvent::Msg(_) => {}
                DaemonEvent::Closed(err) => {
                    if let Some(d) = self.daemons[h].as_mut() {
                        d.closed = true;
                    }
                    let lost: Vec<usize> = (0..self.ranks.len())
                        .filter(|&i| self.ranks[i].host == h && self.ranks[i].ended.is_none())
                        .collect();
                    if lost.is_empty() {
                        continue;
                    }
                    self.lost_hosts.push(self.hosts[h].name.clone());
                    let why = match err {
                        Some(e) => e,
                        None => self.daemons[h]
                            .as_mut()
                            .map(|d| d.failure_reason(Duration::from_millis(200)))
                            .unwrap_or_default(),
                    };
                    say(format_args!(
                        "host {}: lost the connection to its rcomm-run daemon ({why}); its ranks {} are lost",
                        self.hosts[h].name,
                        rcomm_runtime::identity::rank_list(
                            &lost.iter().map(|&i| i as u32).collect::<Vec<_>>()
                        )
                    ));
                    for i in lost {
                        self.rank_ended(i, Ending::Lost);
                    }
                }
            }
        }
    }

    /// Rank `i` ended (here or on another host): the finalize check, then the failure policy.
    fn rank_ended(&mut self, i: usize, mut end: Ending) {
        if end.is_success() {
            // A rank's Finalize event is queued before its reply, so before it can exit.
            while let Ok(ev) = self.events.try_recv() {
                self.on_event(ev);
            }
            if self.ranks[i].connected && !self.ranks[i].finalized {
                end = Ending::Unfinalized;
            }
        }
        self.ranks[i].ended = Some(end);
        if !end.is_success() {
            self.on_failure(i, end);
        }
    }

    pub(super) fn supervise(&mut self) {
        loop {
            while let Ok(ev) = self.events.try_recv() {
                self.on_event(ev);
            }
            self.poll_exits();
            self.poll_remote();
            self.check_heartbeats();
            self.poll_report(false);
            if self.running() == 0 {
                break;
            }
            if !self.advance_stop() {
                break;
            }
            let timeout = match &self.stop {
                Some(s) => TICK.min(s.next_at.saturating_duration_since(Instant::now())),
                None => TICK,
            };
            if let Some(sig) = self.signals.wait(timeout) {
                self.on_signal(sig);
            }
        }
        // An abort request may have raced the last exit.
        while let Ok(ev) = self.events.try_recv() {
            self.on_event(ev);
        }
        // A report under way prints what it has: nobody is left to answer.
        self.poll_report(true);
    }

    fn on_event(&mut self, ev: KvsEvent) {
        match ev {
            KvsEvent::Abort { rank, code, msg } => {
                say(format_args!("rank {rank} called abort({code}): {msg}"));
                self.kvs.notify_abort(rank, code, &msg);
                // An exit status is 8 bits; a code that would read as success becomes 1.
                let status = code.rem_euclid(256);
                self.set_outcome(if status == 0 { 1 } else { status });
                if self.running() > 0 {
                    self.begin_stop(&[libc::SIGTERM, libc::SIGKILL]);
                }
            }
            KvsEvent::Refused { peer, why } => {
                say(format_args!(
                    "warning: refused a connection to the job's key-value store from {peer}: {why} (the job goes on)"
                ));
            }
            KvsEvent::Connected { rank } => {
                if let Some(r) = self.ranks.iter_mut().find(|r| r.rank == rank) {
                    r.connected = true;
                }
            }
            KvsEvent::Finalized { rank } => {
                if let Some(r) = self.ranks.iter_mut().find(|r| r.rank == rank) {
                    r.finalized = true;
                }
            }
            KvsEvent::FlightDump {
                rank,
                id,
                why,
                dump,
            } => self.on_dump(rank, id, why, dump),
        }
    }

    /// Declares hung the ranks whose heartbeats stopped (a stopped process keeps its sockets
    /// open, so only its silence shows it): kills it, so it cannot come back and act on a
    /// world that has moved on, and tells the others (`PeerHung`).
    fn check_heartbeats(&mut self) {
        let Some(hb) = self.heartbeat else { return };
        for (rank, silent) in self.kvs.silent_ranks(hb.limit()) {
            let i = rank as usize;
            if self
                .ranks
                .get(i)
                .is_none_or(|r| r.ended.is_some() || r.finalized)
            {
                self.kvs.forget_heartbeats(rank);
                continue;
            }
            let (pid, on) = (self.ranks[i].pid, self.on_host(i));
            say(format_args!(
                "rank {rank}{on} (pid {pid}) sent no heartbeat for {:.1} s (RCOMM_HEARTBEAT {} ms × {}): stopped or stuck; killing it",
                silent.as_secs_f64(),
                hb.interval_ms,
                hb.misses
            ));
            // The others' flight recorders say where they wait for it (they answer before they
            // hear of it: the request goes first on their connections).
            self.start_report(format!(
                "rank {rank}{on} sent no heartbeat for {:.1} s",
                silent.as_secs_f64()
            ));
            if let Some(c) = &mut self.collect {
                c.notes.insert(
                    rank,
                    format!(
                        "no heartbeat for {:.1} s: stopped, or stuck in the kernel; killed",
                        silent.as_secs_f64()
                    ),
                );
            }
            self.kvs.notify_rank_hung(rank, silent);
            if self.ranks[i].child.is_some() {
                let _ = os::kill_group(pid, libc::SIGKILL);
            } else if let Some(d) = self.daemons[self.ranks[i].host].as_mut() {
                let _ = d.send(&ToDaemon::SignalRank {
                    rank,
                    sig: libc::SIGKILL,
                });
            }
        }
    }

    fn poll_exits(&mut self) {
        for i in 0..self.ranks.len() {
            if self.ranks[i].ended.is_some() || self.ranks[i].child.is_none() {
                continue;
            }
            let Ok(Some(end)) = os::peek_exit(self.ranks[i].pid) else {
                continue;
            };
            self.rank_ended(i, end);
        }
    }

    fn on_failure(&mut self, i: usize, end: Ending) {
        let (rank, pid, took) = (
            self.ranks[i].rank,
            self.ranks[i].pid,
            self.ranks[i].started.elapsed(),
        );
        let how = end.describe();
        // Survivors learn it at once, also when they keep running.
        let host = self.host_name(i);
        self.kvs.notify_rank_failed(rank, &host, &how);
        let first = self.outcome.is_none();
        self.set_outcome(end.exit_code());
        if self.signalled {
            return;
        }
        let others = self.running();
        let then = match (first, others, self.on_failure) {
            (false, _, _) | (_, 0, _) => String::new(),
            (true, _, OnFailure::Abort) => "; stopping the other ranks".to_string(),
            (true, _, OnFailure::Continue) => {
                format!("; the other {others} ranks go on (--on-failure continue)")
            }
        };
        let on = self.on_host(i);
        say(format_args!(
            "rank {rank}{on} (pid {pid}) {how} after {:.2} s{then}",
            took.as_secs_f64()
        ));
        if self.on_failure == OnFailure::Abort && others > 0 {
            self.begin_stop(&[libc::SIGTERM, libc::SIGKILL]);
        }
    }

    /// Sends the next signal of the stop sequence when its time has come; false when the
    /// sequence is exhausted and ranks still have not ended (give up on them).
    fn advance_stop(&mut self) -> bool {
        let running = self.running();
        let grace = self.grace;
        let Some(stop) = &mut self.stop else {
            return true;
        };
        if Instant::now() < stop.next_at {
            return true;
        }
        match stop.steps.pop_front() {
            Some(sig) => {
                say(format_args!(
                    "{running} rank{} still running; sending {}",
                    if running == 1 { "" } else { "s" },
                    rcomm_runtime::os::signal_name(sig)
                ));
                stop.next_at = Instant::now()
                    + if sig == libc::SIGKILL {
                        KILL_PATIENCE
                    } else {
                        grace
                    };
                self.signalled = true;
                self.signal_all(sig);
                true
            }
            None => {
                let stuck: Vec<String> = self
                    .ranks
                    .iter()
                    .filter(|r| r.ended.is_none())
                    .map(|r| {
                        if self.multi {
                            format!("{} on {} (pid {})", r.rank, self.hosts[r.host].name, r.pid)
                        } else {
                            format!("{} (pid {})", r.rank, r.pid)
                        }
                    })
                    .collect();
                say(format_args!(
                    "ranks {} did not end after SIGKILL; giving up on them",
                    stuck.join(", ")
                ));
                false
            }
        }
    }

    /// Asks every rank for its flight recorder; the report prints once all have answered or
    /// [`DUMP_PATIENCE`] has passed ([`Supervisor::poll_report`]).
    fn start_report(&mut self, why: String) {
        if let Some(c) = &mut self.collect {
            c.why = format!("{}; {why}", c.why);
            return;
        }
        self.reports += 1;
        let id = self.reports;
        let asked = self.kvs.request_dumps(id);
        say(format_args!(
            "{why}: collecting the flight recorders of {} rank{} for a hang report",
            asked.len(),
            if asked.len() == 1 { "" } else { "s" }
        ));
        self.collect = Some(Collect {
            id,
            why,
            asked,
            got: Default::default(),
            deadline: Instant::now() + DUMP_PATIENCE,
            notes: Default::default(),
        });
    }

    /// A rank's flight recorder: an answer to the collection `id`, or (`id` 0) sent by a rank
    /// whose watchdog fired, which starts a report unless one was just printed.
    fn on_dump(&mut self, rank: u32, id: u64, why: String, dump: Vec<u8>) {
        let decoded = rcomm_runtime::wire::FlightDump::decode(&dump)
            .map_err(|e| format!("its flight recorder is unreadable: {e}"));
        if id == 0 {
            let recent = self.last_report.is_some_and(|t| t.elapsed() < REPORT_QUIET);
            if self.collect.is_none() && recent {
                return;
            }
            if self.collect.is_none() {
                let on = self.on_host(rank as usize);
                self.start_report(format!("rank {rank}{on}: {why}"));
            }
        }
        if let Some(c) = &mut self.collect
            && (id == 0 || id == c.id)
        {
            c.got.insert(rank, decoded);
        }
    }

    /// Prints the report being collected once every rank asked has answered (or ended), its
    /// time is up, or `now` (the job is over).
    fn poll_report(&mut self, now: bool) {
        let Some(c) = &self.collect else { return };
        let waiting = c.asked.iter().any(|r| {
            !c.got.contains_key(r)
                && self
                    .ranks
                    .get(*r as usize)
                    .is_some_and(|p| p.ended.is_none())
        });
        if waiting && !now && Instant::now() < c.deadline {
            return;
        }
        let Some(mut c) = self.collect.take() else {
            return;
        };
        let views: Vec<crate::hang::RankView> = self
            .ranks
            .iter()
            .map(|p| {
                let host = self.host_name(p.rank as usize);
                let dump = c.got.remove(&p.rank).unwrap_or_else(|| {
                    if let Some(n) = c.notes.get(&p.rank) {
                        return Err(n.clone());
                    }
                    Err(match (&p.ended, c.asked.contains(&p.rank)) {
                        (Some(e), _) => format!("it {}", e.describe()),
                        (None, true) => {
                            format!("stopped? no answer within {} s", DUMP_PATIENCE.as_secs())
                        }
                        (None, false) if p.finalized => "it finalized".into(),
                        (None, false) => "not connected to rcomm-run".into(),
                    })
                });
                crate::hang::RankView {
                    rank: p.rank,
                    host,
                    dump,
                }
            })
            .collect();
        say(format_args!("hang report ({}):", c.why));
        for line in crate::hang::report(&views) {
            say(format_args!("  {line}"));
        }
        self.last_report = Some(Instant::now());
    }

    fn on_signal(&mut self, sig: i32) {
        let name = rcomm_runtime::os::signal_name(sig);
        if sig == signals::REPORT {
            // Not forwarded: a rank's default action for SIGUSR1 is to die.
            self.start_report(format!("{name} to rcomm-run"));
            return;
        }
        if signals::PASSED_ON.contains(&sig) {
            self.signal_all(sig);
            return;
        }
        if !signals::TERMINATING.contains(&sig) {
            return; // SIGCHLD: the next turn looks at the ranks
        }
        if let Some(first) = self.received {
            let again = if first == sig {
                "again".to_string()
            } else {
                format!("after {}", rcomm_runtime::os::signal_name(first))
            };
            say(format_args!("received {name} {again}; killing every rank"));
            self.signalled = true;
            self.signal_all(libc::SIGKILL);
            self.stop = Some(Stop {
                next_at: Instant::now() + KILL_PATIENCE,
                steps: VecDeque::new(),
            });
            return;
        }
        self.received = Some(sig);
        self.set_outcome(128 + sig);
        say(format_args!("received {name}; forwarding it to every rank"));
        self.signalled = true;
        self.signal_all(sig);
        // The ranks get a grace period to act on it; then the usual escalation.
        let steps: &[i32] = if sig == libc::SIGTERM {
            &[libc::SIGKILL]
        } else {
            &[libc::SIGTERM, libc::SIGKILL]
        };
        self.stop = Some(Stop {
            next_at: Instant::now() + self.grace,
            steps: steps.iter().copied().collect(),
        });
    }
}
