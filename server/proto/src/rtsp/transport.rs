//! The Transport header (RFC 2326 §12.39).

use std::fmt;

use super::error::HeaderError;

const HEADER: &str = "Transport";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LowerTransport {
    Udp,
    Tcp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportMode {
    Play,
    Record,
}

/// One transport alternative offered by a client, or the one chosen by the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transport {
    /// `RTP/AVP`, `RTP/AVPF`, `RTP/SAVP` or `RTP/SAVPF`, uppercased; kept as text so the
    /// server, not the parser, decides which profiles it serves.
    pub profile: String,
    pub lower: LowerTransport,
    pub multicast: bool,
    pub client_port: Option<(u16, u16)>,
    pub server_port: Option<(u16, u16)>,
    pub interleaved: Option<(u8, u8)>,
    pub mode: Option<TransportMode>,
    pub ssrc: Option<u32>,
    pub source: Option<String>,
    pub destination: Option<String>,
    pub ttl: Option<u8>,
}

impl Transport {
    /// Starting point for a UDP answer; the server fills in ports.
    pub fn udp_unicast() -> Self {
        Transport {
            profile: "RTP/AVP".to_owned(),
            lower: LowerTransport::Udp,
            multicast: false,
            client_port: None,
            server_port: None,
            interleaved: None,
            mode: None,
            ssrc: None,
            source: None,
            destination: None,
            ttl: None,
        }
    }

    pub fn tcp_interleaved(ch: (u8, u8)) -> Self {
        Transport {
            lower: LowerTransport::Tcp,
            interleaved: Some(ch),
            ..Self::udp_unicast()
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.profile)?;
        if self.lower == LowerTransport::Tcp {
            f.write_str("/TCP")?;
        }
        f.write_str(if self.multicast {
            ";multicast"
        } else {
            ";unicast"
        })?;
        if let Some(d) = &self.destination {
            write!(f, ";destination={d}")?;
        }
        if let Some((a, b)) = self.interleaved {
            write!(f, ";interleaved={a}-{b}")?;
        }
        if let Some(ttl) = self.ttl {
            write!(f, ";ttl={ttl}")?;
        }
        if let Some((a, b)) = self.client_port {
            write!(f, ";client_port={a}-{b}")?;
        }
        if let Some((a, b)) = self.server_port {
            write!(f, ";server_port={a}-{b}")?;
        }
        if let Some(s) = &self.source {
            write!(f, ";source={s}")?;
        }
        if let Some(ssrc) = self.ssrc {
            write!(f, ";ssrc={ssrc:08X}")?;
        }
        match self.mode {
            // Unquoted lowercase: ffmpeg compares the raw word case-insensitively and
            // would not recognise a quoted "RECORD".
            Some(TransportMode::Record) => f.write_str(";mode=record")?,
            Some(TransportMode::Play) => f.write_str(";mode=play")?,
            None => {}
        }
        Ok(())
    }
}

/// Splits on `sep` outside double quotes, since quoted values (`mode="PLAY"`, an IPv6
/// destination) may legally contain separators.
pub(crate) fn split_unquoted(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut in_quotes = false;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if c == '"' {
            in_quotes = !in_quotes;
        } else if c == sep && !in_quotes {
            out.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&s[start..]);
    out
}

