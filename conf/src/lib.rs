//! Typed configuration of a vigil node.
//!
//! The file format is TOML; `conf/vigil.toml` is the shipped, commented example and is
//! parsed by a test so it cannot drift from these types. Every field has a default, so an
//! empty file (or no file at all) gives a working single node; unknown keys are rejected so
//! a typo never silently falls back to a default.

mod audit;
mod auth;
mod camera;
mod cluster;
mod onvif;
mod recording;
mod registry;
mod tls;
mod webhook;
mod webrtc;

pub use audit::AuditConfig;
pub use auth::{
    check_token, check_user, AuthConfig, DigestAlgorithm, Rights, TokenConfig, TokenFieldError,
    UserConfig, UserFieldError,
};
pub use camera::{
    check_camera, check_camera_id, is_valid_camera_id, CameraConfig, CameraFieldError,
    PullTransport, Source,
};
pub use cluster::fingerprint_hex;
pub use cluster::{ClusterConf, SourceMode};
pub use onvif::OnvifConfig;
pub use recording::{
    check_cache_start_share, CacheConfig, CommitSync, ExportConfig, HlsConfig, PlaybackConfig,
    RecordMode, StorageConfig, StorageEmulation, WriterIoClass, DEFAULT_CACHE_START_SHARE,
    DEFAULT_COMMIT_INTERVAL_MS,
};
pub use registry::{RegistryConfig, SecretKeySource};
pub use tls::{SrtpMode, TlsConfig};
pub use webhook::{Secret, WebhookConfig, WEBHOOK_EVENTS};
pub use webrtc::WebRtcConfig;

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;
use thiserror::Error;

/// The example configuration shipped with the project (`conf/vigil.toml`).
pub const EXAMPLE: &str = include_str!("../vigil.toml");

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid config: {0}")]
    Parse(#[from] toml::de::Error),
    #[error("invalid config: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub node: NodeConfig,
    pub rtsp: RtspConfig,
    pub http: HttpConfig,
    pub live: LiveConfig,
    pub limits: Limits,
    pub storage: StorageConfig,
    pub cache: CacheConfig,
    pub playback: PlaybackConfig,
    /// Evidence export to MP4 (`GET /api/export/<camera>`).
    pub export: ExportConfig,
    /// HLS (fMP4) of live cameras and recordings at `/hls/…` on the HTTP server.
    pub hls: HlsConfig,
    /// The certificate of the TLS listeners (`[rtsp] tls_listen`, `[http] tls_listen`).
    pub tls: TlsConfig,
    /// WHEP: live video to browsers over WebRTC (`POST /whep/live/<camera>`).
    pub webrtc: WebRtcConfig,
    /// Clustering (gossip membership, scheduler election, placement by redirect). Off unless
    /// `[cluster] enabled = true`.
    pub cluster: ClusterConf,
    /// RTSP users and rights. Absent: no authentication (loopback demo use only; a node
    /// listening beyond loopback without it warns loudly at start).
    pub auth: Option<AuthConfig>,
    /// Cameras and users kept on the shared storage root and changed at runtime.
    pub registry: RegistryConfig,
    /// ONVIF onboarding and discovery (timeouts, the discovery interface).
    pub onvif: OnvifConfig,
    /// Signed JSON events posted to operators' receivers (none unless `urls` are given).
    pub webhooks: WebhookConfig,
    /// The audit trail of every access to video and every change, on the storage root.
    pub audit: AuditConfig,
    /// Cameras known to this node. With no config file at all, the node serves the bundled
    /// demo clip as `live/demo` (see [`Config::embedded_default`]).
    #[serde(rename = "camera")]
    pub cameras: Vec<CameraConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// Node name used in logs, SDP origin and RTCP CNAME, and the node's identity in a
    /// cluster, where it must be unique. Default: [`default_node_id`].
    pub id: String,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            id: default_node_id(),
        }
    }
}

