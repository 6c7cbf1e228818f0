//! TLS on the node's listeners (issue 28 §1): RTSPS for play and publish with ffmpeg and
//! GStreamer, HTTPS for the API with HSTS, certificates a verifying client refuses (another
//! host, expired), a plaintext client on the TLS port, a handshake flood from one address,
//! the certificate replaced under running viewers, and the rule that no plaintext listener
//! starts beyond loopback unless the config says so.
//!
//! ffmpeg 5.1's RTSP client passes no option to its TLS layer (`-ca_file`, `-tls_verify`
//! never reach it for `rtsps://`), so it never verifies a server certificate: the
//! verification cases use GStreamer (GIO's TLS), curl and a rustls client.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};
use vigil_tests::tls::{
    assert_gst_decoded, leaf_der, tls_request, tls_request_from, tls_table, Leaf, TestCa, TlsNode,
    GST_VALIDATE_BUT_CA,
};
use vigil_tests::{
    expected_window, ffmpeg_decode, ffmpeg_publish, fixture, free_port, gst_decode_h264_with,
    gst_publish_h264_with, metric_value, poll_until, run_with_timeout, spawn_ffmpeg_decode,
    vigil_bin, wait_background, wait_background_or_kill, Node, NodeBuilder, DEMO_CAMERA,
};

/// An ffmpeg reader over TCP of a whole publish, started now.
fn tcp_reader(url: &str) -> std::thread::JoinHandle<vigil_tests::Decoded> {
    spawn_ffmpeg_decode(
        url,
        &["-rtsp_transport", "tcp"],
        &[],
        Duration::from_secs(40),
    )
}

#[test]
fn ffmpeg_and_gstreamer_publish_and_play_over_rtsps() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let (cert, key) = ca.issue(dir.path(), "node", Leaf::Good);
    let n = TlsNode::start(&cert, &key, "", "");

    // ffmpeg publishes over RTSPS (RTP interleaved in the TLS connection); ffmpeg over
    // RTSPS, GStreamer over RTSPS and ffmpeg over plain RTSP on loopback read it.
    let path = "live/tls-ffmpeg";
    let started = Instant::now();
    let mut publisher = ffmpeg_publish(&fixture("h264.mp4"), &n.rtsps_url(path), true);
    n.node.wait_live(path);
    let tls_reader = tcp_reader(&n.rtsps_url(path));
    let plain_reader = tcp_reader(&n.node.url(path));
    poll_until(Duration::from_secs(10), "the readers to join", || {
        let s = n.node.api_json("/api/sessions");
        let plays = s.as_array()?.iter().filter(|s| s["kind"] == "play").count();
        (plays >= 2).then_some(())
    });
    let (min, max) = expected_window(started.elapsed());
    let gst = gst_decode_h264_with(
        &n.rtsps_url(path),
        "tcp",
        &[GST_VALIDATE_BUT_CA],
        50,
        Duration::from_secs(30),
    );
    assert_gst_decoded("rtspsrc over RTSPS", &gst, 50);
    let (status, err) = wait_background(&mut publisher, Duration::from_secs(30));
    assert!(
        status.success() && err.trim().is_empty(),
        "ffmpeg publisher: {status}: {err}"
    );
    tls_reader
        .join()
        .unwrap()
        .assert_plays("ffmpeg over RTSPS", min, max);
    plain_reader
        .join()
        .unwrap()
        .assert_plays("ffmpeg over plain RTSP (loopback)", min, max);

    // GStreamer's rtspclientsink publishes over RTSPS; ffmpeg reads it over RTSPS.
    let path = "live/tls-gst";
    let started = Instant::now();
    let mut publisher = gst_publish_h264_with(
        &fixture("h264.mp4"),
        &n.rtsps_url(path),
        "tcp",
        &[GST_VALIDATE_BUT_CA],
    );
    n.node.wait_live(path);
    let reader = tcp_reader(&n.rtsps_url(path));
    poll_until(Duration::from_secs(10), "the reader to join", || {
        let s = n.node.api_json("/api/sessions");
        s.as_array()?
            .iter()
            .any(|s| s["kind"] == "play" && s["path"] == path)
            .then_some(())
    });
    let (min, max) = expected_window(started.elapsed());
    let (status, err) = wait_background_or_kill(&mut publisher, Duration::from_secs(30));
    // rtspclientsink tears down from two threads at once after its end of stream: its state
    // change's PAUSE is interrupted by its CLOSE on the same connection (its own debug log of
    // a passing run: "PAUSE interrupted", then TEARDOWN from both threads). Over TLS the
    // interrupted read sometimes ends as "Could not send message. (Received end-of-file)"
    // (from its send, and again from its PAUSE), after the node has answered everything
    // (seen under load, up to 1 run in 3; the node closes only after the peer has: "peer
    // closed connection without sending TLS close_notify"). That exit status says nothing
    // about the node; any other error does, and what the publish delivered is checked by
    // the reader below. The same race can also leave it hanging in that teardown (seen once
    // in a full run under load: still running 20 s after its end of stream, no TEARDOWN
    // sent): killed after 30 s and judged, like the error exit, by what the reader got.
    let errors = err.matches("ERROR:").count();
    let teardown_race = status.is_none()
        || (errors > 0
            && errors
                == err
                    .matches("Could not send message. (Received end-of-file)")
                    .count());
    assert!(
        status.is_some_and(|s| s.success()) || teardown_race,
        "rtspclientsink: {status:?}: {err}"
    );
    reader
        .join()
        .unwrap()
        .assert_plays("ffmpeg over RTSPS from rtspclientsink", min, max);
}

