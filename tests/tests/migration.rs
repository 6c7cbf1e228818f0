//! Sessions that move between nodes while they play (issue 7): real node processes on
//! 127.0.0.1–3 with cluster certificates, a recording on the shared root, viewers over UDP,
//! and `vigil ctl migrate` moving their media A → B → C → A. Every wait polls with a deadline.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use vigil_proto::codec::starts_keyframe;
use vigil_testkit::client::{
    play, ClientTransport, PlayOptions, PlayRequest, Player, ReceivedPacket, TrackStats,
};
use vigil_tests::secure_cluster::{
    self, assert_one_stream, migrate, packets_from, playback_session, spawn_viewer, SecureCluster,
};
use vigil_tests::{poll_until, rfc3339, run_with_timeout, spawn_ffmpeg_decode, vigil_bin};

fn start_cluster() -> SecureCluster {
    secure_cluster::start(3, "", |_| String::new())
}

/// The project's client plays a recording over UDP from node A while its media moves
/// A → B → C → A in `own` mode: one stream throughout, sent by each node in turn.
#[test]
fn playback_moves_between_three_nodes_own_mode() {
    let c = start_cluster();
    let first = c.recorded_for(14_000);
    let [a, b, cc] = [c.node(0), c.node(1), c.node(2)];
    let url = secure_cluster::placed(&format!(
        "{}?start={}&end={}",
        a.url("playback/demo"),
        rfc3339(first),
        rfc3339(first + 12_000)
    ));
    let (seen, viewer) = spawn_viewer(url, None);
    let id = playback_session(a);
    poll_until(Duration::from_secs(5), "media from A", || {
        (packets_from(&seen, &a.ip) > 20).then_some(())
    });
    let hops = [(1usize, b), (2, cc), (0, a)];
    for (i, n) in hops {
        let before = packets_from(&seen, &n.ip);
        let out = migrate(a, &id, &c.members[i].id, "own");
        eprintln!("{out}");
        poll_until(Duration::from_secs(5), "media from the new node", || {
            (packets_from(&seen, &n.ip) > before + 20).then_some(())
        });
    }
    // The session shows where it plays and how often it moved.
    let s = a.api_json("/api/sessions");
    let s = s
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(s["moves"], 3, "{s}");
    assert_eq!(s["node"], c.members[0].id.as_str(), "{s}");
    viewer.join().expect("viewer");
    let seen = seen.lock().unwrap().clone();
    let gaps = assert_one_stream(&seen, "A→B→C→A");
    let sources: Vec<String> = seen
        .iter()
        .filter_map(|s| s.from.map(|a| a.ip().to_string()))
        .fold(Vec::new(), |mut v, ip| {
            if v.last() != Some(&ip) {
                v.push(ip);
            }
            v
        });
    assert_eq!(
        sources,
        ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.1"],
        "senders in turn"
    );
    eprintln!("handoff gaps (ms): {gaps:?}");
    // Every video frame of the 12 s range arrived once: 12 s at 25 fps, within a frame.
    let frames: BTreeSet<u32> = seen.iter().map(|s| s.ts).collect();
    assert!(
        (299..=302).contains(&frames.len()),
        "{} frames for a 12 s range",
        frames.len()
    );
    // The session ended on every node (BYE at the end of the range).
    for n in [a, b, cc] {
        poll_until(Duration::from_secs(5), "sessions released", || {
            n.api_json("/api/sessions")
                .as_array()?
                .is_empty()
                .then_some(())
        });
    }
}

/// ffmpeg (default, follows a new source address) decodes with zero errors and the
/// expected frame count while its session moves A → B → C → A in `own` mode.
#[test]
fn ffmpeg_plays_through_moves_own_mode() {
    let c = start_cluster();
    let first = c.recorded_for(14_000);
    let a = c.node(0);
    let url = secure_cluster::placed(&format!(
        "{}?start={}&end={}",
        a.url("playback/demo"),
        rfc3339(first),
        rfc3339(first + 12_000)
    ));
    let viewer = spawn_ffmpeg_decode(
        &url,
        &["-rtsp_transport", "udp"],
        &[],
        Duration::from_secs(40),
    );
    let id = playback_session(a);
    secure_cluster::move_through(&c, &id, [1, 2, 0], "own");
    let d = viewer.join().expect("ffmpeg");
    d.assert_plays("ffmpeg through A→B→C→A", 299, 301);
}

