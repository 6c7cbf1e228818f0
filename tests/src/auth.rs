//! RTSP authentication helpers for the end-to-end tests: users made with `vigil user add`,
//! nodes with `[auth]`, and Digest exchanges computed as a client would.

use crate::{vigil_bin, Node, NodeBuilder, RtspConn, DEMO_CAMERA};
use std::io::Write;
use std::process::{Command, Stdio};
use vigil_proto::rtsp::auth::{ha1, Algorithm};
use vigil_proto::rtsp::Response;

pub const REALM: &str = "test-site";

/// `vigil user add --config FILE NAME ARGS` with the password on stdin.
pub fn user_add(file: &std::path::Path, name: &str, password: &str, args: &[&str]) {
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
pub fn auth_section(extra: &str) -> String {
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

/// An `[auth]` section (realm `realm`) with the people of a control room, made by `vigil
/// user add` in `dir`: `guard` (password `guard-pw`) may watch `demo` live and nothing else;
/// `investigator` (`inv-pw`) may also play it back and export it.
pub fn control_room(dir: &std::path::Path, realm: &str) -> String {
    let users = dir.join("users.toml");
    std::fs::write(&users, format!("[auth]\nrealm = \"{realm}\"\n")).expect("users");
    user_add(&users, "guard", "guard-pw", &["--read", "demo"]);
    user_add(
        &users,
        "investigator",
        "inv-pw",
        &["--read", "demo", "--playback", "demo", "--export", "demo"],
    );
    std::fs::read_to_string(&users).expect("users")
}

pub fn node_with_auth(extra_auth: &str, extra: &str) -> Node {
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
/// An HTTP `Authorization` value with `user:password` as Basic credentials.
pub fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

pub fn with_creds(node: &Node, user: &str, pass: &str, path: &str) -> String {
    format!("rtsp://{user}:{pass}@{}/{path}", node.rtsp)
}

/// DESCRIBE `url` with an `Authorization` header: the status.
pub fn status_with(c: &mut RtspConn, url: &str, authorization: &str) -> u16 {
    c.request("DESCRIBE", url, &[("Authorization", authorization)], None)
        .status
        .0
}

/// DESCRIBE `url` without credentials, then (on a 401) with a Digest answer to its `alg`
/// challenge for `(user, password, realm)`: the last answer.
pub fn login_response(
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
pub fn login(c: &mut RtspConn, url: &str, alg: Algorithm, creds: (&str, &str, &str)) -> u16 {
    login_response(c, url, alg, creds).status.0
}

/// The nonce of the challenge for `alg` in a 401.
pub fn nonce_of(r: &Response, alg: Algorithm) -> String {
    let c = r
        .headers
        .get_all("WWW-Authenticate")
        .find(|c| c.contains(&format!("algorithm={}", alg.name())))
        .unwrap_or_else(|| panic!("no {} challenge in {r:?}", alg.name()));
    let start = c.find("nonce=\"").expect("nonce") + 7;
    c[start..].split('"').next().expect("nonce").to_string()
}

/// A Digest `Authorization` value as a client computes it (qop=auth when `nc` is given).
pub fn digest(
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
