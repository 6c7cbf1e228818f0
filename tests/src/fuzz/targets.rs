//! The eight fuzz targets, each a function of one input. Shared by the stable mutation
//! fuzzer (`tests/tests/fuzz.rs`) and the coverage-guided libFuzzer targets in `fuzz/`
//! (nightly, cargo-fuzz), so both drive the same code under the same contracts: return for
//! any input — a value or an error, never a panic — and a frame consumes what it parsed,
//! no more.

use bytes::Bytes;
use vigil_proto::codec::Codec;
use vigil_proto::depacketize::Depacketizer;
use vigil_proto::rtsp::{auth, parse_frame, Limits};
use vigil_proto::{rtcp, rtp, sdp};

/// RTSP framing: requests, responses and interleaved frames.
pub fn rtsp(data: &[u8]) {
    match parse_frame(data, &Limits::default()) {
        Ok(Some((_, used))) => assert!(used > 0 && used <= data.len()),
        Ok(None) => {}
        Err(e) => {
            if let Some(n) = e.resync() {
                assert!(n <= data.len());
            }
            let _ = (e.status(), e.cseq(), e.to_string());
        }
    }
}

/// The RTSP authentication headers: parsing, answering a challenge, checking a nonce.
pub fn auth_headers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = auth::parse_authorization(&text);
    let _ = auth::answer_challenge(&text, ("u", "p"), "DESCRIBE", "rtsp://h/x", ("c", 1));
    let _ = auth::check_nonce(b"key", b"conn", &text, 1_000, 100);
}

/// SDP parsing, then rendering what parsed.
pub fn sdp_parser(data: &[u8]) {
    if let Ok(s) = sdp::parse(&String::from_utf8_lossy(data)) {
        let _ = s.render("127.0.0.1", 1, "npt=now-");
    }
}

/// RTP (the payload range lies within the packet) and RTCP over the same bytes.
pub fn rtp_and_rtcp(data: &[u8]) {
    if let Ok((_, payload)) = rtp::parse(data) {
        assert!(payload.end <= data.len() && payload.start <= payload.end);
    }
    let _ = rtcp::parse_compound(data);
}

/// RTCP compound packets.
pub fn rtcp_compound(data: &[u8]) {
    let _ = rtcp::parse_compound(data);
}

/// Input: one byte choosing the codec, then RTP packets each prefixed by a 2-byte length.
pub fn depacketizers(data: &[u8]) {
    let Some((&which, mut rest)) = data.split_first() else {
        return;
    };
    let (codec, rate, fmtp) = match which % 4 {
        0 => (Codec::H264, 90_000, None),
        1 => (Codec::H265, 90_000, None),
        2 => (
            Codec::Aac,
            48_000,
            Some("mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1190"),
        ),
        _ => (Codec::Pcma, 8_000, None),
    };
    let Ok(mut d) = Depacketizer::new(codec, rate, fmtp) else {
        return;
    };
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let end = (2 + len).min(rest.len());
        if let Ok((header, payload)) = rtp::parse(&rest[2..end]) {
            let _ = d.push(&header, &rest[2..end][payload]);
        }
        while d.pull().is_some() {}
        rest = &rest[end..];
    }
    d.flush();
    while d.pull().is_some() {}
}

/// The recording segment reader: the input as it is, then with its last four bytes replaced
/// by the CRC-32 of the rest. A mutated segment almost never carries a valid checksum, so
/// without the second call no fuzzer gets past the check into the header, frame index and
/// trailer decoding that a torn or foreign file on the shared root would exercise.
pub fn segment_reader(data: &[u8]) {
    let _ = vigil_storage::format::decode_segment(Bytes::copy_from_slice(data));
    if let Some(body_len) = data.len().checked_sub(4) {
        let mut sealed = data.to_vec();
        let crc = crc32fast::hash(&data[..body_len]);
        sealed[body_len..].copy_from_slice(&crc.to_le_bytes());
        let _ = vigil_storage::format::decode_segment(Bytes::from(sealed));
    }
}

/// ONVIF answers (SOAP bodies and faults, profiles, stream URI, clock, services, PTZ
/// presets) and WS-Discovery ProbeMatches: every `vigil_onvif` parser.
pub fn onvif_response(data: &[u8]) {
    vigil_onvif::fuzz_parsers(data);
}

/// The gossip `Report` decoder.
pub fn gossip_report(data: &[u8]) {
    let _ = serde_json::from_slice::<vigil_server::cluster::report::Report>(data);
}
