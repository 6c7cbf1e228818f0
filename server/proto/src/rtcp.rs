//! RTCP (RFC 3550 §6): the few compound packets a forwarding server and its test client send,
//! and a validating parser for what peers send back.
//!
//! We only *send* SR/RR without report blocks: the server does not compute reception
//! statistics, it only needs viewers to be able to map RTP time to wall-clock time (lip sync)
//! and to see a BYE when a stream ends. Incoming RTCP is parsed mostly to tell keepalives
//! and BYEs apart from garbage, so unknown packet types are reported, not rejected.

use std::time::Duration;

const PT_SR: u8 = 200;
const PT_RR: u8 = 201;
const PT_SDES: u8 = 202;
const PT_BYE: u8 = 203;
const PT_APP: u8 = 204;
const SDES_CNAME: u8 = 1;

/// Seconds between the NTP epoch (1900) and the Unix epoch (1970).
const NTP_UNIX_OFFSET_SECS: u64 = 2_208_988_800;

/// NTP 64-bit timestamp from time since the Unix epoch.
///
/// Takes the time as an argument because this crate never reads clocks: the caller decides
/// which clock (and which instant) the sender report describes.
pub fn ntp_timestamp(since_unix_epoch: Duration) -> u64 {
    let secs = since_unix_epoch
        .as_secs()
        .wrapping_add(NTP_UNIX_OFFSET_SECS);
    let frac = (u64::from(since_unix_epoch.subsec_nanos()) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SenderReport {
    pub ssrc: u32,
    pub ntp: u64,
    pub rtp_timestamp: u32,
    pub packet_count: u32,
    pub octet_count: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RtcpPacket {
    SenderReport(SenderReport),
    /// `sources`: the SSRC each report block is about (the streams the reporter receives).
    ReceiverReport {
        ssrc: u32,
        sources: Vec<u32>,
    },
    SourceDescription,
    Bye {
        ssrcs: Vec<u32>,
    },
    App,
    Other {
        packet_type: u8,
    },
}

/// What was wrong with the RTCP the peer sent.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RtcpError {
    #[error("empty RTCP packet")]
    Empty,
    #[error("RTCP packet at offset {offset} has only {len} bytes, less than a 4-byte header")]
    TooShort { offset: usize, len: usize },
    #[error("RTCP packet at offset {offset} has version {version}, expected 2")]
    BadVersion { offset: usize, version: u8 },
    #[error(
        "RTCP packet at offset {offset} declares {declared} bytes but only {available} remain"
    )]
    LengthOverrun {
        offset: usize,
        declared: usize,
        available: usize,
    },
    #[error("RTCP packet type {packet_type} at offset {offset} is {len} bytes, too short for its {count} items")]
    Truncated {
        offset: usize,
        packet_type: u8,
        count: u8,
        len: usize,
    },
    #[error("RTCP packet at offset {offset} has invalid padding count {padding}")]
    BadPadding { offset: usize, padding: u8 },
}

/// Appends the common header; `length` is the packet size in 32-bit words minus one.
fn put_header(out: &mut Vec<u8>, count: u8, packet_type: u8, total_len: usize) {
    out.push(0x80 | (count & 0x1f));
    out.push(packet_type);
    let words = (total_len / 4).saturating_sub(1) as u16;
    out.extend_from_slice(&words.to_be_bytes());
}

fn put_sr(out: &mut Vec<u8>, sr: &SenderReport) {
    put_header(out, 0, PT_SR, 28);
    out.extend_from_slice(&sr.ssrc.to_be_bytes());
    out.extend_from_slice(&sr.ntp.to_be_bytes());
    out.extend_from_slice(&sr.rtp_timestamp.to_be_bytes());
    out.extend_from_slice(&sr.packet_count.to_be_bytes());
    out.extend_from_slice(&sr.octet_count.to_be_bytes());
}

