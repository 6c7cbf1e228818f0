//! Live HLS of one camera: a hub consumer (like the recorder: `live::frames::consume`, no
//! RTP identity) that cuts the frames into fMP4 segments at keyframes and keeps the newest few
//! in memory, each built once and shared by every viewer. Started by the first request,
//! stopped when no request came for `[hls] idle_secs` or the stream ended.

use crate::export::mux::fragment_bytes;
use crate::export::timeline::Timeline;
use crate::export::tracks::Tracks;
use crate::live::frames::{consume, stream_header, FrameSink};
use crate::live::stream::Stream;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use vigil_storage::{Frame, Segment, SegmentMeta, StreamHeader};

pub struct LiveSegment {
    pub seq: u64,
    /// Wall-clock time of its first frame (UTC ms).
    pub start_ms: i64,
    pub duration: f64,
    pub data: Bytes,
}

#[derive(Default)]
pub struct LiveState {
    pub init: Option<Bytes>,
    pub segments: VecDeque<LiveSegment>,
    /// Why no segment can be made (a track without parameter sets), or that it ended.
    pub error: Option<String>,
    pub ended: bool,
}

/// One camera's live HLS.
pub struct Live {
    pub state: Mutex<LiveState>,
    pub changed: Notify,
    last_used: Mutex<Instant>,
    pub stop: CancellationToken,
}

impl Default for Live {
    fn default() -> Live {
        Live {
            state: Mutex::default(),
            changed: Notify::new(),
            last_used: Mutex::new(Instant::now()),
            stop: CancellationToken::new(),
        }
    }
}

impl Live {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, LiveState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    fn update(&self, f: impl FnOnce(&mut LiveState)) {
        f(&mut self.lock());
        self.changed.notify_waiters();
    }
}

/// Cuts frames into segments of at least `target_ms`, each starting on a video keyframe.
struct Segmenter<'a> {
    live: &'a Live,
    header: StreamHeader,
    pending: Vec<Frame>,
    tracks: Option<Tracks>,
    timeline: Option<Timeline>,
    fragment_seq: u32,
    next_seq: u64,
    target_ms: i64,
    keep: usize,
}

impl Segmenter<'_> {
    fn cut(&mut self, until_ms: i64) {
        let frames = std::mem::take(&mut self.pending);
        let first_ms = frames.first().map_or(until_ms, |f| f.time_ms);
        let seg = Segment {
            meta: SegmentMeta {
                camera: String::new(),
                start_ms: first_ms,
                end_ms: until_ms,
                bytes: 0,
                frames: frames.len() as u32,
                file: Default::default(),
                crc32: 0,
            },
            header: self.header.clone(),
            frames,
        };
        if self.tracks.is_none() {
            match Tracks::of(&seg, 0) {
                Ok(t) => {
                    let init = vigil_proto::mp4::init_segment(&t.specs);
                    self.timeline = Some(Timeline::new(
                        first_ms,
                        i64::MAX,
                        t.map.clone(),
                        &t.timescales(),
                    ));
                    self.tracks = Some(t);
                    self.live.update(|s| s.init = Some(init.into()));
                }
                Err(e) => {
                    self.live.update(|s| s.error = Some(e.to_string()));
                    return;
                }
            }
        }
        let Some(timeline) = self.timeline.as_mut() else {
            return;
        };
        let cut = timeline.cut(&seg, 0);
        let Some(data) = fragment_bytes(&mut self.fragment_seq, &seg, &cut) else {
            return;
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let keep = self.keep;
        self.live.update(|s| {
            s.segments.push_back(LiveSegment {
                seq,
                start_ms: first_ms,
                duration: (until_ms - first_ms).max(1) as f64 / 1000.0,
                data,
            });
            while s.segments.len() > keep {
                s.segments.pop_front();
            }
        });
    }
}

impl FrameSink for Segmenter<'_> {
    fn push(&mut self, frame: Frame, video: bool) {
        let key = video && frame.keyframe;
        if self.pending.is_empty() && !key {
            return; // a segment starts on a keyframe
        }
        if key
            && self
                .pending
                .first()
                .is_some_and(|f| frame.time_ms - f.time_ms >= self.target_ms)
        {
            self.cut(frame.time_ms);
        }
        self.pending.push(frame);
    }

    fn dropped(&self, frames: u64, why: &str) {
        tracing::debug!(frames, "live HLS: {why}");
    }
}

/// Runs the segmenter of `stream` until idle, the stream's end, or the node's shutdown.
pub async fn run(
    live: Arc<Live>,
    stream: Arc<Stream>,
    shutdown: CancellationToken,
    cfg: vigil_conf::HlsConfig,
) {
    let Some(info) = stream.info() else {
        live.update(|s| s.ended = true);
        return;
    };
    let watchdog = {
        let live = live.clone();
        let idle = Duration::from_secs_f64(cfg.idle_secs);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = live.stop.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
                if live.idle() > idle {
                    break;
                }
            }
            live.stop.cancel();
        })
    };
    let mut seg = Segmenter {
        live: &live,
        header: stream_header(&info),
        pending: Vec::new(),
        tracks: None,
        timeline: None,
        fragment_seq: 0,
        next_seq: 0,
        target_ms: (cfg.segment_secs * 1000.0) as i64,
        keep: cfg.live_segments,
    };
    consume(&live.stop, &stream, &info, &mut seg).await;
    live.stop.cancel();
    let _ = watchdog.await;
    live.update(|s| s.ended = true);
}
