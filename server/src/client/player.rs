//! A playing session: media in (interleaved or UDP), RTCP noted, keepalives out, and the
//! requests of trick play (PAUSE, PLAY with Range/Scale/Speed) on the same session.

use super::control::{scan, Control, Scanned};
use super::setup::MediaSetup;
use super::stats::{Stats, TrackStats};
use super::udp::{register, udp_ready, UdpTrack};
use super::{ClientError, ClientTransport, PlayOptions};
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::ops::Range;
use std::pin::Pin;
use std::time::{Duration, Instant};
use tokio::time::Sleep;
use vigil_proto::codec::Codec;
use vigil_proto::rtcp::{self, RtcpPacket};
use vigil_proto::rtp::{self, RtpHeader};
use vigil_proto::rtsp::{
    parse_rtp_info, parse_scale, parse_speed, Method, NptTime, Range as RangeHeader, Request,
    Response, RtpInfo,
};

/// The headers of a PLAY request, beyond CSeq and Session. `None` leaves a header out: a PLAY
/// without `Range` resumes where the session was paused (RFC 2326 §10.5).
///
/// Values are kept as text so a test can send anything (`Scale: 0`, `Range: npt=abc-`); the
/// builder methods format well-formed ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlayRequest {
    pub range: Option<String>,
    pub scale: Option<String>,
    pub speed: Option<String>,
}

impl PlayRequest {
    /// No headers: resume (or start at the URL's start).
    pub fn new() -> PlayRequest {
        PlayRequest::default()
    }

    /// `Range: <value>` as given, e.g. `npt=now-` or `npt=3-5`.
    pub fn range(mut self, value: impl Into<String>) -> PlayRequest {
        self.range = Some(value.into());
        self
    }

    /// `Range: npt=<secs>-`: seek relative to the presentation's start.
    pub fn npt(self, secs: f64) -> PlayRequest {
        self.range(format!("npt={secs:.3}-"))
    }

    /// `Range: clock=<UTC>-`: seek to an absolute time (milliseconds since the Unix epoch).
    pub fn clock(self, unix_millis: i64) -> PlayRequest {
        let t = vigil_proto::rtsp::UtcTime { unix_millis };
        self.range(format!("clock={}-", t.to_clock_string()))
    }

    /// `Scale: <s>` (trick play: s times the media per wall second).
    pub fn scale(mut self, s: f64) -> PlayRequest {
        self.scale = Some(format!("{s}"));
        self
    }

    /// `Speed: <s>` (delivery rate; GStreamer's way of asking for a rate).
    pub fn speed(mut self, s: f64) -> PlayRequest {
        self.speed = Some(format!("{s}"));
        self
    }

    pub(crate) fn apply(&self, mut req: Request) -> Request {
        for (name, value) in [
            ("Range", &self.range),
            ("Scale", &self.scale),
            ("Speed", &self.speed),
        ] {
            if let Some(v) = value {
                req = req.header(name, v.clone());
            }
        }
        req
    }
}

/// What a server answered to a PLAY: where it actually starts (`Range`), the rate it
/// accepted (`Scale`/`Speed`, echoed) and which RTP packet starts the new range per track
/// (`RTP-Info`). Headers that are missing or do not parse are `None`/empty.
#[derive(Debug, Clone)]
pub struct PlayAnswer {
    /// When the PLAY was sent (start-up and seek latency are measured from here).
    pub sent: Instant,
    /// When its answer arrived.
    pub received: Instant,
    pub range: Option<RangeHeader>,
    pub scale: Option<f64>,
    pub speed: Option<f64>,
    pub rtp_info: Vec<RtpInfo>,
}

impl PlayAnswer {
    /// A 2xx answer's headers; any other status is [`ClientError::Status`].
    pub(crate) fn from_response(resp: &Response, sent: Instant) -> Result<PlayAnswer, ClientError> {
        if !resp.status.is_success() {
            return Err(ClientError::Status {
                method: "PLAY".into(),
                status: resp.status.0,
                reason: resp.reason.clone(),
            });
        }
        let h = &resp.headers;
        Ok(PlayAnswer {
            sent,
            received: Instant::now(),
            range: h.get("Range").and_then(|v| RangeHeader::parse(v).ok()),
            scale: h.get("Scale").and_then(|v| parse_scale(v).ok()),
            speed: h.get("Speed").and_then(|v| parse_speed(v).ok()),
            rtp_info: h
                .get("RTP-Info")
                .and_then(|v| parse_rtp_info(v).ok())
                .unwrap_or_default(),
        })
    }

