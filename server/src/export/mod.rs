//! Evidence export: `GET /api/export/<camera>?start=<RFC 3339>&end=<RFC 3339>[&download=1]`
//! answers an MP4 of that range of the recording, starting on the keyframe at or before
//! `start`: a fragmented MP4 streamed as segments are read, or with `download=1` a plain MP4
//! with `moov` first (faststart) and a Content-Length, made in two passes over the range.
//!
//! Gaps between recordings stay in the timeline at their wall-clock length, every frame at
//! its recorded time: in the fragmented file the next fragment's decode time jumps over the
//! gap; in the plain file the last frame before the gap lasts until the next recording (a
//! mid-file empty edit would say it better, but ffmpeg mis-reads those). Frame rates are
//! never changed to fill or hide a gap.
//!
//! Who may export: the route is a read of the admin API, so the token layer applies — open
//! to a local request on the plain loopback listener, the admin token otherwise (always over
//! HTTPS). RTSP `[auth]` rights are not consulted (the token is all or nothing). At most
//! `[export] max_concurrent` exports stream at once (503 beyond).

pub mod mux;
pub mod plan;
pub mod timeline;
pub mod tracks;

use crate::library::{CachedSegment, Library};
use crate::node::Node;
use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use plan::ExportError;
use std::collections::HashMap;
use std::sync::Arc;
use vigil_proto::rtsp::{rfc3339, UtcTime};
use vigil_storage::{CameraIndex, SegmentMeta, StorageError};

/// Chunks queued between the reading task and the HTTP connection: frames, each a shared
/// slice of a segment in memory, so this bounds nothing but bookkeeping.
const QUEUE: usize = 64;

/// The route's handler: the MP4, or the refusal as text with its status.
pub async fn export(node: Arc<Node>, camera: String, query: HashMap<String, String>) -> Response {
    match prepare(&node, &camera, &query).await {
        Ok(r) => r,
        Err(e) => (
            StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            format!("{e}\n"),
        )
            .into_response(),
    }
}

/// The node's exports in flight (`[export] max_concurrent`), in `node.extensions`.
struct ExportSlots(Arc<tokio::sync::Semaphore>);

/// A place for one more export, held until its stream ends (the client read it all, went
/// away, or the node shut down), or the refusal: an export reads a day of segments at
/// most, and a flood of them would starve recording of the volume (issue 44, L7).
fn export_slot(node: &Node) -> Result<tokio::sync::OwnedSemaphorePermit, ExportError> {
    let max = node.config.export.max_concurrent;
    let slots = node
        .extensions
        .get_or_init(|| Arc::new(ExportSlots(Arc::new(tokio::sync::Semaphore::new(max)))));
    slots
        .0
        .clone()
        .try_acquire_owned()
        .map_err(|_| ExportError::Busy(max))
}

/// The recordings of a node that records, or the refusal.
pub fn library_of(node: &Node, camera: &str) -> Result<Library, ExportError> {
    node.library.clone().ok_or_else(|| {
        ExportError::UnknownCamera(format!("{camera} (recording is disabled on this node)"))
    })
}

/// The camera's index; a camera neither recorded nor configured nor live here is unknown
/// (404), one known but never recorded has an empty index.
pub async fn index_of(
    node: &Node,
    library: &Library,
    camera: &str,
) -> Result<CameraIndex, ExportError> {
    match library.index(camera).await {
        Ok(i) => Ok(i),
        Err(e) => match e.storage() {
            Some(StorageError::UnknownCamera(_) | StorageError::InvalidCamera(_)) => {
                if known(node, camera) {
                    Ok(CameraIndex::default())
                } else {
                    Err(ExportError::UnknownCamera(camera.to_string()))
                }
            }
            _ => Err(ExportError::Unexportable(e.to_string())),
        },
    }
}

