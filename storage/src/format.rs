//! Segment file format (version 1): encoding while recording, decoding and verification on read.
//!
//! All integers are little-endian. A segment is written front to back as frames arrive, so the
//! totals live in a fixed-size trailer at the end, and the CRC-32 (IEEE) at the very end covers
//! every byte before it. A file is only ever read after the writer renamed it into place, so a
//! missing or wrong trailer means damage, not "still being written".
//!
//! ```text
//! header   magic "VIGILSEG" (8) | version u16 = 1 | flags u16 = 0 | block_len u32
//!          block: sdp_len u32 | sdp (UTF-8) | track_count u8 |
//!                 per track: codec_len u8 | codec (ASCII) | clock_rate u32
//! frames   per frame: tag u8 = 0x46 ('F') | track u8 | flags u8 (bit 0 = keyframe) |
//!          time_ms i64 | media_ts u64 | len u32 | data (len bytes)
//! trailer  magic "VIGILEND" (8) | frames u32 | start_ms i64 | end_ms i64 |
//!          body_len u64 (bytes before the trailer) | crc32 u32 (of all preceding bytes)
//! ```

use bytes::Bytes;
use std::io::{self, Write};

/// First bytes of every segment file.
pub const SEGMENT_MAGIC: &[u8; 8] = b"VIGILSEG";
/// Magic that opens the trailer.
pub const TRAILER_MAGIC: &[u8; 8] = b"VIGILEND";
/// Current segment format version; readers reject other versions instead of guessing.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the fixed trailer.
pub const TRAILER_LEN: usize = 8 + 4 + 8 + 8 + 8 + 4;
const FRAME_HEADER_LEN: usize = 1 + 1 + 1 + 8 + 8 + 4;
const FRAME_TAG: u8 = b'F';
/// Upper bound for one frame, so a corrupt length cannot make the reader allocate wildly.
pub const MAX_FRAME_LEN: usize = 64 << 20;

/// One elementary stream of the recorded camera.
#[derive(Clone, Debug, PartialEq)]
pub struct TrackHeader {
    /// "H264", "H265", "AAC", "PCMA", "PCMU".
    pub codec: String,
    /// RTP clock rate of `Frame::media_ts`.
    pub clock_rate: u32,
}

/// What playback needs to describe the stream: stored at the head of every segment so each
/// segment is self-describing (the camera may change codec between recordings).
#[derive(Clone, Debug, PartialEq)]
pub struct StreamHeader {
    /// The live stream's SDP text.
    pub sdp: String,
    /// Tracks, indexed by `Frame::track`.
    pub tracks: Vec<TrackHeader>,
}

impl StreamHeader {
    /// Index of the first video track (H.264/H.265): segments are cut at its keyframes.
    pub fn video_track(&self) -> Option<u8> {
        self.tracks
            .iter()
            .position(|t| is_video_codec(&t.codec))
            .and_then(|i| u8::try_from(i).ok())
    }
}

/// True for the codecs whose keyframes segment boundaries align to.
pub fn is_video_codec(codec: &str) -> bool {
    codec.eq_ignore_ascii_case("H264") || codec.eq_ignore_ascii_case("H265")
}

/// One media frame (access unit) of one track.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub track: u8,
    pub keyframe: bool,
    /// wall-clock time of the frame, UTC ms since the Unix epoch
    pub time_ms: i64,
    /// media timestamp in the track's clock units (RTP clock), for exact spacing
    pub media_ts: u64,
    /// H.264/H.265: NAL units each prefixed by a 4-byte big-endian length; AAC: one raw access
    /// unit; G.711: raw samples.
    pub data: Bytes,
}

/// Encodes the file header (magic, version and stream header block).
pub(crate) fn encode_header(header: &StreamHeader) -> Vec<u8> {
    let mut block = Vec::with_capacity(header.sdp.len() + 64);
    block.extend_from_slice(&(header.sdp.len() as u32).to_le_bytes());
    block.extend_from_slice(header.sdp.as_bytes());
    let tracks = &header.tracks[..header.tracks.len().min(255)];
    block.push(tracks.len() as u8);
    for t in tracks {
        let codec = &t.codec.as_bytes()[..t.codec.len().min(255)];
        block.push(codec.len() as u8);
        block.extend_from_slice(codec);
        block.extend_from_slice(&t.clock_rate.to_le_bytes());
    }
    let mut out = Vec::with_capacity(16 + block.len());
    out.extend_from_slice(SEGMENT_MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(block.len() as u32).to_le_bytes());
    out.extend_from_slice(&block);
    out
}

