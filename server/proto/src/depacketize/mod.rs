//! RTP depacketisation into access units (frames), and the matching packetisers.
//!
//! The node records live streams as *frames* rather than as RTP packets: a recording made of
//! packets would carry the publisher's MTU, sequence numbers and loss pattern forever, while a
//! recording made of frames can be re-packetised for any viewer (`packetize`) and seeked by
//! keyframe. This module is the sans-IO half of that: RTP payloads in, [`Frame`]s out, and
//! frames back to RTP payloads.
//!
//! Frame data formats:
//! - H.264 / H.265: the access unit as NAL units, each prefixed by a 4-byte big-endian length
//!   (AVC/HVCC style, as MP4 stores them), parameter sets kept in the AU they arrived in.
//! - AAC: one raw AAC access unit (no ADTS header) per frame.
//! - G.711: the payload bytes of one RTP packet.

mod aac;
mod h26x;
mod packetize;
#[cfg(test)]
mod tests;

pub use packetize::{packetize, packetize_payloads, PacketizeError, Payload, AAC_HBR_FMTP};

use crate::codec::Codec;
use crate::rtp::RtpHeader;
use crate::sdp::MediaDescription;
use std::collections::VecDeque;

/// Upper bound on one reassembled frame. A publisher that never sets the marker bit and
/// never changes the timestamp would otherwise grow one access unit without limit; 8 MiB is
/// far above any real 4K intra frame.
pub const MAX_FRAME_BYTES: usize = 8 << 20;

/// Late or duplicated packets at most this far behind the expected sequence number are
/// ignored; anything further behind is taken as the sender restarting its numbering (a
/// camera reboot keeps the SSRC surprisingly often), so the stream resynchronises instead of
/// discarding up to 32k packets.
const MAX_MISORDER: u16 = 64;

/// One access unit: a video picture, an AAC frame or a G.711 packet's samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// RTP timestamp (in the track's clock rate) at which the frame is presented.
    pub timestamp: u32,
    /// A decoder can start here: an H.264 IDR, an H.265 IRAP, or any audio frame.
    pub keyframe: bool,
    /// Packets were lost or a damaged frame was dropped between the previous frame and this
    /// one. A recorder can use it to mark a gap; a video decoder will show artefacts until
    /// the next keyframe, so a recorder may also choose to skip to it.
    pub discontinuity: bool,
    /// See the module documentation for the per-codec format.
    pub data: Vec<u8>,
}

