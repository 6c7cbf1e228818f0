//! The shared [`Cluster`]: its configuration, the state every part of the shell reads and
//! writes under one lock, joining the cluster, and the read-only views the API shows.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use chitchat::{spawn_chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig};
use rand::SeedableRng;
use serde::Serialize;
use tracing::{info, warn};
use vigil_cluster::{ClusterConfig, ClusterView, PlaceState, Policy, ViewEntry};
use vigil_conf::Config;

use super::bindings::CameraBindings;
use super::membership::{refresh_loop, KEY_TERM};
use super::now_ms;
use super::report::{self, Report};
use super::reservations;
use super::rpc;
use super::transport::{AuthTransport, GossipStats};
use crate::node::Node;

const DECISIONS_KEPT: usize = 50;

/// One member as this node sees it.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub gossip: SocketAddr,
    pub alive: bool,
    pub term: u64,
    /// Chitchat version of the report key: a new version replaces the local estimates
    /// decided before it was built (`reservations`).
    pub report_version: u64,
    pub report: Option<Arc<Report>>,
}

/// A placement decision as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRecord {
    pub at_ms: i64,
    pub kind: &'static str,
    pub camera: String,
    pub time_ms: i64,
    /// The chosen node, or None for a rejection.
    pub node: Option<String>,
    pub redirected: bool,
    pub reason: String,
    /// How it was decided: "scheduler" (by the elected scheduler, asked over QUIC or being
    /// this node), "local fallback" (the call failed or timed out, or no scheduler is known)
    /// or "local" (no cluster certificates: QUIC is off).
    pub via: &'static str,
    /// The node that decided.
    pub decided_by: String,
    /// The node that asked the scheduler (on the scheduler, for calls from other nodes).
    pub asked_by: Option<String>,
    /// A playback's expected bitrate, from the segment it starts in: what the decision
    /// added to the chosen node's estimate (§A.4 step 5).
    pub vbr_bps: Option<f64>,
}

pub(super) struct State {
    pub(super) members: Vec<Member>,
    /// Per node: the report version the view entry came from and the entry with the local
    /// decisions applied since (estimated load, added streams).
    /// Each entry's generation changes with it (`view_cache` tells changes by it).
    pub(super) views: BTreeMap<String, (u64, ViewEntry)>,
    /// The placement view of `views`, updated per changed entry rather than rebuilt per
    /// decision (issue 13).
    pub(super) view_cache: vigil_cluster::ViewCache,
    pub(super) scheduler: Option<String>,
    pub(super) term: u64,
    pub(super) place_state: PlaceState,
    pub(super) rng: rand::rngs::StdRng,
    pub(super) decisions: VecDeque<DecisionRecord>,
    /// The bindings this node follows (the highest term seen).
    pub(super) bindings: CameraBindings,
    /// §A.5 REM in the scheduler: what it ran on, what is moving, what it decided.
    pub(super) rem: super::rem::RemState,
    /// §D.2 planner in the scheduler: arrivals, the last plans.
    pub(super) planner: super::planner::PlannerState,
    /// Placements held against the view until they lapse (see `reservations`).
    pub(super) reservations: Vec<super::reservations::Reservation>,
    /// §B.2–§B.5 camera moves: forecasts, moves under way, their records.
    pub(super) gateway: super::camera_move::GatewayState,
    /// Node ids several live nodes gossip under (`membership::shared_ids`).
    pub(super) id_conflicts: Vec<super::membership::IdConflict>,
    /// This node has seen another alive member with a report: from then on a change of
    /// scheduler is a failover, partition or heal, not its own election while it was alone
    /// at start (`vigil_cluster_scheduler_changes_total`).
    pub(super) had_peers: bool,
}

