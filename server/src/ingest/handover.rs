//! A camera move's first step on the destination (issue 11 §2, §B.5): pull the camera here
//! beside its holder and answer once a keyframe is in the hub, so the scheduler re-binds it
//! only to a node that can serve it at once. The source is not touched here.

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
    fn take(&self, camera: String, timeout: Duration) -> BoxFuture<'static, Result<f64, String>> {
        let (node, cluster) = (self.node.upgrade(), self.cluster.upgrade());
        Box::pin(async move {
            let node = node.ok_or("the node is shutting down")?;
            let cluster = cluster.ok_or("the node is shutting down")?;
            let path = node
                .path(&format!("live/{camera}"))
                .filter(|p| p.configured && matches!(p.source, vigil_conf::Source::Pull { .. }))
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
