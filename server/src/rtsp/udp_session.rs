//! Media tasks of UDP sessions: a live viewer's ports and RTCP watch (its sender is
//! `live_sender`'s; its ports its own or the node's shared pair, `shared_ports`), a
//! publisher's receivers.

use super::session::Activity;
use super::shared_ports::{Registration, SharedPair};
use crate::ingest::Producer;
use crate::live::reader::Reader;
use crate::live_sender::{LivePump, LiveSender};
use crate::net::ports::UdpPair;
use crate::net::srtp::Track as Srtp;
use crate::net::udp::SendSocket;
use crate::node::{Node, SessionInfo};
use crate::playback::task::{UdpOut, UdpVia};
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use vigil_proto::rtcp;

/// A UDP track's server ports.
pub enum TrackPorts {
    /// Bound for this session alone.
    Own(UdpPair),
    /// The node's pair every live UDP viewer on the address shares.
    Shared(Arc<SharedPair>),
}

impl TrackPorts {
    pub fn rtp_port(&self) -> u16 {
        match self {
            TrackPorts::Own(p) => p.rtp_port,
            TrackPorts::Shared(p) => p.rtp_port,
        }
    }

    /// The pair of a track whose session SETUP never shares (a publisher's: its port says
    /// whose RTP it is; a playback's: its sender paces alone). Shared ports there would be
    /// a SETUP bug: logged, and the track left out.
    pub fn into_own(self, track: usize) -> Option<UdpPair> {
        match self {
            TrackPorts::Own(pair) => Some(pair),
            TrackPorts::Shared(_) => {
                tracing::warn!(
                    track,
                    "a publisher's or playback's track on shared ports: left out"
                );
                None
            }
        }
    }
}

/// One set-up track of a UDP viewer.
pub struct UdpTrack {
    pub track: usize,
    pub pair: TrackPorts,
    pub client_rtp: SocketAddr,
    pub client_rtcp: SocketAddr,
    /// The SSRC this node sends the track with (a viewer's RTCP reports on it).
    pub ssrc: Option<u32>,
    /// SRTP of an RTSPS viewer that set up `RTP/SAVP`.
    pub srtp: Option<Arc<Srtp>>,
}

/// A live UDP viewer's media: its server ports (announced at SETUP; the client's RTCP
/// arrives there wherever its media comes from) and the sender, here or on the node the
/// viewer moved to (a `live_sender::RemoteLiveSender`).
pub struct UdpPlay {
    pub outs: Vec<UdpOut>,
    rtcp_watch: CancellationToken,
    /// The viewer's place in the shared ports' RTCP routes (tracks on them), held while
    /// the session lasts.
    _routes: Vec<Registration>,
    pub sender: LiveSender,
    /// The viewer's PAUSE: a sender that takes over starts paused too.
    pub paused: bool,
}

impl UdpPlay {
    pub fn spawn(
        node: Arc<Node>,
        info: Arc<SessionInfo>,
        reader: Reader,
        tracks: Vec<UdpTrack>,
        activity: Arc<Activity>,
    ) -> UdpPlay {
        let rtcp_watch = CancellationToken::new();
        let mut outs = Vec::with_capacity(tracks.len());
        let mut routes = Vec::new();
        for t in tracks {
            let via = match t.pair {
                TrackPorts::Own(pair) => {
                    let rtcp = Arc::new(pair.rtcp);
                    // The viewer's RTCP (receiver reports) keeps the session alive.
                    node.tasks.spawn(watch_rtcp(
                        rtcp.clone(),
                        t.client_rtcp.ip(),
                        t.srtp.clone(),
                        activity.clone(),
                        node.clone(),
                        rtcp_watch.clone(),
                    ));
                    UdpVia::Socket {
                        rtp: Arc::new(pair.rtp.connected_to(t.client_rtp)),
                        rtcp,
                    }
                }
                TrackPorts::Shared(pair) => {
                    routes.push(pair.register(t.client_rtcp, t.ssrc, activity.clone()));
                    UdpVia::Socket {
                        rtp: pair.rtp.clone(),
                        rtcp: pair.rtcp.clone(),
                    }
                }
            };
            outs.push(UdpOut {
                track: t.track,
                via,
                dest_rtp: t.client_rtp,
                dest_rtcp: t.client_rtcp,
                srtp: t.srtp,
            });
        }
        let pump = LivePump::spawn(node, info, reader, outs.clone(), None, None);
        UdpPlay {
            outs,
            rtcp_watch,
            _routes: routes,
            sender: LiveSender::Local(pump),
            paused: false,
        }
    }

    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
        match &self.sender {
            LiveSender::Local(p) => p.set_paused(paused),
            // A moved viewer: the node sending it pauses (or resumes) it.
            LiveSender::Remote(r) => r.set_paused(paused),
            LiveSender::None => {}
        }
    }

    /// Session end: the sender sends its BYE and stops, wherever it is.
    pub fn stop(self) {
        match self.sender {
            LiveSender::Local(p) => p.end(),
            LiveSender::Remote(r) => r.release(),
            LiveSender::None => {}
        }
        self.rtcp_watch.cancel();
    }
}

