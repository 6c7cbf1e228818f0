//! `[tls]`: the certificate of the node's TLS listeners (RTSPS, HTTPS), and the rule that
//! nothing plaintext listens beyond loopback unless the operator says so.
//!
//! Video, RTSP passwords (Basic, or Digest's crackable hashes) and the admin token cross a
//! plaintext listener in the clear, so a listener reachable from the network is TLS by
//! default: a plain `listen` beyond loopback refuses to start unless its table sets
//! `allow_plaintext = true`. The cluster's own links are not this module's: gossip carries
//! no video and no secret (every datagram is HMAC-signed), node-to-node calls are QUIC with
//! mutual TLS.

use crate::ConfigError;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `[tls]`: one certificate for every TLS listener of the node (`[rtsp] tls_listen`,
/// `[http] tls_listen`). The files are re-read on SIGHUP and when either changes on disk
/// (checked every `reload_check_ms`); connections already open keep the certificate they
/// were made with.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// The certificate chain, PEM, leaf first (what an operator's PKI or `vigil cluster
    /// cert --listener` issues).
    pub cert: Option<PathBuf>,
    /// The leaf's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// The CAs (PEM bundle) that `rtsps://` sources' certificates are verified against:
    /// cameras pulled over TLS, and other nodes relayed from when their `[cluster]
    /// rtsp_url` is RTSPS. Default: the system's bundle (/etc/ssl/certs/ca-certificates.crt).
    pub client_ca: Option<PathBuf>,
    /// How often the files' modification times are compared with the loaded ones (ms).
    pub reload_check_ms: u64,
    /// A TLS handshake must complete within this (ms), else the connection is closed.
    pub handshake_timeout_ms: u64,
    /// TLS handshakes per second from one client address (token bucket) and the burst
    /// allowed: past it, a new connection is closed before any handshake work (a handshake
    /// costs the server an asymmetric-key operation; a flood from one address must not take
    /// the node's CPU from its viewers).
    pub handshakes_per_sec: f64,
    pub handshake_burst: u32,
    /// SRTP (RFC 3711) for RTSPS viewers' media, keyed by MIKEY inside the TLS connection.
    pub srtp: SrtpMode,
}

/// `[tls] srtp`: what an RTSPS connection's description offers, and whether a viewer on
/// it may take its video over plain UDP.
///
/// The DESCRIBE answer on RTSPS lists every track as `RTP/SAVP` with its key
/// (`a=key-mgmt:mikey`, as live555 and GStreamer's rtsp-server do over TLS): a client that
/// speaks SRTP (GStreamer's rtspsrc, live555/VLC) sets up `RTP/SAVP` and gets encrypted,
/// authenticated RTP and RTCP over UDP or interleaved; one that does not (ffmpeg, retina)
/// sets up `RTP/AVP` as before. Plain RTSP never carries a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SrtpMode {
    /// Never offered: RTSPS descriptions say `RTP/AVP`.
    Off,
    /// Offered; a viewer may still set up plain RTP over UDP on RTSPS (its video then
    /// crosses the network in clear text beside an encrypted control connection).
    Offer,
    /// Offered, and plain RTP over UDP on an RTSPS connection is refused (461): such a
    /// viewer takes `RTP/SAVP`, or RTP interleaved inside the TLS connection.
    Require,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            cert: None,
            key: None,
            client_ca: None,
            reload_check_ms: 2000,
            handshake_timeout_ms: 5000,
            handshakes_per_sec: 20.0,
            handshake_burst: 200,
            srtp: SrtpMode::Require,
        }
    }
}

impl TlsConfig {
    /// The certificate and key files, when both are set.
    pub fn files(&self) -> Option<(&PathBuf, &PathBuf)> {
        self.cert.as_ref().zip(self.key.as_ref())
    }

