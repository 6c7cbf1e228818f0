//! The camera and user registry on the shared root (issue 26 §1–§2), end to end: real
//! nodes, a "camera" node serving the demo clip behind a password, ffmpeg as the viewer
//! ("plays": `ffmpeg -v error` prints nothing and decodes frames).
//!
//! - cameras added, re-pointed, disabled, enabled and removed at runtime, seeded from the
//!   TOML on the first start, and no camera password in the logs, API answers or files;
//! - bad input (ids, schemes, duplicates, a bad import row, concurrent edits) and a
//!   10 000-row import, timed;
//! - a corrupted version on the share: the node keeps the last good one, says so, and a
//!   restart keeps the registry exactly;
//! - two cluster members sharing the root: each applies the other's change within 2 s
//!   (measured), the scheduler binds a camera added at runtime, a concurrent edit loses 409.

use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use vigil_proto::rtsp::auth::{ha1, Algorithm};
use vigil_tests::{
    api_send, ctl, ctl_fails, ffmpeg_decode, free_udp, metric_value, poll_until, serial,
    spawn_ffmpeg_decode, Decoded, Node, NodeBuilder, RtspConn,
};

/// The camera's password: it must appear nowhere but sealed in the registry.
const PASSWORD: &str = "Kn0wn-Camera-Passw0rd";
const KEY: &str = "5f2b8c0e9d4a7163b2c5e8f1a4d7b0c3e6f9a2d5c8b1e4f7a0d3c6b9e2f5a8d1";
const TCP: &[&str] = &["-rtsp_transport", "tcp"];

/// A "camera": a node on 127.0.0.2 serving the demo clip as `live/demo` and `live/demo2`,
/// to user `cam` with [`PASSWORD`] only.
fn camera_node() -> Node {
    let realm = "cams";
    let node = NodeBuilder::new()
        .ip("127.0.0.2")
        .extra(&format!(
            "[auth]\nrealm = \"{realm}\"\n[[auth.user]]\nname = \"cam\"\nha1_md5 = \"{}\"\n\
             ha1_sha256 = \"{}\"\nread = [\"*\"]\n\n\
             [[camera]]\nid = \"demo\"\nsource = \"demo\"\non_demand = false\n\n\
             [[camera]]\nid = \"demo2\"\nsource = \"demo\"\non_demand = false",
            ha1(Algorithm::Md5, "cam", realm, PASSWORD),
            ha1(Algorithm::Sha256, "cam", realm, PASSWORD),
        ))
        .start();
    node.wait_live("live/demo");
    node.wait_live("live/demo2");
    node
}

fn camera_url(cams: &Node, path: &str) -> String {
    format!("rtsp://cam:{PASSWORD}@{}/{path}", cams.rtsp)
}

/// `[storage]` on `root` and `[registry]` on, with `registry` keys (a secret key unless the
/// caller gives its own way to one).
fn registry_tables(root: &Path, registry: &str) -> String {
    format!(
        "[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n\n[registry]\nenabled = true\n{registry}\n",
        root.display()
    )
}

fn with_key() -> String {
    format!("secret_key = \"{KEY}\"")
}

fn post(node: &Node, path: &str, body: &Value) -> (u16, Value) {
    send(node, "POST", path, Some(body), &[])
}

fn send(
    node: &Node,
    method: &str,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let text = body.map(Value::to_string);
    let (status, answer) = api_send(
        node,
        method,
        path,
        text.as_deref().map(|t| ("application/json", t)),
        headers,
    );
    let v = serde_json::from_str(&answer).unwrap_or(Value::String(answer));
    (status, v)
}

fn version(node: &Node) -> u64 {
    node.api_json("/api/registry")["version"]
        .as_u64()
        .expect("a version")
}

