//! Node-to-node calls over QUIC with mutual TLS from a cluster CA (issue 4 §1, §4): the CA
//! and node certificates are made with `vigil cluster ca|cert` in the test's temp dir; a
//! playback DESCRIBE on a node that is not the scheduler is decided by the scheduler; a peer
//! without a certificate from the cluster CA is refused; with the scheduler killed,
//! placements still answer within the call's timeout. Every wait polls with a deadline.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use vigil_tests::{
    demo_viewer_placed_on, ffmpeg_decode, poll_until, run_with_timeout, vigil_bin, Node, RtspConn,
};
use vigil_tests::{rfc3339, scheduler_of, wait_sees_streaming};

use vigil_tests::secure_cluster::{vigil_ok, CLUSTER_KEY as KEY};

fn vigil(args: &[&str]) -> std::process::Output {
    run_with_timeout(
        Command::new(vigil_bin()).args(args),
        Duration::from_secs(10),
    )
}

fn decisions(n: &Node) -> Vec<serde_json::Value> {
    n.api_json("/api/cluster/scheduler")["decisions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// `vigil cluster place` against `addr` with an optional client identity.
fn place(
    addr: SocketAddr,
    node: &str,
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> std::process::Output {
    let addr = addr.to_string();
    let ca = ca.display().to_string();
    let mut args = vec![
        "cluster",
        "place",
        "--addr",
        &addr,
        "--node",
        node,
        "--ca-cert",
        &ca,
        "--camera",
        "demo",
    ];
    let (c, k);
    if let Some((cert, key)) = identity {
        c = cert.display().to_string();
        k = key.display().to_string();
        args.extend(["--cert", &c, "--key", &k]);
    }
    vigil(&args)
}

#[test]
fn placement_by_scheduler_over_mutual_tls() {
    // Three members on 127.0.0.1..3 with certificates from the cluster CA; node 1 is the
    // scheduler and records the demo camera to the shared root.
    let mut c = vigil_tests::secure_cluster::start(3, "", |_| String::new());
    let s = |p: &Path| p.display().to_string();
    let (tmp, ca, certs) = (c.tmp.path().to_path_buf(), c.ca.clone(), c.certs.clone());
    let members = &mut c.members;
    let (id1, id2, id3) = (
        members[0].id.clone(),
        members[1].id.clone(),
        members[2].id.clone(),
    );
    let [n1, n2, n3] = [&members[0].node, &members[1].node, &members[2].node];

    // Refused peers: a client certificate from another CA, and none; a certificate from the
    // cluster CA is accepted (the control).
    let rogue_ca = tmp.join("rogue-ca");
    vigil_ok(&["cluster", "ca", "--out", &s(&rogue_ca)]);
    vigil_ok(&[
        "cluster",
        "cert",
        "--ca",
        &s(&rogue_ca),
        "--node",
        "rogue",
        "--out",
        &s(&rogue_ca),
    ]);
    vigil_ok(&[
        "cluster",
        "cert",
        "--ca",
        &s(&ca),
        "--node",
        "admin",
        "--out",
        &s(&certs),
    ]);
    let ca_pem = ca.join("ca.pem");
    let rogue = place(
        members[1].rpc,
        &id2,
        &ca_pem,
        Some((&rogue_ca.join("rogue.pem"), &rogue_ca.join("rogue.key"))),
    );
    assert!(
        !rogue.status.success(),
        "a certificate from another CA is refused"
    );
    let none = place(members[1].rpc, &id2, &ca_pem, None);
    assert!(!none.status.success(), "no client certificate is refused");
    eprintln!(
        "refused: {} / {}",
        String::from_utf8_lossy(&rogue.stderr).trim(),
        String::from_utf8_lossy(&none.stderr).trim()
    );
    poll_until(
        Duration::from_secs(5),
        "node 2 to log the refused peers",
        || (n2.log().matches("cluster RPC peer refused").count() >= 2).then_some(()),
    );
    let good = place(
        members[1].rpc,
        &id2,
        &ca_pem,
        Some((&certs.join("admin.pem"), &certs.join("admin.key"))),
    );
    assert!(
        good.status.success(),
        "a cluster certificate is accepted: {}",
        String::from_utf8_lossy(&good.stderr)
    );
    // The node checks the server too: node 2's endpoint does not answer for node 3's name.
    let wrong_name = place(
        members[1].rpc,
        &id3,
        &ca_pem,
        Some((&certs.join("admin.pem"), &certs.join("admin.key"))),
    );
    assert!(!wrong_name.status.success(), "server name is verified");

    // A recording to play (node 1 records the demo camera to the shared root).
    let first_ms = vigil_tests::demo_recorded_for(n1, 5000);
    // A viewer on node 3 (placed there by hand): the scheduler's similarity policy then
    // places a request for a nearby moment on node 3 (§A.4 step 3).
    let _viewer = demo_viewer_placed_on(n3, first_ms, KEY);
    wait_sees_streaming(n1, &id3, Duration::from_secs(15));
    let url = vigil_tests::nearby_playback_url(n2, first_ms);
    let mut c2 = RtspConn::connect(n2.rtsp);
    let r = c2.request("DESCRIBE", &url, &[], None);
    assert_eq!(r.status.0, 302, "{}", r.reason);
    let loc = r.headers.get("Location").unwrap().to_string();
    assert!(
        loc.starts_with(&format!("rtsp://{}/playback/demo?start=", n3.rtsp)),
        "{loc}"
    );
    // Node 2 records "via scheduler"; the scheduler lists the decision it made for node 2.
    let d2 = &decisions(n2)[0];
    assert_eq!(d2["via"], "scheduler", "{d2}");
    assert_eq!(d2["decided_by"], id1.as_str(), "{d2}");
    assert_eq!(d2["node"], id3.as_str(), "{d2}");
    let on1 = decisions(n1);
    let d1 = on1
        .iter()
        .find(|d| d["asked_by"] == id2.as_str())
        .unwrap_or_else(|| panic!("the scheduler lists node 2's request: {on1:?}"));
    assert_eq!(d1["node"], id3.as_str(), "{d1}");
    assert_eq!(d1["via"], "scheduler", "{d1}");
    assert!(
        d1["reason"].as_str().unwrap().contains("similarity"),
        "{d1}"
    );
    // ffmpeg asks node 2, follows the scheduler's 302 to node 3 and decodes cleanly.
    let dec = ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &[],
        Duration::from_secs(30),
    );
    dec.assert_plays("playback placed by the scheduler", 50, 110);

    // kill -9 of the scheduler: placements still answer within the call's timeout (300 ms)
    // plus the local decision, at once (local fallback) and after the re-election (node 2).
    members[0].node.kill();
    let n2 = &members[1].node;
    let n3 = &members[2].node;
    let describe = |n: &Node, offset: i64| {
        let url = format!(
            "{}?start={}",
            n.url("playback/demo"),
            rfc3339(first_ms + offset)
        );
        let mut c = RtspConn::connect(n.rtsp);
        let t = Instant::now();
        let r = c.request("DESCRIBE", &url, &[], None);
        let took = t.elapsed();
        assert!(
            r.status.0 == 200 || r.status.0 == 302,
            "{} {}",
            r.status.0,
            r.reason
        );
        assert!(took < Duration::from_millis(1500), "DESCRIBE took {took:?}");
        took
    };
    let took = describe(n3, 2000);
    let d = &decisions(n3)[0];
    eprintln!("placement right after kill -9: {took:?} via {}", d["via"]);
    assert!(
        d["via"] == "local fallback" || d["via"] == "scheduler",
        "{d}"
    );
    poll_until(
        Duration::from_secs(10),
        "node 2 elected after kill -9",
        || (scheduler_of(n2)? == id2 && scheduler_of(n3)? == id2).then_some(()),
    );
    let t0 = Instant::now();
    let took = poll_until(
        Duration::from_secs(5),
        "a placement by the new scheduler",
        || {
            let took = describe(n3, 3000);
            let d = decisions(n3)[0].clone();
            (d["via"] == "scheduler" && d["decided_by"] == id2.as_str()).then_some(took)
        },
    );
    eprintln!(
        "placement by the new scheduler in {took:?} ({:?} after election)",
        t0.elapsed()
    );
    assert!(
        decisions(n2).iter().any(|d| d["asked_by"] == id3.as_str()),
        "the new scheduler lists node 3's request"
    );
}

/// Whether `observer` sees member `id` alive.
fn sees_alive(observer: &Node, id: &str) -> Option<bool> {
    let view = vigil_tests::nodes_view(observer)?;
    Some(
        vigil_testkit::cluster::alive_ids(&view)
            .iter()
            .any(|a| a == id),
    )
}

/// A DESCRIBE of `url` on `n`, no redirect followed: the status and the Location.
fn describe_on(n: &Node, url: &str) -> (u16, String) {
    let mut c = RtspConn::connect(n.rtsp);
    let resp = c.request("DESCRIBE", url, &[("Accept", "application/sdp")], None);
    let location = resp.headers.get("Location").unwrap_or_default().to_string();
    (resp.status.0, location)
}

#[test]
fn a_viewer_is_never_sent_to_a_node_the_member_asked_knows_is_dead() {
    // The members detect a death each on its own: node 2 after 1 s of silence, the
    // scheduler (node 1) only after 10 s — so for seconds after node 3's kill the
    // scheduler, asked by node 2 to place a playback, still names node 3.
    let mut c = vigil_tests::secure_cluster::start_with_keys(
        3,
        |i| match i {
            0 => "failure_timeout_ms = 10000".into(),
            1 => "failure_timeout_ms = 1000".into(),
            _ => String::new(),
        },
        |_| String::new(),
    );
    let first_ms = c.recorded_for(5000);
    let mut third = c.members.pop().expect("node 3");
    let (dead_id, dead_rtsp) = (third.id.clone(), third.node.rtsp.to_string());
    let (scheduler, asked) = (&c.members[0].node, &c.members[1].node);
    // A viewer of the recording on node 3: the similarity policy places a request for a
    // nearby moment there (as in the test above).
    let _viewer = demo_viewer_placed_on(&third.node, first_ms, KEY);
    wait_sees_streaming(scheduler, &dead_id, Duration::from_secs(15));
    let url = vigil_tests::nearby_playback_url(asked, first_ms);
    let (status, location) = describe_on(asked, &url);
    assert!(
        status == 302 && location.contains(&dead_rtsp),
        "before the kill: {status} {location}"
    );

    third.node.kill();
    poll_until(Duration::from_secs(10), "node 2 to see node 3 dead", || {
        (!sees_alive(asked, &dead_id)?).then_some(())
    });
    // The gap this is about: the scheduler still believes node 3 alive.
    assert_eq!(
        sees_alive(scheduler, &dead_id),
        Some(true),
        "the scheduler detected the death as soon as node 2: the test would show nothing"
    );
    let (status, location) = describe_on(asked, &url);
    assert!(
        !location.contains(&dead_rtsp),
        "a viewer sent to the dead node: {status} {location}"
    );
    eprintln!("node 3's death known to node 2 only: DESCRIBE answered {status} {location}");
    let newest = decisions(asked);
    assert_eq!(newest[0]["via"], "local fallback", "{newest:?}");
    assert_ne!(newest[0]["node"], dead_id.as_str(), "{newest:?}");
}

#[test]
fn the_scheduler_watch_fails_over_before_the_gossip_and_an_impostor_cannot_hold_it() {
    // The gossip would take 10 s to call the killed scheduler dead; the watch, 0.5 s.
    let mut c = vigil_tests::secure_cluster::start_with_keys(
        3,
        |_| {
            "failure_timeout_ms = 10000\nscheduler_timeout_ms = 500\nscheduler_watch_ms = 50".into()
        },
        |_| String::new(),
    );
    let (id1, id2) = (c.members[0].id.clone(), c.members[1].id.clone());
    let addr1 = c.members[0].rpc;
    // An impostor with a certificate from the cluster CA (a compromised member's, say) takes
    // the dead scheduler's address the moment it dies: it must not keep it elected.
    c.add_cert("mallory");
    let tls = vigil_server::cluster::rpc::Tls::load(
        &c.ca.join("ca.pem"),
        &c.certs.join("mallory.pem"),
        &c.certs.join("mallory.key"),
    )
    .expect("mallory's certificate");
    let rt = vigil_tests::secure_cluster::runtime();
    c.members[0].node.kill();
    let killed = Instant::now();
    let _guard = rt.enter();
    let impostor =
        vigil_server::cluster::rpc::Rpc::bind(tls, addr1).expect("the dead scheduler's address");
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (endpoint, seen) = (impostor.endpoint.clone(), attempts.clone());
    let rt_thread = std::thread::spawn(move || {
        rt.block_on(async move {
            while let Some(incoming) = endpoint.accept().await {
                seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let _ = incoming.await;
            }
        })
    });
    let (n2, n3) = (&c.members[1].node, &c.members[2].node);
    let took = poll_until(
        Duration::from_secs(8),
        "node 2 elected by the survivors before the gossip's 10 s",
        || (scheduler_of(n2)? == id2 && scheduler_of(n3)? == id2).then(|| killed.elapsed()),
    );
    eprintln!("scheduler watch: node 2 agreed {took:?} after kill -9 of node 1");
    for n in [n2, n3] {
        let log = n.log();
        assert!(log.contains("scheduler watch lost"), "{log}");
        assert!(
            log.lines().any(|l| l.contains("member dead")
                && l.contains(&id1)
                && l.contains("scheduler watch lost")),
            "{log}"
        );
    }
    // The gossip still has node 1 alive: only the watch passed it over.
    assert!(
        !n2.log()
            .lines()
            .any(|l| l.contains("member dead") && l.contains("heartbeat stale")),
        "the gossip declared a death: the test shows nothing about the watch"
    );
    // Both survivors keep trying node 1's address and reach the impostor, whose certificate
    // does not name node 1: node 2 stays the scheduler.
    poll_until(
        Duration::from_secs(5),
        "the survivors' watches to reach the impostor",
        || (attempts.load(std::sync::atomic::Ordering::Relaxed) >= 4).then_some(()),
    );
    assert_eq!(scheduler_of(n2).as_deref(), Some(id2.as_str()));
    assert_eq!(scheduler_of(n3).as_deref(), Some(id2.as_str()));
    assert!(
        !n2.log().contains("scheduler watch answered again")
            && !n2.log().contains("reconnected at once"),
        "the impostor passed for node 1"
    );
    impostor.endpoint.close(0u32.into(), b"done");
    rt_thread.join().expect("impostor thread");

    // A member's own stall is not the scheduler's death: node 3 stopped for 1.5 s (three
    // timeouts; node 2 drops its side of the watch meanwhile) times its watch out on
    // resuming, reconnects at once and keeps node 2.
    let lost_before = n3.log().matches("scheduler watch lost").count();
    let pid = n3.pid().expect("node 3's pid") as libc::pid_t;
    // SAFETY: signals to a child process this test started and still owns.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // The fault's length, not a wait for a condition.
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    poll_until(
        Duration::from_secs(5),
        "node 3's watch to reconnect at once after its stall",
        || n3.log().contains("reconnected at once").then_some(()),
    );
    assert_eq!(
        n3.log().matches("scheduler watch lost").count(),
        lost_before,
        "node 3 took its own stall for node 2's death"
    );
    assert_eq!(scheduler_of(n3).as_deref(), Some(id2.as_str()));
}
