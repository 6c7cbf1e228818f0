//! `/api/ingest`, cluster sessions, overload refusals, a GStreamer redirect.

use crate::support::*;

/// Status and body of an admin API GET, whatever the status.
fn api_status(n: &Node, path: &str) -> (u16, String) {
    let mut resp = ureq::get(&format!("http://{}{path}", n.api))
        .header(
            "Authorization",
            &format!("Bearer {}", vigil_tests::ADMIN_TOKEN),
        )
        .config()
        .timeout_global(Some(Duration::from_secs(5)))
        .http_status_as_error(false)
        .build()
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

/// Cluster off: `GET /api/ingest/<camera>` answers this node's URL; a bad camera id is 400.
#[test]
fn ingest_without_cluster_is_this_node() {
    let n = NodeBuilder::new().start();
    let v = n.api_json("/api/ingest/gate-7");
    assert_eq!(v["camera"], "gate-7");
    assert_eq!(v["node"], node_id(&n).as_str());
    assert_eq!(v["url"], format!("rtsp://{}/live/gate-7", n.rtsp).as_str());
    assert!(v["reason"].as_str().unwrap().contains("off"), "{v}");
    assert_eq!(api_status(&n, "/api/ingest/bad%20id").0, 400);
    assert_eq!(api_status(&n, "/api/cluster/sessions").0, 404);
}

/// Three nodes on a shared root; node 1 holds (and records) the demo camera; node 2 decides
/// its placements with `load_max = 0`, so every node is overloaded for it.
///
/// * `GET /api/ingest/<camera>`: a camera live on node 1 is sent to node 1 from any node; a new
///   camera goes to the node the knn-class policy picks; node 2 answers 503 with the reason.
/// * `/api/cluster/sessions` and `vigil ctl sessions --cluster` on node 1 list the playback
///   session running on node 3 (from node 3's gossip report) with its node.
/// * A playback DESCRIBE to node 2 is refused: 503 with "overloaded" in the reason.
/// * GStreamer `rtspsrc` asks node 1 for a playback that similarity places on node 3 (a viewer
///   already plays nearby there, as in `membership_election_and_redirects`): it follows the
///   302 and decodes 50 frames with zero errors.
#[test]
fn ingest_cluster_sessions_gstreamer_redirect_and_overload() {
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let members = start_cluster_with(
        3,
        |i| {
            if i == 1 {
                "load_max = 0".into()
            } else {
                String::new()
            }
        },
        root_and_demo_on_first(root.path()),
    );
    let [n1, n2, n3] = [&members[0].node, &members[1].node, &members[2].node];
    let ids = wait_converged(&[n1, n2, n3], Duration::from_secs(15));
    let (id1, id3) = (node_id(n1), node_id(n3));

    // Ingest: a camera already live is answered with its holder, from any node.
    n1.wait_live("live/demo");
    let demo_on_1 = format!("rtsp://{}/live/demo", n1.rtsp);
    for n in [n1, n2, n3] {
        // Until the node's view has node 1's report saying demo is live, a placement may
        // pick node 1 for another reason (the knn-class draw): wait for the view's answer.
        let v = poll_until(
            Duration::from_secs(10),
            "ingest of demo to answer node 1, already live there",
            || {
                let v: serde_json::Value =
                    serde_json::from_str(&n.try_api("/api/ingest/demo")?).ok()?;
                let live = v["reason"].as_str()?.contains("already live");
                (live && v["url"] == demo_on_1.as_str()).then_some(v)
            },
        );
        assert_eq!(v["node"], id1.as_str(), "{v}");
    }
    // A new camera: the knn-class choice over node 1's view, one of the three.
    let v = n1.api_json("/api/ingest/gate-9");
    let chosen = v["node"].as_str().unwrap().to_string();
    assert!(ids.contains(&chosen), "{v}");
    let want_url = [n1, n2, n3]
        .iter()
        .find(|n| node_id(n) == chosen)
        .map(|n| format!("rtsp://{}/live/gate-9", n.rtsp))
        .unwrap();
    assert_eq!(v["url"], want_url.as_str(), "{v}");
    assert!(v["reason"].as_str().unwrap().contains("knn-class"), "{v}");
    let table = ctl(n1, &["ingest", "gate-9"]);
    assert!(table.contains("/live/gate-9"), "{table}");
    // Node 2 (load_max = 0) cannot place it anywhere.
    let (status, body) = api_status(n2, "/api/ingest/gate-9");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("overloaded"), "{body}");

    // A few seconds of recording on the shared root.
    let first_ms = vigil_tests::demo_recorded_for(n1, 5000);

    // Overload: node 2 refuses a playback DESCRIBE with 503 and the reason (no redirect).
    let url_at = |n: &Node| {
        format!(
            "{}?start={}&end={}",
            n.url("playback/demo"),
            rfc3339(first_ms + 1000),
            rfc3339(first_ms + 4000)
        )
    };
    let mut c2 = RtspConn::connect(n2.rtsp);
    let r = c2.request("DESCRIBE", &url_at(n2), &[], None);
    assert_eq!(r.status.0, 503, "{}", r.reason);
    assert!(r.reason.contains("overloaded"), "{}", r.reason);
    assert!(r.headers.get("Location").is_none());
    let d = &n2.api_json("/api/cluster/scheduler")["decisions"][0];
    assert!(d["node"].is_null(), "{d}");

    // A viewer on node 3 (placed there by hand with the marker).
    let _viewer = demo_viewer_placed_on(n3, first_ms, KEY);
    // Every node's sessions, seen from node 1.
    poll_until(
        Duration::from_secs(15),
        "node 1 to list node 3's playback session",
        || {
            let v: serde_json::Value =
                serde_json::from_str(&n1.try_api("/api/cluster/sessions")?).ok()?;
            v["sessions"]
                .as_array()?
                .iter()
                .any(|s| {
                    s["node"] == id3.as_str()
                        && s["path"] == "playback/demo"
                        && s["kind"] == "playback"
                })
                .then_some(())
        },
    );
    let table = ctl(n1, &["sessions", "--cluster"]);
    assert!(
        table.contains("NODE") && table.contains(&id3) && table.contains("playback/demo"),
        "{table}"
    );
    wait_sees_streaming(n1, &id3, Duration::from_secs(15));

    // GStreamer asks node 1, gets a 302 to node 3 and decodes cleanly.
    let url = url_at(n1);
    let run = gst_decode_h264(&url, "tcp", 50, Duration::from_secs(30));
    assert_eq!(run.frames, 50, "frames decoded:\n{}", run.output);
    assert!(
        run.errors.is_empty(),
        "GStreamer errors while playing:\n{}",
        run.errors.join("\n")
    );
    assert!(
        run.caps.contains("width=(int)640") && run.caps.contains("height=(int)360"),
        "{}",
        run.caps
    );
    let sched = n1.api_json("/api/cluster/scheduler");
    let d = &sched["decisions"][0];
    assert_eq!(d["kind"], "playback", "{sched}");
    assert_eq!(d["node"], id3.as_str(), "{sched}");
    assert_eq!(d["redirected"], true, "{sched}");
}
