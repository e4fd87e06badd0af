//! `benches/mpi/osu_like.c` against `rcomm_benches`: it compiles without warnings, its
//! `--selftest` prints the same pattern words and the same check reference (every operation,
//! type and reduction, every rank's every output element on 3 ranks) and the same iteration
//! stamps as `rcomm_benches::{osu, coll}`; its collective modes run and pass their check pass
//! under a real MPI launch, and its point-to-point modes print every size and pass theirs, and
//! fail it (exit status 1, the size and the stale iteration named) when a receive stops
//! writing (`--inject-stale`). Skipped ([`rcomm_testkit::skip`], a failure under CI) where no
//! MPI compiler is installed (`mpicc.openmpi`, `mpicc.mpich` or `mpicc`).

mod common;
use common::{figure_ok, json_row};
use rcomm::Op;
use rcomm_benches::coll::{self, BenchElem, CheckCtx, CollOp};
use rcomm_benches::osu;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// osu_like compiled once for every test of this file: the tests run in parallel threads, and
/// one compiling into the path while another executes it fails with "text file busy".
fn build() -> Option<(PathBuf, &'static str)> {
    static BUILT: std::sync::OnceLock<Option<(PathBuf, &'static str)>> = std::sync::OnceLock::new();
    BUILT.get_or_init(compile).clone()
}

/// Compiles osu_like with the first MPI compiler found: (binary, which MPI).
fn compile() -> Option<(PathBuf, &'static str)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi/osu_like.c");
    let dir = std::env::temp_dir().join(format!("rcomm-osu-like-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (cc, which) in [
        ("mpicc.openmpi", "openmpi"),
        ("mpicc.mpich", "mpich"),
        ("mpicc", "mpi"),
    ] {
        let exe = dir.join(format!("osu_like.{which}"));
        let out = match Command::new(cc)
            .args(["-O2", "-Wall", "-Wextra", "-std=c11", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
        {
            Ok(o) => o,
            Err(_) => continue,
        };
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cc} failed:\n{err}");
        assert!(!err.contains("warning"), "{cc} -Wall -Wextra warns:\n{err}");
        return Some((exe, which));
    }
    None
}

/// Skips the calling test: no MPI compiler.
fn skip_without_mpi() {
    rcomm_testkit::skip(
        "no MPI compiler (mpicc.openmpi, mpicc.mpich or mpicc) is installed: install MPICH (`apt-get install mpich \
         libmpich-dev`), as scripts/test.sh does",
    );
}

/// Skips the calling test: an MPI compiler without a launcher this file knows.
fn skip_without_launcher(which: &str) {
    rcomm_testkit::skip(&format!(
        "osu_like was compiled with plain `mpicc` ({which}), whose launcher this test does not know: install MPICH \
         (`apt-get install mpich libmpich-dev`, giving mpicc.mpich and mpiexec.mpich)"
    ));
}

fn dtype_of(name: &str) -> rcomm::Dtype {
    coll::parse_dtype(name).unwrap()
}

/// Compares one `expect` line's values with `coll::expected::<T>`.
fn compare<T: BenchElem>(ctx: &CheckCtx, vals: &[&str], line: &str) {
    assert_eq!(vals.len(), ctx.counts.recv, "output length: {line}");
    for (j, v) in vals.iter().enumerate() {
        let want = coll::expected::<T>(ctx, j);
        match (*v, want) {
            ("-", None) => {}
            ("-", Some(w)) => {
                panic!("element {j}: C leaves it undefined, rcomm wants {w:?}: {line}")
            }
            (v, None) => panic!("element {j}: C wants {v}, rcomm leaves it undefined: {line}"),
            (v, Some((w, _))) => {
                let c: f64 = v.parse().unwrap();
                assert_eq!(c, w.to_f64(), "element {j}: {line}");
            }
        }
    }
}

#[test]
fn selftest_agrees_with_rcomm_benches() {
    let Some((exe, _)) = build() else {
        return skip_without_mpi();
    };
    let out = Command::new(&exe).arg("--selftest").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    // Point-to-point pattern words (size 8, rank 1, slot 0) and the collective mix.
    let sd = osu::seed(8, 1, 0);
    let mut w = [0u8; 16];
    osu::fill(&mut w, sd);
    let mut p = [0u8; 8];
    osu::fill(&mut p, osu::poison_seed(8, 1, 0));
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap());
    assert_eq!(
        lines.next().unwrap(),
        format!(
            "seed {sd:016x} words {:016x} {:016x} poison {:016x}",
            word(&w[..8]),
            word(&w[8..]),
            word(&p)
        )
    );
    assert_eq!(
        lines.next().unwrap(),
        format!("coll mix {:016x}", coll::mix(99, 1, 7))
    );
    // Point-to-point messages stamped with iteration 5 (size n, rank 1, slot 2): every stamp
    // range, short and long.
    for n in [1usize, 7, 8, 9, 16, 17, 24, 33] {
        let sd = osu::seed(n, 1, 2);
        let mut b = vec![0u8; n];
        osu::fill(&mut b, sd);
        osu::stamp(&mut b, sd, 5);
        let hex: String = b.iter().map(|x| format!(" {x:02x}")).collect();
        assert_eq!(
            lines.next().unwrap(),
            format!("stamp n {n} iteration 5:{hex}")
        );
    }
    let mut seen = std::collections::HashSet::new();
    let mut checked = 0;
    for line in lines {
        // expect OP TYPE REDOP n N root R count C rank K seed S: values...
        let (head, vals) = line.split_once(':').unwrap();
        let h: Vec<&str> = head.split_whitespace().collect();
        assert_eq!(h[0], "expect", "{line}");
        let op = coll::parse_op(h[1]).unwrap();
        let redop: Op = coll::parse_redop(h[3]).unwrap();
        let (n, root, count, rank, seed): (u32, u32, usize, u32, u64) = (
            h[5].parse().unwrap(),
            h[7].parse().unwrap(),
            h[9].parse().unwrap(),
            h[11].parse().unwrap(),
            h[13].parse().unwrap(),
        );
        assert_eq!(seed, coll::check_seed(1, 0));
        let ctx = CheckCtx {
            op,
            redop,
            n,
            rank,
            root,
            counts: op.info().layout.counts(count, n as usize),
            seed,
        };
        let vals: Vec<&str> = vals.split_whitespace().collect();
        match dtype_of(h[2]) {
            rcomm::Dtype::F32 => compare::<f32>(&ctx, &vals, line),
            rcomm::Dtype::F64 => compare::<f64>(&ctx, &vals, line),
            rcomm::Dtype::I32 => compare::<i32>(&ctx, &vals, line),
            rcomm::Dtype::I64 => compare::<i64>(&ctx, &vals, line),
            d => panic!("unexpected type {d:?}"),
        }
        seen.insert(op);
        checked += 1;
    }
    for op in [
        CollOp::Allreduce,
        CollOp::Bcast,
        CollOp::Allgather,
        CollOp::ReduceScatter,
        CollOp::Alltoall,
        CollOp::Reduce,
        CollOp::Gather,
        CollOp::Scatter,
    ] {
        assert!(seen.contains(&op), "{op} missing from --selftest");
    }
    // 3 reducing ops × 4 types × 4 redops + 5 others × 4 types, 3 ranks each.
    assert_eq!(checked, (3 * 16 + 5 * 4) * 3);
}

/// The launcher of the MPI that built `exe`, with what it needs for `np` ranks on any machine.
fn launch(which: &str, np: u32) -> Option<Command> {
    let mut c = match which {
        "openmpi" => {
            let mut c = Command::new("mpirun.openmpi");
            c.args([
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
            ]);
            c
        }
        "mpich" => {
            let mut c = Command::new("mpiexec.mpich");
            c.args(["-bind-to", "none"]);
            c
        }
        _ => return None,
    };
    c.args(["-np", &np.to_string()]);
    Some(c)
}

/// Runs a command to completion within `limit` (killed after it): (exit status, stdout, stderr).
fn run(mut c: Command, limit: Duration) -> (Option<i32>, String, String) {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the MPI launcher");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut err = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, out, err)
}

#[test]
fn collective_modes_pass_their_check_under_mpi() {
    let Some((exe, which)) = build() else {
        return skip_without_mpi();
    };
    for (op, size, count, inplace) in [
        // 3 ranks, 4 KiB of int32 = 1024 elements: blocks of 341.
        ("allgather", 4092, 341, false),
        ("reduce_scatter", 4092, 341, false),
        ("alltoall", 4092, 341, false),
        ("gather", 4092, 341, false),
        ("scatter", 4092, 341, false),
        ("reduce", 4096, 1024, false),
        ("allreduce", 4096, 1024, true),
    ] {
        let Some(mut c) = launch(which, 3) else {
            return skip_without_launcher(which);
        };
        c.arg(&exe).args([
            op, "-b", "4K", "-e", "4K", "-n", "2", "-w", "1", "-c", "2", "-d", "int32", "-r", "1",
            "--json",
        ]);
        let (rc, out, err) = run(c, Duration::from_secs(120));
        assert_eq!(rc, Some(0), "{op}: {out}\n{err}");
        let rows: Vec<&str> = out.lines().filter(|l| l.starts_with('{')).collect();
        assert_eq!(rows.len(), 1, "{op}: {out}");
        let want = format!(
            "{{\"op\":\"{op}\",\"algo\":\"mpi\",\"size\":{size},\"count\":{count},\"type\":\"int32\""
        );
        assert!(rows[0].starts_with(&want), "{op}: {}", rows[0]);
        assert!(rows[0].contains("\"wrong\":0"), "{op}: {}", rows[0]);
        assert_eq!(
            rows[0].ends_with(",\"inplace\":null}"),
            !inplace,
            "{op}: {}",
            rows[0]
        );
        assert!(err.contains("Out of bounds values : 0 OK"), "{op}: {err}");
    }
}

#[test]
fn pt2pt_modes_pass_their_check_and_catch_a_stale_receive_under_mpi() {
    let Some((exe, which)) = build() else {
        return skip_without_mpi();
    };
    let sizes: Vec<usize> = (0..=16).map(|k| 1usize << k).collect();
    for (test, key, iters) in [
        ("latency", "latency_us", "20"),
        ("bw", "bandwidth_MBps", "3"),
        ("bibw", "bandwidth_MBps", "3"),
    ] {
        for buffers in ["single", "multiple"] {
            let what = format!("{test} -b {buffers}");
            let Some(mut c) = launch(which, 2) else {
                return skip_without_launcher(which);
            };
            c.arg(&exe).args([
                test, "-m", "1:64K", "-i", iters, "-x", "2", "-b", buffers, "--json",
            ]);
            let (rc, out, err) = run(c, Duration::from_secs(120));
            assert_eq!(rc, Some(0), "{what}: {out}\n{err}");
            let rows: Vec<(usize, f64)> = out
                .lines()
                .map(|l| {
                    json_row(l, key).unwrap_or_else(|| panic!("{what}: not a row: {l:?}\n{out}"))
                })
                .collect();
            assert_eq!(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                sizes,
                "{what}: {out}"
            );
            for (size, v) in &rows {
                assert!(figure_ok(key, *size, *v), "{what}, size {size}: {v}\n{out}");
            }
            assert!(!err.contains("check failed"), "{what}: {err}");

            // Rank 1 receives into a spare buffer after iteration 1 of 0..=5: its receive
            // buffer keeps iteration 1's message.
            let Some(mut c) = launch(which, 2) else {
                return skip_without_launcher(which);
            };
            c.arg(&exe).args([
                test,
                "-m",
                "64:128",
                "-i",
                "4",
                "-x",
                "2",
                "-b",
                buffers,
                "--inject-stale",
                "1",
            ]);
            let (rc, out, err) = run(c, Duration::from_secs(120));
            assert_eq!(rc, Some(1), "{what}: {out}\n{err}");
            let want = format!(
                "osu_like: check failed: {test}, size 64: rank 1, receive buffer 0: byte 0 holds the stamp of \
                 iteration 1, not of the last iteration 5 (the buffer was not written after iteration 1)"
            );
            assert!(err.contains(&want), "{what}: wanted {want:?} in\n{err}");
            assert!(
                out.lines().all(|l| l.starts_with('#')),
                "{what}: a row was printed: {out}"
            );
        }
    }
}
