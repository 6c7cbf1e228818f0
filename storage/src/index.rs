//! The per-camera index: an in-memory `BTreeMap` keyed by segment start, answering range
//! queries in O(log n + k), plus the file/directory naming that lets the index be rebuilt from
//! a directory listing alone (every field of [`SegmentMeta`] is in the file name).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Metadata of one complete segment, as listed by the index.
#[derive(Clone, Debug, PartialEq)]
pub struct SegmentMeta {
    pub camera: String,
    /// Time of the first frame (UTC ms).
    pub start_ms: i64,
    /// Time of the keyframe that started the next segment when the recorder cut there (so
    /// consecutive segments touch); otherwise last frame time + one frame interval estimate.
    pub end_ms: i64,
    /// File size in bytes.
    pub bytes: u64,
    pub frames: u32,
    /// Path relative to the store root.
    pub file: PathBuf,
    /// CRC-32 stored at the end of the file.
    pub crc32: u32,
}

/// Snapshot of a camera's complete segments. Cloning is cheap (the map is shared); the store
/// copies it on write only while a snapshot is still alive.
#[derive(Clone, Debug, Default)]
pub struct CameraIndex {
    pub(crate) segs: Arc<BTreeMap<i64, SegmentMeta>>,
    /// Longest segment ever inserted: bounds how far before `t0` an overlapping segment can
    /// start, so `covering` need not scan from the beginning.
    pub(crate) max_len_ms: i64,
}

/// An index of the given segments (tests and tools that build one without a store).
impl FromIterator<SegmentMeta> for CameraIndex {
    fn from_iter<I: IntoIterator<Item = SegmentMeta>>(iter: I) -> Self {
        let mut ix = CameraIndex::default();
        for m in iter {
            ix.insert(m);
        }
        ix
    }
}

impl CameraIndex {
    pub(crate) fn insert(&mut self, meta: SegmentMeta) {
        self.max_len_ms = self
            .max_len_ms
            .max(meta.end_ms.saturating_sub(meta.start_ms));
        Arc::make_mut(&mut self.segs).insert(meta.start_ms, meta);
    }

    pub(crate) fn remove(&mut self, start_ms: i64) -> Option<SegmentMeta> {
        if !self.segs.contains_key(&start_ms) {
            return None;
        }
        Arc::make_mut(&mut self.segs).remove(&start_ms)
    }

    /// All segments in start order.
    pub fn segments(&self) -> impl Iterator<Item = &SegmentMeta> {
        self.segs.values()
    }

    /// Segments overlapping `[t0_ms, t1_ms]`, in start order.
    pub fn covering(&self, t0_ms: i64, t1_ms: i64) -> Vec<SegmentMeta> {
        if t1_ms < t0_ms {
            return Vec::new();
        }
        let from = t0_ms.saturating_sub(self.max_len_ms);
        self.segs
            .range(from..=t1_ms)
            .map(|(_, m)| m)
            .filter(|m| m.end_ms >= t0_ms)
            .cloned()
            .collect()
    }

    /// The segment containing `t_ms` (start <= t <= end); at a boundary shared by two
    /// segments, the later one (playback wants to start at its keyframe).
    pub fn segment_at(&self, t_ms: i64) -> Option<&SegmentMeta> {
        let from = t_ms.saturating_sub(self.max_len_ms);
        self.segs
            .range(from..=t_ms)
            .rev()
            .map(|(_, m)| m)
            .find(|m| m.end_ms >= t_ms)
    }

    /// The segment that starts after `seg`.
    pub fn next_after(&self, seg: &SegmentMeta) -> Option<&SegmentMeta> {
        use std::ops::Bound::{Excluded, Unbounded};
        self.segs
            .range((Excluded(seg.start_ms), Unbounded))
            .next()
            .map(|(_, m)| m)
    }

    /// Recorded ranges `(start, end)`: segments are merged while the gap between one's end and
    /// the next one's start is at most `max_gap_ms`.
    pub fn ranges(&self, max_gap_ms: i64) -> Vec<(i64, i64)> {
        let mut out: Vec<(i64, i64)> = Vec::new();
        for m in self.segs.values() {
            match out.last_mut() {
                Some((_, end)) if m.start_ms.saturating_sub(*end) <= max_gap_ms => {
                    *end = (*end).max(m.end_ms);
                }
                _ => out.push((m.start_ms, m.end_ms)),
            }
        }
        out
    }

    pub fn first_ms(&self) -> Option<i64> {
        self.segs.values().next().map(|m| m.start_ms)
    }

    pub fn last_ms(&self) -> Option<i64> {
        self.segs.values().map(|m| m.end_ms).next_back()
    }

