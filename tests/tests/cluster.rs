//! The cluster (issue 4, first increment): gossip membership with an authenticated transport,
//! scheduler election and failover, placement of DESCRIBEs by 302. Real `vigil` processes on
//! 127.0.0.1/.2/.3; every wait polls for an event with a deadline.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use vigil_tests::placed_by_hand;
use vigil_tests::{alive_ids, free_udp, node_id, nodes_view, rfc3339, scheduler_of};
use vigil_tests::{ctl, serial};
use vigil_tests::{
    ffmpeg_decode, ffmpeg_decode_cmd, gst_decode_h264, poll_until, spawn_background, Node,
    NodeBuilder, RtspConn, DEMO_CAMERA,
};

const KEY: &str = "test-cluster-key-0123456789";

/// The `[cluster]` table of a member.
fn cluster_conf(gossip: SocketAddr, seeds: &[SocketAddr], key: &str, priority: u32) -> String {
    let seeds: Vec<String> = seeds.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "[cluster]\nenabled = true\ngossip_listen = \"{gossip}\"\nseeds = [{}]\nkey = \"{key}\"\npriority = {priority}\n",
        seeds.join(", ")
    )
}

fn storage(root: &Path) -> String {
    format!(
        "[storage]\nroot = \"{}\"\nsegment_secs = 1.0",
        root.display()
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

struct Member {
    node: Node,
    gossip: SocketAddr,
}

/// Starts members on 127.0.0.1.., the first being the seed of the others.
fn start_cluster(n: usize, extra: impl Fn(usize) -> String) -> Vec<Member> {
    start_cluster_with(n, |_| String::new(), extra)
}

/// As [`start_cluster`], with extra keys for member i's `[cluster]` table.
fn start_cluster_with(
    n: usize,
    cluster_extra: impl Fn(usize) -> String,
    extra: impl Fn(usize) -> String,
) -> Vec<Member> {
    let mut out: Vec<Member> = Vec::new();
    for i in 0..n {
        let ip = format!("127.0.0.{}", i + 1);
        let gossip: SocketAddr = format!("{ip}:{}", free_udp(&ip)).parse().unwrap();
        let seeds: Vec<SocketAddr> = out.first().map(|m| vec![m.gossip]).unwrap_or_default();
        let node = NodeBuilder::new()
            .ip(&ip)
            .extra(&cluster_conf(gossip, &seeds, KEY, 10 * (i as u32 + 1)))
            .extra(&cluster_extra(i))
            .extra(&extra(i))
            .start();
        out.push(Member { node, gossip });
    }
    out
}

fn wait_converged(members: &[&Node], timeout: Duration) -> Vec<String> {
    let mut want: Vec<String> = members.iter().map(|n| node_id(n)).collect();
    want.sort();
    for n in members {
        poll_until(timeout, "membership to converge", || {
            (alive_ids(n)? == want).then_some(())
        });
    }
    want
}

fn wait_agreed_scheduler(members: &[&Node], timeout: Duration) -> String {
    poll_until(timeout, "one scheduler agreed by all", || {
        let s: Vec<Option<String>> = members.iter().map(|n| scheduler_of(n)).collect();
        let first = s[0].clone()?;
        s.iter()
            .all(|x| x.as_deref() == Some(&first))
            .then_some(first)
    })
}

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
    let members = start_cluster(3, |i| {
        let mut s = storage(root.path());
        if i == 0 {
            s.push('\n');
            s.push_str(DEMO_CAMERA);
        }
        s
    });
    let [n1, n2, n3] = [&members[0].node, &members[1].node, &members[2].node];
    let ids = wait_converged(&[n1, n2, n3], Duration::from_secs(15));
    for n in [n1, n2, n3] {
        let table = ctl(n, &["nodes"]);
        for id in &ids {
            assert!(
                table.contains(id.as_str()),
                "ctl nodes on {}: {table}",
                n.api
            );
        }
    }
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
    let on3 = placed_by_hand(
        &format!("{}?start={}", n3.url("playback/demo"), rfc3339(first_ms)),
        KEY,
    );
    let _viewer = spawn_background(&mut ffmpeg_decode_cmd(
        &on3,
        &["-rtsp_transport", "tcp"],
        &[],
    ));
    let id3 = node_id(n3);
    poll_until(
        Duration::from_secs(15),
        "node 1 to see node 3 playing demo",
        || {
            let v = nodes_view(n1)?;
            v["nodes"]
                .as_array()?
                .iter()
                .any(|x| x["id"] == id3.as_str() && x["streams"].as_u64() >= Some(1))
                .then_some(())
        },
    );
    let url = format!(
        "{}?start={}&end={}",
        n1.url("playback/demo"),
        rfc3339(first_ms + 1000),
        rfc3339(first_ms + 4000)
    );
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

/// Benchmark (run by hand): `cargo test -p vigil-tests --test cluster -- --ignored --nocapture`.
/// Re-election time after kill -9 over 10 trials, gossip bytes per node per second, and the
/// DESCRIBE-with-redirect overhead against a direct DESCRIBE.
#[test]
#[ignore]
fn bench_cluster() {
    let _serial = serial();
    let mut times = Vec::new();
    let mut members = start_cluster(3, |i| {
        if i == 0 {
            DEMO_CAMERA.to_string()
        } else {
            String::new()
        }
    });
    {
        // DESCRIBE overhead: direct to the holder (new connection each, as a client that
        // follows a redirect opens one) against node 2 → 302 → node 1.
        let refs: Vec<&Node> = members.iter().map(|m| &m.node).collect();
        wait_converged(&refs, Duration::from_secs(20));
        let (n1, n2) = (refs[0], refs[1]);
        n1.wait_live("live/demo");
        poll_until(Duration::from_secs(10), "node 2 to see live/demo", || {
            nodes_view(n2)?
                .to_string()
                .contains("\"demo\"")
                .then_some(())
        });
        let median = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let mut direct = Vec::new();
        let mut redirected = Vec::new();
        for _ in 0..50 {
            let t = Instant::now();
            let mut c = RtspConn::connect(n1.rtsp);
            assert_eq!(
                c.request("DESCRIBE", &n1.url("live/demo"), &[], None)
                    .status
                    .0,
                200
            );
            direct.push(t.elapsed());
            let t = Instant::now();
            let mut c = RtspConn::connect(n2.rtsp);
            let r = c.request("DESCRIBE", &n2.url("live/demo"), &[], None);
            assert_eq!(r.status.0, 302);
            let loc = r.headers.get("Location").unwrap().to_string();
            let mut c = RtspConn::connect(n1.rtsp);
            assert_eq!(c.request("DESCRIBE", &loc, &[], None).status.0, 200);
            redirected.push(t.elapsed());
        }
        eprintln!(
            "DESCRIBE median: direct {:?}, with redirect {:?}",
            median(direct),
            median(redirected)
        );
    }
    for trial in 0..10 {
        let refs: Vec<&Node> = members.iter().map(|m| &m.node).collect();
        wait_converged(&refs, Duration::from_secs(20));
        // Wait until the restarted node 1 (priority 10) is past its grace and in charge
        // again, so every trial measures failure detection, not a hand-over in progress.
        let want = node_id(refs[0]);
        let sched = poll_until(Duration::from_secs(15), "node 1 in charge", || {
            let s = wait_agreed_scheduler(&refs, Duration::from_secs(10));
            (s == want).then_some(s)
        });
        let k = members
            .iter()
            .position(|m| node_id(&m.node) == sched)
            .unwrap();
        if trial == 0 {
            // Gossip volume over 10 s of a steady 3-node cluster.
            let sent = |n: &Node| {
                nodes_view(n).unwrap()["gossip"]["bytes_sent"]
                    .as_u64()
                    .unwrap()
            };
            let before: Vec<u64> = refs.iter().map(|n| sent(n)).collect();
            let t = Instant::now();
            std::thread::sleep(Duration::from_secs(10));
            let secs = t.elapsed().as_secs_f64();
            for (n, b) in refs.iter().zip(before) {
                eprintln!(
                    "gossip: {} sends {:.0} B/s",
                    node_id(n),
                    (sent(n) - b) as f64 / secs
                );
            }
        }
        let t0 = Instant::now();
        members[k].node.kill();
        let others: Vec<usize> = (0..members.len()).filter(|&i| i != k).collect();
        let e = poll_until(Duration::from_secs(10), "re-election", || {
            let s: Vec<Option<String>> = others
                .iter()
                .map(|&i| scheduler_of(&members[i].node))
                .collect();
            (s.iter()
                .all(|x| x.is_some() && x != &Some(sched.clone()) && *x == s[0]))
            .then(|| t0.elapsed())
        });
        eprintln!("trial {trial}: new scheduler in {e:?}");
        times.push(e);
        members[k].node.restart();
    }
    times.sort();
    eprintln!(
        "re-election after kill -9: p50 {:?}, max {:?}",
        times[times.len() / 2],
        times[times.len() - 1]
    );
}

/// Status and body of an admin API GET, whatever the status.
fn api_status(n: &Node, path: &str) -> (u16, String) {
    let mut resp = ureq::get(&format!("http://{}{path}", n.api))
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
        |i| {
            let mut s = storage(root.path());
            if i == 0 {
                s.push('\n');
                s.push_str(DEMO_CAMERA);
            }
            s
        },
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
    let on3 = placed_by_hand(
        &format!("{}?start={}", n3.url("playback/demo"), rfc3339(first_ms)),
        KEY,
    );
    let _viewer = spawn_background(&mut ffmpeg_decode_cmd(
        &on3,
        &["-rtsp_transport", "tcp"],
        &[],
    ));
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
    poll_until(
        Duration::from_secs(15),
        "node 1 to see node 3 playing demo",
        || {
            let v = nodes_view(n1)?;
            v["nodes"]
                .as_array()?
                .iter()
                .any(|x| x["id"] == id3.as_str() && x["streams"].as_u64() >= Some(1))
                .then_some(())
        },
    );

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
