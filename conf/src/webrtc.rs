//! `[webrtc]`: WHEP (WebRTC-HTTP egress) on the admin HTTP listener, for sub-second live
//! video in a browser (issue 27).

use crate::ConfigError;
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};

/// `[webrtc]`: the one UDP socket every WebRTC peer's ICE, DTLS and SRTP go through, and
/// the bounds on offers and peers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebRtcConfig {
    /// Off: `POST /whep/…` answers 503.
    pub enabled: bool,
    /// The UDP socket of all peers. Port 0 takes a free port at start (the answer's
    /// candidate names it); a firewall needs a fixed one.
    pub listen: SocketAddr,
    /// Addresses announced to peers as host candidates (ICE-lite: the node never gathers
    /// others). Empty: the `listen` address, which must then not be a wildcard.
    pub candidates: Vec<IpAddr>,
    /// Peers at once on this node; past it an offer gets 503.
    pub max_peers: usize,
    /// Offers per second from one client address, and the burst allowed (each one costs a
    /// DTLS certificate and a peer's state): past it 429.
    pub offers_per_sec: f64,
    pub offer_burst: u32,
    /// A peer that has not completed ICE and DTLS within this (ms) is dropped with its state.
    pub connect_timeout_ms: u64,
    /// Estimate each viewer's bandwidth from its TWCC feedback (shown with its session).
    /// Off by default: str0m then paces every peer's packets to that estimate, which costs
    /// per-packet work and delays a keyframe's burst; REMB, receiver reports and
    /// NACK/PLI/FIR counts are read either way.
    pub twcc: bool,
}

impl Default for WebRtcConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            candidates: Vec::new(),
            max_peers: 1000,
            offers_per_sec: 5.0,
            offer_burst: 20,
            connect_timeout_ms: 10_000,
            twcc: false,
        }
    }
}

impl WebRtcConfig {
    /// The addresses put in answers as host candidates, with the bound `port`.
    pub fn candidate_addrs(&self, port: u16) -> Vec<SocketAddr> {
        if self.candidates.is_empty() {
            vec![SocketAddr::new(self.listen.ip(), port)]
        } else {
            self.candidates
                .iter()
                .map(|ip| SocketAddr::new(*ip, port))
                .collect()
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if self.candidates.is_empty() && self.listen.ip().is_unspecified() {
            return Err(ConfigError::Invalid(format!(
                "webrtc.listen = \"{}\" is a wildcard: name the addresses browsers reach the \
                 node at in webrtc.candidates",
                self.listen
            )));
        }
        if self.candidates.iter().any(IpAddr::is_unspecified) {
            return Err(ConfigError::Invalid(
                "webrtc.candidates must be addresses peers can reach, not 0.0.0.0 or ::".into(),
            ));
        }
        if !(self.offers_per_sec.is_finite() && self.offers_per_sec > 0.0)
            || self.offer_burst == 0
            || self.max_peers == 0
        {
            return Err(ConfigError::Invalid(
                "webrtc.offers_per_sec must be positive, webrtc.offer_burst and \
                 webrtc.max_peers at least 1"
                    .into(),
            ));
        }
        if !(1_000..=120_000).contains(&self.connect_timeout_ms) {
            return Err(ConfigError::Invalid(
                "webrtc.connect_timeout_ms must be 1000–120000".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn webrtc_is_on_with_a_free_loopback_port_and_refuses_a_wildcard_without_candidates() {
        let c = Config::from_toml("").unwrap();
        assert!(c.webrtc.enabled);
        assert_eq!(c.webrtc.listen.to_string(), "127.0.0.1:0");
        assert_eq!(
            c.webrtc.candidate_addrs(5000)[0].to_string(),
            "127.0.0.1:5000"
        );
        let e = Config::from_toml("[webrtc]\nlisten = \"0.0.0.0:8189\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("webrtc.candidates"), "{e}");
        let c = Config::from_toml(
            "[webrtc]\nlisten = \"0.0.0.0:8189\"\ncandidates = [\"198.18.0.5\"]\n",
        )
        .unwrap();
        assert_eq!(
            c.webrtc.candidate_addrs(8189)[0].to_string(),
            "198.18.0.5:8189"
        );
        assert!(Config::from_toml("[webrtc]\noffer_burst = 0\n").is_err());
    }
}
