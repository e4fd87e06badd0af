//! The hub: a thread of the process that called `ncclGetUniqueId`, listening on an abstract
//! Unix socket named in the id. Every rank connects once; the hub matches their joins, folds
//! their contributions to collectives in rank order (so every run gives the same bits),
//! forwards point-to-point bytes, and tells the survivors when a rank's connection closes
//! while it still belonged to a communicator. One reader thread per connection; the state is
//! one lock. It ends when every rank that joined has closed its connection.

use crate::abi::{self, Fail};
use crate::live::{self, Count};
use crate::wire::{self, Kind, Msg, OpHdr};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The id of the first communicator (children get the next ones).
pub const FIRST_COMM: u64 = 1;

struct Hub {
    name: String,
    st: Mutex<State>,
}

struct HConn {
    w: Arc<UnixStream>,
    rank: Option<u32>,
    pid: u32,
}

/// One rank's part of an operation: its arguments and bytes.
type Part = (OpHdr, Vec<u8>);

struct HComm {
    /// Communicator rank → first communicator's rank.
    members: Vec<u32>,
    left: Vec<bool>,
    failed: bool,
    /// Contributions per sequence number, by communicator rank.
    pending: HashMap<u64, Vec<Option<Part>>>,
}

#[derive(Default)]
struct State {
    nranks: u32,
    /// First communicator's rank → connection.
    ranks: Vec<Option<u64>>,
    joined: u32,
    complete: bool,
    /// No more connections are accepted (complete, or every joined rank went first).
    closed: bool,
    conns: HashMap<u64, HConn>,
    next_conn: u64,
    comms: HashMap<u64, HComm>,
    next_comm: u64,
}

fn lock(h: &Hub) -> std::sync::MutexGuard<'_, State> {
    h.st.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A fresh socket name: the pid, a counter and randomness, so two ids never meet.
fn fresh_name() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let r = std::collections::hash_map::RandomState::new().hash_one((n, std::process::id()));
    format!("rcomm-nccl-standin.{}.{n}.{r:016x}", std::process::id())
}

/// The socket address of a hub name.
pub fn address(name: &str) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(name.as_bytes())
}

/// Starts a hub; its socket name.
pub fn start() -> io::Result<String> {
    let name = fresh_name();
    let listener = UnixListener::bind_addr(&address(&name)?)?;
    let hub = Arc::new(Hub {
        name: name.clone(),
        st: Mutex::new(State {
            next_comm: FIRST_COMM,
            ..State::default()
        }),
    });
    let count = Count::new(&live::HUB_THREADS);
    std::thread::Builder::new()
        .name("nccl-standin-hub".into())
        .spawn(move || {
            let _count = count;
            accept_loop(&hub, &listener);
        })?;
    Ok(name)
}

fn accept_loop(hub: &Arc<Hub>, listener: &UnixListener) {
    loop {
        let s = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Out of descriptors and the like: the ranks still to come get no hub; those
            // joined keep theirs.
            Err(_) => return,
        };
        let mut st = lock(hub);
        if st.closed {
            return;
        }
        let Ok(r) = s.try_clone() else { continue };
        let id = st.next_conn;
        st.next_conn += 1;
        st.conns.insert(
            id,
            HConn {
                w: Arc::new(s),
                rank: None,
                pid: 0,
            },
        );
        drop(st);
        let h = hub.clone();
        let count = Count::new(&live::HUB_THREADS);
        let spawned = std::thread::Builder::new()
            .name("nccl-standin-hub-conn".into())
            .spawn(move || {
                let _count = count;
                while let Ok(Some(m)) = wire::recv(&r) {
                    handle(&h, id, m);
                }
                closed(&h, id);
            });
        if spawned.is_err() {
            closed(hub, id);
        }
    }
}

/// Wakes the acceptor, blocked in `accept`, to see that it is done.
fn wake_acceptor(name: &str) {
    if let Ok(a) = address(name) {
        let _ = UnixStream::connect_addr(&a);
    }
}

