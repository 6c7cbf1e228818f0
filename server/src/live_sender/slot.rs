//! One viewer in its stream's group (`group`): its reader, its outs, its timers, and what
//! one pass of the group's walk does for it (`Slot::pump`: the hub's packets rewritten for
//! this viewer and sent; its sender reports and BYE). The group decides when; the slot
//! decides what the viewer gets.

use super::{Outs, Progress, Pumped, TcpOut};
use crate::live::prefetch::{prefetch, prefetch_slice, prefetch_val};
use crate::live::reader::{OutPacket, Reader, SharedRead};
use crate::net::tcp::{interleaved_frame, interleaved_headers, interleaved_payload};
use crate::net::tcp_sink::{Piece, TcpSink};
use crate::net::udp::{SendSocket, BYE_AFTER_LAST_RTP};
use crate::net::udp_fanout::Fanout;
use crate::node::{Node, SessionInfo};
use crate::playback::task::{wall_us, UdpOut, UdpVia};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::oneshot;
use tracing::{info, Span};
use vigil_proto::rtcp;

/// Packets one viewer takes from the hub per pass (a keyframe of a 2 Mb/s camera is ≈ 30).
const PUMP_BATCH: usize = 256;
/// How often a viewer's RTCP sender report goes out.
const SR_EVERY: Duration = Duration::from_secs(5);

/// What a viewer's handle and its group share.
#[derive(Default)]
pub(super) struct Shared {
    pub finished: AtomicBool,
    /// The viewer's state when its group ended it on its own (the publisher ended, the node
    /// shuts down): what a later `stop` gets.
    pub left: Mutex<Option<Pumped>>,
}

impl Shared {
    pub fn left(&self) -> MutexGuard<'_, Option<Pumped>> {
        self.left.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One viewer in its group.
pub(super) struct Slot {
    pub(super) id: u64,
    info: Arc<SessionInfo>,
    pub(super) reader: Reader,
    pub(super) outs: Outs,
    first_sent: Option<oneshot::Sender<i64>>,
    last_sent_us: Option<i64>,
    progress: Option<Progress>,
    next_report: Instant,
    next_sr: Instant,
    pub(super) paused: bool,
    /// A TCP viewer whose socket has not taken its last batch: skipped until it has.
    pub(super) blocked: bool,
    /// The publisher ended: the BYE goes out then (the receiver reads its backlog first).
    bye_at: Option<Instant>,
    /// The viewer's session span, for what is logged of it.
    span: Span,
    shared: Arc<Shared>,
    /// The reader's packet and byte counts last added to the session's (`info`): added
    /// every tick, not every frame — the session's counters sit in memory the walk would
    /// otherwise touch once per viewer per frame for nothing else.
    counted: (u64, u64),
}

impl Slot {
    pub fn new(
        id: u64,
        info: Arc<SessionInfo>,
        reader: Reader,
        outs: Outs,
        first_sent: Option<oneshot::Sender<i64>>,
        progress: Option<Progress>,
        shared: Arc<Shared>,
    ) -> Slot {
        let now = Instant::now();
        let counted = (reader.packets_sent, reader.bytes_sent);
        Slot {
            id,
            info,
            reader,
            outs,
            first_sent,
            last_sent_us: None,
            progress,
            next_report: now,
            next_sr: now,
            paused: false,
            blocked: false,
            bye_at: None,
            span: Span::current(),
            shared,
            counted,
        }
    }

    /// Adds what the viewer was sent since the last call to its session's counters.
    fn count(&mut self) {
        let now = (self.reader.packets_sent, self.reader.bytes_sent);
        if now == self.counted {
            return;
        }
        let info = &self.info;
        info.packets
            .fetch_add(now.0 - self.counted.0, Ordering::Relaxed);
        info.bytes
            .fetch_add(now.1 - self.counted.1, Ordering::Relaxed);
        self.counted = now;
    }

    /// Its BYE is due (the publisher ended and the viewer has had the time to read its
    /// backlog): the group ends it.
    pub(super) fn bye_due(&self, now: Instant) -> bool {
        self.bye_at.is_some_and(|t| t <= now)
    }

