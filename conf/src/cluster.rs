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
    /// How long a placement's estimated load is held against the chosen node before its
    /// report shows the session (a DESCRIBE that never reaches PLAY lapses after this).
    pub reservation_ms: u64,
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

    /// The checks that apply once the cluster is enabled.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        let c = self;
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

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
