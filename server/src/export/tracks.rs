//! The exported file's tracks, from the first segment read: H.264/H.265 video with the
//! parameter sets of its first keyframe (or the SDP's `sprop-*`), AAC with the SDP's
//! AudioSpecificConfig. Other tracks (G.711, unknown payloads) are left out: MP4 has no
//! sample entry ffmpeg and browsers agree on for them.

use super::plan::ExportError;
use vigil_proto::codec::Codec;
use vigil_proto::mp4::config::{aac_config_from_fmtp, ParameterSets};
use vigil_proto::mp4::{SampleEntry, TrackSpec};
use vigil_storage::Segment;

/// The file's tracks and where each stored track goes.
#[derive(Debug)]
pub struct Tracks {
    pub specs: Vec<TrackSpec>,
    /// Stored track index → index into `specs`.
    pub map: Vec<Option<usize>>,
    /// The stored codecs they were made for: a later segment with others ends the export.
    pub codecs: Vec<String>,
}

/// The codec of a stored track: segments name them by `Codec::name` ("AAC"), not by their
/// RTP encoding name ("MPEG4-GENERIC").
fn stored_codec(name: &str) -> Codec {
    if name.eq_ignore_ascii_case("AAC") {
        Codec::Aac
    } else {
        Codec::from_encoding_name(name)
    }
}

impl Tracks {
    /// `from`: the starting keyframe's index in `seg`.
    pub fn of(seg: &Segment, from: usize) -> Result<Tracks, ExportError> {
        let sdp = vigil_proto::sdp::parse(&seg.header.sdp).ok();
        let mut specs = Vec::new();
        let mut map = Vec::new();
        for (i, t) in seg.header.tracks.iter().enumerate() {
            let media = sdp.as_ref().and_then(|s| s.media.get(i));
            let fmtp = media.and_then(|m| m.fmtp.as_deref()).unwrap_or("");
            let entry = match stored_codec(&t.codec) {
                c @ (Codec::H264 | Codec::H265) => {
                    let h265 = c == Codec::H265;
                    let key = seg.frames[from..]
                        .iter()
                        .find(|f| usize::from(f.track) == i && f.keyframe);
                    let ps = key
                        .map(|f| ParameterSets::from_access_unit(h265, &f.data))
                        .unwrap_or_default()
                        .or_fmtp(h265, fmtp);
                    let unexportable = |e: vigil_proto::mp4::ConfigError| {
                        ExportError::Unexportable(format!("track {i} ({}): {e}", t.codec))
                    };
                    let sps = ps.sps.clone().unwrap_or_default();
                    let entry = if h265 {
                        SampleEntry::hevc(&ps.vps.clone().unwrap_or_default(), &sps, ps.pps)
                    } else {
                        SampleEntry::avc(&sps, ps.pps)
                    };
                    Some(entry.map_err(unexportable)?)
                }
                Codec::Aac => {
                    let config = aac_config_from_fmtp(fmtp).unwrap_or_default();
                    let channels = media.and_then(|m| m.channels).unwrap_or(1);
                    match SampleEntry::aac(&config, channels, t.clock_rate) {
                        Ok(e) => Some(e),
                        Err(e) => {
                            tracing::warn!("export without audio track {i}: {e}");
                            None
                        }
                    }
                }
                _ => None,
            };
            map.push(entry.map(|entry| {
                specs.push(TrackSpec {
                    id: specs.len() as u32 + 1,
                    timescale: t.clock_rate.max(1),
                    entry,
                });
                specs.len() - 1
            }));
        }
        if !specs.iter().any(|s| s.entry.is_video()) {
            return Err(ExportError::Unexportable(
                "the recording has no H.264 or H.265 video track".into(),
            ));
        }
        Ok(Tracks {
            specs,
            map,
            codecs: seg.header.tracks.iter().map(|t| t.codec.clone()).collect(),
        })
    }

    /// Whether `seg` was recorded with the same tracks.
    pub fn fits(&self, seg: &Segment) -> bool {
        seg.header.tracks.len() == self.codecs.len()
            && seg
                .header
                .tracks
                .iter()
                .zip(&self.codecs)
                .all(|(t, c)| &t.codec == c)
    }

    pub fn timescales(&self) -> Vec<u32> {
        self.specs.iter().map(|s| s.timescale).collect()
    }
}
