//! Rank program: process spawning. `rt_spawn <case>` runs one case on every parent rank;
//! the children it starts are this program again, `rt_spawn child <case>`. Rank 0 prints
//! `ok <case> …` when the case held on every parent; children print `child <rank> …` lines
//! (they reach the job's output through the spawning rank's stdout).
//!
//! Cases: `spawn` (two commands, 2 + 1 copies: appnums, both worlds, data both ways, merge in
//! both orders with a reduction against its sequential value), `bad-program` (a program that
//! cannot start: every parent gets the error), `crash-before-init` (a child that exits before
//! joining: the spawn fails at once, not at the bootstrap timeout), `quit-before-init` (the
//! same with status 0, as a program that is not an rcomm program), `dies-later` (a child
//! that leaves mid-job: the parent waiting on it gets `PeerLost`).

use rcomm::{CommError, Op, Source, SpawnCommand, Tag, World};
use std::process::Command;
use std::time::{Duration, Instant};

fn value(from: u32, to: u32, i: usize) -> u64 {
    (u64::from(from) << 32) ^ (u64::from(to) << 16) ^ (i as u64).wrapping_mul(0x9e37_79b9)
}

fn me(args: &[&str]) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("current_exe"));
    c.args(args);
    c
}

/// Confirms on every parent and prints on rank 0.
fn ok(w: &World, line: &str) {
    w.barrier().expect("barrier");
    if w.rank() == 0 {
        println!("ok {line}");
    }
}

fn spawn_case(w: &World) {
    let (a, b) = (me(&["child", "spawn", "A"]), me(&["child", "spawn", "B"]));
    let cmds = [
        SpawnCommand {
            command: &a,
            copies: 2,
        },
        SpawnCommand {
            command: &b,
            copies: 1,
        },
    ];
    // Only the root's commands count: the others pass none.
    let ic = w
        .spawn(0, if w.rank() == 0 { &cmds } else { &[] })
        .expect("spawn");
    assert_eq!(
        (ic.rank(), ic.size(), ic.remote_size()),
        (w.rank(), w.size(), 3)
    );
    assert!(ic.is_parent_side());
    let p = w.size();
    for c in 0..3 {
        let out: Vec<u64> = (0..100).map(|i| value(w.rank(), c, i)).collect();
        ic.send(&out, c, Tag(1)).expect("send to child");
    }
    for c in 0..3 {
        let mut got = vec![0u64; 101];
        let st = ic
            .recv(&mut got, Source::Rank(c), Tag(2))
            .expect("recv from child");
        assert_eq!(st.source, c, "status names the remote rank");
        assert_eq!(st.bytes, 101 * 8);
        let want: Vec<u64> = (0..100).map(|i| value(p + c, w.rank(), i)).collect();
        assert_eq!(&got[..100], &want[..], "data from child {c}");
        // The child's appnum and its own world's sum of ranks (0 + 1 + 2).
        assert_eq!(got[100], [0, 0, 1][c as usize] * 1000 + 3);
    }
    merges(&ic, p + 3, false);
    ok(w, &format!("spawn parents {p} children 3"));
}

/// Merges both ways round (this side low, then high) and checks rank order and a sum.
fn merges(ic: &rcomm::InterComm, total: u32, child: bool) {
    let parents = if child { ic.remote_size() } else { ic.size() };
    for parents_first in [true, false] {
        let high = child == parents_first;
        let m = ic.merge(high).expect("merge");
        assert_eq!(m.size(), total);
        let want_rank = match (child, parents_first) {
            (false, true) => ic.rank(),
            (true, true) => parents + ic.rank(),
            (false, false) => (total - parents) + ic.rank(),
            (true, false) => ic.rank(),
        };
        assert_eq!(
            m.rank(),
            want_rank,
            "merged rank (parents first: {parents_first})"
        );
        let mut v = [u64::from(m.rank()) * 3 + 1];
        m.allreduce_in_place(&mut v, Op::Sum).expect("allreduce");
        let want: u64 = (0..u64::from(total)).map(|r| r * 3 + 1).sum();
        assert_eq!(v[0], want);
    }
}

