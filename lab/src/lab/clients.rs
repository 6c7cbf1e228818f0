//! The lab's closed-loop clients: the project's own RTSP viewer ([`vigil_testkit::client`]), one
//! tokio task per client, each asking through `vigil_sim::dist::Asker` from its own seeded
//! stream exactly as the simulator's client of the same id does (arrival offset, recording,
//! length, VCR change, pause, entry node), so every arm and the simulation see one workload.
//!
//! Per session: connect to the entry node → first RTP packet beginning a keyframe (the
//! scheduler's 302 included), the node that sends it (the packets' source address: UDP, so
//! REM can move the session and the client sees where its media comes from), every change
//! of that source (a migration), the VCR change by a PLAY with `Scale`, and TEARDOWN at the
//! session's end. A 503 is a rejection: the client pauses as after a session (at least 1 s).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use vigil_sim::dist::{client_rng, offset, Ask, Asker};
use vigil_sim::report::SessionRow;
use vigil_sim::scenario::Scenario;

use vigil_testkit::client::{
    play, ClientError, ClientTransport, PlayOptions, PlayRequest, Player, ReceivedPacket,
};

/// What one arm's clients share with the sampler and the report.
#[derive(Default)]
pub struct Shared {
    pub rows: Mutex<Vec<SessionRow>>,
    /// Seconds since the arm's start of every migration a client saw.
    pub moves: Mutex<Vec<f64>>,
    pub started: AtomicU64,
    pub rejected: AtomicU64,
    pub failed: AtomicU64,
    pub playing: AtomicU64,
    /// First errors (kind → count), for the report when anything failed.
    pub errors: Mutex<std::collections::BTreeMap<String, u64>>,
}

/// One arm's run as the clients see it.
pub struct Plan {
    pub sc: Arc<Scenario>,
    pub arm: String,
    /// RTSP address of node i.
    pub nodes: Vec<std::net::SocketAddr>,
    pub start: Instant,
    pub end: Instant,
}

impl Plan {
    /// An arm's plan on `cluster`: the clients start half a second from now and stop
    /// `total` seconds later.
    pub fn new(
        sc: Arc<Scenario>,
        arm: vigil_sim::scenario::Arm,
        cluster: &super::nodes::Cluster,
        total: f64,
    ) -> Arc<Plan> {
        let start = Instant::now() + Duration::from_millis(500);
        Arc::new(Plan {
            sc,
            arm: arm.to_string(),
            nodes: cluster.nodes.iter().map(|n| n.rtsp).collect(),
            start,
            end: start + Duration::from_secs_f64(total),
        })
    }
}

