mod common;

use common::*;
use std::time::Duration;
use vigil_storage::{StorageError, Store, StoreConfig};

fn short_ttl() -> StoreConfig {
    StoreConfig {
        lease_ttl: Duration::from_millis(600),
        ..config()
    }
}

#[test]
fn one_writer_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(dir.path(), "node-a", short_ttl()).unwrap();
    let b = Store::open(dir.path(), "node-b", short_ttl()).unwrap();
    let mut rec = a.recorder("cam", header()).unwrap();

    // B sees each segment A finishes, incrementally.
    let mut seen = 0;
    for (i, f) in av_frames(T0, 13).into_iter().enumerate() {
        if rec.write(f).unwrap().is_some() {
            seen += 1;
            let ix = b.index("cam").unwrap();
            assert_eq!(ix.len(), seen);
            let last = ix.segments().last().unwrap();
            b.read_segment("cam", &last).unwrap();
        }
        // A writes in real time for a while: its renewals keep B out past the TTL.
        if i % 40 == 0 && i < 40 * 25 {
            std::thread::sleep(Duration::from_millis(50));
            match b.recorder("cam", header()) {
                Err(StorageError::LeaseHeld {
                    holder,
                    expires_in_ms,
                    ..
                }) => {
                    assert_eq!(holder, "node-a");
                    assert!(expires_in_ms > 0 && expires_in_ms <= 600);
                }
                other => panic!(
                    "expected LeaseHeld, got {:?}",
                    other.map(|r| r.camera().to_string())
                ),
            }
        }
    }
    assert_eq!(seen, 3);
    rec.finish().unwrap();
    assert_eq!(b.index("cam").unwrap().len(), 4);

    // Released: B takes over at once.
    let rec_b = b.recorder("cam", header()).unwrap();
    assert!(matches!(
        a.recorder("cam", header()),
        Err(StorageError::LeaseHeld { .. })
    ));
    // B dies without releasing: A waits for the expiry, then takes over.
    std::mem::forget(rec_b);
    std::thread::sleep(Duration::from_millis(700));
    let mut rec = a.recorder("cam", header()).unwrap();
    write_all(&mut rec, av_frames(T0 + 60_000, 5));
    rec.finish().unwrap();
    assert_eq!(b.index("cam").unwrap().len(), 6);
}

#[test]
fn stalled_writer_loses_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(dir.path(), "node-a", short_ttl()).unwrap();
    let b = Store::open(dir.path(), "node-b", short_ttl()).unwrap();
    let mut rec = a.recorder("cam", header()).unwrap();
    let frames = av_frames(T0, 10);
    let (first, rest) = frames.split_at(100);
    write_all(&mut rec, first.to_vec());
    std::thread::sleep(Duration::from_millis(700)); // A stalls past its expiry
    let rec_b = b.recorder("cam", header()).unwrap();
    let err = rest
        .iter()
        .find_map(|f| rec.write(f.clone()).err())
        .expect("the stalled writer must fail");
    assert!(matches!(err, StorageError::LeaseLost { .. }), "{err}");
    drop(rec);
    // A's open segment was discarded, nothing was committed by A, and B still holds it.
    assert!(b.index("cam").unwrap().is_empty());
    assert!(files_ending(dir.path(), ".tmp").is_empty());
    assert!(matches!(
        a.recorder("cam", header()),
        Err(StorageError::LeaseHeld { .. })
    ));
    drop(rec_b);
}

/// A writer taking a camera over (a re-bound camera, a heal) pulls it itself and starts at
/// the newest keyframe in its own buffer, often before where the previous writer stopped:
/// it resumes at the first keyframe at or after the stored end instead, so no media is
/// stored twice and no two segments overlap (found on the bed of hosts, issue 25).
#[test]
fn a_writer_taking_over_starts_after_what_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(dir.path(), "node-a", short_ttl()).unwrap();
    let b = Store::open(dir.path(), "node-b", short_ttl()).unwrap();
    let mut rec = a.recorder("cam", header()).unwrap();
    write_all(&mut rec, av_frames(T0, 5));
    rec.finish().unwrap();
    let a_end = b.index("cam").unwrap().last_ms().unwrap();
    assert!(a_end > T0 + 4_000, "A's last segment ends at {a_end}");
    // B's buffer starts within A's last segment (keyframes every second from T0 + 4480).
    let mut rec_b = b.recorder("cam", header()).unwrap();
    write_all(&mut rec_b, av_frames(T0 + 4_480, 4));
    rec_b.finish().unwrap();
    let segs: Vec<_> = b.index("cam").unwrap().segments().collect();
    for w in segs.windows(2) {
        assert!(
            w[1].start_ms >= w[0].end_ms,
            "segments overlap: {:?} then {:?}",
            (w[0].start_ms, w[0].end_ms),
            (w[1].start_ms, w[1].end_ms)
        );
    }
    // B's first segment starts at its first keyframe at or after A's end.
    let first_keyframe_after = (T0 + 4_480..).step_by(1_000).find(|&t| t >= a_end).unwrap();
    let b_first = segs.iter().find(|s| s.start_ms >= T0 + 4_480).unwrap();
    assert_eq!(b_first.start_ms, first_keyframe_after);
    // A writer resuming its own camera (a reconnect) follows the same rule.
    let mut again = b.recorder("cam", header()).unwrap();
    let before = b.index("cam").unwrap().len();
    write_all(&mut again, av_frames(T0 + 6_000, 2));
    again.finish().unwrap();
    assert_eq!(
        b.index("cam").unwrap().len(),
        before,
        "re-stored what was stored"
    );
}

