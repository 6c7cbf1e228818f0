//! RTSP authentication and rights, attacked and used: ffmpeg, GStreamer and retina (the
//! node's own pull) log in with `rtsp://user:pass@`; a raw connection replays, forges and
//! guesses, and is refused; SIGHUP adds a user without dropping a session; with `[auth]`
//! only listed cameras are recorded. Users are made with `vigil user add`.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use vigil_proto::rtsp::auth::{ha1, Algorithm};
use vigil_proto::rtsp::Response;
use vigil_tests::{
    ffmpeg_decode, ffmpeg_publish, fixture, gst_decode_h264, gst_publish_h264, metric_value,
    poll_until, run_with_timeout, vigil_bin, Node, NodeBuilder, RtspConn, DEMO_CAMERA,
};

const REALM: &str = "test-site";

/// `vigil user add --config FILE NAME ARGS` with the password on stdin.
fn user_add(file: &std::path::Path, name: &str, password: &str, args: &[&str]) {
    let mut child = Command::new(vigil_bin())
        .args(["user", "add", "--config"])
        .arg(file)
        .arg(name)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn vigil user add");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{password}").expect("password");
    drop(stdin);
    let out = child.wait_with_output().expect("vigil user add");
    assert!(
        out.status.success(),
        "vigil user add {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An `[auth]` section with three users, made by `vigil user add`: `viewer` watches and
/// plays back everything, `cam` publishes `gate-*`, `guard` watches `gate-*` only.
fn auth_section(extra: &str) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("auth.toml");
    std::fs::write(&file, format!("[auth]\nrealm = \"{REALM}\"\n{extra}\n")).expect("write");
    user_add(
        &file,
        "viewer",
        "view-pw",
        &["--read", "*", "--playback", "*"],
    );
    user_add(&file, "cam", "cam-pw", &["--publish", "gate-*"]);
    user_add(&file, "guard", "guard-pw", &["--read", "gate-*"]);
    let text = std::fs::read_to_string(&file).expect("read");
    assert!(!text.contains("view-pw"), "a password reached the config");
    text
}

fn node_with_auth(extra_auth: &str, extra: &str) -> Node {
    let node = NodeBuilder::new()
        .extra(&auth_section(extra_auth))
        .extra(DEMO_CAMERA)
        .extra("[[camera]]\nid = \"gate-1\"\nsource = \"push\"")
        .extra(extra)
        .start();
    node.wait_live("live/demo");
    node
}

/// `rtsp://user:pass@host:port/path`.
fn with_creds(node: &Node, user: &str, pass: &str, path: &str) -> String {
    format!("rtsp://{user}:{pass}@{}/{path}", node.rtsp)
}

/// DESCRIBE `url` with an `Authorization` header: the status.
fn status_with(c: &mut RtspConn, url: &str, authorization: &str) -> u16 {
    c.request("DESCRIBE", url, &[("Authorization", authorization)], None)
        .status
        .0
}

/// DESCRIBE `url` without credentials, then (on a 401) with a Digest answer to its `alg`
/// challenge for `(user, password, realm)`: the last answer.
fn login_response(
    c: &mut RtspConn,
    url: &str,
    alg: Algorithm,
    creds: (&str, &str, &str),
) -> Response {
    let r = c.request("DESCRIBE", url, &[], None);
    if r.status.0 != 401 {
        return r;
    }
    let h = digest(alg, creds, &nonce_of(&r, alg), "DESCRIBE", url, None);
    c.request("DESCRIBE", url, &[("Authorization", &h)], None)
}

/// [`login_response`]'s status.
fn login(c: &mut RtspConn, url: &str, alg: Algorithm, creds: (&str, &str, &str)) -> u16 {
    login_response(c, url, alg, creds).status.0
}

/// The nonce of the challenge for `alg` in a 401.
fn nonce_of(r: &Response, alg: Algorithm) -> String {
    let c = r
        .headers
        .get_all("WWW-Authenticate")
        .find(|c| c.contains(&format!("algorithm={}", alg.name())))
        .unwrap_or_else(|| panic!("no {} challenge in {r:?}", alg.name()));
    let start = c.find("nonce=\"").expect("nonce") + 7;
    c[start..].split('"').next().expect("nonce").to_string()
}

/// A Digest `Authorization` value as a client computes it (qop=auth when `nc` is given).
fn digest(
    alg: Algorithm,
    (user, pass, realm): (&str, &str, &str),
    nonce: &str,
    method: &str,
    uri: &str,
    nc: Option<u32>,
) -> String {
    let h1 = ha1(alg, user, realm, pass);
    let h2 = alg.hex(format!("{method}:{uri}").as_bytes());
    let (resp, qop) = match nc {
        Some(nc) => (
            alg.hex(format!("{h1}:{nonce}:{nc:08x}:c0ffee:auth:{h2}").as_bytes()),
            format!(", qop=auth, nc={nc:08x}, cnonce=\"c0ffee\""),
        ),
        None => (
            alg.hex(format!("{h1}:{nonce}:{h2}").as_bytes()),
            String::new(),
        ),
    };
    format!(
        "Digest username=\"{user}\", realm=\"{realm}\", nonce=\"{nonce}\", uri=\"{uri}\", response=\"{resp}\", algorithm={}{qop}",
        alg.name()
    )
}

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
    assert!(metric_value(&node, "vigil_auth_refusals_total{reason=\"backoff\"}") >= 1.0);
    // After the back-off (1 s for the first), the right password gets in and clears it.
    let mut d = RtspConn::connect(node.rtsp);
    poll_until(Duration::from_secs(10), "the back-off to end", || {
        (login(&mut d, &url, Algorithm::Md5, ("viewer", "view-pw", REALM)) == 200).then_some(())
    });
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

