//! The in-CI fuzzer of every decoder of untrusted bytes (`rcomm_transport::fuzzing`): random
//! bytes, structure-aware mutations of valid encodings (truncation, bit flips, huge lengths,
//! inserted and duplicated bytes) and a replay of the committed corpus (`fuzz/corpus/<target>`,
//! also the seeds of `cargo fuzz`). Each input must decode or be refused without a panic,
//! within [`Target::max_alloc`] bytes allocated at once (measured by a counting allocator, on
//! this thread), and within [`fuzzing::HANG`]. Runs in a few seconds; `PROPTEST_CASES` does not apply,
//! the case counts are fixed so CI time stays bounded. Longer runs: `cargo fuzz` (fuzz/README.md).

use proptest::prelude::*;
use rcomm_transport::fuzzing::{self, Counting, TARGETS, check};
use std::path::PathBuf;

#[global_allocator]
static ALLOC: Counting = Counting;

fn corpus() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus"))
}

#[test]
fn every_decoder_replays_its_committed_corpus() {
    for t in TARGETS {
        let dir = corpus().join(t.name);
        let mut n = 0;
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (every target has a corpus)", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files {
            check(t, &std::fs::read(&f).unwrap());
            n += 1;
        }
        assert!(n > 0, "{} is empty", dir.display());
    }
    // And the library's own walk over a folder agrees.
    let t = fuzzing::target("frame").unwrap();
    assert!(fuzzing::replay_dir(t, &corpus().join("frame")).unwrap() > 0);
}

#[test]
fn seeds_are_valid_and_every_target_has_some() {
    let seeds = fuzzing::seeds();
    for t in TARGETS {
        assert!(
            seeds.iter().any(|(n, _, _)| *n == t.name),
            "no seed for {}",
            t.name
        );
    }
    for (name, _, data) in seeds.iter().chain(&fuzzing::invalid_samples()) {
        check(fuzzing::target(name).expect("a known target"), data);
    }
}

#[test]
fn a_length_field_never_decides_what_is_allocated() {
    // Each announces far more than it carries; what is allocated follows what arrived.
    let t = fuzzing::target("read_frame").unwrap();
    for len in [1u32 << 16, 1 << 20, u32::MAX] {
        let mut f = rcomm_runtime::wire::encode_frame(1, b"abc");
        f[4..8].copy_from_slice(&len.to_le_bytes());
        check(t, &f);
        check(fuzzing::target("kvs_request").unwrap(), &f);
        check(fuzzing::target("local_recv").unwrap(), &f);
    }
}

/// Writes the seed corpus (valid seeds and invalid samples) into `fuzz/corpus/<target>/`.
/// Run after changing a format: `cargo test -p rcomm-transport --test decoders -- --ignored`.
#[test]
#[ignore = "writes the committed corpus; run by hand after a format change"]
fn write_seed_corpus() {
    for (t, name, data) in fuzzing::seeds()
        .into_iter()
        .chain(fuzzing::invalid_samples())
    {
        let dir = corpus().join(t);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), data).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_are_decoded_or_refused_cleanly(data in proptest::collection::vec(any::<u8>(), 0..1500)) {
        for t in TARGETS {
            check(t, &data);
        }
    }

    #[test]
    fn mutated_valid_encodings_are_decoded_or_refused_cleanly(
        pick in any::<usize>(),
        rnd in proptest::collection::vec(any::<u64>(), 1..6),
    ) {
        let seeds: Vec<_> = fuzzing::seeds().into_iter().chain(fuzzing::invalid_samples()).collect();
        let (name, _, seed) = &seeds[pick % seeds.len()];
        let t = fuzzing::target(name).unwrap();
        check(t, &fuzzing::mutate(seed, &rnd));
        // The same mutation fed to every other decoder: confused listeners are the norm.
        for other in TARGETS {
            check(other, &fuzzing::mutate(seed, &rnd));
        }
    }
}

/// Found by the in-CI fuzzer: a short flight dump announcing 255 names reserved 255 `String`s
/// (6 KiB) before reading any.
#[test]
fn a_short_flight_dump_announcing_many_names_reserves_little() {
    let mut input = Vec::new();
    input.extend_from_slice(&3u32.to_le_bytes()); // rank
    input.extend_from_slice(&0u32.to_le_bytes()); // host ""
    input.extend_from_slice(&7u32.to_le_bytes()); // pid
    input.extend_from_slice(&[0; 16]); // now, total
    input.extend_from_slice(&0u32.to_le_bytes()); // no communicator names
    input.push(255); // 255 names announced, none present
    fuzzing::check(fuzzing::target("flight_dump").unwrap(), &input);
}

/// Found by the in-CI fuzzer: an ib connection blob announcing 787 QP number runs, cut short
/// after the count, reserved room for all of them (6 KiB) before reading one.
#[test]
fn a_short_ib_blob_announcing_many_runs_reserves_little() {
    let (_, _, blob) = fuzzing::seeds()
        .into_iter()
        .find(|(name, _, _)| *name == "ib_blob")
        .expect("an ib_blob seed");
    // magic, version, rail count; 24 bytes per rail; PSN, ring address, slots, slot bytes,
    // QPs per peer, ranks: then the run count.
    let at = 4 + 24 * usize::from(blob[3]) + 4 + 8 + 2 + 4 + 1 + 4;
    let mut input = blob[..at].to_vec();
    input.extend_from_slice(&1000u16.to_le_bytes());
    input.extend_from_slice(&[0, 0, 0, 1, 1, 0, 0, 0]); // one run, then the input ends
    fuzzing::check(fuzzing::target("ib_blob").unwrap(), &input);
}