fn record_ids(node: &Node) -> Vec<String> {
    node.api_json("/api/registry/cameras")
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Play sessions on `node` reading `path`.
fn viewers(node: &Node, path: &str) -> usize {
    node.api_json("/api/sessions")
        .as_array()
        .map_or(0, |s| s.iter().filter(|s| s["path"] == path).count())
}

/// `path` plays: ffmpeg decodes a second of it and prints nothing at `-v error`.
fn plays(node: &Node, path: &str) {
    let run = ffmpeg_decode(
        &node.url(path),
        TCP,
        &["-frames:v", "25"],
        Duration::from_secs(30),
    );
    assert!(
        run.stderr.is_empty() && run.frames >= 25,
        "{path} on {}: {run:?}",
        node.api
    );
}

/// An ffmpeg viewer of `path` (`output` options), once its session is on the node.
fn watching(node: &Node, path: &str, output: &[&str]) -> std::thread::JoinHandle<Decoded> {
    let viewer = spawn_ffmpeg_decode(&node.url(path), TCP, output, Duration::from_secs(40));
    poll_until(Duration::from_secs(10), "the viewer's session", || {
        (viewers(node, path) == 1).then_some(())
    });
    viewer
}

fn describe_status(node: &Node, path: &str) -> u16 {
    let mut c = RtspConn::connect(node.rtsp);
    c.request(
        "DESCRIBE",
        &node.url(path),
        &[("Accept", "application/sdp")],
        None,
    )
    .status
    .0
}

/// Every file under `dir`, read as text (lossy).
fn files_text(dir: &Path) -> String {
    let mut out = String::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.push_str(&String::from_utf8_lossy(
                    &std::fs::read(&p).unwrap_or_default(),
                ));
            }
        }
    }
    out
}

