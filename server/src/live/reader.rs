//! One viewer's view of a live stream: its cursor into the hub, and per track the RTP identity
//! the viewer sees. No sockets here; the RTSP connection (TCP) or a UDP pump task drives it
//! and writes the batches it yields.

use super::handoff::{
    digest, Joined, LiveHandoff, LiveTrack, Mark, Origin, MARK_RUN, MAX_SEQ_SKIP,
};
use super::stream::{Packet, Read, Stream};
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil_proto::rtcp::{ntp_timestamp, SenderReport};
use vigil_proto::rtp::{write_header, RtpIdentity};

/// The wall clock, µs since the Unix epoch (a handoff's times cross processes).
fn wall_now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// One packet ready for the wire: the viewer's own 12-byte header and the shared payload.
#[derive(Debug, Clone)]
pub struct OutPacket {
    pub track: usize,
    pub header: [u8; 12],
    pub payload: Bytes,
}

/// One read of a stream's hub, shared by its readers at one cursor (a live sender's
/// viewers of one stream, caught up, all wait for the same next frame).
#[derive(Default)]
pub struct SharedRead {
    /// The stream read (by address: the readers' `Arc` keeps it alive while they use this).
    stream: usize,
    first: u64,
    /// The cursor after the read.
    end: u64,
    outcome: Option<Read>,
    packets: Vec<Arc<Packet>>,
}

impl SharedRead {
    /// Forgets the read (the hub may hold more now); keeps the buffer.
    pub fn clear(&mut self) {
        self.outcome = None;
        self.packets.clear();
    }

    fn holds(&self, stream: &Arc<Stream>, cursor: u64) -> bool {
        self.outcome.is_some()
            && self.first == cursor
            && self.stream == Arc::as_ptr(stream) as usize
    }

    fn fill(&mut self, stream: &Arc<Stream>, cursor: u64, max: usize) {
        self.clear();
        self.stream = Arc::as_ptr(stream) as usize;
        self.first = cursor;
        self.end = cursor;
        self.outcome = Some(stream.read(&mut self.end, &mut self.packets, max));
    }
}

/// Initial RTP identity of one set-up track (random values chosen by the caller's RNG).
pub use vigil_session::TrackSetup;

#[derive(Debug)]
struct TrackOut {
    identity: RtpIdentity,
    clock_rate: u32,
    video: bool,
    /// Video is withheld until a random-access point, so decoding starts clean.
    waiting_keyframe: bool,
    /// Producer epoch of the last packet forwarded, 0 before any.
    epoch: u64,
    /// When the last forwarded packet had arrived at the hub (for SR and splice timing).
    last_received: Option<Instant>,
    /// (output timestamp, hub arrival) of the first packet forwarded on the current input
    /// line: the fixed linear NTP↔RTP mapping of this track's sender reports. Anchoring once
    /// (rather than at the latest packet) keeps reports free of arrival jitter and of B-frame
    /// reordering, so a client that re-aligns tracks on the first report sees no step.
    anchor: Option<(u32, Instant)>,
    /// Input timestamp of the last packet forwarded from the current producer.
    last_input_ts: Option<u32>,
    /// Smallest forward step between consecutive input timestamps: about one frame (video;
    /// B-frames can make it two) or one packet (audio). A splice advances the timeline by at least this much, so the first
    /// frame of the new producer never shares a presentation time with the last of the old.
    min_step: Option<u32>,
    /// Hub positions of the last packets forwarded, oldest first (the first `recent_len`):
    /// what a handoff names, by their payloads. Positions, not the payloads themselves:
    /// keeping a payload costs a reference count that every viewer of the stream shares,
    /// per packet per viewer; a handoff reads them from the hub, which holds them as long
    /// as this viewer can still go on from them.
    recent: [u64; MARK_RUN],
    recent_len: usize,
    /// Packets before this hub position are not for this track (a handoff continues after
    /// the last packet the previous sender sent).
    skip_until: u64,
}

impl TrackOut {
    fn new(identity: RtpIdentity, clock_rate: u32, video: bool) -> TrackOut {
        TrackOut {
            identity,
            clock_rate,
            video,
            waiting_keyframe: video,
            epoch: 0,
            last_received: None,
            anchor: None,
            last_input_ts: None,
            min_step: None,
            recent: [0; MARK_RUN],
            recent_len: 0,
            skip_until: 0,
        }
    }
}

