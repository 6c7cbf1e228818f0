//! Issue 44's critical finding, as its attack: README's recommended deployment (`[http]
//! listen` on loopback, `tls_listen` on every address, a token set, a camera recording),
//! reached from another host over HTTPS without the token. Every route but `/api/health`
//! must refuse; with the token the same routes answer, so the refusals are the gate's.

use super::support::bed_of;
use std::net::SocketAddr;
use std::time::Duration;
use vigil_testkit::serve::ServeProcess;
use vigil_tests::auth::{basic, control_room};
use vigil_tests::tls::{tls_request_from, tls_table, Leaf, TestCa};
use vigil_tests::{poll_every, vigil_bin, ADMIN_TOKEN, DEMO_CAMERA};

const HTTPS_PORT: u16 = 8443;
const API_PORT: u16 = 8080;

/// The status of `METHOD path` over HTTPS to `addr` (verified as `localhost`), with the
/// bearer `token` when given; 0 when nothing answered.
fn https_status(
    ca: &std::path::Path,
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> u16 {
    let auth = token.map(|t| format!("Bearer {t}"));
    https_answer(ca, addr, method, path, auth.as_deref()).0
}

/// The status and body of `METHOD path` over HTTPS with `authorization` (the header's
/// value) when given; 0 when nothing answered.
fn https_answer(
    ca: &std::path::Path,
    addr: SocketAddr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
) -> (u16, String) {
    let auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    let body = if method == "POST" { "v=0\r\n" } else { "" };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/sdp\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    match tls_request_from(None, ca, addr, "localhost", &request) {
        Ok(shown) => {
            let body = shown
                .answer
                .split_once("\r\n\r\n")
                .map_or(String::new(), |(_, b)| b.to_string());
            (vigil_tests::status_of(&shown.answer), body)
        }
        Err(_) => (0, String::new()),
    }
}

/// The status of a plain `GET path` to `addr` naming `host`, without a token.
fn plain_status(addr: SocketAddr, path: &str, host: &str) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)) else {
        return 0;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    vigil_tests::status_of(&answer)
}

