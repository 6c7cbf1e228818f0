//! Sessions moving between hosts in `own` and `preserve` mode, and where `preserve` cannot.

use std::time::Duration;
use vigil_testkit::hosts::Host;
use vigil_tests::{ffmpeg_decode, rfc3339};

use crate::support::*;

/// A playback's media moves A → B → C → A between three hosts while the viewer, on a host
/// of its own, decodes it: in `own` mode (each node sends from its own address; ffmpeg
/// follows) and in `preserve` mode (B and C send with A's address and ports, which crosses
/// the bridge because every host is on one segment: ffmpeg with `filter_src`, a connected
/// socket that drops any other source, decodes every frame).
#[test]
fn sessions_move_between_hosts_in_own_and_preserve_mode() {
    let _serial = vigil_tests::serial();
    let Some((bed, control, viewer, hosts)) = bed_of(&FIVE[..3]) else {
        return;
    };
    let site = Site::new();
    let nodes = demo_trio(&bed, &control, &site, &hosts);
    let first = recorded_for(&bed, &control, &nodes[0], 14_000);
    let mut known = Vec::new();
    for (mode, input) in [
        ("own", vec!["-rtsp_transport", "udp"]),
        (
            "preserve",
            vec!["-rtsp_transport", "udp", "-rtsp_flags", "filter_src"],
        ),
    ] {
        // Served by A itself (a marker signed with the cluster key: no placement).
        let url = vigil_tests::placed_by_hand(
            &nodes[0].url(&format!(
                "playback/demo?start={}&end={}",
                rfc3339(first),
                rfc3339(first + 12_000)
            )),
            KEY,
        );
        let ff = bed.spawn_within(&viewer, move || {
            let input: Vec<&str> = input.clone();
            ffmpeg_decode(&url, &input, &[], Duration::from_secs(40))
        });
        let id = new_playback_session(&bed, &control, &nodes[0], &mut known);
        move_around(&bed, &control, &nodes, &id, mode);
        ff.join().expect("ffmpeg").assert_plays(
            &format!("ffmpeg through A→B→C→A across hosts ({mode})"),
            299,
            301,
        );
    }
    // GStreamer's rtspsrc over UDP (its session drops a new source address or port).
    let url = vigil_tests::placed_by_hand(
        &nodes[0].url(&format!(
            "playback/demo?start={}&end={}",
            rfc3339(first),
            rfc3339(first + 12_000)
        )),
        KEY,
    );
    let gst = bed.spawn_within(&viewer, move || {
        vigil_tests::gst_decode_h264(&url, "udp", 280, Duration::from_secs(40))
    });
    let id = new_playback_session(&bed, &control, &nodes[0], &mut known);
    move_around(&bed, &control, &nodes, &id, "preserve");
    let g = gst.join().expect("gst");
    assert!(g.errors.is_empty(), "GStreamer errors: {:?}", g.errors);
    assert_eq!(g.frames, 280, "GStreamer frames; output:\n{}", g.output);

    // Where preserve cannot work — node 3 reaches node 1 through a router (the operator's
    // host, forwarding) — the move is refused with why, the session plays on, and `own`
    // still moves it.
    let run = |host: &Host, args: &[&str]| {
        let out = bed
            .command(host, args[0])
            .args(&args[1..])
            .output()
            .expect(args[0]);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&control, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    run(
        &control,
        &["sysctl", "-qw", "net.ipv4.conf.all.send_redirects=0"],
    );
    run(
        &control,
        &["sysctl", "-qw", "net.ipv4.conf.eth0.send_redirects=0"],
    );
    let (route, router) = (format!("{}/32", hosts[0].ip), control.ip.to_string());
    run(
        &hosts[2],
        &["ip", "route", "add", &route, "via", &router, "dev", "eth0"],
    );
    let url = vigil_tests::placed_by_hand(
        &nodes[0].url(&format!(
            "playback/demo?start={}&end={}",
            rfc3339(first),
            rfc3339(first + 8_000)
        )),
        KEY,
    );
    let ff = bed.spawn_within(&viewer, move || {
        ffmpeg_decode(
            &url,
            &["-rtsp_transport", "udp"],
            &[],
            Duration::from_secs(40),
        )
    });
    let id = new_playback_session(&bed, &control, &nodes[0], &mut known);
    let (status, body) = post_migrate(&bed, &control, &nodes[0], &id, &nodes[2].id, "preserve");
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("one L2 segment") && body.contains(&hosts[0].ip.to_string()),
        "{body}"
    );
    migrate(&bed, &control, &nodes[0], &id, &nodes[2].id, "own");
    ff.join().expect("ffmpeg").assert_plays(
        "ffmpeg through a refused preserve move and an own one",
        199,
        201,
    );
}
