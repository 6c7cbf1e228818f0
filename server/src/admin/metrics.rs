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
    describe_gauge!("vigil_sessions", "Open RTSP sessions");
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
    ] {
        counter!(name).absolute(v.load(Ordering::Relaxed));
    }
    gauge!("vigil_sessions").set(node.session_count() as f64);
    for p in node.paths() {
        let labels = [("path", p.name.clone())];
        gauge!("vigil_path_readers", &labels).set(p.stream.readers.load(Ordering::Relaxed) as f64);
        gauge!("vigil_path_bitrate_kbps", &labels)
            .set(p.stream.bitrate_bps.load(Ordering::Relaxed) as f64 / 1000.0);
    }
    handle.render()
}
