//! Thin wrappers over the few system calls the transport layer needs outside `local` and `shm`
//! (random bytes, hostname, sealed memfds, signals). Every `unsafe` block says why it is sound.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Fills `buf` with bytes from the kernel's CSPRNG.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`, which we own mutably.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

/// The node name in this UTS namespace (fake hosts made of namespaces each have their own).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length; gethostname NUL-terminates within it or
    // truncates, and we stop at the first NUL or the end.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Creates a memfd (close-on-exec unless `inherit`) holding `data`, sealed against any change.
pub fn sealed_memfd(name: &str, data: &[u8], inherit: bool) -> io::Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = libc::MFD_ALLOW_SEALING | if inherit { 0 } else { libc::MFD_CLOEXEC };
    // SAFETY: `cname` is a valid NUL-terminated string; the returned fd is checked below.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut off = 0;
    while off < data.len() {
        // SAFETY: the slice tail is valid for reads of the given length.
        let n = unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                data[off..].as_ptr().cast(),
                data.len() - off,
                off as libc::off_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        off += n as usize;
    }
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on a descriptor we own with an integer argument.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Reads up to `buf.len()` bytes at offset 0 of `fd` without moving its file offset, so several
/// programs started in turn by one wrapper can all read the same descriptor.
pub fn pread_all(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    let mut off = 0;
    while off < buf.len() {
        // SAFETY: the slice tail is valid for writes of the given length; a bad fd gives EBADF.
        let n = unsafe {
            libc::pread(
                fd,
                buf[off..].as_mut_ptr().cast(),
                buf.len() - off,
                off as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        off += n as usize;
    }
    Ok(off)
}

/// The text of this thread's last `dlopen`/`dlsym` failure (read it before any other dl call).
pub fn dl_error() -> String {
    // SAFETY: dlerror returns this thread's last error text or null.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown reason".into()
    } else {
        // SAFETY: a NUL-terminated string owned by libc, read before any other dl call.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Sets `O_NONBLOCK` on the open file behind `fd`.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl with integer arguments; a bad fd yields EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Marks `fd` close-on-exec so programs this rank starts do not inherit it.
pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl with integer arguments; a bad fd yields EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Descriptors a rank sleeps on: some for data to read, some for room to write. Reused
/// between sleeps, so a steady exchange does not allocate.
#[derive(Default)]
pub struct PollSet {
    fds: Vec<libc::pollfd>,
}

// By hand: libc's types are `Debug` only with its `extra_traits` feature, which rcomm does not
// ask for (nothing else needs it, and it is slow to build).
impl std::fmt::Debug for PollSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.fds.iter().map(|p| (p.fd, p.events)))
            .finish()
    }
}

impl PollSet {
    /// Forgets every descriptor, keeping the capacity.
    pub fn clear(&mut self) {
        self.fds.clear();
    }

    /// Room for `n` more descriptors.
    pub fn reserve(&mut self, n: usize) {
        self.fds.reserve(n);
    }

    /// Wake when `fd` is readable or hung up.
    pub fn read(&mut self, fd: RawFd) {
        self.fds.push(libc::pollfd {
            fd,
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        });
    }

    /// Wake when `fd` has room to write (or fails: errors and hang-ups are always reported).
    pub fn write(&mut self, fd: RawFd) {
        self.fds.push(libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        });
    }

    /// Number of descriptors.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// Waits until one descriptor is ready or `timeout` passes; true if one is (or a signal
    /// interrupted the wait).
    pub fn wait(&mut self, timeout: std::time::Duration) -> io::Result<bool> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs that poll may write.
        let n = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(true)
            } else {
                Err(e)
            };
        }
        Ok(n > 0)
    }
}

/// Microseconds on the coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`: a few nanoseconds
/// to read, advancing once per kernel tick of 1–4 ms) — for the flight recorder, which stamps
/// every collective and must not pay for a precise clock.
pub fn monotonic_coarse_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer to ours.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// CPU time this thread has used, in nanoseconds (benchmarks of small costs on a busy machine,
/// where wall time counts other processes' time slices too).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer to ours.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Number of CPUs this process may run on (its own affinity: one when bound to a core).
pub fn usable_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Parses Linux's CPU/node list form (`0-3,8-11`, empty for none).
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let a = part.parse::<u32>().ok()?;
                (a, a)
            }
        };
        // A bound on one range keeps a corrupt list from asking for billions of CPUs.
        if b < a || b - a > 1 << 16 {
            return None;
        }
        v.extend(a..=b);
    }
    v.sort_unstable();
    v.dedup();
    Some(v)
}

