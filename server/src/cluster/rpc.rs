//! Node-to-node calls (issue 4 §1, §4): QUIC (`quinn`) with mutual TLS from a cluster CA.
//!
//! * `vigil cluster ca` makes the CA (`ca.pem`, `ca.key`), `vigil cluster cert` a node
//!   certificate signed by it (SAN = the node id as a DNS name), both with `rcgen`.
//! * Every node runs one endpoint, server and client at once; both sides require a
//!   certificate chaining to the cluster CA (rustls `WebPkiClientVerifier` with the CA as the
//!   only root): a peer without one is refused during the handshake.
//! * One call = one bidirectional stream: a length-prefixed (u32, big-endian) JSON
//!   [`RpcRequest`] one way, a length-prefixed JSON [`RpcResponse`] back.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

/// The client side's configuration (for callers outside the node: the CLI, tests).
pub use quinn::ClientConfig;

/// ALPN of the cluster RPC.
const ALPN: &[u8] = b"vigil-rpc/1";
/// Largest frame accepted (a placement request or decision is a few hundred bytes).
pub const MAX_FRAME: usize = 64 * 1024;
/// Longest the server side of one call may take, request to answer: longer than any
/// caller waits (the longest, a camera move's `TakeCamera`, is capped at 60 s).
const SERVE_DEADLINE: Duration = Duration::from_secs(120);
const CA_CN: &str = "vigil cluster CA";
/// How long a node certificate is valid by default (`vigil cluster cert --days`): two years.
pub const NODE_CERT_DAYS: u32 = 730;

/// A call to another node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RpcRequest {
    /// Place a request (the scheduler decides and applies the decision to its view).
    Place { request: PlaceRequest },
    /// Session migration between nodes (`crate::migrate`).
    Migration(crate::handoff::MigrationCall),
    /// A camera move's first step (§B.5): pull `camera` here and answer once a keyframe is
    /// in (the `camera_move` module).
    TakeCamera { camera: String, timeout_ms: u64 },
    /// An operator's camera move, forwarded to the scheduler.
    MoveCamera { camera: String, to: String },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlaceRequest {
    /// The asking node.
    pub from: String,
    pub camera: String,
    pub time_ms: i64,
    pub vbr_bps: f64,
    /// A live viewer (holder or edge, issue 11 §3) rather than a playback.
    #[serde(default)]
    pub live: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RpcResponse {
    Decision(WireDecision),
    Migration(crate::handoff::MigrationReply),
    CameraReady { keyframe_ms: f64 },
    CameraMoved(Box<CameraMoveRecord>),
    Error(String),
}

/// One camera-move decision and its outcome, as `/api/cluster/scheduler` shows it and an
/// operator's [`RpcRequest::MoveCamera`] is answered with. A wire record, so it lives here:
/// this module imports none of its siblings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CameraMoveRecord {
    pub at_ms: i64,
    pub camera: Option<String>,
    pub from: String,
    pub to: Option<String>,
    /// "overload" (§B.3–§B.5) or "operator" (`vigil ctl move-camera`).
    pub trigger: String,
    /// The policy's inputs and choice (GL, zone, forecasts, DA, loads, η), for "overload".
    pub decision: Option<vigil_cluster::camera_move::CameraMoveDecision>,
    pub reason: String,
    /// pending, moved, abandoned: why, or "no move".
    pub result: String,
    /// The destination's time from `TakeCamera` to the camera's first keyframe there.
    pub keyframe_ms: Option<f64>,
    /// Decision → the bindings naming the destination published (or the move abandoned).
    pub took_ms: Option<f64>,
}

/// The scheduler's answer to [`RpcRequest::Place`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireDecision {
    /// The chosen node, None for a rejection.
    pub node: Option<String>,
    /// The chosen node's RTSP URL base.
    pub base: Option<String>,
    pub reason: String,
    /// The node that decided, and its term.
    pub scheduler: String,
    pub term: u64,
}

