//! Sample entries (`avc1`, `hvc1`, `mp4a`) and the codec configuration records they carry,
//! built from the stream's parameter sets (in-band in the first keyframe, or the SDP's
//! `sprop-*`) and the AAC AudioSpecificConfig (the SDP's `config=`).

use super::boxes::BoxWriter;
use h264_reader::nal::sps::SeqParameterSet;
use h264_reader::rbsp::{BitRead, BitReader, ByteReader};
use std::num::NonZeroUsize;

/// Why a track cannot be described.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("no {0} parameter set in the recording (neither in-band nor in the SDP)")]
    MissingParameterSet(&'static str),
    #[error("unreadable {codec} SPS: {why}")]
    Sps { codec: &'static str, why: String },
    #[error("no AAC config (SDP fmtp config=) in the recording")]
    MissingAacConfig,
}

/// What a track's `stsd` holds.
#[derive(Clone, Debug, PartialEq)]
pub enum SampleEntry {
    Avc {
        sps: Vec<u8>,
        pps: Vec<Vec<u8>>,
        width: u16,
        height: u16,
    },
    Hevc {
        vps: Vec<u8>,
        sps: Vec<u8>,
        pps: Vec<Vec<u8>>,
        width: u16,
        height: u16,
        hevc: HevcSps,
    },
    Aac {
        /// AudioSpecificConfig (ISO/IEC 14496-3 §1.6.2.1).
        config: Vec<u8>,
        channels: u16,
        sample_rate: u32,
    },
}

/// The H.265 SPS fields `hvcC` repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct HevcSps {
    /// general_profile_space … general_level_idc: the 12 bytes of the general
    /// profile_tier_level, as `hvcC` lays them out.
    pub ptl: [u8; 12],
    pub max_sub_layers: u8,
    pub temporal_id_nested: bool,
    pub chroma_format_idc: u8,
    pub bit_depth_luma_minus8: u8,
    pub bit_depth_chroma_minus8: u8,
    pub width: u32,
    pub height: u32,
}

fn sps_err(codec: &'static str) -> impl Fn(String) -> ConfigError {
    move |why| ConfigError::Sps { codec, why }
}

fn dim(v: u32, codec: &'static str) -> Result<u16, ConfigError> {
    u16::try_from(v).map_err(|_| ConfigError::Sps {
        codec,
        why: format!("dimension {v} does not fit a sample entry"),
    })
}

impl SampleEntry {
    /// H.264 from its SPS and PPSs (NAL units without start codes or length prefixes).
    pub fn avc(sps: &[u8], pps: Vec<Vec<u8>>) -> Result<SampleEntry, ConfigError> {
        if sps.len() < 4 {
            return Err(ConfigError::MissingParameterSet("H.264 SPS"));
        }
        if pps.is_empty() {
            return Err(ConfigError::MissingParameterSet("H.264 PPS"));
        }
        let parsed =
            SeqParameterSet::from_bits(BitReader::new(ByteReader::skipping_h264_header(sps)))
                .map_err(|e| sps_err("H.264")(format!("{e:?}")))?;
        let (w, h) = parsed
            .pixel_dimensions()
            .map_err(|e| sps_err("H.264")(format!("{e:?}")))?;
        Ok(SampleEntry::Avc {
            sps: sps.to_vec(),
            pps,
            width: dim(w, "H.264")?,
            height: dim(h, "H.264")?,
        })
    }

    /// H.265 from its VPS, SPS and PPSs.
    pub fn hevc(vps: &[u8], sps: &[u8], pps: Vec<Vec<u8>>) -> Result<SampleEntry, ConfigError> {
        if vps.is_empty() {
            return Err(ConfigError::MissingParameterSet("H.265 VPS"));
        }
        if pps.is_empty() {
            return Err(ConfigError::MissingParameterSet("H.265 PPS"));
        }
        let hevc = parse_hevc_sps(sps)?;
        Ok(SampleEntry::Hevc {
            vps: vps.to_vec(),
            sps: sps.to_vec(),
            pps,
            width: dim(hevc.width, "H.265")?,
            height: dim(hevc.height, "H.265")?,
            hevc,
        })
    }

