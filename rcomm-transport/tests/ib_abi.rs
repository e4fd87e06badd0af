//! The libibverbs backend (`ib::libverbs`) against the system's rdma-core:
//! - its `#[repr(C)]` copies have the layout `<infiniband/verbs.h>` gives (a C file, `ib_abi.c`,
//!   compiled with `cc` against the header, prints `sizeof`/`offsetof` of every copied struct
//!   and field; `abi_layout()` must print the same);
//! - a missing library is a clear error, the real one loads, and a machine without RDMA
//!   devices lists none;
//! - handles that name nothing are `BadHandle`, never a crash.
//!
//! Needs `libibverbs-dev` (the header) and the library (`scripts/test.sh` installs both); they
//! are skipped without, except under CI. No test here needs an RDMA device.

#![cfg(feature = "ib")]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use rcomm_testkit::skip;
use rcomm_transport::ib::libverbs::{LibVerbs, LoadError, abi_layout};
use rcomm_transport::ib::{
    Access, Context, Cq, Mr, Pd, Qp, QpCap, QpInitAttr, QpModify, RecvWr, SendOp, SendWr, Sge,
    Verbs, VerbsError,
};

const HEADER: &str = "/usr/include/infiniband/verbs.h";

#[test]
fn struct_copies_match_the_header() {
    if !Path::new(HEADER).exists() {
        skip(&format!(
            "{HEADER} is missing: install libibverbs-dev (scripts/test.sh does)"
        ));
        return;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ib_abi.c");
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ib_abi");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = match Command::new(&cc).arg("-o").arg(&exe).arg(&src).output() {
        Ok(o) => o,
        Err(e) => {
            skip(&format!("no C compiler ({cc}: {e}): install gcc"));
            return;
        }
    };
    assert!(
        out.status.success(),
        "{cc} {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().expect("run the ABI printer");
    assert!(out.status.success(), "{} failed", exe.display());
    let c: BTreeMap<String, usize> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (name, v) = l.rsplit_once(' ').expect("`name value` lines");
            (name.to_string(), v.parse().expect("a number"))
        })
        .collect();
    let rust: BTreeMap<String, usize> = abi_layout()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    assert_eq!(
        rust.len(),
        abi_layout().len(),
        "abi_layout() names something twice"
    );
    let mut diffs = Vec::new();
    for (name, v) in &c {
        match rust.get(name) {
            Some(r) if r == v => {}
            Some(r) => diffs.push(format!("{name}: C {v}, Rust {r}")),
            None => diffs.push(format!("{name}: C {v}, not in abi_layout()")),
        }
    }
    for (name, r) in &rust {
        if !c.contains_key(name) {
            diffs.push(format!("{name}: Rust {r}, not printed by ib_abi.c"));
        }
    }
    assert!(
        diffs.is_empty(),
        "libverbs.rs disagrees with {HEADER}:\n{}",
        diffs.join("\n")
    );
    assert!(c.len() > 200, "only {} entries compared", c.len());
}

