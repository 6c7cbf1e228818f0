//! The admin API's bearer token.

use std::process::Command;
use std::time::Duration;
use vigil_tests::{metric_value, poll_until, run_with_timeout, vigil_bin, NodeBuilder};

/// The status of `METHOD url` (an empty body, `Connection: close`), over a raw socket.
fn http_status(method: &str, url: &str, token: Option<&str>) -> u16 {
    use std::io::{Read, Write};
    let u = url::Url::parse(url).expect("URL");
    let addr = format!(
        "{}:{}",
        u.host_str().expect("host"),
        u.port().expect("port")
    );
    let mut s = std::net::TcpStream::connect(&addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!(
        "{method} {} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n",
        u.path()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {answer:?}"))
}

/// The admin API's token layer covers every write route (here: POST/DELETE to existing and
/// unknown paths, answered 405/404 only once the token is right), and on a node with a token
/// reads on loopback need it too; wrong tokens count toward the address's back-off (issue 44, L1: past
/// `max_failures` even the right one waits, 429 with Retry-After); `vigil ctl` takes the
/// token from the node's config file or from the environment.
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
            // With the token the request reaches the route, which refuses it for its own
            // reasons (no such route or method, no JSON body, the cluster is off).
            let ok = http_status(method, &url, Some(vigil_tests::ADMIN_TOKEN));
            assert!(
                [400, 404, 405, 415].contains(&ok),
                "{method} {path} with the token: {ok}"
            );
        }
    }
    // Guesses: each one 401 up to `[auth] max_failures` (5 by default), then the address
    // waits, whatever it presents.
    let url = format!("http://{}/api/paths", node.api);
    for i in 0..5 {
        assert_eq!(http_status("POST", &url, Some("guess")), 401, "guess {i}");
    }
    assert_eq!(
        http_status("POST", &url, Some(vigil_tests::ADMIN_TOKEN)),
        429,
        "the right token while the address backs off"
    );
    poll_until(Duration::from_secs(10), "the back-off to end", || {
        (http_status("POST", &url, Some(vigil_tests::ADMIN_TOKEN)) == 405).then_some(())
    });
    assert!(
        metric_value(&node, "vigil_auth_refusals_total{reason=\"failure\"}") >= 5.0,
        "wrong tokens are counted"
    );
    // Loopback grants nothing once a token exists (issue 44): a read needs it too.
    assert_eq!(
        http_status("GET", &url, None),
        401,
        "a loopback read without the token"
    );
    assert!(
        node.try_api("/api/paths").is_some(),
        "a read with the token"
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
