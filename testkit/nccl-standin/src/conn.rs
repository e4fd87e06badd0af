//! A rank's connection to its hub, shared by the communicators split from the first one: a
//! reader thread files what the hub sends into per-communicator mailboxes, and every waiter
//! of the connection sleeps on one condition variable. The connection closes (socket shut,
//! reader joined) when its last communicator lets go of it.

use crate::abi::Fail;
use crate::hub;
use crate::live::{self, Count};
use crate::wire::{self, Msg};
use std::collections::{HashMap, VecDeque};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// What a collective's result is.
#[derive(Debug)]
pub enum Reply {
    /// This rank's bytes.
    Data(Vec<u8>),
    /// A split's answer (`child` 0: no communicator for this rank).
    Split {
        child: u64,
        rank: u32,
        members: Vec<u32>,
    },
}

/// One communicator's mail.
#[derive(Default)]
pub struct Mailbox {
    pub results: HashMap<u64, Reply>,
    /// Bytes by sending communicator rank, in order.
    pub p2p: HashMap<u32, VecDeque<Vec<u8>>>,
    /// The hub said the communicator failed.
    pub error: Option<String>,
    /// `ncclCommAbort` ran on it.
    pub aborted: bool,
    /// Its ranks as ranks of the first communicator (to name the hub's rank when it dies).
    pub members: Vec<u32>,
}

/// The state the reader and the waiters share.
#[derive(Default)]
pub struct State {
    pub boxes: HashMap<u64, Mailbox>,
    /// The join's answer: the first communicator's id and the hub's rank, or the refusal.
    pub joined: Option<Result<(u64, i32), String>>,
    pub hub_rank: i32,
    /// The hub went away (not by our closing).
    pub lost: bool,
    closing: bool,
}

impl State {
    /// Why `comm` cannot go on, if it cannot: aborted, failed, or its hub gone.
    pub fn broken(&mut self, comm: u64) -> Option<Fail> {
        let hub_rank = self.hub_rank;
        let lost = self.lost;
        let b = self.boxes.entry(comm).or_default();
        if b.aborted {
            return Some(Fail::usage(format!(
                "communicator {comm} was aborted (ncclCommAbort)"
            )));
        }
        if let Some(e) = &b.error {
            return Some(Fail::remote(e.clone()));
        }
        if lost {
            let who = u32::try_from(hub_rank)
                .ok()
                .and_then(|h| b.members.iter().position(|&m| m == h));
            return Some(Fail::remote(match who {
                Some(r) => format!(
                    "rank {r} of communicator {comm} disconnected (the hub's process exited)"
                ),
                None => format!(
                    "communicator {comm}: the hub's process (no rank of this communicator) \
                     disconnected"
                ),
            }));
        }
        None
    }
}

/// The part the reader thread holds.
pub struct Shared {
    st: Mutex<State>,
    cv: Condvar,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `ready` gives a value or `stop` a failure (both tried with the lock held,
    /// `ready` first). Checked again every 200 ms as well as on every wake-up.
    pub fn wait<T>(
        &self,
        mut ready: impl FnMut(&mut State) -> Option<T>,
        mut stop: impl FnMut(&mut State) -> Option<Fail>,
    ) -> Result<T, Fail> {
        let mut st = self.lock();
        loop {
            if let Some(v) = ready(&mut st) {
                return Ok(v);
            }
            if let Some(f) = stop(&mut st) {
                return Err(f);
            }
            st = self
                .cv
                .wait_timeout(st, Duration::from_millis(200))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Wakes every waiter (after a change made under the lock).
    pub fn notify(&self) {
        self.cv.notify_all();
    }
}

/// A connection to a hub.
pub struct Conn {
    w: Mutex<UnixStream>,
    pub sh: Arc<Shared>,
    reader: Mutex<Option<JoinHandle<()>>>,
    _count: Count,
}

impl Conn {
    /// Connects to the hub named `name`.
    pub fn connect(name: &str) -> Result<Arc<Conn>, Fail> {
        let unreachable = |e: std::io::Error| {
            Fail::system(format!(
                "cannot reach the hub of this unique id ({e}): is the process that called \
                 ncclGetUniqueId still alive?"
            ))
        };
        let s = UnixStream::connect_addr(&hub::address(name).map_err(unreachable)?)
            .map_err(unreachable)?;
        let r = s.try_clone().map_err(unreachable)?;
        let sh = Arc::new(Shared {
            st: Mutex::new(State {
                hub_rank: -1,
                ..State::default()
            }),
            cv: Condvar::new(),
        });
        let sh2 = sh.clone();
        let count = Count::new(&live::OTHER_THREADS);
        let reader = std::thread::Builder::new()
            .name("nccl-standin-conn".into())
            .spawn(move || {
                let _count = count;
                read_loop(&sh2, &r);
            })
            .map_err(|e| Fail::system(format!("cannot start a thread: {e}")))?;
        Ok(Arc::new(Conn {
            w: Mutex::new(s),
            sh,
            reader: Mutex::new(Some(reader)),
            _count: Count::new(&live::CONNS),
        }))
    }

    /// Sends `m` to the hub.
    pub fn send(&self, m: &Msg) -> Result<(), Fail> {
        let w = self.w.lock().unwrap_or_else(PoisonError::into_inner);
        wire::send(&w, m).map_err(|e| Fail::remote(format!("the hub's connection failed: {e}")))
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.sh.lock().closing = true;
        let _ = self
            .w
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .shutdown(std::net::Shutdown::Both);
        if let Some(t) = self
            .reader
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
    }
}

fn read_loop(sh: &Shared, r: &UnixStream) {
    loop {
        let m = wire::recv(r);
        let mut st = sh.lock();
        match m {
            Ok(Some(m)) => file(&mut st, m),
            _ => {
                if !st.closing {
                    st.lost = true;
                    if st.joined.is_none() {
                        st.joined = Some(Err("the hub closed the connection before every \
                                              rank joined"
                            .into()));
                    }
                }
                drop(st);
                sh.notify();
                return;
            }
        }
        drop(st);
        sh.notify();
    }
}

fn file(st: &mut State, m: Msg) {
    match m {
        Msg::Joined { comm, hub_rank } => {
            st.hub_rank = hub_rank;
            st.joined = Some(Ok((comm, hub_rank)));
        }
        Msg::JoinFailed { text } => st.joined = Some(Err(text)),
        Msg::Done { comm, seq, data } => {
            st.boxes
                .entry(comm)
                .or_default()
                .results
                .insert(seq, Reply::Data(data));
        }
        Msg::Split {
            comm,
            seq,
            child,
            rank,
            members,
        } => {
            if child != 0 {
                st.boxes.entry(child).or_default().members = members.clone();
            }
            st.boxes.entry(comm).or_default().results.insert(
                seq,
                Reply::Split {
                    child,
                    rank,
                    members,
                },
            );
        }
        Msg::Deliver { comm, src, data } => {
            st.boxes
                .entry(comm)
                .or_default()
                .p2p
                .entry(src)
                .or_default()
                .push_back(data);
        }
        Msg::CommError { comm, text } => {
            let b = st.boxes.entry(comm).or_default();
            b.error.get_or_insert(text);
        }
        // Messages only ranks send: ignored.
        _ => {}
    }
}
