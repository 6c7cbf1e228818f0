//! Sessions that move between nodes while they play (issue 7): real node processes on
//! 127.0.0.1–3 with cluster certificates, a recording on the shared root, viewers over UDP,
//! and `vigil ctl migrate` moving their media A → B → C → A. Every wait polls with a deadline.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use vigil_tests::secure_cluster::{
    self, assert_one_stream, migrate, packets_from, packets_on, playback_session, spawn_viewer,
    SecureCluster,
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
    let url = format!(
        "{}?start={}&end={}&vigil_placed=1",
        a.url("playback/demo"),
        rfc3339(first),
        rfc3339(first + 12_000)
    );
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
    let url = format!(
        "{}?start={}&end={}&vigil_placed=1",
        a.url("playback/demo"),
        rfc3339(first),
        rfc3339(first + 12_000)
    );
    let viewer = spawn_ffmpeg_decode(
        &url,
        &["-rtsp_transport", "udp"],
        &[],
        Duration::from_secs(40),
    );
    let id = playback_session(a);
    for i in [1usize, 2, 0] {
        let n = c.node(i);
        let before = packets_on(n, &id);
        migrate(a, &id, &c.members[i].id, "own");
        // The new sender plays a second of media before the next move.
        poll_until(
            Duration::from_secs(5),
            "a second of media from the new node",
            || (packets_on(n, &id) > before + 100).then_some(()),
        );
    }
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
    let url = format!(
        "{}?start={}&vigil_placed=1",
        a.url("playback/demo"),
        rfc3339(first),
    );
    let refuse = |args: &[&str], want: &str| {
        let out = run_with_timeout(
            Command::new(vigil_bin())
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
