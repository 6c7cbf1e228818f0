//! Live fan-out end to end: late joiners start on a keyframe at once, hundreds of viewers
//! of one path each get every packet, a viewer that stops reading hurts nobody else, and
//! retina (a third-party client) plays from vigil. Viewers are the project's own light
//! client (`vigil_testkit::client`), many per process.

use futures::StreamExt;
use std::process::Command;
use std::time::{Duration, Instant};
use vigil_proto::codec::starts_keyframe;
use vigil_testkit::client::{play, ClientTransport, PlayOptions, Player, Stats};
use vigil_tests::{
    fixture, multi_thread_runtime, poll_until, spawn_background, Background, Node, NodeBuilder,
};

const DEMO: &str = "live/demo";
/// Clock ticks of the demo's 90 kHz video clock in one second.
const CLOCK: u32 = 90_000;

fn demo_node(extra: &str) -> Node {
    demo_node_from(NodeBuilder::new().extra(extra))
}

/// The node `builder` makes, with the demo camera live.
fn demo_node_from(builder: NodeBuilder) -> Node {
    let node = builder
        .extra("[[camera]]\nid = \"demo\"\nsource = \"demo\"")
        .start();
    node.wait_live(DEMO);
    node
}

fn packets_in(node: &Node) -> u64 {
    packets_in_of(node, DEMO)
}

fn packets_in_of(node: &Node, path: &str) -> u64 {
    node.path_info(path).unwrap()["packets_in"]
        .as_u64()
        .unwrap()
}

