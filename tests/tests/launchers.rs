//! rcomm started by other launchers, with real processes: MPICH's `mpiexec.mpich` (hydra,
//! PMI-1 and PMI-2 on PMI_FD), Slurm's `srun --mpi=pmi2` on a private one-node cluster, and a
//! torchrun-style environment. Each job is bounded by a deadline and checked for leftovers.
//! Prerequisites missing (and not installable) skip with a reason — except under `CI=true`.

use rcomm_tests::{Job, JobOutput, SlurmCluster, free_port, have, skip, test_program};
use std::time::{Duration, Instant};

fn rt_boot() -> String {
    test_program("rt_boot")
}

fn assert_all_ok(out: &JobOutput, n: u32) {
    for r in 0..n {
        assert!(
            out.stdout
                .contains(&format!("ok rank {r}/{n} local {r}/{n} ")),
            "rank {r} did not report ok\n{out}"
        );
    }
    assert_eq!(out.code(), 0, "{out}");
}

fn mpiexec() -> Option<&'static str> {
    if have("mpiexec.mpich") {
        Some("mpiexec.mpich")
    } else {
        skip("mpiexec.mpich not installed (apt-get install mpich; scripts/test.sh does)");
        None
    }
}

#[test]
fn mpiexec_pmi1_and_pmi2_allreduce_and_p2p() {
    let Some(mpiexec) = mpiexec() else { return };
    let prog = rt_boot();
    for pmi in ["1", "2"] {
        let out = Job::foreign(mpiexec, &["-n", "4", &prog, "check"])
            .env("RCOMM_PMI", pmi)
            .deadline(Duration::from_secs(60))
            .run();
        assert_all_ok(&out, 4);
        // Without RCOMM_PMI, hydra gets PMI-1 (auto).
    }
    let out = Job::foreign(mpiexec, &["-n", "4", &prog, "check"]).run();
    assert_all_ok(&out, 4);
}

#[test]
fn mpiexec_rank_death_in_init_ends_the_job() {
    // Hydra (MPICH 4.0) does not end a job whose rank exits before PMI init (its proxy spins
    // instead); the survivors wait in the PMI fence, and the bootstrap deadline ends them.
    let Some(mpiexec) = mpiexec() else { return };
    let out = Job::foreign(mpiexec, &["-n", "4", &rt_boot(), "die-init"])
        .env("RCOMM_BOOTSTRAP_TIMEOUT", "3")
        .deadline(Duration::from_secs(30))
        .run();
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.elapsed < Duration::from_secs(15), "{out}");
    // The first survivor to give up ends the job (hydra then kills the others). Hydra may kill
    // them before the survivor's message reaches its output (seen under load): then hydra's
    // own report of the ended job is what there is.
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        (all.contains("RCOMM_BOOTSTRAP_TIMEOUT") && all.contains("the PMI server (mpiexec)"))
            || all.contains("BAD TERMINATION"),
        "a survivor names the deadline, or hydra reports the ended job\n{out}"
    );
}

#[test]
fn rcomm_bench_under_mpiexec_has_no_wrong_elements() {
    let Some(mpiexec) = mpiexec() else { return };
    let bench = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("rcomm-bench");
    assert!(
        bench.exists(),
        "{} not built: run cargo test --workspace",
        bench.display()
    );
    let args = [
        "-n",
        "4",
        bench.to_str().unwrap(),
        "coll",
        "allreduce",
        "-b",
        "8",
        "-e",
        "1M",
        "-f",
        "8",
        "-n",
        "5",
        "-w",
        "1",
    ];
    let out = Job::foreign(mpiexec, &args)
        .deadline(Duration::from_secs(120))
        .run();
    assert_eq!(out.code(), 0, "{out}");
    for r in 0..4 {
        assert!(
            out.stdout.contains(&format!("#  Rank  {r} ")),
            "4 ranks in one world\n{out}"
        );
    }
    let rows: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(rows.len() >= 6, "{out}");
    for row in rows {
        // size count type redop root time algbw busbw #wrong (out of place, then in place)
        assert_eq!(
            (row.len(), row[8], row[12]),
            (13, "0", "0"),
            "{row:?}\n{out}"
        );
    }
    assert!(out.stdout.contains("Out of bounds values : 0 OK"), "{out}");
}

