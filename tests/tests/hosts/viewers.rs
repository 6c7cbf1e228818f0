//! What a viewer's own link does: an MTU below Ethernet's, a link slower than the camera.

use std::time::Duration;
use vigil_testkit::hosts::Bed;
use vigil_tests::{ffmpeg_decode, poll_every, rfc3339, DEMO_CAMERA};

use crate::support::*;

/// A viewer whose link has an MTU of 1400 gets every packet of the demo camera and of a
/// playback over UDP whole: each packet vigil makes fits the default `rtsp.mtu` (1400) as
/// one datagram, so nothing on the way has to fragment it (the viewer's stack reassembles
/// no fragment) and ffmpeg decodes without an error. The control: a node told
/// `mtu = 1500` sends datagrams that reach the viewer only in fragments — the bed's MTU is
/// real, and the setting is what keeps the packets under it.
#[test]
fn every_packet_fits_a_1400_byte_viewer_link() {
    let _serial = vigil_tests::serial();
    let Some((bed, control, viewer, hosts)) = bed_of(&["fits", "big"]) else {
        return;
    };
    let (fits, big) = (&hosts[0], &hosts[1]);
    bed.mtu(&viewer, 1400).expect("MTU 1400");
    let tmp = tempfile::tempdir().expect("temp dir");
    let storage = |name: &str| {
        format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n{DEMO_CAMERA}\n",
            tmp.path().join(name).display()
        )
    };
    let node = spawn(&bed, fits, "fits", "", &storage("fits"));
    let node_big = spawn(&bed, big, "big", "mtu = 1500", &storage("big"));
    let fragments = || bed.ip_counter(&viewer, "ReasmReqds").expect("ReasmReqds");
    let before = fragments();
    let (largest, missing) = udp_packets(
        &bed,
        &viewer,
        &node.url("live/demo"),
        Duration::from_secs(3),
    );
    let live = bed.within(&viewer, || {
        ffmpeg_decode(
            &node.url("live/demo"),
            &["-rtsp_transport", "udp"],
            &["-t", "3"],
            Duration::from_secs(30),
        )
    });
    live.assert_plays("live over UDP on a 1400-byte link", 74, 76);
    let first = recorded_for_camera(&bed, &control, &node, "demo", 4_000);
    let url = node.url(&format!("playback/demo?start={}", rfc3339(first)));
    let (largest_pb, missing_pb) = udp_packets(&bed, &viewer, &url, Duration::from_secs(3));
    let pb = bed.within(&viewer, || {
        ffmpeg_decode(
            &url,
            &["-rtsp_transport", "udp"],
            &["-t", "3"],
            Duration::from_secs(30),
        )
    });
    pb.assert_plays("playback over UDP on a 1400-byte link", 74, 76);
    let fragmented = fragments() - before;
    assert!(
        largest + 28 <= 1400,
        "a {largest}-byte RTP packet does not fit 1400"
    );
    assert!(
        largest_pb + 28 <= 1400,
        "a {largest_pb}-byte playback packet does not fit 1400"
    );
    assert_eq!(
        (missing, missing_pb),
        (0, 0),
        "packets lost on the 1400-byte link"
    );
    assert_eq!(
        fragmented, 0,
        "the viewer reassembled {fragmented} IP fragments"
    );
    // The control: 1500-byte packets cross the viewer's link only in fragments.
    let before = fragments();
    let (largest_big, _) = udp_packets(
        &bed,
        &viewer,
        &node_big.url("live/demo"),
        Duration::from_secs(3),
    );
    let fragmented_big = fragments() - before;
    assert!(
        largest_big + 28 > 1400 && fragmented_big > 0,
        "with mtu = 1500: largest {largest_big} B, {fragmented_big} fragments: the bed's MTU \
         is not in force"
    );
    eprintln!(
        "MTU 1400 viewer link: largest RTP packet {largest} B live, {largest_pb} B playback, \
         none lost or fragmented; with rtsp.mtu = 1500: {largest_big} B packets, \
         {fragmented_big} fragments reassembled in 3 s"
    );
}