/// A counter from `/metrics` (0 when the series has not been written yet).
fn metric(node: &Node, name: &str) -> f64 {
    let text = node.try_api("/metrics").unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == name).then(|| v.trim().parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// Wait until the demo has been flowing for more than one GOP, so a new viewer joins
/// mid-stream (the newest keyframe is in the past).
fn wait_mid_stream(node: &Node) {
    let p0 = packets_in(node);
    poll_until(
        Duration::from_secs(10),
        "the demo to run past a GOP",
        || (packets_in(node) > p0 + 100).then_some(()),
    );
}

/// (ingested packets, when), sampled from a blocking context inside the runtime.
fn ingest_sample(node: &Node) -> (u64, Instant) {
    ingest_sample_of(node, DEMO)
}

fn ingest_sample_of(node: &Node, path: &str) -> (u64, Instant) {
    tokio::task::block_in_place(|| (packets_in_of(node, path), Instant::now()))
}

fn late_joiner_gets_keyframe_first(transport: ClientTransport) {
    let node = demo_node("");
    wait_mid_stream(&node);
    let url = node.url(DEMO);
    multi_thread_runtime().block_on(async {
        for join in 1..=5u32 {
            let mut p = play(&url, PlayOptions::new(transport)).await.unwrap();
            let pkt = tokio::time::timeout(Duration::from_secs(5), p.next_packet())
                .await
                .expect("a packet within 5 s")
                .unwrap()
                .expect("stream still playing");
            let latency = pkt.at - p.play_sent();
            let codec = p.tracks()[pkt.track].codec;
            assert!(codec.is_video());
            assert!(
                starts_keyframe(codec, &pkt.payload),
                "join {join}: first packet (NAL header {:#04x}) does not start a keyframe",
                pkt.payload.first().copied().unwrap_or(0)
            );
            assert!(
                latency < Duration::from_millis(100),
                "join {join}: first packet {latency:?} after PLAY"
            );
            // Join next at another phase of the 1 s GOP: play on until this viewer's media
            // clock has moved on by a fraction of a GOP that is not a whole second.
            let until = pkt.header.timestamp.wrapping_add(join * CLOCK * 37 / 100);
            loop {
                let next = tokio::time::timeout(Duration::from_secs(5), p.next_packet())
                    .await
                    .expect("media keeps flowing")
                    .unwrap()
                    .expect("stream still playing");
                if next.header.timestamp.wrapping_sub(until) as i32 >= 0 {
                    break;
                }
            }
            p.teardown().await.unwrap();
        }
    });
}

#[test]
fn late_joiner_gets_keyframe_first_within_100ms_tcp() {
    late_joiner_gets_keyframe_first(ClientTransport::Tcp);
}

#[test]
fn late_joiner_gets_keyframe_first_within_100ms_udp() {
    late_joiner_gets_keyframe_first(ClientTransport::Udp);
}

/// Everything a viewer that was fed "every packet at the source rate" must show over a
/// window in which the node ingested at `source_pps` packets per second.
fn assert_full_delivery(who: &str, s: &Stats, window: Duration, source_pps: f64) {
    assert!(s.error.is_none(), "{who}: {:?}", s.error);
    assert!(!s.ended, "{who}: stream ended");
    let t = &s.tracks[0];
    assert_eq!(s.lost(), 0, "{who}: sequence gaps");
    assert_eq!(t.ssrc_changes, 0, "{who}: SSRC changed");
    assert_eq!(
        t.timestamp_regressions, 0,
        "{who}: timestamps went backwards"
    );
    assert_eq!(
        s.first_video_keyframe(),
        Some(true),
        "{who}: first packet not a keyframe"
    );
    // A viewer the server skipped ahead would see a jump of a whole ring of packets.
    assert!(
        t.max_timestamp_step < CLOCK / 2,
        "{who}: timestamp jumped by {} ticks",
        t.max_timestamp_step
    );
    assert!(
        t.timestamp_span() + Duration::from_millis(300) >= window,
        "{who}: media time covered {:?} of a {window:?} window",
        t.timestamp_span()
    );
    let rate = s.packets() as f64 / window.as_secs_f64();
    assert!(
        rate >= 0.9 * source_pps,
        "{who}: {rate:.1} packets/s against a source rate of {source_pps:.1}"
    );
    assert!(
        (s.packets() as f64) < source_pps * (window.as_secs_f64() + 5.0),
        "{who}: more packets ({}) than the source sent",
        s.packets()
    );
}

/// `n` viewers connect, then all count for the same window; each must have received the
/// source's packet rate with no gaps.
fn many_readers_get_every_packet(node: &Node, n: usize, transport: ClientTransport) {
    let url = node.url(DEMO);
    let window = Duration::from_secs(4);
    let rt = multi_thread_runtime();
    let (stats, source_pps) = rt.block_on(async {
        let mut connecting = Vec::new();
        for _ in 0..n {
            let url = url.clone();
            connecting.push(tokio::spawn(async move {
                play(&url, PlayOptions::new(transport)).await
            }));
        }
        let mut players = Vec::new();
        for c in connecting {
            players.push(c.await.unwrap().expect("viewer connects"));
        }
        let (p0, t0) = ingest_sample(node);
        let running: Vec<_> = players
            .into_iter()
            .map(|p| tokio::spawn(p.run_stats(window)))
            .collect();
        let mut stats = Vec::new();
        for r in running {
            stats.push(r.await.unwrap());
        }
        let (p1, t1) = ingest_sample(node);
        let pps = (p1 - p0) as f64 / (t1 - t0).as_secs_f64();
        (stats, pps)
    });
    assert!(
        source_pps > 10.0,
        "the demo source is not flowing ({source_pps:.1} packets/s)"
    );
    for (i, s) in stats.iter().enumerate() {
        assert_full_delivery(&format!("reader {i}"), s, window, source_pps);
    }
    assert_eq!(metric(node, "vigil_reader_skips_total"), 0.0);
    assert_eq!(metric(node, "vigil_slow_readers_dropped_total"), 0.0);
}

#[test]
fn two_hundred_tcp_readers_each_get_every_packet() {
    let node = demo_node("");
    many_readers_get_every_packet(&node, 200, ClientTransport::Tcp);
}

#[test]
fn fifty_udp_readers_each_get_every_packet() {
    // 50 readers take 50 RTP/RTCP pairs; the harness's default range holds 100.
    let node = demo_node("");
    many_readers_get_every_packet(&node, 50, ClientTransport::Udp);
}

/// A 2 Mb/s stream published with ffmpeg: a stalled viewer backs up the node's socket
/// buffers in seconds, not minutes. The node does not cap SO_SNDBUF, so Linux autotunes a
/// loopback viewer's send buffer up to `net.ipv4.tcp_wmem`'s maximum (4 MB here, ≈ 15 s of
/// this stream) before a write blocks and the slow-reader timeout starts.
fn publish_2mbps(node: &Node, path: &str) -> Background {
    let file = fixture("h264_2mbps.mp4");
    let publisher = spawn_background(
        Command::new("ffmpeg")
            .args(["-v", "error", "-re", "-stream_loop", "-1", "-i"])
            .arg(&file)
            .args(["-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp"])
            .arg(node.url(path)),
    );
    node.wait_live(path);
    publisher
}

#[test]
fn stalled_tcp_reader_does_not_disturb_others_and_is_dropped() {
    stalled_reader(false);
}

/// Dropping the stalled viewer also ends its session: the node does not try to write an RTCP
/// BYE to a socket that takes nothing (that write would block its connection task).
#[test]
fn stalled_tcp_readers_session_is_released() {
    stalled_reader(true);
}

/// A viewer stops reading while 20 others play: the others' delivery must not change, and
/// the node must drop the stalled one (and, with `expect_released`, end its session).
fn stalled_reader(expect_released: bool) {
    const PATH: &str = "live/fast";
    let node = NodeBuilder::new()
        .extra("[live]\nslow_reader_timeout_ms = 2000")
        .start();
    let _publisher = publish_2mbps(&node, PATH);
    let url = node.url(PATH);
    let rt = multi_thread_runtime();
    let (healthy, window, source_pps) = rt.block_on(async {
        // The stalled viewer reads nothing after PLAY; a small receive buffer of its own
        // makes the node's side back up sooner.
        let mut opts = PlayOptions::new(ClientTransport::Tcp);
        opts.stop_reading_after = Some(Duration::ZERO);
        opts.recv_buffer = Some(4096);
        let stalled = play(&url, opts).await.unwrap();
        let stalled_addr = stalled.local_addr().unwrap().to_string();
        let mut players: Vec<Player> = Vec::new();
        for _ in 0..20 {
            players.push(
                play(&url, PlayOptions::new(ClientTransport::Tcp))
                    .await
                    .unwrap(),
            );
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stop = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let (p0, t0) = ingest_sample_of(&node, PATH);
        let started = Instant::now();
        let running: Vec<_> = players
            .into_iter()
            .map(|p| tokio::spawn(p.collect_stats(stop(), None)))
            .collect();
        let held = tokio::spawn(stalled.collect_stats(stop(), None));
        tokio::task::block_in_place(|| {
            poll_until(
                Duration::from_secs(40),
                "the stalled viewer to be dropped",
                || (metric(&node, "vigil_slow_readers_dropped_total") >= 1.0).then_some(()),
            );
            if !expect_released {
                return;
            }
            vigil_tests::wait_session_ended(&node, &stalled_addr, Duration::from_secs(10));
        });
        let (p1, t1) = ingest_sample_of(&node, PATH);
        stop_tx.send(true).unwrap();
        let window = started.elapsed();
        let mut stats = Vec::new();
        for r in running {
            stats.push(r.await.unwrap());
        }
        held.await.unwrap();
        let pps = (p1 - p0) as f64 / (t1 - t0).as_secs_f64();
        (stats, window, pps)
    });
    assert!(
        window >= Duration::from_secs(2),
        "the stall lasted at least the timeout"
    );
    for (i, s) in healthy.iter().enumerate() {
        assert_full_delivery(&format!("healthy reader {i}"), s, window, source_pps);
    }
}

#[test]
fn retina_plays_live_demo_over_tcp() {
    use retina::client::{
        PlayOptions, SessionOptions, SetupOptions, TcpTransportOptions, Transport,
    };
    use retina::codec::CodecItem;
    let node = demo_node("");
    let url = url::Url::parse(&node.url(DEMO)).unwrap();
    multi_thread_runtime().block_on(async {
        let mut session = retina::client::Session::describe(url, SessionOptions::default())
            .await
            .unwrap();
        assert_eq!(session.streams().len(), 1);
        assert_eq!(session.streams()[0].encoding_name(), "h264");
        session
            .setup(
                0,
                SetupOptions::default().transport(Transport::Tcp(TcpTransportOptions::default())),
            )
            .await
            .unwrap();
        let playing = session.play(PlayOptions::default()).await.unwrap();
        let mut demuxed = Box::pin(playing.demuxed().unwrap());
        let mut frames = 0;
        let mut first_is_keyframe = None;
        let deadline = Instant::now() + Duration::from_secs(20);
        while frames < 50 {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, demuxed.next()).await {
                Err(_) => panic!("only {frames} frames within 20 s"),
                Ok(None) => panic!("stream ended after {frames} frames"),
                Ok(Some(Err(e))) => panic!("retina: {e}"),
                Ok(Some(Ok(CodecItem::VideoFrame(f)))) => {
                    first_is_keyframe.get_or_insert(f.is_random_access_point());
                    assert!(!f.data().is_empty());
                    frames += 1;
                }
                Ok(Some(Ok(_))) => {}
            }
        }
        assert_eq!(
            first_is_keyframe,
            Some(true),
            "retina's first frame is not a keyframe"
        );
    });
}

/// A live UDP viewer of the demo, playing: its RTP and RTCP sockets, its client RTP port,
/// its RTSP connection (held: the session lives on it) and the node's RTP port.
struct UdpViewer {
    rtp: std::net::UdpSocket,
    rtcp: std::net::UdpSocket,
    port: u16,
    _conn: vigil_tests::RtspConn,
    server: u16,
}

fn udp_viewer(node: &Node) -> UdpViewer {
    let (rtp, rtcp, port) = vigil_tests::udp_port_pair();
    let mut conn = vigil_tests::RtspConn::connect(node.rtsp);
    let server = vigil_tests::server_port(&conn.play_udp(&node.url(DEMO), port));
    UdpViewer {
        rtp,
        rtcp,
        port,
        _conn: conn,
        server,
    }
}

/// The first RTP datagram on `sock`: where it came from and its SSRC.
fn first_rtp(sock: &std::net::UdpSocket) -> (std::net::SocketAddr, u32) {
    sock.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 2048];
    let (n, from) = sock.recv_from(&mut buf).expect("an RTP packet within 5 s");
    assert!(n >= 12, "a {n}-byte datagram is no RTP packet");
    (from, u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]))
}

