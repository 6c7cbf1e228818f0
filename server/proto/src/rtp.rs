//! RTP packets (RFC 3550 §5) and the per-session output identity.
//!
//! The server never re-encodes: it forwards payloads and rewrites only the 12-byte fixed
//! header. Parsing is therefore about *locating* the payload safely in whatever a publisher
//! or camera sends (CSRCs, header extensions, padding), and writing is always the plain
//! header, because the extensions and CSRCs of an input mean nothing to our viewers.
//!
//! The `rtp` crate of webrtc-rs is deliberately not used: it pulls in I/O and async
//! dependencies, and the part we need is a few dozen lines.

use std::ops::Range;

/// Length of the fixed RTP header, before CSRCs and extension.
pub const FIXED_HEADER_LEN: usize = 12;

/// The fields of the fixed header the server acts on; the rest (CSRCs, extensions) is
/// dropped when forwarding, so it is not carried here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtpHeader {
    pub marker: bool,
    pub payload_type: u8,
    pub sequence: u16,
    pub timestamp: u32,
    pub ssrc: u32,
}

/// What was wrong with a packet the peer sent.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RtpError {
    #[error("RTP packet of {len} bytes is shorter than the 12-byte fixed header")]
    TooShort { len: usize },
    #[error("RTP packet has version {version}, expected 2")]
    BadVersion { version: u8 },
    #[error("RTP packet declares {csrc_count} CSRCs but is only {len} bytes long")]
    CsrcOverrun { csrc_count: u8, len: usize },
    #[error("RTP header extension of {words} words runs past the end of the {len}-byte packet")]
    ExtensionOverrun { words: u16, len: usize },
    #[error("RTP padding bit set but the padding count is zero")]
    ZeroPadding,
    #[error("RTP padding of {padding} bytes exceeds the {available} bytes after the header")]
    PaddingOverrun { padding: u8, available: usize },
}

/// Parse and validate an RTP packet (version 2, CSRC count, extension length, padding count
/// all within the buffer).
///
/// Returns the header and the byte range of the payload (after CSRCs and header extension,
/// before padding), so the caller can forward a slice of its receive buffer without copying.
pub fn parse(buf: &[u8]) -> Result<(RtpHeader, Range<usize>), RtpError> {
    let len = buf.len();
    let fixed: &[u8; FIXED_HEADER_LEN] = buf
        .get(..FIXED_HEADER_LEN)
        .and_then(|s| s.try_into().ok())
        .ok_or(RtpError::TooShort { len })?;
    let version = fixed[0] >> 6;
    if version != 2 {
        return Err(RtpError::BadVersion { version });
    }
    let has_padding = fixed[0] & 0x20 != 0;
    let has_extension = fixed[0] & 0x10 != 0;
    let csrc_count = fixed[0] & 0x0f;

    let mut start = FIXED_HEADER_LEN + 4 * usize::from(csrc_count);
    if start > len {
        return Err(RtpError::CsrcOverrun { csrc_count, len });
    }
    if has_extension {
        // RFC 3550 §5.3.1: 16-bit profile id, 16-bit length in 32-bit words, then data.
        let words = match buf.get(start + 2..start + 4) {
            Some(b) => u16::from_be_bytes([b[0], b[1]]),
            None => return Err(RtpError::ExtensionOverrun { words: 0, len }),
        };
        start += 4 + 4 * usize::from(words);
        if start > len {
            return Err(RtpError::ExtensionOverrun { words, len });
        }
    }
    let mut end = len;
    if has_padding {
        // The last octet counts the padding including itself, so 0 is impossible.
        let padding = buf[len - 1];
        if padding == 0 {
            return Err(RtpError::ZeroPadding);
        }
        let available = len - start;
        if usize::from(padding) > available {
            return Err(RtpError::PaddingOverrun { padding, available });
        }
        end = len - usize::from(padding);
    }
    let header = RtpHeader {
        marker: fixed[1] & 0x80 != 0,
        payload_type: fixed[1] & 0x7f,
        sequence: u16::from_be_bytes([fixed[2], fixed[3]]),
        timestamp: u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]),
        ssrc: u32::from_be_bytes([fixed[8], fixed[9], fixed[10], fixed[11]]),
    };
    Ok((header, start..end))
}

