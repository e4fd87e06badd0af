//! Handing the file descriptor of a shareable allocation (VMM memory, a pool made with POSIX
//! file-descriptor handles, the stand-in's memfds) to a peer process on this node.
//!
//! A descriptor cannot travel in a key: it must pass through a Unix socket (`SCM_RIGHTS`). The
//! local channel's listener is gone once the node's ranks are connected, and its connections
//! belong to the shared-memory lane's progress; so an exporting process runs a small responder
//! of its own on the local channel, `@rcomm.<job_id>.gpufd.<pid>`, started with its first
//! descriptor export. It admits what the local channel admits (same uid, then the job-secret
//! handshake) and answers one request per connection: the buffer id of an allocation it
//! exported, answered with that allocation's descriptor, or a refusal naming why (freed). The
//! importer asks once per (peer, allocation): the import caches keep the mapping.
//!
//! The job (its id and secret) is set by the device lane when the transports listen
//! ([`set_job`]); a process of one rank never shares device memory and needs none.

use super::GpuError;
use crate::local::{LocalConn, LocalListener, socket_name};
use rcomm_runtime::auth::Secret;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A request: the buffer id (u64 LE).
const ASK: u8 = 1;
/// An answer with the descriptor attached; no payload.
const FD: u8 = 2;
/// A refusal; the payload says why.
const NO: u8 = 3;

/// How long a peer has to send its request once admitted, and an importer to get its answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
struct Job {
    id: String,
    secret: Secret,
}

static JOB: Mutex<Option<Job>> = Mutex::new(None);
/// Buffer id → the descriptor handed out for it.
/// Shared: the allocations of one pool are offered with the pool's one descriptor.
static OFFERED: Mutex<Option<HashMap<u64, Arc<OwnedFd>>>> = Mutex::new(None);
/// The responder, started once per process (the error says why it could not be).
static RESPONDER: OnceLock<Result<(), String>> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The job whose ranks may ask this process for descriptors, and whose ranks it asks. Set
/// before any descriptor is exported. A process belongs to one job: a later call with another
/// (a test process running several) changes whom it asks, but the responder, once started,
/// keeps the first job's name and secret.
pub fn set_job(job_id: &str, secret: &Secret) {
    *lock(&JOB) = Some(Job {
        id: job_id.to_string(),
        secret: secret.clone(),
    });
}

/// The job's id, once set.
pub fn job_id() -> Option<String> {
    lock(&JOB).as_ref().map(|j| j.id.clone())
}

fn job() -> Result<Job, GpuError> {
    lock(&JOB).clone().ok_or_else(|| {
        GpuError::Unreachable(
            "device memory shared by file descriptor needs the job's local channel, and this process has none (one rank, or no launcher)".into(),
        )
    })
}

fn listener_name(job_id: &str, pid: u32) -> String {
    socket_name(&format!("{job_id}.gpufd"), pid)
}

/// Offers `fd` to the job's peers as the descriptor of allocation `buffer_id`, starting the
/// responder on first use.
pub fn offer(buffer_id: u64, fd: Arc<OwnedFd>) -> Result<(), GpuError> {
    let job = job()?;
    RESPONDER
        .get_or_init(|| start(&job))
        .clone()
        .map_err(GpuError::Unreachable)?;
    lock(&OFFERED)
        .get_or_insert_with(HashMap::new)
        .insert(buffer_id, fd);
    Ok(())
}

/// Stops offering allocation `buffer_id` (it was freed, or its export dropped): peers asking
/// from now on are refused, and this process's copy of the descriptor is closed (a VMM
/// descriptor held open would keep the memory alive after the framework releases it).
pub fn withdraw(buffer_id: u64) {
    if let Some(m) = lock(&OFFERED).as_mut() {
        m.remove(&buffer_id);
    }
}

/// Withdraws every buffer id of `ids`.
pub fn withdraw_all(ids: Vec<u64>) {
    if ids.is_empty() {
        return;
    }
    if let Some(m) = lock(&OFFERED).as_mut() {
        for id in ids {
            m.remove(&id);
        }
    }
}

