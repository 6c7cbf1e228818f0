//! §B.1 sleep and wake (issue 11 §1): a second vigil process on 127.0.0.2 plays the camera
//! (its `live/demo`); the node under test pulls five always-on cameras from it with TS_max
//! 1 s and PS_max 0.4. Every wait polls a deadline.

use std::time::{Duration, Instant};

use vigil_testkit::client::{play, ClientTransport, PlayOptions};
use vigil_tests::secure_cluster::{next_packet_of, runtime, video_track};
use vigil_tests::{
    ctl, ffmpeg_decode, node_id, poll_until, spawn_ffmpeg_decode, start_member, Node, NodeBuilder,
    DEMO_CAMERA,
};

fn source() -> Node {
    let node = NodeBuilder::new()
        .ip("127.0.0.2")
        .extra(DEMO_CAMERA)
        .start();
    node.wait_live("live/demo");
    node
}

/// A node pulling `n` always-on cameras `cam0…` from `src`, recording only those in
/// `recorded`, with the given TS_max and PS_max.
fn sleeper(
    src: &Node,
    n: usize,
    recorded: &[usize],
    ts_max_ms: u64,
    ps_max: f64,
) -> (Node, tempfile::TempDir) {
    let root = tempfile::tempdir().expect("temp dir");
    let mut cfg = format!(
        "[cluster.gateway]\nts_max_ms = {ts_max_ms}\nps_max = {ps_max}\n\n\
         [live]\nreconnect_min_ms = 100\nreconnect_max_ms = 400\n\n\
         [storage]\nroot = \"{}\"\n",
        root.path().display()
    );
    for i in 0..n {
        cfg.push_str(&format!(
            "\n[[camera]]\nid = \"cam{i}\"\nsource = \"{}\"\non_demand = false\nrecord = {}\n",
            src.url("live/demo"),
            recorded.contains(&i)
        ));
    }
    (NodeBuilder::new().extra(&cfg).start(), root)
}