fn put_sdes_cname(out: &mut Vec<u8>, ssrc: u32, cname: &str) {
    // An SDES item length is one octet; cut at a char boundary so the text stays UTF-8.
    let mut end = cname.len().min(255);
    while !cname.is_char_boundary(end) {
        end -= 1;
    }
    let text = &cname.as_bytes()[..end];
    // chunk = ssrc + type + len + text + at least one null octet, padded to 32 bits.
    let chunk = (4 + 2 + text.len() + 1).div_ceil(4) * 4;
    put_header(out, 1, PT_SDES, 4 + chunk);
    out.extend_from_slice(&ssrc.to_be_bytes());
    out.push(SDES_CNAME);
    out.push(text.len() as u8);
    out.extend_from_slice(text);
    out.resize(out.len() + chunk - (4 + 2 + text.len()), 0);
}

fn put_bye(out: &mut Vec<u8>, ssrc: u32) {
    put_header(out, 1, PT_BYE, 8);
    out.extend_from_slice(&ssrc.to_be_bytes());
}

/// Compound RTCP packet: SR (no report blocks) + SDES with CNAME (RFC 3550 §6.1 requires
/// SDES CNAME in every compound packet; some players ignore SRs without it).
pub fn sender_report(sr: &SenderReport, cname: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_sr(&mut out, sr);
    put_sdes_cname(&mut out, sr.ssrc, cname);
    out
}

/// Compound: SR + SDES CNAME + BYE for the ssrc (what a sender sends when it ends the
/// stream, so viewers stop waiting instead of timing out).
pub fn goodbye(sr: &SenderReport, cname: &str) -> Vec<u8> {
    let mut out = sender_report(sr, cname);
    put_bye(&mut out, sr.ssrc);
    out
}

/// Compound RR (no report blocks) + SDES CNAME; what a receiver (our test client / pull
/// ingest) sends as keepalive, since many servers and cameras time a session out on RTCP.
pub fn receiver_report(ssrc: u32, cname: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    put_header(&mut out, 0, PT_RR, 8);
    out.extend_from_slice(&ssrc.to_be_bytes());
    put_sdes_cname(&mut out, ssrc, cname);
    out
}

fn be32(b: &[u8], at: usize) -> u32 {
    // Callers check lengths first; a short slice yields 0 rather than a panic.
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
        .unwrap_or(0)
}

/// Validates a compound packet (version, lengths add up); garbage -> error.
///
/// Deliberately does not insist that the first packet is SR/RR (RFC 3550 A.2): reduced-size
/// RTCP (RFC 5506) and some cameras send a lone BYE or APP, and rejecting those would only
/// hide a peer's goodbye.
pub fn parse_compound(buf: &[u8]) -> Result<Vec<RtcpPacket>, RtcpError> {
    if buf.is_empty() {
        return Err(RtcpError::Empty);
    }
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < buf.len() {
        let rest = &buf[offset..];
        if rest.len() < 4 {
            return Err(RtcpError::TooShort {
                offset,
                len: rest.len(),
            });
        }
        let version = rest[0] >> 6;
        if version != 2 {
            return Err(RtcpError::BadVersion { offset, version });
        }
        let declared = (usize::from(u16::from_be_bytes([rest[2], rest[3]])) + 1) * 4;
        if declared > rest.len() {
            return Err(RtcpError::LengthOverrun {
                offset,
                declared,
                available: rest.len(),
            });
        }
        let mut pkt = &rest[..declared];
        if rest[0] & 0x20 != 0 {
            let padding = pkt[declared - 1];
            if padding == 0 || usize::from(padding) > declared - 4 {
                return Err(RtcpError::BadPadding { offset, padding });
            }
            pkt = &pkt[..declared - usize::from(padding)];
        }
        let count = rest[0] & 0x1f;
        let packet_type = rest[1];
        let truncated = RtcpError::Truncated {
            offset,
            packet_type,
            count,
            len: pkt.len(),
        };
        let need = |n: usize| {
            if pkt.len() < n {
                Err(truncated.clone())
            } else {
                Ok(())
            }
        };
        out.push(match packet_type {
            PT_SR => {
                need(28 + 24 * usize::from(count))?;
                RtcpPacket::SenderReport(SenderReport {
                    ssrc: be32(pkt, 4),
                    ntp: (u64::from(be32(pkt, 8)) << 32) | u64::from(be32(pkt, 12)),
                    rtp_timestamp: be32(pkt, 16),
                    packet_count: be32(pkt, 20),
                    octet_count: be32(pkt, 24),
                })
            }
            PT_RR => {
                need(8 + 24 * usize::from(count))?;
                RtcpPacket::ReceiverReport {
                    ssrc: be32(pkt, 4),
                    sources: (0..usize::from(count))
                        .map(|i| be32(pkt, 8 + 24 * i))
                        .collect(),
                }
            }
            PT_SDES => RtcpPacket::SourceDescription,
            PT_BYE => {
                need(4 + 4 * usize::from(count))?;
                RtcpPacket::Bye {
                    ssrcs: (0..usize::from(count))
                        .map(|i| be32(pkt, 4 + 4 * i))
                        .collect(),
                }
            }
            PT_APP => {
                need(12)?;
                RtcpPacket::App
            }
            other => RtcpPacket::Other { packet_type: other },
        });
        offset += declared;
    }
    Ok(out)
}

