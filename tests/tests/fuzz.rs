//! Fuzz targets (`vigil_tests::fuzz::targets`, run by the mutation fuzzer of
//! `vigil_tests::fuzz`): the RTSP parser and framing, RTSP
//! authentication headers, SDP, RTP, RTCP, the depacketisers, the recording segment reader,
//! the gossip report decoder and the ONVIF answers' parsers. Each must return for any
//! input — a value or an error, never a panic — and keep its contract (a frame consumes
//! what it parsed, no more).
//!
//! `cargo test -p vigil-tests --test fuzz` runs each briefly; set `VIGIL_FUZZ_ITERS` for
//! long runs. `write_seed_corpus` (ignored) regenerates the binary seeds.

use bytes::Bytes;
use vigil_proto::{rtcp, rtp};
use vigil_tests::fuzz::{iterations, run, targets};

fn fuzz(target: &str, f: fn(&[u8])) {
    let n = run(target, iterations(), f);
    eprintln!("fuzz {target}: {n} executions, no crash");
}

#[test]
fn rtsp_framing() {
    fuzz("rtsp", targets::rtsp);
}

#[test]
fn rtsp_auth_headers() {
    fuzz("auth", targets::auth_headers);
}

#[test]
fn sdp_parser() {
    fuzz("sdp", targets::sdp_parser);
}

#[test]
fn rtp_and_rtcp() {
    fuzz("rtp", targets::rtp_and_rtcp);
    fuzz("rtcp", targets::rtcp_compound);
}

#[test]
fn depacketizers() {
    fuzz("depacketize", targets::depacketizers);
}

#[test]
fn segment_reader() {
    fuzz("segment", targets::segment_reader);
}

#[test]
fn gossip_report_decoder() {
    fuzz("report", targets::gossip_report);
}

#[test]
fn onvif_response_parser() {
    fuzz("onvif", targets::onvif_response);
}

/// Writes the binary seeds (RTP/RTCP packets, depacketiser streams, a recording segment).
/// Text seeds (RTSP, auth, SDP, report) are written by hand.
#[test]
#[ignore]
fn write_seed_corpus() {
    let dir = vigil_tests::workspace().join("tests/fuzz");
    let put = |target: &str, name: &str, bytes: &[u8]| {
        let d = dir.join(target);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), bytes).unwrap();
    };
    let header = |seq: u16, marker: bool, pt: u8| {
        rtp::write_header(&rtp::RtpHeader {
            marker,
            payload_type: pt,
            sequence: seq,
            timestamp: 3000 * u32::from(seq),
            ssrc: 0x1234_5678,
        })
    };
    let packet = |seq: u16, marker: bool, payload: &[u8]| {
        let mut p = header(seq, marker, 96).to_vec();
        p.extend_from_slice(payload);
        p
    };
    // RTP: single NAL, FU-A start/end, STAP-A.
    let single = packet(1, true, &[0x65, 0x88, 0x84, 0x00, 0x33]);
    let fu_start = packet(2, false, &[0x7c, 0x85, 1, 2, 3, 4]);
    let fu_end = packet(3, true, &[0x7c, 0x45, 5, 6, 7]);
    let stap = packet(4, true, &[0x18, 0, 2, 0x67, 0x42, 0, 2, 0x68, 0xce]);
    for (i, p) in [&single, &fu_start, &fu_end, &stap].iter().enumerate() {
        put("rtp", &format!("packet-{i}"), p);
    }
    let sr = rtcp::SenderReport {
        ssrc: 7,
        ntp: 1 << 40,
        rtp_timestamp: 9000,
        packet_count: 10,
        octet_count: 1000,
    };
    put("rtcp", "sender-report", &rtcp::sender_report(&sr, "vigil"));
    put("rtcp", "bye", &rtcp::goodbye(&sr, "vigil"));
    // Depacketiser streams: codec byte + length-prefixed packets.
    let stream = |codec: u8, packets: &[&Vec<u8>]| {
        let mut s = vec![codec];
        for p in packets {
            s.extend_from_slice(&(p.len() as u16).to_be_bytes());
            s.extend_from_slice(p);
        }
        s
    };
    put(
        "depacketize",
        "h264",
        &stream(0, &[&single, &fu_start, &fu_end, &stap]),
    );
    let h265 = packet(5, true, &[0x26, 0x01, 0xaf, 0x00]);
    let h265_fu = packet(6, true, &[0x62, 0x01, 0x93, 1, 2, 3]);
    put("depacketize", "h265", &stream(1, &[&h265, &h265_fu]));
    let aac = packet(7, true, &[0x00, 0x10, 0x00, 0x20, 0x21, 0x10, 0x05, 0x00]);
    put("depacketize", "aac", &stream(2, &[&aac]));
    let pcma = packet(8, true, &[0xd5; 16]);
    put("depacketize", "pcma", &stream(3, &[&pcma]));
    // A one-second recording segment written by the store.
    let root = tempfile::tempdir().unwrap();
    let store = vigil_storage::Store::open(root.path(), "seed", Default::default()).unwrap();
    let mut rec = store
        .recorder(
            "cam",
            vigil_storage::StreamHeader {
                sdp: "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=cam\r\n".into(),
                tracks: vec![vigil_storage::TrackHeader {
                    codec: "H264".into(),
                    clock_rate: 90_000,
                }],
            },
        )
        .unwrap();
    let t0 = 1_700_000_000_000i64;
    for n in 0..10i64 {
        let key = n == 0;
        let mut data = vec![0, 0, 0, 8, if key { 0x65 } else { 0x41 }];
        data.extend([n as u8; 7]);
        rec.write(vigil_storage::Frame {
            track: 0,
            keyframe: key,
            time_ms: t0 + n * 40,
            media_ts: (n * 3600) as u64,
            data: Bytes::from(data),
        })
        .unwrap();
    }
    let meta = rec.finish().unwrap().expect("a segment");
    let seg_dir = root.path();
    let file = walk(seg_dir)
        .into_iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(".seg"))
        })
        .unwrap_or_else(|| panic!("no segment file for {meta:?}"));
    put("segment", "one-second", &std::fs::read(file).unwrap());
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
