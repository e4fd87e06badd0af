//! `rcomm-run` across hosts, on fake hosts made of network namespaces (tests/cluster.sh): each
//! has its own sshd and host name, the launcher runs "on" host0 (its namespace and name) and
//! reaches the others through ssh. Every test checks that nothing of the job is left on any
//! host (every process in the fake hosts' namespaces but their sshds, and every process
//! carrying the job's marker). Skipped with a printed reason when not root; under `CI=true` a
//! skip fails.

use rcomm_tests::cluster::Cluster;
use rcomm_tests::{Job, JobOutput, test_program};
use std::time::{Duration, Instant};

fn prog() -> String {
    test_program("rt_multihost")
}

/// Runs `rcomm-run --ssh <wrapper> ARGS` on host0 and checks the cluster is idle afterwards.
fn run_on_host0(c: &Cluster, args: &[&str], env: &[(&str, &str)], deadline: u64) -> JobOutput {
    let ssh = c.ssh();
    let mut all = vec!["--ssh", ssh.as_str()];
    all.extend_from_slice(args);
    let mut job = Job::with_prefix(&c.on_host(0), &all).deadline(Duration::from_secs(deadline));
    for (k, v) in env {
        job = job.env(k, v);
    }
    let out = job.run();
    let left = c.wait_idle(Duration::from_secs(10));
    assert!(left.is_empty(), "left on the fake hosts: {left:?}\n{out}");
    out
}

#[test]
fn six_ranks_on_three_hosts_use_tcp_between_hosts_and_pass_the_collectives_table() {
    let Some(c) = Cluster::up_or_skip(3) else {
        return;
    };
    let p = prog();
    let out = run_on_host0(
        &c,
        &[
            "-H",
            "host0:2,host1:2,host2:2",
            &p,
            "transports",
            "0,0,1,1,2,2",
        ],
        &[],
        60,
    );
    assert_eq!(out.code(), 0, "{out}");
    for r in 0..6u32 {
        let l = out.rank_lines(r);
        assert_eq!(l.len(), 1, "{out}");
        assert!(
            l[0].starts_with(&format!("ok transports rank {r} host host{} ", r / 2)),
            "{out}"
        );
    }
    // The collectives table (every collective, every algorithm, checked results) across hosts.
    let table = test_program("rt_table");
    let out = run_on_host0(
        &c,
        &[
            "-H",
            "host0:2,host1:2,host2:2",
            "-x",
            "RT_TABLE=small",
            "-x",
            "RT_NODES=3",
            "-x",
            "RT_TUNER_FREE=1",
            &table,
        ],
        &[],
        300,
    );
    assert_eq!(out.code(), 0, "{out}");
    assert!(
        out.rank_lines(0).iter().any(|l| l.starts_with("ok table")),
        "{out}"
    );
    // Three nodes as the table saw them (RT_NODES): placement, hier, TCP bytes.
    for r in 0..6u32 {
        let prefix = format!("ok nodes 3 rank {r} on host{}", r / 2);
        assert!(
            out.rank_lines(r).iter().any(|l| l.starts_with(&prefix)),
            "rank {r}: no line {prefix:?}\n{out}"
        );
    }
}

