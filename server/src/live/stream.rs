//! The per-path hub: one producer, any number of readers, packets shared by reference.
//!
//! A ring of `Arc<Packet>` indexed by a monotonically increasing position, bounded by bytes
//! (payload plus each packet's bookkeeping), not packets: a packet count costs a 2 Mb/s camera
//! megabytes and a 64 kb/s one almost nothing, so a node with thousands of cameras could not
//! budget its memory by it. The GOP in progress (newest keyframe to head) is never evicted by
//! the byte budget, so a late joiner always finds the keyframe it must start on; only a GOP
//! past the hard cap (a camera with a very long keyframe interval) gives its keyframe up, and
//! joiners then wait for the next one. The producer appends and never waits for anyone; each
//! reader keeps its own cursor. A reader that falls behind the ring's start finds its position
//! gone and skips forward to the newest keyframe (the producer and the other readers are
//! unaffected, which is the whole point). A consumer that must not lose packets (a camera's
//! recorder) holds the ring instead ([`Stream::hold`]): what it has not read is kept past the
//! byte budget up to a cap of its own, so that a recorder kept from a core for a moment while
//! its camera sends a burst catches up rather than losing seconds of recording; the producer
//! still never waits (holding the producer for its recorder stalled the path's viewers
//! whenever the recorder did).
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
    /// Sum of [`cost`] over `packets`.
    bytes: usize,
    /// The holds' ids and next positions to read (see [`Stream::hold`]).
    holds: Vec<(u64, u64)>,
    next_hold: u64,
}

/// What a packet costs the ring: its payload, its `Packet` allocation (with the `Arc`
/// counts) and its slot in the deque.
fn cost(p: &Packet) -> usize {
    p.payload.len() + std::mem::size_of::<Packet>() + 16 + std::mem::size_of::<Arc<Packet>>()
}

/// The ring's bounds.
#[derive(Debug, Clone, Copy)]
pub struct RingLimits {
    /// Bytes kept for readers that lag; the GOP in progress is kept even beyond it.
    pub bytes: usize,
    /// The GOP in progress is given up (its keyframe evicted) past this many bytes.
    pub gop_max_bytes: usize,
    /// What a hold has not read is kept up to this many bytes.
    pub hold_max_bytes: usize,
}

impl RingLimits {
    pub fn from_config(live: &vigil_conf::LiveConfig) -> RingLimits {
        let kb = |k: u64| usize::try_from(k.saturating_mul(1024)).unwrap_or(usize::MAX);
        RingLimits {
            bytes: kb(live.ring_kb),
            gop_max_bytes: kb(live.ring_gop_max_kb),
            hold_max_bytes: kb(live.ring_recorder_max_kb),
        }
    }
}

impl Ring {
    fn head(&self) -> u64 {
        self.base + self.packets.len() as u64
    }
}

