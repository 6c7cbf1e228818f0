//! Where a playback's start lands in a camera's recordings: the URL's `start=` and every
//! PLAY seek go through [`start_segment`], so they cannot disagree. A pure function over
//! the index; the rules that need no index (which end wins, what a Range asks for, the
//! accepted Scale) are the session core's (`vigil_session::window`).

use vigil_proto::rtsp::rfc3339;
use vigil_storage::{CameraIndex, SegmentMeta};

pub use vigil_session::window::end_of;

/// Why nothing can be played from a requested time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRecorded {
    #[error("nothing recorded")]
    Nothing,
    #[error("recorded from {} to {}", rfc3339(*first), rfc3339(*last))]
    Outside { first: i64, last: i64 },
    #[error("nothing recorded between that start and the end")]
    NothingBeforeEnd,
}

/// The segment a playback from `t_ms` starts in: the one that recorded `t_ms`; inside a
/// gap between recordings, the next recording (surveillance clients expect playback to
/// begin at the next recorded moment); up to `tolerance_ms` before the first recording, the
/// first. Nothing after the last recorded instant, earlier than the tolerance, or when the
/// next recording starts at or after `end_ms`.
pub fn start_segment(
    index: &CameraIndex,
    t_ms: i64,
    end_ms: Option<i64>,
    tolerance_ms: i64,
) -> Result<SegmentMeta, NotRecorded> {
    let (Some(first), Some(last)) = (index.first_ms(), index.last_ms()) else {
        return Err(NotRecorded::Nothing);
    };
    if t_ms > last || t_ms < first.saturating_sub(tolerance_ms) {
        return Err(NotRecorded::Outside { first, last });
    }
    if let Some(s) = index.segment_at(t_ms) {
        return Ok(s);
    }
    index
        .first_at_or_after(t_ms)
        .filter(|s| end_ms.is_none_or(|e| s.start_ms < e))
        .ok_or(NotRecorded::NothingBeforeEnd)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;

    /// An index of segments `(start, end)`.
    pub(crate) fn index(ranges: &[(i64, i64)]) -> CameraIndex {
        ranges
            .iter()
            .map(|&(start_ms, end_ms)| SegmentMeta {
                camera: "c".into(),
                start_ms,
                end_ms,
                bytes: 1,
                frames: 1,
                file: PathBuf::new(),
                crc32: 0,
            })
            .collect()
    }

    #[test]
    fn starts_land_on_the_next_recorded_moment() {
        let ix = index(&[(10_000, 12_000), (12_000, 14_000), (20_000, 22_000)]);
        let start = |t, end| start_segment(&ix, t, end, 5_000).map(|s| s.start_ms);
        assert_eq!(start(11_000, None), Ok(10_000));
        assert_eq!(
            start(12_000, None),
            Ok(12_000),
            "a shared boundary: the later"
        );
        assert_eq!(
            start(15_000, None),
            Ok(20_000),
            "in the gap: the next recording"
        );
        assert_eq!(
            start(15_000, Some(20_000)),
            Err(NotRecorded::NothingBeforeEnd)
        );
        assert_eq!(start(9_200, None), Ok(10_000), "within the tolerance");
        assert_eq!(start(5_000, None), Ok(10_000), "at the tolerance");
        let outside = Err(NotRecorded::Outside {
            first: 10_000,
            last: 22_000,
        });
        assert_eq!(start(4_999, None), outside);
        assert_eq!(start(22_001, None), outside);
        assert_eq!(start(i64::MIN, None), outside);
        assert_eq!(start(i64::MAX, None), outside);
        assert_eq!(
            start_segment(&index(&[]), 0, None, 0),
            Err(NotRecorded::Nothing)
        );
    }
}
