//! Camera moves (issue 11 §2, ALGORITHMS.md §B.2–§B.5): real nodes on 127.0.0.1–3 with
//! cluster certificates, pull cameras from a source vigil on 127.0.0.5, a shared recording
//! root with 1 s segments. Every wait polls a deadline.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use vigil_tests::secure_cluster::{self, SecureCluster};
use vigil_tests::{ctl, poll_until, spawn_ffmpeg_decode, Node, NodeBuilder, DEMO_CAMERA};

/// A camera source outside the cluster.
fn source() -> Node {
    NodeBuilder::new()
        .ip("127.0.0.5")
        .extra(DEMO_CAMERA)
        .start()
}

fn pull_cameras(url: &str, ids: &[&str]) -> String {
    ids.iter()
        .map(|id| format!("[[camera]]\nid = \"{id}\"\nsource = \"{url}\"\non_demand = false\n"))
        .collect()
}

/// The `/api/cameras` row of `camera` as `n` sees it.
fn camera_row(n: &Node, camera: &str) -> Option<serde_json::Value> {
    n.api_json("/api/cameras")
        .as_array()?
        .iter()
        .find(|c| c["camera"] == camera)
        .cloned()
}

/// The node holding `camera` live, as `n` sees it.
fn live_on(n: &Node, camera: &str) -> Option<String> {
    let row = camera_row(n, camera)?;
    (row["state"] == "live").then(|| row["node"].as_str().map(str::to_string))?
}

fn index_of(c: &SecureCluster, id: &str) -> usize {
    c.members.iter().position(|m| m.id == id).expect("a member")
}

/// What node `i` relays as an edge, as its own report says.
fn edges_of(c: &SecureCluster, i: usize) -> Vec<String> {
    let v = c.node(i).api_json("/api/cluster/nodes");
    v["nodes"]
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["id"] == c.members[i].id.as_str()))
        .and_then(|n| n["edges"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e.as_str().map(str::to_string))
        .collect()
}

/// The camera's recorded segments on the shared root as (start, end) ms, in order. Opened
/// while a live node holds the lease, so nothing of the writer's is touched.
fn segments(c: &SecureCluster, camera: &str) -> Vec<(i64, i64)> {
    let store = vigil_storage::Store::open(&c.root, "test-reader", Default::default())
        .expect("open the shared root");
    let index = store.index(camera).expect("index");
    index.segments().map(|s| (s.start_ms, s.end_ms)).collect()
}

