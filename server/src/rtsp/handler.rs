//! RTSP methods of a live node (RFC 2326 §10), one function each.

use super::conn::Conn;
use super::playback_methods::Playback;
use super::session::{Activity, Media, Session, TrackTransport};
use super::udp_session::{UdpPlay, UdpRecord, UdpTrack};
use crate::ingest::Producer;
use crate::live::reader::{Reader, TrackSetup};
use crate::live::stream::StreamInfo;
use crate::node::{Node, PathEntry, Publisher, SessionInfo, SessionKindView};
use rand::Rng;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use vigil_conf::{PublisherConflict, Source};
use vigil_proto::rtsp::{
    format_rtp_info, next_state, parse_transports, LowerTransport, Method, Request, Response,
    RtpInfo, SessionKind, SessionState, StatusCode, Transport, TransportMode,
};
use vigil_proto::sdp::{self, SessionDescription};

/// A publisher's ANNOUNCE, waiting for SETUP/RECORD on the same connection.
pub struct Announced {
    pub path: Arc<PathEntry>,
    pub sdp: SessionDescription,
    pub session_id: String,
    pub cancel: CancellationToken,
}

const PUBLIC: &str =
    "OPTIONS, DESCRIBE, ANNOUNCE, SETUP, PLAY, PAUSE, RECORD, TEARDOWN, GET_PARAMETER, SET_PARAMETER";

/// An error answer with a reason the client will print.
pub(crate) fn fail(status: StatusCode, why: impl std::fmt::Display) -> Response {
    let mut r = Response::new(status);
    r.reason = format!("{} ({why})", status.reason());
    r
}

/// What a SETUP resolves to before the session is joined or created.
struct SetupPlan {
    /// Session path for the API and the one-path-per-session check.
    name: String,
    kind: SessionKind,
    track: usize,
    tracks: usize,
    path: Option<Arc<PathEntry>>,
    playback: Option<Playback>,
}

/// Recordings are served under `playback/`; everything else is a live path.
fn is_playback(uri: &str) -> bool {
    url_path(uri).is_some_and(|p| p.starts_with("playback/"))
}

/// The stream path and (for SETUP) the track control of a request URL.
struct Target {
    path: Arc<PathEntry>,
    control: Option<String>,
}

fn url_path(uri: &str) -> Option<String> {
    let url = url::Url::parse(uri).ok()?;
    if url.scheme() != "rtsp" && url.scheme() != "rtsps" {
        return None;
    }
    Some(url.path().trim_matches('/').to_string())
}

impl Conn {
    /// Answer one request. The bool says whether to keep the connection.
    pub async fn handle(&mut self, req: Request) -> (Response, bool) {
        let Some(cseq) = req.cseq() else {
            Node::bump(&self.node.counters.rtsp_bad_requests);
            return (fail(StatusCode::BAD_REQUEST, "missing CSeq"), true);
        };
        if let Some(s) = &self.session {
            if req.session_id() == Some(s.info.id.as_str()) {
                s.touch();
            }
        }
        let mut resp = match req.method {
            Method::Options => Response::new(StatusCode::OK).header("Public", PUBLIC),
            Method::Describe if is_playback(&req.uri) => self.describe_playback(&req).await,
            Method::Describe => self.describe(&req).await,
            Method::Announce => self.announce(&req),
            Method::Setup => self.setup(&req).await,
            Method::Play if self.is_playback_session() => self.play_playback(&req).await,
            Method::Play => self.play(&req),
            Method::Pause if self.is_playback_session() => self.pause_playback(&req).await,
            Method::Pause => self.pause(&req),
            Method::Record => self.record(&req),
            Method::Teardown => self.teardown(&req),
            Method::GetParameter => self.keepalive(&req),
            Method::SetParameter => {
                if req.body.is_empty() {
                    self.keepalive(&req)
                } else {
                    fail(
                        StatusCode::PARAMETER_NOT_UNDERSTOOD,
                        "no settable parameters",
                    )
                }
            }
            Method::Redirect | Method::Other(_) => fail(
                StatusCode::NOT_IMPLEMENTED,
                format!("method {}", req.method.as_str()),
            ),
        };
        resp = resp
            .header("CSeq", cseq.to_string())
            .header("Server", "vigil");
        if let Some(s) = &self.session {
            if resp.headers.get("Session").is_none() && req.session_id() == Some(s.info.id.as_str())
            {
                resp = resp.header("Session", session_header(s));
            }
        }
        if !resp.status.is_success() && resp.status != StatusCode::FOUND {
            info!(method = req.method.as_str(), uri = %req.uri, status = resp.status.0, reason = %resp.reason, "request refused");
        }
        (resp, true)
    }

