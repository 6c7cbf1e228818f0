//! Live UDP viewers move between nodes while they play (issue 7 §1): node 1 holds the demo
//! camera; a viewer on node 1 is moved to node 2 (which becomes an edge relaying the camera
//! from node 1) and back, with `vigil ctl migrate`. The viewer sees one stream: one SSRC, no
//! sequence gap, no timestamp jump beyond one frame, and ffmpeg decodes every frame. The
//! same for a camera published to node 1 with ffmpeg (H.264 and AAC).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vigil_tests::secure_cluster::{
    self, holder_known, live_session, migrate, packets_from, placed, spawn_live_viewer,
    SecureCluster, Seen, FRAME_TICKS,
};
use vigil_tests::{fixture, poll_until, spawn_background, spawn_ffmpeg_decode, Background, Node};

/// One SSRC, no sequence gap, and every frame once: the distinct timestamps, in
/// presentation order, step by exactly one frame (B-frames make the steps in arrival order
/// uneven, so that is where a jump or a lost frame at a handoff shows), except among the last
/// few, whose B-frames had not arrived yet when the viewer stopped. Returns the handoff gaps
/// at the client (ms).
fn one_stream_through_handoffs(seen: &[Seen], what: &str) -> Vec<f64> {
    assert!(seen.len() > 100, "{what}: only {} packets", seen.len());
    let ssrcs: std::collections::BTreeSet<u32> = seen.iter().map(|s| s.ssrc).collect();
    assert_eq!(ssrcs.len(), 1, "{what}: SSRCs {ssrcs:?}");
    let mut gaps = Vec::new();
    for w in seen.windows(2) {
        assert_eq!(w[1].seq, w[0].seq.wrapping_add(1), "{what}: sequence gap");
        if w[0].from != w[1].from {
            gaps.push(w[1].at.duration_since(w[0].at).as_secs_f64() * 1000.0);
        }
    }
    let t0 = seen[0].ts;
    let ts: std::collections::BTreeSet<u32> = seen.iter().map(|s| s.ts.wrapping_sub(t0)).collect();
    let ts: Vec<u32> = ts.into_iter().collect();
    let settled = ts.len().saturating_sub(4);
    for w in ts[..settled].windows(2) {
        assert_eq!(
            w[1] - w[0],
            FRAME_TICKS,
            "{what}: presentation times {} → {} (a frame lost or a jump)",
            w[0],
            w[1]
        );
    }
    eprintln!("{what}: handoff gaps at the client (ms): {gaps:?}");
    gaps
}

/// The viewer (told to stop) sends TEARDOWN: both nodes let the session go; then its stream
/// is checked ([`one_stream_through_handoffs`]).
fn teardown_and_check(
    c: &SecureCluster,
    viewer: std::thread::JoinHandle<()>,
    seen: &std::sync::Mutex<Vec<Seen>>,
    id: &str,
    what: &str,
) -> Vec<f64> {
    viewer.join().expect("viewer");
    for m in &c.members {
        poll_until(Duration::from_secs(5), "the session released", || {
            (!lists(&m.node, id)).then_some(())
        });
    }
    let seen = seen.lock().unwrap().clone();
    one_stream_through_handoffs(&seen, what)
}

/// Whether node `n` lists session `id`.
fn lists(n: &Node, id: &str) -> bool {
    n.api_json("/api/sessions")
        .as_array()
        .is_some_and(|v| v.iter().any(|s| s["id"] == id))
}

