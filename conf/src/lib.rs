//! Typed configuration of a vigil node.
//!
//! The file format is TOML; `conf/vigil.toml` is the shipped, commented example and is
//! parsed by a test so it cannot drift from these types. Every field has a default, so an
//! empty file (or no file at all) gives a working single node; unknown keys are rejected so
//! a typo never silently falls back to a default.

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
    /// Clustering (gossip membership, scheduler election, placement by redirect). Off unless
    /// `[cluster] enabled = true`.
    pub cluster: ClusterConf,
    /// Cameras known to this node. With no config file at all, the node serves the bundled
    /// demo clip as `live/demo` (see [`Config::embedded_default`]).
    #[serde(rename = "camera")]
    pub cameras: Vec<CameraConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// Node name used in logs, SDP origin and RTCP CNAME.
    pub id: String,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            id: "vigil-1".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RtspConfig {
    pub listen: SocketAddr,
    /// Inclusive range of UDP ports for RTP/RTCP pairs (RTP even, RTCP the next odd port).
    pub udp_port_min: u16,
    pub udp_port_max: u16,
    /// What happens when a second publisher ANNOUNCEs a path that is already live.
    pub publisher_conflict: PublisherConflict,
}

impl Default for RtspConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 8554)),
            udp_port_min: 20000,
            udp_port_max: 29999,
            publisher_conflict: PublisherConflict::Refuse,
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
    /// Admin API and `/metrics`. Keep it on loopback unless a firewall protects it.
    pub listen: SocketAddr,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LiveConfig {
    /// Packets each path keeps for its readers. A reader that falls further behind than this
    /// skips ahead to the next keyframe.
    pub ring_packets: usize,
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
            ring_packets: 2048,
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
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_sessions: 4000,
            max_readers_per_path: 2000,
            session_timeout_secs: 60,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Recording root: a directory on the shared volume (iSCSI LUN or NFS share) that every
    /// node mounts at the same path. Relative paths are taken from the working directory.
    pub root: std::path::PathBuf,
    /// Record live cameras at all (each camera can opt out with `record = false`).
    pub enabled: bool,
    /// Target segment length; segments are cut at the first keyframe past it.
    pub segment_secs: f64,
    /// Delete recordings older than this (0 = keep forever).
    pub retention_max_age_hours: f64,
    /// Delete the oldest recordings while the root holds more than this (0 = no limit).
    pub retention_max_bytes: u64,
    /// Per-camera write lease lifetime on the shared root (renewed every third of it). A
    /// node that dies keeps its cameras' leases this long, so another node's recording of a
    /// re-bound camera starts at most this late (cluster).
    pub lease_ttl_secs: f64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            root: "./data".into(),
            enabled: true,
            segment_secs: 4.0,
            retention_max_age_hours: 0.0,
            retention_max_bytes: 0,
            lease_ttl_secs: 15.0,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Memory budget of the segmented playback cache.
    pub budget_mb: u64,
    /// Segments loaded ahead of each playing session.
    pub read_ahead_segments: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            budget_mb: 512,
            read_ahead_segments: 2,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlaybackConfig {
    /// Above this Scale only keyframes are sent (trick play).
    pub keyframes_only_above_scale: f64,
}

impl Default for PlaybackConfig {
    fn default() -> Self {
        Self {
            keyframes_only_above_scale: 2.0,
        }
    }
}

/// `[cluster]`: how this node joins the others (issue 4). Every field has a default; the
/// feature is off unless `enabled = true`, and then `key` is required.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConf {
    pub enabled: bool,
    /// UDP address the gossip listens on (and advertises to the others).
    pub gossip_listen: SocketAddr,
    /// Gossip addresses of other nodes to join through (host:port).
    pub seeds: Vec<String>,
    /// Shared secret: every gossip datagram carries an HMAC-SHA256 made with it; datagrams
    /// without a valid one are dropped. Required when enabled.
    pub key: String,
    /// Scheduler election: the lowest (priority, id) among live nodes wins.
    pub priority: u32,
    /// Placement policy: similarity, cache-aware, least-load, least-connections,
    /// round-robin or knn-class.
    pub policy: String,
    /// RTSP URL other nodes redirect viewers to (`rtsp://host:port`); default from
    /// `rtsp.listen` (which must then not be a wildcard address to be reachable).
    pub rtsp_url: Option<String>,
    /// Bord: this node's network bandwidth in bits/s (ALGORITHMS.md §A.1).
    pub bandwidth_bps: f64,
    /// A node must be up this long before it can be elected scheduler.
    pub election_grace_ms: u64,
    /// Gossip round interval; failure detection takes about 8 rounds.
    pub gossip_interval_ms: u64,
    /// Phi-accrual threshold: a node is dead after phi_threshold mean heartbeat intervals of
    /// silence (≈ 1.6–2.4 s at 200 ms).
    pub phi_threshold: f64,
    /// Override of Load_max (ALGORITHMS.md §A.1, 0–100, default 95): a node whose estimated
    /// load after a placement would exceed it receives no new session, and a request no node
    /// can take is answered 503 with the reason. For operators who want head-room, and for
    /// tests (`load_max = 0` makes every node overloaded for the placements this node
    /// decides).
    pub load_max: Option<f64>,
    /// The cluster CA certificate (PEM, `vigil cluster ca`), this node's certificate chain
    /// and key (`vigil cluster cert`): node-to-node calls over QUIC with mutual TLS. All
    /// three or none; without them the node decides placements from its own gossip view.
    pub ca_cert: Option<std::path::PathBuf>,
    pub node_cert: Option<std::path::PathBuf>,
    pub node_key: Option<std::path::PathBuf>,
    /// UDP address of the QUIC endpoint; default: the gossip address with port + 1.
    pub rpc_listen: Option<SocketAddr>,
    /// How long a node waits for the scheduler's placement before deciding itself.
    pub rpc_timeout_ms: u64,
}