/// The node id when the config names none: this machine's host name, so that each machine
/// of a cluster has its own without configuring it (a fixed default made every unconfigured
/// member the same node to the cluster). Nodes sharing one machine need ids of their own.
/// `vigil-1` when the host name is empty or holds characters that do not belong in an SDP
/// origin or RTCP CNAME.
pub fn default_node_id() -> String {
    node_id_from_host(&gethostname::gethostname().to_string_lossy())
}

fn node_id_from_host(host: &str) -> String {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if host.is_empty() || host.len() > 64 || !host.chars().all(ok) {
        "vigil-1".into()
    } else {
        host.into()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RtspConfig {
    /// Plain RTSP (TCP). Beyond loopback only with `allow_plaintext = true`.
    pub listen: SocketAddr,
    /// RTSPS (RTSP over TLS, RTP interleaved inside it; `[tls]` gives the certificate).
    pub tls_listen: Option<SocketAddr>,
    /// Accept clear-text RTSP on a `listen` beyond loopback (video and passwords readable
    /// on the wire).
    pub allow_plaintext: bool,
    /// Inclusive range of UDP ports for RTP/RTCP pairs (RTP even, RTCP the next odd port).
    pub udp_port_min: u16,
    pub udp_port_max: u16,
    /// Every live UDP viewer's media leaves from one server port pair (the range's first
    /// free pair on each local address), as MediaMTX's and GStreamer's do: one socket and
    /// one `sendmmsg` per frame for all viewers of a stream instead of one per viewer.
    /// Off: a pair per session, as publishers and playbacks always have.
    pub udp_shared_ports: bool,
    /// What happens when a second publisher ANNOUNCEs a path that is already live.
    pub publisher_conflict: PublisherConflict,
    /// The IP MTU of the viewers' paths (bytes): every RTP packet this node makes (playback,
    /// the demo camera) fits it as one IPv4 or IPv6 datagram — see [`RtspConfig::rtp_payload_max`].
    /// A camera's packets are relayed as the camera sized them.
    pub mtu: usize,
    /// Receive and record cameras' media (publishers once they RECORD over TCP, pulled
    /// cameras, recorders) on a runtime of their own, apart from the one that answers RTSP
    /// requests and serves viewers: with a thousand cameras that runtime's queue holds
    /// hundreds of ready tasks, and a viewer's request waited behind them.
    pub ingest_runtime: bool,
    /// Threads of that runtime (0 = one per core).
    pub ingest_threads: usize,
}

impl RtspConfig {
    /// IPv6 (40) + UDP (8) + RTP (12) header bytes: what an RTP packet's datagram adds to its
    /// payload at most (no CSRCs or header extensions are sent).
    pub const DATAGRAM_OVERHEAD: usize = 60;

    /// Payload bytes per RTP packet: the MTU less [`RtspConfig::DATAGRAM_OVERHEAD`]
    /// (1340 for the default 1400, which fits a VPN or PPPoE link as well as Ethernet).
    pub fn rtp_payload_max(&self) -> usize {
        self.mtu.saturating_sub(Self::DATAGRAM_OVERHEAD)
    }
}

impl Default for RtspConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8554)),
            tls_listen: None,
            allow_plaintext: false,
            udp_port_min: 20000,
            udp_port_max: 29999,
            udp_shared_ports: true,
            publisher_conflict: PublisherConflict::Refuse,
            mtu: 1400,
            ingest_runtime: true,
            ingest_threads: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PublisherConflict {
    /// Answer the second ANNOUNCE with 455 and keep the first publisher.
    Refuse,
    /// Disconnect the first publisher; readers continue on the new one.
    Takeover,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Admin API, console, HLS, export and `/metrics` over plain HTTP. Beyond loopback only
    /// with `allow_plaintext = true`.
    pub listen: SocketAddr,
    /// The same over HTTPS (`[tls]` gives the certificate); its answers carry HSTS.
    pub tls_listen: Option<SocketAddr>,
    /// Accept clear-text HTTP on a `listen` beyond loopback (the admin token readable on
    /// the wire).
    pub allow_plaintext: bool,
    /// `Strict-Transport-Security: max-age` on HTTPS answers (seconds; 0: no header).
    pub hsts_max_age_secs: u64,
    /// Bearer token of the admin API: every route. Once it (or an `[auth]` user) exists,
    /// nothing is granted by place; only a node with neither answers reads to a local
    /// request (the plain `listen` on loopback, a loopback peer and `Host`). Empty: read
    /// from `token_file`.
    pub token: Secret,
    /// A file holding the token (first line), so it need not sit in the config.
    pub token_file: Option<std::path::PathBuf>,
    /// How often the web console re-reads the shown tab (ms); each open console makes 1–3
    /// small API reads per period.
    pub console_refresh_ms: u64,
    /// Load points the console's chart keeps per node (× `console_refresh_ms` = its width).
    pub console_history: u32,
    /// Open connections to the API, in total and per client address; past either a new
    /// connection is closed at once (and counted in `vigil_limit_refusals_total`).
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// A request's head must arrive within this, on a new connection and between the
    /// requests of a kept-alive one; else the connection is closed (slowloris, idle sockets).
    pub header_read_timeout_ms: u64,
    /// A response the client takes nothing of for this long (an export or HLS segment it
    /// stopped reading) ends its connection, and with it the work behind the response.
    pub write_timeout_ms: u64,
    /// A request's body must arrive whole within this after its head (a body trickled a
    /// byte at a time would otherwise hold a connection and its buffer for ever); else 408
    /// and the connection is closed.
    pub body_read_timeout_ms: u64,
    /// A console sign-in session ends after this long without a request…
    pub session_idle_secs: u64,
    /// …and this long after sign-in, whatever its use.
    pub session_max_secs: u64,
    /// API tokens of this node (`[[http.api_token]]`: name, SHA-256 of the secret, rights,
    /// expiry), beside the registry's cluster-wide ones. `vigil token add` writes one.
    #[serde(rename = "api_token")]
    pub api_tokens: Vec<TokenConfig>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            tls_listen: None,
            allow_plaintext: false,
            hsts_max_age_secs: 31_536_000,
            token: Secret::default(),
            token_file: None,
            console_refresh_ms: 2000,
            console_history: 150,
            max_connections: 512,
            max_connections_per_address: 64,
            header_read_timeout_ms: 10_000,
            write_timeout_ms: 30_000,
            body_read_timeout_ms: 10_000,
            session_idle_secs: 1800,
            session_max_secs: 43_200,
            api_tokens: Vec::new(),
        }
    }
}

