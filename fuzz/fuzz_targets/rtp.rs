#![no_main]
//! libFuzzer target: `vigil_tests::fuzz::targets::rtp_and_rtcp`, seeds in `tests/fuzz/rtp/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| vigil_tests::fuzz::targets::rtp_and_rtcp(data));
