//! Bad playback requests get clear answers; `vigil ctl` shows recordings and the cache.

use crate::support::*;

/// Unknown camera → 404; a start outside the recordings → 404 naming the recorded range;
/// a malformed time → 400; Scale 0 or negative → 456; the node serves on afterwards.
#[test]
fn bad_playback_requests_get_clear_errors() {
    let rec = recording();
    let node = playback_node(rec);
    let describe = |url: &str| {
        let mut c = RtspConn::connect(node.rtsp);
        c.request("DESCRIBE", url, &[("Accept", "application/sdp")], None)
    };
    let r = describe(&playback_url(&node, "nosuchcam", rec.first_ms, None));
    assert_eq!(r.status.0, 404, "unknown camera: {}", r.reason);
    for (what, t) in [
        ("before", rec.first_ms - 3_600_000),
        ("after", rec.last_ms + 60_000),
    ] {
        let r = describe(&playback_url(&node, CAM, t, None));
        assert_eq!(r.status.0, 404, "start {what} the recording: {}", r.reason);
        assert!(
            r.reason.contains("recorded from") && r.reason.contains(&rfc3339(rec.first_ms)),
            "start {what} the recording: the reason should name the recorded range: {}",
            r.reason
        );
    }
    for bad in ["yesterday", "2026-13-40T08:00:00Z", "2026-11-29T08:00:00"] {
        let r = describe(&node.url(&format!("playback/{CAM}?start={bad}")));
        assert_eq!(r.status.0, 400, "start={bad}: {}", r.reason);
    }
    let r = describe(&node.url(&format!("playback/{CAM}")));
    assert_eq!(r.status.0, 400, "no start: {}", r.reason);

    // Scale and Speed that are not positive: 456 on a set-up session, which then still plays.
    let url = playback_url(&node, CAM, rec.first_ms + 1_000, None);
    let mut c = RtspConn::connect(node.rtsp);
    let d = c.request("DESCRIBE", &url, &[("Accept", "application/sdp")], None);
    assert_eq!(d.status.0, 200);
    let base = d.headers.get("Content-Base").unwrap_or(&url).to_string();
    let sdp = String::from_utf8_lossy(&d.body).into_owned();
    for (i, control) in sdp
        .lines()
        .filter_map(|l| l.strip_prefix("a=control:"))
        .filter(|c| c.contains("trackID="))
        .enumerate()
    {
        let transport = format!("RTP/AVP/TCP;unicast;interleaved={}-{}", 2 * i, 2 * i + 1);
        let s = c.request("SETUP", control.trim(), &[("Transport", &transport)], None);
        assert_eq!(s.status.0, 200, "SETUP {control}: {}", s.reason);
    }
    for (header, value) in [
        ("Scale", "0"),
        ("Scale", "-1"),
        ("Scale", "-0.5"),
        ("Scale", "abc"),
        ("Scale", "1e400"),
        ("Speed", "0"),
        ("Speed", "-2"),
    ] {
        let r = c.request("PLAY", &base, &[(header, value)], None);
        assert!(
            matches!(r.status.0, 456 | 400),
            "{header}: {value} answered {} {}",
            r.status.0,
            r.reason
        );
    }
    let r = c.request("PLAY", &base, &[("Range", "npt=abc-")], None);
    assert_eq!(r.status.0, 457, "bad Range: {}", r.reason);
    let r = c.request("PLAY", &base, &[("Scale", "1")], None);
    assert_eq!(
        r.status.0, 200,
        "a good PLAY after the bad ones: {}",
        r.reason
    );
    drop(c);
    // The node still serves: a new playback plays.
    runtime().block_on(async {
        play_from_a_keyframe(&url, "after bad input").await;
    });
}