/// The shortest admin token accepted: 16 characters (e.g. `openssl rand -hex 16` gives 32),
/// so it cannot be guessed at HTTP speed.
pub const TOKEN_MIN_LEN: usize = 16;

impl HttpConfig {
    /// The configured token (from `token` or `token_file`), if any; one shorter than
    /// [`TOKEN_MIN_LEN`] is an error.
    pub fn token(&self) -> Result<Option<String>, ConfigError> {
        let token = inline_or_file(self.token.expose(), self.token_file.as_deref())?;
        if token
            .as_ref()
            .is_some_and(|t| t.chars().count() < TOKEN_MIN_LEN)
        {
            return Err(ConfigError::Invalid(format!(
                "http.token must be at least {TOKEN_MIN_LEN} characters (e.g. `openssl rand -hex 16`)"
            )));
        }
        Ok(token)
    }
}

/// A secret given in the file (`value`) or as the first line of another file (`file`), so
/// it can stay out of a config file others read; None when neither gives one.
pub(crate) fn inline_or_file(
    value: &str,
    file: Option<&Path>,
) -> Result<Option<String>, ConfigError> {
    if !value.is_empty() {
        return Ok(Some(value.to_string()));
    }
    let Some(path) = file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let line = text.lines().next().unwrap_or("").trim().to_string();
    Ok((!line.is_empty()).then_some(line))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LiveConfig {
    /// KiB each path keeps for its readers (payload and per-packet bookkeeping). A reader
    /// that falls further behind skips ahead to the newest keyframe. The GOP in progress is
    /// kept even when larger, so a new viewer always starts on its keyframe.
    pub ring_kb: u64,
    /// A GOP in progress past this many KiB gives its keyframe up (a camera with a very long
    /// or no keyframe interval): the ring falls back to `ring_kb` and new viewers wait for the
    /// next keyframe.
    pub ring_gop_max_kb: u64,
    /// KiB each path may keep for a consumer that must not lose packets (the camera's
    /// recorder, its live HLS segmenter) while it is behind: a recorder that waited for a
    /// core while its camera sent a burst keeps what it has not read, up to this much, where
    /// a viewer would skip ahead at `ring_kb`. Costs memory only while a recorder is behind.
    pub ring_recorder_max_kb: u64,
    /// A reader whose socket has not accepted data for this long is disconnected.
    pub slow_reader_timeout_ms: u64,
    /// How long an on-demand pull camera stays connected after its last reader left.
    pub on_demand_grace_ms: u64,
    /// Reconnect backoff of pull cameras: first delay and cap.
    pub reconnect_min_ms: u64,
    pub reconnect_max_ms: u64,
}

impl Default for LiveConfig {
    fn default() -> Self {
        Self {
            ring_kb: 512,
            ring_gop_max_kb: 8192,
            ring_recorder_max_kb: 2048,
            slow_reader_timeout_ms: 5000,
            on_demand_grace_ms: 10_000,
            reconnect_min_ms: 500,
            reconnect_max_ms: 30_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// RTSP sessions (publishers and readers) on this node; past it, SETUP gets 503.
    pub max_sessions: usize,
    /// Readers of one path; past it, SETUP gets 503.
    pub max_readers_per_path: usize,
    /// Seconds without an RTSP request or RTCP packet before a session is closed.
    pub session_timeout_secs: u32,
    /// DESCRIBEs per second from one client address (token bucket), and the burst allowed:
    /// past it, 503 with Retry-After. Keeps one client from steering cluster placement or
    /// probing cameras at speed.
    pub describes_per_sec: f64,
    pub describe_burst: u32,
    /// Open RTSP connections on this node; past it new ones are closed at once.
    pub max_connections: usize,
    /// Open RTSP connections from one client address.
    pub max_connections_per_address: usize,
    /// RTSP sessions from one client address of viewers and cameras who proved no user (an
    /// open node's, `[auth] anonymous`'s); past it, SETUP gets 503. A sixteenth of
    /// `max_sessions` by default: a few addresses cannot fill a node. A proven user is
    /// held by `max_sessions_per_user` instead, from any address: a VMS recording a
    /// thousand cameras, or a control room behind one NAT, are users, not an address.
    pub max_sessions_per_address: usize,
    /// RTSP and WebRTC sessions of one logged-in user, on this node (a control room's
    /// video wall is a few dozen); past it, SETUP and a WHEP offer get 503. Viewers who
    /// proved no user are held by the per-address limit. A limit per user holds where one
    /// per address cannot: many users behind one NAT, one user from many addresses.
    pub max_sessions_per_user: usize,
    /// Requests per second on one connection (burst: twice as many); past it, 503.
    pub requests_per_sec: f64,
    /// A request (or interleaved frame) must arrive whole within this long after its first
    /// byte, and a new connection must complete its first request within it (slowloris).
    pub request_deadline_ms: u64,
    /// A publisher's ANNOUNCE holds its camera's publisher slot until RECORD for at most
    /// this long; then the slot is freed and the connection closed (an ANNOUNCE kept alive
    /// by OPTIONS cannot keep a camera from publishing).
    pub announce_timeout_ms: u64,
    /// Tracks a publisher's SDP may declare; more is refused (400) at ANNOUNCE — each track
    /// takes a SETUP and, over UDP, a port pair.
    pub max_publish_tracks: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_sessions: 4000,
            max_readers_per_path: 2000,
            session_timeout_secs: 60,
            // A recording server or VMS may open a few hundred cameras at once from one
            // address; a flood beyond that is refused, and what gets through lapses
            // (`[cluster] reservation_ms`).
            describes_per_sec: 50.0,
            describe_burst: 500,
            max_connections: 10_000,
            max_connections_per_address: 1000,
            max_sessions_per_address: 250,
            max_sessions_per_user: 256,
            requests_per_sec: 50.0,
            request_deadline_ms: 10_000,
            announce_timeout_ms: 10_000,
            max_publish_tracks: 16,
        }
    }
}

impl Config {
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text)?;
        config.cluster.read_key_file()?;
        config.validate()?;
        Ok(config)
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text)
    }

    /// Which cameras are recorded: `[storage] record`, else "listed" when `[auth]` is on
    /// (an unknown publisher must not fill the shared storage) and "all" otherwise.
    pub fn record_mode(&self) -> RecordMode {
        self.storage.record.unwrap_or(if self.auth.is_some() {
            RecordMode::Listed
        } else {
            RecordMode::All
        })
    }

    /// What `vigil serve` runs with no `--config`: defaults plus the demo camera, so a
    /// newcomer's first `ffplay rtsp://127.0.0.1:8554/live/demo` plays at once.
    pub fn embedded_default() -> Config {
        Config {
            // Open (no [auth]): loopback only, as every listener is by default.
            cameras: vec![CameraConfig {
                on_demand: false,
                ..CameraConfig::new("demo", Source::Demo)
            }],
            // The demo records into ./data: keep a newcomer's disk from filling up.
            storage: StorageConfig {
                retention_max_bytes: 1 << 30,
                ..StorageConfig::default()
            },
            ..Config::default()
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.cache.validate()?;
        self.webrtc.validate()?;
        let r = &self.rtsp;
        if r.udp_port_min > r.udp_port_max || r.udp_port_max - r.udp_port_min < 1 {
            return Err(ConfigError::Invalid(format!(
                "rtsp.udp_port_min..udp_port_max ({}..{}) must hold at least one port pair",
                r.udp_port_min, r.udp_port_max
            )));
        }
        if r.ingest_threads > 1024 {
            return Err(ConfigError::Invalid(format!(
                "rtsp.ingest_threads = {} is above 1024",
                r.ingest_threads
            )));
        }
        if !(576..=9216).contains(&r.mtu) {
            return Err(ConfigError::Invalid(format!(
                "rtsp.mtu = {} is outside 576..=9216 (the IP MTU of the viewers' paths, bytes)",
                r.mtu
            )));
        }
        if self.limits.session_timeout_secs == 0 {
            return Err(ConfigError::Invalid(
                "limits.session_timeout_secs must be at least 1".into(),
            ));
        }
        let l = &self.limits;
        for (name, v) in [
            ("describes_per_sec", l.describes_per_sec),
            ("requests_per_sec", l.requests_per_sec),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(ConfigError::Invalid(format!(
                    "limits.{name} must be a positive number"
                )));
            }
        }
        if l.request_deadline_ms < 100 || l.announce_timeout_ms < 100 {
            return Err(ConfigError::Invalid(
                "limits.request_deadline_ms and limits.announce_timeout_ms must be at least 100"
                    .into(),
            ));
        }
        if l.max_sessions_per_user == 0 {
            return Err(ConfigError::Invalid(
                "limits.max_sessions_per_user must be at least 1".into(),
            ));
        }
        if !(1..=64).contains(&l.max_publish_tracks) {
            return Err(ConfigError::Invalid(
                "limits.max_publish_tracks must be 1–64".into(),
            ));
        }
        if !(500..=60_000).contains(&self.http.console_refresh_ms)
            || !(10..=10_000).contains(&self.http.console_history)
        {
            return Err(ConfigError::Invalid(
                "http.console_refresh_ms must be 500–60000 and http.console_history 10–10000"
                    .into(),
            ));
        }
        let h = &self.http;
        if h.max_connections == 0
            || h.max_connections_per_address == 0
            || !(100..=600_000).contains(&h.header_read_timeout_ms)
            || !(100..=600_000).contains(&h.write_timeout_ms)
            || !(100..=600_000).contains(&h.body_read_timeout_ms)
        {
            return Err(ConfigError::Invalid(
                "http.max_connections and http.max_connections_per_address must be at least 1, \
                 http.header_read_timeout_ms, http.write_timeout_ms and \
                 http.body_read_timeout_ms 100–600000"
                    .into(),
            ));
        }
        if h.session_idle_secs == 0 || h.session_max_secs < h.session_idle_secs {
            return Err(ConfigError::Invalid(
                "http.session_idle_secs must be at least 1 and http.session_max_secs at least it"
                    .into(),
            ));
        }
        self.storage.validate()?;
        self.playback.validate()?;
        self.export.validate()?;
        self.audit.validate()?;
        let mut names = std::collections::HashSet::new();
        for t in &self.http.api_tokens {
            check_token(t).map_err(|e| ConfigError::Invalid(format!("http.api_{e}")))?;
            if !names.insert(t.name.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "http.api_token {:?} is listed twice",
                    t.name
                )));
            }
        }
        self.hls.validate()?;
        if self.live.ring_kb < 16
            || self.live.ring_gop_max_kb < self.live.ring_kb
            || self.live.ring_recorder_max_kb < self.live.ring_kb
        {
            return Err(ConfigError::Invalid(
                "live.ring_kb must be at least 16, and live.ring_gop_max_kb and \
                 live.ring_recorder_max_kb at least ring_kb"
                    .into(),
            ));
        }
        self.cluster.validate()?;
        tls::check_plaintext("rtsp", self.rtsp.listen, self.rtsp.allow_plaintext)?;
        tls::check_plaintext("http", self.http.listen, self.http.allow_plaintext)?;
        self.tls.validate(&[
            ("rtsp", self.rtsp.tls_listen),
            ("http", self.http.tls_listen),
        ])?;
        if let Some(auth) = &self.auth {
            auth.validate()?;
        }
        self.registry.validate()?;
        self.onvif.validate()?;
        self.webhooks.validate()?;
        camera::validate(&self.cameras)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_node_id_is_the_host_name_when_it_is_a_plain_name() {
        assert_eq!(node_id_from_host("cam-gw-07.site"), "cam-gw-07.site");
        for bad in ["", "a b", "x\u{e9}", "semi;colon", &"h".repeat(65)] {
            assert_eq!(node_id_from_host(bad), "vigil-1", "{bad:?}");
        }
        let id = NodeConfig::default().id;
        assert!(!id.is_empty() && id.len() <= 64, "{id}");
    }

    #[test]
    fn shipped_example_parses() {
        let c = Config::from_toml(EXAMPLE).unwrap();
        assert_eq!(c.rtsp.listen.port(), 8554);
        assert!(c.cameras.iter().any(|c| c.source == Source::Push));
        assert!(c
            .cameras
            .iter()
            .any(|c| matches!(c.source, Source::Pull { .. })));
    }

    /// The commented `[auth]` example parses once uncommented, with its documented defaults.
    #[test]
    fn shipped_auth_example_parses() {
        let start = EXAMPLE.find("# [auth]").expect("an [auth] example");
        let block: String = EXAMPLE[start..]
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| l.trim_start_matches('#').trim_start())
            .map(|l| format!("{l}\n"))
            .collect();
        let c = Config::from_toml(&block).unwrap();
        assert_eq!(c.record_mode(), RecordMode::Listed);
        let a = c.auth.unwrap();
        let d = AuthConfig::default();
        assert_eq!(
            (
                a.realm,
                a.basic,
                a.digest,
                a.nonce_lifetime_secs,
                a.max_failures,
                a.backoff_max_secs
            ),
            (
                d.realm,
                d.basic,
                d.digest,
                d.nonce_lifetime_secs,
                d.max_failures,
                d.backoff_max_secs
            )
        );
        assert_eq!(a.users[0].rights.playback, vec!["gate-*".to_string()]);
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.http.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.limits.session_timeout_secs, 60);
        assert!(c.cameras.is_empty());
    }

    #[test]
    fn the_ingest_runtime_is_on_by_default_and_its_threads_bounded() {
        let c = Config::from_toml("").unwrap();
        assert!(c.rtsp.ingest_runtime);
        assert_eq!(c.rtsp.ingest_threads, 0);
        let c = Config::from_toml("[rtsp]\ningest_runtime = false\ningest_threads = 4").unwrap();
        assert!(!c.rtsp.ingest_runtime);
        assert_eq!(c.rtsp.ingest_threads, 4);
        let e = Config::from_toml("[rtsp]\ningest_threads = 5000").unwrap_err();
        assert!(e.to_string().contains("ingest_threads"), "{e}");
    }

    #[test]
    fn a_recorder_may_fall_behind_further_than_a_viewer_but_not_less() {
        let c = Config::from_toml("").unwrap();
        assert_eq!((c.live.ring_kb, c.live.ring_recorder_max_kb), (512, 2048));
        let c = Config::from_toml("[live]\nring_kb = 256\nring_recorder_max_kb = 256").unwrap();
        assert_eq!(c.live.ring_recorder_max_kb, 256);
        let e = Config::from_toml("[live]\nring_recorder_max_kb = 100").unwrap_err();
        assert!(e.to_string().contains("ring_recorder_max_kb"), "{e}");
    }

    #[test]
    fn embedded_default_serves_demo() {
        let c = Config::embedded_default();
        assert_eq!(c.cameras[0].source, Source::Demo);
        assert_eq!(c.cameras[0].id, "demo");
    }

    #[test]
    fn storage_read_bandwidth_is_off_by_default_and_validated() {
        assert_eq!(
            Config::from_toml("").unwrap().storage.emulate.read_mbps,
            0.0
        );
        let ok = |v: &str| Config::from_toml(&format!("[storage.emulate]\nread_mbps = {v}"));
        for good in ["0", "0.1", "200", "1e6"] {
            let c = ok(good).unwrap_or_else(|e| panic!("read_mbps = {good}: {e}"));
            assert_eq!(c.storage.emulate.read_mbps, good.parse::<f64>().unwrap());
        }
        for bad in ["-1", "0.05", "2e6", "nan", "inf"] {
            let e = ok(bad).unwrap_err().to_string();
            assert!(
                e.contains("storage.emulate.read_mbps must be 0 (off) or between 0.1 and"),
                "read_mbps = {bad}: {e}"
            );
        }
        // A typo in the table is an error, not a silently unlimited volume.
        assert!(ok("1").is_ok() && Config::from_toml("[storage.emulate]\nread_mbs = 1").is_err());
    }

    /// `auth.digest` is read once into its enum: the two spellings clients send, in order;
    /// anything else is refused naming what was written and what is accepted.
    #[test]
    fn digest_algorithms_are_parsed_once_when_the_config_is_read() {
        let c = Config::from_toml("[auth]\ndigest = [\"MD5\", \"SHA-256\"]").unwrap();
        let digest = c.auth.map(|a| a.digest);
        assert_eq!(
            digest,
            Some(vec![DigestAlgorithm::Md5, DigestAlgorithm::Sha256])
        );
        let e = Config::from_toml("[auth]\ndigest = [\"SHA-1\"]")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("SHA-1") && e.contains("SHA-256") && e.contains("MD5"),
            "{e}"
        );
        let e = Config::from_toml("[auth]\ndigest = []")
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least one of digest or basic"), "{e}");
    }

    #[test]
    fn typos_and_bad_values_are_rejected() {
        assert!(Config::from_toml("[rtsp]\nlisen = \"0.0.0.0:1\"").is_err());
        for bad in ["a b", "..", ".hidden", "a/b", ""] {
            let e = Config::from_toml(&format!("[[camera]]\nid = \"{bad}\"")).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
        assert!(is_valid_camera_id("gate-1.north_2"));
        let e = Config::from_toml("[[camera]]\nid = \"a\"\nsource = \"http://x\"").unwrap_err();
        assert!(e.to_string().contains("rtsp://"), "{e}");
        let e = Config::from_toml("[[camera]]\nid = \"a\"\n[[camera]]\nid = \"a\"\n").unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        assert!(Config::from_toml("[limits]\nsession_timeout_secs = 0").is_err());
        assert!(Config::from_toml("[rtsp]\nudp_port_min = 30000\nudp_port_max = 20000").is_err());
        assert!(Config::from_toml("[rtsp]\npublisher_conflict = \"maybe\"").is_err());
        for bad in ["1.5", "-0.1", "nan"] {
            let e = Config::from_toml(&format!("[cache]\nstart_share = {bad}")).unwrap_err();
            assert!(e.to_string().contains("cache.start_share"), "{e}");
        }
        let c = Config::from_toml("[cache]\nbudget_mb = 100\nstart_share = 0.5").unwrap();
        assert_eq!(c.cache.start_bytes(), 50 << 20);
        assert_eq!(
            Config::default().cache.start_share,
            DEFAULT_CACHE_START_SHARE
        );
        assert_eq!(Config::default().storage.request_read_timeout_ms, 10_000);
        for bad in [
            "max_connections = 0",
            "max_connections_per_address = 0",
            "header_read_timeout_ms = 50",
            "write_timeout_ms = 700000",
        ] {
            let e = Config::from_toml(&format!("[http]\n{bad}")).unwrap_err();
            assert!(e.to_string().contains("http.max_connections"), "{e}");
        }
        for bad in ["0", "99", "600001"] {
            let e = Config::from_toml(&format!("[storage]\nrequest_read_timeout_ms = {bad}"))
                .unwrap_err();
            assert!(
                e.to_string().contains("storage.request_read_timeout_ms"),
                "{e}"
            );
        }
    }

    /// Issue 44, L1: a token short enough to guess at HTTP speed is refused, inline or from
    /// its file.
    #[test]
    fn the_admin_token_has_a_minimum_length() {
        let http = |token: &str| HttpConfig {
            token: Secret::new(token),
            ..HttpConfig::default()
        };
        assert!(http("short").token().is_err());
        assert!(http("fifteen-chars-x").token().is_err());
        assert_eq!(
            http("sixteen-chars-xx").token().ok().flatten().as_deref(),
            Some("sixteen-chars-xx")
        );
        assert_eq!(http("").token().ok(), Some(None));
        let dir = std::env::temp_dir().join(format!("vigil-token-{}", std::process::id()));
        std::fs::write(&dir, "tiny\n").expect("write");
        let from_file = HttpConfig {
            token_file: Some(dir.clone()),
            ..HttpConfig::default()
        };
        let e = from_file
            .token()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let _ = std::fs::remove_file(&dir);
        assert!(e.contains("at least 16"), "{e}");
    }

    /// Issue 44, L3: the cluster key may come from a file like the token, and neither
    /// secret shows in the config's `Debug` (a log of the config would have carried both).
    #[test]
    fn secrets_never_print_and_the_cluster_key_may_come_from_a_file() {
        let file = std::env::temp_dir().join(format!("vigil-gossip-key-{}", std::process::id()));
        std::fs::write(&file, "gossip-key-from-a-file-0123456789\n").expect("write");
        let c = Config::from_toml(&format!(
            "[http]\ntoken = \"admin-token-0123456789\"\n[cluster]\nenabled = true\nkey_file = \"{}\"\n",
            file.display()
        ));
        let _ = std::fs::remove_file(&file);
        let c = c.expect("config");
        assert_eq!(c.cluster.key.expose(), "gossip-key-from-a-file-0123456789");
        let shown = format!("{c:?}");
        assert!(!shown.contains("gossip-key-from-a-file"), "{shown}");
        assert!(!shown.contains("admin-token-0123456789"), "{shown}");
        // A key file that is missing is an error, not an empty key.
        let e =
            Config::from_toml("[cluster]\nenabled = true\nkey_file = \"/nonexistent/vigil-key\"\n");
        assert!(e.is_err());
    }
}
