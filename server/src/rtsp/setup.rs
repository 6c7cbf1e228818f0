//! SETUP (RFC 2326 §10.4): resolve what the URL names (a live path's track, a publisher's
//! announced track, or a recording's track), join or create the session, and negotiate the
//! transport — UDP unicast with a server port pair, or TCP interleaved channels.

use super::conn::Conn;
use super::handler::{fail, is_playback, new_session_id};
use super::session::{Activity, Core, Media, Session};
use super::shared_ports::SharedPorts;
use super::udp_session::TrackPorts;
use crate::live::reader::TrackSetup;
use crate::node::{Node, PathEntry, SessionInfo, SessionKindView};
use crate::playback::sender::Playback;
use crate::playback::task::Cursor;
use rand::Rng;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use vigil_proto::rtsp::{parse_transports, Request, Response, SessionKind, StatusCode, Transport};
use vigil_proto::srtp::keymgmt;
use vigil_session::session::{choose_transport, track_index, Chosen, Profiles};
use vigil_session::Presentation;

/// What a SETUP resolves to before the session is joined or created.
struct SetupPlan {
    /// Session path for the API and the one-path-per-session check.
    name: String,
    kind: SessionKind,
    track: usize,
    tracks: usize,
    path: Option<Arc<PathEntry>>,
    playback: Option<(Playback, Presentation<Cursor>)>,
}

