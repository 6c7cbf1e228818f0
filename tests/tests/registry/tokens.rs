//! API tokens (issue 44 §1) and sealed user hashes (H3) on the share, end to end: tokens
//! made with `vigil ctl token add`, used by a real HTTP client and by Prometheus's way of
//! scraping (a bearer token), refused outside their scope, expired, and revoked on every
//! member that shares the registry.

use super::support::*;

fn bearer(secret: &str) -> String {
    format!("Bearer {secret}")
}

/// `GET path` on `node` with `secret` as the bearer token: the status and the body.
fn get_with(node: &Node, secret: &str, path: &str) -> (u16, String) {
    vigil_tests::api_send_as(node, "GET", path, None, &[], &bearer(secret))
}

#[test]
fn tokens_are_scoped_expire_and_are_revoked_on_every_member() {
    let _serial = serial();
    let root = tempfile::tempdir().expect("root");
    let tables = registry_tables(root.path(), &format!("{}\npoll_ms = 100", with_key()));
    let demo = "[[camera]]\nid = \"demo\"\nsource = \"demo\"\non_demand = false";
    let (a, b) = two_members("tokens-cluster-key", &tables, demo);

    // A metrics token made on a: its secret alone on stdout, the name on stderr.
    let secret = ctl(&a, &["token", "add", "prometheus", "--scope", "metrics"])
        .trim()
        .to_string();
    assert!(
        secret.starts_with("vigil_") && secret.len() > 40,
        "{secret}"
    );
    let want = version(&a);
    poll_until(Duration::from_secs(5), "b to apply the token", || {
        (version(&b) >= want).then_some(())
    });
    for node in [&a, &b] {
        let (status, text) = get_with(node, &secret, "/metrics");
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("vigil_"), "metrics answered");
        // Nothing beyond its scope: video, an export, a camera edit, the users.
        for (method, path) in [
            ("GET", "/hls/live/demo/index.m3u8"),
            ("GET", "/api/export/demo?start=0&end=1"),
            ("GET", "/api/users"),
            ("POST", "/api/cameras"),
            ("GET", "/api/tokens"),
        ] {
            let (status, text) =
                vigil_tests::api_send_as(node, method, path, None, &[], &bearer(&secret));
            assert_eq!(status, 403, "{method} {path}: {text}");
        }
    }
    // Lists name nothing it has no right on.
    let (status, text) = get_with(&a, &secret, "/api/cameras");
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("demo"), "{text}");

    // The list shows names and rights, never a secret or a hash.
    let listed = ctl(&a, &["token", "ls"]);
    assert!(
        listed.contains("prometheus") && listed.contains("metrics"),
        "{listed}"
    );
    let api_list = a.api_json("/api/tokens").to_string();
    let hash = hex_sha256(&secret);
    assert!(
        !api_list.contains(&secret) && !api_list.contains(&hash),
        "{api_list}"
    );
    // The share holds the hash, never the secret; no log holds either.
    let files = files_text(&root.path().join("registry"));
    assert!(files.contains(&hash) && !files.contains(&secret));
    for node in [&a, &b] {
        assert!(!node.log().contains(&secret), "the secret in a log");
    }
    // A token with camera rights is judged like a user with them, and who used it is on
    // record as the token.
    let read = ctl(&a, &["token", "add", "viewer", "--read", "demo"]);
    let viewer = read.trim().to_string();
    let (status, text) = get_with(&a, &viewer, "/hls/live/demo/index.m3u8");
    assert_eq!(status, 200, "{text}");
    let (status, _) = get_with(&a, &viewer, "/hls/playback/demo/index.m3u8");
    assert_eq!(status, 403, "live only");

    poll_until(
        Duration::from_secs(20),
        "the token's view on record",
        || {
            let v = a.api_json("/api/audit?user=token:viewer&limit=10");
            let records = v["records"].as_array()?.clone();
            records
                .iter()
                .any(|r| {
                    r["camera"] == "demo"
                        && r["kind"].as_str().is_some_and(|k| k.starts_with("live"))
                })
                .then_some(())
        },
    );
    // A guess is refused.
    let (status, _) = get_with(&a, "vigil_not-a-token", "/metrics");
    assert_eq!(status, 401);

    // Revoked through b: refused on both within a poll.
    ctl(&b, &["token", "rm", "prometheus"]);
    for node in [&a, &b] {
        poll_until(Duration::from_secs(5), "the revoked token refused", || {
            (get_with(node, &secret, "/metrics").0 == 401).then_some(())
        });
    }
    assert!(!ctl(&a, &["token", "ls"]).contains("prometheus"));
    // A token without any scope or right is refused, naming the field.
    let e = ctl_fails(a.api, &["token", "add", "nothing"]);
    assert!(e.contains("scope"), "{e}");
}

