//! RTSP authentication and rights, attacked and used: ffmpeg, GStreamer and retina (the
//! node's own pull) log in with `rtsp://user:pass@`; a raw connection replays, forges and
//! guesses, and is refused; SIGHUP adds a user without dropping a session; with `[auth]`
//! only listed cameras are recorded. Users are made with `vigil user add`.

use std::process::Command;
use std::time::Duration;
use vigil_proto::rtsp::auth::Algorithm;
use vigil_tests::auth::*;
use vigil_tests::{
    ffmpeg_decode, ffmpeg_publish, fixture, gst_decode_h264, gst_publish_h264, metric_value,
    poll_until, run_with_timeout, NodeBuilder, RtspConn, DEMO_CAMERA,
};

#[test]
fn ffmpeg_plays_and_publishes_only_with_the_right() {
    let node = node_with_auth("", "");
    // Anonymous: 401, no media.
    let anon = ffmpeg_decode(
        &node.url("live/demo"),
        &["-rtsp_transport", "tcp"],
        &[],
        Duration::from_secs(20),
    );
    assert!(!anon.status.success(), "anonymous ffmpeg played");
    assert!(anon.stderr.contains("401"), "{}", anon.stderr);
    assert_eq!(anon.frames, 0);
    // Wrong password: refused too.
    let wrong = ffmpeg_decode(
        &with_creds(&node, "viewer", "nope", "live/demo"),
        &["-rtsp_transport", "tcp"],
        &[],
        Duration::from_secs(20),
    );
    assert!(
        !wrong.status.success() && wrong.frames == 0,
        "wrong password played"
    );
    // The viewer plays (ffmpeg takes the MD5 challenge), over TCP and UDP.
    for transport in ["tcp", "udp"] {
        let run = ffmpeg_decode(
            &with_creds(&node, "viewer", "view-pw", "live/demo"),
            &["-rtsp_transport", transport],
            &["-frames:v", "50"],
            Duration::from_secs(30),
        );
        run.assert_plays(&format!("viewer over {transport}"), 50, 50);
    }
    // guard may watch gate-* only: demo is 403.
    let guard = ffmpeg_decode(
        &with_creds(&node, "guard", "guard-pw", "live/demo"),
        &["-rtsp_transport", "tcp"],
        &[],
        Duration::from_secs(20),
    );
    assert!(guard.stderr.contains("403"), "{}", guard.stderr);

    // Publishing: the viewer may not, cam may (to gate-*), and then guard watches it.
    let file = fixture("h264.mp4");
    let mut refused = ffmpeg_publish(
        &file,
        &with_creds(&node, "viewer", "view-pw", "live/gate-1"),
        true,
    );
    let (status, err) = vigil_tests::wait_background(&mut refused, Duration::from_secs(20));
    assert!(
        !status.success() && err.contains("403"),
        "viewer published: {status} {err}"
    );
    let _publisher = ffmpeg_publish(
        &file,
        &with_creds(&node, "cam", "cam-pw", "live/gate-1"),
        true,
    );
    node.wait_live("live/gate-1");
    let run = ffmpeg_decode(
        &with_creds(&node, "guard", "guard-pw", "live/gate-1"),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "25"],
        Duration::from_secs(30),
    );
    run.assert_plays("guard watching gate-1", 25, 25);
    let log = node.log();
    for secret in ["view-pw", "cam-pw", "guard-pw"] {
        assert!(!log.contains(secret), "the log holds a password");
    }
    assert!(metric_value(&node, "vigil_auth_refusals_total{reason=\"forbidden\"}") >= 2.0);
}

