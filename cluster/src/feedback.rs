//! §C.5 dynamic feedback period: report faster while the task count grows, slower while it
//! shrinks, within [1 s, 20 s].

use serde::{Deserialize, Serialize};

use crate::config::FeedbackConfig;

/// §C.5: ΔT = floor(|Δlinks| / 20) s (Δ < 20 ⇒ 0, < 40 ⇒ 1, < 60 ⇒ 2 …).
pub fn period_delta(delta_links: i64, cfg: &FeedbackConfig) -> u32 {
    let step = u64::from(cfg.links_per_step.max(1));
    (delta_links.unsigned_abs() / step).min(u64::from(u32::MAX)) as u32
}

/// §C.5: growing task count ⇒ T −= ΔT; shrinking ⇒ T += ΔT; clamped to [min, max].
pub fn next_period(current_s: u32, delta_links: i64, cfg: &FeedbackConfig) -> u32 {
    let d = period_delta(delta_links, cfg);
    let t = if delta_links > 0 {
        current_s.saturating_sub(d)
    } else {
        current_s.saturating_add(d)
    };
    t.clamp(cfg.min_s, cfg.max_s)
}

/// The period and the last task count, ticked once a second (§C.5 "every second").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackPeriod {
    pub period_s: u32,
    pub last_links: Option<u64>,
}

impl FeedbackPeriod {
    /// Starts at the initial T (default 10 s).
    pub fn new(cfg: &FeedbackConfig) -> Self {
        Self {
            period_s: cfg.initial_s.clamp(cfg.min_s, cfg.max_s),
            last_links: None,
        }
    }

    /// Feeds the cluster's task count for this second and returns the period to use.
    pub fn tick(&mut self, links: u64, cfg: &FeedbackConfig) -> u32 {
        if let Some(prev) = self.last_links {
            let delta = links as i64 - prev as i64;
            self.period_s = next_period(self.period_s, delta, cfg);
        }
        self.last_links = Some(links);
        self.period_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_by_hand() {
        let c = FeedbackConfig::default();
        // |Δ| = 19 → 0; 20..39 → 1; 40..59 → 2; 100 → 5.
        assert_eq!(period_delta(19, &c), 0);
        assert_eq!(period_delta(-20, &c), 1);
        assert_eq!(period_delta(39, &c), 1);
        assert_eq!(period_delta(40, &c), 2);
        assert_eq!(period_delta(100, &c), 5);
        // T = 10: +45 tasks → 10 − 2 = 8; −45 → 12; +1000 → clamp 1; −1000 → clamp 20.
        assert_eq!(next_period(10, 45, &c), 8);
        assert_eq!(next_period(10, -45, &c), 12);
        assert_eq!(next_period(10, 1000, &c), 1);
        assert_eq!(next_period(10, -1000, &c), 20);
        assert_eq!(next_period(10, 10, &c), 10);
    }

    #[test]
    fn ticks_follow_the_task_count() {
        let c = FeedbackConfig::default();
        let mut f = FeedbackPeriod::new(&c);
        // 100 → 160 (+60: −3) → 7; 160 → 240 (+80: −4) → 3; 240 → 250 (+10: 0) → 3;
        // 250 → 150 (−100: +5) → 8.
        assert_eq!(f.tick(100, &c), 10);
        assert_eq!(f.tick(160, &c), 7);
        assert_eq!(f.tick(240, &c), 3);
        assert_eq!(f.tick(250, &c), 3);
        assert_eq!(f.tick(150, &c), 8);
    }
}
