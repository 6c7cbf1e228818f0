//! The node's cluster shell (issue 4): gossip membership over an authenticated transport,
//! the node's load report, scheduler election, and placement of DESCRIBEs by redirect.
//!
//! It lives in the server, not in `vigil-cluster`, because it reads the node's own state
//! (sessions, cache, live paths) and runs tokio tasks; `vigil-cluster` stays the pure policy
//! layer (placement, election, load model) that this shell feeds snapshots to.
//!
//! Placement: a playback DESCRIBE on a node that is not the scheduler asks the elected
//! scheduler over QUIC with mutual TLS ([`rpc`]); the scheduler decides with the configured
//! policy and applies the decision to its view at once (§A.4 step 5), so bursts arriving on
//! different nodes do not pile up. On timeout or error (or without cluster certificates) the
//! node decides from its own gossip view with the same policy (issue 4 §4's fallback); each
//! decision records the path taken.

pub mod report;
pub mod rpc;
pub mod transport;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use chitchat::{spawn_chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig};
use rand::SeedableRng;
use serde::Serialize;
use tokio::sync::Notify;
use tracing::info;
use vigil_cluster::{
    apply, place, Candidate, ClusterConfig, ClusterView, Decision, NodeView, PlaceState, Policy,
    Request, RequestKind,
};
use vigil_conf::Config;

use crate::node::Node;
use report::Report;
use transport::{AuthTransport, GossipStats};

/// Query parameter added to a redirect: the target serves the request without placing it
/// again, so a request is redirected at most once (no loops).
pub const PLACED_MARKER: &str = "vigil_placed";

const KEY_REPORT: &str = "report";
const KEY_TERM: &str = "term";
/// The scheduler's pull-camera bindings ([`CameraBindings`], JSON).
const KEY_BINDINGS: &str = "bindings";
const DECISIONS_KEPT: usize = 50;

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// One member as this node sees it.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub gossip: SocketAddr,
    pub alive: bool,
    pub term: u64,
    /// Chitchat version of the report key: a new version replaces local estimates.
    pub report_version: u64,
    pub report: Option<Report>,
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
}

/// Where a camera should push, as `GET /api/ingest/<camera>` answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestTarget {
    pub node: String,
    /// The node's RTSP URL base (`rtsp://host:port`).
    pub base: String,
    pub reason: String,
}

/// Which node pulls each pull camera (§B, issue 4 §6): made by the scheduler, published in
/// its gossip state with its term; every node follows the bindings of the highest term.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct CameraBindings {
    pub term: u64,
    pub scheduler: String,
    /// camera → node.
    pub cameras: BTreeMap<String, String>,
}

/// Where a DESCRIBE is served.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    Local,
    /// Redirect to this RTSP URL base (`rtsp://host:port`).
    Redirect {
        node: String,
        base: String,
    },
    Reject(String),
}

struct State {
    members: Vec<Member>,
    /// Per node: the report version the view entry came from and the entry with the local
    /// decisions applied since (estimated load, added streams).
    views: BTreeMap<String, (u64, NodeView)>,
    scheduler: Option<String>,
    term: u64,
    place_state: PlaceState,
    rng: rand::rngs::StdRng,
    decisions: VecDeque<DecisionRecord>,
    /// The bindings this node follows (the highest term seen).
    bindings: CameraBindings,
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
    pub pull_cameras: Vec<String>,
    pub stats: Arc<GossipStats>,
    /// The QUIC endpoint (None without cluster certificates) and its advertised address.
    rpc: Option<rpc::Rpc>,
    pub rpc_advertise: Option<SocketAddr>,
    pub rpc_timeout: Duration,
    handle: ChitchatHandle,
    state: Mutex<State>,
    /// A significant change (a session started or ended): publish the report at once.
    pub changed: Notify,
}

