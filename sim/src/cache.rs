//! A node's playback cache in the simulator: the real `vigil-cache` `SegmentCache` (same
//! byte budget, same LRU order and eviction), driven synchronously.
//!
//! The simulator owns time, so it also owns single flight (a miss waits for the read in
//! flight in *virtual* time) and read-ahead; the cache only sees what a node's cache sees at
//! the instant a read completes (an insert) and when a session asks for a segment (a
//! lookup that refreshes recency).

use std::collections::BTreeMap;

use vigil_cache::{SegmentCache, SegmentKey, Weighted};

/// A segment as the cache weighs it.
pub struct Seg {
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

pub struct SimCache {
    inner: SegmentCache<Seg>,
}

impl SimCache {
    /// `start_share` of the budget keeps the segments where playbacks began.
    pub fn new(budget_bytes: f64, start_share: f64) -> Self {
        Self {
            inner: SegmentCache::with_start_budget(
                budget_bytes as usize,
                (budget_bytes * start_share) as usize,
            ),
        }
    }

    /// A playback began at this resident segment (the node's `open_segment`).
    pub fn protect_start(&self, camera: &str, start_ms: i64) -> bool {
        self.inner.protect_start(&SegmentKey::new(camera, start_ms))
    }

    /// A session asks for a segment: resident → true (and most recently used).
    pub fn get(&self, camera: &str, start_ms: i64) -> bool {
        self.inner.get(&SegmentKey::new(camera, start_ms)).is_some()
    }

    /// A session asked for a segment that is not resident and waits for its read.
    pub fn demand_miss(&self, camera: &str, start_ms: i64) {
        self.inner.demand_miss(&SegmentKey::new(camera, start_ms));
    }

    /// Read-ahead's probe: resident → true, and most recently used (the session will ask
    /// for it next), as the node's `prefetch` does.
    pub fn touch(&self, camera: &str, start_ms: i64) -> bool {
        self.inner.touch(&SegmentKey::new(camera, start_ms))
    }

    /// Resident, without touching recency (the tests' probe: the simulation itself asks by
    /// `get` or `touch`, which refresh it, as the node does).
    #[cfg(test)]
    pub fn contains(&self, camera: &str, start_ms: i64) -> bool {
        self.inner.contains(&SegmentKey::new(camera, start_ms))
    }

    /// A storage read completed: the segment enters the cache (evicting by LRU to fit).
    pub fn insert(&self, camera: &str, start_ms: i64, end_ms: i64, bytes: usize) {
        let key = SegmentKey::new(camera, start_ms);
        self.inner.insert_loaded(key, Seg { bytes, end_ms });
    }

    pub fn bytes(&self) -> usize {
        self.inner.stats().bytes as usize
    }

    pub fn evictions(&self) -> u64 {
        self.inner.stats().evictions
    }

    /// Resident ranges per camera, as the node's report carries them.
    pub fn resident(&self, max_gap_ms: i64) -> BTreeMap<String, Vec<(i64, i64)>> {
        self.inner.resident(max_gap_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_budget_and_lru_order_are_the_real_caches() {
        // Budget of 3 segments of 100 bytes.
        let c = SimCache::new(300.0, 0.0);
        for s in 0..3 {
            c.insert("a", s * 4000, s * 4000 + 4000, 100);
        }
        assert_eq!(c.bytes(), 300);
        // Touch segment 0: segment 1 is now the least recently used.
        assert!(c.get("a", 0));
        c.insert("a", 12_000, 16_000, 100);
        assert_eq!(c.bytes(), 300);
        assert_eq!(c.evictions(), 1);
        assert!(c.contains("a", 0));
        assert!(!c.contains("a", 4000));
        assert!(!c.get("a", 4000));
        assert_eq!(
            c.resident(1500).get("a").cloned(),
            Some(vec![(0, 4000), (8000, 16_000)])
        );
    }
}