/// Parses every alternative in a client's Transport header, in preference order.
///
/// Alternatives we cannot use (non-RTP protocols, malformed parameters) are dropped rather
/// than failing the whole header: clients such as GStreamer list several and expect the
/// server to pick one it understands. Fails only when nothing usable remains, with the
/// first problem found.
pub fn parse_transports(value: &str) -> Result<Vec<Transport>, HeaderError> {
    let mut out = Vec::new();
    let mut first_err = None;
    for spec in split_unquoted(value, ',') {
        let spec = spec.trim();
        if spec.is_empty() {
            continue;
        }
        match parse_one(spec) {
            Ok(t) => out.push(t),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if out.is_empty() {
        return Err(first_err
            .unwrap_or_else(|| HeaderError::malformed(HEADER, value, "no transport given")));
    }
    Ok(out)
}

fn parse_one(spec: &str) -> Result<Transport, HeaderError> {
    let mut parts = split_unquoted(spec, ';').into_iter();
    let proto = parts.next().unwrap_or("").trim();
    let mut t = Transport::udp_unicast();
    let mut pieces = proto.split('/');
    let (p, profile, lower) = (pieces.next(), pieces.next(), pieces.next());
    if pieces.next().is_some() || !p.is_some_and(|p| p.eq_ignore_ascii_case("RTP")) {
        return Err(HeaderError::unsupported(
            HEADER,
            spec,
            "not an RTP transport",
        ));
    }
    let profile = profile.unwrap_or("").to_ascii_uppercase();
    if !matches!(profile.as_str(), "AVP" | "AVPF" | "SAVP" | "SAVPF") {
        return Err(HeaderError::unsupported(
            HEADER,
            spec,
            "unknown RTP profile",
        ));
    }
    t.profile = format!("RTP/{profile}");
    t.lower = match lower.map(str::to_ascii_uppercase).as_deref() {
        None | Some("UDP") => LowerTransport::Udp,
        Some("TCP") => LowerTransport::Tcp,
        Some(_) => {
            return Err(HeaderError::unsupported(
                HEADER,
                spec,
                "unknown lower transport",
            ))
        }
    };

    for param in parts {
        let param = param.trim();
        let (name, val) = match param.split_once('=') {
            Some((n, v)) => (n.trim(), Some(unquote(v.trim()))),
            None => (param, None),
        };
        let bad = |reason| HeaderError::malformed(HEADER, spec, reason);
        let need = |reason| val.ok_or_else(|| bad(reason));
        match name.to_ascii_lowercase().as_str() {
            "unicast" => t.multicast = false,
            "multicast" => t.multicast = true,
            "destination" => t.destination = val.filter(|v| !v.is_empty()).map(str::to_owned),
            "source" => t.source = Some(need("source needs a value")?.to_owned()),
            "interleaved" => {
                let v = need("interleaved needs channels")?;
                t.interleaved = Some(pair(v).ok_or_else(|| bad("bad interleaved channels"))?);
            }
            "client_port" => {
                let v = need("client_port needs ports")?;
                t.client_port = Some(pair(v).ok_or_else(|| bad("bad client_port"))?);
            }
            "server_port" => {
                let v = need("server_port needs ports")?;
                t.server_port = Some(pair(v).ok_or_else(|| bad("bad server_port"))?);
            }
            "ttl" => {
                let v = need("ttl needs a value")?;
                t.ttl = Some(v.parse().map_err(|_| bad("bad ttl"))?);
            }
            "ssrc" => {
                let v = need("ssrc needs a value")?;
                let ok = !v.is_empty() && v.len() <= 8 && v.bytes().all(|b| b.is_ascii_hexdigit());
                if !ok {
                    return Err(bad("ssrc is not 1-8 hex digits"));
                }
                t.ssrc = u32::from_str_radix(v, 16).ok();
            }
            "mode" => {
                let v = need("mode needs a value")?;
                // "receive" is the RFC 2326 draft spelling that ffmpeg still accepts.
                t.mode = Some(match v.to_ascii_lowercase().as_str() {
                    "play" => TransportMode::Play,
                    "record" | "receive" => TransportMode::Record,
                    _ => return Err(bad("unknown mode")),
                });
            }
            // Unknown parameters (layers, port, append, vendor extensions) must be ignored
            // per §12.39 so that newer clients keep working.
            _ => {}
        }
    }
    Ok(t)
}

fn unquote(v: &str) -> &str {
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(v)
}

/// `a-b`, or a lone `a` meaning `a-(a+1)`: RTP takes the even port or channel and RTCP the
/// next one, so clients often name only the first.
fn pair<T>(v: &str) -> Option<(T, T)>
where
    T: std::str::FromStr + TryFrom<u32> + Copy,
    u32: From<T>,
{
    let num = |s: &str| -> Option<T> {
        let s = s.trim();
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    match v.split_once('-') {
        Some((a, b)) => Some((num(a)?, num(b)?)),
        None => {
            let a = num(v)?;
            let b = T::try_from(u32::from(a) + 1).ok()?;
            Some((a, b))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ffmpeg_record_udp() {
        let t =
            parse_transports("RTP/AVP/UDP;unicast;client_port=20000-20001;mode=record").unwrap();
        assert_eq!(
            t,
            vec![Transport {
                client_port: Some((20000, 20001)),
                mode: Some(TransportMode::Record),
                ..Transport::udp_unicast()
            }]
        );
    }

    #[test]
    fn gstreamer_tcp_record_and_alternatives() {
        let t = parse_transports("RTP/AVP/TCP;unicast;interleaved=0-1;mode=record").unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].lower, LowerTransport::Tcp);
        assert_eq!(t[0].interleaved, Some((0, 1)));
        assert_eq!(t[0].mode, Some(TransportMode::Record));

        let v = "RTP/AVP;unicast;client_port=41234-41235,RTP/AVP/TCP;unicast;interleaved=0-1, RTP/AVP;multicast;destination=224.1.2.3;port=5000-5001;ttl=16";
        let t = parse_transports(v).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].client_port, Some((41234, 41235)));
        assert_eq!(t[0].lower, LowerTransport::Udp);
        assert_eq!(t[1], Transport::tcp_interleaved((0, 1)));
        assert!(t[2].multicast);
        assert_eq!(t[2].destination.as_deref(), Some("224.1.2.3"));
        assert_eq!(t[2].ttl, Some(16));
    }

    #[test]
    fn single_values_and_quirks() {
        let t = parse_transports("rtp/avp/tcp;interleaved=4;mode=\"RECORD\";ssrc=0a0b0c0d")
            .unwrap()
            .remove(0);
        assert_eq!(t.interleaved, Some((4, 5)));
        assert_eq!(t.mode, Some(TransportMode::Record));
        assert_eq!(t.ssrc, Some(0x0a0b0c0d));
        assert_eq!(t.profile, "RTP/AVP");
        let t = parse_transports("RTP/AVP;client_port=5000;mode=PLAY;x-foo=bar;append")
            .unwrap()
            .remove(0);
        assert_eq!(t.client_port, Some((5000, 5001)));
        assert_eq!(t.mode, Some(TransportMode::Play));
        let t = parse_transports("RTP/SAVPF;unicast;mode=receive")
            .unwrap()
            .remove(0);
        assert_eq!(t.profile, "RTP/SAVPF");
        assert_eq!(t.mode, Some(TransportMode::Record));
    }

    #[test]
    fn unknown_specs_skipped() {
        let t = parse_transports("RAW/RAW/UDP;unicast,RTP/AVP;client_port=1-2").unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].client_port, Some((1, 2)));
        let e = parse_transports("RAW/RAW/UDP;unicast").unwrap_err();
        assert!(matches!(e, HeaderError::Unsupported { .. }));
        assert_eq!(e.status(), crate::rtsp::StatusCode::UNSUPPORTED_TRANSPORT);
        assert!(e.to_string().contains("RAW/RAW/UDP"), "{e}");
        for bad in [
            "",
            " , ",
            "RTP/AVP;client_port=abc",
            "RTP/AVP;client_port=65535",
            "RTP/AVP/TCP;interleaved=255",
            "RTP/AVP/TCP;interleaved=0-256",
            "RTP/AVP;ssrc=123456789",
            "RTP/AVP;ssrc=xyz",
            "RTP/AVP;mode=fly",
            "RTP/AVP;ttl=300",
            "RTP/AVP/SCTP",
            "RTP/XYZ",
            "RTP",
            "RTP/AVP/UDP/EXTRA",
        ] {
            assert!(parse_transports(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn display() {
        let mut t = Transport::tcp_interleaved((0, 1));
        t.ssrc = Some(0x0A0B0C0D);
        assert_eq!(
            t.to_string(),
            "RTP/AVP/TCP;unicast;interleaved=0-1;ssrc=0A0B0C0D"
        );
        let t = Transport {
            client_port: Some((5000, 5001)),
            server_port: Some((6000, 6001)),
            source: Some("127.0.0.1".into()),
            ssrc: Some(1),
            mode: Some(TransportMode::Record),
            ..Transport::udp_unicast()
        };
        let s = t.to_string();
        assert_eq!(
            s,
            "RTP/AVP;unicast;client_port=5000-5001;server_port=6000-6001;source=127.0.0.1;ssrc=00000001;mode=record"
        );
        assert_eq!(parse_transports(&s).unwrap(), vec![t]);
    }
}
