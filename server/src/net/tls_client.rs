//! Pulling from `rtsps://` sources (cameras, and other nodes whose `[cluster] rtsp_url` is
//! RTSPS) with `retina`, which speaks only `rtsp://` over plain TCP.
//!
//! The node makes the TLS connection itself (rustls, the server's certificate verified
//! against `[tls] client_ca`, else the system's CA bundle) and hands retina a one-shot
//! loopback listener whose one connection is copied to and from the TLS stream: retina's
//! RTSP, and the RTP interleaved in it, cross the network inside TLS. Verification fails
//! here, before retina starts, so the error names the certificate problem rather than a
//! dropped connection. Media is forced to TCP: RTP over UDP would leave the TLS connection
//! in clear (and come from the camera's address, which retina checks against the loopback
//! peer it talked to). What retina sends carries the loopback URL it was given; cameras
//! answer by path, as they do behind NAT.
//!
//! Written here rather than found: retina has no TLS or custom-transport hook (0.4), and
//! the bridge is a few lines of `tokio-rustls` and `copy_bidirectional`.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Where Debian (and Ubuntu) keep the system's trusted CAs.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The RTSPS default port (RFC 7826 §4.2 registers 322 for `rtsps`).
pub const RTSPS_PORT: u16 = 322;

#[derive(Debug, Error)]
pub enum TlsClientError {
    #[error("cannot read the CA bundle {path}: {source}")]
    ReadCa {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the CA bundle {path} holds no usable certificate{detail}")]
    NoCa { path: PathBuf, detail: String },
    #[error("no CA to verify rtsps:// sources against: set [tls] client_ca")]
    NoRoots,
    #[error("{0}: not an rtsps:// URL with a host")]
    BadUrl(String),
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("TLS with {addr}: {source}")]
    Handshake {
        addr: String,
        source: std::io::Error,
    },
    #[error("no TLS connection to {0} within the timeout")]
    TimedOut(String),
    #[error("the loopback side of the TLS bridge: {0}")]
    Local(std::io::Error),
}