/// Outcome of [`Stream::read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    limits: RingLimits,
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
    pub fn new(path: impl Into<String>, limits: RingLimits) -> Stream {
        Stream {
            path: path.into(),
            limits: RingLimits {
                bytes: limits.bytes,
                gop_max_bytes: limits.gop_max_bytes.max(limits.bytes),
                hold_max_bytes: limits.hold_max_bytes.max(limits.bytes),
            },
            ring: Mutex::new(Ring {
                packets: VecDeque::new(),
                base: 0,
                last_keyframe: None,
                since_wake: 0,
                bytes: 0,
                holds: Vec::new(),
                next_hold: 0,
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
        // A DESCRIBE waiting for this stream to go live (`wait_live`) answers now.
        self.notify.notify_waiters();
        epoch
    }

    /// Waits up to `timeout` for a producer to attach (a cold or woken pull connecting);
    /// whether the stream is live. Woken by the attach itself, not by polling, so a waking
    /// camera's DESCRIBE answers as soon as its upstream plays.
    pub async fn wait_live(&self, timeout: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_live() {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.is_live();
            }
        }
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

    /// Live, with a keyframe of the current producer in the ring: a new reader starts at
    /// once.
    pub fn has_keyframe(&self) -> bool {
        self.is_live() && self.ring().last_keyframe.is_some()
    }

    /// Waits for a new packet, or for a producer to attach when none is live, until
    /// `deadline`; false when the deadline came first. For loops that wait on the stream
    /// for a condition: waiting beyond the head of a finished stream returns at once, and a
    /// loop doing that spins its runtime thread until something else changes.
    pub async fn wait_change(&self, deadline: tokio::time::Instant) -> bool {
        if self.is_live() {
            tokio::time::timeout_at(deadline, self.wait_beyond(self.head()))
                .await
                .is_ok()
        } else {
            self.wait_live(deadline.saturating_duration_since(tokio::time::Instant::now()))
                .await
        }
    }

    /// Waits until [`Stream::has_keyframe`] or `deadline`; whether it has one.
    pub async fn wait_keyframe(&self, deadline: tokio::time::Instant) -> bool {
        while !self.has_keyframe() {
            if !self.wait_change(deadline).await {
                return self.has_keyframe();
            }
        }
        true
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
            ring.bytes += cost(&packet);
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
            self.evict(&mut ring);
        }
        if wake {
            self.notify.notify_waiters();
        }
    }

    /// Drops the oldest packets while the ring is over its byte budget, except the GOP in
    /// progress and what a hold has not read, each unless over its own cap.
    fn evict(&self, ring: &mut Ring) {
        while ring.bytes > self.limits.bytes {
            let gop = ring.last_keyframe.unwrap_or(u64::MAX);
            if ring.base >= gop && ring.bytes <= self.limits.gop_max_bytes {
                return;
            }
            let held = ring.holds.iter().map(|h| h.1).min().unwrap_or(u64::MAX);
            if ring.base >= held && ring.bytes <= self.limits.hold_max_bytes {
                return;
            }
            let Some(p) = ring.packets.pop_front() else {
                return;
            };
            ring.bytes -= cost(&p);
            ring.base += 1;
            if ring.last_keyframe.is_some_and(|k| k < ring.base) {
                ring.last_keyframe = None;
            }
        }
    }

    /// Bytes the ring holds (see [`cost`]).
    pub fn ring_bytes(&self) -> usize {
        self.ring().bytes
    }

    /// Where a new reader starts: the newest keyframe (the GOP cache), else the head.
    pub fn start_position(&self) -> u64 {
        let ring = self.ring();
        ring.last_keyframe.unwrap_or_else(|| ring.head())
    }

    /// Copy (references to) up to `max` packets from `*cursor` on into `out`.
    pub fn read(&self, cursor: &mut u64, out: &mut Vec<Arc<Packet>>, max: usize) -> Read {
        Self::read_in(&self.ring(), cursor, out, max)
    }

    fn read_in(ring: &Ring, cursor: &mut u64, out: &mut Vec<Arc<Packet>>, max: usize) -> Read {
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

    /// Holds the ring from `from` on for a consumer that must not lose packets: until the
    /// hold is dropped, what it has not read ([`Hold::read`]) stays past the byte budget, up
    /// to the hold cap (`[live] ring_recorder_max_kb`); beyond that the consumer is lapped
    /// like any reader.
    pub fn hold(&self, from: u64) -> Hold<'_> {
        let mut ring = self.ring();
        ring.next_hold += 1;
        let id = ring.next_hold;
        ring.holds.push((id, from));
        Hold { stream: self, id }
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

    /// The payloads of the packets at `positions` (ascending) that the ring still holds.
    pub fn payloads_at(&self, positions: &[u64]) -> Vec<Bytes> {
        let ring = self.ring();
        positions
            .iter()
            .filter_map(|&pos| {
                let i = usize::try_from(pos.checked_sub(ring.base)?).ok()?;
                Some(ring.packets.get(i)?.payload.clone())
            })
            .collect()
    }

    pub fn head(&self) -> u64 {
        self.ring().head()
    }

    /// Position of the oldest keyframe still in the ring that reached this hub at or after
    /// `t`.
    pub fn first_keyframe_since(&self, t: Instant) -> Option<u64> {
        let ring = self.ring();
        let i = ring
            .packets
            .iter()
            .position(|p| p.keyframe && p.received >= t)?;
        Some(ring.base + i as u64)
    }

    /// Packets per second of `track` over what the ring holds (None below two packets or
    /// a measurable span): how many sequence numbers a lost sender may have used since its
    /// last known state.
    pub fn packet_rate(&self, track: usize) -> Option<f64> {
        let ring = self.ring();
        let mut of_track = ring.packets.iter().filter(|p| p.track == track);
        let first = of_track.next()?;
        let (n, last) = of_track.fold((1usize, first), |(n, _), p| (n + 1, p));
        let span = last.received.saturating_duration_since(first.received);
        (n >= 2 && span >= std::time::Duration::from_millis(10))
            .then(|| (n - 1) as f64 / span.as_secs_f64())
    }

    /// The newest run of `track`'s packets whose payloads are `mark`'s, in order (other
    /// tracks' packets may sit between them): the position and header of its last packet.
    pub fn find_mark(&self, track: usize, mark: &super::handoff::Mark) -> Option<(u64, RtpHeader)> {
        use super::handoff::is;
        let (&last, earlier) = mark.packets.split_last()?;
        let ring = self.ring();
        let of_track = |i: usize| ring.packets.get(i).filter(|p| p.track == track);
        (0..ring.packets.len()).rev().find_map(|end| {
            let p = of_track(end)?;
            if !is(last, &p.payload) {
                return None;
            }
            // The earlier packets of the run, newest first, among this track's packets.
            let mut want = earlier.iter().rev();
            let mut i = end;
            let mut next = want.next();
            while let Some(&w) = next {
                i = (0..i).rev().find(|&j| of_track(j).is_some())?;
                if !is(w, &ring.packets[i].payload) {
                    return None;
                }
                next = want.next();
            }
            Some((ring.base + end as u64, p.header))
        })
    }
}

/// A consumer's hold on a [`Stream`]'s ring (see [`Stream::hold`]); released when dropped.
pub struct Hold<'a> {
    stream: &'a Stream,
    id: u64,
}

impl Hold<'_> {
    /// [`Stream::read`], and the hold moves on to the new cursor (under the same lock).
    pub fn read(&self, cursor: &mut u64, out: &mut Vec<Arc<Packet>>, max: usize) -> Read {
        let mut ring = self.stream.ring();
        let read = Stream::read_in(&ring, cursor, out, max);
        if let Some(h) = ring.holds.iter_mut().find(|h| h.0 == self.id) {
            h.1 = *cursor;
        }
        read
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut ring = self.stream.ring();
        ring.holds.retain(|h| h.0 != self.id);
        // What only this hold kept goes at once, not at the next packet (a camera that
        // stopped sending would otherwise keep it).
        self.stream.evict(&mut ring);
    }
}

#[cfg(test)]
mod tests;
