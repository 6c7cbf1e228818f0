//! `[cluster]`: gossip membership, scheduler election, placement by redirect, and the checks
//! of those settings.

use crate::ConfigError;
use serde::Deserialize;
use std::net::SocketAddr;

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
    /// without a valid one are dropped. Required when enabled (here or in `key_file`).
    /// Never printed (`Secret`).
    pub key: crate::Secret,
    /// A file holding the key (first line), so it need not sit in the config; read when
    /// the config is loaded, and only when `key` is empty.
    pub key_file: Option<std::path::PathBuf>,
    /// Scheduler election: the lowest (priority, id) among live nodes wins.
    pub priority: u32,
    /// Placement policy: similarity, cache-aware, least-load, least-connections,
    /// round-robin, knn-class or affinity (the policy layer's own names).
    pub policy: vigil_cluster::Policy,
    /// RTSP URL other nodes redirect viewers to and relay from (`rtsp://host:port`, or
    /// `rtsps://host:port` for the node's `[rtsp] tls_listen`); default from `rtsp.listen`
    /// (which must then not be a wildcard address to be reachable).
    pub rtsp_url: Option<String>,
    /// Bord: this node's network bandwidth in bits/s (ALGORITHMS.md §A.1).
    pub bandwidth_bps: f64,
    /// A node must be up this long before it can be elected scheduler.
    pub election_grace_ms: u64,
    /// Gossip round interval.
    pub gossip_interval_ms: u64,
    /// Chitchat's phi-accrual threshold: only which peers the gossip itself talks to; the
    /// membership's alive/dead is `failure_timeout_ms`.
    pub phi_threshold: f64,
    /// A member whose gossiped heartbeat counter has not advanced for this long is dead
    /// (scheduler failover, placement). Every digest carries every member's counter, so this
    /// does not grow with the member count. 0: chitchat's phi-accrual detector
    /// (`phi_threshold`) decides instead, as before issue 13.
    pub failure_timeout_ms: u64,
    /// This node's own pause (a starved or stopped process) longer than this is not held
    /// against the other members' heartbeats.
    pub failure_stall_ms: u64,
    /// The scheduler watch (needs the cluster certificates): every member keeps a QUIC
    /// connection to the scheduler, pinged every `scheduler_watch_ms`; the scheduler is dead
    /// to a member that heard nothing from it for `scheduler_timeout_ms` and could not
    /// connect again at once, without waiting for the gossip's `failure_timeout_ms`
    /// (scheduler failover ≈ this + 0.3 s). 0: off.
    pub scheduler_timeout_ms: u64,
    pub scheduler_watch_ms: u64,
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
    /// SHA-256 fingerprints (hex; colons allowed) of cluster certificates this node no
    /// longer accepts on its QUIC endpoint, whatever they name: a decommissioned node's, a
    /// node's whose key leaked, an operator's who left (`vigil cluster cert-fingerprint
    /// FILE` prints one). The CA still signs them; this list is how one is retired before
    /// it ends. Reloaded on SIGHUP.
    pub retired_certs: Vec<String>,
    /// UDP address of the QUIC endpoint; default: the gossip address with port + 1.
    pub rpc_listen: Option<SocketAddr>,
    /// How long a node waits for the scheduler's placement before deciding itself.
    pub rpc_timeout_ms: u64,
    /// How long a placement's estimated load is held against the chosen node, unless a
    /// report of the node built after the placement (listing the session from its SETUP)
    /// replaces it first; a DESCRIBE that never becomes a session lapses after this.
    pub reservation_ms: u64,
    /// `[cluster.scheduler]`: §A constants (weights, Load_min/max, LD, T_min/T_max, P_max).
    pub scheduler: vigil_cluster::SchedConfig,
    /// `[cluster.gateway]`: §B constants (λ, α, N, P, T_s, Load_alm/ove, TS_max, PS_max, M).
    pub gateway: vigil_cluster::GatewayConfig,
    /// `[cluster.knn]`: §C.2–C.3 ω, K and the training set (inline `training`, or
    /// `training_file` below).
    pub knn: vigil_cluster::KnnConfig,
    /// A TOML file with `[[training]]` samples (`indicators = [cpu, mem, net, links]`,
    /// `class = "low" | "normal" | "high"`) replacing the shipped KNN training set.
    pub knn_training_file: Option<std::path::PathBuf>,
    /// `[cluster.feedback]`: §C.5 feedback period bounds.
    pub feedback: vigil_cluster::FeedbackConfig,
    /// `[cluster.migration]`: session handoff between nodes and REM.
    pub migration: MigrationConf,
    /// `[cluster.planner]`: §D.2 min-migration planner (period, Δt, quantile, cap, solver
    /// time limit and gap).
    pub planner: vigil_cluster::PlannerConfig,
    /// `[cluster.edge]`: live viewers of a loaded holder served by nodes relaying from it.
    pub edge: vigil_cluster::EdgeConfig,
}

