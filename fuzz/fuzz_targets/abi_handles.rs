#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mpi_abi::fuzzing::handles(data));
