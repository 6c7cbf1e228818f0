//! What the lab reads from the nodes while the clients run: every second the scheduler's
//! view of each node's §A.1 Load (`/api/cluster/nodes`) for λ (§A.2 eq. 3), and at the
//! edges of each step's measured window every node's cache counters (`/api/cache`: hits,
//! misses, storage reads, playback opens served from the cache).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use indicatif::ProgressBar;
use vigil_sim::vod::StepAcc;

use super::clients::{Plan, Shared};

/// Cache counters summed over the nodes.
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheTotals {
    pub hits: u64,
    pub misses: u64,
    pub loads: u64,
    /// Playback opens (DESCRIBEs answered), and those whose first segment was cached.
    pub opens: u64,
    pub opens_cached: u64,
}

impl CacheTotals {
    pub fn minus(self, before: CacheTotals) -> CacheTotals {
        CacheTotals {
            hits: self.hits.saturating_sub(before.hits),
            misses: self.misses.saturating_sub(before.misses),
            loads: self.loads.saturating_sub(before.loads),
            opens: self.opens.saturating_sub(before.opens),
            opens_cached: self.opens_cached.saturating_sub(before.opens_cached),
        }
    }
}

pub struct Sampled {
    /// λ samples per step (the load fields of the simulator's step counters).
    pub steps: Vec<StepAcc>,
    /// (seconds since the start, Load per node) once a second in measured windows.
    pub trace: Vec<(f64, Vec<f64>)>,
}

/// The progress bar of an arm's `total` seconds.
pub fn progress(total: f64) -> ProgressBar {
    ProgressBar::new(total as u64).with_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} s  {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    )
}

pub(crate) async fn get_json(api: String, path: &'static str) -> Option<serde_json::Value> {
    let body = tokio::task::spawn_blocking(move || {
        vigil_testkit::serve::api_get_as(&api, path, Some(super::nodes::TOKEN))
    })
    .await
    .ok()?
    .ok()?;
    serde_json::from_str(&body).ok()
}

/// Each node's `field` of `/api/cluster/nodes` as the node at `api` (the scheduler, node
/// 0) sees it, in node order: `load` (§A.1) or `weight` (§C.2).
pub(super) async fn per_node(api: &str, ids: &[String], field: &str) -> Option<Vec<f64>> {
    let v = get_json(api.to_string(), "/api/cluster/nodes").await?;
    let nodes = v["nodes"].as_array()?;
    ids.iter()
        .map(|id| {
            nodes
                .iter()
                .find(|n| n["id"].as_str() == Some(id))
                .and_then(|n| n[field].as_f64())
        })
        .collect()
}

async fn cache(apis: &[String]) -> CacheTotals {
    let mut t = CacheTotals::default();
    for api in apis {
        if let Some(v) = get_json(api.clone(), "/api/cache").await {
            let s = &v["stats"];
            t.hits += s["hits"].as_u64().unwrap_or(0);
            t.misses += s["misses"].as_u64().unwrap_or(0);
            t.loads += s["loads"].as_u64().unwrap_or(0);
            t.opens += s["opens"].as_u64().unwrap_or(0);
            t.opens_cached += s["opens_cached"].as_u64().unwrap_or(0);
        }
    }
    t
}

/// λ samples once a second, and the progress bar, until the plan's end.
pub async fn sample(
    plan: Arc<Plan>,
    apis: Vec<String>,
    ids: Vec<String>,
    shared: Arc<Shared>,
    bar: ProgressBar,
) -> Sampled {
    let ramp = plan.sc.ramp.clone();
    let steps = ramp.as_ref().map_or(0, |r| r.steps.len());
    let mut out = Sampled {
        steps: vec![StepAcc::default(); steps],
        trace: Vec::new(),
    };
    let mut tick = plan.start;
    while tick < plan.end {
        tick += Duration::from_secs(1);
        tokio::time::sleep_until(tick.into()).await;
        let at = tick.saturating_duration_since(plan.start).as_secs_f64();
        let label = ramp
            .as_ref()
            .map_or(String::new(), |r| r.label_at(vigil_sim::engine::secs(at)));
        bar.set_position(at as u64);
        bar.set_message(format!(
            "{} · {label} clients · {} playing · {} sessions, {} rejected, {} failed",
            plan.arm,
            shared.playing.load(Ordering::Relaxed),
            shared.started.load(Ordering::Relaxed),
            shared.rejected.load(Ordering::Relaxed),
            shared.failed.load(Ordering::Relaxed),
        ));
        let Some(s) = ramp
            .as_ref()
            .and_then(|r| r.measured_step(vigil_sim::engine::secs(at)))
        else {
            continue;
        };
        let Some(l) = per_node(&apis[0], &ids, "load").await else {
            continue;
        };
        let acc = &mut out.steps[s];
        acc.samples += 1;
        acc.variance_sum += vigil_cluster::load_variance(&l);
        acc.load_sum += l.iter().sum::<f64>() / l.len().max(1) as f64;
        acc.load_max_sum += l.iter().copied().fold(0.0, f64::max);
        out.trace.push((at, l));
    }
    out
}

