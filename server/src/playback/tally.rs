//! What one sender sent of one segment, logged (debug) when it leaves the segment: at the
//! end of it, or when the sender stops inside it (a pause, a seek, a migration handoff).
//!
//! A moved session's media comes from several nodes, each logging its own part with the
//! first and last RTP sequence numbers it sent, so a viewer's broken frame can be traced to
//! the node and the packets that made it: the node logs side by side show whether a packet
//! was never packetised, sent twice, or sent and lost on the way.

use crate::live::reader::OutPacket;
use tracing::debug;

#[derive(Debug, Default)]
pub struct SegmentTally {
    /// Start of the segment (its id in the store).
    segment_start_ms: i64,
    /// Index of the first frame sent in the segment.
    first_frame: Option<usize>,
    frames: u32,
    packets: u32,
    bytes: u64,
    /// Output sequence numbers of the first and last packet sent.
    seqs: Option<(u16, u16)>,
}

impl SegmentTally {
    /// One frame, `index` in the segment starting at `segment_start_ms`, sent as `packets`
    /// of `bytes` in all (the sender counts them for its rate already).
    pub fn add(
        &mut self,
        segment_start_ms: i64,
        index: usize,
        packets: &[OutPacket],
        bytes: usize,
    ) {
        if self.first_frame.is_none() {
            self.segment_start_ms = segment_start_ms;
            self.first_frame = Some(index);
        }
        self.frames += 1;
        self.packets += packets.len() as u32;
        self.bytes += bytes as u64;
        let seq = |p: &OutPacket| u16::from_be_bytes([p.header[2], p.header[3]]);
        if let (Some(first), Some(last)) = (packets.first(), packets.last()) {
            let first = self.seqs.map_or(seq(first), |(f, _)| f);
            self.seqs = Some((first, seq(last)));
        }
    }

    /// Logs what was sent of the segment (nothing if nothing was) and starts over.
    pub fn close(&mut self, camera: &str, why: &'static str) {
        let t = std::mem::take(self);
        let (Some(first_frame), Some((first_seq, last_seq))) = (t.first_frame, t.seqs) else {
            return;
        };
        debug!(
            camera,
            segment = t.segment_start_ms,
            first_frame,
            frames = t.frames,
            packets = t.packets,
            bytes = t.bytes,
            first_seq,
            last_seq,
            "segment sent ({why})"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn pkt(seq: u16, len: usize) -> OutPacket {
        let mut header = [0u8; 12];
        header[2..4].copy_from_slice(&seq.to_be_bytes());
        OutPacket {
            track: 0,
            header,
            payload: Bytes::from(vec![0; len]),
        }
    }

    #[test]
    fn counts_frames_packets_bytes_and_the_sequence_span() {
        let mut t = SegmentTally::default();
        t.add(5000, 7, &[pkt(65534, 100), pkt(65535, 50)], 2 * 12 + 150);
        t.add(5000, 8, &[pkt(0, 10)], 12 + 10);
        assert_eq!((t.segment_start_ms, t.first_frame), (5000, Some(7)));
        assert_eq!((t.frames, t.packets, t.bytes), (2, 3, 3 * 12 + 160));
        assert_eq!(t.seqs, Some((65534, 0)));
        t.close("cam", "test");
        assert_eq!((t.frames, t.seqs), (0, None), "closing starts over");
    }
}
