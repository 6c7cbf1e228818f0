//! WebRTC egress (issue 27 §1): a third-party WHEP client (aiortc from PyPI, decoding with
//! its own H.264 decoder) plays a live camera with zero decode errors, listed as a `webrtc`
//! session while it plays and released by its DELETE; and the bad input: a body that is not
//! SDP, an offer that is not SDP, an offer without H.264, an unknown camera, a flood of
//! offers from one address, a peer that never completes ICE and DTLS.

use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};
use vigil_tests::{poll_until, run_with_timeout, Node, NodeBuilder, DEMO_CAMERA};

/// The third-party client: `tests/clients/whep_play.py` (aiortc).
fn whep_play(url: &str, frames: u32, timeout_s: u32) -> serde_json::Value {
    whep_client(url, frames, timeout_s, &[])
}

/// `whep_play.py` with more arguments (`--steps`).
fn whep_client(url: &str, frames: u32, timeout_s: u32, extra: &[&str]) -> serde_json::Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/whep_play.py");
    let out = run_with_timeout(
        Command::new("python3")
            .arg(script)
            .arg(url)
            .arg(frames.to_string())
            .arg(timeout_s.to_string())
            .args(["--token", vigil_tests::ADMIN_TOKEN])
            .args(extra),
        Duration::from_secs(u64::from(timeout_s) + 30),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "whep_play.py printed no result ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// What a node answered an offer POSTed to it (no redirect followed).
struct Answer {
    status: u16,
    headers: ureq::http::HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// POST `body` to `url` as `content_type`, within 10 s.
fn post_to(url: &str, content_type: &str, body: &str) -> Answer {
    let mut resp = ureq::post(url)
        .header(
            "Authorization",
            &format!("Bearer {}", vigil_tests::ADMIN_TOKEN),
        )
        .config()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .header("Content-Type", content_type)
        .send(body)
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    Answer {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        body: resp.body_mut().read_to_string().unwrap_or_default(),
    }
}

/// POST an offer to `path` on `node`: the status and the body.
fn post_offer(node: &Node, path: &str, content_type: &str, body: &str) -> (u16, String) {
    let a = post_to(&format!("http://{}{path}", node.api), content_type, body);
    (a.status, a.body)
}

fn webrtc_sessions(node: &Node) -> Vec<serde_json::Value> {
    node.api_json("/api/sessions")
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|s| s["kind"] == "webrtc")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// An offer as aiortc 1.16 makes it (receive-only H.264 and VP8 video), its candidates on
/// loopback: what a viewer sends before it ever answers an ICE check.
const OFFER: &str = "v=0\r\no=- 4005404618 4005404618 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n\
a=group:BUNDLE 0\r\na=msid-semantic:WMS *\r\n\
m=video 42776 UDP/TLS/RTP/SAVPF 97 98 99 100\r\nc=IN IP4 127.0.0.1\r\na=recvonly\r\n\
a=extmap:1 urn:ietf:params:rtp-hdrext:sdes:mid\r\na=mid:0\r\na=rtcp:9 IN IP4 0.0.0.0\r\n\
a=rtcp-mux\r\na=rtpmap:97 VP8/90000\r\na=rtcp-fb:97 nack\r\na=rtcp-fb:97 nack pli\r\n\
a=rtpmap:98 rtx/90000\r\na=fmtp:98 apt=97\r\na=rtpmap:99 H264/90000\r\na=rtcp-fb:99 nack\r\n\
a=rtcp-fb:99 nack pli\r\n\
a=fmtp:99 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f\r\n\
a=rtpmap:100 rtx/90000\r\na=fmtp:100 apt=99\r\n\
a=candidate:1 1 udp 2130706431 127.0.0.1 42776 typ host\r\na=end-of-candidates\r\n\
a=ice-ufrag:4tLe\r\na=ice-pwd:3sCjg59lxlBDyc2eD67zXJ\r\n\
a=fingerprint:sha-256 2F:30:4E:1C:15:44:DA:73:09:E9:C3:2A:01:FB:1A:CC:CB:59:0F:B0:FC:7E:D7:C5:AD:AA:0F:77:95:1B:D1:2B\r\n\
a=setup:actpass\r\n";

#[test]
fn a_third_party_whep_client_plays_live_with_zero_decode_errors() {
    let node = NodeBuilder::new().extra(DEMO_CAMERA).start();
    let url = format!("http://{}/whep/live/demo", node.api);
    let api = format!("http://{}", node.api);
    // While it plays, the viewer is a `webrtc` session of the camera's path, with the
    // reception its receiver reports tell (round trip from RR; REMB when aiortc sends one).
    let watcher = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = None;
        while Instant::now() < deadline {
            let body = vigil_testkit::serve::api_get_as(
                &api,
                "/api/sessions",
                Some(vigil_tests::ADMIN_TOKEN),
            )
            .unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let now = v.as_array().and_then(|a| {
                a.iter().find(|s| s["kind"] == "webrtc").map(|s| {
                    (
                        s["path"].clone(),
                        s["transport"].clone(),
                        s["feedback"].clone(),
                    )
                })
            });
            match now {
                Some(n) if n.2["rtt_ms"].is_number() => return Some(n),
                Some(n) => seen = Some(n),
                None if seen.is_some() => return seen,
                None => {}
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    });
    let run = whep_play(&url, 100, 30);
    assert_eq!(run["status"], 201, "{run}");
    assert_eq!(run["frames"], 100, "aiortc decoded too few frames: {run}");
    assert_eq!(
        run["errors"].as_array().map(Vec::len),
        Some(0),
        "decode errors: {run}"
    );
    assert_eq!(run["size"], serde_json::json!([640, 360]), "{run}");
    assert_eq!(run["delete"], 200, "DELETE of the resource: {run}");
    let (path, transport, feedback) = watcher.join().unwrap().expect("a webrtc session listed");
    eprintln!("the viewer's feedback: {feedback}");
    assert_eq!(path, "live/demo");
    let rtt = feedback["rtt_ms"].as_f64().unwrap_or(-1.0);
    assert!(
        (0.0..1000.0).contains(&rtt),
        "round trip from the viewer's receiver reports: {feedback}"
    );
    assert!(feedback["nacks"].is_u64(), "{feedback}");
    assert!(
        transport
            .as_str()
            .is_some_and(|t| t.starts_with("WebRTC/UDP")),
        "{transport}"
    );
    // The DELETE ended it: the session and its state are gone.
    poll_until(Duration::from_secs(5), "the webrtc session to end", || {
        webrtc_sessions(&node).is_empty().then_some(())
    });
    let resource = run["resource"].as_str().unwrap_or_default().to_string();
    let gone = ureq::delete(&resource)
        .header(
            "Authorization",
            &format!("Bearer {}", vigil_tests::ADMIN_TOKEN),
        )
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .map(|r| r.status().as_u16());
    assert_eq!(gone.ok(), Some(404), "a second DELETE of {resource}");
}

/// A recording over WebRTC: the RTSP playback's sender (pacing, the range's end) behind a
/// WHEP resource; aiortc decodes it with zero errors, and a range that ends ends the peer.
#[test]
fn a_recording_plays_over_whep_from_a_moment_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let start = vigil_server::cluster::now_ms() as i64 - 3_600_000;
    vigil_tests::export::synthetic_recording(dir.path(), "vault", start, 30);
    let node = NodeBuilder::new()
        .extra(&format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 4.0\n",
            dir.path().display()
        ))
        .start();
    let from = vigil_tests::rfc3339(start + 5_000);
    let url = format!("http://{}/whep/playback/vault?start={from}", node.api);
    let t0 = Instant::now();
    let run = whep_play(&url, 75, 30);
    eprintln!("recording over WHEP: {run} in {:?}", t0.elapsed());
    assert_eq!(run["status"], 201, "{run}");
    assert_eq!(run["frames"], 75, "{run}");
    assert_eq!(run["errors"].as_array().map(Vec::len), Some(0), "{run}");
    assert_eq!(run["delete"], 200, "{run}");
    // A range of 2 s: the sender stops at its end and the peer with it.
    let to = vigil_tests::rfc3339(start + 7_000);
    let (s, body) = post_offer(
        &node,
        &format!("/whep/playback/vault?start={from}&end={to}"),
        "application/sdp",
        OFFER,
    );
    assert_eq!(s, 201, "{body}");
    // Its peer never connects (the canned offer), so it is released by the connect bound;
    // a time with no recording is 404, a bad start 400.
    let (s, body) = post_offer(
        &node,
        "/whep/playback/vault?start=2001-01-01T00:00:00Z",
        "application/sdp",
        OFFER,
    );
    assert_eq!(s, 404, "{body}");
    let (s, body) = post_offer(
        &node,
        "/whep/playback/vault?start=yesterday",
        "application/sdp",
        OFFER,
    );
    assert_eq!(s, 400, "{body}");
}

