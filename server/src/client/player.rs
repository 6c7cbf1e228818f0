//! A playing session: media in (interleaved or UDP), RTCP noted, keepalives out.

use super::control::{scan, Control, Scanned};
use super::setup::MediaSetup;
use super::stats::{Stats, TrackStats};
use super::udp::{register, udp_ready, UdpTrack};
use super::{ClientError, ClientTransport, PlayOptions};
use bytes::{Buf, Bytes, BytesMut};
use std::future::Future;
use std::net::SocketAddr;
use std::ops::Range;
use std::pin::Pin;
use std::time::{Duration, Instant};
use tokio::time::Sleep;
use vigil_proto::codec::Codec;
use vigil_proto::rtcp::{self, RtcpPacket};
use vigil_proto::rtp::{self, RtpHeader};
use vigil_proto::rtsp::{Method, RtpInfo};

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
}

/// What [`Player::poll`] found.
enum Polled {
    /// An RTP packet of `track` at `range` of the media buffer.
    Rtp {
        track: usize,
        range: Range<usize>,
        at: Instant,
    },
    End,
    Stopped,
}

/// A session in PLAY. Dropping it closes the connection (the server ends the session);
/// [`Player::teardown`] ends it politely.
pub struct Player {
    ctl: Control,
    tracks: Vec<Track>,
    rtp_info: Vec<RtpInfo>,
    play_sent: Instant,
    opts: PlayOptions,
    channels: Vec<(u8, usize, bool)>,
    udp: Vec<UdpTrack>,
    /// UDP datagrams land here; TCP media is read in `ctl.rx`.
    udp_rx: BytesMut,
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
}

