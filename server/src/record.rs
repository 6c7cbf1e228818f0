//! Recording: every live path with recording enabled is written to the shared store.
//!
//! A recorder is one more consumer of the path's hub (it does not count as a viewer, so it
//! never keeps an on-demand camera connected by itself). It depacketises RTP into frames in
//! the async task and hands them to a blocking writer (storage I/O never runs on the async
//! runtime). A full disk or any write error stops recording for that camera with a clear
//! error in the log, the API and the metrics, while live viewing goes on; the writer retries
//! and recording resumes by itself when space returns.

use crate::live::stream::{Read, Stream, StreamInfo};
use crate::node::{Node, PathEntry};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;
use tracing::{info, warn, Instrument};
use vigil_proto::depacketize::Depacketizer;
use vigil_storage::{Frame, StorageError, Store, StreamHeader, TrackHeader};

/// What the API shows about one camera's recording.
#[derive(Debug, Clone, Serialize, Default)]
pub struct RecordStatus {
    pub camera: String,
    /// "recording", "waiting" (no live stream), "error".
    pub state: String,
    pub error: Option<String>,
    pub segments_written: u64,
    pub bytes_written: u64,
    pub errors: u64,
}

/// Recording state of every camera of this node.
#[derive(Default)]
pub struct Recordings {
    status: Mutex<HashMap<String, RecordStatus>>,
}

impl Recordings {
    fn update(&self, camera: &str, f: impl FnOnce(&mut RecordStatus)) {
        let mut map = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let s = map
            .entry(camera.to_string())
            .or_insert_with(|| RecordStatus {
                camera: camera.to_string(),
                state: "waiting".into(),
                ..Default::default()
            });
        f(s);
    }

    pub fn all(&self) -> Vec<RecordStatus> {
        let map = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = map.values().cloned().collect();
        v.sort_by(|a, b| a.camera.cmp(&b.camera));
        v
    }
}

/// Start recording `path` unless recording is off (node-wide, for this camera, or for
/// cameras not in the config under `record = "listed"`) or a recorder already runs for it.
pub fn start(node: &Arc<Node>, path: &Arc<PathEntry>) {
    let Some(library) = &node.library else { return };
    let camera = path.name.strip_prefix("live/").unwrap_or(&path.name);
    let listed = node.config.cameras.iter().find(|c| c.id == camera);
    let wanted = match node.config.record_mode() {
        vigil_conf::RecordMode::All => listed.is_none_or(|c| c.record),
        vigil_conf::RecordMode::Listed => listed.is_some_and(|c| c.record),
    };
    if !wanted
        || path
            .recording
            .swap(true, std::sync::atomic::Ordering::AcqRel)
    {
        return;
    }
    let span = tracing::info_span!("record", camera = %camera);
    node.tasks
        .spawn(run(node.clone(), path.clone(), library.store.clone()).instrument(span));
}

/// Apply the retention policy every minute, logging what it deleted.
pub async fn retention(node: Arc<Node>, store: Store) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let store = store.clone();
        let now = wall_ms();
        match tokio::task::spawn_blocking(move || store.enforce_retention(now)).await {
            Ok(Ok(r)) if r.deleted_segments > 0 => info!(
                segments = r.deleted_segments,
                bytes = r.deleted_bytes,
                cameras = ?r.cameras,
                "retention deleted old recordings"
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => warn!("retention failed: {e}"),
            Err(e) => warn!("retention task failed: {e}"),
        }
    }
}

/// How often a failed writer (full disk, lease held elsewhere) tries again.
const RETRY: Duration = Duration::from_secs(2);

