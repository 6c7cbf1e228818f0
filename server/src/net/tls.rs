//! The TLS side of the node's listeners (RTSPS, HTTPS): the certificate, reloaded without a
//! restart, and the accept step that bounds what a handshake may cost.
//!
//! rustls (already the QUIC links' TLS) through `tokio-rustls`. The certificate sits behind a
//! resolver the server config asks on every handshake, so a reload (SIGHUP, or the files
//! changing on disk — how an operator's PKI or a renewal cron job delivers a new one) swaps
//! it for new connections while open ones keep theirs: no session is dropped. A reload that
//! fails (a half-written file, a key that does not match) keeps the certificate in force and
//! says why.
//!
//! A handshake is the most expensive thing an unauthenticated peer can make the node do (an
//! asymmetric signature), so handshakes are rate-limited per client address before any TLS
//! work, and must complete within `[tls] handshake_timeout_ms`.

use crate::limits::{LimitStats, RateLimiter};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};
use thiserror::Error;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tracing::{info, warn};
use vigil_conf::TlsConfig;

/// Why a certificate could not be loaded: the file and what is wrong with it.
#[derive(Debug, Error)]
pub enum CertError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("{path}: no PEM private key in it ({reason})")]
    NoKey { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    Unusable { path: PathBuf, reason: String },
}

/// The files' modification times when last loaded: what a change on disk is compared with.
type Stamp = (Option<SystemTime>, Option<SystemTime>);

/// The listeners' certificate: one [`CertifiedKey`] swapped whole on reload.
#[derive(Debug)]
pub struct CertStore {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    loaded: Mutex<Stamp>,
}

impl CertStore {
    /// Load `cert` and `key`; an error names the file and the problem.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, CertError> {
        let stamp = stamp(cert, key);
        let certified = read_certified_key(cert, key)?;
        Ok(CertStore {
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            current: RwLock::new(Arc::new(certified)),
            loaded: Mutex::new(stamp),
        })
    }

    /// Read the files again and swap the certificate in for new connections.
    pub fn reload(&self) -> Result<(), CertError> {
        let stamp = stamp(&self.cert_path, &self.key_path);
        let certified = read_certified_key(&self.cert_path, &self.key_path)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(certified);
        *self.loaded.lock().unwrap_or_else(|e| e.into_inner()) = stamp;
        Ok(())
    }

    /// Whether either file's modification time differs from the loaded one's.
    pub fn changed_on_disk(&self) -> bool {
        let now = stamp(&self.cert_path, &self.key_path);
        *self.loaded.lock().unwrap_or_else(|e| e.into_inner()) != now
    }

    /// The certificate in force (DER chain, leaf first).
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current().cert.clone()
    }

    fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reload on SIGHUP (`serve` calls [`CertStore::reload_logged`]) and whenever the files
    /// change on disk, checked every `every`, until `shutdown`.
    pub async fn watch(
        self: Arc<Self>,
        every: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            if self.changed_on_disk() {
                self.reload_logged("the certificate files changed");
            }
        }
    }

    /// [`CertStore::reload`], saying what happened; `why` says what asked for it. A failure
    /// records the files' new times, so one bad write is reported once, not every check.
    pub fn reload_logged(&self, why: &str) {
        match self.reload() {
            Ok(()) => info!(cert = %self.cert_path.display(), "{why}: TLS certificate reloaded"),
            Err(e) => {
                *self.loaded.lock().unwrap_or_else(|e| e.into_inner()) =
                    stamp(&self.cert_path, &self.key_path);
                warn!("{why}: {e}; keeping the TLS certificate in force")
            }
        }
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (modified(cert), modified(key))
}

fn read(path: &Path) -> Result<Vec<u8>, CertError> {
    std::fs::read(path).map_err(|source| CertError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The chain and key from PEM files, checked to belong together.
fn read_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, CertError> {
    let chain = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertError::Unusable {
            path: cert.to_path_buf(),
            reason: format!("bad PEM: {e}"),
        })?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    let der = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| CertError::NoKey {
        path: key.to_path_buf(),
        reason: e.to_string(),
    })?;
    let signer =
        rustls::crypto::ring::sign::any_supported_type(&der).map_err(|e| CertError::Unusable {
            path: key.to_path_buf(),
            reason: format!("unsupported key: {e}"),
        })?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|e| CertError::Unusable {
        path: key.to_path_buf(),
        reason: format!("the key does not match {}: {e}", cert.display()),
    })?;
    Ok(certified)
}

/// Accepts TLS connections for one node: the certificate store, the per-address handshake
/// budget and the handshake deadline, shared by the RTSPS and HTTPS listeners.
#[derive(Clone)]
pub struct Acceptor {
    inner: tokio_rustls::TlsAcceptor,
    pub certs: Arc<CertStore>,
    handshakes: Arc<Mutex<RateLimiter>>,
    timeout: Duration,
}

/// Why a TLS connection did not come up.
#[derive(Debug, Error)]
pub enum AcceptError {
    #[error("more than the handshakes allowed per second from this address")]
    RateLimited,
    #[error("no complete handshake within {0:?}")]
    TimedOut(Duration),
    #[error("handshake failed: {0}")]
    Handshake(std::io::Error),
}

