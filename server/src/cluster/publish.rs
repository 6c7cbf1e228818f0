//! Publishing the node's report (`report`): on the §C.5 adaptive period and at once on a
//! significant change (a session starts or ends, a stream's rate changes by Scale, a camera
//! goes live or asleep, a drain, the §B.5 candidates), padded by `synthetic` when armed.
//! Apart from the record it publishes, so the padding (which edits a `Report`) and the
//! record do not name each other.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vigil_cluster::FeedbackPeriod;

use super::report::{build, Sampler};
use super::{now_ms, Cluster};
use crate::node::Node;

/// What counts as a significant change: the set of sessions, and each one's rate bucket
/// (a Scale change doubles or halves it; measurement jitter stays in the bucket).
fn fingerprint(node: &Node) -> Vec<(String, u32)> {
    node.sessions()
        .iter()
        .map(|s| {
            let r = super::session_rate(s) as f64;
            (
                s.id.clone(),
                if r > 0.0 { r.log2().round() as u32 } else { 0 },
            )
        })
        .collect()
}

/// Publishes the report on the §C.5 period (ticked every second with the cluster's task
/// count) and at once when a session starts or ends or changes its rate.
pub async fn run(node: Arc<Node>, cluster: Arc<Cluster>) {
    let fb_cfg = cluster.policy_cfg.feedback;
    let mut feedback = FeedbackPeriod::new(&fb_cfg);
    let mut sampler = Sampler::new();
    let mut last_publish = Instant::now();
    let mut last_second = Instant::now();
    let mut last_fp = fingerprint(&node);
    let mut live_count = (0usize, 0usize, 0usize, Vec::new());
    let mut last_draining = false;
    let mut last_movable: Vec<String> = Vec::new();
    let mut synthetic = super::synthetic::Synthetic::from_env();
    let mut last_padding = None;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            _ = node.changed() => {}
            _ = tick.tick() => {}
        }
        if last_second.elapsed() >= Duration::from_secs(1) {
            last_second = Instant::now();
            sampler.sample();
            feedback.tick(cluster.cluster_sessions(), &fb_cfg);
        }
        let fp = fingerprint(&node);
        // Live, asleep and relayed cameras (a camera going to sleep leaves one for the other).
        let paths = node.paths();
        // (A camera handed over to a relay stays live: the relayed count tells.)
        let live_now = (
            paths.iter().filter(|p| p.stream.is_live()).count(),
            paths
                .iter()
                .filter(|p| p.asleep.load(Ordering::Relaxed))
                .count(),
            paths.iter().filter(|p| p.relay_from().is_some()).count(),
            // A recorder started or stopped: who records a camera decides a heal's merge.
            node.recordings.recording(),
        );
        let draining = cluster.draining.load(Ordering::Relaxed);
        // §B.5's candidates changed (a camera's last viewer left, or one arrived).
        let movable: Vec<String> = cluster
            .movable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|c| c.camera.clone())
            .collect();
        let padding = synthetic.poll(now_ms());
        let significant = fp != last_fp
            || live_now != live_count
            || draining != last_draining
            || movable != last_movable
            || padding != last_padding;
        if significant
            || last_publish.elapsed() >= Duration::from_secs(u64::from(feedback.period_s))
        {
            let mut r = build(&node, &cluster, &mut sampler, feedback.period_s);
            if let Some((p, since)) = padding {
                let at = r.at_ms;
                p.apply(&mut r, since, at);
            }
            cluster.publish(&r).await;
            last_publish = Instant::now();
            last_fp = fp;
            live_count = live_now;
            last_draining = draining;
            last_movable = movable;
            last_padding = padding;
        }
    }
}
