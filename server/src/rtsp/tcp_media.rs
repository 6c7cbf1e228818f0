//! The media side of an RTSP connection whose viewer plays over TCP interleaved: live
//! packets pumped from the hub, batches a playback task queued, RTCP sender reports and BYE.
//!
//! On plain TCP a live viewer's packets, reports and BYE are its stream's group's
//! (`live_sender`), which writes to the connection's socket beside this task
//! (`net::tcp_sink`); this task drains what the socket did not take at once. RTSPS
//! viewers (their bytes go through the connection's TLS) are pumped by this task.
//!
//! Control and media share one socket writer, so every media write is bounded by the
//! slow-reader timeout (`[live] slow_reader_timeout_ms`): a viewer whose socket takes no
//! byte for that long is dropped. An unbounded write would block the connection task, and
//! with it the session's TEARDOWN, its timeout and its release, for as long as the peer kept
//! the connection open without reading. The bound is on progress ([`Conn::writer`]), not on
//! a whole batch: on a link slower than the camera, one batch (up to the path's ring) can
//! take longer than the timeout to drain while the viewer reads all along.

use super::conn::{Conn, Event, Writer};
use super::session::Media;
use crate::live_sender::{LivePump, TcpOut};
use crate::node::Node;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::AsyncWriteExt;
use tracing::{info, warn};
use vigil_proto::rtcp;
use vigil_proto::rtsp::SessionState;

/// Most packets moved per wake-up of a TCP viewer: a few frames, so one viewer cannot hog
/// the worker thread while others wait.
pub(super) const PUMP_BATCH: usize = 256;
const SENDER_REPORT_EVERY: Duration = Duration::from_secs(5);

impl Conn {
    /// Resolves when the session has TCP media to send: a live reader's hub has packets,
    /// or a playback task queued some. Pending otherwise.
    pub(super) async fn next_media(&mut self) -> Event {
        let Some(session) = self.session.as_mut() else {
            return std::future::pending().await;
        };
        if let Some(reader) = session.tcp_reader() {
            reader.wait().await;
            return Event::Media;
        }
        match session.playback.as_mut().and_then(|p| p.tcp_rx.as_mut()) {
            Some(rx) => Event::Playback(rx.recv().await),
            None => std::future::pending().await,
        }
    }

    /// Write one batch from the playback task on the interleaved channels. A viewer that
    /// takes nothing within the slow-reader timeout is disconnected, as a live one is.
    pub(super) async fn write_playback(
        &mut self,
        out: crate::playback::task::TcpOut,
    ) -> std::io::Result<()> {
        use crate::playback::task::TcpOut;
        let Some(session) = self.session.as_ref() else {
            return Ok(());
        };
        match out {
            TcpOut::Packets(packets) => {
                let channels = session.rtp_channels();
                let packets = session.protect(&packets);
                let write = self.tcp.write(&mut self.writer, &packets, &channels);
                bounded(&self.node, &mut self.stalled, write).await
            }
            TcpOut::Rtcp(reports) => {
                let chans: Vec<(u8, Vec<u8>)> = reports
                    .into_iter()
                    .filter_map(|(t, pkt)| {
                        let ch = session.rtcp_channel(t)?;
                        Some((ch, session.protect_rtcp(t, pkt)?))
                    })
                    .collect();
                for (ch, pkt) in chans {
                    let write = write_interleaved(&mut self.writer, ch, &pkt);
                    bounded(&self.node, &mut self.stalled, write).await?;
                }
                Ok(())
            }
        }
    }

    /// Write everything a playback task has queued (it has stopped or is stopping).
    pub(super) async fn drain_playback(&mut self) -> std::io::Result<()> {
        loop {
            let next = self
                .session
                .as_mut()
                .and_then(|s| s.playback.as_mut())
                .and_then(|p| p.tcp_rx.as_mut())
                .and_then(|rx| rx.try_recv().ok());
            match next {
                Some(out) => self.write_playback(out).await?,
                None => return Ok(()),
            }
        }
    }

    /// Work that must follow a response on the wire (media after a PLAY answer): on plain
    /// TCP the viewer joins its stream's group, which sends after the answer (already in the
    /// socket or queued before anything the group writes); on RTSPS this task pumps.
    pub(super) async fn after_response(&mut self) -> std::io::Result<()> {
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        if session.tcp_reader().is_none() {
            return Ok(());
        }
        let Some(sink) = self.sink.clone() else {
            return self.pump_tcp().await;
        };
        if let Media::TcpPlay(reader) = std::mem::replace(&mut session.media, Media::None) {
            let rtp = session.rtp_channels();
            let rtcp = (0..rtp.len()).map(|t| session.rtcp_channel(t)).collect();
            let out = TcpOut { sink, rtp, rtcp };
            let pump = LivePump::spawn_tcp(self.node.clone(), session.info.clone(), reader, out);
            session.media = Media::TcpGroup(pump);
        }
        Ok(())
    }

    /// Drains what the sink queued (bytes the socket did not take at once); a viewer that
    /// takes none of them within the slow-reader timeout is disconnected.
    pub(super) async fn flush_queued(&mut self) -> std::io::Result<()> {
        let flush = self.writer.flush();
        bounded(&self.node, &mut self.stalled, flush).await
    }

