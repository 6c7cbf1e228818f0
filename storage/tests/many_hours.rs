//! The index over many hour directories (synthetic, empty segment files: only their names
//! matter to the index), through other nodes' changes and across retention.

mod common;

use common::*;
use std::time::Duration;
use vigil_storage::Store;

const HOUR: i64 = 3_600_000;
/// 20 s segments keep the file count (and the test's time) down; the bench has a week of
/// 4 s segments.
const LEN: i64 = 20_000;

#[test]
fn index_over_forty_hours_and_retention_by_age_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = T0 / HOUR * HOUR + 1234; // not on an hour boundary
    let per_cam = (40 * HOUR / LEN) as usize; // 40 hours, 180 files an hour of 4 s segments
    let writer = Store::open(dir.path(), "n1", config()).unwrap();
    for cam in ["a", "b"] {
        writer
            .create_synthetic_segments(cam, t0, per_cam, LEN, 1000)
            .unwrap();
    }
    let reader = Store::open(dir.path(), "n2", config()).unwrap();
    let ix = reader.index("a").unwrap();
    assert_eq!(ix.len(), per_cam);
    assert_eq!(ix.total_bytes(), per_cam as u64 * 1000);
    assert_eq!(ix.first_ms(), Some(t0));
    assert_eq!(ix.last_ms(), Some(t0 + per_cam as i64 * LEN));
    assert_eq!(ix.ranges(1000), vec![(t0, t0 + per_cam as i64 * LEN)]);
    // Every 7th second of the 40 hours, across all 41 hour directories.
    for t in (t0..t0 + per_cam as i64 * LEN).step_by(7001) {
        let m = ix.segment_at(t).unwrap();
        assert!(m.start_ms <= t && t <= m.end_ms, "{t}: {m:?}");
        assert_eq!((m.start_ms - t0) % LEN, 0);
        let n = ix.next_after(&m).map(|n| n.start_ms);
        assert!(n.is_none_or(|n| n == m.end_ms));
    }
    // The file a query names is the file on disk.
    let m = ix.segment_at(t0 + 30 * HOUR).unwrap();
    assert!(dir.path().join(&m.file).is_file(), "{}", m.file.display());

    // A gap made by another node (a whole hour deleted) and new segments appended after it.
    let hole = ix.covering(t0 + 20 * HOUR, t0 + 21 * HOUR - 1);
    for m in &hole {
        std::fs::remove_file(dir.path().join(&m.file)).unwrap();
    }
    let end = t0 + per_cam as i64 * LEN;
    writer
        .create_synthetic_segments("a", end + 60_000, 10, LEN, 1000)
        .unwrap();
    let ix2 = reader.index("a").unwrap();
    assert_eq!(ix2.len(), per_cam - hole.len() + 10);
    assert_eq!(ix2.ranges(1000).len(), 3);
    assert!(ix2.covering(t0 + 20 * HOUR, t0 + 21 * HOUR - 1).len() <= 1);
    // The snapshot taken before is unchanged.
    assert_eq!(ix.len(), per_cam);

    // Retention by age: everything that ended more than 24 h before the last segment's end.
    let now = end + 60_000 + 10 * LEN;
    let aged = retaining(dir.path(), Some(Duration::from_secs(24 * 3600)), None);
    let r = aged.enforce_retention(now).unwrap();
    let cutoff = now - 24 * HOUR;
    assert_eq!(r.cameras, vec!["a", "b"]);
    for cam in ["a", "b"] {
        let ix = reader.index(cam).unwrap();
        let first = ix.first_ms().unwrap();
        assert!(ix.segment_at(first).unwrap().end_ms >= cutoff);
        assert!(
            first - LEN < cutoff,
            "{cam}: kept everything after the cutoff"
        );
    }
    // Emptied hour directories are gone with their segments.
    let hours = std::fs::read_dir(dir.path().join("cameras/b"))
        .unwrap()
        .count();
    assert!(hours <= 27, "{hours} entries left under cameras/b");

    // Retention by bytes: oldest first across the cameras, down to the budget.
    let total = reader.total_bytes().unwrap();
    let budget = total / 2;
    let sized = retaining(dir.path(), None, Some(budget));
    let r = sized.enforce_retention(now).unwrap();
    assert!(r.deleted_segments > 0);
    let left = reader.total_bytes().unwrap();
    assert!(left <= budget && left + 1000 > budget, "{left} vs {budget}");
    let firsts: Vec<i64> = ["a", "b"]
        .iter()
        .map(|c| reader.index(c).unwrap().first_ms().unwrap())
        .collect();
    // The cameras were recorded over the same time: their oldest remaining starts are
    // within one segment of each other.
    let spread = firsts.iter().max().unwrap() - firsts.iter().min().unwrap();
    assert!(spread <= LEN, "{firsts:?}");
}
