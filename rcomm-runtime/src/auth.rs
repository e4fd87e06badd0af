//! Job-secret authentication for every connection rcomm accepts or opens.
//!
//! Mutual challenge–response with HMAC-SHA-256, three frames:
//! server → `CHALLENGE(ns)`; client → `RESPONSE(id, nc, H(k, "c" ‖ purpose ‖ id ‖ ns ‖ nc))`;
//! server → `PROOF(H(k, "s" ‖ purpose ‖ id ‖ nc ‖ ns))`. Both nonces are fresh, so neither side
//! can replay a recorded exchange; the purpose string (e.g. `"kvs"`, `"local"`) binds a proof
//! to one kind of listener. The secret itself never crosses the wire. The whole exchange has a
//! deadline ([`HANDSHAKE_TIMEOUT`]) so a silent client cannot hold a listener — the whole
//! exchange, not each read: every read waits only for the time left ([`read_frame_until`]), so a
//! client that trickles one byte a second is dropped as fast as a silent one. Handshake frames
//! are limited to [`MAX_HANDSHAKE_FRAME`] bytes, checked before anything is allocated.
//! This authenticates peers; it does not encrypt data.

use crate::wire::{self, AuthResponse, FrameIoError, MAC_LEN, NONCE_LEN, auth_kind};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Deadline for the whole handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(1);
/// Bytes in a job secret.
pub const SECRET_LEN: usize = 32;
/// Largest payload of a handshake frame (the response is 68 bytes).
pub const MAX_HANDSHAKE_FRAME: usize = 256;

/// The job secret shared by the launcher and every rank of one job.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; SECRET_LEN]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The peer's MAC is wrong: it does not know this job's secret.
    #[error("peer failed authentication: it does not hold this job's secret")]
    BadProof,
    /// The peer sent something other than the expected handshake frame.
    #[error("unexpected frame kind {0} during the handshake")]
    Unexpected(u8),
    /// The socket failed, timed out, or carried bytes that are not a frame.
    #[error("handshake failed: {0}")]
    Frame(#[from] FrameIoError),
    /// The secret could not be read or made.
    #[error("job secret: {0}")]
    Secret(String),
}

impl AuthError {
    /// True when the handshake failed because the deadline passed.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Frame(FrameIoError::Io(e)) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

impl Secret {
    /// A fresh random secret.
    pub fn random() -> Result<Self, AuthError> {
        let mut b = [0u8; SECRET_LEN];
        crate::os::random_bytes(&mut b)
            .map_err(|e| AuthError::Secret(format!("getrandom: {e}")))?;
        Ok(Self(b))
    }

    /// A secret from raw bytes.
    pub fn from_bytes(b: [u8; SECRET_LEN]) -> Self {
        Self(b)
    }

    /// The raw bytes (to hand to a child through a descriptor or a pipe; never to argv).
    pub fn as_bytes(&self) -> &[u8; SECRET_LEN] {
        &self.0
    }

    /// Reads the secret from an inherited descriptor (`RCOMM_SECRET_FD`), then marks the
    /// descriptor close-on-exec so programs the rank starts do not inherit it.
    pub fn from_fd(fd: RawFd) -> Result<Self, AuthError> {
        let mut b = [0u8; SECRET_LEN];
        let n = crate::os::pread_all(fd, &mut b).map_err(|e| {
            AuthError::Secret(format!(
                "reading RCOMM_SECRET_FD={fd}: {e} (was the descriptor closed by a wrapper script?)"
            ))
        })?;
        if n != SECRET_LEN {
            return Err(AuthError::Secret(format!(
                "RCOMM_SECRET_FD={fd} held {n} bytes, expected {SECRET_LEN}"
            )));
        }
        let _ = crate::os::set_cloexec(fd);
        Ok(Self(b))
    }

    fn mac(
        &self,
        side: &[u8],
        purpose: &str,
        id: u32,
        first: &[u8],
        second: &[u8],
    ) -> [u8; MAC_LEN] {
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(side);
        m.update(purpose.as_bytes());
        m.update(&[0]);
        m.update(&id.to_le_bytes());
        m.update(first);
        m.update(second);
        m.finalize().into_bytes().into()
    }

