//! `GET /api/cameras`: every configured camera as the node asked sees it: which node holds
//! it, its state (live, asleep, idle, connecting, unbound), viewers, bitrate, whether it is
//! recorded, and where it is bound and why. A camera held here is read from its hub; one
//! held by another node from that node's gossip report (live and asleep lists, live
//! streams).

use crate::cluster::Cluster;
use crate::node::Node;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vigil_conf::Source;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CameraView {
    pub camera: String,
    /// pull, push or demo.
    pub source: String,
    /// The node holding it (pulling it, or with its publisher), if any.
    pub node: Option<String>,
    /// live, asleep (§B.1), idle (nobody asks: on-demand, or a push camera with no
    /// publisher), connecting, unbound (no node to pull it yet), "moving to NODE" (§B.5).
    pub state: String,
    /// Readers of its hub on the holder (live viewers and relays); None when unknown.
    pub viewers: Option<u64>,
    pub bitrate_kbps: Option<u64>,
    pub recording: bool,
    /// Where it is bound and why.
    pub bound: String,
    /// Served (a disabled camera is listed with state "disabled": no source, viewers 404).
    #[serde(default = "served")]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

fn served() -> bool {
    true
}

/// `GET /api/cameras` (routed with the registry's `POST` in `registry_api`).
pub(super) async fn cameras(
    State(node): State<Arc<Node>>,
    State(cluster): State<Option<Arc<Cluster>>>,
    axum::Extension(who): axum::Extension<super::access::Principal>,
) -> Json<Vec<CameraView>> {
    let mut v = view(&node, cluster.as_deref());
    v.retain(|c| who.may_see(&c.camera));
    Json(v)
}

/// State, viewers and bitrate of a camera's hub on this node.
fn local(p: &crate::node::PathEntry) -> (String, Option<u64>, Option<u64>) {
    let state = if p.asleep.load(Ordering::Acquire) {
        "asleep"
    } else if p.stream.is_live() {
        "live"
    } else if p.puller.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
        "connecting"
    } else {
        "idle"
    };
    (
        state.into(),
        Some(p.stream.readers.load(Ordering::Relaxed) as u64),
        Some(p.stream.bitrate_bps.load(Ordering::Relaxed) / 1000),
    )
}

fn kind_of(source: &Source) -> &'static str {
    match source {
        Source::Pull { .. } => "pull",
        Source::Push => "push",
        Source::Demo => "demo",
    }
}

/// Every configured camera as this node sees it; `cluster`: the shell when on.
pub fn view(node: &Node, cluster: Option<&Cluster>) -> Vec<CameraView> {
    let bindings = cluster.map(|c| c.bindings());
    let members = cluster.map(|c| c.members()).unwrap_or_default();
    let decisions = cluster.map(|c| c.decisions()).unwrap_or_default();
    let me = &node.config.node.id;
    let mut out = Vec::new();
    for cam in node.cameras().values() {
        if !cam.enabled {
            out.push(CameraView {
                camera: cam.id.clone(),
                source: kind_of(&cam.source).into(),
                node: None,
                state: "disabled".into(),
                viewers: None,
                bitrate_kbps: None,
                recording: false,
                bound: "disabled in the registry".into(),
                enabled: false,
                group: cam.group.clone(),
                labels: cam.labels.clone(),
            });
            continue;
        }
        let Some(p) = node.path(&format!("live/{}", cam.id)) else {
            continue;
        };
        let source = &cam.source;
        let kind = kind_of(source);
        let recording = crate::record::wanted(node, &cam.id);
        let here = local(&p);
        let (holder, bound) = match (&source, &bindings) {
            (Source::Pull { .. }, Some(b)) => {
                let why = decisions
                    .iter()
                    .find(|d| d.kind == "bind" && d.camera == cam.id)
                    .map_or(String::new(), |d| format!(": {}", d.reason));
                match b.cameras.get(&cam.id) {
                    Some(n) => (
                        Some(n.clone()),
                        format!(
                            "bound to {n} by the scheduler {} (term {}){why}",
                            b.scheduler, b.term
                        ),
                    ),
                    None => (None, "not bound yet (no live node took it)".into()),
                }
            }
            (Source::Pull { .. }, None) => {
                (Some(me.clone()), "no cluster: pulled by this node".into())
            }
            (Source::Push, _) => (
                (here.0 == "live").then(|| me.clone()).or_else(|| {
                    members
                        .iter()
                        .filter(|m| m.alive)
                        .find(|m| m.report.as_ref().is_some_and(|r| r.live.contains(&cam.id)))
                        .map(|m| m.id.clone())
                }),
                "pushed: held by the node its publisher reached".into(),
            ),
            (Source::Demo, _) => (
                Some(me.clone()),
                "demo clip: every node plays its own".into(),
            ),
        };
        let (state, viewers, bitrate_kbps) = match &holder {
            None => ("unbound".to_string(), None, None),
            Some(h) if h == me => here,
            Some(h) => match members
                .iter()
                .find(|m| &m.id == h)
                .and_then(|m| m.report.clone())
            {
                Some(r) => {
                    let live = r.streams.iter().filter(|s| {
                        s.camera == cam.id && s.source == vigil_cluster::StreamSource::Live
                    });
                    let (n, rate) = live.fold((0u64, 0f64), |(n, b), s| (n + 1, s.vbr_bps.max(b)));
                    let state = if r.asleep.contains(&cam.id) {
                        "asleep"
                    } else if r.live.contains(&cam.id) {
                        "live"
                    } else {
                        "idle"
                    };
                    (
                        state.into(),
                        Some(n),
                        (n > 0).then_some((rate / 1000.0) as u64),
                    )
                }
                None => ("unknown".into(), None, None),
            },
        };
        // A camera move under way (§B.5): the holder keeps it until the destination has it.
        let moving_to = bindings.as_ref().and_then(|b| b.moving.get(&cam.id));
        let state = match moving_to {
            Some(to) => format!("moving to {to}"),
            None => state,
        };
        out.push(CameraView {
            camera: cam.id.clone(),
            source: kind.into(),
            node: holder,
            state,
            viewers,
            bitrate_kbps,
            recording,
            bound,
            enabled: true,
            group: cam.group.clone(),
            labels: cam.labels.clone(),
        });
    }
    out
}
