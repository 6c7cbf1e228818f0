//! Fault tests on real processes: a node of a cluster is killed with SIGKILL while a viewer
//! plays a recording from another node. The viewer sees no gap, and a playback request that
//! went to the killed node (least connections) is served by the survivor within 3 s.
//!
//! Two nodes and one viewer first, then issue 10 §5's size: 200 sessions over 3 nodes, with
//! the killed node's recording checked too. The gossip partition is in `cluster_pull.rs`,
//! slow storage in `slow_storage.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil_testkit::client::{play, ClientTransport, PlayOptions};
use vigil_tests::{default_node_id, placed_by_hand, poll_until, rfc3339, RtspConn};

const KEY: &str = "test-cluster-key-faults-0123456789";

/// A viewer on its own thread: packets received, sequence gaps, and the time of the last
/// packet (ms since `epoch`).
struct Viewer {
    packets: Arc<AtomicU64>,
    gaps: Arc<AtomicU64>,
    last_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    epoch: Instant,
}

impl Viewer {
    fn start(url: String) -> Viewer {
        let v = Viewer {
            packets: Arc::default(),
            gaps: Arc::default(),
            last_ms: Arc::default(),
            stop: Arc::default(),
            epoch: Instant::now(),
        };
        let (packets, gaps, last_ms, stop, epoch) = (
            v.packets.clone(),
            v.gaps.clone(),
            v.last_ms.clone(),
            v.stop.clone(),
            v.epoch,
        );
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let mut opts = PlayOptions::new(ClientTransport::Tcp);
                opts.read_timeout = Duration::from_secs(5);
                let Ok(mut p) = play(&url, opts).await else {
                    return;
                };
                let mut prev: Vec<Option<u16>> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let Ok(Ok(Some(pkt))) =
                        tokio::time::timeout(Duration::from_secs(5), p.next_packet()).await
                    else {
                        return;
                    };
                    if prev.len() <= pkt.track {
                        prev.resize(pkt.track + 1, None);
                    }
                    let seq = pkt.header.sequence;
                    if prev[pkt.track].is_some_and(|q| q.wrapping_add(1) != seq) {
                        gaps.fetch_add(1, Ordering::Relaxed);
                    }
                    prev[pkt.track] = Some(seq);
                    packets.fetch_add(1, Ordering::Relaxed);
                    last_ms.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
            });
        });
        v
    }

    /// How long since the last packet.
    fn silent_for(&self) -> Duration {
        let now = self.epoch.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn kill_9_of_a_node_leaves_other_viewers_whole_and_requests_served() {
    let (_root, mut n1, n2) = vigil_tests::two_node_cluster(KEY, "policy = \"least-connections\"");
    let first_ms = vigil_tests::demo_recorded_for(&n2, 8000);
    poll_until(
        Duration::from_secs(20),
        "both nodes alive in node 2's view",
        || {
            let v = n2.api_json("/api/cluster/nodes");
            let nodes = v["nodes"].as_array()?;
            (nodes.len() == 2 && nodes.iter().all(|m| m["alive"] == true)).then_some(())
        },
    );
    // A viewer of the recording on node 2 (placed there by hand).
    let url = format!("{}?start={}", n2.url("playback/demo"), rfc3339(first_ms));
    let viewer = Viewer::start(placed_by_hand(&url, KEY));
    poll_until(Duration::from_secs(10), "the viewer to play", || {
        (viewer.packets.load(Ordering::Relaxed) > 50).then_some(())
    });

    // Least connections: with the viewer on node 2, a new request goes to node 1.
    let later = format!(
        "{}?start={}",
        n2.url("playback/demo"),
        rfc3339(first_ms + 4000)
    );
    poll_until(
        Duration::from_secs(10),
        "node 2 to send a request to node 1",
        || {
            let r = RtspConn::connect(n2.rtsp).request("DESCRIBE", &later, &[], None);
            let to_n1 = r
                .headers
                .get("Location")
                .is_some_and(|l| l.contains("127.0.0.1:"));
            (r.status.0 == 302 && to_n1).then_some(())
        },
    );
    // Placements reserve load for 2 s: let the ones above lapse, so that what follows
    // depends on the kill alone.
    poll_until(Duration::from_secs(5), "the reservations to lapse", || {
        let v = n2.api_json("/api/cluster/nodes");
        v["nodes"]
            .as_array()?
            .iter()
            .all(|m| m["reserved"] == 0)
            .then_some(())
    });

    n1.kill();
    let killed = Instant::now();
    // Node 2 sees node 1 dead, and the same request is then served there.
    let id1 = default_node_id(&n1.ip, n1.rtsp.port());
    poll_until(Duration::from_secs(10), "node 2 to see node 1 dead", || {
        let v = n2.api_json("/api/cluster/nodes");
        v["nodes"]
            .as_array()?
            .iter()
            .any(|m| m["id"] == id1.as_str() && m["alive"] == false)
            .then_some(())
    });
    let r = RtspConn::connect(n2.rtsp).request("DESCRIBE", &later, &[], None);
    assert_eq!(
        r.status.0,
        200,
        "after the kill: {} {:?}",
        r.reason,
        r.headers.get("Location")
    );
    let served_after = killed.elapsed();
    eprintln!("served {served_after:?} after kill -9");
    assert!(
        served_after <= Duration::from_secs(3),
        "served only {served_after:?} after the kill"
    );
    // The viewer on node 2 went on playing throughout, without a gap.
    poll_until(
        Duration::from_secs(5),
        "3 s of viewing past the kill",
        || (killed.elapsed() >= Duration::from_secs(3)).then_some(()),
    );
    assert!(
        viewer.silent_for() < Duration::from_secs(1),
        "viewer stalled {:?}",
        viewer.silent_for()
    );
    assert_eq!(
        viewer.gaps.load(Ordering::Relaxed),
        0,
        "the viewer saw a sequence gap"
    );
}

/// Issue 10 §5 at size: 200 playback sessions over three nodes (placed by hand, a third on
/// each), node 1 also recording the demo camera with 1 s segments. Node 1 is killed with
/// SIGKILL: every viewer on nodes 2 and 3 keeps playing without a sequence gap or a stall,
/// a new request is served within 3 s, and node 1's recording loses at most its open segment.
#[test]
fn kill_9_under_200_sessions_over_three_nodes() {
    const SESSIONS: usize = 200;
    let mut c = vigil_tests::secure_cluster::start(3, "", |_| {
        "[limits]\nmax_sessions = 1000\nmax_sessions_per_address = 1000\nmax_connections_per_address = 1000\n".into()
    });
    // Ten seconds recorded, and the viewers start at its beginning: at 1× they never catch up
    // with the recording's end, so none of them runs out while the test watches.
    let first = c.recorded_for(10_000);
    let viewers: Vec<(usize, Viewer)> = (0..SESSIONS)
        .map(|k| {
            let i = k % 3;
            let url = format!(
                "{}?start={}",
                c.node(i).url("playback/demo"),
                rfc3339(first + 20 * (k as i64 / 3))
            );
            (i, Viewer::start(vigil_tests::secure_cluster::placed(&url)))
        })
        .collect();
    poll_until(Duration::from_secs(60), "all 200 viewers playing", || {
        viewers
            .iter()
            .all(|(_, v)| v.packets.load(Ordering::Relaxed) > 0)
            .then_some(())
    });

    c.members[0].node.kill();
    let killed = Instant::now();
    let kill_ms = vigil_storage::now_ms();
    // A new request through node 2 is served (by node 2 or 3) once node 1 is seen dead.
    let later = format!(
        "{}?start={}",
        c.node(1).url("playback/demo"),
        rfc3339(first + 5000)
    );
    let rt = vigil_tests::secure_cluster::runtime();
    let served = poll_until(Duration::from_secs(15), "a new request served", || {
        let mut opts = PlayOptions::new(ClientTransport::Tcp);
        opts.read_timeout = Duration::from_secs(2);
        rt.block_on(async {
            let mut p = play(&later, opts).await.ok()?;
            tokio::time::timeout(Duration::from_secs(2), p.next_packet())
                .await
                .ok()?
                .ok()?
        })
        .map(|_| killed.elapsed())
    });
    eprintln!("a new request was served {served:?} after kill -9");
    assert!(
        served <= Duration::from_secs(3),
        "served only {served:?} after the kill"
    );

    // Viewers on the survivors played on through the kill.
    poll_until(
        Duration::from_secs(10),
        "3 s of viewing past the kill",
        || (killed.elapsed() >= Duration::from_secs(3)).then_some(()),
    );
    for (k, (i, v)) in viewers.iter().enumerate().filter(|(_, (i, _))| *i != 0) {
        assert_eq!(
            v.gaps.load(Ordering::Relaxed),
            0,
            "viewer {k} on node {}: sequence gap",
            i + 1
        );
        assert!(
            v.silent_for() < Duration::from_secs(1),
            "viewer {k} on node {} stalled {:?}",
            i + 1,
            v.silent_for()
        );
    }
    // Node 1's recording, as node 2 reads the shared root: everything but the open segment.
    let v = c.node(1).api_json("/api/recordings/demo");
    let end = v["ranges"]
        .as_array()
        .and_then(|r| r.iter().filter_map(|x| x["end_ms"].as_i64()).max())
        .expect("recorded ranges");
    eprintln!("recording ends {} ms before the kill", kill_ms - end);
    assert!(
        kill_ms - end <= 2000,
        "the recording lost {} ms before the kill (1 s segments)",
        kill_ms - end
    );
}
