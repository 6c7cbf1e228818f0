//! §A.5 REM (Random Early Migration) on a VCR-induced load change: one step.
//!
//! `rem_step` runs steps 1–5 once and proposes at most one migration. §A.5 step 6 ("update
//! both nodes' estimated loads; go to 1") belongs to the caller: it applies the migration
//! with [`apply_migration`] (which sets both estimates) and calls `rem_step` again with the
//! same reporting node until it returns `None`. Each further step draws again from the RNG,
//! so a node well inside the band sheds streams one probabilistic step at a time, as RED
//! drops packets, and stops as soon as it is no longer above σ.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::config::SchedConfig;
use crate::load::{delta_load, load_state, quadratic_mean, stream_factor, LoadState};
use crate::similarity::{cache_hit, fd_positions};
use crate::view::{ClusterView, NodeId, Request, RequestKind, Stream, StreamSource};
use crate::ClusterError;

/// Moves proposed for one report at most (each is a real session handoff); the node's REM
/// loop and the simulator's stop there.
pub const MAX_STEPS: usize = 8;

/// A proposed move of one running stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Migration {
    pub from: NodeId,
    pub to: NodeId,
    /// Index of the stream in `from`'s `streams` at decision time.
    pub stream_index: usize,
    /// The stream as it will run on `to` (source = cache on an expected hit there).
    pub stream: Stream,
    /// §A.5 step 6: Load(from) − its share of the stream.
    pub from_load: f64,
    /// Load(to) + ΔLoad.
    pub to_load: f64,
    pub reason: String,
}

/// §A.5 eq. 7: 0 below Load_min, P_max·(Load − Load_min)/(Load_max − Load_min) in the band,
/// 1 from Load_max on.
pub fn rem_probability(load: f64, cfg: &SchedConfig) -> f64 {
    if load < cfg.load_min {
        0.0
    } else if load < cfg.load_max {
        cfg.p_max * (load - cfg.load_min) / (cfg.load_max - cfg.load_min)
    } else {
        1.0
    }
}