impl Cluster {
    /// Joins the cluster and starts the report and election tasks.
    pub async fn start(node: &Arc<Node>) -> anyhow::Result<Arc<Cluster>> {
        let config: &Config = &node.config;
        let c = &config.cluster;
        let policy: Policy = c
            .policy
            .parse()
            .map_err(|e| anyhow::anyhow!("cluster.policy: {e}"))?;
        let rtsp_base = c.rtsp_url_base(config.rtsp.listen);
        let mut advertise = c.gossip_listen;
        if advertise.ip().is_unspecified() && !config.rtsp.listen.ip().is_unspecified() {
            advertise.set_ip(config.rtsp.listen.ip());
        }
        let mut policy_cfg = ClusterConfig::default();
        if let Some(m) = c.load_max {
            // Light must stay below overloaded (§A.1 states are ordered).
            policy_cfg.sched.load_max = m;
            policy_cfg.sched.load_min = policy_cfg.sched.load_min.min(m);
        }
        let started_ms = now_ms();
        let stats = Arc::new(GossipStats::default());
        let transport = AuthTransport::new(c.key.as_bytes(), stats.clone());
        let interval = Duration::from_millis(c.gossip_interval_ms);
        let chitchat_config = ChitchatConfig {
            chitchat_id: ChitchatId::new(config.node.id.clone(), started_ms as u64, advertise),
            cluster_id: "vigil".into(),
            gossip_interval: interval,
            listen_addr: c.gossip_listen,
            seed_nodes: c.seeds.clone(),
            // Heartbeats arrive about once per gossip round: dead after ~phi_threshold rounds
            // of silence (8 × 200 ms = 1.6 s, plus up to a round to notice).
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
        let cluster = Arc::new(Cluster {
            self_id: config.node.id.clone(),
            rtsp_base,
            api: config.http.listen.to_string(),
            gossip_addr: advertise,
            priority: c.priority,
            policy,
            grace_ms: c.election_grace_ms as i64,
            started_ms,
            policy_cfg,
            pull_cameras: node
                .paths()
                .iter()
                .filter(|p| p.configured && matches!(p.source, vigil_conf::Source::Pull { .. }))
                .filter_map(|p| p.name.strip_prefix("live/").map(str::to_string))
                .collect(),
            stats,
            rpc,
            rpc_advertise,
            rpc_timeout: Duration::from_millis(c.rpc_timeout_ms),
            handle,
            state: Mutex::new(State {
                members: Vec::new(),
                views: BTreeMap::new(),
                scheduler: None,
                term: 0,
                place_state: PlaceState::default(),
                rng: rand::rngs::StdRng::from_entropy(),
                decisions: VecDeque::new(),
                bindings: CameraBindings::default(),
            }),
            changed: Notify::new(),
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
            let handler: rpc::Handler = Arc::new(move |req| match weak.upgrade() {
                Some(c) => c.serve_rpc(req),
                None => rpc::RpcResponse::Error("shutting down".into()),
            });
            node.tasks
                .spawn(rpc::Rpc::serve(r.endpoint.clone(), handler));
        }
        // Publish a first report before anyone asks.
        let first = report::build(node, &cluster, &mut report::Sampler::new(), 10);
        cluster.publish(&first).await;
        node.tasks.spawn(report::run(node.clone(), cluster.clone()));
        node.tasks
            .spawn(refresh_loop(node.clone(), cluster.clone()));
        Ok(cluster)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets this node's report in its gossip state.
    pub async fn publish(&self, r: &Report) {
        let json = serde_json::to_string(r).unwrap_or_default();
        let chitchat = self.handle.chitchat();
        let mut cc = chitchat.lock().await;
        cc.self_node_state().set(KEY_REPORT, json);
    }

    /// Reads the membership view, re-elects, and rebuilds the placement view.
    async fn refresh(&self) {
        let (members, seen_bindings) = {
            let chitchat = self.handle.chitchat();
            let cc = chitchat.lock().await;
            let live: std::collections::HashSet<&ChitchatId> = cc.live_nodes().collect();
            // The newest generation of every node id (a restarted node is a new generation).
            let mut newest: BTreeMap<&str, &ChitchatId> = BTreeMap::new();
            for id in cc.node_states().keys() {
                let e = newest.entry(&*id.node_id).or_insert(id);
                if id.generation_id > e.generation_id {
                    *e = id;
                }
            }
            // The bindings of the highest term any node published (ties: lowest scheduler id).
            let seen_bindings = newest
                .values()
                .filter_map(|id| cc.node_state(id)?.get(KEY_BINDINGS))
                .filter_map(|v| serde_json::from_str::<CameraBindings>(v).ok())
                .max_by(|a, b| {
                    a.term
                        .cmp(&b.term)
                        .then_with(|| b.scheduler.cmp(&a.scheduler))
                });
            let members = newest
                .values()
                .map(|id| {
                    let st = cc.node_state(id);
                    let report_v = st.and_then(|s| s.get_versioned(KEY_REPORT));
                    Member {
                        id: id.node_id.to_string(),
                        gossip: id.gossip_advertise_addr,
                        alive: live.contains(id),
                        term: st
                            .and_then(|s| s.get(KEY_TERM))
                            .and_then(|t| t.parse().ok())
                            .unwrap_or(0),
                        report_version: report_v.map_or(0, |v| v.version),
                        report: report_v.and_then(|v| serde_json::from_str(&v.value).ok()),
                    }
                })
                .collect::<Vec<_>>();
            (members, seen_bindings)
        };
        let candidates: Vec<Candidate> = members
            .iter()
            .filter_map(|m| {
                let r = m.report.as_ref()?;
                Some(Candidate {
                    id: m.id.clone(),
                    priority: r.priority,
                    started_ms: r.started_ms,
                    alive: m.alive,
                })
            })
            .collect();
        let elected =
            vigil_cluster::elect(&candidates, now_ms(), self.grace_ms).map(|c| c.id.clone());
        let new_term = {
            let mut st = self.state();
            let mut new_term = None;
            if elected != st.scheduler {
                let term = vigil_cluster::next_term(st.term, members.iter().map(|m| m.term));
                info!(scheduler = ?elected, term, "scheduler changed");
                st.scheduler = elected;
                st.term = term;
                new_term = Some(term);
            } else if let Some(max) = members.iter().map(|m| m.term).max() {
                // Adopt a higher term seen elsewhere so the terms converge.
                if max > st.term {
                    st.term = max;
                    new_term = Some(max);
                }
            }
            // Placement view: keep local estimates until the node's next report.
            let mut views = BTreeMap::new();
            for m in &members {
                let Some(r) = &m.report else { continue };
                let entry = match st.views.remove(&m.id) {
                    Some((v, mut nv)) if v == m.report_version => {
                        nv.alive = m.alive;
                        (v, nv)
                    }
                    _ => (m.report_version, r.node_view(&m.id, m.alive)),
                };
                views.insert(m.id.clone(), entry);
            }
            st.views = views;
            st.members = members;
            if let Some(b) = seen_bindings {
                if b.term > st.bindings.term
                    || (b.term == st.bindings.term && b.scheduler <= st.bindings.scheduler)
                {
                    st.bindings = b;
                }
            }
            let publish = self.bind_cameras(&mut st);
            (new_term, publish)
        };
        let (new_term, publish) = new_term;
        if new_term.is_some() || publish.is_some() {
            let chitchat = self.handle.chitchat();
            let mut cc = chitchat.lock().await;
            if let Some(t) = new_term {
                cc.self_node_state().set(KEY_TERM, t.to_string());
            }
            if let Some(b) = publish {
                cc.self_node_state()
                    .set(KEY_BINDINGS, serde_json::to_string(&b).unwrap_or_default());
            }
        }
    }

    /// The scheduler's part of §B: keeps every pull camera bound to a live node, re-binding
    /// at once the cameras of a node that died (§B.2 load, §B.4 roulette). Returns the
    /// bindings to publish when they changed (or the term did).
    fn bind_cameras(&self, st: &mut State) -> Option<CameraBindings> {
        if st.scheduler.as_deref() != Some(self.self_id.as_str()) || self.pull_cameras.is_empty() {
            return None;
        }
        let live: Vec<vigil_cluster::gateway::GatewayNode> = st
            .members
            .iter()
            .filter(|m| m.alive)
            .filter_map(|m| {
                let r = m.report.as_ref()?;
                Some(vigil_cluster::gateway::GatewayNode {
                    node: m.id.clone(),
                    r_cpu: r.cpu,
                    stream_bytes_per_s: r.streams.iter().map(|s| s.vbr_bps / 8.0).collect(),
                })
            })
            .collect();
        let State { rng, bindings, .. } = &mut *st;
        let (map, changes) = vigil_cluster::gateway::bind_cameras(
            &self.pull_cameras,
            &bindings.cameras,
            &live,
            &self.policy_cfg.gateway,
            rng,
        );
        let next = CameraBindings {
            term: st.term,
            scheduler: self.self_id.clone(),
            cameras: map,
        };
        if next == st.bindings {
            return None;
        }
        for c in changes {
            info!(camera = %c.camera, node = %c.node, previous = ?c.previous, "camera bound");
            record(
                st,
                DecisionRecord {
                    at_ms: now_ms(),
                    kind: "bind",
                    camera: c.camera,
                    time_ms: now_ms(),
                    node: Some(c.node),
                    redirected: false,
                    reason: c.reason,
                    via: "scheduler",
                    decided_by: self.self_id.clone(),
                    asked_by: None,
                },
            );
        }
        st.bindings = next.clone();
        Some(next)
    }

    /// Whether the scheduler bound this pull camera to this node.
    pub fn holds(&self, camera: &str) -> bool {
        self.state().bindings.cameras.get(camera) == Some(&self.self_id)
    }

    /// The bindings this node follows.
    pub fn bindings(&self) -> CameraBindings {
        self.state().bindings.clone()
    }

    /// Another alive node the pull camera is bound to, and its RTSP base: where a live
    /// DESCRIBE goes even before that node has the camera live (on-demand).
    pub fn bound_holder(&self, camera: &str) -> Option<(String, String)> {
        let st = self.state();
        let id = st.bindings.cameras.get(camera)?;
        if *id == self.self_id {
            return None;
        }
        let m = st.members.iter().find(|m| &m.id == id && m.alive)?;
        Some((id.clone(), m.report.as_ref()?.rtsp.clone()))
    }

    pub fn members(&self) -> Vec<Member> {
        self.state().members.clone()
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
        let st = self.state();
        ClusterView::new(
            st.views.values().map(|(_, v)| v.clone()).collect(),
            self.policy_cfg.sched.weights,
        )
    }

    fn base_of(&self, st: &State, id: &str) -> Option<String> {
        st.members
            .iter()
            .find(|m| m.id == id)
            .and_then(|m| m.report.as_ref())
            .map(|r| r.rtsp.clone())
    }

    /// Places a playback request (§A.4 or the configured policy) over this node's view and
    /// applies the decision to the view at once (§A.4 step 5).
    ///
    /// A node that is not the scheduler asks the scheduler first (QUIC, within
    /// `rpc_timeout`); on timeout or error it decides itself ("local fallback").
    pub async fn place_playback(&self, camera: &str, time_ms: i64, vbr_bps: f64) -> Placement {
        let req = Request {
            camera: camera.to_string(),
            time_ms,
            vbr_bps,
            kind: RequestKind::Playback,
        };
        let via = match self.ask_scheduler(&req).await {
            Ok(Some(p)) => return p,
            Ok(None) if self.rpc.is_none() => "local",
            Ok(None) => "scheduler",
            Err(e) => {
                tracing::warn!(error = %e, camera, "scheduler not reached: deciding locally");
                "local fallback"
            }
        };
        let (_, placement, _) = self.decide(&req, self.policy, "playback", true, None, via);
        placement
    }

    /// Asks the elected scheduler to place `req`. Ok(None): decide here (QUIC is off, or this
    /// node is the scheduler); Err: the call failed or timed out.
    async fn ask_scheduler(&self, req: &Request) -> anyhow::Result<Option<Placement>> {
        let Some(rpc) = &self.rpc else {
            return Ok(None);
        };
        let (sched, addr) = {
            let st = self.state();
            let Some(sched) = st.scheduler.clone() else {
                anyhow::bail!("no scheduler elected");
            };
            if sched == self.self_id {
                return Ok(None);
            }
            let addr = st
                .members
                .iter()
                .find(|m| m.id == sched)
                .and_then(|m| m.report.as_ref()?.rpc.as_ref()?.parse::<SocketAddr>().ok())
                .with_context(|| format!("scheduler {sched} advertises no RPC endpoint"))?;
            (sched, addr)
        };
        let call = rpc::RpcRequest::Place {
            request: rpc::PlaceRequest {
                from: self.self_id.clone(),
                camera: req.camera.clone(),
                time_ms: req.time_ms,
                vbr_bps: req.vbr_bps,
            },
        };
        let resp = tokio::time::timeout(self.rpc_timeout, rpc.call(&sched, addr, &call))
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "scheduler {sched} did not answer within {:?}",
                    self.rpc_timeout
                )
            })??;
        let d = match resp {
            rpc::RpcResponse::Decision(d) => d,
            rpc::RpcResponse::Error(e) => anyhow::bail!("scheduler {sched}: {e}"),
        };
        let placement = match (&d.node, &d.base) {
            (Some(n), _) if *n == self.self_id => Placement::Local,
            (Some(n), Some(b)) => Placement::Redirect {
                node: n.clone(),
                base: b.clone(),
            },
            (Some(n), None) => anyhow::bail!("scheduler {sched} chose {n} without an RTSP URL"),
            (None, _) => Placement::Reject(d.reason.clone()),
        };
        let mut st = self.state();
        record(
            &mut st,
            DecisionRecord {
                at_ms: now_ms(),
                kind: "playback",
                camera: req.camera.clone(),
                time_ms: req.time_ms,
                node: d.node.clone(),
                redirected: matches!(placement, Placement::Redirect { .. }),
                reason: d.reason,
                via: "scheduler",
                decided_by: d.scheduler,
                asked_by: None,
            },
        );
        Ok(Some(placement))
    }

