//! The §D.2 planner in the running scheduler (issue 11 §4): real nodes on 127.0.0.1–3 with
//! cluster certificates; every wait polls a deadline.

use std::time::Duration;

use vigil_tests::secure_cluster::{self, assert_one_stream, placed, spawn_viewer};
use vigil_tests::{ctl, poll_until, rfc3339, spawn_ffmpeg_decode};

/// Cap 5 streams per node; Δt and the predicted period 30 s, planning every 500 ms; REM off
/// so that only the planner moves sessions; live edges off, so that a live camera's viewers
/// can only be served by its holder.
const PLANNER_KEYS: &str = "[cluster.migration]\nrem = false\n[cluster.edge]\nenabled = false\n\
    [cluster.planner]\nperiod_ms = 500\nwindow_ms = 30000\nhorizon_ms = 30000\nnode_cap = 5\n";

/// Node 1 holds the demo camera live and plays three recordings of it; two live viewers
/// arrive there. Node 1 is then full (5 of 5) and the 5 arrivals of the window predict, by
/// hand: Poisson(5) median 5, Zipf through (1, 3), (2, 2) → 3 playbacks and 2 live viewers.
/// Live viewers can only be served by the holder: eq. 1 leaves 2 unserved, and the fewest
/// moves (eq. 2) are 2 playbacks off node 1. They move while their viewers keep one
/// continuous stream, and the live viewers decode without an error.
#[test]
fn planner_moves_playbacks_off_the_holder_of_a_live_camera_in_demand() {
    let c = secure_cluster::start(3, PLANNER_KEYS, |_| String::new());
    let first = c.recorded_for(20_000);
    let n1 = c.node(0);
    let viewers: Vec<_> = (0..3)
        .map(|k| {
            let url = placed(&format!(
                "{}?start={}&end={}",
                n1.url("playback/demo"),
                rfc3339(first + 1000 * k),
                rfc3339(first + 20_000)
            ));
            spawn_viewer(url, None)
        })
        .collect();
    let playing = |n: &vigil_tests::Node, kind: &str| {
        n.api_json("/api/sessions")
            .as_array()
            .map_or(0, |v| v.iter().filter(|s| s["kind"] == kind).count())
    };
    poll_until(Duration::from_secs(10), "three playbacks on node 1", || {
        (playing(n1, "playback") == 3).then_some(())
    });
    let live: Vec<_> = (0..2)
        .map(|_| {
            spawn_ffmpeg_decode(
                &n1.url("live/demo"),
                &["-rtsp_transport", "tcp"],
                &["-t", "12"],
                Duration::from_secs(40),
            )
        })
        .collect();
    let plan = poll_until(
        Duration::from_secs(20),
        "a plan whose moves are done",
        || {
            let v = n1.api_json("/api/cluster/plan");
            let p = v["last_moves"].clone();
            let moves = p["moves"].as_array()?;
            moves
                .iter()
                .all(|m| m["result"].as_str().is_some_and(|r| r != "pending"))
                .then_some(p)
        },
    );
    assert_eq!(plan["method"], "optimal", "{plan}");
    assert_eq!(plan["unmet_before"], 2, "{plan}");
    assert_eq!(plan["unmet"], 0, "{plan}");
    assert_eq!(plan["objective"], 2, "{plan}");
    assert_eq!(plan["prediction"]["total"], 5, "{plan}");
    assert_eq!(plan["prediction"]["requests"]["live/demo"], 2, "{plan}");
    assert_eq!(plan["prediction"]["requests"]["playback/demo"], 3, "{plan}");
    let moves = plan["moves"].as_array().unwrap();
    assert_eq!(moves.len(), 2, "{plan}");
    for m in moves {
        assert_eq!(m["content"], "playback/demo", "{m}");
        assert_eq!(m["from"], c.members[0].id.as_str(), "{m}");
        assert_ne!(m["to"], c.members[0].id.as_str(), "{m}");
        assert!(m["result"].as_str().unwrap().starts_with("moved"), "{m}");
    }
    // The moved playbacks are sent by nodes 2 and 3 now.
    poll_until(
        Duration::from_secs(5),
        "two playbacks hosted off node 1",
        || {
            let hosted = |n: &vigil_tests::Node| {
                n.api_json("/api/sessions").as_array().map_or(0, |v| {
                    v.iter().filter(|s| s["steered_by"].is_string()).count()
                })
            };
            (hosted(c.node(1)) + hosted(c.node(2)) == 2).then_some(())
        },
    );
    let out = ctl(n1, &["plan"]);
    assert!(out.contains("objective 2 moved"), "{out}");
    assert!(out.contains("playback/demo"), "{out}");
    for (seen, h) in viewers {
        h.join().expect("viewer");
        assert_one_stream(&seen.lock().unwrap(), "a playback moved by the planner");
    }
    for h in live {
        h.join()
            .expect("ffmpeg")
            .assert_plays("a live viewer on the holder", 250, 330);
    }
}