/// camera → state, from `/api/cameras`.
fn states(n: &Node) -> Vec<(String, String)> {
    n.api_json("/api/cameras")
        .as_array()
        .map(|v| {
            v.iter()
                .map(|c| {
                    (
                        c["camera"].as_str().unwrap_or_default().to_string(),
                        c["state"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn asleep(n: &Node) -> Vec<String> {
    states(n)
        .into_iter()
        .filter(|(_, s)| s == "asleep")
        .map(|(c, _)| c)
        .collect()
}

fn upstream_sessions(src: &Node) -> usize {
    src.api_json("/api/sessions")
        .as_array()
        .map_or(0, |v| v.iter().filter(|s| s["kind"] == "play").count())
}

/// cam0–cam2 unused, cam3 watched, cam4 recorded. PS_max 0.4 of 5 cameras: two may sleep.
/// The two longest idle (ties by name: cam0, cam1) go asleep and disconnect upstream; cam2
/// stays awake because of the cap, cam3 because it is watched, cam4 because it records.
/// The first viewer of cam0 wakes it and decodes it without an error.
#[test]
fn unused_cameras_sleep_within_the_cap_and_the_first_viewer_wakes_one() {
    let src = source();
    let (node, _root) = sleeper(&src, 5, &[4], 1000, 0.4);
    let watcher = spawn_ffmpeg_decode(
        &node.url("live/cam3"),
        &["-rtsp_transport", "tcp"],
        &["-t", "14"],
        Duration::from_secs(40),
    );
    let slept = poll_until(Duration::from_secs(15), "two cameras asleep", || {
        let a = asleep(&node);
        (a.len() == 2).then_some(a)
    });
    assert_eq!(slept, vec!["cam0", "cam1"]);
    // The cap holds, and the watched and recorded cameras stay up, for 3 s of looks.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let s = states(&node);
        let state = |c: &str| s.iter().find(|(x, _)| x == c).map(|(_, st)| st.as_str());
        assert_eq!(asleep(&node).len(), 2, "{s:?}");
        assert_eq!(state("cam2"), Some("live"), "{s:?}");
        assert_eq!(state("cam3"), Some("live"), "{s:?}");
        assert_eq!(state("cam4"), Some("live"), "{s:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Asleep means disconnected: the camera serves three pulls, not five.
    poll_until(Duration::from_secs(5), "three upstream sessions", || {
        (upstream_sessions(&src) == 3).then_some(())
    });
    let out = ctl(&node, &["cameras"]);
    assert!(
        out.contains("asleep") && out.contains("no cluster"),
        "{out}"
    );
    let cams = node.api_json("/api/cameras");
    let cam4 = cams
        .as_array()
        .and_then(|v| v.iter().find(|c| c["camera"] == "cam4"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(cam4["recording"], true, "{cam4}");
    let cam3 = cams
        .as_array()
        .and_then(|v| v.iter().find(|c| c["camera"] == "cam3"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(cam3["viewers"], 1, "{cam3}");
    // The first viewer wakes cam0: it plays with zero decoder errors.
    let d = ffmpeg_decode(
        &node.url("live/cam0"),
        &["-rtsp_transport", "tcp"],
        &["-t", "4"],
        Duration::from_secs(30),
    );
    d.assert_plays("the viewer that woke cam0", 75, 110);
    assert!(node.log().contains("waking: a viewer asked for it"));
    watcher
        .join()
        .expect("ffmpeg")
        .assert_plays("the watcher of cam3", 325, 360);
}

/// In a cluster the node the scheduler bound the camera to puts it to sleep; every node
/// shows it asleep there and why it is bound there; a viewer who asks the other node is
/// redirected to the holder, which wakes the camera, and decodes it without an error.
#[test]
fn in_a_cluster_the_holder_sleeps_its_camera_and_a_viewer_elsewhere_wakes_it() {
    let src = NodeBuilder::new()
        .ip("127.0.0.4")
        .extra(DEMO_CAMERA)
        .start();
    src.wait_live("live/demo");
    let key = "sleep-test-cluster-key-0123";
    let extra = format!(
        "[cluster.gateway]\nts_max_ms = 1000\nps_max = 1.0\n\n\
         [[camera]]\nid = \"gate\"\nsource = \"{}\"\non_demand = false\nrecord = false\n",
        src.url("live/demo")
    );
    let (n1, g1) = start_member(0, None, key, 10, &extra);
    let (n2, _) = start_member(1, Some(g1), key, 20, &extra);
    let (holder, bound) = poll_until(
        Duration::from_secs(30),
        "gate asleep, seen from node 2",
        || {
            let v = n2.api_json("/api/cameras");
            let c = v
                .as_array()?
                .iter()
                .find(|c| c["camera"] == "gate")?
                .clone();
            (c["state"] == "asleep").then(|| {
                (
                    c["node"].as_str().unwrap_or_default().to_string(),
                    c["bound"].as_str().unwrap_or_default().to_string(),
                )
            })
        },
    );
    assert!(
        bound.contains(&format!("bound to {holder} by the scheduler")),
        "{bound}"
    );
    assert_eq!(upstream_sessions(&src), 0);
    let other = if holder == node_id(&n1) { &n2 } else { &n1 };
    let d = ffmpeg_decode(
        &other.url("live/gate"),
        &["-rtsp_transport", "tcp"],
        &["-t", "4"],
        Duration::from_secs(30),
    );
    d.assert_plays(
        "a viewer redirected to the holder, which woke gate",
        75,
        110,
    );
}

/// Wake-to-first-frame against a camera that is awake: time from the viewer's DESCRIBE to
/// its first video packet, the camera asleep (TS_max 0.5 s) or live. Run with
/// `cargo test -p vigil-tests --test sleep_wake -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_wake_to_first_frame() {
    const RUNS: usize = 10;
    let src = source();
    let (node, _root) = sleeper(&src, 1, &[], 500, 1.0);
    let url = node.url("live/cam0");
    let first_frame = |url: &str| {
        runtime().block_on(async {
            let t = Instant::now();
            let mut p = play(url, PlayOptions::new(ClientTransport::Tcp))
                .await
                .expect("play");
            let video = video_track(&p);
            let pkt = next_packet_of(&mut p, video).await;
            pkt.at.duration_since(t).as_secs_f64() * 1000.0
        })
    };
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        poll_until(Duration::from_secs(10), "cam0 asleep", || {
            (asleep(&node).len() == 1).then_some(())
        });
        cold.push(first_frame(&url));
        // Awake now: a second viewer right after meets it live.
        warm.push(first_frame(&url));
    }
    let stat = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[v.len() - 1])
    };
    let (c50, cmax) = stat(&mut cold);
    let (w50, wmax) = stat(&mut warm);
    println!("wake-to-first-frame, {RUNS} runs (DESCRIBE → first video packet, TCP):");
    println!("  asleep: p50 {c50:.1} ms  max {cmax:.1} ms");
    println!("  awake:  p50 {w50:.1} ms  max {wmax:.1} ms");
}
