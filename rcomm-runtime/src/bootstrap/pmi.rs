//! PMI-1 and PMI-2 clients on the inherited `PMI_FD`: rcomm started by MPICH's `mpiexec.mpich`
//! (hydra) or by `srun --mpi=pmi2` (Slurm's pmi2 plugin serves both versions).
//!
//! PMI's store is one flat namespace per job with small limits (hydra: 64-character keys,
//! 1024-character values), so each rank's values are stored under `rc<rank>.<key>`, hex encoded
//! and split over several keys when long ([`crate::wire::pmi`]).
//!
//! Every read has a deadline (`RCOMM_BOOTSTRAP_TIMEOUT`): Slurm without `--kill-on-bad-exit`
//! leaves the survivors of a dead rank blocked in the fence forever, and a launcher that closes
//! `PMI_FD` is an error naming it — never a hang.

use super::{Bootstrap, BootstrapError};
use crate::config::{PmiEnv, PmiVersion};
use crate::rlog;
use crate::wire::pmi::{self as w, Reply};
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A PMI client speaking version 1 or 2 on `PMI_FD`.
#[derive(Debug)]
pub struct PmiClient {
    stream: UnixStream,
    buf: Vec<u8>,
    v2: bool,
    rank: u32,
    size: u32,
    local_rank: u32,
    local_size: u32,
    /// PMI-1: the kvsname; PMI-2: the job id from `job-getid`.
    kvs: String,
    job_id: String,
    vallen_max: usize,
    keylen_max: usize,
    timeout: Duration,
    launcher: String,
}

