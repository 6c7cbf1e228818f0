//! The writer pool under slow writes: playback reads go on, and every camera gets written.

use super::writer::{CameraWriter, WriterMsg};
use crate::library::Library;
use crate::live::frames::FrameSink;
use crate::node::recordings::Recordings;
use crate::node::writer_pool::WriterPool;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use vigil_storage::{Frame, Store, StoreConfig, StreamHeader};

/// A fresh directory for a test's store, removed on drop (no temp-dir crate for two tests).
struct TestDir(std::path::PathBuf);

impl TestDir {
    fn new() -> TestDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("vigil-record-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TestDir(dir)
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn header() -> StreamHeader {
    vigil_storage::testing::header(&[("H264", 90_000)])
}

/// Frame `i` of a 25 fps stream with a keyframe every second, starting at `t0`.
fn frame(t0: i64, i: i64) -> Frame {
    Frame {
        track: 0,
        keyframe: i % 25 == 0,
        time_ms: t0 + i * 40,
        media_ts: (i * 3600) as u64,
        data: bytes::Bytes::from(vec![i as u8; 200]),
    }
}

/// A gate the write hook waits on for cameras named `slow-*`.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    waiting: Mutex<usize>,
}

impl Gate {
    fn pass(&self) {
        *self.waiting.lock().unwrap() += 1;
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
        *self.waiting.lock().unwrap() -= 1;
    }
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

fn poll(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_writers_fill_the_pool_and_playback_still_reads() {
    let dir = TestDir::new();
    let store = Store::open(dir.path(), "n1", StoreConfig::default()).unwrap();
    // A recording to play back, written before the writers get slow.
    let t0 = 1_700_000_000_000;
    let mut r = store.recorder("old", header()).unwrap();
    for i in 0..250 {
        r.write(frame(t0, i)).unwrap();
    }
    r.finish().unwrap();

    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    store.set_write_hook(Some(Arc::new(move |camera: &str| {
        if camera.starts_with("slow-") {
            g.pass();
        }
    })));
    let threads = 2;
    let pool = WriterPool::new(threads, u64::MAX, std::time::Duration::ZERO, || {}).unwrap();
    let recordings = Arc::new(Recordings::default());
    // More slow cameras than threads: every writer thread ends up blocked in a write.
    let lanes: Vec<_> = (0..6)
        .map(|c| {
            let camera = format!("slow-{c}");
            let lane = pool.lane(
                CameraWriter::new(recordings.clone(), store.clone(), camera, header()),
                1 << 20,
            );
            for i in 0..150 {
                assert!(lane.push(WriterMsg::Frame(frame(t0, i)), 264).is_ok());
            }
            lane
        })
        .collect();
    poll("every writer thread blocked", || {
        pool.stats().busy == threads && *gate.waiting.lock().unwrap() == threads
    });

    // Playback's reads (index and segment, as DESCRIBE and PLAY do them) complete while no
    // writer thread is free.
    let library = Library::new(store.clone(), 64 << 20, 2, std::time::Duration::ZERO);
    let read = async {
        let index = library.index("old").await.unwrap();
        let first = index.segment_at(t0 + 1000).unwrap();
        let seg = library.segment(&first).await.unwrap();
        (index.len(), seg.0.frames.len())
    };
    let (segments, frames) = tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("playback waited behind the blocked writers");
    assert!(segments >= 2, "{segments} segments");
    assert!(frames > 0);
    assert_eq!(
        pool.stats().busy,
        threads,
        "the writers were blocked throughout"
    );

    // Once the disk is fast again every camera's frames are written: none silently lost.
    gate.open();
    let mut done = Vec::new();
    for lane in &lanes {
        let (tx, rx) = tokio::sync::oneshot::channel();
        lane.push_always(WriterMsg::Finish(tx));
        done.push(rx);
    }
    for rx in done {
        tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .unwrap()
            .unwrap();
    }
    for c in 0..6 {
        let camera = format!("slow-{c}");
        let ix = store.index(&camera).unwrap();
        let frames: u32 = ix.segments().map(|m| m.frames).sum();
        assert_eq!(frames, 150, "{camera}");
    }
    let all = recordings.all();
    assert_eq!(all.len(), 6);
    assert!(all.iter().all(|s| s.segments_written >= 2 && s.errors == 0));
    pool.shutdown();
}

#[test]
fn a_full_queue_drops_to_the_next_keyframe_and_says_so() {
    let dir = TestDir::new();
    let store = Store::open(dir.path(), "n1", StoreConfig::default()).unwrap();
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    store.set_write_hook(Some(Arc::new(move |_: &str| g.pass())));
    let pool = WriterPool::new(1, u64::MAX, std::time::Duration::ZERO, || {}).unwrap();
    let recordings = Arc::new(Recordings::default());
    let lane = pool.lane(
        CameraWriter::new(recordings.clone(), store.clone(), "cam".into(), header()),
        64 * 1024,
    );
    let mut queue = super::CameraQueue {
        recordings: &recordings,
        camera: "cam",
        lane: &lane,
        dropping: false,
    };
    let t0 = 1_700_000_000_000;
    // 264 bytes a frame against a 64 KiB queue: about 250 fit while the writer is blocked.
    for i in 0..400 {
        queue.push(frame(t0, i), true);
    }
    let status = recordings.get("cam").unwrap();
    assert_eq!(status.state, "error");
    assert!(
        status.error.as_deref().unwrap().contains("behind"),
        "{status:?}"
    );
    assert!(status.frames_dropped > 100, "{status:?}");
    // Every frame is either written or counted as dropped.
    gate.open();
    let (tx, rx) = std::sync::mpsc::channel();
    let (done, finished) = tokio::sync::oneshot::channel();
    lane.push_always(WriterMsg::Finish(done));
    std::thread::spawn(move || tx.send(finished.blocking_recv()));
    rx.recv_timeout(Duration::from_secs(30)).unwrap().unwrap();
    let written: u32 = store
        .index("cam")
        .unwrap()
        .segments()
        .map(|m| m.frames)
        .sum();
    assert_eq!(u64::from(written) + status.frames_dropped, 400);
    pool.shutdown();
}

/// The store's own defaults (used by tools and tests that open a store directly) are the
/// operator's documented ones.
#[test]
fn the_stores_defaults_are_the_configs() {
    let c = vigil_conf::StorageConfig::default();
    assert_eq!(
        std::time::Duration::from_millis(c.commit_interval_ms),
        vigil_storage::DEFAULT_COMMIT_INTERVAL
    );
    assert_eq!(c.commit_interval_ms, vigil_conf::DEFAULT_COMMIT_INTERVAL_MS);
    assert_eq!(
        c.writeback_kb * 1024,
        vigil_storage::DEFAULT_WRITEBACK_BYTES
    );
    assert_eq!(c.direct_io, vigil_storage::StoreConfig::default().direct_io);
    assert_eq!(
        std::time::Duration::from_millis(c.writer_linger_ms),
        crate::node::writer_pool::DEFAULT_LINGER
    );
}

/// A camera moved between nodes: the old holder's last frame came before a keyframe, but
/// its lease was freed only after it (its last commit). The new holder kept that GOP while
/// it waited, so its recording starts at that keyframe, not one GOP later.
#[test]
fn a_lease_freed_after_a_keyframe_records_from_that_keyframe() {
    use crate::node::writer_pool::LaneWriter;
    let dir = TestDir::new();
    let old = Store::open(dir.path(), "n1", StoreConfig::default()).unwrap();
    let new = Store::open(dir.path(), "n2", StoreConfig::default()).unwrap();
    let t0 = 1_700_000_000_000;
    let mut holder = old.recorder("cam", header()).unwrap();
    for i in 0..=45 {
        holder.write(frame(t0, i)).unwrap();
    }
    let recordings = Arc::new(Recordings::default());
    let mut w = CameraWriter::new(recordings.clone(), new.clone(), "cam".into(), header())
        .with_lease_retry(Duration::ZERO);
    // Keyframe 50 and the frames after it reach the new holder while the old one holds the lease.
    for i in 50..=55 {
        w.handle(WriterMsg::Frame(frame(t0, i)));
    }
    assert_eq!(recordings.get("cam").unwrap().state, "error");
    holder.finish().unwrap();
    for i in 56..=250 {
        w.handle(WriterMsg::Frame(frame(t0, i)));
    }
    let (done, _) = tokio::sync::oneshot::channel();
    w.handle(WriterMsg::Finish(done));
    let starts: Vec<(i64, i64)> = new
        .index("cam")
        .unwrap()
        .segments()
        .map(|m| ((m.start_ms - t0) / 40, (m.end_ms - t0) / 40))
        .collect();
    assert_eq!(starts.first().map(|s| s.0), Some(0), "{starts:?}");
    let after: Vec<_> = starts.iter().filter(|s| s.0 > 45).collect();
    assert_eq!(after.first().map(|s| s.0), Some(50), "{starts:?}");
    let status = recordings.get("cam").unwrap();
    assert_eq!(status.state, "recording", "{status:?}");
}
