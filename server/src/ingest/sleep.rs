//! §B.1 device sleep on the node: every second, the always-on pull cameras this node pulls
//! (in a cluster, those bound to it) that nobody watched or recorded for TS_max are
//! disconnected and marked asleep, the longest idle first, as long as at most PS_max of
//! them sleep (`vigil_cluster::gateway::cameras_to_sleep`, the pure policy). The first
//! DESCRIBE wakes a camera (`pull::wake`). A camera with a recorder never sleeps: its use
//! never ends. `ps_max = 0` turns sleep off.
//!
//! "Use" is a reader on its hub (a live viewer, or a relay that reads it) or its recorder;
//! its end is the moment the last reader left.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::info;
use vigil_cluster::gateway::{cameras_to_sleep, CameraUsage};

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

/// The always-on pull cameras this node is responsible for.
pub fn own_cameras(node: &Node) -> Vec<Arc<PathEntry>> {
    node.paths()
        .into_iter()
        .filter(|p| p.configured && !p.on_demand)
        .filter(|p| matches!(p.source, vigil_conf::Source::Pull { .. }))
        .filter(|p| match node.cluster.get() {
            Some(c) => c.holds(p.name.strip_prefix("live/").unwrap_or(&p.name)),
            None => true,
        })
        .collect()
}

fn in_use(p: &PathEntry) -> bool {
    p.stream.readers.load(Ordering::Acquire) > 0 || p.recording.load(Ordering::Acquire)
}

pub async fn run(node: Arc<Node>) {
    let cfg = node.config.cluster.gateway;
    if cfg.ps_max <= 0.0 {
        return;
    }
    let base = Instant::now();
    let ms = |t: Instant| t.duration_since(base).as_millis() as i64;
    let mut uses: HashMap<String, Use> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = Instant::now();
        let cams = own_cameras(&node);
        let mut usage = Vec::with_capacity(cams.len());
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
            let busy = in_use(p);
            match (busy, u.in_use_since) {
                (true, None) => u.in_use_since = Some(now),
                (false, Some(t)) => {
                    u.busy += now - t;
                    u.in_use_since = None;
                    u.idle_since = Some(now);
                }
                _ => {}
            }
            usage.push(CameraUsage {
                camera: p.name.clone(),
                idle: !busy,
                asleep,
                last_finished_ms: u.idle_since.map(ms),
                online_since_ms: ms(u.online_since),
                busy_ms: (u.busy + u.in_use_since.map_or(Duration::ZERO, |t| now - t)).as_millis()
                    as i64,
            });
        }
        uses.retain(|k, _| cams.iter().any(|p| &p.name == k));
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
