mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use vigil_storage::{StorageError, Store};

fn tmp_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    files_ending(root, ".tmp")
}

/// Runs the crash writer on `root` (node w1, camera cam, then `extra` arguments), SIGKILLs it
/// once it reported three closed segments, and returns their start times.
fn kill_after_three_segments(root: &std::path::Path, extra: &[&str]) -> Vec<i64> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_storage-crash-writer"))
        .args([root.to_str().unwrap(), "w1", "cam"])
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut reported = Vec::new();
    while reported.len() < 3 {
        let line = lines.next().expect("writer exited early").unwrap();
        reported.push(line.trim_start_matches("segment ").parse::<i64>().unwrap());
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reported
}

#[test]
fn forgotten_recorder_is_repaired_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "n1", config()).unwrap();
    let mut rec = store.recorder("cam", header()).unwrap();
    let closed = write_all(&mut rec, av_frames(T0, 10));
    assert_eq!(closed.len(), 2);
    // Simulates kill -9: no Drop, the third segment stays a temp file, the lease stays live.
    std::mem::forget(rec);
    assert_eq!(tmp_files(dir.path()).len(), 1);
    drop(store);

    // Another node must neither touch the live writer's temp file nor get the camera.
    let other = Store::open(dir.path(), "n2", config()).unwrap();
    assert_eq!(tmp_files(dir.path()).len(), 1);
    assert!(matches!(
        other.recorder("cam", header()),
        Err(StorageError::LeaseHeld { holder, .. }) if holder == "n1"
    ));

    // The restarted node repairs: temp gone, earlier segments listed and readable.
    let store = Store::open(dir.path(), "n1", config()).unwrap();
    assert!(tmp_files(dir.path()).is_empty());
    let ix = store.index("cam").unwrap();
    assert_eq!(ix.segments().collect::<Vec<_>>(), closed);
    for m in ix.segments() {
        store.read_segment("cam", &m).unwrap();
    }
    assert_eq!(other.index("cam").unwrap().len(), 2);
    // And takes its camera back at once.
    let mut rec = store.recorder("cam", header()).unwrap();
    write_all(&mut rec, av_frames(T0 + 20_000, 5));
    rec.finish().unwrap();
    assert_eq!(store.index("cam").unwrap().len(), 4);
}

#[test]
fn sigkilled_writer_process_loses_only_the_open_segment() {
    let dir = tempfile::tempdir().unwrap();
    let reported = kill_after_three_segments(dir.path(), &[]);

    let reader = Store::open(dir.path(), "reader", config()).unwrap();
    assert!(matches!(
        reader.recorder("cam", header()),
        Err(StorageError::LeaseHeld { holder, .. }) if holder == "w1"
    ));
    let store = Store::open(dir.path(), "w1", config()).unwrap();
    assert!(tmp_files(dir.path()).is_empty());
    let ix = store.index("cam").unwrap();
    assert!(ix.len() >= reported.len());
    let starts: Vec<i64> = ix.segments().map(|m| m.start_ms).collect();
    for s in &reported {
        assert!(starts.contains(s));
    }
    for m in ix.segments() {
        let seg = store.read_segment("cam", &m).unwrap();
        assert!(seg.frames[0].keyframe);
        assert_eq!(seg.frames.len() as u32, m.frames);
    }
    for w in starts.windows(2) {
        assert!(w[0] < w[1]);
    }
    store.recorder("cam", header()).unwrap().finish().unwrap();
}

/// Group commit, `kill -9` while a closed segment waits for its pass (the writer's third
/// pass never syncs): the waiting segment is complete in the page cache, which outlives the
/// process, and the next owner of the camera renames it into place. Only the open segment
/// is lost, as without group commit; nothing listed is torn.
#[test]
fn sigkilled_group_commit_loses_only_the_open_segment() {
    let dir = tempfile::tempdir().unwrap();
    let reported = kill_after_three_segments(dir.path(), &["group"]);

    // The third segment's pass never ran: it is a temp file, not listed.
    let listed = files_ending(dir.path(), ".seg");
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(!tmp_files(dir.path()).is_empty());

    let store = Store::open(dir.path(), "w1", config()).unwrap();
    assert!(tmp_files(dir.path()).is_empty());
    let ix = store.index("cam").unwrap();
    let starts: Vec<i64> = ix.segments().map(|m| m.start_ms).collect();
    for s in &reported {
        assert!(starts.contains(s), "segment {s} lost: {starts:?}");
    }
    for m in ix.segments() {
        let seg = store.read_segment("cam", &m).unwrap();
        assert!(seg.frames[0].keyframe);
        assert_eq!(seg.frames.len() as u32, m.frames);
    }
    for w in ix.segments().collect::<Vec<_>>().windows(2) {
        assert!(w[0].end_ms <= w[1].start_ms, "overlap: {w:?}");
    }
}