#[test]
fn a_camera_added_at_runtime_plays_follows_a_new_url_and_ends_its_viewers_when_removed() {
    let _serial = serial();
    let cams = camera_node();
    let root = tempfile::tempdir().expect("root");
    let node = NodeBuilder::new()
        .extra(&registry_tables(root.path(), &with_key()))
        .extra("[[camera]]\nid = \"seeded\"\nsource = \"push\"")
        .start();
    // The first start seeds the registry from the file.
    assert_eq!(record_ids(&node), ["seeded"]);
    let changes = node.api_json("/api/registry/changes");
    assert_eq!(changes[0]["by"], "seed", "{changes}");
    assert_eq!(version(&node), 1);

    // Added at runtime, always on: live within 2 s of the answer, and it plays.
    let added = Instant::now();
    let (status, answer) = send(
        &node,
        "POST",
        "/api/cameras",
        Some(&json!({"id": "gate", "source": camera_url(&cams, "live/demo"), "on_demand": false})),
        &[("X-Vigil-Actor", "test-operator")],
    );
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["changes"][0]["kind"], "camera_added", "{answer}");
    poll_until(Duration::from_secs(10), "gate live", || {
        node.path_info("live/gate")
            .filter(|p| p["live"] == true)
            .map(|_| ())
    });
    eprintln!("FIGURE added camera live after {:?}", added.elapsed());
    plays(&node, "live/gate");
    assert_eq!(
        node.api_json("/api/registry/changes")[0]["by"],
        "test-operator"
    );

    // Re-pointed while watched: the node pulls the new URL, the old pull ends, the viewer
    // decodes across the change without an error.
    let viewer = watching(&node, "live/gate", &["-t", "8"]);
    let repointed = Instant::now();
    let (status, answer) = send(
        &node,
        "PUT",
        "/api/cameras/gate",
        Some(&json!({"source": camera_url(&cams, "live/demo2")})),
        &[],
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["changes"][0]["fields"],
        json!(["source"]),
        "{answer}"
    );
    poll_until(Duration::from_secs(2), "the pull of the new URL", || {
        (viewers(&cams, "live/demo2") == 1).then_some(())
    });
    eprintln!(
        "FIGURE re-pointed pull connected after {:?}",
        repointed.elapsed()
    );
    poll_until(Duration::from_secs(5), "the old pull to end", || {
        (viewers(&cams, "live/demo") == 0).then_some(())
    });
    let run = viewer.join().expect("viewer");
    assert!(run.stderr.is_empty(), "errors across the re-point: {run:?}");
    assert!(run.frames >= 150, "{run:?}");

    // Disabled: its viewer ends, a new one gets 404; enabled again, it plays.
    let viewer = watching(&node, "live/gate", &[]);
    let disabled = Instant::now();
    let (status, answer) = send(
        &node,
        "PUT",
        "/api/cameras/gate",
        Some(&json!({"enabled": false})),
        &[],
    );
    assert_eq!(status, 200, "{answer}");
    let run = viewer.join().expect("viewer");
    assert!(
        disabled.elapsed() < Duration::from_secs(6),
        "viewer ended after {:?}: {run:?}",
        disabled.elapsed()
    );
    assert_eq!(describe_status(&node, "live/gate"), 404);
    let listed = node.api_json("/api/cameras");
    let gate = listed
        .as_array()
        .and_then(|l| l.iter().find(|c| c["camera"] == "gate"))
        .cloned();
    assert_eq!(
        gate.map(|g| g["state"].clone()),
        Some(json!("disabled")),
        "{listed}"
    );
    let (status, _) = send(
        &node,
        "PUT",
        "/api/cameras/gate",
        Some(&json!({"enabled": true})),
        &[],
    );
    assert_eq!(status, 200);
    plays(&node, "live/gate");

    // Removed while watched: the viewer ends, the camera is gone, its recordings stay.
    let viewer = watching(&node, "live/gate", &[]);
    let removed = Instant::now();
    let (status, answer) = send(&node, "DELETE", "/api/cameras/gate", None, &[]);
    assert_eq!(status, 200, "{answer}");
    let run = viewer.join().expect("viewer");
    assert!(
        removed.elapsed() < Duration::from_secs(6),
        "viewer ended after {:?}: {run:?}",
        removed.elapsed()
    );
    assert_eq!(send(&node, "GET", "/api/cameras/gate", None, &[]).0, 404);
    assert_eq!(describe_status(&node, "live/gate"), 404);
    poll_until(Duration::from_secs(5), "the camera's pull to end", || {
        (viewers(&cams, "live/demo2") == 0).then_some(())
    });
    let hours = std::fs::read_dir(root.path().join("cameras").join("gate"))
        .expect("gate's recordings")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("20"))
        .count();
    assert!(hours > 0, "the removed camera's recordings are kept");

    // The camera's password is nowhere: not in the log, the API, ctl or the files.
    let mut seen = node.log();
    for path in [
        "/api/cameras",
        "/api/registry/cameras",
        "/api/registry",
        "/api/registry/changes",
        "/api/paths",
        "/api/sessions",
        "/metrics",
    ] {
        seen.push_str(&api_send(&node, "GET", path, None, &[]).1);
    }
    let (status, _) = post(
        &node,
        "/api/cameras",
        &json!({"id": "door", "source": camera_url(&cams, "live/demo")}),
    );
    assert_eq!(status, 201);
    seen.push_str(&api_send(&node, "GET", "/api/cameras/door", None, &[]).1);
    seen.push_str(&ctl(&node, &["camera", "ls"]));
    seen.push_str(&ctl(&node, &["--json", "camera", "ls"]));
    let files = files_text(&root.path().join("registry"));
    assert!(
        files.contains("sealed_password"),
        "the password is stored sealed"
    );
    seen.push_str(&files);
    assert!(!seen.contains(PASSWORD), "the camera password leaked");
    assert!(
        seen.contains("rtsp://127.0.0.2"),
        "the URLs are shown, redacted"
    );
}

