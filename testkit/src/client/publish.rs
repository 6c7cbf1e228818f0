//! A light RTSP *publisher*: ANNOUNCE, SETUP (TCP interleaved, `mode=record`) and RECORD,
//! then RTP packets written on the connection. It replays a [`Clip`] — an H.264 Annex B
//! file split into frames and packetised once (RFC 6184, FU-A for large NALs) — in a loop,
//! paced by the frame rate, so hundreds of cameras can be simulated from one process
//! (`vigil bench record`), where one ffmpeg per camera would cost more than the node.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use vigil_testkit::client::{Clip, Publisher};
//! let clip = Clip::from_annexb(&std::fs::read("camera.h264")?, 25.0)
//!     .ok_or_else(|| anyhow::anyhow!("no SPS/PPS in the file"))?;
//! let mut publisher = Publisher::announce(
//!     "rtsp://127.0.0.1:8554/live/cam1",
//!     &clip,
//!     std::time::Duration::from_secs(10),
//! )
//! .await?;
//! publisher.run(&clip, 1.0, std::future::pending()).await?;
//! # Ok(()) }
//! ```

use super::control::{Control, Target};
use super::ClientError;
use bytes::Bytes;
use std::future::Future;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use vigil_proto::rtp::{write_header, RtpHeader};
use vigil_proto::rtsp::Method;
use vigil_proto::sdp::SessionDescription;

/// An H.264 stream as RTP payloads per frame, ready to replay.
#[derive(Debug, Clone)]
pub struct Clip {
    /// Per frame, its RTP payloads in order (the last one gets the marker bit).
    pub frames: Vec<Vec<Bytes>>,
    /// One video track (control `trackID=0`, as `SessionDescription::render` writes it) with
    /// the stream's SPS/PPS.
    pub sdp: SessionDescription,
    pub fps: f64,
    /// Payload bytes of one loop of the clip.
    pub bytes: u64,
}

impl Clip {
    /// Split an Annex B H.264 stream into frames of RTP payloads (packetised for a 1400-byte
    /// MTU, as a node does by default). `None` without SPS and PPS. `fps` paces the replay and sets the timestamps.
    ///
    /// Frames are sent in file (decode) order with timestamps one frame interval apart, so
    /// the stream must have no B-frames (`x264 -bf 0`): reordered frames would be stamped
    /// with wrong presentation times.
    pub fn from_annexb(data: &[u8], fps: f64) -> Option<Clip> {
        let demo = vigil_server::ingest::demo::DemoClip::load(
            data,
            vigil_conf::RtspConfig::default().rtp_payload_max(),
        )?;
        let mut sdp = demo.sdp;
        for m in &mut sdp.media {
            m.control = Some("trackID=0".into());
            m.framerate = Some(fps);
        }
        let bytes = demo.frames.iter().flatten().map(|p| p.len() as u64).sum();
        Some(Clip {
            frames: demo.frames,
            sdp,
            fps,
            bytes,
        })
    }

    /// Average bitrate of a replay at `fps`, in bits per second.
    pub fn bitrate_bps(&self) -> f64 {
        self.bytes as f64 * 8.0 * self.fps / self.frames.len().max(1) as f64
    }
}

/// A recording session on a node: media goes out as interleaved RTP on channel 0.
pub struct Publisher {
    ctl: Control,
    url: String,
    ssrc: u32,
    seq: u16,
    timeout: Duration,
    /// One frame's interleaved packets, written with one call.
    out: Vec<u8>,
    /// Frames and payload bytes sent so far.
    pub frames_sent: u64,
    pub bytes_sent: u64,
}

