//! Prometheus exposition. The node keeps its own atomics (cheap on the hot path); this
//! module publishes them through the `metrics` facade at scrape time.
//!
//! The `metrics` crate renders only series that were written, so every series the shipped
//! dashboard and alert rules (`deploy/`) name is written at install or on the first scrape:
//! an alert on `rate()` or `absent()` of a series that appears only after its first event
//! would misfire, and the test that checks `deploy/` names only real series
//! (`tests/tests/deploy.rs`) would prove nothing.

use crate::cluster::Cluster;
use crate::node::Node;
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::atomic::Ordering;

/// Buckets of `vigil_storage_read_seconds`: a local disk's millisecond to a hung volume's
/// seconds (the `VigilStorageSlow` alert's 0.5 s falls between two).
const STORAGE_READ_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Install the recorder once per process; None if one is already installed (tests that
/// start several nodes in one process).
pub fn install() -> Option<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(crate::library::STORAGE_READ_SECONDS.into()),
            &STORAGE_READ_BUCKETS,
        )
        .ok()?
        .install_recorder()
        .ok()?;
    describe_counter!("vigil_rtsp_connections_total", "RTSP connections accepted");
    describe_counter!(
        "vigil_rtsp_connections_to_ingest_total",
        "Publishers' connections moved to the ingest runtime after RECORD"
    );
    describe_counter!(
        "vigil_rtsp_bad_requests_total",
        "Malformed RTSP input answered with 4xx"
    );
    describe_counter!(
        "vigil_rtp_garbage_total",
        "Received RTP/RTCP packets dropped as invalid"
    );
    describe_counter!(
        "vigil_slow_readers_dropped_total",
        "Viewers disconnected for not reading"
    );
    describe_counter!(
        "vigil_reader_skips_total",
        "Times a lagging viewer skipped to a keyframe"
    );
    describe_counter!(
        "vigil_sessions_timed_out_total",
        "Sessions closed by the keepalive timeout"
    );
    describe_counter!(
        "vigil_sessions_rejected_total",
        "SETUPs refused by a configured limit"
    );
    describe_counter!(
        "vigil_sessions_opened_total",
        "Sessions created by a first SETUP"
    );
    describe_counter!(
        "vigil_placements_rejected_total",
        "DESCRIBEs answered 503: the cluster's placement found no node for them"
    );
    describe_counter!(
        "vigil_auth_refusals_total",
        "RTSP requests refused by authentication: challenge (401, no credentials yet), failure (wrong credentials), backoff (address refused after failures), forbidden (403, no right)"
    );
    describe_counter!(
        "vigil_limit_refusals_total",
        "Refusals by [limits], [http] and [tls], per limit: connections, connections_per_address, sessions_per_address, sessions_per_user, describe_rate, request_rate, request_deadline, announce_timeout, http_connections, http_connections_per_address, tls_handshakes"
    );
    describe_counter!(
        "vigil_audit_events_total",
        "Audit trail events: written, dropped (queue full or the share refused them), refused (sessions refused while the trail was down and [audit] required = true)"
    );
    describe_counter!(
        "vigil_audit_write_errors_total",
        "Batches of the audit trail the storage root refused"
    );
    describe_gauge!(
        "vigil_audit_down",
        "1 while the audit trail cannot be written (events are being lost)"
    );
    describe_gauge!("vigil_sessions", "Open RTSP sessions");
    describe_gauge!("vigil_http_connections_open", "Open admin API connections");
    describe_counter!(
        "vigil_cache_hits_total",
        "Playback cache lookups answered from memory"
    );
    describe_counter!(
        "vigil_cache_misses_total",
        "Playback cache lookups that had to wait for storage"
    );
    describe_counter!(
        "vigil_cache_loads_total",
        "Segment reads from storage (single-flight)"
    );
    describe_counter!(
        "vigil_cache_evictions_total",
        "Segments evicted to stay within the budget"
    );
    describe_gauge!("vigil_cache_bytes", "Bytes held by the playback cache");
    describe_gauge!(
        "vigil_cache_start_bytes",
        "Bytes of the segments where playbacks began, kept in the start list"
    );
    describe_gauge!(
        "vigil_cache_start_limit_bytes",
        "The start list's current limit (adapts within [cache] start_share)"
    );
    describe_counter!(
        "vigil_cache_start_list_rereads_total",
        "Sessions that waited for a segment the start list's memory pushed out (each shrinks it)"
    );
    describe_gauge!(
        "vigil_cache_load_seconds_p99",
        "Storage read latency, p99 of recent loads"
    );
    describe_gauge!("vigil_cache_load_seconds_sum", "Total storage read time");
    describe_counter!(
        "vigil_recording_errors_total",
        "Recording errors (disk full, lease, I/O)"
    );
    describe_gauge!("vigil_recording", "1 while the camera is being recorded");
    describe_counter!(
        "vigil_recording_frames_dropped_total",
        "Frames lost before storage: writer pool behind or recorder out of the live ring"
    );
    describe_gauge!(
        "vigil_recording_writer_threads",
        "Threads of the writer pool"
    );
    describe_gauge!(
        "vigil_recording_writer_busy",
        "Writer threads handling a camera right now"
    );
    describe_gauge!(
        "vigil_recording_queued_bytes",
        "Bytes queued for the writer pool, all cameras"
    );
    describe_counter!(
        "vigil_recording_writer_wakes_total",
        "Times a writer thread woke for work (the pool's bell batches the cameras' frames)"
    );
    describe_gauge!("vigil_path_readers", "Viewers per path");
    describe_gauge!("vigil_path_bitrate_kbps", "Ingest bitrate per path");
    describe_gauge!(
        "vigil_build_info",
        "Always 1; the version label is the node's build"
    );
    describe_gauge!(
        "vigil_storage_free_bytes",
        "Bytes free for the node on the storage root's file system (statvfs, every 10 s)"
    );
    describe_gauge!(
        "vigil_storage_size_bytes",
        "Size of the storage root's file system (statvfs, every 10 s)"
    );
    describe_gauge!(
        "vigil_storage_stat_seconds",
        "How long the last statvfs of the storage root took (a hung shared volume shows here)"
    );
    describe_counter!(
        "vigil_placement_decisions_total",
        "Placement decisions for requests that arrived here (kind: live, playback, bind; result: local, redirected, rejected)"
    );
    describe_counter!(
        "vigil_cluster_scheduler_changes_total",
        "Times the elected scheduler changed away from a known one (failover, partition, heal)"
    );
    describe_counter!(
        "vigil_cluster_watch_lost_total",
        "Times this member's scheduler watch lost its connection (the scheduler dead to it before the gossip says so)"
    );
    describe_gauge!("vigil_cluster_enabled", "1 when [cluster] enabled");
    describe_gauge!(
        "vigil_cluster_members",
        "Cluster members this node sees, by state (alive, dead); itself included"
    );
    describe_gauge!(
        "vigil_cluster_is_scheduler",
        "1 while this node is the elected scheduler"
    );
    describe_gauge!(
        "vigil_cluster_has_scheduler",
        "1 while this node knows an elected scheduler"
    );
    describe_gauge!("vigil_cluster_term", "The scheduler term this node follows");
    describe_counter!(
        "vigil_migrations_total",
        "Session moves this node started, by result (moved, failed)"
    );
    describe_histogram!(
        crate::library::STORAGE_READ_SECONDS,
        metrics::Unit::Seconds,
        "Segment reads from storage for playback (cache misses and read-ahead), whole read"
    );
    // Registered empty so its buckets are rendered (at zero) before the first read.
    let _ = histogram!(crate::library::STORAGE_READ_SECONDS);
    gauge!("vigil_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for kind in crate::cluster::PLACEMENT_KINDS {
        for result in crate::cluster::PLACEMENT_RESULTS {
            counter!("vigil_placement_decisions_total", "kind" => kind, "result" => result)
                .increment(0);
        }
    }
    counter!("vigil_cluster_scheduler_changes_total").increment(0);
    for result in ["moved", "failed"] {
        counter!("vigil_migrations_total", "result" => result).increment(0);
    }
    describe_counter!(
        "vigil_registry_changes_total",
        "Changes of the camera and user registry written through this node, per kind: camera_added, camera_changed, camera_removed, user_added, user_changed, user_removed"
    );
    describe_counter!(
        "vigil_registry_errors_total",
        "Registry versions or reads of the share that failed (corrupt file, I/O, another key); the node keeps the version it had"
    );
    describe_gauge!(
        "vigil_registry_version",
        "The registry version this node applies"
    );
    describe_gauge!(
        "vigil_registry_apply_lag_ms",
        "From the newest change's time on the node that wrote it to its applying here"
    );
    for kind in crate::registry::CHANGE_KINDS {
        counter!("vigil_registry_changes_total", "kind" => kind).increment(0);
    }
    counter!("vigil_registry_errors_total").increment(0);
    Some(handle)
}

