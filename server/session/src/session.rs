//! A server session of RFC 2326 (Appendix A) as a state machine: its state and kind, the
//! per-track transports and RTP identities, the keepalive deadline, and — for a playback —
//! the presentation window (origin, the URL's and the Range's ends, Scale) and the sender's
//! hand-back (its tracks and resume position while no sender runs).
//!
//! Each method is validate → decide → commit (see the crate doc): `check_*` and `decide_*`
//! take `&self` and return every refusal; `commit_*` take `&mut self` and cannot fail, so a
//! refused request leaves the session exactly as it was.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use vigil_proto::rtsp::{
    format_rtp_info, next_state, LowerTransport, Method, NptTime, Range, Request, Response,
    RtpInfo, SessionKind, SessionState, StatusCode, Transport as Offer, TransportMode, UtcTime,
};
use vigil_proto::sdp::SessionDescription;

use crate::tracks::{new_tracks, TrackOut, TrackSetup};
use crate::window::{self, Rate, Requested};
use crate::Refusal;

/// A track's negotiated transport (the shell holds the sockets of a UDP one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp {
        rtp_channel: u8,
        rtcp_channel: u8,
    },
    Udp {
        client_rtp: SocketAddr,
        client_rtcp: SocketAddr,
        server_port: u16,
    },
}

/// What the sender of a playback stopped with: its tracks' output state and where the next
/// PLAY without Range continues (None: the recording or the URL's range ended).
#[derive(Debug, Clone)]
pub struct Handback<C> {
    pub tracks: Vec<TrackOut>,
    pub resume: Option<C>,
}

/// The presentation of a playback session (survives PAUSE).
#[derive(Debug, Clone)]
pub struct Presentation<C> {
    /// npt 0: the first frame served for the URL's start (UTC ms).
    pub origin_ms: i64,
    /// The URL's `end=`.
    pub url_end_ms: Option<i64>,
    /// The recording's SDP (its tracks).
    pub sdp: SessionDescription,
    /// `[playback] keyframes_only_above_scale`.
    pub keyframes_only_above: f64,
    scale: f64,
    /// The end of the running (or last) PLAY's Range.
    range_end: Option<i64>,
    /// The sender's state while none runs; None while one runs (it holds the tracks).
    handback: Option<Handback<C>>,
    /// A sender was started and not stopped since.
    sending: bool,
}

impl<C> Presentation<C> {
    pub fn new(
        origin_ms: i64,
        url_end_ms: Option<i64>,
        sdp: SessionDescription,
        keyframes_only_above: f64,
    ) -> Self {
        Presentation {
            origin_ms,
            url_end_ms,
            sdp,
            keyframes_only_above,
            scale: 1.0,
            range_end: None,
            handback: None,
            sending: false,
        }
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    pub fn range_end(&self) -> Option<i64> {
        self.range_end
    }

    /// Where a PLAY without Range continues, if a sender stopped before.
    pub fn resume(&self) -> Option<&C> {
        self.handback.as_ref().and_then(|h| h.resume.as_ref())
    }

    /// A sender is running (or ran to its end and has not been stopped yet).
    pub fn sending(&self) -> bool {
        self.sending
    }

    /// What a sender started now is given: Scale, keyframes-only, the earliest end.
    pub fn sender_window(&self) -> SenderWindow {
        SenderWindow {
            scale: self.scale,
            keyframes_only: self.scale > self.keyframes_only_above,
            end_ms: [self.url_end_ms, self.range_end]
                .into_iter()
                .flatten()
                .min(),
            range_end_only: window::range_end_only(self.url_end_ms, self.range_end),
        }
    }

    /// npt of an absolute time: seconds from the origin, never negative.
    pub fn npt_of(&self, ms: i64) -> NptTime {
        window::npt_of(ms, self.origin_ms)
    }
}

/// The parameters of a sender run that come from the presentation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SenderWindow {
    pub scale: f64,
    pub keyframes_only: bool,
    /// The earlier of the URL's `end=` and the PLAY Range's end; frames whose presentation
    /// rank reaches it are not sent.
    pub end_ms: Option<i64>,
    /// `end_ms` is only the Range's: reaching it keeps the session for a PLAY that continues.
    pub range_end_only: bool,
}

