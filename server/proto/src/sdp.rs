//! SDP (RFC 4566/8866) as RTSP uses it: a tolerant parse of what publishers (ffmpeg,
//! GStreamer rtspclientsink, Hikvision/Dahua cameras) send in ANNOUNCE or answer to our
//! DESCRIBE, and a minimal, conservative render for our own DESCRIBE answers.
//!
//! The parser is a small hand-written line parser rather than `sdp-types`: that crate
//! implements the full grammar and rejects a whole description on the first strict-grammar
//! violation (a duplicate session-level `c=`, extra fields on `o=`, a stray CR from mixed line
//! endings), all of which real cameras send. We need only `s=`, `m=`, `b=AS` and four
//! attributes, and the right behaviour for everything else is to ignore it, which is simpler
//! to guarantee in a hundred lines of our own than around a strict parser (and avoids three
//! transitive dependencies).

use crate::codec::Codec;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::collections::HashMap;
use std::fmt::Write as _;

#[derive(Clone, Debug, PartialEq)]
pub struct MediaDescription {
    /// "video" | "audio" | other
    pub media: String,
    pub payload_type: u8,
    /// From `a=rtpmap`, or the RFC 3551 static payload type table; empty when a dynamic
    /// payload type has no rtpmap (the peer left us nothing to go on).
    pub encoding_name: String,
    /// 0 when unknown (dynamic payload type without rtpmap).
    pub clock_rate: u32,
    pub channels: Option<u16>,
    /// The text after "a=fmtp:<pt> ".
    pub fmtp: Option<String>,
    /// `a=control` value as sent (relative or absolute; resolving it is the RTSP layer's job).
    pub control: Option<String>,
    pub framerate: Option<f64>,
    /// `b=AS` of the media section.
    pub bandwidth_kbps: Option<u32>,
}