impl PmiClient {
    /// Initializes PMI on `env.fd`: handshake, limits, job name, node-local ranks.
    pub fn connect(env: &PmiEnv, timeout: Duration) -> Result<Self, BootstrapError> {
        // SAFETY: PMI_FD is the descriptor the launcher handed this process for PMI; nothing
        // else in rcomm uses it, and this client becomes its only owner.
        let stream = unsafe { UnixStream::from_raw_fd(env.fd) };
        let mut c = Self {
            stream,
            buf: Vec::new(),
            v2: false,
            rank: env.rank,
            size: env.size,
            local_rank: env.rank,
            local_size: 1,
            kvs: String::new(),
            job_id: String::new(),
            vallen_max: 1024,
            keylen_max: 64,
            timeout,
            launcher: env.launcher.clone(),
        };
        // Descriptors inherited with FD_CLOEXEC cleared would leak into the application's
        // children, which could then talk PMI as us.
        unsafe { libc::fcntl(env.fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        match env.version {
            PmiVersion::V2 => c.init_v2(env)?,
            _ => c.init_v1()?,
        }
        rlog!(
            Info,
            "INIT",
            "PMI-{} from {}: rank {}/{} job {} local {}/{} (value limit {})",
            if c.v2 { 2 } else { 1 },
            c.launcher,
            c.rank,
            c.size,
            c.job_id,
            c.local_rank,
            c.local_size,
            c.vallen_max
        );
        Ok(c)
    }

    fn init_v1(&mut self) -> Result<(), BootstrapError> {
        let r = self.v1("init", &[("pmi_version", "1"), ("pmi_subversion", "1")])?;
        self.check(&r, "init")?;
        let r = self.v1("get_maxes", &[])?;
        let num = |k: &str, d: usize| r.get(k).and_then(|v| v.parse().ok()).unwrap_or(d);
        self.vallen_max = num("vallen_max", 1024);
        self.keylen_max = num("keylen_max", 64);
        let r = self.v1("get_my_kvsname", &[])?;
        self.kvs = r
            .get("kvsname")
            .ok_or_else(|| self.protocol("get_my_kvsname", &r))?
            .to_string();
        self.job_id = self.kvs.clone();
        let kvs = self.kvs.clone();
        let r = self.v1("get", &[("kvsname", &kvs), ("key", "PMI_process_mapping")])?;
        let mapping = if r.ok() {
            r.get("value").map(str::to_string)
        } else {
            None
        };
        self.set_local(mapping.as_deref());
        Ok(())
    }

    fn init_v2(&mut self, env: &PmiEnv) -> Result<(), BootstrapError> {
        self.v2 = false; // the handshake line is PMI-1 style
        let r = self.v1("init", &[("pmi_version", "2"), ("pmi_subversion", "0")])?;
        if !r.ok() || r.get("pmi_version") != Some("2") {
            // Best effort: a server without PMI-2 may still answer PMI-1 on the same socket.
            rlog!(
                Warn,
                "INIT",
                "{} refused PMI-2 ({}); trying PMI-1",
                self.launcher,
                r.why()
            );
            return self.init_v1();
        }
        self.v2 = true;
        let rank = self.rank.to_string();
        let mut args = vec![];
        // Slurm's plugin wants pmijobid (PMI_JOBID); hydra sets none and needs none.
        if let Some(j) = &env.jobid {
            args.push(("pmijobid", j.as_str()));
        }
        args.push(("pmirank", &rank));
        args.push(("threaded", "FALSE"));
        let r = self.v2msg("fullinit", &args)?;
        self.check(&r, "fullinit")?;
        let num = |k: &str| r.get(k).and_then(|v| v.parse::<u32>().ok());
        if let (Some(rk), Some(sz)) = (num("rank"), num("size"))
            && (rk, sz) != (self.rank, self.size)
        {
            return Err(BootstrapError::Env(format!(
                "{} says rank {rk} of {sz}, but PMI_RANK/PMI_SIZE say {} of {}",
                self.launcher, self.rank, self.size
            )));
        }
        let r = self.v2msg("job-getid", &[])?;
        self.check(&r, "job-getid")?;
        self.kvs = r
            .get("jobid")
            .ok_or_else(|| self.protocol("job-getid", &r))?
            .to_string();
        self.job_id = self.kvs.clone();
        let r = self.v2msg("info-getjobattr", &[("key", "PMI_process_mapping")])?;
        let mapping = (r.ok() && r.get("found") == Some("TRUE"))
            .then(|| r.get("value").map(str::to_string))
            .flatten();
        self.set_local(mapping.as_deref());
        Ok(())
    }

    fn set_local(&mut self, mapping: Option<&str>) {
        match mapping.and_then(|m| w::local_from_mapping(m, self.rank, self.size)) {
            Some((lr, ls)) => (self.local_rank, self.local_size) = (lr, ls),
            None => {
                // Unknown placement: the global rank keeps per-node names unique; world init
                // learns the real neighbours from the identity exchange anyway.
                rlog!(Info, "INIT", "no usable PMI_process_mapping ({mapping:?})");
                (self.local_rank, self.local_size) = (self.rank, 1);
            }
        }
    }

    fn protocol(&self, op: &str, r: &Reply) -> BootstrapError {
        BootstrapError::Env(format!(
            "{} answered {op} with an unexpected reply {:?}",
            self.launcher, r.0
        ))
    }

    fn check(&self, r: &Reply, op: &'static str) -> Result<(), BootstrapError> {
        if r.ok() {
            Ok(())
        } else {
            Err(BootstrapError::Refused {
                op,
                msg: format!("{}: {}", self.launcher, r.why()),
            })
        }
    }

    fn send(&mut self, msg: &str, op: &str) -> Result<(), BootstrapError> {
        rlog!(Trace, "INIT", "PMI >> {}", msg.trim_end());
        self.stream
            .write_all(msg.as_bytes())
            .map_err(|e| self.lost(op, &e.to_string()))
    }

    fn lost(&self, op: &str, why: &str) -> BootstrapError {
        BootstrapError::LauncherLost {
            launcher: self.launcher.clone(),
            op: op.to_string(),
            err: why.to_string(),
        }
    }

    /// Reads more bytes into `buf`, failing at `deadline` or on end-of-file.
    fn fill(&mut self, op: &str, deadline: Instant) -> Result<(), BootstrapError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if self.buf.len() > w::MAX_MSG {
            return Err(BootstrapError::Env(format!(
                "{} answered PMI {op} with more than {} bytes without ending the message: not a PMI server, or a broken one",
                self.launcher,
                w::MAX_MSG
            )));
        }
        if left.is_zero() {
            return Err(self.timed_out(op));
        }
        let _ = self.stream.set_read_timeout(Some(left));
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(self.lost(op, "PMI_FD was closed")),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(self.timed_out(op))
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(self.lost(op, &e.to_string())),
        }
    }