#[test]
fn hostfile_map_by_node_and_default_rank_count() {
    let Some(c) = Cluster::up_or_skip(3) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("rcT-hostfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hf = dir.join("hosts");
    std::fs::write(
        &hf,
        "# fake hosts\nhost0 slots=1\nhost1 slots=2\nhost2 slots=1 # last\n",
    )
    .unwrap();
    let p = prog();
    // -n 3 by node: ranks 0,1,2 on host0, host1, host2.
    let out = run_on_host0(
        &c,
        &[
            "--hostfile",
            hf.to_str().unwrap(),
            "--map-by",
            "node",
            "-n",
            "3",
            &p,
            "transports",
            "0,1,2",
        ],
        &[],
        60,
    );
    assert_eq!(out.code(), 0, "{out}");
    for r in 0..3u32 {
        assert!(
            out.rank_lines(r)[0].contains(&format!("host host{r} ")),
            "{out}"
        );
    }
    // No -n: every slot (4 ranks).
    let out = run_on_host0(
        &c,
        &[
            "--hostfile",
            hf.to_str().unwrap(),
            "--bind-to",
            "none",
            &p,
            "transports",
            "0,1,1,2",
        ],
        &[],
        60,
    );
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(out.stdout.lines().count(), 4, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A mesh on two real (fake) hosts with `--map-by node`, so consecutive world ranks alternate
/// between hosts: the placement follows the hosts, and `tp` stays on one (`rt_mesh`, as in
/// `tests/tests/mesh.rs`, without `RCOMM_HOSTID`).
#[test]
fn a_mesh_keeps_tp_on_one_host_under_map_by_node() {
    let Some(c) = Cluster::up_or_skip(2) else {
        return;
    };
    let mesh = test_program("rt_mesh");
    let out = run_on_host0(
        &c,
        &[
            "-H",
            "host0:4,host1:4",
            "--map-by",
            "node",
            "-n",
            "8",
            &mesh,
            "0,1,0,1,0,1,0,1",
            "shapes",
            "warn",
            "ep",
        ],
        &[],
        120,
    );
    assert_eq!(out.code(), 0, "{out}");
    let ok: Vec<&str> = out
        .rank_lines(0)
        .into_iter()
        .filter_map(|l| l.strip_prefix("ok "))
        .collect();
    assert_eq!(
        ok.iter().filter(|l| l.starts_with("shape ")).count(),
        6,
        "{out}"
    );
    assert!(ok.contains(&"warn") && ok.contains(&"ep"), "{out}");
    assert!(
        out.stderr
            .contains("dimension tp of size 8 spans nodes: nodes have 4 ranks"),
        "{out}"
    );
}

#[test]
fn a_rank_killed_on_host2_ends_the_job_everywhere() {
    let Some(c) = Cluster::up_or_skip(3) else {
        return;
    };
    let p = prog();
    let t0 = Instant::now();
    let out = run_on_host0(
        &c,
        &[
            "-H",
            "host0:2,host1:2,host2:2",
            "-x",
            "RT_HOLD=1",
            &p,
            "die",
            "5",
        ],
        &[],
        30,
    );
    // SIGABRT: 128 + 6; named with its host.
    assert_eq!(out.code(), 134, "{out}");
    assert!(
        out.stderr.contains("rank 5 on host2 (pid")
            && out.stderr.contains("killed by signal 6 (SIGABRT)"),
        "{out}"
    );
    assert!(out.elapsed < Duration::from_secs(10), "{out}");
    eprintln!("rank death across hosts: job over in {:?}", t0.elapsed());
}

#[test]
fn unreachable_host_bad_ssh_and_missing_program_are_named_within_10_s() {
    let Some(c) = Cluster::up_or_skip(3) else {
        return;
    };
    let p = prog();
    // A host that is down (an address nobody holds).
    let out = run_on_host0(
        &c,
        &[
            "-H",
            "host0:1,unreachable:1,host1:1",
            &p,
            "transports",
            "0,1,1",
        ],
        &[],
        30,
    );
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr
            .contains("host unreachable: cannot start rcomm-run --daemon there"),
        "{out}"
    );
    assert!(out.elapsed < Duration::from_secs(10), "{out}");
    // A failing ssh command.
    let out = Job::with_prefix(
        &c.on_host(0),
        &[
            "--ssh",
            "/nonexistent/ssh",
            "-H",
            "host0:1,host1:1",
            &p,
            "transports",
            "1",
        ],
    )
    .deadline(Duration::from_secs(30))
    .run();
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr
            .contains("host host1: cannot run the ssh command"),
        "{out}"
    );
    let bad = format!("{} -p 2", c.ssh());
    let out = Job::with_prefix(
        &c.on_host(0),
        &[
            "--ssh",
            &bad,
            "-H",
            "host0:1,host2:1",
            &p,
            "transports",
            "1",
        ],
    )
    .deadline(Duration::from_secs(30))
    .run();
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr
            .contains("host host2: cannot start rcomm-run --daemon there: ssh failed"),
        "{out}"
    );
    assert!(out.elapsed < Duration::from_secs(10), "{out}");
    // A program found on host0 (its PATH here) but not on the others (their login PATH).
    let dir = std::env::temp_dir().join(format!("rcT-only-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&p, dir.join("rt-only-here")).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = run_on_host0(
        &c,
        &[
            "-H",
            "host0:1,host1:1,host2:1",
            "rt-only-here",
            "transports",
            "1",
        ],
        &[("PATH", &path)],
        30,
    );
    assert_eq!(out.code(), 127, "{out}");
    for h in ["host1", "host2"] {
        assert!(
            out.stderr
                .contains(&format!("host {h}: rt-only-here: command not found")),
            "{out}"
        );
    }
    assert!(!out.stderr.contains("host host0:"), "{out}");
    assert!(out.elapsed < Duration::from_secs(10), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cutting_host2_off_during_allreduce_ends_the_job_naming_its_ranks() {
    let Some(c) = Cluster::up_or_skip(3) else {
        return;
    };
    let p = prog();
    let ssh = c.ssh();
    let job = Job::with_prefix(
        &c.on_host(0),
        &[
            "--ssh",
            &ssh,
            "-H",
            "host0:2,host1:2,host2:2",
            "-x",
            "RT_HOLD=1",
            &p,
            "loop",
            "60",
        ],
    )
    .deadline(Duration::from_secs(60));
    let marker = job.marker().to_string();
    let run = job.spawn();
    // Wait (bounded) until the ranks are inside the allreduce loop; the harness reads the
    // output only at the end, so poll for the ranks instead: six ranks carrying the marker.
    let t0 = Instant::now();
    while rcomm_tests::processes_with_env("RCOMMTEST_MARKER", &marker).len() < 10
        && t0.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let cut_at = Instant::now();
    c.cut(2);
    let out = run.wait();
    let after_cut = cut_at.elapsed();
    let left = c.wait_idle(Duration::from_secs(15));
    assert!(left.is_empty(), "left on the fake hosts: {left:?}\n{out}");
    assert_ne!(out.code(), 0, "{out}");
    assert!(
        out.stderr
            .contains("host host2: lost the connection to its rcomm-run daemon")
            && out.stderr.contains("its ranks 4,5 are lost"),
        "{out}"
    );
    // Survivors report errors (they hold after the first one, RT_HOLD).
    let errors: Vec<&str> = (0..4u32)
        .flat_map(|r| out.rank_lines(r))
        .filter(|l| l.starts_with("error"))
        .collect();
    // Every survivor names a rank of host2: those waiting on host2 directly, and those waiting
    // on a live neighbour stuck behind it (a collective fails as soon as any member is known
    // lost — the launcher's notice — and abandons what it still had in flight).
    assert_eq!(errors.len(), 4, "{errors:?}\n{out}");
    assert!(
        errors.iter().all(|e| e.contains("(host host2)")),
        "{errors:?}\n{out}"
    );
    assert!(after_cut < Duration::from_secs(30), "{after_cut:?}\n{out}");
    eprintln!("link cut: job over {after_cut:?} after the cut; survivor errors: {errors:?}");
}

#[test]
fn killing_the_launcher_leaves_nothing_on_any_host() {
    let Some(c) = Cluster::up_or_skip(3) else {
        return;
    };
    let p = prog();
    let ssh = c.ssh();
    let job = Job::with_prefix(
        &c.on_host(0),
        &[
            "--ssh",
            &ssh,
            "-H",
            "host0:2,host1:2,host2:2",
            &p,
            "loop",
            "60",
        ],
    )
    .deadline(Duration::from_secs(60));
    let marker = job.marker().to_string();
    let mut run = job.spawn();
    let t0 = Instant::now();
    while rcomm_tests::processes_with_env("RCOMMTEST_MARKER", &marker).len() < 10
        && t0.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = rcomm_tests::processes_with_env("RCOMMTEST_MARKER", &marker).len();
    // launcher, watchdog, 2 ssh clients, 6 ranks (and the remote ranks' daemons' watchdogs do
    // not carry the marker).
    assert!(started >= 10, "only {started} processes of the job started");
    std::thread::sleep(Duration::from_millis(500));
    // The launcher itself (nsenter, unshare and sh exec into it: same pid).
    run.child.kill().unwrap();
    let killed_at = Instant::now();
    let out = run.wait();
    let left = c.wait_idle(Duration::from_secs(10));
    assert!(left.is_empty(), "left on the fake hosts: {left:?}\n{out}");
    eprintln!(
        "launcher killed: every host idle {:?} after the kill",
        killed_at.elapsed()
    );
}

#[test]
fn the_hang_report_collects_every_hosts_flight_recorder_and_names_the_late_rank() {
    let Some(c) = Cluster::up_or_skip(2) else {
        return;
    };
    // Rank 2 (host1) never calls allreduce #4; RCOMM_TIMEOUT reaches host1's ranks as every
    // RCOMM_* variable of the launcher does.
    let hang = test_program("rt_hang");
    let out = run_on_host0(
        &c,
        &["-H", "host0:2,host1:2", &hang, "late", "20"],
        &[("RCOMM_TIMEOUT", "3s")],
        60,
    );
    assert_eq!(out.code(), 3, "{out}");
    for r in [0, 1, 3] {
        let l = out.rank_lines(r).join("\n");
        assert!(l.contains("allreduce #4 on comm world"), "rank {r}\n{out}");
    }
    let rep: String = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("rcomm-run: "))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        rep.contains("rank 2 (host1) is at allreduce #3"),
        "the late rank, named with its host\n{out}"
    );
    assert!(rep.contains("ranks 0,1,3 wait in allreduce #4"), "{out}");
}

#[test]
fn rcomm_topo_reports_every_host_and_same_kernel_hosts_bind_to_distinct_cores() {
    let Some(c) = Cluster::up_or_skip(2) else {
        return;
    };
    // Every host answers rcomm-topo (local rank 0 of each, prefixed with its host name).
    let topo = test_program("rcomm-topo");
    let out = run_on_host0(&c, &["-H", "host0:2,host1:1", &topo, "--json"], &[], 60);
    assert_eq!(out.code(), 0, "{out}");
    let mut reported: Vec<String> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_once("\"reported_by\":\"")?.1.split('"').next())
        .map(str::to_string)
        .collect();
    reported.sort();
    assert_eq!(reported, ["host0", "host1"], "{out}");
    // The fake hosts share this kernel (one boot id): by default their ranks are planned
    // together, so with one rank each on this 2-core machine they get distinct cores instead of
    // both taking core 0.
    let out = run_on_host0(
        &c,
        &[
            "-H",
            "host0:1,host1:1",
            "--report-bindings",
            "sh",
            "-c",
            "grep Cpus_allowed_list /proc/self/status",
        ],
        &[],
        60,
    );
    assert_eq!(out.code(), 0, "{out}");
    let cpus: Vec<String> = (0..2u32)
        .map(|r| {
            let l = out.rank_lines(r);
            let l = l
                .iter()
                .find_map(|l| l.split_once("Cpus_allowed_list:"))
                .unwrap_or_else(|| panic!("rank {r} printed no affinity\n{out}"));
            l.1.trim().to_string()
        })
        .collect();
    assert!(
        cpus.iter().all(|c| c.parse::<u32>().is_ok()),
        "each rank bound to one CPU: {cpus:?}\n{out}"
    );
    assert_ne!(cpus[0], cpus[1], "{out}");
}

