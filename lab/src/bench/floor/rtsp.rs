//! Just enough of an RTSP server for `vigil bench live` to play the floor: OPTIONS,
//! DESCRIBE (a fixed H.264 SDP), SETUP (TCP interleaved 0-1, or UDP from the one shared
//! server port pair), PLAY, and 200 for anything else. After PLAY a TCP connection is
//! handed whole to the sender thread; a UDP viewer's connection is read until it closes,
//! which ends the viewer. No state machine, no checks: this is a benchmark's instrument,
//! on loopback, not a server.

use super::fanout::Event;
use anyhow::Context;
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vigil_proto::rtsp::{
    parse_frame, parse_transports, Frame, Limits, LowerTransport, Method, Request, Response,
    StatusCode,
};

/// What every viewer is answered.
pub struct Answers {
    sdp: String,
    udp_port: u16,
    sessions: AtomicU64,
}

impl Answers {
    pub fn new(payload_type: u8, udp_port: u16) -> Answers {
        let pt = payload_type;
        Answers {
            sdp: format!(
                "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=floor\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
                 m=video 0 RTP/AVP {pt}\r\na=rtpmap:{pt} H264/90000\r\n\
                 a=fmtp:{pt} packetization-mode=1\r\na=control:trackID=0\r\n"
            ),
            udp_port,
            sessions: AtomicU64::new(1),
        }
    }
}

/// Accept viewers until the listener fails.
pub async fn accept(
    listener: TcpListener,
    answers: Arc<Answers>,
    tx: Sender<Event>,
) -> anyhow::Result<()> {
    loop {
        let (stream, peer) = listener.accept().await.context("accept")?;
        let (answers, tx) = (answers.clone(), tx.clone());
        tokio::spawn(async move {
            if let Err(e) = viewer(stream, peer, &answers, tx).await {
                eprintln!("vigil bench floor: viewer {peer}: {e:#}");
            }
        });
    }
}

/// How a viewer asked for its media.
enum Media {
    None,
    Tcp,
    Udp(SocketAddr),
}

async fn viewer(
    mut stream: TcpStream,
    peer: SocketAddr,
    answers: &Answers,
    tx: Sender<Event>,
) -> anyhow::Result<()> {
    let mut buf = BytesMut::with_capacity(4096);
    let session = answers.sessions.fetch_add(1, Ordering::Relaxed).to_string();
    let mut media = Media::None;
    let mut playing = false;
    loop {
        let Some(req) = next_request(&mut stream, &mut buf).await? else {
            break;
        };
        let cseq = req.cseq().unwrap_or(0).to_string();
        let mut resp = Response::new(StatusCode::OK).header("CSeq", cseq);
        let mut play = false;
        match req.method {
            Method::Options => {
                resp = resp.header(
                    "Public",
                    "OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER",
                );
            }
            Method::Describe => {
                let base = format!("{}/", req.uri.trim_end_matches('/'));
                resp = resp
                    .header("Content-Base", base)
                    .body("application/sdp", answers.sdp.clone().into_bytes());
            }
            Method::Setup => {
                let offer = req
                    .headers
                    .get("Transport")
                    .and_then(|v| parse_transports(v).ok())
                    .and_then(|v| v.into_iter().next());
                let (answer, m) = match offer {
                    Some(t) if t.lower == LowerTransport::Tcp => (
                        "RTP/AVP/TCP;unicast;interleaved=0-1".to_string(),
                        Media::Tcp,
                    ),
                    Some(t) => match t.client_port {
                        Some((rtp, rtcp)) => (
                            format!(
                                "RTP/AVP;unicast;client_port={rtp}-{rtcp};server_port={}-{}",
                                answers.udp_port,
                                answers.udp_port + 1
                            ),
                            Media::Udp(SocketAddr::new(peer.ip(), rtp)),
                        ),
                        None => (String::new(), Media::None),
                    },
                    None => (String::new(), Media::None),
                };
                if matches!(m, Media::None) {
                    resp = Response::new(StatusCode::UNSUPPORTED_TRANSPORT)
                        .header("CSeq", req.cseq().unwrap_or(0).to_string());
                } else {
                    media = m;
                    resp = resp
                        .header("Transport", answer)
                        .header("Session", format!("{session};timeout=3600"));
                }
            }
            Method::Play => {
                // One session timeout the load generator never reaches: it sends no
                // keepalive in a run, so the sender never reads a TCP viewer again.
                resp = resp
                    .header("Session", format!("{session};timeout=3600"))
                    .header("Range", "npt=now-");
                play = !playing;
            }
            Method::Teardown => {
                resp = resp.header("Session", session.clone());
                stream.write_all(&resp.to_bytes()).await?;
                break;
            }
            _ => {}
        }
        stream.write_all(&resp.to_bytes()).await?;
        if !play {
            continue;
        }
        match media {
            Media::Tcp => {
                let stream = stream.into_std().context("the connection")?;
                tx.send(Event::TcpPlay(stream))
                    .map_err(|_| anyhow::anyhow!("the sender thread ended"))?;
                return Ok(());
            }
            Media::Udp(to) => {
                playing = true;
                tx.send(Event::UdpPlay(to))
                    .map_err(|_| anyhow::anyhow!("the sender thread ended"))?;
            }
            Media::None => {}
        }
    }
    if let (true, Media::Udp(to)) = (playing, media) {
        let _ = tx.send(Event::UdpGone(to));
    }
    Ok(())
}

/// The next request on the connection; None when it closed. Interleaved input (RTCP) and
/// stray responses are skipped.
async fn next_request(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
) -> anyhow::Result<Option<Request>> {
    let limits = Limits::default();
    loop {
        match parse_frame(buf, &limits) {
            Ok(Some((frame, used))) => {
                let _ = buf.split_to(used);
                if let Frame::Request(req) = frame {
                    return Ok(Some(req));
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => anyhow::bail!("bad RTSP input: {e}"),
        }
        if stream.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdp_parses_as_one_h264_track() {
        let a = Answers::new(96, 29_000);
        let sdp = vigil_proto::sdp::parse(&a.sdp).unwrap();
        assert_eq!(sdp.media.len(), 1);
        assert_eq!(sdp.media[0].codec(), vigil_proto::codec::Codec::H264);
        assert_eq!(sdp.media[0].control.as_deref(), Some("trackID=0"));
    }
}