/// Samples the storage root's free space every 10 s on a blocking thread (a hung shared
/// volume blocks that thread, never a scrape or the runtime), until shutdown. Nothing is
/// written before the first answer: a made-up zero would fire the disk-full alert.
pub async fn sample_storage(node: std::sync::Arc<Node>) {
    if node.library.is_none() {
        return;
    }
    let root = node.config.storage.root.clone();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let r = root.clone();
        let started = std::time::Instant::now();
        let mut task = tokio::task::spawn_blocking(move || crate::hostinfo::fs_space(&r));
        let space = loop {
            tokio::select! {
                r = &mut task => break r,
                // A statvfs that does not return (a hung share) shows as it lasts, so the
                // hung-volume alert fires while it hangs, not after.
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
                    gauge!("vigil_storage_stat_seconds").set(started.elapsed().as_secs_f64());
                }
                _ = node.shutdown.cancelled() => return,
            }
        };
        gauge!("vigil_storage_stat_seconds").set(started.elapsed().as_secs_f64());
        match space {
            Ok(Ok(s)) => {
                gauge!("vigil_storage_free_bytes").set(s.available as f64);
                gauge!("vigil_storage_size_bytes").set(s.size as f64);
            }
            Ok(Err(e)) => {
                tracing::warn!(root = %root.display(), "statvfs of the storage root: {e}")
            }
            Err(_) => return,
        }
    }
}

