//! The control channel between `rcomm-run` (the head) and one `rcomm-run --daemon` per remote
//! host: frames in rcomm's wire format (magic, version, kind, length; fields little-endian,
//! strings length-prefixed), carried over ssh's stdin (head → daemon) and stdout (daemon →
//! head). ssh's stderr stays free for diagnostics.
//!
//! The exchange: the daemon says `Hello` (its host name, the head's address as ssh saw it, its
//! core count); the head answers with one `Job` (program, arguments, working directory,
//! environment, this host's ranks, the key-value store's address and the job secret — the
//! secret travels only here, never in argv or the environment of ssh); the daemon reports
//! `Started`, `Output` and `Exited` per rank, or `Failed` if it cannot start the job; the head
//! may send `Signal`. End-of-file on the daemon's stdin ends that host's ranks. Both sides send
//! a `Heartbeat` every [`HEARTBEAT`] and declare the other gone after [`SILENCE_LIMIT`] without
//! any frame: ssh's own keepalives (and sshd's) react to a cut link only after 10-20 s, and
//! until then a cut-off host would keep its ranks running.
//!
//! Decoding never panics and never allocates beyond [`CTL_LIMIT`] per frame: the daemon's
//! stdin is reachable by whoever may run a command over ssh, but the head's output is not
//! trusted blindly either.

use crate::os::Ending;
use rcomm_runtime::auth::SECRET_LEN;
use rcomm_runtime::wire::{self, Dec, Enc, FrameIoError, WireError};
use std::io::{Read, Write};

/// How often each side of a control channel sends a heartbeat.
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(1);
/// Silence after which the other side of a control channel counts as gone.
pub const SILENCE_LIMIT: std::time::Duration = std::time::Duration::from_secs(6);

/// Largest control frame payload (one job description, or one batch of output lines).
pub const CTL_LIMIT: usize = 4 << 20;
/// Longest single string field (paths, arguments, variable values, messages).
const MAX_STR: usize = 1 << 20;
/// Most arguments, variables or ranks in one job description.
const MAX_ITEMS: u32 = 1 << 16;

mod kind {
    pub const HELLO: u8 = 0x40;
    pub const JOB: u8 = 0x41;
    pub const SIGNAL: u8 = 0x42;
    pub const STARTED: u8 = 0x43;
    pub const OUTPUT: u8 = 0x44;
    pub const EXITED: u8 = 0x45;
    pub const FAILED: u8 = 0x46;
    pub const SAY: u8 = 0x47;
    pub const HEARTBEAT: u8 = 0x48;
    pub const SIGNAL_RANK: u8 = 0x49;
}

/// What one host's daemon is to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonJob {
    /// PROGRAM as the user wrote it; the daemon resolves it on its host (PATH, then beside
    /// itself), so a missing program is reported by the host that lacks it.
    pub program: Vec<u8>,
    /// Its arguments.
    pub args: Vec<Vec<u8>>,
    /// Working directory for the ranks (the head's).
    pub cwd: Vec<u8>,
    /// Variables to set in every rank (`-x` exports and the head's `RCOMM_*`).
    pub env: Vec<(String, Vec<u8>)>,
    /// Number of ranks in the job.
    pub size: u32,
    /// This host's ranks, in local-rank order.
    pub ranks: Vec<u32>,
    /// `RCOMM_KVS_ADDR` as the ranks on this host must use it.
    pub kvs_addr: String,
    /// `RCOMM_JOB_ID`.
    pub job_id: String,
    /// The job secret.
    pub secret: [u8; SECRET_LEN],
    /// `--bind-to`: 0 default, 1 core, 2 none, 3 numa, 4 socket.
    pub bind_to: u8,
    /// `--map-by ppr:N:UNIT`: N (1 without ppr), for binding.
    pub ppr: u32,
    /// `--map-by ppr:N:UNIT`: UNIT (0 no ppr, 1 core, 2 numa, 3 socket).
    pub ppr_unit: u8,
    /// Ranks of the job on earlier hosts that share this host's kernel (same boot id).
    pub kernel_offset: u32,
    /// Ranks of the job on all hosts sharing this host's kernel, this one's included.
    pub kernel_ranks: u32,
    /// `--report-bindings`.
    pub report_bindings: bool,
    /// `--no-prefix`.
    pub no_prefix: bool,
    /// `--grace` in milliseconds: the stop sequence on end-of-file.
    pub grace_ms: u32,
}

