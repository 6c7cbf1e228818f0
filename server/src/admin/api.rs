//! The admin HTTP server (axum).

use super::views::{CacheView, PathView, RecordingsView, SessionView, TimeRange};
use crate::cluster::Cluster;
use crate::node::{Node, SessionKindView};
use axum::extract::{FromRef, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil_conf::Source;

/// What the routes read. A route takes the parts it needs (`State<Arc<Node>>`,
/// `State<Option<Arc<Cluster>>>`) or the whole.
#[derive(Clone)]
pub(super) struct AppState {
    node: Arc<Node>,
    /// The cluster shell when `[cluster] enabled`: given by `serve`, since the node (below
    /// the cluster) does not hold it.
    cluster: Option<Arc<Cluster>>,
    prometheus: Option<PrometheusHandle>,
    /// The cameras watched over live HLS (the HTTP server's, not the node's: the node is
    /// below HLS).
    hls: Arc<crate::hls::Registry>,
    /// WHEP's WebRTC service, when `[webrtc] enabled`.
    webrtc: super::whep_api::WebRtc,
}

impl FromRef<AppState> for super::whep_api::WebRtc {
    fn from_ref(st: &AppState) -> super::whep_api::WebRtc {
        st.webrtc.clone()
    }
}

impl FromRef<AppState> for Arc<Node> {
    fn from_ref(st: &AppState) -> Arc<Node> {
        st.node.clone()
    }
}

impl FromRef<AppState> for Option<Arc<Cluster>> {
    fn from_ref(st: &AppState) -> Option<Arc<Cluster>> {
        st.cluster.clone()
    }
}

/// Every route, behind the admin token layer (`token`): a route added here is covered.
pub fn router(
    node: Arc<Node>,
    cluster: Option<Arc<Cluster>>,
    prometheus: Option<PrometheusHandle>,
    webrtc: super::whep_api::WebRtc,
) -> Router {
    let gate = super::token::Gate {
        // Checked at start-up (`serve`); an unreadable file here leaves the API read-only.
        token: node.config.http.token().ok().flatten().map(Into::into),
    };
    let body_timeout = node.config.http.body_read_timeout_ms;
    let node_for_gate = node.clone();
    let cluster_for_gate = cluster.clone();
    let signins = Arc::new(super::signin::Sessions::new(
        Duration::from_secs(node.config.http.session_idle_secs),
        Duration::from_secs(node.config.http.session_max_secs),
    ));
    let signin = super::signin::router().with_state(super::signin::SignIn {
        node: node.clone(),
        sessions: signins.clone(),
    });
    Router::new()
        .route("/api/paths", get(paths))
        .route("/api/sessions", get(sessions))
        .route("/api/health", get(|| async { "ok\n" }))
        .route("/api/node", get(node_info))
        .route("/api/recordings", get(recording_status))
        .route("/api/recordings/{camera}", get(recordings))
        .route("/api/cache", get(cache))
        .route("/api/cluster/nodes", get(cluster_nodes))
        .route("/api/cluster/scheduler", get(cluster_scheduler))
        .route("/api/cluster/sessions", get(cluster_sessions))
        .route("/api/ingest/{camera}", get(ingest))
        .route("/api/export/{camera}", get(export))
        .route("/hls/live/{camera}/{file}", get(hls_live))
        .route("/hls/playback/{camera}/{file}", get(hls_playback))
        .route("/metrics", get(metrics))
        .merge(super::migrate_api::router())
        .merge(super::plan_api::router())
        .merge(super::registry_api::router())
        .merge(super::tokens_api::router())
        .merge(super::onvif_api::router())
        .merge(super::console::router())
        .merge(super::whep_api::router())
        .merge(super::audit_api::router())
        .merge(signin)
        .with_state(AppState {
            node,
            cluster,
            prometheus,
            hls: Default::default(),
            webrtc,
        })
        // Inside the gate: a body is read only for a request the gate let through.
        .layer(axum::middleware::from_fn_with_state(
            super::body::BodyDeadline(Duration::from_millis(body_timeout)),
            super::body::layer,
        ))
        .layer(axum::middleware::from_fn_with_state(
            super::token::GateState {
                gate,
                node: node_for_gate,
                sessions: signins,
                cluster: cluster_for_gate,
                hls_seen: Arc::new(super::trail::HlsSeen::new(HLS_VIEW_WINDOW_MS, 10_000)),
            },
            super::token::layer,
        ))
}

/// An HLS viewer is one audit record per this long without a playlist request.
const HLS_VIEW_WINDOW_MS: i64 = 60_000;

pub async fn serve(
    node: Arc<Node>,
    cluster: Option<Arc<Cluster>>,
    listener: tokio::net::TcpListener,
    tls: Option<(tokio::net::TcpListener, crate::net::tls::Acceptor)>,
    prometheus: Option<PrometheusHandle>,
    webrtc: super::whep_api::WebRtc,
) {
    tokio::spawn(sample_bitrates(node.clone()));
    tokio::spawn(super::metrics::sample_storage(node.clone()));
    let app = router(node.clone(), cluster, prometheus, webrtc);
    let https = tls.map(|(listener, acceptor)| {
        tokio::spawn(super::listener::serve(
            node.clone(),
            listener,
            app.clone(),
            Some(acceptor),
        ))
    });
    super::listener::serve(node, listener, app, None).await;
    if let Some(https) = https {
        let _ = https.await;
    }
}

/// Ingest bitrate per path, sampled every second.
async fn sample_bitrates(node: Arc<Node>) {
    let mut last: HashMap<String, (u64, Instant)> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        for p in node.paths() {
            let bytes = p.stream.bytes_in.load(Ordering::Relaxed);
            let now = Instant::now();
            if let Some((b0, t0)) = last.insert(p.name.clone(), (bytes, now)) {
                let dt = now.duration_since(t0).as_secs_f64().max(0.001);
                let bps = (bytes.saturating_sub(b0) as f64 * 8.0 / dt) as u64;
                p.stream.bitrate_bps.store(bps, Ordering::Relaxed);
            }
        }
    }
}

