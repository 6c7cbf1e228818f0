#![no_main]
//! libFuzzer target: `vigil_tests::fuzz::targets::rtcp_compound`, seeds in `tests/fuzz/rtcp/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| vigil_tests::fuzz::targets::rtcp_compound(data));