    pub fn aac(config: &[u8], channels: u16, sample_rate: u32) -> Result<SampleEntry, ConfigError> {
        if config.len() < 2 {
            return Err(ConfigError::MissingAacConfig);
        }
        Ok(SampleEntry::Aac {
            config: config.to_vec(),
            channels: channels.max(1),
            sample_rate,
        })
    }

    pub fn is_video(&self) -> bool {
        !matches!(self, SampleEntry::Aac { .. })
    }

    /// Width and height of a video track (0 × 0 for audio).
    pub fn dimensions(&self) -> (u16, u16) {
        match self {
            SampleEntry::Avc { width, height, .. } | SampleEntry::Hevc { width, height, .. } => {
                (*width, *height)
            }
            SampleEntry::Aac { .. } => (0, 0),
        }
    }

    /// The RFC 6381 `codecs` value (HLS playlists, MSE).
    pub fn codecs_string(&self) -> String {
        match self {
            SampleEntry::Avc { sps, .. } => {
                format!("avc1.{:02x}{:02x}{:02x}", sps[1], sps[2], sps[3])
            }
            SampleEntry::Hevc { hevc, .. } => {
                let space = ["", "A", "B", "C"][usize::from(hevc.ptl[0] >> 6)];
                let tier = if hevc.ptl[0] & 0x20 != 0 { 'H' } else { 'L' };
                let compat =
                    u32::from_be_bytes([hevc.ptl[1], hevc.ptl[2], hevc.ptl[3], hevc.ptl[4]])
                        .reverse_bits();
                let mut s = format!(
                    "hvc1.{space}{}.{compat:X}.{tier}{}",
                    hevc.ptl[0] & 0x1f,
                    hevc.ptl[11]
                );
                // Constraint bytes up to the last non-zero one.
                let cons = &hevc.ptl[5..11];
                let n = cons.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                for b in &cons[..n] {
                    s.push_str(&format!(".{b:X}"));
                }
                s
            }
            SampleEntry::Aac { config, .. } => format!("mp4a.40.{}", config[0] >> 3),
        }
    }

    /// Writes the sample entry box (`avc1`, `hvc1` or `mp4a`) into an `stsd`.
    pub(crate) fn write(&self, w: &mut BoxWriter) {
        match self {
            SampleEntry::Avc {
                sps,
                pps,
                width,
                height,
            } => {
                let at = w.begin(b"avc1");
                visual_entry(w, *width, *height);
                let c = w.begin(b"avcC");
                w.u8(1);
                w.bytes(&sps[1..4]);
                w.u8(0xfc | 3); // 4-byte NAL lengths, as stored
                w.u8(0xe0 | 1);
                w.u16(sps.len() as u16);
                w.bytes(sps);
                w.u8(pps.len().min(255) as u8);
                for p in pps.iter().take(255) {
                    w.u16(p.len() as u16);
                    w.bytes(p);
                }
                w.end(c);
                w.end(at);
            }
            SampleEntry::Hevc {
                vps,
                sps,
                pps,
                width,
                height,
                hevc,
            } => {
                let at = w.begin(b"hvc1");
                visual_entry(w, *width, *height);
                let c = w.begin(b"hvcC");
                w.u8(1);
                w.bytes(&hevc.ptl);
                w.u16(0xf000); // min_spatial_segmentation_idc 0
                w.u8(0xfc); // parallelismType 0
                w.u8(0xfc | (hevc.chroma_format_idc & 3));
                w.u8(0xf8 | (hevc.bit_depth_luma_minus8 & 7));
                w.u8(0xf8 | (hevc.bit_depth_chroma_minus8 & 7));
                w.u16(0); // avgFrameRate unknown
                w.u8(((hevc.max_sub_layers & 7) << 3)
                    | (u8::from(hevc.temporal_id_nested) << 2)
                    | 3);
                w.u8(3);
                for (nal_type, units) in [
                    (32u8, vec![vps]),
                    (33, vec![sps]),
                    (34, pps.iter().collect()),
                ] {
                    w.u8(0x80 | nal_type);
                    w.u16(units.len() as u16);
                    for u in units {
                        w.u16(u.len() as u16);
                        w.bytes(u);
                    }
                }
                w.end(c);
                w.end(at);
            }
            SampleEntry::Aac {
                config,
                channels,
                sample_rate,
            } => {
                let at = w.begin(b"mp4a");
                w.zeros(6);
                w.u16(1); // data_reference_index
                w.zeros(8);
                w.u16(*channels);
                w.u16(16);
                w.zeros(4);
                w.u32(sample_rate.min(&0xffff) << 16);
                esds(w, config);
                w.end(at);
            }
        }
    }
}

