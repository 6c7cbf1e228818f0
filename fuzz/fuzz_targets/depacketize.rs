#![no_main]
//! libFuzzer target: `vigil_tests::fuzz::targets::depacketizers`, seeds in `tests/fuzz/depacketize/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| vigil_tests::fuzz::targets::depacketizers(data));