/// Writes a plain 12-byte header (V=2, no padding/extension/CSRC).
///
/// The payload type is masked to 7 bits so a bad value cannot flip the marker bit.
pub fn write_header(h: &RtpHeader) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[0] = 0x80;
    out[1] = (u8::from(h.marker) << 7) | (h.payload_type & 0x7f);
    out[2..4].copy_from_slice(&h.sequence.to_be_bytes());
    out[4..8].copy_from_slice(&h.timestamp.to_be_bytes());
    out[8..12].copy_from_slice(&h.ssrc.to_be_bytes());
    out
}

/// A whole packet in one allocation, for senders that build packets from NAL units
/// (the demo clip, tests) rather than forwarding a received buffer.
pub fn packet(h: &RtpHeader, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FIXED_HEADER_LEN + payload.len());
    out.extend_from_slice(&write_header(h));
    out.extend_from_slice(payload);
    out
}

/// A session's own RTP identity for one track: the SSRC, sequence and timestamp line the
/// *viewer* sees, independent of the input's. Every outgoing session owns one per track, so
/// packets from a shared source (or from a seek, an upstream reconnect, or another node after
/// a migration) come out as one continuous stream: same SSRC, contiguous sequence numbers,
/// continuous timestamps. It serialises whole (serde) because a migrated session's identity
/// travels to the node that continues it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RtpIdentity {
    ssrc: u32,
    next_seq: u16,
    /// Output timestamp the first packet of the current input line will get.
    pending_ts: u32,
    /// `(sequence offset, timestamp offset)` from input to output, fixed by the first packet
    /// of each input line and cleared by `rebase`.
    offsets: Option<(u16, u32)>,
    last_ts: Option<u32>,
    /// Latest output timestamp in RTP order (wrapping): with B-frames the last packet sent
    /// is not the latest in presentation, and a new input line must start after all of them.
    max_ts: Option<u32>,
    packets: u32,
    octets: u32,
}

impl RtpIdentity {
    /// `first_seq`/`first_ts`: the random initial values (the caller owns the RNG).
    pub fn new(ssrc: u32, first_seq: u16, first_ts: u32) -> Self {
        Self {
            ssrc,
            next_seq: first_seq,
            pending_ts: first_ts,
            offsets: None,
            last_ts: None,
            max_ts: None,
            packets: 0,
            octets: 0,
        }
    }

    /// The output header for an input packet header. Deltas are wrapping u16/u32 arithmetic.
    ///
    /// On the first packet (and the first after `rebase`) the offsets are chosen so that the
    /// output sequence is `next_seq()` and the output timestamp is `first_ts` (or, after
    /// rebase, the previous output timestamp + ts_advance). Later packets keep the input's
    /// spacing: gaps in input sequence numbers are real loss and the viewer's jitter buffer
    /// must see them as such. Counts packets and `payload_len` octets for RTCP SR.
    pub fn rewrite(&mut self, input: &RtpHeader, payload_len: usize) -> RtpHeader {
        let (seq_off, ts_off) = *self.offsets.get_or_insert((
            self.next_seq.wrapping_sub(input.sequence),
            self.pending_ts.wrapping_sub(input.timestamp),
        ));
        let sequence = input.sequence.wrapping_add(seq_off);
        let timestamp = input.timestamp.wrapping_add(ts_off);
        // Late (reordered) packets keep their place but must not move `next_seq` back,
        // or the next rebase would reuse sequence numbers the viewer has already seen.
        if sequence.wrapping_sub(self.next_seq) < 0x8000 {
            self.next_seq = sequence.wrapping_add(1);
        }
        self.last_ts = Some(timestamp);
        if self
            .max_ts
            .is_none_or(|m| timestamp.wrapping_sub(m) < 0x8000_0000)
        {
            self.max_ts = Some(timestamp);
        }
        // RFC 3550 §6.4.1: the counts wrap modulo 2^32.
        self.packets = self.packets.wrapping_add(1);
        self.octets = self.octets.wrapping_add(payload_len as u32);
        RtpHeader {
            marker: input.marker,
            payload_type: input.payload_type,
            sequence,
            timestamp,
            ssrc: self.ssrc,
        }
    }