#[test]
fn gstreamer_plays_and_publishes_with_credentials() {
    let node = node_with_auth("", "");
    let run = gst_decode_h264(
        &with_creds(&node, "viewer", "view-pw", "live/demo"),
        "tcp",
        30,
        Duration::from_secs(30),
    );
    assert!(
        run.errors.is_empty() && run.frames == 30,
        "gst viewer: {} frames, {:?}",
        run.frames,
        run.errors
    );
    let anon = gst_decode_h264(&node.url("live/demo"), "tcp", 30, Duration::from_secs(30));
    assert_eq!(anon.frames, 0, "anonymous GStreamer played");
    let _publisher = gst_publish_h264(
        &fixture("h264.mp4"),
        &with_creds(&node, "cam", "cam-pw", "live/gate-1"),
        "tcp",
    );
    node.wait_live("live/gate-1");
    let run = gst_decode_h264(
        &with_creds(&node, "guard", "guard-pw", "live/gate-1"),
        "tcp",
        25,
        Duration::from_secs(30),
    );
    assert!(
        run.errors.is_empty() && run.frames >= 25,
        "gst guard: {} frames (at least 25: the live publisher's frames around EOS may add a few), {:?}",
        run.frames,
        run.errors
    );
}

#[test]
fn the_node_pulls_a_camera_that_requires_digest() {
    // The "camera": a node with [auth] on 127.0.0.2; the puller logs in through retina.
    let camera = NodeBuilder::new()
        .ip("127.0.0.2")
        .extra(&auth_section(""))
        .extra(DEMO_CAMERA)
        .start();
    camera.wait_live("live/demo");
    let puller = NodeBuilder::new()
        .extra(&format!(
            "[live]\nreconnect_min_ms = 100\nreconnect_max_ms = 400\n\n\
             [[camera]]\nid = \"cam\"\nsource = \"{}\"\non_demand = false\n\n\
             [[camera]]\nid = \"bad\"\nsource = \"{}\"\non_demand = false",
            with_creds(&camera, "viewer", "view-pw", "live/demo"),
            with_creds(&camera, "viewer", "not-the-pw", "live/demo"),
        ))
        .start();
    puller.wait_live("live/cam");
    let run = ffmpeg_decode(
        &puller.url("live/cam"),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "50"],
        Duration::from_secs(30),
    );
    run.assert_plays("pulled through Digest", 50, 50);
    // The wrong password fails upstream, is retried, and never reaches a log line.
    poll_until(
        Duration::from_secs(10),
        "the bad pull to fail twice",
        || (puller.log().matches("upstream failed").count() >= 2).then_some(()),
    );
    assert!(!puller
        .path_info("live/bad")
        .is_some_and(|p| p["live"] == true));
    assert!(
        !puller.log().contains("not-the-pw"),
        "the log holds the camera's password"
    );
    let paths = puller.try_api("/api/paths").unwrap_or_default();
    assert!(
        !paths.contains("view-pw") && !paths.contains("not-the-pw"),
        "{paths}"
    );
}