#[test]
fn a_missing_library_is_a_clear_error() {
    let e = LibVerbs::load_from("/nonexistent/libibverbs.so.1").unwrap_err();
    assert!(
        matches!(&e, LoadError::NotFound { path, .. } if path == "/nonexistent/libibverbs.so.1"),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.starts_with("/nonexistent/libibverbs.so.1 not found: install rdma-core (libibverbs1)"),
        "{text}"
    );
    // A library that is not libibverbs names the first symbol it lacks.
    let e = LibVerbs::load_from("libc.so.6").unwrap_err();
    assert!(
        matches!(
            &e,
            LoadError::MissingSymbol {
                symbol: "ibv_get_device_list",
                version: "IBVERBS_1.1",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("ibv_get_device_list@IBVERBS_1.1"),
        "{e}"
    );
}

/// The system's libibverbs, or `None` after a skip.
fn lib() -> Option<LibVerbs> {
    match LibVerbs::load() {
        Ok(l) => Some(l),
        Err(e) => {
            skip(&format!("{e} (scripts/test.sh installs it)"));
            None
        }
    }
}

fn has_rdma_devices() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

#[test]
fn the_library_loads_and_lists_this_machines_devices() {
    let Some(v) = lib() else { return };
    let devs = v.devices().expect("listing devices never fails");
    if has_rdma_devices() {
        // A machine with HCAs: they are listed with a name and ports (nothing else is called).
        assert!(!devs.is_empty());
        for d in &devs {
            assert!(!d.name.is_empty() && d.phys_port_cnt > 0, "{d:?}");
        }
    } else {
        assert_eq!(devs, vec![], "no /sys/class/infiniband entries, no devices");
        assert_eq!(v.open("mlx5_0"), Err(VerbsError::NoDevice("mlx5_0".into())));
    }
}

#[test]
fn handles_that_name_nothing_are_bad_handles() {
    let Some(v) = lib() else { return };
    let bad = |what: &'static str| Some(VerbsError::BadHandle(what));
    let ctx = Context(7);
    let pd = Pd(8);
    let cq = Cq(9);
    let qp = Qp { id: 10, qpn: 0x11 };
    let mr = Mr {
        id: 12,
        lkey: 1,
        rkey: 2,
        addr: 0x1000,
        len: 64,
    };
    assert_eq!(v.close(ctx).err(), bad("context"));
    assert_eq!(v.query_port(ctx, 1).err(), bad("context"));
    assert_eq!(v.query_gid(ctx, 1, 0).err(), bad("context"));
    assert_eq!(v.alloc_pd(ctx).err(), bad("context"));
    assert_eq!(v.create_cq(ctx, 16).err(), bad("context"));
    assert_eq!(v.get_async_event(ctx).err(), bad("context"));
    assert_eq!(v.dealloc_pd(pd).err(), bad("PD"));
    // SAFETY: a PD that names nothing: no memory is registered (the range is not touched).
    let r = unsafe { v.reg_mr(pd, 0x1000, 64, Access::LOCAL_WRITE) };
    assert_eq!(r.err(), bad("PD"));
    assert_eq!(v.dereg_mr(mr).err(), bad("MR"));
    // SAFETY: as above; the descriptor -1 is never looked at.
    let r = unsafe { v.reg_dmabuf_mr(pd, 0, 64, 0x1000, -1, Access::LOCAL_WRITE) };
    assert_eq!(r.err(), bad("PD"));
    assert_eq!(v.destroy_cq(cq).err(), bad("CQ"));
    assert_eq!(v.arm_cq(cq).err(), bad("CQ"));
    assert_eq!(v.event_fds(ctx, cq), [None, None]);
    let mut out = Vec::new();
    assert_eq!(v.poll_cq(cq, 4, &mut out).err(), bad("CQ"));
    assert!(out.is_empty());
    let attr = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
    };
    assert_eq!(v.create_qp(pd, &attr).err(), bad("PD"));
    assert_eq!(v.modify_qp(qp, &QpModify::Err).err(), bad("QP"));
    assert_eq!(v.qp_state(qp).err(), bad("QP"));
    assert_eq!(v.destroy_qp(qp).err(), bad("QP"));
    let sg = [Sge {
        addr: 0x1000,
        len: 8,
        lkey: 1,
    }];
    let e = v
        .post_send(
            qp,
            &[SendWr {
                wr_id: 1,
                op: SendOp::Send,
                sg: &sg,
                signaled: true,
            }],
        )
        .unwrap_err();
    assert_eq!((e.bad_wr, e.error), (0, VerbsError::BadHandle("QP")));
    let e = v
        .post_recv(qp, &[RecvWr { wr_id: 2, sg: &sg }])
        .unwrap_err();
    assert_eq!((e.bad_wr, e.error), (0, VerbsError::BadHandle("QP")));
}