fn moves_on(n: &Node) -> Vec<serde_json::Value> {
    n.api_json("/api/cluster/scheduler")["camera_moves"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Keys under `[cluster]`: the automatic §B moves off, a short move timeout, edges released
/// half a second after their last viewer.
const KEYS: &str = "[cluster.edge]\nidle_ms = 500\n\
                    [cluster.gateway]\ncamera_moves = false\nmove_timeout_ms = 3000\n";

/// An operator's move of a watched, recorded camera: the destination has a keyframe before
/// the source lets go; the source's viewer keeps decoding (the source relays the camera
/// from the destination until the viewer leaves, then drops the relay); the recording
/// continues on the shared root with no gap beyond one segment.
#[test]
fn an_operator_move_keeps_the_viewers_decoding_and_the_recording_continuous() {
    let src = source();
    let url = src.url("live/demo");
    let c = secure_cluster::start(3, KEYS, |_| pull_cameras(&url, &["gate"]));
    let holder = poll_until(Duration::from_secs(20), "gate live", || {
        live_on(c.node(0), "gate")
    });
    let h = index_of(&c, &holder);
    let t = (h + 1) % 3;
    let to = c.members[t].id.clone();
    // Recorded for a few seconds first.
    poll_until(Duration::from_secs(15), "gate recorded", || {
        (segments(&c, "gate").len() >= 3).then_some(())
    });
    let viewer = spawn_ffmpeg_decode(
        &secure_cluster::placed(&c.node(h).url("live/gate")),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "250"],
        Duration::from_secs(40),
    );
    poll_until(Duration::from_secs(10), "the viewer on the holder", || {
        (camera_row(c.node(h), "gate")?["viewers"].as_u64()? >= 1).then_some(())
    });
    // The viewer has two seconds of video before the move.
    poll_until(Duration::from_secs(10), "the viewer playing", || {
        c.node(h)
            .api_json("/api/sessions")
            .as_array()?
            .iter()
            .any(|s| s["path"] == "live/gate" && s["packets"].as_u64() > Some(50))
            .then_some(())
    });
    let moved_at = vigil_server::cluster::now_ms();
    let out = ctl(c.node(0), &["move-camera", "gate", &to]);
    assert!(
        out.contains(&format!("moved from {holder} to {to}")),
        "{out}"
    );
    for i in 0..3 {
        poll_until(
            Duration::from_secs(10),
            "every node sees gate on the destination",
            || (live_on(c.node(i), "gate")? == to).then_some(()),
        );
    }
    // The old holder relays the camera for its viewer, from the destination.
    poll_until(Duration::from_secs(5), "the old holder relays gate", || {
        edges_of(&c, h).contains(&"gate".to_string()).then_some(())
    });
    let decoded = viewer.join().expect("viewer");
    decoded.assert_plays("the old holder's viewer through the move", 250, 250);
    poll_until(Duration::from_secs(10), "the relay released", || {
        (!edges_of(&c, h).contains(&"gate".to_string())).then_some(())
    });
    // The recording goes on from the destination.
    poll_until(Duration::from_secs(15), "segments after the move", || {
        (segments(&c, "gate")
            .iter()
            .filter(|s| s.0 > moved_at + 2000)
            .count()
            >= 2)
            .then_some(())
    });
    let segs = segments(&c, "gate");
    let gaps: Vec<i64> = segs
        .windows(2)
        .filter(|w| w[1].0 > moved_at - 3000)
        .map(|w| w[1].0 - w[0].1)
        .collect();
    let worst = gaps.iter().copied().max().unwrap_or(0);
    let record = moves_on(c.node(0))
        .into_iter()
        .find(|m| m["trigger"] == "operator")
        .expect("the move's record");
    eprintln!(
        "camera move: keyframe at the destination {} ms, decision → re-bound {} ms, \
         recording gap {worst} ms (segments around the move: {gaps:?})",
        record["keyframe_ms"], record["took_ms"]
    );
    assert_eq!(record["result"], "moved", "{record}");
    // One segment is 1 s (cut on a keyframe, one GOP = 1 s here).
    assert!(worst <= 1000, "a recording gap of {worst} ms: {gaps:?}");
}

/// ffmpeg decoding `frames` of `gate` through node `e`, once `e` relays it as an edge.
fn edge_viewer(
    c: &SecureCluster,
    e: usize,
    frames: usize,
) -> std::thread::JoinHandle<vigil_tests::Decoded> {
    let viewer = spawn_ffmpeg_decode(
        &secure_cluster::placed(&c.node(e).url("live/gate")),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", &frames.to_string()],
        Duration::from_secs(40),
    );
    poll_until(Duration::from_secs(10), "the edge relays gate", || {
        edges_of(c, e).contains(&"gate".to_string()).then_some(())
    });
    viewer
}

/// A drain re-binds a camera to the one node left — an edge relaying it for a viewer. The
/// edge must become the camera's holder: pull it itself, record it, and keep its viewer
/// decoding. (It kept relaying from the drained holder, which, no longer bound, relayed
/// from the edge in turn: a loop with no source, the camera unrecorded and the viewer
/// starved until something re-bound it — the chaos run's drain, 38 s.)
#[test]
fn a_camera_re_bound_to_its_edge_is_pulled_and_recorded_there() {
    let src = source();
    let url = src.url("live/demo");
    let c = secure_cluster::start(2, KEYS, |_| pull_cameras(&url, &["gate"]));
    let holder = poll_until(Duration::from_secs(20), "gate live", || {
        live_on(c.node(0), "gate")
    });
    let h = index_of(&c, &holder);
    let e = 1 - h;
    poll_until(Duration::from_secs(15), "gate recorded", || {
        (segments(&c, "gate").len() >= 3).then_some(())
    });
    // A viewer served by the other node, which relays the camera from the holder.
    let viewer = edge_viewer(&c, e, 300);
    let drained_at = vigil_server::cluster::now_ms();
    let out = ctl(c.node(0), &["drain", &holder]);
    assert!(!out.contains("error"), "{out}");
    let edge_id = c.members[e].id.clone();
    for i in 0..2 {
        poll_until(
            Duration::from_secs(10),
            "every node sees gate on the edge",
            || (live_on(c.node(i), "gate")? == edge_id).then_some(()),
        );
    }
    // The edge pulls it now (no longer an edge of it) and records it.
    poll_until(
        Duration::from_secs(10),
        "the edge holds gate itself",
        || (!edges_of(&c, e).contains(&"gate".to_string())).then_some(()),
    );
    poll_until(Duration::from_secs(15), "segments after the drain", || {
        (segments(&c, "gate")
            .iter()
            .filter(|s| s.0 > drained_at + 1000)
            .count()
            >= 3)
            .then_some(())
    });
    viewer
        .join()
        .expect("viewer")
        .assert_plays("the edge's viewer through the drain", 300, 300);
    let segs = segments(&c, "gate");
    let worst = segs
        .windows(2)
        .filter(|w| w[1].0 > drained_at - 3000)
        .map(|w| w[1].0 - w[0].1)
        .max()
        .unwrap_or(0);
    // One segment is 1 s (cut on a keyframe, one GOP = 1 s here).
    assert!(worst <= 1000, "a recording gap of {worst} ms at the drain");
}

/// A node never relays a camera to the node it relays it from. During a re-binding to the
/// edge (the test above) the old holder asks the edge for the camera while the edge still
/// relays it from the old holder: served, the two replayed each other's GOP caches back and
/// forth (megabytes in a fraction of a second) and the edge's viewer was thrown thousands of
/// packets ahead ("bad cseq" — the test above, on a loaded machine). Here that request is
/// made on purpose, signed as the holder's relay would be: refused with 503, while a relay
/// of another node and the edge's viewer are served.
#[test]
fn a_relay_to_the_node_it_relays_from_is_refused() {
    let src = source();
    let url = src.url("live/demo");
    let c = secure_cluster::start(2, KEYS, |_| pull_cameras(&url, &["gate"]));
    let holder = poll_until(Duration::from_secs(20), "gate live", || {
        live_on(c.node(0), "gate")
    });
    let e = 1 - index_of(&c, &holder);
    let viewer = edge_viewer(&c, e, 100);
    let edge = c.node(e);
    let base = format!("rtsp://{}", edge.rtsp);
    let describe_as = |user: &str| {
        let signed = vigil_server::cluster::signed_redirect_url(
            secure_cluster::CLUSTER_KEY.as_bytes(),
            &base,
            &edge.url("live/gate"),
            user,
            vigil_server::cluster::now_ms(),
        );
        let mut conn = vigil_tests::RtspConn::connect(edge.rtsp);
        conn.request("DESCRIBE", &signed, &[("Accept", "application/sdp")], None)
    };
    let r = describe_as(&format!("edge:{holder}"));
    assert_eq!(r.status.0, 503, "{}", r.reason);
    assert!(
        r.reason.contains("relays the camera from you"),
        "{}",
        r.reason
    );
    assert_eq!(r.headers.get("Retry-After"), Some("1"));
    let r = describe_as("edge:another-node");
    assert_eq!(r.status.0, 200, "another node's relay: {}", r.reason);
    viewer
        .join()
        .expect("viewer")
        .assert_plays("the edge's viewer", 100, 100);
}

/// A camera watched through an edge moves to a third node: the edge follows it — relays
/// from the new holder — and the old holder can then die without the edge's viewer
/// noticing. (The edge kept reading the old holder, which relayed from the new one, until
/// its viewers left; a fault of a node that no longer held the camera cut them: the chaos
/// run's partition, 5 s.)
#[test]
fn an_edge_follows_its_camera_to_the_new_holder() {
    let src = source();
    let url = src.url("live/demo");
    let mut c = secure_cluster::start(3, KEYS, |_| pull_cameras(&url, &["gate"]));
    let holder = poll_until(Duration::from_secs(20), "gate live", || {
        live_on(c.node(0), "gate")
    });
    let h = index_of(&c, &holder);
    let (e, t) = ((h + 1) % 3, (h + 2) % 3);
    let viewer = edge_viewer(&c, e, 300);
    let to = c.members[t].id.clone();
    let out = ctl(c.node(e), &["move-camera", "gate", &to]);
    assert!(
        out.contains(&format!("moved from {holder} to {to}")),
        "{out}"
    );
    poll_until(
        Duration::from_secs(5),
        "the edge relays from the new holder",
        || {
            let p = c.node(e).path_info("live/gate")?;
            (p["source"] == format!("relay from {to}").as_str()).then_some(())
        },
    );
    // The old holder dies; the edge's viewer goes on.
    c.members[h].node.kill();
    viewer.join().expect("viewer").assert_plays(
        "the edge's viewer through the move and the old holder's death",
        300,
        300,
    );
}

/// Node `n` (made the holder of three cameras by operator moves) gets a viewer on one of
/// them; with GL driven by memory bandwidth alone (1 kB/s of it), any viewer puts the node
/// in the overload zone. The scheduler then moves its idle cameras off one per period by
/// §B.5 (never the watched one), each to a destination the recorded η picks by roulette.
#[test]
fn an_overloaded_node_moves_its_idle_cameras_off_by_the_rules() {
    let src = source();
    let url = src.url("live/demo");
    let keys = "[cluster.edge]\nidle_ms = 500\n\
                [cluster.gateway]\nlambda = [0.0, 1.0, 0.0]\nmem_transfer_rate = 1000.0\n\
                mem_bus_bits = 8.0\nsample_period_ms = 500\nmove_timeout_ms = 5000\n";
    let cams = ["c1", "c2", "c3"];
    let c = secure_cluster::start(3, keys, |_| pull_cameras(&url, &cams));
    let n = 1;
    let target = c.members[n].id.clone();
    for cam in cams {
        let holder = poll_until(Duration::from_secs(20), "camera live", || {
            live_on(c.node(0), cam)
        });
        if holder != target {
            let out = ctl(c.node(0), &["move-camera", cam, &target]);
            assert!(out.contains("moved from"), "{out}");
        }
    }
    let viewer = spawn_ffmpeg_decode(
        &secure_cluster::placed(&c.node(n).url("live/c1")),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "200"],
        Duration::from_secs(40),
    );
    // Two idle cameras move off, one per period; then nothing is left to move.
    let moved = poll_until(Duration::from_secs(30), "two overload moves", || {
        let m: Vec<_> = moves_on(c.node(0))
            .into_iter()
            .filter(|m| m["trigger"] == "overload" && m["result"] == "moved")
            .collect();
        (m.len() >= 2).then_some(m)
    });
    let mut cams_moved: Vec<&str> = Vec::new();
    for m in moved.iter().rev() {
        let d = &m["decision"];
        assert_eq!(m["from"], target.as_str(), "{m}");
        assert!(d["gl"].as_f64().unwrap() > 0.61, "{m}");
        // §B.4 by hand: the first k with η ≤ SPL_k over the offered loads.
        let loads: Vec<vigil_cluster::gateway::GatewayLoad> =
            serde_json::from_value(d["loads"].clone()).expect("loads");
        let eta = d["eta"].as_f64().expect("eta");
        let pick = vigil_cluster::gateway::roulette_at(&loads, eta).expect("a destination");
        assert_eq!(m["to"], pick.node.as_str(), "{m}");
        assert_ne!(m["to"], target.as_str(), "{m}");
        cams_moved.push(m["camera"].as_str().unwrap());
    }
    // §B.5: c2 and c3 were never watched (DA 0, no finish): the tie goes by camera id. c1,
    // watched, never moves.
    assert_eq!(cams_moved, ["c2", "c3"], "{moved:?}");
    let later: BTreeMap<&str, String> = cams
        .iter()
        .map(|&cam| {
            let h = poll_until(Duration::from_secs(10), "camera live", || {
                live_on(c.node(0), cam)
            });
            (cam, h)
        })
        .collect();
    assert_eq!(later["c1"], target);
    assert_ne!(later["c2"], target);
    assert_ne!(later["c3"], target);
    viewer
        .join()
        .expect("viewer")
        .assert_plays("the watched camera's viewer", 200, 200);
    // Still overloaded with nothing idle left: recorded, no move.
    poll_until(Duration::from_secs(10), "a no-move record", || {
        moves_on(c.node(0))
            .iter()
            .any(|m| {
                m["result"] == "no move"
                    && m["reason"].as_str().is_some_and(|r| r.contains("no idle"))
            })
            .then_some(())
    });
}