#[test]
fn replayed_forged_and_stale_digests_are_refused() {
    let node = node_with_auth("nonce_lifetime_secs = 1\nmax_failures = 100", "");
    let url = node.url("live/demo");
    let viewer = ("viewer", "view-pw", REALM);
    let mut a = RtspConn::connect(node.rtsp);
    let r = a.request("DESCRIBE", &url, &[], None);
    assert_eq!(r.status.0, 401);
    let algs: Vec<&str> = r.headers.get_all("WWW-Authenticate").collect();
    assert!(
        algs.len() == 2 && algs[0].contains("SHA-256") && algs[1].contains("algorithm=MD5"),
        "{algs:?}"
    );
    assert!(
        !algs.iter().any(|c| c.starts_with("Basic")),
        "Basic offered: {algs:?}"
    );

    // SHA-256 with qop: accepted once; the same nonce count again is a replay.
    let nonce = nonce_of(&r, Algorithm::Sha256);
    let good = digest(Algorithm::Sha256, viewer, &nonce, "DESCRIBE", &url, Some(1));
    assert_eq!(status_with(&mut a, &url, &good), 200);
    assert_eq!(status_with(&mut a, &url, &good), 401, "nc replay");
    let next = digest(Algorithm::Sha256, viewer, &nonce, "DESCRIBE", &url, Some(2));
    assert_eq!(status_with(&mut a, &url, &next), 200);

    // The same header on another connection: its nonce belongs to the first.
    let mut b = RtspConn::connect(node.rtsp);
    let replay = digest(Algorithm::Sha256, viewer, &nonce, "DESCRIBE", &url, Some(3));
    assert_eq!(
        status_with(&mut b, &url, &replay),
        401,
        "replayed on another connection"
    );
    // A hand-made nonce, a wrong realm, a wrong password, an unknown user, Basic.
    let r = b.request("DESCRIBE", &url, &[], None);
    let nonce_b = nonce_of(&r, Algorithm::Md5);
    for (what, header) in [
        (
            "hand-made nonce",
            digest(
                Algorithm::Md5,
                viewer,
                "18c0000000.00112233445566778899aabbccddeeff",
                "DESCRIBE",
                &url,
                None,
            ),
        ),
        (
            "wrong realm",
            digest(
                Algorithm::Md5,
                ("viewer", "view-pw", "other"),
                &nonce_b,
                "DESCRIBE",
                &url,
                None,
            ),
        ),
        (
            "wrong password",
            digest(
                Algorithm::Md5,
                ("viewer", "guess", REALM),
                &nonce_b,
                "DESCRIBE",
                &url,
                None,
            ),
        ),
        (
            "unknown user",
            digest(
                Algorithm::Md5,
                ("root", "view-pw", REALM),
                &nonce_b,
                "DESCRIBE",
                &url,
                None,
            ),
        ),
        (
            "other URI",
            digest(
                Algorithm::Md5,
                viewer,
                &nonce_b,
                "DESCRIBE",
                &node.url("live/other"),
                None,
            ),
        ),
        ("Basic", "Basic dmlld2VyOnZpZXctcHc=".to_string()),
        ("garbage", "Digest username=\"viewer".to_string()),
    ] {
        let r = b.request("DESCRIBE", &url, &[("Authorization", &header)], None);
        assert_eq!(r.status.0, 401, "{what}: {}", r.reason);
    }
    // MD5 in the RFC 2069 form (GStreamer's) with the right password works.
    let ok = digest(Algorithm::Md5, viewer, &nonce_b, "DESCRIBE", &url, None);
    assert_eq!(status_with(&mut b, &url, &ok), 200);

    // Stale: the nonce outlives its 1 s; the answer says stale=true (no new password asked).
    let mut c = RtspConn::connect(node.rtsp);
    let r = c.request("DESCRIBE", &url, &[], None);
    let old = nonce_of(&r, Algorithm::Md5);
    let stale = poll_until(Duration::from_secs(5), "the nonce to go stale", || {
        let h = digest(Algorithm::Md5, viewer, &old, "DESCRIBE", &url, None);
        let r = c.request("DESCRIBE", &url, &[("Authorization", &h)], None);
        (r.status.0 == 401).then_some(r)
    });
    assert!(
        stale
            .headers
            .get_all("WWW-Authenticate")
            .all(|h| h.contains("stale=true")),
        "{stale:?}"
    );
    assert!(metric_value(&node, "vigil_auth_refusals_total{reason=\"failure\"}") >= 9.0);
}

#[test]
fn failed_logins_back_off_per_address() {
    let node = node_with_auth("max_failures = 3\nbackoff_max_secs = 30", "");
    let url = node.url("live/demo");
    let mut c = RtspConn::connect(node.rtsp);
    for _ in 0..3 {
        let guess = login(&mut c, &url, Algorithm::Md5, ("viewer", "guess", REALM));
        assert_eq!(guess, 401);
    }
    // Now even the right password is refused for a while, without being checked.
    let r = c.request("DESCRIBE", &url, &[], None);
    assert_eq!(r.status.0, 503, "{}", r.reason);
    assert!(r.headers.get("Retry-After").is_some());
    // After the back-off (1 s for the first), the right password gets in and clears it.
    let mut d = RtspConn::connect(node.rtsp);
    poll_until(Duration::from_secs(10), "the back-off to end", || {
        (login(&mut d, &url, Algorithm::Md5, ("viewer", "view-pw", REALM)) == 200).then_some(())
    });
    // Read once the address is out of its back-off: it holds for the admin token too.
    poll_until(
        Duration::from_secs(10),
        "the back-off refusal counted",
        || {
            (metric_value(&node, "vigil_auth_refusals_total{reason=\"backoff\"}") >= 1.0)
                .then_some(())
        },
    );
}

