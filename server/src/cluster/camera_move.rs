//! Camera moves (issue 11 §2, ALGORITHMS.md §B.2–§B.5) in the running cluster.
//!
//! The elected scheduler samples every node's gateway load each `[cluster.gateway]
//! sample_period_ms` and runs `vigil_cluster::camera_move::plan_camera_moves` (the pure
//! policy: GL, Brown forecast, LCFF + activity, roulette). A move is atomic, in two steps:
//!
//! 1. `TakeCamera` to the destination: it pulls the camera beside the source and answers
//!    once its hub holds a keyframe (or why not within `move_timeout_ms`); the source is
//!    untouched meanwhile, so any failure (no keyframe, the destination dies, the call
//!    times out) leaves the camera where it was.
//! 2. The scheduler re-binds the camera and publishes the bindings. The source follows: with
//!    no viewer it stops its pull; with viewers it relays the camera from the destination,
//!    and its readers splice onto the relay's first keyframe (a new producer epoch: one
//!    RTP identity, nothing finished). Its recorder ends its segment as the relay attaches
//!    and frees the lease, which the destination's recorder (held back until the binding
//!    is its own) then takes: the recording continues on the shared root.
//!
//! Every decision, with its inputs, and every move's outcome are kept for
//! `/api/cluster/scheduler`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use tracing::{info, warn};
use vigil_cluster::camera_move::{plan_camera_moves, GatewaySample};
use vigil_cluster::gateway::Brown;

use super::now_ms;
use super::rpc::{CameraMoveRecord, RpcRequest, RpcResponse};
use super::shell::{Cluster, State};

const KEPT: usize = 50;
/// How long a destination keeps an incoming camera's pull without the binding arriving
/// (beyond the keyframe wait): the scheduler died between the two steps.
const INCOMING_GRACE: Duration = Duration::from_secs(15);

/// The node's side of the camera bindings, served by `crate::ingest` (which depends on the
/// cluster, not the other way round).
pub trait CameraHost: Send + Sync {
    /// Start the pulls of the always-on cameras bound here and let go of the ones bound
    /// elsewhere (called on every membership refresh).
    fn follow_bindings(&self);
    /// Pull `camera` here beside its holder and answer once its hub holds a keyframe (the
    /// ms it took), or why not within `timeout`; on failure nothing is left running.
    fn take(
        &self,
        camera: String,
        timeout: Duration,
    ) -> futures::future::BoxFuture<'static, Result<f64, String>>;
}

#[derive(Default)]
pub(super) struct GatewayState {
    forecasts: BTreeMap<String, Brown>,
    last_sample: Option<Instant>,
    /// Moves under way: camera → (from, to).
    moving: BTreeMap<String, (String, String)>,
    log: VecDeque<CameraMoveRecord>,
}

/// On a destination: the cameras it pulls for a move until the binding names it (or the
/// deadline passes). Its own lock: every binding follower's tick asks it per camera.
#[derive(Default)]
pub struct Incoming(std::sync::Mutex<HashMap<String, Instant>>);

impl Incoming {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn push(log: &mut VecDeque<CameraMoveRecord>, r: CameraMoveRecord) {
    if log.len() >= KEPT {
        log.pop_front();
    }
    log.push_back(r);
}

impl Cluster {
    /// Newest first.
    pub fn camera_move_log(&self) -> Vec<CameraMoveRecord> {
        self.state().gateway.log.iter().rev().cloned().collect()
    }

    /// This node pulls `camera` for a move that has not re-bound it yet.
    pub fn is_incoming(&self, camera: &str) -> bool {
        let mut map = self.incoming.map();
        match map.get(camera) {
            Some(until) if Instant::now() < *until => true,
            Some(_) => {
                map.remove(camera);
                false
            }
            None => false,
        }
    }

    /// The binding of `camera` reached this node: the move in is over.
    pub fn arrived(&self, camera: &str) {
        let mut map = self.incoming.map();
        if !map.is_empty() {
            map.remove(camera);
        }
    }

    /// The camera is a pull camera bound to another node: this node must not record it.
    pub fn bound_elsewhere(&self, camera: &str) -> bool {
        self.state()
            .bindings
            .cameras
            .get(camera)
            .is_some_and(|n| *n != self.self_id)
    }

    /// What the scheduler knows of each live member for §B.2.
    fn gateway_samples(&self, st: &State) -> Vec<GatewaySample> {
        st.members
            .iter()
            .filter(|m| m.alive)
            .filter_map(|m| {
                let r = m.report.as_ref()?;
                let bound: Vec<&String> = st
                    .bindings
                    .cameras
                    .iter()
                    .filter(|(_, n)| **n == m.id)
                    .map(|(c, _)| c)
                    .collect();
                let awake = bound.iter().filter(|c| !r.asleep.contains(c)).count();
                Some(GatewaySample {
                    node: m.id.clone(),
                    r_cpu: r.cpu,
                    stream_bytes_per_s: r.streams.iter().map(|s| s.vbr_bps / 8.0).collect(),
                    awake: awake as u32,
                    // Only what is still bound there, not already moving, and with no
                    // live viewer in the same report (the node's usage tracker samples
                    // once a second; the report's streams are current).
                    candidates: r
                        .movable
                        .iter()
                        .filter(|c| bound.contains(&&c.camera))
                        .filter(|c| !st.gateway.moving.contains_key(&c.camera))
                        .filter(|c| {
                            !r.streams.iter().any(|s| {
                                s.camera == c.camera
                                    && s.source == vigil_cluster::StreamSource::Live
                            })
                        })
                        .cloned()
                        .collect(),
                    available: !r.draining && (r.rpc.is_some() || m.id == self.self_id),
                    moving: st.gateway.moving.values().any(|(f, _)| *f == m.id),
                    excluded: r.edges.clone(),
                })
            })
            .collect()
    }

