//! Segments for tests, of this crate and of the crates above it (feature `testing`): one
//! builder, so that a field a segment gains is filled in here rather than in every test
//! that makes one.

use crate::{Frame, Segment, SegmentMeta, StreamHeader, TrackHeader};

/// A stream header with these `(codec, clock rate)` tracks, in track order, and an empty
/// SDP (nothing below the server reads it).
pub fn header(tracks: &[(&str, u32)]) -> StreamHeader {
    StreamHeader {
        sdp: String::new(),
        tracks: tracks
            .iter()
            .map(|&(codec, clock_rate)| TrackHeader {
                codec: codec.into(),
                clock_rate,
            })
            .collect(),
    }
}

/// The index entry of a segment of `camera` from `start_ms` to `end_ms`, with no file
/// behind it (no bytes, no frames, no checksum).
pub fn meta(camera: &str, start_ms: i64, end_ms: i64) -> SegmentMeta {
    SegmentMeta {
        camera: camera.into(),
        start_ms,
        end_ms,
        bytes: 0,
        frames: 0,
        file: Default::default(),
        crc32: 0,
    }
}

/// A segment of camera `c` holding `frames` under `header`, as a read would return it:
/// its entry spans the frames' wall times and counts them.
pub fn segment(header: StreamHeader, frames: Vec<Frame>) -> Segment {
    let start = frames.iter().map(|f| f.time_ms).min().unwrap_or(0);
    let end = frames.iter().map(|f| f.time_ms).max().unwrap_or(0);
    Segment {
        meta: SegmentMeta {
            frames: frames.len() as u32,
            ..meta("c", start, end)
        },
        header,
        frames,
    }
}
