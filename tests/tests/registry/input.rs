//! Refused input, imports (a 10 000-row one timed) and concurrent edits.

use super::support::*;

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