fn ca_params() -> CertificateParams {
    // Deterministic (fixed DN, rcgen's fixed validity): `cert` rebuilds the issuer from
    // ca.key alone; the subject DN and key identifier match the ca.pem written by `ca`.
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_CN);
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    let mut f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
    }
    .with_context(|| format!("writing {}", path.display()))?;
    #[cfg(not(unix))]
    let mut f =
        std::fs::File::create(path).with_context(|| format!("writing {}", path.display()))?;
    f.write_all(contents.as_bytes())?;
    Ok(())
}

/// `vigil cluster ca --out DIR`: writes DIR/ca.pem and DIR/ca.key.
pub fn make_ca(out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let key = KeyPair::generate()?;
    let cert = ca_params().self_signed(&key)?;
    std::fs::write(out.join("ca.pem"), cert.pem())?;
    write_private(&out.join("ca.key"), &key.serialize_pem())?;
    Ok(())
}

/// `vigil cluster cert --ca DIR --node ID --out DIR`: writes OUT/ID.pem (the node certificate
/// followed by the CA's) and OUT/ID.key.
/// `hosts`: more names the certificate is valid for (DNS names or IP addresses), so that
/// it also serves the node's RTSPS and HTTPS listeners to viewers who reach the node by
/// those names (a lab's certificates; production listener certificates come from the
/// operator's PKI).
pub fn make_node_cert(
    ca_dir: &Path,
    node: &str,
    out: &Path,
    hosts: &[String],
    days: u32,
) -> anyhow::Result<()> {
    if days == 0 {
        bail!("--days must be at least 1");
    }
    rustls::pki_types::ServerName::try_from(node)
        .map_err(|_| anyhow!("node id {node:?} is not a valid DNS name"))?;
    let mut sans = Vec::with_capacity(hosts.len());
    for h in hosts {
        sans.push(match h.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => {
                rustls::pki_types::ServerName::try_from(h.as_str())
                    .map_err(|_| anyhow!("--host {h:?} is neither an IP address nor a DNS name"))?;
                SanType::DnsName(h.as_str().try_into()?)
            }
        });
    }
    let ca_key_pem = std::fs::read_to_string(ca_dir.join("ca.key"))
        .with_context(|| format!("reading {}", ca_dir.join("ca.key").display()))?;
    let ca_pem = std::fs::read_to_string(ca_dir.join("ca.pem"))
        .with_context(|| format!("reading {}", ca_dir.join("ca.pem").display()))?;
    let ca_key = KeyPair::from_pem(&ca_key_pem)?;
    let issuer = ca_params().self_signed(&ca_key)?;
    let mut p = CertificateParams::new(vec![node.to_string()])?;
    p.subject_alt_names.extend(sans);
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, node);
    p.distinguished_name = dn;
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // Valid from a day ago (clocks a little behind) for `days`: rcgen's default runs to
    // the year 4096, so a leaked node certificate used to be good for ever.
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::days(1);
    p.not_after = now + time::Duration::days(i64::from(days));
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &issuer, &ca_key)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(out.join(format!("{node}.pem")), cert.pem() + &ca_pem)?;
    write_private(&out.join(format!("{node}.key")), &key.serialize_pem())?;
    Ok(())
}

/// TLS material of a node (or of a test client).
pub struct Tls {
    pub server: quinn::ServerConfig,
    pub client: quinn::ClientConfig,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca: &Path) -> anyhow::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for c in
        CertificateDer::pem_file_iter(ca).with_context(|| format!("reading {}", ca.display()))?
    {
        roots
            .add(c.with_context(|| format!("parsing {}", ca.display()))?)
            .context("adding the cluster CA")?;
    }
    if roots.is_empty() {
        bail!("{}: no certificate", ca.display());
    }
    Ok(roots)
}