    fn verify(
        &self,
        mac: &[u8],
        side: &[u8],
        purpose: &str,
        id: u32,
        first: &[u8],
        second: &[u8],
    ) -> bool {
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(side);
        m.update(purpose.as_bytes());
        m.update(&[0]);
        m.update(&id.to_le_bytes());
        m.update(first);
        m.update(second);
        m.verify_slice(mac).is_ok() // constant time
    }
}

/// A stream whose read and write deadlines can be set (TCP and Unix sockets).
pub trait Deadline: Read + Write {
    /// Sets both deadlines; `None` blocks forever.
    fn set_deadline(&self, d: Option<Duration>) -> io::Result<()>;
}
impl Deadline for TcpStream {
    fn set_deadline(&self, d: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(d)?;
        self.set_write_timeout(d)
    }
}
impl Deadline for UnixStream {
    fn set_deadline(&self, d: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(d)?;
        self.set_write_timeout(d)
    }
}

fn nonce() -> Result<[u8; NONCE_LEN], AuthError> {
    let mut n = [0u8; NONCE_LEN];
    crate::os::random_bytes(&mut n).map_err(|e| AuthError::Secret(format!("getrandom: {e}")))?;
    Ok(n)
}

/// A reader that fails with `TimedOut` once its deadline has passed, however the peer paces
/// its bytes: each read waits at most the time left.
struct Until<'a, S: Deadline> {
    s: &'a mut S,
    deadline: Instant,
}

impl<S: Deadline> Read for Until<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.s.set_deadline(Some(left))?;
        self.s.read(buf)
    }
}

/// Reads one frame of at most `limit` payload bytes, failing once `deadline` has passed — also
/// when the peer keeps sending a byte now and then (a per-read timeout alone would let it hold
/// the reader for as many timeouts as the frame has bytes). Leaves the stream's timeouts at the
/// time that was left.
pub fn read_frame_until<S: Deadline>(
    s: &mut S,
    limit: usize,
    deadline: Instant,
) -> Result<(u8, Vec<u8>), FrameIoError> {
    wire::read_frame(&mut Until { s, deadline }, limit)
}

fn expect<S: Deadline>(s: &mut S, kind: u8, deadline: Instant) -> Result<Vec<u8>, AuthError> {
    let (k, p) = read_frame_until(s, MAX_HANDSHAKE_FRAME, deadline)?;
    if k != kind {
        return Err(AuthError::Unexpected(k));
    }
    Ok(p)
}

/// Runs the server side; returns the client's authenticated id. Deadlines are restored to
/// blocking afterwards. Whatever fails, the caller should drop the connection.
pub fn accept<S: Deadline>(s: &mut S, secret: &Secret, purpose: &str) -> Result<u32, AuthError> {
    s.set_deadline(Some(HANDSHAKE_TIMEOUT))
        .map_err(FrameIoError::from)?;
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let ns = nonce()?;
    wire::write_frame(s, auth_kind::CHALLENGE, &ns)?;
    let resp = AuthResponse::decode(&expect(s, auth_kind::RESPONSE, deadline)?)
        .map_err(FrameIoError::from)?;
    if !secret.verify(&resp.mac, b"c", purpose, resp.client_id, &ns, &resp.nonce) {
        return Err(AuthError::BadProof);
    }
    let proof = secret.mac(b"s", purpose, resp.client_id, &resp.nonce, &ns);
    wire::write_frame(s, auth_kind::PROOF, &proof)?;
    s.set_deadline(None).map_err(FrameIoError::from)?;
    Ok(resp.client_id)
}

