//! Cameras and users added, re-pointed, disabled and removed at runtime.

use super::support::*;

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
    // `vigil ctl camera add --password-stdin`: the password never on a command line.
    let mut add = std::process::Command::new(vigil_tests::vigil_bin())
        .env("VIGIL_API_TOKEN", vigil_tests::ADMIN_TOKEN)
        .args([
            "ctl",
            "--api",
            &format!("http://{}", node.api),
            "camera",
            "add",
            "door",
        ])
        .args(["--source", &format!("rtsp://cam@{}/live/demo", cams.rtsp)])
        .args(["--on-demand", "false", "--password-stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("vigil ctl");
    {
        use std::io::Write;
        let mut stdin = add.stdin.take().expect("stdin");
        writeln!(stdin, "{PASSWORD}").expect("password");
    }
    let out = add.wait_with_output().expect("vigil ctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    plays(&node, "live/door");
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
    let out = ctl_stdin(
        &node,
        &["user", "add", "guard", "--read", "demo"],
        "Gu4rd-pw",
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
