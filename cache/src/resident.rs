//! What the cache holds: two LRU lists under one byte budget.
//!
//! Only the first segment of a playback is on the viewer's critical path: a session's later
//! segments are read ahead while it plays the earlier ones, so a miss on them costs nothing
//! the viewer sees, while a miss on the first one is the storage round trip added to the
//! start (10 ms and more on a loaded IPSAN against ≈ 3 ms from memory). Under plain LRU a
//! busy node cycles its whole budget in seconds (100 sessions at 2 Mb/s move 25 MB/s), so
//! the segment where the next viewer of a recording will start has long been evicted by
//! the segments one viewer read once. This is the "prefix caching" of VOD proxies (Sen,
//! Rexford & Towsley, INFOCOM 1999) in the shape of a segmented LRU: segments where a
//! playback *began* are moved to a protected list holding at most `start_budget` bytes;
//! the rest of the budget is the recent list. Eviction takes the recent list's tail first;
//! the protected list's own overflow is demoted to the recent list's head, not dropped, so
//! a start segment leaves memory only after it has aged through both lists.
//!
//! The protected list must not starve the sessions it shares memory with: near capacity a
//! smaller recent list evicts segments (read-ahead among them) that are read again soon,
//! each a second storage read and possibly a stall. So the list's limit adapts between 0 and
//! `start_budget` as ARC (Megiddo & Modha, FAST 2003) adapts its split, from two "ghost"
//! lists of keys recently pushed out: a session waiting for a segment that is among the last
//! `start_bytes` evicted from the recent list (what a recent list as large as the whole
//! budget would still hold) shrinks the limit by its size; a playback beginning again at a
//! start segment the list did not keep grows it by its size. Both are a viewer waiting for
//! storage, so the split settles where the list costs the sessions as many waits as it
//! saves the starts. A segment read ahead again does not shrink it: a second storage read
//! that no viewer waits for is the price the list is meant to pay (counting those too kept
//! the list at a fraction of what the starts needed when many sessions share recordings). Where playbacks rarely begin
//! at the same place twice, or memory is short for the sessions, the cache falls towards
//! plain LRU; where starts repeat and memory allows, the list stays.
//!
//! Not a crate: `lru` gives the lists; the two-list policy with byte weights, demotion and
//! an adaptive split is these ~150 lines (no maintained crate offers a weighted, adaptive
//! segmented LRU with explicit promotion).

use std::sync::Arc;

use lru::LruCache;

use crate::{SegmentKey, Weighted};

pub(crate) struct Resident<V> {
    recent: LruCache<SegmentKey, Arc<V>>,
    starts: LruCache<SegmentKey, Arc<V>>,
    /// Bytes in both lists.
    bytes: usize,
    start_bytes: usize,
    budget: usize,
    start_budget: usize,
    /// The protected list's current limit, adapted within 0..=start_budget.
    start_limit: usize,
    /// Keys evicted from the recent list, newest first, at most `start_bytes` of them: what
    /// the protected list's memory pushed out.
    recent_ghosts: Ghosts,
    /// Start segments the protected list did not keep (demoted, or refused for want of
    /// room), at most `start_budget` bytes of them.
    start_ghosts: Ghosts,
    /// Sessions that waited for a recent ghost: waits the protected list cost.
    pub rereads: u64,
    /// Playbacks beginning at a start ghost: starts the list could have kept.
    pub start_misses: u64,
}

/// Keys with their sizes, bounded by bytes; oldest dropped first.
struct Ghosts {
    keys: LruCache<SegmentKey, usize>,
    bytes: usize,
}

impl Ghosts {
    fn new() -> Self {
        Self {
            keys: LruCache::unbounded(),
            bytes: 0,
        }
    }

    fn push(&mut self, key: SegmentKey, weight: usize, cap: usize) {
        if let Some(old) = self.keys.put(key, weight) {
            self.bytes -= old;
        }
        self.bytes += weight;
        self.trim(cap);
    }

    fn trim(&mut self, cap: usize) {
        while self.bytes > cap {
            let Some((_, w)) = self.keys.pop_lru() else {
                break;
            };
            self.bytes -= w;
        }
    }