impl State {
    /// Replaces the members and rebuilds the placement view from their reports.
    pub(super) fn set_members(
        &mut self,
        members: Vec<Member>,
        weights: vigil_cluster::LoadWeights,
    ) {
        // Placement view: local estimates stay on the entry until the node's next report,
        // which keeps those decided after it was built (`reservations`).
        let mut views = BTreeMap::new();
        for m in &members {
            let Some(r) = &m.report else { continue };
            let entry = match self.views.remove(&m.id) {
                Some((v, mut nv)) if v == m.report_version => {
                    if nv.alive != m.alive {
                        nv.node_mut().alive = m.alive;
                    }
                    (v, nv)
                }
                _ => {
                    let version = m.report_version;
                    reservations::carry_over(&mut self.reservations, &m.id, version, r.at_ms);
                    let e = reservations::entry(
                        r,
                        &m.id,
                        m.alive,
                        version,
                        &self.reservations,
                        weights,
                    );
                    (version, e)
                }
            };
            views.insert(m.id.clone(), entry);
        }
        self.views = views;
        self.members = members;
    }

    /// The placement view of `views` (see `view_cache`).
    pub(super) fn placement_view(
        &mut self,
        weights: vigil_cluster::LoadWeights,
    ) -> &mut ClusterView {
        let nodes: Vec<&ViewEntry> = self.views.values().map(|(_, v)| v).collect();
        self.view_cache.sync(&nodes, weights)
    }
}

pub struct Cluster {
    pub self_id: String,
    pub rtsp_base: String,
    pub api: String,
    pub gossip_addr: SocketAddr,
    pub priority: u32,
    pub policy: Policy,
    pub grace_ms: i64,
    pub started_ms: i64,
    pub policy_cfg: ClusterConfig,
    /// The configured pull cameras (the same list on every node): bound by the scheduler.
    /// Replaced when the registry changes (`set_pull_cameras`).
    pull_cameras: Mutex<Vec<String>>,
    pub stats: Arc<GossipStats>,
    /// The QUIC endpoint (None without cluster certificates) and its advertised address.
    pub(super) rpc: Option<rpc::Rpc>,
    pub rpc_advertise: Option<SocketAddr>,
    pub rpc_timeout: Duration,
    /// How long a placement's load is held against the chosen node without its report.
    pub reservation: Duration,
    pub(super) handle: ChitchatHandle,
    pub(super) state: Mutex<State>,
    /// Members' parsed reports, per version (`membership`).
    pub(super) reports: super::membership::ReportCache,
    /// Alive/dead of every member from its gossiped heartbeat counter (`membership`).
    pub(super) liveness: Mutex<vigil_cluster::Liveness<ChitchatId>>,
    /// `failure_timeout_ms = 0`: chitchat's phi-accrual detector decides instead (the former
    /// behaviour, kept for comparison).
    pub(super) phi_liveness: bool,
    /// This member's scheduler watches (`watch`): a lost one passes its node over in the
    /// election before the gossip's `liveness` says it is dead.
    pub(super) watches: super::watch::Watches,
    /// The origin of the monotonic milliseconds `liveness` is fed.
    pub(super) epoch: std::time::Instant,
    /// Serves the migration calls of other nodes (set once at start-up by `crate::migrate`,
    /// which depends on the cluster, not the other way round).
    pub migration: std::sync::OnceLock<Arc<dyn rpc::MigrationService>>,
    /// The node's side of the camera bindings: its pulls follow them, and it takes a camera
    /// for a move (set once at start-up by `crate::ingest`).
    pub camera_host: std::sync::OnceLock<Arc<dyn super::camera_move::CameraHost>>,
    /// This node's movable cameras for §B.5 (awake, no viewer), as its usage tracker last
    /// saw them; reported to the scheduler.
    pub movable: Mutex<Vec<vigil_cluster::gateway::CameraUsage>>,
    /// Cameras pulled here for a move in (`camera_move`).
    pub(super) incoming: super::camera_move::Incoming,
    /// This node is being drained: it takes no placements and its sessions move off.
    pub draining: std::sync::atomic::AtomicBool,
    /// The cluster key, which signs redirect markers.
    pub(super) marker_key: Arc<[u8]>,
    /// Markers accepted here (by MAC): the connection that used each, and its expiry.
    pub(super) used_markers: Mutex<std::collections::HashMap<String, (u64, i64)>>,
    /// `[cluster] retired_certs`: certificates refused on the QUIC endpoint whatever they
    /// name (replaced on SIGHUP).
    retired: Mutex<std::collections::HashSet<String>>,
}

