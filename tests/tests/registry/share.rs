//! The registry on the share: a corrupted version, restarts, two members sharing it.

use super::support::*;

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
    ctl_stdin(&node, &["user", "add", "guard", "--read", "*"], "pw-guard");
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

    // A node with another key on the same share: it starts, serves the newest version it
    // opens, says why, and writes nothing over what it cannot read.
    let (status, _) = post(
        &node,
        "/api/cameras",
        &json!({"id": "locked", "source": format!("rtsp://u:{PASSWORD}@127.0.0.1:9/x")}),
    );
    assert_eq!(status, 201);
    let other_key = format!("secret_key = \"{}\"", "ab".repeat(32));
    let stranger = NodeBuilder::new()
        .extra(&registry_tables(root.path(), &other_key))
        .start();
    // Every version is signed with the cluster's key (issue 44, H3): to a node with
    // another key none reads, and it serves none.
    let status = stranger.api_json("/api/registry");
    assert!(
        status["error"]
            .as_str()
            .is_some_and(|e| e.contains("not signed")),
        "{status}"
    );
    assert!(stranger
        .api_json("/api/registry/cameras")
        .as_array()
        .is_some_and(|a| a.is_empty()));
    let (code, answer) = post(
        &stranger,
        "/api/cameras",
        &json!({"id": "x", "source": "push"}),
    );
    assert_eq!(code, 503, "{answer}");
    assert_eq!(version(&node), v + 3, "the share is untouched");
}

/// Issue 44, H3, as its attack: whoever can write the share but holds no key adds a user
/// with every right to the newest version, recomputes the checksum and drops it on the
/// share as the next version. The node ignores it, says why (API, metric, log), and the
/// user cannot log in; the next operator write goes past it, signed.
#[test]
fn a_version_written_without_the_key_is_ignored_with_an_alert() {
    let _serial = serial();
    let root = tempfile::tempdir().expect("root");
    let node = NodeBuilder::new()
        .extra(&registry_tables(
            root.path(),
            &format!("{}\npoll_ms = 100", with_key()),
        ))
        .extra("[auth]\n[[camera]]\nid = \"demo\"\nsource = \"demo\"\non_demand = false")
        .start();
    node.wait_live("live/demo");
    ctl_stdin(&node, &["user", "add", "guard", "--read", "*"], "pw-guard");
    let v = version(&node);
    let dir = root.path().join("registry");
    let text = std::fs::read_to_string(dir.join(format!("v{v:012}.reg"))).expect("version file");
    let (_, json_text) = text.split_once('\n').expect("header line");
    let mut body: Value = serde_json::from_str(json_text).expect("reads whole");
    // Mallory with every right and a password of the intruder's choosing: valid HA1s for
    // the node's realm in clear (the guard's are sealed: the intruder cannot copy them), so
    // only the signature can keep her out.
    body["registry"]["users"]["mallory"] = json!({
        "name": "mallory",
        "ha1_md5": ha1(Algorithm::Md5, "mallory", "vigil", "pw-mallory"),
        "ha1_sha256": ha1(Algorithm::Sha256, "mallory", "vigil", "pw-mallory"),
        "read": ["*"], "playback": ["*"], "publish": ["*"],
    });
    body["change"]["version"] = json!(v + 1);
    let json_text = body.to_string();
    let forged = format!(
        "vigil-registry 1 version={} bytes={} sha256={}\n{json_text}",
        v + 1,
        json_text.len(),
        sha256_hex(json_text.as_bytes())
    );
    std::fs::write(dir.join(format!("v{:012}.reg", v + 1)), forged).expect("write");
    poll_until(
        Duration::from_secs(5),
        "the forged version reported",
        || {
            let s = node.api_json("/api/registry");
            s["error"]
                .as_str()
                .filter(|e| e.contains("not signed"))
                .map(|_| ())
        },
    );
    assert!(metric_value(&node, "vigil_registry_errors_total") >= 1.0);
    assert!(node.log().contains("not signed"), "logged");
    assert_eq!(version(&node), v, "the signed version stays");
    let users = node.api_json("/api/users");
    assert!(!users.to_string().contains("mallory"), "{users}");
    assert!(
        refused_as(&node, "mallory", "pw-mallory", "live/demo").is_some(),
        "the forged user logged in"
    );
    // The control: a user the operator added plays.
    assert_eq!(refused_as(&node, "guard", "pw-guard", "live/demo"), None);
    // The next write goes past it, signed, and clears the error.
    ctl(&node, &["camera", "add", "b"]);
    assert_eq!(version(&node), v + 2);
    assert!(node.api_json("/api/registry")["error"].is_null());
}

#[test]
fn two_members_sharing_a_root_apply_each_others_changes_within_two_seconds() {
    let _serial = serial();
    let cams = camera_node();
    let root = tempfile::tempdir().expect("root");
    let key = "registry-cluster-key";
    // No [registry] secret_key: the members derive the sealing key from the cluster key.
    let tables = registry_tables(root.path(), "");
    let (a, b) = two_members(key, &tables, "");

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

    // Every member restarted: the registry is exactly what it was, on both.
    let (cameras, users, v) = (
        a.api_json("/api/registry/cameras"),
        a.api_json("/api/users"),
        version(&a),
    );
    let (mut a, mut b) = (a, b);
    a.kill();
    b.kill();
    a.restart();
    b.restart();
    for n in [&a, &b] {
        assert_eq!(version(n), v);
        assert_eq!(n.api_json("/api/registry/cameras"), cameras);
        assert_eq!(n.api_json("/api/users"), users);
    }
}

/// A registry written before versions were signed (or by a node without a key) reads as
/// unsigned to a node with one; `vigil cluster sign-registry` writes its newest version
/// again, signed, as the next version, and says what it signed.
#[test]
fn sign_registry_adopts_an_unsigned_registry() {
    use vigil_registry::{ChangeRecord, RegistryDir, SecretKey};
    let root = tempfile::tempdir().expect("root");
    let old = RegistryDir::open(root.path()).expect("registry dir");
    let mut registry = vigil_registry::Registry::default();
    registry.cameras.insert(
        "gate".into(),
        vigil_registry::StoredCamera {
            camera: vigil_conf::CameraConfig::new("gate", vigil_conf::Source::Push),
            sealed_password: None,
        },
    );
    old.commit(
        1,
        &vigil_registry::format::Body {
            change: ChangeRecord::new(1, "seed", "old-node", Vec::new()),
            registry,
        },
    )
    .expect("an unsigned version 1");
    let config = root.path().join("vigil.toml");
    std::fs::write(&config, registry_tables(root.path(), &with_key())).expect("config");
    let out = vigil_tests::run_with_timeout(
        std::process::Command::new(vigil_tests::vigil_bin())
            .args(["cluster", "sign-registry", "--config"])
            .arg(&config),
        Duration::from_secs(20),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("signed version 1 as version 2") && said.contains("gate"),
        "{said}"
    );
    let mut key = [0u8; 32];
    for (i, b) in key.iter_mut().enumerate() {
        *b = u8::from_str_radix(&KEY[2 * i..2 * i + 2], 16).expect("hex");
    }
    let key = SecretKey::from_bytes(key);
    let bytes = std::fs::read(old.version_path(2)).expect("version 2");
    let body = vigil_registry::format::decode(2, &bytes, Some(&key)).expect("signed");
    assert!(body.registry.cameras.contains_key("gate"));
    let unsigned = std::fs::read(old.version_path(1)).expect("version 1");
    assert!(vigil_registry::format::decode(1, &unsigned, Some(&key)).is_err());
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