/// Record `path` for as long as the node runs.
pub async fn run(node: Arc<Node>, path: Arc<PathEntry>, store: Store) {
    let Some(camera) = path.name.strip_prefix("live/").map(str::to_string) else {
        return;
    };
    let stream = path.stream.clone();
    loop {
        // Wait for a producer; an unlisted push path that was released ends its recorder.
        while !stream.is_live() {
            if !node
                .path(&path.name)
                .is_some_and(|p| Arc::ptr_eq(&p, &path))
            {
                return;
            }
            tokio::select! {
                _ = node.shutdown.cancelled() => return,
                _ = stream.wait_beyond(stream.head()) => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
        let Some(info) = stream.info() else { continue };
        let (tx, rx) = mpsc::channel::<Frame>(4096);
        let writer = tokio::task::spawn_blocking({
            let node = node.clone();
            let store = store.clone();
            let camera = camera.clone();
            let header = stream_header(&info);
            move || write_frames(&node, &store, &camera, header, rx)
        });
        let ended = consume(&node, &stream, &info, tx).await;
        let _ = writer.await;
        node.recordings.update(&camera, |s| {
            if s.state == "recording" {
                s.state = "waiting".into();
            }
        });
        if ended == Consumed::Shutdown {
            return;
        }
    }
}

#[derive(PartialEq, Eq)]
enum Consumed {
    /// The publisher finished or a new producer with another description attached.
    StreamEnded,
    Shutdown,
}

fn stream_header(info: &StreamInfo) -> StreamHeader {
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

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

async fn consume(
    node: &Node,
    stream: &Stream,
    info: &Arc<StreamInfo>,
    tx: mpsc::Sender<Frame>,
) -> Consumed {
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
    let mut batch = Vec::with_capacity(256);
    loop {
        batch.clear();
        match stream.read(&mut cursor, &mut batch, 256) {
            Read::Lagged { skipped } => {
                warn!(path = %stream.path, skipped, "recorder fell behind the live stream: frames lost");
                // The depacketisers see the sequence gap and drop the broken frames.
                continue;
            }
            Read::Packets(0) => {
                if stream.is_finished() {
                    return Consumed::StreamEnded;
                }
                tokio::select! {
                    _ = node.shutdown.cancelled() => return Consumed::Shutdown,
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
            while let Some(f) = d.pull() {
                let media_ts = clock.extend(f.timestamp);
                let frame = Frame {
                    track: p.track as u8,
                    keyframe: f.keyframe,
                    time_ms: clock.time_ms(media_ts),
                    media_ts,
                    data: f.data.into(),
                };
                if tx.send(frame).await.is_err() {
                    return Consumed::StreamEnded;
                }
            }
        }
    }
}

/// The blocking writer: owns the store's `Recorder` for the camera while frames flow.
fn write_frames(
    node: &Node,
    store: &Store,
    camera: &str,
    header: StreamHeader,
    mut rx: mpsc::Receiver<Frame>,
) {
    let recordings = &node.recordings;
    let mut recorder = None;
    let mut next_attempt = std::time::Instant::now();
    while let Some(frame) = rx.blocking_recv() {
        if recorder.is_none() {
            if std::time::Instant::now() < next_attempt {
                continue; // dropped while the disk is full or the lease is elsewhere
            }
            match store.recorder(camera, header.clone()) {
                Ok(r) => {
                    // After an error (full disk, lease elsewhere) the camera counts as
                    // recording again only once a segment is stored: a retry that gets a
                    // recorder on a still-full disk must not show "recording" in between.
                    recordings.update(camera, |s| {
                        if s.state != "error" {
                            info!(camera, "recording");
                            s.state = "recording".into();
                            s.error = None;
                        }
                    });
                    recorder = Some(r);
                }
                Err(e) => {
                    fail(node, camera, &e);
                    next_attempt = std::time::Instant::now() + RETRY;
                    continue;
                }
            }
        }
        let Some(r) = recorder.as_mut() else { continue };
        match r.write(frame) {
            Ok(Some(seg)) => recordings.update(camera, |s| {
                s.segments_written += 1;
                s.bytes_written += seg.bytes;
                if s.state == "error" {
                    info!(camera, "recording resumed");
                    s.state = "recording".into();
                    s.error = None;
                }
            }),
            Ok(None) => {}
            Err(e) => {
                fail(node, camera, &e);
                // Dropping the recorder discards the partial segment and frees the lease.
                recorder = None;
                next_attempt = std::time::Instant::now() + RETRY;
            }
        }
    }
    if let Some(r) = recorder {
        match r.finish() {
            Ok(Some(seg)) => recordings.update(camera, |s| {
                s.segments_written += 1;
                s.bytes_written += seg.bytes;
            }),
            Ok(None) => {}
            Err(e) => fail(node, camera, &e),
        }
    }
}

fn fail(node: &Node, camera: &str, e: &StorageError) {
    let message = match e {
        StorageError::DiskFull { path } => format!(
            "disk full writing {}: recording stopped, retrying",
            path.display()
        ),
        other => format!("{other}"),
    };
    warn!(camera, "recording error: {message}");
    node.recordings.update(camera, |s| {
        if s.error.as_deref() != Some(message.as_str()) {
            s.errors += 1;
        }
        s.state = "error".into();
        s.error = Some(message.clone());
    });
}