fn chain(
    cert: &Path,
    key: &Path,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing {}", cert.display()))?;
    let key =
        PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading {}", key.display()))?;
    Ok((chain, key))
}

fn transport() -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(Some(
        quinn::IdleTimeout::try_from(Duration::from_secs(5)).expect("5 s is a valid idle timeout"),
    ));
    t.keep_alive_interval(Some(Duration::from_secs(1)));
    Arc::new(t)
}

/// A client config trusting `ca` only, presenting `identity` (cert, key) when given.
pub fn client_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> anyhow::Result<quinn::ClientConfig> {
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots(ca)?);
    let mut c = match identity {
        Some((cert, key)) => {
            let (chain, key) = chain(cert, key)?;
            b.with_client_auth_cert(chain, key)?
        }
        None => b.with_no_client_auth(),
    };
    c.alpn_protocols = vec![ALPN.to_vec()];
    let q = quinn::crypto::rustls::QuicClientConfig::try_from(c)?;
    let mut cc = quinn::ClientConfig::new(Arc::new(q));
    cc.transport_config(transport());
    Ok(cc)
}

impl Tls {
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> anyhow::Result<Tls> {
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots(ca)?),
            provider(),
        )
        .build()
        .context("client verifier")?;
        let (chain_, key_) = chain(cert, key)?;
        let mut s = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain_, key_)
            .context("the node certificate")?;
        s.alpn_protocols = vec![ALPN.to_vec()];
        let q = quinn::crypto::rustls::QuicServerConfig::try_from(s)?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(q));
        server.transport_config(transport());
        Ok(Tls {
            server,
            client: client_config(ca, Some((cert, key)))?,
        })
    }
}

async fn write_frame<T: Serialize>(send: &mut quinn::SendStream, v: &T) -> anyhow::Result<()> {
    let body = serde_json::to_vec(v)?;
    send.write_all(&(body.len() as u32).to_be_bytes()).await?;
    send.write_all(&body).await?;
    send.finish()?;
    Ok(())
}

async fn read_frame<T: for<'a> Deserialize<'a>>(recv: &mut quinn::RecvStream) -> anyhow::Result<T> {
    let mut len = [0u8; 4];
    recv.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        bail!("frame of {len} bytes is too large");
    }
    let mut body = vec![0u8; len];
    recv.read_exact(&mut body).await?;
    Ok(serde_json::from_slice(&body)?)
}

/// One call on a connection.
pub async fn call(conn: &quinn::Connection, req: &RpcRequest) -> anyhow::Result<RpcResponse> {
    let (mut send, mut recv) = conn.open_bi().await?;
    write_frame(&mut send, req).await?;
    read_frame(&mut recv).await
}

/// Connects to `addr` expecting a certificate for `node`.
pub async fn connect(
    endpoint: &quinn::Endpoint,
    config: Option<quinn::ClientConfig>,
    addr: SocketAddr,
    node: &str,
) -> anyhow::Result<quinn::Connection> {
    let connecting = match config {
        Some(c) => endpoint.connect_with(c, addr, node)?,
        None => endpoint.connect(addr, node)?,
    };
    Ok(connecting.await?)
}

/// One call from a fresh client endpoint (the `vigil cluster place` command, and tests that
/// play a peer — with or without a cluster certificate), bounded by `timeout`.
pub async fn call_once(
    config: quinn::ClientConfig,
    addr: SocketAddr,
    node: &str,
    req: &RpcRequest,
    timeout: Duration,
) -> anyhow::Result<RpcResponse> {
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let endpoint = quinn::Endpoint::client(bind)?;
    let resp = tokio::time::timeout(timeout, async {
        let conn = connect(&endpoint, Some(config), addr, node).await?;
        call(&conn, req).await
    })
    .await
    .map_err(|_| anyhow!("no answer within {timeout:?}"));
    endpoint.close(0u32.into(), b"done");
    resp?
}