/// One REM step for `reporting` (§A.5 steps 1–5). `None`: nothing to do (not a high node,
/// no stream, the draw said stop, or no low node can take the stream without overload).
pub fn rem_step(
    view: &ClusterView,
    reporting: &str,
    cfg: &SchedConfig,
    rng: &mut impl Rng,
) -> Option<Migration> {
    let h = view.index_of(reporting)?;
    if !view.node(h).alive {
        return None;
    }
    // Step 1: σ over the alive nodes; only a high node (Load > σ) migrates.
    let alive: Vec<usize> = (0..view.len()).filter(|&i| view.node(i).alive).collect();
    let loads: Vec<f64> = alive.iter().map(|&i| view.load(i)).collect();
    let sigma = quadratic_mean(&loads);
    let load_h = view.load(h);
    if load_h <= sigma {
        return None;
    }
    // Step 2: A := low nodes; the stream whose camera has the smallest FD on h (it loses
    // the least cache benefit by leaving). Ties: the larger VBR (relieves more), then order.
    let mut a: Vec<usize> = alive
        .iter()
        .copied()
        .filter(|&i| view.load(i) < sigma)
        .collect();
    let node_h = view.node(h);
    let (k, _) = node_h
        .streams
        .iter()
        .enumerate()
        // Live viewers are not playbacks: they do not move by REM.
        .filter(|(_, s)| s.source != StreamSource::Live)
        .map(|(k, s)| {
            (
                k,
                fd_positions(view.positions(h, &s.camera), s.position_ms, cfg),
                s.vbr_bps,
            )
        })
        .reduce(|x, y| {
            if y.1 < x.1 || (y.1 == x.1 && y.2 > x.2) {
                y
            } else {
                x
            }
        })
        .map(|(k, f, _)| (k, f))?;
    let s = &node_h.streams[k];
    let p = rem_probability(load_h, cfg);
    if rng.gen::<f64>() >= p {
        return None;
    }
    let req = Request {
        camera: s.camera.clone(),
        time_ms: s.position_ms,
        vbr_bps: s.vbr_bps,
        kind: RequestKind::Playback,
    };
    let mut b: Vec<(usize, f64)> = view
        .playing(&s.camera)
        .iter()
        .filter(|(i, _)| a.contains(i))
        .map(|(i, pos)| (*i, fd_positions(pos, s.position_ms, cfg)))
        .collect();
    let w = view.weights();
    loop {
        // Step 3: A = ∅ → stop; B = ∅ → least load of A. Step 4: max FD of B.
        let cand = match b.iter().copied().reduce(|x, y| {
            if y.1 > x.1 || (y.1 == x.1 && view.load(y.0) < view.load(x.0)) {
                y
            } else {
                x
            }
        }) {
            Some((i, _)) => i,
            None => a
                .iter()
                .copied()
                .reduce(|x, y| if view.load(y) < view.load(x) { y } else { x })?,
        };
        // Step 5: never migrate onto an overload.
        let hit = cache_hit(view, cand, &req, cfg);
        let to_load = view.load(cand) + delta_load(s.vbr_bps, view.node(cand).bord_bps, hit, w);
        if load_state(to_load, cfg) == LoadState::Overloaded {
            a.retain(|&i| i != cand);
            b.retain(|&(i, _)| i != cand);
            continue;
        }
        let freed = w.net * 100.0 * stream_factor(s.source) * s.vbr_bps / node_h.bord_bps;
        let to = &view.node(cand).id;
        return Some(Migration {
            from: node_h.id.clone(),
            to: to.clone(),
            stream_index: k,
            stream: Stream {
                source: if hit {
                    StreamSource::Cache
                } else {
                    StreamSource::Storage
                },
                ..s.clone()
            },
            from_load: (load_h - freed).max(0.0),
            to_load,
            reason: format!(
                "REM: {} load {load_h:.1} > σ {sigma:.1} (p={p:.2}); camera {} @{} ms to {to}, est {to_load:.1}",
                node_h.id, s.camera, s.position_ms
            ),
        });
    }
}

/// §A.5 step 6: moves the stream in the view and sets both nodes' estimated loads.
pub fn apply_migration(view: &mut ClusterView, m: &Migration) -> Result<(), ClusterError> {
    let from = view
        .index_of(&m.from)
        .ok_or_else(|| ClusterError::UnknownNode(m.from.clone()))?;
    let to = view
        .index_of(&m.to)
        .ok_or_else(|| ClusterError::UnknownNode(m.to.clone()))?;
    let ok = view
        .node(from)
        .streams
        .get(m.stream_index)
        .is_some_and(|s| s.camera == m.stream.camera && s.position_ms == m.stream.position_ms);
    if !ok {
        return Err(ClusterError::StaleMigration(m.from.clone(), m.stream_index));
    }
    view.remove_stream(from, m.stream_index);
    view.push_stream(to, m.stream.clone());
    view.set_estimate(from, m.from_load);
    view.set_estimate(to, m.to_load);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probability_band_by_hand() {
        // Load_min 50, Load_max 95, P_max 0.8: p(72.5) = 0.8·22.5/45 = 0.4;
        // p(86) = 0.8·36/45 = 0.64; p(49.9) = 0; p(95) = 1.
        let c = SchedConfig::default();
        assert_eq!(rem_probability(49.9, &c), 0.0);
        assert_eq!(rem_probability(50.0, &c), 0.0);
        assert!((rem_probability(72.5, &c) - 0.4).abs() < 1e-12);
        assert!((rem_probability(86.0, &c) - 0.64).abs() < 1e-12);
        assert!(rem_probability(94.999, &c) < 0.8);
        assert_eq!(rem_probability(95.0, &c), 1.0);
        assert_eq!(rem_probability(120.0, &c), 1.0);
    }
}
