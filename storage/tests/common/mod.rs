//! Shared helpers for the integration tests: synthetic A/V streams.
#![allow(dead_code)]

use bytes::Bytes;
use std::time::Duration;
use vigil_storage::{Frame, Recorder, SegmentMeta, StoreConfig, StreamHeader, TrackHeader};

pub const T0: i64 = 1_700_000_000_000;

pub fn header() -> StreamHeader {
    StreamHeader {
        sdp: "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=cam\r\n".into(),
        tracks: vec![
            TrackHeader {
                codec: "H264".into(),
                clock_rate: 90_000,
            },
            TrackHeader {
                codec: "AAC".into(),
                clock_rate: 48_000,
            },
        ],
    }
}

pub fn config() -> StoreConfig {
    StoreConfig {
        segment_duration: Duration::from_secs(4),
        lease_ttl: Duration::from_secs(15),
        // These tests play several nodes with several `Store`s in one process and check
        // what each sees at once.
        index_fresh: Duration::ZERO,
        // And the listing right after each close: every segment synced and renamed by its
        // writer. Group commit has tests of its own (`group_commit.rs`, `commit::tests`).
        commit_interval: Duration::ZERO,
        ..StoreConfig::default()
    }
}

/// A store on `root` (node "n1") that enforces these retention limits.
pub fn retaining(
    root: &std::path::Path,
    max_age: Option<Duration>,
    max_bytes: Option<u64>,
) -> vigil_storage::Store {
    vigil_storage::Store::open(
        root,
        "n1",
        StoreConfig {
            retention_max_age: max_age,
            retention_max_bytes: max_bytes,
            ..config()
        },
    )
    .unwrap()
}

/// `secs` seconds from `t0`: 25 fps video with a keyframe every second (payload = a
/// length-prefixed NAL), interleaved in time order with 50 packets/s of audio.
pub fn av_frames(t0: i64, secs: i64) -> Vec<Frame> {
    let mut out = Vec::new();
    for ms in (0..secs * 1000).step_by(20) {
        if ms % 40 == 0 {
            let n = ms / 40;
            let key = n % 25 == 0;
            let mut data = vec![0, 0, 0, 100, if key { 0x65 } else { 0x41 }];
            data.extend(std::iter::repeat_n((n % 256) as u8, 99));
            out.push(Frame {
                track: 0,
                keyframe: key,
                time_ms: t0 + ms,
                media_ts: (ms * 90) as u64,
                data: Bytes::from(data),
            });
        }
        out.push(Frame {
            track: 1,
            keyframe: false,
            time_ms: t0 + ms,
            media_ts: (ms * 48) as u64,
            data: Bytes::from(vec![0xAA; 30]),
        });
    }
    out
}

/// Writes all frames, returning the segments closed along the way.
pub fn write_all(rec: &mut Recorder, frames: Vec<Frame>) -> Vec<SegmentMeta> {
    frames
        .into_iter()
        .filter_map(|f| rec.write(f).unwrap())
        .collect()
}

/// Files (recursively) under `dir` whose name ends with `suffix`.
pub fn files_ending(dir: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_ending(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    out
}
