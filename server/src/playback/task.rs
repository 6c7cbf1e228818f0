//! One playback session's sender: reads frames segment by segment through the cache, paces
//! them by their timestamps divided by the Scale, re-packetises them and sends them with
//! the session's own RTP identity.
//!
//! RTP timestamps keep media-time spacing at every Scale (a client that accepted Scale runs
//! its own clock at that rate); sequence numbers and timestamps stay continuous across
//! seeks and pauses (RFC 2326 App. B) — the identity is handed back when the task stops
//! and reused by the next PLAY.
//!
//! What is due when, which frame is sent or skipped, where the range ends and how a gap
//! between recordings is cut out are decided by `vigil_session::pacer` (`Pacer`, `Step`,
//! `Gap`, `RateMeter`), with the clock read here and passed in; this task keeps the I/O:
//! storage reads, sleeps, sends, the hand-back.
//!
//! Every wait gives way to the stop (`cancel`): the connection that stops this task (PAUSE,
//! a seek, a move) awaits its end before it answers, and while it waits nobody empties a
//! TCP session's queue or answers the client. So the task takes room in the queue *before*
//! it numbers a frame (a stop met while the queue is full leaves that frame unsent and
//! unnumbered, the cursor on it), and a storage read it is waiting for is left to finish
//! in the background.

use crate::handoff::Anchor;
use crate::library::{CachedSegment, Library};
use crate::live::reader::OutPacket;
use crate::net::udp::{linger_before_bye, send_batch};
use crate::node::SessionInfo;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};
use vigil_proto::depacketize::packetize_payloads;
use vigil_proto::rtcp;
use vigil_proto::rtp::{write_header, RtpHeader};
use vigil_session::pacer::FrameFacts;
use vigil_session::{Gap, Pacer, RateMeter, Step};
use vigil_storage::{Segment, SegmentMeta};

/// At the live edge of a camera still recording, how long to wait for its next segment.
const LIVE_EDGE_WAIT: Duration = Duration::from_secs(12);

/// Per-track output state that outlives one PLAY (so pause/seek stay continuous).
pub use vigil_session::TrackOut;

/// Where the next frame to send is.
#[derive(Clone, Debug)]
pub struct Cursor {
    pub segment: SegmentMeta,
    pub frame: usize,
}

/// Media for a TCP-interleaved session, written by its connection task.
pub enum TcpOut {
    Packets(Vec<OutPacket>),
    /// RTCP compound packets per track (sender reports, BYE).
    Rtcp(Vec<(usize, Vec<u8>)>),
}

pub enum Sink {
    Tcp(mpsc::Sender<TcpOut>),
    Udp(Vec<UdpOut>),
}

#[derive(Clone)]
pub struct UdpOut {
    pub track: usize,
    pub via: UdpVia,
    pub dest_rtp: SocketAddr,
    pub dest_rtcp: SocketAddr,
    /// The track's SRTP (an RTSPS viewer that set up `RTP/SAVP`): everything sent is
    /// protected with it.
    pub srtp: Option<Arc<crate::net::srtp::Track>>,
}

impl UdpOut {
    /// Sends RTP packets of this track to the client (errors such as ICMP port unreachable
    /// are logged: the session's timeout collects a viewer that went away).
    pub async fn send_rtp(&self, packets: &[OutPacket]) {
        let packets = &*crate::net::srtp::maybe_protect(self.srtp.as_deref(), packets);
        let r = match &self.via {
            UdpVia::Socket { rtp, .. } => send_batch(rtp, self.dest_rtp, packets).await,
            UdpVia::Spoofed { raw, src_rtp, .. } => {
                raw.send_packets(*src_rtp, self.dest_rtp, packets)
            }
        };
        if let Err(e) = r {
            debug!("udp send to {}: {e}", self.dest_rtp);
        }
    }