impl MediaDescription {
    pub fn codec(&self) -> Codec {
        Codec::from_encoding_name(&self.encoding_name)
    }
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct SessionDescription {
    pub session_name: Option<String>,
    pub media: Vec<MediaDescription>,
}

/// Why the peer's SDP could not be used.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum SdpError {
    #[error("SDP has no RTP media section")]
    NoMedia,
    #[error("malformed SDP media line {line:?}: {reason}")]
    MalformedMedia { line: String, reason: &'static str },
}

/// RFC 3551 §6 static payload types: (encoding name, clock rate, channels for audio).
fn static_payload_type(pt: u8) -> Option<(&'static str, u32, Option<u16>)> {
    let mono = Some(1);
    Some(match pt {
        0 => ("PCMU", 8000, mono),
        3 => ("GSM", 8000, mono),
        4 => ("G723", 8000, mono),
        5 => ("DVI4", 8000, mono),
        6 => ("DVI4", 16000, mono),
        7 => ("LPC", 8000, mono),
        8 => ("PCMA", 8000, mono),
        9 => ("G722", 8000, mono),
        10 => ("L16", 44100, Some(2)),
        11 => ("L16", 44100, mono),
        12 => ("QCELP", 8000, mono),
        13 => ("CN", 8000, mono),
        14 => ("MPA", 90000, None),
        15 => ("G728", 8000, mono),
        16 => ("DVI4", 11025, mono),
        17 => ("DVI4", 22050, mono),
        18 => ("G729", 8000, mono),
        25 => ("CelB", 90000, None),
        26 => ("JPEG", 90000, None),
        28 => ("nv", 90000, None),
        31 => ("H261", 90000, None),
        32 => ("MPV", 90000, None),
        33 => ("MP2T", 90000, None),
        34 => ("H263", 90000, None),
        _ => return None,
    })
}

/// An `a=rtpmap` entry: encoding name, clock rate, channels.
type RtpMap = (String, u32, Option<u16>);

/// One m= section while its attributes are being collected. Attributes are keyed by payload
/// type because rtpmap/fmtp may come before or after each other and may name other formats
/// of a multi-format m= line.
struct Section {
    media: String,
    payload_type: u8,
    rtpmap: HashMap<u8, RtpMap>,
    fmtp: HashMap<u8, String>,
    control: Option<String>,
    framerate: Option<f64>,
    bandwidth_kbps: Option<u32>,
}

impl Section {
    fn finish(mut self) -> MediaDescription {
        let pt = self.payload_type;
        let (encoding_name, clock_rate, channels) = match self.rtpmap.remove(&pt) {
            Some(m) => m,
            None => match static_payload_type(pt) {
                Some((n, r, c)) => (n.to_owned(), r, c),
                None => (String::new(), 0, None),
            },
        };
        MediaDescription {
            media: self.media,
            payload_type: pt,
            encoding_name,
            clock_rate,
            channels,
            fmtp: self.fmtp.remove(&pt),
            control: self.control,
            framerate: self.framerate,
            bandwidth_kbps: self.bandwidth_kbps,
        }
    }
}

/// Splits "<pt> <rest>" as used by rtpmap and fmtp.
fn pt_and_rest(value: &str) -> Option<(u8, &str)> {
    let value = value.trim_start();
    let split = value
        .find(|c: char| c.is_ascii_whitespace())
        .unwrap_or(value.len());
    let pt = value[..split].parse().ok()?;
    Some((pt, value[split..].trim()))
}

fn parse_rtpmap(value: &str) -> Option<(u8, RtpMap)> {
    let (pt, rest) = pt_and_rest(value)?;
    let mut parts = rest.split('/');
    let name = parts.next()?.trim();
    if name.is_empty() {
        return None;
    }
    let rate = parts.next()?.trim().parse().ok()?;
    let channels = parts.next().and_then(|c| c.trim().parse().ok());
    Some((pt, (name.to_owned(), rate, channels)))
}

fn parse_media_line(value: &str) -> Result<Option<Section>, SdpError> {
    let malformed = |reason| SdpError::MalformedMedia {
        line: format!("m={value}"),
        reason,
    };
    let mut fields = value.split_ascii_whitespace();
    let media = fields
        .next()
        .ok_or_else(|| malformed("missing media type"))?;
    let port = fields.next().ok_or_else(|| malformed("missing port"))?;
    let port_ok = port.split('/').all(|p| p.parse::<u16>().is_ok());
    if !port_ok {
        return Err(malformed("port is not a number"));
    }
    let proto = fields.next().ok_or_else(|| malformed("missing protocol"))?;
    let fmt = fields.next().ok_or_else(|| malformed("missing format"))?;
    if !proto.to_ascii_uppercase().contains("RTP") {
        // Not RTP (e.g. an SCTP data channel): nothing we could forward, so not an error.
        return Ok(None);
    }
    let payload_type: u8 = fmt
        .parse()
        .ok()
        .filter(|pt| *pt < 128)
        .ok_or_else(|| malformed("format is not an RTP payload type"))?;
    Ok(Some(Section {
        media: media.to_owned(),
        payload_type,
        rtpmap: HashMap::new(),
        fmtp: HashMap::new(),
        control: None,
        framerate: None,
        bandwidth_kbps: None,
    }))
}

/// Accepts \r\n or \n; ignores unknown lines; errors only when there is no usable media or
/// an m= line is malformed.
pub fn parse(text: &str) -> Result<SessionDescription, SdpError> {
    let mut session = SessionDescription::default();
    let mut current: Option<Section> = None;
    // A non-RTP m= section: its attributes must not leak into the previous section.
    let mut skipping = false;
    for line in text.lines() {
        let line = line.trim();
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        match key.trim() {
            "s" if current.is_none() && !skipping && session.session_name.is_none() => {
                let name = value.trim();
                if !name.is_empty() {
                    session.session_name = Some(name.to_owned());
                }
            }
            "m" => {
                if let Some(done) = current.take() {
                    session.media.push(done.finish());
                }
                current = parse_media_line(value)?;
                skipping = current.is_none();
            }
            "b" => {
                if let (Some(sec), Some((bt, bw))) = (current.as_mut(), value.split_once(':')) {
                    if bt.trim().eq_ignore_ascii_case("AS") {
                        sec.bandwidth_kbps = bw.trim().parse().ok();
                    }
                }
            }
            "a" => {
                let Some(sec) = current.as_mut() else {
                    continue;
                };
                let (name, val) = value.split_once(':').unwrap_or((value, ""));
                match name.trim().to_ascii_lowercase().as_str() {
                    "rtpmap" => {
                        if let Some((pt, m)) = parse_rtpmap(val) {
                            sec.rtpmap.entry(pt).or_insert(m);
                        }
                    }
                    "fmtp" => {
                        if let Some((pt, rest)) = pt_and_rest(val) {
                            sec.fmtp.entry(pt).or_insert_with(|| rest.to_owned());
                        }
                    }
                    "control" => {
                        let v = val.trim();
                        if !v.is_empty() && sec.control.is_none() {
                            sec.control = Some(v.to_owned());
                        }
                    }
                    "framerate" | "x-framerate" => {
                        sec.framerate = val
                            .trim()
                            .parse()
                            .ok()
                            .filter(|f: &f64| f.is_finite() && *f > 0.0);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    if let Some(done) = current.take() {
        session.media.push(done.finish());
    }
    if session.media.is_empty() {
        return Err(SdpError::NoMedia);
    }
    Ok(session)
}

/// Keeps a value on one line: a CR or LF in a field copied from a publisher's SDP would
/// otherwise let it inject lines into the SDP we hand to every viewer.
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(['\r', '\n']) {
        s.replace(['\r', '\n'], " ").into()
    } else {
        s.into()
    }
}

impl SessionDescription {
    /// SDP for a DESCRIBE answer: v=0, o=- <session_id> 1 IN IP4 <origin_ip>, s=<name>,
    /// c=IN IP4 0.0.0.0, t=0 0, a=tool:vigil, a=range:<range> (e.g. "npt=now-" for live,
    /// "npt=0-20.5" for recordings), a=control:*, then per media: m=<media> 0 RTP/AVP <pt>,
    /// b=AS if known, a=rtpmap, a=fmtp, a=control:trackID=<index>.
    ///
    /// Control URLs are always rewritten to `trackID=<index>` because the publisher's own
    /// (often absolute, camera-internal) URLs mean nothing to our viewers.
    pub fn render(&self, origin_ip: &str, session_id: u64, range: &str) -> String {
        self.render_with(origin_ip, session_id, range, None)
    }

    /// [`render`](Self::render) for SRTP (RFC 3711 over RFC 4567's key management): every
    /// media is `RTP/SAVP` with `a=key-mgmt:<key_mgmt[i]>` (a MIKEY message of
    /// `srtp::keymgmt::sdp_attribute`). Only for a description sent inside TLS: the keys
    /// are in clear text in it.
    pub fn render_srtp(
        &self,
        origin_ip: &str,
        session_id: u64,
        range: &str,
        key_mgmt: &[String],
    ) -> String {
        self.render_with(origin_ip, session_id, range, Some(key_mgmt))
    }

    fn render_with(
        &self,
        origin_ip: &str,
        session_id: u64,
        range: &str,
        key_mgmt: Option<&[String]>,
    ) -> String {
        let mut s = String::with_capacity(512);
        let name = self
            .session_name
            .as_deref()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or("vigil");
        // Writing to a String cannot fail.
        let _ = write!(
            s,
            "v=0\r\no=- {session_id} 1 IN IP4 {}\r\ns={}\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
             a=tool:vigil\r\na=range:{}\r\na=control:*\r\n",
            one_line(origin_ip),
            one_line(name),
            one_line(range)
        );
        for (i, m) in self.media.iter().enumerate() {
            let pt = m.payload_type;
            let profile = if key_mgmt.is_some() {
                "RTP/SAVP"
            } else {
                "RTP/AVP"
            };
            let _ = write!(s, "m={} 0 {profile} {pt}\r\n", one_line(&m.media));
            if let Some(bw) = m.bandwidth_kbps {
                let _ = write!(s, "b=AS:{bw}\r\n");
            }
            if let Some(k) = key_mgmt.and_then(|k| k.get(i)) {
                let _ = write!(s, "a=key-mgmt:{}\r\n", one_line(k));
            }
            if !m.encoding_name.is_empty() {
                let _ = write!(
                    s,
                    "a=rtpmap:{pt} {}/{}",
                    one_line(&m.encoding_name),
                    m.clock_rate
                );
                if let Some(ch) = m.channels.filter(|_| m.media != "video") {
                    let _ = write!(s, "/{ch}");
                }
                s.push_str("\r\n");
            }
            if let Some(fmtp) = &m.fmtp {
                let _ = write!(s, "a=fmtp:{pt} {}\r\n", one_line(fmtp));
            }
            if let Some(fr) = m.framerate {
                let _ = write!(s, "a=framerate:{fr}\r\n");
            }
            let _ = write!(s, "a=control:trackID={i}\r\n");
        }
        s
    }
}

/// fmtp for H.264 from SPS and PPS NALs: "packetization-mode=1;profile-level-id=<hex of
/// sps[1..4]>;sprop-parameter-sets=<b64 sps>,<b64 pps>". Used when the source gave us
/// parameter sets in-band only (the demo clip, some cameras), because many players will not
/// start without sprop-parameter-sets. profile-level-id is left out if the SPS is too short
/// to contain it.
pub fn h264_fmtp(sps: &[u8], pps: &[u8]) -> String {
    let mut s = String::from("packetization-mode=1");
    if let Some(pli) = sps.get(1..4) {
        let _ = write!(
            s,
            ";profile-level-id={:02X}{:02X}{:02X}",
            pli[0], pli[1], pli[2]
        );
    }
    let _ = write!(
        s,
        ";sprop-parameter-sets={},{}",
        STANDARD.encode(sps),
        STANDARD.encode(pps)
    );
    s
}

/// The parameter sets from an H.264 fmtp's sprop-parameter-sets, so the server can send
/// them in-band ahead of the first keyframe for players that ignore the SDP. Entries that
/// are not valid base64 are skipped.
pub fn h264_sprop_parameter_sets(fmtp: &str) -> Vec<Vec<u8>> {
    fmtp.split(';')
        .filter_map(|p| p.trim().split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("sprop-parameter-sets"))
        .map(|(_, v)| {
            v.split(',')
                .filter_map(|b| STANDARD.decode(b.trim()).ok())
                .filter(|b| !b.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
