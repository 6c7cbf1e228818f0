//! What the scheduler counts for a placed playback between its DESCRIBE and its first
//! frame, on two `vigil` processes (127.0.0.1–2) over a shared root whose camera recorded
//! twice, six hours apart:
//!
//! * the decision assumes the bitrate of the segment the playback starts in (the camera's
//!   bytes over its whole index, gaps included, made it ≈ 0.3 % of that here, and the
//!   scheduler's estimate for the placement next to nothing);
//! * from SETUP on, before any PLAY, the session is in its node's report at that bitrate,
//!   counted once (the placement's reservation gives way to it), where the report used to
//!   leave it out until its first frame.
//!
//! The load numbers (ALGORITHMS.md §A.1): with Bord = 15 Mb/s and the demo clip's
//! ≈ 0.61 Mb/s, a stream read from storage costs 100·0.7·2·0.61/15 ≈ 5.7 points of N.

use std::time::Duration;

use vigil_tests::export::synthetic_recording;
use vigil_tests::{alive_ids, node_id, poll_until, rfc3339, scheduler_of, start_member};
use vigil_tests::{Node, RtspConn};

const KEY: &str = "test-cluster-key-estimates-0123456789";
const BORD: f64 = 15e6;
/// 2023-11-14T22:13:20Z: the first recording; the second starts six hours later.
const T0: i64 = 1_700_000_000_000;
const GAP_MS: i64 = 6 * 3_600_000;
const SECS: u64 = 40;

/// 100·w_net·k·VBR/Bord for a stream read from storage (k = 2), default weights.
fn storage_stream_points(vbr_bps: f64) -> f64 {
    100.0 * 0.7 * 2.0 * vbr_bps / BORD
}

/// `id`'s entry in `n`'s `/api/cluster/nodes`.
fn view_of(n: &Node, id: &str) -> Option<serde_json::Value> {
    n.api_json("/api/cluster/nodes")["nodes"]
        .as_array()?
        .iter()
        .find(|m| m["id"] == id)
        .cloned()
}

fn within(x: f64, expected: f64, share: f64) -> bool {
    (x - expected).abs() <= share * expected
}

#[test]
fn a_placed_playback_counts_its_segments_bitrate_from_describe_to_first_frame() {
    let root = tempfile::tempdir().expect("shared root");
    synthetic_recording(root.path(), "gap", T0, SECS);
    synthetic_recording(root.path(), "gap", T0 + GAP_MS, SECS);
    let extra = format!(
        "bandwidth_bps = {BORD}\n[storage]\nroot = \"{}\"\n",
        root.path().display()
    );
    let (n1, seed) = start_member(0, None, KEY, 10, &extra);
    let (n2, _) = start_member(1, Some(seed), KEY, 20, &extra);
    let (id1, id2) = (node_id(&n1), node_id(&n2));
    poll_until(
        Duration::from_secs(20),
        "two members, node 1 scheduling",
        || (alive_ids(&n1)?.len() == 2 && scheduler_of(&n1)? == id1).then_some(()),
    );

    // The DESCRIBE, at node 1 (the scheduler).
    let url = format!("{}?start={}", n1.url("playback/gap"), rfc3339(T0 + 2000));
    let mut c = RtspConn::connect(n1.rtsp);
    let d = c.request("DESCRIBE", &url, &[], None);
    let clip = vigil_testkit::media::demo_bitrate_bps();
    let sched = n1.api_json("/api/cluster/scheduler");
    let decision = &sched["decisions"][0];
    assert_eq!(decision["kind"], "playback", "{sched}");
    let vbr = decision["vbr_bps"].as_f64().unwrap_or(0.0);
    assert!(
        within(vbr, clip, 0.25),
        "the decision assumed {vbr:.0} b/s; the segment plays at ≈ {clip:.0}: {sched}"
    );

    // SETUP where it was placed (the 302's URL carries the placement marker), no PLAY.
    let (id, mut conn, sdp) = match d.status.0 {
        200 => (id1.clone(), c, d.body.clone()),
        302 => {
            let loc = d.headers.get("Location").expect("302 Location").to_string();
            assert!(loc.starts_with(&format!("rtsp://{}/", n2.rtsp)), "{loc}");
            let mut c2 = RtspConn::connect(n2.rtsp);
            let d2 = c2.request("DESCRIBE", &loc, &[], None);
            assert_eq!(d2.status.0, 200, "DESCRIBE {loc}: {}", d2.reason);
            (id2.clone(), c2, d2.body.clone())
        }
        s => panic!("DESCRIBE {url}: {s} {}", d.reason),
    };
    let sdp = String::from_utf8_lossy(&sdp).into_owned();
    let track = sdp
        .lines()
        .find_map(|l| {
            l.strip_prefix("a=control:")
                .filter(|c| c.contains("trackID=0"))
        })
        .unwrap_or_else(|| panic!("no track control in {sdp}"))
        .to_string();
    let s = conn.request(
        "SETUP",
        &track,
        &[("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")],
        None,
    );
    assert_eq!(s.status.0, 200, "SETUP {track}: {}", s.reason);

    // The node's report lists the session before its first frame, at the segment's
    // bitrate, and the reservation gives way to it: one stream, counted once.
    let expected = storage_stream_points(clip);
    let seen = poll_until(
        Duration::from_secs(10),
        "the set-up session in its node's report",
        || {
            let v = view_of(&n1, &id)?;
            (v["streams"] == 1 && v["reserved"] == 0).then_some(v)
        },
    );
    let net = seen["load_net"].as_f64().unwrap_or(0.0);
    assert!(
        within(net, expected, 0.25),
        "N of {id} with one set-up session: {net:.2} points, expected ≈ {expected:.2}: {seen}"
    );
}
