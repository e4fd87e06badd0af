//! Mapping another process's shared segment by (pid, descriptor number), without a socket.
//!
//! A rank that created a [`Segment`] publishes its pid and the segment's descriptor number;
//! a peer on the same node duplicates that descriptor into itself with `pidfd_getfd` (Linux ≥
//! 5.6, needs ptrace-attach rights over the owner) or, where that is refused, by opening
//! `/proc/<pid>/fd/<n>` (needs only ptrace-read rights, so it also works under Yama's
//! `ptrace_scope = 1`). The memfd is then mapped whole; [`Segment::from_fd`] refuses anything
//! that is not a sealed memfd, so a recycled descriptor number cannot make us map the wrong
//! kind of file. Nothing is created in the file system.

use crate::local::{LocalError, Segment};
use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// Bytes of a window's descriptor: what a peer on this node needs to map it (process id,
/// descriptor number, length). Opaque to the layers above.
pub const WINDOW_BLOB: usize = 16;

/// A node-local shared window of this process: its mapping, and the descriptor its peers map
/// it by ([`map_window`]).
pub struct Window {
    /// The mapping.
    pub seg: Segment,
    /// What peers need to map it.
    pub blob: [u8; WINDOW_BLOB],
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("len", &self.seg.len())
            .finish()
    }
}

impl Window {
    /// A window of `len` bytes (at least one), named `name` for diagnostics.
    pub fn create(name: &str, len: usize) -> Result<Self, LocalError> {
        use std::os::fd::AsRawFd;
        let seg = Segment::create(name, len.max(1))?;
        let mut blob = [0u8; WINDOW_BLOB];
        blob[0..4].copy_from_slice(&std::process::id().to_le_bytes());
        blob[4..8].copy_from_slice(&seg.fd().as_raw_fd().to_le_bytes());
        blob[8..16].copy_from_slice(&(seg.len() as u64).to_le_bytes());
        Ok(Self { seg, blob })
    }
}

/// Maps a peer's window from its descriptor ([`Window::blob`]).
pub fn map_window(blob: &[u8]) -> Result<Segment, LocalError> {
    let b: &[u8; WINDOW_BLOB] = blob
        .try_into()
        .map_err(|_| LocalError::Invalid(format!("a window descriptor of {} bytes", blob.len())))?;
    let pid = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
    let fd = i32::from_le_bytes(b[4..8].try_into().expect("4 bytes"));
    let len = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    let len = usize::try_from(len)
        .map_err(|_| LocalError::Invalid(format!("a window of {len} bytes")))?;
    map_peer_segment(pid, fd, len)
}

/// Duplicates descriptor `fd` of process `pid` into this process.
pub fn dup_peer_fd(pid: u32, fd: i32) -> io::Result<OwnedFd> {
    match pidfd_getfd(pid, fd) {
        Ok(f) => Ok(f),
        Err(first) => proc_open(pid, fd).map_err(|second| {
            io::Error::new(
                second.kind(),
                format!(
                    "pidfd_getfd({pid}, {fd}) failed ({first}) and so did opening /proc/{pid}/fd/{fd} ({second})"
                ),
            )
        }),
    }
}

fn pidfd_getfd(pid: u32, fd: i32) -> io::Result<OwnedFd> {
    let pidfd = crate::local::pidfd(pid)?;
    use std::os::fd::AsRawFd;
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number in that process and flags by
    // value; it returns a new descriptor (close-on-exec set by the kernel) or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor returned by the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as i32) })
}

fn proc_open(pid: u32, fd: i32) -> io::Result<OwnedFd> {
    let path = CString::new(format!("/proc/{pid}/fd/{fd}")).expect("no NUL in a number");
    // SAFETY: `path` is NUL-terminated; open returns a new descriptor or -1.
    let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor returned by the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Maps the segment that process `pid` holds open as descriptor `fd`, checking that it has
/// `len` bytes (a different length means the number now names another segment).
pub fn map_peer_segment(pid: u32, fd: i32, len: usize) -> Result<Segment, LocalError> {
    let owned = dup_peer_fd(pid, fd).map_err(|e| LocalError::Io {
        what: format!("taking segment descriptor {fd} of process {pid}"),
        source: e,
    })?;
    let seg = Segment::from_fd(owned)?;
    if seg.len() != len {
        return Err(LocalError::Invalid(format!(
            "descriptor {fd} of process {pid} maps {} bytes, expected {len}",
            seg.len()
        )));
    }
    Ok(seg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_window_maps_from_its_descriptor_and_a_bad_descriptor_is_refused() {
        let w = Window::create("rcomm-window-blob-test", 4096).unwrap();
        let peer = map_window(&w.blob).unwrap();
        // SAFETY: both mappings are 4096 bytes of one memfd, alive here.
        unsafe { *w.seg.as_ptr() = 7 };
        assert_eq!(unsafe { *peer.as_ptr() }, 7);
        assert!(map_window(&w.blob[..8]).is_err(), "short descriptor");
        let mut wrong = w.blob;
        wrong[8..16].copy_from_slice(&8192u64.to_le_bytes());
        assert!(map_window(&wrong).is_err(), "another length");
    }

    #[test]
    fn a_segment_mapped_by_pid_and_fd_shares_its_bytes() {
        let seg = Segment::create("rcomm-window-test", 8192).unwrap();
        let peer = map_peer_segment(std::process::id(), seg.fd().as_raw_fd(), 8192).unwrap();
        // SAFETY: both mappings are 8192 bytes long and only this thread touches them.
        unsafe {
            *seg.as_ptr().add(100) = 42;
            assert_eq!(*peer.as_ptr().add(100), 42);
        }
        assert_ne!(seg.as_ptr(), peer.as_ptr());
    }

    #[test]
    fn wrong_length_or_a_non_segment_is_refused() {
        let seg = Segment::create("rcomm-window-test", 4096).unwrap();
        let fd = seg.fd().as_raw_fd();
        assert!(map_peer_segment(std::process::id(), fd, 8192).is_err());
        // Descriptor 0 is stdin (a pipe, tty or /dev/null), never a sealed memfd.
        assert!(map_peer_segment(std::process::id(), 0, 4096).is_err());
        assert!(map_peer_segment(std::process::id(), 99_999, 4096).is_err());
    }

    #[test]
    fn the_proc_fallback_works_on_its_own() {
        let seg = Segment::create("rcomm-window-test", 4096).unwrap();
        let f = proc_open(std::process::id(), seg.fd().as_raw_fd()).unwrap();
        assert_eq!(Segment::from_fd(f).unwrap().len(), 4096);
    }
}
