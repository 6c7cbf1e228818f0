//! A playing session: media in (interleaved or UDP), RTCP noted, keepalives out, and the
//! requests of trick play (PAUSE, PLAY with Range/Scale/Speed) on the same session.

mod collect;
mod receive;
mod requests;

pub use requests::{PlayAnswer, PlayRequest};

use super::control::Control;
use super::setup::MediaSetup;
use super::udp::{register, UdpTrack};
use super::{ClientError, ClientTransport, PlayOptions};
use bytes::{Bytes, BytesMut};
use receive::Polled;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::{Duration, Instant};
use tokio::time::Sleep;
use vigil_proto::codec::Codec;
use vigil_proto::rtp::{self, RtpHeader};
use vigil_proto::rtsp::RtpInfo;

/// One media section of the SDP, as the player set it up.
#[derive(Debug, Clone)]
pub struct Track {
    /// "video", "audio", …
    pub media: String,
    pub codec: Codec,
    pub clock_rate: u32,
    pub payload_type: u8,
    /// The URL SETUP was sent to.
    pub url: String,
}

/// An RTP packet as received. `payload` shares the receive buffer (no copy).
#[derive(Debug, Clone)]
pub struct ReceivedPacket {
    pub track: usize,
    pub header: RtpHeader,
    pub payload: Bytes,
    pub at: Instant,
    /// The datagram's source (UDP): it changes when a session migrates in `own` mode.
    pub from: Option<std::net::SocketAddr>,
}

/// A session in PLAY. Dropping it closes the connection (the server ends the session);
/// [`Player::teardown`] ends it politely.
pub struct Player {
    ctl: Control,
    tracks: Vec<Track>,
    /// The answer to the latest PLAY.
    answer: PlayAnswer,
    opts: PlayOptions,
    channels: Vec<(u8, usize, bool)>,
    udp: Vec<UdpTrack>,
    /// UDP datagrams land here; TCP media is read in `ctl.rx`.
    udp_rx: BytesMut,
    /// Source of the datagram in `udp_rx`, when known.
    udp_from: Option<std::net::SocketAddr>,
    /// Bytes of the last yielded packet still at the front of the media buffer.
    pending: usize,
    play_url: String,
    keepalive_every: Duration,
    next_keepalive: Instant,
    stop_at: Option<Instant>,
    last_input: Instant,
    timer: Pin<Box<Sleep>>,
    ended: bool,
    /// Per track: RTCP sender reports seen, BYE seen.
    rtcp_seen: Vec<(u64, bool)>,
    ssrc: u32,
    /// Interleaved RTP that arrived while a request waited for its answer, yielded first.
    backlog: VecDeque<ReceivedPacket>,
}

