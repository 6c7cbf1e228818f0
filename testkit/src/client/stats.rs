//! What a viewer counts while it plays: per track packets, bytes, sequence gaps, start-up
//! latency and whether the stream looked continuous. Plain counters updated in place, so a
//! thousand readers in one process cost no allocation per packet.

use std::time::{Duration, Instant};
use vigil_proto::codec::{starts_keyframe, Codec};
use vigil_proto::rtp::RtpHeader;

/// A forward jump of more than this many sequence numbers is a restart of the sequence
/// space (a new sender), not loss; the values are the ones RFC 3550 Appendix A.1 suggests.
const MAX_DROPOUT: u16 = 3000;
/// A packet at most this far behind the highest sequence number is late (reordered), not
/// the start of a new sequence.
const MAX_MISORDER: u16 = 100;

/// Loss from RTP sequence numbers (RFC 3550 A.1/A.3, simplified): expected = highest
/// extended sequence number − first + 1, lost = expected − received. Handles the 16-bit
/// wrap, counts reordered packets as received (so a late packet fills its gap) and treats a
/// huge jump as a new run rather than 60 000 lost packets.
#[derive(Debug, Clone, Default)]
pub struct SeqCounter {
    /// Extended (wrap-counted) first and highest sequence number of the current run.
    run: Option<(u64, u64)>,
    received_in_run: u64,
    /// Loss and expected packets of runs that ended (SSRC change or sequence restart).
    lost_before: u64,
    expected_before: u64,
    /// Packets that arrived behind the highest sequence number seen.
    pub late: u64,
    pub duplicates: u64,
    /// Sequence restarts (jumps too big to be loss).
    pub restarts: u64,
}

impl SeqCounter {
    pub fn observe(&mut self, seq: u16) {
        let Some((first, highest)) = self.run else {
            self.run = Some((u64::from(seq), u64::from(seq)));
            self.received_in_run = 1;
            return;
        };
        let delta = seq.wrapping_sub(highest as u16);
        if delta == 0 {
            self.duplicates += 1;
        } else if delta < MAX_DROPOUT {
            self.run = Some((first, highest + u64::from(delta)));
            self.received_in_run += 1;
        } else if delta <= u16::MAX - MAX_MISORDER {
            self.restarts += 1;
            self.restart(seq);
        } else {
            // Behind the highest: reordered (or a late duplicate, which we cannot tell apart
            // without remembering every number; it can only make loss look smaller).
            self.late += 1;
            self.received_in_run += 1;
        }
    }

    /// Start a new run (a new SSRC): the loss of the old run is kept.
    pub fn restart(&mut self, seq: u16) {
        self.lost_before = self.lost();
        self.expected_before = self.expected();
        self.run = Some((u64::from(seq), u64::from(seq)));
        self.received_in_run = 1;
    }

    /// Packets the sequence numbers say were sent.
    pub fn expected(&self) -> u64 {
        self.expected_before + self.run.map_or(0, |(first, highest)| highest - first + 1)
    }

    pub fn lost(&self) -> u64 {
        let in_run = self.run.map_or(0, |(first, highest)| {
            (highest - first + 1).saturating_sub(self.received_in_run)
        });
        self.lost_before + in_run
    }
}

/// Counters of one track.
#[derive(Debug, Clone)]
pub struct TrackStats {
    pub codec: Codec,
    pub clock_rate: u32,
    pub packets: u64,
    /// RTP bytes (header + payload) as received.
    pub bytes: u64,
    pub seq: SeqCounter,
    /// PLAY sent → first RTP packet of this track.
    pub first_packet: Option<Duration>,
    /// Video: whether the first packet began a keyframe (a late joiner must start on one).
    pub first_packet_keyframe: Option<bool>,
    pub ssrc: Option<u32>,
    pub ssrc_changes: u64,
    /// First timestamp and the highest (mod 2^32) seen, of the current SSRC.
    pub first_timestamp: Option<u32>,
    pub highest_timestamp: Option<u32>,
    /// Largest forward step of the highest timestamp, in clock ticks: a reader that was
    /// skipped ahead by the server shows a jump of seconds here.
    pub max_timestamp_step: u32,
    /// Steps backwards by more than half a second (B-frame reordering is smaller).
    pub timestamp_regressions: u64,
    pub sender_reports: u64,
    pub bye: bool,
}