    fn timed_out(&self, op: &str) -> BootstrapError {
        BootstrapError::Env(format!(
            "no answer from {} to PMI {op} within {} s (RCOMM_BOOTSTRAP_TIMEOUT): a rank died or never started? (under srun, use --kill-on-bad-exit=1)",
            self.launcher,
            self.timeout.as_secs()
        ))
    }

    /// One PMI-1 request and its reply line.
    fn v1(&mut self, cmd: &str, args: &[(&str, &str)]) -> Result<Reply, BootstrapError> {
        self.send(&w::format_v1(cmd, args), cmd)?;
        let deadline = Instant::now() + self.timeout;
        let line = loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                break String::from_utf8_lossy(&line).into_owned();
            }
            self.fill(cmd, deadline)?;
        };
        rlog!(Trace, "INIT", "PMI << {}", line.trim_end());
        w::parse_v1(&line).map_err(|e| BootstrapError::Env(format!("{}: {e}", self.launcher)))
    }

    /// One PMI-2 request and its reply.
    fn v2msg(&mut self, cmd: &str, args: &[(&str, &str)]) -> Result<Reply, BootstrapError> {
        self.send(&w::format_v2(cmd, args), cmd)?;
        let deadline = Instant::now() + self.timeout;
        while self.buf.len() < 6 {
            self.fill(cmd, deadline)?;
        }
        let n = w::parse_v2_len(&self.buf[..6])
            .map_err(|e| BootstrapError::Env(format!("{}: {e}", self.launcher)))?;
        while self.buf.len() < 6 + n {
            self.fill(cmd, deadline)?;
        }
        let body: Vec<u8> = self.buf.drain(..6 + n).skip(6).collect();
        let body = String::from_utf8_lossy(&body).into_owned();
        rlog!(Trace, "INIT", "PMI << {body}");
        w::parse_v2(&body).map_err(|e| BootstrapError::Env(format!("{}: {e}", self.launcher)))
    }

    fn put_raw(&mut self, key: &str, val: &str) -> Result<(), BootstrapError> {
        if key.len() >= self.keylen_max {
            return Err(BootstrapError::Env(
                w::PmiWireError::KeyTooLong {
                    key: key.into(),
                    max: self.keylen_max,
                }
                .to_string(),
            ));
        }
        let r = if self.v2 {
            self.v2msg("kvs-put", &[("key", key), ("value", val)])?
        } else {
            let kvs = self.kvs.clone();
            self.v1("put", &[("kvsname", &kvs), ("key", key), ("value", val)])?
        };
        self.check(&r, "put")
    }

    fn get_raw(&mut self, key: &str) -> Result<Option<String>, BootstrapError> {
        let kvs = self.kvs.clone();
        if self.v2 {
            let r = self.v2msg("kvs-get", &[("jobid", &kvs), ("srcid", "-1"), ("key", key)])?;
            self.check(&r, "get")?;
            Ok((r.get("found") == Some("TRUE")).then(|| r.get("value").unwrap_or("").to_string()))
        } else {
            let r = self.v1("get", &[("kvsname", &kvs), ("key", key)])?;
            // Not found is rc=-1 on hydra and Slurm alike.
            Ok(r.ok().then(|| r.get("value").unwrap_or("").to_string()))
        }
    }
}

