//! Media tasks of UDP sessions: a viewer's pump, a publisher's receivers.

use super::session::Activity;
use crate::ingest::Producer;
use crate::live::handoff::LiveHandoff;
use crate::live::reader::{OutPacket, Reader};
use crate::net::ports::UdpPair;
use crate::net::udp::linger_before_bye;
use crate::node::{Node, SessionInfo};
use crate::playback::task::{wall_us, UdpOut, UdpVia};
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, Instrument};
use vigil_proto::rtcp;

/// One set-up track of a UDP viewer.
pub struct UdpTrack {
    pub track: usize,
    pub pair: UdpPair,
    pub client_rtp: SocketAddr,
    pub client_rtcp: SocketAddr,
}

/// A live UDP viewer's media: its server ports (announced at SETUP; the client's RTCP
/// arrives there wherever its media comes from) and the sender, here or on the node the
/// viewer moved to (a `live::sender::RemoteLiveSender`).
pub struct UdpPlay {
    pub outs: Vec<UdpOut>,
    rtcp_watch: CancellationToken,
    pub sender: LiveSender,
    /// The viewer's PAUSE: a sender that takes over starts paused too.
    pub paused: bool,
}

/// Who sends a live UDP viewer's media.
pub enum LiveSender {
    Local(LivePump),
    Remote(Box<dyn crate::live::sender::RemoteLiveSender>),
    /// Between the two halves of a move.
    None,
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
        let outs: Vec<UdpOut> = tracks
            .into_iter()
            .map(|t| UdpOut {
                track: t.track,
                via: UdpVia::Socket {
                    rtp: Arc::new(t.pair.rtp),
                    rtcp: Arc::new(t.pair.rtcp),
                },
                dest_rtp: t.client_rtp,
                dest_rtcp: t.client_rtcp,
            })
            .collect();
        // The viewer's RTCP (receiver reports) keeps the session alive.
        for o in &outs {
            if let UdpVia::Socket { rtcp, .. } = &o.via {
                node.tasks.spawn(watch_rtcp(
                    rtcp.clone(),
                    o.dest_rtcp.ip(),
                    activity.clone(),
                    node.clone(),
                    rtcp_watch.clone(),
                ));
            }
        }
        let pump = LivePump::spawn(node, info, reader, outs.clone(), None, None);
        UdpPlay {
            outs,
            rtcp_watch,
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

/// What a stopped pump leaves: the viewer's reader (where it is in the hub, its RTP
/// identity) and when its last packet left (µs since the epoch).
pub struct Pumped {
    pub reader: Reader,
    pub last_sent_us: Option<i64>,
}

/// A live viewer's pump: hub → the viewer's identity → UDP.
pub struct LivePump {
    end: CancellationToken,
    handoff: CancellationToken,
    paused: watch::Sender<bool>,
    handle: tokio::task::JoinHandle<Pumped>,
}

impl LivePump {
    /// `first_sent` learns when the first packet left (µs since the epoch); `progress`, if
    /// given, gets the viewer's state every period (a moved viewer's sender reports it to
    /// the steering node, which continues from it if this node dies).
    pub fn spawn(
        node: Arc<Node>,
        info: Arc<SessionInfo>,
        reader: Reader,
        outs: Vec<UdpOut>,
        first_sent: Option<tokio::sync::oneshot::Sender<i64>>,
        progress: Option<Progress>,
    ) -> LivePump {
        let (end, handoff) = (CancellationToken::new(), CancellationToken::new());
        let (paused, paused_rx) = watch::channel(false);
        let task = PlayTask {
            node: node.clone(),
            info,
            reader,
            outs,
            first_sent,
            last_sent_us: None,
            progress,
        };
        let handle = node.tasks.spawn(
            task.run(end.clone(), handoff.clone(), paused_rx)
                .in_current_span(),
        );
        LivePump {
            end,
            handoff,
            paused,
            handle,
        }
    }

    pub fn set_paused(&self, paused: bool) {
        let _ = self.paused.send(paused);
    }

    /// Stop for good (RTCP BYE).
    pub fn end(self) {
        self.end.cancel();
    }

    /// Stop without a BYE (the stream goes on from another sender) and give the state back.
    pub async fn stop(self) -> Option<Pumped> {
        self.handoff.cancel();
        self.handle.await.ok()
    }

    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

struct PlayTask {
    node: Arc<Node>,
    info: Arc<SessionInfo>,
    reader: Reader,
    outs: Vec<UdpOut>,
    first_sent: Option<tokio::sync::oneshot::Sender<i64>>,
    last_sent_us: Option<i64>,
    progress: Option<Progress>,
}

/// Where a pump publishes its viewer's state, and how often: the digests of the last
/// packets cost a few µs, so not per batch.
pub struct Progress {
    pub state: Arc<Mutex<Option<LiveHandoff>>>,
    pub every: Duration,
}

const PUMP_BATCH: usize = 256;

impl PlayTask {
    async fn run(
        mut self,
        end: CancellationToken,
        handoff: CancellationToken,
        mut paused: watch::Receiver<bool>,
    ) -> Pumped {
        let mut out: Vec<OutPacket> = Vec::with_capacity(PUMP_BATCH);
        let mut per_track: Vec<OutPacket> = Vec::with_capacity(PUMP_BATCH);
        let mut sr = tokio::time::interval(Duration::from_secs(5));
        let mut report = tokio::time::interval(
            self.progress
                .as_ref()
                .map_or(Duration::from_secs(3600), |p| p.every),
        );
        report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut bye = true;
        loop {
            let is_paused = *paused.borrow();
            tokio::select! {
                biased;
                _ = handoff.cancelled() => { bye = false; break }
                _ = end.cancelled() => break,
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
                        tokio::select! {
                            biased;
                            _ = handoff.cancelled() => bye = false,
                            _ = self.node.shutdown.cancelled() => {}
                            _ = linger_before_bye(&end) => {}
                        }
                        self.info.cancel.cancel();
                        break;
                    }
                    self.info.packets.fetch_add(out.len() as u64, Ordering::Relaxed);
                    let bytes: u64 = out.iter().map(|p| 12 + p.payload.len() as u64).sum();
                    self.info.bytes.fetch_add(bytes, Ordering::Relaxed);
                    for o in &self.outs {
                        per_track.clear();
                        per_track.extend(out.iter().filter(|p| p.track == o.track).cloned());
                        if !per_track.is_empty() {
                            o.send_rtp(&per_track).await;
                        }
                    }
                    if !out.is_empty() {
                        let now = wall_us();
                        self.last_sent_us = Some(now);
                        if let Some(tx) = self.first_sent.take() {
                            let _ = tx.send(now);
                        }
                    }
                }
                _ = sr.tick() => self.send_rtcp(false).await,
                _ = report.tick(), if self.progress.is_some() => {
                    if let Some(p) = &self.progress {
                        let now = self.reader.handoff(self.last_sent_us);
                        *p.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
                    }
                }
            }
        }
        if bye {
            self.send_rtcp(true).await;
        }
        Pumped {
            reader: self.reader,
            last_sent_us: self.last_sent_us,
        }
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
            if let Some(o) = self.outs.iter().find(|o| o.track == track) {
                o.send_rtcp(&pkt).await;
            }
        }
    }
}

/// Count the client's RTCP as activity; count garbage. Only RTCP from the client's own
/// address counts (as only a publisher's address may inject its media): anyone else who
/// learnt the port could otherwise keep the session, and its slot, alive forever.
pub async fn watch_rtcp(
    sock: Arc<UdpSocket>,
    client_ip: std::net::IpAddr,
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
                    if from.ip() == client_ip && rtcp::parse_compound(&buf[..n]).is_ok() {
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
                t.client_rtcp.ip(),
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