fn source_text(source: &Source) -> String {
    match source {
        Source::Push => "push".into(),
        Source::Demo => "demo".into(),
        Source::Pull { url } => crate::auth::redact_url(url),
    }
}

pub fn path_views(node: &Node) -> Vec<PathView> {
    node.paths()
        .iter()
        .map(|p| {
            let s = &p.stream;
            PathView {
                path: p.name.clone(),
                source: match p.relay_from() {
                    Some(holder) => format!("relay from {holder}"),
                    None => source_text(&p.source()),
                },
                live: s.is_live(),
                codecs: s
                    .info()
                    .map(|i| {
                        i.tracks
                            .iter()
                            .map(|t| t.codec.name().to_string())
                            .collect()
                    })
                    .unwrap_or_default(),
                bitrate_kbps: s.bitrate_bps.load(Ordering::Relaxed) / 1000,
                readers: s.readers.load(Ordering::Relaxed),
                packets_in: s.packets_in.load(Ordering::Relaxed),
            }
        })
        .collect()
}

pub fn session_views(node: &Node) -> Vec<SessionView> {
    node.sessions()
        .iter()
        .map(|s| {
            let secs = s.started_at.elapsed().as_secs_f64();
            let bytes = s.bytes.load(Ordering::Relaxed);
            SessionView {
                id: s.id.clone(),
                path: s.path.clone(),
                kind: format!("{:?}", s.kind).to_lowercase(),
                transport: s
                    .transport
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
                client: s.client.to_string(),
                bytes,
                packets: s.packets.load(Ordering::Relaxed),
                duration_secs: (secs * 10.0).round() / 10.0,
                bitrate_kbps: (bytes as f64 * 8.0 / secs.max(0.001) / 1000.0) as u64,
                current_kbps: s.rate_bps.load(Ordering::Relaxed) / 1000,
                node: s
                    .media_node()
                    .unwrap_or_else(|| node.config.node.id.clone()),
                moves: s.moves.load(Ordering::Relaxed),
                steered_by: s.steered_by(),
                position_ms: (s.kind == SessionKindView::Playback && s.media_node().is_none())
                    .then(|| s.position_ms.load(Ordering::Relaxed)),
                feedback: s.feedback.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            }
        })
        .collect()
}

/// Who asks, as the gate proved it: lists show only what it may see.
type Who = axum::Extension<super::access::Principal>;

async fn paths(State(st): State<AppState>, axum::Extension(who): Who) -> Json<Vec<PathView>> {
    let mut v = path_views(&st.node);
    v.retain(|p| who.may_see_path(&p.path));
    Json(v)
}

async fn sessions(State(st): State<AppState>, axum::Extension(who): Who) -> Json<Vec<SessionView>> {
    let mut v = session_views(&st.node);
    v.retain(|s| who.may_see_path(&s.path));
    Json(v)
}

