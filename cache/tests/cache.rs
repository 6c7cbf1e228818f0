//! Behaviour of the segment cache: counting, budget and LRU order, single-flight, errors,
//! read-ahead and resident ranges. No test sleeps to wait for a condition: loaders are gated
//! on `Notify`s and progress is observed through the cache's own counters.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use vigil_cache::{SegmentCache, SegmentKey, Weighted, DEFAULT_BUDGET_BYTES};

#[derive(Debug, PartialEq)]
struct Seg {
    bytes: usize,
    end_ms: i64,
}

impl Weighted for Seg {
    fn weight(&self) -> usize {
        self.bytes
    }
    fn end_ms(&self) -> i64 {
        self.end_ms
    }
}

#[derive(Debug, PartialEq)]
struct LoadFailed(&'static str);

fn key(camera: &str, start_ms: i64) -> SegmentKey {
    SegmentKey::new(camera, start_ms)
}

/// A loader that returns a 4 s segment of `bytes` at once.
fn seg(start_ms: i64, bytes: usize) -> impl std::future::Future<Output = Result<Seg, LoadFailed>> {
    std::future::ready(Ok(Seg {
        bytes,
        end_ms: start_ms + 4_000,
    }))
}

/// A loader for keys that must be answered without a storage read: calling it fails the test.
fn must_not_load(why: &'static str) -> std::future::Ready<Result<Seg, LoadFailed>> {
    panic!("{why}")
}

/// Spins (yielding to the runtime) until `cond` holds; fails after 10 s instead of hanging.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn counts_hits_and_misses() {
    let cache = SegmentCache::<Seg>::new(1_000);
    assert_eq!(cache.budget_bytes(), 1_000);
    let k = key("cam1", 0);
    assert!(cache.get(&k).is_none());
    assert_eq!(cache.stats().misses, 0, "get does not count a miss");

    let v = cache.get_or_load(k.clone(), || seg(0, 100)).await.unwrap();
    assert_eq!(v.bytes, 100);
    let again = cache
        .get_or_load(k.clone(), || must_not_load("resident key must not load"))
        .await
        .unwrap();
    assert!(Arc::ptr_eq(&v, &again));
    assert!(Arc::ptr_eq(&v, &cache.get(&k).unwrap()));
    assert!(cache.contains(&k));

    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.loads, s.load_errors), (2, 1, 1, 0));
    assert_eq!((s.bytes, s.entries, s.budget_bytes), (100, 1, 1_000));
    assert_eq!(s.load_count, 1);
}

#[tokio::test]
async fn budget_respected_and_lru_order() {
    let cache = SegmentCache::<Seg>::new(300);
    for t in [0, 4_000, 8_000] {
        cache
            .get_or_load(key("c", t), || seg(t, 100))
            .await
            .unwrap();
    }
    assert_eq!(cache.stats().bytes, 300);
    // Touch the oldest: it must survive the next insertion; the second-oldest goes.
    assert!(cache.get(&key("c", 0)).is_some());
    cache
        .get_or_load(key("c", 12_000), || seg(12_000, 100))
        .await
        .unwrap();
    assert!(cache.contains(&key("c", 0)));
    assert!(!cache.contains(&key("c", 4_000)));
    assert!(cache.contains(&key("c", 8_000)));
    assert!(cache.contains(&key("c", 12_000)));
    let s = cache.stats();
    assert_eq!((s.bytes, s.entries, s.evictions), (300, 3, 1));

    // A large entry evicts as many LRU entries as it needs: 8000 then 0 (12000 is newer).
    assert!(cache.get(&key("c", 12_000)).is_some());
    cache
        .get_or_load(key("c", 16_000), || seg(16_000, 200))
        .await
        .unwrap();
    assert!(!cache.contains(&key("c", 8_000)));
    assert!(!cache.contains(&key("c", 0)));
    assert!(cache.contains(&key("c", 12_000)));
    let s = cache.stats();
    assert_eq!((s.bytes, s.entries, s.evictions), (300, 2, 3));
    assert!(s.bytes <= s.budget_bytes);
}