    pub fn len(&self) -> usize {
        self.segs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Sum of segment sizes.
    pub fn total_bytes(&self) -> u64 {
        self.segs.values().map(|m| m.bytes).sum()
    }
}

/// File name of a complete segment: `<start>_<end>_<frames>_<bytes>_<crc32 hex>.seg`.
pub(crate) fn segment_file_name(
    start_ms: i64,
    end_ms: i64,
    frames: u32,
    bytes: u64,
    crc: u32,
) -> String {
    format!("{start_ms}_{end_ms}_{frames}_{bytes}_{crc:08x}.seg")
}

/// Parses a segment file name back into its fields; `None` for anything else.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<(i64, i64, u32, u64, u32)> {
    let stem = name.strip_suffix(".seg")?;
    let mut it = stem.split('_');
    let start = it.next()?.parse().ok()?;
    let end = it.next()?.parse().ok()?;
    let frames = it.next()?.parse().ok()?;
    let bytes = it.next()?.parse().ok()?;
    let crc_hex = it.next()?;
    if crc_hex.len() != 8 || it.next().is_some() {
        return None;
    }
    let crc = u32::from_str_radix(crc_hex, 16).ok()?;
    (end >= start).then_some((start, end, frames, bytes, crc))
}

/// Directory (one per UTC hour) holding the segments that start in that hour:
/// `YYYY-MM-DDTHH`. Hour directories keep listings small (≈900 entries at 4 s segments) so
/// rescanning the one being written is cheap.
pub(crate) fn hour_dir_name(start_ms: i64) -> String {
    // Clamped to the years jiff can name (±9999); recording times come from the wall clock.
    let min = jiff::Timestamp::MIN.as_millisecond();
    let max = jiff::Timestamp::MAX.as_millisecond();
    jiff::Timestamp::from_millisecond(start_ms.clamp(min, max))
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H")
        .to_string()
}

/// True for names produced by [`hour_dir_name`].
pub(crate) fn is_hour_dir_name(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() >= 13
        && b[b.len() - 3] == b'T'
        && b.iter()
            .all(|c| c.is_ascii_digit() || *c == b'-' || *c == b'T')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(start: i64, end: i64) -> SegmentMeta {
        SegmentMeta {
            camera: "c".into(),
            start_ms: start,
            end_ms: end,
            bytes: 10,
            frames: 1,
            file: PathBuf::new(),
            crc32: 0,
        }
    }

    #[test]
    fn names_roundtrip() {
        let n = segment_file_name(-5, 7, 3, 99, 0xdead_beef);
        assert_eq!(
            parse_segment_file_name(&n),
            Some((-5, 7, 3, 99, 0xdead_beef))
        );
        assert_eq!(parse_segment_file_name("x.seg"), None);
        assert_eq!(parse_segment_file_name("5_4_1_1_00000000.seg"), None);
        assert_eq!(hour_dir_name(0), "1970-01-01T00");
        assert_eq!(hour_dir_name(1_700_000_000_000), "2023-11-14T22");
        assert_eq!(hour_dir_name(-1), "1969-12-31T23");
        assert!(is_hour_dir_name(&hour_dir_name(1_700_000_000_000)));
        assert!(!is_hour_dir_name(".tmp"));
    }

    #[test]
    fn queries() {
        let mut ix = CameraIndex::default();
        for (s, e) in [(0, 4000), (4000, 8000), (8000, 12000), (20000, 24000)] {
            ix.insert(meta(s, e));
        }
        let starts = |v: Vec<SegmentMeta>| v.iter().map(|m| m.start_ms).collect::<Vec<_>>();
        assert_eq!(starts(ix.covering(3000, 5000)), vec![0, 4000]);
        assert_eq!(starts(ix.covering(12500, 19000)), Vec::<i64>::new());
        assert_eq!(starts(ix.covering(11000, 30000)), vec![8000, 20000]);
        assert_eq!(ix.segment_at(4000).map(|m| m.start_ms), Some(4000));
        assert_eq!(ix.segment_at(3999).map(|m| m.start_ms), Some(0));
        assert_eq!(ix.segment_at(15000), None);
        assert_eq!(
            ix.next_after(&meta(8000, 0)).map(|m| m.start_ms),
            Some(20000)
        );
        assert_eq!(ix.ranges(1000), vec![(0, 12000), (20000, 24000)]);
        assert_eq!(ix.ranges(10000), vec![(0, 24000)]);
        assert_eq!((ix.first_ms(), ix.last_ms()), (Some(0), Some(24000)));
        let snap = ix.clone();
        ix.remove(0);
        assert_eq!((snap.len(), ix.len()), (4, 3));
    }
}
