//! vigil's own light RTSP *viewer* (and, in [`Publisher`], a light publisher that replays a
//! [`Clip`] for `vigil bench record`): the load generator (`vigil bench live`) and the
//! end-to-end tests run hundreds or thousands of these in one process, so each is one tokio
//! task, one receive buffer that interleaved frames and datagrams are parsed in place from,
//! and plain counters. It speaks just enough RTSP to play a live path from any server:
//!
//! ```no_run
//! # async fn demo() -> Result<(), vigil_testkit::client::ClientError> {
//! use vigil_testkit::client::{play, ClientTransport, PlayOptions};
//! let mut player = play("rtsp://127.0.0.1:8554/live/demo", PlayOptions::new(ClientTransport::Tcp)).await?;
//! if let Some(pkt) = player.next_packet().await? {
//!     println!("track {} seq {} after {:?}", pkt.track, pkt.header.sequence, pkt.at - player.play_sent());
//! }
//! let stats = player.run_stats(std::time::Duration::from_secs(5)).await;
//! println!("{} packets, {} lost", stats.packets(), stats.lost());
//! # Ok(()) }
//! ```
//!
//! [`play`] sends OPTIONS, DESCRIBE (following a 3xx with `Location`, as a cluster redirect
//! does), SETUP for every track (TCP interleaved, or UDP on an even/odd local port pair) and
//! PLAY, and notes the instant PLAY was sent so start-up latency can be measured. The
//! [`Player`] then yields RTP packets ([`Player::next_packet`]) or just counts them
//! ([`Player::run_stats`], [`Player::collect_stats`]) while keeping the session alive.
//!
//! Recordings (`playback/<camera>?start=…`) take the same path, plus trick play: the first
//! PLAY's headers come from [`PlayOptions::play`] (a [`PlayRequest`]: `Range`, `Scale`,
//! `Speed`), and a playing [`Player`] can [`pause`](Player::pause) and
//! [`play`](Player::play) again (a seek with a `Range`, a resume without one, a new rate).
//! Every PLAY answer is kept as a [`PlayAnswer`] (its `Range`, echoed `Scale`/`Speed` and
//! `RTP-Info`, parsed). RTP that arrives while such a request waits for its answer is kept
//! and yielded afterwards, in order, so nothing sent before a PAUSE is lost to the viewer:
//!
//! ```no_run
//! # async fn demo() -> Result<(), vigil_testkit::client::ClientError> {
//! use vigil_testkit::client::{play, ClientTransport, PlayOptions, PlayRequest};
//! let url = "rtsp://127.0.0.1:8554/playback/cam1?start=2026-11-29T08:00:00Z";
//! let mut opts = PlayOptions::new(ClientTransport::Tcp);
//! opts.play = PlayRequest::new().npt(5.0).scale(2.0);
//! let mut player = play(url, opts).await?;
//! println!("starts at npt {:?}, scale {:?}", player.answer().npt_start(), player.answer().scale);
//! player.pause().await?;
//! let answer = player.play(PlayRequest::new()).await?; // resume where paused
//! println!("resumes at seq {:?}", answer.rtp_info.first().and_then(|i| i.seq));
//! # Ok(()) }
//! ```

mod control;
mod player;
mod publish;
mod setup;
mod stats;
mod udp;

pub use player::{PlayAnswer, PlayRequest, Player, ReceivedPacket, Track};
pub use publish::{Clip, Publisher};
pub use stats::{SeqCounter, Snapshot, Stats, TrackStats};

pub use control::tls_client_config;
use control::{Control, Target};
use std::time::{Duration, Instant};
use vigil_proto::rtsp::{parse_transports, Method, SessionHeader};

/// How media reaches the viewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientTransport {
    /// RTP/AVP/TCP interleaved on the RTSP connection.
    Tcp,
    /// RTP/AVP over UDP to a local even/odd port pair.
    Udp,
}