/// A reader attached to a [`Stream`]. Counts itself in `stream.readers` while alive.
pub struct Reader {
    stream: Arc<Stream>,
    cursor: u64,
    tracks: Vec<Option<TrackOut>>,
    /// This reader's own read of the hub, for `poll_batch`.
    scratch: SharedRead,
    /// Times this reader fell behind the ring and skipped ahead.
    pub skips: u64,
    pub packets_sent: u64,
    pub bytes_sent: u64,
}

impl Reader {
    /// Asks for the memory [`Reader::poll_shared`] touches to be fetched
    /// ([`crate::live::prefetch`]): its tracks (the reader itself is its owner's).
    #[inline]
    pub fn prefetch(&self) {
        super::prefetch::prefetch_slice(&self.tracks);
    }

    /// `setups[i]` is `Some` for each track the viewer SETUP.
    pub fn new(stream: Arc<Stream>, setups: &[Option<TrackSetup>]) -> Reader {
        let info = stream.info();
        let tracks = setups
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.map(|s| {
                    let t = info.as_ref().and_then(|info| info.tracks.get(i));
                    TrackOut::new(
                        RtpIdentity::new(s.ssrc, s.first_seq, s.first_ts),
                        t.map_or(90_000, |t| t.clock_rate),
                        t.is_some_and(|t| t.codec.is_video()),
                    )
                })
            })
            .collect();
        let cursor = stream.start_position();
        Reader::attach(stream, tracks, cursor)
    }

    /// Counts itself among the stream's readers (until dropped).
    fn attach(stream: Arc<Stream>, tracks: Vec<Option<TrackOut>>, cursor: u64) -> Reader {
        stream.readers.fetch_add(1, Ordering::AcqRel);
        Reader {
            stream,
            cursor,
            tracks,
            scratch: SharedRead::default(),
            skips: 0,
            packets_sent: 0,
            bytes_sent: 0,
        }
    }

    /// Continues a live viewer another node was sending (`handoff`, left by its
    /// [`Reader::handoff`]) from this node's hub: each track right after the last packet
    /// sent when this hub still holds it, else at the next keyframe; `now_us` is the wall
    /// clock (µs since the epoch) for the timestamp advance of the latter.
    ///
    /// [`Origin::Heartbeat`]: the state is the last one a sender reported before it fell
    /// silent, so it may have sent more since. Where this hub still holds the reported
    /// packet, the viewer continues right after it with the numbering aligned: what the
    /// sender sent after its report comes again with the same sequence numbers and bytes,
    /// which an RTP receiver drops as duplicates, and nothing is lost. Where it does not,
    /// no number may be used twice with other bytes: the sequence skips what the sender may
    /// have sent (at the track's packet rate) and the viewer starts at the oldest keyframe
    /// that reached this hub after the sender's lease ran out, or the next one.
    pub fn continuing(
        stream: Arc<Stream>,
        handoff: &LiveHandoff,
        now_us: i64,
        origin: Origin,
    ) -> (Reader, Vec<Option<Joined>>) {
        let head = stream.head();
        let stale = matches!(origin, Origin::Heartbeat { .. });
        // Without the reported packet, a take-back starts at the oldest keyframe the lost
        // sender cannot have sent (it reached this hub after its lease ran out), else at
        // the next one to come.
        let start = match origin {
            Origin::Heartbeat { unsent_after } => {
                stream.first_keyframe_since(unsent_after).unwrap_or(head)
            }
            Origin::Handoff => head,
        };
        let mut cursor = start;
        let mut joined = Vec::with_capacity(handoff.tracks.len());
        let tracks = handoff
            .tracks
            .iter()
            .enumerate()
            .map(|(i, lt)| {
                let Some(lt) = lt else {
                    joined.push(None);
                    return None;
                };
                let mut t = TrackOut::new(lt.identity.clone(), lt.clock_rate.max(1), lt.video);
                t.min_step = lt.min_step;
                t.anchor = lt.sr_line.and_then(|(ts, wall)| {
                    let ago = wall_now_us().saturating_sub(wall).max(0) as u64;
                    Some((ts, Instant::now().checked_sub(Duration::from_micros(ago))?))
                });
                let found = lt.mark.as_ref().map(|m| stream.find_mark(i, m));
                let gap_us = handoff.last_sent_us.map_or(0, |l| (now_us - l).max(0));
                let how = match found {
                    Some(Some((pos, last))) => {
                        t.identity.continue_from(last.sequence, last.timestamp);
                        t.last_input_ts = Some(last.timestamp);
                        t.waiting_keyframe = false;
                        t.skip_until = pos + 1;
                        cursor = cursor.min(pos + 1);
                        if stale {
                            Joined::AfterReport
                        } else {
                            Joined::Exact
                        }
                    }
                    None if !stale => Joined::Fresh,
                    Some(None) | None => {
                        let advance = (gap_us as f64 * lt.clock_rate as f64 / 1e6).round() as u32;
                        let advance = advance.max(t.min_step.unwrap_or(1)).max(1);
                        t.identity.rebase(advance);
                        let skipped = if stale {
                            let rate = stream.packet_rate(i).unwrap_or(f64::INFINITY);
                            let may_have_sent = rate * gap_us as f64 / 1e6;
                            // Margin for a rate that rose since; capped below RFC 3550's
                            // MAX_DROPOUT (3000), past which a receiver resynchronises.
                            (may_have_sent * 1.25 + 8.0).min(MAX_SEQ_SKIP as f64) as u16
                        } else {
                            0
                        };
                        t.identity.skip_seq(skipped);
                        t.skip_until = start;
                        Joined::Keyframe { advance, skipped }
                    }
                };
                joined.push(Some(how));
                Some(t)
            })
            .collect();
        (Reader::attach(stream, tracks, cursor), joined)
    }

    /// This viewer's state for the node that continues it (see [`Reader::continuing`]).
    pub fn handoff(&self, last_sent_us: Option<i64>) -> LiveHandoff {
        LiveHandoff {
            tracks: self
                .tracks
                .iter()
                .map(|t| {
                    t.as_ref().map(|t| LiveTrack {
                        identity: t.identity.clone(),
                        clock_rate: t.clock_rate,
                        video: t.video,
                        mark: self.mark(t),
                        min_step: t.min_step,
                        sr_line: t.anchor.map(|(ts, at)| {
                            let ago = at.elapsed().as_micros() as i64;
                            (ts, wall_now_us() - ago)
                        }),
                    })
                })
                .collect(),
            last_sent_us,
        }
    }

    /// The last packets `t` sent that the hub still holds (all of them unless this viewer
    /// fell a whole ring behind, when it would skip to a keyframe anyway).
    fn mark(&self, t: &TrackOut) -> Option<Mark> {
        let payloads = self.stream.payloads_at(&t.recent[..t.recent_len]);
        (!payloads.is_empty()).then(|| Mark {
            packets: payloads
                .iter()
                .map(|p| (p.len() as u32, digest(p)))
                .collect(),
        })
    }

    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// Withholds video from now until the next keyframe (a viewer's decoder asked for one:
    /// a WebRTC PLI or FIR). The identity runs on: the withheld packets show as a gap in the
    /// sequence numbers, as a loss would, and the timestamps stay on the camera's clock.
    pub fn wait_for_keyframe(&mut self) {
        for t in self.tracks.iter_mut().flatten() {
            t.waiting_keyframe = t.video;
        }
    }

    /// Move up to `max` packets from the hub into `out`, rewritten with this reader's identity.
    /// Returns how many packets were consumed from the hub (0 = nothing new).
    pub fn poll_batch(&mut self, out: &mut Vec<OutPacket>, max: usize) -> usize {
        let mut read = std::mem::take(&mut self.scratch);
        read.clear();
        let n = self.poll_shared(&mut read, out, max);
        read.clear();
        self.scratch = read;
        n
    }

    /// [`Reader::poll_batch`] from a read of the hub that the readers of one stream at one
    /// cursor share: the first of them reads the ring (its lock, a reference count per
    /// packet), the others take the same packets. A reader at another cursor reads afresh
    /// into `read`. The caller clears `read` when the hub may hold more (the next frame).
    pub fn poll_shared(
        &mut self,
        read: &mut SharedRead,
        out: &mut Vec<OutPacket>,
        max: usize,
    ) -> usize {
        if !read.holds(&self.stream, self.cursor) {
            read.fill(&self.stream, self.cursor, max);
        }
        self.cursor = read.end;
        match read.outcome {
            Some(Read::Packets(n)) => {
                self.take(read.first, &read.packets, out);
                n
            }
            Some(Read::Lagged { .. }) | None => {
                self.skips += 1;
                for t in self.tracks.iter_mut().flatten() {
                    t.waiting_keyframe = t.video;
                }
                1
            }
        }
    }

    /// Rewrites `packets` (read from hub position `first`) for this viewer into `out`.
    fn take(&mut self, first: u64, packets: &[Arc<Packet>], out: &mut Vec<OutPacket>) {
        for (pos, p) in (first..).zip(packets) {
            let Some(Some(t)) = self.tracks.get_mut(p.track) else {
                continue;
            };
            if pos < t.skip_until {
                continue;
            }
            if p.epoch != t.epoch {
                if t.epoch != 0 {
                    // A new producer: splice its input line onto ours. The timestamp advances
                    // by the wall time that passed, so the viewer's clock stays continuous.
                    let gap = t.last_received.map_or(0.0, |r| {
                        p.received.saturating_duration_since(r).as_secs_f64()
                    });
                    let advance = (gap * t.clock_rate as f64).round().max(1.0) as u32;
                    t.identity.rebase(advance.max(t.min_step.unwrap_or(1)));
                    t.last_input_ts = None;
                    t.anchor = None;
                    t.waiting_keyframe = t.video;
                }
                t.epoch = p.epoch;
            }
            if t.waiting_keyframe {
                if !p.keyframe {
                    continue;
                }
                t.waiting_keyframe = false;
            }
            let header = t.identity.rewrite(&p.header, p.payload.len());
            t.last_received = Some(p.received);
            if t.anchor.is_none() {
                t.anchor = Some((header.timestamp, p.received));
            }
            if let Some(prev) = t.last_input_ts {
                let step = p.header.timestamp.wrapping_sub(prev);
                if step != 0 && step < 0x8000_0000 {
                    t.min_step = Some(t.min_step.map_or(step, |m| m.min(step)));
                }
            }
            t.last_input_ts = Some(p.header.timestamp);
            if t.recent_len == MARK_RUN {
                t.recent.copy_within(1.., 0);
                t.recent[MARK_RUN - 1] = pos;
            } else {
                t.recent[t.recent_len] = pos;
                t.recent_len += 1;
            }
            self.packets_sent += 1;
            self.bytes_sent += 12 + p.payload.len() as u64;
            out.push(OutPacket {
                track: p.track,
                header: write_header(&header),
                payload: p.payload.clone(),
            });
        }
    }

    /// Where this reader is in the hub: the position of the next packet it reads.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Resolves when the hub may have packets beyond this reader's cursor.
    pub async fn wait(&self) {
        self.stream.wait_beyond(self.cursor).await
    }

    /// RTP-Info values for PLAY: (track, next seq, rtptime of the first packet to come).
    pub fn rtp_info(&self) -> Vec<(usize, u16, u32)> {
        self.tracks
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                t.as_ref().map(|t| {
                    let ts = t.identity.last_timestamp().unwrap_or_else(|| {
                        // Nothing sent yet: the first packet gets the initial timestamp.
                        t.identity.project_timestamp(0)
                    });
                    (i, t.identity.next_seq(), ts)
                })
            })
            .collect()
    }

    /// Sender reports for every track that has sent something: the viewer's NTP↔RTP mapping.
    pub fn sender_reports(
        &self,
        now: Instant,
        wall: std::time::Duration,
    ) -> Vec<(usize, SenderReport)> {
        self.tracks
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let t = t.as_ref()?;
                let (anchor_ts, anchor_at) = t.anchor?;
                let since = now.saturating_duration_since(anchor_at).as_secs_f64();
                let rtp_now = anchor_ts.wrapping_add((since * t.clock_rate as f64) as u32);
                Some((
                    i,
                    SenderReport {
                        ssrc: t.identity.ssrc(),
                        ntp: ntp_timestamp(wall),
                        rtp_timestamp: rtp_now,
                        packet_count: t.identity.packets(),
                        octet_count: t.identity.octets(),
                    },
                ))
            })
            .collect()
    }

    /// What an RTCP BYE carries for each set-up track: its sender report, or a zero one
    /// for a track that has sent nothing yet (the BYE still names its SSRC).
    pub fn goodbye_reports(
        &self,
        now: Instant,
        wall: std::time::Duration,
    ) -> Vec<(usize, SenderReport)> {
        let reports = self.sender_reports(now, wall);
        self.ssrcs()
            .into_iter()
            .map(|(track, ssrc)| {
                let sr = reports.iter().find(|(t, _)| *t == track).map(|(_, sr)| *sr);
                let zero = SenderReport {
                    ssrc,
                    ntp: ntp_timestamp(wall),
                    rtp_timestamp: 0,
                    packet_count: 0,
                    octet_count: 0,
                };
                (track, sr.unwrap_or(zero))
            })
            .collect()
    }

    /// The SSRC of each set-up track.
    pub fn ssrcs(&self) -> Vec<(usize, u32)> {
        self.tracks
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_ref().map(|t| (i, t.identity.ssrc())))
            .collect()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stream.readers.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
pub(crate) mod tests;
