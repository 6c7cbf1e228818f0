//! A live stream read as frames: the hub consumer shared by recording (`record`, into a
//! camera's writer lane) and live HLS (`hls::live`, into a segmenter). It depacketises the
//! RTP, extends each track's media timestamps and stamps frames with wall-clock time; what
//! becomes of a frame is the sink's business, so neither user depends on the other.

use crate::live::stream::{Read, Stream, StreamInfo};
use std::sync::Arc;
use tracing::warn;
use vigil_proto::depacketize::Depacketizer;
use vigil_storage::{Frame, StreamHeader, TrackHeader};

/// Where a hub consumer's frames go: a camera's writer lane, or a live HLS segmenter.
pub trait FrameSink {
    /// One depacketised frame; `video` for frames of a video track.
    fn push(&mut self, frame: Frame, video: bool);
    /// `frames` were lost before reaching the sink (the consumer fell out of the ring).
    fn dropped(&self, frames: u64, why: &str);
}

#[derive(PartialEq, Eq)]
pub enum Consumed {
    /// The publisher finished or a new producer with another description attached.
    StreamEnded,
    Shutdown,
}

pub fn stream_header(info: &StreamInfo) -> StreamHeader {
    StreamHeader {
        sdp: info.sdp.render("0.0.0.0", 0, "npt=now-"),
        tracks: info
            .tracks
            .iter()
            .map(|t| TrackHeader {
                codec: t.codec.name().to_string(),
                clock_rate: t.clock_rate,
            })
            .collect(),
    }
}

/// Per-track timing: maps the RTP timestamp line onto wall-clock time.
struct TrackClock {
    clock_rate: u64,
    /// (extended media ts, wall ms) of the first frame of the current producer epoch.
    base: Option<(u64, i64)>,
    last_ts: u32,
    extended: u64,
}

impl TrackClock {
    fn extend(&mut self, ts: u32) -> u64 {
        if self.base.is_none() {
            self.extended = u64::from(ts);
        } else {
            let delta = ts.wrapping_sub(self.last_ts) as i32;
            self.extended = self.extended.wrapping_add_signed(i64::from(delta));
        }
        self.last_ts = ts;
        self.extended
    }

    fn time_ms(&mut self, media_ts: u64) -> i64 {
        let now = wall_ms();
        let (b_ts, b_ms) = *self.base.get_or_insert((media_ts, now));
        let delta = media_ts as i64 - b_ts as i64;
        b_ms + delta * 1000 / self.clock_rate.max(1) as i64
    }
}

pub use vigil_storage::now_ms as wall_ms;

/// Reads the hub as frames (depacketised, stamped with wall-clock and extended media time)
/// into `sink` until the stream ends or `stop` is cancelled.
pub async fn consume(
    stop: &tokio_util::sync::CancellationToken,
    stream: &Stream,
    info: &Arc<StreamInfo>,
    queue: &mut impl FrameSink,
) -> Consumed {
    let has_video = info.has_video();
    let mut depacketizers: Vec<Option<Depacketizer>> = info
        .sdp
        .media
        .iter()
        .zip(&info.tracks)
        .map(|(m, t)| Depacketizer::new(t.codec, t.clock_rate, m.fmtp.as_deref()).ok())
        .collect();
    let mut clocks: Vec<TrackClock> = info
        .tracks
        .iter()
        .map(|t| TrackClock {
            clock_rate: u64::from(t.clock_rate),
            base: None,
            last_ts: 0,
            extended: 0,
        })
        .collect();
    let epoch = stream.current_epoch();
    let mut cursor = stream.start_position();
    // What this consumer has not read stays in the ring (up to its cap) while it is behind:
    // a recording must not lose a camera's packets because its task waited for a core.
    let hold = stream.hold(cursor);
    let mut batch = Vec::with_capacity(256);
    loop {
        batch.clear();
        match hold.read(&mut cursor, &mut batch, 256) {
            Read::Lagged { skipped } => {
                warn!(path = %stream.path, skipped, "recorder fell behind the live stream: frames lost");
                // The depacketisers see the sequence gap and drop the broken frames.
                queue.dropped(
                    skipped,
                    "the recorder fell behind the live stream: packets lost",
                );
                continue;
            }
            Read::Packets(0) => {
                if stream.is_finished() {
                    return Consumed::StreamEnded;
                }
                tokio::select! {
                    _ = stop.cancelled() => return Consumed::Shutdown,
                    _ = stream.wait_beyond(cursor) => {}
                }
                continue;
            }
            Read::Packets(_) => {}
        }
        for p in &batch {
            if p.epoch != epoch {
                // A new producer (reconnect or takeover): its description may differ, so
                // start over with a fresh header; the new segment continues the timeline.
                if !stream.info().is_some_and(|i| Arc::ptr_eq(&i, info)) {
                    return Consumed::StreamEnded;
                }
                continue;
            }
            let (Some(Some(d)), Some(clock)) =
                (depacketizers.get_mut(p.track), clocks.get_mut(p.track))
            else {
                continue;
            };
            if d.push(&p.header, &p.payload).is_err() {
                continue;
            }
            let video = has_video && info.tracks.get(p.track).is_some_and(|t| t.codec.is_video());
            while let Some(f) = d.pull() {
                let media_ts = clock.extend(f.timestamp);
                let frame = Frame {
                    track: p.track as u8,
                    keyframe: f.keyframe,
                    time_ms: clock.time_ms(media_ts),
                    media_ts,
                    data: f.data.into(),
                };
                queue.push(frame, video);
            }
        }
    }
}