    /// A call from another node.
    fn serve_rpc(&self, req: rpc::RpcRequest) -> rpc::RpcResponse {
        match req {
            rpc::RpcRequest::Place { request } => {
                let req = Request {
                    camera: request.camera,
                    time_ms: request.time_ms,
                    vbr_bps: request.vbr_bps,
                    kind: RequestKind::Playback,
                };
                let (node, _, reason) = self.decide(
                    &req,
                    self.policy,
                    "playback",
                    true,
                    Some(&request.from),
                    "scheduler",
                );
                let st = self.state();
                let base = node.as_ref().and_then(|n| self.base_of(&st, n));
                rpc::RpcResponse::Decision(rpc::WireDecision {
                    node,
                    base,
                    reason,
                    scheduler: self.self_id.clone(),
                    term: st.term,
                })
            }
        }
    }

    /// Where a camera should push (`GET /api/ingest/<camera>`, §C's EasyDarwin flow): the
    /// node already holding it live, else the node the `knn-class` policy chooses over this
    /// node's view (applied to the view at once, so a burst of cameras spreads).
    pub fn place_ingest(&self, camera: &str) -> Result<IngestTarget, String> {
        if let Some((node, base)) = self.live_holder_any(camera) {
            return Ok(IngestTarget {
                reason: format!("camera {camera} is already live on {node}"),
                node,
                base,
            });
        }
        let req = Request {
            camera: camera.to_string(),
            time_ms: now_ms(),
            vbr_bps: report::DEFAULT_VBR_BPS,
            kind: RequestKind::Live,
        };
        match self.decide(&req, Policy::KnnClass, "ingest", false, None, "local") {
            (_, Placement::Local, reason) => Ok(IngestTarget {
                node: self.self_id.clone(),
                base: self.rtsp_base.clone(),
                reason,
            }),
            (_, Placement::Redirect { node, base }, reason) => {
                Ok(IngestTarget { node, base, reason })
            }
            (_, Placement::Reject(reason), _) => Err(reason),
        }
    }