/// Issue 44, finding H1, as its attack: a guard with a login of their own guesses at
/// `viewer`'s password and logs in as themselves after every few guesses. Before, each good
/// login cleared the address's count and the back-off never started; now the guesses keep
/// counting, and `viewer` is refused even from another connection until it ends.
#[test]
fn a_users_own_login_does_not_reset_the_guesses_at_another() {
    let node = node_with_auth("max_failures = 3\nbackoff_max_secs = 30", "");
    let (viewer_url, guard_url) = (node.url("live/demo"), node.url("live/gate-1"));
    let mut c = RtspConn::connect(node.rtsp);
    let guard = ("guard", "guard-pw", REALM);
    for _ in 0..2 {
        let guess = login(
            &mut c,
            &viewer_url,
            Algorithm::Md5,
            ("viewer", "guess", REALM),
        );
        assert_eq!(guess, 401);
        let mut own = RtspConn::connect(node.rtsp);
        // The guard's own login (404: gate-1 has no publisher yet; 401 would be a failure).
        assert_ne!(login(&mut own, &guard_url, Algorithm::Md5, guard), 401);
    }
    // The third guess reaches max_failures although the guard logged in between.
    assert_eq!(
        login(
            &mut c,
            &viewer_url,
            Algorithm::Md5,
            ("viewer", "guess", REALM)
        ),
        401
    );
    let mut d = RtspConn::connect(node.rtsp);
    let r = login_response(
        &mut d,
        &viewer_url,
        Algorithm::Md5,
        ("viewer", "view-pw", REALM),
    );
    assert_eq!(r.status.0, 503, "{}", r.reason);
}

#[test]
fn sighup_adds_a_user_without_dropping_sessions_and_unlisted_cameras_are_not_recorded() {
    let node = node_with_auth("", "");
    // A viewer plays over a raw TCP connection and keeps its session across the reload.
    let mut playing = RtspConn::connect(node.rtsp);
    let url = node.url("live/demo");
    let viewer = ("viewer", "view-pw", REALM);
    assert_eq!(login(&mut playing, &url, Algorithm::Md5, viewer), 200);
    playing.play_tcp(&url);

    let newbie = || {
        ffmpeg_decode(
            &with_creds(&node, "newbie", "new-pw", "live/demo"),
            &["-rtsp_transport", "tcp"],
            &["-frames:v", "10"],
            Duration::from_secs(20),
        )
    };
    assert!(newbie().stderr.contains("401"));
    user_add(
        &node.dir.path().join("vigil.toml"),
        "newbie",
        "new-pw",
        &["--read", "demo"],
    );
    let pid = node.pid().expect("pid");
    let out = run_with_timeout(
        Command::new("kill").args(["-HUP", &pid.to_string()]),
        Duration::from_secs(5),
    );
    assert!(out.status.success());
    poll_until(Duration::from_secs(10), "the reload", || {
        node.log().contains("authentication reloaded").then_some(())
    });
    newbie().assert_plays("user added by SIGHUP", 10, 10);
    // The session from before the reload still receives media.
    poll_until(Duration::from_secs(10), "media after the reload", || {
        matches!(playing.receive(), Ok(vigil_tests::Incoming::Data { .. })).then_some(())
    });
    let sessions = node.api_json("/api/sessions");
    assert!(
        sessions.as_array().is_some_and(|s| !s.is_empty()),
        "{sessions}"
    );

    // cam may publish gate-*: gate-1 is listed, gate-2 is not and is live but not recorded.
    let file = fixture("h264.mp4");
    let _p1 = ffmpeg_publish(
        &file,
        &with_creds(&node, "cam", "cam-pw", "live/gate-1"),
        true,
    );
    let _p2 = ffmpeg_publish(
        &file,
        &with_creds(&node, "cam", "cam-pw", "live/gate-2"),
        true,
    );
    node.wait_live("live/gate-1");
    node.wait_live("live/gate-2");
    poll_until(Duration::from_secs(10), "gate-1 recording", || {
        node.try_api("/api/recordings")
            .filter(|t| t.contains("gate-1"))
    });
    let rec = node.try_api("/api/recordings").unwrap_or_default();
    assert!(
        !rec.contains("gate-2"),
        "an unlisted camera is recorded: {rec}"
    );
}