fn put(c: &HConn, m: &Msg) {
    // A failed write is a closed connection, which its reader reports.
    let _ = wire::send(&c.w, m);
}

fn handle(hub: &Hub, conn: u64, m: Msg) {
    let mut st = lock(hub);
    let st = &mut *st;
    match m {
        Msg::Join { nranks, rank, pid } => join(hub, st, conn, nranks, rank, pid),
        Msg::Op {
            comm,
            seq,
            hdr,
            data,
        } => contribute(st, conn, comm, seq, hdr, data),
        Msg::P2p { comm, dst, data } => {
            let Some((c, src)) = comm_rank(st, conn, comm) else {
                return;
            };
            let Some(&to) = st.comms[&c].members.get(dst as usize) else {
                return;
            };
            if let Some(k) = st.ranks[to as usize].and_then(|k| st.conns.get(&k)) {
                put(k, &Msg::Deliver { comm, src, data });
            }
        }
        Msg::Leave { comm } => {
            let Some((c, r)) = comm_rank(st, conn, comm) else {
                return;
            };
            let hc = st.comms.get_mut(&c).unwrap();
            hc.left[r as usize] = true;
            if hc.left.iter().all(|&l| l) && hc.pending.is_empty() {
                st.comms.remove(&c);
            }
        }
        // Messages only the hub sends: a confused peer, ignored.
        _ => {}
    }
}

/// `comm` and this connection's rank in it.
fn comm_rank(st: &State, conn: u64, comm: u64) -> Option<(u64, u32)> {
    let root = st.conns.get(&conn)?.rank?;
    let hc = st.comms.get(&comm)?;
    let r = hc.members.iter().position(|&m| m == root)?;
    Some((comm, r as u32))
}

fn join(hub: &Hub, st: &mut State, conn: u64, nranks: u32, rank: u32, pid: u32) {
    let refuse = |st: &State, text: String| {
        if let Some(c) = st.conns.get(&conn) {
            put(c, &Msg::JoinFailed { text });
        }
    };
    if st.complete || st.conns[&conn].rank.is_some() {
        return refuse(st, "every rank of this unique id has already joined".into());
    }
    if st.nranks == 0 {
        if nranks == 0 {
            return refuse(st, "nranks 0".into());
        }
        st.nranks = nranks;
        st.ranks = vec![None; nranks as usize];
    }
    if nranks != st.nranks {
        return refuse(
            st,
            format!(
                "rank {rank} says nranks {nranks}, but the ranks before it said {}",
                st.nranks
            ),
        );
    }
    if rank >= nranks {
        return refuse(st, format!("rank {rank} of {nranks} ranks"));
    }
    if st.ranks[rank as usize].is_some() {
        return refuse(st, format!("rank {rank} of {nranks} joined twice"));
    }
    st.ranks[rank as usize] = Some(conn);
    let c = st.conns.get_mut(&conn).unwrap();
    c.rank = Some(rank);
    c.pid = pid;
    st.joined += 1;
    if st.joined < st.nranks {
        return;
    }
    st.complete = true;
    st.closed = true;
    let id = st.next_comm;
    st.next_comm += 1;
    st.comms.insert(
        id,
        HComm {
            members: (0..nranks).collect(),
            left: vec![false; nranks as usize],
            failed: false,
            pending: HashMap::new(),
        },
    );
    let me = std::process::id();
    let hub_rank = (0..nranks)
        .find(|&r| st.conns[&st.ranks[r as usize].unwrap()].pid == me)
        .map_or(-1, |r| r as i32);
    for r in 0..nranks {
        put(
            &st.conns[&st.ranks[r as usize].unwrap()],
            &Msg::Joined { comm: id, hub_rank },
        );
    }
    wake_acceptor(&hub.name);
}

fn fail_comm(st: &mut State, comm: u64, text: &str, except: Option<u32>) {
    let Some(hc) = st.comms.get_mut(&comm) else {
        return;
    };
    hc.failed = true;
    hc.pending.clear();
    for (r, &root) in hc.members.iter().enumerate() {
        if Some(r as u32) == except || hc.left[r] {
            continue;
        }
        if let Some(k) = st.ranks[root as usize].and_then(|k| st.conns.get(&k)) {
            put(
                k,
                &Msg::CommError {
                    comm,
                    text: text.to_string(),
                },
            );
        }
    }
}

