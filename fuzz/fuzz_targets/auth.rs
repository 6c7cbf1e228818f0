#![no_main]
//! libFuzzer target: `vigil_tests::fuzz::targets::auth_headers`, seeds in `tests/fuzz/auth/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| vigil_tests::fuzz::targets::auth_headers(data));
