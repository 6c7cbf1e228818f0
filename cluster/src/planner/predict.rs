//! §D.2 prediction: next-period requests per content from the arrivals of the last Δt.
//!
//! Arrivals are Poisson: the total rate's estimate is the count over the window, and the
//! next period's total is the configured quantile of Poisson(λ·T). Popularity is Zipf: the
//! contents ranked by their arrivals, s fitted by least squares on log count against log rank
//! (a few arrivals per content are noisy; the fitted line spreads the total by rank rather
//! than repeating the noise). The total is split by the fitted shares with the largest
//! remainder, so the requests add up to the predicted total.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use statrs::distribution::{DiscreteCDF, Poisson};

/// Which sessions were seen when: a session id not seen within the window is an arrival of
/// its content. Ids are kept for the window after they were last seen, so a session that
/// drops out of the view for a moment (its report in flux while it moves between nodes) is
/// not counted twice.
#[derive(Debug, Clone, Default)]
pub struct ArrivalLog {
    seen: HashMap<String, i64>,
    arrivals: VecDeque<(i64, String)>,
    started: bool,
}

impl ArrivalLog {
    /// Records the sessions (id, content) present at `now_ms`. The first call only learns
    /// what is running: sessions already there when the scheduler took over did not arrive
    /// in its window.
    pub fn observe<'a>(
        &mut self,
        now_ms: i64,
        window_ms: u64,
        sessions: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) {
        for (id, content) in sessions {
            if self.seen.insert(id.to_string(), now_ms).is_none() && self.started {
                self.arrivals.push_back((now_ms, content.to_string()));
            }
        }
        self.started = true;
        let since = now_ms - window_ms as i64;
        self.seen.retain(|_, t| *t >= since);
        while self.arrivals.front().is_some_and(|(t, _)| *t < since) {
            self.arrivals.pop_front();
        }
    }

    /// Arrivals per content within the window ending at `now_ms`.
    pub fn counts(&self, now_ms: i64, window_ms: u64) -> BTreeMap<String, u32> {
        let since = now_ms - window_ms as i64;
        let mut c = BTreeMap::new();
        for (t, content) in &self.arrivals {
            if *t >= since {
                *c.entry(content.clone()).or_default() += 1;
            }
        }
        c
    }
}

/// What the prediction was made of, for the API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Arrivals in the window.
    pub arrivals: u32,
    /// λ: arrivals per second.
    pub rate_per_s: f64,
    /// The predicted next-period total (Poisson quantile).
    pub total: u32,
    /// The fitted Zipf exponent.
    pub zipf_s: f64,
    /// R_i per content.
    pub requests: BTreeMap<String, u32>,
}

/// R_i for the next `horizon_ms` from the `counts` of the last `window_ms`.
pub fn predict(
    counts: &BTreeMap<String, u32>,
    window_ms: u64,
    horizon_ms: u64,
    quantile: f64,
    zipf_max_s: f64,
) -> Prediction {
    let arrivals: u32 = counts.values().sum();
    if arrivals == 0 || window_ms == 0 {
        return Prediction::default();
    }
    let rate_per_s = f64::from(arrivals) / (window_ms as f64 / 1000.0);
    let mean = rate_per_s * horizon_ms as f64 / 1000.0;
    let total = poisson_quantile(mean, quantile).min(u64::from(u32::MAX)) as u32;
    let mut ranked: Vec<(&String, u32)> = counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(c, n)| (c, *n))
        .collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let s = zipf_fit(&ranked.iter().map(|(_, n)| *n).collect::<Vec<_>>()).clamp(0.0, zipf_max_s);
    let weights: Vec<f64> = (1..=ranked.len()).map(|k| (k as f64).powf(-s)).collect();
    let sum: f64 = weights.iter().sum();
    let exact: Vec<f64> = weights.iter().map(|w| f64::from(total) * w / sum).collect();
    let mut share: Vec<u32> = exact.iter().map(|x| x.floor() as u32).collect();
    let mut rest = total - share.iter().sum::<u32>();
    let mut by_rem: Vec<usize> = (0..exact.len()).collect();
    by_rem.sort_by(|&a, &b| {
        (exact[b] - exact[b].floor())
            .total_cmp(&(exact[a] - exact[a].floor()))
            .then(a.cmp(&b))
    });
    for k in by_rem {
        if rest == 0 {
            break;
        }
        share[k] += 1;
        rest -= 1;
    }
    Prediction {
        arrivals,
        rate_per_s,
        total,
        zipf_s: s,
        requests: ranked
            .iter()
            .zip(share)
            .filter(|(_, n)| *n > 0)
            .map(|((c, _), n)| ((*c).clone(), n))
            .collect(),
    }
}

/// The smallest k with P(X ≤ k) ≥ q for X ~ Poisson(mean). The search is written here
/// over statrs' CDF because statrs 0.18's `inverse_cdf` panics when the answer is 0 (its
/// bisection starts at a lower bound whose CDF already exceeds q), which a quiet camera's
/// small mean hits; 0.19 fixes it but needs a newer Rust than the workspace's.
pub fn poisson_quantile(mean: f64, q: f64) -> u64 {
    let Ok(p) = Poisson::new(mean) else {
        return 0;
    };
    if !(q > 0.0 && q < 1.0) {
        return mean.round().max(0.0) as u64;
    }
    if p.cdf(0) >= q {
        return 0;
    }
    // cdf(lo) < q ≤ cdf(hi).
    let (mut lo, mut hi) = (0u64, (mean.ceil() as u64).max(1));
    while p.cdf(hi) < q {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if p.cdf(mid) >= q {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// −slope of ln(count) on ln(rank) by least squares; 0 with fewer than two ranks. Written
/// here because it is five sums (no statistics crate needed for a line fit).
pub fn zipf_fit(sorted_counts: &[u32]) -> f64 {
    let pts: Vec<(f64, f64)> = sorted_counts
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| (((k + 1) as f64).ln(), f64::from(*n).ln()))
        .collect();
    if pts.len() < 2 {
        return 0.0;
    }
    let n = pts.len() as f64;
    let (sx, sy) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = pts.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        -sxy / sxx
    }
}
