//! Live edges (issue 11 §3): this node relays a camera that another node holds, so that
//! one camera's viewers can spread over several nodes.
//!
//! The relay is a pull (the same retina session as a pulled camera) from the holder's
//! `live/<camera>`, one per edge however many viewers, into the local hub, whose GOP cache
//! gives each new viewer a keyframe at once. It authenticates with a placement marker
//! signed by the cluster key (made fresh for every connection, so a reconnect never reuses
//! one), which the holder serves without placing it again: chains stay one hop deep
//! because an edge only ever pulls from the holder the gossip names, and a node reports
//! relayed cameras as `edges`, never as `live`. The relay ends when nobody has watched it
//! for `[cluster.edge] idle_ms`, when the camera has no holder any more, or when this node
//! becomes the holder (a re-binding).

use super::pull::{pull_once, Ended, Upstream};
use crate::cluster::Cluster;
use crate::node::{Node, PathEntry};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};
use vigil_conf::PullTransport;

/// Makes this node an edge for `camera` held by `holder`: the path to serve viewers from,
/// with its relay running. None when the camera is held here after all.
pub fn ensure(
    node: &Arc<Node>,
    cluster: &Arc<Cluster>,
    camera: &str,
    holder: &str,
) -> Option<Arc<PathEntry>> {
    let name = format!("live/{camera}");
    let path = node.path_for_relay(&name)?;
    *path.last_demand.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    let mut puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
    if puller.is_some() {
        return Some(path.clone());
    }
    // Before the first packet: the recorder must never take the relayed stream for one of
    // this node's cameras.
    path.set_relay_from(Some(holder.to_string()));
    let cancel = node.shutdown.child_token();
    *puller = Some(cancel.clone());
    drop(puller);
    spawn(node, cluster, &path, camera, cancel, None);
    Some(path)
}

/// `live/<camera>` served from this node: held here, or relayed from its holder (this node
/// becomes an edge). The error says why neither.
pub fn here_or_relayed(
    node: &Arc<Node>,
    cluster: Option<&Arc<Cluster>>,
    camera: &str,
) -> Result<Arc<PathEntry>, String> {
    let name = format!("live/{camera}");
    if let Some(p) = node.path(&name).filter(|p| p.is_held_live()) {
        return Ok(p);
    }
    let cluster = cluster.ok_or("the cluster is off")?;
    let holder = cluster
        .live_holder_of(camera)
        .ok_or_else(|| format!("no node holds camera {camera} live"))?;
    ensure(node, cluster, camera, &holder).ok_or_else(|| format!("cannot relay {name} here"))
}

fn spawn(
    node: &Arc<Node>,
    cluster: &Arc<Cluster>,
    path: &Arc<PathEntry>,
    camera: &str,
    cancel: CancellationToken,
    handover: Option<CancellationToken>,
) {
    let span = info_span!("relay", camera = %camera);
    node.spawn_ingest(
        run(
            node.clone(),
            cluster.clone(),
            path.clone(),
            camera.to_string(),
            cancel,
            handover,
        )
        .instrument(span),
    );
}

/// The camera was bound away from this node (a move, a drain, a re-binding). Unwatched,
/// its pull stops. Watched, this node relays it from the new holder instead, and the pull
/// stops only once the relay's producer has attached: the viewers splice onto the relay's
/// first keyframe with their RTP identity unchanged, and nothing finishes their stream.
pub fn let_go(node: &Arc<Node>, cluster: &Arc<Cluster>, path: &Arc<PathEntry>, camera: &str) {
    let watched = path.stream.readers.load(Ordering::Acquire) > 0 && path.stream.is_live();
    let holder = watched.then(|| cluster.live_holder_of(camera)).flatten();
    let Some(holder) = holder else {
        super::pull::stop(path);
        return;
    };
    let mut puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
    let Some(previous) = puller.take() else {
        return;
    };
    info!(path = %path.name, %holder, "the camera moved: relaying it for this node's viewers");
    path.set_relay_from(Some(holder));
    let cancel = node.shutdown.child_token();
    *puller = Some(cancel.clone());
    drop(puller);
    spawn(node, cluster, path, camera, cancel, Some(previous));
}

