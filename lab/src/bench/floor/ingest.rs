//! The camera's side of the floor: its video RTP pulled over RTSP/TCP and cut into frames
//! (the packets up to the marker bit), each framed once for every transport, so that the
//! sender's per-viewer work is only the send calls.

use super::fanout::{Event, Frame};
use anyhow::Context;
use bytes::Bytes;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use vigil_proto::codec::{starts_keyframe, Codec};
use vigil_testkit::client::{play, ClientTransport, PlayOptions, Player};

/// A frame without a marker bit is cut here (a camera that never sets it still flows).
const MAX_PACKETS_PER_FRAME: usize = 512;

/// The camera, playing.
pub struct Upstream {
    player: Player,
    video: usize,
    codec: Codec,
    payload_type: u8,
}

impl Upstream {
    /// PLAY the camera over TCP; its first video track is the one relayed.
    pub async fn connect(url: &str) -> anyhow::Result<Upstream> {
        let player = play(url, PlayOptions::new(ClientTransport::Tcp))
            .await
            .with_context(|| format!("playing {url}"))?;
        let (video, track) = player
            .tracks()
            .iter()
            .enumerate()
            .find(|(_, t)| t.codec.is_video())
            .context("the camera has no video track")?;
        let (codec, payload_type) = (track.codec, track.payload_type);
        anyhow::ensure!(
            codec == Codec::H264,
            "the floor's SDP is H.264; the camera sends {codec:?}"
        );
        Ok(Upstream {
            player,
            video,
            codec,
            payload_type,
        })
    }

    pub fn payload_type(&self) -> u8 {
        self.payload_type
    }

    /// Forward frames to the sender until the camera ends (an error: the run needs it).
    pub async fn forward(mut self, tx: Sender<Event>) -> anyhow::Result<()> {
        let mut frame = FrameBuilder::default();
        while let Some(p) = self.player.next_packet().await? {
            if p.track != self.video {
                continue;
            }
            let keyframe = starts_keyframe(self.codec, &p.payload);
            frame.push(vigil_proto::rtp::packet(&p.header, &p.payload), keyframe);
            if (p.header.marker || frame.packets.len() >= MAX_PACKETS_PER_FRAME)
                && tx.send(Event::Frame(Arc::new(frame.finish()))).is_err()
            {
                anyhow::bail!("the sender thread ended");
            }
        }
        anyhow::bail!("the camera's stream ended")
    }
}

/// The packets of the frame being received.
#[derive(Default)]
struct FrameBuilder {
    packets: Vec<Bytes>,
    /// The first packet that starts a keyframe (SPS or IDR slice): where a new viewer
    /// begins, so that its first video packet is one, as a node's viewers' is.
    key_at: Option<usize>,
}

impl FrameBuilder {
    fn push(&mut self, packet: Vec<u8>, keyframe: bool) {
        if keyframe && self.key_at.is_none() {
            self.key_at = Some(self.packets.len());
        }
        self.packets.push(Bytes::from(packet));
    }

    fn finish(&mut self) -> Frame {
        let packets = std::mem::take(&mut self.packets);
        Frame::new(packets, self.key_at.take())
    }
}