/// The node's endpoint: serves calls with `handler` and calls other nodes.
pub struct Rpc {
    pub endpoint: quinn::Endpoint,
    pub local: SocketAddr,
    /// Open connections to other nodes by (id, address), reused across calls.
    conns: Mutex<HashMap<(String, SocketAddr), quinn::Connection>>,
    /// The endpoint's client side, for connections that need other transport settings.
    client: quinn::ClientConfig,
}

/// The node's side of session migration, as the RPC server dispatches it.
pub trait MigrationService: Send + Sync {
    fn handle(
        &self,
        call: crate::handoff::MigrationCall,
    ) -> futures::future::BoxFuture<'static, crate::handoff::MigrationReply>;
}

/// Serves one call from a caller. Async: a migration `Prepare` loads a segment before it
/// answers.
pub type Handler = Arc<
    dyn Fn(Caller, RpcRequest) -> futures::future::BoxFuture<'static, RpcResponse> + Send + Sync,
>;

/// Who called, as the connection's TLS handshake proved it: the DNS names of the caller's
/// certificate (a node's id is its first). A certificate chaining to the cluster CA proves
/// only that the CA signed it — an operator's, a retired node's or a node's of another
/// cluster sharing the CA are as valid — so what a call may do is judged by these names
/// against the live members (`authorize`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    pub names: Vec<String>,
    /// Hex SHA-256 of the leaf certificate's DER: what `[cluster] retired_certs` names.
    pub fingerprint: String,
}

impl Caller {
    /// The names of the leaf certificate a QUIC connection's peer presented (none when it
    /// presented none, which the server's verifier does not allow).
    fn of(conn: &quinn::Connection) -> Caller {
        let leaf = conn
            .peer_identity()
            .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
            .and_then(|chain| chain.first().cloned());
        match leaf {
            Some(leaf) => Caller {
                names: dns_names(&leaf),
                fingerprint: fingerprint(&leaf),
            },
            None => Caller::default(),
        }
    }

    fn is(&self, id: &str) -> bool {
        self.names.iter().any(|n| n.eq_ignore_ascii_case(id))
    }
}

/// Hex SHA-256 of a certificate's DER (what `openssl x509 -fingerprint -sha256` prints,
/// without its colons).
pub fn fingerprint(der: &CertificateDer<'_>) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(der.as_ref()))
}

/// The fingerprint of the first certificate of a PEM file (`vigil cluster cert-fingerprint`).
pub fn fingerprint_of_file(pem: &Path) -> anyhow::Result<String> {
    let leaf = CertificateDer::pem_file_iter(pem)
        .with_context(|| format!("reading {}", pem.display()))?
        .next()
        .with_context(|| format!("{} holds no certificate", pem.display()))?
        .with_context(|| format!("{} holds no certificate", pem.display()))?;
    Ok(fingerprint(&leaf))
}

/// The DNS names in a certificate's subject alternative names.
fn dns_names(der: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => Some(d.to_string()),
            _ => None,
        })
        .collect()
}

/// Whether `caller` may make `req` (issue 44, H2). Pure: `member` says whether a node id is
/// a live member now (this node included).
///
/// * Whatever moves, starts, stops or drains anything — every migration call but `Status`,
///   `TakeCamera`, `MoveCamera` — only from a live member.
/// * `Place` (a placement question, as `vigil cluster place` asks it with an operator's
///   certificate) from any holder of a cluster certificate, but a request that names a
///   member as its asker only from that member.
/// * `Status` (which of these sessions do you host) from any holder.
pub fn authorize(
    req: &RpcRequest,
    caller: &Caller,
    member: &dyn Fn(&str) -> bool,
) -> Result<(), String> {
    use crate::handoff::MigrationCall;
    let is_member = caller.names.iter().any(|n| member(n));
    let who = || {
        caller
            .names
            .first()
            .map_or("a caller without a name".to_string(), |n| format!("{n:?}"))
    };
    match req {
        RpcRequest::Migration(MigrationCall::Status { .. }) => Ok(()),
        RpcRequest::Place { request } => {
            if member(&request.from) && !caller.is(&request.from) {
                return Err(format!(
                    "refused: {} may not ask for a placement as member {:?}",
                    who(),
                    request.from
                ));
            }
            Ok(())
        }
        RpcRequest::Migration(_)
        | RpcRequest::TakeCamera { .. }
        | RpcRequest::MoveCamera { .. }
            if !is_member =>
        {
            Err(format!(
                "refused: {} is not a live member of this cluster",
                who()
            ))
        }
        _ => Ok(()),
    }
}