#[test]
fn bad_input_is_refused_whole_and_a_big_import_is_timed() {
    let _serial = serial();
    let root = tempfile::tempdir().expect("root");
    let node = NodeBuilder::new()
        .extra(&registry_tables(root.path(), &with_key()))
        .start();
    assert_eq!(version(&node), 1, "seeded empty");
    let (status, _) = post(&node, "/api/cameras", &json!({"id": "a", "source": "push"}));
    assert_eq!(status, 201);
    let v = version(&node);

    // Not path-safe ids, schemes other than rtsp(s), a duplicate, unknown fields.
    for (body, field) in [
        (json!({"id": "../etc", "source": "push"}), "id"),
        (json!({"id": "a/b", "source": "push"}), "id"),
        (json!({"id": ".hidden", "source": "push"}), "id"),
        (json!({"id": "", "source": "push"}), "id"),
        (json!({"id": "x", "source": "http://127.0.0.1/x"}), "source"),
        (json!({"id": "x", "source": "file:///etc/passwd"}), "source"),
        (json!({"id": "x", "source": "rtsp://"}), "source"),
        (json!({"id": "x", "colour": "red"}), "colour"),
        (json!({"id": "x", "segment_secs": 0.01}), "segment_secs"),
    ] {
        let (status, answer) = post(&node, "/api/cameras", &body);
        assert_eq!(
            (status, answer["field"].as_str()),
            (400, Some(field)),
            "{body}: {answer}"
        );
    }
    let (status, answer) = post(&node, "/api/cameras", &json!({"id": "a", "source": "push"}));
    assert_eq!(status, 409, "{answer}");
    // Without the token: refused before anything is read.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let r = agent
        .post(format!("http://{}/api/cameras", node.api))
        .header("Content-Type", "application/json")
        .send(json!({"id": "b"}).to_string())
        .expect("answer");
    assert_eq!(r.status().as_u16(), 401);
    // ctl says the same.
    let err = ctl_fails(node.api, &["camera", "add", "../x"]);
    assert!(err.contains("400") && err.contains("id"), "{err}");
    let err = ctl_fails(node.api, &["camera", "add", "c", "--source", "http://h/x"]);
    assert!(err.contains("400") && err.contains("source"), "{err}");
    let err = ctl_fails(node.api, &["camera", "rm", "nope"]);
    assert!(err.contains("404"), "{err}");

    // An import with one bad row changes nothing and names the row and field.
    let csv = "id,source,record\nc1,push,true\nc2,push,false\nc3,ftp://h/x,true\n";
    let (status, answer) = api_send(
        &node,
        "POST",
        "/api/cameras/import",
        Some(("text/csv", csv)),
        &[],
    );
    let answer: Value = serde_json::from_str(&answer).expect("json");
    assert_eq!(
        (status, answer["row"].as_u64(), answer["field"].as_str()),
        (400, Some(3), Some("source")),
        "{answer}"
    );
    let dup = json!([{"id": "d1"}, {"id": "d1"}]);
    let (status, answer) = post(&node, "/api/cameras/import", &dup);
    assert_eq!(
        (status, answer["row"].as_u64(), answer["field"].as_str()),
        (400, Some(2), Some("id")),
        "{answer}"
    );
    assert_eq!(version(&node), v, "nothing written");
    assert_eq!(record_ids(&node), ["a"]);
    let file = root.path().join("bad.csv");
    std::fs::write(&file, csv).expect("write");
    let err = ctl_fails(
        node.api,
        &["camera", "import", file.to_str().expect("path")],
    );
    assert!(err.contains("row 3") && err.contains("source"), "{err}");

    // Users: a password is taken as HA1 only; the API shows names and rights.
    let (status, answer) = post(
        &node,
        "/api/users",
        &json!({"name": "a:b", "password": "pw"}),
    );
    assert_eq!(
        (status, answer["field"].as_str()),
        (400, Some("name")),
        "{answer}"
    );
    let (status, _) = post(
        &node,
        "/api/users",
        &json!({"name": "guard", "password": "Gu4rd-pw", "read": ["gate-*"]}),
    );
    assert_eq!(status, 201);
    let users = api_send(&node, "GET", "/api/users", None, &[]).1;
    assert!(
        users.contains("gate-*") && !users.contains("ha1") && !users.contains("Gu4rd"),
        "{users}"
    );

    // Two edits made against the same version: one wins, the other gets 409 and the
    // version that won.
    let v = version(&node).to_string();
    let if_match = [("If-Match", v.as_str())];
    let a = send(
        &node,
        "PUT",
        "/api/cameras/a",
        Some(&json!({"group": "north"})),
        &if_match,
    );
    let b = send(
        &node,
        "PUT",
        "/api/cameras/a",
        Some(&json!({"group": "south"})),
        &if_match,
    );
    assert_eq!(a.0, 200, "{a:?}");
    assert_eq!(b.0, 409, "{b:?}");
    assert_eq!(b.1["version"], a.1["version"], "{b:?}");
    // Concurrent edits without a version (different cameras): both land, one after the other.
    std::thread::scope(|s| {
        for i in 0..4 {
            let node = &node;
            s.spawn(move || ctl(node, &["camera", "add", &format!("w{i}")]));
        }
    });
    let ids = record_ids(&node);
    assert!((0..4).all(|i| ids.contains(&format!("w{i}"))), "{ids:?}");

    // 10 000 rows in one import: validated whole, written as one version, applied.
    let mut csv = String::from("id,source,on_demand,record,group,labels\n");
    for i in 0..10_000 {
        csv.push_str(&format!(
            "bulk-{i:05},push,true,false,site-{},floor={}\n",
            i % 50,
            i % 7
        ));
    }
    let started = Instant::now();
    let (status, answer) = api_send(
        &node,
        "POST",
        "/api/cameras/import",
        Some(("text/csv", &csv)),
        &[],
    );
    let took = started.elapsed();
    assert_eq!(status, 200, "{answer}");
    let cameras = node.api_json("/api/registry")["cameras"].as_u64();
    assert_eq!(cameras, Some(10_005));
    eprintln!("FIGURE 10000-row CSV import (validate, seal, write, apply): {took:?}");
    let started = Instant::now();
    let (status, _) = send(&node, "DELETE", "/api/cameras/bulk-04321", None, &[]);
    assert_eq!(status, 200);
    eprintln!(
        "FIGURE one removal with 10005 cameras in the registry: {:?}",
        started.elapsed()
    );
    assert!(took < Duration::from_secs(60), "{took:?}");
    assert!(node.path_info("live/bulk-09999").is_some());
}