#[test]
fn https_beyond_loopback_answers_nothing_but_health_without_the_token() {
    let _serial = vigil_tests::serial();
    let Some((bed, outsider, _viewer, hosts)) = bed_of(&["node"]) else {
        return;
    };
    let node_host = &hosts[0];
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new(dir.path());
    let (cert, key) = ca.issue(dir.path(), "node", Leaf::Good);
    // The people of a control room (`vigil user add`): a guard who may watch `demo` live
    // and nothing else, an investigator who may also play it back and export it.
    let users = control_room(dir.path(), "trust");
    // README's "Encrypt: RTSPS and HTTPS", to the letter: plain HTTP on loopback, HTTPS on
    // every address, a token, one camera recording (and one more the users may not see).
    let config = format!(
        "[node]\nid = \"trust\"\n\n[rtsp]\nlisten = \"127.0.0.1:8554\"\n\n[http]\n\
         listen = \"127.0.0.1:{API_PORT}\"\ntls_listen = \"0.0.0.0:{HTTPS_PORT}\"\n\
         token = \"{ADMIN_TOKEN}\"\n\n[storage]\nsegment_secs = 1\n\n{}\n{DEMO_CAMERA}\n\
         [[camera]]\nid = \"lobby\"\nsource = \"push\"\n\n{users}\n",
        tls_table(&cert, &key, "")
    );
    let mut node = ServeProcess::spawn_in(
        Some(&node_host.ns),
        &vigil_bin(),
        dir.path(),
        "trust",
        &config,
        "info,vigil_server=debug",
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let https = SocketAddr::from((node_host.ip, HTTPS_PORT));
    let loopback = SocketAddr::from(([127, 0, 0, 1], API_PORT));
    // With the token, from the outsider: the recording is there to be taken.
    let range = node
        .wait_for(
            "2 s of the demo recorded, read over HTTPS with the token",
            Duration::from_secs(30),
            Duration::from_millis(200),
            || {
                bed.within(&outsider, || {
                    let body = vigil_tests::tls::https_get(
                        &ca.pem,
                        https,
                        "localhost",
                        "/api/recordings/demo",
                        Some(ADMIN_TOKEN),
                    )
                    .ok()?;
                    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
                    let r = &v["ranges"][0];
                    let (a, b) = (r["start_ms"].as_i64()?, r["end_ms"].as_i64()?);
                    (b - a >= 2000).then_some((a, b))
                })
            },
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    let iso = vigil_tests::rfc3339;
    let export = format!(
        "/api/export/demo?start={}&end={}",
        iso(range.0),
        iso(range.0 + 2000)
    );
    let reads = [
        export.as_str(),
        "/hls/live/demo/index.m3u8",
        "/api/recordings/demo",
        "/api/sessions",
        "/api/cameras",
        "/api/paths",
        "/api/node",
        "/api/users",
        "/api/registry/cameras",
        "/api/cluster/sessions",
        "/metrics",
    ];
    let statuses = bed.within(&outsider, || {
        let mut out = Vec::new();
        for path in reads {
            out.push((
                format!("GET {path}"),
                https_status(&ca.pem, https, "GET", path, None),
            ));
        }
        out.push((
            "POST /whep/live/demo".into(),
            https_status(&ca.pem, https, "POST", "/whep/live/demo", None),
        ));
        out.push((
            "GET /api/health".into(),
            https_status(&ca.pem, https, "GET", "/api/health", None),
        ));
        out.push((
            format!("GET {export} with the token"),
            https_status(&ca.pem, https, "GET", &export, Some(ADMIN_TOKEN)),
        ));
        out.push((
            "GET /hls/live/demo/index.m3u8 with the token".into(),
            poll_every(
                Duration::from_millis(200),
                Duration::from_secs(15),
                "live HLS with the token",
                || {
                    let s = https_status(
                        &ca.pem,
                        https,
                        "GET",
                        "/hls/live/demo/index.m3u8",
                        Some(ADMIN_TOKEN),
                    );
                    (s == 200).then_some(s)
                },
            ),
        ));
        out
    });
    let n = reads.len() + 1;
    for (what, status) in &statuses[..n] {
        assert_eq!(*status, 401, "{what} over HTTPS without the token");
    }
    for (what, status) in &statuses[n..] {
        assert_eq!(*status, 200, "{what}");
    }
    // On the node's own host, the plain loopback listener grants nothing either once a
    // token exists (issue 44: who asks, not where from) — nor to a page naming another host.
    let (local, rebound) = bed.within(node_host, || {
        (
            plain_status(loopback, "/api/paths", "127.0.0.1:8080"),
            plain_status(loopback, "/api/paths", "evil.example:8080"),
        )
    });
    assert_eq!(local, 401, "a local read without credentials");
    assert_eq!(rebound, 401, "a local read naming another host");
    users_get_their_rights_and_no_more(&bed, &outsider, &ca.pem, https, range);
}

/// The guard (live on `demo`) and the investigator (live, playback and export of `demo`),
/// over HTTPS from another host with their Basic credentials: each gets what their rights
/// name and 403 beyond, and the lists they read name only their camera.
fn users_get_their_rights_and_no_more(
    bed: &vigil_testkit::hosts::Bed,
    outsider: &vigil_testkit::hosts::Host,
    ca: &std::path::Path,
    https: SocketAddr,
    range: (i64, i64),
) {
    let iso = vigil_tests::rfc3339;
    let export = format!(
        "/api/export/demo?start={}&end={}",
        iso(range.0),
        iso(range.0 + 2000)
    );
    let playback = format!("/hls/playback/demo/index.m3u8?start={}", iso(range.0));
    let guard = basic("guard", "guard-pw");
    let investigator = basic("investigator", "inv-pw");
    bed.within(outsider, || {
        let status = |who: &str, method: &str, path: &str| {
            https_answer(ca, https, method, path, Some(who)).0
        };
        assert_eq!(
            status(&guard, "GET", "/hls/live/demo/index.m3u8"),
            200,
            "guard: live HLS"
        );
        // A viewer's offer reaches WHEP (a bad SDP is the offer's fault, not a refusal).
        let whep = status(&guard, "POST", "/whep/live/demo");
        assert!(
            ![401, 403].contains(&whep),
            "guard: a WHEP offer for demo: {whep}"
        );
        for (path, what) in [
            (playback.as_str(), "playback HLS"),
            (export.as_str(), "export"),
            ("/api/recordings/demo", "the recordings of demo"),
            ("/hls/live/lobby/index.m3u8", "another camera's live HLS"),
            ("/metrics", "metrics"),
            ("/api/cluster/nodes", "the cluster view"),
            ("/api/users", "the users"),
        ] {
            assert_eq!(status(&guard, "GET", path), 403, "guard: {what}");
        }
        assert_eq!(
            status(&guard, "POST", "/whep/playback/demo"),
            403,
            "guard: a WHEP playback offer"
        );
        assert_eq!(
            status(&basic("guard", "wrong"), "GET", "/api/sessions"),
            401
        );
        // The lists name only what the user may see.
        let (s, cameras) = https_answer(ca, https, "GET", "/api/cameras", Some(&guard));
        assert_eq!(s, 200, "{cameras}");
        let cameras: serde_json::Value = serde_json::from_str(&cameras).expect("cameras JSON");
        let ids: Vec<&str> = cameras
            .as_array()
            .map(|a| a.iter().filter_map(|c| c["camera"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(ids, ["demo"], "the guard's camera list");
        let (s, all) = https_answer(
            ca,
            https,
            "GET",
            "/api/cameras",
            Some(&format!("Bearer {ADMIN_TOKEN}")),
        );
        assert!(
            s == 200 && all.contains("lobby"),
            "the admin sees lobby: {all}"
        );
        // The investigator may take the recording away.
        assert_eq!(
            status(&investigator, "GET", &export),
            200,
            "investigator: export"
        );
        assert_eq!(status(&investigator, "GET", "/api/recordings/demo"), 200);
        assert_eq!(
            status(&investigator, "GET", "/hls/live/lobby/index.m3u8"),
            403
        );
        // The routes this issue added, from the same host without credentials: the trail
        // is refused, `whoami` names nobody, and the guard's console sign-in over HTTPS
        // gets a cookie the page cannot read and that never travels over plain HTTP.
        assert_eq!(https_answer(ca, https, "GET", "/api/audit", None).0, 401);
        assert_eq!(status(&guard, "GET", "/api/audit"), 403, "guard: the trail");
        // API tokens: listing or making one is the admin role's, from any host; a refusal
        // names no token.
        for method in ["GET", "POST"] {
            let (s, body) = https_answer(ca, https, method, "/api/tokens", None);
            assert!(s == 401 && !body.contains("vigil_"), "{method}: {s} {body}");
            let (s, body) = https_answer(ca, https, method, "/api/tokens", Some(&guard));
            assert!(s == 403 && !body.contains("vigil_"), "guard {method}: {s} {body}");
        }
        let (s, me) = https_answer(ca, https, "GET", "/api/whoami", None);
        assert!(s == 200 && me.contains(r#""user":null"#), "{s}: {me}");
        let body = r#"{"user": "guard", "password": "guard-pw"}"#;
        let request = format!(
            "POST /api/signin HTTP/1.1\r\nHost: {https}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let answer = tls_request_from(None, ca, https, "localhost", &request)
            .expect("sign-in over HTTPS")
            .answer;
        assert_eq!(vigil_tests::status_of(&answer), 200, "{answer}");
        let cookie = answer
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
            .unwrap_or_else(|| panic!("no cookie: {answer}"));
        for part in ["vigil_session=", "HttpOnly", "SameSite=Strict", "Secure"] {
            assert!(cookie.contains(part), "{cookie}");
        }
        assert!(!answer.contains("guard-pw"), "the password came back: {answer}");
    });
}
