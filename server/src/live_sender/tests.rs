//! The group sender over real loopback sockets: what each viewer receives is its own, its
//! commands reach only it, a TCP viewer that does not read holds back nobody, and the
//! group lives exactly as long as it has viewers.

use super::group::Groups;
use super::{LivePump, TcpOut};
use crate::live::reader::tests::{push_payload, stream, SETUP};
use crate::live::reader::Reader;
use crate::live::stream::Stream;
use crate::net::tcp_sink::TcpSink;
use crate::net::udp::SendSocket;
use crate::node::{Node, SessionInfo, SessionKindView};
use crate::playback::task::{UdpOut, UdpVia};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use vigil_proto::rtcp::{parse_compound, RtcpPacket};
use vigil_proto::rtp::parse;

const DEADLINE: Duration = Duration::from_secs(5);

struct Viewer {
    ssrc: u32,
    rtp: UdpSocket,
    rtcp: UdpSocket,
    info: Arc<SessionInfo>,
    pump: Option<LivePump>,
}

/// The sockets viewers send from (RTP, RTCP).
type Senders = (Arc<SendSocket>, Arc<UdpSocket>);

async fn senders() -> Senders {
    let rtp = SendSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    (Arc::new(rtp), Arc::new(rtcp))
}

/// A pump for viewer `ssrc` of `s`, sending from `from` to `to`.
fn pump(
    node: &Arc<Node>,
    s: &Arc<Stream>,
    ssrc: u32,
    from: Senders,
    to: (SocketAddr, SocketAddr),
) -> (Arc<SessionInfo>, LivePump) {
    let out = UdpOut {
        track: 0,
        via: UdpVia::Socket {
            rtp: from.0,
            rtcp: from.1,
        },
        dest_rtp: to.0,
        dest_rtcp: to.1,
        srtp: None,
    };
    let info = Arc::new(SessionInfo::new(
        format!("s{ssrc}"),
        "live/t".into(),
        SessionKindView::Play,
        to.0,
        CancellationToken::new(),
    ));
    let setup = crate::live::reader::TrackSetup { ssrc, ..SETUP };
    let reader = Reader::new(s.clone(), &[Some(setup)]);
    let pump = LivePump::spawn(node.clone(), info.clone(), reader, vec![out], None, None);
    (info, pump)
}

async fn viewer(node: &Arc<Node>, s: &Arc<Stream>, ssrc: u32) -> Viewer {
    let rtp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let to = (rtp.local_addr().unwrap(), rtcp.local_addr().unwrap());
    let (info, pump) = pump(node, s, ssrc, senders().await, to);
    Viewer {
        ssrc,
        rtp,
        rtcp,
        info,
        pump: Some(pump),
    }
}

impl Viewer {
    /// The next RTP packet: (ssrc, sequence, first payload byte).
    async fn next(&self) -> (u32, u16, u8) {
        let mut buf = [0u8; 2048];
        let n = tokio::time::timeout(DEADLINE, self.rtp.recv(&mut buf))
            .await
            .expect("a packet within the deadline")
            .unwrap();
        let (h, payload) = parse(&buf[..n]).unwrap();
        (h.ssrc, h.sequence, buf[payload.start])
    }

    /// Waits for an RTCP BYE of this viewer's SSRC (sender reports may come first).
    async fn bye(&self) {
        let mut buf = [0u8; 2048];
        loop {
            let n = tokio::time::timeout(DEADLINE, self.rtcp.recv(&mut buf))
                .await
                .expect("RTCP within the deadline")
                .unwrap();
            let pkts = parse_compound(&buf[..n]).unwrap();
            if pkts
                .iter()
                .any(|p| matches!(p, RtcpPacket::Bye { ssrcs } if ssrcs.contains(&self.ssrc)))
            {
                return;
            }
        }
    }

    fn nothing_waiting(&self) -> bool {
        let mut buf = [0u8; 2048];
        self.rtp.try_recv(&mut buf).is_err()
    }
}

/// A node and a stream whose first packet, a keyframe with payload `[1]`, is in the hub.
fn started() -> (Arc<Node>, Arc<Stream>, u64) {
    let node = Node::new(vigil_conf::Config::default(), None, None);
    let s = stream();
    let e = s.current_epoch();
    push_payload(&s, e, 1, 0, true, vec![1]);
    (node, s, e)
}

fn groups(node: &Node) -> Arc<Groups> {
    node.extensions.get_or_init(|| Arc::new(Groups::default()))
}

