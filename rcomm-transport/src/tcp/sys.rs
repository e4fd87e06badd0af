//! The few socket calls std does not offer: integer socket options, `sendmsg` with
//! `MSG_NOSIGNAL`, re-`listen` with a larger backlog, and `poll`. Each `unsafe` block is one
//! system call whose arguments are checked here.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::OnceLock;
use std::time::Duration;

/// Sets an integer socket option.
pub(super) fn set_int_opt(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    let len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `val` lives across the call and `len` is its size; the kernel only reads it. The
    // descriptor is borrowed, so it is open; an unknown option is an error, not UB.
    let rc = unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (&raw const val).cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Writes `bufs` in one `sendmsg` without blocking and without `SIGPIPE`: a closed peer is
/// `EPIPE`, never a signal (which would kill a host program that did not ignore it).
pub(super) fn send_nosignal(fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: `msghdr` is plain data; all-zero is a valid value (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // The kernel does not write through msg_iov; the cast only satisfies the C signature.
    msg.msg_iov = bufs.as_ptr().cast_mut().cast();
    msg.msg_iovlen = bufs.len() as _;
    loop {
        // SAFETY: std guarantees `IoSlice` is ABI-compatible with `iovec` on Unix; `msg` points
        // at `bufs`, whose slices outlive the call and are only read. The descriptor is open.
        let n = unsafe {
            libc::sendmsg(
                fd.as_raw_fd(),
                &msg,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Calls `listen` again with a larger backlog (Linux allows this on a listening socket). std
/// listens with 128; a thousand ranks opening several streams each at once would overflow it,
/// and every dropped SYN costs the connecting rank a second.
pub(super) fn set_backlog(fd: BorrowedFd<'_>, backlog: libc::c_int) -> io::Result<()> {
    // SAFETY: listen on an open, bound socket with an integer argument.
    let rc = unsafe { libc::listen(fd.as_raw_fd(), backlog) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits until one of `fds` (at most two) is readable or hung up, or `timeout` passes.
pub(super) fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<()> {
    let mut p = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 2];
    let n = fds.len().min(p.len());
    for (slot, fd) in p.iter_mut().zip(&fds[..n]) {
        *slot = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
    }
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` holds `n` (at most its length) initialised pollfds, and we pass that count.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), n as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// Largest `SO_SNDBUF`/`SO_RCVBUF` an unprivileged process may set (`net.core.wmem_max`,
/// `net.core.rmem_max`), read once; 0 where unknown.
pub(super) fn socket_buffer_limits() -> (usize, usize) {
    static LIMITS: OnceLock<(usize, usize)> = OnceLock::new();
    *LIMITS.get_or_init(|| {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        };
        (
            read("/proc/sys/net/core/wmem_max"),
            read("/proc/sys/net/core/rmem_max"),
        )
    })
}
