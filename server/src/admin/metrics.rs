//! Prometheus exposition. The node keeps its own atomics (cheap on the hot path); this
//! module publishes them through the `metrics` facade at scrape time.

use crate::node::Node;
use metrics::{counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::atomic::Ordering;

/// Install the recorder once per process; None if one is already installed (tests that
/// start several nodes in one process).
pub fn install() -> Option<PrometheusHandle> {
    let handle = PrometheusBuilder::new().install_recorder().ok()?;
    describe_counter!("vigil_rtsp_connections_total", "RTSP connections accepted");
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
        "Refusals by [limits], [http] and [tls], per limit: connections, connections_per_address, sessions_per_address, describe_rate, request_rate, request_deadline, http_connections, http_connections_per_address, tls_handshakes"
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
    describe_gauge!("vigil_path_readers", "Viewers per path");
    describe_gauge!("vigil_path_bitrate_kbps", "Ingest bitrate per path");
    Some(handle)
}

/// Refresh every series from the node's state and render the exposition text.
pub fn render(node: &Node, handle: &PrometheusHandle) -> String {
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
    }
    handle.render()
}
