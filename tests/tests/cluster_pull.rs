//! Pull cameras in a cluster (issue 4 §6, §B): the scheduler binds each pull camera to one
//! live node (§B.2 load, §B.4 roulette); only that node pulls and records it, and when it
//! dies the camera is re-bound and pulled (and recorded, on the shared root) by another node
//! within 5 s. An upstream vigil (cluster off, demo camera) on 127.0.0.9 is the IP camera;
//! three cluster nodes on 127.0.0.1–3 share one storage root. Every wait polls with a
//! deadline.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use vigil_tests::free_udp;
use vigil_tests::{poll_until, Node, NodeBuilder, DEMO_CAMERA};

const KEY: &str = "test-cluster-key-0123456789";
const CAM: &str = "live/cam";

use vigil_storage::now_ms;

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

/// The IP camera: a vigil (cluster off) on 127.0.0.9 serving the demo camera.
fn upstream_camera() -> Node {
    let upstream = NodeBuilder::new()
        .ip("127.0.0.9")
        .extra(DEMO_CAMERA)
        .start();
    upstream.wait_live("live/demo");
    upstream
}

/// Three cluster nodes on 127.0.0.1–3 sharing `root`, each configured with the pull camera
/// `cam` (always on) from `upstream`; `env(i)` adds environment variables to node i.
fn pull_cluster(
    upstream: &Node,
    root: &std::path::Path,
    env: impl Fn(usize) -> Vec<(String, String)>,
) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    let mut seed: Option<SocketAddr> = None;
    for i in 0..3usize {
        let ip = format!("127.0.0.{}", i + 1);
        let gossip: SocketAddr = format!("{ip}:{}", free_udp(&ip)).parse().unwrap();
        let seeds = seed.map(|s| format!("\"{s}\"")).unwrap_or_default();
        let mut b = NodeBuilder::new().ip(&ip).extra(&format!(
            "[cluster]\nenabled = true\ngossip_listen = \"{gossip}\"\nseeds = [{seeds}]\n\
             key = \"{KEY}\"\npriority = {}\n\n\
             [storage]\nroot = \"{}\"\nsegment_secs = 1.0\nlease_ttl_secs = 2.0\n\n\
             [live]\nreconnect_min_ms = 100\nreconnect_max_ms = 400\n\n\
             [[camera]]\nid = \"cam\"\nsource = \"{}\"\non_demand = false",
            10 * (i + 1),
            root.display(),
            upstream.url("live/demo"),
        ));
        for (k, v) in env(i) {
            b = b.env(&k, &v);
        }
        nodes.push(b.start());
        seed.get_or_insert(gossip);
    }
    nodes
}

#[test]
fn pull_camera_is_bound_to_one_node_and_rebound_when_it_dies() {
    let upstream = upstream_camera();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = pull_cluster(&upstream, root.path(), |_| Vec::new());

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

/// Milliseconds since midnight UTC of a log line's timestamp (`2026-11-30T19:49:25.923962Z`).
fn log_ms_of_day(line: &str) -> Option<i64> {
    let t = line.get(11..23)?;
    let h: i64 = t.get(0..2)?.parse().ok()?;
    let m: i64 = t.get(3..5)?.parse().ok()?;
    let s: i64 = t.get(6..8)?.parse().ok()?;
    let ms: i64 = t.get(9..12)?.parse().ok()?;
    Some(((h * 60 + m) * 60 + s) * 1000 + ms)
}

/// When `node` last changed its scheduler (ms of day), from its log.
fn last_scheduler_change(node: &Node) -> Option<i64> {
    node.log()
        .lines()
        .filter(|l| l.contains("scheduler changed"))
        .filter_map(log_ms_of_day)
        .next_back()
}

/// Issue 10 §5: the camera's node is cut off from the gossip (fault injection in the
/// transport). The others declare it dead and re-bind its camera, which stays live and
/// recorded; the cut-off node, alone, elects itself. When the partition heals it rejoins,
/// every node agrees on one scheduler again, and exactly one node pulls the camera.
#[test]
fn a_node_partitioned_from_the_gossip_loses_its_camera_and_rejoins_when_it_heals() {
    use vigil_tests::{alive_ids, node_id, scheduler_of};
    let upstream = upstream_camera();
    let root = tempfile::tempdir().unwrap();
    let faults = tempfile::tempdir().unwrap();
    let fault = |i: usize| faults.path().join(format!("partition-{i}"));
    let nodes = pull_cluster(&upstream, root.path(), |i| {
        vec![(
            "VIGIL_FAULT_GOSSIP_PARTITION".to_string(),
            fault(i).display().to_string(),
        )]
    });
    let ids: Vec<String> = nodes.iter().map(node_id).collect();
    let p = poll_until(Duration::from_secs(30), "one node to pull cam", || {
        let live: Vec<usize> = (0..3).filter(|&i| is_live(&nodes[i])).collect();
        (live.len() == 1 && play_sessions(&upstream) == 1).then(|| live[0])
    });
    let others: Vec<usize> = (0..3).filter(|&i| i != p).collect();

    // Partition the camera's node.
    std::fs::write(fault(p), b"").unwrap();
    let cut_ms = now_ms();
    for &i in &others {
        poll_until(
            Duration::from_secs(15),
            "the others to declare it dead",
            || (!alive_ids(&nodes[i])?.contains(&ids[p])).then_some(()),
        );
    }
    let q = poll_until(
        Duration::from_secs(15),
        "cam re-bound to a connected node",
        || others.iter().copied().find(|&i| is_live(&nodes[i])),
    );
    // Alone, the cut-off node is its own scheduler: two schedulers while the split lasts.
    poll_until(
        Duration::from_secs(15),
        "the cut-off node to elect itself",
        || (scheduler_of(&nodes[p])? == ids[p]).then_some(()),
    );
    // The recording goes on on the shared root, from the connected side.
    poll_until(
        Duration::from_secs(15),
        "cam recorded during the partition",
        || recorded_until(&nodes[q]).filter(|&e| e > cut_ms + 1000),
    );

    // Heal.
    std::fs::remove_file(fault(p)).unwrap();
    let heal_ms = now_ms();
    let expected = ids[0].clone(); // the lowest priority value
    for n in &nodes {
        poll_until(
            Duration::from_secs(20),
            "one scheduler for all after the heal",
            || (alive_ids(n)?.len() == 3 && scheduler_of(n)? == expected).then_some(()),
        );
    }
    // How long two schedulers acted at once after the heal: until the last node changed
    // its mind, from the nodes' own logs (same clock).
    let day = 86_400_000;
    let settled = nodes
        .iter()
        .filter_map(last_scheduler_change)
        .map(|t| (t - heal_ms % day).rem_euclid(day))
        .filter(|&d| d < 60_000)
        .max()
        .unwrap_or(0);
    eprintln!("schedulers agreed {settled} ms after the heal");
    assert!(
        settled < 5_000,
        "two schedulers for {settled} ms after the heal"
    );
    // One puller again, and the recording continues.
    poll_until(
        Duration::from_secs(20),
        "exactly one node pulling cam",
        || {
            let live = (0..3).filter(|&i| is_live(&nodes[i])).count();
            (live == 1 && play_sessions(&upstream) == 1).then_some(())
        },
    );
    poll_until(
        Duration::from_secs(15),
        "cam recorded after the heal",
        || recorded_until(&nodes[0]).filter(|&e| e > heal_ms + 1000),
    );
}
