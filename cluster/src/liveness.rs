//! Member liveness from the staleness of gossiped heartbeat counters (issue 13).
//!
//! Every gossip digest carries every member's heartbeat counter, so a member's counter
//! reaches each observer within a few rounds whether or not the two ever gossip directly. A
//! member is alive while its counter has advanced within `timeout`: a bound an operator sets
//! in milliseconds, where chitchat's phi-accrual detector divides the silence by a mean
//! interval it learnt (at 50 members a short one: a counter advances in several digests per
//! round). Measured (docs/BENCHMARKS.md, "The 50-node run"): both meet the failover target
//! on release nodes, phi somewhat faster than the 2 s default; neither holds on CPU-starved
//! nodes, where this fixed bound flaps more than phi's stretching one.
//!
//! An observer's own pause (its process starved or stopped) is not held against the others:
//! time between two observations counts at most `max_step`, so after a stall every member
//! gets a fresh chance to show its counter moved.
//!
//! Pure: the observer passes its monotonic clock in milliseconds.

use std::collections::HashMap;
use std::hash::Hash;

/// Staleness bounds: see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LivenessConfig {
    /// A member whose counter has not advanced for this long is dead.
    pub timeout_ms: u64,
    /// The most one gap between two observations counts (an observer's own stall).
    pub max_step_ms: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    heartbeat: u64,
    /// Observer time (after stall compensation) of the last advance.
    advanced_at: u64,
    /// Seen to advance at least once: a counter seen only once may be a dead member's last
    /// state still gossiped by the others.
    advanced: bool,
}

/// Heartbeat counters seen per member and when each last advanced.
#[derive(Debug, Clone)]
pub struct Liveness<K> {
    config: LivenessConfig,
    entries: HashMap<K, Entry>,
    /// Observer time: real time with each gap capped at `max_step_ms`.
    clock: u64,
    last_real: Option<u64>,
}

impl<K: Hash + Eq + Clone> Liveness<K> {
    pub fn new(config: LivenessConfig) -> Self {
        Self {
            config,
            entries: HashMap::new(),
            clock: 0,
            last_real: None,
        }
    }

    /// Records the counters seen at `now_ms` (monotonic); members not listed are forgotten.
    pub fn observe(&mut self, now_ms: u64, beats: impl IntoIterator<Item = (K, u64)>) {
        let step = self
            .last_real
            .map_or(0, |l| now_ms.saturating_sub(l).min(self.config.max_step_ms));
        self.last_real = Some(now_ms);
        self.clock += step;
        let clock = self.clock;
        let mut seen = HashMap::with_capacity(self.entries.len());
        for (k, hb) in beats {
            let e = match self.entries.remove(&k) {
                Some(mut e) => {
                    if hb > e.heartbeat {
                        e.heartbeat = hb;
                        e.advanced_at = clock;
                        e.advanced = true;
                    }
                    e
                }
                None => Entry {
                    heartbeat: hb,
                    advanced_at: clock,
                    advanced: false,
                },
            };
            seen.insert(k, e);
        }
        self.entries = seen;
    }

    /// Alive: the counter advanced at least once, and within `timeout_ms` of observer time.
    pub fn is_alive(&self, k: &K) -> bool {
        self.entries
            .get(k)
            .is_some_and(|e| e.advanced && self.clock - e.advanced_at <= self.config.timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: LivenessConfig = LivenessConfig {
        timeout_ms: 2000,
        max_step_ms: 500,
    };

    #[test]
    fn alive_after_an_advance_dead_after_the_timeout_of_silence() {
        let mut l = Liveness::new(CFG);
        l.observe(0, [("a", 5)]);
        // One value only: possibly a dead member's last state.
        assert!(!l.is_alive(&"a"));
        l.observe(100, [("a", 6)]);
        assert!(l.is_alive(&"a"));
        // Silent from t = 100: still alive at 100 + 2000, dead at 2200.
        for t in (200..=2100).step_by(100) {
            l.observe(t, [("a", 6)]);
        }
        assert!(l.is_alive(&"a"));
        l.observe(2200, [("a", 6)]);
        assert!(!l.is_alive(&"a"));
        // A lower counter (an older digest) is not an advance.
        l.observe(2300, [("a", 4)]);
        assert!(!l.is_alive(&"a"));
        l.observe(2400, [("a", 7)]);
        assert!(l.is_alive(&"a"));
    }

    #[test]
    fn an_observers_stall_counts_at_most_max_step() {
        let mut l = Liveness::new(CFG);
        l.observe(0, [("a", 1)]);
        l.observe(100, [("a", 2)]);
        // The observer stalls 10 s: counted as 500 ms, so `a` has 1.5 s left.
        l.observe(10_100, [("a", 2)]);
        assert!(l.is_alive(&"a"));
        // Then 1.5 s more of silence in 100 ms steps: exactly at the timeout, still alive;
        // one more step and it is dead.
        for t in (10_200..=11_600).step_by(100) {
            l.observe(t, [("a", 2)]);
        }
        assert!(l.is_alive(&"a"));
        l.observe(11_700, [("a", 2)]);
        assert!(!l.is_alive(&"a"));
    }

    #[test]
    fn members_no_longer_listed_are_forgotten_and_unknown_ones_dead() {
        let mut l = Liveness::new(CFG);
        l.observe(0, [("a", 1), ("b", 1)]);
        l.observe(100, [("a", 2), ("b", 2)]);
        assert!(l.is_alive(&"b"));
        l.observe(200, [("a", 3)]);
        assert!(!l.is_alive(&"b"));
        assert!(!l.is_alive(&"c"));
        // `b` back with a counter we last saw: must advance again first.
        l.observe(300, [("a", 4), ("b", 2)]);
        assert!(!l.is_alive(&"b"));
    }
}
