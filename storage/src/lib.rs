//! `vigil-storage`: records cameras into checksummed, keyframe-aligned segments under a root
//! directory shared by all nodes (an iSCSI LUN with a file system, or an NFS share), and reads
//! them back. Plain blocking `std::fs` I/O: the server calls it from `spawn_blocking` or a
//! writer thread.
//!
//! # On-disk layout (version 1; also in `storage/FORMAT.md`)
//!
//! ```text
//! <root>/VIGIL-STORAGE                         "vigil-storage 1\n": layout version marker
//! <root>/VIGIL-STORAGE-ID                      the root's identity, 32 hex digits (made once)
//! <root>/cameras/<camera>/lease.<gen>          write lease, highest generation wins (lease.rs)
//! <root>/cameras/<camera>/.tmp/*.seg.tmp       segments being written (never listed)
//! <root>/cameras/<camera>/YYYY-MM-DDTHH/<start>_<end>_<frames>_<bytes>_<crc32>.seg
//! ```
//!
//! A segment is renamed into its UTC hour directory only once it is complete and fsynced, so
//! **the directory listing is the index**: every [`SegmentMeta`] field is in the file name, a
//! listed file is always complete, and nothing can disagree with it after a crash. Each node
//! keeps the listing in memory ([`CameraIndex`], a `BTreeMap` by start time) and refreshes it
//! incrementally: one listing of the camera directory plus one `stat` per hour directory per
//! query; an hour directory is listed again only when its mtime changed (or is too recent to
//! trust, given mtime granularity). Segments another node finished therefore appear on the next
//! [`Store::index`] call, and deleted ones disappear.
//!
//! Segment file contents are described in [`format`]: header with the stream description,
//! frame records, and a trailer whose CRC-32 covers the whole file.
//!
//! # Crash safety
//! `kill -9` of the writer loses only the segment being written in `.tmp/`; [`Store::open`]
//! and [`Store::recorder`] delete such leftovers once no live writer can own them, and rename
//! into place a closed segment that was waiting for its group commit (`commit`). Power loss is
//! covered by syncing every file before its rename (one `syncfs` per group commit pass, or
//! with the interval 0 an fsync of the file before the rename and of the directory after it);
//! it loses at most the segment being written and one closed segment per camera.
//!
//! # Sharing a root
//! Each camera is written by the one node holding its lease (see the `lease` module for why
//! acquisition is atomic, via `link(2)` of generation-numbered files). Node ids must be unique
//! among running processes; a node that restarts under the same id takes its old leases over at
//! once.

mod commit;
mod error;
pub mod format;
mod index;
pub mod io_priority;
mod lease;
mod recorder;
mod retention;
mod root;
mod segment_file;
mod store;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;

pub use commit::{CommitHook, CommitPoint, SyncMode};
pub use error::{is_disk_full, is_valid_id, StorageError};
pub use format::{Frame, StreamHeader, TrackHeader};
pub use index::{CameraIndex, SegmentMeta};
pub use lease::now_ms;
pub use recorder::Recorder;
pub use retention::RetentionReport;
pub use root::{read_root_id, ROOT_ID_FILE};
pub use store::{
    CameraSettings, Store, StoreConfig, WriteHook, DEFAULT_COMMIT_INTERVAL, DEFAULT_WRITEBACK_BYTES,
};

/// Where a frame stands in decode order (see [`Segment::decode_times`]), UTC ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeTime {
    /// When it is due, in decode order, on the timeline the tracks share.
    pub decode: i64,
    /// Its rank among the track's presentation times: a range `[a, b)` holds the frames
    /// whose `order` is in it.
    pub order: i64,
}

/// A complete segment read back from disk, checksum verified.
#[derive(Clone, Debug)]
pub struct Segment {
    pub meta: SegmentMeta,
    pub header: StreamHeader,
    pub frames: Vec<Frame>,
}

impl Segment {
    /// Index of the last keyframe of the first video track at or before `t_ms` (where playback
    /// of `t_ms` must start decoding), or the first frame if there is none (audio only, or `t_ms`
    /// before the segment).
    pub fn keyframe_at_or_before(&self, t_ms: i64) -> usize {
        let video = self.header.video_track();
        self.frames
            .iter()
            .enumerate()
            .take_while(|(_, f)| f.time_ms <= t_ms)
            .filter(|(_, f)| video.is_none_or(|v| f.track == v && f.keyframe))
            .map(|(i, _)| i)
            .last()
            .unwrap_or(0)
    }

