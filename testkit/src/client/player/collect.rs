//! Stats collection: a playing session counted rather than yielded packet by packet.

use super::receive::Polled;
use super::Player;
use crate::client::stats::{Stats, TrackStats};
use std::future::Future;
use std::time::{Duration, Instant};
use vigil_proto::rtp;

impl Player {
    /// Count everything for `duration`, then drop the connection.
    pub async fn run_stats(self, duration: Duration) -> Stats {
        self.collect_stats(tokio::time::sleep(duration), None).await
    }

    /// Count until `stop` resolves, the stream ends or an error occurs. With `mark`, the
    /// totals as they stood at that instant are kept in [`Stats::at_mark`] (a load test's
    /// steady window starts there).
    pub async fn collect_stats(
        mut self,
        stop: impl Future<Output = ()>,
        mark: Option<Instant>,
    ) -> Stats {
        let started = Instant::now();
        let mut stats = Stats {
            tracks: self
                .tracks
                .iter()
                .map(|t| TrackStats::new(t.codec, t.clock_rate))
                .collect(),
            play_sent: self.answer.sent,
            started,
            stopped: started,
            at_mark: None,
            ended: false,
            error: None,
        };
        let play_sent = self.answer.sent;
        for p in std::mem::take(&mut self.backlog) {
            if let Some(t) = stats.tracks.get_mut(p.track) {
                let len = 12 + p.payload.len();
                t.record(
                    &p.header,
                    &p.payload,
                    len,
                    p.at.saturating_duration_since(play_sent),
                );
            }
        }
        tokio::pin!(stop);
        loop {
            let polled = tokio::select! {
                biased;
                _ = &mut stop => break,
                p = self.poll() => p,
            };
            match polled {
                Ok(Polled::Rtp { track, range, at }) => {
                    if stats.at_mark.is_none() && mark.is_some_and(|m| at >= m) {
                        stats.at_mark = Some(stats.snapshot());
                    }
                    let data = &self.media_buf()[range];
                    let (Some(t), Ok((header, payload))) =
                        (stats.tracks.get_mut(track), rtp::parse(data))
                    else {
                        continue;
                    };
                    t.record(
                        &header,
                        &data[payload],
                        data.len(),
                        at.saturating_duration_since(play_sent),
                    );
                }
                Ok(Polled::End) => {
                    stats.ended = true;
                    break;
                }
                Ok(Polled::Stopped) => {
                    // Hold the connection without reading until told to stop.
                    stop.as_mut().await;
                    break;
                }
                Err(e) => {
                    stats.error = Some(e);
                    break;
                }
            }
        }
        stats.stopped = Instant::now();
        for (t, (srs, bye)) in stats.tracks.iter_mut().zip(&self.rtcp_seen) {
            t.sender_reports = *srs;
            t.bye = *bye;
        }
        stats
    }
}
