//! Webhooks (issue 26 §4) against receivers in this test process on 127.0.0.1: a node's
//! events arrive signed (the signature verifies over the exact body), an event answered 500
//! comes again and is taken, the secret and the receiver's path are in no log or answer; a
//! receiver that never answers costs the node nothing a viewer or the API can see, while
//! its queue drops the oldest events and counts them; an `https://` receiver is verified
//! against `[tls] client_ca` (one whose certificate names another host gets nothing); the
//! scheduler reports itself up and elected, and a refused move is a `migration_failed`.

use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vigil_server::webhook::body::verify;
use vigil_tests::*;

const SECRET: &str = "whsec-Kn0wn-Webhook-Secret";
const KEY: &str = "3b1f0d5e7a9c2b4d6f8e0a1c3e5f7b9d2a4c6e8f0b1d3f5a7c9e0b2d4f6a8c1e";
const PATH_TOKEN: &str = "T0-B0-Path-Token-9f8e";
const WAIT: Duration = Duration::from_secs(30);

/// A request as the receiver took it, and what it answered.
#[derive(Debug, Clone)]
struct Hit {
    event: Option<String>,
    signature: Option<String>,
    body: Vec<u8>,
    status: u16,
}

/// A tiny HTTP receiver: one request per connection, answered from a script (200 after it).
struct Receiver {
    addr: SocketAddr,
    hits: Arc<Mutex<Vec<Hit>>>,
    scheme: &'static str,
}

impl Receiver {
    fn start(script: &[u16]) -> Receiver {
        Receiver::serve(script, None)
    }

    /// `tls`: serve HTTPS with this certificate chain and key.
    fn serve(script: &[u16], tls: Option<Arc<rustls::ServerConfig>>) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let addr = listener.local_addr().expect("its address");
        let hits = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(script.iter().copied().collect::<VecDeque<_>>()));
        let (h, a) = (hits.clone(), answers);
        let scheme = if tls.is_some() { "https" } else { "http" };
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                // A malformed request (or a refused handshake) is dropped: the node's retry
                // is what is under test.
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = match &tls {
                    None => take(conn, &h, &a),
                    Some(cfg) => rustls::ServerConnection::new(cfg.clone())
                        .ok()
                        .and_then(|s| take(rustls::StreamOwned::new(s, conn), &h, &a)),
                };
            }
        });
        Receiver { addr, hits, scheme }
    }

    /// Its URL, whose path is a token as many services' are (it must not be logged either).
    fn url(&self) -> String {
        format!("{}://{}/hook/{PATH_TOKEN}", self.scheme, self.addr)
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

fn take(
    mut conn: impl Read + Write,
    hits: &Mutex<Vec<Hit>>,
    answers: &Mutex<VecDeque<u16>>,
) -> Option<()> {
    let mut r = BufReader::new(&mut conn);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let (mut len, mut event, mut signature) = (0usize, None, None);
    loop {
        line.clear();
        r.read_line(&mut line).ok()?;
        let Some((k, v)) = line.trim_end().split_once(':') else {
            break;
        };
        match k.trim().to_ascii_lowercase().as_str() {
            "content-length" => len = v.trim().parse().ok()?,
            "x-vigil-event" => event = Some(v.trim().to_string()),
            "x-vigil-signature" => signature = Some(v.trim().to_string()),
            _ => {}
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    drop(r);
    let status = answers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pop_front()
        .unwrap_or(200);
    hits.lock().unwrap_or_else(|p| p.into_inner()).push(Hit {
        event,
        signature,
        body,
        status,
    });
    write!(
        conn,
        "HTTP/1.1 {status} Scripted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    conn.flush().ok()
}

/// A receiver that accepts connections and never answers.
fn dead_receiver() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
        }
    });
    addr
}

fn node_with(root: &std::path::Path, webhooks: &str) -> Node {
    NodeBuilder::new()
        .extra(&format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n\n[registry]\nenabled = true\n\
             secret_key = \"{KEY}\"\n\n[webhooks]\n{webhooks}\n\n{DEMO_CAMERA}",
            root.display()
        ))
        .start()
}

fn deliveries(node: &Node, result: &str) -> f64 {
    metric_value(
        node,
        &format!("vigil_webhook_deliveries_total{{result=\"{result}\"}}"),
    )
}

fn add_camera(node: &Node, id: &str) -> Duration {
    let t = Instant::now();
    let (status, answer) = api_send(
        node,
        "POST",
        "/api/cameras",
        Some((
            "application/json",
            &json!({"id": id, "source": "push"}).to_string(),
        )),
        &[],
    );
    assert_eq!(status, 201, "{answer}");
    t.elapsed()
}