/// Bad input: unknown session, unknown node, the node it is on, a TCP session; each a
/// clear error, and the session plays on.
#[test]
fn migrate_refusals_are_clear() {
    let c = start_cluster();
    let first = c.recorded_for(6_000);
    let a = c.node(0);
    let url = secure_cluster::placed(&format!(
        "{}?start={}",
        a.url("playback/demo"),
        rfc3339(first),
    ));
    let refuse = |args: &[&str], want: &str| {
        let out = run_with_timeout(
            Command::new(vigil_bin())
                .env("VIGIL_API_TOKEN", vigil_tests::ADMIN_TOKEN)
                .args(["ctl", "--api", &format!("http://{}", a.api)])
                .args(args),
            Duration::from_secs(15),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
    };
    let b_id = c.members[1].id.clone();
    refuse(&["migrate", "NOSUCHSESSION", &b_id], "no session");
    // A TCP-interleaved viewer.
    let tcp = spawn_ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &["-t", "6"],
        Duration::from_secs(30),
    );
    let id = playback_session(a);
    refuse(&["migrate", &id, &b_id], "TCP-interleaved");
    refuse(&["migrate", &id, "no-such-node"], "not a live member");
    refuse(&["migrate", &id, &c.members[0].id], "already on");
    refuse(
        &["migrate", &id, &b_id, "--mode", "teleport"],
        "own or preserve",
    );
    tcp.join()
        .expect("ffmpeg")
        .assert_plays("TCP viewer after refused moves", 149, 151);
}

/// The next video packet within 10 s, counted by `stats`.
async fn next_video(p: &mut Player, video: usize, stats: &mut TrackStats) -> ReceivedPacket {
    let pkt = secure_cluster::next_packet_of(p, video).await;
    stats.record(
        &pkt.header,
        &pkt.payload,
        12 + pkt.payload.len(),
        Duration::ZERO,
    );
    pkt
}

fn from_ip(pkt: &ReceivedPacket) -> String {
    pkt.from.map(|a| a.ip().to_string()).unwrap_or_default()
}

/// After a move to B, PAUSE, resume, a seek and Scale 2 — all sent to A — behave on B as
/// they would on A (RTP-Info, keyframe after the seek, twice the frame rate), the stream
/// stays one (SSRC, sequence), and TEARDOWN releases the session on both nodes.
#[test]
fn vcr_after_a_move_reaches_the_sending_node_and_teardown_releases_both() {
    let c = start_cluster();
    let first = c.recorded_for(20_000);
    let (a, b) = (c.node(0), c.node(1));
    let url = secure_cluster::placed(&format!(
        "{}?start={}",
        a.url("playback/demo"),
        rfc3339(first)
    ));
    let b_id = c.members[1].id.clone();
    let a_api = format!("http://{}", a.api);
    vigil_tests::multi_thread_runtime().block_on(async {
        let mut p = play(&url, PlayOptions::new(ClientTransport::Udp))
            .await
            .expect("play");
        let v = p
            .tracks()
            .iter()
            .position(|t| t.codec.is_video())
            .expect("video");
        let mut stats = TrackStats::new(p.tracks()[v].codec, p.tracks()[v].clock_rate);
        for _ in 0..25 {
            next_video(&mut p, v, &mut stats).await;
        }
        let id = playback_session(a);
        let mv = tokio::task::spawn_blocking(move || {
            let out = Command::new(vigil_bin())
                .env("VIGIL_API_TOKEN", vigil_tests::ADMIN_TOKEN)
                .args(["ctl", "--api", &a_api, "migrate", &id, &b_id])
                .output()
                .expect("ctl");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        });
        let mut from_b = 0;
        while from_b < 25 {
            if from_ip(&next_video(&mut p, v, &mut stats).await) == "127.0.0.2" {
                from_b += 1;
            }
        }
        mv.await.expect("migrate");

        // PAUSE: B stops sending (what was in flight drains), nothing comes for a second.
        p.pause().await.expect("PAUSE");
        while let Ok(r) = tokio::time::timeout(Duration::from_millis(300), p.next_packet()).await {
            if let Ok(Some(pkt)) = r {
                if pkt.track == v {
                    let len = 12 + pkt.payload.len();
                    stats.record(&pkt.header, &pkt.payload, len, Duration::ZERO);
                }
            }
        }
        assert!(
            tokio::time::timeout(Duration::from_secs(1), p.next_packet())
                .await
                .is_err(),
            "media while paused"
        );
        // Resume: exactly where it paused, from B.
        let seq = p
            .play(PlayRequest::new())
            .await
            .expect("resume")
            .rtp_info
            .first()
            .and_then(|i| i.seq)
            .expect("RTP-Info seq");
        let pkt = next_video(&mut p, v, &mut stats).await;
        assert_eq!(pkt.header.sequence, seq, "resumed at RTP-Info's seq");
        assert_eq!(from_ip(&pkt), "127.0.0.2", "resumed on B");

        // Seek to npt 12: B starts on the keyframe at or before it.
        let answer = p
            .play(PlayRequest::new().npt(12.0))
            .await
            .expect("seek")
            .clone();
        let start = answer
            .range
            .as_ref()
            .and_then(|_| p.answer().npt_start())
            .expect("Range");
        assert!((11.0..=12.0).contains(&start), "seek answered npt {start}");
        let seq = p.rtp_info_of(v).and_then(|i| i.seq).expect("RTP-Info seq");
        let pkt = loop {
            let pkt = next_video(&mut p, v, &mut stats).await;
            if pkt.header.sequence.wrapping_sub(seq) < 0x8000 {
                break pkt;
            }
        };
        assert_eq!(pkt.header.sequence, seq);
        assert!(
            starts_keyframe(p.tracks()[v].codec, &pkt.payload),
            "seek starts on a keyframe"
        );
        assert_eq!(from_ip(&pkt), "127.0.0.2", "seek served by B");

        // Scale 2: twice the frames per wall second, from B.
        let answer = p
            .play(PlayRequest::new().scale(2.0))
            .await
            .expect("Scale 2")
            .clone();
        assert_eq!(answer.scale, Some(2.0), "Scale echoed");
        let t0 = std::time::Instant::now();
        let mut frames = BTreeSet::new();
        while t0.elapsed() < Duration::from_secs(2) {
            let pkt = next_video(&mut p, v, &mut stats).await;
            assert_eq!(from_ip(&pkt), "127.0.0.2", "Scale 2 served by B");
            frames.insert(pkt.header.timestamp);
        }
        let fps = frames.len() as f64 / t0.elapsed().as_secs_f64();
        assert!((40.0..=60.0).contains(&fps), "{fps:.1} frames/s at Scale 2");
        assert_eq!(stats.seq.lost(), 0, "sequence gaps");
        assert_eq!(stats.ssrc_changes, 0, "SSRC changed");
        p.teardown().await.expect("TEARDOWN");
    });
    for n in [a, b] {
        poll_until(Duration::from_secs(5), "the session released", || {
            n.api_json("/api/sessions")
                .as_array()?
                .is_empty()
                .then_some(())
        });
    }
}

