//! State shared by every task of one node: the paths it serves, its sessions, its UDP ports.

pub mod command;
pub mod events;
pub mod extensions;
pub mod recordings;
pub mod writer_pool;

use crate::live::stream::{RingLimits, Stream};
use crate::net::ports::PortAllocator;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Instant, SystemTime};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use vigil_conf::{CameraConfig, Config, Source};

/// A path the node serves (`live/<camera>`), with its hub and its source.
pub struct PathEntry {
    pub name: String,
    pub stream: Arc<Stream>,
    /// Where the media comes from: changed in place when the registry re-points the camera
    /// (same kind of source; the pull reconnects into the same hub).
    source: Mutex<Source>,
    /// Listed in the config (kept when idle) rather than created by a publisher.
    pub configured: bool,
    on_demand: std::sync::atomic::AtomicBool,
    /// The session currently publishing (push sources).
    pub publisher: Mutex<Option<Publisher>>,
    /// The running pull task of an on-demand camera, if any.
    pub puller: Mutex<Option<CancellationToken>>,
    /// Last DESCRIBE of an on-demand path: keeps its pull alive until the reader arrives.
    pub last_demand: Mutex<Instant>,
    /// A recorder task runs for this path.
    pub recording: std::sync::atomic::AtomicBool,
    /// Stops this path's recorder (the registry turned its recording off, or removed it).
    pub recorder: Mutex<Option<CancellationToken>>,
    /// §B.1: an always-on pull camera disconnected for want of use (`ingest::sleep`); the
    /// next DESCRIBE wakes it. Changed under the `puller` lock.
    pub asleep: std::sync::atomic::AtomicBool,
    /// Cluster edge: the node this path relays the camera from (issue 11 §3). A relayed
    /// path is neither recorded here (the holder records) nor published to.
    pub relay_from: Mutex<Option<String>>,
}

#[derive(Clone)]
pub struct Publisher {
    pub session_id: String,
    pub cancel: CancellationToken,
}