    /// Runs `policy` for `req` over this node's view, applies an assignment to the view and
    /// records the decision. `redirects`: whether a remote choice is answered with a 302;
    /// `asked_by`: the node that asked (None: this one); `via`: the path, as recorded.
    /// Returns the chosen node, the placement as seen from this node, and the reason.
    fn decide(
        &self,
        req: &Request,
        policy: Policy,
        kind: &'static str,
        redirects: bool,
        asked_by: Option<&str>,
        via: &'static str,
    ) -> (Option<String>, Placement, String) {
        let mut st = self.state();
        let nodes: Vec<NodeView> = st.views.values().map(|(_, v)| v.clone()).collect();
        let mut view = ClusterView::new(nodes, self.policy_cfg.sched.weights);
        if policy == Policy::KnnClass {
            view.classify_nodes(&self.policy_cfg.knn);
        }
        let State {
            place_state, rng, ..
        } = &mut *st;
        let decision = place(&view, req, policy, place_state, &self.policy_cfg, rng);
        let placement = match &decision {
            Decision::Assign { node, .. } => {
                if apply(&mut view, &decision).is_ok() {
                    if let Some(i) = view.index_of(node) {
                        let nv = view.node(i).clone();
                        if let Some(e) = st.views.get_mut(node) {
                            e.1 = nv;
                        }
                    }
                }
                if *node == self.self_id {
                    Placement::Local
                } else {
                    match self.base_of(&st, node) {
                        Some(base) => Placement::Redirect {
                            node: node.clone(),
                            base,
                        },
                        None => Placement::Local,
                    }
                }
            }
            Decision::Reject { reason } => Placement::Reject(reason.clone()),
        };
        let (node, reason) = match &decision {
            Decision::Assign { node, reason, .. } => (Some(node.clone()), reason.clone()),
            Decision::Reject { reason } => (None, reason.clone()),
        };
        let redirected = redirects
            && match asked_by {
                Some(a) => node.as_deref().is_some_and(|n| n != a),
                None => matches!(placement, Placement::Redirect { .. }),
            };
        record(
            &mut st,
            DecisionRecord {
                at_ms: now_ms(),
                kind,
                camera: req.camera.clone(),
                time_ms: req.time_ms,
                node: node.clone(),
                redirected,
                reason: reason.clone(),
                via,
                decided_by: self.self_id.clone(),
                asked_by: asked_by.map(str::to_string),
            },
        );
        (node, placement, reason)
    }

