//! ONVIF onboarding (issue 26 §3) against a third-party device: PyPI's `ipycam` (its ONVIF
//! device, media and PTZ services, WS-Security digest check and WS-Discovery responder,
//! run by `tests/onvif/ipycam_device.py`), whose stream URI points at a vigil "camera" node
//! serving the demo clip behind the same user and password.
//!
//! - `vigil ctl discover` finds it (unicast probe to its port 3702 on loopback);
//! - `vigil ctl camera add --onvif` resolves the main profile's URI through the node, the
//!   camera is in the registry without its password, it plays (ffmpeg decodes with no
//!   error output); `--profile` picks another;
//! - the device restarted with another URI: `vigil ctl camera probe` re-points the camera;
//!   a second probe changes nothing;
//! - PTZ through the node (`vigil ctl ptz`, `POST /api/cameras/{id}/ptz`): presets, set,
//!   move, stop, go to; an RTSP user with the `ptz` right on the camera may steer it with
//!   Basic credentials, not another camera; commands beyond the per-camera rate get 429;
//! - a wrong password is refused with what the device said (502);
//! - the password appears nowhere in the node's log, the API answers or ctl's output;
//! - one discovery at a time per node (429 for another meanwhile; no device needed).
//!
//! Skipped (with a note) when `ipycam` is not installed, unless `CI=true`: then it fails.
//! `scripts/test` installs it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use vigil_proto::rtsp::auth::{ha1, Algorithm};
use vigil_tests::{
    api_send, ctl, ctl_fails_stdin, ctl_stdin, ffmpeg_decode, poll_until, serial, Node, NodeBuilder,
};

const USER: &str = "operator";
const PASSWORD: &str = "Onv1f-Kn0wn-Passw0rd";
const KEY: &str = "5f2b8c0e9d4a7163b2c5e8f1a4d7b0c3e6f9a2d5c8b1e4f7a0d3c6b9e2f5a8d1";
/// The device's address: the camera node's, since ipycam's stream URI names its own.
const DEVICE_IP: &str = "127.0.0.2";

/// ipycam importable by `python3`; skips (false) or, under CI, fails when it is not.
fn ipycam_installed() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import ipycam"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "ipycam (PyPI) is not installed: scripts/test installs it"
        );
        eprintln!("SKIP: ipycam (PyPI) is not installed: python3 -m pip install ipycam==1.3.0");
    }
    ok
}

/// The ipycam device on [`DEVICE_IP`] (HTTP on `port`, 0: any), handing out
/// `rtsp://DEVICE_IP:<cams' port>/<main>`; ended when dropped.
struct Device {
    child: Child,
    port: u16,
    /// ipycam writes its PTZ presets file into its working directory: kept out of the tree.
    _cwd: tempfile::TempDir,
}

