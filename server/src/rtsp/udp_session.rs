//! Media tasks of UDP sessions: a viewer's pump, a publisher's receivers.

use super::session::Activity;
use crate::ingest::Producer;
use crate::live::reader::{OutPacket, Reader};
use crate::net::ports::UdpPair;
use crate::net::udp::send_batch;
use crate::node::{Node, SessionInfo};
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, Instrument};
use vigil_proto::rtcp;

/// One set-up track of a UDP viewer.
pub struct UdpTrack {
    pub track: usize,
    pub pair: UdpPair,
    pub client_rtp: SocketAddr,
    pub client_rtcp: SocketAddr,
}

/// Handle to a running UDP viewer task.
pub struct UdpPlay {
    cancel: CancellationToken,
    paused: watch::Sender<bool>,
}

impl UdpPlay {
    pub fn spawn(
        node: Arc<Node>,
        info: Arc<SessionInfo>,
        reader: Reader,
        tracks: Vec<UdpTrack>,
        activity: Arc<Activity>,
    ) -> UdpPlay {
        let cancel = CancellationToken::new();
        let (paused, paused_rx) = watch::channel(false);
        let task = PlayTask {
            node,
            info,
            reader,
            tracks: tracks
                .into_iter()
                .map(|t| {
                    let rtcp = Arc::new(t.pair.rtcp);
                    (
                        t.track,
                        Arc::new(t.pair.rtp),
                        rtcp,
                        t.client_rtp,
                        t.client_rtcp,
                    )
                })
                .collect(),
            activity,
        };
        let c = cancel.clone();
        task.node
            .tasks
            .clone()
            .spawn(task.run(c, paused_rx).in_current_span());
        UdpPlay { cancel, paused }
    }

    pub fn set_paused(&self, paused: bool) {
        let _ = self.paused.send(paused);
    }

    pub fn stop(&self) {
        self.cancel.cancel();
    }
}

type TrackSockets = (
    usize,
    Arc<UdpSocket>,
    Arc<UdpSocket>,
    SocketAddr,
    SocketAddr,
);

struct PlayTask {
    node: Arc<Node>,
    info: Arc<SessionInfo>,
    reader: Reader,
    tracks: Vec<TrackSockets>,
    activity: Arc<Activity>,
}

const PUMP_BATCH: usize = 256;

impl PlayTask {
    async fn run(mut self, cancel: CancellationToken, mut paused: watch::Receiver<bool>) {
        // The viewer's RTCP (receiver reports) keeps the session alive.
        for (_, _, rtcp_sock, _, _) in &self.tracks {
            self.node.tasks.spawn(watch_rtcp(
                rtcp_sock.clone(),
                self.activity.clone(),
                self.node.clone(),
                cancel.clone(),
            ));
        }
        let mut out: Vec<OutPacket> = Vec::with_capacity(PUMP_BATCH);
        let mut per_track: Vec<OutPacket> = Vec::with_capacity(PUMP_BATCH);
        let mut sr = tokio::time::interval(Duration::from_secs(5));
        loop {
            let is_paused = *paused.borrow();
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.node.shutdown.cancelled() => break,
                r = paused.changed() => if r.is_err() { break },
                _ = self.reader.wait(), if !is_paused => {
                    out.clear();
                    let skips = self.reader.skips;
                    let consumed = self.reader.poll_batch(&mut out, PUMP_BATCH);
                    if self.reader.skips != skips {
                        Node::bump(&self.node.counters.reader_skips);
                    }
                    if consumed == 0 && self.reader.stream().is_finished() {
                        info!("publisher ended the stream");
                        self.info.cancel.cancel();
                        break;
                    }
                    self.info.packets.fetch_add(out.len() as u64, Ordering::Relaxed);
                    let bytes: u64 = out.iter().map(|p| 12 + p.payload.len() as u64).sum();
                    self.info.bytes.fetch_add(bytes, Ordering::Relaxed);
                    for (track, rtp, _, dest, _) in &self.tracks {
                        per_track.clear();
                        per_track.extend(out.iter().filter(|p| p.track == *track).cloned());
                        if per_track.is_empty() {
                            continue;
                        }
                        if let Err(e) = send_batch(rtp, *dest, &per_track).await {
                            // ICMP port unreachable etc.: the viewer is gone; the session
                            // timeout will collect it.
                            debug!("udp send to {dest}: {e}");
                        }
                    }
                }
                _ = sr.tick() => self.send_rtcp(false).await,
            }
        }
        self.send_rtcp(true).await;
    }

    async fn send_rtcp(&self, bye: bool) {
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let reports = self.reader.sender_reports(Instant::now(), wall);
        let cname = &self.node.config.node.id;
        for (track, ssrc) in self.reader.ssrcs() {
            let sr = reports.iter().find(|(t, _)| *t == track).map(|(_, sr)| *sr);
            if sr.is_none() && !bye {
                continue;
            }
            let sr = sr.unwrap_or(rtcp::SenderReport {
                ssrc,
                ntp: rtcp::ntp_timestamp(wall),
                rtp_timestamp: 0,
                packet_count: 0,
                octet_count: 0,
            });
            let pkt = if bye {
                rtcp::goodbye(&sr, cname)
            } else {
                rtcp::sender_report(&sr, cname)
            };
            if let Some((_, _, sock, _, dest)) = self.tracks.iter().find(|t| t.0 == track) {
                let _ = sock.send_to(&pkt, *dest).await;
            }
        }
    }
}

/// Count the client's RTCP as activity; count garbage.
pub async fn watch_rtcp(
    sock: Arc<UdpSocket>,
    activity: Arc<Activity>,
    node: Arc<Node>,
    cancel: CancellationToken,
) {
    let mut buf = vec![0u8; 2048];
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = sock.recv_from(&mut buf) => match r {
                Ok((n, _)) => {
                    if rtcp::parse_compound(&buf[..n]).is_ok() {
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
            let rtcp = Arc::new(t.pair.rtcp);
            node.tasks.spawn(watch_rtcp(
                rtcp,
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
                    t.pair.rtp,
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
    sock: UdpSocket,
    client_ip: std::net::IpAddr,
    activity: Arc<Activity>,
    cancel: CancellationToken,
) {
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
