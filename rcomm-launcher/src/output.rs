//! Forwarding the ranks' output and the launcher's stdin, and the launcher's own lines on stderr.
//!
//! One thread per rank stream: ranks are few, and a thread blocked on one rank's pipe cannot
//! delay another's. Lines are written whole under the destination's lock, so lines of
//! different ranks never interleave mid-line. Write errors on the destination (a closed pipe
//! after `rcomm-run … | head`) do not stop the reading: a rank must never block on a full pipe
//! because nobody drains it.

use std::io::{self, Read, Write};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

/// One line of the launcher's own on stderr. Never panics (unlike `eprintln!`): a closed
/// stderr must not bring the launcher down while ranks run.
pub(crate) fn say(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "rcomm-run: {msg}");
}

/// Which of the launcher's streams a rank stream goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// The launcher's stdout.
    Stdout,
    /// The launcher's stderr.
    Stderr,
}

/// A line longer than this without a newline is written out in pieces (each its own prefixed
/// line), so a rank printing without newlines cannot grow the launcher's memory without bound.
const MAX_LINE: usize = 1 << 20;

/// Writes `bytes` to the launcher's `dest` stream, whole, ignoring errors.
pub fn emit(dest: Dest, bytes: &[u8]) {
    // Errors are ignored on purpose (see the module comment).
    match dest {
        Dest::Stdout => {
            let mut out = io::stdout().lock();
            let _ = out.write_all(bytes);
            let _ = out.flush();
        }
        Dest::Stderr => {
            let _ = io::stderr().lock().write_all(bytes);
        }
    }
}

/// Splits a byte stream into `[rank] `-prefixed whole lines (or, raw, whole lines as they are).
#[derive(Debug)]
pub struct LinePrefixer {
    prefix: Vec<u8>,
    pending: Vec<u8>,
    /// No prefix, and no newline added: the bytes pass unchanged, only held back until their
    /// line is complete.
    raw: bool,
}

impl LinePrefixer {
    /// A prefixer for `rank`.
    pub fn new(rank: u32) -> Self {
        Self {
            prefix: format!("[{rank}] ").into_bytes(),
            pending: Vec::new(),
            raw: false,
        }
    }

    /// Whole lines, unprefixed: a rank's write that ends mid-line (a formatted message written
    /// in pieces) is held until its newline, so the launcher's own messages and other ranks'
    /// lines cannot land inside it.
    pub fn raw() -> Self {
        Self {
            prefix: Vec::new(),
            pending: Vec::new(),
            raw: true,
        }
    }

    /// Takes `data`; returns the complete lines it finishes, prefixed (empty if none).
    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(data);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(i) = self.pending[start..].iter().position(|&b| b == b'\n') {
            out.extend_from_slice(&self.prefix);
            out.extend_from_slice(&self.pending[start..=start + i]);
            start += i + 1;
        }
        if self.pending.len() - start >= MAX_LINE {
            out.extend_from_slice(&self.prefix);
            out.extend_from_slice(&self.pending[start..]);
            if !self.raw {
                out.push(b'\n');
            }
            start = self.pending.len();
        }
        self.pending.drain(..start);
        out
    }

    /// At end-of-file: the final partial line, prefixed and ended with a newline.
    pub fn finish(&mut self) -> Vec<u8> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        let mut out = self.prefix.clone();
        out.append(&mut self.pending);
        if !self.raw {
            out.push(b'\n');
        }
        out
    }
}

/// Starts a thread copying `src` to `sink` (whole lines, prefixed unless `raw`); it sends on
/// `done` at EOF. The sink is [`emit`] on the launcher, the control channel on a daemon.
pub fn forward(
    rank: u32,
    mut src: impl Read + Send + 'static,
    sink: impl Fn(&[u8]) + Send + 'static,
    raw: bool,
    done: Sender<()>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("rcomm-out-{rank}"))
        .spawn(move || {
            let mut lines = if raw {
                LinePrefixer::raw()
            } else {
                LinePrefixer::new(rank)
            };
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match src.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                let out = lines.push(&buf[..n]);
                if !out.is_empty() {
                    sink(&out);
                }
            }
            let tail = lines.finish();
            if !tail.is_empty() {
                sink(&tail);
            }
            let _ = done.send(());
        })
}

/// Starts a thread copying the launcher's stdin to rank 0; end-of-file (or rank 0 closing its
/// end) closes rank 0's stdin. Not joined: it may sit in `read` on a terminal until the
/// launcher exits.
pub fn forward_stdin(mut to: impl Write + Send + 'static) -> io::Result<()> {
    std::thread::Builder::new()
        .name("rcomm-stdin".into())
        .spawn(move || {
            let mut input = io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match input.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                if to.write_all(&buf[..n]).and_then(|()| to.flush()).is_err() {
                    break;
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_prefixed_whole_and_the_tail_is_flushed() {
        let mut p = LinePrefixer::new(3);
        assert_eq!(p.push(b"hel"), b"");
        assert_eq!(p.push(b"lo\nwor"), b"[3] hello\n");
        assert_eq!(p.push(b"ld\n\nx"), b"[3] world\n[3] \n");
        assert_eq!(p.finish(), b"[3] x\n");
        assert_eq!(p.finish(), b"");
    }

    #[test]
    fn raw_lines_pass_unchanged_but_whole() {
        let mut p = LinePrefixer::raw();
        assert_eq!(p.push(b"check failed: "), b"");
        assert_eq!(p.push(b"bibw\nnext"), b"check failed: bibw\n");
        assert_eq!(p.finish(), b"next");
        assert_eq!(p.finish(), b"");
    }

    #[test]
    fn endless_lines_are_cut() {
        let mut p = LinePrefixer::new(0);
        let big = vec![b'a'; MAX_LINE + 5];
        let out = p.push(&big);
        assert_eq!(out.len(), 4 + MAX_LINE + 5 + 1);
        assert!(p.finish().is_empty());
    }
}