/// Head → daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToDaemon {
    /// The job (once, after `Hello`).
    Job(Box<DaemonJob>),
    /// Send this signal to every rank's process group on the host.
    Signal(i32),
    /// The head is alive.
    Heartbeat,
    /// Send this signal to one rank's process group (a rank declared hung).
    SignalRank {
        /// The rank.
        rank: u32,
        /// The signal.
        sig: i32,
    },
}

/// Daemon → head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromDaemon {
    /// First message: who the daemon is.
    Hello {
        /// The host's own name.
        hostname: String,
        /// The head's address as this host sees it (ssh's client address; empty if unknown).
        head_ip: String,
        /// Usable cores on the host.
        cores: u32,
        /// NUMA nodes with usable cores.
        numas: u32,
        /// Packages with usable cores.
        packages: u32,
        /// `/proc/sys/kernel/random/boot_id` (hosts sharing a kernel share CPUs).
        boot_id: String,
    },
    /// A rank runs.
    Started {
        /// The rank.
        rank: u32,
        /// Its pid on that host.
        pid: i32,
    },
    /// Whole output lines (already prefixed unless `--no-prefix`).
    Output {
        /// For the head's stderr (else stdout).
        stderr: bool,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A rank ended.
    Exited {
        /// The rank.
        rank: u32,
        /// How.
        ending: Ending,
    },
    /// The daemon cannot run the job (e.g. PROGRAM not found there); it exits.
    Failed {
        /// Exit status the head should use (127/126 for PROGRAM, else 1).
        code: i32,
        /// What happened.
        msg: String,
    },
    /// A line for the head's stderr (bindings, warnings).
    Say {
        /// The text.
        msg: String,
    },
    /// The daemon is alive.
    Heartbeat,
}

fn bad(what: &'static str, why: &str) -> WireError {
    WireError::Invalid {
        what,
        why: why.into(),
    }
}

fn count(d: &mut Dec<'_>, what: &'static str) -> Result<u32, WireError> {
    let n = d.u32(what)?;
    if n > MAX_ITEMS {
        return Err(bad(what, "too many items"));
    }
    Ok(n)
}

impl ToDaemon {
    /// Encodes into one frame.
    pub fn to_frame(&self) -> Vec<u8> {
        let mut e = Enc::new();
        match self {
            ToDaemon::Job(j) => {
                e.bytes(&j.program);
                e.u32(j.args.len() as u32);
                for a in &j.args {
                    e.bytes(a);
                }
                e.bytes(&j.cwd);
                e.u32(j.env.len() as u32);
                for (k, v) in &j.env {
                    e.str(k).bytes(v);
                }
                e.u32(j.size).u32(j.ranks.len() as u32);
                for &r in &j.ranks {
                    e.u32(r);
                }
                e.str(&j.kvs_addr).str(&j.job_id).raw(&j.secret);
                e.u8(j.bind_to)
                    .u32(j.ppr)
                    .u8(j.ppr_unit)
                    .u32(j.kernel_offset)
                    .u32(j.kernel_ranks)
                    .u8(j.report_bindings as u8)
                    .u8(j.no_prefix as u8)
                    .u32(j.grace_ms);
                wire::encode_frame(kind::JOB, &e.finish())
            }
            ToDaemon::Signal(s) => wire::encode_frame(kind::SIGNAL, &e.i32(*s).finish()),
            ToDaemon::Heartbeat => wire::encode_frame(kind::HEARTBEAT, &[]),
            ToDaemon::SignalRank { rank, sig } => {
                wire::encode_frame(kind::SIGNAL_RANK, &e.u32(*rank).i32(*sig).finish())
            }
        }
    }

