//! Where a playback starts or seeks to, read from storage: the segment
//! [`window::start_segment`] names, loaded within the request's storage bound, and the
//! keyframe at or before the asked time in it. RTSP's PLAY seek and WebRTC's offer and seek
//! all come here, so the two protocols land on the same frame for the same time; an RTSP
//! DESCRIBE, a WHEP offer and the price a placement puts on it find their first segment here
//! too ([`first_segment`]).

use super::task::Cursor;
use super::window::{self, NotRecorded};
use crate::library::{CachedSegment, Library, LibraryError};
use std::sync::Arc;
use std::time::Duration;
use vigil_storage::{CameraIndex, SegmentMeta};

/// Which read the start's segment is: the one that opens a playback (counted as a cache
/// hit or miss, as a DESCRIBE's, and kept as a start segment), or a seek within one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opens {
    Counted,
    Seek,
}

/// Why a playback cannot start from the asked time; each caller answers in its protocol.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    #[error("no recordings of camera {0}")]
    NoCamera(String),
    #[error("nothing to play from that time ({0})")]
    NotRecorded(#[from] NotRecorded),
    #[error("storage did not answer within {} ms", .0.as_millis())]
    TimedOut(Duration),
    #[error("reading the recording: {0}")]
    Read(LibraryError),
}

/// How to find a start: the playback's end (nothing after it plays), how far before the
/// first recording a start still takes it (`[playback] start_tolerance_secs`), and how
/// long a request waits for storage (`[storage] request_read_timeout_ms`).
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub end_ms: Option<i64>,
    pub tolerance_ms: i64,
    pub read_limit: Duration,
}

impl Bounds {
    /// This node's bounds for a playback ending at `end_ms`.
    pub fn of(config: &vigil_conf::Config, end_ms: Option<i64>) -> Bounds {
        Bounds {
            end_ms,
            tolerance_ms: (config.playback.start_tolerance_secs * 1000.0) as i64,
            read_limit: Duration::from_millis(config.storage.request_read_timeout_ms),
        }
    }
}

/// `camera`'s index, loaded within `limit` (a hung shared volume answers `TimedOut`, not
/// a request held open).
pub async fn index(
    library: &Library,
    camera: &str,
    limit: Duration,
) -> Result<CameraIndex, LocateError> {
    tokio::time::timeout(limit, library.index(camera))
        .await
        .map_err(|_| LocateError::TimedOut(limit))?
        .map_err(|e| match e {
            // Too many reads already wait on a hung volume: the same answer as waiting.
            LibraryError::Busy(_) => LocateError::TimedOut(limit),
            _ => LocateError::NoCamera(camera.to_string()),
        })
}

/// Where a playback of `camera` from `t_ms` starts: the camera's index and the segment that
/// [`window::start_segment`] names, not read yet.
pub async fn first_segment(
    library: &Library,
    camera: &str,
    t_ms: i64,
    bounds: Bounds,
) -> Result<(CameraIndex, SegmentMeta), LocateError> {
    let index = index(library, camera, bounds.read_limit).await?;
    let segment = window::start_segment(&index, t_ms, bounds.end_ms, bounds.tolerance_ms)?;
    Ok((index, segment))
}

/// The start of a playback from `t_ms` in `index`: its cursor and the segment, read.
pub async fn locate(
    library: &Library,
    index: &CameraIndex,
    t_ms: i64,
    bounds: Bounds,
    opens: Opens,
) -> Result<(Cursor, Arc<CachedSegment>), LocateError> {
    let segment = window::start_segment(index, t_ms, bounds.end_ms, bounds.tolerance_ms)?;
    let read = async {
        match opens {
            Opens::Counted => library.open_segment(&segment).await,
            Opens::Seek => library.segment(&segment).await,
        }
    };
    let seg = tokio::time::timeout(bounds.read_limit, read)
        .await
        .map_err(|_| LocateError::TimedOut(bounds.read_limit))?
        .map_err(LocateError::Read)?;
    let frame = seg.0.keyframe_at_or_before(t_ms);
    Ok((Cursor { segment, frame }, seg))
}