/// The nodes' cache counters over each step's measured window (read at its edges).
pub async fn cache_windows(plan: Arc<Plan>, apis: Vec<String>) -> Vec<CacheTotals> {
    let Some(r) = plan.sc.ramp.clone() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for s in 0..r.steps.len() {
        let from = plan.start + Duration::from_secs_f64(r.step_secs * s as f64 + r.settle_secs);
        let to = plan.start + Duration::from_secs_f64(r.step_secs * (s + 1) as f64);
        tokio::time::sleep_until(from.into()).await;
        let before = cache(&apis).await;
        tokio::time::sleep_until(to.min(plan.end).into()).await;
        out.push(cache(&apis).await.minus(before));
    }
    out
}

/// One node's own counters at the end of an arm (for the report's consistency table).
#[derive(Debug, Clone, Default)]
pub struct NodeCounters {
    pub id: String,
    /// `vigil_rtsp_connections_total`: every client connection, the entry's and the 302's.
    pub connections: u64,
    /// `vigil_migrations_total{result="moved"}`.
    pub moved: u64,
    pub cache: CacheTotals,
    /// `vigil_sessions_opened_total`: sessions its SETUPs created.
    pub opened: u64,
    /// `vigil_sessions_rejected_total` + `vigil_placements_rejected_total`: its 503s.
    pub rejected: u64,
    /// Its own gossip counters (`/api/cluster/nodes`): bytes and datagrams sent.
    pub gossip_bytes: u64,
    pub gossip_datagrams: u64,
}

/// Sum of a Prometheus text exposition's samples of `name` whose labels contain `label`.
pub(crate) fn metric(text: &str, name: &str, label: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            let base = k.split('{').next()?;
            (base == name && k.contains(label))
                .then(|| v.trim().parse::<f64>().ok())
                .flatten()
        })
        .sum::<f64>() as u64
}

/// A node's own gossip counters: (bytes, datagrams) sent since it started.
pub(super) async fn gossip_sent(api: &str) -> Option<(u64, u64)> {
    let v = get_json(api.to_string(), "/api/cluster/nodes").await?;
    let g = &v["gossip"];
    Some((g["bytes_sent"].as_u64()?, g["datagrams_sent"].as_u64()?))
}

pub async fn node_counters(apis: &[String], ids: &[String]) -> Vec<NodeCounters> {
    let mut out = Vec::new();
    for (api, id) in apis.iter().zip(ids) {
        let a = api.clone();
        let text = tokio::task::spawn_blocking(move || {
            vigil_testkit::serve::api_get_as(&a, "/metrics", Some(super::nodes::TOKEN))
        })
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
        let gossip = gossip_sent(api).await.unwrap_or_default();
        out.push(NodeCounters {
            id: id.clone(),
            connections: metric(&text, "vigil_rtsp_connections_total", ""),
            moved: metric(&text, "vigil_migrations_total", "moved"),
            cache: cache(std::slice::from_ref(api)).await,
            opened: metric(&text, "vigil_sessions_opened_total", ""),
            rejected: metric(&text, "vigil_sessions_rejected_total", "")
                + metric(&text, "vigil_placements_rejected_total", ""),
            gossip_bytes: gossip.0,
            gossip_datagrams: gossip.1,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::metric;

    #[test]
    fn sums_a_metric_over_matching_labels() {
        let text = "# HELP x\nvigil_migrations_total{result=\"moved\"} 3\nvigil_migrations_total{result=\"failed\"} 1\nvigil_rtsp_connections_total 12\nvigil_rtsp_connections_total_x 5\n";
        assert_eq!(metric(text, "vigil_migrations_total", "moved"), 3);
        assert_eq!(metric(text, "vigil_migrations_total", ""), 4);
        assert_eq!(metric(text, "vigil_rtsp_connections_total", ""), 12);
        assert_eq!(metric(text, "absent", ""), 0);
    }
}