    /// Sends one RTCP compound packet of this track to the client.
    pub async fn send_rtcp(&self, pkt: &[u8]) {
        let protected;
        let pkt = match &self.srtp {
            Some(t) => match t.protect_rtcp(pkt) {
                Some(p) => {
                    protected = p;
                    &protected[..]
                }
                None => return,
            },
            None => pkt,
        };
        let _ = match &self.via {
            UdpVia::Socket { rtcp, .. } => rtcp.send_to(pkt, self.dest_rtcp).await,
            UdpVia::Spoofed { raw, src_rtcp, .. } => raw.send(*src_rtcp, self.dest_rtcp, pkt),
        };
    }
}

/// How a UDP track's packets leave the node.
#[derive(Clone)]
pub enum UdpVia {
    /// From the session's own server ports (the ones announced at SETUP, or the sending
    /// node's own after a migration in `own` mode).
    Socket {
        rtp: Arc<crate::net::udp::SendSocket>,
        rtcp: Arc<UdpSocket>,
    },
    /// With another node's address and ports as the source (migration in `preserve` mode).
    Spoofed {
        raw: Arc<crate::net::raw::RawSender>,
        src_rtp: SocketAddr,
        src_rtcp: SocketAddr,
    },
}

/// Where a running sender is: its output state after the last frame it sent and the next
/// frame to send. Kept up to date for a migrated session, so that the node steering it can
/// take it back from that point if the sending node dies.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Per track: identity, input sequence counter, set up or not (as a handoff carries it).
    pub tracks: Vec<crate::handoff::WireTrack>,
    pub cursor: Cursor,
    pub anchor: Option<Anchor>,
}

pub fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The `Instant` of a wall-clock time (µs since the epoch) on this node.
fn instant_of(wall: i64) -> Instant {
    let now_i = Instant::now();
    let delta = wall - wall_us();
    if delta >= 0 {
        now_i + Duration::from_micros(delta as u64)
    } else {
        now_i
            .checked_sub(Duration::from_micros(delta.unsigned_abs()))
            .unwrap_or(now_i)
    }
}

fn wall_of(at: Instant) -> i64 {
    let now_i = Instant::now();
    if at <= now_i {
        wall_us() - now_i.duration_since(at).as_micros() as i64
    } else {
        wall_us() + at.duration_since(now_i).as_micros() as i64
    }
}

pub struct PlayParams {
    pub start: Cursor,
    pub scale: f64,
    pub keyframes_only: bool,
    /// Absolute end (the earlier of the URL's `end=` and the PLAY Range's end); None = to the
    /// end of the recording (or its live edge). Frames whose decode time is at or after it
    /// are not sent.
    pub end_ms: Option<i64>,
    /// `end_ms` is only this PLAY's range end: at it, BYE and stop with the cursor kept for
    /// a PLAY that continues, instead of ending the session.
    pub range_end_only: bool,
    pub camera: String,
    pub cname: String,
    /// Payload bytes per RTP packet (`rtsp.rtp_payload_max()`: the packet fits the MTU).
    pub payload_max: usize,
    /// Continue an existing pacing line (a migrated session); None: the first frame is due now.
    pub anchor: Option<Anchor>,
    /// Updated after every frame (migrated sessions only).
    pub progress: Option<Arc<std::sync::Mutex<Option<Progress>>>>,
    /// Told the wall-clock time (µs) the first frame went out.
    pub first_sent: Option<tokio::sync::oneshot::Sender<i64>>,
}

/// How a run ended, with the state the next PLAY continues from.
pub struct Stopped {
    pub tracks: Vec<TrackOut>,
    /// Next frame to send; None when the recording (or range) ended.
    pub resume: Option<Cursor>,
    /// The pacing line the run followed (a handoff continues it).
    pub anchor: Option<Anchor>,
    /// Wall-clock time (µs) of the last frame sent.
    pub last_sent_us: Option<i64>,
}

