//! A hand-driven RTSP connection, for exact requests, malformed input and interleaved media.

use std::net::SocketAddr;
use std::time::Duration;

/// What a raw RTSP connection received.
#[derive(Debug)]
pub enum Incoming {
    Response(vigil_proto::rtsp::Response),
    Data {
        channel: u8,
        payload: bytes::Bytes,
    },
    /// The server closed the connection (EOF or reset).
    Closed,
}

/// A connection's byte stream: the socket itself, or TLS over it.
pub trait Io: std::io::Read + std::io::Write + Send {}
impl<T: std::io::Read + std::io::Write + Send> Io for T {}

/// A hand-driven RTSP connection over `std::net::TcpStream` (or TLS on it), for exact
/// requests, malformed input and reading interleaved media. Every read is bounded by a 5 s
/// socket timeout.
pub struct RtspConn {
    pub stream: std::net::TcpStream,
    io: Box<dyn Io>,
    buf: bytes::BytesMut,
    cseq: u32,
    /// Session id from the last response that carried one.
    pub session: Option<String>,
}

impl RtspConn {
    pub fn connect(addr: SocketAddr) -> RtspConn {
        let stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        let io = stream.try_clone().expect("clone the socket");
        RtspConn::over(stream, Box::new(io))
    }

    /// A connection whose bytes go through `io` (TLS over `stream`, or `stream` itself).
    pub fn over(stream: std::net::TcpStream, io: Box<dyn Io>) -> RtspConn {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .expect("write timeout");
        stream.set_nodelay(true).expect("nodelay");
        RtspConn {
            stream,
            io,
            buf: bytes::BytesMut::with_capacity(64 * 1024),
            cseq: 0,
            session: None,
        }
    }

    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        std::io::Write::write_all(&mut self.io, bytes)?;
        std::io::Write::flush(&mut self.io)
    }

    /// The next response or interleaved frame. A read timeout is an error (the server
    /// neither answered nor closed); EOF and connection reset are `Closed`.
    pub fn receive(&mut self) -> std::io::Result<Incoming> {
        use vigil_proto::rtsp::{parse_frame, Frame, Limits};
        let limits = Limits {
            max_header_bytes: 64 * 1024,
            max_body_bytes: 1 << 20,
        };
        loop {
            match parse_frame(&self.buf, &limits) {
                Ok(Some((frame, used))) => {
                    let _ = self.buf.split_to(used);
                    match frame {
                        Frame::Response(r) => return Ok(Incoming::Response(r)),
                        Frame::Interleaved { channel, payload } => {
                            return Ok(Incoming::Data { channel, payload })
                        }
                        Frame::Request(r) => {
                            return Err(std::io::Error::other(format!(
                                "server sent a request: {r:?}"
                            )))
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => return Err(std::io::Error::other(format!("unparsable answer: {e}"))),
            }
            let mut chunk = [0u8; 16 * 1024];
            match std::io::Read::read(&mut self.io, &mut chunk) {
                Ok(0) => return Ok(Incoming::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Ok(Incoming::Closed)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The next response, skipping interleaved data; None when the server closed.
    pub fn response(&mut self) -> std::io::Result<Option<vigil_proto::rtsp::Response>> {
        loop {
            match self.receive()? {
                Incoming::Response(r) => return Ok(Some(r)),
                Incoming::Data { .. } => {}
                Incoming::Closed => return Ok(None),
            }
        }
    }

    /// Send a request (CSeq added, and Session when one is known and not given) and wait
    /// for its answer. Panics if the server closes or does not answer.
    pub fn request(
        &mut self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<(&str, &str)>,
    ) -> vigil_proto::rtsp::Response {
        self.cseq += 1;
        let mut text = format!("{method} {url} RTSP/1.0\r\nCSeq: {}\r\n", self.cseq);
        for (k, v) in headers {
            text.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(s) = &self.session {
            if !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("Session"))
            {
                text.push_str(&format!("Session: {s}\r\n"));
            }
        }
        if let Some((ct, b)) = body {
            text.push_str(&format!(
                "Content-Type: {ct}\r\nContent-Length: {}\r\n",
                b.len()
            ));
            text.push_str("\r\n");
            text.push_str(b);
        } else {
            text.push_str("\r\n");
        }
        self.send(text.as_bytes())
            .unwrap_or_else(|e| panic!("{method} {url}: send: {e}"));
        let resp = self
            .response()
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"))
            .unwrap_or_else(|| panic!("{method} {url}: connection closed without an answer"));
        assert_eq!(
            resp.cseq(),
            Some(self.cseq),
            "{method} {url}: CSeq not echoed"
        );
        if let Some(id) = resp.session_id() {
            self.session = Some(id.to_string());
        }
        resp
    }

    /// DESCRIBE, SETUP every track (`trackID=N`) over TCP interleaved (channels 2N, 2N+1)
    /// and PLAY. Returns the DESCRIBE answer's SDP.
    pub fn play_tcp(&mut self, url: &str) -> String {
        let d = self.request("DESCRIBE", url, &[("Accept", "application/sdp")], None);
        assert_eq!(d.status.0, 200, "DESCRIBE {url}: {}", d.reason);
        let sdp = String::from_utf8_lossy(&d.body).into_owned();
        let tracks = sdp.lines().filter(|l| l.starts_with("m=")).count();
        for t in 0..tracks {
            let transport = format!("RTP/AVP/TCP;unicast;interleaved={}-{}", 2 * t, 2 * t + 1);
            let s = self.request(
                "SETUP",
                &format!("{url}/trackID={t}"),
                &[("Transport", &transport)],
                None,
            );
            assert_eq!(s.status.0, 200, "SETUP {url} track {t}: {}", s.reason);
        }
        let p = self.request("PLAY", url, &[("Range", "npt=0.000-")], None);
        assert_eq!(p.status.0, 200, "PLAY {url}: {}", p.reason);
        sdp
    }

    /// After an ANNOUNCE of one track on `url`: SETUP it over TCP interleaved (channels 0-1)
    /// to record, and RECORD — a raw publisher.
    pub fn record_tcp(&mut self, url: &str) {
        let r = self.request(
            "SETUP",
            &format!("{url}/trackID=0"),
            &[(
                "Transport",
                "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record",
            )],
            None,
        );
        assert_eq!(r.status.0, 200, "SETUP: {}", r.reason);
        let r = self.request("RECORD", url, &[("Range", "npt=0-")], None);
        assert_eq!(r.status.0, 200, "RECORD: {}", r.reason);
    }

    /// SETUP of `url`'s first track over UDP to `client_port` (RTP; RTCP the next port),
    /// then PLAY. Returns the SETUP answer (its `Transport` names the node's ports).
    pub fn play_udp(&mut self, url: &str, client_port: u16) -> vigil_proto::rtsp::Response {
        let transport = format!(
            "RTP/AVP;unicast;client_port={client_port}-{}",
            client_port + 1
        );
        let s = self.request(
            "SETUP",
            &format!("{url}/trackID=0"),
            &[("Transport", &transport)],
            None,
        );
        assert_eq!(s.status.0, 200, "SETUP {url} over UDP: {}", s.reason);
        let p = self.request("PLAY", url, &[], None);
        assert_eq!(p.status.0, 200, "PLAY {url}: {}", p.reason);
        s
    }
}

/// The node's RTP port from a SETUP answer's `Transport: …;server_port=RTP-RTCP`.
pub fn server_port(setup: &vigil_proto::rtsp::Response) -> u16 {
    let answer = setup
        .headers
        .get("Transport")
        .expect("Transport answer")
        .to_string();
    answer
        .split(';')
        .find_map(|p| p.strip_prefix("server_port="))
        .and_then(|p| p.split('-').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no server_port in {answer}"))
}

/// A minimal 2-track (H.264 + AAC) SDP for raw ANNOUNCE, controls `streamid=0` and `=1`.
pub const TWO_TRACK_SDP: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=test\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\
a=fmtp:96 packetization-mode=1;sprop-parameter-sets=Z2QADazZQUH7ARAAAAMAEAAAAwMg8UKZYA==,aO+Pyw==\r\n\
a=control:streamid=0\r\n\
m=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/44100/1\r\n\
a=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1208\r\n\
a=control:streamid=1\r\n";

/// The status of a DESCRIBE of `path` on `node` (404: no such camera, or a disabled one).
pub fn describe_status(node: &crate::Node, path: &str) -> u16 {
    let mut c = RtspConn::connect(node.rtsp);
    c.request(
        "DESCRIBE",
        &node.url(path),
        &[("Accept", "application/sdp")],
        None,
    )
    .status
    .0
}