fn contribute(st: &mut State, conn: u64, comm: u64, seq: u64, hdr: OpHdr, data: Vec<u8>) {
    let Some((c, r)) = comm_rank(st, conn, comm) else {
        return;
    };
    let hc = st.comms.get_mut(&c).unwrap();
    if hc.failed {
        return;
    }
    let n = hc.members.len();
    let slot = hc.pending.entry(seq).or_insert_with(|| vec![None; n]);
    slot[r as usize] = Some((hdr, data));
    if slot.iter().any(Option::is_none) {
        return;
    }
    let parts: Vec<Part> = hc
        .pending
        .remove(&seq)
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect();
    if let Some(text) = mismatch(comm, seq, &parts) {
        return fail_comm(st, comm, &text, None);
    }
    let out = if parts[0].0.kind == Kind::Split {
        split(st, comm, &parts).into_iter().collect()
    } else {
        match compute(&parts) {
            Ok(v) => v
                .into_iter()
                .map(|data| Msg::Done { comm, seq, data })
                .collect::<Vec<_>>(),
            Err(f) => {
                return fail_comm(
                    st,
                    comm,
                    &format!("{} #{seq}: {}", parts[0].0.kind.name(), f.text),
                    None,
                );
            }
        }
    };
    let members = st.comms[&comm].members.clone();
    let mut out: Vec<(Msg, u32)> = out.into_iter().zip(members).collect();
    // Ranks of other processes first: once their results are queued on their sockets, this
    // process's ranks may go on to die (an injected fault) without taking those results
    // with them.
    let me = std::process::id();
    out.sort_by_key(|(_, root)| {
        st.ranks[*root as usize]
            .and_then(|k| st.conns.get(&k))
            .is_some_and(|c| c.pid == me)
    });
    for (m, root) in out {
        let m = match m {
            Msg::Split {
                child,
                rank,
                members,
                ..
            } => Msg::Split {
                comm,
                seq,
                child,
                rank,
                members,
            },
            m => m,
        };
        if let Some(k) = st.ranks[root as usize].and_then(|k| st.conns.get(&k)) {
            put(k, &m);
        }
    }
}

/// The first argument in which a rank differs from rank 0, in words.
fn mismatch(comm: u64, seq: u64, parts: &[Part]) -> Option<String> {
    let a = &parts[0].0;
    for (r, (b, _)) in parts.iter().enumerate().skip(1) {
        let diff = if a.kind != b.kind {
            Some((
                "operation",
                a.kind.name().to_string(),
                b.kind.name().to_string(),
            ))
        } else if a.kind == Kind::Split {
            None
        } else if a.count != b.count {
            Some(("count", a.count.to_string(), b.count.to_string()))
        } else if a.dtype != b.dtype {
            Some(("datatype", a.dtype.to_string(), b.dtype.to_string()))
        } else if a.op != b.op && !matches!(a.kind, Kind::Broadcast | Kind::AllGather) {
            Some(("reduction op", a.op.to_string(), b.op.to_string()))
        } else if a.root != b.root {
            Some(("root", a.root.to_string(), b.root.to_string()))
        } else {
            None
        };
        if let Some((what, x, y)) = diff {
            return Some(format!(
                "{} #{seq} of communicator {comm}: {what} mismatch: rank 0 gave {x}, rank {r} \
                 gave {y}",
                a.kind.name()
            ));
        }
    }
    None
}