/// What a live PLAY does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LivePlay {
    /// First PLAY: a reader from the newest keyframe.
    Start,
    /// After PAUSE: the media already set up continues (from the newest keyframe).
    Resume,
}

/// What a PAUSE does to the media.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LivePause {
    /// Nothing plays yet (PAUSE in Ready).
    Nothing,
    /// A live viewer's media holds.
    Hold,
    /// A playback's sender stops, its state handed back.
    StopSender,
}

/// What a RECORD does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    Start,
    /// RECORD again on a recording session: nothing to do.
    Already,
}

/// A playback PLAY, validated: what it asks for, before the shell reads the recording.
#[derive(Debug, Clone, PartialEq)]
pub struct PlayAsk {
    pub rate: Option<Rate>,
    pub asked: Requested,
    /// The end this PLAY plays to before the recording's: the earlier of the URL's and the
    /// Range's.
    pub play_end: Option<i64>,
}

/// Where a PLAY starts (see [`Session::play_from`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlayFrom<C> {
    /// At the keyframe at or before this time (UTC ms): a seek, the RTP lines rebased.
    Seek(i64),
    /// Where the session stopped.
    Resume(C),
    /// Where the running sender is: stop it, then continue from its hand-back (or, if its
    /// run had ended, from the origin).
    WhereSending,
}

/// A playback PLAY decided against the recording: what it will serve.
#[derive(Debug, Clone, PartialEq)]
pub struct PlayPlan {
    pub ask: PlayAsk,
    /// The first frame's time (UTC ms).
    pub actual_ms: i64,
    /// The end it serves to (the earliest of the URL's, the Range's and the recording's).
    pub end_ms: i64,
    /// The PLAY seeks (a Range start, or the first PLAY): the RTP lines are rebased.
    pub seeks: bool,
}

/// A server session; `C` is the shell's position in a recording (its resume cursor).
#[derive(Debug, Clone)]
pub struct Session<C> {
    id: String,
    kind: SessionKind,
    state: SessionState,
    tracks: Vec<Option<Transport>>,
    setups: Vec<Option<TrackSetup>>,
    timeout: Duration,
    last_activity: Instant,
    /// PLAY or RECORD started media (a later PLAY resumes it; RECORD again does nothing).
    started: bool,
    playback: Option<Presentation<C>>,
}

/// 454 unless the request names `session` (RFC 2326 §12.37): with no session on the
/// connection every Session header is unknown.
pub fn own<C>(session: Option<&Session<C>>, header: Option<&str>) -> Result<(), Refusal> {
    match (header, session) {
        (Some(id), Some(s)) if id == s.id => Ok(()),
        (None, _) => Err(Refusal::new(
            StatusCode::SESSION_NOT_FOUND,
            "no Session header",
        )),
        (Some(_), _) => Err(Refusal::new(
            StatusCode::SESSION_NOT_FOUND,
            "unknown session",
        )),
    }
}