/// Why a depacketiser could not be built or a payload could not be used. Errors from
/// [`Depacketizer::push`] are per-packet: the depacketiser stays usable and the access unit
/// the packet belonged to is dropped, so callers should log (rate-limited) and carry on.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum DepacketizeError {
    #[error("recording codec {codec} is not supported")]
    Unsupported { codec: &'static str },
    #[error("{codec} with {feature} is not supported")]
    UnsupportedMode {
        codec: &'static str,
        feature: String,
    },
    #[error("invalid fmtp parameter {name}={value:?}")]
    BadFmtp { name: &'static str, value: String },
    #[error("track clock rate is unknown (0)")]
    ZeroClockRate,
    #[error("malformed {codec} RTP payload: {reason}")]
    Malformed {
        codec: &'static str,
        reason: &'static str,
    },
    #[error("{codec} RTP packet type {packet_type} is not supported")]
    UnsupportedPacketType {
        codec: &'static str,
        packet_type: u8,
    },
    #[error("access unit larger than {max} bytes")]
    FrameTooLarge { max: usize },
}

/// Where the codec-specific parts put finished frames; kept apart from them so the
/// loss/discontinuity bookkeeping is written once.
#[derive(Debug, Default)]
struct Sink {
    ready: VecDeque<Frame>,
    discontinuity: bool,
    dropped_frames: u64,
}

impl Sink {
    fn emit(&mut self, timestamp: u32, keyframe: bool, data: Vec<u8>) {
        self.ready.push_back(Frame {
            timestamp,
            keyframe,
            discontinuity: std::mem::take(&mut self.discontinuity),
            data,
        });
    }

    fn drop_frame(&mut self) {
        self.dropped_frames += 1;
        self.discontinuity = true;
    }
}

#[derive(Debug)]
enum Inner {
    H26x(h26x::H26x),
    Aac(aac::Aac),
    G711,
}

/// What the sequence number of a packet says about the packets before it.
enum Order {
    /// The packet that was expected next.
    Next,
    /// Packets are missing (or this is the first packet, after which we know nothing of
    /// what came before).
    Gap,
    /// Duplicate or late packet: its access unit was already emitted or given up on.
    Stale,
}

/// Turns the RTP packets of one track into [`Frame`]s.
///
/// Push packets in arrival order with [`push`](Self::push), then take completed frames with
/// [`pull`](Self::pull) until it returns `None`. A push/pull pair (rather than `push`
/// returning a `Vec`) avoids an allocation per packet and lets one packet complete several
/// frames (an AAC packet with several AUs, or a timestamp change closing the previous AU
/// while the new packet completes its own). Call [`flush`](Self::flush) at the end of a
/// stream to get a last access unit whose marker packet never came.
///
/// There is no jitter buffer here: reordered packets look like loss. Put one in front if the
/// transport reorders (UDP over the internet); interleaved TCP never does.
#[derive(Debug)]
pub struct Depacketizer {
    codec: Codec,
    clock_rate: u32,
    inner: Inner,
    sink: Sink,
    ssrc: Option<u32>,
    expected_seq: u16,
    lost_packets: u64,
}

impl Depacketizer {
    /// `fmtp` is the text after `a=fmtp:<pt> `. It matters for AAC (`sizelength`,
    /// `indexlength`, `indexdeltalength` and the other RFC 3640 AU-header fields, plus
    /// `constantDuration`) and is checked for H.264 `packetization-mode=2` and H.265
    /// `sprop-max-don-diff > 0`, whose interleaving/DON reordering is not supported and would
    /// otherwise give silently misordered frames.
    pub fn new(
        codec: Codec,
        clock_rate: u32,
        fmtp: Option<&str>,
    ) -> Result<Self, DepacketizeError> {
        if clock_rate == 0 {
            return Err(DepacketizeError::ZeroClockRate);
        }
        let fmtp = fmtp.unwrap_or("");
        let inner = match codec {
            Codec::H264 => {
                if fmtp_u32(fmtp, "packetization-mode")?.unwrap_or(0) > 1 {
                    return Err(DepacketizeError::UnsupportedMode {
                        codec: "H264",
                        feature: "interleaved packetization-mode=2".into(),
                    });
                }
                Inner::H26x(h26x::H26x::new(false))
            }
            Codec::H265 => {
                if fmtp_u32(fmtp, "sprop-max-don-diff")?.unwrap_or(0) > 0 {
                    return Err(DepacketizeError::UnsupportedMode {
                        codec: "H265",
                        feature: "DON reordering (sprop-max-don-diff > 0)".into(),
                    });
                }
                Inner::H26x(h26x::H26x::new(true))
            }
            Codec::Aac => Inner::Aac(aac::Aac::from_fmtp(fmtp)?),
            Codec::Pcma | Codec::Pcmu => Inner::G711,
            Codec::Other => {
                return Err(DepacketizeError::Unsupported {
                    codec: codec.name(),
                })
            }
        };
        Ok(Self {
            codec,
            clock_rate,
            inner,
            sink: Sink::default(),
            ssrc: None,
            expected_seq: 0,
            lost_packets: 0,
        })
    }

    /// Shorthand for [`new`](Self::new) from a parsed SDP media section.
    pub fn from_media(media: &MediaDescription) -> Result<Self, DepacketizeError> {
        Self::new(media.codec(), media.clock_rate, media.fmtp.as_deref())
    }

    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// The RTP clock rate frame timestamps are in, so the recorder can convert to time.
    pub fn clock_rate(&self) -> u32 {
        self.clock_rate
    }

    /// Packets detected missing from sequence-number gaps (not counting resyncs).
    pub fn lost_packets(&self) -> u64 {
        self.lost_packets
    }

    /// Access units given up on because a packet of them was lost or malformed.
    pub fn dropped_frames(&self) -> u64 {
        self.sink.dropped_frames
    }

    /// Feed one RTP packet (header and payload after CSRCs/extension/padding, as
    /// `rtp::parse` locates it).
    ///
    /// An error means this packet was unusable and its access unit will be dropped; the
    /// depacketiser itself remains valid for the following packets.
    pub fn push(&mut self, header: &RtpHeader, payload: &[u8]) -> Result<(), DepacketizeError> {
        let loss = match self.order(header) {
            Order::Stale => return Ok(()),
            Order::Next => false,
            Order::Gap => true,
        };
        let ts = header.timestamp;
        match &mut self.inner {
            Inner::H26x(d) => d.push(ts, header.marker, payload, loss, &mut self.sink),
            Inner::Aac(d) => d.push(ts, header.marker, payload, loss, &mut self.sink),
            Inner::G711 => {
                if !payload.is_empty() {
                    self.sink.emit(ts, true, payload.to_vec());
                }
                Ok(())
            }
        }
    }

    /// The next completed frame, in the order they were completed.
    pub fn pull(&mut self) -> Option<Frame> {
        self.sink.ready.pop_front()
    }

    /// End of stream: completes an access unit still waiting for its marker bit or a
    /// timestamp change (publishers that never set the marker otherwise lose their last
    /// frame), and drops an incomplete one. Frames are then available from `pull`.
    pub fn flush(&mut self) {
        match &mut self.inner {
            Inner::H26x(d) => d.flush(&mut self.sink),
            Inner::Aac(d) => d.flush(&mut self.sink),
            Inner::G711 => {}
        }
    }

    fn order(&mut self, header: &RtpHeader) -> Order {
        let first_of_ssrc = self.ssrc != Some(header.ssrc);
        if first_of_ssrc {
            // A new SSRC is a new sender state: whatever was pending belongs to the old one.
            if self.ssrc.is_some() {
                self.sink.discontinuity = true;
            }
            self.ssrc = Some(header.ssrc);
            self.expected_seq = header.sequence.wrapping_add(1);
            return Order::Gap;
        }
        let ahead = header.sequence.wrapping_sub(self.expected_seq);
        if ahead == 0 {
            self.expected_seq = header.sequence.wrapping_add(1);
            return Order::Next;
        }
        if ahead < 0x8000 {
            self.lost_packets += u64::from(ahead);
        } else if self.expected_seq.wrapping_sub(header.sequence) <= MAX_MISORDER {
            return Order::Stale;
        }
        self.sink.discontinuity = true;
        self.expected_seq = header.sequence.wrapping_add(1);
        Order::Gap
    }
}

/// Value of an fmtp parameter; names are case-insensitive (RFC 3640 §4.1 and common
/// practice: ffmpeg sends `sizeLength`, GStreamer `sizelength`).
fn fmtp_param<'a>(fmtp: &'a str, name: &str) -> Option<&'a str> {
    fmtp.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn fmtp_u32(fmtp: &str, name: &'static str) -> Result<Option<u32>, DepacketizeError> {
    fmtp_param(fmtp, name)
        .map(|v| {
            v.parse().map_err(|_| DepacketizeError::BadFmtp {
                name,
                value: v.to_owned(),
            })
        })
        .transpose()
}
