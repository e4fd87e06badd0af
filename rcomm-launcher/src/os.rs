//! The launcher's only `unsafe` code: signal masks and dispositions, `waitid`, `kill`, CPU
//! affinity, and the set-up a rank's process does between `fork` and `exec`.
//!
//! Everything here is a thin wrapper over one system call with a safe signature; the callers
//! (`job`, `signals`, `watchdog`, `spawn`) hold the policy. Every `unsafe` block says why it is
//! sound.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It called `exit(code)`.
    Exited(i32),
    /// A signal ended it.
    Signaled(i32),
    /// It exited with code 0 after connecting to rcomm but without finalizing (its `World`
    /// was never dropped, e.g. `std::process::exit(0)` mid-job): peers may be waiting on it,
    /// so it counts as a failure (status 1), as MPI launchers treat a missing finalize.
    Unfinalized,
    /// Its host's daemon went away (ssh connection closed or the daemon died) before it said
    /// how the rank ended; the rank is ended there by its daemon or the daemon's watchdog.
    Lost,
}

impl Ending {
    /// True for `exit(0)`.
    pub fn is_success(self) -> bool {
        self == Ending::Exited(0)
    }

    /// The status a shell would report: the exit code, or 128 + the signal number.
    pub fn exit_code(self) -> i32 {
        match self {
            Ending::Exited(c) => c,
            Ending::Signaled(s) => 128 + s,
            Ending::Unfinalized | Ending::Lost => 1,
        }
    }

    /// "exited with code 3", "was killed by signal 9 (SIGKILL)".
    pub fn describe(self) -> String {
        match self {
            Ending::Exited(c) => format!("exited with code {c}"),
            Ending::Unfinalized => "exited with code 0 without finalizing rcomm (std::process::exit while the World was alive?)".to_string(),
            Ending::Lost => {
                "was lost: its host's rcomm-run daemon went away (ssh connection closed?)"
                    .to_string()
            }
            Ending::Signaled(s) => {
                format!(
                    "was killed by signal {s} ({})",
                    rcomm_runtime::os::signal_name(s)
                )
            }
        }
    }
}

/// A set of signals (`sigset_t`).
#[derive(Clone, Copy)]
pub struct SigSet(libc::sigset_t);

impl SigSet {
    /// The set holding exactly `sigs`.
    pub fn of(sigs: &[i32]) -> Self {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the whole set behind the pointer it is given.
        unsafe { libc::sigemptyset(set.as_mut_ptr()) };
        // SAFETY: initialised just above.
        let mut set = unsafe { set.assume_init() };
        for &s in sigs {
            // SAFETY: `set` is an initialised sigset; a bad number only makes it return EINVAL.
            unsafe { libc::sigaddset(&mut set, s) };
        }
        Self(set)
    }
}