/// Where a presentation from `start` begins.
pub struct Opening {
    pub first: Arc<CachedSegment>,
    /// The keyframe at or before `start` in the first segment, and its wall-clock time:
    /// time 0 of the file.
    pub from: usize,
    pub t0_ms: i64,
    pub tracks: tracks::Tracks,
}

/// Reads the first segment (through the cache, or once past it) and finds the start.
pub async fn open(
    library: &Library,
    first: &SegmentMeta,
    start: i64,
    cached: bool,
) -> Result<Opening, ExportError> {
    let seg = if cached {
        library.segment(first).await
    } else {
        library.segment_once(first).await
    }
    .map_err(|e| ExportError::Unexportable(e.to_string()))?;
    let from = seg.0.keyframe_at_or_before(start);
    let t0_ms = seg.0.frames.get(from).map_or(start, |f| f.time_ms);
    let tracks = tracks::Tracks::of(&seg.0, from)?;
    Ok(Opening {
        first: seg,
        from,
        t0_ms,
        tracks,
    })
}

fn known(node: &Node, camera: &str) -> bool {
    node.cameras().contains_key(camera) || node.path(&format!("live/{camera}")).is_some()
}

async fn prepare(
    node: &Arc<Node>,
    camera: &str,
    query: &HashMap<String, String>,
) -> Result<Response, ExportError> {
    let library = library_of(node, camera)?;
    let slot = export_slot(node)?;
    let max_ms = (node.config.export.max_range_secs * 1000.0) as i64;
    let index = index_of(node, &library, camera).await?;
    let (start, end) = plan::range(
        query.get("start").map(String::as_str),
        query.get("end").map(String::as_str),
        max_ms,
    )?;
    let segments = plan::segments(camera, &index, start, end, crate::library::GAP_MS)?;
    let Opening {
        from,
        t0_ms,
        tracks,
        ..
    } = open(&library, &segments[0], start, false).await?;
    let tracks = Arc::new(tracks);
    let estimate: u64 = segments.iter().map(|s| s.bytes).sum();
    let src = mux::Source {
        library,
        segments,
        read_ahead: node.config.export.read_ahead,
        tracks,
        from,
        t0_ms,
        end_ms: end,
    };
    let download = query
        .get("download")
        .is_some_and(|v| v == "1" || v == "true");
    let (tx, mut rx) = tokio::sync::mpsc::channel::<mux::Chunk>(QUEUE);
    let mut length = None;
    // The node's shutdown cuts an export short (as an error, so the client sees a
    // truncated transfer): the HTTP server's graceful shutdown waits for open responses.
    let shutdown = node.shutdown.clone();
    let abort = tx.clone();
    let cut_short = async move {
        shutdown.cancelled().await;
        let _ = abort
            .send(Err(std::io::Error::other("the node is shutting down")))
            .await;
    };
    if download {
        let layout = mux::layout(&src).await?;
        length = Some(layout.content_length());
        tokio::spawn(async move {
            let _slot = slot;
            tokio::select! {
                _ = mux::faststart(src, layout, tx) => {}
                _ = cut_short => {}
            }
        });
    } else {
        tokio::spawn(async move {
            let _slot = slot;
            tokio::select! {
                _ = mux::fragmented(src, tx) => {}
                _ = cut_short => {}
            }
        });
    }
    tracing::info!(camera, start = %rfc3339(t0_ms), end = %rfc3339(end), download, "export");
    let body = Body::from_stream(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("video/mp4"));
    let name = format!(
        "attachment; filename=\"{camera}-{}.mp4\"",
        UtcTime { unix_millis: t0_ms }.to_clock_string()
    );
    if let Ok(v) = HeaderValue::from_str(&name) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&rfc3339(t0_ms)) {
        h.insert("x-vigil-export-start", v);
    }
    match length {
        Some(n) => {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        None => {
            // The recording's bytes in the range: a progress estimate for clients.
            h.insert("x-vigil-estimated-length", HeaderValue::from(estimate));
        }
    }
    Ok(resp)
}