impl<C: Clone> Session<C> {
    /// A session made by its first SETUP (state Init until that SETUP commits).
    pub fn new(
        id: String,
        kind: SessionKind,
        tracks: usize,
        timeout: Duration,
        playback: Option<Presentation<C>>,
        now: Instant,
    ) -> Self {
        Session {
            id,
            kind,
            state: SessionState::Init,
            tracks: vec![None; tracks],
            setups: vec![None; tracks],
            timeout,
            last_activity: now,
            started: false,
            playback,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn kind(&self) -> SessionKind {
        self.kind
    }

    pub fn state(&self) -> SessionState {
        self.state
    }

    pub fn playback(&self) -> Option<&Presentation<C>> {
        self.playback.as_ref()
    }

    pub fn is_playback(&self) -> bool {
        self.playback.is_some()
    }

    pub fn transports(&self) -> &[Option<Transport>] {
        &self.tracks
    }

    pub fn setups(&self) -> &[Option<TrackSetup>] {
        &self.setups
    }

    /// Any track is interleaved on the RTSP connection.
    pub fn is_tcp(&self) -> bool {
        self.tracks
            .iter()
            .flatten()
            .any(|t| matches!(t, Transport::Tcp { .. }))
    }

    /// The track of an interleaved channel and whether it is the RTP (true) or RTCP one.
    pub fn track_of_channel(&self, channel: u8) -> Option<(usize, bool)> {
        self.tracks.iter().enumerate().find_map(|(i, t)| match t {
            Some(Transport::Tcp {
                rtp_channel,
                rtcp_channel,
            }) if *rtp_channel == channel || *rtcp_channel == channel => {
                Some((i, *rtp_channel == channel))
            }
            _ => None,
        })
    }

    /// Each track's interleaved RTP channel (None: not interleaved or not set up).
    pub fn rtp_channels(&self) -> Vec<Option<u8>> {
        self.tracks
            .iter()
            .map(|t| match t {
                Some(Transport::Tcp { rtp_channel, .. }) => Some(*rtp_channel),
                _ => None,
            })
            .collect()
    }

    pub fn rtcp_channel(&self, track: usize) -> Option<u8> {
        match self.tracks.get(track)? {
            Some(Transport::Tcp { rtcp_channel, .. }) => Some(*rtcp_channel),
            _ => None,
        }
    }

    // --- keepalive -------------------------------------------------------------------

    /// A request or the client's RTCP was seen at `now`.
    pub fn touch(&mut self, now: Instant) {
        if now > self.last_activity {
            self.last_activity = now;
        }
    }

    /// When the session times out unless the client is heard from again.
    pub fn expires_at(&self) -> Instant {
        self.last_activity + self.timeout
    }

    pub fn expired(&self, now: Instant) -> bool {
        now > self.expires_at()
    }

    /// The Session header of the answers (`id;timeout=N`), telling clients when to keep alive.
    pub fn header(&self) -> String {
        format!("{};timeout={}", self.id, self.timeout.as_secs())
    }

    // --- the method rules ------------------------------------------------------------

    /// The state `method` leads to, or the refusal (455 naming the method and state, 501).
    pub fn check(&self, method: &Method) -> Result<SessionState, Refusal> {
        next_state(self.state, self.kind, method).map_err(|code| {
            Refusal::new(
                code,
                format!("{} in state {:?}", method.as_str(), self.state),
            )
        })
    }

    /// A SETUP of a track of `path` on this session: one path per session (459).
    pub fn check_setup(&self, same_path: bool) -> Result<(), Refusal> {
        if !same_path {
            return Err(Refusal::new(
                StatusCode::AGGREGATE_OPERATION_NOT_ALLOWED,
                "one path per session",
            ));
        }
        self.check(&Method::Setup).map(|_| ())
    }

    pub fn commit_setup(
        &mut self,
        track: usize,
        transport: Transport,
        setup: TrackSetup,
        now: Instant,
    ) {
        if self.tracks.len() <= track {
            self.tracks.resize(track + 1, None);
            self.setups.resize(track + 1, None);
        }
        self.tracks[track] = Some(transport);
        self.setups[track] = Some(setup);
        self.state = next_state(self.state, self.kind, &Method::Setup).unwrap_or(self.state);
        self.touch(now);
    }

    /// A live PLAY.
    pub fn check_play_live(&self) -> Result<LivePlay, Refusal> {
        self.check(&Method::Play)?;
        if self.playback.is_some() {
            return Err(Refusal::new(
                StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
                "a playback session",
            ));
        }
        Ok(if self.started {
            LivePlay::Resume
        } else {
            LivePlay::Start
        })
    }

    pub fn commit_play_live(&mut self, now: Instant) {
        self.state = SessionState::Playing;
        self.started = true;
        self.touch(now);
    }

    /// PAUSE (live or playback).
    pub fn check_pause(&self) -> Result<LivePause, Refusal> {
        self.check(&Method::Pause)?;
        Ok(match &self.playback {
            Some(p) if p.sending => LivePause::StopSender,
            Some(_) => LivePause::Nothing,
            None if self.started && self.kind == SessionKind::Play => LivePause::Hold,
            None => LivePause::Nothing,
        })
    }

    /// PAUSE committed (a playback's stopped sender has handed its state back through
    /// [`Session::sender_stopped`]).
    pub fn commit_pause(&mut self, now: Instant) {
        self.state = SessionState::Ready;
        self.touch(now);
    }

    /// RECORD: only on a session of an ANNOUNCEd path (`announced`).
    pub fn check_record(&self, announced: bool) -> Result<Record, Refusal> {
        self.check(&Method::Record)?;
        if self.started {
            return Ok(Record::Already);
        }
        if !announced {
            return Err(Refusal::new(
                StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
                "RECORD without ANNOUNCE",
            ));
        }
        Ok(Record::Start)
    }

    pub fn commit_record(&mut self, now: Instant) {
        self.state = SessionState::Recording;
        self.started = true;
        self.touch(now);
    }

    // --- playback PLAY ---------------------------------------------------------------

    /// A playback PLAY, before anything is read: Scale/Speed (456), Range (457), the state
    /// (455). Nothing changes.
    pub fn check_play(&self, req: &Request) -> Result<PlayAsk, Refusal> {
        let rate = window::rate_of(req)?;
        let range = match req.headers.get("Range").map(Range::parse) {
            None => None,
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => return Err(Refusal::new(StatusCode::INVALID_RANGE, e)),
        };
        self.check(&Method::Play)?;
        let Some(p) = &self.playback else {
            return Err(Refusal::new(
                StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
                "not a playback session",
            ));
        };
        let asked = window::requested(range.as_ref(), p.origin_ms)
            .map_err(|why| Refusal::new(StatusCode::INVALID_RANGE, why))?;
        let play_end = [p.url_end_ms, asked.end].into_iter().flatten().min();
        Ok(PlayAsk {
            rate,
            asked,
            play_end,
        })
    }

    /// Where a validated PLAY starts: a Range's start; else where the session stopped (its
    /// resume position) or, while a sender runs, where that sender is (known once it has
    /// stopped); else the origin.
    pub fn play_from(&self, ask: &PlayAsk) -> PlayFrom<C> {
        let Some(p) = &self.playback else {
            return PlayFrom::Seek(ask.asked.start.unwrap_or_default());
        };
        match (ask.asked.start, p.resume()) {
            (Some(t), _) => PlayFrom::Seek(t),
            (None, _) if p.sending => PlayFrom::WhereSending,
            (None, Some(c)) => PlayFrom::Resume(c.clone()),
            (None, None) => PlayFrom::Seek(p.origin_ms),
        }
    }

    /// The PLAY against the recording: the first frame it serves is at `actual_ms`, the
    /// recording ends at `last_recorded_ms`. 457 when its range ends before it starts.
    pub fn decide_play(
        &self,
        ask: PlayAsk,
        actual_ms: i64,
        last_recorded_ms: i64,
        seeks: bool,
    ) -> Result<PlayPlan, Refusal> {
        let Some(p) = &self.playback else {
            return Err(Refusal::new(
                StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
                "not a playback session",
            ));
        };
        if ask.play_end.is_some_and(|e| e <= actual_ms) {
            return Err(Refusal::new(
                StatusCode::INVALID_RANGE,
                "the range ends before it starts",
            ));
        }
        let end_ms = window::end_of(p.url_end_ms, ask.asked.end, last_recorded_ms);
        Ok(PlayPlan {
            ask,
            actual_ms,
            end_ms,
            seeks,
        })
    }

    /// The PLAY committed: the session plays, with the plan's Scale and Range end. Returns
    /// the answer (Range served, RTP-Info, the echoed Scale/Speed), the tracks the sender
    /// takes (the hand-back's, or new ones on the first PLAY; rebased one frame interval
    /// on after a seek so the timestamp line continues) and its window. `first_ts(track)`:
    /// the media timestamp of the track's first frame served; `url(track)`: its control URL.
    pub fn commit_play(
        &mut self,
        plan: PlayPlan,
        first_ts: impl Fn(usize) -> u32,
        url: impl Fn(usize) -> String,
        now: Instant,
    ) -> (Response, Vec<TrackOut>, SenderWindow) {
        let setups = self.setups.clone();
        self.state = SessionState::Playing;
        self.started = true;
        self.touch(now);
        let Some(p) = self.playback.as_mut() else {
            // Unreachable through decide_play; answer what it would have said.
            let r = Refusal::new(
                StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
                "not a playback session",
            );
            return (r.into(), Vec::new(), SenderWindow::default());
        };
        if let Some(rate) = &plan.ask.rate {
            p.scale = rate.value;
        }
        p.range_end = plan.ask.asked.end;
        let mut tracks = match p.handback.take() {
            Some(hb) => hb.tracks,
            None => new_tracks(&p.sdp, &setups),
        };
        if plan.seeks {
            for t in &mut tracks {
                // Continue the timestamp line one frame interval (at 25 fps) on.
                t.identity.rebase((t.clock_rate / 25).max(1));
            }
        }
        p.sending = true;
        let rtp_info: Vec<RtpInfo> = tracks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.enabled)
            .map(|(i, t)| RtpInfo {
                url: url(i),
                seq: Some(t.identity.next_seq()),
                rtptime: Some(t.identity.project_timestamp(first_ts(i))),
            })
            .collect();
        let served = if plan.ask.asked.clock {
            Range::Clock {
                start: UtcTime {
                    unix_millis: plan.actual_ms,
                },
                end: Some(UtcTime {
                    unix_millis: plan.end_ms,
                }),
            }
        } else {
            Range::Npt {
                start: p.npt_of(plan.actual_ms),
                end: Some(p.npt_of(plan.end_ms)),
            }
        };
        let mut resp = Response::new(StatusCode::OK)
            .header("Range", served.to_string())
            .header("RTP-Info", format_rtp_info(&rtp_info));
        if let Some(rate) = plan.ask.rate {
            resp = resp.header(rate.header, rate.echo);
        }
        (resp, tracks, p.sender_window())
    }

    /// The running sender stopped (PAUSE, a seek, a move, a refused PLAY): its state comes
    /// back for the next PLAY.
    pub fn sender_stopped(&mut self, handback: Handback<C>) {
        if let Some(p) = self.playback.as_mut() {
            p.handback = Some(handback);
            p.sending = false;
        }
    }

    /// The sender's state for a sender started again without a PLAY (a refused PLAY whose
    /// old sender had to stop first, a move, a take-back): its tracks, resume position and
    /// the current window. None when nothing was handed back or the run had ended.
    pub fn restart(&mut self) -> Option<(Vec<TrackOut>, C, SenderWindow)> {
        let p = self.playback.as_mut()?;
        let resume = p.handback.as_ref()?.resume.clone()?;
        let hb = p.handback.take()?;
        p.sending = true;
        Some((hb.tracks, resume, p.sender_window()))
    }
}

impl Default for SenderWindow {
    fn default() -> Self {
        SenderWindow {
            scale: 1.0,
            keyframes_only: false,
            end_ms: None,
            range_end_only: false,
        }
    }
}

// --- SETUP's transport and track ---------------------------------------------------------

/// The transport a SETUP takes from the client's offers, before ports are bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chosen {
    Tcp { channels: (u8, u8) },
    Udp { client_rtp: u16, client_rtcp: u16 },
}

