//! Producers: everything that feeds a live stream (RTSP publishers, pulled cameras, the demo).

pub mod demo;
pub mod handover;
pub mod pull;
pub mod relay;
pub mod sleep;

use crate::cluster::Cluster;
use crate::live::stream::{Packet, Stream, StreamInfo};
use crate::node::{Node, PathEntry};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;
use vigil_proto::codec::{starts_keyframe, Codec};
use vigil_proto::rtp::RtpHeader;

/// Starts a listed camera's source if it runs without viewers: the demo clip (its task's
/// stop in the path's source slot, so a registry removal ends it) and always-on pulls
/// (cluster: on the node the camera is bound to). On-demand pulls start on DESCRIBE; push
/// cameras wait for their publisher.
pub fn start(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>, path: &Arc<PathEntry>) {
    match path.source() {
        vigil_conf::Source::Demo => {
            let cancel = node.shutdown.child_token();
            *path.puller.lock().unwrap_or_else(|p| p.into_inner()) = Some(cancel.clone());
            node.spawn_ingest(demo::run(
                path.stream.clone(),
                cancel,
                node.config.rtsp.rtp_payload_max(),
            ));
        }
        vigil_conf::Source::Pull { .. } if !path.on_demand() => {
            pull::ensure_running(node, cluster, path)
        }
        _ => {}
    }
}

/// Marks where a reader may start: the first packet of an access unit that is a
/// random-access point. A keyframe access unit often spans several packets (SPS, PPS, IDR
/// slices): only its first packet counts, or a reader could start after the parameter sets.
///
/// Access unit delimiters and SEI may come first in an access unit (GStreamer's
/// rtspclientsink sends AUD, SPS, PPS, SEI, IDR): they are skipped over, so the first
/// parameter set or IDR packet after them is the one marked.
#[derive(Debug, Default, Clone)]
pub struct AccessUnitTracker {
    prev: Option<(u32, bool)>,
    /// Only AUD/SEI packets seen so far in the current access unit.
    in_prefix: bool,
}

impl AccessUnitTracker {
    /// Whether this packet starts a keyframe access unit.
    pub fn observe(&mut self, codec: Codec, header: &RtpHeader, payload: &[u8]) -> bool {
        let au_start = match self.prev {
            None => true,
            Some((ts, marker)) => marker || ts != header.timestamp || self.in_prefix,
        };
        self.prev = Some((header.timestamp, header.marker));
        self.in_prefix = au_start && is_au_prefix(codec, payload);
        codec.is_video() && au_start && starts_keyframe(codec, payload)
    }
}

/// A single-NAL payload that may precede the parameter sets and slices of an access unit:
/// access unit delimiter or SEI (H.264 types 9 and 6; H.265 types 35 and 39).
fn is_au_prefix(codec: Codec, payload: &[u8]) -> bool {
    match codec {
        Codec::H264 => matches!(vigil_proto::codec::h264_nal_type(payload), Some(6 | 9)),
        Codec::H265 => matches!(vigil_proto::codec::h265_nal_type(payload), Some(35 | 39)),
        _ => false,
    }
}

/// One attached producer of a stream: stamps its epoch and keyframe flags on packets.
pub struct Producer {
    stream: Arc<Stream>,
    epoch: u64,
    codecs: Vec<Codec>,
    trackers: Vec<AccessUnitTracker>,
}

impl Producer {
    pub fn attach(stream: Arc<Stream>, info: StreamInfo) -> Producer {
        let codecs: Vec<Codec> = info.tracks.iter().map(|t| t.codec).collect();
        let trackers = vec![AccessUnitTracker::default(); codecs.len()];
        let epoch = stream.attach_producer(info);
        Producer {
            stream,
            epoch,
            codecs,
            trackers,
        }
    }

    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// False once another producer has taken the stream over.
    pub fn is_current(&self) -> bool {
        self.stream.is_current(self.epoch)
    }

    pub fn push(&mut self, track: usize, header: RtpHeader, payload: Bytes) {
        let (Some(codec), Some(tracker)) = (self.codecs.get(track), self.trackers.get_mut(track))
        else {
            return;
        };
        let keyframe = tracker.observe(*codec, &header, &payload);
        self.stream.push(Packet {
            track,
            header,
            payload,
            keyframe,
            epoch: self.epoch,
            received: Instant::now(),
        });
    }

    /// The publisher ended the stream (push sources only).
    pub fn finish(&self) {
        self.stream.finish(self.epoch);
    }

    /// Parse a raw RTP packet and push it; false (and nothing pushed) if it is not valid RTP.
    pub fn push_raw(&mut self, track: usize, raw: Bytes) -> bool {
        match vigil_proto::rtp::parse(&raw) {
            Ok((header, range)) => {
                self.push(track, header, raw.slice(range));
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(ts: u32, marker: bool) -> RtpHeader {
        RtpHeader {
            marker,
            payload_type: 96,
            sequence: 0,
            timestamp: ts,
            ssrc: 0,
        }
    }

    #[test]
    fn only_first_packet_of_keyframe_access_unit_counts() {
        let mut t = AccessUnitTracker::default();
        let sps = [0x67, 0x42, 0, 0x1e];
        let pps = [0x68, 0xce];
        let idr = [0x65, 0x88];
        let p = [0x41, 0x9a];
        assert!(t.observe(Codec::H264, &h(0, false), &sps));
        assert!(!t.observe(Codec::H264, &h(0, false), &pps));
        assert!(!t.observe(Codec::H264, &h(0, true), &idr));
        assert!(!t.observe(Codec::H264, &h(3000, true), &p));
        // IDR without in-band parameter sets (they are in the SDP) still starts a GOP.
        assert!(t.observe(Codec::H264, &h(6000, true), &idr));
        assert!(!t.observe(Codec::Aac, &h(6000, true), &idr));
    }

    #[test]
    fn delimiter_and_sei_before_the_keyframe_are_skipped_over() {
        // GStreamer rtspclientsink: AUD, SPS, PPS, SEI, IDR (FU-A) in one access unit.
        let mut t = AccessUnitTracker::default();
        let aud = [0x09, 0xf0];
        let sei = [0x06, 0x05];
        let sps = [0x67, 0x42, 0, 0x1e];
        let pps = [0x68, 0xce];
        let idr_fu = [0x7c, 0x85, 0x88];
        let p = [0x41, 0x9a];
        assert!(!t.observe(Codec::H264, &h(0, false), &aud));
        assert!(t.observe(Codec::H264, &h(0, false), &sps));
        assert!(!t.observe(Codec::H264, &h(0, false), &pps));
        assert!(!t.observe(Codec::H264, &h(0, true), &idr_fu));
        assert!(!t.observe(Codec::H264, &h(3000, false), &aud));
        assert!(!t.observe(Codec::H264, &h(3000, true), &p));
        // Without in-band parameter sets: AUD, SEI, then the IDR's first fragment.
        assert!(!t.observe(Codec::H264, &h(6000, false), &aud));
        assert!(!t.observe(Codec::H264, &h(6000, false), &sei));
        assert!(t.observe(Codec::H264, &h(6000, true), &idr_fu));
    }
}