/// Blocks `set` in the calling thread. Threads created afterwards inherit the mask, which is
/// why the launcher calls this before it starts any thread.
pub fn block_signals(set: &SigSet) -> io::Result<()> {
    // SAFETY: `set.0` is a valid sigset; the old mask is not wanted (null).
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set.0, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits up to `timeout` for one signal of `set` (which must be blocked); `None` on timeout.
pub fn wait_signal(set: &SigSet, timeout: Duration) -> io::Result<Option<i32>> {
    // SAFETY: timespec is plain data; all-zero is a valid value.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    ts.tv_sec = timeout.as_secs().min(i32::MAX as u64) as libc::time_t;
    ts.tv_nsec = timeout.subsec_nanos() as _;
    // SAFETY: `set.0` and `ts` are valid for reads; the siginfo pointer may be null.
    let rc = unsafe { libc::sigtimedwait(&set.0, std::ptr::null_mut(), &ts) };
    if rc >= 0 {
        return Ok(Some(rc));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
        _ => Err(e),
    }
}

/// True when `sig` is ignored (`SIG_IGN`), e.g. SIGHUP under `nohup`.
pub fn signal_is_ignored(sig: i32) -> bool {
    let mut old = MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null new action only queries; `old` is writable.
    let rc = unsafe { libc::sigaction(sig, std::ptr::null(), old.as_mut_ptr()) };
    // SAFETY: zero-initialised, and filled in by sigaction when it succeeded.
    rc == 0 && unsafe { old.assume_init() }.sa_sigaction == libc::SIG_IGN
}

fn plain_action(handler: libc::sighandler_t) -> libc::sigaction {
    // SAFETY: sigaction is plain data; all-zero is a valid value (empty mask, no flags).
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act
}

fn set_action(sig: i32, act: &libc::sigaction) -> io::Result<()> {
    // SAFETY: `act` is a valid action without a handler function; the old one is not wanted.
    if unsafe { libc::sigaction(sig, act, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Gives `sig` its default disposition.
pub fn set_signal_default(sig: i32) -> io::Result<()> {
    set_action(sig, &plain_action(libc::SIG_DFL))
}

/// Ignores `sig`.
pub fn set_signal_ignored(sig: i32) -> io::Result<()> {
    set_action(sig, &plain_action(libc::SIG_IGN))
}

/// Sends `sig` to the process group `pgid`. Refuses 0 and 1, which `kill` would read as "our
/// own group" and "every process we may signal".
pub fn kill_group(pgid: i32, sig: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(-pgid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `sig` to the process `pid` (refuses pids ≤ 1 for the same reason as [`kill_group`]).
pub fn kill_process(pid: i32, sig: i32) -> io::Result<()> {
    if pid <= 1 {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How child `pid` ended, if it has, **without reaping it**: the zombie keeps its pid, and so
/// its process-group id, from being reused while the launcher may still signal that group.
pub fn peek_exit(pid: i32) -> io::Result<Option<Ending>> {
    let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
    // SAFETY: `info` is writable; the flags ask for no state change (WNOWAIT) and no blocking.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            info.as_mut_ptr(),
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(None)
        } else {
            Err(e)
        };
    }
    // SAFETY: zero-initialised, then filled in (or left zero) by waitid.
    let info = unsafe { info.assume_init() };
    // SAFETY: waitid fills the SIGCHLD members of the union, which these accessors read; with
    // WNOHANG and no change they stay zero.
    let (who, status) = unsafe { (info.si_pid(), info.si_status()) };
    if who == 0 {
        return Ok(None);
    }
    Ok(match info.si_code {
        libc::CLD_EXITED => Some(Ending::Exited(status)),
        libc::CLD_KILLED | libc::CLD_DUMPED => Some(Ending::Signaled(status)),
        _ => None,
    })
}

/// A CPU mask (`cpu_set_t`).
#[derive(Clone, Copy)]
pub struct CpuSet(libc::cpu_set_t);

impl CpuSet {
    /// The mask holding `cpus` (numbers at or above `CPU_SETSIZE` are left out).
    pub fn of(cpus: &[usize]) -> Self {
        // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            // SAFETY: `c` is below CPU_SETSIZE, so the bit lies inside `set`.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        Self(set)
    }
}

/// The CPUs this process may run on, ascending.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: as in `CpuSet::of`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is writable for the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE, so the bit lies inside `set`.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// What a rank's process does to itself between `fork` and `exec` (see [`set_child_setup`]).
/// Plain data, copied into the child: nothing there may allocate.
#[derive(Clone, Copy)]
pub struct ChildSetup {
    /// The launcher's pid, to detect that it died before `PR_SET_PDEATHSIG` took effect.
    pub launcher_pid: i32,
    /// CPUs to bind to, if any.
    pub cpus: Option<CpuSet>,
    /// A close-on-exec descriptor to hand down (the job secret's memfd).
    pub inherit_fd: RawFd,
    /// The watchdog's socket: the child writes its pid (= its process group) there before it
    /// runs any program, so no grandchild can start unrecorded.
    pub register_fd: RawFd,
}

/// Installs [`ChildSetup`] as `cmd`'s pre-exec step.
pub fn set_child_setup(cmd: &mut Command, setup: ChildSetup) {
    let empty = SigSet::of(&[]);
    // SAFETY: the closure runs in the forked child of a multi-threaded process, where only
    // async-signal-safe functions may be called. It makes raw system calls only (setpgid,
    // getpid, send, prctl, getppid, _exit, rt_sigaction, sigprocmask, sched_setaffinity, fcntl) on
    // plain data copied into it, allocates nothing, takes no lock, and reports errors as
    // `io::Error::from_raw_os_error`-style values, which do not allocate.
    unsafe {
        cmd.pre_exec(move || child_setup(&setup, &empty));
    }
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// The body of the pre-exec step. Only async-signal-safe calls (see [`set_child_setup`]).
fn child_setup(s: &ChildSetup, empty: &SigSet) -> io::Result<()> {
    // SAFETY (whole function): each call below is a system call on plain values or on
    // pointers to locals and to data the closure owns; none allocates or locks.
    unsafe {
        // Own process group: the launcher signals the rank and everything it starts at once,
        // and a terminal's Ctrl-C reaches only the launcher, which forwards it.
        if libc::setpgid(0, 0) != 0 {
            return Err(last_err());
        }
        // Record the group with the watchdog before any program runs in it.
        let pid = libc::getpid();
        let rec = pid.to_le_bytes();
        let _ = libc::send(
            s.register_fd,
            rec.as_ptr().cast(),
            rec.len(),
            libc::MSG_NOSIGNAL,
        );
        // Die with the launcher; then close the race where it died before the prctl.
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(last_err());
        }
        if libc::getppid() != s.launcher_pid {
            libc::_exit(1);
        }
        // Ignored signals and the signal mask survive exec; the launcher blocks several and
        // may have inherited ignored ones. Give the program a clean slate. The raw system
        // call, because glibc's sigaction refuses the numbers it reserves (32, 33), which can
        // be inherited as ignored too. An all-zero kernel action is SIG_DFL with no flags and
        // an empty mask on every layout of the structure; 32 bytes cover the largest.
        let dfl_kernel = [0u64; 4];
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    dfl_kernel.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    8usize,
                );
            }
        }
        if libc::sigprocmask(libc::SIG_SETMASK, &empty.0, std::ptr::null_mut()) != 0 {
            return Err(last_err());
        }
        if let Some(cpus) = &s.cpus
            && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &cpus.0) != 0
        {
            return Err(last_err());
        }
        // The launcher keeps the secret's descriptor close-on-exec so nothing else inherits
        // it; only ranks get it.
        if libc::fcntl(s.inherit_fd, libc::F_SETFD, 0) != 0 {
            return Err(last_err());
        }
    }
    Ok(())
}

/// True when stdin is a terminal of which this process is not in the foreground (started
/// with `&`): reading it would stop the whole launcher with SIGTTIN.
pub fn stdin_is_background_tty() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp take and return plain integers.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) != libc::getpgrp() }
}