pub async fn run(
    library: Library,
    mut tracks: Vec<TrackOut>,
    mut params: PlayParams,
    sink: Sink,
    info: Arc<SessionInfo>,
    cancel: CancellationToken,
) -> Stopped {
    let mut cursor = params.start.clone();
    let anchor = params.anchor.map(|a| (instant_of(a.wall_us), a.media_ms));
    let mut pacer = Pacer::new(params.scale, anchor);
    // A gap just met: the RTP timestamps to rebase when the next segment is in.
    let mut gap: Option<Gap> = None;
    let mut last_sent_us = None;
    let mut tally = super::tally::SegmentTally::default();
    let wire_anchor = |pacer: &Pacer| {
        pacer.anchor().map(|(at, media_ms)| Anchor {
            wall_us: wall_of(at),
            media_ms,
        })
    };
    // The state every early return hands back.
    macro_rules! stopped {
        ($resume:expr) => {{
            tally.close(&params.camera, "sender stopped");
            Stopped {
                tracks,
                resume: $resume,
                anchor: wire_anchor(&pacer),
                last_sent_us,
            }
        }};
    }
    // Wait for `$fut` unless the task is stopped first (then hand back the cursor).
    macro_rules! or_stop {
        ($fut:expr) => {{
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return stopped!(Some(cursor)),
                r = $fut => r,
            }
        }};
    }
    // End of the presentation (BYE, the session ends), or with a cursor, of a PLAY range
    // (BYE, the session stays for a PLAY that continues there).
    macro_rules! finish {
        () => {{
            finish(&tracks, &sink, &params, &info, true, &cancel).await;
            return stopped!(None);
        }};
        ($resume:expr) => {{
            let resume = $resume;
            finish(&tracks, &sink, &params, &info, resume.is_none(), &cancel).await;
            return stopped!(resume);
        }};
    }
    let mut rate = RateMeter::new();
    let mut last_sr = Instant::now();
    let mut index = match or_stop!(library.index(&params.camera)) {
        Ok(i) => i,
        Err(_) => finish!(),
    };
    loop {
        let held = Instant::now();
        let segment: Arc<CachedSegment> = match or_stop!(library.segment(&cursor.segment)) {
            Ok(s) => {
                ride_out(&mut pacer, held.elapsed());
                s
            }
            Err(e) => {
                info!(camera = %params.camera, "playback stopped: {e}");
                finish!();
            }
        };
        library.read_ahead(&index, &cursor.segment, params.end_ms);
        let interval_ms = segment.0.frame_interval_ms();
        if let Some(g) = gap.take() {
            let firsts = first_frame_times(&segment.0, tracks.len());
            g.rebase(&mut tracks, &firsts, interval_ms);
        }
        let frames = &segment.0.frames;
        let decode = segment.0.decode_times();
        pacer.frame_interval(interval_ms);
        while cursor.frame < frames.len() {
            let f = &frames[cursor.frame];
            let dts = decode[cursor.frame];
            let track = tracks.get(f.track as usize);
            let facts = FrameFacts {
                order_ms: dts.order,
                video: track.is_some_and(|t| t.codec.is_video()),
                keyframe: f.keyframe,
                enabled: track.is_some_and(|t| t.enabled),
            };
            match Step::of(facts, params.end_ms, params.keyframes_only) {
                Step::End => finish!(params.range_end_only.then_some(cursor)),
                Step::Skip => {
                    cursor.frame += 1;
                    continue;
                }
                Step::Send => {}
            }
            let due = pacer.due(dts.decode, Instant::now());
            // A frame already due (the first one, or a late one) goes out at once: a tokio
            // sleep rounds up to the timer's next 1 ms tick, which would be most of the
            // first-frame latency of a PLAY whose segment is cached.
            if due > Instant::now() {
                tokio::select! {
                    _ = cancel.cancelled() => return stopped!(Some(cursor)),
                    _ = tokio::time::sleep_until(due.into()) => {}
                }
            } else if cancel.is_cancelled() {
                return stopped!(Some(cursor));
            }
            // Room first, then sequence numbers: see the module doc.
            let held = Instant::now();
            let Ok(room) = or_stop!(room(&sink)) else {
                return stopped!(None);
            };
            let Some(t) = tracks.get_mut(f.track as usize) else {
                cursor.frame += 1;
                continue;
            };
            let packets =
                packetize_frame(t, f.track as usize, f.media_ts, &f.data, params.payload_max);
            let bytes: usize = packets.iter().map(|p| 12 + p.payload.len()).sum();
            rate.add(bytes, Instant::now());
            info.packets
                .fetch_add(packets.len() as u64, Ordering::Relaxed);
            info.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
            // Until the meter spans 0.1 s it has no rate: the expected one set at SETUP (or
            // the last run's) stays.
            if let Some(bps) = rate.bps() {
                info.rate_bps.store(bps, Ordering::Relaxed);
            }
            info.position_ms.store(f.time_ms, Ordering::Relaxed);
            tally.add(cursor.segment.start_ms, cursor.frame, &packets, bytes);
            room.send(f.track as usize, packets).await;
            let sent_at = wall_us();
            last_sent_us = Some(sent_at);
            if let Some(tx) = params.first_sent.take() {
                let _ = tx.send(sent_at);
            }
            ride_out(&mut pacer, held.elapsed());
            cursor.frame += 1;
            if let Some(p) = &params.progress {
                *p.lock().unwrap_or_else(|e| e.into_inner()) = Some(Progress {
                    tracks: to_wire(&tracks),
                    cursor: cursor.clone(),
                    anchor: wire_anchor(&pacer),
                });
            }
            if last_sr.elapsed() >= Duration::from_secs(5) {
                last_sr = Instant::now();
                let reports = reports(&tracks, &params.cname, false);
                send_rtcp(&sink, reports, &cancel).await;
            }
        }
        tally.close(&params.camera, "end of segment");
        // Next segment; a camera still recording grows while we play (live edge).
        let held = Instant::now();
        let deadline = held + LIVE_EDGE_WAIT;
        let next = loop {
            if let Some(n) = index.next_after(&cursor.segment) {
                break Some(n.clone());
            }
            if Instant::now() >= deadline {
                break None;
            }
            tokio::select! {
                _ = cancel.cancelled() => return stopped!(Some(cursor)),
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            match or_stop!(library.index(&params.camera)) {
                Ok(i) => index = i,
                Err(_) => break None,
            }
        };
        ride_out(&mut pacer, held.elapsed());
        match next {
            Some(n) if params.end_ms.is_some_and(|end| n.start_ms >= end) => {
                finish!(params.range_end_only.then_some(Cursor {
                    segment: n,
                    frame: 0,
                }));
            }
            Some(n) => {
                if n.start_ms != cursor.segment.end_ms {
                    // A gap between recordings (or a new recording's timestamp line): cut
                    // it out, in wall time here and in RTP time once the next segment is in.
                    let frames = segment
                        .0
                        .frames
                        .iter()
                        .map(|f| (usize::from(f.track), f.time_ms));
                    gap = Some(Gap::after(
                        frames,
                        segment.0.meta.end_ms,
                        n.start_ms,
                        tracks.len(),
                    ));
                    pacer.new_line();
                    debug!(camera = %params.camera, gap_ms = n.start_ms - cursor.segment.end_ms, "gap between recordings skipped");
                }
                cursor = Cursor {
                    segment: n,
                    frame: 0,
                }
            }
            None => finish!(),
        }
    }
}