impl Acceptor {
    /// An acceptor over the node's certificate store (the RTSPS and HTTPS listeners share
    /// one). `alpn`: the protocols to offer (HTTPS offers `http/1.1`; RTSP has no registered
    /// ALPN id).
    pub fn new(certs: Arc<CertStore>, conf: &TlsConfig, alpn: &[&[u8]]) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|_| unreachable!("ring supports TLS 1.2 and 1.3"))
            .with_no_client_auth()
            .with_cert_resolver(certs.clone());
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Acceptor {
            inner: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            certs,
            handshakes: Arc::new(Mutex::new(RateLimiter::new(
                conf.handshakes_per_sec,
                conf.handshake_burst,
            ))),
            timeout: Duration::from_millis(conf.handshake_timeout_ms),
        }
    }

    /// Whether a handshake from `peer` is within its address's budget; a refusal is
    /// counted in `stats` (`vigil_limit_refusals_total{limit="tls_handshakes"}`). Called
    /// in the accept loop, before a task or any TLS state exists for the connection.
    pub fn admit(&self, peer: SocketAddr, stats: &LimitStats) -> Result<(), AcceptError> {
        let mut limiter = self.handshakes.lock().unwrap_or_else(|e| e.into_inner());
        if limiter.take(peer.ip(), Instant::now()).is_err() {
            LimitStats::bump(&stats.tls_handshakes);
            return Err(AcceptError::RateLimited);
        }
        Ok(())
    }

    /// The TLS handshake on an accepted connection, within the deadline.
    pub async fn handshake(&self, stream: TcpStream) -> Result<TlsStream<TcpStream>, AcceptError> {
        match tokio::time::timeout(self.timeout, self.inner.accept(stream)).await {
            Err(_) => Err(AcceptError::TimedOut(self.timeout)),
            Ok(Err(e)) => Err(AcceptError::Handshake(e)),
            Ok(Ok(s)) => Ok(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate and its key for `name`, as PEM files in `dir`.
    fn write_cert(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let c = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, c.cert.pem()).unwrap();
        std::fs::write(&key, c.key_pair.serialize_pem()).unwrap();
        (cert, key)
    }

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vigil-tls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_reload_swaps_the_certificate_and_a_bad_one_keeps_the_old() {
        let dir = tempdir("reload");
        let (cert, key) = write_cert(&dir, "one.test");
        let store = CertStore::load(&cert, &key).unwrap();
        let first = store.chain();
        assert!(!store.changed_on_disk());
        // A renewal: new files, new certificate.
        let other = tempdir("reload-2");
        let (c2, k2) = write_cert(&other, "two.test");
        std::fs::copy(&c2, &cert).unwrap();
        std::fs::copy(&k2, &key).unwrap();
        store.reload().unwrap();
        assert_ne!(store.chain(), first);
        let second = store.chain();
        // A half-written key: refused, the certificate in force stays.
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nAAAA").unwrap();
        let e = store.reload().unwrap_err().to_string();
        assert!(e.contains("key.pem"), "{e}");
        assert_eq!(store.chain(), second);
        // A key that belongs to another certificate: refused, naming both.
        let (c3, _) = write_cert(&tempdir("reload-3"), "three.test");
        std::fs::copy(&c3, &cert).unwrap();
        std::fs::copy(&k2, &key).unwrap();
        let e = store.reload().unwrap_err().to_string();
        assert!(e.contains("does not match"), "{e}");
        assert_eq!(store.chain(), second);
    }

    #[test]
    fn missing_and_empty_files_are_named() {
        let dir = tempdir("missing");
        let e = CertStore::load(&dir.join("nope.pem"), &dir.join("k.pem")).unwrap_err();
        assert!(e.to_string().contains("nope.pem"), "{e}");
        std::fs::write(dir.join("empty.pem"), "").unwrap();
        let (_, key) = write_cert(&dir, "x.test");
        let e = CertStore::load(&dir.join("empty.pem"), &key).unwrap_err();
        assert!(matches!(e, CertError::NoCertificate { .. }), "{e}");
    }

    #[test]
    fn handshakes_past_the_budget_are_refused_and_counted() {
        let dir = tempdir("budget");
        let (cert, key) = write_cert(&dir, "x.test");
        let conf = TlsConfig {
            handshakes_per_sec: 1.0,
            handshake_burst: 3,
            ..TlsConfig::default()
        };
        let certs = Arc::new(CertStore::load(&cert, &key).unwrap());
        let acceptor = Acceptor::new(certs, &conf, &[]);
        let stats = LimitStats::default();
        let a: SocketAddr = "127.0.0.9:5000".parse().unwrap();
        let b: SocketAddr = "127.0.0.10:5000".parse().unwrap();
        for _ in 0..3 {
            acceptor.admit(a, &stats).unwrap();
        }
        assert!(matches!(
            acceptor.admit(a, &stats),
            Err(AcceptError::RateLimited)
        ));
        // Another address has its own budget.
        acceptor.admit(b, &stats).unwrap();
        assert_eq!(
            stats
                .tls_handshakes
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }
}