/// The project's client and ffmpeg, each a UDP viewer of `live/demo` on node 1, moved
/// 1 → 2 → 1 → 2 → 1: one stream throughout (each handoff continues right after the last
/// packet sent), and TEARDOWN releases the session on both nodes.
#[test]
fn live_viewers_move_and_keep_one_stream() {
    let c = secure_cluster::start(2, "", |_| String::new());
    let a = c.node(0);
    a.wait_live("live/demo");
    holder_known(&c);
    let hops = [
        (1usize, "127.0.0.2"),
        (0, "127.0.0.1"),
        (1, "127.0.0.2"),
        (0, "127.0.0.1"),
    ];

    let stop = Arc::new(AtomicBool::new(false));
    let (seen, viewer) = spawn_live_viewer(placed(&a.url("live/demo")), stop.clone());
    let id = live_session(a);
    poll_until(Duration::from_secs(5), "media from node 1", || {
        (packets_from(&seen, "127.0.0.1") > 25).then_some(())
    });
    for (i, ip) in hops {
        let before = packets_from(&seen, ip);
        eprintln!("{}", migrate(a, &id, &c.members[i].id, "own"));
        poll_until(Duration::from_secs(5), "media from the new node", || {
            (packets_from(&seen, ip) > before + 25).then_some(())
        });
    }
    // Once more to node 2, then TEARDOWN there: both nodes let the session go.
    migrate(a, &id, &c.members[1].id, "own");
    let before = packets_from(&seen, "127.0.0.2");
    poll_until(Duration::from_secs(5), "media from node 2", || {
        (packets_from(&seen, "127.0.0.2") > before + 25).then_some(())
    });
    stop.store(true, Ordering::Relaxed);
    let gaps = teardown_and_check(&c, viewer, &seen, &id, "live 1→2→1→2→1→2");
    assert_eq!(gaps.len(), 5, "five handoffs: {gaps:?}");

    // ffmpeg: 12 s of the camera while it moves four times, every frame decoded.
    let ff = spawn_ffmpeg_decode(
        &placed(&a.url("live/demo")),
        &["-rtsp_transport", "udp"],
        &["-t", "12"],
        Duration::from_secs(60),
    );
    let id = live_session(a);
    secure_cluster::move_through(&c, &id, hops.map(|(i, _)| i), "own");
    ff.join()
        .expect("ffmpeg")
        .assert_plays("ffmpeg live through 1→2→1→2→1", 299, 301);
}

/// ffmpeg publishes the 10 s H.264 + AAC fixture to `live/<camera>` on `n` (TCP), in real
/// time; returns once `n` has it live and every node knows node 1 holds it.
fn publish(c: &SecureCluster, camera: &str) -> Background {
    let n = c.node(0);
    let path = format!("live/{camera}");
    let p = spawn_background(
        std::process::Command::new("ffmpeg")
            .args(["-v", "error", "-re", "-i"])
            .arg(fixture("h264_aac.mp4"))
            .args(["-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp"])
            .arg(n.url(&path)),
    );
    n.wait_live(&path);
    secure_cluster::holder_of_known(c, camera);
    p
}

/// A camera published to node 1 (video and audio, two tracks matched each on its own) moves
/// with its viewers like the demo camera: the project's client sees one stream through
/// 1 → 2 → 1 → 2, and ffmpeg decodes a 6 s run with two moves without an error.
#[test]
fn viewers_of_a_published_camera_move_and_keep_one_stream() {
    let c = secure_cluster::start(2, "", |_| String::new());
    let a = c.node(0);
    let publisher = publish(&c, "cam");
    let stop = Arc::new(AtomicBool::new(false));
    let (seen, viewer) = spawn_live_viewer(placed(&a.url("live/cam")), stop.clone());
    let id = secure_cluster::live_session_of(a, "live/cam");
    poll_until(Duration::from_secs(5), "media from node 1", || {
        (packets_from(&seen, "127.0.0.1") > 25).then_some(())
    });
    for (i, ip) in [(1usize, "127.0.0.2"), (0, "127.0.0.1"), (1, "127.0.0.2")] {
        let before = packets_from(&seen, ip);
        eprintln!("{}", migrate(a, &id, &c.members[i].id, "own"));
        poll_until(Duration::from_secs(5), "media from the new node", || {
            (packets_from(&seen, ip) > before + 30).then_some(())
        });
    }
    stop.store(true, Ordering::Relaxed);
    let gaps = teardown_and_check(&c, viewer, &seen, &id, "published camera 1→2→1→2");
    assert_eq!(gaps.len(), 3, "three handoffs: {gaps:?}");
    drop(publisher);

    // A fresh publish (10 s) of another camera; ffmpeg plays 6 s of it, well within what is
    // left of it once ffmpeg is up, while it moves twice (each new sender playing a second).
    let publisher = publish(&c, "cam2");
    let ff = spawn_ffmpeg_decode(
        &placed(&a.url("live/cam2")),
        &["-rtsp_transport", "udp"],
        &["-t", "6"],
        Duration::from_secs(40),
    );
    let id = secure_cluster::live_session_of(a, "live/cam2");
    secure_cluster::move_through(&c, &id, [1, 0], "own");
    ff.join()
        .expect("ffmpeg")
        .assert_plays("ffmpeg of a published camera through 1→2→1", 149, 151);
    drop(publisher);
}