#[test]
fn slurm_srun_pmi2_and_pmi1() {
    let cluster = match SlurmCluster::start() {
        Ok(c) => c,
        Err(why) => return skip(&why),
    };
    let prog = rt_boot();
    let srun = |args: &[&str]| {
        let mut a = vec!["-n", "4", "--mpi=pmi2"];
        a.extend_from_slice(args);
        Job::foreign("srun", &a).env("SLURM_CONF", &cluster.conf())
    };
    // PMI-2 (auto under --mpi=pmi2), then PMI-1 on the same plugin.
    let t = Instant::now();
    let out = srun(&["--kill-on-bad-exit=1", &prog, "check"]).run();
    assert_all_ok(&out, 4);
    eprintln!("srun PMI-2: {:?}", t.elapsed());
    let out = srun(&["--kill-on-bad-exit=1", &prog, "check"])
        .env("RCOMM_PMI", "1")
        .run();
    assert_all_ok(&out, 4);
    // A rank dies before init: the others sit in the PMI fence; srun ends the job.
    let out = srun(&["--kill-on-bad-exit=1", &prog, "die-init"])
        .deadline(Duration::from_secs(45))
        .run();
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.elapsed < Duration::from_secs(30), "{out}");
    // Without --kill-on-bad-exit nobody ends them — but the bootstrap deadline does.
    let out = srun(&[&prog, "die-init"])
        .env("RCOMM_BOOTSTRAP_TIMEOUT", "3")
        .deadline(Duration::from_secs(45))
        .run();
    assert_ne!(out.code(), 0, "{out}");
    assert_eq!(
        out.stdout.matches("RCOMM_BOOTSTRAP_TIMEOUT").count(),
        3,
        "each survivor names the deadline\n{out}"
    );
    assert!(out.stdout.contains("Slurm (srun)"), "{out}");
    // A rank that dies after init: the job ends, bounded.
    let out = srun(&["--kill-on-bad-exit=1", &prog, "die"])
        .deadline(Duration::from_secs(45))
        .run();
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.elapsed < Duration::from_secs(30), "{out}");
    drop(cluster);
}

fn torch_job(rank: u32, size: u32, master_port: u16, mode: &str) -> Job {
    Job::foreign(&rt_boot(), &[mode])
        .env("RANK", &rank.to_string())
        .env("WORLD_SIZE", &size.to_string())
        .env("LOCAL_RANK", &rank.to_string())
        .env("LOCAL_WORLD_SIZE", &size.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", &master_port.to_string())
}

#[test]
fn torchrun_style_env_allreduce() {
    // The store listens on MASTER_PORT + 1 (torchrun's agent owns MASTER_PORT).
    let master = free_port() - 1;
    let ranks: Vec<_> = (0..4)
        .map(|r| {
            torch_job(r, 4, master, "check")
                .env("RCOMM_STORE_SECRET", "test-secret")
                .deadline(Duration::from_secs(60))
                .spawn()
        })
        .collect();
    for (r, job) in ranks.into_iter().enumerate() {
        let out = job.wait();
        assert_eq!(out.code(), 0, "rank {r}: {out}");
        assert!(
            out.stdout.contains(&format!("ok rank {r}/4 local {r}/4 ")),
            "{out}"
        );
    }
}

#[test]
fn torchrun_style_missing_rank_fails_within_the_timeout() {
    // Only rank 0 of 2: it serves the store and waits in the fence.
    let t = Instant::now();
    let out = torch_job(0, 2, free_port() - 1, "init-error")
        .env("RCOMM_BOOTSTRAP_TIMEOUT", "2")
        .deadline(Duration::from_secs(30))
        .run();
    assert_eq!(out.code(), 3, "{out}");
    assert!(out.stdout.contains("RCOMM_BOOTSTRAP_TIMEOUT"), "{out}");
    assert!(
        out.stderr.contains("RCOMM_STORE_SECRET is not set"),
        "{out}"
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{out}");
    // Only rank 1 of 2: nobody serves the store; it retries until the deadline.
    let out = torch_job(1, 2, free_port() - 1, "init-error")
        .env("RCOMM_BOOTSTRAP_TIMEOUT", "2")
        .deadline(Duration::from_secs(30))
        .run();
    assert_eq!(out.code(), 3, "{out}");
    assert!(out.stdout.contains("rank 0's store at 127.0.0.1"), "{out}");
    assert!(out.elapsed < Duration::from_secs(10), "{out}");
}

#[test]
fn torchrun_style_wrong_secret_is_refused() {
    let master = free_port() - 1;
    let r0 = torch_job(0, 2, master, "init-error")
        .env("RCOMM_STORE_SECRET", "one")
        .env("RCOMM_BOOTSTRAP_TIMEOUT", "3")
        .spawn();
    let out1 = torch_job(1, 2, master, "init-error")
        .env("RCOMM_STORE_SECRET", "two")
        .env("RCOMM_BOOTSTRAP_TIMEOUT", "3")
        .run();
    assert_eq!(out1.code(), 3, "{out1}");
    assert!(out1.stdout.contains("handshake"), "{out1}");
    assert_eq!(r0.wait().code(), 3);
}
