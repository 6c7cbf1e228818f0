#![no_main]
//! libFuzzer target: `vigil_tests::fuzz::targets::segment_reader`, seeds in `tests/fuzz/segment/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| vigil_tests::fuzz::targets::segment_reader(data));
