//! The audit trail (issue 44 §2), used and attacked: a guard's live view over RTSP (ffmpeg
//! with the guard's credentials), an investigator's export over HTTP, a console sign-in and
//! an admin's camera edit each appear with user, address, camera and range — through
//! `GET /api/audit` and `vigil ctl audit ls`; `vigil ctl audit verify` passes the trail as
//! written and names the record when a line is edited, removed or two are swapped.

use std::process::Command;
use std::time::Duration;
use vigil_tests::auth::{basic, control_room, user_add, with_creds};
use vigil_tests::export::export_path;
use vigil_tests::{
    api_send, api_send_as, ffmpeg_decode, poll_until, run_with_timeout, vigil_bin, NodeBuilder,
    DEMO_CAMERA,
};

const REGISTRY_KEY: &str = "7b3c9f0e1d2a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";

/// `vigil ctl --config CONFIG audit verify`: success and what it printed.
fn verify(config: &std::path::Path) -> (bool, String) {
    let out = run_with_timeout(
        Command::new(vigil_bin())
            .env_remove("VIGIL_API_TOKEN")
            .arg("ctl")
            .arg("--config")
            .arg(config)
            .args(["audit", "verify"]),
        Duration::from_secs(20),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn views_exports_and_changes_are_on_record_and_tampering_is_named() {
    let root = tempfile::tempdir().expect("root");
    let users = control_room(root.path(), "audit");
    let node = NodeBuilder::new()
        .extra(&format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 1\n\n[registry]\nenabled = true\nsecret_key = \"{REGISTRY_KEY}\"\n\n[audit]\ncheckpoint_secs = 1\n",
            root.path().join("share").display()
        ))
        .extra(DEMO_CAMERA)
        .extra(&users)
        .start();
    node.wait_live("live/demo");
    // The guard watches live over RTSP with their own credentials.
    let run = ffmpeg_decode(
        &with_creds(&node, "guard", "guard-pw", "live/demo"),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "25"],
        Duration::from_secs(30),
    );
    run.assert_plays("the guard", 25, 25);
    // The investigator exports two seconds of the recording over HTTP.
    let range = poll_until(Duration::from_secs(30), "2 s recorded", || {
        let v = node.api_json("/api/recordings/demo");
        let r = &v["ranges"][0];
        let (a, b) = (r["start_ms"].as_i64()?, r["end_ms"].as_i64()?);
        (b - a >= 2000).then_some(a)
    });
    let export = export_path("demo", range, range + 2000, false);
    let inv = basic("investigator", "inv-pw");
    let (status, _) = api_send_as(&node, "GET", &export, None, &[], &inv);
    assert_eq!(status, 200, "the investigator's export");
    // The guard signs in to the console; a wrong password is on record too.
    let signin = |password: &str| {
        api_send(
            &node,
            "POST",
            "/api/signin",
            Some((
                "application/json",
                &format!(r#"{{"user": "guard", "password": "{password}"}}"#),
            )),
            &[],
        )
        .0
    };
    assert_eq!(signin("nope"), 401);
    assert_eq!(signin("guard-pw"), 200);
    // The admin edits the camera.
    let (status, body) = api_send(
        &node,
        "PUT",
        "/api/cameras/demo",
        Some(("application/json", r#"{"group": "north"}"#)),
        &[],
    );
    assert!(status < 300, "{status}: {body}");

    // All of it in the trail, with who, where from, which camera and range.
    let records = poll_until(Duration::from_secs(20), "the records written", || {
        let v = node.api_json("/api/audit?limit=1000");
        let r = v["records"].as_array()?.clone();
        let kinds: Vec<&str> = r.iter().filter_map(|x| x["kind"].as_str()).collect();
        [
            "live.start",
            "live.stop",
            "export",
            "signin",
            "signin.failed",
            "change",
        ]
        .iter()
        .all(|k| kinds.contains(k))
        .then_some(r)
    });
    let find = |kind: &str, user: &str| {
        records
            .iter()
            .find(|r| r["kind"] == kind && r["user"] == user)
            .unwrap_or_else(|| panic!("no {kind} by {user}: {records:#?}"))
            .clone()
    };
    let live = find("live.start", "guard");
    assert_eq!(live["camera"], "demo");
    assert_eq!(live["protocol"], "rtsp");
    assert!(live["client"]
        .as_str()
        .is_some_and(|c| c.starts_with("127.0.0.1:")));
    let stop = find("live.stop", "guard");
    assert!(stop["detail"]["bytes"].as_u64().unwrap_or(0) > 0, "{stop}");
    let ex = find("export", "investigator");
    assert_eq!(ex["camera"], "demo");
    assert_eq!(ex["from_ms"].as_i64(), Some(range));
    assert_eq!(ex["to_ms"].as_i64(), Some(range + 2000));
    assert_eq!(ex["detail"]["status"], 200);
    find("signin", "guard");
    find("signin.failed", "guard");
    let change = find("change", "admin-token");
    assert_eq!(change["detail"]["path"], "/api/cameras/demo");
    assert_eq!(change["detail"]["method"], "PUT");
    // Filtered by camera and user, and through vigil ctl.
    let guard_only = node.api_json("/api/audit?user=guard&kind=live");
    let kinds: Vec<&str> = guard_only["records"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["kind"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        !kinds.is_empty() && kinds.iter().all(|k| k.starts_with("live.")),
        "{kinds:?}"
    );
    let table = vigil_tests::ctl(&node, &["audit", "ls", "--camera", "demo"]);
    assert!(
        table.contains("investigator") && table.contains("guard"),
        "{table}"
    );
    // Nobody but the admin reads the trail.
    assert_eq!(
        api_send_as(&node, "GET", "/api/audit", None, &[], &inv).0,
        403
    );

    // The proof: as written it holds; an edit, a removal and a swap are each named.
    let config = node.dir.path().join("vigil.toml");
    poll_until(Duration::from_secs(10), "a signed checkpoint", || {
        let (ok, text) = verify(&config);
        (ok && text.contains("OK") && !text.contains(" 0 signed")).then_some(())
    });
    // The day file holding the export (a run across midnight UTC has two).
    let day_file = std::fs::read_dir(root.path().join("share").join("audit"))
        .expect("audit dir")
        .filter_map(Result::ok)
        .flat_map(|node_dir| std::fs::read_dir(node_dir.path()).expect("node dir"))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains("\"investigator\"")))
        .expect("the day file of the export");
    let original = std::fs::read_to_string(&day_file).expect("trail");
    let lines: Vec<&str> = original.lines().collect();
    let victim = lines
        .iter()
        .position(|l| l.contains("\"investigator\"") && l.contains("\"export\""))
        .expect("the export's line");
    let rewrite = |lines: Vec<String>| {
        std::fs::write(&day_file, lines.join("\n") + "\n").expect("tamper");
    };
    let owned = || lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    let mut edited = owned();
    edited[victim] = edited[victim].replace("investigator", "somebody-else");
    let mut removed = owned();
    removed.remove(victim);
    let mut swapped = owned();
    swapped.swap(victim, victim + 1);
    // The first line whose link breaks (1-based): after an edit the line after it; after
    // a removal or a swap the line now where the victim was.
    for (what, tampered, breaks) in [
        ("edited", edited, victim + 2),
        ("removed", removed, victim + 1),
        ("swapped", swapped, victim + 1),
    ] {
        rewrite(tampered);
        let (ok, text) = verify(&config);
        assert!(!ok, "a trail with a record {what} verified: {text}");
        let named = format!("{}:{breaks}:", day_file.display());
        assert!(
            text.contains("FAIL") && text.contains(&named),
            "{what}: {text}"
        );
    }
    std::fs::write(&day_file, &original).expect("restore");
    let (ok, text) = verify(&config);
    assert!(ok, "{text}");
    console_shows_the_trail(&node);
}

/// The console's audit page, in headless Chromium signed in as the admin: "who exported
/// demo" is a search away.
fn console_shows_the_trail(node: &vigil_tests::Node) {
    let Some(browser) = vigil_tests::browser::Browser::start() else {
        return;
    };
    browser.sign_in(
        &format!("http://{}/#audit", node.api),
        vigil_tests::ADMIN_TOKEN,
    );
    browser.wait(
        "the audit page's records",
        Duration::from_secs(30),
        "const r = window.vigilConsole.audit; return r && r.length ? r.length : null;",
        vec![],
    );
    browser.type_into("#audit-camera", "demo");
    browser.type_into("#audit-kind", "export");
    browser.click("#audit-search");
    let rows = browser.wait(
        "the exports of demo",
        Duration::from_secs(30),
        "const rows = [...document.querySelectorAll('#audit tbody tr')] \
           .map(r => [...r.children].map(c => c.textContent)); \
         return rows.length && rows.every(r => r[2] === 'export') ? rows : null;",
        vec![],
    );
    let rows = rows.as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][3], "investigator", "{rows:?}");
    assert_eq!(rows[0][5], "demo", "{rows:?}");
    browser.assert_no_errors("on the audit page");
}

