//! The per-path hub: one producer, any number of readers, packets shared by reference.
//!
//! A bounded ring of `Arc<Packet>` indexed by a monotonically increasing position. The producer
//! appends and never waits for anyone; each reader keeps its own cursor. A reader that falls
//! more than the ring's length behind finds its position gone and skips forward to the newest
//! keyframe (the producer and the other readers are unaffected, which is the whole point).
//! This is tokio's `broadcast` idea with two additions that a media hub needs and `broadcast`
//! does not offer: the position of the latest keyframe (the GOP cache a new reader starts from)
//! and wake-ups batched per frame rather than per packet (one wake per frame per reader
//! instead of ~8), which is what keeps a thousand readers cheap.

use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;
use tokio::sync::Notify;
use vigil_proto::codec::Codec;
use vigil_proto::rtp::RtpHeader;
use vigil_proto::sdp::SessionDescription;

/// One RTP packet as received from the producer, stripped to what readers need.
#[derive(Debug)]
pub struct Packet {
    pub track: usize,
    /// The producer's header; readers rewrite it with their own identity on the way out.
    pub header: RtpHeader,
    pub payload: Bytes,
    /// First packet of a random-access point (video), where a reader may start.
    pub keyframe: bool,
    /// Producer generation: changes when the publisher or upstream connection changes, so
    /// readers know to splice their RTP identity onto a new input line.
    pub epoch: u64,
    pub received: Instant,
}

/// What a stream carries, fixed while one producer is attached.
#[derive(Debug, Clone)]
pub struct StreamInfo {
    pub sdp: SessionDescription,
    pub tracks: Vec<TrackInfo>,
}

#[derive(Debug, Clone)]
pub struct TrackInfo {
    pub codec: Codec,
    pub clock_rate: u32,
}

impl StreamInfo {
    pub fn from_sdp(sdp: SessionDescription) -> StreamInfo {
        let tracks = sdp
            .media
            .iter()
            .map(|m| TrackInfo {
                codec: m.codec(),
                clock_rate: m.clock_rate.max(1),
            })
            .collect();
        StreamInfo { sdp, tracks }
    }

    pub fn has_video(&self) -> bool {
        self.tracks.iter().any(|t| t.codec.is_video())
    }
}

struct Ring {
    packets: VecDeque<Arc<Packet>>,
    /// Position of `packets[0]`.
    base: u64,
    /// Position of the newest keyframe still in the ring, if any.
    last_keyframe: Option<u64>,
    since_wake: usize,
}

impl Ring {
    fn head(&self) -> u64 {
        self.base + self.packets.len() as u64
    }
}

/// Outcome of [`Stream::read`].
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// Packets were appended to the output (possibly zero if none are new).
    Packets(usize),
    /// The reader's cursor had fallen out of the ring; it was moved to the newest keyframe
    /// (or to the head when there is none) and no packets were returned.
    Lagged { skipped: u64 },
}

/// A live stream (one path).
pub struct Stream {
    pub path: String,
    capacity: usize,
    ring: Mutex<Ring>,
    notify: Notify,
    info: RwLock<Option<Arc<StreamInfo>>>,
    epoch: AtomicU64,
    finished: AtomicBool,
    pub readers: AtomicUsize,
    pub packets_in: AtomicU64,
    pub bytes_in: AtomicU64,
    /// Ingest bitrate over the last sampling period (see `admin::api::sample_bitrates`).
    pub bitrate_bps: AtomicU64,
    pub created: Instant,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("path", &self.path).finish()
    }
}

/// Wake readers at least every this many packets even without a frame boundary, so a stream
/// whose packets never carry the marker bit still flows.
const WAKE_EVERY: usize = 32;

