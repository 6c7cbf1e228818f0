//! Which part of a camera's recordings a playback serves: where a start lands (the URL's
//! `start=` and every PLAY seek go through [`start_segment`], so they cannot disagree) and
//! which end wins ([`end_of`]). Pure functions over the index.

use std::ops::RangeInclusive;
use vigil_proto::rtsp::{rfc3339, NptTime, Range};
use vigil_storage::{CameraIndex, SegmentMeta};

/// Scale and Speed a playback accepts. Below 0.25 a 25 fps camera shows fewer than 7 frames
/// a second (a still, not slow motion); above 16 even keyframes-only play of a 1 s GOP
/// exceeds 16 frames a second of decoding for the client and 16× the bitrate of the
/// keyframes for the node. Reverse play is refused (ARCHITECTURE.md, Playback).
pub const RATES: RangeInclusive<f64> = 0.25..=16.0;

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

/// The end a PLAY serves to: the earliest of the URL's `end=`, the Range's end and the last
/// recorded instant (RFC 2326 §12.29: the server plays to the end of the range).
pub fn end_of(url_end: Option<i64>, range_end: Option<i64>, last_recorded: i64) -> i64 {
    [url_end, range_end]
        .into_iter()
        .flatten()
        .fold(last_recorded, i64::min)
}

/// Whether reaching the end a PLAY is given ends the presentation (the URL's end, or no
/// Range end at all: BYE and the session ends) or only the range (BYE, and the session stays
/// for a PLAY that continues from there).
pub fn range_end_only(url_end: Option<i64>, range_end: Option<i64>) -> bool {
    range_end.is_some_and(|r| url_end.is_none_or(|u| r < u))
}

/// What a PLAY's Range asks for, in absolute UTC ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Requested {
    /// Where to seek; None: continue where the session stopped (no Range, or `npt=now-`).
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// The Range was `clock=`: answer in clock times too.
    pub clock: bool,
}

/// A PLAY's Range in absolute times, npt counted from the presentation's `origin_ms`. Every
/// time is checked: one that overflows or ends before it starts is an error (457).
pub fn requested(range: Option<&Range>, origin_ms: i64) -> Result<Requested, String> {
    let npt = |t: &NptTime| -> Result<Option<i64>, String> {
        match t {
            NptTime::Now => Ok(None),
            NptTime::Seconds(_) => t
                .millis()
                .and_then(|ms| origin_ms.checked_add(ms))
                .map(Some)
                .ok_or_else(|| format!("npt {t} is out of range")),
        }
    };
    let r = match range {
        None => Requested::default(),
        Some(Range::Npt { start, end }) => Requested {
            start: npt(start)?,
            end: end.as_ref().map(npt).transpose()?.flatten(),
            clock: false,
        },
        Some(Range::Clock { start, end }) => Requested {
            start: Some(start.unix_millis),
            end: end.map(|e| e.unix_millis),
            clock: true,
        },
    };
    if let (Some(s), Some(e)) = (r.start, r.end) {
        if e <= s {
            return Err("the range ends before it starts".into());
        }
    }
    Ok(r)
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

    #[test]
    fn the_earliest_end_wins() {
        assert_eq!(end_of(None, None, 100), 100);
        assert_eq!(end_of(Some(50), None, 100), 50);
        assert_eq!(end_of(Some(50), Some(40), 100), 40);
        assert_eq!(end_of(Some(50), Some(60), 100), 50);
        assert_eq!(end_of(None, Some(160), 100), 100);
        assert!(range_end_only(None, Some(40)));
        assert!(range_end_only(Some(50), Some(40)));
        assert!(!range_end_only(Some(50), Some(50)));
        assert!(!range_end_only(Some(50), None));
        assert!(!range_end_only(None, None));
    }

    #[test]
    fn ranges_are_absolute_and_checked() {
        let req = |v: &str| requested(Some(&Range::parse(v).unwrap()), 1_000_000);
        assert_eq!(
            req("npt=2.5-6"),
            Ok(Requested {
                start: Some(1_002_500),
                end: Some(1_006_000),
                clock: false
            })
        );
        assert_eq!(req("npt=now-").map(|r| (r.start, r.end)), Ok((None, None)));
        assert_eq!(
            req("clock=19700101T000100Z-19700101T000200Z"),
            Ok(Requested {
                start: Some(60_000),
                end: Some(120_000),
                clock: true
            })
        );
        assert!(req("npt=6-2").is_err());
        assert!(req("npt=99999999999999999999-").is_err());
        assert!(req("npt=0-99999999999999999999").is_err());
        assert_eq!(requested(None, 5), Ok(Requested::default()));
    }
}
