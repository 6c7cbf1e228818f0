//! SRTP for RTSPS viewers (issue 28 §1): the description on an RTSPS connection offers
//! every track as `RTP/SAVP` with a MIKEY key (`a=key-mgmt`), GStreamer's rtspsrc takes it
//! and decodes live video and a recording over UDP and interleaved with zero errors (its
//! srtpdec is libsrtp: an independent implementation of the transform); and the attacks:
//! no key ever on plain RTSP, plain UDP refused on RTSPS under `srtp = "require"`, the
//! media on the wire is not the plain stream, forged or plain RTCP does not keep a session
//! alive, a KeyMgmt that cannot be used gets 463.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use vigil_proto::srtp::{keymgmt, mikey, Context, MasterKey, Profile, KEY_AND_SALT_LEN};
use vigil_tests::tls::{
    assert_gst_decoded, rtsps_conn, Leaf, TestCa, TlsNode, GST_VALIDATE_BUT_CA,
};
use vigil_tests::{gst_decode_h264_with, metric_value, poll_until, rfc3339, RtspConn, DEMO_CAMERA};

const CAM: &str = "vault";

/// A TLS node with the demo camera and 30 s of recordings of `vault`, an hour ago.
fn node_with_recording(dir: &std::path::Path, tls_extra: &str) -> (TlsNode, i64, TestCa) {
    let ca = TestCa::new(dir);
    let (cert, key) = ca.issue(dir, "node", Leaf::Good);
    let root = dir.join("storage");
    std::fs::create_dir_all(&root).unwrap();
    let start = vigil_server::cluster::now_ms() as i64 - 3_600_000;
    vigil_tests::export::synthetic_recording(&root, CAM, start, 30);
    let storage = format!(
        "{DEMO_CAMERA}\n[storage]\nroot = \"{}\"\nsegment_secs = 4.0\n",
        root.display()
    );
    (TlsNode::start(&cert, &key, tls_extra, &storage), start, ca)
}