/// A negotiated transport: the core's view, and the UDP ports bound for it.
struct Negotiated {
    transport: vigil_session::Transport,
    pair: Option<TrackPorts>,
    answer: Transport,
    setup: TrackSetup,
    srtp: Option<Arc<crate::net::srtp::Track>>,
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
        // A live viewer may share the node's server ports; a publisher or a playback not.
        // A live plan names its path; a playback's names none (and only its first SETUP
        // carries the playback: a later track's joins the session's).
        let live_viewer = plan.kind == SessionKind::Play && plan.path.is_some();
        let negotiated = match self
            .negotiate(req, &offers, plan.track, plan.kind, live_viewer)
            .await
        {
            Ok(x) => x,
            Err(r) => return r,
        };
        // Session checks: join this connection's session, or create one.
        match (&self.session, req.session_id()) {
            (Some(s), Some(id)) if id == s.info.id => {
                if let Err(r) = s.core.check_setup(s.info.path == plan.name) {
                    return r.into();
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
                if plan.kind == SessionKind::Play && !self.node.audit_admits() {
                    Node::bump(&self.node.counters.sessions_rejected);
                    return fail(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the audit trail cannot be written ([audit] required = true)",
                    );
                }
                let unproven = self.auth.user_name().is_empty();
                if unproven
                    && self.node.sessions_from(self.peer.ip()) >= limits.max_sessions_per_address
                {
                    crate::limits::LimitStats::bump(&self.node.limit_stats.sessions_per_address);
                    return fail(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "session limit of this address reached",
                    );
                }
                if !self.node.user_has_room(self.auth.user_name()) {
                    return fail(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "session limit of this user reached ([limits] max_sessions_per_user)",
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
        let Negotiated {
            transport,
            pair,
            answer,
            setup,
            srtp,
        } = negotiated;
        *session
            .info
            .transport
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = answer.to_string();
        if session.pairs.len() <= plan.track {
            session.pairs.resize_with(plan.track + 1, || None);
        }
        session.pairs[plan.track] = pair;
        if session.srtp.len() <= plan.track {
            session.srtp.resize_with(plan.track + 1, || None);
        }
        session.srtp[plan.track] = srtp;
        session.activity.touch();
        session
            .core
            .commit_setup(plan.track, transport, setup, std::time::Instant::now());
        Response::new(StatusCode::OK)
            .header("Transport", answer.to_string())
            .header("Session", session.core.header())
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
        let track = track_index(&sdp, kind, target.control.as_deref()).map_err(Response::from)?;
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
            .and_then(|s| s.core.playback().map(|p| p.sdp.clone()));
        let (playback, sdp) = match existing {
            Some(sdp) => (None, sdp),
            None => {
                let (pb, presentation) = self.playback_for_setup(&req.uri).await?;
                let sdp = presentation.sdp.clone();
                (Some((pb, presentation)), sdp)
            }
        };
        let name = match (&playback, &self.session) {
            (Some((pb, _)), _) => format!("playback/{}", pb.req.camera),
            (None, Some(s)) => s.info.path.clone(),
            (None, None) => String::new(),
        };
        let track =
            track_index(&sdp, SessionKind::Play, control.as_deref()).map_err(Response::from)?;
        Ok(SetupPlan {
            name,
            kind: SessionKind::Play,
            track,
            tracks: sdp.media.len(),
            path: None,
            playback,
        })
    }

    /// Pick the first acceptable transport of the client's offers (the core's rule) and
    /// bind what it needs. On RTSPS, `RTP/SAVP` is taken for a track the connection's
    /// DESCRIBE gave a key; plain UDP is refused there under `[tls] srtp = "require"`.
    async fn negotiate(
        &self,
        req: &Request,
        offers: &[Transport],
        track: usize,
        kind: SessionKind,
        live_viewer: bool,
    ) -> Result<Negotiated, Response> {
        let value = req.headers.get("Transport").unwrap_or_default();
        let key = self
            .srtp_offer
            .as_ref()
            .filter(|_| self.tls)
            .and_then(|o| o.key_for(&req.uri, track));
        let profiles = if self.tls {
            Profiles {
                savp: key.is_some(),
                plain_udp: self.node.config.tls.srtp != vigil_conf::SrtpMode::Require,
            }
        } else {
            Profiles::PLAIN
        };
        let (chosen, mode, savp) =
            choose_transport(offers, value, track, kind, self.peer.ip(), profiles)?;
        let srtp = match key.filter(|_| savp) {
            None => None,
            Some(key) => {
                // The client's own key protects the RTCP it sends (RFC 4567); without a
                // KeyMgmt its RTCP cannot be checked and is not counted.
                let client = match req.headers.get("KeyMgmt") {
                    None => None,
                    Some(v) => match keymgmt::parse_header(v) {
                        Ok(o) => Some((o.key, o.profile)),
                        Err(e) => return Err(fail(StatusCode::KEY_MANAGEMENT_FAILURE, e)),
                    },
                };
                Some(Arc::new(crate::net::srtp::Track::new(key, client)))
            }
        };
        let profile = if srtp.is_some() {
            "RTP/SAVP"
        } else {
            "RTP/AVP"
        };
        let setup = {
            let mut rng = rand::thread_rng();
            TrackSetup {
                ssrc: rng.gen(),
                first_seq: rng.gen(),
                first_ts: rng.gen(),
            }
        };
        let ssrc = (kind == SessionKind::Play).then_some(setup.ssrc);
        match chosen {
            Chosen::Tcp { channels } => {
                let mut answer = Transport::tcp_interleaved(channels);
                answer.profile = profile.to_string();
                answer.mode = mode;
                answer.ssrc = ssrc;
                Ok(Negotiated {
                    transport: vigil_session::Transport::Tcp {
                        rtp_channel: channels.0,
                        rtcp_channel: channels.1,
                    },
                    pair: None,
                    answer,
                    setup,
                    srtp,
                })
            }
            Chosen::Udp {
                client_rtp,
                client_rtcp,
            } => {
                // An SRTP viewer's RTCP says whose it is only once decrypted: its own pair.
                let shared =
                    live_viewer && srtp.is_none() && self.node.config.rtsp.udp_shared_ports;
                let pair = if shared {
                    SharedPorts::pair(&self.node, self.local.ip())
                        .await
                        .map(TrackPorts::Shared)
                } else {
                    self.node
                        .ports
                        .bind_pair(self.local.ip())
                        .await
                        .map(TrackPorts::Own)
                };
                let Some(pair) = pair else {
                    return Err(fail(StatusCode::SERVICE_UNAVAILABLE, "no free UDP ports"));
                };
                let rtp_port = pair.rtp_port();
                let mut answer = Transport::udp_unicast();
                answer.profile = profile.to_string();
                answer.client_port = Some((client_rtp, client_rtcp));
                answer.server_port = Some((rtp_port, rtp_port + 1));
                answer.mode = mode;
                answer.source = Some(self.local.ip().to_string());
                answer.ssrc = ssrc;
                let ip = self.peer.ip();
                Ok(Negotiated {
                    transport: vigil_session::Transport::Udp {
                        client_rtp: SocketAddr::new(ip, client_rtp),
                        client_rtcp: SocketAddr::new(ip, client_rtcp),
                        server_port: rtp_port,
                    },
                    pair: Some(pair),
                    answer,
                    setup,
                    srtp,
                })
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
        let mut info = SessionInfo::new(
            id,
            plan.name.clone(),
            match (kind, &plan.playback) {
                (SessionKind::Record, _) => SessionKindView::Record,
                (SessionKind::Play, Some(_)) => SessionKindView::Playback,
                (SessionKind::Play, None) => SessionKindView::Play,
            },
            self.peer,
            cancel,
        );
        info.user = self.auth.user_name().to_string();
        let info = Arc::new(info);
        if let Some((pb, presentation)) = &plan.playback {
            // Listed in the node's report from now on, at its start and expected bitrate:
            // the scheduler's estimate for this placement lapses with the next report, and
            // a report that left the session out until its first frame would show the
            // node lighter than it is (least-load would send it the next request too).
            info.position_ms
                .store(presentation.origin_ms, Ordering::Relaxed);
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
        let (playback, presentation) = plan.playback.take().unzip();
        let timeout = Duration::from_secs(self.node.config.limits.session_timeout_secs.into());
        let core = Core::new(
            info.id.clone(),
            kind,
            plan.tracks,
            timeout,
            presentation,
            std::time::Instant::now(),
        );
        Session {
            info,
            core,
            path: plan.path.clone(),
            playback,
            pairs: (0..plan.tracks).map(|_| None).collect(),
            srtp: (0..plan.tracks).map(|_| None).collect(),
            activity,
            media: Media::None,
            producer: None,
        }
    }
}
