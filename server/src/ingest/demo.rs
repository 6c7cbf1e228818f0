//! The bundled demo camera: a 10 s H.264 clip (640×360, 25 fps, a keyframe every second)
//! looped forever, so `vigil serve` with no config has something to play at once.
//!
//! The clip is raw Annex B (made with ffmpeg's testsrc2 and libx264; see
//! `assets/README.md`); its NAL units are grouped into frames, paced at 25 fps and
//! packetised (RFC 6184, FU-A for large NALs) with a timestamp line that keeps rising
//! across loops.

use super::Producer;
use crate::live::stream::{Stream, StreamInfo};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use vigil_proto::codec::{annexb_nals, h264_nal_type, h264_payloads};
use vigil_proto::rtp::RtpHeader;
use vigil_proto::sdp::{h264_fmtp, MediaDescription, SessionDescription};

pub const CLIP: &[u8] = include_bytes!("../../assets/demo.h264");
pub const FPS: u32 = 25;

/// The clip as frames of RTP payloads, computed once.
pub struct DemoClip {
    pub frames: Vec<Vec<Bytes>>,
    pub sdp: SessionDescription,
}

impl DemoClip {
    /// The clip in `data` cut into payloads of at most `payload_max` bytes
    /// (`rtsp.rtp_payload_max()`).
    pub fn load(data: &[u8], payload_max: usize) -> Option<DemoClip> {
        let nals = annexb_nals(data);
        let sps = nals.iter().find(|n| h264_nal_type(n) == Some(7))?;
        let pps = nals.iter().find(|n| h264_nal_type(n) == Some(8))?;
        let mut frames: Vec<Vec<Bytes>> = Vec::new();
        let mut current: Vec<Bytes> = Vec::new();
        let mut has_slice = false;
        for nal in &nals {
            let t = h264_nal_type(nal).unwrap_or(0);
            let is_slice = t == 1 || t == 5;
            // A slice whose first_mb_in_slice is 0 (ue(v) "1" bit) starts a new picture;
            // so does a parameter set or SEI after a picture's slices.
            let first_mb_zero = nal.get(1).is_some_and(|b| b & 0x80 != 0);
            let starts_frame = has_slice && ((is_slice && first_mb_zero) || matches!(t, 6..=9));
            if starts_frame {
                frames.push(std::mem::take(&mut current));
                has_slice = false;
            }
            has_slice |= is_slice;
            current.extend(h264_payloads(nal, payload_max).into_iter().map(Bytes::from));
        }
        if !current.is_empty() {
            frames.push(current);
        }
        let sdp = SessionDescription {
            session_name: Some("vigil demo".into()),
            media: vec![MediaDescription {
                media: "video".into(),
                payload_type: 96,
                encoding_name: "H264".into(),
                clock_rate: 90_000,
                channels: None,
                fmtp: Some(h264_fmtp(sps, pps)),
                control: None,
                framerate: Some(FPS.into()),
                bandwidth_kbps: Some((data.len() as u64 * 8 / 10 / 1000) as u32),
            }],
        };
        Some(DemoClip { frames, sdp })
    }
}

/// Feed the clip into `stream` until cancelled.
pub async fn run(stream: Arc<Stream>, cancel: CancellationToken, payload_max: usize) {
    let Some(clip) = DemoClip::load(CLIP, payload_max) else {
        tracing::error!("bundled demo clip is unreadable");
        return;
    };
    let mut producer = Producer::attach(stream, StreamInfo::from_sdp(clip.sdp.clone()));
    let mut tick = tokio::time::interval(Duration::from_secs(1) / FPS);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let ssrc = rand::random::<u32>();
    let mut seq: u16 = rand::random();
    let mut n: u32 = 0;
    loop {
        for frame in &clip.frames {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let ts = n.wrapping_mul(90_000 / FPS);
            n = n.wrapping_add(1);
            for (i, payload) in frame.iter().enumerate() {
                let header = RtpHeader {
                    marker: i + 1 == frame.len(),
                    payload_type: 96,
                    sequence: seq,
                    timestamp: ts,
                    ssrc,
                };
                seq = seq.wrapping_add(1);
                producer.push(0, header, payload.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_has_250_frames_and_keyframes_every_second() {
        let clip = DemoClip::load(CLIP, 1340).unwrap();
        assert_eq!(clip.frames.len(), 250);
        // No payload over the budget: the datagram fits a 1400-byte MTU.
        assert!(clip.frames.iter().flatten().all(|p| p.len() <= 1340));
        let small = DemoClip::load(CLIP, 500).unwrap();
        assert!(small.frames.iter().flatten().all(|p| p.len() <= 500));
        assert!(
            small.frames.iter().map(Vec::len).sum::<usize>()
                > clip.frames.iter().map(Vec::len).sum::<usize>()
        );
        let keyframes = clip
            .frames
            .iter()
            .filter(|f| vigil_proto::codec::starts_keyframe(vigil_proto::codec::Codec::H264, &f[0]))
            .count();
        assert_eq!(keyframes, 10);
        assert!(CLIP.len() <= 1024 * 1024);
        let fmtp = clip.sdp.media[0].fmtp.as_deref().unwrap();
        assert!(fmtp.contains("sprop-parameter-sets="), "{fmtp}");
    }
}