    fn resolve(&self, uri: &str) -> Result<Target, Response> {
        let path = url_path(uri).ok_or_else(|| fail(StatusCode::BAD_REQUEST, "bad URL"))?;
        if let Some(p) = self.node.path(&path) {
            return Ok(Target {
                path: p,
                control: None,
            });
        }
        // The announced path of this connection's publisher (not in the registry as a
        // configured path while a new push path is being set up).
        if let Some(a) = &self.announced {
            if path == a.path.name {
                return Ok(Target {
                    path: a.path.clone(),
                    control: None,
                });
            }
        }
        if let Some((base, control)) = path.rsplit_once('/') {
            let found = self.node.path(base).or_else(|| {
                self.announced
                    .as_ref()
                    .filter(|a| a.path.name == base)
                    .map(|a| a.path.clone())
            });
            if let Some(p) = found {
                return Ok(Target {
                    path: p,
                    control: Some(control.to_string()),
                });
            }
        }
        Err(fail(StatusCode::NOT_FOUND, format!("no path {path}")))
    }

    /// Checks the request's Session header against this connection's session.
    fn own_session(&self, req: &Request) -> Result<(), Response> {
        match (req.session_id(), &self.session) {
            (Some(id), Some(s)) if id == s.info.id => Ok(()),
            (None, _) => Err(fail(StatusCode::SESSION_NOT_FOUND, "no Session header")),
            (Some(_), _) => Err(fail(StatusCode::SESSION_NOT_FOUND, "unknown session")),
        }
    }

    /// Cluster: a live camera this node does not hold live but another node does → 302 to it
    /// (issue 4 §6). A request already redirected once carries the marker and is served here.
    fn live_redirect(&self, req: &Request) -> Option<Response> {
        let cluster = self.node.cluster.get()?;
        if crate::cluster::has_marker(&req.uri) {
            return None;
        }
        let path = url_path(&req.uri)?;
        let camera = path.strip_prefix("live/")?;
        if self.node.path(&path).is_some_and(|p| p.stream.is_live()) {
            return None;
        }
        // The node holding it live, else (a pull camera) the node the scheduler bound it to.
        let (node, base) = cluster
            .live_holder(camera)
            .or_else(|| cluster.bound_holder(camera))?;
        let location = crate::cluster::redirect_url(&base, &req.uri);
        info!(camera, node = %node, %location, "live DESCRIBE redirected");
        Some(Response::new(StatusCode::FOUND).header("Location", location))
    }