impl TrackStats {
    pub fn new(codec: Codec, clock_rate: u32) -> TrackStats {
        TrackStats {
            codec,
            clock_rate,
            packets: 0,
            bytes: 0,
            seq: SeqCounter::default(),
            first_packet: None,
            first_packet_keyframe: None,
            ssrc: None,
            ssrc_changes: 0,
            first_timestamp: None,
            highest_timestamp: None,
            max_timestamp_step: 0,
            timestamp_regressions: 0,
            sender_reports: 0,
            bye: false,
        }
    }

    /// Account one RTP packet. `since_play` is the time from PLAY to its arrival.
    pub fn record(&mut self, h: &RtpHeader, payload: &[u8], wire_len: usize, since_play: Duration) {
        self.packets += 1;
        self.bytes += wire_len as u64;
        if self.first_packet.is_none() {
            self.first_packet = Some(since_play);
            if self.codec.is_video() {
                self.first_packet_keyframe = Some(starts_keyframe(self.codec, payload));
            }
        }
        match self.ssrc {
            Some(s) if s != h.ssrc => {
                self.ssrc_changes += 1;
                self.ssrc = Some(h.ssrc);
                self.seq.restart(h.sequence);
                self.first_timestamp = Some(h.timestamp);
                self.highest_timestamp = Some(h.timestamp);
                return;
            }
            Some(_) => self.seq.observe(h.sequence),
            None => {
                self.ssrc = Some(h.ssrc);
                self.seq.observe(h.sequence);
            }
        }
        self.first_timestamp.get_or_insert(h.timestamp);
        match self.highest_timestamp {
            None => self.highest_timestamp = Some(h.timestamp),
            Some(top) => {
                let step = h.timestamp.wrapping_sub(top) as i32;
                if step > 0 {
                    self.max_timestamp_step = self.max_timestamp_step.max(step as u32);
                    self.highest_timestamp = Some(h.timestamp);
                } else if step.unsigned_abs() > self.clock_rate / 2 {
                    self.timestamp_regressions += 1;
                }
            }
        }
    }

    /// Media time covered by the current SSRC (highest − first timestamp).
    pub fn timestamp_span(&self) -> Duration {
        match (self.first_timestamp, self.highest_timestamp) {
            (Some(a), Some(b)) if self.clock_rate > 0 => {
                Duration::from_secs_f64(f64::from(b.wrapping_sub(a)) / f64::from(self.clock_rate))
            }
            _ => Duration::ZERO,
        }
    }
}

/// Counters as they stood at a chosen instant, so a load test can measure a steady window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub packets: u64,
    pub bytes: u64,
}

/// What a player saw during [`super::Player::run_stats`] / [`super::Player::collect_stats`].
#[derive(Debug)]
pub struct Stats {
    /// Indexed like the SDP's media sections.
    pub tracks: Vec<TrackStats>,
    pub play_sent: Instant,
    /// When counting started and stopped.
    pub started: Instant,
    pub stopped: Instant,
    /// Totals at the `mark` instant given to `collect_stats`, if the run reached it.
    pub at_mark: Option<Snapshot>,
    /// The server ended the stream (RTCP BYE, or the connection closed).
    pub ended: bool,
    /// The error that stopped the run early, if any.
    pub error: Option<super::ClientError>,
}

impl Stats {
    pub fn packets(&self) -> u64 {
        self.tracks.iter().map(|t| t.packets).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.tracks.iter().map(|t| t.bytes).sum()
    }

    pub fn lost(&self) -> u64 {
        self.tracks.iter().map(|t| t.seq.lost()).sum()
    }

    /// Earliest first packet of any track (PLAY sent → first media).
    pub fn first_packet(&self) -> Option<Duration> {
        self.tracks.iter().filter_map(|t| t.first_packet).min()
    }

