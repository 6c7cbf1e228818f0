#![no_main]
//! libFuzzer target: `vigil_tests::fuzz::targets::onvif_response`, seeds in `tests/fuzz/onvif/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| vigil_tests::fuzz::targets::onvif_response(data));
