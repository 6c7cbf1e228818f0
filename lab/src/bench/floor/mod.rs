//! `vigil bench floor`: the floor under live fan-out (issue 29 §3).
//!
//! Why it exists: a relay's fan-out cost means little alone. What one 2 Mb/s camera sent to
//! N viewers must cost on this kernel, whatever the server, is the price of the send calls
//! and of the kernel's own per-packet and per-byte work; a server can only add to it. This
//! tool pays exactly that and nothing else, so that `scripts/bench-floor` can put vigil,
//! GStreamer's rtsp-server and live555's proxy beside the floor in one run and say how far
//! above it each one is (docs/BENCHMARKS.md, "Fan-out at the kernel's floor").
//!
//! What it does: it pulls the camera over RTSP/TCP, as the relays beside it do, cuts the video
//! RTP into frames at the marker bit ([`ingest`]) and hands each frame to one sender thread
//! ([`fanout`]), woken once per frame, which sends it to every viewer with the cheapest calls
//! the kernel has:
//! - UDP ([`udp`]): one socket for all viewers (RTSP lets every session share one server port
//!   pair), one `sendmmsg` per frame for up to 1024 messages, each message one viewer's
//!   run of equal-sized packets as a UDP GSO super-packet whose iovecs point at the frame's
//!   packets: nothing is copied in user space, the route and the skb are made once per run.
//! - TCP ([`tcp`]): the frame framed once (`$ 0 len` + packet, back to back, RFC 2326
//!   §10.12), then one `send` of that buffer per viewer.
//!
//! What it leaves out, on purpose: per-viewer SSRC and sequence numbers (every viewer gets
//! the camera's own), RTCP, a GOP cache (a new viewer starts at the next keyframe, so its
//! first packet waits up to a GOP where a node sends the cached one at once), authentication,
//! and the handling of slow viewers beyond dropping one whose backlog passes a bound. Viewers
//! are the same `vigil bench live` load generator the relays are measured with: [`rtsp`]
//! answers just enough RTSP (OPTIONS, DESCRIBE with a fixed SDP, SETUP, PLAY) for it to
//! connect, then hands each viewer to the sender.

mod fanout;
mod ingest;
mod rtsp;
mod tcp;
mod udp;

use anyhow::Context;
use clap::Args;
use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::sync::Arc;

#[derive(Args, Debug, Clone)]
pub struct FloorArgs {
    /// The camera to relay (RTSP, pulled over TCP), e.g. rtsp://127.0.0.80:28554/live/cam.
    #[arg(long)]
    pub source: String,
    /// Where viewers connect (RTSP); any path plays the camera.
    #[arg(long, default_value = "127.0.0.1:28557")]
    pub listen: SocketAddr,
    /// The server's RTP port for UDP viewers (even; RTCP is the next one), shared by all.
    #[arg(long, default_value_t = 29_000)]
    pub udp_port: u16,
    /// Send every UDP datagram as its own message (still one `sendmmsg` per frame), to
    /// measure what UDP GSO saves.
    #[arg(long)]
    pub no_gso: bool,
    /// Give each UDP viewer its own socket and its own `sendmmsg` per frame, as a node's
    /// sessions send today: measures what one shared socket saves.
    #[arg(long)]
    pub socket_per_viewer: bool,
    /// Send each UDP packet as two iovecs (its 12-byte RTP header, then the rest), as a
    /// node sends a viewer's own header beside the payload all viewers share.
    #[arg(long)]
    pub split_header: bool,
}

pub fn run(args: FloorArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.udp_port.is_multiple_of(2), "--udp-port must be even");
    let ip = args.listen.ip();
    let rtp = UdpSocket::bind(SocketAddr::new(ip, args.udp_port))
        .with_context(|| format!("binding the RTP port {}", args.udp_port))?;
    // RTCP from viewers (receiver reports) is never read: bound only so the port is ours.
    let _rtcp = UdpSocket::bind(SocketAddr::new(ip, args.udp_port + 1))
        .with_context(|| format!("binding the RTCP port {}", args.udp_port + 1))?;
    let (tx, rx) = mpsc::channel();
    let opts = udp::Options {
        gso: !args.no_gso,
        socket_per_viewer: args.socket_per_viewer,
        split_header: args.split_header,
    };
    let sender = std::thread::Builder::new()
        .name("floor-fanout".into())
        .spawn(move || fanout::run(rx, rtp, opts))
        .context("starting the sender thread")?;
    let runtime = crate::bench::runtime(1)?;
    let result = runtime.block_on(async move {
        let upstream = ingest::Upstream::connect(&args.source).await?;
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let answers = Arc::new(rtsp::Answers::new(upstream.payload_type(), args.udp_port));
        eprintln!(
            "vigil bench floor: relaying {} at rtsp://{}/ (UDP from port {}, {opts:?})",
            args.source, args.listen, args.udp_port,
        );
        // The script waits for this line.
        println!("ready");
        let accept = rtsp::accept(listener, answers, tx.clone());
        tokio::select! {
            r = upstream.forward(tx) => r.context("the camera"),
            r = accept => r.context("accepting viewers"),
        }
    });
    drop(runtime);
    let _ = sender.join();
    result
}