/// The median step between consecutive RTP timestamps (90 kHz) of decoded frames.
fn median_step(pts: &serde_json::Value) -> i64 {
    let pts: Vec<i64> = pts
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_i64()).collect())
        .unwrap_or_default();
    let mut steps: Vec<i64> = pts.windows(2).map(|w| w[1] - w[0]).collect();
    steps.sort_unstable();
    steps.get(steps.len() / 2).copied().unwrap_or(0)
}

/// A recording steered through its WHEP resource while aiortc decodes it: a seek lands on
/// the keyframe before the time asked, Scale 2 halves the RTP timestamp step the browser
/// plays by (frames at 2× real time), a pause stops the frames and a resume continues the
/// line by the time paused; zero decode errors throughout, and bad controls are refused.
#[test]
fn a_recording_over_whep_seeks_pauses_and_changes_speed() {
    let dir = tempfile::tempdir().unwrap();
    let start = vigil_server::cluster::now_ms() as i64 - 3_600_000;
    vigil_tests::export::synthetic_recording(dir.path(), "vault", start, 40);
    let node = NodeBuilder::new()
        .extra(&format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 4.0\n",
            dir.path().display()
        ))
        .start();
    let from = vigil_tests::rfc3339(start + 2_000);
    let seek_to = start + 25_000;
    let steps = serde_json::json!([
        {"control": {"op": "seek", "at": vigil_tests::rfc3339(seek_to)}},
        {"frames": 25},
        {"state": true},
        {"control": {"op": "scale", "scale": 2}},
        {"frames": 30},
        {"control": {"op": "scale", "scale": 1}},
        {"control": {"op": "pause"}},
        // Frames sent before the pause was answered may still be on their way or in the
        // jitter buffer: drained first.
        {"idle": 0.5},
        {"idle": 1.0},
        {"state": true},
        {"control": {"op": "resume"}},
        {"frames": 10},
        {"control": {"op": "scale", "scale": -1}},
        {"control": {"op": "seek", "at": "2001-01-01T00:00:00Z"}},
        {"control": {"op": "rewind"}},
    ])
    .to_string();
    let url = format!("http://{}/whep/playback/vault?start={from}", node.api);
    let run = whep_client(&url, 25, 60, &["--steps", &steps]);
    eprintln!("steered recording over WHEP: {run}");
    assert_eq!(run["frames"], 25, "{run}");
    assert_eq!(run["errors"].as_array().map(Vec::len), Some(0), "{run}");
    let step = |i: usize| run["steps"][i].clone();
    let answer = |i: usize| -> serde_json::Value {
        serde_json::from_str(step(i)["answer"].as_str().unwrap_or("null")).unwrap_or_default()
    };
    assert_eq!(step(0)["status"], 200, "seek: {run}");
    // The seek's frames: the position is past the keyframe before the time asked (GOPs of
    // the demo clip are 2 s at most) and not before it.
    let pos = answer(2)["position_ms"].as_i64().unwrap_or(0);
    assert!(
        (seek_to - 2_000..=seek_to + 3_000).contains(&pos),
        "position {pos} after the seek to {seek_to}: {run}"
    );
    assert_eq!(
        median_step(&step(1)["pts"]),
        3_600,
        "25 fps at Scale 1: {run}"
    );
    assert_eq!(answer(3)["scale"], 2.0, "{run}");
    assert_eq!(
        median_step(&step(4)["pts"]),
        1_800,
        "Scale 2: frames 20 ms apart on the browser's clock: {run}"
    );
    assert_eq!(answer(6)["paused"], true, "{run}");
    assert!(
        step(7)["idle_frames"].as_i64().is_some_and(|n| n <= 2),
        "frames in flight at the pause: {run}"
    );
    assert_eq!(step(8)["idle_frames"], 0, "frames while paused: {run}");
    assert_eq!(answer(9)["paused"], true, "{run}");
    // The resume: the line went on by the time paused (the idles: 1.5 s at least), then
    // 25 fps. (The last frame before the pause may come out of the jitter buffer only with
    // the first after it.)
    let pts: Vec<i64> = [step(4)["pts"].clone(), step(11)["pts"].clone()]
        .iter()
        .filter_map(|v| v.as_array().cloned())
        .flatten()
        .filter_map(|v| v.as_i64())
        .collect();
    let jump = pts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    assert!(
        jump >= 135_000,
        "the timestamp line across a pause of ≥ 1.5 s moved {jump} ticks: {run}"
    );
    assert_eq!(median_step(&step(11)["pts"]), 3_600, "{run}");
    assert_eq!(step(12)["status"], 400, "reverse play: {run}");
    assert_eq!(step(13)["status"], 404, "a seek to no recording: {run}");
    assert_eq!(step(14)["status"], 400, "an unknown op: {run}");
    assert_eq!(run["delete"], 200, "{run}");
}