/// `[cluster] retired_certs` as the fingerprints the RPC server compares (the config's
/// check refused any that is not one).
fn retired_set(list: &[String]) -> std::collections::HashSet<String> {
    list.iter()
        .filter_map(|f| vigil_conf::fingerprint_hex(f))
        .collect()
}

impl Cluster {
    /// Joins the cluster and starts the report and election tasks.
    pub async fn start(node: &Arc<Node>) -> anyhow::Result<Arc<Cluster>> {
        let config: &Config = &node.config;
        let c = &config.cluster;
        let policy: Policy = c.policy;
        let rtsp_base = c.rtsp_url_base(config.rtsp.listen);
        let mut advertise = c.gossip_listen;
        if advertise.ip().is_unspecified() && !config.rtsp.listen.ip().is_unspecified() {
            advertise.set_ip(config.rtsp.listen.ip());
        }
        let mut policy_cfg = ClusterConfig {
            sched: c.scheduler,
            gateway: c.gateway,
            knn: c.knn.clone(),
            feedback: c.feedback,
            planner: c.planner,
            edge: c.edge,
        };
        if let Some(path) = &c.knn_training_file {
            #[derive(serde::Deserialize)]
            #[serde(deny_unknown_fields)]
            struct File {
                training: Vec<vigil_cluster::TrainingSample>,
            }
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading cluster.knn_training_file {}", path.display()))?;
            let f: File = toml::from_str(&text)
                .with_context(|| format!("parsing cluster.knn_training_file {}", path.display()))?;
            anyhow::ensure!(
                !f.training.is_empty(),
                "cluster.knn_training_file {}: no [[training]] sample",
                path.display()
            );
            policy_cfg.knn.training = f.training;
        }
        if let Some(m) = c.load_max {
            // Light must stay below overloaded (§A.1 states are ordered).
            policy_cfg.sched.load_max = m;
            policy_cfg.sched.load_min = policy_cfg.sched.load_min.min(m);
        }
        let started_ms = now_ms();
        let stats = Arc::new(GossipStats::default());
        let transport = AuthTransport::new(c.key.expose().as_bytes(), stats.clone());
        let interval = Duration::from_millis(c.gossip_interval_ms);
        let chitchat_config = ChitchatConfig {
            chitchat_id: ChitchatId::new(config.node.id.clone(), started_ms as u64, advertise),
            cluster_id: "vigil".into(),
            gossip_interval: interval,
            listen_addr: c.gossip_listen,
            seed_nodes: c.seeds.clone(),
            // Only whom the gossip talks to: the members' alive/dead is the heartbeat
            // staleness of `membership` (`failure_timeout_ms`).
            failure_detector_config: FailureDetectorConfig {
                phi_threshold: c.phi_threshold,
                sampling_window_size: 100,
                max_interval: interval * 10,
                initial_interval: interval,
                dead_node_grace_period: Duration::from_secs(600),
            },
            marked_for_deletion_grace_period: Duration::from_secs(3600),
            catchup_callback: None,
            extra_liveness_predicate: None,
        };
        let handle = spawn_chitchat(
            chitchat_config,
            vec![(KEY_TERM.to_string(), "0".to_string())],
            &transport,
        )
        .await
        .with_context(|| format!("cannot start the gossip on {}", c.gossip_listen))?;
        let rpc = match (&c.ca_cert, &c.node_cert, &c.node_key) {
            (Some(ca), Some(cert), Some(key)) => {
                let tls = rpc::Tls::load(ca, cert, key).context("cluster certificates")?;
                Some(rpc::Rpc::bind(tls, c.rpc_addr())?)
            }
            _ => {
                info!(
                    "no cluster certificates (cluster.ca_cert, node_cert, node_key): \
                     placements are decided locally from this node's gossip view"
                );
                None
            }
        };
        let rpc_advertise = rpc.as_ref().map(|r| {
            let mut a = r.local;
            if a.ip().is_unspecified() {
                a.set_ip(advertise.ip());
            }
            a
        });
        let watches =
            super::watch::Watches::new(rpc.as_ref(), c.scheduler_watch_ms, c.scheduler_timeout_ms);
        let cluster = Arc::new(Cluster {
            retired: Mutex::new(retired_set(&c.retired_certs)),
            self_id: config.node.id.clone(),
            rtsp_base,
            api: config.http.listen.to_string(),
            gossip_addr: advertise,
            priority: c.priority,
            policy,
            grace_ms: c.election_grace_ms as i64,
            started_ms,
            policy_cfg,
            pull_cameras: Mutex::new(pull_cameras_of(node)),
            stats,
            rpc,
            rpc_advertise,
            rpc_timeout: Duration::from_millis(c.rpc_timeout_ms),
            reservation: Duration::from_millis(c.reservation_ms),
            handle,
            reports: Default::default(),
            liveness: Mutex::new(vigil_cluster::Liveness::new(
                vigil_cluster::LivenessConfig {
                    timeout_ms: c.failure_timeout_ms,
                    max_step_ms: c.failure_stall_ms,
                },
            )),
            phi_liveness: c.failure_timeout_ms == 0,
            watches,
            epoch: std::time::Instant::now(),
            state: Mutex::new(State {
                members: Vec::new(),
                views: BTreeMap::new(),
                view_cache: Default::default(),
                scheduler: None,
                term: 0,
                place_state: PlaceState::default(),
                rng: rand::rngs::StdRng::from_entropy(),
                decisions: VecDeque::new(),
                bindings: CameraBindings::default(),
                rem: Default::default(),
                planner: Default::default(),
                reservations: Vec::new(),
                gateway: Default::default(),
                id_conflicts: Vec::new(),
                had_peers: false,
            }),
            migration: std::sync::OnceLock::new(),
            camera_host: std::sync::OnceLock::new(),
            movable: Mutex::new(Vec::new()),
            incoming: Default::default(),
            draining: Default::default(),
            marker_key: c.key.expose().as_bytes().into(),
            used_markers: Mutex::new(Default::default()),
        });
        info!(
            gossip = %c.gossip_listen,
            seeds = ?c.seeds,
            policy = %policy,
            rtsp = %cluster.rtsp_base,
            "cluster enabled"
        );
        if let Some(r) = &cluster.rpc {
            info!(rpc = %r.local, "cluster RPC (QUIC, mutual TLS) listening");
            let weak = Arc::downgrade(&cluster);
            let handler: rpc::Handler = Arc::new(move |caller, req| {
                let cluster = weak.upgrade();
                Box::pin(async move {
                    let Some(c) = cluster else {
                        return rpc::RpcResponse::Error("shutting down".into());
                    };
                    if c.is_retired(&caller) {
                        warn!(caller = ?caller.names, fingerprint = %caller.fingerprint, "cluster RPC call from a retired certificate refused");
                        return rpc::RpcResponse::Error(
                            "refused: this certificate is retired ([cluster] retired_certs)".into(),
                        );
                    }
                    if let Err(why) = rpc::authorize(&req, &caller, &|id| c.is_live_member(id)) {
                        warn!(caller = ?caller.names, "cluster RPC call {why}");
                        return rpc::RpcResponse::Error(why);
                    }
                    match req {
                        rpc::RpcRequest::Migration(call) => match c.migration.get() {
                            Some(m) => rpc::RpcResponse::Migration(m.handle(call).await),
                            None => rpc::RpcResponse::Error("migration is not ready".into()),
                        },
                        rpc::RpcRequest::TakeCamera { camera, timeout_ms } => {
                            let timeout = Duration::from_millis(timeout_ms.min(60_000));
                            match c.serve_take_camera(camera, timeout).await {
                                Ok(keyframe_ms) => rpc::RpcResponse::CameraReady { keyframe_ms },
                                Err(e) => rpc::RpcResponse::Error(e),
                            }
                        }
                        rpc::RpcRequest::MoveCamera { camera, to } => {
                            match c.move_camera_now(&camera, &to).await {
                                Ok(r) => rpc::RpcResponse::CameraMoved(Box::new(r)),
                                Err(e) => rpc::RpcResponse::Error(e),
                            }
                        }
                        other => c.serve_rpc(other),
                    }
                })
            });
            node.tasks
                .spawn(rpc::Rpc::serve(r.endpoint.clone(), handler));
        }
        // Publish a first report before anyone asks.
        let first = report::build(node, &cluster, &mut report::Sampler::new(), 10);
        cluster.publish(&first).await;
        node.tasks
            .spawn(super::publish::run(node.clone(), cluster.clone()));
        node.tasks
            .spawn(refresh_loop(node.clone(), cluster.clone()));
        Ok(cluster)
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pull cameras the scheduler binds.
    pub fn pull_cameras(&self) -> Vec<String> {
        self.pull_cameras
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The registry changed the cameras: the scheduler binds the new pull cameras and
    /// forgets the ones gone at its next refresh (every node holds the same list once it
    /// applied the same version), and every node follows the bindings as they change.
    pub fn set_pull_cameras(&self, node: &Node) {
        *self.pull_cameras.lock().unwrap_or_else(|p| p.into_inner()) = pull_cameras_of(node);
        if let Some(host) = self.camera_host.get() {
            host.follow_bindings();
        }
    }

    pub fn members(&self) -> Vec<Member> {
        self.state().members.clone()
    }

    /// Whether `id` is this node or a member the gossip sees alive now.
    /// Whether `caller`'s certificate is on `[cluster] retired_certs`.
    pub fn is_retired(&self, caller: &rpc::Caller) -> bool {
        self.retired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&caller.fingerprint)
    }

    /// A new `[cluster] retired_certs` (SIGHUP): calls already running finish, every new
    /// one is judged by it.
    pub fn set_retired(&self, list: &[String]) {
        let set = retired_set(list);
        info!(retired = set.len(), "retired cluster certificates reloaded");
        *self.retired.lock().unwrap_or_else(|p| p.into_inner()) = set;
    }

    pub fn is_live_member(&self, id: &str) -> bool {
        id == self.self_id || self.state().members.iter().any(|m| m.alive && m.id == id)
    }

    pub fn scheduler(&self) -> (Option<String>, u64) {
        let st = self.state();
        (st.scheduler.clone(), st.term)
    }

    pub fn decisions(&self) -> Vec<DecisionRecord> {
        self.state().decisions.iter().rev().cloned().collect()
    }

    /// Total sessions the cluster reports (for the §C.5 feedback period).
    pub fn cluster_sessions(&self) -> u64 {
        self.state()
            .members
            .iter()
            .filter(|m| m.alive)
            .filter_map(|m| m.report.as_ref())
            .map(|r| u64::from(r.sessions))
            .sum()
    }

    /// The placement view: one entry per reporting node, ordered by id.
    pub fn view(&self) -> ClusterView {
        let mut st = self.state();
        st.expire_reservations(std::time::Instant::now(), self.policy_cfg.sched.weights);
        st.placement_view(self.policy_cfg.sched.weights).clone()
    }
}

/// Kinds and outcomes of `vigil_placement_decisions_total` (the exporter writes each at zero
/// at start, so a rate over them exists before the first DESCRIBE).
pub const PLACEMENT_KINDS: [&str; 3] = ["live", "playback", "bind"];
pub const PLACEMENT_RESULTS: [&str; 3] = ["local", "redirected", "rejected"];

/// Keeps a decision for the API and counts it in `vigil_placement_decisions_total`.
pub(super) fn record(st: &mut State, d: DecisionRecord) {
    // Where the request arrived: the scheduler's record of a decision asked by another node
    // is that node's to count.
    if d.asked_by.is_none() {
        let result = match (&d.node, d.redirected) {
            (None, _) => "rejected",
            (Some(_), true) => "redirected",
            (Some(_), false) => "local",
        };
        metrics::counter!(
            "vigil_placement_decisions_total", "kind" => d.kind, "result" => result
        )
        .increment(1);
    }
    if st.decisions.len() >= DECISIONS_KEPT {
        st.decisions.pop_front();
    }
    st.decisions.push_back(d);
}

/// The node's served pull cameras, sorted (what the scheduler binds).
fn pull_cameras_of(node: &Node) -> Vec<String> {
    node.paths()
        .iter()
        .filter(|p| p.configured && p.is_pull())
        .filter_map(|p| p.name.strip_prefix("live/").map(str::to_string))
        .collect()
}