/// Whether allocation `buffer_id` is offered (tests).
#[cfg_attr(not(test), allow(dead_code))]
pub fn is_offered(buffer_id: u64) -> bool {
    lock(&OFFERED)
        .as_ref()
        .is_some_and(|m| m.contains_key(&buffer_id))
}

fn start(job: &Job) -> Result<(), String> {
    let pid = std::process::id();
    let l = LocalListener::bind(&format!("{}.gpufd", job.id), pid, job.secret.clone())
        .map_err(|e| format!("the device-descriptor responder could not listen: {e}"))?;
    std::thread::Builder::new()
        .name("rcomm-gpufd".into())
        .spawn(move || serve(l))
        .map_err(|e| format!("the device-descriptor responder could not start: {e}"))?;
    Ok(())
}

/// The responder: one request per admitted connection, for the life of the process. Waiting
/// for the next client has no deadline (it is the thread's whole job); each client has
/// [`ANSWER_TIMEOUT`] to ask.
fn serve(l: LocalListener) {
    loop {
        match l.accept() {
            Ok(c) => answer(&c),
            // A refused client was logged by the listener; keep serving the others, without
            // spinning should the error persist (out of descriptors).
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn answer(c: &LocalConn) {
    let Ok(m) = c.recv_until(Instant::now() + ANSWER_TIMEOUT) else {
        return;
    };
    let id = match (m.kind, <[u8; 8]>::try_from(m.payload.as_slice())) {
        (ASK, Ok(b)) => u64::from_le_bytes(b),
        _ => {
            let _ = c.send(NO, b"not a device-descriptor request", &[]);
            return;
        }
    };
    // A copy, so the table is not locked while the answer is written.
    let fd = lock(&OFFERED)
        .as_ref()
        .and_then(|m| m.get(&id))
        .map(|f| f.try_clone());
    let sent = match fd {
        Some(Ok(fd)) => c.send(FD, &[], &[fd.as_fd()]),
        Some(Err(e)) => c.send(
            NO,
            format!("duplicating the descriptor: {e}").as_bytes(),
            &[],
        ),
        None => c.send(
            NO,
            format!("allocation {id} is freed (or was never exported)").as_bytes(),
            &[],
        ),
    };
    if let Err(e) = sent {
        rcomm_runtime::rlog!(Info, "NET", "answering a device-descriptor request: {e}");
    }
}

/// Asks process `pid` of this job for the descriptor of its allocation `buffer_id`.
/// [`GpuError::Invalid`] when it refuses (the allocation is freed: the key is stale);
/// [`GpuError::Unreachable`] when it cannot be asked.
pub fn fetch(peer: u32, pid: u32, buffer_id: u64) -> Result<OwnedFd, GpuError> {
    let job = job()?;
    let unreachable = |e: String| {
        GpuError::Unreachable(format!(
            "could not get the descriptor of device allocation {buffer_id} from rank {peer} (pid {pid}): {e}"
        ))
    };
    let c = LocalConn::connect(
        &listener_name(&job.id, pid),
        std::process::id(),
        &job.secret,
    )
    .map_err(|e| unreachable(e.to_string()))?;
    c.send(ASK, &buffer_id.to_le_bytes(), &[])
        .map_err(|e| unreachable(e.to_string()))?;
    let mut m = c
        .recv_until(Instant::now() + ANSWER_TIMEOUT)
        .map_err(|e| unreachable(e.to_string()))?;
    match (m.kind, m.fds.len()) {
        (FD, 1) => Ok(m.fds.pop().expect("one descriptor")),
        (NO, _) => Err(GpuError::Invalid(format!(
            "device key of rank {peer} names a freed allocation ({})",
            String::from_utf8_lossy(&m.payload)
        ))),
        (k, n) => Err(unreachable(format!(
            "an answer of kind {k} with {n} descriptors"
        ))),
    }
}