/// Number of CPUs the ranks of a job on this machine share: the CPUs of this process's cgroup
/// cpuset (a container's or a batch job's allocation, which binding a rank with
/// `sched_setaffinity` does not narrow), else the online CPUs, limited by a cgroup CPU quota.
/// Whether a node is oversubscribed is this against its rank count — not [`usable_cpus`],
/// which counts one CPU for a rank the launcher bound to a core.
pub fn job_cpus() -> usize {
    job_cpus_under(std::path::Path::new("/"))
}

/// [`job_cpus`] reading `/proc` and `/sys/fs/cgroup` under `root` (tests feed fixture trees);
/// the online count is the running machine's.
pub fn job_cpus_under(root: &std::path::Path) -> usize {
    let read = |p: &str| std::fs::read_to_string(root.join(p.trim_start_matches('/'))).ok();
    let count = |list: &str| parse_cpu_list(list.trim()).map(|v| v.len());
    let groups = read("proc/self/cgroup").unwrap_or_default();
    // cgroup v2: "0::/path"; v1: "N:cpuset:/path" and "N:cpu,cpuacct:/path".
    let path_of = |ctrl: &str| -> Option<String> {
        groups.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            (ctrls.split(',').any(|c| c == ctrl)).then(|| path.to_string())
        })
    };
    let v2 = path_of("");
    let cpuset = v2
        .as_ref()
        .and_then(|p| read(&format!("sys/fs/cgroup{p}/cpuset.cpus.effective")))
        .or_else(|| {
            let p = path_of("cpuset")?;
            read(&format!("sys/fs/cgroup/cpuset{p}/cpuset.effective_cpus"))
                .or_else(|| read(&format!("sys/fs/cgroup/cpuset{p}/cpuset.cpus")))
        })
        .and_then(|l| count(&l))
        .filter(|&n| n > 0);
    let n = cpuset.unwrap_or_else(|| {
        // SAFETY: sysconf has no preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        if online > 0 {
            online as usize
        } else {
            usable_cpus()
        }
    });
    // A quota of q µs per period p lets the group use ⌈q/p⌉ CPUs at once.
    let quota = v2
        .as_ref()
        .and_then(|p| read(&format!("sys/fs/cgroup{p}/cpu.max")))
        .and_then(|l| {
            let mut f = l.split_whitespace();
            Some((
                f.next()?.parse::<f64>().ok()?,
                f.next()?.parse::<f64>().ok()?,
            ))
        })
        .or_else(|| {
            let p = path_of("cpu")?;
            let q = read(&format!("sys/fs/cgroup/cpu,cpuacct{p}/cpu.cfs_quota_us"))
                .or_else(|| read(&format!("sys/fs/cgroup/cpu{p}/cpu.cfs_quota_us")))?;
            let per = read(&format!("sys/fs/cgroup/cpu,cpuacct{p}/cpu.cfs_period_us"))
                .or_else(|| read(&format!("sys/fs/cgroup/cpu{p}/cpu.cfs_period_us")))?;
            Some((
                q.trim().parse::<f64>().ok()?,
                per.trim().parse::<f64>().ok()?,
            ))
        })
        .filter(|&(q, per)| q > 0.0 && per > 0.0)
        .map(|(q, per)| (q / per).ceil().max(1.0) as usize);
    quota.map_or(n, |q| n.min(q)).max(1)
}

/// The CPUs this process may run on (`sched_getaffinity`), sorted.
pub fn allowed_cpus() -> io::Result<Vec<u32>> {
    // SAFETY: cpu_set_t is plain bits; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is writable for the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE, so the bit lies inside `set`.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c as u32)
        .collect())
}

/// The name of a signal, for messages ("SIGKILL").
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGXCPU => "SIGXCPU",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// The 32 bits of `word` a futex on it compares: the low half of the counter, which changes
/// with every increment (a wait on a counter goes wrong only after 2³² rounds in one sleep).
fn futex_half(word: &std::sync::atomic::AtomicU64) -> *const u32 {
    let p = word.as_ptr().cast::<u32>();
    if cfg!(target_endian = "little") {
        p.cast_const()
    } else {
        // SAFETY: the second half of the same 8-byte word.
        unsafe { p.add(1).cast_const() }
    }
}