    /// The next input packet starts a new input line (new upstream SSRC after a reconnect, a
    /// seek, a skip ahead): output sequence continues at +1, output timestamp continues at
    /// the latest timestamp sent + ts_advance. The caller picks `ts_advance` (typically one
    /// frame duration) because only it knows how much media time the discontinuity represents.
    pub fn rebase(&mut self, ts_advance: u32) {
        self.offsets = None;
        if let Some(max) = self.max_ts {
            self.pending_ts = max.wrapping_add(ts_advance);
        }
    }

    /// Continues on an input line of which the packet `(input_seq, input_ts)` is the one last
    /// sent (as `next_seq() - 1` with the last timestamp), though its numbering differs: the
    /// same media reached another node through another RTP session (a live viewer's
    /// handoff). Later input packets keep their spacing from it, so the viewer sees neither
    /// a gap nor a jump.
    pub fn continue_from(&mut self, input_seq: u16, input_ts: u32) {
        let seq = self.next_seq.wrapping_sub(1);
        let ts = self.last_ts.unwrap_or(self.pending_ts);
        self.offsets = Some((seq.wrapping_sub(input_seq), ts.wrapping_sub(input_ts)));
    }

    /// Leaves `n` sequence numbers unused: a sender taking a stream back after its last
    /// known state (a heartbeat old) skips past what the lost sender may have sent since, so
    /// the viewer sees loss, never a number twice.
    pub fn skip_seq(&mut self, n: u16) {
        self.next_seq = self.next_seq.wrapping_add(n);
        if let Some((seq_off, _)) = self.offsets.as_mut() {
            *seq_off = seq_off.wrapping_add(n);
        }
    }

    /// Output timestamp an input timestamp would get now (for RTP-Info rtptime before the
    /// first packet is sent). If no offset is fixed yet, returns what `rewrite` would assign
    /// to a first packet, whatever `input_ts` is.
    pub fn project_timestamp(&self, input_ts: u32) -> u32 {
        match self.offsets {
            Some((_, ts_off)) => input_ts.wrapping_add(ts_off),
            None => self.pending_ts,
        }
    }

    pub fn ssrc(&self) -> u32 {
        self.ssrc
    }

    pub fn next_seq(&self) -> u16 {
        self.next_seq
    }

    /// Last output timestamp, for the RTP timestamp of a sender report.
    pub fn last_timestamp(&self) -> Option<u32> {
        self.last_ts
    }

    pub fn packets(&self) -> u32 {
        self.packets
    }

