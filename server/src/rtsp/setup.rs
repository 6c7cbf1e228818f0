//! SETUP (RFC 2326 §10.4): resolve what the URL names (a live path's track, a publisher's
//! announced track, or a recording's track), join or create the session, and negotiate the
//! transport — UDP unicast with a server port pair, or TCP interleaved channels.

use super::conn::Conn;
use super::handler::{fail, is_playback, new_session_id, session_header};
use super::playback_session::Playback;
use super::session::{Activity, Media, Session, TrackTransport};
use crate::live::reader::TrackSetup;
use crate::node::{Node, PathEntry, SessionInfo, SessionKindView};
use rand::Rng;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use vigil_proto::rtsp::{
    next_state, parse_transports, LowerTransport, Method, Request, Response, SessionKind,
    SessionState, StatusCode, Transport, TransportMode,
};
use vigil_proto::sdp::SessionDescription;

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

impl Conn {
    pub(super) async fn setup(&mut self, req: &Request) -> Response {
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
                if self.node.sessions_from(self.peer.ip()) >= limits.max_sessions_per_address {
                    crate::limits::LimitStats::bump(&self.node.limit_stats.sessions_per_address);
                    return fail(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "session limit of this address reached",
                    );
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
                Node::bump(&self.node.counters.sessions_opened);
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

    fn new_session(&mut self, plan: &mut SetupPlan) -> Session {
        let kind = plan.kind;
        let id = match (kind, &self.announced) {
            (SessionKind::Record, Some(a)) => a.session_id.clone(),
            _ => new_session_id(),
        };
        let cancel = match (kind, &self.announced) {
            (SessionKind::Record, Some(a)) => a.cancel.clone(),
            _ => CancellationToken::new(),
        };
        let info = Arc::new(SessionInfo::new(
            id,
            plan.name.clone(),
            match (kind, &plan.playback) {
                (SessionKind::Record, _) => SessionKindView::Record,
                (SessionKind::Play, Some(_)) => SessionKindView::Playback,
                (SessionKind::Play, None) => SessionKindView::Play,
            },
            self.peer,
            cancel,
        ));
        if let Some(pb) = &plan.playback {
            // Listed in the node's report from now on, at its start and expected bitrate:
            // the scheduler's estimate for this placement lapses with the next report, and
            // a report that left the session out until its first frame would show the
            // node lighter than it is (least-load would send it the next request too).
            info.position_ms.store(pb.origin_ms, Ordering::Relaxed);
            if let Some(bps) = pb.expected_bps {
                info.rate_bps.store(bps as u64, Ordering::Relaxed);
            }
        }
        let (commands, commands_rx) = tokio::sync::mpsc::channel(4);
        *info.commands.lock().unwrap_or_else(|p| p.into_inner()) = Some(commands);
        self.commands = Some(commands_rx);
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