impl PathEntry {
    pub fn publisher(&self) -> MutexGuard<'_, Option<Publisher>> {
        self.publisher.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The holder this path relays from, when this node is an edge for it.
    pub fn relay_from(&self) -> Option<String> {
        self.relay_from
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_relay_from(&self, holder: Option<String>) {
        *self.relay_from.lock().unwrap_or_else(|p| p.into_inner()) = holder;
    }

    pub fn source(&self) -> Source {
        self.source
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn is_pull(&self) -> bool {
        matches!(
            *self.source.lock().unwrap_or_else(|p| p.into_inner()),
            Source::Pull { .. }
        )
    }

    pub fn on_demand(&self) -> bool {
        self.on_demand.load(Ordering::Acquire)
    }

    /// Re-points the camera (the registry): the caller restarts its source.
    pub fn set_source(&self, source: Source, on_demand: bool) {
        *self.source.lock().unwrap_or_else(|p| p.into_inner()) = source;
        self.on_demand.store(on_demand, Ordering::Release);
    }

    /// Live here from a source of this node's own (not relayed from another node).
    pub fn is_held_live(&self) -> bool {
        self.stream.is_live() && self.relay_from().is_none()
    }

    fn new(
        name: &str,
        stream: Arc<Stream>,
        source: Source,
        configured: bool,
        on_demand: bool,
    ) -> Self {
        PathEntry {
            stream,
            name: name.to_string(),
            source: Mutex::new(source),
            configured,
            on_demand: on_demand.into(),
            publisher: Mutex::new(None),
            puller: Mutex::new(None),
            last_demand: Mutex::new(Instant::now()),
            recording: Default::default(),
            recorder: Mutex::new(None),
            relay_from: Mutex::new(None),
            asleep: Default::default(),
        }
    }
}

/// What the API shows of a session; the owning task updates the counters.
#[derive(Debug)]
pub struct SessionInfo {
    pub id: String,
    pub path: String,
    /// Who opened it (the RTSP or HTTP user; empty: nobody proven), for the audit trail.
    pub user: String,
    pub kind: SessionKindView,
    pub transport: Mutex<String>,
    pub client: SocketAddr,
    pub started: SystemTime,
    pub started_at: Instant,
    pub bytes: AtomicU64,
    pub packets: AtomicU64,
    /// Current sending rate (playback: grows with Scale), for the load model.
    pub rate_bps: AtomicU64,
    /// Playback: media time (ms since the epoch) of the last frame sent; from SETUP to the
    /// first frame, where it starts (the §A.3 "current position" the cluster gossips).
    pub position_ms: std::sync::atomic::AtomicI64,
    pub cancel: CancellationToken,
    /// The node sending this session's media when it is not this one (it migrated).
    pub media_node: Mutex<Option<String>>,
    /// On the node sending a migrated session's media: the node holding its RTSP connection.
    pub steered_by: Mutex<Option<String>>,
    /// How often the session's media moved between nodes.
    pub moves: std::sync::atomic::AtomicU32,
    /// Commands to the task that owns the session (move it, take it back).
    pub commands: Mutex<Option<tokio::sync::mpsc::Sender<command::SessionCommand>>>,
    /// What the viewer's RTCP says of its reception (a WebRTC viewer's, read by str0m).
    pub feedback: Mutex<Option<Feedback>>,
}

/// A viewer's reception as its RTCP reports it: receiver reports (round trip, loss),
/// NACK/PLI/FIR counts, and the bandwidth estimate (REMB from the receiver, or the node's
/// own from TWCC feedback).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Feedback {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<f64>,
    /// Fraction lost, 0–1, over the last reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss: Option<f32>,
    pub nacks: u64,
    pub plis: u64,
    pub firs: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate_bps: Option<u64>,
    /// `remb` or `twcc`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate_from: Option<String>,
}

impl SessionInfo {
    pub fn new(
        id: String,
        path: String,
        kind: SessionKindView,
        client: SocketAddr,
        cancel: CancellationToken,
    ) -> SessionInfo {
        SessionInfo {
            id,
            path,
            user: String::new(),
            kind,
            transport: Mutex::new(String::new()),
            client,
            started: SystemTime::now(),
            started_at: Instant::now(),
            bytes: Default::default(),
            packets: Default::default(),
            rate_bps: Default::default(),
            position_ms: Default::default(),
            cancel,
            media_node: Mutex::new(None),
            steered_by: Mutex::new(None),
            moves: Default::default(),
            commands: Mutex::new(None),
            feedback: Mutex::new(None),
        }
    }

