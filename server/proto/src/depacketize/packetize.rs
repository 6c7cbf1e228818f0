//! Frames back to RTP payloads, for playing recordings.

use crate::codec::{h264_payloads, h265_payloads, Codec};

/// The fmtp parameters that describe what [`packetize`] produces for AAC; playback SDP must
/// announce them (plus the recording's `config`), whatever layout the publisher used.
pub const AAC_HBR_FMTP: &str = "mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3";

/// Largest AU an AAC-hbr header can describe (13-bit AU-size).
const AAC_HBR_MAX_AU: usize = (1 << 13) - 1;

/// One RTP payload of a frame and how its header should differ from the frame's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    pub data: Vec<u8>,
    /// RTP marker bit: set on the last payload of a video access unit and on every complete
    /// (or last-fragment) AAC payload; never set for G.711, where the marker means the start
    /// of a talkspurt, which a recording does not know about.
    pub marker: bool,
    /// Add to the frame's RTP timestamp. Zero except for G.711, where a frame split at the
    /// MTU becomes several packets of consecutive samples (one byte = one sample).
    pub timestamp_offset: u32,
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum PacketizeError {
    #[error("cannot packetise codec {codec}")]
    Unsupported { codec: &'static str },
    #[error("MTU {mtu} is below the {min} bytes a {codec} payload needs")]
    MtuTooSmall {
        codec: &'static str,
        mtu: usize,
        min: usize,
    },
    #[error("frame data is not length-prefixed NAL units: {reason}")]
    MalformedFrame { reason: &'static str },
    #[error("AAC access unit of {len} bytes exceeds the AAC-hbr maximum of {max}")]
    AuTooLarge { len: usize, max: usize },
}

/// The RTP payloads for one frame (as produced by [`super::Depacketizer`]), each at most
/// `mtu` bytes (the RTP payload budget, not the IP MTU). All payloads carry the frame's
/// timestamp (G.711 aside, see [`packetize_payloads`]) and the marker goes on the last one
/// for video and AAC. An empty frame gives no payloads.
///
/// - H.264 / H.265: the 4-byte length-prefixed NALs, each a single-NAL payload or FU-A/FU
///   fragments (`codec::h264_payloads` / `h265_payloads`); zero-length NALs are skipped.
/// - AAC: one AAC-hbr payload per AU (16-bit AU-headers-length, one 13+3-bit AU header),
///   fragmented per RFC 3640 §3.2.3 if it does not fit; announce [`AAC_HBR_FMTP`].
/// - G.711: the samples split at `mtu`.
pub fn packetize(
    codec: Codec,
    frame_data: &[u8],
    mtu: usize,
) -> Result<Vec<Vec<u8>>, PacketizeError> {
    Ok(packetize_payloads(codec, frame_data, mtu)?
        .into_iter()
        .map(|p| p.data)
        .collect())
}

/// [`packetize`] with the marker bit and timestamp offset of each payload, which is what a
/// sender needs to build correct headers without codec knowledge of its own.
pub fn packetize_payloads(
    codec: Codec,
    frame_data: &[u8],
    mtu: usize,
) -> Result<Vec<Payload>, PacketizeError> {
    // Smallest payload that carries at least one byte of media: FU indicator + FU header
    // (H.264), 2-byte payload header + FU header (H.265), 4 bytes of AU headers (AAC).
    let min = match codec {
        Codec::H264 => 3,
        Codec::H265 => 4,
        Codec::Aac => 5,
        Codec::Pcma | Codec::Pcmu => 1,
        Codec::Other => {
            return Err(PacketizeError::Unsupported {
                codec: codec.name(),
            })
        }
    };
    if mtu < min {
        return Err(PacketizeError::MtuTooSmall {
            codec: codec.name(),
            mtu,
            min,
        });
    }
    let mut out: Vec<Payload> = match codec {
        Codec::H264 | Codec::H265 => {
            let mut out = Vec::new();
            let mut rest = frame_data;
            while !rest.is_empty() {
                let [a, b, c, d, tail @ ..] = rest else {
                    return Err(PacketizeError::MalformedFrame {
                        reason: "truncated length prefix",
                    });
                };
                let len = usize::try_from(u32::from_be_bytes([*a, *b, *c, *d])).map_err(|_| {
                    PacketizeError::MalformedFrame {
                        reason: "NAL length overflows",
                    }
                })?;
                let nal = tail.get(..len).ok_or(PacketizeError::MalformedFrame {
                    reason: "NAL length runs past the frame",
                })?;
                rest = &tail[len..];
                let payloads = if codec == Codec::H264 {
                    h264_payloads(nal, mtu)
                } else {
                    h265_payloads(nal, mtu)
                };
                out.extend(payloads.into_iter().map(|data| Payload {
                    data,
                    marker: false,
                    timestamp_offset: 0,
                }));
            }
            out
        }
        Codec::Aac => {
            if frame_data.len() > AAC_HBR_MAX_AU {
                return Err(PacketizeError::AuTooLarge {
                    len: frame_data.len(),
                    max: AAC_HBR_MAX_AU,
                });
            }
            // Fits in 13 bits, checked above; AU-Index 0.
            let size = frame_data.len() as u16;
            let header = [0x00, 0x10, (size >> 5) as u8, ((size & 0x1f) << 3) as u8];
            let chunks: Vec<&[u8]> = frame_data.chunks(mtu - header.len()).collect();
            let last = chunks.len().saturating_sub(1);
            chunks
                .into_iter()
                .enumerate()
                .map(|(i, chunk)| {
                    let mut data = Vec::with_capacity(header.len() + chunk.len());
                    data.extend_from_slice(&header);
                    data.extend_from_slice(chunk);
                    Payload {
                        data,
                        marker: i == last,
                        timestamp_offset: 0,
                    }
                })
                .collect()
        }
        // G.711 (Other returned above).
        _ => {
            return Ok(frame_data
                .chunks(mtu)
                .enumerate()
                .map(|(i, chunk)| Payload {
                    data: chunk.to_vec(),
                    marker: false,
                    // One sample per byte; wraps like every RTP timestamp.
                    timestamp_offset: (i * mtu) as u32,
                })
                .collect());
        }
    };
    if let Some(last) = out.last_mut() {
        last.marker = true;
    }
    Ok(out)
}