    async fn describe(&mut self, req: &Request) -> Response {
        if let Some(r) = self.live_redirect(req) {
            return r;
        }
        let target = match self.resolve(&req.uri) {
            Ok(t) => t,
            Err(r) => return r,
        };
        let stream = target.path.stream.clone();
        if !stream.is_live() {
            if let Source::Pull { .. } = target.path.source {
                crate::ingest::pull::ensure_running(&self.node, &target.path);
                let deadline = Instant::now() + Duration::from_secs(10);
                while !stream.is_live() && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        let Some(info) = stream.info().filter(|_| stream.is_live()) else {
            return fail(
                StatusCode::NOT_FOUND,
                format!("{} is not live", target.path.name),
            );
        };
        let body = info
            .sdp
            .render(&self.local_ip().to_string(), session_number(), "npt=now-");
        let uri = crate::cluster::strip_marker(&req.uri);
        let base = format!("{}/", uri.trim_end_matches('/'));
        Response::new(StatusCode::OK)
            .header("Content-Base", base)
            .body("application/sdp", body)
    }

    fn announce(&mut self, req: &Request) -> Response {
        if self.session.is_some() || self.announced.is_some() {
            return fail(
                StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
                "ANNOUNCE twice on one connection",
            );
        }
        let Some(path) = url_path(&req.uri) else {
            return fail(StatusCode::BAD_REQUEST, "bad URL");
        };
        let ct = req.headers.get("Content-Type").unwrap_or("");
        if !ct.eq_ignore_ascii_case("application/sdp") {
            return fail(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "body must be application/sdp",
            );
        }
        let Ok(text) = std::str::from_utf8(&req.body) else {
            return fail(StatusCode::BAD_REQUEST, "SDP is not UTF-8");
        };
        let sdp = match sdp::parse(text) {
            Ok(s) => s,
            Err(e) => return fail(StatusCode::BAD_REQUEST, format!("SDP: {e}")),
        };
        let Some(entry) = self.node.path_for_publish(&path) else {
            return fail(
                StatusCode::NOT_FOUND,
                format!("{path} does not accept publishers (use live/<camera>)"),
            );
        };
        crate::record::start(&self.node, &entry);
        let session_id = new_session_id();
        let cancel = CancellationToken::new();
        {
            let mut publisher = entry.publisher();
            if let Some(current) = publisher.as_ref() {
                match self.node.config.rtsp.publisher_conflict {
                    PublisherConflict::Refuse => {
                        return fail(
                            StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
                            format!("{path} already has a publisher"),
                        )
                    }
                    PublisherConflict::Takeover => {
                        warn!(path = %path, "new publisher takes over");
                        current.cancel.cancel();
                    }
                }
            }
            *publisher = Some(Publisher {
                session_id: session_id.clone(),
                cancel: cancel.clone(),
            });
        }
        info!(path = %path, tracks = sdp.media.len(), "publisher announced");
        self.announced = Some(Announced {
            path: entry,
            sdp,
            session_id,
            cancel,
        });
        Response::new(StatusCode::OK)
    }

    async fn setup(&mut self, req: &Request) -> Response {
        let Some(value) = req.headers.get("Transport") else {
            return fail(StatusCode::UNSUPPORTED_TRANSPORT, "no Transport header");
        };
        let offers = match parse_transports(value) {
            Ok(t) => t,
            Err(e) => return fail(StatusCode::UNSUPPORTED_TRANSPORT, e),
        };
        let plan = if is_playback(&req.uri) {
            self.plan_playback_setup(req).await
        } else {
            self.plan_live_setup(req)
        };
        let mut plan = match plan {
            Ok(p) => p,
            Err(r) => return r,
        };
        // The transport first: a SETUP refused for its transport must not leave a session.
        let (transport, answer, setup) =
            match self.negotiate(&offers, value, plan.track, plan.kind).await {
                Ok(x) => x,
                Err(r) => return r,
            };
        // Session checks: join this connection's session, or create one.
        match (&self.session, req.session_id()) {
            (Some(s), Some(id)) if id == s.info.id => {
                if s.info.path != plan.name {
                    return fail(
                        StatusCode::AGGREGATE_OPERATION_NOT_ALLOWED,
                        "one path per session",
                    );
                }
                if let Err(code) = next_state(s.state, s.kind, &Method::Setup) {
                    return fail(code, "SETUP");
                }
            }
            (_, Some(_)) => return fail(StatusCode::SESSION_NOT_FOUND, "unknown session"),
            (Some(_), None) => {
                return fail(
                    StatusCode::AGGREGATE_OPERATION_NOT_ALLOWED,
                    "a session exists on this connection",
                )
            }
            (None, None) => {
                let limits = &self.node.config.limits;
                if self.node.session_count() >= limits.max_sessions {
                    Node::bump(&self.node.counters.sessions_rejected);
                    return fail(StatusCode::SERVICE_UNAVAILABLE, "session limit reached");
                }
                if let (SessionKind::Play, Some(path)) = (plan.kind, &plan.path) {
                    if path.stream.readers.load(Ordering::Acquire) >= limits.max_readers_per_path {
                        Node::bump(&self.node.counters.sessions_rejected);
                        return fail(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "reader limit of this path reached",
                        );
                    }
                }
                self.session = Some(self.new_session(&mut plan));
            }
        }
        let Some(session) = self.session.as_mut() else {
            return fail(StatusCode::INTERNAL_SERVER_ERROR, "session vanished");
        };
        if session.tracks.len() <= plan.track {
            session.tracks.resize_with(plan.track + 1, || None);
            session.setups.resize(plan.track + 1, None);
        }
        *session
            .info
            .transport
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = answer.to_string();
        session.tracks[plan.track] = Some(transport);
        session.setups[plan.track] = Some(setup);
        session.state =
            next_state(session.state, session.kind, &Method::Setup).unwrap_or(session.state);
        session.touch();
        Response::new(StatusCode::OK)
            .header("Transport", answer.to_string())
            .header("Session", session_header(session))
    }

    /// What a SETUP on a live path asks for.
    fn plan_live_setup(&self, req: &Request) -> Result<SetupPlan, Response> {
        let target = self.resolve(&req.uri)?;
        let recording = self
            .announced
            .as_ref()
            .is_some_and(|a| Arc::ptr_eq(&a.path, &target.path));
        let (kind, sdp) = if recording {
            let a = self
                .announced
                .as_ref()
                .map(|a| a.sdp.clone())
                .unwrap_or_default();
            (SessionKind::Record, a)
        } else {
            match target
                .path
                .stream
                .info()
                .filter(|_| target.path.stream.is_live())
            {
                Some(info) => (SessionKind::Play, info.sdp.clone()),
                None => {
                    return Err(fail(
                        StatusCode::NOT_FOUND,
                        format!("{} is not live", target.path.name),
                    ))
                }
            }
        };
        let track = track_index(&sdp, kind, target.control.as_deref())?;
        Ok(SetupPlan {
            name: target.path.name.clone(),
            kind,
            track,
            tracks: sdp.media.len(),
            path: Some(target.path),
            playback: None,
        })
    }

    /// What a SETUP on a recording asks for; the playback state is made with the session.
    async fn plan_playback_setup(&mut self, req: &Request) -> Result<SetupPlan, Response> {
        let control = url::Url::parse(&req.uri)
            .ok()
            .and_then(|u| {
                u.path_segments()
                    .and_then(|mut s| s.next_back().map(str::to_string))
            })
            .filter(|last| last.starts_with("trackID="));
        let existing = self
            .session
            .as_ref()
            .and_then(|s| s.playback.as_ref().map(|p| p.sdp.clone()));
        let (playback, sdp) = match existing {
            Some(sdp) => (None, sdp),
            None => {
                let pb = self.playback_for_setup(&req.uri).await?;
                let sdp = pb.sdp.clone();
                (Some(pb), sdp)
            }
        };
        let name = match (&playback, &self.session) {
            (Some(pb), _) => format!("playback/{}", pb.req.camera),
            (None, Some(s)) => s.info.path.clone(),
            (None, None) => String::new(),
        };
        let track = track_index(&sdp, SessionKind::Play, control.as_deref())?;
        Ok(SetupPlan {
            name,
            kind: SessionKind::Play,
            track,
            tracks: sdp.media.len(),
            path: None,
            playback,
        })
    }

    /// Pick the first acceptable transport of the client's offers and bind what it needs.
    async fn negotiate(
        &self,
        offers: &[Transport],
        value: &str,
        track: usize,
        kind: SessionKind,
    ) -> Result<(TrackTransport, Transport, TrackSetup), Response> {
        let Some(offer) = offers.iter().find(|t| {
            !t.multicast
                && t.profile.eq_ignore_ascii_case("RTP/AVP")
                && (t.lower == LowerTransport::Tcp || t.client_port.is_some())
        }) else {
            return Err(fail(
                StatusCode::UNSUPPORTED_TRANSPORT,
                format!("none of {value}"),
            ));
        };
        if offer.mode == Some(TransportMode::Record) && kind == SessionKind::Play {
            return Err(fail(
                StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
                "mode=record without ANNOUNCE",
            ));
        }
        let setup = {
            let mut rng = rand::thread_rng();
            TrackSetup {
                ssrc: rng.gen(),
                first_seq: rng.gen(),
                first_ts: rng.gen(),
            }
        };
        match offer.lower {
            LowerTransport::Tcp => {
                let ch = offer
                    .interleaved
                    .unwrap_or(((track * 2) as u8, (track * 2 + 1) as u8));
                let mut t = Transport::tcp_interleaved(ch);
                t.mode = offer.mode;
                if kind == SessionKind::Play {
                    t.ssrc = Some(setup.ssrc);
                }
                Ok((
                    TrackTransport::Tcp {
                        rtp_channel: ch.0,
                        rtcp_channel: ch.1,
                    },
                    t,
                    setup,
                ))
            }
            LowerTransport::Udp => {
                let (rtp, rtcp) = offer.client_port.unwrap_or((0, 0));
                let ip = self.peer.ip();
                let dest_ok = offer
                    .destination
                    .as_deref()
                    .is_none_or(|d| d == ip.to_string());
                if !dest_ok {
                    // Sending media to a third party on request is an amplification vector.
                    return Err(fail(
                        StatusCode::UNSUPPORTED_TRANSPORT,
                        "destination must be the client",
                    ));
                }
                let Some(pair) = self.node.ports.bind_pair(self.local.ip()).await else {
                    return Err(fail(StatusCode::SERVICE_UNAVAILABLE, "no free UDP ports"));
                };
                let mut t = Transport::udp_unicast();
                t.client_port = Some((rtp, rtcp));
                t.server_port = Some((pair.rtp_port, pair.rtp_port + 1));
                t.mode = offer.mode;
                t.source = Some(self.local.ip().to_string());
                if kind == SessionKind::Play {
                    t.ssrc = Some(setup.ssrc);
                }
                let server_port = pair.rtp_port;
                Ok((
                    TrackTransport::Udp {
                        pair: Some(pair),
                        client_rtp: SocketAddr::new(ip, rtp),
                        client_rtcp: SocketAddr::new(ip, rtcp),
                        server_port,
                    },
                    t,
                    setup,
                ))
            }
        }
    }

    fn new_session(&self, plan: &mut SetupPlan) -> Session {
        let kind = plan.kind;
        let id = match (kind, &self.announced) {
            (SessionKind::Record, Some(a)) => a.session_id.clone(),
            _ => new_session_id(),
        };
        let cancel = match (kind, &self.announced) {
            (SessionKind::Record, Some(a)) => a.cancel.clone(),
            _ => CancellationToken::new(),
        };
        let info = Arc::new(SessionInfo {
            id,
            path: plan.name.clone(),
            kind: match (kind, &plan.playback) {
                (SessionKind::Record, _) => SessionKindView::Record,
                (SessionKind::Play, Some(_)) => SessionKindView::Playback,
                (SessionKind::Play, None) => SessionKindView::Play,
            },
            transport: Mutex::new(String::new()),
            client: self.peer,
            started: SystemTime::now(),
            started_at: Instant::now(),
            bytes: Default::default(),
            packets: Default::default(),
            rate_bps: Default::default(),
            position_ms: Default::default(),
            cancel,
        });
        self.node.register_session(info.clone());
        let activity = Activity::new();
        activity.touch();
        Session {
            info,
            kind,
            state: SessionState::Init,
            path: plan.path.clone(),
            playback: plan.playback.take(),
            tracks: (0..plan.tracks).map(|_| None).collect(),
            setups: vec![None; plan.tracks],
            activity,
            timeout: Duration::from_secs(self.node.config.limits.session_timeout_secs.into()),
            media: Media::None,
            producer: None,
        }
    }

    fn is_playback_session(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.playback.is_some())
    }

    pub(crate) fn transition(&mut self, req: &Request) -> Result<&mut Session, Response> {
        self.own_session(req)?;
        let session = self
            .session
            .as_mut()
            .ok_or_else(|| fail(StatusCode::SESSION_NOT_FOUND, "none"))?;
        session.touch();
        let next = next_state(session.state, session.kind, &req.method).map_err(|code| {
            fail(
                code,
                format!("{} in state {:?}", req.method.as_str(), session.state),
            )
        })?;
        session.state = next;
        Ok(session)
    }

    fn play(&mut self, req: &Request) -> Response {
        let node = self.node.clone();
        let was_paused = self
            .session
            .as_ref()
            .is_some_and(|s| !matches!(s.media, Media::None));
        let session = match self.transition(req) {
            Ok(s) => s,
            Err(r) => return r,
        };
        if was_paused {
            // Resume: live media continues from the newest keyframe.
            if let Media::UdpPlay(p) = &session.media {
                p.set_paused(false);
            }
            return Response::new(StatusCode::OK);
        }
        let Some(path) = session.path.clone() else {
            return fail(StatusCode::METHOD_NOT_VALID_IN_THIS_STATE, "no live path");
        };
        let reader = Reader::new(path.stream.clone(), &session.setups);
        let base = req.uri.trim_end_matches('/');
        let rtp_info: Vec<RtpInfo> = reader
            .rtp_info()
            .into_iter()
            .map(|(track, seq, rtptime)| RtpInfo {
                url: format!("{base}/trackID={track}"),
                seq: Some(seq),
                rtptime: Some(rtptime),
            })
            .collect();
        if session.is_tcp() {
            session.media = Media::TcpPlay(reader);
        } else {
            let tracks = take_udp_tracks(session);
            session.media = Media::UdpPlay(UdpPlay::spawn(
                node,
                session.info.clone(),
                reader,
                tracks,
                session.activity.clone(),
            ));
        }
        info!(session = %session.info.id, path = %path.name, "playing");
        Response::new(StatusCode::OK).header("RTP-Info", format_rtp_info(&rtp_info))
    }

    fn pause(&mut self, req: &Request) -> Response {
        let session = match self.transition(req) {
            Ok(s) => s,
            Err(r) => return r,
        };
        if let Media::UdpPlay(p) = &session.media {
            p.set_paused(true);
        }
        Response::new(StatusCode::OK)
    }

    fn record(&mut self, req: &Request) -> Response {
        let node = self.node.clone();
        let sdp = self.announced.as_ref().map(|a| a.sdp.clone());
        let session = match self.transition(req) {
            Ok(s) => s,
            Err(r) => return r,
        };
        if session.producer.is_some() || !matches!(session.media, Media::None) {
            return Response::new(StatusCode::OK);
        }
        let Some(sdp) = sdp else {
            return fail(
                StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
                "RECORD without ANNOUNCE",
            );
        };
        let Some(path) = session.path.clone() else {
            return fail(StatusCode::METHOD_NOT_VALID_IN_THIS_STATE, "no live path");
        };
        let producer = Producer::attach(path.stream.clone(), StreamInfo::from_sdp(sdp));
        if session.is_tcp() {
            session.producer = Some(producer);
        } else {
            let tracks = take_udp_tracks(session);
            session.media = Media::UdpRecord(UdpRecord::spawn(
                node,
                session.info.clone(),
                producer,
                tracks,
                session.activity.clone(),
            ));
        }
        info!(session = %session.info.id, path = %path.name, "recording");
        Response::new(StatusCode::OK)
    }

    fn teardown(&mut self, req: &Request) -> Response {
        if let Err(r) = self.own_session(req) {
            return r;
        }
        self.end_session();
        self.announced = None;
        Response::new(StatusCode::OK)
    }

    fn keepalive(&mut self, req: &Request) -> Response {
        if let Some(id) = req.session_id() {
            if let Err(r) = self.own_session(req) {
                return r;
            }
            if let Some(s) = &self.session {
                debug_assert_eq!(s.info.id, id);
                s.touch();
            }
        }
        Response::new(StatusCode::OK)
    }
}

pub(crate) fn take_udp_tracks(session: &mut Session) -> Vec<UdpTrack> {
    session
        .tracks
        .iter_mut()
        .enumerate()
        .filter_map(|(i, t)| match t {
            Some(TrackTransport::Udp {
                pair,
                client_rtp,
                client_rtcp,
                ..
            }) => pair.take().map(|pair| UdpTrack {
                track: i,
                pair,
                client_rtp: *client_rtp,
                client_rtcp: *client_rtcp,
            }),
            _ => None,
        })
        .collect()
}

/// Which track a SETUP URL names. Readers use our own `trackID=N` controls; publishers use
/// whatever their SDP said (`streamid=0` from ffmpeg, `stream=0` from GStreamer, absolute
/// URLs from cameras).
fn track_index(
    sdp: &SessionDescription,
    kind: SessionKind,
    control: Option<&str>,
) -> Result<usize, Response> {
    let n = sdp.media.len();
    let Some(control) = control else {
        return if n == 1 {
            Ok(0)
        } else {
            Err(fail(
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
    found.ok_or_else(|| fail(StatusCode::NOT_FOUND, format!("no track {control}")))
}

fn session_header(s: &Session) -> String {
    format!("{};timeout={}", s.info.id, s.timeout.as_secs())
}

fn new_session_id() -> String {
    format!("{:016X}", rand::thread_rng().gen::<u64>())
}

fn session_number() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