impl Bootstrap for PmiClient {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn local_rank(&self) -> u32 {
        self.local_rank
    }
    fn local_size(&self) -> u32 {
        self.local_size
    }
    fn job_id(&self) -> &str {
        &self.job_id
    }
    fn put(&mut self, key: &str, val: &[u8]) -> Result<(), BootstrapError> {
        let chunks = w::encode_value(val, self.vallen_max);
        for (i, c) in chunks.iter().enumerate() {
            self.put_raw(&w::chunk_key(self.rank, key, i), c)?;
        }
        Ok(())
    }
    fn fence(&mut self) -> Result<(), BootstrapError> {
        if self.v2 {
            let r = self.v2msg("kvs-fence", &[])?;
            self.check(&r, "fence")
        } else {
            let r = self.v1("barrier_in", &[])?;
            if r.cmd() != "barrier_out" {
                return Err(self.protocol("barrier_in", &r));
            }
            self.check(&r, "fence")
        }
    }
    fn get(&mut self, from: u32, key: &str) -> Result<Vec<u8>, BootstrapError> {
        let not_found = || BootstrapError::NotFound {
            rank: from,
            key: key.to_string(),
        };
        let first = self
            .get_raw(&w::chunk_key(from, key, 0))?
            .ok_or_else(not_found)?;
        let launcher = self.launcher.clone();
        let bad = |e: &dyn std::fmt::Display| {
            BootstrapError::Env(format!("{launcher}: rank {from}'s {key:?}: {e}"))
        };
        let n = w::chunk_count(&first).map_err(|e| bad(&e))?;
        // Fetch no more than a value of MAX_VALUE bytes can take: the server's word is all we
        // have on how many chunks there are.
        if n > 2 * w::MAX_VALUE / (w::chunk_len(self.vallen_max) & !1).max(2) + 2 {
            return Err(bad(&format!(
                "{n} chunks announced, more than a value of {} bytes takes",
                w::MAX_VALUE
            )));
        }
        let mut total = first.len();
        let mut chunks = vec![first];
        for i in 1..n {
            let c = self
                .get_raw(&w::chunk_key(from, key, i))?
                .ok_or_else(not_found)?;
            total += c.len();
            if total > 2 * w::MAX_VALUE + chunks[0].len() {
                return Err(bad(&format!(
                    "longer than a value of {} bytes can be",
                    w::MAX_VALUE
                )));
            }
            chunks.push(c);
        }
        w::decode_value(&chunks).map_err(|e| bad(&e))
    }
    fn abort(&mut self, code: i32, msg: &str) -> Result<(), BootstrapError> {
        let code_s = code.to_string();
        // Neither server answers an abort; both end the job. Values may not hold spaces or `;`
        // safely everywhere, so the message goes to stderr and only the code on the wire.
        eprintln!(
            "rcomm: rank {} aborts the job with code {code}: {msg}",
            self.rank
        );
        let sent = if self.v2 {
            let m: String = msg
                .chars()
                .map(|c| if c.is_alphanumeric() { c } else { '_' })
                .collect();
            self.send(
                &w::format_v2("abort", &[("isworldabort", "TRUE"), ("msg", &m)]),
                "abort",
            )
        } else {
            self.send(&w::format_v1("abort", &[("exitcode", &code_s)]), "abort")
        };
        sent?;
        // Give the launcher a moment to stop the job, then leave with the code ourselves, so
        // that `--kill-on-bad-exit` or hydra's failure handling ends it either way.
        std::thread::sleep(Duration::from_millis(500));
        std::process::exit(code)
    }
    fn finalize(&mut self) -> Result<(), BootstrapError> {
        let r = if self.v2 {
            self.v2msg("finalize", &[])?
        } else {
            self.v1("finalize", &[])?
        };
        self.check(&r, "finalize")
    }
}

#[cfg(test)]
mod tests {
    //! A scripted PMI server on a socketpair: the wire sequences the client sends, in both
    //! versions. (The real servers are tested with mpiexec.mpich and srun in rcomm-tests.)
    use super::*;
    use std::io::BufRead;
    use std::os::fd::IntoRawFd;

    fn env(fd: i32, version: PmiVersion) -> PmiEnv {
        PmiEnv {
            fd,
            rank: 1,
            size: 2,
            jobid: Some("8.0".into()),
            version,
            launcher: "test server".into(),
        }
    }

