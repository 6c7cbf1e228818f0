//! A registry version's actions (`vigil_registry::diff`) carried out on the node, camera by
//! camera: nothing here touches a session of a camera the action does not name.

use crate::cluster::Cluster;
use crate::node::Node;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};
use vigil_conf::{CameraConfig, Source, UserConfig};
use vigil_registry::Action;

/// How long a removed camera's viewers get to take their RTCP BYE before their sessions
/// are ended from here (a viewer that is not reading).
const BYE_GRACE: Duration = Duration::from_secs(2);

/// Above this many actions in one version (an import), each camera's line is logged at
/// debug level and the version's summary line says what happened.
const LOGGED_ONE_BY_ONE: usize = 20;

pub(super) fn actions(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>, actions: &[Action]) {
    let verbose = actions.len() <= LOGGED_ONE_BY_ONE;
    let mut pulls_changed = false;
    for action in actions {
        match action {
            Action::Start(cam) => {
                start(node, cluster, cam, verbose);
                pulls_changed |= matches!(cam.source, Source::Pull { .. });
            }
            Action::Stop { id, removed } => {
                stop(node, id, *removed, verbose);
                pulls_changed = true;
            }
            Action::Replace(cam) => {
                stop(node, &cam.id, false, verbose);
                start(node, cluster, cam, verbose);
                pulls_changed = true;
            }
            Action::Repoint(cam) => repoint(node, cluster, cam),
            Action::Record(cam) => record(node, cluster, cam),
            Action::Describe(_) => {}
        }
    }
    if pulls_changed {
        if let Some(c) = cluster {
            c.set_pull_cameras(node);
        }
    }
}

/// A camera to serve: its path, its source if always on, its recorder.
fn start(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>, cam: &CameraConfig, verbose: bool) {
    let path = node.add_camera_path(cam);
    if verbose {
        info!(camera = %cam.id, "camera started by the registry");
    } else {
        debug!(camera = %cam.id, "camera started by the registry");
    }
    crate::ingest::start(node, cluster, &path);
    crate::record::start(node, cluster, &path);
}

/// A camera no longer served: new requests find no path (404); its source stops; its hub
/// ends, so every viewer gets RTCP BYE and its session closes; its recorder closes the open
/// segment. Its recordings stay until retention takes them.
fn stop(node: &Arc<Node>, id: &str, removed: bool, verbose: bool) {
    let name = format!("live/{id}");
    let Some(path) = node.remove_path(&name) else {
        return;
    };
    let why = if removed { "removed" } else { "disabled" };
    if verbose {
        info!(camera = %id, why, "camera stopped by the registry: ending its viewers");
    } else {
        debug!(camera = %id, why, "camera stopped by the registry: ending its viewers");
    }
    let source = path.puller.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(cancel) = source {
        cancel.cancel();
    }
    if let Some(publisher) = path.publisher().take() {
        publisher.cancel.cancel();
    }
    crate::record::stop(&path);
    path.stream.finish(path.stream.current_epoch());
    let sessions: Vec<_> = node
        .sessions()
        .into_iter()
        .filter(|s| s.path == name || s.path.starts_with(&format!("{name}/")))
        .collect();
    if sessions.is_empty() {
        return;
    }
    let shutdown = node.shutdown.clone();
    node.tasks.spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(BYE_GRACE) => {}
            // Shutting down: every session ends anyway.
            _ = shutdown.cancelled() => return,
        }
        for s in sessions {
            s.cancel.cancel();
        }
    });
}

/// Another URL or other pull settings for the same kind of source: a running pull
/// reconnects into the same hub (the viewers splice at its first keyframe, as on an
/// upstream reconnect); an on-demand one not running takes the new URL at its next viewer.
fn repoint(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>, cam: &CameraConfig) {
    let Some(path) = node.path(&format!("live/{}", cam.id)) else {
        return start(node, cluster, cam, true);
    };
    path.set_source(cam.source.clone(), cam.on_demand);
    crate::ingest::pull::repoint(node, cluster, &path);
}

fn record(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>, cam: &CameraConfig) {
    let Some(path) = node.path(&format!("live/{}", cam.id)) else {
        return;
    };
    if cam.record {
        crate::record::start(node, cluster, &path);
    } else {
        info!(camera = %cam.id, "recording turned off by the registry");
        crate::record::stop(&path);
    }
}

/// The registry's users under this node's `[auth]` policy (realm, algorithms, back-off).
pub(super) fn users(node: &Node, users: &BTreeMap<String, UserConfig>) {
    let auth = node.config.auth.clone().map(|mut a| {
        a.users = users.values().cloned().collect();
        a
    });
    if auth.is_none() && !users.is_empty() {
        warn!(
            users = users.len(),
            "the registry lists RTSP users but this node has no [auth]: nobody is asked to log in"
        );
    }
    node.auth.reload(auth.as_ref());
}