fn child(w: &World, case: &str, label: &str) {
    let ic = w.parent().expect("a spawned process has a parent").clone();
    assert!(!ic.is_parent_side());
    let parents = ic.remote_size();
    match case {
        "spawn" => {
            let app = w.appnum().expect("appnum");
            assert_eq!(
                (app, label),
                (u32::from(w.rank() == 2), ["A", "A", "B"][w.rank() as usize])
            );
            assert_eq!(w.size(), 3);
            let mut s = [u64::from(w.rank())];
            w.allreduce_in_place(&mut s, Op::Sum)
                .expect("children's own allreduce");
            for p in 0..parents {
                let mut got = vec![0u64; 100];
                let st = ic
                    .recv(&mut got, Source::Rank(p), Tag(1))
                    .expect("recv from parent");
                assert_eq!(st.source, p);
                let want: Vec<u64> = (0..100).map(|i| value(p, w.rank(), i)).collect();
                assert_eq!(got, want, "data from parent {p}");
            }
            for p in 0..parents {
                let mut out: Vec<u64> = (0..100).map(|i| value(parents + w.rank(), p, i)).collect();
                out.push(u64::from(app) * 1000 + s[0]);
                ic.send(&out, p, Tag(2)).expect("send to parent");
            }
            merges(&ic, parents + 3, true);
            println!("child {} app {app} {label} ok", w.rank());
        }
        "dies-later" => {
            // Take the parent's message, then leave without finalizing.
            let mut b = [0u8; 1];
            ic.recv(&mut b, Source::Rank(0), Tag(3)).expect("recv");
            std::process::exit(4);
        }
        other => panic!("unknown child case {other}"),
    }
}

fn bad_program(w: &World) {
    let c = Command::new("/nonexistent/rcomm-spawn-target");
    let t0 = Instant::now();
    let e = w
        .spawn(
            0,
            &[SpawnCommand {
                command: &c,
                copies: 2,
            }],
        )
        .expect_err("a program that does not exist");
    assert!(
        matches!(&e, CommError::Spawn(why) if why.contains("cannot start") && why.contains("nonexistent")),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    ok(w, &format!("bad-program: {e}"));
}

/// Children that exit before init, with `how` (`crash`: status 3, `quit`: status 0 — a
/// program that is not an rcomm program).
fn exit_before_init(w: &World, how: &str) {
    let c = me(&[how]);
    let t0 = Instant::now();
    let e = w
        .spawn(
            0,
            &[SpawnCommand {
                command: &c,
                copies: 2,
            }],
        )
        .expect_err("children that crash before init");
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(20), "took {took:?}: {e}");
    ok(
        w,
        &format!("{how}-before-init in {:.1} s: {e}", took.as_secs_f64()),
    );
}

fn dies_later(w: &World) {
    let c = me(&["child", "dies-later"]);
    let ic = w
        .spawn(
            0,
            &[SpawnCommand {
                command: &c,
                copies: 1,
            }],
        )
        .expect("spawn");
    if w.rank() == 0 {
        ic.send(&[1u8], 0, Tag(3)).expect("send");
        let t0 = Instant::now();
        let mut b = [0u8; 1];
        let e = ic
            .recv(&mut b, Source::Rank(0), Tag(4))
            .expect_err("the child left");
        assert!(matches!(e, CommError::PeerLost { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
        println!("ok dies-later: {e}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.first() {
        Some(&"crash") => std::process::exit(3),
        Some(&"quit") => std::process::exit(0),
        _ => {}
    }
    let w = rcomm::init().expect("init");
    match args.as_slice() {
        ["child", case, rest @ ..] => child(&w, case, rest.first().copied().unwrap_or("")),
        ["spawn"] => spawn_case(&w),
        ["bad-program"] => bad_program(&w),
        ["crash-before-init"] => exit_before_init(&w, "crash"),
        ["quit-before-init"] => exit_before_init(&w, "quit"),
        ["dies-later"] => dies_later(&w),
        _ => panic!(
            "usage: rt_spawn spawn|bad-program|crash-before-init|quit-before-init|dies-later"
        ),
    }
}
