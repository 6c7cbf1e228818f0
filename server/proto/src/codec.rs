//! Just enough codec knowledge to forward video well: where a viewer can start decoding
//! (so a late joiner gets a keyframe first instead of seconds of grey), how to split an
//! Annex B file into NAL units, and how to packetise NAL units into RTP payloads.
//!
//! The payloaders are small and hand-written on purpose: the `rtp` crate (webrtc-rs) has
//! them but pulls in I/O and async dependencies this sans-IO crate must not have.

/// The codecs the server treats specially; everything else is forwarded opaquely.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    H264,
    H265,
    Aac,
    Pcma,
    Pcmu,
    Other,
}

impl Codec {
    /// Maps an SDP `a=rtpmap` encoding name; publishers differ in case ("mpeg4-generic" from
    /// GStreamer, "MPEG4-GENERIC" from ffmpeg), so the match is case-insensitive.
    pub fn from_encoding_name(name: &str) -> Codec {
        let name = name.trim();
        if name.eq_ignore_ascii_case("H264") {
            Codec::H264
        } else if name.eq_ignore_ascii_case("H265") || name.eq_ignore_ascii_case("HEVC") {
            Codec::H265
        } else if name.eq_ignore_ascii_case("MPEG4-GENERIC") {
            Codec::Aac
        } else if name.eq_ignore_ascii_case("PCMA") {
            Codec::Pcma
        } else if name.eq_ignore_ascii_case("PCMU") {
            Codec::Pcmu
        } else {
            Codec::Other
        }
    }

    pub fn is_video(self) -> bool {
        matches!(self, Codec::H264 | Codec::H265)
    }

    /// Stable name for logs, metrics labels and the API.
    pub fn name(self) -> &'static str {
        match self {
            Codec::H264 => "H264",
            Codec::H265 => "H265",
            Codec::Aac => "AAC",
            Codec::Pcma => "PCMA",
            Codec::Pcmu => "PCMU",
            Codec::Other => "other",
        }
    }
}

/// H.264 NAL type of a NAL unit (header byte & 0x1f); None if empty.
pub fn h264_nal_type(nal: &[u8]) -> Option<u8> {
    nal.first().map(|b| b & 0x1f)
}

/// H.265 NAL type of a NAL unit (bits 1..7 of the 2-byte header); None if the header is
/// incomplete.
pub fn h265_nal_type(nal: &[u8]) -> Option<u8> {
    if nal.len() < 2 {
        return None;
    }
    Some((nal[0] >> 1) & 0x3f)
}

/// SPS and IDR: a decoder can start from either (SPS is what encoders put in front of IDRs).
fn h264_random_access(t: u8) -> bool {
    t == 5 || t == 7
}

/// VPS/SPS and the IRAP range (BLA, IDR, CRA).
fn h265_random_access(t: u8) -> bool {
    t == 32 || t == 33 || (16..=21).contains(&t)
}

/// Walks the units of an aggregation packet (16-bit size + NAL). Returns `None` when a size
/// runs past the payload or is zero, so a malformed packet is never mistaken for a keyframe.
fn aggregated_any(mut units: &[u8], min_nal: usize, pred: impl Fn(&[u8]) -> bool) -> Option<bool> {
    let mut found = false;
    if units.is_empty() {
        return None;
    }
    while !units.is_empty() {
        let size = usize::from(u16::from_be_bytes([*units.first()?, *units.get(1)?]));
        if size < min_nal {
            return None;
        }
        let nal = units.get(2..2 + size)?;
        found |= pred(nal);
        units = &units[2 + size..];
    }
    Some(found)
}