/// Runs the client side as `client_id`; fails unless the server proves it holds the secret.
pub fn connect<S: Deadline>(
    s: &mut S,
    secret: &Secret,
    purpose: &str,
    client_id: u32,
) -> Result<(), AuthError> {
    s.set_deadline(Some(HANDSHAKE_TIMEOUT))
        .map_err(FrameIoError::from)?;
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let ch = expect(s, auth_kind::CHALLENGE, deadline)?;
    let ns: [u8; NONCE_LEN] = ch
        .try_into()
        .map_err(|_| AuthError::Unexpected(auth_kind::CHALLENGE))?;
    let nc = nonce()?;
    let mac = secret.mac(b"c", purpose, client_id, &ns, &nc);
    wire::write_frame(
        s,
        auth_kind::RESPONSE,
        &AuthResponse {
            client_id,
            nonce: nc,
            mac,
        }
        .encode(),
    )?;
    let proof = expect(s, auth_kind::PROOF, deadline)?;
    if !secret.verify(&proof, b"s", purpose, client_id, &nc, &ns) {
        return Err(AuthError::BadProof);
    }
    s.set_deadline(None).map_err(FrameIoError::from)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::thread;
    use std::time::Instant;

    fn pair(
        server_secret: Secret,
        client_secret: Secret,
        ps: &'static str,
        pc: &'static str,
    ) -> (Result<u32, AuthError>, Result<(), AuthError>) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = thread::spawn(move || accept(&mut a, &server_secret, ps));
        let c = connect(&mut b, &client_secret, pc, 7);
        drop(b);
        (t.join().unwrap(), c)
    }

    #[test]
    fn same_secret_authenticates_both_ways() {
        let s = Secret::random().unwrap();
        let (srv, cli) = pair(s.clone(), s, "kvs", "kvs");
        assert_eq!(srv.unwrap(), 7);
        cli.unwrap();
    }

    #[test]
    fn wrong_secret_or_purpose_is_refused() {
        let (srv, cli) = pair(
            Secret::random().unwrap(),
            Secret::random().unwrap(),
            "kvs",
            "kvs",
        );
        assert!(matches!(srv, Err(AuthError::BadProof)));
        assert!(cli.is_err());
        let s = Secret::random().unwrap();
        let (srv, _) = pair(s.clone(), s, "kvs", "local");
        assert!(matches!(srv, Err(AuthError::BadProof)));
    }

    #[test]
    fn silent_client_times_out_within_the_deadline() {
        let (mut a, _b) = UnixStream::pair().unwrap();
        let t0 = Instant::now();
        let e = accept(&mut a, &Secret::random().unwrap(), "kvs").unwrap_err();
        let took = t0.elapsed();
        assert!(e.is_timeout(), "{e}");
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(3),
            "{took:?}"
        );
    }

    #[test]
    fn a_client_trickling_bytes_is_dropped_at_the_handshake_deadline() {
        // One byte every 300 ms: each read returns within its own timeout, but the whole
        // exchange may not outlast the deadline.
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let trickle = thread::spawn(move || {
            let f = wire::encode_frame(auth_kind::RESPONSE, &[0u8; 68]);
            for byte in f {
                if b.write_all(&[byte]).is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(300));
            }
        });
        let t0 = Instant::now();
        let e = accept(&mut a, &Secret::random().unwrap(), "kvs").unwrap_err();
        let took = t0.elapsed();
        assert!(e.is_timeout(), "{e}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        drop(a);
        trickle.join().unwrap();
    }

    #[test]
    fn garbage_is_refused_without_waiting() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        b.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let t0 = Instant::now();
        assert!(accept(&mut a, &Secret::random().unwrap(), "kvs").is_err());
        assert!(t0.elapsed() < Duration::from_millis(500));
    }

    #[test]
    fn secret_round_trips_through_a_descriptor() {
        use std::os::fd::AsRawFd;
        let s = Secret::random().unwrap();
        let fd = crate::os::sealed_memfd("rcomm-secret", s.as_bytes(), false).unwrap();
        assert_eq!(Secret::from_fd(fd.as_raw_fd()).unwrap(), s);
        assert_eq!(Secret::from_fd(fd.as_raw_fd()).unwrap(), s, "re-readable");
        assert!(Secret::from_fd(-1).is_err());
    }
}
