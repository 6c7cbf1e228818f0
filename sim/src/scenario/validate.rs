//! Every number a scenario run depends on, checked before the run starts: the first
//! problem comes back naming its field, so a typo fails in milliseconds.

use super::*;

impl Scenario {
    fn bad(&self, field: &'static str, why: impl Into<String>) -> ScenarioError {
        ScenarioError::Invalid {
            name: self.name.clone(),
            field,
            why: why.into(),
        }
    }

    /// Checks every number a run depends on; the first problem is returned.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        let nonneg = |v: f64| v.is_finite() && v >= 0.0;
        if self.name.trim().is_empty() {
            return Err(self.bad("name", "must not be empty"));
        }
        if self.policies.is_empty() {
            return Err(self.bad("policies", "at least one policy to run"));
        }
        for p in &self.policies {
            let arm: Arm = p
                .parse()
                .map_err(|e| self.bad("policies", format!("{p:?}: {e}")))?;
            let fits = matches!(
                (self.kind, arm),
                (Kind::Vod | Kind::Feedback, Arm::Place { .. })
                    | (Kind::Gateway, Arm::Manual | Arm::Balanced)
                    | (Kind::Planner, Arm::NoPlanner | Arm::Planner)
            );
            if !fits {
                return Err(self.bad(
                    "policies",
                    format!("{p:?} is not an arm of a {:?} scenario", self.kind),
                ));
            }
        }
        let n = &self.nodes;
        if n.count == 0 {
            return Err(self.bad("nodes.count", "at least one node"));
        }
        if !pos(n.bord_mbps) {
            return Err(self.bad("nodes.bord_mbps", format!("{} is not > 0", n.bord_mbps)));
        }
        if !pos(n.ram_mb) || !nonneg(n.ram_base_mb) || n.ram_base_mb >= n.ram_mb {
            return Err(self.bad(
                "nodes.ram_mb",
                format!(
                    "ram_mb {} must be > ram_base_mb {} ≥ 0",
                    n.ram_mb, n.ram_base_mb
                ),
            ));
        }
        if !nonneg(n.cache_mb) {
            return Err(self.bad("nodes.cache_mb", format!("{} is negative", n.cache_mb)));
        }
        if let Err(e) = vigil_conf::check_cache_start_share(n.cache_start_share) {
            return Err(self.bad("nodes.cache_start_share", e));
        }
        if !nonneg(n.cpu_per_gbps) || !nonneg(n.request_ms) {
            return Err(self.bad("nodes.cpu_per_gbps", "cpu_per_gbps and request_ms ≥ 0"));
        }
        if !n.capacity.is_empty()
            && (n.capacity.len() != n.count || !n.capacity.iter().all(|&c| pos(c)))
        {
            return Err(self.bad(
                "nodes.capacity",
                format!(
                    "{} values > 0, one per node ({} given)",
                    n.count,
                    n.capacity.len()
                ),
            ));
        }
        if n.report_ms == 0 {
            return Err(self.bad("nodes.report_ms", "must be > 0"));
        }
        if n.report_delay_ms > 60_000 {
            return Err(self.bad("nodes.report_delay_ms", "must be at most 60000 (1 min)"));
        }
        if !nonneg(self.storage.latency_ms) || !pos(self.storage.bandwidth_mbps) {
            return Err(self.bad("storage", "latency_ms must be ≥ 0 and bandwidth_mbps > 0"));
        }
        let w = &self.workload;
        if w.cameras == 0 || w.recordings_per_camera == 0 {
            return Err(self.bad("workload.cameras", "cameras and recordings ≥ 1"));
        }
        if !pos(w.recording_secs) || !pos(w.segment_secs) || w.segment_secs > w.recording_secs {
            return Err(self.bad(
                "workload.segment_secs",
                format!(
                    "segment_secs {} must be > 0 and ≤ recording_secs {}",
                    w.segment_secs, w.recording_secs
                ),
            ));
        }
        if !pos(w.bitrate_mbps) {
            return Err(self.bad("workload.bitrate_mbps", "must be > 0"));
        }
        if let Choice::Zipf { s } = w.choice {
            if !pos(s) {
                return Err(self.bad("workload.choice", format!("Zipf s = {s} must be > 0")));
            }
        }
        if !pos(w.session_mean_secs) || !nonneg(w.think_mean_secs) {
            return Err(self.bad(
                "workload.session_mean_secs",
                "session mean > 0 and think mean ≥ 0",
            ));
        }
        let mut share = 0.0;
        for v in &w.vcr {
            if !pos(v.scale) || !(0.0..=1.0).contains(&v.share) {
                return Err(self.bad(
                    "workload.vcr",
                    format!(
                        "scale {} must be > 0 and share {} in [0, 1]",
                        v.scale, v.share
                    ),
                ));
            }
            share += v.share;
        }
        if share > 1.0 + 1e-9 {
            return Err(self.bad("workload.vcr", format!("shares add up to {share} > 1")));
        }
        if !pos(w.vcr_after_mean_secs) || !nonneg(w.rtt_ms) {
            return Err(self.bad("workload.vcr_after_mean_secs", "must be > 0 (rtt_ms ≥ 0)"));
        }
        if let Err(e) = self.cluster.sched.check() {
            return Err(self.bad("cluster.sched", e));
        }
        match self.kind {
            Kind::Vod | Kind::Feedback | Kind::Gateway => {
                let Some(r) = &self.ramp else {
                    return Err(self.bad("ramp", "this kind of scenario needs [ramp]"));
                };
                if r.steps.is_empty() || r.steps.contains(&0) {
                    return Err(self.bad("ramp.steps", "one or more levels, each ≥ 1"));
                }
                if r.spread_secs
                    .is_some_and(|x| !nonneg(x) || x >= r.step_secs)
                {
                    return Err(self.bad("ramp.spread_secs", "must be in [0, step_secs)"));
                }
                if !pos(r.step_secs) || !nonneg(r.settle_secs) || r.settle_secs >= r.step_secs {
                    return Err(self.bad(
                        "ramp.step_secs",
                        format!(
                            "step_secs {} must be > settle_secs {} ≥ 0",
                            r.step_secs, r.settle_secs
                        ),
                    ));
                }
            }
            Kind::Planner => {}
        }
        if self.kind == Kind::Gateway {
            let Some(g) = &self.gateway else {
                return Err(self.bad("gateway", "a gateway scenario needs [gateway]"));
            };
            if g.tours_per_node.len() != n.count {
                return Err(self.bad(
                    "gateway.tours_per_node",
                    format!("one value per node ({} nodes)", n.count),
                ));
            }
            let per_node = w.cameras / n.count;
            if let Some(t) = g
                .tours_per_node
                .iter()
                .find(|&&t| t as usize * g.cameras_per_tour as usize > per_node)
            {
                return Err(self.bad(
                    "gateway.tours_per_node",
                    format!(
                        "{t} tours × {} cameras exceed the {per_node} cameras of a gateway",
                        g.cameras_per_tour
                    ),
                ));
            }
            if g.cameras_per_tour == 0
                || !pos(g.switch_secs)
                || !nonneg(g.cpu_per_camera)
                || !nonneg(g.cpu_per_viewer)
                || !nonneg(g.start_ms)
                || !nonneg(g.wake_ms)
            {
                return Err(self.bad(
                    "gateway",
                    "cameras_per_tour ≥ 1, switch_secs > 0, costs ≥ 0",
                ));
            }
        }
        match self.kind {
            Kind::Vod | Kind::Feedback | Kind::Gateway => {}
            Kind::Planner => {
                let Some(s) = &self.sweep else {
                    return Err(self.bad("sweep", "a planner scenario needs [sweep]"));
                };
                if s.lambdas_per_min.is_empty() || !s.lambdas_per_min.iter().all(|&l| pos(l)) {
                    return Err(self.bad("sweep.lambdas_per_min", "one or more rates, each > 0"));
                }
                if !pos(s.duration_min) {
                    return Err(self.bad("sweep.duration_min", "must be > 0"));
                }
                if s.replicas_per_node == 0 || s.replicas_per_node > w.cameras {
                    return Err(self.bad(
                        "sweep.replicas_per_node",
                        format!("must be in 1..={} (the videos)", w.cameras),
                    ));
                }
                if s.replicas_per_node * n.count < w.cameras {
                    return Err(self.bad(
                        "sweep.replicas_per_node",
                        format!(
                            "{} nodes × {} replicas cannot hold every one of {} videos",
                            n.count, s.replicas_per_node, w.cameras
                        ),
                    ));
                }
                if !(0.0..=1.0).contains(&s.playback_share) {
                    return Err(self.bad("sweep.playback_share", "a share in 0..=1"));
                }
                if s.layouts.is_empty() {
                    return Err(self.bad("sweep.layouts", "matched and/or mismatched"));
                }
                if n.max_sessions == 0 {
                    return Err(self.bad("nodes.max_sessions", "a planner scenario needs cap > 0"));
                }
            }
        }
        Ok(())
    }
}