/// A TCP viewer on a link with a third of the camera's bitrate (the 2 Mb/s viewer
/// of a 4 Mb/s camera, scaled down to the demo camera's 0.6 Mb/s and made slower still) is
/// skipped ahead to keyframes once its connection backs up, and is never taken for a viewer
/// that stopped reading: it keeps getting pictures, late ones dropped whole GOPs at a time.
/// Neither the camera's recording nor another viewer notices: the other viewer, on a
/// full-speed link, decodes without an error meanwhile and the recording grows.
///
/// At this rate the node's socket stays unwritable ≈ 7 s at a time (Linux wakes a writer
/// once a third of its 512 KiB send buffer has drained), longer than the 5 s slow-reader
/// timeout: a timer on writability dropped this viewer (CI, 2026-12-03); the node's writer
/// now times out only when the send queue stops shrinking (`net::stall`).
#[test]
fn a_viewer_on_a_slow_link_is_skipped_to_keyframes_and_stalls_nobody() {
    let _serial = vigil_tests::serial();
    let Some((bed, control, viewer, hosts)) = bed_of(&["node1", "slow"]) else {
        return;
    };
    let slow = &hosts[1];
    bed.downlink_rate(slow, 200_000).expect("a 200 kb/s link");
    let tmp = tempfile::tempdir().expect("temp dir");
    let node = spawn(
        &bed,
        &hosts[0],
        "node1",
        "",
        &format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n[live]\nring_kb = 128\n{DEMO_CAMERA}\n",
            tmp.path().display()
        ),
    );
    recorded_for_camera(&bed, &control, &node, "demo", 2_000);
    let counter = |bed: &Bed, name: &str| {
        let text = bed
            .within(&control, || get(&node.api(), "/metrics"))
            .unwrap_or_default();
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let skips = |bed: &Bed| counter(bed, "vigil_reader_skips_total");
    let dropped = |bed: &Bed| counter(bed, "vigil_slow_readers_dropped_total");
    let (skips_before, dropped_before) = (skips(&bed), dropped(&bed));
    let url = node.url("live/demo");
    let slow_host = slow.clone();
    let slow_url = url.clone();
    // The slow viewer reads for 40 s: its connection's buffers (the node's 512 KiB send
    // buffer, then the path's 128 KiB ring, `[live] ring_kb`) fill in ≈ 13 s.
    let slow_bed_view = std::thread::scope(|s| {
        let h = s.spawn(|| tcp_keyframes(&bed, &slow_host, &slow_url, Duration::from_secs(40)));
        // Meanwhile, once it has backed up, a viewer on a full-speed link is unaffected.
        poll_every(
            Duration::from_millis(250),
            Duration::from_secs(35),
            "the slow viewer skipped ahead",
            || (skips(&bed) > skips_before).then_some(()),
        );
        let other = bed.within(&viewer, || {
            ffmpeg_decode(
                &url,
                &["-rtsp_transport", "tcp"],
                &["-t", "3"],
                Duration::from_secs(30),
            )
        });
        other.assert_plays("a full-speed viewer beside the slow one", 74, 76);
        h.join().expect("slow viewer")
    });
    let (keyframes, packets) = slow_bed_view;
    assert_eq!(
        dropped(&bed),
        dropped_before,
        "the slow viewer, reading all along, was dropped as a stalled one"
    );
    // It kept getting pictures for the whole 40 s: ≈ 1 MB crossed its link, 13 GOPs of the
    // demo camera; one dropped when its buffers had filled would have had 8 at most.
    assert!(
        keyframes >= 11,
        "the slow viewer got {keyframes} keyframes in 40 s ({packets} packets)"
    );
    recorded_for_camera(&bed, &control, &node, "demo", 40_000);
    let ranges = api_json(&bed, &control, &node, "/api/recordings/demo")
        .and_then(|v| v["ranges"].as_array().map(Vec::len));
    assert_eq!(ranges, Some(1), "the recording has a gap");
    eprintln!(
        "slow TCP viewer (200 kb/s link, 612 kb/s camera): {} skips, {keyframes} keyframes \
         and {packets} packets in 40 s, never dropped; the other viewer and the recording \
         unaffected",
        skips(&bed) - skips_before
    );
}
