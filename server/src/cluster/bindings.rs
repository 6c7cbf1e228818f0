//! Pull-camera bindings (§B): the scheduler binds each pull camera to one live node and
//! publishes the bindings; every node follows the bindings of the highest term it sees.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use tracing::info;

use super::now_ms;
use super::shell::{record, Cluster, DecisionRecord, State};
use crate::node::Node;

/// Which node pulls each pull camera (§B, issue 4 §6): made by the scheduler, published in
/// its gossip state with its term; every node follows the bindings of the highest term.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct CameraBindings {
    pub term: u64,
    pub scheduler: String,
    /// camera → node.
    pub cameras: BTreeMap<String, String>,
    /// Camera moves under way (§B.5): camera → destination, until it is re-bound there.
    #[serde(default)]
    pub moving: BTreeMap<String, String>,
}

/// Takes `seen` (the highest term published) when it is at least as new as the bindings
/// followed; at equal terms the lowest scheduler id wins, as when choosing `seen`.
pub(super) fn adopt(st: &mut State, seen: Option<CameraBindings>) {
    if let Some(b) = seen {
        if b.term > st.bindings.term
            || (b.term == st.bindings.term && b.scheduler <= st.bindings.scheduler)
        {
            st.bindings = b;
        }
    }
}

impl Cluster {
    /// The scheduler's part of §B: keeps every pull camera bound to a live node, re-binding
    /// at once the cameras of a node that died (§B.2 load, §B.4 roulette). Returns the
    /// bindings to publish when they changed (or the term did).
    pub(super) fn bind_cameras(&self, st: &mut State) -> Option<CameraBindings> {
        if st.scheduler.as_deref() != Some(self.self_id.as_str()) || self.pull_cameras.is_empty() {
            return None;
        }
        let live: Vec<vigil_cluster::gateway::GatewayNode> = st
            .members
            .iter()
            .filter(|m| m.alive)
            .filter_map(|m| {
                let r = m.report.as_ref()?;
                // A draining node keeps no camera: its cameras are re-bound like a dead
                // node's.
                if r.draining {
                    return None;
                }
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
            moving: st.bindings.moving.clone(),
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
                    vbr_bps: None,
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
}

/// Every node follows the bindings it sees: the bound node runs the pull of an always-on
/// camera (an on-demand one starts on DESCRIBE), the others stop theirs. A camera with no
/// binding yet is pulled by nobody.
pub(super) fn follow_bindings(node: &Arc<Node>, cluster: &Arc<Cluster>) {
    let bindings = cluster.bindings();
    for path in node.paths() {
        if !path.configured || !matches!(path.source, vigil_conf::Source::Pull { .. }) {
            continue;
        }
        let Some(camera) = path.name.strip_prefix("live/") else {
            continue;
        };
        if bindings.cameras.get(camera) == Some(&cluster.self_id) {
            cluster.arrived(camera);
            if !path.on_demand {
                crate::ingest::pull::ensure_running(node, Some(cluster), &path);
            }
        } else if cluster.is_incoming(camera) {
            // Pulled for a move here (§B.5) that has not re-bound it yet.
        } else if path.relay_from().is_none() {
            // (A relay of this node as an edge uses the same slot and ends by itself.)
            crate::ingest::relay::let_go(node, cluster, &path, camera);
        }
    }
}