    /// The group's tick for this viewer: its counters into its session, its sender
    /// reports and its progress report when due.
    pub(super) async fn tick(&mut self, node: &Node, now: Instant) {
        self.count();
        if self.next_sr <= now {
            self.next_sr = now + SR_EVERY;
            self.send_rtcp(node, false).await;
        }
        if let Some(p) = &self.progress {
            if self.next_report <= now {
                self.next_report = now + p.every;
                let state = self.reader.handoff(self.last_sent_us);
                *p.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(state);
            }
        }
    }

    /// What [`Slot::tick`] adds to, asked for ahead of its turn ([`crate::live::prefetch`]).
    pub(super) fn prefetch_counters(&self) {
        prefetch_val(&self.info.packets);
        prefetch_val(&self.info.bytes);
    }

    pub(super) fn sending(&self) -> bool {
        !self.paused && self.bye_at.is_none()
    }

    /// Sending, and not held back by its socket: what the group waits on the hub for.
    pub(super) fn ready(&self) -> bool {
        self.sending() && !self.blocked
    }

    /// What a pump touches one pointer away from the slot: the reader's tracks, the TCP
    /// sink and its channels, or the UDP outs.
    pub(super) fn prefetch_owned(&self) {
        self.reader.prefetch();
        match &self.outs {
            Outs::Tcp(t) => {
                prefetch(Arc::as_ptr(&t.sink), std::mem::size_of::<TcpSink>());
                prefetch_slice(&t.rtp);
            }
            Outs::Udp(outs) => prefetch_slice(outs),
        }
    }

    /// Two pointers away: a UDP viewer's sockets, named by its outs.
    pub(super) fn prefetch_sockets(&self) {
        if let Outs::Udp(outs) = &self.outs {
            for o in outs {
                if let UdpVia::Socket { rtp, .. } = &o.via {
                    prefetch(Arc::as_ptr(rtp), std::mem::size_of::<SendSocket>());
                }
            }
        }
    }

    /// Sends what the hub has for this viewer (up to a batch); when the publisher ended and
    /// the viewer has had everything, sets the time of its BYE.
    pub(super) async fn pump(&mut self, node: &Node, scratch: &mut Scratch) {
        let Scratch {
            read,
            out,
            per_track,
            headers,
            fanout,
        } = scratch;
        if let Outs::Tcp(t) = &self.outs {
            if t.sink.busy_or_arm() {
                self.blocked = true;
                return;
            }
        }
        out.clear();
        let skips = self.reader.skips;
        let consumed = self.reader.poll_shared(read, out, PUMP_BATCH);
        if self.reader.skips != skips {
            Node::bump(&node.counters.reader_skips);
        }
        if consumed == 0 {
            if self.reader.stream().is_finished() {
                self.span.in_scope(|| info!("publisher ended the stream"));
                // A TCP viewer's bytes arrive in order: its BYE needs no wait.
                let linger = match self.outs {
                    Outs::Udp(_) => BYE_AFTER_LAST_RTP,
                    Outs::Tcp(_) => Duration::ZERO,
                };
                self.bye_at = Some(Instant::now() + linger);
            }
            return;
        }
        if out.is_empty() {
            return;
        }
        match &self.outs {
            Outs::Udp(outs) => send_udp(outs, out, per_track, fanout).await,
            Outs::Tcp(t) => send_tcp(t, out, headers),
        }
        let now = wall_us();
        self.last_sent_us = Some(now);
        if let Some(tx) = self.first_sent.take() {
            let _ = tx.send(now);
        }
    }

    /// The viewer's sender reports, or its BYE (every set-up track named).
    async fn send_rtcp(&self, node: &Node, bye: bool) {
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let reports = if bye {
            self.reader.goodbye_reports(Instant::now(), wall)
        } else {
            self.reader.sender_reports(Instant::now(), wall)
        };
        let cname = &node.config.node.id;
        for (track, sr) in reports {
            let pkt = if bye {
                rtcp::goodbye(&sr, cname)
            } else {
                rtcp::sender_report(&sr, cname)
            };
            match &self.outs {
                Outs::Udp(outs) => {
                    if let Some(o) = outs.iter().find(|o| o.track == track) {
                        o.send_rtcp(&pkt).await;
                    }
                }
                Outs::Tcp(t) => {
                    if let Some(ch) = t.rtcp.get(track).copied().flatten() {
                        t.sink.send(&[Piece::Copy(&interleaved_frame(ch, &pkt))]);
                    }
                }
            }
        }
    }