fn hex_sha256(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A token of the config file (`[[http.api_token]]`, what `vigil token add` writes): used
/// until its expiry, then refused; an expired one never counts as a guess.
#[test]
fn a_config_token_expires() {
    let _serial = serial();
    let live = "vigil_config-token-that-is-long-enough-0123456789";
    let dead = "vigil_expired-token-that-is-long-enough-0123456789";
    let node = NodeBuilder::new()
        .extra(&format!(
            "[[http.api_token]]\nname = \"scraper\"\nsha256 = \"{}\"\nmetrics = true\n\n\
             [[http.api_token]]\nname = \"old\"\nsha256 = \"{}\"\nmetrics = true\nexpires = 1000\n",
            hex_sha256(live),
            hex_sha256(dead)
        ))
        .start();
    assert_eq!(get_with(&node, live, "/metrics").0, 200);
    for _ in 0..8 {
        let (status, text) = get_with(&node, dead, "/metrics");
        assert_eq!(status, 401, "{text}");
        assert!(text.contains("expired"), "{text}");
    }
    // Eight expired presentations are no guesses: the address is not backing off.
    assert_eq!(get_with(&node, live, "/metrics").0, 200);
}

/// A node with `[auth]`, the registry on `root` (with its key) and the demo camera.
fn users_node(root: &Path) -> Node {
    NodeBuilder::new()
        .extra(&registry_tables(root, &with_key()))
        .extra("[auth]\n[[camera]]\nid = \"demo\"\nsource = \"demo\"\non_demand = false")
        .start()
}

/// The share never holds a user's Digest HA1 in clear: whoever reads it cannot log in.
#[test]
fn user_hashes_are_sealed_on_the_share() {
    let _serial = serial();
    let root = tempfile::tempdir().expect("root");
    let node = users_node(root.path());
    node.wait_live("live/demo");
    ctl_stdin(&node, &["user", "add", "guard", "--read", "*"], "pw-guard");
    let files = files_text(&root.path().join("registry"));
    for algorithm in [Algorithm::Md5, Algorithm::Sha256] {
        let h = ha1(algorithm, "guard", "vigil", "pw-guard");
        assert!(!files.contains(&h), "an HA1 in clear on the share");
    }
    assert!(files.contains("sealed_ha1"), "sealed");
    // The user still logs in (the node opens them in memory), over RTSP and HTTP.
    assert_eq!(refused_as(&node, "guard", "pw-guard", "live/demo"), None);
    let basic = format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "guard:pw-guard")
    );
    let (status, _) =
        vigil_tests::api_send_as(&node, "GET", "/hls/live/demo/index.m3u8", None, &[], &basic);
    assert_eq!(status, 200);
}

/// `path` on `node` with only `headers` (no admin token): the status and the body.
fn bare(
    node: &Node,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, String, Option<String>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", node.api))
        .header("Content-Type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = agent
        .run(req.body(body.to_string()).expect("request"))
        .expect("the node answers");
    let cookie = resp
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.split(';').next())
        .map(str::to_string);
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (resp.status().as_u16(), text, cookie)
}

/// A console session belongs to the password it signed in with: changing the password
/// (through the registry, from another operator) ends it on the next request.
#[test]
fn a_password_change_ends_console_sessions() {
    let _serial = serial();
    let root = tempfile::tempdir().expect("root");
    let node = users_node(root.path());
    ctl_stdin(&node, &["user", "add", "guard", "--read", "*"], "pw-old");
    let sign_in = |password: &str| {
        let body = format!(r#"{{"user": "guard", "password": "{password}"}}"#);
        bare(&node, "POST", "/api/signin", &body, &[])
    };
    let (status, text, cookie) = sign_in("pw-old");
    assert_eq!(status, 200, "{text}");
    let cookie = cookie.expect("a session cookie");
    let whoami = |cookie: &str| bare(&node, "GET", "/api/whoami", "", &[("Cookie", cookie)]).1;
    assert!(whoami(&cookie).contains("\"guard\""), "signed in");
    // A change of rights alone keeps the session (judged by the new rights).
    ctl(&node, &["user", "set", "guard", "--playback", "*"]);
    assert!(whoami(&cookie).contains("\"guard\""), "rights changed");
    ctl_stdin(
        &node,
        &["user", "set", "guard", "--password-stdin"],
        "pw-new",
    );
    let after = whoami(&cookie);
    assert!(
        !after.contains("\"guard\""),
        "the old password's session: {after}"
    );
    let (status, _, _) = bare(&node, "GET", "/api/sessions", "", &[("Cookie", &cookie)]);
    assert_eq!(status, 401);
    // The new password signs in.
    assert_eq!(sign_in("pw-new").0, 200);
}