/// A camera's tracks WebRTC cannot carry are named, not silently left out: H.264 with AAC
/// is answered (video only) with the AAC named in `X-Vigil-Not-Carried`; an H.265 camera is
/// refused 415 naming its codec. Both published by ffmpeg.
#[test]
fn tracks_webrtc_does_not_carry_are_named_in_the_answer() {
    let node = NodeBuilder::new().start();
    let _av = vigil_tests::ffmpeg_publish(
        &vigil_tests::fixture("h264_aac.mp4"),
        &node.url("live/av"),
        true,
    );
    let _hevc = vigil_tests::ffmpeg_publish(
        &vigil_tests::fixture("h265.mp4"),
        &node.url("live/hevc"),
        true,
    );
    let offer = |camera: &str| {
        let a = post_to(
            &format!("http://{}/whep/live/{camera}", node.api),
            "application/sdp",
            OFFER,
        );
        let named = a.header("x-vigil-not-carried").map(str::to_string);
        (a.status, named, a.body)
    };
    // Live first, then one offer each: offers polled while a publisher starts would spend
    // the address's offer budget (429 under load).
    node.wait_live("live/av");
    node.wait_live("live/hevc");
    let (s, named, body) = offer("av");
    assert_eq!(s, 201, "{body}");
    let named = named.unwrap_or_default();
    assert!(
        named.starts_with("audio AAC") && named.contains("no transcoding"),
        "{named}"
    );
    let (s, _, body) = offer("hevc");
    assert_eq!(s, 415, "{body}");
    assert!(
        body.contains("H265") && body.contains("RTSP or HLS"),
        "{body}"
    );
}