#[test]
fn a_corrupted_version_on_the_share_is_reported_and_the_last_good_one_kept() {
    let _serial = serial();
    let root = tempfile::tempdir().expect("root");
    let mut node = NodeBuilder::new()
        .extra(&registry_tables(
            root.path(),
            &format!("{}\npoll_ms = 100", with_key()),
        ))
        .extra("[[camera]]\nid = \"demo\"\nsource = \"demo\"\non_demand = false")
        .start();
    node.wait_live("live/demo");
    ctl(
        &node,
        &[
            "camera", "add", "a", "--group", "north", "--label", "site=x",
        ],
    );
    ctl(
        &node,
        &[
            "user",
            "add",
            "guard",
            "--password",
            "pw-guard",
            "--read",
            "*",
        ],
    );
    let v = version(&node);
    let before_cameras = node.api_json("/api/registry/cameras");
    let before_users = node.api_json("/api/users");

    // Version v+1 appears on the share with a byte changed (bit rot, a hand edit).
    let dir = root.path().join("registry");
    let text = std::fs::read_to_string(dir.join(format!("v{v:012}.reg"))).expect("version file");
    let mut bytes = text
        .replacen(&format!("version={v} "), &format!("version={} ", v + 1), 1)
        .into_bytes();
    let n = bytes.len();
    bytes[n - 3] ^= 0x01;
    let bad = dir.join(format!("v{:012}.reg", v + 1));
    std::fs::write(&bad, &bytes).expect("write");
    poll_until(Duration::from_secs(5), "the error reported", || {
        let s = node.api_json("/api/registry");
        s["error"]
            .as_str()
            .filter(|e| e.contains("checksum"))
            .map(|_| ())
    });
    assert!(metric_value(&node, "vigil_registry_errors_total") >= 1.0);
    assert!(node.log().contains("checksum mismatch"), "logged");
    let doctor = vigil_tests::run_with_timeout(
        std::process::Command::new(vigil_tests::vigil_bin())
            .args(["ctl", "--api", &format!("http://{}", node.api), "--config"])
            .arg(node.dir.path().join("vigil.toml"))
            .arg("doctor"),
        Duration::from_secs(30),
    );
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        said.lines()
            .any(|l| l.contains("registry") && l.contains("WARN"))
            && said.contains("checksum"),
        "doctor: {said}"
    );
    assert_eq!(version(&node), v, "the last good version stays");
    assert_eq!(node.api_json("/api/registry/cameras"), before_cameras);
    let run = ffmpeg_decode(
        &node.url("live/demo"),
        TCP,
        &["-frames:v", "10"],
        Duration::from_secs(20),
    );
    assert!(
        run.stderr.is_empty() && run.frames >= 10,
        "still serving: {run:?}"
    );

    // A restart with the corrupt version newest: the last good one, exactly.
    node.kill();
    node.restart();
    assert_eq!(version(&node), v);
    assert_eq!(node.api_json("/api/registry/cameras"), before_cameras);
    assert_eq!(node.api_json("/api/users"), before_users);
    assert!(node.log().contains("checksum mismatch"));

    // The next write goes past the corrupt version, and clears the error.
    ctl(&node, &["camera", "set", "a", "--enabled", "false"]);
    assert_eq!(version(&node), v + 2);
    assert!(node.api_json("/api/registry")["error"].is_null());
    // … and a clean restart keeps that, too.
    let after = node.api_json("/api/registry/cameras");
    node.kill();
    node.restart();
    assert_eq!(node.api_json("/api/registry/cameras"), after);
    assert_eq!(version(&node), v + 2);
}

