//! The index of a week of recordings: one camera with 7 days of 4 s segments (151 200 files
//! in 168 hour directories, empty: only their names matter to the index).
//!
//! - `open`: a fresh `Store` lists everything (what the first DESCRIBE of a camera after a
//!   node start pays);
//! - `refresh`: `index()` on a warm store listing the camera directory again (what a DESCRIBE
//!   pays when the index is older than `index_fresh`); `refresh_fresh`: within it;
//! - `refresh_after_commit`: a segment appears in the newest hour from another node, while a
//!   playback session holds a snapshot of the index;
//! - `segment_at`: the lookup of a DESCRIBE's start time.
//!
//! The files are made once under the system temp dir and kept between runs.

use criterion::{criterion_group, criterion_main, Criterion};
use std::path::PathBuf;
use vigil_storage::{Store, StoreConfig};

const SEGMENTS: i64 = 7 * 24 * 900;
const LEN_MS: i64 = 4000;
const T0: i64 = 1_700_000_000_000 / 3_600_000 * 3_600_000;

fn root() -> PathBuf {
    let root = std::env::temp_dir().join(format!("vigil-index-bench-{SEGMENTS}"));
    let done = root.join("complete");
    if !done.exists() {
        let store = Store::open(&root, "bench", StoreConfig::default()).unwrap();
        store
            .create_synthetic_segments("cam", T0, SEGMENTS as usize, LEN_MS, 1_000_000)
            .unwrap();
        std::fs::write(&done, b"").unwrap();
    }
    root
}

fn bench_index(c: &mut Criterion) {
    let root = root();
    let mut g = c.benchmark_group("index_week");
    g.sample_size(10);
    g.bench_function("open", |b| {
        b.iter(|| {
            let store = Store::open(&root, "bench", StoreConfig::default()).unwrap();
            assert_eq!(store.index("cam").unwrap().len(), SEGMENTS as usize);
        })
    });
    let fresh = Store::open(&root, "bench", StoreConfig::default()).unwrap();
    fresh.index("cam").unwrap();
    g.sample_size(50);
    g.bench_function("refresh_fresh", |b| b.iter(|| fresh.index("cam").unwrap()));
    let config = StoreConfig {
        index_fresh: std::time::Duration::ZERO,
        ..StoreConfig::default()
    };
    let store = Store::open(&root, "bench", config).unwrap();
    store.index("cam").unwrap();
    g.bench_function("refresh", |b| b.iter(|| store.index("cam").unwrap()));
    let snapshot = store.index("cam").unwrap();
    let mut n = 0;
    g.bench_function("refresh_after_commit", |b| {
        b.iter(|| {
            // The next segment after the week, as another node commits it.
            let start = T0 + (SEGMENTS + n) * LEN_MS;
            n += 1;
            store
                .create_synthetic_segments("cam", start, 1, LEN_MS, 10)
                .unwrap();
            store.index("cam").unwrap()
        })
    });
    drop(snapshot);
    let ix = store.index("cam").unwrap();
    let mut t = T0;
    g.bench_function("segment_at", |b| {
        b.iter(|| {
            t = T0 + (t - T0 + 7_777_777) % (SEGMENTS * LEN_MS);
            ix.segment_at(t).unwrap().start_ms
        })
    });
    g.finish();
    // The refresh_after_commit files go, so the next run starts from the same week.
    for d in std::fs::read_dir(root.join("cameras/cam"))
        .unwrap()
        .flatten()
    {
        for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
            if f.file_name()
                .to_string_lossy()
                .ends_with("_10_00000000.seg")
            {
                let _ = std::fs::remove_file(f.path());
            }
        }
        let _ = std::fs::remove_dir(d.path()); // only the emptied hours past the week
    }
}

criterion_group!(benches, bench_index);
criterion_main!(benches);