#[test]
fn bad_offers_are_refused_with_reasons_and_a_silent_peer_is_released() {
    let node = NodeBuilder::new()
        .extra(DEMO_CAMERA)
        .extra("[webrtc]\nconnect_timeout_ms = 1000\noffers_per_sec = 1.0\noffer_burst = 6\n")
        .start();
    let live = "/whep/live/demo";
    let (s, body) = post_offer(&node, live, "text/plain", OFFER);
    assert_eq!(s, 415, "not application/sdp: {body}");
    let (s, body) = post_offer(&node, live, "application/sdp", "hello\r\n");
    assert_eq!(s, 400, "not SDP: {body}");
    let vp8_only = OFFER
        .replace(" 97 98 99 100\r\n", " 97 98\r\n")
        .replace("a=rtpmap:99 H264/90000\r\n", "");
    let (s, body) = post_offer(&node, live, "application/sdp", &vp8_only);
    assert_eq!(s, 400, "no H.264: {body}");
    assert!(body.contains("H.264"), "{body}");
    let (s, body) = post_offer(&node, "/whep/live/nosuch", "application/sdp", OFFER);
    assert_eq!(s, 404, "unknown camera: {body}");

    // A valid offer whose peer never answers a check: listed, then released within the
    // connect timeout.
    let (s, body) = post_offer(&node, live, "application/sdp", OFFER);
    assert_eq!(s, 201, "a valid offer: {body}");
    assert!(body.contains("a=ice-lite"), "ICE-lite answer:\n{body}");
    assert!(body.contains("a=candidate:"), "{body}");
    assert_eq!(webrtc_sessions(&node).len(), 1);
    poll_until(
        Duration::from_secs(5),
        "the silent peer to be released",
        || webrtc_sessions(&node).is_empty().then_some(()),
    );

    // A flood from one address: the burst (6, four taken above), then 429 with Retry-After.
    let codes: Vec<u16> = (0..10)
        .map(|_| post_offer(&node, "/whep/live/nosuch", "application/sdp", OFFER).0)
        .collect();
    assert!(
        codes.contains(&429),
        "no offer refused in a flood: {codes:?}"
    );
    assert!(codes.iter().all(|c| *c == 404 || *c == 429), "{codes:?}");
    let refused =
        vigil_tests::metric_value(&node, "vigil_limit_refusals_total{limit=\"describe_rate\"}");
    assert!(refused >= 1.0, "refusals counted: {refused}");
}