    fn take(&mut self, key: &SegmentKey) -> Option<usize> {
        let w = self.keys.pop(key)?;
        self.bytes -= w;
        Some(w)
    }
}

impl<V: Weighted> Resident<V> {
    pub fn new(budget: usize, start_budget: usize) -> Self {
        let start_budget = start_budget.min(budget);
        Self {
            // Unbounded by count: the byte budget, not the entry count, decides eviction.
            recent: LruCache::unbounded(),
            starts: LruCache::unbounded(),
            bytes: 0,
            start_bytes: 0,
            budget,
            start_budget,
            start_limit: start_budget,
            recent_ghosts: Ghosts::new(),
            start_ghosts: Ghosts::new(),
            rereads: 0,
            start_misses: 0,
        }
    }

    /// The value, made most recently used in its list.
    pub fn get(&mut self, key: &SegmentKey) -> Option<&Arc<V>> {
        if self.starts.contains(key) {
            return self.starts.get(key);
        }
        self.recent.get(key)
    }

    pub fn contains(&self, key: &SegmentKey) -> bool {
        self.recent.contains(key) || self.starts.contains(key)
    }

    /// Inserts (or replaces) a loaded value in its list and evicts to the budget; returns
    /// how many entries were evicted.
    pub fn put(&mut self, key: SegmentKey, value: Arc<V>, weight: usize) -> u64 {
        // Resident again: no longer a ghost. Whether the read cost a viewer a wait was
        // decided when it was asked for (`demand_miss`), not here.
        self.recent_ghosts.take(&key);
        if let Some(old) = self.starts.peek_mut(&key) {
            let old_w = std::mem::replace(old, value).weight();
            self.start_bytes = self.start_bytes - old_w + weight;
            self.bytes = self.bytes - old_w + weight;
        } else {
            if let Some(old) = self.recent.put(key, value) {
                self.bytes -= old.weight();
            }
            self.bytes += weight;
        }
        self.demote_overflow();
        self.evict()
    }

    /// A session asked for `key` and it is not resident: the viewer waits for storage. If
    /// the key is among the last `start_bytes` evicted from the recent list, the protected
    /// list's memory caused that wait: the limit shrinks by the key's size (and the list's
    /// overflow is demoted). Returns whether it did. Read-ahead reloading a ghost does not
    /// count: it costs a storage read, which the list is allowed to trade for a start kept,
    /// but no viewer waits for it.
    pub fn demand_miss(&mut self, key: &SegmentKey) -> bool {
        let Some(w) = self.recent_ghosts.take(key) else {
            return false;
        };
        self.rereads += 1;
        self.start_limit = self.start_limit.saturating_sub(w);
        self.demote_overflow();
        true
    }

    /// A playback began at this segment: it moves to the protected list (or is refreshed
    /// there). Returns whether it is protected now: false when it is not resident, when it
    /// is larger than the list's current limit (then remembered as a start ghost) or the
    /// list is disabled (budget 0).
    pub fn protect(&mut self, key: &SegmentKey) -> bool {
        if self.starts.get(key).is_some() {
            return true;
        }
        if let Some(w) = self.start_ghosts.take(key) {
            // A start the list did not keep is asked for again: give the list its room.
            self.start_misses += 1;
            self.start_limit = (self.start_limit + w).min(self.start_budget);
        }
        let Some(weight) = self.recent.peek(key).map(|v| v.weight()) else {
            return false;
        };
        if weight > self.start_limit {
            if weight <= self.start_budget {
                self.start_ghosts
                    .push(key.clone(), weight, self.start_budget);
            }
            return false;
        }
        let Some((key, value)) = self.recent.pop_entry(key) else {
            return false;
        };
        self.start_bytes += weight;
        self.starts.put(key, value);
        self.demote_overflow();
        true
    }

