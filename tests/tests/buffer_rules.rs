//! MPI's buffer-length rules (docs/mpi-coverage.md, "Buffer lengths"), one test per rule,
//! through real jobs of `rt_buflen` at 1, 3 and 4 ranks over shared memory and 3 over TCP.

use rcomm_tests::{Job, test_program};
use std::time::Duration;

fn case(c: &str) {
    let prog = test_program("rt_buflen");
    for (n, t) in [(1, "shm"), (3, "shm"), (4, "shm"), (3, "tcp")] {
        let out = Job::new(n, &[prog.as_str(), c])
            .env("RCOMM_TRANSPORT", t)
            .deadline(Duration::from_secs(60))
            .run();
        assert_eq!(out.code(), 0, "{c} at {n} ranks over {t}\n{out}");
        assert!(
            out.rank_lines(0).contains(&format!("ok {c}").as_str()),
            "{c} at {n} ranks over {t}\n{out}"
        );
    }
}

#[test]
fn scatterv_send_buffer_may_be_longer_than_its_counts_address() {
    case("scatterv-send-longer");
}

#[test]
fn gatherv_and_allgatherv_send_buffers_may_be_longer_than_the_sendcount() {
    case("gatherv-send-longer");
}

#[test]
fn v_collective_receive_buffers_may_be_longer_and_keep_their_tail() {
    case("v-recv-longer");
}

#[test]
fn alltoallv_buffers_may_be_longer_than_their_counts_address() {
    case("alltoallv-longer");
}

#[test]
fn reduce_scatter_v_buffers_may_be_longer_than_their_counts_address() {
    case("reduce-scatter-v-longer");
}

#[test]
fn reduction_scan_and_alltoall_receive_buffers_may_be_longer_than_the_count() {
    case("reduce-recv-longer");
}

#[test]
fn buffers_shorter_than_their_counts_address_are_refused() {
    case("shorter-refused");
}

#[test]
fn a_receive_may_be_longer_than_the_message_and_a_shorter_one_truncates() {
    case("recv-longer-and-truncate");
}
