//! The RTSP control connection of a viewer: requests out, responses in, and (over TCP) the
//! interleaved media that shares the byte stream, cut in place from one receive buffer.

use super::ClientError;
use bytes::{Buf, BytesMut};
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use vigil_proto::rtsp::auth::answer_challenge;
use vigil_proto::rtsp::{parse_frame, Frame, Limits, Method, Request, Response};

/// Receive buffer growth step: a few interleaved packets per read, without a large
/// resident buffer per viewer (a thousand viewers share one process).
const READ_CHUNK: usize = 16 * 1024;

/// One unit found at the front of the receive buffer.
#[derive(Debug)]
pub(crate) enum Scanned {
    /// `$ channel len payload`: the payload is `rx[payload]`; drop `consumed` bytes after use.
    Interleaved {
        channel: u8,
        payload: Range<usize>,
        consumed: usize,
    },
    Response(Response, usize),
}

/// Cut the next frame off the front of `buf` without copying interleaved payloads.
/// `Ok(None)`: more bytes are needed.
pub(crate) fn scan(buf: &[u8]) -> Result<Option<Scanned>, ClientError> {
    let skip = vigil_proto::rtsp::skip_blank_lines(buf);
    let rest = &buf[skip..];
    match rest.first() {
        None => Ok(None),
        Some(b'$') => {
            let Some(hdr) = rest.get(..4) else {
                return Ok(None);
            };
            let len = usize::from(u16::from_be_bytes([hdr[2], hdr[3]]));
            if rest.len() < 4 + len {
                return Ok(None);
            }
            Ok(Some(Scanned::Interleaved {
                channel: hdr[1],
                payload: skip + 4..skip + 4 + len,
                consumed: skip + 4 + len,
            }))
        }
        Some(_) => match parse_frame(buf, &Limits::default()) {
            Ok(None) => Ok(None),
            Ok(Some((Frame::Response(r), n))) => Ok(Some(Scanned::Response(r, n))),
            Ok(Some((Frame::Request(r), _))) => Err(ClientError::Protocol(format!(
                "server sent a {} request, which this client does not serve",
                r.method
            ))),
            // parse_frame only returns Interleaved for '$', handled above.
            Ok(Some((Frame::Interleaved { .. }, n))) => Err(ClientError::Protocol(format!(
                "unexpected interleaved frame of {n} bytes"
            ))),
            Err(e) => Err(ClientError::Protocol(e.to_string())),
        },
    }
}

/// Where a URL points and what to put in request lines.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The URL without credentials, as sent in requests.
    pub url: String,
    pub host: String,
    pub port: u16,
    /// User and password from the URL, for a server that answers 401.
    pub creds: Option<(String, String)>,
    /// `rtsps://`: the connection is TLS (verified with `PlayOptions::tls_ca`).
    pub tls: bool,
}

/// The control connection's bytes: plain TCP, or TLS over it (`rtsps://`).
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp().local_addr()
    }

    pub fn peer_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }
}

impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A TLS client config trusting only the CAs in `ca` (PEM), for `rtsps://` targets: the
/// node's own (`net::tls_client`, what its rtsps:// pulls verify with).
pub fn tls_client_config(
    ca: &std::path::Path,
) -> Result<std::sync::Arc<rustls::ClientConfig>, ClientError> {
    vigil_server::net::tls_client::client_config(Some(ca)).map_err(|e| ClientError::Tls {
        addr: ca.display().to_string(),
        reason: e.to_string(),
    })
}

impl Target {
    pub fn parse(text: &str) -> Result<Target, ClientError> {
        let bad = |reason: &str| ClientError::BadUrl {
            url: text.to_string(),
            reason: reason.to_string(),
        };
        let mut url = url::Url::parse(text).map_err(|e| bad(&e.to_string()))?;
        let tls = match url.scheme() {
            "rtsp" => false,
            "rtsps" => true,
            _ => return Err(bad("only rtsp:// and rtsps:// URLs are supported")),
        };
        let host = url.host_str().ok_or_else(|| bad("no host"))?.to_string();
        let port = url.port().unwrap_or(if tls { 322 } else { 554 });
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let creds = (!url.username().is_empty())
            .then(|| (decode(url.username()), decode(url.password().unwrap_or(""))));
        let _ = url.set_username("");
        let _ = url.set_password(None);
        Ok(Target {
            tls,
            url: url.to_string(),
            host,
            port,
            creds,
        })
    }