/// Each rank's result, by communicator rank.
fn compute(parts: &[Part]) -> Result<Vec<Vec<u8>>, Fail> {
    let h = parts[0].0;
    let n = parts.len();
    let dtype = abi::dtype(h.dtype)?;
    let fold = || -> Result<Vec<u8>, Fail> {
        let op = abi::red_op(h.op)?;
        let mut acc = parts[0].1.clone();
        for (_, d) in &parts[1..] {
            rcomm_kernels::reduce_into(op, dtype, &mut acc, d)
                .map_err(|e| Fail::internal(e.to_string()))?;
        }
        if op == rcomm_kernels::Op::Avg {
            rcomm_kernels::finalize_avg(dtype, &mut acc, n)
                .map_err(|e| Fail::internal(e.to_string()))?;
        }
        Ok(acc)
    };
    let root = h.root as usize;
    Ok(match h.kind {
        Kind::AllReduce => vec![fold()?; n],
        Kind::Reduce => {
            let acc = fold()?;
            (0..n)
                .map(|r| if r == root { acc.clone() } else { Vec::new() })
                .collect()
        }
        Kind::Broadcast => (0..n)
            .map(|r| {
                if r == root {
                    Vec::new()
                } else {
                    parts[root].1.clone()
                }
            })
            .collect(),
        Kind::AllGather => vec![parts.iter().flat_map(|(_, d)| d.iter().copied()).collect(); n],
        Kind::ReduceScatter => {
            let acc = fold()?;
            let block = acc.len() / n;
            acc.chunks(block.max(1))
                .take(n)
                .map(<[u8]>::to_vec)
                .chain(std::iter::repeat_with(Vec::new))
                .take(n)
                .collect()
        }
        Kind::Split => unreachable!("splits are not computed here"),
    })
}

/// The split's answer for each rank of `comm`: new communicators by color, ranks ordered by
/// key, then by rank in `comm`.
fn split(st: &mut State, comm: u64, parts: &[Part]) -> Vec<Msg> {
    let members = st.comms[&comm].members.clone();
    let mut colors: Vec<i32> = parts
        .iter()
        .map(|(h, _)| h.color)
        .filter(|&c| c != abi::SPLIT_NOCOLOR)
        .collect();
    colors.sort_unstable();
    colors.dedup();
    let mut out: Vec<Msg> = (0..parts.len())
        .map(|_| Msg::Split {
            comm,
            seq: 0,
            child: 0,
            rank: 0,
            members: Vec::new(),
        })
        .collect();
    for color in colors {
        let mut mine: Vec<usize> = (0..parts.len())
            .filter(|&r| parts[r].0.color == color)
            .collect();
        mine.sort_by_key(|&r| (parts[r].0.key, r));
        let child = st.next_comm;
        st.next_comm += 1;
        let roots: Vec<u32> = mine.iter().map(|&r| members[r]).collect();
        st.comms.insert(
            child,
            HComm {
                members: roots.clone(),
                left: vec![false; roots.len()],
                failed: false,
                pending: HashMap::new(),
            },
        );
        for (new, &r) in mine.iter().enumerate() {
            out[r] = Msg::Split {
                comm,
                seq: 0,
                child,
                rank: new as u32,
                members: roots.clone(),
            };
        }
    }
    out
}

/// A connection closed: if its rank still belonged to communicators, they failed.
fn closed(hub: &Hub, conn: u64) {
    let mut st = lock(hub);
    let st = &mut *st;
    let Some(c) = st.conns.remove(&conn) else {
        return;
    };
    if let Some(root) = c.rank {
        if st.complete {
            let mut hit: Vec<(u64, u32)> = st
                .comms
                .iter()
                .filter(|(_, hc)| !hc.failed)
                .filter_map(|(&id, hc)| {
                    let r = hc.members.iter().position(|&m| m == root)?;
                    (!hc.left[r]).then_some((id, r as u32))
                })
                .collect();
            hit.sort_unstable();
            for (id, r) in hit {
                let text = format!("rank {r} of communicator {id} disconnected");
                fail_comm(st, id, &text, Some(r));
            }
        } else {
            // Before every rank joined: the slot is free for a rank that tries again.
            st.ranks[root as usize] = None;
            st.joined -= 1;
        }
    }
    if st.conns.is_empty() && (st.complete || st.joined == 0) && !st.closed {
        st.closed = true;
        wake_acceptor(&hub.name);
    }
}