/// Basic is refused unless `[auth] basic = true`; then the right password gets in and the
/// 401 offers it next to Digest.
#[test]
fn basic_only_when_configured() {
    let node = node_with_auth("basic = true\ndigest = [\"MD5\"]", "");
    let url = node.url("live/demo");
    let mut c = RtspConn::connect(node.rtsp);
    let r = c.request("DESCRIBE", &url, &[], None);
    let offered: Vec<&str> = r.headers.get_all("WWW-Authenticate").collect();
    assert!(
        offered.len() == 2
            && offered[0].contains("algorithm=MD5")
            && offered[1].starts_with("Basic"),
        "{offered:?}"
    );
    // viewer:guess, then viewer:view-pw.
    let wrong = c.request(
        "DESCRIBE",
        &url,
        &[("Authorization", "Basic dmlld2VyOmd1ZXNz")],
        None,
    );
    assert_eq!(wrong.status.0, 401);
    let ok = c.request(
        "DESCRIBE",
        &url,
        &[("Authorization", "Basic dmlld2VyOnZpZXctcHc=")],
        None,
    );
    assert_eq!(ok.status.0, 200, "{}", ok.reason);
}

/// The project's own client (used by `vigil bench` and the cluster tests) logs in with the
/// URL's credentials too, and without them gets the 401.
#[test]
fn the_projects_client_logs_in() {
    use vigil_testkit::client::{play, ClientTransport, PlayOptions};
    let node = node_with_auth("", "");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let opts = || {
            let mut o = PlayOptions::new(ClientTransport::Tcp);
            o.read_timeout = Duration::from_secs(5);
            o
        };
        let anon = play(&node.url("live/demo"), opts()).await;
        assert!(
            anon.as_ref()
                .err()
                .is_some_and(|e| e.to_string().contains("401")),
            "anonymous: {:?}",
            anon.err()
        );
        let mut p = play(&with_creds(&node, "viewer", "view-pw", "live/demo"), opts())
            .await
            .expect("play with credentials");
        for _ in 0..50 {
            let pkt = tokio::time::timeout(Duration::from_secs(5), p.next_packet()).await;
            assert!(matches!(pkt, Ok(Ok(Some(_)))), "{pkt:?}");
        }
    });
}

/// The same users serve HTTP (issue 44): ffmpeg plays live HLS with the viewer's
/// credentials in the URL (it answers the node's Basic challenge on the playlist and every
/// segment) with zero errors; the guard, who may watch `gate-*` only, is refused `demo`
/// (403); nobody is served without credentials on loopback, since the node has users.
#[test]
fn ffmpeg_plays_live_hls_with_a_users_credentials_and_only_with_the_right() {
    let node = node_with_auth("", "");
    node.wait_live("live/demo");
    let hls = |user: &str| {
        let creds = if user.is_empty() {
            String::new()
        } else {
            format!("{user}@")
        };
        format!("http://{creds}{}/hls/live/demo/index.m3u8", node.api)
    };
    let viewer = ffmpeg_decode(
        &hls("viewer:view-pw"),
        &[],
        &["-t", "3"],
        Duration::from_secs(40),
    );
    viewer.assert_plays("the viewer over HLS", 74, 76);
    let guard = ffmpeg_decode(&hls("guard:guard-pw"), &[], &[], Duration::from_secs(20));
    assert!(
        !guard.status.success() && guard.frames == 0 && guard.stderr.contains("403"),
        "the guard played demo over HLS: {}",
        guard.stderr
    );
    let nobody = ffmpeg_decode(&hls(""), &[], &[], Duration::from_secs(20));
    assert!(
        !nobody.status.success() && nobody.frames == 0 && nobody.stderr.contains("401"),
        "HLS without credentials: {}",
        nobody.stderr
    );
}