    /// Decodes one frame's kind and payload.
    pub fn decode(k: u8, p: &[u8]) -> Result<Self, WireError> {
        let mut d = Dec::new(p);
        let m = match k {
            kind::JOB => {
                let program = d.bytes(MAX_STR, "program")?.to_vec();
                let n = count(&mut d, "args")?;
                let mut args = Vec::new();
                for _ in 0..n {
                    args.push(d.bytes(MAX_STR, "arg")?.to_vec());
                }
                let cwd = d.bytes(MAX_STR, "cwd")?.to_vec();
                let n = count(&mut d, "env")?;
                let mut env = Vec::new();
                for _ in 0..n {
                    env.push((
                        d.str(MAX_STR, "env name")?,
                        d.bytes(MAX_STR, "env value")?.to_vec(),
                    ));
                }
                let size = d.u32("size")?;
                let n = count(&mut d, "ranks")?;
                let mut ranks = Vec::new();
                for _ in 0..n {
                    let r = d.u32("rank")?;
                    if r >= size {
                        return Err(bad("rank", "not below the job size"));
                    }
                    ranks.push(r);
                }
                let kvs_addr = d.str(MAX_STR, "kvs addr")?;
                let job_id = d.str(MAX_STR, "job id")?;
                let secret = d.array::<SECRET_LEN>("secret")?;
                let bind_to = d.u8("bind to")?;
                if bind_to > 4 {
                    return Err(bad("bind to", "unknown binding"));
                }
                let ppr = d.u32("ppr")?.max(1);
                let ppr_unit = d.u8("ppr unit")?;
                if ppr_unit > 3 {
                    return Err(bad("ppr unit", "unknown unit"));
                }
                let kernel_offset = d.u32("kernel offset")?;
                let kernel_ranks = d.u32("kernel ranks")?;
                let report_bindings = d.u8("report")? != 0;
                let no_prefix = d.u8("no prefix")? != 0;
                let grace_ms = d.u32("grace")?;
                ToDaemon::Job(Box::new(DaemonJob {
                    program,
                    args,
                    cwd,
                    env,
                    size,
                    ranks,
                    kvs_addr,
                    job_id,
                    secret,
                    bind_to,
                    ppr,
                    ppr_unit,
                    kernel_offset,
                    kernel_ranks,
                    report_bindings,
                    no_prefix,
                    grace_ms,
                }))
            }
            kind::SIGNAL => ToDaemon::Signal(d.i32("signal")?),
            kind::HEARTBEAT => ToDaemon::Heartbeat,
            kind::SIGNAL_RANK => ToDaemon::SignalRank {
                rank: d.u32("rank")?,
                sig: d.i32("signal")?,
            },
            k => {
                return Err(WireError::UnknownKind {
                    what: "control message to the daemon",
                    kind: k,
                });
            }
        };
        d.end()?;
        Ok(m)
    }
}

fn ending_parts(e: Ending) -> (u8, i32) {
    match e {
        Ending::Exited(c) => (0, c),
        Ending::Signaled(s) => (1, s),
        Ending::Unfinalized => (2, 0),
        Ending::Lost => (3, 0),
    }
}

impl FromDaemon {
    /// Encodes into one frame.
    pub fn to_frame(&self) -> Vec<u8> {
        let mut e = Enc::new();
        let k = match self {
            FromDaemon::Hello {
                hostname,
                head_ip,
                cores,
                numas,
                packages,
                boot_id,
            } => {
                e.str(hostname)
                    .str(head_ip)
                    .u32(*cores)
                    .u32(*numas)
                    .u32(*packages)
                    .str(boot_id);
                kind::HELLO
            }
            FromDaemon::Started { rank, pid } => {
                e.u32(*rank).i32(*pid);
                kind::STARTED
            }
            FromDaemon::Output { stderr, bytes } => {
                e.u8(*stderr as u8).bytes(bytes);
                kind::OUTPUT
            }
            FromDaemon::Exited { rank, ending } => {
                let (k, c) = ending_parts(*ending);
                e.u32(*rank).u8(k).i32(c);
                kind::EXITED
            }
            FromDaemon::Failed { code, msg } => {
                e.i32(*code).str(msg);
                kind::FAILED
            }
            FromDaemon::Say { msg } => {
                e.str(msg);
                kind::SAY
            }
            FromDaemon::Heartbeat => kind::HEARTBEAT,
        };
        wire::encode_frame(k, &e.finish())
    }

    /// Decodes one frame's kind and payload.
    pub fn decode(k: u8, p: &[u8]) -> Result<Self, WireError> {
        let mut d = Dec::new(p);
        let m = match k {
            kind::HELLO => FromDaemon::Hello {
                hostname: d.str(MAX_STR, "hostname")?,
                head_ip: d.str(MAX_STR, "head ip")?,
                cores: d.u32("cores")?,
                numas: d.u32("numas")?,
                packages: d.u32("packages")?,
                boot_id: d.str(MAX_STR, "boot id")?,
            },
            kind::STARTED => FromDaemon::Started {
                rank: d.u32("rank")?,
                pid: d.i32("pid")?,
            },
            kind::OUTPUT => FromDaemon::Output {
                stderr: d.u8("stream")? != 0,
                bytes: d.bytes(CTL_LIMIT, "output")?.to_vec(),
            },
            kind::EXITED => {
                let rank = d.u32("rank")?;
                let ending = match (d.u8("ending")?, d.i32("code")?) {
                    (0, c) => Ending::Exited(c),
                    (1, s) => Ending::Signaled(s),
                    (2, _) => Ending::Unfinalized,
                    (3, _) => Ending::Lost,
                    _ => return Err(bad("ending", "unknown kind")),
                };
                FromDaemon::Exited { rank, ending }
            }
            kind::FAILED => FromDaemon::Failed {
                code: d.i32("code")?,
                msg: d.str(MAX_STR, "message")?,
            },
            kind::SAY => FromDaemon::Say {
                msg: d.str(MAX_STR, "message")?,
            },
            kind::HEARTBEAT => FromDaemon::Heartbeat,
            k => {
                return Err(WireError::UnknownKind {
                    what: "control message from a daemon",
                    kind: k,
                });
            }
        };
        d.end()?;
        Ok(m)
    }
}