/// The load generator's headless WebRTC viewers (`vigil-lab bench webrtc`, str0m as the
/// client: full ICE, DTLS and SRTP) all connect and lose nothing on loopback.
#[test]
fn the_webrtc_load_generator_connects_every_viewer_without_loss() {
    let node = NodeBuilder::new().extra(DEMO_CAMERA).start();
    let out = run_with_timeout(
        Command::new(vigil_tests::vigil_lab_bin())
            .env("VIGIL_API_TOKEN", vigil_tests::ADMIN_TOKEN)
            .args([
                "bench",
                "webrtc",
                "--peers",
                "4",
                "--duration",
                "2",
                "--warmup",
                "1",
            ])
            .arg("--url")
            .arg(format!("http://{}/whep/live/demo", node.api))
            .arg("--api")
            .arg(format!("http://{}", node.api)),
        Duration::from_secs(60),
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let row: Vec<&str> = table
        .lines()
        .last()
        .unwrap_or_default()
        .split('|')
        .map(str::trim)
        .collect();
    assert!(
        out.status.success() && row.len() > 5,
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(row[2], "4", "viewers connected: {table}");
    assert!(row[5].starts_with("0 of "), "loss: {table}");
    let received: u64 = row[5]
        .trim_start_matches("0 of ")
        .parse()
        .unwrap_or_default();
    assert!(received > 0, "nothing received: {table}");
}

/// In a cluster a WHEP offer to a node that does not hold the camera is redirected (307)
/// to the one that does, and plays there; CORS answers only a member's page.
#[test]
fn a_whep_offer_to_another_node_is_redirected_to_the_holder_and_plays() {
    let key = "whep-cluster-key";
    let (holder, seed) = vigil_tests::start_member(0, None, key, 10, DEMO_CAMERA);
    let (other, _) = vigil_tests::start_member(1, Some(seed), key, 20, "");
    holder.wait_live("live/demo");
    // Once the other node counts the holder alive with demo live (a new member is alive
    // once its heartbeat has been seen advancing), an offer there is redirected.
    poll_until(Duration::from_secs(30), "a 307 to the holder", || {
        let (s, _) = post_offer(&other, "/whep/live/demo", "application/sdp", OFFER);
        (s == 307).then_some(())
    });
    let run = whep_play(&format!("http://{}/whep/live/demo", other.api), 50, 30);
    assert_eq!(run["status"], 201, "{run}");
    assert!(
        run["redirected"]
            .as_str()
            .is_some_and(|r| r.starts_with(&format!(
                "http://{}/whep/live/demo?vigil_placed=",
                holder.api
            ))),
        "{run}"
    );
    assert_eq!(run["frames"], 50, "{run}");
    assert_eq!(run["errors"].as_array().map(Vec::len), Some(0), "{run}");
    // The holder's CORS: the other member's page, yes; any other origin, no.
    let preflight = |origin: &str| {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(holder.api).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(5))).ok();
        write!(
            c,
            "OPTIONS /whep/live/demo HTTP/1.1\r\nHost: {}\r\nOrigin: {origin}\r\n\
             Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n",
            holder.api
        )
        .expect("send");
        let mut answer = String::new();
        let _ = c.read_to_string(&mut answer);
        answer.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("access-control-allow-origin")
                .then(|| v.trim().to_string())
        })
    };
    let member = format!("http://{}", other.api);
    assert_eq!(preflight(&member), Some(member.clone()));
    assert_eq!(preflight("http://evil.example"), None);
}