impl Stream {
    pub fn new(path: impl Into<String>, capacity: usize) -> Stream {
        Stream {
            path: path.into(),
            capacity: capacity.max(16),
            ring: Mutex::new(Ring {
                packets: VecDeque::with_capacity(capacity),
                base: 0,
                last_keyframe: None,
                since_wake: 0,
            }),
            notify: Notify::new(),
            info: RwLock::new(None),
            epoch: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            readers: AtomicUsize::new(0),
            packets_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bitrate_bps: AtomicU64::new(0),
            created: Instant::now(),
        }
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        // A panic while holding this lock cannot leave the ring inconsistent (every mutation is
        // a single push/pop), so a poisoned lock is still safe to use.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stream's description, once a producer has attached.
    pub fn info(&self) -> Option<Arc<StreamInfo>> {
        self.info.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Attach a (new) producer. Returns the epoch its packets must carry. Readers stay
    /// attached; they resume at the new producer's first keyframe.
    pub fn attach_producer(&self, info: StreamInfo) -> u64 {
        let epoch = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        *self.info.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(info));
        self.ring().last_keyframe = None;
        self.finished.store(false, Ordering::Release);
        epoch
    }

    /// The publisher ended the stream for good (TEARDOWN or disconnect of a push source):
    /// readers drain what is buffered, then get RTCP BYE. A pull source that merely lost its
    /// upstream does not call this; its readers wait for the reconnect.
    pub fn finish(&self, epoch: u64) {
        if self.epoch.load(Ordering::Acquire) == epoch {
            self.finished.store(true, Ordering::Release);
            self.notify.notify_waiters();
        }
    }

    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Live: a producer has attached and has not finished.
    pub fn is_live(&self) -> bool {
        self.info().is_some() && !self.is_finished()
    }

    pub fn current_epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Whether a producer with this epoch is still the current one.
    pub fn is_current(&self, epoch: u64) -> bool {
        self.current_epoch() == epoch
    }

    /// Append a packet. Never blocks on readers.
    pub fn push(&self, packet: Packet) {
        self.packets_in.fetch_add(1, Ordering::Relaxed);
        self.bytes_in
            .fetch_add(packet.payload.len() as u64 + 12, Ordering::Relaxed);
        let wake;
        {
            let mut ring = self.ring();
            if ring.packets.len() == self.capacity {
                ring.packets.pop_front();
                ring.base += 1;
                if ring.last_keyframe.is_some_and(|k| k < ring.base) {
                    ring.last_keyframe = None;
                }
            }
            if packet.keyframe {
                ring.last_keyframe = Some(ring.head());
            }
            // Wake at frame boundaries: the marker bit ends a video access unit (RFC 6184 §5.1)
            // and most audio packets.
            ring.since_wake += 1;
            wake = packet.header.marker || ring.since_wake >= WAKE_EVERY;
            if wake {
                ring.since_wake = 0;
            }
            ring.packets.push_back(Arc::new(packet));
        }
        if wake {
            self.notify.notify_waiters();
        }
    }

    /// Where a new reader starts: the newest keyframe (the GOP cache), else the head.
    pub fn start_position(&self) -> u64 {
        let ring = self.ring();
        ring.last_keyframe.unwrap_or_else(|| ring.head())
    }

    /// Copy (references to) up to `max` packets from `*cursor` on into `out`.
    pub fn read(&self, cursor: &mut u64, out: &mut Vec<Arc<Packet>>, max: usize) -> Read {
        let ring = self.ring();
        if *cursor < ring.base {
            let to = ring.last_keyframe.unwrap_or_else(|| ring.head());
            let skipped = to - *cursor;
            *cursor = to;
            return Read::Lagged { skipped };
        }
        let start = (*cursor - ring.base) as usize;
        let n = ring.packets.len().saturating_sub(start).min(max);
        out.extend(ring.packets.range(start..start + n).cloned());
        *cursor += n as u64;
        Read::Packets(n)
    }

    /// Wait until packets past `cursor` may be available. Race-free: registers interest
    /// before checking, as `Notify` requires.
    pub async fn wait_beyond(&self, cursor: u64) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let ring = self.ring();
            if ring.head() > cursor || cursor < ring.base || self.is_finished() {
                return;
            }
        }
        notified.await;
    }

    pub fn head(&self) -> u64 {
        self.ring().head()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(seq: u16, keyframe: bool, marker: bool) -> Packet {
        Packet {
            track: 0,
            header: RtpHeader {
                marker,
                payload_type: 96,
                sequence: seq,
                timestamp: seq as u32 * 3000,
                ssrc: 1,
            },
            payload: Bytes::from_static(b"x"),
            keyframe,
            epoch: 1,
            received: Instant::now(),
        }
    }

    #[test]
    fn new_reader_starts_at_latest_keyframe() {
        let s = Stream::new("live/a", 64);
        for i in 0..10 {
            s.push(pkt(i, i == 0 || i == 6, true));
        }
        assert_eq!(s.start_position(), 6);
        let mut cur = s.start_position();
        let mut out = vec![];
        assert_eq!(s.read(&mut cur, &mut out, 100), Read::Packets(4));
        assert!(out[0].keyframe);
        assert_eq!(out[0].header.sequence, 6);
    }

    #[test]
    fn lagging_reader_skips_to_keyframe_and_others_are_unaffected() {
        let s = Stream::new("live/a", 16);
        let mut slow = s.start_position();
        let mut fast = s.start_position();
        let mut out = vec![];
        for i in 0..40u16 {
            s.push(pkt(i, i % 10 == 0, true));
            out.clear();
            assert_eq!(s.read(&mut fast, &mut out, 100), Read::Packets(1));
        }
        // The ring holds 24..40; the newest keyframe is 30.
        assert_eq!(
            s.read(&mut slow, &mut out, 100),
            Read::Lagged { skipped: 30 }
        );
        out.clear();
        assert_eq!(s.read(&mut slow, &mut out, 100), Read::Packets(10));
        assert_eq!(out[0].header.sequence, 30);
    }

    #[test]
    fn keyframe_position_is_forgotten_once_overwritten() {
        let s = Stream::new("live/a", 16);
        s.push(pkt(0, true, true));
        for i in 1..20 {
            s.push(pkt(i, false, true));
        }
        assert_eq!(s.start_position(), s.head());
    }

    #[tokio::test]
    async fn waiting_reader_is_woken_at_frame_end() {
        let s = Arc::new(Stream::new("live/a", 64));
        let s2 = s.clone();
        let waiter = tokio::spawn(async move { s2.wait_beyond(0).await });
        tokio::task::yield_now().await;
        s.push(pkt(0, true, false));
        s.push(pkt(1, false, true));
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
    }
}
