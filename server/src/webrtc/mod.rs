//! WebRTC egress (issue 27): live video to browsers over WHEP, sub-second behind the
//! camera. `str0m` is the WebRTC stack (sans-IO: it never reads the clock or touches a
//! socket, so this module is its shell, as `rtsp` is `vigil-proto`'s): ICE-lite with host
//! candidates on the node's configured addresses, DTLS-SRTP, RTCP; the node's part is one
//! UDP socket shared by every peer (`stun` routes a datagram to its peer), a peer task per
//! viewer (`peer`: one more reader of the camera's hub, its packets forwarded as RTP), and
//! the HTTP resource (`admin::whep_api`).
//!
//! A recording's viewer steers it through its WHEP resource (`POST /whep/resource/<id>/control`:
//! seek, pause, resume, Scale), by the rules of `vigil_session::steer`.
//!
//! Carried: H.264 video (packetization-mode 1, the hub's own packets, no repacketizing)
//! and G.711 audio. H.265 and AAC are refused by name (415): browsers do not all decode
//! the one and WebRTC has no payload format for the other, and this node does not
//! transcode.

pub mod peer;
mod recording;
mod stun;

use crate::node::{Node, SessionInfo, SessionKindView};
use crate::playback::locate::{locate, Bounds, LocateError, Opens};
use crate::playback::task::Cursor;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use str0m::change::SdpOffer;
use str0m::format::Codec;
use str0m::media::MediaKind;
use str0m::{Candidate, Output, Rtc};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};
use vigil_proto::codec::Codec as HubCodec;

/// Datagrams queued for one peer before the socket task drops them (a peer task that
/// stalls must not hold up the others).
const PEER_QUEUE: usize = 256;
/// Source addresses one peer may be reached from (its ICE candidates that checked in).
const PEER_ADDRS_MAX: usize = 8;

/// Why a WHEP request was refused, typed so the HTTP answer picks its status from the kind.
#[derive(Debug, thiserror::Error)]
pub enum WhepError {
    #[error("WebRTC is off on this node ([webrtc] enabled = false)")]
    Off,
    #[error("a WHEP offer is Content-Type: application/sdp")]
    NotSdp,
    #[error("camera {0} is not live on this node")]
    NotLive(String),
    #[error("too many offers from this address: retry in {0:?}")]
    RateLimited(Duration),
    #[error("this node serves its limit of {0} WebRTC peers ([webrtc] max_peers)")]
    Full(usize),
    #[error("the offer is not SDP this node can answer: {0}")]
    BadOffer(String),
    #[error(
        "the offer has no H.264 (packetization-mode 1) video to receive: this node sends the \
         camera's H.264 as it is"
    )]
    NoVideo,
    #[error(
        "camera {camera} is {codec}: WebRTC here carries H.264 video and G.711 audio (H.265 and \
         AAC are not carried; no transcoding) — use RTSP or HLS for it"
    )]
    Codec { camera: String, codec: String },
    #[error("no such WHEP resource (the session ended, or never was)")]
    NoResource,
    #[error("no recording of camera {0} at that time")]
    NoRecording(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("storage: {0}")]
    Storage(String),
    #[error("WebRTC: {0}")]
    Rtc(String),
    #[error("a live viewer has nothing to seek, pause or speed up: controls steer recordings")]
    NotPlayback,
    #[error("the peer has not connected yet (ICE and DTLS): steer it once it plays")]
    NotConnected,
    #[error(transparent)]
    Steer(#[from] vigil_session::SteerError),
}

/// One peer as the socket task and the API see it.
struct PeerHandle {
    tx: mpsc::Sender<peer::Datagram>,
    commands: mpsc::Sender<recording::Command>,
    /// A recording's viewer: its camera, the URL's end (where a seek may land) and its
    /// steer state.
    playback: Option<(String, Option<i64>, recording::Shown)>,
    info: Arc<SessionInfo>,
    cancel: CancellationToken,
    ufrag: String,
    addrs: Vec<SocketAddr>,
}

#[derive(Default)]
struct Peers {
    by_id: HashMap<String, PeerHandle>,
    by_ufrag: HashMap<String, String>,
    by_addr: HashMap<SocketAddr, String>,
}

