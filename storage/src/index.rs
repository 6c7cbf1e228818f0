//! The per-camera index: an in-memory `BTreeMap` keyed by segment start, answering range
//! queries in O(log n + k), plus the file/directory naming that lets the index be rebuilt from
//! a directory listing alone (every field of [`SegmentMeta`] is in the file name).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::store::CAMERAS_DIR;

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

impl SegmentMeta {
    /// The segment's own bitrate (bits per second): what a playback starting in it sends at
    /// Scale 1. `None` for a segment without duration. (A camera's whole index is no
    /// estimate: bytes over its span would count the gaps between recordings as silence.)
    pub fn bitrate_bps(&self) -> Option<f64> {
        let ms = self.end_ms - self.start_ms;
        (ms > 0).then(|| self.bytes as f64 * 8000.0 / ms as f64)
    }
}

/// One segment as the index keeps it: 32 bytes. The camera and the file are not stored: the
/// file is `cameras/<camera>/<hour of start>/<name made of these fields>` (a week of one
/// camera is ≈150 k entries: 4.8 MB this way, ≈40 MB with a `String` and a `PathBuf` each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub start_ms: i64,
    pub end_ms: i64,
    pub bytes: u64,
    pub frames: u32,
    pub crc32: u32,
}

/// The hour (since the epoch) whose directory holds a segment starting at `start_ms`.
pub(crate) fn hour_of(start_ms: i64) -> i64 {
    start_ms.div_euclid(3_600_000)
}

/// The segments of one hour directory, sorted by start.
#[derive(Clone, Debug, Default)]
pub(crate) struct Hour {
    entries: Vec<Entry>,
    bytes: u64,
}

impl Hour {
    /// From a directory listing (any order; a start listed twice keeps the last).
    pub(crate) fn from_entries(mut entries: Vec<Entry>) -> Hour {
        entries.sort_by_key(|e| e.start_ms);
        entries.dedup_by(|later, earlier| {
            let same = later.start_ms == earlier.start_ms;
            if same {
                *earlier = *later;
            }
            same
        });
        let bytes = entries.iter().map(|e| e.bytes).sum();
        Hour { entries, bytes }
    }
}

/// Snapshot of a camera's complete segments, in hour chunks: cloning shares every chunk, and
/// a change (a committed segment, a rescanned or deleted hour) copies only the map of hours
/// (≈170 pointers for a week) and the one chunk it touches (≤ 900 entries) while a snapshot
/// is alive — never the whole week, which playback sessions hold snapshots of.
#[derive(Clone, Debug, Default)]
pub struct CameraIndex {
    camera: Arc<str>,
    hours: Arc<BTreeMap<i64, Arc<Hour>>>,
    len: usize,
    total_bytes: u64,
    /// Longest segment ever inserted: bounds how far before `t0` an overlapping segment can
    /// start, so queries need not scan from the beginning.
    max_len_ms: i64,
}

/// An index of the given segments (tests and tools that build one without a store).
impl FromIterator<SegmentMeta> for CameraIndex {
    fn from_iter<I: IntoIterator<Item = SegmentMeta>>(iter: I) -> Self {
        let mut ix = CameraIndex::default();
        for m in iter {
            if ix.camera.is_empty() {
                ix.camera = m.camera.as_str().into();
            }
            ix.insert(Entry {
                start_ms: m.start_ms,
                end_ms: m.end_ms,
                bytes: m.bytes,
                frames: m.frames,
                crc32: m.crc32,
            });
        }
        ix
    }
}

impl CameraIndex {
    pub(crate) fn new(camera: &str) -> CameraIndex {
        CameraIndex {
            camera: camera.into(),
            ..Default::default()
        }
    }