/// RTP and RTCP share a port/channel sometimes; RFC 5761 §4 rule (second byte 192..=223 =>
/// RTCP, since those values would be RTP payload types 64..=95 that RTP/AVP never assigns).
pub fn looks_like_rtcp(buf: &[u8]) -> bool {
    buf.len() >= 4 && buf[0] >> 6 == 2 && (192..=223).contains(&buf[1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sr() -> SenderReport {
        SenderReport {
            ssrc: 0x1234_5678,
            ntp: ntp_timestamp(Duration::new(1_700_000_000, 500_000_000)),
            rtp_timestamp: 90_000,
            packet_count: 10,
            octet_count: 12_345,
        }
    }

    #[test]
    fn ntp_conversion() {
        assert_eq!(ntp_timestamp(Duration::ZERO), 2_208_988_800u64 << 32);
        let t = ntp_timestamp(Duration::new(1, 500_000_000));
        assert_eq!(t >> 32, 2_208_988_801);
        assert_eq!(t & 0xffff_ffff, 0x8000_0000);
    }

    #[test]
    fn sender_report_round_trip() {
        let bytes = sender_report(&sr(), "vigil@node1");
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(&bytes[..4], &[0x80, 200, 0, 6]);
        assert!(looks_like_rtcp(&bytes));
        assert_eq!(
            parse_compound(&bytes).unwrap(),
            vec![
                RtcpPacket::SenderReport(sr()),
                RtcpPacket::SourceDescription
            ]
        );
        // The CNAME is in the SDES chunk, null-terminated.
        let sdes = &bytes[28..];
        assert_eq!(sdes[1], 202);
        assert_eq!(sdes[8], 1);
        assert_eq!(sdes[9] as usize, "vigil@node1".len());
        assert_eq!(&sdes[10..21], b"vigil@node1");
        assert_eq!(sdes[21], 0);
    }

    #[test]
    fn goodbye_round_trip() {
        let bytes = goodbye(&sr(), "x");
        assert_eq!(
            parse_compound(&bytes).unwrap(),
            vec![
                RtcpPacket::SenderReport(sr()),
                RtcpPacket::SourceDescription,
                RtcpPacket::Bye {
                    ssrcs: vec![0x1234_5678]
                }
            ]
        );
    }

    #[test]
    fn receiver_report_round_trip() {
        for cname in ["", "abc", "abcd", "a-much-longer-cname@192.168.1.10"] {
            let bytes = receiver_report(7, cname);
            assert_eq!(bytes.len() % 4, 0, "{cname}");
            assert_eq!(
                parse_compound(&bytes).unwrap(),
                vec![
                    RtcpPacket::ReceiverReport {
                        ssrc: 7,
                        sources: vec![]
                    },
                    RtcpPacket::SourceDescription
                ]
            );
        }
    }

    #[test]
    fn long_cname_is_cut_at_char_boundary() {
        let cname = "é".repeat(200);
        let bytes = receiver_report(7, &cname);
        assert_eq!(bytes[8 + 9], 254);
        assert!(parse_compound(&bytes).is_ok());
    }

    #[test]
    fn parses_report_blocks_and_app() {
        // RR with one report block (about SSRC 0x0a0b0c0d), then APP "test".
        let mut b = vec![0x81, 201, 0, 7, 0, 0, 0, 9];
        b.extend_from_slice(&[0x0a, 0x0b, 0x0c, 0x0d]);
        b.extend_from_slice(&[0; 20]);
        b.extend_from_slice(&[0x80, 204, 0, 2, 0, 0, 0, 9, b't', b'e', b's', b't']);
        b.extend_from_slice(&[0x80, 210, 0, 0]);
        assert_eq!(
            parse_compound(&b).unwrap(),
            vec![
                RtcpPacket::ReceiverReport {
                    ssrc: 9,
                    sources: vec![0x0a0b_0c0d]
                },
                RtcpPacket::App,
                RtcpPacket::Other { packet_type: 210 }
            ]
        );
    }

    #[test]
    fn garbage_rejected() {
        assert_eq!(parse_compound(&[]), Err(RtcpError::Empty));
        assert!(matches!(
            parse_compound(&[0x80, 200, 0]),
            Err(RtcpError::TooShort { .. })
        ));
        assert!(matches!(
            parse_compound(b"GET / HTTP/1.1\r\n"),
            Err(RtcpError::BadVersion { version: 1, .. })
        ));
        let mut bytes = sender_report(&sr(), "x");
        bytes.truncate(bytes.len() - 4);
        assert!(matches!(
            parse_compound(&bytes),
            Err(RtcpError::LengthOverrun { offset: 28, .. })
        ));
        // SR claiming one report block it does not carry.
        let mut bytes = sender_report(&sr(), "x");
        bytes[0] = 0x81;
        assert!(matches!(
            parse_compound(&bytes),
            Err(RtcpError::Truncated { count: 1, .. })
        ));
        // BYE claiming 3 SSRCs in one word.
        assert!(matches!(
            parse_compound(&[0x83, 203, 0, 1, 0, 0, 0, 1]),
            Err(RtcpError::Truncated { .. })
        ));
        // Padding count larger than the packet.
        assert!(matches!(
            parse_compound(&[0xa0, 201, 0, 1, 0, 0, 0, 9]),
            Err(RtcpError::BadPadding { padding: 9, .. })
        ));
    }

    #[test]
    fn rtcp_demux() {
        assert!(looks_like_rtcp(&[0x80, 200, 0, 6]));
        assert!(looks_like_rtcp(&[0x80, 223, 0, 6]));
        assert!(!looks_like_rtcp(&[0x80, 96, 0, 1]));
        assert!(!looks_like_rtcp(&[0x80, 0xe0, 0, 1])); // RTP PT 96 with marker
        assert!(!looks_like_rtcp(&[0x80, 200]));
        assert!(!looks_like_rtcp(&[0x00, 200, 0, 6]));
    }

    proptest! {
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_compound(&data);
            let _ = looks_like_rtcp(&data);
        }

        #[test]
        fn parse_never_panics_on_valid_headers(
            chunks in proptest::collection::vec((any::<u8>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..8)), 1..5)
        ) {
            // Bias towards well-formed lengths so the per-type branches get exercised.
            let mut data = Vec::new();
            for (first, pt, words) in chunks {
                data.push(0x80 | (first & 0x3f));
                data.push(pt);
                data.extend_from_slice(&(words.len() as u16).to_be_bytes());
                for w in words {
                    data.extend_from_slice(&[w, w, w, w]);
                }
            }
            let _ = parse_compound(&data);
        }
    }
}
