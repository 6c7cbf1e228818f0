use std::time::Duration;
use vigil_server::client::{play, ClientTransport, PlayOptions, PlayRequest, TrackStats};
fn main() {
    let url = std::env::args().nth(1).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut p = play(&url, PlayOptions::new(ClientTransport::Tcp))
            .await
            .unwrap();
        let mut stats: Vec<TrackStats> = p
            .tracks()
            .iter()
            .map(|t| TrackStats::new(t.codec, t.clock_rate))
            .collect();
        for cycle in 0..40 {
            let until = tokio::time::Instant::now() + Duration::from_millis(37 + (cycle * 13) % 60);
            while let Ok(Ok(Some(pkt))) = tokio::time::timeout_at(until, p.next_packet()).await {
                stats[pkt.track].record(&pkt.header, &pkt.payload, 0, Duration::ZERO);
            }
            if cycle % 2 == 0 {
                p.pause().await.unwrap();
                p.play(PlayRequest::new()).await.unwrap();
            } else {
                p.play(PlayRequest::new().scale(1.0)).await.unwrap();
            }
        }
        let until = tokio::time::Instant::now() + Duration::from_millis(300);
        while let Ok(Ok(Some(pkt))) = tokio::time::timeout_at(until, p.next_packet()).await {
            stats[pkt.track].record(&pkt.header, &pkt.payload, 0, Duration::ZERO);
        }
        for (i, t) in stats.iter().enumerate() {
            println!(
                "track {i}: packets {} lost {} regressions {}",
                t.packets,
                t.seq.lost(),
                t.timestamp_regressions
            );
        }
    });
}