impl Player {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ctl: Control,
        tracks: Vec<Track>,
        answer: PlayAnswer,
        opts: PlayOptions,
        media: MediaSetup,
        session_timeout: Duration,
        play_url: String,
    ) -> Result<Player, ClientError> {
        let now = Instant::now();
        let keepalive_every = session_timeout / 2;
        let mut udp = Vec::with_capacity(media.udp.len());
        for (track, pair, server_rtcp) in media.udp {
            udp.push(UdpTrack {
                track,
                rtp: register(pair.rtp)?,
                rtcp: register(pair.rtcp)?,
                server_rtcp,
            });
        }
        Ok(Player {
            rtcp_seen: vec![(0, false); tracks.len()],
            ctl,
            tracks,
            stop_at: opts.stop_reading_after.map(|d| answer.sent + d),
            answer,
            channels: media.channels,
            udp,
            udp_rx: BytesMut::new(),
            udp_from: None,
            pending: 0,
            play_url,
            keepalive_every,
            next_keepalive: now + keepalive_every,
            last_input: now,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            ended: false,
            ssrc: rand::random(),
            backlog: VecDeque::new(),
            opts,
        })
    }

    /// The URL played, after any redirect: it names the node serving the session.
    pub fn url(&self) -> &str {
        &self.play_url
    }

    pub fn tracks(&self) -> &[Track] {
        &self.tracks
    }

    /// The latest PLAY answer's RTP-Info (empty if the server sent none).
    pub fn rtp_info(&self) -> &[RtpInfo] {
        &self.answer.rtp_info
    }

    /// `track`'s entry of the latest RTP-Info: the one whose URL is the track's SETUP URL
    /// (or ends like it), else the entry at the track's position when there is one per track.
    pub fn rtp_info_of(&self, track: usize) -> Option<&RtpInfo> {
        let url = &self.tracks.get(track)?.url;
        let info = &self.answer.rtp_info;
        info.iter()
            .find(|i| &i.url == url)
            .or_else(|| {
                info.iter().find(|i| {
                    !i.url.is_empty() && (url.ends_with(&i.url) || i.url.ends_with(url.as_str()))
                })
            })
            .or_else(|| (info.len() == self.tracks.len()).then(|| &info[track]))
    }

    /// The answer to the latest PLAY (the one [`play`](super::play) sent, or the latest
    /// [`Player::play`]).
    pub fn answer(&self) -> &PlayAnswer {
        &self.answer
    }

    /// When the latest PLAY was sent: start-up latency is measured from here.
    pub fn play_sent(&self) -> Instant {
        self.answer.sent
    }

    pub fn session_id(&self) -> Option<&str> {
        self.ctl.session.as_deref()
    }

    /// Local address of the RTSP connection (identifies this viewer in `/api/sessions`).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.ctl.stream.local_addr().ok()
    }

    /// RTCP sender reports seen so far on `track`, and whether a BYE came.
    pub fn rtcp_seen(&self, track: usize) -> (u64, bool) {
        self.rtcp_seen.get(track).copied().unwrap_or_default()
    }

    fn is_tcp(&self) -> bool {
        self.opts.transport == ClientTransport::Tcp
    }

    /// The next RTP packet that begins a video keyframe, skipping others; `Ok(None)` if
    /// the stream ends first, [`ClientError::Timeout`] past `within`. Also says whether it
    /// was the very first packet received (a server that starts on a keyframe).
    pub async fn next_keyframe(
        &mut self,
        within: Duration,
    ) -> Result<Option<(ReceivedPacket, bool)>, ClientError> {
        let deadline = Instant::now() + within;
        let mut first = true;
        loop {
            let pkt = match tokio::time::timeout_at(deadline.into(), self.next_packet()).await {
                Err(_) => {
                    return Err(ClientError::Timeout {
                        what: "the first keyframe".into(),
                        after: within,
                    })
                }
                Ok(r) => r?,
            };
            let Some(pkt) = pkt else { return Ok(None) };
            let codec = self.tracks[pkt.track].codec;
            if codec.is_video() && vigil_proto::codec::starts_keyframe(codec, &pkt.payload) {
                return Ok(Some((pkt, first)));
            }
            first = false;
        }
    }

    /// The next RTP packet; `None` once the stream ended (RTCP BYE or the server closed the
    /// connection) or the player stopped reading (`stop_reading_after`).
    pub async fn next_packet(&mut self) -> Result<Option<ReceivedPacket>, ClientError> {
        self.release();
        if let Some(p) = self.backlog.pop_front() {
            return Ok(Some(p));
        }
        loop {
            let (track, range, at) = match self.poll().await? {
                Polled::End | Polled::Stopped => return Ok(None),
                Polled::Rtp { track, range, at } => (track, range, at),
            };
            let Ok((header, payload)) = rtp::parse(&self.media_buf()[range.clone()]) else {
                continue;
            };
            // Split the frame off the buffer: the payload is shared, not copied.
            let taken = std::mem::take(&mut self.pending);
            let buf = if self.is_tcp() {
                &mut self.ctl.rx
            } else {
                &mut self.udp_rx
            };
            let frame = buf.split_to(taken).freeze();
            let payload = frame.slice(range.start + payload.start..range.start + payload.end);
            return Ok(Some(ReceivedPacket {
                track,
                header,
                payload,
                at,
                from: if self.is_tcp() { None } else { self.udp_from },
            }));
        }
    }
}