impl Rpc {
    pub fn bind(tls: Tls, listen: SocketAddr) -> anyhow::Result<Rpc> {
        let mut endpoint = quinn::Endpoint::server(tls.server, listen)
            .with_context(|| format!("cannot bind the cluster RPC endpoint on {listen}"))?;
        endpoint.set_default_client_config(tls.client.clone());
        let local = endpoint.local_addr()?;
        Ok(Rpc {
            endpoint,
            local,
            conns: Mutex::new(HashMap::new()),
            client: tls.client,
        })
    }

    /// The client config of a scheduler watch (`super::watch`): a keep-alive every `ping`
    /// and the connection lost after `timeout` without a packet from the peer (QUIC takes
    /// the smaller of the two sides' idle timeouts, and the server's is 5 s).
    pub fn watch_config(&self, ping: Duration, timeout: Duration) -> quinn::ClientConfig {
        let mut t = quinn::TransportConfig::default();
        t.max_idle_timeout(quinn::IdleTimeout::try_from(timeout).ok());
        t.keep_alive_interval(Some(ping));
        let mut c = self.client.clone();
        c.transport_config(Arc::new(t));
        c
    }

    /// Accepts connections until the endpoint closes.
    pub async fn serve(endpoint: quinn::Endpoint, handler: Handler) {
        while let Some(incoming) = endpoint.accept().await {
            let handler = handler.clone();
            tokio::spawn(async move {
                let remote = incoming.remote_address();
                let conn = match incoming.await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(%remote, error = %e, "cluster RPC peer refused");
                        return;
                    }
                };
                let caller = Caller::of(&conn);
                while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                    let (handler, caller) = (handler.clone(), caller.clone());
                    tokio::spawn(async move {
                        let call = async {
                            let resp = match read_frame::<RpcRequest>(&mut recv).await {
                                Ok(req) => handler(caller, req).await,
                                Err(e) => RpcResponse::Error(format!("bad request: {e}")),
                            };
                            let _ = write_frame(&mut send, &resp).await;
                        };
                        // Past it the stream is dropped (reset): its caller gave up long
                        // before, and a stream held open counts against the connection's
                        // concurrent streams, which every call from that node shares.
                        if tokio::time::timeout(SERVE_DEADLINE, call).await.is_err() {
                            tracing::warn!(%remote, "cluster RPC call not answered within {SERVE_DEADLINE:?}: dropped");
                        }
                    });
                }
            });
        }
    }

    /// Calls `node` at `addr`, reusing the connection when it is still open.
    pub async fn call(
        &self,
        node: &str,
        addr: SocketAddr,
        req: &RpcRequest,
    ) -> anyhow::Result<RpcResponse> {
        let key = (node.to_string(), addr);
        let cached = {
            let g = self.conns.lock().unwrap_or_else(|p| p.into_inner());
            g.get(&key).filter(|c| c.close_reason().is_none()).cloned()
        };
        let conn = match cached {
            Some(c) => c,
            None => {
                let c = connect(&self.endpoint, None, addr, node).await?;
                self.conns
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, c.clone());
                c
            }
        };
        call(&conn, req).await
    }
}

#[cfg(test)]
mod tests;
