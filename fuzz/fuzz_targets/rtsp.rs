#![no_main]
//! libFuzzer target: `vigil_tests::fuzz::targets::rtsp`, seeds in `tests/fuzz/rtsp/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| vigil_tests::fuzz::targets::rtsp(data));
