//! A live UDP viewer's sender, whichever node runs it: this node's pump (`LivePump`: hub →
//! the viewer's RTP identity → UDP, RTCP SR/BYE, its reader given back when stopped for a
//! handoff) or the node the viewer moved to (`RemoteLiveSender`, implemented by migration).
//! Above the node (the pump reads `Node` and `SessionInfo`), below both `rtsp`, whose
//! viewers hold a `LiveSender`, and `migrate`, which moves it and runs a moved viewer's pump
//! (`migrate::host::live`): neither names the other for it.

use crate::live::handoff::LiveHandoff;
use crate::live::reader::{OutPacket, Reader};
use crate::net::udp::linger_before_bye;
use crate::node::command::MoveError;
use crate::node::{Node, SessionInfo};
use crate::playback::task::{wall_us, UdpOut};
use futures::future::BoxFuture;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, Instrument};
use vigil_proto::rtcp;

/// Who sends a live UDP viewer's media: this node's pump or the node the viewer moved to.
pub type LiveSender = crate::sender::Sender<LivePump, Box<dyn RemoteLiveSender>>;

/// The node sending a live viewer's media, seen from the node that steers it.
pub trait RemoteLiveSender: Send + Sync {
    /// The sending node's id.
    fn node(&self) -> &str;
    /// PAUSE (or the PLAY that resumes) of the viewer, carried to the sending node in the
    /// background: the RTSP answer does not wait on another node.
    fn set_paused(&self, paused: bool);
    /// Stop the viewer there after its last packet and get its state back (what a sender
    /// that continues it needs). On an error the sender there goes on.
    fn stop(&self) -> BoxFuture<'_, Result<LiveHandoff, MoveError>>;
    /// The viewer's state as the sending node last reported it (its heartbeat answer), and
    /// when that report came; taken once (the node is gone, the viewer comes home).
    fn take_last(&self) -> Option<(LiveHandoff, Instant)>;
    /// Forget the viewer there (in the background).
    fn release(self: Box<Self>);
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