#[derive(Debug, Clone)]
pub struct PlayOptions {
    pub transport: ClientTransport,
    /// Longest wait for an RTSP answer, and once playing for the next media input; past it
    /// the player fails with [`ClientError::Timeout`].
    pub read_timeout: Duration,
    /// For slow-reader tests: this long after PLAY the player stops reading its socket but
    /// keeps the connection open (`next_packet` then returns `None`, `collect_stats` holds
    /// the connection until it is told to stop). The server sees a viewer that takes no data.
    pub stop_reading_after: Option<Duration>,
    /// Keep the session alive: GET_PARAMETER (TCP) or RTCP receiver reports (UDP) every
    /// half session timeout.
    pub send_keepalive: bool,
    /// SO_RCVBUF of the media sockets. `None`: the OS default for TCP (autotuned) and 1 MiB
    /// for UDP, so a keyframe burst survives a busy load-generator process. A small value
    /// makes a stalled TCP reader back up quickly.
    pub recv_buffer: Option<u32>,
    /// Headers of the first PLAY. Default: `Range: npt=now-` (the live edge of a live path;
    /// the URL's `start` of a recording).
    pub play: PlayRequest,
    /// For `rtsps://` URLs: the TLS client config (the CAs the server is verified against;
    /// [`tls_client_config`]).
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl PlayOptions {
    pub fn new(transport: ClientTransport) -> PlayOptions {
        PlayOptions {
            transport,
            read_timeout: Duration::from_secs(10),
            stop_reading_after: None,
            send_keepalive: true,
            recv_buffer: None,
            play: PlayRequest::new().range("npt=now-"),
            tls: None,
        }
    }
}

/// Why playing failed. Server refusals carry what the server answered.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("bad URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("{method} answered {status} {reason}")]
    Status {
        method: String,
        status: u16,
        reason: String,
    },
    #[error("{what}: nothing within {after:?}")]
    Timeout { what: String, after: Duration },
    #[error("the server closed the connection")]
    Closed,
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    #[error("no free local UDP port pair: {0}")]
    NoUdpPorts(std::io::Error),
    #[error("TLS with {addr}: {reason}")]
    Tls { addr: String, reason: String },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

const MAX_REDIRECTS: usize = 4;

/// Connect, set up every track and PLAY. See the module documentation.
pub async fn play(url: &str, opts: PlayOptions) -> Result<Player, ClientError> {
    let timeout = opts.read_timeout;
    let tcp_rcvbuf = opts
        .recv_buffer
        .filter(|_| opts.transport == ClientTransport::Tcp);
    let mut target = Target::parse(url)?;
    let mut redirects = 0;
    let (mut ctl, describe) = loop {
        let mut ctl = Control::connect(&target, timeout, tcp_rcvbuf, opts.tls.as_ref()).await?;
        let req = ctl.request(Method::Options, &target.url);
        ctl.call_ok(req, timeout).await?;
        let req = ctl
            .request(Method::Describe, &target.url)
            .header("Accept", "application/sdp");
        let resp = ctl.call(req, timeout).await?;
        let redirect = matches!(resp.status.0, 301 | 302 | 303 | 307);
        match resp.headers.get("Location").filter(|_| redirect) {
            Some(location) => {
                redirects += 1;
                if redirects > MAX_REDIRECTS {
                    return Err(ClientError::TooManyRedirects(MAX_REDIRECTS));
                }
                // The same login for the node redirected to (a vigil node takes the
                // redirect's marker instead, but another server may ask again).
                let creds = target.creds.take();
                target = Target::parse(location)?;
                target.creds = target.creds.take().or(creds);
            }
            None if resp.status.is_success() => break (ctl, resp),
            None => {
                return Err(ClientError::Status {
                    method: "DESCRIBE".into(),
                    status: resp.status.0,
                    reason: resp.reason,
                })
            }
        }
    };
    let text = std::str::from_utf8(&describe.body)
        .map_err(|_| ClientError::Protocol("SDP is not UTF-8".into()))?;
    let sdp =
        vigil_proto::sdp::parse(text).map_err(|e| ClientError::Protocol(format!("SDP: {e}")))?;
    let base = describe
        .headers
        .get("Content-Base")
        .or_else(|| describe.headers.get("Content-Location"))
        .unwrap_or(&target.url)
        .to_string();
    let tracks: Vec<Track> = sdp
        .media
        .iter()
        .map(|m| Track {
            media: m.media.clone(),
            codec: m.codec(),
            clock_rate: m.clock_rate,
            payload_type: m.payload_type,
            url: Target::join(&base, m.control.as_deref()),
        })
        .collect();
    let local_ip = ctl.stream.local_addr()?.ip();
    let server_ip = ctl.stream.peer_addr()?.ip();
    let mut media = setup::MediaSetup::new(opts.transport);
    let mut session_timeout = Duration::from_secs(60);
    for (i, track) in tracks.iter().enumerate() {
        let offer = match opts.transport {
            ClientTransport::Tcp => {
                format!("RTP/AVP/TCP;unicast;interleaved={}-{}", 2 * i, 2 * i + 1)
            }
            ClientTransport::Udp => {
                let pair = udp::bind_pair(local_ip, opts.recv_buffer.unwrap_or(1 << 20))?;
                let port = pair.rtp_port;
                media.udp_pending(i, pair);
                format!("RTP/AVP;unicast;client_port={}-{}", port, port + 1)
            }
        };
        let req = ctl
            .request(Method::Setup, &track.url)
            .header("Transport", offer);
        let resp = ctl.call_ok(req, timeout).await?;
        if ctl.session.is_none() {
            let value = resp
                .headers
                .get("Session")
                .ok_or_else(|| ClientError::Protocol("SETUP answer without Session".into()))?;
            let s =
                SessionHeader::parse(value).map_err(|e| ClientError::Protocol(e.to_string()))?;
            if let Some(t) = s.timeout {
                session_timeout = Duration::from_secs(t.max(2).into());
            }
            ctl.session = Some(s.id);
        }
        let answer = resp
            .headers
            .get("Transport")
            .and_then(|v| parse_transports(v).ok())
            .and_then(|mut v| (!v.is_empty()).then(|| v.swap_remove(0)))
            .ok_or_else(|| {
                ClientError::Protocol("SETUP answer without a usable Transport".into())
            })?;
        media.answered(i, &answer, server_ip)?;
    }
    let play_url = Target::join(&base, Some("*"));
    let play_url = play_url.trim_end_matches('/').to_string();
    let req = opts.play.apply(ctl.request(Method::Play, &play_url));
    let play_sent = Instant::now();
    let resp = ctl.call(req, timeout).await?;
    let answer = PlayAnswer::from_response(&resp, play_sent)?;
    Player::new(ctl, tracks, answer, opts, media, session_timeout, play_url)
}