    /// A viewer leaving the connection takes its reader back from the group, so that its
    /// BYE goes out from here before the socket closes; none if the group had ended it
    /// (BYE sent).
    pub(super) async fn leave_group(&mut self) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        if !matches!(session.media, Media::TcpGroup(_)) {
            return;
        }
        let Media::TcpGroup(pump) = std::mem::replace(&mut session.media, Media::None) else {
            return;
        };
        if let Ok(Some(p)) = tokio::time::timeout(Duration::from_secs(1), pump.stop()).await {
            if !p.ended {
                session.media = Media::TcpPlay(p.reader);
            }
        }
    }

    /// Move what the hub has for this TCP viewer onto the socket. A viewer that does not
    /// take data within the slow-reader timeout is disconnected.
    pub(super) async fn pump_tcp(&mut self) -> std::io::Result<()> {
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        let Some(reader) = session.tcp_reader_mut() else {
            return Ok(());
        };
        self.out.clear();
        let skips_before = reader.skips;
        let consumed = reader.poll_batch(&mut self.out, PUMP_BATCH);
        if reader.skips != skips_before {
            Node::bump(&self.node.counters.reader_skips);
        }
        let finished = consumed == 0 && reader.stream().is_finished();
        if !self.out.is_empty() {
            let bytes: u64 = self.out.iter().map(|p| 12 + p.payload.len() as u64).sum();
            session
                .info
                .packets
                .fetch_add(self.out.len() as u64, std::sync::atomic::Ordering::Relaxed);
            session
                .info
                .bytes
                .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
            let channels = session.rtp_channels();
            let out = session.protect(&self.out);
            let write = self.tcp.write(&mut self.writer, &out, &channels);
            bounded(&self.node, &mut self.stalled, write).await?;
        }
        if finished {
            info!("publisher ended the stream");
            self.goodbye_bounded().await;
            if let Some(s) = &self.session {
                s.info.cancel.cancel();
            }
        }
        Ok(())
    }

    /// An RTCP sender report per track every few seconds, so a live viewer can map RTP
    /// time to wall-clock time (lip sync, and NVRs' time stamps).
    pub(super) async fn maybe_sender_report(&mut self) -> std::io::Result<()> {
        if self.last_sr.elapsed() < SENDER_REPORT_EVERY {
            return Ok(());
        }
        self.last_sr = Instant::now();
        let Some(session) = &self.session else {
            return Ok(());
        };
        let Some(reader) = session.tcp_reader() else {
            return Ok(());
        };
        if session.state() != SessionState::Playing {
            return Ok(());
        }
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let cname = self.node.config.node.id.clone();
        let reports: Vec<(u8, Vec<u8>)> = reader
            .sender_reports(Instant::now(), wall)
            .into_iter()
            .filter_map(|(track, sr)| {
                let ch = session.rtcp_channel(track)?;
                Some((
                    ch,
                    session.protect_rtcp(track, rtcp::sender_report(&sr, &cname))?,
                ))
            })
            .collect();
        for (ch, pkt) in reports {
            let write = write_interleaved(&mut self.writer, ch, &pkt);
            bounded(&self.node, &mut self.stalled, write).await?;
        }
        Ok(())
    }

    /// RTCP BYE, unless the viewer has stopped reading (then there is no one to tell, and
    /// a write could block the connection task forever).
    pub(super) async fn goodbye_bounded(&mut self) {
        if !self.stalled {
            let _ = tokio::time::timeout(Duration::from_secs(1), self.send_goodbye()).await;
        }
    }

    /// RTCP BYE to a TCP viewer (UDP sessions send their own from their task).
    pub(super) async fn send_goodbye(&mut self) {
        let Some(session) = &self.session else {
            return;
        };
        let Some(reader) = session.tcp_reader() else {
            return;
        };
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let cname = self.node.config.node.id.clone();
        for (track, sr) in reader.goodbye_reports(Instant::now(), wall) {
            let ch = session.rtcp_channel(track);
            if let Some((ch, pkt)) = ch.zip(session.protect_rtcp(track, rtcp::goodbye(&sr, &cname)))
            {
                let _ = write_interleaved(&mut self.writer, ch, &pkt).await;
            }
        }
    }
}

/// A media write, whose writer fails it with `TimedOut` when the viewer's socket took no
/// byte for the slow-reader timeout. Such a viewer is dropped (counted in
/// `slow_readers_dropped`); `stalled` then stops any further write to it, the goodbye
/// included.
async fn bounded(
    node: &Node,
    stalled: &mut bool,
    write: impl Future<Output = std::io::Result<()>>,
) -> std::io::Result<()> {
    let r = write.await;
    if r.as_ref()
        .is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut)
    {
        let timeout = Duration::from_millis(node.config.live.slow_reader_timeout_ms);
        Node::bump(&node.counters.slow_readers_dropped);
        warn!("viewer took no data for {timeout:?}: disconnected");
        *stalled = true;
    }
    r
}

/// One RTCP packet on an interleaved channel (`$`, channel, 16-bit length, data).
pub async fn write_interleaved(w: &mut Writer, channel: u8, data: &[u8]) -> std::io::Result<()> {
    w.write_all(&crate::net::tcp::interleaved_frame(channel, data))
        .await
}
