mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use vigil_storage::{Frame, StorageError, Store, StoreConfig};

#[test]
fn injected_enospc_discards_the_segment_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "n1", config()).unwrap();
    let mut rec = store.recorder("cam", header()).unwrap();
    let frames = av_frames(T0, 20);
    let mut closed = Vec::new();
    let mut errors = Vec::new();
    for f in frames {
        // Fail mid-segment at 6 s, and while closing the segment cut at the 15 s keyframe.
        if f.time_ms == T0 + 6_020 && f.track == 1 {
            store.inject_write_error(Some(libc::ENOSPC));
        }
        if f.time_ms == T0 + 15_000 && f.track == 0 {
            store.inject_write_error(Some(libc::EDQUOT));
        }
        let at = f.time_ms;
        match rec.write(f) {
            Ok(Some(m)) => closed.push(m),
            Ok(None) => {}
            Err(e) => {
                assert!(e.is_disk_full(), "{e}");
                assert!(files_ending(dir.path(), ".tmp").is_empty());
                errors.push(at);
            }
        }
    }
    closed.extend(rec.finish().unwrap());
    assert_eq!(errors.len(), 2, "{errors:?}");
    // [0,4) ok; [4,..) lost at 6 s; resumes at the 7 s keyframe: [7,11) ok; [11,15) lost at its
    // close (with the 15 s keyframe that closed it); resumes at 16 s.
    let starts: Vec<i64> = closed.iter().map(|m| m.start_ms - T0).collect();
    assert_eq!(starts, vec![0, 7_000, 16_000]);
    let ix = store.index("cam").unwrap();
    assert_eq!(ix.segments().collect::<Vec<_>>(), closed);
    for m in ix.segments() {
        store.read_segment("cam", &m).unwrap();
    }
}

/// Unmounts the tmpfs when the test ends, even on failure.
struct Mount<'a>(&'a Path);
impl Drop for Mount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

#[test]
fn real_full_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let ok = unsafe { libc::geteuid() } == 0
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(dir.path())
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipped: cannot mount a 1 MiB tmpfs (not root or no CAP_SYS_ADMIN)");
        return;
    }
    let _mount = Mount(dir.path());
    let cfg = StoreConfig {
        segment_duration: Duration::from_secs(1),
        retention_max_bytes: Some(300_000),
        ..config()
    };
    let store = Store::open(dir.path(), "n1", cfg).unwrap();
    let mut rec = store.recorder("cam", header()).unwrap();
    let frame = |n: i64| Frame {
        track: 0,
        keyframe: n % 25 == 0,
        time_ms: T0 + n * 40,
        media_ts: (n * 3600) as u64,
        data: bytes::Bytes::from(vec![7u8; 5_000]),
    };
    let mut n = 0;
    let err = loop {
        match rec.write(frame(n)) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 10_000, "never filled up");
    };
    assert!(matches!(err, StorageError::DiskFull { .. }), "{err}");
    assert!(files_ending(dir.path(), ".tmp").is_empty());
    let ix = store.index("cam").unwrap();
    assert!(ix.len() >= 3);
    for m in ix.segments() {
        store.read_segment("cam", &m).unwrap();
    }
    // Free space; recording resumes at the next keyframe.
    let r = store.enforce_retention(T0).unwrap();
    assert!(r.deleted_segments > 0);
    let before = store.index("cam").unwrap().len();
    let mut closed = 0;
    for k in n + 1..n + 80 {
        if rec.write(frame(k)).unwrap().is_some() {
            closed += 1;
        }
    }
    assert!(closed >= 2);
    rec.finish().unwrap();
    assert!(store.index("cam").unwrap().len() >= before + 2);
}