    /// The protected list's overflow goes to the head of the recent list (total unchanged).
    fn demote_overflow(&mut self) {
        while self.start_bytes > self.start_limit {
            let Some((key, value)) = self.starts.pop_lru() else {
                break;
            };
            let w = value.weight();
            self.start_bytes -= w;
            self.start_ghosts.push(key.clone(), w, self.start_budget);
            self.recent.put(key, value);
        }
        self.recent_ghosts.trim(self.start_bytes);
    }

    /// Drops least recently used entries, the recent list's first, until within budget.
    fn evict(&mut self) -> u64 {
        let mut evicted = 0;
        while self.bytes > self.budget {
            let (key, old) = match self.recent.pop_lru() {
                Some(e) => e,
                None => match self.starts.pop_lru() {
                    Some(e) => {
                        self.start_bytes -= e.1.weight();
                        e
                    }
                    None => break,
                },
            };
            let w = old.weight();
            self.bytes -= w;
            evicted += 1;
            self.recent_ghosts.push(key, w, self.start_bytes);
        }
        evicted
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn start_bytes(&self) -> usize {
        self.start_bytes
    }

    pub fn start_limit(&self) -> usize {
        self.start_limit
    }

    pub fn len(&self) -> usize {
        self.recent.len() + self.starts.len()
    }

    /// Every resident entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&SegmentKey, &Arc<V>)> {
        self.recent.iter().chain(self.starts.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct W(usize);
    impl Weighted for W {
        fn weight(&self) -> usize {
            self.0
        }
        fn end_ms(&self) -> i64 {
            0
        }
    }

    fn key(s: i64) -> SegmentKey {
        SegmentKey::new("c", s)
    }

    fn put(r: &mut Resident<W>, s: i64, w: usize) -> u64 {
        r.put(key(s), Arc::new(W(w)), w)
    }

    #[test]
    fn a_protected_start_outlives_segments_read_after_it() {
        // 400 bytes, 100 of them for starts; segments of 100.
        let mut r = Resident::new(400, 100);
        put(&mut r, 0, 100);
        assert!(r.protect(&key(0)));
        // Six more segments stream through: plain LRU would have evicted segment 0.
        for s in 1..=6 {
            put(&mut r, s, 100);
        }
        assert!(r.contains(&key(0)));
        assert!(!r.contains(&key(1)) && !r.contains(&key(3)));
        assert!(r.contains(&key(4)) && r.contains(&key(6)));
        assert_eq!((r.bytes(), r.start_bytes(), r.len()), (400, 100, 4));
    }

    #[test]
    fn the_protected_lists_overflow_is_demoted_to_the_head_of_the_recent_list() {
        let mut r = Resident::new(300, 100);
        for s in 0..3 {
            put(&mut r, s, 100);
        }
        assert!(r.protect(&key(0)));
        // Protecting 1 overflows the 100-byte list: 0 goes to the recent list's head,
        // after 2, which was read before the demotion.
        assert!(r.protect(&key(1)));
        assert_eq!(r.start_bytes(), 100);
        assert_eq!(put(&mut r, 3, 100), 1);
        assert!(!r.contains(&key(2)), "older than the demoted start");
        assert!(r.contains(&key(0)) && r.contains(&key(1)) && r.contains(&key(3)));
        assert_eq!(put(&mut r, 4, 100), 1);
        assert!(
            !r.contains(&key(0)),
            "the demoted start ages out like any other"
        );
        assert!(r.contains(&key(1)), "the protected one stays");
    }

    #[test]
    fn protection_off_or_too_big_is_plain_lru() {
        let mut r = Resident::new(200, 0);
        put(&mut r, 0, 100);
        assert!(!r.protect(&key(0)));
        put(&mut r, 1, 100);
        put(&mut r, 2, 100);
        assert!(!r.contains(&key(0)));
        let mut r = Resident::new(400, 100);
        put(&mut r, 0, 150);
        assert!(!r.protect(&key(0)), "larger than the protected list");
        assert!(!r.protect(&key(9)), "not resident");
        assert_eq!(r.start_bytes(), 0);
    }

    #[test]
    fn replacing_a_protected_value_keeps_the_byte_totals() {
        let mut r = Resident::new(400, 200);
        put(&mut r, 0, 100);
        assert!(r.protect(&key(0)));
        put(&mut r, 0, 150);
        assert_eq!((r.bytes(), r.start_bytes(), r.len()), (150, 150, 1));
        // Only the protected list left: over budget it is evicted too.
        let mut r = Resident::new(100, 100);
        put(&mut r, 0, 100);
        assert!(r.protect(&key(0)));
        assert_eq!(put(&mut r, 1, 100), 1);
        assert!(
            !r.contains(&key(1)),
            "the recent list's tail goes first, even if new"
        );
        assert!(r.contains(&key(0)));
    }

    #[test]
    fn a_segment_read_again_that_the_protected_list_pushed_out_shrinks_it() {
        // 400 bytes, up to 200 for starts; segments of 100.
        let mut r = Resident::new(400, 200);
        put(&mut r, 0, 100);
        put(&mut r, 1, 100);
        assert!(r.protect(&key(0)) && r.protect(&key(1)));
        // The recent list has 200 bytes: 10, 11, then 12 evicts 10, 13 evicts 11.
        for s in 10..=13 {
            put(&mut r, s, 100);
        }
        assert!(!r.contains(&key(10)) && !r.contains(&key(11)));
        assert_eq!((r.rereads, r.start_limit()), (0, 200));
        // Read ahead again, 10 costs a read but no wait: the limit stays.
        put(&mut r, 10, 100);
        assert_eq!((r.rereads, r.start_limit()), (0, 200));
        put(&mut r, 14, 100);
        put(&mut r, 15, 100);
        assert!(!r.contains(&key(10)), "evicted again");
        // Now a session waits for 10: a 400-byte recent list would still hold it. The limit
        // falls to 100 and start 0 (the protected tail) is demoted.
        assert!(r.demand_miss(&key(10)));
        assert!(!r.demand_miss(&key(10)), "counted once");
        assert_eq!((r.rereads, r.start_limit(), r.start_bytes()), (1, 100, 100));
        put(&mut r, 10, 100);
        // The ghosts are now bounded by the 100 protected bytes: only the newest eviction
        // counts. 13 is evicted first, then 10, 0 and 20: 13 is forgotten.
        for s in 20..=23 {
            put(&mut r, s, 100);
        }
        assert!(
            !r.demand_miss(&key(13)),
            "evicted too long ago to be the list's cost"
        );
        assert_eq!(r.rereads, 1);
    }

    #[test]
    fn a_playback_beginning_again_at_a_start_not_kept_grows_the_list_back() {
        let mut r = Resident::new(400, 200);
        put(&mut r, 0, 100);
        put(&mut r, 1, 100);
        put(&mut r, 2, 100);
        assert!(r.protect(&key(0)) && r.protect(&key(1)));
        // A wait for a segment the list pushed out shrinks the limit to 100: 0 is demoted
        // and becomes a start ghost.
        put(&mut r, 3, 100);
        put(&mut r, 4, 100);
        assert!(r.demand_miss(&key(2)));
        put(&mut r, 2, 100);
        assert_eq!((r.start_limit(), r.start_bytes()), (100, 100));
        assert!(r.contains(&key(0)), "demoted, still resident");
        // A playback begins at 0 again: the list gets its room back and keeps both.
        assert!(r.protect(&key(0)));
        assert_eq!(
            (r.start_misses, r.start_limit(), r.start_bytes()),
            (1, 200, 200)
        );
        // At limit 0 a start is refused, remembered, and kept when it is asked again.
        let mut r = Resident::new(400, 100);
        put(&mut r, 0, 100);
        put(&mut r, 5, 100);
        assert!(r.protect(&key(5)));
        for s in 6..=9 {
            put(&mut r, s, 100);
        }
        assert!(r.demand_miss(&key(6)));
        put(&mut r, 6, 100);
        assert_eq!(r.start_limit(), 0, "a wait took the only 100 bytes");
        put(&mut r, 0, 100);
        assert!(!r.protect(&key(0)), "no room");
        assert!(r.protect(&key(0)), "asked again: room made");
        assert_eq!(r.start_limit(), 100);
    }
}
