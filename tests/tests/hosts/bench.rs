//! Benchmarks on the bed (`--ignored`): they print tables for docs/BENCHMARKS.md.

use std::time::Duration;
use vigil_testkit::bed_node::RTSP_PORT;
use vigil_tests::handoff::{moves, report};
use vigil_tests::secure_cluster::spawn_viewer;
use vigil_tests::{ffmpeg_decode, poll_every, rfc3339, DEMO_CAMERA};

use crate::support::*;

/// A child process killed on drop (the GStreamer relay).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Benchmark: live viewers behind a lossy access line (0 %, 1 %, 3 % of the packets they
/// receive dropped), over UDP and TCP, watching one camera through vigil's relay and
/// through GStreamer's rtsp-server relaying the same camera (`tests/tools/gst_relay.py`),
/// side by side in one run, and a playback of vigil's recording of it on the same line:
/// what ffmpeg decodes in 10 s and how many errors it reports.
/// The viewer's line has a 100 ms RTT (what the viewer sends waits 100 ms: `tc netem`, or
/// the bed's delay line). Prints the table for docs/BENCHMARKS.md.
#[test]
#[ignore = "benchmark: run with --ignored --nocapture (needs GStreamer's rtsp-server typelib)"]
fn lossy_viewers_vigil_beside_gstreamer() {
    let _serial = vigil_tests::serial();
    let Some((bed, control, viewer, hosts)) = bed_of(&["farm", "vigil", "gst"]) else {
        return;
    };
    let (farm_host, vigil_host, gst_host) = (&hosts[0], &hosts[1], &hosts[2]);
    let _farm = spawn(&bed, farm_host, "farm", "", DEMO_CAMERA);
    let camera = format!("rtsp://{}:{RTSP_PORT}/live/demo", farm_host.ip);
    // vigil relays the camera and records it, for the playback rows.
    let tmp = tempfile::tempdir().expect("temp dir");
    let relay = spawn(
        &bed,
        vigil_host,
        "vigil",
        "",
        &format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n\
             [[camera]]\nid = \"cam\"\nsource = \"{camera}\"\non_demand = false\n",
            tmp.path().display()
        ),
    );
    let script = vigil_testkit::workspace().join("tests/tools/gst_relay.py");
    let mut gst = bed.command(gst_host, "/usr/bin/python3");
    gst.arg(&script)
        .args([
            camera.as_str(),
            &gst_host.ip.to_string(),
            &RTSP_PORT.to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut gst = Killed(gst.spawn().expect("python3 gst_relay.py"));
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(gst.0.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("the relay's first line");
    assert_eq!(line.trim(), "ready", "gst_relay.py: {line}");
    poll_every(
        Duration::from_millis(100),
        Duration::from_secs(20),
        "vigil's relay pulling the camera",
        || {
            live_cameras(&bed, &control, &relay)
                .iter()
                .any(|c| c == "cam")
                .then_some(())
        },
    );
    // 12 s recorded: a playback of 10 s from the first recorded moment.
    let first = recorded_for_camera(&bed, &control, &relay, "cam", 12_000);
    let urls = [
        ("vigil", relay.url("live/cam")),
        (
            "GStreamer rtsp-server",
            format!("rtsp://{}:{RTSP_PORT}/relay", gst_host.ip),
        ),
        (
            "vigil playback",
            relay.url(&format!("playback/cam?start={}", rfc3339(first))),
        ),
    ];
    let by = bed
        .delay(&viewer, Duration::from_millis(100), Duration::ZERO)
        .expect("100 ms on the viewer's line");
    let rtt = bed.within(&viewer, || {
        handshake_ms(&format!("http://{}:{}", vigil_host.ip, RTSP_PORT), 10)
    });
    let mut rows = Vec::new();
    for loss in [0.0, 1.0, 3.0] {
        bed.loss_in(&viewer, loss).expect("viewer loss");
        for transport in ["udp", "tcp"] {
            for (name, url) in &urls {
                let d = bed.within(&viewer, || {
                    ffmpeg_decode(
                        url,
                        &["-rtsp_transport", transport],
                        &["-t", "10"],
                        Duration::from_secs(40),
                    )
                });
                let errors = d.stderr.lines().filter(|l| !l.trim().is_empty()).count();
                if let Some(first) = d.stderr.lines().find(|l| !l.trim().is_empty()) {
                    eprintln!("{name}, {transport}, {loss} %: first error line: {first}");
                }
                rows.push(format!(
                    "| {loss} % | {transport} | {name} | {} of 250 | {errors} |",
                    d.frames
                ));
            }
        }
    }
    let dropped = bed.lost(&viewer).unwrap_or(0);
    eprintln!(
        "lossy viewer link (loss of received packets; {dropped} dropped in all; RTT {rtt:.0} ms by {by:?}), 10 s of live:\n\
         | loss | transport | relay | frames decoded | ffmpeg error lines |\n|---|---|---|---|---|\n{}",
        rows.join("\n")
    );
}

/// Benchmark: the handoff gap across hosts, as `migration_bench` measures it on loopback —
/// 100 moves A → B → C → A… of one 1× playback per source mode, the viewer (the project's
/// client over UDP) on a host of its own: the server's gap (the migrate answer's `gap_ms`),
/// the client's inter-arrival around each move and its excess over the media spacing, and
/// the packets lost or duplicated. Prints the tables for docs/BENCHMARKS.md ("On real
/// hosts").
#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn handoff_gap_across_hosts() {
    let _serial = vigil_tests::serial();
    let Some((bed, control, viewer, hosts)) = bed_of(&FIVE[..3]) else {
        return;
    };
    let site = Site::new();
    let nodes = demo_trio(&bed, &control, &site, &hosts);
    let first = recorded_for(&bed, &control, &nodes[0], 10_000);
    let mut known = Vec::new();
    for mode in ["own", "preserve"] {
        let url = vigil_tests::placed_by_hand(
            &nodes[0].url(&format!(
                "playback/demo?start={}&end={}",
                rfc3339(first),
                rfc3339(first + 75_000)
            )),
            KEY,
        );
        let (seen, client) = bed.within(&viewer, || spawn_viewer(url, None));
        let id = new_playback_session(&bed, &control, &nodes[0], &mut known);
        poll_every(
            Duration::from_millis(50),
            Duration::from_secs(5),
            "media",
            || (seen.lock().unwrap().len() > 50).then_some(()),
        );
        let (server, moved_at) = moves(&seen, 100, |k| {
            let to = &nodes[(k + 1) % 3].id;
            let (status, body) = post_migrate(&bed, &control, &nodes[0], &id, to, mode);
            assert_eq!(status, 200, "move {k} to {to} ({mode}): {body}");
            serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["gap_ms"].as_f64())
        });
        let seen = seen.lock().unwrap().clone();
        report(
            &format!("across hosts, {mode} mode: 100 moves of one 1× playback (25 fps)"),
            server,
            &moved_at,
            &seen,
        );
        drop(client);
    }
}