/// Each track's first frame time in `segment` (a gap's rebase continues from it).
fn first_frame_times(segment: &Segment, tracks: usize) -> Vec<Option<i64>> {
    let mut first = vec![None; tracks];
    for f in &segment.frames {
        if let Some(slot @ None) = first.get_mut(usize::from(f.track)) {
            *slot = Some(f.time_ms);
        }
    }
    first
}

/// A hold-up longer than one frame interval moves the pacing line on (see `Pacer::held`).
fn ride_out(pacer: &mut Pacer, held: Duration) {
    if pacer.held(held) {
        debug!(
            held_ms = held.as_millis() as u64,
            "playback held up: pacing moved on"
        );
    }
}

/// The tracks' output state as a migration carries it to another node.
pub fn to_wire(tracks: &[TrackOut]) -> Vec<crate::handoff::WireTrack> {
    tracks
        .iter()
        .map(|t| crate::handoff::WireTrack {
            identity: t.identity.clone(),
            seq: t.seq,
            enabled: t.enabled,
        })
        .collect()
}

/// End of range or recording: RTCP BYE (over UDP once the last packets had time to be
/// read, see [`BYE_AFTER_LAST_RTP`](crate::net::udp::BYE_AFTER_LAST_RTP)), and the session
/// ends unless the end was only a PLAY range's (`end_session` false).
async fn finish(
    tracks: &[TrackOut],
    sink: &Sink,
    params: &PlayParams,
    info: &SessionInfo,
    end_session: bool,
    cancel: &CancellationToken,
) {
    if let Sink::Udp(_) = sink {
        linger_before_bye(cancel).await;
    }
    debug!(camera = %params.camera, "end of playback: BYE");
    send_rtcp(sink, reports(tracks, &params.cname, true), cancel).await;
    if end_session {
        info.cancel.cancel();
    }
}

