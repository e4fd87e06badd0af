//! The in-CI fuzzer of the control channel's decoders (`rcomm_launcher::ctl::fuzzing`), as
//! `rcomm-transport/tests/decoders.rs` does for the transport's: random bytes, mutations of
//! valid streams, and a replay of `fuzz/corpus/ctl_*`; no panic, allocation bounded by what
//! arrived (a counting allocator), no hang.

use proptest::prelude::*;
use rcomm_launcher::ctl::fuzzing::{TARGETS, seeds};
use rcomm_transport::fuzzing::{Counting, Target, check, mutate};
use std::path::PathBuf;

#[global_allocator]
static ALLOC: Counting = Counting;

fn target(name: &str) -> &'static Target {
    TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("a ctl target")
}

fn corpus() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus"))
}

#[test]
fn control_channel_decoders_replay_their_committed_corpus() {
    for t in TARGETS {
        let n = rcomm_transport::fuzzing::replay_dir(t, &corpus().join(t.name))
            .unwrap_or_else(|e| panic!("{}: {e}", t.name));
        assert!(n > 0, "{}: empty corpus", t.name);
        for f in std::fs::read_dir(corpus().join(t.name)).unwrap() {
            check(t, &std::fs::read(f.unwrap().path()).unwrap());
        }
    }
}

#[test]
fn control_channel_seeds_decode_and_refusals_are_clean() {
    for (name, _, data) in seeds() {
        check(target(name), &data);
    }
}

/// Writes `fuzz/corpus/ctl_*` (see the transport's `write_seed_corpus`).
#[test]
#[ignore = "writes the committed corpus; run by hand after a format change"]
fn write_ctl_seed_corpus() {
    for (t, name, data) in seeds() {
        let dir = corpus().join(t);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), data).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_on_the_control_channel_are_refused_cleanly(data in proptest::collection::vec(any::<u8>(), 0..1500)) {
        for t in TARGETS {
            check(t, &data);
        }
    }

    #[test]
    fn mutated_control_streams_are_decoded_or_refused_cleanly(
        pick in any::<usize>(),
        rnd in proptest::collection::vec(any::<u64>(), 1..6),
    ) {
        let s = seeds();
        let (name, _, seed) = &s[pick % s.len()];
        let m = mutate(seed, &rnd);
        check(target(name), &m);
        for t in TARGETS {
            check(t, &m);
        }
    }
}