/// Writes `data` to a socket without raising SIGPIPE if the peer is gone.
pub fn send_nosignal(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is valid for reads of its length; a bad fd yields EBADF.
    let n = unsafe { libc::send(fd, data.as_ptr().cast(), data.len(), libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endings_read_like_a_shell() {
        assert_eq!(Ending::Signaled(9).exit_code(), 137);
        assert_eq!(Ending::Exited(3).exit_code(), 3);
        assert!(
            Ending::Signaled(9)
                .describe()
                .contains("signal 9 (SIGKILL)")
        );
        assert_eq!(Ending::Exited(3).describe(), "exited with code 3");
        assert!(Ending::Exited(0).is_success() && !Ending::Signaled(15).is_success());
    }

    #[test]
    fn allowed_cpus_is_not_empty() {
        assert!(!allowed_cpus().unwrap().is_empty());
    }

    #[test]
    fn kill_refuses_the_dangerous_ids() {
        assert!(kill_group(0, 0).is_err());
        assert!(kill_group(1, 0).is_err());
        assert!(kill_group(-1, 0).is_err());
        assert!(kill_process(1, 0).is_err());
    }

    #[test]
    fn peek_exit_leaves_the_zombie() {
        let mut c = Command::new("sh").arg("-c").arg("exit 7").spawn().unwrap();
        let pid = c.id() as i32;
        let t0 = std::time::Instant::now();
        let end = loop {
            if let Some(e) = peek_exit(pid).unwrap() {
                break e;
            }
            assert!(t0.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(end, Ending::Exited(7));
        assert_eq!(
            peek_exit(pid).unwrap(),
            Some(Ending::Exited(7)),
            "still a zombie"
        );
        assert_eq!(c.wait().unwrap().code(), Some(7));
    }
}