fn visual_entry(w: &mut BoxWriter, width: u16, height: u16) {
    w.zeros(6);
    w.u16(1); // data_reference_index
    w.zeros(16);
    w.u16(width);
    w.u16(height);
    w.u32(0x0048_0000); // 72 dpi
    w.u32(0x0048_0000);
    w.u32(0);
    w.u16(1); // frame_count
    w.zeros(32); // compressorname
    w.u16(0x0018);
    w.u16(0xffff);
}

/// `esds`: ES_Descriptor → DecoderConfigDescriptor (AAC, audio stream) →
/// DecoderSpecificInfo (the AudioSpecificConfig), SLConfigDescriptor.
fn esds(w: &mut BoxWriter, config: &[u8]) {
    let at = w.begin_full(b"esds", 0, 0);
    let config = &config[..config.len().min(100)];
    let dsi = 2 + config.len();
    let dcd = 2 + 13 + dsi;
    let es = 2 + 3 + dcd + 3;
    w.u8(0x03);
    w.u8(es as u8 - 2);
    w.u16(0); // ES_ID
    w.u8(0);
    w.u8(0x04);
    w.u8(dcd as u8 - 2);
    w.u8(0x40); // MPEG-4 audio
    w.u8(0x15); // audio stream
    w.u24(0);
    w.u32(0);
    w.u32(0);
    w.u8(0x05);
    w.u8(config.len() as u8);
    w.bytes(config);
    w.u8(0x06);
    w.u8(1);
    w.u8(2);
    w.end(at);
}

/// The H.265 SPS fields the sample entry needs (ITU-T H.265 §7.3.2.2.1).
pub fn parse_hevc_sps(sps: &[u8]) -> Result<HevcSps, ConfigError> {
    let e = sps_err("H.265");
    let bits = |e2: h264_reader::rbsp::BitReaderError| e(format!("{e2:?}"));
    if sps.len() < 15 {
        return Err(ConfigError::MissingParameterSet("H.265 SPS"));
    }
    let skip = NonZeroUsize::new(2).ok_or_else(|| e("header".into()))?;
    let mut r = BitReader::new(ByteReader::skipping_bytes(sps, skip));
    let _vps_id: u8 = r.read(4, "vps_id").map_err(bits)?;
    let max_sub_layers_minus1: u8 = r.read(3, "max_sub_layers_minus1").map_err(bits)?;
    let temporal_id_nested = r.read_bool("temporal_id_nesting").map_err(bits)?;
    let mut out = HevcSps {
        max_sub_layers: max_sub_layers_minus1 + 1,
        temporal_id_nested,
        ..HevcSps::default()
    };
    for b in out.ptl.iter_mut() {
        *b = r.read(8, "general_ptl").map_err(bits)?;
    }
    let mut present = [(false, false); 8];
    for p in present.iter_mut().take(usize::from(max_sub_layers_minus1)) {
        *p = (
            r.read_bool("sub_layer_profile_present").map_err(bits)?,
            r.read_bool("sub_layer_level_present").map_err(bits)?,
        );
    }
    if max_sub_layers_minus1 > 0 {
        for _ in max_sub_layers_minus1..8 {
            r.skip(2, "reserved_zero_2bits").map_err(bits)?;
        }
    }
    for &(profile, level) in present.iter().take(usize::from(max_sub_layers_minus1)) {
        if profile {
            r.skip(88, "sub_layer_profile").map_err(bits)?;
        }
        if level {
            r.skip(8, "sub_layer_level").map_err(bits)?;
        }
    }
    let _sps_id = r.read_ue("sps_id").map_err(bits)?;
    let chroma = r.read_ue("chroma_format_idc").map_err(bits)?;
    let separate = chroma == 3 && r.read_bool("separate_colour_plane").map_err(bits)?;
    let w = r.read_ue("pic_width").map_err(bits)?;
    let h = r.read_ue("pic_height").map_err(bits)?;
    let (sub_w, sub_h) = match (chroma, separate) {
        (1, false) => (2, 2),
        (2, false) => (2, 1),
        _ => (1, 1),
    };
    let (mut cw, mut ch) = (0u32, 0u32);
    if r.read_bool("conformance_window").map_err(bits)? {
        let l = r.read_ue("conf_left").map_err(bits)?;
        let rt = r.read_ue("conf_right").map_err(bits)?;
        let t = r.read_ue("conf_top").map_err(bits)?;
        let b = r.read_ue("conf_bottom").map_err(bits)?;
        cw = sub_w * l.saturating_add(rt);
        ch = sub_h * t.saturating_add(b);
    }
    let luma = r.read_ue("bit_depth_luma").map_err(bits)?;
    let chroma_depth = r.read_ue("bit_depth_chroma").map_err(bits)?;
    out.chroma_format_idc = chroma.min(3) as u8;
    out.bit_depth_luma_minus8 = luma.min(7) as u8;
    out.bit_depth_chroma_minus8 = chroma_depth.min(7) as u8;
    out.width = w.saturating_sub(cw);
    out.height = h.saturating_sub(ch);
    Ok(out)
}