    /// The first video track's verdict on its first packet (None without video or packets).
    pub fn first_video_keyframe(&self) -> Option<bool> {
        self.tracks
            .iter()
            .find(|t| t.codec.is_video())
            .and_then(|t| t.first_packet_keyframe)
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            packets: self.packets(),
            bytes: self.bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(seqs: &[u16]) -> SeqCounter {
        let mut c = SeqCounter::default();
        for &s in seqs {
            c.observe(s);
        }
        c
    }

    #[test]
    fn in_order_has_no_loss() {
        let c = count(&[10, 11, 12, 13]);
        assert_eq!(c.lost(), 0);
        assert_eq!(c.expected(), 4);
    }

    #[test]
    fn gaps_are_counted() {
        let c = count(&[10, 11, 14, 15, 20]);
        assert_eq!(c.lost(), 2 + 4);
    }

    #[test]
    fn wrap_is_not_loss() {
        let c = count(&[65533, 65534, 65535, 0, 1, 2]);
        assert_eq!(c.lost(), 0);
        assert_eq!(c.expected(), 6);
        let c = count(&[65534, 1]);
        assert_eq!(c.lost(), 2, "65535 and 0 missing across the wrap");
    }

    #[test]
    fn reordered_packet_fills_its_gap() {
        let c = count(&[1, 2, 4, 3, 5]);
        assert_eq!(c.lost(), 0);
        assert_eq!(c.late, 1);
        let c = count(&[65535, 1, 0, 2]);
        assert_eq!(c.lost(), 0, "reordering across the wrap");
    }

    #[test]
    fn duplicates_do_not_hide_loss() {
        let c = count(&[1, 1, 3]);
        assert_eq!(c.duplicates, 1);
        assert_eq!(c.lost(), 1);
    }

    #[test]
    fn huge_jump_is_a_restart_not_loss() {
        let c = count(&[100, 101, 103, 40000, 40001]);
        assert_eq!(c.restarts, 1);
        assert_eq!(c.lost(), 1, "only 102 of the first run");
    }

    #[test]
    fn restart_keeps_earlier_loss() {
        let mut c = count(&[5, 7]);
        c.restart(1000);
        c.observe(1002);
        assert_eq!(c.lost(), 2);
    }

    fn hdr(seq: u16, ts: u32, ssrc: u32) -> RtpHeader {
        RtpHeader {
            marker: false,
            payload_type: 96,
            sequence: seq,
            timestamp: ts,
            ssrc,
        }
    }

    #[test]
    fn track_stats_see_keyframe_jumps_and_ssrc_changes() {
        let mut t = TrackStats::new(Codec::H264, 90_000);
        let idr = [0x65, 0x88];
        let p = [0x41, 0x9a];
        t.record(&hdr(1, 0, 7), &idr, 14, Duration::from_millis(3));
        t.record(&hdr(2, 3600, 7), &p, 14, Duration::from_millis(40));
        // B-frame style step back: not a regression.
        t.record(&hdr(3, 1800, 7), &p, 14, Duration::from_millis(41));
        t.record(
            &hdr(4, 3600 + 90_000 * 3, 7),
            &p,
            14,
            Duration::from_millis(80),
        );
        assert_eq!(t.first_packet_keyframe, Some(true));
        assert_eq!(t.first_packet, Some(Duration::from_millis(3)));
        assert_eq!(t.timestamp_regressions, 0);
        assert_eq!(t.max_timestamp_step, 270_000);
        assert_eq!(t.seq.lost(), 0);
        t.record(&hdr(9000, 5, 8), &p, 14, Duration::from_millis(90));
        assert_eq!(t.ssrc_changes, 1);
        assert_eq!(t.seq.lost(), 0);
        assert_eq!(t.packets, 5);
        assert_eq!(t.bytes, 70);
    }

    #[test]
    fn timestamp_wrap_is_monotonic() {
        let mut t = TrackStats::new(Codec::H264, 90_000);
        t.record(&hdr(1, u32::MAX - 1000, 1), &[0x65], 13, Duration::ZERO);
        t.record(&hdr(2, 2600, 1), &[0x41], 13, Duration::ZERO);
        assert_eq!(t.timestamp_regressions, 0);
        assert_eq!(t.max_timestamp_step, 3601);
        assert_eq!(
            t.timestamp_span(),
            Duration::from_secs_f64(3601.0 / 90_000.0)
        );
    }
}