impl Peers {
    fn remove(&mut self, id: &str) -> Option<PeerHandle> {
        let h = self.by_id.remove(id)?;
        self.by_ufrag.remove(&h.ufrag);
        for a in &h.addrs {
            self.by_addr.remove(a);
        }
        Some(h)
    }
}

/// The node's WebRTC egress: its socket, its peers, its offer budget.
pub struct Service {
    node: Arc<Node>,
    socket: Arc<UdpSocket>,
    local: SocketAddr,
    candidates: Vec<SocketAddr>,
    peers: Mutex<Peers>,
    offers: Mutex<crate::limits::RateLimiter>,
}

/// str0m takes its crypto (DTLS, SRTP) from a process-wide provider: RustCrypto's.
fn install_crypto() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| str0m::crypto::from_feature_flags().install_process_default());
}

impl Service {
    /// Binds `[webrtc] listen` and starts routing its datagrams. None when WebRTC is off.
    pub async fn start(node: Arc<Node>) -> std::io::Result<Option<Arc<Service>>> {
        let conf = &node.config.webrtc;
        if !conf.enabled {
            return Ok(None);
        }
        install_crypto();
        let socket = UdpSocket::bind(conf.listen).await?;
        let local = socket.local_addr()?;
        let svc = Arc::new(Service {
            candidates: conf.candidate_addrs(local.port()),
            socket: Arc::new(socket),
            local,
            peers: Mutex::default(),
            offers: Mutex::new(crate::limits::RateLimiter::new(
                conf.offers_per_sec,
                conf.offer_burst,
            )),
            node: node.clone(),
        });
        info!(udp = %local, candidates = ?svc.candidates, "WebRTC (WHEP) up");
        tokio::spawn(svc.clone().route());
        Ok(Some(svc))
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The socket task: each datagram to its peer, by the ufrag of an ICE check or by the
    /// address a check came from. Datagrams of no peer are dropped and counted.
    async fn route(self: Arc<Service>) {
        let mut buf = vec![0u8; 2048];
        loop {
            let (n, from) = tokio::select! {
                _ = self.node.shutdown.cancelled() => return,
                r = self.socket.recv_from(&mut buf) => match r {
                    Ok(x) => x,
                    // ICMP errors of earlier sends surface here: keep going.
                    Err(_) => continue,
                },
            };
            let data = buf[..n].to_vec();
            let tx = {
                let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
                let by_ufrag =
                    stun::local_ufrag(&data).and_then(|u| peers.by_ufrag.get(u).cloned());
                let id = by_ufrag
                    .clone()
                    .or_else(|| peers.by_addr.get(&from).cloned());
                if let Some(id) = &by_ufrag {
                    // str0m checks the message's integrity; an address is learnt for
                    // later packets only while the peer has room for one more.
                    if !peers.by_addr.contains_key(&from) {
                        let room = peers
                            .by_id
                            .get(id)
                            .is_some_and(|h| h.addrs.len() < PEER_ADDRS_MAX);
                        if room {
                            peers.by_addr.insert(from, id.clone());
                            if let Some(h) = peers.by_id.get_mut(id) {
                                h.addrs.push(from);
                            }
                        }
                    }
                }
                id.and_then(|id| peers.by_id.get(&id).map(|h| h.tx.clone()))
            };
            match tx {
                Some(tx) => {
                    let _ = tx.try_send(peer::Datagram { from, data });
                }
                None => Node::bump(&self.node.counters.rtp_garbage),
            }
        }
    }

    /// Answers a WHEP offer for live `camera` from `client`: the answer's SDP and the
    /// resource id the peer is known by.
    pub fn offer_live(
        self: &Arc<Service>,
        camera: &str,
        offer: &str,
        client: SocketAddr,
    ) -> Result<Answered, WhepError> {
        self.admit(client)?;
        let path = self
            .node
            .path(&format!("live/{camera}"))
            .filter(|p| p.stream.is_live())
            .ok_or_else(|| WhepError::NotLive(camera.to_string()))?;
        let info = path
            .stream
            .info()
            .ok_or_else(|| WhepError::NotLive(camera.to_string()))?;
        let codecs: Vec<HubCodec> = info.tracks.iter().map(|t| t.codec).collect();
        let tracks = carried_tracks(camera, &codecs)?;
        self.answer(
            &path.name,
            offer,
            client,
            &tracks,
            peer::Source::Live(path.stream.clone()),
        )
    }

    /// Answers a WHEP offer for a recording of `camera` (`query`: `start=…[&end=…]`, as the
    /// RTSP playback URL's): the same sender as RTSP playback, from the keyframe at or
    /// before `start`, to `end` or the recording's end.
    pub async fn offer_playback(
        self: &Arc<Service>,
        camera: &str,
        query: Option<&str>,
        offer: &str,
        client: SocketAddr,
    ) -> Result<Answered, WhepError> {
        self.admit(client)?;
        let node = &self.node;
        let req = crate::playback::request::parse(&format!("playback/{camera}"), query)
            .map_err(|e| WhepError::BadRequest(e.message))?
            .ok_or_else(|| WhepError::NoRecording(camera.to_string()))?;
        let library = self.library(camera)?;
        let (start, seg) = self
            .locate(
                &library,
                &req.camera,
                req.start_ms,
                req.end_ms,
                Opens::Counted,
            )
            .await?;
        let sdp = vigil_proto::sdp::parse(&seg.0.header.sdp)
            .map_err(|e| WhepError::Storage(e.to_string()))?;
        let codecs: Vec<HubCodec> = sdp.media.iter().map(|m| m.codec()).collect();
        let tracks = carried_tracks(camera, &codecs)?;
        let plan = recording::Plan {
            library,
            tracks: vigil_session::tracks::new_tracks(&sdp, &[]),
            template: recording::Template {
                camera: req.camera.clone(),
                cname: node.config.node.id.clone(),
                payload_max: node.config.rtsp.rtp_payload_max(),
            },
            steer: vigil_session::Steer::new(
                req.end_ms,
                node.config.playback.keyframes_only_above_scale,
            ),
            start,
            shown: Default::default(),
        };
        self.answer(
            &format!("playback/{camera}"),
            offer,
            client,
            &tracks,
            peer::Source::Recording(Box::new(plan)),
        )
    }

    fn library(&self, camera: &str) -> Result<crate::library::Library, WhepError> {
        self.node
            .library
            .clone()
            .ok_or_else(|| WhepError::NoRecording(camera.to_string()))
    }

    /// The bitrate of the recording where a playback of `camera` from `t_ms` starts — what
    /// a placement expects the playback to cost, as an RTSP DESCRIBE's — or None when
    /// nothing plays from there (the offer is then refused here, not placed).
    pub async fn start_bitrate(&self, camera: &str, t_ms: i64, end_ms: Option<i64>) -> Option<f64> {
        let library = self.library(camera).ok()?;
        let index = self.index(&library, camera).await.ok()?;
        let b = self.bounds(end_ms);
        let first =
            crate::playback::window::start_segment(&index, t_ms, b.end_ms, b.tolerance_ms).ok()?;
        Some(
            first
                .bitrate_bps()
                .unwrap_or(crate::cluster::report::DEFAULT_VBR_BPS),
        )
    }

    /// How a start is found here: `[playback] start_tolerance_secs`, `[storage]
    /// request_read_timeout_ms`.
    fn bounds(&self, end_ms: Option<i64>) -> Bounds {
        let config = &self.node.config;
        Bounds {
            end_ms,
            tolerance_ms: (config.playback.start_tolerance_secs * 1000.0) as i64,
            read_limit: Duration::from_millis(config.storage.request_read_timeout_ms),
        }
    }

    /// `camera`'s index, loaded within the request's storage bound.
    async fn index(
        &self,
        library: &crate::library::Library,
        camera: &str,
    ) -> Result<vigil_storage::CameraIndex, WhepError> {
        let limit = self.bounds(None).read_limit;
        tokio::time::timeout(limit, library.index(camera))
            .await
            .map_err(|_| WhepError::Storage("the index did not load in time".into()))?
            .map_err(|_| WhepError::NoRecording(camera.to_string()))
    }

    /// Where a recording of `camera` plays from `t_ms` (`playback::locate`, as RTSP's
    /// seek).
    async fn locate(
        &self,
        library: &crate::library::Library,
        camera: &str,
        t_ms: i64,
        end_ms: Option<i64>,
        opens: Opens,
    ) -> Result<(Cursor, Arc<crate::library::CachedSegment>), WhepError> {
        let index = self.index(library, camera).await?;
        locate(library, &index, t_ms, self.bounds(end_ms), opens)
            .await
            .map_err(|e| match e {
                LocateError::NotRecorded(_) => WhepError::NoRecording(camera.to_string()),
                LocateError::TimedOut(_) => {
                    WhepError::Storage("the segment did not load in time".into())
                }
                LocateError::Read(e) => WhepError::Storage(e.to_string()),
            })
    }

    /// Steers the recording of resource `id` (`POST /whep/resource/<id>/control`): a seek's
    /// position is found before the peer is told, so a seek to nothing changes nothing.
    pub async fn control(
        &self,
        id: &str,
        control: vigil_session::Control,
    ) -> Result<vigil_session::SteerState, WhepError> {
        let (commands, playback) = {
            let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            let h = peers.by_id.get(id).ok_or(WhepError::NoResource)?;
            (h.commands.clone(), h.playback.clone())
        };
        let (camera, end_ms, _) = playback.ok_or(WhepError::NotPlayback)?;
        let cursor = match control {
            vigil_session::Control::Seek(t) => {
                // The steer's refusal (past the URL's end) before any read.
                if let Some(end) = end_ms.filter(|e| t >= *e) {
                    return Err(vigil_session::SteerError::PastEnd {
                        at_ms: t,
                        end_ms: end,
                    }
                    .into());
                }
                let library = self.library(&camera)?;
                Some(
                    self.locate(&library, &camera, t, end_ms, Opens::Seek)
                        .await?
                        .0,
                )
            }
            _ => None,
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        commands
            .send(recording::Command {
                control,
                cursor,
                reply,
            })
            .await
            .map_err(|_| WhepError::NoResource)?;
        answer.await.map_err(|_| WhepError::NoResource)?
    }

    /// The checks every offer passes first: its address's budget, the peer limit.
    fn admit(&self, client: SocketAddr) -> Result<(), WhepError> {
        let conf = &self.node.config.webrtc;
        self.take_offer(client.ip())?;
        if self
            .peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .len()
            >= conf.max_peers
        {
            return Err(WhepError::Full(conf.max_peers));
        }
        Ok(())
    }

    /// Negotiates `offer` for `tracks`, registers the peer as a `webrtc` session of `path`
    /// and starts its task.
    fn answer(
        self: &Arc<Service>,
        path: &str,
        offer: &str,
        client: SocketAddr,
        tracks: &Carried,
        source: peer::Source,
    ) -> Result<Answered, WhepError> {
        let conf = &self.node.config.webrtc;
        let offer =
            SdpOffer::from_sdp_string(offer).map_err(|e| WhepError::BadOffer(e.to_string()))?;
        let mut rtc = Rtc::builder()
            .set_ice_lite(true)
            .set_rtp_mode(true)
            .clear_codecs()
            .enable_h264(true)
            .enable_pcmu(true, false)
            .enable_pcma(true, false)
            // Receiver reports, NACK/PLI/FIR counts and REMB into `SessionInfo::feedback`.
            .set_stats_interval(Some(Duration::from_secs(1)))
            .enable_bwe(conf.twcc.then(|| str0m::bwe::Bitrate::mbps(2)))
            .build(Instant::now());
        for addr in &self.candidates {
            let c = Candidate::host(*addr, "udp").map_err(|e| WhepError::Rtc(e.to_string()))?;
            rtc.add_local_candidate(c);
        }
        let answer = rtc
            .sdp_api()
            .accept_offer(offer)
            .map_err(|e| WhepError::BadOffer(e.to_string()))?;
        let answer = answer.to_sdp_string();
        let media = negotiated(&mut rtc, &answer, tracks)?;
        let ufrag = answer
            .lines()
            .find_map(|l| l.trim().strip_prefix("a=ice-ufrag:"))
            .map(str::to_string)
            .ok_or_else(|| WhepError::Rtc("the answer has no ice-ufrag".into()))?;
        let id = resource_id();
        let cancel = self.node.shutdown.child_token();
        let info = Arc::new(SessionInfo::new(
            id.clone(),
            path.to_string(),
            SessionKindView::WebRtc,
            client,
            cancel.clone(),
        ));
        *info.transport.lock().unwrap_or_else(|p| p.into_inner()) =
            format!("WebRTC/UDP;server={}", self.local);
        let (tx, rx) = mpsc::channel(PEER_QUEUE);
        // One control at a time: the API waits for its answer.
        let (commands, commands_rx) = mpsc::channel(1);
        let playback = match &source {
            peer::Source::Recording(plan) => Some((
                plan.template.camera.clone(),
                plan.steer.sender_window().end_ms,
                plan.shown.clone(),
            )),
            peer::Source::Live(_) => None,
        };
        {
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            peers.by_ufrag.insert(ufrag.clone(), id.clone());
            peers.by_id.insert(
                id.clone(),
                PeerHandle {
                    tx,
                    commands,
                    playback,
                    info: info.clone(),
                    cancel: cancel.clone(),
                    ufrag,
                    addrs: Vec::new(),
                },
            );
        }
        self.node.register_session(info.clone());
        let span = tracing::info_span!("webrtc", session = %id, path);
        let peer = peer::Peer {
            rtc,
            media,
            source: Some(source),
            socket: self.socket.clone(),
            local: self.local,
            rx,
            commands: commands_rx,
            info,
            cancel,
            connect_timeout: Duration::from_millis(conf.connect_timeout_ms),
        };
        let svc = self.clone();
        let ended = id.clone();
        tokio::spawn(
            async move {
                peer.run().await;
                svc.ended(&ended);
            }
            .instrument(span),
        );
        info!(session = %id, path, %client, "WHEP peer set up");
        Ok(Answered {
            id,
            sdp: answer,
            not_carried: tracks.not_carried.clone(),
        })
    }

    /// Where the recording of resource `id` is: its steer state (None for a live viewer).
    pub fn steer_state(&self, id: &str) -> Result<vigil_session::SteerState, WhepError> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let h = peers.by_id.get(id).ok_or(WhepError::NoResource)?;
        let (_, _, shown) = h.playback.as_ref().ok_or(WhepError::NotPlayback)?;
        let state = *shown.lock().unwrap_or_else(|p| p.into_inner());
        Ok(state)
    }

    /// The media time (UTC ms) of the last frame resource `id` was sent.
    pub fn position_ms(&self, id: &str) -> Option<i64> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let ms = peers
            .by_id
            .get(id)?
            .info
            .position_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        (ms > 0).then_some(ms)
    }