    fn meta(&self, e: &Entry) -> SegmentMeta {
        SegmentMeta {
            camera: self.camera.to_string(),
            start_ms: e.start_ms,
            end_ms: e.end_ms,
            bytes: e.bytes,
            frames: e.frames,
            file: PathBuf::from(CAMERAS_DIR)
                .join(&*self.camera)
                .join(hour_dir_name(e.start_ms))
                .join(segment_file_name(
                    e.start_ms, e.end_ms, e.frames, e.bytes, e.crc32,
                )),
            crc32: e.crc32,
        }
    }

    /// Replaces (or with `None` removes) one hour's chunk.
    pub(crate) fn set_hour(&mut self, hour: i64, chunk: Option<Hour>) {
        let hours = Arc::make_mut(&mut self.hours);
        if let Some(old) = hours.remove(&hour) {
            self.len -= old.entries.len();
            self.total_bytes -= old.bytes;
        }
        if let Some(c) = chunk.filter(|c| !c.entries.is_empty()) {
            self.len += c.entries.len();
            self.total_bytes += c.bytes;
            for e in &c.entries {
                self.max_len_ms = self.max_len_ms.max(e.end_ms.saturating_sub(e.start_ms));
            }
            hours.insert(hour, Arc::new(c));
        }
    }

    pub(crate) fn insert(&mut self, e: Entry) {
        let hour = hour_of(e.start_ms);
        let mut chunk = self
            .hours
            .get(&hour)
            .map(|h| (**h).clone())
            .unwrap_or_default();
        match chunk
            .entries
            .binary_search_by_key(&e.start_ms, |x| x.start_ms)
        {
            Ok(i) => {
                chunk.bytes = chunk.bytes - chunk.entries[i].bytes + e.bytes;
                chunk.entries[i] = e;
            }
            Err(i) => {
                chunk.bytes += e.bytes;
                chunk.entries.insert(i, e);
            }
        }
        self.set_hour(hour, Some(chunk));
    }

    pub(crate) fn remove(&mut self, start_ms: i64) -> bool {
        let hour = hour_of(start_ms);
        let Some(h) = self.hours.get(&hour) else {
            return false;
        };
        let Ok(i) = h.entries.binary_search_by_key(&start_ms, |x| x.start_ms) else {
            return false;
        };
        let mut chunk = (**h).clone();
        let e = chunk.entries.remove(i);
        chunk.bytes -= e.bytes;
        self.set_hour(hour, Some(chunk));
        true
    }

    fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> {
        self.hours.values().flat_map(|h| h.entries.iter())
    }

    /// Entries of the hours that may hold a segment overlapping `[t0, t1]`, in start order.
    fn entries_around(&self, t0_ms: i64, t1_ms: i64) -> impl DoubleEndedIterator<Item = &Entry> {
        let from = hour_of(t0_ms.saturating_sub(self.max_len_ms));
        self.hours
            .range(from..=hour_of(t1_ms))
            .flat_map(|(_, h)| h.entries.iter())
    }