/// Bad input: the destination's camera URL leads to a "camera" that accepts the connection
/// and never sends a frame (no keyframe ever reaches the destination): the move is
/// abandoned after `move_timeout_ms` and the camera stays. Then the destination is killed
/// in the middle of a move: the source keeps the camera; nothing is left half-moved.
#[test]
fn a_destination_without_a_keyframe_or_that_dies_leaves_the_camera_where_it_was() {
    let src = source();
    let url = src.url("live/demo");
    // Accepts and holds every connection, answering nothing.
    let mute = std::net::TcpListener::bind("127.0.0.5:0").expect("bind");
    let mute_url = format!("rtsp://{}/mute", mute.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in mute.incoming().flatten() {
            held.push(s);
        }
    });
    let c = secure_cluster::start(3, KEYS, |i| {
        pull_cameras(if i == 2 { &mute_url } else { &url }, &["gate"])
    });
    let mut holder = poll_until(Duration::from_secs(20), "gate bound", || {
        camera_row(c.node(0), "gate")?["node"]
            .as_str()
            .map(str::to_string)
    });
    let bad = c.members[2].id.clone();
    if holder == bad {
        let good = c.members[1].id.clone();
        let out = ctl(c.node(0), &["move-camera", "gate", &good]);
        assert!(out.contains("moved from"), "{out}");
        holder = good;
    }
    poll_until(Duration::from_secs(20), "gate live", || {
        (live_on(c.node(0), "gate")? == holder).then_some(())
    });
    let started = Instant::now();
    let out = vigil_tests::ctl_fails(c.node(0).api, &["move-camera", "gate", &bad]);
    assert!(out.contains("no keyframe of gate"), "{out}");
    assert!(started.elapsed() >= Duration::from_secs(3), "{out}");
    assert_eq!(live_on(c.node(0), "gate").as_deref(), Some(holder.as_str()));
    let m = &moves_on(c.node(0))[0];
    assert!(
        m["result"].as_str().unwrap().starts_with("abandoned"),
        "{m}"
    );
    // The destination let its pull go: it neither holds nor pulls gate.
    poll_until(Duration::from_secs(5), "the destination idle", || {
        let row = camera_row(c.node(2), "gate")?;
        (row["node"] == holder.as_str() && row["state"] == "live").then_some(())
    });

    // The destination dies mid-move.
    let via = c.node(0).api;
    let bad2 = bad.clone();
    let mover =
        std::thread::spawn(move || vigil_tests::ctl_fails(via, &["move-camera", "gate", &bad2]));
    poll_until(Duration::from_secs(5), "the move under way", || {
        camera_row(c.node(0), "gate")?["state"]
            .as_str()?
            .starts_with("moving to")
            .then_some(())
    });
    let mut c = c;
    c.members[2].node.kill();
    let out = mover.join().expect("ctl");
    assert!(out.contains(&bad), "{out}");
    poll_until(
        Duration::from_secs(10),
        "gate live on its holder, not moving",
        || {
            let row = camera_row(c.node(0), "gate")?;
            (row["state"] == "live" && row["node"] == holder.as_str()).then_some(())
        },
    );
    let m = &moves_on(c.node(0))[0];
    assert!(
        m["result"].as_str().unwrap().starts_with("abandoned"),
        "{m}"
    );
}

