//! Recordings for a lab run or a test, written straight into a storage root: the demo clip
//! (real H.264, a keyframe every second) looped through the store's own `Recorder`, so the
//! nodes play real segments with real keyframes. Also what the export tests write.
//!
//! One camera's recordings are written once; every other camera gets hard links to the same
//! segment files (a segment does not name its camera: FORMAT.md). 80 cameras × 5 recordings
//! then cost the disk and the write time of 5, which is what lets a 2-core machine set up
//! the §A library in seconds. Reads are unaffected: each camera's segments are its own
//! directory entries, indexed and cached per camera like any recording.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use vigil_storage::{Frame, StorageError, Store, StoreConfig, StreamHeader, TrackHeader};

/// Frames per second of the demo clip.
pub const CLIP_FPS: i64 = 25;

/// The demo clip's access units, 4-byte-length-prefixed as the store keeps them, each with
/// its keyframe flag (25 fps, SPS/PPS in-band before every keyframe).
pub fn demo_access_units() -> Vec<(bool, Bytes)> {
    use vigil_proto::codec::{annexb_nals, h264_nal_type};
    let clip = vigil_server::ingest::demo::CLIP;
    let mut out: Vec<(bool, Vec<u8>)> = Vec::new();
    let mut has_slice = false;
    for nal in annexb_nals(clip) {
        let t = h264_nal_type(nal).unwrap_or(0);
        let is_slice = t == 1 || t == 5;
        let first_mb_zero = nal.get(1).is_some_and(|b| b & 0x80 != 0);
        if out.is_empty() || (has_slice && ((is_slice && first_mb_zero) || matches!(t, 6..=9))) {
            out.push((false, Vec::new()));
            has_slice = false;
        }
        has_slice |= is_slice;
        if let Some(au) = out.last_mut() {
            au.0 |= t == 5;
            au.1.extend_from_slice(&(nal.len() as u32).to_be_bytes());
            au.1.extend_from_slice(nal);
        }
    }
    out.into_iter().map(|(k, d)| (k, Bytes::from(d))).collect()
}

/// The demo clip's bitrate (bits per second), as recorded.
pub fn demo_bitrate_bps() -> f64 {
    let aus = demo_access_units();
    let bytes: usize = aus.iter().map(|(_, d)| d.len()).sum();
    bytes as f64 * 8.0 * CLIP_FPS as f64 / aus.len().max(1) as f64
}

/// Writes `secs` of the demo clip, looped, as camera `camera` into the storage root
/// (`segment` long segments), as if recorded from `start_ms`. Returns the recorded range.
pub fn write_recording(
    root: &Path,
    camera: &str,
    start_ms: i64,
    secs: u64,
    segment: Duration,
) -> Result<(i64, i64), StorageError> {
    let store = Store::open(
        root,
        "lab-writer",
        StoreConfig {
            segment_duration: segment,
            ..StoreConfig::default()
        },
    )?;
    let header = StreamHeader {
        sdp: "v=0\r\no=- 0 0 IN IP4 0.0.0.0\r\ns=synthetic\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:trackID=0\r\n".into(),
        tracks: vec![TrackHeader {
            codec: "H264".into(),
            clock_rate: 90_000,
        }],
    };
    let mut rec = store.recorder(camera, header)?;
    let aus = demo_access_units();
    let frames = secs as i64 * CLIP_FPS;
    let step = 1000 / CLIP_FPS;
    for i in 0..frames {
        let (key, data) = &aus[(i as usize) % aus.len()];
        rec.write(Frame {
            track: 0,
            keyframe: *key,
            time_ms: start_ms + i * step,
            media_ts: i as u64 * 3600,
            data: data.clone(),
        })?;
    }
    rec.finish()?;
    Ok((start_ms, start_ms + frames * step))
}

/// Gives camera `to` the recordings of camera `from` (hard links to the same segment
/// files, the hour directories recreated). Returns the segments linked.
pub fn link_camera(root: &Path, from: &str, to: &str) -> std::io::Result<usize> {
    let src = root.join("cameras").join(from);
    let dst = root.join("cameras").join(to);
    let mut n = 0;
    for hour in std::fs::read_dir(&src)? {
        let hour = hour?;
        let name = hour.file_name();
        // Hour directories only: not the lease files or the writer's temp directory.
        if !hour.file_type()?.is_dir() || name.to_string_lossy().starts_with('.') {
            continue;
        }
        let out = dst.join(&name);
        std::fs::create_dir_all(&out)?;
        for seg in std::fs::read_dir(hour.path())? {
            let seg = seg?;
            let target = out.join(seg.file_name());
            if !target.exists() {
                std::fs::hard_link(seg.path(), target)?;
            }
            n += 1;
        }
    }
    Ok(n)
}

/// A complete segment file of the store, from its name (`<start>_<end>_<frames>_<bytes>_<crc>.seg`,
/// see storage/FORMAT.md): the directory listing is the index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SegFile {
    pub start_ms: i64,
    pub end_ms: i64,
    pub name: String,
}

/// A camera's complete segment files on a storage root, sorted by start (files being
/// written, `.tmp/*.seg.tmp`, are not listed).
pub fn segment_files(root: &Path, camera: &str) -> Vec<SegFile> {
    let mut out = Vec::new();
    let Ok(hours) = std::fs::read_dir(root.join("cameras").join(camera)) else {
        return out;
    };
    for hour in hours.flatten().filter(|e| e.path().is_dir()) {
        for f in std::fs::read_dir(hour.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = f.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".seg") else {
                continue;
            };
            let mut it = stem.split('_');
            if let (Some(Ok(start_ms)), Some(Ok(end_ms))) =
                (it.next().map(str::parse), it.next().map(str::parse))
            {
                out.push(SegFile {
                    start_ms,
                    end_ms,
                    name,
                });
            }
        }
    }
    out.sort();
    out
}

/// [`segment_files`] as (start, end) in ms.
pub fn segment_spans(root: &Path, camera: &str) -> Vec<(i64, i64)> {
    segment_files(root, camera)
        .into_iter()
        .map(|f| (f.start_ms, f.end_ms))
        .collect()
}