/// Two nodes of a cluster with the same `[auth]`: node 1 holds `live/demo`. A viewer who
/// logs in on node 2 is redirected to node 1 and is not asked to log in again (node 1 takes
/// node 2's signed marker); the marker works on one connection only, and a hand-made one is
/// ignored (401 without credentials).
#[test]
fn a_redirect_carries_the_login_and_markers_cannot_be_forged_or_replayed() {
    const KEY: &str = "test-cluster-key-auth-0123456789";
    let auth = auth_section("");
    let gossip1 = format!("127.0.0.1:{}", vigil_tests::free_udp("127.0.0.1"));
    let n1 = NodeBuilder::new()
        .extra(&format!(
            "[cluster]\nenabled = true\ngossip_listen = \"{gossip1}\"\nkey = \"{KEY}\"\npriority = 10\n"
        ))
        .extra(&auth)
        .extra(DEMO_CAMERA)
        .start();
    let gossip2 = format!("127.0.0.2:{}", vigil_tests::free_udp("127.0.0.2"));
    let n2 = NodeBuilder::new()
        .ip("127.0.0.2")
        .extra(&format!(
            "[cluster]\nenabled = true\ngossip_listen = \"{gossip2}\"\nseeds = [\"{gossip1}\"]\nkey = \"{KEY}\"\npriority = 20\n"
        ))
        .extra(&auth)
        .start();
    n1.wait_live("live/demo");
    let url2 = n2.url("live/demo");
    // Log in on node 2 until its gossip view knows node 1 holds demo: then 302.
    let location = poll_until(Duration::from_secs(20), "node 2 to redirect demo", || {
        let mut c = RtspConn::connect(n2.rtsp);
        let r = login_response(
            &mut c,
            &url2,
            Algorithm::Sha256,
            ("viewer", "view-pw", REALM),
        );
        (r.status.0 == 302)
            .then(|| r.headers.get("Location").map(str::to_string))
            .flatten()
    });
    assert!(
        location.starts_with(&n1.url("live/demo?vigil_placed=")),
        "{location}"
    );
    // The marker: served on node 1 without credentials, SETUP and PLAY included…
    let mut placed = RtspConn::connect(n1.rtsp);
    placed.play_tcp(&location);
    // …once: another connection with the same URL must log in.
    let mut replay = RtspConn::connect(n1.rtsp);
    assert_eq!(
        replay.request("DESCRIBE", &location, &[], None).status.0,
        401,
        "replayed marker"
    );
    // Hand-made and tampered markers are ignored.
    let forged = format!("{}?vigil_placed=1", n1.url("live/demo"));
    assert_eq!(
        RtspConn::connect(n1.rtsp)
            .request("DESCRIBE", &forged, &[], None)
            .status
            .0,
        401
    );
    let tampered = location.replace("viewer", "admin");
    let tampered = if tampered == location {
        format!("{location}0")
    } else {
        tampered
    };
    assert_eq!(
        RtspConn::connect(n1.rtsp)
            .request("DESCRIBE", &tampered, &[], None)
            .status
            .0,
        401
    );

    // ffmpeg logs in on node 2 only and plays from node 1.
    let run = ffmpeg_decode(
        &with_creds(&n2, "viewer", "view-pw", "live/demo"),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "50"],
        Duration::from_secs(30),
    );
    run.assert_plays("ffmpeg redirected with its login", 50, 50);
    // guard has no right on demo: node 2 answers 403 rather than redirecting.
    let mut g = RtspConn::connect(n2.rtsp);
    assert_eq!(
        login(&mut g, &url2, Algorithm::Md5, ("guard", "guard-pw", REALM)),
        403
    );
}

fn http_status(method: &str, url: &str, token: Option<&str>) -> u16 {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = match method {
        "POST" => agent.post(url),
        "DELETE" => agent.delete(url).force_send_body(),
        _ => unreachable!("{method}"),
    };
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    req.send_empty().expect("HTTP request").status().as_u16()
}

/// The admin API's token layer covers every write route (here: POST/DELETE to existing and
/// unknown paths, answered 405/404 only once the token is right); reads on loopback stay
/// open; `vigil ctl` takes the token from the node's config file or from the environment.
#[test]
fn admin_writes_need_the_bearer_token() {
    let node = NodeBuilder::new().start();
    for path in [
        "/api/paths",
        "/api/sessions/x/migrate",
        "/api/cluster/nodes/n/drain",
    ] {
        let url = format!("http://{}{path}", node.api);
        for method in ["POST", "DELETE"] {
            assert_eq!(http_status(method, &url, None), 401, "{method} {path}");
            assert_eq!(
                http_status(method, &url, Some("guess")),
                401,
                "{method} {path}"
            );
            let ok = http_status(method, &url, Some(vigil_tests::ADMIN_TOKEN));
            assert!(
                ok == 404 || ok == 405,
                "{method} {path} with the token: {ok}"
            );
        }
    }
    assert!(
        node.try_api("/api/paths").is_some(),
        "a loopback read needs no token"
    );
    // vigil ctl: the token from --config, or VIGIL_API_TOKEN (the harness's ctl uses it).
    let cfg = node.dir.path().join("vigil.toml");
    let out = run_with_timeout(
        Command::new(vigil_bin())
            .env_remove("VIGIL_API_TOKEN")
            .args(["ctl", "--api", &format!("http://{}", node.api), "--config"])
            .arg(&cfg)
            .arg("paths"),
        Duration::from_secs(10),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(vigil_tests::ctl(&node, &["paths"]).contains("PATH"));
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