    /// A viewer whose publisher ended ends its RTSP session as it leaves the group, whatever
    /// makes it leave (its BYE's time, a TEARDOWN, a handoff, the node's shutdown).
    pub(super) fn end_session_if_ended(&self) {
        if self.bye_at.is_some() {
            self.info.cancel.cancel();
        }
    }

    /// The viewer ends here with an RTCP BYE.
    pub(super) async fn bye(self, node: &Node) {
        self.end_session_if_ended();
        self.send_rtcp(node, true).await;
        self.finish();
    }

    /// The viewer leaves its group: its state where its handle finds it. `ended`: the
    /// group ended it, its BYE sent.
    pub(super) fn into_pumped(mut self, ended: bool) -> Pumped {
        self.count();
        self.shared.finished.store(true, Ordering::Release);
        Pumped {
            reader: self.reader,
            last_sent_us: self.last_sent_us,
            ended,
        }
    }

    /// The viewer ends here, its BYE sent: its state kept for a later `stop`.
    pub(super) fn finish(self) {
        let shared = self.shared.clone();
        let pumped = self.into_pumped(true);
        *shared.left() = Some(pumped);
    }
}

/// A group's buffers, kept from frame to frame.
pub(super) struct Scratch {
    /// The frame's read of the hub, which the viewers at one cursor share.
    pub(super) read: SharedRead,
    out: Vec<OutPacket>,
    per_track: Vec<OutPacket>,
    /// A TCP viewer's frame headers.
    headers: Vec<[u8; 16]>,
    /// What the walk sends from the node's shared UDP socket, sent at its end
    /// ([`Scratch::flush`]).
    fanout: Fanout,
}

impl Scratch {
    /// Sends what the walk queued for the viewers on shared UDP ports.
    pub(super) async fn flush(&mut self) {
        if !self.fanout.is_empty() {
            self.fanout.flush().await;
        }
    }
}

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch {
            read: SharedRead::default(),
            out: Vec::with_capacity(PUMP_BATCH),
            per_track: Vec::with_capacity(PUMP_BATCH),
            headers: Vec::with_capacity(PUMP_BATCH),
            fanout: Fanout::default(),
        }
    }
}

/// A batch to a UDP viewer, each track to its own ports: sent now from a socket of the
/// viewer's own, queued in `fanout` for the end of the walk from the node's shared one.
async fn send_udp(
    outs: &[UdpOut],
    out: &mut Vec<OutPacket>,
    per_track: &mut Vec<OutPacket>,
    fanout: &mut Fanout,
) {
    for o in outs {
        let shared = match &o.via {
            UdpVia::Socket { rtp, .. } if rtp.is_shared() && o.srtp.is_none() => Some(rtp),
            _ => None,
        };
        // A batch of one track (a camera without audio) goes as it is, uncloned.
        if out.iter().all(|p| p.track == o.track) {
            match shared {
                // The viewer's packets move to the batch (the buffer is refilled next time).
                Some(sock) => fanout.push(sock, o.dest_rtp, out.drain(..)).await,
                None => o.send_rtp(out).await,
            }
            continue;
        }
        per_track.clear();
        per_track.extend(out.iter().filter(|p| p.track == o.track).cloned());
        if per_track.is_empty() {
            continue;
        }
        match shared {
            Some(sock) => fanout.push(sock, o.dest_rtp, per_track.drain(..)).await,
            None => o.send_rtp(per_track).await,
        }
    }
}

/// A batch to a TCP viewer as interleaved frames, the payloads by reference. A failed
/// socket is the connection task's to notice (its read ends too); the viewer leaves then.
fn send_tcp(t: &TcpOut, out: &[OutPacket], headers: &mut Vec<[u8; 16]>) {
    interleaved_headers(headers, out, &t.rtp);
    let mut pieces = Vec::with_capacity(out.len() * 2);
    for (h, p) in headers.iter().zip(out) {
        pieces.push(Piece::Copy(h));
        let payload = interleaved_payload(p);
        pieces.push(if payload.len() == p.payload.len() {
            Piece::Shared(&p.payload)
        } else {
            Piece::Copy(payload)
        });
    }
    t.sink.send(&pieces);
}