    /// The alive node (this one included) whose report lists `camera` as live.
    fn live_holder_any(&self, camera: &str) -> Option<(String, String)> {
        let st = self.state();
        st.members
            .iter()
            .filter(|m| m.alive)
            .filter_map(|m| Some((m, m.report.as_ref()?)))
            .find(|(_, r)| r.live.iter().any(|c| c == camera))
            .map(|(m, r)| (m.id.clone(), r.rtsp.clone()))
    }

    /// A live camera held (live) by another alive node: where to redirect a live DESCRIBE.
    pub fn live_holder(&self, camera: &str) -> Option<(String, String)> {
        let mut st = self.state();
        let found = st
            .members
            .iter()
            .filter(|m| m.alive && m.id != self.self_id)
            .filter_map(|m| Some((m, m.report.as_ref()?)))
            .find(|(_, r)| r.live.iter().any(|c| c == camera))
            .map(|(m, r)| (m.id.clone(), r.rtsp.clone()));
        if let Some((id, _)) = &found {
            record(
                &mut st,
                DecisionRecord {
                    at_ms: now_ms(),
                    kind: "live",
                    camera: camera.to_string(),
                    time_ms: now_ms(),
                    node: Some(id.clone()),
                    redirected: true,
                    reason: format!("live camera {camera} is held by {id}"),
                    via: "local",
                    decided_by: self.self_id.clone(),
                    asked_by: None,
                },
            );
        }
        found
    }
}