    /// A track's URL from its SDP `a=control` (absolute, or relative to `base`).
    pub fn join(base: &str, control: Option<&str>) -> String {
        match control {
            None | Some("*") | Some("") => base.to_string(),
            Some(c) if c.starts_with("rtsp://") => c.to_string(),
            Some(c) if base.ends_with('/') => format!("{base}{c}"),
            Some(c) => format!("{base}/{c}"),
        }
    }
}

/// The RTSP connection: the socket, its receive buffer, CSeq and the session id.
pub(crate) struct Control {
    pub stream: Stream,
    pub rx: BytesMut,
    cseq: u32,
    pub session: Option<String>,
    creds: Option<(String, String)>,
    /// Digest nonce count of this connection (qop=auth).
    nc: u32,
}

impl Control {
    /// Connect to `target`; over TLS (verified with `tls`) when it is `rtsps://`.
    pub async fn connect(
        target: &Target,
        timeout: Duration,
        recv_buffer: Option<u32>,
        tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<Control, ClientError> {
        let addr = format!("{}:{}", target.host, target.port);
        let connect = async {
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host(&addr).await?.collect();
            let mut last = std::io::Error::from(std::io::ErrorKind::AddrNotAvailable);
            for a in resolved {
                let sock = if a.is_ipv4() {
                    TcpSocket::new_v4()?
                } else {
                    TcpSocket::new_v6()?
                };
                if let Some(n) = recv_buffer {
                    // Before connect, so the window scale matches the small buffer.
                    sock.set_recv_buffer_size(n)?;
                }
                match sock.connect(a).await {
                    Ok(s) => return Ok(s),
                    Err(e) => last = e,
                }
            }
            Err(last)
        };
        let stream = match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => return Err(ClientError::Connect { addr, source }),
            Err(_) => {
                return Err(ClientError::Timeout {
                    what: format!("connecting to {addr}"),
                    after: timeout,
                })
            }
        };
        stream.set_nodelay(true)?;
        let stream = if target.tls {
            let config = tls.ok_or_else(|| ClientError::Tls {
                addr: addr.clone(),
                reason: "an rtsps:// URL needs a CA to verify the server (tls_ca)".into(),
            })?;
            let name =
                rustls::pki_types::ServerName::try_from(target.host.clone()).map_err(|e| {
                    ClientError::Tls {
                        addr: addr.clone(),
                        reason: e.to_string(),
                    }
                })?;
            let connector = tokio_rustls::TlsConnector::from(config.clone());
            match tokio::time::timeout(timeout, connector.connect(name, stream)).await {
                Ok(Ok(s)) => Stream::Tls(Box::new(s)),
                Ok(Err(e)) => {
                    return Err(ClientError::Tls {
                        addr,
                        reason: e.to_string(),
                    })
                }
                Err(_) => {
                    return Err(ClientError::Timeout {
                        what: format!("the TLS handshake with {addr}"),
                        after: timeout,
                    })
                }
            }
        } else {
            Stream::Plain(stream)
        };
        Ok(Control {
            stream,
            rx: BytesMut::with_capacity(READ_CHUNK),
            cseq: 0,
            session: None,
            creds: target.creds.clone(),
            nc: 0,
        })
    }