/// A recording's WHEP offer is placed like an RTSP playback DESCRIBE: with the node asked
/// draining, the scheduler puts it on the other member, the answer is a 307 to that
/// member's WHEP URL with a signed placement marker, which that member serves without
/// placing it again; aiortc follows it and decodes. A forged marker is ignored (placed).
#[test]
fn a_whep_playback_offer_is_placed_by_the_scheduler_and_plays_there() {
    let root = tempfile::tempdir().unwrap();
    let start = vigil_server::cluster::now_ms() as i64 - 3_600_000;
    vigil_tests::export::synthetic_recording(root.path(), "vault", start, 30);
    let storage = format!(
        "[storage]\nroot = \"{}\"\nsegment_secs = 4.0\n",
        root.path().display()
    );
    let key = "whep-placement-key";
    let (a, seed) = vigil_tests::start_member(0, None, key, 10, &storage);
    let (b, _) = vigil_tests::start_member(1, Some(seed), key, 20, &storage);
    let a_id = a.api_json("/api/cluster/nodes")["self_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let out = vigil_tests::ctl(&a, &["drain", &a_id]);
    eprintln!("drain: {out}");
    let path = format!(
        "/whep/playback/vault?start={}",
        vigil_tests::rfc3339(start + 5_000)
    );
    let offer = |url: &str| {
        let a = post_to(url, "application/sdp", OFFER);
        let location = a.header("location").unwrap_or_default().to_string();
        (a.status, location)
    };
    let to_b = format!("http://{}/whep/playback/vault?start=", b.api);
    let location = poll_until(Duration::from_secs(30), "a 307 to the other member", || {
        let (s, location) = offer(&format!("http://{}{path}", a.api));
        (s == 307 && location.starts_with(&to_b)).then_some(location)
    });
    assert!(location.contains("&vigil_placed="), "{location}");
    // Placed at the recording's own bitrate where it starts (as an RTSP DESCRIBE is), not
    // the default expectation.
    let decisions = a.api_json("/api/cluster/scheduler")["decisions"].clone();
    let vbr = decisions
        .as_array()
        .and_then(|d| {
            d.iter()
                .find(|d| d["camera"] == "vault" && d["kind"] == "playback")
        })
        .and_then(|d| d["vbr_bps"].as_f64());
    assert!(
        vbr.is_some_and(|v| v > 0.0 && v != vigil_server::cluster::report::DEFAULT_VBR_BPS),
        "{decisions}"
    );
    let forged = format!("http://{}{path}&vigil_placed=1.2.3.x", a.api);
    assert_eq!(
        offer(&forged).0,
        307,
        "a forged marker is placed, not served"
    );
    let run = whep_play(&format!("http://{}{path}", a.api), 50, 30);
    assert_eq!(run["status"], 201, "{run}");
    assert!(
        run["redirected"]
            .as_str()
            .is_some_and(|r| r.starts_with(&to_b)),
        "{run}"
    );
    assert_eq!(run["frames"], 50, "{run}");
    assert_eq!(run["errors"].as_array().map(Vec::len), Some(0), "{run}");
}

/// The playback cache's lookups answered from memory and those that waited for storage
/// (`vigil_cache_hits_total`, `vigil_cache_misses_total` from `/metrics`).
fn cache_lookups(node: &Node) -> (u64, u64) {
    let text = node.try_api("/metrics").unwrap_or_default();
    let count = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    };
    (
        count("vigil_cache_hits_total"),
        count("vigil_cache_misses_total"),
    )
}