async fn recording_status(
    State(st): State<AppState>,
    axum::Extension(who): Who,
) -> Json<Vec<crate::node::recordings::RecordStatus>> {
    let mut v = st.node.recordings.all();
    v.retain(|r| who.may(crate::auth::Right::Playback, &r.camera));
    Json(v)
}

async fn recordings(
    State(st): State<AppState>,
    axum::extract::Path(camera): axum::extract::Path<String>,
) -> Result<Json<RecordingsView>, (StatusCode, String)> {
    let Some(library) = &st.node.library else {
        return Err((
            StatusCode::NOT_FOUND,
            "recording is disabled on this node\n".into(),
        ));
    };
    let index = library
        .index(&camera)
        .await
        .map_err(|e| (StatusCode::NOT_FOUND, format!("{e}\n")))?;
    let ranges: Vec<(i64, i64)> = index.ranges(crate::library::GAP_MS);
    let gaps = ranges
        .windows(2)
        .map(|w| TimeRange::new(w[0].1, w[1].0))
        .collect();
    Ok(Json(RecordingsView {
        camera,
        segments: index.len(),
        bytes: index.total_bytes(),
        ranges: ranges.iter().map(|&(a, b)| TimeRange::new(a, b)).collect(),
        gaps,
    }))
}

pub fn cache_view(node: &Node) -> Option<CacheView> {
    let library = node.library.as_ref()?;
    let mut stats = serde_json::to_value(library.cache.stats()).unwrap_or_default();
    if let Some(o) = stats.as_object_mut() {
        let (hits, total) = (&library.opens.hits, &library.opens.total);
        o.insert("opens".into(), total.load(Ordering::Relaxed).into());
        o.insert("opens_cached".into(), hits.load(Ordering::Relaxed).into());
    }
    Some(CacheView {
        stats,
        resident: library
            .cache
            .resident(crate::library::GAP_MS)
            .into_iter()
            .map(|(cam, rs)| {
                (
                    cam,
                    rs.into_iter().map(|(a, b)| TimeRange::new(a, b)).collect(),
                )
            })
            .collect(),
    })
}

async fn cache(State(st): State<AppState>) -> Result<Json<CacheView>, (StatusCode, String)> {
    cache_view(&st.node).map(Json).ok_or((
        StatusCode::NOT_FOUND,
        "recording is disabled on this node\n".into(),
    ))
}

#[derive(serde::Serialize)]
struct NodeInfo {
    id: String,
    rtsp_listen: String,
    uptime_secs: f64,
    sessions: usize,
    /// `[cluster] enabled`: the `/api/cluster/…` routes answer (the console asks only then).
    cluster: bool,
    /// Recording and playback are on (`/api/recordings/…`, `/hls/playback/…`, export).
    recording: bool,
    /// The camera registry is on (`/api/registry/…` answers; the console's cameras page
    /// edits it).
    registry: bool,
    /// The web console's `[http] console_refresh_ms` and `console_history`.
    console: ConsoleSettings,
    process: Option<crate::procfs::ProcessStats>,
    /// This node's clock when it answered (Unix ms): `vigil ctl doctor` measures the skew
    /// between members with it.
    now_ms: i64,
    /// The storage root as configured and its id (`VIGIL-STORAGE-ID`), when recording is
    /// on: members that share a root report one id.
    storage_root: Option<String>,
    storage_root_id: Option<String>,
    /// The process's soft open-file limit (RLIMIT_NOFILE).
    open_files_limit: Option<u64>,
}

#[derive(serde::Serialize)]
struct ConsoleSettings {
    refresh_ms: u64,
    history: u32,
}

async fn node_info(State(st): State<AppState>) -> Json<NodeInfo> {
    let n = &st.node;
    Json(NodeInfo {
        id: n.config.node.id.clone(),
        rtsp_listen: n.config.rtsp.listen.to_string(),
        uptime_secs: n.started.elapsed().as_secs_f64(),
        sessions: n.session_count(),
        cluster: n.config.cluster.enabled,
        recording: n.library.is_some(),
        registry: crate::registry::of(n).is_some(),
        console: ConsoleSettings {
            refresh_ms: n.config.http.console_refresh_ms,
            history: n.config.http.console_history,
        },
        process: crate::procfs::current(),
        now_ms: crate::cluster::now_ms(),
        storage_root: n
            .library
            .as_ref()
            .map(|_| n.config.storage.root.display().to_string()),
        storage_root_id: n.library.as_ref().map(|l| l.store.root_id().to_string()),
        open_files_limit: crate::hostinfo::open_file_limit()
            .ok()
            .map(|(soft, _)| soft),
    })
}