    /// Whether resource `id` is a peer of this node.
    pub fn exists(&self, id: &str) -> bool {
        self.peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .contains_key(id)
    }

    /// Ends a peer (the WHEP resource's DELETE).
    pub fn delete(&self, id: &str) -> Result<(), WhepError> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let h = peers.by_id.get(id).ok_or(WhepError::NoResource)?;
        h.cancel.cancel();
        Ok(())
    }

    fn ended(&self, id: &str) {
        self.peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        self.node.unregister_session(id);
        debug!(session = %id, "WHEP peer gone");
    }

    fn take_offer(&self, ip: IpAddr) -> Result<(), WhepError> {
        let mut offers = self.offers.lock().unwrap_or_else(|p| p.into_inner());
        offers.take(ip, Instant::now()).map_err(|wait| {
            crate::limits::LimitStats::bump(&self.node.limit_stats.describe_rate);
            WhepError::RateLimited(wait)
        })
    }
}

/// A WHEP offer answered: the resource, the SDP answer, and the camera's tracks the peer
/// does not get (named for the viewer: "audio AAC").
pub struct Answered {
    pub id: String,
    pub sdp: String,
    pub not_carried: Vec<String>,
}

/// The hub tracks a WebRTC viewer gets: the H.264 video (required) and a G.711 audio; the
/// others named.
pub(crate) struct Carried {
    pub video: usize,
    pub audio: Option<(usize, HubCodec)>,
    pub not_carried: Vec<String>,
}