/// The first VPS, SPS and the PPSs of an access unit of 4-byte-length-prefixed NAL units
/// (how vigil stores H.264/H.265 frames).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParameterSets {
    pub vps: Option<Vec<u8>>,
    pub sps: Option<Vec<u8>>,
    pub pps: Vec<Vec<u8>>,
}

impl ParameterSets {
    pub fn from_access_unit(h265: bool, mut au: &[u8]) -> ParameterSets {
        let mut out = ParameterSets::default();
        while au.len() >= 4 {
            let len = u32::from_be_bytes([au[0], au[1], au[2], au[3]]) as usize;
            let Some(nal) = au.get(4..4 + len) else {
                break;
            };
            au = &au[4 + len..];
            let Some(&b0) = nal.first() else { continue };
            let (vps, sps, pps) = if h265 { (32, 33, 34) } else { (255, 7, 8) };
            let t = if h265 { (b0 >> 1) & 0x3f } else { b0 & 0x1f };
            if t == vps && out.vps.is_none() {
                out.vps = Some(nal.to_vec());
            } else if t == sps && out.sps.is_none() {
                out.sps = Some(nal.to_vec());
            } else if t == pps && !out.pps.iter().any(|p| p == nal) {
                out.pps.push(nal.to_vec());
            }
        }
        out
    }

    /// Fills what the access unit lacked from the SDP's `sprop-*` parameters (base64).
    pub fn or_fmtp(mut self, h265: bool, fmtp: &str) -> ParameterSets {
        use base64::engine::general_purpose::STANDARD;
        use base64::Engine;
        let param = |key: &str| -> Vec<Vec<u8>> {
            fmtp.split(';')
                .filter_map(|p| p.trim().split_once('='))
                .filter(|(k, _)| k.trim().eq_ignore_ascii_case(key))
                .flat_map(|(_, v)| v.split(','))
                .filter_map(|b| STANDARD.decode(b.trim()).ok())
                .filter(|b| !b.is_empty())
                .collect()
        };
        if h265 {
            if self.vps.is_none() {
                self.vps = param("sprop-vps").into_iter().next();
            }
            if self.sps.is_none() {
                self.sps = param("sprop-sps").into_iter().next();
            }
            if self.pps.is_empty() {
                self.pps = param("sprop-pps");
            }
        } else if self.sps.is_none() || self.pps.is_empty() {
            for ps in param("sprop-parameter-sets") {
                match ps[0] & 0x1f {
                    7 if self.sps.is_none() => self.sps = Some(ps),
                    8 => self.pps.push(ps),
                    _ => {}
                }
            }
        }
        self
    }
}

/// The AudioSpecificConfig of an AAC fmtp (`config=<hex>`, RFC 3640).
pub fn aac_config_from_fmtp(fmtp: &str) -> Option<Vec<u8>> {
    let hex = fmtp
        .split(';')
        .filter_map(|p| p.trim().split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("config"))?
        .1
        .trim();
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}
