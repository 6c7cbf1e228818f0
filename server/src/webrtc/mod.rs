//! WebRTC egress (issue 27): live video to browsers over WHEP, sub-second behind the
//! camera. `str0m` is the WebRTC stack (sans-IO: it never reads the clock or touches a
//! socket, so this module is its shell, as `rtsp` is `vigil-proto`'s): ICE-lite with host
//! candidates on the node's configured addresses, DTLS-SRTP, RTCP; the node's part is one
//! UDP socket shared by every peer (`stun` routes a datagram to its peer), a peer task per
//! viewer (`peer`: one more reader of the camera's hub, its packets forwarded as RTP), and
//! the HTTP resource (`admin::whep_api`).
//!
//! A recording's viewer steers it through its WHEP resource (`POST /whep/resource/<id>/control`:
//! seek, pause, resume, Scale), by the rules of `vigil_session::steer` (`playback`: the
//! recording's offer and its steering; `recording`: the sender it runs). `negotiate`: what an
//! answer carries and what str0m settled per track.
//!
//! Carried: H.264 video (packetization-mode 1, the hub's own packets, no repacketizing)
//! and G.711 audio. H.265 and AAC are refused by name (415): browsers do not all decode
//! the one and WebRTC has no payload format for the other, and this node does not
//! transcode.

mod negotiate;
pub mod peer;
mod playback;
mod recording;
mod stun;

use crate::node::{Node, SessionInfo, SessionKindView};
use negotiate::{carried_tracks, negotiated, Carried};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use str0m::change::SdpOffer;
use str0m::{Candidate, Rtc};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, Instrument};
use vigil_proto::codec::Codec as HubCodec;

/// Datagrams queued for one peer before the socket task drops them (a peer task that
/// stalls must not hold up the others).
const PEER_QUEUE: usize = 256;
/// Source addresses one peer may be reached from (its ICE candidates that checked in).
const PEER_ADDRS_MAX: usize = 8;

/// Who makes an offer: from where, the name the audit trail gives them, and the name a
/// per-user limit counts their sessions under ("" when none holds them: `[limits]
/// max_sessions_per_user` is per person, not per admin token or anonymous viewer).
#[derive(Debug, Clone, Copy)]
pub struct Viewer<'a> {
    pub client: SocketAddr,
    pub name: &'a str,
    pub limit_key: &'a str,
}

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
    #[error("this user has {0} sessions on this node ([limits] max_sessions_per_user)")]
    UserFull(usize),
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
    /// Our ICE password for this peer (the answer's `a=ice-pwd`): the key of its checks'
    /// MESSAGE-INTEGRITY.
    ice_pwd: String,
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
                    // An address is learnt for later packets only from a check that
                    // proves the peer's ICE password (the ufrag is public: it is in the
                    // answer), and only while the peer has room for one more.
                    if !peers.by_addr.contains_key(&from) {
                        let room = peers.by_id.get(id).is_some_and(|h| {
                            h.addrs.len() < PEER_ADDRS_MAX && stun::integrity_ok(&data, &h.ice_pwd)
                        });
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

    /// Answers a WHEP offer for live `camera` from `viewer`: the answer's SDP and the
    /// resource id the peer is known by.
    pub fn offer_live(
        self: &Arc<Service>,
        camera: &str,
        offer: &str,
        viewer: Viewer<'_>,
    ) -> Result<Answered, WhepError> {
        self.admit(viewer)?;
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
            viewer,
            &tracks,
            peer::Source::Live(path.stream.clone()),
        )
    }

    /// The checks every offer passes first: its address's budget, its user's sessions, the
    /// peer limit.
    fn admit(&self, viewer: Viewer<'_>) -> Result<(), WhepError> {
        let conf = &self.node.config.webrtc;
        self.take_offer(viewer.client.ip())?;
        if !self.node.user_has_room(viewer.limit_key) {
            return Err(WhepError::UserFull(
                self.node.config.limits.max_sessions_per_user,
            ));
        }
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
        viewer: Viewer<'_>,
        tracks: &Carried,
        source: peer::Source,
    ) -> Result<Answered, WhepError> {
        let client = viewer.client;
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
        let attribute = |name: &str| {
            answer
                .lines()
                .find_map(|l| l.trim().strip_prefix(name))
                .map(str::to_string)
                .ok_or_else(|| WhepError::Rtc(format!("the answer has no {name}")))
        };
        let ufrag = attribute("a=ice-ufrag:")?;
        let ice_pwd = attribute("a=ice-pwd:")?;
        let id = resource_id();
        let cancel = self.node.shutdown.child_token();
        let mut info = SessionInfo::new(
            id.clone(),
            path.to_string(),
            SessionKindView::WebRtc,
            client,
            cancel.clone(),
        );
        info.user = viewer.name.to_string();
        let info = Arc::new(info);
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
                    ice_pwd,
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

/// 128 random bits, hex: the WHEP resource's name (unguessable: it is what DELETE takes).
fn resource_id() -> String {
    use rand::RngCore;
    let mut b = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}