impl Player {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ctl: Control,
        tracks: Vec<Track>,
        rtp_info: Vec<RtpInfo>,
        play_sent: Instant,
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
            rtp_info,
            play_sent,
            stop_at: opts.stop_reading_after.map(|d| play_sent + d),
            channels: media.channels,
            udp,
            udp_rx: BytesMut::new(),
            pending: 0,
            play_url,
            keepalive_every,
            next_keepalive: now + keepalive_every,
            last_input: now,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            ended: false,
            ssrc: rand::random(),
            opts,
        })
    }

    pub fn tracks(&self) -> &[Track] {
        &self.tracks
    }

    /// The PLAY answer's RTP-Info (empty if the server sent none).
    pub fn rtp_info(&self) -> &[RtpInfo] {
        &self.rtp_info
    }

    /// When PLAY was sent: start-up latency is measured from here.
    pub fn play_sent(&self) -> Instant {
        self.play_sent
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

    /// The next RTP packet; `None` once the stream ended (RTCP BYE or the server closed the
    /// connection) or the player stopped reading (`stop_reading_after`).
    pub async fn next_packet(&mut self) -> Result<Option<ReceivedPacket>, ClientError> {
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
            }));
        }
    }

    /// Count everything for `duration`, then drop the connection.
    pub async fn run_stats(self, duration: Duration) -> Stats {
        self.collect_stats(tokio::time::sleep(duration), None).await
    }

    /// Count until `stop` resolves, the stream ends or an error occurs. With `mark`, the
    /// totals as they stood at that instant are kept in [`Stats::at_mark`] (a load test's
    /// steady window starts there).
    pub async fn collect_stats(
        mut self,
        stop: impl Future<Output = ()>,
        mark: Option<Instant>,
    ) -> Stats {
        let started = Instant::now();
        let mut stats = Stats {
            tracks: self
                .tracks
                .iter()
                .map(|t| TrackStats::new(t.codec, t.clock_rate))
                .collect(),
            play_sent: self.play_sent,
            started,
            stopped: started,
            at_mark: None,
            ended: false,
            error: None,
        };
        tokio::pin!(stop);
        loop {
            let polled = tokio::select! {
                biased;
                _ = &mut stop => break,
                p = self.poll() => p,
            };
            match polled {
                Ok(Polled::Rtp { track, range, at }) => {
                    if stats.at_mark.is_none() && mark.is_some_and(|m| at >= m) {
                        stats.at_mark = Some(stats.snapshot());
                    }
                    let data = &self.media_buf()[range];
                    let (Some(t), Ok((header, payload))) =
                        (stats.tracks.get_mut(track), rtp::parse(data))
                    else {
                        continue;
                    };
                    t.record(
                        &header,
                        &data[payload],
                        data.len(),
                        at.saturating_duration_since(self.play_sent),
                    );
                }
                Ok(Polled::End) => {
                    stats.ended = true;
                    break;
                }
                Ok(Polled::Stopped) => {
                    // Hold the connection without reading until told to stop.
                    stop.as_mut().await;
                    break;
                }
                Err(e) => {
                    stats.error = Some(e);
                    break;
                }
            }
        }
        stats.stopped = Instant::now();
        for (t, (srs, bye)) in stats.tracks.iter_mut().zip(&self.rtcp_seen) {
            t.sender_reports = *srs;
            t.bye = *bye;
        }
        stats
    }

    /// TEARDOWN and wait for the answer (media met meanwhile is dropped).
    pub async fn teardown(mut self) -> Result<(), ClientError> {
        self.release();
        let req = self.ctl.request(Method::Teardown, &self.play_url);
        self.ctl
            .call_ok(req, self.opts.read_timeout)
            .await
            .map(|_| ())
    }

    fn media_buf(&self) -> &[u8] {
        if self.is_tcp() {
            &self.ctl.rx
        } else {
            &self.udp_rx
        }
    }

    /// Drop the packet yielded last from the front of the media buffer.
    fn release(&mut self) {
        let n = std::mem::take(&mut self.pending);
        if self.is_tcp() {
            self.ctl.rx.advance(n);
        } else {
            self.udp_rx.clear();
        }
    }

    /// The next RTP packet, in place; handles RTCP, RTSP answers, keepalives and timeouts.
    async fn poll(&mut self) -> Result<Polled, ClientError> {
        self.release();
        loop {
            if self.ended {
                return Ok(Polled::End);
            }
            let now = Instant::now();
            if self.stop_at.is_some_and(|s| now >= s) {
                return Ok(Polled::Stopped);
            }
            if self.is_tcp() {
                if let Some(p) = self.scan_tcp(now)? {
                    return Ok(p);
                }
            } else {
                self.scan_control()?;
            }
            if self.opts.send_keepalive && now >= self.next_keepalive {
                self.keepalive().await?;
            }
            let idle_limit = self.last_input + self.opts.read_timeout;
            if now >= idle_limit {
                return Err(ClientError::Timeout {
                    what: "media".into(),
                    after: self.opts.read_timeout,
                });
            }
            let mut wake = idle_limit;
            if self.opts.send_keepalive {
                wake = wake.min(self.next_keepalive);
            }
            if let Some(s) = self.stop_at {
                wake = wake.min(s);
            }
            // Re-arm only when needed: a reset per read would cost a timer-wheel update per
            // packet batch for every viewer; an early wake-up just recomputes.
            if self.timer.is_elapsed() || wake < self.timer.deadline().into_std() {
                self.timer.as_mut().reset(wake.into());
            }
            let udp = &self.udp;
            tokio::select! {
                r = self.ctl.read_more() => {
                    if r? == 0 {
                        self.ended = true;
                    }
                }
                (i, is_rtp) = udp_ready(udp) => {
                    let t = &self.udp[i];
                    let sock = if is_rtp { &t.rtp } else { &t.rtcp };
                    self.udp_rx.clear();
                    self.udp_rx.reserve(2048);
                    match sock.try_recv_buf(&mut self.udp_rx) {
                        Ok(n) => {
                            let track = t.track;
                            let at = Instant::now();
                            self.last_input = at;
                            if is_rtp {
                                self.pending = n;
                                return Ok(Polled::Rtp { track, range: 0..n, at });
                            }
                            let data = std::mem::take(&mut self.udp_rx);
                            self.on_rtcp(track, &data);
                            self.udp_rx = data;
                            self.udp_rx.clear();
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        // ICMP errors of earlier sends (ECONNREFUSED): not fatal.
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                _ = &mut self.timer => {}
            }
        }
    }

    /// Cut frames from the TCP buffer until an RTP packet turns up.
    fn scan_tcp(&mut self, now: Instant) -> Result<Option<Polled>, ClientError> {
        while let Some(frame) = scan(&self.ctl.rx)? {
            match frame {
                Scanned::Interleaved {
                    channel,
                    payload,
                    consumed,
                } => {
                    self.last_input = now;
                    match self.channels.iter().find(|c| c.0 == channel) {
                        Some(&(_, track, true)) => {
                            self.pending = consumed;
                            return Ok(Some(Polled::Rtp {
                                track,
                                range: payload,
                                at: now,
                            }));
                        }
                        Some(&(_, track, false)) => {
                            let data = self.ctl.rx.split_to(consumed);
                            self.on_rtcp(track, &data[payload]);
                        }
                        None => self.ctl.rx.advance(consumed),
                    }
                }
                Scanned::Response(r, n) => {
                    self.ctl.rx.advance(n);
                    check_answer(&r)?;
                }
            }
        }
        Ok(None)
    }

    /// UDP sessions: answers to keepalives on the control connection.
    fn scan_control(&mut self) -> Result<(), ClientError> {
        while let Some(frame) = scan(&self.ctl.rx)? {
            match frame {
                Scanned::Interleaved { consumed, .. } => self.ctl.rx.advance(consumed),
                Scanned::Response(r, n) => {
                    self.ctl.rx.advance(n);
                    check_answer(&r)?;
                }
            }
        }
        Ok(())
    }

    fn on_rtcp(&mut self, track: usize, data: &[u8]) {
        let Ok(packets) = rtcp::parse_compound(data) else {
            return;
        };
        let Some(seen) = self.rtcp_seen.get_mut(track) else {
            return;
        };
        for p in packets {
            match p {
                RtcpPacket::SenderReport(_) => seen.0 += 1,
                RtcpPacket::Bye { .. } => {
                    seen.1 = true;
                    self.ended = true;
                }
                _ => {}
            }
        }
    }

    /// GET_PARAMETER over TCP (its answer is read with the media); RTCP RR over UDP.
    async fn keepalive(&mut self) -> Result<(), ClientError> {
        self.next_keepalive = Instant::now() + self.keepalive_every;
        if self.is_tcp() {
            let req = self.ctl.request(Method::GetParameter, &self.play_url);
            return self.ctl.send(&req).await;
        }
        let rr = rtcp::receiver_report(self.ssrc, "vigil-client");
        for t in &self.udp {
            if let Some(dest) = t.server_rtcp {
                // A lost keepalive is retried at the next interval.
                let _ = t.rtcp.send_to(&rr, dest).await;
            }
        }
        Ok(())
    }
}

/// A keepalive answer: anything but 2xx means the session is gone or refused.
fn check_answer(r: &vigil_proto::rtsp::Response) -> Result<(), ClientError> {
    if r.status.is_success() {
        return Ok(());
    }
    Err(ClientError::Status {
        method: "GET_PARAMETER".into(),
        status: r.status.0,
        reason: r.reason.clone(),
    })
}