/// Glass-to-glass and timeline click → first frame, side by side in one run (issue 27's
/// benchmark, docs/BENCHMARKS.md "WebRTC"): a barcode camera sent by this process (the
/// wall time of each frame's entry known), read back from what each viewer presents —
/// Chromium over WebRTC and over HLS (`requestVideoFrameCallback`'s expected display
/// time), ffmpeg over RTSP (the decoded frame on its pipe) — and the first presented frame
/// of a recording after the "click" (the offer or the playlist request), WebRTC against HLS,
/// each trial labelled a cache hit or miss by the node's own cache counters.
#[test]
#[ignore = "benchmark: run with --ignored --nocapture (VIGIL_BIN=target/release/vigil for release figures)"]
fn glass_to_glass_and_click_to_first_frame() {
    use vigil_tests::glass;
    let Some(browser) = vigil_tests::browser::Browser::start() else {
        return;
    };
    let frames: usize = std::env::var("GLASS_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(250);
    let dir = tempfile::tempdir().unwrap();
    let clip = glass::barcode_clip(dir.path());
    let node = NodeBuilder::new()
        .extra(&format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 2.0\n",
            dir.path().join("root").display()
        ))
        .start();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (sent, publisher) = glass::publish(&clip, &node.url("live/bar"), stop.clone());
    node.wait_live("live/bar");
    browser.sign_in(
        &format!("http://{}/#cluster", node.api),
        vigil_tests::ADMIN_TOKEN,
    );
    browser.goto(&format!("http://{}/", node.api));
    let warmup = 25;
    let in_browser = |kind: &str, url: &str, count: usize| -> (Vec<(u32, f64)>, f64, Value) {
        browser.eval(
            glass::BROWSER_VIEWER,
            vec![
                serde_json::json!(kind),
                serde_json::json!(url),
                serde_json::json!(count),
            ],
        );
        let r = browser.wait(
            &format!("{count} frames over {kind}"),
            Duration::from_secs(120),
            "const g = window.__glass; if (g.error) return {error: g.error}; \
             return g.done ? {seen: g.seen, first: g.first, marks: g.marks} : null;",
            vec![],
        );
        assert!(r["error"].is_null(), "{kind} {url}: {r}");
        browser.eval(glass::BROWSER_VIEWER_END, vec![]);
        let seen = r["seen"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| Some((s[0].as_u64()? as u32, s[1].as_f64()?)))
                    .collect()
            })
            .unwrap_or_default();
        (
            seen,
            r["first"].as_f64().unwrap_or(f64::NAN),
            r["marks"].clone(),
        )
    };
    let mut rows = Vec::new();
    for (client, kind, url) in [
        ("Chromium, WebRTC (WHEP)", "webrtc", "/whep/live/bar"),
        ("Chromium, HLS (hls.js)", "hls", "/hls/live/bar/index.m3u8"),
        ("ffmpeg, RTSP/TCP", "rtsp", ""),
        ("ffmpeg -threads 1, RTSP/TCP", "rtsp1", ""),
    ] {
        let seen = match kind {
            "rtsp" | "rtsp1" => glass::ffmpeg_read(
                &node.url("live/bar"),
                frames + warmup,
                Duration::from_secs(120),
                (kind == "rtsp1").then_some(1),
            ),
            _ => in_browser(kind, url, frames + warmup).0,
        };
        let seen: Vec<(u32, f64)> = seen.into_iter().skip(warmup).collect();
        let ms = glass::latencies(&seen, &sent.lock().unwrap());
        rows.push(format!(
            "| {client} | {} of {} | {:.0} | {:.0} | {:.0} |",
            ms.len(),
            seen.len(),
            glass::percentile(&ms, 50.0),
            glass::percentile(&ms, 95.0),
            glass::percentile(&ms, 100.0),
        ));
    }
    println!("\nglass to glass (frame sent to the node → presented), ms:");
    println!("| viewer | frames matched | p50 | p95 | max |\n|---|---|---:|---:|---:|");
    for r in &rows {
        println!("{r}");
    }

    // Timeline clicks: the first presented frame of a recording, from the offer (WebRTC)
    // or the playlist request (HLS). A new time is a miss unless the cache holds its
    // segment; the same time again a hit: the node's counters say which it was.
    let recorded = poll_until(Duration::from_secs(60), "30 s recorded", || {
        let v = node.api_json("/api/recordings/bar");
        let r = &v["ranges"][0];
        let (s, e) = (r["start_ms"].as_i64()?, r["end_ms"].as_i64()?);
        (e - s >= 30_000).then_some(s)
    });
    let trials: usize = 5;
    let mut clicks: std::collections::BTreeMap<(String, &str), Vec<f64>> = Default::default();
    let mut marks: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for (kind, offset) in [("webrtc", 2_000i64), ("hls", 3_000i64)] {
        for i in 0..trials as i64 {
            let at = vigil_tests::rfc3339(recorded + offset + i * 5_000);
            let url = match kind {
                "webrtc" => format!("/whep/playback/bar?start={at}"),
                _ => format!("/hls/playback/bar/index.m3u8?start={at}"),
            };
            for _ in 0..2 {
                let before = cache_lookups(&node);
                let (_, first, m) = in_browser(kind, &url, 1);
                for (k, v) in m.as_object().into_iter().flatten() {
                    if let Some(v) = v.as_f64() {
                        marks.entry(format!("{kind}: {k}")).or_default().push(v);
                    }
                }
                let after = cache_lookups(&node);
                // A trial that waited for storage anywhere is a miss.
                let label = match (after.0 > before.0, after.1 > before.1) {
                    (_, true) => "miss",
                    (true, false) => "hit",
                    (false, false) => "no lookup",
                };
                clicks
                    .entry((kind.to_string(), label))
                    .or_default()
                    .push(first);
            }
        }
    }
    println!("\ntimeline click → first frame presented, ms:");
    println!("| viewer | first segment | trials | p50 | p95 |\n|---|---|---:|---:|---:|");
    for ((kind, label), v) in &clicks {
        println!(
            "| {kind} | {label} | {} | {:.0} | {:.0} |",
            v.len(),
            glass::percentile(v, 50.0),
            glass::percentile(v, 95.0)
        );
    }
    println!("\nwhere a click's time goes (every trial), ms from the click:");
    println!("| step | p50 | p95 |\n|---|---:|---:|");
    for (k, v) in &marks {
        println!(
            "| {k} | {:.0} | {:.0} |",
            glass::percentile(v, 50.0),
            glass::percentile(v, 95.0)
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = publisher.join();
    assert!(rows.iter().all(|r| !r.contains("| 0 of")), "{rows:?}");
}

/// A console user's live offer to a node that does not hold the camera: the browser does
/// not carry the user's credentials (a cookie, a Basic login) to the holder's origin, so the
/// 307 carries a signed marker for that user and that camera's live view. The holder serves
/// it once without credentials; a replay, the same marker on the recording's route, and an
/// offer with no credentials at all are refused.
#[test]
fn a_redirected_live_offer_carries_the_viewers_right_not_their_credentials() {
    use vigil_proto::rtsp::auth::{ha1, Algorithm};
    let key = "whep-user-cluster-key";
    let guard = format!(
        "[auth]\n[[auth.user]]\nname = \"guard\"\nha1_md5 = \"{}\"\nha1_sha256 = \"{}\"\nread = [\"demo\"]\n",
        ha1(Algorithm::Md5, "guard", "vigil", "guard-pw"),
        ha1(Algorithm::Sha256, "guard", "vigil", "guard-pw"),
    );
    let (holder, seed) =
        vigil_tests::start_member(0, None, key, 10, &format!("{DEMO_CAMERA}\n{guard}"));
    let (other, _) = vigil_tests::start_member(1, Some(seed), key, 20, &guard);
    holder.wait_live("live/demo");
    let basic = format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "guard:guard-pw")
    );
    let post = |url: &str, auth: Option<&str>| {
        let mut req = ureq::post(url)
            .config()
            .timeout_global(Some(Duration::from_secs(10)))
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .header("Content-Type", "application/sdp");
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        let resp = req
            .send(OFFER)
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let location = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        (resp.status().as_u16(), location)
    };
    let asked = format!("http://{}/whep/live/demo", other.api);
    // Polled until the other member sees the holder (a 404 before, a 429 when the polls
    // spent the address's offer budget).
    let redirect = || {
        poll_until(Duration::from_secs(30), "a 307 to the holder", || {
            let (s, location) = post(&asked, Some(&basic));
            (s == 307).then_some(location)
        })
    };
    let location = redirect();
    let to = format!("http://{}/whep/live/demo?vigil_placed=", holder.api);
    assert!(location.starts_with(&to), "{location}");
    assert!(!other.log().contains("vigil_placed"), "a marker in the log");
    // Without credentials at the holder: served on the marker, once.
    assert_eq!(post(&location, None).0, 201);
    assert_eq!(post(&location, None).0, 403, "a replayed marker");
    // The marker is the live view of that camera only; nothing without one.
    let location = redirect();
    let elsewhere = location.replacen("/whep/live/", "/whep/playback/", 1);
    assert_eq!(post(&elsewhere, None).0, 401, "the marker on another route");
    assert_eq!(
        post(&format!("http://{}/whep/live/demo", holder.api), None).0,
        401
    );
}
