//! `vigil-storage`: records cameras into checksummed, keyframe-aligned segments under a root
//! directory shared by all nodes (an iSCSI LUN with a file system, or an NFS share), and reads
//! them back. Plain blocking `std::fs` I/O: the server calls it from `spawn_blocking` or a
//! writer thread.
//!
//! # On-disk layout (version 1; also in `storage/FORMAT.md`)
//!
//! ```text
//! <root>/VIGIL-STORAGE                         "vigil-storage 1\n": layout version marker
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
//! `kill -9` of the writer loses only the segment in `.tmp/`; [`Store::open`] and
//! [`Store::recorder`] delete such leftovers once no live writer can own them. Power loss is
//! covered by fsyncing the file before the rename and the directory after it.
//!
//! # Sharing a root
//! Each camera is written by the one node holding its lease (see the `lease` module for why
//! acquisition is atomic, via `link(2)` of generation-numbered files). Node ids must be unique
//! among running processes; a node that restarts under the same id takes its old leases over at
//! once.

mod error;
pub mod format;
mod index;
mod lease;
mod recorder;
mod store;

pub use error::{is_disk_full, StorageError};
pub use format::{Frame, StreamHeader, TrackHeader};
pub use index::{CameraIndex, SegmentMeta};
pub use recorder::Recorder;
pub use store::{RetentionReport, Store, StoreConfig, WriteHook};

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
