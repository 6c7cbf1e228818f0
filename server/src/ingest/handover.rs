//! The node's side of the cluster's camera bindings: its pulls follow the bindings it sees,
//! and a camera move's first step on the destination (issue 11 §2, §B.5) pulls the camera
//! here beside its holder and answers once a keyframe is in the hub, so the scheduler
//! re-binds it only to a node that can serve it at once. The source is not touched here.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tracing::info;

use crate::cluster::{CameraHost, Cluster};
use crate::node::Node;

pub struct Host {
    node: Weak<Node>,
    /// The shell this host is registered with (weak: the shell holds the host).
    cluster: Weak<Cluster>,
}

impl Host {
    /// Registers the node as a camera host with its cluster shell.
    pub fn install(node: &Arc<Node>, cluster: &Arc<Cluster>) {
        let _ = cluster.camera_host.set(Arc::new(Host {
            node: Arc::downgrade(node),
            cluster: Arc::downgrade(cluster),
        }));
    }
}

impl CameraHost for Host {
    fn follow_bindings(&self) {
        if let (Some(node), Some(cluster)) = (self.node.upgrade(), self.cluster.upgrade()) {
            follow_bindings(&node, &cluster);
        }
    }

    fn take(&self, camera: String, timeout: Duration) -> BoxFuture<'static, Result<f64, String>> {
        let (node, cluster) = (self.node.upgrade(), self.cluster.upgrade());
        Box::pin(async move {
            let node = node.ok_or("the node is shutting down")?;
            let cluster = cluster.ok_or("the node is shutting down")?;
            let path = node
                .path(&format!("live/{camera}"))
                .filter(|p| p.configured && p.is_pull())
                .ok_or_else(|| format!("{camera} is not a pull camera of this node"))?;
            if path.relay_from().is_some() {
                return Err(format!("this node relays {camera} as an edge"));
            }
            let started = Instant::now();
            let deadline = started + timeout;
            super::pull::wake(&node, Some(&cluster), &path);
            info!(
                camera,
                "taking the camera for a move: waiting for its first keyframe"
            );
            let has = tokio::select! {
                _ = node.shutdown.cancelled() => return Err("the node is shutting down".into()),
                has = path.stream.wait_keyframe(deadline.into()) => has,
            };
            if !has {
                // Nothing half-moved: the pull stops unless the camera got bound here.
                if !cluster.holds(&camera) {
                    super::pull::stop(&path);
                }
                return Err(format!(
                    "no keyframe of {camera} reached this node within {timeout:?}"
                ));
            }
            Ok(started.elapsed().as_secs_f64() * 1e3)
        })
    }
}

/// Every node follows the bindings it sees: the bound node runs the pull of an always-on
/// camera (an on-demand one starts on DESCRIBE), the others stop theirs, and an edge
/// relays from whichever node holds the camera now. A camera with no binding yet is pulled
/// by nobody.
fn follow_bindings(node: &Arc<Node>, cluster: &Arc<Cluster>) {
    let bindings = cluster.bindings();
    for path in node.paths() {
        let Some(camera) = path.name.strip_prefix("live/") else {
            continue;
        };
        // An edge's relay follows the camera to its holder (not to this node: that is
        // `take_over`'s, below).
        if path.relay_from().is_some() && bindings.cameras.get(camera) != Some(&cluster.self_id) {
            super::relay::follow_holder(node, cluster, &path, camera);
        }
        if !path.configured || !path.is_pull() {
            continue;
        }
        if bindings.cameras.get(camera) == Some(&cluster.self_id) {
            cluster.arrived(camera);
            if path.relay_from().is_some() {
                // Bound to an edge of its: the camera's own stream replaces the relay.
                super::pull::take_over(node, &path);
            } else if !path.on_demand() {
                super::pull::ensure_running(node, Some(cluster), &path);
            }
        } else if cluster.is_incoming(camera) {
            // Pulled for a move here (§B.5) that has not re-bound it yet.
        } else if path.relay_from().is_none() {
            // (A relay of this node as an edge uses the same slot and ends by itself.)
            super::relay::let_go(node, cluster, &path, camera);
        }
    }
}
