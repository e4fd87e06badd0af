#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rcomm_launcher::ctl::fuzzing::to_daemon(data));