#[test]
fn webhooks_deliver_signed_events_and_retry_a_refusal() {
    let receiver = Receiver::start(&[500]);
    let root = tempfile::tempdir().expect("root");
    let node = node_with(
        root.path(),
        &format!(
            "urls = [\"{}\"]\nsecret = \"{SECRET}\"\nbackoff_initial_ms = 100\n\
             backoff_max_ms = 200\nsample_ms = 200",
            receiver.url()
        ),
    );
    let id = node_id(&node);
    node.wait_live("live/demo");
    add_camera(&node, "gate");

    // The events this node saw: itself up, the demo camera live and recording, the change.
    let want = [
        ("node_up", "member", id.as_str()),
        ("camera_online", "camera", "demo"),
        ("recording_started", "camera", "demo"),
        ("registry_changed", "by", "api"),
    ];
    let bodies = poll_until(WAIT, "the node's events at the receiver", || {
        let bodies: Vec<Value> = receiver
            .hits()
            .iter()
            .filter(|h| h.status == 200)
            .filter_map(|h| serde_json::from_slice(&h.body).ok())
            .collect();
        want.iter()
            .all(|(e, k, v)| bodies.iter().any(|b| b["event"] == *e && b[k] == *v))
            .then_some(bodies)
    });
    let changed = bodies
        .iter()
        .find(|b| b["event"] == "registry_changed")
        .expect("registry_changed");
    assert_eq!(
        changed["changes"],
        json!(["camera_added gate"]),
        "{changed}"
    );

    let hits = receiver.hits();
    for h in &hits {
        let sig = h.signature.as_deref().unwrap_or("");
        assert!(
            verify(SECRET.as_bytes(), &h.body, sig),
            "the signature {sig:?} does not verify"
        );
        assert!(!verify(b"another secret", &h.body, sig));
        let v: Value = serde_json::from_slice(&h.body).expect("a JSON body");
        assert_eq!(h.event.as_deref(), v["event"].as_str(), "{v}");
        assert_eq!(v["node"], id.as_str());
        assert!(v["id"].as_str().is_some_and(|i| i.starts_with(&id)), "{v}");
        assert!(!String::from_utf8_lossy(&h.body).contains(SECRET));
    }
    // The first event was refused (500) and came again, byte for byte, and was taken.
    assert_eq!(hits[0].status, 500, "{hits:?}");
    assert!(
        hits[1..]
            .iter()
            .any(|h| h.body == hits[0].body && h.status == 200),
        "the refused event was not retried: {hits:?}"
    );
    // Disabled: the camera goes offline and its recording stops.
    let (status, answer) = api_send(
        &node,
        "PUT",
        "/api/cameras/demo",
        Some(("application/json", r#"{"enabled": false}"#)),
        &[],
    );
    assert_eq!(status, 200, "{answer}");
    poll_until(
        WAIT,
        "camera_offline and recording_stopped for demo",
        || {
            let events: Vec<Value> = receiver
                .hits()
                .iter()
                .filter_map(|h| serde_json::from_slice(&h.body).ok())
                .collect();
            ["camera_offline", "recording_stopped"]
                .iter()
                .all(|e| {
                    events
                        .iter()
                        .any(|b| b["event"] == *e && b["camera"] == "demo")
                })
                .then_some(())
        },
    );
    assert!(deliveries(&node, "retried") >= 1.0);
    assert!(deliveries(&node, "delivered") >= want.len() as f64);
    assert_eq!(deliveries(&node, "given_up"), 0.0);

    // The secret and the URL's path token: in no log line and no answer.
    let log = node.log();
    assert!(!log.contains(SECRET), "the node logged the secret");
    assert!(
        !log.contains(PATH_TOKEN),
        "the node logged the receiver's path"
    );
    for path in ["/api/node", "/metrics", "/api/registry", "/api/cameras"] {
        let (_, answer) = api_send(&node, "GET", path, None, &[]);
        assert!(
            !answer.contains(SECRET) && !answer.contains(PATH_TOKEN),
            "{path} answers the secret or the receiver's path"
        );
    }
}

#[test]
fn a_dead_receiver_does_not_slow_the_node_and_its_queue_drops_the_oldest() {
    let dead = dead_receiver();
    let root = tempfile::tempdir().expect("root");
    let node = node_with(
        root.path(),
        &format!(
            "urls = [\"http://{dead}/hook/{PATH_TOKEN}\"]\nsecret = \"{SECRET}\"\ntimeout_ms = 300\n\
             max_attempts = 2\nbackoff_initial_ms = 100\nbackoff_max_ms = 100\nqueue = 2\n\
             sample_ms = 100"
        ),
    );
    node.wait_live("live/demo");
    // A viewer decodes while the events pile up behind the receiver that never answers.
    let viewer = spawn_ffmpeg_decode(
        &node.url("live/demo"),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "100"],
        Duration::from_secs(60),
    );
    let slowest = (0..12)
        .map(|i| add_camera(&node, &format!("cam{i}")))
        .max()
        .unwrap_or_default();
    assert!(
        slowest < Duration::from_secs(2),
        "a registry write took {slowest:?} with a dead receiver"
    );
    let run = viewer.join().expect("the viewer thread");
    assert!(
        run.stderr.is_empty() && run.frames >= 100,
        "the viewer did not play cleanly: {run:?}"
    );
    // Twelve changes into a queue of two, each event held 2 × 300 ms: the oldest dropped.
    poll_until(WAIT, "dropped and given-up events counted", || {
        (metric_value(&node, "vigil_webhook_dropped_total") > 0.0
            && deliveries(&node, "given_up") >= 1.0)
            .then_some(())
    });
    assert_eq!(deliveries(&node, "delivered"), 0.0);
    // Given up and dropped events are logged by the receiver's origin only.
    let log = node.log();
    assert!(log.contains("webhook event given up"), "{log}");
    assert!(!log.contains(SECRET) && !log.contains(PATH_TOKEN), "{log}");
}

/// A rustls server config for the certificate and key files `issue` wrote.
fn server_tls(cert: &std::path::Path, key: &std::path::Path) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("the certificate file")
        .collect::<Result<_, _>>()
        .expect("a certificate");
    let key = PrivateKeyDer::from_pem_file(key).expect("the key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("a server config"),
    )
}

