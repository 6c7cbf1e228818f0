//! Placement of requests: a playback DESCRIBE (asking the scheduler over QUIC, or deciding
//! from this node's view), a camera's push target, and redirects of live DESCRIBEs to the
//! node holding the camera. Every decision is applied to the view and recorded.

use std::net::SocketAddr;

use anyhow::Context;
use vigil_cluster::{place, Decision, Policy, Request, RequestKind, ViewEntry};

use super::now_ms;
use super::report;
use super::rpc;
use super::shell::{record, Cluster, DecisionRecord, State};

/// Where a camera should push, as `GET /api/ingest/<camera>` answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestTarget {
    pub node: String,
    /// The node's RTSP URL base (`rtsp://host:port`).
    pub base: String,
    pub reason: String,
}

/// What decides a placement: a policy over the view, or (a live viewer) the live-edge rule
/// given the camera's holder and the nodes relaying it.
pub(super) enum How {
    Policy(Policy),
    Live { holder: String, edges: Vec<String> },
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

impl Cluster {
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
    pub(super) async fn ask_scheduler(&self, req: &Request) -> anyhow::Result<Option<Placement>> {
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
            // Known dead here (the election has not moved on yet): no call that can only
            // time out.
            if !st.members.iter().any(|m| m.id == sched && m.alive) {
                anyhow::bail!("scheduler {sched} is dead in this node's view");
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
                live: req.kind == RequestKind::Live,
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
            other => anyhow::bail!("scheduler {sched} answered {other:?}"),
        };
        let placement = match (&d.node, &d.base) {
            (Some(n), _) if *n == self.self_id => Placement::Local,
            // A viewer is never sent to a node this node knows is dead: the scheduler may
            // not know yet (each member detects a death on its own), so decide here.
            (Some(n), Some(_)) if !self.is_alive(n) => {
                anyhow::bail!("scheduler {sched} chose {n}, which is dead in this node's view")
            }
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
                kind: match req.kind {
                    RequestKind::Live => "live",
                    RequestKind::Playback => "playback",
                },
                camera: req.camera.clone(),
                time_ms: req.time_ms,
                node: d.node.clone(),
                redirected: matches!(placement, Placement::Redirect { .. }),
                reason: d.reason,
                via: "scheduler",
                decided_by: d.scheduler,
                asked_by: None,
                vbr_bps: playback_vbr(req),
            },
        );
        Ok(Some(placement))
    }

