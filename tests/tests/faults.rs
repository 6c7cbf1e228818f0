//! Fault tests on real processes: a node of a cluster is killed with SIGKILL while a viewer
//! plays a recording from another node. The viewer sees no gap, and a playback request that
//! went to the killed node (least connections) is served by the survivor within 3 s.
//!
//! Two nodes and one viewer, not the 200 sessions over 3 nodes of issue 10 §5 (the machine
//! has two cores shared with other builds). The gossip partition is in `cluster_pull.rs`,
//! slow storage in `slow_storage.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil_server::client::{play, ClientTransport, PlayOptions};
use vigil_tests::{placed_by_hand, poll_until, rfc3339, RtspConn};

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
    let id1 = format!("test-{}", n1.rtsp.port());
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
