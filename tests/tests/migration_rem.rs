//! The running scheduler's §A.5 REM and `vigil ctl drain` (issue 7 §2, §3): real nodes on
//! 127.0.0.1–3 with cluster certificates; viewers over UDP; every wait polls a deadline.

use std::time::Duration;

use vigil_tests::secure_cluster::{self, assert_one_stream, playback_session};
use vigil_tests::{
    ctl, poll_until, rfc3339, serial, spawn_ffmpeg_decode, Node, NodeBuilder, DEMO_CAMERA,
};

/// Sessions of `n` hosted for another node.
fn hosted(n: &Node) -> usize {
    n.api_json("/api/sessions").as_array().map_or(0, |v| {
        v.iter().filter(|s| s["steered_by"].is_string()).count()
    })
}

/// Three sessions on node 2 go to Scale 3: node 2's load passes σ and Load_max (the test's
/// thresholds make 1× light and 3× overloaded), so the scheduler (node 1) moves streams off
/// to the low nodes, each decision in its API with σ, p and the result; every viewer keeps
/// one continuous stream.
#[test]
fn rem_moves_streams_off_a_node_pushed_past_sigma_by_scale() {
    let _serial = serial();
    // Thresholds under which three playbacks are light at 1× and overloaded at 3× (REM_KEYS).
    let (c, viewers) = secure_cluster::rem_scenario();
    let n2 = c.node(1);
    let moved = secure_cluster::rem_moves(&c, 2);
    for m in &moved {
        assert_eq!(m["node"], c.members[1].id.as_str(), "{m}");
        assert!(m["load"].as_f64() > m["sigma"].as_f64(), "{m}");
        // §A.5: p rises from 0 at Load_min (50) to P_max (1) at Load_max (60), 1 beyond; a
        // report may catch the node between the two while the viewers change Scale.
        let load = m["load"].as_f64().expect("load");
        let expected = vigil_cluster::rem_probability(
            load,
            &vigil_cluster::SchedConfig {
                load_min: 50.0,
                load_max: 60.0,
                p_max: 1.0,
                ..Default::default()
            },
        );
        let p = m["p"].as_f64().expect("p");
        assert!(
            p > 0.0 && (p - expected).abs() < 1e-9,
            "p {p} vs {expected}: {m}"
        );
        assert_ne!(m["to"], c.members[1].id.as_str(), "{m}");
        assert!(m["reason"].as_str().unwrap().contains("REM"), "{m}");
    }
    // The moved sessions play on the low nodes, steered by node 2.
    poll_until(
        Duration::from_secs(5),
        "hosted sessions on the low nodes",
        || (hosted(c.node(0)) + hosted(c.node(2)) >= 2).then_some(()),
    );
    let metric = vigil_tests::metric_value(n2, "vigil_migrations_total{result=\"moved\"}");
    assert!(metric >= 2.0, "vigil_migrations_total moved = {metric}");
    let out = ctl(c.node(0), &["scheduler"]);
    assert!(out.contains("REM migrations"), "{out}");
    for (seen, h) in viewers {
        h.join().expect("viewer");
        assert_one_stream(&seen.lock().unwrap(), "a viewer through REM");
    }
}

/// The node `n` sees holding `camera` live.
fn live_holder(n: &Node, camera: &str) -> Option<String> {
    n.api_json("/api/cluster/nodes")["nodes"]
        .as_array()?
        .iter()
        .find(|x| {
            x["alive"] == true
                && x["live"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|c| c == camera))
        })
        .and_then(|x| x["id"].as_str().map(str::to_string))
}

/// `vigil ctl drain` empties a node of its UDP playbacks and live viewers (a live viewer
/// goes where a new viewer of its camera would be served) while every viewer keeps decoding;
/// the drained node takes no placement until `undrain`; a pull camera bound to a drained
/// node is re-bound to one that is not.
#[test]
fn drain_moves_every_udp_session_off_with_viewers_decoding() {
    let _serial = serial();
    // A camera source outside the cluster, pulled by whichever node the scheduler binds.
    let source = NodeBuilder::new()
        .ip("127.0.0.4")
        .extra(DEMO_CAMERA)
        .start();
    let pull = format!(
        "[[camera]]\nid = \"gate\"\nsource = \"{}\"\non_demand = false\n",
        source.url("live/demo")
    );
    let c = secure_cluster::start(3, "", |_| pull.clone());
    let first = c.recorded_for(14_000);
    let n2 = c.node(1);
    let url = |k: i64| {
        secure_cluster::placed(&format!(
            "{}?start={}&end={}",
            n2.url("playback/demo"),
            rfc3339(first + 1000 * k),
            rfc3339(first + 1000 * k + 10_000)
        ))
    };
    let viewers: Vec<_> = (0..3)
        .map(|k| {
            spawn_ffmpeg_decode(
                &url(k),
                &["-rtsp_transport", "udp"],
                &[],
                Duration::from_secs(40),
            )
        })
        .collect();
    // A live viewer of the demo camera (held by node 1) served by node 2 as an edge.
    let live = spawn_ffmpeg_decode(
        &secure_cluster::placed(&n2.url("live/demo")),
        &["-rtsp_transport", "udp"],
        &["-t", "10"],
        Duration::from_secs(40),
    );
    poll_until(Duration::from_secs(10), "four sessions on node 2", || {
        (n2.api_json("/api/sessions").as_array()?.len() == 4).then_some(())
    });
    playback_session(n2);
    secure_cluster::live_session(n2);
    let out = ctl(c.node(0), &["drain", &c.members[1].id]);
    assert!(
        out.contains("4 of 4 sessions moved, 0 could not move"),
        "{out}"
    );
    assert_eq!(hosted(c.node(0)) + hosted(c.node(2)), 4, "{out}");
    // Drained: node 2's report says so, and no placement goes there.
    poll_until(Duration::from_secs(5), "node 2 out of placement", || {
        let v = c.node(0).api_json("/api/cluster/nodes");
        v["nodes"]
            .as_array()?
            .iter()
            .any(|n| n["id"] == c.members[1].id.as_str() && n["draining"] == true)
            .then_some(())
    });
    for v in viewers {
        v.join()
            .expect("ffmpeg")
            .assert_plays("viewer through a drain", 249, 251);
    }
    live.join()
        .expect("ffmpeg")
        .assert_plays("live viewer through a drain", 249, 251);
    // The pull camera: drain its holder too if it is not node 2; it ends up on the one
    // node left.
    let holder = poll_until(Duration::from_secs(15), "the pull camera live", || {
        live_holder(c.node(0), "gate")
    });
    if holder != c.members[1].id {
        ctl(c.node(0), &["drain", &holder]);
    }
    let left: Vec<&str> = c
        .members
        .iter()
        .map(|m| m.id.as_str())
        .filter(|id| *id != holder && *id != c.members[1].id)
        .collect();
    poll_until(
        Duration::from_secs(15),
        "the camera re-bound off the drained nodes",
        || {
            let h = live_holder(c.node(0), "gate")?;
            left.contains(&h.as_str()).then_some(())
        },
    );
    let out = ctl(c.node(0), &["undrain", &c.members[1].id]);
    assert!(out.contains("takes placements again"), "{out}");
}