    /// The scheduler's §B.3 sampling: every period, judge each node and start the moves.
    pub(super) fn run_gateway(self: &Arc<Self>) {
        let cfg = self.policy_cfg.gateway;
        if !cfg.camera_moves || self.pull_cameras().is_empty() || self.rpc.is_none() {
            return;
        }
        let period = Duration::from_millis(cfg.sample_period_ms);
        let starts = {
            let mut st = self.state();
            if st.scheduler.as_deref() != Some(self.self_id.as_str())
                || st.gateway.last_sample.is_some_and(|t| t.elapsed() < period)
            {
                return;
            }
            st.gateway.last_sample = Some(Instant::now());
            let samples = self.gateway_samples(&st);
            let at_ms = now_ms();
            let State { rng, gateway, .. } = &mut *st;
            let decisions =
                plan_camera_moves(&samples, &mut gateway.forecasts, at_ms, &cfg, || rng.gen());
            let mut starts = Vec::new();
            for d in decisions {
                let result = match (&d.camera, &d.to) {
                    (Some(c), Some(to)) => {
                        gateway
                            .moving
                            .insert(c.clone(), (d.node.clone(), to.clone()));
                        starts.push((c.clone(), d.node.clone(), to.clone(), at_ms));
                        info!(camera = %c, from = %d.node, to = %to, "camera move decided: {}", d.reason);
                        "pending"
                    }
                    _ => "no move",
                };
                push(
                    &mut gateway.log,
                    CameraMoveRecord {
                        at_ms,
                        camera: d.camera.clone(),
                        from: d.node.clone(),
                        to: d.to.clone(),
                        trigger: "overload".into(),
                        reason: d.reason.clone(),
                        decision: Some(d),
                        result: result.into(),
                        keyframe_ms: None,
                        took_ms: None,
                    },
                );
            }
            starts
        };
        for (camera, from, to, at_ms) in starts {
            let cluster = self.clone();
            tokio::spawn(async move {
                cluster
                    .carry_out_camera_move(&camera, &from, &to, at_ms)
                    .await;
            });
        }
    }

    /// Both steps of one move; the outcome goes in the decision's record.
    async fn carry_out_camera_move(&self, camera: &str, from: &str, to: &str, at_ms: i64) {
        let outcome = self.move_steps(camera, to).await;
        let mut st = self.state();
        st.gateway.moving.remove(camera);
        if let Some(r) = st
            .gateway
            .log
            .iter_mut()
            .find(|r| r.at_ms == at_ms && r.camera.as_deref() == Some(camera))
        {
            r.took_ms = Some((now_ms() - at_ms) as f64);
            match outcome {
                Ok(kf) => {
                    r.keyframe_ms = Some(kf);
                    r.result = "moved".into();
                }
                Err(e) => {
                    warn!(
                        camera,
                        from, to, "camera move abandoned: {e}; it stays on {from}"
                    );
                    r.result = format!("abandoned: {e}");
                }
            }
        }
    }

    /// Step 1 on the destination, step 2 here; the destination's keyframe time.
    async fn move_steps(&self, camera: &str, to: &str) -> Result<f64, String> {
        let timeout = Duration::from_millis(self.policy_cfg.gateway.move_timeout_ms);
        self.set_moving(camera, Some(to)).await;
        let taken = if to == self.self_id {
            self.serve_take_camera(camera.to_string(), timeout).await
        } else {
            self.call_take_camera(to, camera, timeout).await
        };
        let kf = match taken {
            Ok(kf) => kf,
            Err(e) => {
                self.set_moving(camera, None).await;
                return Err(e);
            }
        };
        // The destination might have died since it answered: the re-binding would then be
        // undone at once by `bind_cameras` (a dead node's cameras are re-bound).
        {
            let mut st = self.state();
            if st.scheduler.as_deref() != Some(self.self_id.as_str()) {
                return Err("this node stopped being the scheduler during the move".into());
            }
            st.bindings
                .cameras
                .insert(camera.to_string(), to.to_string());
            st.bindings.moving.remove(camera);
            st.bindings.term = st.term;
            st.bindings.scheduler = self.self_id.clone();
        }
        self.publish_bindings().await;
        info!(
            camera,
            to,
            keyframe_ms = kf,
            "camera moved: re-bound to the destination"
        );
        Ok(kf)
    }