/// Read-ahead that finds a segment resident starts no load but makes it most recently
/// used: the session reading ahead asks for it next, so it must outlive the segments read
/// since (left where another session's read put it, it was evicted first and that session
/// waited for storage). No hit is counted: no one asked for it yet.
#[tokio::test]
async fn read_ahead_of_a_resident_segment_keeps_it() {
    let cache = SegmentCache::<Seg>::new(300);
    for t in 0..3 {
        cache
            .get_or_load(key("c", t), || seg(t, 100))
            .await
            .unwrap();
    }
    // 0 is the least recently used.
    assert!(
        !cache.prefetch(key("c", 0), || seg(0, 100)),
        "resident: no load"
    );
    cache
        .get_or_load(key("c", 3), || seg(3, 100))
        .await
        .unwrap();
    assert!(cache.contains(&key("c", 0)), "read ahead: kept");
    assert!(!cache.contains(&key("c", 1)), "the LRU one now");
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.loads, s.prefetches), (0, 4, 4, 0));
    // `touch` is the same step for a caller that owns its reads (the simulator).
    assert!(cache.touch(&key("c", 2)));
    assert!(!cache.touch(&key("c", 1)), "not resident");
    cache
        .get_or_load(key("c", 4), || seg(4, 100))
        .await
        .unwrap();
    assert!(cache.contains(&key("c", 2)) && !cache.contains(&key("c", 0)));
}

#[tokio::test]
async fn contains_does_not_refresh_recency() {
    let cache = SegmentCache::<Seg>::new(200);
    cache
        .get_or_load(key("c", 0), || seg(0, 100))
        .await
        .unwrap();
    cache
        .get_or_load(key("c", 1), || seg(1, 100))
        .await
        .unwrap();
    assert!(cache.contains(&key("c", 0)));
    cache
        .get_or_load(key("c", 2), || seg(2, 100))
        .await
        .unwrap();
    assert!(!cache.contains(&key("c", 0)));
}

#[tokio::test]
async fn oversize_entry_returned_but_not_kept() {
    let cache = SegmentCache::<Seg>::new(300);
    cache
        .get_or_load(key("c", 0), || seg(0, 100))
        .await
        .unwrap();
    let big = cache
        .get_or_load(key("c", 4_000), || seg(4_000, 301))
        .await
        .unwrap();
    assert_eq!(big.bytes, 301);
    assert!(!cache.contains(&key("c", 4_000)));
    assert!(
        cache.contains(&key("c", 0)),
        "an oversize value evicts nothing"
    );
    let s = cache.stats();
    assert_eq!(
        (s.bytes, s.entries, s.evictions, s.oversize),
        (100, 1, 0, 1)
    );
    // Not kept, so the next request loads it again.
    cache
        .get_or_load(key("c", 4_000), || seg(4_000, 301))
        .await
        .unwrap();
    assert_eq!(cache.stats().loads, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_misses_cause_one_load() {
    let cache = SegmentCache::<Seg>::new(DEFAULT_BUDGET_BYTES);
    let loads = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (cache, loads, gate) = (cache.clone(), loads.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            cache
                .get_or_load(key("cam", 8_000), move || async move {
                    loads.fetch_add(1, SeqCst);
                    gate.notified().await;
                    Ok::<_, LoadFailed>(Seg {
                        bytes: 10,
                        end_ms: 12_000,
                    })
                })
                .await
        }));
    }
    // All 20 are inside get_or_load (1 loading, 19 waiting) before the load may finish.
    eventually("20 concurrent misses", || cache.stats().misses == 20).await;
    assert_eq!(cache.stats().coalesced, 19);
    assert!(cache.is_loading(&key("cam", 8_000)));
    gate.notify_one();
    let mut values = Vec::new();
    for t in tasks {
        values.push(t.await.unwrap().unwrap());
    }
    assert_eq!(loads.load(SeqCst), 1);
    assert!(values.iter().all(|v| Arc::ptr_eq(v, &values[0])));
    let s = cache.stats();
    assert_eq!((s.loads, s.misses, s.coalesced, s.entries), (1, 20, 19, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn error_reaches_all_waiters_and_is_not_cached() {
    let cache = SegmentCache::<Seg>::new(1_000);
    let gate = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let (cache, gate) = (cache.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            cache
                .get_or_load(key("cam", 0), move || async move {
                    gate.notified().await;
                    Err::<Seg, _>(LoadFailed("disk on fire"))
                })
                .await
        }));
    }
    eventually("5 concurrent misses", || cache.stats().misses == 5).await;
    gate.notify_one();
    let mut errors = Vec::new();
    for t in tasks {
        errors.push(t.await.unwrap().unwrap_err());
    }
    assert!(errors.iter().all(|e| Arc::ptr_eq(e, &errors[0])));
    assert_eq!(*errors[0], LoadFailed("disk on fire"));
    let s = cache.stats();
    assert_eq!((s.loads, s.load_errors, s.entries), (1, 1, 0));
    assert!(!cache.contains(&key("cam", 0)) && !cache.is_loading(&key("cam", 0)));

    // The error was not cached: the next request reads storage again, and succeeds.
    let v = cache
        .get_or_load(key("cam", 0), || seg(0, 50))
        .await
        .unwrap();
    assert_eq!(v.bytes, 50);
    let s = cache.stats();
    assert_eq!(
        (s.loads, s.load_errors, s.entries, s.load_count),
        (2, 1, 1, 2)
    );
}