/// Refresh every series from the node's state and render the exposition text.
pub fn render(node: &Node, cluster: Option<&Cluster>, handle: &PrometheusHandle) -> String {
    let c = &node.counters;
    for (name, v) in [
        ("vigil_rtsp_connections_total", &c.rtsp_connections),
        ("vigil_rtsp_bad_requests_total", &c.rtsp_bad_requests),
        ("vigil_rtp_garbage_total", &c.rtp_garbage),
        ("vigil_slow_readers_dropped_total", &c.slow_readers_dropped),
        ("vigil_reader_skips_total", &c.reader_skips),
        ("vigil_sessions_timed_out_total", &c.sessions_timed_out),
        ("vigil_sessions_rejected_total", &c.sessions_rejected),
        ("vigil_sessions_opened_total", &c.sessions_opened),
        ("vigil_placements_rejected_total", &c.placements_rejected),
        (
            "vigil_rtsp_connections_to_ingest_total",
            &c.connections_to_ingest,
        ),
    ] {
        counter!(name).absolute(v.load(Ordering::Relaxed));
    }
    let a = &node.auth.stats;
    for (reason, v) in [
        ("challenge", &a.challenges),
        ("failure", &a.failures),
        ("backoff", &a.backoff_refusals),
        ("forbidden", &a.forbidden),
    ] {
        counter!("vigil_auth_refusals_total", "reason" => reason)
            .absolute(v.load(Ordering::Relaxed));
    }
    if let Some(audit) = &node.audit {
        let s = &audit.stats;
        for (result, v) in [
            ("written", &s.written),
            ("dropped", &s.dropped),
            ("refused", &s.refused),
        ] {
            counter!("vigil_audit_events_total", "result" => result)
                .absolute(v.load(Ordering::Relaxed));
        }
        counter!("vigil_audit_write_errors_total").absolute(s.write_errors.load(Ordering::Relaxed));
        gauge!("vigil_audit_down").set(if audit.is_down() { 1.0 } else { 0.0 });
    }
    for (limit, v) in node.limit_stats.all() {
        counter!("vigil_limit_refusals_total", "limit" => limit)
            .absolute(v.load(Ordering::Relaxed));
    }
    gauge!("vigil_rtsp_connections_open").set(node.connections.open_count() as f64);
    gauge!("vigil_http_connections_open").set(node.http_connections.open_count() as f64);
    gauge!("vigil_sessions").set(node.session_count() as f64);
    for p in node.paths() {
        let labels = [("path", p.name.clone())];
        gauge!("vigil_path_readers", &labels).set(p.stream.readers.load(Ordering::Relaxed) as f64);
        gauge!("vigil_path_bitrate_kbps", &labels)
            .set(p.stream.bitrate_bps.load(Ordering::Relaxed) as f64 / 1000.0);
    }
    if let Some(lib) = &node.library {
        let s = lib.cache.stats();
        counter!("vigil_cache_hits_total").absolute(s.hits);
        counter!("vigil_cache_misses_total").absolute(s.misses);
        counter!("vigil_cache_loads_total").absolute(s.loads);
        counter!("vigil_cache_evictions_total").absolute(s.evictions);
        counter!("vigil_cache_load_errors_total").absolute(s.load_errors);
        gauge!("vigil_cache_bytes").set(s.bytes as f64);
        gauge!("vigil_cache_entries").set(s.entries as f64);
        gauge!("vigil_cache_start_bytes").set(s.start_bytes as f64);
        gauge!("vigil_cache_start_limit_bytes").set(s.start_limit_bytes as f64);
        counter!("vigil_cache_start_list_rereads_total").absolute(s.start_list_rereads);
        gauge!("vigil_cache_load_seconds_p50").set(s.load_p50_us as f64 / 1e6);
        gauge!("vigil_cache_load_seconds_p99").set(s.load_p99_us as f64 / 1e6);
        gauge!("vigil_cache_load_seconds_sum").set(s.load_sum_us as f64 / 1e6);
        counter!("vigil_cache_load_count").absolute(s.load_count);
        let hits = lib.opens.hits.load(Ordering::Relaxed);
        let total = lib.opens.total.load(Ordering::Relaxed);
        counter!("vigil_playback_opens_total", "first_segment" => "cached").absolute(hits);
        counter!("vigil_playback_opens_total", "first_segment" => "read")
            .absolute(total.saturating_sub(hits));
    }
    for r in node.recordings.all() {
        let labels = [("camera", r.camera.clone())];
        gauge!("vigil_recording", &labels).set(if r.state == "recording" { 1.0 } else { 0.0 });
        counter!("vigil_recording_errors_total", &labels).absolute(r.errors);
        counter!("vigil_recording_frames_dropped_total", &labels).absolute(r.frames_dropped);
    }
    if let Some(p) = node.recordings.pool_stats() {
        gauge!("vigil_recording_writer_threads").set(p.threads as f64);
        gauge!("vigil_recording_writer_busy").set(p.busy as f64);
        gauge!("vigil_recording_queued_bytes").set(p.queued_bytes as f64);
        counter!("vigil_recording_writer_wakes_total").absolute(p.wakes);
    }
    render_cluster(cluster);
    handle.render()
}

/// The cluster as this node sees it; zeros with the cluster off, so one dashboard and one
/// rule file serve both.
fn render_cluster(cluster: Option<&Cluster>) {
    let (enabled, alive, dead, is_sched, has_sched, term) = match cluster {
        Some(c) => {
            let members = c.members();
            let alive = members.iter().filter(|m| m.alive).count();
            let (sched, term) = c.scheduler();
            (
                1.0,
                alive as f64,
                (members.len() - alive) as f64,
                f64::from(u8::from(sched.as_deref() == Some(c.self_id.as_str()))),
                f64::from(u8::from(sched.is_some())),
                term as f64,
            )
        }
        None => (0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    };
    gauge!("vigil_cluster_enabled").set(enabled);
    gauge!("vigil_cluster_members", "state" => "alive").set(alive);
    gauge!("vigil_cluster_members", "state" => "dead").set(dead);
    gauge!("vigil_cluster_is_scheduler").set(is_sched);
    gauge!("vigil_cluster_has_scheduler").set(has_sched);
    gauge!("vigil_cluster_term").set(term);
}
