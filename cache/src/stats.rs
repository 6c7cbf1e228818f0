//! Lock-free cache counters and the storage-read latency ring.
//!
//! Counters are plain relaxed atomics: they are read for `/metrics` and `vigil ctl cache`,
//! where a snapshot that is a few increments stale is fine, and they are bumped on the hit
//! path, which must not take a second lock or a fence.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use serde::Serialize;

/// How many recent load latencies the percentile ring keeps. 1024 loads at ≈4 s segments is
/// minutes of playback history per node: recent enough to show a storage slowdown, large
/// enough for a meaningful p99.
const LATENCY_RING: usize = 1024;

/// A point-in-time copy of the cache's counters, as served by the admin API.
///
/// `hits + misses` is the number of `get_or_load` calls (plus hits found by `get`);
/// `loads` is the number of storage reads actually started (by misses or by prefetch), so
/// `misses - coalesced` ≈ `loads - prefetches` while no read is in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Lookups answered from memory (`get_or_load` or `get` on a resident key).
    pub hits: u64,
    /// `get_or_load` calls that found the key not resident (whether they loaded or waited).
    pub misses: u64,
    /// Misses that joined a load already in flight instead of starting one (single-flight).
    pub coalesced: u64,
    /// Storage reads started (misses that led, plus prefetches).
    pub loads: u64,
    /// Storage reads started by `prefetch` (read-ahead).
    pub prefetches: u64,
    /// Storage reads that returned an error (not cached; the next request retries).
    pub load_errors: u64,
    /// Entries dropped to stay within the byte budget.
    pub evictions: u64,
    /// Loaded values larger than the whole budget: handed to the caller, never kept.
    pub oversize: u64,
    /// Bytes held (sum of `Weighted::weight` of resident entries).
    pub bytes: u64,
    /// Resident entries.
    pub entries: u64,
    /// Bytes of the segments where playbacks began, kept in the protected start list.
    pub start_bytes: u64,
    /// That list's current limit, adapted within `[cache] start_share` of the budget.
    pub start_limit_bytes: u64,
    /// Sessions that waited for a segment a recent list without the start list would still
    /// have held: what keeping start segments cost (each shrinks the limit).
    pub start_list_rereads: u64,
    /// Playbacks beginning again at a start segment the list had not kept (each grows it).
    pub start_list_misses: u64,
    /// The configured byte budget.
    pub budget_bytes: u64,
    /// Median storage-read latency over the last 1024 loads, in microseconds.
    pub load_p50_us: u64,
    /// 99th percentile storage-read latency over the last 1024 loads, in microseconds.
    pub load_p99_us: u64,
    /// Sum of all storage-read latencies since start (Prometheus summary `_sum`), µs.
    pub load_sum_us: u64,
    /// Number of completed storage reads since start (Prometheus summary `_count`).
    pub load_count: u64,
}

/// The live counters behind [`CacheStats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub coalesced: AtomicU64,
    pub loads: AtomicU64,
    pub prefetches: AtomicU64,
    pub load_errors: AtomicU64,
    pub evictions: AtomicU64,
    pub oversize: AtomicU64,
    /// Mirrors of the state under the cache lock, so `stats()` never takes that lock.
    pub bytes: AtomicUsize,
    pub entries: AtomicUsize,
    pub start_bytes: AtomicUsize,
    pub start_limit: AtomicUsize,
    pub start_rereads: AtomicU64,
    pub start_misses: AtomicU64,
    pub latency: LatencyRing,
}

impl Counters {
    /// Mirrors the resident set's sizes (called under the cache lock after a change).
    pub fn publish<V: crate::Weighted>(&self, res: &crate::resident::Resident<V>) {
        self.bytes.store(res.bytes(), Relaxed);
        self.entries.store(res.len(), Relaxed);
        self.start_bytes.store(res.start_bytes(), Relaxed);
        self.start_limit.store(res.start_limit(), Relaxed);
        self.start_rereads.store(res.rereads, Relaxed);
        self.start_misses.store(res.start_misses, Relaxed);
    }

    pub fn snapshot(&self, budget_bytes: usize) -> CacheStats {
        let (p50, p99) = self.latency.percentiles();
        CacheStats {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            coalesced: self.coalesced.load(Relaxed),
            loads: self.loads.load(Relaxed),
            prefetches: self.prefetches.load(Relaxed),
            load_errors: self.load_errors.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            oversize: self.oversize.load(Relaxed),
            bytes: self.bytes.load(Relaxed) as u64,
            entries: self.entries.load(Relaxed) as u64,
            start_bytes: self.start_bytes.load(Relaxed) as u64,
            start_limit_bytes: self.start_limit.load(Relaxed) as u64,
            start_list_rereads: self.start_rereads.load(Relaxed),
            start_list_misses: self.start_misses.load(Relaxed),
            budget_bytes: budget_bytes as u64,
            load_p50_us: p50,
            load_p99_us: p99,
            load_sum_us: self.latency.sum_us.load(Relaxed),
            load_count: self.latency.count.load(Relaxed),
        }
    }
}

/// A fixed ring of the most recent load latencies plus all-time sum and count.
///
/// A ring rather than a bucketed histogram because percentiles over recent loads are what an
/// operator looks at, and 4 KiB of atomics is cheap; writers never block each other.
pub(crate) struct LatencyRing {
    slots: Box<[AtomicU32]>,
    /// Total recorded; also the next slot index (mod the ring size).
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Default for LatencyRing {
    fn default() -> Self {
        Self {
            slots: (0..LATENCY_RING).map(|_| AtomicU32::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl LatencyRing {
    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = self.count.fetch_add(1, Relaxed) as usize % self.slots.len();
        self.slots[i].store(u32::try_from(us).unwrap_or(u32::MAX), Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    /// (p50, p99) by nearest rank over the filled part of the ring; zeros when empty.
    fn percentiles(&self) -> (u64, u64) {
        let n = (self.count.load(Relaxed) as usize).min(self.slots.len());
        if n == 0 {
            return (0, 0);
        }
        let mut v: Vec<u32> = self.slots[..n].iter().map(|s| s.load(Relaxed)).collect();
        v.sort_unstable();
        let rank = |p: usize| v[(p * n).div_ceil(100).clamp(1, n) - 1] as u64;
        (rank(50), rank(99))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let r = LatencyRing::default();
        assert_eq!(r.percentiles(), (0, 0));
        for us in 1..=100 {
            r.record(Duration::from_micros(us));
        }
        assert_eq!(r.percentiles(), (50, 99));
        assert_eq!(r.sum_us.load(Relaxed), 5050);
        assert_eq!(r.count.load(Relaxed), 100);
    }

    #[test]
    fn ring_keeps_only_recent() {
        let r = LatencyRing::default();
        for _ in 0..LATENCY_RING {
            r.record(Duration::from_micros(1_000));
        }
        for _ in 0..LATENCY_RING {
            r.record(Duration::from_micros(7));
        }
        assert_eq!(r.percentiles(), (7, 7));
        assert_eq!(r.count.load(Relaxed), 2 * LATENCY_RING as u64);
    }
}