/// Nodes starting together on a fresh root all open it: none reads the layout marker while
/// another is still writing it (a two-node lab run once failed on an empty marker).
#[test]
fn nodes_opening_a_fresh_root_at_once_all_succeed() {
    for round in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
        let opens: Vec<_> = (0..6)
            .map(|i| {
                let (root, barrier) = (dir.path().to_path_buf(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    Store::open(&root, &format!("node-{i}"), config()).map(|_| ())
                })
            })
            .collect();
        for o in opens {
            let r = o.join().unwrap();
            assert!(r.is_ok(), "round {round}: {r:?}");
        }
        let leftovers = files_ending(dir.path(), ".tmp");
        assert!(leftovers.is_empty(), "round {round}: {leftovers:?}");
    }
}

/// Every node that opens a root reads one id, also when they race on a fresh root; another
/// root has another id; a restart keeps it (`vigil ctl doctor` compares members by it).
#[test]
fn nodes_opening_one_root_share_its_id() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(vigil_storage::read_root_id(dir.path()).unwrap(), None);
    let ids: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let root = dir.path();
                s.spawn(move || {
                    Store::open(root, &format!("node-{i}"), config())
                        .unwrap()
                        .root_id()
                        .to_string()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(ids[0].len(), 32, "{}", ids[0]);
    assert!(ids[0].bytes().all(|b| b.is_ascii_hexdigit()), "{}", ids[0]);
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let again = Store::open(dir.path(), "node-a", config()).unwrap();
    assert_eq!(again.root_id(), ids[0]);
    assert_eq!(
        vigil_storage::read_root_id(dir.path()).unwrap().as_deref(),
        Some(ids[0].as_str())
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let other = tempfile::tempdir().unwrap();
    let b = Store::open(other.path(), "node-a", config()).unwrap();
    assert_ne!(b.root_id(), ids[0]);
}

/// Issue 44, M7: the share is unmounted while the node runs, leaving its empty mount point
/// behind. A recorder started then (a camera's start, or its retry after the write error
/// the unmount caused) must not record to the node's own disk: it is refused with the
/// reason, and nothing is created under the mount point. Once the share is back, recording
/// starts again.
#[test]
fn an_unmounted_root_is_never_recorded_to() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("share");
    let away = dir.path().join("share-elsewhere");
    std::fs::create_dir(&mount).unwrap();
    let store = Store::open(&mount, "node-a", config()).unwrap();
    let mut rec = store.recorder("cam", header()).unwrap();
    for f in av_frames(T0, 9) {
        rec.write(f).unwrap();
    }
    rec.finish().unwrap();
    // "Unmount": the share's files go away, an empty directory stays at the mount point.
    std::fs::rename(&mount, &away).unwrap();
    std::fs::create_dir(&mount).unwrap();
    match store.recorder("cam2", header()) {
        Err(e @ StorageError::RootChanged { .. }) => {
            let text = e.to_string();
            assert!(text.contains("unmounted"), "{text}");
        }
        other => panic!("expected RootChanged, got {:?}", other.map(|_| ())),
    }
    assert!(
        std::fs::read_dir(&mount).unwrap().next().is_none(),
        "something was written to the empty mount point"
    );
    // Another root mounted there (a different id) is refused too.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    Store::open(&other, "node-x", config()).unwrap();
    std::fs::remove_dir(&mount).unwrap();
    std::fs::rename(&other, &mount).unwrap();
    assert!(matches!(
        store.recorder("cam", header()),
        Err(StorageError::RootChanged { found: Some(_), .. })
    ));
    // The share back: recording again.
    std::fs::rename(&mount, &other).unwrap();
    std::fs::rename(&away, &mount).unwrap();
    let mut rec = store.recorder("cam", header()).unwrap();
    for f in av_frames(T0 + 60_000, 9) {
        rec.write(f).unwrap();
    }
    rec.finish().unwrap();
}