/// An edge follows its camera to a new holder (a move, a drain, a re-binding): a relay
/// from the new holder starts beside the one from the old, which ends once the new one's
/// producer has attached (the viewers splice onto it, their RTP identity unchanged).
/// Without it the edge kept reading the old holder — relaying from the new one, two hops —
/// until its viewers left, and a fault of a node that no longer held the camera cut them
/// (the chaos run: a partition of the old holder silenced an edge's viewers for 5 s).
pub fn follow_holder(
    node: &Arc<Node>,
    cluster: &Arc<Cluster>,
    path: &Arc<PathEntry>,
    camera: &str,
) {
    let Some(from) = path.relay_from() else {
        return;
    };
    let Some((holder, _)) = cluster.relay_source(camera) else {
        return;
    };
    if holder == from {
        return;
    }
    let mut puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
    let Some(previous) = puller.take() else {
        return;
    };
    info!(path = %path.name, %from, %holder, "the camera's holder changed: relaying from the new one");
    path.set_relay_from(Some(holder));
    let cancel = node.shutdown.child_token();
    *puller = Some(cancel.clone());
    drop(puller);
    spawn(node, cluster, path, camera, cancel, Some(previous));
}

async fn run(
    node: Arc<Node>,
    cluster: Arc<Cluster>,
    path: Arc<PathEntry>,
    camera: String,
    cancel: CancellationToken,
    mut handover: Option<CancellationToken>,
) {
    let idle = Duration::from_millis(cluster.policy_cfg.edge.idle_ms);
    let mut backoff = super::pull::Backoff::new(&node.config.live);
    // An idle end is the only one where the session gave up the path's puller slot (under
    // its lock, so a new viewer's `ensure` starts a new relay instead of joining this one).
    let mut gave_up_slot = false;
    loop {
        // The holder as the gossip names it now: it may have died and the camera moved.
        let Some((holder, url)) = cluster.relay_source(&camera) else {
            info!("the camera has no holder to relay from any more");
            break;
        };
        path.set_relay_from(Some(holder.clone()));
        info!(%holder, "relaying from the holder");
        let mut connected = false;
        let attempt = pull_once(
            &node,
            &path,
            Upstream {
                url: &url,
                transport: PullTransport::Tcp,
                idle_after: Some(idle),
            },
            &cancel,
            &mut connected,
            &mut handover,
        );
        match attempt.await {
            Ok(Ended::Cancelled) => break,
            Ok(Ended::Idle) => {
                info!("no viewer for {idle:?}: relay released");
                gave_up_slot = true;
                break;
            }
            Err(e) => warn!(%holder, "relay upstream failed: {e:#}; retry in {:?}", backoff.next),
        }
        if !backoff.wait(connected, &cancel).await {
            break;
        }
        if super::pull::idle_for(&path, idle) {
            break;
        }
    }
    // A source this relay was to take over from and never did ends with it.
    if let Some(previous) = handover {
        previous.cancel();
    }
    let mut puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
    if gave_up_slot && puller.is_some() {
        // A new relay took the path over since: it is not this task's to clean up.
        return;
    }
    if cancel.is_cancelled() && puller.as_ref().is_some_and(|t| !t.is_cancelled()) {
        // This node's own pull took the path over (`pull::take_over`): slot and stream
        // are the pull's.
        return;
    }
    *puller = None;
    path.set_relay_from(None);
    // The relay's last producer lost its upstream and nothing reconnects it now: end the
    // stream, or the path (kept when configured here) would pass for a camera held live
    // here — its last keyframe still in the ring — and a moved viewer or the gossip report
    // would be served from a hub nothing feeds (the chaos run: a live viewer moved to a
    // node just back from SIGSTOP got nothing for 3 s).
    path.stream.finish(path.stream.current_epoch());
    drop(puller);
    node.release_path(&path.name);
    node.notify_change();
}