/// Reads one head → daemon message.
pub fn read_to_daemon(r: &mut impl Read) -> Result<ToDaemon, FrameIoError> {
    let (k, p) = wire::read_frame(r, CTL_LIMIT)?;
    Ok(ToDaemon::decode(k, &p)?)
}

/// Reads one daemon → head message.
pub fn read_from_daemon(r: &mut impl Read) -> Result<FromDaemon, FrameIoError> {
    let (k, p) = wire::read_frame(r, CTL_LIMIT)?;
    Ok(FromDaemon::decode(k, &p)?)
}

/// Writes one frame and flushes (pipes to ssh are buffered by nobody but us).
pub fn write(w: &mut impl Write, frame: &[u8]) -> std::io::Result<()> {
    w.write_all(frame)?;
    w.flush()
}

/// Fuzzing entry points of the control channel, in the shape of
/// [`rcomm_transport::fuzzing`] (used by `fuzz/` and `tests/ctl_decoders.rs`; feature
/// `fuzzing`). Not API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    use super::*;
    use rcomm_transport::fuzzing::Target;

    /// The control channel's targets.
    pub const TARGETS: &[Target] = &[
        Target {
            name: "ctl_to_daemon",
            what: "head -> daemon control frames as the daemon reads its stdin (read_to_daemon)",
            run: to_daemon,
            max_alloc: |n| 32 * n + 2 * wire::READ_FRAME_STEP,
        },
        Target {
            name: "ctl_from_daemon",
            what: "daemon -> head control frames as the head reads ssh's stdout (read_from_daemon)",
            run: from_daemon,
            max_alloc: |n| 32 * n + 2 * wire::READ_FRAME_STEP,
        },
    ];

    /// Head → daemon messages from a stream until it ends or breaks; each re-encodes to itself.
    pub fn to_daemon(data: &[u8]) {
        let mut r = data;
        while let Ok(m) = read_to_daemon(&mut r) {
            let f = m.to_frame();
            assert!(f.len() <= wire::FRAME_HEADER_LEN + CTL_LIMIT);
            assert_eq!(read_to_daemon(&mut &f[..]).ok(), Some(m));
        }
    }

    /// Daemon → head messages from a stream until it ends or breaks; each re-encodes to itself.
    pub fn from_daemon(data: &[u8]) {
        let mut r = data;
        while let Ok(m) = read_from_daemon(&mut r) {
            let f = m.to_frame();
            assert_eq!(read_from_daemon(&mut &f[..]).ok(), Some(m));
        }
    }

    /// Valid streams of each target, and a few that must be refused.
    pub fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
        let job = DaemonJob {
            program: b"./prog".to_vec(),
            args: vec![b"a".to_vec(), vec![0xff, 0]],
            cwd: b"/tmp".to_vec(),
            env: vec![("RCOMM_DEBUG".into(), b"INFO".to_vec())],
            size: 4,
            ranks: vec![2, 3],
            kvs_addr: "10.0.0.1:4000".into(),
            job_id: "abcd".into(),
            secret: [7; SECRET_LEN],
            bind_to: 1,
            ppr: 1,
            ppr_unit: 0,
            kernel_offset: 0,
            kernel_ranks: 2,
            report_bindings: true,
            no_prefix: false,
            grace_ms: 1000,
        };
        let to: Vec<u8> = [
            ToDaemon::Heartbeat,
            ToDaemon::Job(Box::new(job)),
            ToDaemon::Signal(15),
        ]
        .iter()
        .flat_map(ToDaemon::to_frame)
        .collect();
        let from: Vec<u8> = [
            FromDaemon::Hello {
                hostname: "h1".into(),
                head_ip: "10.0.0.1".into(),
                cores: 4,
                numas: 2,
                packages: 1,
                boot_id: "b00t".into(),
            },
            FromDaemon::Started { rank: 2, pid: 99 },
            FromDaemon::Output {
                stderr: false,
                bytes: b"[2] hi\n".to_vec(),
            },
            FromDaemon::Say { msg: "m".into() },
            FromDaemon::Exited {
                rank: 2,
                ending: Ending::Signaled(9),
            },
            FromDaemon::Failed {
                code: 127,
                msg: "not found".into(),
            },
            FromDaemon::Heartbeat,
        ]
        .iter()
        .flat_map(FromDaemon::to_frame)
        .collect();
        let mut huge = wire::encode_frame(kind::JOB, b"");
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut many = wire::encode_frame(kind::JOB, &[0; 64]);
        // The program is empty, then an argument count of 2^32 - 1.
        many[wire::FRAME_HEADER_LEN + 4..wire::FRAME_HEADER_LEN + 8]
            .copy_from_slice(&u32::MAX.to_le_bytes());
        let mut out = vec![
            ("ctl_to_daemon", "job", to.clone()),
            ("ctl_from_daemon", "all", from.clone()),
        ];
        for t in ["ctl_to_daemon", "ctl_from_daemon"] {
            out.push((t, "garbage", b"hello daemon\n".to_vec()));
            out.push((t, "oversized", huge.clone()));
            out.push((t, "many_items", many.clone()));
            out.push((t, "truncated", to[..to.len() - 5].to_vec()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> DaemonJob {
        DaemonJob {
            program: b"./prog".to_vec(),
            args: vec![b"a".to_vec(), vec![0xff, 0]],
            cwd: b"/tmp".to_vec(),
            env: vec![("RCOMM_DEBUG".into(), b"INFO".to_vec())],
            size: 6,
            ranks: vec![2, 3],
            kvs_addr: "10.0.0.1:4000".into(),
            job_id: "abcd".into(),
            secret: [7; SECRET_LEN],
            bind_to: 1,
            ppr: 2,
            ppr_unit: 2,
            kernel_offset: 1,
            kernel_ranks: 4,
            report_bindings: true,
            no_prefix: false,
            grace_ms: 1000,
        }
    }

    fn frame_parts(f: &[u8]) -> (u8, &[u8]) {
        (f[3], &f[wire::FRAME_HEADER_LEN..])
    }

    #[test]
    fn messages_round_trip() {
        for m in [
            ToDaemon::Job(Box::new(job())),
            ToDaemon::Signal(15),
            ToDaemon::Heartbeat,
            ToDaemon::SignalRank { rank: 3, sig: 9 },
        ] {
            let f = m.to_frame();
            let (k, p) = frame_parts(&f);
            assert_eq!(ToDaemon::decode(k, p).unwrap(), m);
            assert_eq!(read_to_daemon(&mut &f[..]).unwrap(), m);
        }
        for m in [
            FromDaemon::Hello {
                hostname: "h1".into(),
                head_ip: "10.0.0.1".into(),
                cores: 4,
                numas: 2,
                packages: 1,
                boot_id: "b00t".into(),
            },
            FromDaemon::Started { rank: 3, pid: 99 },
            FromDaemon::Output {
                stderr: true,
                bytes: b"[3] hi\n".to_vec(),
            },
            FromDaemon::Exited {
                rank: 3,
                ending: Ending::Signaled(9),
            },
            FromDaemon::Exited {
                rank: 2,
                ending: Ending::Exited(4),
            },
            FromDaemon::Failed {
                code: 127,
                msg: "x".into(),
            },
            FromDaemon::Say { msg: "m".into() },
            FromDaemon::Heartbeat,
        ] {
            let f = m.to_frame();
            assert_eq!(read_from_daemon(&mut &f[..]).unwrap(), m);
        }
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        let f = ToDaemon::Job(Box::new(job())).to_frame();
        let (k, p) = frame_parts(&f);
        for cut in 0..p.len() {
            assert!(ToDaemon::decode(k, &p[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_rank = job();
        bad_rank.ranks = vec![6];
        let f = ToDaemon::Job(Box::new(bad_rank)).to_frame();
        let (k, p) = frame_parts(&f);
        assert!(ToDaemon::decode(k, p).is_err());
        assert!(FromDaemon::decode(0x99, &[]).is_err());
        assert!(matches!(
            read_from_daemon(&mut &b""[..]),
            Err(FrameIoError::Closed)
        ));
        // Pseudo-random bytes of every length decode to errors or messages, never panics.
        let mut x = 0x1234_5678u32;
        for len in 0..200 {
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (x >> 24) as u8
                })
                .collect();
            for k in 0x40..0x4a {
                let _ = ToDaemon::decode(k, &buf);
                let _ = FromDaemon::decode(k, &buf);
            }
        }
    }
}