#[test]
fn https_serves_the_api_with_hsts_and_curl_verifies_it() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let (cert, key) = ca.issue(dir.path(), "node", Leaf::Good);
    let n = TlsNode::start(&cert, &key, "", "");
    let curl = |args: &[&str], url: String| {
        run_with_timeout(
            Command::new("curl")
                .args(["-sS", "-D", "-", "-o", "/dev/null", "--max-time", "5"])
                .args(args)
                .arg(url),
            Duration::from_secs(10),
        )
    };
    let ca_pem = ca.pem.display().to_string();
    let out = curl(
        &["--cacert", &ca_pem],
        format!("https://{}/api/health", n.https),
    );
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(
        out.status.success(),
        "curl over HTTPS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains("strict-transport-security: max-age=31536000"),
        "{head}"
    );
    // The plain loopback listener answers without HSTS (a browser ignores it over HTTP).
    let out = curl(&[], format!("http://{}/api/health", n.node.api));
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(
        head.starts_with("http/1.1 200") && !head.contains("strict-transport"),
        "{head}"
    );
    // Without the CA curl refuses the node's certificate (exit 60: peer not verified).
    let out = curl(&[], format!("https://{}/api/health", n.https));
    assert_eq!(
        out.status.code(),
        Some(60),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The rustls client agrees, and sees the configured certificate.
    let shown = tls_request(
        &ca.pem,
        n.https,
        "localhost",
        "GET /api/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert!(shown.answer.starts_with("HTTP/1.1 200"), "{}", shown.answer);
    assert_eq!(shown.leaf, leaf_der(&cert));
}

#[test]
fn clients_refuse_a_certificate_for_another_host_or_expired() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let options = "OPTIONS rtsp://127.0.0.1/ RTSP/1.0\r\nCSeq: 1\r\n\r\n";
    for (label, leaf, why) in [
        (
            "another host",
            Leaf::OtherHost("elsewhere.test"),
            "not valid for name",
        ),
        ("expired", Leaf::Expired, "expired"),
    ] {
        let (cert, key) = ca.issue(dir.path(), label, leaf);
        let n = TlsNode::start(&cert, &key, "", DEMO_CAMERA);
        let e = tls_request(&ca.pem, n.rtsps, "127.0.0.1", options)
            .err()
            .unwrap_or_else(|| panic!("{label}: the rustls client accepted the certificate"));
        assert!(e.contains(why), "{label}: {e}");
        let out = run_with_timeout(
            Command::new("curl")
                .args(["-sS", "--max-time", "5", "--cacert"])
                .arg(&ca.pem)
                .arg(format!("https://127.0.0.1:{}/api/health", n.https.port())),
            Duration::from_secs(10),
        );
        assert_eq!(out.status.code(), Some(60), "{label}: curl accepted it");
        let gst = gst_decode_h264_with(
            &n.rtsps_url("live/demo"),
            "tcp",
            &[GST_VALIDATE_BUT_CA],
            10,
            Duration::from_secs(20),
        );
        assert!(
            gst.frames == 0 && !gst.errors.is_empty(),
            "{label}: rtspsrc decoded {} frames\n{}",
            gst.frames,
            gst.output
        );
        if matches!(label, "expired") {
            // `vigil ctl doctor` names the listener certificate and how to replace it.
            let out = run_with_timeout(
                Command::new(vigil_bin())
                    .args([
                        "ctl",
                        "--api",
                        &format!("http://{}", n.node.api),
                        "--config",
                    ])
                    .arg(n.node.dir.path().join("vigil.toml"))
                    .arg("doctor"),
                Duration::from_secs(30),
            );
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find(|l| l.contains("[tls] cert"))
                .unwrap_or("");
            assert!(!out.status.success() && line.starts_with("FAIL"), "{text}");
            assert!(text.contains("write it over [tls] cert and key"), "{text}");
        }
        // The node itself is fine: its plain loopback listener still plays.
        ffmpeg_decode(
            &n.node.url("live/demo"),
            &["-rtsp_transport", "tcp"],
            &["-frames:v", "25"],
            Duration::from_secs(20),
        )
        .assert_plays(&format!("{label}: plain RTSP beside"), 25, 25);
    }
}

