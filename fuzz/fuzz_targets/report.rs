#![no_main]
//! libFuzzer target: `vigil_tests::fuzz::targets::gossip_report`, seeds in `tests/fuzz/report/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| vigil_tests::fuzz::targets::gossip_report(data));
