//! The head's side of the daemons: one `ssh HOST rcomm-run --daemon` per remote host, a thread
//! reading each one's control messages (output is written out at once; everything else goes
//! to the supervising loop as an event), and ssh's stderr kept for error messages.

use crate::ctl::{self, FromDaemon, ToDaemon};
use crate::output::{self, Dest};
use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// ssh's connect timeout (seconds), added when the command is plain ssh.
pub const CONNECT_TIMEOUT_S: u32 = 5;
/// ssh's keepalive: a host that stops answering is declared lost after about
/// `INTERVAL × COUNT` seconds, and its ranks with it.
const ALIVE_INTERVAL_S: u32 = 3;
const ALIVE_COUNT: u32 = 3;
/// Lines of ssh's stderr kept for the message naming a failed host.
const TAIL_LINES: usize = 6;

/// Something a daemon's reader thread reports.
#[derive(Debug)]
pub enum DaemonEvent {
    /// A control message (not `Output`/`Say`, which the reader writes out itself).
    Msg(FromDaemon),
    /// The channel ended (the daemon exited, ssh failed, or the connection broke).
    Closed(Option<String>),
}

/// One remote host's daemon, as the head sees it.
pub struct Daemon {
    /// The host's name as given in -H / the hostfile.
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    tail: Arc<Mutex<VecDeque<String>>>,
    echo: Arc<AtomicBool>,
    /// Its channel has ended.
    pub closed: bool,
    /// (hostname, head address as seen there, its places, its boot id) once it said hello.
    pub hello: Option<(String, String, crate::hosts::HostPlaces, String)>,
    /// When it was last heard from (any frame).
    pub last_heard: Instant,
}

/// Quotes `s` for a POSIX shell (ssh hands the remote command to the user's shell).
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The argv that runs `exe --daemon JOB_ID` on `host` with `ssh` (split at spaces).
pub fn ssh_argv(ssh: &str, host: &str, exe: &Path, job_id: &str) -> Vec<String> {
    let mut argv: Vec<String> = ssh.split_whitespace().map(str::to_string).collect();
    if argv.is_empty() {
        argv.push("ssh".into());
    }
    if Path::new(&argv[0]).file_name().is_some_and(|n| n == "ssh") {
        // No terminal, no password prompt (it would hang the launch), a bounded connect and a
        // keepalive, so an unreachable or vanished host becomes an error, not a hang.
        for o in [
            "-T".to_string(),
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            format!("ConnectTimeout={CONNECT_TIMEOUT_S}"),
            "-o".into(),
            format!("ServerAliveInterval={ALIVE_INTERVAL_S}"),
            "-o".into(),
            format!("ServerAliveCountMax={ALIVE_COUNT}"),
        ] {
            argv.push(o);
        }
    }
    argv.push(host.to_string());
    argv.push(format!(
        "exec {} {} {job_id}",
        shell_quote(&exe.to_string_lossy()),
        crate::daemon::DAEMON_FLAG
    ));
    argv
}

impl Daemon {
    /// Starts the daemon of host `idx` and its reader threads; events go to `tx`.
    pub fn start(
        idx: usize,
        name: &str,
        argv: &[String],
        tx: Sender<(usize, DaemonEvent)>,
    ) -> io::Result<Self> {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A terminal's Ctrl-C reaches the launcher only, which stops the job in order.
            .process_group(0);
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let echo = Arc::new(AtomicBool::new(false));
        let (t2, e2, host) = (tail.clone(), echo.clone(), name.to_string());
        std::thread::Builder::new()
            .name(format!("rcomm-ssh-err-{idx}"))
            .spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if e2.load(Ordering::Relaxed) {
                        crate::output::say(format_args!("[{host}] {line}"));
                    }
                    let mut t = t2.lock().unwrap_or_else(|p| p.into_inner());
                    if t.len() == TAIL_LINES {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            })?;
        let host = name.to_string();
        std::thread::Builder::new()
            .name(format!("rcomm-ssh-ctl-{idx}"))
            .spawn(move || {
                loop {
                    match ctl::read_from_daemon(&mut stdout) {
                        Ok(FromDaemon::Output { stderr, bytes }) => {
                            output::emit(if stderr { Dest::Stderr } else { Dest::Stdout }, &bytes)
                        }
                        Ok(FromDaemon::Say { msg }) => {
                            crate::output::say(format_args!("[{host}] {msg}"));
                            // Still a sign of life.
                            let _ = tx.send((idx, DaemonEvent::Msg(FromDaemon::Heartbeat)));
                        }
                        Ok(m) => {
                            if tx.send((idx, DaemonEvent::Msg(m))).is_err() {
                                return;
                            }
                        }
                        Err(rcomm_runtime::wire::FrameIoError::Closed) => {
                            let _ = tx.send((idx, DaemonEvent::Closed(None)));
                            return;
                        }
                        Err(e) => {
                            let _ = tx.send((idx, DaemonEvent::Closed(Some(e.to_string()))));
                            return;
                        }
                    }
                }
            })?;
        Ok(Self {
            name: name.to_string(),
            child,
            stdin,
            tail,
            echo,
            closed: false,
            hello: None,
            last_heard: Instant::now(),
        })
    }

    /// From now on, relay ssh's stderr as it comes (before the hello it is kept for the error
    /// message instead).
    pub fn echo_stderr(&self) {
        self.echo.store(true, Ordering::Relaxed);
    }

    /// Sends one message; an error means the daemon is gone (its reader reports that).
    pub fn send(&mut self, m: &ToDaemon) -> io::Result<()> {
        match &mut self.stdin {
            Some(w) => ctl::write(w, &m.to_frame()),
            None => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// End-of-file on the daemon's stdin: it ends its ranks and exits.
    pub fn close(&mut self) {
        self.stdin = None;
    }

    /// Why the daemon could not be reached: ssh's exit status and its last stderr lines
    /// (waits up to `within` for ssh to exit).
    pub fn failure_reason(&mut self, within: Duration) -> String {
        let t0 = Instant::now();
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if t0.elapsed() < within => std::thread::sleep(Duration::from_millis(10)),
                _ => break None,
            }
        };
        // Give the stderr thread a moment to take the last lines.
        std::thread::sleep(Duration::from_millis(50));
        let tail: Vec<String> = self
            .tail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        let how = match status.and_then(|s| s.code()) {
            Some(255) => "ssh failed (exit status 255)".to_string(),
            Some(c) => format!("the remote command exited with status {c}"),
            None => "the connection closed".to_string(),
        };
        if tail.is_empty() {
            how
        } else {
            format!("{how}: {}", tail.join(" | "))
        }
    }

    /// Waits up to `within` for ssh to exit, then kills it; reaps it either way.
    pub fn reap(&mut self, within: Duration) {
        self.close();
        let t0 = Instant::now();
        while t0.elapsed() < within {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_command_lines() {
        let a = ssh_argv("ssh", "n1", Path::new("/opt/it's/rcomm-run"), "ab12");
        assert_eq!(a[0], "ssh");
        assert!(a.contains(&"BatchMode=yes".to_string()));
        assert_eq!(a[a.len() - 2], "n1");
        assert_eq!(
            a[a.len() - 1],
            r"exec '/opt/it'\''s/rcomm-run' --daemon ab12"
        );
        let a = ssh_argv("/x/agent -p 2222", "n2", Path::new("/r"), "j");
        assert_eq!(a, ["/x/agent", "-p", "2222", "n2", "exec '/r' --daemon j"]);
    }
}
