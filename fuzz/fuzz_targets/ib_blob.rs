#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rcomm_transport::fuzzing::ib_blob(data));