impl Default for ClusterConf {
    fn default() -> Self {
        Self {
            enabled: false,
            gossip_listen: SocketAddr::from(([0, 0, 0, 0], 7946)),
            seeds: Vec::new(),
            key: String::new(),
            priority: 100,
            policy: "similarity".into(),
            rtsp_url: None,
            bandwidth_bps: 1e9,
            election_grace_ms: 2000,
            gossip_interval_ms: 200,
            phi_threshold: 8.0,
            load_max: None,
            ca_cert: None,
            node_cert: None,
            node_key: None,
            rpc_listen: None,
            rpc_timeout_ms: 300,
        }
    }
}

impl ClusterConf {
    /// The QUIC endpoint's address: `rpc_listen`, else the gossip port's neighbour.
    pub fn rpc_addr(&self) -> SocketAddr {
        self.rpc_listen.unwrap_or_else(|| {
            let mut a = self.gossip_listen;
            a.set_port(a.port().wrapping_add(1));
            a
        })
    }

    /// The RTSP URL base other nodes send viewers to.
    pub fn rtsp_url_base(&self, rtsp_listen: SocketAddr) -> String {
        match &self.rtsp_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => format!("rtsp://{rtsp_listen}"),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CameraConfig {
    /// Path suffix: the camera is served at `rtsp://host:port/live/<id>`.
    pub id: String,
    /// `"push"` (a camera or encoder publishes with ANNOUNCE/RECORD), `"demo"` (the bundled
    /// clip, looped), or an `rtsp://[user:pass@]host[:port]/path` URL the node pulls.
    #[serde(default = "default_source")]
    pub source: String,
    /// Pull cameras only: connect when the first reader arrives and disconnect a grace period
    /// after the last leaves (`true`), or stay connected always (`false`).
    #[serde(default = "default_true")]
    pub on_demand: bool,
    /// Pull cameras only: use RTP over the RTSP TCP connection (default) or UDP.
    #[serde(default)]
    pub pull_transport: PullTransport,
    /// Record this camera (when `[storage] enabled`).
    #[serde(default = "default_true")]
    pub record: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum PullTransport {
    #[default]
    Tcp,
    Udp,
}

fn default_source() -> String {
    "push".into()
}
fn default_true() -> bool {
    true
}

/// Where a camera's media comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Push,
    Demo,
    Pull { url: String },
}

impl CameraConfig {
    pub fn source(&self) -> Source {
        match self.source.as_str() {
            "push" => Source::Push,
            "demo" => Source::Demo,
            url => Source::Pull {
                url: url.to_string(),
            },
        }
    }
}

impl Config {
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text)?;
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

    /// What `vigil serve` runs with no `--config`: defaults plus the demo camera, so a
    /// newcomer's first `ffplay rtsp://127.0.0.1:8554/live/demo` plays at once.
    pub fn embedded_default() -> Config {
        Config {
            cameras: vec![CameraConfig {
                id: "demo".into(),
                source: "demo".into(),
                on_demand: false,
                pull_transport: PullTransport::Tcp,
                record: true,
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
        let r = &self.rtsp;
        if r.udp_port_min > r.udp_port_max || r.udp_port_max - r.udp_port_min < 1 {
            return Err(ConfigError::Invalid(format!(
                "rtsp.udp_port_min..udp_port_max ({}..{}) must hold at least one port pair",
                r.udp_port_min, r.udp_port_max
            )));
        }
        if self.limits.session_timeout_secs == 0 {
            return Err(ConfigError::Invalid(
                "limits.session_timeout_secs must be at least 1".into(),
            ));
        }
        if !(self.storage.segment_secs >= 0.5 && self.storage.segment_secs <= 60.0) {
            return Err(ConfigError::Invalid(
                "storage.segment_secs must be between 0.5 and 60".into(),
            ));
        }
        if !(self.storage.lease_ttl_secs >= 1.0 && self.storage.lease_ttl_secs <= 3600.0) {
            return Err(ConfigError::Invalid(
                "storage.lease_ttl_secs must be between 1 and 3600".into(),
            ));
        }
        if self.live.ring_packets < 64 {
            return Err(ConfigError::Invalid(
                "live.ring_packets must be at least 64".into(),
            ));
        }
        let c = &self.cluster;
        if c.enabled {
            if c.key.len() < 16 {
                return Err(ConfigError::Invalid(
                    "cluster.key is required when the cluster is enabled (16 characters or more)"
                        .into(),
                ));
            }
            const POLICIES: [&str; 6] = [
                "similarity",
                "cache-aware",
                "least-load",
                "least-connections",
                "round-robin",
                "knn-class",
            ];
            if !POLICIES.contains(&c.policy.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "cluster.policy {:?}: expected one of {}",
                    c.policy,
                    POLICIES.join(", ")
                )));
            }
            if c.bandwidth_bps.is_nan() || c.bandwidth_bps <= 0.0 {
                return Err(ConfigError::Invalid(
                    "cluster.bandwidth_bps must be positive".into(),
                ));
            }
            if !(50..=5000).contains(&c.gossip_interval_ms) {
                return Err(ConfigError::Invalid(
                    "cluster.gossip_interval_ms must be between 50 and 5000".into(),
                ));
            }
            if c.phi_threshold.is_nan() || c.phi_threshold < 1.0 {
                return Err(ConfigError::Invalid(
                    "cluster.phi_threshold must be at least 1".into(),
                ));
            }
            let tls = [&c.ca_cert, &c.node_cert, &c.node_key];
            if tls.iter().any(|p| p.is_some()) && !tls.iter().all(|p| p.is_some()) {
                return Err(ConfigError::Invalid(
                    "cluster.ca_cert, cluster.node_cert and cluster.node_key go together".into(),
                ));
            }
            if !(10..=60_000).contains(&c.rpc_timeout_ms) {
                return Err(ConfigError::Invalid(
                    "cluster.rpc_timeout_ms must be between 10 and 60000".into(),
                ));
            }
            if let Some(m) = c.load_max {
                if !(0.0..=100.0).contains(&m) {
                    return Err(ConfigError::Invalid(
                        "cluster.load_max must be between 0 and 100".into(),
                    ));
                }
            }
            if let Some(u) = &c.rtsp_url {
                if !u.starts_with("rtsp://") {
                    return Err(ConfigError::Invalid(format!(
                        "cluster.rtsp_url {u:?} must be an rtsp:// URL"
                    )));
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for cam in &self.cameras {
            if cam.id.is_empty()
                || !cam
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(ConfigError::Invalid(format!(
                    "camera id {:?}: use letters, digits, '-', '_' and '.'",
                    cam.id
                )));
            }
            if !seen.insert(cam.id.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "camera id {:?} is listed twice",
                    cam.id
                )));
            }
            if let Source::Pull { url } = cam.source() {
                if !url.starts_with("rtsp://") {
                    return Err(ConfigError::Invalid(format!(
                        "camera {:?}: source must be \"push\", \"demo\" or an rtsp:// URL, got {url:?}",
                        cam.id
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_example_parses() {
        let c = Config::from_toml(EXAMPLE).unwrap();
        assert_eq!(c.rtsp.listen.port(), 8554);
        assert!(c.cameras.iter().any(|c| c.source() == Source::Push));
        assert!(c
            .cameras
            .iter()
            .any(|c| matches!(c.source(), Source::Pull { .. })));
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.http.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.limits.session_timeout_secs, 60);
        assert!(c.cameras.is_empty());
    }

    #[test]
    fn embedded_default_serves_demo() {
        let c = Config::embedded_default();
        assert_eq!(c.cameras[0].source(), Source::Demo);
        assert_eq!(c.cameras[0].id, "demo");
    }

    #[test]
    fn typos_and_bad_values_are_rejected() {
        assert!(Config::from_toml("[rtsp]\nlisen = \"0.0.0.0:1\"").is_err());
        let e = Config::from_toml("[[camera]]\nid = \"a b\"").unwrap_err();
        assert!(e.to_string().contains("a b"), "{e}");
        let e = Config::from_toml("[[camera]]\nid = \"a\"\nsource = \"http://x\"").unwrap_err();
        assert!(e.to_string().contains("rtsp://"), "{e}");
        let e = Config::from_toml("[[camera]]\nid = \"a\"\n[[camera]]\nid = \"a\"\n").unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        assert!(Config::from_toml("[limits]\nsession_timeout_secs = 0").is_err());
        assert!(Config::from_toml("[rtsp]\nudp_port_min = 30000\nudp_port_max = 20000").is_err());
        assert!(Config::from_toml("[rtsp]\npublisher_conflict = \"maybe\"").is_err());
    }

    #[test]
    fn cluster_is_off_by_default_and_checked_when_on() {
        let c = Config::from_toml("").unwrap();
        assert!(!c.cluster.enabled);
        assert_eq!(c.cluster.policy, "similarity");
        // Enabled without a key: refused.
        let e = Config::from_toml("[cluster]\nenabled = true").unwrap_err();
        assert!(e.to_string().contains("cluster.key"), "{e}");
        let ok = "[cluster]\nenabled = true\nkey = \"0123456789abcdef\"\n";
        let c = Config::from_toml(ok).unwrap();
        assert_eq!(c.cluster.bandwidth_bps, 1e9);
        assert_eq!(
            c.cluster.rtsp_url_base("127.0.0.2:8554".parse().unwrap()),
            "rtsp://127.0.0.2:8554"
        );
        let e = Config::from_toml(&format!("{ok}policy = \"fastest\"")).unwrap_err();
        assert!(e.to_string().contains("fastest"), "{e}");
        // QUIC: the three certificate paths go together; the endpoint defaults to the gossip
        // port's neighbour and the call to 300 ms.
        assert_eq!(c.cluster.rpc_timeout_ms, 300);
        assert_eq!(c.cluster.rpc_addr(), "0.0.0.0:7947".parse().unwrap());
        let e = Config::from_toml(&format!("{ok}ca_cert = \"ca.pem\"")).unwrap_err();
        assert!(e.to_string().contains("go together"), "{e}");
        let tls = format!(
            "{ok}ca_cert = \"ca.pem\"\nnode_cert = \"n.pem\"\nnode_key = \"n.key\"\nrpc_listen = \"127.0.0.1:9000\""
        );
        let c = Config::from_toml(&tls).unwrap();
        assert_eq!(c.cluster.rpc_addr(), "127.0.0.1:9000".parse().unwrap());
        assert_eq!(c.cluster.load_max, None);
        let c = Config::from_toml(&format!("{ok}load_max = 0")).unwrap();
        assert_eq!(c.cluster.load_max, Some(0.0));
        let e = Config::from_toml(&format!("{ok}load_max = 101")).unwrap_err();
        assert!(e.to_string().contains("load_max"), "{e}");
        let e = Config::from_toml(&format!("{ok}rtsp_url = \"http://x\"")).unwrap_err();
        assert!(e.to_string().contains("rtsp://"), "{e}");
    }
}