/// `[cluster.migration]`: moving running playback sessions between nodes (issue 7).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MigrationConf {
    /// Source address of a moved session's UDP media: `own` (the sending node's; ffmpeg and
    /// VLC follow) or `preserve` (the original node's, with a raw socket: needs CAP_NET_RAW
    /// and one L2 segment; GStreamer and `ffmpeg -rtsp_flags filter_src` follow too).
    pub mode: SourceMode,
    /// The elected scheduler runs §A.5 REM on load changes and moves sessions.
    pub rem: bool,
    /// Bound of one migration call (Prepare, Start, Stop) between nodes.
    pub rpc_timeout_ms: u64,
    /// The steering node's heartbeat to the node sending a moved session.
    pub heartbeat_ms: u64,
    /// The sending node stops a session whose steering node was silent this long.
    pub lease_ms: u64,
    /// The steering node takes a session back after the sending node was silent this long
    /// (longer than the lease, so the two never send at once).
    pub takeback_ms: u64,
    /// A live viewer's new sender waits this long for the previous sender's last packets
    /// to reach its hub (a relay's latency) before it joins at the next keyframe instead.
    pub live_match_ms: u64,
}

/// Where the sending node's datagrams come from (issue 7 §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceMode {
    /// The sending node's own address and ports: ffmpeg (default) and live555/VLC follow.
    #[default]
    Own,
    /// The steering node's address and ports (raw socket, CAP_NET_RAW, one L2 segment):
    /// also GStreamer rtspsrc and `ffmpeg -rtsp_flags filter_src`.
    Preserve,
}

impl std::str::FromStr for SourceMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "own" => Ok(SourceMode::Own),
            "preserve" => Ok(SourceMode::Preserve),
            _ => Err(format!("source mode {s:?}: expected own or preserve")),
        }
    }
}

impl std::fmt::Display for SourceMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SourceMode::Own => "own",
            SourceMode::Preserve => "preserve",
        })
    }
}

impl Default for MigrationConf {
    fn default() -> Self {
        Self {
            mode: SourceMode::Own,
            rem: true,
            rpc_timeout_ms: 1000,
            heartbeat_ms: 150,
            lease_ms: 500,
            takeback_ms: 700,
            live_match_ms: 200,
        }
    }
}