/// `vigil ctl recordings <camera>` prints the recorded range; `vigil ctl cache` the cache
/// counters and the resident range of the camera that was played.
#[test]
fn ctl_shows_recordings_and_cache() {
    let rec = recording();
    let node = playback_node(rec);
    let text = ctl(&node, &["recordings", CAM]);
    assert!(
        text.contains(&format!("{CAM}: {} segments", rec.segments.len())),
        "{text}"
    );
    assert!(
        text.contains("recorded")
            && text.contains(&rfc3339(rec.first_ms))
            && text.contains(&rfc3339(rec.last_ms)),
        "vigil ctl recordings:\n{text}"
    );
    // One DESCRIBE loads the first segment into the cache.
    let mut c = RtspConn::connect(node.rtsp);
    let d = c.request(
        "DESCRIBE",
        &playback_url(&node, CAM, rec.first_ms, None),
        &[("Accept", "application/sdp")],
        None,
    );
    assert_eq!(d.status.0, 200);
    let text = ctl(&node, &["cache"]);
    assert!(text.contains("storage reads 1"), "vigil ctl cache:\n{text}");
    assert!(
        text.contains("start list: ") && text.contains("playback opens 1, from memory 0"),
        "vigil ctl cache:\n{text}"
    );
    let seg = &rec.segments[0];
    assert!(
        text.contains(CAM) && text.contains(&rfc3339(seg.start_ms)),
        "vigil ctl cache lists the resident segment:\n{text}"
    );
    let json = ctl(&node, &["--json", "cache"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("ctl --json cache");
    assert_eq!(v["stats"]["loads"], 1, "{v}");
    // The opened segment is the start list's one entry: all the cache holds.
    assert_eq!(v["stats"]["start_bytes"], v["stats"]["bytes"], "{v}");
    assert!(v["stats"]["start_bytes"].as_u64() > Some(0), "{v}");
}

/// A TCP viewer that stops reading its playback is dropped after the slow-reader timeout
/// and its session ends, as a live viewer's does. Its connection task must not wait on a
/// write the peer never takes: that held the session, its playback task and the segments
/// it pinned until the peer closed, and no TEARDOWN or session timeout could reach it.
#[test]
fn a_tcp_playback_viewer_that_stops_reading_is_dropped() {
    let rec = recording();
    let node = NodeBuilder::new()
        .extra(&storage(rec.root.path(), 2.0))
        .extra("[live]\nslow_reader_timeout_ms = 1000")
        .start();
    let url = playback_url(&node, CAM, rec.first_ms, None);
    runtime().block_on(async {
        // Reads nothing after PLAY; a small receive buffer backs the node's side up sooner.
        let mut opts = PlayOptions::new(ClientTransport::Tcp);
        opts.stop_reading_after = Some(Duration::ZERO);
        opts.recv_buffer = Some(4096);
        opts.play = PlayRequest::new();
        let stalled = play(&url, opts).await.expect("PLAY");
        let addr = stalled.local_addr().expect("local address").to_string();
        tokio::task::block_in_place(|| {
            poll_until(
                Duration::from_secs(30),
                "the stalled playback viewer to be dropped",
                || {
                    let dropped =
                        vigil_tests::metric_value(&node, "vigil_slow_readers_dropped_total");
                    (dropped >= 1.0).then_some(())
                },
            );
            vigil_tests::wait_session_ended(&node, &addr, Duration::from_secs(10));
        });
        drop(stalled);
    });
    // The node serves on: a new playback plays.
    runtime().block_on(async {
        play_from_a_keyframe(&url, "after a stalled viewer").await;
    });
}

/// PAUSE from a TCP viewer that has fallen behind: its socket is full, so its connection
/// cannot write, and the node's sender is held up on a full queue when the PAUSE comes.
/// The connection stops the sender before it answers, and only the connection empties that
/// queue: the sender must give way to the stop (it used to wait on the queue forever, and
/// the PAUSE was never answered, nor any later request). Nothing is lost: the packets sent
/// before the PAUSE and those after the resume run on without a sequence gap.
#[test]
fn pause_from_a_tcp_viewer_behind_on_a_full_queue_is_answered() {
    let rec = recording();
    let node = NodeBuilder::new()
        .extra(&storage(rec.root.path(), 2.0))
        .extra("[live]\nslow_reader_timeout_ms = 30000")
        .start();
    let start = rec.first_ms + 1_000;
    let url = playback_url(&node, CAM, start, None);
    runtime().block_on(async {
        let mut opts = PlayOptions::new(ClientTransport::Tcp);
        opts.recv_buffer = Some(4096);
        opts.play = PlayRequest::new().scale(2.0);
        let mut p = play(&url, opts).await.expect("play");
        let played = Instant::now();
        let mut cont = Continuity::new(&p);
        // The viewer reads nothing now. Its sender is held up once the last frame it queued
        // is 3 s of media behind where Scale 2 pacing would have it.
        tokio::task::block_in_place(|| {
            poll_until(
                Duration::from_secs(20),
                "the sender held up by a full queue",
                || {
                    let due = start + 2 * played.elapsed().as_millis() as i64;
                    (due - playback_position(&node)? >= 3_000).then_some(())
                },
            )
        });
        p.pause().await.expect("PAUSE answered");
        let answer = p.play(PlayRequest::new()).await.expect("resume").clone();
        assert!(answer.range.is_some(), "resume answer without Range");
        // Everything queued before the PAUSE, then the resumed range from RTP-Info's seq.
        let firsts: Vec<u16> = (0..p.tracks().len())
            .map(|t| p.rtp_info_of(t).and_then(|i| i.seq).expect("RTP-Info seq"))
            .collect();
        let mut resumed = vec![false; firsts.len()];
        while resumed.iter().any(|r| !r) {
            let pkt = next(&mut p, "after the resume").await;
            cont.see(&pkt);
            resumed[pkt.track] |= seq_at_or_after(pkt.header.sequence, firsts[pkt.track]);
        }
        cont.assert_continuous("a PAUSE while the sender was held up");
    });
}

/// A PLAY refused after the running sender had to stop (a PLAY without a start while
/// playing learns the sender's position only by stopping it; here its Range ends before
/// that position: 457) leaves the session as it was: the media goes on, continuous, and the
/// session answers PAUSE and a resume. Before the session core the refusal came after the
/// sender was stopped and the state committed, so the viewer's media just stopped.
#[test]
fn a_refused_play_leaves_the_session_playing_as_it_was() {
    use vigil_testkit::client::ClientError;
    let rec = recording();
    let node = playback_node(rec);
    let start = rec.first_ms + 1_000;
    let url = playback_url(&node, CAM, start, None);
    runtime().block_on(async {
        let mut p = play(&url, PlayOptions::new(ClientTransport::Tcp))
            .await
            .expect("play");
        let mut cont = Continuity::new(&p);
        // Past 0.5 s of the presentation before the refused PLAY.
        while playback_position(&node).is_none_or(|at| at < start + 1_000) {
            let pkt = next(&mut p, "before the refused PLAY").await;
            cont.see(&pkt);
        }
        match p.play(PlayRequest::new().range("npt=now-0.5")).await {
            Err(ClientError::Status { status, reason, .. }) => {
                assert_eq!(status, 457, "{reason}");
                assert!(reason.contains("ends before it starts"), "{reason}");
            }
            other => panic!("a PLAY whose range ends behind the sender: {other:?}"),
        }
        let refused_at = playback_position(&node).expect("a position");
        // The media goes on from where it was: a second of it more, no sequence gap.
        while playback_position(&node).is_none_or(|at| at < refused_at + 1_000) {
            let pkt = next(&mut p, "after the refused PLAY").await;
            cont.see(&pkt);
        }
        cont.assert_continuous("a refused PLAY");
        p.pause().await.expect("PAUSE after the refused PLAY");
        p.play(PlayRequest::new()).await.expect("resume");
    });
}