impl Shared {
    /// The report's line on an arm's run: requests, 503s, failures and their kinds, wall.
    pub fn note(&self, arm: vigil_sim::scenario::Arm, requests: usize, wall: Duration) -> String {
        let errors = self.errors.lock().map(|e| e.clone()).unwrap_or_default();
        format!(
            "{arm}: {requests} requests, {} rejected (503), {} failed{}; wall {:.0} s",
            self.rejected.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            if errors.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    errors
                        .iter()
                        .map(|(k, v)| format!("{v}× {k}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            },
            wall.as_secs_f64()
        )
    }
}

/// Recordings start where the simulator lays them out (same `time_ms` in both CSVs).
pub use vigil_sim::vod::recording_start_ms;

pub fn camera_name(cam: usize) -> String {
    format!("cam-{cam:06}")
}

/// Starts every client of the ramp at its step's start plus its own arrival offset, and
/// returns when all of them have stopped (at the plan's end).
pub async fn run(plan: Arc<Plan>, shared: Arc<Shared>) {
    let Some(ramp) = plan.sc.ramp.clone() else {
        return;
    };
    let asker = Arc::new(Asker::new(&plan.sc.workload, plan.sc.nodes.count));
    let spread = vigil_sim::engine::secs(ramp.spread());
    let mut tasks = tokio::task::JoinSet::new();
    let mut clients = 0u64;
    for (step, &level) in ramp.steps.iter().enumerate() {
        let step_start = plan.start + Duration::from_secs_f64(ramp.step_secs * step as f64);
        while clients < u64::from(level) {
            let mut rng = client_rng(plan.sc.seed, clients);
            let at = step_start + Duration::from_micros(offset(spread, &mut rng) as u64);
            let (plan, shared, asker) = (plan.clone(), shared.clone(), asker.clone());
            tasks.spawn(client(clients, rng, at, plan, shared, asker));
            clients += 1;
        }
    }
    while tasks.join_next().await.is_some() {}
}

fn since(plan: &Plan, t: Instant) -> f64 {
    t.saturating_duration_since(plan.start).as_secs_f64()
}

async fn client(
    id: u64,
    mut rng: StdRng,
    at: Instant,
    plan: Arc<Plan>,
    shared: Arc<Shared>,
    asker: Arc<Asker>,
) {
    tokio::time::sleep_until(at.into()).await;
    while Instant::now() < plan.end {
        let ask = asker.ask(&mut rng);
        let think = session(id, &ask, &plan, &shared).await;
        let next = Instant::now() + Duration::from_secs_f64(think);
        if next >= plan.end {
            break;
        }
        tokio::time::sleep_until(next.into()).await;
    }
}

/// One request: returns the pause before the client's next one.
async fn session(id: u64, ask: &Ask, plan: &Plan, shared: &Shared) -> f64 {
    let sc = &plan.sc;
    let w = &sc.workload;
    let cam = ask.recording / w.recordings_per_camera;
    let rec = ask.recording % w.recordings_per_camera;
    let begin_ms = recording_start_ms(sc, rec);
    let time = vigil_proto::rtsp::rfc3339;
    // The request is for one recording, as the simulator's is: the node ends the playback
    // (BYE) at the recording's end instead of going on into the camera's next one.
    let end_ms = begin_ms + (w.recording_secs * 1000.0).round() as i64;
    let entry = ask.entry.min(plan.nodes.len().saturating_sub(1));
    let target = Target {
        url: format!(
            "rtsp://{}/playback/{}?start={}&end={}",
            plan.nodes[entry],
            camera_name(cam),
            time(begin_ms),
            time(end_ms)
        ),
        entry,
        camera: camera_name(cam),
        time_ms: begin_ms,
    };
    watch(id, &target, ask, plan, shared).await
}

/// What one request asks for: the URL at its entry node, and what its row records.
pub struct Target {
    pub url: String,
    /// Index of the entry node (a 302 elsewhere counts as redirected).
    pub entry: usize,
    pub camera: String,
    /// Requested recording time (ms), 0 for a live view.
    pub time_ms: i64,
}

/// One session of `target` for `ask.length_s` (and its VCR change): connect → first
/// keyframe, media-source changes, TEARDOWN; its row goes to `shared`. Returns the pause
/// before the client's next request.
pub async fn watch(id: u64, target: &Target, ask: &Ask, plan: &Plan, shared: &Shared) -> f64 {
    let sc = &plan.sc;
    let (url, entry) = (&target.url, target.entry);
    let t0 = Instant::now();
    let now_s = since(plan, t0);
    let ramp = sc.ramp.as_ref();
    let session = shared.started.fetch_add(1, Ordering::Relaxed);
    let mut row = SessionRow {
        policy: plan.arm.clone(),
        step: ramp.map_or(String::new(), |r| {
            r.label_at(vigil_sim::engine::secs(now_s))
        }),
        session,
        client: id,
        camera: target.camera.clone(),
        time_ms: target.time_ms,
        requested_s: now_s,
        scale: 1.0,
        ..SessionRow::default()
    };
    let (mut player, pkt) = match first_keyframe(url).await {
        Ok((p, Some((pkt, _)))) => (p, pkt),
        Ok((_, None)) => {
            fail(shared, "the stream ended before a keyframe");
            finish(shared, row);
            return ask.think_s;
        }
        Err(ClientError::Status { status: 503, .. }) => {
            row.rejected = true;
            row.session = u64::MAX;
            shared.rejected.fetch_add(1, Ordering::Relaxed);
            finish(shared, row);
            return ask.think_s.max(1.0);
        }
        Err(e) => {
            fail(shared, &kind(&e));
            finish(shared, row);
            return ask.think_s;
        }
    };
    row.response_ms = Some((pkt.at - t0).as_secs_f64() * 1000.0);
    let mut from = pkt.from.map(|a| a.ip());
    let node = from.and_then(|ip| plan.nodes.iter().position(|n| n.ip() == ip));
    row.node = node.map_or(String::new(), crate::lab::nodes::node_id);
    row.redirected = node != Some(entry);
    shared.playing.fetch_add(1, Ordering::Relaxed);
    let end = (pkt.at + Duration::from_secs_f64(ask.length_s)).min(plan.end);
    let mut vcr = ask
        .vcr
        .map(|(scale, after)| (scale, pkt.at + Duration::from_secs_f64(after)));
    loop {
        let until = match vcr {
            Some((_, t)) if t < end => t,
            _ => end,
        };
        match tokio::time::timeout_at(until.into(), player.next_packet()).await {
            Ok(Ok(Some(p))) => {
                let ip = p.from.map(|a| a.ip());
                if ip.is_some() && ip != from {
                    row.migrations += 1;
                    if let Ok(mut m) = shared.moves.lock() {
                        m.push(since(plan, p.at));
                    }
                    from = ip;
                }
            }
            // The recording ended (BYE or the connection closed): the session is over.
            Ok(Ok(None)) | Ok(Err(_)) => break,
            Err(_) => {
                if until >= end {
                    break;
                }
                if let Some((scale, _)) = vcr.take() {
                    if player.play(PlayRequest::new().scale(scale)).await.is_ok() {
                        row.scale = scale;
                    }
                }
            }
        }
    }
    let done = Instant::now();
    row.ended_s = (done < plan.end).then(|| since(plan, done));
    shared.playing.fetch_sub(1, Ordering::Relaxed);
    teardown(player).await;
    finish(shared, row);
    ask.think_s
}

/// Plays `url` over UDP (following a 302) up to the first RTP packet of a keyframe, within
/// 10 s: what the lab measures a start by, live or playback.
pub async fn first_keyframe(
    url: &str,
) -> Result<(Player, Option<(ReceivedPacket, bool)>), ClientError> {
    let mut opts = PlayOptions::new(ClientTransport::Udp);
    opts.play = PlayRequest::new();
    let mut p = play(url, opts).await?;
    let first = p.next_keyframe(Duration::from_secs(10)).await?;
    Ok((p, first))
}

async fn teardown(player: Player) {
    let _ = tokio::time::timeout(Duration::from_secs(2), player.teardown()).await;
}

fn finish(shared: &Shared, row: SessionRow) {
    if let Ok(mut rows) = shared.rows.lock() {
        rows.push(row);
    }
}

fn fail(shared: &Shared, what: &str) {
    shared.failed.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut e) = shared.errors.lock() {
        *e.entry(what.to_string()).or_default() += 1;
    }
}

/// An error's kind without the per-session details (ports, addresses).
fn kind(e: &ClientError) -> String {
    match e {
        ClientError::Status {
            method,
            status,
            reason,
        } => format!("{method} answered {status} {reason}"),
        ClientError::Timeout { what, .. } => format!("timeout: {what}"),
        ClientError::Connect { .. } => "cannot connect".into(),
        other => other.to_string(),
    }
}