    /// Decode-order times of the frames (UTC ms, one per frame). Frames are stored in decode
    /// order but stamped with presentation times, which B-frames make non-monotonic (I0 P4
    /// B2 b1 b3…). Each track's k-th frame gets `order` = the k-th smallest presentation
    /// time of that track (evenly spaced and monotonic), and `decode` = `order` less the
    /// track's reordering delay (the most any frame's presentation precedes its `order`), so
    /// decode times of different tracks line up as the publisher interleaved them. A sender
    /// paces by `decode` and ends a range before the first frame whose `order` reaches the
    /// end: the frames sent are then exactly those of the range (as many as the range holds,
    /// without a reference frame missing).
    pub fn decode_times(&self) -> Vec<DecodeTime> {
        let mut out = vec![DecodeTime::default(); self.frames.len()];
        let mut by_track: Vec<Vec<usize>> = Vec::new();
        for (i, f) in self.frames.iter().enumerate() {
            let t = usize::from(f.track);
            if by_track.len() <= t {
                by_track.resize_with(t + 1, Vec::new);
            }
            by_track[t].push(i);
        }
        for idx in by_track {
            let mut times: Vec<i64> = idx.iter().map(|&i| self.frames[i].time_ms).collect();
            times.sort_unstable();
            let delay = idx
                .iter()
                .zip(&times)
                .map(|(&i, &order)| order - self.frames[i].time_ms)
                .max()
                .unwrap_or(0)
                .max(0);
            for (i, order) in idx.into_iter().zip(times) {
                out[i] = DecodeTime {
                    decode: order - delay,
                    order,
                };
            }
        }
        out
    }

    /// Mean interval between the video frames (or, without video, all frames), in ms; 40
    /// (25 fps) when the segment holds fewer than two.
    pub fn frame_interval_ms(&self) -> i64 {
        let video = self.header.video_track();
        let (mut n, mut lo, mut hi) = (0i64, i64::MAX, i64::MIN);
        for f in self
            .frames
            .iter()
            .filter(|f| video.is_none_or(|v| f.track == v))
        {
            n += 1;
            lo = lo.min(f.time_ms);
            hi = hi.max(f.time_ms);
        }
        if n < 2 {
            return 40;
        }
        ((hi - lo) / (n - 1)).max(1)
    }

    /// Approximate memory held by the segment (for the playback cache's byte budget).
    pub fn approx_bytes(&self) -> usize {
        let frames: usize = self
            .frames
            .iter()
            .map(|f| f.data.len() + std::mem::size_of::<Frame>())
            .sum();
        frames
            + self.header.sdp.len()
            + self.header.tracks.len() * 32
            + std::mem::size_of::<Segment>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(frames: &[(u8, i64)]) -> Segment {
        testing::segment(
            testing::header(&[("H264", 90_000), ("MPEG4-GENERIC", 44_100)]),
            frames
                .iter()
                .map(|&(track, time_ms)| Frame {
                    track,
                    keyframe: false,
                    time_ms,
                    media_ts: 0,
                    data: Default::default(),
                })
                .collect(),
        )
    }

    /// B-frames in decode order (I0 P120 B40 b80 with audio between) pace evenly.
    #[test]
    fn decode_times_are_monotonic_per_track() {
        let s = segment(&[
            (0, 0),
            (1, 10),
            (0, 120),
            (0, 40),
            (1, 33),
            (0, 80),
            (0, 240),
        ]);
        let times = s.decode_times();
        let order: Vec<i64> = times.iter().map(|t| t.order).collect();
        let decode: Vec<i64> = times.iter().map(|t| t.decode).collect();
        assert_eq!(order, vec![0, 10, 40, 80, 33, 120, 240]);
        // The video's reordering delay: b80 is presented 40 ms before its rank (120).
        assert_eq!(decode, vec![-40, 10, 0, 40, 33, 80, 200]);
        assert_eq!(s.frame_interval_ms(), 60);
        assert_eq!(segment(&[(1, 5)]).frame_interval_ms(), 40);
    }

    /// The server shares one `Store` between tasks and moves recorders to writer threads.
    #[test]
    fn thread_safety() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<crate::Store>();
        send_sync::<crate::CameraIndex>();
        send::<crate::Recorder>();
        send::<crate::Segment>();
    }
}