/// Benchmark (docs/BENCHMARKS.md "Trust"): what the audit trail adds to a session start,
/// and what a console sign-in takes. Two nodes side by side in one run, recording on, the
/// trail on one and off on the other; `rounds` RTSP viewers start on each in turn (DESCRIBE,
/// SETUP, PLAY over TCP, then the connection closes: a start and a stop in the trail), and
/// `rounds` sign-ins on the first.
#[test]
#[ignore = "benchmark: run with --ignored --nocapture (VIGIL_BIN=target/release/vigil for release figures)"]
fn bench_session_start_with_and_without_the_trail_and_signin() {
    let rounds = 300;
    let dir = tempfile::tempdir().expect("dir");
    let users = dir.path().join("users.toml");
    std::fs::write(
        &users,
        "[auth]\nrealm = \"bench\"\nanonymous = { read = [\"*\"] }\n",
    )
    .expect("users");
    user_add(&users, "guard", "guard-pw", &["--read", "demo"]);
    let users = std::fs::read_to_string(&users).expect("users");
    let start = |audit: bool, root: &str| {
        NodeBuilder::new()
            .extra(&format!(
                "[storage]\nroot = \"{}\"\n\n[audit]\nenabled = {audit}\n\n[limits]\nmax_sessions_per_address = 100000\nmax_connections_per_address = 100000\ndescribes_per_sec = 100000\ndescribe_burst = 100000\n",
                dir.path().join(root).display()
            ))
            .extra(DEMO_CAMERA)
            .extra(&users)
            .start()
    };
    let (on, off) = (start(true, "on"), start(false, "off"));
    on.wait_live("live/demo");
    off.wait_live("live/demo");
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        // Which node goes first alternates, so neither gains from the other's warm caches.
        let mut order = [(0, &on), (1, &off)];
        if round % 2 == 1 {
            order.reverse();
        }
        for (i, n) in order {
            let t = std::time::Instant::now();
            let mut c = vigil_tests::RtspConn::connect(n.rtsp);
            c.play_tcp(&n.url("live/demo"));
            times[i].push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let pct = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p) as usize]
    };
    for (i, what) in ["trail on", "trail off"].iter().enumerate() {
        let v = &mut times[i];
        println!(
            "session start (connect, DESCRIBE, SETUP, PLAY), {what}: p50 {:.2} ms, p99 {:.2} ms over {rounds}",
            pct(v, 0.5),
            pct(v, 0.99)
        );
    }
    let written = poll_until(
        Duration::from_secs(30),
        "every start and stop written",
        || {
            let text = on.try_api("/metrics")?;
            let n = text
                .lines()
                .find(|l| l.starts_with("vigil_audit_events_total{result=\"written\"}"))?
                .rsplit_once(' ')?
                .1
                .parse::<f64>()
                .ok()?;
            (n >= 2.0 * rounds as f64).then_some(n)
        },
    );
    println!("trail: {written} events written");
    let mut signins = Vec::new();
    for _ in 0..rounds {
        let t = std::time::Instant::now();
        let (status, _) = api_send(
            &on,
            "POST",
            "/api/signin",
            Some((
                "application/json",
                r#"{"user": "guard", "password": "guard-pw"}"#,
            )),
            &[],
        );
        assert_eq!(status, 200);
        signins.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "console sign-in (POST /api/signin, a new HTTP connection each): p50 {:.2} ms, p99 {:.2} ms over {rounds}",
        pct(&mut signins, 0.5),
        pct(&mut signins, 0.99)
    );
}
