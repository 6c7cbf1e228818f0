mod common;

use common::*;
use vigil_storage::{StorageError, Store};

#[test]
fn twenty_seconds_keyframe_aligned_and_queryable() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "n1", config()).unwrap();
    let mut rec = store.recorder("cam1", header()).unwrap();
    assert_eq!(rec.camera(), "cam1");
    let frames = av_frames(T0, 20);
    let total = frames.len();
    let mut closed = write_all(&mut rec, frames.clone());
    closed.extend(rec.finish().unwrap());

    assert_eq!(closed.len(), 5, "{closed:#?}");
    let starts: Vec<i64> = closed.iter().map(|m| m.start_ms).collect();
    assert_eq!(starts, (0..5).map(|i| T0 + i * 4000).collect::<Vec<_>>());
    // Consecutive segments touch; the last ends one frame interval after its last frame.
    for w in closed.windows(2) {
        assert_eq!(w[0].end_ms, w[1].start_ms);
    }
    assert_eq!(closed[4].end_ms, T0 + 20_000);
    assert_eq!(
        closed.iter().map(|m| m.frames as usize).sum::<usize>(),
        total
    );

    let ix = store.index("cam1").unwrap();
    assert_eq!(ix.segments().collect::<Vec<_>>(), closed);
    assert_eq!(store.cameras().unwrap(), vec!["cam1".to_string()]);

    // Every segment starts with a video keyframe and reads back exactly what was written.
    let mut read_back = Vec::new();
    for m in ix.segments() {
        let seg = store.read_segment("cam1", &m).unwrap();
        assert!(seg.frames[0].keyframe && seg.frames[0].track == 0);
        assert_eq!(seg.header, header());
        assert!(seg.approx_bytes() as u64 >= m.bytes / 2);
        read_back.extend(seg.frames);
    }
    assert_eq!(read_back, frames);

    // Queries.
    let cov: Vec<i64> = ix
        .covering(T0 + 3_000, T0 + 9_000)
        .iter()
        .map(|m| m.start_ms)
        .collect();
    assert_eq!(cov, vec![T0, T0 + 4000, T0 + 8000]);
    assert!(ix.covering(T0 - 10_000, T0 - 1).is_empty());
    let at = ix.segment_at(T0 + 5_500).unwrap();
    assert_eq!(at.start_ms, T0 + 4000);
    assert_eq!(ix.segment_at(T0 + 8000).unwrap().start_ms, T0 + 8000);
    assert_eq!(ix.next_after(&at).unwrap().start_ms, T0 + 8000);
    assert!(ix.segment_at(T0 + 25_000).is_none());
    let seg = store.read_segment("cam1", &at).unwrap();
    let k = seg.keyframe_at_or_before(T0 + 5_500);
    assert_eq!(seg.frames[k].time_ms, T0 + 5_000);
    assert!(seg.frames[k].keyframe);
    assert_eq!(seg.keyframe_at_or_before(T0), 0);

    // A second recording after a 10 s gap.
    let mut rec = store.recorder("cam1", header()).unwrap();
    write_all(&mut rec, av_frames(T0 + 30_000, 8));
    rec.finish().unwrap();
    let ix = store.index("cam1").unwrap();
    assert_eq!(ix.len(), 7);
    assert_eq!(
        ix.ranges(1_000),
        vec![(T0, T0 + 20_000), (T0 + 30_000, T0 + 38_000)]
    );
    assert_eq!(ix.ranges(10_000), vec![(T0, T0 + 38_000)]);
    assert_eq!((ix.first_ms(), ix.last_ms()), (Some(T0), Some(T0 + 38_000)));
    assert!(ix.covering(T0 + 21_000, T0 + 29_000).is_empty());
    assert_eq!(store.total_bytes().unwrap(), ix.total_bytes());

    // A fresh store (another process) rebuilds the same index from the directory.
    let other = Store::open(dir.path(), "n2", config()).unwrap();
    let ix2 = other.index("cam1").unwrap();
    assert_eq!(
        ix2.segments().collect::<Vec<_>>(),
        ix.segments().collect::<Vec<_>>()
    );
}

#[test]
fn frames_before_first_keyframe_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "n1", config()).unwrap();
    let mut rec = store.recorder("cam", header()).unwrap();
    // Start 0.5 s into a GOP: the first 12 video frames and their audio are dropped.
    let frames: Vec<_> = av_frames(T0, 3)
        .into_iter()
        .filter(|f| f.time_ms >= T0 + 520)
        .collect();
    write_all(&mut rec, frames);
    let meta = rec.finish().unwrap().unwrap();
    assert_eq!(meta.start_ms, T0 + 1000);
    let seg = store.read_segment("cam", &meta).unwrap();
    assert!(seg.frames[0].keyframe);
}