fn record(st: &mut State, d: DecisionRecord) {
    if st.decisions.len() >= DECISIONS_KEPT {
        st.decisions.pop_front();
    }
    st.decisions.push_back(d);
}

/// Membership and election are re-read every 100 ms (cheap: a few nodes' key/values).
async fn refresh_loop(node: Arc<Node>, cluster: Arc<Cluster>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => break,
            _ = tick.tick() => {
                cluster.refresh().await;
                follow_bindings(&node, &cluster);
            }
        }
    }
    if let Some(r) = &cluster.rpc {
        r.endpoint.close(0u32.into(), b"shutdown");
    }
    let _ = cluster.handle.initiate_shutdown();
}

/// Every node follows the bindings it sees: the bound node runs the pull of an always-on
/// camera (an on-demand one starts on DESCRIBE), the others stop theirs. A camera with no
/// binding yet is pulled by nobody.
fn follow_bindings(node: &Arc<Node>, cluster: &Cluster) {
    let bindings = cluster.bindings();
    for path in node.paths() {
        if !path.configured || !matches!(path.source, vigil_conf::Source::Pull { .. }) {
            continue;
        }
        let Some(camera) = path.name.strip_prefix("live/") else {
            continue;
        };
        if bindings.cameras.get(camera) == Some(&cluster.self_id) {
            if !path.on_demand {
                crate::ingest::pull::ensure_running(node, &path);
            }
        } else {
            crate::ingest::pull::stop(&path);
        }
    }
}

