//! What the registry tests share: the password-protected camera node, registry nodes,
//! the admin API, and what a viewer and the files show.

pub use serde_json::{json, Value};
pub use std::path::Path;
pub use std::time::{Duration, Instant};
pub use vigil_proto::rtsp::auth::{ha1, Algorithm};
pub use vigil_tests::{
    api_send, ctl, ctl_fails, ctl_stdin, describe_status, ffmpeg_decode, files_text, free_udp,
    metric_value, poll_until, serial, spawn_ffmpeg_decode, Decoded, Node, NodeBuilder,
};

/// The camera's password: it must appear nowhere but sealed in the registry.
pub const PASSWORD: &str = "Kn0wn-Camera-Passw0rd";
pub const KEY: &str = "5f2b8c0e9d4a7163b2c5e8f1a4d7b0c3e6f9a2d5c8b1e4f7a0d3c6b9e2f5a8d1";
pub const TCP: &[&str] = &["-rtsp_transport", "tcp"];

/// A "camera": a node on 127.0.0.2 serving the demo clip as `live/demo` and `live/demo2`,
/// to user `cam` with [`PASSWORD`] only.
pub fn camera_node() -> Node {
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

pub fn camera_url(cams: &Node, path: &str) -> String {
    format!("rtsp://cam:{PASSWORD}@{}/{path}", cams.rtsp)
}

/// `[storage]` on `root` and `[registry]` on, with `registry` keys (a secret key unless the
/// caller gives its own way to one).
pub fn registry_tables(root: &Path, registry: &str) -> String {
    format!(
        "[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n\n[registry]\nenabled = true\n{registry}\n",
        root.display()
    )
}

pub fn with_key() -> String {
    format!("secret_key = \"{KEY}\"")
}

pub fn post(node: &Node, path: &str, body: &Value) -> (u16, Value) {
    send(node, "POST", path, Some(body), &[])
}

pub fn send(
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

pub fn version(node: &Node) -> u64 {
    node.api_json("/api/registry")["version"]
        .as_u64()
        .expect("a version")
}

pub fn record_ids(node: &Node) -> Vec<String> {
    node.api_json("/api/registry/cameras")
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Play sessions on `node` reading `path`.
pub fn viewers(node: &Node, path: &str) -> usize {
    node.api_json("/api/sessions")
        .as_array()
        .map_or(0, |s| s.iter().filter(|s| s["path"] == path).count())
}

/// `path` plays: ffmpeg decodes a second of it and prints nothing at `-v error`.
pub fn plays(node: &Node, path: &str) {
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
pub fn watching(node: &Node, path: &str, output: &[&str]) -> std::thread::JoinHandle<Decoded> {
    let viewer = spawn_ffmpeg_decode(&node.url(path), TCP, output, Duration::from_secs(40));
    poll_until(Duration::from_secs(10), "the viewer's session", || {
        (viewers(node, path) == 1).then_some(())
    });
    viewer
}

/// `path` through ffmpeg as `user`: None when it plays, else what ffmpeg said.
pub fn refused_as(node: &Node, user: &str, password: &str, path: &str) -> Option<String> {
    let url = format!("rtsp://{user}:{password}@{}/{path}", node.rtsp);
    let run = ffmpeg_decode(&url, TCP, &["-frames:v", "10"], Duration::from_secs(20));
    (!(run.stderr.is_empty() && run.frames >= 10)).then_some(run.stderr)
}

/// Two cluster members with the cluster key `key`, both with `tables` (the registry on one
/// root), the first (127.0.0.1, elected scheduler) with `first_extra` too; converged.
pub fn two_members(key: &str, tables: &str, first_extra: &str) -> (Node, Node) {
    let member = |gossip: &str, seed: Option<&str>, priority: u32| {
        vigil_tests::member_table(gossip, seed, key, priority, "")
    };
    let g1 = format!("127.0.0.1:{}", free_udp("127.0.0.1"));
    let a = NodeBuilder::new()
        .extra(&member(&g1, None, 10))
        .extra(tables)
        .extra(first_extra)
        .start();
    let g3 = format!("127.0.0.3:{}", free_udp("127.0.0.3"));
    let b = NodeBuilder::new()
        .ip("127.0.0.3")
        .extra(&member(&g3, Some(&g1), 20))
        .extra(tables)
        .start();
    vigil_tests::wait_converged(&[&a, &b], Duration::from_secs(20));
    (a, b)
}
