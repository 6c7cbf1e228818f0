mod common;

use common::*;
use std::time::Duration;
use vigil_storage::Store;

fn record(store: &Store, cam: &str, t0: i64, secs: i64) {
    let mut rec = store.recorder(cam, header()).unwrap();
    write_all(&mut rec, av_frames(t0, secs));
    rec.finish().unwrap();
}

#[test]
fn by_age_then_by_bytes_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "n1", config()).unwrap();
    record(&store, "cam1", T0, 20);
    record(&store, "cam2", T0 + 10_000, 20);
    let all = store.total_bytes().unwrap();

    let aged = retaining(dir.path(), Some(Duration::from_secs(65)), None);
    // Cutoff T0 + 15 s: cam1's first three segments and cam2's first end before it.
    let r = aged.enforce_retention(T0 + 80_000).unwrap();
    assert_eq!(r.deleted_segments, 4);
    assert_eq!(r.cameras, vec!["cam1".to_string(), "cam2".to_string()]);
    assert_eq!(store.total_bytes().unwrap(), all - r.deleted_bytes);
    assert_eq!(store.index("cam1").unwrap().first_ms(), Some(T0 + 12_000));
    assert_eq!(store.index("cam2").unwrap().first_ms(), Some(T0 + 14_000));
    assert_eq!(
        aged.enforce_retention(T0 + 80_000)
            .unwrap()
            .deleted_segments,
        0
    );

    // Remaining by start: cam1@12, cam2@14, cam1@16, cam2@18, cam2@22, cam2@26.
    let mut remaining: Vec<_> = ["cam1", "cam2"]
        .iter()
        .flat_map(|c| store.index(c).unwrap().segments().collect::<Vec<_>>())
        .collect();
    remaining.sort_by_key(|m| m.start_ms);
    let total: u64 = remaining.iter().map(|m| m.bytes).sum();
    let budget = total - remaining[..3].iter().map(|m| m.bytes).sum::<u64>();
    let sized = retaining(dir.path(), None, Some(budget));
    let r = sized.enforce_retention(T0 + 80_000).unwrap();
    assert_eq!(r.deleted_segments, 3);
    assert_eq!(r.cameras, vec!["cam1".to_string(), "cam2".to_string()]);
    assert_eq!(sized.total_bytes().unwrap(), budget);
    for m in &remaining[..3] {
        assert!(!dir.path().join(&m.file).exists());
    }
    let left: Vec<i64> = ["cam1", "cam2"]
        .iter()
        .flat_map(|c| {
            store
                .index(c)
                .unwrap()
                .segments()
                .map(|m| m.start_ms)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(left.len(), 3);
    assert!(left.iter().all(|s| *s >= remaining[3].start_ms));
}

/// The registry's per-camera settings: a camera's own age limit (or none) over the store's,
/// and its own segment length for recorders started after it was set.
#[test]
fn a_camera_keeps_its_own_age_limit_and_segment_length() {
    use std::collections::HashMap;
    use vigil_storage::CameraSettings;
    let dir = tempfile::tempdir().unwrap();
    let store = retaining(dir.path(), Some(Duration::from_secs(65)), None);
    store.set_camera_settings(HashMap::from([
        (
            "short".to_string(),
            CameraSettings {
                segment_duration: Some(Duration::from_secs(2)),
                retention_max_age: Some(Some(Duration::from_secs(50))),
            },
        ),
        (
            "forever".to_string(),
            CameraSettings {
                retention_max_age: Some(None),
                ..CameraSettings::default()
            },
        ),
    ]));
    for cam in ["short", "forever", "store"] {
        record(&store, cam, T0, 20);
    }
    // Segments of 2 s for "short", the store's 4 s for the others.
    let lens = |cam: &str| -> Vec<i64> {
        store
            .index(cam)
            .unwrap()
            .segments()
            .map(|m| m.end_ms - m.start_ms)
            .collect()
    };
    assert!(
        lens("short").iter().all(|&l| l == 2000),
        "{:?}",
        lens("short")
    );
    assert!(
        lens("store").iter().all(|&l| l == 4000),
        "{:?}",
        lens("store")
    );
    // At T0 + 80 s: the store's cutoff is T0 + 15 s, "short"'s T0 + 30 s, "forever" none.
    let r = store.enforce_retention(T0 + 80_000).unwrap();
    assert_eq!(r.cameras, vec!["short".to_string(), "store".to_string()]);
    assert_eq!(store.index("short").unwrap().segments().count(), 0);
    assert_eq!(store.index("store").unwrap().first_ms(), Some(T0 + 12_000));
    assert_eq!(store.index("forever").unwrap().first_ms(), Some(T0));
}