/// Live UDP viewers share the node's one server port pair (`[rtsp] udp_shared_ports`, the
/// default): both are sent from it, each its own stream (SSRC), and the viewers' RTCP on
/// the one port is told apart by its source: the viewer that reports keeps its session,
/// the silent one times out beside it.
#[test]
fn udp_viewers_share_one_port_pair_and_only_a_viewers_own_rtcp_keeps_it() {
    let node = demo_node("[limits]\nsession_timeout_secs = 2");
    let a = udp_viewer(&node);
    let b = udp_viewer(&node);
    let server = a.server;
    assert_eq!(
        b.server, server,
        "the second viewer was given ports of its own"
    );
    let played = Instant::now();
    let (from_a, ssrc_a) = first_rtp(&a.rtp);
    let (from_b, ssrc_b) = first_rtp(&b.rtp);
    let shared: std::net::SocketAddr = ([127, 0, 0, 1], server).into();
    assert_eq!(
        (from_a, from_b),
        (shared, shared),
        "media from another port"
    );
    assert_ne!(ssrc_a, ssrc_b, "two viewers, one RTP identity");

    // A reports (a receiver report from its RTCP port, as ffmpeg sends one); B is silent.
    let report = vigil_proto::rtcp::receiver_report(0x00a0_0001, "viewer-a");
    let report_a = || {
        a.rtcp
            .send_to(&report, ("127.0.0.1", server + 1))
            .expect("send RTCP");
    };
    let remaining = poll_until(
        Duration::from_secs(10),
        "the silent viewer's session to time out",
        || {
            report_a();
            let sessions = node.api_json("/api/sessions");
            let list = sessions.as_array()?;
            (list.len() == 1).then(|| list[0].clone())
        },
    );
    assert!(
        played.elapsed() >= Duration::from_millis(1900),
        "a session ended after {:?}, before its 2 s timeout",
        played.elapsed()
    );
    assert!(
        remaining
            .to_string()
            .contains(&format!("client_port={}", a.port)),
        "the reporting viewer's session is the one that ended: {remaining}"
    );
    // A stays past another whole timeout while it reports (RTCP paced at 200 ms, as a
    // client sends it; not a wait for a condition).
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        report_a();
        std::thread::sleep(Duration::from_millis(200));
    }
    let sessions = node.api_json("/api/sessions");
    assert_eq!(
        sessions.as_array().map(Vec::len),
        Some(1),
        "the reporting viewer's session timed out: {sessions}"
    );
}

/// `udp_shared_ports = false`: each live UDP viewer gets a pair of its own again.
#[test]
fn udp_viewers_get_a_pair_each_when_ports_are_not_shared() {
    let node = demo_node_from(NodeBuilder::new().rtsp("udp_shared_ports = false"));
    let a = udp_viewer(&node);
    let b = udp_viewer(&node);
    assert_ne!(
        a.server, b.server,
        "two viewers on one pair with sharing off"
    );
    let (from_a, _) = first_rtp(&a.rtp);
    assert_eq!(from_a, ([127, 0, 0, 1], a.server).into());
}