async fn metrics(State(st): State<AppState>) -> impl IntoResponse {
    match &st.prometheus {
        Some(h) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            super::metrics::render(&st.node, st.cluster.as_deref(), h),
        ),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain")],
            "metrics recorder unavailable in this process\n".to_string(),
        ),
    }
}

const NO_CLUSTER: &str = "clustering is not enabled on this node ([cluster] enabled = true)\n";

pub fn cluster_nodes_view(c: &Cluster) -> super::views::ClusterNodesView {
    use super::views::{ClusterNodeView, ClusterNodesView, GossipView, IdConflictView};
    let (scheduler, term) = c.scheduler();
    let view = c.view();
    let w = *view.weights();
    let knn = &c.policy_cfg.knn;
    let now = crate::cluster::now_ms();
    let nodes = c
        .members()
        .into_iter()
        .map(|m| {
            let r = m.report.as_ref();
            let i = view.index_of(&m.id);
            let nv = i.map(|i| view.node(i));
            ClusterNodeView {
                scheduler: scheduler.as_deref() == Some(m.id.as_str()),
                draining: r.is_some_and(|r| r.draining),
                gossip: m.gossip.to_string(),
                rtsp: r.map(|r| r.rtsp.clone()),
                api: r.map(|r| r.api.clone()),
                alive: m.alive,
                load: i.map(|i| (view.load(i) * 100.0).round() / 100.0),
                load_cpu: nv.map_or(0.0, |n| 100.0 * w.cpu * n.cpu),
                load_mem: nv.map_or(0.0, |n| 100.0 * w.mem * n.mem),
                load_net: nv.map_or(0.0, |n| {
                    100.0 * w.net * vigil_cluster::load::net_utilisation(n)
                }),
                reserved: c.reserved(&m.id),
                class: r.map(|r| {
                    vigil_cluster::classify(&r.indicators, &knn.training, knn.k)
                        .name()
                        .to_string()
                }),
                weight: r.map(|r| vigil_cluster::load_weight(&r.indicators, &knn.omega)),
                period_s: r.map(|r| r.period_s),
                sessions: nv.map_or(0, |n| n.sessions),
                streams: nv.map_or(0, |n| n.streams.len()),
                cache_bytes: r.map_or(0, |r| r.cache_bytes),
                cached_ranges: nv.map_or(0, |n| n.cached.values().map(Vec::len).sum()),
                live: r.map(|r| r.live.clone()).unwrap_or_default(),
                edges: r.map(|r| r.edges.clone()).unwrap_or_default(),
                priority: r.map(|r| r.priority),
                report_age_ms: r.map(|r| now - r.at_ms),
                id: m.id,
            }
        })
        .collect();
    let g = &c.stats;
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    ClusterNodesView {
        self_id: c.self_id.clone(),
        scheduler,
        term,
        gossip: GossipView {
            bytes_sent: ld(&g.bytes_sent),
            bytes_received: ld(&g.bytes_received),
            datagrams_sent: ld(&g.datagrams_sent),
            datagrams_received: ld(&g.datagrams_received),
            rejected: ld(&g.rejected),
        },
        nodes,
        id_conflicts: c
            .id_conflicts()
            .into_iter()
            .map(|x| IdConflictView {
                id: x.id,
                gossip: x.gossip.iter().map(ToString::to_string).collect(),
            })
            .collect(),
    }
}

async fn cluster_nodes(
    State(st): State<AppState>,
) -> Result<Json<super::views::ClusterNodesView>, (StatusCode, String)> {
    st.cluster
        .as_deref()
        .map(cluster_nodes_view)
        .map(Json)
        .ok_or((StatusCode::NOT_FOUND, NO_CLUSTER.into()))
}

async fn cluster_scheduler(
    State(st): State<AppState>,
) -> Result<Json<super::views::SchedulerView>, (StatusCode, String)> {
    use super::views::{DecisionView, SchedulerView};
    let Some(c) = &st.cluster else {
        return Err((StatusCode::NOT_FOUND, NO_CLUSTER.into()));
    };
    let t = vigil_proto::rtsp::rfc3339;
    let (scheduler, term) = c.scheduler();
    Ok(Json(SchedulerView {
        self_id: c.self_id.clone(),
        scheduler,
        term,
        policy: c.policy.name().to_string(),
        decided_by: if c.rpc_advertise.is_some() {
            "the elected scheduler over QUIC (local gossip view on timeout or error)".into()
        } else {
            "local gossip view (no cluster certificates: QUIC off)".into()
        },
        decisions: c
            .decisions()
            .into_iter()
            .map(|d| DecisionView {
                at: t(d.at_ms),
                kind: d.kind.to_string(),
                camera: d.camera,
                time: t(d.time_ms),
                node: d.node,
                redirected: d.redirected,
                reason: d.reason,
                via: d.via.to_string(),
                decided_by: Some(d.decided_by),
                asked_by: d.asked_by,
                vbr_bps: d.vbr_bps,
            })
            .collect(),
        migrations: c.rem_log(),
        camera_moves: c.camera_move_log(),
    }))
}