fn packetize_frame(
    t: &mut TrackOut,
    track: usize,
    media_ts: u64,
    data: &[u8],
    payload_max: usize,
) -> Vec<OutPacket> {
    let payloads = match packetize_payloads(t.codec, data, payload_max) {
        Ok(p) => p,
        Err(e) => {
            debug!("frame not re-packetised: {e}");
            return Vec::new();
        }
    };
    payloads
        .into_iter()
        .map(|p| {
            let input = RtpHeader {
                marker: p.marker,
                payload_type: t.payload_type,
                sequence: t.seq,
                timestamp: (media_ts as u32).wrapping_add(p.timestamp_offset),
                ssrc: 0,
            };
            t.seq = t.seq.wrapping_add(1);
            let out = t.identity.rewrite(&input, p.data.len());
            OutPacket {
                track,
                header: write_header(&out),
                payload: p.data.into(),
            }
        })
        .collect()
}

/// Room in the sink for one frame's packets, taken before the frame is numbered.
enum Room<'a> {
    Tcp(mpsc::Permit<'a, TcpOut>),
    Udp(&'a [UdpOut]),
}

/// Waits for room in a TCP session's queue; Err once the connection has gone.
async fn room(sink: &Sink) -> Result<Room<'_>, ()> {
    match sink {
        Sink::Tcp(tx) => tx.reserve().await.map(Room::Tcp).map_err(|_| ()),
        Sink::Udp(outs) => Ok(Room::Udp(outs)),
    }
}

impl Room<'_> {
    async fn send(self, track: usize, packets: Vec<OutPacket>) {
        match self {
            Room::Tcp(permit) => permit.send(TcpOut::Packets(packets)),
            Room::Udp(outs) => {
                if let Some(o) = outs.iter().find(|o| o.track == track) {
                    o.send_rtp(&packets).await;
                }
            }
        }
    }
}

/// RTCP (sender reports, BYE); skipped only if the task is stopped while a TCP queue is
/// full (the connection stopping it is not emptying the queue).
async fn send_rtcp(sink: &Sink, reports: Vec<(usize, Vec<u8>)>, cancel: &CancellationToken) {
    match sink {
        Sink::Tcp(tx) => {
            if let Err(mpsc::error::TrySendError::Full(out)) = tx.try_send(TcpOut::Rtcp(reports)) {
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    _ = tx.send(out) => {}
                }
            }
        }
        Sink::Udp(outs) => {
            for (track, pkt) in reports {
                if let Some(o) = outs.iter().find(|o| o.track == track) {
                    o.send_rtcp(&pkt).await;
                }
            }
        }
    }
}

/// Sender reports (or SR + BYE) of the enabled tracks.
fn reports(tracks: &[TrackOut], cname: &str, bye: bool) -> Vec<(usize, Vec<u8>)> {
    let wall = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    tracks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.enabled)
        .map(|(i, t)| {
            let sr = rtcp::SenderReport {
                ssrc: t.identity.ssrc(),
                ntp: rtcp::ntp_timestamp(wall),
                rtp_timestamp: t.identity.last_timestamp().unwrap_or(0),
                packet_count: t.identity.packets(),
                octet_count: t.identity.octets(),
            };
            let pkt = if bye {
                rtcp::goodbye(&sr, cname)
            } else {
                rtcp::sender_report(&sr, cname)
            };
            (i, pkt)
        })
        .collect()
}