    async fn publish_bindings(&self) {
        let b = serde_json::to_string(&self.state().bindings).unwrap_or_default();
        let chitchat = self.handle.chitchat();
        let mut cc = chitchat.lock().await;
        cc.self_node_state().set(super::membership::KEY_BINDINGS, b);
    }

    /// Shows (or clears) a move under way in the published bindings (`vigil ctl cameras`).
    async fn set_moving(&self, camera: &str, to: Option<&str>) {
        {
            let mut st = self.state();
            match to {
                Some(t) => st.bindings.moving.insert(camera.into(), t.into()),
                None => st.bindings.moving.remove(camera),
            };
        }
        self.publish_bindings().await;
    }

    async fn call_take_camera(
        &self,
        to: &str,
        camera: &str,
        timeout: Duration,
    ) -> Result<f64, String> {
        let req = RpcRequest::TakeCamera {
            camera: camera.to_string(),
            timeout_ms: timeout.as_millis() as u64,
        };
        // The destination answers within `timeout`; the margin covers the call itself.
        match self
            .call_node(to, &req, timeout + Duration::from_secs(2))
            .await
            .map_err(|e| format!("{e:#}"))?
        {
            RpcResponse::CameraReady { keyframe_ms } => Ok(keyframe_ms),
            RpcResponse::Error(e) => Err(format!("node {to}: {e}")),
            other => Err(format!("node {to} answered {other:?}")),
        }
    }

    /// Step 1 on this node (the destination).
    pub(super) async fn serve_take_camera(
        &self,
        camera: String,
        timeout: Duration,
    ) -> Result<f64, String> {
        if !self.pull_cameras().contains(&camera) {
            return Err(format!("{camera} is not a configured pull camera"));
        }
        // (A binding here already — this node's view behind the scheduler's — is no
        // reason to refuse: the camera is pulled here either way.)
        let host = self
            .camera_host
            .get()
            .cloned()
            .ok_or("the node is still starting")?;
        self.incoming
            .map()
            .insert(camera.clone(), Instant::now() + timeout + INCOMING_GRACE);
        let r = host.take(camera.clone(), timeout).await;
        if r.is_err() {
            self.incoming.map().remove(&camera);
        }
        r
    }

    /// `vigil ctl move-camera`: one move now, decided by the operator, carried out as the
    /// scheduler's are. On another node than the scheduler the call is forwarded.
    pub async fn move_camera_now(
        &self,
        camera: &str,
        to: &str,
    ) -> Result<CameraMoveRecord, String> {
        let scheduler = self.state().scheduler.clone();
        if scheduler.as_deref() != Some(self.self_id.as_str()) {
            let s = scheduler.ok_or("no scheduler is elected")?;
            let req = RpcRequest::MoveCamera {
                camera: camera.into(),
                to: to.into(),
            };
            let wait = Duration::from_millis(self.policy_cfg.gateway.move_timeout_ms)
                + Duration::from_secs(5);
            return match self
                .call_node(&s, &req, wait)
                .await
                .map_err(|e| format!("asking the scheduler: {e:#}"))?
            {
                RpcResponse::CameraMoved(r) => Ok(*r),
                RpcResponse::Error(e) => Err(e),
                other => Err(format!("the scheduler answered {other:?}")),
            };
        }
        let at_ms = now_ms();
        let from = {
            let mut st = self.state();
            if !self.pull_cameras().iter().any(|c| c == camera) {
                return Err(format!(
                    "no pull camera {camera} (only pull cameras are bound)"
                ));
            }
            let from = st
                .bindings
                .cameras
                .get(camera)
                .cloned()
                .ok_or_else(|| format!("{camera} is not bound to any node yet"))?;
            if from == to {
                return Err(format!("{camera} is on {to} already"));
            }
            let target = st.members.iter().find(|m| m.id == to && m.alive);
            let Some(r) = target.and_then(|m| m.report.clone()) else {
                return Err(format!("node {to} is not a live member of the cluster"));
            };
            if r.draining {
                return Err(format!("node {to} is draining"));
            }
            if r.edges.iter().any(|c| c == camera) {
                return Err(format!(
                    "node {to} relays {camera} as an edge; move it to another node"
                ));
            }
            if st.gateway.moving.contains_key(camera) {
                return Err(format!("{camera} is already moving"));
            }
            st.gateway
                .moving
                .insert(camera.into(), (from.clone(), to.into()));
            push(
                &mut st.gateway.log,
                CameraMoveRecord {
                    at_ms,
                    camera: Some(camera.into()),
                    from: from.clone(),
                    to: Some(to.into()),
                    trigger: "operator".into(),
                    decision: None,
                    reason: "asked by the operator".into(),
                    result: "pending".into(),
                    keyframe_ms: None,
                    took_ms: None,
                },
            );
            from
        };
        self.carry_out_camera_move(camera, &from, to, at_ms).await;
        let st = self.state();
        st.gateway
            .log
            .iter()
            .find(|r| r.at_ms == at_ms && r.camera.as_deref() == Some(camera))
            .cloned()
            .ok_or_else(|| "the move's record is gone".into())
            .and_then(|r| {
                if r.result == "moved" {
                    Ok(r)
                } else {
                    Err(r.result)
                }
            })
    }
}