impl Default for ClusterConf {
    fn default() -> Self {
        Self {
            enabled: false,
            gossip_listen: SocketAddr::from(([0, 0, 0, 0], 7946)),
            seeds: Vec::new(),
            key: crate::Secret::default(),
            key_file: None,
            priority: 100,
            policy: vigil_cluster::Policy::Similarity,
            rtsp_url: None,
            bandwidth_bps: 1e9,
            election_grace_ms: 2000,
            gossip_interval_ms: 200,
            phi_threshold: 8.0,
            failure_timeout_ms: 2000,
            failure_stall_ms: 500,
            scheduler_timeout_ms: 800,
            scheduler_watch_ms: 100,
            load_max: None,
            ca_cert: None,
            node_cert: None,
            node_key: None,
            retired_certs: Vec::new(),
            rpc_listen: None,
            rpc_timeout_ms: 300,
            scheduler: Default::default(),
            gateway: Default::default(),
            knn: Default::default(),
            knn_training_file: None,
            feedback: Default::default(),
            migration: Default::default(),
            planner: Default::default(),
            edge: Default::default(),
            reservation_ms: 2000,
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

    /// `key` from `key_file` when the key is not given inline.
    pub(crate) fn read_key_file(&mut self) -> Result<(), ConfigError> {
        if self.key.is_empty() {
            if let Some(key) = crate::inline_or_file("", self.key_file.as_deref())? {
                self.key = crate::Secret::new(key);
            }
        }
        Ok(())
    }

    /// The checks that apply once the cluster is enabled.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        let c = self;
        if c.key.expose().len() < 16 {
            return Err(ConfigError::Invalid(
                "cluster.key is required when the cluster is enabled (16 characters or more)"
                    .into(),
            ));
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
        if c.failure_timeout_ms != 0
            && (c.failure_timeout_ms < 2 * c.gossip_interval_ms || c.failure_timeout_ms > 600_000)
        {
            return Err(ConfigError::Invalid(
                "cluster.failure_timeout_ms must be 0 or between 2 gossip rounds and 600000".into(),
            ));
        }
        if c.failure_stall_ms < 100 {
            return Err(ConfigError::Invalid(
                "cluster.failure_stall_ms must be at least 100 (the membership's refresh)".into(),
            ));
        }
        if !(10..=5000).contains(&c.scheduler_watch_ms) {
            return Err(ConfigError::Invalid(
                "cluster.scheduler_watch_ms must be between 10 and 5000".into(),
            ));
        }
        if c.scheduler_timeout_ms != 0
            && (c.scheduler_timeout_ms < 3 * c.scheduler_watch_ms
                || c.scheduler_timeout_ms > 600_000)
        {
            return Err(ConfigError::Invalid(
                "cluster.scheduler_timeout_ms must be 0 or between 3 scheduler_watch_ms and \
                 600000"
                    .into(),
            ));
        }
        if let Some(bad) = c
            .retired_certs
            .iter()
            .find(|f| fingerprint_hex(f).is_none())
        {
            return Err(ConfigError::Invalid(format!(
                "cluster.retired_certs: {bad:?} is not a SHA-256 fingerprint (64 hex digits)"
            )));
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
        let m = &c.migration;
        if m.heartbeat_ms == 0 || m.lease_ms <= m.heartbeat_ms || m.takeback_ms <= m.lease_ms {
            return Err(ConfigError::Invalid(
                "cluster.migration: need 0 < heartbeat_ms < lease_ms < takeback_ms".into(),
            ));
        }
        c.scheduler
            .check()
            .map_err(|e| ConfigError::Invalid(format!("cluster.scheduler: {e}")))?;
        c.gateway
            .check()
            .map_err(|e| ConfigError::Invalid(format!("cluster.gateway: {e}")))?;
        c.edge
            .check()
            .map_err(|e| ConfigError::Invalid(format!("cluster.edge: {e}")))?;
        let f = &c.feedback;
        if f.min_s == 0
            || f.min_s > f.max_s
            || !(f.min_s..=f.max_s).contains(&f.initial_s)
            || f.links_per_step == 0
        {
            return Err(ConfigError::Invalid(
                "cluster.feedback: need 0 < min_s <= initial_s <= max_s, links_per_step > 0".into(),
            ));
        }
        if c.knn.k == 0 || c.knn.training.is_empty() && c.knn_training_file.is_none() {
            return Err(ConfigError::Invalid(
                "cluster.knn: k must be positive and the training set not empty".into(),
            ));
        }
        let p = &c.planner;
        if p.period_ms < 100
            || p.window_ms < p.period_ms
            || !(p.quantile > 0.0 && p.quantile < 1.0)
            || p.zipf_max_s.is_nan()
            || p.zipf_max_s < 0.0
            || p.time_limit_ms == 0
            || p.mip_gap.is_nan()
            || p.mip_gap < 0.0
        {
            return Err(ConfigError::Invalid(
                "cluster.planner: need period_ms >= 100, window_ms >= period_ms, \
                 0 < quantile < 1, zipf_max_s >= 0, time_limit_ms > 0, mip_gap >= 0"
                    .into(),
            ));
        }
        if let Some(u) = &c.rtsp_url {
            if !u.starts_with("rtsp://") && !u.starts_with("rtsps://") {
                return Err(ConfigError::Invalid(format!(
                    "cluster.rtsp_url {u:?} must be an rtsp:// or rtsps:// URL"
                )));
            }
        }
        Ok(())
    }
}

/// A certificate fingerprint as `retired_certs` may spell it (hex, any case, colons
/// between bytes or not), as lower-case hex without colons; None when it is not 32 bytes.
pub fn fingerprint_hex(s: &str) -> Option<String> {
    let hex: String = s
        .chars()
        .filter(|c| *c != ':')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn retired_certificates_are_fingerprints_as_openssl_or_vigil_spells_them() {
        let hex = "ab".repeat(32);
        let colons = vec!["AB"; 32].join(":");
        assert_eq!(super::fingerprint_hex(&hex).as_deref(), Some(hex.as_str()));
        assert_eq!(
            super::fingerprint_hex(&colons).as_deref(),
            Some(hex.as_str())
        );
        assert_eq!(super::fingerprint_hex("ab"), None);
        assert_eq!(super::fingerprint_hex(&"zz".repeat(32)), None);
        let on = "[cluster]\nenabled = true\nkey = \"0123456789abcdef\"\n";
        assert!(Config::from_toml(&format!("{on}retired_certs = [\"{colons}\"]")).is_ok());
        let e = Config::from_toml(&format!("{on}retired_certs = [\"node-3\"]")).unwrap_err();
        assert!(e.to_string().contains("retired_certs"), "{e}");
    }

    #[test]
    fn cluster_is_off_by_default_and_checked_when_on() {
        let c = Config::from_toml("").unwrap();
        assert!(!c.cluster.enabled);
        assert_eq!(c.cluster.policy, vigil_cluster::Policy::Similarity);
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

    /// The commented `[cluster]` block of the shipped example, uncommented, is a valid
    /// configuration whose values are the defaults (so the documentation cannot drift).
    #[test]
    fn example_cluster_block_parses_to_the_defaults() {
        let ex = crate::EXAMPLE;
        let start = ex
            .find("# [cluster]\n")
            .expect("a commented [cluster] block");
        let block: String = ex[start..]
            .lines()
            .take_while(|l| l.starts_with('#'))
            // One '#' off: `# key = v` becomes a key, `## prose` stays a comment.
            .map(|l| {
                let r = l.strip_prefix('#').unwrap_or(l);
                format!("{}\n", r.strip_prefix(' ').unwrap_or(r))
            })
            .collect();
        let c = Config::from_toml(&block).unwrap_or_else(|e| panic!("{e}\n{block}"));
        let d = crate::ClusterConf::default();
        assert_eq!(c.cluster.scheduler, d.scheduler);
        assert_eq!(c.cluster.gateway, d.gateway);
        assert_eq!(c.cluster.knn.omega, d.knn.omega);
        assert_eq!(c.cluster.knn.k, d.knn.k);
        assert_eq!(c.cluster.feedback, d.feedback);
        assert_eq!(c.cluster.migration.mode, d.migration.mode);
        assert_eq!(c.cluster.migration.lease_ms, d.migration.lease_ms);
        assert_eq!(c.cluster.migration.takeback_ms, d.migration.takeback_ms);
        assert_eq!(c.cluster.planner, d.planner);
    }

    #[test]
    fn every_algorithm_constant_is_configurable() {
        let ok = "[cluster]\nenabled = true\nkey = \"0123456789abcdef\"\n";
        let c = Config::from_toml(ok).unwrap();
        // Defaults are ALGORITHMS.md's figures.
        assert_eq!(c.cluster.scheduler.load_min, 50.0);
        assert_eq!(c.cluster.scheduler.p_max, 0.8);
        assert_eq!(c.cluster.gateway.load_ove, 0.61);
        assert_eq!(c.cluster.knn.omega, [0.4, 0.25, 0.25, 0.1]);
        assert_eq!(c.cluster.feedback.max_s, 20);
        assert_eq!(c.cluster.migration.mode, super::SourceMode::Own);
        let t = format!(
            "{ok}[cluster.scheduler]\nload_min = 40\np_max = 0.5\nt_max_ms = 20000\n\
             weights = {{ cpu = 0.2, mem = 0.2, net = 0.6 }}\naffinity_slack = 0.5\n[cluster.gateway]\nalpha = 0.5\n\
             [cluster.feedback]\nmin_s = 2\n[cluster.migration]\nmode = \"preserve\"\nrem = false\n"
        );
        let c = Config::from_toml(&t).unwrap();
        assert_eq!(c.cluster.scheduler.load_min, 40.0);
        assert_eq!(c.cluster.scheduler.p_max, 0.5);
        assert_eq!(c.cluster.scheduler.t_max_ms, 20000);
        assert_eq!(c.cluster.scheduler.weights.net, 0.6);
        assert_eq!(c.cluster.scheduler.affinity_slack, 0.5);
        assert_eq!(c.cluster.gateway.alpha, 0.5);
        assert_eq!(c.cluster.feedback.min_s, 2);
        assert_eq!(c.cluster.migration.mode, super::SourceMode::Preserve);
        assert!(!c.cluster.migration.rem);
        let c = Config::from_toml(&format!(
            "{ok}[cluster.planner]\nperiod_ms = 1000\nwindow_ms = 20000\nnode_cap = 5\n\
             replicas = \"resident\"\ntime_limit_ms = 1\n"
        ))
        .unwrap();
        assert_eq!(c.cluster.planner.window_ms, 20_000);
        assert_eq!(c.cluster.planner.node_cap, 5);
        assert_eq!(
            c.cluster.planner.replicas,
            vigil_cluster::Replicas::Resident
        );
        assert_eq!(c.cluster.planner.horizon(), 1000);
        for (bad, what) in [
            (
                "[cluster.scheduler]\nload_min = 99\nload_max = 10\n",
                "load_min",
            ),
            (
                "[cluster.scheduler]\nweights = { cpu = 0.5, mem = 0.5, net = 0.5 }\n",
                "weights",
            ),
            ("[cluster.scheduler]\nlod_min = 1\n", "lod_min"),
            (
                "[cluster.scheduler]\naffinity_bucket_ms = 0\n",
                "affinity_bucket_ms",
            ),
            (
                "[cluster.scheduler]\naffinity_slack = -1\n",
                "affinity_slack",
            ),
            ("[cluster.migration]\nmode = \"teleport\"\n", "teleport"),
            (
                "[cluster.gateway]\nlambda = [0.5, 0.5, 0.5]\n",
                "cluster.gateway: lambda",
            ),
            (
                "[cluster.gateway]\nalpha = 0\n",
                "cluster.gateway: need 0 < alpha",
            ),
            (
                "[cluster.gateway]\nforecasts = 2\nforecasts_over = 3\n",
                "cluster.gateway: need forecasts",
            ),
            (
                "[cluster.gateway]\nsample_period_ms = 99\n",
                "cluster.gateway: sample_period_ms",
            ),
            (
                "[cluster.gateway]\nload_alm = 0.7\n",
                "cluster.gateway: need 0 <= load_alm < load_ove",
            ),
            (
                "[cluster.gateway]\nps_max = 1.5\n",
                "cluster.gateway: need ts_max_ms",
            ),
            (
                "[cluster.gateway]\nmem_bus_bits = 0\n",
                "cluster.gateway: mem_transfer_rate",
            ),
            (
                "[cluster.gateway]\nmove_timeout_ms = 0\n",
                "cluster.gateway: move_timeout_ms",
            ),
            (
                "[cluster.edge]\nholder_load = 101\n",
                "cluster.edge: holder_load",
            ),
            ("[cluster.edge]\nidle_ms = 0\n", "cluster.edge: idle_ms"),
            ("[cluster.migration]\nlease_ms = 10\n", "heartbeat_ms"),
            ("[cluster.feedback]\nmin_s = 0\n", "feedback"),
            ("[cluster.planner]\nquantile = 1.0\n", "planner"),
            ("[cluster.planner]\nreplicas = \"some\"\n", "some"),
        ] {
            let e = Config::from_toml(&format!("{ok}{bad}")).unwrap_err();
            assert!(e.to_string().contains(what), "{bad}: {e}");
        }
    }
}
