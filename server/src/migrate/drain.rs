//! Draining a node (issue 7 §3): it stops taking placements (its report says so and every
//! placement view treats it as unavailable), every movable session moves off to a node the
//! policy chooses, and its pull cameras are re-bound elsewhere by the scheduler.

use super::move_local;
use crate::cluster::Cluster;
use crate::handoff::DrainStatus;
use crate::node::{Node, SessionKindView};
use futures::StreamExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use tracing::info;

/// How many sessions move at once while draining.
const PARALLEL_MOVES: usize = 8;

pub struct Drain {
    status: Mutex<DrainStatus>,
    run: Mutex<Option<CancellationToken>>,
}

impl Drain {
    pub fn new() -> Arc<Drain> {
        Arc::new(Drain {
            status: Mutex::new(DrainStatus::default()),
            run: Mutex::new(None),
        })
    }

    pub fn status(&self) -> DrainStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn update(&self, f: impl FnOnce(&mut DrainStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Starts (or stops) draining this node; returns the status at once.
    pub fn set(
        this: &Arc<Drain>,
        node: &Arc<Node>,
        cluster: &Arc<Cluster>,
        on: bool,
    ) -> DrainStatus {
        cluster.draining.store(on, Ordering::Relaxed);
        node.notify_change();
        if let Some(c) = this.run.lock().unwrap_or_else(|p| p.into_inner()).take() {
            c.cancel();
        }
        this.update(|s| {
            *s = DrainStatus {
                node: cluster.self_id.clone(),
                draining: on,
                done: !on,
                ..Default::default()
            }
        });
        if on {
            let cancel = CancellationToken::new();
            *this.run.lock().unwrap_or_else(|p| p.into_inner()) = Some(cancel.clone());
            info!("draining: no new placements, moving sessions off");
            node.tasks
                .spawn(run(this.clone(), node.clone(), cluster.clone(), cancel));
        } else {
            info!("undrained: taking placements again");
        }
        this.status()
    }
}

async fn run(drain: Arc<Drain>, node: Arc<Node>, cluster: Arc<Cluster>, cancel: CancellationToken) {
    // Let the other nodes see the draining flag before their next placement.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let sessions: Vec<_> = node
        .sessions()
        .into_iter()
        .filter(|s| s.steered_by().is_none() && s.media_node().is_none())
        .collect();
    drain.update(|s| s.total = sessions.len() as u32);
    let moves = futures::stream::iter(sessions)
        .map(|s| {
            let (node, cluster, cancel) = (node.clone(), cluster.clone(), cancel.clone());
            async move {
                if cancel.is_cancelled() {
                    return (s.id.clone(), Err("drain cancelled".to_string()));
                }
                let r = match s.kind {
                    SessionKindView::WebRtc => Err(
                        "a WebRTC viewer cannot move: its DTLS and ICE state are this node's; \
                         it ends with the node and reconnects through the scheduler"
                            .to_string(),
                    ),
                    SessionKindView::Record => Err(
                        "a publisher cannot be redirected (RTSP clients do not follow a 3xx \
                         to ANNOUNCE): it stays until it reconnects"
                            .to_string(),
                    ),
                    // A live viewer goes where a new viewer of its camera would be
                    // served (its holder, or an edge relaying it); a TCP one is refused by
                    // the move with why.
                    SessionKindView::Play => {
                        let camera = s.path.strip_prefix("live/").unwrap_or(&s.path);
                        match cluster.place_live_elsewhere(camera) {
                            Ok(to) => move_local(&node, &s.id, &to, None)
                                .await
                                .map(|_| ())
                                .map_err(|e| e.to_string()),
                            Err(e) => Err(e),
                        }
                    }
                    SessionKindView::Playback => {
                        let camera = s.path.strip_prefix("playback/").unwrap_or(&s.path);
                        let pos = s.position_ms.load(Ordering::Relaxed);
                        let vbr = match s.rate_bps.load(Ordering::Relaxed) {
                            0 => crate::cluster::report::DEFAULT_VBR_BPS,
                            r => r as f64,
                        };
                        match cluster.place_elsewhere(camera, pos, vbr) {
                            Ok(to) => move_local(&node, &s.id, &to, None)
                                .await
                                .map(|_| ())
                                .map_err(|e| e.to_string()),
                            Err(e) => Err(e),
                        }
                    }
                };
                (s.id.clone(), r)
            }
        })
        .buffer_unordered(PARALLEL_MOVES);
    futures::pin_mut!(moves);
    while let Some((id, r)) = moves.next().await {
        drain.update(|s| match r {
            Ok(()) => s.moved += 1,
            Err(e) => s.failed.push((id, e)),
        });
    }
    let st = drain.status();
    info!(moved = st.moved, failed = st.failed.len(), "drain finished");
    drain.update(|s| s.done = true);
}