/// B dies before the move (A still believes it alive): the move fails with the reason and
/// the session plays on from A. B dies right after a move: A takes the session back within
/// a second and the viewer goes on, one SSRC, no sequence number missing.
#[test]
fn a_dead_target_leaves_the_session_playing_and_a_dead_sender_gives_it_back() {
    let mut c = start_cluster();
    let first = c.recorded_for(14_000);
    let url = secure_cluster::placed(&format!(
        "{}?start={}&end={}",
        c.node(0).url("playback/demo"),
        rfc3339(first),
        rfc3339(first + 12_000)
    ));
    let (seen, viewer) = spawn_viewer(url, None);
    let a = c.node(0);
    let id = playback_session(a);
    poll_until(Duration::from_secs(5), "media", || {
        (packets_from(&seen, "127.0.0.1") > 25).then_some(())
    });
    // B killed: the Prepare finds no one; nothing moved.
    c.members[1].node.kill();
    let a = c.node(0);
    let out = run_with_timeout(
        Command::new(vigil_bin())
            .env("VIGIL_API_TOKEN", vigil_tests::ADMIN_TOKEN)
            .args([
                "ctl",
                "--api",
                &format!("http://{}", a.api),
                "migrate",
                &id,
                &c.members[1].id,
            ]),
        Duration::from_secs(15),
    );
    assert!(!out.status.success(), "a move to a dead node succeeded");
    let before = packets_from(&seen, "127.0.0.1");
    poll_until(Duration::from_secs(5), "A still sending", || {
        (packets_from(&seen, "127.0.0.1") > before + 25).then_some(())
    });
    // To C, then C killed right after: A takes it back.
    migrate(a, &id, &c.members[2].id, "own");
    poll_until(Duration::from_secs(5), "media from C", || {
        (packets_from(&seen, "127.0.0.3") > 25).then_some(())
    });
    let back = packets_from(&seen, "127.0.0.1");
    c.members[2].node.kill();
    let a = c.node(0);
    poll_until(Duration::from_secs(5), "media from A again", || {
        (packets_from(&seen, "127.0.0.1") > back + 25).then_some(())
    });
    viewer.join().expect("viewer");
    let seen = seen.lock().unwrap().clone();
    // The take-back: last packet from C → first from A again.
    let last_c = seen
        .iter()
        .rposition(|s| s.from.is_some_and(|f| f.ip().to_string() == "127.0.0.3"))
        .expect("C sent");
    let resumed = &seen[last_c + 1];
    let took = resumed.at.duration_since(seen[last_c].at);
    eprintln!("take-back gap: {took:?}");
    assert!(
        took < Duration::from_millis(1200),
        "A took the session back after {took:?}"
    );
    let ssrcs: BTreeSet<u32> = seen.iter().map(|s| s.ssrc).collect();
    assert_eq!(ssrcs.len(), 1, "SSRCs {ssrcs:?}");
    // Nothing missing: A resumes from C's last heartbeat (a few packets may come twice).
    let (lo, hi) = (seen[0].seq, seen[seen.len() - 1].seq);
    let got: BTreeSet<u16> = seen.iter().map(|s| s.seq.wrapping_sub(lo)).collect();
    let span = hi.wrapping_sub(lo);
    assert_eq!(got.len(), usize::from(span) + 1, "sequence numbers missing");
    let s = a.api_json("/api/sessions");
    assert!(
        s.as_array().unwrap().is_empty() || s[0]["node"] == c.members[0].id.as_str(),
        "{s}"
    );
}