#[test]
fn audio_only_cuts_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "n1", config()).unwrap();
    let mut h = header();
    h.tracks.remove(0);
    let mut rec = store.recorder("mic", h).unwrap();
    let frames: Vec<_> = av_frames(T0, 10)
        .into_iter()
        .filter(|f| f.track == 1)
        .map(|mut f| {
            f.track = 0;
            f
        })
        .collect();
    let mut closed = write_all(&mut rec, frames);
    closed.extend(rec.finish().unwrap());
    let starts: Vec<i64> = closed.iter().map(|m| m.start_ms - T0).collect();
    assert_eq!(starts, vec![0, 4000, 8000]);
}

#[test]
fn flipped_byte_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "n1", config()).unwrap();
    let mut rec = store.recorder("cam", header()).unwrap();
    write_all(&mut rec, av_frames(T0, 5));
    rec.finish().unwrap();
    let ix = store.index("cam").unwrap();
    let m = ix.segments().next().unwrap().clone();
    let path = dir.path().join(&m.file);
    let mut b = std::fs::read(&path).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 1;
    std::fs::write(&path, b).unwrap();
    match store.read_segment("cam", &m) {
        Err(StorageError::Corrupt { reason, .. }) => assert!(reason.contains("checksum")),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn bad_ids_and_unknown_cameras() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "n1", config()).unwrap();
    assert!(matches!(
        store.index("nope"),
        Err(StorageError::UnknownCamera(c)) if c == "nope"
    ));
    for bad in ["../x", "..", "a/b", ""] {
        assert!(matches!(
            store.recorder(bad, header()),
            Err(StorageError::InvalidCamera(_))
        ));
        assert!(matches!(
            store.index(bad),
            Err(StorageError::InvalidCamera(_))
        ));
    }
    assert!(Store::open(dir.path(), "bad/node", config()).is_err());
    // A forged meta cannot make read_segment leave the camera's directory.
    let mut rec = store.recorder("cam", header()).unwrap();
    write_all(&mut rec, av_frames(T0, 2));
    let mut m = rec.finish().unwrap().unwrap();
    m.file = "cameras/cam/../../../etc/passwd".into();
    assert!(store.read_segment("cam", &m).is_err());
    // One recorder per camera per process.
    let _r = store.recorder("cam", header()).unwrap();
    assert!(matches!(
        store.recorder("cam", header()),
        Err(StorageError::LeaseHeld { .. })
    ));
}

/// With `direct_io` the segments (whole 256 KiB buffers past the page cache, the tail through
/// it) hold exactly what a buffered recorder writes: same listing, same bytes, same CRCs.
#[test]
fn direct_io_segments_are_the_buffered_ones_byte_for_byte() {
    let frame = |n: i64| vigil_storage::Frame {
        track: 0,
        keyframe: n % 25 == 0,
        time_ms: T0 + n * 40,
        media_ts: (n * 3600) as u64,
        // Uneven sizes, some above the buffer: every alignment case of the tail comes up.
        data: bytes::Bytes::from(vec![(n % 251) as u8; 7_000 + (n as usize * 977) % 300_000]),
    };
    let mut listings = Vec::new();
    let mut contents = Vec::new();
    for direct_io in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = vigil_storage::StoreConfig {
            direct_io,
            ..config()
        };
        let store = Store::open(dir.path(), "n1", cfg).unwrap();
        let mut rec = store.recorder("cam1", header()).unwrap();
        let mut closed = Vec::new();
        for n in 0..250 {
            closed.extend(rec.write(frame(n)).unwrap());
        }
        closed.extend(rec.finish().unwrap());
        assert_eq!(closed.len(), 3, "{closed:#?}");
        let ix = store.index("cam1").unwrap();
        let mut bytes = Vec::new();
        for m in ix.segments() {
            let seg = store.read_segment("cam1", &m).unwrap();
            assert_eq!(seg.frames.len() as u32, m.frames); // read_segment checked the CRC
            bytes.push(std::fs::read(dir.path().join(&m.file)).unwrap());
            assert_eq!(bytes.last().unwrap().len() as u64, m.bytes);
        }
        listings.push(ix.segments().collect::<Vec<_>>());
        contents.push(bytes);
    }
    assert_eq!(listings[0], listings[1]);
    assert!(
        contents[0] == contents[1],
        "direct and buffered files differ"
    );
}
