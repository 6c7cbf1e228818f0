//! Property tests: hostile input must never panic and must respect the framing contract.

use proptest::prelude::*;

use super::*;

const SAMPLES: &[&[u8]] = &[
    b"SETUP rtsp://127.0.0.1:8554/live/cam/streamid=0 RTSP/1.0\r\nTransport: RTP/AVP/UDP;unicast;client_port=20000-20001;mode=record\r\nCSeq: 3\r\nUser-Agent: Lavf59.27.100\r\nSession: 3f2a\r\n\r\n",
    b"ANNOUNCE rtsp://h/x RTSP/1.0\r\nCSeq: 2\r\nContent-Type: application/sdp\r\nContent-Length: 10\r\n\r\nv=0\r\ns=x\r\n",
    b"RTSP/1.0 200 OK\r\nCSeq: 1\r\nPublic: OPTIONS\r\n\r\n",
    b"$\x00\x00\x04abcdPLAY rtsp://h/x RTSP/1.0\nCSeq: 5\nRange: npt=0-\n\n",
];

/// Checks the contract every caller relies on, for any input.
fn check(buf: &[u8], limits: &Limits) {
    match parse_frame(buf, limits) {
        Ok(Some((_, n))) => {
            assert!(n > 0, "a frame must consume bytes");
            assert!(n <= buf.len(), "consumed {n} of {}", buf.len());
        }
        Ok(None) => {}
        Err(e) => {
            if let Some(n) = e.resync() {
                assert!(n > 0 && n <= buf.len(), "resync {n} of {}", buf.len());
            }
            let _ = (e.status(), e.cseq(), e.to_string());
        }
    }
}

fn mutate(base: &[u8], edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut v = base.to_vec();
    for &(pos, byte, op) in edits {
        let i = if v.is_empty() { 0 } else { pos % (v.len() + 1) };
        match op % 4 {
            0 if i < v.len() => v[i] = byte,
            1 => v.insert(i, byte),
            2 if i < v.len() => {
                v.remove(i);
            }
            _ => v.truncate(i),
        }
    }
    v
}

proptest! {
    #[test]
    fn random_bytes(buf in proptest::collection::vec(any::<u8>(), 0..512)) {
        check(&buf, &Limits::default());
        check(&buf, &Limits { max_header_bytes: 16, max_body_bytes: 4 });
    }

    #[test]
    fn mutated_samples(
        which in 0..SAMPLES.len(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..8),
        max_header in 1usize..300,
    ) {
        let buf = mutate(SAMPLES[which], &edits);
        check(&buf, &Limits::default());
        check(&buf, &Limits { max_header_bytes: max_header, max_body_bytes: 8 });
    }

    /// A valid stream cut anywhere yields the same frames as the whole.
    #[test]
    fn split_anywhere(cut in 0usize..400) {
        let stream: Vec<u8> = SAMPLES.concat();
        let cut = cut.min(stream.len());
        let limits = Limits::default();
        let mut whole = Vec::new();
        let mut pos = 0;
        while let Some((f, n)) = parse_frame(&stream[pos..], &limits).unwrap() {
            whole.push(f);
            pos += n;
        }
        prop_assert_eq!(pos, stream.len());
        let mut pieces = Vec::new();
        let mut buf = stream[..cut].to_vec();
        for chunk in [&stream[cut..], &[][..]] {
            while let Some((f, n)) = parse_frame(&buf, &limits).unwrap() {
                pieces.push(f);
                buf.drain(..n);
            }
            buf.extend_from_slice(chunk);
        }
        while let Some((f, n)) = parse_frame(&buf, &limits).unwrap() {
            pieces.push(f);
            buf.drain(..n);
        }
        prop_assert_eq!(whole, pieces);
    }

    #[test]
    fn header_parsers_never_panic(s in "\\PC{0,80}") {
        let _ = parse_transports(&s);
        let _ = Range::parse(&s);
        let _ = parse_scale(&s);
        let _ = SessionHeader::parse(&s);
        let _ = parse_rtp_info(&s);
        let _ = UtcTime::parse_clock(&s);
        let _ = UtcTime::parse_rfc3339(&s);
    }

    #[test]
    fn header_parsers_structured_noise(s in "[a-zA-Z0-9=;,:.+\"/ -]{0,60}") {
        let _ = parse_transports(&s);
        let _ = Range::parse(&format!("npt={s}"));
        let _ = Range::parse(&format!("clock={s}"));
        let _ = parse_rtp_info(&format!("url={s}"));
        let _ = UtcTime::parse_rfc3339(&s);
    }

    #[test]
    fn utc_round_trip(ms in -62_000_000_000_000i64..253_000_000_000_000i64) {
        let t = UtcTime { unix_millis: ms };
        prop_assert_eq!(UtcTime::parse_clock(&t.to_clock_string()), Ok(t));
        prop_assert_eq!(UtcTime::parse_rfc3339(&t.to_rfc3339()), Ok(t));
    }

    #[test]
    fn transport_round_trip(
        tcp in any::<bool>(),
        ch in any::<(u8, u8)>(),
        cp in proptest::option::of(any::<(u16, u16)>()),
        ssrc in proptest::option::of(any::<u32>()),
        record in proptest::option::of(any::<bool>()),
    ) {
        let mut t = if tcp { Transport::tcp_interleaved(ch) } else { Transport::udp_unicast() };
        t.client_port = cp;
        t.server_port = cp.map(|(a, b)| (b, a));
        t.ssrc = ssrc;
        t.mode = record.map(|r| if r { TransportMode::Record } else { TransportMode::Play });
        prop_assert_eq!(parse_transports(&t.to_string()), Ok(vec![t]));
    }

    #[test]
    fn request_round_trip(
        method in "[A-Z_]{1,12}",
        path in "[a-z0-9/=.]{0,30}",
        cseq in any::<u32>(),
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut req = Request::new(Method::parse(&method), format!("rtsp://h/{path}"))
            .header("CSeq", cseq.to_string());
        if !body.is_empty() {
            req = req.body("application/octet-stream", body);
        }
        let bytes = req.to_bytes();
        let parsed = parse_frame(&bytes, &Limits::default()).unwrap();
        prop_assert_eq!(parsed, Some((Frame::Request(req), bytes.len())));
    }
}