    /// A request with CSeq, User-Agent and (once set up) Session.
    pub fn request(&mut self, method: Method, uri: &str) -> Request {
        self.cseq += 1;
        let mut req = Request::new(method, uri)
            .header("CSeq", self.cseq.to_string())
            .header(
                "User-Agent",
                concat!("vigil-client/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(s) = &self.session {
            req = req.header("Session", s.clone());
        }
        req
    }

    pub async fn send(&mut self, req: &Request) -> Result<(), ClientError> {
        self.stream.write_all(&req.to_bytes()).await?;
        Ok(())
    }

    /// Send `req` and wait for its answer; a 401 is answered once with the URL's
    /// credentials (Digest, the first challenge `answer_challenge` can do). A non-2xx answer
    /// is returned as is; callers decide (a 302 is not an error).
    pub async fn call(&mut self, req: Request, timeout: Duration) -> Result<Response, ClientError> {
        let resp = self.call_once(req.clone(), timeout).await?;
        if resp.status.0 != 401 {
            return Ok(resp);
        }
        let Some((user, pass)) = self.creds.clone() else {
            return Ok(resp);
        };
        self.nc += 1;
        let cnonce = format!("{:08x}", rand::random::<u32>());
        let answer = resp.headers.get_all("WWW-Authenticate").find_map(|c| {
            answer_challenge(
                c,
                (&user, &pass),
                req.method.as_str(),
                &req.uri,
                (&cnonce, self.nc),
            )
        });
        let Some(answer) = answer else {
            return Ok(resp);
        };
        self.cseq += 1;
        let mut again = req;
        again.headers.set("CSeq", self.cseq.to_string());
        again.headers.set("Authorization", answer);
        self.call_once(again, timeout).await
    }

    /// Send `req` and wait for its answer. Interleaved frames met on the way are dropped
    /// (before PLAY there should be none); anything after the answer stays buffered.
    async fn call_once(
        &mut self,
        req: Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        let cseq = req.cseq();
        let what = format!("{} {}", req.method, req.uri);
        self.send(&req).await?;
        let wait = async {
            loop {
                while let Some(frame) = scan(&self.rx)? {
                    match frame {
                        Scanned::Interleaved { consumed, .. } => self.rx.advance(consumed),
                        Scanned::Response(r, n) => {
                            self.rx.advance(n);
                            if r.cseq() == cseq {
                                return Ok(r);
                            }
                        }
                    }
                }
                self.rx.reserve(READ_CHUNK);
                if self.stream.read_buf(&mut self.rx).await? == 0 {
                    return Err(ClientError::Closed);
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Timeout {
                what,
                after: timeout,
            }),
        }
    }

    /// `call`, insisting on a 2xx answer.
    pub async fn call_ok(
        &mut self,
        req: Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        let method = req.method.to_string();
        let resp = self.call(req, timeout).await?;
        if resp.status.is_success() {
            Ok(resp)
        } else {
            Err(ClientError::Status {
                method,
                status: resp.status.0,
                reason: resp.reason,
            })
        }
    }

    /// Read more bytes into `rx`; Ok(0) at end of stream.
    pub async fn read_more(&mut self) -> std::io::Result<usize> {
        self.rx.reserve(READ_CHUNK);
        self.stream.read_buf(&mut self.rx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_cut_in_place() {
        let mut buf = Vec::new();
        buf.extend_from_slice(b"$\x01\x00\x03abc");
        buf.extend_from_slice(b"RTSP/1.0 200 OK\r\nCSeq: 4\r\n\r\n");
        buf.extend_from_slice(b"$\x00\x00\x05de");
        let Some(Scanned::Interleaved {
            channel,
            payload,
            consumed,
        }) = scan(&buf).unwrap()
        else {
            panic!("interleaved frame expected")
        };
        assert_eq!((channel, &buf[payload], consumed), (1, &b"abc"[..], 7));
        let rest = &buf[consumed..];
        let Some(Scanned::Response(r, n)) = scan(rest).unwrap() else {
            panic!("response expected")
        };
        assert_eq!(r.cseq(), Some(4));
        assert!(
            scan(&rest[n..]).unwrap().is_none(),
            "incomplete frame waits"
        );
        assert!(scan(b"\x17garbage").is_err());
    }

    #[test]
    fn urls_lose_credentials_and_join_controls() {
        let t = Target::parse("rtsp://u:p%40ss@127.0.0.1:8554/live/x").unwrap();
        assert_eq!(t.creds, Some(("u".to_string(), "p@ss".to_string())));
        assert_eq!(t.url, "rtsp://127.0.0.1:8554/live/x");
        assert_eq!((t.host.as_str(), t.port), ("127.0.0.1", 8554));
        assert_eq!(Target::parse("rtsp://h/x").unwrap().port, 554);
        assert!(Target::parse("http://h/x").is_err());
        let t = Target::parse("rtsps://h/x").unwrap();
        assert!(t.tls && t.port == 322);
        assert_eq!(
            Target::join("rtsp://h/a/", Some("trackID=0")),
            "rtsp://h/a/trackID=0"
        );
        assert_eq!(
            Target::join("rtsp://h/a", Some("trackID=1")),
            "rtsp://h/a/trackID=1"
        );
        assert_eq!(Target::join("rtsp://h/a", Some("rtsp://o/t")), "rtsp://o/t");
        assert_eq!(Target::join("rtsp://h/a", Some("*")), "rtsp://h/a");
    }
}