#[test]
fn across_hosts_without_rdma_auto_falls_back_to_tcp_once_and_forced_ib_says_why() {
    // No host here has an RDMA device (no /sys/class/infiniband): `auto` logs the fall-back
    // once per rank under RCOMM_DEBUG_SUBSYS=NET and runs over TCP; `ib` is an init error on
    // every rank, naming what is missing, within seconds.
    let Some(c) = Cluster::up_or_skip(2) else {
        return;
    };
    let p = prog();
    let args = |t: &'static str| -> Vec<String> {
        [
            "-H",
            "host0:1,host1:1",
            "-x",
            "RCOMM_DEBUG=INFO",
            "-x",
            "RCOMM_DEBUG_SUBSYS=NET",
            "-x",
            t,
            &p,
            "transports",
            "0,1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let a = args("RCOMM_TRANSPORT=auto");
    let a: Vec<&str> = a.iter().map(|s| s.as_str()).collect();
    let out = run_on_host0(&c, &a, &[], 60);
    assert_eq!(out.code(), 0, "{out}");
    let fell_back = out
        .stderr
        .lines()
        .filter(|l| l.contains("ib not used (no RDMA devices in /sys/class/infiniband); TCP"))
        .count();
    assert_eq!(fell_back, 2, "one line per rank\n{out}");
    for r in 0..2u32 {
        assert!(
            out.rank_lines(r)[0].starts_with(&format!("ok transports rank {r} host host{r} ")),
            "{out}"
        );
    }
    let f = args("RCOMM_TRANSPORT=ib");
    let f: Vec<&str> = f.iter().map(|s| s.as_str()).collect();
    let t0 = Instant::now();
    let out = run_on_host0(&c, &f, &[], 60);
    assert_ne!(out.code(), 0, "{out}");
    assert!(rcomm_tests::says_no_rdma(&out.stderr), "{out}");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}