/// Bytes a peer gets before the node closes the connection, within `timeout`.
fn read_until_closed(s: &mut TcpStream, timeout: Duration) -> Result<Vec<u8>, String> {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => Ok(got),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(got),
        Err(e) => Err(format!("not closed within {timeout:?}: {e}")),
    }
}

#[test]
fn plaintext_on_the_tls_ports_is_closed_cleanly_and_the_node_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let (cert, key) = ca.issue(dir.path(), "node", Leaf::Good);
    let n = TlsNode::start(&cert, &key, "", DEMO_CAMERA);
    for (port, request) in [
        (
            n.rtsps,
            "OPTIONS rtsp://127.0.0.1/ RTSP/1.0\r\nCSeq: 1\r\n\r\n",
        ),
        (n.https, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n"),
    ] {
        let mut s = TcpStream::connect(port).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let got = read_until_closed(&mut s, Duration::from_secs(5)).unwrap();
        // At most a TLS alert record (content type 21), never an RTSP or HTTP answer.
        assert!(
            got.is_empty() || got[0] == 21,
            "{port}: {:?}",
            String::from_utf8_lossy(&got)
        );
    }
    let shown = tls_request(
        &ca.pem,
        n.rtsps,
        "localhost",
        "OPTIONS rtsp://127.0.0.1/ RTSP/1.0\r\nCSeq: 7\r\n\r\n",
    )
    .unwrap();
    assert!(
        shown.answer.starts_with("RTSP/1.0 200") && shown.answer.contains("CSeq: 7"),
        "{}",
        shown.answer
    );
}

#[test]
fn a_handshake_flood_from_one_address_is_refused_before_any_tls_work() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let (cert, key) = ca.issue(dir.path(), "node", Leaf::Good);
    let n = TlsNode::start(
        &cert,
        &key,
        "handshakes_per_sec = 2.0\nhandshake_burst = 10\nhandshake_timeout_ms = 2000",
        "",
    );
    // 60 connections from 127.0.0.1 at once, each holding its socket: past the burst the
    // node closes them at accept.
    let flood: Vec<TcpStream> = (0..60)
        .map(|_| TcpStream::connect(n.rtsps).unwrap())
        .collect();
    poll_until(
        Duration::from_secs(10),
        "the refusals to be counted",
        || {
            let refused = metric_value(
                &n.node,
                "vigil_limit_refusals_total{limit=\"tls_handshakes\"}",
            );
            (refused >= 40.0).then_some(())
        },
    );
    let closed = flood
        .into_iter()
        .filter_map(|mut s| read_until_closed(&mut s, Duration::from_secs(5)).ok())
        .count();
    assert_eq!(
        closed, 60,
        "every flood connection is closed (refused, or its handshake timed out)"
    );
    // Another address has a budget of its own: its handshake completes at once.
    let options = "OPTIONS rtsp://127.0.0.1/ RTSP/1.0\r\nCSeq: 2\r\n\r\n";
    let other = Some(std::net::IpAddr::from([127, 0, 0, 2]));
    let shown = tls_request_from(other, &ca.pem, n.rtsps, "localhost", options).unwrap();
    assert!(shown.answer.starts_with("RTSP/1.0 200"), "{}", shown.answer);
    // 127.0.0.1's own budget refills at 2/s: a handshake from it goes through again.
    poll_until(
        Duration::from_secs(10),
        "127.0.0.1's budget to refill",
        || tls_request(&ca.pem, n.rtsps, "localhost", options).ok(),
    );
}