    /// Start of the answer's `Range: npt=` in seconds (`None` for `now`, clock ranges or none).
    pub fn npt_start(&self) -> Option<f64> {
        match self.range {
            Some(RangeHeader::Npt {
                start: NptTime::Seconds(s),
                ..
            }) => Some(s),
            _ => None,
        }
    }

    /// End of the answer's `Range: npt=` in seconds, if it has one.
    pub fn npt_end(&self) -> Option<f64> {
        match self.range {
            Some(RangeHeader::Npt {
                end: Some(NptTime::Seconds(s)),
                ..
            }) => Some(s),
            _ => None,
        }
    }
}

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
    /// The answer to the latest PLAY.
    answer: PlayAnswer,
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
            play_sent: self.answer.sent,
            started,
            stopped: started,
            at_mark: None,
            ended: false,
            error: None,
        };
        let play_sent = self.answer.sent;
        for p in std::mem::take(&mut self.backlog) {
            if let Some(t) = stats.tracks.get_mut(p.track) {
                let len = 12 + p.payload.len();
                t.record(
                    &p.header,
                    &p.payload,
                    len,
                    p.at.saturating_duration_since(play_sent),
                );
            }
        }
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
                        at.saturating_duration_since(play_sent),
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

    /// PAUSE, and wait for the answer. The server stops sending; packets it sent before
    /// (already received or still in flight) are still yielded by [`Player::next_packet`].
    pub async fn pause(&mut self) -> Result<(), ClientError> {
        let req = self.ctl.request(Method::Pause, &self.play_url);
        let resp = self.call(req).await?;
        if !resp.status.is_success() {
            return Err(ClientError::Status {
                method: "PAUSE".into(),
                status: resp.status.0,
                reason: resp.reason,
            });
        }
        // No more media is due until the next PLAY: do not time out waiting for it.
        self.last_input = Instant::now() + Duration::from_secs(3600);
        Ok(())
    }

    /// PLAY again on this session: a seek (`Range`), a resume where paused (no `Range`) or a
    /// new rate (`Scale`/`Speed`). Returns the answer, also kept as [`Player::answer`];
    /// packets that arrive before it stay queued for [`Player::next_packet`], and a client
    /// tells them from the new range's by the answer's RTP-Info sequence numbers.
    pub async fn play(&mut self, request: PlayRequest) -> Result<&PlayAnswer, ClientError> {
        let req = request.apply(self.ctl.request(Method::Play, &self.play_url));
        let sent = Instant::now();
        let resp = self.call(req).await?;
        self.answer = PlayAnswer::from_response(&resp, sent)?;
        self.last_input = Instant::now();
        if self.opts.stop_reading_after.is_none() {
            self.stop_at = None;
        }
        Ok(&self.answer)
    }

    /// Send a request on the session and wait for its answer (with the read timeout). Over
    /// TCP, RTP met on the way is queued in the backlog and RTCP is noted; answers to earlier
    /// keepalives are checked.
    async fn call(&mut self, req: Request) -> Result<Response, ClientError> {
        self.release();
        let cseq = req.cseq();
        let what = format!("{} {}", req.method, req.uri);
        self.ctl.send(&req).await?;
        let deadline = Instant::now() + self.opts.read_timeout;
        loop {
            while let Some(frame) = scan(&self.ctl.rx)? {
                match frame {
                    Scanned::Interleaved {
                        channel,
                        payload,
                        consumed,
                    } => {
                        let at = Instant::now();
                        let data = self.ctl.rx.split_to(consumed).freeze();
                        match self.channels.iter().find(|c| c.0 == channel) {
                            Some(&(_, track, true)) => {
                                if let Ok((header, body)) = rtp::parse(&data[payload.clone()]) {
                                    let from = payload.start;
                                    self.backlog.push_back(ReceivedPacket {
                                        track,
                                        header,
                                        payload: data.slice(from + body.start..from + body.end),
                                        at,
                                    });
                                }
                            }
                            Some(&(_, track, false)) => self.on_rtcp(track, &data[payload]),
                            None => {}
                        }
                    }
                    Scanned::Response(r, n) => {
                        self.ctl.rx.advance(n);
                        if r.cseq() == cseq {
                            return Ok(r);
                        }
                        check_answer(&r)?;
                    }
                }
            }
            match tokio::time::timeout_at(deadline.into(), self.ctl.read_more()).await {
                Err(_) => {
                    return Err(ClientError::Timeout {
                        what,
                        after: self.opts.read_timeout,
                    })
                }
                Ok(Ok(0)) => return Err(ClientError::Closed),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e.into()),
            }
        }
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
                // Over UDP the control connection may close (or a BYE arrive) before the
                // datagrams sent ahead of it are read: yield what is already queued first.
                if !self.is_tcp() {
                    if let Some(p) = self.drain_udp()? {
                        return Ok(p);
                    }
                }
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

    /// The next datagram already queued on any UDP socket, without waiting (RTCP is noted
    /// on the way); `None` once every socket is empty. Reads the sockets directly rather than
    /// through tokio's readiness, which may not have seen the last datagrams yet.
    fn drain_udp(&mut self) -> Result<Option<Polled>, ClientError> {
        use std::io::Read;
        let mut tmp = [0u8; 2048];
        for i in 0..self.udp.len() {
            for is_rtp in [true, false] {
                loop {
                    let t = &self.udp[i];
                    let sock = socket2::SockRef::from(if is_rtp { &t.rtp } else { &t.rtcp });
                    let n = match (&*sock).read(&mut tmp) {
                        Ok(n) => n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
                        Err(e) => return Err(e.into()),
                    };
                    let track = t.track;
                    if is_rtp {
                        self.udp_rx.clear();
                        self.udp_rx.extend_from_slice(&tmp[..n]);
                        self.pending = n;
                        return Ok(Some(Polled::Rtp {
                            track,
                            range: 0..n,
                            at: Instant::now(),
                        }));
                    }
                    self.on_rtcp(track, &tmp[..n]);
                }
            }
        }
        Ok(None)
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

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_proto::rtsp::StatusCode;

    #[test]
    fn play_request_headers() {
        let req = PlayRequest::new()
            .npt(5.0)
            .scale(2.0)
            .apply(Request::new(Method::Play, "rtsp://h/p"));
        assert_eq!(req.headers.get("Range"), Some("npt=5.000-"));
        assert_eq!(req.headers.get("Scale"), Some("2"));
        assert_eq!(req.headers.get("Speed"), None);
        // 2026-11-30T08:00:00.5Z
        let req = PlayRequest::new()
            .clock(1_796_025_600_500)
            .speed(0.5)
            .apply(Request::new(Method::Play, "rtsp://h/p"));
        assert_eq!(req.headers.get("Range"), Some("clock=20261130T080000.5Z-"));
        assert_eq!(req.headers.get("Speed"), Some("0.5"));
        let resume = PlayRequest::new().apply(Request::new(Method::Play, "rtsp://h/p"));
        assert!(
            resume.headers.get("Range").is_none(),
            "a resume has no Range"
        );
    }

    #[test]
    fn play_answer_is_parsed() {
        let sent = Instant::now();
        let resp = Response::new(StatusCode::OK)
            .header("Range", "npt=4.960-20.007")
            .header("Scale", "2")
            .header(
                "RTP-Info",
                "url=rtsp://h/playback/c/trackID=0?start=x;seq=7;rtptime=99,url=rtsp://h/playback/c/trackID=1?start=x;seq=3;rtptime=5",
            );
        let a = PlayAnswer::from_response(&resp, sent).unwrap();
        assert_eq!((a.npt_start(), a.npt_end()), (Some(4.96), Some(20.007)));
        assert_eq!((a.scale, a.speed), (Some(2.0), None));
        assert_eq!(a.rtp_info.len(), 2);
        assert_eq!(
            (a.rtp_info[1].seq, a.rtp_info[1].rtptime),
            (Some(3), Some(5))
        );
        let refused = Response::new(StatusCode::HEADER_FIELD_NOT_VALID);
        assert!(matches!(
            PlayAnswer::from_response(&refused, sent),
            Err(ClientError::Status { status: 456, .. })
        ));
    }
}