#[test]
fn an_https_receiver_is_verified_against_the_configured_ca() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = vigil_tests::tls::TestCa::new(dir.path());
    let (cert, key) = ca.issue(dir.path(), "hook", vigil_tests::tls::Leaf::Good);
    let (other, other_key) = ca.issue(
        dir.path(),
        "elsewhere",
        vigil_tests::tls::Leaf::OtherHost("elsewhere.example"),
    );
    let good = Receiver::serve(&[], Some(server_tls(&cert, &key)));
    let wrong_name = Receiver::serve(&[], Some(server_tls(&other, &other_key)));
    let root = tempfile::tempdir().expect("root");
    let node = node_with(
        root.path(),
        &format!(
            "urls = [\"{}\", \"{}\"]\nsecret = \"{SECRET}\"\nmax_attempts = 2\n\
             backoff_initial_ms = 100\nbackoff_max_ms = 100\nsample_ms = 200\n\n\
             [tls]\nclient_ca = \"{}\"",
            good.url(),
            wrong_name.url(),
            ca.pem.display()
        ),
    );
    node.wait_live("live/demo");
    add_camera(&node, "gate");
    let changed = poll_until(WAIT, "registry_changed over HTTPS", || {
        good.hits()
            .into_iter()
            .find(|h| h.event.as_deref() == Some("registry_changed"))
    });
    assert!(verify(
        SECRET.as_bytes(),
        &changed.body,
        changed.signature.as_deref().unwrap_or("")
    ));
    // The receiver whose certificate names another host never gets a request.
    poll_until(WAIT, "the wrong-name receiver's events given up", || {
        (deliveries(&node, "given_up") >= 1.0).then_some(())
    });
    assert!(wrong_name.hits().is_empty(), "{:?}", wrong_name.hits());
}

/// The scheduler's events and a migration's: a one-member cluster is its own scheduler, so
/// it reports itself up and elected; a move it refuses (a TCP viewer to itself) is a
/// `migration_failed` with the reason the API gave.
#[test]
fn the_scheduler_reports_members_and_the_election_and_a_refused_move() {
    let receiver = Receiver::start(&[]);
    let root = tempfile::tempdir().expect("root");
    let (node, _) = start_member(
        0,
        None,
        "webhook-test-key",
        10,
        &format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n\n[webhooks]\nurls = [\"{}\"]\n\
             secret = \"{SECRET}\"\nsample_ms = 200\n\n{DEMO_CAMERA}",
            root.path().display(),
            receiver.url()
        ),
    );
    let id = node_id(&node);
    poll_until(WAIT, "the node elected", || {
        (scheduler_of(&node).as_deref() == Some(id.as_str())).then_some(())
    });
    node.wait_live("live/demo");
    let _viewer = spawn_ffmpeg_decode(
        &node.url("live/demo"),
        &["-rtsp_transport", "tcp"],
        &["-t", "20"],
        Duration::from_secs(40),
    );
    let session = poll_until(WAIT, "the viewer's session", || {
        node.api_json("/api/sessions")
            .as_array()?
            .first()?
            .get("id")?
            .as_str()
            .map(str::to_string)
    });
    let (status, why) = api_send(
        &node,
        "POST",
        &format!("/api/sessions/{session}/migrate"),
        Some(("application/json", &json!({ "to": id }).to_string())),
        &[],
    );
    assert!(status >= 400, "{status} {why}");
    let events = poll_until(WAIT, "the scheduler's and the migration's events", || {
        let bodies: Vec<Value> = receiver
            .hits()
            .iter()
            .filter_map(|h| serde_json::from_slice(&h.body).ok())
            .collect();
        let has = |e: &str, k: &str, v: &str| bodies.iter().any(|b| b["event"] == e && b[k] == v);
        (has("node_up", "member", &id)
            && has("scheduler_changed", "scheduler", &id)
            && has("migration_failed", "session", &session))
        .then_some(bodies)
    });
    let failed = events
        .iter()
        .find(|b| b["event"] == "migration_failed")
        .expect("migration_failed");
    assert_eq!(failed["to"], id.as_str(), "{failed}");
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty() && why.contains(e)),
        "the event's reason is the API's: {failed} / {why}"
    );
}