#[tokio::test]
async fn prefetch_then_get_is_a_hit() {
    let cache = SegmentCache::<Seg>::new(1_000);
    let loads = Arc::new(AtomicUsize::new(0));
    let k = key("cam", 4_000);
    let l = loads.clone();
    assert!(cache.prefetch(k.clone(), move || {
        l.fetch_add(1, SeqCst);
        seg(4_000, 10)
    }));
    // Already loading (or resident): a second prefetch starts nothing.
    assert!(!cache.prefetch(k.clone(), || seg(4_000, 10)));
    eventually("prefetched segment resident", || cache.contains(&k)).await;
    assert!(!cache.prefetch(k.clone(), || seg(4_000, 10)));

    cache
        .get_or_load(k.clone(), || must_not_load("prefetched key must not load"))
        .await
        .unwrap();
    assert_eq!(loads.load(SeqCst), 1);
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.loads, s.prefetches), (1, 0, 1, 1));
}

#[tokio::test]
async fn get_or_load_joins_a_prefetch_in_flight() {
    let cache = SegmentCache::<Seg>::new(1_000);
    let gate = Arc::new(Notify::new());
    let g = gate.clone();
    assert!(cache.prefetch(key("cam", 0), move || async move {
        g.notified().await;
        Ok::<_, LoadFailed>(Seg {
            bytes: 10,
            end_ms: 4_000,
        })
    }));
    gate.notify_one();
    let v = cache
        .get_or_load(key("cam", 0), || must_not_load("must join the prefetch"))
        .await
        .unwrap();
    assert_eq!(v.end_ms, 4_000);
    let s = cache.stats();
    assert_eq!((s.loads, s.misses, s.coalesced), (1, 1, 1));
}

/// The segment a playback began at outlives the segments streamed after it; a session
/// waiting for a segment the start list's memory pushed out shrinks that list (read-ahead
/// loading one again does not); a playback beginning
/// again at a start it did not keep grows it back.
#[tokio::test]
async fn a_start_segment_outlives_streamed_segments_and_the_start_list_adapts() {
    // 500 bytes, up to 200 for start segments; segments of 100.
    let cache = SegmentCache::<Seg>::with_start_budget(500, 200);
    assert_eq!(
        cache.stats().start_limit_bytes,
        200,
        "the limit starts at the budget"
    );
    for t in [0, 1] {
        cache
            .get_or_load(key("start", t), || seg(t, 100))
            .await
            .unwrap();
        assert!(cache.protect_start(&key("start", t)));
    }
    assert!(!cache.protect_start(&key("cam", 99)), "not resident");
    // Read-ahead and reads stream through the 300 bytes left: plain LRU would have
    // evicted both starts.
    assert!(cache.prefetch(key("cam", 0), || seg(0, 100)));
    eventually("read-ahead resident", || cache.contains(&key("cam", 0))).await;
    for t in 1..=4 {
        let start = t * 4_000;
        cache
            .get_or_load(key("cam", start), || seg(start, 100))
            .await
            .unwrap();
    }
    let s = cache.stats();
    assert!(cache.contains(&key("start", 0)) && cache.contains(&key("start", 1)));
    assert!(!cache.contains(&key("cam", 0)) && !cache.contains(&key("cam", 4_000)));
    assert_eq!(
        (s.bytes, s.start_bytes, s.start_limit_bytes),
        (500, 200, 200)
    );
    // Read ahead again, an evicted segment costs a storage read but no viewer waits: the
    // limit stays.
    assert!(cache.prefetch(key("cam", 4_000), || seg(4_000, 100)));
    eventually("read-ahead resident", || cache.contains(&key("cam", 4_000))).await;
    let s = cache.stats();
    assert_eq!(
        (s.start_list_rereads, s.start_limit_bytes),
        (0, 200),
        "{s:?}"
    );
    // The first read-ahead segment is asked for after all: a session waits for a read the
    // start list cost.
    cache
        .get_or_load(key("cam", 0), || seg(0, 100))
        .await
        .unwrap();
    let s = cache.stats();
    assert_eq!(
        (s.start_list_rereads, s.start_limit_bytes, s.start_bytes),
        (1, 100, 100),
        "{s:?}"
    );
    // Start 0 was demoted to make room; a playback beginning there again gets it back.
    assert!(cache.contains(&key("start", 0)));
    assert!(cache.protect_start(&key("start", 0)));
    let s = cache.stats();
    assert_eq!(
        (s.start_list_misses, s.start_limit_bytes, s.start_bytes),
        (1, 200, 200),
        "{s:?}"
    );
}

