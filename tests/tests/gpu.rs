//! Device point-to-point through real `rcomm-run` jobs, on the host-memory stand-in of a GPU
//! (`RCOMM_GPU_STANDIN=1`: device buffers are host memory behind the device interface, and
//! the "IPC" import reads the peer by `process_vm_readv`, or, for pool and VMM memory, maps
//! the peer's memfd handed over the local channel) — so the device protocols (eager
//! staging, IPC GET with its caches, host staging over shm and tcp, stream ordering, a peer
//! lost mid-transfer) run here without a GPU. `scripts/gpu-check.sh` runs the same program on
//! a real GPU.

use rcomm_tests::{Job, test_program};
use std::time::{Duration, Instant};

const CASES: &[&str] = &[
    "sizes", "mixed", "stream", "realloc", "errors", "coll", "cache", "leak",
];

fn table(n: u32, env: &[(&str, &str)]) {
    let prog = test_program("rt_gpu");
    let mut job = Job::new(n, &[prog.as_str(), "table"])
        .env("RCOMM_GPU_STANDIN", "1")
        .deadline(Duration::from_secs(90));
    for (k, v) in env {
        job = job.env(k, v);
    }
    let out = job.run();
    assert_eq!(out.code(), 0, "{n} ranks, {env:?}\n{out}");
    for case in CASES {
        assert!(
            out.rank_lines(0).contains(&format!("ok {case}").as_str()),
            "case {case} at {n} ranks, {env:?}\n{out}"
        );
    }
}

#[test]
fn device_point_to_point_by_ipc_over_shared_memory_at_1_to_4_ranks() {
    for n in [1, 2, 3, 4] {
        table(n, &[("RCOMM_TRANSPORT", "shm")]);
    }
}

#[test]
fn device_point_to_point_staged_when_p2p_is_off_at_2_ranks() {
    table(2, &[("RCOMM_TRANSPORT", "shm"), ("RCOMM_P2P_LEVEL", "off")]);
}

#[test]
fn device_point_to_point_staged_over_tcp_at_3_ranks() {
    table(3, &[("RCOMM_TRANSPORT", "tcp")]);
}

/// `rt_gpu kinds`: pool and VMM memory (as frameworks allocate it) between 2 and 3 ranks: the
/// large messages by descriptor import, not staged (the program asserts the counters); the
/// default pool's memory staged with one warning per process; register / deregister.
#[test]
fn pool_and_vmm_memory_moves_by_descriptor_and_the_default_pool_stages_with_one_warning() {
    let prog = test_program("rt_gpu");
    for n in [2u32, 3] {
        let out = Job::new(n, &[prog.as_str(), "kinds"])
            .env("RCOMM_GPU_STANDIN", "1")
            .env("RCOMM_TRANSPORT", "shm")
            .deadline(Duration::from_secs(90))
            .run();
        assert_eq!(out.code(), 0, "{n} ranks\n{out}");
        for case in ["kinds", "defpool", "register"] {
            assert!(
                out.rank_lines(0).contains(&format!("ok {case}").as_str()),
                "case {case} at {n} ranks\n{out}"
            );
        }
        let all = format!("{}{}", out.stdout, out.stderr);
        let warned = all.matches("cannot be shared with node peers").count();
        assert_eq!(
            warned, n as usize,
            "one warning per rank for the default pool's memory\n{out}"
        );
        assert!(
            all.contains("CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR"),
            "the warning says how to make memory shareable\n{out}"
        );
    }
}

#[test]
fn a_rank_killed_mid_device_transfer_is_peer_lost_on_the_others() {
    let prog = test_program("rt_gpu");
    let t = Instant::now();
    let out = Job::new(3, &["--on-failure", "continue", prog.as_str(), "kill"])
        .env("RCOMM_GPU_STANDIN", "1")
        .env("RCOMM_TRANSPORT", "shm")
        .deadline(Duration::from_secs(60))
        .run();
    for r in [0, 1] {
        assert!(
            out.rank_lines(r).iter().any(|l| l.contains("ok kill")),
            "rank {r} did not see PeerLost\n{out}"
        );
    }
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "took {:?}\n{out}",
        t.elapsed()
    );
}

#[test]
fn without_a_gpu_device_buffers_are_a_clear_error() {
    let prog = test_program("rt_gpu");
    let out = Job::new(1, &[prog.as_str(), "table"])
        .env("RCOMM_GPU_STANDIN", "0")
        .deadline(Duration::from_secs(30))
        .run();
    if rcomm::gpu::backend_name() == Ok("cuda") {
        rcomm_tests::skip_hardware(
            "a CUDA device is present: the no-device error cannot be seen here",
        );
        return;
    }
    assert_ne!(out.code(), 0, "{out}");
    let all = format!("{out}");
    assert!(
        all.contains("no CUDA device is usable") && !all.contains("panicked at rcomm"),
        "{out}"
    );
}

const COLL_CASES: &[&str] = &[
    "allreduce",
    "reduce_scatter",
    "allgather",
    "bcast",
    "alltoall",
    "reduce",
    "executor",
    "group",
    "bad-op",
    "leak",
];

