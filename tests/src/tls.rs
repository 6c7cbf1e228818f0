//! TLS for the tests of the node's RTSPS and HTTPS listeners: a CA and listener certificates
//! made with rcgen (good, for another host name, expired), the `[tls]` config of a node that
//! serves them, and a verifying rustls client that reports the certificate it was shown.

use crate::{free_port, Node, NodeBuilder, RtspConn};
use rcgen::{BasicConstraints, Certificate, CertificateParams, IsCa, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, ServerName};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A test CA: its certificate on disk (what a client trusts) and what signs listener
/// certificates.
pub struct TestCa {
    cert: Certificate,
    key: KeyPair,
    pub pem: PathBuf,
}

/// What a listener certificate is made for.
pub enum Leaf<'a> {
    /// Valid now for 127.0.0.1 and `localhost`.
    Good,
    /// Valid now, for another name only.
    OtherHost(&'a str),
    /// For 127.0.0.1, but expired in 2021.
    Expired,
}

impl TestCa {
    /// A CA written to `dir/ca.pem`.
    pub fn new(dir: &Path) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "vigil test CA");
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        let pem = dir.join("ca.pem");
        std::fs::write(&pem, cert.pem()).expect("write ca.pem");
        TestCa { cert, key, pem }
    }

    /// A listener certificate and key signed by this CA, written to `dir/{name}.pem` and
    /// `dir/{name}.key`; returns their paths.
    pub fn issue(&self, dir: &Path, name: &str, leaf: Leaf<'_>) -> (PathBuf, PathBuf) {
        let host = match leaf {
            Leaf::OtherHost(h) => h.to_string(),
            _ => "localhost".into(),
        };
        let mut params = CertificateParams::new(vec![host]).expect("leaf params");
        if !matches!(leaf, Leaf::OtherHost(_)) {
            params
                .subject_alt_names
                .push(SanType::IpAddress(IpAddr::from([127, 0, 0, 1])));
        }
        if matches!(leaf, Leaf::Expired) {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("sign the leaf");
        let (c, k) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).expect("write the certificate");
        std::fs::write(&k, key.serialize_pem()).expect("write the key");
        (c, k)
    }
}

/// The `[tls]` table for a certificate and key, with `extra` keys.
pub fn tls_table(cert: &Path, key: &Path, extra: &str) -> String {
    format!(
        "[tls]\ncert = \"{}\"\nkey = \"{}\"\n{extra}\n",
        cert.display(),
        key.display()
    )
}

/// What a verifying TLS client saw of the server.
pub struct Shown {
    /// The server's leaf certificate (DER).
    pub leaf: Vec<u8>,
    /// The bytes answered to `request`, up to the end of its head.
    pub answer: String,
}

/// Connect to `addr` as a client trusting only `ca` and verifying `name`, send `request`,
/// and read the answer's head. Err: the handshake failed (the reason), or nothing came back.
pub fn tls_request(
    ca: &Path,
    addr: SocketAddr,
    name: &str,
    request: &str,
) -> Result<Shown, String> {
    tls_request_from(None, ca, addr, name, request)
}

/// [`tls_request`] from source address `from` (another loopback address), when given.
pub fn tls_request_from(
    from: Option<IpAddr>,
    ca: &Path,
    addr: SocketAddr,
    name: &str,
    request: &str,
) -> Result<Shown, String> {
    let mut tls = tls_stream(from, ca, addr, name)?;
    tls.write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => return Err(e.to_string()),
        }
    }
    let leaf = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .ok_or("no server certificate")?;
    Ok(Shown {
        leaf,
        answer: String::from_utf8_lossy(&answer).into_owned(),
    })
}

/// A verifying TLS client connection to `addr` (from `from` when given), trusting only `ca`
/// and verifying `name`, reads bounded to 5 s; the handshake runs on first use.
fn tls_stream(
    from: Option<IpAddr>,
    ca: &Path,
    addr: SocketAddr,
    name: &str,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let config = vigil_testkit::client::tls_client_config(ca).map_err(|e| e.to_string())?;
    let server = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    let conn = rustls::ClientConnection::new(config, server).map_err(|e| e.to_string())?;
    let tcp = connect_from(from, addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).ok();
    Ok(rustls::StreamOwned::new(conn, tcp))
}