impl Publisher {
    /// OPTIONS is skipped (publishers need not send it): ANNOUNCE with the clip's SDP,
    /// SETUP `RTP/AVP/TCP;unicast;interleaved=0-1;mode=record`, RECORD.
    pub async fn announce(
        url: &str,
        clip: &Clip,
        timeout: Duration,
    ) -> Result<Publisher, ClientError> {
        let target = Target::parse(url)?;
        let mut ctl = Control::connect(&target, timeout, None, None).await?;
        let body = clip.sdp.render("127.0.0.1", 0, "npt=now-");
        let req = ctl
            .request(Method::Announce, &target.url)
            .body("application/sdp", body.into_bytes());
        ctl.call_ok(req, timeout).await?;
        let track_url = Target::join(&target.url, Some("trackID=0"));
        let req = ctl.request(Method::Setup, &track_url).header(
            "Transport",
            "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record",
        );
        let resp = ctl.call_ok(req, timeout).await?;
        let session = resp
            .headers
            .get("Session")
            .map(|s| s.split(';').next().unwrap_or("").trim().to_string())
            .ok_or_else(|| ClientError::Protocol("SETUP answer without Session".into()))?;
        ctl.session = Some(session);
        let req = ctl
            .request(Method::Record, &target.url)
            .header("Range", "npt=0.000-");
        ctl.call_ok(req, timeout).await?;
        Ok(Publisher {
            ctl,
            url: target.url,
            ssrc: rand::random(),
            seq: rand::random(),
            timeout,
            out: Vec::with_capacity(64 * 1024),
            frames_sent: 0,
            bytes_sent: 0,
        })
    }

    /// Write one frame: its payloads as RTP packets with `timestamp`, the marker on the last.
    pub async fn send_frame(
        &mut self,
        payloads: &[Bytes],
        timestamp: u32,
    ) -> Result<(), ClientError> {
        self.out.clear();
        for (i, p) in payloads.iter().enumerate() {
            let header = write_header(&RtpHeader {
                marker: i + 1 == payloads.len(),
                payload_type: 96,
                sequence: self.seq,
                timestamp,
                ssrc: self.ssrc,
            });
            self.seq = self.seq.wrapping_add(1);
            let len = u16::try_from(header.len() + p.len())
                .map_err(|_| ClientError::Protocol("RTP packet over 64 KiB".into()))?;
            self.out.push(b'$');
            self.out.push(0);
            self.out.extend_from_slice(&len.to_be_bytes());
            self.out.extend_from_slice(&header);
            self.out.extend_from_slice(p);
            self.bytes_sent += p.len() as u64;
        }
        self.ctl.stream.write_all(&self.out).await?;
        self.frames_sent += 1;
        Ok(())
    }

    /// Replay `clip` in a loop at `speed` × its frame rate (timestamps keep the clip's
    /// 90 kHz spacing, so a node records `speed` seconds of media per wall second) until
    /// `stop` resolves; then TEARDOWN. Frames late by more than one interval are sent at
    /// once (the schedule is kept, not shifted). Answers the node sends meanwhile (none are
    /// asked for) are not read: the node sends nothing unasked to a publisher.
    pub async fn run(
        &mut self,
        clip: &Clip,
        speed: f64,
        stop: impl Future<Output = ()>,
    ) -> Result<(), ClientError> {
        let interval = Duration::from_secs_f64(1.0 / (clip.fps * speed.max(0.001)));
        let ticks = (90_000.0 / clip.fps).round() as u32;
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut ts: u32 = rand::random();
        tokio::pin!(stop);
        loop {
            for frame in &clip.frames {
                tokio::select! {
                    biased;
                    _ = &mut stop => return self.teardown().await,
                    _ = tick.tick() => {}
                }
                self.send_frame(frame, ts).await?;
                ts = ts.wrapping_add(ticks);
            }
        }
    }

    /// TEARDOWN (the node then ends the stream and closes the recording's last segment).
    pub async fn teardown(&mut self) -> Result<(), ClientError> {
        let req = self.ctl.request(Method::Teardown, &self.url);
        self.ctl.call_ok(req, self.timeout).await.map(|_| ())
    }
}