    /// The node sending the media, when another one than this.
    pub fn media_node(&self) -> Option<String> {
        self.media_node
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn steered_by(&self) -> Option<String> {
        self.steered_by
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SessionKindView {
    Play,
    Playback,
    Record,
    /// A live viewer over WebRTC (WHEP).
    WebRtc,
}

/// The camera a media path names: `live/<camera>[/…]`, `playback/<camera>[/…]`; any other
/// path is named whole (only a `*` rights pattern matches it). The one place this is read.
pub fn camera_of_path(path: &str) -> &str {
    let path = path.trim_start_matches('/');
    match path.split_once('/') {
        Some(("live" | "playback", rest)) => rest.split('/').next().unwrap_or(rest),
        _ => path,
    }
}

/// Node-wide counters that are not per session (also exported to `/metrics`).
#[derive(Debug, Default)]
pub struct Counters {
    pub rtsp_connections: AtomicU64,
    pub rtsp_bad_requests: AtomicU64,
    pub rtp_garbage: AtomicU64,
    pub slow_readers_dropped: AtomicU64,
    pub reader_skips: AtomicU64,
    pub sessions_timed_out: AtomicU64,
    pub sessions_rejected: AtomicU64,
    /// Sessions created by a first SETUP (every kind): with `sessions_rejected` and
    /// `placements_rejected`, what an experiment's clients can check their own counts
    /// against.
    pub sessions_opened: AtomicU64,
    /// DESCRIBEs answered 503 because the placement policy found no node for them.
    pub placements_rejected: AtomicU64,
    /// Publishers' connections handed to the ingest runtime after their RECORD.
    pub connections_to_ingest: AtomicU64,
}

pub struct Node {
    pub config: Config,
    /// The cameras this node serves, by id: `[[camera]]`, or the registry's version in
    /// force (replaced whole when a new one is applied; disabled ones listed, not served).
    cameras: RwLock<Arc<BTreeMap<String, CameraConfig>>>,
    paths: Mutex<HashMap<String, Arc<PathEntry>>>,
    sessions: Mutex<HashMap<String, Arc<SessionInfo>>>,
    pub ports: PortAllocator,
    pub counters: Counters,
    pub shutdown: CancellationToken,
    /// Recording state per camera (for the API and metrics).
    pub recordings: Arc<recordings::Recordings>,
    /// Recordings and the playback cache; None when recording is disabled.
    pub library: Option<crate::library::Library>,
    /// The audit trail (sessions are written to it as they start and end); None when off.
    pub audit: Option<Arc<crate::audit::Audit>>,
    /// Every task that must finish its goodbye (RTCP BYE) before the process exits.
    pub tasks: TaskTracker,
    pub started: Instant,
    /// Per-node state of the modules above the node, which it holds without naming (the
    /// migration's heartbeat to the nodes sending sessions steered from here, started on
    /// the first move).
    pub extensions: extensions::Extensions,
    /// RTSP users, rights and login state (`[auth]`; reloaded on SIGHUP).
    pub auth: crate::auth::Auth,
    /// DESCRIBEs per client address (`[limits] describes_per_sec`, `describe_burst`).
    pub describes: Mutex<crate::limits::RateLimiter>,
    /// Open RTSP connections, in total and per address.
    pub connections: Arc<crate::limits::Connections>,
    /// Open admin API connections, in total and per address (`admin::listener`).
    pub http_connections: Arc<crate::limits::Connections>,
    /// Refusals by `[limits]`.
    pub limit_stats: crate::limits::LimitStats,
    /// Wakes whoever reports the node's state (the cluster's report task) on a significant
    /// change. The node owns it so that it needs to know nothing of its listeners: the
    /// modules above it learn of changes from here rather than being called by name.
    changed: tokio::sync::Notify,
    /// The TLS client config of `rtsps://` pulls, made on the first one (see `tls_client`).
    tls_client: std::sync::OnceLock<Arc<rustls::ClientConfig>>,
    /// What happened, for whoever listens (webhooks): see `events`.
    pub events: events::Bus,
    /// The runtime that receives and records cameras' media (`[rtsp] ingest_runtime`);
    /// unset: everything runs on the runtime of the caller.
    ingest: std::sync::OnceLock<tokio::runtime::Handle>,
}

impl Node {
    /// Gives the node the runtime that receives cameras' media (once; `serve` builds it).
    pub fn set_ingest_runtime(&self, handle: tokio::runtime::Handle) {
        let _ = self.ingest.set(handle);
    }

    /// The runtime of cameras' media, when it is not the caller's.
    pub fn ingest_runtime(&self) -> Option<&tokio::runtime::Handle> {
        self.ingest.get()
    }

    /// Spawns a camera's receiving or recording task, tracked like every node task, on the
    /// ingest runtime when there is one: a thousand cameras' tasks, each woken per packet
    /// or frame, would otherwise fill the queue that requests and viewers wait in.
    pub fn spawn_ingest<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self.ingest.get() {
            Some(h) => self.tasks.spawn_on(task, h),
            None => self.tasks.spawn(task),
        }
    }

    /// The TLS client config for `rtsps://` pulls (`[tls] client_ca`, else the system's
    /// CAs), read on the first pull that needs it; a failure is not kept, so a CA file
    /// fixed on disk is taken on the next attempt.
    pub fn tls_client(
        &self,
    ) -> Result<Arc<rustls::ClientConfig>, crate::net::tls_client::TlsClientError> {
        if let Some(c) = self.tls_client.get() {
            return Ok(c.clone());
        }
        let made = crate::net::tls_client::client_config(self.config.tls.client_ca.as_deref())?;
        Ok(self.tls_client.get_or_init(|| made).clone())
    }

    pub fn new(
        config: Config,
        library: Option<crate::library::Library>,
        audit: Option<Arc<crate::audit::Audit>>,
    ) -> Arc<Node> {
        let ports = PortAllocator::new(config.rtsp.udp_port_min, config.rtsp.udp_port_max);
        let cameras = config
            .cameras
            .iter()
            .map(|c| (c.id.clone(), c.clone()))
            .collect();
        let node = Node {
            cameras: RwLock::new(Arc::new(cameras)),
            paths: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            ports,
            counters: Counters::default(),
            shutdown: CancellationToken::new(),
            recordings: Default::default(),
            library,
            audit,
            tasks: TaskTracker::new(),
            started: Instant::now(),
            extensions: Default::default(),
            auth: {
                let auth = crate::auth::Auth::new(config.auth.as_ref());
                auth.set_config_tokens(&config.http.api_tokens);
                auth
            },
            describes: Mutex::new(crate::limits::RateLimiter::new(
                config.limits.describes_per_sec,
                config.limits.describe_burst,
            )),
            connections: Default::default(),
            http_connections: Default::default(),
            limit_stats: Default::default(),
            changed: tokio::sync::Notify::new(),
            tls_client: std::sync::OnceLock::new(),
            events: events::Bus::new(config.webhooks.queue),
            ingest: std::sync::OnceLock::new(),
            config,
        };
        for cam in node.config.cameras.iter().filter(|c| c.enabled) {
            node.add_camera_path(cam);
        }
        node.store_camera_settings();
        Arc::new(node)
    }

    /// Every camera this node knows (enabled or not), by id.
    pub fn cameras(&self) -> Arc<BTreeMap<String, CameraConfig>> {
        self.cameras
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn camera(&self, id: &str) -> Option<CameraConfig> {
        self.cameras().get(id).cloned()
    }

    /// The registry's new version of the cameras (its actions are applied by the caller).
    pub fn set_cameras(&self, cameras: Arc<BTreeMap<String, CameraConfig>>) {
        *self.cameras.write().unwrap_or_else(|p| p.into_inner()) = cameras;
        self.store_camera_settings();
    }

    /// The cameras' own segment length and retention, handed to the store (its sweep and
    /// the recorders started from now on use them).
    fn store_camera_settings(&self) {
        let Some(library) = &self.library else {
            return;
        };
        let secs = |s: f64| std::time::Duration::try_from_secs_f64(s).ok();
        let settings = self
            .cameras()
            .values()
            .filter(|c| c.segment_secs.is_some() || c.retention_hours.is_some())
            .map(|c| {
                let s = vigil_storage::CameraSettings {
                    segment_duration: c.segment_secs.and_then(secs),
                    // 0 hours: kept whatever the node-wide age limit (as
                    // `retention_max_age_hours = 0` keeps everything).
                    retention_max_age: c
                        .retention_hours
                        .map(|h| (h > 0.0).then(|| secs(h * 3600.0)).flatten()),
                };
                (c.id.clone(), s)
            })
            .collect();
        library.store.set_camera_settings(settings);
    }

    /// The path of a listed camera, created (or, over an unlisted push path of the same
    /// name, taking its hub and publisher over, so a publisher that came first goes on).
    pub fn add_camera_path(&self, cam: &CameraConfig) -> Arc<PathEntry> {
        let name = format!("live/{}", cam.id);
        let mut paths = self.paths_mut();
        if let Some(p) = paths.get(&name).filter(|p| p.configured) {
            return p.clone();
        }
        let (stream, publisher) = match paths.get(&name) {
            Some(p) => (p.stream.clone(), p.publisher().clone()),
            None => (
                Arc::new(Stream::new(
                    name.clone(),
                    RingLimits::from_config(&self.config.live),
                )),
                None,
            ),
        };
        let entry = PathEntry::new(&name, stream, cam.source.clone(), true, cam.on_demand);
        *entry.publisher() = publisher;
        let entry = Arc::new(entry);
        paths.insert(name, entry.clone());
        entry
    }

    /// Takes a camera's path out (the registry removed or disabled it): new requests for it
    /// find nothing; the caller ends its source, viewers and recorder.
    pub fn remove_path(&self, name: &str) -> Option<Arc<PathEntry>> {
        self.paths_mut().remove(name)
    }

    fn paths_mut(&self) -> MutexGuard<'_, HashMap<String, Arc<PathEntry>>> {
        self.paths.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sessions_mut(&self) -> MutexGuard<'_, HashMap<String, Arc<SessionInfo>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn path(&self, name: &str) -> Option<Arc<PathEntry>> {
        self.paths_mut().get(name).cloned()
    }

    pub fn paths(&self) -> Vec<Arc<PathEntry>> {
        let mut v: Vec<_> = self.paths_mut().values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The path a publisher may push to: configured push paths, and any other `live/<id>`
    /// (an unlisted camera can publish; listing is documentation, not a gate).
    pub fn path_for_publish(&self, name: &str) -> Option<Arc<PathEntry>> {
        let mut paths = self.paths_mut();
        if let Some(p) = paths.get(name) {
            return (p.source() == Source::Push && p.relay_from().is_none()).then(|| p.clone());
        }
        self.new_dynamic_path(&mut paths, name)
    }

    /// The path an edge relays `name` into: the configured one, or a new unlisted one.
    /// None when the camera is held here (a publisher or a running pull of this node's).
    pub fn path_for_relay(&self, name: &str) -> Option<Arc<PathEntry>> {
        let mut paths = self.paths_mut();
        if let Some(p) = paths.get(name) {
            let own_source = p.publisher().is_some()
                || (p.puller.lock().unwrap_or_else(|e| e.into_inner()).is_some()
                    && p.relay_from().is_none())
                || p.source() == Source::Demo;
            return (!own_source).then(|| p.clone());
        }
        self.new_dynamic_path(&mut paths, name)
    }

    fn new_dynamic_path(
        &self,
        paths: &mut HashMap<String, Arc<PathEntry>>,
        name: &str,
    ) -> Option<Arc<PathEntry>> {
        let id = name.strip_prefix("live/")?;
        // A camera the registry lists as disabled is not served in any form: no
        // publisher, no relay.
        if !vigil_conf::is_valid_camera_id(id) || self.camera(id).is_some_and(|c| !c.enabled) {
            return None;
        }
        let stream = Arc::new(Stream::new(
            name,
            RingLimits::from_config(&self.config.live),
        ));
        let entry = Arc::new(PathEntry::new(name, stream, Source::Push, false, false));
        paths.insert(name.to_string(), entry.clone());
        Some(entry)
    }

    /// Forget an unlisted push path once nobody publishes or reads it, so arbitrary path
    /// names from publishers do not accumulate.
    pub fn release_path(&self, name: &str) {
        let mut paths = self.paths_mut();
        if let Some(p) = paths.get(name) {
            if !p.configured
                && p.publisher().is_none()
                && p.relay_from().is_none()
                && p.stream.readers.load(Ordering::Acquire) == 0
            {
                paths.remove(name);
            }
        }
    }

    pub fn session_count(&self) -> usize {
        self.sessions_mut().len()
    }

    /// Sessions whose client is at `ip`.
    /// Sessions from `ip`'s client key (`limits::client_key`: an IPv6 /64 as one).
    /// Sessions of viewers from `ip` (its /64 for IPv6) who proved no user: what
    /// `[limits] max_sessions_per_address` holds.
    pub fn sessions_from(&self, ip: std::net::IpAddr) -> usize {
        let key = crate::limits::client_key(ip);
        self.sessions_mut()
            .values()
            .filter(|s| s.user.is_empty() && crate::limits::client_key(s.client.ip()) == key)
            .count()
    }

    /// Whether `user` (a proven user; "" is nobody) may start one more session here:
    /// `[limits] max_sessions_per_user`, counted over RTSP and WebRTC. A refusal is counted.
    pub fn user_has_room(&self, user: &str) -> bool {
        if user.is_empty() {
            return true;
        }
        let n = self
            .sessions_mut()
            .values()
            .filter(|s| s.user == user)
            .count();
        let room = n < self.config.limits.max_sessions_per_user;
        if !room {
            crate::limits::LimitStats::bump(&self.limit_stats.sessions_per_user);
        }
        room
    }

    pub fn register_session(&self, info: Arc<SessionInfo>) {
        self.audit_session(&info, true);
        self.sessions_mut().insert(info.id.clone(), info);
        self.notify_change();
    }

    pub fn unregister_session(&self, id: &str) {
        let gone = self.sessions_mut().remove(id);
        if let Some(s) = gone {
            self.audit_session(&s, false);
        }
        self.notify_change();
    }

    /// Whether a new session may start as far as the audit trail goes: no, only while the
    /// trail is down and `[audit] required = true`.
    pub fn audit_admits(&self) -> bool {
        self.audit.as_ref().is_none_or(|a| a.admits())
    }

    /// A session's start or end in the audit trail: who, from where, which camera, how; at
    /// the end how long, how many bytes, and for a playback the recording time it reached.
    fn audit_session(&self, s: &SessionInfo, start: bool) {
        let Some(audit) = &self.audit else {
            return;
        };
        let playback = s.kind == SessionKindView::Playback || s.path.starts_with("playback/");
        let what = match s.kind {
            SessionKindView::Record => "publish",
            _ if playback => "playback",
            _ => "live",
        };
        let mut detail = serde_json::Map::new();
        detail.insert("session".into(), s.id.clone().into());
        let position = s.position_ms.load(Ordering::Relaxed);
        if !start {
            detail.insert("bytes".into(), s.bytes.load(Ordering::Relaxed).into());
            let ms = u64::try_from(s.started_at.elapsed().as_millis()).unwrap_or(u64::MAX);
            detail.insert("duration_ms".into(), ms.into());
        }
        let user = if s.user.is_empty() {
            "anonymous"
        } else {
            &s.user
        };
        audit.record(crate::audit::Event {
            at_ms: vigil_storage::now_ms(),
            kind: format!("{what}.{}", if start { "start" } else { "stop" }),
            user: user.to_string(),
            client: s.client.to_string(),
            camera: Some(camera_of_path(&s.path).to_string()),
            protocol: Some(
                if s.kind == SessionKindView::WebRtc {
                    "webrtc"
                } else {
                    "rtsp"
                }
                .into(),
            ),
            from_ms: (playback && start && position > 0).then_some(position),
            to_ms: (playback && !start && position > 0).then_some(position),
            detail,
        });
    }

    pub fn session(&self, id: &str) -> Option<Arc<SessionInfo>> {
        self.sessions_mut().get(id).cloned()
    }

    pub fn sessions(&self) -> Vec<Arc<SessionInfo>> {
        let mut v: Vec<_> = self.sessions_mut().values().cloned().collect();
        v.sort_by_key(|s| s.started_at);
        v
    }

    /// A significant change (a session started, ended, moved or changed its rate; the node
    /// began or stopped draining): the report is to go out at once. One permit is kept
    /// (`notify_one`), so a change made while the listener is busy is not lost, and a burst
    /// of them wakes it once.
    pub fn notify_change(&self) {
        self.changed.notify_one();
    }

    /// Completes at the next [`Node::notify_change`] (or at once for one made since the
    /// last wait).
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
