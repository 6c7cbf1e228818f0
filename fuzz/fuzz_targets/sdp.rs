#![no_main]
//! libFuzzer target: `vigil_tests::fuzz::targets::sdp_parser`, seeds in `tests/fuzz/sdp/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| vigil_tests::fuzz::targets::sdp_parser(data));