#[test]
fn two_members_sharing_a_root_apply_each_others_changes_within_two_seconds() {
    let _serial = serial();
    let cams = camera_node();
    let root = tempfile::tempdir().expect("root");
    let key = "registry-cluster-key";
    // No [registry] secret_key: the members derive the sealing key from the cluster key.
    let tables = registry_tables(root.path(), "");
    let member = |gossip: &str, seed: Option<&str>, priority: u32| {
        vigil_tests::member_table(gossip, seed, key, priority, "")
    };
    let g1 = format!("127.0.0.1:{}", free_udp("127.0.0.1"));
    let a = NodeBuilder::new()
        .extra(&member(&g1, None, 10))
        .extra(&tables)
        .start();
    let g3 = format!("127.0.0.3:{}", free_udp("127.0.0.3"));
    let b = NodeBuilder::new()
        .ip("127.0.0.3")
        .extra(&member(&g3, Some(&g1), 20))
        .extra(&tables)
        .start();
    vigil_tests::wait_converged(&[&a, &b], Duration::from_secs(20));

    // Changes written through one member, applied by the other: measured.
    let mut lags = Vec::new();
    for i in 0..10 {
        let (writer, reader) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let (status, answer) = post(
            writer,
            "/api/cameras",
            &json!({"id": format!("p{i}"), "source": "push"}),
        );
        assert_eq!(status, 201, "{answer}");
        let written = Instant::now();
        let want = answer["version"].as_u64().expect("version");
        poll_until(
            Duration::from_secs(2),
            "the other member to apply it",
            || (version(reader) >= want).then_some(()),
        );
        lags.push(written.elapsed());
    }
    lags.sort();
    eprintln!(
        "FIGURE apply on the other member (poll_ms 500): p50 {:?}, max {:?} over {} changes",
        lags[lags.len() / 2],
        lags[lags.len() - 1],
        lags.len()
    );

    // An always-on pull camera with a password, added through b: the scheduler binds it,
    // its node pulls it (the other member opens the sealed password with the same key),
    // and a viewer of either member plays it.
    let (status, answer) = post(
        &b,
        "/api/cameras",
        &json!({"id": "gate", "source": camera_url(&cams, "live/demo"), "on_demand": false}),
    );
    assert_eq!(status, 201, "{answer}");
    let holder = poll_until(Duration::from_secs(20), "gate bound and live", || {
        let list = a.api_json("/api/cameras");
        let gate = list
            .as_array()?
            .iter()
            .find(|c| c["camera"] == "gate")?
            .clone();
        (gate["state"] == "live").then(|| gate["node"].as_str().map(str::to_string))?
    });
    eprintln!("gate bound to {holder}");
    for n in [&a, &b] {
        plays(n, "live/gate");
    }
    assert_eq!(viewers(&cams, "live/demo"), 1, "one member pulls it");

    // Both members edit the same version at once: one wins, the other gets 409.
    let v = version(&a).to_string();
    let h = [("If-Match", v.as_str())];
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| {
            send(
                &a,
                "PUT",
                "/api/cameras/p0",
                Some(&json!({"group": "A"})),
                &h,
            )
        });
        let tb = s.spawn(|| {
            send(
                &b,
                "PUT",
                "/api/cameras/p0",
                Some(&json!({"group": "B"})),
                &h,
            )
        });
        (ta.join().expect("a"), tb.join().expect("b"))
    });
    let mut statuses = [ra.0, rb.0];
    statuses.sort();
    assert_eq!(statuses, [200, 409], "{ra:?} {rb:?}");

    // Removed: both members drop it, the pull ends.
    let (status, _) = send(&a, "DELETE", "/api/cameras/gate", None, &[]);
    assert_eq!(status, 200);
    poll_until(Duration::from_secs(5), "the pull to end", || {
        (viewers(&cams, "live/demo") == 0).then_some(())
    });
    for n in [&a, &b] {
        poll_until(Duration::from_secs(2), "gate gone", || {
            (!record_ids(n).contains(&"gate".to_string())).then_some(())
        });
    }
    let files = files_text(&root.path().join("registry"));
    assert!(
        !files.contains(PASSWORD) && !a.log().contains(PASSWORD) && !b.log().contains(PASSWORD)
    );
}