    pub(crate) fn validate(
        &self,
        tls_listeners: &[(&str, Option<SocketAddr>)],
    ) -> Result<(), ConfigError> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(ConfigError::Invalid(
                "tls.cert and tls.key go together: set both or neither".into(),
            ));
        }
        for (table, addr) in tls_listeners {
            if let (Some(addr), None) = (addr, self.files()) {
                return Err(ConfigError::Invalid(format!(
                    "{table}.tls_listen = \"{addr}\" needs a certificate: set tls.cert and tls.key"
                )));
            }
        }
        if !(100..=3_600_000).contains(&self.reload_check_ms)
            || !(100..=60_000).contains(&self.handshake_timeout_ms)
        {
            return Err(ConfigError::Invalid(
                "tls.reload_check_ms must be 100–3600000 and tls.handshake_timeout_ms 100–60000"
                    .into(),
            ));
        }
        if !(self.handshakes_per_sec.is_finite() && self.handshakes_per_sec > 0.0)
            || self.handshake_burst == 0
        {
            return Err(ConfigError::Invalid(
                "tls.handshakes_per_sec must be a positive number and tls.handshake_burst at \
                 least 1"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// A plaintext listener beyond loopback without `allow_plaintext = true` is refused, with
/// the keys that fix it. `table`: the config table (`rtsp`, `http`).
pub(crate) fn check_plaintext(
    table: &str,
    listen: SocketAddr,
    allow_plaintext: bool,
) -> Result<(), ConfigError> {
    if listen.ip().is_loopback() || allow_plaintext {
        return Ok(());
    }
    Err(ConfigError::Invalid(format!(
        "{table}.listen = \"{listen}\" is beyond loopback without TLS: serve the network on \
         {table}.tls_listen (with tls.cert and tls.key) and keep {table}.listen on loopback, \
         or set {table}.allow_plaintext = true to accept clear text on it"
    )))
}

#[cfg(test)]
mod tests {
    use crate::Config;

    fn err(text: &str) -> String {
        match Config::from_toml(text) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_plain_listener_beyond_loopback_is_refused_naming_the_key() {
        let e = err("[rtsp]\nlisten = \"0.0.0.0:8554\"\n[auth]\n");
        assert!(e.contains("rtsp.listen = \"0.0.0.0:8554\""), "{e}");
        assert!(e.contains("rtsp.allow_plaintext = true"), "{e}");
        let e = err("[http]\nlisten = \"198.18.0.1:8080\"\ntoken = \"t\"\n");
        assert!(e.contains("http.allow_plaintext = true"), "{e}");
        // Said explicitly, it starts; loopback never needs it.
        Config::from_toml("[rtsp]\nlisten = \"0.0.0.0:8554\"\nallow_plaintext = true\n").unwrap();
        Config::from_toml("[rtsp]\nlisten = \"127.0.0.2:8554\"\n[http]\nlisten = \"[::1]:80\"\n")
            .unwrap();
    }

    #[test]
    fn the_default_listeners_are_loopback() {
        let c = Config::from_toml("").unwrap();
        assert!(c.rtsp.listen.ip().is_loopback() && c.http.listen.ip().is_loopback());
        assert!(c.rtsp.tls_listen.is_none() && c.http.tls_listen.is_none());
    }

    #[test]
    fn a_tls_listener_needs_both_files() {
        let e = err("[rtsp]\ntls_listen = \"0.0.0.0:322\"\n");
        assert!(
            e.contains("rtsp.tls_listen") && e.contains("tls.cert"),
            "{e}"
        );
        let e = err("[tls]\ncert = \"c.pem\"\n");
        assert!(e.contains("tls.cert and tls.key go together"), "{e}");
        let c = Config::from_toml(
            "[rtsp]\ntls_listen = \"0.0.0.0:322\"\n[http]\ntls_listen = \"0.0.0.0:8443\"\n\
             [tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n",
        )
        .unwrap();
        assert_eq!(c.rtsp.tls_listen.map(|a| a.port()), Some(322));
        let e = err("[tls]\nhandshakes_per_sec = 0.0\n");
        assert!(e.contains("tls.handshakes_per_sec"), "{e}");
    }

    #[test]
    fn srtp_is_required_on_rtsps_unless_said_otherwise() {
        use crate::SrtpMode;
        assert_eq!(Config::from_toml("").unwrap().tls.srtp, SrtpMode::Require);
        for (text, mode) in [("off", SrtpMode::Off), ("offer", SrtpMode::Offer)] {
            let c = Config::from_toml(&format!("[tls]\nsrtp = \"{text}\"\n")).unwrap();
            assert_eq!(c.tls.srtp, mode);
        }
        let e = err("[tls]\nsrtp = \"always\"\n");
        assert!(e.contains("srtp") || e.contains("always"), "{e}");
    }
}