/// The RTP profiles a SETUP may take on its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profiles {
    /// `RTP/SAVP`: the connection is RTSPS and its DESCRIBE gave this track a key.
    pub savp: bool,
    /// `RTP/AVP` over UDP: false on an RTSPS connection with `[tls] srtp = "require"`
    /// (plain video beside an encrypted control connection). Interleaved RTP stays
    /// allowed: it travels inside the connection's TLS.
    pub plain_udp: bool,
}

impl Profiles {
    /// A plain RTSP connection: RTP/AVP only.
    pub const PLAIN: Profiles = Profiles {
        savp: false,
        plain_udp: true,
    };
}

/// The first acceptable offer (unicast, UDP with client ports other than 0 or TCP; RTP/AVP, or
/// RTP/SAVP where `profiles` allows) of a Transport header `value`, and whether it is
/// SRTP. 461 when none is, 455 for `mode=record` on a viewer's session, and 461 for a UDP
/// destination other than the client (sending media to a third party on request is an
/// amplification vector).
pub fn choose_transport(
    offers: &[Offer],
    value: &str,
    track: usize,
    kind: SessionKind,
    peer: IpAddr,
    profiles: Profiles,
) -> Result<(Chosen, Option<TransportMode>, bool), Refusal> {
    let mut plain_udp_refused = false;
    let found = offers.iter().find_map(|t| {
        // Port 0 is no port a datagram can go to: the kernel refuses every send to it
        // (EINVAL, which a shared socket's batch would also read as GSO refused).
        let udp_ports = t
            .client_port
            .is_some_and(|(rtp, rtcp)| rtp != 0 && rtcp != 0);
        if t.multicast || !(t.lower == LowerTransport::Tcp || udp_ports) {
            return None;
        }
        let savp = t.profile.eq_ignore_ascii_case("RTP/SAVP");
        if savp {
            return (profiles.savp && kind == SessionKind::Play).then_some((t, true));
        }
        if !t.profile.eq_ignore_ascii_case("RTP/AVP") {
            return None;
        }
        if t.lower == LowerTransport::Udp && !profiles.plain_udp {
            plain_udp_refused = true;
            return None;
        }
        Some((t, false))
    });
    let Some((offer, savp)) = found else {
        let why = if plain_udp_refused {
            format!(
                "none of {value}: plain RTP over UDP is refused on RTSPS (tls.srtp = \"require\"); \
                 set up RTP/SAVP, or RTP/AVP/TCP inside the TLS connection"
            )
        } else {
            format!("none of {value}")
        };
        return Err(Refusal::new(StatusCode::UNSUPPORTED_TRANSPORT, why));
    };
    if offer.mode == Some(TransportMode::Record) && kind == SessionKind::Play {
        return Err(Refusal::new(
            StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
            "mode=record without ANNOUNCE",
        ));
    }
    let chosen = match offer.lower {
        LowerTransport::Tcp => {
            let default = ((track * 2) as u8, (track * 2 + 1) as u8);
            Chosen::Tcp {
                channels: offer.interleaved.unwrap_or(default),
            }
        }
        LowerTransport::Udp => {
            if offer
                .destination
                .as_deref()
                .is_some_and(|d| d != peer.to_string())
            {
                return Err(Refusal::new(
                    StatusCode::UNSUPPORTED_TRANSPORT,
                    "destination must be the client",
                ));
            }
            let (rtp, rtcp) = offer.client_port.unwrap_or((0, 0));
            Chosen::Udp {
                client_rtp: rtp,
                client_rtcp: rtcp,
            }
        }
    };
    Ok((chosen, offer.mode, savp))
}

/// Which track a SETUP URL's last segment (`control`) names. Readers use our own
/// `trackID=N` controls; publishers use whatever their SDP said (`streamid=0` from ffmpeg,
/// `stream=0` from GStreamer, absolute URLs from cameras). Without one, the only track.
pub fn track_index(
    sdp: &SessionDescription,
    kind: SessionKind,
    control: Option<&str>,
) -> Result<usize, Refusal> {
    let n = sdp.media.len();
    let Some(control) = control else {
        return if n == 1 {
            Ok(0)
        } else {
            Err(Refusal::new(
                StatusCode::AGGREGATE_OPERATION_NOT_ALLOWED,
                "SETUP needs a track URL",
            ))
        };
    };
    let found = match kind {
        SessionKind::Play => control
            .strip_prefix("trackID=")
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|i| *i < n),
        SessionKind::Record => sdp.media.iter().position(|m| {
            m.control
                .as_deref()
                .is_some_and(|c| c == control || c.rsplit('/').next() == Some(control))
        }),
    };
    found.ok_or_else(|| Refusal::new(StatusCode::NOT_FOUND, format!("no track {control}")))
}

#[cfg(test)]
mod tests;
