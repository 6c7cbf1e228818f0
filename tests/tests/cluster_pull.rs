//! Pull cameras in a cluster (issue 4 §6, §B): the scheduler binds each pull camera to one
//! live node (§B.2 load, §B.4 roulette); only that node pulls and records it, and when it
//! dies the camera is re-bound and pulled (and recorded, on the shared root) by another node
//! within 5 s. An upstream vigil (cluster off, demo camera) on 127.0.0.9 is the IP camera;
//! three cluster nodes on 127.0.0.1–3 share one storage root. Every wait polls with a
//! deadline.

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use vigil_tests::free_udp;
use vigil_tests::{poll_until, Node, NodeBuilder, DEMO_CAMERA};

const KEY: &str = "test-cluster-key-0123456789";
const CAM: &str = "live/cam";

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn play_sessions(node: &Node) -> usize {
    node.try_api("/api/sessions")
        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|s| s["kind"] == "play")
        .count()
}

fn is_live(node: &Node) -> bool {
    node.try_api("/api/paths")
        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
        .and_then(|v| {
            v.as_array()?
                .iter()
                .find(|p| p["path"] == CAM)
                .map(|p| p["live"] == true)
        })
        .unwrap_or(false)
}

/// End (ms) of the newest recorded range of `cam` as `node` sees the shared root.
fn recorded_until(node: &Node) -> Option<i64> {
    let v: serde_json::Value = serde_json::from_str(&node.try_api("/api/recordings/cam")?).ok()?;
    v["ranges"]
        .as_array()?
        .iter()
        .filter_map(|r| r["end_ms"].as_i64())
        .max()
}

#[test]
fn pull_camera_is_bound_to_one_node_and_rebound_when_it_dies() {
    let upstream = NodeBuilder::new()
        .ip("127.0.0.9")
        .extra(DEMO_CAMERA)
        .start();
    upstream.wait_live("live/demo");
    let root = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = Vec::new();
    let mut seed: Option<SocketAddr> = None;
    for i in 0..3u32 {
        let ip = format!("127.0.0.{}", i + 1);
        let gossip: SocketAddr = format!("{ip}:{}", free_udp(&ip)).parse().unwrap();
        let seeds = seed.map(|s| format!("\"{s}\"")).unwrap_or_default();
        let node = NodeBuilder::new()
            .ip(&ip)
            .extra(&format!(
                "[cluster]\nenabled = true\ngossip_listen = \"{gossip}\"\nseeds = [{seeds}]\n\
                 key = \"{KEY}\"\npriority = {}\n\n\
                 [storage]\nroot = \"{}\"\nsegment_secs = 1.0\nlease_ttl_secs = 2.0\n\n\
                 [live]\nreconnect_min_ms = 100\nreconnect_max_ms = 400\n\n\
                 [[camera]]\nid = \"cam\"\nsource = \"{}\"\non_demand = false",
                10 * (i + 1),
                root.path().display(),
                upstream.url("live/demo"),
            ))
            .start();
        seed.get_or_insert(gossip);
        nodes.push(node);
    }

    // Exactly one node pulls it: one holder live, one session on the camera.
    let holder = poll_until(Duration::from_secs(30), "one node to pull cam", || {
        let live: Vec<usize> = (0..3).filter(|&i| is_live(&nodes[i])).collect();
        (live.len() == 1 && play_sessions(&upstream) == 1).then(|| live[0])
    });
    eprintln!("cam bound to node {} (127.0.0.{})", holder + 1, holder + 1);
    // It records on the shared root.
    let other = (holder + 1) % 3;
    poll_until(Duration::from_secs(20), "cam recorded", || {
        recorded_until(&nodes[other]).filter(|&e| e > 0)
    });

    // kill -9 the holder: another node has it live within 5 s.
    nodes[holder].kill();
    let kill_ms = now_ms();
    let t0 = Instant::now();
    let new_holder = poll_until(Duration::from_secs(5), "cam re-bound and live", || {
        (0..3)
            .filter(|&i| i != holder)
            .find(|&i| is_live(&nodes[i]))
    });
    let rebind = t0.elapsed();
    eprintln!(
        "cam live again on node {} {rebind:?} after kill -9 of node {}",
        new_holder + 1,
        holder + 1
    );
    assert!(rebind < Duration::from_secs(5));
    let survivors: Vec<usize> = (0..3).filter(|&i| i != holder).collect();
    let live: Vec<usize> = survivors
        .iter()
        .copied()
        .filter(|&i| is_live(&nodes[i]))
        .collect();
    assert_eq!(live, vec![new_holder], "only the new holder pulls cam");

    // The recording goes on: segments written after the kill, seen from every survivor.
    for &i in &survivors {
        let until = poll_until(
            Duration::from_secs(15),
            "cam recorded after the kill",
            || recorded_until(&nodes[i]).filter(|&e| e > kill_ms + 1000),
        );
        eprintln!(
            "node {}: cam recorded until {} ms after the kill",
            i + 1,
            until - kill_ms
        );
    }
    poll_until(
        Duration::from_secs(10),
        "one pull session on the camera",
        || (play_sessions(&upstream) == 1).then_some(()),
    );
}