#[tokio::test]
async fn load_outlives_a_cancelled_caller() {
    let cache = SegmentCache::<Seg>::new(1_000);
    let gate = Arc::new(Notify::new());
    let (c, g) = (cache.clone(), gate.clone());
    let caller = tokio::spawn(async move {
        c.get_or_load(key("cam", 0), move || async move {
            g.notified().await;
            Ok::<_, LoadFailed>(Seg {
                bytes: 10,
                end_ms: 4_000,
            })
        })
        .await
    });
    eventually("load started", || cache.is_loading(&key("cam", 0))).await;
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    gate.notify_one();
    eventually("abandoned load still fills the cache", || {
        cache.contains(&key("cam", 0))
    })
    .await;
}

#[tokio::test]
async fn panicking_loader_panics_its_caller_and_waiters_retry() {
    let cache = SegmentCache::<Seg>::new(1_000);
    let gate = Arc::new(Notify::new());
    let (c, g) = (cache.clone(), gate.clone());
    let leader = tokio::spawn(async move {
        c.get_or_load(key("cam", 0), move || async move {
            g.notified().await;
            panic!("loader bug");
        })
        .await
        .map(|_: Arc<Seg>| ())
        .map_err(|_: Arc<LoadFailed>| ())
    });
    eventually("leader loading", || cache.stats().misses == 1).await;
    let c = cache.clone();
    let waiter = tokio::spawn(async move { c.get_or_load(key("cam", 0), || seg(0, 10)).await });
    eventually("waiter joined", || cache.stats().coalesced == 1).await;
    gate.notify_one();
    assert!(leader.await.unwrap_err().is_panic());
    assert_eq!(waiter.await.unwrap().unwrap().bytes, 10);
    let s = cache.stats();
    assert_eq!((s.loads, s.misses, s.entries), (2, 2, 1));
}

#[tokio::test]
async fn resident_ranges_merge_per_camera_and_split_on_gaps() {
    let cache = SegmentCache::<Seg>::new(DEFAULT_BUDGET_BYTES);
    let put = |camera: &'static str, start: i64, end: i64| {
        let cache = cache.clone();
        async move {
            cache
                .get_or_load(key(camera, start), move || async move {
                    Ok::<_, LoadFailed>(Seg {
                        bytes: 1,
                        end_ms: end,
                    })
                })
                .await
                .unwrap();
        }
    };
    // cam-a: three back-to-back segments, a 20 ms seam, then a real gap.
    put("cam-a", 8_000, 12_000).await;
    put("cam-a", 0, 4_000).await;
    put("cam-a", 4_000, 8_000).await;
    put("cam-a", 12_020, 16_000).await;
    put("cam-a", 30_000, 34_000).await;
    put("cam-b", 100, 4_100).await;

    let exact = cache.resident(0);
    assert_eq!(
        exact["cam-a"],
        vec![(0, 12_000), (12_020, 16_000), (30_000, 34_000)]
    );
    assert_eq!(exact["cam-b"], vec![(100, 4_100)]);
    assert_eq!(exact.len(), 2);

    let tolerant = cache.resident(100);
    assert_eq!(tolerant["cam-a"], vec![(0, 16_000), (30_000, 34_000)]);
    assert!(SegmentCache::<Seg>::new(10).resident(0).is_empty());
}

#[test]
fn prefetch_outside_a_runtime_is_a_no_op() {
    let cache = SegmentCache::<Seg>::new(10);
    assert!(!cache.prefetch(key("c", 0), || seg(0, 1)));
    assert_eq!(cache.stats().loads, 0);
}

#[test]
fn cache_is_send_sync_clone() {
    fn assert_traits<T: Send + Sync + Clone + 'static>() {}
    assert_traits::<SegmentCache<Seg>>();
}