async fn poll(what: &str, mut f: impl FnMut() -> bool) {
    let end = tokio::time::Instant::now() + DEADLINE;
    while !f() {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn one_group_sends_each_viewer_its_own_stream_and_obeys_each_ones_commands() {
    let (node, s, e) = started();
    let mut v = Vec::new();
    for ssrc in [0x10, 0x20, 0x30] {
        v.push(viewer(&node, &s, ssrc).await);
    }
    assert_eq!(
        groups(&node).len(),
        1,
        "one group for the stream's three viewers"
    );
    // Each starts on the GOP cache's keyframe with its own identity.
    for x in &v {
        assert_eq!(x.next().await, (x.ssrc, SETUP.first_seq, 1));
    }
    push_payload(&s, e, 2, 3000, false, vec![2]);
    for x in &v {
        assert_eq!(x.next().await, (x.ssrc, SETUP.first_seq + 1, 2));
    }

    // Pausing the second holds back only the second.
    v[1].pump.as_ref().unwrap().set_paused(true);
    push_payload(&s, e, 3, 6000, false, vec![3]);
    for i in [0, 2] {
        assert_eq!(v[i].next().await, (v[i].ssrc, SETUP.first_seq + 2, 3));
    }
    assert!(v[1].nothing_waiting(), "a paused viewer was sent a packet");
    v[1].pump.as_ref().unwrap().set_paused(false);
    assert_eq!(v[1].next().await, (v[1].ssrc, SETUP.first_seq + 2, 3));

    // Stopped for a handoff: no BYE, its reader back where it stopped.
    let pumped = v[0]
        .pump
        .take()
        .unwrap()
        .stop()
        .await
        .expect("the viewer's state");
    assert_eq!(pumped.reader.cursor(), s.head());
    assert!(pumped.last_sent_us.is_some());
    // What it was sent is in its session's counters once it left (12 + 1 bytes a packet).
    let counted = |x: &Viewer| {
        let o = std::sync::atomic::Ordering::Relaxed;
        (x.info.packets.load(o), x.info.bytes.load(o))
    };
    assert_eq!(counted(&v[0]), (3, 39));
    // Ended: a BYE; dropped: the same.
    v[1].pump.take().unwrap().end();
    v[1].bye().await;
    drop(v[2].pump.take());
    v[2].bye().await;
    poll("the ended viewers' counts", || {
        v[1..].iter().all(|x| counted(x) == (3, 39))
    })
    .await;
    push_payload(&s, e, 4, 9000, false, vec![4]);
    let g = groups(&node);
    poll("the group to retire", || g.len() == 0).await;
    assert!(
        v.iter().all(Viewer::nothing_waiting),
        "a viewer that left was sent a packet"
    );
    assert!(v.iter().all(|x| !x.info.cancel.is_cancelled()));

    // A viewer arriving after starts a group of its own.
    push_payload(&s, e, 5, 12000, true, vec![5]);
    let late = viewer(&node, &s, 0x40).await;
    assert_eq!(late.next().await, (0x40, SETUP.first_seq, 5));
    assert_eq!(groups(&node).len(), 1);
    drop(pumped);
}

#[tokio::test]
async fn the_publishers_end_ends_each_viewer_with_a_bye_and_leaves_its_state() {
    let (node, s, e) = started();
    let a = viewer(&node, &s, 0x10).await;
    let b = viewer(&node, &s, 0x20).await;
    assert_eq!(a.next().await.2, 1);
    assert_eq!(b.next().await.2, 1);
    s.finish(e);
    a.bye().await;
    b.bye().await;
    assert!(a.info.cancel.is_cancelled() && b.info.cancel.is_cancelled());
    let pump = a.pump.unwrap();
    assert!(pump.is_finished());
    let left = pump
        .stop()
        .await
        .expect("the state of a viewer that ended on its own");
    assert_eq!(left.reader.cursor(), s.head());
    let g = groups(&node);
    poll("the group to retire", || g.len() == 0).await;
}

#[tokio::test]
async fn a_stream_with_more_viewers_than_a_group_holds_gets_more_groups() {
    let (node, s, _) = started();
    // The viewers send from one socket to eight receivers (a keyframe to all of them at once
    // would overflow one receive buffer): only their SSRCs tell them apart.
    let mut rxs = Vec::new();
    for _ in 0..8 {
        rxs.push(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    }
    let from = senders().await;
    let n = super::group::GROUP_MAX + 44;
    let mut pumps = Vec::new();
    for ssrc in 0..n as u32 {
        let to = rxs[ssrc as usize % rxs.len()].local_addr().unwrap();
        pumps.push(pump(&node, &s, ssrc, from.clone(), (to, to)).1);
    }
    assert_eq!(groups(&node).len(), 2);
    let mut seen = std::collections::BTreeSet::new();
    let mut buf = [0u8; 2048];
    let end = tokio::time::Instant::now() + DEADLINE;
    while seen.len() < n {
        assert!(
            tokio::time::Instant::now() < end,
            "{} of {n} viewers' keyframes",
            seen.len()
        );
        for rx in &rxs {
            while let Ok(len) = rx.try_recv(&mut buf) {
                if let Ok((h, _)) = parse(&buf[..len]) {
                    if h.payload_type == 96 {
                        seen.insert(h.ssrc);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(seen.len(), n);
    drop(pumps);
    let g = groups(&node);
    poll("both groups to retire", || g.len() == 0).await;
}

/// A TCP viewer of `s`: the node's side of a loopback connection (the sink the group
/// writes to, drained by a task standing for the RTSP connection's) and the viewer's end,
/// with a small receive buffer so that a viewer that does not read fills its socket fast.
async fn tcp_viewer(
    node: &Arc<Node>,
    s: &Arc<Stream>,
    ssrc: u32,
) -> (LivePump, tokio::net::TcpStream, Arc<TcpSink>) {
    let (server, client) = crate::net::tcp::slow_reader_pair(16 * 1024).await;
    let sink = TcpSink::new(server.into_split().1);
    let (drain, mut w) = (sink.clone(), sink.writer());
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        loop {
            drain.queued().await;
            if w.flush().await.is_err() {
                return;
            }
        }
    });
    let info = Arc::new(SessionInfo::new(
        format!("t{ssrc}"),
        "live/t".into(),
        SessionKindView::Play,
        client.local_addr().unwrap(),
        CancellationToken::new(),
    ));
    let setup = crate::live::reader::TrackSetup { ssrc, ..SETUP };
    let reader = Reader::new(s.clone(), &[Some(setup)]);
    let out = TcpOut {
        sink: sink.clone(),
        rtp: vec![Some(0)],
        rtcp: vec![Some(1)],
    };
    let pump = LivePump::spawn_tcp(node.clone(), info, reader, out);
    (pump, client, sink)
}

/// The next interleaved frame: (channel, its bytes).
async fn frame(r: &mut tokio::net::TcpStream) -> (u8, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 4];
    tokio::time::timeout(DEADLINE, r.read_exact(&mut head))
        .await
        .expect("a frame within the deadline")
        .unwrap();
    assert_eq!(head[0], b'$', "not at a frame's start: the stream is cut");
    let mut body = vec![0u8; usize::from(u16::from_be_bytes([head[2], head[3]]))];
    tokio::time::timeout(DEADLINE, r.read_exact(&mut body))
        .await
        .expect("a whole frame within the deadline")
        .unwrap();
    (head[1], body)
}

/// The next RTP packet on channel 0 (RTCP on channel 1 passed over): (ssrc, sequence,
/// first payload byte).
async fn rtp(r: &mut tokio::net::TcpStream) -> (u32, u16, u8) {
    loop {
        let (ch, body) = frame(r).await;
        if ch == 0 {
            let (h, payload) = parse(&body).unwrap();
            return (h.ssrc, h.sequence, body[payload.start]);
        }
        assert_eq!(ch, 1, "a frame on channel {ch}");
    }
}

#[tokio::test]
async fn a_tcp_viewer_that_reads_nothing_holds_back_no_other_viewer_of_its_group() {
    let (node, s, e) = started();
    let (a, mut ra, _) = tcp_viewer(&node, &s, 0xa).await;
    let (b, mut rb, sink_b) = tcp_viewer(&node, &s, 0xb).await;
    assert_eq!(groups(&node).len(), 1, "one group for both");
    assert_eq!(rtp(&mut ra).await, (0xa, SETUP.first_seq, 1));
    // 300 frames of 1200 bytes: far more than b's socket holds; a reads each as it comes.
    const FRAMES: u16 = 300;
    for i in 1..=FRAMES {
        push_payload(
            &s,
            e,
            1 + i,
            3000 * u32::from(i),
            false,
            vec![i as u8; 1200],
        );
        assert_eq!(
            rtp(&mut ra).await,
            (0xa, SETUP.first_seq + i, i as u8),
            "a's frame {i}"
        );
    }
    assert!(sink_b.busy_or_arm(), "b's socket never filled");
    // b reads at last: every packet, whole and in order, with nothing more published (the
    // sink tells the group each time b's queue is gone).
    for i in 0..=FRAMES {
        assert_eq!(
            rtp(&mut rb).await,
            (0xb, SETUP.first_seq + i, if i == 0 { 1 } else { i as u8 }),
            "b's packet {i}"
        );
    }
    // The publisher's end: a BYE on each viewer's RTCP channel, no wait needed over TCP.
    s.finish(e);
    for r in [&mut ra, &mut rb] {
        let (ch, body) = frame(r).await;
        assert_eq!(ch, 1);
        let pkts = parse_compound(&body).unwrap();
        assert!(
            pkts.iter().any(|p| matches!(p, RtcpPacket::Bye { .. })),
            "{pkts:?}"
        );
    }
    for pump in [a, b] {
        let left = pump.stop().await.expect("the state of an ended viewer");
        assert!(left.ended, "the group said it had ended the viewer");
    }
    let g = groups(&node);
    poll("the group to retire", || g.len() == 0).await;
}