/// Where `camera` should push (§C's EasyDarwin flow): with the cluster off, this node; else
/// the node holding it live already, or the one the `knn-class` policy picks (503 with the
/// reason when no node can take it).
pub fn ingest_view(
    node: &Node,
    cluster: Option<&Cluster>,
    camera: &str,
) -> Result<super::views::IngestView, (StatusCode, String)> {
    use super::views::IngestView;
    vigil_conf::check_camera_id(camera).map_err(|e| (StatusCode::BAD_REQUEST, format!("{e}\n")))?;
    let url = |base: &str| format!("{}/live/{camera}", base.trim_end_matches('/'));
    let own_live = node
        .path(&format!("live/{camera}"))
        .is_some_and(|p| p.stream.is_live());
    let Some(c) = cluster else {
        let base = node.config.cluster.rtsp_url_base(node.config.rtsp.listen);
        return Ok(IngestView {
            camera: camera.to_string(),
            node: node.config.node.id.clone(),
            url: url(&base),
            reason: "clustering is off: this node takes the push".into(),
        });
    };
    if own_live {
        return Ok(IngestView {
            camera: camera.to_string(),
            node: c.self_id.clone(),
            url: url(&c.rtsp_base),
            reason: format!("camera {camera} is already live on {}", c.self_id),
        });
    }
    match c.place_ingest(camera) {
        Ok(t) => Ok(IngestView {
            camera: camera.to_string(),
            node: t.node,
            url: url(&t.base),
            reason: t.reason,
        }),
        Err(reason) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no node can take camera {camera}: {reason}\n"),
        )),
    }
}

async fn export(
    State(st): State<AppState>,
    axum::extract::Path(camera): axum::extract::Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> axum::response::Response {
    let query = crate::playback::request::query_params(query.as_deref());
    crate::export::export(st.node.clone(), camera, query).await
}

async fn hls_live(
    State(st): State<AppState>,
    axum::extract::Path((camera, file)): axum::extract::Path<(String, String)>,
) -> axum::response::Response {
    crate::hls::live_route(st.node.clone(), st.hls.clone(), camera, file).await
}

async fn hls_playback(
    State(st): State<AppState>,
    axum::extract::Path((camera, file)): axum::extract::Path<(String, String)>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> axum::response::Response {
    let query = crate::playback::request::query_params(query.as_deref());
    crate::hls::playback_route(st.node.clone(), camera, file, query).await
}

async fn ingest(
    State(st): State<AppState>,
    axum::extract::Path(camera): axum::extract::Path<String>,
) -> Result<Json<super::views::IngestView>, (StatusCode, String)> {
    ingest_view(&st.node, st.cluster.as_deref(), &camera).map(Json)
}

pub fn cluster_sessions_view(c: &Cluster) -> super::views::ClusterSessionsView {
    use super::views::{ClusterSessionView, ClusterSessionsView};
    let mut sessions = Vec::new();
    let mut truncated = Vec::new();
    for m in c.members() {
        let Some(r) = m.report.as_ref().filter(|_| m.alive) else {
            continue;
        };
        if (r.session_list.len() as u64) < u64::from(r.sessions) {
            truncated.push(m.id.clone());
        }
        sessions.extend(r.session_list.iter().map(|s| ClusterSessionView {
            node: m.id.clone(),
            id: s.id.clone(),
            path: s.path.clone(),
            kind: s.kind.clone(),
            client: s.client.clone(),
            kbps: s.kbps,
        }));
    }
    ClusterSessionsView {
        self_id: c.self_id.clone(),
        sessions,
        truncated,
    }
}

async fn cluster_sessions(
    State(st): State<AppState>,
    axum::Extension(who): Who,
) -> Result<Json<super::views::ClusterSessionsView>, (StatusCode, String)> {
    let mut v = st
        .cluster
        .as_deref()
        .map(cluster_sessions_view)
        .ok_or((StatusCode::NOT_FOUND, NO_CLUSTER.into()))?;
    v.sessions.retain(|s| who.may_see_path(&s.path));
    Ok(Json(v))
}