/// B is killed (SIGKILL) while it answers `Prepare`: a fault hook holds B's Prepare, the
/// test kills B once B logs that it holds it, and A — waiting for the answer, bounded by
/// `rpc_timeout_ms` — gives up. The move fails with the reason, the session never stopped
/// playing from A (one SSRC, no sequence gap, every frame), A still shows it as its own and
/// never moved, and `vigil_migrations_total{result="failed"}` counted it.
#[test]
fn a_target_killed_during_prepare_leaves_the_session_playing_on_a() {
    let faults = tempfile::tempdir().expect("temp dir");
    let stall = faults.path().join("stall-prepare");
    let stall_env = stall.display().to_string();
    let mut c = secure_cluster::start_with_env(
        2,
        "",
        |_| "[cluster.migration]\nrpc_timeout_ms = 4000\n".into(),
        |i| {
            if i == 1 {
                vec![(
                    vigil_server::migrate::host::PREPARE_STALL_ENV.into(),
                    stall_env.clone(),
                )]
            } else {
                Vec::new()
            }
        },
    );
    let first = c.recorded_for(12_000);
    let a = c.node(0);
    let url = secure_cluster::placed(&format!(
        "{}?start={}&end={}",
        a.url("playback/demo"),
        rfc3339(first),
        rfc3339(first + 10_000)
    ));
    let (seen, viewer) = spawn_viewer(url, None);
    let id = playback_session(a);
    poll_until(Duration::from_secs(5), "media from A", || {
        (packets_from(&seen, "127.0.0.1") > 25).then_some(())
    });
    let failed = r#"vigil_migrations_total{result="failed"}"#;
    let failed_before = vigil_tests::metric_value(a, failed);
    std::fs::write(&stall, b"").expect("fault file");
    let api = format!("http://{}", a.api);
    let (sid, b_id) = (id.clone(), c.members[1].id.clone());
    let mv = std::thread::spawn(move || {
        run_with_timeout(
            Command::new(vigil_bin())
                .env("VIGIL_API_TOKEN", vigil_tests::ADMIN_TOKEN)
                .args(["ctl", "--api", &api, "migrate", &sid, &b_id]),
            Duration::from_secs(20),
        )
    });
    poll_until(Duration::from_secs(10), "B to hold the Prepare", || {
        c.node(1)
            .log()
            .contains("fault injection: Prepare stalled")
            .then_some(())
    });
    c.members[1].node.kill();
    let out = mv.join().expect("migrate thread");
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("migrate: {err}");
    assert!(!out.status.success(), "a move to a node killed in Prepare");
    assert!(err.contains("could not prepare"), "{err}");
    let a = c.node(0);
    let before = packets_from(&seen, "127.0.0.1");
    poll_until(Duration::from_secs(5), "A still sending", || {
        (packets_from(&seen, "127.0.0.1") > before + 25).then_some(())
    });
    // Nothing half-moved: the session is A's, never moved, and the failure was counted.
    let s = a.api_json("/api/sessions");
    let s = s
        .as_array()
        .and_then(|v| v.iter().find(|s| s["id"] == id.as_str()))
        .cloned()
        .expect("the session on A");
    assert_eq!(s["node"], c.members[0].id.as_str(), "{s}");
    assert_eq!(s["moves"], 0, "{s}");
    assert!(s["steered_by"].is_null(), "{s}");
    assert_eq!(
        vigil_tests::metric_value(a, failed),
        failed_before + 1.0,
        "failed moves counted"
    );
    viewer.join().expect("viewer");
    let seen = seen.lock().unwrap().clone();
    let gaps = assert_one_stream(&seen, "move refused during Prepare");
    assert!(gaps.is_empty(), "the source changed: {gaps:?}");
    let frames: BTreeSet<u32> = seen.iter().map(|s| s.ts).collect();
    assert!(
        (249..=252).contains(&frames.len()),
        "{} frames for a 10 s range",
        frames.len()
    );
}