    /// All segments in start order.
    pub fn segments(&self) -> impl DoubleEndedIterator<Item = SegmentMeta> + '_ {
        self.entries().map(|e| self.meta(e))
    }

    /// Segments overlapping `[t0_ms, t1_ms]`, in start order.
    pub fn covering(&self, t0_ms: i64, t1_ms: i64) -> Vec<SegmentMeta> {
        if t1_ms < t0_ms {
            return Vec::new();
        }
        self.entries_around(t0_ms, t1_ms)
            .filter(|e| e.start_ms <= t1_ms && e.end_ms >= t0_ms)
            .map(|e| self.meta(e))
            .collect()
    }

    /// The segment containing `t_ms` (start <= t <= end); at a boundary shared by two
    /// segments, the later one (playback wants to start at its keyframe).
    pub fn segment_at(&self, t_ms: i64) -> Option<SegmentMeta> {
        let from = t_ms.saturating_sub(self.max_len_ms);
        self.entries_around(t_ms, t_ms)
            .rev()
            .skip_while(|e| e.start_ms > t_ms)
            .take_while(|e| e.start_ms >= from)
            .find(|e| e.end_ms >= t_ms)
            .map(|e| self.meta(e))
    }

    /// The first segment starting at or after `t_ms`.
    pub fn first_at_or_after(&self, t_ms: i64) -> Option<SegmentMeta> {
        self.hours
            .range(hour_of(t_ms)..)
            .flat_map(|(_, h)| h.entries.iter())
            .find(|e| e.start_ms >= t_ms)
            .map(|e| self.meta(e))
    }

    /// The segment that starts after `seg`.
    pub fn next_after(&self, seg: &SegmentMeta) -> Option<SegmentMeta> {
        self.hours
            .range(hour_of(seg.start_ms)..)
            .flat_map(|(_, h)| h.entries.iter())
            .find(|e| e.start_ms > seg.start_ms)
            .map(|e| self.meta(e))
    }

    /// Up to `n` segments after `seg`, in order, none starting at or after `end_ms` (a
    /// bounded playback's read-ahead stops at its end, not in the camera's next recording).
    pub fn following(&self, seg: &SegmentMeta, n: usize, end_ms: Option<i64>) -> Vec<SegmentMeta> {
        let mut out = Vec::with_capacity(n);
        let mut cur = seg.clone();
        while out.len() < n {
            let Some(next) = self.next_after(&cur) else {
                break;
            };
            if end_ms.is_some_and(|end| next.start_ms >= end) {
                break;
            }
            out.push(next.clone());
            cur = next;
        }
        out
    }

    /// Recorded ranges `(start, end)`: segments are merged while the gap between one's end and
    /// the next one's start is at most `max_gap_ms`.
    pub fn ranges(&self, max_gap_ms: i64) -> Vec<(i64, i64)> {
        let mut out: Vec<(i64, i64)> = Vec::new();
        for m in self.entries() {
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
        self.entries().next().map(|m| m.start_ms)
    }

    pub fn last_ms(&self) -> Option<i64> {
        self.entries().next_back().map(|m| m.end_ms)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sum of segment sizes.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
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

    fn entry(start: i64, end: i64) -> Entry {
        Entry {
            start_ms: start,
            end_ms: end,
            bytes: 10,
            frames: 1,
            crc32: 0,
        }
    }

    /// 305 000 bytes over 4 s: 610 kb/s, the demo clip's rate; no duration, no rate.
    #[test]
    fn a_segments_bitrate_is_its_bytes_over_its_duration() {
        let meta = |start: i64, end: i64| SegmentMeta {
            bytes: 305_000,
            frames: 100,
            ..crate::testing::meta("c", start, end)
        };
        assert_eq!(meta(10_000, 14_000).bitrate_bps(), Some(610_000.0));
        assert_eq!(meta(10_000, 10_000).bitrate_bps(), None);
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
    fn following_stops_at_the_count_the_end_and_the_last_segment() {
        let mut ix = CameraIndex::new("c");
        // Two recordings: 0–12 s and, after a gap, 20–28 s.
        for (s, e) in [
            (0, 4000),
            (4000, 8000),
            (8000, 12000),
            (20000, 24000),
            (24000, 28000),
        ] {
            ix.insert(entry(s, e));
        }
        let first = ix.segment_at(0).expect("segment");
        let starts = |v: Vec<SegmentMeta>| v.iter().map(|m| m.start_ms).collect::<Vec<_>>();
        assert_eq!(starts(ix.following(&first, 2, None)), vec![4000, 8000]);
        // Unbounded, the read-ahead runs on into the next recording.
        assert_eq!(
            starts(ix.following(&first, 4, None)),
            vec![4000, 8000, 20000, 24000]
        );
        // Bounded by the first recording's end, it stops there.
        assert_eq!(
            starts(ix.following(&first, 4, Some(12000))),
            vec![4000, 8000]
        );
        // An end inside a segment keeps that segment.
        assert_eq!(starts(ix.following(&first, 4, Some(4001))), vec![4000]);
        let last = ix.segment_at(24000).expect("segment");
        assert!(ix.following(&last, 2, None).is_empty());
    }

    #[test]
    fn queries() {
        let mut ix = CameraIndex::new("c");
        for (s, e) in [(0, 4000), (4000, 8000), (8000, 12000), (20000, 24000)] {
            ix.insert(entry(s, e));
        }
        let starts = |v: Vec<SegmentMeta>| v.iter().map(|m| m.start_ms).collect::<Vec<_>>();
        assert_eq!(starts(ix.covering(3000, 5000)), vec![0, 4000]);
        assert_eq!(starts(ix.covering(12500, 19000)), Vec::<i64>::new());
        assert_eq!(starts(ix.covering(11000, 30000)), vec![8000, 20000]);
        assert_eq!(ix.segment_at(4000).map(|m| m.start_ms), Some(4000));
        assert_eq!(ix.segment_at(3999).map(|m| m.start_ms), Some(0));
        assert_eq!(ix.segment_at(15000), None);
        let at_8000 = ix.segment_at(8000).unwrap();
        assert_eq!(
            at_8000.file,
            PathBuf::from("cameras/c/1970-01-01T00/8000_12000_1_10_00000000.seg")
        );
        assert_eq!(ix.next_after(&at_8000).map(|m| m.start_ms), Some(20000));
        assert_eq!(ix.first_at_or_after(12001).map(|m| m.start_ms), Some(20000));
        assert_eq!(ix.first_at_or_after(20000).map(|m| m.start_ms), Some(20000));
        assert_eq!(ix.first_at_or_after(20001), None);
        assert_eq!(ix.ranges(1000), vec![(0, 12000), (20000, 24000)]);
        assert_eq!(ix.ranges(10000), vec![(0, 24000)]);
        assert_eq!((ix.first_ms(), ix.last_ms()), (Some(0), Some(24000)));
        let snap = ix.clone();
        ix.remove(0);
        assert_eq!((snap.len(), ix.len()), (4, 3));
        assert_eq!((snap.total_bytes(), ix.total_bytes()), (40, 30));
    }

    /// Segments over many hours: every query agrees with a plain scan of all segments.
    #[test]
    fn queries_across_hours_match_a_linear_scan() {
        let mut ix = CameraIndex::new("c");
        let mut all = Vec::new();
        let mut t = -7_200_000i64; // crosses the epoch and 50 hour boundaries
        let mut i = 0i64;
        while t < 50 * 3_600_000 {
            let len = 1000 + (i * 7919) % 9000; // 1 to 10 s
            let gap = if i % 97 == 0 { 60_000 } else { 0 };
            all.push(entry(t, t + len));
            ix.insert(entry(t, t + len));
            t += len + gap;
            i += 1;
        }
        assert_eq!(ix.len(), all.len());
        for q in (-7_300_000..50 * 3_600_000 + 10_000).step_by(3_333_331 / 97) {
            let linear = all.iter().rev().find(|e| e.start_ms <= q && e.end_ms >= q);
            assert_eq!(
                ix.segment_at(q).map(|m| m.start_ms),
                linear.map(|e| e.start_ms),
                "at {q}"
            );
            let cov: Vec<i64> = all
                .iter()
                .filter(|e| e.start_ms <= q + 20_000 && e.end_ms >= q)
                .map(|e| e.start_ms)
                .collect();
            let got: Vec<i64> = ix
                .covering(q, q + 20_000)
                .iter()
                .map(|m| m.start_ms)
                .collect();
            assert_eq!(got, cov, "covering {q}");
        }
        // Dropping whole hours keeps the totals right.
        let before = ix.len();
        let h = hour_of(0);
        let in_h = all.iter().filter(|e| hour_of(e.start_ms) == h).count();
        ix.set_hour(h, None);
        assert_eq!(ix.len(), before - in_h);
        assert_eq!(ix.total_bytes(), 10 * (before - in_h) as u64);
    }
}