/// True when this RTP payload begins a random-access point: for H.264 a single NAL /
/// STAP-A containing SPS (7) or IDR (5), or FU-A start fragment of IDR (or SPS); for H.265
/// VPS/SPS (32/33) or IRAP (16..=21) as single NAL, inside an AP (48), or FU (49) start
/// fragment. False for audio and malformed payloads.
///
/// Aggregation packets are assumed to carry no DONL fields (sprop-max-don-diff = 0), which
/// is what every camera and encoder we forward from does.
pub fn starts_keyframe(codec: Codec, payload: &[u8]) -> bool {
    match codec {
        Codec::H264 => {
            let Some(t) = h264_nal_type(payload) else {
                return false;
            };
            match t {
                1..=23 => h264_random_access(t),
                24 => aggregated_any(&payload[1..], 1, |nal| {
                    h264_nal_type(nal).is_some_and(h264_random_access)
                })
                .unwrap_or(false),
                28 => payload
                    .get(1)
                    .is_some_and(|fu| fu & 0x80 != 0 && h264_random_access(fu & 0x1f)),
                _ => false,
            }
        }
        Codec::H265 => {
            let Some(t) = h265_nal_type(payload) else {
                return false;
            };
            match t {
                0..=47 => h265_random_access(t),
                48 => aggregated_any(&payload[2..], 2, |nal| {
                    h265_nal_type(nal).is_some_and(h265_random_access)
                })
                .unwrap_or(false),
                49 => payload
                    .get(2)
                    .is_some_and(|fu| fu & 0x80 != 0 && h265_random_access(fu & 0x3f)),
                _ => false,
            }
        }
        Codec::Aac | Codec::Pcma | Codec::Pcmu | Codec::Other => false,
    }
}

