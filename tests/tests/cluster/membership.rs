//! Membership, election and failover, 302 placement, node ids used twice.

use crate::support::*;

/// Membership converges and `vigil ctl nodes` shows every node from any node; the three agree
/// on the scheduler (lowest priority: node 1). Live and playback DESCRIBEs are redirected:
///
/// * node 1 holds the demo camera (and records it to the shared root); a live DESCRIBE to
///   node 2 gets a 302 to node 1;
/// * a viewer plays the recording on node 3 (marked as placed); node 1's gossip view then shows
///   node 3 playing the camera near t, so the similarity policy (§A.4 step 3: B = {node 3})
///   places a request for t + 1 s on node 3 whatever the measured CPU and memory: node 1
///   answers 302 to node 3, and ffmpeg follows it and decodes with zero errors.
/// * an unknown camera gets 404 from the node asked (no redirect).
#[test]
fn membership_election_and_redirects() {
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let members = start_cluster(3, root_and_demo_on_first(root.path()));
    let [n1, n2, n3] = [&members[0].node, &members[1].node, &members[2].node];
    let ids = wait_converged(&[n1, n2, n3], Duration::from_secs(15));
    assert_ctl_nodes_lists(&[n1, n2, n3], &ids);
    let sched = wait_agreed_scheduler(&[n1, n2, n3], Duration::from_secs(10));
    assert_eq!(sched, node_id(n1), "priority 10 wins");

    // Live: node 2 does not hold the demo camera, node 1 does.
    n1.wait_live("live/demo");
    poll_until(
        Duration::from_secs(10),
        "node 2 to see node 1 holding live/demo",
        || {
            let v = nodes_view(n2)?;
            v["nodes"]
                .as_array()?
                .iter()
                .any(|x| x["id"] == node_id(n1).as_str() && x["live"].to_string().contains("demo"))
                .then_some(())
        },
    );
    let mut c = RtspConn::connect(n2.rtsp);
    let r = c.request("DESCRIBE", &n2.url("live/demo"), &[], None);
    assert_eq!(r.status.0, 302, "{}", r.reason);
    let loc = r.headers.get("Location").unwrap().to_string();
    assert!(
        loc.starts_with(&format!("rtsp://{}/live/demo", n1.rtsp)),
        "{loc}"
    );
    let mut c1 = RtspConn::connect(n1.rtsp);
    let r = c1.request("DESCRIBE", &loc, &[], None);
    assert_eq!(
        r.status.0, 200,
        "the redirect target serves it: {}",
        r.reason
    );

    // Unknown cameras: 404 from the node asked.
    let r = c.request("DESCRIBE", &n2.url("live/nosuch"), &[], None);
    assert_eq!(r.status.0, 404);
    let r = c.request(
        "DESCRIBE",
        &n1.url(&format!(
            "playback/nosuch?start={}",
            rfc3339(now_ms() - 5000)
        )),
        &[],
        None,
    );
    assert_eq!(r.status.0, 404, "{}", r.reason);

    // Playback: wait for a few seconds of recording on the shared root.
    let first_ms = vigil_tests::demo_recorded_for(n1, 5000);
    // A viewer on node 3 (placed there by hand with the marker), playing from first_ms.
    let _viewer = demo_viewer_placed_on(n3, first_ms, KEY);
    let id3 = node_id(n3);
    wait_sees_streaming(n1, &id3, Duration::from_secs(15));
    let url = vigil_tests::nearby_playback_url(n1, first_ms);
    let r = c1.request("DESCRIBE", &url, &[], None);
    assert_eq!(r.status.0, 302, "{}", r.reason);
    let loc = r.headers.get("Location").unwrap().to_string();
    assert!(
        loc.starts_with(&format!("rtsp://{}/playback/demo?start=", n3.rtsp))
            && loc.contains("&vigil_placed="),
        "{loc}"
    );
    let sched = n1.api_json("/api/cluster/scheduler");
    let d = &sched["decisions"][0];
    assert_eq!(d["node"], id3.as_str(), "{sched}");
    // Counted where the requests arrived: node 2's live DESCRIBE and node 1's playback.
    let placed = |n: &Node, kind: &str| {
        vigil_tests::metric_value(
            n,
            &format!("vigil_placement_decisions_total{{kind=\"{kind}\",result=\"redirected\"}}"),
        )
    };
    assert!(placed(n2, "live") >= 1.0 && placed(n1, "playback") >= 1.0);
    assert!(
        d["reason"].as_str().unwrap().contains("similarity FD="),
        "{sched}"
    );
    // ffmpeg asks node 1, follows the 302 to node 3 and decodes 3 s of video cleanly.
    let dec = ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &[],
        Duration::from_secs(30),
    );
    dec.assert_plays("playback redirected to node 3", 50, 110);
    let table = ctl(n1, &["scheduler"]);
    assert!(
        table.contains("302") && table.contains("similarity"),
        "{table}"
    );
}

