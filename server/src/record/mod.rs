//! Recording: every live path with recording enabled is written to the shared store.
//!
//! A recorder is one more consumer of the path's hub (it does not count as a viewer, so it
//! never keeps an on-demand camera connected by itself). It depacketises RTP into frames in
//! the async task and queues them to the camera's lane of the node's writer pool
//! (`node::writer_pool`: a fixed number of threads for all cameras; storage I/O never runs
//! on the async runtime nor on the blocking pool that playback reads use). A full disk, any
//! write error, or a writer too far behind (frames dropped) shows for that camera in the
//! log, the API and the metrics (`node::recordings`), while live viewing goes on; the writer
//! retries and recording resumes by itself.

mod writer;

use crate::cluster::Cluster;
use crate::live::frames::{consume, stream_header, wall_ms, Consumed, FrameSink};
use crate::node::recordings::Recordings;
use crate::node::writer_pool::Lane;
use crate::node::{Node, PathEntry};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn, Instrument};
use vigil_storage::{Frame, Store};
use writer::{CameraWriter, WriterMsg};

/// Whether `camera` is to be recorded: storage on, and the record mode and the camera's own
/// `record` say so.
pub fn wanted(node: &Node, camera: &str) -> bool {
    if node.library.is_none() {
        return false;
    }
    let listed = node.camera(camera);
    let listed = listed.as_ref();
    match node.config.record_mode() {
        vigil_conf::RecordMode::All => listed.is_none_or(|c| c.record),
        vigil_conf::RecordMode::Listed => listed.is_some_and(|c| c.record),
    }
}

/// Start recording `path` unless recording is off (node-wide, for this camera, or for
/// cameras not in the config under `record = "listed"`) or a recorder already runs for it.
/// `cluster`: the node's cluster shell when on (a camera bound elsewhere is recorded there).
pub fn start(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>, path: &Arc<PathEntry>) {
    let Some(library) = &node.library else { return };
    let camera = path.name.strip_prefix("live/").unwrap_or(&path.name);
    if !wanted(node, camera)
        || path
            .recording
            .swap(true, std::sync::atomic::Ordering::AcqRel)
    {
        return;
    }
    let stop = node.shutdown.child_token();
    *path.recorder.lock().unwrap_or_else(|p| p.into_inner()) = Some(stop.clone());
    let span = tracing::info_span!("record", camera = %camera);
    let path = path.clone();
    let store = library.store.clone();
    let node = node.clone();
    let cluster = cluster.cloned();
    node.clone().spawn_ingest(
        async move {
            run(node, cluster, path.clone(), store, stop).await;
            // Stopped (by the registry, or its path went): a later `start` may run again.
            path.recording
                .store(false, std::sync::atomic::Ordering::Release);
        }
        .instrument(span),
    );
}

/// Stops `path`'s recorder (the registry turned its recording off): its open segment is
/// closed and stored; the recordings stay.
pub fn stop(path: &PathEntry) {
    if let Some(stop) = path
        .recorder
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        stop.cancel();
    }
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

/// Record `path` until `stop` (the node's shutdown, or [`stop`]).
pub async fn run(
    node: Arc<Node>,
    cluster: Option<Arc<Cluster>>,
    path: Arc<PathEntry>,
    store: Store,
    stop: tokio_util::sync::CancellationToken,
) {
    let Some(camera) = path.name.strip_prefix("live/").map(str::to_string) else {
        return;
    };
    let storage = &node.config.storage;
    let pool = match node.recordings.pool(storage) {
        Ok(p) => p,
        Err(e) => {
            node.recordings
                .error(&camera, format!("cannot start the writer threads: {e}"));
            return;
        }
    };
    let limit = usize::try_from(storage.writer_queue_kb.saturating_mul(1024)).unwrap_or(usize::MAX);
    // Listed at once, so a camera waiting for its first frame or its first write is visible.
    node.recordings.update(&camera, |_| {});
    let stream = path.stream.clone();
    loop {
        // Wait for a producer of this node's own (a relayed camera is recorded by its
        // holder); an unlisted push path that was released ends its recorder.
        // A pull camera bound to another node is recorded there, even while this node still
        // pulls it (a camera move in either direction; the lease passes over).
        while !stream.is_live()
            || path.relay_from().is_some()
            || cluster.as_ref().is_some_and(|c| c.bound_elsewhere(&camera))
        {
            if !node
                .path(&path.name)
                .is_some_and(|p| Arc::ptr_eq(&p, &path))
            {
                return;
            }
            // Woken by a producer attaching; what else holds it back (a relay, a binding)
            // is looked at twice a second. (Waiting beyond the head of a finished stream
            // returns at once: that loop spun both runtime threads.)
            let step = Duration::from_millis(500);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = stream.wait_live(step), if !stream.is_live() => {}
                _ = tokio::time::sleep(step), if stream.is_live() => {}
            }
        }
        let Some(info) = stream.info() else { continue };
        let lane = pool.lane(
            CameraWriter::new(
                node.recordings.clone(),
                store.clone(),
                camera.clone(),
                stream_header(&info),
            )
            .with_write_latency(Duration::from_millis(storage.emulate.write_latency_ms)),
            limit,
        );
        let mut queue = CameraQueue {
            recordings: &node.recordings,
            camera: &camera,
            lane: &lane,
            dropping: false,
        };
        let ended = consume(&stop, &stream, &info, &mut queue).await;
        let (done, finished) = tokio::sync::oneshot::channel();
        lane.push_always(WriterMsg::Finish(done));
        let _ = finished.await;
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

/// The async side of a camera's lane: queues frames and, when the writer is behind, drops
/// up to the next keyframe (a segment must not continue from a broken GOP) and says so.
struct CameraQueue<'a> {
    recordings: &'a Recordings,
    camera: &'a str,
    lane: &'a Arc<Lane<CameraWriter>>,
    dropping: bool,
}

impl FrameSink for CameraQueue<'_> {
    /// Queues one frame; `video` frames after a drop wait for the next keyframe.
    fn push(&mut self, frame: Frame, video: bool) {
        if video && self.dropping && frame.keyframe {
            self.dropping = false;
        }
        if !(video && self.dropping) {
            // The fixed part approximates the frame's own bookkeeping in the queue.
            let size = frame.data.len() + 64;
            if self.lane.push(WriterMsg::Frame(frame), size).is_ok() {
                return;
            }
            self.dropping |= video;
        }
        self.dropped(1, "the writer pool is behind: frames dropped");
    }

    fn dropped(&self, frames: u64, why: &str) {
        self.recordings
            .update(self.camera, |s| s.frames_dropped += frames);
        let status = self.recordings.get(self.camera);
        // One error per episode: counted again only after a segment was stored since.
        if status.is_none_or(|s| s.error.as_deref() != Some(why)) {
            self.recordings.error(self.camera, why.to_string());
        }
    }
}

#[cfg(test)]
mod tests;
