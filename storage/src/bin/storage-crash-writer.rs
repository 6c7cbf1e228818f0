//! Test helper: records synthetic frames into `<root>` as node `<node>`, camera `<camera>`,
//! printing `segment <start_ms>` for each completed segment, until killed. The crash test
//! SIGKILLs it mid-segment. With a fourth argument `group`, segments go through group commit
//! (50 ms) and every pass from the third on stops before its sync for good: the third
//! segment printed is then closed, complete in the page cache and not yet listed when the
//! test kills the process.

use bytes::Bytes;
use std::io::Write;
use std::time::Duration;
use vigil_storage::{CommitPoint, Frame, Store, StoreConfig, StreamHeader, TrackHeader};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let group = args.get(4).is_some_and(|a| a == "group");
    if !(4..=5).contains(&args.len()) {
        eprintln!("usage: storage-crash-writer ROOT NODE CAMERA [group]");
        std::process::exit(2);
    }
    let config = StoreConfig {
        segment_duration: Duration::from_secs(1),
        commit_interval: Duration::from_millis(if group { 50 } else { 0 }),
        ..StoreConfig::default()
    };
    let store = match Store::open(&args[1], &args[2], config) {
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
    if group {
        let passes = std::sync::atomic::AtomicU32::new(0);
        store.set_commit_hook(Some(std::sync::Arc::new(move |point| {
            if point == CommitPoint::BeforeSync
                && passes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 2
            {
                // Hold the committer here until the test kills the process.
                loop {
                    std::thread::park();
                }
            }
            true
        })));
    }
    let mut rec = match store.recorder(&args[3], header) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("recorder: {e}");
            std::process::exit(1);
        }
    };
    let t0 = 1_700_000_000_000i64;
    let mut out = std::io::stdout();
    for n in 0i64.. {
        let frame = Frame {
            track: 0,
            keyframe: n % 5 == 0,
            time_ms: t0 + n * 40,
            media_ts: (n * 3600) as u64,
            data: Bytes::from(vec![(n % 251) as u8; 2000]),
        };
        match rec.write(frame) {
            Ok(Some(meta)) => {
                let _ = writeln!(out, "segment {}", meta.start_ms);
                let _ = out.flush();
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("write: {e}");
                std::process::exit(1);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
