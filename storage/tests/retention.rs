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