/// Figures for docs/BENCHMARKS.md (run by hand, alone; it measures, it asserts only that
/// every move succeeded): 30 operator moves of an idle recorded camera round the three
/// nodes, each timed (destination's first keyframe, decision → re-bound), then every gap
/// in the recording across them.
#[test]
#[ignore]
fn bench_camera_moves() {
    let src = source();
    let url = src.url("live/demo");
    let c = secure_cluster::start(3, KEYS, |_| pull_cameras(&url, &["gate"]));
    let mut holder = poll_until(Duration::from_secs(20), "gate live", || {
        live_on(c.node(0), "gate")
    });
    poll_until(Duration::from_secs(15), "gate recorded", || {
        (segments(&c, "gate").len() >= 3).then_some(())
    });
    let first = vigil_server::cluster::now_ms();
    let (mut keyframe, mut took) = (Vec::new(), Vec::new());
    for _ in 0..30 {
        let to = c.members[(index_of(&c, &holder) + 1) % 3].id.clone();
        let at = vigil_server::cluster::now_ms();
        let out = ctl(c.node(0), &["--json", "move-camera", "gate", &to]);
        let r: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(r["result"], "moved", "{r}");
        keyframe.push(r["keyframe_ms"].as_f64().expect("keyframe_ms"));
        took.push(r["took_ms"].as_f64().expect("took_ms"));
        poll_until(Duration::from_secs(10), "live on the destination", || {
            (live_on(c.node(0), "gate")? == to).then_some(())
        });
        holder = to;
        poll_until(
            Duration::from_secs(10),
            "a segment from the new holder",
            || (segments(&c, "gate").last()?.0 > at).then_some(()),
        );
    }
    poll_until(Duration::from_secs(10), "the last segments", || {
        (segments(&c, "gate").last()?.0 > vigil_server::cluster::now_ms() - 3000).then_some(())
    });
    let gaps: Vec<f64> = segments(&c, "gate")
        .windows(2)
        .filter(|w| w[1].0 > first)
        .map(|w| (w[1].0 - w[0].1) as f64)
        .collect();
    eprintln!("keyframe ms: {keyframe:?}\ntook ms: {took:?}");
    let pct = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p).round() as usize]
    };
    for (name, v) in [
        (
            "destination: TakeCamera → first keyframe (ms)",
            &mut keyframe,
        ),
        ("decision → re-bound (ms)", &mut took),
        (
            "recording: gap between consecutive segments (ms)",
            &mut gaps.clone(),
        ),
    ] {
        println!(
            "| {name} | {} | {:.0} | {:.0} | {:.0} |",
            v.len(),
            pct(v, 0.5),
            pct(v, 0.99),
            pct(v, 1.0)
        );
    }
}