/// Split an H.264/H.265 Annex B byte stream into NAL units (without start codes). Used to
/// load the bundled demo clip.
///
/// Both 3- and 4-byte start codes are accepted; trailing zero bytes before a start code are
/// `trailing_zero_8bits` and are dropped. Bytes before the first start code are not a NAL
/// unit and are skipped, as are empty units.
pub fn annexb_nals(data: &[u8]) -> Vec<&[u8]> {
    let mut starts = Vec::new(); // index just after each start code
    let mut i = 0;
    while i + 3 <= data.len() {
        if data[i] == 0 && data[i + 1] == 0 && data[i + 2] == 1 {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    let mut nals = Vec::with_capacity(starts.len());
    for (n, &start) in starts.iter().enumerate() {
        let mut end = starts.get(n + 1).map_or(data.len(), |&next| next - 3);
        while end > start && data[end - 1] == 0 {
            end -= 1;
        }
        if end > start {
            nals.push(&data[start..end]);
        }
    }
    nals
}

/// Fragments `nal` after its `header_len`-byte header into pieces of at most `mtu` bytes,
/// each prefixed by `prefix` and a FU header made from `fu_type` with the S/E bits.
fn fragment(nal: &[u8], header_len: usize, mtu: usize, prefix: &[u8], fu_type: u8) -> Vec<Vec<u8>> {
    let overhead = prefix.len() + 1;
    // An MTU too small for even one payload byte cannot be honoured; one byte per packet
    // still produces a valid (if silly) stream instead of looping forever.
    let chunk = mtu.saturating_sub(overhead).max(1);
    let body = &nal[header_len..];
    let count = body.len().div_ceil(chunk);
    body.chunks(chunk)
        .enumerate()
        .map(|(i, piece)| {
            let mut fu_header = fu_type;
            if i == 0 {
                fu_header |= 0x80;
            }
            if i + 1 == count {
                fu_header |= 0x40;
            }
            let mut p = Vec::with_capacity(overhead + piece.len());
            p.extend_from_slice(prefix);
            p.push(fu_header);
            p.extend_from_slice(piece);
            p
        })
        .collect()
}

/// Packetise one H.264 NAL into RTP payloads per RFC 6184 (single NAL unit if it fits
/// `mtu`, else FU-A fragments). `mtu` is the RTP payload budget, not the IP MTU.
pub fn h264_payloads(nal: &[u8], mtu: usize) -> Vec<Vec<u8>> {
    match nal.first() {
        None => Vec::new(),
        Some(_) if nal.len() <= mtu || nal.len() < 2 => vec![nal.to_vec()],
        Some(&h) => {
            // FU indicator keeps F and NRI so the network sees the NAL's importance.
            fragment(nal, 1, mtu, &[(h & 0xe0) | 28], h & 0x1f)
        }
    }
}

/// The same for H.265 (RFC 7798 FU, type 49), 2-byte NAL header.
pub fn h265_payloads(nal: &[u8], mtu: usize) -> Vec<Vec<u8>> {
    if nal.is_empty() {
        return Vec::new();
    }
    if nal.len() <= mtu || nal.len() < 3 {
        return vec![nal.to_vec()];
    }
    // Payload header: F and LayerId of the NAL, type 49, TID unchanged.
    let prefix = [(nal[0] & 0x81) | (49 << 1), nal[1]];
    fragment(nal, 2, mtu, &prefix, (nal[0] >> 1) & 0x3f)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPS: &[u8] = &[0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40, 0x50];
    const PPS: &[u8] = &[0x68, 0xeb, 0xe3, 0xcb, 0x22, 0xc0];

    /// Reassembles FU-A / FU payloads the way a receiver would (RFC 6184 §5.8, RFC 7798 §4.4.3).
    fn reassemble(payloads: &[Vec<u8>], h265: bool) -> Vec<u8> {
        let hl = if h265 { 2 } else { 1 };
        let first = &payloads[0];
        if payloads.len() == 1 && first[0] & 0x1f != 28 && (first[0] >> 1) & 0x3f != 49 {
            return first.clone();
        }
        let mut out = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            let fu = p[hl];
            assert_eq!(fu & 0x80 != 0, i == 0, "start bit");
            assert_eq!(fu & 0x40 != 0, i + 1 == payloads.len(), "end bit");
            if i == 0 {
                if h265 {
                    out.push((p[0] & 0x81) | ((fu & 0x3f) << 1));
                    out.push(p[1]);
                } else {
                    out.push((p[0] & 0xe0) | (fu & 0x1f));
                }
            }
            out.extend_from_slice(&p[hl + 1..]);
        }
        out
    }

    #[test]
    fn codec_names() {
        assert_eq!(Codec::from_encoding_name("h264"), Codec::H264);
        assert_eq!(Codec::from_encoding_name("HEVC"), Codec::H265);
        assert_eq!(Codec::from_encoding_name("H265"), Codec::H265);
        assert_eq!(Codec::from_encoding_name("mpeg4-generic"), Codec::Aac);
        assert_eq!(Codec::from_encoding_name("PCMA"), Codec::Pcma);
        assert_eq!(Codec::from_encoding_name("pcmu"), Codec::Pcmu);
        assert_eq!(Codec::from_encoding_name("opus"), Codec::Other);
        assert!(Codec::H265.is_video() && !Codec::Aac.is_video());
        assert_eq!(Codec::Aac.name(), "AAC");
        assert_eq!(Codec::Other.name(), "other");
    }

    #[test]
    fn h264_keyframes() {
        assert!(starts_keyframe(Codec::H264, SPS));
        assert!(starts_keyframe(Codec::H264, &[0x65, 0x88, 0x84]));
        assert!(!starts_keyframe(Codec::H264, &[0x41, 0x9a]));
        assert!(!starts_keyframe(Codec::H264, PPS));
        // STAP-A: SPS + PPS.
        let mut stap = vec![0x78];
        for nal in [SPS, PPS] {
            stap.extend_from_slice(&(nal.len() as u16).to_be_bytes());
            stap.extend_from_slice(nal);
        }
        assert!(starts_keyframe(Codec::H264, &stap));
        // STAP-A with only non-IDR slices.
        assert!(!starts_keyframe(Codec::H264, &[0x78, 0, 2, 0x41, 0x9a]));
        // Malformed STAP-A: size runs past the end.
        assert!(!starts_keyframe(Codec::H264, &[0x78, 0, 9, 0x67, 0x64]));
        assert!(!starts_keyframe(Codec::H264, &[0x78, 0, 0]));
        assert!(!starts_keyframe(Codec::H264, &[0x78]));
        // FU-A start/middle of IDR, start of non-IDR.
        assert!(starts_keyframe(Codec::H264, &[0x7c, 0x85, 0xb8]));
        assert!(!starts_keyframe(Codec::H264, &[0x7c, 0x05, 0xb8]));
        assert!(!starts_keyframe(Codec::H264, &[0x7c, 0x81, 0x9a]));
        assert!(!starts_keyframe(Codec::H264, &[0x7c]));
        assert!(!starts_keyframe(Codec::H264, &[]));
        assert!(!starts_keyframe(Codec::Aac, &[0x65, 0x88]));
        assert!(!starts_keyframe(Codec::Pcma, SPS));
    }

    #[test]
    fn h265_keyframes() {
        let vps = [0x40, 0x01, 0x0c, 0x01];
        let sps = [0x42, 0x01, 0x01, 0x01];
        let pps = [0x44, 0x01, 0xc1];
        let idr_w_radl = [0x26, 0x01, 0xaf];
        let cra = [0x2a, 0x01, 0xaf];
        let trail = [0x02, 0x01, 0xd0];
        assert!(starts_keyframe(Codec::H265, &vps));
        assert!(starts_keyframe(Codec::H265, &sps));
        assert!(starts_keyframe(Codec::H265, &idr_w_radl));
        assert!(starts_keyframe(Codec::H265, &cra));
        assert!(!starts_keyframe(Codec::H265, &pps));
        assert!(!starts_keyframe(Codec::H265, &trail));
        assert!(!starts_keyframe(Codec::H265, &[0x26]));
        // AP (type 48) with VPS + PPS.
        let mut ap = vec![0x60, 0x01];
        for nal in [&vps[..], &pps[..]] {
            ap.extend_from_slice(&(nal.len() as u16).to_be_bytes());
            ap.extend_from_slice(nal);
        }
        assert!(starts_keyframe(Codec::H265, &ap));
        assert!(!starts_keyframe(
            Codec::H265,
            &[0x60, 0x01, 0, 3, 0x02, 0x01, 0xd0]
        ));
        assert!(!starts_keyframe(
            Codec::H265,
            &[0x60, 0x01, 0, 8, 0x40, 0x01]
        ));
        // FU (type 49) start of IDR_W_RADL (19), middle of it, start of TRAIL_R.
        assert!(starts_keyframe(Codec::H265, &[0x62, 0x01, 0x93, 0xaf]));
        assert!(!starts_keyframe(Codec::H265, &[0x62, 0x01, 0x13, 0xaf]));
        assert!(!starts_keyframe(Codec::H265, &[0x62, 0x01, 0x81, 0xaf]));
        assert!(!starts_keyframe(Codec::H265, &[0x62, 0x01]));
    }

    #[test]
    fn annexb_split() {
        let mut data = vec![0, 0, 0, 1];
        data.extend_from_slice(SPS);
        data.extend_from_slice(&[0, 0, 1]);
        data.extend_from_slice(PPS);
        data.extend_from_slice(&[0, 0, 0, 0, 1, 0x65, 0x88, 0x00, 0x00, 0x03, 0x01, 0, 0, 1]);
        let nals = annexb_nals(&data);
        assert_eq!(
            nals,
            vec![SPS, PPS, &[0x65, 0x88, 0x00, 0x00, 0x03, 0x01][..]]
        );
        assert_eq!(h264_nal_type(nals[0]), Some(7));
        assert_eq!(h264_nal_type(&[]), None);
        assert!(annexb_nals(&[0xde, 0xad]).is_empty());
        assert!(annexb_nals(&[]).is_empty());
        assert_eq!(annexb_nals(&[9, 0, 0, 1, 0x41]), vec![&[0x41][..]]);
    }

    #[test]
    fn h264_single_nal_fits() {
        assert_eq!(h264_payloads(SPS, 1400), vec![SPS.to_vec()]);
        assert!(h264_payloads(&[], 1400).is_empty());
    }

    #[test]
    fn h264_fu_a_round_trip() {
        let nal: Vec<u8> = std::iter::once(0x65)
            .chain((0..5000u32).map(|i| (i * 7) as u8))
            .collect();
        for mtu in [3, 100, 1200, 4999, 5000] {
            let payloads = h264_payloads(&nal, mtu);
            assert!(payloads.len() > 1);
            assert!(payloads.iter().all(|p| p.len() <= mtu));
            assert_eq!(payloads[0][0], 0x7c);
            assert!(starts_keyframe(Codec::H264, &payloads[0]));
            assert!(!starts_keyframe(Codec::H264, &payloads[1]));
            assert_eq!(reassemble(&payloads, false), nal);
        }
        assert_eq!(h264_payloads(&nal, 5001).len(), 1);
    }

    #[test]
    fn h265_fu_round_trip() {
        let nal: Vec<u8> = [0x26, 0x01]
            .into_iter()
            .chain((0..3000u32).map(|i| (i * 13) as u8))
            .collect();
        for mtu in [4, 1000, 1400] {
            let payloads = h265_payloads(&nal, mtu);
            assert!(payloads.len() > 1);
            assert!(payloads.iter().all(|p| p.len() <= mtu));
            assert_eq!(&payloads[0][..3], &[0x62, 0x01, 0x93]);
            assert!(starts_keyframe(Codec::H265, &payloads[0]));
            assert_eq!(reassemble(&payloads, true), nal);
        }
        assert_eq!(h265_payloads(&nal, 3002), vec![nal.clone()]);
        assert!(h265_payloads(&[], 10).is_empty());
    }
}