    #[test]
    fn pmi1_exchange_with_a_scripted_server() {
        let (a, b) = UnixStream::pair().unwrap();
        let srv = std::thread::spawn(move || {
            let mut r = std::io::BufReader::new(b.try_clone().unwrap());
            let mut b = b;
            let mut store = std::collections::HashMap::new();
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap() == 0 {
                    return store;
                }
                let q = w::parse_v1(&line).unwrap();
                let rep = match q.cmd() {
                    "init" => "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0".into(),
                    "get_maxes" => "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=20".into(),
                    "get_my_kvsname" => "cmd=my_kvsname kvsname=kvs_1".into(),
                    "put" => {
                        store.insert(
                            q.get("key").unwrap().to_string(),
                            q.get("value").unwrap().to_string(),
                        );
                        "cmd=put_result rc=0 msg=success".into()
                    }
                    "barrier_in" => "cmd=barrier_out".into(),
                    "get" => match q.get("key").unwrap() {
                        "PMI_process_mapping" => {
                            "cmd=get_result rc=0 msg=success value=(vector,(0,1,2))".into()
                        }
                        k => match store.get(k) {
                            Some(v) => format!("cmd=get_result value={v} rc=0"),
                            None => "cmd=get_result rc=-1 msg=key_not_found value=unknown".into(),
                        },
                    },
                    "finalize" => {
                        b.write_all(b"cmd=finalize_ack\n").unwrap();
                        // Then close: the client must report it, not hang.
                        return store;
                    }
                    c => panic!("unexpected {c}"),
                };
                b.write_all(format!("{rep}\n").as_bytes()).unwrap();
            }
        });
        let mut c = PmiClient::connect(
            &env(a.into_raw_fd(), PmiVersion::V1),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(
            (c.local_rank(), c.local_size(), c.job_id()),
            (1, 2, "kvs_1")
        );
        let val: Vec<u8> = (0..=255).collect();
        c.put("addr", &val).unwrap();
        c.fence().unwrap();
        assert_eq!(c.get(1, "addr").unwrap(), val);
        assert!(matches!(
            c.get(0, "addr"),
            Err(BootstrapError::NotFound { .. })
        ));
        c.finalize().unwrap();
        let store = srv.join().unwrap();
        assert!(store.len() > 20, "a 256-byte value in 19-character chunks");
        let e = c.fence().unwrap_err().to_string();
        assert!(e.contains("test server") && e.contains("PMI_FD"), "{e}");
    }

    #[test]
    fn pmi2_handshake_and_a_silent_server_times_out() {
        let (a, b) = UnixStream::pair().unwrap();
        let srv = std::thread::spawn(move || {
            let mut b = b;
            let mut line = Vec::new();
            let mut byte = [0u8];
            while byte[0] != b'\n' {
                b.read_exact(&mut byte).unwrap();
                line.push(byte[0]);
            }
            assert_eq!(line, b"cmd=init pmi_version=2 pmi_subversion=0\n");
            b.write_all(b"cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n")
                .unwrap();
            let read_msg = |b: &mut UnixStream| {
                let mut len = [0u8; 6];
                b.read_exact(&mut len).unwrap();
                let mut body = vec![0; w::parse_v2_len(&len).unwrap()];
                b.read_exact(&mut body).unwrap();
                w::parse_v2(&String::from_utf8(body).unwrap()).unwrap()
            };
            let q = read_msg(&mut b);
            assert_eq!(
                (q.cmd(), q.get("pmijobid"), q.get("pmirank")),
                ("fullinit", Some("8.0"), Some("1"))
            );
            b.write_all(
                w::format_v2(
                    "fullinit-response",
                    &[("rank", "1"), ("size", "2"), ("rc", "0")],
                )
                .as_bytes(),
            )
            .unwrap();
            assert_eq!(read_msg(&mut b).cmd(), "job-getid");
            b.write_all(
                w::format_v2("job-getid-response", &[("jobid", "8.0"), ("rc", "0")]).as_bytes(),
            )
            .unwrap();
            assert_eq!(read_msg(&mut b).cmd(), "info-getjobattr");
            b.write_all(
                w::format_v2(
                    "info-getjobattr-response",
                    &[("found", "FALSE"), ("rc", "0")],
                )
                .as_bytes(),
            )
            .unwrap();
            assert_eq!(read_msg(&mut b).cmd(), "kvs-fence");
            // ... and never answers the fence.
            std::thread::sleep(Duration::from_secs(3));
        });
        let mut c = PmiClient::connect(
            &env(a.into_raw_fd(), PmiVersion::V2),
            Duration::from_millis(500),
        )
        .unwrap();
        assert_eq!((c.job_id(), c.local_rank(), c.local_size()), ("8.0", 1, 1));
        let t = Instant::now();
        let e = c.fence().unwrap_err().to_string();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(e.contains("RCOMM_BOOTSTRAP_TIMEOUT"), "{e}");
        srv.join().unwrap();
    }
}