/// Count the client's RTCP as activity; count garbage. Only RTCP from the client's own
/// address counts (as only a publisher's address may inject its media): anyone else who
/// learnt the port could otherwise keep the session, and its slot, alive forever. With
/// SRTP, only SRTCP that passes the client's key counts (a forger on the client's
/// address fails the tag).
pub async fn watch_rtcp(
    sock: Arc<UdpSocket>,
    client_ip: std::net::IpAddr,
    srtp: Option<Arc<Srtp>>,
    activity: Arc<Activity>,
    node: Arc<Node>,
    cancel: CancellationToken,
) {
    let mut buf = vec![0u8; 2048];
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = sock.recv_from(&mut buf) => match r {
                Ok((n, from)) => {
                    let plain = match &srtp {
                        Some(t) => t.unprotect_rtcp(&buf[..n]),
                        None => Some(buf[..n].to_vec()),
                    };
                    let valid = plain.is_some_and(|p| rtcp::parse_compound(&p).is_ok());
                    if from.ip() == client_ip && valid {
                        activity.touch();
                    } else {
                        Node::bump(&node.counters.rtp_garbage);
                    }
                }
                // ECONNREFUSED from an ICMP error of an earlier send: keep listening.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }
}

/// Handle to the receive tasks of a UDP publisher.
pub struct UdpRecord {
    cancel: CancellationToken,
    producer: Arc<Mutex<Producer>>,
}

impl UdpRecord {
    pub fn spawn(
        node: Arc<Node>,
        info: Arc<SessionInfo>,
        producer: Producer,
        tracks: Vec<UdpTrack>,
        activity: Arc<Activity>,
    ) -> UdpRecord {
        let cancel = CancellationToken::new();
        let producer = Arc::new(Mutex::new(producer));
        for t in tracks {
            let Some(pair) = t.pair.into_own(t.track) else {
                continue;
            };
            let rtcp = Arc::new(pair.rtcp);
            node.tasks.spawn(watch_rtcp(
                rtcp,
                t.client_rtcp.ip(),
                None,
                activity.clone(),
                node.clone(),
                cancel.clone(),
            ));
            node.tasks.spawn(
                receive_rtp(
                    node.clone(),
                    info.clone(),
                    producer.clone(),
                    t.track,
                    pair.rtp,
                    t.client_rtp.ip(),
                    activity.clone(),
                    cancel.clone(),
                )
                .in_current_span(),
            );
        }
        UdpRecord { cancel, producer }
    }

    /// Stop receiving and, with `finish`, end the stream for its readers.
    pub fn stop(&self, finish: bool) {
        self.cancel.cancel();
        if finish {
            self.producer
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .finish();
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn receive_rtp(
    node: Arc<Node>,
    info: Arc<SessionInfo>,
    producer: Arc<Mutex<Producer>>,
    track: usize,
    sock: SendSocket,
    client_ip: std::net::IpAddr,
    activity: Arc<Activity>,
    cancel: CancellationToken,
) {
    let sock = match sock.into_tokio() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("publisher's RTP port: {e}");
            return;
        }
    };
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        if buf.capacity() < 2048 {
            buf = BytesMut::with_capacity(64 * 1024);
        }
        let r = tokio::select! {
            _ = cancel.cancelled() => break,
            r = sock.recv_buf_from(&mut buf) => r,
        };
        let (n, from) = match r {
            Ok(x) => x,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let datagram = buf.split_to(n).freeze();
        // Only the publisher's address may inject media into its stream.
        if from.ip() != client_ip {
            Node::bump(&node.counters.rtp_garbage);
            continue;
        }
        activity.touch();
        info.packets.fetch_add(1, Ordering::Relaxed);
        info.bytes.fetch_add(n as u64, Ordering::Relaxed);
        let ok = producer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_raw(track, datagram);
        if !ok {
            Node::bump(&node.counters.rtp_garbage);
        }
    }
}