/// Adds the placement marker to a URL's query.
pub fn with_marker(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            u.query_pairs_mut().append_pair(PLACED_MARKER, "1");
            u.to_string()
        }
        Err(_) => url.to_string(),
    }
}

/// Whether a request URL carries the placement marker.
pub fn has_marker(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| u.query_pairs().any(|(k, _)| k == PLACED_MARKER))
}

/// The URL without the placement marker (for Content-Base).
pub fn strip_marker(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else {
        return url.to_string();
    };
    let Some(q) = u.query() else {
        return url.to_string();
    };
    let kept: Vec<&str> = q
        .split('&')
        .filter(|p| p.split('=').next() != Some(PLACED_MARKER))
        .collect();
    if kept.is_empty() {
        u.set_query(None);
    } else {
        u.set_query(Some(&kept.join("&")));
    }
    u.to_string()
}

/// The redirect target: the chosen node's base with the request's path and query, and the
/// marker. The raw query is kept as is (an RFC 3339 `+01:00` must not be re-encoded).
pub fn redirect_url(base: &str, request_uri: &str) -> String {
    let (path, query) = match url::Url::parse(request_uri) {
        Ok(u) => (u.path().to_string(), u.query().map(str::to_string)),
        Err(_) => ("/".to_string(), None),
    };
    let q = match query {
        Some(q) if !q.is_empty() => format!("?{q}&{PLACED_MARKER}=1"),
        _ => format!("?{PLACED_MARKER}=1"),
    };
    format!("{}{path}{q}", base.trim_end_matches('/'))
}

/// Sessions counted by the node changed: wake the report task.
pub fn notify_change(node: &Node) {
    if let Some(c) = node.cluster.get() {
        c.changed.notify_one();
    }
}

/// Bitrate of a session, for the fingerprint of significant changes.
pub(crate) fn session_rate(s: &crate::node::SessionInfo) -> u64 {
    s.rate_bps.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_keeps_path_and_query_and_marks() {
        let u = redirect_url(
            "rtsp://127.0.0.2:8554",
            "rtsp://127.0.0.1:9000/playback/cam?start=2026-01-01T00:00:00+01:00&end=x",
        );
        assert_eq!(
            u,
            "rtsp://127.0.0.2:8554/playback/cam?start=2026-01-01T00:00:00+01:00&end=x&vigil_placed=1"
        );
        assert!(has_marker(&u));
        let live = redirect_url("rtsp://h:1/", "rtsp://a:2/live/demo");
        assert_eq!(live, "rtsp://h:1/live/demo?vigil_placed=1");
        assert_eq!(strip_marker(&live), "rtsp://h:1/live/demo");
        assert_eq!(
            strip_marker("rtsp://h:1/p?a=1&vigil_placed=1"),
            "rtsp://h:1/p?a=1"
        );
        assert!(!has_marker("rtsp://h:1/live/demo?x=1"));
        assert!(with_marker("rtsp://h:1/x").ends_with("?vigil_placed=1"));
    }
}