#[test]
fn a_new_certificate_is_taken_on_file_change_and_sighup_without_dropping_viewers() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let (cert, key) = ca.issue(dir.path(), "node", Leaf::Good);
    let n = TlsNode::start(&cert, &key, "reload_check_ms = 200", DEMO_CAMERA);
    let options = "OPTIONS rtsp://127.0.0.1/ RTSP/1.0\r\nCSeq: 1\r\n\r\n";
    let shown = || tls_request(&ca.pem, n.rtsps, "localhost", options).map(|s| s.leaf);
    assert_eq!(shown().unwrap(), leaf_der(&cert));
    // A viewer over RTSPS through both changes: 10 s of the demo, every frame decoded.
    let viewer = spawn_ffmpeg_decode(
        &n.rtsps_url("live/demo"),
        &["-rtsp_transport", "tcp"],
        &["-t", "8"],
        Duration::from_secs(30),
    );
    // A renewal written over the files: taken within the check period.
    let (c2, k2) = ca.issue(dir.path(), "renewed", Leaf::Good);
    std::fs::copy(&k2, &key).unwrap();
    std::fs::copy(&c2, &cert).unwrap();
    poll_until(Duration::from_secs(10), "the renewed certificate", || {
        (shown().ok()? == leaf_der(&c2)).then_some(())
    });
    // Another, taken on SIGHUP: the files' times are put back as they were, so the watcher
    // sees no change and only the signal can make the node read them.
    let (c3, k3) = ca.issue(dir.path(), "third", Leaf::Good);
    replace_keeping_mtime(&k3, &key);
    replace_keeping_mtime(&c3, &cert);
    assert_eq!(
        shown().unwrap(),
        leaf_der(&c2),
        "not reloaded before the signal"
    );
    let pid = n.node.pid().expect("node pid") as i32;
    // SAFETY: kill(2) with a pid this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    poll_until(Duration::from_secs(10), "the third certificate", || {
        (shown().ok()? == leaf_der(&c3)).then_some(())
    });
    // A broken write (a key that is not one) is refused; the certificate in force stays.
    let broken = dir.path().join("broken.key");
    std::fs::write(&broken, "not a key").unwrap();
    replace_keeping_mtime(&broken, &key);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    poll_until(Duration::from_secs(10), "the refusal in the log", || {
        n.node
            .log()
            .contains("keeping the TLS certificate in force")
            .then_some(())
    });
    assert_eq!(shown().unwrap(), leaf_der(&c3));
    viewer
        .join()
        .unwrap()
        .assert_plays("the RTSPS viewer across two reloads", 195, 205);
}

/// A node pulling `live/demo` of `source` over RTSPS as camera `cam`, verifying against
/// `client_ca`.
fn rtsps_puller(source: &TlsNode, client_ca: &std::path::Path) -> Node {
    NodeBuilder::new()
        .extra(&format!(
            "[tls]\nclient_ca = \"{}\"\n[[camera]]\nid = \"cam\"\n\
             source = \"rtsps://localhost:{}/live/demo\"\non_demand = false",
            client_ca.display(),
            source.rtsps.port(),
        ))
        .start()
}

#[test]
fn a_camera_is_pulled_over_rtsps_and_its_certificate_verified() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let (cert, key) = ca.issue(dir.path(), "camera", Leaf::Good);
    // The "camera": a node serving its demo over RTSPS only to the network.
    let camera = TlsNode::start(&cert, &key, "", DEMO_CAMERA);
    let puller = rtsps_puller(&camera, &ca.pem);
    puller.wait_live("live/cam");
    ffmpeg_decode(
        &puller.url("live/cam"),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "50"],
        Duration::from_secs(30),
    )
    .assert_plays("a camera pulled over RTSPS", 50, 50);
    // The upstream session reached the camera over its TLS port: the camera lists it.
    let sessions = camera.node.api_json("/api/sessions");
    assert!(
        sessions
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["path"] == "live/demo" && s["kind"] == "play"),
        "{sessions}"
    );
    // A node trusting another CA refuses the camera's certificate, says why, and never
    // goes live.
    let other = tempfile::tempdir().unwrap();
    let other_ca = TestCa::new(other.path());
    let doubting = rtsps_puller(&camera, &other_ca.pem);
    poll_until(
        Duration::from_secs(15),
        "the verification failure in the log",
        || {
            let log = doubting.log();
            (log.contains("upstream failed") && log.contains("invalid peer certificate"))
                .then_some(())
        },
    );
    assert!(doubting
        .path_info("live/cam")
        .is_none_or(|p| p["live"] != true));
}

