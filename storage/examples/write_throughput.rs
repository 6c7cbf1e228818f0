//! The store's own write ceiling, without RTSP, RTP or the writer pool's queues: `threads`
//! threads each own `cameras / threads` recorders and append 2 Mb/s-sized frames (10 kB,
//! 25 fps, a keyframe a second) to them in turn as fast as the disk takes them, for
//! `seconds`. Media time runs faster than wall time, so segments (4 s of media) close far
//! more often than in real time and lease renewals (wall time) far less: it measures the
//! commit path and the bandwidth, the figure to set beside fio's (scripts/bench-fio-record).
//!
//! `cargo run --release -p vigil-storage --example write_throughput -- ROOT CAMERAS THREADS
//! SECONDS COMMIT_MS [syncfs|files] [WRITEBACK_KB]` (COMMIT_MS 0: one fsync per segment)

use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil_storage::{Frame, Store, StoreConfig, StreamHeader, SyncMode, TrackHeader};

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(root) = args.get(1) else {
        eprintln!("usage: write_throughput ROOT CAMERAS THREADS SECONDS COMMIT_MS [syncfs|files] [WRITEBACK_KB]");
        std::process::exit(2);
    };
    let cameras: usize = arg(&args, 2, 1000);
    let threads: usize = arg(&args, 3, 16).max(1);
    let seconds: u64 = arg(&args, 4, 20);
    let commit_ms: u64 = arg(&args, 5, 200);
    let mode = match args.get(6).map(String::as_str) {
        Some("files") => SyncMode::Files,
        _ => SyncMode::Syncfs,
    };
    let writeback_kb: u64 = arg(&args, 7, 0);
    let config = StoreConfig {
        commit_interval: Duration::from_millis(commit_ms),
        commit_sync: mode,
        writeback_bytes: writeback_kb * 1024,
        ..StoreConfig::default()
    };
    let store = match Store::open(root, "bench", config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("open: {e}");
            std::process::exit(1);
        }
    };
    let header = StreamHeader {
        sdp: "v=0\r\n".into(),
        tracks: vec![TrackHeader {
            codec: "H264".into(),
            clock_rate: 90_000,
        }],
    };
    let bytes = Arc::new(AtomicU64::new(0));
    let segments = Arc::new(AtomicU64::new(0));
    let payload = Bytes::from(vec![0x42u8; 2_000_000 / 8 / 25]);
    // The window starts once every recorder holds its lease (1000 lease files take a while).
    let ready = Arc::new(std::sync::Barrier::new(threads + 1));
    let start_at = Arc::new(std::sync::OnceLock::<Instant>::new());
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (store, header, payload) = (store.clone(), header.clone(), payload.clone());
            let (bytes, segments) = (bytes.clone(), segments.clone());
            let (ready, start_at) = (ready.clone(), start_at.clone());
            std::thread::spawn(move || {
                let mut recs: Vec<_> = (t..cameras)
                    .step_by(threads)
                    .filter_map(|c| store.recorder(&format!("c{c}"), header.clone()).ok())
                    .collect();
                ready.wait();
                let deadline = *start_at.get_or_init(Instant::now) + Duration::from_secs(seconds);
                let t0 = vigil_storage::now_ms() - 86_400_000;
                let mut n: i64 = 0;
                'window: loop {
                    for r in &mut recs {
                        if Instant::now() >= deadline {
                            break 'window;
                        }
                        let f = Frame {
                            track: 0,
                            keyframe: n % 25 == 0,
                            time_ms: t0 + n * 40,
                            media_ts: (n * 3600) as u64,
                            data: payload.clone(),
                        };
                        match r.write(f) {
                            // Handed over in the window: durable once the flush after it
                            // returns, which ends the measured time.
                            Ok(Some(m)) => {
                                bytes.fetch_add(m.bytes, Ordering::Relaxed);
                                segments.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(None) => {}
                            Err(e) => eprintln!("write: {e}"),
                        }
                    }
                    n += 1;
                }
                recs
            })
        })
        .collect();
    ready.wait();
    let start = *start_at.get_or_init(Instant::now);
    let recs: Vec<_> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
    store.flush_commits();
    let secs = start.elapsed().as_secs_f64();
    drop(recs); // closes the open segments, not timed
    let b = bytes.load(Ordering::Relaxed) as f64;
    let s = segments.load(Ordering::Relaxed) as f64;
    println!(
        "cameras {cameras} threads {threads} commit_ms {commit_ms} {mode:?} writeback_kb {writeback_kb}: {:.1} MiB/s committed, {:.0} segments/s durable over {secs:.1} s",
        b / secs / (1 << 20) as f64,
        s / secs
    );
}