    pub fn octets(&self) -> u32 {
        self.octets
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hdr(seq: u16, ts: u32, ssrc: u32) -> RtpHeader {
        RtpHeader {
            marker: false,
            payload_type: 96,
            sequence: seq,
            timestamp: ts,
            ssrc,
        }
    }

    #[test]
    fn continue_from_maps_the_last_packet_onto_the_last_output() {
        let mut id = RtpIdentity::new(7, 100, 5000);
        id.rewrite(&hdr(1, 0, 1), 10);
        id.rewrite(&hdr(2, 3000, 1), 10);
        // The same media elsewhere: its packet (900, 70_000) is the one last sent.
        id.continue_from(900, 70_000);
        let h = id.rewrite(&hdr(901, 73_000, 2), 10);
        assert_eq!((h.sequence, h.timestamp, h.ssrc), (102, 11_000, 7));
        // Loss on the new line stays visible as a gap.
        let h = id.rewrite(&hdr(903, 76_000, 2), 10);
        assert_eq!((h.sequence, h.timestamp), (104, 14_000));
    }

    #[test]
    fn skip_seq_leaves_numbers_unused_on_the_same_line() {
        let mut id = RtpIdentity::new(7, 100, 5000);
        id.rewrite(&hdr(1, 0, 1), 10);
        id.skip_seq(50);
        let h = id.rewrite(&hdr(2, 3000, 1), 10);
        assert_eq!((h.sequence, h.timestamp), (151, 8000));
        // Before any offset is fixed, the first packet starts past the skip.
        let mut id = RtpIdentity::new(7, u16::MAX - 1, 0);
        id.skip_seq(3);
        assert_eq!(id.rewrite(&hdr(9, 0, 1), 1).sequence, 1);
    }

    #[test]
    fn parse_plain_packet() {
        let pkt = [
            0x80, 0xe0, 0x12, 0x34, 0x00, 0x01, 0x5f, 0x90, 0xde, 0xad, 0xbe, 0xef, 0x65, 0x88,
            0x84,
        ];
        let (h, range) = parse(&pkt).unwrap();
        assert_eq!(
            h,
            RtpHeader {
                marker: true,
                payload_type: 96,
                sequence: 0x1234,
                timestamp: 90_000,
                ssrc: 0xdeadbeef
            }
        );
        assert_eq!(&pkt[range], &[0x65, 0x88, 0x84]);
    }

    #[test]
    fn parse_csrc_extension_padding() {
        let mut pkt = vec![0xb2, 0x08, 0, 1, 0, 0, 0, 160, 0, 0, 0, 7];
        pkt.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]); // two CSRCs
        pkt.extend_from_slice(&[0xbe, 0xde, 0, 1, 0x10, 0xaa, 0, 0]); // one-word extension
        pkt.extend_from_slice(&[0xd5, 0xd5]); // payload
        pkt.extend_from_slice(&[0, 0, 3]); // 3 bytes of padding
        let (h, range) = parse(&pkt).unwrap();
        assert_eq!(h.payload_type, 8);
        assert!(!h.marker);
        assert_eq!(h.ssrc, 7);
        assert_eq!(range, 28..30);
        assert_eq!(&pkt[range], &[0xd5, 0xd5]);
    }

    #[test]
    fn parse_rejects_malformed() {
        assert_eq!(parse(&[0x80; 11]), Err(RtpError::TooShort { len: 11 }));
        assert_eq!(
            parse(&[0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(RtpError::BadVersion { version: 1 })
        );
        assert_eq!(
            parse(&[0x82, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]),
            Err(RtpError::CsrcOverrun {
                csrc_count: 2,
                len: 16
            })
        );
        assert_eq!(
            parse(&[0x90, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xbe, 0xde, 0, 2, 0, 0, 0, 0]),
            Err(RtpError::ExtensionOverrun { words: 2, len: 20 })
        );
        assert_eq!(
            parse(&[0x90, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xbe]),
            Err(RtpError::ExtensionOverrun { words: 0, len: 13 })
        );
        assert_eq!(
            parse(&[0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 5]),
            Err(RtpError::PaddingOverrun {
                padding: 5,
                available: 2
            })
        );
        assert_eq!(
            parse(&[0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]),
            Err(RtpError::ZeroPadding)
        );
    }

    #[test]
    fn padding_may_consume_whole_payload() {
        let pkt = [0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4];
        // 3 bytes after header, padding 4 > 3.
        assert!(parse(&pkt).is_err());
        let pkt = [0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3];
        assert_eq!(parse(&pkt).unwrap().1, 12..12);
    }

    #[test]
    fn write_header_round_trips() {
        let h = RtpHeader {
            marker: true,
            payload_type: 97,
            sequence: 65535,
            timestamp: u32::MAX,
            ssrc: 0x01020304,
        };
        let bytes = write_header(&h);
        assert_eq!(bytes[0], 0x80);
        assert_eq!(parse(&bytes).unwrap(), (h, 12..12));
        let p = packet(&h, &[1, 2, 3]);
        assert_eq!(parse(&p).unwrap(), (h, 12..15));
    }

    #[test]
    fn identity_first_packet_and_spacing() {
        let mut id = RtpIdentity::new(42, 1000, 5000);
        assert_eq!(id.project_timestamp(123), 5000);
        let a = id.rewrite(&hdr(30_000, 900_000, 7), 100);
        assert_eq!((a.sequence, a.timestamp, a.ssrc), (1000, 5000, 42));
        assert_eq!(id.project_timestamp(903_000), 8000);
        // One lost packet in the input: the gap is preserved.
        let b = id.rewrite(&hdr(30_002, 903_000, 7), 50);
        assert_eq!((b.sequence, b.timestamp), (1002, 8000));
        assert_eq!(id.next_seq(), 1003);
        assert_eq!(id.packets(), 2);
        assert_eq!(id.octets(), 150);
        assert_eq!(id.last_timestamp(), Some(8000));
    }

    #[test]
    fn identity_reordered_input_does_not_rewind() {
        let mut id = RtpIdentity::new(1, 10, 0);
        id.rewrite(&hdr(100, 0, 1), 1);
        id.rewrite(&hdr(102, 0, 1), 1);
        let late = id.rewrite(&hdr(101, 0, 1), 1);
        assert_eq!(late.sequence, 11);
        assert_eq!(id.next_seq(), 13);
    }

    #[test]
    fn identity_continuity_across_rebase() {
        let mut id = RtpIdentity::new(9, 65534, u32::MAX - 1000);
        let a = id.rewrite(&hdr(7, 100, 1), 10);
        let b = id.rewrite(&hdr(8, 3100, 1), 10);
        assert_eq!((a.sequence, b.sequence), (65534, 65535));
        // The output timestamp wrapped past u32::MAX.
        assert_eq!(b.timestamp, 1999);
        // Upstream reconnects with a new SSRC and unrelated numbering.
        id.rebase(3000);
        assert_eq!(id.project_timestamp(77), 4999);
        let c = id.rewrite(&hdr(50_000, 12_345_678, 2), 10);
        assert_eq!((c.sequence, c.timestamp, c.ssrc), (0, 4999, 9));
        let d = id.rewrite(&hdr(50_001, 12_348_678, 2), 10);
        assert_eq!((d.sequence, d.timestamp), (1, 7999));
        assert_eq!(id.packets(), 4);
    }

    #[test]
    fn identity_input_wraps() {
        let mut id = RtpIdentity::new(9, 100, 0);
        id.rewrite(&hdr(65535, u32::MAX, 1), 0);
        let b = id.rewrite(&hdr(0, 2999, 1), 0);
        assert_eq!((b.sequence, b.timestamp), (101, 3000));
    }

    #[test]
    fn rebase_continues_after_the_latest_timestamp_not_the_last() {
        // Decode order I P B: the B-frame sent last is earlier than the P-frame.
        let mut id = RtpIdentity::new(9, 0, 0);
        id.rewrite(&hdr(1, 0, 1), 0);
        id.rewrite(&hdr(2, 9000, 1), 0);
        id.rewrite(&hdr(3, 3000, 1), 0);
        id.rebase(3000);
        let next = id.rewrite(&hdr(500, 77, 2), 0);
        assert_eq!((next.sequence, next.timestamp), (3, 12_000));
    }

    #[test]
    fn rebase_before_any_packet_keeps_first_ts() {
        let mut id = RtpIdentity::new(9, 100, 500);
        id.rebase(3000);
        let a = id.rewrite(&hdr(1, 1, 1), 0);
        assert_eq!((a.sequence, a.timestamp), (100, 500));
    }

    proptest! {
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok((_, range)) = parse(&data) {
                prop_assert!(range.start <= range.end && range.end <= data.len());
            }
        }
    }
}
