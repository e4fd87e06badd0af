//! The committed corpus of the `abi_handles` fuzz target (fuzz/corpus/abi_handles/),
//! replayed through the same entry point, so an input the fuzzer once found stays fixed.

#[test]
fn the_committed_corpus_replays() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/abi_handles");
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("fuzz/corpus/abi_handles") {
        let p = e.expect("entry").path();
        mpi_abi::fuzzing::handles(&std::fs::read(&p).expect("corpus file"));
        n += 1;
    }
    assert!(n > 0, "no corpus in {dir}");
}