/// `preserve` mode moves a live viewer too: node 2 sends with node 1's address and ports
/// (raw socket; the tests run as root), so `ffmpeg -rtsp_flags filter_src`, which drops media
/// from any other source, decodes every frame through 1 → 2 → 1.
#[test]
fn a_live_viewer_moves_in_preserve_mode_for_filter_src() {
    let c = secure_cluster::start(2, "", |_| String::new());
    let a = c.node(0);
    a.wait_live("live/demo");
    holder_known(&c);
    let ff = spawn_ffmpeg_decode(
        &placed(&a.url("live/demo")),
        &["-rtsp_transport", "udp", "-rtsp_flags", "filter_src"],
        &["-t", "6"],
        Duration::from_secs(40),
    );
    let id = live_session(a);
    secure_cluster::move_through(&c, &id, [1, 0], "preserve");
    ff.join().expect("ffmpeg").assert_plays(
        "ffmpeg filter_src live through 1→2→1 (preserve)",
        149,
        151,
    );
}

/// PAUSE and the PLAY that resumes, sent by a live viewer after its media moved to node 2,
/// reach node 2: it stops sending (a second of silence), then resumes with the viewer's
/// RTP identity (same SSRC, the next sequence number) from node 2.
#[test]
fn pause_and_play_of_a_moved_live_viewer_reach_the_sending_node() {
    use vigil_testkit::client::{play, ClientTransport, PlayOptions, PlayRequest};
    let c = secure_cluster::start(2, "", |_| String::new());
    let a = c.node(0);
    a.wait_live("live/demo");
    holder_known(&c);
    let url = placed(&a.url("live/demo"));
    let api = a.api;
    let to = c.members[1].id.clone();
    secure_cluster::runtime().block_on(async move {
        let mut p = play(&url, PlayOptions::new(ClientTransport::Udp))
            .await
            .expect("play");
        let video = secure_cluster::video_track(&p);
        let from = |pkt: &vigil_testkit::client::ReceivedPacket, ip: &str| {
            pkt.from.is_some_and(|f| f.ip().to_string() == ip)
        };
        // 25 packets from node 1, then the move, then 25 from node 2.
        let mut n = 0;
        while n < 25 {
            let pkt = secure_cluster::next_packet_of(&mut p, video).await;
            n += usize::from(from(&pkt, "127.0.0.1"));
        }
        let id = tokio::task::spawn_blocking(move || {
            let out = vigil_tests::run_with_timeout(
                std::process::Command::new(vigil_tests::vigil_bin())
                    .env("VIGIL_API_TOKEN", vigil_tests::ADMIN_TOKEN)
                    .args([
                        "ctl",
                        "--api",
                        &format!("http://{api}"),
                        "--json",
                        "sessions",
                    ]),
                Duration::from_secs(10),
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("sessions");
            let id = v
                .as_array()
                .and_then(|s| s.iter().find(|s| s["path"] == "live/demo"))
                .and_then(|s| s["id"].as_str())
                .expect("the live session")
                .to_string();
            let out = vigil_tests::run_with_timeout(
                std::process::Command::new(vigil_tests::vigil_bin())
                    .env("VIGIL_API_TOKEN", vigil_tests::ADMIN_TOKEN)
                    .args(["ctl", "--api", &format!("http://{api}")])
                    .args(["migrate", &id, &to, "--mode", "own"]),
                Duration::from_secs(20),
            );
            assert!(out.status.success(), "{out:?}");
            id
        })
        .await
        .expect("migrate");
        let mut n = 0;
        let mut last = None;
        while n < 25 {
            let pkt = secure_cluster::next_packet_of(&mut p, video).await;
            if from(&pkt, "127.0.0.2") {
                n += 1;
            }
            last = Some(pkt.header);
        }
        p.pause().await.expect("PAUSE");
        // Packets in flight when PAUSE was answered may still come; then a second of
        // silence, within three.
        let paused_at = std::time::Instant::now();
        loop {
            match tokio::time::timeout(Duration::from_secs(1), p.next_packet()).await {
                Err(_) => break,
                Ok(got) => {
                    let pkt = got.expect("no client error").expect("the stream goes on");
                    if pkt.track == video {
                        last = Some(pkt.header);
                    }
                    assert!(
                        paused_at.elapsed() < Duration::from_secs(3),
                        "node 2 kept sending session {id} after PAUSE"
                    );
                }
            }
        }
        p.play(PlayRequest::new()).await.expect("PLAY");
        let pkt = secure_cluster::next_packet_of(&mut p, video).await;
        let last = last.expect("a packet before PAUSE");
        assert!(from(&pkt, "127.0.0.2"), "resumed from {:?}", pkt.from);
        assert_eq!(pkt.header.ssrc, last.ssrc);
        assert_eq!(pkt.header.sequence, last.sequence.wrapping_add(1));
        p.teardown().await.expect("TEARDOWN");
    });
}

/// The packets from `ip`: how long they have been arriving.
fn span_from(seen: &std::sync::Mutex<Vec<Seen>>, ip: &str) -> Duration {
    let seen = seen.lock().unwrap();
    let mut from = seen
        .iter()
        .filter(|s| s.from.is_some_and(|a| a.ip().to_string() == ip));
    match (from.next(), from.next_back()) {
        (Some(a), Some(b)) => b.at.duration_since(a.at),
        _ => Duration::ZERO,
    }
}

/// The node sending a moved live viewer is killed (SIGKILL) and the steering node sends the
/// viewer again within `takeback_ms` (700 ms), right after the last packet the dead node
/// reported (its progress comes home with every heartbeat answer): what the dead node sent
/// after its report comes again with the same numbers and bytes, which the viewer drops as
/// duplicates, so the stream has no gap: one SSRC, every sequence number, every frame's
/// presentation time one frame apart. ffmpeg decodes 12 s through the same without an error
/// and with every frame (the duplicates dropped, nothing lost).
#[test]
fn a_live_viewer_whose_sender_dies_is_taken_back() {
    let mut c = secure_cluster::start(3, "", |_| String::new());
    let a = c.node(0);
    a.wait_live("live/demo");
    holder_known(&c);

    let stop = Arc::new(AtomicBool::new(false));
    let (seen, viewer) = spawn_live_viewer(placed(&a.url("live/demo")), stop.clone());
    let id = live_session(a);
    poll_until(Duration::from_secs(5), "media from node 1", || {
        (packets_from(&seen, "127.0.0.1") > 25).then_some(())
    });
    migrate(a, &id, &c.members[1].id, "own");
    // Node 2 reports the viewer's progress once per lease (500 ms): with 1.5 s of its media
    // the steering node holds a report naming a packet node 2 sent.
    poll_until(
        Duration::from_secs(10),
        "1.5 s of media from node 2",
        || (span_from(&seen, "127.0.0.2") > Duration::from_millis(1500)).then_some(()),
    );
    c.members[1].node.kill();
    let a = c.node(0);
    let back = packets_from(&seen, "127.0.0.1");
    poll_until(Duration::from_secs(5), "media from node 1 again", || {
        (packets_from(&seen, "127.0.0.1") > back + 50).then_some(())
    });
    stop.store(true, Ordering::Relaxed);
    viewer.join().expect("viewer");
    let seen = seen.lock().unwrap().clone();
    let last_b = seen
        .iter()
        .rposition(|s| s.from.is_some_and(|f| f.ip().to_string() == "127.0.0.2"))
        .expect("node 2 sent");
    let took = seen[last_b + 1].at.duration_since(seen[last_b].at);
    eprintln!("live take-back gap at the client: {took:?}");
    assert!(
        took < Duration::from_millis(1200),
        "node 1 took the viewer back after {took:?}"
    );
    // Repeated packets are exact copies (same number, same timestamp); without them the
    // stream is one.
    let mut first: std::collections::BTreeMap<u16, u32> = Default::default();
    let mut unique = Vec::new();
    let mut repeated = 0;
    for s in &seen {
        match first.get(&s.seq) {
            Some(&ts) => {
                assert_eq!(
                    ts, s.ts,
                    "sequence {} came again with another timestamp",
                    s.seq
                );
                repeated += 1;
            }
            None => {
                first.insert(s.seq, s.ts);
                unique.push(s.clone());
            }
        }
    }
    eprintln!("packets repeated by the take-back: {repeated}");
    one_stream_through_handoffs(&unique, "live 1→2, 2 killed, taken back");

    // ffmpeg, moved to node 3, which is killed: 12 s decoded, every frame.
    let ff = spawn_ffmpeg_decode(
        &placed(&a.url("live/demo")),
        &["-rtsp_transport", "udp"],
        &["-t", "12"],
        Duration::from_secs(60),
    );
    let id = live_session(a);
    migrate(a, &id, &c.members[2].id, "own");
    let n3 = c.node(2);
    poll_until(Duration::from_secs(10), "node 3 sending ffmpeg", || {
        (secure_cluster::packets_on(n3, &id) > 200).then_some(())
    });
    c.members[2].node.kill();
    ff.join().expect("ffmpeg").assert_plays(
        "ffmpeg live, its sender killed and taken back",
        299,
        301,
    );
}