/// The project's own client (the load generator's) over RTSPS: it verifies the node with
/// the CA, starts on a keyframe and receives the stream's packets in order.
#[test]
fn the_projects_client_plays_over_rtsps() {
    use vigil_testkit::client::{play, tls_client_config, ClientTransport, PlayOptions};
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let (cert, key) = ca.issue(dir.path(), "node", Leaf::Good);
    let n = TlsNode::start(&cert, &key, "", DEMO_CAMERA);
    let url = n.rtsps_url("live/demo");
    vigil_tests::multi_thread_runtime().block_on(async {
        let mut opts = PlayOptions::new(ClientTransport::Tcp);
        // Without a CA the client refuses to guess.
        let e = play(&url, opts.clone())
            .await
            .err()
            .expect("no CA: refused");
        assert!(e.to_string().contains("needs a CA"), "{e}");
        opts.tls = Some(tls_client_config(&ca.pem).unwrap());
        let mut player = play(&url, opts).await.unwrap();
        let (_, first) = player
            .next_keyframe(Duration::from_secs(5))
            .await
            .unwrap()
            .expect("a keyframe");
        assert!(first, "the first packet over RTSPS starts a keyframe");
        let mut last = None;
        for _ in 0..200 {
            let p = tokio::time::timeout(Duration::from_secs(5), player.next_packet())
                .await
                .expect("a packet within 5 s")
                .unwrap()
                .expect("the stream goes on");
            if let Some(prev) = last {
                assert_eq!(
                    p.header.sequence,
                    u16::wrapping_add(prev, 1),
                    "in order, none lost"
                );
            }
            last = Some(p.header.sequence);
        }
    });
}

/// A lab's listener certificate from `vigil cluster ca` / `vigil cluster cert --host`:
/// a verifying client accepts it for each name given, and not for another.
#[test]
fn vigil_cluster_cert_issues_listener_certificates_for_a_lab() {
    let dir = tempfile::tempdir().unwrap();
    let ca_dir = dir.path().join("ca");
    let certs = dir.path().join("certs");
    let vigil = vigil_tests::secure_cluster::vigil_ok;
    let (ca_s, certs_s) = (ca_dir.display().to_string(), certs.display().to_string());
    vigil(&["cluster", "ca", "--out", &ca_s]);
    vigil(&[
        "cluster",
        "cert",
        "--ca",
        &ca_s,
        "--node",
        "node1",
        "--out",
        &certs_s,
        "--host",
        "127.0.0.1",
        "--host",
        "cams.example.test",
    ]);
    let (cert, key) = (certs.join("node1.pem"), certs.join("node1.key"));
    let n = TlsNode::start(&cert, &key, "", "");
    let options = "OPTIONS rtsp://127.0.0.1/ RTSP/1.0\r\nCSeq: 1\r\n\r\n";
    let ca = ca_dir.join("ca.pem");
    for name in ["127.0.0.1", "cams.example.test", "node1"] {
        let shown =
            tls_request(&ca, n.rtsps, name, options).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            shown.answer.starts_with("RTSP/1.0 200"),
            "{name}: {}",
            shown.answer
        );
    }
    let e = tls_request(&ca, n.rtsps, "other.example.test", options).err();
    assert!(e.is_some_and(|e| e.contains("not valid for name")));
    // A --host that is neither an address nor a name is refused.
    let out = run_with_timeout(
        Command::new(vigil_bin()).args([
            "cluster",
            "cert",
            "--ca",
            &ca_s,
            "--node",
            "node2",
            "--out",
            &certs_s,
            "--host",
            "no spaces allowed",
        ]),
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither an IP address nor a DNS name"));
}