/// The transport of the first session listed with `RTP/SAVP`, polled until `deadline`.
fn savp_transport_within(api: &str, within: Duration) -> Option<String> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let body =
            vigil_testkit::serve::api_get_as(api, "/api/sessions", Some(vigil_tests::ADMIN_TOKEN))
                .unwrap_or_default();
        let sessions: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let found = sessions.as_array().and_then(|a| {
            a.iter()
                .filter_map(|s| s["transport"].as_str())
                .find(|t| t.contains("RTP/SAVP"))
                .map(str::to_string)
        });
        if found.is_some() {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn gstreamer_plays_live_and_a_recording_over_srtp_on_udp_and_interleaved() {
    let dir = tempfile::tempdir().unwrap();
    let (n, start, _ca) = node_with_recording(dir.path(), "");
    n.node.wait_live("live/demo");
    let live = n.rtsps_url("live/demo");
    let playback = n.rtsps_url(&format!("playback/{CAM}?start={}", rfc3339(start + 2_000)));
    for (what, url, protocols, transport) in [
        ("live over UDP", &live, "udp", "RTP/SAVP;unicast"),
        ("live interleaved", &live, "tcp", "RTP/SAVP/TCP"),
        ("a recording over UDP", &playback, "udp", "RTP/SAVP;unicast"),
    ] {
        let api = format!("http://{}", n.node.api);
        let watcher =
            std::thread::spawn(move || savp_transport_within(&api, Duration::from_secs(30)));
        let gst = gst_decode_h264_with(
            url,
            protocols,
            &[GST_VALIDATE_BUT_CA],
            50,
            Duration::from_secs(40),
        );
        assert_gst_decoded(&format!("rtspsrc, {what}"), &gst, 50);
        let seen = watcher.join().unwrap();
        assert!(
            seen.as_deref().is_some_and(|t| t.starts_with(transport)),
            "{what}: the session's transport was {seen:?}, not {transport}…"
        );
    }
}

/// What a DESCRIBE answer's SDP gives per track: the proto of its m= line and its key.
fn described(sdp: &str) -> Vec<(String, Option<MasterKey>)> {
    let mut out: Vec<(String, Option<MasterKey>)> = Vec::new();
    for line in sdp.lines() {
        if let Some(m) = line.strip_prefix("m=") {
            let proto = m.split_whitespace().nth(2).unwrap_or_default().to_string();
            out.push((proto, None));
        } else if let Some(v) = line.strip_prefix("a=key-mgmt:") {
            let key = keymgmt::parse_sdp_attribute(v).expect("our own MIKEY").key;
            out.last_mut().expect("key-mgmt inside a media").1 = Some(key);
        }
    }
    out
}

fn describe(c: &mut RtspConn, url: &str) -> String {
    let d = c.request("DESCRIBE", url, &[("Accept", "application/sdp")], None);
    assert_eq!(d.status.0, 200, "DESCRIBE {url}: {}", d.reason);
    String::from_utf8_lossy(&d.body).into_owned()
}

/// The KeyMgmt header of a client whose own key is `key`.
fn client_keymgmt(key: &MasterKey, url: &str) -> String {
    let msg = mikey::psk_init(&mikey::Init {
        key,
        csb_id: 7,
        ntp: 0,
        rand: [9; 16],
        streams: &[],
    });
    let attr = keymgmt::sdp_attribute(&msg);
    let b64 = attr.trim_start_matches("mikey ");
    format!("prot=mikey; uri=\"{url}\"; data=\"{b64}\"")
}

#[test]
fn srtp_keys_travel_only_inside_tls_and_the_wire_carries_no_plain_video() {
    let dir = tempfile::tempdir().unwrap();
    let (n, _start, ca) = node_with_recording(dir.path(), "");
    let path = "live/demo".to_string();
    // The demo camera starts beside the listeners: a DESCRIBE before it is live gets 404.
    n.node.wait_live(&path);

    // Plain RTSP: RTP/AVP and no key, and RTP/SAVP is refused.
    let mut plain = RtspConn::connect(n.node.rtsp);
    let sdp = describe(&mut plain, &n.node.url(&path));
    assert!(
        described(&sdp)
            .iter()
            .all(|(p, k)| p == "RTP/AVP" && k.is_none()),
        "{sdp}"
    );
    let s = plain.request(
        "SETUP",
        &n.node.url(&format!("{path}/trackID=0")),
        &[("Transport", "RTP/SAVP;unicast;client_port=40000-40001")],
        None,
    );
    assert_eq!(s.status.0, 461, "SAVP on plain RTSP: {}", s.reason);

    // RTSPS: every track RTP/SAVP with its own key.
    let url = n.rtsps_url(&path);
    let mut c = rtsps_conn(&ca.pem, n.rtsps, "127.0.0.1");
    let tracks = described(&describe(&mut c, &url));
    assert!(!tracks.is_empty());
    assert!(
        tracks.iter().all(|(p, k)| p == "RTP/SAVP" && k.is_some()),
        "{tracks:?}"
    );
    let server_key = tracks[0].1.clone().unwrap();

    // Plain RTP over UDP beside the encrypted control connection: 461, saying why.
    let rtp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let ports = format!(
        "client_port={}-{}",
        rtp.local_addr().unwrap().port(),
        rtcp.local_addr().unwrap().port()
    );
    let track_url = format!("{url}/trackID=0");
    let s = c.request(
        "SETUP",
        &track_url,
        &[("Transport", &format!("RTP/AVP;unicast;{ports}"))],
        None,
    );
    assert_eq!(s.status.0, 461, "plain UDP on RTSPS: {}", s.reason);
    assert!(s.reason.contains("tls.srtp"), "{}", s.reason);

    // A KeyMgmt that is not a usable MIKEY message: 463.
    let s = c.request(
        "SETUP",
        &track_url,
        &[
            ("Transport", &format!("RTP/SAVP;unicast;{ports}")),
            ("KeyMgmt", "prot=mikey; data=\"AQAAAA==\""),
        ],
        None,
    );
    assert_eq!(s.status.0, 463, "bad KeyMgmt: {}", s.reason);

    // RTP/SAVP with our key for our RTCP.
    let client_key = MasterKey::from_bytes(&[0x5c; KEY_AND_SALT_LEN]);
    let s = c.request(
        "SETUP",
        &track_url,
        &[
            ("Transport", &format!("RTP/SAVP;unicast;{ports}")),
            ("KeyMgmt", &client_keymgmt(&client_key, &track_url)),
        ],
        None,
    );
    assert_eq!(s.status.0, 200, "SETUP RTP/SAVP: {}", s.reason);
    let answer = s.headers.get("Transport").unwrap_or_default().to_string();
    assert!(answer.starts_with("RTP/SAVP;unicast"), "{answer}");
    let server_rtcp: u16 = answer
        .split(';')
        .find_map(|p| p.strip_prefix("server_port="))
        .and_then(|p| p.split('-').nth(1))
        .and_then(|p| p.parse().ok())
        .expect("server_port in the answer");
    let p = c.request("PLAY", &url, &[], None);
    assert_eq!(p.status.0, 200, "PLAY: {}", p.reason);

    // Every datagram decrypts with the described key and authenticates; none of them is
    // the plain packet (the payload differs from its decryption).
    rtp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rx = Context::new(&server_key, Profile::AesCm128HmacSha1_80);
    let mut buf = vec![0u8; 2048];
    let mut keyframe = false;
    for i in 0..200 {
        let n = rtp
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("datagram {i}: {e}"));
        let plain = rx
            .unprotect_rtp(&buf[..n])
            .unwrap_or_else(|e| panic!("datagram {i} ({n} bytes) does not authenticate: {e}"));
        assert_eq!(plain.len(), n - 10);
        assert_ne!(
            plain[12..],
            buf[12..n - 10],
            "datagram {i} was sent in clear text"
        );
        // H.264: an IDR (5) or the FU-A start of one.
        let nal = plain[12] & 0x1f;
        keyframe |= nal == 5 || (nal == 28 && plain.get(13).is_some_and(|b| b & 0x1f == 5));
    }
    assert!(keyframe, "the decrypted stream carries a keyframe");

    // RTCP that does not pass the client's key (plain, or under the server's key) is
    // garbage, however it is addressed; the client's own SRTCP is not.
    let to = SocketAddr::from(([127, 0, 0, 1], server_rtcp));
    let mut rr = vec![0x80, 201, 0, 1];
    rr.extend_from_slice(&0x1234u32.to_be_bytes());
    let garbage = || metric_value(&n.node, "vigil_rtp_garbage_total");
    let before = garbage();
    rtcp.send_to(&rr, to).unwrap();
    let mut forger = Context::new(&server_key, Profile::AesCm128HmacSha1_80);
    rtcp.send_to(&forger.protect_rtcp(&rr).unwrap(), to)
        .unwrap();
    poll_until(
        Duration::from_secs(5),
        "both forged reports counted",
        || (garbage() >= before + 2.0).then_some(()),
    );
    let mut client = Context::new(&client_key, Profile::AesCm128HmacSha1_80);
    let counted = garbage();
    for _ in 0..3 {
        rtcp.send_to(&client.protect_rtcp(&rr).unwrap(), to)
            .unwrap();
    }
    // The genuine reports pass: sent after the forged ones on the same socket, so once a
    // fourth packet after them is counted as garbage, they have been read.
    rtcp.send_to(&rr, to).unwrap();
    poll_until(
        Duration::from_secs(5),
        "the trailing plain report counted",
        || (garbage() >= counted + 1.0).then_some(()),
    );
    assert_eq!(
        garbage(),
        counted + 1.0,
        "the client's SRTCP was taken as garbage"
    );
}