/// Sleeps until [`futex_wake`] on `word`, at most `timeout`, unless the low 32 bits of `word`
/// no longer equal those of `seen`. The word may lie in memory other processes map (a
/// shared-memory window): the futex is not process-private. Returns at once on any error
/// (interrupted, value changed): callers re-check their condition and loop.
pub fn futex_wait(word: &std::sync::atomic::AtomicU64, seen: u64, timeout: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the aligned 4-byte word at a live address and the timespec
    // through valid pointers; it writes nothing of ours.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_half(word),
            libc::FUTEX_WAIT,
            seen as u32,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every thread, of any process, sleeping in [`futex_wait`] on `word`.
pub fn futex_wake(word: &std::sync::atomic::AtomicU64) {
    // SAFETY: FUTEX_WAKE only uses the address as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_half(word),
            libc::FUTEX_WAKE,
            i32::MAX,
        );
    }
}

const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;

/// Registers this process for expedited global memory barriers (`membarrier(2)`), once per
/// process; whether that worked (kernels before 4.16, or a seccomp filter, say no).
pub fn membarrier_register() -> bool {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REGISTERED.get_or_init(|| {
        // SAFETY: membarrier takes two integers and touches no memory of ours.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
                0,
                0,
            ) == 0
        }
    })
}

/// A full memory barrier on every CPU now running a thread of a registered process (this one
/// included): what lets those threads order a store before a load with no fence of their own.
/// Call only after [`membarrier_register`] returned true.
pub fn membarrier_global() -> io::Result<()> {
    // SAFETY: as in membarrier_register.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn futex_wait_returns_on_wake_and_on_a_changed_value() {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::time::{Duration, Instant};
        let word = AtomicU64::new(5);
        // A changed value: no sleep at all (a 30 s timeout would show).
        let t = Instant::now();
        futex_wait(&word, 4, Duration::from_secs(30));
        assert!(t.elapsed() < Duration::from_secs(10));
        // Woken by another thread's store and wake, long before the timeout; the high half
        // changing alone does not count (the futex compares the low half).
        word.store(5 | 1 << 32, Ordering::SeqCst);
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                word.store(6, Ordering::SeqCst);
                futex_wake(&word);
            });
            while word.load(Ordering::SeqCst) != 6 {
                futex_wait(&word, 5, Duration::from_secs(30));
            }
        });
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        // A timeout without a wake returns too.
        futex_wait(&word, 6, Duration::from_millis(20));
    }

    fn cgroup_tree(files: &[(&str, &str)]) -> std::path::PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "rcomm-cgroup-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        for (path, text) in files {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        root
    }

    #[test]
    fn job_cpus_reads_the_cgroup_not_the_affinity() {
        // cgroup v2: a cpuset of 4 CPUs and a quota of two CPUs' time.
        let v2 = cgroup_tree(&[
            ("proc/self/cgroup", "0::/job/step\n"),
            ("sys/fs/cgroup/job/step/cpuset.cpus.effective", "0-3\n"),
            ("sys/fs/cgroup/job/step/cpu.max", "200000 100000\n"),
        ]);
        assert_eq!(job_cpus_under(&v2), 2);
        std::fs::write(v2.join("sys/fs/cgroup/job/step/cpu.max"), "max 100000\n").unwrap();
        assert_eq!(job_cpus_under(&v2), 4);
        // cgroup v1 beside an empty unified line (a hybrid host): the cpuset controller's.
        let v1 = cgroup_tree(&[
            (
                "proc/self/cgroup",
                "3:cpuset:/slurm/job7\n1:cpu,cpuacct:/\n0::/\n",
            ),
            (
                "sys/fs/cgroup/cpuset/slurm/job7/cpuset.effective_cpus",
                "0-5,8,10\n",
            ),
            ("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"),
            ("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"),
        ]);
        assert_eq!(job_cpus_under(&v1), 8);
        // Nothing to read: the online CPUs, at least one.
        let none = cgroup_tree(&[]);
        assert!(job_cpus_under(&none) >= 1);
        for d in [v2, v1, none] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn sealed_memfd_is_readable_and_immutable() {
        let fd = sealed_memfd("t", b"secret!", false).unwrap();
        let mut b = [0u8; 16];
        assert_eq!(pread_all(fd.as_raw_fd(), &mut b).unwrap(), 7);
        assert_eq!(&b[..7], b"secret!");
        // SAFETY: writing one byte from a valid buffer to our own descriptor.
        let n = unsafe { libc::pwrite(fd.as_raw_fd(), b"x".as_ptr().cast(), 1, 0) };
        assert_eq!(n, -1, "write must be refused by the seal");
    }

    #[test]
    fn random_bytes_differ() {
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        random_bytes(&mut a).unwrap();
        random_bytes(&mut b).unwrap();
        assert_ne!(a, b);
    }
}
