//! `[storage.emulate] read_mbps` (issue 8 §1): a node with a read bandwidth set reads a
//! recording's segments no faster than that rate. An export of the whole recording reads
//! every segment from storage once (`segment_once`), so it cannot end before the segments'
//! bytes have passed the emulated link: bytes / rate, less the one refill the bucket starts
//! with. Only that lower bound is asserted: a slow machine makes the export slower, never
//! faster, and without the emulation the same export of about 1 MB ends in a few ms.

use std::path::Path;
use std::time::Instant;

use vigil_tests::export::{export_path, http_get, synthetic_recording};
use vigil_tests::NodeBuilder;

/// Total size of the segment files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).expect("read dir").flatten() {
        let ty = e.file_type().expect("file type");
        if ty.is_dir() {
            total += bytes_under(&e.path());
        } else if ty.is_file() && !e.file_name().to_string_lossy().starts_with('.') {
            total += e.metadata().expect("metadata").len();
        }
    }
    total
}

#[test]
fn segment_reads_are_paced_by_the_emulated_read_bandwidth() {
    let root = tempfile::tempdir().expect("root");
    let t0 = 1_700_000_000_000;
    let (first, last) = synthetic_recording(root.path(), "synth", t0, 12);
    let bytes = bytes_under(&root.path().join("cameras").join("synth"));
    assert!(bytes > 100_000, "{bytes} bytes recorded");
    // A rate that needs about 2 s for the whole recording.
    let mbps = (bytes as f64 * 8.0 / 2.0 / 1e6 * 10.0).ceil() / 10.0;
    let node = NodeBuilder::new()
        .extra(&format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 4.0\n\n[storage.emulate]\nread_mbps = {mbps}\n",
            root.path().display()
        ))
        .start();
    let started = Instant::now();
    let answer = http_get(&node, &export_path("synth", first, last, false));
    let took = started.elapsed().as_secs_f64();
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert!(
        answer.body.len() as u64 > bytes / 2,
        "an export of {} bytes for {bytes} recorded",
        answer.body.len()
    );
    let rate = mbps * 1e6 / 8.0;
    let floor = (bytes as f64 - rate * 0.01) / rate;
    assert!(
        took >= floor,
        "{bytes} bytes read in {took:.3} s at read_mbps = {mbps}: at least {floor:.3} s expected"
    );
    assert!(
        node.log().contains("limited read bandwidth"),
        "the node says it emulates storage"
    );
}