/// `path` through ffmpeg as `user`: None when it plays, else what ffmpeg said.
fn refused_as(node: &Node, user: &str, password: &str, path: &str) -> Option<String> {
    let url = format!("rtsp://{user}:{password}@{}/{path}", node.rtsp);
    let run = ffmpeg_decode(&url, TCP, &["-frames:v", "10"], Duration::from_secs(20));
    (!(run.stderr.is_empty() && run.frames >= 10)).then_some(run.stderr)
}

#[test]
fn users_in_the_registry_log_in_and_a_sighup_keeps_them() {
    let _serial = serial();
    let root = tempfile::tempdir().expect("root");
    let realm = "site";
    let node = NodeBuilder::new()
        .extra(&registry_tables(root.path(), &with_key()))
        .extra(&format!(
            "[auth]\nrealm = \"{realm}\"\n[[auth.user]]\nname = \"seeded\"\nha1_md5 = \"{}\"\n\
             ha1_sha256 = \"{}\"\nread = [\"*\"]\n\n\
             [[camera]]\nid = \"demo\"\nsource = \"demo\"\non_demand = false",
            ha1(Algorithm::Md5, "seeded", realm, "seed-pw"),
            ha1(Algorithm::Sha256, "seeded", realm, "seed-pw"),
        ))
        .start();
    node.wait_live("live/demo");
    // The file's user seeded the registry and logs in; nobody else does.
    let users = node.api_json("/api/users");
    assert_eq!(users[0]["name"], "seeded", "{users}");
    assert_eq!(refused_as(&node, "seeded", "seed-pw", "live/demo"), None);
    let no = refused_as(&node, "nobody", "x", "live/demo").expect("refused");
    assert!(no.contains("401"), "{no}");

    // A user added at runtime logs in at once; its rights follow its edits.
    let out = ctl(
        &node,
        &[
            "user",
            "add",
            "guard",
            "--password",
            "Gu4rd-pw",
            "--read",
            "demo",
        ],
    );
    assert!(out.contains("registry version"), "{out}");
    assert_eq!(refused_as(&node, "guard", "Gu4rd-pw", "live/demo"), None);
    ctl(&node, &["user", "set", "guard", "--read", "gate-*"]);
    let no = refused_as(&node, "guard", "Gu4rd-pw", "live/demo").expect("no right");
    assert!(no.contains("403"), "{no}");
    let listed = ctl(&node, &["user", "ls"]);
    assert!(
        listed.contains("guard") && listed.contains("gate-*"),
        "{listed}"
    );
    assert!(metric_value(&node, "vigil_registry_changes_total{kind=\"user_added\"}") >= 1.0);
    assert!(metric_value(&node, "vigil_registry_changes_total{kind=\"user_changed\"}") >= 1.0);

    // SIGHUP re-reads [auth] from the file, and keeps the registry's users.
    let reloads = |n: &Node| n.log().matches("authentication reloaded").count();
    let before = reloads(&node);
    vigil_tests::signal(node.pid().expect("pid"), libc::SIGHUP);
    poll_until(Duration::from_secs(5), "the SIGHUP reload", || {
        (reloads(&node) > before).then_some(())
    });
    assert!(refused_as(&node, "guard", "Gu4rd-pw", "live/demo").is_some());
    assert_eq!(refused_as(&node, "seeded", "seed-pw", "live/demo"), None);

    // Removed: refused.
    ctl(&node, &["user", "rm", "seeded"]);
    let no = refused_as(&node, "seeded", "seed-pw", "live/demo").expect("removed");
    assert!(no.contains("401"), "{no}");
    assert!(!node.log().contains("Gu4rd-pw") && !node.log().contains("seed-pw"));
    assert!(!files_text(&root.path().join("registry")).contains("Gu4rd-pw"));
}