/// `GET path` over HTTPS to `addr` (trusting only `ca`, verifying `name`), with the bearer
/// `token` when given: the body of a 200 answer; Err with the reason otherwise.
pub fn https_get(
    ca: &Path,
    addr: SocketAddr,
    name: &str,
    path: &str,
    token: Option<&str>,
) -> Result<String, String> {
    let mut tls = tls_stream(None, ca, addr, name)?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {name}\r\n{auth}Connection: close\r\n\r\n");
    tls.write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    // A server that closes without close_notify still sent the whole (identity) body.
    if let Err(e) = tls.read_to_end(&mut answer) {
        if answer.is_empty() {
            return Err(e.to_string());
        }
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").ok_or("no answer head")?;
    if head.split(' ').nth(1) != Some("200") {
        return Err(head.lines().next().unwrap_or("").to_string());
    }
    Ok(body.to_string())
}

/// The DER of the first certificate in a PEM file.
pub fn leaf_der(pem_file: &Path) -> Vec<u8> {
    let pem = std::fs::read(pem_file).expect("read the certificate");
    let der: CertificateDer<'static> =
        rustls::pki_types::pem::PemObject::from_pem_slice(&pem).expect("a PEM certificate");
    der.to_vec()
}

/// A TCP connection to `addr`, from source address `from` when given.
pub fn connect_from(from: Option<IpAddr>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let Some(from) = from else {
        return TcpStream::connect_timeout(&addr, Duration::from_secs(5));
    };
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    s.bind(&SocketAddr::new(from, 0).into())?;
    s.connect_timeout(&addr.into(), Duration::from_secs(5))?;
    Ok(s.into())
}

/// A node serving RTSPS and HTTPS on loopback with `cert`/`key`, plain RTSP and HTTP beside.
pub struct TlsNode {
    pub node: Node,
    pub rtsps: SocketAddr,
    pub https: SocketAddr,
}

impl TlsNode {
    pub fn start(
        cert: &std::path::Path,
        key: &std::path::Path,
        tls_extra: &str,
        extra: &str,
    ) -> TlsNode {
        let (rtsps, https) = (free_port("127.0.0.1"), free_port("127.0.0.1"));
        let node = NodeBuilder::new()
            .rtsp(&format!("tls_listen = \"127.0.0.1:{rtsps}\""))
            .http(&format!("tls_listen = \"127.0.0.1:{https}\""))
            .extra(&tls_table(cert, key, tls_extra))
            .extra(extra)
            .start();
        let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        TlsNode {
            node,
            rtsps: at(rtsps),
            https: at(https),
        }
    }

    pub fn rtsps_url(&self, path: &str) -> String {
        format!("rtsps://{}/{path}", self.rtsps)
    }
}

/// GStreamer validates everything but the CA, which the test's own CA is not known to
/// GIO as (rtspsrc takes a CA only as a GTlsDatabase object, which gst-launch cannot make):
/// a certificate for another host or an expired one still fails.
pub const GST_VALIDATE_BUT_CA: &str =
    "tls-validation-flags=bad-identity+not-activated+expired+revoked+insecure+generic-error";

pub fn assert_gst_decoded(what: &str, run: &crate::GstDecoded, frames: u64) {
    // At least: identity's EOS after `frames` buffers is where the count stops, and a
    // decoder draining at EOS may add a frame or two behind it.
    assert!(
        run.errors.is_empty() && run.frames >= frames,
        "{what}: {} frames of {frames}, errors {:?}\n{}",
        run.frames,
        run.errors,
        run.output
    );
}

/// A hand-driven RTSP connection over TLS to `addr`, trusting `ca` for `name`.
pub fn rtsps_conn(ca: &Path, addr: SocketAddr, name: &str) -> RtspConn {
    let config = vigil_testkit::client::tls_client_config(ca).expect("client config");
    let server = ServerName::try_from(name.to_string()).expect("server name");
    let conn = rustls::ClientConnection::new(config, server).expect("TLS client");
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let io = tcp.try_clone().expect("clone the socket");
    RtspConn::over(tcp, Box::new(rustls::StreamOwned::new(conn, io)))
}