    /// A call from another node.
    pub(super) fn serve_rpc(&self, req: rpc::RpcRequest) -> rpc::RpcResponse {
        match req {
            rpc::RpcRequest::Place { request } => {
                let req = Request {
                    camera: request.camera,
                    time_ms: request.time_ms,
                    vbr_bps: request.vbr_bps,
                    kind: if request.live {
                        RequestKind::Live
                    } else {
                        RequestKind::Playback
                    },
                };
                let (node, reason) = if request.live {
                    match self.decide_live_for(&req, &request.from) {
                        Ok(decided) => decided,
                        Err(e) => return rpc::RpcResponse::Error(e),
                    }
                } else {
                    let (node, _, reason) = self.decide(
                        &req,
                        self.policy,
                        "playback",
                        true,
                        Some(&request.from),
                        "scheduler",
                    );
                    (node, reason)
                };
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
            rpc::RpcRequest::Migration(_)
            | rpc::RpcRequest::TakeCamera { .. }
            | rpc::RpcRequest::MoveCamera { .. } => {
                rpc::RpcResponse::Error("an asynchronous call: served by the RPC handler".into())
            }
        }
    }

    /// Where a session of this node should move while it drains: the configured policy
    /// over the view without this node (applied to the view, recorded as `drain`).
    pub fn place_elsewhere(
        &self,
        camera: &str,
        time_ms: i64,
        vbr_bps: f64,
    ) -> Result<String, String> {
        let req = Request {
            camera: camera.to_string(),
            time_ms,
            vbr_bps,
            kind: RequestKind::Playback,
        };
        self.decide_elsewhere(&req, How::Policy(self.policy))
    }

    /// A draining node's decision for `req` by `how`, itself left out (recorded as `drain`).
    pub(super) fn decide_elsewhere(&self, req: &Request, how: How) -> Result<String, String> {
        let me = self.self_id.clone();
        match self.decide_excluding(req, how, "drain", false, None, "local", Some(&me)) {
            (Some(n), _, _) if n != me => Ok(n),
            (_, _, reason) => Err(format!("no node can take it: {reason}")),
        }
    }

    /// The QUIC address of a live member.
    pub fn rpc_addr_of(&self, id: &str) -> Option<SocketAddr> {
        let st = self.state();
        st.members
            .iter()
            .find(|m| m.id == id && m.alive)
            .and_then(|m| m.report.as_ref()?.rpc.as_ref()?.parse().ok())
    }

    /// Whether `id` is a live member of the cluster.
    pub fn is_alive(&self, id: &str) -> bool {
        self.state().members.iter().any(|m| m.id == id && m.alive)
    }

    /// One migration call to another node, bounded by `timeout`.
    pub async fn call_migration(
        &self,
        node: &str,
        call: crate::handoff::MigrationCall,
        timeout: std::time::Duration,
    ) -> anyhow::Result<crate::handoff::MigrationReply> {
        match self
            .call_node(node, &rpc::RpcRequest::Migration(call), timeout)
            .await?
        {
            rpc::RpcResponse::Migration(r) => Ok(r),
            rpc::RpcResponse::Error(e) => anyhow::bail!("node {node}: {e}"),
            other => anyhow::bail!("node {node} answered {other:?}"),
        }
    }

    /// One call to another live member over QUIC, bounded by `timeout`: its answer, or why
    /// there was none (no certificates here, not a member, no answer, the call failed).
    pub(super) async fn call_node(
        &self,
        node: &str,
        req: &rpc::RpcRequest,
        timeout: std::time::Duration,
    ) -> anyhow::Result<rpc::RpcResponse> {
        let rpc = self
            .rpc
            .as_ref()
            .context("this node has no cluster certificates (QUIC is off)")?;
        let addr = self
            .rpc_addr_of(node)
            .with_context(|| format!("node {node} is not a live member with an RPC endpoint"))?;
        match tokio::time::timeout(timeout, rpc.call(node, addr, req)).await {
            Err(_) => anyhow::bail!("node {node} did not answer within {timeout:?}"),
            Ok(Err(e)) => Err(e.context(format!("calling node {node}"))),
            Ok(Ok(answer)) => Ok(answer),
        }
    }

    /// Where a camera should push (`GET /api/ingest/<camera>`, §C's EasyDarwin flow): the
    /// node already holding it live, else the node the `knn-class` policy chooses over this
    /// node's view. A read: it reserves nothing (anyone could otherwise steer placement
    /// with GETs); the camera's load counts once it publishes and its node reports it.
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
        // A read: nothing is reserved until the camera actually publishes.
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
        self.decide_excluding(
            req,
            How::Policy(policy),
            kind,
            redirects,
            asked_by,
            via,
            None,
        )
    }

