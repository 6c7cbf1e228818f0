//! §A.3 request similarity: f(x) (eq. 4) and FD (eq. 5), from current playback positions
//! or, for the cache-aware policy, from the resident cached ranges.

use crate::config::SchedConfig;
use crate::view::{CachedRanges, ClusterView, Request};

/// §A.3 eq. 4: 1 up to T_min, linear down to 0 at T_max, 0 beyond (x in ms, x ≥ 0).
pub fn f(x_ms: i64, cfg: &SchedConfig) -> f64 {
    if x_ms <= cfg.t_min_ms {
        1.0
    } else if x_ms >= cfg.t_max_ms {
        0.0
    } else {
        (cfg.t_max_ms - x_ms) as f64 / (cfg.t_max_ms - cfg.t_min_ms) as f64
    }
}

/// §A.3 eq. 5: FD = Σ_k f(|T − T_k|) over the node's streams of the camera, T_k the
/// *current* playback position (the document's choice: that is what the cache holds).
pub fn fd_positions(positions: &[i64], t_ms: i64, cfg: &SchedConfig) -> f64 {
    positions
        .iter()
        .map(|&p| f(t_ms.abs_diff(p).min(i64::MAX as u64) as i64, cfg))
        .sum()
}

/// Distance from T to a cached range [start, end]: 0 inside, else to the nearer edge.
pub fn range_distance(t_ms: i64, (start, end): (i64, i64)) -> i64 {
    if t_ms < start {
        start - t_ms
    } else if t_ms > end {
        t_ms - end
    } else {
        0
    }
}

/// Cache-aware FD (issue 4, policy `cache-aware`): Σ over the camera's resident ranges of
/// f(distance from T to the range). Choice: one term per *range*, not per segment, so a long
/// contiguous range counts as one cache "stream" the way a playing stream does in eq. 5, and
/// a range that contains T scores the full 1; a node holding several disjoint ranges near T
/// scores higher, as several nearby streams would.
pub fn fd_cached(ranges: &[(i64, i64)], t_ms: i64, cfg: &SchedConfig) -> f64 {
    ranges
        .iter()
        .map(|&r| f(range_distance(t_ms, r), cfg))
        .sum()
}

/// FD(node i, req) from playback positions (§A.3).
pub fn fd(view: &ClusterView, i: usize, req: &Request, cfg: &SchedConfig) -> f64 {
    fd_positions(view.positions(i, &req.camera), req.time_ms, cfg)
}

/// [`fd_cached`] over a node's indexed ranges: only the ranges within T_max of T count
/// (f is 0 beyond), and the index finds them by binary search (issue 13: the scan of every
/// range of every node holding the camera was 10.8 µs at 50 nodes × 100 000 sessions).
pub fn fd_indexed(c: &CachedRanges, t_ms: i64, cfg: &SchedConfig) -> f64 {
    fd_cached(c.near(t_ms, cfg.t_max_ms), t_ms, cfg)
}

/// FD(node i, req) from cached ranges (cache-aware).
pub fn fd_cache(view: &ClusterView, i: usize, req: &Request, cfg: &SchedConfig) -> f64 {
    view.cached_ranges_of(i, &req.camera)
        .map_or(0.0, |c| fd_indexed(c, req.time_ms, cfg))
}

/// k of §A.4's ΔLoad: will the request hit node i's cache? Choice: yes if a resident range
/// of the camera lies within T_max of T, or a stream of the camera plays within T_max of T
/// (f > 0: its segments pass through the cache now, read-ahead or just behind).
pub fn cache_hit(view: &ClusterView, i: usize, req: &Request, cfg: &SchedConfig) -> bool {
    let near = |d: i64| d < cfg.t_max_ms;
    view.positions(i, &req.camera)
        .iter()
        .any(|&p| near(req.time_ms.abs_diff(p).min(i64::MAX as u64) as i64))
        || view.cached_ranges_of(i, &req.camera).is_some_and(|c| {
            c.near(req.time_ms, cfg.t_max_ms)
                .iter()
                .any(|&r| near(range_distance(req.time_ms, r)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f_by_hand() {
        // T_min 100, T_max 10 000: f(100) = 1; f(5 050) = (10 000 − 5 050)/9 900 = 0.5;
        // f(1 090) = 8 910/9 900 = 0.9; f(10 000) = 0.
        let c = SchedConfig::default();
        assert_eq!(f(0, &c), 1.0);
        assert_eq!(f(100, &c), 1.0);
        assert!((f(5_050, &c) - 0.5).abs() < 1e-12);
        assert!((f(1_090, &c) - 0.9).abs() < 1e-12);
        assert_eq!(f(10_000, &c), 0.0);
        assert_eq!(f(50_000, &c), 0.0);
    }

    #[test]
    fn fd_by_hand() {
        // T = 60 000; positions 60 050 (x=50 → 1), 55 000 (x=5 000 → 5 000/9 900 = 0.50505),
        // 65 050 (x=5 050 → 4 950/9 900 = 0.5), 90 000 (x=30 000 → 0). FD = 2.00505.
        let c = SchedConfig::default();
        let fd = fd_positions(&[60_050, 55_000, 65_050, 90_000], 60_000, &c);
        assert!((fd - (1.0 + 5_000.0 / 9_900.0 + 0.5)).abs() < 1e-12, "{fd}");
    }

    #[test]
    fn cached_fd_by_hand() {
        // T = 60 000; range [50 000, 70 000] contains T → 1; range [70 100, 80 000] is
        // 10 100 away → 0; range [0, 54 950] is 5 050 away → 4 950/9 900 = 0.5. FD = 1.5.
        let c = SchedConfig::default();
        let r = [(50_000, 70_000), (70_100, 80_000), (0, 54_950)];
        assert!((fd_cached(&r, 60_000, &c) - 1.5).abs() < 1e-12);
        assert_eq!(range_distance(10, (20, 30)), 10);
        assert_eq!(range_distance(40, (20, 30)), 10);
        assert_eq!(range_distance(25, (20, 30)), 0);
    }
}