/// Streams a segment into `W` while keeping the running CRC and length, so closing a segment
/// never re-reads it.
pub(crate) struct SegmentEncoder<W: Write> {
    out: W,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<W: Write> SegmentEncoder<W> {
    pub(crate) fn new(out: W, header_bytes: &[u8]) -> io::Result<Self> {
        let mut enc = SegmentEncoder {
            out,
            crc: crc32fast::Hasher::new(),
            len: 0,
        };
        enc.put(header_bytes)?;
        Ok(enc)
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.out.write_all(b)?;
        self.crc.update(b);
        self.len += b.len() as u64;
        Ok(())
    }

    pub(crate) fn frame(&mut self, f: &Frame) -> io::Result<()> {
        let mut h = [0u8; FRAME_HEADER_LEN];
        h[0] = FRAME_TAG;
        h[1] = f.track;
        h[2] = u8::from(f.keyframe);
        h[3..11].copy_from_slice(&f.time_ms.to_le_bytes());
        h[11..19].copy_from_slice(&f.media_ts.to_le_bytes());
        h[19..23].copy_from_slice(&(f.data.len() as u32).to_le_bytes());
        self.put(&h)?;
        self.put(&f.data)
    }

    /// Writes the trailer; returns the writer, the total file length and the CRC.
    pub(crate) fn finish(
        mut self,
        frames: u32,
        start_ms: i64,
        end_ms: i64,
    ) -> io::Result<(W, u64, u32)> {
        let body_len = self.len;
        let mut t = Vec::with_capacity(TRAILER_LEN);
        t.extend_from_slice(TRAILER_MAGIC);
        t.extend_from_slice(&frames.to_le_bytes());
        t.extend_from_slice(&start_ms.to_le_bytes());
        t.extend_from_slice(&end_ms.to_le_bytes());
        t.extend_from_slice(&body_len.to_le_bytes());
        self.put(&t)?;
        let crc = self.crc.clone().finalize();
        self.out.write_all(&crc.to_le_bytes())?;
        Ok((self.out, self.len + 4, crc))
    }
}

/// A decoded, verified segment body.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedSegment {
    pub header: StreamHeader,
    pub frames: Vec<Frame>,
    pub start_ms: i64,
    pub end_ms: i64,
    pub crc32: u32,
}

/// Little cursor that turns every out-of-bounds read into an error instead of a panic.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| format!("truncated at byte {}", self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        self.arr().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, String> {
        self.arr().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, String> {
        self.arr().map(u64::from_le_bytes)
    }
    fn i64(&mut self) -> Result<i64, String> {
        self.arr().map(i64::from_le_bytes)
    }
}

/// Decodes and verifies a whole segment file. Never panics on arbitrary input: every failure
/// is a reason string that the caller wraps into `StorageError::Corrupt`.
pub fn decode_segment(bytes: Bytes) -> Result<DecodedSegment, String> {
    let buf: &[u8] = &bytes;
    if buf.len() < 16 + TRAILER_LEN + 4 {
        return Err(format!("too short ({} bytes)", buf.len()));
    }
    let crc_pos = buf.len() - 4;
    let mut crc_bytes = [0u8; 4];
    crc_bytes.copy_from_slice(&buf[crc_pos..]);
    let stored_crc = u32::from_le_bytes(crc_bytes);
    let actual = crc32fast::hash(&buf[..crc_pos]);
    if stored_crc != actual {
        return Err(format!(
            "checksum mismatch (stored {stored_crc:08x}, computed {actual:08x})"
        ));
    }
    let mut c = Cursor { buf, pos: 0 };
    if c.take(8)? != SEGMENT_MAGIC {
        return Err("bad magic".into());
    }
    let version = c.u16()?;
    if version != FORMAT_VERSION {
        return Err(format!("unsupported version {version}"));
    }
    let _flags = c.u16()?;
    let block_len = c.u32()? as usize;
    let block = c.take(block_len)?;
    let header = decode_stream_header(block)?;

    let trailer_pos = crc_pos - (TRAILER_LEN - 4);
    let mut t = Cursor {
        buf: &buf[..crc_pos],
        pos: trailer_pos,
    };
    if t.take(8)? != TRAILER_MAGIC {
        return Err("bad trailer magic".into());
    }
    let frame_count = t.u32()?;
    let start_ms = t.i64()?;
    let end_ms = t.i64()?;
    let body_len = t.u64()?;
    if body_len != trailer_pos as u64 {
        return Err(format!("body length {body_len} != {trailer_pos}"));
    }

    let mut body = Cursor {
        buf: &buf[..trailer_pos],
        pos: c.pos,
    };
    // Capacity bounded by what the body can hold, so a forged count cannot exhaust memory.
    let cap = (frame_count as usize).min(trailer_pos / FRAME_HEADER_LEN + 1);
    let mut frames = Vec::with_capacity(cap);
    while body.pos < trailer_pos {
        if body.u8()? != FRAME_TAG {
            return Err(format!("bad frame tag at byte {}", body.pos - 1));
        }
        let track = body.u8()?;
        let flags = body.u8()?;
        let time_ms = body.i64()?;
        let media_ts = body.u64()?;
        let len = body.u32()? as usize;
        if len > MAX_FRAME_LEN {
            return Err(format!("frame of {len} bytes"));
        }
        let start = body.pos;
        body.take(len)?;
        frames.push(Frame {
            track,
            keyframe: flags & 1 != 0,
            time_ms,
            media_ts,
            data: bytes.slice(start..start + len),
        });
    }
    if frames.len() != frame_count as usize {
        return Err(format!(
            "trailer says {frame_count} frames, found {}",
            frames.len()
        ));
    }
    Ok(DecodedSegment {
        header,
        frames,
        start_ms,
        end_ms,
        crc32: stored_crc,
    })
}

