//! When to try an event again, as a pure function of the attempt number and a random draw,
//! so the schedule is tested exactly and the delivery loop only sleeps what it says.
//!
//! Exponential back-off with "equal jitter": the n-th retry waits between half and all of
//! `min(max, initial · 2ⁿ⁻¹)`. The doubling keeps a dead receiver from costing more than a
//! few attempts an hour; the jitter keeps the nodes of a cluster, which all lost the same
//! receiver at the same moment, from retrying in step.

use std::time::Duration;

/// The bounds of `[webhooks]` the schedule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial_ms: u64,
    pub max_ms: u64,
    /// Attempts per event, the first included.
    pub max_attempts: u32,
}

impl Backoff {
    pub fn of(c: &vigil_conf::WebhookConfig) -> Backoff {
        Backoff {
            initial_ms: c.backoff_initial_ms,
            max_ms: c.backoff_max_ms,
            max_attempts: c.max_attempts,
        }
    }

    /// The wait after failed attempt `failed` (1 = the first attempt failed) before the
    /// next one, `draw` in [0, 1) choosing within the jitter; None: give the event up.
    pub fn after(&self, failed: u32, draw: f64) -> Option<Duration> {
        if failed == 0 || failed >= self.max_attempts {
            return None;
        }
        let doubling = 1u64.checked_shl(failed - 1).unwrap_or(u64::MAX);
        let ceiling = self.initial_ms.saturating_mul(doubling).min(self.max_ms);
        let draw = if draw.is_finite() {
            draw.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let half = ceiling as f64 / 2.0;
        Some(Duration::from_millis((half + draw * half).round() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Backoff = Backoff {
        initial_ms: 500,
        max_ms: 30_000,
        max_attempts: 6,
    };

    #[test]
    fn doubles_from_initial_up_to_max_then_gives_up() {
        let lows: Vec<_> = (1..6).map(|n| B.after(n, 0.0)).collect();
        let highs: Vec<_> = (1..6).map(|n| B.after(n, 1.0)).collect();
        let ms = |v: &[Option<Duration>]| -> Vec<u64> {
            v.iter()
                .map(|d| d.map_or(0, |d| d.as_millis() as u64))
                .collect()
        };
        assert_eq!(ms(&highs), [500, 1000, 2000, 4000, 8000]);
        assert_eq!(ms(&lows), [250, 500, 1000, 2000, 4000]);
        assert_eq!(B.after(6, 0.5), None, "the sixth attempt was the last");
        assert_eq!(B.after(0, 0.5), None);
    }

    #[test]
    fn the_cap_holds_and_nothing_overflows() {
        let b = Backoff {
            initial_ms: 1_000,
            max_ms: 3_000,
            max_attempts: 100,
        };
        for n in 1..100 {
            let d = b.after(n, 0.999).expect("a retry");
            assert!(d <= Duration::from_millis(3_000), "{n}: {d:?}");
        }
        assert_eq!(b.after(99, 1.0), Some(Duration::from_millis(3_000)));
        assert_eq!(b.after(70, 0.0), Some(Duration::from_millis(1_500)));
        // A draw out of range is clamped, not trusted.
        assert_eq!(b.after(1, f64::NAN), Some(Duration::from_millis(500)));
        assert_eq!(b.after(1, 7.0), Some(Duration::from_millis(1_000)));
    }
}
