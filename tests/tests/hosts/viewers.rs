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

/// A viewer's RTP leaves by a socket kept out of tokio's reactor
/// (`vigil_server::net::udp::SendSocket`, so that the kernel does not wake the reactor for
/// each datagram sent): when that socket's buffer fills behind a link slower than what is
/// sent, the sender waits for room instead of spinning or losing datagrams, and goes on
/// when the link has drained it. 1500 RTP packets of 1212 bytes (1.8 MB) go to a host
/// behind an 8 Mb/s uplink, ten times what the socket's buffer holds: every one arrives,
/// in order and whole, and the sends took at least the time the link needs for what the
/// buffer could not hold (the waits happened).
#[test]
fn a_full_udp_send_buffer_waits_for_the_link_and_loses_nothing() {
    use bytes::Bytes;
    use std::net::{SocketAddr, UdpSocket};
    use std::time::Instant;
    use vigil_server::live::reader::OutPacket;
    use vigil_server::net::udp::{send_batch, SendSocket};

    const PACKETS: usize = 1500;
    const PAYLOAD: usize = 1200;
    const RATE: u64 = 8_000_000;
    let _serial = vigil_tests::serial();
    let Some(mut bed) = bed_or_skip() else {
        return;
    };
    let sender = bed.add_host("sender").expect("sender host");
    let receiver = bed.add_host("receiver").expect("receiver host");
    bed.uplink_rate(&sender, RATE).expect("an 8 Mb/s uplink");
    // Sockets belong to the namespace they were made in, whichever thread uses them.
    let rx = bed.within(&receiver, || {
        UdpSocket::bind((receiver.ip, 0)).expect("bind")
    });
    let to = rx.local_addr().expect("receiver address");
    let from_addr = SocketAddr::from((sender.ip, 0));
    // Connected to the receiver, as a viewer's RTP socket is.
    let tx = bed.within(&sender, || {
        SendSocket::bind(from_addr).expect("bind").connected_to(to)
    });
    rx.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut got = Vec::new();
        while got.len() < PACKETS {
            match rx.recv(&mut buf) {
                Ok(n) => got.push((n, u16::from_be_bytes([buf[2], buf[3]]), buf[n - 1])),
                Err(_) => break,
            }
        }
        got
    });
    let packets: Vec<OutPacket> = (0..PACKETS)
        .map(|i| {
            let mut header = [0u8; 12];
            header[0] = 0x80;
            header[2..4].copy_from_slice(&(i as u16).to_be_bytes());
            OutPacket {
                track: 0,
                header,
                payload: Bytes::from(vec![i as u8; PAYLOAD]),
            }
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let started = Instant::now();
    // A frame's worth at a time, as a live sender hands them over.
    let sent: usize = rt.block_on(async {
        let mut sent = 0;
        for frame in packets.chunks(30) {
            let n = tokio::time::timeout(Duration::from_secs(20), send_batch(&tx, to, frame))
                .await
                .expect("the sender stalled: no wake once the buffer drained")
                .expect("send");
            sent += n;
        }
        sent
    });
    let took = started.elapsed();
    assert_eq!(sent, PACKETS);
    let got = reader.join().expect("receiver");
    assert_eq!(got.len(), PACKETS, "datagrams lost behind the slow link");
    for (i, &(len, seq, last)) in got.iter().enumerate() {
        assert_eq!(
            (len, seq, last),
            (12 + PAYLOAD, i as u16, i as u8),
            "datagram {i}"
        );
    }
    // What did not fit the socket's buffer (its size read in the sender's namespace) and
    // the bucket's burst waited for the link.
    let sndbuf = bed.within(&sender, || {
        std::fs::read_to_string("/proc/sys/net/core/wmem_default")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(212_992)
    });
    let bytes = (PACKETS * (12 + PAYLOAD)) as u64;
    let must_wait = bytes.saturating_sub(sndbuf + 4096) as f64 * 8.0 / RATE as f64;
    assert!(
        took.as_secs_f64() >= must_wait * 0.9,
        "1.8 MB sent in {took:?} through an 8 Mb/s link: the socket never filled"
    );
    eprintln!(
        "{PACKETS} datagrams ({bytes} bytes) through an 8 Mb/s uplink: sent in {took:?} \
         (the link needs {must_wait:.2} s beyond the {sndbuf}-byte buffer), all received in order"
    );
}
