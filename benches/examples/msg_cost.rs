//! Instructions per small message, for callgrind (`benches/scripts/msg-cost.sh`).
//!
//! Two ranks over shared memory. Per round, rank 0 sends a window of `W` 8-byte messages while
//! rank 1 sleeps, so the messages sit in rank 1's ring; then rank 1 receives them. No side ever
//! waits inside a measured function: the sender's ring has room for the whole window and the
//! receiver's messages are already there, so what callgrind counts in these functions is the
//! work per message, not spinning. Each pattern is one `#[inline(never)]` function that the
//! script tells callgrind to count (`--toggle-collect`; no other function's name may contain a
//! counted one's, since entering any match toggles counting):
//!
//! - `send_window` / `recv_window`: blocking `send` / `recv`;
//! - `isend_window` / `irecv_window`: a scope's `isend` / `irecv`, then `wait` on each;
//! - `post_window` + `wait_window`: the window bandwidth test's receive, posted before the
//!   messages come (they land while the receiver sleeps, and the first wait takes them all).
//!
//! Only the API that has not changed since before P10 is used, so the same file builds at older
//! commits (the script copies it into a worktree of the revision it measures).

use std::time::Duration;

use rcomm::{Communicator, Tag};

/// Most messages per window (`MSG_COST_WINDOW` chooses fewer).
const W: usize = 64;
const ROUNDS: usize = 20;
const DATA: Tag = Tag(7);
const SYNC: Tag = Tag(8);

#[inline(never)]
fn send_window(c: &Communicator, bufs: &[[u8; 8]]) {
    for b in bufs {
        c.send(b, 1, DATA).expect("send");
    }
}

#[inline(never)]
fn posted_send_window(c: &Communicator, bufs: &[[u8; 8]]) {
    for b in bufs {
        c.send(b, 1, DATA).expect("send");
    }
}

#[inline(never)]
fn recv_window(c: &Communicator, bufs: &mut [[u8; 8]]) {
    for b in bufs.iter_mut() {
        c.recv(b, 0, DATA).expect("recv");
    }
}

#[inline(never)]
fn isend_window(c: &Communicator, bufs: &[[u8; 8]]) {
    c.scope(|sc| {
        let reqs: Vec<_> = bufs
            .iter()
            .map(|b| sc.isend(b, 1, DATA).expect("isend"))
            .collect();
        for r in reqs {
            r.wait().expect("wait");
        }
    });
}

#[inline(never)]
fn irecv_window(c: &Communicator, bufs: &mut [[u8; 8]]) {
    c.scope(|sc| {
        let reqs: Vec<_> = bufs
            .iter_mut()
            .map(|b| sc.irecv(b, 0, DATA).expect("irecv"))
            .collect();
        for r in reqs {
            r.wait().expect("wait");
        }
    });
}

/// The window bandwidth test's receive: the receives are posted before their messages come.
/// Posting is counted (`post_window`), then, uncounted, a round trip lets the sender start
/// and a sleep lets the window land, then the waits are counted (`wait_window`: the first
/// wait's progress pass takes every message into its posted receive).
fn posted_receive(c: &Communicator, bufs: &mut [[u8; 8]], settle: Duration) {
    c.scope(|sc| {
        let reqs = post_window(sc, bufs);
        sync(c);
        std::thread::sleep(settle);
        wait_window(reqs);
    });
}

#[inline(never)]
fn post_window<'s, 'env>(
    sc: &'s rcomm::Scope<'s, 'env>,
    bufs: &'env mut [[u8; 8]],
) -> Vec<rcomm::ScopedRequest<'s, 'env>> {
    bufs.iter_mut()
        .map(|b| sc.irecv(b, 0, DATA).expect("irecv"))
        .collect()
}

#[inline(never)]
fn wait_window(reqs: Vec<rcomm::ScopedRequest<'_, '_>>) {
    for r in reqs {
        r.wait().expect("wait");
    }
}

/// A round trip (rank 0 starts it), outside the measured functions.
fn sync(c: &Communicator) {
    let mut b = [0u8; 1];
    if c.rank() == 0 {
        c.send(&b, 1, SYNC).expect("sync");
        c.recv(&mut b, 1, SYNC).expect("sync");
    } else {
        c.recv(&mut b, 0, SYNC).expect("sync");
        c.send(&b, 0, SYNC).expect("sync");
    }
}

fn main() {
    let world = rcomm::init().expect("init");
    assert_eq!(world.size(), 2, "msg_cost runs with 2 ranks");
    // Under valgrind everything runs ~50x slower: the sleep must outlast the window's sends.
    let settle = Duration::from_millis(
        std::env::var("MSG_COST_SETTLE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(200),
    );
    let w = std::env::var("MSG_COST_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&w| (1..=W).contains(&w))
        .unwrap_or(W);
    let mut bufs = vec![[0u8; 8]; w];
    for (blocking, name) in [(true, "send/recv"), (false, "isend/irecv")] {
        for round in 0..ROUNDS {
            sync(&world);
            if world.rank() == 0 {
                for (i, b) in bufs.iter_mut().enumerate() {
                    *b = ((round * w + i) as u64).to_le_bytes();
                }
                if blocking {
                    send_window(&world, &bufs);
                } else {
                    isend_window(&world, &bufs);
                }
            } else {
                std::thread::sleep(settle);
                if blocking {
                    recv_window(&world, &mut bufs);
                } else {
                    irecv_window(&world, &mut bufs);
                }
                for (i, b) in bufs.iter().enumerate() {
                    assert_eq!(u64::from_le_bytes(*b), (round * w + i) as u64, "{name}");
                }
            }
        }
    }
    // Posted first: rank 0 sends (blocking) after the round trip inside `posted_receive`.
    for round in 0..ROUNDS {
        sync(&world);
        if world.rank() == 0 {
            for (i, b) in bufs.iter_mut().enumerate() {
                *b = ((round * w + i) as u64).to_le_bytes();
            }
            sync(&world);
            posted_send_window(&world, &bufs);
        } else {
            posted_receive(&world, &mut bufs, settle);
            for (i, b) in bufs.iter().enumerate() {
                assert_eq!(u64::from_le_bytes(*b), (round * w + i) as u64, "posted");
            }
        }
    }
    sync(&world);
    if world.rank() == 0 {
        println!("msg_cost: {ROUNDS} rounds of {w} messages per pattern");
    }
}