/// A cluster that advertises only RTSPS (`[cluster] rtsp_url = "rtsps://…"`): each node's
/// plain listener is on an address of its own that nothing advertises, so whatever reaches
/// a node from the other or from a redirected viewer came over TLS. A viewer asking node 2
/// for node 1's camera is redirected to node 1's RTSPS URL, or node 2 relays it from there
/// (verified with `[tls] client_ca`); ffmpeg decodes it either way.
#[test]
fn a_cluster_redirects_and_relays_over_rtsps() {
    let _serial = vigil_tests::serial();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let (cert, key) = ca.issue(dir.path(), "nodes", Leaf::Good);
    const KEY: &str = "tls-cluster-key-0123456789";
    let start = |i: u8, seed: Option<SocketAddr>, camera: &str| {
        let plain_ip = format!("127.0.0.{}", 20 + i);
        let rtsps = free_port("127.0.0.1");
        let gossip = vigil_tests::free_udp(&plain_ip);
        let seeds = seed.map(|s| format!("\"{s}\"")).unwrap_or_default();
        let node = NodeBuilder::new()
            .ip(&plain_ip)
            .rtsp(&format!("tls_listen = \"127.0.0.1:{rtsps}\""))
            .extra(&tls_table(
                &cert,
                &key,
                &format!("client_ca = \"{}\"", ca.pem.display()),
            ))
            .extra(&format!(
                "[cluster]\nenabled = true\ngossip_listen = \"{plain_ip}:{gossip}\"\n\
                 seeds = [{seeds}]\nkey = \"{KEY}\"\npriority = {}\n\
                 rtsp_url = \"rtsps://127.0.0.1:{rtsps}\"",
                10 * i
            ))
            .extra(camera)
            .start();
        let gossip: SocketAddr = format!("{plain_ip}:{gossip}").parse().unwrap();
        (node, gossip, rtsps)
    };
    let (n1, seed, _) = start(1, None, DEMO_CAMERA);
    let (n2, _, rtsps2) = start(2, Some(seed), "");
    vigil_tests::wait_converged(&[&n1, &n2], Duration::from_secs(20));
    n1.wait_live("live/demo");
    // Node 2 knows where the camera is once a DESCRIBE of it is answered (302 or 200).
    let describe =
        format!("DESCRIBE rtsps://127.0.0.1:{rtsps2}/live/demo RTSP/1.0\r\nCSeq: 1\r\n\r\n");
    let answer = poll_until(Duration::from_secs(20), "node 2 to place live/demo", || {
        let a = tls_request(
            &ca.pem,
            SocketAddr::from(([127, 0, 0, 1], rtsps2)),
            "localhost",
            &describe,
        )
        .ok()?
        .answer;
        (a.starts_with("RTSP/1.0 302") || a.starts_with("RTSP/1.0 200")).then_some(a)
    });
    if answer.starts_with("RTSP/1.0 302") {
        assert!(answer.contains("Location: rtsps://127.0.0.1:"), "{answer}");
    }
    let view = vigil_tests::nodes_view(&n2).unwrap();
    let urls: Vec<&str> = view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["rtsp"].as_str())
        .collect();
    assert!(
        urls.len() == 2 && urls.iter().all(|u| u.starts_with("rtsps://127.0.0.1:")),
        "{view}"
    );
    ffmpeg_decode(
        &format!("rtsps://127.0.0.1:{rtsps2}/live/demo"),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "50"],
        Duration::from_secs(30),
    )
    .assert_plays(
        "ffmpeg asking node 2 for node 1's camera over RTSPS",
        50,
        50,
    );
    // Node 1 served it (to the redirected viewer or to node 2's relay): over its TLS port,
    // the only one anyone was told of.
    let served = n1.log();
    assert!(served.contains("playing session="), "{served}");
}

/// Copy `from` over `to` and give `to` back its modification time.
fn replace_keeping_mtime(from: &std::path::Path, to: &std::path::Path) {
    let before = std::fs::metadata(to).unwrap().modified().unwrap();
    std::fs::copy(from, to).unwrap();
    std::fs::File::options()
        .write(true)
        .open(to)
        .unwrap()
        .set_modified(before)
        .unwrap();
}

#[test]
fn a_plaintext_listener_beyond_loopback_refuses_to_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("vigil.toml");
    std::fs::write(&config, "[rtsp]\nlisten = \"0.0.0.0:0\"\n[auth]\n").unwrap();
    let out = run_with_timeout(
        Command::new(vigil_bin())
            .args(["serve", "--config"])
            .arg(&config),
        Duration::from_secs(10),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it started: {err}");
    assert!(
        err.contains("rtsp.listen = \"0.0.0.0:0\" is beyond loopback without TLS")
            && err.contains("rtsp.allow_plaintext = true"),
        "{err}"
    );
}
