//! What an export request asks for and which segments answer it (pure): the range checks,
//! the refusal statuses, and the segments from the one holding `start` to the last one
//! starting before `end`.

use vigil_proto::rtsp::{rfc3339, TimeSpan, TimeSpanError};
use vigil_storage::{CameraIndex, SegmentMeta};

/// Why an export is refused, with its HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    #[error("unknown camera {0:?}")]
    UnknownCamera(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("nothing recorded for camera {camera} between {} and {}; recorded: {}", rfc3339(*start), rfc3339(*end), list(ranges))]
    NotRecorded {
        camera: String,
        start: i64,
        end: i64,
        ranges: Vec<(i64, i64)>,
    },
    #[error("cannot export: {0}")]
    Unexportable(String),
    /// `[export] max_concurrent` exports are streaming on this node.
    #[error("{0} exports are running on this node ([export] max_concurrent): try again later")]
    Busy(usize),
}

impl ExportError {
    pub fn status(&self) -> u16 {
        match self {
            ExportError::UnknownCamera(_) | ExportError::NotRecorded { .. } => 404,
            ExportError::BadRequest(_) => 400,
            ExportError::Unexportable(_) => 500,
            ExportError::Busy(_) => 503,
        }
    }
}

/// A URL's `start`/`end` that name no stretch: the client's mistake.
impl From<TimeSpanError> for ExportError {
    fn from(e: TimeSpanError) -> Self {
        ExportError::BadRequest(e.to_string())
    }
}

fn list(ranges: &[(i64, i64)]) -> String {
    if ranges.is_empty() {
        return "nothing".into();
    }
    ranges
        .iter()
        .map(|&(a, b)| format!("{}/{}", rfc3339(a), rfc3339(b)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The requested range in UTC ms: both ends given as RFC 3339, `end` after `start`, at most
/// `max_ms` long.
pub fn range(
    start: Option<&str>,
    end: Option<&str>,
    max_ms: i64,
) -> Result<(i64, i64), ExportError> {
    let (s, e) = span(start, end, max_ms)?;
    Ok((s, e.ok_or(TimeSpanError::Missing("end"))?))
}

/// The requested span in UTC ms: `start` as RFC 3339, `end` when given after it and at most
/// `max_ms` past it — the one cap of every reader of a recording range over HTTP (export,
/// HLS playback), so no request plans more than `[export] max_range_secs` of segments.
pub fn span(
    start: Option<&str>,
    end: Option<&str>,
    max_ms: i64,
) -> Result<(i64, Option<i64>), ExportError> {
    let span = TimeSpan::parse(start, end)?;
    let s = span.start_ms;
    if let Some(e) = span.end_ms {
        if e.saturating_sub(s) > max_ms {
            return Err(ExportError::BadRequest(format!(
                "the range is {} s long; at most {} s may be read at once ([export] max_range_secs)",
                (e.saturating_sub(s)) / 1000,
                max_ms / 1000
            )));
        }
    }
    Ok((s, span.end_ms))
}

/// The segments an export of `[start, end)` reads: from the one recording `start` (inside a
/// gap: the next recording) to the last one starting before `end`.
pub fn segments(
    camera: &str,
    index: &CameraIndex,
    start: i64,
    end: i64,
    gap_ms: i64,
) -> Result<Vec<SegmentMeta>, ExportError> {
    let first = index
        .segment_at(start)
        .filter(|s| s.end_ms > start || s.start_ms == start)
        .or_else(|| index.first_at_or_after(start))
        .filter(|s| s.start_ms < end);
    let Some(first) = first else {
        return Err(ExportError::NotRecorded {
            camera: camera.to_string(),
            start,
            end,
            ranges: index.ranges(gap_ms),
        });
    };
    Ok(index
        .covering(first.start_ms, end)
        .into_iter()
        .filter(|s| s.start_ms >= first.start_ms && s.start_ms < end)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::playback::window::tests::index;

    #[test]
    fn ranges_are_checked() {
        let r = |s, e| range(s, e, 3_600_000);
        assert_eq!(
            r(Some("2026-01-01T00:00:00Z"), Some("2026-01-01T00:00:10Z")),
            Ok((1_767_225_600_000, 1_767_225_610_000))
        );
        let bad = |s, e| r(s, e).map_err(|e| e.status());
        assert_eq!(
            bad(Some("2026-01-01T00:00:10Z"), Some("2026-01-01T00:00:10Z")),
            Err(400)
        );
        assert_eq!(
            bad(Some("2026-01-01T00:00:10Z"), Some("2026-01-01T00:00:00Z")),
            Err(400)
        );
        assert_eq!(
            bad(Some("2026-01-01T00:00:00Z"), Some("2026-01-01T01:00:01Z")),
            Err(400)
        );
        assert!(bad(Some("2026-01-01T00:00:00Z"), Some("2026-01-01T01:00:00Z")).is_ok());
        // HLS playback's open span: capped when `end` is given, open without it; a span of
        // eight thousand years (issue 44, M2) is refused before any segment is planned.
        let hls = |s, e| span(Some(s), e, 3_600_000).map_err(|e| e.status());
        assert_eq!(
            hls("2026-01-01T00:00:00Z", None),
            Ok((1_767_225_600_000, None))
        );
        assert_eq!(
            hls("1970-01-01T00:00:00Z", Some("9999-12-31T00:00:00Z")),
            Err(400)
        );
        assert!(hls("2026-01-01T00:00:00Z", Some("2026-01-01T01:00:00Z")).is_ok());
        assert_eq!(bad(None, Some("2026-01-01T00:00:00Z")), Err(400));
        assert_eq!(
            r(Some("2026-01-01T00:00:00Z"), None).map_err(|e| e.to_string()),
            Err("end= is required (an RFC 3339 time like 2026-11-29T08:00:00Z)".into())
        );
        assert_eq!(
            bad(Some("yesterday"), Some("2026-01-01T00:00:00Z")),
            Err(400)
        );
    }

    #[test]
    fn segments_from_the_start_to_before_the_end() {
        let ix = index(&[
            (10_000, 12_000),
            (12_000, 14_000),
            (14_000, 16_000),
            (30_000, 32_000),
        ]);
        let starts = |s, e| {
            segments("c", &ix, s, e, 1500).map(|v| v.iter().map(|m| m.start_ms).collect::<Vec<_>>())
        };
        assert_eq!(starts(11_000, 13_000), Ok(vec![10_000, 12_000]));
        assert_eq!(
            starts(12_000, 14_000),
            Ok(vec![12_000]),
            "a shared boundary: the later"
        );
        assert_eq!(
            starts(13_000, 31_000),
            Ok(vec![12_000, 14_000, 30_000]),
            "across the gap"
        );
        assert_eq!(
            starts(20_000, 40_000),
            Ok(vec![30_000]),
            "from inside a gap"
        );
        let err = segments("c", &ix, 17_000, 29_000, 1500).unwrap_err();
        assert_eq!(err.status(), 404);
        let text = err.to_string();
        assert!(
            text.contains("1970-01-01T00:00:10Z/1970-01-01T00:00:16Z"),
            "{text}"
        );
        assert!(
            text.contains("1970-01-01T00:00:30Z/1970-01-01T00:00:32Z"),
            "{text}"
        );
        assert_eq!(
            segments("c", &ix, 40_000, 50_000, 1500)
                .unwrap_err()
                .status(),
            404
        );
    }
}
