//! §B.1 device sleep on the node: every second, the always-on pull cameras this node pulls
//! (in a cluster, those bound to it) that nobody watched or recorded for TS_max are
//! disconnected and marked asleep, the longest idle first, as long as at most PS_max of
//! them sleep (`vigil_cluster::gateway::cameras_to_sleep`, the pure policy). The first
//! DESCRIBE wakes a camera (`pull::wake`). A camera with a recorder never sleeps: its use
//! never ends. `ps_max = 0` turns sleep off.
//!
//! "Use" is a reader on its hub (a live viewer, or a relay that reads it); its end is the
//! moment the last reader left. The same tracking gives the scheduler its §B.5 candidates
//! for camera moves (`Cluster::movable`: awake cameras with no viewer, recorded or not,
//! the most recently finished first).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::info;
use vigil_cluster::gateway::{cameras_to_sleep, CameraUsage};

use crate::cluster::Cluster;
use crate::node::{Node, PathEntry};

/// What the node remembers of one camera's use.
#[derive(Debug, Clone, Copy)]
struct Use {
    online_since: Instant,
    /// When the last use ended (None: in use, or never used since online).
    idle_since: Option<Instant>,
    in_use_since: Option<Instant>,
    busy: Duration,
    /// Asleep at the last look: a wake is a use (the viewer that woke it attaches after
    /// the upstream connects), so its idle clock starts again.
    asleep: bool,
}

/// The always-on pull cameras this node is responsible for (with the cluster on, those
/// bound to it).
pub fn own_cameras(node: &Node, cluster: Option<&Cluster>) -> Vec<Arc<PathEntry>> {
    node.paths()
        .into_iter()
        .filter(|p| p.configured && !p.on_demand())
        .filter(|p| p.is_pull())
        .filter(|p| match cluster {
            Some(c) => c.holds(p.name.strip_prefix("live/").unwrap_or(&p.name)),
            None => true,
        })
        .collect()
}

/// Watched: a live viewer or a relay reads its hub. (Its recorder is not a use that §B.5
/// protects from a move: the recording passes over with the lease.)
fn watched(p: &PathEntry) -> bool {
    p.stream.readers.load(Ordering::Acquire) > 0
}

pub async fn run(node: Arc<Node>, cluster: Option<Arc<Cluster>>) {
    let cfg = node.config.cluster.gateway;
    if cfg.ps_max <= 0.0 && cluster.is_none() {
        return;
    }
    let base = Instant::now();
    let base_wall = crate::cluster::now_ms();
    let ms = |t: Instant| base_wall + t.duration_since(base).as_millis() as i64;
    let mut uses: HashMap<String, Use> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = Instant::now();
        let cams = own_cameras(&node, cluster.as_deref());
        let mut usage = Vec::with_capacity(cams.len());
        let mut movable = Vec::new();
        for p in &cams {
            let u = uses.entry(p.name.clone()).or_insert(Use {
                online_since: now,
                idle_since: None,
                in_use_since: None,
                busy: Duration::ZERO,
                asleep: false,
            });
            let asleep = p.asleep.load(Ordering::Acquire);
            if u.asleep && !asleep {
                u.idle_since = Some(now);
            }
            u.asleep = asleep;
            let busy = watched(p);
            let recording = p.recording.load(Ordering::Acquire);
            match (busy, u.in_use_since) {
                (true, None) => u.in_use_since = Some(now),
                (false, Some(t)) => {
                    u.busy += now - t;
                    u.in_use_since = None;
                    u.idle_since = Some(now);
                }
                _ => {}
            }
            let used = CameraUsage {
                camera: p.name.clone(),
                // A recorded camera never sleeps: its use never ends.
                idle: !busy && !recording,
                asleep,
                last_finished_ms: u.idle_since.map(ms),
                online_since_ms: ms(u.online_since),
                busy_ms: (u.busy + u.in_use_since.map_or(Duration::ZERO, |t| now - t)).as_millis()
                    as i64,
            };
            if !busy && !asleep {
                if let Some(id) = p.name.strip_prefix("live/") {
                    movable.push(CameraUsage {
                        camera: id.to_string(),
                        idle: true,
                        ..used.clone()
                    });
                }
            }
            usage.push(used);
        }
        uses.retain(|k, _| cams.iter().any(|p| &p.name == k));
        if let Some(c) = &cluster {
            // §B.5 looks at the M most recently finished only: the report carries those.
            movable.sort_by(vigil_cluster::gateway::last_finished_first);
            movable.truncate(cfg.recent_m);
            *c.movable.lock().unwrap_or_else(|p| p.into_inner()) = movable;
        }
        if cfg.ps_max <= 0.0 {
            continue;
        }
        for name in cameras_to_sleep(&usage, ms(now), &cfg) {
            let Some(p) = cams.iter().find(|p| p.name == name) else {
                continue;
            };
            if crate::ingest::pull::sleep(p) {
                info!(path = %p.name, ts_max_ms = cfg.ts_max_ms, "asleep: unused for TS_max");
                // Its next use starts the idle clock again.
                if let Some(u) = uses.get_mut(&name) {
                    u.idle_since = Some(now);
                    u.asleep = true;
                }
            }
        }
    }
}