fn decode_stream_header(block: &[u8]) -> Result<StreamHeader, String> {
    let mut c = Cursor { buf: block, pos: 0 };
    let sdp_len = c.u32()? as usize;
    let sdp = String::from_utf8(c.take(sdp_len)?.to_vec()).map_err(|_| "SDP is not UTF-8")?;
    let n = c.u8()?;
    let mut tracks = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let len = c.u8()? as usize;
        let codec = String::from_utf8(c.take(len)?.to_vec()).map_err(|_| "codec not UTF-8")?;
        let clock_rate = c.u32()?;
        tracks.push(TrackHeader { codec, clock_rate });
    }
    Ok(StreamHeader { sdp, tracks })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (StreamHeader, Vec<Frame>) {
        let header = StreamHeader {
            sdp: "v=0\r\n".into(),
            tracks: vec![
                TrackHeader {
                    codec: "H264".into(),
                    clock_rate: 90_000,
                },
                TrackHeader {
                    codec: "AAC".into(),
                    clock_rate: 48_000,
                },
            ],
        };
        let frames = (0..10)
            .map(|i| Frame {
                track: (i % 2) as u8,
                keyframe: i == 0,
                time_ms: 1_000 + i * 40,
                media_ts: (i * 3600) as u64,
                data: Bytes::from(vec![i as u8; 10 + i as usize]),
            })
            .collect();
        (header, frames)
    }

    pub(crate) fn encode(header: &StreamHeader, frames: &[Frame]) -> Vec<u8> {
        let mut enc = SegmentEncoder::new(Vec::new(), &encode_header(header)).unwrap();
        for f in frames {
            enc.frame(f).unwrap();
        }
        let (out, len, _) = enc.finish(frames.len() as u32, 1_000, 1_400).unwrap();
        assert_eq!(out.len() as u64, len);
        out
    }

    #[test]
    fn roundtrip() {
        let (h, frames) = sample();
        let bytes = encode(&h, &frames);
        let d = decode_segment(Bytes::from(bytes.clone())).unwrap();
        assert_eq!(d.header, h);
        assert_eq!(d.frames, frames);
        assert_eq!((d.start_ms, d.end_ms), (1_000, 1_400));
        assert_eq!(d.crc32, crc32fast::hash(&bytes[..bytes.len() - 4]));
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let (h, frames) = sample();
        let bytes = encode(&h, &frames);
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(decode_segment(Bytes::from(b)).is_err(), "byte {i}");
        }
        for n in 0..bytes.len() {
            assert!(decode_segment(Bytes::from(bytes[..n].to_vec())).is_err());
        }
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = decode_segment(Bytes::from(data));
        }

        #[test]
        fn random_body_with_valid_crc_never_panics(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
            keep_magic in proptest::bool::ANY,
        ) {
            // A valid CRC over garbage gets past the checksum into the parser proper.
            let mut b = data;
            if keep_magic && b.len() >= 8 {
                b[..8].copy_from_slice(SEGMENT_MAGIC);
            }
            let crc = crc32fast::hash(&b);
            b.extend_from_slice(&crc.to_le_bytes());
            let _ = decode_segment(Bytes::from(b));
        }

        #[test]
        fn mutated_valid_segment_never_panics(pos in 0usize..400, val in proptest::num::u8::ANY) {
            let (h, frames) = sample();
            let mut b = encode(&h, &frames);
            let i = pos % b.len();
            b[i] = val;
            let n = b.len() - 4;
            let crc = crc32fast::hash(&b[..n]);
            b[n..].copy_from_slice(&crc.to_le_bytes());
            let _ = decode_segment(Bytes::from(b));
        }
    }
}