impl Device {
    fn start(port: u16, cams: &Node, main: &str) -> Device {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/onvif/ipycam_device.py");
        let cwd = tempfile::tempdir().expect("a working directory");
        let mut child = Command::new("python3")
            .current_dir(cwd.path())
            .arg(script)
            .args(["--ip", DEVICE_IP, "--port", &port.to_string()])
            .args(["--user", USER, "--password", PASSWORD])
            .args(["--rtsp-port", &cams.rtsp.port().to_string()])
            .args(["--main", main, "--sub", "live/sub", "--discovery"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("ipycam_device.py says ready");
        let port = line
            .strip_prefix("ready ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("ipycam_device.py: {line}"));
        Device {
            child,
            port,
            _cwd: cwd,
        }
    }

    fn url(&self) -> String {
        format!("http://{DEVICE_IP}:{}/onvif/device_service", self.port)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.write_all(b"");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A "camera": a node serving the demo clip as `live/demo`, `live/demo2` and `live/sub`,
/// to [`USER`] with [`PASSWORD`] only.
fn camera_node() -> Node {
    let realm = "cams";
    let mut tables = format!(
        "[auth]\nrealm = \"{realm}\"\n[[auth.user]]\nname = \"{USER}\"\nha1_md5 = \"{}\"\n\
         ha1_sha256 = \"{}\"\nread = [\"*\"]\n",
        ha1(Algorithm::Md5, USER, realm, PASSWORD),
        ha1(Algorithm::Sha256, USER, realm, PASSWORD),
    );
    for id in ["demo", "demo2", "sub"] {
        tables.push_str(&format!(
            "\n[[camera]]\nid = \"{id}\"\nsource = \"demo\"\non_demand = false\n"
        ));
    }
    let node = NodeBuilder::new().ip("127.0.0.2").extra(&tables).start();
    node.wait_live("live/demo");
    node
}

/// `POST path` with a JSON body: the status and the answer's text (kept for the grep).
fn post(node: &Node, path: &str, body: &str, answers: &mut String) -> (u16, serde_json::Value) {
    let (status, text) = api_send(node, "POST", path, Some(("application/json", body)), &[]);
    answers.push_str(&text);
    (status, serde_json::from_str(&text).unwrap_or_default())
}

fn get(node: &Node, path: &str, answers: &mut String) -> serde_json::Value {
    let v = node.api_json(path);
    answers.push_str(&v.to_string());
    v
}

fn record<'a>(records: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    records
        .as_array()
        .and_then(|a| a.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("camera {id} in {records}"))
}

fn plays(node: &Node, path: &str) {
    let run = ffmpeg_decode(
        &node.url(path),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "25"],
        Duration::from_secs(30),
    );
    assert!(run.stderr.is_empty() && run.frames >= 25, "{path}: {run:?}");
}

/// `POST /api/cameras/{id}/ptz` with `user:password` Basic credentials: the status.
fn ptz_as(node: &Node, camera: &str, user: &str, password: &str, body: &str) -> u16 {
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let mut resp = ureq::post(&format!("http://{}/api/cameras/{camera}/ptz", node.api))
        .config()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .header("Authorization", format!("Basic {basic}"))
        .header("Content-Type", "application/json")
        .send(body)
        .expect("POST ptz");
    let _ = resp.body_mut().read_to_string();
    resp.status().as_u16()
}

/// The console's PTZ controls beside `gate`'s live view, in Chromium: shown, once signed
/// in, with the device's presets read through the node; an arrow, Stop and a preset go to
/// the device through the node and are answered 200.
fn console_steers(node: &Node) {
    let Some(browser) = vigil_tests::browser::Browser::start() else {
        return;
    };
    let wait = Duration::from_secs(30);
    browser.sign_in(
        &format!("http://{}/#cameras", node.api),
        vigil_tests::ADMIN_TOKEN,
    );
    browser.wait(
        "gate in the registry's list and its play button",
        wait,
        "const b = document.querySelector('#cameras tr[data-key=gate] .act-play'); \
         const r = (window.vigilRegistry.records || []).some((r) => r.id === 'gate' && r.onvif); \
         return r && b && !b.disabled;",
        vec![],
    );
    browser.click("#cameras tr[data-key=gate] .act-play");
    let presets = browser.wait(
        "the PTZ controls with the device's presets",
        wait,
        "const o = [...document.querySelectorAll('#ptz-presets option')].map((o) => o.value); \
         return !document.getElementById('player-ptz').hidden && o.length ? o : null;",
        vec![],
    );
    assert!(
        presets
            .as_array()
            .is_some_and(|p| p.iter().any(|v| v == "home")),
        "{presets}"
    );
    for (click, op) in [
        ("#player-ptz .ptz-move[data-pan='0.5']", "move"),
        ("#ptz-stop", "stop"),
        ("#ptz-goto", "goto_preset"),
    ] {
        browser.click(click);
        let seen = browser.wait(
            &format!("the {op} answer"),
            wait,
            "const s = window.vigilConsole.ptz; return s && s.op === arguments[0] ? s : null;",
            vec![serde_json::json!(op)],
        );
        assert_eq!(seen["status"], 200, "{op}: {seen}");
        browser.eval("window.vigilConsole.ptz = null; return true;", vec![]);
    }
    browser.assert_no_errors("steering PTZ from the console");
}

/// SOAP requests the node has sent to ONVIF devices (`vigil_onvif_requests_total`, every
/// operation).
fn onvif_requests(node: &Node) -> f64 {
    let text = node.try_api("/metrics").unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("vigil_onvif_requests_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .sum()
}

/// PTZ of `gate` (added through ONVIF) through the node.
fn steers(node: &Node, answers: &mut String) {
    let presets = ctl(node, &["ptz", "gate", "presets"]);
    assert!(presets.contains("home"), "{presets}");
    let set = ctl(node, &["ptz", "gate", "set", "Gate"]);
    let token = set
        .trim()
        .strip_prefix("preset ")
        .unwrap_or_else(|| panic!("{set}"))
        .to_string();
    assert!(ctl(node, &["ptz", "gate", "presets"]).contains(&token));
    for args in [
        &["ptz", "gate", "move", "--pan", "0.5", "--tilt", "-0.25"][..],
        &["ptz", "gate", "stop"],
        &["ptz", "gate", "goto", &token],
    ] {
        let out = ctl(node, args);
        assert_eq!(out.trim(), "done", "{args:?}");
    }
    // A command after the first goes straight to the PTZ service the first one found, at
    // the device's clock: one SOAP request, not three.
    let before = onvif_requests(node);
    let started = std::time::Instant::now();
    assert_eq!(ctl(node, &["ptz", "gate", "stop"]).trim(), "done");
    let took = started.elapsed();
    assert_eq!(
        onvif_requests(node) - before,
        1.0,
        "requests for one known PTZ command"
    );
    eprintln!("FIGURE a PTZ stop with the device known, through vigil ctl: {took:?}");
    // An RTSP user with the ptz right on gate only.
    let (status, answer) = post(
        node,
        "/api/users",
        r#"{"name": "guard", "password": "guard-pass", "read": ["*"], "ptz": ["gate"]}"#,
        answers,
    );
    assert_eq!(status, 201, "{answer}");
    poll_until(Duration::from_secs(5), "guard may steer gate", || {
        (ptz_as(node, "gate", "guard", "guard-pass", r#""stop""#) == 200).then_some(())
    });
    assert_eq!(ptz_as(node, "gate", "guard", "wrong", r#""stop""#), 401);
    assert_eq!(
        ptz_as(node, "other", "guard", "guard-pass", r#""stop""#),
        403
    );
    // The rate: a burst of 10, then 5 a second, per camera.
    let started = std::time::Instant::now();
    let statuses: Vec<u16> = (0..40)
        .map(|_| post(node, "/api/cameras/gate/ptz", r#""stop""#, answers).0)
        .collect();
    let elapsed = started.elapsed();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    eprintln!("FIGURE 40 PTZ stops in {elapsed:?}: {limited} answered 429");
    assert!(
        statuses.iter().all(|&s| s == 200 || s == 429),
        "{statuses:?}"
    );
    // 40 commands within 6 s exceed 10 + 5/s whatever the timing.
    assert!(
        limited > 0 || elapsed > Duration::from_secs(6),
        "{statuses:?}"
    );
    let (status, answer) = post(node, "/api/cameras/nope/ptz", r#""stop""#, answers);
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = post(node, "/api/cameras/gate/ptz", r#"{"spin": 1}"#, answers);
    assert_eq!(status, 400, "{answer}");
}

#[test]
fn an_ipycam_device_is_discovered_added_played_and_re_probed() {
    if !ipycam_installed() {
        return;
    }
    let _serial = serial();
    let cams = camera_node();
    let root = tempfile::tempdir().expect("root");
    let node = NodeBuilder::new()
        .extra(&format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n\n[registry]\nenabled = true\n\
             secret_key = \"{KEY}\"\n\n[onvif]\nrequest_timeout_ms = 5000\n\n\
             [auth]\nrealm = \"vigil\"\nanonymous = {{ read = [\"*\"] }}\n",
            root.path().display()
        ))
        .start();
    let device = Device::start(0, &cams, "live/demo");
    let mut answers = String::new();

    // Discovered: a unicast probe to the device's WS-Discovery port.
    let target = format!("{DEVICE_IP}:3702");
    let table = ctl(
        &node,
        &["discover", "--target", &target, "--timeout-ms", "1500"],
    );
    assert!(table.contains(&device.url()), "{table}");
    assert!(table.contains("1 device(s)"), "{table}");
    let (status, found) = post(
        &node,
        "/api/onvif/discover",
        &format!("{{\"target\": \"{target}\", \"timeout_ms\": 1500}}"),
        &mut answers,
    );
    assert_eq!(status, 200, "{found}");
    let d = &found["devices"][0];
    assert_eq!(d["xaddrs"][0], device.url(), "{found}");
    assert_eq!(d["name"], "ipycam-under-test", "{found}");

    // Added through ONVIF: the main profile's URI with the credentials, played.
    let out = ctl_stdin(
        &node,
        &[
            "camera",
            "add",
            "gate",
            "--onvif",
            &device.url(),
            "--user",
            USER,
            "--password-stdin",
            "--on-demand",
            "false",
        ],
        PASSWORD,
    );
    answers.push_str(&out);
    assert!(out.contains("profile Profile_Main 1920x1080 H264"), "{out}");
    assert!(out.contains("1 change(s)"), "{out}");
    let records = get(&node, "/api/registry/cameras", &mut answers);
    let gate = record(&records, "gate");
    assert_eq!(
        gate["source"],
        format!("rtsp://{}/live/demo", cams.rtsp),
        "{gate}"
    );
    assert_eq!(gate["has_password"], true, "{gate}");
    assert_eq!(gate["onvif"], device.url(), "{gate}");
    assert_eq!(gate["onvif_profile"], "Profile_Main", "{gate}");
    let listed = get(&node, "/api/cameras", &mut answers);
    assert!(listed.to_string().contains("\"gate\""), "{listed}");
    node.wait_live("live/gate");
    plays(&node, "live/gate");

    steers(&node, &mut answers);

    // Another profile by --profile, through the API.
    let (status, answer) = post(
        &node,
        "/api/cameras/gate-sub/onvif",
        &format!(
            "{{\"device\": \"{}\", \"user\": \"{USER}\", \"password\": \"{PASSWORD}\", \
             \"profile\": \"Profile_Sub\", \"camera\": {{\"record\": false}}}}",
            device.url()
        ),
        &mut answers,
    );
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        answer["onvif"]["profile"]["token"], "Profile_Sub",
        "{answer}"
    );
    assert_eq!(
        answer["onvif"]["uri"],
        format!("rtsp://{}/live/sub", cams.rtsp),
        "{answer}"
    );

    // The device now hands out another URI: probe re-points the camera, and it plays.
    let port = device.port;
    drop(device);
    let device = Device::start(port, &cams, "live/demo2");
    let out = ctl(&node, &["camera", "probe", "gate"]);
    answers.push_str(&out);
    assert!(out.contains("live/demo2"), "{out}");
    assert!(out.contains("1 change(s)"), "{out}");
    let changes = get(&node, "/api/registry/changes", &mut answers);
    assert_eq!(
        changes[0]["items"][0]["fields"],
        serde_json::json!(["source"]),
        "{changes}"
    );
    poll_until(Duration::from_secs(10), "the pull of the new URI", || {
        cams.api_json("/api/sessions")
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["path"] == "live/demo2"))
            .then_some(())
    });
    plays(&node, "live/gate");
    let out = ctl(&node, &["camera", "probe", "gate"]);
    assert!(out.contains("nothing to change"), "{out}");
    console_steers(&node);

    // A wrong password: refused with what the device said.
    let err = ctl_fails_stdin(
        node.api,
        &[
            "camera",
            "add",
            "bad",
            "--onvif",
            &device.url(),
            "--user",
            USER,
            "--password-stdin",
        ],
        "wrong",
    );
    answers.push_str(&err);
    assert!(err.contains("502"), "{err}");
    assert!(err.contains("refused the user's credentials"), "{err}");
    assert!(err.contains("Sender not authorized"), "{err}");
    let (status, answer) = post(
        &node,
        "/api/cameras/bad/onvif",
        "{\"device\": \"http://127.0.0.1:1/onvif/device_service\"}",
        &mut answers,
    );
    assert_eq!(status, 502, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap_or("")
            .contains("cannot reach"),
        "{answer}"
    );
    let (status, answer) = post(
        &node,
        "/api/cameras/.hidden/onvif",
        &format!("{{\"device\": \"{}\"}}", device.url()),
        &mut answers,
    );
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["field"], "id", "{answer}");

    // The password is nowhere but sealed.
    let mut files = String::new();
    let mut dirs = vec![root.path().join("registry")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir)
            .expect("the registry's files")
            .flatten()
        {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                files.push_str(&String::from_utf8_lossy(
                    &std::fs::read(&p).unwrap_or_default(),
                ));
            }
        }
    }
    assert!(
        files.contains("Profile_Main"),
        "the registry's files hold the camera"
    );
    for (what, text) in [
        ("the node's log", node.log()),
        ("the API answers and ctl's output", answers),
        ("the registry's files", files),
    ] {
        assert!(!text.contains(PASSWORD), "the password in {what}");
    }
}

#[test]
fn one_discovery_runs_at_a_time() {
    let _serial = serial();
    let node = NodeBuilder::new().start();
    // A "device" that never answers: the first probe waits its whole timeout.
    let mute = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let target = mute.local_addr().expect("addr");
    let probe = |timeout_ms: u64| {
        let body = format!(r#"{{"target": "{target}", "timeout_ms": {timeout_ms}}}"#);
        api_send(
            &node,
            "POST",
            "/api/onvif/discover",
            Some(("application/json", &body)),
            &[],
        )
    };
    std::thread::scope(|s| {
        // A long probe (asked again while a short one below holds the slot) …
        let long = s.spawn(|| {
            poll_until(Duration::from_secs(10), "the long probe admitted", || {
                let r = probe(3000);
                (r.0 != 429).then_some(r)
            })
        });
        // … and short ones until one meets it running (only it can refuse them).
        let (status, answer) = poll_until(Duration::from_secs(10), "a probe refused", || {
            let (status, answer) = probe(1);
            assert!(status == 200 || status == 429, "{status} {answer}");
            (status == 429).then_some((status, answer))
        });
        assert!(answer.contains("already running"), "{status} {answer}");
        let (status, answer) = long.join().expect("the long probe");
        assert_eq!(status, 200, "{answer}");
    });
    // Its slot is given back.
    let (status, answer) = probe(1);
    assert_eq!(status, 200, "{answer}");
    drop(mute);
}