    /// [`Cluster::decide`] with one node left out (the node being drained).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decide_excluding(
        &self,
        req: &Request,
        how: How,
        kind: &'static str,
        redirects: bool,
        asked_by: Option<&str>,
        via: &'static str,
        exclude: Option<&str>,
    ) -> (Option<String>, Placement, String) {
        let mut guard = self.state();
        let st = &mut *guard;
        let now = std::time::Instant::now();
        st.expire_reservations(now, self.policy_cfg.sched.weights);
        // The kept view (rebuilt only for members whose entry changed), not a copy: the nodes
        // left out (the one being drained; for a playback, the members that do not read the
        // recordings) are marked dead for this decision only.
        let weights = self.policy_cfg.sched.weights;
        let mut out: Vec<String> = exclude.map(str::to_string).into_iter().collect();
        if req.kind == RequestKind::Playback {
            out.extend(
                st.members
                    .iter()
                    .filter(|m| m.report.as_ref().is_some_and(|r| !r.plays_recordings))
                    .map(|m| m.id.clone()),
            );
        }
        let excluded: Vec<(String, bool)> = out
            .into_iter()
            .filter_map(|id| {
                let v = st.placement_view(weights);
                let i = v.index_of(&id)?;
                let was = v.node(i).alive;
                v.set_alive(&id, false);
                Some((id, was))
            })
            .collect();
        let decision = {
            let State {
                place_state,
                rng,
                views,
                view_cache,
                ..
            } = &mut *st;
            let nodes: Vec<&ViewEntry> = views.values().map(|(_, v)| v).collect();
            let view = view_cache.sync(&nodes, weights);
            match how {
                How::Policy(policy) => {
                    if policy == Policy::KnnClass
                        && view.class_table(&self.policy_cfg.knn).is_none()
                    {
                        view.classify_nodes(&self.policy_cfg.knn);
                    }
                    place(view, req, policy, place_state, &self.policy_cfg, rng)
                }
                How::Live { holder, edges } => {
                    let live = vigil_cluster::edge::LiveRequest {
                        camera: &req.camera,
                        holder: &holder,
                        edges: &edges,
                        vbr_bps: req.vbr_bps,
                        now_ms: req.time_ms,
                    };
                    vigil_cluster::place_live(
                        view,
                        &live,
                        &self.policy_cfg.edge,
                        &self.policy_cfg.sched,
                    )
                }
            }
        };
        for (id, was) in excluded.iter().rev() {
            st.placement_view(weights).set_alive(id, *was);
        }
        let placement = match &decision {
            Decision::Assign {
                node,
                estimated_load,
                stream,
                ..
            } => {
                // Ingest answers are reads (`redirects` false): they reserve nothing.
                let view = st.placement_view(weights);
                let before = view.index_of(node).map(|i| view.load(i));
                if let Some(before) = before.filter(|_| redirects) {
                    // The view and the node's entry get the decision in place (no copy of
                    // the entry: issue 13).
                    if let Some(e) = st.views.get_mut(node) {
                        if st.view_cache.apply(&mut e.1, &decision).is_ok() {
                            let version = e.0;
                            st.reserve(super::reservations::Reservation {
                                node: node.clone(),
                                version,
                                expires: now + self.reservation,
                                decided_ms: now_ms(),
                                delta: estimated_load - before,
                                stream: stream.clone(),
                            });
                        }
                    }
                }
                if *node == self.self_id {
                    Placement::Local
                } else {
                    match self.base_of(st, node) {
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
            st,
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
                vbr_bps: playback_vbr(req),
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

    /// The admin API (HTTP base URL) of the other alive node holding `camera` live: where a
    /// WHEP offer for it is redirected (307).
    pub fn live_holder_api(&self, camera: &str) -> Option<(String, String)> {
        let st = self.state();
        st.members
            .iter()
            .filter(|m| m.alive && m.id != self.self_id)
            .filter_map(|m| Some((m, m.report.as_ref()?)))
            .find(|(_, r)| r.live.iter().any(|c| c == camera))
            .map(|(m, r)| (m.id.clone(), r.api.clone()))
    }

    /// The admin API address a member reports (`host:port`, or a URL for HTTPS).
    pub fn member_api(&self, node: &str) -> Option<String> {
        let st = self.state();
        st.members
            .iter()
            .find(|m| m.id == node)
            .and_then(|m| m.report.as_ref())
            .map(|r| r.api.clone())
    }

    /// A member's admin API as a URL base: a report names the plain listener (`host:port`)
    /// or, for HTTPS, a URL.
    pub fn api_base(api: &str) -> String {
        if api.contains("://") {
            api.trim_end_matches('/').to_string()
        } else {
            format!("http://{api}")
        }
    }

    /// The members' admin API origins (`http://host:port`, or the reported URL's origin),
    /// this node's included: where the console may connect.
    pub fn member_origins(&self) -> Vec<String> {
        let st = self.state();
        let mut out: Vec<String> = st
            .members
            .iter()
            .filter_map(|m| m.report.as_ref())
            .filter_map(|r| {
                let u = url::Url::parse(&Self::api_base(&r.api)).ok()?;
                // Only a plain origin goes into a header: nothing a report could smuggle.
                matches!(u.scheme(), "http" | "https").then(|| u.origin().ascii_serialization())
            })
            .filter(|o| {
                o.chars()
                    .all(|c| c.is_ascii_graphic() && c != ';' && c != ',')
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Whether `origin` (a browser's `Origin`, `scheme://host:port`) is the admin API of a
    /// member of the cluster: the only pages whose cross-origin WHEP requests this node
    /// answers (a console on one node playing a camera another node holds).
    pub fn is_member_origin(&self, origin: &str) -> bool {
        let host = |s: &str| {
            let s = s.trim_end_matches('/');
            s.split_once("://")
                .map_or(s, |(_, h)| h)
                .to_ascii_lowercase()
        };
        let origin = host(origin);
        self.state()
            .members
            .iter()
            .filter_map(|m| m.report.as_ref())
            .any(|r| host(&r.api) == origin)
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
                    vbr_bps: None,
                },
            );
        }
        found
    }
}

/// The bitrate a playback decision assumed (None for the other kinds).
fn playback_vbr(req: &Request) -> Option<f64> {
    (req.kind == RequestKind::Playback).then_some(req.vbr_bps)
}