/// `rt_gpu_coll`: every device collective by every algorithm of the device executor (kernels
/// as host functions on the stand-in's stream queues) and staged, against sequential
/// references; with `--expect-ipc` the executor must have moved bytes by (stand-in) IPC.
fn coll_table(n: u32, env: &[(&str, &str)], expect_ipc: bool) {
    let prog = test_program("rt_gpu_coll");
    let mut args = vec![prog.as_str()];
    if expect_ipc {
        args.push("--expect-ipc");
    }
    let mut job = Job::new(n, &args)
        .env("RCOMM_GPU_STANDIN", "1")
        .deadline(Duration::from_secs(120));
    for (k, v) in env {
        job = job.env(k, v);
    }
    let out = job.run();
    assert_eq!(out.code(), 0, "{n} ranks, {env:?}\n{out}");
    for case in COLL_CASES {
        assert!(
            out.rank_lines(0).contains(&format!("ok {case}").as_str()),
            "case {case} at {n} ranks, {env:?}\n{out}"
        );
    }
}

#[test]
fn device_collectives_by_the_device_executor_over_ipc_at_1_to_8_ranks() {
    for n in [1, 2, 3, 4, 8] {
        coll_table(n, &[("RCOMM_TRANSPORT", "shm")], true);
    }
}

#[test]
fn device_collectives_staged_per_message_when_p2p_is_off_and_over_tcp() {
    coll_table(
        2,
        &[("RCOMM_TRANSPORT", "shm"), ("RCOMM_P2P_LEVEL", "off")],
        false,
    );
    coll_table(3, &[("RCOMM_TRANSPORT", "tcp")], false);
}

/// The device executor's budget: per allreduce, the launches and host waits its schedule asks
/// for and not one more (`rt_gpu_coll budget`), on 2 and 3 ranks sharing the stand-in GPU.
#[test]
fn the_device_executor_launches_and_waits_exactly_what_its_schedule_asks() {
    for n in [2u32, 3] {
        let prog = test_program("rt_gpu_coll");
        let out = Job::new(n, &[prog.as_str(), "budget"])
            .env("RCOMM_GPU_STANDIN", "1")
            .deadline(Duration::from_secs(120))
            .run();
        assert_eq!(out.code(), 0, "{n} ranks\n{out}");
        for algo in ["one_shot", "two_shot", "ring"] {
            assert!(
                out.rank_lines(0)
                    .iter()
                    .any(|l| l.trim_end().ends_with(&format!("ok budget {algo}"))),
                "{n} ranks: no budget line for {algo}\n{out}"
            );
        }
    }
}

#[test]
fn the_nccl_backend_without_libnccl_is_a_clear_error_on_every_rank() {
    let prog = test_program("rt_gpu_coll");
    let t = Instant::now();
    let out = Job::new(2, &[prog.as_str(), "nccl-missing"])
        .env("RCOMM_GPU_STANDIN", "1")
        .env("RCOMM_GPU_BACKEND", "nccl")
        .deadline(Duration::from_secs(60))
        .run();
    assert_eq!(out.code(), 0, "{out}");
    for r in [0, 1] {
        assert!(
            out.rank_lines(r)
                .iter()
                .any(|l| l.contains("libnccl could not be loaded")),
            "rank {r}\n{out}"
        );
    }
    assert!(out.rank_lines(0).contains(&"ok nccl-missing"), "{out}");
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t.elapsed()
    );
}

/// Two nodes on one machine (`RCOMM_HOSTID`): the device link class is host staging, the
/// allreduce composes the node's IPC reduce-scatter and allgather with a ring across the nodes
/// (`hier`; 3 ranks: uneven nodes, the ring), and every other device algorithm still holds.
#[test]
fn device_collectives_across_two_nodes_compose_node_and_network_legs() {
    for n in [3u32, 4] {
        let prog = test_program("rt_gpu_coll");
        let out = Job::new(
            n,
            &[
                "sh",
                "-c",
                &format!("RCOMM_HOSTID=node$((RCOMM_RANK / 2)) exec {prog}"),
            ],
        )
        .env("RCOMM_GPU_STANDIN", "1")
        .env("RCOMM_DEBUG", "INFO")
        .env("RCOMM_DEBUG_SUBSYS", "COLL")
        .deadline(Duration::from_secs(120))
        .run();
        assert_eq!(out.code(), 0, "{n} ranks on 2 nodes\n{out}");
        for case in COLL_CASES {
            assert!(
                out.rank_lines(0).contains(&format!("ok {case}").as_str()),
                "case {case} at {n} ranks on 2 nodes\n{out}"
            );
        }
        assert!(
            format!("{out}").contains(&format!(
                "device collectives on world: {n} ranks, link class host staging"
            )),
            "{out}"
        );
    }
}

/// A rank SIGKILLed while the others run device allreduces (each executor algorithm in turn):
/// every survivor's call is `PeerLost` naming it, within seconds, and the job ends.
#[test]
fn a_rank_killed_during_device_collectives_is_peer_lost_on_every_survivor() {
    for algo in ["one_shot", "two_shot", "ring"] {
        let prog = test_program("rt_gpu_coll");
        let t = Instant::now();
        let out = Job::new(
            4,
            &["--on-failure", "continue", prog.as_str(), "kill", algo],
        )
        .env("RCOMM_GPU_STANDIN", "1")
        .env("RCOMM_TRANSPORT", "shm")
        .deadline(Duration::from_secs(60))
        .run();
        for r in [0, 1, 2] {
            assert!(
                out.rank_lines(r).iter().any(|l| l.contains("ok kill")),
                "{algo}: rank {r} did not see PeerLost\n{out}"
            );
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{algo}: took {:?}\n{out}",
            t.elapsed()
        );
    }
}