/// kill -9 of the scheduler: the survivors agree on a new one within 3 s. A process with
/// another key gossips at the cluster but never appears in its view (its datagrams are
/// dropped and counted), nor does the cluster appear in its own.
#[test]
fn scheduler_failover_and_wrong_key() {
    let _serial = serial();
    let mut members = start_cluster(3, |_| String::new());
    {
        let [n1, n2, n3] = [&members[0].node, &members[1].node, &members[2].node];
        wait_converged(&[n1, n2, n3], Duration::from_secs(15));
        let s = wait_agreed_scheduler(&[n1, n2, n3], Duration::from_secs(10));
        assert_eq!(s, node_id(n1));
    }
    let id1 = node_id(&members[0].node);
    let id2 = node_id(&members[1].node);
    let t0 = Instant::now();
    members[0].node.kill();
    let elapsed = poll_until(Duration::from_secs(10), "a new scheduler", || {
        let a = scheduler_of(&members[1].node)?;
        let b = scheduler_of(&members[2].node)?;
        (a == id2 && b == id2).then(|| t0.elapsed())
    });
    eprintln!("new scheduler after kill -9 in {elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    let v = nodes_view(&members[1].node).unwrap();
    let old = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == id1.as_str())
        .expect("the dead node stays listed");
    assert_eq!(old["alive"], false);
    assert!(v["term"].as_u64().unwrap() >= 2, "{v}");
    // Counted for the dashboard and the VigilSchedulerChanged alert by both survivors.
    for m in &members[1..] {
        let changes = vigil_tests::metric_value(&m.node, "vigil_cluster_scheduler_changes_total");
        assert!(changes >= 1.0, "{changes} scheduler changes counted");
        assert_eq!(
            vigil_tests::metric_value(&m.node, "vigil_cluster_is_scheduler"),
            f64::from(u8::from(node_id(&m.node) == id2))
        );
        assert_eq!(
            vigil_tests::metric_value(&m.node, "vigil_cluster_has_scheduler"),
            1.0
        );
    }

    // An intruder with the wrong key, seeded with node 2.
    let ip = "127.0.0.4";
    let gossip: SocketAddr = format!("{ip}:{}", free_udp(ip)).parse().unwrap();
    let intruder = NodeBuilder::new()
        .ip(ip)
        .extra(&cluster_conf(
            gossip,
            &[members[1].gossip],
            "not-the-cluster-key-at-all",
            1,
        ))
        .start();
    let rejected = |n: &Node| nodes_view(n).and_then(|v| v["gossip"]["rejected"].as_u64());
    poll_until(
        Duration::from_secs(10),
        "node 2 to drop the intruder's gossip",
        || (rejected(&members[1].node)? >= 5).then_some(()),
    );
    let bad = node_id(&intruder);
    let seen = nodes_view(&members[1].node).unwrap();
    assert!(!seen.to_string().contains(&bad), "{seen}");
    let own = alive_ids(&intruder).unwrap();
    assert_eq!(own, vec![bad.clone()], "the intruder sees only itself");
    // Its own scheduler is itself; the cluster's is unchanged.
    assert_eq!(
        scheduler_of(&members[1].node).as_deref(),
        Some(id2.as_str())
    );
}

/// Two nodes given one `[node] id` by mistake are one node to election and placement, so
/// the cluster cannot work around it; it must say so. Every member (the two and a third)
/// lists the shared id with both gossip addresses in `/api/cluster/nodes`, `vigil ctl
/// nodes` prints a warning, the nodes log an error, and the conflict clears once one of the
/// two is gone.
#[test]
fn a_node_id_used_twice_is_reported_by_every_member_until_one_goes() {
    let _serial = serial();
    let mut members: Vec<Member> = Vec::new();
    for (i, id) in ["twin", "twin", "third"].into_iter().enumerate() {
        let ip = format!("127.0.0.{}", i + 1);
        let gossip: SocketAddr = format!("{ip}:{}", free_udp(&ip)).parse().unwrap();
        let seeds: Vec<SocketAddr> = members.first().map(|m| vec![m.gossip]).unwrap_or_default();
        let node = NodeBuilder::new()
            .ip(&ip)
            .node_id(id)
            .extra(&cluster_conf(gossip, &seeds, KEY, 10 * (i as u32 + 1)))
            .start();
        members.push(Member { node, gossip });
    }
    let want: Vec<String> = {
        let mut g = vec![members[0].gossip.to_string(), members[1].gossip.to_string()];
        g.sort();
        g
    };
    let conflicts = |n: &Node| -> Option<Vec<(String, Vec<String>)>> {
        let v = nodes_view(n)?;
        v["id_conflicts"]
            .as_array()?
            .iter()
            .map(|c| {
                let gossip = c["gossip"]
                    .as_array()?
                    .iter()
                    .map(|g| g.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()?;
                Some((c["id"].as_str()?.to_string(), gossip))
            })
            .collect()
    };
    for m in &members {
        poll_until(
            Duration::from_secs(15),
            "the shared id to be reported",
            || (conflicts(&m.node)? == vec![("twin".to_string(), want.clone())]).then_some(()),
        );
    }
    let table = ctl(&members[2].node, &["nodes"]);
    assert!(
        table.contains("WARNING: node id twin is used by 2 live nodes"),
        "{table}"
    );
    for m in &members[..2] {
        let log = m.node.log();
        assert!(log.contains("several live nodes use this node id"), "{log}");
    }
    members[1].node.kill();
    for m in [&members[0], &members[2]] {
        poll_until(Duration::from_secs(15), "the conflict to clear", || {
            conflicts(&m.node)?.is_empty().then_some(())
        });
    }
}