fn carried_tracks(camera: &str, codecs: &[HubCodec]) -> Result<Carried, WhepError> {
    let video = codecs
        .iter()
        .position(|c| *c == HubCodec::H264)
        .ok_or_else(|| WhepError::Codec {
            camera: camera.to_string(),
            codec: codecs
                .iter()
                .find(|c| c.is_video())
                .map_or("without video".to_string(), |c| format!("{c:?}")),
        })?;
    let audio = codecs
        .iter()
        .enumerate()
        .find(|(_, c)| matches!(c, HubCodec::Pcmu | HubCodec::Pcma))
        .map(|(i, c)| (i, *c));
    let not_carried = codecs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != video && audio.is_none_or(|(a, _)| a != *i))
        .map(|(_, c)| {
            let kind = if c.is_video() { "video" } else { "audio" };
            format!("{kind} {}", c.name())
        })
        .collect();
    Ok(Carried {
        video,
        audio,
        not_carried,
    })
}

/// What the answer settled, per carried hub track: the mid, the payload type and the
/// sending SSRC str0m declared.
fn negotiated(
    rtc: &mut Rtc,
    answer: &str,
    tracks: &Carried,
) -> Result<Vec<peer::TrackOut>, WhepError> {
    // str0m declares a send stream per media as time first moves.
    rtc.handle_input(str0m::Input::Timeout(Instant::now()))
        .map_err(|e| WhepError::Rtc(e.to_string()))?;
    loop {
        match rtc.poll_output() {
            Ok(Output::Timeout(_)) => break,
            Ok(_) => {}
            Err(e) => return Err(WhepError::Rtc(e.to_string())),
        }
    }
    let mids = answer_mids(answer);
    let pick =
        |rtc: &mut Rtc, kind: MediaKind, want: &dyn Fn(&str0m::format::PayloadParams) -> bool| {
            mids.iter()
                .filter(|(_, k)| *k == kind)
                .find_map(|(mid, _)| {
                    let pts = rtc.media(*mid)?.remote_pts().to_vec();
                    let pt = rtc
                        .codec_config()
                        .params()
                        .iter()
                        .find(|p| pts.contains(&p.pt()) && want(p))?
                        .pt();
                    let ssrc = rtc.direct_api().stream_tx_by_mid(*mid, None)?.ssrc();
                    Some((*mid, pt, ssrc))
                })
        };
    let (mid, pt, ssrc) = pick(rtc, MediaKind::Video, &|p| {
        p.spec().codec == Codec::H264 && p.spec().format.packetization_mode == Some(1)
    })
    .ok_or(WhepError::NoVideo)?;
    let mut out = vec![peer::TrackOut::new(
        tracks.video,
        mid,
        pt,
        ssrc,
        false,
        90_000,
    )];
    if let Some((track, codec)) = tracks.audio {
        let want = if codec == HubCodec::Pcmu {
            Codec::PCMU
        } else {
            Codec::PCMA
        };
        match pick(rtc, MediaKind::Audio, &|p| p.spec().codec == want) {
            // G.711 is 8 kHz (RFC 3551).
            Some((mid, pt, ssrc)) => {
                out.push(peer::TrackOut::new(track, mid, pt, ssrc, true, 8_000))
            }
            None => warn!("the offer takes no {want:?} audio: video only"),
        }
    }
    Ok(out)
}

/// The media sections of an answer: (mid, kind), in order.
fn answer_mids(sdp: &str) -> Vec<(str0m::media::Mid, MediaKind)> {
    let mut out = Vec::new();
    let mut kind = None;
    for line in sdp.lines().map(str::trim) {
        if let Some(m) = line.strip_prefix("m=") {
            kind = match m.split_whitespace().next() {
                Some("video") => Some(MediaKind::Video),
                Some("audio") => Some(MediaKind::Audio),
                _ => None,
            };
        } else if let (Some(mid), Some(k)) = (line.strip_prefix("a=mid:"), kind) {
            out.push((str0m::media::Mid::from(mid), k));
        }
    }
    out
}

/// 128 random bits, hex: the WHEP resource's name (unguessable: it is what DELETE takes).
fn resource_id() -> String {
    use rand::RngCore;
    let mut b = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}
