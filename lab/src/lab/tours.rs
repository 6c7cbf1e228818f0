//! The gateway lab's clients and sampler (§B on real processes): patrol tours, each a
//! tokio task showing its cameras one at a time, switching every `switch_secs`, each
//! switch a live start through a seeded entry node (the 302 to the camera's holder
//! included) measured from connect to the first RTP packet of a keyframe; and once a
//! second each node's gateway load GL (§B.2) from what the cluster shows (`/api/cameras`,
//! `/api/cluster/nodes`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use vigil_cluster::gateway::{awake_share, gateway_load, r_membw};
use vigil_cluster::GatewayConfig;
use vigil_sim::report::SessionRow;
use vigil_sim::scenario::Scenario;

use super::probe::get_json;

/// One arm's tours as they will run: cameras per tour, its gateway, its start.
pub struct TourPlan {
    pub sc: Arc<Scenario>,
    pub arm: String,
    /// RTSP address of node i.
    pub nodes: Vec<std::net::SocketAddr>,
    /// Per tour: (its gateway, its cameras, its start).
    pub tours: Vec<(usize, Vec<String>, Instant)>,
    pub start: Instant,
    pub end: Instant,
    pub switch: Duration,
}

#[derive(Default)]
pub struct TourShared {
    pub rows: Mutex<Vec<SessionRow>>,
    pub started: AtomicU64,
    pub failed: AtomicU64,
    pub errors: Mutex<std::collections::BTreeMap<String, u64>>,
}

fn since(plan: &TourPlan, t: Instant) -> f64 {
    t.saturating_duration_since(plan.start).as_secs_f64()
}

/// Runs every tour until the plan's end.
pub async fn run(plan: Arc<TourPlan>, shared: Arc<TourShared>) {
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..plan.tours.len() {
        tasks.spawn(tour(t, plan.clone(), shared.clone()));
    }
    while tasks.join_next().await.is_some() {}
}

async fn tour(t: usize, plan: Arc<TourPlan>, shared: Arc<TourShared>) {
    let (_, cameras, at) = &plan.tours[t];
    // The tour's own stream: its entry node at every switch, the same in every arm.
    let mut rng = vigil_sim::dist::client_rng(plan.sc.seed, t as u64);
    let mut next = *at;
    let mut i = 0usize;
    while next < plan.end {
        tokio::time::sleep_until(next.into()).await;
        let entry = rng.gen_range(0..plan.nodes.len());
        let until = (next + plan.switch).min(plan.end);
        show(t, &cameras[i % cameras.len()], entry, until, &plan, &shared).await;
        next += plan.switch;
        i += 1;
    }
}

/// One live start and the viewing up to `until`.
async fn show(
    tour: usize,
    camera: &str,
    entry: usize,
    until: Instant,
    plan: &TourPlan,
    shared: &TourShared,
) {
    let url = format!("rtsp://{}/live/{camera}", plan.nodes[entry]);
    let t0 = Instant::now();
    let now_s = since(plan, t0);
    let mut row = SessionRow {
        policy: plan.arm.clone(),
        step: plan.sc.ramp.as_ref().map_or(String::new(), |r| {
            r.label_at(vigil_sim::engine::secs(now_s))
        }),
        session: shared.started.fetch_add(1, Ordering::Relaxed),
        client: tour as u64,
        camera: camera.to_string(),
        requested_s: now_s,
        scale: 1.0,
        ..SessionRow::default()
    };
    match super::clients::first_keyframe(&url).await {
        Ok((mut player, Some((pkt, _)))) => {
            row.response_ms = Some((pkt.at - t0).as_secs_f64() * 1000.0);
            let node = pkt
                .from
                .and_then(|a| plan.nodes.iter().position(|n| n.ip() == a.ip()));
            row.node = node.map_or(String::new(), super::nodes::node_id);
            row.redirected = node != Some(entry);
            // Watched until the tour switches: the camera is in use meanwhile (§B.1, §B.5).
            while let Ok(Ok(Some(_))) =
                tokio::time::timeout_at(until.into(), player.next_packet()).await
            {}
            let done = Instant::now();
            row.ended_s = Some(since(plan, done));
            let _ = tokio::time::timeout(Duration::from_secs(2), player.teardown()).await;
        }
        Ok((_, None)) => fail(shared, "the stream ended before a keyframe"),
        Err(e) => fail(shared, &e.to_string()),
    }
    if let Ok(mut rows) = shared.rows.lock() {
        rows.push(row);
    }
}

fn fail(shared: &TourShared, what: &str) {
    shared.failed.fetch_add(1, Ordering::Relaxed);
    // Ports and addresses out, so equal failures count together.
    let kind: String = what
        .split(|c: char| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .join("#");
    if let Ok(mut e) = shared.errors.lock() {
        *e.entry(kind).or_default() += 1;
    }
}

/// What one sample saw of each node (in node order).
#[derive(Debug, Clone, Default)]
pub struct NodeSample {
    /// Cameras bound to it (held, or asleep there).
    pub cameras: u32,
    pub awake: u32,
    pub asleep: u32,
    pub viewers: u32,
    pub gl: f64,
}

/// Each node's cameras and GL as the scheduler (node 0) shows them: §B.2 with the node's
/// CPU share C from its §A.1 load part, its viewers' streams over the configured memory
/// bandwidth (what the scheduler's camera moves use), and its share of awake cameras.
pub async fn sample_nodes(
    api: &str,
    ids: &[String],
    cfg: &GatewayConfig,
    w_cpu: f64,
) -> Option<(Vec<NodeSample>, Vec<(String, bool)>)> {
    let cams = get_json(api.to_string(), "/api/cameras").await?;
    let nodes = get_json(api.to_string(), "/api/cluster/nodes").await?;
    let mut out = vec![NodeSample::default(); ids.len()];
    let mut streams: Vec<Vec<f64>> = vec![Vec::new(); ids.len()];
    let mut states = Vec::new();
    for c in cams.as_array()? {
        let Some(k) = c["node"]
            .as_str()
            .and_then(|n| ids.iter().position(|i| i == n))
        else {
            continue;
        };
        let s = &mut out[k];
        s.cameras += 1;
        let asleep = c["state"] == "asleep";
        if asleep {
            s.asleep += 1;
        } else if c["state"] == "live" {
            s.awake += 1;
        }
        let viewers = c["viewers"].as_u64().unwrap_or(0) as u32;
        s.viewers += viewers;
        let bps = c["bitrate_kbps"].as_f64().unwrap_or(0.0) * 1000.0;
        streams[k].extend(std::iter::repeat_n(bps / 8.0, viewers as usize));
        states.push((c["camera"].as_str().unwrap_or("").to_string(), asleep));
    }
    let cpu: Vec<f64> = ids
        .iter()
        .map(|id| {
            nodes["nodes"]
                .as_array()
                .and_then(|a| a.iter().find(|n| n["id"].as_str() == Some(id)))
                .and_then(|n| n["load_cpu"].as_f64())
                .map_or(0.0, |l| (l / (100.0 * w_cpu.max(1e-9))).clamp(0.0, 1.0))
        })
        .collect();
    for (k, s) in out.iter_mut().enumerate() {
        let membw = r_membw(&streams[k], cfg.mem_transfer_rate, cfg.mem_bus_bits);
        s.gl = gateway_load(cpu[k], membw, awake_share(s.awake, s.cameras), cfg);
    }
    Some((out, states))
}
