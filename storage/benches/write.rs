//! Write throughput of one recorder fed 2 Mb/s-equivalent video (25 fps, 10 kB frames,
//! keyframe every second), including the fsync + rename of each 4 s segment.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use vigil_storage::{Frame, Store, StoreConfig, StreamHeader, TrackHeader};

const FRAME_BYTES: usize = 2_000_000 / 8 / 25;
const FRAMES_PER_ITER: i64 = 250; // 10 s of video

fn bench_write(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "bench", StoreConfig::default()).unwrap();
    let header = StreamHeader {
        sdp: "v=0\r\n".into(),
        tracks: vec![TrackHeader {
            codec: "H264".into(),
            clock_rate: 90_000,
        }],
    };
    let mut rec = store.recorder("cam", header).unwrap();
    let payload = Bytes::from(vec![0x42u8; FRAME_BYTES]);
    let mut n: i64 = 0;
    let mut g = c.benchmark_group("recorder");
    g.throughput(Throughput::Bytes(
        FRAME_BYTES as u64 * FRAMES_PER_ITER as u64,
    ));
    g.sample_size(10);
    g.bench_function("write_2mbps_10s", |b| {
        b.iter(|| {
            for _ in 0..FRAMES_PER_ITER {
                rec.write(Frame {
                    track: 0,
                    keyframe: n % 25 == 0,
                    time_ms: 1_700_000_000_000 + n * 40,
                    media_ts: (n * 3600) as u64,
                    data: payload.clone(),
                })
                .unwrap();
                n += 1;
            }
        })
    });
    g.finish();
    rec.finish().unwrap();
}

criterion_group!(benches, bench_write);
criterion_main!(benches);