/// The trusted CAs: `client_ca`, else the system bundle (for `rtsps://` pulls and
/// `https://` webhook receivers); certificates that do not parse are skipped.
pub fn ca_certs(
    client_ca: Option<&Path>,
) -> Result<(PathBuf, Vec<CertificateDer<'static>>), TlsClientError> {
    let path = match client_ca {
        Some(p) => p.to_path_buf(),
        None if Path::new(SYSTEM_BUNDLE).is_file() => PathBuf::from(SYSTEM_BUNDLE),
        None => return Err(TlsClientError::NoRoots),
    };
    let pem = std::fs::read(&path).map_err(|source| TlsClientError::ReadCa {
        path: path.clone(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    Ok((path, certs))
}

/// The client config for `rtsps://` pulls: roots from `client_ca`, else the system bundle.
pub fn client_config(
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ClientConfig>, TlsClientError> {
    let (path, certs) = ca_certs(client_ca)?;
    let mut roots = rustls::RootCertStore::empty();
    let (_, skipped) = roots.add_parsable_certificates(certs);
    if roots.is_empty() {
        let detail = if skipped > 0 {
            format!(" ({skipped} unreadable)")
        } else {
            String::new()
        };
        return Err(TlsClientError::NoCa { path, detail });
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|_| unreachable!("ring supports TLS 1.2 and 1.3"))
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A TLS connection to an `rtsps://` source, offered to retina as `url` on loopback; the
/// copying task ends with the connection, or when the bridge is dropped.
pub struct Bridge {
    /// `rtsp://127.0.0.1:PORT/…`: the source's URL with the loopback end put in.
    pub url: url::Url,
    task: JoinHandle<()>,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Bridge {
    /// Connect and verify within `timeout`; then wait (up to `timeout`) for retina's one
    /// connection to the loopback end.
    pub async fn open(
        config: Arc<rustls::ClientConfig>,
        source: &url::Url,
        timeout: Duration,
    ) -> Result<Bridge, TlsClientError> {
        let bad = || TlsClientError::BadUrl(crate::auth::redact_url(source.as_str()));
        if source.scheme() != "rtsps" {
            return Err(bad());
        }
        let (name, host) = match source.host().ok_or_else(bad)? {
            url::Host::Domain(d) => (
                ServerName::try_from(d.to_string()).map_err(|_| bad())?,
                d.to_string(),
            ),
            url::Host::Ipv4(ip) => (ServerName::IpAddress(ip.into()), ip.to_string()),
            url::Host::Ipv6(ip) => (ServerName::IpAddress(ip.into()), format!("[{ip}]")),
        };
        let addr = format!("{host}:{}", source.port().unwrap_or(RTSPS_PORT));
        let connect = async {
            let tcp =
                TcpStream::connect(&addr)
                    .await
                    .map_err(|source| TlsClientError::Connect {
                        addr: addr.clone(),
                        source,
                    })?;
            let _ = tcp.set_nodelay(true);
            tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|source| TlsClientError::Handshake {
                    addr: addr.clone(),
                    source,
                })
        };
        let tls = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| TlsClientError::TimedOut(addr.clone()))??;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(TlsClientError::Local)?;
        let local = listener.local_addr().map_err(TlsClientError::Local)?;
        let task = tokio::spawn(async move {
            let Some(mut inner) = own_connection(&listener, local, timeout).await else {
                return;
            };
            // One connection only: nobody else may ride this TLS session.
            drop(listener);
            let _ = inner.set_nodelay(true);
            let mut tls = tls;
            let _ = tokio::io::copy_bidirectional(&mut inner, &mut tls).await;
        });
        let mut url = source.clone();
        // rtsps → rtsp, and the host and port of the loopback end; both are plain URLs'
        // setters that cannot fail on an rtsp URL with a host.
        let _ = url.set_scheme("rtsp");
        let _ = url.set_host(Some("127.0.0.1"));
        let _ = url.set_port(Some(local.port()));
        Ok(Bridge { url, task })
    }
}

/// The first connection to the bridge's loopback end that this process opened (retina's),
/// within `timeout`. Another local process can reach the port too, and connecting first
/// it would have ridden the node's verified session to the camera (issue 44, L4): its
/// connection is closed, and the wait goes on.
async fn own_connection(
    listener: &TcpListener,
    local: std::net::SocketAddr,
    timeout: Duration,
) -> Option<TcpStream> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let (conn, peer) = tokio::time::timeout_at(deadline, listener.accept())
            .await
            .ok()?
            .ok()?;
        if crate::procfs::is_own_loopback_peer(peer, local) {
            return Some(conn);
        }
        tracing::warn!(%peer, "a connection to the RTSPS bridge from another process: closed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_without_certificates_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("vigil-tls-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "nothing here").unwrap();
        let e = client_config(Some(&empty)).unwrap_err().to_string();
        assert!(
            e.contains("empty.pem") && e.contains("no usable certificate"),
            "{e}"
        );
        let e = client_config(Some(&dir.join("missing.pem")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.pem"), "{e}");
    }

    /// A TLS server answering "hello" to each connection, and the bridge to it: another
    /// process that connects to the bridge's port first is closed, and this process's own
    /// connection then rides the session.
    #[tokio::test]
    async fn another_process_cannot_take_the_bridge() {
        let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        let dir = std::env::temp_dir().join(format!("vigil-tls-client-c-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, c.cert.pem()).unwrap();
        let server = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![c.cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(c.key_pair.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let camera = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let camera_addr = camera.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = camera.accept().await {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let _ = tokio::io::AsyncWriteExt::write_all(&mut tls, b"hello").await;
                    let _ = tokio::io::AsyncWriteExt::flush(&mut tls).await;
                    std::mem::forget(tls);
                }
            }
        });
        let url = url::Url::parse(&format!("rtsps://127.0.0.1:{}/x", camera_addr.port())).unwrap();
        let bridge = Bridge::open(
            client_config(Some(&ca)).unwrap(),
            &url,
            Duration::from_secs(10),
        )
        .await
        .expect("bridged");
        let port = bridge.url.port().unwrap();
        // The intruder: another process, connected first, reading what it is given.
        let intruder = std::process::Command::new("bash")
            .args([
                "-c",
                &format!("exec 3<>/dev/tcp/127.0.0.1/{port}; timeout 5 cat <&3"),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("bash");
        // Let it connect before this process does: its socket shows up in /proc/net/tcp.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let theirs = loop {
            let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
            let want = format!(":{port:04X} 01");
            if text.lines().any(|l| l.contains(&want)) {
                break true;
            }
            if std::time::Instant::now() > deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(theirs, "the intruder never connected");
        let mut mine = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut got = [0u8; 5];
        tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read_exact(&mut mine, &mut got),
        )
        .await
        .expect("in time")
        .expect("read");
        assert_eq!(&got, b"hello");
        let out = intruder.wait_with_output().expect("intruder");
        assert!(out.stdout.is_empty(), "the intruder read {:?}", out.stdout);
        drop(bridge);
    }

    #[tokio::test]
    async fn only_rtsps_urls_with_a_host_are_bridged() {
        let c = rcgen::generate_simple_self_signed(vec!["x.test".into()]).unwrap();
        let dir = std::env::temp_dir().join(format!("vigil-tls-client-b-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, c.cert.pem()).unwrap();
        let config = client_config(Some(&ca)).unwrap();
        for bad in ["rtsp://127.0.0.1/x", "rtsps://u:secret@/x"] {
            let Ok(url) = url::Url::parse(bad) else {
                continue;
            };
            let e = Bridge::open(config.clone(), &url, Duration::from_secs(1))
                .await
                .err()
                .expect("refused");
            let e = e.to_string();
            assert!(
                e.contains("not an rtsps:// URL") && !e.contains("secret"),
                "{e}"
            );
        }
    }
}
