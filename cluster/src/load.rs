//! §A.1 node load (eq. 1, 2) and its states, §A.2 balance metric (eq. 3), §A.5 σ (eq. 6).

use serde::{Deserialize, Serialize};

use crate::config::{LoadWeights, SchedConfig};
use crate::records::{NodeView, StreamSource};

/// §A.1 states of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadState {
    /// Load < Load_min.
    Light,
    /// Load_min ≤ Load ≤ Load_max.
    Moderate,
    /// Load > Load_max.
    Overloaded,
}

/// §A.1: `light` below Load_min, `overloaded` above Load_max, `moderate` otherwise.
pub fn load_state(load: f64, cfg: &SchedConfig) -> LoadState {
    if load < cfg.load_min {
        LoadState::Light
    } else if load > cfg.load_max {
        LoadState::Overloaded
    } else {
        LoadState::Moderate
    }
}

/// §A.1 eq. 2: N = Σ_mem VBR/Bord + 2·Σ_ipsan VBR/Bord. A storage-read stream costs its
/// bitrate twice (read in from IPSAN, sent out to the viewer). Not clamped: an estimate above
/// 1 is what tells the scheduler the node is beyond its link.
pub fn net_utilisation(node: &NodeView) -> f64 {
    if node.bord_bps <= 0.0 {
        return if node.streams.is_empty() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let bits: f64 = node
        .streams
        .iter()
        .map(|s| s.vbr_bps * stream_factor(s.source))
        .sum();
    bits / node.bord_bps
}

/// k of §A.4's ΔLoad: 1 for a cache-served stream, 2 for one read from storage.
pub fn stream_factor(source: StreamSource) -> f64 {
    match source {
        StreamSource::Cache | StreamSource::Live => 1.0,
        StreamSource::Storage => 2.0,
    }
}

/// §A.1 eq. 1: Load = 100·(w_cpu·C + w_mem·M + w_net·N), on a 0–100 scale.
pub fn node_load(node: &NodeView, w: &LoadWeights) -> f64 {
    100.0 * (w.cpu * node.cpu + w.mem * node.mem + w.net * net_utilisation(node))
}

/// §A.4 step 4: ΔLoad = w_net·100·k·VBR/Bord, k = 1 on a cache hit, 2 otherwise.
pub fn delta_load(vbr_bps: f64, bord_bps: f64, cache_hit: bool, w: &LoadWeights) -> f64 {
    let k = if cache_hit { 1.0 } else { 2.0 };
    if bord_bps <= 0.0 {
        return f64::INFINITY;
    }
    w.net * 100.0 * k * vbr_bps / bord_bps
}

/// §A.2 eq. 3: λ = (1/n)·Σ (Load_i − mean)², the population variance (lower is better).
pub fn load_variance(loads: &[f64]) -> f64 {
    if loads.is_empty() {
        return 0.0;
    }
    let n = loads.len() as f64;
    let mean = loads.iter().sum::<f64>() / n;
    loads.iter().map(|l| (l - mean) * (l - mean)).sum::<f64>() / n
}

/// §A.5 eq. 6: σ = sqrt((1/n)·Σ Load_i²), the quadratic mean load.
pub fn quadratic_mean(loads: &[f64]) -> f64 {
    if loads.is_empty() {
        return 0.0;
    }
    (loads.iter().map(|l| l * l).sum::<f64>() / loads.len() as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Stream;

    fn stream(vbr: f64, source: StreamSource) -> Stream {
        Stream {
            camera: "c".into(),
            position_ms: 0,
            vbr_bps: vbr,
            source,
            session: None,
        }
    }

    #[test]
    fn eq1_eq2_by_hand() {
        // Bord = 1 Gb/s; 100 cache streams of 2 Mb/s = 0.2; 50 storage streams of 2 Mb/s
        // counted twice = 0.2; N = 0.4. C = 0.5, M = 0.25.
        // Load = 100·(0.1·0.5 + 0.2·0.25 + 0.7·0.4) = 100·(0.05 + 0.05 + 0.28) = 38.
        let mut n = NodeView::new("n", 1e9);
        n.cpu = 0.5;
        n.mem = 0.25;
        n.streams
            .extend((0..100).map(|_| stream(2e6, StreamSource::Cache)));
        n.streams
            .extend((0..50).map(|_| stream(2e6, StreamSource::Storage)));
        assert!((net_utilisation(&n) - 0.4).abs() < 1e-12);
        let l = node_load(&n, &LoadWeights::default());
        assert!((l - 38.0).abs() < 1e-9, "{l}");
    }

    #[test]
    fn states_at_the_boundaries() {
        let c = SchedConfig::default();
        assert_eq!(load_state(49.9, &c), LoadState::Light);
        assert_eq!(load_state(50.0, &c), LoadState::Moderate);
        assert_eq!(load_state(95.0, &c), LoadState::Moderate);
        assert_eq!(load_state(95.1, &c), LoadState::Overloaded);
    }

    #[test]
    fn delta_load_by_hand() {
        // 0.7·100·2·4e6/1e9 = 0.56 (miss); half of it on a hit.
        let w = LoadWeights::default();
        assert!((delta_load(4e6, 1e9, false, &w) - 0.56).abs() < 1e-12);
        assert!((delta_load(4e6, 1e9, true, &w) - 0.28).abs() < 1e-12);
    }

    #[test]
    fn variance_and_quadratic_mean_by_hand() {
        // Loads 20, 40, 60: mean 40; λ = (400 + 0 + 400)/3 = 266.67.
        // σ = sqrt((400 + 1600 + 3600)/3) = sqrt(1866.67) = 43.205.
        let l = [20.0, 40.0, 60.0];
        assert!((load_variance(&l) - 800.0 / 3.0).abs() < 1e-9);
        assert!((quadratic_mean(&l) - (5600.0f64 / 3.0).sqrt()).abs() < 1e-9);
        assert!((quadratic_mean(&l) - 43.2049).abs() < 1e-3);
        assert_eq!(load_variance(&[]), 0.0);
    }
}
